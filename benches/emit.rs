//! Scenario (a): emit throughput, gapless against its peers in the same run.
//!
//! - `emit/1t/{64B,256B,1KiB}`: one emitter on the bench thread. Shared
//!   `Ring::emit` (`gapless`), the single-writer `Writer::emit`
//!   (`gapless_writer`), `Mutex<VecDeque>`, broadcast, ArrayQueue and the
//!   unsynchronized ceiling.
//! - `emit/{2,4}t/{64B,256B}`: several emitters released together by a
//!   barrier, each emitting its share of the batch, the whole batch timed
//!   (`Ring::emit` against the thread-safe peers; a `Writer` has one
//!   emitter by construction).
//!
//! Every store is bounded like the server's default ring (4096 events,
//! 4 MiB of payload; broadcast and ArrayQueue bound events only), and every
//! function in a group emits the same payload. Throughput is in emits per
//! second. At the end of each group the bench prints, for every gapless
//! function, "lost emits: R of N" (emits that returned `Err`, which should
//! be 0: an emit fails only for an oversized payload) and, with several
//! emitters, the ring's `wrap_waits` (emits that waited at the wrap for a
//! descheduled emitter a window behind).

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use std::hint::black_box;

mod peers;
use peers::{
    Broadcast, Emit, Lost, MutexDeque, Queue, Unsync, PAYLOADS, SERVER_BYTES, SERVER_EVENTS,
};

/// Payload sizes of the multi-emitter groups.
const MULTI_PAYLOADS: [(usize, &str); 2] = [(64, "64B"), (256, "256B")];

/// Benchmarks one single-threaded emitter; `emit` returns whether the
/// store took the event.
fn bench_single(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    lost: &Lost,
    mut emit: impl FnMut() -> bool,
) {
    group.bench_function(name, |b| {
        b.iter_custom(|iters| peers::timed_loop(iters, lost, &mut emit))
    });
}

fn single(c: &mut Criterion) {
    for (len, label) in PAYLOADS {
        let payload = peers::payload(len);
        let group_name = format!("emit/1t/{label}");
        let mut group = c.benchmark_group(&group_name);
        group.throughput(Throughput::Elements(1));

        let ring = peers::gapless(SERVER_EVENTS, SERVER_BYTES);
        let ring_lost = Lost::default();
        bench_single(&mut group, "gapless", &ring_lost, || {
            black_box(ring.emit(black_box(&payload))).is_ok()
        });
        let mut writer = peers::writer(SERVER_EVENTS, SERVER_BYTES);
        let writer_lost = Lost::default();
        bench_single(&mut group, "gapless_writer", &writer_lost, || {
            black_box(writer.emit(black_box(&payload))).is_ok()
        });
        let deque = MutexDeque::new(SERVER_EVENTS, SERVER_BYTES);
        bench_single(&mut group, "mutex_vecdeque", &Lost::default(), || {
            Emit::emit(&deque, black_box(&payload))
        });
        let broadcast = Broadcast::new(SERVER_EVENTS);
        bench_single(&mut group, "broadcast", &Lost::default(), || {
            Emit::emit(&broadcast, black_box(&payload))
        });
        let queue = Queue::new(SERVER_EVENTS);
        bench_single(&mut group, "array_queue", &Lost::default(), || {
            Emit::emit(&queue, black_box(&payload))
        });
        let mut unsync = Unsync::new(SERVER_EVENTS, SERVER_BYTES);
        bench_single(&mut group, "unsync_ceiling", &Lost::default(), || {
            black_box(unsync.emit(black_box(&payload)));
            true
        });
        group.finish();

        if ring_lost.ran() {
            eprintln!(
                "{group_name} gapless: {} (seqs claimed {})",
                ring_lost.line(),
                ring.stats().claimed
            );
        }
        if writer_lost.ran() {
            eprintln!(
                "{group_name} gapless_writer: {} (seqs claimed {})",
                writer_lost.line(),
                writer.ring().stats().claimed
            );
        }
    }
}

fn bench_threads<E: Emit>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    target: &E,
    payload: &[u8],
    threads: usize,
    lost: &Lost,
) {
    group.bench_function(name, |b| {
        b.iter_custom(|iters| peers::timed_emitters(target, payload, threads, iters, lost))
    });
}

fn multi(c: &mut Criterion) {
    for threads in [2, 4] {
        for (len, label) in MULTI_PAYLOADS {
            let payload = peers::payload(len);
            let group_name = format!("emit/{threads}t/{label}");
            let mut group = c.benchmark_group(&group_name);
            group.throughput(Throughput::Elements(1));
            let ring = peers::gapless(SERVER_EVENTS, SERVER_BYTES);
            let ring_lost = Lost::default();
            bench_threads(&mut group, "gapless", &ring, &payload, threads, &ring_lost);
            let deque = MutexDeque::new(SERVER_EVENTS, SERVER_BYTES);
            let none = Lost::default();
            bench_threads(
                &mut group,
                "mutex_vecdeque",
                &deque,
                &payload,
                threads,
                &none,
            );
            let broadcast = Broadcast::new(SERVER_EVENTS);
            bench_threads(
                &mut group,
                "broadcast",
                &broadcast,
                &payload,
                threads,
                &none,
            );
            let queue = Queue::new(SERVER_EVENTS);
            bench_threads(&mut group, "array_queue", &queue, &payload, threads, &none);
            group.finish();

            if !ring_lost.ran() {
                continue;
            }
            let stats = ring.stats();
            eprintln!(
                "{group_name} gapless: {} (seqs claimed {}); wrap_waits {} ({:.3} ms waited)",
                ring_lost.line(),
                stats.claimed,
                stats.wrap_waits,
                stats.wrap_wait_nanos as f64 / 1e6
            );
        }
    }
}

criterion_group! {
    name = benches;
    config = peers::criterion();
    targets = single, multi
}
criterion_main!(benches);
