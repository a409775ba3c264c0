//! One session's local replica of its shared history (`--redis`): the ring
//! on this instance, kept equal to a prefix-trimmed copy of the Redis
//! Stream, and the emits this instance appends. Two parts, each with its
//! own state:
//!
//! - [`Committer`] (emits): emits from any instance are queued per session;
//!   whichever task drains the queue appends up to [`APPEND_BATCH`](committer::APPEND_BATCH) of them
//!   in one script call, and Redis gives them the session's next seqs
//!   (Redis is the sequencer: no owner, no lease). Each emit is answered
//!   with its seq once Redis has it; then the batch goes to the mirror. A
//!   queued emit whose client has gone, or whose deadline passed, is not
//!   appended.
//! - [`Mirror`] (the ring): the ring's one [`gapless::Writer`]. Every write
//!   — a batch this instance appended, a catch-up read, a follow step after
//!   an announcement that another instance appended — holds the writer lock
//!   and requires the next seq to be the ring's `published + 1`, reading
//!   what is missing from Redis first. The ring's seqs always equal the
//!   history's. A ring that can no longer catch up (Redis trimmed past it,
//!   or the history's epoch changed) is *stale*: the caller drops it and
//!   loads the session afresh. Without a shared history the mirror is
//!   simply the ring's writer.
//! - **A new epoch**: each append tells Redis the ring's epoch and
//!   `published`; a history that lost events continues the session under
//!   a new epoch (see [`crate::history`]), and the batch is answered with
//!   it. Such a batch is never written into the ring of the old epoch: the
//!   mirror is stale from then on.

mod committer;
mod mirror;

pub(crate) use committer::Committer;
pub(crate) use mirror::Mirror;

use crate::history::HistoryError;

/// Why an emit, a catch-up or a mirror step failed.
#[derive(Clone, Debug)]
pub(crate) enum ReplicaError {
    /// The history failed (unavailable, gone, corrupt).
    History(HistoryError),
    /// The emit's deadline passed before it was answered (Redis is slow or
    /// unreachable): not appended if it was still queued behind earlier
    /// appends; if its own batch was in flight, it may land, unacknowledged
    /// (as a [`HistoryError::Unavailable`] append may).
    Expired,
    /// The ring is behind the history by more than Redis retains, or the
    /// history continues under another epoch: this replica cannot continue
    /// and must be loaded afresh.
    Stale {
        /// The seq the ring needed next.
        needed: u64,
        /// The first seq Redis still has (`None`: none after the ring).
        found: Option<u64>,
    },
    /// The ring refused what the history holds (an event larger than this
    /// instance's ring, a seq that is not the next): a configuration
    /// mismatch between instances or a bug.
    Ring(String),
}

impl std::fmt::Display for ReplicaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::History(error) => error.fmt(f),
            Self::Expired => f.write_str("the emit waited past its deadline for Redis"),
            Self::Stale { needed, found } => match found {
                Some(found) => write!(
                    f,
                    "replica needs seq {needed}, the history starts at {found}"
                ),
                None => write!(
                    f,
                    "replica needs seq {needed}, the history has nothing after it"
                ),
            },
            Self::Ring(what) => write!(f, "ring: {what}"),
        }
    }
}

