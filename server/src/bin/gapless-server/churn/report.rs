//! The churn run's tally and report: what every task counts, the figures
//! printed at the end, and the checks that decide whether the run passed.

use gapless_client::{ClientError, Refusal};
use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

/// Counters shared by every task.
#[derive(Default)]
pub(super) struct Tally {
    pub(super) emitted: AtomicU64,
    pub(super) delivered: AtomicU64,
    pub(super) resumes: AtomicU64,
    pub(super) migrations_granted: AtomicU64,
    pub(super) echoed_refused: AtomicU64,
    pub(super) echoed_granted: AtomicU64,
    pub(super) stale_attempts: AtomicU64,
    pub(super) stale_gaps: AtomicU64,
    pub(super) gaps_reported: AtomicU64,
    pub(super) session_resets: AtomicU64,
    pub(super) emits_to_replaced: AtomicU64,
    pub(super) silent_gaps: AtomicU64,
    pub(super) corrupt_payloads: AtomicU64,
    pub(super) instance_hops: AtomicU64,
    pub(super) errors: Mutex<BTreeMap<&'static str, u64>>,
    pub(super) refusals: Mutex<BTreeMap<String, u64>>,
    pub(super) replay_sse: Mutex<Vec<Duration>>,
    pub(super) replay_ws: Mutex<Vec<Duration>>,
}

impl Tally {
    pub(super) fn refused(&self, refusal: &Refusal) {
        if let Ok(mut map) = self.refusals.lock() {
            *map.entry(refusal.code().to_string()).or_default() += 1;
        }
    }

    /// Counts an error of `kind`; every one fails the run.
    pub(super) fn error(&self, kind: &'static str) {
        if let Ok(mut map) = self.errors.lock() {
            *map.entry(kind).or_default() += 1;
        }
    }

    /// Counts a failed call of a client, by [`error_kind`].
    pub(super) fn failed(&self, error: &ClientError) {
        self.error(error_kind(error));
    }
}

/// The kind of a failed call, for the error tally. Every kind fails the run,
/// because under this churn no call is expected to fail:
/// - the deliberate drops happen on the client side (the stream is dropped
///   and never read again), so they cannot surface as a client error; the
///   server's side of them is not tallied;
/// - the only refusal a true cursor can draw here is `gap_not_covered`
///   (handled, not an error); `cursor_ahead` is expected only for the echoed
///   cursors, which are tallied apart;
/// - the one legitimate failure, an emit racing a session reset (`404` for
///   the session just replaced), is counted apart as `emits_to_replaced`.
pub(super) fn error_kind(error: &ClientError) -> &'static str {
    match error {
        ClientError::Http(_) | ClientError::WebSocket(_) | ClientError::Timeout { .. } => {
            "transport"
        }
        ClientError::Refused(_) => "unexpected refusal",
        // Tallied as silent gaps where they can occur; never expected here.
        ClientError::SilentGap(_) | ClientError::FirstFrame { .. } => "misplaced silent gap",
        _ => "unexpected answer",
    }
}

