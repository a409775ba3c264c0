//! `MigratingClient` end to end: many sessions migrating concurrently with
//! their true cursors and no hole, and gaps the server reports surfaced,
//! never skipped.

use crate::support::{
    bounded, create, emit_range, id, payload, scrape, small_ring, start, stop, wait_state, IO,
};
use gapless_client::{ClientError, MigratingClient, Next, Refusal};
use gapless_server::ServerConfig;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[derive(Default)]
struct Figures {
    events: AtomicU64,
    migrations: AtomicU64,
    resumes: AtomicU64,
    holes: AtomicU64,
    reported_gaps: AtomicU64,
    replayed_on_upgrade: AtomicU64,
}

/// Reads through `follower` until its cursor reaches `until`, checking every
/// payload; a hole is counted and fails the session.
async fn follow_until(
    follower: &mut MigratingClient,
    tag: usize,
    until: u64,
    figures: &Figures,
) -> Result<(), String> {
    while follower.cursor().seq < until {
        match follower.next().await {
            Ok(Next::Event(event)) => {
                if event.data != payload(tag, event.id.seq) {
                    figures.holes.fetch_add(1, Ordering::Relaxed);
                    return Err(format!(
                        "session {tag}: payload of {} differs: {}",
                        event.id.seq, event.data
                    ));
                }
                figures.events.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Next::Gap(gap)) => {
                figures.reported_gaps.fetch_add(1, Ordering::Relaxed);
                return Err(format!("session {tag}: reported gap {gap:?}"));
            }
            Ok(Next::Closed(closed)) => {
                return Err(format!(
                    "session {tag}: transport closed at {}: {closed:?}",
                    follower.cursor()
                ))
            }
            Err(error @ (ClientError::SilentGap(_) | ClientError::FirstFrame { .. })) => {
                figures.holes.fetch_add(1, Ordering::Relaxed);
                return Err(format!("session {tag}: HOLE {error}"));
            }
            Err(error) => return Err(format!("session {tag}: {error}")),
        }
    }
    Ok(())
}

/// ≥ 20 sessions emitting while their clients read part of the stream over
/// SSE, drop, resume with their true cursor, drop again and migrate to
/// WebSocket with their true cursor (some go back to SSE and migrate again):
/// every client ends with a contiguous sequence identical to what was
/// emitted, and no hole is found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sessions_migrate_with_their_true_cursor_and_find_no_hole() {
    bounded("concurrent migration", async {
        const SESSIONS: usize = 24;
        const EVENTS: u64 = 300;
        let started = Instant::now();
        let (server, client) = start(ServerConfig::default()).await;
        let figures = Arc::new(Figures::default());
        let mut tasks = Vec::new();
        for tag in 0..SESSIONS {
            let (client, figures) = (client.clone(), figures.clone());
            tasks.push(tokio::spawn(async move {
                let created = create(&client).await;
                let emitter = {
                    let (client, created) = (client.clone(), created.clone());
                    tokio::spawn(async move {
                        for n in 1..=EVENTS {
                            let got = client
                                .emit_raw(&created.session, payload(tag, n))
                                .await
                                .map_err(|e| format!("session {tag}: emit {n}: {e}"))?;
                            if got != id(created.epoch, n) {
                                return Err(format!("session {tag}: emit {n} answered {got}"));
                            }
                            if n % 8 == 0 {
                                tokio::task::yield_now().await;
                            }
                        }
                        Ok::<(), String>(())
                    })
                };
                let mut follower = MigratingClient::new(client.clone(), &created);
                let first = 10 + 3 * tag as u64;
                let second = first + 25 + tag as u64;
                follower.follow_sse().await.map_err(|e| format!("session {tag}: SSE: {e}"))?;
                follow_until(&mut follower, tag, first, &figures).await?;
                follower.drop_connection();
                if tag % 2 == 0 {
                    follower.ack().await.map_err(|e| format!("session {tag}: ack: {e}"))?;
                }
                follower.follow_sse().await.map_err(|e| format!("session {tag}: resume: {e}"))?;
                follow_until(&mut follower, tag, second, &figures).await?;
                follower.drop_connection();
                // Non-quiescent on purpose (the mid-stream migration case): events were
                // emitted after the client's cursor and before the upgrade.
                wait_state(&client, &created.session, "events after the cursor", |s| {
                    s.published >= second + 3
                })
                .await;
                let grant = follower
                    .migrate_to_websocket()
                    .await
                    .map_err(|e| format!("session {tag}: migrate: {e}"))?;
                if grant.replay_from != second + 1 || grant.replay_to < second + 3 {
                    return Err(format!("session {tag}: grant {grant:?} after cursor {second}"));
                }
                figures
                    .replayed_on_upgrade
                    .fetch_add(grant.replay_to - grant.replay_from + 1, Ordering::Relaxed);
                if tag % 3 == 0 {
                    // A blip on the WebSocket: back to SSE, then migrate again.
                    let third = second + 40;
                    follow_until(&mut follower, tag, third, &figures).await?;
                    follower.drop_connection();
                    follower.follow_sse().await.map_err(|e| format!("session {tag}: WS->SSE: {e}"))?;
                    follow_until(&mut follower, tag, third + 20, &figures).await?;
                    follower
                        .migrate_to_websocket()
                        .await
                        .map_err(|e| format!("session {tag}: second migration: {e}"))?;
                }
                follow_until(&mut follower, tag, EVENTS, &figures).await?;
                tokio::time::timeout(IO, emitter)
                    .await
                    .map_err(|_| format!("session {tag}: emitter hangs"))?
                    .map_err(|e| format!("session {tag}: emitter: {e}"))??;
                let detector = *follower.detector();
                if detector.received() != EVENTS || detector.reported_lost() != 0 {
                    return Err(format!("session {tag}: detector {detector:?}"));
                }
                figures.migrations.fetch_add(follower.migrations(), Ordering::Relaxed);
                figures.resumes.fetch_add(follower.resumes(), Ordering::Relaxed);
                follower.disconnect().await;
                Ok::<(), String>(())
            }));
        }
        let mut failures = Vec::new();
        for task in tasks {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(failure)) => failures.push(failure),
                Err(panic) => failures.push(format!("task panicked: {panic}")),
            }
        }
        let f = &figures;
        let summary = format!(
            "concurrent migration: {SESSIONS} sessions, {} events emitted, {} delivered, {} SSE streams, {} migrations ({} gap events replayed first on the WebSocket), {} holes, {} reported gaps, {:?}",
            SESSIONS as u64 * EVENTS,
            f.events.load(Ordering::Relaxed),
            f.resumes.load(Ordering::Relaxed),
            f.migrations.load(Ordering::Relaxed),
            f.replayed_on_upgrade.load(Ordering::Relaxed),
            f.holes.load(Ordering::Relaxed),
            f.reported_gaps.load(Ordering::Relaxed),
            started.elapsed()
        );
        println!("{summary}");
        eprintln!("{summary}");
        assert!(failures.is_empty(), "{summary}\n{}", failures.join("\n"));
        assert_eq!(f.holes.load(Ordering::Relaxed), 0);
        assert_eq!(f.reported_gaps.load(Ordering::Relaxed), 0);
        assert_eq!(f.events.load(Ordering::Relaxed), SESSIONS as u64 * EVENTS);
        assert!(f.migrations.load(Ordering::Relaxed) >= SESSIONS as u64);
        let metrics = scrape(&client).await;
        assert!(!metrics.samples.is_empty());
        stop(server).await;
    })
    .await;
}

