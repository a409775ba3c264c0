//! The churn run: the reference server under load, driven in-process over
//! loopback by clients that read over SSE, drop, resume, and migrate to
//! WebSocket with true, stale (evicted) and echoed cursors. Every client
//! checks every event with a [`GapDetector`](gapless::session::GapDetector).
//!
//! The run passes only if it exercised what it claims to and nothing went
//! wrong: see [`ChurnReport::checks`]. A run that delivered nothing, never
//! migrated, never had an echoed cursor refused or never presented an
//! evicted cursor fails, however few silent gaps it saw.

use gapless_client::{Client, ClientError, MigratingClient, Next, Refusal};
use gapless_server::{spawn, ServerConfig};
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write as _};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the run does.
#[derive(Clone, Debug)]
pub struct ChurnConfig {
    /// Sessions, each with one producer and one client.
    pub sessions: usize,
    /// How long clients churn.
    pub duration: Duration,
    /// Events per second emitted into each session.
    pub rate: f64,
    /// Events per session ring (small, so stale cursors really are evicted).
    pub ring_events: usize,
    /// Bytes per session ring.
    pub ring_bytes: usize,
    /// Payload size in bytes (approximate: JSON framing adds a little).
    pub payload: usize,
}

impl Default for ChurnConfig {
    fn default() -> Self {
        Self {
            sessions: 24,
            duration: Duration::from_secs(30),
            rate: 200.0,
            ring_events: 512,
            ring_bytes: 256 << 10,
            payload: 128,
        }
    }
}

/// Counters shared by every task.
#[derive(Default)]
struct Tally {
    emitted: AtomicU64,
    delivered: AtomicU64,
    resumes: AtomicU64,
    migrations_granted: AtomicU64,
    echoed_refused: AtomicU64,
    echoed_granted: AtomicU64,
    stale_attempts: AtomicU64,
    stale_gaps: AtomicU64,
    gaps_reported: AtomicU64,
    session_resets: AtomicU64,
    emits_to_replaced: AtomicU64,
    silent_gaps: AtomicU64,
    corrupt_payloads: AtomicU64,
    errors: Mutex<BTreeMap<&'static str, u64>>,
    refusals: Mutex<BTreeMap<String, u64>>,
    replay_sse: Mutex<Vec<Duration>>,
    replay_ws: Mutex<Vec<Duration>>,
}

impl Tally {
    fn refused(&self, refusal: &Refusal) {
        if let Ok(mut map) = self.refusals.lock() {
            *map.entry(refusal.code().to_string()).or_default() += 1;
        }
    }

    /// Counts an error of `kind`; every one fails the run.
    fn error(&self, kind: &'static str) {
        if let Ok(mut map) = self.errors.lock() {
            *map.entry(kind).or_default() += 1;
        }
    }

