//! The peers gapless is measured against, and the harness pieces every
//! bench shares. Each bench file includes this with `mod peers;` and uses
//! part of it.
//!
//! Every peer stores the same payloads under the same scenario, and every
//! one copies the caller's bytes (gapless into its preallocated arena, the
//! others into a fresh `Bytes`), so a benchmark compares whole emits.
//!
//! A gapless emit fails only for an oversized payload, so every bench that
//! emits into gapless counts the emits that returned `Err` ([`Lost`]) and
//! prints "lost emits: 0 of N": a non-zero count means the figure beside it
//! timed refusals, not emits.

#![allow(dead_code)]

use bytes::Bytes;
use criterion::Criterion;
use crossbeam_queue::ArrayQueue;
use gapless::{Config, Ring, Writer};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Samples criterion takes per benchmark. Criterion calls a routine once
/// per sample after its warm-up calls, so the last `SAMPLE_SIZE` batches a
/// bench function times are the samples its median comes from.
pub const SAMPLE_SIZE: usize = 20;

/// Short runs: the whole `cargo bench` stays within a few minutes.
pub fn criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(SAMPLE_SIZE)
        .noise_threshold(0.05)
}

/// The server's default ring: 4096 events, 4 MiB of payload.
pub const SERVER_EVENTS: usize = 4096;
/// The server's default ring: 4096 events, 4 MiB of payload (gapless's
/// `bytes`, the peers' byte bound).
pub const SERVER_BYTES: usize = 4 << 20;

/// Events of the rings the emit benches compare, each with the `bytes` of
/// [`room_for`] for its payload size (so every event it retains fits).
pub const EMIT_EVENTS: usize = 4096;
/// Bytes allowed per event on top of its payload when a ring is sized to
/// hold every event it retains ([`room_for`]): more than a record's
/// header and padding.
pub const RECORD_ROOM: usize = 64;

/// The `bytes` of a ring of `events` events with room for every one of
/// them at `len` bytes of payload: `events × (len + RECORD_ROOM)`. The
/// peers get the same byte bound, which they then never reach.
pub fn room_for(events: usize, len: usize) -> usize {
    events * (len + RECORD_ROOM)
}

/// Payload sizes of the single-emitter scenario, with their labels.
pub const PAYLOADS: [(usize, &str); 5] = [
    (64, "64B"),
    (256, "256B"),
    (1024, "1KiB"),
    (4096, "4KiB"),
    (16384, "16KiB"),
];

/// A payload of `len` bytes that is not all one value.
pub fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + 7) as u8).collect()
}

/// Something many threads emit into through `&self`.
pub trait Emit: Sync {
    /// Appends one event holding a copy of `payload`; `false` if the store
    /// refused it (counted as a lost emit).
    fn emit(&self, payload: &[u8]) -> bool;
}

impl Emit for Ring {
    fn emit(&self, payload: &[u8]) -> bool {
        std::hint::black_box(Ring::emit(self, payload)).is_ok()
    }
}

/// gapless configured with `events(events).bytes(bytes)`.
pub fn gapless(events: usize, bytes: usize) -> Ring {
    Ring::new(Config::default().events(events).bytes(bytes))
}

/// gapless's single-writer mode, configured like [`gapless`].
pub fn writer(events: usize, bytes: usize) -> Writer {
    Writer::new(Config::default().events(events).bytes(bytes))
}

/// Emits attempted and emits that returned `Err`, for one bench function.
/// Added to once per timed batch (never per emit, so that counting adds no
/// shared write to the measured loop).
#[derive(Debug, Default)]
pub struct Lost {
    attempted: AtomicU64,
    refused: AtomicU64,
}

impl Lost {
    /// Records a batch of `attempted` emits of which `refused` failed.
    pub fn add(&self, attempted: u64, refused: u64) {
        self.attempted.fetch_add(attempted, Ordering::Relaxed);
        self.refused.fetch_add(refused, Ordering::Relaxed);
    }

    /// `(refused, attempted)` so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.refused.load(Ordering::Relaxed),
            self.attempted.load(Ordering::Relaxed),
        )
    }

    /// Whether any emit was counted (false for a function that a filter
    /// skipped, whose line is not worth printing).
    pub fn ran(&self) -> bool {
        self.attempted.load(Ordering::Relaxed) > 0
    }

    /// "lost emits: R of N", the line every gapless bench prints.
    pub fn line(&self) -> String {
        let (refused, attempted) = self.counts();
        format!("lost emits: {refused} of {attempted}")
    }
}

