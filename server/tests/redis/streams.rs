//! Durable Streams (`/v1/stream/{path}`) over the shared history: two
//! `gapless-server serve --redis` processes over one `redis-server`. An
//! instance keeps no copy of a stream, and every decision on its state (a
//! producer's seq, the closure, the deletion, a fork's claim on its
//! source) is one guarded append in Redis, so what one instance
//! acknowledged or decided holds on the other, with the same offsets and
//! the same figures.
//!
//! Every network wait is bounded (the client's timeout, a timeout around
//! each live answer, a deadline around each whole test); waiting for an
//! expiry or a recovery is polling with a deadline, and a live reader is
//! known to be waiting (its first control event, or its subscription in
//! Redis) before the append it must be woken by is made.

use crate::cluster::{instance, RECOVERY};
use crate::redis_server::{Persistence, RedisServer};
use crate::support::{bounded, IO};
use gapless_client::{Client, Method, Parser, Request, SseEvent};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long a live reader on one instance may take to deliver an append
/// made on the other: well under `--long-poll-timeout` (20 s by default),
/// so a reader that only wakes when that runs out fails here.
const LIVE: Duration = Duration::from_secs(5);

/// The `--redis-timeout` of [`instance`], in seconds.
const REDIS_TIMEOUT: Duration = Duration::from_secs(1);

/// An answer, its body read whole.
pub(crate) struct Answer {
    status: u16,
    headers: axum::http::HeaderMap,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.text()))
    }

    /// `Stream-Next-Offset`, which must be there.
    #[track_caller]
    fn next_offset(&self) -> String {
        self.header("stream-next-offset")
            .unwrap_or_else(|| panic!("no Stream-Next-Offset ({}): {}", self.status, self.text()))
            .to_owned()
    }

    /// Checks the status, with the body in the message.
    #[track_caller]
    pub(crate) fn expect(&self, status: u16, what: &str) -> &Self {
        assert_eq!(
            self.status,
            status,
            "{what}: expected {status}, got {}: {}",
            self.status,
            self.text()
        );
        self
    }

    /// Checks an error answer: `status`, JSON, `{"error": code}`.
    #[track_caller]
    pub(crate) fn refused(&self, status: u16, code: &str, what: &str) -> &Self {
        self.expect(status, what);
        assert!(
            self.header("content-type")
                .is_some_and(|t| t.starts_with("application/json")),
            "{what}: a refusal is JSON: {:?}",
            self.header("content-type")
        );
        assert_eq!(self.json()["error"], code, "{what}: {}", self.text());
        self
    }
}

async fn send(client: &Client, request: Request, what: &str) -> Answer {
    let response = client
        .send(request)
        .await
        .unwrap_or_else(|e| panic!("{what} on {}: no answer: {e}", client.base_url()));
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = client
        .read_body(response)
        .await
        .unwrap_or_else(|e| panic!("{what}: body: {e}"))
        .to_vec();
    Answer {
        status,
        headers,
        body,
    }
}

pub(crate) fn url(path: &str) -> String {
    format!("/v1/stream/{path}")
}

/// The offset after message `seq` of generation `generation`.
fn offset(generation: u64, seq: u64) -> String {
    format!("{generation:016}_{seq:016}")
}

/// The generation of an offset (its part before `_`).
#[track_caller]
fn generation_of(offset: &str) -> u64 {
    offset
        .split_once('_')
        .and_then(|(generation, _)| generation.parse().ok())
        .unwrap_or_else(|| panic!("not an offset: {offset:?}"))
}

/// `PUT` with `headers`; the answer.
pub(crate) async fn put(client: &Client, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut request = client.request(Method::PUT, &url(path));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    send(client, request, &format!("PUT {path}")).await
}

