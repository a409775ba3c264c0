//! The group commit of the disk history: one committer thread owns the
//! store's journal. A write (a log's events and record, as [`Op`]s) is
//! queued under its log's lock, so a log's writes reach the journal in
//! their order; the committer takes every write queued while it last
//! worked, writes them as one batch of the store (one `write(2)`), makes
//! it durable with one `fdatasync` ([`Fsync::Always`]), and answers each.
//! So one `fdatasync` acknowledges every write that arrived while the last
//! one ran, as the Redis tier's flusher batches script calls, and no
//! runtime thread ever waits on the disk: the store's journal lock is held
//! across its `fdatasync`, and a writer on a runtime thread would stall
//! the runtime behind it.
//!
//! A failed batch or `fdatasync` fails the history for good: after one, the
//! kernel may have dropped the dirty pages it could not write, and a second
//! `fdatasync` can succeed without them (the store refuses writes after
//! one, too). Every queued and later write is answered
//! [`HistoryError::Unavailable`] until the process restarts and the store
//! recovers from what is on disk; a full disk is answered
//! [`HistoryError::Full`] the same way.

use crate::HistoryError;
use fjall::{Keyspace, PartitionHandle, PersistMode, Slice};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant as StdInstant};
use tokio::sync::oneshot;

/// When a write is acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fsync {
    /// After an `fdatasync` of the journal that covers it (group commit):
    /// an acknowledged write survives a power cut. The default.
    #[default]
    Always,
    /// After its `write(2)` into the journal: it survives a killed process
    /// (the kernel holds it), not a power cut or a kernel crash. A restart
    /// after one of those continues every log under a new epoch (its
    /// clients' cursors are refused, never served other events).
    Never,
}

/// Writes one committer batch holds at most.
const GROUP_MAX: usize = 1024;

/// How often the store's size on disk is measured; in between, the
/// committer adds what each batch wrote. Measuring stats the journal file,
/// and on ext4 a stat between a write and its `fdatasync` costs that sync a
/// second block write (the inode): measured after every batch, it took 3.0
/// writes to the device per commit instead of 2.1, and 40-60 µs. Once a
/// second, a commit in about a second's worth pays it.
const MEASURE_EVERY: Duration = Duration::from_secs(1);

/// What the journal adds for each change beside its key and value (an
/// estimate, on the high side: the store's own framing, the partition's
/// name, the batch's header shared out).
const OP_OVERHEAD: u64 = 48;

/// Which partition an [`Op`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// The events.
    Events,
    /// The logs' records.
    Logs,
    /// The Durable Streams' records (`streams`).
    Streams,
    /// Their messages.
    StreamEvents,
    /// Their idempotent producers.
    Producers,
}

/// The store's partitions, as the committer writes them.
#[derive(Clone)]
pub(crate) struct Partitions {
    pub(crate) events: PartitionHandle,
    pub(crate) logs: PartitionHandle,
    pub(crate) streams: PartitionHandle,
    pub(crate) stream_events: PartitionHandle,
    pub(crate) producers: PartitionHandle,
}

impl Partitions {
    pub(crate) fn get(&self, part: Part) -> &PartitionHandle {
        match part {
            Part::Events => &self.events,
            Part::Logs => &self.logs,
            Part::Streams => &self.streams,
            Part::StreamEvents => &self.stream_events,
            Part::Producers => &self.producers,
        }
    }
}

/// One change of a write.
pub(crate) enum Op {
    /// Puts `value` under `key`.
    Insert(Part, Slice, Slice),
    /// Removes `key`.
    Remove(Part, Slice),
    /// Removes every key that starts with the prefix, as they are when
    /// the committer writes the batch (a deleted stream's messages).
    RemovePrefix(Part, Slice),
}

impl Op {
    /// About what the change adds to the journal.
    fn journal_bytes(&self) -> u64 {
        let bytes = match self {
            Self::Insert(_, key, value) => key.len() + value.len(),
            Self::Remove(_, key) | Self::RemovePrefix(_, key) => key.len(),
        };
        bytes as u64 + OP_OVERHEAD
    }
}

/// Counters of the group commit, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Writes acknowledged (appends, meta updates, creates, deletes).
    pub writes: u64,
    /// Batches written to the journal (one per group).
    pub batches: u64,
    /// `fdatasync` calls made.
    pub fsyncs: u64,
    /// Their total duration, in microseconds.
    pub fsync_micros: u64,
}

