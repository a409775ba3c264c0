//! [`History`] over Redis: the scripts, and one multiplexed reconnecting
//! connection for every call (nothing blocks on it: mirrors learn of new
//! events from the [`notify`](super::notify) connection and read them
//! here).
//!
//! The connection is one Redis or a Redis Cluster ([`Connection`]); the
//! calls do not tell them apart. Every key of a session is in the slot of
//! its hash tag `{id}`, so each per-session call is a single-slot one, and
//! a cluster routes it by its first key. The group commit puts sessions
//! of one slot only in one script call on a cluster ([`take_group`]).

use super::connection::Connection;
use super::group_commit::{Commits, Pending, Spawner, REFUSED};
use super::keys::{admission_ttl, keys_ttl, ms, Keys};
use super::reply::{bounded, caller_meta, entries, parse_epoch, parse_seq, text_of, unavailable};
use super::{
    Admission, Guard, History, HistoryConfig, HistoryError, Known, Meta, MetaUpdate, Snapshot,
    Updated,
};
use crate::ids::LogId;
use crate::notify::{Followed, Notifier};
use bytes::Bytes;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::{Client, IntoConnectionInfo, RedisError, Script, Value};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::time::Instant;

/// Payload bytes read per call at most when a ring catches up with the
/// history or a session is loaded (a page never has fewer than one event
/// nor more than 512).
pub const READ_BYTES: usize = 256 << 10;

/// The append script's Lua source (`append.lua`, see the crate docs): for
/// tools that must write exactly as the history does (the server's
/// `plan --redis` probe).
pub const APPEND_SCRIPT: &str = include_str!("append.lua");

/// The shared history of every session, in one Redis or one Redis
/// Cluster.
pub struct RedisHistory {
    /// A client for the first node of the URL (the whole Redis, or a
    /// cluster's first seed): the announcement connection's. A cluster
    /// broadcasts every `PUBLISH` to all its nodes, so one node hears the
    /// appends of every slot.
    client: Client,
    connection: Connection,
    config: HistoryConfig,
    scripts: Scripts,
    /// Whether Redis persists every write before answering (probed at
    /// connect): then a restart alone does not move sessions to a new
    /// epoch (see `append.lua`).
    lossless: AtomicBool,
    /// Appends waiting to go to Redis, several logs per script call.
    commits: Arc<Commits>,
    /// The one connection that hears of every append, for the logs
    /// followed here: started by the first [`History::follow`].
    notifier: OnceLock<Arc<Notifier>>,
}

/// The Lua scripts, sent by SHA (`EVALSHA`) and loaded again on
/// `NOSCRIPT` (after a Redis restart).
struct Scripts {
    create: Script,
    append: Script,
    update: Script,
    read: Script,
    complete: Script,
    admission: Script,
}

