//! One Durable Stream: its settings (`settings`), its ring (small at first, grown to
//! the configured retention as it fills), its writer-side state (idempotent
//! producers, `Stream-Seq`, closure) and the signal live readers wait on.
//!
//! Appends are serialised by the stream's `tail` lock, which also makes a
//! producer's check and its append one step. Reads never take it: they
//! copy from the ring (a wait-free snapshot) and get an explicit gap when
//! retention dropped what they ask for.

pub(crate) use super::charge::ClientCharge;
use super::charge::{take_charge, Charge, ChargeRefusal};
use super::journal::Journal;
use super::json_mode;
use super::numbering::{Numbering, ReadRefusal};
use super::offset::{Offset, Start};
use super::rules::{
    decide, AppendRefusal, AppendRequest, Appended, Decision, Producer, WriterState,
};
use super::settings::{media_type, Settings};
use super::shown::Shown;
use crate::admission::Bounded;
use crate::client_addr::ClientKey;
use gapless::{Config, EmitError, ReplayError, Ring, SingleWriter, Writer};
use gapless_history::StreamKey;
use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

#[path = "stream_journal.rs"]
mod journaled;
#[path = "stream_producers.rs"]
mod producers;
pub(crate) use journaled::{Queued, Restored};
pub(crate) use producers::ProducerLimits;
use producers::{ProducerEntry, PRODUCER_ENTRY_BYTES};

/// The first ring's events: a stream costs what it holds, not its
/// configured retention.
const FIRST_EVENTS: usize = 4;
/// The first ring's payload bytes.
const FIRST_BYTES: usize = 256;

/// What a stream is charged besides its ring and producers: the stream
/// itself and its registry entry (its path is charged on top).
const STREAM_OVERHEAD_BYTES: u64 = 1024;

/// A catch-up read's result: the payloads and where the reader is now.
#[derive(Debug, Default)]
pub(crate) struct Chunk {
    /// One payload per message, in order.
    pub(crate) payloads: Vec<bytes::Bytes>,
    /// The seq of the last message returned (the read's cursor if none).
    pub(crate) cursor: u64,
    /// The ring's watermark when it was read.
    pub(crate) published: u64,
}

/// The ring every stream created empty reads as until its first message:
/// no writer exists for it (the one `Writer` that built it is dropped), so
/// it stays empty, at seq 0.
fn empty_ring() -> &'static Arc<Ring<SingleWriter>> {
    static EMPTY: std::sync::OnceLock<Arc<Ring<SingleWriter>>> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| {
        // A valid geometry: the defaults shrunk to the first ring's.
        let config = Config::default().events(FIRST_EVENTS).bytes(FIRST_BYTES);
        match Writer::try_new(config) {
            Ok(writer) => Arc::clone(writer.ring()),
            Err(error) => unreachable!("the first ring's geometry is valid: {error}"),
        }
    })
}

/// A reader's view of a stream's changes: mark what it read, then wait
/// for anything after.
pub(crate) struct Changes {
    stream: Arc<Stream>,
    /// The version the last read saw.
    seen: u64,
}

impl Changes {
    /// Changes of `stream`, from its current version.
    pub(crate) fn of(stream: Arc<Stream>) -> Self {
        let seen = stream.shown.version();
        Self { stream, seen }
    }

    /// Marks the current version seen: call before reading, so a change
    /// after the read wakes [`Self::wait`].
    pub(crate) fn mark_seen(&mut self) {
        self.seen = self.stream.shown.version();
    }

    /// Waits until the version passes the one seen, or `timeout`: `false`
    /// when the time ran out. The waiter registers before it checks the
    /// version, and a writer bumps the version before it notifies: a
    /// change either shows in the check or wakes the registered waiter.
    pub(crate) async fn wait(&mut self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.stream.shown.changed().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.stream.shown.version() != self.seen {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return false;
            }
        }
    }
}

