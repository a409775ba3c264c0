//! The shared store over a real `redis-server`: two stores are two
//! instances of an MCP server. A stream stored on one is replayed by the
//! other, in order and once each, live to its response; uncovered and
//! foreign cursors get the same signals on both; a completed stream's log
//! expires after the grace.

use futures_util::StreamExt;
use gapless::Config;
use gapless_history::test_support::{Persistence, RedisServer};
use gapless_rmcp::{GaplessEventStore, StreamLimits};
use rmcp::model::ServerJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::{EventStore, EventStream, ServerSseMessage};
use serde_json::{json, Value};
use std::num::NonZeroUsize;
use std::time::Duration;

const STREAM: &str = "0b6c2a34-5d1c-4f0e-9a55-3e2b7c1d0f11";
const TOKEN: i64 = 9;
const GRACE: Duration = Duration::from_secs(30);

fn message(value: Value) -> ServerSseMessage {
    let message: ServerJsonRpcMessage = serde_json::from_value(value).expect("a server message");
    ServerSseMessage::from_message(message)
}

fn progress(n: u64) -> ServerSseMessage {
    message(json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": { "progressToken": TOKEN, "progress": n, "total": 100 },
    }))
}

fn response() -> ServerSseMessage {
    message(json!({
        "jsonrpc": "2.0",
        "id": TOKEN,
        "result": { "content": [{ "type": "text", "text": "done" }], "isError": false },
    }))
}

/// An instance: a store of `events`-event request rings over `redis`.
async fn instance(redis: &RedisServer, events: usize) -> GaplessEventStore {
    let store = GaplessEventStore::new(Config::default().events(events).bytes(64 << 10))
        .expect("a ring config")
        .with_limits(StreamLimits {
            max_streams: NonZeroUsize::new(100).expect("non-zero"),
            idle: Duration::from_secs(600),
            completed_grace: GRACE,
        });
    let config = store.history_config(redis.url());
    store.with_history(config).await.expect("redis answers")
}

async fn stored(store: &GaplessEventStore, event: ServerSseMessage) -> String {
    store
        .store_event(STREAM, &event)
        .await
        .expect("redis takes the event")
}

async fn replay(store: &GaplessEventStore, cursor: &str) -> EventStream {
    store
        .replay_events_after(cursor)
        .await
        .expect("replay_events_after never fails")
}

/// The next item, or the end; bounded so a hang fails the test.
async fn next(stream: &mut EventStream) -> Option<ServerSseMessage> {
    tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("the replay yields or ends within 10 s")
}

fn json_of(item: &ServerSseMessage) -> Value {
    serde_json::to_value(item.message.as_deref().expect("a message")).expect("JSON")
}

fn progress_of(item: &ServerSseMessage) -> u64 {
    let progress = json_of(item)["params"]["progress"]
        .as_f64()
        .expect("a progress notification");
    progress as u64
}

