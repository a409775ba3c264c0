//! The decoder: an incremental `text/event-stream` parser.

/// One dispatched event of an event stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The event type: the `event:` field, or `"message"`.
    pub event_type: String,
    /// The data buffer, its final line feed removed.
    pub data: String,
    /// The `id:` field if this event's own block carried one (the spec's
    /// last event ID persists across events; this does not).
    pub id: Option<String>,
    /// The spec's last event ID string at dispatch.
    pub last_event_id: String,
}

/// An incremental parser of `text/event-stream`. It follows the WHATWG HTML
/// standard, §9.2.6 "Interpreting an event stream", on bytes that may
/// arrive in chunks of any size, and never panics:
///
/// - the stream is UTF-8; invalid sequences become U+FFFD, and one leading
///   BOM (U+FEFF) is dropped;
/// - a line ends at CRLF, LF or a lone CR; a CR ends its line at once
///   (even as the last byte pushed), and an LF right after it, in the same
///   chunk or the next, is skipped;
/// - a line starting with `:` is a comment;
/// - otherwise the field name runs to the first `:` (or the whole line),
///   and the value is the rest, less one leading space if there is one;
/// - `event` sets the event type; `data` appends the value and a LF to the
///   data buffer; `id` sets the last event ID unless the value contains
///   U+0000; `retry` sets the reconnection time if the value is only ASCII
///   digits; any other field is ignored;
/// - a blank line dispatches: the data buffer less its final LF, with the
///   event type or `message`, and the last event ID, which persists across
///   events; an empty data buffer dispatches nothing (but the event type is
///   reset all the same);
/// - an event not ended by a blank line when the stream ends is discarded
///   (the caller simply stops pushing).
///
/// ```
/// use gapless::sse::Parser;
/// let mut parser = Parser::new();
/// let mut events = Vec::new();
/// parser.push(b"\xEF\xBB\xBF: hi\r\nid: 7\r", |e| events.push(e));
/// parser.push(b"\ndata:  two spaces\ndata\n\n", |e| events.push(e));
/// assert_eq!(events.len(), 1);
/// assert_eq!(events[0].data, " two spaces\n");
/// assert_eq!(events[0].id.as_deref(), Some("7"));
/// assert_eq!(parser.comments(), 1);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Parser {
    line: Vec<u8>,
    skip_lf: bool,
    started: bool,
    data: String,
    event_type: String,
    id_in_block: Option<String>,
    last_event_id: String,
    retry: Option<u64>,
    comments: u64,
}

