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
//! ## Guarantees, in short
//!
//! - **No event lost, no silent skip.** Seqs are dense and every seq handed
//!   out is committed with its payload; an emit fails only for a payload
//!   over [`Ring::max_payload`] (half of [`Config::bytes`]), and then
//!   consumes no seq. A replay is every event after the cursor, in order,
//!   or a [`ReplayError`] that says why not — never torn bytes.
//! - **Lock-free emitters, wait-free readers.** An uncontended shared emit
//!   is two locked instructions and no allocation; a [`Writer`] uses plain
//!   stores. An emitter waits only for one stalled a whole window behind
//!   it, and a reader never waits.
//! - **What you configure is what it costs.** A ring preallocates
//!   [`Geometry::footprint`]: 32 bytes per event plus the payload bytes as
//!   configured (and 24 bytes of alignment), resident as written. Half the
//!   events and half the bytes are the reserve that stays readable while
//!   an emitter is stalled: out of the configuration, not on top of it.
//! - **No undefined behaviour.** Shared memory is touched only atomically.
//!   The crate is `#![deny(unsafe_code)]` but for one audited module, the
//!   byte-wise atomic copy of payload bytes ([`docs::copy`]).
//!
//! [`docs::guarantees`] states each guarantee exactly; the other pages of
//! [`docs`] cover memory, progress, the protocol and its proof.
//!
//! ## Modules
//!
//! - The crate root: the types most users need — [`Ring`], [`Writer`],
//!   [`Follower`], [`Store`], [`Config`] and [`Geometry`], [`Event`],
//!   [`Replay`] (a replay's payloads borrowed from one buffer, from
//!   [`Ring::replay_batch`]), [`EventId`], [`Stats`], and the common
//!   errors.
//! - [`config`]: sizing ([`Config`], [`Geometry`]) and every size limit.
//! - [`error`]: every error of the rings, the configuration and the wire
//!   formats, in one place (the session rules' answers are in
//!   [`session`]).
//! - [`event_id`]: the wire form of an event ID.
//! - [`id`]: 128-bit random ids that are credentials (tickets, session
//!   IDs): one type, a strict parser, redacted `Debug`, a log tag.
//! - [`session`]: the migration rules (cursors, resume, upgrade, tickets),
//!   transport-agnostic.
//! - [`sse`]: the server-sent-events encoder and decoder.
//! - [`docs`]: how it works and what it promises, at length: no items,
//!   only text.
//!
//! ## Cargo features
//!
//! - `test-hooks` (off by default): `Ring::emit_with_hook`, which stalls an
//!   emitter between its claim and its commit so that tests can race it
//!   deterministically. For tests only; not covered by semver.

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
pub mod docs;
mod emit;
pub mod epoch;
pub mod error;
mod event;
pub mod event_id;
mod follower;
pub mod id;
mod notify;
mod read;
mod replay;
mod ring;
mod slots;
mod store;
mod sync;
mod wrap;
mod writer;

pub mod session;
pub mod sse;

pub use config::{Config, ConfigError, Geometry};
pub use error::{Coverage, EmitError, Gap, ReadError, ReplayError};
pub use event::Event;
pub use event_id::EventId;
pub use follower::Follower;
pub use replay::Replay;
pub use ring::{EmitMode, ManyWriters, Ring, SingleWriter, Stats};
/// The old name of [`ManyWriters`].
#[deprecated(note = "renamed ManyWriters: it says what the mode allows")]
pub type Shared = ManyWriters;
pub use store::Store;
pub use writer::Writer;
