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
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

/// Short runs: the whole `cargo bench` stays within a few minutes.
pub fn criterion() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
        .noise_threshold(0.05)
}

/// The server's default ring: 4096 events, 4 MiB of payload.
pub const SERVER_EVENTS: usize = 4096;
/// The server's default ring: 4096 events, 4 MiB of payload (gapless's
/// `bytes`, whose arena is twice that with the reserve; the peers' byte
/// bound). At the payload sizes benched, 4096 events bind first.
pub const SERVER_BYTES: usize = 4 << 20;

/// Payload sizes of the single-emitter scenario, with their labels.
pub const PAYLOADS: [(usize, &str); 3] = [(64, "64B"), (256, "256B"), (1024, "1KiB")];

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

/// gapless with the given capacities: `events` events, payloads of up to
/// `bytes` bytes (an arena of twice that).
pub fn gapless(events: usize, bytes: usize) -> Ring {
    Ring::new(Config::default().events(events).bytes(bytes))
}

/// gapless's single-writer mode with the same capacities as [`gapless`].
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

/// The ceiling: an unsynchronized single-threaded ring with the same index
/// and byte bounds, `&mut self`, one `memcpy` per emit.
pub struct Unsync {
    arena: Vec<u8>,
    byte_mask: usize,
    /// `(position, len)` per retained seq, at `seq & event_mask`.
    index: Vec<(u64, u32)>,
    event_mask: u64,
    head: u64,
    tail: u64,
}

impl Unsync {
    /// `events` and `bytes` are powers of two.
    pub fn new(events: usize, bytes: usize) -> Self {
        assert!(events.is_power_of_two() && bytes.is_power_of_two());
        Self {
            arena: vec![0; bytes],
            byte_mask: bytes - 1,
            index: vec![(0, 0); events],
            event_mask: events as u64 - 1,
            head: 0,
            tail: 0,
        }
    }

    /// Appends a copy of `payload` (at most the arena's size) and returns
    /// its seq.
    pub fn emit(&mut self, payload: &[u8]) -> u64 {
        self.head += 1;
        let start = self.tail as usize & self.byte_mask;
        let first = payload.len().min(self.arena.len() - start);
        self.arena[start..start + first].copy_from_slice(&payload[..first]);
        self.arena[..payload.len() - first].copy_from_slice(&payload[first..]);
        self.index[(self.head & self.event_mask) as usize] = (self.tail, payload.len() as u32);
        self.tail += payload.len() as u64;
        self.head
    }
}

/// Runs `threads` threads that together call `emit` `iters` times, released
/// at once by a barrier; returns the wall time from release to the last
/// thread's finish. Each thread counts its refused emits locally; the batch
/// is added to `lost` after the clock stops.
pub fn timed_emitters<E: Emit>(
    target: &E,
    payload: &[u8],
    threads: usize,
    iters: u64,
    lost: &Lost,
) -> Duration {
    let barrier = Barrier::new(threads + 1);
    let (elapsed, refused) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads as u64)
            .map(|t| {
                let share = iters / threads as u64 + u64::from(t < iters % threads as u64);
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let mut refused = 0u64;
                    for _ in 0..share {
                        refused += u64::from(!target.emit(std::hint::black_box(payload)));
                    }
                    refused
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let refused: u64 = handles
            .into_iter()
            .map(|handle| handle.join().expect("emitter panicked"))
            .sum();
        (start.elapsed(), refused)
    });
    lost.add(iters, refused);
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
