//! The shared store over a real `redis-server`: two stores are two
//! instances of an MCP server. A stream stored on one is replayed by the
//! other, in order and once each, live to its response; uncovered and
//! foreign cursors get the same signals on both; a completed stream's log
//! expires after the grace. A replay reads the log at least every poll
//! (announcements are at most once), and ends with a signal or a warning,
//! never hangs, when the storing instance stops or Redis goes away. An
//! event counts only once Redis and the ring hold it at the same seq.

use futures_util::StreamExt;
use gapless::Config;
use gapless_history::test_support::{Persistence, RedisServer};
use gapless_rmcp::shared::DEFAULT_TIMEOUT;
use gapless_rmcp::{GaplessEventStore, SharedStoreError, StreamKey, StreamLimits};
use rmcp::model::ServerJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::{EventStore, EventStream, ServerSseMessage};
use serde_json::{json, Value};
use std::num::NonZeroUsize;
use std::sync::{Mutex, Once, PoisonError};
use std::time::{Duration, Instant};

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
    signal_error(stream).await["error"]["data"].clone()
}

/// The signal's JSON-RPC error, and the end after it.
async fn signal_error(stream: &mut EventStream) -> Value {
    let log = next(stream).await.expect("the logging notification");
    assert_eq!(json_of(&log)["method"], "notifications/message");
    let error = next(stream).await.expect("the JSON-RPC error");
    assert!(
        next(stream).await.is_none(),
        "the stream ends after a signal"
    );
    json_of(&error)
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

/// How often the replays of the tests below read the log while they wait.
const POLL: Duration = Duration::from_millis(100);

/// An instance over `url` (`redis`'s, perhaps as another user) of
/// 256-event request rings, idle after `idle`, whose Redis calls time out
/// after `timeout` and whose replays read the log at least every [`POLL`].
async fn instance_at(url: String, idle: Duration, timeout: Duration) -> GaplessEventStore {
    let store = GaplessEventStore::new(Config::default().events(256).bytes(64 << 10))
        .expect("a ring config")
        .with_limits(StreamLimits {
            max_streams: NonZeroUsize::new(100).expect("non-zero"),
            idle,
            completed_grace: GRACE,
        })
        .with_follow_poll(POLL);
    let mut config = store.history_config(url);
    config.timeout = timeout;
    store.with_history(config).await.expect("redis answers")
}

/// A priming event, as rmcp stores first on a request stream.
fn priming() -> ServerSseMessage {
    ServerSseMessage::retry(Duration::from_millis(3000))
}

/// The tag logs name the stream of event id `id` by.
fn tag_of(id: &str) -> String {
    let (key, _) = id.split_once('.').expect("key.event");
    key.parse::<StreamKey>()
        .expect("a stream key")
        .tag()
        .to_string()
}

/// A replay on an instance that hears no announcement still gets each
/// event, by reading the log at least every poll: here its Redis user may
/// subscribe to no channel, as if every announcement were lost (its
/// subscription down, or the storing instance gone before it published).
/// Mutation: a replay that waits only for an announcement or the client
/// leaving never yields progress 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_that_hears_no_announcement_reads_each_event_within_the_poll() {
    let redis = RedisServer::start(Persistence::None);
    // Every command on every key, and no channel.
    let user = ["ACL", "SETUSER", "deaf", "on", "nopass", "~*", "+@all"];
    assert_eq!(redis.cli(&user), "OK");
    assert_eq!(
        redis.cli(&["ACL", "SETUSER", "deaf", "resetchannels"]),
        "OK"
    );
    let deaf = format!("redis://deaf:any@127.0.0.1:{}", redis.port());
    let a = instance(&redis, 256).await;
    let b = instance_at(deaf, Duration::from_secs(600), DEFAULT_TIMEOUT).await;
    let first = stored(&a, priming()).await;
    stored(&a, progress(1)).await;
    let mut resumed = replay(&b, &first).await;
    // B has read the log once it yields progress 1: what A stores next,
    // B hears of from no one.
    assert_eq!(progress_of(&next(&mut resumed).await.expect("1")), 1);
    assert_eq!(redis.cli(&["PUBSUB", "CHANNELS"]), "", "no one subscribed");
    let later = [stored(&a, progress(2)).await, stored(&a, response()).await];
    let item = next(&mut resumed).await.expect("progress 2, at a poll");
    assert_eq!(progress_of(&item), 2);
    assert_eq!(item.event_id.as_ref(), Some(&later[0]));
    let item = next(&mut resumed).await.expect("the response, at a poll");
    assert_eq!(item.event_id.as_ref(), Some(&later[1]));
    assert!(next(&mut resumed).await.is_none(), "the end, after it");
}

/// Every warning logged in this test binary once [`capture_warnings`] ran:
/// its message and fields, one line each.
static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn capture_warnings() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        tracing::subscriber::set_global_default(Warnings)
            .expect("no other subscriber in this test binary");
    });
}

