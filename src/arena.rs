//! The byte arena: payload bytes in preallocated `AtomicU64` words, claimed
//! by a tail counter and guarded by per-block leases.
//!
//! Positions are *virtual* word numbers that only grow; word `p` lives in
//! `words[p mod len]`, and "lap" means `p / len`. Writers claim a run of
//! words with one `fetch_add` on [`Arena::claim`]'s tail counter.
//!
//! The arena is cut into blocks, each guarded by a lease packing
//! `lap << 20 | writers`. A writer joins the lease of its lap, or moves a
//! block on to its lap only when no writer of an older lap is still in it.
//! It never waits: if the block is busy with an older lap, or already on a
//! newer one, the writer writes nothing and its seq is reported lost. So the
//! writers of a block are always of one lap, and a writer descheduled after
//! its claim can never resume and scribble over a newer lap's record.
//!
//! Each lease also remembers the newest seq written into the block, per lap
//! parity. Before the first byte of lap `L` goes into a block, the writer
//! raises the ring's eviction bound to the newest seq of lap `L - 1` there,
//! then issues `fence(Release)`, then stores. A reader that copied a record
//! and then, after `fence(Acquire)`, finds the bound still below the
//! record's seq knows no byte of it was overwritten (if it had read a single
//! overwritten word, the fences would make the raised bound visible). The
//! same bound answers [`Ring::coverage`](crate::Ring::coverage) in O(1), so
//! replay and coverage always agree. Eviction is thus block-granular: a
//! block's records go together, a little before their last word is reused.

use crate::sync::{fence, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// Bytes of memory per block lease.
pub(crate) const LEASE_BYTES: usize = std::mem::size_of::<Lease>();

const WRITER_BITS: u32 = 20;
const WRITER_MASK: u64 = (1 << WRITER_BITS) - 1;
/// Laps are compared modulo 2^44 (the bits left above the writer count).
const LAP_MODULUS_MASK: u64 = (1 << (64 - WRITER_BITS)) - 1;

/// A block's writers: which lap may write into it, and how many are.
#[repr(align(32))]
struct Lease {
    /// `(lap mod 2^44) << 20 | writers`. The lap changes only while
    /// `writers` is zero; `writers` counts writers of that lap that have
    /// joined and not yet left.
    state: AtomicU64,
    /// `newest[lap & 1]`: the highest seq with bytes in this block in the
    /// most recent lap of that parity. Raised by writers before they leave.
    newest: [AtomicU64; 2],
}

/// Why a writer may not write its claimed run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// A writer of an older lap is still writing in one of the blocks.
    Busy,
    /// One of the blocks has already moved on to a newer lap.
    Lapped,
}

/// The word arena.
pub(crate) struct Arena {
    /// Payload storage; read and written only with `Relaxed` atomics inside
    /// the fences described in the module docs.
    words: Box<[AtomicU64]>,
    /// One lease per block, `blocks` of them.
    leases: Box<[Lease]>,
    /// One past the highest claimed virtual position. Never decreases.
    tail: CachePadded<AtomicU64>,
    /// `words.len() - 1`.
    word_mask: u64,
    /// log2 of the words per block.
    block_shift: u32,
    /// `leases.len() - 1`.
    block_mask: u64,
    /// log2 of `leases.len()`.
    lap_shift: u32,
}

impl Arena {
    /// An arena of `words` words in `blocks` blocks (powers of two,
    /// `blocks <= words`).
    pub(crate) fn new(words: usize, blocks: usize) -> Self {
        debug_assert!(words.is_power_of_two() && blocks.is_power_of_two() && blocks <= words);
        Self {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            leases: (0..blocks)
                .map(|_| Lease {
                    state: AtomicU64::new(0),
                    newest: [AtomicU64::new(0), AtomicU64::new(0)],
                })
                .collect(),
            tail: CachePadded::new(AtomicU64::new(0)),
            word_mask: words as u64 - 1,
            block_shift: (words / blocks).trailing_zeros(),
            block_mask: blocks as u64 - 1,
            lap_shift: blocks.trailing_zeros(),
        }
    }

    /// Claims `n > 0` words; returns the virtual position of the first.
    pub(crate) fn claim(&self, n: u64) -> u64 {
        self.tail.fetch_add(n, Ordering::AcqRel)
    }

    /// The virtual blocks a run of `n > 0` words at `start` touches.
    fn blocks_of(&self, start: u64, n: u64) -> std::ops::RangeInclusive<u64> {
        (start >> self.block_shift)..=((start + n - 1) >> self.block_shift)
    }

    fn lease(&self, virtual_block: u64) -> &Lease {
        &self.leases[(virtual_block & self.block_mask) as usize]
    }

