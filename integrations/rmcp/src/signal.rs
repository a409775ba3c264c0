//! The explicit signal a replay sends instead of a silent jump.

use gapless::Gap;
use rmcp::model::{ErrorCode, ErrorData, NumberOrString, RequestId, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use serde_json::{json, Value};
use std::sync::Arc;

/// The JSON-RPC error code of every signal: "events lost".
///
/// A server-defined code (JSON-RPC reserves -32000..-32099 for them) that
/// neither rmcp nor the official clients use: -32000 and -32001 are what
/// the Python SDK synthesises for a dropped connection and a timeout, and
/// rmcp rewrites -32002 (resource not found) for newer protocol versions.
pub const EVENTS_LOST: i32 = -32010;

/// The `id` a signal's error carries when the store could not learn the
/// affected request's id. The official Python client rewrites the id of
/// any response or error that arrives on a request's stream to that
/// request's id, so the error still reaches the right call there.
pub const UNKNOWN_REQUEST_ID: &str = "gapless:unknown-request";

/// Why a replay could not continue exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The ring evicted events after the cursor.
    GapNotCovered,
    /// The cursor names a stream this store does not hold (another server
    /// process, a removed stream), or another incarnation of it (epoch), or a
    /// position it never published.
    ForeignCursor,
    /// The cursor is not an event id of this store.
    MalformedCursor,
    /// An event after the cursor was too large for the ring and was never
    /// stored.
    LostEvent,
}

impl Reason {
    /// The `data.reason` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::GapNotCovered => "gap_not_covered",
            Self::ForeignCursor => "foreign_cursor",
            Self::MalformedCursor => "malformed_cursor",
            Self::LostEvent => "lost_event",
        }
    }
}

/// A signal's content, before it becomes two messages.
#[derive(Clone, Debug)]
pub(crate) struct Signal {
    pub reason: Reason,
    /// The `Last-Event-ID` as received (or the last id this replay yielded).
    pub last_event_id: String,
    /// The cursor's seq, when it parsed.
    pub cursor: Option<u64>,
    pub first_retained: Option<u64>,
    pub evicted: Option<u64>,
    /// For [`Reason::LostEvent`]: the seq that was never stored, its size.
    pub lost: Option<(u64, u64)>,
    pub request_id: Option<RequestId>,
    pub detail: String,
}

impl Signal {
    pub(crate) fn new(reason: Reason, last_event_id: &str, detail: String) -> Self {
        Self {
            reason,
            last_event_id: last_event_id.to_owned(),
            cursor: None,
            first_retained: None,
            evicted: None,
            lost: None,
            request_id: None,
            detail,
        }
    }

    /// The [`Reason::GapNotCovered`] signal of `gap`, the ring's figures:
    /// the one way to build it, whether a resume finds the gap at its start
    /// or while following live. The caller adds the request's id.
    pub(crate) fn gap(gap: &Gap, last_event_id: &str) -> Self {
        let mut signal = Self::new(Reason::GapNotCovered, last_event_id, gap.to_string());
        signal.cursor = Some(gap.cursor);
        signal.first_retained = Some(gap.first_retained);
        signal.evicted = Some(gap.evicted);
        signal
    }

    /// The [`Reason::ForeignCursor`] signal of a cursor beyond what its
    /// stream published ([`gapless::Coverage::Ahead`]): the one way to
    /// build it, on a ring or on the shared history. The caller adds the
    /// request's id.
    pub(crate) fn ahead(cursor: u64, published: u64, last_event_id: &str) -> Self {
        let mut signal = Self::new(
            Reason::ForeignCursor,
            last_event_id,
            format!("the cursor {cursor} is beyond what the stream published ({published})"),
        );
        signal.cursor = Some(cursor);
        signal
    }

    pub(crate) fn data(&self) -> Value {
        let mut data = json!({
            "reason": self.reason.as_str(),
            "cursor": self.cursor,
            "first_retained": self.first_retained,
            "evicted": self.evicted,
            "last_event_id": self.last_event_id,
        });
        if let Some((seq, bytes)) = self.lost {
            data["lost_seq"] = json!(seq);
            data["lost_bytes"] = json!(bytes);
        }
        data
    }

    /// A `notifications/message` (level `error`) then the JSON-RPC error,
    /// both with `event_id` so the client keeps its cursor.
    pub(crate) fn into_messages(self, event_id: &str) -> [ServerSseMessage; 2] {
        let data = self.data();
        let log = json!({
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": { "level": "error", "logger": "gapless", "data": data },
        });
        let log: ServerJsonRpcMessage = match serde_json::from_value(log) {
            Ok(log) => log,
            Err(error) => unreachable!("a logging notification parses: {error}"),
        };
        let id = self
            .request_id
            .unwrap_or_else(|| NumberOrString::String(Arc::from(UNKNOWN_REQUEST_ID)));
        let message = format!("events lost ({}): {}", self.reason.as_str(), self.detail);
        let error = ServerJsonRpcMessage::error(
            ErrorData::new(ErrorCode(EVENTS_LOST), message, Some(data)),
            Some(id),
        );
        [
            ServerSseMessage::new(event_id, log),
            ServerSseMessage::new(event_id, error),
        ]
    }
}

/// An event id to send with a signal for a cursor that did not parse: the
/// cursor itself when it is short printable ASCII (so a retry sends the
/// same and gets the same answer), else a fixed one.
pub(crate) fn echo_id(cursor: &str) -> &str {
    if cursor.len() <= 2 * crate::id::MAX_ID_LEN
        && cursor.bytes().all(|b| (0x21..0x7f).contains(&b))
    {
        cursor
    } else {
        "gapless-malformed-cursor"
    }
}
