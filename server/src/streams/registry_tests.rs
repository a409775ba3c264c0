//! The registry under concurrent clients: a fork releases its source once
//! however many removals race, a fork copies exactly what it claims while
//! its source evicts, and the structure lock is not held while a create
//! builds its stream; with a journal, readers are told of a stream and
//! of its close or its removal only once durable, and a durable close
//! wakes them.

use super::{CreateRefusal, CreateRequest, Created, Streams};
use crate::admission::Bounded;
use crate::streams::feed::{Feed, FeedEnd, LocalFeed, Page};
use crate::streams::journal::Journal;
use crate::streams::rules::{AppendRequest, Appended};
use crate::streams::settings::Settings;
use crate::streams::stream::Changes;
use crate::streams::stream::Stream;
use crate::streams::writes::StreamWrites;
use futures_util::FutureExt;
use gapless::Config;
use gapless_history::DiskHistory;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

fn registry(ring: Config) -> Arc<Streams> {
    Arc::new(Streams::new(
        ring,
        Duration::from_secs(600),
        Bounded::new(u64::MAX),
        u64::MAX,
    ))
}

pub(super) fn settings(forked_from: Option<&str>, ttl_secs: Option<u64>) -> Settings {
    Settings {
        content_type: "text/plain".to_owned(),
        ttl_secs,
        expires_at: None,
        forked_from: forked_from.map(str::to_owned),
        fork_offset: None,
        fork_sub_offset: 0,
    }
}

fn create(streams: &Streams, path: &str, settings: Settings) -> Result<Created, CreateRefusal> {
    streams.create(CreateRequest {
        path: path.to_owned(),
        settings,
        closed: false,
        body: bytes::Bytes::new(),
        client: None,
        publish_key: false,
    })
}

fn new_stream(created: Result<Created, CreateRefusal>) -> Arc<Stream> {
    match created {
        Ok(Created::New(stream)) => stream,
        Ok(Created::Existing(_)) => panic!("found an existing stream"),
        Err(refused) => panic!("create refused: {refused:?}"),
    }
}

/// Sets its flag when dropped: a background appender stops even when the
/// test's assertion panics (the scope would otherwise wait on it).
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

fn append(stream: &Stream, body: &[u8], budget: &Arc<Bounded>) {
    stream
        .append_now(body, &AppendRequest::default(), budget)
        .expect("append");
}

/// Eight threads delete one fork at once, 200 times: exactly one deletes
/// it, and the source's fork count goes back to 0 (never wraps, never
/// goes negative), so the source's own delete is a real one.
///
/// Fails when [`Stream::end_if`] does not refuse a stream already gone
/// (each racing remover then releases the source: the count wraps and the
/// source's delete only soft-deletes it).
#[test]
fn racing_deletes_of_a_fork_release_its_source_once() {
    const RACERS: usize = 8;
    let streams = registry(Config::default().events(64).bytes(64 << 10));
    for round in 0..200 {
        let source = new_stream(create(&streams, "source", settings(None, None)));
        new_stream(create(&streams, "fork", settings(Some("source"), None)));
        assert_eq!(source.forks.load(Ordering::Acquire), 1);
        let barrier = Arc::new(Barrier::new(RACERS));
        let deleted: Vec<Option<bool>> = std::thread::scope(|scope| {
            let racers: Vec<_> = (0..RACERS)
                .map(|_| {
                    let barrier = Arc::clone(&barrier);
                    let streams = Arc::clone(&streams);
                    scope.spawn(move || {
                        barrier.wait();
                        streams.delete("fork")
                    })
                })
                .collect();
            racers
                .into_iter()
                .map(|racer| racer.join().expect("a racer panicked"))
                .collect()
        });
        let winners = deleted.iter().filter(|d| **d == Some(true)).count();
        assert_eq!(winners, 1, "round {round}: {deleted:?}");
        assert_eq!(source.forks.load(Ordering::Acquire), 0, "round {round}");
        assert_eq!(streams.delete("source"), Some(true), "round {round}");
        assert!(
            source.gone.load(Ordering::Acquire) && !source.soft_deleted.load(Ordering::Acquire),
            "round {round}: the source was only soft-deleted"
        );
        assert_eq!(streams.len(), 0, "round {round}");
    }
}

