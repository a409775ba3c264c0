//! rmcp's default resume path vs `GaplessEventStore`, side by side in one
//! run, through rmcp's real session layer: what a resume costs and what it
//! returns with each store.
//!
//! # What runs
//!
//! No HTTP, no MCP service: the bench drives rmcp 3.11's public
//! `SessionManager` API on a `LocalSessionManager` (the calls
//! `StreamableHttpService` makes for a `POST` and a `GET` with
//! `Last-Event-ID`) and plays the MCP handler itself on the session's
//! `WorkerTransport` (`Transport::receive`/`send`, what `serve_server` would
//! do). Two managers, identical but for the store:
//!
//! - `rmcp_default`: `LocalSessionManager::default()`. Events go to rmcp's
//!   private in-memory cache `CachedTx` (`R/session/local.rs:235-350`): a
//!   `VecDeque<ServerSseMessage>` per stream capped at
//!   `session_config.channel_capacity` (16), ids `"<index>/<http request>"`,
//!   and a resume is `LocalSessionHandle::resume` → `CachedTx::sync`
//!   (`R/session/local.rs:328-350`, `682-717`): skip to the cursor, clone
//!   the cached `Arc`s into a new channel.
//! - `gapless`: `LocalSessionManager::default().with_event_store(store)`
//!   with `GaplessEventStore::sized_by_kind()` (request streams 256 events
//!   and 256 KiB, standalone streams 1024 events and 1 MiB). rmcp then calls `store_event`
//!   before every send (`R/session/local.rs:294-309`; it still fills its
//!   `CachedTx` as well) and a resume is `replay_events_after`
//!   (`R/session/local.rs:132-143`).
//!
//! (`R` = `rmcp-3.11.0/src/transport/streamable_http_server`: rmcp's source
//! as cargo unpacks it.)
//!
//! Per iteration, untimed: a fresh manager and `N` sessions, each opened and
//! initialized (`create_session`, `initialize_session`). Then, for the `N`
//! sessions concurrently (one tokio task each, 2 worker threads):
//!
//! 1. **stream** (timed for the `stream` ids): `create_stream` with a
//!    `tools/call` carrying a progress token (rmcp opens the request's stream
//!    and stores its priming event), the handler receives the request and
//!    sends `K` = 15 `notifications/progress`, each stored and delivered on the
//!    live stream, which the client reads concurrently. Then the client
//!    drops the live stream (a cut connection).
//! 2. **resume** (timed for the `resume` ids): `resume` with the id of
//!    progress 7 as `Last-Event-ID`; the handler sends the call's result
//!    (stored and routed like any event); the client drains the resumed
//!    stream until it ends (after the result, on both paths).
//!
//! Each id reports one phase's wall time for all `N` sessions (both phases
//! run every iteration; each id's clock covers only its phase).
//! `Throughput::Elements` is the events of that phase: `N × 16` stored (the
//! priming event and 15 progress), `N × 9` replayed (progress 8..=15 and
//! the result). rmcp's default also re-sends the cursor's own event (progress
//! 7: `sync` replays from the cursor inclusive), so it delivers 10 items per
//! resume to gapless's 9; the bench counts and checks both.
//!
//! `K` = 15 keeps the whole stream (priming + 15) inside rmcp's 16-event
//! cache, so both paths can replay it: the cost is compared where both are
//! correct. Beyond that the default path is not: before the groups, the
//! bench streams 40 progress notifications, resumes after progress 8 on both
//! paths and prints what each delivered (rmcp's cache jumps over the evicted
//! events without a signal; gapless replays all of them).
//!
//! A third id, `gapless_shared`, is the `gapless` store over the shared
//! history (`with_history`, a real `redis-server` the bench starts on a
//! free loopback port): every stored event is appended to Redis before
//! rmcp sends it, and the resume is served by the same instance (from its
//! ring). It is what several instances cost per event, not a peer of
//! rmcp's in-process cache.
//!
//! At the end it prints the ratios of the medians (gapless ÷ rmcp default)
//! and the cost per event.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use futures_util::future::join_all;
use futures_util::StreamExt;
use gapless_history::test_support::{Persistence, RedisServer};
use gapless_rmcp::GaplessEventStore;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, SessionTransport,
};
use rmcp::transport::streamable_http_server::session::{SessionId, SessionManager};
use rmcp::transport::Transport;
use serde_json::{json, Value};
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Progress notifications per request: with rmcp's priming event, 16
/// events, exactly rmcp's default cache.
const K: u64 = 15;
/// The cursor: the id of this progress notification.
const CURSOR: u64 = 7;
/// Concurrent sessions.
const SESSIONS: [usize; 2] = [1, 64];
/// The demonstration beyond rmcp's cache.
const LONG_K: u64 = 40;
const LONG_CURSOR: u64 = 8;

