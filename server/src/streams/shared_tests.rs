//! Unit tests of `shared.rs` on the history fake.

use super::{field, log_of, SharedCreated, SharedStreams};
use crate::history::memory::MemoryHistory;
use crate::history::{Guard, History, Known};
use crate::streams::registry::CreateRefusal;
use crate::streams::rules::AppendRequest;
use crate::streams::settings::Settings;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

fn settings() -> Settings {
    Settings {
        content_type: "text/plain".to_owned(),
        ttl_secs: None,
        expires_at: None,
        forked_from: None,
        fork_offset: None,
        fork_sub_offset: 0,
    }
}

/// A DELETE marks the stream, then deletes its log: when Redis fails
/// between the two, the next request that finds the mark (and no
/// forks) finishes the removal instead of answering `410` until the
/// keys expire.
#[tokio::test]
async fn a_stream_marked_deleted_whose_log_survived_is_finished_off() {
    let history = Arc::new(MemoryHistory::new(64, 1 << 20));
    let shared = SharedStreams::new(Arc::clone(&history), 1 << 20, Duration::from_secs(5));
    let created = shared
        .create("s", settings(), false, b"one", None, None)
        .await
        .expect("create");
    assert!(matches!(created, SharedCreated::New(_)));
    let log = log_of("s");
    let snapshot = history
        .after(&log, 0, 1 << 20)
        .await
        .expect("read")
        .expect("the log");
    // The mark alone, as a DELETE whose second step failed leaves it.
    let mark = Guard {
        set: vec![(field::DELETED.to_owned(), "1".to_owned())],
        ..Guard::default()
    };
    let known = Known {
        epoch: snapshot.epoch,
        published: snapshot.published,
    };
    history
        .append_guarded(
            &log,
            known,
            &[],
            &mark,
            Instant::now() + Duration::from_secs(5),
        )
        .await
        .expect("mark")
        .expect("the guard holds");
    assert!(shared.look("s").await.expect("look").is_none());
    assert!(
        history
            .after(&log, 0, 1 << 20)
            .await
            .expect("read")
            .is_none(),
        "the log is deleted"
    );
    let again = shared
        .create("s", settings(), false, b"two", None, None)
        .await
        .expect("the path is free again");
    assert!(matches!(again, SharedCreated::New(_)));
}

fn shared(retention: usize) -> (Arc<MemoryHistory>, Arc<SharedStreams<MemoryHistory>>) {
    let history = Arc::new(MemoryHistory::new(retention, 1 << 20));
    let shared = Arc::new(SharedStreams::new(
        Arc::clone(&history),
        1 << 20,
        Duration::from_secs(5),
    ));
    (history, shared)
}

fn fork_of(source: &str) -> Settings {
    Settings {
        content_type: String::new(),
        forked_from: Some(source.to_owned()),
        ..settings()
    }
}

async fn meta(history: &MemoryHistory, path: &str) -> Option<crate::history::Meta> {
    history
        .after(&log_of(path), u64::MAX, 0)
        .await
        .expect("read")
        .map(|snapshot| snapshot.meta)
}

async fn append(shared: &SharedStreams<MemoryHistory>, path: &str, body: &[u8]) {
    shared
        .append(path, body, &AppendRequest::default(), |_| Ok(()))
        .await
        .expect("append");
}

/// Eight tasks delete one fork at once, 100 times: its source's count
/// goes back to 0 and its claim is gone, so the source's own delete is a
/// real one (its log deleted), never a soft one kept forever.
///
/// Fails when the release does not remove the fork's claim in its
/// guarded step, or releases without a claim (`release_source`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_deletes_of_a_fork_release_its_source_once() {
    let (history, shared) = shared(64);
    for round in 0..100 {
        shared
            .create("source", settings(), false, b"one", None, None)
            .await
            .expect("source");
        shared
            .create("fork", fork_of("source"), false, b"", None, None)
            .await
            .expect("fork");
        let racers: Vec<_> = (0..8)
            .map(|_| {
                let shared = Arc::clone(&shared);
                tokio::spawn(async move { shared.delete("fork", |_| Ok(())).await })
            })
            .collect();
        let mut deleted = 0;
        for racer in racers {
            if racer.await.expect("a racer") == Ok(Some(true)) {
                deleted += 1;
            }
        }
        assert!(deleted >= 1, "round {round}");
        let source = meta(&history, "source").await.expect("the source");
        assert_eq!(
            source.get(field::FORKS).map(String::as_str),
            Some("0"),
            "round {round}"
        );
        assert!(
            !source.keys().any(|k| k.starts_with(field::FORK_CLAIM)),
            "round {round}: a claim left"
        );
        assert_eq!(shared.delete("source", |_| Ok(())).await, Ok(Some(true)));
        assert!(
            meta(&history, "source").await.is_none(),
            "round {round}: soft only"
        );
    }
}

