//! What the disk history keeps across a restart (a drop and an open of the
//! same directory), and what it refuses.

use super::{DiskError, DiskHistory, DiskLimits, Fsync};
use crate::{Change, Follower, Guard, History, HistoryConfig, Known, LogId, Meta, MetaUpdate};
use bytes::Bytes;
use std::path::Path;
use std::time::Duration;
use tokio::time::Instant;

fn config(retention: usize, retention_bytes: usize) -> HistoryConfig {
    HistoryConfig {
        url: String::new(),
        cluster: false,
        timeout: Duration::from_secs(5),
        retention,
        retention_bytes,
        idle: Duration::from_secs(600),
        ca_file: None,
    }
}

fn open(dir: &Path, fsync: Fsync) -> DiskHistory {
    DiskHistory::open(dir, config(8, 1 << 20), fsync, DiskLimits::default())
        .expect("the disk history opens")
}

fn event(n: u64) -> Bytes {
    Bytes::from(format!("event {n}"))
}

async fn append(
    history: &DiskHistory,
    id: &LogId,
    known: Known,
    n: std::ops::RangeInclusive<u64>,
) -> (u64, u64) {
    let payloads: Vec<Bytes> = n.map(event).collect();
    history
        .append(
            id,
            known,
            &payloads,
            Instant::now() + Duration::from_secs(10),
        )
        .await
        .expect("append")
}

fn known(epoch: u64, published: u64) -> Known {
    Known { epoch, published }
}

fn meta(pairs: &[(&str, &str)]) -> Meta {
    pairs
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test]
async fn a_reopened_history_holds_every_acknowledged_write() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (kept, completed, deleted) = (
        LogId::random().expect("random"),
        LogId::random().expect("random"),
        LogId::random().expect("random"),
    );
    {
        let history = open(dir.path(), Fsync::Always);
        for id in [&kept, &completed, &deleted] {
            assert!(history
                .create(id, 7, &meta(&[("pk", "k1")]))
                .await
                .expect("create"));
        }
        assert_eq!(append(&history, &kept, known(7, 0), 1..=3).await, (7, 1));
        let guard = Guard {
            expect: vec![("closed".into(), None)],
            set: vec![("closed".into(), "true".into())],
            ..Guard::default()
        };
        assert_eq!(
            history
                .append_guarded(
                    &kept,
                    known(7, 3),
                    &[event(4)],
                    &guard,
                    Instant::now() + Duration::from_secs(10)
                )
                .await
                .expect("append"),
            Some((7, 4))
        );
        let raised = MetaUpdate {
            raise: vec![("epoch/acked".into(), 2)],
            ..MetaUpdate::default()
        };
        assert!(
            history
                .update_meta(&kept, &raised)
                .await
                .expect("update")
                .applied
        );
        assert!(history
            .complete(&completed, Duration::from_secs(60))
            .await
            .expect("complete"));
        assert!(history.delete(&deleted).await.expect("delete"));
    }
    let history = open(dir.path(), Fsync::Always);
    assert_eq!(history.log_count(), 2);
    let snapshot = history
        .after(&kept, 0, 1 << 20)
        .await
        .expect("read")
        .expect("the log");
    assert_eq!(
        (snapshot.epoch, snapshot.published, snapshot.first_retained),
        (7, 4, 1)
    );
    assert_eq!(
        snapshot.events,
        (1..=4).map(|n| (n, event(n))).collect::<Vec<_>>()
    );
    assert_eq!(
        snapshot.meta,
        meta(&[("pk", "k1"), ("closed", "true"), ("epoch/acked", "2")])
    );
    assert!(history
        .after(&deleted, 0, 1 << 20)
        .await
        .expect("read")
        .is_none());
    assert!(history
        .after(&completed, 0, 1 << 20)
        .await
        .expect("read")
        .is_some());
    // Appends continue after the last seq, under the same epoch.
    assert_eq!(append(&history, &kept, known(7, 4), 5..=5).await, (7, 5));
}

