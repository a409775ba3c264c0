//! Append notifications (`serve --redis URL`): one pub/sub connection per
//! instance telling every mirror on it "session X now ends at seq N".
//!
//! A mirror keeps its local ring equal to the session's Redis Stream. It
//! used to follow the stream with a blocking `XREAD`, which holds a Redis
//! connection for as long as it blocks: one connection per followed
//! session, 200 connections for 200 live SSE streams. Instead, the append
//! script ends with `PUBLISH gapless:appended:<session-id> "<session-id>
//! <last-seq>"` ([`channel`], [`message`]), and each instance runs one
//! [`Notifier`]: a single connection subscribed to the channels of the
//! sessions this instance follows ([`Notifier::follow`]), whose messages
//! are fanned out to their followers. An append to a session nobody
//! follows reaches no instance (one channel for every session made each
//! instance parse every append: measured, 29 µs of instance CPU and 10 µs
//! of Redis per emit with two instances). A mirror that
//! learns its session grew reads the new events over the instance's
//! ordinary multiplexed connection. Redis connections per instance are
//! thus bounded (the multiplexed one plus this one), whatever the number
//! of followed sessions.
//!
//! Pub/sub is at-most-once: a message published while a channel is not
//! subscribed (before its SUBSCRIBE is confirmed; Redis restarting, a
//! failover, a broken or silent connection) is lost, not queued. Hence the
//! resync rule: every time a session's channel is (re)subscribed
//! (SUBSCRIBE confirmed: when it is first followed, and after every
//! reconnection), its [`Seen::resyncs`] goes up, meaning "announcements may
//! have been missed: re-read from Redis". This leaves no window: an append
//! after the follower's read is either announced on a live subscription or
//! falls before a confirmation that is followed by a resync.
//!
//! A silent connection (Redis paused, a network partition without RST)
//! never ends the message stream by itself, so the subscription is also
//! checked with a `PING` every second (`PING_EVERY`), answered within the
//! timeout or treated as lost.
//!
//! The hot path is one parse and one map lookup per message: an
//! announcement for a session nobody here follows is dropped; for a
//! followed one, [`Seen::published`] is raised (never lowered) and its
//! followers are woken only if it did rise.

use crate::LogId;
use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use std::collections::hash_map::{Entry, HashMap};
use std::collections::HashSet;
use std::hash::Hash;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::AbortHandle;

/// The channel the append script announces session `id`'s appends on
/// (`"gapless:appended:" .. id` in `append.lua`).
pub fn channel(id: &LogId) -> String {
    format!("gapless:appended:{id}")
}

/// How often a live subscription is checked with a `PING`.
const PING_EVERY: Duration = Duration::from_secs(1);

/// The first wait before reconnecting after the subscription failed.
const BACKOFF_MIN: Duration = Duration::from_millis(50);

/// The longest wait between reconnection attempts (the wait doubles from
/// [`BACKOFF_MIN`] up to this, and is reset once subscribed again).
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The announcement of an append: `"<session-id> <last-seq>"`, the session
/// ID as 32 lowercase hex digits and the last seq appended in decimal.
pub fn message(id: &LogId, last: u64) -> String {
    format!("{id} {last}")
}

/// Parses what [`message`] writes, strictly: exactly 32 lowercase hex
/// digits, one space, 1 to 20 ASCII decimal digits that fit a `u64` (no
/// sign, no whitespace, nothing after). Anything else is `None`.
fn parse(payload: &[u8]) -> Option<(LogId, u64)> {
    let text = std::str::from_utf8(payload).ok()?;
    let (id, last) = text.split_once(' ')?;
    // `u64::from_str` would also take a leading `+`.
    if last.is_empty() || !last.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((id.parse().ok()?, last.parse().ok()?))
}

/// What a follower has been told about its session. Both counters only
/// ever grow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seen {
    /// The highest last seq announced for the session since it began to be
    /// followed on this instance (0: none yet). Announcements of a lower
    /// or equal seq change nothing.
    pub published: u64,
    /// How many times the subscription was (re)established while the
    /// session was followed: each rise means announcements may have been
    /// missed, and the follower re-reads the session from Redis.
    pub resyncs: u64,
}

