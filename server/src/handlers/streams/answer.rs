//! Building the protocol's answers: the headers every response carries
//! (browser security; CORS is the server's CORS layer's, from the lists
//! here), and every refusal as JSON with its status and the protocol's
//! headers.

use crate::error::json_error;
use crate::extract::BodyError;
use crate::streams::numbering::ReadRefusal;
use crate::streams::offset::Offset;
use crate::streams::registry::CreateRefusal;
use crate::streams::rules::AppendRefusal;
use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use gapless_client::Failure;

pub(crate) const NEXT_OFFSET: &str = "stream-next-offset";
pub(crate) const UP_TO_DATE: &str = "stream-up-to-date";
pub(crate) const CLOSED: &str = "stream-closed";
pub(crate) const CURSOR: &str = "stream-cursor";
pub(crate) const TTL: &str = "stream-ttl";
pub(crate) const EXPIRES_AT: &str = "stream-expires-at";
pub(crate) const PRODUCER_EPOCH: &str = "producer-epoch";
pub(crate) const PRODUCER_SEQ: &str = "producer-seq";
pub(crate) const PRODUCER_EXPECTED_SEQ: &str = "producer-expected-seq";
pub(crate) const PRODUCER_RECEIVED_SEQ: &str = "producer-received-seq";
pub(crate) const SSE_DATA_ENCODING: &str = "stream-sse-data-encoding";
/// With `--publish-keys`: the new stream's publish key, on its `201`.
pub(crate) const PUBLISH_KEY: &str = "stream-publish-key";

/// The request headers a browser may send to a stream (its preflights).
pub(crate) const REQUEST_HEADERS: &[&str] = &[
    "content-type",
    "authorization",
    "if-none-match",
    "stream-seq",
    "stream-ttl",
    "stream-expires-at",
    "stream-closed",
    "producer-id",
    "producer-epoch",
    "producer-seq",
    "stream-forked-from",
    "stream-fork-offset",
    "stream-fork-sub-offset",
];

/// The response headers a browser script may read.
pub(crate) const EXPOSED_HEADERS: &[&str] = &[
    "stream-next-offset",
    "stream-cursor",
    "stream-up-to-date",
    "stream-closed",
    "stream-ttl",
    "stream-expires-at",
    "stream-sse-data-encoding",
    "stream-publish-key",
    "producer-epoch",
    "producer-seq",
    "producer-expected-seq",
    "producer-received-seq",
    "etag",
    "content-type",
    "location",
    "retry-after",
    "www-authenticate",
];

/// A response of `status` with the headers every answer of the protocol
/// carries: `X-Content-Type-Options: nosniff` and
/// `Cross-Origin-Resource-Policy: cross-origin`. CORS is the server's CORS
/// layer's (`layers::with_stream_cors`), from [`EXPOSED_HEADERS`] and
/// [`REQUEST_HEADERS`].
pub(crate) fn response(status: StatusCode) -> axum::http::response::Builder {
    let mut builder = Response::builder().status(status);
    if let Some(headers) = builder.headers_mut() {
        protocol_headers(headers);
    }
    builder
}

/// The headers every answer of the protocol carries (see [`response`]),
/// in the order they are written.
pub(crate) const PROTOCOL_HEADERS: [(&str, &str); 2] = [
    ("x-content-type-options", "nosniff"),
    ("cross-origin-resource-policy", "cross-origin"),
];

/// Adds [`PROTOCOL_HEADERS`] to `headers`.
fn protocol_headers(headers: &mut HeaderMap) {
    for (name, value) in PROTOCOL_HEADERS {
        headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
}

/// The answer to `OPTIONS` (a CORS preflight): `204`, to which the CORS
/// layer adds what the preflight allows.
pub(crate) fn preflight() -> Response<Body> {
    finish(response(StatusCode::NO_CONTENT), Body::empty())
}

/// `"start:end"`, `:c` added once the reader is at the closed tail.
pub(crate) fn etag(start: &str, end: Offset, closed: bool) -> String {
    format!("\"{start}:{end}{}\"", if closed { ":c" } else { "" })
}

/// `builder` with `body`; a header value that could not be set (none of
/// ours can fail) answers `500 internal`.
pub(crate) fn finish(builder: axum::http::response::Builder, body: Body) -> Response<Body> {
    builder.body(body).unwrap_or_else(|error| {
        tracing::error!(%error, "building a stream response");
        json_error(StatusCode::INTERNAL_SERVER_ERROR, &Failure::Internal)
    })
}

/// A refusal: `status`, `{"detail": detail, "error": code}` (the keys in
/// this order, as a `serde_json` map writes them) and `headers`.
pub(crate) fn refusal(
    status: StatusCode,
    code: &str,
    detail: &str,
    headers: &[(&str, String)],
) -> Response<Body> {
    refused(
        status,
        &serde_json::json!({ "error": code, "detail": detail }),
        headers,
    )
}

/// A refusal with `body` as its JSON, built by the server's one error
/// answer ([`json_error`]), with the protocol's headers and `headers`.
fn refused(
    status: StatusCode,
    body: &serde_json::Value,
    headers: &[(&str, String)],
) -> Response<Body> {
    let mut answer = json_error(status, body);
    let answer_headers = answer.headers_mut();
    protocol_headers(answer_headers);
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            answer_headers.append(name, value);
        }
    }
    answer
}

