//! The churn run: the reference server under load, driven in-process over
//! loopback by clients that read over SSE, drop, resume, and migrate to
//! WebSocket with true, stale (evicted) and echoed cursors. Every client
//! checks every event with a [`GapDetector`](gapless::session::GapDetector).
//!
//! With `--redis URL`, two instances share the sessions through that Redis:
//! producers emit into the instance that created each session, and every
//! client moves to the other instance before each resume or migration,
//! with its own cursor, so every replay crosses instances.
//!
//! With `--data-dir DIR`, the one instance keeps its sessions in the disk
//! history there (`serve --data-dir`): every emit is acknowledged after
//! its group commit, and every replay the ring does not cover is read
//! from the disk.
//!
//! The run passes only if it exercised what it claims to and nothing went
//! wrong: see [`ChurnReport::checks`]. A run that delivered nothing, never
//! migrated, never had an echoed cursor refused or never presented an
//! evicted cursor fails, however few silent gaps it saw.

mod report;

use gapless_client::{Client, ClientError, MigratingClient, Next, Refusal};
use gapless_server::{
    spawn, DataDir, DiskLimits, Fsync, HistoryConfig, RunningServer, ServerConfig,
};
pub use report::ChurnReport;
use report::{Latencies, Tally};
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
    /// Two instances sharing sessions through this Redis; `None`: one
    /// instance, no Redis.
    pub redis: Option<String>,
    /// The instance keeps its sessions in the disk history in this
    /// directory (`serve --data-dir`); not with `redis`.
    pub data_dir: Option<std::path::PathBuf>,
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
            redis: None,
            data_dir: None,
        }
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
            Some(action) if self.turn.is_multiple_of(2) => action,
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
type CurrentSession = Arc<Mutex<String>>;

fn current(shared: &CurrentSession) -> String {
    shared.lock().map(|s| s.clone()).unwrap_or_default()
}

/// What one session's producer and client share.
#[derive(Clone)]
struct Lane {
    /// The session's index (it tags the payloads).
    k: usize,
    client: Client,
    /// Every instance's client (the first is `client`): the churning
    /// client moves to the next one before each resume or migration.
    instances: Vec<Client>,
    /// The session ID, replaced when the client re-creates the session.
    session: CurrentSession,
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
        ..
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
    shared: &CurrentSession,
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
        instances,
        session: shared,
        last_id,
        config,
        tally,
    } = lane;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (k as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9));
    let mut tour = Tour::default();
    let mut mc = MigratingClient::new(client.clone(), &created);
    let mut hops = 0usize;
    while Instant::now() < deadline {
        let action = tour.next(&mut rng);
        if instances.len() > 1 && matches!(action, Action::Resume | Action::Migrate | Action::Stale)
        {
            // Another instance, the same cursor: what a client behind a load
            // balancer does.
            hops += 1;
            let next = instances[hops % instances.len()].clone();
            let session = mc.session().to_owned();
            mc.drop_connection();
            mc = MigratingClient::with_cursor(next, &session, mc.cursor());
            tally.instance_hops.fetch_add(1, Ordering::Relaxed);
        }
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
                match echoed_cursor(&instances, &session, &last_id).await {
                    Ok(Some(echoed)) => {
                        tour.echoed = true;
                        match mc.client().upgrade(mc.session(), echoed).await {
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
                                if let Ok(socket) = mc.client().connect_ws(&grant).await {
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
/// saw. With several instances, every one must report no transport (a
/// stream the client dropped on one may still be handing events over
/// there), and `sent` is the session's on all (each reads it from Redis).
/// Polls the servers' figures for up to 2 s; `None` if none came.
async fn echoed_cursor(
    instances: &[Client],
    session: &str,
    last_id: &Mutex<Option<gapless::EventId>>,
) -> Result<Option<gapless::EventId>, ClientError> {
    let give_up = Instant::now() + Duration::from_secs(2);
    'poll: while Instant::now() < give_up {
        let mut sent = 0;
        let mut epoch = None;
        for client in instances {
            let state = client.state(session).await?;
            if state.transport != gapless::session::Transport::None {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue 'poll;
            }
            sent = sent.max(state.sent);
            epoch = Some(state.epoch);
        }
        let Some(latest) = last_id.lock().ok().and_then(|l| *l) else {
            return Ok(None);
        };
        if Some(latest.epoch) != epoch {
            return Ok(None);
        }
        if latest.seq > sent {
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

/// Runs the churn and returns its report. Progress goes to stderr: one
/// updating line on a terminal, plain lines otherwise.
///
/// # Errors
/// The server could not start, or a session could not be created.
pub async fn run(
    config: ChurnConfig,
) -> Result<ChurnReport, Box<dyn std::error::Error + Send + Sync>> {
    let server_config = ServerConfig {
        ring_events: config.ring_events,
        ring_bytes: config.ring_bytes,
        redis: config.redis.as_ref().map(|url| HistoryConfig {
            url: url.clone(),
            cluster: false,
            timeout: Duration::from_secs(2),
            retention: config.ring_events,
            retention_bytes: config.ring_bytes,
            ca_file: None,
            idle: Duration::from_secs(600),
        }),
        data_dir: config.data_dir.as_ref().map(|path| DataDir {
            path: path.clone(),
            fsync: Fsync::Always,
            limits: DiskLimits::default(),
        }),
        ..ServerConfig::default()
    };
    let count = if config.redis.is_some() { 2 } else { 1 };
    let mut servers: Vec<RunningServer> = Vec::new();
    let mut instances = Vec::new();
    for _ in 0..count {
        let server = spawn(server_config.clone(), "127.0.0.1:0".parse()?).await?;
        instances.push(Client::new(server.url())?.with_timeout(Duration::from_secs(10)));
        servers.push(server);
    }
    let client = instances[0].clone();
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
            instances: instances.clone(),
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
    for server in servers {
        server.shutdown().await;
    }
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
        instances: count,
        instance_hops: get(&tally.instance_hops),
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