/// The signal's error `data`, and the end after it.
async fn signal_data(stream: &mut EventStream) -> Value {
    let log = next(stream).await.expect("the logging notification");
    assert_eq!(json_of(&log)["method"], "notifications/message");
    let error = next(stream).await.expect("the JSON-RPC error");
    let data = json_of(&error)["error"]["data"].clone();
    assert!(
        next(stream).await.is_none(),
        "the stream ends after a signal"
    );
    data
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_stored_on_one_instance_is_replayed_live_to_its_response_by_another() {
    let redis = RedisServer::start(Persistence::None);
    let (a, b) = (instance(&redis, 256).await, instance(&redis, 256).await);
    let mut ids = vec![stored(&a, ServerSseMessage::retry(Duration::from_millis(3000))).await];
    for n in 1..=3 {
        ids.push(stored(&a, progress(n)).await);
    }
    // Resumed on B after progress 1: 2 and 3 from Redis, ...
    let mut resumed = replay(&b, &ids[1]).await;
    for (n, id) in [(2, &ids[2]), (3, &ids[3])] {
        let item = next(&mut resumed).await.expect("a stored event");
        assert_eq!(progress_of(&item), n);
        assert_eq!(item.event_id.as_ref(), Some(id), "its original id");
    }
    // ... then what A stores while B's replay is open, to the response.
    let later = [stored(&a, progress(4)).await, stored(&a, response()).await];
    let item = next(&mut resumed).await.expect("progress 4, live");
    assert_eq!(progress_of(&item), 4);
    assert_eq!(item.event_id.as_ref(), Some(&later[0]));
    let item = next(&mut resumed).await.expect("the response, live");
    assert_eq!(json_of(&item)["id"], TOKEN);
    assert_eq!(item.event_id.as_ref(), Some(&later[1]));
    assert!(
        next(&mut resumed).await.is_none(),
        "the replay ends after the response"
    );
    // A resume with the response's id ends at once, on either instance.
    assert!(next(&mut replay(&b, &later[1]).await).await.is_none());
    assert!(next(&mut replay(&a, &later[1]).await).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncovered_cursor_gets_the_same_gap_on_every_instance() {
    let redis = RedisServer::start(Persistence::None);
    let (a, b) = (instance(&redis, 8).await, instance(&redis, 8).await);
    let mut ids = vec![stored(&a, ServerSseMessage::retry(Duration::from_millis(3000))).await];
    for n in 1..=20 {
        ids.push(stored(&a, progress(n)).await);
    }
    let on_a = signal_data(&mut replay(&a, &ids[2]).await).await;
    let on_b = signal_data(&mut replay(&b, &ids[2]).await).await;
    assert_eq!(on_b["reason"], "gap_not_covered", "{on_b}");
    assert_eq!(on_b["cursor"], 3, "{on_b}");
    for field in [
        "reason",
        "cursor",
        "first_retained",
        "evicted",
        "last_event_id",
    ] {
        assert_eq!(on_a[field], on_b[field], "{field}: A {on_a} B {on_b}");
    }
    // A covered cursor near the end replays on B, from Redis.
    let mut resumed = replay(&b, &ids[18]).await;
    assert_eq!(progress_of(&next(&mut resumed).await.expect("19")), 19);
    assert_eq!(progress_of(&next(&mut resumed).await.expect("20")), 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_of_no_stored_log_or_another_epoch_is_foreign_on_another_instance() {
    let redis = RedisServer::start(Persistence::None);
    let (a, b) = (instance(&redis, 64).await, instance(&redis, 64).await);
    let id = stored(&a, progress(1)).await;
    let (key, event) = id.split_once('.').expect("key.event");
    let (epoch, _) = event.split_once('-').expect("epoch-seq");
    let unknown_key = format!("{}.{event}", "7".repeat(32));
    let other_epoch = format!(
        "{key}.{}-1",
        if epoch == "1".repeat(16) { "2" } else { "1" }.repeat(16)
    );
    let beyond = format!("{key}.{epoch}-5");
    for cursor in [&unknown_key, &other_epoch, &beyond] {
        let data = signal_data(&mut replay(&b, cursor).await).await;
        assert_eq!(data["reason"], "foreign_cursor", "{cursor}: {data}");
        assert_eq!(data["last_event_id"], cursor.as_str());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_streams_log_expires_after_the_grace_and_a_resume_does_not_renew_it() {
    let redis = RedisServer::start(Persistence::None);
    let (a, b) = (instance(&redis, 64).await, instance(&redis, 64).await);
    let first = stored(&a, progress(1)).await;
    let key = first.split_once('.').expect("key.event").0.to_owned();
    let meta = format!("gapless:{{{key}}}:m");
    let ttl = |redis: &RedisServer| -> u64 {
        redis
            .cli(&["PTTL", &meta])
            .trim()
            .parse()
            .expect("PTTL answers a number")
    };
    let idle_ttl = ttl(&redis);
    assert!(
        idle_ttl > GRACE.as_millis() as u64,
        "a live log lives for the idle period: {idle_ttl} ms"
    );
    stored(&a, response()).await;
    let after_response = ttl(&redis);
    assert!(
        after_response <= GRACE.as_millis() as u64,
        "the response leaves the log the grace at most: {after_response} ms"
    );
    let mut resumed = replay(&b, &first).await;
    assert!(
        next(&mut resumed).await.is_some(),
        "the response, from Redis"
    );
    let after_read = ttl(&redis);
    assert!(
        after_read <= after_response,
        "a resume does not renew a completed log: {after_read} ms > {after_response} ms"
    );
}

/// An instance whose Redis calls time out after `timeout`.
async fn impatient(redis: &RedisServer, timeout: Duration) -> GaplessEventStore {
    let store = GaplessEventStore::new(Config::default().events(64).bytes(64 << 10))
        .expect("a ring config");
    let mut config = store.history_config(redis.url());
    config.timeout = timeout;
    store.with_history(config).await.expect("redis answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_lost_acknowledged_events_ends_the_stream_and_its_ids_become_foreign() {
    let mut redis = RedisServer::start(Persistence::None);
    let (a, b) = (instance(&redis, 64).await, instance(&redis, 64).await);
    stored(&a, progress(1)).await;
    redis.cli(&["SAVE"]);
    stored(&a, progress(2)).await;
    let last = stored(&a, progress(3)).await;
    // Restarted from the snapshot: progress 2 and 3 are gone from Redis,
    // and its `published` would give their seqs out again.
    redis.restart();
    // The first call may meet the connection Redis's restart broke (an
    // `unavailable` error, nothing stored); the connection then reconnects.
    let mut refusals = Vec::new();
    for _ in 0..3 {
        let error = a
            .store_event(STREAM, &progress(4))
            .await
            .expect_err("the stream cannot continue under its ids");
        let text = error.to_string();
        refusals.push(text.clone());
        if !text.contains("history unavailable") {
            break;
        }
    }
    let last_refusal = refusals.last().expect("at least one attempt");
    assert!(
        last_refusal.contains("lost events of this stream"),
        "{refusals:?}"
    );
    for instance in [&a, &b] {
        let data = signal_data(&mut replay(instance, &last).await).await;
        assert_eq!(data["reason"], "foreign_cursor", "{data}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_that_timed_out_but_landed_is_never_given_a_second_seq() {
    let redis = RedisServer::start(Persistence::None);
    let a = impatient(&redis, Duration::from_secs(2)).await;
    stored(&a, progress(1)).await;
    redis.pause(true);
    let error = a
        .store_event(STREAM, &progress(2))
        .await
        .expect_err("Redis does not answer in time");
    assert!(error.to_string().contains("not stored"), "{error}");
    // The script was sent: Redis runs it once it is resumed.
    redis.pause(false);
    let error = a
        .store_event(STREAM, &progress(3))
        .await
        .expect_err("the ring and Redis are out of step");
    assert!(
        error.to_string().contains("gave this stream's event seq"),
        "{error}"
    );
}