/// One pub/sub connection per instance, fanning out append announcements
/// to the sessions followed here. Dropping it (the last [`Arc`]) stops its
/// task and closes the connection; its followers' [`Followed::changed`]
/// then returns `None`.
pub struct Notifier {
    /// The followed sessions, shared with the task and the [`Followed`]s.
    shared: Arc<FollowedSessions>,
    /// The task that holds the subscription: aborted on drop.
    task: AbortHandle,
}

/// The sessions followed on this instance, and what the subscription of
/// their channels must catch up with: shared by the notifier, its task and
/// the followers.
struct FollowedSessions {
    /// The sessions followed on this instance: an entry exists exactly as
    /// long as at least one [`Followed`] of its session does (until the
    /// notifier is dropped, which empties it).
    sessions: Mutex<HashMap<LogId, Watched>>,
    /// Whether the connection is established now (no failure seen since).
    subscribed: AtomicBool,
    /// Sessions whose channel may need (un)subscribing: followed or no
    /// longer followed since the task last looked.
    changed: Mutex<HashSet<LogId>>,
    /// Wakes the task to look at `changed`.
    wake: tokio::sync::Notify,
}

/// One followed session.
struct Watched {
    /// What its followers have been told; they hold its receivers.
    sender: watch::Sender<Seen>,
    /// How many [`Followed`] of the session exist: at least 1.
    followers: usize,
}

impl Notifier {
    /// Starts the notifier's task, which subscribes the [`channel`] of every
    /// followed session on its own connection from `client` and keeps them
    /// subscribed, each connect and (UN)SUBSCRIBE bounded by `timeout`,
    /// also the deadline of its health-check `PING`s.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn start(client: redis::Client, timeout: Duration) -> Arc<Notifier> {
        let shared = Arc::new(FollowedSessions {
            sessions: Mutex::new(HashMap::new()),
            subscribed: AtomicBool::new(false),
            changed: Mutex::new(HashSet::new()),
            wake: tokio::sync::Notify::new(),
        });
        let task = tokio::spawn(run(Arc::clone(&shared), client, timeout)).abort_handle();
        Arc::new(Notifier { shared, task })
    }

    /// Follows session `id`: announcements of its appends, and resyncs,
    /// from now on; the first [`Followed::changed`] is the resync that
    /// confirms its channel's subscription. Read the session from Redis,
    /// then wait on [`Followed::changed`]: nothing appended after the read
    /// is missed. Followers of one session share one entry.
    pub fn follow(&self, id: LogId) -> Followed {
        let mut sessions = self.shared.lock();
        let watched = sessions.entry(id).or_insert_with(|| {
            self.shared.mark(id);
            Watched {
                sender: watch::Sender::new(Seen::default()),
                followers: 0,
            }
        });
        watched.followers += 1;
        let receiver = watched.sender.subscribe();
        let resyncs = receiver.borrow().resyncs;
        Followed {
            id,
            receiver,
            resyncs,
            shared: Arc::clone(&self.shared),
        }
    }

    /// How many sessions are followed on this instance.
    pub fn followed(&self) -> usize {
        self.shared.lock().len()
    }

    /// Whether the subscription is established now. While it is not,
    /// announcements are lost; its return is a resync.
    pub fn subscribed(&self) -> bool {
        self.shared.subscribed.load(Ordering::Relaxed)
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        // Dropping the task drops the connection; emptying the map drops
        // the senders, so followers learn that nothing will come.
        self.task.abort();
        self.shared.subscribed.store(false, Ordering::Relaxed);
        self.shared.lock().clear();
    }
}

/// One follower of a session (from [`Notifier::follow`]); the session is
/// no longer followed once all of its `Followed` are dropped.
pub struct Followed {
    /// The session followed.
    id: LogId,
    /// What the notifier announced for it.
    receiver: watch::Receiver<Seen>,
    /// [`Seen::resyncs`] when this follower began or last reported a
    /// [`Change::Resync`]: a higher one is a resync not yet reported.
    resyncs: u64,
    /// Where its entry lives (to remove it on the last drop).
    shared: Arc<FollowedSessions>,
}

