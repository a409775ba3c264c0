//! The load test: the reference server in-process on loopback under
//! thousands of sessions at once, bounded in count and time. Of the
//! sessions, a tenth have a *stalled* reader (an SSE request written by hand
//! on a raw socket with a small receive buffer, never read), a tenth
//! *churn* (create, emit a few, read them back over SSE, delete), the rest
//! have a *healthy* reader that checks every event is exactly `cursor + 1`
//! with a [`GapDetector`] and measures each event's latency (emit request
//! start to SSE read). A hundred *cap clients* open sessions in a loop past
//! `max_sessions`. The process RSS — server and every client together: they
//! share this one process — is sampled every second, and so are the bytes
//! the kernel holds queued on the run's sockets (not part of the RSS).
//!
//! The run fails on a silent gap, an RSS peak above the budget, a healthy
//! reader starved (owed events and given none for [`STARVED_AFTER`]) or
//! lapped, an event emitted into a healthy session and never delivered, the
//! cap never tripping, a task that does not finish in time, or any error
//! other than `503 too_many_sessions` with a `Retry-After`.

mod report;

use clap::Args;
use gapless::session::GapDetector;
use gapless_client::{Client, Incoming, Refusal, SseStream};
use gapless_server::{spawn, MemoryBudget, ServerConfig};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{sleep, timeout, timeout_at};

use report::{attached, kind, mib, open_files_limit, queued, report, rss, scrape, Figures};

/// Clients that open sessions in a loop past the cap.
const CAP_CLIENTS: usize = 100;
/// A cap client's pause between attempts at the cap (shorter than the
/// `Retry-After` on purpose: it keeps pushing).
const CAP_PAUSE: Duration = Duration::from_millis(500);
/// Tasks that emit into the healthy and stalled sessions, one request at a
/// time each (so they hold at most this many connections).
const PRODUCERS: usize = 128;
/// Sessions set up at once.
const SETUP_CONCURRENCY: usize = 64;
/// A healthy reader owed events and given none for this long is starved.
const STARVED_AFTER: Duration = Duration::from_secs(5);
/// How often a waiting reader checks whether it is owed events.
const TICK: Duration = Duration::from_millis(250);
/// Events each churn cycle emits and reads back; a cycle per period.
const CHURN_EVENTS: u64 = 3;
const CHURN_PERIOD: Duration = Duration::from_secs(1);
/// Hard limits of the phases around the load.
const SETUP_LIMIT: Duration = Duration::from_secs(120);
const JOIN_LIMIT: Duration = Duration::from_secs(20);
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// The flags of `load`.
#[derive(Args, Clone, Debug)]
pub struct LoadArgs {
    /// Sessions: 80% with a healthy reader, 10% with a stalled reader, 10%
    /// churning (each churner holds one session at a time).
    #[arg(long, default_value_t = 5000)]
    sessions: usize,
    /// Seconds of load after the sessions are set up.
    #[arg(long, default_value_t = 20.0)]
    duration: f64,
    /// Events per second emitted into each healthy and stalled session.
    #[arg(long, default_value_t = 2.0)]
    rate: f64,
    /// Payload bytes of the healthy and churning sessions' events.
    #[arg(long, default_value_t = 256)]
    payload: usize,
    /// Payload bytes of the stalled sessions' events (bigger, so that their
    /// socket buffers fill up).
    #[arg(long, default_value_t = 16 << 10)]
    stalled_payload: usize,
    /// Events per session ring: the server's default. 5000 such rings
    /// reserve 40 GiB, but only what is written is resident.
    #[arg(long, default_value_t = 4096)]
    ring_events: usize,
    /// Payload bytes per session ring: the server's default.
    #[arg(long, default_value_t = 4 << 20)]
    ring_bytes: usize,
    /// The server's session cap [default: sessions + 50]: the churners and
    /// the cap clients fill the margin, then meet `503 too_many_sessions`.
    #[arg(long)]
    max_sessions: Option<usize>,
    /// Seconds a write to a client may take before the server closes it.
    #[arg(long, default_value_t = 5.0)]
    write_timeout: f64,
    /// Fail when the process RSS peaks above this many MiB (5000 sessions
    /// with the default ring peaked at 635 MiB here).
    #[arg(long, default_value_t = 1024)]
    rss_budget_mib: u64,
}

