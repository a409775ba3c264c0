//! Unit tests of [`super`]: taking a call's batches, the flushing task's
//! failures and deadlines (through a stand-in for Redis, in tokio's paused
//! time), and one script call over damaged and sound sessions against a
//! real `redis-server`.

use super::*;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn log(n: u32) -> LogId {
    let mut bytes = [0u8; 16];
    bytes[..4].copy_from_slice(&n.to_be_bytes());
    LogId::from_bytes(bytes)
}

mod taking {
    use super::*;

    #[test]
    fn a_call_takes_the_oldest_and_its_group_in_order_and_keeps_the_others_in_order() {
        let group = |(group, _): &(u8, char)| *group;
        let key = |(_, key): &(u8, char)| *key;
        let mut waiting =
            VecDeque::from([(1, 'a'), (2, 'b'), (1, 'c'), (3, 'd'), (1, 'e'), (1, 'f')]);
        let taken = take_group(&mut waiting, 3, group, key);
        assert_eq!(taken, [(1, 'a'), (1, 'c'), (1, 'e')]);
        assert_eq!(waiting, [(2, 'b'), (3, 'd'), (1, 'f')]);
        let taken = take_group(&mut waiting, 3, group, key);
        assert_eq!(taken, [(2, 'b')]);
        assert_eq!(waiting, [(3, 'd'), (1, 'f')]);
        // One Redis: one group, taken from the front.
        let mut waiting: VecDeque<u32> = (0..10).collect();
        assert_eq!(take_group(&mut waiting, 4, |_| (), |n| *n), [0, 1, 2, 3]);
        assert_eq!(waiting, [4, 5, 6, 7, 8, 9]);
        assert!(take_group(&mut VecDeque::<u32>::new(), 4, |_| (), |n| *n).is_empty());
        // Past the window nothing is looked at, nor reordered.
        let mut waiting: VecDeque<(usize, usize)> =
            (0..GROUP_WINDOW + 10).map(|i| (i % 2, i)).collect();
        let taken = take_group(&mut waiting, usize::MAX, |(group, _)| *group, |(_, i)| *i);
        assert_eq!(taken.len(), GROUP_WINDOW / 2);
        assert_eq!(waiting.len(), GROUP_WINDOW / 2 + 10);
        assert!(waiting
            .iter()
            .take(GROUP_WINDOW / 2)
            .all(|(group, _)| *group == 1));
        assert!(waiting.iter().map(|(_, i)| *i).is_sorted());
    }

    /// The script sees each session once per call: a later batch of a
    /// session taken stays, in its place, for the next call (after the
    /// first is answered its caller queues the next; two at once come from
    /// two callers, in no order of theirs).
    #[test]
    fn a_call_takes_one_batch_per_session() {
        let mut waiting = VecDeque::from([('a', 1), ('b', 1), ('a', 2), ('c', 1), ('a', 3)]);
        let taken = take_group(&mut waiting, 64, |_| (), |(session, _)| *session);
        assert_eq!(taken, [('a', 1), ('b', 1), ('c', 1)]);
        assert_eq!(waiting, [('a', 2), ('a', 3)]);
        let taken = take_group(&mut waiting, 64, |_| (), |(session, _)| *session);
        assert_eq!(taken, [('a', 2)]);
        assert_eq!(waiting, [('a', 3)]);
    }

    /// Taking a call's batches does not rebuild the queue: what waits
    /// behind the window stays where it is in memory (it is never moved),
    /// and only the window is looked at. Mutation: rebuilding the queue
    /// from the batches kept and the rest (`*waiting = kept`, the old
    /// `Vec` way) moves the last one.
    #[test]
    fn taking_a_call_moves_nothing_behind_the_window() {
        for groups in [1, 2] {
            let mut waiting: VecDeque<(usize, usize)> =
                (0..100_000).map(|i| (i % groups, i)).collect();
            let last = std::ptr::from_ref(waiting.back().expect("a batch"));
            let looked = std::cell::Cell::new(0);
            let taken = take_group(
                &mut waiting,
                SESSIONS_PER_CALL,
                |(group, _)| {
                    looked.set(looked.get() + 1);
                    *group
                },
                |(_, i)| *i,
            );
            assert_eq!(taken.len(), SESSIONS_PER_CALL);
            assert!(
                looked.get() <= 2 * SESSIONS_PER_CALL + 1,
                "{}",
                looked.get()
            );
            assert_eq!(waiting.len(), 100_000 - SESSIONS_PER_CALL);
            assert_eq!(
                std::ptr::from_ref(waiting.back().expect("a batch")),
                last,
                "the queue behind the window moved ({groups} groups)"
            );
            assert!(waiting.iter().map(|(_, i)| *i).is_sorted());
        }
    }
}

