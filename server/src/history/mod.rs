//! The shared history tier (`serve --redis URL`): every event of a session
//! is appended to a Redis Stream before it is acknowledged, and the
//! session's epoch, published seq and cursors live beside it, so that any
//! instance can serve any session with the same event IDs and the same
//! refusals.
//!
//! Per session `{id}` (one hash tag: one Redis Cluster slot), three keys:
//!
//! | key | holds |
//! | --- | --- |
//! | `gapless:{id}:s` | the events, entry ID `0-<seq>`, field `d` = payload; trimmed with `MAXLEN ~ retention` |
//! | `gapless:{id}:m` | `epoch` (hex), `published` (the last seq appended), `acked`, `sent` (maxima, never lowered), `pk` (the publish key, with `--publish-keys`) |
//! | `gapless:{id}:l` | the owner's lease: a random token, expiring unless renewed |
//!
//! Every write is a Lua script that checks before it writes (scripts are
//! atomic, never rolled back): an append checks the lease and that its
//! first seq is `published + 1`, so two instances never append the same seq
//! and a paused old owner cannot write after its lease lapsed. Redis
//! itself clamps an evicted cursor silently (`XRANGE` just starts at the
//! oldest entry): the gap check is ours, on the seqs returned.
//!
//! Every call has its own deadline (`--redis-timeout`): an unreachable
//! Redis is a [`HistoryError::Unavailable`] in bounded time, never a hang.

#[cfg(test)]
pub(crate) mod memory;
mod redis_history;

pub use crate::config::HistoryConfig;
pub(crate) use redis_history::{RedisHistory, READ_BATCH};

use crate::ids::{PublishKey, SessionId};
use crate::metrics::HistoryFailure;
use bytes::Bytes;
use std::fmt;
use std::future::Future;
use std::time::Duration;

/// What a session's replica needs from the shared history: the lease, the
/// fenced append, reads after a seq, and a tail. [`RedisHistory`] in the
/// server; an in-memory fake with fault injection in unit tests.
pub(crate) trait History: Send + Sync + 'static {
    /// A blocking reader of one session's events.
    type Tail: Tail;

    /// How the history is reached and sized.
    fn config(&self) -> &HistoryConfig;

    /// Appends `payloads` as seqs `first ..`, as `owner`; the last seq.
    /// Checks, before any write, that `owner` holds the lease
    /// ([`HistoryError::NotOwner`]) and that `first` is the next seq
    /// ([`HistoryError::Behind`]).
    fn append(
        &self,
        id: &SessionId,
        owner: Token,
        first: u64,
        payloads: &[Bytes],
    ) -> impl Future<Output = Result<u64, HistoryError>> + Send;

    /// Takes the lease for `owner` if it is free or already `owner`'s.
    fn acquire(
        &self,
        id: &SessionId,
        owner: Token,
    ) -> impl Future<Output = Result<Acquired, HistoryError>> + Send;

    /// Extends `owner`'s lease; `false` if it is lost.
    fn renew(
        &self,
        id: &SessionId,
        owner: Token,
    ) -> impl Future<Output = Result<bool, HistoryError>> + Send;

    /// Gives up `owner`'s lease.
    fn release(
        &self,
        id: &SessionId,
        owner: Token,
    ) -> impl Future<Output = Result<(), HistoryError>> + Send;

    /// The session's meta and up to `count` events after seq `after`, as
    /// retained (the first may be past `after + 1`); `None` if the session
    /// is gone.
    fn after(
        &self,
        id: &SessionId,
        after: u64,
        count: usize,
    ) -> impl Future<Output = Result<Option<Snapshot>, HistoryError>> + Send;

    /// A reader that follows session `id`'s events.
    fn tail(&self, id: &SessionId)
        -> impl Future<Output = Result<Self::Tail, HistoryError>> + Send;
}