/// The writer's side, under the stream's lock.
struct Tail {
    /// Emits to the current ring; `None` while the stream has never had a
    /// ring of its own: it then reads as [`empty_ring`], and its first
    /// emit grows it to one. An idle stream costs no ring.
    writer: Option<Writer>,
    /// The payload words of each message the current ring retains,
    /// oldest first (its length is the messages retained)...
    sizes: VecDeque<usize>,
    /// ... and their sum: what the ring holds, which decides its growth.
    words: usize,
    /// The ring's share of the memory budget.
    memory: Charge,
    /// The producers it knows, at most [`ProducerLimits::per_stream`],
    /// none idle past [`ProducerLimits::idle`] once an append looked.
    producers: HashMap<String, ProducerEntry>,
    /// Producer appends so far: each entry's `last_append` is taken from it.
    producer_appends: u64,
    /// The last `Stream-Seq`.
    stream_seq: Option<String>,
    /// The producer append that closed the stream, for its retries.
    closed_by: Option<(String, u64, u64)>,
    /// With a journal: the oldest seq it holds of the stream (what the
    /// ring evicted below it is removed from the journal too).
    journaled_from: u64,
}

/// One live stream.
pub(crate) struct Stream {
    /// Its path under `/v1/stream/`.
    pub(crate) path: String,
    pub(crate) settings: Settings,
    /// `application/json`: appends are validated and flattened.
    pub(crate) json: bool,
    /// The offsets of its messages.
    pub(crate) numbering: Numbering,
    /// The configured ring: what the stream grows to.
    full: Config,
    /// The current ring, for readers (the writer's, swapped on growth).
    ring: Mutex<Arc<Ring<SingleWriter>>>,
    tail: Mutex<Tail>,
    /// Mirrors the closure, for readers.
    closed: AtomicBool,
    /// What readers are shown (with a journal: what is durable), and the
    /// signal live readers wait on ([`Changes`]). Shared with the changes
    /// queued to the journal, whose committer moves it.
    pub(super) shown: Arc<Shown>,
    /// Deleted (or expired): live readers end.
    pub(crate) gone: AtomicBool,
    /// Deleted while forks of it live: answers `410`, the path is not
    /// reusable until the last fork goes.
    pub(crate) soft_deleted: AtomicBool,
    /// Live forks of this stream.
    pub(crate) forks: AtomicUsize,
    /// The last access, on the registry's clock ([`clock_ms`]). An append
    /// sets it under the stream's writer lock, so an expiry decided under
    /// that lock never removes a stream an acknowledged append had kept
    /// alive.
    last_access_ms: AtomicU64,
    /// With a journal: the last access its journal record holds (what
    /// [`Stream::access_changed`] compares with).
    journaled_access_ms: AtomicU64,
    /// The registry's clock origin (the stream's clocks count from it).
    origin: Instant,
    /// A fork's source, the very stream it counted itself on (its
    /// `forks`): a source cannot be removed while a fork lives, so this is
    /// the stream the fork's removal releases, never a later one at the
    /// same path.
    pub(crate) source: Option<Arc<Stream>>,
    /// How many producers it keeps, and for how long.
    producer_limits: ProducerLimits,
    /// With `--publish-keys`: what writes must present as
    /// `Authorization: Bearer`.
    pub(crate) publish_key: Option<crate::ids::PublishKey>,
    /// The creating client's share, charged with everything the stream
    /// holds (its ring, producers, overhead): `None` for a stream made
    /// without a client address (tests, embedders).
    pub(super) client: Option<ClientCharge>,
    /// The creating client's key, which its journal record keeps: the
    /// client of `client`, or with none the one a restart could not charge
    /// (restored past a share lowered since), so a later restart tries
    /// again.
    pub(super) creator: Option<ClientKey>,
    /// With a journal (`--data-dir`): the stream's key there. `None`: the
    /// stream is in memory only.
    pub(crate) journal_key: Option<StreamKey>,
    /// The seq before the first message its first ring held: its tail
    /// while it holds none (kept in its journal record).
    ring_start: u64,
    /// The last catch-up page built, for the next reader from the same
    /// place (`wire_page`): charged while kept, dropped with the stream.
    /// Boxed: most streams never keep one, and each stream would carry
    /// its 144 bytes.
    pub(super) kept_page: Mutex<Option<Box<super::wire_page::KeptPage>>>,
    /// The stream's own overhead and its path, charged.
    _overhead: Charge,
}

