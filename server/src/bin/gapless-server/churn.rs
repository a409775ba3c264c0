//! The churn run: the reference server under load, driven in-process over
//! loopback by clients that read over SSE, drop, resume, and migrate to
//! WebSocket with true, stale (evicted) and echoed cursors. Every client
//! checks every event with a [`GapDetector`](gapless::session::GapDetector);
//! the run fails if any client saw a silent gap.

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
    emit_failures: AtomicU64,
    delivered: AtomicU64,
    resumes: AtomicU64,
    migrations_granted: AtomicU64,
    echoed_refused: AtomicU64,
    echoed_granted: AtomicU64,
    stale_attempts: AtomicU64,
    gaps_reported: AtomicU64,
    session_resets: AtomicU64,
    silent_gaps: AtomicU64,
    corrupt_payloads: AtomicU64,
    errors: AtomicU64,
    refusals: Mutex<BTreeMap<String, u64>>,
    replay_latencies: Mutex<Vec<Duration>>,
}

impl Tally {
    fn refused(&self, refusal: &Refusal) {
        if let Ok(mut map) = self.refusals.lock() {
            *map.entry(refusal.code().to_string()).or_default() += 1;
        }
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
    /// Emits refused (413 for an oversized payload, transport errors).
    pub emit_failures: u64,
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
    /// Echoed cursors the server could not tell from a true one (the client
    /// had really been sent that far).
    pub echoed_granted: u64,
    /// Stale resumes attempted after letting the ring evict the gap.
    pub stale_attempts: u64,
    /// Gaps the server reported (409, `event: gap`, close 4409).
    pub gaps_reported: u64,
    /// Sessions re-created after an unrecoverable reported gap.
    pub session_resets: u64,
    /// Holes, duplicates or wrong first frames seen by the clients: must be 0.
    pub silent_gaps: u64,
    /// Payloads whose content did not match what was emitted: must be 0.
    pub corrupt_payloads: u64,
    /// Transport errors and unexpected answers.
    pub errors: u64,
    /// p50 and p99 of the time from a resume or upgrade request to its
    /// first replayed event.
    pub replay_p50: Duration,
    /// See `replay_p50`.
    pub replay_p99: Duration,
    /// Preallocated bytes per session ring.
    pub memory_per_session: usize,
}

impl ChurnReport {
    /// Whether the run saw no silent gap and no corrupt payload.
    pub fn passed(&self) -> bool {
        self.silent_gaps == 0 && self.corrupt_payloads == 0
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
        writeln!(f, "  emits refused         {}", self.emit_failures)?;
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
            "  echoed cursors        {} refused (cursor_ahead), {} indistinguishable",
            self.echoed_refused, self.echoed_granted
        )?;
        writeln!(f, "  stale resumes         {}", self.stale_attempts)?;
        writeln!(
            f,
            "  gaps reported         {} (never silent; {} sessions re-created)",
            self.gaps_reported, self.session_resets
        )?;
        writeln!(f, "  transport errors      {}", self.errors)?;
        writeln!(
            f,
            "  replay latency        p50 {:.2} ms, p99 {:.2} ms",
            self.replay_p50.as_secs_f64() * 1e3,
            self.replay_p99.as_secs_f64() * 1e3
        )?;
        writeln!(
            f,
            "  memory per session    {} bytes (preallocated ring)",
            self.memory_per_session
        )?;
        writeln!(f, "  corrupt payloads      {}", self.corrupt_payloads)?;
        write!(f, "  SILENT GAPS           {}", self.silent_gaps)
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
    /// Go quiet until the ring has evicted the gap, then resume.
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
            Err(_) => {
                tally.emit_failures.fetch_add(1, Ordering::Relaxed);
            }
        }
        n += 1;
    }
}

