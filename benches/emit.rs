//! Scenario (a): emit throughput, gapless against its peers in the same run.
//!
//! - `emit/1t/{64B,256B,1KiB,4KiB,16KiB}`: one emitter on the bench thread.
//!   Shared `Ring::emit` (`gapless`), the single-writer `Writer::emit`
//!   (`gapless_writer`), `Mutex<VecDeque>`, broadcast, ArrayQueue and the
//!   plain memcpy ring (`unsync_ceiling`: a `Vec<u8>` arena of the same
//!   byte size and an index, no synchronization).
//! - `emit/{2,4}t/{64B,256B}`: several emitters released together by a
//!   barrier, each emitting its share of the batch, the whole batch timed
//!   (`Ring::emit` against the thread-safe peers; a `Writer` has one
//!   emitter by construction). Four emitters on a 2-core machine are
//!   informational.
//!
//! Every store is sized alike, as BENCHMARKS.md's targets compare them: a
//! ring of 4096 events configured with `bytes(4096 × (len + 64))` for
//! payloads of `len` bytes (room for every event it retains), and every
//! peer with the same bounds (`Mutex<VecDeque>` and the memcpy ring 4096
//! events and the same bytes; broadcast and ArrayQueue bound events only).
//! At 16 KiB that is 64 MiB per store, so each store is built just before
//! its bench function and dropped right after it: one lives at a time.
//! Every function in a group emits the same payload. Throughput is in emits
//! per second.
//!
//! At the end of each group the bench prints, per group, the ring as
//! configured and as built (`emit/1t/64B ring: events 4096, bytes 524288;
//! built: …`), and for every gapless function "lost emits: R of N" (emits
//! that returned `Err`, which should be 0: an emit fails only for an
//! oversized payload) and, with several emitters, the ring's `wrap_waits`
//! (emits that waited at the wrap for a descheduled emitter a window
//! behind). With several emitters it also prints, for every function, the
//! CPU time per emit beside the wall time (see [`peers::Clocks::line`]):
//! `emit/2t/256B gapless: per emit over the last 20 batches, median: wall
//! 14.213 ns, cpu 25.101 ns; cpu range 20.001 to 30.100 ns; 2 emitters`.
//! `benches/results/plot.py collect` reads those lines from the log.

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use std::hint::black_box;

mod peers;
use peers::{Broadcast, Clocks, Emit, Lost, MutexDeque, Queue, Unsync, EMIT_EVENTS, PAYLOADS};

/// Payload sizes of the multi-emitter groups.
const MULTI_PAYLOADS: [(usize, &str); 2] = [(64, "64B"), (256, "256B")];

/// Emitter threads of the multi-emitter groups.
const THREADS: [usize; 2] = [2, 4];

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

/// The line a group prints about its gapless ring: the configuration and
/// what the ring built from it (`Geometry`), or why it could not.
fn ring_line(events: usize, bytes: usize) -> String {
    let config = gapless::Config::default().events(events).bytes(bytes);
    let built = match config.geometry() {
        Ok(geometry) => format!(
            "events {}, arena {} B, max payload {} B, footprint {} B",
            geometry.events(),
            geometry.arena_bytes(),
            geometry.max_payload(),
            geometry.footprint()
        ),
        Err(error) => format!("rejected: {error}"),
    };
    format!("ring: events {events}, bytes {bytes}; built: {built}")
}