    /// Joins the lease of `virtual_block` for its lap.
    fn join(&self, virtual_block: u64) -> Result<(), Refused> {
        let lap = (virtual_block >> self.lap_shift) & LAP_MODULUS_MASK;
        let state = &self.lease(virtual_block).state;
        let mut current = state.load(Ordering::Acquire);
        loop {
            let current_lap = current >> WRITER_BITS;
            let writers = current & WRITER_MASK;
            let next = if current_lap == lap {
                current + 1
            } else if lap.wrapping_sub(current_lap) & LAP_MODULUS_MASK < LAP_MODULUS_MASK / 2 {
                if writers != 0 {
                    return Err(Refused::Busy);
                }
                lap << WRITER_BITS | 1
            } else {
                return Err(Refused::Lapped);
            };
            match state.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(actual) => current = actual,
            }
        }
    }

    /// Leaves the lease of `virtual_block`, publishing this writer's stores.
    fn leave(&self, virtual_block: u64) {
        self.lease(virtual_block)
            .state
            .fetch_sub(1, Ordering::Release);
    }

    /// Writes `payload` (non-empty) into the run of `words_for(len)` words
    /// claimed at `start` for `seq`, first raising `evicted` past every seq
    /// this overwrites. On `Err` nothing was written.
    pub(crate) fn write(
        &self,
        start: u64,
        payload: &[u8],
        seq: u64,
        evicted: &AtomicU64,
    ) -> Result<(), Refused> {
        let n = words_for(payload.len());
        let blocks = self.blocks_of(start, n);
        for block in blocks.clone() {
            if let Err(refused) = self.join(block) {
                for joined in *blocks.start()..block {
                    self.leave(joined);
                }
                return Err(refused);
            }
        }
        for block in blocks.clone() {
            // Holding lap L's lease, lap L + 1 cannot start here, so the
            // other parity's entry is lap L - 1's final newest seq.
            let lap = block >> self.lap_shift;
            let previous =
                self.lease(block).newest[((lap + 1) & 1) as usize].load(Ordering::Acquire);
            if evicted.load(Ordering::Acquire) < previous {
                evicted.fetch_max(previous, Ordering::AcqRel);
            }
        }
        // Everything above (claim, lease, eviction bound) is ordered before
        // any payload store: a reader that sees one of these bytes sees them.
        fence(Ordering::Release);
        let mut position = start;
        let mut chunks = payload.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.store(position, u64::from_le_bytes(word));
            position += 1;
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.store(position, u64::from_le_bytes(word));
        }
        for block in blocks {
            let lap = block >> self.lap_shift;
            self.lease(block).newest[(lap & 1) as usize].fetch_max(seq, Ordering::Relaxed);
            self.leave(block);
        }
        Ok(())
    }

    fn store(&self, position: u64, word: u64) {
        self.words[(position & self.word_mask) as usize].store(word, Ordering::Relaxed);
    }

    /// Appends the `len` bytes at `offset` to `out`. The bytes may be torn;
    /// the caller validates against the eviction bound after `fence(Acquire)`.
    pub(crate) fn copy_into(&self, offset: u64, len: usize, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + len, 0);
        let mut destination = &mut out[start..];
        let mut physical = (offset & self.word_mask) as usize;
        // At most two contiguous runs of words: up to the arena's end, then
        // from its start.
        while !destination.is_empty() {
            let run_words = (self.words.len() - physical).min(destination.len().div_ceil(8));
            let run_bytes = (run_words * 8).min(destination.len());
            let (head, rest) = destination.split_at_mut(run_bytes);
            let words = &self.words[physical..physical + run_words];
            let mut chunks = head.chunks_exact_mut(8);
            for (chunk, word) in (&mut chunks).zip(words) {
                chunk.copy_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
            }
            let tail = chunks.into_remainder();
            if let Some(word) = words.last().filter(|_| !tail.is_empty()) {
                let bytes = word.load(Ordering::Relaxed).to_le_bytes();
                tail.copy_from_slice(&bytes[..tail.len()]);
            }
            destination = rest;
            physical = 0;
        }
    }
}

/// Words needed for `len` bytes.
pub(crate) const fn words_for(len: usize) -> u64 {
    (len as u64).div_ceil(8)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn round_trips_bytes_across_the_wrap() {
        let arena = Arena::new(8, 4);
        let evicted = AtomicU64::new(0);
        let first = arena.claim(5);
        arena.write(first, &[1; 40], 1, &evicted).unwrap();
        let payload: Vec<u8> = (0..37).collect();
        let second = arena.claim(words_for(payload.len()));
        assert_eq!(second, 5);
        arena.write(second, &payload, 2, &evicted).unwrap();
        let mut out = Vec::new();
        arena.copy_into(second, payload.len(), &mut out);
        assert_eq!(out, payload);
        assert_eq!(
            evicted.load(Ordering::Relaxed),
            1,
            "lap 1 raised the bound past seq 1"
        );
    }

    #[test]
    fn an_older_lap_still_writing_refuses_the_newer_one() {
        let arena = Arena::new(8, 4);
        // A writer of lap 0 has joined block 0 and not left.
        arena.join(0).unwrap();
        assert_eq!(arena.join(4), Err(Refused::Busy));
        arena.leave(0);
        arena.join(4).unwrap();
        // Lap 0 came back too late.
        assert_eq!(arena.join(0), Err(Refused::Lapped));
        // Same-lap writers share the block.
        arena.join(4).unwrap();
        arena.leave(4);
        arena.leave(4);
    }
}