/// The `MigratingClient` pattern end to end on one session: its true
/// cursor drives resume and migration (first frame = cursor + 1), and a gap
/// the server reports (409 gap_not_covered on resume and on upgrade) is
/// recorded and surfaced, the cursor unmoved until the application accepts
/// the loss explicitly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migrating_client_surfaces_reported_gaps_and_never_skips() {
    bounded("client reports", async {
        let (server, client) = start(small_ring(4)).await;
        let a = create(&client).await;
        emit_range(&client, &a, 0, 1..=3).await;
        let figures = Figures::default();
        let mut follower = MigratingClient::new(client.clone(), &a);
        follower.follow_sse().await.expect("SSE");
        follow_until(&mut follower, 0, 3, &figures)
            .await
            .expect("1..=3");
        // A second client that processed only 1 (its own true cursor).
        let mut behind = MigratingClient::with_cursor(client.clone(), &a.session, id(a.epoch, 1));
        let grant = behind.migrate_to_websocket().await.expect("migrate from 1");
        assert_eq!((grant.replay_from, grant.replay_to), (2, 3));
        follow_until(&mut behind, 0, 3, &figures)
            .await
            .expect("2..=3 first on the WebSocket");
        assert_eq!(behind.migrations(), 1);
        behind.disconnect().await;

        follower.drop_connection();
        emit_range(&client, &a, 0, 4..=20).await; // a 4-event ring evicts 4..=16
        let first_retained = client
            .state(&a.session)
            .await
            .expect("state")
            .first_retained;
        let expected = Refusal::GapNotCovered {
            cursor: 3,
            first_retained,
            published: 20,
            evicted: first_retained - 4,
        };
        assert_eq!(
            follower
                .follow_sse()
                .await
                .expect_err("resume over a gap")
                .refusal(),
            Some(&expected)
        );
        assert_eq!(
            follower
                .migrate_to_websocket()
                .await
                .expect_err("upgrade over a gap")
                .refusal(),
            Some(&expected)
        );
        assert_eq!(follower.gaps().len(), 2, "both refusals are recorded");
        assert_eq!(follower.cursor().seq, 3, "nothing was skipped");
        assert!(matches!(
            follower.next().await,
            Err(ClientError::NotConnected)
        ));
        let gap = follower.gaps()[0].clone();
        assert_eq!(
            follower.accept_gap(&gap).expect("accept"),
            first_retained - 4
        );
        assert_eq!(follower.detector().reported_lost(), first_retained - 4);
        assert_eq!(follower.cursor().seq, first_retained - 1);
        assert_eq!(figures.holes.load(Ordering::Relaxed), 0);
        stop(server).await;
    })
    .await;
}
