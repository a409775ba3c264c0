//! One in-process `gapless-server` per test, every wait bounded: what the
//! protocol tests and the Durable Streams tests start their servers with
//! (each harness includes this file by path).

use gapless_client::Client;
use gapless_server::{spawn, RunningServer, ServerConfig};
use std::future::Future;
use std::time::Duration;

/// Every single network wait.
pub const IO: Duration = Duration::from_secs(10);
/// A whole test.
const TEST: Duration = Duration::from_secs(120);

/// Runs `test`, failing it by `name` if it takes longer than [`TEST`].
pub async fn bounded<F: Future>(name: &str, test: F) -> F::Output {
    tokio::time::timeout(TEST, test)
        .await
        .unwrap_or_else(|_| panic!("{name}: exceeded {TEST:?}"))
}

/// A server with `config` on a free loopback port, and a client of it
/// whose every request is bounded by [`IO`].
pub async fn start(config: ServerConfig) -> (RunningServer, Client) {
    let addr = "127.0.0.1:0".parse().expect("a socket address");
    let server = tokio::time::timeout(IO, spawn(config, addr))
        .await
        .expect("spawn timed out")
        .expect("bind 127.0.0.1:0");
    let client = Client::new(server.url())
        .expect("an HTTP client")
        .with_timeout(IO);
    (server, client)
}

/// Shuts `server` down within [`IO`].
pub async fn stop(server: RunningServer) {
    tokio::time::timeout(IO, server.shutdown())
        .await
        .expect("shutdown did not finish: open streams were not closed");
}
