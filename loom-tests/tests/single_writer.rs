#![cfg(loom)]
//! Model 10: the single writer's plain-store claim and publish.
//!
//! - A follower blocked in `Follower::wait` on a `Writer`'s ring is always
//!   woken: the writer stores the watermark, issues `fence(SeqCst)`, and
//!   reads the waiter count; the follower registers, issues
//!   `fence(SeqCst)`, and re-reads the watermark. A lost wake-up leaves it
//!   blocked with nobody to notify it, which loom reports as a deadlock.
//! - A reader racing the writer across a slot lap gets an intact prefix or
//!   a gap, never torn bytes: the writer's claim store is ordered before
//!   (`fence(Release)`) its slot and payload stores.

use gapless::{Config, Follower, ReplayError, Writer};
use gapless_loom_tests::{payload, Emitted, Outcomes};
use loom::thread;
use std::num::NonZeroU64;
use std::sync::Arc;

fn writer(events: usize, bytes: usize) -> Writer {
    let config = Config::default()
        .events(events)
        .bytes(bytes)
        .epoch(NonZeroU64::MIN);
    Writer::try_new(config).expect("model ring")
}

#[test]
fn a_follower_of_a_single_writer_is_always_woken() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        let mut writer = writer(4, 128);
        let mut follower = Follower::new(Arc::clone(writer.ring()), 0);
        let producer = thread::spawn(move || {
            (0..2)
                .map(|index| {
                    let bytes = payload(0, index, 8);
                    (writer.emit(&bytes), bytes)
                })
                .collect::<Vec<_>>()
        });
        let mut seen = Vec::new();
        let mut waits = 0;
        while seen.len() < 2 {
            seen.extend(follower.wait().expect("no gap in a ring of four"));
            waits += 1;
        }
        let mut emitted = Emitted::default();
        for (result, bytes) in producer.join().expect("writer panicked") {
            emitted.record(result, bytes);
        }
        for (expected, event) in (1..).zip(&seen) {
            assert_eq!(event.seq, expected);
            emitted.assert_intact(event);
        }
        tally.record(if waits == 1 {
            "one wait"
        } else {
            "several waits"
        });
    });
    outcomes.assert_seen("single-writer follower", &["one wait", "several waits"]);
}

#[test]
fn a_reader_racing_a_single_writer_gets_intact_bytes_or_a_gap() {
    let outcomes = Outcomes::default();
    let tally = outcomes.clone();
    loom::model(move || {
        let mut writer = writer(2, 256);
        let ring = Arc::clone(writer.ring());
        let mut emitted = Emitted::default();
        for index in 0..2 {
            let bytes = payload(0, index, 12);
            emitted.record(writer.emit(&bytes), bytes);
        }
        let producer = thread::spawn(move || {
            let bytes = payload(1, 0, 12);
            (writer.emit(&bytes), bytes)
        });
        let replay = ring.replay_after(0);
        let (result, bytes) = producer.join().expect("writer panicked");
        emitted.record(result, bytes);
        assert_eq!(ring.published(), 3);
        tally.record(match replay {
            Ok(events) => {
                assert_eq!(events.len(), 2);
                for (expected, event) in (1..).zip(&events) {
                    assert_eq!(event.seq, expected);
                    emitted.assert_intact(event);
                }
                "ok"
            }
            Err(ReplayError::Gap(gap)) => {
                assert_eq!(gap.first_retained, 2, "{gap:?}");
                "gap"
            }
            Err(error) => panic!("unexpected replay error: {error}"),
        });
    });
    outcomes.assert_seen("single-writer reader", &["ok", "gap"]);
}
