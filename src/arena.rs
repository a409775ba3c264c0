//! The byte arena: payload bytes in preallocated `AtomicU64` words.
//!
//! Positions are *virtual* word numbers that only grow; word `p` lives in
//! `words[p mod len]`. The claim word (see `claim`) hands out runs of
//! positions in seq order. Who may write a run, and when a reader's copy is
//! still valid, is the ring's protocol; the arena only stores and copies
//! words, with `Relaxed` atomics between the fences the ring issues
//! (Boehm's seqlock recipe).

use crate::sync::{AtomicU64, Ordering};

/// The word arena.
pub(crate) struct Arena {
    /// Payload storage; read and written only with `Relaxed` atomics inside
    /// the ring's fences.
    words: Box<[AtomicU64]>,
    /// `words.len() - 1`.
    mask: u64,
}

impl Arena {
    /// An arena of `words` words, a power of two.
    pub(crate) fn new(words: usize) -> Self {
        debug_assert!(words.is_power_of_two());
        Self {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
            mask: words as u64 - 1,
        }
    }

    /// Number of words.
    pub(crate) fn len(&self) -> u64 {
        self.mask + 1
    }

    /// Stores `payload` at the run starting at virtual position `start`
    /// (`words_for(payload.len())` words, the last one zero-padded).
    pub(crate) fn write(&self, start: u64, payload: &[u8]) {
        let mut position = start;
        let mut chunks = payload.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.store(position, u64::from_le_bytes(word));
            position = position.wrapping_add(1);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.store(position, u64::from_le_bytes(word));
        }
    }

    /// Stores one word. `get` is always `Some` (the mask is below the
    /// power-of-two length): no bounds-check panic exists in the emit path.
    fn store(&self, position: u64, word: u64) {
        if let Some(slot) = self.words.get((position & self.mask) as usize) {
            slot.store(word, Ordering::Relaxed);
        }
    }

    /// Copies the words `start .. start + count` (`count <= len()`) into
    /// `out` as little-endian bytes. The words may be torn by a concurrent
    /// writer; the caller validates after `fence(Acquire)`.
    pub(crate) fn copy_words(&self, start: u64, count: usize, out: &mut Vec<u8>) {
        debug_assert!(count as u64 <= self.len());
        out.reserve(count * 8);
        let physical = (start & self.mask) as usize;
        let first_run = count.min(self.words.len() - physical);
        // At most two contiguous runs: up to the arena's end, then from its
        // start.
        for word in self.words[physical..physical + first_run]
            .iter()
            .chain(&self.words[..count - first_run])
        {
            out.extend_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
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
        let arena = Arena::new(8);
        arena.write(0, &[1; 40]);
        let payload: Vec<u8> = (0..37).collect();
        arena.write(5, &payload);
        let mut out = Vec::new();
        arena.copy_words(5, words_for(payload.len()) as usize, &mut out);
        assert_eq!(&out[..payload.len()], &payload[..]);
        assert_eq!(
            &out[payload.len()..],
            &[0, 0, 0],
            "the last word is zero-padded"
        );
        out.clear();
        arena.copy_words(13, 3, &mut out);
        assert_eq!(&out[..24], &payload[..24], "virtual positions wrap");
    }
}
