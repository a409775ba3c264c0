//! The ring against its reference model, on tiny rings.
//!
//! The input picks a ring (2..=70 events, 64..=1024 bytes, any size, so that records
//! wrap the arena and evict constantly; starting at seq 1 or after any seq
//! up to `MAX_START`, as a restored ring does) and a sequence of operations: emits
//! of odd sizes (empty, word edges, fractions of the arena, up to and past
//! the largest payload), batches (up to past the window), and replays,
//! ranges, coverage checks and reads at cursors near the head or anywhere in
//! `u64`. Every result, and the watermark and stats after every step, must
//! equal the reference model's (`tests/model/`, the same model
//! `tests/ring_model.rs` uses). Emit never fails but for size: every emit
//! of a payload that fits returns `Ok` with the next seq, and no emitter
//! ever waits (a single thread is never a window ahead of itself).

#![no_main]

#[allow(dead_code)]
#[path = "../../tests/model/mod.rs"]
mod model;

use arbitrary::Arbitrary;
use gapless::{Config, Ring};
use libfuzzer_sys::fuzz_target;
use model::Model;
use std::num::NonZeroU64;

#[derive(Arbitrary, Debug)]
struct Input {
    /// Mapped into 2..=70.
    events: u8,
    /// Mapped into 64..=1024.
    bytes: u16,
    /// The seq the ring starts after (`Config::start_after`), mapped into
    /// 0..=MAX_START.
    base: u64,
    ops: Vec<Op>,
}

#[derive(Arbitrary, Debug)]
enum Op {
    Emit { len: Len, fill: u8 },
    EmitBatch { lens: Vec<Len>, fill: u8 },
    Replay { cursor: Cursor },
    ReplayRange { cursor: Cursor, last: Last },
    Coverage { cursor: Cursor },
    Read { seq: Cursor },
}

/// A payload length, mostly relative to the ring's geometry.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Len {
    Zero,
    /// 1..=16 bytes.
    Small(u8),
    /// A word edge: 7, 8, 9, 15, 16, 17, 63, 64, 65, ...
    WordEdge(u8),
    /// `k` sixteenths of the arena plus or minus a few bytes.
    ArenaFraction {
        sixteenths: u8,
        delta: i8,
    },
    /// `max_payload` plus or minus a few bytes (past it: refused).
    NearMax(i8),
    /// Anything up to the arena's size plus a sixteenth.
    Any(u16),
}

/// A cursor or seq.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Cursor {
    /// `back` below the model's head (saturating at 0).
    Back(u8),
    /// `1 + n` past the head: never published.
    Ahead(u8),
    /// Anything.
    Raw(u64),
}

/// The `last` of a `replay_range`.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Last {
    /// `count` after the cursor (saturating).
    Count(u8),
    /// Relative to the head, like a cursor.
    At(Cursor),
    Max,
}

const WORD_EDGES: [usize; 14] = [1, 7, 8, 9, 15, 16, 17, 55, 56, 57, 63, 64, 65, 127];

struct Shape {
    max_payload: usize,
    sixteenth: usize,
    arena_bytes: usize,
}

impl Len {
    fn resolve(self, shape: &Shape) -> usize {
        let offset = |base: usize, delta: i64| (base as i64 + delta).max(0) as usize;
        match self {
            Len::Zero => 0,
            Len::Small(n) => 1 + usize::from(n % 16),
            Len::WordEdge(i) => WORD_EDGES[usize::from(i) % WORD_EDGES.len()],
            Len::ArenaFraction { sixteenths, delta } => offset(
                shape.sixteenth * usize::from(sixteenths % 17),
                i64::from(delta % 9),
            ),
            Len::NearMax(delta) => offset(shape.max_payload, i64::from(delta % 17)),
            Len::Any(n) => usize::from(n) % (shape.arena_bytes + shape.sixteenth + 1),
        }
    }
}

impl Cursor {
    fn resolve(self, head: u64) -> u64 {
        match self {
            Cursor::Back(back) => head.saturating_sub(u64::from(back)),
            Cursor::Ahead(n) => head + 1 + u64::from(n),
            Cursor::Raw(raw) => raw,
        }
    }
}

/// A payload whose bytes depend on position, fill and length, so that a
/// mix-up of records, offsets or lengths shows.
fn payload(len: usize, fill: u8) -> Vec<u8> {
    (0..len)
        .map(|i| fill.wrapping_add((i as u8).wrapping_mul(31)) ^ (len as u8) ^ ((i >> 8) as u8))
        .collect()
}