/// A fork whose TTL has passed is removed by readers (`get`) and the
/// sweep at once, 200 times: its source is released once, and a source
/// deleted while the fork lived goes with it.
///
/// Fails when the expiry is not checked again under the stream's writer
/// lock and the removal's `gone` check ([`Stream::end_if`]): every racer
/// that saw it expired releases the source.
#[test]
fn racing_expiries_of_a_fork_release_its_source_once() {
    const RACERS: usize = 8;
    let streams = registry(Config::default().events(64).bytes(64 << 10));
    for round in 0..200 {
        let source = new_stream(create(&streams, "source", settings(None, None)));
        // A TTL of 0 s: expired as soon as it exists.
        let fork = new_stream(create(&streams, "fork", settings(Some("source"), Some(0))));
        // Soft-deleted while the fork lives: the fork's removal purges it.
        assert_eq!(streams.delete("source"), Some(true));
        assert!(source.soft_deleted.load(Ordering::Acquire));
        let barrier = Arc::new(Barrier::new(RACERS));
        std::thread::scope(|scope| {
            for racer in 0..RACERS {
                let barrier = Arc::clone(&barrier);
                let streams = Arc::clone(&streams);
                scope.spawn(move || {
                    barrier.wait();
                    match racer % 2 {
                        0 => drop(streams.get("fork")),
                        _ => drop(streams.sweep()),
                    }
                });
            }
        });
        assert!(fork.gone.load(Ordering::Acquire), "round {round}");
        assert_eq!(source.forks.load(Ordering::Acquire), 0, "round {round}");
        assert!(source.gone.load(Ordering::Acquire), "round {round}");
        assert_eq!(streams.len(), 0, "round {round}");
    }
}

/// A source whose path was freed and taken by a new stream: the old
/// fork's removal releases the stream it counted itself on, never the
/// new one at the same path.
///
/// Fails when a removal looks its source up by path.
#[test]
fn a_fork_releases_its_own_source_not_a_later_stream_at_its_path() {
    let streams = registry(Config::default().events(64).bytes(64 << 10));
    let old = new_stream(create(&streams, "source", settings(None, None)));
    new_stream(create(&streams, "fork", settings(Some("source"), None)));
    assert_eq!(streams.delete("source"), Some(true), "soft-deleted");
    // Its last fork goes: the old source is purged, the path is free.
    assert_eq!(streams.delete("fork"), Some(true));
    assert!(old.gone.load(Ordering::Acquire));
    let new = new_stream(create(&streams, "source", settings(None, None)));
    let second = new_stream(create(&streams, "fork", settings(Some("source"), None)));
    assert!(Arc::ptr_eq(second.source.as_ref().expect("a fork"), &new));
    assert_eq!(new.forks.load(Ordering::Acquire), 1);
    assert_eq!(streams.delete("fork"), Some(true));
    assert_eq!(new.forks.load(Ordering::Acquire), 0);
    assert_eq!(streams.delete("source"), Some(true));
    assert!(new.gone.load(Ordering::Acquire));
}

