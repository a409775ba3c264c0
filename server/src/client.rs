//! A client for the gapless HTTP protocol (`docs/PROTOCOL.md` in the repository), written from the
//! protocol alone so that it can be copied into any server's test suite.
//!
//! # The pattern
//!
//! A `Last-Event-ID` is a *replay cursor*, not a delivery guarantee. The
//! only cursor that means anything is the client's own: the ID of the last
//! event it actually **processed**. A client that follows a session
//! across reconnects and a migration to WebSocket therefore:
//!
//! 1. keeps its true cursor in a [`GapDetector`], which accepts an event
//!    only if it is exactly `last + 1` (same epoch), and refuses anything
//!    else as a [`SilentGap`];
//! 2. resumes SSE with `Last-Event-ID: <true cursor>` — never with an ID it
//!    merely saw in a header or an emit response (the echoed-ID case);
//! 3. migrates with `POST /session/{id}/upgrade` and **its own cursor in the
//!    body**, then opens the WebSocket with the ticket, and asserts that the
//!    first frame is `cursor + 1` (the mid-stream migration case: the gap is replayed first);
//! 4. treats a `409 gap_not_covered`, an SSE `event: gap` and a WebSocket
//!    close `4409` as an *explicit, reported* gap (the evicted-gap case): the
//!    loss is recorded ([`MigratingClient::gaps`]) and only skipped when the
//!    application says so ([`MigratingClient::accept_gap`]).
//!
//! [`MigratingClient`] is that pattern; [`Client`] has one typed helper per
//! route; [`SseParser`] is an incremental WHATWG event-stream parser (HTML
//! §9.2.6) that any byte stream can feed.
//!
//! ```no_run
//! # async fn demo() -> Result<(), gapless_server::client::ClientError> {
//! use gapless_server::client::{Client, MigratingClient, Next};
//! let client = Client::new("http://127.0.0.1:7070")?;
//! let created = client.create_session().await?;
//! client.emit(&created.session, &serde_json::json!({"hello": 1})).await?;
//!
//! let mut follower = MigratingClient::new(client.clone(), &created);
//! follower.follow_sse().await?;
//! if let Next::Event(event) = follower.next().await? {
//!     println!("{} {}", event.id, event.data);
//! }
//! follower.drop_connection();                 // a network blip
//! follower.migrate_to_websocket().await?;     // upgrade with the TRUE cursor
//! // the first frame is asserted to be cursor + 1
//! # Ok(()) }
//! ```
//!
//! Every network wait has a timeout ([`Client::with_timeout`]); nothing that
//! comes from the network is unwrapped: malformed answers are
//! [`ClientError::Protocol`].

use bytes::Bytes;
use futures_util::{SinkExt, Stream, StreamExt};
use gapless::session::{GapDetector, SilentGap, Transport};
use gapless::EventId;
use serde_json::{Map, Value};
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// The WebSocket close code the protocol uses for a reader that fell a ring
/// behind, or a gap evicted between upgrade and handshake.
pub const CLOSE_GAP: u16 = 4409;

/// Default timeout of every network wait.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------
// Errors and refusals
// ---------------------------------------------------------------------------

/// A `409 Conflict` body, typed: the code and its figures.
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    /// `gap_not_covered`: the ring evicted events after the cursor (seed
    /// evicted-gap case).
    GapNotCovered {
        /// The client's cursor (seq).
        cursor: u64,
        /// The oldest seq the ring still holds.
        first_retained: u64,
        /// The published watermark.
        published: u64,
        /// How many events after the cursor are gone.
        evicted: u64,
    },
    /// `cursor_ahead`: the cursor is beyond what the session was ever sent
    /// (the echoed-ID case: an echoed server ID).
    CursorAhead {
        /// The client's cursor (seq).
        cursor: u64,
        /// The highest seq the server handed to a transport.
        sent: u64,
        /// The published watermark.
        published: u64,
    },
    /// `foreign_epoch`: the cursor belongs to another incarnation.
    ForeignEpoch {
        /// The client's cursor (seq).
        cursor: u64,
        /// The epoch named by the body.
        epoch: u64,
    },
    /// `cursor_mismatch` (strict servers): the cursor differs from `acked`.
    CursorMismatch {
        /// The client's cursor (seq).
        cursor: u64,
        /// The session's acked cursor.
        acked: u64,
    },
    /// `migration_in_progress`: another upgrade is in flight.
    MigrationInProgress,
    /// `bad_ticket`: the ticket was used, expired, or is another session's.
    BadTicket,
    /// A code this client does not know (an extension), with its body.
    Other {
        /// The `error` field.
        code: String,
        /// The whole body.
        body: Value,
    },
}

impl Refusal {
    /// The protocol's code (`"gap_not_covered"`, ...).
    pub fn code(&self) -> &str {
        match self {
            Self::GapNotCovered { .. } => "gap_not_covered",
            Self::CursorAhead { .. } => "cursor_ahead",
            Self::ForeignEpoch { .. } => "foreign_epoch",
            Self::CursorMismatch { .. } => "cursor_mismatch",
            Self::MigrationInProgress => "migration_in_progress",
            Self::BadTicket => "bad_ticket",
            Self::Other { code, .. } => code,
        }
    }

    /// The oldest retained seq, for a gap refusal (where to continue from
    /// if the application accepts the loss).
    pub fn first_retained(&self) -> Option<u64> {
        match self {
            Self::GapNotCovered { first_retained, .. } => Some(*first_retained),
            Self::Other { body, .. } => body.get("first_retained").and_then(Value::as_u64),
            _ => None,
        }
    }

    /// Parses a refusal body `{"error": CODE, ...figures}`. Figures must be
    /// JSON integers (and `epoch` a 16-hex-digit string), as the protocol
    /// says; anything else is an error naming the field.
    ///
    /// # Errors
    /// A description of what does not follow the protocol.
    pub fn from_body(body: &Value) -> Result<Self, String> {
        let object = body
            .as_object()
            .ok_or_else(|| format!("refusal body is not a JSON object: {body}"))?;
        let code = str_field(object, "error")?;
        Ok(match code {
            "gap_not_covered" => Self::GapNotCovered {
                cursor: u64_field(object, "cursor")?,
                first_retained: u64_field(object, "first_retained")?,
                published: u64_field(object, "published")?,
                evicted: u64_field(object, "evicted")?,
            },
            "cursor_ahead" => Self::CursorAhead {
                cursor: u64_field(object, "cursor")?,
                sent: u64_field(object, "sent")?,
                published: u64_field(object, "published")?,
            },
            "foreign_epoch" => Self::ForeignEpoch {
                cursor: u64_field(object, "cursor")?,
                epoch: epoch_field(object, "epoch")?,
            },
            "cursor_mismatch" => Self::CursorMismatch {
                cursor: u64_field(object, "cursor")?,
                acked: u64_field(object, "acked")?,
            },
            "migration_in_progress" => Self::MigrationInProgress,
            "bad_ticket" => Self::BadTicket,
            other => Self::Other {
                code: other.to_owned(),
                body: body.clone(),
            },
        })
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::GapNotCovered {
                cursor,
                first_retained,
                published,
                evicted,
            } => write!(
                f,
                "gap_not_covered: cursor {cursor}, first retained {first_retained}, published {published}, {evicted} evicted"
            ),
            Self::CursorAhead {
                cursor,
                sent,
                published,
            } => write!(
                f,
                "cursor_ahead: cursor {cursor}, sent {sent}, published {published}"
            ),
            Self::ForeignEpoch { cursor, epoch } => {
                write!(f, "foreign_epoch: cursor {cursor}, epoch {epoch:016x}")
            }
            Self::CursorMismatch { cursor, acked } => {
                write!(f, "cursor_mismatch: cursor {cursor}, acked {acked}")
            }
            Self::MigrationInProgress => f.write_str("migration_in_progress"),
            Self::BadTicket => f.write_str("bad_ticket"),
            Self::Other { code, body } => write!(f, "{code}: {body}"),
        }
    }
}

