//! Scenario (e): `Store::get` on one thread while another thread inserts
//! and removes keys as fast as it can, against `RwLock<HashMap>` and
//! `Mutex<HashMap>` of `Arc<Ring>` (same hasher: std's `RandomState`).
//! Every variant holds 1,000 keys, few enough to stay in cache, so that
//! the map is measured rather than cache misses on the rings' reference
//! counts (which dominate at 10,000 keys and depend on heap layout). The
//! churning thread inserts and removes keys outside that set, creating
//! each (tiny) ring before it touches the map in every variant. `idle` is
//! the same lookup with no writer.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gapless::{Config, Ring, Store};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

mod peers;

const KEYS: u64 = 1_000;
const CHURN_BASE: u64 = 1 << 40;

fn tiny() -> Config {
    Config::default().events(2).bytes(64)
}

/// The three maps behind one interface.
trait Map: Sync {
    fn get(&self, key: u64) -> Option<Arc<Ring>>;
    fn insert(&self, key: u64);
    fn remove(&self, key: u64);
}

impl Map for Store<u64> {
    fn get(&self, key: u64) -> Option<Arc<Ring>> {
        Store::get(self, &key)
    }
    fn insert(&self, key: u64) {
        self.get_or_create(key, tiny()).expect("valid config");
    }
    fn remove(&self, key: u64) {
        Store::remove(self, &key);
    }
}

impl Map for RwLock<HashMap<u64, Arc<Ring>>> {
    fn get(&self, key: u64) -> Option<Arc<Ring>> {
        self.read().unwrap().get(&key).cloned()
    }
    fn insert(&self, key: u64) {
        let ring = Arc::new(Ring::new(tiny()));
        self.write().unwrap().insert(key, ring);
    }
    fn remove(&self, key: u64) {
        let removed = self.write().unwrap().remove(&key);
        drop(removed);
    }
}

impl Map for Mutex<HashMap<u64, Arc<Ring>>> {
    fn get(&self, key: u64) -> Option<Arc<Ring>> {
        self.lock().unwrap().get(&key).cloned()
    }
    fn insert(&self, key: u64) {
        let ring = Arc::new(Ring::new(tiny()));
        self.lock().unwrap().insert(key, ring);
    }
    fn remove(&self, key: u64) {
        let removed = self.lock().unwrap().remove(&key);
        drop(removed);
    }
}

fn bench_map(c: &mut Criterion, name: &str, map: &impl Map) {
    let lookups = |c: &mut Criterion, phase: &str| {
        let mut group = c.benchmark_group(format!("store_get/{phase}"));
        group.throughput(Throughput::Elements(1));
        let mut key = 0u64;
        group.bench_function(name, |b| {
            b.iter(|| {
                key = (key + 7_919) % KEYS;
                black_box(map.get(black_box(key)).expect("present"))
            })
        });
        group.finish();
    };
    lookups(c, "idle");
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let changes = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = CHURN_BASE + n % 1_000;
                map.insert(key);
                map.remove(key);
                n += 1;
            }
            n
        });
        lookups(c, "churn");
        stop.store(true, Ordering::Relaxed);
        writer.join().expect("writer panicked")
    });
    eprintln!(
        "store_get/churn {name}: the writer inserted and removed {:.0} keys/s",
        changes as f64 / started.elapsed().as_secs_f64()
    );
}

fn store(c: &mut Criterion) {
    let store = Store::<u64>::new(64);
    let rwlock = RwLock::new(HashMap::new());
    let mutex = Mutex::new(HashMap::new());
    // Filled in turn, so that each map's rings are spread over the heap
    // alike: a lookup's cost is dominated by the cache miss on the found
    // ring's reference count, which depends on where the rings lie.
    for key in 0..KEYS {
        Map::insert(&store, key);
        Map::insert(&rwlock, key);
        Map::insert(&mutex, key);
    }
    bench_map(c, "gapless_store", &store);
    bench_map(c, "rwlock_hashmap", &rwlock);
    bench_map(c, "mutex_hashmap", &mutex);
}

criterion_group! {
    name = benches;
    config = peers::criterion();
    targets = store
}
criterion_main!(benches);
