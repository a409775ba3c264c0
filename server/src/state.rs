//! What every handler shares: the configuration, the sessions, the
//! metrics, and the server's lifecycle (shutdown signals, tracked tasks).

use crate::admission::{Bounded, PerClient};
use crate::client_addr::ClientKey;
use crate::config::{DataDir, InvalidConfig, ServerConfig};
use crate::entry::{Admission, Entry};
use crate::history::{
    DiskHistory, History, HistoryConfig, HistoryError, HistoryTier, RedisHistory,
};
use crate::ids::{PublishKey, SessionId};
use crate::lifecycle::{turned_true, Lifecycle};
use crate::metrics::{DiskTotals, HistoryFailure, Limit, Metrics, RingTotals};
use crate::replica::ReplicaError;
use crate::session_history::{Attach, Loaded, Local, Raised, Replicated, SessionHistory};
use crate::streams::journal::Journal;
use crate::streams::restore::restore;
use crate::streams::{SharedStreams, Streams};
use gapless::session::{SessionOptions, Transport};
use gapless::{Config, ConfigError, Store, Writer};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

/// How long a write to the disk history (`--data-dir`) may wait for its
/// group commit before it is answered `503`: far beyond an `fdatasync`
/// of a working disk (a millisecond or so), short of a client's patience.
const DISK_TIMEOUT: Duration = Duration::from_secs(10);

/// The totals and per-client allowances sessions and connections take
/// from.
pub(crate) struct Limits {
    /// Live sessions; at most `max_sessions`.
    pub(crate) sessions: Arc<Bounded>,
    /// Bytes of ring the live sessions reserve; at most the memory budget.
    pub(crate) ring_memory: Arc<Bounded>,
    /// What one session's ring costs: `Geometry::footprint`.
    pub(crate) ring_footprint: u64,
    /// Live sessions per creating client.
    pub(crate) sessions_per_client: Arc<PerClient>,
    /// Open connections per client address.
    pub(crate) connections_per_client: Arc<PerClient>,
}

impl Limits {
    /// The limits of `config`, the memory budget resolved on this machine.
    fn new(config: &ServerConfig) -> Result<Self, InvalidConfig> {
        config.validate()?;
        let geometry = config.ring().geometry().map_err(InvalidConfig::Ring)?;
        let ring_footprint = geometry.footprint() as u64;
        let whole = config.memory_budget.resolve().unwrap_or_else(|| {
            tracing::warn!(
                "the machine's memory cannot be read; no memory budget (set --memory-budget BYTES)"
            );
            u64::MAX
        });
        // The rings get what the disk store leaves.
        let store = config.store_memory();
        let budget = whole.saturating_sub(store);
        if budget < ring_footprint {
            return Err(InvalidConfig::MemoryBudget {
                budget: whole,
                store,
                per_session: ring_footprint,
            });
        }
        let admitted = (budget / ring_footprint).min(config.max_sessions as u64);
        tracing::debug!(
            budget,
            ring_footprint,
            admitted,
            "memory budget: sessions it admits at the configured ring"
        );
        Ok(Self {
            sessions: Bounded::new(config.max_sessions as u64),
            ring_memory: Bounded::new(budget),
            ring_footprint,
            sessions_per_client: PerClient::new(config.max_sessions_per_client),
            connections_per_client: PerClient::new(config.max_connections_per_client),
        })
    }
}

/// What every handler reads: the configuration, the live sessions, the
/// limits, the metrics, the lifecycle and the session history.
pub(crate) struct ServerState {
    pub(crate) config: ServerConfig,
    /// Live sessions by ID (shared with the metrics, which sum the rings
    /// at scrape time).
    pub(crate) sessions: Arc<Store<SessionId, Entry>>,
    /// What sessions and connections hold against the server's limits.
    pub(crate) limits: Limits,
    pub(crate) metrics: Metrics,
    pub(crate) lifecycle: Lifecycle,
    /// Where sessions' histories live beyond their rings: [`Local`] (the
    /// ring is the whole history) or, with `--redis`, [`Replicated`].
    pub(crate) history: Arc<dyn SessionHistory>,
    /// Sessions being loaded from the history, one load each at a time.
    loading: Loading,
    /// The Durable Streams (`/v1/stream/...`), which share the sessions'
    /// limits and memory budget.
    pub(crate) streams: Arc<Streams>,
    /// With `--redis`: the Durable Streams live in the shared history
    /// (then `streams` stays empty).
    pub(crate) shared_streams: std::sync::OnceLock<Arc<SharedStreams<HistoryTier>>>,
    /// The origin of every `last_active_ms`.
    started: Instant,
}

