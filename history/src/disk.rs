//! The disk history of `gapless-server --data-dir DIR`: the [`History`]
//! of one machine, its logs in an embedded LSM store (`fjall`) under
//! `DIR`, so that sessions and Durable Streams come back after a restart,
//! a killed process included, with the same epochs, seqs and meta.
//!
//! In the store (six partitions; the last three are the journal of the
//! server's in-process Durable Streams, [`streams`]):
//!
//! | partition | key | value |
//! | --- | --- | --- |
//! | `events` | the log's 16 id bytes, then the seq (8 bytes, big-endian) | the payload |
//! | `logs` | the log's 16 id bytes | its [`LogRecord`]: epoch, published, retained run, completion, the caller's meta |
//! | `runs` | `run` | the [`RunRecord`] of the process that opened the directory last |
//! | `streams` | a Durable Stream's 16 key bytes | its record, the server's ([`streams`]) |
//! | `stream_events` | the stream's key, then the seq (8 bytes, big-endian) | the message |
//! | `producers` | the stream's key, then the producer's id | the producer's state, the server's |
//!
//! Every write to a log (an append, a meta update, a create, a delete)
//! is one atomic batch of the store: its events and its rewritten record
//! together, so a recovered log is always one its record describes. The
//! batch goes into the store's journal under the log's lock (a log's
//! writes are in the journal in their order), then waits for the group
//! commit ([`commit`]) before it is answered. A reader sees a log's events
//! up to the last *durable* seq only (`visible`): an event is never served
//! before the write that made it could be lost by a power cut, so a seq
//! is never served twice with different payloads. (The meta a reader sees
//! may be a write's whose `fdatasync` is still running: that write is not
//! acknowledged yet, and only a power cut in that window would take it
//! back.)
//!
//! What every log is, is kept in memory too (its record and lock, about
//! 200 bytes and its meta); the events are only on disk, in the store's
//! memtables and block cache. Retention is the configuration's, as with
//! Redis: each append trims its log to [`HistoryConfig::retention`] events
//! and [`HistoryConfig::retention_bytes`] of payload (never below the
//! newest event). Idle logs expire after [`HistoryConfig::idle`] (a
//! complete one after its grace), swept as creates come; tokens and
//! admission sets are in memory only ([`crate::expiring`]).
//!
//! One process at a time: the directory's `LOCK` file is locked while the
//! history is open, and a second server on the same directory is refused.

mod commit;
mod log_state;
mod record;
mod room;
mod streams;
mod tail;
#[cfg(test)]
mod tests;

#[cfg(any(test, feature = "test-support"))]
pub use commit::CommitsHeld;
pub use commit::{CommitStats, Fsync};
pub use room::{DiskLimits, DEFAULT_RESERVE};
pub use streams::{key_hex, JournalWait, StoredStream, StreamKey, StreamOp};

use crate::announce::{Announcer, LocalFollower};
use crate::expiring::{AdmissionSets, Tokens};
use crate::{
    counter, Admission, Guard, History, HistoryConfig, HistoryError, Known, LogId, Meta,
    MetaUpdate, Snapshot, Updated, PER_EPOCH,
};
use bytes::Bytes;
use commit::{GroupCommit, Op, Part, Partitions};
use fjall::{Config, Keyspace, PartitionCreateOptions, PartitionHandle, PersistMode, Slice};
use log_state::{event_key, put_event, put_record, Log, LogState};
use record::{LogRecord, RunRecord};
use room::Room;
use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// Events per read at most, as the Redis read script.
const READ_EVENTS: usize = 512;

/// The key of the run record in `runs`.
const RUN_KEY: &[u8] = b"run";

/// The store's block cache (fjall's default, set here so that it is
/// stated): blocks of session logs read back from the tables.
const STORE_CACHE_BYTES: u64 = 32 << 20;

/// The memtable of each partition that takes messages (`events`,
/// `stream_events`): past it, the memtable is flushed to a table (fjall's
/// default is 16 MiB). Keys are a log's id then its seq, so a table
/// flushed while many logs append spans the key range of every table
/// below it, and each flush ends up rewriting that level in a compaction.
/// Four times fewer flushes take that many fewer rewrites: at 10,000
/// streams under load, about 10% more appends/s and a p99 of 2–5 ms
/// instead of 5–20 ms (ARCHITECTURE, "64 MiB memtables for the messages").
/// A partition keeps the size it was created with: a directory made with
/// another keeps its own.
const MESSAGES_MEMTABLE_BYTES: u32 = 64 << 20;

