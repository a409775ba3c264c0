//! [`StreamEntry`]: one rmcp stream as the store holds it (its key, its
//! kind, its window and ring, what the store learned from its messages),
//! and [`is_terminal`]: which message ends a request's stream.
//!
//! # The window
//!
//! A stream keeps its newest events as rmcp hands them over (the message's
//! `Arc`, or a priming marker), at most its window's bound, and writes an
//! event to its ring (as JSON, see [`record`]) only when it leaves the
//! window, oldest first. The entry assigns the seqs itself, dense from 1:
//! the window holds `first ..= first + held - 1`, the ring everything
//! before `first`, and an event leaving the window must get seq `first` in
//! the ring (checked: [`StoreError::OutOfStep`] otherwise, never a silent
//! renumbering). A short request stream (its priming event, its progress,
//! its result) is never serialized and never allocates a ring: the ring is
//! created, under the stream's epoch fixed at creation, when the first
//! event leaves the window. A replay reads the ring below `first`, then the
//! window, and waits for the next event by leaving its waker in the window
//! under the lock that `push` holds while it appends (no lost wake-up).
//!
//! A window of bound 0 is the direct mode: every event goes to the ring as
//! it is stored, and replays follow the ring (a shared store's request
//! streams, whose bytes go to Redis anyway, and a stream whose ring was
//! handed out by [`GaplessEventStore::ring`](crate::GaplessEventStore::ring)).

use crate::id::StreamKey;
use crate::lifecycle::Clocks;
use crate::record::{self, Record};
use crate::store_error::StoreError;
use gapless::{Config, Coverage, EmitError, Ring};
use rmcp::model::{RequestId, ServerJsonRpcMessage, ServerNotification};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::Waker;
use std::time::Duration;

/// Events a stream keeps as rmcp's messages before writing them to its
/// ring, unless the store says otherwise
/// ([`with_window`](crate::GaplessEventStore::with_window)): rmcp's own
/// per-stream cache (`CachedTx`, `channel_capacity`) holds the same 16
/// `Arc`s, so a window shares them rather than copying.
pub const DEFAULT_WINDOW: usize = 16;

/// An event held in a stream's window: what rmcp handed to the store, not
/// yet written to the ring.
#[derive(Clone, Debug)]
pub(crate) enum Held {
    /// A message, as rmcp sends it.
    Message(Arc<ServerJsonRpcMessage>),
    /// An event without a message (a priming event), with its retry hint.
    Marker(Option<Duration>),
}

/// The newest events of a stream, before its ring.
#[derive(Debug)]
struct Window {
    /// Events held at most; 0 for the direct mode (every event goes to the
    /// ring as it is stored).
    bound: usize,
    /// The seq of `held[0]`: every seq before it is in the ring (or was
    /// evicted from it); the next seq assigned is `first + held.len()`.
    first: u64,
    /// The events `first ..`, oldest first.
    held: VecDeque<Held>,
    /// Replays waiting for the next event (woken by `push` and `close`).
    wakers: Vec<Waker>,
    /// The stream was removed: a replay ends once it has read everything.
    closed: bool,
}

/// What a replay after some seq reads next ([`StreamEntry::next_after`]).
pub(crate) enum Next {
    /// The next event is in the ring (below the window): read it from there.
    Ring(Arc<Ring>),
    /// The next events, from the window: `(seq, event)`, seqs dense.
    Held(Vec<(u64, Held)>),
    /// The stream is in the direct mode: follow its ring.
    Direct(Arc<Ring>),
    /// Nothing yet: the waker is registered and is woken by the next event.
    Wait,
    /// The stream was removed and the replay has read everything.
    Closed,
    /// The next event is below the window but the stream has no ring (it
    /// never left the window: a failed write): reported, never skipped.
    Missing,
}