/// Forks made while an appender keeps its source evicting (1,024 events
/// retained, copied in pages): every fork is made (no spurious refusal), and holds exactly
/// the messages its numbering claims: each retained message at seq `n`
/// is the source's message `n`.
///
/// Fails when the fork's copy maps a gap met mid-copy to a refusal (the
/// `400` the review found), or keeps copying from a stale start.
#[test]
fn a_fork_of_an_evicting_source_copies_exactly_what_it_claims() {
    let streams = registry(Config::default().events(1024).bytes(1 << 20));
    let budget = Arc::clone(streams.budget());
    let source = new_stream(create(&streams, "source", settings(None, None)));
    // Seq `n` carries `n` as its text.
    append(&source, b"1", &budget);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut n = 2u64;
            while !stop.load(Ordering::Acquire) {
                append(&source, n.to_string().as_bytes(), &budget);
                n += 1;
            }
        });
        let _stop = StopOnDrop(&stop);
        for round in 0..300 {
            let path = format!("fork-{round}");
            let fork = new_stream(create(&streams, &path, settings(Some("source"), None)));
            let ring = fork.ring();
            let (first, published) = (ring.first_retained(), ring.published());
            assert!(published > 0, "round {round}: the fork point");
            let copied = ring
                .replay_range(first - 1, published)
                .expect("a new fork's ring holds what it claims");
            assert_eq!(copied.len() as u64, published + 1 - first, "round {round}");
            for event in copied {
                assert_eq!(
                    event.payload,
                    event.seq.to_string().as_bytes(),
                    "round {round}: the fork's seq {} holds another message",
                    event.seq
                );
            }
            assert_eq!(streams.delete(&path), Some(true));
        }
    });
}

/// A create builds its stream (ring, copy, parse) without the registry's
/// structure lock: while the lock is held elsewhere, its ring is charged
/// to the budget; the insertion waits for the lock.
///
/// Fails when `create` takes the lock before building (the budget never
/// moves while the test holds it).
#[test]
fn a_create_builds_its_stream_outside_the_structure_lock() {
    let streams = registry(Config::default().events(64).bytes(64 << 10));
    let held_before = streams.budget().held();
    let structure = streams.lock();
    std::thread::scope(|scope| {
        let creator = scope.spawn(|| create(&streams, "s", settings(None, None)));
        let deadline = Instant::now() + Duration::from_secs(30);
        while streams.budget().held() == held_before {
            assert!(
                Instant::now() < deadline,
                "the create built nothing while the structure lock was held"
            );
            std::thread::yield_now();
        }
        assert_eq!(streams.len(), 0, "inserted without the lock");
        drop(structure);
        new_stream(creator.join().expect("the creator panicked"));
    });
    assert_eq!(streams.len(), 1);
}

/// A chain of forks, each after one message of its own: the fork that
/// would stack more than [`Numbering::MAX_LINEAGE`] generations is
/// refused, and every offset of the deepest fork still names its own
/// message's generation (the lineage's binary search).
///
/// Fails without the depth check (the 65th fork is made).
#[test]
fn a_fork_chain_is_bounded_in_depth() {
    use crate::streams::numbering::Numbering;
    let streams = registry(Config::default().events(256).bytes(64 << 10));
    let budget = Arc::clone(streams.budget());
    let mut parent = "s0".to_owned();
    let mut stream = new_stream(create(&streams, &parent, settings(None, None)));
    let mut depth = 0;
    let refused = loop {
        append(&stream, format!("{depth}").as_bytes(), &budget);
        let path = format!("s{}", depth + 1);
        match create(&streams, &path, settings(Some(&parent), None)) {
            Ok(Created::New(fork)) => {
                depth += 1;
                stream = fork;
                parent = path;
            }
            Ok(Created::Existing(_)) => panic!("a new path"),
            Err(refused) => break refused,
        }
    };
    assert!(matches!(refused, CreateRefusal::ForkTooDeep), "{refused:?}");
    assert_eq!(depth, Numbering::MAX_LINEAGE, "forks made before the cap");
    let generations: Vec<u64> = (1..=depth as u64 + 1)
        .map(|seq| stream.offset_of(seq).generation)
        .collect();
    let mut sorted = generations.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), generations.len(), "one generation per level");
}

