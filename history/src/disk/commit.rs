//! The group commit of the disk history. A write (a log's events and
//! record, as [`Op`]s) is queued under its log's lock, so a log's writes
//! reach the journal in their order. One batch is written at a time, by
//! whoever takes the queue: everything queued, in its order, as one batch
//! of the store (one `write(2)`), made durable with one `fdatasync`
//! ([`Fsync::Always`]), each write answered. So one `fdatasync`
//! acknowledges every write that arrived while the last one ran, as the
//! Redis tier's flusher batches script calls.
//!
//! Two take the queue:
//! - **The writer that awaits its write** ([`GroupCommit::durable`]), when
//!   it runs on a multi-thread tokio runtime, no batch is being written and
//!   the last batch held one write (the load is light): it writes the queue
//!   itself. An uncontended write then costs no hand-off between threads:
//!   no wake of a committer, no wake back. On a runtime of two workers or
//!   more it writes on its own thread: that worker waits on the disk for
//!   one batch while the others run the runtime and take its queued tasks,
//!   and one worker at most ever waits so (one batch is written at a
//!   time). On a runtime of one worker it writes inside
//!   `tokio::task::block_in_place`, which hands the runtime to another
//!   thread first (a sole worker that waited would stall the runtime
//!   behind the disk); that hand-off costs about a quarter of an
//!   uncontended append's latency, so it is taken only where it is needed
//!   ([`InlineWrite`]).
//! - **The committer thread**, for everything else: writes queued while a
//!   batch is being written (the batch's writer tells it when it ends with
//!   writes left), every write after a batch of several (writes arrive
//!   while batches are written: the committer goes from one batch to the
//!   next with no hand-off, and no runtime worker waits on the disk under
//!   load) until a batch of one says the load ebbed, writes queued outside
//!   a multi-thread runtime, and writes whose caller stopped waiting
//!   ([`Pending`]'s drop tells it). A runtime thread never waits on the
//!   store's journal lock (held across each `fdatasync`) behind another:
//!   only a batch's writer takes it, and one batch is written at a time.
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
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
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
    /// Of those, the batches the writer that awaited them wrote (on a
    /// multi-thread runtime, with no batch being written); the committer
    /// thread wrote the others.
    pub batches_inline: u64,
    /// `fdatasync` calls made.
    pub fsyncs: u64,
    /// Their total duration, in microseconds.
    pub fsync_micros: u64,
}

/// What runs once a write is durable, before its caller hears so
/// ([`GroupCommit::submit_then`]), on the thread that wrote the batch
/// (the committer, or a writer inline): it must neither
/// block nor panic (a panic is caught and logged, the write still
/// answered).
pub type OnDurable = Box<dyn FnOnce() + Send + 'static>;

/// A write waiting to be written.
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
    batches_inline: AtomicU64,
    fsyncs: AtomicU64,
    fsync_micros: AtomicU64,
    /// The store's size on disk: measured every [`MEASURE_EVERY`] by a
    /// thread of its own ([`measure_store`]), plus what the batches wrote
    /// since the measure began (never less than the store holds, as
    /// deletions free space only once compacted). A batch's writer only
    /// adds to it, after the batch's sync and before its answers, so a
    /// writer that has its answer sees its bytes counted; the measuring
    /// thread only replaces it, in one read-modify-write. No batch's writer
    /// ever measures: the store's measure takes its journal lock, held
    /// across every `fdatasync`, and each partition's level lock, held by a
    /// flush or compaction across its manifest's syncs (on the committer,
    /// once a second, it held a whole group's answers behind them).
    store_bytes: AtomicU64,
    /// Why the history failed, after a failed batch or `fdatasync`.
    failed: OnceLock<HistoryError>,
}