impl ServerState {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Restarts `entry`'s idle clock.
    pub(crate) fn touch(&self, entry: &Entry) {
        entry.last_active_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// A new session under a fresh random ID, created by `client` (`None`:
    /// not counted per client).
    ///
    /// # Errors
    /// [`CreateError::TooMany`] at `max_sessions`,
    /// [`CreateError::TooManyForClient`] at `max_sessions_per_client`,
    /// [`CreateError::MemoryBudget`] when the ring would not fit the budget;
    /// the OS random source failed, or the configured ring cannot be built.
    pub(crate) fn create_session(
        &self,
        client: Option<ClientKey>,
    ) -> Result<(SessionId, Arc<Entry>), CreateError> {
        let admission = self.admit(client)?;
        let options = self.session_options();
        let ring_config = self.config.ring();
        loop {
            let id = SessionId::random().map_err(CreateError::Random)?;
            let publish_key = match self.config.publish_keys {
                true => Some(PublishKey::random().map_err(CreateError::Random)?),
                false => None,
            };
            let (entry, created) = self
                .sessions
                .get_or_try_insert_with(id, || {
                    Writer::try_new(ring_config).map(|writer| {
                        Entry::new(
                            id,
                            writer,
                            options,
                            publish_key,
                            self.now_ms(),
                            &self.lifecycle,
                        )
                    })
                })
                .map_err(CreateError::Ring)?;
            // A 128-bit collision with a live session: draw again.
            if created {
                entry.admit(admission);
                return Ok((id, entry));
            }
        }
    }

    /// What a new session holds against the limits: a session slot, its
    /// ring's footprint of the memory budget, and (when `client` is known)
    /// one of that client's slots. Each limit that trips is counted.
    fn admit(&self, client: Option<ClientKey>) -> Result<Admission, CreateError> {
        let Some(session) = self.limits.sessions.take(1) else {
            self.metrics.tripped(Limit::Sessions);
            return Err(CreateError::TooMany);
        };
        let client = match client {
            Some(client) => match self.limits.sessions_per_client.take(client) {
                Some(slot) => Some(slot),
                None => {
                    self.metrics.tripped(Limit::SessionsPerClient);
                    return Err(CreateError::TooManyForClient);
                }
            },
            None => None,
        };
        let Some(memory) = self.limits.ring_memory.take(self.limits.ring_footprint) else {
            self.metrics.tripped(Limit::MemoryBudget);
            return Err(CreateError::MemoryBudget);
        };
        Ok(Admission::new(session, memory, client))
    }

    fn session_options(&self) -> SessionOptions {
        SessionOptions {
            strict: self.config.strict,
            ticket_ttl: self.config.ticket_ttl,
            ..SessionOptions::default()
        }
    }

    /// A new session, recorded in the session history.
    ///
    /// # Errors
    /// As [`ServerState::create_session`], and the history is unavailable (the
    /// session is not created).
    pub(crate) async fn create_shared_session(
        &self,
        client: Option<ClientKey>,
    ) -> Result<(SessionId, Arc<Entry>), CreateError> {
        loop {
            let (id, entry) = self.create_session(client)?;
            match self
                .history
                .create(&id, entry.session.epoch(), entry.publish_key)
                .await
            {
                Ok(true) => return Ok((id, entry)),
                // Another instance holds a session with this ID.
                Ok(false) => {
                    self.drop_local(&id);
                }
                Err(error) => {
                    self.drop_local(&id);
                    self.metrics.history_failed(HistoryFailure::of(&error));
                    return Err(CreateError::History(error));
                }
            }
        }
    }

    /// The session `id`: the local entry, or the session loaded from the
    /// history (with `--redis`): a ring holding the newest retained events
    /// under the session's epoch, and the cursors every instance recorded.
    /// `Ok(None)`: no such session.
    ///
    /// # Errors
    /// The history is unavailable or holds something unexpected; the
    /// session limit is reached.
    pub(crate) async fn find_session(
        self: &Arc<Self>,
        id: &SessionId,
    ) -> Result<Option<Arc<Entry>>, LoadError> {
        if let Some(entry) = self.sessions.get(id) {
            return Ok(Some(entry));
        }
        // One load per session at a time: concurrent requests for a session
        // this instance does not hold wait for the first one's load.
        let loading = self.loading.slot(id);
        let _loading = loading.lock().await;
        if let Some(entry) = self.sessions.get(id) {
            return Ok(Some(entry));
        }
        let loaded = match self.history.load(id).await {
            Ok(Some(loaded)) => loaded,
            Ok(None) => return Ok(None),
            Err(error) => return Err(self.history_failed(error)),
        };
        // A session loaded here was created by a client of another
        // instance: it counts against this instance's totals, not against
        // the client that asked for it.
        let admission = self.admit(None).map_err(|error| match error {
            CreateError::MemoryBudget => LoadError::MemoryBudget,
            _ => LoadError::TooMany,
        })?;
        let (entry, created) = self
            .sessions
            .get_or_try_insert_with(*id, || self.restore(*id, &loaded))
            .map_err(LoadError::Restore)?;
        // Otherwise another request loaded it first, and holds its own.
        if created {
            entry.admit(admission);
            self.metrics.sessions_loaded.inc();
        }
        Ok(Some(entry))
    }

    /// An entry for session `id` from the history's snapshot (newest events
    /// in seq order, dense, ending at `published`).
    fn restore(&self, id: SessionId, loaded: &Loaded) -> Result<Entry, String> {
        let snapshot = &loaded.snapshot;
        let epoch = std::num::NonZeroU64::new(snapshot.epoch).ok_or("epoch 0 in the history")?;
        let base = snapshot
            .events
            .first()
            .map_or(snapshot.published, |(seq, _)| seq.saturating_sub(1));
        let config = Config::default()
            .events(self.config.ring_events)
            .bytes(self.config.ring_bytes)
            .epoch(epoch)
            .start_after(base);
        let mut writer = Writer::try_new(config).map_err(|e| e.to_string())?;
        for (seq, payload) in &snapshot.events {
            let emitted = writer.emit(payload).map_err(|e| e.to_string())?;
            if emitted != *seq {
                return Err(format!("history seq {seq} became ring seq {emitted}"));
            }
        }
        let published = writer.ring().published();
        if published != snapshot.published {
            return Err(format!(
                "history ends at {}, its newest event is {published}",
                snapshot.published,
            ));
        }
        let entry = Entry::new(
            id,
            writer,
            self.session_options(),
            loaded.publish_key,
            self.now_ms(),
            &self.lifecycle,
        );
        entry.session.raise_cursors(loaded.acked, loaded.sent);
        Ok(entry)
    }

    /// Catches `entry`'s ring up with the shared history and raises its
    /// cursors to what every instance recorded, before a check of a client
    /// cursor. A replica too far behind is dropped and loaded afresh: the
    /// entry to use is returned (`entry` itself when the ring is the whole
    /// history).
    ///
    /// # Errors
    /// The history is unavailable, or the session is gone from it (it is
    /// then ended here too).
    pub(crate) async fn refresh(
        self: &Arc<Self>,
        entry: Arc<Entry>,
    ) -> Result<Arc<Entry>, LoadError> {
        match self.history.refresh(&entry).await {
            Ok(cursors) => {
                if let Some((acked, sent)) = cursors {
                    entry.session.raise_cursors(acked, sent);
                }
                Ok(entry)
            }
            Err(ReplicaError::History(error)) => Err(self.session_history_failed(&entry.id, error)),
            Err(error) => {
                tracing::info!(session = %entry.id.tag(), %error, "replica reloaded");
                self.metrics.replicas_reloaded.inc();
                self.drop_local(&entry.id);
                self.find_session(&entry.id).await?.ok_or(LoadError::Gone)
            }
        }
    }

    /// Counts a failed call to the shared history and types it for the
    /// answer.
    pub(crate) fn history_failed(&self, error: HistoryError) -> LoadError {
        self.metrics.history_failed(HistoryFailure::of(&error));
        match error {
            HistoryError::Gone => LoadError::Gone,
            other => LoadError::History(other),
        }
    }

    /// [`ServerState::history_failed`] for a call about session `id`: a session
    /// gone from the history ends here too.
    pub(crate) fn session_history_failed(&self, id: &SessionId, error: HistoryError) -> LoadError {
        let failed = self.history_failed(error);
        if matches!(failed, LoadError::Gone) {
            self.drop_local(id);
        }
        failed
    }

    /// Records `entry`'s cursors in the shared history (a no-op without
    /// one), before an answer that depends on them leaves.
    ///
    /// # Errors
    /// The history is unavailable, or the session is gone from it.
    pub(crate) async fn persist_cursors(&self, entry: &Entry) -> Result<(), LoadError> {
        self.raise(entry, None, Attach::None).await.map(drop)
    }

    /// [`ServerState::persist_cursors`] after a cursor check that attached a
    /// transport (`attached`) or not: the transport's attach generation in
    /// the shared history (`None` without one, or when none attached).
    ///
    /// # Errors
    /// As [`ServerState::persist_cursors`].
    pub(crate) async fn persist_check(
        &self,
        entry: &Entry,
        attached: bool,
    ) -> Result<Option<u64>, LoadError> {
        let attach = if attached { Attach::New } else { Attach::None };
        let raised = self.raise(entry, None, attach).await?;
        Ok(raised.filter(|_| attached).map(|r| r.generation))
    }

    /// Records, for the stream attached at `generation`, that it is about
    /// to hand over events up to `sent` (`None`: a keepalive), then
    /// records `sent` locally. `Ok(false)`: a transport attached since on
    /// some instance; nothing was recorded and the stream must end.
    /// Always `Ok(true)` without a shared history (after `record_sent`).
    ///
    /// # Errors
    /// As [`ServerState::persist_cursors`].
    pub(crate) async fn persist_sent(
        &self,
        entry: &Entry,
        sent: Option<u64>,
        generation: Option<u64>,
    ) -> Result<bool, LoadError> {
        let attach = generation.map_or(Attach::None, Attach::Current);
        let still_current = self
            .raise(entry, sent, attach)
            .await?
            .is_none_or(|raised| raised.raised);
        if let (true, Some(sent)) = (still_current, sent) {
            entry.session.record_sent(sent);
        }
        Ok(still_current)
    }

    /// Raises `entry`'s cursors in the shared history (`sent` at least to
    /// `sent`, capped at the ring's watermark); `None` without a history.
    async fn raise(
        &self,
        entry: &Entry,
        sent: Option<u64>,
        attach: Attach,
    ) -> Result<Option<Raised>, LoadError> {
        let state = entry.session.state();
        let sent = sent.map_or(state.sent, |s| state.sent.max(s.min(state.published)));
        self.history
            .raise_cursors(&entry.id, entry.session.epoch(), state.acked, sent, attach)
            .await
            .map_err(|error| self.history_failed(error))
    }

    /// Starts following the shared history for `entry` (a no-op without one
    /// or when running): a stream is about to read its ring.
    pub(crate) fn follow_history(self: &Arc<Self>, entry: &Entry) {
        let shared = Arc::downgrade(self);
        let id = entry.id;
        self.history.follow(
            entry,
            Box::new(move |_| {
                if let Some(shared) = shared.upgrade() {
                    shared.metrics.replicas_reloaded.inc();
                    shared.drop_local(&id);
                }
            }),
        );
    }

    /// Ends this instance's copy of session `id` (its streams end; clients
    /// resume with their cursors), leaving the shared history alone.
    pub(crate) fn drop_local(&self, id: &SessionId) {
        let _ = self.end_session(id);
    }

    /// Ends session `id` (DELETE or idle expiry): it leaves the store, its
    /// streams end, its ring is freed when the last of them lets go.
    pub(crate) fn end_session(&self, id: &SessionId) -> Option<Arc<Entry>> {
        let entry = self.sessions.remove(id)?;
        // Its slots and memory are free at once, even while its last
        // streams still end.
        drop(entry.release());
        entry.session.close();
        entry.notify_changed();
        let stats = entry.session.ring().stats();
        let metrics = &self.metrics;
        metrics.evicted_in_deleted.inc_by(stats.evicted);
        metrics.wrap_waits_in_deleted.inc_by(stats.wrap_waits);
        Some(entry)
    }

    /// Ends every session idle for longer than the idle timeout: no
    /// transport attached, no stream open, no request since.
    fn reap_idle(&self) {
        let idle_ms = u64::try_from(self.config.idle_timeout.as_millis()).unwrap_or(u64::MAX);
        let now = self.now_ms();
        for (id, entry) in self.sessions.entries() {
            let idle = entry.session.state().transport == Transport::None
                && entry.streams.load(Ordering::Acquire) == 0
                && now.saturating_sub(entry.last_active_ms.load(Ordering::Relaxed)) > idle_ms;
            if idle && self.end_session(&id).is_some() {
                // The history keeps the session (its keys expire on their
                // own after the idle timeout).
                self.metrics.sessions_expired.inc();
                tracing::debug!(session = %id.tag(), "idle session ended");
            }
        }
    }
}

/// Why a session could not be created.
#[derive(Debug)]
pub(crate) enum CreateError {
    /// `max_sessions` are live.
    TooMany,
    /// The creating client holds `max_sessions_per_client` live sessions.
    TooManyForClient,
    /// One more ring would take the rings past the memory budget.
    MemoryBudget,
    /// The OS random source failed (no guessable ID is issued instead).
    Random(gapless::id::RandomSourceError),
    /// The configured ring geometry is invalid or cannot be allocated.
    Ring(ConfigError),
    /// The shared history is unavailable.
    History(HistoryError),
}

/// Why a session could not be found or brought up to date.
#[derive(Debug)]
pub(crate) enum LoadError {
    /// `max_sessions` are live on this instance.
    TooMany,
    /// One more ring would take this instance past its memory budget.
    MemoryBudget,
    /// The session is gone from the shared history.
    Gone,
    /// The shared history is unavailable or holds something unexpected.
    History(HistoryError),
    /// What the history holds cannot be restored into a ring here.
    Restore(String),
}

impl std::fmt::Display for CreateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooMany => f.write_str("the session limit is reached"),
            Self::TooManyForClient => f.write_str("the client's session limit is reached"),
            Self::MemoryBudget => f.write_str("the memory budget is spent"),
            Self::Random(error) => error.fmt(f),
            Self::Ring(error) => write!(f, "session ring: {error}"),
            Self::History(error) => error.fmt(f),
        }
    }
}

