//! `/metrics`: the server's counters as `prometheus-client` families,
//! encoded in the Prometheus text format (version 0.0.4).
//!
//! Every labelled family takes a typed label: [`Limit`] for limits that
//! tripped, [`HistoryFailure`] for failed Redis calls, and a refusal's own
//! [`Refusal::code`] for refusals (a refusal the engine adds later is
//! counted under its own code, never under another's). Every label value the
//! server knows is created at zero, so a scrape lists it before it first
//! trips. What lives in the session rings (live sessions, evictions, wrap
//! waits) is read at scrape time by a collector.

use gapless::session::Refusal;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric, LabelValueEncoder,
};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use std::fmt::{self, Write as _};

/// The `Content-Type` of [`Metrics::encode`]'s text.
pub(crate) const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// A limit that tripped: the `kind` label of `gapless_limits_tripped_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Limit {
    /// `POST /session` beyond `max_sessions`.
    Sessions,
    /// `POST /session` beyond `max_sessions_per_client` for one client.
    SessionsPerClient,
    /// A session that would take the rings past `memory_budget`.
    MemoryBudget,
    /// A connection beyond `max_connections`.
    Connections,
    /// A connection beyond `max_connections_per_client` from one client.
    ConnectionsPerClient,
    /// A stream beyond `max_streams_per_session`.
    StreamsPerSession,
    /// A write that did not complete within `write_timeout`.
    WriteTimeout,
    /// A request head not complete within `header_read_timeout`.
    HeaderReadTimeout,
    /// A request body not complete within `body_read_timeout`.
    BodyReadTimeout,
    /// An emit beyond `max_queued_emits` waiting for Redis.
    QueuedEmits,
    /// A WebSocket message over `ws_max_message`.
    WsMessageSize,
    /// A WebSocket ping without a pong within `pong_timeout`.
    PongTimeout,
    /// A handler panicked (answered `500`).
    Panic,
    /// A Durable Stream's create or growth past its client's share of the
    /// memory budget.
    StreamMemoryPerClient,
    /// Over Redis: a Durable Stream's create past `max_durable_streams`.
    DurableStreams,
    /// Over Redis: a Durable Stream's create past
    /// `max_durable_streams_per_client` for one client.
    DurableStreamsPerClient,
}

impl Limit {
    /// Every limit, in the order a fresh scrape lists them.
    const ALL: [Self; 16] = [
        Self::Sessions,
        Self::SessionsPerClient,
        Self::MemoryBudget,
        Self::Connections,
        Self::ConnectionsPerClient,
        Self::StreamsPerSession,
        Self::WriteTimeout,
        Self::HeaderReadTimeout,
        Self::BodyReadTimeout,
        Self::QueuedEmits,
        Self::WsMessageSize,
        Self::PongTimeout,
        Self::Panic,
        Self::StreamMemoryPerClient,
        Self::DurableStreams,
        Self::DurableStreamsPerClient,
    ];

    /// The label value.
    fn label(self) -> &'static str {
        match self {
            Self::Sessions => "sessions",
            Self::SessionsPerClient => "sessions_per_client",
            Self::MemoryBudget => "memory_budget",
            Self::Connections => "connections",
            Self::ConnectionsPerClient => "connections_per_client",
            Self::StreamsPerSession => "streams_per_session",
            Self::WriteTimeout => "write_timeout",
            Self::HeaderReadTimeout => "header_read_timeout",
            Self::BodyReadTimeout => "body_read_timeout",
            Self::QueuedEmits => "queued_emits",
            Self::WsMessageSize => "ws_message_size",
            Self::PongTimeout => "pong_timeout",
            Self::Panic => "panic",
            Self::StreamMemoryPerClient => "stream_memory_per_client",
            Self::DurableStreams => "durable_streams",
            Self::DurableStreamsPerClient => "durable_streams_per_client",
        }
    }
}

impl EncodeLabelValue for Limit {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> fmt::Result {
        encoder.write_str(self.label())
    }
}

/// A failed call to the shared history: the `kind` label of
/// `gapless_history_errors_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum HistoryFailure {
    /// Redis did not answer in time (or an emit waited past its deadline).
    Unavailable,
    /// The disk of `--data-dir` is full: the write was refused.
    Full,
    /// The session's keys are gone.
    Gone,
    /// A reply this server did not write.
    Corrupt,
    /// The session's keys are damaged: it takes no more appends.
    Damaged,
}

