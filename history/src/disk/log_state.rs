//! One log of the disk history: its keys in the store, its state in
//! memory, and what the committer runs once an append of it is durable.

use super::commit::{OnDurable, Op, Part};
use super::lock;
use super::record::LogRecord;
use crate::announce::Announcer;
use crate::LogId;
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

/// One log in memory: its record as last written, and what readers see.
pub(super) struct LogState {
    pub(super) record: LogRecord,
    /// The last seq whose write is durable: readers see events up to it.
    pub(super) visible: u64,
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

/// What the committer runs once an append of `log` (`id`) up to `last`
/// under `epoch` is durable: readers see it, its followers are told. Run by
/// the committer, not by the appender (who may have gone away, or passed
/// its deadline), so a durable event never waits for the next append.
pub(super) fn show_when_durable(
    log: &Log,
    followed: &Arc<Announcer>,
    id: LogId,
    epoch: u64,
    last: u64,
) -> OnDurable {
    let (log, followed) = (Arc::clone(log), Arc::clone(followed));
    Box::new(move || {
        let visible = {
            let mut state = lock(&log);
            if state.record.epoch == epoch {
                state.visible = state.visible.max(last);
            }
            state.visible
        };
        followed.announce(&id, visible);
    })
}
