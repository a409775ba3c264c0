//! Drives `GaplessEventStore` through rmcp's `EventStore` trait, as rmcp does.

#[path = "support/calls.rs"]
mod calls;

use calls::{next, replay, store_to};
use futures_util::StreamExt;
use gapless::Config;
use gapless_rmcp::{GaplessEventStore, EVENTS_LOST, UNKNOWN_REQUEST_ID};
use rmcp::model::{NumberOrString, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::{EventStore, EventStream, ServerSseMessage};
use serde_json::{json, Value};
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

const STREAM: &str = "6a1e9f62-5d1c-4f0e-9a55-3e2b7c1d0f11";
const PROGRESS_TOKEN: i64 = 7;

fn message(value: Value) -> ServerJsonRpcMessage {
    serde_json::from_value(value).expect("a server message")
}

fn progress(n: u64) -> ServerJsonRpcMessage {
    message(json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": { "progressToken": PROGRESS_TOKEN, "progress": n, "total": 200, "message": format!("step {n}") },
    }))
}

fn tool_result() -> ServerJsonRpcMessage {
    message(json!({
        "jsonrpc": "2.0",
        "id": PROGRESS_TOKEN,
        "result": { "content": [{ "type": "text", "text": "done" }], "isError": false },
    }))
}

fn sse(message: ServerJsonRpcMessage) -> ServerSseMessage {
    ServerSseMessage::from_message(message)
}

/// The replay has nothing to yield now and has not ended: one poll, whose
/// waker does nothing, is `Pending`. A replay of this process reads the
/// ring within that poll, so once the test has stored what it stores the
/// answer is known, however slow the machine: no wait that a stall could
/// fail, or outlast a late event and falsely pass.
fn assert_pending(stream: &mut EventStream) {
    let mut cx = Context::from_waker(Waker::noop());
    let polled = stream.poll_next_unpin(&mut cx);
    assert!(
        polled.is_pending(),
        "the replay stream should wait for live events, not yield or end: {:?}",
        polled.map(|item| item.map(|item| item.event_id))
    );
}

fn progress_of(item: &ServerSseMessage) -> u64 {
    let progress = json_of(item)["params"]["progress"]
        .as_f64()
        .expect("a progress notification");
    progress as u64
}

fn json_of(item: &ServerSseMessage) -> Value {
    serde_json::to_value(item.message.as_deref().expect("a message")).unwrap()
}

/// A request stream as rmcp writes it: a priming event, `n` progress
/// notifications. Returns the ids.
async fn request_stream(s: &dyn EventStore, n: u64) -> Vec<String> {
    let mut ids = vec![
        store_to(
            s,
            STREAM,
            ServerSseMessage::retry(Duration::from_millis(3000)),
        )
        .await,
    ];
    for i in 1..=n {
        ids.push(store_to(s, STREAM, sse(progress(i))).await);
    }
    ids
}

/// The signal: a logging notification, then the JSON-RPC error, both with
/// `event_id`, then the end. Returns the error's `data`.
async fn expect_signal(stream: &mut EventStream, event_id: &str, request_id: Value) -> Value {
    let log = next(stream).await.expect("the logging notification");
    assert_eq!(log.event_id.as_deref(), Some(event_id));
    let log = json_of(&log);
    assert_eq!(log["method"], "notifications/message");
    assert_eq!(log["params"]["level"], "error");
    let error = next(stream).await.expect("the error");
    assert_eq!(error.event_id.as_deref(), Some(event_id));
    assert!(matches!(
        error.message.as_deref(),
        Some(ServerJsonRpcMessage::Error(_))
    ));
    let error = json_of(&error);
    assert_eq!(error["id"], request_id);
    assert_eq!(error["error"]["code"], EVENTS_LOST);
    assert_eq!(log["params"]["data"], error["error"]["data"]);
    assert!(next(stream).await.is_none(), "the signal ends the stream");
    error["error"]["data"].clone()
}