/// What the run found.
#[derive(Clone, Debug)]
pub struct ChurnReport {
    /// Wall time of the run.
    pub elapsed: Duration,
    /// Sessions driven.
    pub sessions: usize,
    /// Server instances (2 with `--redis`, sharing the sessions).
    pub instances: usize,
    /// Times a client moved to another instance before a resume or a
    /// migration (with `--redis`).
    pub instance_hops: u64,
    /// Events the producers emitted (202).
    pub emitted: u64,
    /// Emits answered `404` because a reset had just replaced the session
    /// (the producer raced the reset): expected, not an error. Any other
    /// failed emit is in `errors`.
    pub emits_to_replaced: u64,
    /// Events the clients accepted (each exactly `cursor + 1`).
    pub delivered: u64,
    /// SSE (re)connects.
    pub resumes: u64,
    /// Migrations to WebSocket granted with the true cursor.
    pub migrations_granted: u64,
    /// Refusals by protocol code, over every resume and upgrade.
    pub refusals: BTreeMap<String, u64>,
    /// Echoed (server-emitted) cursors refused as `cursor_ahead`.
    pub echoed_refused: u64,
    /// Echoed cursors the server granted. An echoed cursor is presented only
    /// once the server's own figures show it beyond `sent` with no transport
    /// attached (so `sent` cannot move): a grant is the server accepting an
    /// ID it never sent. Must be 0.
    pub echoed_granted: u64,
    /// Stale resumes: SSE resumes presented after the server's figures showed
    /// that the ring had turned over past the client's cursor.
    pub stale_attempts: u64,
    /// Stale resumes answered with a reported gap (`409 gap_not_covered`):
    /// must be all of them, since the cursor's successor was evicted.
    pub stale_gaps: u64,
    /// Gaps the server reported (409, `event: gap`, close 4409).
    pub gaps_reported: u64,
    /// Sessions re-created after an unrecoverable reported gap.
    pub session_resets: u64,
    /// Holes, duplicates or wrong first frames seen by the clients: must be 0.
    pub silent_gaps: u64,
    /// Payloads whose content did not match what was emitted: must be 0.
    pub corrupt_payloads: u64,
    /// Transport errors, stalls and unexpected answers, by kind (see
    /// [`error_kind`]): must be none.
    pub errors: BTreeMap<&'static str, u64>,
    /// The time from an SSE resume's request to its first event, over the
    /// resumes whose first event was already published when the request went
    /// out (so it came from the ring: a replay, not a wait for the producer).
    pub replay_sse: Latencies,
    /// The time from a migration's `POST upgrade` to the first WebSocket
    /// frame (through the handshake), over the grants with a non-empty
    /// replay (`replay_from <= replay_to`).
    pub replay_ws: Latencies,
    /// Preallocated bytes per session ring.
    pub memory_per_session: usize,
}

/// p50 and p99 of a set of samples.
#[derive(Clone, Copy, Debug, Default)]
pub struct Latencies {
    /// Samples taken.
    pub samples: usize,
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
}

impl Latencies {
    pub(super) fn of(samples: &Mutex<Vec<Duration>>) -> Self {
        let mut sorted = samples.lock().map(|l| l.clone()).unwrap_or_default();
        sorted.sort_unstable();
        Self {
            samples: sorted.len(),
            p50: percentile(&sorted, 0.5),
            p99: percentile(&sorted, 0.99),
        }
    }
}

impl std::fmt::Display for Latencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "p50 {:.2} ms, p99 {:.2} ms",
            self.p50.as_secs_f64() * 1e3,
            self.p99.as_secs_f64() * 1e3
        )
    }
}

/// One condition the run must meet.
#[derive(Clone, Debug)]
pub struct Check {
    /// What is checked.
    pub name: &'static str,
    /// Whether it held.
    pub passed: bool,
    /// The figure and the requirement.
    pub detail: String,
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.name, self.detail)
    }
}

impl ChurnReport {
    /// Every condition of a passing run. Besides no silent gap and no
    /// corrupt payload, the run must have exercised each scenario it claims
    /// to (so it cannot pass vacuously) and seen no error at all.
    pub fn checks(&self) -> Vec<Check> {
        let check = |name, passed, detail: String| Check {
            name,
            passed,
            detail,
        };
        let errors: u64 = self.errors.values().sum();
        let kinds: Vec<String> = self
            .errors
            .iter()
            .map(|(kind, count)| format!("{kind} {count}"))
            .collect();
        vec![
            check(
                "no silent gaps",
                self.silent_gaps == 0,
                format!("{} (need 0)", self.silent_gaps),
            ),
            check(
                "no corrupt payloads",
                self.corrupt_payloads == 0,
                format!("{} (need 0)", self.corrupt_payloads),
            ),
            check(
                "events delivered",
                self.delivered > 0,
                format!("{} (need > 0)", self.delivered),
            ),
            check(
                "migrations granted",
                self.migrations_granted > 0,
                format!("{} (need > 0)", self.migrations_granted),
            ),
            check(
                "echoed cursors refused",
                self.echoed_refused > 0,
                format!("{} as cursor_ahead (need > 0)", self.echoed_refused),
            ),
            check(
                "no echoed cursor granted",
                self.echoed_granted == 0,
                format!("{} (need 0)", self.echoed_granted),
            ),
            check(
                "stale cursors reported as gaps",
                self.stale_gaps > 0 && self.stale_gaps == self.stale_attempts,
                format!(
                    "{} of {} stale resumes (need > 0, and all)",
                    self.stale_gaps, self.stale_attempts
                ),
            ),
            check(
                "clients moved between instances",
                self.instances < 2 || self.instance_hops > 0,
                format!(
                    "{} moves across {} instance(s) (need > 0 with several)",
                    self.instance_hops, self.instances
                ),
            ),
            check(
                "no transport errors",
                errors == 0,
                if kinds.is_empty() {
                    "0 (need 0)".to_string()
                } else {
                    format!("{errors}: {} (need 0)", kinds.join(", "))
                },
            ),
        ]
    }