/// The flushing task through a stand-in for Redis, in paused time: every
/// wait below ends at once unless nothing would ever end it.
mod flushing {
    use super::*;
    use std::time::Duration;

    /// A stand-in for the append script.
    #[derive(Default)]
    struct Stub {
        /// The logs of each call made, in order.
        made: Mutex<Vec<Vec<LogId>>>,
        /// `group` panics once while set (it clears it).
        panic_in_group: AtomicBool,
        /// `call` panics for a batch of this log.
        panic_in_call: Option<LogId>,
        /// Calls wait for a permit here before answering (none: at once).
        gate: Option<tokio::sync::Semaphore>,
    }

    impl Calls for Stub {
        fn group(&self, _: &Pending) -> Option<Slot> {
            if self.panic_in_group.swap(false, Ordering::SeqCst) {
                panic!("the flushing task panics (a test's stand-in)");
            }
            None
        }

        async fn call(&self, calls: &[Pending]) -> Result<Vec<Answer>, HistoryError> {
            let logs: Vec<LogId> = calls.iter().map(|pending| pending.id).collect();
            lock(&self.made).push(logs.clone());
            if let Some(gate) = &self.gate {
                gate.acquire().await.expect("the gate stays open").forget();
            }
            if self.panic_in_call.is_some_and(|log| logs.contains(&log)) {
                panic!("a call panics (a test's stand-in)");
            }
            Ok(calls
                .iter()
                .map(|pending| Ok((pending.known.epoch, pending.known.published + 1)))
                .collect())
        }
    }

    fn pending(n: u32) -> Pending {
        Pending {
            id: log(n),
            known: Known {
                epoch: 7,
                published: u64::from(n),
            },
            payloads: vec![Bytes::from_static(b"{}")],
            guard: Guard::default(),
        }
    }

    /// Far beyond any wait here but the deadlines a test is about.
    const LONG: Duration = Duration::from_secs(600);

    /// Appends `pending(n)` through `stub` in a task of its own.
    fn spawn_append(
        commits: &Arc<Commits>,
        stub: &Arc<Stub>,
        n: u32,
        deadline: Instant,
    ) -> tokio::task::JoinHandle<Answer> {
        let (commits, stub) = (Arc::clone(commits), Arc::clone(stub));
        tokio::spawn(async move { commits.append_through(pending(n), deadline, || stub).await })
    }

