//! A stream starts on a small ring and moves to its configured size as it
//! fills: no id handed out before the move changes meaning, a replay
//! following the stream live follows it across, and a message larger than
//! the small ring (but not the configured one) is stored, not lost.

#[path = "support/calls.rs"]
mod calls;

use calls::{next, replay, store_to};
use gapless_rmcp::GaplessEventStore;
use rmcp::model::ServerJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::{EventStream, ServerSseMessage};
use serde_json::{json, Value};
use std::time::Duration;

const STREAM: &str = "0d9f3c1e-7a52-4b8e-9c41-2f6e8d0a1b33";
const TOKEN: i64 = 3;
/// Progress notifications: far more than a small first ring holds.
const MANY: u64 = 200;

fn message(value: Value) -> ServerJsonRpcMessage {
    serde_json::from_value(value).expect("a server message")
}

fn progress(n: u64, note: &str) -> ServerSseMessage {
    ServerSseMessage::from_message(message(json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": { "progressToken": TOKEN, "progress": n, "total": MANY, "message": note },
    })))
}

fn result() -> ServerSseMessage {
    ServerSseMessage::from_message(message(json!({
        "jsonrpc": "2.0",
        "id": TOKEN,
        "result": { "content": [{ "type": "text", "text": "done" }], "isError": false },
    })))
}

async fn store(s: &GaplessEventStore, event: ServerSseMessage) -> String {
    store_to(s, STREAM, event).await
}

/// The item's progress number, or `None` for any other message (the
/// signal's notification, the result).
fn progress_of(item: &ServerSseMessage) -> Option<u64> {
    let value = serde_json::to_value(item.message.as_deref()?).ok()?;
    value["params"]["progress"].as_f64().map(|p| p as u64)
}

fn is_result(item: &ServerSseMessage) -> bool {
    matches!(
        item.message.as_deref(),
        Some(ServerJsonRpcMessage::Response(_))
    )
}

/// Everything after `cursor` until the end, as (id, progress or result).
async fn drain(stream: &mut EventStream) -> Vec<(String, Option<u64>, bool)> {
    let mut items = Vec::new();
    while let Some(item) = next(stream).await {
        let id = item
            .event_id
            .clone()
            .expect("every replayed item has an id");
        items.push((id, progress_of(&item), is_result(&item)));
    }
    items
}

/// Mutation: copying nothing into the grown ring (or letting the first
/// ring evict) fails the replay from the priming event.
#[tokio::test]
async fn every_id_handed_out_before_the_stream_grew_replays_exactly() {
    let s = GaplessEventStore::sized_by_kind();
    let priming = store(&s, ServerSseMessage::retry(Duration::from_secs(3))).await;
    let mut ids = Vec::new();
    for n in 1..=MANY {
        ids.push(store(&s, progress(n, &format!("step {n}"))).await);
    }
    let done = store(&s, result()).await;

    for (from, cursor) in [(0, &priming), (5, &ids[4]), (150, &ids[149])] {
        let items = drain(&mut replay(&s, cursor).await).await;
        let expected: Vec<_> = ids[from..]
            .iter()
            .zip(from as u64 + 1..)
            .map(|(id, n)| (id.clone(), Some(n), false))
            .chain([(done.clone(), None, true)])
            .collect();
        assert_eq!(items, expected, "replay after {cursor}");
    }
}

/// Mutation: treating the move record as the end (or not writing it) makes
/// the follower stop (or wait) at the first ring's last event.
#[tokio::test]
async fn a_replay_following_live_follows_the_stream_onto_its_grown_ring() {
    let s = GaplessEventStore::sized_by_kind();
    let priming = store(&s, ServerSseMessage::retry(Duration::from_secs(3))).await;
    let first = store(&s, progress(1, "step 1")).await;
    let mut live = replay(&s, &priming).await;
    let item = next(&mut live).await.expect("progress 1");
    assert_eq!(item.event_id.as_deref(), Some(first.as_str()));
    // Two events: the stream is on its first ring (`ring()` is not asked
    // here, as it would move the stream to its configured ring at once).

    let mut ids = vec![first];
    for n in 2..=MANY {
        ids.push(store(&s, progress(n, &format!("step {n}"))).await);
    }
    let done = store(&s, result()).await;

    let items = drain(&mut live).await;
    let expected: Vec<_> = ids[1..]
        .iter()
        .zip(2..)
        .map(|(id, n)| (id.clone(), Some(n), false))
        .chain([(done, None, true)])
        .collect();
    assert_eq!(items, expected);
}

