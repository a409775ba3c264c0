//! Reads over a [`Feed`]: catch-up (one page), long-poll (a page once
//! there is data, or `204` when the wait ends) and SSE (`data` events,
//! each followed by a `control` event with the next offset). A live reader
//! that retention overtakes is ended: its reconnect from the last offset
//! it got is answered `410`, never a skip.

use super::answer::{
    self, etag, finish, response, CLOSED, CURSOR, NEXT_OFFSET, SSE_DATA_ENCODING, UP_TO_DATE,
};
use super::cursor::response_cursor;
use super::query::{Live, ReadQuery};
use crate::lifecycle::turned_true;
use crate::state::ServerState;
use crate::streams::feed::{Feed, FeedEnd, Page};
use crate::streams::json_mode;
use crate::streams::offset::Start;
use crate::streams::settings::media_type;
use crate::streams::wire_page;
use axum::body::Body;
use axum::http::{header, HeaderMap, Response, StatusCode};
use base64::Engine as _;
use bytes::Bytes;
use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::Arc;
use tokio::time::Instant;

/// The answer to a feed that stopped.
pub(crate) fn ended(end: &FeedEnd) -> Response<Body> {
    match end {
        FeedEnd::Gone => answer::not_found(),
        FeedEnd::SoftDeleted => answer::soft_deleted(),
        FeedEnd::Refused(refused) => answer::read_refused(refused),
        FeedEnd::Unavailable => answer::unavailable(),
    }
}

/// Any read of `feed` as `query` asks.
pub(crate) async fn read<F: Feed>(
    state: &Arc<ServerState>,
    mut feed: F,
    query: ReadQuery,
    headers: &HeaderMap,
) -> Response<Body> {
    let started = match feed.start(query.start).await {
        Ok(started) => started,
        Err(end) => return ended(&end),
    };
    let cursor = started.cursor;
    match query.live {
        Live::Sse => sse(
            state,
            feed,
            cursor,
            query.cursor,
            is_binary(&started.content_type),
        ),
        Live::LongPoll => long_poll(state, feed, cursor, &query).await,
        Live::No => match feed.read_catch_up(cursor).await {
            Ok(page) => page_response(&page, &query, headers),
            Err(end) => ended(&end),
        },
    }
}

/// A catch-up answer: `page` with its offsets, ETag and state headers.
pub(crate) fn page_response(page: &Page, query: &ReadQuery, headers: &HeaderMap) -> Response<Body> {
    let next = page.next();
    let at_closed_tail = page.at_closed_tail();
    let etag = etag(&query.raw_start, next, at_closed_tail);
    if headers
        .get(header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes())
    {
        return finish(
            response(StatusCode::NOT_MODIFIED).header(header::ETAG, etag),
            Body::empty(),
        );
    }
    let mut builder = response(StatusCode::OK)
        .header(header::CONTENT_TYPE, page.content_type.as_str())
        .header(NEXT_OFFSET, next.header_value())
        .header(header::ETAG, etag);
    if query.live == Live::LongPoll {
        builder = builder.header(CURSOR, response_cursor(query.cursor.as_deref()));
    }
    if page.up_to_date() {
        builder = builder.header(UP_TO_DATE, "true");
    }
    if query.start == Start::Now {
        builder = builder.header(header::CACHE_CONTROL, "no-store");
    }
    if at_closed_tail {
        builder = builder.header(CLOSED, "true");
    }
    let (body, len) = body_of(page);
    finish(builder.header(header::CONTENT_LENGTH, len), body)
}

/// The body of a page and its length: the feed's encoding of it
/// ([`Page::wire`]), or its payloads encoded here (`wire_page::encode`),
/// in a few large buffers either way rather than a body chunk per message.
fn body_of(page: &Page) -> (Body, usize) {
    let (mut chunks, len) = match &page.wire {
        Some(wire) => (wire.chunks.clone(), wire.len),
        None => wire_page::encode(&page.payloads, page.json),
    };
    let body = match chunks.len() {
        0 => Body::empty(),
        1 => Body::from(chunks.remove(0)),
        _ => Body::from_stream(futures_util::stream::iter(
            chunks.into_iter().map(Ok::<_, Infallible>),
        )),
    };
    (body, len)
}

