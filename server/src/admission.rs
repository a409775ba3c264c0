//! What a session or a connection holds against the server's limits, as
//! guards that give it back when dropped: a share of a bounded total
//! ([`Bounded`]: sessions, ring memory, connections) and a slot of one
//! client's allowance ([`PerClient`]). A request that would go past a limit
//! takes nothing: every check is made before anything is held, and a guard
//! taken by a check that later fails is dropped on the way out.

use crate::client_addr::ClientKey;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// A total that may not go past its limit (live sessions, bytes of ring).
#[derive(Debug)]
pub(crate) struct Bounded {
    /// Called as each [`Held`] is given back, right before it is: tests
    /// watch the order in which guards give back.
    #[cfg(test)]
    on_release: ReleaseHook,
    /// The most that may be held at once.
    limit: u64,
    /// What the live [`Held`] guards hold together; never above `limit`
    /// (a take that would pass it is undone before anyone can see it pass
    /// for long, and fails).
    held: AtomicU64,
}

impl Bounded {
    pub(crate) fn new(limit: u64) -> Arc<Self> {
        Arc::new(Self {
            #[cfg(test)]
            on_release: ReleaseHook::default(),
            limit,
            held: AtomicU64::new(0),
        })
    }

    /// Calls `hook` as each share is given back, before it is.
    #[cfg(test)]
    pub(crate) fn on_release(&self, hook: impl Fn() + Send + 'static) {
        *self
            .on_release
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Box::new(hook));
    }

    /// Takes `amount`, or nothing if that would pass the limit.
    pub(crate) fn take(self: &Arc<Self>, amount: u64) -> Option<Held> {
        let taken = self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(amount)
                    .filter(|&total| total <= self.limit)
            });
        taken.ok().map(|_| Held {
            from: Arc::clone(self),
            amount,
        })
    }

    /// What is held now.
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Acquire)
    }

    /// The limit.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }
}

/// A share of a [`Bounded`] total, given back on drop.
#[derive(Debug)]
pub(crate) struct Held {
    from: Arc<Bounded>,
    amount: u64,
}

impl Drop for Held {
    fn drop(&mut self) {
        #[cfg(test)]
        if let Some(hook) = &*self
            .from
            .on_release
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            hook();
        }
        self.from.held.fetch_sub(self.amount, Ordering::AcqRel);
    }
}

/// [`Bounded::on_release`]'s hook (tests only).
#[cfg(test)]
#[derive(Default)]
struct ReleaseHook(Mutex<Option<Box<dyn Fn() + Send>>>);

#[cfg(test)]
impl std::fmt::Debug for ReleaseHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReleaseHook")
    }
}

/// How many slots each client holds, at most `limit` each: a
/// [`ClientShares`] table counted in slots of one. Only clients holding a
/// slot have an entry, so the table is bounded by the slots the global
/// limit allows.
#[derive(Debug)]
pub(crate) struct PerClient {
    slots: Arc<ClientShares>,
}

impl PerClient {
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            slots: ClientShares::new(limit as u64),
        })
    }

    /// A slot for `client`, or `None` if it holds `limit` already.
    pub(crate) fn take(self: &Arc<Self>, client: ClientKey) -> Option<ClientSlot> {
        self.slots
            .take(client, 1)
            .map(|share| ClientSlot { _share: share })
    }

    /// Slots `client` holds now.
    #[cfg(test)]
    pub(crate) fn held_by(&self, client: ClientKey) -> usize {
        self.slots.held_by(client) as usize
    }
}

/// One client's slot, given back on drop.
#[derive(Debug)]
pub(crate) struct ClientSlot {
    _share: ClientShare,
}

/// What each client's Durable Streams hold of the memory budget, at most
/// `limit` bytes a client: the per-client guard of streams is measured in
/// what they hold, not counted in slots sized for full rings. Only clients
/// holding something have an entry.
#[derive(Debug)]
pub(crate) struct ClientShares {
    limit: u64,
    held: Mutex<HashMap<ClientKey, u64>>,
}

