//! The one writer of a session's ring on this instance.
//!
//! Without a shared history the ring *is* the session's history and the
//! mirror emits into it. With one, the ring is a copy of a prefix-trimmed
//! run of the Redis Stream: every write into it — a batch this instance
//! appended, a catch-up read, a follow step after another instance
//! appended — holds the writer lock and must be the ring's
//! `published + 1`, so the ring's seqs always equal the history's.
//!
//! A catch-up before a check of a cursor is single-flight: the refreshers
//! of one session share the rounds of reads ([`Mirror::refresh`]), and
//! none waits past the history's deadline.

use super::ReplicaError;
use crate::history::{Change, Follower, History, HistoryError, LogId, Meta, READ_BYTES};
use crate::ids::{log_of, SessionId};
use bytes::Bytes;
use gapless::{Coverage, EmitError, Ring, SingleWriter, Writer};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// How often a followed mirror looks at the history even without an
/// announcement (announcements are at most once: one lost while the
/// notification connection was down is found here at the latest).
const FOLLOW_POLL: Duration = Duration::from_secs(5);

/// The single writer of one session's ring.
pub(crate) struct Mirror {
    /// The session.
    id: SessionId,
    /// The session's log in the shared history.
    log: LogId,
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
    /// Catch-up rounds begun: each is numbered (from 1), under the writer
    /// lock, right before its first read.
    rounds_begun: AtomicU64,
    /// The latest round that ran to its end, for the refreshers waiting
    /// for one (rounds run one at a time, under the writer lock, so the
    /// latest is also the highest numbered).
    ended: watch::Sender<Option<Round>>,
}

/// A catch-up round that ran to its end.
#[derive(Clone, Debug)]
struct Round {
    /// Its number (see [`Mirror::rounds_begun`]).
    number: u64,
    /// What it found: the session's meta in the history once the ring
    /// held everything the history held when the round's first read
    /// began, or why it could not.
    result: Result<Meta, ReplicaError>,
}