/// The router's state: cheap to clone, shared by every handler.
#[derive(Clone)]
pub struct AppState(pub(crate) Arc<ServerState>);

impl AppState {
    /// State for a server with `config` whose streams end cleanly when
    /// `shutdown` turns true.
    ///
    /// Called inside a tokio runtime, it also starts the idle reaper, which
    /// ends sessions idle for `config.idle_timeout` and stops with the
    /// shutdown signal or when the last clone of the state is dropped.
    ///
    /// # Panics
    /// `config` is invalid ([`ServerConfig::validate`]); [`AppState::try_new`]
    /// returns the error instead.
    #[track_caller]
    pub fn new(config: ServerConfig, shutdown: watch::Receiver<bool>) -> Self {
        match Self::try_new(config, shutdown) {
            Ok(state) => state,
            Err(error) => panic!("invalid ServerConfig: {error}"),
        }
    }

    /// [`AppState::new`], or the reason `config` cannot run.
    ///
    /// # Errors
    /// [`ServerConfig::validate`]'s, or a memory budget (a share of this
    /// machine) that holds no session.
    pub fn try_new(
        config: ServerConfig,
        shutdown: watch::Receiver<bool>,
    ) -> Result<Self, InvalidConfig> {
        Self::with_history(config, Arc::new(Local), None, None, shutdown)
    }

