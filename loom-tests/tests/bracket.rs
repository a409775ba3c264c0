#![cfg(loom)]
//! Model 9: a reader overtaken by a whole range of the claim word's seq
//! field between its two watermark reads does not misdecode the claim.
//!
//! Under loom the claim word's seq field is 2 bits wide (a range of 4), so
//! four emits wrap it. The ring has two slots and sixteen words. Seq 1 is
//! published first; then an emitter emits four more one-word payloads
//! (seqs 2..=5) while the main thread replays from cursor 0. A reader that
//! read the watermark (1) before the four emits and the claim word after
//! them would, without the bracket, decode 5 claimed seqs as 1, believe
//! seq 1's slot unused, and return seq 5's bytes as seq 1. The second read
//! of the watermark (5, a whole ring past 1) makes it report the gap. In
//! every interleaving the replay is an intact contiguous prefix or a gap.
//!
//! The overtaking needs one preemption of the reader; the model runs with a
//! preemption bound of 2 so that it stays small.

use gapless::ReplayError;
use gapless_loom_tests::{payload, tiny_ring, Emitted, Gate, Outcomes};
use loom::thread;
use std::sync::Arc;

#[test]
fn a_reader_overtaken_by_the_seq_range_reports_a_gap() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(move || {
        let ring = Arc::new(tiny_ring(2, 128));
        let mut emitted = Emitted::prefill(&ring, 0, &[8]);
        let gate = Arc::new(Gate::default());
        let emitter = {
            let ring = Arc::clone(&ring);
            let gate = Arc::clone(&gate);
            thread::spawn(move || {
                gate.pass();
                (0..4)
                    .map(|index| {
                        let bytes = payload(1, index, 8);
                        (ring.emit(&bytes), bytes)
                    })
                    .collect::<Vec<_>>()
            })
        };
        gate.look();
        let replay = ring.replay_after(0);
        for (result, bytes) in emitter.join().expect("emitter panicked") {
            emitted.record(result, bytes);
        }
        emitted.assert_dense();
        assert_eq!(ring.published(), 5);
        tally.record(match replay {
            Ok(events) => {
                for (expected, event) in (1..).zip(&events) {
                    assert_eq!(event.seq, expected, "replay is not contiguous");
                    emitted.assert_intact(event);
                }
                "ok"
            }
            Err(ReplayError::Gap(gap)) => {
                assert!(gap.first_retained >= 2, "{gap:?}");
                "gap"
            }
            Err(error) => panic!("unexpected replay error: {error}"),
        });
    });
    outcomes.assert_seen("bracket", &["ok", "gap"]);
}
