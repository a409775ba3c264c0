//! The accept loop: one hyper HTTP/1.1 connection task per client, at most
//! `max_connections` of them, each with a header-read timeout and a handle
//! that lets a stream drop it; and the two-phase shutdown.
//!
//! Shutdown: when the signal turns true the loop stops accepting, every
//! connection finishes its request in flight and closes, every stream ends
//! cleanly (SSE bodies end, WebSockets close with 1001). What is still open
//! after `shutdown_grace` — a client that stopped reading cannot take its
//! last bytes — is dropped (the hard stop), so shutdown always ends.

use crate::append_loop::{AppendLoop, LoopEnd};
use crate::client_addr::{is_trusted, ClientKey};
use crate::config::ServerConfig;
use crate::connection::{ConnectionHandle, Peer};
use crate::direct_route::Direct;
use crate::head_timeout::{AnsweredOnDrop, HeadClock};
use crate::lifecycle::turned_true;
use crate::metrics::Limit;
use crate::own_wake::Repoll;
use crate::prefixed_io::PrefixedIo;
use crate::routes::router;
use crate::state::{AppState, ServerState};
use axum::extract::Request;
use bytes::Bytes;
use futures_util::future::Either;
use futures_util::FutureExt as _;
use gapless_client::Failure;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;
use tower::ServiceExt;

/// How long a refused connection gets to take its `503`.
const REFUSAL_WRITE: Duration = Duration::from_secs(1);

/// A pause after an accept error (out of file descriptors, say), so the
/// loop does not spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

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

    /// Shuts down (see the module docs) and waits until the server stopped:
    /// at most the shutdown grace plus the time to drop what is left.
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
/// An invalid `config` ([`ServerConfig::validate`], as
/// `ErrorKind::InvalidInput`), or the bind's I/O error.
pub async fn spawn(config: ServerConfig, addr: SocketAddr) -> std::io::Result<RunningServer> {
    config
        .validate()
        .map_err(|error| std::io::Error::new(std::io::ErrorKind::InvalidInput, error))?;
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

/// Serves on `listener` until `shutdown` turns true, then shuts down (see
/// the module docs).
///
/// # Errors
/// The shared history of `config.redis` cannot be reached. Accept errors
/// are logged and retried.
pub async fn serve(
    listener: TcpListener,
    config: ServerConfig,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let state = AppState::connect(config, shutdown)
        .await
        .map_err(std::io::Error::other)?;
    serve_state(listener, state).await
}

/// [`serve`] with a state the caller built (and may share, say to read
/// it in its own routes).
///
/// # Errors
/// As [`serve`].
pub async fn serve_state(listener: TcpListener, state: AppState) -> std::io::Result<()> {
    let app = router(state.clone());
    let direct = Direct::of(&state.0).map(Arc::new);
    accept(listener, state, app, direct).await
}

/// Serves `app` — [`router`]`(state)` wrapped in the application's own
/// layers (authentication, say), or its routes merged with
/// [`routes`](crate::routes) under [`with_layers`](crate::with_layers) — with
/// the server's connection limit, header-read timeout and two-phase
/// shutdown, until `state`'s shutdown signal.
///
/// # Errors
/// As [`serve`].
pub async fn serve_router(
    listener: TcpListener,
    state: AppState,
    app: axum::Router,
) -> std::io::Result<()> {
    accept(listener, state, app, None).await
}

/// The accept loop of [`serve_router`], with the stream route served by
/// `direct` when given ([`Direct`]: only for the server's own router, whose
/// stream route it answers as the router would).
async fn accept(
    listener: TcpListener,
    state: AppState,
    app: axum::Router,
    direct: Option<Arc<Direct>>,
) -> std::io::Result<()> {
    let shared = Arc::clone(&state.0);
    let connections = Arc::new(Semaphore::new(shared.config.max_connections));
    // No hyper timer: the request-head timeout is the connection task's
    // (`head_timeout`), not a timer per request.
    let http = hyper::server::conn::http1::Builder::new();
    let mut shutdown = shared.lifecycle.shutdown.clone();
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = turned_true(&mut shutdown) => break,
        };
        // Events are small writes that must leave at once: no Nagle delay.
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%error, "could not set TCP_NODELAY");
        }
        // A reader that stopped reading holds at most this much kernel
        // memory before writes block and the write timeout runs.
        if shared.config.send_buffer > 0 {
            let socket = socket2::SockRef::from(&tcp);
            if let Err(error) = socket.set_send_buffer_size(shared.config.send_buffer) {
                tracing::debug!(%error, "could not set SO_SNDBUF");
            }
        }
        let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
            shared.metrics.tripped(Limit::Connections);
            tokio::spawn(refuse(tcp, Refused::Connections));
            continue;
        };
        // A proxy's connections carry many clients: only the global limit
        // applies to them.
        let client_slot = if is_trusted(peer.ip(), &shared.config.trusted_proxies) {
            None
        } else {
            match shared
                .limits
                .connections_per_client
                .take(ClientKey::of(peer.ip()))
            {
                Some(slot) => Some(slot),
                None => {
                    shared.metrics.tripped(Limit::ConnectionsPerClient);
                    tokio::spawn(refuse(tcp, Refused::ConnectionsPerClient));
                    continue;
                }
            }
        };
        let handle = ConnectionHandle::default();
        let clock = Arc::new(HeadClock::new());
        let peer = Peer(peer.ip());
        let (app, direct, http) = (app.clone(), direct.clone(), http.clone());
        let server = Arc::clone(&shared);
        let task = async move {
            // Appends are answered by the connection's own loop until a
            // request needs hyper (`append_loop`).
            let handed = match direct.as_deref() {
                Some(route) => {
                    let own = AppendLoop {
                        direct: route,
                        shared: &server,
                        clock: &clock,
                    };
                    own.run(tcp).await
                }
                None => LoopEnd::HandOver(tcp, Bytes::new()),
            };
            if let LoopEnd::HandOver(tcp, read) = handed {
                let service = {
                    let handle = handle.clone();
                    let clock = Arc::clone(&clock);
                    tower::service_fn(move |mut request: Request<Incoming>| {
                        clock.head_arrived();
                        let clock = Arc::clone(&clock);
                        let stream_path = direct
                            .as_ref()
                            .and_then(|_| Direct::path_of(request.uri().path()));
                        let answer = match (direct.clone(), stream_path) {
                            // Boxed: the handler's future is large, and moving it
                            // through hyper's service glue by value copies it.
                            (Some(direct), Some(path)) => Either::Left(Box::pin(async move {
                                Ok::<_, Infallible>(direct.serve(path, request, peer).await)
                            })),
                            _ => {
                                request.extensions_mut().insert(handle.clone());
                                request.extensions_mut().insert(peer);
                                Either::Right(app.clone().oneshot(request))
                            }
                        };
                        answer.map(move |answered| {
                            answered.map(|response| {
                                response.map(|body| AnsweredOnDrop::new(body, clock))
                            })
                        })
                    })
                };
                let io = TokioIo::new(PrefixedIo::new(read, tcp));
                let connection = http
                    .serve_connection(io, TowerToHyperService::new(service))
                    .with_upgrades();
                run_connection(connection, handle, clock, server).await;
            }
            drop((permit, client_slot));
        };
        tokio::spawn(shared.lifecycle.track(task));
    }
    drop(listener);
    stop(&shared).await;
    Ok(())
}