/// What runs on the committer thread once a write is durable, before its
/// caller hears so ([`GroupCommit::submit_then`]): it must neither block
/// nor panic (a panic is caught and logged, the write still answered).
pub type OnDurable = Box<dyn FnOnce() + Send + 'static>;

/// A write waiting for the committer.
struct Queued {
    ops: Vec<Op>,
    /// Run once the write is durable, whether or not its caller still
    /// waits for the answer.
    then: Option<OnDurable>,
    done: oneshot::Sender<Result<(), HistoryError>>,
}

/// What the committer counts (shared with the history).
#[derive(Default)]
struct Counters {
    writes: AtomicU64,
    batches: AtomicU64,
    fsyncs: AtomicU64,
    fsync_micros: AtomicU64,
    /// The store's size on disk: measured every [`MEASURE_EVERY`] by a
    /// thread of its own ([`measure_store`]), plus what the committer wrote
    /// since the measure began (never less than the store holds, as
    /// deletions free space only once compacted). The committer only adds
    /// to it, after each batch's sync and before its answers, so a writer
    /// that has its answer sees its bytes counted; the measuring thread
    /// only replaces it, in one read-modify-write. Neither a runtime thread
    /// nor the committer ever measures: the store's measure takes its
    /// journal lock, held across every `fdatasync`, and each partition's
    /// level lock, held by a flush or compaction across its manifest's
    /// syncs (on the committer, once a second, it held a whole group's
    /// answers behind them).
    store_bytes: AtomicU64,
    /// Why the history failed, after a failed batch or `fdatasync`.
    failed: OnceLock<HistoryError>,
}

/// The queue to the committer thread, and the thread.
pub(crate) struct GroupCommit {
    /// `None` once closed (the committer then ends).
    queue: Mutex<Option<mpsc::Sender<Queued>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The thread that measures the store's size, and what stops it (its
    /// end dropped): `None` once closed.
    measurer: Mutex<Option<(mpsc::Sender<()>, JoinHandle<()>)>>,
    counters: Arc<Counters>,
    /// Held by a test: the committer writes nothing meanwhile
    /// ([`Self::hold`]).
    #[cfg(any(test, feature = "test-support"))]
    hold: Arc<Mutex<()>>,
}

/// While alive, the committer writes nothing: what is queued stays
/// queued, unanswered (tests of what is shown before a write is durable).
#[cfg(any(test, feature = "test-support"))]
pub struct CommitsHeld<'a>(#[allow(dead_code)] std::sync::MutexGuard<'a, ()>);

/// What a queued write's caller awaits.
pub(crate) type Pending = oneshot::Receiver<Result<(), HistoryError>>;

impl GroupCommit {
    /// Starts the committer thread over the store's partitions.
    pub(crate) fn start(
        keyspace: Keyspace,
        partitions: Partitions,
        fsync: Fsync,
    ) -> std::io::Result<Self> {
        Self::start_measuring(keyspace, partitions, fsync, MEASURE_EVERY)
    }

    /// [`Self::start`], the store's size measured every `measure_every`.
    fn start_measuring(
        keyspace: Keyspace,
        partitions: Partitions,
        fsync: Fsync,
        measure_every: Duration,
    ) -> std::io::Result<Self> {
        let (queue, received) = mpsc::channel();
        let counters = Arc::new(Counters::default());
        counters
            .store_bytes
            .store(keyspace.disk_space(), Ordering::Relaxed);
        #[cfg(any(test, feature = "test-support"))]
        let hold = Arc::new(Mutex::new(()));
        let (stop_measuring, measuring) = mpsc::channel();
        let measurer = {
            let keyspace = keyspace.clone();
            let counters = Arc::clone(&counters);
            std::thread::Builder::new()
                .name("gapless-disk-size".into())
                .spawn(move || {
                    while let Err(mpsc::RecvTimeoutError::Timeout) =
                        measuring.recv_timeout(measure_every)
                    {
                        measure_store(&keyspace, &counters.store_bytes);
                    }
                })?
        };
        let committer = Committer {
            keyspace,
            partitions,
            fsync,
            counters: Arc::clone(&counters),
            #[cfg(any(test, feature = "test-support"))]
            hold: Arc::clone(&hold),
        };
        let thread = std::thread::Builder::new()
            .name("gapless-disk-commit".into())
            .spawn(move || committer.run(&received))?;
        Ok(Self {
            queue: Mutex::new(Some(queue)),
            thread: Mutex::new(Some(thread)),
            measurer: Mutex::new(Some((stop_measuring, measurer))),
            counters,
            #[cfg(any(test, feature = "test-support"))]
            hold,
        })
    }

