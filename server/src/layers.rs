//! The tower layers around every route: request logs with the ticket
//! redacted, a JSON `500` for a panicking handler, JSON bodies for every
//! error answer (405 included), and CORS for the configured origins.

use crate::error::json_error;
use crate::handlers::streams;
use crate::ids::SessionId;
use crate::metrics::Limit;
use crate::state::{AppState, ServerState};
use axum::body::Body;
use axum::http::{header, HeaderValue, Method, Request, Response, StatusCode, Uri};
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
        .layer(axum::middleware::map_response(json_errors))
        .layer(
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
                // too_many_sessions` under load must not flood the log at
                // ERROR. Real internal errors are logged where they happen.
                .on_failure(DefaultOnFailure::new().level(Level::DEBUG)),
        );
    match cors(&state.0.config.cors_origins) {
        Some(cors) => router.layer(cors),
        None => router,
    }
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
fn panicked(state: &ServerState, panic: Box<dyn Any + Send>) -> Response<Body> {
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
async fn json_errors(response: Response<Body>) -> Response<Body> {
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

/// CORS for `origins`, or none at all. Preflights are answered for the
/// protocol's methods and request headers; `Vary: Origin` is set.
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
