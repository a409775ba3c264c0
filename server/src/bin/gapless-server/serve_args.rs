//! `gapless-server serve`: its flags (each also a `GAPLESS_*` environment
//! variable; the command line wins) and the process around the server:
//! the listening line, and the signals.

use clap::Args;
use gapless_server::{
    check_exposure, serve_state, AppState, DataDir, DiskLimits, Fsync, HistoryConfig,
    InvalidConfig, MemoryBudget, ServerConfig, StartError, TrustedProxy,
};
use std::io::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The flags of `serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, env = "GAPLESS_ADDR", default_value = "127.0.0.1:7070")]
    addr: SocketAddr,
    /// Events retained per session.
    #[arg(long, env = "GAPLESS_RING_EVENTS", default_value_t = 4096)]
    ring_events: usize,
    /// Payload memory per session's ring, in bytes: what a full ring holds
    /// and costs (with 32 bytes per event of --ring-events). The largest
    /// event is half of it.
    #[arg(long, env = "GAPLESS_RING_BYTES", default_value_t = 4 << 20)]
    ring_bytes: usize,
    /// Refuse upgrades whose cursor differs from the acked cursor.
    #[arg(long, env = "GAPLESS_STRICT")]
    strict: bool,
    /// Largest request body, in bytes.
    #[arg(long, env = "GAPLESS_MAX_BODY", default_value_t = 1 << 20)]
    max_body: usize,
    /// Live sessions at most; beyond: 503 too_many_sessions.
    #[arg(long, env = "GAPLESS_MAX_SESSIONS", default_value_t = 10_000)]
    max_sessions: usize,
    /// Live sessions one client (address) created at most; beyond: 429
    /// too_many_sessions_per_client.
    #[arg(long, env = "GAPLESS_MAX_SESSIONS_PER_CLIENT", default_value_t = 1_000)]
    max_sessions_per_client: usize,
    /// What the session rings may reserve together: bytes (8GiB, 512MiB,
    /// 1073741824) or a share of the machine's memory (50%); beyond: 503
    /// memory_budget_exceeded. With --data-dir, the disk store's cache and
    /// memtables (160 MiB) come out of it first.
    #[arg(long, env = "GAPLESS_MEMORY_BUDGET", default_value = "50%")]
    memory_budget: MemoryBudget,
    /// Return a publish key from POST /session (and PUT /v1/stream/...)
    /// and require it as Authorization: Bearer KEY for emits, appends and
    /// DELETE, else 401 unauthorized with WWW-Authenticate: Bearer: the
    /// session ID (or stream path) then only reads.
    #[arg(long, env = "GAPLESS_PUBLISH_KEYS")]
    publish_keys: bool,
    /// Start on an address other than loopback without --publish-keys:
    /// anyone who reaches it (a web page a browser on the network opens,
    /// too) may then create, append to and delete streams. Without it (or
    /// --publish-keys) such an --addr does not start.
    #[arg(long, env = "GAPLESS_ALLOW_ANONYMOUS_WRITES")]
    allow_anonymous_writes: bool,
    /// The share of --memory-budget, in percent, one client's Durable
    /// Streams may hold together (past it: 429).
    #[arg(long, env = "GAPLESS_STREAM_MEMORY_PER_CLIENT", default_value = "25", value_parser = clap::value_parser!(u8).range(1..=100))]
    stream_memory_per_client: u8,
    /// With --redis: Durable Streams the shared history holds at most,
    /// counted in Redis by every instance (past it: 503).
    #[arg(long, env = "GAPLESS_MAX_DURABLE_STREAMS", default_value = "1000000")]
    max_durable_streams: usize,
    /// With --redis: live Durable Streams one client may have created (past
    /// it: 429).
    #[arg(
        long,
        env = "GAPLESS_MAX_DURABLE_STREAMS_PER_CLIENT",
        default_value = "100000"
    )]
    max_durable_streams_per_client: usize,
    /// Idempotent producers a Durable Stream keeps at most; a new one past
    /// them evicts the one idle longest.
    #[arg(long, env = "GAPLESS_MAX_PRODUCERS_PER_STREAM", default_value = "1024")]
    max_producers_per_stream: usize,
    /// Seconds after which a Durable Stream forgets an idempotent producer
    /// that has not appended (its next seq but 0 is then refused).
    #[arg(long, env = "GAPLESS_PRODUCER_IDLE_TIMEOUT", default_value = "86400", value_parser = seconds)]
    producer_idle_timeout: Duration,
    /// Seconds without a request or an attached transport after which a
    /// session ends.
    #[arg(long, env = "GAPLESS_IDLE_TIMEOUT", default_value = "600", value_parser = seconds)]
    idle_timeout: Duration,
    /// Seconds open streams get to close on shutdown before they are dropped.
    #[arg(long, env = "GAPLESS_SHUTDOWN_GRACE", default_value = "10", value_parser = seconds)]
    shutdown_grace: Duration,
    /// Seconds a write to a client may take before its connection is closed.
    #[arg(long, env = "GAPLESS_WRITE_TIMEOUT", default_value = "30", value_parser = seconds)]
    write_timeout: Duration,
    /// The `retry:` (milliseconds) an SSE stream starts with.
    #[arg(long, env = "GAPLESS_SSE_RETRY_MS", default_value_t = 1000)]
    sse_retry_ms: u64,
    /// An origin allowed by CORS (repeatable; in the environment,
    /// comma-separated). Without it the server sends no CORS headers.
    #[arg(
        long = "cors-origin",
        env = "GAPLESS_CORS_ORIGIN",
        value_delimiter = ','
    )]
    cors_origins: Vec<String>,
    /// Log every request at INFO: method, path (session IDs and tickets
    /// redacted), status and latency. Off by default; `RUST_LOG` still
    /// filters what is logged.
    #[arg(long, env = "GAPLESS_ACCESS_LOG")]
    access_log: bool,
    /// Seconds a connection may take to send a request head.
    #[arg(long, env = "GAPLESS_HEADER_READ_TIMEOUT", default_value = "10", value_parser = seconds)]
    header_read_timeout: Duration,
    /// Seconds a request body may take to arrive after its head; beyond:
    /// 408 body_read_timeout and the connection closes.
    #[arg(long, env = "GAPLESS_BODY_READ_TIMEOUT", default_value = "30", value_parser = seconds)]
    body_read_timeout: Duration,
    /// Seconds a Durable Streams long-poll read waits for data before it
    /// answers 204 (and between an idle SSE read's keep-alive events).
    #[arg(long, env = "GAPLESS_LONG_POLL_TIMEOUT", default_value = "20", value_parser = seconds)]
    long_poll_timeout: Duration,
    /// Open connections at most; beyond: 503 too_many_connections.
    #[arg(long, env = "GAPLESS_MAX_CONNECTIONS", default_value_t = 10_000)]
    max_connections: usize,
    /// Open connections from one client address at most; beyond: 429
    /// too_many_connections_per_client.
    #[arg(
        long,
        env = "GAPLESS_MAX_CONNECTIONS_PER_CLIENT",
        default_value_t = 256
    )]
    max_connections_per_client: usize,
    /// A proxy (ADDRESS or ADDRESS/PREFIX) whose X-Forwarded-For names the
    /// client for the per-client limits (repeatable; in the environment,
    /// comma-separated).
    #[arg(
        long = "trusted-proxy",
        env = "GAPLESS_TRUSTED_PROXY",
        value_delimiter = ','
    )]
    trusted_proxies: Vec<TrustedProxy>,
    /// Streams open on one session at most; beyond: 429 too_many_streams.
    #[arg(long, env = "GAPLESS_MAX_STREAMS_PER_SESSION", default_value_t = 4)]
    max_streams_per_session: usize,
    /// Largest WebSocket message or frame from a client, in bytes.
    #[arg(long, env = "GAPLESS_WS_MAX_MESSAGE", default_value_t = 64 << 10)]
    ws_max_message: usize,
    /// Kernel send buffer per connection, in bytes (0: the OS's autotuning).
    #[arg(long, env = "GAPLESS_SEND_BUFFER", default_value_t = 256 << 10)]
    send_buffer: usize,
    /// Seconds between WebSocket pings.
    #[arg(long, env = "GAPLESS_PING_INTERVAL", default_value = "20", value_parser = seconds)]
    ping_interval: Duration,
    /// Seconds a ping may go unanswered before the socket is closed.
    #[arg(long, env = "GAPLESS_PONG_TIMEOUT", default_value = "20", value_parser = seconds)]
    pong_timeout: Duration,
    /// Several instances: share sessions through this Redis
    /// (`redis://HOST:PORT[/DB]`). Every emit is appended there before its
    /// `202`; any instance resumes any session.
    #[arg(long, env = "GAPLESS_REDIS")]
    redis: Option<String>,
    /// Several instances over a Redis Cluster: seed nodes
    /// (`redis://HOST:PORT`; repeatable, or comma-separated), from which
    /// the other nodes are learnt. Instead of --redis.
    #[arg(
        long,
        env = "GAPLESS_REDIS_CLUSTER",
        value_delimiter = ',',
        conflicts_with = "redis"
    )]
    redis_cluster: Vec<String>,
    /// Emits waiting for Redis on this instance at most; beyond: 503
    /// history_unavailable at once.
    #[arg(long, env = "GAPLESS_MAX_QUEUED_EMITS", default_value_t = 10_000)]
    max_queued_emits: usize,
    /// With a rediss:// URL: a PEM file of the CA certificates that vouch
    /// for Redis's certificate, instead of the platform's roots.
    #[arg(long, env = "GAPLESS_REDIS_CA_FILE")]
    redis_ca_file: Option<std::path::PathBuf>,
    /// Seconds each Redis call may take before it counts as unavailable.
    #[arg(long, env = "GAPLESS_REDIS_TIMEOUT", default_value = "2", value_parser = seconds)]
    redis_timeout: Duration,
    /// Keep sessions and Durable Streams in a durable log in this
    /// directory (made if missing; one server at a time): they come back
    /// after a restart, a killed process included, with the same epochs
    /// and offsets. Not with --redis.
    #[arg(long, env = "GAPLESS_DATA_DIR", conflicts_with_all = ["redis", "redis_cluster"])]
    data_dir: Option<std::path::PathBuf>,
    /// With --data-dir, when a write is acknowledged: always (after a
    /// group-commit fdatasync: it survives a power cut) or never (at the
    /// write: it survives a killed process, not a power cut or a kernel
    /// crash).
    #[arg(long, env = "GAPLESS_FSYNC", default_value = "always", value_parser = fsync)]
    fsync: Fsync,
    /// With --data-dir: the log's size on disk at most, in bytes; past it,
    /// writes are refused 507 insufficient_storage (deletes are taken).
    #[arg(long, env = "GAPLESS_DATA_DIR_MAX_BYTES")]
    data_dir_max_bytes: Option<u64>,
    /// With --data-dir: free bytes the filesystem keeps; while less is
    /// free, writes are refused 507 insufficient_storage (the store needs
    /// room to flush and compact), and taken again once space returns.
    #[arg(long, env = "GAPLESS_DATA_DIR_RESERVE", default_value_t = gapless_history::DEFAULT_RESERVE)]
    data_dir_reserve: u64,
}