/// Emits `payload` `count` times into `ring` to set a scenario up, counting
/// the emits that returned `Err`.
pub fn fill(ring: &Ring, payload: &[u8], count: u64) -> Lost {
    let lost = Lost::default();
    let refused = (0..count).filter(|_| ring.emit(payload).is_err()).count();
    lost.add(count, refused as u64);
    lost
}

/// Times `iters` calls of `emit` on this thread, as criterion's `iter`
/// loop would, and adds them (and those that returned `false`) to `lost`.
pub fn timed_loop(iters: u64, lost: &Lost, mut emit: impl FnMut() -> bool) -> Duration {
    let mut refused = 0u64;
    let start = Instant::now();
    for _ in 0..iters {
        refused += u64::from(!emit());
    }
    let elapsed = start.elapsed();
    lost.add(iters, refused);
    elapsed
}

/// What MCP SDK event stores amount to: a mutex around a deque of
/// `(seq, Bytes)`, evicting from the front to stay within the same event
/// and byte bounds as the ring.
pub struct MutexDeque {
    inner: Mutex<Deque>,
    max_events: usize,
    max_bytes: usize,
}

struct Deque {
    events: VecDeque<(u64, Bytes)>,
    bytes: usize,
    next: u64,
}

impl MutexDeque {
    /// An empty store bounded like a ring of `events` events and `bytes`
    /// payload bytes.
    pub fn new(events: usize, bytes: usize) -> Self {
        Self {
            inner: Mutex::new(Deque {
                events: VecDeque::with_capacity(events),
                bytes: 0,
                next: 0,
            }),
            max_events: events,
            max_bytes: bytes,
        }
    }

    /// Appends a copy of `payload` and returns its seq. The copy is made
    /// before the lock is taken (the cheapest placement for this peer).
    pub fn push(&self, payload: &[u8]) -> u64 {
        let copy = Bytes::copy_from_slice(payload);
        let mut inner = self.inner.lock().unwrap();
        inner.next += 1;
        let seq = inner.next;
        inner.bytes += copy.len();
        inner.events.push_back((seq, copy));
        while inner.events.len() > self.max_events || inner.bytes > self.max_bytes {
            let (_, gone) = inner
                .events
                .pop_front()
                .expect("over a bound, so not empty");
            inner.bytes -= gone.len();
        }
        seq
    }

    /// The newest `n` events, cloned under the lock (each clone bumps a
    /// reference count; no payload bytes are copied).
    pub fn newest(&self, n: usize) -> Vec<(u64, Bytes)> {
        let inner = self.inner.lock().unwrap();
        let start = inner.events.len().saturating_sub(n);
        inner.events.range(start..).cloned().collect()
    }

    /// Every retained event after `cursor`, cloned under the lock.
    pub fn after(&self, cursor: u64) -> Vec<(u64, Bytes)> {
        let inner = self.inner.lock().unwrap();
        let first = inner.events.front().map_or(0, |(seq, _)| *seq);
        let start = (cursor + 1).saturating_sub(first) as usize;
        inner
            .events
            .range(start.min(inner.events.len())..)
            .cloned()
            .collect()
    }
}

impl Emit for MutexDeque {
    fn emit(&self, payload: &[u8]) -> bool {
        std::hint::black_box(self.push(payload));
        true
    }
}

/// `tokio::sync::broadcast` (Rust's lagging ring): a `Bytes` per send. One
/// receiver is kept alive and never reads, so every send is stored (with no
/// receiver at all, `send` stores nothing and fails).
pub struct Broadcast {
    pub tx: tokio::sync::broadcast::Sender<Bytes>,
    _rx: tokio::sync::broadcast::Receiver<Bytes>,
}

impl Broadcast {
    /// A channel of `events` slots (it has no byte bound).
    pub fn new(events: usize) -> Self {
        let (tx, rx) = tokio::sync::broadcast::channel(events);
        Self { tx, _rx: rx }
    }
}

impl Emit for Broadcast {
    fn emit(&self, payload: &[u8]) -> bool {
        // Fails only with no receiver, and one is kept.
        std::hint::black_box(self.tx.send(Bytes::copy_from_slice(payload))).is_ok()
    }
}

