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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::memory::{Faults, MemoryHistory, Stored};
    use crate::ids::SessionId;
    use bytes::Bytes;
    use gapless::{Config, Ring, SingleWriter, Writer};
    use std::collections::BTreeMap;
    use std::num::NonZeroU64;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::time::Instant;

    const EPOCH: u64 = 7;

    /// One instance's copy of a session: its mirror and its committer.
    struct Replica {
        id: SessionId,
        ring: Arc<Ring<SingleWriter>>,
        mirror: Arc<Mirror>,
        committer: Arc<Committer>,
    }

    impl Replica {
        fn new(id: SessionId) -> Self {
            let epoch = NonZeroU64::new(EPOCH).expect("non-zero");
            let writer = Writer::new(Config::default().events(256).bytes(16 << 10).epoch(epoch));
            let mirror = Arc::new(Mirror::new(id, writer));
            Self {
                id,
                ring: Arc::clone(mirror.ring()),
                committer: Arc::new(Committer::new(Arc::clone(&mirror))),
                mirror,
            }
        }

        async fn emit(
            &self,
            history: &Arc<MemoryHistory>,
            payload: Bytes,
            deadline: Instant,
        ) -> Result<(u64, u64), Arc<ReplicaError>> {
            self.committer.emit(history, payload, deadline, None).await
        }

        async fn refresh(&self, history: &MemoryHistory) -> Result<(u64, u64), ReplicaError> {
            self.mirror.refresh(history).await
        }
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
        Arc::new(Replica::new(id))
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

    async fn emit(replica: &Arc<Replica>, history: &Arc<MemoryHistory>, n: u64) -> Option<u64> {
        emit_at(replica, history, n).await.map(|(_, seq)| seq)
    }

    /// [`emit`], with the epoch the emit was appended under.
    async fn emit_at(
        replica: &Arc<Replica>,
        history: &Arc<MemoryHistory>,
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
        // All 100 are spawned before any emits: a test thread descheduled
        // while spawning would otherwise trickle them in, in small batches.
        let start = Arc::new(tokio::sync::Barrier::new(100));
        let emits: Vec<_> = (0..100)
            .map(|n| {
                let (replica, history) = (Arc::clone(&replica), Arc::clone(&history));
                let start = Arc::clone(&start);
                tokio::spawn(async move {
                    start.wait().await;
                    (n, emit(&replica, &history, n).await)
                })
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
                .emit(&history, body, later())
                .await
                .expect("accepted");
        }
        let stored = history.get(&replica.id).expect("stored");
        let bytes: usize = stored.events.values().map(Bytes::len).sum();
        assert!(bytes <= 100, "{bytes} bytes retained");
        assert_eq!(stored.events.keys().last(), Some(&10));
        let big = Bytes::from(vec![b'2'; 500]);
        replica
            .emit(&history, big, later())
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
        follower
            .mirror
            .follow(&history, history.announcements(), |error| {
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