/// Everything a call can fail with. `4xx` answers that follow the protocol
/// are typed; anything that does not is [`ClientError::UnexpectedStatus`]
/// or [`ClientError::Protocol`].
#[derive(Debug)]
pub enum ClientError {
    /// `409` with a refusal body.
    Refused(Refusal),
    /// `404 {"error": "no_such_session"}`.
    NoSuchSession,
    /// `400 {"error": "bad_request", "detail": ...}`.
    BadRequest {
        /// The `detail` field (a JSON string as is, anything else printed).
        detail: String,
    },
    /// `413 {"error": "payload_too_large"}`: the payload is larger than the
    /// session's ring can hold.
    PayloadTooLarge,
    /// `413` for a request body over the server's limit.
    BodyTooLarge {
        /// The response body, as text.
        body: String,
    },
    /// Any other status, or a `4xx` whose body does not follow the protocol.
    UnexpectedStatus {
        /// The HTTP status.
        status: u16,
        /// The response body, as text.
        body: String,
    },
    /// A successful answer whose shape does not follow the protocol.
    Protocol(String),
    /// A transport error from the HTTP client.
    Http(reqwest::Error),
    /// A transport error from the WebSocket client.
    WebSocket(Box<tungstenite::Error>),
    /// A network wait exceeded the client's timeout.
    Timeout {
        /// What was being waited for.
        waiting_for: &'static str,
        /// The timeout.
        after: Duration,
    },
    /// An event arrived that is not `cursor + 1`: a hole, a duplicate, a
    /// reordering or a foreign epoch. Never accepted silently.
    SilentGap(SilentGap),
    /// After a resume or migration, the first event was not `cursor + 1`.
    FirstFrame {
        /// `cursor + 1`.
        expected: u64,
        /// The seq that came first.
        got: u64,
    },
    /// [`MigratingClient::next`] without an open transport.
    NotConnected,
}

impl ClientError {
    /// Types an error answer from its status and body.
    pub fn from_parts(status: u16, body: &[u8]) -> Self {
        let text = String::from_utf8_lossy(body).into_owned();
        let json: Option<Value> = serde_json::from_slice(body).ok();
        let code = json
            .as_ref()
            .and_then(|v| v.get("error"))
            .and_then(Value::as_str);
        match (status, code, json.as_ref()) {
            (409, Some(_), Some(body)) => match Refusal::from_body(body) {
                Ok(refusal) => Self::Refused(refusal),
                Err(detail) => Self::Protocol(format!("409 body: {detail}")),
            },
            (404, Some("no_such_session"), _) => Self::NoSuchSession,
            (400, Some("bad_request"), Some(body)) => match body.get("detail") {
                Some(Value::String(detail)) => Self::BadRequest {
                    detail: detail.clone(),
                },
                Some(detail) if !detail.is_null() => Self::BadRequest {
                    detail: detail.to_string(),
                },
                _ => Self::Protocol(format!("400 bad_request without a detail: {text}")),
            },
            (413, Some("payload_too_large"), _) => Self::PayloadTooLarge,
            (413, _, _) => Self::BodyTooLarge { body: text },
            _ => Self::UnexpectedStatus { status, body: text },
        }
    }

    /// Reads an error response's body and types it.
    pub async fn from_response(response: reqwest::Response, timeout: Duration) -> Self {
        let status = response.status().as_u16();
        match within(timeout, "an error body", response.bytes()).await {
            Ok(Ok(body)) => Self::from_parts(status, &body),
            Ok(Err(error)) => Self::Http(error),
            Err(error) => error,
        }
    }

    /// The refusal, if this is a `409`.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Self::Refused(refusal) => Some(refusal),
            _ => None,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused(refusal) => write!(f, "409 {refusal}"),
            Self::NoSuchSession => f.write_str("404 no_such_session"),
            Self::BadRequest { detail } => write!(f, "400 bad_request: {detail}"),
            Self::PayloadTooLarge => f.write_str("413 payload_too_large"),
            Self::BodyTooLarge { body } => write!(f, "413 body over the limit: {body}"),
            Self::UnexpectedStatus { status, body } => {
                write!(f, "unexpected status {status}: {body}")
            }
            Self::Protocol(detail) => write!(f, "protocol violation: {detail}"),
            Self::Http(error) => write!(f, "HTTP: {error}"),
            Self::WebSocket(error) => write!(f, "WebSocket: {error}"),
            Self::Timeout { waiting_for, after } => {
                write!(f, "timed out after {after:?} waiting for {waiting_for}")
            }
            Self::SilentGap(gap) => write!(f, "{gap}"),
            Self::FirstFrame { expected, got } => write!(
                f,
                "first event after resume/migration was {got}, expected cursor+1 = {expected}"
            ),
            Self::NotConnected => f.write_str("no transport is open"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Http(error) => Some(error),
            Self::WebSocket(error) => Some(error.as_ref()),
            Self::SilentGap(gap) => Some(gap),
            _ => None,
        }
    }
}

impl From<reqwest::Error> for ClientError {
    fn from(error: reqwest::Error) -> Self {
        Self::Http(error)
    }
}

impl From<SilentGap> for ClientError {
    fn from(gap: SilentGap) -> Self {
        Self::SilentGap(gap)
    }
}

async fn within<T>(
    timeout: Duration,
    waiting_for: &'static str,
    future: impl Future<Output = T>,
) -> Result<T, ClientError> {
    tokio::time::timeout(timeout, future)
        .await
        .map_err(|_| ClientError::Timeout {
            waiting_for,
            after: timeout,
        })
}

// ---------------------------------------------------------------------------
// JSON field helpers (strict: seqs are integers, IDs strings)
// ---------------------------------------------------------------------------

fn str_field<'a>(object: &'a Map<String, Value>, name: &str) -> Result<&'a str, String> {
    match object.get(name) {
        Some(Value::String(text)) => Ok(text),
        Some(other) => Err(format!("`{name}` must be a JSON string, got {other}")),
        None => Err(format!("missing `{name}`")),
    }
}

fn u64_field(object: &Map<String, Value>, name: &str) -> Result<u64, String> {
    match object.get(name) {
        Some(value @ Value::Number(_)) => value
            .as_u64()
            .ok_or_else(|| format!("`{name}` must be a non-negative JSON integer, got {value}")),
        Some(other) => Err(format!("`{name}` must be a JSON integer, got {other}")),
        None => Err(format!("missing `{name}`")),
    }
}

/// Parses exactly 16 lowercase hex digits.
pub fn parse_epoch(text: &str) -> Option<u64> {
    if text.len() != 16 || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    u64::from_str_radix(text, 16).ok()
}

fn epoch_field(object: &Map<String, Value>, name: &str) -> Result<u64, String> {
    let text = str_field(object, name)?;
    parse_epoch(text)
        .ok_or_else(|| format!("`{name}` must be 16 lowercase hex digits, got {text:?}"))
}

fn event_id_field(object: &Map<String, Value>, name: &str) -> Result<EventId, String> {
    let text = str_field(object, name)?;
    text.parse()
        .map_err(|error| format!("`{name}` is not an event ID ({error}): {text:?}"))
}

fn json_object(body: &[u8], what: &str) -> Result<Map<String, Value>, ClientError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(other) => Err(ClientError::Protocol(format!(
            "{what}: expected a JSON object, got {other}"
        ))),
        Err(error) => Err(ClientError::Protocol(format!(
            "{what}: body is not JSON ({error}): {}",
            String::from_utf8_lossy(body)
        ))),
    }
}

fn protocol(what: &str) -> impl Fn(String) -> ClientError + '_ {
    move |detail| ClientError::Protocol(format!("{what}: {detail}"))
}

