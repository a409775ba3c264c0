//! The group commit's tests: the store's size, what follows a durable
//! write, and who writes a batch (the committer, or a writer inline).

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

/// A write's answer, awaited off any runtime (the committer writes it).
fn answer(pending: Pending) -> Result<(), HistoryError> {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(GroupCommit::durable(pending))
}

fn write(commit: &GroupCommit, seq: u8, bytes: usize) {
    let op = Op::Insert(
        Part::StreamEvents,
        Slice::from(&[seq][..]),
        Slice::from(vec![seq; bytes]),
    );
    let pending = commit.submit(vec![op]).expect("queued");
    answer(pending).expect("written");
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
        .counters()
        .failed
        .set(HistoryError::Unavailable("a failed fdatasync".into()));
    drop(held);
    assert!(answer(pending).is_err(), "the write was not refused");
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
    wait_until(|| commit.store_bytes() == keyspace.disk_space());
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

/// A committer whose writers may write inline, over a store in a
/// temporary directory (kept alive by the first of the three).
fn inline_committer() -> (tempfile::TempDir, Keyspace, GroupCommit) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (keyspace, commit) = committer(dir.path(), Duration::from_secs(3600));
    commit.write_inline(true);
    (dir, keyspace, commit)
}

/// Waits until `done` holds: true once it does, false if 30 s pass (the
/// deadline only turns a condition never reached into a failure).
fn wait_until(done: impl Fn() -> bool) -> bool {
    let deadline = StdInstant::now() + Duration::from_secs(30);
    while !done() {
        if StdInstant::now() >= deadline {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

/// A multi-thread runtime of two workers, as the server runs.
fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a runtime")
}

fn insert(key: &[u8], value: &[u8]) -> Op {
    Op::Insert(Part::StreamEvents, Slice::from(key), Slice::from(value))
}

fn stored(keyspace: &Keyspace, key: &[u8]) -> Option<Slice> {
    keyspace
        .open_partition("stream_events", PartitionCreateOptions::default())
        .expect("the partition")
        .get(key)
        .expect("a read")
}

#[test]
fn a_write_awaited_on_a_multi_thread_runtime_is_written_by_its_awaiter() {
    let (_dir, keyspace, commit) = inline_committer();
    multi_thread().block_on(async {
        let pending = commit.submit(vec![insert(b"k", b"v")]).expect("queued");
        GroupCommit::durable(pending).await.expect("written");
    });
    let stats = commit.stats();
    assert_eq!((stats.batches, stats.batches_inline), (1, 1), "{stats:?}");
    assert_eq!(stored(&keyspace, b"k").as_deref(), Some(&b"v"[..]));
    commit.close();
}

#[test]
fn a_write_awaited_on_a_current_thread_runtime_goes_to_the_committer() {
    let (_dir, _keyspace, commit) = inline_committer();
    // Queued and awaited on the runtime: `block_in_place` would panic
    // there.
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
        .block_on(async {
            let pending = commit.submit(vec![insert(b"k", b"v")]).expect("queued");
            GroupCommit::durable(pending).await.expect("written");
        });
    let stats = commit.stats();
    assert_eq!((stats.batches, stats.batches_inline), (1, 0), "{stats:?}");
    commit.close();
}

#[test]
fn a_write_awaited_with_a_deadline_goes_to_the_committer() {
    let (_dir, _keyspace, commit) = inline_committer();
    multi_thread().block_on(async {
        let pending = commit.submit(vec![insert(b"k", b"v")]).expect("queued");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        GroupCommit::durable_by(pending, deadline)
            .await
            .expect("answered by the deadline")
            .expect("written");
    });
    let stats = commit.stats();
    assert_eq!((stats.batches, stats.batches_inline), (1, 0), "{stats:?}");
    commit.close();
}

/// The later write is awaited first: its awaiter writes both, in the
/// order they were queued, and the earlier's answer is ready.
#[test]
fn an_awaiter_writes_the_writes_queued_before_its_own_in_their_order() {
    let (_dir, keyspace, commit) = inline_committer();
    multi_thread().block_on(async {
        let first = commit.submit(vec![insert(b"k", b"1")]).expect("queued");
        let second = commit.submit(vec![insert(b"k", b"2")]).expect("queued");
        GroupCommit::durable(second).await.expect("written");
        assert!(
            !first.answer.is_empty(),
            "the earlier write is not answered"
        );
        GroupCommit::durable(first).await.expect("written");
    });
    assert_eq!(stored(&keyspace, b"k").as_deref(), Some(&b"2"[..]));
    let stats = commit.stats();
    assert_eq!((stats.batches, stats.batches_inline), (1, 1), "{stats:?}");
    commit.close();
}

/// The loop waits for the condition under test; the deadline only
/// turns a write nobody takes into a failure.
#[test]
fn a_write_given_up_unawaited_is_written_by_the_committer() {
    let (_dir, keyspace, commit) = inline_committer();
    multi_thread().block_on(async {
        drop(commit.submit(vec![insert(b"k", b"v")]).expect("queued"));
    });
    wait_until(|| commit.stats().writes > 0);
    assert_eq!(stored(&keyspace, b"k").as_deref(), Some(&b"v"[..]));
    assert_eq!(commit.stats().batches_inline, 0);
    commit.close();
}

/// A task on `runtime` that writes `key` and awaits the answer.
fn spawn_write(
    runtime: &tokio::runtime::Runtime,
    commit: &Arc<GroupCommit>,
    key: &'static [u8],
    value: &'static [u8],
) -> tokio::task::JoinHandle<Result<(), HistoryError>> {
    let commit = Arc::clone(commit);
    runtime.spawn(async move {
        let pending = commit.submit(vec![insert(key, value)]).expect("queued");
        GroupCommit::durable(pending).await
    })
}

/// A writer writes its batch inline and is held there; a second write
/// queued meanwhile waits for it, then the committer writes it. The
/// loops wait for the conditions under test; the deadlines only turn a
/// write nobody takes into a failure.
#[test]
fn a_write_queued_behind_a_batch_written_inline_goes_to_the_committer() {
    let (_dir, keyspace, commit) = inline_committer();
    let commit = Arc::new(commit);
    let runtime = multi_thread();
    let held = commit.hold();
    let first = spawn_write(&runtime, &commit, b"a", b"1");
    assert!(
        wait_until(|| commit.shared.queue().writing),
        "the first write was not taken"
    );
    let second = spawn_write(&runtime, &commit, b"b", b"2");
    wait_until(|| !commit.shared.queue().waiting.is_empty());
    drop(held);
    runtime.block_on(async {
        for (name, task) in [("first", first), ("second", second)] {
            tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .unwrap_or_else(|_| panic!("the {name} write was never answered"))
                .expect("the task")
                .expect("written");
        }
    });
    let stats = commit.stats();
    assert_eq!((stats.batches, stats.batches_inline), (2, 1), "{stats:?}");
    assert_eq!(stored(&keyspace, b"b").as_deref(), Some(&b"2"[..]));
    commit.close();
}

/// A batch of two says writes arrive while batches are written: the
/// next write goes to the committer; a batch of one says the load
/// ebbed, and the write after it is written by its awaiter again.
#[test]
fn after_a_batch_of_several_writes_the_committer_takes_the_next() {
    let (_dir, _keyspace, commit) = inline_committer();
    let inline_after = |ops: Vec<Vec<Op>>| {
        // A batch's writer answers before it lets the next batch be
        // taken: the next write waits for that, as the one under test
        // would otherwise find the batch still being written. The
        // deadline only turns a batch that never ends into a failure.
        wait_until(|| !commit.shared.queue().writing);
        multi_thread().block_on(async {
            let pending: Vec<Pending> = ops
                .into_iter()
                .map(|ops| commit.submit(ops).expect("queued"))
                .collect();
            for pending in pending {
                GroupCommit::durable(pending).await.expect("written");
            }
        });
        commit.stats().batches_inline
    };
    let two = vec![vec![insert(b"a", b"1")], vec![insert(b"b", b"2")]];
    assert_eq!(inline_after(two), 1, "the first batch, of two writes");
    assert_eq!(
        inline_after(vec![vec![insert(b"c", b"3")]]),
        1,
        "a write after a batch of two was written inline"
    );
    assert_eq!(
        inline_after(vec![vec![insert(b"d", b"4")]]),
        2,
        "a write after a batch of one went to the committer"
    );
    assert_eq!(commit.stats().batches, 3);
    commit.close();
}

/// On a runtime of one worker, a writer writing its batch inline hands
/// the runtime to another thread first: held in its batch, the runtime
/// still runs a task. The deadlines only turn a runtime that stalls
/// behind the disk into a failure.
#[test]
fn a_write_made_inline_on_a_runtime_of_one_worker_leaves_the_runtime_running() {
    let (_dir, keyspace, commit) = inline_committer();
    let commit = Arc::new(commit);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_time()
        .build()
        .expect("a runtime");
    let held = commit.hold();
    let write = spawn_write(&runtime, &commit, b"k", b"v");
    assert!(
        wait_until(|| commit.shared.queue().writing),
        "the write was not taken"
    );
    let (ran, runs) = mpsc::channel();
    runtime.spawn(async move { ran.send(()) });
    let served = runs.recv_timeout(Duration::from_secs(30));
    drop(held);
    assert!(
        served.is_ok(),
        "the runtime ran no task while a write was held"
    );
    runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), write)
            .await
            .expect("the write was never answered")
            .expect("the task")
            .expect("written");
    });
    assert_eq!(commit.stats().batches_inline, 1);
    assert_eq!(stored(&keyspace, b"k").as_deref(), Some(&b"v"[..]));
    commit.close();
}