/// Everything needed to make a stream.
pub(crate) struct NewStream {
    pub(crate) path: String,
    pub(crate) settings: Settings,
    pub(crate) lineage: Vec<(u64, u64)>,
    pub(crate) own_generation: u64,
    pub(crate) full: Config,
    /// Messages it starts with, at seqs `ring_start + 1 ..`: a fork's
    /// inheritance.
    pub(crate) inherited: Vec<bytes::Bytes>,
    /// The seq before the stream's first message ever.
    pub(crate) start_after: u64,
    /// The seq before the first message its ring holds (past
    /// `start_after` when the source had dropped some).
    pub(crate) ring_start: u64,
    pub(crate) closed: bool,
    /// The registry's clock origin.
    pub(crate) origin: Instant,
    /// A fork's source.
    pub(crate) source: Option<Arc<Stream>>,
    pub(crate) producer_limits: ProducerLimits,
    pub(crate) publish_key: Option<crate::ids::PublishKey>,
    /// The creating client's share of the budget, charged with the
    /// stream's memory.
    pub(crate) client: Option<ClientCharge>,
    /// Its key in the journal (`--data-dir`); its messages are visible
    /// once the journal's committer marks them durable ([`Shown`]).
    pub(crate) journal_key: Option<StreamKey>,
}

/// Why a stream could not be made.
#[derive(Debug)]
pub(crate) enum MakeError {
    /// Its first ring is past the memory budget.
    MemoryBudget,
    /// Its first ring is past the creating client's share of the budget.
    ClientShare,
    /// An inherited message or initial body is larger than the ring holds.
    TooLarge { len: usize, max: usize },
    /// The configured ring cannot be built.
    Config(String),
}

impl Stream {
    /// A new stream holding `new.inherited`, its ring charged to `budget`.
    pub(crate) fn new(new: NewStream, budget: &Arc<Bounded>) -> Result<Self, MakeError> {
        let inherited_bytes: usize = new.inherited.iter().map(|p| p.len()).sum();
        let first = ring_for(
            new.full,
            new.inherited.len() + 1,
            inherited_bytes,
            new.inherited.iter().map(|p| p.len()).max().unwrap_or(0),
        )
        .start_after(new.ring_start);
        // A stream created empty takes a ring at its first message.
        let empty = new.inherited.is_empty() && new.ring_start == 0;
        let writer = match empty {
            true => None,
            false => Some(Writer::try_new(first).map_err(|e| MakeError::Config(e.to_string()))?),
        };
        let footprint = match empty {
            true => 0,
            false => footprint(&first)?,
        };
        let charge = |amount| {
            take_charge(budget, new.client.as_ref(), amount).map_err(|refusal| match refusal {
                ChargeRefusal::Budget => MakeError::MemoryBudget,
                ChargeRefusal::ClientShare => MakeError::ClientShare,
            })
        };
        let overhead = charge(STREAM_OVERHEAD_BYTES + new.path.len() as u64)?;
        let memory = charge(footprint)?;
        let mut tail = Tail {
            writer,
            sizes: VecDeque::new(),
            words: 0,
            memory,
            producers: HashMap::new(),
            producer_appends: 0,
            stream_seq: None,
            closed_by: None,
            journaled_from: new.ring_start + 1,
        };
        for payload in &new.inherited {
            let Some(writer) = tail.writer.as_mut() else {
                unreachable!("a stream that inherits messages has its ring");
            };
            let max = writer.ring().max_payload();
            writer.emit(payload).map_err(|_| MakeError::TooLarge {
                len: payload.len(),
                max,
            })?;
            tail.held(payload.len().div_ceil(8));
        }
        let ring = Arc::clone(tail.ring());
        let json = media_type(&new.settings.content_type) == "application/json";
        Ok(Self {
            path: new.path,
            settings: new.settings,
            json,
            numbering: Numbering::new(new.lineage, new.own_generation, new.start_after),
            full: new.full,
            ring: Mutex::new(ring),
            tail: Mutex::new(tail),
            closed: AtomicBool::new(new.closed),
            shown: Arc::new(Shown::new(new.journal_key.is_some(), new.ring_start)),
            gone: AtomicBool::new(false),
            soft_deleted: AtomicBool::new(false),
            forks: AtomicUsize::new(0),
            last_access_ms: AtomicU64::new(clock_ms(new.origin)),
            journaled_access_ms: AtomicU64::new(0),
            origin: new.origin,
            source: new.source,
            producer_limits: new.producer_limits,
            publish_key: new.publish_key,
            creator: new.client.as_ref().map(|charge| charge.client),
            client: new.client,
            journal_key: new.journal_key,
            ring_start: new.ring_start,
            kept_page: Mutex::new(None),
            _overhead: overhead,
        })
    }

