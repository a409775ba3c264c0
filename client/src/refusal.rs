//! The protocol's error bodies: a [`Refusal`] (`409`, an SSE `event: gap`, a
//! WebSocket close 4409) and every other error answer ([`Failure`]), both
//! `{"error": CODE, ...figures}`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// A refusal body, typed: the code and its figures. The server builds it
/// from the engine's [`gapless::session::Refusal`] (the one conversion,
/// [`From`] below); the client reads it with [`Refusal::from_body`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "error", rename_all = "snake_case")]
pub enum Refusal {
    /// `gap_not_covered`: the ring evicted events after the cursor (the
    /// evicted-gap case).
    GapNotCovered {
        /// The client's cursor (seq).
        cursor: u64,
        /// The oldest seq the ring still holds.
        first_retained: u64,
        /// The published watermark.
        published: u64,
        /// How many events after the cursor are gone.
        evicted: u64,
    },
    /// `cursor_ahead`: the cursor is beyond what the session was ever sent
    /// (the echoed-ID case: a server ID the client never processed).
    CursorAhead {
        /// The client's cursor (seq).
        cursor: u64,
        /// The highest seq the server handed to a transport.
        sent: u64,
        /// The published watermark.
        published: u64,
    },
    /// `foreign_epoch`: the cursor belongs to another incarnation.
    ForeignEpoch {
        /// The client's cursor (seq).
        cursor: u64,
        /// The epoch the cursor named.
        #[serde(with = "crate::wire::epoch_hex")]
        cursor_epoch: u64,
        /// The session's epoch.
        #[serde(with = "crate::wire::epoch_hex")]
        epoch: u64,
    },
    /// `cursor_mismatch` (strict servers): the cursor differs from `acked`.
    CursorMismatch {
        /// The client's cursor (seq).
        cursor: u64,
        /// The session's acked cursor.
        acked: u64,
    },
    /// `not_drained`: a cursor at or past `sent` while events up to the
    /// watermark are still in flight to a transport.
    NotDrained {
        /// The client's cursor (seq).
        cursor: u64,
        /// The published watermark.
        published: u64,
    },
    /// `migration_in_progress`: another upgrade is in flight.
    MigrationInProgress,
    /// `bad_ticket`: the ticket was used, expired, or is another session's.
    BadTicket,
    /// A code this client does not know (an extension), with its body.
    #[serde(skip)]
    Other {
        /// The `error` field.
        code: String,
        /// The whole body.
        body: Value,
    },
}

/// The codes [`Refusal`] types; any other is [`Refusal::Other`].
const KNOWN_CODES: [&str; 7] = [
    "gap_not_covered",
    "cursor_ahead",
    "foreign_epoch",
    "cursor_mismatch",
    "not_drained",
    "migration_in_progress",
    "bad_ticket",
];

impl Refusal {
    /// The protocol's code (`"gap_not_covered"`, ...).
    pub fn code(&self) -> &str {
        match self {
            Self::GapNotCovered { .. } => "gap_not_covered",
            Self::CursorAhead { .. } => "cursor_ahead",
            Self::ForeignEpoch { .. } => "foreign_epoch",
            Self::CursorMismatch { .. } => "cursor_mismatch",
            Self::NotDrained { .. } => "not_drained",
            Self::MigrationInProgress => "migration_in_progress",
            Self::BadTicket => "bad_ticket",
            Self::Other { code, .. } => code,
        }
    }

    /// The oldest retained seq, for a gap refusal (where to continue from
    /// if the application accepts the loss).
    pub fn first_retained(&self) -> Option<u64> {
        match self {
            Self::GapNotCovered { first_retained, .. } => Some(*first_retained),
            Self::Other { body, .. } => body.get("first_retained").and_then(Value::as_u64),
            _ => None,
        }
    }

