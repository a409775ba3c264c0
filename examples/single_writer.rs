//! One task owns a stream's `Writer`; other threads replay and follow the
//! same ring at the same time.
//!
//! The writer is the stream's only producer (an MCP session's worker, a
//! topic's publisher): its `emit` takes `&mut self` and needs no locked
//! instruction. Its ring, `Arc<Ring<SingleWriter>>`, has the whole read API
//! and no `emit`, so nothing else can write into the stream. Here a follower
//! tails the stream live and a client "reconnects" with a cursor and
//! replays, while the writer keeps writing.

use gapless::{Config, Coverage, Follower, ReplayError, Writer};
use std::sync::Arc;
use std::thread;

const EVENTS: u64 = 10_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut writer = Writer::new(Config::default().events(16 << 10).bytes(1 << 20));
    let ring = Arc::clone(writer.ring());

    // A live follower: sees every event in order, with no hole, or a gap
    // that says exactly what it missed (if it falls a ring behind), after
    // which it continues explicitly from the oldest retained event.
    let follower = {
        let ring = Arc::clone(&ring);
        thread::spawn(move || {
            let mut follower = Follower::new(Arc::clone(&ring), 0);
            let (mut seen, mut missed) = (0u64, 0u64);
            while follower.cursor() < EVENTS {
                match follower.wait() {
                    Ok(events) => {
                        for event in events {
                            assert_eq!(event.seq, follower_next(seen, missed), "never a skip");
                            seen += 1;
                        }
                    }
                    Err(ReplayError::Gap(gap)) => {
                        missed += gap.evicted;
                        follower = Follower::new(Arc::clone(&ring), gap.first_retained - 1);
                    }
                    Err(ReplayError::Ahead { .. }) => unreachable!("cursor below the watermark"),
                }
            }
            (seen, missed)
        })
    };

    // A reconnecting client: replays after its cursor whenever it likes.
    let reconnects = {
        let ring = Arc::clone(&ring);
        thread::spawn(move || {
            let (mut replayed, mut gaps) = (0u64, 0u64);
            while ring.published() < EVENTS {
                let cursor = ring.published().saturating_sub(100);
                match ring.replay_after(cursor) {
                    Ok(events) => replayed += events.len() as u64,
                    Err(ReplayError::Gap(_)) => gaps += 1,
                    Err(ReplayError::Ahead { .. }) => unreachable!("cursor below the watermark"),
                }
            }
            (replayed, gaps)
        })
    };

    // The stream's task: the only producer.
    for n in 1..=EVENTS {
        let seq = writer.emit(format!("{{\"n\":{n}}}").as_bytes())?;
        assert_eq!(seq, n);
    }

    let (followed, missed) = follower.join().map_err(|_| "follower panicked")?;
    assert_eq!(
        followed + missed,
        EVENTS,
        "every event seen or reported missed"
    );
    let (replayed, gaps) = reconnects.join().map_err(|_| "replayer panicked")?;
    println!("followed {followed} events live ({missed} reported missed in gaps); replayed {replayed} events in reconnects ({gaps} gaps)");
    assert!(matches!(
        ring.coverage(EVENTS - 100),
        Coverage::Covered { last: EVENTS, .. }
    ));
    println!("stats: {:?}", ring.stats());
    Ok(())
}

/// The seq a follower that saw `seen` events and was told of `missed` expects
/// next.
fn follower_next(seen: u64, missed: u64) -> u64 {
    seen + missed + 1
}
