//! The [`History`] contract, run against both implementations: the
//! in-memory fake and a real `redis-server`, with the same calls and the
//! same expected answers, so the fake that unit tests of the crates over
//! the history rely on follows the scripts' rules.

use crate::memory::MemoryHistory;
use crate::test_support::{Persistence, RedisServer};
use crate::{
    counter, Change, DiskHistory, DiskLimits, Follower, Fsync, Guard, History, HistoryConfig,
    HistoryError, Known, LogId, Meta, MetaUpdate, RedisHistory,
};
use bytes::Bytes;
use std::time::Duration;
use tokio::time::Instant;

/// Far beyond any call here: a deadline that only a hang reaches.
const DEADLINE: Duration = Duration::from_secs(10);

fn meta(pairs: &[(&str, &str)]) -> Meta {
    pairs
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect()
}

fn payloads(range: std::ops::RangeInclusive<u32>) -> Vec<Bytes> {
    range.map(|n| Bytes::from(format!("event {n}"))).collect()
}

async fn append<H: History>(
    history: &H,
    id: &LogId,
    known: Known,
    batch: &[Bytes],
) -> Result<(u64, u64), HistoryError> {
    history
        .append(id, known, batch, Instant::now() + DEADLINE)
        .await
}

/// Everything a caller of the history relies on, retention 4 events.
async fn contract<H: History>(history: &H) {
    let id = LogId::random().expect("the OS random source");
    let other = LogId::random().expect("the OS random source");

    // Create: once; the caller's meta comes back as given.
    assert!(history
        .create(&id, 7, &meta(&[("pk", "k1")]))
        .await
        .expect("create"));
    assert!(!history
        .create(&id, 9, &Meta::new())
        .await
        .expect("create again"));
    let snapshot = history
        .after(&id, 0, 1 << 20)
        .await
        .expect("read")
        .expect("the log");
    assert_eq!(
        (snapshot.epoch, snapshot.published, snapshot.first_retained),
        (7, 0, 1)
    );
    assert!(snapshot.events.is_empty());
    assert_eq!(snapshot.meta, meta(&[("pk", "k1")]));
    assert!(history
        .after(&other, 0, 1 << 20)
        .await
        .expect("read")
        .is_none());

    // Follow, then append: the history assigns the seqs and announces
    // the new last one.
    let mut follower = history.follow(&id);
    let known = Known {
        epoch: 7,
        published: 0,
    };
    assert_eq!(
        append(history, &id, known, &payloads(1..=3))
            .await
            .expect("append"),
        (7, 1)
    );
    // As a follower does: an announcement of seq 3, or a resync (some
    // may have been missed: the subscription began after the append)
    // followed by a read that finds it.
    let heard = tokio::time::timeout(DEADLINE, async {
        loop {
            match follower.changed().await {
                Some(Change::Published(last)) if last >= 3 => return true,
                Some(Change::Resync { .. }) => {
                    let read = history.after(&id, 2, 1 << 20).await.expect("read");
                    if read.is_some_and(|snapshot| snapshot.published >= 3) {
                        return true;
                    }
                }
                Some(Change::Published(_)) => {}
                None => return false,
            }
        }
    })
    .await
    .expect("the append heard of within the deadline");
    assert!(heard, "the follower ended before hearing of the append");
    let known = Known {
        epoch: 7,
        published: 3,
    };
    assert_eq!(
        append(history, &id, known, &payloads(4..=6))
            .await
            .expect("append"),
        (7, 4)
    );

    // Retention 4: seqs 3..=6 are kept; a read after 0 starts at 3 (the
    // caller sees the gap), one after 4 gets 5 and 6.
    let snapshot = history
        .after(&id, 0, 1 << 20)
        .await
        .expect("read")
        .expect("the log");
    assert_eq!((snapshot.published, snapshot.first_retained), (6, 3));
    let seqs: Vec<u64> = snapshot.events.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs, [3, 4, 5, 6]);
    assert_eq!(snapshot.events[0].1, Bytes::from("event 3"));
    assert!(matches!(
        gapless::Coverage::of_retained(0, snapshot.first_retained, snapshot.published),
        gapless::Coverage::Gap(gap) if gap.evicted == 2
    ));
    let page = history
        .after(&id, 4, 1)
        .await
        .expect("read")
        .expect("the log");
    assert_eq!(
        page.events,
        [(5, Bytes::from("event 5"))],
        "one event at least, paged by bytes"
    );
    // After the last possible seq: the meta alone, no event.
    let meta_only = history
        .after(&id, u64::MAX, 0)
        .await
        .expect("read")
        .expect("the log");
    assert!(meta_only.events.is_empty());
    assert_eq!((meta_only.published, meta_only.first_retained), (6, 3));
    assert_eq!(meta_only.meta, meta(&[("pk", "k1")]));
    let loaded = history.load(&id).await.expect("load").expect("the log");
    assert_eq!(loaded.events.len(), 4);

    // Meta: guards refuse without writing; counters increment and are
    // raised, never lowered.
    let bump = MetaUpdate {
        increment: Some("epoch/attach".into()),
        ..MetaUpdate::default()
    };
    let updated = history.update_meta(&id, &bump).await.expect("update");
    assert!(updated.applied);
    assert_eq!(updated.epoch, 7);
    assert_eq!(
        counter(&updated.meta, "epoch/attach").expect("a counter"),
        1
    );
    let raise = |acked: u64, at_most: u64, epoch: u64| MetaUpdate {
        epoch: Some(epoch),
        at_most: Some(("epoch/attach".into(), at_most)),
        increment: None,
        raise: vec![("epoch/acked".into(), acked)],
        fields: None,
    };
    let updated = history
        .update_meta(&id, &raise(5, 1, 7))
        .await
        .expect("update");
    assert!(updated.applied);
    assert_eq!(counter(&updated.meta, "epoch/acked").expect("a counter"), 5);
    let lowered = history
        .update_meta(&id, &raise(2, 1, 7))
        .await
        .expect("update");
    assert!(lowered.applied);
    assert_eq!(
        counter(&lowered.meta, "epoch/acked").expect("a counter"),
        5,
        "never lowered"
    );
    let superseded = history
        .update_meta(&id, &raise(6, 0, 7))
        .await
        .expect("update");
    assert!(!superseded.applied, "attach 1 is above 0: refused");
    assert_eq!(
        counter(&superseded.meta, "epoch/acked").expect("a counter"),
        5
    );
    let other_epoch = history
        .update_meta(&id, &raise(6, 1, 8))
        .await
        .expect("update");
    assert!(!other_epoch.applied, "another epoch: refused");
    assert_eq!(other_epoch.meta.get("pk").map(String::as_str), Some("k1"));
    assert!(matches!(
        history.update_meta(&other, &bump).await,
        Err(HistoryError::Gone)
    ));

    // Tokens: taken once.
    let ttl = Duration::from_secs(60);
    history.put_token(&id, "t1", "7-3", ttl).await.expect("put");
    assert!(history.has_token(&id, "t1").await.expect("has"));
    assert!(!history.has_token(&id, "t2").await.expect("has"));
    assert_eq!(
        history
            .take_token(&id, "t1")
            .await
            .expect("take")
            .as_deref(),
        Some("7-3")
    );
    assert_eq!(
        history.take_token(&id, "t1").await.expect("take"),
        None,
        "used once"
    );
    assert!(!history.has_token(&id, "t1").await.expect("has"));

    // A caller behind the ring (the history lost events it had seen)
    // continues the log under a new epoch, from seq 1, its per-epoch meta
    // cleared.
    let ahead = Known {
        epoch: 7,
        published: 9,
    };
    let (epoch, first) = append(history, &id, ahead, &payloads(1..=1))
        .await
        .expect("append");
    assert_ne!(epoch, 7);
    assert_eq!(first, 1);
    let snapshot = history
        .after(&id, 0, 1 << 20)
        .await
        .expect("read")
        .expect("the log");
    assert_eq!(
        (snapshot.epoch, snapshot.published, snapshot.first_retained),
        (epoch, 1, 1)
    );
    assert_eq!(
        snapshot.meta,
        meta(&[("pk", "k1")]),
        "per-epoch meta cleared, the rest kept"
    );

    // A guarded append: written with its fields only if the fields it
    // expects hold; otherwise nothing at all. An empty batch writes the
    // fields alone.
    let now = Known {
        epoch,
        published: 1,
    };
    let set = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect::<Vec<_>>()
    };
    let claim = Guard {
        expect: vec![("p/a".to_owned(), None)],
        set: set(&[("p/a", "0 0")]),
        ..Guard::default()
    };
    assert_eq!(
        history
            .append_guarded(
                &id,
                now,
                &payloads(2..=2),
                &claim,
                Instant::now() + DEADLINE
            )
            .await
            .expect("guarded append"),
        Some((epoch, 2))
    );
    assert_eq!(
        history
            .append_guarded(
                &id,
                now,
                &payloads(3..=3),
                &claim,
                Instant::now() + DEADLINE
            )
            .await
            .expect("guarded append"),
        None,
        "the field is no longer absent: refused"
    );
    let next = Guard {
        expect: vec![("p/a".to_owned(), Some("0 0".to_owned()))],
        set: set(&[("p/a", "0 1"), ("closed", "1")]),
        ..Guard::default()
    };
    let two = Known {
        epoch,
        published: 2,
    };
    assert_eq!(
        history
            .append_guarded(&id, two, &[], &next, Instant::now() + DEADLINE)
            .await
            .expect("a guard alone"),
        Some((epoch, 3)),
        "an empty batch answers the next seq"
    );
    let snapshot = history
        .after(&id, 0, 1 << 20)
        .await
        .expect("read")
        .expect("the log");
    assert_eq!(snapshot.published, 2, "the refused batch wrote no event");
    assert_eq!(
        snapshot.meta,
        meta(&[("pk", "k1"), ("p/a", "0 1"), ("closed", "1")])
    );
    // A log that lost events continues under the epoch the guard names.
    let behind = Known {
        epoch,
        published: 99,
    };
    let chosen = Guard {
        next_epoch: Some(0x5eed),
        ..Guard::default()
    };
    assert_eq!(
        history
            .append_guarded(
                &id,
                behind,
                &payloads(1..=1),
                &chosen,
                Instant::now() + DEADLINE
            )
            .await
            .expect("guarded append"),
        Some((0x5eed, 1))
    );
    let epoch = 0x5eed;

    // Complete keeps it readable; delete removes it.
    assert!(history
        .complete(&id, Duration::from_secs(60))
        .await
        .expect("complete"));
    assert!(history
        .after(&id, 0, 1 << 20)
        .await
        .expect("read")
        .is_some());
    assert!(history.delete(&id).await.expect("delete"));
    assert!(!history.delete(&id).await.expect("delete again"));
    assert!(history
        .after(&id, 0, 1 << 20)
        .await
        .expect("read")
        .is_none());
    assert!(!history
        .complete(&id, Duration::from_secs(1))
        .await
        .expect("complete"));
    assert!(matches!(
        append(
            history,
            &id,
            Known {
                epoch,
                published: 1
            },
            &payloads(2..=2)
        )
        .await,
        Err(HistoryError::Gone)
    ));
}

