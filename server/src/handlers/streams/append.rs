//! The append (`POST /v1/stream/{path}`), whichever front reads the
//! request: the route's handler (`http`), from hyper's header map and a
//! body it reads, and the connection's own loop (`crate::append_loop`),
//! from the header slices of the bytes it read, the body among them. One
//! reading of the headers ([`AppendHeaders::read`]), one append
//! ([`append`]), one answer: a refusal is a `Response` either way; an
//! accepted append is an [`Accepted`], which hyper's front turns into a
//! `Response` and the loop writes as bytes, from the one list of its
//! headers ([`Accepted::headers`]).
#![allow(clippy::result_large_err)]

use super::answer::{
    self, finish, CLOSED, NEXT_OFFSET, PRODUCER_EPOCH, PRODUCER_SEQ, PROTOCOL_HEADERS,
};
use super::limits::{held_header_too_long, HELD_HEADERS, MAX_HELD_HEADER};
use crate::extract::PresentedKey;
use crate::ids::may_write;
use crate::metrics::Limit;
use crate::state::ServerState;
use crate::streams::offset::Offset;
use crate::streams::rules::{AppendRefusal, AppendRequest, Appended};
use crate::streams::settings::media_type;
use crate::streams::writes::{Found, StreamWrites};
use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, Response, StatusCode};

/// The largest integer a JavaScript client sends exactly.
pub(super) const SAFE_INTEGER: u64 = (1 << 53) - 1;

/// What an append's headers ask, read and checked.
pub(crate) struct AppendHeaders<'a> {
    /// `Content-Type`, if any.
    content_type: Option<&'a str>,
    /// `Stream-Seq`, if any: at most [`MAX_HELD_HEADER`] bytes.
    stream_seq: Option<&'a str>,
    /// `Stream-Closed: true` (the value in any case).
    close: bool,
    /// `Producer-Id`, `Producer-Epoch` and `Producer-Seq`: all three (the
    /// id not empty and at most [`MAX_HELD_HEADER`] bytes, the numbers at
    /// most [`SAFE_INTEGER`]), or none.
    producer: Option<(&'a str, u64, u64)>,
    /// The publish key `Authorization` presents, if any.
    presented: PresentedKey,
}

/// The first value of each header an append reads.
#[derive(Default)]
struct FirstValues<'a> {
    content_type: Option<&'a [u8]>,
    stream_seq: Option<&'a [u8]>,
    closed: Option<&'a [u8]>,
    producer_id: Option<&'a [u8]>,
    producer_epoch: Option<&'a [u8]>,
    producer_seq: Option<&'a [u8]>,
    authorization: Option<&'a [u8]>,
}

impl<'a> FirstValues<'a> {
    /// Where the first value of header `name` (in any case) goes, if the
    /// append reads it.
    fn slot(&mut self, name: &[u8]) -> Option<&mut Option<&'a [u8]>> {
        let is = |wanted: &str| name.eq_ignore_ascii_case(wanted.as_bytes());
        Some(match () {
            () if is("content-type") => &mut self.content_type,
            () if is("stream-seq") => &mut self.stream_seq,
            () if is(CLOSED) => &mut self.closed,
            () if is("producer-id") => &mut self.producer_id,
            () if is(PRODUCER_EPOCH) => &mut self.producer_epoch,
            () if is(PRODUCER_SEQ) => &mut self.producer_seq,
            () if is("authorization") => &mut self.authorization,
            () => return None,
        })
    }
}

