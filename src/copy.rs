//! Payload bytes into and out of shared arena words, in bulk: the engine's
//! only `unsafe` code, and all of it here. The full argument, and what
//! checks it, is in [`docs::copy`](crate::docs::copy); the part every
//! `SAFETY` comment below relies on is this.
//!
//! Emitters write arena words while readers may copy them (a reader
//! validates after copying and discards a torn copy: Boehm's seqlock
//! recipe), so by the Rust memory model every access to them must be
//! atomic, or the race is undefined behaviour even though the torn copy is
//! thrown away. Two implementations meet that rule, one per build:
//!
//! - **Word by word** ([`portable`]): a `Relaxed` `AtomicU64` load or store
//!   per 8 bytes. Sound by construction; what Miri, loom and targets other
//!   than x86-64 run.
//! - **Vector moves in inline assembly** ([`vector`], x86-64 outside Miri
//!   and loom): 16-byte `movdqu` loads and stores, four per loop iteration,
//!   then 16-byte pairs, then one 8-byte `mov` for an odd word (and one for
//!   a payload's padded last word). The assembly is opaque to the compiler,
//!   which must assume it reads and writes the memory it is given (it is
//!   neither `nomem` nor `readonly`), and the hardware performs each of its
//!   loads and stores as single-copy atomic at (at least) byte
//!   granularity: it behaves as a *byte-wise atomic memcpy* with `Relaxed`
//!   byte accesses, the semantics of C++'s P1478
//!   (`atomic_load_per_byte_memcpy` / `atomic_store_per_byte_memcpy`) and
//!   Rust's RFC 3301 (`AtomicPerByte`). The `fence(Release)` before an
//!   emitter's stores and the `fence(Acquire)` after a reader's loads are
//!   ordinary Rust fences; they order these accesses as they would order
//!   any atomic ones. In a build that takes this path *every* access to
//!   arena words goes through it (the tail words too), so accesses of the
//!   two implementations never mix on the same memory.
//!
//! Either way a copy that raced a writer can be torn; the ring's
//! validation after `fence(Acquire)` says whether it did, and a torn copy
//! is reported as evicted, never returned.

use crate::sync::{AtomicU64, Ordering};

/// Stores `src` into `dst` as little-endian words, the last one
/// zero-padded. `dst` must have exactly `src.len().div_ceil(8)` words;
/// with fewer it stores what fits, with more it leaves the rest alone.
#[inline]
pub(crate) fn store(dst: &[AtomicU64], src: &[u8]) {
    #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
    vector::store(dst, src);
    #[cfg(not(all(target_arch = "x86_64", not(miri), not(loom))))]
    portable::store(dst, src);
}

/// Appends the bytes of `src`'s words (little-endian) to `out`.
#[inline]
pub(crate) fn load(src: &[AtomicU64], out: &mut Vec<u8>) {
    #[cfg(all(target_arch = "x86_64", not(miri), not(loom)))]
    vector::load(src, out);
    #[cfg(not(all(target_arch = "x86_64", not(miri), not(loom))))]
    portable::load(src, out);
}

/// The word-by-word copy: `Relaxed` atomics only. (Compiled everywhere: on
/// x86-64 the tests hold the vector copy to it.)
#[cfg_attr(all(target_arch = "x86_64", not(miri), not(loom)), allow(dead_code))]
pub(crate) mod portable {
    use super::{AtomicU64, Ordering};

    /// [`super::store`], one atomic store per word.
    pub(crate) fn store(dst: &[AtomicU64], src: &[u8]) {
        let mut chunks = src.chunks_exact(8);
        for (word, chunk) in dst.iter().zip(chunks.by_ref()) {
            word.store(le_word(chunk), Ordering::Relaxed);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            if let Some(word) = dst.get(src.len() / 8) {
                word.store(padded_word(rest), Ordering::Relaxed);
            }
        }
    }

    /// [`super::load`], one atomic load per word.
    pub(crate) fn load(src: &[AtomicU64], out: &mut Vec<u8>) {
        out.reserve(src.len() * 8);
        for word in src {
            out.extend_from_slice(&word.load(Ordering::Relaxed).to_le_bytes());
        }
    }

    /// An 8-byte chunk as the little-endian word that stores it.
    fn le_word(chunk: &[u8]) -> u64 {
        u64::from_le_bytes(chunk.try_into().unwrap_or_default())
    }

    /// Up to 8 bytes as a little-endian word, zero-padded.
    pub(crate) fn padded_word(bytes: &[u8]) -> u64 {
        let mut word = [0u8; 8];
        let n = bytes.len().min(8);
        word[..n].copy_from_slice(&bytes[..n]);
        u64::from_le_bytes(word)
    }
}

/// The bulk copy: `movdqu` loops in inline assembly (x86-64; SSE2 is part
/// of the x86-64 baseline, so no feature detection).
#[cfg(all(target_arch = "x86_64", not(loom)))]
pub(crate) mod vector {
    use super::AtomicU64;
    use std::arch::asm;