#[tokio::test]
async fn retention_trims_by_events_and_bytes_and_the_trim_survives_a_restart() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let id = LogId::random().expect("random");
    {
        // 8 events or 40 bytes ("event N" is 7 bytes): 5 events.
        let history = DiskHistory::open(
            dir.path(),
            config(8, 40),
            Fsync::Always,
            DiskLimits::default(),
        )
        .expect("open");
        assert!(history.create(&id, 1, &Meta::new()).await.expect("create"));
        append(&history, &id, known(1, 0), 1..=4).await;
        append(&history, &id, known(1, 4), 5..=9).await;
        let snapshot = history
            .after(&id, 0, 1 << 20)
            .await
            .expect("read")
            .expect("log");
        assert_eq!((snapshot.first_retained, snapshot.published), (5, 9));
        assert_eq!(snapshot.events.first().map(|(seq, _)| *seq), Some(5));
    }
    let history = DiskHistory::open(
        dir.path(),
        config(3, 1 << 20),
        Fsync::Always,
        DiskLimits::default(),
    )
    .expect("open");
    let snapshot = history
        .after(&id, 0, 1 << 20)
        .await
        .expect("read")
        .expect("log");
    assert_eq!((snapshot.first_retained, snapshot.events.len()), (5, 5));
    // The next append trims to the new retention: 3 events.
    append(&history, &id, known(1, 9), 10..=10).await;
    let snapshot = history
        .after(&id, 0, 1 << 20)
        .await
        .expect("read")
        .expect("log");
    assert_eq!(
        snapshot
            .events
            .iter()
            .map(|(seq, _)| *seq)
            .collect::<Vec<_>>(),
        vec![8, 9, 10]
    );
    assert_eq!(snapshot.first_retained, 8);
}

#[tokio::test]
async fn a_second_process_on_the_directory_is_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let first = open(dir.path(), Fsync::Always);
    match DiskHistory::open(
        dir.path(),
        config(8, 1 << 20),
        Fsync::Always,
        DiskLimits::default(),
    ) {
        Err(DiskError::InUse(path)) => assert_eq!(path, dir.path()),
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("a second history opened the directory"),
    }
    drop(first);
    drop(open(dir.path(), Fsync::Always));
}

#[tokio::test]
async fn after_a_power_cut_with_fsync_never_a_log_continues_under_a_new_epoch() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let id = LogId::random().expect("random");
    {
        let history = open(dir.path(), Fsync::Never);
        assert!(history
            .create(&id, 7, &meta(&[("pk", "k1"), ("epoch/acked", "2")]))
            .await
            .expect("create"));
        append(&history, &id, known(7, 0), 1..=3).await;
    }
    DiskHistory::as_if_the_machine_restarted_unclosed(dir.path());
    let history = open(dir.path(), Fsync::Never);
    // What is on disk is still read as it was...
    let snapshot = history
        .after(&id, 0, 1 << 20)
        .await
        .expect("read")
        .expect("log");
    assert_eq!((snapshot.epoch, snapshot.published), (7, 3));
    // ...but the next append may not reuse seqs whose events were lost:
    // it starts a new epoch, from seq 1, the epoch's meta cleared; a
    // follower hears the new last seq, lower than the old one.
    let mut follower = history.follow(&id);
    let (epoch, first) = append(&history, &id, known(7, 3), 4..=4).await;
    assert_ne!(epoch, 7);
    assert_eq!(first, 1);
    let heard = tokio::time::timeout(Duration::from_secs(10), follower.changed()).await;
    assert_eq!(heard.expect("an announcement"), Some(Change::Published(1)));
    let snapshot = history
        .after(&id, 0, 1 << 20)
        .await
        .expect("read")
        .expect("log");
    assert_eq!(snapshot.events, vec![(1, event(4))]);
    assert_eq!(snapshot.meta, meta(&[("pk", "k1")]));
}

#[tokio::test]
async fn a_clean_close_with_fsync_never_loses_nothing_and_keeps_the_epoch() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let id = LogId::random().expect("random");
    {
        let history = open(dir.path(), Fsync::Never);
        assert!(history.create(&id, 7, &Meta::new()).await.expect("create"));
        append(&history, &id, known(7, 0), 1..=3).await;
    }
    let history = open(dir.path(), Fsync::Never);
    assert_eq!(append(&history, &id, known(7, 3), 4..=4).await, (7, 4));
}