impl HistoryFailure {
    const ALL: [Self; 5] = [
        Self::Unavailable,
        Self::Full,
        Self::Gone,
        Self::Corrupt,
        Self::Damaged,
    ];

    /// The `kind` a failed history call is counted under.
    pub(crate) fn of(error: &gapless_history::HistoryError) -> Self {
        use gapless_history::HistoryError;
        match error {
            HistoryError::Unavailable(_) => Self::Unavailable,
            HistoryError::Full(_) => Self::Full,
            HistoryError::Gone => Self::Gone,
            HistoryError::Corrupt(_) => Self::Corrupt,
            HistoryError::Damaged(_) => Self::Damaged,
        }
    }
}

impl EncodeLabelValue for HistoryFailure {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> fmt::Result {
        encoder.write_str(match self {
            Self::Unavailable => "unavailable",
            Self::Full => "full",
            Self::Gone => "gone",
            Self::Corrupt => "corrupt",
            Self::Damaged => "damaged",
        })
    }
}

/// Where a refusal happened.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Stage {
    /// `GET /session/{id}/events` with a cursor.
    SseResume,
    /// `POST /session/{id}/upgrade` or the WebSocket handshake.
    Migration,
}

/// `{kind="..."}` of `gapless_limits_tripped_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabel {
    kind: Limit,
}

/// `{kind="..."}` of `gapless_history_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HistoryLabel {
    kind: HistoryFailure,
}

/// `{reason="..."}`: a refusal's own code.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// One of each refusal the engine answers, to list every reason at zero.
/// The match in [`every_refusal_listed`] stops compiling when the engine
/// adds a refusal, so this list cannot silently fall behind.
fn one_of_each_refusal() -> [Refusal; 7] {
    [
        Refusal::GapNotCovered {
            cursor: 0,
            first_retained: 0,
            published: 0,
            evicted: 0,
        },
        Refusal::CursorAhead {
            cursor: 0,
            sent: 0,
            published: 0,
        },
        Refusal::ForeignEpoch {
            cursor: 0,
            cursor_epoch: 0,
            epoch: 0,
        },
        Refusal::CursorMismatch {
            cursor: 0,
            acked: 0,
        },
        Refusal::MigrationInProgress,
        Refusal::BadTicket,
        Refusal::NotDrained {
            cursor: 0,
            published: 0,
        },
    ]
}

/// Exhaustive over [`Refusal`]: a new refusal is a compile error here until
/// [`one_of_each_refusal`] lists it.
#[allow(dead_code)]
fn every_refusal_listed(refusal: &Refusal) {
    match refusal {
        Refusal::GapNotCovered { .. }
        | Refusal::CursorAhead { .. }
        | Refusal::ForeignEpoch { .. }
        | Refusal::CursorMismatch { .. }
        | Refusal::MigrationInProgress
        | Refusal::BadTicket
        | Refusal::NotDrained { .. } => {}
    }
}

/// What the session rings hold at scrape time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RingTotals {
    /// Live sessions.
    pub(crate) sessions: u64,
    /// Live Durable Streams (soft-deleted ones with live forks included).
    pub(crate) streams: u64,
    /// Events evicted from the live rings.
    pub(crate) evicted: u64,
    /// Emits that waited at the wrap, in the live rings.
    pub(crate) wrap_waits: u64,
    /// Bytes the live rings reserve (each its configured footprint).
    pub(crate) reserved_bytes: u64,
    /// The memory budget in bytes (`u64::MAX`: none).
    pub(crate) budget_bytes: u64,
    /// Emits waiting for the shared history now (`--redis`).
    pub(crate) emits_waiting: u64,
}

/// Reads [`RingTotals`] at scrape time.
type ReadRings = Box<dyn Fn() -> RingTotals + Send + Sync>;

/// The collector of what the rings hold: live rings summed at scrape time,
/// plus what deleted rings held when they were freed.
struct Rings {
    read: ReadRings,
    evicted_in_deleted: Counter,
    wrap_waits_in_deleted: Counter,
}

impl fmt::Debug for Rings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rings").finish_non_exhaustive()
    }
}

