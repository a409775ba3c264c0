//! [`ReplayStream`]: what a resume gets.

use crate::record::{self, Record};
use crate::signal::{Reason, Signal};
use crate::stream::{is_terminal, Held, Next, StreamEntry};
use futures_core::Stream;
use gapless::{Event, Follower, ReplayError, Ring};
use rmcp::model::ServerJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// Events copied from the ring per wake-up, at most: a replay of a large
/// ring holds a bounded copy.
const MAX_BATCH: usize = 64;

/// The stream a resume gets from [`GaplessEventStore`](crate::GaplessEventStore).
///
/// Either the events strictly after the cursor, each once and in order,
/// then the stream's live events as they are stored, ending right after the
/// stream's response or error (a JSON-RPC response or error message); or,
/// when that cannot be exact, the signal (a `notifications/message` and a
/// JSON-RPC error, see the crate docs) and then the end. A replay of the
/// standalone stream (which has no response) follows until the client goes
/// away or the stream is removed.
pub struct ReplayStream {
    state: State,
}

enum State {
    Follow(Box<Following>),
    Signal(VecDeque<ServerSseMessage>),
    Done,
}

struct Following {
    entry: Arc<StreamEntry>,
    /// Reads the stream's ring (below its window, or all of it in the
    /// direct mode); made again when its ring or cursor is not the
    /// replay's.
    follower: Option<Follower<Arc<Ring>>>,
    /// Copied from the ring or the window, not yet yielded.
    pending: VecDeque<Pending>,
    /// The id of the last event yielded, or the cursor: what a signal
    /// carries, so that a client resuming with it gets the same signal.
    last_id: String,
    last_seq: u64,
    /// The waker this replay last left in the stream's window: taken out
    /// when the replay is dropped, so that a client that resumes and goes
    /// away again and again on an idle stream leaves nothing behind.
    registered: Option<Waker>,
}

impl Drop for Following {
    fn drop(&mut self) {
        if let Some(waker) = self.registered.take() {
            self.entry.forget_waker(&waker);
        }
    }
}

/// An event a replay copied and has not yielded yet.
enum Pending {
    /// From the ring: a record.
    Ring(Event),
    /// From the window: the event at this seq, as rmcp handed it over.
    Held(u64, Held),
}

impl std::fmt::Debug for ReplayStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.state {
            State::Follow(following) => f
                .debug_struct("ReplayStream::Follow")
                .field("key", &following.entry.key)
                .field("last_seq", &following.last_seq)
                .field("pending", &following.pending.len())
                .finish(),
            State::Signal(messages) => f
                .debug_struct("ReplayStream::Signal")
                .field("messages", &messages.len())
                .finish(),
            State::Done => f.write_str("ReplayStream::Done"),
        }
    }
}

impl ReplayStream {
    pub(crate) fn signal(signal: Signal, event_id: &str) -> Self {
        Self {
            state: State::Signal(signal.into_messages(event_id).into()),
        }
    }

    pub(crate) fn done() -> Self {
        Self { state: State::Done }
    }

    pub(crate) fn follow(entry: Arc<StreamEntry>, cursor: u64, last_id: String) -> Self {
        Self {
            state: State::Follow(Box::new(Following {
                entry,
                follower: None,
                pending: VecDeque::new(),
                last_id,
                last_seq: cursor,
                registered: None,
            })),
        }
    }
}

impl Following {
    fn signal(&self, mut signal: Signal) -> State {
        signal.request_id = self.entry.request_id();
        if signal.cursor.is_none() {
            signal.cursor = Some(self.last_seq);
        }
        State::Signal(signal.into_messages(&self.last_id).into())
    }

    fn lost(&self, seq: u64, bytes: u64, why: &str) -> State {
        let mut signal = Signal::new(
            Reason::LostEvent,
            &self.last_id,
            format!("event {seq} after cursor {} {why}", self.last_seq),
        );
        signal.lost = Some((seq, bytes));
        self.signal(signal)
    }

