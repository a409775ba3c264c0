//! [`ServerConfig`]: how the server sizes sessions, bounds what clients can
//! make it hold, and shuts down; [`HistoryConfig`] for several instances;
//! and [`ServerConfig::validate`], which refuses a configuration the server
//! could not run with.
//!
//! This module imports nothing else from the crate but the client address
//! type: every other module reads its configuration from here.

use crate::client_addr::TrustedProxy;
pub use gapless_history::config::{redact_url, HistoryConfig};
pub use gapless_history::{DiskLimits, Fsync};
use std::fmt;
use std::time::Duration;

/// How the server sizes sessions, bounds what clients can make it hold, and
/// shuts down. Every limit trips as a typed answer and a
/// `gapless_limits_tripped_total{kind}` count, never a hang.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Events retained per session ring (default 4096).
    pub ring_events: usize,
    /// Payload bytes retained per session ring (default 4 MiB).
    pub ring_bytes: usize,
    /// Strict mode: an upgrade's cursor must equal the session's acked cursor.
    pub strict: bool,
    /// Largest request body accepted (default 1 MiB).
    pub max_body: usize,
    /// How long an upgrade ticket stays valid (default 30 s).
    pub ticket_ttl: Duration,
    /// Live sessions at most; `POST /session` beyond it is
    /// `503 too_many_sessions` (default 10,000).
    pub max_sessions: usize,
    /// Live sessions one client created at most; `POST /session` beyond it
    /// is `429 too_many_sessions_per_client` (default 1,000). A client is
    /// its address, or the forwarded address from a [`TrustedProxy`].
    pub max_sessions_per_client: usize,
    /// What the session rings may cost together, in bytes; a session whose
    /// ring would take them past it is `503 memory_budget_exceeded`
    /// (default: half of the machine's memory).
    pub memory_budget: MemoryBudget,
    /// A session with no request and no attached transport for this long is
    /// ended as by `DELETE` (default 600 s).
    pub idle_timeout: Duration,
    /// After a shutdown signal, how long open streams and connections get
    /// to close cleanly before they are dropped (default 10 s).
    pub shutdown_grace: Duration,
    /// A write to a client (an SSE chunk, a WebSocket frame) that has not
    /// completed in this time closes the connection (default 30 s).
    pub write_timeout: Duration,
    /// The `retry:` an SSE stream starts with: how soon a browser
    /// reconnects (default 1000 ms).
    pub sse_retry: Duration,
    /// Origins allowed by CORS; empty: no CORS headers at all (default).
    pub cors_origins: Vec<String>,
    /// Log every request at INFO (method, path with credentials redacted,
    /// status, latency). Off by default: a line per request costs more
    /// CPU than an append itself, and a proxy in front usually keeps the
    /// access log.
    pub access_log: bool,
    /// A connection that has not sent a complete request head in this time
    /// is closed (default 10 s).
    pub header_read_timeout: Duration,
    /// A request body not received in full this long after its head is
    /// answered `408 body_read_timeout` and its connection closed
    /// (default 30 s).
    pub body_read_timeout: Duration,
    /// Open connections at most; one beyond it is answered `503
    /// too_many_connections` and closed (default 10,000).
    pub max_connections: usize,
    /// Open connections from one client address at most; one beyond it is
    /// answered `429 too_many_connections_per_client` and closed (default
    /// 256). Connections from a trusted proxy are not counted per client.
    pub max_connections_per_client: usize,
    /// Proxies whose `X-Forwarded-For` names the client (default none: the
    /// client is the peer address).
    pub trusted_proxies: Vec<TrustedProxy>,
    /// Streams (SSE and WebSocket, including ones being superseded) open on
    /// one session at most; beyond it `429 too_many_streams` (default 4).
    pub max_streams_per_session: usize,
    /// Largest WebSocket message or frame a client may send; a larger one
    /// closes the socket with 1009 (default 64 KiB).
    pub ws_max_message: usize,
    /// The kernel send buffer of each accepted connection, in bytes (Linux
    /// doubles it for its own bookkeeping); 0 leaves the OS's autotuning,
    /// which lets a reader that stopped reading hold up to several MiB of
    /// kernel memory before a write blocks and the write timeout starts
    /// (default 256 KiB).
    pub send_buffer: usize,
    /// How often the server pings an idle WebSocket (default 20 s).
    pub ping_interval: Duration,
    /// How long a ping may go without a pong before the socket is closed
    /// (default 20 s).
    pub pong_timeout: Duration,
    /// With `redis`: emits waiting for Redis on this instance at most;
    /// beyond, an emit is answered `503 history_unavailable` at once
    /// (default 10,000).
    pub max_queued_emits: usize,
    /// Separate read and write capabilities: `POST /session` also returns a
    /// publish key, which emits and `DELETE` must present as
    /// `Authorization: Bearer <key>` (else `401 unauthorized`; default off:
    /// the session ID is both).
    pub publish_keys: bool,
    /// How long a Durable Streams long-poll read waits for data before it
    /// answers `204`, and how often a live SSE read sends a keep-alive
    /// control event (default 20 s).
    pub long_poll_timeout: Duration,
    /// The share (1 ..= 100 %) of the memory budget one client's Durable
    /// Streams may hold together (default 25 %): a client past it is
    /// refused `429 stream_memory_per_client`.
    pub stream_memory_per_client: u8,
    /// With `--redis`: Durable Streams the shared history holds at most,
    /// counted in Redis by every instance (default 1,000,000): one more is
    /// `503 too_many_streams`.
    pub max_durable_streams: usize,
    /// With `--redis`: live Durable Streams one client may have created
    /// (default 100,000): one more is `429 too_many_streams_per_client`.
    pub max_durable_streams_per_client: usize,
    /// Idempotent producers a Durable Stream keeps at most: a new one past
    /// them evicts the one idle longest (default 1,024).
    pub max_producers_per_stream: usize,
    /// A Durable Stream forgets an idempotent producer after this long
    /// without an append from it (default 24 h, Kafka's
    /// `producer.id.expiration.ms`).
    pub producer_idle_timeout: Duration,
    /// With `Some`, instances sharing this Redis serve the same sessions
    /// (see [`HistoryConfig`]); `None` (default): one process holds each
    /// session.
    pub redis: Option<HistoryConfig>,
    /// With `Some` (`--data-dir`), sessions and Durable Streams are written
    /// to a durable log in that directory and come back after a restart;
    /// `None` (default): they live in this process only. Not with
    /// [`redis`](Self::redis).
    pub data_dir: Option<DataDir>,
}