    /// The current ring.
    pub(crate) fn ring(&self) -> Arc<Ring<SingleWriter>> {
        Arc::clone(&self.ring.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn tail(&self) -> MutexGuard<'_, Tail> {
        self.tail.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the stream is closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The offset after message `seq` (`seq` 0: before the first).
    pub(crate) fn offset_of(&self, seq: u64) -> Offset {
        self.numbering.offset_of(seq)
    }

    /// The tail: the offset after the last message.
    pub(crate) fn tail_offset(&self) -> Offset {
        self.offset_of(self.visible(&self.ring()))
    }

    /// The last seq readers are served from `ring`: its published one,
    /// or with a journal the last durable one if that is lower.
    pub(crate) fn visible(&self, ring: &Ring<SingleWriter>) -> u64 {
        ring.published().min(self.shown.durable_seq())
    }

    /// The seq a read from `start` continues after.
    ///
    /// # Errors
    /// As [`Numbering::cursor_of`], on what the ring retains now.
    pub(crate) fn cursor_of(&self, start: Start) -> Result<u64, ReadRefusal> {
        let ring = self.ring();
        self.numbering
            .cursor_of(start, ring.first_retained(), self.visible(&ring))
    }

    /// The messages after `cursor`, at most `max_bytes` of payload (at
    /// least one message when there is one).
    ///
    /// # Errors
    /// [`ReadRefusal::Gap`] when retention overtook the reader.
    pub(crate) fn read_after(&self, cursor: u64, max_bytes: usize) -> Result<Chunk, ReadRefusal> {
        /// Messages copied per ring read: a copy of small messages stays
        /// under glibc's mmap threshold (128 KiB), so its buffer is reused
        /// heap rather than pages mapped, faulted in and unmapped per read.
        const BATCH: u64 = 32;
        let ring = self.ring();
        let published = self.visible(&ring);
        let mut chunk = Chunk {
            cursor,
            ..Chunk::default()
        };
        let mut bytes = 0;
        while chunk.cursor < published && (bytes < max_bytes || chunk.payloads.is_empty()) {
            let last = published.min(chunk.cursor + BATCH);
            let events = match ring.replay_range(chunk.cursor, last) {
                Ok(events) => events,
                // Retention overtook the page after it began: what was
                // gathered is served, and the next read, from the offset
                // the client then holds, gets the `410`.
                Err(ReplayError::Gap(_)) if !chunk.payloads.is_empty() => break,
                Err(ReplayError::Gap(gap)) => {
                    return Err(self.numbering.gap(
                        self.offset_of(chunk.cursor),
                        gap.first_retained,
                        Some(chunk.cursor),
                    ))
                }
                Err(ReplayError::Ahead { .. }) => break,
            };
            for event in events {
                if bytes >= max_bytes && !chunk.payloads.is_empty() {
                    break;
                }
                bytes += event.payload.len();
                chunk.cursor = event.seq;
                chunk.payloads.push(event.payload);
            }
        }
        chunk.published = published;
        Ok(chunk)
    }

    /// Wakes live readers (an append, a closure, a deletion): see
    /// [`Shown::wake`].
    pub(crate) fn wake(&self) {
        self.shown.wake();
    }

    /// `amount` of the budget and of the creating client's share.
    fn charge(&self, budget: &Arc<Bounded>, amount: u64) -> Result<Charge, AppendRefusal> {
        take_charge(budget, self.client.as_ref(), amount).map_err(|refusal| match refusal {
            ChargeRefusal::Budget => AppendRefusal::MemoryBudget,
            ChargeRefusal::ClientShare => AppendRefusal::ClientShare,
        })
    }

    /// Restarts the stream's TTL and idle clocks.
    pub(crate) fn touch(&self) {
        self.last_access_ms
            .store(clock_ms(self.origin), Ordering::Relaxed);
    }

    /// Milliseconds since the last access, however long ago (a restored
    /// stream's may be before the start-up): its `Stream-TTL` clock.
    pub(crate) fn since_access_ms(&self) -> u64 {
        clock_ms(self.origin).saturating_sub(self.last_access_ms.load(Ordering::Relaxed))
    }

    /// Milliseconds since the last access or the start-up, whichever came
    /// later: the `--idle-timeout` clock. The server's downtime is not a
    /// client's idleness (a long deploy frees no stream).
    pub(crate) fn idle_ms(&self) -> u64 {
        let access = self.last_access_ms.load(Ordering::Relaxed);
        clock_ms(self.origin).saturating_sub(access.max(CLOCK_BIAS_MS))
    }

    /// Ends the stream if `still(self)` holds, decided under its writer
    /// lock (an append either came before, and `still` sees its access,
    /// or finds the stream ended and stores nothing): soft-deleted while
    /// forks of it live, else gone. `None`: it was gone already, or `still`
    /// did not hold. The caller holds the registry's structure lock, under
    /// which `forks` changes.
    pub(crate) fn end_if(&self, still: impl FnOnce(&Self) -> bool) -> Option<Ended> {
        let tail = self.tail();
        if self.gone.load(Ordering::Acquire) || !still(self) {
            return None;
        }
        let ended = if self.forks.load(Ordering::Acquire) > 0 {
            self.soft_deleted.store(true, Ordering::Release);
            Ended::SoftDeleted
        } else {
            self.gone.store(true, Ordering::Release);
            Ended::Removed
        };
        drop(tail);
        self.wake();
        Some(ended)
    }

    /// Appends `body` (which may be empty only for a close). With a
    /// `journal`, the change is queued to it (after a check for room on
    /// the disk, before anything changes) and the answer is acknowledged
    /// once [`Queued::durable`] returns; an answer that changes nothing
    /// (a producer's retry) waits for everything queued before it.
    pub(crate) fn append(
        &self,
        body: &[u8],
        request: &AppendRequest<'_>,
        budget: &Arc<Bounded>,
        journal: Option<&Journal>,
    ) -> Result<(Appended, Option<Queued>), AppendRefusal> {
        // Validated and flattened before the writer lock: parsing a large
        // JSON body holds no other writer of the stream up. Its refusal
        // is answered after the rules, as the rules come first.
        // A JSON body's minified copy is counted in the memory budget while
        // it is held (another body's copy is the payload itself).
        let _transient = match self.json && !body.is_empty() {
            true => Some(self.charge(budget, body.len() as u64)?),
            false => None,
        };
        let parsed = match (self.json, body.is_empty()) {
            (_, true) => Ok(None),
            (true, false) => json_mode::payload(body, false)
                .map(|payload| payload.map(Cow::Owned))
                .map_err(AppendRefusal::Json),
            (false, false) => Ok(Some(Cow::Borrowed(body))),
        };
        let now = clock_ms(self.origin);
        let mut tail = self.tail();
        if self.gone.load(Ordering::Acquire) || self.soft_deleted.load(Ordering::Acquire) {
            return Err(AppendRefusal::Gone);
        }
        let journal = journal.zip(self.journal_key);
        if let Some((journal, _)) = journal {
            journal.room()?;
        }
        let tail_now = self.offset_of(tail.ring().published());
        let known = request
            .producer
            .and_then(|(id, _, _)| tail.producer(id, now, self.producer_limits.idle));
        let state = WriterState {
            closed: self.is_closed(),
            closed_by: tail
                .closed_by
                .as_ref()
                .map(|(id, epoch, seq)| (id.as_str(), *epoch, *seq)),
            stream_seq: tail.stream_seq.as_deref(),
            producer: known,
        };
        if let Decision::Answer(answer) = decide(&state, request, body.is_empty(), tail_now)? {
            let queued = match journal {
                Some((journal, _)) => Some(self.barrier_under(journal, &tail)?),
                None => None,
            };
            return Ok((answer, queued));
        }
        let payload = parsed?;
        // A producer new to the stream is charged before anything is
        // stored: a refusal stores nothing.
        let charge = match (request.producer, known) {
            (Some((id, _, _)), None) => {
                Some(self.charge(budget, id.len() as u64 + PRODUCER_ENTRY_BYTES)?)
            }
            _ => None,
        };
        if let Some(payload) = &payload {
            self.emit(&mut tail, payload, budget)?;
        }
        let mut evicted = Vec::new();
        if let Some((id, epoch, seq)) = request.producer {
            let state = Producer {
                epoch,
                last_seq: seq,
            };
            evicted = tail.record_producer(id, state, now, charge, self.producer_limits);
        }
        if let Some(seq) = request.stream_seq {
            tail.stream_seq = Some(seq.to_owned());
        }
        if request.close {
            self.closed.store(true, Ordering::Release);
            tail.closed_by = request
                .producer
                .map(|(id, epoch, seq)| (id.to_owned(), epoch, seq));
        }
        self.last_access_ms.store(now, Ordering::Relaxed);
        let published = tail.ring().published();
        let queued = match journal {
            Some((journal, key)) => Some(self.journal_append(
                journal,
                key,
                &mut tail,
                payload.as_deref(),
                request,
                evicted,
            )?),
            None => None,
        };
        let tail_offset = self.offset_of(published);
        drop(tail);
        if queued.is_none() {
            self.wake();
        }
        let appended = Appended::Done {
            tail: tail_offset,
            closed: self.is_closed(),
        };
        Ok((appended, queued))
    }

    /// [`Self::append`] without a journal (tests).
    #[cfg(test)]
    pub(crate) fn append_now(
        &self,
        body: &[u8],
        request: &AppendRequest<'_>,
        budget: &Arc<Bounded>,
    ) -> Result<Appended, AppendRefusal> {
        self.append(body, request, budget, None)
            .map(|(appended, _queued)| appended)
    }

    /// The producers the stream keeps (tests).
    #[cfg(test)]
    pub(crate) fn producers_kept(&self) -> usize {
        self.tail().producers.len()
    }

    /// How long producer `id` has been idle, if the stream keeps it (tests).
    #[cfg(test)]
    pub(crate) fn producer_idle_ms(&self, id: &str) -> Option<u64> {
        let tail = self.tail();
        let entry = tail.producers.get(id)?;
        Some(clock_ms(self.origin).saturating_sub(entry.last_append_ms))
    }

    /// Appends `payload` as it is (a create's initial body, a fork's
    /// prefix): no producer, sequence or closure checks.
    pub(crate) fn append_payload(
        &self,
        payload: &[u8],
        budget: &Arc<Bounded>,
    ) -> Result<(), AppendRefusal> {
        let mut tail = self.tail();
        self.emit(&mut tail, payload, budget)
    }

    /// Emits `payload`, growing the ring first if the current one would
    /// evict before its configured size.
    fn emit(
        &self,
        tail: &mut Tail,
        payload: &[u8],
        budget: &Arc<Bounded>,
    ) -> Result<(), AppendRefusal> {
        let full = self.full.geometry().ok();
        let full_max = full.map_or(0, |g| g.max_payload());
        if payload.len() > full_max {
            return Err(AppendRefusal::TooLarge {
                len: payload.len(),
                max: full_max,
            });
        }
        let ring = Arc::clone(tail.ring());
        let geometry = ring.geometry();
        let words = payload.len().div_ceil(8);
        // Grow when this message would evict one (a single writer's ring
        // retains its last `events` messages whose words fit in its arena,
        // exactly) and the dimension it is short of can still grow: a ring
        // at its configured events (or bytes) evicts by them, as the
        // configured ring does, instead of being rebuilt per append. The
        // new ring has room to double (`ring_for`), so a young stream's
        // ring is between a quarter full and full.
        let short = |tail: &Tail| {
            let short_of_events = tail.sizes.len() + 1 > geometry.events()
                && full.is_some_and(|full| geometry.events() < full.events());
            let short_of_bytes = (tail.words + words > geometry.arena_words()
                || payload.len() > geometry.max_payload())
                && full.is_some_and(|full| geometry.bytes() < full.bytes());
            short_of_events || short_of_bytes
        };
        // The counts may still include messages the ring evicted (they are
        // forgotten in bulk: `Tail::held`), which can only make the ring
        // look short: a ring that looks short is judged again on exact
        // counts.
        let mut grow = tail.writer.is_none() || short(tail);
        if grow && tail.writer.is_some() {
            tail.forget_evicted();
            grow = short(tail);
        }
        if grow {
            self.grow(tail, &ring, payload.len(), budget)?;
        }
        let Some(writer) = tail.writer.as_mut() else {
            unreachable!("grow gives the stream a ring of its own");
        };
        let max = writer.ring().max_payload();
        writer.emit(payload).map_err(|error| match error {
            EmitError::TooLarge { .. } => AppendRefusal::TooLarge {
                len: payload.len(),
                max,
            },
            _ => AppendRefusal::TooLarge {
                len: payload.len(),
                max,
            },
        })?;
        tail.held(words);
        Ok(())
    }

    /// Moves the stream to a ring that holds what it holds plus `incoming`
    /// bytes with room to spare (at most the configured ring), copying the
    /// retained messages at their seqs.
    fn grow(
        &self,
        tail: &mut Tail,
        old: &Ring<SingleWriter>,
        incoming: usize,
        budget: &Arc<Bounded>,
    ) -> Result<(), AppendRefusal> {
        let held_bytes = tail.words * 8;
        let config = ring_for(
            self.full,
            tail.sizes.len() + 1,
            held_bytes + incoming,
            incoming,
        )
        .start_after(old.first_retained().saturating_sub(1));
        if tail.writer.is_some() && config.geometry().is_ok_and(|g| g == old.geometry()) {
            // Nothing larger to move to.
            return Ok(());
        }
        let footprint = footprint(&config).map_err(|_| AppendRefusal::MemoryBudget)?;
        let memory = self.charge(budget, footprint)?;
        let mut writer = Writer::try_new(config).map_err(|_| AppendRefusal::MemoryBudget)?;
        let first = old.first_retained();
        let retained = (old.published() + 1).saturating_sub(first) as usize;
        let (mut sizes, mut words) = (VecDeque::with_capacity(retained + 1), 0);
        let mut seq = first;
        // Copied in batches borrowed from one buffer each (no reference
        // count per message): a stream grows several times while young.
        while seq <= old.published() {
            let batch = old
                .replay_batch(seq - 1, old.published().min(seq + 255))
                .map_err(|_| AppendRefusal::Gone)?;
            if batch.is_empty() {
                break;
            }
            for (at, payload) in batch.iter() {
                writer
                    .emit(payload)
                    .map_err(|_| AppendRefusal::MemoryBudget)?;
                sizes.push_back(payload.len().div_ceil(8));
                words += payload.len().div_ceil(8);
                seq = at + 1;
            }
        }
        *self.ring.lock().unwrap_or_else(PoisonError::into_inner) = Arc::clone(writer.ring());
        tail.writer = Some(writer);
        tail.sizes = sizes;
        tail.words = words;
        tail.memory = memory;
        Ok(())
    }
}

/// How [`Stream::end_if`] ended a stream.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Gone: its path is free, its source (if a fork) is released.
    Removed,
    /// Deleted while forks of it live: `410` until the last one goes.
    SoftDeleted,
}

/// What a stream's clocks (last access, producers' last appends) read in
/// at `origin`: ahead of 0 by this much, so that a time before the
/// start-up (restored from the journal) is a reading too.
const CLOCK_BIAS_MS: u64 = 1 << 42;

/// The registry's clock now: milliseconds since `origin`, plus
/// [`CLOCK_BIAS_MS`].
fn clock_ms(origin: Instant) -> u64 {
    CLOCK_BIAS_MS.saturating_add(u64::try_from(origin.elapsed().as_millis()).unwrap_or(u64::MAX))
}

impl Tail {
    /// The ring the writer emits to ([`empty_ring`] before the first).
    fn ring(&self) -> &Arc<Ring<SingleWriter>> {
        match &self.writer {
            Some(writer) => writer.ring(),
            None => empty_ring(),
        }
    }