/// A blocking reader of one session's events.
pub(crate) trait Tail: Send + 'static {
    /// The events after seq `after` still retained, waiting up to `block`
    /// for the first (empty when none came). The first may be past
    /// `after + 1`: the caller checks.
    fn next(
        &mut self,
        after: u64,
        block: Duration,
    ) -> impl Future<Output = Result<Vec<(u64, Bytes)>, HistoryError>> + Send;
}

/// Marks a [`gapless::id::Id`] as a lease [`Token`].
#[derive(Debug)]
pub(crate) enum LeaseKind {}

impl gapless::id::Kind for LeaseKind {
    const NAME: &'static str = "LeaseToken";
}

/// An owner's lease token: 128 random bits from the OS CSPRNG
/// (`Token::random`), one per session per instance; printed as 32
/// lowercase hex digits in Redis, only its tag in `Debug`.
pub(crate) type Token = gapless::id::Id<LeaseKind>;

/// A session as the history holds it: its meta and a run of its events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// The session's epoch.
    pub(crate) epoch: u64,
    /// The last seq appended.
    pub(crate) published: u64,
    /// The highest cursor the client acknowledged, on any instance.
    pub(crate) acked: u64,
    /// The highest seq handed to a transport, on any instance.
    pub(crate) sent: u64,
    /// Events in seq order, dense: what was asked for and still retained.
    pub(crate) events: Vec<(u64, Bytes)>,
    /// With `--publish-keys`: the session's publish key.
    pub(crate) publish_key: Option<PublishKey>,
}

/// Which transport a cursor update is for. Every attach of a transport
/// (an SSE connect, a WebSocket handshake), on any instance, raises the
/// session's attach generation in Redis: a stream whose generation is
/// older has been superseded, wherever the newer transport is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attach {
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
pub(crate) struct Raised {
    /// `false`: the caller's transport was superseded; nothing raised.
    pub(crate) raised: bool,
    /// The session's attach generation now.
    pub(crate) generation: u64,
}

/// What taking the lease found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// This instance owns the session; the stream ends at `published`.
    Owner {
        /// The last seq appended.
        published: u64,
    },
    /// Another instance holds the lease for about this long.
    Held {
        /// The lease's remaining time.
        retry_after: Duration,
    },
}

/// Why a call to the shared history failed.
#[derive(Clone, Debug)]
pub enum HistoryError {
    /// Redis did not answer in time, the connection failed, or Redis
    /// refused the command (out of memory, loading). A write may or may
    /// not have been applied.
    Unavailable(String),
    /// Another instance holds the session's lease (for about
    /// `retry_after`).
    NotOwner {
        /// The lease's remaining time.
        retry_after: Duration,
    },
    /// The append did not start at `published + 1`: this instance's ring is
    /// behind the history (an earlier append that timed out was applied).
    Behind {
        /// The last seq appended.
        published: u64,
    },
    /// The session's keys are gone (deleted, or expired while idle).
    Gone,
    /// Redis holds something this server did not write.
    Corrupt(String),
}

impl HistoryError {
    /// The `kind` this failure is counted under in
    /// `gapless_history_errors_total`.
    pub(crate) fn failure(&self) -> HistoryFailure {
        match self {
            Self::Unavailable(_) | Self::Behind { .. } => HistoryFailure::Unavailable,
            Self::NotOwner { .. } => HistoryFailure::OwnerUnavailable,
            Self::Gone => HistoryFailure::Gone,
            Self::Corrupt(_) => HistoryFailure::Corrupt,
        }
    }
}

impl fmt::Display for HistoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unavailable(cause) => write!(f, "history unavailable: {cause}"),
            Self::NotOwner { retry_after } => {
                write!(f, "another instance owns the session for {retry_after:?}")
            }
            Self::Behind { published } => {
                write!(
                    f,
                    "the history is ahead of this instance: published {published}"
                )
            }
            Self::Gone => f.write_str("the session is gone from the history"),
            Self::Corrupt(what) => write!(f, "unexpected history contents: {what}"),
        }
    }
}

impl std::error::Error for HistoryError {}
