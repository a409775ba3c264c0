//! Model-based test: random operation sequences on a real ring and on a
//! plain `BTreeMap` reference model with the same eviction rule
//! (`tests/model/`) must give identical results.

mod model;

use gapless::{Config, Coverage, Ring};
use model::Model;
use proptest::prelude::*;

/// One step. Cursors and seqs are chosen relative to the ring's head so that
/// most land in or near the retained window.
#[derive(Clone, Debug)]
enum Op {
    Emit { len: usize, fill: u8 },
    EmitBatch { lens: Vec<usize>, fill: u8 },
    Replay { back: u64 },
    ReplayRange { back: u64, count: u64 },
    Coverage { back: u64 },
    Read { back: u64 },
}

/// Payload lengths: empty, tiny, word-edge, and up to (and past) the
/// largest arena in the configs below, so records wrap the arena and some
/// are refused.
fn length() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0usize),
        1usize..=16,
        prop::sample::select(vec![7usize, 8, 9, 15, 16, 17, 56, 57, 63, 64, 65]),
        0usize..=1100,
    ]
}

fn back() -> impl Strategy<Value = u64> {
    // back = how far below head (values above head: cursor ahead of it).
    prop_oneof![0u64..=40, Just(u64::MAX)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (length(), any::<u8>()).prop_map(|(len, fill)| Op::Emit { len, fill }),
        1 => (prop::collection::vec(length(), 0..6), any::<u8>())
            .prop_map(|(lens, fill)| Op::EmitBatch { lens, fill }),
        3 => back().prop_map(|back| Op::Replay { back }),
        1 => (back(), 0u64..8).prop_map(|(back, count)| Op::ReplayRange { back, count }),
        2 => back().prop_map(|back| Op::Coverage { back }),
        2 => back().prop_map(|back| Op::Read { back }),
    ]
}

/// A cursor `back` below `head`; `u64::MAX` means a few past it.
fn cursor(head: u64, back: u64) -> u64 {
    if back == u64::MAX {
        head + 1 + head % 3
    } else {
        head.saturating_sub(back)
    }
}

/// A payload whose bytes depend on position, fill and length, so a mix-up
/// of records or offsets shows.
fn payload(len: usize, fill: u8) -> Vec<u8> {
    (0..len)
        .map(|i| fill.wrapping_add((i as u8).wrapping_mul(31)) ^ (len as u8))
        .collect()
}