const REQUEST_ID: i64 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    RmcpDefault,
    Gapless,
    /// `Gapless` over the shared history in Redis.
    GaplessShared,
}

const PATHS: [Path; 3] = [Path::RmcpDefault, Path::Gapless, Path::GaplessShared];

impl Path {
    fn name(self) -> &'static str {
        match self {
            Self::RmcpDefault => "rmcp_default",
            Self::Gapless => "gapless",
            Self::GaplessShared => "gapless_shared",
        }
    }

    /// A fresh manager (and store); the shared one over the Redis at
    /// `redis`.
    async fn manager(self, redis: &str) -> Arc<LocalSessionManager> {
        let manager = LocalSessionManager::default();
        Arc::new(match self {
            Self::RmcpDefault => manager,
            Self::Gapless => manager.with_event_store(Arc::new(GaplessEventStore::sized_by_kind())),
            Self::GaplessShared => {
                let store = GaplessEventStore::sized_by_kind();
                let config = store.history_config(redis);
                let store = store.with_history(config).await.expect("redis answers");
                manager.with_event_store(Arc::new(store))
            }
        })
    }
}

fn client(value: Value) -> ClientJsonRpcMessage {
    serde_json::from_value(value).expect("a client message")
}

fn server(value: Value) -> ServerJsonRpcMessage {
    serde_json::from_value(value).expect("a server message")
}

/// The messages of one request, built once.
struct Messages {
    initialize: ClientJsonRpcMessage,
    initialized: ServerJsonRpcMessage,
    call: ClientJsonRpcMessage,
    progress: Vec<ServerJsonRpcMessage>,
    result: ServerJsonRpcMessage,
}

impl Messages {
    fn new(k: u64) -> Arc<Self> {
        Arc::new(Self {
            initialize: client(json!({
                "jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": { "name": "bench", "version": "0" },
                },
            })),
            initialized: server(json!({
                "jsonrpc": "2.0", "id": 0,
                "result": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": { "tools": {} },
                    "serverInfo": { "name": "bench", "version": "0" },
                },
            })),
            call: client(json!({
                "jsonrpc": "2.0", "id": REQUEST_ID, "method": "tools/call",
                "params": { "name": "work", "arguments": {}, "_meta": { "progressToken": REQUEST_ID } },
            })),
            progress: (1..=k)
                .map(|n| {
                    server(json!({
                        "jsonrpc": "2.0", "method": "notifications/progress",
                        "params": { "progressToken": REQUEST_ID, "progress": n, "total": k, "message": format!("step {n} of {k}") },
                    }))
                })
                .collect(),
            result: server(json!({
                "jsonrpc": "2.0", "id": REQUEST_ID,
                "result": { "content": [{ "type": "text", "text": "done" }], "isError": false },
            })),
        })
    }
}

struct Session {
    id: SessionId,
    transport: SessionTransport,
}

/// Untimed: `n` initialized sessions.
async fn open(
    manager: &Arc<LocalSessionManager>,
    messages: &Arc<Messages>,
    n: usize,
) -> Vec<Session> {
    let mut sessions = Vec::with_capacity(n);
    for _ in 0..n {
        let (id, mut transport) = manager.create_session().await.expect("create_session");
        let handler = async {
            let request = transport.receive().await.expect("the initialize request");
            assert!(matches!(request, ClientJsonRpcMessage::Request(_)));
            transport
                .send(messages.initialized.clone())
                .await
                .expect("send the initialize result");
        };
        let (response, ()) = futures_util::join!(
            manager.initialize_session(&id, messages.initialize.clone()),
            handler
        );
        response.expect("initialize_session");
        sessions.push(Session { id, transport });
    }
    sessions
}

async fn close(manager: &Arc<LocalSessionManager>, sessions: Vec<Session>) {
    for session in sessions {
        manager
            .close_session(&session.id)
            .await
            .expect("close_session");
        drop(session.transport);
    }
}

fn progress_of(message: &ServerJsonRpcMessage) -> Option<u64> {
    let value = serde_json::to_value(message).ok()?;
    // rmcp's `progress` is an `f64`: it prints back as `8.0`.
    value["params"]["progress"]
        .as_f64()
        .map(|progress| progress as u64)
}