/// One session fed by the producers.
struct Lane {
    session: String,
    epoch: u64,
    stalled: bool,
    /// Events the server accepted (202) into this session.
    emitted: AtomicU64,
}

/// Counters every task adds to.
#[derive(Default)]
struct Tally {
    emitted: AtomicU64,
    delivered: AtomicU64,
    silent_gaps: AtomicU64,
    lapped: AtomicU64,
    starved: AtomicU64,
    churn_cycles: AtomicU64,
    churn_delivered: AtomicU64,
    churn_503: AtomicU64,
    cap_created: AtomicU64,
    cap_503: AtomicU64,
    rss_peak: AtomicU64,
    /// Bytes the kernel holds queued on this run's sockets (both ends).
    queued_peak: AtomicU64,
    /// Microseconds since `t0` when the drain gives up (0: not draining).
    drain_deadline_us: AtomicU64,
    /// Events emitted into healthy sessions and never delivered.
    missing: AtomicU64,
    /// Healthy readers' emit-to-read latencies, microseconds.
    latencies: Mutex<Vec<u32>>,
    first_silent_gap: Mutex<Option<String>>,
    /// The `Retry-After` seconds of the 503s, counted.
    retry_after: Mutex<BTreeMap<u64, u64>>,
    /// Unexpected errors by "who: kind".
    errors: Mutex<BTreeMap<String, u64>>,
}

/// What every task shares.
struct Ctx {
    args: LoadArgs,
    /// The server's address.
    addr: SocketAddr,
    t0: Instant,
    emitting: AtomicBool,
    draining: AtomicBool,
    t: Tally,
}

