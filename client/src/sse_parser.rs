//! TEMPORARY copy, replaced by gapless::sse::Parser when the engine gains it.
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

/// An incremental parser of `text/event-stream` (WHATWG HTML §9.2.6):
/// lines end with CR, LF or CRLF (also split across chunks); one leading
/// BOM is ignored; lines starting with `:` are comments; `field: value`
/// with one leading space of the value stripped; `data` lines are joined
/// with LF; `id` without NUL sets the last event ID; `retry` with only
/// digits sets the reconnection time; a blank line dispatches (nothing is
/// dispatched for an empty data buffer); an unterminated event at the end
/// of the stream is discarded.
///
/// ```ignore
/// use gapless_client::Parser;
/// let mut parser = Parser::new();
/// let mut events = Vec::new();
/// parser.push(b"\xEF\xBB\xBF: hi\r\nid: 7\r", |e| events.push(e));
/// parser.push(b"\ndata:  two spaces\ndata\n\n", |e| events.push(e));
/// assert_eq!(events.len(), 1);
/// assert_eq!(events[0].data, " two spaces\n");
/// assert_eq!(events[0].id.as_deref(), Some("7"));
/// ```ignore
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

    /// The reconnection time the stream last set with `retry:`, in ms.
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
