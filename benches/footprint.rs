//! Footprint: what a ring costs against what its `Config` says. Not a
//! timing: prints one line per configuration to stderr.
//!
//! For each configuration (`events(e).bytes(b)`, powers of two and not):
//!
//! - `configured`: `e × 32 + b`, the bytes a ring of `e` events (32-byte
//!   slots) and `b` payload bytes should cost (the target: allocated within
//!   10% of it),
//! - what `Config::geometry()` resolves it to: slots, arena bytes, the
//!   largest payload, and `Geometry::footprint()` (slot bytes + arena bytes),
//! - `allocated`: the bytes `Ring::try_new` requested from the allocator
//!   and still holds (counted by this binary's global allocator, so
//!   everything the ring keeps is in it, the `Ring` itself included),
//! - `allocated_full`: the same after two rings' worth of emits
//!   (`2 × events` payloads), which should not have grown: a ring never
//!   allocates after construction.
//!
//! The counting allocator is why this is a bench binary of its own: in the
//! timing benches it would add an atomic add to every peer's allocation.
//! The figures are requested sizes; the C allocator adds its own headers
//! and rounds large blocks up to pages. A ring's memory is zeroed on
//! allocation and becomes resident only as emits first write it (the
//! memory bench measures residency).
//!
//! Each line reads
//!
//! `footprint: emit-64B events=4096 bytes=524288 configured=655360
//! geometry_events=4096 arena_bytes=… max_payload=… geometry_footprint=…
//! allocated=… allocated_full=… fill_len=64` (one line),
//!
//! or `footprint: <label> events=… bytes=… rejected: <why>` for a
//! configuration the engine refuses. `benches/results/plot.py collect`
//! reads these lines from the log.

use gapless::{Config, Ring};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

mod peers;
use peers::{EMIT_EVENTS, PAYLOADS, SERVER_BYTES, SERVER_EVENTS};

/// The bytes a configured event counts for in `configured` (its slot).
const SLOT_BYTES: usize = 32;

/// Bytes currently allocated through [`Counting`] (requested sizes).
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counting the bytes it has handed out and not had
/// back in [`LIVE`].
struct Counting;

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees hold; the counting only adds and
// subtracts the sizes of blocks that were actually handed out or freed.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout (see above).
        let block = unsafe { System.alloc(layout) };
        if !block.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        block
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout (see above).
        let block = unsafe { System.alloc_zeroed(layout) };
        if !block.is_null() {
            LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        // SAFETY: the caller passes a block this allocator (so `System`)
        // handed out with this layout.
        unsafe { System.dealloc(block, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller passes a block `System` handed out with
        // `layout` and a valid new size (see above).
        let moved = unsafe { System.realloc(block, layout, new_size) };
        if !moved.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE.fetch_add(new_size, Ordering::Relaxed);
        }
        moved
    }
}

/// Every allocation of this binary goes through [`Counting`].
#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes allocated and not yet freed, program-wide.
fn live() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// One configuration to measure: a label (no spaces), the configured
/// events and bytes, and the payload size emitted to fill it.
struct Case {
    /// What the line calls it (no spaces).
    label: String,
    /// `Config::events`.
    events: usize,
    /// `Config::bytes`.
    bytes: usize,
    /// Bytes of each payload emitted to fill the ring.
    fill_len: usize,
}

/// The configurations: the emit bench's rings (4096 events, room for every
/// event at each payload size), the server default, the replay and churn
/// benches' rings, and sizes that are not powers of two.
fn cases() -> Vec<Case> {
    let case = |label: &str, events: usize, bytes: usize, fill_len: usize| Case {
        label: label.to_owned(),
        events,
        bytes,
        fill_len,
    };
    let mut cases: Vec<Case> = PAYLOADS
        .iter()
        .map(|&(len, name)| {
            case(
                &format!("emit-{name}"),
                EMIT_EVENTS,
                peers::room_for(EMIT_EVENTS, len),
                len,
            )
        })
        .collect();
    cases.extend([
        case("server-default", SERVER_EVENTS, SERVER_BYTES, 1000),
        case("replay", 1024, peers::room_for(1024, 1024), 1024),
        case("churn", 1024, 256 << 10, 256),
        case("events-1000", 1000, peers::room_for(1000, 1024), 1024),
        case("events-5000", 5000, peers::room_for(5000, 1024), 1024),
        case("events-100", 100, 100 * 300, 200),
        case("events-999", 999, 999 * 300, 200),
        case("events-3000-3MB", 3000, 3_000_000, 900),
    ]);
    cases
}

/// Measures one configuration and prints its line.
fn measure(case: &Case) {
    let Case {
        label,
        events,
        bytes,
        fill_len,
    } = case;
    let config = Config::default().events(*events).bytes(*bytes);
    let head = format!("footprint: {label} events={events} bytes={bytes}");
    let geometry = match config.geometry() {
        Ok(geometry) => geometry,
        Err(error) => {
            eprintln!("{head} rejected: {error}");
            return;
        }
    };
    // Allocated before the count starts, so that it is not counted.
    let payload = peers::payload((*fill_len).min(geometry.max_payload()));
    let before = live();
    let ring = match Ring::try_new(config) {
        Ok(ring) => ring,
        Err(error) => {
            eprintln!("{head} rejected: {error}");
            return;
        }
    };
    let allocated = live().saturating_sub(before);
    let lost = peers::fill(&ring, &payload, 2 * *events as u64);
    let allocated_full = live().saturating_sub(before);
    drop(ring);
    eprintln!(
        "{head} configured={} geometry_events={} arena_bytes={} max_payload={} \
         geometry_footprint={} allocated={allocated} allocated_full={allocated_full} \
         fill_len={}; {}",
        events * SLOT_BYTES + bytes,
        geometry.events(),
        geometry.arena_bytes(),
        geometry.max_payload(),
        geometry.footprint(),
        payload.len(),
        lost.line()
    );
}

/// Prints one line per configuration.
fn main() {
    for case in cases() {
        measure(&case);
    }
}