impl Ctx {
    fn now_us(&self) -> u64 {
        u64::try_from(self.t0.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
    fn emitting(&self) -> bool {
        self.emitting.load(Relaxed)
    }
    fn past_drain(&self) -> bool {
        let deadline = self.t.drain_deadline_us.load(Relaxed);
        deadline != 0 && self.now_us() >= deadline
    }
    fn silent_gap(&self, what: String) {
        self.t.silent_gaps.fetch_add(1, Relaxed);
        if let Ok(mut first) = self.t.first_silent_gap.lock() {
            first.get_or_insert(what);
        }
    }
}

/// `{"t_us":T,"pad":"xx…"}`: about `pad.len() + 30` bytes.
fn payload(t_us: u64, pad: &str) -> String {
    format!("{{\"t_us\":{t_us},\"pad\":\"{pad}\"}}")
}

fn pad(size: usize) -> String {
    "x".repeat(size.saturating_sub(30))
}

/// The `t_us` of a payload built by [`payload`].
fn emitted_at(data: &str) -> Option<u64> {
    let rest = data.strip_prefix("{\"t_us\":")?;
    rest[..rest.find(|c: char| !c.is_ascii_digit())?]
        .parse()
        .ok()
}

/// Reads `lane` until the drain, checking every event is `cursor + 1`.
async fn healthy(ctx: Arc<Ctx>, client: Client, lane: Arc<Lane>, sse: SseStream) {
    let mut detector = GapDetector::new(lane.epoch, 0);
    // Events received before the detector was last restarted after a hole.
    let mut before = 0;
    let mut latencies = Vec::new();
    let mut stream = Some(sse);
    // When the reader last received an event or was owed none.
    let mut settled = Instant::now();
    let mut starved = false;
    loop {
        let emitted = lane.emitted.load(Relaxed);
        let owed = emitted.saturating_sub(before + detector.received());
        let draining = ctx.draining.load(Relaxed);
        if draining && (owed == 0 || ctx.past_drain()) {
            ctx.t.missing.fetch_add(owed, Relaxed);
            if let Ok(mut all) = ctx.t.latencies.lock() {
                all.extend(latencies);
            }
            return;
        }
        let Some(sse) = stream.as_mut() else {
            let cursor = Some(detector.cursor());
            match client.open_sse(&lane.session, cursor).await {
                Ok(sse) => stream = Some(sse),
                Err(error) => {
                    ctx.error("healthy reader resume", &kind(&error));
                    sleep(TICK).await;
                }
            }
            continue;
        };
        match timeout(TICK, sse.next_item()).await {
            Err(_) if owed == 0 => settled = Instant::now(),
            Err(_) => {
                if !starved && !draining && settled.elapsed() > STARVED_AFTER {
                    starved = true;
                    ctx.t.starved.fetch_add(1, Relaxed);
                }
            }
            Ok(Ok(Incoming::Event(event))) => {
                settled = Instant::now();
                if let Err(gap) = detector.observe(event.id) {
                    ctx.silent_gap(format!("session {}: {gap}", lane.session));
                    // Follow on from here, so that one hole counts once.
                    before += detector.received() + 1;
                    detector = GapDetector::new(lane.epoch, event.id.seq);
                    continue;
                }
                ctx.t.delivered.fetch_add(1, Relaxed);
                if let Some(t) = emitted_at(&event.data) {
                    let latency = ctx.now_us().saturating_sub(t);
                    latencies.push(u32::try_from(latency).unwrap_or(u32::MAX));
                }
            }
            Ok(Ok(Incoming::Gap(refusal))) => {
                ctx.t.lapped.fetch_add(1, Relaxed);
                if let Refusal::GapNotCovered { first_retained, .. } = refusal {
                    detector.accept_reported_gap(first_retained);
                }
                stream = None;
            }
            Ok(Ok(Incoming::Closed(_))) => {
                ctx.error("healthy reader", "stream ended");
                stream = None;
            }
            Ok(Err(error)) => {
                ctx.error("healthy reader", &kind(&error));
                stream = None;
            }
        }
    }
}

/// Opens `session`'s SSE stream on a raw socket with a small receive
/// buffer, to be never read.
async fn stalled(addr: SocketAddr, session: &str) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.set_recv_buffer_size(4096)?;
    let mut tcp = socket.connect(addr).await?;
    let request = format!(
        "GET /session/{session}/events HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await?;
    Ok(tcp)
}

/// Emits into `lanes` round robin, each at `rate`, until the load ends.
async fn producer(ctx: Arc<Ctx>, client: Client, lanes: Vec<Arc<Lane>>) {
    let (small, big) = (pad(ctx.args.payload), pad(ctx.args.stalled_payload));
    let period = Duration::from_secs_f64(1.0 / (ctx.args.rate * lanes.len().max(1) as f64));
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for lane in lanes.iter().cycle() {
        ticker.tick().await;
        if !ctx.emitting() {
            return;
        }
        let body = payload(ctx.now_us(), if lane.stalled { &big } else { &small });
        match client.emit_raw(&lane.session, body).await {
            Ok(_) => {
                lane.emitted.fetch_add(1, Relaxed);
                ctx.t.emitted.fetch_add(1, Relaxed);
            }
            Err(error) => ctx.error("emit", &kind(&error)),
        }
    }
}

/// Once per [`CHURN_PERIOD`]: deletes the session it holds, creates one,
/// emits a few events and reads them back over SSE.
async fn churner(ctx: Arc<Ctx>, client: Client, phase: Duration) {
    sleep(phase).await;
    let pad = pad(ctx.args.payload);
    let mut ticker = tokio::time::interval(CHURN_PERIOD);
    let mut held: Option<String> = None;
    while ctx.emitting() {
        ticker.tick().await;
        if let Some(session) = held.take() {
            delete(&ctx, &client, &session, "churn delete").await;
        }
        let created = match client.create_session().await {
            Ok(created) => created,
            Err(error) => {
                if ctx.refused_create("churn create", &error) {
                    ctx.t.churn_503.fetch_add(1, Relaxed);
                }
                continue;
            }
        };
        for _ in 0..CHURN_EVENTS {
            let body = payload(ctx.now_us(), &pad);
            if let Err(error) = client.emit_raw(&created.session, body).await {
                ctx.error("churn emit", &kind(&error));
            }
        }
        match client.open_sse(&created.session, None).await {
            Ok(sse) => read_back(&ctx, sse, GapDetector::new(created.epoch, 0)).await,
            Err(error) => ctx.error("churn open", &kind(&error)),
        }
        held = Some(created.session);
        ctx.t.churn_cycles.fetch_add(1, Relaxed);
    }
    if let Some(session) = held {
        delete(&ctx, &client, &session, "churn delete").await;
    }
}

/// Reads a churned session's [`CHURN_EVENTS`] events, checking each.
async fn read_back(ctx: &Ctx, mut sse: SseStream, mut detector: GapDetector) {
    while detector.received() < CHURN_EVENTS {
        let problem = match timeout(STARVED_AFTER, sse.next_item()).await {
            Ok(Ok(Incoming::Event(event))) => match detector.observe(event.id) {
                Ok(()) => {
                    ctx.t.churn_delivered.fetch_add(1, Relaxed);
                    continue;
                }
                Err(gap) => return ctx.silent_gap(format!("churned session: {gap}")),
            },
            Ok(Ok(Incoming::Gap(refusal))) => format!("gap {}", refusal.code()),
            Ok(Ok(Incoming::Closed(_))) => "stream ended".into(),
            Ok(Err(error)) => kind(&error),
            Err(_) => "starved".into(),
        };
        return ctx.error("churn reader", &problem);
    }
}

/// Once the churners hold their sessions: opens sessions until the first
/// `503` and holds them (the server is then at its cap), then goes on
/// asking every [`CAP_PAUSE`]; a session it still gets (a churner's, freed
/// for a moment) it deletes at once. Deletes what it holds at the end.
async fn cap_client(ctx: Arc<Ctx>, client: Client) {
    sleep(CHURN_PERIOD).await;
    let (mut held, mut full) = (Vec::new(), false);
    while ctx.emitting() {
        match client.create_session().await {
            Ok(created) => {
                ctx.t.cap_created.fetch_add(1, Relaxed);
                if full {
                    delete(&ctx, &client, &created.session, "cap client delete").await;
                } else {
                    held.push(created.session);
                }
            }
            Err(error) => {
                full = true;
                if ctx.refused_create("cap client", &error) {
                    ctx.t.cap_503.fetch_add(1, Relaxed);
                }
            }
        }
        if full {
            sleep(CAP_PAUSE).await;
        }
    }
    for session in held {
        delete(&ctx, &client, &session, "cap client delete").await;
    }
}

/// Deletes `session`, counting an error as `who`'s.
async fn delete(ctx: &Ctx, client: &Client, session: &str, who: &str) {
    if let Err(error) = client.delete(session).await {
        ctx.error(who, &kind(&error));
    }
}

/// A set-up session: a healthy reader's task, or a stalled socket.
enum Ready {
    Healthy(Arc<Lane>, JoinHandle<()>),
    Stalled(Arc<Lane>, TcpStream),
}

async fn set_up(ctx: Arc<Ctx>, client: Client, stall: bool) -> Result<Ready, String> {
    let created = client.create_session().await.map_err(|e| e.to_string())?;
    let (session, epoch, emitted) = (created.session, created.epoch, AtomicU64::new(0));
    let lane = Arc::new(Lane {
        session,
        epoch,
        stalled: stall,
        emitted,
    });
    if stall {
        let tcp = stalled(ctx.addr, &lane.session).await;
        return Ok(Ready::Stalled(lane, tcp.map_err(|e| e.to_string())?));
    }
    let sse = client.open_sse(&lane.session, None).await;
    let sse = sse.map_err(|e| e.to_string())?;
    let reader = tokio::spawn(healthy(ctx, client, Arc::clone(&lane), sse));
    Ok(Ready::Healthy(lane, reader))
}

impl LoadArgs {
    /// Runs the load test and prints its report; non-zero on a failure.
    pub async fn run(self) -> ExitCode {
        match run(self).await {
            Ok(failures) if failures.is_empty() => {
                println!("PASSED");
                ExitCode::SUCCESS
            }
            Ok(failures) => {
                println!("FAILED");
                for failure in failures {
                    eprintln!("FAILED: {failure}");
                }
                ExitCode::FAILURE
            }
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::FAILURE
            }
        }
    }
}

/// Sets up, loads, drains and shuts down; prints the report and returns
/// the failures.
async fn run(args: LoadArgs) -> Result<Vec<String>, String> {
    let positive = |n: f64| n.is_finite() && n > 0.0;
    if !(positive(args.rate) && positive(args.write_timeout) && positive(args.duration + 1.0)) {
        return Err("--duration must be >= 0, --rate and --write-timeout > 0".into());
    }
    let max_sessions = args.max_sessions.unwrap_or(args.sessions + 50);
    // Both ends of every stream and of the producers', cap clients' and
    // setup connections, and some slack.
    let fds = 2 * (args.sessions + PRODUCERS + CAP_CLIENTS + SETUP_CONCURRENCY) as u64 + 512;
    if let Some(limit) = open_files_limit().filter(|&limit| limit < fds) {
        let sessions = args.sessions;
        return Err(format!("{sessions} sessions need about {fds} file descriptors (both ends of every connection are in this process); the soft limit is {limit}: raise `ulimit -n` or pass fewer --sessions"));
    }
    let rss_start = rss();
    let config = ServerConfig {
        ring_events: args.ring_events,
        ring_bytes: args.ring_bytes,
        max_sessions,
        // Every client of the run is on this loopback address: the per-client
        // limits would be the global ones, met first.
        max_sessions_per_client: max_sessions,
        max_connections_per_client: usize::MAX,
        // The run reserves sessions x footprint (5000 default rings: 21 GB)
        // on purpose, to show that only what is written becomes resident;
        // the RSS budget below is the memory check.
        memory_budget: MemoryBudget::Bytes(u64::MAX),
        write_timeout: Duration::from_secs_f64(args.write_timeout),
        shutdown_grace: Duration::from_secs(5),
        ..ServerConfig::default()
    };
    let server = spawn(config, SocketAddr::from(([127, 0, 0, 1], 0))).await;
    let server = server.map_err(|e| format!("cannot start the server: {e}"))?;
    let client = Client::new(server.url()).map_err(|e| e.to_string())?;
    let client = client.with_timeout(Duration::from_secs(10));
    let ctx = Arc::new(Ctx {
        args: args.clone(),
        addr: server.addr(),
        t0: Instant::now(),
        emitting: AtomicBool::new(false),
        draining: AtomicBool::new(false),
        t: Tally::default(),
    });
    let sampler = tokio::spawn({
        let ctx = Arc::clone(&ctx);
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            let port = ctx.addr.port();
            loop {
                tick.tick().await;
                // Reading /proc/net/tcp takes a while with 10k sockets.
                let read = tokio::task::spawn_blocking(move || (rss(), queued(port)));
                let (rss, queued) = read.await.unwrap_or_default();
                ctx.t.rss_peak.fetch_max(rss, Relaxed);
                ctx.t.queued_peak.fetch_max(queued, Relaxed);
            }
        }
    });

