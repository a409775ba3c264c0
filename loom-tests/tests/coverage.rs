#![cfg(loom)]
//! Model 7: `coverage()` and `replay_after()` agree while an emitter laps.
//!
//! The ring is filled, then one emitter writes the next seq over the oldest
//! record while the main thread asks, for one cursor, `coverage` then
//! `replay_after` then `coverage` again. Both answers validate against the
//! same claim word, which a writer advances before it overwrites anything,
//! so in every interleaving:
//!
//! - if `coverage` said `Gap`, the replay that follows is a `Gap` too, with
//!   `first_retained` at least as far on (an uncovered cursor never becomes
//!   covered);
//! - if the replay returned events, the `coverage` before it said `Covered`,
//!   and the replay reaches at least its `last`;
//! - after a replay `Gap` with `first_retained = f`, a later `coverage` is a
//!   `Gap` with `first_retained >= f` (a replay never reports a gap the
//!   cheap check would not confirm).
//!
//! It runs for the two ways a record is overwritten (see model 2): a slot
//! lap (two slots) and an arena lap (four slots, the new record wrapping
//! over the first arena word), and for cursors 0 and 1.
//!
//! Emitters pass a `gapless_loom_tests::Gate` before emitting and the main
//! thread looks at it before each observation, so that loom also explores
//! the orders where an emitter runs first (see `Gate` for the loom
//! limitation this works around). Each test also asserts that its
//! interesting outcomes were all reached (`Outcomes`), so it cannot pass
//! vacuously.

use gapless::{Coverage, Event, ReplayError, Ring};
use gapless_loom_tests::{payload, tiny_ring, Emitted, Gate, Outcomes};
use loom::thread;
use std::sync::Arc;

/// Fills a ring with `prefill` (payload lengths), then emits `len` bytes on
/// another thread while the main thread checks `cursor`; names the outcome.
fn check_agreement(ring: Ring, prefill: &[usize], len: usize, cursor: u64) -> &'static str {
    let ring = Arc::new(ring);
    let gate = Arc::new(Gate::default());
    let mut emitted = Emitted::prefill(&ring, 0, prefill);
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
    let before = ring.coverage(cursor);
    gate.look();
    let replay = ring.replay_after(cursor);
    gate.look();
    let after = ring.coverage(cursor);

    let (result, bytes) = emitter.join().expect("emitter panicked");
    emitted.record(result, bytes);
    emitted.assert_dense();

    match (&before, &replay) {
        (Coverage::Gap(said), Err(ReplayError::Gap(got))) => assert!(
            got.first_retained >= said.first_retained,
            "coverage said {said:?}, the replay after it {got:?}"
        ),
        (Coverage::Gap(said), other) => {
            panic!("coverage said {said:?}, the replay after it {other:?}")
        }
        (Coverage::Covered { last, .. }, Ok(events)) => {
            assert_replay(cursor, events, &emitted);
            let reached = cursor + events.len() as u64;
            assert!(reached >= *last, "covered to {last}, replayed to {reached}");
        }
        (Coverage::Covered { .. }, Err(ReplayError::Gap(_))) => {}
        (before, replay) => panic!("unexpected answers: {before:?}, then {replay:?}"),
    }
    if let Err(ReplayError::Gap(got)) = &replay {
        match &after {
            Coverage::Gap(said) => assert!(
                said.first_retained >= got.first_retained,
                "the replay reported {got:?}, the coverage after it {said:?}"
            ),
            other => panic!("the replay reported {got:?}, the coverage after it {other:?}"),
        }
    }

    match (before, replay) {
        (Coverage::Gap(_), _) => "gap, gap",
        (_, Err(_)) => "covered, gap",
        (_, Ok(_)) => "covered, replayed",
    }
}

/// A successful replay after `cursor` is `cursor + 1 ..` in order, intact.
fn assert_replay(cursor: u64, events: &[Event], emitted: &Emitted) {
    for (expected, event) in (cursor + 1..).zip(events) {
        assert_eq!(event.seq, expected, "replay is not contiguous");
        emitted.assert_intact(event);
    }
}

#[test]
fn coverage_agrees_with_replay_across_a_slot_lap() {
    for cursor in [0, 1] {
        let outcomes = Outcomes::default();
        let tally = outcomes.clone();
        loom::model(move || {
            // Two slots, 32 words: seq 3 takes seq 1's slot, no word reused.
            tally.record(check_agreement(tiny_ring(2, 256), &[8, 8], 8, cursor));
        });
        let expected: &[&str] = if cursor == 0 {
            &["gap, gap", "covered, gap", "covered, replayed"]
        } else {
            // Seq 2 is never overwritten: cursor 1 is always covered.
            &["covered, replayed"]
        };
        outcomes.assert_seen(&format!("slot lap, cursor {cursor}"), expected);
    }
}

#[test]
fn coverage_agrees_with_replay_across_an_arena_lap() {
    for cursor in [0, 1] {
        let outcomes = Outcomes::default();
        let tally = outcomes.clone();
        loom::model(move || {
            // Four slots, 16 words (a window of 8): seq 1 is word 0, seq 2
            // words 1..=8, seq 3 words 9..=16, over word 0: seq 1 is
            // evicted, seq 2 is in the reserve.
            tally.record(check_agreement(tiny_ring(4, 128), &[8, 64], 64, cursor));
        });
        let expected: &[&str] = if cursor == 0 {
            &["gap, gap", "covered, gap", "covered, replayed"]
        } else {
            &["covered, replayed"]
        };
        outcomes.assert_seen(&format!("arena lap, cursor {cursor}"), expected);
    }
}