/// A long-poll read after `cursor`: data at once if there is some, else
/// the first append within `--long-poll-timeout`, else `204`.
async fn long_poll<F: Feed>(
    state: &Arc<ServerState>,
    mut feed: F,
    cursor: u64,
    query: &ReadQuery,
) -> Response<Body> {
    let no_headers = HeaderMap::new();
    let deadline = Instant::now() + state.config.long_poll_timeout;
    let mut shutdown = state.lifecycle.shutdown.clone();
    let mut page = match feed.read(cursor).await {
        Ok(page) => page,
        Err(end) => return ended(&end),
    };
    while page.is_empty() && !page.closed {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        tokio::select! {
            changed = feed.wait(deadline - now) => {
                if !changed {
                    break;
                }
            }
            () = turned_true(&mut shutdown) => break,
        }
        page = match feed.read(cursor).await {
            Ok(page) => page,
            Err(end) => return ended(&end),
        };
    }
    if !page.is_empty() {
        return page_response(&page, query, &no_headers);
    }
    let mut builder = response(StatusCode::NO_CONTENT)
        .header(NEXT_OFFSET, page.next().header_value())
        .header(UP_TO_DATE, "true")
        .header(CURSOR, response_cursor(query.cursor.as_deref()));
    if page.at_closed_tail() {
        builder = builder.header(CLOSED, "true");
    }
    finish(builder, Body::empty())
}

