//! [`ReplayStream`]: what a resume gets.

use crate::record::{self, Record};
use crate::signal::{Reason, Signal};
use crate::stream::{is_terminal, StreamEntry};
use futures_core::Stream;
use gapless::{Event, Follower, ReplayError, Ring};
use rmcp::model::ServerJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

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
    follower: Follower<Arc<Ring>>,
    /// Copied from the ring, not yet yielded.
    pending: VecDeque<Event>,
    /// The id of the last event yielded, or the cursor: what a signal
    /// carries, so that a client resuming with it gets the same signal.
    last_id: String,
    last_seq: u64,
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
        let follower = Follower::new(entry.ring(), cursor).with_max_batch(MAX_BATCH);
        Self {
            state: State::Follow(Box::new(Following {
                entry,
                follower,
                pending: VecDeque::new(),
                last_id,
                last_seq: cursor,
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
                // at the same seqs (see `StreamEntry::emit`).
                self.follower =
                    Follower::new(self.entry.ring(), self.last_seq).with_max_batch(MAX_BATCH);
                self.pending.clear();
                Ok(None)
            }
        }
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
                    if let Some(event) = following.pending.pop_front() {
                        match following.next(event) {
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
                    match following.follower.poll_next(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Ok(events)) => following.pending.extend(events),
                        Poll::Ready(Err(ReplayError::Gap(gap))) => {
                            let signal = Signal::gap(&gap, &following.last_id);
                            this.state = following.signal(signal);
                        }
                        Poll::Ready(Err(ReplayError::Ahead { cursor, published })) => {
                            let signal = Signal::ahead(cursor, published, &following.last_id);
                            this.state = following.signal(signal);
                        }
                    }
                }
            }
        }
    }
}
