//! The index ring: one slot per retained event, keyed by seq.
//!
//! A slot says where seq `s`'s payload lives in the arena and whether it is
//! there. Its `stamp` packs the seq that owns the slot with that seq's state,
//! in the manner of crossbeam's `ArrayQueue` stamps:
//!
//! ```text
//! stamp = seq << 2 | state      state: WRITING = 0, COMMITTED = 1, LOST = 2
//! ```
//!
//! Stamps only grow. A slot changes hands by one compare-and-swap from a
//! *settled* stamp (`COMMITTED` or `LOST`, of an older seq) to `WRITING(s)`;
//! only the writer holding `WRITING(s)` writes the slot's location fields,
//! and only it moves the stamp on, to `COMMITTED(s)` or `LOST(s)`. A writer
//! that finds the slot held by a newer seq was lapped; one that finds an
//! older seq still `WRITING` gives up rather than wait for it. Both report
//! their seq lost; neither touches the slot.
//!
//! Readers treat the stamp as a seqlock around the location fields: load it
//! (`Acquire`), read the fields, copy, `fence(Acquire)`, load it again. The
//! next owner changes the stamp *before* (`fence(Release)`) it changes the
//! fields, so a reader that saw new fields sees a new stamp.
//!
//! Consecutive seqs are spread over different cache lines (see
//! [`Slots::index`]) so that concurrent emitters of seq `s` and `s + 1` do not
//! false-share.

use crate::sync::{AtomicU64, Ordering};

/// Bytes of memory per slot.
pub(crate) const SLOT_BYTES: usize = std::mem::size_of::<Slot>();

const STATE_BITS: u32 = 2;
const STATE_MASK: u64 = (1 << STATE_BITS) - 1;
const WRITING: u64 = 0;
const COMMITTED: u64 = 1;
const LOST: u64 = 2;

/// How many slots share a 128-byte line pair (`SLOT_BYTES` is 32).
const SPREAD: usize = 4;

/// The stamp of a slot whose writer of `seq` is writing.
pub(crate) const fn writing(seq: u64) -> u64 {
    seq << STATE_BITS | WRITING
}

/// The stamp of a slot holding `seq`'s committed payload location.
pub(crate) const fn committed(seq: u64) -> u64 {
    seq << STATE_BITS | COMMITTED
}

/// The stamp of a slot whose writer of `seq` gave up.
pub(crate) const fn lost(seq: u64) -> u64 {
    seq << STATE_BITS | LOST
}

/// One index entry.
#[repr(align(32))]
struct Slot {
    /// `seq << 2 | state`; see the module docs. Starts as `LOST(0)`: seq 0 is
    /// never emitted, so a fresh slot is settled and free.
    stamp: AtomicU64,
    /// Virtual word position of the payload in the arena. Written only by the
    /// writer holding `WRITING` on this slot, before it commits.
    offset: AtomicU64,
    /// Payload length in bytes. Written under the same rule as `offset`.
    len: AtomicU64,
}

/// What [`Slots::acquire`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Claim {
    /// The caller now holds `WRITING(seq)`.
    Owned,
    /// A newer seq already holds the slot: the caller was lapped.
    Lapped,
    /// An older seq's writer is still writing: the caller gives up.
    Busy,
}

/// Where a committed payload lives, as a reader saw it before copying.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Location {
    /// The stamp seen before reading the fields: `COMMITTED(seq)`.
    pub(crate) stamp: u64,
    /// Virtual word position in the arena.
    pub(crate) offset: u64,
    /// Payload bytes.
    pub(crate) len: u64,
}

/// The index ring.
pub(crate) struct Slots {
    /// `mask + 1` slots, a power of two.
    slots: Box<[Slot]>,
    /// `slots.len() - 1`.
    mask: u64,
    /// log2 of `slots.len() / SPREAD` when spreading, else 0.
    quarter_shift: u32,
    /// Whether consecutive seqs are spread over cache lines (rings of at
    /// least `SPREAD * SPREAD` slots).
    spread: bool,
}

impl Slots {
    /// `count` free slots; `count` is a power of two, at least 2.
    pub(crate) fn new(count: usize) -> Self {
        debug_assert!(count.is_power_of_two() && count >= 2);
        let spread = count >= SPREAD * SPREAD;
        let quarter_shift = if spread {
            (count / SPREAD).trailing_zeros()
        } else {
            0
        };
        Self {
            slots: (0..count)
                .map(|_| Slot {
                    stamp: AtomicU64::new(lost(0)),
                    offset: AtomicU64::new(0),
                    len: AtomicU64::new(0),
                })
                .collect(),
            mask: count as u64 - 1,
            quarter_shift,
            spread,
        }
    }

    /// Number of slots.
    pub(crate) fn len(&self) -> u64 {
        self.mask + 1
    }