/// Pages read while an appender evicts under them: a page either holds
/// consecutive messages right after the cursor asked for, or is the `410`
/// of that very cursor, never of an offset past it.
///
/// Fails when a gap met after a page began discards what it gathered and
/// names the offset it had reached.
#[test]
fn a_page_cut_by_retention_serves_what_it_gathered() {
    use crate::streams::numbering::ReadRefusal;
    let streams = registry(Config::default().events(1024).bytes(1 << 20));
    let budget = Arc::clone(streams.budget());
    let stream = new_stream(create(&streams, "s", settings(None, None)));
    for n in 1..=1024u64 {
        append(&stream, n.to_string().as_bytes(), &budget);
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut n = 1025u64;
            while !stop.load(Ordering::Acquire) {
                append(&stream, n.to_string().as_bytes(), &budget);
                n += 1;
            }
        });
        let _stop = StopOnDrop(&stop);
        for _ in 0..2000 {
            let cursor = stream.ring().first_retained().saturating_sub(1);
            match stream.read_after(cursor, usize::MAX) {
                Ok(chunk) => {
                    for (at, payload) in chunk.payloads.iter().enumerate() {
                        let seq = cursor + 1 + at as u64;
                        assert_eq!(payload, seq.to_string().as_bytes());
                    }
                }
                Err(ReadRefusal::Gap { offset, .. }) => {
                    assert_eq!(offset, stream.offset_of(cursor), "a 410 past the cursor");
                }
                Err(other) => panic!("{other:?}"),
            }
        }
    });
}

/// A registry journaling to a disk history in `dir` (`--data-dir`), and
/// the history (to hold its commits).
pub(super) fn journaled_registry(dir: &std::path::Path) -> (Arc<Streams>, Arc<DiskHistory>) {
    journaled_registry_limited(dir, u64::MAX, Duration::from_secs(600))
}

/// [`journaled_registry`], each client's share of the memory at most
/// `client_share` bytes, a stream freed once idle for `idle`.
pub(super) fn journaled_registry_limited(
    dir: &std::path::Path,
    client_share: u64,
    idle: Duration,
) -> (Arc<Streams>, Arc<DiskHistory>) {
    journaled_registry_syncing(dir, client_share, idle, gapless_history::Fsync::Always)
}

/// [`journaled_registry_limited`], acknowledging as `fsync` says.
pub(super) fn journaled_registry_syncing(
    dir: &std::path::Path,
    client_share: u64,
    idle: Duration,
    fsync: gapless_history::Fsync,
) -> (Arc<Streams>, Arc<DiskHistory>) {
    let config = gapless_history::HistoryConfig {
        url: String::new(),
        cluster: false,
        timeout: Duration::from_secs(5),
        retention: 1024,
        retention_bytes: 1 << 20,
        idle: Duration::from_secs(600),
        ca_file: None,
    };
    let disk = Arc::new(
        DiskHistory::open(dir, config, fsync, gapless_history::DiskLimits::default())
            .expect("the disk history"),
    );
    let journal = Arc::new(Journal::new(Arc::clone(&disk)));
    let streams = Streams::new(
        Config::default().events(64).bytes(64 << 10),
        idle,
        Bounded::new(u64::MAX),
        client_share,
    )
    .with_journal(journal);
    (Arc::new(streams), disk)
}

/// [`journaled_registry`] holding the stream `/s` (one message), created.
pub(super) async fn journaled_stream(
    dir: &std::path::Path,
) -> (Arc<Streams>, Arc<DiskHistory>, Arc<Stream>) {
    let (streams, disk) = journaled_registry(dir);
    StreamWrites::create(&*streams, create_request("/s"))
        .await
        .expect("created");
    let stream = streams.get("/s").expect("the stream");
    (streams, disk, stream)
}

pub(super) fn create_request(path: &str) -> CreateRequest {
    CreateRequest {
        path: path.to_owned(),
        settings: settings(None, None),
        closed: false,
        body: bytes::Bytes::from_static(b"a"),
        client: None,
        publish_key: false,
    }
}

pub(super) const CLOSE: AppendRequest<'static> = AppendRequest {
    stream_seq: None,
    producer: None,
    close: true,
};

