//! What every handler shares: the configuration, the sessions, the
//! metrics, and the server's lifecycle (shutdown signals, tracked tasks).

use crate::config::ServerConfig;
use crate::history::{Attach, HistoryError, Raised, RedisHistory, Snapshot, Token};
use crate::ids::SessionId;
use crate::metrics::{Limit, Metrics};
use crate::replica::{Replica, ReplicaError};
use gapless::session::{Session, SessionOptions, Transport};
use gapless::{Config, ConfigError, Ring, Store};
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

/// One live session and what its streams and the idle reaper watch.
pub(crate) struct Entry {
    /// The session's ID.
    pub(crate) id: SessionId,
    /// The engine's session: ring, cursors, attachment, tickets.
    pub(crate) session: Session,
    /// With `--redis`: the link between the ring and the shared history
    /// (this instance's role, its writes into the ring). `None`: the ring
    /// is the whole history.
    pub(crate) replica: Option<Arc<Replica>>,
    /// Bumped whenever the session's attachment changes or it ends, so a
    /// stream that is no longer current (an SSE stream superseded by a
    /// WebSocket, a deleted session) wakes and ends at once.
    pub(crate) changed: watch::Sender<u64>,
    /// Milliseconds since the server's start at the last request naming
    /// this session or the last detach of a transport: the idle clock.
    last_active_ms: AtomicU64,
    /// Streams open on this session, current or being superseded; at most
    /// `max_streams_per_session` (checked before a stream is opened).
    pub(crate) streams: AtomicUsize,
}

