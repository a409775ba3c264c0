//! # gapless-history
//!
//! The shared history tier of `gapless-server --redis URL` and of
//! `gapless-rmcp`'s shared store: append-only *logs*, each under a
//! [`LogId`], whose every event is appended to a Redis Stream before it is
//! acknowledged, with the log's epoch, published seq and its caller's
//! metadata beside it, so that any instance can serve any log — appends
//! included — with the same event IDs and the same refusals. What a log
//! is to its caller (a server session, an rmcp stream, a Durable Streams
//! stream) stays with the caller: the [`History`] trait is the whole
//! boundary, and the in-memory fake ([`memory`]) implements all of it.
//!
//! Per log `{id}` (one hash tag: one Redis Cluster slot):
//!
//! | key | holds |
//! | --- | --- |
//! | `gapless:{id}:s` | the events, entry ID `0-<seq>`, field `d` = payload |
//! | `gapless:{id}:z` | a list: the payload length of each retained event, oldest first |
//! | `gapless:{id}:m` | the history's fields: `epoch` (hex), `published` (the last seq appended), `bytes` (retained payload bytes), `retained` (events retained), `renew_at` (when an append next renews the keys' expiry), `inc` (the `run_id` of the Redis that created or last appended to the log), `done` (set by `complete`: reads then leave its expiry alone); and the caller's [`Meta`], each field `c:<name>` (the server's: `c:pk`, its publish key; `c:epoch/acked`, `c:epoch/sent`, `c:epoch/attach`, cleared with their epoch) |
//! | `gapless:{id}:t:<name>` | a token of the log (the server's upgrade tickets, `ticket:<hex>`: the cursor `<epoch>-<seq>`), until it expires or is taken |
//!
//! Beside the logs, an admission set `<name>` ([`History::admit`]) is one
//! sorted set `gapless:admit:{<name>}` (its own slot): each member scored
//! by its expiry in ms of Redis's clock, the key expiring with its latest
//! member.
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
//! log under a new random epoch, from seq 1, with no events and its
//! caller's per-epoch meta ([`PER_EPOCH`]) cleared. The batch is answered with
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

mod announce;
pub mod config;
mod connection;
#[cfg(test)]
mod contract_tests;
mod disk;
mod expiring;
mod group_commit;
pub mod ids;
mod keys;
/// An in-memory [`History`] with fault injection, for tests of what runs
/// over a history.
#[cfg(any(test, feature = "test-support"))]
pub mod memory;
pub mod notify;
mod redis_history;
mod reply;
/// A real `redis-server` for one test (Debian's package), for the tests of
/// the history and of the crates over it.
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;

pub use announce::LocalFollower;
pub use config::HistoryConfig;
#[cfg(any(test, feature = "test-support"))]
pub use disk::CommitsHeld;
pub use disk::{
    key_hex, CommitStats, DiskError, DiskFollower, DiskHistory, DiskLimits, Fsync, JournalWait,
    StoredStream, StreamKey, StreamOp, DEFAULT_RESERVE, STORE_MEMORY_BYTES,
};
pub use group_commit::{push_batch_args, Spawner, Task};
pub use ids::{LogId, LogKind};
pub use notify::{Change, Followed};
pub use redis_history::{RedisHistory, APPEND_SCRIPT, READ_BYTES};

use bytes::Bytes;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;