/// Phase 1: the request's stream, `k` progress notifications read live,
/// then the connection is cut. Returns the session and the id of progress
/// `cursor`.
async fn stream(
    manager: Arc<LocalSessionManager>,
    messages: Arc<Messages>,
    mut session: Session,
    cursor: u64,
) -> (Session, String) {
    let live = manager
        .create_stream(&session.id, messages.call.clone())
        .await
        .expect("create_stream");
    let mut live = pin!(live);
    let transport = &mut session.transport;
    let handler = async {
        let request = transport.receive().await.expect("the tools/call request");
        assert!(matches!(request, ClientJsonRpcMessage::Request(_)));
        for message in &messages.progress {
            transport
                .send(message.clone())
                .await
                .expect("send progress");
        }
    };
    let reader = async {
        // The priming event, then the progress notifications.
        let mut cursor_id = None;
        for _ in 0..=messages.progress.len() {
            let item = live.next().await.expect("a live event");
            if item.message.as_deref().and_then(progress_of) == Some(cursor) {
                cursor_id = item.event_id;
            }
        }
        cursor_id.expect("the cursor's event has an id")
    };
    let ((), cursor_id) = futures_util::join!(handler, reader);
    (session, cursor_id)
}

/// Phase 2: resume after `cursor_id`, the result is sent, the resumed
/// stream is drained to its end. Returns the session and the progress
/// numbers delivered (and whether the result came).
async fn resume(
    manager: Arc<LocalSessionManager>,
    messages: Arc<Messages>,
    mut session: Session,
    cursor_id: String,
) -> (Session, Vec<u64>, bool) {
    let replay = manager
        .resume(&session.id, cursor_id)
        .await
        .expect("resume");
    let mut replay = pin!(replay);
    let send = session.transport.send(messages.result.clone());
    let reader = async {
        let mut progress = Vec::new();
        let mut result = false;
        while let Some(item) = replay.next().await {
            match item.message.as_deref() {
                Some(ServerJsonRpcMessage::Response(_)) => result = true,
                Some(message) => progress.extend(progress_of(message)),
                None => {}
            }
        }
        (progress, result)
    };
    let (sent, (progress, result)) = futures_util::join!(send, reader);
    sent.expect("send the result");
    (session, progress, result)
}

#[derive(Default)]
struct Timings {
    stream: Duration,
    resume: Duration,
}

/// One iteration: fresh manager and sessions (untimed), the two phases
/// (timed apart), teardown (untimed). Checks what each resume delivered.
async fn iteration(path: Path, messages: &Arc<Messages>, n: usize, redis: &str) -> Timings {
    let manager = path.manager(redis).await;
    let sessions = open(&manager, messages, n).await;

    let start = Instant::now();
    let tasks = sessions.into_iter().map(|session| {
        tokio::spawn(stream(
            Arc::clone(&manager),
            Arc::clone(messages),
            session,
            CURSOR,
        ))
    });
    let streamed: Vec<_> = join_all(tasks)
        .await
        .into_iter()
        .map(|r| r.expect("task"))
        .collect();
    let stream_time = start.elapsed();

    let start = Instant::now();
    let tasks = streamed.into_iter().map(|(session, cursor_id)| {
        tokio::spawn(resume(
            Arc::clone(&manager),
            Arc::clone(messages),
            session,
            cursor_id,
        ))
    });
    let resumed: Vec<_> = join_all(tasks)
        .await
        .into_iter()
        .map(|r| r.expect("task"))
        .collect();
    let resume_time = start.elapsed();

    let mut sessions = Vec::with_capacity(n);
    for (session, progress, result) in resumed {
        assert!(
            result,
            "{}: the resumed stream carries the result",
            path.name()
        );
        let first = match path {
            // `CachedTx::sync` re-sends the cursor's own event.
            Path::RmcpDefault => CURSOR,
            Path::Gapless | Path::GaplessShared => CURSOR + 1,
        };
        assert_eq!(progress, (first..=K).collect::<Vec<_>>(), "{}", path.name());
        sessions.push(session);
    }
    close(&manager, sessions).await;
    Timings {
        stream: stream_time,
        resume: resume_time,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Beyond rmcp's 16-event cache: what each path delivers after a cursor
/// the cache has evicted.
fn beyond_the_cache(rt: &tokio::runtime::Runtime) {
    let messages = Messages::new(LONG_K);
    println!(
        "beyond rmcp's cache: {LONG_K} progress notifications, the connection cut, resume after progress {LONG_CURSOR}:"
    );
    for path in [Path::RmcpDefault, Path::Gapless] {
        let (progress, result) = rt.block_on(async {
            let manager = path.manager("").await;
            let session = open(&manager, &messages, 1).await.pop().expect("a session");
            let (session, cursor_id) = stream(
                Arc::clone(&manager),
                Arc::clone(&messages),
                session,
                LONG_CURSOR,
            )
            .await;
            let (session, progress, result) = resume(
                Arc::clone(&manager),
                Arc::clone(&messages),
                session,
                cursor_id,
            )
            .await;
            close(&manager, vec![session]).await;
            (progress, result)
        });
        let missing: Vec<u64> = (LONG_CURSOR + 1..=LONG_K)
            .filter(|n| !progress.contains(n))
            .collect();
        let range = match (progress.first(), progress.last()) {
            (Some(first), Some(last)) => format!("progress {first}..={last}"),
            _ => "no progress".to_owned(),
        };
        println!(
            "  {:<12} replayed {} events ({range}){}; missing after the cursor: {}",
            path.name(),
            progress.len(),
            if result { " + the result" } else { "" },
            if missing.is_empty() {
                "none".to_owned()
            } else {
                format!(
                    "{} ({}..={}), with no signal",
                    missing.len(),
                    missing[0],
                    missing[missing.len() - 1]
                )
            },
        );
    }
    println!(
        "  (rmcp's default cache keeps the last {} events of a stream; the groups below stay within them)",
        rmcp::transport::streamable_http_server::session::local::SessionConfig::DEFAULT_CHANNEL_CAPACITY
    );
}

fn sessions(c: &mut Criterion) {
    let rt = runtime();
    beyond_the_cache(&rt);
    let messages = Messages::new(K);
    let redis = RedisServer::start(Persistence::None);
    let redis = redis.url();
    // Warm every path once (and check them) before any clock runs.
    for path in PATHS {
        rt.block_on(iteration(path, &messages, 2, &redis));
    }

    for n in SESSIONS {
        for (phase, events) in [
            ("stream", n as u64 * (K + 1)),
            ("resume", n as u64 * (K - CURSOR + 1)),
        ] {
            let mut group = c.benchmark_group(format!("rmcp_sessions/{phase}"));
            group.throughput(Throughput::Elements(events));
            for path in PATHS {
                group.bench_with_input(BenchmarkId::new(path.name(), n), &n, |b, &n| {
                    b.iter_custom(|iters| {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            let timings = rt.block_on(iteration(path, &messages, n, &redis));
                            total += if phase == "stream" {
                                timings.stream
                            } else {
                                timings.resume
                            };
                        }
                        total
                    })
                });
            }
            group.finish();
        }
    }
}

fn criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .noise_threshold(0.05)
}

