//! The WebSocket transport: one text frame `{"id", "data"}` per event; a
//! lap, or a gap evicted since the upgrade, closes with code 4409 and the
//! `gap_not_covered` body as the reason; a ping every `ping_interval`, and a
//! close when one goes unanswered for `pong_timeout`; a client message over
//! the size limit closes with 1009.

use super::{event_id, End, Gone, Transport, Wake};
use crate::config::ServerConfig;
use crate::metrics::Limit;
use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use gapless::session::Refusal;
use gapless::Event;
use gapless_client::wire::WsEvent;
use gapless_client::{Refusal as RefusalBody, CLOSE_GAP};
use serde_json::value::RawValue;
use std::time::Duration;
use tokio::time::{interval, Instant, Interval, MissedTickBehavior};

/// Close code for "server shutting down".
const GOING_AWAY: u16 = 1001;
/// Close code for "a pong did not come back in time".
const POLICY: u16 = 1008;
/// Close code for "message too big".
const TOO_BIG: u16 = 1009;

/// The delivery side of one WebSocket.
pub(crate) struct WsTransport {
    sink: SplitSink<WebSocket, Message>,
    incoming: SplitStream<WebSocket>,
    /// Ticks every `ping_interval`.
    ping: Interval,
    /// How long a ping may go unanswered.
    pong_timeout: Duration,
    /// When the oldest unanswered ping was sent.
    unanswered_since: Option<Instant>,
}

impl WsTransport {
    pub(crate) fn new(socket: WebSocket, config: &ServerConfig) -> Self {
        let (sink, incoming) = socket.split();
        let mut ping = interval(config.ping_interval);
        ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ping.reset();
        Self {
            sink,
            incoming,
            ping,
            pong_timeout: config.pong_timeout,
            unanswered_since: None,
        }
    }

    async fn close(&mut self, code: u16, reason: &str) {
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        let _ = self.sink.send(Message::Close(Some(frame))).await;
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

/// Whether a read error is a client message over the size limit.
fn is_capacity(error: axum::Error) -> bool {
    error
        .into_inner()
        .downcast::<tungstenite::Error>()
        .is_ok_and(|error| matches!(*error, tungstenite::Error::Capacity(_)))
}

impl Transport for WsTransport {
    async fn send_events(&mut self, epoch: u64, events: &[Event]) -> Result<(), Gone> {
        for event in events {
            let Some(message) = frame(epoch, event) else {
                // Validated on emit; a payload that is not JSON means the
                // ring was fed by something else. End rather than skip it.
                tracing::error!(seq = event.seq, "stored payload is not JSON; ending stream");
                return Err(Gone::Client);
            };
            self.sink.send(message).await.map_err(|_| Gone::Client)?;
        }
        Ok(())
    }

    async fn send_gap(&mut self, refusal: &Refusal) {
        let _ = self.sink.send(gap_close(refusal)).await;
    }

    async fn wake(&mut self) -> Wake {
        loop {
            tokio::select! {
                // Frames that already came are read before a ping tick is
                // taken: a pong queued behind a due tick would otherwise
                // count as unanswered and close a live client.
                biased;
                message = self.incoming.next() => match message {
                    Some(Ok(Message::Pong(_))) => self.unanswered_since = None,
                    // The protocol defines no client frames; pings are
                    // answered by the library.
                    Some(Ok(Message::Close(_))) | None => return Wake::Gone(Gone::Client),
                    Some(Ok(_)) => {}
                    Some(Err(error)) => {
                        if is_capacity(error) {
                            self.close(TOO_BIG, "message too big").await;
                            return Wake::Gone(Gone::Limit(Limit::WsMessageSize));
                        }
                        return Wake::Gone(Gone::Client);
                    }
                },
                _ = self.ping.tick() => return Wake::Idle,
            }
        }
    }

    async fn keepalive(&mut self) -> Result<(), Gone> {
        match self.unanswered_since {
            Some(since) if since.elapsed() >= self.pong_timeout => {
                self.close(POLICY, "pong timeout").await;
                Err(Gone::Limit(Limit::PongTimeout))
            }
            unanswered => {
                self.unanswered_since = Some(unanswered.unwrap_or_else(Instant::now));
                let ping = Message::Ping(Default::default());
                self.sink.send(ping).await.map_err(|_| Gone::Client)
            }
        }
    }

    async fn end(&mut self, why: End) {
        match why {
            End::Superseded => {
                let _ = self.sink.send(Message::Close(None)).await;
            }
            End::Shutdown => self.close(GOING_AWAY, "server shutting down").await,
        }
    }

    /// The socket is this task's: returning drops it, which closes the TCP
    /// connection.
    fn abort(&mut self) {}
}