    /// `Err` once the history failed: no write is queued after it.
    pub(crate) fn check(&self) -> Result<(), HistoryError> {
        match self.counters.failed.get() {
            Some(error) => Err(error.clone()),
            None => Ok(()),
        }
    }

    /// Queues `ops` as one write, after every write queued before; the
    /// answer comes once it is durable as [`Fsync`] says. Never blocks:
    /// call it under the lock that orders the log's writes.
    pub(crate) fn submit(&self, ops: Vec<Op>) -> Result<Pending, HistoryError> {
        self.submit_then(ops, None)
    }

    /// [`Self::submit`], and `then` runs on the committer thread once the
    /// write is durable (not if it fails), before the answer is sent: what
    /// must follow a durable write happens even when nobody awaits the
    /// answer any more (a client that went away).
    pub(crate) fn submit_then(
        &self,
        ops: Vec<Op>,
        then: Option<OnDurable>,
    ) -> Result<Pending, HistoryError> {
        self.check()?;
        let (done, pending) = oneshot::channel();
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        match queue
            .as_ref()
            .map(|queue| queue.send(Queued { ops, then, done }))
        {
            Some(Ok(())) => Ok(pending),
            _ => Err(stopped()),
        }
    }

    /// Holds the committer until the guard is dropped.
    #[cfg(any(test, feature = "test-support"))]
    pub(crate) fn hold(&self) -> CommitsHeld<'_> {
        CommitsHeld(self.hold.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Waits for a queued write's answer.
    pub(crate) async fn durable(pending: Pending) -> Result<(), HistoryError> {
        pending.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// The store's size on disk (as [`Counters::store_bytes`] keeps it).
    pub(crate) fn store_bytes(&self) -> u64 {
        self.counters.store_bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn stats(&self) -> CommitStats {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        CommitStats {
            writes: get(&self.counters.writes),
            batches: get(&self.counters.batches),
            fsyncs: get(&self.counters.fsyncs),
            fsync_micros: get(&self.counters.fsync_micros),
        }
    }

    /// Ends the committer after it answered every queued write.
    pub(crate) fn close(&self) {
        drop(
            self.queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            if thread.join().is_err() {
                tracing::error!("disk history: the committer thread panicked");
            }
        }
        let measurer = self
            .measurer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some((stop, thread)) = measurer {
            drop(stop);
            if thread.join().is_err() {
                tracing::error!("disk history: the thread measuring the store panicked");
            }
        }
    }
}

/// Measures the store's size into `store_bytes`, keeping what the
/// committer added while it measured (which the measure may or may not
/// hold: counted twice at worst, never missed). The committer only adds and
/// this is the only thread that replaces, so `now - before` is what was
/// added since `before` was read.
fn measure_store(keyspace: &Keyspace, store_bytes: &AtomicU64) {
    let before = store_bytes.load(Ordering::Relaxed);
    let measured = keyspace.disk_space();
    let _ = store_bytes.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
        Some(measured.saturating_add(now.saturating_sub(before)))
    });
}

fn stopped() -> HistoryError {
    HistoryError::Unavailable("the disk log's committer has stopped".into())
}

/// The committer thread's side.
struct Committer {
    keyspace: Keyspace,
    partitions: Partitions,
    fsync: Fsync,
    counters: Arc<Counters>,
    /// Taken around each batch ([`GroupCommit::hold`]).
    #[cfg(any(test, feature = "test-support"))]
    hold: Arc<Mutex<()>>,
}

impl Committer {
    fn run(self, received: &mpsc::Receiver<Queued>) {
        while let Ok(first) = received.recv() {
            let mut group = vec![first];
            while group.len() < GROUP_MAX {
                match received.try_recv() {
                    Ok(next) => group.push(next),
                    Err(_) => break,
                }
            }
            let written = group
                .iter()
                .flat_map(|queued| &queued.ops)
                .map(Op::journal_bytes)
                .sum();
            #[cfg(any(test, feature = "test-support"))]
            let held = self.hold.lock().unwrap_or_else(PoisonError::into_inner);
            let result = match self.counters.failed.get() {
                Some(error) => Err(error.clone()),
                None => self.commit(&mut group),
            };
            #[cfg(any(test, feature = "test-support"))]
            drop(held);
            if let Err(error) = &result {
                if self.counters.failed.set(error.clone()).is_ok() {
                    tracing::error!(%error, "disk history: a write failed; no write is acknowledged until a restart");
                }
            }
            self.counters
                .writes
                .fetch_add(group.len() as u64, Ordering::Relaxed);
            // Counted before the answers, after the sync (a measure between
            // the write and its sync costs the sync a second block): a
            // writer that has its answer sees its bytes in the size.
            self.count_store_bytes(written);
            for queued in group {
                if let (Ok(()), Some(then)) = (&result, queued.then) {
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(then)).is_err() {
                        tracing::error!("disk history: what follows a durable write panicked");
                    }
                }
                let _ = queued.done.send(result.clone());
            }
        }
    }