/// Where and how `--data-dir` keeps its log (see
/// [`gapless_history::DiskHistory`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataDir {
    /// The directory (made if missing; one server at a time).
    pub path: std::path::PathBuf,
    /// When a write is acknowledged: after a group-commit `fdatasync`
    /// (default), or at the write (`--fsync never`: survives a killed
    /// process, not a power cut).
    pub fsync: Fsync,
    /// The log's bound and the free space it leaves on the filesystem
    /// (`--data-dir-max-bytes`, `--data-dir-reserve`): past either, writes
    /// are refused `507`.
    pub limits: DiskLimits,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            ring_events: 4096,
            ring_bytes: 4 << 20,
            strict: false,
            max_body: 1 << 20,
            ticket_ttl: gapless::session::TICKET_TTL,
            max_sessions: 10_000,
            max_sessions_per_client: 1_000,
            memory_budget: MemoryBudget::default(),
            idle_timeout: Duration::from_secs(600),
            shutdown_grace: Duration::from_secs(10),
            write_timeout: Duration::from_secs(30),
            sse_retry: Duration::from_millis(1000),
            cors_origins: Vec::new(),
            access_log: false,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            max_connections: 10_000,
            max_connections_per_client: 256,
            trusted_proxies: Vec::new(),
            max_streams_per_session: 4,
            ws_max_message: 64 << 10,
            send_buffer: 256 << 10,
            ping_interval: Duration::from_secs(20),
            pong_timeout: Duration::from_secs(20),
            max_queued_emits: 10_000,
            publish_keys: false,
            long_poll_timeout: Duration::from_secs(20),
            stream_memory_per_client: 25,
            max_durable_streams: 1_000_000,
            max_durable_streams_per_client: 100_000,
            max_producers_per_stream: 1024,
            producer_idle_timeout: Duration::from_secs(24 * 60 * 60),
            redis: None,
            data_dir: None,
        }
    }
}