impl Entry {
    /// Wakes every stream of this session to re-check whether it is current.
    pub(crate) fn notify_changed(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// Resolves once `signal` is true (at once if it already is, and forever
/// pending if its sender is gone without turning it true). Holds no borrow
/// of the value across an await, so it fits any `select!`.
pub(crate) async fn turned_true(signal: &mut watch::Receiver<bool>) {
    if signal.wait_for(|on| *on).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The server's lifecycle: the two shutdown phases and every task that
/// must end before the server has stopped.
pub(crate) struct Lifecycle {
    /// Turns true when shutdown starts: streams end cleanly (SSE bodies
    /// end, WebSockets close with 1001).
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Turns true when the grace period is over: whatever is still open
    /// (a client that stopped reading) is dropped.
    pub(crate) hard_stop: watch::Sender<bool>,
    /// Connections, stream deliveries and WebSocket tasks.
    pub(crate) tasks: TaskTracker,
}

impl Lifecycle {
    /// Runs `task` tracked, dropping it when the hard stop comes.
    pub(crate) fn track<F>(&self, task: F) -> impl Future<Output = ()> + Send + 'static
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let mut hard_stop = self.hard_stop.subscribe();
        self.tasks.track_future(async move {
            tokio::select! {
                () = task => {}
                () = turned_true(&mut hard_stop) => {}
            }
        })
    }
}

/// Shared by every handler.
pub(crate) struct Shared {
    pub(crate) config: ServerConfig,
    /// Live sessions by ID.
    pub(crate) sessions: Store<SessionId, Entry>,
    /// Sessions live or being created; at most `config.max_sessions`.
    session_count: AtomicUsize,
    pub(crate) metrics: Metrics,
    pub(crate) lifecycle: Lifecycle,
    /// With `--redis`: the history every instance shares.
    pub(crate) history: Option<Arc<RedisHistory>>,
    /// The origin of every `last_active_ms`.
    started: Instant,
}

impl Shared {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Restarts `entry`'s idle clock.
    pub(crate) fn touch(&self, entry: &Entry) {
        entry.last_active_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// A new session under a fresh random ID.
    ///
    /// # Errors
    /// [`CreateError::TooMany`] at `max_sessions`; the OS random source
    /// failed, or the configured ring cannot be built.
    pub(crate) fn create_session(&self) -> Result<(SessionId, Arc<Entry>), CreateError> {
        if self.session_count.fetch_add(1, Ordering::AcqRel) >= self.config.max_sessions {
            self.session_count.fetch_sub(1, Ordering::AcqRel);
            self.metrics.tripped(Limit::Sessions);
            return Err(CreateError::TooMany);
        }
        let created = self.insert_session();
        if created.is_err() {
            self.session_count.fetch_sub(1, Ordering::AcqRel);
        }
        created
    }

    fn insert_session(&self) -> Result<(SessionId, Arc<Entry>), CreateError> {
        let options = self.session_options();
        let ring_config = Config::default()
            .events(self.config.ring_events)
            .bytes(self.config.ring_bytes);
        loop {
            let id = SessionId::random().map_err(CreateError::Random)?;
            let token = match self.history {
                Some(_) => Some(Token::random().map_err(CreateError::Random)?),
                None => None,
            };
            let (entry, created) = self
                .sessions
                .get_or_try_insert_with(id, || {
                    Ring::try_new(ring_config).map(|ring| {
                        let ring = Arc::new(ring);
                        let replica = token.map(|token| {
                            Arc::new(Replica::new(id, token, Arc::clone(&ring), true))
                        });
                        self.entry(id, Session::new(ring, options), replica)
                    })
                })
                .map_err(CreateError::Ring)?;
            // A 128-bit collision with a live session: draw again.
            if created {
                return Ok((id, entry));
            }
        }
    }

    fn session_options(&self) -> SessionOptions {
        SessionOptions {
            strict: self.config.strict,
            ticket_ttl: self.config.ticket_ttl,
            ..SessionOptions::default()
        }
    }

    fn entry(&self, id: SessionId, session: Session, replica: Option<Arc<Replica>>) -> Entry {
        Entry {
            id,
            session,
            replica,
            changed: watch::channel(0).0,
            last_active_ms: AtomicU64::new(self.now_ms()),
            streams: AtomicUsize::new(0),
        }
    }

    /// A new session, recorded in the shared history when there is one
    /// (this instance then owns it).
    ///
    /// # Errors
    /// As [`Shared::create_session`], and the history is unavailable (the
    /// session is not created).
    pub(crate) async fn create_shared_session(
        &self,
    ) -> Result<(SessionId, Arc<Entry>), CreateError> {
        let Some(history) = &self.history else {
            return self.create_session();
        };
        loop {
            let (id, entry) = self.create_session()?;
            let Some(replica) = &entry.replica else {
                return Ok((id, entry));
            };
            match history
                .create(&id, entry.session.epoch(), replica.token())
                .await
            {
                Ok(true) => {
                    replica.keep_lease(history);
                    return Ok((id, entry));
                }
                // Another instance holds a session with this ID.
                Ok(false) => {
                    self.drop_local(&id);
                }
                Err(error) => {
                    self.drop_local(&id);
                    self.metrics.history_failed(&error);
                    return Err(CreateError::History(error));
                }
            }
        }
    }

    /// The session `id`: the local entry, or (with a shared history) the
    /// session loaded from it: a ring holding the newest retained events
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
        let Some(history) = &self.history else {
            return Ok(None);
        };
        let snapshot = match history.newest(id, self.config.ring_events).await {
            Ok(Some(snapshot)) => snapshot,
            Ok(None) => return Ok(None),
            Err(error) => return Err(self.history_failed(error)),
        };
        if self.session_count.fetch_add(1, Ordering::AcqRel) >= self.config.max_sessions {
            self.session_count.fetch_sub(1, Ordering::AcqRel);
            self.metrics.tripped(Limit::Sessions);
            return Err(LoadError::TooMany);
        }
        let token = Token::random().map_err(|e| LoadError::Restore(e.to_string()))?;
        let (entry, created) = match self
            .sessions
            .get_or_try_insert_with(*id, || self.restore(*id, token, &snapshot))
        {
            Ok(inserted) => inserted,
            Err(error) => {
                self.session_count.fetch_sub(1, Ordering::AcqRel);
                return Err(LoadError::Restore(error));
            }
        };
        if created {
            self.metrics.sessions_loaded.fetch_add(1, Ordering::Relaxed);
        } else {
            // Another request loaded it first.
            self.session_count.fetch_sub(1, Ordering::AcqRel);
        }
        Ok(Some(entry))
    }

    /// An entry for session `id` from the history's snapshot (newest events
    /// in seq order, dense, ending at `published`).
    fn restore(&self, id: SessionId, token: Token, snapshot: &Snapshot) -> Result<Entry, String> {
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
        let ring = Arc::new(Ring::try_new(config).map_err(|e| e.to_string())?);
        for (seq, payload) in &snapshot.events {
            let emitted = ring.emit(payload).map_err(|e| e.to_string())?;
            if emitted != *seq {
                return Err(format!("history seq {seq} became ring seq {emitted}"));
            }
        }
        if ring.published() != snapshot.published {
            return Err(format!(
                "history ends at {}, its newest event is {}",
                snapshot.published,
                ring.published()
            ));
        }
        let session = Session::new(Arc::clone(&ring), self.session_options());
        session.raise_cursors(snapshot.acked, snapshot.sent);
        let replica = Arc::new(Replica::new(id, token, ring, false));
        Ok(self.entry(id, session, Some(replica)))
    }

    /// Catches `entry`'s ring up with the shared history and raises its
    /// cursors to what every instance recorded, before a check of a client
    /// cursor. A replica too far behind is dropped and loaded afresh: the
    /// entry to use is returned. Without a history: `entry` itself.
    ///
    /// # Errors
    /// The history is unavailable, or the session is gone from it (it is
    /// then ended here too).
    pub(crate) async fn refresh(
        self: &Arc<Self>,
        entry: Arc<Entry>,
    ) -> Result<Arc<Entry>, LoadError> {
        let (Some(history), Some(replica)) = (&self.history, &entry.replica) else {
            return Ok(entry);
        };
        match replica.refresh(history.as_ref()).await {
            Ok((acked, sent)) => {
                entry.session.raise_cursors(acked, sent);
                Ok(entry)
            }
            Err(ReplicaError::History(error)) => Err(self.session_history_failed(&entry.id, error)),
            Err(error) => {
                tracing::info!(session = %entry.id, %error, "replica reloaded");
                self.metrics
                    .replicas_reloaded
                    .fetch_add(1, Ordering::Relaxed);
                self.drop_local(&entry.id);
                self.find_session(&entry.id).await?.ok_or(LoadError::Gone)
            }
        }
    }

    /// Counts a failed call to the shared history and types it for the
    /// answer.
    pub(crate) fn history_failed(&self, error: HistoryError) -> LoadError {
        self.metrics.history_failed(&error);
        match error {
            HistoryError::Gone => LoadError::Gone,
            other => LoadError::History(other),
        }
    }

    /// [`Shared::history_failed`] for a call about session `id`: a session
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

    /// [`Shared::persist_cursors`] after a cursor check that attached a
    /// transport (`attached`) or not: the transport's attach generation in
    /// the shared history (`None` without one, or when none attached).
    ///
    /// # Errors
    /// As [`Shared::persist_cursors`].
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
    /// As [`Shared::persist_cursors`].
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
        let Some(history) = &self.history else {
            return Ok(None);
        };
        let state = entry.session.state();
        let sent = sent.map_or(state.sent, |s| state.sent.max(s.min(state.published)));
        match history
            .raise_cursors(&entry.id, state.acked, sent, attach)
            .await
        {
            Ok(raised) => Ok(Some(raised)),
            Err(error) => Err(self.history_failed(error)),
        }
    }

    /// Starts following the shared history for `entry` (a no-op without one
    /// or when running): a stream is about to read its ring.
    pub(crate) fn follow_history(self: &Arc<Self>, entry: &Entry) {
        let (Some(history), Some(replica)) = (&self.history, &entry.replica) else {
            return;
        };
        let shared = Arc::downgrade(self);
        let id = entry.id;
        replica.follow(history, move |_| {
            if let Some(shared) = shared.upgrade() {
                shared
                    .metrics
                    .replicas_reloaded
                    .fetch_add(1, Ordering::Relaxed);
                shared.drop_local(&id);
            }
        });
    }

    /// Gives up the lease of every session this instance owns (graceful
    /// shutdown), so other instances take them over at once.
    pub(crate) async fn release_leases(&self) {
        let Some(history) = &self.history else {
            return;
        };
        for (_, entry) in self.sessions.entries() {
            if let Some(replica) = &entry.replica {
                replica.release(history.as_ref()).await;
            }
        }
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
        self.session_count.fetch_sub(1, Ordering::AcqRel);
        entry.session.close();
        entry.notify_changed();
        let stats = entry.session.ring().stats();
        let metrics = &self.metrics;
        metrics
            .evicted_in_deleted
            .fetch_add(stats.evicted, Ordering::Relaxed);
        metrics
            .wrap_waits_in_deleted
            .fetch_add(stats.wrap_waits, Ordering::Relaxed);
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
                // own after the idle timeout); another instance may take
                // it over at once.
                if let (Some(history), Some(replica)) = (&self.history, &entry.replica) {
                    let (history, replica) = (Arc::clone(history), Arc::clone(replica));
                    tokio::spawn(async move { replica.release(history.as_ref()).await });
                }
                self.metrics
                    .sessions_expired
                    .fetch_add(1, Ordering::Relaxed);
                tracing::debug!(session = %id, "idle session ended");
            }
        }
    }
}