/// Creates a `text/plain` stream (`201`); its generation.
pub(crate) async fn create(client: &Client, path: &str, headers: &[(&str, &str)]) -> u64 {
    let mut all = vec![("content-type", "text/plain")];
    all.extend_from_slice(headers);
    let answer = put(client, path, &all).await;
    answer.expect(201, &format!("PUT {path}"));
    let tail = answer.next_offset();
    let generation = generation_of(&tail);
    assert_eq!(tail, offset(generation, 0), "a new stream's tail");
    generation
}

/// `POST` of `body` as `text/plain` with `headers`.
async fn post(client: &Client, path: &str, body: &[u8], headers: &[(&str, &str)]) -> Answer {
    let mut request = client
        .post(&url(path))
        .header("content-type", "text/plain")
        .body(body.to_vec());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    send(client, request, &format!("POST {path}")).await
}

/// Appends `body`, which must be stored (`204`); the tail after it.
async fn append(client: &Client, path: &str, body: &[u8]) -> String {
    post(client, path, body, &[])
        .await
        .expect(204, &format!("append to {path} on {}", client.base_url()))
        .next_offset()
}

/// A producer's append: `Producer-Id`, `Producer-Epoch` 0, `seq`.
async fn produce(client: &Client, path: &str, producer: &str, seq: u64) -> Answer {
    let seq_text = seq.to_string();
    let body = format!("{producer}#{seq}");
    post(
        client,
        path,
        body.as_bytes(),
        &[
            ("producer-id", producer),
            ("producer-epoch", "0"),
            ("producer-seq", &seq_text),
        ],
    )
    .await
}

/// `GET /v1/stream/{path}{query}`.
async fn get(client: &Client, path: &str, query: &str) -> Answer {
    send(
        client,
        client.get(&format!("{}{query}", url(path))),
        &format!("GET {path}{query}"),
    )
    .await
}

pub(crate) async fn head(client: &Client, path: &str) -> Answer {
    send(
        client,
        client.request(Method::HEAD, &url(path)),
        &format!("HEAD {path}"),
    )
    .await
}

pub(crate) async fn delete(client: &Client, path: &str) -> Answer {
    send(
        client,
        client.request(Method::DELETE, &url(path)),
        &format!("DELETE {path}"),
    )
    .await
}

/// A catch-up read from `from` on `client`: `200`, exactly `body`, and
/// `next` as its `Stream-Next-Offset`.
async fn assert_reads(client: &Client, path: &str, from: &str, body: &[u8], next: &str) {
    let what = format!("GET {path} from {from} on {}", client.base_url());
    let answer = get(client, path, &format!("?offset={from}")).await;
    answer.expect(200, &what);
    assert_eq!(answer.text(), String::from_utf8_lossy(body), "{what}: body");
    assert_eq!(answer.next_offset(), next, "{what}: Stream-Next-Offset");
}

/// The exact JSON of a `410 gap_not_covered`.
fn gap(offset: &str, earliest: &str, evicted: u64) -> Value {
    json!({
        "error": "gap_not_covered",
        "offset": offset,
        "earliest_offset": earliest,
        "evicted": evicted,
    })
}

#[track_caller]
fn assert_gap(answer: &Answer, expected: &Value, what: &str) {
    answer.refused(410, "gap_not_covered", what);
    assert_eq!(&answer.json(), expected, "{what}: the 410's figures");
}

/// Channels this Redis announces appends on that some instance follows
/// (`gapless:appended:<log>`): one per stream with a live reader.
fn followed(redis: &RedisServer) -> usize {
    redis
        .cli(&["PUBSUB", "CHANNELS", "gapless:appended:*"])
        .lines()
        .filter(|line| !line.trim().is_empty())
        .count()
}

/// Polls until `followed(redis) == count`, within [`IO`].
async fn until_followed(redis: &RedisServer, count: usize, what: &str) {
    let deadline = Instant::now() + IO;
    while followed(redis) != count {
        assert!(
            Instant::now() < deadline,
            "{what}: {} followed logs, not {count}, after {IO:?}",
            followed(redis)
        );
        tokio::time::sleep(Duration::from_millis(10)).await; // polling, bounded
    }
}

