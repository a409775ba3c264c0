//! Scenario (f): memory per idle session. Not a timing: prints to stderr
//!
//! - `Geometry::footprint()` (bytes preallocated for slots and the arena,
//!   which is the configured payload bytes: half of it is the retention
//!   reserve) for the server default (4096 events, 4 MiB) and for
//!   small configurations,
//! - the growth of the resident set (`/proc/self/statm`) when 1,000 idle
//!   sessions' stores are created, given 10 small events (50 bytes) each
//!   and kept, divided per store, with the peers' stores for comparison:
//!   the measurement `tests/resident_memory.rs` bounds (under 256 KiB per
//!   server-default ring),
//! - the same after churn: 200 rings, every other one dropped and replaced
//!   three times over, and the growth per ring created in the last round,
//! - the resident growth of one server-default ring filled three times
//!   over, which stays at its footprint: a ring never grows.
//!
//! Each figure is measured in a fresh process (this bench re-runs itself
//! with `MEMORY_SCENARIO` set), so no scenario reuses pages another one
//! freed: an allocator hands freed, already-resident memory to the next
//! allocation, which would hide that store's cost.
//!
//! Resident size counts touched pages only: a store that reserves memory
//! it has not written yet shows less than it may grow to. A ring allocates
//! its slots and arena in full, zeroed, so their pages become resident as
//! emits first write them, as long as the allocator hands it fresh pages.
//! glibc's does for a new process; once blocks of a ring's size have been
//! freed it raises its mmap threshold and serves them from its heap,
//! zeroing reused memory by writing it, which the churn figure shows
//! (a fixed threshold, e.g. `MALLOC_MMAP_THRESHOLD_=131072`, keeps it at the
//! fresh figure).

use gapless::{Config, Ring};
use std::process::Command;

mod peers;
use peers::{Broadcast, Emit, MutexDeque, Queue, SERVER_BYTES, SERVER_EVENTS};

/// Events an idle session's store holds.
const IDLE_EVENTS: usize = 10;
/// Bytes of each of those events.
const SMALL: usize = 50;
/// Stores per idle figure.
const STORES: usize = 1_000;
/// Rings in the churn scenario, half of them replaced in each round.
const CHURNED: usize = 200;
/// Rounds of churn; the last one is measured.
const CHURN_ROUNDS: usize = 3;
/// The variable that makes this bench run one scenario and exit.
const SCENARIO: &str = "MEMORY_SCENARIO";

fn mib(bytes: usize) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

fn server_ring() -> Ring {
    Ring::new(Config::default().events(SERVER_EVENTS).bytes(SERVER_BYTES))
}

/// `make`, then [`IDLE_EVENTS`] events of [`SMALL`] bytes emitted into it;
/// counts refused emits into `refused`.
fn idle<T: Emit>(make: &impl Fn() -> T, refused: &mut usize) -> T {
    let payload = peers::payload(SMALL);
    let store = make();
    for _ in 0..IDLE_EVENTS {
        *refused += usize::from(!store.emit(&payload));
    }
    store
}

/// Creates [`STORES`] idle stores with `make`, keeps them all, and prints
/// the resident growth per store.
fn resident_delta<T: Emit>(what: &str, make: impl Fn() -> T) {
    let mut refused = 0;
    let before = peers::resident_bytes();
    let kept: Vec<T> = (0..STORES).map(|_| idle(&make, &mut refused)).collect();
    let after = peers::resident_bytes();
    match (before, after) {
        (Some(before), Some(after)) => {
            let delta = after.saturating_sub(before);
            eprintln!(
                "memory: {STORES} idle {what} ({IDLE_EVENTS} events of {SMALL} B each): \
                 resident +{:.1} MiB, {} bytes each; lost emits: {refused} of {}",
                mib(delta),
                delta / STORES,
                STORES * IDLE_EVENTS
            );
        }
        _ => eprintln!("memory: /proc/self/statm unavailable; no resident figure for {what}"),
    }
    drop(kept);
}

