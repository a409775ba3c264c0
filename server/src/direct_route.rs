//! The Durable Streams route served straight from hyper: the accept loop
//! gives a request for `/v1/stream/{path}` to [`Direct::serve`] instead of
//! the router, when the server runs its own routes and layers (`serve`)
//! without `--cors-origin` or `--access-log`.
//!
//! The answer is the router's, byte for byte: the same handler
//! ([`serve_stream`]), the path decoded as the router decodes it, the
//! stream route's CORS ([`AnyOrigin`]), a panic answered `500` as
//! [`panicked`] answers it, an error that is not JSON rewritten by
//! [`json_errors`]. What it skips is the router's per-request work (route
//! lookup, the layer stack's boxed futures and clones), which cost more
//! CPU than an append itself. A request it does not recognise as the
//! stream route's (a path that does not decode, say) goes to the router.
//! Appends come to it from the connection's own loop (`append_loop`,
//! through [`Direct::append`], without a request or response built),
//! every other request of the route from hyper.

use crate::connection::Peer;
use crate::extract::BodyError;
use crate::handlers::streams::append::{self, Accepted, AppendHeaders};
use crate::handlers::streams::{body_refused, check_path, serve_stream};
use crate::layers::{json_errors, panicked, AnyOrigin};
use crate::metrics::Limit;
use crate::state::ServerState;
use axum::body::Body;
use axum::http::{header, Method, Request, Response};
use futures_util::FutureExt as _;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

/// The route's prefix; what follows it is the stream's path.
const PREFIX: &str = "/v1/stream/";

/// The stream route without the router, for one server.
pub(crate) struct Direct {
    state: Arc<ServerState>,
    cors: AnyOrigin,
}

impl Direct {
    /// The direct route of the server holding `state`, or `None` when its
    /// configuration needs the router's layers: configured CORS origins
    /// (tower-http's CORS answers for every route) or the access log.
    pub(crate) fn of(state: &Arc<ServerState>) -> Option<Self> {
        let config = &state.config;
        (config.cors_origins.is_empty() && !config.access_log).then(|| Self {
            state: Arc::clone(state),
            cors: AnyOrigin::new(),
        })
    }

    /// Whether `uri_path` may be the route's: a non-empty rest after
    /// [`PREFIX`]. A cheap test before [`Self::path_of`] decodes it.
    pub(crate) fn may_be_route(uri_path: &str) -> bool {
        Self::rest_of(uri_path).is_some()
    }

    /// What follows [`PREFIX`] in `uri_path`, if that is not empty.
    fn rest_of(uri_path: &str) -> Option<&str> {
        uri_path
            .strip_prefix(PREFIX)
            .filter(|rest| !rest.is_empty())
    }

    /// The stream's path (decoded) if `uri_path` is the route's, as the
    /// router would capture it: a non-empty rest after [`PREFIX`] that
    /// percent-decodes to UTF-8. `None` for anything else, which the router
    /// answers.
    pub(crate) fn path_of(uri_path: &str) -> Option<String> {
        let rest = Self::rest_of(uri_path)?;
        percent_encoding::percent_decode_str(rest)
            .decode_utf8()
            .ok()
            .map(|path| path.into_owned())
    }

    /// Answers `request` to the stream at `path` (from [`Self::path_of`]),
    /// sent by `peer`.
    pub(crate) async fn serve<B>(
        &self,
        path: String,
        request: Request<B>,
        peer: Peer,
    ) -> Response<Body>
    where
        B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        let method = request.method().clone();
        let had_origin = request.headers().contains_key(header::ORIGIN);
        let mut request = request.map(Body::new);
        request.extensions_mut().insert(peer);
        let answer = AssertUnwindSafe(serve_stream(&self.state, path, request))
            .catch_unwind()
            .await;
        let mut response = match answer {
            Ok(response) => json_errors(response).await,
            Err(panic) => panicked(&self.state, panic),
        };
        self.cors.apply(&method, had_origin, response.headers_mut());
        response
    }

    /// The largest append body the route takes ([`append::body_limit`]).
    pub(crate) fn append_body_limit(&self) -> usize {
        append::body_limit(&self.state)
    }

    /// An append the connection's own loop read (`append_loop`), answered
    /// as [`Self::serve`] answers it: to the stream at `path` (from
    /// [`Self::path_of`] of `raw_path`, the target's path undecoded), with
    /// `headers` (names and values, in the order sent) and `body` (within
    /// [`Self::append_body_limit`]); `had_origin`: one of the headers is
    /// `Origin`. `Ok`: the append accepted, its answer written by the loop
    /// with [`Accepted::headers`] and [`Self::cors_on_write`]; `Err`: the
    /// answer.
    pub(crate) async fn append<'a>(
        &self,
        path: &str,
        raw_path: &str,
        headers: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        had_origin: bool,
        body: &[u8],
    ) -> Result<Accepted, Response<Body>> {
        let state = &self.state;
        let appended = AssertUnwindSafe(async {
            check_path(path, raw_path)?;
            let headers = AppendHeaders::read(headers)?;
            match state.shared_streams.get() {
                Some(shared) => {
                    Box::pin(append::append(state, &**shared, path, &headers, body)).await
                }
                None => append::append(state, &*state.streams, path, &headers, body).await,
            }
        })
        .catch_unwind()
        .await;
        let mut refused = match appended {
            Ok(Ok(accepted)) => return Ok(accepted),
            Ok(Err(refused)) => json_errors(refused).await,
            Err(panic) => panicked(state, panic),
        };
        self.cors
            .apply(&Method::POST, had_origin, refused.headers_mut());
        Err(refused)
    }

    /// The CORS headers of an accepted append's answer (`had_origin`: the
    /// request carried an `Origin`), as [`Self::serve`] adds them.
    pub(crate) fn cors_on_write(&self, had_origin: bool) -> Option<[(&'static str, &[u8]); 2]> {
        self.cors.on_write(had_origin)
    }

    /// The route's answer to an append whose body did not arrive within
    /// `--body-read-timeout` (counted as a tripped limit), as the handler
    /// gives it when it reads the body: `408 body_read_timeout`, closing the
    /// connection. `had_origin`: the request carried an `Origin`.
    pub(crate) fn append_body_timed_out(&self, had_origin: bool) -> Response<Body> {
        self.state.metrics.tripped(Limit::BodyReadTimeout);
        let mut response = body_refused(&BodyError::Timeout);
        self.cors
            .apply(&Method::POST, had_origin, response.headers_mut());
        response
    }
}