impl Collector for Rings {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let live = (self.read)();
        for (name, help, value) in [
            ("gapless_sessions", "Live sessions", live.sessions),
            (
                "gapless_streams",
                "Live Durable Streams (their rings reserve from the same budget as sessions)",
                live.streams,
            ),
            (
                "gapless_ring_memory_reserved_bytes",
                "Bytes the live session rings reserve (each its configured footprint)",
                live.reserved_bytes,
            ),
            (
                "gapless_ring_memory_budget_bytes",
                "The memory budget session creation respects (--memory-budget)",
                live.budget_bytes,
            ),
            (
                "gapless_emits_waiting",
                "Emits waiting for the shared history (--redis) now; at most --max-queued-emits",
                live.emits_waiting,
            ),
        ] {
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        for (name, help, value) in [
            (
                "gapless_events_evicted",
                "Events evicted from session rings",
                self.evicted_in_deleted.get() + live.evicted,
            ),
            (
                "gapless_emit_wrap_waits",
                "Emits that waited at the wrap for an emitter a window behind (size rings so this stays near zero)",
                self.wrap_waits_in_deleted.get() + live.wrap_waits,
            ),
        ] {
            let counter = ConstCounter::new(value);
            counter.encode(encoder.encode_descriptor(name, help, None, counter.metric_type())?)?;
        }
        Ok(())
    }
}

/// The disk history's figures at scrape time (`--data-dir`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DiskTotals {
    /// The store's size on disk (journals and tables).
    pub(crate) bytes: u64,
    /// Logs it holds (sessions and streams).
    pub(crate) logs: u64,
    /// Writes acknowledged.
    pub(crate) writes: u64,
    /// Batches written to the journal (a group of writes each).
    pub(crate) batches: u64,
    /// Of those, the batches the writer that awaited them wrote itself
    /// (no hand-off to the committer thread).
    pub(crate) batches_inline: u64,
    /// `fdatasync` calls.
    pub(crate) fsyncs: u64,
    /// Their total duration, in microseconds.
    pub(crate) fsync_micros: u64,
}

/// The collector of the disk history's figures.
struct DiskLog {
    read: Box<dyn Fn() -> DiskTotals + Send + Sync>,
}

impl fmt::Debug for DiskLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiskLog").finish_non_exhaustive()
    }
}

impl Collector for DiskLog {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let disk = (self.read)();
        for (name, help, value) in [
            (
                "gapless_disk_log_bytes",
                "Bytes the disk history (--data-dir) takes on disk: journals and tables",
                disk.bytes,
            ),
            (
                "gapless_disk_log_logs",
                "Logs the disk history holds (sessions and Durable Streams)",
                disk.logs,
            ),
        ] {
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        for (name, help, value) in [
            (
                "gapless_disk_log_writes",
                "Writes the disk history acknowledged (appends, emits, meta updates, creates, deletes)",
                disk.writes,
            ),
            (
                "gapless_disk_log_batches",
                "Group commits: batches of writes the disk history wrote to its journal",
                disk.batches,
            ),
            (
                "gapless_disk_log_batches_inline",
                "Of those batches, the ones written by the request that awaited them (no batch was being written), not by the committer thread",
                disk.batches_inline,
            ),
            (
                "gapless_disk_log_fsyncs",
                "fdatasync calls of the disk history's group commit (--fsync always)",
                disk.fsyncs,
            ),
        ] {
            let counter = ConstCounter::new(value);
            counter.encode(encoder.encode_descriptor(name, help, None, counter.metric_type())?)?;
        }
        let seconds = ConstCounter::new(disk.fsync_micros as f64 / 1e6);
        seconds.encode(encoder.encode_descriptor(
            "gapless_disk_log_fsync",
            "Time spent in the group commit's fdatasync calls (divided by the fsyncs: the commit latency)",
            Some(&prometheus_client::registry::Unit::Seconds),
            seconds.metric_type(),
        )?)?;
        Ok(())
    }
}