/// The store's memtables at most, all partitions together: room for
/// both message partitions' memtables. Past it the largest is flushed.
const STORE_WRITE_BUFFER_BYTES: u64 = 2 * MESSAGES_MEMTABLE_BYTES as u64;

/// What the store holds in memory at most, whatever the disk holds: its
/// cache and its memtables. The server takes it out of `--memory-budget`
/// before the rings are given the rest.
pub const STORE_MEMORY_BYTES: u64 = STORE_CACHE_BYTES + STORE_WRITE_BUFFER_BYTES;

/// Why the disk history could not open.
#[derive(Debug)]
pub enum DiskError {
    /// The directory could not be made, opened or locked.
    Directory(PathBuf, std::io::Error),
    /// Another process holds the directory.
    InUse(PathBuf),
    /// The store failed to open or recover.
    Store(String),
}

impl fmt::Display for DiskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Directory(dir, error) => write!(f, "data directory {}: {error}", dir.display()),
            Self::InUse(dir) => write!(
                f,
                "data directory {} is in use by another process (its LOCK file is locked)",
                dir.display()
            ),
            Self::Store(why) => write!(f, "the disk log could not open: {why}"),
        }
    }
}

impl std::error::Error for DiskError {}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A store's failure as the history's: [`HistoryError::Full`] when the
/// disk is (`ENOSPC` anywhere in its causes), else unavailable.
pub(crate) fn store_error(error: fjall::Error) -> HistoryError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(current) = cause {
        let full = current
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::StorageFull);
        if full {
            return HistoryError::Full(format!("disk log: {error}"));
        }
        cause = current.source();
    }
    HistoryError::Unavailable(format!("disk log: {error}"))
}

/// The disk history; see the [module docs](self).
pub struct DiskHistory {
    config: HistoryConfig,
    keyspace: Keyspace,
    events: PartitionHandle,
    runs: PartitionHandle,
    logs: Mutex<HashMap<LogId, Log>>,
    commit: GroupCommit,
    tokens: Tokens,
    admissions: AdmissionSets,
    /// Each followed log's visible seq, as its durable appends announce it.
    followed: Arc<Announcer>,
    /// When idle logs were last swept.
    swept: Mutex<Instant>,
    /// This process's run record (written clean when the history drops).
    run: RunRecord,
    /// The last run may have lost acknowledged writes (`--fsync never`,
    /// then a machine restart before it closed).
    lossy: bool,
    /// The Durable Streams whose changes start-up cut from the journal's
    /// damaged last write, and what they were.
    cut_streams: Vec<(StreamKey, String)>,
    /// Every partition, for the Durable Streams' journal ([`streams`]).
    partitions: Partitions,
    /// Whether a write fits on the disk.
    room: Room,
    /// Held locked while the history is open.
    _lock: File,
}

