#![cfg(loom)]
//! Model 12: `first_retained_from(hint)`, the search that gallops up from
//! an earlier answer, while an emitter laps the oldest record.
//!
//! The ring is filled, then one emitter writes the next seq over the oldest
//! record(s) while the main thread asks `first_retained_from(hint)`, the
//! hint being the oldest retained before the lap. In every interleaving the
//! answer is the oldest retained seq at some instant of the call: the hint
//! before the lap, the oldest after it once it is done. It is never below the hint, and never above what a search from
//! scratch says once the emitter is done (an answer too far on would have a
//! writer forget the size of a message its ring still holds, and charge it
//! less than it holds).
//!
//! It runs for the two ways a record is overwritten (see model 2): a slot
//! lap (two slots) and an arena lap (four slots, the new record wrapping
//! over the first arena word), and for an arena lap where the hint is above
//! the search's own lower bound, so that it gallops. Each asserts that both answers were reached
//! (`Outcomes`), so it cannot pass vacuously.

use gapless::Ring;
use gapless_loom_tests::{payload, tiny_ring, Emitted, Gate, Outcomes};
use loom::thread;
use std::sync::Arc;

/// Fills a ring with `prefill` (payload lengths), then emits `len` bytes on
/// another thread while the main thread asks for the oldest retained seq
/// from the one before the lap; names the answer.
fn hinted_answer(ring: Ring, prefill: &[usize], len: usize) -> &'static str {
    let ring = Arc::new(ring);
    let gate = Arc::new(Gate::default());
    let mut emitted = Emitted::prefill(&ring, 0, prefill);
    let hint = ring.first_retained();
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
    let hinted = ring.first_retained_from(hint);

    let (result, bytes) = emitter.join().expect("emitter panicked");
    emitted.record(result, bytes);
    emitted.assert_dense();
    let settled = ring.first_retained();
    assert!(settled > hint, "the lap evicts seq {hint}");
    assert!(hinted >= hint, "{hinted} is below the hint, {hint}");
    assert!(
        hinted <= settled,
        "{hinted} is past the oldest retained, {settled}"
    );
    assert_eq!(
        ring.first_retained_from(hint),
        settled,
        "the hint changes the answer"
    );
    if hinted == hint {
        "before the lap"
    } else if hinted == settled {
        "after the lap"
    } else {
        "during the lap"
    }
}

#[test]
fn a_hinted_search_across_a_slot_lap_answers_an_instant_of_the_call() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        // Two slots, 32 words: seq 3 takes seq 1's slot, no word reused.
        tally.record(hinted_answer(tiny_ring(2, 256), &[8, 8], 8));
    });
    outcomes.assert_seen("slot lap", &["before the lap", "after the lap"]);
}

#[test]
fn a_hinted_search_across_an_arena_lap_answers_an_instant_of_the_call() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        // Four slots, 16 words (a window of 8): seq 3's words wrap over
        // seq 1's (see model 7).
        tally.record(hinted_answer(tiny_ring(4, 128), &[8, 64], 64));
    });
    outcomes.assert_seen("arena lap", &["before the lap", "after the lap"]);
}

#[test]
fn a_hinted_search_that_gallops_across_an_arena_lap_answers_an_instant_of_the_call() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        // Eight slots, 16 words: the prefill of 8 + 1 + 1 + 8 words has
        // already evicted seq 1, so the hint (2) is above the search's own
        // lower bound and the search gallops from it; the next 8 words
        // evict seqs 2 and 3.
        tally.record(hinted_answer(tiny_ring(8, 128), &[64, 8, 8, 64], 64));
    });
    outcomes.assert_seen("galloping arena lap", &["before the lap", "after the lap"]);
}
