//! `emit` allocates nothing: a counting global allocator watches the
//! emitting thread.

use gapless::{Config, Ring};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static WATCHING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn note() {
    // `try_with`: the allocator may run while thread-locals are torn down.
    let _ = WATCHING.try_with(|watching| {
        if watching.get() {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        }
    });
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged, so `System`'s guarantees are ours; `note` neither allocates
// nor unwinds (const-initialised thread-locals, `try_with`).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: as above; `ptr` came from this allocator, i.e. from `System`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns how many allocations this thread made during it.
fn allocations_during(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|n| n.set(0));
    WATCHING.with(|w| w.set(true));
    f();
    WATCHING.with(|w| w.set(false));
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn emit_and_emit_batch_allocate_nothing() {
    let ring = Ring::new(Config::default().events(64).bytes(4096));
    let payloads: Vec<Vec<u8>> = (0..300).map(|n| vec![n as u8; n * 7 % 900]).collect();
    let batch: Vec<&[u8]> = payloads.iter().take(5).map(Vec::as_slice).collect();
    let count = allocations_during(|| {
        // Enough to wrap the slots and the arena many times, evicting as it goes.
        for payload in &payloads {
            ring.emit(payload).unwrap();
        }
        for _ in 0..50 {
            ring.emit_batch(&batch).unwrap();
        }
        // Refusals allocate nothing either.
        ring.emit(&[0; 5000]).unwrap_err();
    });
    assert_eq!(count, 0, "emit allocated");
    assert_eq!(ring.published(), 300 + 250);
}

#[test]
fn the_counter_sees_allocations() {
    // A replay allocates its output: proves the counter is live.
    let ring = Ring::new(Config::default());
    ring.emit(b"x").unwrap();
    assert!(allocations_during(|| drop(ring.replay_after(0).unwrap())) > 0);
}