/// A stream's ring, its window, and the writer of its first ring: one lock,
/// so that seqs, the window and the ring move together.
#[derive(Debug)]
struct Inner {
    /// The ring, once anything was written to it.
    ring: Option<Arc<Ring>>,
    /// The first ring's configuration (with the stream's epoch).
    first: Config,
    writer: Writer,
    window: Window,
}

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
    /// Its window and its ring (the first ring, then the configured one
    /// once the stream has grown, see `Inner::emit`).
    inner: Mutex<Inner>,
    /// The epoch of its ring (fixed at creation, the ring created later).
    epoch: u64,
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

impl Inner {
    /// The ring, created now (as the first ring) if nothing was written yet.
    fn ring(&mut self) -> &Arc<Ring> {
        let first = self.first;
        self.ring.get_or_insert_with(|| Arc::new(Ring::new(first)))
    }

    /// Emits `payload` as the ring's next event. On the first ring, an
    /// event that would take the stream past half of its events or bytes
    /// (or that is larger than the first ring takes) first moves the stream
    /// to its configured ring: the first ring never evicts anything.
    ///
    /// # Errors
    /// As [`Ring::emit`]: a payload too large for the configured ring.
    fn emit(&mut self, payload: &[u8]) -> Result<u64, EmitError> {
        let ring = Arc::clone(self.ring());
        let Some(full) = self.writer.full else {
            return ring.emit(payload);
        };
        let words = payload.len().div_ceil(8);
        let geometry = ring.geometry();
        // Half of each, less one event and one word for the `Moved`
        // record: whatever the ring's reserve, nothing is evicted (and a
        // payload within half the bytes is within the ring's payload limit).
        let fits = self.writer.events + 2 <= geometry.events() / 2
            && self.writer.words + words < geometry.bytes() / 16;
        if fits {
            let seq = ring.emit(payload)?;
            self.writer.events += 1;
            self.writer.words += words;
            return Ok(seq);
        }
        self.grow(&ring, full).emit(payload)
    }

    /// [`emit`](Self::emit), but a payload too large for the ring is stored
    /// as a placeholder (a replay reports it lost); any other refusal is an
    /// error, never a panic. Returns the seq and whether `payload` itself
    /// was stored.
    fn emit_or_placeholder(&mut self, payload: &[u8]) -> Result<(u64, bool), StoreError> {
        let emitted = self.emit(payload);
        placeholder_if_too_large(self, emitted)
    }

    /// Moves the stream from its first ring `first` to a ring sized by
    /// `full`.
    fn grow(&mut self, first: &Ring, full: Config) -> Arc<Ring> {
        let grown = Arc::new(grow(first, full));
        self.ring = Some(Arc::clone(&grown));
        self.writer.full = None;
        // Followers of the first ring move on (see `record`); it fits, as
        // room for it was kept.
        let _ = first.emit(record::MOVED);
        grown
    }

    /// The ring at its configured size (growing it now if it has not yet).
    fn full_ring(&mut self) -> Arc<Ring> {
        let ring = Arc::clone(self.ring());
        match self.writer.full {
            Some(full) => self.grow(&ring, full),
            None => ring,
        }
    }

    /// The wakers of waiting replays, taken (to be woken once the lock is
    /// released).
    fn take_wakers(&mut self) -> Vec<Waker> {
        std::mem::take(&mut self.window.wakers)
    }
}

/// The seq of an event whose emit to `inner`'s ring gave `emitted`, and
/// whether it is that event (`false`: a placeholder, the payload was too
/// large for the ring and a replay reports it lost); any other refusal is
/// an error, never a panic.
fn placeholder_if_too_large(
    inner: &mut Inner,
    emitted: Result<u64, EmitError>,
) -> Result<(u64, bool), StoreError> {
    match emitted {
        Ok(seq) => Ok((seq, true)),
        // A placeholder is shorter than the smallest ring's payload limit
        // (`gapless::config::MIN_BYTES`): it fits.
        Err(EmitError::TooLarge { len, .. }) => inner
            .emit(&record::lost(len))
            .map(|seq| (seq, false))
            .map_err(StoreError::Ring),
        // `EmitError` is non-exhaustive: whatever else it may say is an
        // event not stored.
        Err(error) => Err(StoreError::Ring(error)),
    }
}

