//! `POST /session/{id}/events` (emit) and `GET /session/{id}/events` (the
//! SSE stream: the replay after the client's cursor, then live events, with
//! no hole and no duplicate — or a `409` before any byte).

use crate::connection::ConnectionHandle;
use crate::delivery::{self, copy_replay, Attached, NotReplayed, StreamSlot};
use crate::error::ApiError;
use crate::extract::{sse_cursor, JsonBody, Publisher, SessionEntry};
use crate::ids::SessionId;
use crate::metrics::{HistoryFailure, Limit, Stage};
use crate::replica::ReplicaError;
use crate::session_history::EmitFailure;
use crate::state::{AppState, ServerState};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Extension;
use axum::Json;
use bytes::Bytes;
use gapless::session::Refusal;
use gapless::EventId;
use gapless_client::wire::Emitted;
use std::collections::HashMap;
use std::sync::Arc;

pub(crate) async fn emit(
    State(AppState(state)): State<AppState>,
    Publisher(SessionEntry { entry, .. }): Publisher,
    JsonBody(bytes): JsonBody,
) -> Result<(StatusCode, Json<Emitted>), ApiError> {
    // JSON text is UTF-8 (RFC 8259); `IgnoredAny` skips strings unchecked.
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| ApiError::BadRequest(format!("body must be UTF-8 JSON: {e}")))?;
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map_err(|e| ApiError::BadRequest(format!("body must be a JSON value: {e}")))?;
    // Stored compact but otherwise as sent (key order, number spelling and
    // escapes untouched): one SSE data line, the same bytes on every transport.
    let compact = crate::json::minify(&bytes);
    // Through the session history: straight into the ring, or (`--redis`)
    // appended to the shared history first, which gives it its epoch and
    // seq, then into the ring: the `202` means durable in Redis.
    let (epoch, seq) = state
        .history
        .emit(&entry, Bytes::from(compact))
        .await
        .map_err(|failure| emit_failed(&state, &entry.id, failure))?;
    if epoch != entry.session.epoch() {
        // Redis lost events and continues the session under a new epoch:
        // this copy (unless another request already loaded the new one)
        // ends, and its streams with it.
        let current = state.sessions.get(&entry.id);
        if current.is_some_and(|current| Arc::ptr_eq(&current, &entry)) {
            state.metrics.replicas_reloaded.inc();
            state.drop_local(&entry.id);
        }
    }
    state.metrics.events_emitted.inc();
    let id = EventId { epoch, seq };
    Ok((StatusCode::ACCEPTED, Json(Emitted { id })))
}

/// The answer to an emit that was not accepted (nothing was acknowledged).
fn emit_failed(state: &ServerState, id: &SessionId, failure: EmitFailure) -> ApiError {
    match failure {
        EmitFailure::TooLarge { len, max } => ApiError::PayloadTooLarge { len, max },
        EmitFailure::Busy => {
            state.metrics.tripped(Limit::QueuedEmits);
            ApiError::HistoryUnavailable
        }
        EmitFailure::Replica(error) => match &*error {
            ReplicaError::History(error) => state.session_history_failed(id, error.clone()).into(),
            ReplicaError::Expired => {
                state.metrics.history_failed(HistoryFailure::Unavailable);
                ApiError::HistoryUnavailable
            }
            // This copy cannot continue; the next request loads it afresh.
            ReplicaError::Stale { .. } => {
                state.metrics.replicas_reloaded.inc();
                state.drop_local(id);
                ApiError::HistoryUnavailable
            }
            ReplicaError::Ring(what) => ApiError::Internal(format!("replica: {what}")),
        },
        // `EmitError` is non-exhaustive: a failure this server does not
        // know yet is a server error, named, never a silent drop.
        EmitFailure::Engine(error) => ApiError::Internal(format!("emit failed: {error}")),
    }
}

pub(crate) async fn open_sse(
    State(AppState(state)): State<AppState>,
    SessionEntry { entry, .. }: SessionEntry,
    connection: Option<Extension<ConnectionHandle>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let entry = state.refresh(entry).await?;
    let cursor = sse_cursor(&entry.session, &headers, &query)?;
    let slot = StreamSlot::take(&state, &entry)?;
    let resumed = entry.session.resume_sse(cursor);
    let generation = state.persist_check(&entry, resumed.is_ok()).await?;
    let (grant, attachment) = resumed.map_err(|refusal: Refusal| {
        state.metrics.refused(Stage::SseResume, &refusal);
        ApiError::Refused(refusal)
    })?;
    let attached = Attached::new(Arc::clone(&state), slot, attachment, generation);
    // Copied now, so a gap is still a 409 rather than a broken stream.
    let replay = match copy_replay(
        &state,
        &attached,
        grant.cursor,
        grant.replay_to,
        Stage::SseResume,
    ) {
        Ok(replay) => replay,
        Err(NotReplayed::Gap(refusal)) => {
            // The gap was accounted: recorded before the refusal leaves.
            state.persist_cursors(&entry).await?;
            return Err(ApiError::Refused(refusal));
        }
        Err(NotReplayed::Ahead) => {
            return Err(ApiError::Internal(
                "replay ran ahead of the watermark".into(),
            ))
        }
    };
    let connection = connection.map(|Extension(handle)| handle);
    let (transport, response) = delivery::sse::open(state.config.sse_retry, connection);
    let task = state.lifecycle.track(delivery::deliver(
        Arc::clone(&state),
        attached,
        replay,
        transport,
    ));
    tokio::spawn(task);
    Ok(response)
}
