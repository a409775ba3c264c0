//! The WebSocket transport: one text frame `{"id", "data"}` per event; a
//! lap, or a gap evicted since the upgrade, closes with code 4409 and the
//! `gap_not_covered` body as the reason.

use super::{event_id, End, Gone, Transport, Wake};
use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use gapless::session::Refusal;
use gapless::Event;
use gapless_client::wire::WsEvent;
use gapless_client::{Refusal as RefusalBody, CLOSE_GAP};
use serde_json::value::RawValue;

/// Close code for "server shutting down".
const GOING_AWAY: u16 = 1001;

/// The delivery side of one WebSocket.
pub(crate) struct WsTransport {
    sink: SplitSink<WebSocket, Message>,
    incoming: SplitStream<WebSocket>,
}

impl WsTransport {
    pub(crate) fn new(socket: WebSocket) -> Self {
        let (sink, incoming) = socket.split();
        Self { sink, incoming }
    }
}

/// The close frame that reports `refusal`.
pub(crate) fn gap_close(refusal: &Refusal) -> Message {
    Message::Close(Some(CloseFrame {
        code: CLOSE_GAP,
        reason: RefusalBody::from(refusal).to_json().into(),
    }))
}

/// The frame of one event: its payload, stored as compact JSON validated on
/// emit, goes out as the exact text it was stored as.
fn frame(epoch: u64, event: &Event) -> Option<Message> {
    let data: &RawValue = serde_json::from_slice(&event.payload).ok()?;
    let frame = WsEvent {
        id: event_id(epoch, event),
        data,
    };
    serde_json::to_string(&frame)
        .ok()
        .map(|text| Message::Text(text.into()))
}

impl Transport for WsTransport {
    async fn send_events(&mut self, epoch: u64, events: &[Event]) -> Result<(), Gone> {
        for event in events {
            let Some(message) = frame(epoch, event) else {
                // Validated on emit; a payload that is not JSON means the
                // ring was fed by something else. End rather than skip it.
                tracing::error!(seq = event.seq, "stored payload is not JSON; ending stream");
                return Err(Gone);
            };
            self.sink.send(message).await.map_err(|_| Gone)?;
        }
        Ok(())
    }

    async fn send_gap(&mut self, refusal: &Refusal) {
        let _ = self.sink.send(gap_close(refusal)).await;
    }

    async fn wake(&mut self) -> Wake {
        loop {
            match self.incoming.next().await {
                // The protocol defines no client frames; pings are answered
                // by the library.
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return Wake::Gone,
                Some(Ok(_)) => {}
            }
        }
    }

    /// WebSocket keepalive is the library's ping/pong; nothing to write.
    async fn keepalive(&mut self) -> Result<(), Gone> {
        Ok(())
    }

    async fn end(&mut self, why: End) {
        let close = match why {
            End::Superseded => Message::Close(None),
            End::Shutdown => Message::Close(Some(CloseFrame {
                code: GOING_AWAY,
                reason: "server shutting down".into(),
            })),
        };
        let _ = self.sink.send(close).await;
    }
}
