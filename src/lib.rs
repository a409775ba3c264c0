//! # gapless
//!
//! A replay-buffer engine for streaming servers that must never lose an
//! event silently.
//!
//! A server that streams events (SSE, WebSocket) keeps a bounded buffer of
//! recent events so that a client reconnecting with `Last-Event-ID: N` gets
//! every event after `N`. gapless is that buffer: a [`Ring`] per stream that
//! many threads [`emit`](Ring::emit) into without locks, that readers
//! [`replay_after`](Ring::replay_after) a cursor without waiting, and that
//! either returns every event after the cursor, in order, or says exactly
//! why it cannot ([`ReplayError::Gap`], [`ReplayError::Ahead`]) — never a
//! silent skip, never torn bytes. A stream with one producer can use a
//! [`Writer`] instead, which emits with plain stores. A [`Store`] holds many
//! rings by key;
//! [`EventId`] and [`sse`] are the wire formats.
//!
//! ```
//! use gapless::{Config, Coverage, Event, EventId, ReplayError, Ring};
//!
//! let ring = Ring::new(Config::default().events(1024).bytes(1 << 20));
//! let seq = ring.emit(b"{\"hello\":1}")?;
//! assert_eq!(seq, 1);
//! assert_eq!(ring.published(), 1);
//!
//! // A client that processed nothing gets everything.
//! let events: Vec<Event> = ring.replay_after(0)?;
//! assert_eq!(&events[0].payload[..], b"{\"hello\":1}");
//!
//! // Its wire ID carries the ring's epoch, so a cursor from another
//! // incarnation of the stream is recognisably foreign.
//! let id = EventId { epoch: ring.epoch(), seq };
//! let parsed: EventId = id.to_string().parse()?;
//! assert_eq!(parsed, id);
//!
//! // A cursor the server never published is refused, not answered empty.
//! assert!(matches!(ring.replay_after(5), Err(ReplayError::Ahead { cursor: 5, published: 1 })));
//! assert!(matches!(ring.coverage(0), Coverage::Covered { first: 1, last: 1 }));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## Guarantees
//!
//! - **Dense seqs, none ever lost.** Each emit takes the next seq (1, 2, 3,
//!   …), never reused, and every seq handed out is committed with its
//!   payload. [`Ring::emit`] fails only with [`EmitError::TooLarge`] (no seq
//!   consumed); `Config::bytes(n)` accepts a payload of `n` bytes.
//! - **Contiguous replays.** [`Ring::published`] is the highest `h` with
//!   every seq `<= h` committed; a replay is `cursor+1 ..= h` or an error.
//! - **Lock-free emitters in the steady state, zero allocations per emit.**
//!   An uncontended shared emit executes two locked instructions, read from
//!   the disassembly of `Ring::emit` (x86-64, release): `lock xadd` (the
//!   claim) and `lock cmpxchg` (the publish). A [`Writer`] (single-writer
//!   mode) executes none on shared data: plain stores and one
//!   `fence(SeqCst)` (`lock or` on the stack) so that followers are woken.
//! - **Wait-free readers** that validate after copying and report eviction
//!   instead of returning overwritten bytes.
//! - **Retention under a stalled emitter**: the newest half of the ring (in
//!   events and in bytes) is never overwritten while the watermark stands
//!   still, so replays within it keep succeeding ([`Geometry`]).
//! - **Bounded memory**, in events and in bytes, fixed by [`Config`].
//! - **No undefined behaviour.** Shared memory is only touched through
//!   atomics; payload bytes live in `AtomicU64` words. The crate has no
//!   `unsafe` code.
//!
//! ## Progress: who waits for whom, and when
//!
//! An emitter of seq `s` waits in exactly one case: the slot or arena words
//! it claimed still hold a record the watermark has not yet moved a window
//! past — that is, the emitter of some seq `<= s - window` (half the ring
//! in events, or the records half an arena of words back) has claimed and
//! not yet committed: it was descheduled, or is copying a huge payload. The
//! waiter spins briefly, then parks on the same notifier followers use, and
//! counts itself in [`Stats::wrap_waits`] / [`Stats::wrap_wait_nanos`].
//! The emitter of the lowest unpublished seq never waits (its slot and
//! words are free by construction), so the system as a whole always makes
//! progress; a stalled emitter delays only those a whole window ahead of
//! it. This gives up strict lock-freedom in that one case, on purpose, as
//! crossbeam's `ArrayQueue` and the Disruptor's producers do at the wrap:
//! losing an event to scheduling is the opposite of what gapless is for.
//! Size rings so that `events` covers the emit rate times a scheduler
//! slice; `Stats::wrap_waits` says whether it does. Readers never wait.
//! A [`Writer`] never waits (every earlier seq is its own and published).
//!
//! The window between an emitter's claim and its publish cannot panic:
//! nothing in it allocates, calls user code, or indexes out of range (the
//! slot and arena indexes are masked and read through `get`, so the
//! disassembly of `Ring::emit` and `Writer::emit` has no call to a panic
//! function), arithmetic wraps, and the park tolerates a poisoned mutex.
//! The only code after the publish that can unwind is a follower's waker.
//!
//! ## Layout and protocol
//!
//! A ring is two preallocated pieces and three counters.
//!
//! - The **index**: one 32-byte slot per retained event, at `seq mod
//!   events` (with the two low bits rotated to the top so neighbouring seqs
//!   sit on different cache lines): the record's word position, its length,
//!   and a stamp (the committed seq).
//! - The **arena**: payload bytes in `AtomicU64` words, addressed by a
//!   virtual word position that only grows; twice the configured bytes
//!   (the second half is the retention reserve).
//! - The **claim word**: `(seqs << 40) + words` in one `u64`, so one
//!   `fetch_add` hands out a seq and its words together and records lie in
//!   the arena in seq order; the **published watermark**; and a lower bound
//!   of where the published records end, which decodes word positions.
//!
//! **Emit** (`&self`, any thread): claim (`fetch_add`), decode against the
//! watermark; if the seq or its words are more than a window ahead of the
//! watermark, wait (above); `fence(Release)`; store the payload words, the
//! slot's location and stamp (`Release`); `compare_exchange` the watermark
//! from `seq - 1` to `seq` (`SeqCst`), then continue over later committed
//! seqs. If that fails, an earlier emitter has not committed yet: issue
//! `fence(SeqCst)` and scan from the watermark; of two emitters committing
//! out of order, the one later in the `SeqCst` order sees the other's stamp
//! or raised watermark, so the watermark never stalls below a committed
//! prefix. Then one `SeqCst` load of the waiter count.
//!
//! **Replay** (wait-free, at most `events` slots and one arena of words):
//! read the watermark and end bound, read the locations, copy the payload
//! run, `fence(Acquire)`, and decode the claim word *between* that first
//! read and a second one. Record `s` at word `p` is intact iff its slot has
//! not been claimed again (`s > claimed_seqs - events`) and none of its
//! words has (`p >= claimed_words - arena_words`). Every writer claims
//! before (`fence(Release)`) it stores anything a reader could copy, so a
//! reader that copied an overwritten word sees its claim — Boehm's seqlock
//! recipe with the claim word as the sequence, Agrona's validate-after-copy.
//! Both conditions are monotone in `s`, so checking the first record checks
//! the replay; any failure is a [`Gap`] whose figures [`Ring::coverage`]
//! (O(1)) computes the same way.
//!
//! **Limits of the packed claim word.** Decoding needs the true counts
//! within the fields' ranges of the references: fewer than 2^24 seqs and
//! 2^40 words claimed beyond the reader's first read of the watermark, which
//! the second read guarantees up to a ring plus what emitters parked at the
//! wrap hold (each at most one emit or one batch of [`MAX_BATCH`](config::MAX_BATCH) events).
//! That is unreachable in practice: it takes millions of parked emitters,
//! or thousands each parked with a multi-GiB payload.
//!
//! **Claim striping.** The design suggested striping the claim word if it is
//! contended at 4+ emitters. It stays one word: the ordered claim is what
//! makes validation and coverage O(1), and `BENCHMARKS.md` shows what two
//! and four emitters reach on the project's 2-core machine.
//!
//! ## Concurrency proof
//!
//! Every atomic protocol above is model-checked with loom: the engine takes
//! its primitives from one facade (`sync`) that maps to loom under
//! `cfg(loom)`, and `loom-tests/` holds the models. loom treats `SeqCst`
//! accesses as `AcqRel`, so under loom the facade adds the `fence(SeqCst)`
//! that the C++20 rules give the publish compare-and-swap and the waiter
//! count load; and it narrows the claim word's seq field to 2 bits, so a
//! model can overtake a reader by a whole field range in four emits.

#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(unsafe_code)]
#![warn(rust_2018_idioms)]

mod arena;
mod claim;
pub mod config;
// The bulk payload copy in inline assembly: the crate's only `unsafe`.
#[allow(unsafe_code)]
mod copy;
mod emit;
mod epoch;
pub mod error;
mod event;
pub mod event_id;
mod follower;
mod notify;
mod read;
mod ring;
mod slots;
mod store;
mod sync;
mod wrap;
mod writer;

pub mod session;
pub mod sse;

pub use config::{Config, Geometry};
pub use error::{ConfigError, Coverage, EmitError, Gap, ReadError, ReplayError};
pub use event::Event;
pub use event_id::EventId;
pub use follower::Follower;
pub use ring::{EmitMode, Ring, Shared, SingleWriter, Stats};
pub use store::Store;
pub use writer::Writer;