/// The queue, and who may take it.
#[derive(Default)]
struct Queue {
    /// Writes nobody has taken yet, in the order they were queued.
    waiting: VecDeque<Queued>,
    /// A batch is being written. Whoever sets it took the front of
    /// `waiting`; nobody else takes from it until it is cleared, after the
    /// batch's answers: batches reach the journal one at a time, in the
    /// order their writes were queued. So while it is clear, a write not
    /// yet answered is still in `waiting`.
    writing: bool,
    /// No write is queued any more; the committer ends once `waiting` is
    /// empty and no batch is being written.
    closed: bool,
    /// The committer was told to take the queue ([`Shared::call_committer`]).
    /// It takes nothing it was not told of (not at its start, not on a
    /// spurious wake): a write queued for its awaiter stays for it. Cleared
    /// when the committer takes a batch, or finds nothing left to take.
    told: bool,
    /// Writes the last batch took (0 before the first): more than one
    /// means writes arrive while batches are written, and the committer
    /// takes them ([`Shared::write_inline_or_tell`]).
    last_batch: usize,
}

/// What the committer thread and the writers that write inline share.
struct Shared {
    /// Writers awaiting their write on a multi-thread runtime write the
    /// queue themselves ([`GroupCommit::write_inline`]); off, only the
    /// committer writes.
    inline: AtomicBool,
    queue: Mutex<Queue>,
    /// Wakes the committer: writes it must take (queued where no writer
    /// will, left behind a batch, or given up by their caller), or the
    /// close.
    work: Condvar,
    batches: BatchWriter,
}

impl Shared {
    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the front of the queue as the next batch, if no batch is
    /// being written and a write waits: the caller must write it
    /// ([`Self::write`]).
    fn take(queue: &mut Queue) -> Option<Vec<Queued>> {
        if queue.writing || queue.waiting.is_empty() {
            return None;
        }
        queue.writing = true;
        let count = queue.waiting.len().min(GROUP_MAX);
        queue.last_batch = count;
        Some(queue.waiting.drain(..count).collect())
    }

    /// Writes a taken batch, answers it, and lets the next batch be taken
    /// (by the committer, told when writes wait or the queue is closed).
    fn write(&self, group: Vec<Queued>) {
        self.batches.write(group);
        let mut queue = self.queue();
        queue.writing = false;
        if !queue.waiting.is_empty() {
            self.call_committer(&mut queue);
        } else if queue.closed {
            self.work.notify_one();
        }
    }

    /// Tells the committer to take the queue: woken now, unless a batch is
    /// being written (whose writer wakes it when it ends).
    fn call_committer(&self, queue: &mut Queue) {
        queue.told = true;
        if !queue.writing {
            self.work.notify_one();
        }
    }

    /// The committer thread: writes what it is told of until closed.
    fn run_committer(&self) {
        loop {
            let group = {
                let mut queue = self.queue();
                loop {
                    if queue.told {
                        if let Some(group) = Self::take(&mut queue) {
                            queue.told = false;
                            break group;
                        }
                        if queue.waiting.is_empty() {
                            queue.told = false;
                        }
                    }
                    if queue.closed && queue.waiting.is_empty() && !queue.writing {
                        return;
                    }
                    queue = self
                        .work
                        .wait(queue)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            };
            self.write(group);
        }
    }

    /// For a writer about to await its write: writes the queue itself if
    /// it may (on a multi-thread runtime, [`InlineWrite::here`]; no batch
    /// being written, the last batch of one write, its write still
    /// queued), else tells the committer if the write waits for nobody.
    /// Either way its answer then comes.
    fn write_inline_or_tell(&self, answer: &oneshot::Receiver<Result<(), HistoryError>>) {
        if !answer.is_empty() {
            return;
        }
        let Some(way) = InlineWrite::here() else {
            // No writer may wait on this thread: the committer.
            self.tell();
            return;
        };
        let group = {
            let mut queue = self.queue();
            if queue.last_batch > 1 {
                // Writes arrive while batches are written: the committer
                // takes them, as it goes on from one batch to the next
                // with no hand-off of the thread and no runtime worker
                // waiting on the disk, until a batch of one write says
                // the load ebbed.
                self.call_committer(&mut queue);
                return;
            }
            // `None`: a batch is being written, whose writer answers this
            // write or tells the committer of it when it ends.
            let Some(group) = Self::take(&mut queue) else {
                return;
            };
            group
        };
        self.batches
            .counters
            .batches_inline
            .fetch_add(1, Ordering::Relaxed);
        match way {
            InlineWrite::OnThisWorker => self.write(group),
            InlineWrite::HandingTheRuntimeOn => tokio::task::block_in_place(|| self.write(group)),
        }
    }

    /// [`Self::call_committer`], for a writer that will not write the
    /// queue itself.
    fn tell(&self) {
        self.call_committer(&mut self.queue());
    }
}

/// How a writer on a multi-thread runtime writes a batch inline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InlineWrite {
    /// On its own thread, as a plain call: the runtime has another worker
    /// to run its tasks (and take this one's queued tasks) while this one
    /// waits on the disk. In measured runs at one connection this took
    /// about 55 µs off each append against `block_in_place`, whose
    /// hand-off of the worker to another thread costs two `futex` calls
    /// and a swap of threads on every batch.
    OnThisWorker,
    /// Inside `block_in_place`: the runtime has one worker, which must not
    /// wait on the disk; it is handed to another thread first.
    HandingTheRuntimeOn,
}

