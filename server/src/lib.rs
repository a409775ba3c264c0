//! # gapless-server
//!
//! The reference HTTP server for gapless: sessions over SSE with
//! `Last-Event-ID` resume, a cursor-in-body upgrade to WebSocket that
//! replays the gap first or refuses with `409`, and `/metrics`. The protocol
//! is `docs/PROTOCOL.md` in the repository; this crate follows it to the letter.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use gapless_server::{spawn, ServerConfig};
//! let server = spawn(ServerConfig::default(), "127.0.0.1:0".parse().unwrap()).await?;
//! println!("serving on {}", server.url());
//! server.shutdown().await;
//! # Ok(()) }
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod app;
pub mod churn;
pub mod client;
mod error;
mod ids;
mod json;
mod metrics;
pub mod plan;
mod sse_stream;
mod ws;

pub use app::router;
pub use ids::SessionId;

use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

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

/// A server running on a tokio runtime.
pub struct RunningServer {
    addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<std::io::Result<()>>,
}

impl RunningServer {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Closes every open stream and waits for the server to stop.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "server stopped with an error"),
            Err(error) => tracing::warn!(%error, "server task failed"),
        }
    }
}

/// Binds `addr` and serves on the current tokio runtime until
/// [`RunningServer::shutdown`].
///
/// # Errors
/// The bind's I/O error.
pub async fn spawn(config: ServerConfig, addr: SocketAddr) -> std::io::Result<RunningServer> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let (shutdown, on_shutdown) = watch::channel(false);
    let task = tokio::spawn(serve(listener, config, on_shutdown));
    Ok(RunningServer {
        addr,
        shutdown,
        task,
    })
}

/// Serves on `listener` until `shutdown` turns true; open SSE streams and
/// WebSockets are then closed cleanly.
///
/// # Errors
/// The accept loop's I/O error.
pub async fn serve(
    listener: TcpListener,
    config: ServerConfig,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let state = app::AppState::new(config, shutdown.clone());
    let mut stop = shutdown;
    // Events are small writes that must leave at once: no Nagle delay.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
    });
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|stopped| *stopped).await;
        })
        .await
}
