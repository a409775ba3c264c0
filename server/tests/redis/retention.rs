//! Retention across instances: a cursor the history no longer covers gets
//! the same `409 gap_not_covered` figures on an instance that never held
//! the session, and on one whose copy fell behind Redis's retention.

use crate::cluster::{emit_all, instance, payload, Received};
use crate::redis_server::{Persistence, RedisServer};
use crate::support::{bounded, refusal};
use gapless::EventId;
use gapless_client::Refusal;

/// Ring and retention of these tests: 8 events (`MAXLEN ~ 8` keeps at
/// least 8, in whole radix-tree nodes of up to 100).
const RING: &str = "8";

/// A reader on A that receives the first `count` events, so that cursors
/// up to `count` are legitimate (sent) everywhere.
fn read_first(
    client: &gapless_client::Client,
    created: &gapless_client::Created,
    count: u64,
) -> tokio::task::JoinHandle<()> {
    let (client, session, epoch) = (client.clone(), created.session.clone(), created.epoch);
    tokio::spawn(async move {
        let mut stream = client.open_sse(&session, None).await.expect("SSE on A");
        Received::default()
            .read_through(&mut stream, count, epoch)
            .await;
    })
}

fn gap_figures(refusal: Refusal) -> (u64, u64, u64, u64) {
    match refusal {
        Refusal::GapNotCovered {
            cursor,
            first_retained,
            published,
            evicted,
        } => (cursor, first_retained, published, evicted),
        other => panic!("expected gap_not_covered, got {other:?}"),
    }
}

/// 300 events emitted on A; B never held the session. A cursor older than
/// the retention is refused on B with exactly A's figures; a covered one
/// replays exactly the events after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cursor_older_than_the_retention_is_refused_with_the_same_figures_everywhere() {
    bounded("retention", async {
        let redis = RedisServer::start(Persistence::None);
        let (_a, client_a) = instance(&redis, &["--ring-events", RING]).await;
        let (_b, client_b) = instance(&redis, &["--ring-events", RING]).await;
        let created = client_a.create_session().await.expect("create on A");
        let session = created.session.clone();
        // The reader gets the first five before the rest is emitted: an
        // SSE attach racing 300 emits into an 8-event ring could find its
        // start already evicted.
        let reader = read_first(&client_a, &created, 5);
        emit_all(&client_a, &session, 0..5).await;
        reader.await.expect("the reader on A");
        emit_all(&client_a, &session, 5..300).await;
        // Redis trimmed: it holds far fewer than 300 (but at least 8).
        let length: u64 = redis
            .cli(&["XLEN", &format!("gapless:{{{session}}}:s")])
            .parse()
            .expect("XLEN");
        assert!((8..300).contains(&length), "Redis holds {length} events");

        let cursor = EventId {
            epoch: created.epoch,
            seq: 5,
        };
        let on_a = gap_figures(refusal(
            client_a.open_sse(&session, Some(cursor)).await,
            "A",
        ));
        let on_b = gap_figures(refusal(
            client_b.open_sse(&session, Some(cursor)).await,
            "B",
        ));
        assert_eq!(on_b, on_a, "the same refusal on both instances");
        assert_eq!(
            on_b,
            (5, 293, 300, 287),
            "(cursor, first_retained, published, evicted)"
        );
        // The upgrade path refuses with the same figures.
        let upgrade = client_b.upgrade(&session, cursor).await;
        assert_eq!(gap_figures(refusal(upgrade, "upgrade on B")), on_a);

        // The refusal accounted the gap: 292 (`first_retained - 1`) is now
        // a legitimate cursor on every instance, and it is covered.
        let covered = EventId {
            epoch: created.epoch,
            seq: 292,
        };
        let mut received = Received {
            last: 292,
            ..Received::default()
        };
        let mut stream = client_b
            .open_sse(&session, Some(covered))
            .await
            .expect("covered resume on B");
        received.read_through(&mut stream, 300, created.epoch).await;
        for seq in 293..=300 {
            assert_eq!(received.events[&seq], payload(0, seq - 1));
        }
    })
    .await;
}

/// B loaded the session at seq 3 (no stream there, so nothing follows the
/// history for it), then A emitted far past Redis's retention. B's copy
/// cannot catch up: it is dropped and loaded afresh, and B answers a stale
/// cursor with the history's figures and replays the retained events with
/// their own payloads, never its old copy or what Redis has left mirrored
/// at the wrong seqs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_copy_that_fell_behind_the_retention_is_reloaded_not_skipped() {
    bounded("stale copy", async {
        let redis = RedisServer::start(Persistence::None);
        let ring = ["--ring-events", "256"];
        let (_a, client_a) = instance(&redis, &ring).await;
        let (_b, client_b) = instance(&redis, &ring).await;
        let created = client_a.create_session().await.expect("create on A");
        let session = created.session.clone();
        let reader = read_first(&client_a, &created, 3);
        emit_all(&client_a, &session, 0..3).await;
        reader.await.expect("the reader on A");
        let loaded = client_b.state(&session).await.expect("B loads the session");
        assert_eq!(loaded.published, 3);
        emit_all(&client_a, &session, 3..1000).await;
        let length: u64 = redis
            .cli(&["XLEN", &format!("gapless:{{{session}}}:s")])
            .parse()
            .expect("XLEN");
        assert!(
            (256..997).contains(&length),
            "Redis trimmed past B's copy: {length}"
        );
        let cursor = EventId {
            epoch: created.epoch,
            seq: 3,
        };
        let on_b = gap_figures(refusal(
            client_b.open_sse(&session, Some(cursor)).await,
            "B",
        ));
        let on_a = gap_figures(refusal(
            client_a.open_sse(&session, Some(cursor)).await,
            "A",
        ));
        assert_eq!(on_b, on_a, "the same refusal on both instances");
        assert_eq!(on_b, (3, 745, 1000, 741));
        // The refusal accounted the gap: resume right before the retained.
        let mut received = Received {
            last: 744,
            ..Received::default()
        };
        let after_gap = EventId {
            epoch: created.epoch,
            seq: 744,
        };
        let mut stream = client_b
            .open_sse(&session, Some(after_gap))
            .await
            .expect("resume on B after the gap");
        received
            .read_through(&mut stream, 1000, created.epoch)
            .await;
        for seq in 745..=1000 {
            assert_eq!(
                received.events[&seq],
                payload(0, seq - 1),
                "payload of {seq} on B"
            );
        }
        let metrics = crate::support::scrape(&client_b).await;
        assert_eq!(
            metrics.value("gapless_replicas_reloaded_total", &[]),
            Some(1.0),
            "B dropped its stale copy once"
        );
    })
    .await;
}