    /// Lets the other tasks run until `done` (in paused time: no clock
    /// moves for it).
    async fn until(what: &str, done: impl Fn() -> bool) {
        for _ in 0..1000 {
            if done() {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("{what}: not after 1000 yields");
    }

    /// Mutation: no drop guard (`flushing` left set by the panic) leaves
    /// both appends unanswered until their deadline.
    #[tokio::test(start_paused = true)]
    async fn a_flushing_task_that_panics_hands_its_role_on() {
        let commits = Arc::new(Commits::default());
        let stub = Arc::new(Stub {
            panic_in_group: AtomicBool::new(true),
            ..Stub::default()
        });
        let started = Instant::now();
        let deadline = started + LONG;
        let first = spawn_append(&commits, &stub, 1, deadline);
        until("the flushing task panicked", || {
            !stub.panic_in_group.load(Ordering::SeqCst)
        })
        .await;
        let second = commits
            .append_through(pending(2), deadline, || Arc::clone(&stub))
            .await;
        assert_eq!(second.expect("the second append answered"), (7, 3));
        let first = first.await.expect("the first append's task");
        assert_eq!(
            first.expect("the first, still queued, carried by the next task"),
            (7, 2)
        );
        assert!(Instant::now() < deadline, "answered, not timed out");
        assert_eq!(*lock(&stub.made), [vec![log(1), log(2)]]);
    }

    /// A call that panics answers its own batches at once ("dropped
    /// unanswered", before their deadline) and gives back its slot; the
    /// next append is sent. (This held before the drop guard too: the
    /// call's task holds no role.)
    #[tokio::test(start_paused = true)]
    async fn a_call_that_panics_answers_its_batches_and_the_next_is_sent() {
        let commits = Arc::new(Commits::default());
        let stub = Arc::new(Stub {
            panic_in_call: Some(log(1)),
            ..Stub::default()
        });
        let deadline = Instant::now() + LONG;
        let first = commits
            .append_through(pending(1), deadline, || Arc::clone(&stub))
            .await;
        match first {
            Err(HistoryError::Unavailable(why)) => {
                assert!(why.contains("dropped unanswered"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert!(Instant::now() < deadline);
        for n in 2..10 {
            let answer = commits
                .append_through(pending(n), deadline, || Arc::clone(&stub))
                .await;
            assert_eq!(answer.expect("answered"), (7, u64::from(n) + 1));
        }
    }

    /// Mutation: waiting for the answer without the deadline
    /// (`answered.await`) never ends: the test's own bound fails it.
    #[tokio::test(start_paused = true)]
    async fn an_append_never_answered_is_unavailable_by_its_deadline() {
        let commits = Arc::new(Commits::default());
        let stub = Arc::new(Stub {
            gate: Some(tokio::sync::Semaphore::new(0)),
            ..Stub::default()
        });
        let started = Instant::now();
        let deadline = started + Duration::from_secs(2);
        let answer = tokio::time::timeout(
            LONG,
            commits.append_through(pending(1), deadline, || Arc::clone(&stub)),
        )
        .await
        .expect("answered by the append's own deadline, not the test's bound");
        match answer {
            Err(HistoryError::Unavailable(why)) => assert!(why.contains("deadline"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(Instant::now() - started, Duration::from_secs(2));
    }

    /// Four calls in flight (the limit) that Redis does not answer; a
    /// fifth batch waits in the queue past its deadline, is answered
    /// unavailable by it, and is never sent, even once the calls in
    /// flight end. Mutation: sending what is taken without looking at its
    /// deadline (or its caller) sends it.
    #[tokio::test(start_paused = true)]
    async fn a_batch_queued_past_its_deadline_is_never_sent() {
        let commits = Arc::new(Commits::default());
        let stub = Arc::new(Stub {
            gate: Some(tokio::sync::Semaphore::new(0)),
            ..Stub::default()
        });
        let started = Instant::now();
        let mut in_flight = Vec::new();
        for n in 0..u32::try_from(CALLS_IN_FLIGHT).expect("a few") {
            in_flight.push(spawn_append(&commits, &stub, n, started + LONG));
            let calls = n as usize + 1;
            until("a call in flight", || lock(&stub.made).len() == calls).await;
        }
        let late = commits
            .append_through(pending(100), started + Duration::from_secs(1), || {
                Arc::clone(&stub)
            })
            .await;
        match late {
            Err(HistoryError::Unavailable(why)) => assert!(why.contains("deadline"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(Instant::now() - started, Duration::from_secs(1));
        let gate = stub.gate.as_ref().expect("a gate");
        gate.add_permits(CALLS_IN_FLIGHT + 8);
        for append in in_flight {
            append.await.expect("an append's task").expect("answered");
        }
        let next = commits
            .append_through(pending(200), started + LONG, || Arc::clone(&stub))
            .await;
        assert_eq!(next.expect("answered"), (7, 201));
        let made = lock(&stub.made).clone();
        assert_eq!(
            made,
            [
                vec![log(0)],
                vec![log(1)],
                vec![log(2)],
                vec![log(3)],
                vec![log(200)]
            ]
        );
    }

    /// A spawner on a tracker: the tracker sees what it spawns.
    fn on(tracker: &tokio_util::task::TaskTracker) -> crate::Spawner {
        let tracker = tracker.clone();
        Arc::new(move |task| drop(tracker.spawn(task)))
    }

    /// The spawner given runs the flushing task and the calls.
    #[tokio::test(start_paused = true)]
    async fn tasks_are_spawned_by_the_spawner_given() {
        let commits = Arc::new(Commits::default());
        let tracker = tokio_util::task::TaskTracker::new();
        assert!(commits.set_spawner(on(&tracker)));
        assert!(
            !commits.set_spawner(on(&tokio_util::task::TaskTracker::new())),
            "the first stays"
        );
        let stub = Arc::new(Stub {
            gate: Some(tokio::sync::Semaphore::new(0)),
            ..Stub::default()
        });
        let append = spawn_append(&commits, &stub, 1, Instant::now() + LONG);
        until("the call in flight", || lock(&stub.made).len() == 1).await;
        assert_eq!(tracker.len(), 1, "the call (its flushing task is done)");
        tracker.close();
        stub.gate.as_ref().expect("a gate").add_permits(1);
        tokio::time::timeout(LONG, tracker.wait())
            .await
            .expect("the tracked tasks end");
        assert_eq!(append.await.expect("the task").expect("answered"), (7, 2));
    }
}

/// The append script's calls against a real `redis-server`.
mod script {
    use super::*;
    use crate::test_support::{Persistence, RedisServer};
    use crate::{History, Meta, RedisHistory};
    use ::redis::aio::{ConnectionManager, MultiplexedConnection};
    use futures_util::StreamExt;
    use std::collections::HashMap;
    use std::time::Duration;

    const EPOCH: u64 = 0x0123_4567_89ab_cdef;

    /// A `redis-server` of its own with the history on it, a connection
    /// for the append script's calls, a probe connection and the script.
    struct Rig {
        redis: RedisServer,
        config: HistoryConfig,
        history: RedisHistory,
        connection: Connection,
        con: MultiplexedConnection,
        script: Script,
    }

    impl Rig {
        /// A fresh Redis, the history keeping `retention` events and
        /// `retention_bytes` of payload per log.
        async fn start(retention: usize, retention_bytes: usize) -> Self {
            let redis = RedisServer::start(Persistence::None);
            let config = HistoryConfig {
                url: redis.url(),
                cluster: false,
                timeout: PATIENT,
                retention,
                retention_bytes,
                idle: Duration::from_secs(600),
                ca_file: None,
            };
            let history = RedisHistory::connect(config.clone())
                .await
                .expect("redis-server answers");
            let client = ::redis::Client::open(redis.url()).expect("a URL");
            let connection = Connection::Single(
                ConnectionManager::new(client.clone())
                    .await
                    .expect("a connection"),
            );
            let con = client
                .get_multiplexed_async_connection()
                .await
                .expect("a probe connection");
            Self {
                redis,
                config,
                history,
                connection,
                con,
                script: Script::new(crate::APPEND_SCRIPT),
            }
        }

        /// A new log, created empty under [`EPOCH`].
        async fn log(&self) -> LogId {
            let id = LogId::random().expect("the OS random source");
            assert!(self
                .history
                .create(&id, EPOCH, &Meta::new())
                .await
                .expect("created"));
            id
        }

        /// One call of the append script carrying `calls`, as the
        /// flushing task makes it.
        async fn call(
            &self,
            calls: &[Pending],
        ) -> Result<Vec<Result<(u64, u64), HistoryError>>, HistoryError> {
            commit(&self.connection, &self.script, &self.config, false, calls).await
        }
    }

    /// Far beyond any call here: only a hang reaches it.
    const PATIENT: Duration = Duration::from_secs(10);

    async fn cmd<T: ::redis::FromRedisValue>(con: &mut MultiplexedConnection, args: &[&str]) -> T {
        let mut cmd = ::redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query_async(con)
            .await
            .unwrap_or_else(|error| panic!("{args:?}: {error}"))
    }

    /// Everything a session's keys hold, as text.
    async fn state(con: &mut MultiplexedConnection, id: &LogId) -> String {
        let keys = Keys::of(id);
        let mut meta: Vec<(String, String)> =
            cmd::<HashMap<String, String>>(con, &["HGETALL", &keys.meta])
                .await
                .into_iter()
                .collect();
        meta.sort();
        let stream_type: String = cmd(con, &["TYPE", &keys.stream]).await;
        let stream = match stream_type.as_str() {
            "stream" => format!(
                "{:?}",
                cmd::<::redis::Value>(con, &["XRANGE", &keys.stream, "-", "+"]).await
            ),
            "string" => cmd::<String>(con, &["GET", &keys.stream]).await,
            other => other.to_owned(),
        };
        let sizes: Vec<String> = cmd(con, &["LRANGE", &keys.sizes, "0", "-1"]).await;
        format!("meta {meta:?}\nstream ({stream_type}) {stream}\nsizes {sizes:?}")
    }

    fn payload(id: &LogId, seq: u64) -> Bytes {
        Bytes::from(format!("{id} event {seq}"))
    }

    /// A batch of `count` events for each of `ids`, after `published`.
    fn batches(ids: &[LogId], published: u64, count: u64) -> Vec<Pending> {
        ids.iter()
            .map(|id| Pending {
                id: *id,
                known: Known {
                    epoch: EPOCH,
                    published,
                },
                guard: Guard::default(),
                payloads: (published + 1..=published + count)
                    .map(|seq| payload(id, seq))
                    .collect(),
            })
            .collect()
    }

    /// The seqs and payloads of a session's stream, and its sizes list.
    async fn events(con: &mut MultiplexedConnection, id: &LogId) -> (Vec<(u64, Bytes)>, Vec<u64>) {
        let keys = Keys::of(id);
        let entries: Vec<(String, HashMap<String, Vec<u8>>)> =
            cmd(con, &["XRANGE", &keys.stream, "-", "+"]).await;
        let entries = entries
            .into_iter()
            .map(|(entry, mut fields)| {
                let seq = entry
                    .strip_prefix("0-")
                    .and_then(|seq| seq.parse().ok())
                    .expect("an entry ID 0-<seq>");
                (seq, Bytes::from(fields.remove("d").expect("field d")))
            })
            .collect();
        let sizes: Vec<u64> = cmd(con, &["LRANGE", &keys.sizes, "0", "-1"]).await;
        (entries, sizes)
    }

    /// Reads announcements until the sentinel published after the call:
    /// how many came on each channel, and their payloads.
    async fn announced(
        messages: &mut (impl futures_util::Stream<Item = ::redis::Msg> + Unpin),
        con: &mut MultiplexedConnection,
    ) -> HashMap<String, Vec<String>> {
        let _: i64 = cmd(con, &["PUBLISH", "gapless:appended:sentinel", "end"]).await;
        let mut heard: HashMap<String, Vec<String>> = HashMap::new();
        loop {
            let message = tokio::time::timeout(PATIENT, messages.next())
                .await
                .expect("announcements within the deadline")
                .expect("the subscription stays");
            let channel = message.get_channel_name().to_owned();
            if channel == "gapless:appended:sentinel" {
                return heard;
            }
            let text: String = message.get_payload().expect("a text payload");
            heard.entry(channel).or_default().push(text);
        }
    }

    /// Which sessions are damaged, and how.
    const DAMAGE: [(usize, &str); 8] = [
        (0, "stream deleted"),
        (9, "sizes deleted"),
        (17, "sizes shortened by LPOP"),
        (30, "sizes shortened by LTRIM"),
        (41, "stream of the wrong type"),
        (50, "an entry past published, as many entries"),
        (58, "a top ID past published, no entry past it"),
        (63, "meta retained not a number"),
    ];

    async fn damage(con: &mut MultiplexedConnection, id: &LogId, how: &str) {
        let keys = Keys::of(id);
        let (stream, sizes, meta) = (
            keys.stream.as_str(),
            keys.sizes.as_str(),
            keys.meta.as_str(),
        );
        match how {
            "stream deleted" => cmd::<i64>(con, &["DEL", stream]).await,
            "sizes deleted" => cmd::<i64>(con, &["DEL", sizes]).await,
            "sizes shortened by LPOP" => {
                cmd::<String>(con, &["LPOP", sizes]).await;
                0
            }
            "sizes shortened by LTRIM" => {
                cmd::<String>(con, &["LTRIM", sizes, "-1", "-1"]).await;
                0
            }
            "stream of the wrong type" => {
                cmd::<i64>(con, &["DEL", stream]).await;
                cmd::<String>(con, &["SET", stream, "not a stream"]).await;
                0
            }
            "an entry past published, as many entries" => {
                cmd::<String>(con, &["XADD", stream, "0-9", "d", "stray"]).await;
                cmd::<i64>(con, &["XDEL", stream, "0-2"]).await
            }
            "a top ID past published, no entry past it" => {
                cmd::<String>(con, &["XADD", stream, "0-9", "d", "stray"]).await;
                cmd::<i64>(con, &["XDEL", stream, "0-9"]).await
            }
            "meta retained not a number" => cmd::<i64>(con, &["HSET", meta, "retained", "x"]).await,
            other => panic!("{other}"),
        };
    }

    /// 64 sessions holding events 2..=5 (retention 4), eight of them
    /// damaged in as many ways, then one script call appending two events
    /// to each, twice. Every sound session is appended exactly once per
    /// call (its stream, sizes and meta as one append leaves them),
    /// announced once and answered with its seqs; every damaged one is
    /// answered `Damaged` and left exactly as it was, both times.
    /// Mutation: the old script, which wrote each session before looking
    /// at the next, fails the whole call (`Unavailable` for all 64) after
    /// appending the sessions before the first damaged one, or appends to
    /// a damaged one (a deleted stream made afresh).
    #[tokio::test]
    async fn a_damaged_session_is_answered_alone_and_its_neighbours_appended_once() {
        let mut rig = Rig::start(4, 1 << 20).await;
        let mut ids = Vec::new();
        for _ in 0..64 {
            ids.push(rig.log().await);
        }
        let answers = rig
            .call(&batches(&ids, 0, 5))
            .await
            .expect("the first call");
        for answer in answers {
            assert_eq!(answer.expect("appended"), (EPOCH, 1));
        }
        let damaged: HashMap<usize, &str> = DAMAGE.into_iter().collect();
        for (&at, how) in &damaged {
            damage(&mut rig.con, &ids[at], how).await;
        }
        let mut before = Vec::new();
        for id in &ids {
            before.push(state(&mut rig.con, id).await);
        }
        let client = ::redis::Client::open(rig.redis.url()).expect("a URL");
        let mut pubsub = client
            .get_async_pubsub()
            .await
            .expect("a pub/sub connection");
        pubsub
            .psubscribe("gapless:appended:*")
            .await
            .expect("PSUBSCRIBE");
        let mut messages = pubsub.into_on_message();

        for (published, round) in [(5, "first"), (7, "second")] {
            // What each caller's ring has seen: a damaged session's
            // stayed at 5 (a ring ahead of the history under its epoch is
            // a loss: the log would go on under a new one).
            let calls: Vec<Pending> = ids
                .iter()
                .enumerate()
                .flat_map(|(at, id)| {
                    let seen = if damaged.contains_key(&at) {
                        5
                    } else {
                        published
                    };
                    let mut batch = batches(&[*id], seen, 2);
                    batch[0].payloads = (published + 1..=published + 2)
                        .map(|seq| payload(id, seq))
                        .collect();
                    batch
                })
                .collect();
            let answers = rig
                .call(&calls)
                .await
                .unwrap_or_else(|error| panic!("the {round} call of 64 sessions: {error}"));
            let heard = announced(&mut messages, &mut rig.con).await;
            assert_eq!(answers.len(), 64);
            for (at, (id, answer)) in ids.iter().zip(answers).enumerate() {
                let channel = crate::notify::channel(id);
                if let Some(how) = damaged.get(&at) {
                    match answer {
                        Err(HistoryError::Damaged(what)) => {
                            eprintln!("{round} call, session {at} ({how}): damaged: {what}");
                        }
                        other => panic!("{round} call, session {at} ({how}): {other:?}"),
                    }
                    assert_eq!(
                        state(&mut rig.con, id).await,
                        before[at],
                        "{round} call, session {at} ({how}): left as it was"
                    );
                    assert_eq!(
                        heard.get(&channel),
                        None,
                        "session {at} ({how}) not announced"
                    );
                    continue;
                }
                assert_eq!(
                    answer.unwrap_or_else(|error| panic!("{round} call, session {at}: {error}")),
                    (EPOCH, published + 1),
                    "{round} call, session {at}"
                );
                let last = published + 2;
                let (stored, sizes) = events(&mut rig.con, id).await;
                let expected: Vec<(u64, Bytes)> = (last - 3..=last)
                    .map(|seq| (seq, payload(id, seq)))
                    .collect();
                assert_eq!(stored, expected, "{round} call, session {at}: stored once");
                let lengths: Vec<u64> = expected.iter().map(|(_, p)| p.len() as u64).collect();
                assert_eq!(sizes, lengths, "{round} call, session {at}: its sizes");
                let keys = Keys::of(id);
                let meta: HashMap<String, String> =
                    cmd(&mut rig.con, &["HGETALL", &keys.meta]).await;
                assert_eq!(meta.get("published"), Some(&last.to_string()));
                assert_eq!(meta.get("retained").map(String::as_str), Some("4"));
                let bytes: u64 = lengths.iter().sum();
                assert_eq!(meta.get("bytes"), Some(&bytes.to_string()));
                assert_eq!(
                    heard.get(&channel),
                    Some(&vec![crate::notify::message(id, last)]),
                    "{round} call, session {at}: announced once"
                );
            }
            assert_eq!(heard.len(), 64 - DAMAGE.len(), "{heard:?}");
        }
    }

    /// Sessions whose keys hold what their meta says pass the checks in
    /// every shape the script makes them: new (no stream, no sizes), and
    /// trimmed by bytes (one event kept larger than the limit).
    #[tokio::test]
    async fn sound_sessions_in_every_shape_pass_the_checks() {
        let mut rig = Rig::start(1000, 100).await;
        let id = rig.log().await;
        let sizes = [30usize, 30, 30, 200, 10, 10, 60, 0, 0];
        for (at, size) in sizes.iter().enumerate() {
            let published = at as u64;
            let batch = [Pending {
                id,
                known: Known {
                    epoch: EPOCH,
                    published,
                },
                payloads: vec![Bytes::from(vec![b'x'; *size])],
                guard: Guard::default(),
            }];
            let answers = rig.call(&batch).await.expect("a call");
            let answer = answers.into_iter().next().expect("one answer");
            assert_eq!(
                answer.expect("appended"),
                (EPOCH, published + 1),
                "append {at}"
            );
        }
        // From the newest back, as many as fit 100 bytes (never fewer
        // than one): 0, 0, 60, 10, 10 (the 200 went with the next event).
        let (stored, kept) = events(&mut rig.con, &id).await;
        let seqs: Vec<u64> = stored.iter().map(|(seq, _)| *seq).collect();
        assert_eq!(seqs, [5, 6, 7, 8, 9]);
        assert_eq!(kept, [10, 10, 60, 0, 0]);
        let keys = Keys::of(&id);
        let meta: HashMap<String, String> = cmd(&mut rig.con, &["HGETALL", &keys.meta]).await;
        assert_eq!(meta.get("bytes").map(String::as_str), Some("80"));
        assert_eq!(meta.get("retained").map(String::as_str), Some("5"));

        // Trimmed by events within one batch: its own first events go.
        rig.config.retention = 2;
        let id = rig.log().await;
        for published in [0, 5] {
            let answers = rig
                .call(&batches(&[id], published, 5))
                .await
                .expect("a call");
            let answer = answers.into_iter().next().expect("one answer");
            assert_eq!(answer.expect("appended"), (EPOCH, published + 1));
            let (stored, kept) = events(&mut rig.con, &id).await;
            let last = published + 5;
            let expected: Vec<(u64, Bytes)> = (last - 1..=last)
                .map(|seq| (seq, payload(&id, seq)))
                .collect();
            assert_eq!(stored, expected);
            let lengths: Vec<u64> = expected.iter().map(|(_, p)| p.len() as u64).collect();
            assert_eq!(kept, lengths);
        }
    }

    /// A stream that retains no event but is there (a retention of no
    /// events trims every one; the key stays) is checked by its top ID:
    /// at `published` it takes the next append, past it (a stray entry
    /// added and deleted) the log is damaged, nothing written.
    #[tokio::test]
    async fn an_empty_stream_is_checked_by_its_top_id() {
        let mut rig = Rig::start(0, 1 << 20).await;
        let id = rig.log().await;
        let keys = Keys::of(&id);
        for published in [0, 2] {
            let answers = rig
                .call(&batches(&[id], published, 2))
                .await
                .expect("a call");
            let answer = answers.into_iter().next().expect("one answer");
            assert_eq!(answer.expect("appended"), (EPOCH, published + 1));
            assert_eq!(cmd::<i64>(&mut rig.con, &["XLEN", &keys.stream]).await, 0);
            assert_eq!(cmd::<i64>(&mut rig.con, &["EXISTS", &keys.stream]).await, 1);
        }
        cmd::<String>(&mut rig.con, &["XADD", &keys.stream, "0-50", "d", "stray"]).await;
        cmd::<i64>(&mut rig.con, &["XDEL", &keys.stream, "0-50"]).await;
        let before = state(&mut rig.con, &id).await;
        let answers = rig.call(&batches(&[id], 4, 1)).await.expect("a call");
        match answers.into_iter().next().expect("one answer") {
            Err(HistoryError::Damaged(what)) => assert!(what.contains("0-50"), "{what}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(state(&mut rig.con, &id).await, before);
    }

    /// A session twice in one call (the flushing task never sends one so,
    /// see [`take_group`]): the later batch is refused, nothing of it
    /// written, and the first appended once.
    #[tokio::test]
    async fn a_session_twice_in_one_call_is_appended_once() {
        let mut rig = Rig::start(1000, 1 << 20).await;
        let id = rig.log().await;
        let mut calls = batches(&[id], 0, 2);
        calls.extend(batches(&[id], 2, 1));
        let answers = rig.call(&calls).await.expect("a call");
        let mut answers = answers.into_iter();
        assert_eq!(answers.next().expect("two").expect("appended"), (EPOCH, 1));
        match answers.next().expect("two") {
            Err(HistoryError::Unavailable(_)) => {}
            other => panic!("{other:?}"),
        }
        let (stored, _) = events(&mut rig.con, &id).await;
        assert_eq!(stored.len(), 2);
    }

    /// Mutation: a probe that does not ask for `maxmemory-policy` finds
    /// no eviction policy.
    #[tokio::test]
    async fn an_eviction_policy_is_found_at_connect() {
        for (args, found) in [
            (&[][..], None),
            (
                &["--maxmemory-policy", "allkeys-lru"][..],
                Some("allkeys-lru"),
            ),
            (
                &["--maxmemory-policy", "volatile-ttl"][..],
                Some("volatile-ttl"),
            ),
        ] {
            let redis = RedisServer::start_with(Persistence::None, args);
            let history = RedisHistory::connect(HistoryConfig {
                url: redis.url(),
                cluster: false,
                timeout: PATIENT,
                retention: 10,
                retention_bytes: 1 << 20,
                idle: Duration::from_secs(600),
                ca_file: None,
            })
            .await
            .expect("redis-server answers");
            assert_eq!(
                history.probe_durability().await.as_deref(),
                found,
                "{args:?}"
            );
        }
    }
}

/// An epoch is written as `format!("{:016x}")` would: 16 lower-case hex
/// digits, leading zeros kept.
#[test]
fn epochs_are_written_as_sixteen_hex_digits() {
    for value in [
        0,
        1,
        0xf,
        0x0123_4567_89ab_cdef,
        0xfedc_ba98_7654_3210,
        u64::MAX,
    ] {
        assert_eq!(super::Hex16::of(value).as_str(), format!("{value:016x}"));
    }
}
