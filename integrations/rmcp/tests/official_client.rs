//! Issue 10, item 5: the OFFICIAL Python MCP client (`mcp` 2.3.0, pinned in
//! `tests/python/requirements.txt`, installed by `scripts/mcp-venv.sh`)
//! calls the progress tool of an in-process rmcp server through a proxy
//! that cuts the tool call's stream after N progress notifications; the
//! client resumes with `Last-Event-ID` and the test asserts what the
//! client APPLICATION saw (`tests/python/client.py` prints it):
//!
//! - (a) `covered_resume_*`: every notification exactly once, in order,
//!   then the result;
//! - (b) `uncovered_resume_*`: a ring too small for the outage: the call
//!   fails with -32010 `gap_not_covered`, the progress seen is a prefix
//!   1..k, never a jump, never a success;
//! - (c) `foreign_cursor_auto`: the resume reaches another server (a fresh
//!   store): -32010 `foreign_cursor`;
//! - (d) `resume_after_result_*`: the cut comes after the last
//!   notification and the resume only once the result is stored: the
//!   result arrives exactly once, the progress is complete.
//!
//! `_legacy` runs the client with `mode="legacy"` against rmcp's legacy
//! session mode; `_auto` with `mode="auto"` (which goes stateless against
//! rmcp 3.11) against a stateless server. (c) runs in stateless mode only:
//! in legacy mode the resume carries a session id another server does not
//! know, and rmcp answers 404 before any store is asked.
//!
//! The interpreter is `$GAPLESS_MCP_PYTHON`, else
//! `target/mcp-venv/bin/python` under the workspace; without one the tests
//! FAIL (set `GAPLESS_ALLOW_SKIP=1` to skip them explicitly).
//!
//! `GAPLESS_RMCP_MUTANT` (report only; the committed tests run gapless)
//! swaps the store: `rmcp-cache` (rmcp's own cache: no event store),
//! `naive` (a store that behaves like rmcp's cache: re-sends the cursor's
//! event, saturates an evicted cursor to the oldest event, and answers an
//! unknown cursor with `Err`, which rmcp turns into an empty 200), `err`
//! (gapless that answers every resume with `Err`).

#[path = "../examples/support/progress_tool.rs"]
mod progress_tool;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::response::Response;
use futures_util::StreamExt;
use gapless::sse::Parser;
use gapless::Config;
use gapless_rmcp::{GaplessEventStore, EVENTS_LOST};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use progress_tool::{router, ProgressServer, ToolProgress};
use rmcp::model::{ServerJsonRpcMessage, ServerNotification};
use rmcp::transport::streamable_http_server::session::{
    EventId, EventStore, EventStoreError, EventStream, ServerSseMessage,
};
use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The `retry:` hint: how long the client waits before resuming.
const RETRY: Duration = Duration::from_millis(100);
/// The client's own read timeout (seconds): a client that polls an empty
/// 200 ends with -32001 after it.
const CLIENT_READ_TIMEOUT_S: u64 = 15;
/// The client process is killed after this.
const CLIENT_DEADLINE: Duration = Duration::from_secs(60);
/// Holding a resume waits at most this for the server.
const HOLD_DEADLINE: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `mode="legacy"` against rmcp's legacy session mode.
    Legacy,
    /// `mode="auto"` (stateless against rmcp 3.11) against a stateless server.
    Auto,
}

impl Mode {
    fn client_arg(self) -> &'static str {
        match self {
            Mode::Legacy => "legacy",
            Mode::Auto => "auto",
        }
    }
}

/// When the proxy lets a resume through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hold {
    /// At once.
    No,
    /// Once the server has stored the tool's result (so the outage spans
    /// the whole call).
    UntilResultStored,
    /// Once the server has stored this many progress notifications (a
    /// resume in the middle of the call).
    UntilProgressStored(u32),
}

struct Scenario {
    mode: Mode,
    ring_events: usize,
    count: u32,
    interval_ms: u64,
    /// The proxy cuts the first tools/call stream after this many progress
    /// notifications.
    cut_after: usize,
    hold: Hold,
    /// Send resumes to a second server with its own, fresh store.
    resume_elsewhere: bool,
}

/// What the client application saw, and what the proxy did.
#[derive(Debug)]
struct Outcome {
    json: Value,
    proxy: Vec<String>,
    cuts: usize,
    resumes: usize,
}