#[tokio::test]
async fn a_reopened_store_commits_into_blocks_written_ahead() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let id = LogId::random().expect("random");
    {
        let history = open(dir.path(), Fsync::Always);
        assert!(history.create(&id, 7, &meta(&[])).await.expect("create"));
        assert_eq!(append(&history, &id, known(7, 0), 1..=3).await, (7, 1));
    }
    let history = open(dir.path(), Fsync::Always);
    assert_eq!(append(&history, &id, known(7, 3), 4..=6).await, (7, 4));
    // A few KiB were written in all, and recovery cut the journal's zeros
    // off: a MiB on disk is the zeros written ahead of its end again, so
    // a commit's fdatasync writes no block map (vendor/fjall's patch).
    let (journal, on_disk) = active_journal_on_disk(&dir.path().join("store"));
    assert!(
        on_disk >= 1 << 20,
        "the reopened store commits to journal {journal:?}, {on_disk} bytes on disk"
    );
    let snapshot = history
        .after(&id, 0, 1 << 20)
        .await
        .expect("read")
        .expect("the log");
    assert_eq!(snapshot.events.len(), 6);
}

/// A history in `dir` (group commit on) holding one new log, epoch 7.
async fn with_a_log(dir: &Path) -> (DiskHistory, LogId) {
    let history = open(dir, Fsync::Always);
    let id = LogId::random().expect("random");
    assert!(history.create(&id, 7, &Meta::new()).await.expect("create"));
    (history, id)
}

/// Queues the append of event `n` to log `id` (with the committer held),
/// and goes away without its answer.
async fn queue_append_and_leave(history: &DiskHistory, id: &LogId, known: Known, n: u64) {
    let payloads = [event(n)];
    let mut appending = Box::pin(history.append(
        id,
        known,
        &payloads,
        Instant::now() + Duration::from_secs(10),
    ));
    assert!(
        futures_util::poll!(&mut appending).is_pending(),
        "the append waits for its commit"
    );
}

#[tokio::test]
async fn an_append_whose_caller_went_away_is_seen_once_durable() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (history, id) = with_a_log(dir.path()).await;
    let mut follower = history.follow(&id);
    let held = history.hold_commits();
    // Its caller went away (a client gone, an emit past its deadline).
    queue_append_and_leave(&history, &id, known(7, 0), 1).await;
    drop(held);
    // Queued after the append: answered, the append is durable.
    history
        .journal_streams(Vec::new())
        .expect("queued")
        .durable()
        .await
        .expect("durable");
    let snapshot = history.after(&id, 0, 1 << 20).await.expect("read");
    let events = snapshot.map(|snapshot| snapshot.events).unwrap_or_default();
    assert_eq!(
        events,
        vec![(1, event(1))],
        "a durable event was not seen because its appender went away"
    );
    assert!(
        matches!(
            futures_util::poll!(Box::pin(follower.changed())),
            std::task::Poll::Ready(Some(Change::Published(1)))
        ),
        "the log's follower was not told of the durable event"
    );
}

#[tokio::test]
async fn a_removed_logs_late_durable_append_tells_nothing_to_the_log_made_again_under_its_id() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (history, id) = with_a_log(dir.path()).await;
    assert_eq!(append(&history, &id, known(7, 0), 1..=2).await, (7, 1));
    let held = history.hold_commits();
    // An append of the old log queued, then the log deleted and made again
    // under the same id, all before the committer gets to them.
    queue_append_and_leave(&history, &id, known(7, 2), 3).await;
    let mut deleting = Box::pin(history.delete(&id));
    assert!(futures_util::poll!(&mut deleting).is_pending());
    let empty = Meta::new();
    let mut creating = Box::pin(history.create(&id, 8, &empty));
    assert!(futures_util::poll!(&mut creating).is_pending());
    let mut follower = history.follow(&id);
    drop(held);
    assert!(deleting.await.expect("delete"), "the old log was deleted");
    assert!(creating.await.expect("create"), "the new log was made");
    assert!(
        futures_util::poll!(Box::pin(follower.changed())).is_pending(),
        "the new log's follower heard the removed log's seq 3"
    );
    assert_eq!(append(&history, &id, known(8, 0), 1..=1).await, (8, 1));
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(10), follower.changed())
            .await
            .expect("an announcement"),
        Some(Change::Published(1))
    );
}