    /// [`super::store`] with vector moves.
    pub(crate) fn store(dst: &[AtomicU64], src: &[u8]) {
        let full_words = (src.len() / 8).min(dst.len());
        let head = full_words * 8;
        // SAFETY: `dst` holds at least `full_words` words, `src` at least
        // `head` bytes; the regions are distinct (the caller's payload is
        // never the arena). The destination's pointer comes from atomics
        // (interior mutability), which may be written through a shared
        // reference, and is only ever accessed atomically (see the module
        // docs): the assembly's stores are byte-wise atomic.
        unsafe { copy_bytes(dst.as_ptr().cast_mut().cast(), src.as_ptr(), head) };
        let rest = src.get(head..).unwrap_or_default();
        if !rest.is_empty() {
            if let Some(word) = dst.get(full_words) {
                // SAFETY: `word` is a valid, aligned `AtomicU64`, written
                // only atomically; an aligned 8-byte `mov` is a single-copy
                // atomic store.
                unsafe { store_word(word.as_ptr(), super::portable::padded_word(rest)) };
            }
        }
    }

    /// [`super::load`] with vector moves.
    pub(crate) fn load(src: &[AtomicU64], out: &mut Vec<u8>) {
        let bytes = src.len() * 8;
        out.reserve(bytes);
        let len = out.len();
        // SAFETY: `reserve` made room for `bytes` more bytes after `len`;
        // `src` holds `bytes` bytes of atomics, only ever accessed
        // atomically (the assembly's loads are byte-wise atomic); the two
        // are distinct allocations. Every byte in `len .. len + bytes` is
        // written by the copy before `set_len` exposes it.
        unsafe {
            copy_bytes(out.as_mut_ptr().add(len), src.as_ptr().cast(), bytes);
            out.set_len(len + bytes);
        }
    }

    /// Copies `len` bytes (a multiple of 8) from `src` to `dst`, by size:
    /// `rep movsb` from [`REP_MOVSB_FROM`] bytes, else 16-byte SSE moves
    /// and a last 8-byte move.
    ///
    /// # Safety
    /// `src` is valid for `len` bytes of reads and `dst` for `len` bytes of
    /// writes, the two do not overlap, and neither is accessed non-atomically
    /// by another thread during the copy.
    #[inline]
    unsafe fn copy_bytes(dst: *mut u8, src: *const u8, len: usize) {
        debug_assert!(len % 8 == 0);
        if len >= REP_MOVSB_FROM {
            // SAFETY: the caller's contract.
            unsafe { copy_bytes_rep(dst, src, len) };
            return;
        }
        // SAFETY: the caller's contract.
        unsafe { copy_bytes_sse(dst, src, len) };
    }

    /// The SSE loop of [`copy_bytes`]: 64 bytes per iteration in four
    /// 16-byte `movdqu` pairs, then 16-byte pairs, then one 8-byte `mov`
    /// pair if a word is left.
    ///
    /// # Safety
    /// As [`copy_bytes`].
    #[inline]
    unsafe fn copy_bytes_sse(dst: *mut u8, src: *const u8, len: usize) {
        let blocks = len / 64;
        let pairs = (len % 64) / 16;
        let word = len % 16 != 0;
        // SAFETY: the caller's contract; the loops move exactly `blocks *
        // 64 + pairs * 16` bytes and the tail 8 more when `word`, which
        // is `len`. No stack use; flags are clobbered (no
        // `preserves_flags`); memory is neither `nomem` nor `readonly`, so
        // the compiler orders surrounding memory accesses (and fences)
        // around it.
        unsafe {
            asm!(
                "test {blocks}, {blocks}",
                "jz 3f",
                "2:",
                "movdqu {a}, xmmword ptr [{src}]",
                "movdqu {b}, xmmword ptr [{src} + 16]",
                "movdqu {c}, xmmword ptr [{src} + 32]",
                "movdqu {d}, xmmword ptr [{src} + 48]",
                "movdqu xmmword ptr [{dst}], {a}",
                "movdqu xmmword ptr [{dst} + 16], {b}",
                "movdqu xmmword ptr [{dst} + 32], {c}",
                "movdqu xmmword ptr [{dst} + 48], {d}",
                "add {src}, 64",
                "add {dst}, 64",
                "dec {blocks}",
                "jnz 2b",
                "3:",
                "test {pairs}, {pairs}",
                "jz 5f",
                "4:",
                "movdqu {a}, xmmword ptr [{src}]",
                "movdqu xmmword ptr [{dst}], {a}",
                "add {src}, 16",
                "add {dst}, 16",
                "dec {pairs}",
                "jnz 4b",
                "5:",
                "test {word:e}, {word:e}",
                "jz 6f",
                "mov {t}, qword ptr [{src}]",
                "mov qword ptr [{dst}], {t}",
                "6:",
                src = inout(reg) src => _,
                dst = inout(reg) dst => _,
                blocks = inout(reg) blocks => _,
                pairs = inout(reg) pairs => _,
                word = in(reg) u32::from(word),
                t = out(reg) _,
                a = out(xmm_reg) _,
                b = out(xmm_reg) _,
                c = out(xmm_reg) _,
                d = out(xmm_reg) _,
                options(nostack),
            );
        }
    }

