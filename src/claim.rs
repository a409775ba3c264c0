//! The claim word: one `u64` that hands out a seq and its arena position
//! together, so that records lie in the arena in seq order.
//!
//! ```text
//! word = (seqs claimed << 40) + (words claimed)          (mod 2^64)
//! ```
//!
//! [`Claimed::decode`] undoes the wrap of both fields against references
//! that lag the true counts by less than each field's range. How emitters
//! and readers get such references, and the limits that follow:
//! [`docs::protocol`](crate::docs::protocol#the-claim-word).

/// Bits of the word position field. Under loom the seq field shrinks to 2
/// bits (a range of 4 seqs), so that a model can overtake a reader by a
/// whole range in four emits and check that the reader's bracketed decode
/// notices. (Every model keeps fewer than 4 seqs between a reader's first
/// watermark read and the claims it decodes, as the bracket requires.)
#[cfg(not(loom))]
const POS_BITS: u32 = 40;
#[cfg(loom)]
const POS_BITS: u32 = 62;
/// Bits of the seq field.
const SEQ_BITS: u32 = 64 - POS_BITS;
const POS_MASK: u64 = (1 << POS_BITS) - 1;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

/// How far the true seq count may run ahead of a decode reference: the
/// seq field's range. A ring keeps far fewer seqs in flight (see the crate
/// docs' limits).
#[cfg(test)]
const SEQ_RANGE: u64 = 1 << SEQ_BITS;
/// How far the true word count may run ahead of a decode reference.
#[cfg(test)]
const POS_RANGE: u64 = 1 << POS_BITS;

/// The increment that claims `seqs` seqs and `words` words.
pub(crate) const fn increment(seqs: u64, words: u64) -> u64 {
    (seqs << POS_BITS).wrapping_add(words)
}

/// A decoded claim word: every seq `<= seqs` and every word `< words` has
/// been handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Claimed {
    /// Seqs handed out; the next emit gets `seqs + 1`.
    pub(crate) seqs: u64,
    /// Words handed out; the next record starts here.
    pub(crate) words: u64,
}

impl Claimed {
    /// The claim word of `self` (inverse of [`Claimed::decode`]).
    pub(crate) const fn encode(self) -> u64 {
        increment(self.seqs, self.words)
    }

    /// Decodes `word` given references `seq_ref <= seqs < seq_ref + SEQ_RANGE`
    /// and `pos_ref <= words < pos_ref + POS_RANGE`. Outside those bounds the
    /// result is wrong but never panics.
    pub(crate) const fn decode(word: u64, seq_ref: u64, pos_ref: u64) -> Self {
        let words = pos_ref.wrapping_add(word.wrapping_sub(pos_ref) & POS_MASK);
        let seqs_mod = (word >> POS_BITS).wrapping_sub(words >> POS_BITS) & SEQ_MASK;
        let seqs = seq_ref.wrapping_add(seqs_mod.wrapping_sub(seq_ref) & SEQ_MASK);
        Self { seqs, words }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decodes_across_both_wraps() {
        // 2^40 + 5 words claimed: one carry into the seq field.
        let truth = Claimed {
            seqs: (1 << 24) + 3,
            words: (1 << 40) + 5,
        };
        assert_eq!(Claimed::decode(truth.encode(), 10, 1 << 39), truth);
        assert_eq!(
            Claimed::decode(truth.encode(), truth.seqs, truth.words),
            truth
        );
    }

    proptest! {
        #[test]
        fn decode_inverts_encode_within_the_reference_bounds(
            seqs in 0u64..1 << 50,
            words in 0u64..1 << 62,
            seq_lag in 0u64..SEQ_RANGE,
            pos_lag in 0u64..POS_RANGE,
        ) {
            let truth = Claimed { seqs, words };
            let seq_ref = seqs.saturating_sub(seq_lag);
            let pos_ref = words.saturating_sub(pos_lag);
            prop_assert_eq!(Claimed::decode(truth.encode(), seq_ref, pos_ref), truth);
        }

        #[test]
        fn a_fetch_add_of_increments_is_an_add_of_claims(
            seqs in 0u64..1 << 40,
            words in 0u64..1 << 60,
            k in 0u64..1 << 20,
            n in 0u64..1 << 32,
        ) {
            let before = Claimed { seqs, words };
            let after = before.encode().wrapping_add(increment(k, n));
            prop_assert_eq!(
                Claimed::decode(after, seqs, words),
                Claimed { seqs: seqs + k, words: words + n }
            );
        }
    }
}