/// Forks made while an appender keeps its source trimming (16 events
/// retained): each fork's log holds, at every seq its numbering gives,
/// the source's message of that seq (the payload is its seq), however the
/// source moved during the copy.
///
/// Fails when a copy cut short by a trim keeps its base (the fork's
/// messages then sit at seqs below the source's, and its own appends at
/// or below the fork point).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_a_trimming_source_copies_exactly_what_it_claims() {
    // Every call takes a millisecond: the appender trims the source
    // between the fork's look at it and its copy.
    let history = Arc::new(MemoryHistory::new(16, 1 << 20).with_latency(Duration::from_millis(1)));
    let shared = Arc::new(SharedStreams::new(
        Arc::clone(&history),
        1 << 20,
        Duration::from_secs(5),
    ));
    shared
        .create("source", settings(), false, b"1", None, None)
        .await
        .expect("source");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appender = {
        let shared = Arc::clone(&shared);
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let mut n = 2u64;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                append(&shared, "source", n.to_string().as_bytes()).await;
                n += 1;
            }
        })
    };
    for round in 0..50 {
        let path = format!("fork-{round}");
        shared
            .create(&path, fork_of("source"), false, b"", None, None)
            .await
            .expect("fork");
        let snapshot = history
            .after(&log_of(&path), 0, 1 << 20)
            .await
            .expect("read")
            .expect("the fork");
        let base: u64 = snapshot.meta[field::BASE].parse().expect("a base");
        for (seq, payload) in &snapshot.events {
            assert_eq!(
                payload.as_ref(),
                (seq + base).to_string().as_bytes(),
                "round {round}: the fork's seq {} holds another message",
                seq + base
            );
        }
        let view = shared.look(&path).await.expect("look").expect("the fork");
        let fork_offset = view.settings.fork_offset.expect("a fork offset");
        assert_eq!(
            view.tail(),
            fork_offset,
            "round {round}: tail at the fork point"
        );
        shared.delete(&path, |_| Ok(())).await.expect("delete");
    }
    stop.store(true, std::sync::atomic::Ordering::Release);
    appender.await.expect("the appender");
}

/// A fork's create that stopped after making its log (`init=pending`,
/// its source not yet claimed): the retry with the same settings claims
/// the source (once, however often retried) and completes it; deleting
/// the fork then releases the source.
///
/// Fails when the completion does not claim the source (the old code
/// claimed only when it had made the log itself: `forks` stays 0).
#[tokio::test]
async fn a_half_made_fork_is_completed_with_its_claim_by_a_retry() {
    let (history, shared) = shared(64);
    shared
        .create("source", settings(), false, b"one", None, None)
        .await
        .expect("source");
    // What the first attempt left: the log, pending, no claim.
    let mut fork = fork_of("source");
    fork.content_type = "text/plain".to_owned();
    let source = shared.look("source").await.expect("look").expect("source");
    fork.fork_offset = Some(source.tail());
    let numbering = source.numbering.clone();
    let pending = crate::streams::shared_create::new_meta(
        &fork,
        None,
        &crate::streams::numbering::Numbering::new(
            numbering.fork_lineage(1),
            0,
            numbering.start_after(),
        ),
        0,
        None,
    );
    assert!(history
        .create(&log_of("fork"), 7, &pending)
        .await
        .expect("create"));
    for _ in 0..2 {
        let again = shared
            .create("fork", fork_of("source"), false, b"", None, None)
            .await
            .expect("the retry");
        assert!(matches!(again, SharedCreated::Existing(_)));
        let source = meta_of(&history, "source").await;
        assert_eq!(source.get(field::FORKS).map(String::as_str), Some("1"));
    }
    let mut read = Vec::new();
    let view = shared
        .read("fork", 0, 1 << 20)
        .await
        .expect("read")
        .expect("fork");
    read.extend(view.events.into_iter().map(|(_, payload)| payload));
    assert_eq!(read, [bytes::Bytes::from_static(b"one")], "completed");
    assert_eq!(shared.delete("fork", |_| Ok(())).await, Ok(Some(true)));
    let source = meta_of(&history, "source").await;
    assert_eq!(source.get(field::FORKS).map(String::as_str), Some("0"));
}

