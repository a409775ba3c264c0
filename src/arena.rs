//! The byte arena: payload bytes in preallocated `AtomicU64` words, at
//! virtual word positions that only grow (position `p` in word
//! `p mod len`, any `len`). It stores and copies words, through
//! [`crate::copy`], between the fences the ring issues; who may write a run
//! and when a copy is valid is the ring's protocol
//! ([`docs::protocol`](crate::docs::protocol#the-layout)). Allocated
//! zeroed and in full, resident as written ([`zeroed_slice`];
//! [`docs::memory`](crate::docs::memory)).

use crate::sync::AtomicU64;
use crate::wrap::Wrap;

/// The word arena.
pub(crate) struct Arena {
    /// Payload storage; read and written only through [`crate::copy`]
    /// (byte-wise atomic copies) inside the ring's fences. Every word is 0
    /// until first written (a fresh arena holds no record, and a record's
    /// last word is zero-padded anyway). Allocated once, in full, by
    /// [`zeroed_slice`]: the pages are reserved at construction and become
    /// resident as emits first write them, so residency follows use up to
    /// the full arena, never beyond it.
    words: Box<[AtomicU64]>,
    /// `words.len()`, and how a virtual position wraps onto it.
    wrap: Wrap,
}

impl Arena {
    /// An arena of `words` words (at least 1), all 0: allocated in full
    /// now, resident as written (see [`zeroed_slice`]).
    pub(crate) fn new(words: usize) -> Self {
        Self {
            words: zeroed_slice(words, || AtomicU64::new(0)),
            wrap: Wrap::new(words as u64).unwrap_or_else(|| unreachable!("an arena has words")),
        }
    }

    /// Number of words.
    pub(crate) fn len(&self) -> u64 {
        self.wrap.len()
    }

    /// Stores `payload` at the run starting at virtual position `start`
    /// (`words_for(payload.len())` words, at most `len()`, the last one
    /// zero-padded): the arena from `start` to its end, then from its
    /// beginning. No panic path.
    #[inline]
    pub(crate) fn write(&self, start: u64, payload: &[u8]) {
        let (wrapped, from_start) = self.runs_from(start);
        let (first, second) = payload.split_at((from_start.len() * 8).min(payload.len()));
        crate::copy::store(from_start, first);
        if !second.is_empty() {
            crate::copy::store(wrapped, second);
        }
    }

    /// The arena split at virtual position `start`: `(words before it,
    /// words from it to the end)`, the two runs a record starting there
    /// occupies, in reverse order.
    fn runs_from(&self, start: u64) -> (&[AtomicU64], &[AtomicU64]) {
        let physical = self.wrap.index(start) as usize;
        self.words.split_at(physical.min(self.words.len()))
    }

    /// The words `start .. start + count` (`count <= len()`) as
    /// little-endian bytes, in one allocation (the tests' shorthand for
    /// [`Arena::copy_words_into`]).
    #[cfg(test)]
    pub(crate) fn copy_words(&self, start: u64, count: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        self.copy_words_into(start, count, &mut bytes);
        bytes
    }

    /// The words `start .. start + count` (`count <= len()`) as
    /// little-endian bytes, into `out` in place of what it held: a caller
    /// that reuses `out` allocates nothing once it is large enough. The
    /// words may be torn by a concurrent writer; the caller validates after
    /// `fence(Acquire)`.
    pub(crate) fn copy_words_into(&self, start: u64, count: usize, out: &mut Vec<u8>) {
        debug_assert!(count as u64 <= self.len());
        let (wrapped, from_start) = self.runs_from(start);
        let first = &from_start[..count.min(from_start.len())];
        let second = &wrapped[..(count - first.len()).min(wrapped.len())];
        out.clear();
        out.reserve(count * 8);
        crate::copy::load(first, out);
        crate::copy::load(second, out);
    }
}