/// What every user of the shared history needs of it, over a neutral
/// [`LogId`]: create a log, append to it (the history assigns the next
/// seqs, so any instance may append), read after a seq, follow its
/// appends, complete or delete it, keep per-log metadata beside it
/// ([`Meta`]: the caller's cursors, keys, generations; opaque here) and
/// short-lived tokens. What a log *is* — a server session, an rmcp
/// stream, a Durable Streams stream — stays with its caller.
///
/// [`RedisHistory`] in production; the in-memory fake
/// ([`memory::MemoryHistory`], feature `test-support`) implements all of
/// it with the same rules, so what runs over a history is unit-tested
/// without a Redis.
pub trait History: Send + Sync + 'static {
    /// What [`follow`](Self::follow) returns.
    type Follower: Follower;

    /// How the history is reached and sized.
    fn config(&self) -> &HistoryConfig;

    /// Records a new log under `epoch` with `meta` beside it. `Ok(false)`:
    /// a log with this ID exists (nothing written).
    fn create(
        &self,
        id: &LogId,
        epoch: u64,
        meta: &Meta,
    ) -> impl Future<Output = Result<bool, HistoryError>> + Send;

    /// Appends `payloads` as the log's next seqs; the epoch they are
    /// under and the first of them. Durable in the history (to its
    /// persistence settings) when `Ok`. `known` is what the caller's ring
    /// has seen: a history behind it under the same epoch, or one that
    /// may have lost events since the last append (a restarted Redis that
    /// does not persist every write), continues the log under a new epoch
    /// from seq 1 with its [`PER_EPOCH`] meta cleared (see the module docs), and the
    /// batch is its first. Not sent after `deadline`, and answered by it
    /// ([`HistoryError::Unavailable`]: it may or may not have been
    /// applied). [`append_guarded`](Self::append_guarded) with no guard.
    fn append(
        &self,
        id: &LogId,
        known: Known,
        payloads: &[Bytes],
        deadline: Instant,
    ) -> impl Future<Output = Result<(u64, u64), HistoryError>> + Send {
        async move {
            self.append_guarded(id, known, payloads, &Guard::default(), deadline)
                .await?
                .ok_or_else(|| HistoryError::Corrupt("an empty guard refused".into()))
        }
    }

    /// Appends `payloads` as [`append`](Self::append) does, in one atomic
    /// step with `guard`: only if every field `guard.expect` names holds
    /// the value given (or is absent, for `None`), and then `guard.set` is
    /// written beside the events and the fields of `guard.unset` removed.
    /// `Ok(None)`: the guard did not hold and nothing was written or
    /// removed (the caller reads the meta and decides again).
    /// `payloads` may be empty: the guard and its writes alone (a log's
    /// closure, say), answered with the next seq.
    fn append_guarded(
        &self,
        id: &LogId,
        known: Known,
        payloads: &[Bytes],
        guard: &Guard,
        deadline: Instant,
    ) -> impl Future<Output = Result<Option<(u64, u64)>, HistoryError>> + Send;

    /// The log's meta and the events after seq `after` still retained
    /// (the first may be past `after + 1`: the caller checks, with
    /// [`gapless::Coverage::of_retained`]), at most `max_bytes` of payload
    /// but at least one event; `None` if the log is gone. Restarts the
    /// log's idle expiry unless it is complete.
    fn after(
        &self,
        id: &LogId,
        after: u64,
        max_bytes: usize,
    ) -> impl Future<Output = Result<Option<Snapshot>, HistoryError>> + Send;

    /// [`after`](Self::after), its snapshot's meta holding only the caller
    /// fields `fields` names that the log has (an absent one is not in the
    /// map): what a caller that needs a few fields of a log with many
    /// reads, without the others moving. The history reads only those
    /// fields (and its own); this default reads the whole meta with
    /// [`after`](Self::after) and keeps the named fields, for an
    /// implementation that does no better.
    fn after_fields(
        &self,
        id: &LogId,
        after: u64,
        max_bytes: usize,
        fields: &[&str],
    ) -> impl Future<Output = Result<Option<Snapshot>, HistoryError>> + Send {
        async move {
            let mut snapshot = self.after(id, after, max_bytes).await?;
            if let Some(snapshot) = &mut snapshot {
                only(&mut snapshot.meta, fields);
            }
            Ok(snapshot)
        }
    }

    /// The log's meta and every event it retains, read in pages of
    /// [`READ_BYTES`]; `None` if the log is gone. Pages are separate reads:
    /// if appends trimmed the log past the next page meanwhile, the load
    /// starts again from the new oldest event.
    fn load(
        &self,
        id: &LogId,
    ) -> impl Future<Output = Result<Option<Snapshot>, HistoryError>> + Send {
        async move {
            'load: loop {
                let Some(mut snapshot) = self.after(id, 0, READ_BYTES).await? else {
                    return Ok(None);
                };
                loop {
                    let next = snapshot
                        .events
                        .last()
                        .map_or(snapshot.first_retained, |(seq, _)| seq + 1);
                    if next > snapshot.published {
                        return Ok(Some(snapshot));
                    }
                    let Some(page) = self.after(id, next - 1, READ_BYTES).await? else {
                        return Ok(None);
                    };
                    if page.epoch != snapshot.epoch {
                        continue 'load;
                    }
                    match page.events.first() {
                        Some((seq, _)) if *seq == next => {}
                        // Trimmed past the page meanwhile: a consistent
                        // load starts again.
                        _ => continue 'load,
                    }
                    snapshot.events.extend(page.events);
                    snapshot.published = page.published;
                    snapshot.meta = page.meta;
                }
            }
        }
    }

    /// Follows the appends to log `id` (from any instance): the follower
    /// hears each new last seq, at most once and possibly late (a caller
    /// also polls), and a [`Change::Resync`] when some may have been
    /// missed.
    fn follow(&self, id: &LogId) -> Self::Follower;

    /// Marks log `id` complete: nothing more will be appended. Its keys
    /// expire `grace` from now, and reads no longer renew them. `false` if
    /// the log is gone.
    fn complete(
        &self,
        id: &LogId,
        grace: Duration,
    ) -> impl Future<Output = Result<bool, HistoryError>> + Send;

    /// Deletes log `id` (its events, meta and tokens stay until they
    /// expire); whether there was one.
    fn delete(&self, id: &LogId) -> impl Future<Output = Result<bool, HistoryError>> + Send;

    /// Updates the log's [`Meta`] as `update` says, atomically, and
    /// restarts its idle expiry; the meta after it (all of it, or only
    /// the fields `update.fields` names) and whether it was applied
    /// (`false`: refused by its guard, nothing written).
    ///
    /// # Errors
    /// [`HistoryError::Gone`] when the log is gone.
    fn update_meta(
        &self,
        id: &LogId,
        update: &MetaUpdate,
    ) -> impl Future<Output = Result<Updated, HistoryError>> + Send;

    /// Keeps `value` as the log's token `name` for `ttl` (replacing one
    /// of that name).
    fn put_token(
        &self,
        id: &LogId,
        name: &str,
        value: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), HistoryError>> + Send;

    /// Takes the log's token `name` (once, on whichever instance asks
    /// first); `None` if it is unknown, taken or expired.
    fn take_token(
        &self,
        id: &LogId,
        name: &str,
    ) -> impl Future<Output = Result<Option<String>, HistoryError>> + Send;

    /// Whether the log's token `name` is still there (not taken, not
    /// expired).
    fn has_token(
        &self,
        id: &LogId,
        name: &str,
    ) -> impl Future<Output = Result<bool, HistoryError>> + Send;

    /// Gives `member` a place in admission set `set` if the set has fewer
    /// than `limit` live members, for `ttl` from now (the history's clock:
    /// Redis's `TIME`, not the caller's). An admission set bounds what many
    /// instances create (streams per client, in total) where what is
    /// counted may expire unannounced: a member counts only until its
    /// expiry, and one whose expiry has passed frees its place by itself.
    /// A member already present is renewed (its expiry is now `ttl` from
    /// now, even at the limit) and not counted twice. One atomic step;
    /// `ttl` zero: the member expires at once (it counts for no later call).
    ///
    /// This provided default keeps no sets: every member is admitted
    /// (`added`: true), nothing is recorded — a history without limits,
    /// for wrappers that do not forward it.
    fn admit(
        &self,
        set: &str,
        member: &str,
        limit: u64,
        ttl: Duration,
    ) -> impl Future<Output = Result<Admission, HistoryError>> + Send {
        let _ = (set, member, limit, ttl);
        async { Ok(Admission::Admitted { added: true }) }
    }

    /// Renews `member`'s place in admission set `set`: it expires `ttl`
    /// from now. Whether it held one (`false`: absent or expired, nothing
    /// written: an access that finds its place lost admits it again).
    ///
    /// This provided default keeps no sets: `false`, nothing recorded.
    fn renew(
        &self,
        set: &str,
        member: &str,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, HistoryError>> + Send {
        let _ = (set, member, ttl);
        async { Ok(false) }
    }

    /// Frees `member`'s place in admission set `set`; whether it held one
    /// (expired or not).
    ///
    /// This provided default keeps no sets: `false`.
    fn release(
        &self,
        set: &str,
        member: &str,
    ) -> impl Future<Output = Result<bool, HistoryError>> + Send {
        let _ = (set, member);
        async { Ok(false) }
    }

    /// The live members of admission set `set` (the expired ones dropped
    /// first): for tests and metrics.
    ///
    /// This provided default keeps no sets: 0.
    fn count(&self, set: &str) -> impl Future<Output = Result<u64, HistoryError>> + Send {
        let _ = set;
        async { Ok(0) }
    }
}