fn warnings() -> Vec<String> {
    WARNINGS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// A `tracing` subscriber that keeps warnings and errors in [`WARNINGS`].
struct Warnings;

impl tracing::Subscriber for Warnings {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = Line(String::new());
        event.record(&mut line);
        WARNINGS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(line.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// One event's fields, written out.
struct Line(String);

impl tracing::field::Visit for Line {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

/// A replay whose Redis goes away mid-request ends after the events it
/// sent (the client resumes with the last id it got), with a warning that
/// names the stream: neither a hang nor a silent end. Mutations: a replay
/// that waits only for an announcement hangs (the notifier never gets its
/// subscription back to resync); one that ends on a Redis error without a
/// word fails the warning's check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_whose_redis_goes_away_ends_with_a_warning_naming_the_stream() {
    capture_warnings();
    let mut redis = RedisServer::start(Persistence::None);
    let a = instance(&redis, 256).await;
    let patience = Duration::from_millis(500);
    let b = instance_at(redis.url(), Duration::from_secs(600), patience).await;
    let first = stored(&a, priming()).await;
    stored(&a, progress(1)).await;
    let mut resumed = replay(&b, &first).await;
    assert_eq!(progress_of(&next(&mut resumed).await.expect("1")), 1);
    redis.kill();
    assert!(
        next(&mut resumed).await.is_none(),
        "the replay ends once Redis does not answer"
    );
    // Logged before the replay's end, which the test has seen.
    let tag = tag_of(&first);
    let warnings = warnings();
    assert!(
        warnings
            .iter()
            .any(|line| line.contains(&tag) && line.contains("Redis did not answer")),
        "no warning names stream {tag}: {warnings:#?}"
    );
}

/// A replay of a stream whose storing instance stopped mid-request ends
/// with `foreign_cursor`, for the request, once the log has not grown for
/// the idle period: the store frees such a stream, and the replay's own
/// reads keep its log from expiring, so nothing else would end it.
/// Mutation: without that bound the replay reads the log for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_of_a_stream_that_stopped_growing_ends_with_a_signal_after_the_idle_period() {
    let redis = RedisServer::start(Persistence::None);
    let a = instance(&redis, 256).await;
    let b = instance_at(redis.url(), Duration::from_secs(2), DEFAULT_TIMEOUT).await;
    let first = stored(&a, priming()).await;
    let last = stored(&a, progress(1)).await;
    // The storing instance stops before the response.
    drop(a);
    let mut resumed = replay(&b, &first).await;
    assert_eq!(progress_of(&next(&mut resumed).await.expect("1")), 1);
    let error = signal_error(&mut resumed).await;
    assert_eq!(
        error["error"]["data"]["reason"], "foreign_cursor",
        "{error}"
    );
    assert_eq!(error["error"]["data"]["last_event_id"], last.as_str());
    assert_eq!(error["id"], TOKEN, "the request's id, from its progress");
    let message = error["error"]["message"].as_str().expect("a message");
    assert!(message.contains("stored nothing for"), "{message}");
}

/// A response Redis did not take completes nothing: the stream keeps its
/// ring past the completed grace. Mutation: learning the message before
/// the append marks the stream complete, and the sweep after the grace
/// frees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_redis_did_not_take_does_not_complete_the_stream() {
    let mut redis = RedisServer::start(Persistence::None);
    let a = instance(&redis, 64).await;
    stored(&a, progress(1)).await;
    redis.kill();
    a.store_event(STREAM, &response())
        .await
        .expect_err("Redis is gone");
    let after_grace = Instant::now() + GRACE + Duration::from_secs(1);
    assert_eq!(a.sweep_at(after_grace), 0, "the stream is not complete");
    assert_eq!(a.stream_count(), 1);
}

/// An event Redis took at another seq than the stream's ring here gives
/// it is refused as `OutOfStep`, in a release build too, and the ring is
/// dropped, so a resume reads what Redis holds. Here the ring takes an
/// event through `GaplessEventStore::ring` while the append waits on a
/// paused Redis. Mutation: the former debug-only assertion hands out the
/// ring's seq in a release build, an id that names another event on every
/// other instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_redis_took_at_another_seq_than_the_ring_is_refused_out_of_step() {
    let redis = RedisServer::start(Persistence::None);
    // Far beyond the test's pause: the append waits for Redis.
    let a = instance_at(
        redis.url(),
        Duration::from_secs(600),
        Duration::from_secs(60),
    )
    .await;
    let first = stored(&a, priming()).await;
    redis.pause(true);
    let event = progress(1);
    let mut storing = a.store_event(STREAM, &event);
    assert!(
        futures_util::poll!(&mut storing).is_pending(),
        "the append waits for the paused Redis"
    );
    let ring = a.ring(STREAM).expect("the stream's ring");
    assert_eq!(ring.emit(b"{}"), Ok(2), "the ring's next seq, taken");
    redis.pause(false);
    let error = storing.await.expect_err("Redis gave seq 2 as well");
    assert!(
        matches!(
            error.downcast_ref::<SharedStoreError>(),
            Some(SharedStoreError::OutOfStep {
                expected: 3,
                got: 2
            })
        ),
        "{error:?}"
    );
    assert!(a.ring(STREAM).is_none(), "the ring is dropped");
    let mut resumed = replay(&a, &first).await;
    let item = next(&mut resumed).await.expect("Redis's seq 2");
    assert_eq!(progress_of(&item), 1);
    assert!(item
        .event_id
        .as_deref()
        .is_some_and(|id| id.ends_with("-2")));
}

/// A session's standalone stream stays in the instance that holds the
/// session, even in a shared store: another instance finds no log of it.
/// Mutation: a store that takes every stream for a request stream (or
/// decides by anything but the stream's kind) puts it in Redis, and B
/// replays it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_stream_of_a_shared_store_stays_in_its_instance() {
    let redis = RedisServer::start(Persistence::None);
    let (a, b) = (instance(&redis, 64).await, instance(&redis, 64).await);
    let standalone = "session-1:common";
    let first = a
        .store_event(standalone, &progress(1))
        .await
        .expect("stored in A");
    a.store_event(standalone, &progress(2))
        .await
        .expect("stored in A");
    let mut local = replay(&a, &first).await;
    assert_eq!(progress_of(&next(&mut local).await.expect("2")), 2);
    let data = signal_data(&mut replay(&b, &first).await).await;
    assert_eq!(data["reason"], "foreign_cursor", "{data}");
}
