//! Emits per second through the reference server, in-process rings only
//! against `--redis` write-through (what one round trip to Redis per batch
//! of emits costs), side by side in one run.
//!
//! # What runs
//!
//! Servers in this process on loopback, identical but for the history:
//! `in_process` (the default: the ring is the whole history), `redis`
//! (`ServerConfig::redis`: every emit is appended to a Redis Stream by a
//! Lua script before its `202`, which gives it its seq; an instance batches
//! up to 64 waiting emits of a session per script call), and
//! `redis_round_robin`: two such instances sharing the Redis, each emitter
//! alternating between them as a round-robin balancer would. Redis is a real `redis-server` (Debian's package)
//! started by the bench on a free loopback port, memory only
//! (`--appendonly no`): the figures are the protocol's cost, not a disk's.
//!
//! Per iteration: `E` emitters post `K` emits each, one at a time
//! (`POST /session/{id}/events`, 202 awaited before the next), spread over
//! `N` sessions created beforehand; the clock covers all `E × K` emits.
//! Scenarios: `N = 1, E = 1` (one session, one client: pure latency);
//! `N = 64, E = 64` (many sessions, one emitter each: the shared
//! connection to Redis pipelines their scripts); `N = 1, E = 16` (one
//! session, concurrent emitters: group commit batches them per instance).
//! `Throughput::Elements` is `E × K`, so criterion prints emits/s.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use gapless_client::Client;
use gapless_history::test_support::{Persistence, RedisServer};
use gapless_server::{spawn, HistoryConfig, RunningServer, ServerConfig};
use std::time::{Duration, Instant};

/// Emits per emitter per iteration.
const K: usize = 64;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

async fn server(redis: Option<&RedisServer>) -> (RunningServer, Client) {
    let config = ServerConfig {
        redis: redis.map(|redis| HistoryConfig {
            url: redis.url(),
            cluster: false,
            timeout: Duration::from_secs(5),
            retention: 4096,
            retention_bytes: 4 << 20,
            ca_file: None,
            idle: Duration::from_secs(600),
        }),
        ..ServerConfig::default()
    };
    let server = spawn(config, "127.0.0.1:0".parse().expect("an address"))
        .await
        .expect("the server starts");
    let client = Client::new(server.url())
        .expect("a client")
        .with_timeout(Duration::from_secs(10));
    (server, client)
}

/// `emitters` tasks posting `K` emits each into `sessions` round robin;
/// emitter `e`'s `i`-th emit goes to instance `(e + i) % instances` (a
/// round-robin balancer in front of them).
async fn emit_all(clients: &[Client], sessions: &[String], emitters: usize) -> Duration {
    let started = Instant::now();
    let tasks: Vec<_> = (0..emitters)
        .map(|e| {
            let clients = clients.to_vec();
            let session = sessions[e % sessions.len()].clone();
            tokio::spawn(async move {
                for i in 0..K {
                    let body =
                        format!(r#"{{"e":{e},"i":{i},"pad":"0123456789abcdef0123456789abcdef"}}"#);
                    let client = &clients[(e + i) % clients.len()];
                    client.emit_raw(&session, body).await.expect("emit");
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("emitter");
    }
    started.elapsed()
}

fn history(c: &mut Criterion) {
    let rt = runtime();
    let redis = RedisServer::start(Persistence::None);
    let (in_process, client_in_process) = rt.block_on(server(None));
    let (with_redis, client_redis) = rt.block_on(server(Some(&redis)));
    let (second, client_second) = rt.block_on(server(Some(&redis)));
    let one_process = [client_in_process];
    let one_instance = [client_redis.clone()];
    let two_instances = [client_redis, client_second];
    let mut group = c.benchmark_group("emit");
    group.sample_size(20);
    for (sessions, emitters) in [(1usize, 1usize), (64, 64), (1, 16)] {
        group.throughput(Throughput::Elements((emitters * K) as u64));
        for (name, clients) in [
            ("in_process", &one_process[..]),
            ("redis", &one_instance[..]),
            ("redis_round_robin", &two_instances[..]),
        ] {
            let client = &clients[0];
            let ids: Vec<String> = rt.block_on(async {
                let mut ids = Vec::new();
                for _ in 0..sessions {
                    ids.push(client.create_session().await.expect("session").session);
                }
                ids
            });
            group.bench_with_input(
                BenchmarkId::new(name, format!("{sessions}_sessions_{emitters}_emitters")),
                &ids,
                |b, ids| {
                    b.iter_custom(|iters| {
                        rt.block_on(async {
                            let mut total = Duration::ZERO;
                            for _ in 0..iters {
                                total += emit_all(clients, ids, emitters).await;
                            }
                            total
                        })
                    });
                },
            );
        }
    }
    group.finish();
    rt.block_on(async {
        in_process.shutdown().await;
        with_redis.shutdown().await;
        second.shutdown().await;
    });
    drop(redis);
}

criterion_group!(benches, history);
criterion_main!(benches);
