//! The protocol's routes at `/v1/stream/{path}`: `PUT` creates, `POST`
//! appends (and closes), `GET` reads (catch-up, long-poll, SSE), `HEAD`
//! answers the metadata, `DELETE` deletes, `OPTIONS` answers preflights.
//!
//! A request that fails a check is answered with the refusal itself (a
//! `Result<_, Response>`): built once, on the error path, and returned as
//! it is, so its size does not matter.
#![allow(clippy::result_large_err)]

use super::answer::{self, finish, response, CLOSED, EXPIRES_AT, NEXT_OFFSET, PUBLISH_KEY, TTL};
use super::append::{self, AppendHeaders};
use super::query::ReadQuery;
use super::{limits, live};
use crate::extract::{read_body, Client, OverLimit, PresentedKey};
use crate::ids::{may_write, PublishKey};
use crate::metrics::Limit;
use crate::state::{AppState, ServerState};
use crate::streams::feed::LocalFeed;
use crate::streams::offset::Offset;
use crate::streams::registry::{CreateRefusal, CreateRequest};
use crate::streams::rules::AppendRefusal;
use crate::streams::settings::Settings;
use crate::streams::writes::{Found, StreamWrites};
use axum::body::Body;
use axum::extract::{FromRequestParts, Path, Request, State};
use axum::http::{header, HeaderMap, HeaderName, Method, Response, StatusCode};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Every method on `/v1/stream/{*path}`, as a route of the router.
pub(crate) async fn stream_route(
    Path(path): Path<String>,
    State(AppState(state)): State<AppState>,
    request: Request,
) -> Response<Body> {
    serve_stream(&state, path, request).await
}

/// Every method on the stream at `path` (decoded): the one handler of the
/// route, called by the router ([`stream_route`]) and by the server's
/// direct dispatch ([`super::direct`]).
pub(crate) async fn serve_stream(
    state: &Arc<ServerState>,
    path: String,
    request: Request,
) -> Response<Body> {
    let method = request.method().clone();
    // Every arm but the local append is boxed: this future is made (and
    // moved into its box) for every request, and an inline arm makes it
    // as large as the largest (a read's was 7 KiB, copied per append).
    match limits::check(&path, &request) {
        Err(refused) => refused,
        Ok(()) => match method {
            Method::OPTIONS => answer::preflight(),
            Method::PUT => match state.shared_streams.get() {
                Some(shared) => Box::pin(create(state, &**shared, path, request)).await,
                None => Box::pin(create(state, &*state.streams, path, request)).await,
            },
            Method::POST => match state.shared_streams.get() {
                Some(shared) => Box::pin(append(state, &**shared, &path, request)).await,
                None => append(state, &*state.streams, &path, request).await,
            },
            Method::GET => Box::pin(read(state, &path, request)).await,
            Method::HEAD => Box::pin(head(state, &path)).await,
            Method::DELETE => match state.shared_streams.get() {
                Some(shared) => Box::pin(delete(state, &**shared, &path, request.headers())).await,
                None => Box::pin(delete(state, &*state.streams, &path, request.headers())).await,
            },
            _ => answer::refusal(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "a stream takes GET, HEAD, PUT, POST, DELETE and OPTIONS",
                &[("allow", "GET, HEAD, PUT, POST, DELETE, OPTIONS".to_owned())],
            ),
        },
    }
}

/// The request headers the route reads, as header names made once: a
/// lookup by `&str` parses the name again on every request.
mod names {
    use axum::http::HeaderName;

    pub(super) const CLOSED: HeaderName = HeaderName::from_static(super::CLOSED);
    pub(super) const TTL: HeaderName = HeaderName::from_static(super::TTL);
    pub(super) const EXPIRES_AT: HeaderName = HeaderName::from_static(super::EXPIRES_AT);
    pub(super) const FORKED_FROM: HeaderName = HeaderName::from_static("stream-forked-from");
    pub(super) const FORK_OFFSET: HeaderName = HeaderName::from_static("stream-fork-offset");
    pub(super) const FORK_SUB_OFFSET: HeaderName =
        HeaderName::from_static("stream-fork-sub-offset");
}

/// One header's value as text; `Err` for a value that is not.
fn text<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Result<Option<&'a str>, Response<Body>> {
    match headers.get(name) {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .map(Some)
            .map_err(|_| answer::bad_request(&format!("{name} is not text"))),
    }
}

/// A non-negative integer without sign, leading zeros or exponent.
fn strict_integer(value: &str) -> Option<u64> {
    let canonical = value == "0" || (!value.starts_with('0') && !value.is_empty());
    (canonical && value.bytes().all(|b| b.is_ascii_digit()))
        .then(|| value.parse().ok())
        .flatten()
}

/// The request body within the stream body limit ([`append::body_limit`])
/// and `--body-read-timeout`, read by the server's one body reader; over
/// the limit, the rest is drained before the `413` ([`OverLimit::Drain`]).
async fn body(state: &ServerState, body: Body) -> Result<bytes::Bytes, Response<Body>> {
    read_body(state, body, append::body_limit(state), OverLimit::Drain)
        .await
        .map_err(|error| answer::body_refused(&error))
}

