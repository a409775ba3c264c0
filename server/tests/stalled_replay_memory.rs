//! A reader that resumes far behind and then stops reading pins a bounded
//! copy of its replay, not the whole replay: delivery copies at most one
//! batch out of the ring per write, so a replay larger than the kernel's
//! socket buffers stays in the ring (where it is anyway) until the client
//! takes it.
//!
//! Its own test binary, so no other test allocates in the process while
//! RSS is measured. Linux only (RSS from `/proc/self/statm`).
#![cfg(target_os = "linux")]

use gapless_client::Client;
use gapless_server::{spawn, ServerConfig};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const EVENT: usize = 1 << 10;
const EVENTS: usize = 24_000;
const READERS: usize = 4;
/// Per stalled reader: one batch (64 events), the SSE queue (256 KiB),
/// hyper's write buffer, and slack. The whole replay is 24 MiB.
const BUDGET_PER_READER: u64 = 4 << 20;

#[path = "common/rss.rs"]
mod rss;

/// Resident bytes of this process.
fn rss() -> u64 {
    rss::resident_bytes("self")
}

/// `gapless_events_replayed_total` from `/metrics`.
async fn replayed(client: &Client) -> u64 {
    let response = client.send(client.get("/metrics")).await.expect("/metrics");
    let body = client.read_body(response).await.expect("body");
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|line| line.strip_prefix("gapless_events_replayed_total "))
        .and_then(|value| value.trim().parse().ok())
        .expect("gapless_events_replayed_total")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_readers_of_a_long_replay_pin_a_bounded_copy_each() {
    let config = ServerConfig {
        ring_events: 32 << 10,
        ring_bytes: 32 << 20,
        ..ServerConfig::default()
    };
    let server = spawn(config, "127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("spawn");
    let client = Client::new(server.url())
        .expect("client")
        .with_timeout(Duration::from_secs(30));
    let session = client.create_session().await.expect("session");
    let pad = "x".repeat(EVENT - 16);
    for n in 0..EVENTS {
        client
            .emit_raw(&session.session, format!(r#"{{"n":{n},"p":"{pad}"}}"#))
            .await
            .expect("emit");
    }

    let before = rss();
    // Readers that resume from the start (24 MiB to replay) and never read
    // past the response head. Each takes the session's transport from the
    // one before, but only once its own delivery runs; all stay open.
    let mut stalled = Vec::new();
    for _ in 0..READERS {
        let tcp = tokio::net::TcpStream::connect(server.addr())
            .await
            .expect("connect");
        let mut reader = BufReader::new(tcp);
        let request = format!(
            "GET /session/{}/events HTTP/1.1\r\nhost: x\r\naccept: text/event-stream\r\n\r\n",
            session.session
        );
        reader
            .get_mut()
            .write_all(request.as_bytes())
            .await
            .expect("request");
        let mut status = String::new();
        reader.read_line(&mut status).await.expect("status line");
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        stalled.push(reader);
    }
    // Wait (bounded) until the deliveries stopped making progress: the
    // replayed count holds still across three scrapes.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = (replayed(&client).await, 0);
    while last.1 < 3 {
        assert!(
            Instant::now() < deadline,
            "the stalled deliveries never settled"
        );
        tokio::time::sleep(Duration::from_millis(100)).await; // polling, bounded
        let now = replayed(&client).await;
        last = if now == last.0 {
            (now, last.1 + 1)
        } else {
            (now, 0)
        };
    }
    let per_reader = rss().saturating_sub(before) / READERS as u64;
    println!(
        "{per_reader} B resident per stalled reader of a {} MiB replay",
        (EVENTS * EVENT) >> 20
    );
    assert!(
        per_reader < BUDGET_PER_READER,
        "{per_reader} B per stalled reader (budget {BUDGET_PER_READER})"
    );
    drop(stalled);
    server.shutdown().await;
}
