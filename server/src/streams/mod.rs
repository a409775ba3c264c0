//! The Durable Streams protocol (`/v1/stream/{path}`): append-only streams
//! addressed by URL, each a gapless ring that starts small and grows to
//! the configured retention. Retention is never silent: a read from an
//! offset whose data was dropped is answered `410 gap_not_covered` with the
//! earliest offset still retained and how many messages were dropped.
//!
//! | module | holds |
//! |---|---|
//! | `offset` | the offset format and the `offset` parameter |
//! | `numbering` | a stream's offsets: lineage, generations, positions, the `410` figures |
//! | `json_mode` | validating, flattening and framing JSON messages |
//! | `rules` | what decides an append: closure, `Stream-Seq`, idempotent producers |
//! | `charge` | a stream's charge: the memory budget and its client's share, together |
//! | `settings` | what a stream was created with, and the rules that compare and inherit them |
//! | `stream` | one stream: ring, producers, closure, readers' wake-ups (its producers' bookkeeping in `stream_producers.rs`, its side of the journal in `stream_journal.rs`) |
//! | `shown` | what a stream's readers are shown (with `--data-dir`: what is durable), and their wake-up |
//! | `fork_point` | what a fork takes from its source: retained messages up to the offset, a sub-offset prefix |
//! | `shared` | streams in the shared history (`--redis`): any instance serves any stream |
//! | `shared_create` | creating a stream there: pending log, a fork's claim and copy, completion or undo |
//! | `shared_admission` | how many streams the shared history admits, in all and per client |
//! | `shared_feed` | a live reader of a stream in the shared history |
//! | `journal` | what `--data-dir` writes of each stream, and its record |
//! | `restore` | the registry rebuilt from the journal at start-up |
//! | `registry` | every stream: create, forks, delete, expiry, limits |
//! | `feed` | what a read pages through and waits on: a local ring or the shared history |
//! | `wire_page` | a catch-up page encoded for the wire, and the last one a stream built, kept |
//! | `read_buffers` | the bounded pool of buffers catch-up reads copy into |
//! | `writes` | what a create, append or delete goes through: the registry or the shared history |
//!
//! The routes are [`crate::handlers::streams`].

pub(crate) mod charge;
pub(crate) mod feed;
pub(crate) mod fork_point;
pub(crate) mod journal;
pub(crate) mod json_mode;
pub(crate) mod numbering;
pub(crate) mod offset;
pub(crate) mod read_buffers;
pub(crate) mod registry;
pub(crate) mod removals;
pub(crate) mod restore;
pub(crate) mod rules;
pub(crate) mod settings;
pub(crate) mod shared;
pub(crate) mod shared_admission;
pub(crate) mod shared_create;
pub(crate) mod shared_feed;
pub(crate) mod shown;
pub(crate) mod stream;
pub(crate) mod wire_page;
pub(crate) mod writes;

pub(crate) use registry::Streams;
pub(crate) use shared::SharedStreams;