    /// The checks that did not hold.
    pub fn failures(&self) -> Vec<Check> {
        self.checks().into_iter().filter(|c| !c.passed).collect()
    }

    /// Whether every check held.
    pub fn passed(&self) -> bool {
        self.checks().iter().all(|c| c.passed)
    }
}

impl std::fmt::Display for ChurnReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        writeln!(
            f,
            "churn report: {} sessions, {} instance(s), {:.1} s",
            self.sessions, self.instances, secs
        )?;
        if self.instances > 1 {
            writeln!(
                f,
                "  moves to another instance {} (each with the client's own cursor)",
                self.instance_hops
            )?;
        }
        writeln!(
            f,
            "  events emitted        {} ({:.0}/s)",
            self.emitted,
            self.emitted as f64 / secs
        )?;
        writeln!(
            f,
            "  emits after a reset   {} (404: session just replaced; expected)",
            self.emits_to_replaced
        )?;
        writeln!(
            f,
            "  events delivered      {} ({:.0}/s)",
            self.delivered,
            self.delivered as f64 / secs
        )?;
        writeln!(f, "  SSE resumes           {}", self.resumes)?;
        writeln!(f, "  migrations granted    {}", self.migrations_granted)?;
        for (code, count) in &self.refusals {
            writeln!(f, "  refused {code:<22} {count}")?;
        }
        writeln!(
            f,
            "  echoed cursors        {} refused (cursor_ahead), {} granted",
            self.echoed_refused, self.echoed_granted
        )?;
        writeln!(
            f,
            "  stale resumes         {} ({} reported a gap)",
            self.stale_attempts, self.stale_gaps
        )?;
        writeln!(
            f,
            "  gaps reported         {} (never silent; {} sessions re-created)",
            self.gaps_reported, self.session_resets
        )?;
        let errors: u64 = self.errors.values().sum();
        write!(f, "  transport errors      {errors}")?;
        for (i, (kind, count)) in self.errors.iter().enumerate() {
            let open = if i == 0 { " (" } else { ", " };
            write!(f, "{open}{kind} {count}")?;
        }
        writeln!(f, "{}", if self.errors.is_empty() { "" } else { ")" })?;
        writeln!(
            f,
            "  first replayed event  SSE resume {} ({} resumes)",
            self.replay_sse, self.replay_sse.samples
        )?;
        writeln!(
            f,
            "    (request → event)   WS migration {} ({} migrations)",
            self.replay_ws, self.replay_ws.samples
        )?;
        writeln!(
            f,
            "  memory per session    {} bytes (preallocated ring)",
            self.memory_per_session
        )?;
        writeln!(f, "  corrupt payloads      {}", self.corrupt_payloads)?;
        writeln!(f, "  SILENT GAPS           {}", self.silent_gaps)?;
        let checks = self.checks();
        let passed = checks.iter().filter(|c| c.passed).count();
        write!(
            f,
            "  checks                {passed} of {} passed",
            checks.len()
        )
    }
}

pub(super) fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}