/// What [`Followed::changed`] reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The subscription was (re)established since the follower began or
    /// last heard of one: announcements may have been missed, re-read the
    /// session from Redis. `published` is the highest seq announced so
    /// far.
    Resync {
        /// The highest last seq announced since following began.
        published: u64,
    },
    /// The session now ends at this seq (or later): read past the ring if
    /// it is behind.
    Published(u64),
}

impl Followed {
    /// The session followed.
    pub fn id(&self) -> LogId {
        self.id
    }

    /// What has been announced so far (a peek: [`changed`](Self::changed)
    /// still reports it).
    pub fn seen(&self) -> Seen {
        *self.receiver.borrow()
    }

    /// Waits until something not yet reported is announced: a resync
    /// (reported first, whatever else changed) or a higher published seq.
    /// `None` once the notifier is dropped.
    pub async fn changed(&mut self) -> Option<Change> {
        self.receiver.changed().await.ok()?;
        let seen = *self.receiver.borrow_and_update();
        if seen.resyncs != self.resyncs {
            self.resyncs = seen.resyncs;
            return Some(Change::Resync {
                published: seen.published,
            });
        }
        Some(Change::Published(seen.published))
    }
}

impl Drop for Followed {
    fn drop(&mut self) {
        let mut sessions = self.shared.lock();
        if let Entry::Occupied(mut watched) = sessions.entry(self.id) {
            watched.get_mut().followers -= 1;
            if watched.get().followers == 0 {
                watched.remove();
                self.shared.mark(self.id);
            }
        }
    }
}

impl FollowedSessions {
    fn lock(&self) -> MutexGuard<'_, HashMap<LogId, Watched>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One announcement: raises the session's published seq if it is
    /// followed here and the seq is higher; anything else is dropped.
    fn deliver(&self, payload: &[u8]) {
        let Some((id, last)) = parse(payload) else {
            tracing::debug!(
                len = payload.len(),
                "ignoring a malformed append announcement"
            );
            return;
        };
        if let Some(watched) = self.lock().get(&id) {
            watched.sender.send_if_modified(|seen| {
                let higher = last > seen.published;
                if higher {
                    seen.published = last;
                }
                higher
            });
        }
    }

    /// Session `id` was followed or is no longer: the task (un)subscribes
    /// its channel.
    fn mark(&self, id: LogId) {
        self.changed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id);
        self.wake.notify_one();
    }

    /// The channels of `ids` are (re)subscribed: their followers re-read.
    fn resync(&self, ids: &[LogId]) {
        let sessions = self.lock();
        for id in ids {
            if let Some(watched) = sessions.get(id) {
                watched.sender.send_modify(|seen| seen.resyncs += 1);
            }
        }
    }

    /// What the connection must change, given the channels it has: the
    /// followed sessions it lacks, and the ones it has that nobody
    /// follows. With `all`, every session is looked at (a new
    /// connection); otherwise those marked since the last look.
    fn to_change(&self, has: &HashSet<LogId>, all: bool) -> (Vec<LogId>, Vec<LogId>) {
        let marked =
            std::mem::take(&mut *self.changed.lock().unwrap_or_else(PoisonError::into_inner));
        changes(&self.lock(), marked, has, all)
    }
}

/// [`FollowedSessions::to_change`] for the sessions `followed` (under its
/// lock) and `marked`: each session looked at once, with hash lookups
/// only, so a new connection with 10,000 followed sessions costs 10,000
/// lookups, not their square.
fn changes<K: Copy + Eq + Hash, V>(
    followed: &HashMap<K, V>,
    marked: HashSet<K>,
    has: &HashSet<K>,
    all: bool,
) -> (Vec<K>, Vec<K>) {
    let mut add = Vec::new();
    let mut drop = Vec::new();
    if all {
        add.extend(followed.keys().filter(|id| !has.contains(*id)));
    }
    for id in marked {
        match (followed.contains_key(&id), has.contains(&id)) {
            // With `all`, every followed session was looked at above.
            (true, false) if !all => add.push(id),
            (false, true) => drop.push(id),
            _ => {}
        }
    }
    (add, drop)
}

