//! A Redis Cluster of three local primaries for one test: three
//! `redis-server --cluster-enabled yes` (each a [`RedisServer`] on a free
//! loopback port, in its own directory with its own `nodes.conf`, memory
//! only), joined by `redis-cli --cluster create` (Debian's redis-tools)
//! with the 16384 slots split among them and no replicas. Ready once
//! every node's `CLUSTER INFO` says `cluster_state:ok`; every node is
//! killed and its files removed on drop.

use crate::redis_server::{Persistence, RedisServer};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long the three nodes may take to agree on the slots.
const FORMING: Duration = Duration::from_secs(30);

/// The three primaries of a running cluster, killed on drop.
pub struct RedisCluster {
    /// Every node, in the order `--cluster create` got them; together
    /// they own every slot.
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three nodes, creates the cluster and waits until each node
    /// sees it whole (bounded polling).
    pub fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::start_with(Persistence::None, &["--cluster-enabled", "yes"]))
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect();
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli (Debian's redis-tools)");
        assert!(
            output.status.success(),
            "redis-cli --cluster create {addresses:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = Self { nodes };
        let deadline = Instant::now() + FORMING;
        while !cluster
            .nodes
            .iter()
            .all(|node| node.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        {
            assert!(
                Instant::now() < deadline,
                "the cluster {addresses:?} was not ok on every node within {FORMING:?}"
            );
            std::thread::sleep(Duration::from_millis(50)); // polling, bounded
        }
        cluster
    }

    /// Every node's `redis://127.0.0.1:PORT`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The keys each node holds (`DBSIZE`), in node order.
    pub fn keys_per_node(&self) -> Vec<u64> {
        self.nodes
            .iter()
            .map(|node| {
                let answer = node.cli(&["DBSIZE"]);
                answer
                    .parse()
                    .unwrap_or_else(|_| panic!("DBSIZE answered {answer:?}"))
            })
            .collect()
    }
}
