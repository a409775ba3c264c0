//! What every handler shares: the configuration, the sessions, the
//! metrics, and the server's lifecycle (shutdown signals, tracked tasks).

use crate::config::ServerConfig;
use crate::ids::SessionId;
use crate::metrics::{Limit, Metrics};
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
    /// The engine's session: ring, cursors, attachment, tickets.
    pub(crate) session: Session,
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
        let options = SessionOptions {
            strict: self.config.strict,
            ticket_ttl: self.config.ticket_ttl,
            ..SessionOptions::default()
        };
        let ring_config = Config::default()
            .events(self.config.ring_events)
            .bytes(self.config.ring_bytes);
        loop {
            let id = SessionId::random().map_err(CreateError::Random)?;
            let (entry, created) = self
                .sessions
                .get_or_try_insert_with(id, || {
                    Ring::try_new(ring_config).map(|ring| Entry {
                        session: Session::new(ring, options),
                        changed: watch::channel(0).0,
                        last_active_ms: AtomicU64::new(self.now_ms()),
                        streams: AtomicUsize::new(0),
                    })
                })
                .map_err(CreateError::Ring)?;
            // A 128-bit collision with a live session: draw again.
            if created {
                return Ok((id, entry));
            }
        }
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
    Random(getrandom::Error),
    /// The configured ring geometry is invalid or cannot be allocated.
    Ring(ConfigError),
}

impl std::fmt::Display for CreateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooMany => f.write_str("the session limit is reached"),
            Self::Random(error) => write!(f, "OS random source: {error}"),
            Self::Ring(error) => write!(f, "session ring: {error}"),
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
