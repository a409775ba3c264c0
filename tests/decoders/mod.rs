//! The two decoders the SSE tests (and the fuzz targets) read streams back
//! with, fed the same chunks: `gapless::sse::Parser`, and as an independent
//! oracle the `eventsource-stream` crate (a nom grammar of the same
//! standard, by another author).

use eventsource_stream::{Event, EventStream, EventStreamError};
use futures_core::Stream;
use gapless::sse::{Parser, SseEvent};
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// One dispatched event as both decoders report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dispatched {
    /// The event type, or `"message"`.
    pub event_type: String,
    /// The data buffer less its final LF.
    pub data: String,
    /// The last event ID string at dispatch.
    pub last_event_id: String,
}

/// A [`Dispatched`] from string slices.
pub fn dispatched(event_type: &str, data: &str, last_event_id: &str) -> Dispatched {
    Dispatched {
        event_type: event_type.to_owned(),
        data: data.to_owned(),
        last_event_id: last_event_id.to_owned(),
    }
}

impl From<&SseEvent> for Dispatched {
    fn from(event: &SseEvent) -> Self {
        dispatched(&event.event_type, &event.data, &event.last_event_id)
    }
}

impl From<&Event> for Dispatched {
    fn from(event: &Event) -> Self {
        dispatched(&event.event, &event.data, &event.id)
    }
}

/// The chunks through `gapless::sse::Parser`: its events, and the parser
/// as the stream left it (last event ID, retry, comments).
pub fn parse(chunks: &[&[u8]]) -> (Vec<SseEvent>, Parser) {
    let mut parser = Parser::new();
    let mut events = Vec::new();
    for chunk in chunks {
        parser.push(chunk, |event| events.push(event));
    }
    (events, parser)
}

/// Whether `eventsource-stream` follows the standard on `stream`, as far as
/// `tests/sse_oracle.rs` found: the stream is UTF-8 (deviation 4), does not
/// start with a BOM (deviation 2: it panics) and does not end with a lone CR
/// (deviation 1). It also mishandles `retry` (deviation 3), which is never
/// compared.
pub fn oracle_conforms_on(stream: &[u8]) -> bool {
    std::str::from_utf8(stream).is_ok()
        && !stream.starts_with("\u{FEFF}".as_bytes())
        && !stream.ends_with(b"\r")
}

/// A stream of byte chunks that is always ready.
struct Chunks(std::vec::IntoIter<Vec<u8>>);

impl Stream for Chunks {
    type Item = Result<Vec<u8>, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Poll::Ready(self.0.next().map(Ok))
    }
}

/// The chunks through `eventsource-stream`: every event up to the end of
/// the stream or its first error. Its input is always ready, so it is
/// polled with a no-op waker and no executor.
pub fn oracle(chunks: &[&[u8]]) -> Result<Vec<Event>, EventStreamError<Infallible>> {
    let source = Chunks(
        chunks
            .iter()
            .map(|c| c.to_vec())
            .collect::<Vec<_>>()
            .into_iter(),
    );
    let mut stream = EventStream::new(source);
    let mut cx = Context::from_waker(Waker::noop());
    let mut events = Vec::new();
    loop {
        match Pin::new(&mut stream).poll_next(&mut cx) {
            Poll::Ready(Some(Ok(event))) => events.push(event),
            Poll::Ready(Some(Err(error))) => return Err(error),
            Poll::Ready(None) => return Ok(events),
            Poll::Pending => unreachable!("eventsource-stream waited on a ready stream"),
        }
    }
}
