//! Every non-success answer of the protocol, as one enum rendered to a JSON
//! body with the right status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use gapless::session::Refusal;
use serde_json::{json, Value};

/// A request the server answers with an error.
#[derive(Debug)]
pub(crate) enum ApiError {
    /// `404 no_such_session`: unknown, deleted or malformed session ID.
    NoSuchSession,
    /// `400 bad_request`: malformed event ID, cursor, header or JSON.
    BadRequest(String),
    /// `413`: the request body is over the server's limit.
    BodyTooLarge { limit: usize },
    /// `413 payload_too_large`: the payload is larger than the ring holds.
    PayloadTooLarge { len: usize, max: usize },
    /// `409`: one of the protocol's refusals.
    Refused(Refusal),
    /// `500`: the OS random source failed.
    Internal(String),
}

/// The JSON body of a refusal: `error` plus its figures (seqs as integers,
/// epochs as 16 hex digits).
pub(crate) fn refusal_body(refusal: &Refusal) -> Value {
    let code = refusal.code();
    match *refusal {
        Refusal::GapNotCovered {
            cursor,
            first_retained,
            published,
            evicted,
        } => json!({
            "error": code,
            "cursor": cursor,
            "first_retained": first_retained,
            "published": published,
            "evicted": evicted,
        }),
        Refusal::CursorAhead {
            cursor,
            sent,
            published,
        } => json!({ "error": code, "cursor": cursor, "sent": sent, "published": published }),
        Refusal::ForeignEpoch {
            cursor,
            cursor_epoch,
            epoch,
        } => json!({
            "error": code,
            "cursor": cursor,
            "cursor_epoch": format!("{cursor_epoch:016x}"),
            "epoch": format!("{epoch:016x}"),
        }),
        Refusal::CursorMismatch { cursor, acked } => {
            json!({ "error": code, "cursor": cursor, "acked": acked })
        }
        Refusal::NotDrained { cursor, published } => {
            json!({ "error": code, "cursor": cursor, "published": published })
        }
        Refusal::MigrationInProgress | Refusal::BadTicket => json!({ "error": code }),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, body) = match self {
            Self::NoSuchSession => (StatusCode::NOT_FOUND, json!({ "error": "no_such_session" })),
            Self::BadRequest(detail) => (
                StatusCode::BAD_REQUEST,
                json!({ "error": "bad_request", "detail": detail }),
            ),
            Self::BodyTooLarge { limit } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                json!({ "error": "body_too_large", "detail": format!("request body is over {limit} bytes") }),
            ),
            Self::PayloadTooLarge { len, max } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                json!({ "error": "payload_too_large", "len": len, "max": max }),
            ),
            Self::Refused(refusal) => (StatusCode::CONFLICT, refusal_body(&refusal)),
            Self::Internal(detail) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({ "error": "internal", "detail": detail }),
            ),
        };
        (status, Json(body)).into_response()
    }
}
