//! Routes and request handling: everything but the long-lived streams.

use crate::error::ApiError;
use crate::ids::{random_bytes, SessionId};
use crate::metrics::{Metrics, Stage};
use crate::{sse_stream, ws, ServerConfig};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use gapless::session::{Session, SessionOptions, Ticket};
use gapless::{Config, EmitError, EventId, Ring, Store};
use serde::Deserialize;
use serde_json::json;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::watch;

/// One live session and the signal its streams watch.
pub(crate) struct Entry {
    pub(crate) session: Session,
    /// Bumped whenever the session's attachment changes or it ends, so an
    /// SSE stream superseded by a WebSocket closes at once.
    pub(crate) changed: watch::Sender<u64>,
}

impl Entry {
    pub(crate) fn notify_changed(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// Shared by every handler.
pub(crate) struct Shared {
    pub(crate) config: ServerConfig,
    pub(crate) sessions: Store<SessionId, Entry>,
    pub(crate) metrics: Metrics,
    /// Turns true on shutdown: streams end.
    pub(crate) shutdown: watch::Receiver<bool>,
}

/// The router's state.
#[derive(Clone)]
pub struct AppState(pub(crate) Arc<Shared>);

impl AppState {
    /// State for a server with `config` that stops streaming when
    /// `shutdown` turns true.
    pub fn new(config: ServerConfig, shutdown: watch::Receiver<bool>) -> Self {
        Self(Arc::new(Shared {
            config,
            sessions: Store::new(64),
            metrics: Metrics::default(),
            shutdown,
        }))
    }
}

/// Every route of the protocol.
pub fn router(state: AppState) -> Router {
    let limit = state.0.config.max_body;
    Router::new()
        .route("/session", post(create_session))
        .route("/session/{id}", get(session_state).delete(delete_session))
        .route("/session/{id}/events", post(emit).get(sse_stream::open))
        .route("/session/{id}/ack", post(ack))
        .route("/session/{id}/upgrade", post(upgrade))
        .route("/session/{id}/ws", get(websocket))
        .route("/metrics", get(metrics))
        .fallback(|| async { (StatusCode::NOT_FOUND, Json(json!({ "error": "not_found" }))) })
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// The session under a path segment; a malformed ID is an unknown session.
pub(crate) fn lookup(state: &Shared, id: &str) -> Result<Arc<Entry>, ApiError> {
    let id: SessionId = id.parse().map_err(|_| ApiError::NoSuchSession)?;
    state.sessions.get(&id).ok_or(ApiError::NoSuchSession)
}

/// A request body, or the protocol's answer to a body over the limit.
fn body(state: &Shared, body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::BodyTooLarge {
                limit: state.config.max_body,
            }
        } else {
            ApiError::BadRequest(rejection.body_text())
        }
    })
}

/// Parses an event ID from client input (header, query, body).
pub(crate) fn parse_cursor(text: &str, what: &str) -> Result<EventId, ApiError> {
    text.parse()
        .map_err(|e| ApiError::BadRequest(format!("{what}: {e}")))
}

#[derive(Deserialize)]
struct CursorBody {
    cursor: String,
}

fn cursor_body(bytes: &Bytes) -> Result<EventId, ApiError> {
    let body: CursorBody = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::BadRequest(format!("body must be {{\"cursor\": EVENT_ID}}: {e}")))?;
    parse_cursor(&body.cursor, "cursor")
}

fn event_id(session: &Session, seq: u64) -> String {
    EventId {
        epoch: session.epoch(),
        seq,
    }
    .to_string()
}

async fn create_session(State(AppState(state)): State<AppState>) -> Result<Response, ApiError> {
    let config = &state.config;
    let options = SessionOptions {
        strict: config.strict,
        ticket_ttl: config.ticket_ttl,
        ..SessionOptions::default()
    };
    let ring_config = Config::default()
        .events(config.ring_events)
        .bytes(config.ring_bytes);
    loop {
        let id = SessionId::random().map_err(|e| ApiError::Internal(e.to_string()))?;
        let (entry, created) = state
            .sessions
            .get_or_try_insert_with(id, || {
                Ring::try_new(ring_config).map(|ring| Entry {
                    session: Session::new(ring, options),
                    changed: watch::channel(0).0,
                })
            })
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        if created {
            state
                .metrics
                .sessions_created
                .fetch_add(1, Ordering::Relaxed);
            let body = json!({
                "session": id.to_string(),
                "epoch": format!("{:016x}", entry.session.epoch()),
            });
            return Ok((StatusCode::CREATED, Json(body)).into_response());
        }
    }
}