/// An open SSE read, event by event, each wait bounded.
struct Sse {
    body: axum::body::BodyDataStream,
    parser: Parser,
    ready: VecDeque<SseEvent>,
}

impl Sse {
    async fn open(client: &Client, path: &str, from: &str) -> Self {
        let response = client
            .send(client.get(&format!("{}?offset={from}&live=sse", url(path))))
            .await
            .expect("SSE request");
        assert_eq!(response.status().as_u16(), 200, "SSE from {from}");
        assert_eq!(
            response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok()),
            Some("text/event-stream")
        );
        Self {
            body: axum::body::Body::new(response.into_body()).into_data_stream(),
            parser: Parser::new(),
            ready: VecDeque::new(),
        }
    }

    /// The next event within `within`.
    async fn next(&mut self, within: Duration, what: &str) -> SseEvent {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(event) = self.ready.pop_front() {
                return event;
            }
            let chunk =
                tokio::time::timeout_at(deadline, futures_util::StreamExt::next(&mut self.body))
                    .await
                    .unwrap_or_else(|_| panic!("SSE: {what}: no event within {within:?}"));
            match chunk {
                Some(Ok(bytes)) => {
                    let ready = &mut self.ready;
                    self.parser.push(&bytes, |event| ready.push_back(event));
                }
                other => panic!("SSE: {what}: the body ended or broke: {other:?}"),
            }
        }
    }
}

/// A control event's JSON.
#[track_caller]
fn control(event: &SseEvent) -> Value {
    assert_eq!(
        event.event_type, "control",
        "not a control event: {event:?}"
    );
    serde_json::from_str(&event.data)
        .unwrap_or_else(|e| panic!("control event is not JSON ({e}): {}", event.data))
}

/// Appends on A are read on B (and B's appends on A) with the same bytes
/// and the same `Stream-Next-Offset` values, from `-1` and from every
/// offset either instance handed out; offsets are `G_n` for the stream's
/// generation `G`, so they sort byte-wise in append order. A `PUT` on B of
/// the stream A created answers `200` with its tail when it asks for the
/// same settings, `409` when its content type differs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn appends_on_one_instance_read_the_same_on_the_other() {
    bounded("streams: append on A, read on B", async {
        let redis = RedisServer::start(Persistence::None);
        let (_a, a) = instance(&redis, &[]).await;
        let (_b, b) = instance(&redis, &[]).await;
        let generation = create(&a, "log", &[]).await;
        let messages: Vec<Vec<u8>> = (1..=5u64)
            .map(|n| format!("message {n}:{}", "x".repeat(n as usize * 3)).into_bytes())
            .collect();
        let mut tails = vec![offset(generation, 0)];
        for message in &messages {
            tails.push(append(&a, "log", message).await);
        }
        // One written on B: the next seq, the same generation.
        let sixth = b"sixth, from B".to_vec();
        tails.push(append(&b, "log", &sixth).await);
        let mut all = messages.clone();
        all.push(sixth);
        let expected: Vec<String> = (0..=6).map(|n| offset(generation, n)).collect();
        assert_eq!(tails, expected, "the appends' Stream-Next-Offset values");
        assert!(
            tails.windows(2).all(|w| w[0].as_bytes() < w[1].as_bytes()),
            "offsets sort byte-wise in append order: {tails:?}"
        );
        for client in [&a, &b] {
            assert_reads(client, "log", "-1", &all.concat(), &tails[6]).await;
            for (n, from) in tails.iter().enumerate() {
                assert_reads(client, "log", from, &all[n..].concat(), &tails[6]).await;
            }
            let answer = head(client, "log").await;
            answer.expect(200, "HEAD");
            assert_eq!(answer.next_offset(), tails[6], "HEAD's tail");
            assert_eq!(answer.header("content-type"), Some("text/plain"));
        }
        // The same create on B finds A's stream; another content type is
        // another stream.
        let again = put(&b, "log", &[("content-type", "text/plain")]).await;
        again.expect(200, "the same PUT on B");
        assert_eq!(again.next_offset(), tails[6], "the existing stream's tail");
        put(&b, "log", &[("content-type", "application/octet-stream")])
            .await
            .refused(409, "stream_exists", "a PUT on B with another content type");
        assert_reads(&a, "log", "-1", &all.concat(), &tails[6]).await;
    })
    .await;
}

