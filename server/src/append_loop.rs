//! A connection's own HTTP/1.1 loop for the request that dominates a
//! Durable Streams server, the append: it reads the request head and body
//! from the socket itself, answers through the stream route's append
//! ([`Direct::append`]: the route handler's own reading of the headers,
//! append and answer, so the answer is the route's), writes the answer in
//! one write, and reads the next request. At the first request it does not
//! answer it hands the connection, with the bytes it read of that request,
//! to hyper ([`LoopEnd::HandOver`]), which serves it and every request
//! after it as before.
//!
//! Why: with hyper, an append's CPU outside the kernel was twice the Rust
//! server's (its own HTTP/1 engine on `httparse`): the dispatcher's state
//! machine, its body channel between the connection and the handler, the
//! service glue's boxed future, a header map built from owned buffers.
//! Here the head is parsed in place with `httparse`, header values and the
//! body are slices of the one buffer the request was read into (no
//! request or header map is built), and an accepted append's answer is
//! written from its header list into one buffer (no response is built);
//! a refusal is the route's `Response`, encoded.
//!
//! What it answers: `POST /v1/stream/{path}` over HTTP/1.1 with one
//! `Content-Length` of at most [`MAX_BODY`], and no `Transfer-Encoding`,
//! `Expect`, `Upgrade` or `Connection` other than `keep-alive`. Anything
//! else, a head that `httparse` refuses (hyper answers it `400`), a head
//! past [`MAX_HEAD`] bytes (hyper answers `431`), goes to hyper. The same
//! bounds hold as under hyper: the request-head timeout (the connection's
//! [`HeadClock`]), the body read timeout (the route's `408
//! body_read_timeout` when a body is still short at it, and the connection
//! closed), and a graceful shutdown closes the connection between
//! requests.

use crate::direct_route::Direct;
use crate::handlers::streams::append::Accepted;
use crate::head_timeout::HeadClock;
use crate::lifecycle::turned_true;
use crate::metrics::Limit;
use crate::state::ServerState;
use axum::body::Body;
use axum::http::header;
use axum::http::uri::PathAndQuery;
use bytes::{Buf, Bytes, BytesMut};
use std::cell::RefCell;
use std::ops::Range;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The most headers a request here may have; more go to hyper (whose
/// limit is 100).
const MAX_HEADERS: usize = 32;

/// The largest request head read here; a longer one goes to hyper.
pub(crate) const MAX_HEAD: usize = 16 << 10;

/// The largest body read here; a larger append goes to hyper, whose body
/// reader streams it against the body limit.
pub(crate) const MAX_BODY: usize = 64 << 10;

/// The largest answer body collected here (an append's answer is empty or
/// a small JSON error).
const MAX_ANSWER: usize = 64 << 10;

/// How a connection's append loop ended.
#[derive(Debug)]
pub(crate) enum LoopEnd {
    /// The connection is done: the client closed it, a timeout or the
    /// shutdown ended it, or an answer asked to close it.
    Closed,
    /// A request the loop does not answer: hyper serves the connection
    /// from here, reading these bytes (the start of that request) first.
    HandOver(TcpStream, Bytes),
}

/// What the loop needs of the server, for one connection.
pub(crate) struct AppendLoop<'a> {
    pub(crate) direct: &'a Direct,
    pub(crate) shared: &'a ServerState,
    pub(crate) clock: &'a HeadClock,
}

/// An append's head, parsed: where its parts lie in the bytes read.
#[derive(Debug)]
struct AppendHead {
    /// The head's length: the body starts here.
    len: usize,
    /// The body's length (its one `Content-Length`).
    content_length: usize,
    /// The request target.
    target: Range<usize>,
    /// Each header's name and value.
    headers: Vec<(Range<usize>, Range<usize>)>,
}

impl AppendHead {
    /// Whether the request carried an `Origin` (`bytes`: what it was
    /// parsed from, or more).
    fn has_origin(&self, bytes: &[u8]) -> bool {
        self.headers
            .iter()
            .any(|(name, _)| bytes[name.clone()].eq_ignore_ascii_case(b"origin"))
    }
}

/// What the bytes read so far hold.
#[derive(Debug)]
enum Parsed {
    /// An append's head, whole.
    Append(AppendHead),
    /// Not yet a whole head.
    Partial,
    /// A request the loop does not answer (or not a request at all).
    Other,
}