/// A guard's `unset`: the fields it names are removed with the append
/// (after `set`: one in both ends absent); a guard that does not hold
/// removes nothing.
async fn unset<H: History>(history: &H) {
    let id = LogId::random().expect("the OS random source");
    assert!(history
        .create(
            &id,
            7,
            &meta(&[("keep", "1"), ("p/old", "3 9"), ("claim/a", "1")])
        )
        .await
        .expect("create"));
    let names = |names: &[&str]| names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
    let release = Guard {
        expect: vec![("p/old".to_owned(), Some("3 9".to_owned()))],
        set: vec![
            ("p/new".to_owned(), "0 0".to_owned()),
            ("both".to_owned(), "set".to_owned()),
            ("claim/a".to_owned(), "2".to_owned()),
        ],
        unset: names(&["p/old", "both", "claim/a", "never/there"]),
        ..Guard::default()
    };
    let known = Known {
        epoch: 7,
        published: 0,
    };
    assert_eq!(
        history
            .append_guarded(
                &id,
                known,
                &payloads(1..=2),
                &release,
                Instant::now() + DEADLINE
            )
            .await
            .expect("guarded append"),
        Some((7, 1))
    );
    let snapshot = history
        .after(&id, 0, 1 << 20)
        .await
        .expect("read")
        .expect("the log");
    assert_eq!(snapshot.published, 2);
    assert_eq!(
        snapshot.meta,
        meta(&[("keep", "1"), ("p/new", "0 0")]),
        "the unset fields removed, a field set and unset absent, the others kept"
    );

    // Refused: nothing appended, nothing removed (nor set).
    let refused = Guard {
        expect: vec![("keep".to_owned(), Some("2".to_owned()))],
        set: vec![("p/other".to_owned(), "1 1".to_owned())],
        unset: names(&["keep", "p/new"]),
        ..Guard::default()
    };
    let known = Known {
        epoch: 7,
        published: 2,
    };
    assert_eq!(
        history
            .append_guarded(
                &id,
                known,
                &payloads(3..=3),
                &refused,
                Instant::now() + DEADLINE
            )
            .await
            .expect("guarded append"),
        None
    );
    let snapshot = history
        .after(&id, 0, 1 << 20)
        .await
        .expect("read")
        .expect("the log");
    assert_eq!(snapshot.published, 2);
    assert_eq!(snapshot.meta, meta(&[("keep", "1"), ("p/new", "0 0")]));

    // A guard alone (no events) removes too.
    let alone = Guard {
        unset: names(&["p/new"]),
        ..Guard::default()
    };
    assert_eq!(
        history
            .append_guarded(&id, known, &[], &alone, Instant::now() + DEADLINE)
            .await
            .expect("a guard alone"),
        Some((7, 3))
    );
    let snapshot = history
        .after(&id, 0, 1 << 20)
        .await
        .expect("read")
        .expect("the log");
    assert_eq!(snapshot.meta, meta(&[("keep", "1")]));
}