/// The server's metrics. Counters are `prometheus-client` handles: count
/// with `.inc()` / `.inc_by(n)`; [`Metrics::encode`] renders them all.
pub(crate) struct Metrics {
    registry: Registry,
    pub(crate) sessions_created: Counter,
    pub(crate) sessions_deleted: Counter,
    /// Sessions ended by the idle timeout.
    pub(crate) sessions_expired: Counter,
    /// Sessions this instance loaded from the shared history.
    pub(crate) sessions_loaded: Counter,
    pub(crate) events_emitted: Counter,
    pub(crate) events_replayed: Counter,
    pub(crate) events_streamed: Counter,
    pub(crate) migrations_granted: Counter,
    pub(crate) migrations_completed: Counter,
    pub(crate) lapped_readers: Counter,
    /// Local replicas dropped and loaded afresh because the history had
    /// trimmed past them.
    pub(crate) replicas_reloaded: Counter,
    /// Evictions of rings already freed (live rings are summed at scrape).
    pub(crate) evicted_in_deleted: Counter,
    /// Wrap waits of rings already freed (live rings are summed at scrape).
    pub(crate) wrap_waits_in_deleted: Counter,
    limits_tripped: Family<LimitLabel, Counter>,
    history_errors: Family<HistoryLabel, Counter>,
    migrations_refused: Family<ReasonLabel, Counter>,
    resumes_refused: Family<ReasonLabel, Counter>,
}

impl Metrics {
    /// The same metrics, with the disk history's figures `read` reads at
    /// each scrape (`--data-dir`).
    pub(crate) fn with_disk_log(
        mut self,
        read: impl Fn() -> DiskTotals + Send + Sync + 'static,
    ) -> Self {
        self.registry.register_collector(Box::new(DiskLog {
            read: Box::new(read),
        }));
        self
    }

    /// Metrics whose ring totals `read_rings` reads at each scrape.
    pub(crate) fn new(read_rings: impl Fn() -> RingTotals + Send + Sync + 'static) -> Self {
        let mut registry = Registry::default();
        let mut counter = |name: &str, help: &str| {
            let counter = Counter::default();
            registry.register(name, help, counter.clone());
            counter
        };
        let sessions_created = counter("gapless_sessions_created", "Sessions created");
        let sessions_deleted = counter("gapless_sessions_deleted", "Sessions deleted");
        let events_emitted = counter(
            "gapless_events_emitted",
            "Events emitted into session rings",
        );
        let events_replayed = counter(
            "gapless_events_replayed",
            "Events sent as replay after a resume or migration",
        );
        let events_streamed = counter("gapless_events_streamed", "Events sent live");
        let migrations_granted = counter(
            "gapless_migrations_granted",
            "Upgrades granted (POST upgrade answered 200)",
        );
        let migrations_completed = counter(
            "gapless_migrations_completed",
            "WebSocket handshakes that attached",
        );
        let lapped_readers = counter(
            "gapless_lapped_readers",
            "Streams ended with a gap because the ring lapped them",
        );
        let sessions_expired = counter(
            "gapless_sessions_expired",
            "Sessions ended by the idle timeout",
        );
        let sessions_loaded = counter(
            "gapless_sessions_loaded",
            "Sessions loaded from the shared history (--redis)",
        );
        let replicas_reloaded = counter(
            "gapless_replicas_reloaded",
            "Local replicas reloaded because the shared history trimmed past them",
        );
        let history_errors = Family::<HistoryLabel, Counter>::default();
        for kind in HistoryFailure::ALL {
            drop(history_errors.get_or_create(&HistoryLabel { kind }));
        }
        registry.register(
            "gapless_history_errors",
            "Failed calls to the shared history, by kind",
            history_errors.clone(),
        );
        let limits_tripped = Family::<LimitLabel, Counter>::default();
        for kind in Limit::ALL {
            drop(limits_tripped.get_or_create(&LimitLabel { kind }));
        }
        registry.register(
            "gapless_limits_tripped",
            "Limits that tripped, by kind",
            limits_tripped.clone(),
        );
        let refused = |registry: &mut Registry, name: &str, help: &str| {
            let family = Family::<ReasonLabel, Counter>::default();
            for refusal in one_of_each_refusal() {
                drop(family.get_or_create(&ReasonLabel {
                    reason: refusal.code(),
                }));
            }
            registry.register(name, help, family.clone());
            family
        };
        let migrations_refused = refused(
            &mut registry,
            "gapless_migrations_refused",
            "Upgrades refused, by reason",
        );
        let resumes_refused = refused(
            &mut registry,
            "gapless_resumes_refused",
            "SSE resumes refused, by reason",
        );
        let evicted_in_deleted = Counter::default();
        let wrap_waits_in_deleted = Counter::default();
        registry.register_collector(Box::new(Rings {
            read: Box::new(read_rings),
            evicted_in_deleted: evicted_in_deleted.clone(),
            wrap_waits_in_deleted: wrap_waits_in_deleted.clone(),
        }));
        Self {
            registry,
            sessions_created,
            sessions_deleted,
            sessions_expired,
            sessions_loaded,
            events_emitted,
            events_replayed,
            events_streamed,
            migrations_granted,
            migrations_completed,
            lapped_readers,
            replicas_reloaded,
            evicted_in_deleted,
            wrap_waits_in_deleted,
            limits_tripped,
            history_errors,
            migrations_refused,
            resumes_refused,
        }
    }

