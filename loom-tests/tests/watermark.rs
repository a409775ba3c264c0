#![cfg(loom)]
//! Model 4: the published watermark is monotone and never ahead of
//! committed data.
//!
//! Emitters race while the main thread reads `published()`, then reads every
//! seq up to what it saw, one `read` at a time, then reads `published()`
//! again. In every interleaving:
//!
//! - the watermark never goes down (each later load is at least the
//!   earlier one, and no `read` of a seq at or below an observed watermark
//!   is `ReadError::Ahead`);
//! - every seq at or below an observed watermark is readable as exactly the
//!   bytes its emitter passed, or reported evicted (`ReadError::Evicted`);
//!   with room for every emit, only the former;
//! - once the emitters return, the watermark equals the number of seqs
//!   handed out.
//!
//! Together with model 1 this pins `published` down from both sides: it
//! covers only committed seqs (a slot whose stamp is not yet the seq stops
//! it) and it reaches every committed one (the `SeqCst` publish). With two
//! slots and three emits, the third emitter waits at the wrap for the
//! watermark to pass seq 2 (a window of one), so every emit returns `Ok`.
//!
//! Emitters pass a `gapless_loom_tests::Gate` before emitting and the main
//! thread looks at it before each observation, so that loom also explores
//! the orders where an emitter runs first (see `Gate` for the loom
//! limitation this works around). Each test also asserts that its
//! interesting outcomes were all reached (`Outcomes`), so it cannot pass
//! vacuously.

use gapless::{EmitError, Event, ReadError, Ring};
use gapless_loom_tests::{payload, tiny_ring, Emitted, Gate, Outcomes};
use loom::thread;
use std::sync::Arc;

type Emits = Vec<(Result<u64, EmitError>, Vec<u8>)>;

/// Spawns one emitter per entry of `emits`: emitter `e` passes `gate`, then
/// emits `emits[e]` 8-byte payloads.
fn spawn_emitters(
    ring: &Arc<Ring>,
    gate: &Arc<Gate>,
    emits: &[u8],
) -> Vec<thread::JoinHandle<Emits>> {
    (0u8..)
        .zip(emits)
        .map(|(emitter, &count)| {
            let ring = Arc::clone(ring);
            let gate = Arc::clone(gate);
            thread::spawn(move || {
                gate.pass();
                (0..count)
                    .map(|index| {
                        let bytes = payload(emitter, index, 8);
                        (ring.emit(&bytes), bytes)
                    })
                    .collect()
            })
        })
        .collect()
}

/// What the main thread saw: two watermark loads and a read of every seq
/// up to the first.
struct Observed {
    first: u64,
    reads: Vec<(u64, Result<Event, ReadError>)>,
    second: u64,
}

fn observe(ring: &Ring, gate: &Gate) -> Observed {
    gate.look();
    let first = ring.published();
    let reads = (1..=first)
        .map(|seq| {
            gate.look();
            (seq, ring.read(seq))
        })
        .collect();
    gate.look();
    let second = ring.published();
    Observed {
        first,
        reads,
        second,
    }
}

/// Joins the emitters and checks `observed` against what they emitted;
/// returns how many reads were evicted.
fn check(ring: &Ring, emitters: Vec<thread::JoinHandle<Emits>>, observed: Observed) -> usize {
    let mut emitted = Emitted::default();
    for emitter in emitters {
        for (result, bytes) in emitter.join().expect("emitter panicked") {
            emitted.record(result, bytes);
        }
    }
    emitted.assert_dense();
    let last = ring.published();
    assert!(
        observed.first <= observed.second && observed.second <= last,
        "watermark went {} -> {} -> {last}",
        observed.first,
        observed.second
    );
    assert_eq!(last, emitted.claimed(), "watermark stalled");
    let mut evicted = 0;
    for (seq, read) in observed.reads {
        match read {
            Ok(event) => {
                assert_eq!(event.seq, seq);
                emitted.assert_intact(&event);
            }
            Err(ReadError::Evicted { first_retained, .. }) => {
                assert!(first_retained > seq);
                evicted += 1;
            }
            Err(error) => panic!(
                "seq {seq} <= observed watermark {} read as {error}",
                observed.first
            ),
        }
    }
    evicted
}

#[test]
fn published_is_monotone_and_covers_only_committed_seqs() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        // Four slots, two one-word emits: nothing can be evicted, so every
        // seq at or below the watermark must read back intact.
        let ring = Arc::new(tiny_ring(4, 128));
        let gate = Arc::new(Gate::default());
        let emitters = spawn_emitters(&ring, &gate, &[1, 1]);
        let observed = observe(&ring, &gate);
        let saw = observed.first;
        let evicted = check(&ring, emitters, observed);
        assert_eq!(evicted, 0, "a gap was reported with nothing evicted");
        tally.record(match saw {
            0 => "saw 0",
            1 => "saw 1",
            _ => "saw 2",
        });
    });
    outcomes.assert_seen("no lap", &["saw 0", "saw 1", "saw 2"]);
}

#[test]
fn published_prefix_is_intact_or_evicted_while_emitters_lap() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        // Two slots, three emits: seq 1 is overwritten, nothing is lost.
        let ring = Arc::new(tiny_ring(2, 128));
        let gate = Arc::new(Gate::default());
        let emitters = spawn_emitters(&ring, &gate, &[1, 2]);
        let observed = observe(&ring, &gate);
        let evicted = check(&ring, emitters, observed);
        tally.record(if evicted == 0 {
            "all intact"
        } else {
            "some evicted"
        });
    });
    outcomes.assert_seen("lap", &["all intact", "some evicted"]);
}
