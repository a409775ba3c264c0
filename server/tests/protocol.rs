//! The reference server against `docs/PROTOCOL.md`, over real HTTP on loopback.
//!
//! Written from the protocol page, not from the server's code: each test
//! names the row it checks. Every network wait is bounded (the client's own
//! timeout, plus a deadline around each whole test), and state changes are
//! awaited by polling with a deadline, never by sleeping.

use gapless::session::{GapDetector, Transport};
use gapless::EventId;
use gapless_server::client::{
    is_session_id, parse_epoch, Client, ClientError, Closed, Created, Delivered, Incoming,
    MigratingClient, Next, Refusal, SseStream, StateView, WsStream,
};
use gapless_server::{spawn, RunningServer, ServerConfig};
use reqwest::header::{HeaderValue, CONTENT_TYPE};
use serde_json::Value;
use std::fmt::Debug;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every single network wait.
const IO: Duration = Duration::from_secs(10);
/// A whole test.
const TEST: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

async fn bounded<F: Future>(name: &str, test: F) -> F::Output {
    tokio::time::timeout(TEST, test)
        .await
        .unwrap_or_else(|_| panic!("{name}: exceeded {TEST:?}"))
}

async fn start(config: ServerConfig) -> (RunningServer, Client) {
    let addr = "127.0.0.1:0".parse().expect("a socket address");
    let server = tokio::time::timeout(IO, spawn(config, addr))
        .await
        .expect("spawn timed out")
        .expect("bind 127.0.0.1:0");
    let client = Client::new(server.url())
        .expect("an HTTP client")
        .with_timeout(IO);
    (server, client)
}

async fn stop(server: RunningServer) {
    tokio::time::timeout(IO, server.shutdown())
        .await
        .expect("shutdown did not finish: open streams were not closed");
}

fn small_ring(events: usize) -> ServerConfig {
    ServerConfig {
        ring_events: events,
        ..ServerConfig::default()
    }
}

fn id(epoch: u64, seq: u64) -> EventId {
    EventId { epoch, seq }
}

/// A compact JSON payload that names its session and seq, with text that
/// looks like SSE fields. (Keys in sorted order: byte identity of arbitrary
/// compact JSON has its own test, so a re-serialising server fails there,
/// not everywhere.)
fn payload(tag: usize, n: u64) -> String {
    format!(r#"{{"n":{n},"s":{tag},"t":"id: {n}\n\ndata: x\r\nretry: 1"}}"#)
}

async fn create(client: &Client) -> Created {
    client.create_session().await.expect("POST /session")
}

async fn emit_range(
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
fn refusal<T: Debug>(result: Result<T, ClientError>, what: &str) -> Refusal {
    match result {
        Err(ClientError::Refused(refusal)) => refusal,
        other => panic!("{what}: expected a 409 refusal, got {other:?}"),
    }
}

/// The next SSE item within `IO` (keep-alive comments do not extend it).
async fn try_next_item(stream: &mut SseStream) -> Option<Result<Incoming, ClientError>> {
    tokio::time::timeout(IO, stream.next_item()).await.ok()
}

async fn next_item(stream: &mut SseStream, what: &str) -> Incoming {
    try_next_item(stream)
        .await
        .unwrap_or_else(|| panic!("{what}: nothing within {IO:?}"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

async fn try_next_frame(socket: &mut WsStream) -> Option<Result<Incoming, ClientError>> {
    tokio::time::timeout(IO, socket.next_item()).await.ok()
}

async fn next_frame(socket: &mut WsStream, what: &str) -> Incoming {
    try_next_frame(socket)
        .await
        .unwrap_or_else(|| panic!("{what}: nothing within {IO:?}"))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Reads exactly the events `seqs` from SSE, checking IDs and payloads.
async fn expect_sse(
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
async fn expect_ws(
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
async fn wait_state(
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
struct Answer {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

impl Answer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    fn typed(&self) -> ClientError {
        ClientError::from_parts(self.status, &self.body)
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text()))
    }
}

async fn answer(client: &Client, request: reqwest::RequestBuilder, what: &str) -> Answer {
    let response = client
        .send(request)
        .await
        .unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = tokio::time::timeout(IO, response.bytes())
        .await
        .unwrap_or_else(|_| panic!("{what}: body timed out"))
        .unwrap_or_else(|e| panic!("{what}: body: {e}"))
        .to_vec();
    Answer {
        status,
        content_type,
        body,
    }
}

fn post_json(
    client: &Client,
    path: &str,
    body: impl Into<reqwest::Body>,
) -> reqwest::RequestBuilder {
    client
        .http()
        .post(client.url(path))
        .header(CONTENT_TYPE, "application/json")
        .body(body)
}

/// Checks an error answer's JSON shape: `application/json` with an `error`.
#[track_caller]
fn assert_json_error(answer: &Answer, code: &str, what: &str) {
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

// ---------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------

/// Kills the child on drop (a failed test must not leave a server behind).
struct ChildGuard(std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// PROTOCOL "Running": `--addr 127.0.0.1:0` prints exactly one line
/// `listening on http://127.0.0.1:PORT`; `--ring-events` and `--strict` take
/// effect; SIGTERM closes open SSE and WebSocket streams cleanly and exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_prints_listening_line_and_sigterm_closes_streams_cleanly() {
    bounded("binary", async {
        use std::io::{BufRead, Read};
        let mut child = ChildGuard(
            std::process::Command::new(env!("CARGO_BIN_EXE_gapless-server"))
                .args([
                    "serve",
                    "--addr",
                    "127.0.0.1:0",
                    "--ring-events",
                    "8",
                    "--strict",
                ])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("spawn gapless-server"),
        );
        let stdout = child.0.stdout.take().expect("piped stdout");
        let (line, mut stdout) = tokio::time::timeout(
            IO,
            tokio::task::spawn_blocking(move || {
                let mut reader = std::io::BufReader::new(stdout);
                let mut line = String::new();
                let _ = reader.read_line(&mut line);
                (line, reader)
            }),
        )
        .await
        .expect("no `listening on` line within the deadline")
        .expect("reader thread");
        let url = line
            .strip_suffix('\n')
            .and_then(|l| l.strip_prefix("listening on "))
            .unwrap_or_else(|| panic!("first stdout line is {line:?}"));
        let port: u16 = url
            .strip_prefix("http://127.0.0.1:")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("not http://127.0.0.1:PORT: {line:?}"));
        assert_ne!(port, 0, "the printed port must be the bound one");
        let client = Client::new(url).expect("client").with_timeout(IO);

        // --strict: an upgrade cursor that differs from the acked one.
        let a = create(&client).await;
        emit_range(&client, &a, 0, 1..=3).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 0, 1..=3).await;
        assert_eq!(
            refusal(
                client.upgrade(&a.session, id(a.epoch, 3)).await,
                "strict upgrade"
            ),
            Refusal::CursorMismatch {
                cursor: 3,
                acked: 0
            }
        );
        // --ring-events 8: 20 events leave at most 8 retained.
        let b = create(&client).await;
        emit_range(&client, &b, 1, 1..=20).await;
        let state = client.state(&b.session).await.expect("state");
        assert_eq!(state.published, 20);
        assert!(
            state.published - state.first_retained < 8 && state.first_retained > 1,
            "--ring-events 8 not applied: {state:?}"
        );
        // A WebSocket open at shutdown too.
        let c = create(&client).await;
        emit_range(&client, &c, 2, 1..=1).await;
        let grant = client
            .upgrade(&c.session, c.origin())
            .await
            .expect("upgrade");
        let mut ws = client.connect_ws(&grant).await.expect("ws");
        expect_ws(&mut ws, &c, 2, 1..=1).await;

        let status = std::process::Command::new("kill")
            .args(["-TERM", &child.0.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success());

        match next_item(&mut sse, "SSE at SIGTERM").await {
            Incoming::Closed(Closed { clean: true, .. }) => {}
            other => panic!("SSE must end cleanly on SIGTERM, got {other:?}"),
        }
        match next_frame(&mut ws, "WebSocket at SIGTERM").await {
            Incoming::Closed(Closed {
                code: Some(_),
                clean: true,
                ..
            }) => {}
            other => panic!("WebSocket must get a close frame on SIGTERM, got {other:?}"),
        }
        let deadline = Instant::now() + IO;
        let exit = loop {
            if let Some(exit) = child.0.try_wait().expect("try_wait") {
                break exit;
            }
            assert!(
                Instant::now() < deadline,
                "server did not exit after SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(10)).await; // polling, bounded
        };
        assert!(exit.success(), "exit status after SIGTERM: {exit:?}");
        let mut rest = String::new();
        let _ = stdout.read_to_string(&mut rest);
        assert_eq!(
            rest, "",
            "stdout must hold exactly the one `listening on` line"
        );
    })
    .await;
}

/// `RunningServer::shutdown` closes open streams cleanly (the in-process
/// form of the graceful shutdown).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_open_streams_cleanly() {
    bounded("shutdown", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 0, 1..=2).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 0, 1..=2).await;
        let b = create(&client).await;
        let grant = client
            .upgrade(&b.session, b.origin())
            .await
            .expect("upgrade");
        let mut ws = client.connect_ws(&grant).await.expect("ws");
        stop(server).await;
        assert!(
            matches!(
                next_item(&mut sse, "SSE").await,
                Incoming::Closed(Closed { clean: true, .. })
            ),
            "SSE must end cleanly"
        );
        assert!(
            matches!(
                next_frame(&mut ws, "WS").await,
                Incoming::Closed(Closed {
                    code: Some(_),
                    clean: true,
                    ..
                })
            ),
            "WebSocket must get a close frame"
        );
    })
    .await;
}

// ---------------------------------------------------------------------------
// Resources
// ---------------------------------------------------------------------------

/// `POST /session` → `201 {"session": 32 hex, "epoch": 16 hex}`; `POST
/// events` → `202 {"id": EVENT_ID}`; `GET /session/{id}` figures are JSON
/// integers, the epoch a 16-hex string, transport "none".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_answer_in_the_protocols_wire_forms() {
    bounded("wire forms", async {
        let (server, client) = start(ServerConfig::default()).await;
        let raw = answer(
            &client,
            client.http().post(client.url("/session")),
            "POST /session",
        )
        .await;
        assert_eq!(raw.status, 201, "POST /session: {}", raw.text());
        assert!(
            raw.content_type.starts_with("application/json"),
            "{}",
            raw.content_type
        );
        let body = raw.json();
        let session = body["session"].as_str().expect("session is a string");
        assert!(is_session_id(session), "session ID {session:?}");
        let epoch = parse_epoch(body["epoch"].as_str().expect("epoch is a string"))
            .expect("epoch is 16 lowercase hex digits");

        let raw = answer(
            &client,
            post_json(&client, &format!("/session/{session}/events"), "{\"k\":1}"),
            "emit",
        )
        .await;
        assert_eq!(raw.status, 202, "emit: {}", raw.text());
        assert!(raw.content_type.starts_with("application/json"));
        assert_eq!(raw.json()["id"], Value::String(id(epoch, 1).to_string()));

        let mut seen = std::collections::HashSet::new();
        for _ in 0..16 {
            let created = create(&client).await;
            assert!(seen.insert(created.session.clone()), "session ID reused");
            assert_ne!(created.session, session);
        }
        let created = Created {
            session: session.to_owned(),
            epoch,
        };
        emit_range(&client, &created, 0, 2..=3).await;

        let raw = answer(
            &client,
            client
                .http()
                .get(client.url(&format!("/session/{session}"))),
            "state",
        )
        .await;
        assert_eq!(raw.status, 200);
        let body = raw.json();
        for field in ["acked", "sent", "published", "first_retained"] {
            assert!(
                body[field].is_u64(),
                "`{field}` must be a JSON integer: {body}"
            );
        }
        assert_eq!(body["epoch"], Value::String(format!("{epoch:016x}")));
        assert_eq!(body["transport"], "none");
        let state = client.state(session).await.expect("state");
        assert_eq!(
            (
                state.epoch,
                state.acked,
                state.sent,
                state.published,
                state.first_retained,
                state.transport
            ),
            (epoch, 0, 0, 3, 1, Transport::None)
        );
        stop(server).await;
    })
    .await;
}

/// "An SSE request without Last-Event-ID has cursor 0: its stream starts
/// with the session's first event — events emitted before the client
/// connected are never dropped"; then live; `id:` + compact JSON `data:`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_without_last_event_id_starts_at_the_first_event() {
    bounded("sse from start", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 7, 1..=3).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 7, 1..=3).await;
        emit_range(&client, &a, 7, 4..=6).await;
        expect_sse(&mut sse, &a, 7, 4..=6).await;
        let state = wait_state(&client, &a.session, "sent = 6 on SSE", |s| {
            s.sent == 6 && s.transport == Transport::Sse
        })
        .await;
        assert_eq!(state.acked, 0, "no cursor was ever sent by the client");
        drop(sse);

        // The raw framing: `id: EVENT_ID`, the compact JSON as `data:`, a
        // blank line (line ends normalised, comment lines allowed between).
        let response = client
            .send(
                client
                    .http()
                    .get(client.url(&format!("/session/{}/events", a.session))),
            )
            .await
            .expect("raw SSE");
        assert_eq!(response.status().as_u16(), 200);
        let mut body = response.bytes_stream();
        let (mut raw, mut text) = (String::new(), String::new());
        let want: Vec<String> = (1..=6)
            .map(|n| format!("id: {}\ndata: {}\n\n", id(a.epoch, n), payload(7, n)))
            .collect();
        while !want.iter().all(|frame| text.contains(frame.as_str())) {
            let chunk = tokio::time::timeout(IO, futures_util::StreamExt::next(&mut body))
                .await
                .unwrap_or_else(|_| panic!("raw SSE: frames missing after {IO:?}: {text:?}"))
                .expect("the stream ended early")
                .expect("raw SSE chunk");
            raw.push_str(&String::from_utf8_lossy(&chunk));
            text = raw.replace("\r\n", "\n").replace('\r', "\n");
        }
        stop(server).await;
    })
    .await;
}

