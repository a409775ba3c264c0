//! `GET /metrics`: Prometheus text.

use crate::state::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

pub(crate) async fn render(State(AppState(state)): State<AppState>) -> impl IntoResponse {
    let entries = state.sessions.entries();
    let (evicted, wrap_waits) = entries
        .iter()
        .map(|(_, e)| e.session.ring().stats())
        .fold((0u64, 0u64), |(evicted, waits), stats| {
            (evicted + stats.evicted, waits + stats.wrap_waits)
        });
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(entries.len(), evicted, wrap_waits),
    )
}