impl RedisHistory {
    /// Connects to the Redis at `config.url` (or the Redis Cluster of its
    /// seeds) and checks that it answers.
    ///
    /// # Errors
    /// A malformed URL, an unreadable `--redis-ca-file`, a cluster whose
    /// slot map cannot be read in time, or a Redis that does not answer
    /// `PING` in time.
    pub async fn connect(config: HistoryConfig) -> Result<Self, HistoryError> {
        let redacted = config.redacted_url();
        let seeds = config.seeds();
        // The crate's own words, with the URLs (and so their credentials)
        // never in them.
        let not_a_url = |e: RedisError| {
            let mut words = e.to_string().replace(config.url.as_str(), &redacted);
            for (seed, shown) in seeds.iter().zip(redacted.split(',')) {
                words = words.replace(seed, shown.trim());
            }
            HistoryError::Unavailable(format!("{redacted}: {words}"))
        };
        let first = seeds.first().copied().unwrap_or_default();
        let root_cert = match &config.ca_file {
            None => None,
            Some(path) => Some(std::fs::read(path).map_err(|error| {
                HistoryError::Unavailable(format!(
                    "{redacted}: --redis-ca-file {}: {error}",
                    path.display()
                ))
            })?),
        };
        let certificates = || redis::TlsCertificates {
            client_tls: None,
            root_cert: root_cert.clone(),
        };
        // Without `TCP_NODELAY` (the crate's default is off), Nagle holds
        // each pipelined call until the previous one is acknowledged: the
        // calls in flight then go one at a time (measured: 1,300 calls/s).
        let tcp = redis::io::tcp::TcpSettings::default().set_nodelay(true);
        let info = first
            .into_connection_info()
            .map_err(not_a_url)?
            .set_tcp_settings(tcp.clone());
        let client = match &root_cert {
            None => Client::open(info).map_err(not_a_url)?,
            Some(_) => Client::build_with_tls(info, certificates()).map_err(not_a_url)?,
        };
        let connection = if config.cluster {
            let mut cluster = ClusterClient::builder(seeds.iter().copied())
                .connection_timeout(config.timeout)
                .response_timeout(config.timeout)
                .tcp_settings(tcp)
                .retries(0);
            if root_cert.is_some() {
                cluster = cluster.certs(certificates());
            }
            let cluster = cluster.build().map_err(not_a_url)?;
            // Connects to every node it learns of from the seeds.
            let connection = bounded(config.timeout, cluster.get_async_connection())
                .await
                .map_err(|error| match error {
                    HistoryError::Unavailable(cause) => HistoryError::Unavailable(format!(
                        "{redacted}: {}",
                        cause.replace(config.url.as_str(), &redacted)
                    )),
                    other => other,
                })?;
            Connection::Cluster(connection)
        } else {
            // Our own deadline bounds every call; the manager's retries
            // only shorten the outage after Redis comes back.
            let manager = ConnectionManagerConfig::new()
                .set_response_timeout(Some(config.timeout))
                .set_connection_timeout(Some(config.timeout))
                .set_number_of_retries(2)
                .set_min_delay(Duration::from_millis(50))
                .set_max_delay(Duration::from_millis(500));
            Connection::Single(
                ConnectionManager::new_lazy_with_config(client.clone(), manager)
                    .map_err(unavailable)?,
            )
        };
        let history = Self {
            client,
            connection,
            config,
            scripts: Scripts {
                create: Script::new(include_str!("create.lua")),
                append: Script::new(APPEND_SCRIPT),
                update: Script::new(include_str!("update_meta.lua")),
                read: Script::new(include_str!("read.lua")),
                complete: Script::new(include_str!("complete.lua")),
                admission: Script::new(include_str!("admission.lua")),
            },
            lossless: AtomicBool::new(false),
            commits: Arc::default(),
            notifier: OnceLock::new(),
        };
        history.ping().await.map_err(|error| match error {
            // Name the Redis (never its credentials) in a startup failure.
            HistoryError::Unavailable(cause) => {
                HistoryError::Unavailable(format!("{}: {cause}", history.config.redacted_url()))
            }
            other => other,
        })?;
        history.probe_durability().await;
        Ok(history)
    }

    /// Whether this Redis can lose writes it acknowledged: not unless it
    /// has `appendonly yes` and `appendfsync always` (`CONFIG GET`; a
    /// managed Redis may refuse it: then it may). On a cluster, every
    /// primary is asked, and all must have both. Logged once; appends
    /// tell the script (see `append.lua`). Replication is not considered:
    /// a replica promoted after a failover is found by its `run_id`.
    ///
    /// Also whether it may delete a log's keys by itself: the design
    /// needs `maxmemory-policy noeviction` on every primary (a Redis out
    /// of memory then refuses appends, answered unavailable, and deletes
    /// nothing); any other policy may evict a stream or a sizes list under
    /// memory pressure, and that log then answers [`HistoryError::Damaged`]
    /// (or [`HistoryError::Gone`], its meta evicted) for good. Logged
    /// once; the policies found are returned when they are not all
    /// `noeviction` (`None` when they are).
    pub(crate) async fn probe_durability(&self) -> Option<String> {
        let appendonly = self.config_get("appendonly").await;
        let appendfsync = self.config_get("appendfsync").await;
        let policy = self.config_get("maxmemory-policy").await;
        let all = |settings: &[Option<String>], wanted: &str| {
            !settings.is_empty()
                && settings
                    .iter()
                    .all(|setting| setting.as_deref() == Some(wanted))
        };
        let found = |settings: &[Option<String>]| {
            let settings: Vec<&str> = settings
                .iter()
                .map(|setting| setting.as_deref().unwrap_or("unknown"))
                .collect();
            if settings.is_empty() {
                "unknown".to_owned()
            } else {
                settings.join(",")
            }
        };
        let lossless = all(&appendonly, "yes") && all(&appendfsync, "always");
        self.lossless.store(lossless, Ordering::Relaxed);
        if lossless {
            tracing::info!(
                "Redis persists every append before answering (appendonly yes, appendfsync always): a restart loses no acknowledged event"
            );
        } else {
            tracing::warn!(
                appendonly = %found(&appendonly),
                appendfsync = %found(&appendfsync),
                "Redis can lose acknowledged events (it needs appendonly yes and appendfsync always): a session appended to after a Redis restart continues under a new epoch, and a client holding an earlier cursor is answered 409 foreign_epoch"
            );
        }
        let evicts = if all(&policy, "noeviction") {
            tracing::info!(
                "Redis never evicts a log's keys (maxmemory-policy noeviction): out of memory, it refuses appends instead"
            );
            None
        } else {
            let policy = found(&policy);
            tracing::warn!(
                maxmemory_policy = %policy,
                "Redis may evict a log's keys under memory pressure (it needs maxmemory-policy noeviction): a log whose stream or sizes list is evicted is damaged for good (its appends are refused, a permanent error), and one whose meta is evicted is gone"
            );
            Some(policy)
        };
        let infos = self
            .call(
                self.connection
                    .on_every_primary(redis::cmd("INFO").arg("server")),
            )
            .await
            .unwrap_or_default();
        let has_run_id = |info: Value| {
            text_of(info).is_ok_and(|info| info.lines().any(|line| line.starts_with("run_id:")))
        };
        if infos.is_empty() || !infos.into_iter().all(has_run_id) {
            tracing::warn!(
                "Redis shows no run_id (INFO server): a Redis restart that lost events is found only by an instance that had seen them"
            );
        }
        evicts
    }