impl ClientShares {
    pub(crate) fn new(limit: u64) -> Arc<Self> {
        Arc::new(Self {
            limit,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// `amount` more for `client`, or nothing if that would take it past
    /// its share.
    pub(crate) fn take(self: &Arc<Self>, client: ClientKey, amount: u64) -> Option<ClientShare> {
        // Only counted under the lock, never left half-updated.
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let now = held.get(&client).copied().unwrap_or(0);
        let total = now
            .checked_add(amount)
            .filter(|&total| total <= self.limit)?;
        held.insert(client, total);
        Some(ClientShare {
            table: Arc::clone(self),
            client,
            amount,
        })
    }

    /// What `client` holds now.
    #[cfg(test)]
    pub(crate) fn held_by(&self, client: ClientKey) -> u64 {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        held.get(&client).copied().unwrap_or(0)
    }
}

/// Bytes of one client's share, given back on drop.
#[derive(Debug)]
pub(crate) struct ClientShare {
    table: Arc<ClientShares>,
    client: ClientKey,
    amount: u64,
}

impl Drop for ClientShare {
    fn drop(&mut self) {
        let mut held = self
            .table
            .held
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(total) = held.get_mut(&self.client) {
            *total = total.saturating_sub(self.amount);
            if *total == 0 {
                held.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Bounded, ClientShares, PerClient};
    use crate::client_addr::ClientKey;

    #[test]
    fn a_bounded_total_never_passes_its_limit_and_guards_give_back() {
        let memory = Bounded::new(10);
        let a = memory.take(6).expect("6 of 10");
        assert!(memory.take(5).is_none(), "6 + 5 > 10");
        assert_eq!(memory.held(), 6, "a refused take holds nothing");
        let b = memory.take(4).expect("exactly the limit");
        drop(a);
        assert_eq!(memory.held(), 4);
        drop(b);
        assert_eq!(memory.held(), 0);
        assert!(memory.take(u64::MAX).is_none(), "no overflow");
    }

    #[test]
    fn each_client_has_its_own_allowance_and_the_table_forgets_idle_clients() {
        let table = PerClient::new(2);
        let (one, two) = (
            ClientKey::of("192.0.2.1".parse().unwrap()),
            ClientKey::of("192.0.2.2".parse().unwrap()),
        );
        let first = table.take(one).unwrap();
        let _second = table.take(one).unwrap();
        assert!(table.take(one).is_none(), "the third slot of one client");
        let other = table.take(two).expect("another client is not affected");
        drop(first);
        assert!(table.take(one).is_some(), "a slot given back is free again");
        drop(other);
        assert_eq!(table.held_by(two), 0);
        assert!(!table.slots.held.lock().unwrap().contains_key(&two));
    }

    #[test]
    fn a_clients_share_is_bytes_given_back_on_drop() {
        let shares = ClientShares::new(100);
        let (one, two) = (
            ClientKey::of("192.0.2.1".parse().unwrap()),
            ClientKey::of("192.0.2.2".parse().unwrap()),
        );
        let a = shares.take(one, 60).expect("60 of 100");
        assert!(shares.take(one, 41).is_none(), "60 + 41 > 100");
        assert_eq!(shares.held_by(one), 60, "a refused take holds nothing");
        let b = shares.take(two, 100).expect("another client's own share");
        let c = shares.take(one, 40).expect("exactly the share");
        drop(a);
        assert_eq!(shares.held_by(one), 40);
        drop((b, c));
        assert_eq!((shares.held_by(one), shares.held_by(two)), (0, 0));
        assert!(shares.take(one, u64::MAX).is_none(), "no overflow");
        assert!(
            shares.held.lock().unwrap().is_empty(),
            "idle clients forgotten"
        );
    }
}
