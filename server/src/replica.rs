//! One session's local replica of its shared history (`--redis`): the ring
//! on this instance, kept equal to a prefix-trimmed copy of the Redis
//! Stream, and this instance's role for the session.
//!
//! - **Owner** (holds the lease): emits are queued, and whichever task
//!   drains the queue appends up to [`APPEND_BATCH`] of them in one script
//!   call and only then emits them into the ring and answers them. No emit
//!   is acknowledged, and no reader on this instance sees an event, before
//!   Redis has it.
//! - **Mirror** (does not): a tail task follows the stream with a blocking
//!   `XREAD` and emits what it reads into the ring, so streams on this
//!   instance follow the local ring exactly as on the owner. An emit here
//!   first tries to take the lease (the owner died, or released it).
//!
//! Every write into the ring (an owner's batch, a mirror's catch-up) holds
//! the writer lock and requires the next seq to be the ring's
//! `published + 1`: the ring's seqs always equal the history's. A mirror
//! that can no longer catch up (Redis trimmed past it) is *stale*: the
//! caller drops it and loads the session afresh.

use crate::history::{Acquired, History, HistoryError, Tail, Token};
use crate::ids::SessionId;
use bytes::Bytes;
use gapless::Ring;
#[cfg(test)]
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};

/// Emits appended per script call at most.
pub(crate) const APPEND_BATCH: usize = 64;

/// How long a mirror's `XREAD` blocks before it looks again whether it is
/// still needed.
const TAIL_BLOCK: Duration = Duration::from_secs(5);

/// Why an emit, a catch-up or a mirror step failed.
#[derive(Debug)]
pub(crate) enum ReplicaError {
    /// The history failed (unavailable, gone, corrupt).
    History(HistoryError),
    /// Another instance owns the session for about `retry_after`.
    OwnerUnavailable {
        /// The lease's remaining time.
        retry_after: Duration,
    },
    /// The ring is behind the history by more than Redis retains: this
    /// replica cannot continue and must be loaded afresh.
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
            Self::OwnerUnavailable { retry_after } => {
                write!(f, "another instance owns the session for {retry_after:?}")
            }
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
        match error {
            HistoryError::NotOwner { retry_after } => Self::OwnerUnavailable { retry_after },
            other => Self::History(other),
        }
    }
}

/// An emit waiting for the drainer.
struct Queued {
    payload: Bytes,
    answer: oneshot::Sender<Result<u64, Arc<ReplicaError>>>,
}