/// Whether `text` is a session ID in the protocol's form: 32 lowercase hex.
pub fn is_session_id(text: &str) -> bool {
    text.len() == 32 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

// ---------------------------------------------------------------------------
// Typed answers
// ---------------------------------------------------------------------------

/// `201` of `POST /session`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Created {
    /// The session ID (32 lowercase hex digits).
    pub session: String,
    /// The session's epoch.
    pub epoch: u64,
}

impl Created {
    /// The "processed nothing" cursor of this session: `<epoch>-0`.
    pub fn origin(&self) -> EventId {
        EventId {
            epoch: self.epoch,
            seq: 0,
        }
    }
}

/// `200` of `POST /session/{id}/upgrade`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpgradeGrant {
    /// The single-use ticket.
    pub ticket: String,
    /// The WebSocket path, `/session/{id}/ws?ticket=T`.
    pub ws: String,
    /// The first seq the WebSocket will carry (`cursor + 1`).
    pub replay_from: u64,
    /// The published watermark when granted.
    pub replay_to: u64,
}

/// `200` of `GET /session/{id}`: server-side figures, never a client cursor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateView {
    /// The session's epoch.
    pub epoch: u64,
    /// Highest seq the client said it processed.
    pub acked: u64,
    /// Highest seq the server handed to a transport.
    pub sent: u64,
    /// The published watermark.
    pub published: u64,
    /// The oldest retained seq.
    pub first_retained: u64,
    /// The attached transport.
    pub transport: Transport,
}

/// One delivered event, from SSE or WebSocket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// Its ID.
    pub id: EventId,
    /// Its payload: the JSON text exactly as received (SSE: the `data:`
    /// lines joined; WebSocket: the raw text of the frame's `data` member).
    pub data: String,
}

impl Delivered {
    /// The payload parsed.
    ///
    /// # Errors
    /// The JSON error (the client already checked it parses).
    pub fn json(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(&self.data)
    }
}

/// How a transport ended without a gap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Closed {
    /// The WebSocket close code, if a close frame came (`None` for SSE).
    pub code: Option<u16>,
    /// The close reason (empty for SSE).
    pub reason: String,
    /// SSE: the body ended properly. WebSocket: a close frame came.
    pub clean: bool,
}

/// What a transport yields.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    /// The next event.
    Event(Delivered),
    /// The server ended the transport naming a gap (SSE `event: gap`,
    /// WebSocket close 4409). Its JSON body, typed.
    Gap(Refusal),
    /// The transport ended.
    Closed(Closed),
}

// ---------------------------------------------------------------------------
// Prometheus text
// ---------------------------------------------------------------------------

/// One sample of the Prometheus text format.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The metric name.
    pub name: String,
    /// Its labels, in order.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

/// `GET /metrics`, parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct Metrics {
    /// The text as served.
    pub text: String,
    /// Every sample line.
    pub samples: Vec<Sample>,
}

impl Metrics {
    /// Parses the Prometheus text exposition format (version 0.0.4):
    /// `# HELP`/`# TYPE`/comment lines, and `name{label="value",...} value
    /// [timestamp]` sample lines.
    ///
    /// # Errors
    /// The first line that is not in the format.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut samples = Vec::new();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let sample =
                parse_sample(line).map_err(|e| format!("line {}: {e}: {line:?}", number + 1))?;
            samples.push(sample);
        }
        Ok(Self {
            text: text.to_owned(),
            samples,
        })
    }

    /// Samples whose name satisfies `pick`.
    pub fn matching<'a>(
        &'a self,
        pick: impl Fn(&str) -> bool + 'a,
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| pick(&s.name))
    }

    /// The value of `name` with (at least) these labels.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|s| s.value)
    }
}

fn is_metric_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or("no value")?;
    let name = &line[..name_end];
    if !is_metric_name(name) {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(after) = rest.strip_prefix('{') {
        let mut chars = after.char_indices().peekable();
        let close;
        loop {
            while chars
                .next_if(|(_, c)| c.is_whitespace() || *c == ',')
                .is_some()
            {}
            let Some(&(start, c)) = chars.peek() else {
                return Err("unterminated labels".into());
            };
            if c == '}' {
                close = start;
                break;
            }
            let mut key_end = start;
            while let Some((i, c)) = chars.next_if(|(_, c)| *c != '=') {
                key_end = i + c.len_utf8();
            }
            let key = after[start..key_end].trim();
            if !is_metric_name(key) || chars.next().map(|(_, c)| c) != Some('=') {
                return Err(format!("bad label name {key:?}"));
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err("label value must be quoted".into());
            }
            let mut value = String::new();
            loop {
                match chars.next() {
                    Some((_, '"')) => break,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, '\\')) => value.push('\\'),
                        Some((_, '"')) => value.push('"'),
                        _ => return Err("bad escape in label value".into()),
                    },
                    Some((_, c)) => value.push(c),
                    None => return Err("unterminated label value".into()),
                }
            }
            labels.push((key.to_owned(), value));
        }
        rest = &after[close + 1..];
    }
    let mut fields = rest.split_whitespace();
    let value = fields.next().ok_or("no value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        other => other
            .parse::<f64>()
            .map_err(|_| format!("bad value {other:?}"))?,
    };
    if let Some(timestamp) = fields.next() {
        timestamp
            .parse::<i64>()
            .map_err(|_| format!("bad timestamp {timestamp:?}"))?;
    }
    if fields.next().is_some() {
        return Err("trailing fields".into());
    }
    Ok(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

// ---------------------------------------------------------------------------
// The route helpers
// ---------------------------------------------------------------------------

/// One typed helper per route of the protocol.
#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    timeout: Duration,
}

