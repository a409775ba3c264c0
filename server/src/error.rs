//! Every non-success answer of the protocol, as one enum rendered to its
//! wire body ([`gapless_client::wire`]) with the right status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use gapless::session::Refusal;
use gapless_client::{Failure, Refusal as RefusalBody};

/// A request the server answers with an error.
#[derive(Debug)]
pub(crate) enum ApiError {
    /// `404 no_such_session`: unknown, deleted or malformed session ID.
    NoSuchSession,
    /// `404 not_found`: no such route.
    NotFound,
    /// `400 bad_request`: malformed event ID, cursor, header or JSON.
    BadRequest(String),
    /// `413 body_too_large`: the request body is over the server's limit.
    BodyTooLarge { limit: usize },
    /// `413 payload_too_large`: the payload is larger than the ring holds.
    PayloadTooLarge { len: usize, max: usize },
    /// `409`: one of the protocol's refusals.
    Refused(Refusal),
    /// `500 internal`: the server could not complete the request (the OS
    /// random source or the ring allocation failed).
    Internal(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, failure) = match self {
            Self::Refused(refusal) => {
                return (StatusCode::CONFLICT, Json(RefusalBody::from(&refusal))).into_response()
            }
            Self::NoSuchSession => (StatusCode::NOT_FOUND, Failure::NoSuchSession),
            Self::NotFound => (StatusCode::NOT_FOUND, Failure::NotFound),
            Self::BadRequest(detail) => (StatusCode::BAD_REQUEST, Failure::BadRequest { detail }),
            Self::BodyTooLarge { limit } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                Failure::BodyTooLarge {
                    detail: format!("request body is over {limit} bytes"),
                },
            ),
            Self::PayloadTooLarge { len, max } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                Failure::PayloadTooLarge { len, max },
            ),
            Self::Internal(detail) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                Failure::Internal { detail },
            ),
        };
        (status, Json(failure)).into_response()
    }
}
