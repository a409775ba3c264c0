//! The harness: one in-process server per test, raw requests to
//! `/v1/stream/...` with every wait bounded, the answers' figures, and an
//! SSE body read event by event.

use gapless::sse::{Parser, SseEvent};
use gapless_client::{Client, Method, Request};
use gapless_server::ServerConfig;
use serde_json::Value;

#[path = "../common/in_process.rs"]
mod in_process;
pub use in_process::{bounded, start, stop, IO};

/// The protocol's zero offset: before everything, in every stream.
pub const ZERO: &str = "0000000000000000_0000000000000000";

/// A server whose streams retain at most `events` messages (of 16 KiB
/// in all): retention starts once a stream holds `events`.
pub fn tiny_ring(events: usize) -> ServerConfig {
    ServerConfig {
        ring_events: events,
        ring_bytes: 16 << 10,
        ..ServerConfig::default()
    }
}

/// A whole answer, read within the client's timeout (of an SSE answer,
/// its first bytes).
pub struct Answer {
    pub status: u16,
    pub headers: axum::http::HeaderMap,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body's first 300 characters, for a failure message.
    pub fn brief(&self) -> String {
        let text = self.text();
        match text.char_indices().nth(300) {
            Some((at, _)) => format!("{}... ({} bytes)", &text[..at], self.body.len()),
            None => text,
        }
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.brief()))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// `Stream-Next-Offset`, which must be there.
    #[track_caller]
    pub fn next_offset(&self) -> String {
        self.header("stream-next-offset")
            .unwrap_or_else(|| panic!("no Stream-Next-Offset ({}): {}", self.status, self.brief()))
            .to_owned()
    }
}

pub async fn send(client: &Client, request: Request, what: &str) -> Answer {
    let response = client
        .send(request)
        .await
        .unwrap_or_else(|e| panic!("{what}: no answer: {e}"));
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let event_stream = headers
        .get("content-type")
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"));
    let body = match event_stream {
        // An SSE body does not end: its first bytes, for the message of
        // the assertion that fails on it.
        true => {
            let mut body = axum::body::Body::new(response.into_body()).into_data_stream();
            match tokio::time::timeout(IO, futures_util::StreamExt::next(&mut body)).await {
                Ok(Some(Ok(bytes))) => bytes.to_vec(),
                _ => Vec::new(),
            }
        }
        false => client
            .read_body(response)
            .await
            .unwrap_or_else(|e| panic!("{what}: body: {e}"))
            .to_vec(),
    };
    Answer {
        status,
        headers,
        body,
    }
}

pub fn url(path: &str) -> String {
    format!("/v1/stream/{path}")
}

/// `PUT` a stream of `content_type`; its start offset (the tail of the
/// empty stream).
pub async fn create(client: &Client, path: &str, content_type: &str) -> String {
    let answer = send(
        client,
        client
            .request(Method::PUT, &url(path))
            .header("content-type", content_type),
        "PUT",
    )
    .await;
    assert_eq!(answer.status, 201, "PUT {path}: {}", answer.brief());
    answer.next_offset()
}

/// `PUT` a fork of `source` at `offset`; the fork's tail.
pub async fn fork(client: &Client, path: &str, source: &str, offset: &str) -> String {
    let answer = send(
        client,
        client
            .request(Method::PUT, &url(path))
            .header("stream-forked-from", url(source))
            .header("stream-fork-offset", offset),
        "PUT fork",
    )
    .await;
    assert_eq!(answer.status, 201, "PUT fork {path}: {}", answer.brief());
    answer.next_offset()
}

pub async fn delete(client: &Client, path: &str) {
    let answer = send(client, client.request(Method::DELETE, &url(path)), "DELETE").await;
    assert_eq!(answer.status, 204, "DELETE {path}: {}", answer.brief());
}

pub async fn post(client: &Client, path: &str, content_type: &str, body: &[u8]) -> Answer {
    send(
        client,
        client
            .post(&url(path))
            .header("content-type", content_type)
            .body(body.to_vec()),
        "POST",
    )
    .await
}

/// Appends `body`, which must be stored; the tail after it.
pub async fn append(client: &Client, path: &str, content_type: &str, body: &[u8]) -> String {
    let answer = post(client, path, content_type, body).await;
    assert_eq!(
        answer.status,
        204,
        "append to {path}: {}: {}",
        answer.status,
        answer.brief()
    );
    answer.next_offset()
}