impl<'a> AppendHeaders<'a> {
    /// Reads an append's `headers`: each name (in any case) and value, in
    /// the order sent; the first value of a name counts, as
    /// `HeaderMap::get` reads it. `Err`: the refusal, the first of a held
    /// header (`Stream-Seq`, `Producer-Id`) over [`MAX_HELD_HEADER`]
    /// bytes in any of its values, a producer header that is not text,
    /// producer headers that do not go together or do not parse, a
    /// `Stream-Seq` or `Content-Type` that is not text.
    pub(crate) fn read(
        headers: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Result<Self, Response<Body>> {
        let mut first = FirstValues::default();
        let mut too_long = [false; HELD_HEADERS.len()];
        for (name, value) in headers {
            for ((held, _), too_long) in HELD_HEADERS.iter().zip(&mut too_long) {
                if value.len() > MAX_HELD_HEADER && name.eq_ignore_ascii_case(held.as_bytes()) {
                    *too_long = true;
                }
            }
            if let Some(slot) = first.slot(name) {
                slot.get_or_insert(value);
            }
        }
        if let Some(((_, shown), _)) = HELD_HEADERS.iter().zip(too_long).find(|(_, long)| *long) {
            return Err(held_header_too_long(shown));
        }
        let close =
            matches!(text(first.closed, CLOSED), Ok(Some(v)) if v.eq_ignore_ascii_case("true"));
        let producer = producer(&first)?;
        let stream_seq = text(first.stream_seq, "stream-seq")?;
        let content_type = text(first.content_type, "content-type")?;
        let authorization = text(first.authorization, "authorization").ok().flatten();
        Ok(Self {
            content_type,
            stream_seq,
            close,
            producer,
            presented: PresentedKey::of_authorization(authorization),
        })
    }
}

/// A header's value as text, as `HeaderValue::to_str` reads it (visible
/// ASCII and tab); `Err` (`400`, naming `name`) for a value that is not.
fn text<'a>(value: Option<&'a [u8]>, name: &str) -> Result<Option<&'a str>, Response<Body>> {
    let Some(value) = value else {
        return Ok(None);
    };
    let visible = value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b));
    visible
        .then(|| std::str::from_utf8(value).ok())
        .flatten()
        .map(Some)
        .ok_or_else(|| answer::bad_request(&format!("{name} is not text")))
}

/// The idempotent producer's headers: all three or none.
fn producer<'a>(first: &FirstValues<'a>) -> Result<Option<(&'a str, u64, u64)>, Response<Body>> {
    let id = text(first.producer_id, "producer-id")?;
    let epoch = text(first.producer_epoch, PRODUCER_EPOCH)?;
    let seq = text(first.producer_seq, PRODUCER_SEQ)?;
    match (id, epoch, seq) {
        (None, None, None) => Ok(None),
        (Some(id), Some(epoch), Some(seq)) => {
            if id.is_empty() {
                return Err(answer::bad_request("Producer-Id must not be empty"));
            }
            let number = |value: &str, name: &str| {
                value
                    .bytes()
                    .all(|b| b.is_ascii_digit())
                    .then(|| value.parse::<u64>().ok())
                    .flatten()
                    .filter(|n| !value.is_empty() && *n <= SAFE_INTEGER)
                    .ok_or_else(|| {
                        answer::bad_request(&format!("{name} must be a non-negative integer"))
                    })
            };
            Ok(Some((
                id,
                number(epoch, "Producer-Epoch")?,
                number(seq, "Producer-Seq")?,
            )))
        }
        _ => Err(answer::bad_request(
            "Producer-Id, Producer-Epoch and Producer-Seq go together",
        )),
    }
}

/// The largest append body a stream takes: `--max-body`, or its ring's
/// largest message if larger (the official client batches appends up to
/// 1 MiB and a batch may pass that by one message).
pub(crate) fn body_limit(state: &ServerState) -> usize {
    let config = &state.config;
    config
        .max_body
        .max(config.ring().geometry().map_or(0, |g| g.max_payload()))
}

