//! The tower layers around every route: request logs with the ticket
//! redacted (with `--access-log`), a JSON `500` for a panicking handler, JSON bodies for every
//! error answer (405 included), and CORS for the configured origins; and
//! the Durable Streams route's CORS for any origin when none is configured
//! ([`with_stream_cors`]).

use crate::error::json_error;
use crate::handlers::streams;
use crate::ids::SessionId;
use crate::metrics::Limit;
use crate::state::{AppState, ServerState};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Uri};
use axum::middleware::Next;
use axum::routing::MethodRouter;
use axum::Router;
use gapless_client::Failure;
use std::any::Any;
use std::fmt::Write as _;
use std::sync::Arc;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::trace::{DefaultOnFailure, DefaultOnResponse, TraceLayer};
use tracing::Level;

/// The largest error body read back to wrap it in JSON.
const ERROR_BODY_LIMIT: usize = 4 << 10;

/// Wraps `router` (the protocol's routes, or an application's routes merged
/// with them) in the server's layers, outermost first: CORS, request logs,
/// JSON error bodies, panic → `500`.
pub fn with_layers(router: Router, state: &AppState) -> Router {
    let shared = Arc::clone(&state.0);
    let router = router
        .layer(CatchPanicLayer::custom(
            move |panic: Box<dyn Any + Send>| panicked(&shared, panic),
        ))
        .layer(axum::middleware::map_response(json_errors));
    let router = match state.0.config.access_log {
        true => router.layer(access_log()),
        false => router,
    };
    match cors(&state.0.config.cors_origins) {
        Some(cors) => router.layer(cors),
        None => router,
    }
}

/// The access log (`--access-log`): a span per request with its method and
/// [`redacted`] path, and a line per response at INFO.
fn access_log() -> TraceLayer<
    tower_http::classify::SharedClassifier<tower_http::classify::ServerErrorsAsFailures>,
    impl Fn(&Request<Body>) -> tracing::Span + Clone,
    tower_http::trace::DefaultOnRequest,
    DefaultOnResponse,
> {
    TraceLayer::new_for_http()
        .make_span_with(|request: &Request<Body>| {
            tracing::info_span!(
                "request",
                method = %request.method(),
                uri = %redacted(request.uri()),
            )
        })
        .on_response(DefaultOnResponse::new().level(Level::INFO))
        // A 5xx is already in the response line; an expected `503
        // too_many_sessions` under load must not flood the log at ERROR.
        // Real internal errors are logged where they happen.
        .on_failure(DefaultOnFailure::new().level(Level::DEBUG))
}

