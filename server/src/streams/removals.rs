//! With `--data-dir`: that no reader is told a stream is gone (a `404`, a
//! soft deletion's `410`, a live read ended) before its removal is durable.
//! A deletion or an expiry takes the stream out of the registry at once and
//! writes its removal to the journal after; a crash in between brings the
//! stream back, after readers were told it was gone and stopped reading it.
//!
//! The registry counts the removals it queues ([`Removals::begin`], under
//! its structure lock, before any reader can see the stream go) and how
//! many are known durable: the journal's committer raises the mark once a
//! removal's write is durable (whether or not anyone awaits it), and so
//! does a barrier queued after it. The journal is one ordered group
//! commit, so a removal durable makes every one queued before it durable,
//! and the mark is a maximum. A reader about to say "gone" waits, while
//! the mark is behind, for a barrier queued after the removals it counted.

use crate::streams::journal::Journal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The two marks. Invariant: `durable <= begun`; every removal numbered
/// `n <= durable` is durable in the journal.
#[derive(Debug, Default)]
pub(crate) struct Removals {
    /// Removals begun: each takes the next number before its effects show.
    begun: AtomicU64,
    /// The highest number known durable.
    durable: AtomicU64,
}

impl Removals {
    /// Numbers a removal about to be decided (call it under the registry's
    /// structure lock, before its effects, then queue its writes under the
    /// same lock). A removal that ends up writing nothing is simply never
    /// marked durable: a later one, or a reader's barrier, passes it.
    pub(crate) fn begin(&self) -> u64 {
        self.begun.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Removal `number` is durable (its write, or a barrier queued after
    /// it): so is every removal numbered before it.
    fn durable(&self, number: u64) {
        self.durable.fetch_max(number, Ordering::AcqRel);
    }

    /// What the committer runs once removal `number`'s write (or a barrier
    /// queued after it) is durable.
    pub(crate) fn on_durable(self: &Arc<Self>, number: u64) -> impl FnOnce() + Send {
        let removals = Arc::clone(self);
        move || removals.durable(number)
    }

    /// Waits until every removal begun so far is durable: for a barrier in
    /// `journal`, queued under `lock` (the lock the removals queue their
    /// writes under, so that it comes after them). Returns at once while
    /// nothing is behind; on a journal that failed it returns too (the
    /// removal may not be durable, and will not be until a restart).
    pub(crate) async fn settled<G>(
        self: &Arc<Self>,
        journal: Option<&Journal>,
        lock: impl FnOnce() -> G,
    ) {
        let begun = self.begun.load(Ordering::Acquire);
        if self.durable.load(Ordering::Acquire) >= begun {
            return;
        }
        let Some(journal) = journal else {
            return;
        };
        let queued = {
            let _lock = lock();
            journal.submit_then(Vec::new(), self.on_durable(begun))
        };
        if let Ok(wait) = queued {
            let _ = wait.durable().await;
        }
    }
}