/// The `emit/1t/*` groups: one emitter, every payload size, every peer.
fn single(c: &mut Criterion) {
    for (len, label) in PAYLOADS {
        let payload = peers::payload(len);
        let bytes = peers::room_for(EMIT_EVENTS, len);
        let group_name = format!("emit/1t/{label}");
        let mut group = c.benchmark_group(&group_name);
        group.throughput(Throughput::Elements(1));
        let mut report = vec![ring_line(EMIT_EVENTS, bytes)];

        {
            let ring = peers::gapless(EMIT_EVENTS, bytes);
            let lost = Lost::default();
            bench_single(&mut group, "gapless", &lost, || {
                black_box(ring.emit(black_box(&payload))).is_ok()
            });
            if lost.ran() {
                report.push(format!(
                    "gapless: {} (seqs claimed {})",
                    lost.line(),
                    ring.stats().claimed
                ));
            }
        }
        {
            let mut writer = peers::writer(EMIT_EVENTS, bytes);
            let lost = Lost::default();
            bench_single(&mut group, "gapless_writer", &lost, || {
                black_box(writer.emit(black_box(&payload))).is_ok()
            });
            if lost.ran() {
                report.push(format!(
                    "gapless_writer: {} (seqs claimed {})",
                    lost.line(),
                    writer.ring().stats().claimed
                ));
            }
        }
        {
            let deque = MutexDeque::new(EMIT_EVENTS, bytes);
            bench_single(&mut group, "mutex_vecdeque", &Lost::default(), || {
                Emit::emit(&deque, black_box(&payload))
            });
        }
        {
            let broadcast = Broadcast::new(EMIT_EVENTS);
            bench_single(&mut group, "broadcast", &Lost::default(), || {
                Emit::emit(&broadcast, black_box(&payload))
            });
        }
        {
            let queue = Queue::new(EMIT_EVENTS);
            bench_single(&mut group, "array_queue", &Lost::default(), || {
                Emit::emit(&queue, black_box(&payload))
            });
        }
        {
            let mut unsync = Unsync::new(EMIT_EVENTS, bytes);
            bench_single(&mut group, "unsync_ceiling", &Lost::default(), || {
                black_box(unsync.emit(black_box(&payload)));
                true
            });
        }
        group.finish();
        for line in report {
            eprintln!("{group_name} {line}");
        }
    }
}

/// Benchmarks `threads` emitters into `target`, recording each batch's
/// lost emits and clocks, and adds the function's clock line to `report`.
fn bench_threads<E: Emit>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    report: &mut Vec<String>,
    name: &str,
    target: &E,
    payload: &[u8],
    threads: usize,
    lost: &Lost,
) {
    let clocks = Clocks::default();
    group.bench_function(name, |b| {
        b.iter_custom(|iters| peers::timed_emitters(target, payload, threads, iters, lost, &clocks))
    });
    if let Some(line) = clocks.line(threads) {
        report.push(format!("{name}: {line}"));
    }
}

/// The `emit/{2,4}t/*` groups: several emitters into one shared store.
fn multi(c: &mut Criterion) {
    for threads in THREADS {
        for (len, label) in MULTI_PAYLOADS {
            let payload = peers::payload(len);
            let bytes = peers::room_for(EMIT_EVENTS, len);
            let group_name = format!("emit/{threads}t/{label}");
            let mut group = c.benchmark_group(&group_name);
            group.throughput(Throughput::Elements(1));
            let mut report = vec![ring_line(EMIT_EVENTS, bytes)];
            let none = Lost::default();

            {
                let ring = peers::gapless(EMIT_EVENTS, bytes);
                let lost = Lost::default();
                bench_threads(
                    &mut group,
                    &mut report,
                    "gapless",
                    &ring,
                    &payload,
                    threads,
                    &lost,
                );
                if lost.ran() {
                    let stats = ring.stats();
                    report.push(format!(
                        "gapless: {} (seqs claimed {}); wrap_waits {} ({:.3} ms waited)",
                        lost.line(),
                        stats.claimed,
                        stats.wrap_waits,
                        stats.wrap_wait_nanos as f64 / 1e6
                    ));
                }
            }
            {
                let deque = MutexDeque::new(EMIT_EVENTS, bytes);
                bench_threads(
                    &mut group,
                    &mut report,
                    "mutex_vecdeque",
                    &deque,
                    &payload,
                    threads,
                    &none,
                );
            }
            {
                let broadcast = Broadcast::new(EMIT_EVENTS);
                bench_threads(
                    &mut group,
                    &mut report,
                    "broadcast",
                    &broadcast,
                    &payload,
                    threads,
                    &none,
                );
            }
            {
                let queue = Queue::new(EMIT_EVENTS);
                bench_threads(
                    &mut group,
                    &mut report,
                    "array_queue",
                    &queue,
                    &payload,
                    threads,
                    &none,
                );
            }
            group.finish();
            for line in report {
                eprintln!("{group_name} {line}");
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
