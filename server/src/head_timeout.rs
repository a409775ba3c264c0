//! The request-head timeout (`header_read_timeout`), kept by each
//! connection's own task with one clock instead of a timer per request.
//!
//! hyper's own (`http1::Builder::header_read_timeout`) allocates a timer
//! for every request head, inserts it in the timer wheel and removes it:
//! about 1 µs of an append's 12 on this server's hot path. The rule is
//! the same here: from the moment a connection waits for a request head
//! (its accept, or the end of the previous answer, body included) until
//! the head arrives, at most the timeout; past it the connection is
//! closed. A connection idle between requests for that long is closed too,
//! as hyper does.
//!
//! [`HeadClock`] holds when the wait began; the service marks a head's
//! arrival ([`HeadClock::head_arrived`]), the answer's body marks its end
//! when hyper drops it ([`AnsweredOnDrop`]), and the connection task waits
//! on [`HeadClock::expired`]: one sleep, re-armed at most once per
//! timeout.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// [`HeadClock::waiting_since`]'s value while a request is in flight.
const IN_FLIGHT: u64 = u64::MAX;

/// When a connection began waiting for its next request head.
#[derive(Debug)]
pub(crate) struct HeadClock {
    /// The clock's zero: the connection's accept.
    origin: Instant,
    /// Microseconds from `origin` when the wait for a head began, or
    /// [`IN_FLIGHT`] from a head's arrival until its answer is written.
    waiting_since: AtomicU64,
}

impl HeadClock {
    /// A clock for a connection accepted now: waiting for its first head.
    pub(crate) fn new() -> Self {
        Self {
            origin: Instant::now(),
            waiting_since: AtomicU64::new(0),
        }
    }

    /// A request head arrived: no timeout runs until its answer is written.
    pub(crate) fn head_arrived(&self) {
        self.waiting_since.store(IN_FLIGHT, Ordering::Relaxed);
    }

    /// The answer was written (its body dropped): the wait for the next
    /// head begins.
    pub(crate) fn answered(&self) {
        let since = self
            .origin
            .elapsed()
            .as_micros()
            .min(u128::from(IN_FLIGHT - 1));
        self.waiting_since.store(since as u64, Ordering::Relaxed);
    }

    /// When the wait for a head began; `None` while a request is in flight.
    fn waiting_since(&self) -> Option<Instant> {
        match self.waiting_since.load(Ordering::Relaxed) {
            IN_FLIGHT => None,
            micros => Some(self.origin + Duration::from_micros(micros)),
        }
    }

    /// Resolves once the connection has waited `timeout` for a request head.
    pub(crate) async fn expired(&self, timeout: Duration) {
        loop {
            let check_at = match self.waiting_since() {
                Some(since) if since.elapsed() >= timeout => return,
                Some(since) => since + timeout,
                // In flight: look again a timeout later (a request that
                // ends meanwhile restarts the wait, checked then).
                None => Instant::now() + timeout,
            };
            tokio::time::sleep_until(check_at).await;
        }
    }
}

/// An answer's body that tells the connection's [`HeadClock`] when it is
/// done: hyper drops a body once it is written (or the connection ends).
#[derive(Debug)]
pub(crate) struct AnsweredOnDrop<B> {
    body: B,
    clock: Arc<HeadClock>,
}

impl<B> AnsweredOnDrop<B> {
    /// `body`, reporting its end to `clock`.
    pub(crate) fn new(body: B, clock: Arc<HeadClock>) -> Self {
        Self { body, clock }
    }
}

impl<B> Drop for AnsweredOnDrop<B> {
    fn drop(&mut self) {
        self.clock.answered();
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for AnsweredOnDrop<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::{AnsweredOnDrop, HeadClock};
    use std::sync::Arc;
    use std::time::Duration;

    /// The clock runs while waiting for a head, stops from the head's
    /// arrival until the answer's body is dropped, and restarts then.
    ///
    /// Fails when the answer's end does not restart the wait (an idle
    /// connection never times out), or a head does not stop it (a slow
    /// answer is cut).
    #[tokio::test(start_paused = true)]
    async fn the_clock_runs_only_while_a_head_is_awaited() {
        let timeout = Duration::from_secs(10);
        let clock = Arc::new(HeadClock::new());
        tokio::time::sleep(Duration::from_secs(6)).await;
        clock.head_arrived();
        let answer = AnsweredOnDrop::new(axum::body::Body::empty(), Arc::clone(&clock));
        // In flight for longer than the timeout: not expired.
        let in_flight = tokio::time::timeout(Duration::from_secs(30), clock.expired(timeout));
        assert!(in_flight.await.is_err(), "a request in flight expired");
        drop(answer);
        let waited = tokio::time::Instant::now();
        clock.expired(timeout).await;
        assert_eq!(
            waited.elapsed(),
            timeout,
            "the wait restarts at the answer's end"
        );
    }
}