impl Parser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// The reconnection time the stream last set with `retry:`, in ms (a
    /// value too large for a `u64` is ignored).
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// The last event ID buffer.
    pub fn last_event_id(&self) -> &str {
        &self.last_event_id
    }

    /// Comment lines seen (keep-alives).
    pub fn comments(&self) -> u64 {
        self.comments
    }

    /// Feeds the next bytes of the stream; `dispatch` gets each event
    /// completed by them.
    pub fn push(&mut self, bytes: &[u8], mut dispatch: impl FnMut(SseEvent)) {
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.skip_lf {
                self.skip_lf = false;
                if rest[0] == b'\n' {
                    rest = &rest[1..];
                    continue;
                }
            }
            match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                None => {
                    self.line.extend_from_slice(rest);
                    break;
                }
                Some(end) => {
                    self.line.extend_from_slice(&rest[..end]);
                    self.skip_lf = rest[end] == b'\r';
                    rest = &rest[end + 1..];
                    let line = std::mem::take(&mut self.line);
                    self.process_line(&line, &mut dispatch);
                    self.line = line;
                    self.line.clear();
                }
            }
        }
    }

    fn process_line(&mut self, line: &[u8], dispatch: &mut impl FnMut(SseEvent)) {
        let mut line = line;
        if !self.started {
            self.started = true;
            if let Some(rest) = line.strip_prefix(b"\xEF\xBB\xBF") {
                line = rest;
            }
        }
        // Line breaks are ASCII, so no UTF-8 sequence spans two lines and
        // decoding line by line is decoding the stream.
        let line = String::from_utf8_lossy(line);
        if line.is_empty() {
            self.dispatch(dispatch);
            return;
        }
        if line.starts_with(':') {
            self.comments += 1;
            return;
        }
        let (field, value) = match line.find(':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (&line[..], ""),
        };
        match field {
            "event" => value.clone_into(&mut self.event_type),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            "id" if !value.contains('\0') => {
                value.clone_into(&mut self.last_event_id);
                self.id_in_block = Some(value.to_owned());
            }
            // Only ASCII digits; a value too large for u64 is ignored too.
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                if let Ok(ms) = value.parse() {
                    self.retry = Some(ms);
                }
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, dispatch: &mut impl FnMut(SseEvent)) {
        let id = self.id_in_block.take();
        if self.data.is_empty() {
            self.event_type.clear();
            return;
        }
        let mut data = std::mem::take(&mut self.data);
        if data.ends_with('\n') {
            data.pop();
        }
        let event_type = if self.event_type.is_empty() {
            "message".to_owned()
        } else {
            std::mem::take(&mut self.event_type)
        };
        dispatch(SseEvent {
            event_type,
            data,
            id,
            last_event_id: self.last_event_id.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EventId;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = Parser::new();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.push(chunk, |e| out.push(e));
        }
        out
    }

    fn bytewise(input: &[u8]) -> Vec<SseEvent> {
        let chunks: Vec<&[u8]> = input.chunks(1).collect();
        parse_all(&chunks)
    }

    #[test]
    fn line_endings_cr_lf_crlf_even_split() {
        let input = b"data: a\r\ndata: b\rdata: c\n\rid: 1\r\ndata: d\r\r\n";
        let whole = parse_all(&[input]);
        assert_eq!(whole.len(), 2, "{whole:?}");
        assert_eq!(whole[0].data, "a\nb\nc");
        assert_eq!(whole[0].id, None);
        assert_eq!(
            (whole[1].data.as_str(), whole[1].id.as_deref()),
            ("d", Some("1"))
        );
        assert_eq!(bytewise(input), whole);
        // "\r" then "\n" in separate chunks is ONE line break.
        let split = parse_all(&[b"data: x\r", b"\ndata: y\r", b"\n\r", b"\n"]);
        assert_eq!(split.len(), 1);
        assert_eq!(split[0].data, "x\ny");
    }

    #[test]
    fn bom_comments_fields_and_spaces() {
        let events = bytewise(
            b"\xEF\xBB\xBF:comment\nevent:gap\ndata:{\"a\":1}\ndata:  two\nretry: 3000\nretry: x\nunknown: y\ndata\n\n",
        );
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event_type, "gap");
        assert_eq!(events[0].data, "{\"a\":1}\n two\n");
        let mut parser = Parser::new();
        parser.push(b"retry: 3000\nretry: 12x\n: keep\n", |_| {});
        assert_eq!(parser.retry(), Some(3000));
        assert_eq!(parser.comments(), 1);
        // Only ONE leading BOM is ignored, and only at the very start.
        let events = parse_all(&[b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\n"]);
        assert!(events.is_empty(), "second BOM makes an unknown field");
        let events = parse_all(&[b"data: x\n\n\xEF\xBB\xBFdata: y\n\n"]);
        assert_eq!(events.len(), 1, "a BOM after the start is not dropped");
    }

    #[test]
    fn ids_persist_and_nul_ids_are_ignored() {
        let events =
            parse_all(&[b"id: 5\ndata: a\n\ndata: b\n\nid: 6\0\ndata: c\n\nid\ndata: d\n\n"]);
        let ids: Vec<_> = events
            .iter()
            .map(|e| (e.id.clone(), e.last_event_id.clone()))
            .collect();
        assert_eq!(
            ids,
            vec![
                (Some("5".into()), "5".into()),
                (None, "5".into()),
                (None, "5".into()),
                (Some(String::new()), String::new()),
            ]
        );
    }

    #[test]
    fn empty_data_does_not_dispatch_and_eof_discards() {
        assert!(parse_all(&[b"event: x\n\nid: 3\n\n"]).is_empty());
        let events = parse_all(&[b"data:\n\n"]);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data, "");
        assert!(parse_all(&[b"data: unterminated\n"]).is_empty());
        // The event type does not leak into the next event.
        let events = parse_all(&[b"event: gap\n\ndata: 1\n\n"]);
        assert_eq!(events[0].event_type, "message");
    }

    #[test]
    fn invalid_utf8_is_replaced_and_retry_overflow_ignored() {
        let events = bytewise(b"data: a\xFFb\xE2\x82\nevent: \xC3\n\n");
        assert_eq!(events[0].data, "a\u{FFFD}b\u{FFFD}");
        assert_eq!(events[0].event_type, "\u{FFFD}");
        let mut parser = Parser::new();
        parser.push(b"retry: 7\nretry: 18446744073709551616\n", |_| {});
        assert_eq!(parser.retry(), Some(7));
        parser.push(b"retry: 18446744073709551615\n", |_| {});
        assert_eq!(parser.retry(), Some(u64::MAX));
    }

    #[test]
    fn the_engine_encoder_round_trips() {
        use proptest::prelude::*;
        // Miri interprets every step: a few cases there, the default here.
        let cases = if cfg!(miri) { 4 } else { 256 };
        proptest!(ProptestConfig::with_cases(cases), |(payload in "(?s).{0,64}", cut in 0usize..200)| {
            let mut out = Vec::new();
            let id = EventId { epoch: 0xab, seq: 9 };
            crate::sse::encode(&mut out, &id, None, payload.as_bytes()).unwrap();
            let cut = cut.min(out.len());
            let events = parse_all(&[&out[..cut], &out[cut..]]);
            prop_assert_eq!(events.len(), 1);
            let expected = payload.replace("\r\n", "\n").replace('\r', "\n");
            prop_assert_eq!(&events[0].data, &expected);
            prop_assert_eq!(events[0].id.as_deref(), Some("00000000000000ab-9"));
            prop_assert_eq!(&events[0].event_type, "message");
        });
    }
}
