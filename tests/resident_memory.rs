//! Ring memory is resident in proportion to use, and a full ring never
//! grows past its preallocation.
//!
//! Measured as the growth of this process's resident set
//! (`/proc/self/statm`), so Linux only: elsewhere this file compiles to
//! nothing. It is its own test binary holding one test, so that nothing
//! else allocates while it measures. Run with `--nocapture` to see the
//! figures.
//!
//! The bound is the allocator's as much as the ring's: a ring allocates
//! its slots and arena zeroed, in full, and the pages become resident when
//! first written (see `zeroed_slice` in src/arena.rs). A ring whose memory
//! were written at construction would be resident in full, ~8 MiB for the
//! server's default, and fail here after the first hundred rings. With
//! transparent huge pages set to `always` (rather than the usual `madvise`)
//! the kernel may back a ring's first arena write with a 2 MiB page; the
//! mode is printed with the figures. Fresh pages are what a new process
//! gets; after churn (rings of this size freed and others created), glibc
//! may hand out reused memory it zeroes by writing (see the churn figure
//! of benches/memory.rs).

#![cfg(target_os = "linux")]

use gapless::{Config, Ring};

/// Rings held at once.
const RINGS: usize = 1_000;
/// The idle figure is checked every this many rings, so that a regression
/// fails after a few hundred MiB rather than after 8 GiB.
const CHECK_EVERY: usize = 100;
/// Events emitted into each idle ring.
const IDLE_EVENTS: usize = 10;
/// Bytes of each idle event.
const SMALL: usize = 50;
/// The most an idle ring may cost.
const IDLE_BOUND: usize = 256 << 10;
/// What a full ring may be resident beyond its footprint: the ring's own
/// struct, its notifier, and allocator bookkeeping.
const FULL_SLACK: usize = 256 << 10;

/// The server's default ring: 4096 events, 4 MiB of payload (an arena of
/// 8 MiB with the reserve).
fn server_default() -> Config {
    Config::default().events(4096).bytes(4 << 20)
}

/// Bytes of one page, from the first mapping in `/proc/self/smaps`.
fn page_size() -> usize {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("/proc/self/smaps");
    smaps
        .lines()
        .find_map(|line| line.strip_prefix("KernelPageSize:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse::<usize>().ok())
        .map_or(4096, |kib| kib << 10)
}

/// This process's resident set, in bytes.
fn resident(page: usize) -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|field| field.parse().ok())
        .expect("statm's second field is the resident page count");
    pages * page
}

/// The transparent-huge-page mode, printed with the figures: under
/// `always` the kernel may back a first write with a 2 MiB page.
fn thp() -> String {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .ok()
        .and_then(|modes| {
            let (_, rest) = modes.split_once('[')?;
            Some(rest.split_once(']')?.0.to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

fn kib(bytes: usize) -> f64 {
    bytes as f64 / 1024.0
}

#[test]
fn idle_rings_are_resident_in_proportion_to_use_and_a_full_ring_never_grows() {
    let page = page_size();
    let small: Vec<[u8; SMALL]> = (0..IDLE_EVENTS)
        .map(|n| std::array::from_fn(|i| (n * 31 + i * 7) as u8))
        .collect();
    let mut rings: Vec<Ring> = Vec::with_capacity(RINGS);

    // 1,000 idle rings of the server default, 10 small events each.
    let before = resident(page);
    for made in 1..=RINGS {
        let ring = Ring::new(server_default());
        for event in &small {
            ring.emit(event).expect("a small event fits");
        }
        rings.push(ring);
        if made % CHECK_EVERY == 0 {
            let per_ring = resident(page).saturating_sub(before) / made;
            assert!(
                per_ring < IDLE_BOUND,
                "after {made} idle rings: {per_ring} bytes ({:.1} KiB) resident per ring, \
                 bound {IDLE_BOUND} (transparent huge pages: {})",
                kib(per_ring),
                thp()
            );
        }
    }
    let idle = resident(page).saturating_sub(before) / RINGS;
    println!(
        "resident per idle ring ({RINGS} rings, 4096 events, 4 MiB, {IDLE_EVENTS} events of \
         {SMALL} bytes): {idle} bytes ({:.1} KiB; bound {} KiB; transparent huge pages: {})",
        kib(idle),
        IDLE_BOUND >> 10,
        thp()
    );
    assert!(rings
        .iter()
        .all(|ring| ring.published() == IDLE_EVENTS as u64));

    // One ring filled far past its capacity: at least three arenas' worth
    // of payloads, and enough events to wrap the slots four times.
    let before = resident(page);
    let ring = Ring::new(server_default());
    let footprint = ring.geometry().footprint();
    let payload: Vec<u8> = (0..1000).map(|i| (i * 13 + 1) as u8).collect();
    let mut emitted = 0;
    while emitted < 3 * ring.geometry().arena_bytes()
        || ring.stats().evicted <= 4 * ring.geometry().events() as u64
    {
        ring.emit(&payload).expect("a 1000-byte payload fits");
        emitted += payload.len();
    }
    assert!(ring.stats().evicted > 4 * ring.geometry().events() as u64);
    let full = resident(page).saturating_sub(before);
    println!(
        "resident for one full ring ({emitted} payload bytes emitted): {full} bytes \
         ({:.2} MiB); footprint {footprint} bytes ({:.2} MiB)",
        kib(full) / 1024.0,
        kib(footprint) / 1024.0
    );
    assert!(
        full <= footprint + FULL_SLACK,
        "a full ring is resident beyond its preallocation: {full} > {footprint} + {FULL_SLACK}"
    );
    // The measure sees written pages: without this, an idle figure could
    // pass because nothing was measured.
    assert!(
        full >= footprint / 2,
        "a full ring shows only {full} resident bytes of its {footprint}"
    );
    drop(rings);
}