/// Why a session could not be created.
#[derive(Debug)]
pub(crate) enum CreateError {
    /// `max_sessions` are live.
    TooMany,
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
            Self::Random(error) => error.fmt(f),
            Self::Ring(error) => write!(f, "session ring: {error}"),
            Self::History(error) => error.fmt(f),
        }
    }
}

/// The router's state: cheap to clone, shared by every handler.
#[derive(Clone)]
pub struct AppState(pub(crate) Arc<Shared>);

impl AppState {
    /// State for a server with `config` whose streams end cleanly when
    /// `shutdown` turns true.
    ///
    /// Called inside a tokio runtime, it also starts the idle reaper, which
    /// ends sessions idle for `config.idle_timeout` and stops with the
    /// shutdown signal or when the last clone of the state is dropped.
    pub fn new(config: ServerConfig, shutdown: watch::Receiver<bool>) -> Self {
        Self::with_history(config, None, shutdown)
    }

    /// [`AppState::new`], connected to the shared history of
    /// `config.redis` when it is set.
    ///
    /// # Errors
    /// The history's URL is malformed or Redis does not answer.
    pub async fn connect(
        config: ServerConfig,
        shutdown: watch::Receiver<bool>,
    ) -> Result<Self, HistoryError> {
        let history = match &config.redis {
            Some(redis) => {
                let mut redis = redis.clone();
                redis.retention = redis.retention.max(config.ring_events);
                // Open streams refresh the keys at each keepalive (SSE every
                // 5 s, WebSocket every ping): the keys outlive the local
                // idle timeout by two of them.
                redis.idle = config.idle_timeout
                    + 2 * config.ping_interval.max(std::time::Duration::from_secs(5));
                Some(Arc::new(RedisHistory::connect(redis).await?))
            }
            None => None,
        };
        Ok(Self::with_history(config, history, shutdown))
    }