    /// What the next copied event turns into: an item, nothing (the
    /// stream moved rings), or a new state.
    fn next(&mut self, event: Event) -> Result<Option<ServerSseMessage>, State> {
        let id = self.entry.event_id(event.seq);
        let record = record::decode(&event.payload);
        // A recent message is kept parsed: no JSON to parse back. Only for
        // a message record: the `Moved` record of a stream's first ring has
        // the seq its next message got in the grown ring.
        if let Some(message) = matches!(record, Record::Message(_))
            .then(|| self.entry.recall(event.seq))
            .flatten()
        {
            self.last_seq = event.seq;
            self.last_id.clone_from(&id);
            if is_terminal(&message) {
                self.pending.clear();
            }
            let mut item = ServerSseMessage::default();
            item.event_id = Some(id);
            item.message = Some(message);
            return Ok(Some(item));
        }
        match record {
            Record::Message(json) => match serde_json::from_slice::<ServerJsonRpcMessage>(json) {
                Ok(message) => {
                    let terminal = is_terminal(&message);
                    self.last_seq = event.seq;
                    self.last_id.clone_from(&id);
                    let item = ServerSseMessage::new(id, message);
                    if terminal {
                        // Yield it, then end (the caller sees `Done`).
                        self.pending.clear();
                    }
                    Ok(Some(item))
                }
                Err(error) => Err(self.lost(
                    event.seq,
                    json.len() as u64,
                    &format!("was stored but does not parse back ({error})"),
                )),
            },
            Record::Marker { retry } => {
                self.last_seq = event.seq;
                self.last_id.clone_from(&id);
                let mut item = ServerSseMessage::default();
                item.event_id = Some(id);
                item.retry = retry;
                Ok(Some(item))
            }
            Record::Lost { bytes } => Err(self.lost(
                event.seq,
                bytes,
                &format!("was larger than the ring holds ({bytes} bytes) and was not stored"),
            )),
            Record::Closed => Err(State::Done),
            Record::Moved => {
                // The stream's events from here on are in its grown ring,
                // at the same seqs (see `Inner::emit`): the next refill
                // follows the stream's ring now.
                self.follower = None;
                self.pending.clear();
                Ok(None)
            }
        }
    }

    /// The window's event at `seq`, as an item.
    fn held(&mut self, seq: u64, held: Held) -> ServerSseMessage {
        let id = self.entry.event_id(seq);
        self.last_seq = seq;
        self.last_id.clone_from(&id);
        let mut item = ServerSseMessage::default();
        item.event_id = Some(id);
        match held {
            Held::Message(message) => {
                if is_terminal(&message) {
                    // Yield it, then end (the caller sees `Done`).
                    self.pending.clear();
                }
                item.message = Some(message);
            }
            Held::Marker(retry) => item.retry = retry,
        }
        item
    }

    /// The follower of `ring` at the replay's position: the one it has if
    /// that reads `ring` from there, else a new one.
    fn follower(&mut self, ring: Arc<Ring>) -> &mut Follower<Arc<Ring>> {
        let last_seq = self.last_seq;
        let current = self.follower.as_ref().is_some_and(|follower| {
            follower.cursor() == last_seq && std::ptr::eq(follower.ring(), &*ring)
        });
        if !current {
            self.follower = None;
        }
        self.follower
            .get_or_insert_with(|| Follower::new(ring, last_seq).with_max_batch(MAX_BATCH))
    }