/// What [`History::admit`] answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The member holds a place until its new expiry.
    Admitted {
        /// `true`: it was not in the set (or had expired) and now takes a
        /// place; `false`: it held one already, renewed (a caller undoing
        /// a failed create releases only what it added).
        added: bool,
    },
    /// The set holds `limit` live members or more and `member` is not one
    /// of them: nothing was written.
    Full {
        /// The set's live members.
        count: u64,
    },
}

/// A follower of one log's appends ([`History::follow`]).
pub trait Follower: Send + 'static {
    /// Waits until something not yet reported is announced: a resync
    /// (reported first, whatever else changed) or a higher last seq.
    /// `None` once no more announcements will come (the caller polls).
    fn changed(&mut self) -> impl Future<Output = Option<Change>> + Send;
}

impl Follower for Followed {
    fn changed(&mut self) -> impl Future<Output = Option<Change>> + Send {
        Followed::changed(self)
    }
}

/// Per-log metadata the history keeps beside a log for its caller, field
/// by field: opaque to the history (numbers as decimal text for
/// [`MetaUpdate`]'s counters). A field whose name starts with
/// [`PER_EPOCH`] belongs to the log's current epoch (a cursor, an attach
/// generation) and is cleared when the log continues under a new one; the
/// others (a key) stay.
pub type Meta = BTreeMap<String, String>;