impl Client {
    /// A client for the server at `base_url` (`http://HOST:PORT`).
    ///
    /// # Errors
    /// [`ClientError::Http`] if the HTTP client cannot be built.
    pub fn new(base_url: impl Into<String>) -> Result<Self, ClientError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()?;
        Ok(Self::with_http_client(http, base_url))
    }

    /// A client using an existing `reqwest::Client`.
    pub fn with_http_client(http: reqwest::Client, base_url: impl Into<String>) -> Self {
        let mut base = base_url.into();
        while base.ends_with('/') {
            base.pop();
        }
        Self {
            http,
            base,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Every network wait (a response, a stream read) gives up after
    /// `timeout` with [`ClientError::Timeout`].
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The timeout of every network wait.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The server's base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// `base_url + path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// The underlying HTTP client, for requests the helpers do not make
    /// (malformed input in tests, say).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Sends a request with the client's timeout.
    ///
    /// # Errors
    /// [`ClientError::Http`], [`ClientError::Timeout`].
    pub async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ClientError> {
        Ok(within(self.timeout, "a response", request.send()).await??)
    }

    async fn body_of(&self, response: reqwest::Response) -> Result<Bytes, ClientError> {
        Ok(within(self.timeout, "a response body", response.bytes()).await??)
    }

    /// Checks the status; on anything else, types the error answer.
    async fn expect(
        &self,
        response: reqwest::Response,
        status: u16,
    ) -> Result<reqwest::Response, ClientError> {
        if response.status().as_u16() == status {
            Ok(response)
        } else {
            Err(ClientError::from_response(response, self.timeout).await)
        }
    }

    fn json_post(&self, path: &str, body: Vec<u8>) -> reqwest::RequestBuilder {
        self.http
            .post(self.url(path))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
    }

    /// `POST /session` → `201 {"session", "epoch"}`.
    ///
    /// # Errors
    /// As the server answers; [`ClientError::Protocol`] for a malformed ID.
    pub async fn create_session(&self) -> Result<Created, ClientError> {
        let response = self.send(self.http.post(self.url("/session"))).await?;
        let response = self.expect(response, 201).await?;
        let object = json_object(&self.body_of(response).await?, "POST /session")?;
        let what = protocol("POST /session");
        let session = str_field(&object, "session").map_err(&what)?;
        if !is_session_id(session) {
            return Err(what(format!(
                "session ID must be 32 lowercase hex digits, got {session:?}"
            )));
        }
        Ok(Created {
            session: session.to_owned(),
            epoch: epoch_field(&object, "epoch").map_err(&what)?,
        })
    }

    /// `POST /session/{id}/events` with `payload` as compact JSON →
    /// `202 {"id"}`.
    ///
    /// # Errors
    /// As the server answers.
    pub async fn emit(&self, session: &str, payload: &Value) -> Result<EventId, ClientError> {
        let body = serde_json::to_vec(payload)
            .map_err(|e| ClientError::Protocol(format!("payload does not serialise: {e}")))?;
        self.emit_raw(session, body).await
    }

    /// `POST /session/{id}/events` with `body` sent byte for byte.
    ///
    /// # Errors
    /// As the server answers.
    pub async fn emit_raw(
        &self,
        session: &str,
        body: impl Into<Vec<u8>>,
    ) -> Result<EventId, ClientError> {
        let path = format!("/session/{session}/events");
        let response = self.send(self.json_post(&path, body.into())).await?;
        let response = self.expect(response, 202).await?;
        let object = json_object(&self.body_of(response).await?, "POST events")?;
        event_id_field(&object, "id").map_err(protocol("POST events"))
    }

    /// `GET /session/{id}/events` with `Last-Event-ID: cursor` if given.
    ///
    /// # Errors
    /// The `409` refusals (before any stream byte), `404`, `400`.
    pub async fn open_sse(
        &self,
        session: &str,
        last_event_id: Option<EventId>,
    ) -> Result<SseStream, ClientError> {
        let mut request = self
            .http
            .get(self.url(&format!("/session/{session}/events")))
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(cursor) = last_event_id {
            request = request.header("Last-Event-ID", cursor.to_string());
        }
        self.sse_from(request).await
    }

    /// `GET /session/{id}/events?last_event_id=cursor` (the query form).
    ///
    /// # Errors
    /// As [`Client::open_sse`].
    pub async fn open_sse_query(
        &self,
        session: &str,
        cursor: EventId,
    ) -> Result<SseStream, ClientError> {
        let request = self
            .http
            .get(self.url(&format!("/session/{session}/events?last_event_id={cursor}")))
            .header(reqwest::header::ACCEPT, "text/event-stream");
        self.sse_from(request).await
    }

    /// Opens an SSE stream from any request (custom headers in tests).
    ///
    /// # Errors
    /// As [`Client::open_sse`]; [`ClientError::Protocol`] if a `200` is not
    /// `text/event-stream`.
    pub async fn sse_from(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<SseStream, ClientError> {
        let response = self.send(request).await?;
        let response = self.expect(response, 200).await?;
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        if !content_type.starts_with("text/event-stream") {
            return Err(ClientError::Protocol(format!(
                "SSE answered 200 with content type {content_type:?}"
            )));
        }
        Ok(SseStream::new(
            Box::pin(response.bytes_stream()),
            Some(self.timeout),
        ))
    }

    /// `POST /session/{id}/ack {"cursor"}` → `204`.
    ///
    /// # Errors
    /// As the server answers (`409` for a foreign or ahead cursor).
    pub async fn ack(&self, session: &str, cursor: EventId) -> Result<(), ClientError> {
        let body = serde_json::json!({ "cursor": cursor.to_string() }).to_string();
        let path = format!("/session/{session}/ack");
        let response = self.send(self.json_post(&path, body.into_bytes())).await?;
        self.expect(response, 204).await?;
        Ok(())
    }

    /// `POST /session/{id}/upgrade {"cursor"}` with the client's OWN cursor
    /// → `200 {"ticket", "ws", "replay_from", "replay_to"}`.
    ///
    /// # Errors
    /// The `409` refusals, `404`, `400`.
    pub async fn upgrade(
        &self,
        session: &str,
        cursor: EventId,
    ) -> Result<UpgradeGrant, ClientError> {
        let body = serde_json::json!({ "cursor": cursor.to_string() }).to_string();
        self.upgrade_raw(session, body.into_bytes()).await
    }

    /// `POST /session/{id}/upgrade` with `body` sent byte for byte.
    ///
    /// # Errors
    /// As [`Client::upgrade`].
    pub async fn upgrade_raw(
        &self,
        session: &str,
        body: impl Into<Vec<u8>>,
    ) -> Result<UpgradeGrant, ClientError> {
        let path = format!("/session/{session}/upgrade");
        let response = self.send(self.json_post(&path, body.into())).await?;
        let response = self.expect(response, 200).await?;
        let object = json_object(&self.body_of(response).await?, "POST upgrade")?;
        let what = protocol("POST upgrade");
        Ok(UpgradeGrant {
            ticket: str_field(&object, "ticket").map_err(&what)?.to_owned(),
            ws: str_field(&object, "ws").map_err(&what)?.to_owned(),
            replay_from: u64_field(&object, "replay_from").map_err(&what)?,
            replay_to: u64_field(&object, "replay_to").map_err(&what)?,
        })
    }

    /// The `ws://` URL of `path`.
    pub fn ws_url(&self, path: &str) -> String {
        let base = if let Some(rest) = self.base.strip_prefix("https://") {
            format!("wss://{rest}")
        } else if let Some(rest) = self.base.strip_prefix("http://") {
            format!("ws://{rest}")
        } else {
            self.base.clone()
        };
        format!("{base}{path}")
    }

    /// Opens the WebSocket of a granted upgrade (its `ws` path).
    ///
    /// # Errors
    /// The handshake's answer typed (`409 bad_ticket`, `404`), or the
    /// transport error.
    pub async fn connect_ws(&self, grant: &UpgradeGrant) -> Result<WsStream, ClientError> {
        self.connect_ws_path(&grant.ws).await
    }

    /// Opens `GET /session/{id}/ws?ticket=T`.
    ///
    /// # Errors
    /// As [`Client::connect_ws`].
    pub async fn connect_ws_ticket(
        &self,
        session: &str,
        ticket: &str,
    ) -> Result<WsStream, ClientError> {
        self.connect_ws_path(&format!("/session/{session}/ws?ticket={ticket}"))
            .await
    }

    /// Opens a WebSocket at `path` (relative to the base URL).
    ///
    /// # Errors
    /// As [`Client::connect_ws`].
    pub async fn connect_ws_path(&self, path: &str) -> Result<WsStream, ClientError> {
        let url = self.ws_url(path);
        match within(
            self.timeout,
            "the WebSocket handshake",
            tokio_tungstenite::connect_async(url),
        )
        .await?
        {
            Ok((socket, _response)) => Ok(WsStream {
                socket,
                idle_timeout: Some(self.timeout),
                closed: false,
            }),
            Err(tungstenite::Error::Http(response)) => {
                let status = response.status().as_u16();
                let body = response.body().clone().unwrap_or_default();
                Err(ClientError::from_parts(status, &body))
            }
            Err(error) => Err(ClientError::WebSocket(Box::new(error))),
        }
    }

    /// `GET /session/{id}` → the server-side figures.
    ///
    /// # Errors
    /// As the server answers; [`ClientError::Protocol`] if a seq is not a
    /// JSON integer, the epoch not 16 hex digits, or `transport` unknown.
    pub async fn state(&self, session: &str) -> Result<StateView, ClientError> {
        let response = self
            .send(self.http.get(self.url(&format!("/session/{session}"))))
            .await?;
        let response = self.expect(response, 200).await?;
        let object = json_object(&self.body_of(response).await?, "GET session")?;
        let what = protocol("GET session");
        let transport = match str_field(&object, "transport").map_err(&what)? {
            "none" => Transport::None,
            "sse" => Transport::Sse,
            "websocket" => Transport::WebSocket,
            other => return Err(what(format!("unknown transport {other:?}"))),
        };
        Ok(StateView {
            epoch: epoch_field(&object, "epoch").map_err(&what)?,
            acked: u64_field(&object, "acked").map_err(&what)?,
            sent: u64_field(&object, "sent").map_err(&what)?,
            published: u64_field(&object, "published").map_err(&what)?,
            first_retained: u64_field(&object, "first_retained").map_err(&what)?,
            transport,
        })
    }

    /// `DELETE /session/{id}` → `204`.
    ///
    /// # Errors
    /// As the server answers.
    pub async fn delete(&self, session: &str) -> Result<(), ClientError> {
        let response = self
            .send(self.http.delete(self.url(&format!("/session/{session}"))))
            .await?;
        self.expect(response, 204).await?;
        Ok(())
    }

    /// `GET /metrics`, parsed.
    ///
    /// # Errors
    /// As the server answers; [`ClientError::Protocol`] if the text is not
    /// in the Prometheus format.
    pub async fn metrics(&self) -> Result<Metrics, ClientError> {
        let response = self.send(self.http.get(self.url("/metrics"))).await?;
        let response = self.expect(response, 200).await?;
        let body = self.body_of(response).await?;
        let text = std::str::from_utf8(&body)
            .map_err(|e| ClientError::Protocol(format!("/metrics is not UTF-8: {e}")))?;
        Metrics::parse(text).map_err(|e| ClientError::Protocol(format!("/metrics: {e}")))
    }
}

// ---------------------------------------------------------------------------
// The event-stream parser (HTML §9.2.6)
// ---------------------------------------------------------------------------

/// One dispatched event of an event stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The event type: the `event:` field, or `"message"`.
    pub event_type: String,
    /// The data buffer, its final line feed removed.
    pub data: String,
    /// The `id:` field if this event's own block carried one (the spec's
    /// last event ID persists across events; this does not).
    pub id: Option<String>,
    /// The spec's last event ID string at dispatch.
    pub last_event_id: String,
}

/// An incremental parser of `text/event-stream` (WHATWG HTML §9.2.6):
/// lines end with CR, LF or CRLF (also split across chunks); one leading
/// BOM is ignored; lines starting with `:` are comments; `field: value`
/// with one leading space of the value stripped; `data` lines are joined
/// with LF; `id` without NUL sets the last event ID; `retry` with only
/// digits sets the reconnection time; a blank line dispatches (nothing is
/// dispatched for an empty data buffer); an unterminated event at the end
/// of the stream is discarded.
///
/// ```
/// use gapless_server::client::SseParser;
/// let mut parser = SseParser::new();
/// let mut events = Vec::new();
/// parser.push(b"\xEF\xBB\xBF: hi\r\nid: 7\r", |e| events.push(e));
/// parser.push(b"\ndata:  two spaces\ndata\n\n", |e| events.push(e));
/// assert_eq!(events.len(), 1);
/// assert_eq!(events[0].data, " two spaces\n");
/// assert_eq!(events[0].id.as_deref(), Some("7"));
/// ```
#[derive(Clone, Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    skip_lf: bool,
    started: bool,
    data: String,
    event_type: String,
    id_in_block: Option<String>,
    last_event_id: String,
    retry: Option<u64>,
    comments: u64,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// The reconnection time the stream last set with `retry:`, in ms.
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// The last event ID buffer.
    pub fn last_event_id(&self) -> &str {
        &self.last_event_id
    }

    /// Comment lines seen (keep-alives).
    pub fn comments(&self) -> u64 {
        self.comments
    }

    /// Feeds the next bytes of the stream; `dispatch` gets each event
    /// completed by them.
    pub fn push(&mut self, bytes: &[u8], mut dispatch: impl FnMut(SseEvent)) {
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.skip_lf {
                self.skip_lf = false;
                if rest[0] == b'\n' {
                    rest = &rest[1..];
                    continue;
                }
            }
            match rest.iter().position(|&b| b == b'\n' || b == b'\r') {
                None => {
                    self.line.extend_from_slice(rest);
                    break;
                }
                Some(end) => {
                    self.line.extend_from_slice(&rest[..end]);
                    self.skip_lf = rest[end] == b'\r';
                    rest = &rest[end + 1..];
                    let line = std::mem::take(&mut self.line);
                    self.process_line(&line, &mut dispatch);
                    self.line = line;
                    self.line.clear();
                }
            }
        }
    }

    fn process_line(&mut self, line: &[u8], dispatch: &mut impl FnMut(SseEvent)) {
        let mut line = line;
        if !self.started {
            self.started = true;
            if let Some(rest) = line.strip_prefix(b"\xEF\xBB\xBF") {
                line = rest;
            }
        }
        let line = String::from_utf8_lossy(line);
        if line.is_empty() {
            self.dispatch(dispatch);
            return;
        }
        if line.starts_with(':') {
            self.comments += 1;
            return;
        }
        let (field, value) = match line.find(':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (&line[..], ""),
        };
        match field {
            "event" => value.clone_into(&mut self.event_type),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            "id" if !value.contains('\0') => {
                value.clone_into(&mut self.last_event_id);
                self.id_in_block = Some(value.to_owned());
            }
            // Only ASCII digits; a value too large for u64 is ignored too.
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                if let Ok(ms) = value.parse() {
                    self.retry = Some(ms);
                }
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, dispatch: &mut impl FnMut(SseEvent)) {
        let id = self.id_in_block.take();
        if self.data.is_empty() {
            self.event_type.clear();
            return;
        }
        let mut data = std::mem::take(&mut self.data);
        if data.ends_with('\n') {
            data.pop();
        }
        let event_type = if self.event_type.is_empty() {
            "message".to_owned()
        } else {
            std::mem::take(&mut self.event_type)
        };
        dispatch(SseEvent {
            event_type,
            data,
            id,
            last_event_id: self.last_event_id.clone(),
        });
    }
}

