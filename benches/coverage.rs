//! Scenario (d): `coverage(cursor)` time against the distance between the
//! cursor and the head: 10, 100, 1k, 10k and 100k events.
//!
//! - `covered/N`: a ring of 131,072 events holding 120,000 (none evicted),
//!   cursor `published - N`: the answer is `Covered`.
//! - `gap/N`: a ring of 2 events after 200,000 emits, cursor
//!   `published - N`: the answer is `Gap` with `N - 2` evicted.
//!
//! `coverage` reads three counters whatever N is; flat lines are the claim.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use gapless::Coverage;
use std::hint::black_box;

mod peers;

const GAPS: [u64; 5] = [10, 100, 1_000, 10_000, 100_000];

fn coverage(c: &mut Criterion) {
    let payload = 42u64.to_le_bytes();
    let wide = peers::gapless(1 << 17, 2 << 20);
    for _ in 0..120_000 {
        wide.emit(&payload).expect("fits");
    }
    let narrow = peers::gapless(2, 64);
    for _ in 0..200_000 {
        narrow.emit(&payload).expect("fits");
    }

    let mut group = c.benchmark_group("coverage");
    for gap in GAPS {
        let cursor = wide.published() - gap;
        assert!(matches!(wide.coverage(cursor), Coverage::Covered { .. }));
        group.bench_with_input(BenchmarkId::new("covered", gap), &cursor, |b, &cursor| {
            b.iter(|| black_box(wide.coverage(black_box(cursor))))
        });
    }
    for gap in GAPS {
        let cursor = narrow.published() - gap;
        assert!(
            matches!(narrow.coverage(cursor), Coverage::Gap(g) if g.evicted == gap - 2),
            "{:?}",
            narrow.coverage(cursor)
        );
        group.bench_with_input(BenchmarkId::new("gap", gap), &cursor, |b, &cursor| {
            b.iter(|| black_box(narrow.coverage(black_box(cursor))))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = peers::criterion();
    targets = coverage
}
criterion_main!(benches);