/// Where criterion writes its estimates (its own lookup: `CRITERION_HOME`,
/// else the cargo target directory).
fn criterion_dir() -> std::path::PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return home.into();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        std::path::PathBuf::from,
    );
    target.join("criterion")
}

/// The median (ns) criterion just estimated for one id.
fn median_ns(group: &str, id: &str) -> Option<f64> {
    let path = criterion_dir()
        .join(group)
        .join(id)
        .join("new")
        .join("estimates.json");
    let text = std::fs::read_to_string(path).ok()?;
    let value: Value = serde_json::from_str(&text).ok()?;
    value["median"]["point_estimate"].as_f64()
}

/// After the groups: medians, the cost per event and the ratios
/// (gapless ÷ rmcp default).
fn ratios(_: &mut Criterion) {
    if std::env::args().any(|arg| arg == "--test" || arg == "--list") {
        return;
    }
    println!("medians (per phase, all sessions), per event, and gapless ÷ rmcp default:");
    for (phase, per_session) in [("stream", K + 1), ("resume", K - CURSOR + 1)] {
        let group = format!("rmcp_sessions_{phase}");
        for n in SESSIONS {
            let events = (n as u64 * per_session) as f64;
            let default = median_ns(&group, &format!("rmcp_default/{n}"));
            let Some(default) = default else {
                println!(
                    "  {phase} N={n}: no estimates under {}",
                    criterion_dir().display()
                );
                continue;
            };
            let mut line = format!(
                "  {phase:<6} N={n:<2}  rmcp_default {:>8.1} µs ({:>5.0} ns/event)",
                default / 1e3,
                default / events,
            );
            for path in [Path::Gapless, Path::GaplessShared] {
                if let Some(gapless) = median_ns(&group, &format!("{}/{n}", path.name())) {
                    line += &format!(
                        "  {} {:>8.1} µs ({:>5.0} ns/event, ratio {:.2})",
                        path.name(),
                        gapless / 1e3,
                        gapless / events,
                        gapless / default,
                    );
                }
            }
            println!("{line}");
        }
    }
}

criterion_group! {
    name = benches;
    config = criterion();
    targets = sessions, ratios
}
criterion_main!(benches);
