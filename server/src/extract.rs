//! Request extractors: each turns one part of a request into a typed value
//! or the protocol's JSON error, so handlers only see valid input.

use crate::error::ApiError;
use crate::ids::SessionId;
use crate::state::{AppState, Entry};
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use gapless::session::Session;
use gapless::EventId;
use gapless_client::wire::CursorBody;
use std::collections::HashMap;
use std::sync::Arc;

/// The session named by the `{id}` path segment, its idle clock restarted.
/// A malformed ID is as unknown as a deleted or expired one: `404
/// no_such_session`, never a `400` that would tell a prober which IDs are
/// well formed. With a shared history, a session this instance does not
/// hold is loaded from it (`503 history_unavailable` if it cannot be).
pub(crate) struct SessionEntry {
    /// The ID as parsed.
    pub(crate) id: SessionId,
    /// The live session.
    pub(crate) entry: Arc<Entry>,
}

impl FromRequestParts<AppState> for SessionEntry {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        AppState(state): &AppState,
    ) -> Result<Self, Self::Rejection> {
        let Path(id) = Path::<String>::from_request_parts(parts, &())
            .await
            .map_err(|_| ApiError::NoSuchSession)?;
        let id: SessionId = id.parse().map_err(|_| ApiError::NoSuchSession)?;
        let entry = state
            .find_session(&id)
            .await?
            .ok_or(ApiError::NoSuchSession)?;
        // Any request naming the session restarts its idle clock.
        state.touch(&entry);
        Ok(Self { id, entry })
    }
}

/// A request body within `--max-body`; over it, `413 body_too_large`.
pub(crate) struct Body(pub(crate) Bytes);

impl FromRequest<AppState> for Body {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        Bytes::from_request(request, state)
            .await
            .map(Self)
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::BodyTooLarge {
                        limit: state.0.config.max_body,
                    }
                } else {
                    ApiError::BadRequest(rejection.body_text())
                }
            })
    }
}

/// An emit's body: `Content-Type: application/json` (parameters allowed),
/// else `415`, so a page on another origin cannot emit without a CORS
/// preflight; within `--max-body`.
pub(crate) struct JsonBody(pub(crate) Bytes);

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let is_json = request
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(';').next())
            .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
        if !is_json {
            return Err(ApiError::UnsupportedMediaType);
        }
        Body::from_request(request, state)
            .await
            .map(|Body(bytes)| Self(bytes))
    }
}

/// The client's cursor from a `{"cursor": EVENT_ID}` body (ack, upgrade).
pub(crate) struct CursorJson(pub(crate) EventId);

impl FromRequest<AppState> for CursorJson {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let Body(bytes) = Body::from_request(request, state).await?;
        let body: CursorBody = serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::BadRequest(format!("body must be {{\"cursor\": EVENT_ID}}: {e}"))
        })?;
        parse_cursor(&body.cursor, "cursor").map(Self)
    }
}

/// Parses an event ID from client input (header, query, body).
fn parse_cursor(text: &str, what: &str) -> Result<EventId, ApiError> {
    text.parse()
        .map_err(|e| ApiError::BadRequest(format!("{what}: {e}")))
}

/// The cursor of an SSE request: `Last-Event-ID`, else `?last_event_id=`,
/// else seq 0 of the session's epoch.
pub(crate) fn sse_cursor(
    session: &Session,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
) -> Result<EventId, ApiError> {
    if let Some(value) = headers.get("last-event-id") {
        let text = value
            .to_str()
            .map_err(|_| ApiError::BadRequest("Last-Event-ID: not visible ASCII".into()))?;
        return parse_cursor(text, "Last-Event-ID");
    }
    if let Some(text) = query.get("last_event_id") {
        return parse_cursor(text, "last_event_id");
    }
    Ok(EventId {
        epoch: session.epoch(),
        seq: 0,
    })
}
