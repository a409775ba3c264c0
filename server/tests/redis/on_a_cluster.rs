//! The several-instances scenarios over a Redis Cluster of three local
//! primaries (`serve --redis-cluster`): a client resumes on the instance
//! that does not own its session, and emits round-robin through two
//! instances for sessions whose slots are on every node.

use crate::cluster::{instance, round_robin};
use crate::redis_cluster::RedisCluster;
use crate::resume_anywhere::migrate;
use crate::support::bounded;

/// [`migrate`] (resume anywhere, no event lost or duplicated, cursors
/// legitimate on both instances) with the session's keys on one node of
/// three.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_migrates_between_instances_over_a_cluster() {
    bounded("resume anywhere on a cluster", async {
        migrate(&RedisCluster::start()).await;
    })
    .await;
}

/// Sessions on all three nodes, created on both instances; 40 emits to
/// each, all sessions at once (so an instance's group commit has batches
/// of sessions of several slots waiting together), each emit through the
/// other instance than the previous: all accepted, each session's seqs
/// dense, every payload read back on both instances at its seq.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn round_robin_emits_for_sessions_on_every_node_are_all_accepted_in_dense_orders() {
    bounded("round robin on a cluster", async {
        let redis = RedisCluster::start();
        let (_a, client_a) = instance(&redis, &[]).await;
        let (_b, client_b) = instance(&redis, &[]).await;
        let mut sessions = Vec::new();
        for index in 0..48 {
            let client = if index % 2 == 0 { &client_a } else { &client_b };
            let created = client.create_session().await.expect("create");
            sessions.push((created.session.clone(), created.epoch));
        }
        let keys = redis.keys_per_node();
        assert!(
            keys.iter().all(|keys| *keys > 0),
            "48 sessions leave a node without keys: {keys:?}"
        );
        round_robin([&client_a, &client_b], &sessions, 40).await;
    })
    .await;
}