fn run(events: usize, bytes: usize, base: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    let config = Config::default()
        .events(events)
        .bytes(bytes)
        .start_after(base);
    let ring = Ring::try_new(config).unwrap();
    let mut model = Model::new(&ring);
    // The oldest retained seq as last seen: eviction only moves it on.
    let mut known_first = base + 1;
    for op in ops {
        match op {
            Op::Emit { len, fill } => {
                let p = payload(*len, *fill);
                prop_assert_eq!(ring.emit(&p), model.emit(&p), "{:?}", op);
            }
            Op::EmitBatch { lens, fill } => {
                let owned: Vec<Vec<u8>> = lens.iter().map(|&l| payload(l, *fill)).collect();
                let refs: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
                let expected = model.emit_batch(&refs);
                prop_assert_eq!(ring.emit_batch(&refs), expected, "{:?}", op);
            }
            Op::Replay { back } => {
                let c = cursor(model.head, *back);
                prop_assert_eq!(
                    ring.replay_after(c),
                    model.replay_range(c, u64::MAX),
                    "{:?}",
                    op
                );
            }
            Op::ReplayRange { back, count } => {
                let c = cursor(model.head, *back);
                let last = c.saturating_add(*count);
                let expected = model.replay_range(c, last);
                prop_assert_eq!(ring.replay_range(c, last), expected.clone(), "{:?}", op);
                // The batch form: the same events, borrowed from one buffer.
                let batch = ring.replay_batch(c, last);
                let borrowed = batch
                    .as_ref()
                    .map(|replay| {
                        replay
                            .iter()
                            .map(|(seq, payload)| (seq, payload.to_vec()))
                            .collect::<Vec<_>>()
                    })
                    .map_err(|error| *error);
                let owned = expected.map(|events| {
                    events
                        .into_iter()
                        .map(|event| (event.seq, event.payload.to_vec()))
                        .collect::<Vec<_>>()
                });
                prop_assert_eq!(borrowed, owned.clone(), "{:?}", op);
                // Into a buffer that held other bytes: the same events, and
                // each one shared from it the same too.
                let stale = vec![0xA5_u8; 3 * 8 + 5];
                let shared = ring.replay_batch_in(c, last, stale).map(|replay| {
                    (0..=replay.len())
                        .map(|i| replay.share(i).map(|payload| payload.to_vec()))
                        .collect::<Vec<_>>()
                });
                let expected_shared = owned.clone().map(|events| {
                    let mut payloads: Vec<_> = events.into_iter().map(|(_, p)| Some(p)).collect();
                    payloads.push(None);
                    payloads
                });
                prop_assert_eq!(shared, expected_shared, "{:?}", op);
                let seqs = batch.as_ref().ok().map(|replay| replay.seqs());
                let expected_seqs = owned
                    .ok()
                    .map(|events| events.first().zip(events.last()).map(|(a, b)| a.0..=b.0));
                prop_assert_eq!(seqs, expected_seqs, "{:?}", op);
            }
            Op::Coverage { back } => {
                let c = cursor(model.head, *back);
                let coverage = ring.coverage(c);
                prop_assert_eq!(coverage, model.coverage(c), "{:?}", op);
                // Coverage and replay agree.
                prop_assert_eq!(coverage.is_covered(), ring.replay_after(c).is_ok());
                // The rule a copy of the history answers by (a Redis read,
                // a store's window) gives the ring's answer from its
                // bounds alone.
                prop_assert_eq!(
                    Coverage::of_retained(c, ring.first_retained(), ring.published()),
                    coverage,
                    "{:?}",
                    op
                );
            }
            Op::Read { back } => {
                let seq = cursor(model.head, *back);
                prop_assert_eq!(ring.read(seq), model.read(seq), "{:?}", op);
            }
        }
        prop_assert_eq!(ring.published(), model.head);
        let first_retained = ring.first_retained();
        prop_assert_eq!(first_retained, model.gap(0).first_retained.max(1));
        // Searched up from the last answer, or from below it: the same.
        prop_assert_eq!(ring.first_retained_from(known_first), first_retained);
        prop_assert_eq!(ring.first_retained_from(known_first / 2), first_retained);
        known_first = first_retained;
    }
    let stats = ring.stats();
    prop_assert_eq!((stats.wrap_waits, stats.waiting_emitters), (0, 0));
    prop_assert_eq!(stats.claimed, model.head);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000),
        ..ProptestConfig::default()
    })]

    /// Random configs (2..=67 events and 64..=1024 bytes, powers of two
    /// or not; starting at seq 1 or after a restored seq) and up to 200
    /// random operations: the ring and the model never disagree.
    #[test]
    fn ring_matches_the_btreemap_model(
        events in prop::sample::select(vec![2usize, 3, 4, 5, 7, 8, 13, 16, 20, 32, 67]),
        bytes in prop::sample::select(vec![64usize, 72, 100, 128, 200, 256, 1000, 1024]),
        base in prop_oneof![3 => Just(0u64), 1 => 1u64..40, 1 => Just((1u64 << 24) - 3), 1 => Just(gapless::config::MAX_START - 1000)],
        ops in prop::collection::vec(op(), 1..200),
    ) {
        run(events, bytes, base, &ops)?;
    }
}

#[test]
fn the_model_itself_evicts_by_words_and_by_slots() {
    // Guard against a model that agrees with the ring by never evicting.
    // bytes(64): an 8-word arena; nine 1-word records run one over.
    let ring = Ring::new(Config::default().events(64).bytes(64));
    let mut model = Model::new(&ring);
    for _ in 0..9 {
        model.emit(&[1; 8]).unwrap();
    }
    assert_eq!(model.evicted_through(), 1);
    assert!(matches!(model.coverage(0), Coverage::Gap(g) if g.first_retained == 2));
    let ring = Ring::new(Config::default().events(4).bytes(1024));
    let mut model = Model::new(&ring);
    for _ in 0..6 {
        model.emit(b"").unwrap();
    }
    assert_eq!(model.evicted_through(), 2);
}
