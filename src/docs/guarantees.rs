//! What a ring promises, stated exactly.
//!
//! Each guarantee below holds alike for a [`Ring`] with any number of
//! emitters and for the `Ring<SingleWriter>` of a [`Writer`] (one
//! exclusive emitter), unless it says otherwise. [`proof`](super::proof)
//! says how each is checked.
//!
//! # Dense seqs, none ever lost
//!
//! Each emit takes the next seq (1, 2, 3, …, or from
//! [`Config::start_after`]` + 1`), never reused, and every seq handed out is
//! committed with its payload. [`Ring::emit`] fails only with
//! [`EmitError::TooLarge`], for a payload over [`Ring::max_payload`], and
//! then consumes no seq; [`Ring::emit_batch`] also with
//! [`EmitError::BatchTooLarge`], and then emits nothing. An emitter is never
//! told that its event was lost to another emitter: at the one point where
//! that could happen it waits instead ([`progress`](super::progress)).
//!
//! **The largest payload is half the payload memory**
//! ([`Geometry::max_payload`]: half of `bytes(n)` rounded up to a whole
//! 8-byte word), not the whole of it: the other half is the reserve that
//! stays readable while an emitter is stalled (below). To take payloads of
//! up to `p` bytes, configure `bytes(2 * p)` or more.
//!
//! ```
//! use gapless::{Config, EmitError, Ring};
//! let ring = Ring::new(Config::default().events(16).bytes(1000));
//! assert_eq!(ring.max_payload(), 504); // 125 words, a window of 63
//! assert_eq!(ring.emit(&[0; 504])?, 1);
//! assert_eq!(ring.emit(&[0; 505]), Err(EmitError::TooLarge { len: 505, max: 504 }));
//! assert_eq!(ring.emit(b"next")?, 2); // the refused emit took no seq
//! # Ok::<(), EmitError>(())
//! ```
//!
//! # Contiguous replays
//!
//! [`Ring::published`] is the highest `h` such that every seq `<= h` is
//! committed; it never decreases. [`Ring::replay_after`]`(cursor)` returns
//! exactly the events `cursor + 1 ..= h`, in order, or an error that says
//! why it cannot: [`ReplayError::Gap`] (events after the cursor are gone,
//! with the figures) or [`ReplayError::Ahead`] (the cursor names events
//! never published). Never a silent skip, never an empty answer to a cursor
//! from the future, never torn or foreign bytes. [`Ring::coverage`] answers
//! the same question in O(1) without copying, with the same figures.
//!
//! # Lock-free emitters in the steady state, zero allocations per emit
//!
//! An uncontended shared emit executes two locked instructions, read from
//! the disassembly of `Ring::emit` (x86-64, release): `lock xadd` (the
//! claim) and `lock cmpxchg` (the publish). Emitters committing out of
//! order add one `fence(SeqCst)` (`lock or`) and a scan. A [`Writer`]
//! executes no locked instruction on shared data: plain stores and one
//! `fence(SeqCst)` (`lock or` on its own stack) so that waiting followers
//! are woken. Neither allocates: payload bytes are copied into memory
//! preallocated when the ring was built (`tests/no_alloc.rs` counts).
//!
//! The one exception to lock-freedom is deliberate: an emitter a whole
//! window ahead of an emitter stalled between its claim and its commit
//! waits for it ([`progress`](super::progress)).
//!
//! # Wait-free readers
//!
//! [`Ring::replay_after`], [`Ring::replay_range`], [`Ring::read`] and
//! [`Ring::coverage`] never wait for a writer and never retry: a replay is
//! one pass over at most [`Geometry::events`] slots, one copy of at most
//! the arena, and one validation
//! ([`protocol`](super::protocol#replay-and-validation)). A copy that was
//! overwritten while it was read is reported as evicted, never returned. ([`Ring::first_retained`] and [`Ring::stats`] search
//! the slots in O(log events), at most three times, then settle for a lower
//! bound.)
//!
//! # Retention under a stalled emitter
//!
//! While the watermark moves, a ring retains its newest
//! [`Geometry::events`] events, as far as [`Geometry::bytes`] holds them
//! (each record takes its length rounded up to 8 bytes). While it stands
//! still, because an emitter is stalled between claim and commit, other
//! emitters keep claiming but never overwrite the newest
//! [`Geometry::stalled_retained_events`] published events (half the
//! events, rounded down) nor the newest
//! [`Geometry::stalled_retained_bytes`] of published records (half the
//! payload memory, rounded down to a word): replays within them keep
//! succeeding. That reserve comes out of what was configured, never on
//! top of it.
//!
//! # What you configure is what it costs
//!
//! `events(n)` is `n` slots (rounded up to a multiple of 4 from 64 up: at
//! most 3 more), `bytes(b)` is `b` bytes of payload memory (rounded up to a
//! whole word: at most 7 more), and a ring preallocates exactly
//! [`Geometry::footprint`]: `events ×`
//! [`BYTES_PER_EVENT`](crate::config::BYTES_PER_EVENT)` + bytes + 24`
//! bytes (the 24 align the slots), resident only as it is first written.
//! Sizes outside the [limits](crate::config) are an error from
//! [`Ring::try_new`] and a documented panic from [`Ring::new`] (likewise
//! [`Writer`] and [`Store`](crate::Store)), never silently clamped.
//! [`memory`](super::memory) has the whole account.
//!
//! # No undefined behaviour
//!
//! Memory shared between threads is read and written only atomically:
//! counters and slots through `std`'s atomics, payload bytes (which live in
//! `AtomicU64` words) through a byte-wise atomic copy. The crate is
//! `#![deny(unsafe_code)]` but for one module, `src/copy.rs`, which holds
//! that copy in inline assembly and is the crate's only `unsafe` code;
//! [`copy`](super::copy) gives the argument that it is no data race by the
//! Rust memory model. Miri, loom and targets other than x86-64 use a loop
//! of `Relaxed` `AtomicU64` accesses instead, with no `unsafe` at all.
//!
//! # Foreign cursors are recognised
//!
//! Every ring has a random, non-zero [`Ring::epoch`] fixed at creation
//! (or [`Config::epoch`]), which an [`EventId`](crate::EventId) carries on
//! the wire: a cursor from another incarnation of the stream is
//! recognisably foreign, never misread as a position.
//!
//! [`Ring`]: crate::Ring
//! [`Writer`]: crate::Writer
//! [`Config::start_after`]: crate::Config::start_after
//! [`Config::epoch`]: crate::Config::epoch
//! [`Ring::emit`]: crate::Ring::emit
//! [`Ring::emit_batch`]: crate::Ring::emit_batch
//! [`Ring::max_payload`]: crate::Ring::max_payload
//! [`Ring::published`]: crate::Ring::published
//! [`Ring::replay_after`]: crate::Ring::replay_after
//! [`Ring::replay_range`]: crate::Ring::replay_range
//! [`Ring::read`]: crate::Ring::read
//! [`Ring::coverage`]: crate::Ring::coverage
//! [`Ring::first_retained`]: crate::Ring::first_retained
//! [`Ring::stats`]: crate::Ring::stats
//! [`Ring::epoch`]: crate::Ring::epoch
//! [`Ring::try_new`]: crate::Ring::try_new
//! [`Ring::new`]: crate::Ring::new
//! [`EmitError::TooLarge`]: crate::EmitError::TooLarge
//! [`EmitError::BatchTooLarge`]: crate::EmitError::BatchTooLarge
//! [`ReplayError::Gap`]: crate::ReplayError::Gap
//! [`ReplayError::Ahead`]: crate::ReplayError::Ahead
//! [`Geometry::max_payload`]: crate::Geometry::max_payload
//! [`Geometry::events`]: crate::Geometry::events
//! [`Geometry::bytes`]: crate::Geometry::bytes
//! [`Geometry::footprint`]: crate::Geometry::footprint
//! [`Geometry::stalled_retained_events`]: crate::Geometry::stalled_retained_events
//! [`Geometry::stalled_retained_bytes`]: crate::Geometry::stalled_retained_bytes