impl DiskHistory {
    /// Opens (or makes) the history in `dir`, keeping `config.retention`
    /// events and `config.retention_bytes` of payload per log, recovering
    /// what a previous run left: the store replays its journal (a torn or
    /// corrupt tail is cut there) and every log's record is read back.
    ///
    /// Writes but deletes are refused ([`HistoryError::Full`]) while the
    /// store is at `limits.max_bytes` or the filesystem has less than
    /// `limits.reserve_bytes` free.
    ///
    /// # Errors
    /// [`DiskError`]: the directory cannot be used, another process holds
    /// it, or the store cannot open.
    pub fn open(
        dir: &Path,
        mut config: HistoryConfig,
        fsync: Fsync,
        limits: DiskLimits,
    ) -> Result<Self, DiskError> {
        std::fs::create_dir_all(dir).map_err(|error| DiskError::Directory(dir.into(), error))?;
        let lock_file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("LOCK"))
            .map_err(|error| DiskError::Directory(dir.into(), error))?;
        match lock_file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(DiskError::InUse(dir.into())),
            Err(std::fs::TryLockError::Error(error)) => {
                return Err(DiskError::Directory(dir.into(), error))
            }
        }
        let store = |error: fjall::Error| DiskError::Store(error.to_string());
        let cut = tail::cut_damaged_tail(&dir.join("store"), &dir.join("damaged"))
            .map_err(|error| DiskError::Directory(dir.into(), error))?;
        if let Some(cut) = &cut {
            cut.warn();
        }
        let keyspace = Config::new(dir.join("store"))
            .cache_size(STORE_CACHE_BYTES)
            .max_write_buffer_size(STORE_WRITE_BUFFER_BYTES)
            .open()
            .map_err(store)?;
        let partition = |name| {
            keyspace
                .open_partition(name, PartitionCreateOptions::default())
                .map_err(store)
        };
        let messages_partition = |name| {
            let options =
                PartitionCreateOptions::default().max_memtable_size(MESSAGES_MEMTABLE_BYTES);
            keyspace.open_partition(name, options).map_err(store)
        };
        let events = messages_partition("events")?;
        let logs_partition = partition("logs")?;
        let runs = partition("runs")?;

        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|id| id.trim().to_owned())
            .unwrap_or_default();
        let previous = match runs.get(RUN_KEY).map_err(store)? {
            Some(bytes) => Some(RunRecord::decode(&bytes).map_err(DiskError::Store)?),
            None => None,
        };
        // A run that acknowledged before fdatasync, ended without closing,
        // on another boot: what it acknowledged may be gone.
        let lossy = previous.as_ref().is_some_and(|run| {
            run.fsync_never && !run.clean && (boot_id.is_empty() || run.boot_id != boot_id)
        });
        if lossy {
            tracing::warn!(
                dir = %dir.display(),
                "disk history: the last run acknowledged writes before fdatasync (--fsync never) and the machine \
                 restarted before it closed: every log continues under a new epoch at its next append"
            );
        }
        let run = RunRecord {
            run: previous.map_or(1, |run| run.run + 1),
            clean: false,
            fsync_never: fsync == Fsync::Never,
            boot_id,
        };
        runs.insert(RUN_KEY, run.encode()).map_err(store)?;
        keyspace.persist(PersistMode::SyncAll).map_err(store)?;

        config.url = format!("file://{}", dir.display());
        let now = Instant::now();
        let mut logs = HashMap::new();
        for entry in logs_partition.iter() {
            let (key, value) = entry.map_err(store)?;
            let Ok(id) = <[u8; 16]>::try_from(&key[..]) else {
                tracing::warn!(key = ?key, "disk history: a log record under a key that is no log id: left alone");
                continue;
            };
            let id = LogId::from_bytes(id);
            match LogRecord::decode(&value) {
                Ok(record) => {
                    let published = record.published;
                    let state = LogState::new(record, published, now + config.idle, lossy);
                    logs.insert(id, Arc::new(Mutex::new(state)));
                }
                Err(why) => tracing::warn!(
                    log = %id, %why,
                    "disk history: a log's record cannot be read: the log is left out (its readers get 404)"
                ),
            }
        }
        tracing::info!(dir = %dir.display(), logs = logs.len(), run = run.run, "disk history open");
        let partitions = Partitions {
            events: events.clone(),
            logs: logs_partition.clone(),
            streams: partition("streams")?,
            stream_events: messages_partition("stream_events")?,
            producers: partition("producers")?,
        };
        let room = Room::open(dir.into(), limits)
            .map_err(|error| DiskError::Directory(dir.into(), error))?;
        let commit = GroupCommit::start(keyspace.clone(), partitions.clone(), fsync)
            .map_err(|error| DiskError::Store(format!("the committer thread: {error}")))?;
        Ok(Self {
            config,
            commit,
            keyspace,
            events,
            runs,
            logs: Mutex::new(logs),
            tokens: Tokens::default(),
            admissions: AdmissionSets::default(),
            followed: Arc::default(),
            swept: Mutex::new(now),
            run,
            lossy,
            cut_streams: cut.as_ref().map(tail::TailCut::streams).unwrap_or_default(),
            partitions,
            room,
            _lock: lock_file,
        })
    }

    /// `Ok` when a write that adds to the disk may be queued.
    fn room(&self) -> Result<(), HistoryError> {
        self.commit.check()?;
        self.room.check(self.commit.store_bytes())
    }

    /// The logs held.
    pub fn log_count(&self) -> usize {
        lock(&self.logs).len()
    }

    /// The store's size on disk, in bytes (journals and tables), after
    /// the last group commit.
    pub fn disk_bytes(&self) -> u64 {
        self.commit.store_bytes()
    }

    /// Lets a write awaited on a multi-thread tokio runtime, while no batch
    /// is being written and the last batch held one write, be written by
    /// its awaiter instead of the committer thread: an uncontended write
    /// then costs no hand-off between threads. On a runtime of two
    /// workers or more, that worker waits on the disk for the batch while
    /// the others run the runtime (one worker at most waits so); on a
    /// runtime of one worker, the write is made inside
    /// `tokio::task::block_in_place`, which first hands the runtime to
    /// another thread. Writes that arrive while a batch is
    /// being written, and every write after a batch of several, go to the
    /// committer. Off by default.
    ///
    /// Turn it on only when every write of this history is awaited on a
    /// multi-thread runtime's workers (or its `block_on`, or outside any
    /// runtime): tokio panics at `block_in_place` inside a `LocalSet`,
    /// and that cannot be told from outside. A current-thread runtime is
    /// told apart: its writes go to the committer.
    pub fn write_inline(&self, on: bool) {
        self.commit.write_inline(on);
    }

    /// The group commit's counters.
    pub fn commit_stats(&self) -> CommitStats {
        self.commit.stats()
    }

    /// Log `id`, unless it is unknown or expired (an expired one is
    /// removed on the way).
    fn log(&self, id: &LogId) -> Option<Log> {
        let mut logs = lock(&self.logs);
        let log = Arc::clone(logs.get(id)?);
        let expired = {
            let mut state = lock(&log);
            let expired = state.expires <= Instant::now();
            if expired {
                state.remove();
            }
            expired
        };
        if expired {
            logs.remove(id);
            // Under the logs' lock: a log made again under the id has
            // followers of its own, which this must not drop.
            self.followed.forget(id);
            drop(logs);
            if let Err(error) = self.remove_log_now(id) {
                tracing::warn!(log = %id, %error, "disk history: an expired log could not be removed");
            }
            return None;
        }
        Some(log)
    }

    /// Adds the removal of every event of log `id` from `first` on to
    /// `ops` (the record stays until the caller removes or rewrites it).
    fn remove_events(&self, ops: &mut Vec<Op>, id: &LogId, first: u64) -> Result<(), HistoryError> {
        for entry in self
            .events
            .range(event_key(id, first)..=event_key(id, u64::MAX))
        {
            let (key, _) = entry.map_err(store_error)?;
            ops.push(Op::Remove(Part::Events, key));
        }
        Ok(())
    }

    /// Removes log `id` (events and record), not waiting for its write (an
    /// expiry: nothing is acknowledged by it).
    fn remove_log_now(&self, id: &LogId) -> Result<(), HistoryError> {
        let mut ops = Vec::new();
        self.remove_events(&mut ops, id, 0)?;
        ops.push(Op::Remove(Part::Logs, Slice::from(&id.to_bytes()[..])));
        drop(self.commit.submit(ops)?);
        Ok(())
    }

    /// Removes the logs that expired, at most once per
    /// [`HistoryConfig::idle`]'s eighth (and once a second at most).
    fn sweep(&self) {
        let now = Instant::now();
        {
            let mut swept = lock(&self.swept);
            if now < *swept + (self.config.idle / 8).max(Duration::from_secs(1)) {
                return;
            }
            *swept = now;
        }
        self.tokens.sweep();
        let expired: Vec<LogId> = lock(&self.logs)
            .iter()
            .filter(|(_, log)| lock(log).expires <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            // `log` removes it, checking again under the lock.
            let _ = self.log(&id);
        }
        self.followed.prune();
    }

    fn renew(&self, state: &mut LogState) {
        if !state.record.complete {
            state.expires = Instant::now() + self.config.idle;
        }
    }

    /// A new epoch for a log that continues under one: the guard's, or a
    /// random one.
    fn next_epoch(guard: &Guard) -> Result<u64, HistoryError> {
        if let Some(epoch) = guard.next_epoch.filter(|epoch| *epoch != 0) {
            return Ok(epoch);
        }
        let random = LogId::random()
            .map_err(|error| HistoryError::Unavailable(format!("the OS random source: {error}")))?
            .to_bytes();
        let mut bytes = [0; 8];
        bytes.copy_from_slice(&random[..8]);
        Ok(u64::from_le_bytes(bytes).max(1))
    }

    /// The events of log `id` after `after` up to `visible`, at most
    /// `max_bytes` of payload but at least one, at most [`READ_EVENTS`].
    fn read_events(
        &self,
        id: &LogId,
        after: u64,
        visible: u64,
        max_bytes: usize,
    ) -> Result<Vec<(u64, Bytes)>, HistoryError> {
        let mut events = Vec::new();
        if after >= visible {
            return Ok(events);
        }
        let mut total = 0usize;
        for entry in self
            .events
            .range(event_key(id, after + 1)..=event_key(id, visible))
        {
            let (key, payload) = entry.map_err(store_error)?;
            let mut seq = [0; 8];
            seq.copy_from_slice(key.get(16..24).ok_or_else(|| {
                HistoryError::Corrupt(format!("an event key of {} bytes", key.len()))
            })?);
            if !events.is_empty() && total + payload.len() > max_bytes {
                break;
            }
            total += payload.len().max(1);
            events.push((u64::from_be_bytes(seq), Bytes::from(payload)));
            if events.len() == READ_EVENTS {
                break;
            }
        }
        Ok(events)
    }

    /// [`History::after`] with the meta's fields `fields` names, or all.
    fn read(
        &self,
        id: &LogId,
        after: u64,
        max_bytes: usize,
        fields: Option<&[&str]>,
    ) -> Result<Option<Snapshot>, HistoryError> {
        let Some(log) = self.log(id) else {
            return Ok(None);
        };
        let mut state = lock(&log);
        if state.removed {
            return Ok(None);
        }
        self.renew(&mut state);
        let visible = state.visible();
        let events = self.read_events(id, after, visible, max_bytes)?;
        Ok(Some(Snapshot {
            epoch: state.record.epoch,
            published: visible,
            first_retained: state.record.first_retained.min(visible + 1),
            events,
            meta: pick(&state.record.meta, fields),
        }))
    }
}