impl Outcome {
    fn progress(&self) -> Vec<u64> {
        self.json["progress"]
            .as_array()
            .unwrap_or_else(|| panic!("no progress list: {self}"))
            .iter()
            .map(|p| {
                p.as_u64()
                    .unwrap_or_else(|| panic!("non-integer progress {p}: {self}"))
            })
            .collect()
    }

    fn result(&self) -> &Value {
        &self.json["result"]
    }

    fn error(&self) -> &Value {
        &self.json["error"]
    }

    /// The proxy really cut the stream and the client really resumed: no
    /// scenario passes without the outage it is about.
    fn assert_cut_and_resumed(&self) {
        assert_eq!(
            self.cuts, 1,
            "the proxy cut the tool call's stream once: {self}"
        );
        assert!(
            self.resumes >= 1,
            "the client resumed with Last-Event-ID: {self}"
        );
    }

    fn assert_events_lost(&self, reason: &str) {
        let error = self.error();
        assert!(
            self.result().is_null(),
            "the call must not succeed after lost events (a silent jump): {self}"
        );
        assert_eq!(
            error["code"].as_i64(),
            Some(i64::from(EVENTS_LOST)),
            "the application sees the explicit -32010 error: {self}"
        );
        assert_eq!(error["data"]["reason"], reason, "data.reason: {self}");
    }

    /// The progress seen is 1..=k: no duplicate, no jump.
    fn assert_progress_prefix(&self) -> usize {
        let progress = self.progress();
        let expected: Vec<u64> = (1..=progress.len() as u64).collect();
        assert_eq!(
            progress, expected,
            "progress is a prefix 1..k, each once, in order: {self}"
        );
        progress.len()
    }

    fn assert_complete(&self, count: u32) {
        assert!(
            self.error().is_null(),
            "no error on a covered resume: {self}"
        );
        assert_eq!(
            self.result()["content"][0]["text"],
            format!("sent {count} notifications"),
            "the result arrives: {self}"
        );
        assert_eq!(
            self.progress(),
            (1..=u64::from(count)).collect::<Vec<_>>(),
            "every notification exactly once, in order: {self}"
        );
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "\n  client saw: {}\n  proxy: {}",
            self.json,
            self.proxy.join("\n         ")
        )
    }
}

// ---------------------------------------------------------------- stores

/// What the server stored so far (seen through [`Observed`]).
#[derive(Clone, Copy, Debug, Default)]
struct Stored {
    responses: usize,
    progress: u32,
}

/// A transparent wrapper that reports what its store stored, so the proxy
/// can hold a resume until the result is stored (no sleeps).
struct Observed {
    inner: Arc<dyn EventStore>,
    stored: watch::Sender<Stored>,
}

#[async_trait::async_trait]
impl EventStore for Observed {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<EventId, EventStoreError> {
        let id = self.inner.store_event(stream_id, event).await?;
        if let Some(message) = &event.message {
            match &**message {
                ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_) => {
                    self.stored.send_modify(|stored| stored.responses += 1);
                }
                ServerJsonRpcMessage::Notification(notification)
                    if matches!(
                        notification.notification,
                        ServerNotification::ProgressNotification(_)
                    ) =>
                {
                    self.stored.send_modify(|stored| stored.progress += 1);
                }
                _ => {}
            }
        }
        Ok(id)
    }

    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        self.inner.replay_events_after(last_event_id).await
    }
}

type NaiveStream = (u64, VecDeque<(u64, ServerSseMessage)>);

/// Mutant `naive`: a store that behaves like rmcp's own cache — keeps the
/// last `capacity` events of a stream, replays FROM the cursor (re-sending
/// it), saturates an evicted cursor to the oldest event, answers an unknown
/// cursor with `Err` (an empty 200), and replays a finite snapshot.
struct Naive {
    capacity: usize,
    /// Per stream: the last seq, and the retained (seq, event)s.
    streams: Mutex<HashMap<String, NaiveStream>>,
}