/// The shortest duration a timer of the server accepts: a zero interval
/// would panic a timer, a zero timeout would fail every wait.
pub const MIN_DURATION: Duration = Duration::from_millis(1);

impl ServerConfig {
    /// What the disk store holds in memory at most (its cache and
    /// memtables), taken out of the memory budget: 0 without `--data-dir`.
    pub fn store_memory(&self) -> u64 {
        if self.data_dir.is_some() {
            gapless_history::STORE_MEMORY_BYTES
        } else {
            0
        }
    }

    /// The ring every session gets.
    pub fn ring(&self) -> gapless::Config {
        gapless::Config::default()
            .events(self.ring_events)
            .bytes(self.ring_bytes)
    }

    /// Checks what the server could not run with: a ring outside the
    /// engine's limits, a count limit of 0, a timer shorter than
    /// [`MIN_DURATION`], a memory budget that holds no session.
    ///
    /// # Errors
    /// The first problem found, named by its `serve` flag.
    pub fn validate(&self) -> Result<(), InvalidConfig> {
        let geometry = self.ring().geometry().map_err(InvalidConfig::Ring)?;
        for (flag, value) in [
            ("--max-sessions", self.max_sessions),
            ("--max-sessions-per-client", self.max_sessions_per_client),
            ("--max-connections", self.max_connections),
            (
                "--max-connections-per-client",
                self.max_connections_per_client,
            ),
            ("--max-streams-per-session", self.max_streams_per_session),
            ("--max-body", self.max_body),
            ("--ws-max-message", self.ws_max_message),
            ("--max-queued-emits", self.max_queued_emits),
            ("--max-producers-per-stream", self.max_producers_per_stream),
            ("--max-durable-streams", self.max_durable_streams),
            (
                "--max-durable-streams-per-client",
                self.max_durable_streams_per_client,
            ),
            (
                "--stream-memory-per-client",
                usize::from(self.stream_memory_per_client),
            ),
        ] {
            if value == 0 {
                return Err(InvalidConfig::ZeroLimit { flag });
            }
        }
        let mut timers = vec![
            ("--idle-timeout", self.idle_timeout, MIN_DURATION),
            ("--write-timeout", self.write_timeout, MIN_DURATION),
            (
                "--header-read-timeout",
                self.header_read_timeout,
                MIN_DURATION,
            ),
            ("--body-read-timeout", self.body_read_timeout, MIN_DURATION),
            ("--long-poll-timeout", self.long_poll_timeout, MIN_DURATION),
            ("--ping-interval", self.ping_interval, MIN_DURATION),
            ("--pong-timeout", self.pong_timeout, MIN_DURATION),
        ];
        if self.redis.is_some() && self.data_dir.is_some() {
            return Err(InvalidConfig::DataDirWithRedis);
        }
        if let Some(redis) = &self.redis {
            timers.push(("--redis-timeout", redis.timeout, MIN_DURATION));
            check_urls(redis)?;
            let tls = redis
                .seeds()
                .iter()
                .all(|seed| seed.starts_with("rediss://"));
            if redis.ca_file.is_some() && !tls {
                return Err(InvalidConfig::CaFileWithoutTls);
            }
        }
        for (flag, value, min) in timers {
            if value < min {
                return Err(InvalidConfig::TooShort { flag, value, min });
            }
        }
        if let MemoryBudget::Bytes(budget) = self.memory_budget {
            let per_session = geometry.footprint() as u64;
            let store = self.store_memory();
            if budget < store.saturating_add(per_session) {
                return Err(InvalidConfig::MemoryBudget {
                    budget,
                    store,
                    per_session,
                });
            }
        }
        if let MemoryBudget::PercentOfMachine(percent) = self.memory_budget {
            if !(1..=100).contains(&percent) {
                return Err(InvalidConfig::MemoryPercent { percent });
            }
        }
        Ok(())
    }
}

