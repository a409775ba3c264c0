//! The window: a stream keeps its newest events as rmcp's messages and
//! writes an event to its ring only when it leaves the window. Every event
//! is read from one of the two, at the seq handed out for it, and a replay
//! waiting for the next event is woken by it.
//!
//! Windows of a few events (smaller than the default) so that a short test
//! crosses the boundary many times; every wait is bounded (`next`'s
//! timeout is a watchdog, never a synchronisation).

#[path = "support/calls.rs"]
mod calls;

use calls::{next, replay, store_to};
use futures_util::StreamExt;
use gapless::Config;
use gapless_rmcp::GaplessEventStore;
use rmcp::model::ServerJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

const STREAM: &str = "0b7e5a2c-9d41-4f3e-8c6a-1e2f3a4b5c6d";
const TOKEN: i64 = 5;

/// A store on `config` whose streams keep their newest `window` events as
/// rmcp's messages.
fn windowed(config: Config, window: usize) -> GaplessEventStore {
    GaplessEventStore::new(config)
        .expect("a valid config")
        .with_window(window)
}

fn message(value: Value) -> ServerJsonRpcMessage {
    serde_json::from_value(value).expect("a server message")
}

fn progress(n: u64) -> ServerSseMessage {
    ServerSseMessage::from_message(message(json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": { "progressToken": TOKEN, "progress": n, "message": format!("step {n}") },
    })))
}

fn result() -> ServerSseMessage {
    ServerSseMessage::from_message(message(json!({
        "jsonrpc": "2.0",
        "id": TOKEN,
        "result": { "content": [{ "type": "text", "text": "done" }], "isError": false },
    })))
}

fn priming() -> ServerSseMessage {
    ServerSseMessage::retry(Duration::from_secs(3))
}

async fn store(s: &GaplessEventStore, event: ServerSseMessage) -> String {
    store_to(s, STREAM, event).await
}

/// What an item is: `Some(n)` for progress `n`, `Some(0)` for the result,
/// `None` for an event without a message (the priming event); panics on
/// anything else (a signal).
fn what(item: &ServerSseMessage) -> Option<u64> {
    let message = item.message.as_deref()?;
    let value = serde_json::to_value(message).expect("JSON");
    if value.get("result").is_some() {
        return Some(0);
    }
    match value["params"]["progress"].as_f64() {
        Some(n) => Some(n as u64),
        None => panic!("not an event of the stream: {value}"),
    }
}

/// The seq at the end of an event id.
fn seq_of(id: &str) -> u64 {
    id.rsplit('-')
        .next()
        .and_then(|seq| seq.parse().ok())
        .expect("an event id ends with its seq")
}

/// A stream of a priming event, `n` progress notifications and the result,
/// stored through a window of `window` events: every id is handed out
/// once, at seqs 1, 2, 3, … whatever the window; a replay from every
/// cursor yields exactly the events after it (each id with its own event),
/// then ends after the result.
///
/// Mutations: a replay that skips the ring (jumps to the window) or the
/// events that left the window meanwhile misses events here; a window
/// whose first seq does not advance when an event leaves it hands out a
/// seq twice (the ids are not distinct); a ring that numbers an event
/// leaving the window off by one fails the store (`OutOfStep`) or, with
/// the check removed, names another event by the id (the replayed events
/// do not match).
async fn every_cursor_replays_exactly(window: usize, config: Config, n: u64) {
    let s = windowed(config, window);
    let mut ids = vec![store(&s, priming()).await];
    let mut events = vec![None];
    for i in 1..=n {
        ids.push(store(&s, progress(i)).await);
        events.push(Some(i));
    }
    ids.push(store(&s, result()).await);
    events.push(Some(0));
    let seqs: Vec<u64> = ids.iter().map(|id| seq_of(id)).collect();
    let dense: Vec<u64> = (1..=ids.len() as u64).collect();
    assert_eq!(seqs, dense, "one seq per event, dense, none twice");
    for (at, cursor) in ids.iter().enumerate().take(ids.len() - 1) {
        let mut stream = replay(&s, cursor).await;
        let mut got = Vec::new();
        while let Some(item) = next(&mut stream).await {
            got.push((item.event_id.clone().expect("an id"), what(&item)));
        }
        let expected: Vec<_> = ids[at + 1..]
            .iter()
            .cloned()
            .zip(events[at + 1..].iter().copied())
            .collect();
        assert_eq!(got, expected, "after cursor {} (window {window})", at + 1);
    }
}