/// `crossbeam_queue::ArrayQueue` of `(seq, Bytes)` with `force_push` (a
/// lock-free ring that overwrites its oldest element; other semantics: no
/// replay without consuming). The seq comes from a separate counter.
pub struct Queue {
    queue: ArrayQueue<(u64, Bytes)>,
    next: AtomicU64,
}

impl Queue {
    /// A queue of `events` slots (it has no byte bound).
    pub fn new(events: usize) -> Self {
        Self {
            queue: ArrayQueue::new(events),
            next: AtomicU64::new(0),
        }
    }
}

impl Emit for Queue {
    fn emit(&self, payload: &[u8]) -> bool {
        let seq = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let evicted = self
            .queue
            .force_push((seq, Bytes::copy_from_slice(payload)));
        drop(std::hint::black_box(evicted));
        true
    }
}

/// The plain memcpy ring (`unsync_ceiling`): an unsynchronized
/// single-threaded ring, `&mut self`, one `memcpy` per emit (two at the
/// arena's end), with an arena of exactly the byte size it is given and an
/// index of `(position, len)` per retained event. What an emit costs with
/// no synchronization at all, at the same memory footprint as the ring it
/// is compared with.
pub struct Unsync {
    arena: Vec<u8>,
    /// `(position, len)` per retained event, the newest at `slot - 1`.
    index: Vec<(u64, u32)>,
    /// The index entry the next emit fills.
    slot: usize,
    /// The arena position the next payload starts at.
    tail: usize,
    /// The newest seq.
    head: u64,
}

impl Unsync {
    /// An empty ring of `events` index entries and a `bytes`-byte arena
    /// (both at least 1; any size, not only powers of two).
    pub fn new(events: usize, bytes: usize) -> Self {
        assert!(events > 0 && bytes > 0, "an empty ring holds nothing");
        Self {
            arena: vec![0; bytes],
            index: vec![(0, 0); events],
            slot: 0,
            tail: 0,
            head: 0,
        }
    }

    /// Appends a copy of `payload` (at most the arena's size and
    /// `u32::MAX` bytes) and returns its seq.
    pub fn emit(&mut self, payload: &[u8]) -> u64 {
        let size = self.arena.len();
        let start = self.tail;
        let first = payload.len().min(size - start);
        self.arena[start..start + first].copy_from_slice(&payload[..first]);
        self.arena[..payload.len() - first].copy_from_slice(&payload[first..]);
        self.index[self.slot] = (start as u64, payload.len() as u32);
        self.slot += 1;
        if self.slot == self.index.len() {
            self.slot = 0;
        }
        self.tail += payload.len();
        if self.tail >= size {
            self.tail -= size;
        }
        self.head += 1;
        self.head
    }
}

/// What one timed batch of several emitters took: its emits, its wall time
/// and the CPU time its emitter threads spent in their emit loops (`None`
/// where a thread's CPU clock is unavailable).
#[derive(Clone, Copy, Debug)]
pub struct Batch {
    /// Emits in the batch, all threads together.
    pub emits: u64,
    /// Nanoseconds from the release of the emitters to the last one's finish.
    pub wall_ns: u64,
    /// Nanoseconds the emitter threads were on a CPU in their emit loops,
    /// summed over the threads.
    pub cpu_ns: Option<u64>,
}

/// The clocks of every batch one multi-emitter bench function timed, so
/// that CPU time per emit can be reported beside the wall time criterion
/// reports. Recorded once per batch, after the clock stops.
///
/// On a machine with fewer cores than threads, wall time includes the time
/// emitters wait for a core; CPU time does not, so it shows what the
/// protocol itself costs (CPU time ÷ wall time is the number of cores the
/// emitters kept busy). A thread asleep on a lock is off-CPU too: for
/// `Mutex<VecDeque>` the CPU figure leaves out lock waits that end in a
/// sleep (std's mutex spins briefly first, which counts).
#[derive(Debug, Default)]
pub struct Clocks {
    batches: Mutex<Vec<Batch>>,
}

impl Clocks {
    /// Records one timed batch.
    pub fn record(&self, batch: Batch) {
        self.batches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(batch);
    }

