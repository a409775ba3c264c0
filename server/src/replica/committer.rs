//! A session's emits on this instance on their way into the shared
//! history: queued, appended in batches (Redis gives them the session's
//! next seqs), answered, then handed to the session's [`Mirror`].
//!
//! At most one appender per session at a time, holding the committer's
//! draining role: the emit's own task when nothing of its session waits
//! (one task hop fewer each way), else a drainer task among the server's
//! tracked tasks ([`TrackedTasks`]: a shutdown waits for the appends in
//! flight, until its hard stop drops them; an emit's own task is its
//! connection's, which the shutdown tracks alike). Whatever ends the role
//! — an empty queue, a caller that stops waiting, or a panic (a bug) —
//! lets the next emit take it, and emits already queued get a drainer at
//! once. No emit waits past its deadline for its answer.

use super::mirror::Mirror;
use super::ReplicaError;
use crate::history::{History, Known};
use crate::lifecycle::TrackedTasks;
use bytes::Bytes;
use futures_util::FutureExt;
use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::runtime::Handle;
use tokio::sync::{oneshot, OwnedSemaphorePermit};
use tokio::time::Instant;

/// Emits appended per script call at most.
pub(crate) const APPEND_BATCH: usize = 64;

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

/// The emits of one session on this instance that wait for the history.
pub(crate) struct Committer {
    /// Where an appended batch is written on this instance.
    mirror: Arc<Mirror>,
    /// Emits not yet appended, in arrival order.
    queue: Mutex<VecDeque<Queued>>,
    /// Whether a drainer task runs (at most one). Set by whoever starts
    /// one; cleared by the drainer's [`Draining`] guard when it ends, however
    /// it ends.
    draining: AtomicBool,
    /// Where drainers run.
    drainers: TrackedTasks,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Committer {
    /// The committer of `mirror`'s session, whose drainers run among
    /// `drainers`.
    pub(crate) fn new(mirror: Arc<Mirror>, drainers: TrackedTasks) -> Self {
        Self {
            mirror,
            queue: Mutex::new(VecDeque::new()),
            draining: AtomicBool::new(false),
            drainers,
        }
    }

    /// Emits queued, not yet taken into a batch.
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        lock(&self.queue).len()
    }

    /// Appends `payload` to the history, which gives it the session's next
    /// seq; the epoch and that seq, once Redis has it (the epoch is not the
    /// ring's if the history continued the session under a new one: the
    /// mirror is then stale). The payload fits the ring (the caller
    /// checked). `slot` (the instance's bound on waiting emits) is held
    /// until the emit is appended or dropped. The emit is not appended
    /// after `deadline`, nor once its caller has stopped waiting; nor does
    /// the emit wait past `deadline` for its answer
    /// ([`ReplicaError::Expired`]).
    ///
    /// # Errors
    /// The history is unavailable (the event may or may not have been
    /// appended: it is not acknowledged), the deadline passed, the session
    /// is gone, or the drainer failed (a bug: the emit was dropped
    /// unanswered).
    pub(crate) async fn emit<H: History>(
        self: &Arc<Self>,
        history: &Arc<H>,
        payload: Bytes,
        deadline: Instant,
        slot: Option<OwnedSemaphorePermit>,
    ) -> Result<(u64, u64), Arc<ReplicaError>> {
        if let Some(inline) = self.append_inline(history, &payload, deadline).await {
            return inline;
        }
        let (answer, answered) = oneshot::channel();
        lock(&self.queue).push_back(Queued {
            payload,
            deadline,
            _slot: slot,
            answer,
        });
        self.start_drainer(history);
        match tokio::time::timeout_at(deadline, answered).await {
            Ok(Ok(answer)) => answer,
            // The drainer ended without answering: it panicked.
            Ok(Err(_)) => Err(Arc::new(ReplicaError::Ring(
                "the emit was dropped unanswered".into(),
            ))),
            // Still queued (it will not be appended: its answer is gone),
            // or in a batch whose append outlives it.
            Err(_) => Err(Arc::new(ReplicaError::Expired)),
        }
    }