/// The same, read as each event is stored (as rmcp's live resume does): the
/// follower reads the first ring's move record while the message stored at
/// that seq in the grown ring is still among the recent ones kept parsed.
/// Mutation: recalling a kept message by seq before looking at the record
/// yields that message for the move record and never moves on: the next
/// read times out.
#[tokio::test]
async fn a_replay_read_as_events_are_stored_follows_the_stream_onto_its_grown_ring() {
    let s = GaplessEventStore::sized_by_kind();
    let priming = store(&s, ServerSseMessage::retry(Duration::from_secs(3))).await;
    let mut live = replay(&s, &priming).await;
    for n in 1..=MANY {
        let id = store(&s, progress(n, &format!("step {n}"))).await;
        let item = next(&mut live).await.expect("the progress just stored");
        assert_eq!(
            (item.event_id.as_deref(), progress_of(&item)),
            (Some(id.as_str()), Some(n)),
            "progress {n}"
        );
    }
    let done = store(&s, result()).await;
    let item = next(&mut live).await.expect("the result");
    assert_eq!(item.event_id.as_deref(), Some(done.as_str()));
    assert!(is_result(&item));
    assert!(next(&mut live).await.is_none(), "the replay ends after it");
}

/// Mutation: growing by the event count only emits such a message into the
/// small first ring, which refuses it: a placeholder is stored and the
/// replay yields the lost-event signal (under the cursor's id) instead.
#[tokio::test]
async fn a_message_larger_than_the_first_ring_but_not_the_stream_is_kept() {
    let s = GaplessEventStore::sized_by_kind();
    let priming = store(&s, ServerSseMessage::retry(Duration::from_secs(3))).await;
    // 40 KiB: above a 16 KiB first ring's payload limit, well under the
    // configured 256 KiB ring's.
    let large = "x".repeat(40 << 10);
    let id = store(&s, progress(1, &large)).await;
    let items = drain(&mut {
        let mut stream = replay(&s, &priming).await;
        let item = next(&mut stream).await.expect("the large message");
        assert_eq!(item.event_id.as_deref(), Some(id.as_str()));
        let value =
            serde_json::to_value(item.message.as_deref().expect("a message")).expect("JSON");
        assert_eq!(value["params"]["message"], large.as_str(), "not the signal");
        store(&s, result()).await;
        stream
    })
    .await;
    assert_eq!(items.len(), 1);
    assert!(items[0].2, "then the result");
}

/// `ring()` hands out the stream's ring at its configured size (callers may
/// emit to it), moving a stream still on its first ring.
/// Mutation: handing out the current ring fails the size check.
#[tokio::test]
async fn the_ring_handed_out_is_the_configured_one() {
    let s = GaplessEventStore::sized_by_kind();
    let priming = store(&s, ServerSseMessage::retry(Duration::from_secs(3))).await;
    let first = store(&s, progress(1, "step 1")).await;
    let ring = s.ring(STREAM).expect("the stream's ring");
    assert_eq!(
        ring.geometry(),
        s.config().geometry().expect("valid"),
        "the configured ring"
    );
    let second = store(&s, progress(2, "step 2")).await;
    assert_eq!(
        ring.published(),
        3,
        "the store emits to the ring handed out"
    );
    let items = drain(&mut {
        let stream = replay(&s, &priming).await;
        store(&s, result()).await;
        stream
    })
    .await;
    let ids: Vec<_> = items.iter().map(|(id, _, _)| id.clone()).collect();
    assert_eq!(&ids[..2], &[first, second]);
    assert_eq!(items.len(), 3);
}
