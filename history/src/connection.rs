//! The connection every call to the shared history goes through: one
//! Redis or a Redis Cluster, behind one type.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, Slot};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};

/// The connection every call goes through. Both are multiplexed, cheap to
/// clone, and reconnect by themselves; the calls use them as
/// [`ConnectionLike`], and only the group commit ([`Connection::group`])
/// and the durability probe ([`Connection::on_every_primary`]) see which.
#[derive(Clone)]
pub(crate) enum Connection {
    /// One Redis (`--redis`).
    Single(ConnectionManager),
    /// A Redis Cluster (`--redis-cluster`): a connection per primary,
    /// each call sent to the node that owns its first key's slot (a
    /// script's first `KEYS`), `SCRIPT LOAD` to every node. Never retried
    /// (`retries(0)`): a `MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN` or a
    /// broken node connection fails that call (`503
    /// history_unavailable`, as a Redis restart does on one node), and the
    /// connection repairs itself for the next: a `MOVED` refreshes the slot
    /// map, a broken connection is reconnected. An append retried after
    /// its reply was lost could land twice.
    Cluster(ClusterConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(connection) => connection.req_packed_command(cmd),
            Self::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(connection) => connection.req_packed_commands(pipeline, offset, count),
            Self::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(connection) => connection.get_db(),
            Self::Cluster(connection) => connection.get_db(),
        }
    }
}

impl Connection {
    /// Which sessions may be appended in one script call with the session
    /// whose keys are named like `key()`: on one Redis all (`None`, `key`
    /// not called), on a cluster those of its slot (a script's keys must
    /// share one).
    pub(crate) fn group(&self, key: impl FnOnce() -> String) -> Option<Slot> {
        match self {
            Self::Single(_) => None,
            Self::Cluster(_) => Some(Slot::for_key(key())),
        }
    }

    /// `cmd`'s answer from every primary: the one Redis, or each primary
    /// of the cluster (in no particular order).
    pub(crate) async fn on_every_primary(&self, cmd: &Cmd) -> Result<Vec<Value>, RedisError> {
        match self {
            Self::Single(connection) => {
                let mut connection = connection.clone();
                Ok(vec![cmd.query_async(&mut connection).await?])
            }
            Self::Cluster(connection) => {
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                match connection
                    .clone()
                    .route_command(cmd.clone(), routing)
                    .await?
                {
                    Value::Map(answers) => {
                        Ok(answers.into_iter().map(|(_, answer)| answer).collect())
                    }
                    answer => Ok(vec![answer]),
                }
            }
        }
    }
}