/// Drives one connection until it ends, the shutdown asks it to finish, or
/// a stream drops it.
async fn run_connection<C>(
    connection: C,
    handle: ConnectionHandle,
    clock: Arc<HeadClock>,
    shared: Arc<ServerState>,
) where
    C: std::future::Future<Output = Result<(), hyper::Error>> + GracefulConnection,
{
    tokio::pin!(connection);
    let mut repoll = Repoll::default();
    let head_timeout = clock.expired(shared.config.header_read_timeout);
    tokio::pin!(head_timeout);
    let mut shutdown = shared.lifecycle.shutdown.clone();
    let mut draining = false;
    loop {
        tokio::select! {
            // Its own wakes answered by polling it again (`own_wake`).
            result = std::future::poll_fn(|cx| repoll.poll(cx, |cx| connection.as_mut().poll(cx))) => {
                // (hyper has no timer here, so no error of its is a
                // timeout: the head timeout is the branch below.)
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error");
                }
                return;
            }
            () = turned_true(&mut shutdown), if !draining => {
                connection.as_mut().graceful();
                draining = true;
            }
            () = handle.closed() => return,
            () = head_timeout.as_mut() => {
                shared.metrics.tripped(Limit::HeaderReadTimeout);
                tracing::debug!("no request head within the header-read timeout");
                return;
            }
        }
    }
}

/// A connection that can be asked to finish its request in flight and
/// close.
trait GracefulConnection {
    fn graceful(self: std::pin::Pin<&mut Self>);
}

impl<I, S> GracefulConnection for hyper::server::conn::http1::UpgradeableConnection<I, S>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::HttpService<Incoming>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::ResBody: hyper::body::Body + Send + 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn graceful(self: std::pin::Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// Which connection limit a refused connection met.
#[derive(Clone, Copy, Debug)]
enum Refused {
    /// `max_connections`: `503 too_many_connections`.
    Connections,
    /// `max_connections_per_client`: `429 too_many_connections_per_client`.
    ConnectionsPerClient,
}

/// Answers a connection over a limit with its JSON error and closes it.
async fn refuse(mut tcp: TcpStream, refused: Refused) {
    let (status, failure) = match refused {
        Refused::Connections => ("503 Service Unavailable", Failure::TooManyConnections),
        Refused::ConnectionsPerClient => (
            "429 Too Many Requests",
            Failure::TooManyConnectionsPerClient,
        ),
    };
    let body = serde_json::to_string(&failure).unwrap_or_default();
    let answer = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(REFUSAL_WRITE, async {
        let _ = tcp.write_all(answer.as_bytes()).await;
        let _ = tcp.shutdown().await;
    })
    .await;
}

/// The shutdown after the accept loop: wait for every tracked task (the
/// connections draining, the streams ending) up to the grace, then the hard
/// stop drops what is left.
async fn stop(shared: &ServerState) {
    let lifecycle = &shared.lifecycle;
    lifecycle.tasks.close();
    if tokio::time::timeout(shared.config.shutdown_grace, lifecycle.tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            open = lifecycle.tasks.len(),
            "shutdown grace over; dropping what is still open"
        );
        let _ = lifecycle.hard_stop.send(true);
        lifecycle.tasks.wait().await;
    }
}