    /// Reads a refusal body `{"error": CODE, ...figures}`. A known code's
    /// figures must be in their wire forms (seqs JSON integers, epochs 16
    /// hex digits); an unknown code is kept as [`Refusal::Other`].
    ///
    /// # Errors
    /// A description of what does not follow the protocol.
    pub fn from_body(body: &Value) -> Result<Self, String> {
        let code = match body.get("error") {
            Some(Value::String(code)) => code,
            Some(other) => return Err(format!("`error` must be a JSON string, got {other}")),
            None => return Err(format!("refusal body without `error`: {body}")),
        };
        if KNOWN_CODES.contains(&code.as_str()) {
            serde_json::from_value(body.clone()).map_err(|error| format!("{code}: {error}"))
        } else {
            Ok(Self::Other {
                code: code.clone(),
                body: body.clone(),
            })
        }
    }

    /// [`Refusal::from_body`] of JSON text.
    ///
    /// # Errors
    /// As [`Refusal::from_body`], or the text is not JSON.
    pub fn from_text(text: &str) -> Result<Self, String> {
        let body: Value = serde_json::from_str(text)
            .map_err(|error| format!("body is not JSON ({error}): {text:?}"))?;
        Self::from_body(&body)
    }

    /// The body as JSON text (what the server sends).
    pub fn to_json(&self) -> String {
        match self {
            Self::Other { body, .. } => body.to_string(),
            // A derived, internally tagged enum of integers and strings:
            // serialising it into a string cannot fail.
            known => serde_json::to_string(known).unwrap_or_default(),
        }
    }
}

impl From<&gapless::session::Refusal> for Refusal {
    /// The wire body of one of the engine's refusals.
    fn from(refusal: &gapless::session::Refusal) -> Self {
        use gapless::session::Refusal as Engine;
        match *refusal {
            Engine::GapNotCovered {
                cursor,
                first_retained,
                published,
                evicted,
            } => Self::GapNotCovered {
                cursor,
                first_retained,
                published,
                evicted,
            },
            Engine::CursorAhead {
                cursor,
                sent,
                published,
            } => Self::CursorAhead {
                cursor,
                sent,
                published,
            },
            Engine::ForeignEpoch {
                cursor,
                cursor_epoch,
                epoch,
            } => Self::ForeignEpoch {
                cursor,
                cursor_epoch,
                epoch,
            },
            Engine::CursorMismatch { cursor, acked } => Self::CursorMismatch { cursor, acked },
            Engine::NotDrained { cursor, published } => Self::NotDrained { cursor, published },
            Engine::MigrationInProgress => Self::MigrationInProgress,
            Engine::BadTicket => Self::BadTicket,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::GapNotCovered {
                cursor,
                first_retained,
                published,
                evicted,
            } => write!(
                f,
                "gap_not_covered: cursor {cursor}, first retained {first_retained}, published {published}, {evicted} evicted"
            ),
            Self::CursorAhead {
                cursor,
                sent,
                published,
            } => write!(
                f,
                "cursor_ahead: cursor {cursor}, sent {sent}, published {published}"
            ),
            Self::ForeignEpoch {
                cursor,
                cursor_epoch,
                epoch,
            } => write!(
                f,
                "foreign_epoch: cursor {cursor_epoch:016x}-{cursor}, session epoch {epoch:016x}"
            ),
            Self::CursorMismatch { cursor, acked } => {
                write!(f, "cursor_mismatch: cursor {cursor}, acked {acked}")
            }
            Self::NotDrained { cursor, published } => {
                write!(f, "not_drained: cursor {cursor}, published {published}")
            }
            Self::MigrationInProgress => f.write_str("migration_in_progress"),
            Self::BadTicket => f.write_str("bad_ticket"),
            Self::Other { code, body } => write!(f, "{code}: {body}"),
        }
    }
}