// ---------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------

/// The body of an event stream: any stream of byte chunks.
pub type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// An open SSE response, parsed incrementally.
pub struct SseStream {
    body: ByteStream,
    parser: SseParser,
    pending: VecDeque<SseEvent>,
    idle_timeout: Option<Duration>,
    ended: bool,
}

impl fmt::Debug for SseStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SseStream")
            .field("pending", &self.pending.len())
            .field("ended", &self.ended)
            .finish()
    }
}

impl SseStream {
    /// Wraps any byte stream of `text/event-stream`.
    pub fn new(body: ByteStream, idle_timeout: Option<Duration>) -> Self {
        Self {
            body,
            parser: SseParser::new(),
            pending: VecDeque::new(),
            idle_timeout,
            ended: false,
        }
    }

    /// How long a read may wait for bytes (`None`: forever).
    pub fn set_idle_timeout(&mut self, timeout: Option<Duration>) {
        self.idle_timeout = timeout;
    }

    /// The parser (for `retry`, last event ID, comment count).
    pub fn parser(&self) -> &SseParser {
        &self.parser
    }

    /// The next dispatched event; `None` once the body ended properly.
    ///
    /// # Errors
    /// The transport error, or [`ClientError::Timeout`].
    pub async fn next_event(&mut self) -> Result<Option<SseEvent>, ClientError> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(Some(event));
            }
            if self.ended {
                return Ok(None);
            }
            let chunk = match self.idle_timeout {
                Some(timeout) => within(timeout, "an SSE chunk", self.body.next()).await?,
                None => self.body.next().await,
            };
            match chunk {
                Some(Ok(bytes)) => {
                    let pending = &mut self.pending;
                    self.parser.push(&bytes, |event| pending.push_back(event));
                }
                Some(Err(error)) => {
                    self.ended = true;
                    return Err(ClientError::Http(error));
                }
                None => self.ended = true,
            }
        }
    }

    /// The next item in the protocol's terms: a numbered event, a gap, or
    /// the end.
    ///
    /// # Errors
    /// [`ClientError::Protocol`] for an event without a valid ID, a payload
    /// that is not JSON, a gap body without `error`, or an unknown event
    /// type; the transport errors.
    pub async fn next_item(&mut self) -> Result<Incoming, ClientError> {
        let Some(event) = self.next_event().await? else {
            return Ok(Incoming::Closed(Closed {
                code: None,
                reason: String::new(),
                clean: true,
            }));
        };
        match event.event_type.as_str() {
            "message" => {
                let id = event.id.as_deref().ok_or_else(|| {
                    ClientError::Protocol(format!("SSE event without id: {:?}", event.data))
                })?;
                let id: EventId = id.parse().map_err(|e| {
                    ClientError::Protocol(format!("SSE id {id:?} is not an event ID: {e}"))
                })?;
                check_json(&event.data, "SSE data")?;
                Ok(Incoming::Event(Delivered {
                    id,
                    data: event.data,
                }))
            }
            "gap" => Ok(Incoming::Gap(gap_body(&event.data, "SSE gap event")?)),
            other => Err(ClientError::Protocol(format!(
                "unknown SSE event type {other:?} (data {:?})",
                event.data
            ))),
        }
    }
}

