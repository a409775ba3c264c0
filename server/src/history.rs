//! The shared history tier (`--redis`, `--redis-cluster`): the crate
//! `gapless-history`, named here as the server's modules use it.

#[cfg(test)]
pub(crate) use gapless_history::memory;
pub use gapless_history::{
    counter, Admission, Change, Follower, Guard, History, HistoryConfig, HistoryError, Known,
    LogId, Meta, MetaUpdate, RedisHistory, Snapshot, PER_EPOCH, READ_BYTES,
};

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