#[tokio::test]
async fn replays_exactly_after_the_cursor_then_follows_live_until_the_response() {
    let s = Arc::new(GaplessEventStore::new(Config::default()).unwrap());
    let ids = request_stream(&*s, 10).await;
    assert_eq!(ids.len(), 11);
    let unique: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "ids are unique");

    // The client saw the priming event and progress 1..=4.
    let k = 4;
    let mut stream = replay(&*s, &ids[k]).await;
    for (i, id) in ids.iter().enumerate().skip(k + 1) {
        let item = next(&mut stream).await.expect("a replayed event");
        assert_eq!(item.event_id.as_deref(), Some(id.as_str()));
        assert_eq!(progress_of(&item), i as u64, "each once, in order");
    }
    assert_pending(&mut stream);

    // Live events stored after the replay started.
    let writer = Arc::clone(&s);
    let live = tokio::spawn(async move {
        let mut ids = Vec::new();
        for i in 11..=13 {
            ids.push(store_to(&*writer, STREAM, sse(progress(i))).await);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        ids.push(store_to(&*writer, STREAM, sse(tool_result())).await);
        // Nothing the store is given after the response reaches the replay.
        store_to(&*writer, STREAM, sse(progress(99))).await;
        ids
    });
    let live_ids = live.await.unwrap();
    for (i, id) in (11..=13).zip(&live_ids) {
        let item = next(&mut stream).await.expect("a live event");
        assert_eq!(item.event_id.as_deref(), Some(id.as_str()));
        assert_eq!(progress_of(&item), i);
    }
    let response = next(&mut stream).await.expect("the response");
    assert_eq!(response.event_id.as_deref(), Some(live_ids[3].as_str()));
    assert_eq!(json_of(&response)["id"], PROGRESS_TOKEN);
    assert!(
        next(&mut stream).await.is_none(),
        "ends right after the response"
    );
}

#[tokio::test]
async fn a_replay_of_everything_starts_with_the_priming_event() {
    let s = GaplessEventStore::new(Config::default()).unwrap();
    let ids = request_stream(&s, 2).await;
    store_to(&s, STREAM, sse(tool_result())).await;
    // seq 0 of the stream: "processed nothing".
    let zero = format!("{}0", ids[0].strip_suffix('1').unwrap());
    let mut stream = replay(&s, &zero).await;
    let priming = next(&mut stream).await.unwrap();
    assert_eq!(priming.event_id.as_deref(), Some(ids[0].as_str()));
    assert!(priming.message.is_none());
    assert_eq!(priming.retry, Some(Duration::from_millis(3000)));
    assert_eq!(progress_of(&next(&mut stream).await.unwrap()), 1);
    assert_eq!(progress_of(&next(&mut stream).await.unwrap()), 2);
    assert_eq!(
        json_of(&next(&mut stream).await.unwrap())["id"],
        PROGRESS_TOKEN
    );
    assert!(next(&mut stream).await.is_none());
}

#[tokio::test]
async fn a_resume_after_the_response_ends_at_once() {
    let s = GaplessEventStore::new(Config::default()).unwrap();
    request_stream(&s, 3).await;
    let response = store_to(&s, STREAM, sse(tool_result())).await;
    let mut stream = replay(&s, &response).await;
    assert!(next(&mut stream).await.is_none());
}

#[tokio::test]
async fn events_stay_replayable_after_the_response() {
    let s = GaplessEventStore::new(Config::default()).unwrap();
    let ids = request_stream(&s, 3).await;
    let response = store_to(&s, STREAM, sse(tool_result())).await;
    let mut stream = replay(&s, &ids[1]).await;
    assert_eq!(progress_of(&next(&mut stream).await.unwrap()), 2);
    assert_eq!(progress_of(&next(&mut stream).await.unwrap()), 3);
    let last = next(&mut stream).await.unwrap();
    assert_eq!(last.event_id, Some(response));
    assert!(next(&mut stream).await.is_none());
}

