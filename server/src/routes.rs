//! [`router`]: every route of the protocol on one [`AppState`].

use crate::error::ApiError;
use crate::handlers::{events, metrics, migration, sessions};
use crate::state::AppState;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

/// Every route of the protocol (`docs/PROTOCOL.md`), ready to serve or to
/// wrap in the embedding application's own layers (auth, say).
pub fn router(state: AppState) -> Router {
    let limit = state.0.config.max_body;
    Router::new()
        .route("/session", post(sessions::create))
        .route(
            "/session/{id}",
            get(sessions::state).delete(sessions::delete),
        )
        .route(
            "/session/{id}/events",
            post(events::emit).get(events::open_sse),
        )
        .route("/session/{id}/ack", post(sessions::ack))
        .route("/session/{id}/upgrade", post(migration::upgrade))
        .route("/session/{id}/ws", get(migration::websocket))
        .route("/metrics", get(metrics::render))
        .fallback(|| async { ApiError::NotFound })
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}
