//! Delivery: the one loop that feeds a session's events to a transport.
//!
//! Both transports run the same steps — write the first replay batch copied
//! at attach time, then follow the ring in bounded batches (the rest of the
//! replay, then live); account every event in `sent` *before* handing it
//! over; on a lap report the gap and end; end when the client goes away,
//! another transport supersedes this one, the session ends or the server
//! shuts down; close the connection when a write does not complete within
//! the write timeout — so they are written once, in [`deliver`], over the
//! [`Transport`] trait. [`sse`] and [`ws`] only say how bytes are framed,
//! how a stream is kept alive, and how it ends.

pub(crate) mod sse;
pub(crate) mod ws;

use crate::entry::Entry;
use crate::error::ApiError;
use crate::metrics::{Limit, Stage};
use crate::state::ServerState;
use gapless::session::{Attachment, Refusal, Session};
use gapless::{Event, EventId, Follower, ReplayError, SingleWriter};
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The most events copied out of the ring per write: a stalled client pins
/// at most one batch (plus its transport's bounded queue), not its whole
/// replay.
pub(crate) const BATCH_EVENTS: usize = 64;

/// The transport can take no more.
#[derive(Debug)]
pub(crate) enum Gone {
    /// The client went away.
    Client,
    /// The transport closed the connection because the client broke a
    /// limit (a message too big, a ping unanswered).
    Limit(Limit),
}

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
    /// The transport is done (see [`Gone`]).
    Gone(Gone),
    /// Time for a keepalive.
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

    /// Writes a keepalive (SSE: a comment; WebSocket: a ping, or a close
    /// when the last ping went unanswered).
    fn keepalive(&mut self) -> impl Future<Output = Result<(), Gone>> + Send;

    /// Ends a stream that is still writable.
    fn end(&mut self, why: End) -> impl Future<Output = ()> + Send;

    /// Closes the connection at once: a write did not complete in time.
    fn abort(&mut self);
}

/// One of a session's `max_streams_per_session` stream slots, held from
/// before the transport attaches until its delivery ends.
pub(crate) struct StreamSlot {
    entry: Arc<Entry>,
}

