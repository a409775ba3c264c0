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
//! Each module imports only modules above it in this table (CI runs
//! `scripts/module-graph.py`, which fails on any import cycle):
//!
//! | module | holds |
//! |---|---|
//! | `client_addr` | who a client is: peer address, [`TrustedProxy`], `X-Forwarded-For` |
//! | `ids` | [`SessionId`] and the publish key: [`gapless::id::Id`]s |
//! | `json` | compacting JSON text without re-encoding it |
//! | `connection` | the peer address and a handle that lets a stream drop its TCP connection |
//! | `metrics` | the `prometheus-client` families and their typed labels |
//! | `config` | [`ServerConfig`], [`HistoryConfig`], [`ServerConfig::validate`] |
//! | `exposure` | [`check_exposure`]: whether `serve` may start on a non-loopback address without publish keys |
//! | `admission` | what sessions and connections hold against the limits, given back on drop |
//! | `history` | the shared history in Redis (`--redis`): scripts, group commit, reads, notifications |
//! | `replica` | one session's ring as a copy of its history: the committer (appends) and the mirror (the ring's one `Writer`) |
//! | `entry` | one live session here: the engine's session, its ring's writer, its idle clock and admission |
//! | `session_history` | the session-history trait and its two modes: `Local` (the ring is the history) and `Replicated` (`--redis`) |
//! | `streams` | the Durable Streams (`/v1/stream/{path}`): each stream's ring, or its log in the shared history; offsets, forks, the rules of an append |
//! | `state` | [`AppState`]: sessions, streams, limits, metrics, the shutdown signal |
//! | `error` | every error answer, rendered to its `gapless_client::wire` body |
//! | `extract` | the session in the path, the client, the publish key, bodies within the limits, cursors |
//! | `delivery` | the one replay → follow → gap → detach loop, and its SSE and WebSocket transports |
//! | `handlers` | one handler per route (the Durable Streams routes in `handlers::streams`) |
//! | `layers` | request logs (session IDs as tags, tickets redacted), panic → 500, JSON errors, CORS ([`with_layers`]) |
//! | `routes` | [`router`], [`routes`] |
//! | `direct_route` | the Durable Streams route served straight from hyper, beside the router (same handler, same answers) |
//! | `head_timeout` | the request-head timeout, one clock per connection instead of a timer per request |
//! | `append_loop` | a connection's own HTTP/1.1 loop for appends, handing any other request to hyper |
//! | `prefixed_io` | a connection handed to hyper with the bytes already read from it |
//! | `own_wake` | a connection's wakes of its own task, answered by polling it again |
//! | `serve` | the accept loop: connection limits, header-read timeout, two-phase shutdown |
//!
//! The wire bodies are `gapless_client::wire` types, so this server and the
//! client crate serialise and parse the same definitions.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod admission;
mod append_loop;
mod client_addr;
mod config;
mod connection;
mod delivery;
mod direct_route;
mod entry;
mod error;
mod exposure;
mod extract;
mod handlers;
mod head_timeout;
mod history;
mod ids;
mod json;
mod layers;
mod lifecycle;
mod metrics;
mod own_wake;
mod prefixed_io;
mod replica;
mod routes;
mod serve;
mod session_history;
mod state;
mod streams;

pub use client_addr::TrustedProxy;
pub use config::{
    DataDir, DiskLimits, Fsync, InvalidConfig, MemoryBudget, ServerConfig, MIN_DURATION,
};
pub use exposure::{check_exposure, Exposure};
pub use history::{HistoryConfig, HistoryError};
pub use ids::{PublishKey, PublishKeyKind, SessionId, SessionKind};
pub use layers::with_layers;
pub use routes::{router, routes};
pub use serve::{serve, serve_router, serve_state, spawn, RunningServer};
pub use state::{AppState, StartError};