/// The answer to a body not read: `413 body_too_large`, `408
/// body_read_timeout` with `Connection: close` (the rest of the body may
/// still come: the connection cannot carry another request), or `400`.
pub(crate) fn body_refused(error: &BodyError) -> Response<Body> {
    match error {
        BodyError::TooLarge { limit } => refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            &format!("request body is over {limit} bytes"),
            &[],
        ),
        BodyError::Timeout => refusal(
            StatusCode::REQUEST_TIMEOUT,
            "body_read_timeout",
            "the request body did not arrive within the server's body timeout",
            &[(header::CONNECTION.as_str(), "close".to_owned())],
        ),
        BodyError::Unreadable(_) => bad_request("the request body could not be read"),
    }
}

/// `400 bad_request` with `detail`.
pub(crate) fn bad_request(detail: &str) -> Response<Body> {
    refusal(StatusCode::BAD_REQUEST, "bad_request", detail, &[])
}

/// `404 no_such_stream`.
pub(crate) fn not_found() -> Response<Body> {
    refusal(
        StatusCode::NOT_FOUND,
        "no_such_stream",
        "no stream at this path",
        &[],
    )
}

/// `410 stream_gone`: deleted while forks of it live.
pub(crate) fn soft_deleted() -> Response<Body> {
    refusal(
        StatusCode::GONE,
        "stream_gone",
        "the stream was deleted; forks of it still live",
        &[],
    )
}

/// `401 unauthorized` with `WWW-Authenticate: Bearer`.
pub(crate) fn unauthorized() -> Response<Body> {
    refusal(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "writes need the stream's publish key as Authorization: Bearer <key>",
        &[(header::WWW_AUTHENTICATE.as_str(), "Bearer".to_owned())],
    )
}

/// The `410` of a read whose offset retention overtook, with its figures.
pub(crate) fn read_refused(refusal_: &ReadRefusal) -> Response<Body> {
    match refusal_ {
        ReadRefusal::Gap {
            offset,
            earliest,
            evicted,
        } => gap(*offset, *earliest, *evicted),
        ReadRefusal::NotAPosition => bad_request("the offset is not a position of this stream"),
    }
}

/// `410 gap_not_covered`: `{"error","offset","earliest_offset","evicted"}`.
pub(crate) fn gap(offset: Offset, earliest: Offset, evicted: u64) -> Response<Body> {
    let body = serde_json::json!({
        "error": "gap_not_covered",
        "offset": offset.to_string(),
        "earliest_offset": earliest.to_string(),
        "evicted": evicted,
    });
    refused(StatusCode::GONE, &body, &[])
}

/// The answer to an append that stored nothing.
pub(crate) fn append_refused(refused: &AppendRefusal) -> Response<Body> {
    match refused {
        AppendRefusal::SoftDeleted => soft_deleted(),
        AppendRefusal::Unauthorized => unauthorized(),
        AppendRefusal::NoContentType => bad_request("an append needs a Content-Type"),
        AppendRefusal::ContentTypeMismatch => refusal(
            StatusCode::CONFLICT,
            "content_type_mismatch",
            "the append's Content-Type is not the stream's",
            &[],
        ),
        AppendRefusal::Closed { tail } => refusal(
            StatusCode::CONFLICT,
            "stream_closed",
            "the stream is closed",
            &[(CLOSED, "true".to_owned()), (NEXT_OFFSET, tail.to_string())],
        ),
        AppendRefusal::SeqConflict => refusal(
            StatusCode::CONFLICT,
            "sequence_conflict",
            "Stream-Seq must sort after the previous append's",
            &[],
        ),
        AppendRefusal::StaleEpoch { current } => refusal(
            StatusCode::FORBIDDEN,
            "stale_producer_epoch",
            "a newer epoch of this producer has written",
            &[(PRODUCER_EPOCH, current.to_string())],
        ),
        AppendRefusal::EpochMustStartAtZero => {
            bad_request("a new producer epoch must start at Producer-Seq 0")
        }
        AppendRefusal::SequenceGap { expected, received } => refusal(
            StatusCode::CONFLICT,
            "producer_sequence_gap",
            "Producer-Seq skips appends",
            &[
                (PRODUCER_EXPECTED_SEQ, expected.to_string()),
                (PRODUCER_RECEIVED_SEQ, received.to_string()),
            ],
        ),
        AppendRefusal::Json(crate::streams::json_mode::JsonRefusal::Invalid(what)) => {
            bad_request(&format!("invalid JSON: {what}"))
        }
        AppendRefusal::Json(crate::streams::json_mode::JsonRefusal::EmptyArray) => {
            bad_request("an empty JSON array appends nothing")
        }
        AppendRefusal::TooLarge { len, max } => refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            &format!("{len} bytes; a stream's ring holds messages of at most {max}"),
            &[],
        ),
        AppendRefusal::MemoryBudget => memory_budget(),
        AppendRefusal::ClientShare => client_share(),
        AppendRefusal::Gone => not_found(),
        AppendRefusal::Unavailable => unavailable(),
        AppendRefusal::StorageFull => storage_full(),
    }
}

