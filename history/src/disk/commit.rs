//! The group commit of the disk history: a write goes into the store's
//! journal (a `write(2)`, under its log's lock, so a log's writes are in
//! the journal in their order) and takes a ticket; then it waits until a
//! `fdatasync` that began after its ticket was taken has returned. One
//! writer at a time runs that `fdatasync` (on tokio's blocking pool) for
//! every ticket taken before it began; the writers that arrive meanwhile
//! wait for the next one, which the first of them to wake runs. So one
//! `fdatasync` acknowledges every write that arrived while the last one
//! ran, as the Redis tier's flusher batches script calls.
//!
//! A failed `fdatasync` fails the history for good: after one, the kernel
//! may have dropped the dirty pages it could not write, and a second
//! `fdatasync` can succeed without them. Every waiting and later write is
//! answered [`HistoryError::Unavailable`] until the process restarts and
//! the store recovers from what is on disk.

use crate::HistoryError;
use fjall::{Keyspace, PersistMode};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant as StdInstant;
use tokio::sync::watch;

/// When a write is acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fsync {
    /// After an `fdatasync` of the journal that covers it (group commit):
    /// an acknowledged write survives a power loss. The default.
    #[default]
    Always,
    /// After its `write(2)` into the journal: it survives a killed process
    /// (the kernel holds it), not a power loss or a kernel crash. A restart
    /// after one of those continues every log under a new epoch (its
    /// clients' cursors are refused, never served other events).
    Never,
}

/// Counters of the group commit, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// `fdatasync` calls made.
    pub fsyncs: u64,
    /// Their total duration, in microseconds.
    pub fsync_micros: u64,
    /// Writes acknowledged through the journal (appends, meta updates,
    /// creates, deletes).
    pub writes: u64,
}

pub(crate) struct GroupCommit {
    keyspace: Keyspace,
    fsync: Fsync,
    /// Tickets taken: each write takes the next once its journal write
    /// returned.
    taken: AtomicU64,
    /// `true` while a writer runs an `fdatasync`.
    syncing: AtomicBool,
    /// The highest ticket a finished `fdatasync` covers (every ticket taken
    /// before it began).
    synced: watch::Sender<u64>,
    /// Why the history failed, after a failed `fdatasync`.
    failed: OnceLock<String>,
    fsyncs: AtomicU64,
    fsync_micros: AtomicU64,
}

impl GroupCommit {
    pub(crate) fn new(keyspace: Keyspace, fsync: Fsync) -> Self {
        Self {
            keyspace,
            fsync,
            taken: AtomicU64::new(0),
            syncing: AtomicBool::new(false),
            synced: watch::channel(0).0,
            failed: OnceLock::new(),
            fsyncs: AtomicU64::new(0),
            fsync_micros: AtomicU64::new(0),
        }
    }

    /// `Err` once an `fdatasync` failed: no write is taken after it.
    pub(crate) fn check(&self) -> Result<(), HistoryError> {
        match self.failed.get() {
            Some(why) => Err(failed(why)),
            None => Ok(()),
        }
    }

    /// A ticket for a write whose journal write has returned.
    pub(crate) fn ticket(&self) -> u64 {
        self.taken.fetch_add(1, Ordering::AcqRel) + 1
    }

    pub(crate) fn stats(&self) -> CommitStats {
        CommitStats {
            fsyncs: self.fsyncs.load(Ordering::Relaxed),
            fsync_micros: self.fsync_micros.load(Ordering::Relaxed),
            writes: self.taken.load(Ordering::Relaxed),
        }
    }

    /// Returns once the write of `ticket` is durable as [`Fsync`] says.
    /// Cancel-safe: the `fdatasync` a waiter starts runs to its end on
    /// tokio's blocking pool and publishes there, whether or not anyone
    /// still waits.
    pub(crate) async fn durable(self: &Arc<Self>, ticket: u64) -> Result<(), HistoryError> {
        if self.fsync == Fsync::Never {
            return self.check();
        }
        let mut synced = self.synced.subscribe();
        loop {
            self.check()?;
            if *synced.borrow_and_update() >= ticket {
                return Ok(());
            }
            if !self.syncing.swap(true, Ordering::AcqRel) {
                let commit = Arc::clone(self);
                drop(tokio::task::spawn_blocking(move || commit.sync_once()));
            }
            // The running fdatasync publishes when it ends (or fails).
            if synced.changed().await.is_err() {
                return Err(failed("the group commit stopped"));
            }
        }
    }

    /// One `fdatasync` for every ticket taken so far; then publishes. The
    /// caller holds `syncing`; runs on a blocking thread.
    fn sync_once(&self) {
        let covered = self.taken.load(Ordering::Acquire);
        let started = StdInstant::now();
        let result = self
            .keyspace
            .persist(PersistMode::SyncData)
            .map_err(|error| error.to_string());
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        self.fsync_micros.fetch_add(
            u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        if let Err(why) = result {
            tracing::error!(%why, "disk history: fdatasync failed; no write is acknowledged until a restart");
            let _ = self.failed.set(why);
        }
        // Released before the wake-up: a woken writer whose ticket this
        // did not cover runs the next fdatasync itself.
        self.syncing.store(false, Ordering::Release);
        self.synced
            .send_modify(|synced| *synced = (*synced).max(covered));
    }
}

fn failed(why: &str) -> HistoryError {
    HistoryError::Unavailable(format!(
        "the disk log failed an fdatasync ({why}): restart the server"
    ))
}
