//! The README's quickstart, compiled and run by `cargo test` (as an
//! example) so it cannot rot.

use gapless::{Config, Coverage, EventId, Follower, ReplayError, Ring, Store};
use std::sync::Arc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // One ring per stream, many streams in a store.
    let store: Store<String> = Store::default();
    let ring: Arc<Ring> = store.get_or_create(
        "session-42".to_string(),
        Config::default().events(4096).bytes(4 << 20),
    )?;

    // Emit from any thread: lock-free, no allocation.
    for n in 1..=3 {
        let seq = ring.emit(format!("{{\"n\":{n}}}").as_bytes())?;
        println!(
            "emitted {}",
            EventId {
                epoch: ring.epoch(),
                seq
            }
        );
    }

    // A client reconnects with Last-Event-ID: parse it, check the epoch,
    // then replay everything after it — or learn exactly why not.
    let last_event_id: EventId = format!("{:016x}-1", ring.epoch()).parse()?;
    assert_eq!(last_event_id.epoch, ring.epoch(), "a foreign cursor");
    match ring.coverage(last_event_id.seq) {
        Coverage::Covered { first, last } => println!("can replay {first}..={last}"),
        Coverage::Gap(gap) => println!("refuse: {gap}"),
        Coverage::Ahead { cursor, published } => println!("refuse: {cursor} > {published}"),
    }
    for event in ring.replay_after(last_event_id.seq)? {
        println!(
            "replayed {} {}",
            event.seq,
            String::from_utf8_lossy(&event.payload)
        );
    }

    // Then follow live, from where the replay ended.
    let mut follower = Follower::new(Arc::clone(&ring), ring.published());
    ring.emit(b"{\"n\":4}")?;
    for event in follower.wait()? {
        println!(
            "live {} {}",
            event.seq,
            String::from_utf8_lossy(&event.payload)
        );
    }

    // A cursor the server never published is refused, never answered empty.
    assert!(matches!(
        ring.replay_after(99),
        Err(ReplayError::Ahead { .. })
    ));
    Ok(())
}