#[async_trait::async_trait]
impl EventStore for Naive {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<EventId, EventStoreError> {
        let mut streams = self.streams.lock().expect("naive store lock");
        let (next, events) = streams.entry(stream_id.to_owned()).or_default();
        *next += 1;
        let id = format!("{stream_id}/{next}");
        let mut event = event.clone();
        event.event_id = Some(id.clone());
        events.push_back((*next, event));
        if events.len() > self.capacity {
            events.pop_front();
        }
        Ok(id)
    }

    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        let (stream, seq) = last_event_id
            .rsplit_once('/')
            .and_then(|(stream, seq)| Some((stream, seq.parse::<u64>().ok()?)))
            .ok_or("malformed cursor")?;
        let streams = self.streams.lock().expect("naive store lock");
        let (_, events) = streams.get(stream).ok_or("unknown cursor")?;
        let replay: Vec<ServerSseMessage> = events
            .iter()
            .filter(|(s, _)| *s >= seq)
            .map(|(_, event)| event.clone())
            .collect();
        Ok(Box::pin(futures_util::stream::iter(replay)))
    }
}

/// Mutant `err`: gapless, but every resume is answered with `Err`.
struct Failing(Arc<dyn EventStore>);

#[async_trait::async_trait]
impl EventStore for Failing {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<EventId, EventStoreError> {
        self.0.store_event(stream_id, event).await
    }

    async fn replay_events_after(&self, _: &str) -> Result<EventStream, EventStoreError> {
        Err("mutant: no replay".into())
    }
}

/// The store a scenario's server gets: gapless, or the mutant named by
/// `GAPLESS_RMCP_MUTANT`, wrapped in [`Observed`]; `None` for rmcp's own
/// cache.
fn make_store(ring_events: usize, stored: watch::Sender<Stored>) -> Option<Arc<dyn EventStore>> {
    let gapless = || -> Arc<dyn EventStore> {
        Arc::new(
            GaplessEventStore::new(Config::default().events(ring_events)).expect("a ring config"),
        )
    };
    let inner: Arc<dyn EventStore> = match std::env::var("GAPLESS_RMCP_MUTANT").as_deref() {
        Err(_) | Ok("" | "none") => gapless(),
        Ok("rmcp-cache") => return None,
        Ok("naive") => Arc::new(Naive {
            capacity: ring_events,
            streams: Mutex::default(),
        }),
        Ok("err") => Arc::new(Failing(gapless())),
        Ok(other) => panic!("GAPLESS_RMCP_MUTANT={other}: expected rmcp-cache, naive or err"),
    };
    Some(Arc::new(Observed { inner, stored }))
}

// ---------------------------------------------------------------- servers

struct Server {
    addr: SocketAddr,
    tool: watch::Receiver<ToolProgress>,
    stored: Option<watch::Receiver<Stored>>,
}

