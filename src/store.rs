//! Many streams by key: a sharded map whose shards are atomically swapped
//! snapshots.
//!
//! A lookup hashes the key to a shard, loads that shard's current table
//! (wait-free with arc-swap) and clones the value's `Arc`. An insert or a
//! removal copies the shard's table, changes the copy and swaps it in with
//! compare-and-swap, retrying if another writer of the *same shard* swapped
//! first (read-copy-update). Readers never wait for writers, and creating or
//! dropping a stream never touches other shards, nor any ring's emitters.
//!
//! A removed value is freed when the last `Arc` handed out for it drops.

use crate::config::{Config, ConfigError, MAX_SHARDS};
use crate::ring::Ring;
use crate::sync::SwapCell;
use crate::wrap::Wrap;
use crossbeam_utils::CachePadded;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

type Table<K, V> = HashMap<K, Arc<V>>;
/// One shard: a table swapped wholesale, alone on its cache line.
type Shard<K, V> = CachePadded<SwapCell<Table<K, V>>>;

/// A sharded, read-mostly map from keys to shared values; by default from
/// stream keys to [`Ring`]s.
///
/// ```
/// use gapless::{Config, Store};
/// let store: Store<String> = Store::new(16);
/// let ring = store.get_or_create("session-1".to_string(), Config::default())?;
/// ring.emit(b"hello").unwrap();
/// assert_eq!(store.get("session-1").unwrap().published(), 1);
/// assert!(store.remove("session-1").is_some());
/// assert!(store.get("session-1").is_none());
/// # Ok::<(), gapless::ConfigError>(())
/// ```
pub struct Store<K, V = Ring> {
    /// The shards (as many as asked for, 1..=[`MAX_SHARDS`]), each an
    /// immutable table replaced wholesale on every change.
    shards: Box<[Shard<K, V>]>,
    /// How a key's hash picks its shard: the hash modulo the shard count.
    pick: Wrap,
    /// Keys the shard choice; random per store.
    hasher: RandomState,
}

impl<K: Hash + Eq + Clone, V> Store<K, V> {
    /// A store with exactly `shards` shards.
    ///
    /// # Panics
    /// If `shards` is 0 or above [`MAX_SHARDS`]; [`Store::try_new`] returns
    /// that as an error instead.
    #[track_caller]
    pub fn new(shards: usize) -> Self {
        match Self::try_new(shards) {
            Ok(store) => store,
            Err(error) => panic!("Store::new: {error}"),
        }
    }

    /// A store with exactly `shards` shards.
    ///
    /// # Errors
    /// [`ConfigError::Shards`] if `shards` is 0 or above [`MAX_SHARDS`].
    pub fn try_new(shards: usize) -> Result<Self, ConfigError> {
        let pick = Wrap::new(shards as u64)
            .filter(|_| shards <= MAX_SHARDS)
            .ok_or(ConfigError::Shards { requested: shards })?;
        Ok(Self {
            shards: (0..shards)
                .map(|_| CachePadded::new(SwapCell::new(Arc::new(HashMap::new()))))
                .collect(),
            pick,
            hasher: RandomState::new(),
        })
    }

    /// The number of shards.
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    fn shard<Q: Hash + ?Sized>(&self, key: &Q) -> &SwapCell<Table<K, V>> {
        let index = self.pick.index(self.hasher.hash_one(key)) as usize;
        &self.shards[index]
    }

    /// The value under `key`. Wait-free.
    pub fn get<Q>(&self, key: &Q) -> Option<Arc<V>>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shard(key).read(|table| table.get(key).cloned())
    }

    /// The value under `key`, inserting `make()` if there is none. Returns
    /// the value and whether this call inserted it. `make` runs at most
    /// once, and only if the key was absent when looked up (if another
    /// thread inserted the key meanwhile, its value wins and `make`'s is
    /// dropped).
    pub fn get_or_insert_with(&self, key: K, make: impl FnOnce() -> V) -> (Arc<V>, bool) {
        match self.get_or_try_insert_with(key, || Ok::<V, std::convert::Infallible>(make())) {
            Ok(found) => found,
            Err(never) => match never {},
        }
    }

    /// The value under `key`, inserting `make()` if there is none. Returns
    /// the value and whether this call inserted it. `make` runs at most
    /// once, and only if the key was absent when looked up.
    ///
    /// # Errors
    /// Whatever `make` returns.
    pub fn get_or_try_insert_with<E>(
        &self,
        key: K,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<(Arc<V>, bool), E> {
        let shard = self.shard(&key);
        let mut current = shard.load_full();
        if let Some(found) = current.get(&key) {
            return Ok((Arc::clone(found), false));
        }
        let value = Arc::new(make()?);
        loop {
            let mut next = Table::clone(&current);
            next.insert(key.clone(), Arc::clone(&value));
            match shard.compare_and_swap(&current, Arc::new(next)) {
                Ok(()) => return Ok((value, true)),
                Err(actual) => {
                    if let Some(found) = actual.get(&key) {
                        return Ok((Arc::clone(found), false));
                    }
                    current = actual;
                }
            }
        }
    }

    /// Removes and returns the value under `key`. Holders of its `Arc` keep
    /// it alive; it is freed when the last one drops.
    pub fn remove<Q>(&self, key: &Q) -> Option<Arc<V>>
    where
        K: std::borrow::Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let shard = self.shard(key);
        let mut current = shard.load_full();
        loop {
            let removed = Arc::clone(current.get(key)?);
            let mut next = Table::clone(&current);
            next.remove(key);
            match shard.compare_and_swap(&current, Arc::new(next)) {
                Ok(()) => return Some(removed),
                Err(actual) => current = actual,
            }
        }
    }

    /// Number of entries (a sum of per-shard snapshots, not one atomic
    /// view).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read(|t| t.len())).sum()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A snapshot of every entry, shard by shard.
    pub fn entries(&self) -> Vec<(K, Arc<V>)> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            shard.read(|table| {
                out.extend(table.iter().map(|(k, v)| (k.clone(), Arc::clone(v))));
            });
        }
        out
    }
}