    /// Adds to [`Counters::store_bytes`] what a batch wrote, about
    /// `written` bytes.
    fn count_store_bytes(&self, written: u64) {
        self.counters
            .store_bytes
            .fetch_add(written, Ordering::Relaxed);
    }

    /// Writes the group as one batch, then makes it durable.
    fn commit(&self, group: &mut [Queued]) -> Result<(), HistoryError> {
        let mut batch = self.keyspace.batch();
        // Within a batch the later change of a key wins (as the store
        // replays it); a prefix's removal also takes the keys this group
        // inserted before it, which the store does not hold yet.
        let mut inserted: Vec<(Part, Slice)> = Vec::new();
        for queued in group.iter_mut() {
            for op in queued.ops.drain(..) {
                match op {
                    Op::Insert(part, key, value) => {
                        if part == Part::StreamEvents || part == Part::Producers {
                            inserted.push((part, key.clone()));
                        }
                        batch.insert(self.partitions.get(part), key, value);
                    }
                    Op::Remove(part, key) => batch.remove(self.partitions.get(part), key),
                    Op::RemovePrefix(part, prefix) => {
                        let partition = self.partitions.get(part);
                        for entry in partition.prefix(&prefix) {
                            let (key, _) = entry.map_err(super::store_error)?;
                            batch.remove(partition, key);
                        }
                        for (_, key) in inserted
                            .iter()
                            .filter(|(at, key)| *at == part && key.starts_with(&prefix))
                        {
                            batch.remove(partition, key.clone());
                        }
                    }
                }
            }
        }
        batch.commit().map_err(super::store_error)?;
        self.counters.batches.fetch_add(1, Ordering::Relaxed);
        if self.fsync == Fsync::Always {
            let started = StdInstant::now();
            let persisted = self.keyspace.persist(PersistMode::SyncData);
            self.counters.fsyncs.fetch_add(1, Ordering::Relaxed);
            self.counters.fsync_micros.fetch_add(
                u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
            persisted.map_err(super::store_error)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjall::{Config, PartitionCreateOptions};

    fn committer(dir: &std::path::Path, measure_every: Duration) -> (Keyspace, GroupCommit) {
        let keyspace = Config::new(dir).open().expect("the store");
        let partition = |name| {
            keyspace
                .open_partition(name, PartitionCreateOptions::default())
                .expect("a partition")
        };
        let partitions = Partitions {
            events: partition("events"),
            logs: partition("logs"),
            streams: partition("streams"),
            stream_events: partition("stream_events"),
            producers: partition("producers"),
        };
        let commit =
            GroupCommit::start_measuring(keyspace.clone(), partitions, Fsync::Never, measure_every)
                .expect("the committer");
        (keyspace, commit)
    }

    fn write(commit: &GroupCommit, seq: u8, bytes: usize) {
        let op = Op::Insert(
            Part::StreamEvents,
            Slice::from(&[seq][..]),
            Slice::from(vec![seq; bytes]),
        );
        let pending = commit.submit(vec![op]).expect("queued");
        pending.blocking_recv().expect("answered").expect("written");
    }

    #[test]
    fn the_store_size_counts_every_write_since_it_was_last_measured() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (_keyspace, commit) = committer(dir.path(), Duration::from_secs(3600));
        let before = commit.store_bytes();
        for seq in 0..4 {
            write(&commit, seq, 64 << 10);
        }
        // The journal is preallocated: the store's own measure would not
        // have moved, and a bound would let the disk fill.
        assert!(
            commit.store_bytes() >= before + 4 * (64 << 10),
            "{} bytes after 256 KiB written to a store of {before}",
            commit.store_bytes()
        );
        commit.close();
    }

    /// A write, and what follows it: it says on `runs` when it ran.
    fn reporting_write() -> (Op, OnDurable, mpsc::Receiver<()>) {
        let (ran, runs) = mpsc::channel();
        let op = Op::Insert(
            Part::StreamEvents,
            Slice::from(&b"k"[..]),
            Slice::from(&b"v"[..]),
        );
        let then: OnDurable = Box::new(move || {
            let _ = ran.send(());
        });
        (op, then, runs)
    }

    #[test]
    fn what_follows_a_durable_write_runs_though_nobody_awaits_it() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (_keyspace, commit) = committer(dir.path(), Duration::from_secs(3600));
        let held = commit.hold();
        let (op, then, runs) = reporting_write();
        drop(commit.submit_then(vec![op], Some(then)).expect("queued"));
        drop(held);
        // Answered after the first write: it ran by then.
        write(&commit, 1, 1);
        assert_eq!(runs.try_recv(), Ok(()), "it did not run");
        commit.close();
    }

    #[test]
    fn what_follows_a_write_does_not_run_when_the_write_fails() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (_keyspace, commit) = committer(dir.path(), Duration::from_secs(3600));
        let held = commit.hold();
        let (op, then, runs) = reporting_write();
        let pending = commit.submit_then(vec![op], Some(then)).expect("queued");
        // The history fails before the committer writes it.
        let _ = commit
            .counters
            .failed
            .set(HistoryError::Unavailable("a failed fdatasync".into()));
        drop(held);
        assert!(
            pending.blocking_recv().expect("answered").is_err(),
            "the write was not refused"
        );
        assert!(runs.try_recv().is_err(), "it ran for a write that failed");
        commit.close();
    }

