//! The ring's layout and its lock-free protocol: the shared emit, the
//! single writer, and how readers validate what they copied.
//!
//! # The layout
//!
//! A ring is two blocks preallocated at construction and three counters,
//! each on cache lines of its own (`CachePadded`). `events` and
//! `arena_words` below are the [`Geometry`]'s: [`Geometry::events`] and
//! [`Geometry::arena_words`], exactly what the [`Config`] asked for up to
//! small rounding ([`memory`](super::memory)).
//!
//! - **The index**: one 32-byte slot per retained event. A slot holds where
//!   a seq's record lies (its virtual word position and its length in
//!   bytes) and a **stamp**, the seq whose record it holds, stored last by
//!   that seq's emitter: reading stamp `s` means seq `s` is committed.
//!   Stamps only grow. Seq `s` uses slot `s mod events`, so seq
//!   `s + events` reuses the slot of `s`. When `events` is a multiple of 4
//!   and at least 16 (every count from 64 up is made so), that index `i` is
//!   permuted to `(i mod 4) × events/4 + i/4`: consecutive seqs are a
//!   quarter of the ring apart, never on the same cache line, so concurrent
//!   emitters of seqs `s` and `s + 1` do not false-share.
//! - **The arena**: the payload bytes, in `arena_words` 8-byte words,
//!   addressed by a *virtual* word position that only grows; position `p`
//!   lives in word `p mod arena_words`. A record takes `len.div_ceil(8)`
//!   consecutive positions, its last word zero-padded, and one that
//!   crosses the end of the arena is stored as two runs. Records lie in the
//!   arena in seq order.
//! - **The claim word**: the seqs and words handed out so far, packed so
//!   that one `fetch_add` claims both (below).
//! - **The published watermark** `P`: the highest seq such that every seq
//!   `<= P` is committed. Never decreases, never passes the seqs claimed.
//! - **The end floor** `F`: a lower bound of where the published records
//!   end, raised with `fetch_max` by an emitter that needs words past it.
//!   Never above the words claimed. The reference against which word
//!   positions are decoded, and the emitters' fast wrap check.
//!
//! Lengths are whatever was configured, not powers of two: every reduction
//! `x mod len` is a mask when `len` is a power of two and a remainder
//! otherwise.
//!
//! Each block is split in two. The slots are a **window** of
//! [`Geometry::window`] seqs (half, rounded up) that emitters may write
//! ahead of the watermark, and a **reserve** of
//! [`Geometry::stalled_retained_events`] (the rest) behind it; the arena
//! likewise, a window of [`Geometry::max_payload`] bytes and a reserve of
//! [`Geometry::stalled_retained_bytes`]. Below, `window` is the first in
//! seqs, `window_words` in words; `reserve` and `reserve_words` the second.
//!
//! # The claim word
//!
//! ```text
//! claim = (seqs claimed << 40) + (words claimed)          (mod 2^64)
//! ```
//!
//! An emit of `k` events and `n` words adds `(k << 40) + n` with one
//! `fetch_add` (`AcqRel`). The value it gets back is the claim before it:
//! its seqs are `seqs + 1 ..= seqs + k` and its words `[words, words + n)`.
//! So a seq and its arena position are handed out together, and records
//! lie in the arena in seq order — which is what makes validation and
//! [`Ring::coverage`] O(1).
//!
//! The low 40 bits hold the word count modulo 2^40; the high 24 bits the
//! seq count modulo 2^24, plus every carry out of the low half. Decoding
//! undoes both wraps with references that lag the true counts by less than
//! each field's range: first the words, from the end floor; then the number
//! of carries is the full word count `>> 40`; then the seqs, from the
//! watermark. An emitter decodes its claim against `P` and `F` read just
//! after its `fetch_add`: neither can have passed its own unpublished
//! claim, and the claim's `AcqRel` orders every earlier claimer's wrap
//! check before them, which bounds the lag. A reader brackets its read of
//! the claim word between two reads of both (below).
//!
//! # Emit
//!
//! [`Ring::emit`] and [`Ring::emit_batch`], `&self`, any thread. For seqs
//! `first ..= last` at words `[p, end)`:
//!
//! 1. **Claim.** One `fetch_add` on the claim word; decode against `P` and
//!    `F` read just after.
//! 2. **Wrap check.** The records may be written once
//!    `P >= last - window` and `F >= end - window_words`. Then the slot of
//!    each seq `s` was last used by `s - events <= P - reserve`: published,
//!    and not among the newest `reserve` published events; and each word
//!    it overwrites lies more than `reserve_words` before the end of the
//!    published records, so belongs to a published record. Normally the
//!    `P` and `F` read after the claim say so. Otherwise the slow check
//!    reads `P`, the end of `P`'s record from its slot, `fence(Acquire)`,
//!    `P` again (if it moved by `reserve` or more, that slot may have been
//!    reused: start over from the new `P`), and raises `F` to that end with
//!    `fetch_max`. If there is still no room, an emitter a window behind is
//!    between its claim and its commit: wait for it (spin, then park;
//!    [`progress`](super::progress)).
//! 3. **Write.** `fence(Release)`: the claim (and the wrap check's reads)
//!    are ordered before every store that could overwrite a record, which
//!    is what readers validate against. Then the payload words (through
//!    the byte-wise atomic copy, [`copy`](super::copy)), the slot's
//!    location (`Relaxed`) and its stamp (`Release`); a batch writes every
//!    record, then every stamp.
//! 4. **Publish.** `compare_exchange(first - 1, last)` on the watermark,
//!    `SeqCst`. If it fails, an earlier seq is not published yet: issue
//!    `fence(SeqCst)` and read `P`. Either way, continue over later
//!    committed seqs: while the slot of `P + 1` has stamp `P + 1` (a
//!    `SeqCst` load), raise `P` to it by compare-and-swap; when it has not,
//!    re-read `P` and stop only if it did not move. Then one `SeqCst` load
//!    of the waiter count, and a wake-up if anyone waits.
//!
//! **Why the watermark never stalls below a committed prefix.** Of two
//! emitters settling a stretch of seqs out of order, each commits its
//! stamp, then performs a `SeqCst` operation (the publishing
//! compare-and-swap, or the fence after it failed), then reads the other's
//! work with `SeqCst` loads. Whichever of the two is later in the single
//! total order of `SeqCst` operations sees the other's stamp or its raised
//! watermark (the C++20 rules for `SeqCst` fences), so the last emitter to
//! settle carries the watermark over every committed seq.
//!
//! # The single writer
//!
//! [`Writer::emit`] takes `&mut self`: the writer is the only producer, and
//! the ring it writes, a `Ring<SingleWriter>`, has no `emit`, so the type
//! system keeps shared emits out. It knows the claim without reading it.
//! It stores the new claim word (`Release`); if its record would end more
//! than `window_words` past the floor, stores the record's start as the
//! new floor (every earlier record is published, and a payload fits the
//! window, so that satisfies the wrap check readers rely on); then
//! `fence(Release)`, the payload and the slot's location, the watermark
//! (`Release`), and `fence(SeqCst)` before the load of the waiter count. It
//! stores no stamps (nothing scans them) and never waits: every earlier
//! seq is its own and published. Readers validate its records exactly as
//! they do a shared ring's.
//!
//! # Replay and validation
//!
//! A reader never waits for a writer and never retries
//! ([`Ring::replay_after`], [`Ring::replay_range`], [`Ring::read`]). It
//! reads the watermark `P1` and the end floor `F1`; reads the slot
//! locations of `cursor + 1 ..= last` (`Relaxed`), which must be adjacent
//! (each record starting where the previous one ends) and span at most the
//! arena; copies that run of words in one piece (byte-wise atomic loads);
//! then issues `fence(Acquire)` and reads the claim word, `P2` and `F2`.
//! If `P2 - P1 >= events` or `F2 - F1 >= 2 × arena_words`, emitters
//! overtook the reader so far that what it read is certainly gone: a gap.
//! Otherwise the claim word is decoded against `(P1, F1)` into `H` seqs
//! and `T` words claimed, and record `s` at word `pos` is intact iff
//!
//! ```text
//! s   > H - events        or  P2 <  s + reserve          (its slot), and
//! pos >= T - arena_words  or  F2 <= pos + reserve_words  (its words),
//! ```
//!
//! and `s` is above the seq the ring started after
//! ([`Config::start_after`]; seqs up to it were never in the ring) and
//! `pos <= T` (a torn location cannot point past the words claimed).
//!
//! Every writer claims, and passes its wrap check, before
//! (`fence(Release)`) it stores a slot field or a payload word. So a reader
//! that read even one overwritten value — before its `fence(Acquire)` —
//! sees that writer's claim in `(H, T)` (Boehm's seqlock recipe, with the
//! claim word as the sequence; Agrona's validate-after-copy) *and* the
//! watermark and floor the writer's wrap check saw: the slot of `s` is
//! written again only by seq `s + events`, once the watermark reached
//! `s + reserve`, and a word of `s` only by a record whose check raised the
//! floor past `pos + reserve_words`. The second half of each condition is
//! what keeps the reserve readable while a claimed emitter waits at the
//! wrap: a claim alone overwrites nothing.
//!
//! All four bounds are monotone in `s` (records lie in the arena in seq
//! order), so the intact records are a suffix: checking the first record
//! after the cursor checks the whole replay. Any failure makes the whole
//! replay a [`ReplayError::Gap`], never torn bytes.
//!
//! # Coverage and retention
//!
//! [`Ring::coverage`] runs the same check on the slot of `cursor + 1`
//! alone, without copying: O(1) whatever the gap. The figures of a
//! [`Gap`](crate::Gap) — the oldest retained seq — come from a binary
//! search over the slots against one decoded claim word, checked against a
//! second: O(log events). If emitters overtake the search by a whole ring,
//! it tries again, at most three times, then reports a lower bound (every
//! seq a ring below the watermark is certainly gone).
//!
//! # Wake-ups
//!
//! Followers and emitters parked at the wrap wait for the watermark on one
//! notifier: a waiter count, a mutex and a condition variable (and a list
//! of async wakers). An emitter pays one `SeqCst` load of the count when
//! nobody waits. A waiter raises the count, issues `fence(SeqCst)`, then
//! re-checks the watermark; an emitter raises the watermark with a
//! `SeqCst` compare-and-swap (a single writer: a store and
//! `fence(SeqCst)`), then loads the count with `SeqCst`. Whichever of the
//! waiter's fence and the emitter's raise comes first in the single total
//! order of `SeqCst` operations is seen by the other (the store-buffering
//! litmus test), so either the waiter sees the new watermark or the emitter
//! sees the waiter and wakes it under the mutex. A blocked waiter waits for
//! a generation counter to change, so spurious condition-variable wake-ups
//! are harmless.
//!
//! # Limits of the packed claim word
//!
//! Decoding needs the true counts within the fields' ranges of the
//! references: fewer than 2^24 seqs and 2^40 words claimed beyond the
//! reader's first read of the watermark and the floor. The bracket
//! guarantees that up to a ring (at most
//! [`MAX_EVENTS`](crate::config::MAX_EVENTS) = 2^21 seqs, and two arenas of
//! at most [`MAX_BYTES`](crate::config::MAX_BYTES) = 4 GiB each, 2^30 words)
//! plus what is claimed and not yet published, each emitter holding at most
//! one emit or one batch of [`MAX_BATCH`](crate::config::MAX_BATCH) (4096)
//! events. To break it, some 14.7 million emits (about 3,600 full
//! batches) would have to be claimed and unpublished at once, or about
//! 8 TiB of payloads (some 4,000 emitters each holding a 2 GiB payload, the
//! largest a ring of the largest arena takes): unreachable in practice.
//!
//! # One claim word, not striped
//!
//! The design suggested striping the claim word if it is contended at 4+
//! emitters. It stays one word: the ordered claim is what makes validation
//! and coverage O(1), and `BENCHMARKS.md` shows what two and four emitters
//! reach on the project's 2-core machine.
//!
//! [`Config`]: crate::Config
//! [`Config::start_after`]: crate::Config::start_after
//! [`Geometry`]: crate::Geometry
//! [`Geometry::events`]: crate::Geometry::events
//! [`Geometry::arena_words`]: crate::Geometry::arena_words
//! [`Geometry::window`]: crate::Geometry::window
//! [`Geometry::max_payload`]: crate::Geometry::max_payload
//! [`Geometry::stalled_retained_events`]: crate::Geometry::stalled_retained_events
//! [`Geometry::stalled_retained_bytes`]: crate::Geometry::stalled_retained_bytes
//! [`Ring::emit`]: crate::Ring::emit
//! [`Ring::emit_batch`]: crate::Ring::emit_batch
//! [`Ring::coverage`]: crate::Ring::coverage
//! [`Ring::replay_after`]: crate::Ring::replay_after
//! [`Ring::replay_range`]: crate::Ring::replay_range
//! [`Ring::read`]: crate::Ring::read
//! [`ReplayError::Gap`]: crate::ReplayError::Gap
//! [`Writer::emit`]: crate::Writer::emit
