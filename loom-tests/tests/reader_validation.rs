#![cfg(loom)]
//! Model 2: an emitter overwrites a record in the middle of a reader's
//! copy; the reader reports the eviction or returns the right bytes, never
//! torn ones.
//!
//! The ring is filled before the threads start, then one emitter writes the
//! next seq over the oldest record while the main thread replays from
//! cursor 0. Two geometries isolate the two ways a record is overwritten:
//!
//! - **arena lap**: four slots, so no slot is reused, but the new record's
//!   words wrap onto the first word of the arena, over seq 1 (seq 2 is in
//!   the words reserve and stays intact). Only the claim word, which the
//!   writer advanced before (`fence(Release)`) its first store, can tell the
//!   reader (after its `fence(Acquire)`) that a word it copied was
//!   overwritten: the claimed words passed seq 1's position plus the arena.
//! - **slot lap**: two slots and plenty of arena, so the new seq takes seq
//!   1's slot and rewrites its location fields, but no payload word is
//!   reused. Only the claimed seqs, re-read after the copy, tell. Run with a
//!   non-empty and an empty new payload: the empty one writes no arena
//!   word, so only the emitter's own `fence(Release)` orders its claim
//!   before its location stores.
//!
//! - **odd arena lap**: the arena lap again on a ring of 3 slots and 11
//!   words, sizes taken as configured: the new record is split at the
//!   arena's end (positions wrap by remainder, not by mask).
//!
//! In all, every interleaving must end in either `Ok` with seqs
//! `1..=k`, byte for byte as emitted, or `ReplayError::Gap` for cursor 0
//! whose `first_retained` is 2.
//!
//! Emitters pass a `gapless_loom_tests::Gate` before emitting and the main
//! thread looks at it before each observation, so that loom also explores
//! the orders where an emitter runs first (see `Gate` for the loom
//! limitation this works around). Each test also asserts that its
//! interesting outcomes were all reached (`Outcomes`), so it cannot pass
//! vacuously.

use gapless::{Event, ReplayError, Ring};
use gapless_loom_tests::{payload, tiny_ring, Emitted, Gate, Outcomes};
use loom::thread;
use std::ops::RangeInclusive;
use std::sync::Arc;

/// Runs one emit of `len` bytes from emitter 1 against a replay from 0 on
/// the main thread; returns the replay and what was emitted.
fn lap_during_replay(
    ring: Ring,
    prefill_lens: &[usize],
    len: usize,
) -> (Result<Vec<Event>, ReplayError>, Emitted) {
    let ring = Arc::new(ring);
    let gate = Arc::new(Gate::default());
    let mut emitted = Emitted::prefill(&ring, 0, prefill_lens);
    let emitter = {
        let ring = Arc::clone(&ring);
        let gate = Arc::clone(&gate);
        thread::spawn(move || {
            let bytes = payload(1, 0, len);
            gate.pass();
            (ring.emit(&bytes), bytes)
        })
    };
    gate.look();
    let replay = ring.replay_after(0);
    let (result, bytes) = emitter.join().expect("emitter panicked");
    emitted.record(result, bytes);
    emitted.assert_dense();
    assert_eq!(ring.published(), emitted.claimed());
    (replay, emitted)
}

/// Asserts that `replay` (from cursor 0) is an intact prefix or a gap whose
/// first retained seq is in `first_retained_if_gap`; names the outcome.
fn assert_intact_or_gap(
    replay: Result<Vec<Event>, ReplayError>,
    emitted: &Emitted,
    first_retained_if_gap: RangeInclusive<u64>,
) -> &'static str {
    match replay {
        Ok(events) => {
            let seqs: Vec<u64> = events.iter().map(|event| event.seq).collect();
            let contiguous: Vec<u64> = (1..=seqs.len() as u64).collect();
            assert_eq!(seqs, contiguous, "replay is not a contiguous prefix");
            assert_eq!(seqs.len(), 2, "seq 3 can only publish after seq 1 is gone");
            for event in &events {
                emitted.assert_intact(event);
            }
            "ok"
        }
        Err(ReplayError::Gap(gap)) => {
            assert_eq!(gap.cursor, 0);
            assert!(
                first_retained_if_gap.contains(&gap.first_retained),
                "gap misstates what was overwritten: {gap:?}"
            );
            assert_eq!(gap.evicted, gap.first_retained - 1);
            if gap.first_retained == 2 {
                "gap past seq 1"
            } else {
                "gap past seq 2"
            }
        }
        Err(error) => panic!("unexpected replay error: {error}"),
    }
}

#[test]
fn reader_lapped_in_the_arena_gets_a_gap_or_intact_bytes() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        // Four slots: no slot is reused. Sixteen arena words, a window of
        // eight: seq 1 is word 0, seq 2 words 1..=8; seq 3 takes words
        // 9..=16, and word 16 is word 0 of the next lap, over seq 1.
        let (replay, emitted) = lap_during_replay(tiny_ring(4, 128), &[8, 64], 64);
        tally.record(assert_intact_or_gap(replay, &emitted, 2..=2));
    });
    outcomes.assert_seen("arena lap", &["ok", "gap past seq 1"]);
}

#[test]
fn reader_lapped_across_the_end_of_an_odd_arena_gets_a_gap_or_intact_bytes() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        // Sizes as configured, neither a power of two: three slots (a
        // window of two) and eleven arena words (a window of six). Seq 1 is
        // word 0, seq 2 words 1..=5; seq 3 takes words 6..=11, split at
        // the arena's end: virtual word 11 is word 11 mod 11 = 0, over
        // seq 1, and seq 2's words (the reserve) stay intact.
        let (replay, emitted) = lap_during_replay(tiny_ring(3, 88), &[8, 40], 48);
        tally.record(assert_intact_or_gap(replay, &emitted, 2..=2));
    });
    outcomes.assert_seen("odd arena lap", &["ok", "gap past seq 1"]);
}

#[test]
fn reader_lapped_in_the_slots_gets_a_gap_or_intact_bytes() {
    // The new seq's payload is 12 bytes (its location points at fresh
    // words) or empty (its location is `0, 0` and it writes no word at all,
    // so only the emitter's own `fence(Release)` orders the slot change
    // before the location change).
    for len in [12, 0] {
        let outcomes = Outcomes::default();
        let tally = outcomes.clone();
        loom::model(move || {
            // Two slots, 32 arena words: seq 3 takes seq 1's slot and words
            // 4..=5 (or none), so no payload word is reused.
            let (replay, emitted) = lap_during_replay(tiny_ring(2, 256), &[12, 12], len);
            tally.record(assert_intact_or_gap(replay, &emitted, 2..=2));
        });
        outcomes.assert_seen(
            &format!("slot lap by a {len}-byte payload"),
            &["ok", "gap past seq 1"],
        );
    }
}
