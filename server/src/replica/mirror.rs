//! The one writer of a session's ring on this instance.
//!
//! Without a shared history the ring *is* the session's history and the
//! mirror emits into it. With one, the ring is a copy of a prefix-trimmed
//! run of the Redis Stream: every write into it — a batch this instance
//! appended, a catch-up read, a follow step after another instance
//! appended — holds the writer lock and must be the ring's
//! `published + 1`, so the ring's seqs always equal the history's.

use super::ReplicaError;
use crate::history::notify::{Change, Followed};
use crate::history::{History, HistoryError, READ_BYTES};
use crate::ids::SessionId;
use bytes::Bytes;
use gapless::{EmitError, Ring, SingleWriter, Writer};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::watch;

/// How often a followed mirror looks at the history even without an
/// announcement (announcements are at most once: one lost while the
/// notification connection was down is found here at the latest).
const FOLLOW_POLL: Duration = Duration::from_secs(5);

/// The single writer of one session's ring.
pub(crate) struct Mirror {
    /// The session.
    id: SessionId,
    /// The ring `writer` writes (the same `Arc` as the session's), for
    /// reads without the lock: its seqs are the history's, up to its
    /// watermark.
    ring: Arc<Ring<SingleWriter>>,
    /// The ring's only writer. Every write holds this lock; with a shared
    /// history, a catch-up holds it across its reads, so writes stay in
    /// seq order.
    writer: tokio::sync::Mutex<Writer>,
    /// Whether the follow task runs (at most one, for the mirror's life).
    following: AtomicBool,
    /// Set once the history continues the session under another epoch
    /// than the ring's: nothing is mirrored any more, every catch-up is
    /// [`ReplicaError::Stale`].
    stale: AtomicBool,
}

impl Mirror {
    /// The writer of session `id`'s ring, through `writer`.
    pub(crate) fn new(id: SessionId, writer: Writer) -> Self {
        Self {
            id,
            ring: Arc::clone(writer.ring()),
            writer: tokio::sync::Mutex::new(writer),
            following: AtomicBool::new(false),
            stale: AtomicBool::new(false),
        }
    }

    /// The ring this mirror writes.
    pub(crate) fn ring(&self) -> &Arc<Ring<SingleWriter>> {
        &self.ring
    }

    /// The session this mirror belongs to.
    pub(crate) fn id(&self) -> &SessionId {
        &self.id
    }

    /// Emits `payload` as the ring's next seq: the ring is the session's
    /// whole history (no shared history).
    ///
    /// # Errors
    /// [`EmitError::TooLarge`]: nothing was emitted.
    pub(crate) async fn emit(&self, payload: &[u8]) -> Result<u64, EmitError> {
        self.writer.lock().await.emit(payload)
    }

    /// Marks the mirror stale: the history continues the session under
    /// another epoch. `true` the first time.
    pub(crate) fn mark_stale(&self) -> bool {
        !self.stale.swap(true, Ordering::AcqRel)
    }

    /// Writes a batch this instance appended (seqs `first ..`) into the
    /// ring when that needs no read: the ring ends right before it and no
    /// catch-up is running. Otherwise (another instance appended in
    /// between, or the follower is reading) the batch is left to the
    /// follower and to the catch-up before the next check of a cursor, so
    /// the committer never waits for a read before its next append.
    pub(crate) fn mirror_appended(
        &self,
        first: u64,
        payloads: &[Bytes],
    ) -> Result<(), ReplicaError> {
        let Ok(mut writer) = self.writer.try_lock() else {
            return Ok(());
        };
        if self.ring.published() + 1 != first {
            return Ok(());
        }
        let events: Vec<(u64, Bytes)> = (first..).zip(payloads.iter().cloned()).collect();
        write_locked(&mut writer, &events)
    }

    /// Reads and mirrors the history until the ring reaches its newest
    /// event; the cursors the history holds (`acked`, `sent`).
    async fn catch_up_locked<H: History>(
        &self,
        writer: &mut Writer,
        history: &H,
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
            if snapshot.published <= after {
                return Ok((snapshot.acked, snapshot.sent));
            }
            if snapshot.events.is_empty() {
                return Err(ReplicaError::Stale {
                    needed: after + 1,
                    found: None,
                });
            }
            write_locked(writer, &snapshot.events)?;
        }
    }

    /// Brings the ring up to the history's newest event and returns the
    /// cursors the history holds (`acked`, `sent`), for the session's
    /// checks on this instance.
    ///
    /// # Errors
    /// The history is unavailable or the session gone; the mirror is stale.
    pub(crate) async fn refresh<H: History>(
        &self,
        history: &H,
    ) -> Result<(u64, u64), ReplicaError> {
        let mut writer = self.writer.lock().await;
        self.catch_up_locked(&mut writer, history).await
    }

    /// Starts the follow task unless it runs: whenever `announced` says the
    /// session grew past the ring (another instance appended) or that
    /// announcements may have been missed, and at least every
    /// [`FOLLOW_POLL`], it brings the ring up to the history. It ends with
    /// the mirror, or calls `on_stale` and ends when the mirror can no
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
        let mirror: Weak<Self> = Arc::downgrade(self);
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
                let Some(this) = mirror.upgrade() else {
                    return;
                };
                match woke {
                    Announced::Seq(last) if last <= this.ring.published() => continue,
                    Announced::Ended => ended = true,
                    Announced::Seq(_) | Announced::Missed => {}
                }
                let caught_up = this.refresh(history.as_ref()).await;
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

/// Emits `events` (seq order, as read from the history) through `writer`:
/// those at or below the watermark are already there; the rest must start
/// at `published + 1` without a hole.
fn write_locked(writer: &mut Writer, events: &[(u64, Bytes)]) -> Result<(), ReplicaError> {
    for (seq, payload) in events {
        let needed = writer.ring().published() + 1;
        if *seq < needed {
            continue;
        }
        if *seq > needed {
            return Err(ReplicaError::Stale {
                needed,
                found: Some(*seq),
            });
        }
        match writer.emit(payload) {
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