    /// Copies what follows the last event yielded into `pending`: from the
    /// ring below the window, from the window, or (direct mode) from the
    /// ring as it is written. `Ready(None)`: copied; `Ready(Some(state))`:
    /// the replay goes on as `state` (the end, or a signal); `Pending`:
    /// nothing yet, `cx` is woken by the next event.
    fn refill(&mut self, cx: &mut Context<'_>) -> Poll<Option<State>> {
        let copied = match self.entry.next_after(self.last_seq, MAX_BATCH, cx.waker()) {
            Next::Held(events) => {
                self.pending.extend(
                    events
                        .into_iter()
                        .map(|(seq, held)| Pending::Held(seq, held)),
                );
                return Poll::Ready(None);
            }
            Next::Wait => {
                let waker = cx.waker();
                if !self
                    .registered
                    .as_ref()
                    .is_some_and(|known| known.will_wake(waker))
                {
                    self.registered = Some(waker.clone());
                }
                return Poll::Pending;
            }
            Next::Closed => return Poll::Ready(Some(State::Done)),
            Next::Missing => return Poll::Ready(Some(self.missing())),
            Next::Ring(ring) => match self.follower(ring).try_next() {
                // Below the window the ring holds every seq: nothing there
                // is an event that was not written.
                Ok(events) if events.is_empty() => return Poll::Ready(Some(self.missing())),
                copied => copied,
            },
            Next::Direct(ring) => match self.follower(ring).poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(copied) => copied,
            },
        };
        match copied {
            Ok(events) => {
                self.pending.extend(events.into_iter().map(Pending::Ring));
                Poll::Ready(None)
            }
            Err(ReplayError::Gap(gap)) => {
                let signal = Signal::gap(&gap, &self.last_id);
                Poll::Ready(Some(self.signal(signal)))
            }
            Err(ReplayError::Ahead { cursor, published }) => {
                let signal = Signal::ahead(cursor, published, &self.last_id);
                Poll::Ready(Some(self.signal(signal)))
            }
        }
    }

    /// The next event is in neither the window nor the ring (its write to
    /// the ring failed): the lost-event signal, never a skip.
    fn missing(&self) -> State {
        self.lost(
            self.last_seq + 1,
            0,
            "left the stream's window but is not in its ring",
        )
    }
}

impl Stream for ReplayStream {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            match &mut this.state {
                State::Done => return Poll::Ready(None),
                State::Signal(messages) => match messages.pop_front() {
                    Some(message) => return Poll::Ready(Some(message)),
                    None => this.state = State::Done,
                },
                State::Follow(following) => {
                    if let Some(pending) = following.pending.pop_front() {
                        let next = match pending {
                            Pending::Ring(event) => following.next(event),
                            Pending::Held(seq, held) => Ok(Some(following.held(seq, held))),
                        };
                        match next {
                            Ok(None) => continue,
                            Ok(Some(item)) => {
                                if item.message.as_deref().is_some_and(is_terminal) {
                                    this.state = State::Done;
                                }
                                return Poll::Ready(Some(item));
                            }
                            Err(state) => {
                                this.state = state;
                                continue;
                            }
                        }
                    }
                    match following.refill(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(None) => {}
                        Poll::Ready(Some(state)) => this.state = state,
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::StreamKey;
    use crate::stream::{StreamKind, DEFAULT_WINDOW};
    use futures_core::Stream;

    /// A replay dropped while it waits takes its waker out of the window.
    /// Mutation: no `Drop` for `Following` leaves one waker per dropped
    /// replay until the stream's next event.
    #[test]
    fn a_dropped_replay_leaves_no_waker_behind() {
        let key = StreamKey::random().expect("the OS random source");
        let kind = StreamKind::Standalone;
        let config = gapless::Config::default();
        let entry = Arc::new(StreamEntry::new(
            key,
            "s:common".to_owned(),
            kind,
            config,
            0,
            DEFAULT_WINDOW,
        ));
        entry.push(Held::Marker(None)).expect("stored");
        let waker = Waker::noop();
        for _ in 0..100 {
            let mut replay = ReplayStream::follow(Arc::clone(&entry), 1, entry.event_id(1));
            let polled = Pin::new(&mut replay).poll_next(&mut Context::from_waker(waker));
            assert!(polled.is_pending());
            assert_eq!(entry.waiting(), 1);
            drop(replay);
            assert_eq!(entry.waiting(), 0);
        }
    }
}