/// `429 stream_memory_per_client`: the client's streams hold their share
/// of the memory budget.
fn client_share() -> Response<Body> {
    refusal(
        StatusCode::TOO_MANY_REQUESTS,
        "stream_memory_per_client",
        "this client's streams hold as much of the server's memory as one client may",
        &[("retry-after", "5".to_owned())],
    )
}

/// `507 insufficient_storage`: the shared history (Redis) is at its
/// memory limit; nothing was written.
fn storage_full() -> Response<Body> {
    refusal(
        StatusCode::INSUFFICIENT_STORAGE,
        "insufficient_storage",
        "the shared history is full: nothing was written",
        &[("retry-after", "5".to_owned())],
    )
}

/// `503 history_unavailable`: the shared history did not answer.
pub(crate) fn unavailable() -> Response<Body> {
    refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        "history_unavailable",
        "the shared history did not answer in time; nothing was acknowledged (an append \
         may still land: retry it with its producer headers to store it once)",
        &[("retry-after", "1".to_owned())],
    )
}

fn memory_budget() -> Response<Body> {
    refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        "memory_budget_exceeded",
        "the server's memory budget is spent",
        &[("retry-after", "5".to_owned())],
    )
}

/// The answer to a refused create.
pub(crate) fn create_refused(refused: &CreateRefusal) -> Response<Body> {
    match refused {
        CreateRefusal::Conflict => refusal(
            StatusCode::CONFLICT,
            "stream_exists",
            "a stream with other settings exists at this path",
            &[],
        ),
        CreateRefusal::SoftDeleted => refusal(
            StatusCode::CONFLICT,
            "stream_has_forks",
            "the stream at this path was deleted but forks of it live",
            &[],
        ),
        CreateRefusal::NoSource => refusal(
            StatusCode::NOT_FOUND,
            "no_such_stream",
            "the fork's source does not exist",
            &[],
        ),
        CreateRefusal::SourceSoftDeleted => refusal(
            StatusCode::CONFLICT,
            "source_deleted",
            "the fork's source was deleted",
            &[],
        ),
        CreateRefusal::ContentTypeMismatch => refusal(
            StatusCode::CONFLICT,
            "content_type_mismatch",
            "a fork's content type is its source's",
            &[],
        ),
        CreateRefusal::BadForkOffset => {
            bad_request("Stream-Fork-Offset is not a position of the source")
        }
        CreateRefusal::ForkTooDeep => refusal(
            StatusCode::BAD_REQUEST,
            "fork_too_deep",
            &format!(
                "the source is a fork {} generations deep: fork an earlier stream of the chain",
                crate::streams::numbering::Numbering::MAX_LINEAGE
            ),
            &[],
        ),
        CreateRefusal::BadSubOffset(what) => bad_request(what),
        CreateRefusal::Json(crate::streams::json_mode::JsonRefusal::Invalid(what)) => {
            bad_request(&format!("invalid JSON: {what}"))
        }
        CreateRefusal::Json(crate::streams::json_mode::JsonRefusal::EmptyArray) => {
            bad_request("an empty JSON array appends nothing")
        }
        CreateRefusal::MemoryBudget => memory_budget(),
        CreateRefusal::ClientShare => client_share(),
        CreateRefusal::TooLarge { len, max } => refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            &format!("{len} bytes; a stream's ring holds messages of at most {max}"),
            &[],
        ),
        CreateRefusal::Unavailable => unavailable(),
        CreateRefusal::StorageFull => storage_full(),
        CreateRefusal::TooManyStreams => refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_streams",
            "the shared history holds as many streams as it may (--max-durable-streams)",
            &[("retry-after", "5".to_owned())],
        ),
        CreateRefusal::TooManyStreamsForClient => refusal(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_streams_per_client",
            "this client created as many live streams as one client may \
             (--max-durable-streams-per-client)",
            &[("retry-after", "5".to_owned())],
        ),
        CreateRefusal::Internal(what) => {
            tracing::error!(%what, "creating a stream");
            refusal(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the server could not create the stream",
                &[],
            )
        }
    }
}