/// The fields of `meta` that `fields` names (all of them for `None`).
fn pick(meta: &Meta, fields: Option<&[&str]>) -> Meta {
    match fields {
        None => meta.clone(),
        Some(fields) => fields
            .iter()
            .filter_map(|name| Some(((*name).to_owned(), meta.get(*name)?.clone())))
            .collect(),
    }
}

impl Drop for DiskHistory {
    fn drop(&mut self) {
        // Every queued write answered, the journal persisted, then the run
        // marked clean: a restart after this loses nothing, whatever
        // `--fsync` said.
        self.commit.close();
        let closed = self
            .keyspace
            .persist(PersistMode::SyncAll)
            .and_then(|()| {
                let clean = RunRecord {
                    clean: true,
                    ..self.run.clone()
                };
                self.runs.insert(RUN_KEY, clean.encode())
            })
            .and_then(|()| self.keyspace.persist(PersistMode::SyncAll));
        if let Err(error) = closed {
            tracing::warn!(%error, "disk history: could not persist at close");
        }
    }
}

/// A follower of one log of a [`DiskHistory`].
pub type DiskFollower = LocalFollower;

impl History for DiskHistory {
    type Follower = DiskFollower;

    fn config(&self) -> &HistoryConfig {
        &self.config
    }

    async fn create(&self, id: &LogId, epoch: u64, meta: &Meta) -> Result<bool, HistoryError> {
        self.room()?;
        self.sweep();
        if self.log(id).is_some() {
            return Ok(false);
        }
        let record = LogRecord {
            epoch,
            first_retained: 1,
            meta: meta.clone(),
            ..LogRecord::default()
        };
        let mut ops = Vec::new();
        put_record(&mut ops, id, &record);
        let state = LogState::new(record, 0, Instant::now() + self.config.idle, false);
        let pending = {
            let mut logs = lock(&self.logs);
            if logs.contains_key(id) {
                return Ok(false);
            }
            // Queued before any write of the log can follow it.
            let pending = self.commit.submit(ops)?;
            logs.insert(*id, Arc::new(Mutex::new(state)));
            pending
        };
        GroupCommit::durable(pending).await?;
        Ok(true)
    }