/// SSE resume with `Last-Event-ID`: replay cursor+1 ..= published, then
/// live, no hole and no duplicate, while an emitter keeps going.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_resume_replays_then_goes_live_without_hole_or_duplicate() {
    bounded("sse resume", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 1, 1..=5).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 1, 1..=5).await;
        drop(sse);
        emit_range(&client, &a, 1, 6..=10).await;
        let mut sse = client
            .open_sse(&a.session, Some(id(a.epoch, 5)))
            .await
            .expect("resume");
        let emitter = {
            let (client, a) = (client.clone(), a.clone());
            tokio::spawn(async move { emit_range(&client, &a, 1, 11..=200).await })
        };
        let mut detector = GapDetector::new(a.epoch, 5);
        while detector.cursor().seq < 200 {
            match next_item(&mut sse, "resumed SSE").await {
                Incoming::Event(event) => {
                    detector
                        .observe(event.id)
                        .unwrap_or_else(|gap| panic!("resumed SSE: {gap}"));
                    assert_eq!(event.data, payload(1, event.id.seq));
                }
                other => panic!("resumed SSE ended: {other:?}"),
            }
        }
        tokio::time::timeout(IO, emitter)
            .await
            .expect("emitter")
            .expect("emitter task");
        // No duplicate after the live tail either: the next event is 201.
        emit_range(&client, &a, 1, 201..=201).await;
        expect_sse(&mut sse, &a, 1, 201..=201).await;
        let state = client.state(&a.session).await.expect("state");
        assert!(
            state.acked >= 5,
            "Last-Event-ID 5 counts as acked: {state:?}"
        );
        stop(server).await;
    })
    .await;
}

/// `GET events?last_event_id=` is the same as the header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_resume_accepts_the_last_event_id_query_form() {
    bounded("query form", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 3, 1..=4).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 3, 1..=4).await;
        drop(sse);
        let mut sse = client
            .open_sse_query(&a.session, id(a.epoch, 2))
            .await
            .expect("?last_event_id=");
        expect_sse(&mut sse, &a, 3, 3..=4).await;
        emit_range(&client, &a, 3, 5..=5).await;
        expect_sse(&mut sse, &a, 3, 5..=5).await;
        stop(server).await;
    })
    .await;
}

/// `POST ack` → 204 and moves `acked`; a cursor beyond `sent` or of another
/// epoch is refused (never a silent success).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_moves_acked_and_refuses_cursors_it_cannot_vouch_for() {
    bounded("ack", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 0, 1..=6).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 0, 1..=6).await;
        wait_state(&client, &a.session, "sent = 6", |s| s.sent == 6).await;
        client.ack(&a.session, id(a.epoch, 3)).await.expect("ack 3");
        assert_eq!(client.state(&a.session).await.expect("state").acked, 3);
        let raw = answer(
            &client,
            post_json(
                &client,
                &format!("/session/{}/ack", a.session),
                format!(r#"{{"cursor":"{}"}}"#, id(a.epoch, 4)),
            ),
            "ack 4",
        )
        .await;
        assert_eq!(raw.status, 204, "ack: {}", raw.text());
        assert!(raw.body.is_empty(), "204 has no body");
        assert_eq!(
            refusal(client.ack(&a.session, id(a.epoch, 99)).await, "ack ahead"),
            Refusal::CursorAhead {
                cursor: 99,
                sent: 6,
                published: 6
            }
        );
        assert!(matches!(
            refusal(
                client.ack(&a.session, id(a.epoch ^ 1, 1)).await,
                "ack foreign"
            ),
            Refusal::ForeignEpoch { cursor: 1, .. }
        ));
        assert_eq!(client.state(&a.session).await.expect("state").acked, 4);
        stop(server).await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// The seed's three variants
// ---------------------------------------------------------------------------

/// The mid-stream migration case: the client processed 1..=10, reconnects with
/// Last-Event-ID 10, the server emits 11..=13 mid-reconnect, the client
/// upgrades instead with its TRUE cursor 10: the WebSocket's first frames
/// are exactly 11, 12, 13, then live 14.. — not 14.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_variant_1_the_gap_is_replayed_as_the_first_websocket_frames() {
    bounded("mid-stream migration", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 1, 1..=10).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 1, 1..=10).await;
        drop(sse);
        // The transient reconnect: the server may write 11..=13 into it, the
        // client never processes them.
        let transient = client
            .open_sse(&a.session, Some(id(a.epoch, 10)))
            .await
            .expect("transient reconnect");
        emit_range(&client, &a, 1, 11..=13).await;
        let grant = client
            .upgrade(&a.session, id(a.epoch, 10))
            .await
            .expect("upgrade with the true cursor");
        assert_eq!((grant.replay_from, grant.replay_to), (11, 13), "{grant:?}");
        assert_eq!(
            grant.ws,
            format!("/session/{}/ws?ticket={}", a.session, grant.ticket)
        );
        let mut ws = client.connect_ws(&grant).await.expect("ws");
        drop(transient);
        expect_ws(&mut ws, &a, 1, 11..=13).await;
        emit_range(&client, &a, 1, 14..=20).await;
        expect_ws(&mut ws, &a, 1, 14..=20).await;
        let state = wait_state(&client, &a.session, "websocket attached, sent 20", |s| {
            s.transport == Transport::WebSocket && s.sent == 20
        })
        .await;
        assert!(state.acked >= 10);
        stop(server).await;
    })
    .await;
}

