//! `GET /session/{id}/ws?ticket=T`: the WebSocket of a granted upgrade.
//! Its first frames are exactly `cursor + 1 ..= h`, then live from `h + 1`;
//! a gap evicted since the upgrade, or a lap while streaming, closes it with
//! code 4409 and the `gap_not_covered` body.

use crate::app::{Entry, Shared};
use crate::error::{refusal_body, ApiError};
use crate::metrics::Stage;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use futures_util::{SinkExt, StreamExt};
use gapless::session::{Attachment, Grant, Refusal, Ticket};
use gapless::{Event, EventId, Follower, ReplayError, Ring};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

/// Close code for "the ring no longer covers your cursor".
const GAP_CLOSE: u16 = 4409;
/// Close code for "server shutting down".
const GOING_AWAY: u16 = 1001;

pub(crate) fn handshake(
    state: Arc<Shared>,
    entry: Arc<Entry>,
    ticket: Ticket,
    upgrade: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    match entry.session.complete_upgrade(&ticket, Instant::now()) {
        Ok((grant, attachment)) => {
            state
                .metrics
                .migrations_completed
                .fetch_add(1, Ordering::Relaxed);
            entry.notify_changed();
            Ok(upgrade.on_upgrade(move |socket| stream(state, entry, grant, attachment, socket)))
        }
        Err(refusal @ Refusal::GapNotCovered { .. }) => {
            state.metrics.refused(Stage::Migration, &refusal);
            Ok(upgrade.on_upgrade(move |mut socket| async move {
                let _ = socket.send(close(GAP_CLOSE, &refusal)).await;
            }))
        }
        Err(refusal) => {
            state.metrics.refused(Stage::Migration, &refusal);
            Err(ApiError::Refused(refusal))
        }
    }
}

fn close(code: u16, refusal: &Refusal) -> Message {
    Message::Close(Some(CloseFrame {
        code,
        reason: refusal_body(refusal).to_string().into(),
    }))
}

fn frame(epoch: u64, event: &Event) -> Message {
    let id = EventId {
        epoch,
        seq: event.seq,
    };
    // Payloads are stored as compact JSON (validated on emit).
    let data = String::from_utf8_lossy(&event.payload);
    Message::Text(format!("{{\"id\":\"{id}\",\"data\":{data}}}").into())
}

async fn stream(
    state: Arc<Shared>,
    entry: Arc<Entry>,
    grant: Grant,
    attachment: Attachment,
    socket: WebSocket,
) {
    let session = &entry.session;
    let epoch = session.epoch();
    let ring: Arc<Ring> = Arc::clone(session.ring());
    let (mut sink, mut incoming) = socket.split();
    let mut changed = entry.changed.subscribe();
    let mut shutdown = state.shutdown.clone();

    let ended = async {
        match ring.replay_range(grant.cursor, grant.replay_to) {
            Ok(events) => {
                // Accounted before the hand-over, as on SSE: a client may act
                // on a frame as soon as it is written.
                session.record_sent(grant.replay_to);
                for event in &events {
                    sink.send(frame(epoch, event)).await.ok()?;
                }
                state
                    .metrics
                    .events_replayed
                    .fetch_add(events.len() as u64, Ordering::Relaxed);
            }
            Err(ReplayError::Gap(gap)) => {
                session.gap_reported(gap.first_retained);
                let _ = sink.send(close(GAP_CLOSE, &Refusal::from(gap))).await;
                return None;
            }
            Err(ReplayError::Ahead { .. }) => return None,
        }
        let mut follower = Follower::new(Arc::clone(&ring), grant.replay_to);
        while session.is_current(&attachment) {
            if *shutdown.borrow() {
                let _ = sink
                    .send(Message::Close(Some(CloseFrame {
                        code: GOING_AWAY,
                        reason: "server shutting down".into(),
                    })))
                    .await;
                return None;
            }
            tokio::select! {
                message = incoming.next() => match message {
                    // The protocol defines no client frames; pings are
                    // answered by the library.
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return None,
                    Some(Ok(_)) => {}
                },
                _ = changed.changed() => {}
                _ = shutdown.changed() => {}
                next = std::future::poll_fn(|cx| follower.poll_next(cx)) => match next {
                    Ok(events) => {
                        if let Some(last) = events.last() {
                            session.record_sent(last.seq);
                        }
                        for event in &events {
                            sink.send(frame(epoch, event)).await.ok()?;
                        }
                        state.metrics.events_streamed.fetch_add(events.len() as u64, Ordering::Relaxed);
                    }
                    Err(ReplayError::Gap(gap)) => {
                        state.metrics.lapped_readers.fetch_add(1, Ordering::Relaxed);
                        session.gap_reported(gap.first_retained);
                        let _ = sink.send(close(GAP_CLOSE, &Refusal::from(gap))).await;
                        return None;
                    }
                    Err(ReplayError::Ahead { .. }) => return None,
                },
            }
        }
        // Superseded or the session ended.
        let _ = sink.send(Message::Close(None)).await;
        Some(())
    };
    let _ = ended.await;
    session.detach(&attachment);
    entry.notify_changed();
}
