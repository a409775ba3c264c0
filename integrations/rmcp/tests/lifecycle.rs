//! The store frees rings on its own ([`gapless_rmcp::lifecycle`]): a
//! completed request stream after its grace, an idle stream after the idle
//! period, the least recently used beyond the cap; a resume with an id of
//! a freed stream is refused explicitly. Time is given to `sweep_at`, so no
//! test waits for a clock.

use futures_util::StreamExt;
use gapless::Config;
use gapless_rmcp::{GaplessEventStore, StreamLimits};
use rmcp::model::ServerJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::{EventStore, ServerSseMessage};
use serde_json::{json, Value};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const GRACE: Duration = Duration::from_secs(60);
const IDLE: Duration = Duration::from_secs(600);

fn limits(max_streams: usize) -> StreamLimits {
    StreamLimits {
        max_streams: NonZeroUsize::new(max_streams).expect("non-zero"),
        idle: IDLE,
        completed_grace: GRACE,
    }
}

fn store_with(max_streams: usize) -> GaplessEventStore {
    GaplessEventStore::new(Config::default().events(64).bytes(64 << 10))
        .expect("a valid ring")
        .with_limits(limits(max_streams))
}

fn message(value: Value) -> ServerSseMessage {
    let message: ServerJsonRpcMessage = serde_json::from_value(value).expect("a server message");
    ServerSseMessage::from_message(message)
}

fn progress(token: i64, n: u64) -> ServerSseMessage {
    message(json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": { "progressToken": token, "progress": n, "total": 10 },
    }))
}

fn result(id: i64) -> ServerSseMessage {
    message(json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": { "content": [{ "type": "text", "text": "done" }], "isError": false },
    }))
}

async fn store(s: &GaplessEventStore, stream: &str, event: ServerSseMessage) -> String {
    s.store_event(stream, &event)
        .await
        .expect("store_event never fails")
}

/// The first item of a replay from `cursor`, as JSON.
async fn first_replayed(s: &GaplessEventStore, cursor: &str) -> Value {
    let mut replay = s
        .replay_events_after(cursor)
        .await
        .expect("replay_events_after never fails");
    let item = tokio::time::timeout(Duration::from_secs(5), replay.next())
        .await
        .expect("a replay yields within 5 s")
        .expect("an item");
    serde_json::to_value(item.message.as_deref().expect("a message")).expect("JSON")
}

/// Asserts `cursor` is refused as a foreign cursor (the stream is freed).
async fn assert_foreign(s: &GaplessEventStore, cursor: &str) {
    let first = first_replayed(s, cursor).await;
    assert_eq!(first["method"], "notifications/message", "{first}");
    assert_eq!(
        first["params"]["data"]["reason"], "foreign_cursor",
        "{first}"
    );
}

/// A request stream: two progress notifications, then the result; the ids.
async fn completed_call(s: &GaplessEventStore, stream: &str, id: i64) -> Vec<String> {
    vec![
        store(s, stream, progress(id, 1)).await,
        store(s, stream, progress(id, 2)).await,
        store(s, stream, result(id)).await,
    ]
}

/// Mutations: freeing completed streams at once (grace ignored) fails the
/// first sweep's count and the resume before the grace; never freeing
/// them fails the count after it.
#[tokio::test]
async fn a_completed_request_stream_is_freed_after_its_grace_and_not_before() {
    let s = store_with(100);
    let done_at = Instant::now();
    let ids = completed_call(&s, "call-1", 1).await;
    let live = store(&s, "call-2", progress(2, 1)).await;

    assert_eq!(s.sweep_at(done_at + GRACE - Duration::from_secs(1)), 0);
    // A client cut before the result resumes within the grace and gets it.
    let resumed = first_replayed(&s, &ids[1]).await;
    assert_eq!(resumed["id"], 1, "the result: {resumed}");

    assert_eq!(
        s.sweep_at(Instant::now() + GRACE + Duration::from_secs(1)),
        1
    );
    assert_eq!(s.stream_count(), 1, "the unfinished call keeps its ring");
    assert!(s.ring("call-1").is_none());
    assert_foreign(&s, &ids[1]).await;
    // The unfinished call's cursor is still a position (its replay waits
    // for what follows rather than refusing).
    let (epoch_seq, ring) = (live, s.ring("call-2").expect("kept"));
    assert!(epoch_seq.ends_with(&format!("{:016x}-1", ring.epoch())));
}

