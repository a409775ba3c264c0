//! What a history in this process keeps with an expiry and without a
//! record: a log's tokens ([`History::put_token`](crate::History::put_token))
//! and the admission sets ([`History::admit`](crate::History::admit)), with
//! the Redis scripts' rules, each expiry on tokio's clock (a test with
//! paused time moves it with `tokio::time::advance`). The in-memory fake
//! keeps them here, and so does the disk history: a token lives seconds (an
//! upgrade ticket) and an admission set is rebuilt by the accesses that
//! find their place lost, so neither is worth a write to disk.

use crate::keys::admission_ttl;
use crate::{Admission, LogId};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Tokens by log and name: each value and when it expires.
#[derive(Default)]
pub(crate) struct Tokens {
    tokens: Mutex<HashMap<(LogId, String), (String, Instant)>>,
}

impl Tokens {
    /// Keeps `value` as log `id`'s token `name` for `ttl`, replacing one.
    pub(crate) fn put(&self, id: &LogId, name: &str, value: &str, ttl: Duration) {
        lock(&self.tokens).insert(
            (*id, name.to_owned()),
            (value.to_owned(), Instant::now() + ttl),
        );
    }

    /// Takes the token (once); `None` if unknown, taken or expired.
    pub(crate) fn take(&self, id: &LogId, name: &str) -> Option<String> {
        lock(&self.tokens)
            .remove(&(*id, name.to_owned()))
            .filter(|(_, expires)| *expires > Instant::now())
            .map(|(value, _)| value)
    }

    /// Whether the token is there, not taken and not expired.
    pub(crate) fn has(&self, id: &LogId, name: &str) -> bool {
        lock(&self.tokens)
            .get(&(*id, name.to_owned()))
            .is_some_and(|(_, expires)| *expires > Instant::now())
    }

    /// Drops the tokens that have expired.
    pub(crate) fn sweep(&self) {
        let now = Instant::now();
        lock(&self.tokens).retain(|_, (_, expires)| *expires > now);
    }
}

/// Admission sets by name: each member's expiry.
#[derive(Default)]
pub(crate) struct AdmissionSets {
    sets: Mutex<HashMap<String, HashMap<String, Instant>>>,
}

impl AdmissionSets {
    /// Set `set`'s live members, as the script leaves them: those whose
    /// expiry is at or before now removed (an emptied set is gone).
    fn live<'a>(
        sets: &'a mut HashMap<String, HashMap<String, Instant>>,
        set: &str,
    ) -> Option<&'a mut HashMap<String, Instant>> {
        let now = Instant::now();
        let members = sets.get_mut(set)?;
        members.retain(|_, expiry| *expiry > now);
        if members.is_empty() {
            sets.remove(set);
            return None;
        }
        sets.get_mut(set)
    }

    /// [`History::admit`](crate::History::admit).
    pub(crate) fn admit(&self, set: &str, member: &str, limit: u64, ttl: Duration) -> Admission {
        let mut sets = lock(&self.sets);
        let expiry = Instant::now() + Duration::from_millis(admission_ttl(ttl));
        let count = match Self::live(&mut sets, set) {
            Some(members) => {
                if let Some(held) = members.get_mut(member) {
                    *held = expiry;
                    return Admission::Admitted { added: false };
                }
                members.len() as u64
            }
            None => 0,
        };
        if count >= limit {
            return Admission::Full { count };
        }
        sets.entry(set.to_owned())
            .or_default()
            .insert(member.to_owned(), expiry);
        Admission::Admitted { added: true }
    }

    /// [`History::renew`](crate::History::renew).
    pub(crate) fn renew(&self, set: &str, member: &str, ttl: Duration) -> bool {
        let mut sets = lock(&self.sets);
        let expiry = Instant::now() + Duration::from_millis(admission_ttl(ttl));
        Self::live(&mut sets, set)
            .and_then(|members| members.get_mut(member))
            .map(|held| *held = expiry)
            .is_some()
    }

    /// [`History::release`](crate::History::release).
    pub(crate) fn release(&self, set: &str, member: &str) -> bool {
        let mut sets = lock(&self.sets);
        let Some(members) = sets.get_mut(set) else {
            return false;
        };
        let released = members.remove(member).is_some();
        if members.is_empty() {
            sets.remove(set);
        }
        released
    }

    /// [`History::count`](crate::History::count).
    pub(crate) fn count(&self, set: &str) -> u64 {
        let mut sets = lock(&self.sets);
        Self::live(&mut sets, set).map_or(0, |members| members.len() as u64)
    }
}