    /// Copies of at least this many bytes use `rep movsb`: its start-up
    /// cost is paid back only on long runs, where the microcode moves whole
    /// cache lines (ERMS/FSRM). Measured on the project's machine (AMD
    /// EPYC, KVM): emits of 4 KiB took 59 ns with the SSE loop and 86 ns
    /// with `rep movsb`, of 16 KiB about the same (490 / 464 ns), of 64 KiB
    /// 2.8 / 2.3 µs; a replay copying 1 MB out went from 42 to 35 µs.
    /// (32-byte AVX moves, tried too, were no faster than SSE at 256 B to
    /// 4 KiB: the copy is bound by the stores' cache misses, not by the
    /// instruction count.)
    const REP_MOVSB_FROM: usize = 16 << 10;

    /// Copies `len` bytes from `src` to `dst` with one `rep movsb`.
    ///
    /// # Safety
    /// As [`copy_bytes`].
    #[inline]
    unsafe fn copy_bytes_rep(dst: *mut u8, src: *const u8, len: usize) {
        // SAFETY: the caller's contract. `rep movsb` moves `rcx` bytes
        // from `[rsi]` to `[rdi]` forwards (the ABI keeps the direction
        // flag clear); each byte moved is a single-copy atomic access, so
        // the copy is byte-wise atomic like the vector loop.
        unsafe {
            asm!(
                "rep movsb",
                inout("rcx") len => _,
                inout("rdi") dst => _,
                inout("rsi") src => _,
                options(nostack, preserves_flags),
            );
        }
    }

    /// Stores `value` at `dst` with one 8-byte `mov`.
    ///
    /// # Safety
    /// `dst` is valid for an 8-byte write, 8-byte aligned, and not accessed
    /// non-atomically by another thread.
    #[inline]
    unsafe fn store_word(dst: *mut u64, value: u64) {
        // SAFETY: the caller's contract.
        unsafe {
            asm!(
                "mov qword ptr [{dst}], {value}",
                dst = in(reg) dst,
                value = in(reg) value,
                options(nostack, preserves_flags),
            );
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A copy into arena words.
    type Store = fn(&[AtomicU64], &[u8]);
    /// A copy out of arena words.
    type Load = fn(&[AtomicU64], &mut Vec<u8>);

    fn words(n: usize) -> Vec<AtomicU64> {
        (0..n).map(|_| AtomicU64::new(u64::MAX)).collect()
    }

    /// Every length from 0 to 300 (all loop shapes: blocks, pairs, a last
    /// word, a padded tail) and lengths around the `rep movsb` threshold
    /// round-trip through both implementations,
    /// byte for byte, with the padding zero and nothing past it touched.
    #[test]
    fn both_copies_round_trip_every_length() {
        // Miri runs the portable copy only (twice); fewer lengths there.
        // And around the `rep movsb` threshold (16 KiB), natively.
        let long: &[usize] = if cfg!(miri) {
            &[]
        } else {
            &[16375, 16383, 16384, 16385, 16392, 40_001]
        };
        let lengths = if cfg!(miri) { 0..80usize } else { 0..300 };
        for len in lengths.chain(long.iter().copied()) {
            let src: Vec<u8> = (0..len).map(|i| (i * 37 + len) as u8).collect();
            let n = len.div_ceil(8);
            let stores: [Store; 2] = [store, portable::store];
            let loads: [Load; 2] = [load, portable::load];
            for (s, store_fn) in stores.iter().enumerate() {
                let dst = words(n + 1);
                store_fn(&dst[..n], &src);
                assert_eq!(
                    dst[n].load(Ordering::Relaxed),
                    u64::MAX,
                    "store {s} ran past"
                );
                for (l, load_fn) in loads.iter().enumerate() {
                    let mut out = vec![9u8];
                    load_fn(&dst[..n], &mut out);
                    assert_eq!(out.len(), 1 + n * 8, "store {s} load {l} len {len}");
                    assert_eq!(&out[1..=len], &src[..], "store {s} load {l} len {len}");
                    assert!(out[1 + len..].iter().all(|&b| b == 0), "padding of {len}");
                }
            }
        }
    }

    /// A destination shorter than the payload takes what fits: the
    /// arena's first run at the wrap.
    #[test]
    fn a_short_destination_takes_the_leading_words() {
        let src: Vec<u8> = (0..40).collect();
        for store_fn in [store as Store, portable::store] {
            let dst = words(3);
            store_fn(&dst, &src);
            let mut out = Vec::new();
            load(&dst, &mut out);
            assert_eq!(&out[..], &src[..24]);
        }
    }
}
