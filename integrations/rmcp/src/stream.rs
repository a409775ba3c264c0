//! [`StreamEntry`]: one rmcp stream as the store holds it (its key, its
//! kind, its ring, what the store learned from its messages), and
//! [`is_terminal`]: which message ends a request's stream.

use crate::id::StreamKey;
use crate::lifecycle::Clocks;
use crate::record;
use gapless::{Config, EmitError, Ring};
use rmcp::model::{RequestId, ServerJsonRpcMessage, ServerNotification};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// A stream whose ring is configured larger than this starts on a ring of
/// this many events and bytes (at most), and moves to its configured size
/// only once it holds half of them (see [`StreamEntry::emit`]): a ring is
/// allocated zeroed, and most request streams (one call's progress and
/// result) never need more.
const FIRST_EVENTS: usize = 64;
const FIRST_BYTES: usize = 16 << 10;

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

/// What the emitter of a stream on its first ring tracks.
#[derive(Debug)]
struct Writer {
    /// The configured ring, while the stream is on a smaller first ring.
    full: Option<Config>,
    /// Events emitted to the first ring.
    events: usize,
    /// Their payload words (as the ring counts them: 8 bytes rounded up).
    words: usize,
}

/// Which of rmcp's two kinds of stream a stream is: decided once, from its
/// rmcp id, when the store first sees the stream ([`StreamKind::of`]), and
/// kept with it ([`StreamEntry::kind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamKind {
    /// A request's stream (rmcp names it with a bare uuid): the request's
    /// response or error ends it. A shared store keeps it in the history.
    Request,
    /// A session's standalone stream (`"{session}:common"`, the GET stream
    /// that outlives requests): no response ends it. It stays in this
    /// process (only the instance holding the session serves it).
    Standalone,
}

impl StreamKind {
    /// What rmcp appends to a session's id to name its standalone stream.
    const STANDALONE_SUFFIX: &'static str = ":common";

    /// The kind of the rmcp stream `stream_id`.
    pub(crate) fn of(stream_id: &str) -> Self {
        if stream_id.ends_with(Self::STANDALONE_SUFFIX) {
            Self::Standalone
        } else {
            Self::Request
        }
    }

    /// rmcp's id of session `session_id`'s standalone stream.
    pub(crate) fn standalone_id(session_id: &str) -> String {
        format!("{session_id}{}", Self::STANDALONE_SUFFIX)
    }
}

/// What a stream of a shared store ([`crate::shared`]) adds to its ring:
/// its log's creation, and the order of its appends.
#[derive(Debug, Default)]
pub(crate) struct SharedStream {
    /// Set once the stream's log exists in Redis.
    pub(crate) created: tokio::sync::OnceCell<()>,
    /// Held from an event's append to Redis until it is in the local ring:
    /// the ring's seqs are Redis's.
    pub(crate) appending: tokio::sync::Mutex<()>,
}

/// One rmcp stream: its ring and what the store learned about it.
#[derive(Debug)]
pub(crate) struct StreamEntry {
    pub(crate) key: StreamKey,
    /// rmcp's id of the stream.
    pub(crate) stream_id: String,
    /// Its kind, from `stream_id`.
    pub(crate) kind: StreamKind,
    /// The ring events go to: the first ring, then the configured one once
    /// the stream has grown (see [`emit`](Self::emit)).
    ring: Mutex<Arc<Ring>>,
    /// Emits in seq order; while the stream is on its first ring, what it
    /// holds.
    writer: Mutex<Writer>,
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
    /// In a shared store: the stream's log in Redis.
    pub(crate) shared: SharedStream,
    /// Every event id of the stream up to its seq: `"{key}.{epoch:016x}-"`
    /// (an event id is this and the seq in decimal), formatted once.
    id_prefix: String,
    /// The seq of the first response or error stored as a message;
    /// `u64::MAX` until then.
    terminal_seq: AtomicU64,
}

impl StreamEntry {
    /// rmcp stream `stream_id` of `kind`, created at `now_ms`, that has
    /// stored nothing yet, with a ring sized by `config` (starting smaller
    /// if `config` is larger than the first ring).
    pub(crate) fn new(
        key: StreamKey,
        stream_id: String,
        kind: StreamKind,
        config: Config,
        now_ms: u64,
    ) -> Self {
        let first = config
            .events(config.requested_events().min(FIRST_EVENTS))
            .bytes(config.requested_bytes().min(FIRST_BYTES));
        let full = (first != config).then_some(config);
        let ring = Arc::new(Ring::new(first));
        let recent_bytes = config.requested_bytes() / 8;
        let id_prefix = format!("{key}.{:016x}-", ring.epoch());
        Self {
            key,
            stream_id,
            kind,
            ring: Mutex::new(ring),
            writer: Mutex::new(Writer {
                full,
                events: 0,
                words: 0,
            }),
            clocks: Clocks::new(now_ms),
            progress_id: OnceLock::new(),
            response_id: OnceLock::new(),
            recent: Mutex::new(Recent::default()),
            recent_bytes,
            shared: SharedStream::default(),
            id_prefix,
            terminal_seq: AtomicU64::new(u64::MAX),
        }
    }