/// An SSE read after `cursor`.
fn sse<F: Feed>(
    state: &Arc<ServerState>,
    feed: F,
    cursor: u64,
    client_cursor: Option<String>,
    binary: bool,
) -> Response<Body> {
    let reader = SseReader {
        state: Arc::clone(state),
        feed,
        cursor,
        client_cursor,
        binary,
        started: false,
        done: false,
        quiet_since: Instant::now(),
    };
    let body = futures_util::stream::unfold(reader, |mut reader| async move {
        let bytes = reader.next().await?;
        Some((Ok::<_, Infallible>(bytes), reader))
    });
    let mut builder = response(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache");
    if binary {
        builder = builder.header(SSE_DATA_ENCODING, "base64");
    }
    finish(builder, Body::from_stream(body))
}

/// Whether a stream of `content_type` sends base64 `data` events.
pub(crate) fn is_binary(content_type: &str) -> bool {
    let media = media_type(content_type);
    !(media.starts_with("text/") || media == "application/json")
}

/// One SSE reader's position.
struct SseReader<F> {
    state: Arc<ServerState>,
    feed: F,
    /// The seq of the last message sent.
    cursor: u64,
    client_cursor: Option<String>,
    /// Binary content: `data` events carry base64 (the response's
    /// `Stream-SSE-Data-Encoding` says so).
    binary: bool,
    /// Whether the first control event went out.
    started: bool,
    /// The closing control event went out.
    done: bool,
    /// When the last event went out, for the keep-alive control events.
    quiet_since: Instant,
}

impl<F: Feed> SseReader<F> {
    /// The next bytes to send, `None` once the stream ends.
    async fn next(&mut self) -> Option<bytes::Bytes> {
        if self.done {
            return None;
        }
        let mut shutdown = self.state.lifecycle.shutdown.clone();
        let keep_alive = self.state.config.long_poll_timeout;
        loop {
            if *shutdown.borrow() {
                return None;
            }
            // Gone, unavailable, or overtaken by retention: the stream
            // ends; a reconnect from the last offset sent gets the answer
            // (a 410 with its figures when retention overtook it).
            let page = self.feed.read(self.cursor).await.ok()?;
            let cursor = response_cursor(self.client_cursor.as_deref());
            if !page.payloads.is_empty() || !self.started {
                self.started = true;
                // The page's messages as one data event (the protocol's
                // "each batch of data"), then one control event naming
                // the offset after the last: a reader cut anywhere resumes
                // after the last control event it got, and the batch is
                // sent again whole.
                let framed: usize = page.payloads.iter().map(|p| p.len()).sum::<usize>() + 192;
                let mut out = Vec::with_capacity(framed);
                if !page.payloads.is_empty() {
                    data_event(&mut out, &page.payloads, self.binary, page.json);
                    self.cursor = page.cursor;
                }
                self.control_event(&mut out, &page, page.up_to_date(), &cursor);
                self.quiet_since = Instant::now();
                return Some(out.into());
            }
            if page.closed {
                let mut out = Vec::new();
                self.control_event(&mut out, &page, true, &cursor);
                return Some(out.into());
            }
            let wake_at = self.quiet_since + keep_alive;
            let now = Instant::now();
            if now >= wake_at {
                let mut out = Vec::new();
                self.control_event(&mut out, &page, true, &cursor);
                self.quiet_since = now;
                return Some(out.into());
            }
            tokio::select! {
                _ = self.feed.wait(wake_at - now) => {}
                () = turned_true(&mut shutdown) => return None,
            }
        }
    }

    /// The control event after what was sent: the next offset, and either
    /// the stream's closure (at its closed tail: the last event) or the
    /// cursor and whether the reader is up to date.
    fn control_event(&mut self, out: &mut Vec<u8>, page: &Page, up_to_date: bool, cursor: &str) {
        let next = page.numbering.offset_of(self.cursor).wire();
        // The object as `serde_json` writes it (keys sorted), written by
        // hand: one per message. Offsets are digits and `_`, the cursor
        // digits: nothing to escape.
        let mut control = Vec::with_capacity(112);
        if page.closed && self.cursor >= page.published {
            self.done = true;
            control.extend_from_slice(b"{\"streamClosed\":true,\"streamNextOffset\":\"");
            control.extend_from_slice(&next);
            control.extend_from_slice(b"\"}");
        } else {
            control.extend_from_slice(b"{\"streamCursor\":\"");
            control.extend_from_slice(cursor.as_bytes());
            control.extend_from_slice(b"\",\"streamNextOffset\":\"");
            control.extend_from_slice(&next);
            control.extend_from_slice(match up_to_date {
                true => b"\",\"upToDate\":true}",
                false => b"\"}",
            });
        }
        // Cannot fail: the text is UTF-8 and the event type is fixed.
        let _ = gapless::sse::encode_unnumbered_tight(out, "control", &control);
    }
}

/// One `data` event for `payloads`, consecutive messages: base64 of their
/// bytes for binary content, one JSON array of them in JSON mode, else
/// their text.
fn data_event(out: &mut Vec<u8>, payloads: &[Bytes], binary: bool, json: bool) {
    let text: Cow<'_, [u8]> = if json {
        let length: usize = payloads.iter().map(|p| p.len() + 1).sum();
        let mut array = Vec::with_capacity(length + 1);
        json_mode::array(&mut array, payloads.iter().map(|p| &p[..]));
        array.into()
    } else {
        // The bytes of a byte stream, joined: a character split between
        // two appends decodes whole.
        let bytes: Cow<'_, [u8]> = match payloads {
            [one] => Cow::Borrowed(&one[..]),
            many => Cow::Owned(many.concat()),
        };
        if binary {
            base64::engine::general_purpose::STANDARD
                .encode(&bytes)
                .into_bytes()
                .into()
        } else {
            match std::str::from_utf8(&bytes) {
                Ok(_) => bytes,
                Err(_) => String::from_utf8_lossy(&bytes)
                    .into_owned()
                    .into_bytes()
                    .into(),
            }
        }
    };
    // Cannot fail: the text is UTF-8 and the event type is fixed.
    let _ = gapless::sse::encode_unnumbered_tight(out, "data", &text);
}