/// Named meta fields: [`History::after_fields`] and
/// [`MetaUpdate::fields`] answer only the caller fields named that the
/// log has, among 1,000 others; [`History::after`] and an update without
/// names still answer all of them.
async fn named_fields<H: History>(history: &H) {
    let id = LogId::random().expect("the OS random source");
    let mut all: Meta = (0..1000)
        .map(|n| (format!("p/{n}"), format!("{n} 0")))
        .collect();
    all.insert("pk".to_owned(), "k1".to_owned());
    assert!(history.create(&id, 7, &all).await.expect("create"));
    let known = Known {
        epoch: 7,
        published: 0,
    };
    append(history, &id, known, &payloads(1..=3))
        .await
        .expect("append");

    let whole = history
        .after(&id, 1, 1 << 20)
        .await
        .expect("read")
        .expect("the log");
    assert_eq!(whole.meta, all, "after: every caller field");
    let named = history
        .after_fields(
            &id,
            1,
            1 << 20,
            &["pk", "p/7", "p/missing", "p/999", "epoch"],
        )
        .await
        .expect("read")
        .expect("the log");
    assert_eq!(
        named.meta,
        meta(&[("pk", "k1"), ("p/7", "7 0"), ("p/999", "999 0")]),
        "exactly the named fields the log has (the history's own `epoch` is no caller field)"
    );
    assert_eq!(
        (
            named.epoch,
            named.published,
            named.first_retained,
            &named.events
        ),
        (
            whole.epoch,
            whole.published,
            whole.first_retained,
            &whole.events
        ),
        "the same read but for the meta"
    );
    assert_eq!(named.events.len(), 2);
    // Many names (read in slices): each named field the log has.
    let many: Vec<String> = (0..600).map(|n| format!("p/{}", 2 * n)).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let named = history
        .after_fields(&id, 3, 1 << 20, &many)
        .await
        .expect("read")
        .expect("the log");
    let even: Meta = all
        .iter()
        .filter(|(name, _)| {
            name.strip_prefix("p/")
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|n| n % 2 == 0)
        })
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    assert_eq!(even.len(), 500);
    assert_eq!(named.meta, even, "the 500 of the 600 names the log has");
    let none = history
        .after_fields(&id, 3, 1 << 20, &[])
        .await
        .expect("read")
        .expect("the log");
    assert!(none.meta.is_empty());
    assert_eq!(none.published, 3);
    let other = LogId::random().expect("the OS random source");
    assert!(history
        .after_fields(&other, 0, 1 << 20, &["pk"])
        .await
        .expect("read")
        .is_none());

    // update_meta: applied or refused, the named fields only.
    let touch = |epoch: u64, fields: Option<&[&str]>| MetaUpdate {
        epoch: Some(epoch),
        raise: vec![("accessed".to_owned(), 5)],
        fields: fields.map(|fields| fields.iter().map(|n| (*n).to_owned()).collect()),
        ..MetaUpdate::default()
    };
    let updated = history
        .update_meta(&id, &touch(7, Some(&["accessed", "p/3", "p/missing"])))
        .await
        .expect("update");
    assert!(updated.applied);
    assert_eq!(updated.meta, meta(&[("accessed", "5"), ("p/3", "3 0")]));
    let refused = history
        .update_meta(&id, &touch(8, Some(&["p/4"])))
        .await
        .expect("update");
    assert!(!refused.applied);
    assert_eq!(refused.meta, meta(&[("p/4", "4 0")]));
    let updated = history
        .update_meta(&id, &touch(7, Some(&many)))
        .await
        .expect("update");
    assert_eq!(updated.meta, even);
    let nothing = history
        .update_meta(&id, &touch(7, Some(&[])))
        .await
        .expect("update");
    assert!(nothing.applied);
    assert!(nothing.meta.is_empty());
    let everything = history
        .update_meta(&id, &touch(7, None))
        .await
        .expect("update");
    all.insert("accessed".to_owned(), "5".to_owned());
    assert_eq!(everything.meta, all, "no names: every caller field");
}

