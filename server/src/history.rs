//! The shared history tier (`--redis`, `--redis-cluster`): the crate
//! `gapless-history`, named here as the server's modules use it.

#[cfg(test)]
pub(crate) use gapless_history::memory;
pub use gapless_history::{
    notify, Attach, History, HistoryConfig, HistoryError, Known, Raised, RedisHistory, Snapshot,
    READ_BYTES,
};