    /// Appends `payload` alone from the caller's own task when nothing of
    /// the session waits and no drainer runs (one task hop fewer each way
    /// than through a drainer); `None` otherwise: the emit is queued. An
    /// emit whose deadline passed is answered [`ReplicaError::Expired`]
    /// and never appended.
    ///
    /// The caller holds the drainer's role meanwhile, so appends of the
    /// session stay one at a time and in order: emits that come meanwhile
    /// queue, and the role's guard starts a drainer for them when this
    /// append ends — or when the caller stops waiting, which cancels
    /// nothing but its own wait (the script call runs in a task of its
    /// own: an append that lands then is mirrored by the follower or the
    /// next catch-up).
    async fn append_inline<H: History>(
        self: &Arc<Self>,
        history: &Arc<H>,
        payload: &Bytes,
        deadline: Instant,
    ) -> Option<Result<(u64, u64), Arc<ReplicaError>>> {
        if deadline <= Instant::now() {
            return Some(Err(Arc::new(ReplicaError::Expired)));
        }
        if !lock(&self.queue).is_empty() || self.draining.swap(true, Ordering::AcqRel) {
            return None;
        }
        let _draining = Draining {
            committer: Arc::clone(self),
            history: Arc::clone(history),
        };
        let payloads = [payload.clone()];
        // A panic (a bug in an append) fails this emit alone, as it would
        // in a drainer: the caller's task goes on.
        let append = AssertUnwindSafe(self.append_batch(history.as_ref(), &payloads, deadline))
            .catch_unwind();
        Some(match tokio::time::timeout_at(deadline, append).await {
            Ok(Ok(appended)) => appended,
            Ok(Err(_)) => Err(Arc::new(ReplicaError::Ring(
                "the append panicked; the emit was not acknowledged".into(),
            ))),
            Err(_) => Err(Arc::new(ReplicaError::Expired)),
        })
    }

    /// Starts a drainer task unless one runs. A task of its own: a client
    /// that goes away must not cancel an append half done for the emits
    /// batched with its own. Tracked, so a shutdown waits for it (up to
    /// its hard stop).
    fn start_drainer<H: History>(self: &Arc<Self>, history: &Arc<H>) {
        if self.draining.swap(true, Ordering::AcqRel) {
            return;
        }
        // Outside a runtime (only while one shuts down, dropping a drainer
        // unfinished) there is nothing to run it on: the emits still queued
        // expire at their deadlines.
        match Handle::try_current() {
            Ok(runtime) => {
                let drainer = Arc::clone(self).drain(Arc::clone(history));
                drop(runtime.spawn(self.drainers.track(drainer)));
            }
            Err(_) => self.draining.store(false, Ordering::Release),
        }
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
        let _draining = Draining {
            committer: Arc::clone(&self),
            history: Arc::clone(&history),
        };
        loop {
            let batch = self.next_batch();
            if batch.is_empty() {
                return;
            }
            let payloads: Vec<Bytes> = batch.iter().map(|q| q.payload.clone()).collect();
            // Sent while any emit of the batch still waits for it: the
            // others have been answered `Expired` by their own deadlines.
            let deadline = batch
                .iter()
                .map(|queued| queued.deadline)
                .max()
                .unwrap_or_else(Instant::now);
            match self
                .append_batch(history.as_ref(), &payloads, deadline)
                .await
            {
                Ok((epoch, first)) => {
                    for (seq, queued) in (first..).zip(batch) {
                        let _ = queued.answer.send(Ok((epoch, seq)));
                    }
                }
                Err(error) => {
                    for queued in batch {
                        let _ = queued.answer.send(Err(Arc::clone(&error)));
                    }
                }
            }
        }
    }

    /// Appends one batch (the caller holds the drainer's role) and, once
    /// Redis has it, writes it into the ring when that needs no read: the
    /// epoch and the first seq it was appended at.
    async fn append_batch<H: History>(
        &self,
        history: &H,
        payloads: &[Bytes],
        deadline: Instant,
    ) -> Result<(u64, u64), Arc<ReplicaError>> {
        let ring = self.mirror.ring();
        let known = Known {
            epoch: ring.epoch(),
            published: ring.published(),
        };
        let (epoch, first) = history
            .append(self.mirror.log(), known, payloads, deadline)
            .await
            .map_err(|error| Arc::new(ReplicaError::History(error)))?;
        if epoch != known.epoch {
            // The history continues the session under a new epoch: this
            // ring is of the old one.
            if self.mirror.mark_stale() {
                tracing::warn!(
                    session = %self.mirror.id().tag(),
                    "the history continues the session under a new epoch (Redis lost events or restarted); this copy is dropped"
                );
            }
        } else if let Err(error) = self.mirror.mirror_appended(first, payloads) {
            // Acknowledged: Redis has the batch. Local readers get it now,
            // or from the follower or the next catch-up.
            tracing::debug!(session = %self.mirror.id().tag(), %error, "appended batch not mirrored yet");
        }
        Ok((epoch, first))
    }
}

/// Held by the running drainer. When the drainer ends — its queue found
/// empty, or a panic (a bug) unwinding it, which drops the batch in
/// flight unanswered — the committer no longer counts it as running, so
/// the next emit starts another; and emits already queued (one that came
/// after the drainer's last look saw it still running and relies on it)
/// get one at once.
struct Draining<H: History> {
    committer: Arc<Committer>,
    history: Arc<H>,
}

impl<H: History> Drop for Draining<H> {
    fn drop(&mut self) {
        self.committer.draining.store(false, Ordering::Release);
        if !lock(&self.committer.queue).is_empty() {
            self.committer.start_drainer(&self.history);
        }
    }
}
