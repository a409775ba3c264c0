//! A log's new last seq announced within this process: how the in-memory
//! fake and the disk history tell their followers of an append (the Redis
//! history hears other instances' appends on pub/sub instead, `notify`).

use crate::{Change, Follower, LogId};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use tokio::sync::watch;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Each followed log's last announced seq.
#[derive(Default)]
pub(crate) struct Announcer {
    followed: Mutex<HashMap<LogId, watch::Sender<u64>>>,
}

impl Announcer {
    /// A follower of log `id`, whose last seq is `last` now.
    pub(crate) fn follow(&self, id: &LogId, last: u64) -> LocalFollower {
        let mut followed = lock(&self.followed);
        let sender = followed
            .entry(*id)
            .or_insert_with(|| watch::channel(last).0);
        LocalFollower {
            receiver: sender.subscribe(),
        }
    }

    /// Log `id`'s last seq is now `last` (lower than before when the log
    /// continued under a new epoch: announced all the same).
    pub(crate) fn announce(&self, id: &LogId, last: u64) {
        if let Some(sender) = lock(&self.followed).get(id) {
            sender.send_replace(last);
        }
    }

    /// Forgets log `id` (deleted): its followers hear nothing more.
    pub(crate) fn forget(&self, id: &LogId) {
        lock(&self.followed).remove(id);
    }

    /// Forgets the logs nobody follows any more.
    pub(crate) fn prune(&self) {
        lock(&self.followed).retain(|_, sender| sender.receiver_count() > 0);
    }
}

/// A follower of one log of a history in this process.
pub struct LocalFollower {
    receiver: watch::Receiver<u64>,
}

impl Follower for LocalFollower {
    async fn changed(&mut self) -> Option<Change> {
        self.receiver.changed().await.ok()?;
        Some(Change::Published(*self.receiver.borrow_and_update()))
    }
}