    async fn append_guarded(
        &self,
        id: &LogId,
        known: Known,
        payloads: &[Bytes],
        guard: &Guard,
        deadline: Instant,
    ) -> Result<Option<(u64, u64)>, HistoryError> {
        self.room()?;
        let log = self.log(id).ok_or(HistoryError::Gone)?;
        let (pending, epoch, first) = {
            let mut state = lock(&log);
            if state.removed {
                return Err(HistoryError::Gone);
            }
            let holds = guard
                .expect
                .iter()
                .all(|(name, value)| state.record.meta.get(name) == value.as_ref());
            if !holds {
                return Ok(None);
            }
            let mut ops = Vec::with_capacity(payloads.len() + 2);
            let mut record = state.record.clone();
            // As the scripts: a log that may have lost events, or one
            // behind the caller's ring, continues under a new epoch.
            let renumber =
                state.lossy || (record.epoch == known.epoch && record.published < known.published);
            if renumber {
                self.remove_events(&mut ops, id, 0)?;
                record = LogRecord {
                    epoch: Self::next_epoch(guard)?,
                    first_retained: 1,
                    complete: record.complete,
                    meta: record.meta,
                    ..LogRecord::default()
                };
                record.meta.retain(|name, _| !name.starts_with(PER_EPOCH));
            }
            for (name, value) in &guard.set {
                record.meta.insert(name.clone(), value.clone());
            }
            for name in &guard.unset {
                record.meta.remove(name);
            }
            let first = record.published + 1;
            for (seq, payload) in (first..).zip(payloads) {
                put_event(&mut ops, id, seq, payload);
                record.bytes += payload.len() as u64;
            }
            record.published += payloads.len() as u64;
            record.retained += payloads.len() as u64;
            let retention = self.config.retention as u64;
            let retention_bytes = self.config.retention_bytes as u64;
            while record.retained > retention
                || (record.bytes > retention_bytes && record.retained > 1)
            {
                let oldest = record.first_retained;
                let len = match oldest.checked_sub(first) {
                    // Written by this append: its length is the payload's.
                    Some(index) => payloads.get(index as usize).map_or(0, Bytes::len),
                    None => self
                        .events
                        .get(event_key(id, oldest))
                        .map_err(store_error)?
                        .map_or(0, |payload| payload.len()),
                };
                ops.push(Op::Remove(
                    Part::Events,
                    Slice::from(&event_key(id, oldest)[..]),
                ));
                record.bytes -= (len as u64).min(record.bytes);
                record.retained -= 1;
                record.first_retained += 1;
            }
            put_record(&mut ops, id, &record);
            let (epoch, last) = (record.epoch, record.published);
            let pending =
                state.queue_append(&self.followed, *id, (epoch, last), renumber, |shown| {
                    self.commit.submit_then(ops, Some(shown))
                })?;
            if renumber {
                state.lossy = false;
            }
            state.record = record;
            self.renew(&mut state);
            (pending, epoch, first)
        };
        match GroupCommit::durable_by(pending, deadline).await {
            Ok(durable) => durable?,
            Err(_) => {
                return Err(HistoryError::Unavailable(
                    "the disk log's fdatasync did not end by the deadline".into(),
                ))
            }
        }
        Ok(Some((epoch, first)))
    }