/// The notifier's task: connect, subscribe the followed sessions'
/// channels, forward, and on any failure wait, reconnect and resync, until
/// aborted.
async fn run(shared: Arc<FollowedSessions>, client: redis::Client, timeout: Duration) {
    let mut backoff = BACKOFF_MIN;
    let mut failures = 0u32;
    loop {
        match tokio::time::timeout(timeout, subscribe(&client)).await {
            Ok(Ok((sink, stream))) => {
                if failures > 0 {
                    tracing::info!(failures, "append notifications resubscribed");
                }
                failures = 0;
                backoff = BACKOFF_MIN;
                shared.subscribed.store(true, Ordering::Relaxed);
                let cause = forward(&shared, sink, stream, timeout).await;
                shared.subscribed.store(false, Ordering::Relaxed);
                tracing::warn!(%cause, "append notifications lost; resubscribing");
            }
            Ok(Err(error)) => failures = failed(failures, &error),
            Err(_) => failures = failed(failures, &format!("no answer within {timeout:?}")),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Logs a failed attempt to subscribe (the first of a run as a warning);
/// the new count of failures in a row.
fn failed(failures: u32, cause: &dyn std::fmt::Display) -> u32 {
    if failures == 0 {
        tracing::warn!(%cause, "cannot subscribe to append notifications; retrying");
    } else {
        tracing::debug!(%cause, failures, "cannot subscribe to append notifications");
    }
    failures.saturating_add(1)
}

/// A new pub/sub connection (its channels are subscribed by [`forward`]).
async fn subscribe(client: &redis::Client) -> redis::RedisResult<(PubSubSink, PubSubStream)> {
    Ok(client.get_async_pubsub().await?.split())
}

/// Brings the connection's channels (`has`) in line with the followed
/// sessions (all of them with `all`), each SUBSCRIBE confirmed within
/// `timeout`, then resyncs the sessions subscribed; `Err` with why it
/// failed.
async fn reconcile(
    shared: &FollowedSessions,
    sink: &mut PubSubSink,
    has: &mut HashSet<LogId>,
    all: bool,
    timeout: Duration,
) -> Result<(), String> {
    let (add, drop) = shared.to_change(has, all);
    if !drop.is_empty() {
        let channels: Vec<String> = drop.iter().map(channel).collect();
        match tokio::time::timeout(timeout, sink.unsubscribe(channels)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(format!("UNSUBSCRIBE failed: {error}")),
            Err(_) => return Err(format!("no answer to UNSUBSCRIBE within {timeout:?}")),
        }
        for id in &drop {
            has.remove(id);
        }
    }
    if !add.is_empty() {
        let channels: Vec<String> = add.iter().map(channel).collect();
        match tokio::time::timeout(timeout, sink.subscribe(channels)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(format!("SUBSCRIBE failed: {error}")),
            Err(_) => return Err(format!("no answer to SUBSCRIBE within {timeout:?}")),
        }
        has.extend(add.iter().copied());
        shared.resync(&add);
    }
    Ok(())
}

/// Delivers the subscription's messages until it fails; why it did.
async fn forward(
    shared: &FollowedSessions,
    mut sink: PubSubSink,
    mut stream: PubSubStream,
    timeout: Duration,
) -> String {
    let start = tokio::time::Instant::now() + PING_EVERY;
    let mut ping = tokio::time::interval_at(start, PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut has = HashSet::new();
    if let Err(cause) = reconcile(shared, &mut sink, &mut has, true, timeout).await {
        return cause;
    }
    loop {
        tokio::select! {
            message = stream.next() => match message {
                // The payload names its session: no need to look at the
                // channel name.
                Some(message) => shared.deliver(message.get_payload_bytes()),
                None => return "the connection closed".to_owned(),
            },
            () = shared.wake.notified() => {
                // Messages keep queueing in the connection meanwhile.
                if let Err(cause) = reconcile(shared, &mut sink, &mut has, false, timeout).await {
                    return cause;
                }
            }
            _ = ping.tick() => {
                // Messages keep queueing in the connection meanwhile.
                match tokio::time::timeout(timeout, sink.ping::<redis::Value>()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => return format!("PING failed: {error}"),
                    Err(_) => return format!("no answer to PING within {timeout:?}"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{Persistence, RedisServer};
    use redis::aio::MultiplexedConnection;
    use std::time::Instant;

    /// How long anything awaited in these tests may take.
    const DEADLINE: Duration = Duration::from_secs(10);

    /// The notifier's connect and PING deadline in the test of a silent
    /// connection, which waits for the PING to give up.
    const TIMEOUT: Duration = Duration::from_millis(500);

    /// The notifier's deadline everywhere else: a stall of the test or of
    /// redis-server is not a silent connection (a spurious resubscription
    /// would break the counts these tests check).
    const PATIENT: Duration = Duration::from_secs(5);

    /// A plain client and connection to the tests' `redis-server` (the
    /// integration tests' own launcher, shared).
    trait Connect {
        fn client(&self) -> redis::Client;
        async fn connection(&self) -> MultiplexedConnection;
    }

    impl Connect for RedisServer {
        fn client(&self) -> redis::Client {
            redis::Client::open(self.url()).expect("a client")
        }

        /// A plain (not pub/sub) connection.
        async fn connection(&self) -> MultiplexedConnection {
            self.client()
                .get_multiplexed_async_connection()
                .await
                .expect("a connection to redis-server")
        }
    }

    fn session(byte: u8) -> LogId {
        LogId::from_bytes([byte; 16])
    }

    /// PUBLISHes `payload` on session `id`'s [`channel`]; how many
    /// subscribers got it.
    async fn publish(
        con: &mut MultiplexedConnection,
        id: &LogId,
        payload: impl AsRef<[u8]>,
    ) -> u64 {
        redis::cmd("PUBLISH")
            .arg(channel(id))
            .arg(payload.as_ref())
            .query_async(con)
            .await
            .expect("PUBLISH")
    }

    /// How many pub/sub connections redis-server has.
    async fn pubsub_clients(con: &mut MultiplexedConnection) -> usize {
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .arg("TYPE")
            .arg("pubsub")
            .query_async(con)
            .await
            .expect("CLIENT LIST");
        list.lines().filter(|line| !line.trim().is_empty()).count()
    }

    /// Waits (up to [`DEADLINE`]) until what `followed` was told satisfies
    /// `ok`; that.
    async fn until(followed: &mut Followed, what: &str, ok: impl Fn(Seen) -> bool) -> Seen {
        let wait = async {
            loop {
                let seen = followed.seen();
                if ok(seen) {
                    return seen;
                }
                followed.changed().await.expect("the notifier is running");
            }
        };
        match tokio::time::timeout(DEADLINE, wait).await {
            Ok(seen) => seen,
            Err(_) => panic!("{what}: not within {DEADLINE:?} ({:?})", followed.seen()),
        }
    }

    /// The next change `followed` reports (within [`DEADLINE`]).
    async fn next_change(followed: &mut Followed) -> Change {
        tokio::time::timeout(DEADLINE, followed.changed())
            .await
            .unwrap_or_else(|_| panic!("no change within {DEADLINE:?} ({:?})", followed.seen()))
            .expect("the notifier is running")
    }

    /// Polls `ok` (up to [`DEADLINE`]).
    async fn poll(what: &str, mut ok: impl AsyncFnMut() -> bool) {
        let deadline = Instant::now() + DEADLINE;
        while !ok().await {
            assert!(Instant::now() < deadline, "{what}: not within {DEADLINE:?}");
            tokio::time::sleep(Duration::from_millis(20)).await; // polling, bounded
        }
    }

    /// A session ID that counts how often it is compared.
    #[derive(Clone, Copy, Debug)]
    struct Counted(u32);

    impl Hash for Counted {
        fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
            self.0.hash(state);
        }
    }

    thread_local! {
        static COMPARED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    impl PartialEq for Counted {
        fn eq(&self, other: &Self) -> bool {
            COMPARED.with(|compared| compared.set(compared.get() + 1));
            self.0 == other.0
        }
    }

    impl Eq for Counted {}

    /// What a resubscription must change, for 10,000 followed sessions,
    /// costs a few comparisons of session IDs per session (hash lookups),
    /// not one per pair. Mutation: the old way (every followed and marked
    /// session in one list, the ones to add kept unique with
    /// `Vec::contains`) compares each with every one before it: some 100
    /// million comparisons.
    #[test]
    fn resubscribing_many_sessions_takes_linear_work() {
        const N: u32 = 10_000;
        let followed: HashMap<Counted, ()> = (0..N).map(|n| (Counted(n), ())).collect();
        let counted = |all, marked: HashSet<Counted>, has: &HashSet<Counted>| {
            COMPARED.with(|compared| compared.set(0));
            let (add, drop) = changes(&followed, marked, has, all);
            let compared = COMPARED.with(std::cell::Cell::get);
            assert!(
                compared <= 4 * u64::from(N),
                "{compared} comparisons for {N} sessions"
            );
            let mut add: Vec<u32> = add.into_iter().map(|id| id.0).collect();
            let mut drop: Vec<u32> = drop.into_iter().map(|id| id.0).collect();
            add.sort_unstable();
            drop.sort_unstable();
            (add, drop)
        };
        // A new connection: every followed session subscribed, each once,
        // though each was also marked when followed (and 100 more were
        // marked, followed and dropped since).
        let marked: HashSet<Counted> = (0..N + 100).map(Counted).collect();
        let (add, drop) = counted(true, marked, &HashSet::new());
        assert_eq!(add, (0..N).collect::<Vec<_>>());
        assert!(drop.is_empty());
        // A live connection that has the second half and 100 no longer
        // followed: all of them marked since the last look.
        let marked: HashSet<Counted> = (0..N + 100).map(Counted).collect();
        let has: HashSet<Counted> = (N / 2..N + 100).map(Counted).collect();
        let (add, drop) = counted(false, marked, &has);
        assert_eq!(add, (0..N / 2).collect::<Vec<_>>());
        assert_eq!(drop, (N..N + 100).collect::<Vec<_>>());
    }

    #[test]
    fn messages_parse_back_and_garbage_is_refused() {
        let id = session(0xab);
        assert_eq!(parse(message(&id, 0).as_bytes()), Some((id, 0)));
        assert_eq!(parse(message(&id, 42).as_bytes()), Some((id, 42)));
        let max = message(&id, u64::MAX);
        assert_eq!(parse(max.as_bytes()), Some((id, u64::MAX)));
        let hex = id.to_string();
        for garbage in [
            String::new(),
            "xyz".to_owned(),
            " 5".to_owned(),
            hex.clone(),
            format!("{hex} "),
            format!("{hex} notanumber"),
            format!("{hex} +5"),
            format!("{hex} -5"),
            format!("{hex}  5"),
            format!("{hex} 5 "),
            format!("{hex} 5 6"),
            format!("{hex}\t5"),
            format!("{hex} 18446744073709551616"), // u64::MAX + 1
            format!("{} 5", hex.to_uppercase()),
            format!("{hex}0 5"),        // 33 hex digits
            format!("{} 5", &hex[1..]), // 31
        ] {
            assert_eq!(parse(garbage.as_bytes()), None, "{garbage:?}");
        }
        assert_eq!(parse(b"\xff\xfe 5"), None);
        let mut invalid = format!("{hex} 5").into_bytes();
        invalid[3] = 0xc3;
        assert_eq!(parse(&invalid), None);
    }

    /// Mutations: raising `published` unconditionally (`send_modify`)
    /// leaves A at 4; creating an entry for an unfollowed session makes
    /// `followed()` 3; a lenient parse of garbage is caught by the parse
    /// test above.
    #[tokio::test]
    async fn announcements_reach_followers_of_their_session_only() {
        let redis = RedisServer::start(Persistence::None);
        let notifier = Notifier::start(redis.client(), PATIENT);
        let (a, b, c) = (session(0xa), session(0xb), session(0xc));
        let mut followed_a = notifier.follow(a);
        let mut followed_b = notifier.follow(b);
        assert_eq!(followed_a.id(), a);
        assert_eq!(notifier.followed(), 2);
        let first = next_change(&mut followed_a).await;
        assert_eq!(
            first,
            Change::Resync { published: 0 },
            "subscribing resyncs"
        );
        assert!(notifier.subscribed());
        let first = next_change(&mut followed_b).await;
        assert_eq!(first, Change::Resync { published: 0 }, "B too");

        let mut con = redis.connection().await;
        assert_eq!(
            publish(&mut con, &a, message(&a, 5)).await,
            1,
            "one subscriber"
        );
        publish(&mut con, &a, message(&a, 4)).await; // lower: ignored
        let hex = a.to_string();
        for garbage in [
            "xyz".to_owned(),
            format!("{hex} notanumber"),
            String::new(),
            format!("{hex}0 9"), // 33 hex digits
            format!("{hex} +9"),
        ] {
            publish(&mut con, &a, garbage).await;
        }
        // Unfollowed: its channel is not subscribed.
        assert_eq!(publish(&mut con, &c, message(&c, 9)).await, 0);
        // On another session's channel: dropped by the notifier.
        publish(&mut con, &a, message(&c, 9)).await;
        // Last: once B has it, the notifier has handled all of the above
        // (one publisher, one subscriber: in order).
        publish(&mut con, &b, message(&b, 3)).await;

        let seen_b = until(&mut followed_b, "B at 3", |seen| seen.published == 3).await;
        assert_eq!(seen_b.published, 3);
        let next = next_change(&mut followed_a).await;
        assert_eq!(next, Change::Published(5), "A: the highest, not the latest");
        assert_eq!(notifier.followed(), 2, "no entry for an unfollowed session");
        let followed_c = notifier.follow(c);
        assert_eq!(
            followed_c.seen().published,
            0,
            "C's earlier message was dropped"
        );
    }

    /// Mutations: no `Drop for Followed` (or not removing the entry at zero
    /// followers) leaves `followed()` at 1 or 2; not marking the session
    /// for the task leaves its channel subscribed (the poll times out).
    #[tokio::test]
    async fn the_last_follower_dropped_removes_the_entry_and_its_channel() {
        let redis = RedisServer::start(Persistence::None);
        let notifier = Notifier::start(redis.client(), PATIENT);
        let (a, b) = (session(1), session(2));
        let mut first = notifier.follow(a);
        let mut second = notifier.follow(a);
        let other = notifier.follow(b);
        assert_eq!(notifier.followed(), 2, "two followers of A share an entry");
        until(&mut first, "subscribed", |seen| seen.resyncs >= 1).await;

        let mut con = redis.connection().await;
        publish(&mut con, &a, message(&a, 7)).await;
        until(&mut first, "first at 7", |seen| seen.published == 7).await;
        until(&mut second, "second at 7", |seen| seen.published == 7).await;

        drop(first);
        assert_eq!(notifier.followed(), 2, "A still has a follower");
        drop(second);
        assert_eq!(notifier.followed(), 1, "A is no longer followed");
        poll("A's channel unsubscribed", async || {
            publish(&mut con, &a, message(&a, 8)).await == 0
        })
        .await;
        assert_eq!(publish(&mut con, &b, message(&b, 1)).await, 1, "B's kept");
        drop(other);
        assert_eq!(notifier.followed(), 0);
        // Following again starts afresh.
        let again = notifier.follow(a);
        assert_eq!(again.seen().published, 0);
        assert_eq!(notifier.followed(), 1);
    }

    /// Mutations: not bumping `resyncs` after a resubscription (or ending
    /// the task when the stream ends instead of reconnecting) fails the
    /// first wait; bumping before SUBSCRIBE is confirmed can let the
    /// PUBLISH after it reach no subscriber.
    #[tokio::test]
    async fn a_restarted_redis_is_resubscribed_and_followers_resync() {
        let mut redis = RedisServer::start(Persistence::None);
        let notifier = Notifier::start(redis.client(), PATIENT);
        let a = session(0xa);
        let mut followed = notifier.follow(a);
        // The test's runtime has one thread: the notifier's task has not
        // run yet, so its first subscription comes after the follow.
        let first = next_change(&mut followed).await;
        assert_eq!(first, Change::Resync { published: 0 });
        let mut con = redis.connection().await;
        publish(&mut con, &a, message(&a, 5)).await;
        assert_eq!(next_change(&mut followed).await, Change::Published(5));

        redis.restart();
        let change = next_change(&mut followed).await;
        let resync = Change::Resync { published: 5 };
        assert_eq!(change, resync, "published never goes down");
        assert_eq!(followed.seen().resyncs, 2);
        assert!(notifier.subscribed());

        let mut con = redis.connection().await;
        assert_eq!(
            publish(&mut con, &a, message(&a, 8)).await,
            1,
            "resubscribed"
        );
        assert_eq!(next_change(&mut followed).await, Change::Published(8));
    }

    /// Mutation: without the health-check PING, a paused Redis keeps the
    /// connection open and silent, `subscribed()` stays true and no resync
    /// follows the resume.
    #[tokio::test]
    async fn a_silent_connection_is_detected_by_ping() {
        let redis = RedisServer::start(Persistence::None);
        let notifier = Notifier::start(redis.client(), TIMEOUT);
        let a = session(0xa);
        let mut followed = notifier.follow(a);
        let before = until(&mut followed, "subscribed", |seen| seen.resyncs >= 1).await;

        redis.pause(true);
        poll("the lost subscription noticed", async || {
            !notifier.subscribed()
        })
        .await;
        redis.pause(false);
        until(&mut followed, "resynced", |seen| {
            seen.resyncs > before.resyncs
        })
        .await;
        let mut con = redis.connection().await;
        publish(&mut con, &a, message(&a, 3)).await;
        until(&mut followed, "A at 3", |seen| seen.published == 3).await;
    }

    /// Mutation: a pub/sub connection per followed session (or per
    /// `follow`) makes the count 300.
    #[tokio::test]
    async fn many_followed_sessions_share_one_pubsub_connection() {
        let redis = RedisServer::start(Persistence::None);
        let notifier = Notifier::start(redis.client(), PATIENT);
        let mut followed: Vec<Followed> = (0..300u32)
            .map(|n| {
                let mut bytes = [0u8; 16];
                bytes[..4].copy_from_slice(&n.to_be_bytes());
                notifier.follow(LogId::from_bytes(bytes))
            })
            .collect();
        assert_eq!(notifier.followed(), 300);
        for follower in &mut followed {
            until(follower, "subscribed", |seen| seen.resyncs >= 1).await;
        }
        let mut con = redis.connection().await;
        assert_eq!(pubsub_clients(&mut con).await, 1);
        let last = followed[299].id();
        assert_eq!(publish(&mut con, &last, message(&last, 1)).await, 1);
        until(&mut followed[299], "the last at 1", |seen| {
            seen.published == 1
        })
        .await;
    }

    /// Mutation: a `Drop for Notifier` that does not abort the task leaves
    /// the pub/sub connection open (and followers waiting forever).
    #[tokio::test]
    async fn dropping_the_notifier_closes_its_connection() {
        let redis = RedisServer::start(Persistence::None);
        let notifier = Notifier::start(redis.client(), PATIENT);
        let mut followed = notifier.follow(session(0xa));
        until(&mut followed, "subscribed", |seen| seen.resyncs >= 1).await;
        let mut con = redis.connection().await;
        assert_eq!(pubsub_clients(&mut con).await, 1);

        drop(notifier);
        let changed = tokio::time::timeout(DEADLINE, followed.changed()).await;
        assert_eq!(changed.expect("woken"), None, "followers learn it stopped");
        poll("the pub/sub connection closed", async || {
            pubsub_clients(&mut con).await == 0
        })
        .await;
        drop(followed); // its entry is already gone: nothing to remove
    }
}