    /// Runs the history's background tasks (the group commit's flushing
    /// task and its script calls) with `spawner` from now on — the
    /// server's tracked tasks, so that its shutdown waits for appends in
    /// flight and drops them at its hard stop; until then, and if a
    /// spawner was set already, they are spawned with `tokio::spawn` (the
    /// first spawner stays). The announcement connection's task is not one
    /// of them: it runs until the history is dropped.
    pub fn set_spawner(&self, spawner: Spawner) {
        if !self.commits.set_spawner(spawner) {
            tracing::debug!("the history's spawner was set already; kept");
        }
    }

    /// A setting of Redis (`CONFIG GET`) on every primary; `None` where
    /// refused or unknown, nothing if no primary answered.
    async fn config_get(&self, name: &str) -> Vec<Option<String>> {
        let answers = self
            .call(
                self.connection
                    .on_every_primary(redis::cmd("CONFIG").arg("GET").arg(name)),
            )
            .await
            .unwrap_or_default();
        answers
            .into_iter()
            .map(|answer| match answer {
                Value::Array(pair) | Value::Set(pair) => pair.into_iter().nth(1),
                Value::Map(pairs) => pairs.into_iter().next().map(|(_, value)| value),
                _ => None,
            })
            .map(|value| value.and_then(|value| text_of(value).ok()))
            .collect()
    }