#[tokio::test]
async fn an_evicted_cursor_gets_the_gap_signal_with_its_figures() {
    let s = GaplessEventStore::new(Config::default().events(8).bytes(4096)).unwrap();
    let ids = request_stream(&s, 40).await;
    let ring = s.ring(STREAM).unwrap();
    let first_retained = ring.first_retained();
    assert!(first_retained > 3, "the ring evicted the start");
    let mut stream = replay(&s, &ids[2]).await;
    let data = expect_signal(&mut stream, &ids[2], json!(PROGRESS_TOKEN)).await;
    assert_eq!(data["reason"], "gap_not_covered");
    assert_eq!(data["cursor"], 3);
    assert_eq!(data["first_retained"], first_retained);
    assert_eq!(data["evicted"], first_retained - 3 - 1);
    assert_eq!(data["last_event_id"], ids[2]);
}

#[tokio::test]
async fn the_gap_signal_names_the_response_id_once_the_response_is_stored() {
    // No window: the ring of 4 events evicts the start of 11.
    let s = GaplessEventStore::new(Config::default().events(4).bytes(4096))
        .unwrap()
        .with_window(0);
    let first = store_to(&s, STREAM, ServerSseMessage::retry(Duration::from_secs(1))).await;
    for _ in 0..10 {
        store_to(
            &s,
            STREAM,
            sse(message(
                json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "data": "x"}}),
            )),
        )
        .await;
    }
    // No progress notification: the id is unknown, so the placeholder.
    let mut stream = replay(&s, &first).await;
    expect_signal(&mut stream, &first, json!(UNKNOWN_REQUEST_ID)).await;
    store_to(
        &s,
        STREAM,
        sse(message(
            json!({"jsonrpc": "2.0", "id": "req-1", "result": {}}),
        )),
    )
    .await;
    let mut stream = replay(&s, &first).await;
    expect_signal(&mut stream, &first, json!("req-1")).await;
}

#[tokio::test]
async fn an_unknown_key_is_a_foreign_cursor() {
    let a = GaplessEventStore::new(Config::default()).unwrap();
    let b = GaplessEventStore::new(Config::default()).unwrap();
    let ids = request_stream(&a, 2).await;
    request_stream(&b, 2).await;
    // A cursor from another server process.
    let mut stream = replay(&b, &ids[1]).await;
    let data = expect_signal(&mut stream, &ids[1], json!(UNKNOWN_REQUEST_ID)).await;
    assert_eq!(data["reason"], "foreign_cursor");
    assert_eq!(data["cursor"], 2);
    assert_eq!(data["first_retained"], Value::Null);
}

#[tokio::test]
async fn a_removed_and_recreated_stream_makes_old_cursors_foreign() {
    let s = GaplessEventStore::new(Config::default()).unwrap();
    let old = request_stream(&s, 2).await;
    assert!(s.remove_stream(STREAM));
    assert!(!s.remove_stream(STREAM));
    assert_eq!(s.stream_count(), 0);
    let new = request_stream(&s, 2).await;
    assert_ne!(old[0][..32], new[0][..32], "a new key");
    let mut stream = replay(&s, &old[1]).await;
    let data = expect_signal(&mut stream, &old[1], json!(UNKNOWN_REQUEST_ID)).await;
    assert_eq!(data["reason"], "foreign_cursor");
}

#[tokio::test]
async fn another_epoch_or_an_unpublished_seq_is_a_foreign_cursor() {
    let s = GaplessEventStore::new(Config::default()).unwrap();
    let ids = request_stream(&s, 2).await;
    let (key, rest) = ids[1].split_once('.').unwrap();
    let (epoch, _) = rest.split_once('-').unwrap();
    let other_epoch = format!(
        "{key}.{:016x}-2",
        u64::from_str_radix(epoch, 16).unwrap() ^ 1
    );
    let mut stream = replay(&s, &other_epoch).await;
    let data = expect_signal(&mut stream, &other_epoch, json!(UNKNOWN_REQUEST_ID)).await;
    assert_eq!(data["reason"], "foreign_cursor");
    let ahead = format!("{key}.{epoch}-99");
    let mut stream = replay(&s, &ahead).await;
    let data = expect_signal(&mut stream, &ahead, json!(UNKNOWN_REQUEST_ID)).await;
    assert_eq!(data["reason"], "foreign_cursor");
    assert_eq!(data["cursor"], 99);
}

