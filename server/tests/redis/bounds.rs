//! What an instance holds of Redis, and Redis of a session, stays bounded:
//! a session's payload bytes in Redis stay within the ring's
//! `--ring-bytes`; hundreds of followed sessions share a few connections;
//! emits waiting for a Redis that does not answer are capped per instance;
//! a Redis that does not answer does not hold up a shutdown.

use crate::cluster::{instance, payload, Received};
use crate::redis_server::{Persistence, RedisServer};
use crate::support::{bounded, eventually, exit_within, scrape, signal, tripped};
use gapless_client::{ClientError, Refusal};
use std::time::{Duration, Instant};

/// With `--ring-bytes 1 MiB`, 400 emits of 16 KiB (6.4 MiB in all) leave
/// at most 1 MiB of payload in Redis for the session, the newest events,
/// the retained ones readable in order from the other instance. (Redis's
/// own overhead comes on top: jemalloc rounds a 16 KiB entry up to its
/// 20 KiB size class, so the stream's `MEMORY USAGE` is about 1.25x its
/// payload here; before, the same run held 7.9 MiB.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_holds_no_more_payload_in_redis_than_its_ring() {
    bounded("retention by bytes", async {
        let redis = RedisServer::start(Persistence::None);
        let ring = ["--ring-bytes", "1048576", "--max-body", "65536"];
        let (_a, client_a) = instance(&redis, &ring).await;
        let (_b, client_b) = instance(&redis, &ring).await;
        let created = client_a.create_session().await.expect("create");
        let session = created.session.clone();
        let pad = "x".repeat(16 << 10);
        for index in 0..400 {
            let body = format!("{{\"i\":{index},\"pad\":\"{pad}\"}}");
            client_a.emit_raw(&session, body).await.expect("emit");
        }
        let meta = format!("gapless:{{{session}}}:m");
        let bytes: u64 = redis
            .cli(&["HGET", &meta, "bytes"])
            .parse()
            .expect("retained bytes");
        assert!(bytes <= 1 << 20, "{bytes} payload bytes retained");
        assert!(bytes > (1 << 20) - (17 << 10), "as much as fits: {bytes}");
        let stream = format!("gapless:{{{session}}}:s");
        let usage: u64 = redis
            .cli(&["MEMORY", "USAGE", &stream, "SAMPLES", "0"])
            .parse()
            .expect("MEMORY USAGE");
        assert!(
            usage <= (1 << 20) * 3 / 2,
            "the stream takes {usage} B in Redis for a 1 MiB ring"
        );
        eprintln!("retention by bytes: {bytes} B of payload, MEMORY USAGE {usage} B");
        let length: u64 = redis.cli(&["XLEN", &stream]).parse().expect("XLEN");
        let first = 400 - length + 1;
        // From the start on B: the history no longer covers 1.., and says
        // exactly where it starts (the gap is accounted, never skipped).
        match client_b.open_sse(&session, None).await {
            Err(ClientError::Refused(Refusal::GapNotCovered { first_retained, .. })) => {
                assert_eq!(first_retained, first, "Redis and B agree on the oldest")
            }
            other => panic!("a stream from 0 was {:?}", other.map(|_| "a stream")),
        }
        let cursor = gapless::EventId {
            epoch: created.epoch,
            seq: first - 1,
        };
        let mut received = Received {
            last: first - 1,
            ..Received::default()
        };
        let mut stream = client_b
            .open_sse(&session, Some(cursor))
            .await
            .expect("resume after the reported gap");
        received.read_through(&mut stream, 400, created.epoch).await;
        assert!(received.events[&400].contains("\"i\":399"));
    })
    .await;
}

/// 250 sessions followed on one instance (an open SSE stream each) use one
/// connection for commands and one for announcements, not one per
/// session; events emitted on the other instance reach every stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hundreds_of_followed_sessions_share_two_redis_connections() {
    bounded("bounded connections", async {
        let redis = RedisServer::start(Persistence::None);
        let (_a, client_a) = instance(&redis, &[]).await;
        let (_b, client_b) = instance(&redis, &["--max-connections-per-client", "1000"]).await;
        let mut streams = Vec::new();
        let mut sessions = Vec::new();
        for _ in 0..250 {
            let created = client_a.create_session().await.expect("create");
            let stream = client_b
                .open_sse(&created.session, None)
                .await
                .expect("SSE on B");
            sessions.push(created);
            streams.push(stream);
        }
        for created in &sessions {
            client_a
                .emit_raw(&created.session, payload(0, 0))
                .await
                .expect("emit on A");
        }
        for (created, stream) in sessions.iter().zip(&mut streams) {
            let mut received = Received::default();
            received.read_through(stream, 1, created.epoch).await;
        }
        let connections = redis_clients(&redis);
        // Two instances, each with its command connection and its
        // announcement connection, plus redis-cli asking.
        assert!(
            connections <= 6,
            "{connections} Redis clients for 250 followed sessions:\n{}",
            redis.cli(&["CLIENT", "LIST"])
        );
    })
    .await;
}