fn check_json(text: &str, what: &str) -> Result<(), ClientError> {
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(|_| ())
        .map_err(|e| ClientError::Protocol(format!("{what} is not JSON ({e}): {text:?}")))
}

fn gap_body(text: &str, what: &str) -> Result<Refusal, ClientError> {
    let body: Value = serde_json::from_str(text)
        .map_err(|e| ClientError::Protocol(format!("{what}: body is not JSON ({e}): {text:?}")))?;
    Refusal::from_body(&body).map_err(|e| ClientError::Protocol(format!("{what}: {e}")))
}

/// An open WebSocket of a granted upgrade.
pub struct WsStream {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    idle_timeout: Option<Duration>,
    closed: bool,
}

impl fmt::Debug for WsStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WsStream")
            .field("closed", &self.closed)
            .finish()
    }
}

impl WsStream {
    /// How long a read may wait for a frame (`None`: forever).
    pub fn set_idle_timeout(&mut self, timeout: Option<Duration>) {
        self.idle_timeout = timeout;
    }

    /// The next item: an event frame `{"id", "data"}`, a gap (close 4409),
    /// or the end (any other close, or the connection ending).
    ///
    /// # Errors
    /// [`ClientError::Protocol`] for a frame that is not the protocol's
    /// JSON, a binary frame, or a 4409 whose reason is not a JSON refusal;
    /// the transport errors.
    pub async fn next_item(&mut self) -> Result<Incoming, ClientError> {
        loop {
            if self.closed {
                return Ok(Incoming::Closed(Closed {
                    code: None,
                    reason: String::new(),
                    clean: false,
                }));
            }
            let message = match self.idle_timeout {
                Some(timeout) => within(timeout, "a WebSocket frame", self.socket.next()).await?,
                None => self.socket.next().await,
            };
            match message {
                Some(Ok(Message::Text(text))) => return parse_ws_frame(text.as_str()),
                Some(Ok(Message::Binary(_))) => {
                    return Err(ClientError::Protocol(
                        "binary WebSocket frame; the protocol sends text frames".into(),
                    ))
                }
                Some(Ok(Message::Close(frame))) => {
                    self.closed = true;
                    return close_item(frame);
                }
                Some(Ok(_)) => {} // ping, pong: answered by the library
                Some(Err(tungstenite::Error::ConnectionClosed)) | None => {
                    self.closed = true;
                    return Ok(Incoming::Closed(Closed {
                        code: None,
                        reason: String::new(),
                        clean: false,
                    }));
                }
                Some(Err(error)) => {
                    self.closed = true;
                    return Err(ClientError::WebSocket(Box::new(error)));
                }
            }
        }
    }

    /// Closes the socket with a normal close frame (best effort).
    pub async fn close(mut self) {
        let timeout = self.idle_timeout.unwrap_or(DEFAULT_TIMEOUT);
        let _ = within(timeout, "the WebSocket close", async {
            let _ = self
                .socket
                .send(Message::Close(Some(CloseFrame {
                    code: CloseCode::Normal,
                    reason: "".into(),
                })))
                .await;
            while let Some(Ok(_)) = self.socket.next().await {}
        })
        .await;
    }
}

fn close_item(frame: Option<CloseFrame>) -> Result<Incoming, ClientError> {
    let Some(frame) = frame else {
        return Ok(Incoming::Closed(Closed {
            code: None,
            reason: String::new(),
            clean: true,
        }));
    };
    let code = u16::from(frame.code);
    let reason = frame.reason.as_str().to_owned();
    if code == CLOSE_GAP {
        return Ok(Incoming::Gap(gap_body(&reason, "WebSocket close 4409")?));
    }
    Ok(Incoming::Closed(Closed {
        code: Some(code),
        reason,
        clean: true,
    }))
}

fn parse_ws_frame(text: &str) -> Result<Incoming, ClientError> {
    let bad = |detail: String| ClientError::Protocol(format!("WebSocket frame {text:?}: {detail}"));
    let object = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(object)) => object,
        Ok(_) => return Err(bad("not a JSON object".into())),
        Err(e) => return Err(bad(format!("not JSON ({e})"))),
    };
    let id = event_id_field(&object, "id").map_err(&bad)?;
    if !object.contains_key("data") {
        return Err(bad("missing `data`".into()));
    }
    let data = raw_member(text, "data").ok_or_else(|| bad("cannot locate `data`".into()))?;
    Ok(Incoming::Event(Delivered {
        id,
        data: data.to_owned(),
    }))
}

// ---------------------------------------------------------------------------
// Raw JSON spans: the payload exactly as the server framed it
// ---------------------------------------------------------------------------

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

fn skip_string(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
    None
}

fn skip_value(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => skip_string(b, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = skip_string(b, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            {
                j += 1;
            }
            (j > i).then_some(j)
        }
    }
}

/// The raw text of the top-level member `key` of the JSON object `text`
/// (which must already be known to be valid JSON).
fn raw_member<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let b = text.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(b, i);
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let key_start = i;
        i = skip_string(b, i)?;
        let name: String = serde_json::from_str(text.get(key_start..i)?).ok()?;
        i = skip_ws(b, i);
        if b.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(b, i + 1);
        let value_start = i;
        i = skip_value(b, i)?;
        if name == key {
            return text.get(value_start..i);
        }
        i = skip_ws(b, i);
        match b.get(i) {
            Some(b',') => i += 1,
            _ => return None,
        }
    }
}

// ---------------------------------------------------------------------------
// The migrating client
// ---------------------------------------------------------------------------

/// How a reported gap reached the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GapSource {
    /// A `409 gap_not_covered` on an SSE resume or an upgrade.
    Refused,
    /// An SSE `event: gap`.
    SseEvent,
    /// A WebSocket close with code 4409.
    WebSocketClose,
}

/// A gap the server reported. Never skipped unless
/// [`MigratingClient::accept_gap`] is called with it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportedGap {
    /// How it was reported.
    pub via: GapSource,
    /// The client's true cursor when it was reported.
    pub cursor: EventId,
    /// The body, typed.
    pub refusal: Refusal,
}

/// What [`MigratingClient::next`] yields.
#[derive(Clone, Debug, PartialEq)]
pub enum Next {
    /// The next event, already checked to be `cursor + 1`: the client's
    /// cursor now points at it.
    Event(Delivered),
    /// The transport ended naming a gap; it is recorded and nothing was
    /// skipped. Resume (the ring may still cover it) or
    /// [`MigratingClient::accept_gap`].
    Gap(ReportedGap),
    /// The transport ended without a gap (the server closed it, say because
    /// another transport attached or the server is shutting down).
    Closed(Closed),
}

enum Connection {
    None,
    Sse(SseStream),
    Ws(WsStream),
}