/// The bytes the file system holds for the active journal of the store
/// at `store`, and its name.
fn active_journal_on_disk(store: &Path) -> (std::ffi::OsString, u64) {
    use std::os::unix::fs::MetadataExt;
    let journal = super::tail::active_journal(&store.join("journals"))
        .expect("the journals")
        .expect("an active journal");
    let on_disk = std::fs::metadata(&journal).expect("its metadata").blocks() * 512;
    (journal.file_name().expect("a name").to_owned(), on_disk)
}

/// The store's journal is written ahead of its end (vendor/fjall's
/// patch): a commit's `fdatasync` then writes no block map.
#[tokio::test]
async fn the_journal_is_written_ahead_of_its_end() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let id = LogId::random().expect("random");
    let history = open(dir.path(), Fsync::Always);
    assert!(history.create(&id, 7, &meta(&[])).await.expect("create"));
    append(&history, &id, known(7, 0), 1..=3).await;
    let (_, on_disk) = active_journal_on_disk(&dir.path().join("store"));
    assert!(on_disk >= 1 << 20, "the journal holds {on_disk} bytes");
}

/// A journal the store reopens (its recovery cuts the zeros past its last
/// record) is written after that record, and ahead of it again.
#[test]
fn a_reopened_journal_is_written_after_its_last_record_and_ahead_of_it() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let open_store = || {
        let keyspace = fjall::Config::new(dir.path()).open().expect("the store");
        let partition = keyspace
            .open_partition("p", fjall::PartitionCreateOptions::default())
            .expect("a partition");
        (keyspace, partition)
    };
    let first = {
        let (keyspace, partition) = open_store();
        partition.insert("one", "1").expect("insert");
        keyspace
            .persist(fjall::PersistMode::SyncData)
            .expect("persist");
        active_journal_on_disk(dir.path()).0
    };
    {
        let (keyspace, partition) = open_store();
        partition.insert("two", "2").expect("insert");
        keyspace
            .persist(fjall::PersistMode::SyncData)
            .expect("persist");
        let (journal, on_disk) = active_journal_on_disk(dir.path());
        assert_eq!(journal, first, "the store went on in its journal");
        assert!(
            on_disk >= 1 << 20,
            "the reopened journal holds {on_disk} bytes"
        );
    }
    let (_, partition) = open_store();
    for (key, value) in [("one", "1"), ("two", "2")] {
        let read = partition.get(key).expect("read");
        assert_eq!(read.as_deref(), Some(value.as_bytes()), "{key}");
    }
}

/// A commit does not wait for the store's level lock, which a flush or a
/// compaction holds while it rewrites the level manifest and syncs it
/// (vendor/fjall's patch: the write stall check, and the halt check after
/// a memtable overflows, read the L0 run count kept aside). The batch
/// overflows the partition's small memtable, so both checks run. The lock
/// held here stands for such a sync; the timeout only turns a commit that
/// waits for it into a failure instead of a hang.
#[test]
fn a_commit_does_not_wait_for_the_level_lock() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let keyspace = fjall::Config::new(dir.path()).open().expect("the store");
    let partition = keyspace
        .open_partition(
            "p",
            fjall::PartitionCreateOptions::default().max_memtable_size(1_024),
        )
        .expect("a partition");
    let fjall::AnyTree::Standard(tree) = &partition.tree else {
        panic!("a standard tree");
    };
    let levels = tree.levels.write().expect("the level lock");
    let (committed, was_committed) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut batch = keyspace.batch();
            batch.insert(&partition, "key", vec![7u8; 4_096]);
            let result = batch.commit();
            committed.send(result.is_ok()).expect("the test waits");
        });
        let answer = was_committed.recv_timeout(Duration::from_secs(30));
        drop(levels);
        assert_eq!(answer, Ok(true), "the commit waited for the level lock");
    });
}

