//! The history tier beyond the rings: the crate `gapless-history`, named
//! here as the server's modules use it, and [`HistoryTier`], the one the
//! server runs: Redis shared by instances (`--redis`, `--redis-cluster`),
//! or the disk of this machine (`--data-dir`).

#[cfg(test)]
pub(crate) use gapless_history::memory;
pub use gapless_history::{
    counter, Admission, Change, DiskHistory, Follower, Guard, History, HistoryConfig, HistoryError,
    Known, LogId, Meta, MetaUpdate, RedisHistory, Snapshot, PER_EPOCH, READ_BYTES,
};
use gapless_history::{DiskFollower, Followed, Updated};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The history the server runs beside its rings: one type, so that the
/// sessions' replicas and the Durable Streams over it are built once.
/// Each call goes to the tier's own implementation.
// The Redis variant is the large one, and there is one tier per server.
#[allow(clippy::large_enum_variant)]
pub(crate) enum HistoryTier {
    /// `--redis`, `--redis-cluster`: shared by every instance.
    Redis(RedisHistory),
    /// `--data-dir`: this machine's disk.
    Disk(Arc<DiskHistory>),
}

/// A follower of a [`HistoryTier`]'s log.
pub(crate) enum TierFollower {
    /// Redis's pub/sub.
    Redis(Followed),
    /// The disk history's announcements.
    Disk(DiskFollower),
}

impl Follower for TierFollower {
    async fn changed(&mut self) -> Option<Change> {
        match self {
            Self::Redis(follower) => Follower::changed(follower).await,
            Self::Disk(follower) => follower.changed().await,
        }
    }
}

/// Calls `$call` on the tier's history, whichever it is.
macro_rules! on_tier {
    ($tier:expr, $history:ident => $call:expr) => {
        match $tier {
            HistoryTier::Redis($history) => $call,
            HistoryTier::Disk($history) => $call,
        }
    };
}

impl History for HistoryTier {
    type Follower = TierFollower;

    fn config(&self) -> &HistoryConfig {
        on_tier!(self, history => history.config())
    }

    async fn create(&self, id: &LogId, epoch: u64, meta: &Meta) -> Result<bool, HistoryError> {
        on_tier!(self, history => history.create(id, epoch, meta).await)
    }

    async fn append_guarded(
        &self,
        id: &LogId,
        known: Known,
        payloads: &[bytes::Bytes],
        guard: &Guard,
        deadline: Instant,
    ) -> Result<Option<(u64, u64)>, HistoryError> {
        on_tier!(self, history => history.append_guarded(id, known, payloads, guard, deadline).await)
    }

    async fn after(
        &self,
        id: &LogId,
        after: u64,
        max_bytes: usize,
    ) -> Result<Option<Snapshot>, HistoryError> {
        on_tier!(self, history => history.after(id, after, max_bytes).await)
    }

    async fn after_fields(
        &self,
        id: &LogId,
        after: u64,
        max_bytes: usize,
        fields: &[&str],
    ) -> Result<Option<Snapshot>, HistoryError> {
        on_tier!(self, history => history.after_fields(id, after, max_bytes, fields).await)
    }

    fn follow(&self, id: &LogId) -> TierFollower {
        match self {
            Self::Redis(history) => TierFollower::Redis(history.follow(id)),
            Self::Disk(history) => TierFollower::Disk(history.follow(id)),
        }
    }

    async fn complete(&self, id: &LogId, grace: Duration) -> Result<bool, HistoryError> {
        on_tier!(self, history => history.complete(id, grace).await)
    }

    async fn delete(&self, id: &LogId) -> Result<bool, HistoryError> {
        on_tier!(self, history => history.delete(id).await)
    }

    async fn update_meta(&self, id: &LogId, update: &MetaUpdate) -> Result<Updated, HistoryError> {
        on_tier!(self, history => history.update_meta(id, update).await)
    }

    async fn put_token(
        &self,
        id: &LogId,
        name: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<(), HistoryError> {
        on_tier!(self, history => history.put_token(id, name, value, ttl).await)
    }

    async fn take_token(&self, id: &LogId, name: &str) -> Result<Option<String>, HistoryError> {
        on_tier!(self, history => history.take_token(id, name).await)
    }

    async fn has_token(&self, id: &LogId, name: &str) -> Result<bool, HistoryError> {
        on_tier!(self, history => history.has_token(id, name).await)
    }

    async fn admit(
        &self,
        set: &str,
        member: &str,
        limit: u64,
        ttl: Duration,
    ) -> Result<Admission, HistoryError> {
        on_tier!(self, history => history.admit(set, member, limit, ttl).await)
    }

    async fn renew(&self, set: &str, member: &str, ttl: Duration) -> Result<bool, HistoryError> {
        on_tier!(self, history => history.renew(set, member, ttl).await)
    }

    async fn release(&self, set: &str, member: &str) -> Result<bool, HistoryError> {
        on_tier!(self, history => history.release(set, member).await)
    }

    async fn count(&self, set: &str) -> Result<u64, HistoryError> {
        on_tier!(self, history => history.count(set).await)
    }
}

/// What a log of the shared history holds, recorded in its meta (field
/// [`LogKind::FIELD`]): a session id is a log id, and a Durable Stream's
/// log id is computable from its path, so each side refuses the other's
/// logs (`404`) instead of loading, appending to or deleting them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogKind {
    /// A session's events (`/session/...`).
    Session,
    /// A Durable Stream's messages (`/v1/stream/...`).
    Stream,
}

impl LogKind {
    /// The meta field that records it.
    pub(crate) const FIELD: &'static str = "kind";
    /// A field every stream's meta has had since streams were first kept
    /// in the shared history (its content type): a log written before
    /// kinds were recorded is a stream's if it has it.
    const STREAM_MARK: &'static str = "ct";

    /// The value of [`LogKind::FIELD`].
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Session => "session",
            Self::Stream => "stream",
        }
    }

    /// The fields [`LogKind::of`] reads.
    pub(crate) const FIELDS: [&'static str; 2] = [Self::FIELD, Self::STREAM_MARK];

    /// The kind `meta` records (`None`: one this server does not know);
    /// for a log from before kinds were recorded, a stream's if it has a
    /// content type, else a session's.
    pub(crate) fn of(meta: &Meta) -> Option<Self> {
        match meta.get(Self::FIELD).map(String::as_str) {
            Some("session") => Some(Self::Session),
            Some("stream") => Some(Self::Stream),
            Some(_) => None,
            None if meta.contains_key(Self::STREAM_MARK) => Some(Self::Stream),
            None => Some(Self::Session),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{LogKind, Meta};

    #[test]
    fn a_log_is_of_the_kind_it_records_or_an_old_streams_by_its_content_type() {
        let meta = |fields: &[(&str, &str)]| -> Meta {
            fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        assert_eq!(
            LogKind::of(&meta(&[("kind", "stream")])),
            Some(LogKind::Stream)
        );
        assert_eq!(
            LogKind::of(&meta(&[("kind", "session"), ("ct", "x")])),
            Some(LogKind::Session)
        );
        assert_eq!(LogKind::of(&meta(&[("kind", "other")])), None);
        assert_eq!(
            LogKind::of(&meta(&[("ct", "text/plain")])),
            Some(LogKind::Stream)
        );
        assert_eq!(LogKind::of(&meta(&[("pk", "k")])), Some(LogKind::Session));
        assert_eq!(LogKind::of(&meta(&[])), Some(LogKind::Session));
    }
}
