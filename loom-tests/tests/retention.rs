#![cfg(loom)]
//! Model 8: while an emitter is stalled between claim and commit, replays
//! within the newest reserve of published events keep succeeding.
//!
//! Four slots (a reserve of two events, a window of two). Seqs 1..=4 are
//! published first. Emitter A claims seq 5 and stalls in the test hook
//! between claim and commit until the main thread releases it. Then
//! emitter B emits twice: seq 6 may be written (the watermark, 4, is within
//! the window), overwriting seq 2; seq 7 would overwrite seq 3, which is in
//! the reserve, so B waits. Meanwhile the main thread replays after 2 — the
//! newest two published events — and must get exactly seqs 3 and 4, intact,
//! in every interleaving. Then it releases A, and all seven seqs end
//! published. Outcomes assert that loom reached both a B that waited at the
//! wrap and one whose second emit came after the release.

use gapless_loom_tests::{payload, tiny_ring, Emitted, Outcomes};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Notify;
use loom::thread;
use std::sync::Arc;

/// A one-shot signal: loom's `Notify` may wake spuriously, so the flag says
/// whether it really fired.
#[derive(Default)]
struct Signal {
    fired: AtomicBool,
    notify: Notify,
}

impl Signal {
    fn fire(&self) {
        self.fired.store(true, Ordering::Release);
        self.notify.notify();
    }

    fn wait(&self) {
        while !self.fired.load(Ordering::Acquire) {
            self.notify.wait();
        }
    }
}

#[test]
fn the_reserve_survives_a_stalled_emitter() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        let ring = Arc::new(tiny_ring(4, 512));
        let mut emitted = Emitted::prefill(&ring, 0, &[8; 4]);
        let claimed = Arc::new(Signal::default());
        let release = Arc::new(Signal::default());
        let a = {
            let ring = Arc::clone(&ring);
            let (claimed, release) = (Arc::clone(&claimed), Arc::clone(&release));
            thread::spawn(move || {
                let bytes = payload(1, 0, 8);
                let result = ring.emit_with_hook(&bytes, |_| {
                    claimed.fire();
                    release.wait();
                });
                vec![(result, bytes)]
            })
        };
        claimed.wait();
        let b = {
            let ring = Arc::clone(&ring);
            thread::spawn(move || {
                (0..2)
                    .map(|index| {
                        let bytes = payload(2, index, 8);
                        (ring.emit(&bytes), bytes)
                    })
                    .collect::<Vec<_>>()
            })
        };
        let replay = ring.replay_after(2).expect("the reserve was evicted");
        release.fire();
        for emitter in [a, b] {
            for (result, bytes) in emitter.join().expect("emitter panicked") {
                emitted.record(result, bytes);
            }
        }
        let seqs: Vec<u64> = replay.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [3, 4], "the watermark passed a stalled emitter");
        for event in &replay {
            emitted.assert_intact(event);
        }
        emitted.assert_dense();
        assert_eq!(ring.published(), 7);
        tally.record(if ring.stats().wrap_waits > 0 {
            "b waited"
        } else {
            "b after release"
        });
    });
    outcomes.assert_seen("retention", &["b waited", "b after release"]);
}
