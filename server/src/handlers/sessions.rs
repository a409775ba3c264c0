//! `POST /session`, `GET /session/{id}`, `DELETE /session/{id}`,
//! `POST /session/{id}/ack`.

use crate::error::ApiError;
use crate::extract::{Client, CursorJson, PresentedKey, SessionEntry, SessionPath};
use crate::state::{AppState, CreateError};
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use gapless_client::wire::{Created, CreatedAnswer, StateView};

/// The `Retry-After` of `503 too_many_sessions`.
const RETRY_AFTER_SECS: u64 = 5;

pub(crate) async fn create(
    State(AppState(state)): State<AppState>,
    Client(client): Client,
) -> Result<(StatusCode, Json<CreatedAnswer>), ApiError> {
    let (id, entry) = state
        .create_shared_session(client)
        .await
        .map_err(|error| match error {
            // Sessions end on DELETE and on idle expiry; a few seconds is a
            // fair first wait.
            CreateError::TooMany => ApiError::TooManySessions {
                retry_after_secs: RETRY_AFTER_SECS,
            },
            CreateError::TooManyForClient => ApiError::TooManySessionsPerClient {
                retry_after_secs: RETRY_AFTER_SECS,
            },
            CreateError::MemoryBudget => ApiError::MemoryBudgetExceeded {
                retry_after_secs: RETRY_AFTER_SECS,
            },
            CreateError::History(error) => {
                tracing::warn!(%error, "shared history");
                ApiError::HistoryUnavailable
            }
            other => ApiError::Internal(other.to_string()),
        })?;
    state.metrics.sessions_created.inc();
    Ok((
        StatusCode::CREATED,
        Json(CreatedAnswer {
            created: Created {
                session: id.to_string(),
                epoch: entry.session.epoch(),
            },
            publish_key: entry.publish_key.map(|key| key.to_string()),
        }),
    ))
}

pub(crate) async fn state(
    State(AppState(state)): State<AppState>,
    SessionEntry { entry, .. }: SessionEntry,
) -> Result<Json<StateView>, ApiError> {
    let entry = state.refresh(entry).await?;
    let s = entry.session.state();
    Ok(Json(StateView {
        epoch: s.epoch,
        acked: s.acked,
        sent: s.sent,
        published: s.published,
        first_retained: s.first_retained,
        transport: s.transport,
    }))
}

pub(crate) async fn delete(
    State(AppState(state)): State<AppState>,
    SessionPath(id): SessionPath,
    PresentedKey(key): PresentedKey,
) -> Result<StatusCode, ApiError> {
    // With publish keys, only the key's holder deletes. The removal itself
    // is the lookup (two concurrent deletes cannot both succeed), so the
    // session is only looked up here to check the key.
    if state.config.publish_keys {
        let entry = state
            .find_session(&id)
            .await?
            .ok_or(ApiError::NoSuchSession)?;
        if !entry.may_publish(key.as_ref()) {
            return Err(ApiError::Unauthorized);
        }
    }
    // The history is the record: delete there first (every instance's copy
    // finds it gone at its next look), then here.
    let existed = state
        .history
        .delete(&id)
        .await
        .map_err(|error| state.history_failed(error))?;
    let local = state.end_session(&id).is_some();
    if !(existed || local) {
        return Err(ApiError::NoSuchSession);
    }
    state.metrics.sessions_deleted.inc();
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /healthz`: the process serves requests.
pub(crate) async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

pub(crate) async fn ack(
    State(AppState(state)): State<AppState>,
    SessionEntry { entry, .. }: SessionEntry,
    CursorJson(cursor): CursorJson,
) -> Result<StatusCode, ApiError> {
    let entry = state.refresh(entry).await?;
    entry.session.ack(cursor).map_err(ApiError::Refused)?;
    state.persist_cursors(&entry).await?;
    Ok(StatusCode::NO_CONTENT)
}