/// The evicted-gap case: the ring evicted the gap; the upgrade is refused with
/// `gap_not_covered` and the figures, and so is the SSE resume (before any
/// stream byte), and an SSE request without Last-Event-ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_variant_2_an_evicted_gap_is_refused_with_its_figures() {
    bounded("evicted gap", async {
        let (server, client) = start(small_ring(4)).await;
        let a = create(&client).await;
        emit_range(&client, &a, 2, 1..=2).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 2, 1..=2).await;
        drop(sse);
        emit_range(&client, &a, 2, 3..=20).await;
        let state = client.state(&a.session).await.expect("state");
        assert_eq!(state.published, 20);
        assert!(
            state.first_retained > 3,
            "a 4-event ring must have evicted 3..: {state:?}"
        );
        let expected = Refusal::GapNotCovered {
            cursor: 2,
            first_retained: state.first_retained,
            published: 20,
            evicted: state.first_retained - 3,
        };
        assert_eq!(
            refusal(
                client.upgrade(&a.session, id(a.epoch, 2)).await,
                "upgrade over an evicted gap"
            ),
            expected
        );
        assert_eq!(
            refusal(
                client.open_sse(&a.session, Some(id(a.epoch, 2))).await,
                "SSE resume over an evicted gap"
            ),
            expected
        );
        // Before any stream byte: a JSON 409, not an event stream.
        let raw = answer(
            &client,
            client
                .http()
                .get(client.url(&format!("/session/{}/events", a.session)))
                .header("Last-Event-ID", id(a.epoch, 2).to_string()),
            "SSE 409",
        )
        .await;
        assert_eq!(raw.status, 409);
        assert_json_error(&raw, "gap_not_covered", "SSE resume 409");
        assert_eq!(
            refusal(
                client.open_sse(&a.session, None).await,
                "SSE from 0 after eviction"
            ),
            Refusal::GapNotCovered {
                cursor: 0,
                first_retained: state.first_retained,
                published: 20,
                evicted: state.first_retained - 1,
            }
        );
        // The refused upgrade left no migration in flight, and the MigratingClient
        // reports the gap explicitly instead of skipping it.
        let mut follower = MigratingClient::with_cursor(client.clone(), &a.session, id(a.epoch, 2));
        assert_eq!(
            follower
                .migrate_to_websocket()
                .await
                .expect_err("upgrade must be refused")
                .refusal(),
            Some(&expected)
        );
        assert_eq!(follower.gaps().len(), 1);
        assert_eq!(
            follower.cursor().seq,
            2,
            "a refused upgrade moves no cursor"
        );
        stop(server).await;
    })
    .await;
}

/// The echoed-ID case: a client that upgrades with the server's last-emitted ID
/// (echoed from an emit answer) instead of its own processed cursor is
/// refused with `cursor_ahead` and `cursor, sent, published`; with its true
/// cursor it gets the gap replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_variant_3_an_echoed_server_id_is_refused_as_cursor_ahead() {
    bounded("echoed ID", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 3, 1..=10).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 3, 1..=10).await;
        drop(sse);
        wait_state(&client, &a.session, "the SSE reader gone", |s| {
            s.transport == Transport::None
        })
        .await;
        let mut echoed = a.origin();
        for n in 11..=13 {
            echoed = client
                .emit_raw(&a.session, payload(3, n))
                .await
                .expect("emit");
        }
        assert_eq!(echoed, id(a.epoch, 13));
        let state = client.state(&a.session).await.expect("state");
        assert_eq!((state.sent, state.published), (10, 13), "{state:?}");
        let expected = Refusal::CursorAhead {
            cursor: 13,
            sent: 10,
            published: 13,
        };
        assert_eq!(
            refusal(client.upgrade(&a.session, echoed).await, "echoed upgrade"),
            expected
        );
        assert_eq!(
            refusal(
                client.open_sse(&a.session, Some(echoed)).await,
                "echoed SSE resume"
            ),
            expected
        );
        let raw = answer(
            &client,
            post_json(
                &client,
                &format!("/session/{}/upgrade", a.session),
                format!(r#"{{"cursor":"{echoed}"}}"#),
            ),
            "raw echoed upgrade",
        )
        .await;
        assert_eq!(raw.status, 409);
        assert_json_error(&raw, "cursor_ahead", "echoed upgrade");
        let grant = client
            .upgrade(&a.session, id(a.epoch, 10))
            .await
            .expect("the true cursor is granted");
        assert_eq!((grant.replay_from, grant.replay_to), (11, 13));
        let mut ws = client.connect_ws(&grant).await.expect("ws");
        expect_ws(&mut ws, &a, 3, 11..=13).await;
        stop(server).await;
    })
    .await;
}

/// The other side of the echoed-ID case: the `cursor_ahead` rule must never misfire
/// on a TRUE cursor. A client that just received event n (the last one) and
/// at once upgrades or resumes with cursor n is granted, every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_true_cursor_just_received_is_never_refused_as_ahead() {
    bounded("true cursor race", async {
        let (server, client) = start(ServerConfig::default()).await;
        for round in 0..150u64 {
            let a = create(&client).await;
            let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
            let n = 1 + round % 3;
            emit_range(&client, &a, 0, 1..=n).await;
            expect_sse(&mut sse, &a, 0, 1..=n).await;
            let cursor = id(a.epoch, n);
            if round % 2 == 0 {
                let grant = client
                    .upgrade(&a.session, cursor)
                    .await
                    .unwrap_or_else(|e| {
                        panic!("round {round}: upgrade with the true cursor {n}: {e}")
                    });
                assert_eq!(grant.replay_from, n + 1);
            } else {
                drop(sse);
                client
                    .open_sse(&a.session, Some(cursor))
                    .await
                    .unwrap_or_else(|e| {
                        panic!("round {round}: resume with the true cursor {n}: {e}")
                    });
            }
        }
        stop(server).await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// The other refusals
// ---------------------------------------------------------------------------

/// `foreign_epoch` with `cursor` (an integer) and `epoch` (16 hex: the
/// session's) on SSE header, SSE query, upgrade and ack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_epoch_is_refused_with_cursor_and_epoch() {
    bounded("foreign epoch", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 0, 1..=3).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 0, 1..=3).await;
        drop(sse);
        let other = create(&client).await;
        let foreign = id(other.epoch, 2);
        assert_ne!(other.epoch, a.epoch, "two sessions share an epoch");
        let expected = Refusal::ForeignEpoch {
            cursor: 2,
            epoch: a.epoch,
        };
        assert_eq!(
            refusal(
                client.open_sse(&a.session, Some(foreign)).await,
                "SSE header"
            ),
            expected
        );
        assert_eq!(
            refusal(
                client.open_sse_query(&a.session, foreign).await,
                "SSE query"
            ),
            expected
        );
        assert_eq!(
            refusal(client.upgrade(&a.session, foreign).await, "upgrade"),
            expected
        );
        assert_eq!(
            refusal(client.ack(&a.session, foreign).await, "ack"),
            expected
        );
        let raw = answer(
            &client,
            post_json(
                &client,
                &format!("/session/{}/upgrade", a.session),
                format!(r#"{{"cursor":"{foreign}"}}"#),
            ),
            "raw foreign upgrade",
        )
        .await;
        assert_eq!(raw.status, 409);
        assert_json_error(&raw, "foreign_epoch", "foreign upgrade");
        let body = raw.json();
        assert!(
            body["cursor"].is_u64(),
            "cursor must be a JSON integer: {body}"
        );
        assert_eq!(
            body["epoch"],
            Value::String(format!("{:016x}", a.epoch)),
            "{body}"
        );
        stop(server).await;
    })
    .await;
}

