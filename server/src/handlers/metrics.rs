//! `GET /metrics`: Prometheus text (version 0.0.4).

use crate::metrics::CONTENT_TYPE;
use crate::state::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

pub(crate) async fn render(State(AppState(state)): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        state.metrics.encode(),
    )
}
