//! The harness every section shares: one server per test, every wait
//! bounded, typed and raw requests, and `GET /metrics` scraped raw.

use crate::prometheus::Metrics;
use gapless::EventId;
use gapless_client::{
    Client, ClientError, Created, Incoming, Refusal, Request, SseStream, StateView, WsStream,
};
use gapless_server::{RunningServer, ServerConfig};
use serde_json::Value;
use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

#[path = "../common/in_process.rs"]
mod in_process;
#[path = "../common/process.rs"]
mod process;
pub use in_process::{bounded, start, stop, IO};
pub use process::{launch, serve_outcome, ChildGuard, Outcome};

pub fn small_ring(events: usize) -> ServerConfig {
    ServerConfig {
        ring_events: events,
        ..ServerConfig::default()
    }
}

pub fn id(epoch: u64, seq: u64) -> EventId {
    EventId { epoch, seq }
}

/// A compact JSON payload that names its session and seq, with text that
/// looks like SSE fields. (Keys in sorted order: byte identity of arbitrary
/// compact JSON has its own test, so a re-serialising server fails there,
/// not everywhere.)
pub fn payload(tag: usize, n: u64) -> String {
    format!(r#"{{"n":{n},"s":{tag},"t":"id: {n}\n\ndata: x\r\nretry: 1"}}"#)
}

pub async fn create(client: &Client) -> Created {
    client.create_session().await.expect("POST /session")
}

pub async fn emit_range(
    client: &Client,
    created: &Created,
    tag: usize,
    seqs: std::ops::RangeInclusive<u64>,
) {
    for n in seqs {
        let got = client
            .emit_raw(&created.session, payload(tag, n))
            .await
            .unwrap_or_else(|e| panic!("emit {n}: {e}"));
        assert_eq!(
            got,
            id(created.epoch, n),
            "POST events must answer the next ID"
        );
    }
}

#[track_caller]
pub fn refusal<T: Debug>(result: Result<T, ClientError>, what: &str) -> Refusal {
    match result {
        Err(ClientError::Refused(refusal)) => refusal,
        other => panic!("{what}: expected a 409 refusal, got {other:?}"),
    }
}

/// The next SSE item within `IO` (keep-alive comments do not extend it).
pub async fn try_next_item(stream: &mut SseStream) -> Option<Result<Incoming, ClientError>> {
    tokio::time::timeout(IO, stream.next_item()).await.ok()
}

pub async fn next_item(stream: &mut SseStream, what: &str) -> Incoming {
    try_next_item(stream)
        .await
        .unwrap_or_else(|| panic!("{what}: nothing within {IO:?}"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

pub async fn try_next_frame(socket: &mut WsStream) -> Option<Result<Incoming, ClientError>> {
    tokio::time::timeout(IO, socket.next_item()).await.ok()
}

pub async fn next_frame(socket: &mut WsStream, what: &str) -> Incoming {
    try_next_frame(socket)
        .await
        .unwrap_or_else(|| panic!("{what}: nothing within {IO:?}"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Reads exactly the events `seqs` from SSE, checking IDs and payloads.
pub async fn expect_sse(
    stream: &mut SseStream,
    created: &Created,
    tag: usize,
    seqs: std::ops::RangeInclusive<u64>,
) {
    for n in seqs {
        match next_item(stream, "SSE").await {
            Incoming::Event(event) => {
                assert_eq!(event.id, id(created.epoch, n), "SSE: expected event {n}");
                assert_eq!(event.data, payload(tag, n), "SSE payload of {n}");
            }
            other => panic!("SSE: expected event {n}, got {other:?}"),
        }
    }
}

/// Reads exactly the events `seqs` from a WebSocket.
pub async fn expect_ws(
    socket: &mut WsStream,
    created: &Created,
    tag: usize,
    seqs: std::ops::RangeInclusive<u64>,
) {
    for n in seqs {
        match next_frame(socket, "WebSocket").await {
            Incoming::Event(event) => {
                assert_eq!(
                    event.id,
                    id(created.epoch, n),
                    "WebSocket: expected frame {n}"
                );
                assert_eq!(event.data, payload(tag, n), "WebSocket payload of {n}");
            }
            other => panic!("WebSocket: expected frame {n}, got {other:?}"),
        }
    }
}

/// Polls `GET /session/{id}` until `done`, with a deadline.
pub async fn wait_state(
    client: &Client,
    session: &str,
    what: &str,
    done: impl Fn(&StateView) -> bool,
) -> StateView {
    let deadline = Instant::now() + IO;
    let mut interval = tokio::time::interval(Duration::from_millis(5));
    loop {
        interval.tick().await;
        let state = client
            .state(session)
            .await
            .unwrap_or_else(|e| panic!("GET state while waiting for {what}: {e}"));
        assert!(
            state.acked <= state.sent && state.sent <= state.published,
            "invariant acked <= sent <= published broken: {state:?}"
        );
        if done(&state) {
            return state;
        }
        assert!(
            Instant::now() < deadline,
            "waited {IO:?} for {what}; last state {state:?}"
        );
    }
}

/// A raw answer, for requests the typed helpers would not make.
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub headers: axum::http::HeaderMap,
    pub body: Vec<u8>,
}

impl Answer {
    /// The header `name` as text, if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    pub fn typed(&self) -> ClientError {
        ClientError::from_parts(self.status, &self.body)
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text()))
    }
}

pub async fn answer(client: &Client, request: Request, what: &str) -> Answer {
    let response = client
        .send(request)
        .await
        .unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let headers = response.headers().clone();
    let body = client
        .read_body(response)
        .await
        .unwrap_or_else(|e| panic!("{what}: body: {e}"))
        .to_vec();
    Answer {
        status,
        content_type,
        headers,
        body,
    }
}

pub fn post_json(client: &Client, path: &str, body: impl Into<bytes::Bytes>) -> Request {
    client.post(path).json_body(body)
}

/// `text` percent-encoded for a query value: every byte but the unreserved
/// ones (RFC 3986 §2.3) as `%XX`.
pub fn query_escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Checks an error answer's JSON shape: `application/json` with an `error`.
#[track_caller]
pub fn assert_json_error(answer: &Answer, code: &str, what: &str) {
    assert!(
        answer.content_type.starts_with("application/json"),
        "{what}: error body must be application/json, got {:?}: {}",
        answer.content_type,
        answer.text()
    );
    let body = answer.json();
    assert_eq!(
        body.get("error").and_then(Value::as_str),
        Some(code),
        "{what}: body {body}"
    );
}

/// `GET /metrics` as served, raw: 200, Prometheus text (`text/plain`,
/// UTF-8), parsed with the tests' own parser.
pub async fn scrape(client: &Client) -> Metrics {
    let raw = answer(client, client.get("/metrics"), "GET /metrics").await;
    assert_eq!(raw.status, 200, "GET /metrics: {}", raw.text());
    assert!(
        raw.content_type.starts_with("text/plain"),
        "GET /metrics: content type {:?}",
        raw.content_type
    );
    let text =
        std::str::from_utf8(&raw.body).unwrap_or_else(|e| panic!("GET /metrics is not UTF-8: {e}"));
    Metrics::parse(text).unwrap_or_else(|e| panic!("GET /metrics: {e}"))
}

/// Polls `condition` every 10 ms until it holds or `within` passes; the
/// wait is bounded and the loop is the synchronisation (no fixed sleep).
pub async fn eventually<F, Fut>(what: &str, within: Duration, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !condition().await {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(10)).await; // polling, bounded
    }
}

/// A `limits_tripped_total{kind}` figure from `/metrics`.
pub async fn tripped(client: &Client, kind: &str) -> f64 {
    scrape(client)
        .await
        .value("gapless_limits_tripped_total", &[("kind", kind)])
        .unwrap_or_else(|| panic!("/metrics has no limits_tripped_total{{kind={kind:?}}}"))
}

/// An SSE request written by hand on a raw socket that is then never read:
/// a client that stopped reading.
pub async fn stalled_sse(server: &RunningServer, session: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut tcp = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connect");
    let request = format!(
        "GET /session/{session}/events HTTP/1.1\r\nhost: {}\r\naccept: text/event-stream\r\n\r\n",
        server.addr()
    );
    tcp.write_all(request.as_bytes()).await.expect("request");
    tcp
}

/// Sends `signal` (`"TERM"`, `"INT"`) to the child.
pub fn signal(child: &ChildGuard, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &child.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -{signal}");
}

/// The child's exit status once it exits, or a panic after `within`.
pub async fn exit_within(
    child: &mut ChildGuard,
    within: Duration,
    what: &str,
) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(exit) = child.0.try_wait().expect("try_wait") {
            return exit;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still running after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await; // polling, bounded
    }
}

/// Opens `GET /session/{session}/events` raw and reads until `count`
/// events came, then decodes the same chunks with both our parser and the
/// independent oracle (`eventsource-stream`), asserts they dispatched the
/// same events, and returns them (ours).
pub async fn raw_sse_events(
    client: &Client,
    session: &str,
    count: usize,
) -> Vec<gapless::sse::SseEvent> {
    use crate::decoders::{oracle, oracle_conforms_on, parse, Dispatched};
    let response = client
        .send(client.get(&format!("/session/{session}/events")))
        .await
        .expect("raw SSE");
    assert_eq!(response.status().as_u16(), 200);
    let mut body = axum::body::Body::new(response.into_body()).into_data_stream();
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        let slices: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        let (ours, _) = parse(&slices);
        if ours.len() >= count {
            let stream: Vec<u8> = chunks.concat();
            assert!(
                oracle_conforms_on(&stream),
                "a stream the oracle cannot judge"
            );
            let theirs = oracle(&slices).expect("the oracle reads the stream");
            let ours_seen: Vec<Dispatched> = ours.iter().map(Dispatched::from).collect();
            let theirs_seen: Vec<Dispatched> = theirs.iter().map(Dispatched::from).collect();
            assert_eq!(ours_seen, theirs_seen, "our parser and the oracle disagree");
            return ours;
        }
        let chunk = tokio::time::timeout(IO, futures_util::StreamExt::next(&mut body))
            .await
            .unwrap_or_else(|_| panic!("raw SSE: {count} events not within {IO:?}"))
            .expect("the stream ended early")
            .expect("raw SSE chunk");
        chunks.push(chunk.to_vec());
    }
}
