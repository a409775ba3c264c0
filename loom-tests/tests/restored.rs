#![cfg(loom)]
//! Model 11: a ring that starts after a restored seq (`Config::start_after`)
//! runs the same protocol from there.
//!
//! The ring starts after seq 5, beyond the seq field's range under loom (4),
//! so every decode of the claim word must come from the base, not from 0.
//! An emitter thread races the main thread's own emit on a two-slot ring;
//! then the main thread replays after the base and asks for a cursor below
//! it. In every interleaving:
//!
//! - the emitters get exactly seqs 6 and 7, each once;
//! - a replay after 5 is `6, 7, …` in order with the emitters' exact bytes;
//! - a cursor below the base is never served: `coverage(4)` is a gap whose
//!   `first_retained` is past the base.

use gapless::{Config, Coverage, Ring};
use gapless_loom_tests::{payload, Gate, Outcomes};
use loom::thread;
use std::num::NonZeroU64;
use std::sync::Arc;

const BASE: u64 = 5;

fn restored_ring() -> Ring {
    let config = Config::default()
        .events(2)
        .bytes(128)
        .epoch(NonZeroU64::MIN)
        .start_after(BASE);
    match Ring::try_new(config) {
        Ok(ring) => ring,
        Err(error) => panic!("model ring is invalid: {error}"),
    }
}

#[test]
fn a_restored_ring_hands_out_seqs_after_its_base_and_never_serves_below_it() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        let ring = Arc::new(restored_ring());
        let gate = Arc::new(Gate::default());
        let emitter = {
            let ring = Arc::clone(&ring);
            let gate = Arc::clone(&gate);
            thread::spawn(move || {
                let bytes = payload(1, 0, 8);
                gate.pass();
                let seq = ring.emit(&bytes).expect("an emit that fits failed");
                (seq, bytes)
            })
        };

        gate.look();
        let own = payload(0, 0, 8);
        let own_seq = ring.emit(&own).expect("an emit that fits failed");
        let replay = ring.replay_after(BASE).expect("the base is always covered");
        match ring.coverage(BASE - 1) {
            Coverage::Gap(gap) => assert!(gap.first_retained > BASE, "{gap:?}"),
            other => panic!("a cursor below the base was answered {other:?}"),
        }

        let mut emitted = vec![(own_seq, own), emitter.join().expect("emitter panicked")];
        emitted.sort();
        let seqs: Vec<u64> = emitted.iter().map(|(seq, _)| *seq).collect();
        assert_eq!(
            seqs,
            [BASE + 1, BASE + 2],
            "seqs are not dense after the base"
        );
        for (expected, event) in (BASE + 1..).zip(&replay) {
            assert_eq!(event.seq, expected, "replay is not contiguous");
            let bytes = &emitted[(event.seq - BASE - 1) as usize].1;
            assert_eq!(&event.payload[..], &bytes[..], "seq {} torn", event.seq);
        }
        tally.record(match replay.len() {
            0 => panic!("the main thread's own emit is not in the replay"),
            1 => "replayed one",
            _ => "replayed both",
        });
    });
    outcomes.assert_seen(
        "restored ring",
        // The main thread's emit returns only once its seq is published (with
        // two slots, seq 7 waits at the wrap for seq 6), so a replay after it
        // is never empty.
        &["replayed one", "replayed both"],
    );
}