    // Setup: every session and its reader, SETUP_CONCURRENCY at a time.
    let setup_started = Instant::now();
    let (mut lanes, mut readers, mut sockets) = (Vec::new(), Vec::new(), Vec::new());
    let gate = Arc::new(tokio::sync::Semaphore::new(SETUP_CONCURRENCY));
    let mut setups = JoinSet::new();
    for k in (0..args.sessions).filter(|k| k % 10 != 1) {
        let (ctx, client, gate) = (Arc::clone(&ctx), client.clone(), Arc::clone(&gate));
        setups.spawn(async move {
            let _permit = gate.acquire_owned().await.map_err(|e| e.to_string())?;
            set_up(ctx, client, k % 10 == 0).await
        });
    }
    let setup_deadline = tokio::time::Instant::now() + SETUP_LIMIT;
    let failed = loop {
        let Ok(next) = timeout_at(setup_deadline, setups.join_next()).await else {
            break Some(format!("setup took over {SETUP_LIMIT:?}"));
        };
        match next.map(|joined| joined.map_err(|e| e.to_string()).and_then(|r| r)) {
            None => break None,
            Some(Ok(Ready::Healthy(lane, reader))) => {
                lanes.push(lane);
                readers.push(reader);
            }
            Some(Ok(Ready::Stalled(lane, tcp))) => {
                lanes.push(lane);
                sockets.push(tcp);
            }
            Some(Err(error)) => break Some(format!("setup failed: {error}")),
        }
    };
    if let Some(error) = failed {
        drop((setups, sockets));
        readers.iter().for_each(JoinHandle::abort);
        let _ = timeout(JOIN_LIMIT, server.shutdown()).await;
        return Err(error);
    }
    let setup = setup_started.elapsed().as_secs_f64();
    let stalled: Vec<_> = lanes.iter().filter(|l| l.stalled).cloned().collect();
    let attached_at_start = attached(&client, &stalled).await;
    let rss_setup = rss();

