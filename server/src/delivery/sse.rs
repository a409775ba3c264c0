//! The SSE transport: a `retry:` field, then events framed as
//! `text/event-stream` in chunks of at most [`CHUNK_BYTES`] into a queue of
//! [`QUEUE_CHUNKS`] that feeds the response body; a lap ends the stream with
//! an `event: gap` whose data is the refusal body; a comment line every
//! [`KEEPALIVE`] while idle.

use super::{event_id, End, Gone, Transport, Wake};
use crate::connection::ConnectionHandle;
use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use gapless::session::Refusal;
use gapless::{sse, Event};
use gapless_client::Refusal as RefusalBody;
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{interval, Interval, MissedTickBehavior};

/// How often an idle stream writes a comment line, so a client that went
/// away is noticed even when no events flow.
const KEEPALIVE: Duration = Duration::from_secs(5);

/// The largest chunk handed to the body (a larger event is split across
/// chunks: SSE is a byte stream).
pub(crate) const CHUNK_BYTES: usize = 32 << 10;

/// Chunks queued between the delivery loop and the response body: with
/// [`CHUNK_BYTES`], at most 256 KiB per stream.
pub(crate) const QUEUE_CHUNKS: usize = 8;

/// The delivery side of one SSE response.
pub(crate) struct SseTransport {
    /// Chunks to the response body; closed when the client goes away.
    tx: mpsc::Sender<Bytes>,
    /// Ticks when nothing was written for [`KEEPALIVE`].
    keepalive: Interval,
    /// The connection, to drop when a write times out.
    connection: Option<ConnectionHandle>,
}

/// A `200 text/event-stream` response that starts with `retry: <ms>`, and
/// the transport that feeds it.
pub(crate) fn open(
    retry: Duration,
    connection: Option<ConnectionHandle>,
) -> (SseTransport, Response) {
    let (tx, rx) = mpsc::channel::<Bytes>(QUEUE_CHUNKS);
    let mut keepalive = interval(KEEPALIVE);
    keepalive.set_missed_tick_behavior(MissedTickBehavior::Delay);
    keepalive.reset();
    let retry = Bytes::from(format!("retry: {}\n\n", retry.as_millis()));
    let body = Body::from_stream(futures_util::stream::unfold(
        (Some(retry), rx),
        |(first, mut rx)| async move {
            let chunk = match first {
                Some(retry) => retry,
                None => rx.recv().await?,
            };
            Some((Ok::<_, Infallible>(chunk), (None, rx)))
        },
    ));
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    let transport = SseTransport {
        tx,
        keepalive,
        connection,
    };
    (transport, response)
}

/// Frames `events` as SSE into one buffer.
fn frame(epoch: u64, events: &[Event]) -> Result<Bytes, sse::SseError> {
    let mut out = Vec::with_capacity(events.iter().map(|e| e.payload.len() + 48).sum());
    for event in events {
        sse::encode(&mut out, &event_id(epoch, event), None, &event.payload)?;
    }
    Ok(out.into())
}

impl SseTransport {
    async fn send(&mut self, chunk: Bytes) -> Result<(), Gone> {
        self.tx.send(chunk).await.map_err(|_| Gone::Client)?;
        self.keepalive.reset();
        Ok(())
    }
}

impl Transport for SseTransport {
    async fn send_events(&mut self, epoch: u64, events: &[Event]) -> Result<(), Gone> {
        let mut framed = match frame(epoch, events) {
            Ok(framed) => framed,
            // Payloads are validated UTF-8 JSON on emit: a payload that
            // cannot be framed means the ring was fed by something else.
            // Ending the stream (the client resumes and meets the same
            // payload) is better than skipping the event.
            Err(error) => {
                tracing::error!(%error, "stored payload cannot be framed; ending stream");
                return Err(Gone::Client);
            }
        };
        // Slices of one buffer: splitting copies nothing.
        while framed.len() > CHUNK_BYTES {
            let chunk = framed.split_to(CHUNK_BYTES);
            self.send(chunk).await?;
        }
        if framed.is_empty() {
            return Ok(());
        }
        self.send(framed).await
    }

    async fn send_gap(&mut self, refusal: &Refusal) {
        let body = RefusalBody::from(refusal).to_json();
        let mut out = Vec::new();
        if sse::encode_unnumbered(&mut out, "gap", body.as_bytes()).is_ok() {
            let _ = self.send(out.into()).await;
        }
    }

    async fn wake(&mut self) -> Wake {
        tokio::select! {
            _ = self.tx.closed() => Wake::Gone(Gone::Client),
            _ = self.keepalive.tick() => Wake::Idle,
        }
    }

    async fn keepalive(&mut self) -> Result<(), Gone> {
        self.send(Bytes::from_static(b": keepalive\n\n")).await
    }

    /// Dropping the sender ends the body: the client sees the stream end
    /// cleanly and resumes with its cursor.
    async fn end(&mut self, _why: End) {}

    fn abort(&mut self) {
        if let Some(connection) = &self.connection {
            connection.close();
        }
    }
}
