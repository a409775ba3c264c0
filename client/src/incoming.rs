//! What a transport yields, in the protocol's terms.

use crate::refusal::Refusal;
use gapless::EventId;
use serde_json::Value;

/// One delivered event, from SSE or WebSocket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// Its ID.
    pub id: EventId,
    /// Its payload: the JSON text exactly as received (SSE: the `data:`
    /// lines joined; WebSocket: the raw text of the frame's `data` member).
    pub data: String,
}

impl Delivered {
    /// The payload parsed.
    ///
    /// # Errors
    /// The JSON error (the client already checked it parses).
    pub fn json(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(&self.data)
    }
}

/// How a transport ended without a gap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Closed {
    /// The WebSocket close code, if a close frame came (`None` for SSE).
    pub code: Option<u16>,
    /// The close reason (empty for SSE).
    pub reason: String,
    /// SSE: the body ended properly. WebSocket: a close frame came.
    pub clean: bool,
}

impl Closed {
    /// An end without a close frame or reason: `clean` says whether the
    /// transport ended properly.
    pub(crate) fn bare(clean: bool) -> Self {
        Self {
            code: None,
            reason: String::new(),
            clean,
        }
    }
}

/// What a transport yields.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    /// The next event.
    Event(Delivered),
    /// The server ended the transport naming a gap (SSE `event: gap`,
    /// WebSocket close 4409). Its JSON body, typed.
    Gap(Refusal),
    /// The transport ended.
    Closed(Closed),
}