#[tokio::test]
async fn every_event_is_read_from_the_window_or_the_ring_at_its_seq() {
    // A ring that holds everything, starting small and growing.
    every_cursor_replays_exactly(4, Config::default().events(256).bytes(256 << 10), 100).await;
    // One event in the window; the default's.
    every_cursor_replays_exactly(1, Config::default(), 40).await;
    every_cursor_replays_exactly(16, Config::default(), 40).await;
    // A stream that never leaves its window.
    every_cursor_replays_exactly(16, Config::default(), 10).await;
}

/// A replay that read the window's first events, then fell behind while
/// the stream stored more than the window holds, reads the events that
/// left the window meanwhile from the ring, in order, then the window
/// again. Mutation: a replay that, once reading the window, reads only the
/// window (from its first event) skips them.
#[tokio::test]
async fn a_replay_behind_the_window_reads_what_left_it_from_the_ring() {
    let s = windowed(Config::default(), 4);
    let primed = store(&s, priming()).await;
    store(&s, progress(1)).await;
    store(&s, progress(2)).await;
    let mut stream = replay(&s, &primed).await;
    let first = next(&mut stream).await.expect("progress 1");
    assert_eq!(what(&first), Some(1));
    let mut ids = Vec::new();
    for i in 3..=30 {
        ids.push(store(&s, progress(i)).await);
    }
    let second = next(&mut stream).await.expect("progress 2");
    assert_eq!(what(&second), Some(2));
    for (i, id) in (3..=30).zip(&ids) {
        let item = next(&mut stream).await.expect("the next progress");
        assert_eq!(
            (item.event_id.as_deref(), what(&item)),
            (Some(&**id), Some(i))
        );
    }
    store(&s, result()).await;
    let last = next(&mut stream).await.expect("the result");
    assert_eq!(what(&last), Some(0));
    assert!(
        next(&mut stream).await.is_none(),
        "it ends after the result"
    );
}

/// Counts its wake-ups.
#[derive(Default)]
struct Wakes(AtomicUsize);

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A replay that has read everything waits, and the next event stored
/// wakes it (the waker it left in the window): checked on the poll's own
/// waker, and on a replay polled by another task under a watchdog.
/// Mutation: a `push` that does not wake the window's waiting replays
/// leaves the waker unwoken (and the other task's replay never yields:
/// the watchdog fails it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_replay_is_woken_by_the_next_event() {
    let s = Arc::new(windowed(Config::default(), 4));
    store(&s, priming()).await;
    let cursor = store(&s, progress(1)).await;
    let mut stream = replay(&*s, &cursor).await;
    let wakes = Arc::new(Wakes::default());
    let waker = Waker::from(Arc::clone(&wakes));
    let mut cx = Context::from_waker(&waker);
    assert!(stream.poll_next_unpin(&mut cx).is_pending(), "nothing yet");
    assert_eq!(wakes.0.load(Ordering::SeqCst), 0);
    let id = store(&s, progress(2)).await;
    assert!(wakes.0.load(Ordering::SeqCst) >= 1, "the store woke it");
    match stream.poll_next_unpin(&mut cx) {
        Poll::Ready(Some(item)) => assert_eq!(item.event_id, Some(id)),
        other => panic!(
            "progress 2: {:?}",
            other.map(|item| item.map(|i| i.event_id))
        ),
    }

    // Followed live by another task, across the window's boundary: each
    // event stored wakes it.
    let follower = tokio::spawn(async move {
        let mut got = Vec::new();
        while let Some(item) = stream.next().await {
            got.push(what(&item));
        }
        got
    });
    for i in 3..=40 {
        store(&s, progress(i)).await;
        tokio::task::yield_now().await;
    }
    store(&s, result()).await;
    let got = tokio::time::timeout(Duration::from_secs(10), follower)
        .await
        .expect("the follower got every event within 10 s")
        .expect("the follower did not panic");
    let expected: Vec<_> = (3..=40).map(Some).chain([Some(0)]).collect();
    assert_eq!(got, expected);
}

/// A replay waiting in the window ends when the stream is removed, after
/// what it has not read yet. Mutation: a `close` that does not wake the
/// window's waiting replays leaves it waiting (the watchdog fails it).
#[tokio::test]
async fn a_waiting_replay_ends_when_the_stream_is_removed() {
    let s = windowed(Config::default(), 4);
    let cursor = store(&s, priming()).await;
    let mut stream = replay(&s, &cursor).await;
    let wakes = Arc::new(Wakes::default());
    let waker = Waker::from(Arc::clone(&wakes));
    let mut cx = Context::from_waker(&waker);
    assert!(stream.poll_next_unpin(&mut cx).is_pending(), "nothing yet");
    assert!(s.remove_stream(STREAM));
    assert!(wakes.0.load(Ordering::SeqCst) >= 1, "the removal woke it");
    assert!(next(&mut stream).await.is_none(), "it ends");
}