/// Wakes `wakers` (taken under the stream's lock, woken after it).
fn wake(wakers: Vec<Waker>) {
    for waker in wakers {
        waker.wake();
    }
}

impl StreamEntry {
    /// rmcp stream `stream_id` of `kind`, created at `now_ms`, that has
    /// stored nothing yet, with a ring sized by `config` (starting smaller
    /// if `config` is larger than the first ring, and created only when an
    /// event leaves a window of `window` events; 0: the direct mode).
    pub(crate) fn new(
        key: StreamKey,
        stream_id: String,
        kind: StreamKind,
        config: Config,
        now_ms: u64,
        window: usize,
    ) -> Self {
        // Fixed now, though the ring may come later: every id handed out
        // names it. A `config` that fixes one keeps it.
        let epoch = config.fixed_epoch().unwrap_or_else(gapless::epoch::random);
        let config = config.epoch(epoch);
        let first = config
            .events(config.requested_events().min(FIRST_EVENTS))
            .bytes(config.requested_bytes().min(FIRST_BYTES));
        let full = (first != config).then_some(config);
        let recent_bytes = config.requested_bytes() / 8;
        let id_prefix = format!("{key}.{:016x}-", epoch.get());
        Self {
            key,
            stream_id,
            kind,
            inner: Mutex::new(Inner {
                ring: None,
                first,
                writer: Writer {
                    full,
                    events: 0,
                    words: 0,
                },
                window: Window {
                    bound: window,
                    first: 1,
                    // One allocation for a short stream's window.
                    held: VecDeque::with_capacity(window.min(DEFAULT_WINDOW)),
                    wakers: Vec::new(),
                    closed: false,
                },
            }),
            epoch: epoch.get(),
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

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The epoch of the stream's ring (whether or not it exists yet).
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The stream's ring now (its first ring until the stream grows),
    /// created if it does not exist yet. In the window mode it holds only
    /// the events before the window.
    pub(crate) fn ring(&self) -> Arc<Ring> {
        Arc::clone(self.lock().ring())
    }

    /// Emits `payload` as the stream's next event, to its ring: only in the
    /// direct mode (the shared store's request streams), where the ring
    /// assigns the seqs.
    ///
    /// # Errors
    /// As [`Ring::emit`]: a payload too large for the configured ring.
    pub(crate) fn emit(&self, payload: &[u8]) -> Result<u64, EmitError> {
        let mut inner = self.lock();
        debug_assert_eq!(inner.window.bound, 0, "the ring assigns the seqs");
        let seq = inner.emit(payload);
        let wakers = inner.take_wakers();
        drop(inner);
        wake(wakers);
        seq
    }

    /// Stores `event` as the stream's next event and returns its seq: into
    /// the window (writing its oldest event to the ring first if the window
    /// is full), or in the direct mode into the ring. A message too large
    /// for the ring is stored (or, leaving the window, written) as a
    /// placeholder that a replay reports lost.
    ///
    /// # Errors
    /// [`StoreError::Ring`] if the ring refuses an event for another reason
    /// than its size; [`StoreError::OutOfStep`] if the ring gave an event
    /// leaving the window another seq than the one handed out (the stream
    /// cannot go on: the store frees it). `event` is not stored.
    pub(crate) fn push(&self, event: Held) -> Result<u64, StoreError> {
        let mut inner = self.lock();
        let seq = if inner.window.bound == 0 {
            self.write(&mut inner, &event)?
        } else {
            while inner.window.held.len() >= inner.window.bound {
                self.flush_oldest(&mut inner)?;
            }
            let seq = inner.window.first + inner.window.held.len() as u64;
            inner.window.held.push_back(event.clone());
            seq
        };
        if let Held::Message(message) = &event {
            if is_terminal(message) {
                self.stored_terminal(seq);
            }
        }
        let wakers = inner.take_wakers();
        drop(inner);
        wake(wakers);
        Ok(seq)
    }

    /// Writes `event` to the ring, as JSON (or a marker, or the placeholder
    /// of a message too large), keeping a message parsed for replays;
    /// returns the seq the ring gave it.
    fn write(&self, inner: &mut Inner, event: &Held) -> Result<u64, StoreError> {
        match event {
            // The JSON in a reused buffer (the ring copies it).
            Held::Message(message) => record::with_json(message, |json| match json {
                Ok(json) => {
                    let (seq, stored) = inner.emit_or_placeholder(json)?;
                    if stored {
                        self.remember(seq, json.len(), message);
                    }
                    Ok(seq)
                }
                Err(_) => inner
                    .emit_or_placeholder(&record::lost(0))
                    .map(|(seq, _)| seq),
            }),
            Held::Marker(retry) => inner
                .emit_or_placeholder(&record::marker(*retry))
                .map(|(seq, _)| seq),
        }
    }

    /// Writes the window's oldest event to the ring, which must give it the
    /// seq handed out for it, and drops it from the window.
    fn flush_oldest(&self, inner: &mut Inner) -> Result<(), StoreError> {
        let Some(oldest) = inner.window.held.front().cloned() else {
            return Ok(());
        };
        let expected = inner.window.first;
        let got = self.write(inner, &oldest)?;
        if got != expected {
            return Err(StoreError::OutOfStep { expected, got });
        }
        inner.window.held.pop_front();
        inner.window.first += 1;
        Ok(())
    }

    /// The stream's ring at its configured size, for callers outside the
    /// store (who may emit to it): the window is written to it first and
    /// the stream goes on in the direct mode, so that the ring holds every
    /// event and assigns the seqs. `None` if the window could not be
    /// written (see [`push`](Self::push)'s errors).
    pub(crate) fn full_ring(&self) -> Option<Arc<Ring>> {
        let mut inner = self.lock();
        while !inner.window.held.is_empty() {
            self.flush_oldest(&mut inner).ok()?;
        }
        inner.window.bound = 0;
        let ring = inner.full_ring();
        // Replays waiting in the window follow the ring from now on.
        let wakers = inner.take_wakers();
        drop(inner);
        wake(wakers);
        Some(ring)
    }

    /// Marks the stream removed: its live replays end after what they have
    /// not read yet (see `record` for the direct mode's `C` record).
    pub(crate) fn close(&self) {
        let mut inner = self.lock();
        inner.window.closed = true;
        if inner.window.bound == 0 {
            if let Some(ring) = &inner.ring {
                // Cannot be too large.
                let _ = ring.emit(record::CLOSED);
            }
        }
        let wakers = inner.take_wakers();
        drop(inner);
        wake(wakers);
    }

    /// Whether a replay after `cursor` would be exact now: as
    /// [`Ring::coverage`], over the ring and the window (`last` is the
    /// last seq handed out).
    pub(crate) fn coverage(&self, cursor: u64) -> Coverage {
        let mut inner = self.lock();
        if inner.window.bound == 0 {
            return inner.ring().coverage(cursor);
        }
        let first = inner.window.first;
        let last = first - 1 + inner.window.held.len() as u64;
        if cursor > last {
            return Coverage::Ahead {
                cursor,
                published: last,
            };
        }
        if cursor + 1 >= first {
            return Coverage::Covered {
                first: cursor + 1,
                last,
            };
        }
        match &inner.ring {
            Some(ring) => match ring.coverage(cursor) {
                Coverage::Covered { first, .. } => Coverage::Covered { first, last },
                other => other,
            },
            // Unreachable (events left the window, so the ring exists): the
            // window's events are all there is.
            None => Coverage::of_retained(cursor, first, last),
        }
    }

    /// Whether the event at `seq` (handed out) is the stream's response or
    /// error, from what the store knows, else the window, else the ring.
    pub(crate) fn is_terminal_event(&self, seq: u64) -> bool {
        if let Some(known) = self.is_terminal_at(seq) {
            return known;
        }
        let inner = self.lock();
        if let Some(held) = seq
            .checked_sub(inner.window.first)
            .and_then(|index| usize::try_from(index).ok())
            .and_then(|index| inner.window.held.get(index))
        {
            return matches!(held, Held::Message(message) if is_terminal(message));
        }
        let Some(ring) = inner.ring.clone() else {
            return false;
        };
        drop(inner);
        ring.read(seq).is_ok_and(|event| {
            matches!(record::decode(&event.payload), Record::Message(json)
                if serde_json::from_slice::<ServerJsonRpcMessage>(json)
                    .is_ok_and(|message| is_terminal(&message)))
        })
    }

    /// Takes the waker of a replay that goes away out of the window.
    pub(crate) fn forget_waker(&self, waker: &Waker) {
        let mut inner = self.lock();
        inner.window.wakers.retain(|known| !known.will_wake(waker));
    }

    /// How many wakers wait in the window.
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        self.lock().window.wakers.len()
    }

    /// What a replay that has read up to `after` reads next: the ring, up
    /// to `max` events of the window, or nothing yet (then `waker` is woken
    /// by the next event stored, the stream's removal or its move to the
    /// direct mode: registered under the lock `push` appends under).
    pub(crate) fn next_after(&self, after: u64, max: usize, waker: &Waker) -> Next {
        let mut inner = self.lock();
        if inner.window.bound == 0 {
            return Next::Direct(Arc::clone(inner.ring()));
        }
        let next = after + 1;
        let first = inner.window.first;
        if next < first {
            return match &inner.ring {
                Some(ring) => Next::Ring(Arc::clone(ring)),
                None => Next::Missing,
            };
        }
        let index = usize::try_from(next - first).unwrap_or(usize::MAX);
        if index < inner.window.held.len() {
            let held = inner.window.held.iter().skip(index).take(max);
            return Next::Held((next..).zip(held.cloned()).collect());
        }
        if inner.window.closed {
            return Next::Closed;
        }
        let wakers = &mut inner.window.wakers;
        if !wakers.iter().any(|known| known.will_wake(waker)) {
            wakers.push(waker.clone());
        }
        Next::Wait
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
            DEFAULT_WINDOW,
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

    /// A payload too large is stored as a placeholder; any other emit
    /// error is `StoreError::Ring`. Mutation: the former `unreachable!`
    /// for every error but `TooLarge` panics here.
    #[test]
    fn an_emit_error_other_than_too_large_is_an_error_not_a_panic() {
        let key = StreamKey::random().expect("the OS random source");
        let kind = StreamKind::Request;
        let entry = StreamEntry::new(key, "s".to_owned(), kind, Config::default(), 0, 0);
        let mut inner = entry.lock();
        let too_large = EmitError::TooLarge {
            len: 1 << 30,
            max: 1 << 20,
        };
        let placeholder = placeholder_if_too_large(&mut inner, Err(too_large));
        assert_eq!(placeholder.ok(), Some((1, false)));
        let stored = inner.ring().read(1).expect("the placeholder");
        assert_eq!(
            record::decode(&stored.payload),
            Record::Lost { bytes: 1 << 30 }
        );
        let batch = EmitError::BatchTooLarge {
            events: 2,
            bytes: 16,
            max_events: 1,
            max_bytes: 8,
        };
        assert!(matches!(
            placeholder_if_too_large(&mut inner, Err(batch)),
            Err(StoreError::Ring(error)) if error == batch
        ));
        assert_eq!(inner.ring().published(), 1, "nothing more was stored");
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
            DEFAULT_WINDOW,
        );
        assert_eq!(entry.is_terminal_at(5), Some(false));
        entry.stored_terminal(7);
        entry.stored_terminal(9);
        assert_eq!(entry.is_terminal_at(6), Some(false));
        assert_eq!(entry.is_terminal_at(7), Some(true));
        assert_eq!(entry.is_terminal_at(9), None);
    }
}