#[tokio::test]
async fn a_malformed_cursor_gets_the_malformed_signal() {
    let s = GaplessEventStore::new(Config::default()).unwrap();
    request_stream(&s, 2).await;
    // rmcp's own id format, as a client of rmcp's default cache would send.
    let mut stream = replay(&s, "0/3").await;
    let data = expect_signal(&mut stream, "0/3", json!(UNKNOWN_REQUEST_ID)).await;
    assert_eq!(data["reason"], "malformed_cursor");
    assert_eq!(data["cursor"], Value::Null);
    assert_eq!(data["last_event_id"], "0/3");
    // Not printable: a fixed id instead of an echo.
    let mut stream = replay(&s, "a b").await;
    let data = expect_signal(
        &mut stream,
        "gapless-malformed-cursor",
        json!(UNKNOWN_REQUEST_ID),
    )
    .await;
    assert_eq!(data["reason"], "malformed_cursor");
}

#[tokio::test]
async fn a_message_too_large_for_the_ring_is_reported_lost_on_replay() {
    // Written to the ring as it is stored (no window): a message in the
    // window is replayed whatever its size, and reported lost only once it
    // leaves it (tests/window.rs).
    let s = GaplessEventStore::new(Config::default().events(64).bytes(512))
        .unwrap()
        .with_window(0);
    let ids = request_stream(&s, 2).await;
    let big = message(json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": { "progressToken": PROGRESS_TOKEN, "progress": 3, "message": "x".repeat(1000) },
    }));
    let big_id = store_to(&s, STREAM, sse(big)).await;
    assert!(
        big_id.ends_with("-4"),
        "the placeholder keeps ids dense: {big_id}"
    );
    store_to(&s, STREAM, sse(progress(4))).await;
    let mut stream = replay(&s, &ids[1]).await;
    let item = next(&mut stream).await.unwrap();
    assert_eq!(item.event_id.as_deref(), Some(ids[2].as_str()));
    // The signal carries the last id delivered, so a resume gets it again.
    let data = expect_signal(&mut stream, &ids[2], json!(PROGRESS_TOKEN)).await;
    assert_eq!(data["reason"], "lost_event");
    assert_eq!(data["cursor"], 3);
    assert_eq!(data["lost_seq"], 4);
    assert!(data["lost_bytes"].as_u64().unwrap() > 1000);
}

#[tokio::test]
async fn a_follower_lapped_while_live_gets_the_gap_signal() {
    let s = GaplessEventStore::new(Config::default().events(8).bytes(4096)).unwrap();
    let ids = request_stream(&s, 2).await;
    let mut stream = replay(&s, &ids[2]).await;
    assert_pending(&mut stream);
    for i in 3..=40 {
        store_to(&s, STREAM, sse(progress(i))).await;
    }
    let data = expect_signal(&mut stream, &ids[2], json!(PROGRESS_TOKEN)).await;
    assert_eq!(data["reason"], "gap_not_covered");
    assert_eq!(data["cursor"], 3);
}

#[tokio::test]
async fn removing_a_stream_ends_its_live_replays() {
    let s = GaplessEventStore::new(Config::default()).unwrap();
    let ids = request_stream(&s, 2).await;
    let mut stream = replay(&s, &ids[1]).await;
    assert_eq!(progress_of(&next(&mut stream).await.unwrap()), 2);
    assert_pending(&mut stream);
    assert!(s.remove_stream(STREAM));
    assert!(next(&mut stream).await.is_none());
    assert!(s.ring(STREAM).is_none());
}