/// Writes keys `a` and `z` and flushes them: every such run covers the
/// same keys, so the runs overlap and each counts (an L0 of disjoint runs
/// counts as one).
fn flush_overlapping_run(partition: &fjall::PartitionHandle, n: u8) {
    partition.insert("a", [n]).expect("insert");
    partition.insert("z", [n]).expect("insert");
    partition.rotate_memtable_and_wait().expect("a flush");
}

/// The tree's own L0 run count, under its level lock.
fn l0_runs(partition: &fjall::PartitionHandle) -> usize {
    use fjall::AbstractTree;
    partition.tree.l0_run_count()
}

/// The L0 run count kept aside for the write path follows the tree's
/// through flushes and a compaction, so writes still stall and halt when L0
/// piles up.
#[test]
fn the_l0_run_count_kept_follows_flushes_and_compactions() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // No compaction thread: what a background compaction would refresh
    // cannot hide what a flush or the major compaction failed to.
    let store = || fjall::Config::new(dir.path()).compaction_workers(0);
    let keyspace = store().open().expect("the store");
    let partition = keyspace
        .open_partition("p", fjall::PartitionCreateOptions::default())
        .expect("a partition");
    let actual = || l0_runs(&partition);
    for n in 0..3 {
        flush_overlapping_run(&partition, n);
    }
    assert_eq!(actual(), 3, "the flushes made three L0 runs");
    assert_eq!(partition.l0_run_count_kept(), actual(), "after the flushes");
    partition.major_compact().expect("a compaction");
    assert_eq!(
        partition.l0_run_count_kept(),
        actual(),
        "after the compaction"
    );
    assert_eq!(
        actual(),
        1,
        "the compaction emptied L0 (an empty L0 counts as one)"
    );
    for n in 3..5 {
        flush_overlapping_run(&partition, n);
    }
    drop(partition);
    drop(keyspace);
    let keyspace = store().open().expect("the store again");
    let partition = keyspace
        .open_partition("p", fjall::PartitionCreateOptions::default())
        .expect("the partition again");
    let actual = l0_runs(&partition);
    assert_eq!(actual, 2, "two L0 runs on disk");
    assert_eq!(partition.l0_run_count_kept(), actual, "after an open");
}

/// A background compaction refreshes the L0 run count kept aside: the
/// write halt waits for that, not for the tree's level lock. The loop
/// waits for the condition under test; the deadline only turns a count
/// never refreshed into a failure.
#[test]
fn a_background_compaction_refreshes_the_l0_run_count_kept() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let keyspace = fjall::Config::new(dir.path())
        .compaction_workers(1)
        .open()
        .expect("the store");
    let partition = keyspace
        .open_partition("p", fjall::PartitionCreateOptions::default())
        .expect("a partition");
    // Four overlapping runs: the leveled strategy's threshold to merge L0.
    for n in 0..4 {
        flush_overlapping_run(&partition, n);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while partition.l0_run_count_kept() != 1 && std::time::Instant::now() < deadline {
        std::thread::yield_now();
    }
    let actual = l0_runs(&partition);
    assert_eq!(actual, 1, "the compaction merged L0");
    assert_eq!(partition.l0_run_count_kept(), 1, "the count kept after it");
}

/// The two partitions that take messages hold more than fjall's default
/// 16 MiB memtable before they flush (`MESSAGES_MEMTABLE_BYTES`): every
/// flush of many logs' messages costs a rewrite of the level below it.
/// Each takes 24 MiB here with neither a sealed memtable nor a table.
#[test]
fn the_message_partitions_keep_more_than_the_default_memtable() {
    use fjall::AbstractTree;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let history = open(dir.path(), Fsync::Never);
    let value = vec![7_u8; 256 << 10];
    for (name, partition) in [
        ("events", &history.partitions.events),
        ("stream_events", &history.partitions.stream_events),
    ] {
        for n in 0_u32..96 {
            partition
                .insert(n.to_be_bytes(), value.as_slice())
                .expect("an insert");
        }
        let tree = &partition.tree;
        assert_eq!(
            (tree.sealed_memtable_count(), tree.segment_count()),
            (0, 0),
            "{name}: 24 MiB were flushed"
        );
        assert!(
            tree.active_memtable_size() >= 24 << 20,
            "{name}: the memtable holds {} bytes",
            tree.active_memtable_size()
        );
    }
}
