//! Scenario (b): high churn. One thread emits 256 B payloads into a small
//! store (1024 events, 256 KiB: every emit evicts) while 0, 1 or 2 reader
//! threads replay the newest 512 events in a tight loop:
//!
//! - gapless: `replay_after(published() - 512)` (copies 128 KiB),
//! - `Mutex<VecDeque>`: lock, clone the newest 512 `(seq, Bytes)` pairs,
//! - broadcast: a receiver's `try_recv` loop (each event once, with lag).
//!
//! The emitter's throughput is reported twice: per wall-clock second
//! (`churn/wall/…`, the target's figure) and per second the emitter thread
//! was actually on a CPU (`churn/cpu/…`, `CLOCK_THREAD_CPUTIME_ID`).
//! On a 2-core machine two spinning readers and one emitter cannot all run
//! at once, so the wall figure includes the emitter's lost CPU share; the
//! CPU figure isolates the cost of sharing cache lines with the readers.
//! (A thread blocked on a mutex is off-CPU, so for `Mutex<VecDeque>` the
//! CPU figure hides lock waits; read its wall figure.)

use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::broadcast::error::TryRecvError;

mod peers;
use peers::{Broadcast, MutexDeque};

const EVENTS: usize = 1024;
const BYTES: usize = 256 << 10;
const PAYLOAD: usize = 256;
const NEWEST: u64 = 512;

/// What one reader did while one configuration was measured: replays
/// completed (events received, for broadcast) and replays refused (events
/// lagged past, for broadcast).
type Tally = (u64, u64);

/// Benchmarks `emit` twice (wall and on-CPU time) while `readers` threads
/// run `read` until the measurements end (it returns when `stop` is set).
fn with_readers(
    c: &mut Criterion,
    name: &str,
    readers: usize,
    mut emit: impl FnMut(),
    read: impl Fn(&AtomicBool) -> Tally + Sync,
) {
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let (done, refused) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..readers).map(|_| s.spawn(|| read(&stop))).collect();
        measure(c, "wall", name, readers, |iters| {
            let start = Instant::now();
            for _ in 0..iters {
                emit();
            }
            start.elapsed()
        });
        measure(c, "cpu", name, readers, |iters| {
            let before = peers::thread_cpu_ns();
            let start = Instant::now();
            for _ in 0..iters {
                emit();
            }
            let wall = start.elapsed();
            match (before, peers::thread_cpu_ns()) {
                (Some(before), Some(after)) => Duration::from_nanos(after - before),
                _ => wall,
            }
        });
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().expect("reader panicked"))
            .fold((0, 0), |(a, b), (x, y)| (a + x, b + y))
    });
    if readers > 0 {
        let seconds = started.elapsed().as_secs_f64();
        eprintln!(
            "churn {name} {readers}r: readers completed {:.0}/s, refused or lagged {:.0}/s",
            done as f64 / seconds,
            refused as f64 / seconds,
        );
    }
}

fn measure(
    c: &mut Criterion,
    clock: &str,
    name: &str,
    readers: usize,
    mut routine: impl FnMut(u64) -> Duration,
) {
    let mut group: BenchmarkGroup<'_, _> = c.benchmark_group(format!("churn/{clock}/{readers}r"));
    group.throughput(Throughput::Elements(1));
    group.bench_function(name, |b| b.iter_custom(&mut routine));
    group.finish();
}

fn gapless(c: &mut Criterion, readers: usize) {
    let payload = peers::payload(PAYLOAD);
    let ring = peers::gapless(EVENTS, BYTES);
    for _ in 0..2 * EVENTS {
        ring.emit(&payload).expect("fits");
    }
    with_readers(
        c,
        "gapless",
        readers,
        || {
            let _ = black_box(ring.emit(black_box(&payload)));
        },
        |stop| {
            let mut tally = (0, 0);
            while !stop.load(Ordering::Relaxed) {
                let cursor = ring.published().saturating_sub(NEWEST);
                match ring.replay_after(cursor) {
                    Ok(events) => {
                        black_box(events);
                        tally.0 += 1;
                    }
                    Err(_) => tally.1 += 1,
                }
            }
            tally
        },
    );
}

fn deque(c: &mut Criterion, readers: usize) {
    let payload = peers::payload(PAYLOAD);
    let deque = MutexDeque::new(EVENTS, BYTES);
    for _ in 0..2 * EVENTS {
        deque.push(&payload);
    }
    with_readers(
        c,
        "mutex_vecdeque",
        readers,
        || {
            black_box(deque.push(black_box(&payload)));
        },
        |stop| {
            let mut tally = (0, 0);
            while !stop.load(Ordering::Relaxed) {
                black_box(deque.newest(NEWEST as usize));
                tally.0 += 1;
            }
            tally
        },
    );
}

fn broadcast(c: &mut Criterion, readers: usize) {
    let payload = peers::payload(PAYLOAD);
    let channel = Broadcast::new(EVENTS);
    let tx = &channel.tx;
    with_readers(
        c,
        "broadcast",
        readers,
        || {
            let _ = black_box(tx.send(bytes::Bytes::copy_from_slice(black_box(&payload))));
        },
        |stop| {
            let mut tally = (0, 0);
            let mut rx = tx.subscribe();
            while !stop.load(Ordering::Relaxed) {
                match rx.try_recv() {
                    Ok(event) => {
                        black_box(event);
                        tally.0 += 1;
                    }
                    Err(TryRecvError::Lagged(n)) => tally.1 += n,
                    Err(TryRecvError::Empty) => std::hint::spin_loop(),
                    Err(TryRecvError::Closed) => break,
                }
            }
            tally
        },
    );
}

fn churn(c: &mut Criterion) {
    for readers in [0, 1, 2] {
        gapless(c, readers);
        deque(c, readers);
        broadcast(c, readers);
    }
}

criterion_group! {
    name = benches;
    config = peers::criterion();
    targets = churn
}
criterion_main!(benches);
