#![cfg(loom)]
//! Model 6: `Store` inserts, lookups and removals racing on one key.
//!
//! Every store here has a single shard, so every operation races on the
//! same table cell: a lookup reads the current table; `get_or_create` and
//! `remove` copy it, change the copy and compare-and-swap it in, retrying
//! on a lost race (read-copy-update). Under loom the cell is the engine's
//! `SwapCell` facade, a mutex-protected `Arc` with arc-swap's semantics, so
//! these models check the store's RCU logic, not arc-swap's internals.
//!
//! In every interleaving:
//!
//! - **one ring per key wins**: racing `get_or_create` calls with no removal
//!   in between return the very same ring, and it is the one in the store;
//! - **a removed key is gone**: once `remove` returned a ring, no lookup
//!   returns that ring again;
//! - **no value is lost**: every ring a `get_or_create` returned is either
//!   still in the store at the end or was returned by exactly one `remove`,
//!   and a removal never undoes a concurrent insert of another key of the
//!   same shard.
//!
//! Each test asserts that loom reached every kind of outcome it is about
//! (`Outcomes`), e.g. a removal that hit the first of two racing creators.

use gapless::{Config, Ring, Store};
use gapless_loom_tests::Outcomes;
use loom::thread;
use std::sync::Arc;

const KEY: u32 = 7;
/// A second key in the same (only) shard.
const OTHER_KEY: u32 = 8;

/// The smallest ring: creating one is part of every insert.
fn config() -> Config {
    Config::default().events(2).bytes(64)
}

fn get_or_create(store: &Store<u32>, key: u32) -> Arc<Ring> {
    match store.get_or_create(key, config()) {
        Ok(ring) => ring,
        Err(error) => panic!("model config is invalid: {error}"),
    }
}

fn same(a: &Arc<Ring>, b: &Arc<Ring>) -> bool {
    Arc::ptr_eq(a, b)
}

fn spawn_get_or_create(store: &Arc<Store<u32>>) -> thread::JoinHandle<Arc<Ring>> {
    let store = Arc::clone(store);
    thread::spawn(move || get_or_create(&store, KEY))
}

#[test]
fn racing_get_or_create_agree_on_one_ring() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        let store: Arc<Store<u32>> = Arc::new(Store::new(1));
        let first = spawn_get_or_create(&store);
        let second = spawn_get_or_create(&store);
        let seen = store.get(&KEY);

        let first = first.join().expect("creator panicked");
        let second = second.join().expect("creator panicked");
        assert!(same(&first, &second), "two rings won the same key");
        let stored = store.get(&KEY).expect("the created ring is in the store");
        assert!(same(&stored, &first), "the store holds a ring nobody got");
        assert_eq!(store.len(), 1);
        if let Some(seen) = &seen {
            assert!(same(seen, &first), "a lookup saw a ring that lost");
        }
        tally.record(if seen.is_some() {
            "lookup saw it"
        } else {
            "lookup too early"
        });
    });
    outcomes.assert_seen("two creators", &["lookup saw it", "lookup too early"]);
}

#[test]
fn remove_races_get_or_create_and_get() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        let store: Arc<Store<u32>> = Arc::new(Store::new(1));
        // The creator also inserts a second key of the same shard, whose
        // table update the removal must not undo.
        let creator = {
            let store = Arc::clone(&store);
            thread::spawn(move || (get_or_create(&store, KEY), get_or_create(&store, OTHER_KEY)))
        };
        let remover = {
            let store = Arc::clone(&store);
            thread::spawn(move || {
                let removed = store.remove(&KEY);
                let after = store.get(&KEY);
                (removed, after)
            })
        };
        let seen = store.get(&KEY);

        let (created, other) = creator.join().expect("creator panicked");
        let (removed, after_remove) = remover.join().expect("remover panicked");
        let remaining = store.get(&KEY);
        let other_remaining = store
            .get(&OTHER_KEY)
            .expect("a removal undid another key's insert");
        assert!(same(&other_remaining, &other));
        if let Some(seen) = &seen {
            assert!(same(seen, &created), "a lookup saw a ring nobody created");
        }
        match &removed {
            Some(removed) => {
                assert!(same(removed, &created), "removed a ring nobody created");
                assert!(after_remove.is_none(), "the removed key is still there");
                assert!(remaining.is_none(), "the removed key came back");
                assert_eq!(store.len(), 1);
            }
            None => {
                let remaining = remaining.expect("the created ring was lost");
                assert!(same(&remaining, &created));
                assert_eq!(store.len(), 2);
            }
        }
        tally.record(if removed.is_some() {
            "removed"
        } else {
            "remove too early"
        });
    });
    outcomes.assert_seen("create/remove", &["removed", "remove too early"]);
}

#[test]
fn two_creators_and_a_remover_lose_nothing() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        let store: Arc<Store<u32>> = Arc::new(Store::new(1));
        let first = spawn_get_or_create(&store);
        let second = spawn_get_or_create(&store);
        let removed = store.remove(&KEY);
        let after_remove = store.get(&KEY);

        let first = first.join().expect("creator panicked");
        let second = second.join().expect("creator panicked");
        let remaining = store.get(&KEY);
        // No value lost: each ring handed out was removed or is still there.
        for ring in [&first, &second] {
            let accounted = removed.as_ref().is_some_and(|r| same(r, ring))
                || remaining.as_ref().is_some_and(|r| same(r, ring));
            assert!(accounted, "a created ring vanished from the store");
        }
        // Two different rings can only have coexisted around a removal.
        if !same(&first, &second) {
            assert!(removed.is_some(), "two rings won the key with no removal");
        }
        // A removed ring is gone for good.
        if let Some(removed) = &removed {
            for later in [&after_remove, &remaining].into_iter().flatten() {
                assert!(!same(later, removed), "a removed ring was found again");
            }
        }
        assert_eq!(store.len(), usize::from(remaining.is_some()));
        tally.record(match (&removed, same(&first, &second)) {
            (None, _) => "nothing removed",
            (Some(_), true) => "removed the only ring",
            (Some(_), false) => "removed one, the other won",
        });
    });
    outcomes.assert_seen(
        "create/create/remove",
        &[
            "nothing removed",
            "removed the only ring",
            "removed one, the other won",
        ],
    );
}
