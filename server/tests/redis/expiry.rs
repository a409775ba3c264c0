//! Idle expiry with a shared history: a session's keys in Redis expire
//! after the idle timeout without activity, and an open stream is
//! activity on whichever instance it is open.

use crate::cluster::{instance, payload, Received};
use crate::redis_server::{Persistence, RedisServer};
use crate::support::bounded;
use std::time::Duration;

/// A reader streams from B while nothing is emitted for longer than the
/// keys' expiry without activity (idle timeout 2 s + two keepalive
/// periods of 5 s = 12 s). Its keepalives keep the session alive: an emit
/// on A afterwards is delivered to it. A's own copy, idle, was ended
/// meanwhile; A loads the session again and emits into it.
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
        // Time passing is what is under test here.
        tokio::time::sleep(Duration::from_secs(15)).await;
        let key = format!("gapless:{{{session}}}:m");
        assert_eq!(
            redis.cli(&["EXISTS", &key]),
            "1",
            "the session's keys expired"
        );
        let (id, _) = crate::cluster::emit_retrying(&client_a, &session, &payload(0, 1)).await;
        assert_eq!(id.seq, 2);
        received.read_through(&mut stream, 2, epoch).await;
        assert_eq!(received.events[&2], payload(0, 1));
    })
    .await;
}
