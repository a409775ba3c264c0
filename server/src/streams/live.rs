//! Live reads: long-poll (one response, once there is data or the wait
//! ends) and SSE (`data` events, each followed by a `control` event with
//! the next offset). A live reader that retention overtakes is ended: its
//! reconnect from the last offset it got is answered `410`, never a skip.

use super::answer::{
    self, finish, response, CLOSED, CURSOR, NEXT_OFFSET, SSE_DATA_ENCODING, UP_TO_DATE,
};
use super::cursor::response_cursor;
use super::http::{catch_up, ReadQuery, CHUNK_BYTES};
use super::stream::{media_type, Stream};
use crate::lifecycle::turned_true;
use crate::state::ServerState;
use axum::body::Body;
use axum::http::{header, Response, StatusCode};
use base64::Engine as _;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Whether `stream` has ended for live readers (deleted, expired,
/// soft-deleted).
fn ended(stream: &Stream) -> bool {
    stream.gone.load(Ordering::Acquire) || stream.soft_deleted.load(Ordering::Acquire)
}

/// A long-poll read after `cursor`: data at once if there is some, else
/// the first append within `--long-poll-timeout`, else `204`.
pub(crate) async fn long_poll(
    state: &Arc<ServerState>,
    stream: Arc<Stream>,
    cursor: u64,
    query: &ReadQuery,
) -> Response<Body> {
    let mut changed = stream.subscribe();
    let no_headers = axum::http::HeaderMap::new();
    if stream.ring().published() > cursor {
        return catch_up(&stream, cursor, query, &no_headers);
    }
    if !stream.is_closed() {
        let mut shutdown = state.lifecycle.shutdown.clone();
        let deadline = tokio::time::sleep(state.config.long_poll_timeout);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                changed_ = changed.changed() => {
                    if changed_.is_err() || ended(&stream) {
                        return answer::not_found();
                    }
                    if stream.ring().published() > cursor {
                        state.streams.touch(&stream);
                        return catch_up(&stream, cursor, query, &no_headers);
                    }
                    if stream.is_closed() {
                        break;
                    }
                }
                () = &mut deadline => break,
                () = turned_true(&mut shutdown) => break,
            }
        }
    }
    let mut builder = response(StatusCode::NO_CONTENT)
        .header(NEXT_OFFSET, stream.offset_of(cursor).to_string())
        .header(UP_TO_DATE, "true")
        .header(CURSOR, response_cursor(query.cursor.as_deref()));
    if stream.is_closed() && stream.ring().published() == cursor {
        builder = builder.header(CLOSED, "true");
    }
    finish(builder, Body::empty())
}

/// An SSE read after `cursor`.
pub(crate) fn sse(
    state: &Arc<ServerState>,
    stream: Arc<Stream>,
    cursor: u64,
    client_cursor: Option<String>,
) -> Response<Body> {
    let media = media_type(&stream.settings.content_type);
    let base64 = !(media.starts_with("text/") || media == "application/json");
    let reader = SseReader {
        state: Arc::clone(state),
        stream,
        cursor,
        client_cursor,
        base64,
        started: false,
        done: false,
    };
    let body = futures_util::stream::unfold(reader, |mut reader| async move {
        let bytes = reader.next().await?;
        Some((Ok::<_, Infallible>(bytes), reader))
    });
    let mut builder = response(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache");
    if base64 {
        builder = builder.header(SSE_DATA_ENCODING, "base64");
    }
    finish(builder, Body::from_stream(body))
}

/// One SSE reader's position.
struct SseReader {
    state: Arc<ServerState>,
    stream: Arc<Stream>,
    /// The seq of the last message sent.
    cursor: u64,
    client_cursor: Option<String>,
    /// Binary content: `data` events carry base64.
    base64: bool,
    /// Whether the first control event went out.
    started: bool,
    /// The closing control event went out.
    done: bool,
}

impl SseReader {
    /// The next bytes to send, `None` once the stream ends.
    async fn next(&mut self) -> Option<bytes::Bytes> {
        if self.done {
            return None;
        }
        let mut shutdown = self.state.lifecycle.shutdown.clone();
        loop {
            let mut changed = self.stream.subscribe();
            if ended(&self.stream) || *shutdown.borrow() {
                return None;
            }
            // Retention overtook this reader: end it; its reconnect gets
            // the 410 with the figures.
            let chunk = self.stream.read_after(self.cursor, CHUNK_BYTES).ok()?;
            if !chunk.payloads.is_empty() || !self.started {
                self.started = true;
                self.state.streams.touch(&self.stream);
                // Each data event is followed by its control event, so a
                // reader cut anywhere resumes exactly after what it got.
                let mut out = Vec::new();
                let first = chunk.cursor + 1 - chunk.payloads.len() as u64;
                for (seq, payload) in (first..).zip(&chunk.payloads) {
                    self.data_event(&mut out, payload);
                    self.cursor = seq;
                    let last = seq == chunk.cursor;
                    self.control_event(&mut out, last && chunk.up_to_date);
                }
                if chunk.payloads.is_empty() {
                    self.control_event(&mut out, chunk.up_to_date);
                }
                return Some(out.into());
            }
            if self.stream.is_closed() {
                let mut out = Vec::new();
                self.control_event(&mut out, true);
                return Some(out.into());
            }
            tokio::select! {
                result = changed.changed() => {
                    if result.is_err() {
                        return None;
                    }
                }
                () = tokio::time::sleep(self.state.config.long_poll_timeout) => {
                    let mut out = Vec::new();
                    self.control_event(&mut out, true);
                    return Some(out.into());
                }
                () = turned_true(&mut shutdown) => return None,
            }
        }
    }

    fn data_event(&self, out: &mut Vec<u8>, payload: &[u8]) {
        let text: std::borrow::Cow<'_, [u8]> = if self.base64 {
            base64::engine::general_purpose::STANDARD
                .encode(payload)
                .into_bytes()
                .into()
        } else if self.stream.json {
            let mut array = Vec::with_capacity(payload.len() + 2);
            super::json_mode::array(&mut array, [payload]);
            array.into()
        } else {
            String::from_utf8_lossy(payload)
                .into_owned()
                .into_bytes()
                .into()
        };
        // Cannot fail: the text is UTF-8 and the event type is fixed.
        let _ = gapless::sse::encode_unnumbered_tight(out, "data", &text);
    }

    /// The control event after what was sent: the next offset, and either
    /// the stream's closure (at its closed tail: the last event) or the
    /// cursor and whether the reader is up to date.
    fn control_event(&mut self, out: &mut Vec<u8>, up_to_date: bool) {
        let next = self.stream.offset_of(self.cursor);
        let at_tail = self.stream.ring().published() == self.cursor;
        let control = if self.stream.is_closed() && at_tail {
            self.done = true;
            serde_json::json!({ "streamNextOffset": next.to_string(), "streamClosed": true })
        } else {
            let cursor = response_cursor(self.client_cursor.as_deref());
            match up_to_date {
                true => serde_json::json!({
                    "streamNextOffset": next.to_string(),
                    "streamCursor": cursor,
                    "upToDate": true,
                }),
                false => serde_json::json!({
                    "streamNextOffset": next.to_string(),
                    "streamCursor": cursor,
                }),
            }
        };
        let _ =
            gapless::sse::encode_unnumbered_tight(out, "control", control.to_string().as_bytes());
    }
}