/// A live reader on B, waiting at the tail, is answered with an append
/// made on A: a long-poll (known to wait: its log is followed in Redis)
/// gets the append's bytes and A's `Stream-Next-Offset`; an SSE reader
/// (known to wait: it got its first control event) gets the data event,
/// then a control event whose `streamNextOffset` is A's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_live_reader_on_one_instance_gets_an_append_made_on_the_other() {
    bounded("streams: live reads across instances", async {
        let redis = RedisServer::start(Persistence::None);
        let (_a, a) = instance(&redis, &[]).await;
        let (_b, b) = instance(&redis, &[]).await;
        let generation = create(&a, "live", &[]).await;
        let tail = append(&a, "live", b"before").await;
        assert_eq!(tail, offset(generation, 1));
        assert_eq!(head(&b, "live").await.next_offset(), tail);
        assert_eq!(followed(&redis), 0, "nobody follows the log yet");

        let long_poll = {
            let (b, tail) = (b.clone(), tail.clone());
            tokio::spawn(
                async move { get(&b, "live", &format!("?offset={tail}&live=long-poll")).await },
            )
        };
        // B follows the log once the long-poll read it and waits.
        until_followed(&redis, 1, "the long-poll on B").await;
        let appended = append(&a, "live", b"long-polled").await;
        assert_eq!(appended, offset(generation, 2));
        let answer = tokio::time::timeout(LIVE, long_poll)
            .await
            .unwrap_or_else(|_| {
                panic!("the long-poll on B: no answer within {LIVE:?} of A's append")
            })
            .expect("the long-poll task");
        answer.expect(200, "the long-poll on B");
        assert_eq!(answer.text(), "long-polled");
        assert_eq!(
            answer.next_offset(),
            appended,
            "the long-poll's next offset"
        );
        assert_eq!(answer.header("stream-up-to-date"), Some("true"));

        let mut sse = Sse::open(&b, "live", &appended).await;
        let first = control(&sse.next(IO, "the first control event").await);
        assert_eq!(first["streamNextOffset"], appended.as_str());
        assert_eq!(first["upToDate"], true);
        let appended = append(&a, "live", b"streamed").await;
        assert_eq!(appended, offset(generation, 3));
        let data = sse.next(LIVE, "the data event of A's append").await;
        assert_eq!(
            (data.event_type.as_str(), data.data.as_str()),
            ("data", "streamed")
        );
        let after = control(&sse.next(LIVE, "the control event after it").await);
        assert_eq!(after["streamNextOffset"], appended.as_str(), "{after}");
        assert_eq!(after["upToDate"], true, "{after}");
    })
    .await;
}

