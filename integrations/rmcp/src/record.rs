//! What one ring record holds.
//!
//! A stored message is its JSON exactly as `serde_json::to_vec` writes the
//! `ServerJsonRpcMessage` (an object, so its first byte is `{`). Everything
//! else is a short marker whose first byte is not `{`, so that seqs stay
//! dense (one record per event id handed to rmcp):
//!
//! | record | meaning |
//! | --- | --- |
//! | `{…}` | a message, as JSON |
//! | empty | an event with no message and no retry hint |
//! | `r<millis>` | an event with no message: a priming / retry hint |
//! | `L<bytes>` | a message the ring could not hold (`bytes` long): a replay reports it lost |
//! | `C` | the stream was removed from the store: followers end here |
//! | `M` | the stream moved to a larger ring (only in its first ring): followers go on there |

use rmcp::model::ServerJsonRpcMessage;
use std::cell::RefCell;
use std::time::Duration;

/// A thread's JSON buffer above this capacity is dropped after use, so one
/// large message does not stay allocated per thread.
const KEPT_BUFFER: usize = 64 << 10;

thread_local! {
    /// Where [`with_json`] writes: reused, so storing a message allocates
    /// nothing for its JSON (the ring copies it).
    static JSON: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on `value`'s JSON as `serde_json::to_vec` writes it (or the
/// error), written into a buffer this thread reuses.
pub(crate) fn with_json<T>(
    value: &ServerJsonRpcMessage,
    f: impl FnOnce(Result<&[u8], serde_json::Error>) -> T,
) -> T {
    JSON.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buffer) => {
            buffer.clear();
            let result = serde_json::to_writer(&mut *buffer, value);
            let out = f(result.map(|()| buffer.as_slice()));
            if buffer.capacity() > KEPT_BUFFER {
                *buffer = Vec::new();
            }
            out
        }
        // Only if `f` stored JSON itself: a buffer of its own.
        Err(_) => match serde_json::to_vec(value) {
            Ok(json) => f(Ok(&json)),
            Err(error) => f(Err(error)),
        },
    })
}

/// A decoded record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Record<'a> {
    /// A message's JSON.
    Message(&'a [u8]),
    /// An event without a message (a priming event), with its retry hint.
    Marker { retry: Option<Duration> },
    /// A placeholder for a message that was too large for the ring.
    Lost { bytes: u64 },
    /// The stream was removed.
    Closed,
    /// The stream moved to its configured ring.
    Moved,
}

pub(crate) fn marker(retry: Option<Duration>) -> Vec<u8> {
    match retry {
        None => Vec::new(),
        Some(retry) => format!("r{}", retry.as_millis()).into_bytes(),
    }
}

pub(crate) fn lost(bytes: usize) -> Vec<u8> {
    format!("L{bytes}").into_bytes()
}

pub(crate) const CLOSED: &[u8] = b"C";

pub(crate) const MOVED: &[u8] = b"M";

fn number(digits: &[u8]) -> Option<u64> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

pub(crate) fn decode(record: &[u8]) -> Record<'_> {
    match record.split_first() {
        None => Record::Marker { retry: None },
        Some((b'{', _)) => Record::Message(record),
        Some((b'r', millis)) => match number(millis) {
            Some(millis) => Record::Marker {
                retry: Some(Duration::from_millis(millis)),
            },
            None => Record::Lost { bytes: 0 },
        },
        Some((b'L', bytes)) => Record::Lost {
            bytes: number(bytes).unwrap_or(0),
        },
        Some((b'C', [])) => Record::Closed,
        Some((b'M', [])) => Record::Moved,
        // Never written by this crate: reported as a loss, never skipped.
        Some(_) => Record::Lost { bytes: 0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip() {
        assert_eq!(decode(&marker(None)), Record::Marker { retry: None });
        let retry = Some(Duration::from_millis(3000));
        assert_eq!(decode(&marker(retry)), Record::Marker { retry });
        assert_eq!(decode(&lost(1 << 20)), Record::Lost { bytes: 1 << 20 });
        assert_eq!(decode(CLOSED), Record::Closed);
        assert_eq!(decode(MOVED), Record::Moved);
        assert_eq!(decode(b"{\"a\":1}"), Record::Message(b"{\"a\":1}"));
        assert_eq!(decode(b"?"), Record::Lost { bytes: 0 });
        assert_eq!(decode(b"rx"), Record::Lost { bytes: 0 });
        assert!(
            lost(usize::MAX).len() < gapless::config::MIN_BYTES,
            "a placeholder always fits"
        );
    }
}