impl AppendLoop<'_> {
    /// Serves appends on `tcp` until it closes or a request needs hyper.
    pub(crate) async fn run(self, mut tcp: TcpStream) -> LoopEnd {
        let config = &self.shared.config;
        let mut buffer = BytesMut::with_capacity(8 << 10);
        let mut answer = Vec::with_capacity(512);
        let shutdown = self.shared.lifecycle.shutdown.clone();
        let head_timeout = self.clock.expired(config.header_read_timeout);
        tokio::pin!(head_timeout);
        // Made once: a wait made per read registers with the shutdown
        // signal and unregisters again, under its lock, on every request.
        let mut signal = shutdown.clone();
        let shutting_down = turned_true(&mut signal);
        tokio::pin!(shutting_down);
        loop {
            let head = loop {
                match parse(&buffer) {
                    Parsed::Append(head) => break head,
                    Parsed::Other => return LoopEnd::HandOver(tcp, buffer.freeze()),
                    Parsed::Partial if buffer.len() >= MAX_HEAD => {
                        return LoopEnd::HandOver(tcp, buffer.freeze())
                    }
                    Parsed::Partial => {}
                }
                let idle = buffer.is_empty();
                if idle && *shutdown.borrow() {
                    return LoopEnd::Closed;
                }
                buffer.reserve(4 << 10);
                tokio::select! {
                    // The read first: woken by the next request, the loop
                    // reads it without polling the other waits.
                    biased;
                    read = tcp.read_buf(&mut buffer) => match read {
                        Ok(0) | Err(_) => return LoopEnd::Closed,
                        Ok(_) => {}
                    },
                    // Graceful: an idle connection closes; a request under
                    // way is answered first.
                    () = shutting_down.as_mut(), if idle => return LoopEnd::Closed,
                    () = head_timeout.as_mut() => {
                        self.shared.metrics.tripped(Limit::HeaderReadTimeout);
                        tracing::debug!("no request head within the header-read timeout");
                        return LoopEnd::Closed;
                    }
                }
            };
            self.clock.head_arrived();
            if head.content_length > self.direct.append_body_limit() {
                // The route's 413, from its body reader.
                return LoopEnd::HandOver(tcp, buffer.freeze());
            }
            let whole = head.len + head.content_length;
            buffer.reserve(whole.saturating_sub(buffer.len()));
            if buffer.len() < whole {
                let body = async {
                    while buffer.len() < whole {
                        match tcp.read_buf(&mut buffer).await {
                            Ok(0) | Err(_) => return false,
                            Ok(_) => {}
                        }
                    }
                    true
                };
                match tokio::time::timeout(config.body_read_timeout, body).await {
                    Ok(true) => {}
                    Ok(false) => return LoopEnd::Closed,
                    Err(_) => {
                        let had_origin = head.has_origin(&buffer);
                        let answer = self.direct.append_body_timed_out(had_origin);
                        if let Some((answer, _)) = encode(answer).await {
                            let _ = tcp.write_all(&answer).await;
                        }
                        return LoopEnd::Closed;
                    }
                }
            }
            let request = &buffer[..whole];
            let Some((path, raw_path)) = route_path(request, &head) else {
                // Not what the router would take as the stream route's
                // (a target that does not decode, say): hyper's to answer.
                return LoopEnd::HandOver(tcp, buffer.freeze());
            };
            let headers = head
                .headers
                .iter()
                .map(|(name, value)| (&request[name.clone()], &request[value.clone()]));
            let had_origin = head.has_origin(request);
            let body = &request[head.len..];
            let appended = self
                .direct
                .append(&path, raw_path.path(), headers, had_origin, body)
                .await;
            answer.clear();
            let close = match appended {
                Ok(accepted) => {
                    write_accepted(
                        &accepted,
                        self.direct.cors_on_write(had_origin),
                        &mut answer,
                    );
                    false
                }
                Err(refused) => match encode(refused).await {
                    Some((refused, close)) => {
                        answer.extend_from_slice(&refused);
                        close
                    }
                    None => return LoopEnd::Closed,
                },
            };
            buffer.advance(whole);
            if tcp.write_all(&answer).await.is_err() {
                return LoopEnd::Closed;
            }
            self.clock.answered();
            if close || *shutdown.borrow() {
                return LoopEnd::Closed;
            }
        }
    }
}