/// An idempotent producer's append stored through A and retried through
/// B is stored once: B answers `204` with the producer's seq and the
/// tail; the next seq on B is stored (`200`); a seq that skips one is
/// `409 producer_sequence_gap` with `Producer-Expected-Seq`. Then the
/// same append sent to both at once, round after round: each stored once,
/// one `200` and one `204` per round.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_producer_retry_on_another_instance_is_stored_once() {
    bounded("streams: idempotent producer across instances", async {
        let redis = RedisServer::start(Persistence::None);
        let (_a, a) = instance(&redis, &[]).await;
        let (_b, b) = instance(&redis, &[]).await;
        let generation = create(&a, "produced", &[]).await;

        let stored = produce(&a, "produced", "p", 0).await;
        stored.expect(200, "seq 0 on A");
        assert_eq!(stored.next_offset(), offset(generation, 1));
        assert_eq!(stored.header("producer-seq"), Some("0"));
        let retried = produce(&b, "produced", "p", 0).await;
        retried.expect(204, "seq 0 retried on B (a duplicate)");
        assert_eq!(retried.next_offset(), offset(generation, 1));
        assert_eq!(
            (
                retried.header("producer-epoch"),
                retried.header("producer-seq")
            ),
            (Some("0"), Some("0"))
        );
        let next = produce(&b, "produced", "p", 1).await;
        next.expect(200, "seq 1 on B");
        assert_eq!(next.next_offset(), offset(generation, 2));
        let skipped = produce(&b, "produced", "p", 3).await;
        skipped.refused(409, "producer_sequence_gap", "seq 3 on B after 1");
        assert_eq!(
            (
                skipped.header("producer-expected-seq"),
                skipped.header("producer-received-seq")
            ),
            (Some("2"), Some("3"))
        );
        assert_reads(&a, "produced", "-1", b"p#0p#1", &offset(generation, 2)).await;

        // The same append to A and B at once.
        const ROUNDS: u64 = 24;
        for seq in 2..2 + ROUNDS {
            let (on_a, on_b) = tokio::join!(
                produce(&a, "produced", "p", seq),
                produce(&b, "produced", "p", seq)
            );
            let mut statuses = [on_a.status, on_b.status];
            statuses.sort_unstable();
            assert_eq!(
                statuses,
                [200, 204],
                "seq {seq} sent to A and B at once: A {} {}, B {} {}",
                on_a.status,
                on_a.text(),
                on_b.status,
                on_b.text()
            );
            for answer in [&on_a, &on_b] {
                assert_eq!(
                    answer.next_offset(),
                    offset(generation, seq + 1),
                    "seq {seq}"
                );
                assert_eq!(
                    answer.header("producer-seq"),
                    Some(seq.to_string().as_str())
                );
            }
        }
        let all: String = (0..2 + ROUNDS).map(|seq| format!("p#{seq}")).collect();
        for client in [&a, &b] {
            assert_reads(
                client,
                "produced",
                "-1",
                all.as_bytes(),
                &offset(generation, 2 + ROUNDS),
            )
            .await;
        }
    })
    .await;
}