    /// [`AppState::try_new`], over the history tier the configuration
    /// names: the shared history of `config.redis`, or the disk history of
    /// `config.data_dir` (opened, and recovered from what a previous run
    /// left, before this returns).
    ///
    /// # Errors
    /// The configuration is invalid, the history's URL is malformed or
    /// Redis does not answer, or the data directory cannot open.
    pub async fn connect(
        config: ServerConfig,
        shutdown: watch::Receiver<bool>,
    ) -> Result<Self, StartError> {
        config.validate()?;
        // Open streams refresh a log at each keepalive (SSE every 5 s,
        // WebSocket every ping): it outlives the local idle timeout by two
        // of them.
        let idle =
            config.idle_timeout + 2 * config.ping_interval.max(std::time::Duration::from_secs(5));
        let tier = match (&config.redis, &config.data_dir) {
            (Some(redis), _) => {
                let mut redis = redis.clone();
                redis.retention = redis.retention.max(config.ring_events);
                redis.idle = idle;
                Some(HistoryTier::Redis(RedisHistory::connect(redis).await?))
            }
            (None, Some(data_dir)) => {
                let disk = HistoryConfig {
                    url: String::new(),
                    cluster: false,
                    timeout: DISK_TIMEOUT,
                    retention: config.ring_events,
                    retention_bytes: config.ring_bytes,
                    idle,
                    ca_file: None,
                };
                let DataDir {
                    path,
                    fsync,
                    limits,
                } = data_dir.clone();
                let opened = tokio::task::spawn_blocking(move || {
                    DiskHistory::open(&path, disk, fsync, limits)
                })
                .await
                .map_err(|join| {
                    StartError::History(HistoryError::Unavailable(format!(
                        "the disk history's open: {join}"
                    )))
                })?;
                let disk = opened.map_err(StartError::DataDir)?;
                // Every write is awaited on the server's multi-thread
                // runtime (no LocalSet): an uncontended append is written
                // by its request, with no hand-off to the committer.
                disk.write_inline(true);
                Some(HistoryTier::Disk(Arc::new(disk)))
            }
            (None, None) => None,
        };
        let Some(tier) = tier.map(Arc::new) else {
            return Ok(Self::with_history(
                config,
                Arc::new(Local),
                None,
                None,
                shutdown,
            )?);
        };
        let history: Arc<dyn SessionHistory> =
            Arc::new(Replicated::new(Arc::clone(&tier), config.max_queued_emits));
        if let HistoryTier::Disk(disk) = &*tier {
            // Durable Streams stay in this process's registry, the ring in
            // front, each change journaled to the disk before it is
            // acknowledged; sessions are replicas of the disk history's logs.
            let journal = Arc::new(Journal::new(Arc::clone(disk)));
            let state = Self::with_history(
                config,
                history,
                Some(&tier),
                Some(Arc::clone(&journal)),
                shutdown,
            )?;
            let started = Instant::now();
            let report = restore(&state.0.streams, &journal)
                .await
                .map_err(|error| StartError::Restore(error.to_string()))?;
            tracing::info!(
                streams = report.streams,
                messages = report.messages,
                producers = report.producers,
                unreadable = report.unreadable,
                ms = started.elapsed().as_millis() as u64,
                "durable streams restored from the data directory"
            );
            return Ok(state);
        }
        let state = Self::with_history(config, history, Some(&tier), None, shutdown)?;
        let max_payload = state
            .0
            .config
            .ring()
            .geometry()
            .map_or(0, |g| g.max_payload());
        let timeout = tier.config().timeout;
        let _ = state.0.shared_streams.set(Arc::new(
            SharedStreams::new(Arc::clone(&tier), max_payload, timeout)
                .with_producer_limits(crate::streams::stream::ProducerLimits {
                    per_stream: state.0.config.max_producers_per_stream,
                    idle: state.0.config.producer_idle_timeout,
                })
                .with_admission(crate::streams::shared::Admission {
                    total: state.0.config.max_durable_streams as u64,
                    per_client: state.0.config.max_durable_streams_per_client as u64,
                    // The logs' time to live: the idle timeout and a fifth.
                    ttl: state.0.config.idle_timeout + state.0.config.idle_timeout / 5,
                }),
        ));
        if let HistoryTier::Redis(redis) = &*tier {
            // The group commit's flusher and its script calls run among the
            // server's tracked tasks: a shutdown waits for appends in
            // flight, and drops them at its hard stop.
            let tasks = state.0.lifecycle.tracked_tasks();
            redis.set_spawner(Arc::new(move |task| drop(tokio::spawn(tasks.track(task)))));
        }
        Ok(state)
    }