    /// The loop waits for the condition under test (a measure after the
    /// last write); the deadline only turns a size never measured again
    /// into a failure.
    #[test]
    fn the_store_size_is_measured_again_once_due() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (keyspace, commit) = committer(dir.path(), Duration::from_millis(1));
        write(&commit, 0, 64 << 10);
        write(&commit, 1, 64 << 10);
        // The journal is preallocated: only a measure brings the counted
        // size back to the store's own.
        let deadline = StdInstant::now() + Duration::from_secs(30);
        while commit.store_bytes() != keyspace.disk_space() && StdInstant::now() < deadline {
            std::thread::yield_now();
        }
        assert_eq!(commit.store_bytes(), keyspace.disk_space());
        commit.close();
    }

    /// The store is measured on a thread of its own, never on the
    /// committer: a batch commits while the store's measure is held up
    /// (the test holds a partition's level lock, as a compaction's
    /// manifest sync does), and the measuring thread is the one waiting.
    /// The timeout only turns a commit that waits into a failure.
    #[test]
    fn a_commit_does_not_wait_for_the_store_to_be_measured() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (keyspace, commit) = committer(dir.path(), Duration::from_millis(1));
        let partition = keyspace
            .open_partition("stream_events", PartitionCreateOptions::default())
            .expect("the partition");
        let fjall::AnyTree::Standard(tree) = &partition.tree else {
            panic!("a standard tree");
        };
        let levels = tree.levels.write().expect("the level lock");
        let (answered, was_answered) = mpsc::channel();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for seq in 0..3 {
                    write(&commit, seq, 1 << 10);
                }
                answered.send(()).expect("the test waits");
            });
            let answer = was_answered.recv_timeout(Duration::from_secs(30));
            drop(levels);
            assert_eq!(answer, Ok(()), "a commit waited for the store's measure");
        });
        commit.close();
    }
}
