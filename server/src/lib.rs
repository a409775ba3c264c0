//! # gapless-server
//!
//! The reference HTTP server for gapless: sessions over SSE with
//! `Last-Event-ID` resume, a cursor-in-body upgrade to WebSocket that
//! replays the gap first or refuses with `409`, and `/metrics`. The protocol
//! is `docs/PROTOCOL.md` in the repository.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use gapless_server::{spawn, ServerConfig};
//! let server = spawn(ServerConfig::default(), "127.0.0.1:0".parse().unwrap()).await?;
//! println!("serving on {}", server.url());
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! ## Layers
//!
//! Each module depends only on those above it:
//!
//! | module | holds |
//! |---|---|
//! | `config` | [`ServerConfig`] |
//! | `state` | [`AppState`]: sessions, metrics, the shutdown signal |
//! | `error` | every error answer, rendered to its `gapless_client::wire` body |
//! | `extract` | the session in the path, bodies within the limit, cursors |
//! | `delivery` | the one replay → follow → gap → detach loop, and its SSE and WebSocket transports |
//! | `handlers` | one handler per route |
//! | `routes` | [`router`] |
//!
//! The wire bodies are `gapless_client::wire` types, so this server and the
//! client crate serialise and parse the same definitions.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod config;
mod delivery;
mod error;
mod extract;
mod handlers;
mod ids;
mod json;
mod metrics;
mod routes;
mod state;

pub use config::ServerConfig;
pub use ids::SessionId;
pub use routes::router;
pub use state::AppState;

use std::net::SocketAddr;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

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
    let state = AppState::new(config, shutdown.clone());
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
