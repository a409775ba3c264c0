#![cfg(loom)]
//! Model 5: a follower blocked in `Follower::wait` is always woken, and
//! waits without spinning.
//!
//! The main thread follows the ring from cursor 0 with the blocking
//! `Follower::wait` until it has seen every event, while emitters emit. The
//! waiter announces itself (`waiters += 1`, `fence(SeqCst)`) and re-checks
//! the watermark; an emitter raises the watermark, `fence(SeqCst)`, and
//! reads `waiters`. The two fences forbid both from reading the other's old
//! value, so either the waiter sees the new watermark or the emitter sees
//! the waiter and wakes it.
//!
//! The proof is that the model terminates: a lost wake-up leaves the main
//! thread blocked on the condition variable with no thread left to notify
//! it, which loom reports as a deadlock; a waiter that spun instead of
//! blocking would never let loom finish an execution (loom fails it for
//! exceeding its branch limit). Every event the follower yields is checked:
//! seqs `1, 2, ...` with no hole, bytes as emitted. Each test asserts that
//! loom reached both a follower that needed one `wait` and one that needed
//! several (`Outcomes`), so the blocking path was exercised.

use gapless::{Follower, Ring};
use gapless_loom_tests::{payload, tiny_ring, Emitted, Outcomes};
use loom::thread;
use std::sync::Arc;

/// Follows `ring` with blocking waits until `count` events have been seen,
/// while one emitter per entry of `emits` emits that many 8-byte payloads.
/// Returns how many `wait` calls it took.
fn follow_while_emitting(ring: Ring, emits: &'static [u8]) -> usize {
    let ring = Arc::new(ring);
    let count: usize = emits.iter().map(|&n| usize::from(n)).sum();
    let emitters: Vec<_> = (0u8..)
        .zip(emits)
        .map(|(emitter, &n)| {
            let ring = Arc::clone(&ring);
            thread::spawn(move || {
                (0..n)
                    .map(|index| {
                        let bytes = payload(emitter, index, 8);
                        (ring.emit(&bytes), bytes)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();

    let mut follower = Follower::new(Arc::clone(&ring), 0);
    let mut seen = Vec::new();
    let mut waits = 0;
    while seen.len() < count {
        waits += 1;
        match follower.wait() {
            Ok(events) => {
                assert!(!events.is_empty(), "wait returned no event");
                seen.extend(events);
            }
            Err(error) => panic!("follower of a ring that cannot lap failed: {error}"),
        }
    }

    let mut emitted = Emitted::default();
    for emitter in emitters {
        for (result, bytes) in emitter.join().expect("emitter panicked") {
            emitted.record(result, bytes);
        }
    }
    emitted.assert_dense();
    let seqs: Vec<u64> = seen.iter().map(|event| event.seq).collect();
    let expected: Vec<u64> = (1..=count as u64).collect();
    assert_eq!(seqs, expected, "the follower skipped or repeated a seq");
    for event in &seen {
        emitted.assert_intact(event);
    }
    assert_eq!(follower.cursor(), count as u64);
    waits
}

#[test]
fn blocked_follower_is_woken_by_one_emitter() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        let waits = follow_while_emitting(tiny_ring(2, 128), &[2]);
        tally.record(if waits == 1 {
            "one wait"
        } else {
            "several waits"
        });
    });
    outcomes.assert_seen("one emitter", &["one wait", "several waits"]);
}

#[test]
fn blocked_follower_is_woken_by_racing_emitters() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        let waits = follow_while_emitting(tiny_ring(2, 128), &[1, 1]);
        tally.record(if waits == 1 {
            "one wait"
        } else {
            "several waits"
        });
    });
    outcomes.assert_seen("two emitters", &["one wait", "several waits"]);
}