impl Mirror {
    /// The writer of session `id`'s ring, through `writer`.
    pub(crate) fn new(id: SessionId, writer: Writer) -> Self {
        Self {
            id,
            log: log_of(&id),
            ring: Arc::clone(writer.ring()),
            writer: tokio::sync::Mutex::new(writer),
            following: AtomicBool::new(false),
            stale: AtomicBool::new(false),
            rounds_begun: AtomicU64::new(0),
            ended: watch::channel(None).0,
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

    /// The session's log in the shared history.
    pub(crate) fn log(&self) -> &LogId {
        &self.log
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
    /// event; the session's meta as the last read found it.
    async fn catch_up_locked<H: History>(
        &self,
        writer: &mut Writer,
        history: &H,
    ) -> Result<Meta, ReplicaError> {
        loop {
            let after = self.ring.published();
            if self.stale.load(Ordering::Acquire) {
                return Err(ReplicaError::Stale {
                    needed: after + 1,
                    found: None,
                });
            }
            let snapshot = history
                .after(&self.log, after, READ_BYTES)
                .await?
                .ok_or(ReplicaError::History(HistoryError::Gone))?;
            if snapshot.epoch != self.ring.epoch() {
                return Err(ReplicaError::Stale {
                    needed: after + 1,
                    found: None,
                });
            }
            // The ring's end is the cursor the history must still cover.
            match Coverage::of_retained(after, snapshot.first_retained, snapshot.published) {
                // Nothing after the ring (or the ring is past a history
                // that lost events: the next append moves the epoch).
                Coverage::Covered { first, last } if first > last => {
                    return Ok(snapshot.meta);
                }
                Coverage::Ahead { .. } => return Ok(snapshot.meta),
                Coverage::Gap(gap) => {
                    return Err(ReplicaError::Stale {
                        needed: after + 1,
                        found: (gap.first_retained <= gap.published).then_some(gap.first_retained),
                    });
                }
                Coverage::Covered { .. } if snapshot.events.is_empty() => {
                    return Err(ReplicaError::Stale {
                        needed: after + 1,
                        found: None,
                    });
                }
                Coverage::Covered { .. } => write_locked(writer, &snapshot.events)?,
            }
        }
    }

    /// Brings the ring up to the history's newest event and returns the
    /// session's meta as the history holds it (its cursors, for the
    /// session's checks on this instance).
    ///
    /// Single-flight: concurrent refreshers share rounds of catch-up, one
    /// running at a time under the writer lock, instead of each queueing
    /// for a round of its own. A refresher is answered by the first round
    /// that *began* after it arrived (that round's first read saw at least
    /// what the history held at its arrival, and the round ran until the
    /// ring held all of it) — not by a round already reading when it came,
    /// which may have read the history before an append the caller relies
    /// on. It joins a round that ended in a failure after its arrival too
    /// (a Redis that is down fails every round alike). Whoever finds the
    /// lock free when no such round has ended runs the next round itself,
    /// so a refresher whose caller went away leaves nothing hanging.
    ///
    /// No refresher waits past the history's deadline
    /// ([`HistoryConfig::timeout`](crate::history::HistoryConfig)) from its
    /// arrival: it is then answered [`HistoryError::Unavailable`] (a `503`),
    /// as a round cut short by that deadline answers its waiters.
    ///
    /// # Errors
    /// The history is unavailable (or no catch-up ended in time) or the
    /// session gone; the mirror is stale.
    pub(crate) async fn refresh<H: History>(&self, history: &H) -> Result<Meta, ReplicaError> {
        let timeout = history.config().timeout;
        let deadline = Instant::now() + timeout;
        let late = || {
            ReplicaError::History(HistoryError::Unavailable(format!(
                "no catch-up of the session's copy within {timeout:?}"
            )))
        };
        let mut ended = self.ended.subscribe();
        // Rounds numbered above `arrived` begin after this point; a round
        // numbered above `ended_before` ended after it.
        let arrived = self.rounds_begun.load(Ordering::Acquire);
        let ended_before = ended.borrow().as_ref().map_or(0, |round| round.number);
        let answers = |ended: &watch::Receiver<Option<Round>>| {
            let round = ended.borrow();
            let round = round.as_ref()?;
            (round.number > arrived || (round.number > ended_before && round.result.is_err()))
                .then(|| round.result.clone())
        };
        loop {
            if let Some(result) = answers(&ended) {
                return result;
            }
            tokio::select! {
                biased;
                // The sender lives as long as `self`: never an error here.
                Ok(()) = ended.changed() => {}
                mut writer = self.writer.lock() => {
                    if let Some(result) = answers(&ended) {
                        return result;
                    }
                    let number = self.rounds_begun.fetch_add(1, Ordering::AcqRel) + 1;
                    let caught_up = self.catch_up_locked(&mut writer, history);
                    let result = tokio::time::timeout_at(deadline, caught_up)
                        .await
                        .unwrap_or_else(|_| Err(late()));
                    self.ended.send_replace(Some(Round {
                        number,
                        result: result.clone(),
                    }));
                    return result;
                }
                () = tokio::time::sleep_until(deadline) => return Err(late()),
            }
        }
    }

    /// Starts the follow task unless it runs: whenever `follower` says the
    /// session grew past the ring (another instance appended) or that
    /// announcements may have been missed, and at least every
    /// [`FOLLOW_POLL`], it brings the ring up to the history. It ends with
    /// the mirror, or calls `on_stale` and ends when the mirror can no
    /// longer catch up.
    pub(crate) fn follow<H: History, F: Follower>(
        self: &Arc<Self>,
        history: &Arc<H>,
        mut follower: F,
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
                    tokio::time::timeout(FOLLOW_POLL, follower.changed())
                        .await
                        .map_or(Announced::Missed, Announced::from)
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
enum Announced {
    /// The session now ends at this seq (or later).
    Seq(u64),
    /// Announcements may have been missed: read the history.
    Missed,
    /// No more announcements will come (the instance is stopping): poll.
    Ended,
}

impl From<Option<Change>> for Announced {
    /// A follower's report: a resync (the subscription was re-established)
    /// is [`Announced::Missed`], the end of announcements
    /// [`Announced::Ended`].
    fn from(change: Option<Change>) -> Self {
        match change {
            None => Self::Ended,
            Some(Change::Resync { .. }) => Self::Missed,
            Some(Change::Published(last)) => Self::Seq(last),
        }
    }
}