/// Follows one session across SSE reconnects and a migration to WebSocket,
/// with its true processed cursor in a [`GapDetector`]. See the module
/// documentation for the pattern.
pub struct MigratingClient {
    client: Client,
    session: String,
    detector: GapDetector,
    connection: Connection,
    first_expected: Option<u64>,
    gaps: Vec<ReportedGap>,
    resumes: u64,
    migrations: u64,
}

impl fmt::Debug for MigratingClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MigratingClient")
            .field("session", &self.session)
            .field("detector", &self.detector)
            .field("transport", &self.transport())
            .field("gaps", &self.gaps)
            .finish()
    }
}

impl MigratingClient {
    /// A client that has processed nothing of `created`'s session.
    pub fn new(client: Client, created: &Created) -> Self {
        Self::with_cursor(client, &created.session, created.origin())
    }

    /// A client whose last processed event is `cursor`.
    pub fn with_cursor(client: Client, session: &str, cursor: EventId) -> Self {
        Self {
            client,
            session: session.to_owned(),
            detector: GapDetector::new(cursor.epoch, cursor.seq),
            connection: Connection::None,
            first_expected: None,
            gaps: Vec::new(),
            resumes: 0,
            migrations: 0,
        }
    }

    /// The session followed.
    pub fn session(&self) -> &str {
        &self.session
    }

    /// The true cursor: the last event processed.
    pub fn cursor(&self) -> EventId {
        self.detector.cursor()
    }

    /// The detector (events received, seqs reported lost).
    pub fn detector(&self) -> &GapDetector {
        &self.detector
    }

    /// Every gap the server reported, in order.
    pub fn gaps(&self) -> &[ReportedGap] {
        &self.gaps
    }

    /// SSE streams opened.
    pub fn resumes(&self) -> u64 {
        self.resumes
    }

    /// Upgrades granted and connected.
    pub fn migrations(&self) -> u64 {
        self.migrations
    }

    /// The transport open now, client side.
    pub fn transport(&self) -> Transport {
        match self.connection {
            Connection::None => Transport::None,
            Connection::Sse(_) => Transport::Sse,
            Connection::Ws(_) => Transport::WebSocket,
        }
    }

    /// The helpers used.
    pub fn client(&self) -> &Client {
        &self.client
    }

    fn record_refusal(&mut self, error: &ClientError) {
        if let ClientError::Refused(refusal @ Refusal::GapNotCovered { .. }) = error {
            self.gaps.push(ReportedGap {
                via: GapSource::Refused,
                cursor: self.cursor(),
                refusal: refusal.clone(),
            });
        }
    }

    /// Opens (or re-opens) SSE with `Last-Event-ID: <true cursor>` (no
    /// header while nothing was processed). The first event must then be
    /// `cursor + 1`.
    ///
    /// # Errors
    /// The refusals; a `gap_not_covered` is also recorded in
    /// [`MigratingClient::gaps`].
    pub async fn follow_sse(&mut self) -> Result<(), ClientError> {
        self.connection = Connection::None;
        let cursor = self.cursor();
        let header = (cursor.seq > 0).then_some(cursor);
        match self.client.open_sse(&self.session, header).await {
            Ok(stream) => {
                self.connection = Connection::Sse(stream);
                self.first_expected = Some(cursor.seq.saturating_add(1));
                self.resumes += 1;
                Ok(())
            }
            Err(error) => {
                self.record_refusal(&error);
                Err(error)
            }
        }
    }

    /// Drops the open transport abruptly (a network blip).
    pub fn drop_connection(&mut self) {
        self.connection = Connection::None;
        self.first_expected = None;
    }

    /// Closes the open transport politely (a WebSocket close frame).
    pub async fn disconnect(&mut self) {
        if let Connection::Ws(socket) = std::mem::replace(&mut self.connection, Connection::None) {
            socket.close().await;
        }
        self.first_expected = None;
    }

