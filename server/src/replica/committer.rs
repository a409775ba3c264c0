//! A session's emits on this instance on their way into the shared
//! history: queued, appended in batches (Redis gives them the session's
//! next seqs), answered, then handed to the session's [`Mirror`].

use super::mirror::Mirror;
use super::ReplicaError;
use crate::history::{History, Known};
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
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
    /// Whether a drainer task runs (at most one).
    draining: AtomicBool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Committer {
    /// The committer of `mirror`'s session.
    pub(crate) fn new(mirror: Arc<Mirror>) -> Self {
        Self {
            mirror,
            queue: Mutex::new(VecDeque::new()),
            draining: AtomicBool::new(false),
        }
    }

    /// Appends `payload` to the history, which gives it the session's next
    /// seq; the epoch and that seq, once Redis has it (the epoch is not the
    /// ring's if the history continued the session under a new one: the
    /// mirror is then stale). The payload fits the ring (the caller
    /// checked). `slot` (the instance's bound on waiting emits) is held
    /// until the emit is appended or dropped. The emit is not appended
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
        let id = *self.mirror.id();
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
            let ring = self.mirror.ring();
            let known = Known {
                epoch: ring.epoch(),
                published: ring.published(),
            };
            match history.append(&id, known, &payloads).await {
                Ok((epoch, first)) => {
                    for (seq, queued) in (first..).zip(batch) {
                        let _ = queued.answer.send(Ok((epoch, seq)));
                    }
                    if epoch != known.epoch {
                        // The history continues the session under a new
                        // epoch: this ring is of the old one.
                        if self.mirror.mark_stale() {
                            tracing::warn!(
                                session = %id.tag(),
                                "the history continues the session under a new epoch (Redis lost events or restarted); this copy is dropped"
                            );
                        }
                        continue;
                    }
                    // Acknowledged: Redis has the batch. Local readers get
                    // it now, or from the follower or the next catch-up.
                    if let Err(error) = self.mirror.mirror_appended(first, &payloads) {
                        tracing::debug!(session = %id.tag(), %error, "appended batch not mirrored yet");
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
}