    /// The line the emit bench prints per multi-emitter function (`None`
    /// if the function never ran): the median wall and CPU nanoseconds per
    /// emit over the last [`SAMPLE_SIZE`] batches (criterion's samples;
    /// the wall median is the one criterion reports), the range of the
    /// per-batch CPU figures, and the number of emitter threads:
    ///
    /// `per emit over the last 20 batches, median: wall 14.213 ns, cpu
    /// 25.101 ns; cpu range 20.001 to 30.100 ns; 2 emitters` (one line), or
    /// `…: wall 14.213 ns, cpu unavailable; 2 emitters` without a CPU clock.
    pub fn line(&self, threads: usize) -> Option<String> {
        let batches = self.batches.lock().unwrap_or_else(PoisonError::into_inner);
        let samples = &batches[batches.len().saturating_sub(SAMPLE_SIZE)..];
        let per_emit = |ns: u64, emits: u64| ns as f64 / emits.max(1) as f64;
        let wall: Vec<f64> = samples
            .iter()
            .map(|batch| per_emit(batch.wall_ns, batch.emits))
            .collect();
        let cpu: Option<Vec<f64>> = samples
            .iter()
            .map(|batch| batch.cpu_ns.map(|ns| per_emit(ns, batch.emits)))
            .collect();
        let wall = median(wall)?;
        let cpu = match cpu.and_then(|cpu| {
            let low = cpu.iter().copied().fold(f64::INFINITY, f64::min);
            let high = cpu.iter().copied().fold(0.0, f64::max);
            median(cpu).map(|mid| (mid, low, high))
        }) {
            Some((mid, low, high)) => {
                format!("cpu {mid:.3} ns; cpu range {low:.3} to {high:.3} ns")
            }
            None => "cpu unavailable".to_owned(),
        };
        Some(format!(
            "per emit over the last {} batches, median: wall {wall:.3} ns, {cpu}; {threads} emitters",
            samples.len()
        ))
    }
}

/// The median of `values` (the mean of the middle two for an even count,
/// as criterion computes it), or `None` if there are none.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    match values.len() {
        0 => None,
        n if n % 2 == 1 => Some(values[mid]),
        _ => Some((values[mid - 1] + values[mid]) / 2.0),
    }
}

/// Runs `threads` threads that together call `emit` `iters` times, released
/// at once by a barrier; returns the wall time from release to the last
/// thread's finish. Each thread counts its refused emits and reads its own
/// CPU clock around its emit loop; after the clock stops the batch is added
/// to `lost` and recorded in `clocks`.
pub fn timed_emitters<E: Emit>(
    target: &E,
    payload: &[u8],
    threads: usize,
    iters: u64,
    lost: &Lost,
    clocks: &Clocks,
) -> Duration {
    let barrier = Barrier::new(threads + 1);
    let (elapsed, refused, cpu_ns) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads as u64)
            .map(|t| {
                let share = iters / threads as u64 + u64::from(t < iters % threads as u64);
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let cpu_before = thread_cpu_ns();
                    let mut refused = 0u64;
                    for _ in 0..share {
                        refused += u64::from(!target.emit(std::hint::black_box(payload)));
                    }
                    let cpu = cpu_before
                        .zip(thread_cpu_ns())
                        .map(|(before, after)| after.saturating_sub(before));
                    (refused, cpu)
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut refused = 0u64;
        let mut cpu_ns = Some(0u64);
        for handle in handles {
            let (thread_refused, thread_cpu) = handle.join().expect("emitter panicked");
            refused += thread_refused;
            cpu_ns = cpu_ns.zip(thread_cpu).map(|(sum, ns)| sum + ns);
        }
        (start.elapsed(), refused, cpu_ns)
    });
    lost.add(iters, refused);
    clocks.record(Batch {
        emits: iters,
        wall_ns: u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
        cpu_ns,
    });
    elapsed
}

/// Nanoseconds the calling thread has spent on a CPU
/// (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`), or `None` off Linux.
///
/// `/proc/thread-self/schedstat` is no substitute: it advances only at
/// scheduler ticks, so short samples read as zero.
#[cfg(target_os = "linux")]
pub fn thread_cpu_ns() -> Option<u64> {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, time: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut time = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` is the C library's (std links it on Linux);
    // `time` is a valid, writable `struct timespec` (two 64-bit fields on
    // 64-bit Linux) for the duration of the call.
    let status = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut time) };
    (status == 0).then(|| time.tv_sec as u64 * 1_000_000_000 + time.tv_nsec as u64)
}

/// Nanoseconds the calling thread has spent on a CPU, or `None` off Linux.
#[cfg(not(target_os = "linux"))]
pub fn thread_cpu_ns() -> Option<u64> {
    None
}

/// Resident set size of this process in bytes (`/proc/self/statm`), or
/// `None` where that is unavailable.
pub fn resident_bytes() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}