/// What the session rings may cost together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryBudget {
    /// At most this many bytes.
    Bytes(u64),
    /// At most this share (1 ..= 100 %) of the machine's memory: the
    /// smaller of `MemTotal` and the cgroup's `memory.max` (Linux). Where
    /// neither can be read, unbounded (with a warning at startup).
    PercentOfMachine(u8),
}

impl Default for MemoryBudget {
    /// Half of the machine's memory.
    fn default() -> Self {
        Self::PercentOfMachine(50)
    }
}

impl MemoryBudget {
    /// The budget in bytes on this machine; `None`: a share of a machine
    /// whose memory cannot be read.
    pub fn resolve(self) -> Option<u64> {
        match self {
            Self::Bytes(bytes) => Some(bytes),
            Self::PercentOfMachine(percent) => {
                machine_memory().map(|total| total / 100 * u64::from(percent))
            }
        }
    }
}

impl std::str::FromStr for MemoryBudget {
    type Err = String;

    /// `50%`, or bytes with an optional binary suffix: `4294967296`,
    /// `512MiB`, `8GiB`, `1TiB` (`K`, `M`, `G`, `T`, with or without `iB`/`B`,
    /// all powers of 1024).
    fn from_str(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Some(percent) = text.strip_suffix('%') {
            return match percent.trim().parse::<u8>() {
                Ok(percent @ 1..=100) => Ok(Self::PercentOfMachine(percent)),
                _ => Err(format!("expected a share of 1% to 100%, got {text:?}")),
            };
        }
        let digits = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(digits);
        let shift = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kb" | "kib" => 10,
            "m" | "mb" | "mib" => 20,
            "g" | "gb" | "gib" => 30,
            "t" | "tb" | "tib" => 40,
            _ => {
                return Err(format!(
                    "expected bytes such as 8GiB or a share such as 50%, got {text:?}"
                ))
            }
        };
        number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(1u64 << shift))
            .map(Self::Bytes)
            .ok_or_else(|| {
                format!("expected bytes such as 8GiB or a share such as 50%, got {text:?}")
            })
    }
}

/// The machine's memory in bytes: `MemTotal`, or the cgroup v2 limit when
/// that is lower (a container). `None` where neither can be read.
fn machine_memory() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|info| {
            info.lines().find_map(|line| {
                let kib = line.strip_prefix("MemTotal:")?.trim().strip_suffix("kB")?;
                kib.trim().parse::<u64>().ok()?.checked_mul(1024)
            })
        });
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|max| max.trim().parse::<u64>().ok());
    match (total, cgroup) {
        (Some(total), Some(cgroup)) => Some(total.min(cgroup)),
        (total, cgroup) => total.or(cgroup),
    }
}

