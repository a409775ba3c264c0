//! [`StreamEntry`]: one rmcp stream as the store holds it (its key, its
//! ring, what the store learned from its messages), and [`is_terminal`]:
//! which message ends a request's stream.

use crate::id::StreamKey;
use crate::lifecycle::Clocks;
use gapless::Ring;
use rmcp::model::{RequestId, ServerJsonRpcMessage, ServerNotification};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// Parsed messages a stream keeps at most (besides their bytes in the
/// ring), newest first.
const RECENT_EVENTS: usize = 64;

/// The newest stored messages of a stream, parsed: a replay of recent
/// events (the common resume: a client cut moments ago) clones them instead
/// of parsing their JSON back. Bounded by [`RECENT_EVENTS`] and by an
/// eighth of the ring's bytes of their JSON, so the ring's `Config` still
/// states what a stream costs, give or take that share.
#[derive(Debug, Default)]
pub(crate) struct Recent {
    /// `(seq, JSON length, message)`, seqs increasing.
    events: VecDeque<(u64, usize, Arc<ServerJsonRpcMessage>)>,
    /// The JSON lengths summed.
    bytes: usize,
}

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
    /// The newest messages, parsed; at most `recent_bytes` of their JSON.
    recent: Mutex<Recent>,
    /// An eighth of the ring's bytes.
    recent_bytes: usize,
    /// Every event id of the stream up to its seq: `"{key}.{epoch:016x}-"`
    /// (an event id is this and the seq in decimal), formatted once.
    id_prefix: String,
    /// The seq of the first response or error stored as a message;
    /// `u64::MAX` until then.
    terminal_seq: AtomicU64,
}

impl StreamEntry {
    /// rmcp stream `stream_id`, created at `now_ms`, that has stored
    /// nothing yet.
    pub(crate) fn new(key: StreamKey, stream_id: String, ring: Arc<Ring>, now_ms: u64) -> Self {
        let recent_bytes = ring.geometry().arena_bytes() / 8;
        let id_prefix = format!("{key}.{:016x}-", ring.epoch());
        Self {
            key,
            stream_id,
            ring,
            clocks: Clocks::new(now_ms),
            progress_id: OnceLock::new(),
            response_id: OnceLock::new(),
            recent: Mutex::new(Recent::default()),
            recent_bytes,
            id_prefix,
            terminal_seq: AtomicU64::new(u64::MAX),
        }
    }

    /// The response or error `message` was stored at `seq` (the first one
    /// counts).
    pub(crate) fn stored_terminal(&self, seq: u64) {
        self.terminal_seq.fetch_min(seq, Ordering::Relaxed);
    }

    /// Whether the event at `seq` is the stream's response or error:
    /// `Some` when the store knows without reading the ring (`seq` is at or
    /// before the first one stored), `None` when only the record can say
    /// (an event after it, which rmcp never stores).
    pub(crate) fn is_terminal_at(&self, seq: u64) -> Option<bool> {
        let terminal = self.terminal_seq.load(Ordering::Relaxed);
        match seq.cmp(&terminal) {
            std::cmp::Ordering::Less => Some(false),
            std::cmp::Ordering::Equal => Some(true),
            std::cmp::Ordering::Greater => None,
        }
    }

    /// Keeps `message`, stored at `seq` as `len` bytes of JSON, for replays
    /// (the oldest kept go first when over the bounds).
    pub(crate) fn remember(&self, seq: u64, len: usize, message: &Arc<ServerJsonRpcMessage>) {
        if len > self.recent_bytes {
            return;
        }
        let mut recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        recent.events.push_back((seq, len, Arc::clone(message)));
        recent.bytes += len;
        while recent.events.len() > RECENT_EVENTS || recent.bytes > self.recent_bytes {
            match recent.events.pop_front() {
                Some((_, len, _)) => recent.bytes -= len,
                None => break,
            }
        }
    }

    /// The message stored at `seq`, if it is among the newest kept.
    pub(crate) fn recall(&self, seq: u64) -> Option<Arc<ServerJsonRpcMessage>> {
        let recent = self.recent.lock().unwrap_or_else(PoisonError::into_inner);
        let oldest = recent.events.front()?.0;
        let index = usize::try_from(seq.checked_sub(oldest)?).ok()?;
        // Seqs are dense from `oldest` unless a marker or a placeholder
        // came between: then look for it.
        match recent.events.get(index) {
            Some((at, _, message)) if *at == seq => Some(Arc::clone(message)),
            _ => recent
                .events
                .iter()
                .find(|(at, _, _)| *at == seq)
                .map(|(_, _, message)| Arc::clone(message)),
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

    /// The id of the event at `seq`: what [`StoreEventId`](crate::id::StoreEventId)'s `Display`
    /// writes, from the stream's formatted prefix and the seq.
    pub(crate) fn event_id(&self, seq: u64) -> String {
        let mut id = String::with_capacity(self.id_prefix.len() + 20);
        id.push_str(&self.id_prefix);
        push_decimal(&mut id, seq);
        id
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

/// Appends `n` in decimal (no leading zeros), without the formatting
/// machinery.
fn push_decimal(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend(digits[at..].iter().map(|&digit| char::from(digit)));
}

/// Whether a message ends its request's stream: rmcp sends a request
/// stream's response or error last and closes the stream after it.
pub(crate) fn is_terminal(message: &ServerJsonRpcMessage) -> bool {
    matches!(
        message,
        ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::StoreEventId;
    use gapless::Config;

    #[test]
    fn event_ids_are_what_store_event_id_displays() {
        let key = StreamKey::random().expect("the OS random source");
        let ring = Arc::new(Ring::new(Config::default().events(64).bytes(16 << 10)));
        let entry = StreamEntry::new(key, "s".to_owned(), Arc::clone(&ring), 0);
        for seq in [0, 1, 9, 10, 42, 99, 100, 12_345, u64::MAX - 1, u64::MAX] {
            let expected = StoreEventId {
                key,
                event: gapless::EventId {
                    epoch: ring.epoch(),
                    seq,
                },
            }
            .to_string();
            assert_eq!(entry.event_id(seq), expected);
            assert_eq!(
                entry
                    .event_id(seq)
                    .parse::<StoreEventId>()
                    .map(|id| id.event.seq),
                Ok(seq)
            );
        }
    }

    #[test]
    fn knows_the_first_terminal_seq() {
        let key = StreamKey::random().expect("the OS random source");
        let ring = Arc::new(Ring::new(Config::default().events(64).bytes(16 << 10)));
        let entry = StreamEntry::new(key, "s".to_owned(), ring, 0);
        assert_eq!(entry.is_terminal_at(5), Some(false));
        entry.stored_terminal(7);
        entry.stored_terminal(9);
        assert_eq!(entry.is_terminal_at(6), Some(false));
        assert_eq!(entry.is_terminal_at(7), Some(true));
        assert_eq!(entry.is_terminal_at(9), None);
    }
}
