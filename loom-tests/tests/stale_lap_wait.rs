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
//!   (a window of eight), and two 8-word payloads, one each: the second
//!   record's words are free only once the first is published.
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

/// Emitter A (index 0) emits `len` bytes once, emitter B (index 1)
/// `b_emits` times; meanwhile the main thread replays from cursor 0.
fn race(ring: &Arc<Ring>, len: usize, b_emits: u8) -> (Emitted, Result<Vec<Event>, ReplayError>) {
    let gate = Arc::new(Gate::default());
    let spawn = |emitter: u8, count: u8| {
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
    let a = spawn(0, 1);
    let b = spawn(1, b_emits);
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

fn check(ring: Ring, len: usize, b_emits: u8) -> &'static str {
    let ring = Arc::new(ring);
    let (emitted, replay) = race(&ring, len, b_emits);
    let claimed = 1 + u64::from(b_emits);
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
    loom::model(move || tally.record(check(tiny_ring(2, 64), 8, 2)));
    outcomes.assert_seen("slot wrap", &["waited", "no wait"]);
}

#[test]
fn an_emitter_waits_for_stalled_words_instead_of_losing_its_event() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || tally.record(check(tiny_ring(4, 64), 64, 1)));
    outcomes.assert_seen("word wrap", &["waited", "no wait"]);
}