/// Handing out the ring writes the window to it: the ring then holds every
/// event at its seq, and a replay waiting in the window goes on from the
/// ring.
#[tokio::test]
async fn handing_out_the_ring_writes_the_window_to_it() {
    let s = windowed(Config::default(), 8);
    let cursor = store(&s, priming()).await;
    for i in 1..=5 {
        store(&s, progress(i)).await;
    }
    let mut stream = replay(&s, &cursor).await;
    for i in 1..=5 {
        assert_eq!(what(&next(&mut stream).await.expect("progress")), Some(i));
    }
    let wakes = Arc::new(Wakes::default());
    let waker = Waker::from(Arc::clone(&wakes));
    let mut cx = Context::from_waker(&waker);
    assert!(stream.poll_next_unpin(&mut cx).is_pending(), "nothing yet");
    let ring = s.ring(STREAM).expect("the stream's ring");
    assert_eq!(ring.published(), 6, "the window was written to the ring");
    assert!(
        wakes.0.load(Ordering::SeqCst) >= 1,
        "the waiting replay woke"
    );
    let id = store(&s, progress(6)).await;
    assert_eq!(seq_of(&id), 7);
    assert_eq!(ring.published(), 7, "stored to the ring handed out");
    let item = next(&mut stream).await.expect("progress 6");
    assert_eq!((item.event_id.clone(), what(&item)), (Some(id), Some(6)));
}

/// A cursor the ring evicted (events that left the window long ago) gets
/// the gap signal; one beyond the last seq handed out is ahead.
#[tokio::test]
async fn an_evicted_cursor_behind_the_window_gets_the_gap_signal() {
    let s = windowed(Config::default().events(8).bytes(4096), 4);
    let mut ids = vec![store(&s, priming()).await];
    for i in 1..=40 {
        ids.push(store(&s, progress(i)).await);
    }
    let mut stream = replay(&s, &ids[2]).await;
    let log = next(&mut stream).await.expect("the signal");
    let value = serde_json::to_value(log.message.as_deref().expect("a message")).expect("JSON");
    assert_eq!(
        value["params"]["data"]["reason"], "gap_not_covered",
        "{value}"
    );
    // The newest events, from the window: exact.
    let mut stream = replay(&s, &ids[38]).await;
    assert_eq!(what(&next(&mut stream).await.expect("39")), Some(39));
    assert_eq!(what(&next(&mut stream).await.expect("40")), Some(40));
    // Ahead of everything handed out.
    let ahead = ids[40].replace("-41", "-42");
    let mut stream = replay(&s, &ahead).await;
    let log = next(&mut stream).await.expect("the signal");
    let value = serde_json::to_value(log.message.as_deref().expect("a message")).expect("JSON");
    assert_eq!(
        value["params"]["data"]["reason"], "foreign_cursor",
        "{value}"
    );
}

/// A message too large for the ring is replayed exactly while it is in the
/// window, and reported lost (the lost-event signal naming its seq) once
/// it has left it: never skipped, never misnumbered.
#[tokio::test]
async fn a_message_too_large_for_the_ring_is_lost_only_once_it_leaves_the_window() {
    let s = windowed(Config::default().events(64).bytes(512), 2);
    let primed = store(&s, priming()).await;
    let big = ServerSseMessage::from_message(message(json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": { "progressToken": TOKEN, "progress": 1, "message": "x".repeat(1000) },
    })));
    let big_id = store(&s, big).await;
    let mut stream = replay(&s, &primed).await;
    let item = next(&mut stream).await.expect("the large message");
    assert_eq!(
        (item.event_id.as_deref(), what(&item)),
        (Some(&*big_id), Some(1))
    );
    store(&s, progress(2)).await;
    store(&s, progress(3)).await;
    let mut stream = replay(&s, &primed).await;
    let log = next(&mut stream).await.expect("the signal");
    assert_eq!(log.event_id.as_deref(), Some(&*primed));
    let value = serde_json::to_value(log.message.as_deref().expect("a message")).expect("JSON");
    let data = &value["params"]["data"];
    assert_eq!(data["reason"], "lost_event", "{value}");
    assert_eq!(data["lost_seq"], 2, "{value}");
}