/// Whether the key `headers` present ([`PresentedKey`]) opens writes to a
/// stream holding `expected` ([`may_write`]): a stream created without
/// `--publish-keys` is open unless the server now requires keys.
fn authorized(state: &ServerState, expected: Option<&PublishKey>, headers: &HeaderMap) -> bool {
    let PresentedKey(presented) = PresentedKey::of(headers);
    may_write(expected, presented.as_ref(), !state.config.publish_keys)
}

async fn create(
    state: &Arc<ServerState>,
    writes: &impl StreamWrites,
    path: String,
    request: Request,
) -> Response<Body> {
    let headers = request.headers().clone();
    let uri_path = request.uri().path().to_owned();
    let settings = match settings(&headers) {
        Ok(settings) => settings,
        Err(refused) => return refused,
    };
    let closed =
        matches!(text(&headers, &names::CLOSED), Ok(Some(v)) if v.eq_ignore_ascii_case("true"));
    let (mut parts, body_stream) = request.into_parts();
    let client = match Client::from_request_parts(&mut parts, &AppState(Arc::clone(state))).await {
        Ok(Client(client)) => client,
        Err(never) => match never {},
    };
    let body = match body(state, body_stream).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let created = writes
        .create(CreateRequest {
            path,
            settings,
            closed,
            body,
            client,
            publish_key: state.config.publish_keys,
        })
        .await;
    match created {
        Ok(created) => created_response(
            match created.new {
                true => StatusCode::CREATED,
                false => StatusCode::OK,
            },
            &created.content_type,
            created.tail,
            created.closed,
            created
                .new
                .then(|| location(&headers, &uri_path))
                .as_deref(),
            created.publish_key.as_ref(),
        ),
        Err(refused) => {
            let tripped = match refused {
                CreateRefusal::MemoryBudget => Some(Limit::MemoryBudget),
                CreateRefusal::ClientShare => Some(Limit::StreamMemoryPerClient),
                CreateRefusal::TooManyStreams => Some(Limit::DurableStreams),
                CreateRefusal::TooManyStreamsForClient => Some(Limit::DurableStreamsPerClient),
                _ => None,
            };
            if let Some(limit) = tripped {
                state.metrics.tripped(limit);
            }
            answer::create_refused(&refused)
        }
    }
}

/// The answer to a create: `201` with the new stream's `Location` (and
/// its publish key), or `200` for the same stream found.
fn created_response(
    status: StatusCode,
    content_type: &str,
    tail: Offset,
    closed: bool,
    location: Option<&str>,
    publish_key: Option<&PublishKey>,
) -> Response<Body> {
    let mut builder = response(status)
        .header(header::CONTENT_TYPE, content_type)
        .header(NEXT_OFFSET, tail.header_value());
    if let Some(location) = location {
        builder = builder.header(header::LOCATION, location);
    }
    if let Some(key) = publish_key {
        builder = builder.header(PUBLISH_KEY, key.to_string());
    }
    if closed {
        builder = builder.header(CLOSED, "true");
    }
    finish(builder, Body::empty())
}

/// The new stream's absolute URL, from the request's `Host`.
fn location(headers: &HeaderMap, uri_path: &str) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .filter(|h| !h.is_empty() && !h.contains(['/', ' ', '@']))
        .unwrap_or("localhost");
    format!("http://{host}{uri_path}")
}

/// The settings a create's headers ask for.
fn settings(headers: &HeaderMap) -> Result<Settings, Response<Body>> {
    let content_type = text(headers, &header::CONTENT_TYPE)?
        .map(str::trim)
        .filter(|t| {
            let media = t.split(';').next().unwrap_or_default();
            media
                .split_once('/')
                .is_some_and(|(a, b)| !a.is_empty() && !b.trim().is_empty())
        })
        .unwrap_or_default()
        .to_owned();
    let ttl = text(headers, &names::TTL)?;
    let expires = text(headers, &names::EXPIRES_AT)?;
    if ttl.is_some() && expires.is_some() {
        return Err(answer::bad_request(
            "Stream-TTL and Stream-Expires-At cannot both be given",
        ));
    }
    let ttl_secs = match ttl {
        None => None,
        Some(value) => Some(
            strict_integer(value)
                .ok_or_else(|| answer::bad_request("Stream-TTL must be a non-negative integer"))?,
        ),
    };
    let expires_at = match expires {
        None => None,
        Some(value) => {
            let at = chrono::DateTime::parse_from_rfc3339(value.trim()).map_err(|_| {
                answer::bad_request("Stream-Expires-At must be an RFC 3339 timestamp")
            })?;
            Some((value.to_owned(), std::time::SystemTime::from(at)))
        }
    };
    let forked_from = text(headers, &names::FORKED_FROM)?.map(fork_source);
    let fork_offset = match text(headers, &names::FORK_OFFSET)? {
        None => None,
        Some(value) => Some(
            Offset::parse(value)
                .ok_or_else(|| answer::bad_request("Stream-Fork-Offset is not an offset"))?,
        ),
    };
    let fork_sub_offset = match text(headers, &names::FORK_SUB_OFFSET)? {
        None => 0,
        Some(value) => {
            if forked_from.is_none() {
                return Err(answer::bad_request(
                    "Stream-Fork-Sub-Offset needs Stream-Forked-From",
                ));
            }
            strict_integer(value).ok_or_else(|| {
                answer::bad_request("Stream-Fork-Sub-Offset must be a non-negative integer")
            })?
        }
    };
    Ok(Settings {
        content_type,
        ttl_secs,
        expires_at,
        forked_from,
        fork_offset,
        fork_sub_offset,
    })
}

