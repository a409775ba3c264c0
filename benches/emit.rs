//! Scenario (a): emit throughput, 1, 2 and 4 emitter threads × 64 B, 1 KiB
//! and 16 KiB payloads, gapless against its peers in the same run.
//!
//! Every store is bounded like the server's default ring (4096 events,
//! 4 MiB; broadcast and ArrayQueue bound events only). One emitter runs on
//! the bench thread; several are released together by a barrier, each
//! emitting its share of the batch, and the whole batch is timed.
//! Throughput is in emits per second.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;

mod peers;
use peers::{Broadcast, Emit, MutexDeque, Queue, Unsync, PAYLOADS, SERVER_BYTES, SERVER_EVENTS};

fn single(c: &mut Criterion) {
    for (len, label) in PAYLOADS {
        let payload = peers::payload(len);
        let mut group = c.benchmark_group(format!("emit/1t/{label}"));
        group.throughput(Throughput::Elements(1));

        let ring = peers::gapless(SERVER_EVENTS, SERVER_BYTES);
        group.bench_function("gapless", |b| {
            b.iter(|| black_box(ring.emit(black_box(&payload))))
        });
        let deque = MutexDeque::new(SERVER_EVENTS, SERVER_BYTES);
        group.bench_function("mutex_vecdeque", |b| {
            b.iter(|| deque.push(black_box(&payload)))
        });
        let broadcast = Broadcast::new(SERVER_EVENTS);
        group.bench_function("broadcast", |b| {
            b.iter(|| Emit::emit(&broadcast, black_box(&payload)))
        });
        let queue = Queue::new(SERVER_EVENTS);
        group.bench_function("array_queue", |b| {
            b.iter(|| Emit::emit(&queue, black_box(&payload)))
        });
        let mut unsync = Unsync::new(SERVER_EVENTS, SERVER_BYTES);
        group.bench_function("unsync_ceiling", |b| {
            b.iter(|| unsync.emit(black_box(&payload)))
        });
        group.finish();
    }
}

fn bench_threads<E: Emit>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    target: &E,
    payload: &[u8],
    threads: usize,
) {
    group.bench_function(name, |b| {
        b.iter_custom(|iters| peers::timed_emitters(target, payload, threads, iters))
    });
}

fn multi(c: &mut Criterion) {
    for threads in [2, 4] {
        for (len, label) in PAYLOADS {
            let payload = peers::payload(len);
            let mut group = c.benchmark_group(format!("emit/{threads}t/{label}"));
            group.throughput(Throughput::Elements(1));
            let ring = peers::gapless(SERVER_EVENTS, SERVER_BYTES);
            bench_threads(&mut group, "gapless", &ring, &payload, threads);
            let deque = MutexDeque::new(SERVER_EVENTS, SERVER_BYTES);
            bench_threads(&mut group, "mutex_vecdeque", &deque, &payload, threads);
            let broadcast = Broadcast::new(SERVER_EVENTS);
            bench_threads(&mut group, "broadcast", &broadcast, &payload, threads);
            let queue = Queue::new(SERVER_EVENTS);
            bench_threads(&mut group, "array_queue", &queue, &payload, threads);
            group.finish();
            // How many emits a lapped emitter lost: contention made visible.
            let stats = ring.stats();
            if stats.lost > 0 {
                eprintln!(
                    "emit/{threads}t/{label}: gapless lost {} of {} seqs to lapping",
                    stats.lost, stats.claimed
                );
            }
        }
    }
}

criterion_group! {
    name = benches;
    config = peers::criterion();
    targets = single, multi
}
criterion_main!(benches);
