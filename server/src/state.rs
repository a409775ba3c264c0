//! What every handler shares: the configuration, the sessions, the
//! metrics and the shutdown signal.

use crate::config::ServerConfig;
use crate::ids::SessionId;
use crate::metrics::Metrics;
use gapless::session::{Session, SessionOptions};
use gapless::{Config, ConfigError, Ring, Store};
use std::sync::Arc;
use tokio::sync::watch;

/// One live session and the signal its streams watch.
pub(crate) struct Entry {
    /// The engine's session: ring, cursors, attachment, tickets.
    pub(crate) session: Session,
    /// Bumped whenever the session's attachment changes or it ends, so a
    /// stream that is no longer current (an SSE stream superseded by a
    /// WebSocket, a deleted session) wakes and ends at once.
    pub(crate) changed: watch::Sender<u64>,
}

impl Entry {
    /// Wakes every stream of this session to re-check whether it is current.
    pub(crate) fn notify_changed(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// Shared by every handler.
pub(crate) struct Shared {
    pub(crate) config: ServerConfig,
    /// Live sessions by ID.
    pub(crate) sessions: Store<SessionId, Entry>,
    pub(crate) metrics: Metrics,
    /// Turns true on shutdown: streams end.
    pub(crate) shutdown: watch::Receiver<bool>,
}

impl Shared {
    /// A new session under a fresh random ID.
    ///
    /// # Errors
    /// The OS random source failed, or the configured ring cannot be built.
    pub(crate) fn create_session(&self) -> Result<(SessionId, Arc<Entry>), CreateError> {
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
                    })
                })
                .map_err(CreateError::Ring)?;
            // A 128-bit collision with a live session: draw again.
            if created {
                return Ok((id, entry));
            }
        }
    }
}

/// Why a session could not be created.
#[derive(Debug)]
pub(crate) enum CreateError {
    /// The OS random source failed (no guessable ID is issued instead).
    Random(getrandom::Error),
    /// The configured ring geometry is invalid or cannot be allocated.
    Ring(ConfigError),
}

impl std::fmt::Display for CreateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Random(error) => write!(f, "OS random source: {error}"),
            Self::Ring(error) => write!(f, "session ring: {error}"),
        }
    }
}

/// The router's state: cheap to clone, shared by every handler.
#[derive(Clone)]
pub struct AppState(pub(crate) Arc<Shared>);

impl AppState {
    /// State for a server with `config` that stops streaming when
    /// `shutdown` turns true.
    pub fn new(config: ServerConfig, shutdown: watch::Receiver<bool>) -> Self {
        Self(Arc::new(Shared {
            config,
            sessions: Store::new(64),
            metrics: Metrics::default(),
            shutdown,
        }))
    }
}