/// This instance's replica of one session.
pub(crate) struct Replica {
    /// The session.
    id: SessionId,
    /// This instance's lease token for the session.
    token: Token,
    /// The session's ring (the same `Arc` as the session's): its seqs are
    /// the history's, up to its watermark.
    ring: Arc<Ring>,
    /// Held by every write into the ring; guards nothing else, the role is
    /// in `owner`.
    writer: tokio::sync::Mutex<()>,
    /// Whether this instance holds the lease, as last learned (a renewal,
    /// an append, an acquire). Changed only with `writer` held.
    owner: AtomicBool,
    /// Emits not yet appended, in arrival order.
    queue: Mutex<Vec<Queued>>,
    /// Whether a drainer task runs (at most one).
    draining: AtomicBool,
    /// Whether the lease renewal task runs (at most one).
    renewing: AtomicBool,
    /// Whether the tail task runs (at most one, for the replica's life).
    tailing: AtomicBool,
    /// Woken when this instance stops being the owner, so the tail starts
    /// following the stream again.
    demoted: Notify,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Replica {
    /// The replica of session `id` whose ring is `ring`; `owner` if this
    /// instance just created the session (and holds its lease).
    pub(crate) fn new(id: SessionId, token: Token, ring: Arc<Ring>, owner: bool) -> Self {
        Self {
            id,
            token,
            ring,
            writer: tokio::sync::Mutex::new(()),
            owner: AtomicBool::new(owner),
            queue: Mutex::new(Vec::new()),
            draining: AtomicBool::new(false),
            renewing: AtomicBool::new(false),
            tailing: AtomicBool::new(false),
            demoted: Notify::new(),
        }
    }

    /// This instance's lease token for the session.
    pub(crate) fn token(&self) -> Token {
        self.token
    }

    /// Whether this instance holds the session's lease, as last learned.
    pub(crate) fn is_owner(&self) -> bool {
        self.owner.load(Ordering::Acquire)
    }

    /// Appends `payload` to the history (taking the lease if it is free),
    /// then emits it into the ring; its seq. The payload fits the ring (the
    /// caller checked).
    ///
    /// # Errors
    /// Another instance owns the session; the history is unavailable (the
    /// event may or may not have been appended: it is not acknowledged);
    /// the replica is stale.
    pub(crate) async fn emit<H: History>(
        self: &Arc<Self>,
        history: &Arc<H>,
        payload: Bytes,
    ) -> Result<u64, Arc<ReplicaError>> {
        let (answer, answered) = oneshot::channel();
        lock(&self.queue).push(Queued { payload, answer });
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

    /// Appends queued emits in batches until the queue is empty.
    async fn drain<H: History>(self: Arc<Self>, history: Arc<H>) {
        let _writer = self.writer.lock().await;
        loop {
            let batch: Vec<Queued> = {
                let mut queue = lock(&self.queue);
                let n = queue.len().min(APPEND_BATCH);
                queue.drain(..n).collect()
            };
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
            match self.commit(history.as_ref(), &payloads).await {
                Ok(first) => {
                    for (seq, queued) in (first..).zip(batch) {
                        let _ = queued.answer.send(Ok(seq));
                    }
                }
                Err(error) => {
                    let error = Arc::new(error);
                    for queued in batch {
                        let _ = queued.answer.send(Err(Arc::clone(&error)));
                    }
                }
            }
        }
    }

    /// One batch: take the lease if needed, append at the ring's next seq
    /// (catching up first if the history is ahead), then emit into the
    /// ring. The first seq. Call with the writer lock held.
    async fn commit<H: History>(
        &self,
        history: &H,
        payloads: &[Bytes],
    ) -> Result<u64, ReplicaError> {
        // Two tries: the second after catching up with an append that timed
        // out but was applied.
        for _ in 0..2 {
            if !self.is_owner() {
                match history.acquire(&self.id, self.token).await? {
                    Acquired::Owner { published } => {
                        self.catch_up_locked(history, published).await?;
                        self.owner.store(true, Ordering::Release);
                        tracing::info!(session = %self.id.tag(), published, "took the session over");
                    }
                    Acquired::Held { retry_after } => {
                        return Err(ReplicaError::OwnerUnavailable { retry_after })
                    }
                }
            }
            let first = self.ring.published() + 1;
            match history.append(&self.id, self.token, first, payloads).await {
                Ok(_) => {
                    for (expected, payload) in (first..).zip(payloads) {
                        match self.ring.emit(payload) {
                            Ok(seq) if seq == expected => {}
                            Ok(seq) => {
                                return Err(ReplicaError::Ring(format!(
                                    "appended seq {expected}, the ring gave {seq}"
                                )))
                            }
                            Err(error) => return Err(ReplicaError::Ring(error.to_string())),
                        }
                    }
                    return Ok(first);
                }
                Err(HistoryError::Behind { published }) => {
                    self.catch_up_locked(history, published).await?;
                }
                Err(HistoryError::NotOwner { retry_after }) => {
                    self.demote();
                    return Err(ReplicaError::OwnerUnavailable { retry_after });
                }
                Err(other) => return Err(ReplicaError::History(other)),
            }
        }
        Err(ReplicaError::History(HistoryError::Unavailable(
            "the history kept moving ahead of this owner".into(),
        )))
    }

    /// Marks this instance as no longer the owner and wakes the tail.
    fn demote(&self) {
        if self.owner.swap(false, Ordering::AcqRel) {
            tracing::info!(session = %self.id.tag(), "lost the session's lease");
            self.demoted.notify_one();
        }
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

    /// Reads and mirrors the history until the ring reaches `target`. Call
    /// with the writer lock held.
    async fn catch_up_locked<H: History>(
        &self,
        history: &H,
        target: u64,
    ) -> Result<(), ReplicaError> {
        while self.ring.published() < target {
            let after = self.ring.published();
            let snapshot = history
                .after(&self.id, after, crate::history::READ_BATCH)
                .await?
                .ok_or(ReplicaError::History(HistoryError::Gone))?;
            if snapshot.events.is_empty() {
                return Err(ReplicaError::Stale {
                    needed: after + 1,
                    found: None,
                });
            }
            self.mirror_locked(&snapshot.events)?;
        }
        Ok(())
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
        loop {
            let after = self.ring.published();
            let snapshot = history
                .after(&self.id, after, crate::history::READ_BATCH)
                .await?
                .ok_or(ReplicaError::History(HistoryError::Gone))?;
            if snapshot.published <= after {
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

    /// Starts the lease renewal task unless it runs: every third of the
    /// lease, while this instance owns the session and the replica lives.
    pub(crate) fn keep_lease<H: History>(self: &Arc<Self>, history: &Arc<H>) {
        if !self.is_owner() || self.renewing.swap(true, Ordering::AcqRel) {
            return;
        }
        let replica = Arc::downgrade(self);
        let history = Arc::clone(history);
        let period = history.config().lease_ttl / 3;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(replica) = replica.upgrade() else {
                    return;
                };
                if !replica.is_owner() {
                    replica.renewing.store(false, Ordering::Release);
                    return;
                }
                match history.renew(&replica.id, replica.token).await {
                    Ok(true) => {}
                    Ok(false) => {
                        let _writer = replica.writer.lock().await;
                        replica.demote();
                    }
                    // Redis is unreachable: the lease may lapse; the next
                    // append finds out (the script checks the lease).
                    Err(error) => {
                        tracing::warn!(session = %replica.id.tag(), %error, "lease renewal failed")
                    }
                }
            }
        });
    }

    /// Gives the lease up (a graceful shutdown, an idle session), so that
    /// another instance takes over at once rather than after the lease.
    pub(crate) async fn release<H: History>(&self, history: &H) {
        let _writer = self.writer.lock().await;
        if self.owner.swap(false, Ordering::AcqRel) {
            if let Err(error) = history.release(&self.id, self.token).await {
                tracing::warn!(session = %self.id.tag(), %error, "lease release failed");
            }
        }
    }

    /// Starts the tail task unless it runs: while this instance is not the
    /// owner, it follows the stream and mirrors it into the ring, so local
    /// streams see other instances' emits. It ends with the replica, or
    /// calls `on_stale` and ends when the replica can no longer catch up.
    pub(crate) fn follow<H: History>(
        self: &Arc<Self>,
        history: &Arc<H>,
        on_stale: impl FnOnce(ReplicaError) + Send + 'static,
    ) {
        if self.tailing.swap(true, Ordering::AcqRel) {
            return;
        }
        let replica: Weak<Self> = Arc::downgrade(self);
        let history = Arc::clone(history);
        tokio::spawn(async move {
            let mut tail = None;
            loop {
                let Some(this) = replica.upgrade() else {
                    return;
                };
                if this.is_owner() {
                    // Looks again at least every TAIL_BLOCK, so the task
                    // ends soon after the replica.
                    tokio::select! {
                        () = this.demoted.notified() => {}
                        () = tokio::time::sleep(TAIL_BLOCK) => {}
                    }
                    continue;
                }
                let connection = match tail.as_mut() {
                    Some(connection) => connection,
                    None => match history.tail(&this.id).await {
                        Ok(connection) => tail.insert(connection),
                        Err(error) => {
                            tracing::warn!(session = %this.id.tag(), %error, "tail connection failed");
                            drop(this);
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            continue;
                        }
                    },
                };
                let after = this.ring.published();
                let id = this.id;
                drop(this);
                let read = connection.next(after, TAIL_BLOCK).await;
                let Some(this) = replica.upgrade() else {
                    return;
                };
                let events = match read {
                    Ok(events) => events,
                    Err(error) => {
                        tracing::warn!(session = %id.tag(), %error, "tail read failed");
                        tail = None;
                        continue;
                    }
                };
                if events.is_empty() {
                    continue;
                }
                let _writer = this.writer.lock().await;
                if this.is_owner() {
                    continue;
                }
                if let Err(error) = this.mirror_locked(&events) {
                    tracing::warn!(session = %id.tag(), %error, "mirror cannot continue");
                    on_stale(error);
                    return;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::memory::{Faults, MemoryHistory, Stored};
    use gapless::Config;

    fn ring() -> Arc<Ring> {
        Arc::new(Ring::new(Config::default().events(256).bytes(16 << 10)))
    }

    /// A session in `history` whose lease is `holder`'s, and a replica of
    /// it for `token` (the owner when `holder == token`).
    fn session(history: &MemoryHistory, holder: Token, token: Token) -> Arc<Replica> {
        let id = SessionId::random().expect("an ID");
        history.put(
            id,
            Stored {
                epoch: 7,
                lease: Some(holder),
                ..Stored::default()
            },
        );
        Arc::new(Replica::new(id, token, ring(), holder == token))
    }

    fn token() -> Token {
        Token::random().expect("a token")
    }

    fn payload(n: u64) -> Bytes {
        Bytes::from(format!("{{\"n\":{n}}}"))
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
    /// during an append went in one batch (at most 100 / 64 + a few calls,
    /// far fewer than 100).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_emits_are_appended_in_batches_then_numbered_alike_everywhere() {
        let history = Arc::new(MemoryHistory::new(1000).with_latency(Duration::from_millis(5)));
        let owner = token();
        let replica = session(&history, owner, owner);
        let emits: Vec<_> = (0..100)
            .map(|n| {
                let (replica, history) = (Arc::clone(&replica), Arc::clone(&history));
                tokio::spawn(async move { (n, replica.emit(&history, payload(n)).await) })
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

    /// An append applied but answered as a failure (a Redis that ran the
    /// script after the deadline): the emit is not acknowledged, and the
    /// next emit finds the history ahead, mirrors the landed event into
    /// the ring and continues after it: no seq reused, nothing lost.
    #[tokio::test]
    async fn an_append_that_landed_after_its_deadline_is_caught_up() {
        let history = Arc::new(MemoryHistory::new(1000));
        let owner = token();
        let replica = session(&history, owner, owner);
        assert_eq!(replica.emit(&history, payload(1)).await.ok(), Some(1));
        history.set_faults(Faults {
            land_then_fail: true,
            ..Faults::default()
        });
        let failed = replica.emit(&history, payload(2)).await;
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
            "not in the ring: not acknowledged"
        );
        assert_eq!(replica.emit(&history, payload(3)).await.ok(), Some(3));
        assert_eq!(
            ring_events(&replica, 0),
            vec![(1, payload(1)), (2, payload(2)), (3, payload(3))]
        );
        assert_eq!(ring_events(&replica, 0), stored_events(&history, &replica));
    }

    /// Another instance holds the lease: `owner_unavailable`, nothing
    /// appended, nothing in the ring. Once it is released, the emit takes
    /// the lease and continues at the history's next seq.
    #[tokio::test]
    async fn a_lease_held_elsewhere_refuses_until_it_is_free() {
        let history = Arc::new(MemoryHistory::new(1000));
        let (other, mine) = (token(), token());
        let replica = session(&history, other, mine);
        // The other instance appended two events.
        history
            .append(&replica.id, other, 1, &[payload(1), payload(2)])
            .await
            .expect("the owner's append");
        let refused = replica.emit(&history, payload(3)).await;
        assert!(
            matches!(
                refused.as_ref().map_err(|e| &**e),
                Err(ReplicaError::OwnerUnavailable { .. })
            ),
            "{refused:?}"
        );
        assert_eq!(history.get(&replica.id).expect("stored").published, 2);
        assert_eq!(replica.ring.published(), 0);
        history.release(&replica.id, other).await.expect("release");
        assert_eq!(replica.emit(&history, payload(3)).await.ok(), Some(3));
        assert!(replica.is_owner());
        assert_eq!(ring_events(&replica, 0), stored_events(&history, &replica));
    }

    /// The owner's lease went to another instance (it was paused past it):
    /// its next emit is refused by the history, and it stops being the
    /// owner.
    #[tokio::test]
    async fn an_owner_that_lost_its_lease_is_refused_and_demoted() {
        let history = Arc::new(MemoryHistory::new(1000));
        let (mine, other) = (token(), token());
        let replica = session(&history, mine, mine);
        assert_eq!(replica.emit(&history, payload(1)).await.ok(), Some(1));
        let mut stored = history.get(&replica.id).expect("stored");
        stored.lease = Some(other);
        history.put(replica.id, stored);
        let refused = replica.emit(&history, payload(2)).await;
        assert!(
            matches!(
                refused.as_ref().map_err(|e| &**e),
                Err(ReplicaError::OwnerUnavailable { .. })
            ),
            "{refused:?}"
        );
        assert!(!replica.is_owner());
        assert_eq!(history.get(&replica.id).expect("stored").published, 1);
    }

    /// An unreachable history: the emit fails, nothing is in the ring.
    #[tokio::test]
    async fn an_unreachable_history_acknowledges_nothing() {
        let history = Arc::new(MemoryHistory::new(1000));
        let owner = token();
        let replica = session(&history, owner, owner);
        history.set_faults(Faults {
            down: true,
            ..Faults::default()
        });
        let failed = replica.emit(&history, payload(1)).await;
        assert!(
            matches!(
                failed.as_ref().map_err(|e| &**e),
                Err(ReplicaError::History(HistoryError::Unavailable(_)))
            ),
            "{failed:?}"
        );
        assert_eq!(replica.ring.published(), 0);
        history.set_faults(Faults::default());
        assert_eq!(replica.emit(&history, payload(1)).await.ok(), Some(1));
    }

    /// A copy that is behind by more than the history retains is stale:
    /// refreshing it reports where it stopped, never mirrors the rest at
    /// the wrong seqs. One within the retention catches up, with the
    /// history's cursors.
    #[tokio::test]
    async fn refresh_catches_up_within_the_retention_and_is_stale_beyond() {
        let history = Arc::new(MemoryHistory::new(4));
        let owner = token();
        let far = session(&history, owner, token());
        let payloads: Vec<Bytes> = (1..=20).map(payload).collect();
        history
            .append(&far.id, owner, 1, &payloads)
            .await
            .expect("append");
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

        let near = session(&history, owner, token());
        let mut stored = history.get(&near.id).expect("stored");
        stored.acked = 1;
        stored.sent = 2;
        history.put(near.id, stored);
        history
            .append(&near.id, owner, 1, &[payload(1), payload(2), payload(3)])
            .await
            .expect("append");
        assert_eq!(near.refresh(history.as_ref()).await.ok(), Some((1, 2)));
        assert_eq!(ring_events(&near, 0), stored_events(&history, &near));
    }

    /// A copy on an instance that does not own the session follows the
    /// owner's appends live through its tail.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_follower_mirrors_the_owners_appends() {
        let history = Arc::new(MemoryHistory::new(1000));
        let owner = token();
        let replica = session(&history, owner, token());
        replica.follow(&history, |error| panic!("stale: {error}"));
        for n in 1..=10 {
            history
                .append(&replica.id, owner, n, &[payload(n)])
                .await
                .expect("the owner's append");
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while replica.ring.published() < 10 {
            assert!(
                std::time::Instant::now() < deadline,
                "the tail did not mirror"
            );
            tokio::time::sleep(Duration::from_millis(5)).await; // polling, bounded
        }
        assert_eq!(ring_events(&replica, 0), stored_events(&history, &replica));
    }
}