/// What `bytes` (read from the connection, from a request's first byte)
/// hold: an append's whole head, a head not yet whole, or anything else.
fn parse(bytes: &[u8]) -> Parsed {
    if bytes.is_empty() {
        return Parsed::Partial;
    }
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    let (Some("POST"), Some(1), Some(target)) = (request.method, request.version, request.path)
    else {
        return Parsed::Other;
    };
    let route_path = target.split_once('?').map_or(target, |(path, _)| path);
    // Decoded once, in `request`: a path that does not decode is hyper's.
    if !Direct::may_be_route(route_path) {
        return Parsed::Other;
    }
    let offset = |part: &[u8]| {
        let start = part.as_ptr() as usize - bytes.as_ptr() as usize;
        start..start + part.len()
    };
    let mut content_length = None;
    let mut ranges = Vec::with_capacity(request.headers.len());
    for header in request.headers.iter() {
        let name = header.name;
        if name.eq_ignore_ascii_case("content-length") {
            let value = std::str::from_utf8(header.value).ok();
            let digits = value.filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()));
            match (content_length, digits.and_then(|v| v.parse::<usize>().ok())) {
                (None, Some(length)) if length <= MAX_BODY => content_length = Some(length),
                _ => return Parsed::Other,
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            || name.eq_ignore_ascii_case("expect")
            || name.eq_ignore_ascii_case("upgrade")
            || (name.eq_ignore_ascii_case("connection")
                && !header.value.eq_ignore_ascii_case(b"keep-alive"))
        {
            return Parsed::Other;
        }
        ranges.push((offset(name.as_bytes()), offset(header.value)));
    }
    let Some(content_length) = content_length else {
        return Parsed::Other;
    };
    Parsed::Append(AppendHead {
        len,
        content_length,
        target: offset(target.as_bytes()),
        headers: ranges,
    })
}

/// The stream's path (decoded) and the request target's path and query,
/// of the request `head` describes in `request`: `None` when the target
/// does not convert as hyper's would, or the path is not the route's as
/// the router captures it (the request is then hyper's). Headers need no
/// check: `httparse` takes a name only of token characters and a value
/// only of tab, visible ASCII and bytes from 0x80, the sets `http`'s
/// `HeaderName` and `HeaderValue` take.
fn route_path(request: &[u8], head: &AppendHead) -> Option<(String, PathAndQuery)> {
    let target = PathAndQuery::try_from(&request[head.target.clone()]).ok()?;
    let path = Direct::path_of(target.path())?;
    Some((path, target))
}

/// The answer to an accepted append, as hyper writes it (see [`encode`]),
/// into `out`: its status and headers, the CORS headers `cors` lists, a
/// zero `content-length` unless `204`, a `date`.
fn write_accepted(accepted: &Accepted, cors: Option<[(&str, &[u8]); 2]>, out: &mut Vec<u8>) {
    let status = accepted.status();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    let mut line = |name: &str, value: &[u8]| {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    };
    accepted.headers(&mut line);
    for (name, value) in cors.into_iter().flatten() {
        line(name, value);
    }
    if status != axum::http::StatusCode::NO_CONTENT {
        line("content-length", b"0");
    }
    out.extend_from_slice(b"date: ");
    with_http_date(|date| out.extend_from_slice(date));
    out.extend_from_slice(b"\r\n\r\n");
}

/// `response` as HTTP/1.1 bytes, as hyper writes it (its headers, a
/// `content-length` for a body when it has none, a `date`), and whether it
/// asks to close the connection. `None` when its body cannot be read whole
/// (an append's never is anything but a small buffer).
async fn encode(response: axum::http::Response<Body>) -> Option<(Vec<u8>, bool)> {
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, MAX_ANSWER).await.ok()?;
    let status = parts.status;
    let mut out = Vec::with_capacity(256 + body.len());
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    let bodiless = status.is_informational()
        || status == axum::http::StatusCode::NO_CONTENT
        || status == axum::http::StatusCode::NOT_MODIFIED;
    if !bodiless && !parts.headers.contains_key(header::CONTENT_LENGTH) {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(body.len().to_string().as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !parts.headers.contains_key(header::DATE) {
        out.extend_from_slice(b"date: ");
        with_http_date(|date| out.extend_from_slice(date));
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    if !bodiless {
        out.extend_from_slice(&body);
    }
    let close = parts
        .headers
        .get(header::CONNECTION)
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"close"));
    Some((out, close))
}