/// The Redis clients connected now (`CLIENT LIST`, one line each).
fn redis_clients(redis: &RedisServer) -> usize {
    redis.cli(&["CLIENT", "LIST"]).lines().count()
}

/// Waits until the instance's `gapless_emits_waiting` gauge shows `count`.
async fn emits_waiting(client: &gapless_client::Client, count: u32) {
    let what = format!("{count} emits waiting for Redis");
    eventually(&what, Duration::from_secs(10), || async {
        scrape(client).await.value("gapless_emits_waiting", &[]) == Some(f64::from(count))
    })
    .await;
}

/// `--max-queued-emits 4` with Redis paused: four emits wait (the
/// `gapless_emits_waiting` gauge shows them), the fifth is answered `503
/// history_unavailable` with `Retry-After` at once and counted as kind
/// `queued_emits`; once Redis answers again, emits are accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn emits_waiting_for_redis_are_capped_per_instance() {
    bounded("queued emits", async {
        let redis = RedisServer::start(Persistence::None);
        // A Redis deadline far beyond the test's own waits: the four stay
        // queued however slowly the machine observes them, and a fifth
        // that were queued too would answer only after 20 s.
        let (_a, client) = instance(
            &redis,
            &["--max-queued-emits", "4", "--redis-timeout", "20"],
        )
        .await;
        let created = client.create_session().await.expect("create");
        let session = created.session.clone();
        client
            .emit_raw(&session, payload(0, 0))
            .await
            .expect("emit");
        redis.pause(true);
        let waiting: Vec<_> = (1..=4)
            .map(|index| {
                let (client, session) = (client.clone(), session.clone());
                tokio::spawn(async move { client.emit_raw(&session, payload(0, index)).await })
            })
            .collect();
        emits_waiting(&client, 4).await;
        let started = Instant::now();
        match client.emit_raw(&session, payload(0, 5)).await {
            Err(ClientError::Unavailable { code, retry_after }) => {
                assert_eq!(code, "history_unavailable");
                assert!(retry_after.is_some(), "a Retry-After");
            }
            other => panic!("the fifth emit was {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "refused at once, not after the Redis timeout: {:?}",
            started.elapsed()
        );
        assert_eq!(tripped(&client, "queued_emits").await, 1.0);
        redis.pause(false);
        for emit in waiting {
            // Each either made it in time (202) or was refused typed; none
            // hangs.
            match emit.await.expect("emit task") {
                Ok(_) | Err(ClientError::Unavailable { .. }) => {}
                Err(other) => panic!("{other}"),
            }
        }
        client
            .emit_raw(&session, payload(0, 6))
            .await
            .expect("accepted once Redis answers");
    })
    .await;
}

/// Shutdown is not held up by Redis: with Redis paused (alive, not
/// answering), an instance with open streams and an emit waiting for Redis
/// exits within `--shutdown-grace` (plus the time to drop what is left)
/// after SIGTERM.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_is_bounded_with_redis_down() {
    bounded("shutdown with Redis down", async {
        let redis = RedisServer::start(Persistence::None);
        // A shutdown that waited for Redis would take the 30 s deadline.
        let flags = ["--shutdown-grace", "1", "--redis-timeout", "30"];
        let (mut a, client) = instance(&redis, &flags).await;
        let created = client.create_session().await.expect("create");
        let session = created.session.clone();
        client
            .emit_raw(&session, payload(0, 0))
            .await
            .expect("emit");
        let mut stream = client.open_sse(&session, None).await.expect("SSE");
        Received::default()
            .read_through(&mut stream, 1, created.epoch)
            .await;
        redis.pause(true);
        let waiting = {
            let (client, session) = (client.clone(), session.clone());
            tokio::spawn(async move { client.emit_raw(&session, payload(0, 1)).await })
        };
        emits_waiting(&client, 1).await;
        let started = Instant::now();
        signal(&a, "TERM");
        let exit = exit_within(&mut a, Duration::from_secs(15), "SIGTERM with Redis paused").await;
        assert!(exit.success(), "{exit:?}");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "shutdown took {:?} with a 1 s grace",
            started.elapsed()
        );
        redis.pause(false);
        drop(stream);
        let _ = waiting.await;
    })
    .await;
}