    /// Runs one call under the deadline, typing its error.
    async fn call<T>(
        &self,
        call: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T, HistoryError> {
        bounded(self.config.timeout, call).await
    }

    /// A client for the same Redis (for the announcement connection).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// Whether Redis answers.
    pub async fn ping(&self) -> Result<(), HistoryError> {
        let mut connection = self.connection.clone();
        self.call(redis::cmd("PING").query_async::<String>(&mut connection))
            .await
            .map(drop)
    }

    /// The announcement connection, started by the first
    /// [`History::follow`].
    fn notifier(&self) -> &Arc<Notifier> {
        self.notifier
            .get_or_init(|| Notifier::start(self.client.clone(), self.config.timeout))
    }

    /// One read (`read.lua`): the log's meta (only the caller fields
    /// `fields` names, if given) and its events after `after`.
    async fn read(
        &self,
        id: &LogId,
        after: u64,
        max_bytes: usize,
        fields: Option<&[&str]>,
    ) -> Result<Option<Snapshot>, HistoryError> {
        let value: Value = self
            .run(&self.scripts.read, id, |invocation| {
                invocation
                    .arg(after)
                    .arg(max_bytes)
                    .arg(keys_ttl(self.config.idle));
                if let Some(fields) = fields {
                    invocation.arg(fields.len());
                    for name in fields {
                        invocation.arg(*name);
                    }
                }
            })
            .await?;
        let items = match value {
            Value::Nil => return Ok(None),
            Value::Array(items) if items.len() == 5 => items,
            other => return Err(HistoryError::Corrupt(format!("read answered {other:?}"))),
        };
        let mut items = items.into_iter();
        let mut next = || items.next().unwrap_or(Value::Nil);
        let epoch = parse_epoch(&text_of(next())?)?;
        let published = parse_seq(&text_of(next())?)?;
        let events = entries(next())?;
        let first_retained = parse_seq(&text_of(next())?)?;
        let meta = caller_meta(next())?;
        Ok(Some(Snapshot {
            epoch,
            published,
            first_retained,
            events,
            meta,
        }))
    }

    /// One call of `admission.lua` on admission set `set`: its answer and
    /// the set's live members after it.
    async fn admission(
        &self,
        set: &str,
        operation: &str,
        member: &str,
        ttl: Duration,
        limit: u64,
    ) -> Result<(i64, u64), HistoryError> {
        let mut connection = self.connection.clone();
        let mut invocation = self.scripts.admission.prepare_invoke();
        invocation
            .key(Keys::admission(set))
            .arg(operation)
            .arg(member)
            .arg(admission_ttl(ttl))
            .arg(limit);
        let answer: Vec<i64> = self.call(invocation.invoke_async(&mut connection)).await?;
        match answer[..] {
            [answer, count] => Ok((
                answer,
                u64::try_from(count).map_err(|_| {
                    HistoryError::Corrupt(format!("admission set {set} counts {count}"))
                })?,
            )),
            _ => Err(HistoryError::Corrupt(format!(
                "admission answered {answer:?}"
            ))),
        }
    }

    /// Runs `script` on log `id`'s keys (meta, stream, sizes) with `args`.
    async fn run<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        id: &LogId,
        args: impl FnOnce(&mut redis::ScriptInvocation<'_>),
    ) -> Result<T, HistoryError> {
        let keys = Keys::of(id);
        let mut connection = self.connection.clone();
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&keys.meta)
            .key(&keys.stream)
            .key(&keys.sizes);
        args(&mut invocation);
        self.call(invocation.invoke_async(&mut connection)).await
    }
}

impl History for RedisHistory {
    type Follower = Followed;

    /// The configuration this history was opened with.
    fn config(&self) -> &HistoryConfig {
        &self.config
    }

    async fn create(&self, id: &LogId, epoch: u64, meta: &Meta) -> Result<bool, HistoryError> {
        let created: i64 = self
            .run(&self.scripts.create, id, |invocation| {
                invocation
                    .arg(format!("{epoch:016x}"))
                    .arg(keys_ttl(self.config.idle));
                for (name, value) in meta {
                    invocation.arg(name).arg(value);
                }
            })
            .await?;
        Ok(created == 1)
    }

    /// Appends `payloads` as the log's next seqs if the guard holds,
    /// trimming the log to the ring's limits; the epoch and the first seq.
    /// Durable in Redis (to its persistence settings) when this returns
    /// `Ok`. Offers the script the guard's epoch (or a fresh random one),
    /// taken if the log lost events.
    async fn append_guarded(
        &self,
        id: &LogId,
        known: Known,
        payloads: &[Bytes],
        guard: &Guard,
        deadline: Instant,
    ) -> Result<Option<(u64, u64)>, HistoryError> {
        let answer = self
            .commits
            .append(
                &self.connection,
                &self.scripts.append,
                &self.config,
                self.lossless.load(Ordering::Relaxed),
                Pending {
                    id: *id,
                    known,
                    payloads: payloads.to_vec(),
                    guard: guard.clone(),
                },
                deadline,
            )
            .await?;
        Ok((answer != REFUSED).then_some(answer))
    }

    async fn after(
        &self,
        id: &LogId,
        after: u64,
        max_bytes: usize,
    ) -> Result<Option<Snapshot>, HistoryError> {
        self.read(id, after, max_bytes, None).await
    }

    /// `read.lua` given the names: it reads them and the log's own fields
    /// with `HMGET`, never the whole meta.
    async fn after_fields(
        &self,
        id: &LogId,
        after: u64,
        max_bytes: usize,
        fields: &[&str],
    ) -> Result<Option<Snapshot>, HistoryError> {
        self.read(id, after, max_bytes, Some(fields)).await
    }

    fn follow(&self, id: &LogId) -> Followed {
        self.notifier().follow(*id)
    }

    async fn complete(&self, id: &LogId, grace: Duration) -> Result<bool, HistoryError> {
        let completed: i64 = self
            .run(&self.scripts.complete, id, |invocation| {
                invocation.arg(ms(grace).max(1));
            })
            .await?;
        Ok(completed == 1)
    }