impl InlineWrite {
    /// The way for a writer on this thread: `None` off a multi-thread
    /// tokio runtime (outside any runtime, or on a current-thread one),
    /// where no writer may write inline.
    fn here() -> Option<Self> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        if runtime.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return None;
        }
        Some(if runtime.metrics().num_workers() >= 2 {
            Self::OnThisWorker
        } else {
            Self::HandingTheRuntimeOn
        })
    }
}

/// The group commit: the queue, the committer thread, and the thread that
/// measures the store.
pub(crate) struct GroupCommit {
    shared: Arc<Shared>,
    /// The committer thread: `None` once closed.
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The thread that measures the store's size, and what stops it (its
    /// end dropped): `None` once closed.
    measurer: Mutex<Option<(mpsc::Sender<()>, JoinHandle<()>)>>,
}

/// While alive, no batch is written: what is queued stays queued,
/// unanswered (tests of what is shown before a write is durable).
#[cfg(any(test, feature = "test-support"))]
pub struct CommitsHeld<'a>(#[allow(dead_code)] std::sync::MutexGuard<'a, ()>);

/// What a queued write's caller awaits ([`GroupCommit::durable`]).
pub(crate) struct Pending {
    answer: oneshot::Receiver<Result<(), HistoryError>>,
    /// Set while the write may be waiting for its awaiter to write it
    /// (queued on a multi-thread runtime, the committer not told): taken
    /// when awaited; dropped unawaited, it tells the committer.
    inline: Option<Arc<Shared>>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(shared) = self.inline.take() {
            if self.answer.is_empty() {
                shared.tell();
            }
        }
    }
}

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
        let counters = Arc::new(Counters::default());
        counters
            .store_bytes
            .store(keyspace.disk_space(), Ordering::Relaxed);
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
        let shared = Arc::new(Shared {
            inline: AtomicBool::new(false),
            queue: Mutex::new(Queue::default()),
            work: Condvar::new(),
            batches: BatchWriter {
                keyspace,
                partitions,
                fsync,
                counters,
                #[cfg(any(test, feature = "test-support"))]
                hold: Mutex::new(()),
            },
        });
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("gapless-disk-commit".into())
                .spawn(move || shared.run_committer())?
        };
        Ok(Self {
            shared,
            thread: Mutex::new(Some(thread)),
            measurer: Mutex::new(Some((stop_measuring, measurer))),
        })
    }

    fn counters(&self) -> &Counters {
        &self.shared.batches.counters
    }

    /// `Err` once the history failed: no write is queued after it.
    pub(crate) fn check(&self) -> Result<(), HistoryError> {
        match self.counters().failed.get() {
            Some(error) => Err(error.clone()),
            None => Ok(()),
        }
    }

    /// Queues `ops` as one write, after every write queued before; the
    /// answer comes once it is durable as [`Fsync`] says. Never blocks:
    /// call it under the lock that orders the log's writes (and await the
    /// answer after releasing it: its awaiter may write the batch).
    pub(crate) fn submit(&self, ops: Vec<Op>) -> Result<Pending, HistoryError> {
        self.submit_then(ops, None)
    }

    /// [`Self::submit`], and `then` runs on the thread that writes the
    /// batch once the write is durable (not if it fails), before the answer
    /// is sent: what must follow a durable write happens even when nobody
    /// awaits the answer any more (a client that went away).
    pub(crate) fn submit_then(
        &self,
        ops: Vec<Op>,
        then: Option<OnDurable>,
    ) -> Result<Pending, HistoryError> {
        self.check()?;
        let (done, answer) = oneshot::channel();
        let mut queue = self.shared.queue();
        if queue.closed {
            return Err(stopped());
        }
        queue.waiting.push_back(Queued { ops, then, done });
        // On a multi-thread runtime its awaiter writes it (or tells the
        // committer); elsewhere nobody would.
        let inline = self.shared.inline.load(Ordering::Relaxed) && InlineWrite::here().is_some();
        if !inline {
            self.shared.call_committer(&mut queue);
        }
        Ok(Pending {
            answer,
            inline: inline.then(|| Arc::clone(&self.shared)),
        })
    }

    /// Lets a writer that awaits its write on a multi-thread runtime, with
    /// no batch being written, write the queue itself
    /// ([`Shared::write_inline_or_tell`]): an uncontended write then
    /// takes no hand-off to the committer thread and back ([`InlineWrite`]
    /// says on which thread). Only for a caller whose writes are all
    /// awaited on a multi-thread runtime's workers, its `block_on`, or
    /// outside any runtime: tokio refuses `block_in_place` (it panics) in
    /// a `LocalSet`, which cannot be told from outside, and a runtime of
    /// one worker takes that way. Off by default.
    pub(crate) fn write_inline(&self, on: bool) {
        self.shared.inline.store(on, Ordering::Relaxed);
    }

    /// Holds every batch's writer until the guard is dropped.
    #[cfg(any(test, feature = "test-support"))]
    pub(crate) fn hold(&self) -> CommitsHeld<'_> {
        CommitsHeld(
            self.shared
                .batches
                .hold
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Waits for a queued write's answer, writing the queue on this thread
    /// when it may ([`Shared::write_inline_or_tell`]).
    pub(crate) async fn durable(mut pending: Pending) -> Result<(), HistoryError> {
        if let Some(shared) = pending.inline.take() {
            shared.write_inline_or_tell(&pending.answer);
        }
        (&mut pending.answer)
            .await
            .unwrap_or_else(|_| Err(stopped()))
    }

    /// Waits for a queued write's answer until `deadline`, never writing
    /// on this thread (a write inline could not be given up at the
    /// deadline): the committer writes it.
    ///
    /// # Errors
    /// As the write's answer; `Err(Elapsed)` at the deadline.
    pub(crate) async fn durable_by(
        mut pending: Pending,
        deadline: tokio::time::Instant,
    ) -> Result<Result<(), HistoryError>, tokio::time::error::Elapsed> {
        if let Some(shared) = pending.inline.take() {
            shared.tell();
        }
        tokio::time::timeout_at(deadline, &mut pending.answer)
            .await
            .map(|answer| answer.unwrap_or_else(|_| Err(stopped())))
    }

    /// The store's size on disk (as [`Counters::store_bytes`] keeps it).
    pub(crate) fn store_bytes(&self) -> u64 {
        self.counters().store_bytes.load(Ordering::Relaxed)
    }

    pub(crate) fn stats(&self) -> CommitStats {
        let counters = self.counters();
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        CommitStats {
            writes: get(&counters.writes),
            batches: get(&counters.batches),
            batches_inline: get(&counters.batches_inline),
            fsyncs: get(&counters.fsyncs),
            fsync_micros: get(&counters.fsync_micros),
        }
    }

    /// Ends the committer after every queued write was answered.
    pub(crate) fn close(&self) {
        {
            let mut queue = self.shared.queue();
            queue.closed = true;
            // Everything still queued is the committer's to write.
            queue.told = true;
            self.shared.work.notify_one();
        }
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
/// batches added while it measured (which the measure may or may not
/// hold: counted twice at worst, never missed). Batches only add and
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

/// Writes batches into the store (one at a time: [`Queue::writing`]).
struct BatchWriter {
    keyspace: Keyspace,
    partitions: Partitions,
    fsync: Fsync,
    counters: Arc<Counters>,
    /// Taken around each batch ([`GroupCommit::hold`]).
    #[cfg(any(test, feature = "test-support"))]
    hold: Mutex<()>,
}

impl BatchWriter {
    /// Writes a batch, makes it durable, and answers each write.
    fn write(&self, mut group: Vec<Queued>) {
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
mod tests;