/// A configuration the server cannot run with.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidConfig {
    /// The session ring is outside the engine's limits.
    Ring(gapless::ConfigError),
    /// A count limit is 0.
    ZeroLimit {
        /// The flag.
        flag: &'static str,
    },
    /// A timer is shorter than the server can run.
    TooShort {
        /// The flag.
        flag: &'static str,
        /// What was asked.
        value: Duration,
        /// The shortest it may be.
        min: Duration,
    },
    /// The memory budget holds not even one session's ring (after the
    /// disk store's memory, with `--data-dir`).
    MemoryBudget {
        /// The budget in bytes.
        budget: u64,
        /// What the disk store takes out of it first: 0 without
        /// `--data-dir`.
        store: u64,
        /// What one session's ring costs.
        per_session: u64,
    },
    /// `--redis-ca-file` with a Redis URL that is not `rediss://`.
    CaFileWithoutTls,
    /// A share of the machine's memory outside 1 ..= 100 %.
    MemoryPercent {
        /// What was asked.
        percent: u8,
    },
    /// `--redis` with a list of URLs: one Redis is one URL, a Redis
    /// Cluster is `--redis-cluster`.
    RedisUrlList,
    /// A seed of `--redis-cluster` that is not `redis://HOST[:PORT]` or
    /// `rediss://HOST[:PORT]` (empty, a Unix socket, another scheme).
    ClusterSeed {
        /// The seed, its credentials redacted.
        seed: String,
    },
    /// `--redis-cluster` seeds of both `redis://` and `rediss://`: every
    /// node of a cluster is reached alike.
    ClusterMixedTls,
    /// `--data-dir` with `--redis`: one history at a time.
    DataDirWithRedis,
}

impl fmt::Display for InvalidConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ring(error) => write!(f, "--ring-events/--ring-bytes: {error}"),
            Self::ZeroLimit { flag } => write!(f, "{flag} must be at least 1"),
            Self::TooShort { flag, value, min } => {
                write!(f, "{flag} must be at least {min:?}, got {value:?}")
            }
            Self::MemoryBudget {
                budget,
                store: 0,
                per_session,
            } => write!(
                f,
                "--memory-budget {budget} B holds no session: one ring costs {per_session} B"
            ),
            Self::MemoryBudget {
                budget,
                store,
                per_session,
            } => write!(
                f,
                "--memory-budget {budget} B holds no session: the disk store (--data-dir) takes \
                 {store} B of it (its cache and memtables), and one ring costs {per_session} B"
            ),
            Self::CaFileWithoutTls => {
                f.write_str("--redis-ca-file needs a rediss:// (TLS) --redis URL")
            }
            Self::MemoryPercent { percent } => {
                write!(f, "--memory-budget {percent}%: expected 1% to 100%")
            }
            Self::RedisUrlList => f.write_str(
                "--redis takes one Redis URL; the nodes of a Redis Cluster go to --redis-cluster",
            ),
            Self::ClusterSeed { seed } => write!(
                f,
                "--redis-cluster {seed:?}: expected redis://HOST[:PORT] or rediss://HOST[:PORT]"
            ),
            Self::ClusterMixedTls => f.write_str(
                "--redis-cluster: every seed is redis:// or every seed is rediss://, not both",
            ),
            Self::DataDirWithRedis => f.write_str(
                "--data-dir keeps one server's history on its disk, --redis shares one between \
                 instances: give one of them",
            ),
        }
    }
}

impl std::error::Error for InvalidConfig {}

