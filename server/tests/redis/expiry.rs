//! Idle expiry with a shared history: a session's keys in Redis expire
//! after the idle timeout without activity, and an open stream is
//! activity on whichever instance it is open.

use crate::cluster::{instance, payload, Received};
use crate::redis_server::{Persistence, RedisServer};
use crate::support::{bounded, eventually, scrape};
use std::time::{Duration, Instant};

/// The time to live of a session's keys with `--idle-timeout 2`: the idle
/// timeout and two keepalive periods (SSE: 5 s) = 12 s, and a quarter of
/// it (`RedisHistory::keys_ttl`).
const KEYS_TTL_MS: i64 = 15_000;

/// How long the test waits for the stream's first keepalive (due 5 s after
/// it opened) to renew the keys.
const RENEWAL: Duration = Duration::from_secs(12);

/// One instance's figure from `/metrics`.
async fn metric(client: &gapless_client::Client, name: &str) -> f64 {
    scrape(client)
        .await
        .value(name, &[])
        .unwrap_or_else(|| panic!("/metrics has no {name}"))
}

/// A reader streams from B while nothing is emitted and no request names
/// the session. The session's keys carry an expiry (Redis's own `PTTL`:
/// at most the keys' time to live, never persistent), and B's open stream
/// renews it with nothing else going on — `PTTL` rises again at its first
/// keepalive, one every 5 s against a 15 s time to live — so the keys
/// never expire while the stream is open. A's own copy, idle, is ended
/// meanwhile (its 2 s idle timeout passed); A loads the session again and
/// emits into it, and the reader on B gets the event.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_open_stream_keeps_its_session_alive_past_the_idle_timeout() {
    bounded("stream keeps the session", async {
        let redis = RedisServer::start(Persistence::None);
        let flags = ["--idle-timeout", "2", "--ping-interval", "1"];
        let (_a, client_a) = instance(&redis, &flags).await;
        let (_b, client_b) = instance(&redis, &flags).await;
        let created = client_a.create_session().await.expect("create on A");
        let (session, epoch) = (created.session.clone(), created.epoch);
        client_a
            .emit_raw(&session, payload(0, 0))
            .await
            .expect("emit on A");
        let mut received = Received::default();
        let mut stream = client_b.open_sse(&session, None).await.expect("SSE on B");
        stream.set_idle_timeout(None);
        received.read_through(&mut stream, 1, epoch).await;

        let key = format!("gapless:{{{session}}}:m");
        let pttl = || -> i64 {
            let answer = redis.cli(&["PTTL", &key]);
            answer
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("PTTL {key}: {answer:?}"))
        };
        let set = pttl();
        assert!(
            0 < set && set <= KEYS_TTL_MS,
            "the session's keys carry no expiry of at most {KEYS_TTL_MS} ms: PTTL {set}"
        );

        // A's copy, named by no request since the emit, ends at its idle
        // timeout; B's, with the stream open, does not.
        eventually("A's idle copy ended", Duration::from_secs(10), || async {
            metric(&client_a, "gapless_sessions").await == 0.0
        })
        .await;
        assert_eq!(metric(&client_b, "gapless_sessions").await, 1.0);

        // Nothing is emitted and no request is made: only the open stream
        // can renew the keys.
        let deadline = Instant::now() + RENEWAL;
        let mut lowest = set;
        loop {
            let now = pttl();
            assert!(now > 0, "the session's keys expired (PTTL {now})");
            if now > lowest + 1_000 {
                break;
            }
            lowest = lowest.min(now);
            assert!(
                Instant::now() < deadline,
                "the open stream did not renew the keys within {RENEWAL:?} (PTTL {now})"
            );
            tokio::time::sleep(Duration::from_millis(100)).await; // polling, bounded
        }

        assert_eq!(
            metric(&client_a, "gapless_sessions_loaded_total").await,
            0.0
        );
        let (id, _) = crate::cluster::emit_retrying(&client_a, &session, &payload(0, 1)).await;
        assert_eq!(id.seq, 2);
        assert_eq!(
            metric(&client_a, "gapless_sessions_loaded_total").await,
            1.0,
            "A loaded the session again"
        );
        received.read_through(&mut stream, 2, epoch).await;
        assert_eq!(received.events[&2], payload(0, 1));
    })
    .await;
}