    fn with_history(
        config: ServerConfig,
        history: Arc<dyn SessionHistory>,
        tier: Option<&Arc<HistoryTier>>,
        journal: Option<Arc<Journal>>,
        shutdown: watch::Receiver<bool>,
    ) -> Result<Self, InvalidConfig> {
        let limits = Limits::new(&config)?;
        let sessions = Arc::new(Store::new(64));
        let streams = Streams::new(
            config.ring(),
            config.idle_timeout,
            Arc::clone(&limits.ring_memory),
            limits.ring_memory.limit() / 100 * u64::from(config.stream_memory_per_client.min(100)),
        )
        .with_producer_limits(crate::streams::stream::ProducerLimits {
            per_stream: config.max_producers_per_stream,
            idle: config.producer_idle_timeout,
        });
        let streams = Arc::new(match journal {
            Some(journal) => streams.with_journal(journal),
            None => streams,
        });
        let metrics = Metrics::new({
            let sessions = Arc::clone(&sessions);
            let streams = Arc::clone(&streams);
            let memory = Arc::clone(&limits.ring_memory);
            let history = Arc::clone(&history);
            move || RingTotals {
                reserved_bytes: memory.held(),
                budget_bytes: memory.limit(),
                emits_waiting: history.emits_waiting(),
                streams: streams.len() as u64,
                ..ring_totals(&sessions)
            }
        });
        let metrics = match tier {
            Some(tier) if matches!(**tier, HistoryTier::Disk(_)) => {
                let tier = Arc::clone(tier);
                metrics.with_disk_log(move || match &*tier {
                    HistoryTier::Disk(disk) => {
                        let commits = disk.commit_stats();
                        DiskTotals {
                            bytes: disk.disk_bytes(),
                            logs: disk.log_count() as u64,
                            writes: commits.writes,
                            batches: commits.batches,
                            batches_inline: commits.batches_inline,
                            fsyncs: commits.fsyncs,
                            fsync_micros: commits.fsync_micros,
                        }
                    }
                    HistoryTier::Redis(_) => DiskTotals::default(),
                })
            }
            _ => metrics,
        };
        let shared = Arc::new(ServerState {
            streams,
            shared_streams: std::sync::OnceLock::new(),
            config,
            sessions,
            limits,
            metrics,
            lifecycle: Lifecycle {
                shutdown: shutdown.clone(),
                hard_stop: watch::channel(false).0,
                tasks: TaskTracker::new(),
            },
            history,
            loading: Loading::default(),
            started: Instant::now(),
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(reap_idle_sessions(Arc::downgrade(&shared), shutdown));
        }
        Ok(Self(shared))
    }
}

/// Why a server could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum StartError {
    /// The configuration cannot run.
    Config(InvalidConfig),
    /// The shared history (`--redis`) cannot be reached.
    History(HistoryError),
    /// The disk history (`--data-dir`) cannot open.
    DataDir(gapless_history::DiskError),
    /// The Durable Streams in the data directory cannot be restored.
    Restore(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Config(error) => error.fmt(f),
            Self::History(error) => write!(f, "--redis/--redis-cluster: {error}"),
            Self::DataDir(error) => write!(f, "--data-dir: {error}"),
            Self::Restore(why) => write!(f, "--data-dir: {why}"),
        }
    }
}