    /// Counts a message of `words` just emitted. The counts of messages
    /// the ring evicted are forgotten in bulk ([`Tail::forget_evicted`]),
    /// once they pass the ring's events by an eighth, or when a decision
    /// needs them exact: finding the oldest retained message reads slots
    /// of a ring cold in cache when many streams take turns, which cost
    /// more than the rest of an emit.
    fn held(&mut self, words: usize) {
        self.sizes.push_back(words);
        self.words += words;
        let events = self.ring().geometry().events();
        if self.sizes.len() > events + events / 8 {
            self.forget_evicted();
        }
    }

    /// Forgets the counts of the messages the ring no longer retains: the
    /// counts are then what the ring holds, not what went through it.
    fn forget_evicted(&mut self) {
        let ring = self.ring();
        let published = ring.published();
        // The oldest seq whose size is kept was retained when its size was
        // counted; the search gallops up from it.
        let oldest_kept = (published + 1).saturating_sub(self.sizes.len() as u64);
        let first_retained = ring.first_retained_from(oldest_kept);
        // Exact, not a bound: only this writer evicts, and it holds the tail.
        debug_assert_eq!(first_retained, ring.first_retained());
        let retained = (published + 1).saturating_sub(first_retained);
        while self.sizes.len() as u64 > retained {
            match self.sizes.pop_front() {
                Some(dropped) => self.words -= dropped,
                None => break,
            }
        }
    }
}

/// A ring for `events` messages of `bytes` payload bytes in all, the
/// largest `largest`, with room to double: powers of two from the first
/// ring's size, at most `full`.
fn ring_for(full: Config, events: usize, bytes: usize, largest: usize) -> Config {
    let (full_events, full_bytes) = (full.requested_events(), full.requested_bytes());
    let mut e = FIRST_EVENTS.min(full_events);
    while e < full_events && e / 2 < events + 2 {
        e = (e * 2).min(full_events);
    }
    let mut b = FIRST_BYTES.min(full_bytes);
    while b < full_bytes && (b / 2 < bytes + 8 || b / 2 < largest) {
        b = (b * 2).min(full_bytes);
    }
    full.events(e).bytes(b)
}

fn footprint(config: &Config) -> Result<u64, MakeError> {
    config
        .geometry()
        .map(|g| g.footprint() as u64)
        .map_err(|e| MakeError::Config(e.to_string()))
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
