//! Scenario (b): an emitter beside replaying readers. One thread emits
//! 256 B payloads into a small store (1024 events, 256 KiB: every emit
//! evicts) while 0, 1 or 2 reader threads replay continuously:
//!
//! - `gapless` (shared `Ring::emit`) and `gapless_writer` (the single
//!   `Writer::emit`): `replay_after(published() - 512)`, the newest 512
//!   events (the ring's reserve, which an emitter never overwrites while
//!   the watermark stands still), copied into one 128 KiB buffer,
//! - `mutex_vecdeque`: `newest(512)`, i.e. `after(head - 512)` in one lock
//!   acquisition, cloning the 512 `(seq, Bytes)` pairs under the lock,
//! - `broadcast`: a receiver's `try_recv` loop (each event once, with lag).
//!
//! Each timed batch starts its readers, releases them and the emitter
//! together with a barrier, times the emitter's `iters` emits, then stops
//! the readers with an `AtomicBool` and joins them; no sleeps. So readers
//! run exactly while the emitter is timed.
//!
//! The emitter's throughput is reported twice: per wall-clock second
//! (`churn/wall/…`, the target's figure) and per second the emitter thread
//! was actually on a CPU (`churn/cpu/…`, `CLOCK_THREAD_CPUTIME_ID`).
//! On a 2-core machine two spinning readers and one emitter cannot all run
//! at once, so the wall figure includes the emitter's lost CPU share; the
//! CPU figure isolates the cost of sharing cache lines with the readers.
//! (A thread blocked on a mutex is off-CPU, so for `Mutex<VecDeque>` the
//! CPU figure hides lock waits; read its wall figure.)
//!
//! At the end of each group the bench prints, per function, the gapless
//! "lost emits: R of N" (emits that returned `Err`; should be 0) and the
//! readers' rate of completed and refused replays (received and lagged-past
//! events, for broadcast) over the timed batches.

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use gapless::{EmitMode, Ring};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;
use tokio::sync::broadcast::error::TryRecvError;

mod peers;
use peers::{Broadcast, Lost, MutexDeque};

const EVENTS: usize = 1024;
const BYTES: usize = 256 << 10;
const PAYLOAD: usize = 256;
const NEWEST: u64 = 512;

/// Which clock a group reads.
#[derive(Clone, Copy)]
enum Clock {
    Wall,
    Cpu,
}

impl Clock {
    fn name(self) -> &'static str {
        match self {
            Self::Wall => "wall",
            Self::Cpu => "cpu",
        }
    }
}

/// What one reader did in one batch: replays completed (events received,
/// for broadcast) and replays refused (events lagged past, for broadcast).
type Tally = (u64, u64);

/// What the readers of one bench function did over all its batches.
#[derive(Default)]
struct Readers {
    done: AtomicU64,
    refused: AtomicU64,
    nanos: AtomicU64,
}

impl Readers {
    fn line(&self) -> String {
        let nanos = self.nanos.load(Ordering::Relaxed);
        if nanos == 0 {
            return "no readers".to_owned();
        }
        let seconds = nanos as f64 / 1e9;
        let (done, refused) = (
            self.done.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
        );
        format!(
            "readers completed {done} ({:.0}/s), refused or lagged {refused} ({:.0}/s) in {seconds:.3} s timed",
            done as f64 / seconds,
            refused as f64 / seconds,
        )
    }
}

/// Times `iters` calls of `emit` by `clock` while `readers` threads run
/// `read` (which returns once `stop` is set), released together.
fn timed_batch(
    iters: u64,
    clock: Clock,
    readers: usize,
    emit: &mut impl FnMut() -> bool,
    read: &(impl Fn(&AtomicBool) -> Tally + Sync),
    lost: &Lost,
    tally: &Readers,
) -> Duration {
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(readers + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..readers)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    read(&stop)
                })
            })
            .collect();
        barrier.wait();
        let cpu_before = peers::thread_cpu_ns();
        let wall = peers::timed_loop(iters, lost, &mut *emit);
        let cpu_after = peers::thread_cpu_ns();
        stop.store(true, Ordering::Relaxed);
        for handle in handles {
            let (done, refused) = handle.join().expect("reader panicked");
            tally.done.fetch_add(done, Ordering::Relaxed);
            tally.refused.fetch_add(refused, Ordering::Relaxed);
        }
        if readers > 0 {
            let nanos = u64::try_from(wall.as_nanos()).unwrap_or(u64::MAX);
            tally.nanos.fetch_add(nanos, Ordering::Relaxed);
        }
        match (clock, cpu_before, cpu_after) {
            (Clock::Cpu, Some(before), Some(after)) => Duration::from_nanos(after - before),
            _ => wall,
        }
    })
}

/// One bench function of a churn group; adds its line (lost emits for
/// gapless, the readers' rates) to `report`, printed after the group.
fn bench(
    group: &mut BenchmarkGroup<'_, WallTime>,
    report: &mut Vec<String>,
    (name, clock, readers): (&str, Clock, usize),
    mut emit: impl FnMut() -> bool,
    read: impl Fn(&AtomicBool) -> Tally + Sync,
) {
    let lost = Lost::default();
    let tally = Readers::default();
    group.bench_function(name, |b| {
        b.iter_custom(|iters| timed_batch(iters, clock, readers, &mut emit, &read, &lost, &tally))
    });
    if !lost.ran() {
        return;
    }
    let mut line = format!("{name}: ");
    if name.starts_with("gapless") {
        line += &lost.line();
        line += "; ";
    }
    line += &tally.line();
    report.push(line);
}

/// A gapless reader: replays the newest [`NEWEST`] events until `stop`.
fn replay_newest<M: EmitMode>(ring: &Ring<M>, stop: &AtomicBool) -> Tally {
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
}

fn churn(c: &mut Criterion) {
    let payload = peers::payload(PAYLOAD);
    // Every store starts full, so that every emit evicts.
    let ring = peers::gapless(EVENTS, BYTES);
    let mut writer = peers::writer(EVENTS, BYTES);
    let deque = MutexDeque::new(EVENTS, BYTES);
    for _ in 0..2 * EVENTS {
        ring.emit(&payload).expect("fits");
        writer.emit(&payload).expect("fits");
        deque.push(&payload);
    }
    let written = Arc::clone(writer.ring());
    let channel = Broadcast::new(EVENTS);
    let tx = &channel.tx;

    for readers in [0, 1, 2] {
        for clock in [Clock::Wall, Clock::Cpu] {
            let group_name = format!("churn/{}/{readers}r", clock.name());
            let mut group = c.benchmark_group(&group_name);
            group.throughput(Throughput::Elements(1));
            let mut report = Vec::new();
            bench(
                &mut group,
                &mut report,
                ("gapless", clock, readers),
                || black_box(ring.emit(black_box(&payload))).is_ok(),
                |stop| replay_newest(&ring, stop),
            );
            bench(
                &mut group,
                &mut report,
                ("gapless_writer", clock, readers),
                || black_box(writer.emit(black_box(&payload))).is_ok(),
                |stop| replay_newest(&written, stop),
            );
            bench(
                &mut group,
                &mut report,
                ("mutex_vecdeque", clock, readers),
                || {
                    black_box(deque.push(black_box(&payload)));
                    true
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
            bench(
                &mut group,
                &mut report,
                ("broadcast", clock, readers),
                || {
                    let copy = bytes::Bytes::copy_from_slice(black_box(&payload));
                    black_box(tx.send(copy)).is_ok()
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
    targets = churn
}
criterion_main!(benches);