/// `always` or `never` (`--fsync`).
fn fsync(text: &str) -> Result<Fsync, String> {
    match text {
        "always" => Ok(Fsync::Always),
        "never" => Ok(Fsync::Never),
        _ => Err(format!("expected always or never, got {text:?}")),
    }
}

/// A positive, finite number of seconds (what the server can run with is
/// checked after: [`ServerConfig::validate`]).
fn seconds(text: &str) -> Result<Duration, String> {
    match text.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 && secs < 1e9 => {
            Ok(Duration::from_secs_f64(secs))
        }
        _ => Err(format!(
            "expected a positive number of seconds, got {text:?}"
        )),
    }
}

impl ServeArgs {
    /// The history's URL and whether it is a cluster's seeds (joined
    /// with commas, see `HistoryConfig::url`); `None` without Redis.
    fn redis_url(&self) -> Option<(String, bool)> {
        match (&self.redis, self.redis_cluster.is_empty()) {
            (Some(url), _) => Some((url.clone(), false)),
            (None, false) => Some((self.redis_cluster.join(","), true)),
            (None, true) => None,
        }
    }

    fn config(&self) -> Result<ServerConfig, InvalidConfig> {
        let config = ServerConfig {
            ring_events: self.ring_events,
            ring_bytes: self.ring_bytes,
            strict: self.strict,
            max_body: self.max_body,
            max_sessions: self.max_sessions,
            max_sessions_per_client: self.max_sessions_per_client,
            memory_budget: self.memory_budget,
            idle_timeout: self.idle_timeout,
            stream_memory_per_client: self.stream_memory_per_client,
            max_durable_streams: self.max_durable_streams,
            max_durable_streams_per_client: self.max_durable_streams_per_client,
            max_producers_per_stream: self.max_producers_per_stream,
            producer_idle_timeout: self.producer_idle_timeout,
            shutdown_grace: self.shutdown_grace,
            write_timeout: self.write_timeout,
            sse_retry: Duration::from_millis(self.sse_retry_ms),
            cors_origins: self.cors_origins.clone(),
            access_log: self.access_log,
            header_read_timeout: self.header_read_timeout,
            body_read_timeout: self.body_read_timeout,
            max_connections: self.max_connections,
            max_connections_per_client: self.max_connections_per_client,
            trusted_proxies: self.trusted_proxies.clone(),
            max_streams_per_session: self.max_streams_per_session,
            ws_max_message: self.ws_max_message,
            send_buffer: self.send_buffer,
            ping_interval: self.ping_interval,
            pong_timeout: self.pong_timeout,
            publish_keys: self.publish_keys,
            long_poll_timeout: self.long_poll_timeout,
            max_queued_emits: self.max_queued_emits,
            redis: self.redis_url().map(|(url, cluster)| HistoryConfig {
                url,
                cluster,
                timeout: self.redis_timeout,
                retention: self.ring_events,
                retention_bytes: self.ring_bytes,
                ca_file: self.redis_ca_file.clone(),
                idle: self.idle_timeout,
            }),
            data_dir: self.data_dir.clone().map(|path| DataDir {
                path,
                fsync: self.fsync,
                limits: DiskLimits {
                    max_bytes: self.data_dir_max_bytes,
                    reserve_bytes: self.data_dir_reserve,
                },
            }),
            ..ServerConfig::default()
        };
        config.validate()?;
        Ok(config)
    }

