//! What a stream's readers are shown, and the wake-up of its live readers
//! when that moves.
//!
//! Without a journal everything published is shown at once. With one
//! (`--data-dir`) a reader is shown a stream's messages, its creation and
//! its close only once they are durable: a power cut can take back nothing
//! a reader was told. The marks move when the journal's committer finds a
//! change durable ([`Shown::on_durable`], run by the thread that wrote
//! the batch, the committer or a request inline, before the change's
//! writer is answered), so they never depend on the
//! writer still waiting: a client that went away mid-append leaves its
//! message shown all the same, and readers woken.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// The marks, shared by the stream and its journal's pending changes.
/// Invariants: each mark only moves forward (`durable` up, the flags from
/// `false` to `true`), and every move that shows readers something new
/// bumps `version` and then notifies `changed`.
#[derive(Debug)]
pub(crate) struct Shown {
    /// Bumped on every append, closure and deletion (and every mark that
    /// shows one), before [`Self::changed`] is notified.
    version: AtomicU64,
    /// Live readers wait on it (`Changes`): a `Notify` of a few words
    /// where a `watch` channel took 400 bytes per stream, idle or not.
    changed: tokio::sync::Notify,
    /// The last seq whose journal write is durable: readers are served
    /// messages up to it, never one a power cut could still take back
    /// (`u64::MAX` without a journal: everything published is shown).
    durable: AtomicU64,
    /// Its creation is durable (readers wait for it); `true` without a
    /// journal.
    creation_durable: AtomicBool,
    /// Its close is durable, and readers are told it is closed only then;
    /// `true` without a journal.
    closure_durable: AtomicBool,
}

impl Shown {
    /// The marks of a new stream: with a journal nothing is durable yet
    /// but what precedes `ring_start` (nothing of it is served); without
    /// one, everything.
    pub(crate) fn new(journaled: bool, ring_start: u64) -> Self {
        Self {
            version: AtomicU64::new(0),
            changed: tokio::sync::Notify::new(),
            durable: AtomicU64::new(if journaled { ring_start } else { u64::MAX }),
            creation_durable: AtomicBool::new(!journaled),
            closure_durable: AtomicBool::new(!journaled),
        }
    }

    /// The current version: a reader notes it before it reads.
    pub(crate) fn version(&self) -> u64 {
        self.version.load(Ordering::SeqCst)
    }

    /// The signal live readers wait on, after noting [`Self::version`].
    pub(crate) fn changed(&self) -> &tokio::sync::Notify {
        &self.changed
    }

    /// Wakes live readers: the version first, then the waiters, so a
    /// reader that registered after the notification sees the new version.
    pub(crate) fn wake(&self) {
        self.version.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    /// The last seq readers may be served (see [`Self::durable`]).
    pub(crate) fn durable_seq(&self) -> u64 {
        self.durable.load(Ordering::Acquire)
    }

    /// Whether the stream's creation is durable.
    pub(crate) fn creation_durable(&self) -> bool {
        self.creation_durable.load(Ordering::Acquire)
    }

    /// Whether the stream's close (if any) is durable.
    pub(crate) fn closure_durable(&self) -> bool {
        self.closure_durable.load(Ordering::Acquire)
    }

    /// A change of the stream queued when its last seq was `seq` is
    /// durable (`closes`: it closed the stream): every change of a stream
    /// is queued after its creation, so that is durable too. Its messages
    /// are shown before its close (a reader told the stream is closed
    /// before it sees the last message would stop short of it), then live
    /// readers are woken, once.
    fn change_durable(&self, seq: u64, closes: bool) {
        if !self.creation_durable.load(Ordering::Acquire) {
            self.creation_durable.store(true, Ordering::Release);
        }
        let shown = self.durable.fetch_max(seq, Ordering::AcqRel) < seq;
        // A close without a body does not move the durable seq: it wakes
        // the readers itself.
        let closed = closes && !self.closure_durable.swap(true, Ordering::AcqRel);
        if shown || closed {
            self.wake();
        }
    }

    /// What the committer runs once such a change is durable.
    pub(crate) fn on_durable(self: &Arc<Self>, seq: u64, closes: bool) -> impl FnOnce() + Send {
        let shown = Arc::clone(self);
        move || shown.change_durable(seq, closes)
    }

    /// Everything the stream holds at start-up is durable (`published`
    /// its last seq).
    pub(crate) fn restored(&self, published: u64) {
        self.durable.store(published, Ordering::Release);
        self.creation_durable.store(true, Ordering::Release);
        self.closure_durable.store(true, Ordering::Release);
    }
}