/// Every error answer that is not a refusal, as the server sends it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "error", rename_all = "snake_case")]
pub enum Failure {
    /// `404`: the session ID is unknown, deleted or malformed.
    NoSuchSession,
    /// `404`: no such route.
    NotFound,
    /// `400`: a malformed event ID, cursor, header or body.
    BadRequest {
        /// What is wrong, for a human.
        detail: String,
    },
    /// `413`: the request body is over the server's limit.
    BodyTooLarge {
        /// The limit, for a human.
        detail: String,
    },
    /// `413`: the payload is larger than the session's ring can hold.
    PayloadTooLarge {
        /// The payload's length in bytes.
        len: usize,
        /// The largest payload the ring holds.
        max: usize,
    },
    /// `405`: the route exists but not with this method (see `Allow`).
    MethodNotAllowed,
    /// `415`: an emit whose `Content-Type` is not `application/json`.
    UnsupportedMediaType,
    /// `429`: the session has as many streams open as the server allows.
    TooManyStreams,
    /// `503` with `Retry-After`: the server holds as many sessions as it
    /// allows.
    TooManySessions,
    /// `503`: the server holds as many connections as it allows.
    TooManyConnections,
    /// `429` with `Retry-After`: this client holds as many live sessions as
    /// the server allows one client.
    TooManySessionsPerClient,
    /// `429`: this client holds as many connections as the server allows
    /// one client.
    TooManyConnectionsPerClient,
    /// `503` with `Retry-After`: one more session would take the server
    /// past its memory budget.
    MemoryBudgetExceeded,
    /// `408`: the request body did not arrive in time (the connection is
    /// closed).
    BodyReadTimeout,
    /// `401` with `WWW-Authenticate: Bearer`: the server requires the
    /// session's publish key to emit or delete, as `Authorization: Bearer
    /// <key>`, and the request did not carry it (or carried another).
    Unauthorized {
        /// What the server wants, for a human (absent from a body that
        /// carries only the code).
        #[serde(default)]
        detail: String,
    },
    /// `503`: the shared history (several instances over Redis) did not
    /// answer; nothing was acknowledged.
    HistoryUnavailable,
    /// `507`: the disk of `--data-dir` has no room for the write (its
    /// bound, or the free space it keeps); nothing was acknowledged.
    InsufficientStorage,
    /// `503` with `Retry-After`: another instance owns the session (until
    /// its lease lapses).
    OwnerUnavailable,
    /// `500`: the server could not complete the request (what failed is in
    /// its log, never in the answer).
    Internal,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_engine_refusal_round_trips_through_its_body() {
        use gapless::session::Refusal as Engine;
        let all = [
            Engine::GapNotCovered {
                cursor: 2,
                first_retained: 9,
                published: 12,
                evicted: 6,
            },
            Engine::CursorAhead {
                cursor: 5,
                sent: 3,
                published: 4,
            },
            Engine::ForeignEpoch {
                cursor: 1,
                cursor_epoch: 0xab,
                epoch: 0xcd,
            },
            Engine::CursorMismatch {
                cursor: 3,
                acked: 2,
            },
            Engine::NotDrained {
                cursor: 3,
                published: 7,
            },
            Engine::MigrationInProgress,
            Engine::BadTicket,
        ];
        for engine in &all {
            let wire = Refusal::from(engine);
            assert_eq!(wire.code(), engine.code());
            let text = wire.to_json();
            assert_eq!(Refusal::from_text(&text), Ok(wire), "{text}");
        }
        assert_eq!(
            Refusal::from(&all[2]).to_json(),
            r#"{"error":"foreign_epoch","cursor":1,"cursor_epoch":"00000000000000ab","epoch":"00000000000000cd"}"#
        );
    }

    #[test]
    fn figures_in_another_form_are_a_protocol_violation() {
        assert!(Refusal::from_text(
            r#"{"error":"cursor_ahead","cursor":"2","sent":1,"published":3}"#
        )
        .is_err());
        assert!(Refusal::from_text(r#"{"error":"gap_not_covered","cursor":2}"#).is_err());
        assert!(Refusal::from_text(r#"{"cursor":2}"#).is_err());
        let other = Refusal::from_text(r#"{"error":"too_late","first_retained":4}"#).unwrap();
        assert_eq!(
            (other.code(), other.first_retained()),
            ("too_late", Some(4))
        );
    }
}
