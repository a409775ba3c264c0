#![cfg(loom)]
//! Model 3: an emitter a window ahead of a stalled one waits for it instead
//! of losing its event, and no seq is ever lost.
//!
//! Emitters A and B race for too little room, and in some interleavings an
//! emitter claims a seq whose slot or words still belong to an emitter
//! between its claim and commit:
//!
//! - **in its slot**: two slots (a window of one seq); A emits once, B
//!   twice, so seq 2 needs seq 1 published and seq 3 needs seq 2.
//! - **in the arena**: four slots (no slot conflict), sixteen arena words
//!   (a window of eight, a reserve of eight). Seq 1 (8 words) is published
//!   first; A emits one word, B eight. Whichever record comes third ends
//!   past word 16, over seq 1's first word: its emitter must wait until seq
//!   2 is published, since until then seq 1 is the reserve. (This model
//!   runs with a preemption bound of 2 to stay small: the stall needs one
//!   preemption, the reader's overlap one more.)
//!
//! Meanwhile the main thread replays from cursor 0. In every interleaving:
//! the seqs handed out are dense from 1 and every emit returns `Ok`; the
//! concurrent replay is a contiguous prefix with exact bytes, or a gap;
//! once both emitters return, `published()` is the last seq and every retained seq
//! reads back as emitted. Each test asserts that loom reached an execution
//! where an emitter waited (`Stats::wrap_waits`), so the wait path ran.

use gapless::{Event, ReplayError, Ring};
use gapless_loom_tests::{payload, tiny_ring, Emitted, Gate, Outcomes};
use loom::thread;
use std::sync::Arc;

/// Emitter A (index 0) emits `a_len` bytes once, emitter B (index 1)
/// `b_emits` times `b_len` bytes; meanwhile the main thread replays from
/// cursor 0.
fn race(
    ring: &Arc<Ring>,
    (a_len, b_len): (usize, usize),
    b_emits: u8,
) -> (Emitted, Result<Vec<Event>, ReplayError>) {
    let gate = Arc::new(Gate::default());
    let spawn = |emitter: u8, count: u8, len: usize| {
        let ring = Arc::clone(ring);
        let gate = Arc::clone(&gate);
        thread::spawn(move || {
            gate.pass();
            (0..count)
                .map(|index| {
                    let bytes = payload(emitter, index, len);
                    (ring.emit(&bytes), bytes)
                })
                .collect::<Vec<_>>()
        })
    };
    let a = spawn(0, 1, a_len);
    let b = spawn(1, b_emits, b_len);
    gate.look();
    let replay = ring.replay_after(0);
    let mut emitted = Emitted::default();
    for emitter in [a, b] {
        for (result, bytes) in emitter.join().expect("emitter panicked") {
            emitted.record(result, bytes);
        }
    }
    (emitted, replay)
}

fn check(ring: Ring, prefill: &[usize], lens: (usize, usize), b_emits: u8) -> &'static str {
    let ring = Arc::new(ring);
    let before = Emitted::prefill(&ring, 3, prefill);
    let (mut emitted, replay) = race(&ring, lens, b_emits);
    emitted.absorb(before);
    let claimed = prefill.len() as u64 + 1 + u64::from(b_emits);
    emitted.assert_dense();
    assert_eq!(emitted.claimed(), claimed);
    assert_eq!(ring.published(), claimed, "the watermark stalled");
    match replay {
        Ok(events) => {
            for (expected, event) in (1..).zip(&events) {
                assert_eq!(event.seq, expected, "replay is not contiguous");
                emitted.assert_intact(event);
            }
        }
        Err(ReplayError::Gap(gap)) => assert!(gap.first_retained >= 2, "{gap:?}"),
        Err(error) => panic!("unexpected replay error: {error}"),
    }
    for seq in ring.first_retained()..=claimed {
        emitted.assert_intact(&ring.read(seq).expect("retained"));
    }
    if ring.stats().wrap_waits > 0 {
        "waited"
    } else {
        "no wait"
    }
}

#[test]
fn an_emitter_waits_for_a_stalled_slot_instead_of_losing_its_event() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || tally.record(check(tiny_ring(2, 128), &[], (8, 8), 2)));
    outcomes.assert_seen("slot wrap", &["waited", "no wait"]);
}

#[test]
fn an_emitter_waits_for_stalled_words_instead_of_losing_its_event() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(move || tally.record(check(tiny_ring(4, 128), &[64], (8, 64), 1)));
    outcomes.assert_seen("word wrap", &["waited", "no wait"]);
}