/// Calls `f` with the current time as an HTTP date, formatted once a
/// second per thread.
fn with_http_date(f: impl FnOnce(&[u8])) {
    thread_local! {
        static DATE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    let now = SystemTime::now();
    let second = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    DATE.with(|date| {
        let mut date = date.borrow_mut();
        if date.0 != second {
            *date = (second, httpdate::fmt_http_date(now));
        }
        f(date.1.as_bytes());
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &[u8]) -> Parsed {
        parse(raw)
    }

    #[test]
    fn an_append_is_parsed_and_anything_else_is_handed_over() {
        let append = b"POST /v1/stream/a%20b?x=1 HTTP/1.1\r\nHost: h\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello";
        let Parsed::Append(parsed) = head(append) else {
            panic!("an append: {:?}", head(append));
        };
        assert_eq!(parsed.content_length, 5);
        assert_eq!(&append[parsed.len..], b"hello");
        let (path, target) = route_path(append, &parsed).expect("the route's");
        assert_eq!(path, "a b");
        assert_eq!(target.path(), "/v1/stream/a%20b");
        assert_eq!(target.query(), Some("x=1"));
        let headers: Vec<_> = parsed
            .headers
            .iter()
            .map(|(name, value)| (&append[name.clone()], &append[value.clone()]))
            .collect();
        assert_eq!(headers[1], (&b"Content-Type"[..], &b"text/plain"[..]));
        assert_eq!(headers.len(), 3);

        // A path that does not decode parses as an append's head; the
        // request is then hyper's, which answers it as the router does.
        let undecodable = b"POST /v1/stream/%FF HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
        let Parsed::Append(parsed) = head(undecodable) else {
            panic!("an append's head: {:?}", head(undecodable));
        };
        assert!(route_path(undecodable, &parsed).is_none());
        // A header value `http` refuses (DEL) is never the loop's:
        // `httparse` refuses the head (`route_path` relies on it).
        let delete = b"POST /v1/stream/a HTTP/1.1\r\nX: a\x7fb\r\nContent-Length: 0\r\n\r\n";
        assert!(matches!(head(delete), Parsed::Other));

        // Not whole yet.
        assert!(matches!(
            head(b"POST /v1/stream/a HTTP/1.1\r\nContent-Le"),
            Parsed::Partial
        ));
        assert!(matches!(head(b""), Parsed::Partial));
        // hyper's: another method or route, HTTP/1.0, no or two lengths,
        // a chunked body, 100-continue, an upgrade, a close, a large body,
        // a head httparse refuses.
        for other in [
            &b"GET /v1/stream/a HTTP/1.1\r\n\r\n"[..],
            b"POST /v1/sessions HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            b"POST /v1/stream/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            b"POST /v1/stream/a HTTP/1.0\r\nContent-Length: 0\r\n\r\n",
            b"POST /v1/stream/a HTTP/1.1\r\n\r\n",
            b"POST /v1/stream/a HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
            b"POST /v1/stream/a HTTP/1.1\r\nContent-Length: +1\r\n\r\n",
            b"POST /v1/stream/a HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 1\r\n\r\n",
            b"POST /v1/stream/a HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n",
            b"POST /v1/stream/a HTTP/1.1\r\nUpgrade: websocket\r\nContent-Length: 0\r\n\r\n",
            b"POST /v1/stream/a HTTP/1.1\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            b"POST /v1/stream/a HTTP/1.1\r\nContent-Length: 65537\r\n\r\n",
            b"POST /v1/stream/a HTTP/1.1\r\nBad Header: x\r\n\r\n",
        ] {
            assert!(
                matches!(head(other), Parsed::Other),
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }

    #[tokio::test]
    async fn an_answer_is_written_as_hyper_writes_it() {
        let response = axum::http::Response::builder()
            .status(204)
            .header("stream-next-offset", "1_2")
            .body(Body::empty())
            .unwrap();
        let (bytes, close) = encode(response).await.expect("an answer");
        let text = String::from_utf8(bytes).unwrap();
        assert!(!close);
        assert!(text.starts_with("HTTP/1.1 204 No Content\r\nstream-next-offset: 1_2\r\ndate: "));
        assert!(text.ends_with(" GMT\r\n\r\n"), "{text}");
        assert!(!text.contains("content-length"));

        let response = axum::http::Response::builder()
            .status(409)
            .header("content-type", "application/json")
            .header("connection", "close")
            .body(Body::from("{\"error\":1}"))
            .unwrap();
        let (bytes, close) = encode(response).await.expect("an answer");
        let text = String::from_utf8(bytes).unwrap();
        assert!(close);
        assert!(text.starts_with("HTTP/1.1 409 Conflict\r\n"));
        assert!(text.contains("\r\ncontent-length: 11\r\n"));
        assert!(text.ends_with("\r\n\r\n{\"error\":1}"));
    }
}
