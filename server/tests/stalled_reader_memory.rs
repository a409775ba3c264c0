//! A reader that never reads costs bounded memory and slows no one down:
//! with one SSE reader that stopped reading and 50 MiB of 1 KiB events
//! emitted into its session (server-default ring, 4 MiB), the process stays
//! under twice the ring's bytes plus 64 MiB resident, and another session
//! answers every request within a second throughout.
//!
//! Its own test binary, so no other test allocates in the process while
//! RSS is measured. Linux only (RSS from `/proc/self/statm`).
#![cfg(target_os = "linux")]

use gapless_client::Client;
use gapless_server::{spawn, ServerConfig};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

const EVENT: usize = 1 << 10;
const TOTAL: usize = 50 << 20;
const EMITTERS: usize = 8;

#[path = "common/rss.rs"]
mod rss;

/// Resident bytes of this process.
fn rss() -> u64 {
    rss::resident_bytes("self")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_reader_costs_bounded_memory_and_slows_no_one() {
    let config = ServerConfig::default();
    let budget = 2 * config.ring_bytes as u64 + (64 << 20);
    let server = spawn(config, "127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("spawn");
    let client = Client::new(server.url())
        .expect("client")
        .with_timeout(Duration::from_secs(30));
    let stalled = client.create_session().await.expect("session");
    let other = client.create_session().await.expect("session");

    // The stalled reader: an SSE request on a raw socket, never read.
    let mut tcp = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connect");
    let request = format!(
        "GET /session/{}/events HTTP/1.1\r\nhost: x\r\naccept: text/event-stream\r\n\r\n",
        stalled.session
    );
    tcp.write_all(request.as_bytes()).await.expect("request");

    // Another session is asked for its state every 50 ms throughout.
    // A request that fails (10 s client timeout) is counted, not panicked
    // on: a panic in this task would go unseen once it is aborted.
    let slowest_ms = Arc::new(AtomicU64::new(0));
    let unanswered = Arc::new(AtomicU64::new(0));
    let watcher = {
        let client = client.clone().with_timeout(Duration::from_secs(10));
        let session = other.session.clone();
        let (slowest_ms, unanswered) = (Arc::clone(&slowest_ms), Arc::clone(&unanswered));
        tokio::spawn(async move {
            loop {
                let started = Instant::now();
                let answered = client.state(&session).await.is_ok();
                let took = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                slowest_ms.fetch_max(took, Ordering::Relaxed);
                if !answered {
                    unanswered.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(50)).await; // pacing, not synchronisation
            }
        })
    };

    let peak = Arc::new(AtomicU64::new(rss()));
    let pad = "x".repeat(EVENT - 16);
    let per_emitter = TOTAL / EVENT / EMITTERS;
    let emitters: Vec<_> = (0..EMITTERS)
        .map(|k| {
            let client = client.clone();
            let session = stalled.session.clone();
            let pad = pad.clone();
            let peak = Arc::clone(&peak);
            tokio::spawn(async move {
                for n in 0..per_emitter {
                    let body = format!(r#"{{"k":{k},"n":{n},"p":"{pad}"}}"#);
                    client.emit_raw(&session, body).await.expect("emit");
                    if n % 256 == 0 {
                        peak.fetch_max(rss(), Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for emitter in emitters {
        emitter.await.expect("emitter");
    }
    peak.fetch_max(rss(), Ordering::Relaxed);
    watcher.abort();

    let peak = peak.load(Ordering::Relaxed);
    let slowest = slowest_ms.load(Ordering::Relaxed);
    println!(
        "peak RSS {:.1} MiB (budget {:.1} MiB), slowest answer of another session {slowest} ms",
        peak as f64 / f64::from(1 << 20),
        budget as f64 / f64::from(1 << 20)
    );
    assert!(
        peak < budget,
        "peak RSS {peak} B over the budget {budget} B"
    );
    // A server held up by the stalled write would keep others waiting for
    // its 30 s write timeout; 5 s leaves room for a busy machine.
    let unanswered = unanswered.load(Ordering::Relaxed);
    assert_eq!(unanswered, 0, "another session's state went unanswered");
    assert!(
        slowest < 5000,
        "another session took {slowest} ms to answer"
    );
    let state = client.state(&stalled.session).await.expect("state");
    assert_eq!(state.published, (per_emitter * EMITTERS) as u64);
    drop(tcp);
    server.shutdown().await;
}