#[tokio::test]
async fn a_close_without_a_body_wakes_a_reader_waiting_at_the_tail_once_durable() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (streams, _disk) = journaled_registry(dir.path());
    let created = StreamWrites::create(&*streams, create_request("/s"))
        .await
        .expect("created");
    assert!(created.new);
    let stream = streams.get("/s").expect("the stream");
    // A reader at the tail: it has seen everything, and waits.
    let mut changes = Changes::of(Arc::clone(&stream));
    changes.mark_seen();
    let mut waiting = Box::pin(changes.wait(Duration::from_secs(3600)));
    assert!(
        (&mut waiting).now_or_never().is_none(),
        "nothing changed yet"
    );
    let appended = StreamWrites::append(&*streams, "/s", b"", &CLOSE, |_: &_| Ok(()))
        .await
        .expect("closed");
    assert!(matches!(appended, Appended::Done { closed: true, .. }));
    // The close is acknowledged, so durable: the reader must have been
    // woken (it adds no message, so the durable seq did not move).
    assert_eq!(
        waiting.now_or_never(),
        Some(true),
        "the reader waiting at the tail was not woken by the durable close"
    );
}

#[tokio::test]
async fn readers_are_told_of_a_close_only_once_it_is_durable() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (streams, disk, stream) = journaled_stream(dir.path()).await;
    let journal = streams.journal();
    let held = disk.hold_commits();
    let mut closing = Box::pin(StreamWrites::append(
        &*streams,
        "/s",
        b"",
        &CLOSE,
        |_: &_| Ok(()),
    ));
    assert!(
        (&mut closing).now_or_never().is_none(),
        "the close waits for its commit"
    );
    assert!(stream.is_closed(), "the close is applied in memory");
    // Queued, not durable: a reader (HEAD, a page) is not told.
    assert!(!stream.closed_for_readers());
    let mut told = Box::pin(stream.settled_for_readers(journal));
    assert!(
        (&mut told).now_or_never().is_none(),
        "a reader was answered about a close that is not durable"
    );
    // A live reader's pages (long-poll, SSE, catch-up) wait the same way.
    let mut feed = LocalFeed::new(Arc::clone(&stream), Arc::clone(&streams));
    let mut catching_up = LocalFeed::new(Arc::clone(&stream), Arc::clone(&streams));
    let mut page = Box::pin(feed.read(1));
    let mut catch_up = Box::pin(catching_up.read_catch_up(1));
    assert!(
        (&mut page).now_or_never().is_none(),
        "a page said closed before the close was durable"
    );
    assert!(
        (&mut catch_up).now_or_never().is_none(),
        "a catch-up page said closed before the close was durable"
    );
    drop(held);
    assert!(told.await, "durable, the close is told");
    let closed = |page: Result<Page, FeedEnd>| match page {
        Ok(page) => page.closed,
        Err(_) => panic!("the feed ended"),
    };
    assert!(closed(page.await), "durable, a page says closed");
    assert!(
        closed(catch_up.await),
        "durable, a catch-up page says closed"
    );
    closing.await.expect("the close acknowledged");
    assert!(stream.closed_for_readers());
}

#[tokio::test]
async fn a_stream_is_served_only_once_its_creation_is_durable() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (streams, disk) = journaled_registry(dir.path());
    let held = disk.hold_commits();
    let mut creating = Box::pin(StreamWrites::create(&*streams, create_request("/s")));
    assert!(
        (&mut creating).now_or_never().is_none(),
        "the create waits for its commit"
    );
    // Found by readers (a create of the same path must find it), but its
    // creation is not durable: a reader waits.
    let stream = streams.get("/s").expect("the stream is in the registry");
    let mut served = Box::pin(stream.settled_for_readers(streams.journal()));
    assert!(
        (&mut served).now_or_never().is_none(),
        "a reader was served a stream whose creation is not durable"
    );
    drop(held);
    assert!(!served.await, "durable, and open");
    assert!(creating.await.expect("created").new);
}