    fn with_history(
        config: ServerConfig,
        history: Option<Arc<RedisHistory>>,
        shutdown: watch::Receiver<bool>,
    ) -> Self {
        let shared = Arc::new(Shared {
            config,
            sessions: Store::new(64),
            session_count: AtomicUsize::new(0),
            metrics: Metrics::default(),
            lifecycle: Lifecycle {
                shutdown: shutdown.clone(),
                hard_stop: watch::channel(false).0,
                tasks: TaskTracker::new(),
            },
            history,
            started: Instant::now(),
        });
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(reap_idle_sessions(Arc::downgrade(&shared), shutdown));
        }
        Self(shared)
    }
}

/// Checks for idle sessions a few times per idle timeout (at most every
/// second, so a session ends within about a second after its timeout).
async fn reap_idle_sessions(state: Weak<Shared>, mut shutdown: watch::Receiver<bool>) {
    let Some(period) = state.upgrade().map(|s| {
        (s.config.idle_timeout / 4).clamp(Duration::from_millis(20), Duration::from_secs(1))
    }) else {
        return;
    };
    let mut tick = tokio::time::interval(period);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = turned_true(&mut shutdown) => return,
        }
        match state.upgrade() {
            Some(state) => state.reap_idle(),
            None => return,
        }
    }
}
