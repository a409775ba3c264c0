//! Server-sent events: an encoder that payload bytes cannot break out of,
//! and the decoder ([`Parser`]) that reads them back.
//!
//! An event is written as `id:` (and optionally `event:`), then one `data:`
//! line per payload line, then a blank line. Every line break in the
//! payload — `\n`, `\r\n` or a lone `\r` — starts a new `data:` line, so a
//! payload can never end the event early or inject an `id:`, `event:` or
//! `retry:` field. A WHATWG-conforming parser such as [`Parser`] gives back
//! the payload with its line breaks normalised to `\n` (compact JSON has
//! none, so it comes back byte for byte).
//!
//! ```
//! use gapless::{sse, EventId};
//! let mut out = Vec::new();
//! sse::encode(&mut out, &EventId { epoch: 1, seq: 2 }, None, b"a\r\nb")?;
//! let mut events = Vec::new();
//! sse::Parser::new().push(&out, |event| events.push(event));
//! assert_eq!(events[0].data, "a\nb");
//! assert_eq!(events[0].last_event_id, "0000000000000001-2");
//! # Ok::<(), gapless::sse::SseError>(())
//! ```

mod parse;

pub use parse::{Parser, SseEvent};

use crate::event_id::EventId;
use std::fmt;

/// Why an event could not be framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SseError {
    /// The payload is not UTF-8 (an SSE stream is UTF-8 text); the byte
    /// offset of the first invalid byte.
    NotUtf8 {
        /// Offset of the first invalid byte.
        at: usize,
    },
    /// The event type is empty or contains a line break.
    BadEventType,
}

impl fmt::Display for SseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotUtf8 { at } => {
                write!(f, "SSE payload is not UTF-8 (invalid byte at offset {at})")
            }
            Self::BadEventType => {
                f.write_str("SSE event type must be non-empty and contain no line break")
            }
        }
    }
}

impl std::error::Error for SseError {}

/// Appends one SSE event to `out`.
///
/// ```
/// use gapless::{sse, EventId};
/// let mut out = Vec::new();
/// let id = EventId { epoch: 0xab, seq: 7 };
/// sse::encode(&mut out, &id, None, b"line one\nid: 99\r\n\r\n")?;
/// assert_eq!(
///     String::from_utf8(out).unwrap(),
///     "id: 00000000000000ab-7\ndata: line one\ndata: id: 99\ndata: \ndata: \n\n"
/// );
/// # Ok::<(), gapless::sse::SseError>(())
/// ```
///
/// # Errors
/// [`SseError::NotUtf8`] or [`SseError::BadEventType`]; `out` is then left
/// as it was.
pub fn encode(
    out: &mut Vec<u8>,
    id: &EventId,
    event_type: Option<&str>,
    payload: &[u8],
) -> Result<(), SseError> {
    frame(out, Some(id), event_type, payload)
}

/// Appends a named event without an ID (for control events such as the
/// reference server's `gap`): `event:` then `data:` lines, then a blank line.
/// A client's last event ID is left untouched by it.
///
/// # Errors
/// As [`encode`].
pub fn encode_unnumbered(
    out: &mut Vec<u8>,
    event_type: &str,
    payload: &[u8],
) -> Result<(), SseError> {
    frame(out, None, Some(event_type), payload)
}

/// Like [`encode_unnumbered`], with each `data` line's value right after
/// its colon (`data:{"a":1}`): a line that starts with a space gets one added,
/// which a client strips, so every line arrives exactly as given. The
/// Durable Streams protocol frames its events so.
///
/// ```
/// use gapless::sse;
/// let mut out = Vec::new();
/// sse::encode_unnumbered_tight(&mut out, "data", b"a\n b")?;
/// assert_eq!(String::from_utf8(out).unwrap(), "event: data\ndata:a\ndata:  b\n\n");
/// # Ok::<(), gapless::sse::SseError>(())
/// ```
///
/// # Errors
/// As [`encode`].
pub fn encode_unnumbered_tight(
    out: &mut Vec<u8>,
    event_type: &str,
    payload: &[u8],
) -> Result<(), SseError> {
    frame_with(out, None, Some(event_type), payload, Spacing::Tight)
}

/// What goes between a field's colon and its value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Spacing {
    /// Always one space (`data: value`).
    Space,
    /// None, unless the value starts with a space (`data:value`).
    Tight,
}

fn frame(
    out: &mut Vec<u8>,
    id: Option<&EventId>,
    event_type: Option<&str>,
    payload: &[u8],
) -> Result<(), SseError> {
    frame_with(out, id, event_type, payload, Spacing::Space)
}

fn frame_with(
    out: &mut Vec<u8>,
    id: Option<&EventId>,
    event_type: Option<&str>,
    payload: &[u8],
    spacing: Spacing,
) -> Result<(), SseError> {
    let payload = std::str::from_utf8(payload).map_err(|e| SseError::NotUtf8 {
        at: e.valid_up_to(),
    })?;
    if let Some(event_type) = event_type {
        if event_type.is_empty() || event_type.contains(['\r', '\n']) {
            return Err(SseError::BadEventType);
        }
    }
    out.reserve(payload.len() + 48);
    if let Some(id) = id {
        out.extend_from_slice(b"id: ");
        out.extend_from_slice(id.to_string().as_bytes());
        out.push(b'\n');
    }
    if let Some(event_type) = event_type {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(event_type.as_bytes());
        out.push(b'\n');
    }
    let mut rest = payload.as_bytes();
    loop {
        let end = rest
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
            .unwrap_or(rest.len());
        let line = &rest[..end];
        match spacing {
            Spacing::Tight if line.first() != Some(&b' ') => out.extend_from_slice(b"data:"),
            _ => out.extend_from_slice(b"data: "),
        }
        out.extend_from_slice(line);
        out.push(b'\n');
        if end == rest.len() {
            break;
        }
        let skip = if rest[end] == b'\r' && rest.get(end + 1) == Some(&b'\n') {
            2
        } else {
            1
        };
        rest = &rest[end + skip..];
    }
    out.push(b'\n');
    Ok(())
}