    /// Counts a failed call of a client, by [`error_kind`].
    fn failed(&self, error: &ClientError) {
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
fn error_kind(error: &ClientError) -> &'static str {
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
    fn of(samples: &Mutex<Vec<Duration>>) -> Self {
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
        writeln!(f, "churn report: {} sessions, {:.1} s", self.sessions, secs)?;
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

/// A small deterministic generator (xorshift64*) per client.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What a client does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    /// Resume over SSE with the true cursor, read a little, drop.
    Resume,
    /// Migrate to WebSocket with the true cursor, read a little, close.
    Migrate,
    /// Present the server's last emitted ID as a cursor (the echoed-ID case).
    Echo,
    /// Go quiet until the ring has turned over past the cursor (checked on
    /// the server's figures), then resume with that evicted cursor.
    Stale,
}

impl Action {
    fn pick(rng: &mut Rng) -> Self {
        match rng.below(100) {
            0..45 => Self::Resume,
            45..80 => Self::Migrate,
            80..92 => Self::Echo,
            _ => Self::Stale,
        }
    }
}

/// The scenarios each lane must exercise, so that the checks on them do not
/// pass or fail by the luck of the draw in a short run: until each has
/// happened on this lane, every other action is the first one still missing
/// (the others stay random, so the mix keeps its churn).
#[derive(Default)]
struct Tour {
    /// A migration was granted.
    migrated: bool,
    /// An echoed cursor was presented and answered.
    echoed: bool,
    /// A stale cursor was presented and answered.
    stale: bool,
    turn: u64,
}

impl Tour {
    fn next(&mut self, rng: &mut Rng) -> Action {
        self.turn += 1;
        let missing = if !self.migrated {
            Some(Action::Migrate)
        } else if !self.echoed {
            Some(Action::Echo)
        } else if !self.stale {
            Some(Action::Stale)
        } else {
            None
        };
        match missing {
            Some(action) if self.turn % 2 == 0 => action,
            _ => Action::pick(rng),
        }
    }
}

/// A payload that carries its own check: `{"k":K,"n":N,"pad":"..."}` where
/// the pad is derived from K and N.
fn payload(session: usize, n: u64, size: usize) -> serde_json::Value {
    let pad_len = size.saturating_sub(32);
    let pad: String = (0..pad_len)
        .map(|i| char::from(b'a' + ((i as u64 + n + session as u64) % 26) as u8))
        .collect();
    serde_json::json!({ "k": session, "n": n, "pad": pad })
}

fn payload_is_intact(data: &str, size: usize) -> bool {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(data) else {
        return false;
    };
    match (value["k"].as_u64(), value["n"].as_u64()) {
        (Some(k), Some(n)) => value == payload(k as usize, n, size),
        _ => false,
    }
}

/// The session a producer and a client share; replaced after a reset.
type Shared = Arc<Mutex<String>>;

fn current(shared: &Shared) -> String {
    shared.lock().map(|s| s.clone()).unwrap_or_default()
}

/// What one session's producer and client share.
#[derive(Clone)]
struct Lane {
    /// The session's index (it tags the payloads).
    k: usize,
    client: Client,
    /// The session ID, replaced when the client re-creates the session.
    session: Shared,
    /// The ID the server returned for the producer's latest emit: what a
    /// buggy client would echo.
    last_id: Arc<Mutex<Option<gapless::EventId>>>,
    config: ChurnConfig,
    tally: Arc<Tally>,
}

async fn producer(lane: Lane, stop: Arc<AtomicBool>) {
    let Lane {
        k,
        client,
        session: shared,
        last_id,
        config,
        tally,
    } = lane;
    let period = Duration::from_secs_f64(1.0 / config.rate.max(0.001));
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        ticker.tick().await;
        let session = current(&shared);
        match client.emit(&session, &payload(k, n, config.payload)).await {
            Ok(id) => {
                tally.emitted.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut last) = last_id.lock() {
                    *last = Some(id);
                }
            }
            // The client re-created the session between the lookup and the
            // emit, and deleted the old one: expected under churn.
            Err(ClientError::NoSuchSession) if current(&shared) != session => {
                tally.emits_to_replaced.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => {
                tracing::warn!(%error, "churn: emit failed");
                tally.error("emit failed");
            }
        }
        n += 1;
    }
}

/// The producer's latest event ID in `epoch`, if any.
fn latest(last_id: &Mutex<Option<gapless::EventId>>, epoch: u64) -> Option<u64> {
    let last = last_id.lock().ok().and_then(|l| *l)?;
    (last.epoch == epoch).then_some(last.seq)
}

/// Reads up to `count` events from the open transport, checking each. If
/// `replay` is given, the first event is a replayed one and the time since
/// the request is recorded there. Returns false when the transport ended.
async fn read(
    mc: &mut MigratingClient,
    count: u64,
    config: &ChurnConfig,
    tally: &Tally,
    replay: Option<(Instant, &Mutex<Vec<Duration>>)>,
) -> bool {
    let mut replay = replay;
    for _ in 0..count {
        match tokio::time::timeout(Duration::from_secs(5), mc.next()).await {
            Ok(Ok(Next::Event(event))) => {
                if let Some((requested, samples)) = replay.take() {
                    if let Ok(mut samples) = samples.lock() {
                        samples.push(requested.elapsed());
                    }
                }
                tally.delivered.fetch_add(1, Ordering::Relaxed);
                if !payload_is_intact(&event.data, config.payload) {
                    tally.corrupt_payloads.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(Ok(Next::Gap(_))) => {
                tally.gaps_reported.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            Ok(Ok(Next::Closed(_))) => return false,
            Ok(Err(ClientError::SilentGap(_) | ClientError::FirstFrame { .. })) => {
                tally.silent_gaps.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "churn: reading a transport failed");
                tally.failed(&error);
                return false;
            }
            // Nothing for 5 s at the configured rate: a stall, reported.
            Err(_) => {
                tracing::warn!("churn: no event for 5 s on an open transport");
                tally.error("stall");
                mc.drop_connection();
                return false;
            }
        }
    }
    true
}

/// Handles a failed resume or upgrade with the client's true cursor. A
/// reported gap is accepted and, if the session can no longer be resumed
/// from any cursor the client holds, the session is re-created (an
/// explicit, counted reset). Anything else is an error: a true cursor can
/// only be refused for a gap.
async fn after_refusal(
    client: &Client,
    mc: &mut MigratingClient,
    shared: &Shared,
    error: ClientError,
    tally: &Tally,
) -> Result<(), ClientError> {
    if let Some(refusal) = error.refusal() {
        tally.refused(refusal);
    }
    if !matches!(error, ClientError::Refused(Refusal::GapNotCovered { .. })) {
        tracing::warn!(%error, "churn: resume or upgrade with the true cursor failed");
        tally.failed(&error);
        return Ok(());
    }
    tally.gaps_reported.fetch_add(1, Ordering::Relaxed);
    if let Some(gap) = mc.gaps().last().cloned() {
        let _ = mc.accept_gap(&gap);
    }
    // Resume after the reported gap. If the ring moved on again meanwhile,
    // the server reports the gap afresh, and then only a fresh session can
    // continue.
    match mc.follow_sse().await {
        Ok(()) => Ok(()),
        Err(error) => {
            if let Some(refusal) = error.refusal() {
                tally.refused(refusal);
            }
            if matches!(error, ClientError::Refused(Refusal::GapNotCovered { .. })) {
                tally.gaps_reported.fetch_add(1, Ordering::Relaxed);
            } else {
                tracing::warn!(%error, "churn: resume after an accepted gap failed");
                tally.failed(&error);
            }
            let old = current(shared);
            let created = client.create_session().await?;
            if let Ok(mut session) = shared.lock() {
                *session = created.session.clone();
            }
            let _ = client.delete(&old).await;
            *mc = MigratingClient::new(client.clone(), &created);
            tally.session_resets.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }
}

async fn churn_client(
    lane: Lane,
    created: gapless_client::Created,
    deadline: Instant,
) -> Result<(), ClientError> {
    let Lane {
        k,
        client,
        session: shared,
        last_id,
        config,
        tally,
    } = lane;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (k as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9));
    let mut tour = Tour::default();
    let mut mc = MigratingClient::new(client.clone(), &created);
    while Instant::now() < deadline {
        let action = tour.next(&mut rng);
        // Set when a transport opened: when its request went out and where
        // to record the time to its first event if that event is a replay.
        let mut replay = None;
        let outcome = match action {
            Action::Resume => {
                let cursor = mc.cursor();
                // Published before the request: the first event comes from
                // the ring.
                let replays = latest(&last_id, cursor.epoch).is_some_and(|p| p > cursor.seq);
                let requested = Instant::now();
                mc.follow_sse().await.map(|()| {
                    replay = replays.then_some((requested, &tally.replay_sse));
                    true
                })
            }
            Action::Migrate => {
                let requested = Instant::now();
                mc.migrate_to_websocket().await.map(|grant| {
                    tally.migrations_granted.fetch_add(1, Ordering::Relaxed);
                    tour.migrated = true;
                    replay = (grant.replay_from <= grant.replay_to)
                        .then_some((requested, &tally.replay_ws));
                    true
                })
            }
            Action::Echo => {
                // Echo the server's last emitted ID as if it were our cursor
                // (the echoed-ID case), once the server has stopped sending to us.
                let session = mc.session().to_string();
                match echoed_cursor(&client, &session, &last_id).await {
                    Ok(Some(echoed)) => {
                        tour.echoed = true;
                        match client.upgrade(mc.session(), echoed).await {
                            Err(ClientError::Refused(refusal @ Refusal::CursorAhead { .. })) => {
                                tally.refused(&refusal);
                                tally.echoed_refused.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(grant) => {
                                // The server accepted an ID beyond what it
                                // sent: a failure. Consume the ticket so
                                // migrations go on.
                                tracing::warn!(?echoed, "churn: echoed cursor granted");
                                tally.echoed_granted.fetch_add(1, Ordering::Relaxed);
                                if let Ok(socket) = client.connect_ws(&grant).await {
                                    socket.close().await;
                                }
                            }
                            Err(error) => {
                                if let Some(refusal) = error.refusal() {
                                    tally.refused(refusal);
                                }
                                tracing::warn!(%error, "churn: echoed cursor answered otherwise");
                                tally.failed(&error);
                            }
                        }
                    }
                    // No unseen ID within the wait (no emit yet, a reset):
                    // the tour tries again later.
                    Ok(None) => {}
                    Err(error) => {
                        tracing::warn!(%error, "churn: session state failed");
                        tally.failed(&error);
                    }
                }
                Ok(false)
            }
            Action::Stale => {
                mc.drop_connection();
                let cursor = mc.cursor();
                match wait_until_evicted(&client, mc.session(), cursor, deadline).await {
                    Ok(true) => {
                        tally.stale_attempts.fetch_add(1, Ordering::Relaxed);
                        tour.stale = true;
                        let outcome = mc.follow_sse().await.map(|()| true);
                        if matches!(
                            outcome,
                            Err(ClientError::Refused(Refusal::GapNotCovered { .. }))
                        ) {
                            tally.stale_gaps.fetch_add(1, Ordering::Relaxed);
                        }
                        outcome
                    }
                    // The deadline came before the ring turned over.
                    Ok(false) => Ok(false),
                    Err(error) => {
                        tracing::warn!(%error, "churn: session state failed");
                        tally.failed(&error);
                        Ok(false)
                    }
                }
            }
        };
        match outcome {
            Ok(true) => {
                if action != Action::Migrate {
                    tally.resumes.fetch_add(1, Ordering::Relaxed);
                }
                let count = 5 + rng.below(40);
                read(&mut mc, count, &config, &tally, replay).await;
                mc.disconnect().await;
            }
            Ok(false) => {}
            Err(error) => after_refusal(&client, &mut mc, &shared, error, &tally).await?,
        }
    }
    Ok(())
}

/// The producer's latest event ID, once it is beyond what the server sent
/// this session (the client has no transport open): an ID the client never
/// saw. Polls the server's figures for up to 2 s; `None` if none came.
async fn echoed_cursor(
    client: &Client,
    session: &str,
    last_id: &Mutex<Option<gapless::EventId>>,
) -> Result<Option<gapless::EventId>, ClientError> {
    let give_up = Instant::now() + Duration::from_secs(2);
    while Instant::now() < give_up {
        let state = client.state(session).await?;
        let Some(latest) = last_id.lock().ok().and_then(|l| *l) else {
            return Ok(None);
        };
        if latest.epoch != state.epoch {
            return Ok(None);
        }
        if state.transport == gapless::session::Transport::None && latest.seq > state.sent {
            return Ok(Some(latest));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(None)
}

/// Waits, with no transport open, until the ring has turned over past the
/// client: everything published when it went quiet is evicted, and so is
/// `cursor + 1`. Judged on the server's own figures rather than a timer, so
/// the resume that follows presents an evicted cursor whatever the rate or
/// the machine's load. `Ok(false)` if the deadline came first.
async fn wait_until_evicted(
    client: &Client,
    session: &str,
    cursor: gapless::EventId,
    deadline: Instant,
) -> Result<bool, ClientError> {
    let quiet = client.state(session).await?;
    if quiet.epoch != cursor.epoch {
        return Ok(false);
    }
    let through = quiet.published.max(cursor.seq.saturating_add(1));
    loop {
        let state = client.state(session).await?;
        if state.first_retained > through {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let index = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// Runs the churn and returns its report. Progress goes to stderr: one
/// updating line on a terminal, plain lines otherwise.
///
/// # Errors
/// The server could not start, or a session could not be created.
pub async fn run(
    config: ChurnConfig,
) -> Result<ChurnReport, Box<dyn std::error::Error + Send + Sync>> {
    let server = spawn(
        ServerConfig {
            ring_events: config.ring_events,
            ring_bytes: config.ring_bytes,
            ..ServerConfig::default()
        },
        "127.0.0.1:0".parse()?,
    )
    .await?;
    let client = Client::new(server.url())?.with_timeout(Duration::from_secs(10));
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let deadline = started + config.duration;
    let mut producers = Vec::new();
    let mut clients = Vec::new();
    for k in 0..config.sessions {
        let created = client.create_session().await?;
        let lane = Lane {
            k,
            client: client.clone(),
            session: Arc::new(Mutex::new(created.session.clone())),
            last_id: Arc::new(Mutex::new(None)),
            config: config.clone(),
            tally: Arc::clone(&tally),
        };
        producers.push(tokio::spawn(producer(lane.clone(), Arc::clone(&stop))));
        clients.push(tokio::spawn(churn_client(lane, created, deadline)));
    }
    let terminal = std::io::stderr().is_terminal();
    let mut progress = tokio::time::interval(Duration::from_secs(1));
    progress.tick().await;
    while Instant::now() < deadline {
        progress.tick().await;
        let line = format!(
            "churn {:>5.1}s  emitted {:>8}  delivered {:>8}  migrations {:>6}  gaps reported {:>5}  silent gaps {}",
            started.elapsed().as_secs_f64(),
            tally.emitted.load(Ordering::Relaxed),
            tally.delivered.load(Ordering::Relaxed),
            tally.migrations_granted.load(Ordering::Relaxed),
            tally.gaps_reported.load(Ordering::Relaxed),
            tally.silent_gaps.load(Ordering::Relaxed),
        );
        let mut err = std::io::stderr();
        if terminal {
            let _ = write!(err, "\r{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
        let _ = err.flush();
    }
    if terminal {
        eprintln!();
    }
    for handle in clients {
        match handle.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(%error, "churn: a client gave up");
                tally.error("client gave up");
            }
            Err(error) => {
                tracing::warn!(%error, "churn: a client panicked");
                tally.error("client panicked");
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for handle in producers {
        let _ = handle.await;
    }
    let elapsed = started.elapsed();
    server.shutdown().await;
    let memory_per_session = gapless::Config::default()
        .events(config.ring_events)
        .bytes(config.ring_bytes)
        .geometry()
        .map(|g| g.footprint())
        .unwrap_or(0);
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    Ok(ChurnReport {
        elapsed,
        sessions: config.sessions,
        emitted: get(&tally.emitted),
        emits_to_replaced: get(&tally.emits_to_replaced),
        delivered: get(&tally.delivered),
        resumes: get(&tally.resumes),
        migrations_granted: get(&tally.migrations_granted),
        refusals: tally.refusals.lock().map(|r| r.clone()).unwrap_or_default(),
        echoed_refused: get(&tally.echoed_refused),
        echoed_granted: get(&tally.echoed_granted),
        stale_attempts: get(&tally.stale_attempts),
        stale_gaps: get(&tally.stale_gaps),
        gaps_reported: get(&tally.gaps_reported),
        session_resets: get(&tally.session_resets),
        silent_gaps: get(&tally.silent_gaps),
        corrupt_payloads: get(&tally.corrupt_payloads),
        errors: tally.errors.lock().map(|e| e.clone()).unwrap_or_default(),
        replay_sse: Latencies::of(&tally.replay_sse),
        replay_ws: Latencies::of(&tally.replay_ws),
        memory_per_session,
    })
}
