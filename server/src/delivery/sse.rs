//! The SSE transport: events framed as `text/event-stream` into a bounded
//! channel that feeds the response body; a lap ends the stream with an
//! `event: gap` whose data is the refusal body.

use super::{event_id, End, Gone, Transport, Wake};
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

/// Chunks queued between the delivery loop and the response body.
const QUEUE: usize = 16;

/// The delivery side of one SSE response.
pub(crate) struct SseTransport {
    /// Chunks to the response body; closed when the client goes away.
    tx: mpsc::Sender<Bytes>,
    /// Ticks when nothing was written for [`KEEPALIVE`].
    keepalive: Interval,
}

/// A `200 text/event-stream` response and the transport that feeds it.
pub(crate) fn open() -> (SseTransport, Response) {
    let (tx, rx) = mpsc::channel::<Bytes>(QUEUE);
    let mut keepalive = interval(KEEPALIVE);
    keepalive.set_missed_tick_behavior(MissedTickBehavior::Delay);
    keepalive.reset();
    let body = Body::from_stream(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|chunk| (Ok::<_, Infallible>(chunk), rx))
    }));
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    (SseTransport { tx, keepalive }, response)
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
        self.tx.send(chunk).await.map_err(|_| Gone)?;
        self.keepalive.reset();
        Ok(())
    }
}

impl Transport for SseTransport {
    async fn send_events(&mut self, epoch: u64, events: &[Event]) -> Result<(), Gone> {
        if events.is_empty() {
            return Ok(());
        }
        match frame(epoch, events) {
            Ok(chunk) => self.send(chunk).await,
            // Payloads are validated UTF-8 JSON on emit: a payload that
            // cannot be framed means the ring was fed by something else.
            // Ending the stream (the client resumes and gets the same
            // refusal) is better than skipping the event.
            Err(error) => {
                tracing::error!(%error, "stored payload cannot be framed; ending stream");
                Err(Gone)
            }
        }
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
            _ = self.tx.closed() => Wake::Gone,
            _ = self.keepalive.tick() => Wake::Idle,
        }
    }

    async fn keepalive(&mut self) -> Result<(), Gone> {
        self.send(Bytes::from_static(b": keepalive\n\n")).await
    }

    /// Dropping the sender ends the body: the client sees the stream end
    /// cleanly and resumes with its cursor.
    async fn end(&mut self, _why: End) {}
}