/// A stream closed on A refuses appends on B (`409 stream_closed` with
/// `Stream-Closed: true` and the closed tail); HEAD, a catch-up and a
/// long-poll on B show the closure. A close on A racing an append on B,
/// round after round: the closed tail is final (the append is stored
/// before it, or refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_closed_on_one_instance_is_closed_on_the_other() {
    bounded("streams: closure across instances", async {
        let redis = RedisServer::start(Persistence::None);
        let (_a, a) = instance(&redis, &[]).await;
        let (_b, b) = instance(&redis, &[]).await;
        let generation = create(&a, "closing", &[]).await;
        append(&a, "closing", b"last words").await;
        let closed_tail = offset(generation, 1);
        let closed = post(&a, "closing", b"", &[("stream-closed", "true")]).await;
        closed.expect(204, "the close on A");
        assert_eq!(closed.header("stream-closed"), Some("true"));
        assert_eq!(closed.next_offset(), closed_tail);

        let refused = post(&b, "closing", b"too late", &[]).await;
        refused.refused(409, "stream_closed", "an append on B after A closed");
        assert_eq!(refused.header("stream-closed"), Some("true"));
        assert_eq!(refused.next_offset(), closed_tail);
        let meta = head(&b, "closing").await;
        meta.expect(200, "HEAD on B");
        assert_eq!(meta.header("stream-closed"), Some("true"));
        assert_eq!(meta.next_offset(), closed_tail);
        let read = get(&b, "closing", "?offset=-1").await;
        read.expect(200, "a catch-up on B");
        assert_eq!(read.text(), "last words");
        assert_eq!(read.header("stream-closed"), Some("true"));
        let polled = get(
            &b,
            "closing",
            &format!("?offset={closed_tail}&live=long-poll"),
        )
        .await;
        polled.expect(204, "a long-poll on B at the closed tail");
        assert_eq!(polled.header("stream-closed"), Some("true"));
        assert_eq!(polled.next_offset(), closed_tail);

        const ROUNDS: usize = 16;
        let mut stored_before = 0;
        for round in 0..ROUNDS {
            let path = format!("race-{round}");
            let generation = create(&a, &path, &[]).await;
            let (close, racing) = tokio::join!(
                post(&a, &path, b"", &[("stream-closed", "true")]),
                post(&b, &path, b"racing", &[])
            );
            close.expect(204, "the racing close on A");
            let final_tail = close.next_offset();
            let (tail, body) = match racing.status {
                204 => {
                    stored_before += 1;
                    (offset(generation, 1), "racing")
                }
                _ => {
                    racing.refused(409, "stream_closed", "the racing append on B");
                    (offset(generation, 0), "")
                }
            };
            assert_eq!(
                final_tail, tail,
                "{path}: the close's tail (the append answered {})",
                racing.status
            );
            let meta = head(&b, &path).await;
            assert_eq!(meta.next_offset(), tail, "{path}: the closed tail moved");
            assert_eq!(meta.header("stream-closed"), Some("true"));
            assert_reads(&b, &path, "-1", body.as_bytes(), &tail).await;
        }
        eprintln!("closure races: {stored_before} of {ROUNDS} appends stored before the close");
    })
    .await;
}

/// A stream deleted on A is gone on B (`404` for `GET` and `HEAD`); a
/// `PUT` on B makes a new one under a later generation, whose offsets sort
/// after the old ones, and a read from an old offset is `410
/// gap_not_covered` with exact figures, never the new stream's data.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_deleted_on_one_instance_is_gone_on_the_other() {
    bounded("streams: deletion across instances", async {
        let redis = RedisServer::start(Persistence::None);
        let (_a, a) = instance(&redis, &[]).await;
        let (_b, b) = instance(&redis, &[]).await;
        let old = create(&a, "again", &[]).await;
        for n in 1..=3 {
            append(&a, "again", format!("old {n}").as_bytes()).await;
        }
        assert_eq!(head(&b, "again").await.next_offset(), offset(old, 3));
        delete(&a, "again").await.expect(204, "DELETE on A");
        for client in [&b, &a] {
            get(client, "again", "?offset=-1").await.refused(
                404,
                "no_such_stream",
                "GET after the delete",
            );
            head(client, "again")
                .await
                .expect(404, "HEAD after the delete");
            post(client, "again", b"x", &[]).await.refused(
                404,
                "no_such_stream",
                "an append after the delete",
            );
        }
        let new = create(&b, "again", &[]).await;
        assert!(new > old, "the new generation {new} is after {old}");
        let tail = append(&b, "again", b"new 1").await;
        assert_eq!(tail, offset(new, 1));
        assert!(
            offset(new, 0).as_bytes() > offset(old, 3).as_bytes(),
            "the new stream's offsets sort after the old one's"
        );
        for client in [&b, &a] {
            let stale = offset(old, 2);
            let answer = get(client, "again", &format!("?offset={stale}")).await;
            assert_gap(
                &answer,
                &gap(&stale, &offset(new, 0), 0),
                "a read from the deleted stream's offset",
            );
            assert_reads(client, "again", "-1", b"new 1", &tail).await;
        }
    })
    .await;
}

