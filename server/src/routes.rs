//! [`router`]: every route of the protocol on one [`AppState`], in the
//! server's layers.

use crate::error::ApiError;
use crate::handlers::{events, metrics, migration, sessions, streams};
use crate::layers::{with_layers, with_stream_cors};
use crate::state::AppState;
use axum::extract::DefaultBodyLimit;
use axum::routing::{any, get, post};
use axum::Router;

/// Every route of the protocol (`docs/PROTOCOL.md`) in the server's layers,
/// ready to serve or to wrap in the embedding application's own layers
/// (authentication, rate limits): see `examples/embed_with_auth.rs`.
pub fn router(state: AppState) -> Router {
    with_layers(routes(state.clone()), &state)
}

/// The protocol's routes without the server's layers: merge an
/// application's own routes into it, then apply [`with_layers`].
pub fn routes(state: AppState) -> Router {
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
        .route(
            "/v1/stream/{*path}",
            with_stream_cors(any(streams::stream_route), &state),
        )
        .route("/metrics", get(metrics::render))
        .route("/healthz", get(sessions::healthz))
        .fallback(|| async { ApiError::NotFound })
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}