/// `--strict`: an upgrade whose cursor differs from the acked cursor is
/// `cursor_mismatch` with `cursor, acked`; the acked one is granted. The
/// same upgrade on a non-strict server is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_mode_refuses_a_cursor_that_is_not_the_acked_one() {
    bounded("strict", async {
        for strict in [true, false] {
            let (server, client) = start(ServerConfig {
                strict,
                ..ServerConfig::default()
            })
            .await;
            let a = create(&client).await;
            emit_range(&client, &a, 0, 1..=5).await;
            let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
            expect_sse(&mut sse, &a, 0, 1..=5).await;
            drop(sse);
            client.ack(&a.session, id(a.epoch, 3)).await.expect("ack 3");
            let result = client.upgrade(&a.session, id(a.epoch, 5)).await;
            if strict {
                assert_eq!(
                    refusal(result, "strict upgrade"),
                    Refusal::CursorMismatch {
                        cursor: 5,
                        acked: 3
                    }
                );
                let grant = client
                    .upgrade(&a.session, id(a.epoch, 3))
                    .await
                    .expect("the acked cursor is granted");
                assert_eq!((grant.replay_from, grant.replay_to), (4, 5));
                let mut ws = client.connect_ws(&grant).await.expect("ws");
                expect_ws(&mut ws, &a, 0, 4..=5).await;
            } else {
                let grant = result.expect("non-strict: any covered cursor <= sent");
                assert_eq!((grant.replay_from, grant.replay_to), (6, 5));
            }
            stop(server).await;
        }
    })
    .await;
}

/// A second upgrade while one is in flight is `migration_in_progress`;
/// once the first one's WebSocket attached, a new upgrade may start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_upgrade_in_flight_is_migration_in_progress() {
    bounded("in progress", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 0, 1..=3).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 0, 1..=3).await;
        drop(sse);
        let first = client
            .upgrade(&a.session, id(a.epoch, 3))
            .await
            .expect("first upgrade");
        assert_eq!(
            refusal(
                client.upgrade(&a.session, id(a.epoch, 3)).await,
                "second upgrade"
            ),
            Refusal::MigrationInProgress
        );
        let raw = answer(
            &client,
            post_json(
                &client,
                &format!("/session/{}/upgrade", a.session),
                format!(r#"{{"cursor":"{}"}}"#, id(a.epoch, 1)),
            ),
            "raw second upgrade",
        )
        .await;
        assert_eq!(raw.status, 409);
        assert_json_error(&raw, "migration_in_progress", "second upgrade");
        let mut ws = client
            .connect_ws(&first)
            .await
            .expect("the first ticket still works");
        emit_range(&client, &a, 0, 4..=4).await;
        expect_ws(&mut ws, &a, 0, 4..=4).await;
        let again = client
            .upgrade(&a.session, id(a.epoch, 4))
            .await
            .expect("no migration in flight after the handshake");
        assert_eq!(again.replay_from, 5);
        stop(server).await;
    })
    .await;
}

/// Tickets: used twice, expired, another session's, or never issued:
/// `409 {"error": "bad_ticket"}` on the HTTP handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tickets_are_refused_on_the_handshake() {
    bounded("tickets", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        let b = create(&client).await;
        emit_range(&client, &a, 0, 1..=2).await;
        // Another session's ticket.
        let grant = client
            .upgrade(&a.session, a.origin())
            .await
            .expect("upgrade");
        assert_eq!(
            refusal(
                client.connect_ws_ticket(&b.session, &grant.ticket).await,
                "ticket of A on B"
            ),
            Refusal::BadTicket
        );
        // A ticket never issued.
        assert_eq!(
            refusal(
                client
                    .connect_ws_ticket(&a.session, "0123456789abcdef0123456789abcdef")
                    .await,
                "unknown ticket"
            ),
            Refusal::BadTicket
        );
        // Used once: works; twice: refused.
        let mut ws = client.connect_ws(&grant).await.expect("first use");
        expect_ws(&mut ws, &a, 0, 1..=2).await;
        assert_eq!(
            refusal(client.connect_ws(&grant).await, "ticket reused"),
            Refusal::BadTicket
        );
        // The raw handshake answer is a JSON 409.
        let raw = answer(
            &client,
            client
                .http()
                .get(client.url(&grant.ws))
                .header("Connection", "Upgrade")
                .header("Upgrade", "websocket")
                .header("Sec-WebSocket-Version", "13")
                .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            "raw reused handshake",
        )
        .await;
        assert_eq!(raw.status, 409, "{}", raw.text());
        assert_json_error(&raw, "bad_ticket", "reused ticket");
        stop(server).await;

        // Expired: a zero TTL instead of waiting 30 s.
        let (server, client) = start(ServerConfig {
            ticket_ttl: Duration::ZERO,
            ..ServerConfig::default()
        })
        .await;
        let a = create(&client).await;
        let grant = client
            .upgrade(&a.session, a.origin())
            .await
            .expect("upgrade");
        assert_eq!(
            refusal(client.connect_ws(&grant).await, "expired ticket"),
            Refusal::BadTicket
        );
        stop(server).await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// Delivery
// ---------------------------------------------------------------------------

/// "While a WebSocket is attached, the session's SSE stream is closed", and
/// `transport` in GET state moves none → sse → websocket → none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_closes_when_the_websocket_attaches_and_transport_follows() {
    bounded("transport", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        assert_eq!(
            client.state(&a.session).await.expect("state").transport,
            Transport::None
        );
        emit_range(&client, &a, 0, 1..=3).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 0, 1..=3).await;
        wait_state(&client, &a.session, "transport sse", |s| {
            s.transport == Transport::Sse
        })
        .await;
        let grant = client
            .upgrade(&a.session, id(a.epoch, 3))
            .await
            .expect("upgrade");
        let mut ws = client.connect_ws(&grant).await.expect("ws");
        match sse.next_item().await {
            Ok(Incoming::Closed(_)) | Err(ClientError::Http(_)) => {}
            other => panic!("SSE must close when the WebSocket attaches, got {other:?}"),
        }
        wait_state(&client, &a.session, "transport websocket", |s| {
            s.transport == Transport::WebSocket
        })
        .await;
        emit_range(&client, &a, 0, 4..=4).await;
        expect_ws(&mut ws, &a, 0, 4..=4).await;
        drop(ws);
        wait_state(
            &client,
            &a.session,
            "transport none after the client left",
            |s| s.transport == Transport::None,
        )
        .await;
        // And back: SSE from the true cursor, then a polite WebSocket close.
        let mut sse = client
            .open_sse(&a.session, Some(id(a.epoch, 4)))
            .await
            .expect("SSE");
        wait_state(&client, &a.session, "transport sse again", |s| {
            s.transport == Transport::Sse
        })
        .await;
        emit_range(&client, &a, 0, 5..=5).await;
        expect_sse(&mut sse, &a, 0, 5..=5).await;
        drop(sse);
        wait_state(&client, &a.session, "transport none after SSE left", |s| {
            s.transport == Transport::None
        })
        .await;
        stop(server).await;
    })
    .await;
}

/// `DELETE` ends the session (204), closes its transports; afterwards every
/// route answers 404 no_such_session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_ends_the_session_and_closes_its_transports() {
    bounded("delete", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        emit_range(&client, &a, 0, 1..=2).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 0, 1..=2).await;
        let b = create(&client).await;
        emit_range(&client, &b, 1, 1..=1).await;
        let grant = client
            .upgrade(&b.session, b.origin())
            .await
            .expect("upgrade");
        let mut ws = client.connect_ws(&grant).await.expect("ws");
        expect_ws(&mut ws, &b, 1, 1..=1).await;
        client.delete(&a.session).await.expect("DELETE a");
        client.delete(&b.session).await.expect("DELETE b");
        match sse.next_item().await {
            Ok(Incoming::Closed(_)) | Err(ClientError::Http(_)) => {}
            other => panic!("SSE of a deleted session must end, got {other:?}"),
        }
        match ws.next_item().await {
            Ok(Incoming::Closed(_)) | Err(ClientError::WebSocket(_)) => {}
            other => panic!("WebSocket of a deleted session must end, got {other:?}"),
        }
        assert!(matches!(
            client.state(&a.session).await,
            Err(ClientError::NoSuchSession)
        ));
        assert!(matches!(
            client.delete(&a.session).await,
            Err(ClientError::NoSuchSession)
        ));
        assert!(matches!(
            client.emit_raw(&b.session, "1").await,
            Err(ClientError::NoSuchSession)
        ));
        stop(server).await;
    })
    .await;
}

