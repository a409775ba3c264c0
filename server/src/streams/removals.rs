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
    pub(crate) fn durable(&self, number: u64) {
        self.durable.fetch_max(number, Ordering::AcqRel);
    }

    /// Waits until every removal begun so far is durable: for a barrier in
    /// `journal`, queued by `queue` (which must take the lock the removals
    /// queue their writes under, so that it comes after them, and mark
    /// removal `begun`, its second argument, durable once it is). Returns
    /// at once while nothing is behind; on a journal that failed it returns
    /// too (the removal may not be durable, and will not be until a
    /// restart).
    pub(crate) async fn settled(
        &self,
        journal: Option<&Journal>,
        queue: impl FnOnce(&Journal, u64) -> Option<gapless_history::JournalWait>,
    ) {
        let begun = self.begun.load(Ordering::Acquire);
        if self.durable.load(Ordering::Acquire) >= begun {
            return;
        }
        if let Some(wait) = journal.and_then(|journal| queue(journal, begun)) {
            let _ = wait.durable().await;
        }
    }
}
