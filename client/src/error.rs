//! Everything a call can fail with.

use crate::refusal::{Failure, Refusal};
use gapless::session::SilentGap;
use std::fmt;
use std::future::Future;
use std::time::Duration;
use tokio_tungstenite::tungstenite;

/// A transport error of the HTTP client (connect, send, or a body read).
pub type HttpError = Box<dyn std::error::Error + Send + Sync>;

/// Everything a call can fail with. Answers that follow the protocol are
/// typed; anything that does not is [`ClientError::UnexpectedStatus`] or
/// [`ClientError::Protocol`].
#[derive(Debug)]
pub enum ClientError {
    /// `409` with a refusal body.
    Refused(Refusal),
    /// `404 {"error": "no_such_session"}`.
    NoSuchSession,
    /// `400 {"error": "bad_request", "detail": ...}`.
    BadRequest {
        /// The `detail` field.
        detail: String,
    },
    /// `413 {"error": "payload_too_large"}`: the payload is larger than the
    /// session's ring can hold.
    PayloadTooLarge,
    /// `413` for a request body over the server's limit.
    BodyTooLarge {
        /// The response body, as text.
        body: String,
    },
    /// `503 too_many_sessions` (or `too_many_connections`): the server is at
    /// a configured limit; try again after `retry_after` seconds if given.
    Unavailable {
        /// The `error` code.
        code: String,
        /// The `Retry-After` header, in seconds, if any.
        retry_after: Option<u64>,
    },
    /// A per-client limit (`429 too_many_sessions_per_client`,
    /// `429 too_many_connections_per_client`) or `408 body_read_timeout`.
    Limited {
        /// The HTTP status.
        status: u16,
        /// The `error` code.
        code: String,
        /// The `Retry-After` header, in seconds, if any.
        retry_after: Option<u64>,
    },
    /// `401 {"error": "unauthorized"}` (with `WWW-Authenticate: Bearer`):
    /// the server separates publishing from reading, and the request did
    /// not carry the session's publish key as `Authorization: Bearer
    /// <key>`, or carried another ([`crate::Client::set_publish_key`]).
    Unauthorized {
        /// The `detail` field.
        detail: String,
    },
    /// Any other status, or an error answer whose body does not follow the
    /// protocol.
    UnexpectedStatus {
        /// The HTTP status.
        status: u16,
        /// The response body, as text.
        body: String,
    },
    /// A successful answer whose shape does not follow the protocol.
    Protocol(String),
    /// A transport error from the HTTP client.
    Http(HttpError),
    /// A transport error from the WebSocket client.
    WebSocket(Box<tungstenite::Error>),
    /// A network wait exceeded the client's timeout.
    Timeout {
        /// What was being waited for.
        waiting_for: &'static str,
        /// The timeout.
        after: Duration,
    },
    /// An event arrived that is not `cursor + 1`: a hole, a duplicate, a
    /// reordering or a foreign epoch. Never accepted silently.
    SilentGap(SilentGap),
    /// After a resume or migration, the first event was not `cursor + 1`.
    FirstFrame {
        /// `cursor + 1`.
        expected: u64,
        /// The seq that came first.
        got: u64,
    },
    /// [`crate::MigratingClient::next`] without an open transport.
    NotConnected,
}