async fn meta_of(history: &MemoryHistory, path: &str) -> crate::history::Meta {
    meta(history, path).await.expect("the stream")
}

/// A half-made fork whose source was deleted meanwhile: the retry's claim
/// is refused, and the log it would complete is deleted (undone), not
/// left pending.
///
/// Fails without the undo (the log stays, `init=pending`).
#[tokio::test]
async fn a_half_made_fork_whose_source_is_gone_is_undone() {
    let (history, shared) = shared(64);
    shared
        .create("source", settings(), false, b"one", None, None)
        .await
        .expect("source");
    shared
        .create("other", fork_of("source"), false, b"", None, None)
        .await
        .expect("another fork");
    let mut fork = fork_of("source");
    fork.content_type = "text/plain".to_owned();
    let source = shared.look("source").await.expect("look").expect("source");
    fork.fork_offset = Some(source.tail());
    let pending = crate::streams::shared_create::new_meta(
        &fork,
        None,
        &crate::streams::numbering::Numbering::new(
            source.numbering.fork_lineage(1),
            0,
            source.numbering.start_after(),
        ),
        0,
        None,
    );
    assert!(history
        .create(&log_of("fork"), 7, &pending)
        .await
        .expect("create"));
    // Soft-deleted: the other fork lives.
    assert_eq!(shared.delete("source", |_| Ok(())).await, Ok(Some(true)));
    let refused = shared
        .create("fork", fork_of("source"), false, b"", None, None)
        .await;
    assert!(
        matches!(refused, Err(CreateRefusal::SourceSoftDeleted)),
        "{:?}",
        refused.err()
    );
    assert!(
        meta(&history, "fork").await.is_none(),
        "the pending log is undone"
    );
}

/// A writer with a new `Producer-Id` per append: the stream's meta keeps
/// at most its cap of producer fields, `producers` counts them exactly,
/// and the newest is still known (its retry is a duplicate).
///
/// Fails when producer fields are never removed (100 of them), or the
/// count drifts from the fields.
#[tokio::test]
async fn producer_fields_are_capped_and_counted() {
    use crate::streams::stream::ProducerLimits;
    let history = Arc::new(MemoryHistory::new(64, 1 << 20));
    let shared = SharedStreams::new(Arc::clone(&history), 1 << 20, Duration::from_secs(5))
        .with_producer_limits(ProducerLimits {
            per_stream: 8,
            idle: Duration::from_secs(3600),
        });
    shared
        .create("s", settings(), false, b"", None, None)
        .await
        .expect("create");
    for n in 0..100 {
        let id = format!("invocation-{n:03}");
        let request = AppendRequest {
            producer: Some((&id, 0, 0)),
            ..AppendRequest::default()
        };
        shared
            .append("s", b"x", &request, |_| Ok(()))
            .await
            .expect("append");
        let meta = meta_of(&history, "s").await;
        let fields = meta
            .keys()
            .filter(|k| k.starts_with(field::PRODUCER))
            .count();
        assert!(fields <= 8, "append {n}: {fields} producer fields");
        assert_eq!(meta[field::PRODUCERS], fields.to_string(), "append {n}");
    }
    let retry = AppendRequest {
        producer: Some(("invocation-099", 0, 0)),
        ..AppendRequest::default()
    };
    assert!(matches!(
        shared.append("s", b"x", &retry, |_| Ok(())).await,
        Ok(crate::streams::rules::Appended::Duplicate { .. })
    ));
}

