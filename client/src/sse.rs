//! [`SseStream`]: an open `text/event-stream` response, parsed
//! incrementally into the protocol's items.

use crate::error::{within, ClientError, HttpError};
use crate::incoming::{Closed, Delivered, Incoming};
use crate::refusal::Refusal;
use crate::response::Response;
use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};
use gapless::sse::{Parser, SseEvent};
use gapless::EventId;
use http_body_util::BodyExt;
use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::time::Duration;

/// The body of an event stream: any stream of byte chunks.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, HttpError>> + Send>>;

/// An open SSE response, parsed incrementally.
pub struct SseStream {
    /// The response body.
    body: ByteStream,
    /// The parser's state across chunks.
    parser: Parser,
    /// Events dispatched by the last chunk and not yet returned.
    pending: VecDeque<SseEvent>,
    /// How long a read may wait for bytes (`None`: forever).
    idle_timeout: Option<Duration>,
    /// The body ended (properly or with an error): no more reads.
    ended: bool,
}

impl fmt::Debug for SseStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SseStream")
            .field("pending", &self.pending.len())
            .field("ended", &self.ended)
            .finish()
    }
}

impl SseStream {
    /// Wraps any byte stream of `text/event-stream`.
    pub fn new(body: ByteStream, idle_timeout: Option<Duration>) -> Self {
        Self {
            body,
            parser: Parser::new(),
            pending: VecDeque::new(),
            idle_timeout,
            ended: false,
        }
    }

    /// Wraps a response's body.
    pub fn from_response(response: Response, idle_timeout: Option<Duration>) -> Self {
        let body = response
            .into_body()
            .into_data_stream()
            .map_err(HttpError::from);
        Self::new(Box::pin(body), idle_timeout)
    }

    /// How long a read may wait for bytes (`None`: forever).
    pub fn set_idle_timeout(&mut self, timeout: Option<Duration>) {
        self.idle_timeout = timeout;
    }

    /// The parser (for `retry`, last event ID, comment count).
    pub fn parser(&self) -> &Parser {
        &self.parser
    }

    /// The next dispatched event; `None` once the body ended properly.
    ///
    /// # Errors
    /// The transport error, or [`ClientError::Timeout`].
    pub async fn next_event(&mut self) -> Result<Option<SseEvent>, ClientError> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(Some(event));
            }
            if self.ended {
                return Ok(None);
            }
            let chunk = match self.idle_timeout {
                Some(timeout) => within(timeout, "an SSE chunk", self.body.next()).await?,
                None => self.body.next().await,
            };
            match chunk {
                Some(Ok(bytes)) => {
                    let pending = &mut self.pending;
                    self.parser.push(&bytes, |event| pending.push_back(event));
                }
                Some(Err(error)) => {
                    self.ended = true;
                    return Err(ClientError::Http(error));
                }
                None => self.ended = true,
            }
        }
    }

    /// The next item in the protocol's terms: a numbered event, a gap, or
    /// the end.
    ///
    /// # Errors
    /// [`ClientError::Protocol`] for an event without a valid ID, a payload
    /// that is not JSON, a gap body that is not a refusal, or an unknown
    /// event type; the transport errors.
    pub async fn next_item(&mut self) -> Result<Incoming, ClientError> {
        let Some(event) = self.next_event().await? else {
            return Ok(Incoming::Closed(Closed::bare(true)));
        };
        match event.event_type.as_str() {
            "message" => {
                let id = event.id.as_deref().ok_or_else(|| {
                    ClientError::Protocol(format!("SSE event without id: {:?}", event.data))
                })?;
                let id: EventId = id.parse().map_err(|e| {
                    ClientError::Protocol(format!("SSE id {id:?} is not an event ID: {e}"))
                })?;
                serde_json::from_str::<serde::de::IgnoredAny>(&event.data).map_err(|e| {
                    ClientError::Protocol(format!("SSE data is not JSON ({e}): {:?}", event.data))
                })?;
                Ok(Incoming::Event(Delivered {
                    id,
                    data: event.data,
                }))
            }
            "gap" => Refusal::from_text(&event.data)
                .map(Incoming::Gap)
                .map_err(|e| ClientError::Protocol(format!("SSE gap event: {e}"))),
            other => Err(ClientError::Protocol(format!(
                "unknown SSE event type {other:?} (data {:?})",
                event.data
            ))),
        }
    }
}