/// Payloads that try to inject SSE fields stay inside `data:`; compact JSON
/// comes back byte-identical through SSE and WebSocket; JSON with raw line
/// breaks as whitespace comes back as the same value, compact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_cannot_inject_sse_fields_and_come_back_byte_identical() {
    bounded("injection", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        let compact: Vec<&str> = vec![
            r#""line\nid: 99\n\nevent: x\nretry: 1\ndata: y""#,
            r#""\n""#,
            r#""\r""#,
            r#""\r\n""#,
            r#""id: 99""#,
            r#""event: x""#,
            r#""retry: 1""#,
            r#"{"b":"id: 99","a":"event: x","c":"retry: 1","d":"\r\n\r\n:comment"}"#,
            r#"["data: z\n\nid: 98",":c\r",{"z":{}}]"#,
            r#"{"b":1,"a":[1.0,1e5,-0.0,0.1,null,true,false]}"#,
            r#""é ☃ 𝄞 \u00e9 \/ \u2028""#,
            "12345678901234567890123",
            "0",
            r#"{}"#,
        ];
        let spaced: Vec<&str> = vec![
            "{\"a\"\n:1}",
            "[\r\n\"id: 99\"\r\n]",
            "{\"k\":\n\"v\"\r}",
            "\n\"retry: 1\"\n",
            "[1,\n:2]", // not JSON: must be refused, not framed
        ];
        let mut sent: Vec<(u64, String, bool)> = Vec::new();
        for text in &compact {
            let got = client
                .emit_raw(&a.session, *text)
                .await
                .unwrap_or_else(|e| panic!("emit {text}: {e}"));
            sent.push((got.seq, (*text).to_owned(), true));
        }
        for text in &spaced {
            let valid = serde_json::from_str::<Value>(text).is_ok();
            match client.emit_raw(&a.session, *text).await {
                Ok(got) => {
                    assert!(valid, "invalid JSON {text:?} was accepted as {got}");
                    sent.push((got.seq, (*text).to_owned(), false));
                }
                Err(ClientError::BadRequest { .. }) if !valid => {}
                Err(e) => panic!("emit {text:?}: {e}"),
            }
        }
        let last = sent.len() as u64;
        // A sentinel: nothing injected may appear before it.
        let sentinel = client
            .emit_raw(&a.session, r#""end""#)
            .await
            .expect("sentinel");
        assert_eq!(sentinel.seq, last + 1, "a refused emit must consume no seq");

        let check = |via: &str, event: &Delivered, mismatches: &mut Vec<String>| {
            let (seq, text, is_compact) = &sent[(event.id.seq - 1) as usize];
            assert_eq!(event.id.seq, *seq);
            let want: Value = serde_json::from_str(text).expect("sent JSON");
            let got: Value = serde_json::from_str(&event.data).unwrap_or_else(|e| {
                panic!(
                    "{via}: event {seq} data is not JSON ({e}): {:?}",
                    event.data
                )
            });
            assert_eq!(got, want, "{via}: event {seq} changed value");
            if *is_compact {
                if event.data != *text {
                    mismatches.push(format!("{via} {text} came back as {}", event.data));
                }
            } else {
                assert!(
                    !event.data.contains(['\n', '\r']),
                    "{via}: payload {text:?} is not compact: {:?}",
                    event.data
                );
            }
        };
        let mut mismatches = Vec::new();
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        for n in 1..=last {
            match next_item(&mut sse, "SSE").await {
                Incoming::Event(event) => {
                    assert_eq!(event.id, id(a.epoch, n), "an injected event or id appeared");
                    check("SSE", &event, &mut mismatches);
                }
                other => panic!("SSE: expected event {n}, got {other:?}"),
            }
        }
        match next_item(&mut sse, "SSE sentinel").await {
            Incoming::Event(event) => assert_eq!(event.id, sentinel),
            other => panic!("expected the sentinel, got {other:?}"),
        }
        assert_eq!(sse.parser().retry(), None, "a payload injected `retry:`");
        drop(sse);

        let grant = client
            .upgrade(&a.session, a.origin())
            .await
            .expect("upgrade from 0");
        let mut ws = client.connect_ws(&grant).await.expect("ws");
        for n in 1..=last {
            match next_frame(&mut ws, "WebSocket").await {
                Incoming::Event(event) => {
                    assert_eq!(event.id, id(a.epoch, n));
                    check("WebSocket", &event, &mut mismatches);
                }
                other => panic!("WebSocket: expected frame {n}, got {other:?}"),
            }
        }
        assert!(
            mismatches.is_empty(),
            "compact JSON must come back byte-identical:\n{}",
            mismatches.join("\n")
        );
        stop(server).await;
    })
    .await;
}

/// The ring of the lapped-reader tests.
const LAP_RING: usize = 16;

/// A reader that falls a full ring behind is not skipped forward: SSE ends
/// with an `event: gap` carrying a JSON body, then closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapped_sse_reader_ends_with_a_gap_event() {
    bounded("lapped SSE", async {
        let (server, client) = start(small_ring(LAP_RING)).await;
        let a = create(&client).await;
        let big = format!("\"{}\"", "x".repeat(256 * 1024 - 2));
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        wait_state(&client, &a.session, "SSE attached", |s| s.transport == Transport::Sse).await;
        let lapped = lap(&client, &a, &big).await;
        let mut last = 0;
        let gap = loop {
            let Some(item) = try_next_item(&mut sse).await else {
                let now = client.state(&a.session).await.expect("state");
                panic!("lapped SSE reader: after {last} events, nothing (no event, no gap) within {IO:?}; lapped at {lapped:?}, now {now:?}");
            };
            match item.unwrap_or_else(|e| panic!("lapped SSE after {last}: {e}")) {
                Incoming::Event(event) => {
                    assert_eq!(event.id, id(a.epoch, last + 1), "a lapped SSE reader was skipped forward");
                    assert_eq!(event.data, big);
                    last += 1;
                }
                Incoming::Gap(refusal) => break refusal,
                Incoming::Closed(closed) => {
                    panic!("SSE closed after {last} without a gap event ({closed:?}); state {lapped:?}")
                }
            }
        };
        check_gap_report(&gap, last, "SSE gap event");
        match next_item(&mut sse, "after the gap").await {
            Incoming::Closed(_) => {}
            other => panic!("the SSE stream must close after the gap event, got {other:?}"),
        }
        stop(server).await;
    })
    .await;
}

/// The WebSocket form: close code 4409 with a JSON reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapped_websocket_closes_with_4409_and_a_json_reason() {
    bounded("lapped WS", async {
        let (server, client) = start(small_ring(LAP_RING)).await;
        let a = create(&client).await;
        let big = format!("\"{}\"", "y".repeat(256 * 1024 - 2));
        let grant = client
            .upgrade(&a.session, a.origin())
            .await
            .expect("upgrade");
        let mut ws = client.connect_ws(&grant).await.expect("ws");
        wait_state(&client, &a.session, "WebSocket attached", |s| {
            s.transport == Transport::WebSocket
        })
        .await;
        let lapped = lap(&client, &a, &big).await;
        let mut last = 0;
        let gap = loop {
            let Some(item) = try_next_frame(&mut ws).await else {
                let now = client.state(&a.session).await.expect("state");
                panic!("lapped WebSocket: after {last} frames, nothing (no frame, no 4409) within {IO:?}; lapped at {lapped:?}, now {now:?}");
            };
            match item.unwrap_or_else(|e| panic!("lapped WebSocket after {last}: {e}")) {
                Incoming::Event(event) => {
                    assert_eq!(
                        event.id,
                        id(a.epoch, last + 1),
                        "a lapped WebSocket was skipped forward"
                    );
                    assert_eq!(event.data, big);
                    last += 1;
                }
                Incoming::Gap(refusal) => break refusal,
                Incoming::Closed(closed) => {
                    panic!(
                        "WebSocket closed after {last} without 4409 ({closed:?}); state {lapped:?}"
                    )
                }
            }
        };
        check_gap_report(&gap, last, "WebSocket 4409 reason");
        stop(server).await;
    })
    .await;
}

/// Emits big payloads into a session whose reader does not read, until the
/// server-side figures show the reader lapped twice over
/// (`first_retained > sent + 1 + 2 * ring`: a server may hold a few events
/// in flight between its ring and the socket, not two rings' worth).
async fn lap(client: &Client, created: &Created, big: &str) -> StateView {
    for n in 1..=800u64 {
        let got = client
            .emit_raw(&created.session, big.to_owned())
            .await
            .unwrap_or_else(|e| panic!("emit {n}: {e}"));
        assert_eq!(got.seq, n);
        let state = client.state(&created.session).await.expect("state");
        if n % 20 == 0 || std::env::var_os("LAP_DEBUG").is_some() {
            eprintln!("lap {n}: {state:?}");
        }
        if state.first_retained > state.sent + 1 + 2 * LAP_RING as u64 {
            return state;
        }
    }
    panic!("emitted 200 MiB to a reader that reads nothing and it never lapped: the server buffers without bound");
}

#[track_caller]
fn check_gap_report(gap: &Refusal, last_delivered: u64, what: &str) {
    match gap {
        Refusal::GapNotCovered {
            cursor,
            first_retained,
            published,
            evicted,
        } => {
            assert_eq!(
                *cursor, last_delivered,
                "{what}: the gap starts after the last event delivered"
            );
            assert!(*first_retained > cursor + 1, "{what}: {gap}");
            assert_eq!(*evicted, first_retained - cursor - 1, "{what}: {gap}");
            assert!(published >= first_retained, "{what}: {gap}");
        }
        other => panic!("{what}: expected a gap_not_covered body naming the gap, got {other}"),
    }
}

