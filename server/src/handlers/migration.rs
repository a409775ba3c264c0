//! `POST /session/{id}/upgrade` (a ticket for the client's own cursor) and
//! `GET /session/{id}/ws?ticket=T` (the WebSocket: first frames exactly
//! `cursor + 1 ..= replay_to`, then live).

use crate::delivery::{self, copy_replay, Attached, NotReplayed, StreamSlot};
use crate::error::ApiError;
use crate::extract::{CursorJson, SessionEntry};
use crate::metrics::Stage;
use crate::state::AppState;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Query, State};
use axum::response::Response;
use axum::Json;
use gapless::session::{Refusal, Ticket};
use gapless_client::wire::UpgradeGrant;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

pub(crate) async fn upgrade(
    State(AppState(state)): State<AppState>,
    SessionEntry { id, entry }: SessionEntry,
    CursorJson(cursor): CursorJson,
) -> Result<Json<UpgradeGrant>, ApiError> {
    let entry = state.refresh(entry).await?;
    let now = Instant::now();
    // A pending upgrade whose ticket was used on another instance no
    // longer blocks a new one here.
    state
        .history
        .release_used_upgrade(&entry, now)
        .await
        .map_err(|error| state.history_failed(error))?;
    let ticket = Ticket::random().map_err(|e| ApiError::Internal(e.to_string()))?;
    let begun = entry.session.begin_upgrade(cursor, ticket, now);
    // With a shared history the cursors, and a granted ticket, are recorded
    // there before the answer, so the handshake may reach any instance; if
    // they cannot be, the grant is withdrawn (nothing blocks a retry).
    let recorded = async {
        state.persist_cursors(&entry).await?;
        if begun.is_ok() {
            state
                .history
                .record_grant(&id, &ticket, cursor, state.config.ticket_ttl)
                .await
                .map_err(|error| state.history_failed(error))?;
        }
        Ok::<(), ApiError>(())
    };
    if let Err(error) = recorded.await {
        entry.session.cancel_upgrade(&ticket);
        return Err(error);
    }
    match begun {
        Ok(grant) => {
            state.metrics.migrations_granted.inc();
            Ok(Json(UpgradeGrant {
                ticket: ticket.to_string(),
                ws: format!("/session/{id}/ws?ticket={ticket}"),
                replay_from: grant.replay_from,
                replay_to: grant.replay_to,
            }))
        }
        Err(refusal) => {
            state.metrics.refused(Stage::Migration, &refusal);
            Err(ApiError::Refused(refusal))
        }
    }
}

pub(crate) async fn websocket(
    State(AppState(state)): State<AppState>,
    SessionEntry { entry, .. }: SessionEntry,
    Query(query): Query<HashMap<String, String>>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let ticket = query
        .get("ticket")
        .ok_or_else(|| ApiError::BadRequest("missing ?ticket=".into()))?;
    let upgrade = upgrade
        .map_err(|e| ApiError::BadRequest(e.body_text()))?
        .max_message_size(state.config.ws_max_message)
        .max_frame_size(state.config.ws_max_message);
    let refuse = |refusal: Refusal| {
        state.metrics.refused(Stage::Migration, &refusal);
        refusal
    };
    // A malformed ticket is as unknown as a wrong one.
    let Ok(ticket) = ticket.parse::<Ticket>() else {
        return Err(ApiError::Refused(refuse(Refusal::BadTicket)));
    };
    let entry = state.refresh(entry).await?;
    let slot = StreamSlot::take(&state, &entry)?;
    let now = Instant::now();
    let completed = state
        .history
        .complete_upgrade(&entry, &ticket, now)
        .await
        .map_err(|error| state.history_failed(error))?;
    let generation = state.persist_check(&entry, completed.is_ok()).await?;
    let (grant, attachment) = match completed {
        Ok(granted) => granted,
        // The gap was evicted since the grant: the handshake completes and
        // the socket closes with 4409 and the figures.
        Err(refusal @ Refusal::GapNotCovered { .. }) => {
            let refusal = refuse(refusal);
            return Ok(close_with_gap(upgrade, refusal));
        }
        Err(refusal) => return Err(ApiError::Refused(refuse(refusal))),
    };
    state.metrics.migrations_completed.inc();
    let attached = Attached::new(Arc::clone(&state), slot, attachment, generation);
    match copy_replay(
        &state,
        &attached,
        grant.cursor,
        grant.replay_to,
        Stage::Migration,
    ) {
        Ok(replay) => Ok(upgrade.on_upgrade(move |socket| {
            let transport = delivery::ws::WsTransport::new(socket, &state.config);
            let lifecycle = &state.lifecycle;
            lifecycle.track(delivery::deliver(
                Arc::clone(&state),
                attached,
                replay,
                transport,
            ))
        })),
        Err(NotReplayed::Gap(refusal)) => {
            // The gap was accounted: recorded before the close leaves.
            state.persist_cursors(&entry).await?;
            Ok(close_with_gap(upgrade, refusal))
        }
        Err(NotReplayed::Ahead) => Err(ApiError::Internal(
            "replay ran ahead of the watermark".into(),
        )),
    }
}

/// Completes the handshake only to close with 4409 and the refusal's body.
fn close_with_gap(upgrade: WebSocketUpgrade, refusal: Refusal) -> Response {
    upgrade.on_upgrade(move |mut socket| async move {
        let _ = socket.send(delivery::ws::gap_close(&refusal)).await;
    })
}