/// The request line as logged. A session ID is a bearer credential (it
/// reads, emits and deletes), so the path carries its tag instead
/// (`/session/[1a2b3c4d]/events`; a segment that is not a well-formed ID,
/// which may be a mistyped one, is `[malformed]`); an upgrade ticket never
/// reaches a log either. A publish key travels only in the `Authorization`
/// header, and no header is logged: the span records the method and this
/// line, and [`DefaultOnResponse`] leaves headers out unless asked.
fn redacted(uri: &Uri) -> String {
    let mut path = String::with_capacity(uri.path().len());
    let mut segments = uri.path().split('/');
    let mut previous = None;
    if let Some(first) = segments.next() {
        path.push_str(first);
        previous = Some(first);
    }
    for segment in segments {
        path.push('/');
        if previous == Some("session") {
            match segment.parse::<SessionId>() {
                Ok(id) => {
                    let _ = write!(path, "[{}]", id.tag());
                }
                Err(_) => path.push_str("[malformed]"),
            }
        } else {
            path.push_str(segment);
        }
        previous = Some(segment);
    }
    let Some(query) = uri.query() else {
        return path;
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some(("ticket", _)) => "ticket=REDACTED".to_owned(),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{path}?{}", query.join("&"))
}

/// A handler panicked: count it, log it, answer `500 internal` (the panic
/// message stays in the log). Guards held by the handler (a transport's
/// attachment) were dropped while unwinding.
pub(crate) fn panicked(state: &ServerState, panic: Box<dyn Any + Send>) -> Response<Body> {
    state.metrics.tripped(Limit::Panic);
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    tracing::error!(%message, "handler panicked");
    json_error(StatusCode::INTERNAL_SERVER_ERROR, &Failure::Internal)
}

/// Every error answer is JSON with an `error` code: the server's own are
/// already; those axum makes (405, an extractor's rejection) are rewritten
/// here, keeping their headers (`Allow`).
pub(crate) async fn json_errors(response: Response<Body>) -> Response<Body> {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, ERROR_BODY_LIMIT)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    let failure = match status {
        StatusCode::METHOD_NOT_ALLOWED => Failure::MethodNotAllowed,
        StatusCode::NOT_FOUND => Failure::NotFound,
        StatusCode::PAYLOAD_TOO_LARGE => Failure::BodyTooLarge { detail: text },
        StatusCode::UNSUPPORTED_MEDIA_TYPE => Failure::UnsupportedMediaType,
        status if status.is_server_error() => {
            tracing::error!(%status, body = %text, "internal error answer");
            Failure::Internal
        }
        _ => Failure::BadRequest { detail: text },
    };
    let status = if matches!(failure, Failure::BadRequest { .. }) {
        StatusCode::BAD_REQUEST
    } else {
        status
    };
    let mut rewritten = json_error(status, &failure);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.status = status;
    *rewritten.headers_mut() = parts.headers;
    rewritten
}

/// The Durable Streams route in the server's CORS, the one mechanism of
/// both wires (no handler writes an `Access-Control-*` header). With
/// `--cors-origin`, [`cors`] answers for every route, the stream route
/// included, in [`with_layers`]. Without it the session routes send no CORS
/// header, while the stream route answers any origin ([`any_origin`]): its
/// reads need no credential and its writes carry a bearer key, never a
/// cookie, and the protocol's browser clients read its headers.
pub(crate) fn with_stream_cors(
    route: MethodRouter<AppState>,
    state: &AppState,
) -> MethodRouter<AppState> {
    if !state.0.config.cors_origins.is_empty() {
        return route;
    }
    route.layer(axum::middleware::from_fn_with_state(
        Arc::new(AnyOrigin::new()),
        any_origin,
    ))
}

/// The methods a stream's preflight allows.
const STREAM_METHODS: &str = "GET, POST, PUT, DELETE, HEAD, OPTIONS";

/// How long a browser may keep a stream's preflight, in seconds.
const STREAM_PREFLIGHT_MAX_AGE: &str = "86400";

/// The stream route's CORS for any origin (without `--cors-origin`): the
/// values it sends, built once, and the rule for when it sends them.
#[derive(Clone)]
pub(crate) struct AnyOrigin {
    /// [`streams::EXPOSED_HEADERS`], comma-separated.
    exposed: HeaderValue,
    /// [`streams::REQUEST_HEADERS`], comma-separated.
    allowed: HeaderValue,
}

impl AnyOrigin {
    /// The protocol's exposed and request headers, listed once.
    pub(crate) fn new() -> Self {
        Self {
            exposed: listed(streams::EXPOSED_HEADERS),
            allowed: listed(streams::REQUEST_HEADERS),
        }
    }

    /// Adds the CORS headers to the answer to a request with `method`
    /// that carried an `Origin` header or not: `Access-Control-Allow-Origin:
    /// *` and the protocol's exposed headers; the answer to `OPTIONS` (the
    /// route's `204`) also allows the protocol's methods and request
    /// headers, for a day.
    ///
    /// A write (`POST`, `PUT`, `DELETE`) without `Origin` is not a browser's
    /// cross-origin request, and its answer is never cached: it gets none
    /// (300 bytes less on every append). A read gets them whatever it
    /// carried, since a shared cache may give its answer to a browser.
    pub(crate) fn apply(&self, method: &Method, had_origin: bool, answer: &mut HeaderMap) {
        let write = matches!(*method, Method::POST | Method::PUT | Method::DELETE);
        if write && !had_origin {
            return;
        }
        answer.insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        );
        answer.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, self.exposed.clone());
        if *method == Method::OPTIONS {
            answer.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static(STREAM_METHODS),
            );
            answer.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, self.allowed.clone());
            answer.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static(STREAM_PREFLIGHT_MAX_AGE),
            );
        }
    }
}