/// A stream created on A with `Stream-TTL: 1` expires on B: `HEAD` on B
/// (which does not count as an access) answers `404` once a second has
/// passed since the create, not before; then A answers `404` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_ttl_expires_on_every_instance() {
    bounded("streams: TTL across instances", async {
        let redis = RedisServer::start(Persistence::None);
        let (_a, a) = instance(&redis, &[]).await;
        let (_b, b) = instance(&redis, &[]).await;
        let started = Instant::now();
        create(&a, "brief", &[("stream-ttl", "1")]).await;
        let deadline = started + IO;
        loop {
            let answer = head(&b, "brief").await;
            match answer.status {
                200 => {
                    assert_eq!(answer.header("stream-ttl"), Some("1"));
                    assert!(
                        Instant::now() < deadline,
                        "the stream has not expired on B after {IO:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await; // polling, bounded
                }
                404 => break,
                _ => panic!("HEAD on B: {} {}", answer.status, answer.text()),
            }
        }
        let elapsed = started.elapsed();
        assert!(
            elapsed >= Duration::from_secs(1),
            "expired after {elapsed:?}, before its TTL of 1 s"
        );
        for client in [&a, &b] {
            head(client, "brief")
                .await
                .expect(404, "HEAD after the expiry");
            get(client, "brief", "?offset=-1").await.refused(
                404,
                "no_such_stream",
                "GET after the expiry",
            );
        }
    })
    .await;
}

/// Retention over Redis (`--ring-events 8`): 20 messages appended on A;
/// B refuses a read from `-1` (catch-up and SSE) with `410
/// gap_not_covered` and exact figures (12 evicted, the earliest offset
/// after message 12), a read from that offset gets messages 13..=20, and
/// A answers the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn retention_refuses_the_same_on_every_instance() {
    bounded("streams: retention across instances", async {
        let redis = RedisServer::start(Persistence::None);
        let (_a, a) = instance(&redis, &["--ring-events", "8"]).await;
        let (_b, b) = instance(&redis, &["--ring-events", "8"]).await;
        let generation = create(&a, "trimmed", &[]).await;
        let message = |n: u64| format!("m{n:02};");
        for n in 1..=20 {
            append(&a, "trimmed", message(n).as_bytes()).await;
        }
        let tail = offset(generation, 20);
        let earliest = offset(generation, 12);
        let retained: String = (13..=20).map(message).collect();
        for client in [&b, &a] {
            let what = format!("from -1 on {}", client.base_url());
            let expected = gap(&offset(generation, 0), &earliest, 12);
            assert_gap(
                &get(client, "trimmed", "?offset=-1").await,
                &expected,
                &what,
            );
            let sse = get(client, "trimmed", "?offset=-1&live=sse").await;
            assert_gap(&sse, &expected, &format!("SSE {what}"));
            let evicted = offset(generation, 11);
            assert_gap(
                &get(client, "trimmed", &format!("?offset={evicted}")).await,
                &gap(&evicted, &earliest, 1),
                &format!("from {evicted}"),
            );
            assert_reads(client, "trimmed", &earliest, retained.as_bytes(), &tail).await;
        }
    })
    .await;
}