    /// The stream's ring now (its first ring until the stream grows).
    pub(crate) fn ring(&self) -> Arc<Ring> {
        Arc::clone(&self.ring.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Emits `payload` as the stream's next event. On the first ring, an
    /// event that would take the stream past half of its events or bytes
    /// (or that is larger than the first ring takes) first moves the stream
    /// to its configured ring: the first ring never evicts anything.
    ///
    /// # Errors
    /// As [`Ring::emit`]: a payload too large for the configured ring.
    pub(crate) fn emit(&self, payload: &[u8]) -> Result<u64, EmitError> {
        let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let ring = self.ring();
        let Some(full) = writer.full else {
            return ring.emit(payload);
        };
        let words = payload.len().div_ceil(8);
        let geometry = ring.geometry();
        // Half of each, less one event and one word for the `Moved`
        // record: whatever the ring's reserve, nothing is evicted (and a
        // payload within half the bytes is within the ring's payload limit).
        let fits = writer.events + 2 <= geometry.events() / 2
            && writer.words + words < geometry.bytes() / 16;
        if fits {
            let seq = ring.emit(payload)?;
            writer.events += 1;
            writer.words += words;
            return Ok(seq);
        }
        self.grow(&mut writer, &ring, full).emit(payload)
    }

    /// The stream's ring at its configured size: the stream grows now if it
    /// has not yet (for callers outside the store, who may emit to it).
    pub(crate) fn full_ring(&self) -> Arc<Ring> {
        let mut writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let ring = self.ring();
        match writer.full {
            Some(full) => self.grow(&mut writer, &ring, full),
            None => ring,
        }
    }

    /// Moves the stream from its first ring `first` to a ring sized by
    /// `full`, under the writer's lock.
    fn grow(&self, writer: &mut Writer, first: &Ring, full: Config) -> Arc<Ring> {
        let grown = Arc::new(grow(first, full));
        *self.ring.lock().unwrap_or_else(PoisonError::into_inner) = Arc::clone(&grown);
        writer.full = None;
        // Followers of the first ring move on (see `record`); it fits, as
        // room for it was kept.
        let _ = first.emit(record::MOVED);
        grown
    }

    /// Marks the stream removed: its live followers end (see `record`).
    pub(crate) fn close(&self) {
        let _writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        // Cannot be too large.
        let _ = self.ring().emit(record::CLOSED);
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

    /// An event was stored at `now_ms` (in the ring, and in a shared
    /// store in the history first): notes what its `message`, if it has
    /// one, tells ([`learn`](Self::learn)), else only the use. Called only
    /// once the event is stored, so a response that was not never
    /// completes the stream.
    pub(crate) fn stored(&self, message: Option<&ServerJsonRpcMessage>, now_ms: u64) {
        match message {
            Some(message) => self.learn(message, now_ms),
            None => self.clocks.touch(now_ms),
        }
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

/// The configured ring `full` holding what `first` holds, at the same
/// seqs and epoch, so every id handed out names the same event in it.
fn grow(first: &Ring, full: Config) -> Ring {
    let start = first.first_retained().saturating_sub(1);
    let epoch = std::num::NonZeroU64::new(first.epoch());
    let config = match epoch {
        Some(epoch) => full.epoch(epoch),
        None => full,
    };
    let grown = Ring::new(config.start_after(start));
    for seq in first.first_retained()..=first.published() {
        // The first ring evicts nothing (see `emit`), so every read
        // succeeds; were one not to, the event is reported lost, never
        // skipped, and the seqs stay aligned.
        let copied = match first.read(seq) {
            Ok(event) => grown.emit(&event.payload),
            Err(_) => grown.emit(&record::lost(0)),
        };
        debug_assert_eq!(copied.ok(), Some(seq));
    }
    grown
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
        let entry = StreamEntry::new(
            key,
            "s".to_owned(),
            StreamKind::Request,
            Config::default(),
            0,
        );
        let ring = entry.ring();
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
        let entry = StreamEntry::new(
            key,
            "s".to_owned(),
            StreamKind::Request,
            Config::default(),
            0,
        );
        assert_eq!(entry.is_terminal_at(5), Some(false));
        entry.stored_terminal(7);
        entry.stored_terminal(9);
        assert_eq!(entry.is_terminal_at(6), Some(false));
        assert_eq!(entry.is_terminal_at(7), Some(true));
        assert_eq!(entry.is_terminal_at(9), None);
    }
}
