#![cfg(loom)]
//! Model 1: a replay racing two emitters is a contiguous, intact prefix.
//!
//! Two emitters each emit one payload that says who wrote it while the main
//! thread replays from cursor 0. Nothing can be evicted (two slots, sixteen
//! arena words, two short payloads), so in every interleaving the replay
//! must be `Ok`, its seqs exactly `1..=k` in order with `k` between the
//! watermark read before and after it, and every payload byte for byte the
//! one its seq's emitter passed to `emit`. Once both emitters return, the
//! watermark is 2: it never stalls below a committed prefix. The two
//! emitters claim in either order and commit in either order, so this is
//! also the model of in-order and out-of-order publish: the emitter of seq
//! 2 may commit first, fail its compare-and-swap from 1, and leave the
//! watermark to the emitter of seq 1's scan (or scan itself after its
//! `fence(SeqCst)`).
//!
//! Emitters pass a `gapless_loom_tests::Gate` before emitting and the main
//! thread looks at it before each observation, so that loom also explores
//! the orders where an emitter runs first (see `Gate` for the loom
//! limitation this works around). Each test also asserts that its
//! interesting outcomes were all reached (`Outcomes`), so it cannot pass
//! vacuously.
//!
//! What this proves of the engine: a reader that sees the watermark cover a
//! seq sees that seq's location fields and payload words (the payload is
//! stored, then the slot committed, then the watermark raised, each step
//! released and acquired), and the watermark reaches every committed seq
//! (the `SeqCst` compare-and-swap, fence and stamp loads of `publish`).

use gapless_loom_tests::{payload, tiny_ring, Emitted, Gate, Outcomes};
use loom::thread;
use std::sync::Arc;

/// Two words, so a copy spans two arena blocks and ends in a partial word.
const LEN: usize = 12;

#[test]
fn replay_is_a_contiguous_intact_prefix_while_two_emitters_race() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        let ring = Arc::new(tiny_ring(2, 128));
        let gate = Arc::new(Gate::default());
        let emitters: Vec<_> = (0..2u8)
            .map(|emitter| {
                let ring = Arc::clone(&ring);
                let gate = Arc::clone(&gate);
                thread::spawn(move || {
                    let bytes = payload(emitter, 0, LEN);
                    gate.pass();
                    (ring.emit(&bytes), bytes)
                })
            })
            .collect();

        gate.look();
        let before = ring.published();
        gate.look();
        let replay = ring.replay_after(0);
        gate.look();
        let after = ring.published();

        let mut emitted = Emitted::default();
        for emitter in emitters {
            let (result, bytes) = emitter.join().expect("emitter panicked");
            emitted.record(result, bytes);
        }
        emitted.assert_dense();

        let events = match replay {
            Ok(events) => events,
            Err(error) => panic!("replay with nothing evicted failed: {error}"),
        };
        let seqs: Vec<u64> = events.iter().map(|event| event.seq).collect();
        let contiguous: Vec<u64> = (1..=seqs.len() as u64).collect();
        assert_eq!(seqs, contiguous, "replay is not a contiguous prefix");
        let last = seqs.len() as u64;
        assert!(
            before <= last && last <= after,
            "replay ended at {last}, watermark went {before} -> {after}"
        );
        for event in &events {
            emitted.assert_intact(event);
        }
        assert_eq!(ring.published(), 2, "watermark stalled below settled seqs");
        tally.record(["replayed 0", "replayed 1", "replayed 2"][events.len()]);
    });
    outcomes.assert_seen("two emitters", &["replayed 0", "replayed 1", "replayed 2"]);
}