/// `len` values of `T`, each the all-zero value that `zero` builds.
///
/// Allocated in one piece with the allocator's zeroed allocation
/// (`alloc_zeroed`, through `bytemuck`, so the engine stays free of
/// `unsafe`), which takes large blocks fresh from the OS (`calloc` →
/// `mmap`): their pages read as zero without being written, and become
/// resident only when first written. Writing each value here instead, as
/// `(0..len).map(|_| zero()).collect()` does, would make the whole block
/// resident at construction: 8 MiB for a 4 MiB ring that holds a handful of
/// events. The block is never grown or reallocated; a full ring is resident
/// up to its [`Geometry::footprint`](crate::Geometry::footprint) and no
/// further.
///
/// Fresh pages are the allocator's to give. glibc's `calloc` gives them
/// for blocks above its mmap threshold (and from a freshly grown heap),
/// but once a block of a ring's size has been freed it raises that
/// threshold (up to 32 MiB) and serves such blocks from its heap, zeroing
/// reused memory by writing it: under ring churn, idle rings then cost
/// megabytes again (see benches/memory.rs). A process that churns rings
/// fixes the threshold (`MALLOC_MMAP_THRESHOLD_=131072` or `mallopt`) or
/// uses an allocator that zeroes by returning pages to the OS.
///
/// `T` is aligned to at most 8 bytes: the system allocator zeroes blocks
/// of larger alignment by writing them, making them resident at once.
/// Aborts like `Vec` (`handle_alloc_error`) when the allocation fails.
#[cfg(not(loom))]
pub(crate) fn zeroed_slice<T: bytemuck::Zeroable>(len: usize, _zero: impl Fn() -> T) -> Box<[T]> {
    const { assert!(std::mem::align_of::<T>() <= 8) };
    bytemuck::try_zeroed_slice_box(len).unwrap_or_else(|()| {
        match std::alloc::Layout::array::<T>(len) {
            Ok(layout) => std::alloc::handle_alloc_error(layout),
            Err(_) => panic!(
                "{len} values of {} overflow isize",
                std::any::type_name::<T>()
            ),
        }
    })
}

/// `len` values of `T`, each built by `zero`. Under loom, whose atomics are
/// not plain memory (and not `Zeroable`), one by one: the same initial
/// state, element by element.
#[cfg(loom)]
pub(crate) fn zeroed_slice<T>(len: usize, zero: impl Fn() -> T) -> Box<[T]> {
    (0..len).map(|_| zero()).collect()
}

/// Words needed for `len` bytes.
pub(crate) const fn words_for(len: usize) -> u64 {
    (len as u64).div_ceil(8)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_arena_is_all_zero_words() {
        let arena = Arena::new(1 << 12);
        assert_eq!(arena.len(), 1 << 12);
        assert!(arena.copy_words(0, 1 << 12).iter().all(|&b| b == 0));
    }

    #[test]
    fn round_trips_bytes_across_the_wrap() {
        let arena = Arena::new(8);
        arena.write(0, &[1; 40]);
        assert_eq!(arena.len(), 8);
        let payload: Vec<u8> = (0..37).collect();
        arena.write(5, &payload);
        let out = arena.copy_words(5, words_for(payload.len()) as usize);
        assert_eq!(&out[..payload.len()], &payload[..]);
        assert_eq!(
            &out[payload.len()..],
            &[0, 0, 0],
            "the last word is zero-padded"
        );
        let out = arena.copy_words(13, 3);
        assert_eq!(&out[..24], &payload[..24], "virtual positions wrap");
    }

    /// An arena of any length wraps at its end: a record written across
    /// it is read back whole, from any virtual position.
    #[test]
    fn round_trips_across_the_wrap_of_a_non_power_of_two_arena() {
        let arena = Arena::new(13);
        let payload: Vec<u8> = (0..77).map(|i| i * 3).collect();
        for start in [0u64, 5, 12, 13, 25, 1_000_003] {
            arena.write(start, &payload);
            let out = arena.copy_words(start, words_for(payload.len()) as usize);
            assert_eq!(&out[..payload.len()], &payload[..], "at {start}");
            assert!(out[payload.len()..].iter().all(|&b| b == 0));
        }
    }
}
