//! Scenario (d): `coverage(cursor)` time against the distance between the
//! cursor and the head: 10, 100, 1k, 10k and 100k events.
//!
//! - `covered/N`: a ring of 131,072 events holding 120,000 (none evicted),
//!   cursor `published - N`: the answer is `Covered`.
//! - `gap/N`: a ring of 2 events after 200,000 emits, cursor
//!   `published - N`: the answer is `Gap` with `N - 2` evicted.
//!
//! `coverage` reads the watermark, the end floor, the claim word and one
//! slot whatever N is (a gap adds an O(log events) search for the oldest
//! retained seq); flat lines are the claim. The rings are filled once
//! before the group; the bench prints how many of those emits were lost
//! ("lost emits: 0 of N").

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use gapless::Coverage;
use std::hint::black_box;

mod peers;

const GAPS: [u64; 5] = [10, 100, 1_000, 10_000, 100_000];

fn coverage(c: &mut Criterion) {
    let payload = 42u64.to_le_bytes();
    let wide = peers::gapless(1 << 17, 2 << 20);
    let wide_lost = peers::fill(&wide, &payload, 120_000);
    let narrow = peers::gapless(2, 64);
    let narrow_lost = peers::fill(&narrow, &payload, 200_000);

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
    eprintln!("coverage covered ring: {}", wide_lost.line());
    eprintln!("coverage gap ring: {}", narrow_lost.line());
}

criterion_group! {
    name = benches;
    config = peers::criterion();
    targets = coverage
}
criterion_main!(benches);
