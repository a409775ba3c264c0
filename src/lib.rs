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
//! silent skip, never torn bytes. A [`Store`] holds many rings by key;
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
//! - **Dense seqs.** Each emit takes the next seq (1, 2, 3, …), never
//!   reused. An emitter lapped before it commits gets
//!   [`EmitError::Lapped`]; readers report its seq as a gap.
//! - **Contiguous replays.** [`Ring::published`] is the highest `h` with
//!   every seq `<= h` committed or known gone; a replay is `cursor+1 ..= h`
//!   or an error.
//! - **Lock-free emitters, zero allocations per emit.** Payload bytes are
//!   copied into memory preallocated at construction.
//! - **Wait-free readers** that validate after copying and report eviction
//!   instead of returning overwritten bytes.
//! - **Bounded memory**, in events and in bytes, fixed by [`Config`].
//! - **No undefined behaviour.** Shared memory is only touched through
//!   atomics; payload bytes live in `AtomicU64` words. The crate has no
//!   `unsafe` code.
//!
//! ## Layout and protocol
//!
//! A ring is three preallocated pieces and four counters.
//!
//! - The **index**: one 32-byte slot per retained event, at `seq mod
//!   events` (with the two low bits rotated to the top so neighbouring seqs
//!   sit on different cache lines). A slot's stamp, `seq << 2 | state`,
//!   tells *being written by seq s* from *committed for s* from *lost*; a
//!   slot changes hands by one compare-and-swap, only from a settled stamp.
//! - The **arena**: payload bytes in `AtomicU64` words, addressed by a
//!   virtual word position that only grows, claimed by `fetch_add` on a
//!   tail counter.
//! - **Block leases**: the arena is cut into (up to 64) blocks, each with a
//!   lease `lap << 20 | writers`. Writers of one lap share a block; a writer
//!   of a newer lap takes it only when no older-lap writer is still in it,
//!   and otherwise gives up (its seq is lost) rather than wait. So a stalled
//!   writer can never scribble over a newer lap's record.
//!
//! **Emit** (`&self`, any thread): claim a seq (`fetch_add` on `head`), take
//! its slot (one CAS), claim arena words (`fetch_add` on `tail`), join the
//! blocks' leases, raise the eviction bound past the previous lap's records
//! in those blocks, `fence(Release)`, store the payload words, leave the
//! leases, record the location, commit the stamp (`Release`). Then
//! `fence(SeqCst)` and advance `published` over every settled seq; the last
//! emitter to settle, in fence order, sees all earlier ones, so the
//! watermark never stalls below a settled prefix.
//!
//! **Replay** (wait-free, at most `events` steps): check the cursor against
//! `published` and the eviction bound (`max(evicted, head - events)`), then
//! copy each event under its stamp, `fence(Acquire)`, and validate: the
//! stamp is unchanged and the eviction bound, re-read, is still below the
//! seq. A writer raises the bound *before* (`fence(Release)`) it stores the
//! first byte of a new lap into a block, so a reader that copied even one
//! overwritten word sees the raised bound — Agrona's validate-after-copy,
//! with the eviction bound as the intent. Any failure turns the replay
//! into a [`Gap`] whose figures come from that same bound, so
//! [`coverage`](Ring::coverage) (O(1), no copying) and replay agree.
//!
//! **Lapped emitters.** A writer that finds its slot taken by a newer seq,
//! or an older writer still in it, or a block lease it may not join, raises
//! the eviction bound to its seq and marks the seq lost; the watermark then
//! passes it and readers report it as part of a gap.
//!
//! **Arena striping.** DESIGN.md suggests striping the arena if its claim
//! counter is contended at 4+ emitters. This ring keeps one tail counter:
//! measured on the project's 2-core machine, four emitters emit no faster
//! than one (10.1 vs 10.0 M events/s, `cargo bench --bench emit`), so the
//! claim counter is not what limits throughput there and striping cannot be
//! shown to help; `BENCHMARKS.md` has the figures.
//!
//! ## Concurrency proof
//!
//! Every atomic protocol above is model-checked with loom: the engine takes
//! its primitives from one facade (`sync`) that maps to loom under
//! `cfg(loom)`, and `loom-tests/` holds the models.

#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![forbid(unsafe_code)]
#![warn(rust_2018_idioms)]

mod arena;
mod claim;
mod config;
mod emit;
mod epoch;
mod error;
mod event;
mod event_id;
mod follower;
mod notify;
mod read;
mod ring;
mod slots;
mod store;
mod sync;
mod writer;

pub mod session;
pub mod sse;

pub use config::{Config, ConfigError, Geometry, MAX_BYTES, MAX_EVENTS, MIN_BYTES, MIN_EVENTS};
pub use emit::MAX_BATCH;
pub use error::{Coverage, EmitError, Gap, ReadError, ReplayError};
pub use event::Event;
pub use event_id::{EventId, ParseEventIdError, MAX_EVENT_ID_LEN};
pub use follower::Follower;
pub use ring::{EmitMode, Ring, Shared, SingleWriter, Stats};
pub use store::Store;
pub use writer::Writer;