async fn emit(
    State(AppState(state)): State<AppState>,
    Path(id): Path<String>,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let entry = lookup(&state, &id)?;
    let bytes = body(&state, payload)?;
    // JSON text is UTF-8 (RFC 8259); `IgnoredAny` skips strings unchecked.
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| ApiError::BadRequest(format!("body must be UTF-8 JSON: {e}")))?;
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map_err(|e| ApiError::BadRequest(format!("body must be a JSON value: {e}")))?;
    // Stored compact but otherwise as sent (key order, number spelling and
    // escapes untouched): one SSE data line, the same bytes on every transport.
    let compact = crate::json::minify(&bytes);
    match entry.session.ring().emit(&compact) {
        Ok(seq) => {
            state.metrics.events_emitted.fetch_add(1, Ordering::Relaxed);
            Ok((
                StatusCode::ACCEPTED,
                Json(json!({ "id": event_id(&entry.session, seq) })),
            )
                .into_response())
        }
        Err(EmitError::TooLarge { len, max }) => Err(ApiError::PayloadTooLarge { len, max }),
        // Only `emit_batch` refuses a batch; a single emit fails only for size.
        Err(EmitError::BatchTooLarge {
            bytes, max_bytes, ..
        }) => Err(ApiError::PayloadTooLarge {
            len: usize::try_from(bytes).unwrap_or(usize::MAX),
            max: usize::try_from(max_bytes).unwrap_or(usize::MAX),
        }),
    }
}

async fn session_state(
    State(AppState(state)): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let entry = lookup(&state, &id)?;
    let s = entry.session.state();
    Ok(Json(json!({
        "epoch": format!("{:016x}", s.epoch),
        "acked": s.acked,
        "sent": s.sent,
        "published": s.published,
        "first_retained": s.first_retained,
        "transport": s.transport.as_str(),
    }))
    .into_response())
}

async fn delete_session(
    State(AppState(state)): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
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

async fn ack(
    State(AppState(state)): State<AppState>,
    Path(id): Path<String>,
    payload: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let entry = lookup(&state, &id)?;
    let cursor = cursor_body(&body(&state, payload)?)?;
    entry.session.ack(cursor).map_err(ApiError::Refused)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn upgrade(
    State(AppState(state)): State<AppState>,
    Path(id): Path<String>,
    payload: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let entry = lookup(&state, &id)?;
    let cursor = cursor_body(&body(&state, payload)?)?;
    let ticket = Ticket(random_bytes().map_err(|e| ApiError::Internal(e.to_string()))?);
    match entry.session.begin_upgrade(cursor, ticket, Instant::now()) {
        Ok(grant) => {
            state
                .metrics
                .migrations_granted
                .fetch_add(1, Ordering::Relaxed);
            Ok(Json(json!({
                "ticket": ticket.to_string(),
                "ws": format!("/session/{id}/ws?ticket={ticket}"),
                "replay_from": grant.replay_from,
                "replay_to": grant.replay_to,
            }))
            .into_response())
        }
        Err(refusal) => {
            state.metrics.refused(Stage::Migration, &refusal);
            Err(ApiError::Refused(refusal))
        }
    }
}

async fn websocket(
    State(AppState(state)): State<AppState>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let entry = lookup(&state, &id)?;
    let ticket = query
        .get("ticket")
        .ok_or_else(|| ApiError::BadRequest("missing ?ticket=".into()))?;
    let upgrade = upgrade.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    // A malformed ticket is as unknown as a wrong one.
    let ticket: Ticket = match ticket.parse() {
        Ok(ticket) => ticket,
        Err(_) => {
            let refusal = gapless::session::Refusal::BadTicket;
            state.metrics.refused(Stage::Migration, &refusal);
            return Err(ApiError::Refused(refusal));
        }
    };
    ws::handshake(state, entry, ticket, upgrade)
}

async fn metrics(State(AppState(state)): State<AppState>) -> Response {
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
        .into_response()
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
