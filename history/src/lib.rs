//! # gapless-history
//!
//! The shared history tier of `gapless-server --redis URL` and of
//! `gapless-rmcp`'s shared store: every event of a session
//! is appended to a Redis Stream before it is acknowledged, and the
//! session's epoch, published seq and cursors live beside it, so that any
//! instance can serve any session — emits included — with the same event
//! IDs and the same refusals.
//!
//! Per session `{id}` (one hash tag: one Redis Cluster slot):
//!
//! | key | holds |
//! | --- | --- |
//! | `gapless:{id}:s` | the events, entry ID `0-<seq>`, field `d` = payload |
//! | `gapless:{id}:z` | a list: the payload length of each retained event, oldest first |
//! | `gapless:{id}:m` | `epoch` (hex), `published` (the last seq appended), `bytes` (retained payload bytes), `acked`, `sent` (maxima, never lowered), `attach` (the attach generation), `inc` (the `run_id` of the Redis that created or last appended to the session), `pk` (the publish key, with `--publish-keys`), `done` (set by `complete`: an rmcp request stream after its response; reads then leave its expiry alone) |
//! | `gapless:{id}:t:<ticket>` | an upgrade ticket's cursor (`<epoch>-<seq>`), until the ticket expires or is used |
//!
//! Every write is a Lua script (atomic, never rolled back). The append is
//! the sequencer: it gives a batch the seqs after `published`, so two
//! instances never append the same seq and no instance waits for another.
//! It then trims the session to the ring's limits — events *and* payload
//! bytes, exactly, from the sizes list — and `PUBLISH`es `"<id> <last>"` on
//! `gapless:appended:<id>`, which every instance following the session
//! hears on its one pub/sub connection ([`notify`]) to bring its mirror up
//! to date. Redis itself clamps an
//! evicted cursor silently (`XRANGE` just starts at the oldest entry): the
//! gap check is ours, on the seqs returned.
//!
//! No seq is given to two events under one epoch, even when Redis loses
//! acknowledged ones (a restart from an older snapshot, a failover to a
//! replica that lagged): `published` would then hand their seqs out again.
//! The append finds the loss — `inc` is not the `run_id` Redis reports now
//! (`INFO server`) and Redis does not persist every write before answering
//! (`appendonly yes` with `appendfsync always`, probed when an instance
//! connects, and logged), or `published` is below what the appending
//! instance's ring has seen under the same epoch — and continues the
//! session under a new random epoch, from seq 1, with no events, its
//! cursors reset and its transports superseded. The batch is answered with
//! the new epoch; every instance drops its copy of the old epoch, and a
//! client holding a cursor of it is answered `409 foreign_epoch`, never
//! served other events under its seqs. Without such persistence, a session
//! appended to after any Redis restart continues under a new epoch, lost
//! events or not.
//!
//! Every call has its own deadline (`--redis-timeout`): an unreachable
//! Redis is a [`HistoryError::Unavailable`] in bounded time, never a hang.

#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(rust_2018_idioms)]

pub mod config;
mod connection;
mod group_commit;
pub mod ids;
/// An in-memory [`History`] with fault injection, for tests of what runs
/// over a history.
#[cfg(any(test, feature = "test-support"))]
pub mod memory;
pub mod notify;
mod redis_history;
/// A real `redis-server` for one test (Debian's package), for the tests of
/// the history and of the crates over it.
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;

pub use config::HistoryConfig;
pub use ids::{PublishKey, SessionId};
pub use redis_history::{RedisHistory, APPEND_SCRIPT, READ_BYTES};

use bytes::Bytes;
use std::fmt;
use std::future::Future;

/// What a session's replica needs from the shared history: the append,
/// which assigns the session's next seqs (so any instance may append), and
/// reads after a seq, paged by bytes. [`RedisHistory`] in the server; an
/// in-memory fake with fault injection in unit tests.
pub trait History: Send + Sync + 'static {
    /// How the history is reached and sized.
    fn config(&self) -> &HistoryConfig;

    /// Appends `payloads` as the session's next seqs; the epoch they are
    /// under and the first of them. Durable in the history (to its
    /// persistence settings) when `Ok`. `known` is what the caller's ring
    /// has seen: a history behind it under the same epoch, or one that
    /// may have lost events since the last append (a restarted Redis that
    /// does not persist every write), continues the session under a new
    /// epoch from seq 1 (see the module docs), and the batch is its first.
    fn append(
        &self,
        id: &SessionId,
        known: Known,
        payloads: &[Bytes],
    ) -> impl Future<Output = Result<(u64, u64), HistoryError>> + Send;

    /// The session's meta and the events after seq `after` still retained
    /// (the first may be past `after + 1`: the caller checks), at most
    /// `max_bytes` of payload but at least one event; `None` if the session
    /// is gone. Restarts the session's idle expiry.
    fn after(
        &self,
        id: &SessionId,
        after: u64,
        max_bytes: usize,
    ) -> impl Future<Output = Result<Option<Snapshot>, HistoryError>> + Send;
}

/// What an appending instance's ring has seen of the session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Known {
    /// The ring's epoch.
    pub epoch: u64,
    /// The last seq in the ring.
    pub published: u64,
}

/// A session as the history holds it: its meta and a run of its events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The session's epoch.
    pub epoch: u64,
    /// The last seq appended.
    pub published: u64,
    /// The highest cursor the client acknowledged, on any instance.
    pub acked: u64,
    /// The highest seq handed to a transport, on any instance.
    pub sent: u64,
    /// The oldest seq the history still retains (`published + 1` when it
    /// retains none).
    pub first_retained: u64,
    /// Events in seq order, dense: what was asked for and still retained.
    pub events: Vec<(u64, Bytes)>,
    /// With `--publish-keys`: the session's publish key.
    pub publish_key: Option<PublishKey>,
}

/// Which transport a cursor update is for. Every attach of a transport
/// (an SSE connect, a WebSocket handshake), on any instance, raises the
/// session's attach generation in Redis: a stream whose generation is
/// older has been superseded, wherever the newer transport is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attach {
    /// No transport (an ack, an upgrade, a refusal's accounting).
    None,
    /// A transport attaches now: the generation goes up.
    New,
    /// The transport attached at this generation: refused, and nothing
    /// raised, if another attached since.
    Current(u64),
}

/// What a cursor update did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Raised {
    /// `false`: the caller's transport was superseded; nothing raised.
    pub raised: bool,
    /// The session's attach generation now.
    pub generation: u64,
}

/// Why a call to the shared history failed.
#[derive(Clone, Debug)]
pub enum HistoryError {
    /// Redis did not answer in time, the connection failed, or Redis
    /// refused the command (out of memory, loading). A write may or may
    /// not have been applied.
    Unavailable(String),
    /// The session's keys are gone (deleted, or expired while idle).
    Gone,
    /// Redis holds something this server did not write.
    Corrupt(String),
    /// The log's keys were damaged (one of them deleted or cut short, as
    /// an eviction policy other than `noeviction` or a stray `DEL` does):
    /// nothing was appended to it, and nothing will be. Permanent: a retry
    /// gets the same answer.
    Damaged(String),
}

impl fmt::Display for HistoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unavailable(cause) => write!(f, "history unavailable: {cause}"),
            Self::Gone => f.write_str("the session is gone from the history"),
            Self::Corrupt(what) => write!(f, "unexpected history contents: {what}"),
            Self::Damaged(what) => write!(f, "the log's keys are damaged: {what}"),
        }
    }
}

impl std::error::Error for HistoryError {}