/// Refuses a list given as one Redis, and a cluster seed that is not a
/// TCP Redis URL or whose TLS differs from the others'.
fn check_urls(history: &HistoryConfig) -> Result<(), InvalidConfig> {
    const SCHEMES: [&str; 2] = ["redis://", "rediss://"];
    if !history.cluster {
        // A comma may be in a password: only what reads as a second
        // URL makes a list.
        let listed = history.url.split(',').skip(1).any(|part| {
            let part = part.trim_start();
            SCHEMES.iter().any(|scheme| part.starts_with(scheme)) || part.contains("unix://")
        });
        return if listed {
            Err(InvalidConfig::RedisUrlList)
        } else {
            Ok(())
        };
    }
    let mut tls = None;
    for seed in history.seeds() {
        let scheme = SCHEMES
            .iter()
            .find(|scheme| seed.starts_with(**scheme))
            .filter(|scheme| seed.len() > scheme.len())
            .ok_or_else(|| InvalidConfig::ClusterSeed {
                seed: redact_url(seed),
            })?;
        let seed_tls = *scheme == "rediss://";
        if *tls.get_or_insert(seed_tls) != seed_tls {
            return Err(InvalidConfig::ClusterMixedTls);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{HistoryConfig, InvalidConfig, ServerConfig};
    use std::time::Duration;

    fn with_redis(url: &str, cluster: bool) -> ServerConfig {
        ServerConfig {
            redis: Some(HistoryConfig {
                url: url.into(),
                cluster,
                timeout: Duration::from_secs(1),
                retention: 16,
                retention_bytes: 1 << 16,
                idle: Duration::from_secs(60),
                ca_file: None,
            }),
            ..ServerConfig::default()
        }
    }

    #[test]
    fn with_a_data_dir_the_budget_holds_the_stores_memory_and_a_ring() {
        let per_session = ServerConfig::default()
            .ring()
            .geometry()
            .expect("the default ring")
            .footprint() as u64;
        let store = gapless_history::STORE_MEMORY_BYTES;
        let config = |budget: u64, data_dir: bool| ServerConfig {
            memory_budget: super::MemoryBudget::Bytes(budget),
            data_dir: data_dir.then(|| super::DataDir {
                path: "data".into(),
                fsync: gapless_history::Fsync::Always,
                limits: gapless_history::DiskLimits::default(),
            }),
            ..ServerConfig::default()
        };
        assert_eq!(config(per_session, false).validate(), Ok(()));
        assert_eq!(config(store + per_session, true).validate(), Ok(()));
        let refused = config(store + per_session - 1, true).validate();
        assert_eq!(
            refused,
            Err(InvalidConfig::MemoryBudget {
                budget: store + per_session - 1,
                store,
                per_session,
            })
        );
        let words = refused.expect_err("refused").to_string();
        assert!(words.contains("the disk store (--data-dir)"), "{words}");
    }

    #[test]
    fn a_cluster_is_seed_urls_of_one_scheme_and_a_list_is_not_one_redis() {
        for url in [
            "redis://127.0.0.1:7000",
            "redis://a:7000,redis://b:7001,redis://c:7002",
            "rediss://:s3cret@a:7000, rediss://:s3cret@b:7001",
        ] {
            assert_eq!(with_redis(url, true).validate(), Ok(()), "{url}");
        }
        // A comma in a password does not make a list.
        assert_eq!(
            with_redis("redis://:a,b@host:6379", false).validate(),
            Ok(())
        );
        for (url, cluster, refused) in [
            (
                "redis://a:7000,redis://b:7001",
                false,
                InvalidConfig::RedisUrlList,
            ),
            (
                "redis://a:7000,redis://b:7001,",
                true,
                InvalidConfig::ClusterSeed {
                    seed: String::new(),
                },
            ),
            (
                "redis://:s3cret@a:7000,unix:///run/redis.sock",
                true,
                InvalidConfig::ClusterSeed {
                    seed: "unix:///run/redis.sock".into(),
                },
            ),
            (
                "rediss://:s3cret@a:7000,redis://:s3cret@b:7001",
                true,
                InvalidConfig::ClusterMixedTls,
            ),
            (
                "http://:s3cret@a:7000",
                true,
                InvalidConfig::ClusterSeed {
                    seed: "http://***@a:7000".into(),
                },
            ),
        ] {
            let error = with_redis(url, cluster).validate();
            assert_eq!(error, Err(refused), "{url}");
            let shown = error
                .err()
                .map(|error| error.to_string())
                .unwrap_or_default();
            assert!(!shown.contains("s3cret"), "{shown}");
        }
        let config = with_redis("redis://:s3cret@a:7000,redis://:s3cret@b:7001", true);
        let redacted = config.redis.map(|redis| redis.redacted_url());
        assert_eq!(
            redacted.as_deref(),
            Some("redis://***@a:7000,redis://***@b:7001")
        );
    }
}