    /// Serves until a signal; prints `listening on http://ADDR` once it
    /// accepts connections. The first Ctrl-C / SIGTERM shuts down within the
    /// grace; a second one exits at once.
    pub async fn run(self) -> ExitCode {
        let config = match self.config() {
            Ok(config) => config,
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::from(2);
            }
        };
        // Before binding: open writes on a non-loopback address are asked
        // for, never the default.
        let exposure = check_exposure(&[self.addr], self.publish_keys, self.allow_anonymous_writes);
        if let Err(error) = exposure {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
        let listener = match TcpListener::bind(self.addr).await {
            Ok(listener) => listener,
            Err(error) => {
                eprintln!("error: cannot listen on {}: {error}", self.addr);
                return ExitCode::FAILURE;
            }
        };
        let local = match listener.local_addr() {
            Ok(local) => local,
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        };
        let (stop, on_stop) = watch::channel(false);
        // Listening from here on, before the listening line: a signal that
        // comes before the task below first waits (or between its two
        // waits) is still seen, never the default action or lost.
        let mut signals = Signals::listen();
        tokio::spawn(async move {
            signals.next().await;
            tracing::info!("shutting down; a second signal exits at once");
            let _ = stop.send(true);
            signals.next().await;
            eprintln!("second signal: exiting now");
            std::process::exit(130);
        });
        // Connected before the listening line: a Redis that does not answer
        // is a startup error, not a server that answers 503 to everything.
        let state = match AppState::connect(config, on_stop).await {
            Ok(state) => state,
            Err(StartError::Config(error)) => {
                eprintln!("error: {error}");
                return ExitCode::from(2);
            }
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        };
        let mut stdout = std::io::stdout();
        let _ = writeln!(stdout, "listening on http://{local}");
        let _ = stdout.flush();
        match serve_state(listener, state).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::FAILURE
            }
        }
    }
}

/// Ctrl-C and SIGTERM, each listened for from [`Signals::listen`] on: a
/// signal that arrives while no one waits is kept for the next
/// [`Signals::next`].
#[cfg(unix)]
struct Signals {
    /// SIGINT (Ctrl-C); `None` if its handler could not be installed.
    interrupt: Option<tokio::signal::unix::Signal>,
    /// SIGTERM; `None` if its handler could not be installed.
    terminate: Option<tokio::signal::unix::Signal>,
}

#[cfg(unix)]
impl Signals {
    fn listen() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        Self {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
        }
    }

    /// The next Ctrl-C or SIGTERM.
    async fn next(&mut self) {
        async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) {
            let delivered = match signal {
                Some(signal) => signal.recv().await.is_some(),
                None => false,
            };
            if !delivered {
                std::future::pending::<()>().await;
            }
        }
        tokio::select! {
            () = recv(&mut self.interrupt) => {}
            () = recv(&mut self.terminate) => {}
        }
    }
}

/// Ctrl-C only, where there is no SIGTERM.
#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn listen() -> Self {
        Self
    }

    /// The next Ctrl-C.
    async fn next(&mut self) {
        let _ = tokio::signal::ctrl_c().await;
    }
}