/// Reads up to `count` events from the open transport, checking each.
/// Returns false when the transport ended.
async fn read(
    mc: &mut MigratingClient,
    count: u64,
    config: &ChurnConfig,
    tally: &Tally,
    started: Option<Instant>,
) -> bool {
    let mut first = started;
    for _ in 0..count {
        match tokio::time::timeout(Duration::from_secs(5), mc.next()).await {
            Ok(Ok(Next::Event(event))) => {
                if let Some(started) = first.take() {
                    if let Ok(mut latencies) = tally.replay_latencies.lock() {
                        latencies.push(started.elapsed());
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
            Ok(Err(_)) => {
                tally.errors.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            // Nothing for 5 s at the configured rate: a stall, reported.
            Err(_) => {
                tally.errors.fetch_add(1, Ordering::Relaxed);
                mc.drop_connection();
                return false;
            }
        }
    }
    true
}

/// Handles a refused resume or upgrade. A reported gap is accepted and, if
/// the session can no longer be resumed from any cursor the client holds,
/// the session is re-created (an explicit, counted reset).
async fn after_refusal(
    client: &Client,
    mc: &mut MigratingClient,
    shared: &Shared,
    error: ClientError,
    tally: &Tally,
) -> Result<(), ClientError> {
    let Some(refusal) = error.refusal().cloned() else {
        tally.errors.fetch_add(1, Ordering::Relaxed);
        return Ok(());
    };
    tally.refused(&refusal);
    if !matches!(refusal, Refusal::GapNotCovered { .. }) {
        return Ok(());
    }
    tally.gaps_reported.fetch_add(1, Ordering::Relaxed);
    if let Some(gap) = mc.gaps().last().cloned() {
        let _ = mc.accept_gap(&gap);
    }
    // Resume after the reported gap; the server refuses a cursor it never
    // sent, and then only a fresh session can continue.
    match mc.follow_sse().await {
        Ok(()) => Ok(()),
        Err(error) => {
            if let Some(refusal) = error.refusal() {
                tally.refused(refusal);
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
    let mut mc = MigratingClient::new(client.clone(), &created);
    let stale_wait = Duration::from_secs_f64(config.ring_events as f64 / config.rate * 1.5);
    while Instant::now() < deadline {
        let action = Action::pick(&mut rng);
        let mut started = Instant::now();
        let outcome = match action {
            Action::Resume => mc.follow_sse().await.map(|()| true),
            Action::Migrate => mc.migrate_to_websocket().await.map(|_| {
                tally.migrations_granted.fetch_add(1, Ordering::Relaxed);
                true
            }),
            Action::Echo => {
                // Echo the server's last emitted ID as if it were our cursor
                // (the echoed-ID case), once the server has stopped sending to us.
                let session = mc.session().to_string();
                if let Some(echoed) = echoed_cursor(&client, &session, &last_id).await {
                    match client.upgrade(mc.session(), echoed).await {
                        Err(ClientError::Refused(refusal @ Refusal::CursorAhead { .. })) => {
                            tally.refused(&refusal);
                            tally.echoed_refused.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(grant) => {
                            // The server had really sent that far: it cannot
                            // tell. Consume the ticket so migrations go on.
                            tally.echoed_granted.fetch_add(1, Ordering::Relaxed);
                            if let Ok(socket) = client.connect_ws(&grant).await {
                                socket.close().await;
                            }
                        }
                        Err(error) => {
                            if let Some(refusal) = error.refusal() {
                                tally.refused(refusal);
                            }
                        }
                    }
                }
                Ok(false)
            }
            Action::Stale => {
                mc.drop_connection();
                tally.stale_attempts.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(
                    stale_wait.min(deadline.saturating_duration_since(Instant::now())),
                )
                .await;
                started = Instant::now();
                mc.follow_sse().await.map(|()| true)
            }
        };
        match outcome {
            Ok(true) => {
                if action != Action::Migrate {
                    tally.resumes.fetch_add(1, Ordering::Relaxed);
                }
                let count = 5 + rng.below(40);
                read(&mut mc, count, &config, &tally, Some(started)).await;
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
/// saw. Polls the server's figures with a deadline.
async fn echoed_cursor(
    client: &Client,
    session: &str,
    last_id: &Mutex<Option<gapless::EventId>>,
) -> Option<gapless::EventId> {
    let give_up = Instant::now() + Duration::from_secs(2);
    while Instant::now() < give_up {
        let state = client.state(session).await.ok()?;
        let latest = last_id.lock().ok().and_then(|l| *l)?;
        if latest.epoch != state.epoch {
            return None;
        }
        if state.transport == gapless::session::Transport::None && latest.seq > state.sent {
            return Some(latest);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
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
            Ok(Err(_)) | Err(_) => {
                tally.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for handle in producers {
        let _ = handle.await;
    }
    let elapsed = started.elapsed();
    server.shutdown().await;
    let mut latencies = tally
        .replay_latencies
        .lock()
        .map(|l| l.clone())
        .unwrap_or_default();
    latencies.sort_unstable();
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
        emit_failures: get(&tally.emit_failures),
        delivered: get(&tally.delivered),
        resumes: get(&tally.resumes),
        migrations_granted: get(&tally.migrations_granted),
        refusals: tally.refusals.lock().map(|r| r.clone()).unwrap_or_default(),
        echoed_refused: get(&tally.echoed_refused),
        echoed_granted: get(&tally.echoed_granted),
        stale_attempts: get(&tally.stale_attempts),
        gaps_reported: get(&tally.gaps_reported),
        session_resets: get(&tally.session_resets),
        silent_gaps: get(&tally.silent_gaps),
        corrupt_payloads: get(&tally.corrupt_payloads),
        errors: get(&tally.errors),
        replay_p50: percentile(&latencies, 0.5),
        replay_p99: percentile(&latencies, 0.99),
        memory_per_session,
    })
}
