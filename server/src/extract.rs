//! Request extractors: each turns one part of a request into a typed value
//! or the protocol's JSON error, so handlers only see valid input.

use crate::client_addr::{client_ip, ClientKey};
use crate::connection::Peer;
use crate::entry::Entry;
use crate::error::ApiError;
use crate::ids::{PublishKey, SessionId};
use crate::metrics::Limit;
use crate::state::{AppState, ServerState};
use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap};
use bytes::BytesMut;
use gapless::session::Session;
use gapless::EventId;
use gapless::SingleWriter;
use gapless_client::wire::{bearer_token, CursorBody};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

/// The session named by the `{id}` path segment, its idle clock restarted.
/// A malformed ID is as unknown as a deleted or expired one: `404
/// no_such_session`, never a `400` that would tell a prober which IDs are
/// well formed. With a shared history, a session this instance does not
/// hold is loaded from it (`503 history_unavailable` if it cannot be).
pub(crate) struct SessionEntry {
    /// The ID as parsed.
    pub(crate) id: SessionId,
    /// The live session.
    pub(crate) entry: Arc<Entry>,
}

impl FromRequestParts<AppState> for SessionEntry {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let SessionPath(id) = SessionPath::from_request_parts(parts, state).await?;
        let entry = state
            .0
            .find_session(&id)
            .await?
            .ok_or(ApiError::NoSuchSession)?;
        // Any request naming the session restarts its idle clock.
        state.0.touch(&entry);
        Ok(Self { id, entry })
    }
}

/// The session ID in the `{id}` path segment, not looked up. Anything that
/// is not exactly a session ID — malformed, not UTF-8 once percent-decoded
/// (`%FF`) — is `404 no_such_session`, like an unknown one.
pub(crate) struct SessionPath(pub(crate) SessionId);

impl<S: Send + Sync> FromRequestParts<S> for SessionPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::NoSuchSession)?;
        id.parse().map(Self).map_err(|_| ApiError::NoSuchSession)
    }
}

/// The publish key a request presents as `Authorization: Bearer <key>`
/// (the scheme as [`bearer_token`] reads it, the same standard scheme as
/// the Durable Streams routes); `None` when absent, in another scheme or
/// malformed (either way it proves nothing). The retired
/// `gapless-publish-key` header is not read: one scheme on both wires.
pub(crate) struct PresentedKey(pub(crate) Option<PublishKey>);

impl<S: Send + Sync> FromRequestParts<S> for PresentedKey {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self::of(&parts.headers))
    }
}

impl PresentedKey {
    /// The key `headers` present (both wires read it here).
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        Self::of_authorization(
            headers
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok()),
        )
    }

    /// The key an `Authorization` value presents (`None`: no header, or
    /// one that is not text).
    pub(crate) fn of_authorization(value: Option<&str>) -> Self {
        Self(
            value
                .and_then(bearer_token)
                .and_then(|token| token.parse().ok()),
        )
    }
}

/// The session of an emit, from a request allowed to publish into it:
/// with `--publish-keys`, one that presents the session's key (else `401
/// unauthorized` with `WWW-Authenticate: Bearer`, before any of the body
/// is read).
pub(crate) struct Publisher(pub(crate) SessionEntry);

impl FromRequestParts<AppState> for Publisher {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let session = SessionEntry::from_request_parts(parts, state).await?;
        let Ok(PresentedKey(key)) = PresentedKey::from_request_parts(parts, state).await;
        if session.entry.may_publish(key.as_ref()) {
            Ok(Self(session))
        } else {
            Err(ApiError::Unauthorized)
        }
    }
}

/// Who sent the request, for the per-client limits: the connection's peer
/// (or, from a trusted proxy, the forwarded client). `None` when the
/// server that runs the router did not record the peer (an application's
/// own `axum::serve` without `ConnectInfo`): such requests are not counted
/// per client.
pub(crate) struct Client(pub(crate) Option<ClientKey>);

impl FromRequestParts<AppState> for Client {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        AppState(state): &AppState,
    ) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<Peer>()
            .map(|Peer(ip)| *ip)
            .or_else(|| {
                parts
                    .extensions
                    .get::<ConnectInfo<SocketAddr>>()
                    .map(|ConnectInfo(addr)| addr.ip())
            });
        Ok(Self(peer.map(|peer| {
            ClientKey::of(client_ip(
                peer,
                &parts.headers,
                &state.config.trusted_proxies,
            ))
        })))
    }
}

/// A request body within `--max-body`; over it, `413 body_too_large`
/// (read no further: see [`OverLimit::Stop`]).
pub(crate) struct Body(pub(crate) Bytes);

impl FromRequest<AppState> for Body {
    type Rejection = ApiError;

    /// Reads the whole body within `--body-read-timeout` of the head: a
    /// client that sends it slower holds its connection no longer (`408
    /// body_read_timeout`, and the connection closes).
    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        read_body(
            &state.0,
            request.into_body(),
            state.0.config.max_body,
            OverLimit::Stop,
        )
        .await
        .map(Self)
        .map_err(ApiError::from)
    }
}

/// What a body over its limit is read on for, unkept, before the `413`
/// ([`OverLimit::Drain`]).
const DRAIN_BYTES: usize = 64 << 20;