    // The load.
    ctx.emitting.store(true, Relaxed);
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.duration);
    let churners = args.sessions / 10 + usize::from(args.sessions % 10 > 1);
    let mut workers = Vec::new();
    for w in 0..PRODUCERS.min(lanes.len()) {
        let mine = lanes.iter().skip(w).step_by(PRODUCERS).cloned().collect();
        let task = producer(Arc::clone(&ctx), client.clone(), mine);
        workers.push(tokio::spawn(task));
    }
    for c in 0..churners {
        let phase = CHURN_PERIOD.mul_f64(c as f64 / churners as f64);
        let task = churner(Arc::clone(&ctx), client.clone(), phase);
        workers.push(tokio::spawn(task));
    }
    for _ in 0..CAP_CLIENTS {
        workers.push(tokio::spawn(cap_client(Arc::clone(&ctx), client.clone())));
    }
    while Instant::now() < deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        sleep(left.min(Duration::from_secs(1))).await;
        let (t, secs) = (&ctx.t, started.elapsed().as_secs_f64());
        let (emitted, delivered) = (t.emitted.load(Relaxed), t.delivered.load(Relaxed));
        let (gaps, rss) = (t.silent_gaps.load(Relaxed), mib(t.rss_peak.load(Relaxed)));
        eprintln!("load {secs:>5.1} s  emitted {emitted:>8}  delivered {delivered:>8}  RSS {rss:>5.0} MiB  silent gaps {gaps}");
    }
    ctx.emitting.store(false, Relaxed);
    let load = started.elapsed().as_secs_f64();
    let mut unfinished = 0;
    let join_deadline = tokio::time::Instant::now() + JOIN_LIMIT;
    for task in workers {
        unfinished += u64::from(join_or_abort(join_deadline, task).await);
    }

    // The drain: every healthy reader gets what was emitted into its session.
    let drain_us = u64::try_from(DRAIN_LIMIT.as_micros()).unwrap_or(u64::MAX);
    let drain_deadline = ctx.now_us() + drain_us;
    ctx.t.drain_deadline_us.store(drain_deadline, Relaxed);
    ctx.draining.store(true, Relaxed);
    let join_deadline = tokio::time::Instant::now() + DRAIN_LIMIT + JOIN_LIMIT;
    for task in readers {
        unfinished += u64::from(join_or_abort(join_deadline, task).await);
    }
    let attached_at_end = attached(&client, &stalled).await;
    let metrics = scrape(&client).await;
    drop(sockets);
    sampler.abort();
    let rss_peak = ctx.t.rss_peak.load(Relaxed).max(rss());
    let shutdown_in_time = timeout(JOIN_LIMIT, server.shutdown()).await.is_ok();
    let figures = Figures {
        max_sessions,
        churners,
        lanes,
        secs: (setup, load),
        attached: (attached_at_start, attached_at_end),
        rss: [rss_start, rss_setup, rss_peak],
        unfinished,
        metrics,
        shutdown_in_time,
    };
    Ok(report(&ctx, figures))
}

/// Joins `task` by `deadline`, or aborts it; whether it had to be aborted.
async fn join_or_abort(deadline: tokio::time::Instant, task: JoinHandle<()>) -> bool {
    let abort = task.abort_handle();
    let finished = matches!(timeout_at(deadline, task).await, Ok(Ok(())));
    if !finished {
        abort.abort();
    }
    !finished
}