/// `GET /v1/stream/{path}{query}` (`query` empty or starting with `?`).
pub async fn read(client: &Client, path: &str, query: &str) -> Answer {
    send(
        client,
        client.get(&format!("{}{query}", url(path))),
        &format!("GET {path}{query}"),
    )
    .await
}

/// The stream's tail as `HEAD` answers it.
pub async fn tail(client: &Client, path: &str) -> String {
    let answer = send(client, client.request(Method::HEAD, &url(path)), "HEAD").await;
    assert_eq!(answer.status, 200, "HEAD {path}");
    answer.next_offset()
}

/// The JSON body of a `410 gap_not_covered`, exactly.
pub fn gap(offset: &str, earliest: &str, evicted: u64) -> Value {
    serde_json::json!({
        "error": "gap_not_covered",
        "offset": offset,
        "earliest_offset": earliest,
        "evicted": evicted,
    })
}

/// Checks that `answer` is a `410` whose JSON body is exactly `expected`.
#[track_caller]
pub fn assert_gap(answer: &Answer, expected: &Value, what: &str) {
    assert_error(answer, 410, what);
    assert_eq!(&answer.json(), expected, "{what}: the 410's body");
}

/// The `earliest_offset` and `evicted` of a `410 gap_not_covered`.
#[track_caller]
pub fn gap_figures(answer: &Answer, what: &str) -> (String, u64) {
    assert_error(answer, 410, what);
    let body = answer.json();
    let earliest = body["earliest_offset"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no earliest_offset in {body}"))
        .to_owned();
    let evicted = body["evicted"]
        .as_u64()
        .unwrap_or_else(|| panic!("{what}: no evicted in {body}"));
    (earliest, evicted)
}

/// A JSON error answer: `status`, `application/json`, an `error` string.
#[track_caller]
pub fn assert_error(answer: &Answer, status: u16, what: &str) {
    assert_eq!(
        answer.status,
        status,
        "{what}: expected {status}, got {}: {}",
        answer.status,
        answer.brief()
    );
    assert!(
        answer
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{what}: the error answer is JSON: {:?}",
        answer.header("content-type")
    );
    assert!(
        answer.json().get("error").is_some_and(Value::is_string),
        "{what}: the error answer has an `error`: {}",
        answer.brief()
    );
}

/// The message numbers in a JSON-mode read: one value per number (an
/// append of an array gives several values of the same number).
pub fn json_numbers(answer: &Answer) -> Vec<u64> {
    match answer.json() {
        Value::Array(values) => values
            .iter()
            .map(|v| {
                v["n"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("a value without n: {v}"))
            })
            .collect(),
        other => panic!("a JSON-mode read is an array: {other}"),
    }
}

/// An open SSE response read event by event.
pub struct Sse {
    body: axum::body::BodyDataStream,
    parser: Parser,
    ready: std::collections::VecDeque<SseEvent>,
}

impl Sse {
    /// `GET {query}&live=sse`, which must answer `200 text/event-stream`.
    pub async fn open(client: &Client, path: &str, offset: &str) -> Self {
        let response = client
            .send(client.get(&format!("{}?offset={offset}&live=sse", url(path))))
            .await
            .expect("SSE request");
        assert_eq!(response.status().as_u16(), 200, "SSE from {offset}");
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert_eq!(content_type, "text/event-stream");
        Self {
            body: axum::body::Body::new(response.into_body()).into_data_stream(),
            parser: Parser::new(),
            ready: Default::default(),
        }
    }

    /// The next event, or `None` once the body ended; a body that neither
    /// ends nor sends within [`IO`], or breaks, fails the test.
    pub async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            let chunk = tokio::time::timeout(IO, futures_util::StreamExt::next(&mut self.body))
                .await
                .unwrap_or_else(|_| panic!("SSE: no event and no end within {IO:?}"));
            match chunk {
                None => return None,
                Some(Err(error)) => panic!("SSE: the body broke instead of ending: {error}"),
                Some(Ok(bytes)) => {
                    let ready = &mut self.ready;
                    self.parser.push(&bytes, |event| ready.push_back(event));
                }
            }
        }
    }
}

/// A control event's `streamNextOffset`.
#[track_caller]
pub fn control_offset(event: &SseEvent) -> String {
    assert_eq!(
        event.event_type, "control",
        "not a control event: {event:?}"
    );
    let control: Value = serde_json::from_str(&event.data)
        .unwrap_or_else(|e| panic!("control event is not JSON ({e}): {}", event.data));
    control["streamNextOffset"]
        .as_str()
        .unwrap_or_else(|| panic!("control event without streamNextOffset: {control}"))
        .to_owned()
}
