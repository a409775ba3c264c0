//! When the store frees a stream's ring on its own: rmcp never says when a
//! stream or a session ends (in stateless mode every POST is a new stream),
//! so without limits every stream would keep its ring for the life of the
//! process.
//!
//! Three rules, each freeing the ring as [`remove_stream`] does (live
//! replays end after what they have; a later resume with one of its ids
//! gets the explicit `foreign_cursor` signal, never a silent skip):
//!
//! - **Completed**: a request stream whose response (or error) is stored is
//!   freed [`StreamLimits::completed_grace`] after it — long enough for a
//!   client cut just before the result to resume and get it.
//! - **Idle**: a stream nothing was stored to and nothing replayed from for
//!   [`StreamLimits::idle`] is freed.
//! - **Cap**: at most [`StreamLimits::max_streams`] streams hold a ring; a
//!   new stream beyond it first frees what the two rules above allow, then
//!   the stream used least recently (completed ones before live ones).
//!
//! The store applies the rules as it is used (every store and replay looks
//! at the clock, and sweeps at most every [`StreamLimits::sweep_period`]);
//! [`sweep_at`] applies them as of a given instant.
//!
//! [`remove_stream`]: crate::GaplessEventStore::remove_stream
//! [`sweep_at`]: crate::GaplessEventStore::sweep_at

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long streams keep their rings, and how many may.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamLimits {
    /// Streams holding a ring at most. Default 10,000.
    pub max_streams: NonZeroUsize,
    /// A stream neither stored to nor replayed from for this long is
    /// freed. Default 10 minutes.
    pub idle: Duration,
    /// A request stream is freed this long after its response or error is
    /// stored. Default 60 s: a client cut before the result resumes within
    /// its reconnection delay.
    pub completed_grace: Duration,
}

impl Default for StreamLimits {
    fn default() -> Self {
        Self {
            max_streams: NonZeroUsize::new(10_000).unwrap_or(NonZeroUsize::MIN),
            idle: Duration::from_secs(600),
            completed_grace: Duration::from_secs(60),
        }
    }
}

impl StreamLimits {
    /// How often the store sweeps while it is used: a quarter of the
    /// shorter period, between 10 ms and 1 s, so a stream is freed within
    /// about a quarter of its period (and a second) after it is due.
    pub fn sweep_period(&self) -> Duration {
        (self.idle.min(self.completed_grace) / 4)
            .clamp(Duration::from_millis(10), Duration::from_secs(1))
    }
}

/// One stream's clocks, in milliseconds since the store's origin.
#[derive(Debug)]
pub(crate) struct Clocks {
    /// The last store to or replay from the stream.
    touched: AtomicU64,
    /// When its response or error was stored; `u64::MAX` until then.
    completed: AtomicU64,
}

/// A stream's standing when the rules are applied at some instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Due {
    /// Keep its ring.
    Keep,
    /// Free it: completed longer ago than the grace, or idle too long.
    Free,
}

impl Clocks {
    /// A stream created at `now_ms`.
    pub(crate) fn new(now_ms: u64) -> Self {
        Self {
            touched: AtomicU64::new(now_ms),
            completed: AtomicU64::new(u64::MAX),
        }
    }

    /// The stream was used at `now_ms` (never moves the clock back).
    pub(crate) fn touch(&self, now_ms: u64) {
        self.touched.fetch_max(now_ms, Ordering::Relaxed);
    }

    /// The stream's response or error was stored at `now_ms` (the first
    /// time counts).
    pub(crate) fn complete(&self, now_ms: u64) {
        self.completed.fetch_min(now_ms, Ordering::Relaxed);
    }

    /// Whether the stream's response or error is stored.
    pub(crate) fn is_completed(&self) -> bool {
        self.completed.load(Ordering::Relaxed) != u64::MAX
    }

    /// The last use, in ms since the origin.
    pub(crate) fn touched(&self) -> u64 {
        self.touched.load(Ordering::Relaxed)
    }

    /// Whether the rules free the stream at `now_ms`.
    pub(crate) fn due(&self, now_ms: u64, limits: &StreamLimits) -> Due {
        let completed = self.completed.load(Ordering::Relaxed);
        let done = completed != u64::MAX
            && now_ms.saturating_sub(completed) >= millis(limits.completed_grace);
        let idle = now_ms.saturating_sub(self.touched()) >= millis(limits.idle);
        if done || idle {
            Due::Free
        } else {
            Due::Keep
        }
    }
}

/// Where the store reads the time: [`Instant::now`] unless
/// [`GaplessEventStore::with_time_source`](crate::GaplessEventStore::with_time_source)
/// gave another.
pub type TimeSource = Arc<dyn Fn() -> Instant + Send + Sync>;

/// The store's clock: its time source, milliseconds since its origin, and
/// when it last swept.
pub(crate) struct Clock {
    /// `None`: [`Instant::now`].
    source: Option<TimeSource>,
    origin: Instant,
    /// When the last sweep started, in ms since the origin.
    last_sweep: AtomicU64,
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clock")
            .field(
                "source",
                &self.source.as_ref().map_or("Instant::now", |_| "given"),
            )
            .field("origin", &self.origin)
            .finish()
    }
}

impl Clock {
    pub(crate) fn new() -> Self {
        Self {
            source: None,
            origin: Instant::now(),
            last_sweep: AtomicU64::new(0),
        }
    }

    /// A clock that reads `source`, from its value now.
    pub(crate) fn with_source(source: TimeSource) -> Self {
        Self {
            origin: source(),
            source: Some(source),
            last_sweep: AtomicU64::new(0),
        }
    }

    /// The time now, by the source.
    pub(crate) fn now(&self) -> Instant {
        match &self.source {
            Some(source) => source(),
            None => Instant::now(),
        }
    }

    /// `at` in ms since the origin (0 before it).
    pub(crate) fn ms(&self, at: Instant) -> u64 {
        millis(at.saturating_duration_since(self.origin))
    }

    /// Whether a sweep is due at `now_ms`; `true` claims it (one caller
    /// per period sweeps).
    pub(crate) fn claim_sweep(&self, now_ms: u64, period: Duration) -> bool {
        let last = self.last_sweep.load(Ordering::Relaxed);
        now_ms.saturating_sub(last) >= millis(period)
            && self
                .last_sweep
                .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