    /// Counts one trip of `limit`.
    pub(crate) fn tripped(&self, limit: Limit) {
        self.limits_tripped
            .get_or_create(&LimitLabel { kind: limit })
            .inc();
    }

    /// Counts one failed call to the shared history.
    pub(crate) fn history_failed(&self, kind: HistoryFailure) {
        self.history_errors
            .get_or_create(&HistoryLabel { kind })
            .inc();
    }

    /// Counts one refusal at `stage`, under the refusal's own code.
    pub(crate) fn refused(&self, stage: Stage, refusal: &Refusal) {
        let family = match stage {
            Stage::SseResume => &self.resumes_refused,
            Stage::Migration => &self.migrations_refused,
        };
        family
            .get_or_create(&ReasonLabel {
                reason: refusal.code(),
            })
            .inc();
    }

    /// The Prometheus text exposition (version 0.0.4) of every metric.
    pub(crate) fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail, and every family's encoder is
        // infallible for it.
        if let Err(error) =
            prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry)
        {
            tracing::error!(%error, "encoding /metrics");
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::{Limit, Metrics, RingTotals, Stage};
    use gapless::session::Refusal;

    fn sample(text: &str, line_start: &str) -> Option<u64> {
        text.lines()
            .find_map(|line| line.strip_prefix(line_start)?.trim().parse().ok())
    }

    #[test]
    fn families_list_every_label_at_zero_and_count_by_the_refusals_own_code() {
        let metrics = Metrics::new(|| RingTotals {
            sessions: 3,
            streams: 2,
            evicted: 5,
            wrap_waits: 1,
            reserved_bytes: 300,
            budget_bytes: 1000,
            emits_waiting: 0,
        });
        metrics.evicted_in_deleted.inc_by(2);
        metrics.refused(Stage::Migration, &Refusal::BadTicket);
        metrics.tripped(Limit::BodyReadTimeout);
        let text = metrics.encode();
        assert_eq!(sample(&text, "gapless_sessions "), Some(3));
        assert_eq!(sample(&text, "gapless_streams "), Some(2));
        assert_eq!(
            sample(&text, "gapless_ring_memory_reserved_bytes "),
            Some(300)
        );
        assert_eq!(
            sample(&text, "gapless_ring_memory_budget_bytes "),
            Some(1000)
        );
        assert_eq!(sample(&text, "gapless_events_evicted_total "), Some(7));
        assert_eq!(sample(&text, "gapless_emit_wrap_waits_total "), Some(1));
        assert_eq!(
            sample(
                &text,
                "gapless_migrations_refused_total{reason=\"bad_ticket\"} "
            ),
            Some(1)
        );
        assert_eq!(
            sample(
                &text,
                "gapless_resumes_refused_total{reason=\"not_drained\"} "
            ),
            Some(0)
        );
        assert_eq!(
            sample(
                &text,
                "gapless_limits_tripped_total{kind=\"body_read_timeout\"} "
            ),
            Some(1)
        );
        for limit in Limit::ALL {
            let line = format!(
                "gapless_limits_tripped_total{{kind=\"{}\"}} ",
                limit.label()
            );
            assert!(sample(&text, &line).is_some(), "{line} missing:\n{text}");
        }
        assert!(text.contains("# TYPE gapless_sessions_created_total counter\n"));
    }
}