/// Mutation: ignoring `idle` keeps the stream (the count stays 0).
#[tokio::test]
async fn a_stream_unused_for_the_idle_period_is_freed_and_not_before() {
    let s = store_with(100);
    let created = Instant::now();
    let quiet = store(&s, "quiet", progress(1, 1)).await;
    assert_eq!(s.sweep_at(created + IDLE - Duration::from_secs(1)), 0);
    assert!(s.ring("quiet").is_some());
    assert_eq!(
        s.sweep_at(Instant::now() + IDLE + Duration::from_secs(1)),
        1
    );
    assert!(s.ring("quiet").is_none());
    assert_foreign(&s, &quiet).await;
}

/// Mutations: no cap (`make_room` returns at once) grows the count to
/// 1,000; evicting the most recently used first frees the live call.
#[tokio::test]
async fn beyond_the_cap_the_least_recently_used_streams_go_completed_first() {
    let s = store_with(64);
    let live = store(&s, "live", progress(1, 1)).await;
    let first_done = completed_call(&s, "done-0", 100).await;
    for n in 1..1_000 {
        completed_call(&s, &format!("done-{n}"), 100 + n).await;
        assert!(s.stream_count() <= 64, "{} streams", s.stream_count());
    }
    assert!(s.ring("live").is_some(), "the unfinished call is kept");
    assert!(s.ring("done-999").is_some(), "the newest call is kept");
    assert_foreign(&s, &first_done[0]).await;
    assert!(live.ends_with("-1"), "{live}");
}

/// The store sweeps on its own as it is used: with a grace of 0 a
/// completed stream is freed by a later store once a sweep period passed.
/// Mutation: no sweep in `store` leaves all 200 rings.
#[tokio::test]
async fn the_store_applies_the_limits_as_it_is_used() {
    // The store's time, moved by the test: no wait on the wall clock.
    let now = Arc::new(Mutex::new(Instant::now()));
    let source = Arc::clone(&now);
    let s = GaplessEventStore::new(Config::default().events(64).bytes(64 << 10))
        .expect("a valid ring")
        .with_limits(StreamLimits {
            max_streams: NonZeroUsize::new(10_000).expect("non-zero"),
            idle: IDLE,
            completed_grace: Duration::ZERO,
        })
        .with_time_source(Arc::new(move || *source.lock().expect("the test's clock")));
    let period = s.limits().sweep_period();
    assert_eq!(period, Duration::from_millis(10));
    for n in 0..200 {
        completed_call(&s, &format!("call-{n}"), n).await;
    }
    assert_eq!(s.stream_count(), 200, "no sweep period has passed yet");
    // A sweep period passes; the next use sweeps on its own.
    *now.lock().expect("the test's clock") += period * 2;
    store(&s, "next", progress(1000, 1)).await;
    assert!(s.stream_count() <= 2, "{} streams", s.stream_count());
}

/// Request streams and standalone streams get rings of their own sizes.
/// Mutation: one size for both makes the request ring's footprint the
/// standalone's.
#[tokio::test]
async fn rings_are_sized_by_stream_kind() {
    let s = GaplessEventStore::sized_by_kind();
    store(&s, "6a1e9f62-5d1c-4f0e-9a55-3e2b7c1d0f11", progress(1, 1)).await;
    store(&s, "session-1:common", progress(2, 1)).await;
    let request = s
        .ring("6a1e9f62-5d1c-4f0e-9a55-3e2b7c1d0f11")
        .expect("a ring");
    let standalone = s.ring("session-1:common").expect("a ring");
    let request_size = s.config().geometry().expect("valid").footprint();
    let standalone_size = s.standalone_config().geometry().expect("valid").footprint();
    assert!(
        request_size * 3 <= standalone_size,
        "{request_size} vs {standalone_size}"
    );
    assert_eq!(
        request.max_payload(),
        s.config().geometry().expect("valid").max_payload()
    );
    assert_eq!(
        standalone.max_payload(),
        s.standalone_config()
            .geometry()
            .expect("valid")
            .max_payload()
    );
}
