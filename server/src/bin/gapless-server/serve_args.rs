//! `gapless-server serve`: its flags (each also a `GAPLESS_*` environment
//! variable; the command line wins) and the process around the server:
//! the listening line, and the signals.

use clap::Args;
use gapless_server::{serve_state, AppState, HistoryConfig, ServerConfig};
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
    /// Seconds a connection may take to send a request head.
    #[arg(long, env = "GAPLESS_HEADER_READ_TIMEOUT", default_value = "10", value_parser = seconds)]
    header_read_timeout: Duration,
    /// Open connections at most; beyond: 503 too_many_connections.
    #[arg(long, env = "GAPLESS_MAX_CONNECTIONS", default_value_t = 10_000)]
    max_connections: usize,
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
    /// Seconds each Redis call may take before it counts as unavailable.
    #[arg(long, env = "GAPLESS_REDIS_TIMEOUT", default_value = "2", value_parser = seconds)]
    redis_timeout: Duration,
    /// Seconds a session's owner lease lasts unless renewed: how soon
    /// another instance takes over the emits of one that died.
    #[arg(long, env = "GAPLESS_LEASE_TTL", default_value = "10", value_parser = seconds)]
    lease_ttl: Duration,
}

/// A positive, finite number of seconds.
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
    fn config(&self) -> Result<ServerConfig, String> {
        gapless::Config::default()
            .events(self.ring_events)
            .bytes(self.ring_bytes)
            .geometry()
            .map_err(|error| error.to_string())?;
        if self.max_sessions == 0 || self.max_connections == 0 || self.max_streams_per_session == 0
        {
            return Err("--max-sessions, --max-connections and --max-streams-per-session must be at least 1".into());
        }
        Ok(ServerConfig {
            ring_events: self.ring_events,
            ring_bytes: self.ring_bytes,
            strict: self.strict,
            max_body: self.max_body,
            max_sessions: self.max_sessions,
            idle_timeout: self.idle_timeout,
            shutdown_grace: self.shutdown_grace,
            write_timeout: self.write_timeout,
            sse_retry: Duration::from_millis(self.sse_retry_ms),
            cors_origins: self.cors_origins.clone(),
            header_read_timeout: self.header_read_timeout,
            max_connections: self.max_connections,
            max_streams_per_session: self.max_streams_per_session,
            ws_max_message: self.ws_max_message,
            send_buffer: self.send_buffer,
            ping_interval: self.ping_interval,
            pong_timeout: self.pong_timeout,
            redis: self.redis.as_ref().map(|url| HistoryConfig {
                url: url.clone(),
                timeout: self.redis_timeout,
                lease_ttl: self.lease_ttl,
                retention: self.ring_events,
                idle: self.idle_timeout,
            }),
            ..ServerConfig::default()
        })
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
        tokio::spawn(async move {
            signal().await;
            tracing::info!("shutting down; a second signal exits at once");
            let _ = stop.send(true);
            signal().await;
            eprintln!("second signal: exiting now");
            std::process::exit(130);
        });
        // Connected before the listening line: a Redis that does not answer
        // is a startup error, not a server that answers 503 to everything.
        let redis = config.redis.as_ref().map(|redis| redis.url.clone());
        let state = match AppState::connect(config, on_stop).await {
            Ok(state) => state,
            Err(error) => {
                eprintln!("error: --redis {}: {error}", redis.unwrap_or_default());
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

/// The next Ctrl-C or SIGTERM.
async fn signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = terminate => {}
    }
}
