//! One session's local replica of its shared history (`--redis`): the ring
//! on this instance, kept equal to a prefix-trimmed copy of the Redis
//! Stream, and the emits this instance appends.
//!
//! - **Emits** from any instance are queued per session; whichever task
//!   drains the queue appends up to [`APPEND_BATCH`] of them in one script
//!   call, and Redis gives them the session's next seqs (Redis is the
//!   sequencer: no owner, no lease). Each emit is answered with its seq
//!   once Redis has it; then the batch is written into the local ring.
//!   A queued emit whose client has gone, or whose deadline passed, is not
//!   appended.
//! - **Mirroring**: every write into the ring — a batch this instance
//!   appended, a catch-up read, a follow step after an announcement that
//!   another instance appended — holds the writer lock and requires the
//!   next seq to be the ring's `published + 1`, reading what is missing
//!   from Redis first. The ring's seqs always equal the history's. A ring
//!   that can no longer catch up (Redis trimmed past it, or the history's
//!   epoch changed) is *stale*: the caller drops it and loads the session
//!   afresh.
//! - **A new epoch**: each append tells Redis the ring's epoch and
//!   `published`; a history that lost events continues the session under
//!   a new epoch (see [`crate::history`]), and the batch is answered with
//!   it. Such a batch is never written into the ring of the old epoch: the
//!   replica is stale from then on.

use crate::history::notify::{Change, Followed};
use crate::history::{History, HistoryError, Known, READ_BYTES};
use crate::ids::SessionId;
use bytes::Bytes;
use gapless::Ring;
#[cfg(test)]
use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::{oneshot, watch, OwnedSemaphorePermit};
use tokio::time::Instant;

/// Emits appended per script call at most.
pub(crate) const APPEND_BATCH: usize = 64;

/// How often a followed replica looks at the history even without an
/// announcement (announcements are at most once: one lost while the
/// notification connection was down is found here at the latest).
const FOLLOW_POLL: Duration = Duration::from_secs(5);