impl From<HistoryError> for ReplicaError {
    fn from(error: HistoryError) -> Self {
        Self::History(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::memory::{Faults, MemoryFollower, MemoryHistory, Stored};
    use crate::history::{History, HistoryConfig, Known, LogId, Meta, MetaUpdate, Snapshot};
    use crate::ids::{log_of, SessionId};
    use crate::lifecycle::TrackedTasks;
    use bytes::Bytes;
    use gapless::{Config, Ring, SingleWriter, Writer};
    use std::collections::BTreeMap;
    use std::num::NonZeroU64;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use tokio::sync::watch;
    use tokio::time::Instant;
    use tokio_util::task::TaskTracker;

    const EPOCH: u64 = 7;

    /// One instance's copy of a session: its mirror and its committer.
    struct Replica {
        id: SessionId,
        ring: Arc<Ring<SingleWriter>>,
        mirror: Arc<Mirror>,
        committer: Arc<Committer>,
        /// Where the committer's drainers run.
        tasks: TaskTracker,
        /// The drainers' hard stop.
        hard_stop: watch::Sender<bool>,
    }

    impl Replica {
        fn new(id: SessionId) -> Self {
            let epoch = NonZeroU64::new(EPOCH).expect("non-zero");
            let writer = Writer::new(Config::default().events(256).bytes(16 << 10).epoch(epoch));
            let mirror = Arc::new(Mirror::new(id, writer));
            let tasks = TaskTracker::new();
            let hard_stop = watch::channel(false).0;
            let drainers = TrackedTasks::new(tasks.clone(), hard_stop.subscribe());
            Self {
                id,
                ring: Arc::clone(mirror.ring()),
                committer: Arc::new(Committer::new(Arc::clone(&mirror), drainers)),
                mirror,
                tasks,
                hard_stop,
            }
        }

        fn log(&self) -> LogId {
            log_of(&self.id)
        }

        async fn emit<H: History>(
            &self,
            history: &Arc<H>,
            payload: Bytes,
            deadline: Instant,
        ) -> Result<(u64, u64), Arc<ReplicaError>> {
            self.committer.emit(history, payload, deadline, None).await
        }

        async fn refresh<H: History>(&self, history: &H) -> Result<Meta, ReplicaError> {
            self.mirror.refresh(history).await
        }
    }

    /// A session in `history`, and a replica of it (one instance's copy).
    fn session(history: &MemoryHistory) -> Arc<Replica> {
        let replica = Replica::new(SessionId::random().expect("an ID"));
        history.put(
            replica.log(),
            Stored {
                epoch: EPOCH,
                ..Stored::default()
            },
        );
        Arc::new(replica)
    }

    /// Another instance's replica of the same session.
    fn elsewhere(replica: &Replica) -> Arc<Replica> {
        Arc::new(Replica::new(replica.id))
    }

    fn payload(n: u64) -> Bytes {
        Bytes::from(format!("{{\"n\":{n}}}"))
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    async fn emit<H: History>(replica: &Arc<Replica>, history: &Arc<H>, n: u64) -> Option<u64> {
        emit_at(replica, history, n).await.map(|(_, seq)| seq)
    }

    /// [`emit`], with the epoch the emit was appended under.
    async fn emit_at<H: History>(
        replica: &Arc<Replica>,
        history: &Arc<H>,
        n: u64,
    ) -> Option<(u64, u64)> {
        replica.emit(history, payload(n), later()).await.ok()
    }

    /// The ring's events after `cursor` as `(seq, payload)`.
    fn ring_events(replica: &Replica, cursor: u64) -> Vec<(u64, Bytes)> {
        replica
            .ring
            .replay_after(cursor)
            .expect("a replay")
            .into_iter()
            .map(|event| (event.seq, event.payload))
            .collect()
    }

    fn stored_events(history: &MemoryHistory, replica: &Replica) -> Vec<(u64, Bytes)> {
        history
            .get(&replica.log())
            .expect("stored")
            .events
            .into_iter()
            .collect()
    }

    /// Polls `condition` until it holds, for at most 10 s of real time (the
    /// loop is the synchronisation; the bound only turns a hang into a
    /// failure).
    async fn until(what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !condition() {
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: not within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(1)).await; // polling, bounded
        }
    }

    /// The fake, with what it cannot do by itself: appends held at a gate
    /// (each batch's length recorded as it enters), an append that panics,
    /// appends that are never answered, and reads that see the history as
    /// it was when they began but answer `read_latency` later (a round
    /// trip that an append may overtake).
    struct Hooked {
        inner: MemoryHistory,
        /// Appends pass while it is `true`.
        gate: watch::Sender<bool>,
        /// The length of each batch that reached [`History::append`], in
        /// order.
        batches: Mutex<Vec<usize>>,
        /// The next append panics (once).
        panic_once: AtomicBool,
        /// Appends never answer.
        stall: AtomicBool,
        /// How late a read answers.
        read_latency: Duration,
    }

    impl Hooked {
        fn new(inner: MemoryHistory) -> Self {
            Self {
                inner,
                gate: watch::channel(true).0,
                batches: Mutex::new(Vec::new()),
                panic_once: AtomicBool::new(false),
                stall: AtomicBool::new(false),
                read_latency: Duration::ZERO,
            }
        }

        fn with_read_latency(mut self, latency: Duration) -> Self {
            self.read_latency = latency;
            self
        }

        fn batches(&self) -> Vec<usize> {
            self.batches.lock().expect("batches").clone()
        }

        fn reads(&self) -> usize {
            self.inner.reads.load(Ordering::Relaxed)
        }
    }

    impl History for Hooked {
        type Follower = MemoryFollower;

        fn config(&self) -> &HistoryConfig {
            self.inner.config()
        }

        async fn create(&self, id: &LogId, epoch: u64, meta: &Meta) -> Result<bool, HistoryError> {
            self.inner.create(id, epoch, meta).await
        }

        async fn append(
            &self,
            id: &LogId,
            known: Known,
            payloads: &[Bytes],
            deadline: Instant,
        ) -> Result<(u64, u64), HistoryError> {
            self.batches.lock().expect("batches").push(payloads.len());
            // Looked at as the append enters: one held at the gate then
            // answers once the gate opens, whatever `stall` says by then.
            let stalled = self.stall.load(Ordering::Acquire);
            let mut gate = self.gate.subscribe();
            let _ = gate.wait_for(|open| *open).await;
            assert!(
                !self.panic_once.swap(false, Ordering::AcqRel),
                "an append that panics (injected)"
            );
            if stalled {
                std::future::pending::<()>().await;
            }
            self.inner.append(id, known, payloads, deadline).await
        }

        async fn append_guarded(
            &self,
            id: &LogId,
            known: Known,
            payloads: &[Bytes],
            guard: &crate::history::Guard,
            deadline: Instant,
        ) -> Result<Option<(u64, u64)>, HistoryError> {
            self.inner
                .append_guarded(id, known, payloads, guard, deadline)
                .await
        }

        async fn after(
            &self,
            id: &LogId,
            after: u64,
            max_bytes: usize,
        ) -> Result<Option<Snapshot>, HistoryError> {
            let read = self.inner.after(id, after, max_bytes).await;
            tokio::time::sleep(self.read_latency).await;
            read
        }

        fn follow(&self, id: &LogId) -> MemoryFollower {
            self.inner.follow(id)
        }

        async fn complete(&self, id: &LogId, grace: Duration) -> Result<bool, HistoryError> {
            self.inner.complete(id, grace).await
        }

        async fn delete(&self, id: &LogId) -> Result<bool, HistoryError> {
            self.inner.delete(id).await
        }

        async fn update_meta(
            &self,
            id: &LogId,
            update: &MetaUpdate,
        ) -> Result<gapless_history::Updated, HistoryError> {
            self.inner.update_meta(id, update).await
        }

        async fn put_token(
            &self,
            id: &LogId,
            name: &str,
            value: &str,
            ttl: Duration,
        ) -> Result<(), HistoryError> {
            self.inner.put_token(id, name, value, ttl).await
        }

        async fn take_token(&self, id: &LogId, name: &str) -> Result<Option<String>, HistoryError> {
            self.inner.take_token(id, name).await
        }

        async fn has_token(&self, id: &LogId, name: &str) -> Result<bool, HistoryError> {
            self.inner.has_token(id, name).await
        }
    }

    /// 100 emits at once: the first append is held until the other 99
    /// have queued behind it, so the batching is exact — the first emit
    /// alone, then [`APPEND_BATCH`](committer::APPEND_BATCH) (64), then
    /// the 35 left. Each emit gets its own seq, 1..=100 in all, and the
    /// ring and the history hold the same payload at each.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_emits_are_appended_in_batches_then_numbered_alike_everywhere() {
        let history = Arc::new(Hooked::new(MemoryHistory::new(1000, 1 << 20)));
        history.gate.send_replace(false);
        let replica = session(&history.inner);
        let spawn_emit = |n: u64| {
            let (replica, history) = (Arc::clone(&replica), Arc::clone(&history));
            tokio::spawn(async move { (n, emit(&replica, &history, n).await) })
        };
        let mut emits = vec![spawn_emit(0)];
        until("the first append", || history.batches() == [1]).await;
        emits.extend((1..100).map(spawn_emit));
        until("99 emits queued", || replica.committer.queued() == 99).await;
        history.gate.send_replace(true);
        let mut seqs = BTreeMap::new();
        for emit in emits {
            let (n, result) = emit.await.expect("emit task");
            let seq = result.expect("an emit into a healthy history");
            assert!(seqs.insert(seq, n).is_none(), "seq {seq} handed out twice");
        }
        assert_eq!(
            seqs.keys().copied().collect::<Vec<_>>(),
            (1..=100).collect::<Vec<_>>()
        );
        assert_eq!(history.batches(), [1, 64, 35], "appended batches");
        replica.refresh(history.as_ref()).await.expect("refresh");
        let in_ring = ring_events(&replica, 0);
        assert_eq!(in_ring, stored_events(&history.inner, &replica));
        for (seq, bytes) in in_ring {
            assert_eq!(
                bytes,
                payload(seqs[&seq]),
                "seq {seq} carries another emit's payload"
            );
        }
    }

    /// An append that panics (a bug), from the emit's own task or a
    /// drainer: its emit is answered
    /// with an error, not left waiting, and the next emit starts a new
    /// drainer and is appended and answered.
    #[tokio::test(start_paused = true)]
    async fn an_append_that_panics_fails_its_emit_and_the_next_emit_is_appended() {
        let history = Arc::new(Hooked::new(MemoryHistory::new(1000, 1 << 20)));
        let replica = session(&history.inner);
        history.panic_once.store(true, Ordering::Release);
        let failed = replica.emit(&history, payload(1), later()).await;
        assert!(
            matches!(
                failed.as_ref().map_err(|e| &**e),
                Err(ReplicaError::Ring(_))
            ),
            "{failed:?}"
        );
        let next = replica.emit(&history, payload(2), later()).await;
        assert_eq!(next.ok(), Some((EPOCH, 1)), "appended after the panic");
        assert_eq!(stored_events(&history.inner, &replica), [(1, payload(2))]);
    }

    /// An emit whose append is never answered returns by its deadline,
    /// answered `Expired`.
    #[tokio::test(start_paused = true)]
    async fn an_emit_whose_append_never_answers_returns_by_its_deadline() {
        let history = Arc::new(Hooked::new(MemoryHistory::new(1000, 1 << 20)));
        let replica = session(&history.inner);
        history.stall.store(true, Ordering::Release);
        let start = Instant::now();
        let deadline = start + Duration::from_secs(1);
        let expired = tokio::time::timeout(
            Duration::from_secs(60),
            replica.emit(&history, payload(1), deadline),
        )
        .await
        .expect("the emit returned");
        assert!(
            matches!(
                expired.as_ref().map_err(|e| &**e),
                Err(ReplicaError::Expired)
            ),
            "{expired:?}"
        );
        assert_eq!(Instant::now(), deadline, "answered at its deadline");
        assert_eq!(history.batches(), [1], "its append was sent");
    }

    /// An emit with nothing of its session waiting is appended from its
    /// caller's own task (no drainer). Emits that come meanwhile queue
    /// behind it, not beside it: one drainer — a tracked task, so a
    /// shutdown waits for its append — takes them once it is answered,
    /// in arrival order.
    #[tokio::test]
    async fn an_emit_alone_is_appended_inline_and_those_behind_it_by_a_tracked_drainer() {
        let history = Arc::new(Hooked::new(MemoryHistory::new(1000, 1 << 20)));
        history.gate.send_replace(false);
        let replica = session(&history.inner);
        let spawn_emit = |n: u64| {
            let (replica, history) = (Arc::clone(&replica), Arc::clone(&history));
            tokio::spawn(async move { emit(&replica, &history, n).await })
        };
        let first = spawn_emit(1);
        until("the first append", || history.batches() == [1]).await;
        assert_eq!(replica.tasks.len(), 0, "appended from the emit's own task");
        let second = spawn_emit(2);
        until("the second emit queued", || replica.committer.queued() == 1).await;
        let third = spawn_emit(3);
        until("the third emit queued", || replica.committer.queued() == 2).await;
        assert_eq!(history.batches(), [1], "nothing appended beside the first");
        // The drainer's append is held in its turn: not answered.
        history.stall.store(true, Ordering::Release);
        history.gate.send_replace(true);
        assert_eq!(first.await.expect("emit task"), Some(1));
        until("the drainer's append", || history.batches() == [1, 2]).await;
        assert_eq!(replica.tasks.len(), 1, "the drainer is tracked");
        replica.tasks.close();
        replica.hard_stop.send_replace(true);
        tokio::time::timeout(Duration::from_secs(10), replica.tasks.wait())
            .await
            .expect("the drainer ends at the hard stop");
        assert_eq!(second.await.expect("emit task"), None, "not acknowledged");
        assert_eq!(third.await.expect("emit task"), None, "not acknowledged");
    }

    /// Two instances emit into one session in turn (a round-robin
    /// balancer): every emit is accepted, the seqs are dense and each
    /// instance's ring holds exactly the history.
    #[tokio::test]
    async fn any_instance_emits_and_the_seqs_stay_dense() {
        let history = Arc::new(MemoryHistory::new(1000, 1 << 20));
        let a = session(&history);
        let b = elsewhere(&a);
        let mut seqs = Vec::new();
        for n in 1..=20 {
            let instance = if n % 2 == 0 { &a } else { &b };
            seqs.push(emit(instance, &history, n).await.expect("accepted"));
        }
        assert_eq!(seqs, (1..=20).collect::<Vec<_>>());
        for replica in [&a, &b] {
            replica.refresh(history.as_ref()).await.expect("refresh");
            assert_eq!(ring_events(replica, 0), stored_events(&history, replica));
        }
    }

    /// An append applied but answered as a failure (a Redis that ran the
    /// script after the deadline): the emit is not acknowledged, and the
    /// next emit gets the seq after it; the ring holds both, as the
    /// history does: no seq reused, nothing lost.
    #[tokio::test]
    async fn an_append_that_landed_after_its_deadline_is_caught_up() {
        let history = Arc::new(MemoryHistory::new(1000, 1 << 20));
        let replica = session(&history);
        assert_eq!(emit(&replica, &history, 1).await, Some(1));
        history.set_faults(Faults {
            land_then_fail: true,
            ..Faults::default()
        });
        let failed = replica.emit(&history, payload(2), later()).await;
        assert!(
            matches!(
                failed.as_ref().map_err(|e| &**e),
                Err(ReplicaError::History(HistoryError::Unavailable(_)))
            ),
            "{failed:?}"
        );
        assert_eq!(
            replica.ring.published(),
            1,
            "not acknowledged, not mirrored"
        );
        assert_eq!(emit(&replica, &history, 3).await, Some(3));
        // The ring reads the landed event at its next catch-up (before any
        // cursor check), then holds the history exactly.
        replica.refresh(history.as_ref()).await.expect("refresh");
        assert_eq!(
            ring_events(&replica, 0),
            vec![(1, payload(1)), (2, payload(2)), (3, payload(3))]
        );
    }

    /// An emit whose deadline passed while it waited is answered `Expired`
    /// and never appended.
    #[tokio::test]
    async fn an_emit_past_its_deadline_is_not_appended() {
        let history = Arc::new(MemoryHistory::new(1000, 1 << 20));
        let replica = session(&history);
        let expired = replica.emit(&history, payload(1), Instant::now()).await;
        assert!(
            matches!(
                expired.as_ref().map_err(|e| &**e),
                Err(ReplicaError::Expired)
            ),
            "{expired:?}"
        );
        assert_eq!(history.get(&replica.log()).expect("stored").published, 0);
        assert_eq!(history.appends.load(Ordering::Relaxed), 0);
    }

    /// An unreachable history: the emit fails, nothing is in the ring.
    #[tokio::test]
    async fn an_unreachable_history_acknowledges_nothing() {
        let history = Arc::new(MemoryHistory::new(1000, 1 << 20));
        let replica = session(&history);
        history.set_faults(Faults {
            down: true,
            ..Faults::default()
        });
        let failed = replica.emit(&history, payload(1), later()).await;
        assert!(
            matches!(
                failed.as_ref().map_err(|e| &**e),
                Err(ReplicaError::History(HistoryError::Unavailable(_)))
            ),
            "{failed:?}"
        );
        assert_eq!(replica.ring.published(), 0);
        history.set_faults(Faults::default());
        assert_eq!(emit(&replica, &history, 1).await, Some(1));
    }

    /// A copy that is behind by more than the history retains is stale:
    /// refreshing it reports where it stopped, never mirrors the rest at
    /// the wrong seqs. One within the retention catches up, with the
    /// session's meta as the history holds it; one whose history moved to
    /// another epoch is stale too.
    #[tokio::test]
    async fn refresh_catches_up_within_the_retention_and_is_stale_beyond() {
        let history = Arc::new(MemoryHistory::new(4, 1 << 20));
        let writer = session(&history);
        let far = elsewhere(&writer);
        for n in 1..=20 {
            emit(&writer, &history, n).await.expect("accepted");
        }
        match far.refresh(history.as_ref()).await {
            Err(ReplicaError::Stale {
                needed: 1,
                found: Some(17),
            }) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(
            far.ring.published(),
            0,
            "nothing mirrored from a stale copy"
        );

        let near_writer = session(&history);
        let near = elsewhere(&near_writer);
        let mut stored = history.get(&near.log()).expect("stored");
        stored.meta = Meta::from([("acked".into(), "1".into()), ("sent".into(), "2".into())]);
        history.put(near.log(), stored.clone());
        for n in 1..=3 {
            emit(&near_writer, &history, n).await.expect("accepted");
        }
        assert_eq!(near.refresh(history.as_ref()).await.ok(), Some(stored.meta));
        assert_eq!(ring_events(&near, 0), stored_events(&history, &near));

        let mut stored = history.get(&near.log()).expect("stored");
        stored.epoch = EPOCH + 1;
        history.put(near.log(), stored);
        assert!(matches!(
            near.refresh(history.as_ref()).await,
            Err(ReplicaError::Stale { .. })
        ));
    }

    /// Ten refreshes of one copy at once against a history whose reads
    /// take 100 ms: they share the catch-ups instead of each queueing for
    /// its own. The first runs one (two reads: the events, then the check
    /// that nothing followed); the nine that came while it read share the
    /// next one (one read) — 3 reads and 300 ms in all, not a catch-up
    /// each (11 reads, 1.1 s).
    #[tokio::test(start_paused = true)]
    async fn concurrent_refreshes_share_one_catch_up() {
        let latency = Duration::from_millis(100);
        let history =
            Arc::new(Hooked::new(MemoryHistory::new(1000, 1 << 20)).with_read_latency(latency));
        let writer = session(&history.inner);
        let copy = elsewhere(&writer);
        for n in 1..=5 {
            emit(&writer, &history, n).await.expect("accepted");
        }
        let (reads, start) = (history.reads(), Instant::now());
        let refreshes: Vec<_> = (0..10)
            .map(|_| {
                let (copy, history) = (Arc::clone(&copy), Arc::clone(&history));
                tokio::spawn(async move { copy.refresh(history.as_ref()).await.map(drop) })
            })
            .collect();
        for refresh in refreshes {
            refresh.await.expect("refresh task").expect("a refresh");
        }
        assert_eq!(history.reads() - reads, 3, "reads for 10 refreshes");
        assert!(
            start.elapsed() <= 3 * latency,
            "10 refreshes took {:?}",
            start.elapsed()
        );
        assert_eq!(copy.ring.published(), 5);
    }

    /// A refresh that comes while a catch-up is reading is not answered by
    /// it: that catch-up read the history before an append this refresh's
    /// caller may rely on (here: event 6, appended between the two). It
    /// gets a catch-up that began after it came, and sees event 6.
    #[tokio::test(start_paused = true)]
    async fn a_refresh_is_answered_by_a_catch_up_that_began_after_it_came() {
        let latency = Duration::from_millis(100);
        let history =
            Arc::new(Hooked::new(MemoryHistory::new(1000, 1 << 20)).with_read_latency(latency));
        let writer = session(&history.inner);
        let copy = elsewhere(&writer);
        for n in 1..=5 {
            emit(&writer, &history, n).await.expect("accepted");
        }
        copy.refresh(history.as_ref()).await.expect("in sync");
        let refresh = || {
            let (copy, history) = (Arc::clone(&copy), Arc::clone(&history));
            tokio::spawn(async move {
                let result = copy.refresh(history.as_ref()).await.map(drop);
                (result, copy.ring.published())
            })
        };
        let first = refresh();
        tokio::time::sleep(latency / 2).await;
        assert_eq!(emit(&writer, &history, 6).await, Some(6));
        let second = refresh();
        let (result, published) = second.await.expect("refresh task");
        result.expect("a refresh");
        assert_eq!(published, 6, "the refresh missed an append made before it");
        first.await.expect("refresh task").0.expect("a refresh");
    }

    /// Refreshes against a history that does not answer (a paused Redis)
    /// all return by the history's deadline (1 s), answered unavailable
    /// (a `503`): none waits for another's catch-up past it.
    #[tokio::test(start_paused = true)]
    async fn refreshes_wait_no_longer_than_the_history_deadline() {
        let history = Arc::new(
            Hooked::new(MemoryHistory::new(1000, 1 << 20))
                .with_read_latency(Duration::from_secs(3600)),
        );
        let copy = session(&history.inner);
        let timeout = history.config().timeout;
        let start = Instant::now();
        let refreshes: Vec<_> = (0..5)
            .map(|_| {
                let (copy, history) = (Arc::clone(&copy), Arc::clone(&history));
                tokio::spawn(async move {
                    tokio::time::timeout(Duration::from_secs(60), copy.refresh(history.as_ref()))
                        .await
                        .map(|result| result.map(drop))
                })
            })
            .collect();
        for refresh in refreshes {
            let result = refresh
                .await
                .expect("refresh task")
                .expect("no unbounded wait");
            assert!(
                matches!(
                    result,
                    Err(ReplicaError::History(HistoryError::Unavailable(_)))
                ),
                "{result:?}"
            );
        }
        assert!(start.elapsed() <= timeout, "took {:?}", start.elapsed());
    }

    /// The fake keeps a session within the ring's bytes as the script
    /// does: the oldest events go, never the newest.
    #[tokio::test]
    async fn retention_counts_bytes_as_well_as_events() {
        let history = Arc::new(MemoryHistory::new(1000, 100));
        let replica = session(&history);
        for n in 0..10 {
            let body = Bytes::from(vec![b'1'; 30 + n as usize]);
            replica
                .emit(&history, body, later())
                .await
                .expect("accepted");
        }
        let stored = history.get(&replica.log()).expect("stored");
        let bytes: usize = stored.events.values().map(Bytes::len).sum();
        assert!(bytes <= 100, "{bytes} bytes retained");
        assert_eq!(stored.events.keys().last(), Some(&10));
        let big = Bytes::from(vec![b'2'; 500]);
        replica
            .emit(&history, big, later())
            .await
            .expect("accepted");
        let stored = history.get(&replica.log()).expect("stored");
        assert_eq!(
            stored.events.keys().collect::<Vec<_>>(),
            vec![&11],
            "the newest stays"
        );
    }

    /// A copy on one instance follows another instance's appends live,
    /// woken by the announcements.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_follower_mirrors_another_instances_appends() {
        let history = Arc::new(MemoryHistory::new(1000, 1 << 20));
        let writer = session(&history);
        let follower = elsewhere(&writer);
        follower
            .mirror
            .follow(&history, history.follow(&follower.log()), |error| {
                panic!("stale: {error}")
            });
        for n in 1..=10 {
            emit(&writer, &history, n).await.expect("accepted");
        }
        until("the follower mirrored", || follower.ring.published() >= 10).await;
        assert_eq!(
            ring_events(&follower, 0),
            stored_events(&history, &follower)
        );
    }
    /// Redis restarted from a snapshot at seq 30 after acknowledging 50
    /// (the fake's `restart_losing`): the next emits are not given seqs
    /// 31.. again under the old epoch. The history continues the session
    /// under a new epoch from seq 1; each emit is answered with it; the
    /// ring of the old epoch is left as it was (never a new event at an old
    /// seq, nor past the ring's end: 51.. under the old epoch) and is stale;
    /// another instance's copy, whose ring is of the old epoch too, appends
    /// under the new epoch without moving it again.
    #[tokio::test]
    async fn a_history_that_lost_events_continues_under_a_new_epoch() {
        let history = Arc::new(MemoryHistory::new(1000, 1 << 20));
        let replica = session(&history);
        let other = elsewhere(&replica);
        for n in 1..=50 {
            assert_eq!(emit_at(&replica, &history, n).await, Some((EPOCH, n)));
        }
        other.refresh(history.as_ref()).await.expect("refresh");
        let before = ring_events(&replica, 0);
        history.restart_losing(&replica.log(), 30);

        let mut new_epoch = None;
        for n in 1..=60 {
            let (epoch, seq) = emit_at(&replica, &history, 100 + n)
                .await
                .expect("accepted");
            assert_ne!(epoch, EPOCH, "seq {seq} reused under the old epoch");
            assert_eq!(*new_epoch.get_or_insert(epoch), epoch, "one new epoch");
            assert_eq!(seq, n, "the new epoch starts at seq 1");
        }
        let new_epoch = new_epoch.expect("emits");
        assert_eq!(
            ring_events(&replica, 0),
            before,
            "nothing of the new epoch in the old ring"
        );
        assert!(matches!(
            replica.refresh(history.as_ref()).await,
            Err(ReplicaError::Stale { .. })
        ));
        assert_eq!(
            emit_at(&other, &history, 200).await,
            Some((new_epoch, 61)),
            "an instance that saw 50 under the old epoch does not move the new one"
        );
        let stored = history.get(&replica.log()).expect("stored");
        assert_eq!((stored.epoch, stored.published), (new_epoch, 61));
        assert_eq!(stored.events.get(&31), Some(&payload(131)));
    }

    /// The loss is found without a restart too: a history behind what the
    /// appending ring has seen under the same epoch (here with a Redis
    /// that persists every write, so a restart alone would not count).
    #[tokio::test]
    async fn a_history_behind_the_ring_continues_under_a_new_epoch() {
        let history = Arc::new(MemoryHistory::new(1000, 1 << 20).lossless());
        let replica = session(&history);
        for n in 1..=5 {
            emit(&replica, &history, n).await.expect("accepted");
        }
        history.restart_losing(&replica.log(), 3);
        let (epoch, seq) = emit_at(&replica, &history, 6).await.expect("accepted");
        assert_ne!(epoch, EPOCH);
        assert_eq!(seq, 1);
    }

    /// A restart that may have lost events is found by the run id alone,
    /// from an instance that has seen nothing (its ring is empty): a new
    /// epoch, unless the history persists every write.
    #[tokio::test]
    async fn a_restart_moves_the_epoch_unless_the_history_is_lossless() {
        for lossless in [false, true] {
            let history = MemoryHistory::new(1000, 1 << 20);
            let history = Arc::new(if lossless {
                history.lossless()
            } else {
                history
            });
            let replica = session(&history);
            for n in 1..=5 {
                emit(&replica, &history, n).await.expect("accepted");
            }
            history.restart_losing(&replica.log(), 5);
            let fresh = elsewhere(&replica);
            let (epoch, seq) = emit_at(&fresh, &history, 6).await.expect("accepted");
            if lossless {
                assert_eq!((epoch, seq), (EPOCH, 6), "nothing lost, seqs continue");
                assert_eq!(emit_at(&replica, &history, 7).await, Some((EPOCH, 7)));
            } else {
                assert_ne!(epoch, EPOCH, "a restart that may have lost events");
                assert_eq!(seq, 1);
            }
        }
    }
}