    /// The slot index of `seq`: `seq mod len`, with the two low bits moved
    /// to the top so that seqs `s` and `s + 1` are a quarter of the ring
    /// apart, never on the same cache line.
    fn index(&self, seq: u64) -> usize {
        let i = seq & self.mask;
        let i = if self.spread {
            (i & (SPREAD as u64 - 1)) << self.quarter_shift | i >> SPREAD.trailing_zeros()
        } else {
            i
        };
        i as usize
    }

    fn slot(&self, seq: u64) -> &Slot {
        &self.slots[self.index(seq)]
    }

    /// Tries to take `seq`'s slot for writing. Wait-free: the loop retries
    /// only when the stamp moved from `WRITING` to settled, which happens at
    /// most once before the next check returns.
    pub(crate) fn acquire(&self, seq: u64) -> Claim {
        let stamp = &self.slot(seq).stamp;
        let mut current = stamp.load(Ordering::Acquire);
        loop {
            if current >> STATE_BITS >= seq {
                return Claim::Lapped;
            }
            if current & STATE_MASK == WRITING {
                return Claim::Busy;
            }
            match stamp.compare_exchange(current, writing(seq), Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Claim::Owned,
                Err(actual) => current = actual,
            }
        }
    }

    /// Records where `seq`'s payload is. The caller holds `WRITING(seq)` and
    /// has issued `fence(Release)` since acquiring it.
    pub(crate) fn set_location(&self, seq: u64, offset: u64, len: u64) {
        let slot = self.slot(seq);
        slot.offset.store(offset, Ordering::Relaxed);
        slot.len.store(len, Ordering::Relaxed);
    }

    /// Publishes `seq`'s location. The caller holds `WRITING(seq)`.
    pub(crate) fn commit(&self, seq: u64) {
        self.slot(seq)
            .stamp
            .store(committed(seq), Ordering::Release);
    }

    /// Gives the slot up after the caller, holding `WRITING(seq)`, failed to
    /// write its payload.
    pub(crate) fn mark_lost(&self, seq: u64) {
        self.slot(seq).stamp.store(lost(seq), Ordering::Release);
    }

    /// Whether `seq` is settled as far as this slot can tell: committed,
    /// lost, or overtaken by a newer seq (so it will never commit).
    pub(crate) fn is_settled(&self, seq: u64) -> bool {
        let stamp = self.slot(seq).stamp.load(Ordering::Acquire);
        let owner = stamp >> STATE_BITS;
        owner > seq || (owner == seq && stamp & STATE_MASK != WRITING)
    }

    /// The location of `seq`'s payload if the slot holds it committed. The
    /// fields may be torn by a concurrent new owner; [`Slots::still`] after
    /// the copy tells.
    pub(crate) fn locate(&self, seq: u64) -> Option<Location> {
        let slot = self.slot(seq);
        let stamp = slot.stamp.load(Ordering::Acquire);
        if stamp != committed(seq) {
            return None;
        }
        Some(Location {
            stamp,
            offset: slot.offset.load(Ordering::Relaxed),
            len: slot.len.load(Ordering::Relaxed),
        })
    }

    /// Whether the slot still holds what `location` was read under. Call after
    /// `fence(Acquire)`.
    pub(crate) fn still(&self, seq: u64, location: &Location) -> bool {
        self.slot(seq).stamp.load(Ordering::Acquire) == location.stamp
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn index_is_a_permutation_that_spreads_neighbours() {
        for count in [2usize, 4, 8, 16, 64, 1024] {
            let slots = Slots::new(count);
            let mut seen = vec![false; count];
            for seq in 0..count as u64 {
                let i = slots.index(seq);
                assert!(!seen[i], "index {i} used twice for {count} slots");
                seen[i] = true;
                if count >= 16 {
                    let next = slots.index(seq + 1);
                    assert_ne!(i / SPREAD, next / SPREAD, "neighbours share a line");
                }
            }
        }
    }

    #[test]
    fn a_slot_changes_hands_only_when_settled() {
        let slots = Slots::new(4);
        assert_eq!(slots.acquire(1), Claim::Owned);
        assert!(!slots.is_settled(1));
        // seq 5 maps to the same slot while 1 is still writing.
        assert_eq!(slots.acquire(5), Claim::Busy);
        slots.set_location(1, 7, 3);
        slots.commit(1);
        assert!(slots.is_settled(1));
        let loc = slots.locate(1).unwrap();
        assert_eq!((loc.offset, loc.len), (7, 3));
        assert_eq!(slots.acquire(5), Claim::Owned);
        assert!(slots.is_settled(1), "overtaken counts as settled");
        assert!(slots.locate(1).is_none());
        assert_eq!(slots.acquire(1), Claim::Lapped);
        slots.mark_lost(5);
        assert!(slots.is_settled(5));
        assert!(slots.locate(5).is_none());
    }
}