/// [`CHURNED`] idle server-default rings, then [`CHURN_ROUNDS`] rounds of
/// dropping every other one and creating as many new idle rings, on a
/// spawned thread as a server's worker would. Prints the resident growth
/// per ring created in the last round.
fn churn() {
    let run = || {
        let make = server_ring;
        let mut refused = 0;
        let mut rings: Vec<Ring> = (0..CHURNED).map(|_| idle(&make, &mut refused)).collect();
        let (mut per_ring, mut replaced) = (None, 0);
        for _ in 0..CHURN_ROUNDS {
            let mut odd = false;
            rings.retain(|_| {
                odd = !odd;
                odd
            });
            let before = peers::resident_bytes();
            replaced = CHURNED - rings.len();
            rings.extend((0..replaced).map(|_| idle(&make, &mut refused)));
            let after = peers::resident_bytes();
            per_ring = before
                .zip(after)
                .map(|(before, after)| after.saturating_sub(before) / replaced);
        }
        if let Some(per_ring) = per_ring {
            eprintln!(
                "memory: {replaced} idle server-default rings replacing as many dropped ones \
                 (churn, round {CHURN_ROUNDS} of {CHURNED} rings): resident {per_ring} bytes \
                 each; lost emits: {refused} of {}",
                (CHURNED + CHURN_ROUNDS * replaced) * IDLE_EVENTS
            );
        }
    };
    std::thread::spawn(run).join().expect("the churn thread");
}

/// Prints the resident growth of one server-default ring filled with three
/// arenas' worth of 1000-byte payloads, beside its footprint.
fn full_ring() {
    let payload = peers::payload(1000);
    let before = peers::resident_bytes();
    let ring = server_ring();
    let (mut emitted, mut refused) = (0, 0);
    while emitted < 3 * ring.geometry().arena_bytes() {
        refused += usize::from(ring.emit(&payload).is_err());
        emitted += payload.len();
    }
    let after = peers::resident_bytes();
    if let (Some(before), Some(after)) = (before, after) {
        let delta = after.saturating_sub(before);
        eprintln!(
            "memory: one full server-default ring ({emitted} B emitted): resident +{delta} bytes \
             ({:.2} MiB), footprint {} bytes; lost emits: {refused} of {}",
            mib(delta),
            ring.geometry().footprint(),
            emitted / payload.len()
        );
    }
}

/// The scenarios, each run in a process of its own.
const SCENARIOS: [&str; 7] = [
    "server-default rings",
    "small rings",
    "Mutex<VecDeque> (capacity 4096)",
    "broadcast channels (4096)",
    "ArrayQueues (4096)",
    "churn",
    "full ring",
];

fn run(scenario: &str) {
    match scenario {
        "server-default rings" => resident_delta(scenario, server_ring),
        "small rings" => resident_delta(scenario, || {
            Ring::new(Config::default().events(256).bytes(32 << 10))
        }),
        "Mutex<VecDeque> (capacity 4096)" => {
            resident_delta(scenario, || MutexDeque::new(SERVER_EVENTS, SERVER_BYTES))
        }
        "broadcast channels (4096)" => {
            resident_delta(scenario, || Broadcast::new(SERVER_EVENTS));
        }
        "ArrayQueues (4096)" => resident_delta(scenario, || Queue::new(SERVER_EVENTS)),
        "churn" => churn(),
        "full ring" => full_ring(),
        other => eprintln!("memory: no scenario {other:?}"),
    }
}

fn main() {
    if let Ok(scenario) = std::env::var(SCENARIO) {
        run(&scenario);
        return;
    }
    let configs = [
        ("server default", SERVER_EVENTS, SERVER_BYTES),
        ("small", 256, 32 << 10),
        ("tiny", 16, 4 << 10),
    ];
    for (name, events, bytes) in configs {
        let config = Config::default().events(events).bytes(bytes);
        let footprint = config.geometry().map_or(0, |g| g.footprint());
        eprintln!(
            "memory: footprint of a {name} ring ({events} events, {bytes} bytes): {footprint} \
             bytes ({:.2} MiB)",
            mib(footprint)
        );
    }
    let exe = std::env::current_exe().expect("the bench's own path");
    for scenario in SCENARIOS {
        let status = Command::new(&exe).env(SCENARIO, scenario).status();
        if !status.as_ref().is_ok_and(|s| s.success()) {
            eprintln!("memory: scenario {scenario:?} failed: {status:?}");
        }
    }
}
