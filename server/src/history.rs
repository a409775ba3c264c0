//! The shared history tier (`--redis`, `--redis-cluster`): the crate
//! `gapless-history`, named here as the server's modules use it.

#[cfg(test)]
pub(crate) use gapless_history::memory;
pub use gapless_history::{
    counter, Change, Follower, Guard, History, HistoryConfig, HistoryError, Known, LogId, Meta,
    MetaUpdate, RedisHistory, Snapshot, PER_EPOCH, READ_BYTES,
};