/// Appends `body` (within [`body_limit`]) to the stream at `path` in
/// `writes`, as `headers` ask; `Err`: the refusal.
pub(crate) async fn append(
    state: &ServerState,
    writes: &impl StreamWrites,
    path: &str,
    headers: &AppendHeaders<'_>,
    body: &[u8],
) -> Result<Accepted, Response<Body>> {
    if body.is_empty() && !headers.close {
        return Err(answer::bad_request(
            "an append needs a body (or Stream-Closed: true)",
        ));
    }
    let request = AppendRequest {
        stream_seq: headers.stream_seq,
        producer: headers.producer,
        close: headers.close,
    };
    // Checked on the stream the append decides on (over Redis, the meta
    // it decides on), each refusal typed.
    let check = |found: &Found<'_>| {
        if found.soft_deleted {
            return Err(AppendRefusal::SoftDeleted);
        }
        let PresentedKey(presented) = &headers.presented;
        let open = !state.config.publish_keys;
        if !may_write(found.publish_key.as_ref(), presented.as_ref(), open) {
            return Err(AppendRefusal::Unauthorized);
        }
        content_type_matches(body.is_empty(), headers.content_type, found.content_type)
    };
    let appended = writes.append(path, body, &request, check).await;
    let producer = headers.producer.map(|(_, epoch, _)| epoch);
    match appended {
        Ok(Appended::Done { tail, closed }) => Ok(Accepted {
            status: match headers.producer {
                Some(_) if !body.is_empty() => StatusCode::OK,
                _ => StatusCode::NO_CONTENT,
            },
            tail,
            producer: headers.producer.map(|(_, epoch, seq)| (epoch, seq)),
            closed,
        }),
        Ok(Appended::Duplicate {
            last_seq,
            closed,
            tail,
        }) => Ok(Accepted {
            status: StatusCode::NO_CONTENT,
            tail,
            producer: producer.map(|epoch| (epoch, last_seq)),
            closed,
        }),
        Err(refused) => {
            match refused {
                AppendRefusal::MemoryBudget => state.metrics.tripped(Limit::MemoryBudget),
                AppendRefusal::ClientShare => state.metrics.tripped(Limit::StreamMemoryPerClient),
                _ => {}
            }
            Err(answer::append_refused(&refused))
        }
    }
}

/// Whether an append of `content_type` (`None` for none) may go to a
/// stream of `stream_type`.
fn content_type_matches(
    body_empty: bool,
    content_type: Option<&str>,
    stream_type: &str,
) -> Result<(), AppendRefusal> {
    if body_empty {
        return Ok(());
    }
    let Some(content_type) = content_type else {
        return Err(AppendRefusal::NoContentType);
    };
    if media_type(content_type) != media_type(stream_type) {
        return Err(AppendRefusal::ContentTypeMismatch);
    }
    Ok(())
}

/// An append accepted: appended, or a producer's duplicate. No body.
#[derive(Debug)]
pub(crate) struct Accepted {
    /// `200` for a producer's append with a body, else `204`.
    status: StatusCode,
    /// `Stream-Next-Offset`: the stream's tail after the append.
    tail: Offset,
    /// `Producer-Epoch` and `Producer-Seq` echoed (for a duplicate, the
    /// last seq appended), for a producer's append.
    producer: Option<(u64, u64)>,
    /// `Stream-Closed: true`: the stream is closed.
    closed: bool,
}

impl Accepted {
    /// The answer's status.
    pub(crate) fn status(&self) -> StatusCode {
        self.status
    }

    /// Calls `header` with each of the answer's headers, name and value,
    /// in order: [`PROTOCOL_HEADERS`], then the append's.
    pub(crate) fn headers(&self, mut header: impl FnMut(&'static str, &[u8])) {
        for (name, value) in PROTOCOL_HEADERS {
            header(name, value.as_bytes());
        }
        header(NEXT_OFFSET, &self.tail.wire());
        if let Some((epoch, seq)) = self.producer {
            header(PRODUCER_EPOCH, epoch.to_string().as_bytes());
            header(PRODUCER_SEQ, seq.to_string().as_bytes());
        }
        if self.closed {
            header(CLOSED, b"true");
        }
    }

    /// The answer as a `Response`.
    pub(crate) fn into_response(self) -> Response<Body> {
        let mut builder = Response::builder().status(self.status);
        if let Some(map) = builder.headers_mut() {
            self.headers(|name, value| {
                // Digits, `_`, `true` and the protocol's constants: always
                // a valid value.
                if let Ok(value) = HeaderValue::from_bytes(value) {
                    map.insert(HeaderName::from_static(name), value);
                }
            });
        }
        finish(builder, Body::empty())
    }
}
