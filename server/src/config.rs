//! [`ServerConfig`]: how the server sizes sessions and treats requests.

use std::time::Duration;

/// How the server sizes sessions and treats requests.
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
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            ring_events: 4096,
            ring_bytes: 4 << 20,
            strict: false,
            max_body: 1 << 20,
            ticket_ttl: gapless::session::TICKET_TTL,
        }
    }
}
