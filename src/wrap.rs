//! A fixed ring length and the reduction of a virtual position (a seq, a
//! word number) to an index below it.
//!
//! Ring lengths are what [`Config`](crate::Config) asked for, not powers of
//! two, so the reduction is a remainder; a power of two (the common sizes)
//! takes a mask instead, behind a branch that is always predicted. The
//! divisor is a [`NonZeroU64`], so the remainder has no division-by-zero
//! path: nothing between an emitter's claim and its commit may panic.

use std::num::NonZeroU64;

/// A ring length `len >= 1` and how positions wrap onto it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wrap {
    /// The length; every index is below it.
    len: NonZeroU64,
    /// `len - 1` when `len` is a power of two (the index is `position &
    /// mask`), else `None` (the index is `position % len`).
    mask: Option<u64>,
}

impl Wrap {
    /// Positions wrapping onto `len` indexes; `None` for 0.
    pub(crate) fn new(len: u64) -> Option<Self> {
        let len = NonZeroU64::new(len)?;
        Some(Self {
            len,
            mask: len.is_power_of_two().then(|| len.get() - 1),
        })
    }

    /// The length.
    #[inline]
    pub(crate) fn len(&self) -> u64 {
        self.len.get()
    }

    /// `position mod len`.
    #[inline]
    pub(crate) fn index(&self, position: u64) -> u64 {
        match self.mask {
            Some(mask) => position & mask,
            None => position % self.len,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn reduces_like_a_remainder_for_every_length() {
        assert!(Wrap::new(0).is_none());
        for len in [1u64, 2, 3, 7, 8, 1000, 1024, 4097] {
            let wrap = Wrap::new(len).expect("non-zero");
            assert_eq!(wrap.len(), len);
            for position in (0..3 * len).chain([u64::MAX - 1, u64::MAX]) {
                assert_eq!(wrap.index(position), position % len, "{position} mod {len}");
            }
        }
    }
}