    async fn after(
        &self,
        id: &LogId,
        after: u64,
        max_bytes: usize,
    ) -> Result<Option<Snapshot>, HistoryError> {
        self.read(id, after, max_bytes, None)
    }

    async fn after_fields(
        &self,
        id: &LogId,
        after: u64,
        max_bytes: usize,
        fields: &[&str],
    ) -> Result<Option<Snapshot>, HistoryError> {
        self.read(id, after, max_bytes, Some(fields))
    }

    fn follow(&self, id: &LogId) -> DiskFollower {
        let visible = self.log(id).map_or(0, |log| lock(&log).visible());
        self.followed.follow(id, visible)
    }

    async fn complete(&self, id: &LogId, grace: Duration) -> Result<bool, HistoryError> {
        self.room()?;
        let Some(log) = self.log(id) else {
            return Ok(false);
        };
        let pending = {
            let mut state = lock(&log);
            if state.removed {
                return Ok(false);
            }
            state.record.complete = true;
            state.expires = Instant::now() + grace;
            let mut ops = Vec::new();
            put_record(&mut ops, id, &state.record);
            self.commit.submit(ops)?
        };
        GroupCommit::durable(pending).await?;
        Ok(true)
    }

    async fn delete(&self, id: &LogId) -> Result<bool, HistoryError> {
        self.commit.check()?;
        let Some(log) = self.log(id) else {
            return Ok(false);
        };
        let pending = {
            let mut logs = lock(&self.logs);
            let mut state = lock(&log);
            if state.removed {
                return Ok(false);
            }
            let mut ops = Vec::new();
            self.remove_events(&mut ops, id, 0)?;
            ops.push(Op::Remove(Part::Logs, Slice::from(&id.to_bytes()[..])));
            let pending = self.commit.submit(ops)?;
            state.remove();
            logs.remove(id);
            // Under the logs' lock, as an expiry's.
            self.followed.forget(id);
            pending
        };
        GroupCommit::durable(pending).await?;
        Ok(true)
    }