/// What [`read_body`] does with a body once it is over its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OverLimit {
    /// Stops reading at the frame that passes the limit (the session
    /// routes, as axum's own limit did).
    Stop,
    /// Reads the rest, up to [`DRAIN_BYTES`] and within the same timeout,
    /// and drops it (the Durable Streams routes): a client still sending
    /// it would otherwise find the connection reset before it reads the
    /// answer.
    Drain,
}

/// Why [`read_body`] gave no body. Each wire answers it in its own shape
/// (the session routes through [`ApiError`], the Durable Streams routes
/// through their refusals): `413 body_too_large`, `408 body_read_timeout`
/// with `Connection: close`, `400 bad_request`.
#[derive(Debug)]
pub(crate) enum BodyError {
    /// The body is over `limit` bytes.
    TooLarge { limit: usize },
    /// The body did not arrive within `--body-read-timeout` (counted as a
    /// tripped limit).
    Timeout,
    /// The connection failed while the body was read.
    Unreadable(axum::Error),
}

impl From<BodyError> for ApiError {
    /// The session routes' answer to a body not read.
    fn from(error: BodyError) -> Self {
        match error {
            BodyError::TooLarge { limit } => Self::BodyTooLarge { limit },
            BodyError::Timeout => Self::BodyReadTimeout,
            // As axum's own body extractor words it.
            BodyError::Unreadable(error) => {
                Self::BadRequest(format!("Failed to buffer the request body: {error}"))
            }
        }
    }
}

/// The one body reader of both wires: `body` whole, at most `limit` bytes,
/// within `--body-read-timeout` of the head. Over the limit: `over` says
/// whether the rest is drained first. A timeout is counted as the tripped
/// limit [`Limit::BodyReadTimeout`].
pub(crate) async fn read_body(
    state: &ServerState,
    body: axum::body::Body,
    limit: usize,
    over: OverLimit,
) -> Result<Bytes, BodyError> {
    use futures_util::StreamExt as _;
    let drain = match over {
        OverLimit::Stop => 0,
        OverLimit::Drain => DRAIN_BYTES,
    };
    let mut frames = body.into_data_stream();
    let read = async {
        // A body that arrives as one frame (most do: hyper hands over what
        // one read brought) is kept as that frame, not copied; a second
        // frame starts the copy.
        let mut first: Option<Bytes> = None;
        let mut kept = BytesMut::new();
        let mut seen = 0usize;
        while let Some(frame) = frames.next().await {
            let frame = frame.map_err(BodyError::Unreadable)?;
            seen = seen.saturating_add(frame.len());
            if seen <= limit {
                match first.take() {
                    None if kept.is_empty() => first = Some(frame),
                    earlier => {
                        if let Some(earlier) = earlier {
                            kept.extend_from_slice(&earlier);
                        }
                        kept.extend_from_slice(&frame);
                    }
                }
            } else if seen > drain {
                break;
            }
        }
        if seen > limit {
            return Err(BodyError::TooLarge { limit });
        }
        Ok(first.unwrap_or_else(|| kept.freeze()))
    };
    match tokio::time::timeout(state.config.body_read_timeout, read).await {
        Ok(result) => result,
        Err(_) => {
            state.metrics.tripped(Limit::BodyReadTimeout);
            Err(BodyError::Timeout)
        }
    }
}

/// A request body sent as `Content-Type: application/json` (parameters
/// allowed), else `415`: a page on another origin cannot send it without a
/// CORS preflight (`text/plain` would be a "simple" request); within
/// `--max-body` and `--body-read-timeout`.
pub(crate) struct JsonBody(pub(crate) Bytes);

impl FromRequest<AppState> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let is_json = request
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(';').next())
            .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
        if !is_json {
            return Err(ApiError::UnsupportedMediaType);
        }
        Body::from_request(request, state)
            .await
            .map(|Body(bytes)| Self(bytes))
    }
}

/// The client's cursor from a `{"cursor": EVENT_ID}` body (ack, upgrade),
/// sent as `application/json` like every body (else `415`).
pub(crate) struct CursorJson(pub(crate) EventId);

impl FromRequest<AppState> for CursorJson {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let JsonBody(bytes) = JsonBody::from_request(request, state).await?;
        let body: CursorBody = serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::BadRequest(format!("body must be {{\"cursor\": EVENT_ID}}: {e}"))
        })?;
        parse_cursor(&body.cursor, "cursor").map(Self)
    }
}

/// Parses an event ID from client input (header, query, body).
fn parse_cursor(text: &str, what: &str) -> Result<EventId, ApiError> {
    text.parse()
        .map_err(|e| ApiError::BadRequest(format!("{what}: {e}")))
}

/// The cursor of an SSE request: `Last-Event-ID`, else `?last_event_id=`,
/// else seq 0 of the session's epoch.
pub(crate) fn sse_cursor(
    session: &Session<SingleWriter>,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
) -> Result<EventId, ApiError> {
    if let Some(value) = headers.get("last-event-id") {
        let text = value
            .to_str()
            .map_err(|_| ApiError::BadRequest("Last-Event-ID: not visible ASCII".into()))?;
        return parse_cursor(text, "Last-Event-ID");
    }
    if let Some(text) = query.get("last_event_id") {
        return parse_cursor(text, "last_event_id");
    }
    Ok(EventId {
        epoch: session.epoch(),
        seq: 0,
    })
}