impl StreamSlot {
    /// Takes a slot on `entry`'s session.
    ///
    /// # Errors
    /// `429 too_many_streams` when all are taken (counted).
    pub(crate) fn take(state: &Arc<ServerState>, entry: &Arc<Entry>) -> Result<Self, ApiError> {
        let max = state.config.max_streams_per_session;
        if entry.streams.fetch_add(1, Ordering::AcqRel) >= max {
            entry.streams.fetch_sub(1, Ordering::AcqRel);
            state.metrics.tripped(Limit::StreamsPerSession);
            return Err(ApiError::TooManyStreams);
        }
        // A stream reads the local ring: on an instance that does not own
        // the session, the ring must follow the shared history.
        state.follow_history(entry);
        Ok(Self {
            entry: Arc::clone(entry),
        })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.entry.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A transport attached to a session. Dropping it detaches the transport
/// (the session's `transport` becomes `none` unless another attached since),
/// restarts the session's idle clock, frees the stream slot and wakes the
/// session's other streams — on every path out of a handler or a stream
/// task, including an early return, a panic and the hard stop.
pub(crate) struct Attached {
    state: Arc<ServerState>,
    entry: Arc<Entry>,
    attachment: Attachment,
    /// With a shared history: the session's attach generation there when
    /// this transport attached (a newer one on any instance supersedes it).
    generation: Option<u64>,
    _slot: StreamSlot,
}

impl Attached {
    /// Takes over `attachment`, just granted by the session in `slot`, and
    /// tells the session's other streams that the attachment changed.
    pub(crate) fn new(
        state: Arc<ServerState>,
        slot: StreamSlot,
        attachment: Attachment,
        generation: Option<u64>,
    ) -> Self {
        let entry = Arc::clone(&slot.entry);
        entry.notify_changed();
        Self {
            state,
            entry,
            attachment,
            generation,
            _slot: slot,
        }
    }

    fn session(&self) -> &Session<SingleWriter> {
        &self.entry.session
    }

    fn is_current(&self) -> bool {
        self.entry.session.is_current(&self.attachment)
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        self.entry.session.detach(&self.attachment);
        self.state.touch(&self.entry);
        self.entry.notify_changed();
    }
}

/// The start of a replay, copied when the transport attached.
pub(crate) struct Replay {
    /// `cursor + 1 ..`, at most [`BATCH_EVENTS`] of them.
    first: Vec<Event>,
    /// The cursor the client gave.
    cursor: u64,
    /// The published watermark when the transport attached: the replay is
    /// `cursor + 1 ..= replay_to`, live events follow it.
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

/// Copies the first batch of `cursor + 1 ..= replay_to` for a transport just
/// attached, or reports the gap evicted since the cursor was checked: the
/// report is accounted (`sent` rises to `first_retained - 1`, so the client
/// may continue from there) and counted under `stage`. A gap evicted later,
/// while the rest of the replay is written, ends the stream with a gap
/// report like any lap.
pub(crate) fn copy_replay(
    state: &ServerState,
    attached: &Attached,
    cursor: u64,
    replay_to: u64,
    stage: Stage,
) -> Result<Replay, NotReplayed> {
    let session = attached.session();
    let last = replay_to.min(cursor.saturating_add(BATCH_EVENTS as u64));
    match session.ring().replay_range(cursor, last) {
        Ok(first) => Ok(Replay {
            first,
            cursor,
            replay_to,
        }),
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
/// A write that does not complete within the write timeout closes the
/// connection; the client resumes with its own cursor.
pub(crate) async fn deliver(
    state: Arc<ServerState>,
    attached: Attached,
    replay: Replay,
    mut transport: impl Transport,
) {
    let session = attached.session();
    let epoch = session.epoch();
    let mut changed = attached.entry.changed.subscribe();
    let mut shutdown = state.lifecycle.shutdown.clone();
    let metrics = &state.metrics;
    let write_timeout = state.config.write_timeout;
    let Replay {
        first,
        cursor,
        replay_to,
    } = replay;
    // `first` is `cursor + 1 ..` without a hole: the follower goes on after it.
    let after_first = first.last().map_or(cursor, |event| event.seq);
    let mut follower =
        Follower::new(Arc::clone(session.ring()), after_first).with_max_batch(BATCH_EVENTS);
    let mut pending = Some(first);
    let gone = |gone: Gone| {
        if let Gone::Limit(limit) = gone {
            metrics.tripped(limit);
        }
    };

    let end = loop {
        if !attached.is_current() {
            break End::Superseded;
        }
        if *shutdown.borrow() {
            break End::Shutdown;
        }
        let events = if let Some(first) = pending.take() {
            Ok(first)
        } else {
            tokio::select! {
                wake = transport.wake() => {
                    match wake {
                        Wake::Gone(why) => return gone(why),
                        Wake::Idle => {
                            // An open stream is activity: with a shared
                            // history it keeps the session's keys from
                            // expiring, and learns whether a transport
                            // attached on another instance since.
                            match state.persist_sent(&attached.entry, None, attached.generation).await {
                                Ok(true) => {}
                                Ok(false) => break End::Superseded,
                                Err(_) => {
                                    transport.abort();
                                    return;
                                }
                            }
                            match tokio::time::timeout(write_timeout, transport.keepalive()).await {
                                Ok(Ok(())) => continue,
                                Ok(Err(why)) => return gone(why),
                                Err(_) => {
                                    metrics.tripped(Limit::WriteTimeout);
                                    transport.abort();
                                    return;
                                }
                            }
                        }
                    }
                }
                _ = changed.changed() => continue,
                _ = shutdown.changed() => continue,
                next = std::future::poll_fn(|cx| follower.poll_next(cx)) => next,
            }
        };
        match events {
            Ok(events) => {
                let Some(last) = events.last().map(|e| e.seq) else {
                    continue;
                };
                // `sent` is recorded (with a shared history, there first)
                // before the bytes leave, so the client's cursor is
                // legitimate on every instance; a transport attached since
                // on any instance ends this stream; if Redis cannot record
                // it, the connection closes and the client resumes with its
                // own cursor.
                match state
                    .persist_sent(&attached.entry, Some(last), attached.generation)
                    .await
                {
                    Ok(true) => {}
                    Ok(false) => break End::Superseded,
                    Err(_) => {
                        transport.abort();
                        return;
                    }
                }
                match tokio::time::timeout(write_timeout, transport.send_events(epoch, &events))
                    .await
                {
                    Ok(Ok(())) => {}
                    Ok(Err(why)) => return gone(why),
                    Err(_) => {
                        metrics.tripped(Limit::WriteTimeout);
                        transport.abort();
                        return;
                    }
                }
                let replayed = events.iter().filter(|e| e.seq <= replay_to).count() as u64;
                metrics.events_replayed.inc_by(replayed);
                metrics
                    .events_streamed
                    .inc_by(events.len() as u64 - replayed);
            }
            Err(ReplayError::Gap(gap)) => {
                metrics.lapped_readers.inc();
                session.gap_reported(gap.first_retained);
                // The report lets the client continue from `first_retained -
                // 1`: recorded before it leaves, like `sent`.
                if state.persist_cursors(&attached.entry).await.is_err() {
                    transport.abort();
                    return;
                }
                let _ =
                    tokio::time::timeout(write_timeout, transport.send_gap(&Refusal::from(gap)))
                        .await;
                return;
            }
            // A follower never reads past the watermark.
            Err(ReplayError::Ahead { .. }) => return,
        }
    };
    let _ = tokio::time::timeout(write_timeout, transport.end(end)).await;
}

/// The ID of an event of this session, as the wire spells it.
pub(crate) fn event_id(epoch: u64, event: &Event) -> EventId {
    EventId {
        epoch,
        seq: event.seq,
    }
}

#[cfg(test)]
mod tests {
    use super::{Attached, StreamSlot};
    use crate::config::ServerConfig;
    use crate::state::AppState;
    use gapless::session::Transport;
    use gapless::EventId;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    /// A panic while a transport is attached (in a handler or a stream
    /// task) detaches it and frees its stream slot on the way out.
    #[test]
    fn a_panic_with_a_transport_attached_detaches_it() {
        let (_stop, on_stop) = tokio::sync::watch::channel(false);
        let AppState(state) = AppState::new(ServerConfig::default(), on_stop);
        let (_, entry) = state.create_session(None).expect("a session");
        let slot = StreamSlot::take(&state, &entry).expect("a slot");
        let cursor = EventId {
            epoch: entry.session.epoch(),
            seq: 0,
        };
        let (_, attachment) = entry.session.resume_sse(cursor).expect("attach");
        let attached = Attached::new(Arc::clone(&state), slot, attachment, None);
        assert_eq!(entry.session.state().transport, Transport::Sse);
        assert_eq!(entry.streams.load(Ordering::Acquire), 1);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _held = attached;
            panic!("a handler bug");
        }));
        assert!(unwound.is_err());
        assert_eq!(entry.session.state().transport, Transport::None);
        assert_eq!(entry.streams.load(Ordering::Acquire), 0);
    }
}
