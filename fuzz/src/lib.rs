//! Oracles shared by the fuzz targets.
//!
//! [`EventStream`] is a compact event-stream interpreter written from the
//! HTML standard, §9.2.6 "Interpreting an event stream", independently of
//! `gapless::sse`, so that the `sse_framing` target checks the encoder
//! against what a browser's `EventSource` would make of its output.

/// One event as an `EventSource` dispatches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dispatched {
    /// The event type buffer, or `"message"` when it was empty.
    pub event_type: String,
    /// The data buffer less its one trailing LF.
    pub data: String,
    /// The last event ID string at dispatch time.
    pub last_event_id: String,
}

/// What a whole stream did to an `EventSource`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventStream {
    /// Dispatched events, in order.
    pub events: Vec<Dispatched>,
    /// The last event ID buffer when the stream ended.
    pub last_event_id_buffer: String,
    /// The reconnection time, when a `retry` field with only ASCII digits
    /// set it (kept as text: the standard's integer has no upper bound).
    pub retry: Option<String>,
    /// Names of fields that are none of `event`, `data`, `id`, `retry`
    /// (the standard ignores them; an encoder should never write them).
    pub unknown_fields: Vec<String>,
    /// `id` fields ignored because their value contained U+0000.
    pub ignored_ids: usize,
    /// Comment lines (starting with `:`).
    pub comments: usize,
    /// Bytes after the last end of line: an incomplete line, discarded.
    pub trailing: String,
    /// Whether an event was still being built (data or type buffered, or
    /// any field seen) when the stream ended: it is never dispatched.
    pub pending: bool,
}

impl EventStream {
    /// Interprets `stream` the way §9.2.6 does: UTF-8 decode (invalid
    /// sequences become U+FFFD), drop one leading BOM, split into lines at
    /// CRLF, LF or CR, and process each line.
    pub fn interpret(stream: &[u8]) -> Self {
        let decoded = String::from_utf8_lossy(stream);
        let mut rest: &str = decoded.strip_prefix('\u{FEFF}').unwrap_or(&decoded);
        let mut out = Self::default();
        let mut data = String::new();
        let mut event_type = String::new();
        while let Some(end) = rest.find(['\r', '\n']) {
            let line = &rest[..end];
            let eol = if rest[end..].starts_with("\r\n") {
                2
            } else {
                1
            };
            rest = &rest[end + eol..];
            if line.is_empty() {
                // Dispatch. The last event ID string is set even when the
                // event itself is dropped for having no data.
                let last_event_id_string = out.last_event_id_buffer.clone();
                if data.is_empty() {
                    event_type.clear();
                } else {
                    if data.ends_with('\n') {
                        data.pop();
                    }
                    out.events.push(Dispatched {
                        event_type: if event_type.is_empty() {
                            "message".to_owned()
                        } else {
                            std::mem::take(&mut event_type)
                        },
                        data: std::mem::take(&mut data),
                        last_event_id: last_event_id_string,
                    });
                }
                out.pending = false;
                continue;
            }
            if line.starts_with(':') {
                out.comments += 1;
                continue;
            }
            let (field, value) = match line.split_once(':') {
                Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
                None => (line, ""),
            };
            out.pending = true;
            match field {
                "event" => event_type = value.to_owned(),
                "data" => {
                    data.push_str(value);
                    data.push('\n');
                }
                "id" => {
                    if value.contains('\0') {
                        out.ignored_ids += 1;
                    } else {
                        out.last_event_id_buffer = value.to_owned();
                    }
                }
                "retry" => {
                    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
                        out.retry = Some(value.to_owned());
                    }
                }
                other => out.unknown_fields.push(other.to_owned()),
            }
        }
        out.trailing = rest.to_owned();
        out
    }
}

/// `text` with every `\r\n` and every lone `\r` replaced by `\n`: what an
/// event-stream parser gives back for a payload's line breaks.
pub fn normalize_newlines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' {
            if chars.peek() == Some(&'\n') {
                chars.next();
            }
            out.push('\n');
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `bytes` is exactly the event-ID wire form
/// `<16 lowercase hex>-<decimal u64 without sign or leading zeros>`,
/// decided without `gapless`'s parser.
pub fn is_canonical_event_id(bytes: &[u8]) -> bool {
    let Some((epoch, seq)) = bytes.split_at_checked(16) else {
        return false;
    };
    let Some((b'-', seq)) = seq.split_first() else {
        return false;
    };
    let hex = |b: &u8| b.is_ascii_digit() || (b'a'..=b'f').contains(b);
    if !epoch.iter().all(hex) || seq.is_empty() || !seq.iter().all(u8::is_ascii_digit) {
        return false;
    }
    if seq.len() > 1 && seq[0] == b'0' {
        return false;
    }
    // u64::MAX has 20 digits; compare as equal-length digit strings.
    const MAX: &[u8] = b"18446744073709551615";
    seq.len() < MAX.len() || (seq.len() == MAX.len() && seq <= MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interprets_the_standards_examples() {
        // §9.2.6's examples: two events, the second of which has two lines.
        let s =
            EventStream::interpret(b"data: YHOO\ndata: +2\ndata: 10\n\n: c\ndata:x\r\rdata\n\n");
        assert_eq!(s.events.len(), 3);
        assert_eq!(s.events[0].data, "YHOO\n+2\n10");
        assert_eq!(s.events[1].data, "x");
        assert_eq!(s.events[2].data, "");
        assert_eq!(s.comments, 1);
        // An event with no data is not dispatched, but sets the last ID.
        let s = EventStream::interpret(b"id: 7\n\ndata: a\n\nretry: 10\nfoo\n");
        assert_eq!(s.events[0].last_event_id, "7");
        assert_eq!(s.retry.as_deref(), Some("10"));
        assert_eq!(s.unknown_fields, ["foo"]);
        assert!(s.pending);
        // Only one leading space is stripped; a trailing partial line is dropped.
        let s = EventStream::interpret(b"\xEF\xBB\xBFdata:  two\r\n\r\ndata: never");
        assert_eq!(s.events[0].data, " two");
        assert_eq!(s.trailing, "data: never");
    }

    #[test]
    fn newline_normalization() {
        assert_eq!(normalize_newlines("a\r\nb\rc\n\r\r\nd"), "a\nb\nc\n\n\nd");
    }

    #[test]
    fn canonical_ids() {
        assert!(is_canonical_event_id(b"00c0ffee12345678-0"));
        assert!(is_canonical_event_id(
            b"ffffffffffffffff-18446744073709551615"
        ));
        assert!(!is_canonical_event_id(
            b"ffffffffffffffff-18446744073709551616"
        ));
        assert!(!is_canonical_event_id(b"ffffffffffffffff-01"));
        assert!(!is_canonical_event_id(b"fffffffffffffffF-1"));
        assert!(!is_canonical_event_id(b"ffffffffffffffff-"));
    }
}
