//! [`GaplessEventStore`]: rmcp's `EventStore` on gapless rings.

use crate::id::{StoreEventId, StreamKey};
use crate::lifecycle::{Clock, Due, StreamLimits};
use crate::replay::ReplayStream;
use crate::signal::{Reason, Signal};
use crate::store_error::StoreError;
use crate::stream::{Held, StreamEntry, StreamKind, DEFAULT_WINDOW};
use gapless::id::RandomSourceError;
use gapless::{Config, ConfigError, Coverage, Ring, Store};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// rmcp's `EventStore` on gapless: one ring per rmcp stream, replays that
/// are exact or say why not.
///
/// See the [crate docs](crate) for the event ids, the signal and how rings
/// are freed.
pub struct GaplessEventStore {
    /// The ring of each request stream (a bare uuid in rmcp).
    config: Config,
    /// The ring of each session's standalone stream (`"{session}:common"`,
    /// the GET stream that outlives requests).
    standalone: Config,
    /// When streams are freed on their own (see [`crate::lifecycle`]).
    limits: StreamLimits,
    /// Events each stream keeps as rmcp's messages before writing them to
    /// its ring ([`with_window`](Self::with_window)).
    window: usize,
    /// The origin of every stream's clocks, and the last sweep.
    clock: Clock,
    /// rmcp stream id → the stream's key.
    streams: Store<String, StreamKey>,
    /// Stream key → its ring and what the store learned.
    rings: Store<StreamKey, StreamEntry>,
    /// The entries of `rings`, counted as they are inserted and removed:
    /// the quick check of [`make_room`](Self::make_room), which reads
    /// every shard (`rings.len()`) only once this reaches the cap.
    count: AtomicUsize,
    /// With [`with_history`](Self::with_history): the Redis that request
    /// streams are stored in and replayed from on every instance.
    pub(crate) shared: Option<Arc<crate::shared::SharedHistory>>,
    /// How often a replay from the shared history reads it while waiting,
    /// announced or not ([`with_follow_poll`](Self::with_follow_poll)).
    pub(crate) follow_poll: Duration,
}

impl std::fmt::Debug for GaplessEventStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GaplessEventStore")
            .field("config", &self.config)
            .field("streams", &self.rings.len())
            .finish()
    }
}

