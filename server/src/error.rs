//! Every non-success answer of the protocol, as one enum rendered to its
//! wire body ([`gapless_client::wire`]) with the right status. No answer
//! carries internal error text: what failed inside is logged, not sent.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use gapless::session::Refusal;
use gapless_client::{Failure, Refusal as RefusalBody};
use serde::Serialize;

/// A request the server answers with an error.
#[derive(Debug)]
pub(crate) enum ApiError {
    /// `404 no_such_session`: unknown, deleted, expired or malformed
    /// session ID.
    NoSuchSession,
    /// `404 not_found`: no such route.
    NotFound,
    /// `400 bad_request`: malformed event ID, cursor, header or JSON.
    BadRequest(String),
    /// `413 body_too_large`: the request body is over the server's limit.
    BodyTooLarge { limit: usize },
    /// `413 payload_too_large`: the payload is larger than the ring holds.
    PayloadTooLarge { len: usize, max: usize },
    /// `415 unsupported_media_type`: an emit that is not `application/json`.
    UnsupportedMediaType,
    /// `409`: one of the protocol's refusals.
    Refused(Refusal),
    /// `429 too_many_streams`: the session has as many streams open as
    /// allowed.
    TooManyStreams,
    /// `503 too_many_sessions` with `Retry-After`.
    TooManySessions { retry_after_secs: u64 },
    /// `429 too_many_sessions_per_client` with `Retry-After`: this client
    /// holds as many live sessions as one client may.
    TooManySessionsPerClient { retry_after_secs: u64 },
    /// `503 memory_budget_exceeded` with `Retry-After`: one more ring would
    /// take the server past its memory budget.
    MemoryBudgetExceeded { retry_after_secs: u64 },
    /// `408 body_read_timeout` (and the connection closes): the body did
    /// not arrive within `--body-read-timeout`.
    BodyReadTimeout,
    /// `401 unauthorized` with `WWW-Authenticate: Bearer`: with
    /// `--publish-keys`, an emit or `DELETE` without the session's publish
    /// key as `Authorization: Bearer <key>` (or with another key). The
    /// same answer as the Durable Streams routes' writes.
    Unauthorized,
    /// `503 history_unavailable` with `Retry-After`: the shared history
    /// (Redis) did not answer, or too many emits wait for it on this
    /// instance; nothing was acknowledged.
    HistoryUnavailable,
    /// `507 insufficient_storage`: the disk history (`--data-dir`) has no
    /// room for the write; nothing was acknowledged.
    InsufficientStorage,
    /// `500 internal`: the server could not complete the request; the
    /// cause is logged here and never sent.
    Internal(String),
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, failure) = match self {
            Self::Refused(refusal) => {
                return json_error(StatusCode::CONFLICT, &RefusalBody::from(&refusal))
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
            Self::UnsupportedMediaType => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                Failure::UnsupportedMediaType,
            ),
            Self::TooManyStreams => (StatusCode::TOO_MANY_REQUESTS, Failure::TooManyStreams),
            Self::TooManySessions { retry_after_secs } => {
                let mut response =
                    json_error(StatusCode::SERVICE_UNAVAILABLE, &Failure::TooManySessions);
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
                return response;
            }
            Self::TooManySessionsPerClient { retry_after_secs } => {
                return with_retry_after(
                    StatusCode::TOO_MANY_REQUESTS,
                    Failure::TooManySessionsPerClient,
                    retry_after_secs,
                )
            }
            Self::MemoryBudgetExceeded { retry_after_secs } => {
                return with_retry_after(
                    StatusCode::SERVICE_UNAVAILABLE,
                    Failure::MemoryBudgetExceeded,
                    retry_after_secs,
                )
            }
            Self::BodyReadTimeout => {
                let mut response =
                    json_error(StatusCode::REQUEST_TIMEOUT, &Failure::BodyReadTimeout);
                // The rest of the body may still come: the connection
                // cannot carry another request.
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                return response;
            }
            Self::Unauthorized => {
                let mut response = json_error(
                    StatusCode::UNAUTHORIZED,
                    &Failure::Unauthorized {
                        detail: "writes need the session's publish key as \
                                 Authorization: Bearer <key>"
                            .into(),
                    },
                );
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return response;
            }
            Self::InsufficientStorage => (
                StatusCode::INSUFFICIENT_STORAGE,
                Failure::InsufficientStorage,
            ),
            // Redis comes back, or the queue drains: worth a retry soon.
            Self::HistoryUnavailable => {
                return with_retry_after(
                    StatusCode::SERVICE_UNAVAILABLE,
                    Failure::HistoryUnavailable,
                    1,
                )
            }
            Self::Internal(cause) => {
                tracing::error!(%cause, "internal error");
                (StatusCode::INTERNAL_SERVER_ERROR, Failure::Internal)
            }
        };
        json_error(status, &failure)
    }
}

/// An error answer of either wire: `status` and `body` as JSON
/// (`Content-Type: application/json`). Every error body the server sends
/// is built here: the session routes' [`Failure`] and [`RefusalBody`]
/// (`{"error": code, ...}`), the Durable Streams routes' refusals
/// (`handlers::streams`: `{"detail", "error"}` and the gap's figures), and
/// the layers' rewrites of axum's own errors and of a panic.
pub(crate) fn json_error(status: StatusCode, body: &impl Serialize) -> Response {
    (status, Json(body)).into_response()
}

/// `failure` with `status` and a `Retry-After` of `secs`.
fn with_retry_after(status: StatusCode, failure: Failure, secs: u64) -> Response {
    let mut response = json_error(status, &failure);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    response
}

impl From<crate::state::LoadError> for ApiError {
    fn from(error: crate::state::LoadError) -> Self {
        use crate::state::LoadError;
        match error {
            // The session's `Retry-After`: sessions end on DELETE and on
            // idle expiry.
            LoadError::TooMany => Self::TooManySessions {
                retry_after_secs: 5,
            },
            LoadError::MemoryBudget => Self::MemoryBudgetExceeded {
                retry_after_secs: 5,
            },
            LoadError::Gone => Self::NoSuchSession,
            LoadError::History(crate::history::HistoryError::Corrupt(what)) => {
                Self::Internal(format!("history: {what}"))
            }
            // Permanent: a retry would get the same answer, so not the
            // retryable 503.
            LoadError::History(crate::history::HistoryError::Damaged(what)) => {
                Self::Internal(format!("history: the session's keys are damaged: {what}"))
            }
            LoadError::History(crate::history::HistoryError::Full(why)) => {
                tracing::warn!(%why, "disk history full");
                Self::InsufficientStorage
            }
            LoadError::History(error) => {
                tracing::warn!(%error, "shared history");
                Self::HistoryUnavailable
            }
            LoadError::Restore(what) => Self::Internal(format!("restoring a session: {what}")),
        }
    }
}
