//! What the tests share: instances of `gapless-server serve --redis` (or
//! `--redis-cluster`), and clients that emit and read the way a careful
//! client does.

use crate::redis_cluster::RedisCluster;
use crate::redis_server::RedisServer;
use crate::support::{launch, ChildGuard, IO};
use gapless::EventId;
use gapless_client::{Client, ClientError, Incoming, SseStream};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long a test waits for a recovery at most.
pub const RECOVERY: Duration = Duration::from_secs(20);

/// Where instances keep the shared history.
pub trait Deployment {
    /// The `serve` flags that name it.
    fn flags(&self) -> Vec<String>;

    /// The instances' `--redis-timeout`, in seconds, unless a test sets
    /// one.
    fn redis_timeout(&self) -> &'static str;
}

impl Deployment for RedisServer {
    /// `--redis URL`.
    fn flags(&self) -> Vec<String> {
        vec!["--redis".into(), self.url()]
    }

    /// 1 s: the failover tests kill and pause this Redis, and wait for
    /// the instances to answer 503 within their bound.
    fn redis_timeout(&self) -> &'static str {
        "1"
    }
}

impl Deployment for RedisCluster {
    /// `--redis-cluster URL,URL,URL`: every node a seed.
    fn flags(&self) -> Vec<String> {
        vec!["--redis-cluster".into(), self.urls().join(",")]
    }

    /// 10 s: no cluster test takes a node down, so a node stalled by the
    /// machine (three Redis processes and two instances on two cores, a
    /// disk flush) must slow a test, never fail it.
    fn redis_timeout(&self) -> &'static str {
        "10"
    }
}

/// An instance of `gapless-server serve` over `redis` with its
/// [`Deployment::redis_timeout`] (unless `extra` sets one) and `extra`
/// flags.
pub async fn instance(redis: &impl Deployment, extra: &[&str]) -> (ChildGuard, Client) {
    let flags = redis.flags();
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    if !extra.contains(&"--redis-timeout") {
        args.extend(["--redis-timeout", redis.redis_timeout()]);
    }
    args.extend_from_slice(extra);
    launch(&args, &[]).await
}

/// The payload an emitter sends: unique per `(emitter, index)`.
pub fn payload(emitter: usize, index: u64) -> String {
    json!({ "emitter": emitter, "index": index }).to_string()
}

/// Emits `payload(0, index)` for each index of `indices`, in order, every
/// one accepted at once.
pub async fn emit_all(client: &Client, session: &str, indices: std::ops::Range<u64>) {
    for index in indices {
        if let Err(error) = client.emit_raw(session, payload(0, index)).await {
            panic!("emit {index}: {error}");
        }
    }
}

/// Emits `payload`, retrying while the answer is `503
/// history_unavailable` (a Redis restart in progress), until
/// [`RECOVERY`]. The `503`s seen are returned with the ID.
pub async fn emit_retrying(
    client: &Client,
    session: &str,
    payload: &str,
) -> (EventId, Vec<String>) {
    let deadline = Instant::now() + RECOVERY;
    let mut refused = Vec::new();
    loop {
        match client.emit_raw(session, payload.to_owned()).await {
            Ok(id) => return (id, refused),
            Err(ClientError::Unavailable { code, .. }) if Instant::now() < deadline => {
                refused.push(code);
                tokio::time::sleep(Duration::from_millis(50)).await; // Retry-After, bounded
            }
            Err(error) => {
                let mut by_code = std::collections::BTreeMap::<&str, usize>::new();
                for code in &refused {
                    *by_code.entry(code.as_str()).or_default() += 1;
                }
                panic!("emit {payload}: {error} (after {by_code:?})")
            }
        }
    }
}

/// Opens an SSE stream from seq 0, retrying while the answer is a `503`
/// (the instance's connection to Redis recovering), until [`RECOVERY`].
pub async fn open_sse_retrying(client: &Client, session: &str) -> SseStream {
    let deadline = Instant::now() + RECOVERY;
    loop {
        match client.open_sse(session, None).await {
            Ok(stream) => return stream,
            Err(ClientError::Unavailable { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await; // Retry-After, bounded
            }
            Err(error) => panic!("SSE on {}: {error}", client.base_url()),
        }
    }
}

/// What a reader received, by seq.
#[derive(Debug, Default)]
pub struct Received {
    pub events: BTreeMap<u64, String>,
    pub last: u64,
}

impl Received {
    /// Records one event, failing on anything but `last + 1`.
    pub fn record(&mut self, id: EventId, data: String, epoch: u64) {
        assert_eq!(id.epoch, epoch, "event {id} of a foreign epoch");
        assert_eq!(
            id.seq,
            self.last + 1,
            "after {} came {} (a hole, a duplicate or a reordering)",
            self.last,
            id.seq
        );
        self.events.insert(id.seq, data);
        self.last = id.seq;
    }

    /// Reads `stream` until an event with seq at least `through` came.
    pub async fn read_through(&mut self, stream: &mut SseStream, through: u64, epoch: u64) {
        while self.last < through {
            match tokio::time::timeout(IO, stream.next_item()).await {
                Ok(Ok(Incoming::Event(event))) => self.record(event.id, event.data, epoch),
                Ok(other) => panic!("reading through {through}: {other:?} after {}", self.last),
                Err(_) => panic!(
                    "reading through {through}: nothing within {IO:?} after {}",
                    self.last
                ),
            }
        }
    }
}

/// Emits `count` payloads to each of `sessions` (ID, epoch) at once, one
/// emitter per session, each emit through the other instance than that
/// session's previous one (a round-robin balancer). Every emit must be
/// accepted, each session's seqs must be exactly `1..=count`, and a reader
/// on either instance must get every payload at the seq its `202` named.
pub async fn round_robin(clients: [&Client; 2], sessions: &[(String, u64)], count: u64) {
    let emitters = sessions
        .iter()
        .enumerate()
        .map(|(emitter, (session, _))| async move {
            let mut acked = BTreeMap::new();
            for index in 0..count {
                let client = clients[usize::from(index % 2 == 1)];
                let body = payload(emitter, index);
                let id = client
                    .emit_raw(session, body.clone())
                    .await
                    .unwrap_or_else(|error| panic!("emit {index} to {session}: {error}"));
                assert!(
                    acked.insert(id.seq, body).is_none(),
                    "{session}: seq {} twice",
                    id.seq
                );
            }
            assert_eq!(
                acked.keys().copied().collect::<Vec<_>>(),
                (1..=count).collect::<Vec<_>>(),
                "{session}"
            );
            acked
        });
    let acked = futures_util::future::join_all(emitters).await;
    for ((session, epoch), acked) in sessions.iter().zip(acked) {
        for client in clients {
            let mut received = Received::default();
            let mut stream = client.open_sse(session, None).await.expect("SSE");
            received.read_through(&mut stream, count, *epoch).await;
            assert_eq!(received.events, acked, "{session} on {}", client.base_url());
        }
    }
}
