//! `POST /session`, `GET /session/{id}`, `DELETE /session/{id}`,
//! `POST /session/{id}/ack`.

use crate::error::ApiError;
use crate::extract::{CursorJson, SessionEntry};
use crate::ids::SessionId;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use gapless_client::wire::{Created, StateView};
use std::sync::atomic::Ordering;

pub(crate) async fn create(
    State(AppState(state)): State<AppState>,
) -> Result<(StatusCode, Json<Created>), ApiError> {
    let (id, entry) = state
        .create_session()
        .map_err(|error| ApiError::Internal(error.to_string()))?;
    state
        .metrics
        .sessions_created
        .fetch_add(1, Ordering::Relaxed);
    Ok((
        StatusCode::CREATED,
        Json(Created {
            session: id.to_string(),
            epoch: entry.session.epoch(),
        }),
    ))
}

pub(crate) async fn state(SessionEntry { entry, .. }: SessionEntry) -> Json<StateView> {
    let s = entry.session.state();
    Json(StateView {
        epoch: s.epoch,
        acked: s.acked,
        sent: s.sent,
        published: s.published,
        first_retained: s.first_retained,
        transport: s.transport,
    })
}

pub(crate) async fn delete(
    State(AppState(state)): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    // Not the `SessionEntry` extractor: the removal itself is the lookup,
    // so two concurrent deletes cannot both succeed.
    let id: SessionId = id.parse().map_err(|_| ApiError::NoSuchSession)?;
    let entry = state.sessions.remove(&id).ok_or(ApiError::NoSuchSession)?;
    entry.session.close();
    entry.notify_changed();
    state
        .metrics
        .sessions_deleted
        .fetch_add(1, Ordering::Relaxed);
    let stats = entry.session.ring().stats();
    state
        .metrics
        .evicted_in_deleted
        .fetch_add(stats.evicted, Ordering::Relaxed);
    state
        .metrics
        .wrap_waits_in_deleted
        .fetch_add(stats.wrap_waits, Ordering::Relaxed);
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) async fn ack(
    SessionEntry { entry, .. }: SessionEntry,
    CursorJson(cursor): CursorJson,
) -> Result<StatusCode, ApiError> {
    entry.session.ack(cursor).map_err(ApiError::Refused)?;
    Ok(StatusCode::NO_CONTENT)
}