impl AnyOrigin {
    /// The CORS headers [`Self::apply`] adds to the answer to a write
    /// (`POST`, `PUT`, `DELETE`), name and value, in its order: none
    /// without `Origin`. For an answer written without a header map (the
    /// append loop's).
    pub(crate) fn on_write(&self, had_origin: bool) -> Option<[(&'static str, &[u8]); 2]> {
        had_origin.then(|| {
            [
                (header::ACCESS_CONTROL_ALLOW_ORIGIN.as_str(), &b"*"[..]),
                (
                    header::ACCESS_CONTROL_EXPOSE_HEADERS.as_str(),
                    self.exposed.as_bytes(),
                ),
            ]
        })
    }
}

/// `names` as one header value, `a, b, c`.
fn listed(names: &[&str]) -> HeaderValue {
    HeaderValue::from_str(&names.join(", ")).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// [`AnyOrigin`] on every answer of the stream route (its refusals and
/// axum's own included).
async fn any_origin(
    State(cors): State<Arc<AnyOrigin>>,
    request: Request<Body>,
    next: Next,
) -> Response<Body> {
    let method = request.method().clone();
    let had_origin = request.headers().contains_key(header::ORIGIN);
    let mut response = next.run(request).await;
    cors.apply(&method, had_origin, response.headers_mut());
    response
}

/// CORS for `origins`, or none at all: every route, the stream route
/// included. Preflights are answered for the protocol's methods and request
/// headers; `Vary: Origin` is set.
fn cors(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let origins: Vec<HeaderValue> = origins
        .iter()
        .filter_map(|origin| match HeaderValue::from_str(origin) {
            Ok(value) => Some(value),
            Err(_) => {
                tracing::warn!(%origin, "ignoring a CORS origin that is not a header value");
                None
            }
        })
        .collect();
    Some(
        CorsLayer::new()
            .allow_origin(AllowOrigin::list(origins))
            .allow_methods([
                Method::GET,
                Method::POST,
                Method::DELETE,
                // Durable Streams: create and metadata.
                Method::PUT,
                Method::HEAD,
            ])
            .allow_headers(
                [
                    header::CONTENT_TYPE,
                    header::HeaderName::from_static("last-event-id"),
                    // The publish key, as `Authorization: Bearer <key>`.
                    header::AUTHORIZATION,
                ]
                .into_iter()
                .chain(
                    streams::REQUEST_HEADERS
                        .iter()
                        .map(|name| header::HeaderName::from_static(name)),
                )
                .collect::<Vec<_>>(),
            )
            .expose_headers(
                streams::EXPOSED_HEADERS
                    .iter()
                    .map(|name| header::HeaderName::from_static(name))
                    .collect::<Vec<_>>(),
            ),
    )
}

#[cfg(test)]
mod tests {
    use super::redacted;
    use crate::ids::SessionId;

    #[test]
    fn session_ids_and_tickets_never_reach_the_log() {
        let id = SessionId::random().unwrap();
        let uri = format!("/session/{id}/ws?x=1&ticket=00112233445566778899aabbccddeeff")
            .parse()
            .unwrap();
        assert_eq!(
            redacted(&uri),
            format!("/session/[{}]/ws?x=1&ticket=REDACTED", id.tag())
        );
        let near_miss = id.to_string().to_uppercase();
        assert_eq!(
            redacted(&format!("/session/{near_miss}").parse().unwrap()),
            "/session/[malformed]"
        );
        assert_eq!(redacted(&"/session".parse().unwrap()), "/session");
        assert_eq!(redacted(&"/metrics".parse().unwrap()), "/metrics");
    }
}