fuzz_target!(|input: Input| {
    // Sizes as configured, powers of two or not: 2..=70 events (from 64
    // up rounded to a multiple of 4) and 64..=1024 bytes (to a word).
    let events = 2 + usize::from(input.events % 69);
    let bytes = 64 + usize::from(input.bytes % 961);
    let base = match input.base % 4 {
        0 => 0,
        _ => input.base % (gapless::config::MAX_START + 1),
    };
    let config = Config::default()
        .events(events)
        .bytes(bytes)
        .start_after(base)
        .epoch(NonZeroU64::new(0x00c0_ffee_1234_5678).unwrap());
    let ring = Ring::try_new(config).expect("2..=70 events and 64..=1024 bytes are valid");
    let mut model = Model::new(&ring);
    let g = ring.geometry();
    let shape = Shape {
        max_payload: ring.max_payload(),
        sixteenth: g.arena_bytes() / 16,
        arena_bytes: g.arena_bytes(),
    };
    assert_eq!(shape.max_payload, model.max_payload);

    for (step, op) in input.ops.iter().enumerate() {
        let head = model.head;
        match op {
            Op::Emit { len, fill } => {
                let p = payload(len.resolve(&shape), *fill);
                assert_eq!(
                    ring.emit(&p),
                    model.emit(&p),
                    "step {step}: {op:?} on {g:?}; len {}",
                    p.len()
                );
            }
            Op::EmitBatch { lens, fill } => {
                let owned: Vec<Vec<u8>> = lens
                    .iter()
                    .enumerate()
                    .map(|(i, len)| payload(len.resolve(&shape), fill.wrapping_add(i as u8)))
                    .collect();
                let refs: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
                let expected = model.emit_batch(&refs);
                assert_eq!(
                    ring.emit_batch(&refs),
                    expected,
                    "step {step}: {op:?} on {g:?}"
                );
            }
            Op::Replay { cursor } => {
                let c = cursor.resolve(head);
                let replay = ring.replay_after(c);
                assert_eq!(
                    replay,
                    model.replay_range(c, u64::MAX),
                    "step {step}: {op:?} on {g:?}; cursor {c}"
                );
                // Coverage and replay agree.
                assert_eq!(
                    ring.coverage(c).is_covered(),
                    replay.is_ok(),
                    "step {step}: coverage and replay disagree at cursor {c} on {g:?}"
                );
            }
            Op::ReplayRange { cursor, last } => {
                let c = cursor.resolve(head);
                let last = match last {
                    Last::Count(n) => c.saturating_add(u64::from(*n)),
                    Last::At(at) => at.resolve(head),
                    Last::Max => u64::MAX,
                };
                assert_eq!(
                    ring.replay_range(c, last),
                    model.replay_range(c, last),
                    "step {step}: {op:?} on {g:?}; cursor {c} last {last}"
                );
            }
            Op::Coverage { cursor } => {
                let c = cursor.resolve(head);
                let coverage = ring.coverage(c);
                assert_eq!(
                    coverage,
                    model.coverage(c),
                    "step {step}: {op:?} on {g:?}; cursor {c}"
                );
                assert_eq!(
                    coverage.is_covered(),
                    ring.replay_after(c).is_ok(),
                    "step {step}: coverage and replay disagree at cursor {c} on {g:?}"
                );
            }
            Op::Read { seq } => {
                let s = seq.resolve(head);
                assert_eq!(
                    ring.read(s),
                    model.read(s),
                    "step {step}: {op:?} on {g:?}; seq {s}"
                );
            }
        }
        // After every step: the watermark and the counters.
        let first_retained = model.gap(0).first_retained;
        assert_eq!(
            ring.published(),
            model.head,
            "after step {step}: {op:?} on {g:?}"
        );
        assert_eq!(
            ring.first_retained(),
            first_retained,
            "after step {step}: {op:?} on {g:?}"
        );
        let stats = ring.stats();
        // `Stats` is non-exhaustive: compared field by field.
        let seen = (
            stats.claimed,
            stats.published,
            stats.evicted,
            stats.first_retained,
            (
                stats.wrap_waits,
                stats.wrap_wait_nanos,
                stats.waiting_emitters,
            ),
        );
        let expected = (
            model.head,
            model.head,
            first_retained - 1,
            first_retained,
            // A single thread never waits at the wrap.
            (0, 0, 0),
        );
        assert_eq!(seen, expected, "after step {step}: {op:?} on {g:?}");
    }
});