    async fn delete(&self, id: &LogId) -> Result<bool, HistoryError> {
        let keys = Keys::of(id);
        let mut connection = self.connection.clone();
        self.call(
            redis::cmd("DEL")
                .arg(&keys.stream)
                .arg(&keys.meta)
                .arg(&keys.sizes)
                .query_async::<i64>(&mut connection),
        )
        .await
        .map(|deleted| deleted > 0)
    }

    async fn update_meta(&self, id: &LogId, update: &MetaUpdate) -> Result<Updated, HistoryError> {
        let value: Value = self
            .run(&self.scripts.update, id, |invocation| {
                invocation.arg(keys_ttl(self.config.idle));
                invocation.arg(
                    update
                        .epoch
                        .map(|epoch| format!("{epoch:016x}"))
                        .unwrap_or_default(),
                );
                match &update.at_most {
                    Some((name, value)) => invocation.arg(name).arg(*value),
                    None => invocation.arg("").arg(0),
                };
                invocation.arg(update.increment.as_deref().unwrap_or(""));
                match &update.fields {
                    None => {
                        invocation.arg("");
                    }
                    Some(fields) => {
                        invocation.arg(fields.len());
                        for name in fields {
                            invocation.arg(name);
                        }
                    }
                }
                for (name, value) in &update.raise {
                    invocation.arg(name).arg(*value);
                }
            })
            .await?;
        let items = match value {
            Value::Array(items) if items.len() == 3 => items,
            other => return Err(HistoryError::Corrupt(format!("update answered {other:?}"))),
        };
        let mut items = items.into_iter();
        let mut next = || items.next().unwrap_or(Value::Nil);
        let applied = text_of(next())? == "1";
        let epoch = parse_epoch(&text_of(next())?)?;
        let meta = caller_meta(next())?;
        Ok(Updated {
            applied,
            epoch,
            meta,
        })
    }

    async fn put_token(
        &self,
        id: &LogId,
        name: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<(), HistoryError> {
        let mut connection = self.connection.clone();
        self.call(
            redis::cmd("SET")
                .arg(Keys::token(id, name))
                .arg(value)
                .arg("PX")
                .arg(ms(ttl))
                .query_async::<()>(&mut connection),
        )
        .await
    }

    /// `GETDEL`: a token is taken once, on whichever instance asks first.
    async fn take_token(&self, id: &LogId, name: &str) -> Result<Option<String>, HistoryError> {
        let mut connection = self.connection.clone();
        self.call(
            redis::cmd("GETDEL")
                .arg(Keys::token(id, name))
                .query_async(&mut connection),
        )
        .await
    }

    /// `admission.lua`: the expired members dropped, then the member
    /// renewed, added, or refused (see the script).
    async fn admit(
        &self,
        set: &str,
        member: &str,
        limit: u64,
        ttl: Duration,
    ) -> Result<Admission, HistoryError> {
        match self.admission(set, "admit", member, ttl, limit).await? {
            (2, _) => Ok(Admission::Admitted { added: true }),
            (1, _) => Ok(Admission::Admitted { added: false }),
            (0, count) => Ok(Admission::Full { count }),
            (answer, _) => Err(HistoryError::Corrupt(format!("admit answered {answer}"))),
        }
    }

    async fn renew(&self, set: &str, member: &str, ttl: Duration) -> Result<bool, HistoryError> {
        let (answer, _) = self.admission(set, "renew", member, ttl, 0).await?;
        Ok(answer == 1)
    }

    /// `ZREM`: an expired member is removed as a live one is.
    async fn release(&self, set: &str, member: &str) -> Result<bool, HistoryError> {
        let mut connection = self.connection.clone();
        let removed: i64 = self
            .call(
                redis::cmd("ZREM")
                    .arg(Keys::admission(set))
                    .arg(member)
                    .query_async(&mut connection),
            )
            .await?;
        Ok(removed == 1)
    }

    async fn count(&self, set: &str) -> Result<u64, HistoryError> {
        let (_, count) = self.admission(set, "count", "", Duration::ZERO, 0).await?;
        Ok(count)
    }

    async fn has_token(&self, id: &LogId, name: &str) -> Result<bool, HistoryError> {
        let mut connection = self.connection.clone();
        let exists: i64 = self
            .call(
                redis::cmd("EXISTS")
                    .arg(Keys::token(id, name))
                    .query_async(&mut connection),
            )
            .await?;
        Ok(exists == 1)
    }
}

#[cfg(test)]
#[path = "redis_history_tests.rs"]
mod tests;
