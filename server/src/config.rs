//! [`ServerConfig`]: how the server sizes sessions, bounds what clients can
//! make it hold, and shuts down.

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
    /// A connection that has not sent a complete request head in this time
    /// is closed (default 10 s).
    pub header_read_timeout: Duration,
    /// Open connections at most; one beyond it is answered `503
    /// too_many_connections` and closed (default 10,000).
    pub max_connections: usize,
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
    /// With `Some`, instances sharing this Redis serve the same sessions
    /// (see `HistoryConfig`); `None` (default): one process holds each
    /// session.
    pub redis: Option<crate::history::HistoryConfig>,
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
            idle_timeout: Duration::from_secs(600),
            shutdown_grace: Duration::from_secs(10),
            write_timeout: Duration::from_secs(30),
            sse_retry: Duration::from_millis(1000),
            cors_origins: Vec::new(),
            header_read_timeout: Duration::from_secs(10),
            max_connections: 10_000,
            max_streams_per_session: 4,
            ws_max_message: 64 << 10,
            send_buffer: 256 << 10,
            ping_interval: Duration::from_secs(20),
            pong_timeout: Duration::from_secs(20),
            redis: None,
        }
    }
}