#[tokio::test]
async fn readers_are_told_a_stream_is_gone_only_once_its_removal_is_durable() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (streams, disk, stream) = journaled_stream(dir.path()).await;
    let mut feed = LocalFeed::new(Arc::clone(&stream), Arc::clone(&streams));
    let held = disk.hold_commits();
    let mut deleting = Box::pin(StreamWrites::delete(&*streams, "/s", |_: &_| Ok(())));
    assert!(
        (&mut deleting).now_or_never().is_none(),
        "the deletion waits for its commit"
    );
    assert!(
        streams.get("/s").is_none(),
        "out of the registry at once (a create of the path makes a new one)"
    );
    // Not durable: a restart would bring the stream back, so no reader
    // is told it is gone yet, neither a new one nor a live one.
    let mut looked_up = Box::pin(streams.get_for_readers("/s"));
    assert!(
        (&mut looked_up).now_or_never().is_none(),
        "a reader was told the stream is gone before its removal was durable"
    );
    let mut page = Box::pin(feed.read(1));
    assert!(
        (&mut page).now_or_never().is_none(),
        "a live reader was ended before the removal was durable"
    );
    drop(held);
    assert!(looked_up.await.is_none(), "durable: gone");
    assert!(matches!(page.await, Err(FeedEnd::Gone)), "durable: ended");
    assert_eq!(deleting.await.expect("deleted"), Some(true));
    // Known durable now: a reader is answered at once.
    assert!(streams.get_for_readers("/s").now_or_never().is_some());
}

#[tokio::test]
async fn a_message_whose_writer_went_away_is_shown_once_durable() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (streams, disk, stream) = journaled_stream(dir.path()).await;
    let before = stream.tail_offset();
    let mut changes = Changes::of(Arc::clone(&stream));
    changes.mark_seen();
    let mut waiting = Box::pin(changes.wait(Duration::from_secs(3600)));
    assert!((&mut waiting).now_or_never().is_none(), "nothing yet");
    let request = AppendRequest::default();
    let held = disk.hold_commits();
    let mut appending = Box::pin(StreamWrites::append(
        &*streams,
        "/s",
        b"m",
        &request,
        |_: &_| Ok(()),
    ));
    assert!(
        (&mut appending).now_or_never().is_none(),
        "the append waits for its commit"
    );
    // Its client went away: nobody awaits the answer.
    drop(appending);
    drop(held);
    // Queued after the append and showing nothing itself: answered, the
    // append is durable.
    journal_settled(&streams).await;
    assert_ne!(
        stream.tail_offset(),
        before,
        "a durable message was not shown because its writer went away"
    );
    assert_eq!(
        waiting.now_or_never(),
        Some(true),
        "the reader at the tail was not woken by the durable message"
    );
}

#[tokio::test]
async fn a_removal_nobody_awaits_is_known_durable_once_committed() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (streams, disk, _stream) = journaled_stream(dir.path()).await;
    let held = disk.hold_commits();
    let mut deleting = Box::pin(StreamWrites::delete(&*streams, "/s", |_: &_| Ok(())));
    assert!(
        (&mut deleting).now_or_never().is_none(),
        "the deletion waits for its commit"
    );
    // Its client went away (as nobody awaits an expiry).
    drop(deleting);
    drop(held);
    journal_settled(&streams).await;
    // Durable and known so: with the committer held, a reader that had
    // to queue a barrier of its own would wait.
    let _held = disk.hold_commits();
    assert!(
        matches!(streams.get_for_readers("/s").now_or_never(), Some(None)),
        "a reader waited for a barrier behind a removal already durable"
    );
}

/// Waits until everything queued to `streams`' journal so far is durable.
pub(super) async fn journal_settled(streams: &Streams) {
    streams
        .journal()
        .expect("a journal")
        .submit(Vec::new())
        .expect("queued")
        .durable()
        .await
        .expect("durable");
}