/// A log that is a session's (its id is a log id too) is not a stream:
/// not read, not appended to, not deleted, and a create at its path is a
/// conflict that leaves it as it was.
///
/// Fails when the stream side does not check the log's kind.
#[tokio::test]
async fn a_sessions_log_is_not_a_stream() {
    let (history, shared) = shared(64);
    let mut session = crate::history::Meta::new();
    session.insert("kind".to_owned(), "session".to_owned());
    assert!(history
        .create(&log_of("x"), 3, &session)
        .await
        .expect("create"));
    assert!(shared.look("x").await.expect("look").is_none());
    assert!(matches!(
        shared
            .append("x", b"a", &AppendRequest::default(), |_| Ok(()))
            .await,
        Err(crate::streams::rules::AppendRefusal::Gone)
    ));
    assert_eq!(shared.delete("x", |_| Ok(())).await, Ok(None));
    assert!(matches!(
        shared.create("x", settings(), false, b"", None, None).await,
        Err(CreateRefusal::Conflict)
    ));
    assert_eq!(
        meta_of(&history, "x").await,
        session,
        "the session's log is untouched"
    );
}

/// A removal decided on a look that an append has since overtaken (the
/// append restarted the stream's TTL) is refused: the access time is part
/// of its guard.
///
/// Fails without `atime` in the removal's guard (the stream is deleted
/// under an acknowledged append).
#[tokio::test]
async fn a_removal_decided_before_an_append_is_refused() {
    let (_history, shared) = shared(64);
    shared
        .create("s", settings(), false, b"one", None, None)
        .await
        .expect("create");
    let stale = shared.look("s").await.expect("look").expect("s");
    // An append a millisecond or more later moves the access time.
    let before = stale.meta[field::ACCESSED].clone();
    loop {
        append(&shared, "s", b"two").await;
        let now = shared.look("s").await.expect("look").expect("s");
        if now.meta[field::ACCESSED] != before {
            break;
        }
    }
    assert!(!shared.remove("s", &stale).await.expect("remove"));
    assert!(shared.look("s").await.expect("look").is_some());
}

/// Admission on the fake: two clients, three streams in all and two per
/// client; the client's third is `TooManyStreamsForClient`, the total's
/// fourth `TooManyStreams`, neither creates anything; a delete frees the
/// places; a place whose time ran out (ttl 0: a stream whose keys expired
/// unnoticed) counts no more.
///
/// Fails when a refused create keeps the places it took, or a purge gives
/// none back.
#[tokio::test]
async fn streams_are_admitted_in_all_and_per_client() {
    use super::Admission;
    use crate::client_addr::ClientKey;
    let history = Arc::new(MemoryHistory::new(64, 1 << 20));
    let admission = Admission {
        total: 3,
        per_client: 2,
        ttl: Duration::from_secs(3600),
    };
    let shared = SharedStreams::new(Arc::clone(&history), 1 << 20, Duration::from_secs(5))
        .with_admission(admission);
    let (a, b) = (
        Some(ClientKey::of("192.0.2.1".parse().expect("an address"))),
        Some(ClientKey::of("192.0.2.2".parse().expect("an address"))),
    );
    let create = |path: &'static str, client| {
        let shared = &shared;
        async move {
            shared
                .create(path, settings(), false, b"", None, client)
                .await
        }
    };
    assert!(create("a1", a).await.is_ok());
    assert!(create("a2", a).await.is_ok());
    assert!(matches!(
        create("a3", a).await,
        Err(CreateRefusal::TooManyStreamsForClient)
    ));
    assert!(meta(&history, "a3").await.is_none());
    assert!(create("b1", b).await.is_ok());
    assert!(matches!(
        create("b2", b).await,
        Err(CreateRefusal::TooManyStreams)
    ));
    assert!(matches!(
        create("a1", a).await,
        Ok(SharedCreated::Existing(_))
    ));
    assert_eq!(shared.delete("a1", |_| Ok(())).await, Ok(Some(true)));
    assert!(create("b2", b).await.is_ok(), "the delete freed a place");
    // Places that last no time: nothing counts for long.
    let fresh = Arc::new(MemoryHistory::new(64, 1 << 20));
    let fleeting =
        SharedStreams::new(fresh, 1 << 20, Duration::from_secs(5)).with_admission(Admission {
            ttl: Duration::ZERO,
            ..admission
        });
    for n in 0..5 {
        let path = format!("f{n}");
        fleeting
            .create(&path, settings(), false, b"", None, a)
            .await
            .expect("an expired place frees itself");
    }
}