/// "If the ring evicts the gap between POST upgrade and the WebSocket
/// handshake, the socket opens and is closed at once with code 4409 and the
/// gap_not_covered body."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_evicted_after_the_grant_closes_the_socket_with_4409() {
    bounded("evicted after grant", async {
        let (server, client) = start(small_ring(4)).await;
        let a = create(&client).await;
        emit_range(&client, &a, 0, 1..=3).await;
        let mut sse = client.open_sse(&a.session, None).await.expect("SSE");
        expect_sse(&mut sse, &a, 0, 1..=3).await;
        drop(sse);
        let grant = client
            .upgrade(&a.session, id(a.epoch, 1))
            .await
            .expect("upgrade");
        assert_eq!((grant.replay_from, grant.replay_to), (2, 3));
        emit_range(&client, &a, 0, 4..=12).await;
        let first_retained = client
            .state(&a.session)
            .await
            .expect("state")
            .first_retained;
        assert!(first_retained > 2);
        let mut ws = client.connect_ws(&grant).await.expect("the socket opens");
        match next_frame(&mut ws, "evicted gap").await {
            Incoming::Gap(refusal) => assert_eq!(
                refusal,
                Refusal::GapNotCovered {
                    cursor: 1,
                    first_retained,
                    published: 12,
                    evicted: first_retained - 2
                }
            ),
            other => panic!("expected close 4409 with gap_not_covered first, got {other:?}"),
        }
        stop(server).await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------

/// `/metrics` is Prometheus text with sessions, events emitted, replayed,
/// evicted, emits that waited at the wrap, migrations granted, and refused
/// by reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_prometheus_text_with_the_protocols_figures() {
    bounded("metrics", async {
        let (server, client) = start(small_ring(4)).await;
        let raw = answer(
            &client,
            client.http().get(client.url("/metrics")),
            "metrics",
        )
        .await;
        assert_eq!(raw.status, 200);
        assert!(
            raw.content_type.starts_with("text/plain"),
            "content type {:?}",
            raw.content_type
        );
        let before = client.metrics().await.expect("metrics");

        let a = create(&client).await;
        let b = create(&client).await;
        emit_range(&client, &a, 0, 1..=10).await; // evicts at least 6
        emit_range(&client, &b, 1, 1..=3).await;
        let mut sse = client.open_sse(&b.session, None).await.expect("SSE");
        expect_sse(&mut sse, &b, 1, 1..=3).await; // replays 3
        drop(sse);
        refusal(client.upgrade(&b.session, id(b.epoch, 99)).await, "ahead");
        refusal(client.upgrade(&a.session, a.origin()).await, "gap");
        let grant = client
            .upgrade(&b.session, id(b.epoch, 3))
            .await
            .expect("granted");
        refusal(
            client.upgrade(&b.session, id(b.epoch, 3)).await,
            "in progress",
        );
        let _ws = client.connect_ws(&grant).await.expect("ws");
        let after = client.metrics().await.expect("metrics");

        let names: Vec<&str> = after.samples.iter().map(|s| s.name.as_str()).collect();
        let total = |m: &gapless_server::client::Metrics,
                     pick: &dyn Fn(&gapless_server::client::Sample) -> bool|
         -> f64 { m.samples.iter().filter(|s| pick(s)).map(|s| s.value).sum() };
        let grew =
            |what: &str, pick: &dyn Fn(&gapless_server::client::Sample) -> bool, at_least: f64| {
                let (was, now) = (total(&before, pick), total(&after, pick));
                assert!(
                    after.samples.iter().any(pick),
                    "no metric for {what} among {names:?}\n{}",
                    after.text
                );
                assert!(
                    now - was >= at_least,
                    "{what}: {was} -> {now}, expected +{at_least}\n{}",
                    after.text
                );
            };
        let sessions = after
            .samples
            .iter()
            .filter(|s| s.name.contains("session") && !s.name.contains("migrat"))
            .map(|s| s.value)
            .fold(0.0, f64::max);
        assert!(
            sessions >= 2.0,
            "a sessions figure >= 2 expected among {names:?}"
        );
        grew("events emitted", &|s| s.name.contains("emitted"), 13.0);
        grew("events replayed", &|s| s.name.contains("replay"), 3.0);
        grew("events evicted", &|s| s.name.contains("evict"), 6.0);
        // One client emitting in turn never waits at the wrap: the counter
        // is exported, and zero.
        grew(
            "wrap waits",
            &|s| s.name == "gapless_emit_wrap_waits_total",
            0.0,
        );
        assert_eq!(
            total(&after, &|s| s.name == "gapless_emit_wrap_waits_total"),
            0.0
        );
        grew(
            "migrations granted",
            &|s| {
                s.name.contains("migrat")
                    && (s.name.contains("grant")
                        || s.labels.iter().any(|(_, v)| v.contains("grant")))
            },
            1.0,
        );
        for reason in ["cursor_ahead", "gap_not_covered", "migration_in_progress"] {
            grew(
                &format!("migrations refused ({reason})"),
                &|s| s.name.contains("migrat") && s.labels.iter().any(|(_, v)| v == reason),
                1.0,
            );
        }
        stop(server).await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Want {
    NoSuchSession,
    BadRequest,
    BodyOverLimit,
    PayloadTooLarge,
}

#[track_caller]
fn want(answer: &Answer, what: &str, want: Want) {
    let typed = answer.typed();
    let ok = match want {
        Want::NoSuchSession => matches!(typed, ClientError::NoSuchSession),
        Want::BadRequest => matches!(typed, ClientError::BadRequest { .. }),
        Want::BodyOverLimit => answer.status == 413,
        Want::PayloadTooLarge => matches!(typed, ClientError::PayloadTooLarge),
    };
    assert!(
        ok,
        "{what}: expected {want:?}, got {} {:?}: {}",
        answer.status,
        answer.content_type,
        answer.text()
    );
    if !matches!(want, Want::BodyOverLimit) {
        assert!(
            answer.content_type.starts_with("application/json"),
            "{what}: error body must be application/json, got {:?}",
            answer.content_type
        );
    }
}

/// The configuration the bad-input battery expects: a ring that cannot hold
/// a 300 KiB payload, a 512 KiB body limit.
fn battery_config() -> ServerConfig {
    ServerConfig {
        ring_events: 4096,
        ring_bytes: 256 << 10,
        max_body: 512 << 10,
        ..ServerConfig::default()
    }
}

/// Every row of the protocol's bad-input table (docs/PROTOCOL.md), against `live` (a session the
/// battery owns) and `deleted`. Returns how many requests it checked; panics
/// on the first wrong answer.
async fn bad_input_battery(client: &Client, live: &Created, deleted: &str) -> usize {
    let mut checked = 0usize;
    let before = client.state(&live.session).await.expect("state").published;
    let e = format!("{:016x}", live.epoch);
    let good = id(live.epoch, 0).to_string();
    let good_body = format!(r#"{{"cursor":"{good}"}}"#);

    // 404 no_such_session: unknown, deleted, malformed session IDs, every route.
    let upper = live.session.to_uppercase();
    let bad_sessions = [
        "0123456789abcdef0123456789abcdef".to_owned(),
        deleted.to_owned(),
        "xyz".to_owned(),
        if upper == live.session {
            "X".repeat(32)
        } else {
            upper
        },
        format!("{}0", live.session),
        live.session[..31].to_owned(),
        "zz%20zz".to_owned(),
        "g123456789abcdef0123456789abcdef".to_owned(),
    ];
    for s in &bad_sessions {
        let routes: Vec<(&str, reqwest::RequestBuilder)> = vec![
            (
                "POST events",
                post_json(client, &format!("/session/{s}/events"), "{}"),
            ),
            (
                "GET events",
                client
                    .http()
                    .get(client.url(&format!("/session/{s}/events"))),
            ),
            (
                "POST ack",
                post_json(client, &format!("/session/{s}/ack"), good_body.clone()),
            ),
            (
                "POST upgrade",
                post_json(client, &format!("/session/{s}/upgrade"), good_body.clone()),
            ),
            (
                "GET state",
                client.http().get(client.url(&format!("/session/{s}"))),
            ),
            (
                "DELETE",
                client.http().delete(client.url(&format!("/session/{s}"))),
            ),
        ];
        for (route, request) in routes {
            let what = format!("{route} on session {s:?}");
            want(
                &answer(client, request, &what).await,
                &what,
                Want::NoSuchSession,
            );
            checked += 1;
        }
        match client
            .connect_ws_ticket(s, "0123456789abcdef0123456789abcdef")
            .await
        {
            Err(ClientError::NoSuchSession) => {}
            other => panic!(
                "WebSocket handshake on session {s:?}: expected 404 no_such_session, got {other:?}"
            ),
        }
        checked += 1;
    }

    // 400 bad_request with a detail: malformed event IDs and cursors.
    let malformed_ids = [
        "abc".to_owned(),
        "7".to_owned(),
        e.clone(),
        format!("{e}-"),
        format!("{e}-01"),
        format!("{e}--1"),
        format!("{e}-+1"),
        format!("{e}-1-2"),
        format!("{e}-x"),
        format!(
            "{}-1",
            e.to_uppercase().replace(|c: char| c.is_ascii_digit(), "A")
        ),
        format!("{}-1", &e[..15]),
        format!("0{e}-1"),
        format!("{e}-18446744073709551616"),
        format!("{e}-1é"),
    ];
    for bad in &malformed_ids {
        let quoted = serde_json::to_string(bad).expect("a JSON string");
        for route in ["ack", "upgrade"] {
            let what = format!("{route} with cursor {bad:?}");
            let request = post_json(
                client,
                &format!("/session/{}/{route}", live.session),
                format!(r#"{{"cursor":{quoted}}}"#),
            );
            want(
                &answer(client, request, &what).await,
                &what,
                Want::BadRequest,
            );
            checked += 1;
        }
        let what = format!("Last-Event-ID {bad:?}");
        let request = client
            .http()
            .get(client.url(&format!("/session/{}/events", live.session)))
            .header("Last-Event-ID", bad.as_str());
        want(
            &answer(client, request, &what).await,
            &what,
            Want::BadRequest,
        );
        let what = format!("?last_event_id={bad:?}");
        let mut url =
            reqwest::Url::parse(&client.url(&format!("/session/{}/events", live.session)))
                .expect("a URL");
        url.query_pairs_mut().append_pair("last_event_id", bad);
        want(
            &answer(client, client.http().get(url), &what).await,
            &what,
            Want::BadRequest,
        );
        checked += 2;
    }
    let what = "Last-Event-ID with non-UTF-8 bytes";
    let request = client
        .http()
        .get(client.url(&format!("/session/{}/events", live.session)))
        .header(
            "Last-Event-ID",
            HeaderValue::from_bytes(b"\xff\xfe-1").expect("obs-text is a valid header value"),
        );
    want(&answer(client, request, what).await, what, Want::BadRequest);
    checked += 1;
    for body in [
        r#"{"cursor":""}"#.to_owned(),
        r#"{"cursor":5}"#.to_owned(),
        r#"{"cursor":null}"#.to_owned(),
        r#"{"cursor":{}}"#.to_owned(),
        r#"{"cursor":["x"]}"#.to_owned(),
        r#"{}"#.to_owned(),
        r#"[]"#.to_owned(),
        r#""cursor""#.to_owned(),
        "not json".to_owned(),
        String::new(),
        format!(r#"{{"cursor":"{good}""#),
        format!(r#"{{"cursor":"{good}"}} trailing"#),
    ] {
        for route in ["ack", "upgrade"] {
            let what = format!("{route} with body {body:?}");
            let request = post_json(
                client,
                &format!("/session/{}/{route}", live.session),
                body.clone(),
            );
            want(
                &answer(client, request, &what).await,
                &what,
                Want::BadRequest,
            );
            checked += 1;
        }
    }
    // Malformed JSON payloads.
    for body in [
        b"{\"a\":".to_vec(),
        Vec::new(),
        b"{} x".to_vec(),
        b"nope".to_vec(),
        b"{'a':1}".to_vec(),
        b"[1,]".to_vec(),
        b"{\"a\":1}}".to_vec(),
        b"\"\xff\"".to_vec(),
        b"\"unterminated".to_vec(),
        b"NaN".to_vec(),
    ] {
        let what = format!("emit body {:?}", String::from_utf8_lossy(&body));
        let request = post_json(client, &format!("/session/{}/events", live.session), body);
        want(
            &answer(client, request, &what).await,
            &what,
            Want::BadRequest,
        );
        checked += 1;
    }

    // 413: a body over the limit; a payload larger than the ring.
    let limit = 512 << 10;
    let what = "emit body over the limit";
    let over = format!("\"{}\"", "o".repeat(limit - 1));
    let request = post_json(client, &format!("/session/{}/events", live.session), over);
    want(
        &answer(client, request, what).await,
        what,
        Want::BodyOverLimit,
    );
    let what = "ack body over the limit";
    let over = format!(r#"{{"cursor":"{good}","pad":"{}"}}"#, "p".repeat(limit));
    let request = post_json(client, &format!("/session/{}/ack", live.session), over);
    want(
        &answer(client, request, what).await,
        what,
        Want::BodyOverLimit,
    );
    let what = "payload larger than the ring";
    let too_big = format!("\"{}\"", "r".repeat(300 << 10));
    let request = post_json(
        client,
        &format!("/session/{}/events", live.session),
        too_big,
    );
    want(
        &answer(client, request, what).await,
        what,
        Want::PayloadTooLarge,
    );
    checked += 3;

    // Nothing above consumed a seq or moved the session.
    let next = client
        .emit_raw(&live.session, "\"after\"")
        .await
        .expect("emit after the battery");
    assert_eq!(next.seq, before + 1, "a refused input consumed a seq");
    checked
}

/// Every row of the bad-input table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_the_tables_answers() {
    bounded("bad input", async {
        let (server, client) = start(battery_config()).await;
        let live = create(&client).await;
        emit_range(&client, &live, 0, 1..=3).await;
        let deleted = create(&client).await;
        client.delete(&deleted.session).await.expect("delete");
        let checked = bad_input_battery(&client, &live, &deleted.session).await;
        eprintln!("bad input: {checked} requests answered per the table");
        // The server still serves, and the live session's events are intact.
        let mut sse = client.open_sse(&live.session, None).await.expect("SSE");
        expect_sse(&mut sse, &live, 0, 1..=3).await;
        stop(server).await;
    })
    .await;
}

/// "Body over the limit (default 1 MiB)": exactly 1 MiB is accepted, one
/// byte more is 413.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_body_limit_is_one_mib() {
    bounded("1 MiB", async {
        let (server, client) = start(ServerConfig::default()).await;
        let a = create(&client).await;
        let exactly = format!("\"{}\"", "m".repeat((1 << 20) - 2));
        let got = client
            .emit_raw(&a.session, exactly)
            .await
            .expect("a 1 MiB body is within the limit");
        assert_eq!(got.seq, 1);
        let over = format!("\"{}\"", "m".repeat((1 << 20) - 1));
        let raw = answer(
            &client,
            post_json(&client, &format!("/session/{}/events", a.session), over),
            "1 MiB + 1",
        )
        .await;
        want(&raw, "1 MiB + 1", Want::BodyOverLimit);
        stop(server).await;
    })
    .await;
}

/// The bad-input table again while other sessions are under concurrent emit
/// and read load: answers unchanged, the server keeps serving, and no
/// already-emitted event is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_under_concurrent_load_loses_nothing() {
    bounded("bad input under load", async {
        const SESSIONS: usize = 8;
        const EVENTS: u64 = 400;
        let (server, client) = start(battery_config()).await;
        let running = Arc::new(AtomicBool::new(true));
        let mut readers = Vec::new();
        let mut emitters = Vec::new();
        for tag in 0..SESSIONS {
            let created = create(&client).await;
            let mut sse = client.open_sse(&created.session, None).await.expect("SSE");
            let (c, s) = (client.clone(), created.clone());
            emitters.push(tokio::spawn(async move { emit_range(&c, &s, tag, 1..=EVENTS).await }));
            readers.push(tokio::spawn(async move {
                expect_sse(&mut sse, &created, tag, 1..=EVENTS).await;
                created
            }));
        }
        let battery = {
            let (client, running) = (client.clone(), running.clone());
            tokio::spawn(async move {
                let live = create(&client).await;
                let deleted = create(&client).await;
                client.delete(&deleted.session).await.expect("delete");
                let (mut passes, mut checked) = (0, 0);
                while passes < 2 || running.load(Ordering::Relaxed) {
                    checked += bad_input_battery(&client, &live, &deleted.session).await;
                    passes += 1;
                }
                (passes, checked)
            })
        };
        for emitter in emitters {
            emitter.await.expect("emitter");
        }
        running.store(false, Ordering::Relaxed);
        let (passes, checked) = battery.await.expect("battery");
        for reader in readers {
            let created = reader.await.expect("reader got every event, in order, intact");
            let state = client.state(&created.session).await.expect("state");
            assert_eq!(state.published, EVENTS);
        }
        create(&client).await;
        client.metrics().await.expect("metrics after the battery");
        eprintln!(
            "bad input under load: {passes} passes, {checked} requests, {SESSIONS} sessions x {EVENTS} events intact"
        );
        stop(server).await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// The big one
// ---------------------------------------------------------------------------

#[derive(Default)]
struct Figures {
    events: AtomicU64,
    migrations: AtomicU64,
    resumes: AtomicU64,
    holes: AtomicU64,
    reported_gaps: AtomicU64,
    replayed_on_upgrade: AtomicU64,
}

/// Reads through `follower` until its cursor reaches `until`, checking every
/// payload; a hole is counted and fails the session.
async fn follow_until(
    follower: &mut MigratingClient,
    tag: usize,
    until: u64,
    figures: &Figures,
) -> Result<(), String> {
    while follower.cursor().seq < until {
        match follower.next().await {
            Ok(Next::Event(event)) => {
                if event.data != payload(tag, event.id.seq) {
                    figures.holes.fetch_add(1, Ordering::Relaxed);
                    return Err(format!(
                        "session {tag}: payload of {} differs: {}",
                        event.id.seq, event.data
                    ));
                }
                figures.events.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Next::Gap(gap)) => {
                figures.reported_gaps.fetch_add(1, Ordering::Relaxed);
                return Err(format!("session {tag}: reported gap {gap:?}"));
            }
            Ok(Next::Closed(closed)) => {
                return Err(format!(
                    "session {tag}: transport closed at {}: {closed:?}",
                    follower.cursor()
                ))
            }
            Err(error @ (ClientError::SilentGap(_) | ClientError::FirstFrame { .. })) => {
                figures.holes.fetch_add(1, Ordering::Relaxed);
                return Err(format!("session {tag}: HOLE {error}"));
            }
            Err(error) => return Err(format!("session {tag}: {error}")),
        }
    }
    Ok(())
}

/// ≥ 20 sessions emitting while their clients read part of the stream over
/// SSE, drop, resume with their true cursor, drop again and migrate to
/// WebSocket with their true cursor (some go back to SSE and migrate again):
/// every client ends with a contiguous sequence identical to what was
/// emitted, and no hole is found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sessions_migrate_with_their_true_cursor_and_find_no_hole() {
    bounded("concurrent migration", async {
        const SESSIONS: usize = 24;
        const EVENTS: u64 = 300;
        let started = Instant::now();
        let (server, client) = start(ServerConfig::default()).await;
        let figures = Arc::new(Figures::default());
        let mut tasks = Vec::new();
        for tag in 0..SESSIONS {
            let (client, figures) = (client.clone(), figures.clone());
            tasks.push(tokio::spawn(async move {
                let created = create(&client).await;
                let emitter = {
                    let (client, created) = (client.clone(), created.clone());
                    tokio::spawn(async move {
                        for n in 1..=EVENTS {
                            let got = client
                                .emit_raw(&created.session, payload(tag, n))
                                .await
                                .map_err(|e| format!("session {tag}: emit {n}: {e}"))?;
                            if got != id(created.epoch, n) {
                                return Err(format!("session {tag}: emit {n} answered {got}"));
                            }
                            if n % 8 == 0 {
                                tokio::task::yield_now().await;
                            }
                        }
                        Ok::<(), String>(())
                    })
                };
                let mut follower = MigratingClient::new(client.clone(), &created);
                let first = 10 + 3 * tag as u64;
                let second = first + 25 + tag as u64;
                follower.follow_sse().await.map_err(|e| format!("session {tag}: SSE: {e}"))?;
                follow_until(&mut follower, tag, first, &figures).await?;
                follower.drop_connection();
                if tag % 2 == 0 {
                    follower.ack().await.map_err(|e| format!("session {tag}: ack: {e}"))?;
                }
                follower.follow_sse().await.map_err(|e| format!("session {tag}: resume: {e}"))?;
                follow_until(&mut follower, tag, second, &figures).await?;
                follower.drop_connection();
                // Non-quiescent on purpose (the seed's condition): events were
                // emitted after the client's cursor and before the upgrade.
                wait_state(&client, &created.session, "events after the cursor", |s| {
                    s.published >= second + 3
                })
                .await;
                let grant = follower
                    .migrate_to_websocket()
                    .await
                    .map_err(|e| format!("session {tag}: migrate: {e}"))?;
                if grant.replay_from != second + 1 || grant.replay_to < second + 3 {
                    return Err(format!("session {tag}: grant {grant:?} after cursor {second}"));
                }
                figures
                    .replayed_on_upgrade
                    .fetch_add(grant.replay_to - grant.replay_from + 1, Ordering::Relaxed);
                if tag % 3 == 0 {
                    // A blip on the WebSocket: back to SSE, then migrate again.
                    let third = second + 40;
                    follow_until(&mut follower, tag, third, &figures).await?;
                    follower.drop_connection();
                    follower.follow_sse().await.map_err(|e| format!("session {tag}: WS->SSE: {e}"))?;
                    follow_until(&mut follower, tag, third + 20, &figures).await?;
                    follower
                        .migrate_to_websocket()
                        .await
                        .map_err(|e| format!("session {tag}: second migration: {e}"))?;
                }
                follow_until(&mut follower, tag, EVENTS, &figures).await?;
                tokio::time::timeout(IO, emitter)
                    .await
                    .map_err(|_| format!("session {tag}: emitter hangs"))?
                    .map_err(|e| format!("session {tag}: emitter: {e}"))??;
                let detector = *follower.detector();
                if detector.received() != EVENTS || detector.reported_lost() != 0 {
                    return Err(format!("session {tag}: detector {detector:?}"));
                }
                figures.migrations.fetch_add(follower.migrations(), Ordering::Relaxed);
                figures.resumes.fetch_add(follower.resumes(), Ordering::Relaxed);
                follower.disconnect().await;
                Ok::<(), String>(())
            }));
        }
        let mut failures = Vec::new();
        for task in tasks {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(failure)) => failures.push(failure),
                Err(panic) => failures.push(format!("task panicked: {panic}")),
            }
        }
        let f = &figures;
        let summary = format!(
            "concurrent migration: {SESSIONS} sessions, {} events emitted, {} delivered, {} SSE streams, {} migrations ({} gap events replayed first on the WebSocket), {} holes, {} reported gaps, {:?}",
            SESSIONS as u64 * EVENTS,
            f.events.load(Ordering::Relaxed),
            f.resumes.load(Ordering::Relaxed),
            f.migrations.load(Ordering::Relaxed),
            f.replayed_on_upgrade.load(Ordering::Relaxed),
            f.holes.load(Ordering::Relaxed),
            f.reported_gaps.load(Ordering::Relaxed),
            started.elapsed()
        );
        println!("{summary}");
        eprintln!("{summary}");
        assert!(failures.is_empty(), "{summary}\n{}", failures.join("\n"));
        assert_eq!(f.holes.load(Ordering::Relaxed), 0);
        assert_eq!(f.reported_gaps.load(Ordering::Relaxed), 0);
        assert_eq!(f.events.load(Ordering::Relaxed), SESSIONS as u64 * EVENTS);
        assert!(f.migrations.load(Ordering::Relaxed) >= SESSIONS as u64);
        let metrics = client.metrics().await.expect("metrics");
        assert!(!metrics.samples.is_empty());
        stop(server).await;
    })
    .await;
}

/// The `MigratingClient` pattern end to end on one session: its true
/// cursor drives resume and migration (first frame = cursor + 1), and a gap
/// the server reports (409 gap_not_covered on resume and on upgrade) is
/// recorded and surfaced, the cursor unmoved until the application accepts
/// the loss explicitly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migrating_client_surfaces_reported_gaps_and_never_skips() {
    bounded("client reports", async {
        let (server, client) = start(small_ring(4)).await;
        let a = create(&client).await;
        emit_range(&client, &a, 0, 1..=3).await;
        let figures = Figures::default();
        let mut follower = MigratingClient::new(client.clone(), &a);
        follower.follow_sse().await.expect("SSE");
        follow_until(&mut follower, 0, 3, &figures)
            .await
            .expect("1..=3");
        // A second client that processed only 1 (its own true cursor).
        let mut behind = MigratingClient::with_cursor(client.clone(), &a.session, id(a.epoch, 1));
        let grant = behind.migrate_to_websocket().await.expect("migrate from 1");
        assert_eq!((grant.replay_from, grant.replay_to), (2, 3));
        follow_until(&mut behind, 0, 3, &figures)
            .await
            .expect("2..=3 first on the WebSocket");
        assert_eq!(behind.migrations(), 1);
        behind.disconnect().await;

        follower.drop_connection();
        emit_range(&client, &a, 0, 4..=20).await; // a 4-event ring evicts 4..=16
        let first_retained = client
            .state(&a.session)
            .await
            .expect("state")
            .first_retained;
        let expected = Refusal::GapNotCovered {
            cursor: 3,
            first_retained,
            published: 20,
            evicted: first_retained - 4,
        };
        assert_eq!(
            follower
                .follow_sse()
                .await
                .expect_err("resume over a gap")
                .refusal(),
            Some(&expected)
        );
        assert_eq!(
            follower
                .migrate_to_websocket()
                .await
                .expect_err("upgrade over a gap")
                .refusal(),
            Some(&expected)
        );
        assert_eq!(follower.gaps().len(), 2, "both refusals are recorded");
        assert_eq!(follower.cursor().seq, 3, "nothing was skipped");
        assert!(matches!(
            follower.next().await,
            Err(ClientError::NotConnected)
        ));
        let gap = follower.gaps()[0].clone();
        assert_eq!(
            follower.accept_gap(&gap).expect("accept"),
            first_retained - 4
        );
        assert_eq!(follower.detector().reported_lost(), first_retained - 4);
        assert_eq!(follower.cursor().seq, first_retained - 1);
        assert_eq!(figures.holes.load(Ordering::Relaxed), 0);
        stop(server).await;
    })
    .await;
}