#[tokio::test]
async fn stored_json_re_serialises_byte_for_byte() {
    let s = GaplessEventStore::new(Config::default()).unwrap();
    let texts = [
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7,"progress":3.0,"total":200.0,"message":"step 3"}}"#,
        r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"done"}],"isError":false}}"#,
    ];
    let cursor = store_to(&s, STREAM, ServerSseMessage::retry(Duration::from_secs(1))).await;
    let mut canonical = Vec::new();
    for text in texts {
        let parsed: ServerJsonRpcMessage = serde_json::from_str(text).unwrap();
        // What rmcp would send live.
        canonical.push(serde_json::to_string(&parsed).unwrap());
        store_to(&s, STREAM, sse(parsed)).await;
    }
    // The ring holds exactly what rmcp sends live.
    let ring = s.ring(STREAM).unwrap();
    for (seq, live) in (2..).zip(&canonical) {
        assert_eq!(&ring.read(seq).unwrap().payload[..], live.as_bytes());
    }
    let mut stream = replay(&s, &cursor).await;
    for live in &canonical {
        let item = next(&mut stream).await.unwrap();
        let replayed = serde_json::to_string(item.message.as_deref().unwrap()).unwrap();
        assert_eq!(&replayed, live, "a replay re-serialises byte-for-byte");
    }
    assert!(next(&mut stream).await.is_none());
    // rmcp keeps the result as it is and writes the notification's params
    // in key order: the store keeps rmcp's own bytes, whatever they are.
    assert_eq!(canonical[1], texts[1]);
    assert_eq!(
        canonical[0],
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"message":"step 3","progress":3.0,"progressToken":7,"total":200.0}}"#
    );
}

#[tokio::test]
async fn streams_are_separate_and_ids_name_their_stream() {
    let s = GaplessEventStore::new(Config::default()).unwrap();
    let a = store_to(&s, "a", sse(progress(1))).await;
    let b = store_to(&s, "b", sse(progress(2))).await;
    store_to(&s, "a", sse(progress(3))).await;
    assert_ne!(a[..32], b[..32]);
    assert_eq!(s.stream_count(), 2);
    let mut stream = replay(&s, &b).await;
    assert_pending(&mut stream);
    let mut stream = replay(&s, &a).await;
    assert_eq!(progress_of(&next(&mut stream).await.unwrap()), 3);
    assert!(s.remove_session("x") == 0);
    store_to(&s, "x:common", sse(progress(1))).await;
    assert_eq!(s.remove_session("x"), 1);
}

#[test]
fn an_invalid_config_is_refused() {
    assert!(GaplessEventStore::new(Config::default().events(0)).is_err());
}

#[test]
fn the_replay_stream_is_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<gapless_rmcp::ReplayStream>();
    check::<GaplessEventStore>();
    let _: NumberOrString = NumberOrString::Number(1);
}

/// The newest messages are kept parsed for replays; older ones are parsed
/// back from the ring. A replay spanning both yields every event once, in
/// order, each the message stored.
#[tokio::test]
async fn a_replay_past_the_parsed_window_parses_the_rest_back() {
    let s = GaplessEventStore::new(Config::default()).unwrap();
    let ids = request_stream(&s, 150).await;
    let mut stream = replay(&s, &ids[1]).await;
    for n in 2..=150 {
        let item = next(&mut stream).await.expect("an event");
        assert_eq!(item.event_id.as_deref(), Some(ids[n as usize].as_str()));
        assert_eq!(json_of(&item), serde_json::to_value(progress(n)).unwrap());
    }
    assert_pending(&mut stream);
}

/// A placeholder (a message too large for the ring) is not kept parsed, so
/// the kept messages' seqs have a hole; a replay after it still gets each
/// message at its own seq. Mutation: a `recall` that trusts the position
/// (`events[seq - oldest]`) without checking its seq answers progress 5
/// for seq 6.
#[tokio::test]
async fn kept_messages_are_found_by_seq_across_a_placeholder() {
    let s = GaplessEventStore::new(Config::default().events(64).bytes(16 << 10)).unwrap();
    request_stream(&s, 3).await;
    let big = message(json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": { "progressToken": PROGRESS_TOKEN, "progress": 3, "message": "x".repeat(10_000) },
    }));
    let big_id = store_to(&s, STREAM, sse(big)).await;
    let mut ids = Vec::new();
    for n in 4..=8 {
        ids.push(store_to(&s, STREAM, sse(progress(n))).await);
    }
    let mut stream = replay(&s, &big_id).await;
    for (n, id) in (4..=8).zip(&ids) {
        let item = next(&mut stream).await.expect("an event");
        assert_eq!(item.event_id.as_deref(), Some(id.as_str()));
        assert_eq!(progress_of(&item), n);
    }
    assert_pending(&mut stream);
}
