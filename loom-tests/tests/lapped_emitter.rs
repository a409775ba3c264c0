#![cfg(loom)]
//! Model 3: an emitter lapped before it commits loses its seq, says so, and
//! the watermark still passes it.
//!
//! Emitter A emits once while emitter B emits twice, so three seqs race for
//! too little room and, in some interleavings, one emitter is overtaken
//! between claiming its seq and committing it:
//!
//! - **in its slot**: two slots, so seq 3 maps to seq 1's slot. Whichever of
//!   the two finds the other still writing (`Busy`) or already past it
//!   (`Lapped`) gives up.
//! - **in the arena**: four slots (no slot conflict), but B's first payload
//!   fills seven of the eight arena words, so B's second record lands in
//!   the next lap of a block that A may still be writing. Block leases make
//!   the newer writer give up (`Busy`), or A if the block already moved on
//!   (`Lapped`); neither waits and neither scribbles on the other.
//!
//! Meanwhile the main thread replays from cursor 0. In every interleaving:
//! the seqs handed out are exactly 1, 2, 3; each emit returns `Ok` or
//! `EmitError::Lapped` for its own seq; the concurrent replay is a
//! contiguous prefix of committed seqs with their exact bytes (never a lost
//! seq) or a gap; once all emitters return, `published()` is 3 (the
//! watermark passed the lost seq); a lost seq is reported as evicted by
//! `read` and covered by the gap of every replay from before it; and every
//! seq a reader can still get has exactly the bytes its emitter passed.
//!
//! Emitters pass a `gapless_loom_tests::Gate` before emitting and the main
//! thread looks at it before each observation, so that loom also explores
//! the orders where an emitter runs first (see `Gate` for the loom
//! limitation this works around). Each test also asserts that its
//! interesting outcomes were all reached (`Outcomes`), so it cannot pass
//! vacuously.

use gapless::{Event, ReadError, ReplayError, Ring};
use gapless_loom_tests::{payload, tiny_ring, Emitted, Gate, Outcomes};
use loom::thread;
use std::sync::Arc;

/// Emitter A (index 0) emits `a_len` bytes once; emitter B (index 1) emits
/// each of `b_lens`; meanwhile the main thread replays from cursor 0.
/// Returns what was emitted, after both return, and the replay.
fn race(
    ring: &Arc<Ring>,
    a_len: usize,
    b_lens: &'static [usize],
) -> (Emitted, Result<Vec<Event>, ReplayError>) {
    let gate = Arc::new(Gate::default());
    let a = {
        let ring = Arc::clone(ring);
        let gate = Arc::clone(&gate);
        thread::spawn(move || {
            let bytes = payload(0, 0, a_len);
            gate.pass();
            vec![(ring.emit(&bytes), bytes)]
        })
    };
    let b = {
        let ring = Arc::clone(ring);
        let gate = Arc::clone(&gate);
        thread::spawn(move || {
            gate.pass();
            (1u8..)
                .zip(b_lens)
                .map(|(index, &len)| {
                    let bytes = payload(1, index, len);
                    (ring.emit(&bytes), bytes)
                })
                .collect::<Vec<_>>()
        })
    };
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

/// Checks the replay that raced the emitters: a contiguous prefix of
/// committed seqs with their exact bytes (never a lost seq), or a gap.
fn assert_concurrent_replay(replay: Result<Vec<Event>, ReplayError>, emitted: &Emitted) {
    match replay {
        Ok(events) => {
            for (expected, event) in (1..).zip(&events) {
                assert_eq!(event.seq, expected, "replay is not contiguous");
                emitted.assert_intact(event);
            }
        }
        Err(ReplayError::Gap(gap)) => {
            assert_eq!(gap.cursor, 0);
            assert!(gap.first_retained >= 2, "empty gap reported: {gap:?}");
        }
        Err(error) => panic!("unexpected replay error: {error}"),
    }
}

/// Checks the quiescent ring against what was emitted; names the outcome.
fn assert_settled(ring: &Ring, emitted: &Emitted) -> &'static str {
    emitted.assert_dense();
    let claimed = emitted.claimed();
    assert_eq!(
        ring.published(),
        claimed,
        "the watermark stalled below settled seqs (lost: {:?})",
        emitted.lost()
    );
    assert_eq!(ring.stats().lost, emitted.lost().len() as u64);
    for &lost in emitted.lost() {
        match ring.read(lost) {
            Err(ReadError::Evicted { first_retained, .. }) => assert!(first_retained > lost),
            other => panic!("lost seq {lost} read as {other:?}"),
        }
        for cursor in 0..lost {
            match ring.replay_after(cursor) {
                Err(ReplayError::Gap(gap)) => assert!(
                    gap.first_retained > lost,
                    "gap {gap:?} does not cover lost seq {lost}"
                ),
                other => panic!("replay after {cursor} skipped lost seq {lost}: {other:?}"),
            }
        }
    }
    for seq in 1..=claimed {
        match ring.read(seq) {
            Ok(event) => emitted.assert_intact(&event),
            Err(ReadError::Evicted { first_retained, .. }) => assert!(first_retained > seq),
            Err(error) => panic!("seq {seq} <= published read as {error}"),
        }
    }
    match emitted.lost() {
        [] => "none lost",
        [1] => "seq 1 lost",
        [2] => "seq 2 lost",
        [3] => "seq 3 lost",
        lost => panic!("more than one seq lost: {lost:?}"),
    }
}

#[test]
fn emitter_lapped_in_its_slot_loses_its_seq_and_the_watermark_passes_it() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        let ring = Arc::new(tiny_ring(2, 64));
        let (emitted, replay) = race(&ring, 8, &[8, 8]);
        assert_concurrent_replay(replay, &emitted);
        tally.record(assert_settled(&ring, &emitted));
    });
    // Seq 1 (A or B) is lost when seq 3 takes its slot first, seq 3 when it
    // finds seq 1 still writing.
    outcomes.assert_seen("slot lap", &["none lost", "seq 1 lost", "seq 3 lost"]);
}

#[test]
fn emitter_lapped_in_the_arena_loses_its_seq_and_the_watermark_passes_it() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        let ring = Arc::new(tiny_ring(4, 64));
        // A: one word. B: seven words, then one word eight words after A's
        // (when A claimed first): the same block, one lap on.
        let (emitted, replay) = race(&ring, 8, &[56, 8]);
        assert_concurrent_replay(replay, &emitted);
        tally.record(assert_settled(&ring, &emitted));
    });
    outcomes.assert_seen("arena lap", &["none lost", "seq 1 lost", "seq 3 lost"]);
}