impl<K: Hash + Eq + Clone> Store<K, Ring> {
    /// The ring under `key`, creating it from `config` if absent.
    ///
    /// # Errors
    /// [`ConfigError`] if `config` is invalid and the ring had to be created.
    pub fn get_or_create(&self, key: K, config: Config) -> Result<Arc<Ring>, ConfigError> {
        self.get_or_try_insert_with(key, || Ring::try_new(config))
            .map(|(ring, _)| ring)
    }
}

impl<K: Hash + Eq + Clone, V> Default for Store<K, V> {
    /// 64 shards.
    fn default() -> Self {
        Self::new(64)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// Small rings: these tests are about the map, and Miri interprets
    /// every arena word.
    fn small() -> Config {
        Config::default().events(8).bytes(256)
    }

    #[test]
    fn get_or_create_returns_the_same_ring() {
        let store: Store<u32> = Store::new(4);
        let a = store.get_or_create(7, small()).unwrap();
        let b = store.get_or_create(7, small().events(64)).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(b.geometry().events(), 8, "the first config wins");
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn invalid_config_is_an_error_and_inserts_nothing() {
        let store: Store<u32> = Store::new(4);
        assert!(store.get_or_create(1, Config::default().events(0)).is_err());
        assert!(store.is_empty());
    }

    #[test]
    fn removed_ring_lives_until_its_last_handle_drops() {
        let store: Store<&str> = Store::new(2);
        let ring = store.get_or_create("a", small()).unwrap();
        let weak = Arc::downgrade(&ring);
        let removed = store.remove("a").unwrap();
        assert!(store.get("a").is_none());
        assert!(store.remove("a").is_none());
        drop(removed);
        assert!(weak.upgrade().is_some(), "a handle is still out");
        drop(ring);
        assert!(weak.upgrade().is_none(), "freed with the last handle");
    }

    /// Exactly the shards asked for (not a power of two), and a shard
    /// count out of range is an error from `try_new`, not a clamp.
    #[test]
    fn shard_counts_are_exact_and_checked() {
        let store: Store<u32, u32> = Store::new(3);
        assert_eq!(store.shards(), 3);
        for key in 0..100 {
            assert!(store.get_or_insert_with(key, || key * 2).1);
        }
        assert_eq!(store.len(), 100);
        assert_eq!(*store.get(&77).unwrap(), 154);
        assert_eq!(
            Store::<u32>::try_new(0).err(),
            Some(ConfigError::Shards { requested: 0 })
        );
        assert_eq!(
            Store::<u32>::try_new(MAX_SHARDS + 1).err(),
            Some(ConfigError::Shards {
                requested: MAX_SHARDS + 1
            })
        );
        if !cfg!(miri) {
            // 4096 shards: slow to build under Miri, instant natively.
            assert_eq!(
                Store::<u32>::try_new(MAX_SHARDS).unwrap().shards(),
                MAX_SHARDS
            );
        }
    }

    #[test]
    fn get_or_insert_with_keeps_the_first_value() {
        let store: Store<&str, u32> = Store::new(2);
        assert_eq!(store.get_or_insert_with("k", || 1), (Arc::new(1), true));
        let (value, inserted) = store.get_or_insert_with("k", || unreachable!("present"));
        assert_eq!((*value, inserted), (1, false));
    }

    #[test]
    fn concurrent_get_or_create_agrees_on_one_value() {
        let store: Store<u32, u64> = Store::new(1);
        let made = std::sync::atomic::AtomicU64::new(0);
        let values: Vec<Arc<u64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        store
                            .get_or_try_insert_with(1, || {
                                Ok::<_, ()>(made.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
                            })
                            .unwrap()
                            .0
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for v in &values {
            assert!(Arc::ptr_eq(v, &values[0]));
        }
        assert_eq!(store.len(), 1);
    }
}