    /// Tells the server what was processed: `POST ack` with the true cursor.
    ///
    /// # Errors
    /// As [`Client::ack`].
    pub fn ack(&self) -> impl Future<Output = Result<(), ClientError>> + Send + 'static {
        // Owns what it needs: the follower (whose streams are `Send` but not
        // `Sync`) is not borrowed across the await.
        let (client, session, cursor) = (self.client.clone(), self.session.clone(), self.cursor());
        async move { client.ack(&session, cursor).await }
    }

    /// Migrates to WebSocket: stops processing the current transport,
    /// `POST upgrade` with the TRUE cursor in the body, checks that the
    /// grant replays from `cursor + 1`, connects with the ticket, and arms
    /// the check that the first frame is `cursor + 1`.
    ///
    /// # Errors
    /// The refusals (a `gap_not_covered` is recorded), a handshake refusal,
    /// or [`ClientError::Protocol`] if the grant does not start at
    /// `cursor + 1`.
    pub async fn migrate_to_websocket(&mut self) -> Result<UpgradeGrant, ClientError> {
        // Nothing read after the upgrade's cursor may be processed: the
        // WebSocket replays from it.
        self.drop_connection();
        let cursor = self.cursor();
        let grant = match self.client.upgrade(&self.session, cursor).await {
            Ok(grant) => grant,
            Err(error) => {
                self.record_refusal(&error);
                return Err(error);
            }
        };
        if grant.replay_from != cursor.seq.saturating_add(1) || grant.replay_to < cursor.seq {
            return Err(ClientError::Protocol(format!(
                "upgrade with cursor {} granted replay {}..={}, expected to start at {}",
                cursor.seq,
                grant.replay_from,
                grant.replay_to,
                cursor.seq.saturating_add(1)
            )));
        }
        let socket = self.client.connect_ws(&grant).await?;
        self.connection = Connection::Ws(socket);
        self.first_expected = Some(cursor.seq.saturating_add(1));
        self.migrations += 1;
        Ok(grant)
    }

    /// The next item of the open transport. An event is accepted only if it
    /// is exactly `cursor + 1`; the transport is dropped on anything that
    /// ends it or on an error.
    ///
    /// # Errors
    /// [`ClientError::FirstFrame`] or [`ClientError::SilentGap`] for an
    /// event that is not `cursor + 1` (the cursor does not move; resume to
    /// recover); [`ClientError::NotConnected`]; the transport's errors.
    pub async fn next(&mut self) -> Result<Next, ClientError> {
        let item = match &mut self.connection {
            Connection::None => return Err(ClientError::NotConnected),
            Connection::Sse(stream) => stream.next_item().await,
            Connection::Ws(socket) => socket.next_item().await,
        };
        let via = match self.connection {
            Connection::Ws(_) => GapSource::WebSocketClose,
            _ => GapSource::SseEvent,
        };
        let item = match item {
            Ok(item) => item,
            Err(error) => {
                self.drop_connection();
                return Err(error);
            }
        };
        match item {
            Incoming::Event(event) => {
                if let Some(expected) = self.first_expected.take() {
                    if event.id.seq != expected {
                        self.drop_connection();
                        return Err(ClientError::FirstFrame {
                            expected,
                            got: event.id.seq,
                        });
                    }
                }
                if let Err(gap) = self.detector.observe(event.id) {
                    self.drop_connection();
                    return Err(ClientError::SilentGap(gap));
                }
                Ok(Next::Event(event))
            }
            Incoming::Gap(refusal) => {
                self.drop_connection();
                let gap = ReportedGap {
                    via,
                    cursor: self.cursor(),
                    refusal,
                };
                self.gaps.push(gap.clone());
                Ok(Next::Gap(gap))
            }
            Incoming::Closed(closed) => {
                self.drop_connection();
                Ok(Next::Closed(closed))
            }
        }
    }

    /// The application accepts a reported loss: the cursor moves to just
    /// before the gap's `first_retained`. Returns how many seqs were
    /// skipped (counted in [`GapDetector::reported_lost`]).
    ///
    /// The shared spec did not say how a client continues after a gap (`docs/PROTOCOL.md` now does): a
    /// server that also applies the `cursor_ahead` rule (the cursor must not
    /// exceed what it `sent`) refuses the moved cursor, so the session may
    /// have to be abandoned for a new one.
    ///
    /// # Errors
    /// [`ClientError::Protocol`] if the report names no `first_retained`.
    pub fn accept_gap(&mut self, gap: &ReportedGap) -> Result<u64, ClientError> {
        let first_retained = gap.refusal.first_retained().ok_or_else(|| {
            ClientError::Protocol(format!(
                "gap report without first_retained: {}",
                gap.refusal
            ))
        })?;
        Ok(self.detector.accept_reported_gap(first_retained))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.push(chunk, |e| out.push(e));
        }
        out
    }

    fn bytewise(input: &[u8]) -> Vec<SseEvent> {
        let chunks: Vec<&[u8]> = input.chunks(1).collect();
        parse_all(&chunks)
    }

    #[test]
    fn line_endings_cr_lf_crlf_even_split() {
        let input = b"data: a\r\ndata: b\rdata: c\n\rid: 1\r\ndata: d\r\r\n";
        let whole = parse_all(&[input]);
        assert_eq!(whole.len(), 2, "{whole:?}");
        assert_eq!(whole[0].data, "a\nb\nc");
        assert_eq!(whole[0].id, None);
        assert_eq!(
            (whole[1].data.as_str(), whole[1].id.as_deref()),
            ("d", Some("1"))
        );
        assert_eq!(bytewise(input), whole);
        // "\r" then "\n" in separate chunks is ONE line break.
        let split = parse_all(&[b"data: x\r", b"\ndata: y\r", b"\n\r", b"\n"]);
        assert_eq!(split.len(), 1);
        assert_eq!(split[0].data, "x\ny");
    }

    #[test]
    fn bom_comments_fields_and_spaces() {
        let events = bytewise(
            b"\xEF\xBB\xBF:comment\nevent:gap\ndata:{\"a\":1}\ndata:  two\nretry: 3000\nretry: x\nunknown: y\ndata\n\n",
        );
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event_type, "gap");
        assert_eq!(events[0].data, "{\"a\":1}\n two\n");
        let mut parser = SseParser::new();
        parser.push(b"retry: 3000\nretry: 12x\n: keep\n", |_| {});
        assert_eq!(parser.retry(), Some(3000));
        assert_eq!(parser.comments(), 1);
        // Only ONE leading BOM is ignored, and only at the very start.
        let events = parse_all(&[b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\n"]);
        assert!(events.is_empty(), "second BOM makes an unknown field");
    }

    #[test]
    fn ids_persist_and_nul_ids_are_ignored() {
        let events =
            parse_all(&[b"id: 5\ndata: a\n\ndata: b\n\nid: 6\0\ndata: c\n\nid\ndata: d\n\n"]);
        let ids: Vec<_> = events
            .iter()
            .map(|e| (e.id.clone(), e.last_event_id.clone()))
            .collect();
        assert_eq!(
            ids,
            vec![
                (Some("5".into()), "5".into()),
                (None, "5".into()),
                (None, "5".into()),
                (Some(String::new()), String::new()),
            ]
        );
    }

    #[test]
    fn empty_data_does_not_dispatch_and_eof_discards() {
        assert!(parse_all(&[b"event: x\n\nid: 3\n\n"]).is_empty());
        let events = parse_all(&[b"data:\n\n"]);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data, "");
        assert!(parse_all(&[b"data: unterminated\n"]).is_empty());
        // The event type does not leak into the next event.
        let events = parse_all(&[b"event: gap\n\ndata: 1\n\n"]);
        assert_eq!(events[0].event_type, "message");
    }

    #[test]
    fn the_engine_encoder_round_trips() {
        use proptest::prelude::*;
        proptest!(|(payload in "(?s).{0,64}", cut in 0usize..200)| {
            let mut out = Vec::new();
            let id = EventId { epoch: 0xab, seq: 9 };
            gapless::sse::encode(&mut out, &id, None, payload.as_bytes()).unwrap();
            let cut = cut.min(out.len());
            let events = parse_all(&[&out[..cut], &out[cut..]]);
            prop_assert_eq!(events.len(), 1);
            let expected = payload.replace("\r\n", "\n").replace('\r', "\n");
            prop_assert_eq!(&events[0].data, &expected);
            prop_assert_eq!(events[0].id.as_deref(), Some("00000000000000ab-9"));
            prop_assert_eq!(&events[0].event_type, "message");
        });
    }

    #[test]
    fn raw_member_finds_the_exact_text() {
        let frame = r#"{"id":"00000000000000ab-1","data":{"b":1,"a":[1.0,"x\"}]"]}}"#;
        assert_eq!(
            raw_member(frame, "data"),
            Some(r#"{"b":1,"a":[1.0,"x\"}]"]}"#)
        );
        assert_eq!(
            raw_member(r#" { "data" : 1e5 , "id":"x"}"#, "data"),
            Some("1e5")
        );
        assert_eq!(raw_member(r#"{"\u0064ata":"s"}"#, "data"), Some(r#""s""#));
        assert_eq!(raw_member(r#"{"id":"x"}"#, "data"), None);
        match parse_ws_frame(r#"{"id":"00000000000000ab-3","data":"x"}"#) {
            Ok(Incoming::Event(d)) => assert_eq!((d.id.seq, d.data.as_str()), (3, r#""x""#)),
            other => panic!("{other:?}"),
        }
        assert!(parse_ws_frame(r#"{"id":3,"data":"x"}"#).is_err());
    }

    #[test]
    fn error_bodies_are_typed() {
        let e = ClientError::from_parts(
            409,
            br#"{"error":"gap_not_covered","cursor":2,"first_retained":9,"published":12,"evicted":6}"#,
        );
        assert!(matches!(
            e,
            ClientError::Refused(Refusal::GapNotCovered {
                cursor: 2,
                first_retained: 9,
                published: 12,
                evicted: 6
            })
        ));
        // Seqs as strings are a protocol violation, not a refusal.
        let e = ClientError::from_parts(
            409,
            br#"{"error":"cursor_ahead","cursor":"2","sent":1,"published":3}"#,
        );
        assert!(matches!(e, ClientError::Protocol(_)), "{e:?}");
        let e = ClientError::from_parts(
            409,
            br#"{"error":"foreign_epoch","cursor":2,"epoch":"00000000000000ab"}"#,
        );
        assert!(matches!(
            e,
            ClientError::Refused(Refusal::ForeignEpoch {
                cursor: 2,
                epoch: 0xab
            })
        ));
        assert!(matches!(
            ClientError::from_parts(404, br#"{"error":"no_such_session"}"#),
            ClientError::NoSuchSession
        ));
        assert!(matches!(
            ClientError::from_parts(400, br#"{"error":"bad_request","detail":"x"}"#),
            ClientError::BadRequest { .. }
        ));
        assert!(matches!(
            ClientError::from_parts(400, br#"{"error":"bad_request"}"#),
            ClientError::Protocol(_)
        ));
        assert!(matches!(
            ClientError::from_parts(404, b"not found"),
            ClientError::UnexpectedStatus { status: 404, .. }
        ));
    }

    #[test]
    fn prometheus_text_parses() {
        let metrics = Metrics::parse(
            "# HELP x y\n# TYPE a_total counter\na_total 3\nb{reason=\"gap_not_covered\",x=\"q\\\"\"} 2.5 123\nc +Inf\n",
        )
        .unwrap();
        assert_eq!(metrics.samples.len(), 3);
        assert_eq!(
            metrics.value("b", &[("reason", "gap_not_covered")]),
            Some(2.5)
        );
        assert_eq!(metrics.samples[1].labels[1].1, "q\"");
        assert!(Metrics::parse("a b c d\n").is_err());
        assert!(Metrics::parse("9a 1\n").is_err());
    }
}