    async fn update_meta(&self, id: &LogId, update: &MetaUpdate) -> Result<Updated, HistoryError> {
        self.room()?;
        let log = self.log(id).ok_or(HistoryError::Gone)?;
        let (updated, pending) = {
            let mut state = lock(&log);
            if state.removed {
                return Err(HistoryError::Gone);
            }
            self.renew(&mut state);
            let record = &mut state.record;
            let refused = update.epoch.is_some_and(|epoch| epoch != record.epoch)
                || match &update.at_most {
                    Some((name, value)) => counter(&record.meta, name)? > *value,
                    None => false,
                };
            let mut changed = false;
            if !refused {
                if let Some(name) = &update.increment {
                    let next = counter(&record.meta, name)? + 1;
                    record.meta.insert(name.clone(), next.to_string());
                    changed = true;
                }
                for (name, value) in &update.raise {
                    if *value > counter(&record.meta, name)? {
                        record.meta.insert(name.clone(), value.to_string());
                        changed = true;
                    }
                }
            }
            let pending = match changed {
                true => {
                    let mut ops = Vec::new();
                    put_record(&mut ops, id, record);
                    Some(self.commit.submit(ops)?)
                }
                false => None,
            };
            let fields: Option<Vec<&str>> = update
                .fields
                .as_ref()
                .map(|fields| fields.iter().map(String::as_str).collect());
            let updated = Updated {
                applied: !refused,
                epoch: record.epoch,
                meta: pick(&record.meta, fields.as_deref()),
            };
            (updated, pending)
        };
        if let Some(pending) = pending {
            GroupCommit::durable(pending).await?;
        }
        Ok(updated)
    }

    async fn put_token(
        &self,
        id: &LogId,
        name: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<(), HistoryError> {
        self.tokens.put(id, name, value, ttl);
        Ok(())
    }

    async fn take_token(&self, id: &LogId, name: &str) -> Result<Option<String>, HistoryError> {
        Ok(self.tokens.take(id, name))
    }

    async fn has_token(&self, id: &LogId, name: &str) -> Result<bool, HistoryError> {
        Ok(self.tokens.has(id, name))
    }

    async fn admit(
        &self,
        set: &str,
        member: &str,
        limit: u64,
        ttl: Duration,
    ) -> Result<Admission, HistoryError> {
        Ok(self.admissions.admit(set, member, limit, ttl))
    }

    async fn renew(&self, set: &str, member: &str, ttl: Duration) -> Result<bool, HistoryError> {
        Ok(self.admissions.renew(set, member, ttl))
    }

    async fn release(&self, set: &str, member: &str) -> Result<bool, HistoryError> {
        Ok(self.admissions.release(set, member))
    }

    async fn count(&self, set: &str) -> Result<u64, HistoryError> {
        Ok(self.admissions.count(set))
    }
}
