//! The index ring: one 32-byte slot per retained event, keyed by seq
//! (`seq mod events`, spread over cache lines by [`Slots::index`]): where
//! the seq's record lies in the arena, and the stamp that commits it. Who
//! may write a slot and when: [`docs::protocol`](crate::docs::protocol#emit).

use crate::arena::zeroed_slice;
use crate::sync::{AtomicU64, Ordering};
use crate::wrap::Wrap;

/// Words per slot: the stamp, the location's position and length, and one
/// spare, so that a slot is 32 bytes and, aligned to 32, never straddles a
/// cache line.
const SLOT_WORDS: usize = 4;
/// Bytes of memory per slot.
pub(crate) const SLOT_BYTES: usize = SLOT_WORDS * 8;

/// How many slots share a 128-byte line pair (`SLOT_BYTES` is 32).
const SPREAD: usize = 4;

/// One index entry: `SLOT_WORDS` words of [`Slots::words`], all 0 in a
/// fresh slot. Destructured as `[stamp, pos, len, _spare]`:
///
/// - `stamp`: the committed seq whose location the next two words hold; 0
///   (never emitted) in a fresh slot. Stored last, with `Release`, by that
///   seq's emitter.
/// - `pos`: virtual word position of the payload's first word. Written only
///   by the emitter of the seq that owns the slot, before its stamp.
/// - `len`: payload length in bytes. Written under the same rule as `pos`.
type Slot = [AtomicU64; SLOT_WORDS];

/// Where a record lives, as read from its slot. May be torn if the slot was
/// reused during the read; readers validate against the claim word.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Location {
    /// Virtual word position of the first payload word.
    pub(crate) pos: u64,
    /// Payload bytes.
    pub(crate) len: u64,
}

impl Location {
    /// One past the record's last word.
    pub(crate) fn end(&self) -> u64 {
        self.pos.wrapping_add(self.len.div_ceil(8))
    }
}

/// The index ring.
pub(crate) struct Slots {
    /// The slots: `wrap.len()` of them, [`SLOT_WORDS`] words each, from
    /// word `first`; all 0 (fresh) until their first seq is written.
    ///
    /// Allocated once, in full, by [`zeroed_slice`], so resident only as
    /// emits first write them (a few pages for a ring holding a few events)
    /// and never grown. Hence plain words rather than a
    /// `#[repr(align(32))]` slot type: the allocator zeroes blocks aligned
    /// above 16 bytes by writing them, which would make every slot
    /// resident at once; instead the slots start at the first word on a
    /// 32-byte boundary (up to `SLOT_WORDS - 1` spare words before it).
    words: Box<[AtomicU64]>,
    /// Index of the slots' first word in `words`: 32-byte aligned.
    first: usize,
    /// The number of slots, and how a seq wraps onto them.
    wrap: Wrap,
    /// A quarter of the slots when consecutive seqs are spread over cache
    /// lines (a multiple of [`SPREAD`] slots, at least `SPREAD * SPREAD`),
    /// else 0.
    quarter: u64,
}

impl Slots {
    /// `count` fresh slots, `count >= 2`. Allocated in full now, resident
    /// as written (see [`zeroed_slice`]).
    pub(crate) fn new(count: usize) -> Self {
        debug_assert!(count >= 2);
        let spread = count % SPREAD == 0 && count >= SPREAD * SPREAD;
        let words = zeroed_slice(Self::allocation_words(count), || AtomicU64::new(0));
        // The first word on a slot boundary. Under loom, whose atomics are
        // not single words, any start will do (0 if none is aligned): the
        // layout matters only to the cache there is no model of.
        let first = (0..SLOT_WORDS)
            .find(|&i| {
                words
                    .get(i)
                    .is_some_and(|word| std::ptr::from_ref(word).addr() % SLOT_BYTES == 0)
            })
            .unwrap_or(0);
        Self {
            words,
            first,
            wrap: Wrap::new(count as u64).unwrap_or_else(|| unreachable!("count >= 2")),
            quarter: if spread { (count / SPREAD) as u64 } else { 0 },
        }
    }

    /// Words allocated for `count` slots: theirs plus up to
    /// `SLOT_WORDS - 1` to align the first.
    fn allocation_words(count: usize) -> usize {
        count * SLOT_WORDS + SLOT_WORDS - 1
    }

    /// Bytes allocated for `count` slots.
    pub(crate) fn allocation_bytes(count: usize) -> usize {
        Self::allocation_words(count) * 8
    }

    /// Number of slots.
    pub(crate) fn len(&self) -> u64 {
        self.wrap.len()
    }

    /// The slot index of `seq`: `seq mod len`, and when spreading, its two
    /// low bits moved to the top (`i mod 4` quarters, `i / 4` within one),
    /// so that seqs `s` and `s + 1` are a quarter of the ring apart, never
    /// on the same cache line.
    fn index(&self, seq: u64) -> usize {
        let i = self.wrap.index(seq);
        let i = if self.quarter != 0 {
            (i % SPREAD as u64) * self.quarter + i / SPREAD as u64
        } else {
            i
        };
        i as usize
    }