impl std::error::Error for StartError {}

impl From<InvalidConfig> for StartError {
    fn from(error: InvalidConfig) -> Self {
        Self::Config(error)
    }
}

impl From<HistoryError> for StartError {
    fn from(error: HistoryError) -> Self {
        Self::History(error)
    }
}

/// One lock per session being loaded from the history, so concurrent
/// requests for a session this instance does not hold load it once.
#[derive(Default)]
pub(crate) struct Loading(Mutex<HashMap<SessionId, Weak<tokio::sync::Mutex<()>>>>);

impl Loading {
    /// The lock of session `id`'s load (alive while someone holds it).
    fn slot(&self, id: &SessionId) -> Arc<tokio::sync::Mutex<()>> {
        let mut slots = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = slots.get(id).and_then(Weak::upgrade) {
            return slot;
        }
        // Forget finished loads now and then: the map holds at most the
        // loads in flight, give or take the ones since the last sweep.
        if slots.len() >= 64 {
            slots.retain(|_, slot| slot.strong_count() > 0);
        }
        let slot = Arc::new(tokio::sync::Mutex::new(()));
        slots.insert(*id, Arc::downgrade(&slot));
        slot
    }
}

/// What the live rings hold, for a scrape.
fn ring_totals(sessions: &Store<SessionId, Entry>) -> RingTotals {
    sessions
        .entries()
        .iter()
        .fold(RingTotals::default(), |totals, (_, entry)| {
            let stats = entry.session.ring().stats();
            RingTotals {
                sessions: totals.sessions + 1,
                evicted: totals.evicted + stats.evicted,
                wrap_waits: totals.wrap_waits + stats.wrap_waits,
                ..totals
            }
        })
}

