//! Delivery: the one loop that feeds a session's events to a transport.
//!
//! Both transports run the same steps — write the replay copied at attach
//! time, then follow the ring live; account every event in `sent` *before*
//! handing it over; on a lap report the gap and end; end when the client
//! goes away, another transport supersedes this one, the session ends or
//! the server shuts down — so they are written once, in [`deliver`], over
//! the [`Transport`] trait. [`sse`] and [`ws`] only say how bytes are
//! framed and how a stream ends.

pub(crate) mod sse;
pub(crate) mod ws;

use crate::metrics::Stage;
use crate::state::{Entry, Shared};
use gapless::session::{Attachment, Refusal, Session};
use gapless::{Event, EventId, Follower, ReplayError};
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The client is gone: the transport can take no more.
#[derive(Debug)]
pub(crate) struct Gone;

/// Why the loop ended a stream that is still writable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    /// Another transport attached, or the session ended.
    Superseded,
    /// The server is shutting down.
    Shutdown,
}

/// What wakes the loop from the transport's side.
pub(crate) enum Wake {
    /// The client went away.
    Gone,
    /// Nothing was written for a while: send a keepalive.
    Idle,
}

/// One way of writing a session's events to a client.
pub(crate) trait Transport: Send {
    /// Writes `events` (already accounted in `sent`).
    fn send_events(
        &mut self,
        epoch: u64,
        events: &[Event],
    ) -> impl Future<Output = Result<(), Gone>> + Send;

    /// Writes the report of a gap that ends the stream.
    fn send_gap(&mut self, refusal: &Refusal) -> impl Future<Output = ()> + Send;

    /// Resolves when the client is gone or the stream has been idle long
    /// enough to need a keepalive. Cancel-safe: the loop polls it in a
    /// `select!` beside the ring.
    fn wake(&mut self) -> impl Future<Output = Wake> + Send;

    /// Writes a keepalive.
    fn keepalive(&mut self) -> impl Future<Output = Result<(), Gone>> + Send;

    /// Ends a stream that is still writable.
    fn end(&mut self, why: End) -> impl Future<Output = ()> + Send;
}

/// A transport attached to a session. Dropping it detaches the transport
/// (the session's `transport` becomes `none` unless another attached since)
/// and wakes the session's other streams — on every path out of a handler
/// or a stream task, including an early return and a panic.
pub(crate) struct Attached {
    entry: Arc<Entry>,
    attachment: Attachment,
}

impl Attached {
    /// Takes over `attachment`, just granted by the session, and tells the
    /// session's other streams that the attachment changed.
    pub(crate) fn new(entry: Arc<Entry>, attachment: Attachment) -> Self {
        entry.notify_changed();
        Self { entry, attachment }
    }

    fn session(&self) -> &Session {
        &self.entry.session
    }

    fn is_current(&self) -> bool {
        self.entry.session.is_current(&self.attachment)
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.entry.session.detach(&self.attachment);
        self.entry.notify_changed();
    }
}

/// The events after a cursor, copied when the transport attached.
pub(crate) struct Replay {
    /// `cursor + 1 ..= replay_to`.
    events: Vec<Event>,
    /// The published watermark the replay ends at; live from `replay_to + 1`.
    replay_to: u64,
}

/// Why a replay could not be copied.
#[derive(Debug)]
pub(crate) enum NotReplayed {
    /// Events after the cursor were evicted since it was checked: the
    /// `gap_not_covered` refusal to send.
    Gap(Refusal),
    /// The range ends past the published watermark. A grant's `replay_to`
    /// is a watermark already published, so this is an engine bug, answered
    /// as an internal error rather than a silently shorter replay.
    Ahead,
}

/// Copies `cursor + 1 ..= replay_to` for a transport just attached, or
/// reports the gap evicted since the cursor was checked: the report is
/// accounted (`sent` rises to `first_retained - 1`, so the client may
/// continue from there) and counted under `stage`.
pub(crate) fn copy_replay(
    state: &Shared,
    attached: &Attached,
    cursor: u64,
    replay_to: u64,
    stage: Stage,
) -> Result<Replay, NotReplayed> {
    let session = attached.session();
    match session.ring().replay_range(cursor, replay_to) {
        Ok(events) => Ok(Replay { events, replay_to }),
        Err(ReplayError::Gap(gap)) => {
            session.gap_reported(gap.first_retained);
            let refusal = Refusal::from(gap);
            state.metrics.refused(stage, &refusal);
            Err(NotReplayed::Gap(refusal))
        }
        Err(ReplayError::Ahead { .. }) => Err(NotReplayed::Ahead),
    }
}

/// Writes the replay, then live events, until the client goes away, the
/// transport is superseded, the session ends, the ring laps the stream, or
/// the server shuts down. Every event counts toward `sent` from just before
/// it is handed to the transport: once bytes are queued the client may
/// receive them and resume or upgrade with their ID at once, and its true
/// cursor must never be refused as ahead of what the server accounted for.
pub(crate) async fn deliver(
    state: Arc<Shared>,
    attached: Attached,
    replay: Replay,
    mut transport: impl Transport,
) {
    let session = attached.session();
    let epoch = session.epoch();
    let mut changed = attached.entry.changed.subscribe();
    let mut shutdown = state.shutdown.clone();
    let metrics = &state.metrics;

    let replay_to = replay.replay_to;
    session.record_sent(replay_to);
    if transport.send_events(epoch, &replay.events).await.is_err() {
        return;
    }
    let replayed = replay.events.len() as u64;
    metrics
        .events_replayed
        .fetch_add(replayed, Ordering::Relaxed);
    drop(replay);

    let mut follower = Follower::new(Arc::clone(session.ring()), replay_to);
    let end = loop {
        if !attached.is_current() {
            break End::Superseded;
        }
        if *shutdown.borrow() {
            break End::Shutdown;
        }
        tokio::select! {
            wake = transport.wake() => match wake {
                Wake::Gone => return,
                Wake::Idle => {
                    if transport.keepalive().await.is_err() {
                        return;
                    }
                }
            },
            _ = changed.changed() => {}
            _ = shutdown.changed() => {}
            next = std::future::poll_fn(|cx| follower.poll_next(cx)) => match next {
                Ok(events) => {
                    let Some(last) = events.last() else { continue };
                    session.record_sent(last.seq);
                    if transport.send_events(epoch, &events).await.is_err() {
                        return;
                    }
                    metrics.events_streamed.fetch_add(events.len() as u64, Ordering::Relaxed);
                }
                Err(ReplayError::Gap(gap)) => {
                    metrics.lapped_readers.fetch_add(1, Ordering::Relaxed);
                    session.gap_reported(gap.first_retained);
                    transport.send_gap(&Refusal::from(gap)).await;
                    return;
                }
                // A follower never reads past the watermark.
                Err(ReplayError::Ahead { .. }) => return,
            },
        }
    };
    transport.end(end).await;
}

/// The ID of an event of this session, as the wire spells it.
pub(crate) fn event_id(epoch: u64, event: &Event) -> EventId {
    EventId {
        epoch,
        seq: event.seq,
    }
}