    /// `seq`'s slot. Always `Some` (`index` is below the length); an
    /// `Option` so that no bounds-check panic exists in the
    /// emit path, where nothing may panic between claim and commit.
    fn slot(&self, seq: u64) -> Option<&Slot> {
        let start = self.first + self.index(seq) * SLOT_WORDS;
        self.words.get(start..start + SLOT_WORDS)?.try_into().ok()
    }

    /// Records where `seq`'s payload is. The caller emits `seq`, has claimed
    /// it, waited for the slot's previous record to leave the reserve, and
    /// issued `fence(Release)` since the claim.
    pub(crate) fn set_location(&self, seq: u64, location: Location) {
        if let Some([_, pos, len, _]) = self.slot(seq) {
            pos.store(location.pos, Ordering::Relaxed);
            len.store(location.len, Ordering::Relaxed);
        }
    }

    /// [`Slots::set_location`] then [`Slots::commit`], with one lookup of
    /// the slot: the single emit's path.
    #[inline]
    pub(crate) fn set_location_and_commit(&self, seq: u64, location: Location) {
        if let Some([stamp, pos, len, _]) = self.slot(seq) {
            pos.store(location.pos, Ordering::Relaxed);
            len.store(location.len, Ordering::Relaxed);
            stamp.store(seq, Ordering::Release);
        }
    }

    /// Marks `seq` committed: its payload and location are in place.
    pub(crate) fn commit(&self, seq: u64) {
        if let Some([stamp, ..]) = self.slot(seq) {
            stamp.store(seq, Ordering::Release);
        }
    }

    /// Whether `seq` is committed. `SeqCst`: the publish scan relies on it
    /// (see `Ring::publish`).
    pub(crate) fn is_committed(&self, seq: u64) -> bool {
        self.slot(seq)
            .is_some_and(|[stamp, ..]| stamp.load(Ordering::SeqCst) == seq)
    }

    /// The location fields of `seq`'s slot, as they are now: `seq`'s if it
    /// is published and its slot not reused, else possibly torn. The caller
    /// validates after `fence(Acquire)`.
    pub(crate) fn locate(&self, seq: u64) -> Location {
        self.slot(seq)
            .map_or_else(Location::default, |[_, pos, len, _]| Location {
                pos: pos.load(Ordering::Relaxed),
                len: len.load(Ordering::Relaxed),
            })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fresh_slots_are_all_zero_and_aligned() {
        // Miri interprets every word: the small counts there.
        let counts: &[usize] = if cfg!(miri) {
            &[2, 3, 4, 20, 21]
        } else {
            &[2, 3, 4, 1000, 1 << 10, 1030]
        };
        for &count in counts {
            let slots = Slots::new(count);
            for seq in 0..count as u64 {
                let slot = slots.slot(seq).expect("every seq has a slot");
                assert_eq!(std::ptr::from_ref(slot).addr() % SLOT_BYTES, 0);
                assert!(slot.iter().all(|word| word.load(Ordering::Relaxed) == 0));
                assert_eq!(slots.locate(seq), Location::default());
                assert_eq!(slots.is_committed(seq), seq == 0);
            }
        }
    }

    #[test]
    fn index_is_a_permutation_that_spreads_neighbours() {
        let counts: &[usize] = if cfg!(miri) {
            &[2, 3, 4, 8, 16, 20, 21, 64]
        } else {
            &[2, 3, 4, 8, 16, 20, 21, 64, 1000, 1024, 1030]
        };
        for &count in counts {
            let slots = Slots::new(count);
            let mut seen = vec![false; count];
            for seq in 0..count as u64 {
                let i = slots.index(seq);
                assert!(!seen[i], "index {i} used twice for {count} slots");
                seen[i] = true;
                if count >= 16 && count % 4 == 0 {
                    let next = slots.index(seq + 1);
                    assert_ne!(i / SPREAD, next / SPREAD, "neighbours share a line");
                }
            }
        }
    }

    #[test]
    fn a_stamp_names_exactly_the_committed_seq() {
        let slots = Slots::new(4);
        assert!(!slots.is_committed(1));
        slots.set_location(1, Location { pos: 7, len: 3 });
        slots.commit(1);
        assert!(slots.is_committed(1));
        assert_eq!(slots.locate(1), Location { pos: 7, len: 3 });
        assert_eq!(slots.locate(1).end(), 8);
        // Seq 5 shares the slot; until it commits, neither 5 nor 9 is.
        assert!(!slots.is_committed(5) && !slots.is_committed(9));
        slots.commit(5);
        assert!(slots.is_committed(5) && !slots.is_committed(1));
    }
}
