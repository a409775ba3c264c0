//! One log of the disk history: its keys in the store, its state in
//! memory, and what the committer runs once an append of it is durable.

use super::commit::{OnDurable, Op, Part};
use super::lock;
use super::record::LogRecord;
use crate::announce::Announcer;
use crate::{HistoryError, LogId};
use bytes::Bytes;
use fjall::Slice;
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

/// The key of event `seq` of log `id`.
pub(super) fn event_key(id: &LogId, seq: u64) -> [u8; 24] {
    let mut key = [0; 24];
    key[..16].copy_from_slice(&id.to_bytes());
    key[16..].copy_from_slice(&seq.to_be_bytes());
    key
}

/// Writes event `seq` of log `id`.
pub(super) fn put_event(ops: &mut Vec<Op>, id: &LogId, seq: u64, payload: &Bytes) {
    ops.push(Op::Insert(
        Part::Events,
        Slice::from(&event_key(id, seq)[..]),
        Slice::from(payload.clone()),
    ));
}

/// Writes log `id`'s record.
pub(super) fn put_record(ops: &mut Vec<Op>, id: &LogId, record: &LogRecord) {
    ops.push(Op::Insert(
        Part::Logs,
        Slice::from(&id.to_bytes()[..]),
        Slice::from(record.encode()),
    ));
}

/// A log's last durable seq, and the epoch it counts in: readers see
/// events up to it. Behind a lock of its own, never held across I/O (the
/// log's is, around the store's reads): the thread that writes the
/// batch (the committer, or a request inline) moves it.
#[derive(Debug)]
pub(super) struct Visible {
    epoch: u64,
    seq: u64,
    /// The log was removed: its appends' [`OnDurable`]s still to run tell
    /// nobody (a log made again under its id has followers of its own).
    removed: bool,
}

/// One log in memory: its record as last written, and what readers see.
pub(super) struct LogState {
    pub(super) record: LogRecord,
    /// What readers see of it (shared with its appends' [`OnDurable`]s).
    visible: Arc<Mutex<Visible>>,
    /// When the log expires if nothing renews it.
    pub(super) expires: Instant,
    /// The log may have lost acknowledged events (a restart after a power
    /// cut with `--fsync never`): its next append continues it under a
    /// new epoch.
    pub(super) lossy: bool,
    /// Removed (deleted or expired): a caller that found it just before
    /// answers as if it were gone.
    pub(super) removed: bool,
}

pub(super) type Log = Arc<Mutex<LogState>>;

impl LogState {
    /// A log holding `record`, its events up to `visible` durable.
    pub(super) fn new(record: LogRecord, visible: u64, expires: Instant, lossy: bool) -> Self {
        Self {
            visible: Arc::new(Mutex::new(Visible {
                epoch: record.epoch,
                seq: visible,
                removed: false,
            })),
            record,
            expires,
            lossy,
            removed: false,
        }
    }

    /// The last seq readers see.
    pub(super) fn visible(&self) -> u64 {
        lock(&self.visible).seq
    }

    /// Queues an append of this log up to `last` under `epoch` through
    /// `submit`, given what the committer runs once it is durable
    /// ([`Self::show_when_durable`]); when `renumber`, the log continues
    /// under `epoch` with nothing of it visible yet. [`Visible`]'s lock is
    /// held throughout: a durable answer of the old epoch cannot land
    /// between the renumbering and its undo if `submit` fails, and this
    /// append's own answer (on the thread that writes the batch) waits
    /// for it.
    pub(super) fn queue_append<T>(
        &self,
        followed: &Arc<Announcer>,
        id: LogId,
        (epoch, last): (u64, u64),
        renumber: bool,
        submit: impl FnOnce(OnDurable) -> Result<T, HistoryError>,
    ) -> Result<T, HistoryError> {
        let shown = self.show_when_durable(followed, id, epoch, last);
        let mut visible = lock(&self.visible);
        let before = renumber.then(|| {
            std::mem::replace(
                &mut *visible,
                Visible {
                    epoch,
                    seq: 0,
                    removed: false,
                },
            )
        });
        let queued = submit(shown);
        if let (Err(_), Some(before)) = (&queued, before) {
            *visible = before;
        }
        queued
    }

    /// Marks the log removed (deleted or expired): a caller that found it
    /// just before answers as if it were gone, and its appends still
    /// queued announce nothing once durable.
    pub(super) fn remove(&mut self) {
        self.removed = true;
        lock(&self.visible).removed = true;
    }

    /// What the committer runs once an append of this log (`id`) up to
    /// `last` under `epoch` is durable: readers see it, its followers are
    /// told. Run by the batch's writer, not by the appender (who may have gone
    /// away, or passed its deadline), so a durable event never waits for
    /// the next append; it takes only [`Visible`]'s lock.
    fn show_when_durable(
        &self,
        followed: &Arc<Announcer>,
        id: LogId,
        epoch: u64,
        last: u64,
    ) -> OnDurable {
        let (visible, followed) = (Arc::clone(&self.visible), Arc::clone(followed));
        Box::new(move || {
            // Announced under the lock: a removal marks it removed under
            // it too, so no log made again under the id hears this one.
            let mut visible = lock(&visible);
            if visible.removed {
                return;
            }
            if visible.epoch == epoch {
                visible.seq = visible.seq.max(last);
            }
            followed.announce(&id, visible.seq);
        })
    }
}
