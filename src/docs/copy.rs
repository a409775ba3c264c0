//! The byte-wise atomic copy of payload bytes: the crate's only `unsafe`
//! code, and the argument that it is no data race.
//!
//! # Why every access to the arena must be atomic
//!
//! The arena's words are written by emitters while readers may be copying
//! them: a reader copies first and validates afterwards, and throws a torn
//! copy away ([`protocol`](super::protocol#replay-and-validation), Boehm's
//! seqlock recipe). By the Rust memory model a non-atomic access that races
//! with a write is undefined behaviour even if its result is discarded —
//! the compiler may assume no other thread changes the memory, and tear or
//! re-read it at will — so `ptr::copy_nonoverlapping` on shared words is
//! not an option. Every access to arena words must be atomic, and the
//! fences that order them (an emitter's `fence(Release)` before its stores,
//! a reader's `fence(Acquire)` after its loads) only synchronise through
//! atomic accesses.
//!
//! # Two implementations, one per build
//!
//! `src/copy.rs` has two, behind the same two functions (store a payload
//! into words, append words' bytes to a buffer):
//!
//! - **Word by word**: one `Relaxed` `AtomicU64` load or store per 8
//!   bytes, the last word zero-padded. No `unsafe`: sound by construction.
//!   It is what Miri, loom and targets other than x86-64 run. The compiler
//!   may not merge or widen atomic accesses, so it moves 8 bytes per
//!   instruction, plus the assembly of bytes into words.
//! - **Vector moves in inline assembly**, on x86-64 outside Miri and loom:
//!   a loop of four 16-byte `movdqu` loads then four stores (64 bytes per
//!   iteration), then 16-byte pairs, then one 8-byte `mov` pair for an odd
//!   word; a payload's zero-padded last word is stored with one 8-byte
//!   `mov`. SSE2 is part of the x86-64 baseline, so nothing is detected at
//!   run time.
//!
//! In a build that takes the vector path, *every* access to arena words
//! goes through it, the tail words too; the arena is otherwise only
//! touched when it is allocated zeroed, before it is shared. So the two
//! implementations never meet on the same memory, and, read as the
//! byte-wise accesses below, all of a build's accesses to the arena have
//! one size: racing atomic accesses of different sizes, which the Rust
//! memory model does not allow, never occur.
//!
//! # Why the assembly is no data race
//!
//! 1. **What it means.** A Rust program may use inline assembly whose
//!    effect on memory is one the abstract machine could have produced.
//!    The effect claimed here is that of a *byte-wise atomic memcpy*: each
//!    byte loaded or stored with a `Relaxed` atomic access, in no
//!    particular order between bytes. That is the operation C++'s
//!    [P1478](https://wg21.link/p1478) proposes
//!    (`atomic_load_per_byte_memcpy` / `atomic_store_per_byte_memcpy`) for
//!    exactly this seqlock use, and Rust's
//!    [RFC 3301](https://github.com/rust-lang/rfcs/pull/3301)
//!    (`AtomicPerByte`); the [`atomic-memcpy`](https://docs.rs/atomic-memcpy)
//!    crate implements it with ordinary atomics, pointer-sized where the
//!    alignment allows (on 64-bit targets much as the word loop above
//!    does). Atomic accesses do not race, so a
//!    torn copy is a legal outcome, not undefined behaviour — and the
//!    reader's validation discards it.
//! 2. **What the hardware does.** x86-64 performs every load and store of
//!    `movdqu` and `mov` as single-copy atomic for each byte: a byte is
//!    never torn, though a wider access may be split between bytes. So the
//!    machine gives at least the per-byte semantics claimed.
//! 3. **What the compiler may assume.** The assembly is opaque to it and is
//!    declared neither `nomem` nor `readonly`: the compiler must assume the
//!    block reads and writes the memory its pointer operands reach, so it
//!    neither reorders the surrounding memory accesses and fences across
//!    it nor invents or elides accesses to the arena. The blocks touch no
//!    other memory (`nostack`).
//! 4. **How it is ordered.** The fences around the copy are ordinary Rust
//!    fences and order the per-byte atomic accesses as they would any
//!    atomic ones: a reader that loads one byte an emitter stored after its
//!    `fence(Release)`, and then issues `fence(Acquire)`, synchronises with
//!    that emitter and sees its claim when it re-reads the claim word.
//! 5. **The non-shared side.** An emitter's source is the caller's
//!    `&[u8]`, which nobody writes during the copy; a reader's destination
//!    is its own freshly reserved buffer, whose length is set only after
//!    every byte of it is written. The regions never overlap.
//!
//! `src/copy.rs` keeps this reasoning in `SAFETY` comments next to each
//! `unsafe` block. The crate is `#![deny(unsafe_code)]` with
//! `#[allow(unsafe_code)]` on that one module, and
//! `#![deny(unsafe_op_in_unsafe_fn)]`.
//!
//! # What checks it, and what cannot
//!
//! No tool can execute the argument above for the vector path, which is
//! why the word loop stays:
//!
//! - **Miri** interprets the program and does not run inline assembly. It
//!   runs the word loop, with the same fences and the same validation, so
//!   its race detector checks the protocol around the copy.
//! - **loom** explores interleavings only through its own atomic types:
//!   under loom the arena's words are loom atomics, not plain memory, and a
//!   copy must go through them for loom to choose which older value each
//!   `Relaxed` load returns — the torn copies the models check that
//!   validation catches.
//! - **ThreadSanitizer** does not see inside inline assembly. In a TSan
//!   build on x86-64 the vector path runs and TSan checks everything around
//!   it (counters, slots, fences), not the arena copies themselves.
//! - **Tests** hold the vector copy to the word loop byte for byte, for
//!   every length from 0 to 299 bytes (every loop shape: 64-byte blocks,
//!   16-byte pairs, an odd word, a padded tail), with the padding zero and
//!   nothing past the destination touched; and records round-trip across
//!   the wrap of arenas of any length.
//!
//! # Alternatives
//!
//! - `ptr::copy_nonoverlapping` (or `memcpy`): as fast, but a data race by
//!   the Rust memory model, whatever the hardware does.
//! - `rep movsb` in inline assembly for every copy: the same argument
//!   applies, but on the project's machine (an AMD EPYC) its start-up cost
//!   ate most of the gain at 256-byte payloads (4 KiB emits: 86 ns against
//!   the vector loop's 59 ns), hence the explicit loop of vector moves;
//!   `src/copy.rs` takes `rep movsb` only for copies from 16 KiB
//!   (`REP_MOVSB_FROM`), where it pays back.
//! - Wider vectors (AVX): would need run-time feature detection; SSE2's
//!   16-byte moves need none.