/// Why an emit, a catch-up or a mirror step failed.
#[derive(Debug)]
pub(crate) enum ReplicaError {
    /// The history failed (unavailable, gone, corrupt).
    History(HistoryError),
    /// The emit was not appended: its deadline passed while it waited for
    /// earlier appends (Redis is slow or unreachable).
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

/// An emit waiting for the drainer.
struct Queued {
    payload: Bytes,
    /// Not appended after this instant.
    deadline: Instant,
    /// The instance-wide slot the emit holds while it waits.
    _slot: Option<OwnedSemaphorePermit>,
    /// The epoch and seq the emit was appended at.
    answer: oneshot::Sender<Result<(u64, u64), Arc<ReplicaError>>>,
}

/// This instance's replica of one session.
pub(crate) struct Replica {
    /// The session.
    id: SessionId,
    /// The session's ring (the same `Arc` as the session's): its seqs are
    /// the history's, up to its watermark.
    ring: Arc<Ring>,
    /// Held by every write into the ring; guards nothing else.
    writer: tokio::sync::Mutex<()>,
    /// Emits not yet appended, in arrival order.
    queue: Mutex<VecDeque<Queued>>,
    /// Whether a drainer task runs (at most one).
    draining: AtomicBool,
    /// Whether the follow task runs (at most one, for the replica's life).
    following: AtomicBool,
    /// Set once the history continues the session under another epoch
    /// than the ring's: nothing is mirrored any more, every catch-up is
    /// [`ReplicaError::Stale`].
    stale: AtomicBool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Replica {
    /// The replica of session `id` whose ring is `ring`.
    pub(crate) fn new(id: SessionId, ring: Arc<Ring>) -> Self {
        Self {
            id,
            ring,
            writer: tokio::sync::Mutex::new(()),
            queue: Mutex::new(VecDeque::new()),
            draining: AtomicBool::new(false),
            following: AtomicBool::new(false),
            stale: AtomicBool::new(false),
        }
    }

    /// Appends `payload` to the history, which gives it the session's next
    /// seq; the epoch and that seq, once Redis has it (the epoch is not the
    /// ring's if the history continued the session under a new one: the
    /// replica is then stale). The payload fits the ring (the
    /// caller checked). `slot` (the instance's bound on waiting emits) is
    /// held until the emit is appended or dropped. The emit is not appended
    /// after `deadline`, nor once its caller has stopped waiting.
    ///
    /// # Errors
    /// The history is unavailable (the event may or may not have been
    /// appended: it is not acknowledged), the deadline passed, the session
    /// is gone.
    pub(crate) async fn emit<H: History>(
        self: &Arc<Self>,
        history: &Arc<H>,
        payload: Bytes,
        deadline: Instant,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Result<(u64, u64), Arc<ReplicaError>> {
        let (answer, answered) = oneshot::channel();
        lock(&self.queue).push_back(Queued {
            payload,
            deadline,
            _slot: slot,
            answer,
        });
        if !self.draining.swap(true, Ordering::AcqRel) {
            // A task of its own: a client that goes away must not cancel an
            // append half done for the emits batched with its own.
            tokio::spawn(Arc::clone(self).drain(Arc::clone(history)));
        }
        answered.await.unwrap_or_else(|_| {
            Err(Arc::new(ReplicaError::Ring(
                "the emit was dropped unanswered".into(),
            )))
        })
    }

    /// The next batch: up to [`APPEND_BATCH`] queued emits whose caller
    /// still waits and whose deadline has not passed (the others are
    /// answered [`ReplicaError::Expired`] or dropped, never appended).
    fn next_batch(&self) -> Vec<Queued> {
        let now = Instant::now();
        let mut queue = lock(&self.queue);
        let mut batch = Vec::new();
        while batch.len() < APPEND_BATCH {
            let Some(queued) = queue.pop_front() else {
                break;
            };
            if queued.answer.is_closed() {
                continue;
            }
            if queued.deadline <= now {
                let _ = queued.answer.send(Err(Arc::new(ReplicaError::Expired)));
                continue;
            }
            batch.push(queued);
        }
        batch
    }

    /// Appends queued emits in batches until the queue is empty, then
    /// writes each batch into the ring.
    async fn drain<H: History>(self: Arc<Self>, history: Arc<H>) {
        loop {
            let batch = self.next_batch();
            if batch.is_empty() {
                self.draining.store(false, Ordering::Release);
                // An emit that queued after the look above and saw
                // `draining` still set relies on this task: look again.
                if lock(&self.queue).is_empty() || self.draining.swap(true, Ordering::AcqRel) {
                    return;
                }
                continue;
            }
            let payloads: Vec<Bytes> = batch.iter().map(|q| q.payload.clone()).collect();
            let known = Known {
                epoch: self.ring.epoch(),
                published: self.ring.published(),
            };
            match history.append(&self.id, known, &payloads).await {
                Ok((epoch, first)) => {
                    for (seq, queued) in (first..).zip(batch) {
                        let _ = queued.answer.send(Ok((epoch, seq)));
                    }
                    if epoch != known.epoch {
                        // The history continues the session under a new
                        // epoch: this ring is of the old one.
                        if !self.stale.swap(true, Ordering::AcqRel) {
                            tracing::warn!(
                                session = %self.id.tag(),
                                "the history continues the session under a new epoch (Redis lost events or restarted); this copy is dropped"
                            );
                        }
                        continue;
                    }
                    // Acknowledged: Redis has the batch. Local readers get
                    // it now, or from the follower or the next catch-up.
                    if let Err(error) = self.mirror_appended(first, &payloads) {
                        tracing::debug!(session = %self.id.tag(), %error, "appended batch not mirrored yet");
                    }
                }
                Err(error) => {
                    let error = Arc::new(ReplicaError::History(error));
                    for queued in batch {
                        let _ = queued.answer.send(Err(Arc::clone(&error)));
                    }
                }
            }
        }
    }

    /// Writes a batch this instance appended (seqs `first ..`) into the
    /// ring when that needs no read: the ring ends right before it and no
    /// catch-up is running. Otherwise (another instance appended in
    /// between, or the follower is reading) the batch is left to the
    /// follower and to the catch-up before the next check of a cursor, so
    /// the drainer never waits for a read before its next append.
    fn mirror_appended(&self, first: u64, payloads: &[Bytes]) -> Result<(), ReplicaError> {
        let Ok(_writer) = self.writer.try_lock() else {
            return Ok(());
        };
        if self.ring.published() + 1 != first {
            return Ok(());
        }
        let events: Vec<(u64, Bytes)> = (first..).zip(payloads.iter().cloned()).collect();
        self.mirror_locked(&events)
    }

    /// Emits `events` (seq order, as read from the history) into the ring:
    /// those at or below the watermark are already there; the rest must
    /// start at `published + 1` without a hole. Call with the writer lock
    /// held.
    fn mirror_locked(&self, events: &[(u64, Bytes)]) -> Result<(), ReplicaError> {
        for (seq, payload) in events {
            let needed = self.ring.published() + 1;
            if *seq < needed {
                continue;
            }
            if *seq > needed {
                return Err(ReplicaError::Stale {
                    needed,
                    found: Some(*seq),
                });
            }
            match self.ring.emit(payload) {
                Ok(got) if got == *seq => {}
                Ok(got) => {
                    return Err(ReplicaError::Ring(format!(
                        "mirrored seq {seq}, the ring gave {got}"
                    )))
                }
                Err(error) => return Err(ReplicaError::Ring(error.to_string())),
            }
        }
        Ok(())
    }

    /// Reads and mirrors the history until the ring reaches `target` (or
    /// the history's newest event, with `u64::MAX`); the cursors the
    /// history holds (`acked`, `sent`). Call with the writer lock held.
    async fn catch_up_locked<H: History>(
        &self,
        history: &H,
        target: u64,
    ) -> Result<(u64, u64), ReplicaError> {
        loop {
            let after = self.ring.published();
            if self.stale.load(Ordering::Acquire) {
                return Err(ReplicaError::Stale {
                    needed: after + 1,
                    found: None,
                });
            }
            let snapshot = history
                .after(&self.id, after, READ_BYTES)
                .await?
                .ok_or(ReplicaError::History(HistoryError::Gone))?;
            if snapshot.epoch != self.ring.epoch() {
                return Err(ReplicaError::Stale {
                    needed: after + 1,
                    found: None,
                });
            }
            if snapshot.published <= after || after >= target {
                return Ok((snapshot.acked, snapshot.sent));
            }
            if snapshot.events.is_empty() {
                return Err(ReplicaError::Stale {
                    needed: after + 1,
                    found: None,
                });
            }
            self.mirror_locked(&snapshot.events)?;
        }
    }

    /// Brings the ring up to the history's newest event and returns the
    /// cursors the history holds (`acked`, `sent`), for the session's
    /// checks on this instance.
    ///
    /// # Errors
    /// The history is unavailable or the session gone; the replica is stale.
    pub(crate) async fn refresh<H: History>(
        &self,
        history: &H,
    ) -> Result<(u64, u64), ReplicaError> {
        let _writer = self.writer.lock().await;
        self.catch_up_locked(history, u64::MAX).await
    }

    /// Starts the follow task unless it runs: whenever `announced` says the
    /// session grew past the ring (another instance appended) or that
    /// announcements may have been missed, and at least every
    /// [`FOLLOW_POLL`], it brings the ring up to the history. It ends with
    /// the replica, or calls `on_stale` and ends when the replica can no
    /// longer catch up.
    pub(crate) fn follow<H: History, A: Announcements>(
        self: &Arc<Self>,
        history: &Arc<H>,
        mut announced: A,
        on_stale: impl FnOnce(ReplicaError) + Send + 'static,
    ) {
        if self.following.swap(true, Ordering::AcqRel) {
            return;
        }
        let replica: Weak<Self> = Arc::downgrade(self);
        let history = Arc::clone(history);
        tokio::spawn(async move {
            let mut ended = false;
            loop {
                let woke = if ended {
                    tokio::time::sleep(FOLLOW_POLL).await;
                    Announced::Missed
                } else {
                    tokio::time::timeout(FOLLOW_POLL, announced.next())
                        .await
                        .unwrap_or(Announced::Missed)
                };
                let Some(this) = replica.upgrade() else {
                    return;
                };
                match woke {
                    Announced::Seq(last) if last <= this.ring.published() => continue,
                    Announced::Ended => ended = true,
                    Announced::Seq(_) | Announced::Missed => {}
                }
                let caught_up = {
                    let _writer = this.writer.lock().await;
                    this.catch_up_locked(history.as_ref(), u64::MAX).await
                };
                match caught_up {
                    Ok(_) => {}
                    Err(ReplicaError::History(HistoryError::Gone)) => {
                        on_stale(ReplicaError::History(HistoryError::Gone));
                        return;
                    }
                    Err(ReplicaError::History(error)) => {
                        tracing::warn!(session = %this.id.tag(), %error, "follow read failed");
                    }
                    Err(error) => {
                        tracing::warn!(session = %this.id.tag(), %error, "mirror cannot continue");
                        on_stale(error);
                        return;
                    }
                }
            }
        });
    }
}

/// What a follower learns from the announcements of appends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Announced {
    /// The session now ends at this seq (or later).
    Seq(u64),
    /// Announcements may have been missed: read the history.
    Missed,
    /// No more announcements will come (the instance is stopping): poll.
    Ended,
}

/// The announcements one session's follower waits on.
pub(crate) trait Announcements: Send + 'static {
    /// The next announcement.
    fn next(&mut self) -> impl std::future::Future<Output = Announced> + Send;
}

/// A session's announcements from the instance's notification
/// connection: a resync (the subscription was re-established) is
/// [`Announced::Missed`].
impl Announcements for Followed {
    async fn next(&mut self) -> Announced {
        match self.changed().await {
            None => Announced::Ended,
            Some(Change::Resync { .. }) => Announced::Missed,
            Some(Change::Published(last)) => Announced::Seq(last),
        }
    }
}

impl Announcements for watch::Receiver<u64> {
    async fn next(&mut self) -> Announced {
        match self.changed().await {
            Ok(()) => Announced::Seq(*self.borrow_and_update()),
            Err(_) => Announced::Ended,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::memory::{Faults, MemoryHistory, Stored};
    use gapless::Config;
    use std::num::NonZeroU64;

    const EPOCH: u64 = 7;

    fn ring() -> Arc<Ring> {
        let epoch = NonZeroU64::new(EPOCH).expect("non-zero");
        Arc::new(Ring::new(
            Config::default().events(256).bytes(16 << 10).epoch(epoch),
        ))
    }

    /// A session in `history`, and a replica of it (one instance's copy).
    fn session(history: &MemoryHistory) -> Arc<Replica> {
        let id = SessionId::random().expect("an ID");
        history.put(
            id,
            Stored {
                epoch: EPOCH,
                ..Stored::default()
            },
        );
        Arc::new(Replica::new(id, ring()))
    }

    /// Another instance's replica of the same session.
    fn elsewhere(replica: &Replica) -> Arc<Replica> {
        Arc::new(Replica::new(replica.id, ring()))
    }

    fn payload(n: u64) -> Bytes {
        Bytes::from(format!("{{\"n\":{n}}}"))
    }

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(10)
    }

    async fn emit(replica: &Arc<Replica>, history: &Arc<MemoryHistory>, n: u64) -> Option<u64> {
        emit_at(replica, history, n).await.map(|(_, seq)| seq)
    }

    /// [`emit`], with the epoch the emit was appended under.
    async fn emit_at(
        replica: &Arc<Replica>,
        history: &Arc<MemoryHistory>,
        n: u64,
    ) -> Option<(u64, u64)> {
        replica.emit(history, payload(n), later(), None).await.ok()
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
            .get(&replica.id)
            .expect("stored")
            .events
            .into_iter()
            .collect()
    }

    /// 100 emits at once into a history whose appends take 5 ms (a round
    /// trip): each gets its own seq, 1..=100 in all, the ring and the
    /// history hold the same payload at each, and the emits that queued
    /// during an append went in one batch (far fewer calls than emits).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_emits_are_appended_in_batches_then_numbered_alike_everywhere() {
        let history =
            Arc::new(MemoryHistory::new(1000, 1 << 20).with_latency(Duration::from_millis(5)));
        let replica = session(&history);
        let emits: Vec<_> = (0..100)
            .map(|n| {
                let (replica, history) = (Arc::clone(&replica), Arc::clone(&history));
                tokio::spawn(async move { (n, emit(&replica, &history, n).await) })
            })
            .collect();
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
        replica.refresh(history.as_ref()).await.expect("refresh");
        let in_ring = ring_events(&replica, 0);
        assert_eq!(in_ring, stored_events(&history, &replica));
        for (seq, bytes) in in_ring {
            assert_eq!(
                bytes,
                payload(seqs[&seq]),
                "seq {seq} carries another emit's payload"
            );
        }
        let appends = history.appends.load(Ordering::Relaxed);
        assert!(
            appends <= 10,
            "{appends} append calls for 100 concurrent emits"
        );
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
        let failed = replica.emit(&history, payload(2), later(), None).await;
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
        let expired = replica
            .emit(&history, payload(1), Instant::now(), None)
            .await;
        assert!(
            matches!(
                expired.as_ref().map_err(|e| &**e),
                Err(ReplicaError::Expired)
            ),
            "{expired:?}"
        );
        assert_eq!(history.get(&replica.id).expect("stored").published, 0);
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
        let failed = replica.emit(&history, payload(1), later(), None).await;
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
    /// history's cursors; one whose history moved to another epoch is
    /// stale too.
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
        let mut stored = history.get(&near.id).expect("stored");
        stored.acked = 1;
        stored.sent = 2;
        history.put(near.id, stored);
        for n in 1..=3 {
            emit(&near_writer, &history, n).await.expect("accepted");
        }
        assert_eq!(near.refresh(history.as_ref()).await.ok(), Some((1, 2)));
        assert_eq!(ring_events(&near, 0), stored_events(&history, &near));

        let mut stored = history.get(&near.id).expect("stored");
        stored.epoch = EPOCH + 1;
        history.put(near.id, stored);
        assert!(matches!(
            near.refresh(history.as_ref()).await,
            Err(ReplicaError::Stale { .. })
        ));
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
                .emit(&history, body, later(), None)
                .await
                .expect("accepted");
        }
        let stored = history.get(&replica.id).expect("stored");
        let bytes: usize = stored.events.values().map(Bytes::len).sum();
        assert!(bytes <= 100, "{bytes} bytes retained");
        assert_eq!(stored.events.keys().last(), Some(&10));
        let big = Bytes::from(vec![b'2'; 500]);
        replica
            .emit(&history, big, later(), None)
            .await
            .expect("accepted");
        let stored = history.get(&replica.id).expect("stored");
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
        follower.follow(&history, history.announcements(), |error| {
            panic!("stale: {error}")
        });
        for n in 1..=10 {
            emit(&writer, &history, n).await.expect("accepted");
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while follower.ring.published() < 10 {
            assert!(
                std::time::Instant::now() < deadline,
                "the follower did not mirror"
            );
            tokio::time::sleep(Duration::from_millis(5)).await; // polling, bounded
        }
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
        history.restart_losing(&replica.id, 30);

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
        let stored = history.get(&replica.id).expect("stored");
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
        history.restart_losing(&replica.id, 3);
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
            history.restart_losing(&replica.id, 5);
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
