//! Scenario (c): replay bandwidth. 1,000 events of 1 KiB are retained in a
//! ring of 1024 events configured with `bytes(1024 × (1 KiB + 64))` (room
//! for every event, sized as the emit bench sizes its rings); one
//! `replay_after(0)` copies all of them out (1,024,000 bytes) into owned
//! `Bytes` (`gapless`: one allocation, an `Event` and a reference count per
//! event), and one `replay_batch(0, u64::MAX)` does the same copy into one
//! `Replay` whose payloads are borrowed slices (`gapless_batch`). The
//! references, on the same bytes (the same 1,000 payloads, back to back)
//! in the same run:
//!
//! - `memcpy`: `copy_from_slice` of 1,024,000 bytes into a buffer allocated
//!   once (the target's reference: replay should reach ≥ 0.7× this
//!   bandwidth),
//! - `memcpy_alloc`: `to_vec()` of the same bytes (a fresh allocation per
//!   replay, as `replay_after` makes),
//! - `mutex_vecdeque`: lock and clone the 1,000 `(seq, Bytes)` pairs (no
//!   payload bytes copied: reference counts only; other semantics, for
//!   scale).
//!
//! Throughput is in payload bytes per second. The ring is filled once
//! before the group (no emitter runs during it); the bench prints how many
//! of those emits were lost ("lost emits: 0 of 1000").

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;

mod peers;
use peers::MutexDeque;

/// Events retained and replayed.
const EVENTS: usize = 1000;
/// Bytes of each event's payload.
const PAYLOAD: usize = 1024;
/// Events the ring (and the mutex peer) is configured with: more than
/// [`EVENTS`], so that none is evicted.
const RING_EVENTS: usize = 1024;

/// The `replay/1000x1KiB` group.
fn replay(c: &mut Criterion) {
    let payload = peers::payload(PAYLOAD);
    let total = EVENTS * PAYLOAD;
    let ring_bytes = peers::room_for(RING_EVENTS, PAYLOAD);
    let ring = peers::gapless(RING_EVENTS, ring_bytes);
    let deque = MutexDeque::new(RING_EVENTS, ring_bytes);
    let lost = peers::fill(&ring, &payload, EVENTS as u64);
    for _ in 0..EVENTS {
        deque.push(&payload);
    }
    // Setup checks: a figure for fewer events or other bytes would not be
    // the replay of 1,024,000 bytes this bench reports.
    let all = ring
        .replay_after(0)
        .expect("the ring is sized to retain every event");
    assert_eq!(all.len(), EVENTS, "every event retained");
    assert!(
        all.iter()
            .all(|event| event.payload.as_ref() == payload.as_slice()),
        "every event replays its payload"
    );
    assert_eq!(deque.after(0).len(), EVENTS);
    let batch = ring
        .replay_batch(0, u64::MAX)
        .expect("the ring is sized to retain every event");
    assert_eq!(batch.len(), EVENTS, "every event in the batch");
    assert!(
        batch.iter().all(|(_, bytes)| bytes == payload.as_slice()),
        "every event in the batch is its payload"
    );

    let source: Vec<u8> = payload.iter().copied().cycle().take(total).collect();
    let mut destination = vec![0u8; total];

    let mut group = c.benchmark_group("replay/1000x1KiB");
    group.throughput(Throughput::Bytes(total as u64));
    group.bench_function("gapless", |b| {
        b.iter(|| black_box(ring.replay_after(black_box(0)).expect("retained")))
    });
    group.bench_function("gapless_batch", |b| {
        b.iter(|| black_box(ring.replay_batch(black_box(0), u64::MAX).expect("retained")))
    });
    group.bench_function("memcpy", |b| {
        b.iter(|| {
            destination.copy_from_slice(black_box(&source));
            black_box(&mut destination);
        })
    });
    group.bench_function("memcpy_alloc", |b| {
        b.iter(|| black_box(black_box(&source).to_vec()))
    });
    group.bench_function("mutex_vecdeque", |b| {
        b.iter(|| black_box(deque.after(black_box(0))))
    });
    group.finish();
    eprintln!("replay/1000x1KiB gapless: {}", lost.line());
}

criterion_group! {
    name = benches;
    config = peers::criterion();
    targets = replay
}
criterion_main!(benches);