async fn redis_history(redis: &RedisServer) -> RedisHistory {
    RedisHistory::connect(HistoryConfig {
        url: redis.url(),
        cluster: false,
        timeout: Duration::from_secs(5),
        retention: 4,
        retention_bytes: 1 << 20,
        idle: Duration::from_secs(600),
        ca_file: None,
    })
    .await
    .expect("redis-server answers")
}

/// A disk history in a fresh directory (the directory goes with the
/// returned guard, after the history).
fn disk_history() -> (DiskHistory, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = HistoryConfig {
        url: String::new(),
        cluster: false,
        timeout: Duration::from_secs(5),
        retention: 4,
        retention_bytes: 1 << 20,
        idle: Duration::from_secs(600),
        ca_file: None,
    };
    let history = DiskHistory::open(dir.path(), config, Fsync::Always, DiskLimits::default())
        .expect("the disk history opens");
    (history, dir)
}

#[tokio::test]
async fn the_disk_history_keeps_the_contract() {
    let (history, _dir) = disk_history();
    contract(&history).await;
}

#[tokio::test]
async fn the_disk_historys_guard_unsets_fields() {
    let (history, _dir) = disk_history();
    unset(&history).await;
}

#[tokio::test]
async fn the_disk_history_answers_named_fields() {
    let (history, _dir) = disk_history();
    named_fields(&history).await;
}

