//! Counters for `/metrics`, rendered as Prometheus text.

use crate::history::HistoryError;
use gapless::session::Refusal;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// The refusal codes counted, in output order.
const REFUSAL_CODES: [&str; 7] = [
    "gap_not_covered",
    "cursor_ahead",
    "foreign_epoch",
    "cursor_mismatch",
    "migration_in_progress",
    "bad_ticket",
    "not_drained",
];

/// A limit that tripped, as the `kind` label of
/// `gapless_limits_tripped_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Limit {
    /// `POST /session` beyond `max_sessions`.
    Sessions,
    /// A connection beyond `max_connections`.
    Connections,
    /// A stream beyond `max_streams_per_session`.
    StreamsPerSession,
    /// A write that did not complete within `write_timeout`.
    WriteTimeout,
    /// A request head not complete within `header_read_timeout`.
    HeaderReadTimeout,
    /// A WebSocket message over `ws_max_message`.
    WsMessageSize,
    /// A WebSocket ping without a pong within `pong_timeout`.
    PongTimeout,
    /// A handler panicked (answered `500`).
    Panic,
}

impl Limit {
    const ALL: [Limit; 8] = [
        Limit::Sessions,
        Limit::Connections,
        Limit::StreamsPerSession,
        Limit::WriteTimeout,
        Limit::HeaderReadTimeout,
        Limit::WsMessageSize,
        Limit::PongTimeout,
        Limit::Panic,
    ];

    fn label(self) -> &'static str {
        match self {
            Self::Sessions => "sessions",
            Self::Connections => "connections",
            Self::StreamsPerSession => "streams_per_session",
            Self::WriteTimeout => "write_timeout",
            Self::HeaderReadTimeout => "header_read_timeout",
            Self::WsMessageSize => "ws_message_size",
            Self::PongTimeout => "pong_timeout",
            Self::Panic => "panic",
        }
    }
}

/// The kinds of `gapless_history_errors_total`, in output order.
const HISTORY_ERRORS: [&str; 4] = ["unavailable", "owner_unavailable", "gone", "corrupt"];

/// Where a refusal happened.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Stage {
    /// `GET /session/{id}/events` with a cursor.
    SseResume,
    /// `POST /session/{id}/upgrade` or the WebSocket handshake.
    Migration,
}

#[derive(Default)]
pub(crate) struct Metrics {
    pub(crate) sessions_created: AtomicU64,
    pub(crate) sessions_deleted: AtomicU64,
    pub(crate) events_emitted: AtomicU64,
    pub(crate) events_replayed: AtomicU64,
    pub(crate) events_streamed: AtomicU64,
    /// Evicted counts of rings already deleted (live rings are summed at
    /// scrape time).
    pub(crate) evicted_in_deleted: AtomicU64,
    /// Wrap waits of rings already deleted (live rings are summed at
    /// scrape time, like evictions).
    pub(crate) wrap_waits_in_deleted: AtomicU64,
    pub(crate) migrations_granted: AtomicU64,
    pub(crate) migrations_completed: AtomicU64,
    pub(crate) lapped_readers: AtomicU64,
    /// Sessions ended by the idle timeout.
    pub(crate) sessions_expired: AtomicU64,
    /// Sessions this instance loaded from the shared history.
    pub(crate) sessions_loaded: AtomicU64,
    /// Local replicas dropped and loaded afresh because the history had
    /// trimmed past them.
    pub(crate) replicas_reloaded: AtomicU64,
    history_errors: [AtomicU64; HISTORY_ERRORS.len()],
    limits_tripped: [AtomicU64; Limit::ALL.len()],
    migrations_refused: [AtomicU64; REFUSAL_CODES.len()],
    resumes_refused: [AtomicU64; REFUSAL_CODES.len()],
}

