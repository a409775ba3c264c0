//! [`StreamEntry`]: one rmcp stream as the store holds it (its key, its
//! ring, what the store learned from its messages), and [`is_terminal`]:
//! which message ends a request's stream.

use crate::id::{StoreEventId, StreamKey};
use crate::lifecycle::Clocks;
use gapless::Ring;
use rmcp::model::{RequestId, ServerJsonRpcMessage, ServerNotification};
use std::sync::{Arc, OnceLock};

/// One rmcp stream: its ring and what the store learned about it.
#[derive(Debug)]
pub(crate) struct StreamEntry {
    pub(crate) key: StreamKey,
    /// rmcp's id of the stream.
    pub(crate) stream_id: String,
    pub(crate) ring: Arc<Ring>,
    /// Its last use and completion, for the store's limits.
    pub(crate) clocks: Clocks,
    /// The token of the first `notifications/progress` stored on the
    /// stream: the request's id for the official clients.
    progress_id: OnceLock<RequestId>,
    /// The id of the response or error stored on the stream.
    response_id: OnceLock<RequestId>,
}

impl StreamEntry {
    /// rmcp stream `stream_id`, created at `now_ms`, that has stored
    /// nothing yet.
    pub(crate) fn new(key: StreamKey, stream_id: String, ring: Arc<Ring>, now_ms: u64) -> Self {
        Self {
            key,
            stream_id,
            ring,
            clocks: Clocks::new(now_ms),
            progress_id: OnceLock::new(),
            response_id: OnceLock::new(),
        }
    }

    /// The affected request's id, if the store could learn it: the id of the
    /// stream's response or error, else the token of its first progress
    /// notification.
    pub(crate) fn request_id(&self) -> Option<RequestId> {
        self.response_id
            .get()
            .or_else(|| self.progress_id.get())
            .cloned()
    }

    pub(crate) fn event_id(&self, seq: u64) -> String {
        StoreEventId {
            key: self.key,
            event: gapless::EventId {
                epoch: self.ring.epoch(),
                seq,
            },
        }
        .to_string()
    }

    /// Notes what `message`, stored at `now_ms`, tells about the stream's
    /// request (see [`request_id`](Self::request_id)) and whether it
    /// completed it.
    pub(crate) fn learn(&self, message: &ServerJsonRpcMessage, now_ms: u64) {
        self.clocks.touch(now_ms);
        if is_terminal(message) {
            self.clocks.complete(now_ms);
        }
        match message {
            ServerJsonRpcMessage::Notification(notification) => {
                if let ServerNotification::ProgressNotification(progress) =
                    &notification.notification
                {
                    let _ = self
                        .progress_id
                        .set(progress.params.progress_token.0.clone());
                }
            }
            ServerJsonRpcMessage::Response(response) => {
                let _ = self.response_id.set(response.id.clone());
            }
            ServerJsonRpcMessage::Error(error) => {
                if let Some(id) = &error.id {
                    let _ = self.response_id.set(id.clone());
                }
            }
            ServerJsonRpcMessage::Request(_) => {}
        }
    }
}

/// Whether a message ends its request's stream: rmcp sends a request
/// stream's response or error last and closes the stream after it.
pub(crate) fn is_terminal(message: &ServerJsonRpcMessage) -> bool {
    matches!(
        message,
        ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_)
    )
}