#[tokio::test]
async fn the_fake_keeps_the_contract() {
    contract(&MemoryHistory::new(4, 1 << 20)).await;
}

#[tokio::test]
async fn redis_keeps_the_contract() {
    let redis = RedisServer::start(Persistence::None);
    contract(&redis_history(&redis).await).await;
}

#[tokio::test]
async fn the_fakes_guard_unsets_fields() {
    unset(&MemoryHistory::new(4, 1 << 20)).await;
}

#[tokio::test]
async fn redis_guard_unsets_fields() {
    let redis = RedisServer::start(Persistence::None);
    unset(&redis_history(&redis).await).await;
}

#[tokio::test]
async fn the_fake_answers_named_fields() {
    named_fields(&MemoryHistory::new(4, 1 << 20)).await;
}

#[tokio::test]
async fn redis_answers_named_fields() {
    let redis = RedisServer::start(Persistence::None);
    named_fields(&redis_history(&redis).await).await;
}

/// A history that takes the provided defaults ([`History::after_fields`],
/// the admission sets), as an implementor that does not override them
/// does: the fake, every other call forwarded.
struct Defaults(MemoryHistory);

impl History for Defaults {
    type Follower = crate::memory::MemoryFollower;

    fn config(&self) -> &HistoryConfig {
        self.0.config()
    }

    async fn create(&self, id: &LogId, epoch: u64, meta: &Meta) -> Result<bool, HistoryError> {
        self.0.create(id, epoch, meta).await
    }

    async fn append_guarded(
        &self,
        id: &LogId,
        known: Known,
        payloads: &[Bytes],
        guard: &Guard,
        deadline: Instant,
    ) -> Result<Option<(u64, u64)>, HistoryError> {
        self.0
            .append_guarded(id, known, payloads, guard, deadline)
            .await
    }

    async fn after(
        &self,
        id: &LogId,
        after: u64,
        max_bytes: usize,
    ) -> Result<Option<crate::Snapshot>, HistoryError> {
        self.0.after(id, after, max_bytes).await
    }

    fn follow(&self, id: &LogId) -> Self::Follower {
        self.0.follow(id)
    }

    async fn complete(&self, id: &LogId, grace: Duration) -> Result<bool, HistoryError> {
        self.0.complete(id, grace).await
    }

    async fn delete(&self, id: &LogId) -> Result<bool, HistoryError> {
        self.0.delete(id).await
    }

    async fn update_meta(
        &self,
        id: &LogId,
        update: &MetaUpdate,
    ) -> Result<crate::Updated, HistoryError> {
        self.0.update_meta(id, update).await
    }

    async fn put_token(
        &self,
        id: &LogId,
        name: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<(), HistoryError> {
        self.0.put_token(id, name, value, ttl).await
    }

    async fn take_token(&self, id: &LogId, name: &str) -> Result<Option<String>, HistoryError> {
        self.0.take_token(id, name).await
    }

    async fn has_token(&self, id: &LogId, name: &str) -> Result<bool, HistoryError> {
        self.0.has_token(id, name).await
    }
}

#[tokio::test]
async fn the_default_after_fields_answers_named_fields() {
    named_fields(&Defaults(MemoryHistory::new(4, 1 << 20))).await;
}

#[path = "contract_tests_admission.rs"]
mod admission;