/// Checks for idle sessions a few times per idle timeout (at most every
/// second, so a session ends within about a second after its timeout).
async fn reap_idle_sessions(state: Weak<ServerState>, mut shutdown: watch::Receiver<bool>) {
    let Some(period) = state.upgrade().map(|s| {
        (s.config.idle_timeout / 4).clamp(Duration::from_millis(20), Duration::from_secs(1))
    }) else {
        return;
    };
    let mut tick = tokio::time::interval(period);
    // The pass writing streams' accesses to the journal, while it runs: one
    // at a time, and awaited before this task ends (it holds the registry).
    let mut writing: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = turned_true(&mut shutdown) => break,
        }
        let Some(state) = state.upgrade() else {
            break;
        };
        state.reap_idle();
        let behind = state.streams.sweep();
        if writing
            .as_ref()
            .is_some_and(tokio::task::JoinHandle::is_finished)
        {
            let done = writing
                .take()
                .and_then(futures_util::FutureExt::now_or_never);
            if let Some(Err(error)) = done {
                tracing::error!(%error, "writing the streams' accesses to the journal failed");
            }
        }
        if !behind.is_empty() && writing.is_none() {
            // A lock and a record per stream: not on the runtime's threads.
            let streams = Arc::clone(&state.streams);
            writing = Some(tokio::task::spawn_blocking(move || {
                streams.journal_accesses(&behind, crate::streams::registry::journal_every_ms());
            }));
        }
    }
    if let Some(writing) = writing {
        if let Err(error) = writing.await {
            tracing::error!(%error, "writing the streams' accesses to the journal failed");
        }
    }
}