impl ClientError {
    /// Types an error answer from its status and body.
    pub fn from_parts(status: u16, body: &[u8]) -> Self {
        let text = String::from_utf8_lossy(body).into_owned();
        let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) else {
            return Self::UnexpectedStatus { status, body: text };
        };
        if status == 409 {
            return match Refusal::from_body(&json) {
                Ok(refusal) => Self::Refused(refusal),
                Err(detail) => Self::Protocol(format!("409 body: {detail}")),
            };
        }
        let failure = serde_json::from_value::<Failure>(json);
        match (status, failure) {
            (404, Ok(Failure::NoSuchSession)) => Self::NoSuchSession,
            (400, Ok(Failure::BadRequest { detail })) => Self::BadRequest { detail },
            (400, Err(error)) if text.contains("\"bad_request\"") => {
                Self::Protocol(format!("400 bad_request body: {error}: {text}"))
            }
            (413, Ok(Failure::PayloadTooLarge { .. })) => Self::PayloadTooLarge,
            (503, Ok(Failure::TooManySessions)) => Self::Unavailable {
                code: "too_many_sessions".into(),
                retry_after: None,
            },
            (503, Ok(Failure::TooManyConnections)) => Self::Unavailable {
                code: "too_many_connections".into(),
                retry_after: None,
            },
            (503, Ok(Failure::MemoryBudgetExceeded)) => Self::Unavailable {
                code: "memory_budget_exceeded".into(),
                retry_after: None,
            },
            (429, Ok(Failure::TooManySessionsPerClient)) => Self::Limited {
                status,
                code: "too_many_sessions_per_client".into(),
                retry_after: None,
            },
            (429, Ok(Failure::TooManyConnectionsPerClient)) => Self::Limited {
                status,
                code: "too_many_connections_per_client".into(),
                retry_after: None,
            },
            (408, Ok(Failure::BodyReadTimeout)) => Self::Limited {
                status,
                code: "body_read_timeout".into(),
                retry_after: None,
            },
            (401, Ok(Failure::Unauthorized { detail })) => Self::Unauthorized { detail },
            (503, Ok(Failure::HistoryUnavailable)) => Self::Unavailable {
                code: "history_unavailable".into(),
                retry_after: None,
            },
            (503, Ok(Failure::OwnerUnavailable)) => Self::Unavailable {
                code: "owner_unavailable".into(),
                retry_after: None,
            },
            (413, _) => Self::BodyTooLarge { body: text },
            _ => Self::UnexpectedStatus { status, body: text },
        }
    }

    /// The refusal, if this is a `409`.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Self::Refused(refusal) => Some(refusal),
            _ => None,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused(refusal) => write!(f, "409 {refusal}"),
            Self::NoSuchSession => f.write_str("404 no_such_session"),
            Self::BadRequest { detail } => write!(f, "400 bad_request: {detail}"),
            Self::PayloadTooLarge => f.write_str("413 payload_too_large"),
            Self::BodyTooLarge { body } => write!(f, "413 body over the limit: {body}"),
            Self::Limited {
                status,
                code,
                retry_after,
            } => match retry_after {
                Some(seconds) => write!(f, "{status} {code}, retry after {seconds} s"),
                None => write!(f, "{status} {code}"),
            },
            Self::Unauthorized { detail } => write!(f, "401 unauthorized: {detail}"),
            Self::Unavailable { code, retry_after } => match retry_after {
                Some(seconds) => write!(f, "503 {code}, retry after {seconds} s"),
                None => write!(f, "503 {code}"),
            },
            Self::UnexpectedStatus { status, body } => {
                write!(f, "unexpected status {status}: {body}")
            }
            Self::Protocol(detail) => write!(f, "protocol violation: {detail}"),
            Self::Http(error) => write!(f, "HTTP: {error}"),
            Self::WebSocket(error) => write!(f, "WebSocket: {error}"),
            Self::Timeout { waiting_for, after } => {
                write!(f, "timed out after {after:?} waiting for {waiting_for}")
            }
            Self::SilentGap(gap) => write!(f, "{gap}"),
            Self::FirstFrame { expected, got } => write!(
                f,
                "first event after resume/migration was {got}, expected cursor+1 = {expected}"
            ),
            Self::NotConnected => f.write_str("no transport is open"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Http(error) => Some(error.as_ref()),
            Self::WebSocket(error) => Some(error.as_ref()),
            Self::SilentGap(gap) => Some(gap),
            _ => None,
        }
    }
}

impl From<SilentGap> for ClientError {
    fn from(gap: SilentGap) -> Self {
        Self::SilentGap(gap)
    }
}

/// `future`, or [`ClientError::Timeout`] naming `waiting_for` after `timeout`.
pub(crate) async fn within<T>(
    timeout: Duration,
    waiting_for: &'static str,
    future: impl Future<Output = T>,
) -> Result<T, ClientError> {
    tokio::time::timeout(timeout, future)
        .await
        .map_err(|_| ClientError::Timeout {
            waiting_for,
            after: timeout,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_are_typed() {
        let e = ClientError::from_parts(
            409,
            br#"{"error":"gap_not_covered","cursor":2,"first_retained":9,"published":12,"evicted":6}"#,
        );
        assert!(matches!(
            e,
            ClientError::Refused(Refusal::GapNotCovered {
                cursor: 2,
                first_retained: 9,
                published: 12,
                evicted: 6
            })
        ));
        // Seqs as strings are a protocol violation, not a refusal.
        let e = ClientError::from_parts(
            409,
            br#"{"error":"cursor_ahead","cursor":"2","sent":1,"published":3}"#,
        );
        assert!(matches!(e, ClientError::Protocol(_)), "{e:?}");
        let e = ClientError::from_parts(
            409,
            br#"{"error":"foreign_epoch","cursor":2,"cursor_epoch":"0000000000000001","epoch":"00000000000000ab"}"#,
        );
        assert!(matches!(
            e,
            ClientError::Refused(Refusal::ForeignEpoch {
                cursor: 2,
                cursor_epoch: 1,
                epoch: 0xab
            })
        ));
        assert!(matches!(
            ClientError::from_parts(404, br#"{"error":"no_such_session"}"#),
            ClientError::NoSuchSession
        ));
        assert!(matches!(
            ClientError::from_parts(400, br#"{"error":"bad_request","detail":"x"}"#),
            ClientError::BadRequest { .. }
        ));
        assert!(matches!(
            ClientError::from_parts(400, br#"{"error":"bad_request"}"#),
            ClientError::Protocol(_)
        ));
        assert!(matches!(
            ClientError::from_parts(413, br#"{"error":"payload_too_large","len":9,"max":8}"#),
            ClientError::PayloadTooLarge
        ));
        assert!(matches!(
            ClientError::from_parts(401, br#"{"error":"unauthorized","detail":"x"}"#),
            ClientError::Unauthorized { detail } if detail == "x"
        ));
        // An application's own gate in front of the server may send the
        // code alone.
        assert!(matches!(
            ClientError::from_parts(401, br#"{"error":"unauthorized"}"#),
            ClientError::Unauthorized { .. }
        ));
        assert!(matches!(
            ClientError::from_parts(404, b"not found"),
            ClientError::UnexpectedStatus { status: 404, .. }
        ));
    }
}
