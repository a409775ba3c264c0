//! Scenario (f): memory per idle session. Not a timing: prints to stderr
//!
//! - `Ring::geometry().footprint()` (bytes preallocated for slots and the
//!   arena, which is twice the configured payload bytes: half of it is the
//!   retention reserve) for the server default (4096 events, 4 MiB) and for
//!   small configurations,
//! - the growth of this process's resident set (`/proc/self/statm`) when
//!   idle rings are created and kept, divided per ring, with the peers'
//!   idle stores for comparison.
//!
//! Resident size counts touched pages only: a store that reserves memory
//! it has not written yet shows less than it may grow to.

use gapless::{Config, Ring};

mod peers;
use peers::{Broadcast, MutexDeque, Queue, SERVER_BYTES, SERVER_EVENTS};

fn mib(bytes: usize) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

/// Creates `count` values with `make`, keeps them, and prints the resident
/// growth per value.
fn resident_delta<T>(what: &str, count: usize, make: impl Fn() -> T) {
    let before = peers::resident_bytes();
    let kept: Vec<T> = (0..count).map(|_| make()).collect();
    let after = peers::resident_bytes();
    match (before, after) {
        (Some(before), Some(after)) => {
            let delta = after.saturating_sub(before);
            eprintln!(
                "memory: {count} idle {what}: resident +{:.1} MiB, {} bytes each",
                mib(delta),
                delta / count
            );
        }
        _ => eprintln!("memory: /proc/self/statm unavailable; no resident figure for {what}"),
    }
    drop(kept);
}

fn main() {
    let configs = [
        ("server default", SERVER_EVENTS, SERVER_BYTES),
        ("small", 256, 32 << 10),
        ("tiny", 16, 4 << 10),
    ];
    for (name, events, bytes) in configs {
        let ring = Ring::new(Config::default().events(events).bytes(bytes));
        eprintln!(
            "memory: footprint of a {name} ring ({events} events, {bytes} bytes): {} bytes ({:.2} MiB)",
            ring.geometry().footprint(),
            mib(ring.geometry().footprint())
        );
    }
    // 1,000 rings of the server default would touch over 4 GiB; 100 give
    // the same figure per ring.
    resident_delta("server-default rings", 100, || {
        Ring::new(Config::default().events(SERVER_EVENTS).bytes(SERVER_BYTES))
    });
    resident_delta("small rings", 1_000, || {
        Ring::new(Config::default().events(256).bytes(32 << 10))
    });
    resident_delta("Mutex<VecDeque> (capacity 4096)", 1_000, || {
        MutexDeque::new(SERVER_EVENTS, SERVER_BYTES)
    });
    resident_delta("broadcast channels (4096)", 1_000, || {
        Broadcast::new(SERVER_EVENTS)
    });
    resident_delta("ArrayQueues (4096)", 1_000, || Queue::new(SERVER_EVENTS));
}