impl Metrics {
    /// Counts one trip of `limit`.
    pub(crate) fn tripped(&self, limit: Limit) {
        self.limits_tripped[limit as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one failed call to the shared history.
    pub(crate) fn history_failed(&self, error: &HistoryError) {
        let kind = match error {
            HistoryError::Unavailable(_) | HistoryError::Behind { .. } => 0,
            HistoryError::NotOwner { .. } => 1,
            HistoryError::Gone => 2,
            HistoryError::Corrupt(_) => 3,
        };
        self.history_errors[kind].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn refused(&self, stage: Stage, refusal: &Refusal) {
        let index = REFUSAL_CODES
            .iter()
            .position(|c| *c == refusal.code())
            .unwrap_or(0);
        let counters = match stage {
            Stage::SseResume => &self.resumes_refused,
            Stage::Migration => &self.migrations_refused,
        };
        counters[index].fetch_add(1, Ordering::Relaxed);
    }

    /// Prometheus text exposition; `sessions`, `evicted_live` and
    /// `wrap_waits_live` are read from the store at scrape time.
    pub(crate) fn render(
        &self,
        sessions: usize,
        evicted_live: u64,
        wrap_waits_live: u64,
    ) -> String {
        let mut out = String::new();
        let mut counter = |name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        };
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        counter(
            "gapless_sessions_created_total",
            "Sessions created.",
            get(&self.sessions_created),
        );
        counter(
            "gapless_sessions_deleted_total",
            "Sessions deleted.",
            get(&self.sessions_deleted),
        );
        counter(
            "gapless_events_emitted_total",
            "Events emitted into session rings.",
            get(&self.events_emitted),
        );
        counter(
            "gapless_events_replayed_total",
            "Events sent as replay after a resume or migration.",
            get(&self.events_replayed),
        );
        counter(
            "gapless_events_streamed_total",
            "Events sent live.",
            get(&self.events_streamed),
        );
        counter(
            "gapless_events_evicted_total",
            "Events evicted from session rings.",
            get(&self.evicted_in_deleted) + evicted_live,
        );
        counter(
            "gapless_emit_wrap_waits_total",
            "Emits that waited at the wrap for an emitter a window behind (size rings so this stays near zero).",
            get(&self.wrap_waits_in_deleted) + wrap_waits_live,
        );
        counter(
            "gapless_migrations_granted_total",
            "Upgrades granted (POST upgrade answered 200).",
            get(&self.migrations_granted),
        );
        counter(
            "gapless_migrations_completed_total",
            "WebSocket handshakes that attached.",
            get(&self.migrations_completed),
        );
        counter(
            "gapless_lapped_readers_total",
            "Streams ended with a gap because the ring lapped them.",
            get(&self.lapped_readers),
        );
        counter(
            "gapless_sessions_expired_total",
            "Sessions ended by the idle timeout.",
            get(&self.sessions_expired),
        );
        counter(
            "gapless_sessions_loaded_total",
            "Sessions loaded from the shared history (--redis).",
            get(&self.sessions_loaded),
        );
        counter(
            "gapless_replicas_reloaded_total",
            "Local replicas reloaded because the shared history trimmed past them.",
            get(&self.replicas_reloaded),
        );
        let _ = writeln!(
            out,
            "# HELP gapless_history_errors_total Failed calls to the shared history, by kind.\n# TYPE gapless_history_errors_total counter"
        );
        for (kind, count) in HISTORY_ERRORS.iter().zip(&self.history_errors) {
            let _ = writeln!(
                out,
                "gapless_history_errors_total{{kind=\"{kind}\"}} {}",
                get(count)
            );
        }
        let _ = writeln!(
            out,
            "# HELP gapless_limits_tripped_total Limits that tripped, by kind.\n# TYPE gapless_limits_tripped_total counter"
        );
        for limit in Limit::ALL {
            let _ = writeln!(
                out,
                "gapless_limits_tripped_total{{kind=\"{}\"}} {}",
                limit.label(),
                get(&self.limits_tripped[limit as usize])
            );
        }
        let _ = writeln!(
            out,
            "# HELP gapless_sessions Live sessions.\n# TYPE gapless_sessions gauge\ngapless_sessions {sessions}"
        );
        for (name, help, counters) in [
            (
                "gapless_migrations_refused_total",
                "Upgrades refused, by reason.",
                &self.migrations_refused,
            ),
            (
                "gapless_resumes_refused_total",
                "SSE resumes refused, by reason.",
                &self.resumes_refused,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (code, count) in REFUSAL_CODES.iter().zip(counters) {
                let _ = writeln!(out, "{name}{{reason=\"{code}\"}} {}", get(count));
            }
        }
        out
    }
}