impl GaplessEventStore {
    /// A store whose every stream gets a ring sized by `config` (and, unless
    /// `config` fixes one, a fresh random epoch).
    ///
    /// # Errors
    /// [`ConfigError`] if `config` is outside gapless's ranges.
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        config.geometry()?;
        Ok(Self {
            config,
            standalone: config,
            limits: StreamLimits::default(),
            window: DEFAULT_WINDOW,
            clock: Clock::new(),
            streams: Store::default(),
            rings: Store::default(),
            count: AtomicUsize::new(0),
            shared: None,
            follow_poll: crate::shared::DEFAULT_FOLLOW_POLL,
        })
    }

    /// This store with `limits` on how long and how many streams keep
    /// their rings (defaults: [`StreamLimits::default`]).
    #[must_use]
    pub fn with_limits(mut self, limits: StreamLimits) -> Self {
        self.limits = limits;
        self
    }

    /// This store reading the time from `source` instead of
    /// [`Instant::now`] (for tests and simulations: the limits are applied
    /// as `source` says time passes).
    #[must_use]
    pub fn with_time_source(mut self, source: crate::lifecycle::TimeSource) -> Self {
        self.clock = Clock::with_source(source);
        self
    }

    /// This store with each stream keeping its newest `events` events as
    /// the messages rmcp handed over (`Arc`s it shares with rmcp's own
    /// cache), and writing an event to the stream's ring, as JSON, only
    /// when it leaves that window (default [`DEFAULT_WINDOW`]): a stream
    /// of at most `events` events is never serialized and never allocates
    /// a ring. 0 writes every event to the ring as it is stored. A shared
    /// store's request streams ([`with_history`](Self::with_history)) are
    /// written as they are stored whatever the window: Redis needs their
    /// bytes at once.
    ///
    /// What a stream holds is then its ring (as configured) and at most
    /// `events` messages besides; a message in the window is replayed
    /// exactly whatever its size, and one too large for the ring is
    /// reported lost once it leaves the window.
    #[must_use]
    pub fn with_window(mut self, events: usize) -> Self {
        self.window = events;
        self
    }

    /// Events each stream keeps before writing them to its ring.
    pub fn window(&self) -> usize {
        self.window
    }

    /// The limits streams are freed by.
    pub fn limits(&self) -> StreamLimits {
        self.limits
    }

    /// Frees every stream the limits say is due at `now`: completed more
    /// than the grace ago, or idle for the idle period (as
    /// [`remove_stream`](Self::remove_stream) does). The store calls it as
    /// it is used; call it to apply the limits as of a given instant.
    /// Returns how many streams were freed.
    pub fn sweep_at(&self, now: Instant) -> usize {
        let now_ms = self.clock.ms(now);
        self.rings
            .entries()
            .into_iter()
            .filter(|(_, entry)| entry.clocks.due(now_ms, &self.limits) == Due::Free)
            .filter(|(key, entry)| self.free(key, entry))
            .count()
    }

    /// Sweeps if a sweep is due (at most one per sweep period); `now` in ms.
    pub(crate) fn maybe_sweep(&self, now: Instant) -> u64 {
        let now_ms = self.clock.ms(now);
        if self.clock.claim_sweep(now_ms, self.limits.sweep_period()) {
            self.sweep_at(now);
        }
        now_ms
    }

    /// Room for one more stream under the cap: what is due first, then the
    /// streams used least recently (completed ones first), a sixteenth of
    /// the cap at once so a flood of new streams does not scan every time.
    fn make_room(&self, now: Instant) {
        let max = self.limits.max_streams.get();
        if self.count.load(Ordering::Relaxed) < max || self.rings.len() < max {
            return;
        }
        self.sweep_at(now);
        let mut entries = self.rings.entries();
        if entries.len() < max {
            return;
        }
        let excess = entries.len() + 1 - max;
        let evict = excess.max(max / 16).min(entries.len());
        entries.sort_unstable_by_key(|(_, entry)| {
            (!entry.clocks.is_completed(), entry.clocks.touched())
        });
        for (key, entry) in entries.into_iter().take(evict) {
            self.free(&key, &entry);
        }
    }

    /// Frees the ring under `key` (if it still holds one) and forgets its
    /// rmcp stream id unless the id already names another key.
    pub(crate) fn free(&self, key: &StreamKey, entry: &StreamEntry) -> bool {
        let Some(entry_now) = self.rings.remove(key) else {
            return false;
        };
        self.count.fetch_sub(1, Ordering::Relaxed);
        if self.streams.get(&entry.stream_id).as_deref() == Some(key) {
            self.streams.remove(&entry.stream_id);
        }
        // Wakes and ends live followers (see `record`).
        entry_now.close();
        true
    }

    /// A store whose request streams get rings sized by `request` and
    /// whose standalone streams (`"{session}:common"`) get rings sized by
    /// `standalone`: a request stream holds one call's progress and result,
    /// a standalone stream whatever the server pushes between calls, so the
    /// first is usually far smaller ([`GaplessEventStore::sized_by_kind`]).
    ///
    /// # Errors
    /// [`ConfigError`] if either is outside gapless's ranges.
    pub fn with_kinds(request: Config, standalone: Config) -> Result<Self, ConfigError> {
        standalone.geometry()?;
        let mut store = Self::new(request)?;
        store.standalone = standalone;
        Ok(store)
    }

    /// [`with_kinds`](Self::with_kinds) with this crate's sizes: request
    /// streams 256 events and 256 KiB, standalone streams
    /// [`Config::default`].
    pub fn sized_by_kind() -> Self {
        let request = Config::default().events(256).bytes(256 << 10);
        match Self::with_kinds(request, Config::default()) {
            Ok(store) => store,
            // Both sizes are within gapless's ranges (checked by a test).
            Err(error) => unreachable!("the crate's ring sizes are valid: {error}"),
        }
    }

    /// The ring size each request stream gets.
    pub fn config(&self) -> Config {
        self.config
    }

    /// The ring size each standalone stream gets.
    pub fn standalone_config(&self) -> Config {
        self.standalone
    }

    /// The ring size of a stream of `kind`.
    pub(crate) fn ring_config(&self, kind: StreamKind) -> Config {
        match kind {
            StreamKind::Request => self.config,
            StreamKind::Standalone => self.standalone,
        }
    }

    /// Whether this process holds the ring of the stream `key` names.
    pub(crate) fn holds(&self, key: &StreamKey) -> bool {
        self.rings.get(key).is_some()
    }

    /// The time now, by the store's clock.
    pub(crate) fn clock_now(&self) -> Instant {
        self.clock.now()
    }

    /// How many streams hold a ring.
    pub fn stream_count(&self) -> usize {
        self.rings.len()
    }

    /// The ring of the rmcp stream `stream_id`, if it has one, at its
    /// configured size (a stream still on its smaller first ring moves to
    /// it now). The stream's window is written to it first, and the stream
    /// then writes every event to it as it is stored, so that the ring
    /// holds every event and a caller may emit to it.
    pub fn ring(&self, stream_id: &str) -> Option<Arc<Ring>> {
        let key = self.streams.get(stream_id)?;
        self.rings.get(&*key).and_then(|entry| entry.full_ring())
    }

    /// Frees the ring of the rmcp stream `stream_id` (once replays still
    /// reading it end). Replays following it live end after the events they
    /// have; a later resume with one of its ids gets the `foreign_cursor`
    /// signal. Returns whether the stream had a ring.
    pub fn remove_stream(&self, stream_id: &str) -> bool {
        let Some(key) = self.streams.remove(stream_id) else {
            return false;
        };
        let Some(entry) = self.rings.remove(&*key) else {
            return false;
        };
        self.count.fetch_sub(1, Ordering::Relaxed);
        // Wakes and ends live followers (see `record`).
        entry.close();
        true
    }

    /// Frees the rings of every stream of the rmcp session `session_id` that
    /// this store can attribute to it: its standalone stream
    /// (`"{session_id}:common"`). rmcp names request streams with a bare
    /// uuid, so a session's request streams are freed only through
    /// [`remove_stream`](Self::remove_stream) (see the crate docs). Returns
    /// how many were freed.
    pub fn remove_session(&self, session_id: &str) -> usize {
        usize::from(self.remove_stream(&StreamKind::standalone_id(session_id)))
    }

    pub(crate) fn entry(
        &self,
        stream_id: &str,
        now: Instant,
    ) -> Result<Arc<StreamEntry>, RandomSourceError> {
        if let Some(key) = self.streams.get(stream_id) {
            if let Some(entry) = self.rings.get(&*key) {
                return Ok(entry);
            }
        }
        self.make_room(now);
        let now_ms = self.clock.ms(now);
        // A new stream's key: a failing OS random source is an error, never
        // a guessable key.
        let (key, _) = self
            .streams
            .get_or_try_insert_with(stream_id.to_owned(), crate::id::random_key)?;
        let (entry, inserted) = infallible(self.rings.get_or_try_insert_with(*key, || {
            // The stream's kind, decided once: from here on its entry says.
            let kind = StreamKind::of(stream_id);
            // A shared store's request streams go to Redis, as bytes, as
            // they are stored: their ring is written at once too.
            let window = if self.shared.is_some() && kind == StreamKind::Request {
                0
            } else {
                self.window
            };
            Ok(StreamEntry::new(
                *key,
                stream_id.to_owned(),
                kind,
                self.ring_config(kind),
                now_ms,
                window,
            ))
        }));
        if inserted {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
        Ok(entry)
    }

    /// Stores one event of rmcp stream `stream_id` and returns its id: in
    /// the stream's window, its oldest event written to the ring if the
    /// window is full (see [`with_window`](Self::with_window)). A message
    /// larger than the ring is written as a placeholder that a replay
    /// reports as lost (the live send still carries the message).
    ///
    /// # Errors
    /// [`StoreError::RandomSource`] if the stream is new and the OS random
    /// source fails to draw its key; [`StoreError::Ring`] if the ring
    /// refuses an event for another reason than its size, which gapless
    /// does not give for a single event today; [`StoreError::OutOfStep`]
    /// if the ring numbered an event leaving the window otherwise than the
    /// id handed out (the stream is freed). Nothing is stored.
    pub fn store(&self, stream_id: &str, event: &ServerSseMessage) -> Result<String, StoreError> {
        let now = self.clock.now();
        let now_ms = self.maybe_sweep(now);
        let entry = self
            .entry(stream_id, now)
            .map_err(StoreError::RandomSource)?;
        self.store_local(&entry, event, now_ms)
    }

    /// [`store`](Self::store) to `entry`, in this process only, at `now_ms`.
    pub(crate) fn store_local(
        &self,
        entry: &StreamEntry,
        event: &ServerSseMessage,
        now_ms: u64,
    ) -> Result<String, StoreError> {
        let held = match &event.message {
            Some(message) => Held::Message(Arc::clone(message)),
            None => Held::Marker(event.retry),
        };
        let seq = match entry.push(held) {
            Ok(seq) => seq,
            Err(error) => {
                if matches!(error, StoreError::OutOfStep { .. }) {
                    // Its ids no longer name its ring's events: a resume
                    // gets `foreign_cursor` rather than another event.
                    self.free(&entry.key, entry);
                }
                return Err(error);
            }
        };
        // Learned once the event is stored: an event that was not does
        // not complete the stream.
        entry.stored(event.message.as_deref(), now_ms);
        Ok(entry.event_id(seq))
    }

    /// The events of the cursor's stream strictly after it, then the
    /// stream's live events until its response or error; or a signal. See
    /// [`ReplayStream`].
    pub fn replay(&self, last_event_id: &str) -> ReplayStream {
        let id: StoreEventId = match last_event_id.parse() {
            Ok(id) => id,
            Err(error) => {
                return ReplayStream::signal(
                    Signal::new(
                        Reason::MalformedCursor,
                        last_event_id,
                        format!("the cursor is not an event id of this server: {error}"),
                    ),
                    crate::signal::echo_id(last_event_id),
                )
            }
        };
        let cursor = id.event.seq;
        let foreign = |detail: String| {
            let mut signal = Signal::new(Reason::ForeignCursor, last_event_id, detail);
            signal.cursor = Some(cursor);
            ReplayStream::signal(signal, last_event_id)
        };
        let now_ms = self.maybe_sweep(self.clock.now());
        let Some(entry) = self.rings.get(&id.key) else {
            return foreign(
                "the cursor names a stream this server does not hold (another server process, or a removed stream)"
                    .to_owned(),
            );
        };
        entry.clocks.touch(now_ms);
        if entry.epoch() != id.event.epoch {
            return foreign(format!(
                "the cursor is from another incarnation of the stream (epoch {:016x}, now {:016x})",
                id.event.epoch,
                entry.epoch()
            ));
        }
        match entry.coverage(cursor) {
            Coverage::Covered { .. } => {}
            Coverage::Ahead { cursor, published } => {
                return ReplayStream::signal(
                    Signal::ahead(cursor, published, last_event_id),
                    last_event_id,
                )
            }
            Coverage::Gap(gap) => {
                let mut signal = Signal::gap(&gap, last_event_id);
                signal.request_id = entry.request_id();
                return ReplayStream::signal(signal, last_event_id);
            }
        }
        // A resume after the stream's last event (its response): nothing
        // follows, and nothing ever will.
        if cursor > 0 {
            // The store knows where the response is; only an event after it
            // (which rmcp never stores) is read back to tell.
            if entry.is_terminal_event(cursor) {
                return ReplayStream::done();
            }
        }
        ReplayStream::follow(entry, cursor, last_event_id.to_owned())
    }
}

fn infallible<T>(result: Result<T, Infallible>) -> T {
    match result {
        Ok(value) => value,
        Err(never) => match never {},
    }
}