/// A fork made on B of a stream made on A reads its inherited messages on
/// A under the source's offsets, then its own under its own generation;
/// the source deleted while the fork lives is `410 stream_gone` on both
/// instances (soft-deleted: not re-creatable, not appendable), the fork
/// still reads; deleting the fork then frees the source (`404`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fork_made_on_one_instance_holds_its_source_on_every_instance() {
    bounded("streams: forks across instances", async {
        let redis = RedisServer::start(Persistence::None);
        let (_a, a) = instance(&redis, &[]).await;
        let (_b, b) = instance(&redis, &[]).await;
        let source = create(&a, "source", &[]).await;
        for body in ["one;", "two;", "three;"] {
            append(&a, "source", body.as_bytes()).await;
        }
        let at = offset(source, 2);
        let forked = put(
            &b,
            "fork",
            &[
                ("stream-forked-from", "/v1/stream/source"),
                ("stream-fork-offset", &at),
            ],
        )
        .await;
        forked.expect(201, "the fork on B");
        assert_eq!(
            forked.next_offset(),
            at,
            "the fork's tail is its fork offset"
        );
        assert_eq!(forked.header("content-type"), Some("text/plain"));
        assert_reads(&a, "fork", "-1", b"one;two;", &at).await;
        let own = append(&a, "fork", b"fork's own;").await;
        let fork_generation = generation_of(&own);
        assert!(
            fork_generation > source,
            "the fork's own generation sorts after"
        );
        assert_eq!(own, offset(fork_generation, 3));
        assert_reads(&b, "fork", &offset(source, 1), b"two;fork's own;", &own).await;

        delete(&a, "source")
            .await
            .expect(204, "DELETE of the source on A");
        for client in [&a, &b] {
            get(client, "source", "?offset=-1").await.refused(
                410,
                "stream_gone",
                "GET of the soft-deleted source",
            );
            head(client, "source")
                .await
                .expect(410, "HEAD of the soft-deleted source");
            post(client, "source", b"x", &[]).await.refused(
                410,
                "stream_gone",
                "an append to the soft-deleted source",
            );
            assert_reads(client, "fork", "-1", b"one;two;fork's own;", &own).await;
        }
        delete(&b, "source").await.refused(
            410,
            "stream_gone",
            "DELETE of the soft-deleted source on B",
        );
        put(&b, "source", &[("content-type", "text/plain")])
            .await
            .refused(409, "stream_has_forks", "a PUT of the soft-deleted source");

        delete(&b, "fork")
            .await
            .expect(204, "DELETE of the fork on B");
        for client in [&a, &b] {
            head(client, "fork")
                .await
                .expect(404, "HEAD of the deleted fork");
            head(client, "source")
                .await
                .expect(404, "HEAD of the freed source");
            get(client, "source", "?offset=-1").await.refused(
                404,
                "no_such_stream",
                "GET of the freed source",
            );
        }
        let again = create(&b, "source", &[]).await;
        assert!(
            again > source,
            "the source re-created under a later generation"
        );
    })
    .await;
}

/// Redis paused (SIGSTOP): an append is `503 history_unavailable` with
/// `Retry-After` within about `--redis-timeout`, and stores nothing; once
/// Redis resumes, both instances read the stream unchanged and the next
/// append gets the next seq.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_append_while_redis_is_paused_is_refused_and_changes_nothing() {
    bounded("streams: Redis paused", async {
        let redis = RedisServer::start(Persistence::None);
        let (_a, a) = instance(&redis, &[]).await;
        let (_b, b) = instance(&redis, &[]).await;
        let generation = create(&a, "paused", &[]).await;
        append(&a, "paused", b"before;").await;
        redis.pause(true);
        let sent = Instant::now();
        let refused = post(&b, "paused", b"during;", &[]).await;
        let took = sent.elapsed();
        redis.pause(false);
        refused.refused(503, "history_unavailable", "an append with Redis paused");
        assert_eq!(refused.header("retry-after"), Some("1"));
        assert!(
            took < REDIS_TIMEOUT + Duration::from_secs(2),
            "the 503 took {took:?} (--redis-timeout {REDIS_TIMEOUT:?})"
        );
        let deadline = Instant::now() + RECOVERY;
        for client in [&a, &b] {
            loop {
                let answer = head(client, "paused").await;
                if answer.status == 200 {
                    assert_eq!(answer.next_offset(), offset(generation, 1), "unchanged");
                    break;
                }
                answer.refused(503, "history_unavailable", "HEAD while Redis recovers");
                assert!(Instant::now() < deadline, "no recovery within {RECOVERY:?}");
                tokio::time::sleep(Duration::from_millis(50)).await; // Retry-After, bounded
            }
            assert_reads(client, "paused", "-1", b"before;", &offset(generation, 1)).await;
        }
        assert_eq!(append(&b, "paused", b"after;").await, offset(generation, 2));
        assert_reads(&a, "paused", "-1", b"before;after;", &offset(generation, 2)).await;
    })
    .await;
}
