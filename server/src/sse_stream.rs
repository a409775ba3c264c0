//! `GET /session/{id}/events`: the replay after the client's cursor, then
//! live events, with no hole and no duplicate — or a `409` before any byte,
//! or an `event: gap` when the ring laps the stream.

use crate::app::{lookup, sse_cursor, AppState, Entry, Shared};
use crate::error::{refusal_body, ApiError};
use crate::metrics::Stage;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use gapless::session::{Attachment, Refusal};
use gapless::{sse, Event, EventId, Follower, ReplayError, Ring};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How often an idle stream writes a comment line, so a client that went
/// away is noticed even when no events flow.
const KEEPALIVE: Duration = Duration::from_secs(5);

/// Frames `events` as SSE into one buffer.
pub(crate) fn frame(epoch: u64, events: &[Event]) -> Result<Bytes, sse::SseError> {
    let mut out = Vec::with_capacity(events.iter().map(|e| e.payload.len() + 48).sum());
    for event in events {
        let id = EventId {
            epoch,
            seq: event.seq,
        };
        sse::encode(&mut out, &id, None, &event.payload)?;
    }
    Ok(out.into())
}

pub(crate) async fn open(
    State(AppState(state)): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let entry = lookup(&state, &id)?;
    let session = &entry.session;
    let cursor = sse_cursor(session, &headers, &query)?;
    let refuse = |refusal: Refusal| {
        state.metrics.refused(Stage::SseResume, &refusal);
        ApiError::Refused(refusal)
    };
    let (grant, attachment) = session.resume_sse(cursor).map_err(refuse)?;
    let ring = Arc::clone(session.ring());
    // Copied now, so a gap is still a 409 rather than a broken stream.
    let replay = match ring.replay_range(grant.cursor, grant.replay_to) {
        Ok(events) => events,
        Err(ReplayError::Gap(gap)) => {
            session.detach(&attachment);
            // Evicted between the cursor check and the copy: a gap report
            // like any other, so `sent` accounts for it and the client may
            // continue from `first_retained - 1`.
            session.gap_reported(gap.first_retained);
            return Err(refuse(Refusal::from(gap)));
        }
        Err(ReplayError::Ahead { .. }) => {
            session.detach(&attachment);
            return Err(ApiError::Internal(
                "replay ran ahead of the watermark".into(),
            ));
        }
    };
    let first = frame(session.epoch(), &replay)
        .map_err(|e| ApiError::Internal(format!("stored payload cannot be framed: {e}")))?;
    entry.notify_changed();
    let (tx, rx) = mpsc::channel::<Bytes>(16);
    tokio::spawn(stream(
        Arc::clone(&state),
        Arc::clone(&entry),
        attachment,
        (first, replay.len() as u64, grant.replay_to),
        Follower::new(ring, grant.replay_to),
        tx,
    ));
    let body = Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|chunk| (Ok::<_, Infallible>(chunk), rx))
    }));
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// Writes the replay, then live events, until the client goes away, a
/// WebSocket supersedes this stream, the session ends, the ring laps it, or
/// the server shuts down. Every event handed to the transport counts toward
/// `sent`, from just before the hand-over.
async fn stream(
    state: Arc<Shared>,
    entry: Arc<Entry>,
    attachment: Attachment,
    (replay, replayed, replay_to): (Bytes, u64, u64),
    mut follower: Follower<Arc<Ring>>,
    tx: mpsc::Sender<Bytes>,
) {
    let session = &entry.session;
    let mut changed = entry.changed.subscribe();
    let mut shutdown = state.shutdown.clone();
    // `sent` counts what is handed to the transport, recorded *before* the
    // hand-over: once bytes are queued the client may receive them and
    // resume or upgrade with their ID at once, and its true cursor must not
    // be refused as ahead of what the server accounted for.
    session.record_sent(replay_to);
    if tx.send(replay).await.is_ok() {
        state
            .metrics
            .events_replayed
            .fetch_add(replayed, Ordering::Relaxed);
        let mut keepalive = tokio::time::interval(KEEPALIVE);
        keepalive.tick().await;
        while session.is_current(&attachment) && !*shutdown.borrow() {
            tokio::select! {
                _ = tx.closed() => break,
                _ = changed.changed() => {}
                _ = shutdown.changed() => {}
                _ = keepalive.tick() => {
                    if tx.send(Bytes::from_static(b": keepalive\n\n")).await.is_err() {
                        break;
                    }
                }
                next = std::future::poll_fn(|cx| follower.poll_next(cx)) => match next {
                    Ok(events) => {
                        let Some(last) = events.last().map(|e| e.seq) else { continue };
                        let chunk = match frame(session.epoch(), &events) {
                            Ok(chunk) => chunk,
                            Err(error) => {
                                tracing::error!(%error, "stored payload cannot be framed; ending stream");
                                break;
                            }
                        };
                        session.record_sent(last);
                        if tx.send(chunk).await.is_err() {
                            break;
                        }
                        state.metrics.events_streamed.fetch_add(events.len() as u64, Ordering::Relaxed);
                        keepalive.reset();
                    }
                    Err(ReplayError::Gap(gap)) => {
                        state.metrics.lapped_readers.fetch_add(1, Ordering::Relaxed);
                        session.gap_reported(gap.first_retained);
                        let body = refusal_body(&Refusal::from(gap));
                        let mut out = Vec::new();
                        if sse::encode_unnumbered(&mut out, "gap", body.to_string().as_bytes()).is_ok() {
                            let _ = tx.send(out.into()).await;
                        }
                        break;
                    }
                    Err(ReplayError::Ahead { .. }) => break,
                },
            }
        }
    }
    session.detach(&attachment);
    entry.notify_changed();
}