/// A fork's source as the registry names it: the path under
/// `/v1/stream/` (a full path or URL is accepted too).
fn fork_source(value: &str) -> String {
    let value = value.trim();
    let path = match value.find("://") {
        Some(scheme) => value[scheme + 3..]
            .find('/')
            .map_or("", |at| &value[scheme + 3 + at..]),
        None => value,
    };
    path.strip_prefix("/v1/stream/")
        .unwrap_or(path.trim_start_matches('/'))
        .to_owned()
}

async fn append(
    state: &Arc<ServerState>,
    writes: &impl StreamWrites,
    path: &str,
    request: Request,
) -> Response<Body> {
    let (parts, body_stream) = request.into_parts();
    let headers = parts
        .headers
        .iter()
        .map(|(name, value)| (name.as_str().as_bytes(), value.as_bytes()));
    let headers = match AppendHeaders::read(headers) {
        Ok(headers) => headers,
        Err(refused) => return refused,
    };
    let body = match body(state, body_stream).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    match append::append(state, writes, path, &headers, &body).await {
        Ok(accepted) => accepted.into_response(),
        Err(refused) => refused,
    }
}

async fn head(state: &Arc<ServerState>, path: &str) -> Response<Body> {
    if let Some(shared) = state.shared_streams.get() {
        return match shared.look(path).await {
            Ok(Some(view)) if view.soft_deleted() => answer::soft_deleted(),
            Ok(Some(view)) => head_response(&view.settings, view.tail(), view.closed()),
            Ok(None) => answer::not_found(),
            Err(error) => {
                tracing::warn!(%error, "shared history (durable streams HEAD)");
                answer::unavailable()
            }
        };
    }
    let Some(stream) = state.streams.get_for_readers(path).await else {
        return answer::not_found();
    };
    if stream.soft_deleted.load(Ordering::Acquire) {
        return answer::soft_deleted();
    }
    let closed = stream.settled_for_readers(state.streams.journal()).await;
    head_response(&stream.settings, stream.tail_offset(), closed)
}

/// The metadata of a stream with `settings`, at `tail`.
fn head_response(settings: &Settings, tail: Offset, closed: bool) -> Response<Body> {
    let mut builder = response(StatusCode::OK)
        .header(header::CONTENT_TYPE, settings.content_type.as_str())
        .header(NEXT_OFFSET, tail.header_value())
        .header(header::CACHE_CONTROL, "no-store")
        .header(header::ETAG, answer::etag("-1", tail, closed));
    if closed {
        builder = builder.header(CLOSED, "true");
    }
    if let Some(ttl) = settings.ttl_secs {
        builder = builder.header(TTL, ttl.to_string());
    }
    if let Some((expires, _)) = &settings.expires_at {
        builder = builder.header(EXPIRES_AT, expires.as_str());
    }
    finish(builder, Body::empty())
}

async fn delete(
    state: &Arc<ServerState>,
    writes: &impl StreamWrites,
    path: &str,
    headers: &HeaderMap,
) -> Response<Body> {
    let check = |found: &Found<'_>| match authorized(state, found.publish_key.as_ref(), headers) {
        true => Ok(()),
        false => Err(AppendRefusal::Unauthorized),
    };
    match writes.delete(path, check).await {
        Ok(Some(true)) => finish(response(StatusCode::NO_CONTENT), Body::empty()),
        Ok(Some(false)) => answer::soft_deleted(),
        Ok(None) => answer::not_found(),
        Err(refused) => answer::append_refused(&refused),
    }
}

async fn read(state: &Arc<ServerState>, path: &str, request: Request) -> Response<Body> {
    let query = match ReadQuery::parse(request.uri().query()) {
        Ok(query) => query,
        Err(refused) => return refused,
    };
    if let Some(shared) = state.shared_streams.get() {
        let feed = crate::streams::shared_feed::SharedFeed::new(shared, path);
        return live::read(state, feed, query, request.headers()).await;
    }
    let Some(stream) = state.streams.get_for_readers(path).await else {
        return answer::not_found();
    };
    if stream.soft_deleted.load(Ordering::Acquire) {
        return answer::soft_deleted();
    }
    // Its creation durable before anything of it is served.
    stream.settled_for_readers(state.streams.journal()).await;
    live::read(
        state,
        LocalFeed::new(stream, Arc::clone(&state.streams)),
        query,
        request.headers(),
    )
    .await
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