async fn start_server(scenario: &Scenario) -> Server {
    let (tool_tx, tool) = watch::channel(ToolProgress::default());
    let (stored_tx, stored_rx) = watch::channel(Stored::default());
    let store = make_store(scenario.ring_events, stored_tx);
    let stored = store.is_some().then_some(stored_rx);
    let app = router(
        ProgressServer::observed(Arc::new(tool_tx)),
        store,
        scenario.mode == Mode::Auto,
        RETRY,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the server");
    let addr = listener.local_addr().expect("server address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    Server { addr, tool, stored }
}

impl Server {
    /// Waits until the server has stored what `hold` names (with rmcp's
    /// own cache, which cannot be observed, until the tool did it).
    async fn reached(&self, hold: Hold) {
        let waited = match (&self.stored, hold) {
            (_, Hold::No) => Ok(()),
            (Some(stored), hold) => {
                let mut stored = stored.clone();
                tokio::time::timeout(
                    HOLD_DEADLINE,
                    stored.wait_for(|s| match hold {
                        Hold::UntilProgressStored(n) => s.progress >= n,
                        _ => s.responses >= 1,
                    }),
                )
                .await
                .map(|_| ())
            }
            (None, hold) => {
                let mut tool = self.tool.clone();
                tokio::time::timeout(
                    HOLD_DEADLINE,
                    tool.wait_for(|t| match hold {
                        Hold::UntilProgressStored(n) => t.sent >= n,
                        _ => t.returned,
                    }),
                )
                .await
                .map(|_| ())
            }
        };
        waited.unwrap_or_else(|_| panic!("the server reaches {hold:?} within {HOLD_DEADLINE:?}"));
    }
}

// ---------------------------------------------------------------- proxy

struct Proxy {
    upstream: SocketAddr,
    /// Where resumes (GET with Last-Event-ID) go.
    resume_upstream: SocketAddr,
    server: Server,
    cut_after: usize,
    hold: Hold,
    /// The first tools/call was seen (only that one is cut).
    tool_call_seen: AtomicBool,
    cuts: Arc<AtomicUsize>,
    resumes: AtomicUsize,
    log: Arc<Mutex<Vec<String>>>,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl Proxy {
    fn note(&self, line: String) {
        self.log.lock().expect("proxy log").push(line);
    }
}

async fn forward(State(proxy): State<Arc<Proxy>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .expect("read the request body");
    let resume = parts
        .headers
        .get("last-event-id")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let is_tool_call = parts.method == hyper::Method::POST
        && serde_json::from_slice::<Value>(&body)
            .map(|v| v["method"] == "tools/call")
            .unwrap_or(false);
    let mut upstream = proxy.upstream;
    if let Some(cursor) = &resume {
        proxy.resumes.fetch_add(1, Ordering::SeqCst);
        proxy.server.reached(proxy.hold).await;
        if proxy.resume_elsewhere() {
            upstream = proxy.resume_upstream;
        }
        proxy.note(format!(
            "{} resume Last-Event-ID={cursor} -> {upstream}",
            parts.method
        ));
    } else {
        proxy.note(format!(
            "{} {}{}",
            parts.method,
            parts.uri.path(),
            if is_tool_call { " tools/call" } else { "" }
        ));
    }
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut builder = hyper::Request::builder()
        .method(parts.method.clone())
        .uri(format!("http://{upstream}{path}"));
    for (name, value) in &parts.headers {
        if name != hyper::header::HOST {
            builder = builder.header(name, value);
        }
    }
    let upstream_request = builder.body(Full::new(body)).expect("a request");
    let response = match proxy.client.request(upstream_request).await {
        Ok(response) => response,
        Err(error) => {
            proxy.note(format!("  upstream error: {error}"));
            return Response::builder()
                .status(502)
                .body(Body::empty())
                .expect("a response");
        }
    };
    let (mut parts, incoming) = response.into_parts();
    proxy.note(format!("  <- {}", parts.status));
    parts.headers.remove(hyper::header::TRANSFER_ENCODING);
    parts.headers.remove(hyper::header::CONNECTION);
    let event_stream = parts
        .headers
        .get(hyper::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let cut = is_tool_call && event_stream && !proxy.tool_call_seen.swap(true, Ordering::SeqCst);
    let body = if cut {
        Body::from_stream(cutting(
            incoming,
            proxy.cut_after,
            proxy.cuts.clone(),
            proxy.log.clone(),
        ))
    } else {
        Body::new(incoming)
    };
    Response::from_parts(parts, body)
}

impl Proxy {
    fn resume_elsewhere(&self) -> bool {
        self.upstream != self.resume_upstream
    }
}

/// The upstream SSE body, passed through until the end of its `cut_after`-th
/// `notifications/progress` event; then the body ends (the upstream
/// connection is dropped, as by a network cut).
fn cutting(
    incoming: hyper::body::Incoming,
    cut_after: usize,
    cuts: Arc<AtomicUsize>,
    log: Arc<Mutex<Vec<String>>>,
) -> impl futures_util::Stream<Item = Result<Bytes, hyper::Error>> + Send {
    struct Cut {
        body: Option<http_body_util::BodyDataStream<hyper::body::Incoming>>,
        parser: Parser,
        seen: usize,
    }
    let state = Cut {
        body: Some(incoming.into_data_stream()),
        parser: Parser::new(),
        seen: 0,
    };
    futures_util::stream::unfold(state, move |mut state| {
        let cuts = cuts.clone();
        let log = log.clone();
        async move {
            let chunk = match state.body.as_mut()?.next().await? {
                Ok(chunk) => chunk,
                Err(error) => return Some((Err(error), state)),
            };
            // Feed line by line: an event dispatches at its blank line, so
            // the cut lands exactly after the N-th progress event.
            let mut start = 0;
            for (i, byte) in chunk.iter().enumerate() {
                if *byte != b'\n' {
                    continue;
                }
                let mut last_id = None;
                state.parser.push(&chunk[start..=i], |event| {
                    if event.data.contains("notifications/progress") {
                        state.seen += 1;
                        last_id = event.id.clone();
                    }
                });
                start = i + 1;
                if state.seen >= cut_after {
                    cuts.fetch_add(1, Ordering::SeqCst);
                    log.lock().expect("proxy log").push(format!(
                        "  cut after progress #{} (id {})",
                        state.seen,
                        last_id.unwrap_or_default()
                    ));
                    state.body = None;
                    return Some((Ok(chunk.slice(..start)), state));
                }
            }
            state.parser.push(&chunk[start..], |event| {
                if event.data.contains("notifications/progress") {
                    state.seen += 1;
                }
            });
            Some((Ok(chunk), state))
        }
    })
}

// ---------------------------------------------------------------- the client

fn python() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("GAPLESS_MCP_PYTHON") {
        let path = PathBuf::from(path);
        assert!(
            path.exists(),
            "GAPLESS_MCP_PYTHON={} does not exist (run scripts/mcp-venv.sh)",
            path.display()
        );
        return Some(path);
    }
    let default =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/mcp-venv/bin/python");
    if default.exists() {
        return Some(default);
    }
    if std::env::var("GAPLESS_ALLOW_SKIP").as_deref() == Ok("1") {
        eprintln!(
            "SKIPPED (GAPLESS_ALLOW_SKIP=1): no Python with mcp 2.3.0; run scripts/mcp-venv.sh or set GAPLESS_MCP_PYTHON"
        );
        return None;
    }
    panic!(
        "no Python with the official MCP client: run scripts/mcp-venv.sh (creates target/mcp-venv) \
         or set GAPLESS_MCP_PYTHON; GAPLESS_ALLOW_SKIP=1 skips these tests explicitly"
    );
}

/// Runs `client.py` to completion (killed after [`CLIENT_DEADLINE`]) and
/// parses its JSON line.
fn run_client(python: PathBuf, url: String, mode: Mode, count: u32, interval_ms: u64) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/client.py");
    let mut child = Command::new(&python)
        .arg(&script)
        .args([
            url.as_str(),
            mode.client_arg(),
            &count.to_string(),
            &interval_ms.to_string(),
            &CLIENT_READ_TIMEOUT_S.to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("start {}: {error}", python.display()));
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + CLIENT_DEADLINE;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the client") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().expect("stdout reader");
    let stderr = err.join().expect("stderr reader");
    let Some(status) = status else {
        panic!("the Python client did not finish within {CLIENT_DEADLINE:?} (killed)\nstdout: {stdout}\nstderr: {stderr}");
    };
    let line = stdout.lines().rev().find(|l| l.starts_with('{'));
    match line.map(serde_json::from_str::<Value>) {
        Some(Ok(json)) if status.success() => json,
        _ => panic!("the Python client failed ({status})\nstdout: {stdout}\nstderr: {stderr}"),
    }
}

async fn run(scenario: Scenario) -> Option<Outcome> {
    let python = python()?;
    let server = start_server(&scenario).await;
    let upstream = server.addr;
    let resume_upstream = if scenario.resume_elsewhere {
        start_server(&scenario).await.addr
    } else {
        upstream
    };
    let cuts = Arc::new(AtomicUsize::new(0));
    let log = Arc::new(Mutex::new(Vec::new()));
    let proxy = Arc::new(Proxy {
        upstream,
        resume_upstream,
        server,
        cut_after: scenario.cut_after,
        hold: scenario.hold,
        tool_call_seen: AtomicBool::new(false),
        cuts: cuts.clone(),
        resumes: AtomicUsize::new(0),
        log: log.clone(),
        client: Client::builder(TokioExecutor::new()).build_http(),
    });
    let app = axum::Router::new()
        .fallback(forward)
        .with_state(proxy.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the proxy");
    let url = format!(
        "http://{}/mcp",
        listener.local_addr().expect("proxy address")
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let started = Instant::now();
    let json = tokio::task::spawn_blocking(move || {
        run_client(
            python,
            url,
            scenario.mode,
            scenario.count,
            scenario.interval_ms,
        )
    })
    .await
    .expect("the client runner");
    let mut proxy_log = log.lock().expect("proxy log").clone();
    proxy_log.push(format!(
        "client finished in {:?}; the tool: {:?}",
        started.elapsed(),
        *proxy.server.tool.borrow()
    ));
    let outcome = Outcome {
        json,
        proxy: proxy_log,
        cuts: cuts.load(Ordering::SeqCst),
        resumes: proxy.resumes.load(Ordering::SeqCst),
    };
    // Shown with --nocapture (and on failure).
    eprintln!("{outcome}");
    Some(outcome)
}

// ---------------------------------------------------------------- (a)

fn covered(mode: Mode) -> Scenario {
    Scenario {
        mode,
        ring_events: 1024,
        count: 40,
        interval_ms: 10,
        cut_after: 10,
        hold: Hold::No,
        resume_elsewhere: false,
    }
}

async fn covered_resume(mode: Mode) {
    let scenario = covered(mode);
    let count = scenario.count;
    let Some(outcome) = run(scenario).await else {
        return;
    };
    outcome.assert_cut_and_resumed();
    outcome.assert_complete(count);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn covered_resume_legacy() {
    covered_resume(Mode::Legacy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn covered_resume_auto() {
    covered_resume(Mode::Auto).await;
}

// ---------------------------------------------------------------- (b)

async fn uncovered_resume(mode: Mode, hold: Hold) {
    let scenario = Scenario {
        mode,
        ring_events: 16,
        count: 200,
        interval_ms: 2,
        cut_after: 5,
        hold,
        resume_elsewhere: false,
    };
    let Some(outcome) = run(scenario).await else {
        return;
    };
    outcome.assert_cut_and_resumed();
    outcome.assert_events_lost("gap_not_covered");
    let seen = outcome.assert_progress_prefix();
    assert_eq!(
        seen, 5,
        "nothing after the cut reaches the application: {outcome}"
    );
    let data = &outcome.error()["data"];
    let (cursor, first, evicted) = (
        data["cursor"].as_u64(),
        data["first_retained"].as_u64(),
        data["evicted"].as_u64(),
    );
    let (Some(cursor), Some(first), Some(evicted)) = (cursor, first, evicted) else {
        panic!("the error names the lost range (cursor, first_retained, evicted): {outcome}");
    };
    assert!(
        first > cursor + 1,
        "the ring moved past the cursor: {outcome}"
    );
    assert_eq!(
        evicted,
        first - cursor - 1,
        "evicted = the seqs between: {outcome}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncovered_resume_legacy() {
    uncovered_resume(Mode::Legacy, Hold::UntilResultStored).await;
}

/// (b) with the resume in the middle of the call (after 100 of 200
/// notifications are stored): the replay must not jump to what the ring
/// still holds and then follow live to a normal result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncovered_resume_mid_call_legacy() {
    uncovered_resume(Mode::Legacy, Hold::UntilProgressStored(100)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncovered_resume_auto() {
    uncovered_resume(Mode::Auto, Hold::UntilResultStored).await;
}

/// (b) in the middle of the call, stateless.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncovered_resume_mid_call_auto() {
    uncovered_resume(Mode::Auto, Hold::UntilProgressStored(100)).await;
}

// ---------------------------------------------------------------- (c)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_cursor_auto() {
    let scenario = Scenario {
        mode: Mode::Auto,
        ring_events: 1024,
        count: 20,
        interval_ms: 10,
        cut_after: 5,
        hold: Hold::No,
        resume_elsewhere: true,
    };
    let Some(outcome) = run(scenario).await else {
        return;
    };
    outcome.assert_cut_and_resumed();
    outcome.assert_events_lost("foreign_cursor");
    let seen = outcome.assert_progress_prefix();
    assert_eq!(
        seen, 5,
        "nothing after the cut reaches the application: {outcome}"
    );
}

// ---------------------------------------------------------------- (d)

async fn resume_after_result(mode: Mode) {
    let scenario = Scenario {
        mode,
        ring_events: 1024,
        count: 20,
        interval_ms: 5,
        cut_after: 20,
        hold: Hold::UntilResultStored,
        resume_elsewhere: false,
    };
    let count = scenario.count;
    let Some(outcome) = run(scenario).await else {
        return;
    };
    outcome.assert_cut_and_resumed();
    outcome.assert_complete(count);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_after_result_legacy() {
    resume_after_result(Mode::Legacy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_after_result_auto() {
    resume_after_result(Mode::Auto).await;
}