/// The prefix of a [`Meta`] field cleared when the log continues under a
/// new epoch.
pub const PER_EPOCH: &str = "epoch/";

/// An atomic update of a log's [`Meta`] ([`History::update_meta`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetaUpdate {
    /// Refused, nothing written, unless the log is under this epoch.
    pub epoch: Option<u64>,
    /// Refused, nothing written, if this counter (absent: 0) is above this
    /// value: a caller that read it at that value has been superseded.
    pub at_most: Option<(String, u64)>,
    /// This counter goes up by one (after the guards pass).
    pub increment: Option<String>,
    /// Each of these counters is raised to at least its value (a maximum:
    /// never lowered).
    pub raise: Vec<(String, u64)>,
    /// The fields [`Updated::meta`] holds: `None`, the whole meta; else
    /// only those of these the log has (an absent one is not in the map),
    /// read alone (a caller that raises an access time names none).
    pub fields: Option<Vec<String>>,
}

/// What an append requires of its log's [`Meta`], and writes to it, in the
/// same atomic step ([`History::append_guarded`]): a compare-and-set of
/// caller fields beside the events, so that two instances deciding on the
/// same meta never both append (an idempotent producer's seq, a stream's
/// closure).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Guard {
    /// Each field must hold this value (`None`: must be absent).
    pub expect: Vec<(String, Option<String>)>,
    /// Written when the guard holds (after the epoch's own fields are
    /// cleared, if the append moves the log to a new epoch).
    pub set: Vec<(String, String)>,
    /// Removed when the guard holds, after `set` is written (a field in
    /// both ends absent): an expired producer's state, a released claim.
    pub unset: Vec<String>,
    /// The epoch the log continues under if this append finds it lost
    /// events (`None`: a random one). A caller whose positions must sort
    /// across epochs gives a larger one than the log's.
    pub next_epoch: Option<u64>,
}

/// What [`History::update_meta`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Updated {
    /// `false`: a guard refused it; nothing was written.
    pub applied: bool,
    /// The log's epoch.
    pub epoch: u64,
    /// The log's meta after the update (or as it is, when refused): the
    /// fields [`MetaUpdate::fields`] names, or all.
    pub meta: Meta,
}

/// Keeps only the fields of `meta` that `fields` names.
pub(crate) fn only(meta: &mut Meta, fields: &[&str]) {
    meta.retain(|name, _| fields.contains(&name.as_str()));
}

/// A counter of a [`Meta`]: its decimal value, 0 when absent.
///
/// # Errors
/// [`HistoryError::Corrupt`] when the field is not a decimal `u64`.
pub fn counter(meta: &Meta, name: &str) -> Result<u64, HistoryError> {
    meta.get(name).map_or(Ok(0), |text| {
        text.parse()
            .map_err(|_| HistoryError::Corrupt(format!("meta {name} = {text:?}")))
    })
}

/// What an appending instance's ring has seen of the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Known {
    /// The ring's epoch.
    pub epoch: u64,
    /// The last seq in the ring.
    pub published: u64,
}

/// A log as the history holds it: its meta and a run of its events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The log's epoch.
    pub epoch: u64,
    /// The last seq appended.
    pub published: u64,
    /// The oldest seq the history still retains (`published + 1` when it
    /// retains none).
    pub first_retained: u64,
    /// Events in seq order, dense: what was asked for and still retained.
    pub events: Vec<(u64, Bytes)>,
    /// The caller's metadata of the log.
    pub meta: Meta,
}

/// Why a call to the shared history failed.
#[derive(Clone, Debug)]
pub enum HistoryError {
    /// Redis did not answer in time, the connection failed, or Redis
    /// refused the command (out of memory, loading). A write may or may
    /// not have been applied.
    Unavailable(String),
    /// The history has no room for the write: the disk of `--data-dir`
    /// is full. Nothing was written; the same write may succeed once
    /// space returns.
    Full(String),
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
            Self::Full(cause) => write!(f, "history full: {cause}"),
            Self::Gone => f.write_str("the session is gone from the history"),
            Self::Corrupt(what) => write!(f, "unexpected history contents: {what}"),
            Self::Damaged(what) => write!(f, "the log's keys are damaged: {what}"),
        }
    }
}

impl std::error::Error for HistoryError {}
