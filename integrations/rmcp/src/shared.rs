//! The shared store: rmcp streams kept in the history tier that
//! `gapless-server --redis` uses (`gapless-history`), so that any instance
//! of an MCP server replays any stream.
//!
//! **Storing** (on the instance that runs the request): every event of a
//! request stream is appended to the stream's log in Redis before
//! `store_event` returns — Redis assigns its seq, under the epoch of the
//! stream's local ring — and then written to that ring, so that replays
//! on this instance read memory, with the same ids. A stream's log is
//! created with its first event, keyed by the stream's random
//! [`StreamKey`]; its response marks it complete (`complete.lua`): its keys
//! expire [`completed_grace`](crate::StreamLimits::completed_grace) later,
//! and every log expires after [`idle`](crate::StreamLimits::idle) without
//! an append. If Redis cannot take an event, `store_event` fails (rmcp
//! then ends the request's stream): an id is handed out only for an event
//! every instance can replay.
//!
//! **Replaying** (on an instance that does not hold the stream's ring): the
//! events after the cursor are read from Redis in pages, then the live
//! ones as the storing instance appends them, until the request's
//! response. A replay waiting for the next event reads the log again when
//! an append is announced on the log's channel ([`Notifier`]) and, since
//! announcements are at most once, at least every
//! [`DEFAULT_FOLLOW_POLL`] (or the store's
//! [`with_follow_poll`](crate::GaplessEventStore::with_follow_poll)): a
//! lost announcement delays an event, never loses it. A cursor whose
//! events Redis trimmed gets `gap_not_covered`, one of a log Redis does not
//! hold (expired, or never stored) or of another epoch gets
//! `foreign_cursor`: the same signals as on the storing instance.
//!
//! A replay never ends silently while its client listens: after the
//! response, or with a signal, or — when Redis does not answer — with a
//! warning logged (`tracing`, with the stream key's tag) and the end of the
//! stream after the events sent, so the client resumes with the last id it
//! got and nothing is skipped. A stream whose log did not grow for the
//! [`idle`](crate::StreamLimits::idle) period (its instance stopped, or
//! the request was abandoned) is one the store would have freed: the
//! replay then ends with `foreign_cursor`, rather than wait for ever (its
//! own reads would keep the log from expiring).
//!
//! Standalone streams (`"{session}:common"`) stay in this process: they
//! belong to a stateful rmcp session, which only the instance that holds
//! it serves.

use crate::id::{StoreEventId, StreamKey};
use crate::record::{self, Record};
use crate::signal::{Reason, Signal};
use crate::store_error::StoreError;
use crate::stream::{is_terminal, StreamEntry};
use bytes::Bytes;
use futures_core::Stream;
use gapless::{Coverage, EmitError, EventId};
use gapless_history::notify::Notifier;
use gapless_history::{
    History, HistoryConfig, HistoryError, Known, LogId, Meta, RedisHistory, Snapshot,
};
use rmcp::model::{RequestId, ServerJsonRpcMessage, ServerNotification};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Payload bytes read from Redis per page of a replay.
const PAGE_BYTES: usize = gapless_history::READ_BYTES;

/// Reads of one page tried at most, while Redis is unavailable.
const READ_ATTEMPTS: u32 = 3;

/// Replayed messages buffered ahead of the client, per replay.
const AHEAD: usize = 64;

/// The deadline of every Redis call, unless the configuration says
/// otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

/// How often a replay waiting for a stream's next event reads the log even
/// without an announcement, unless the store says otherwise
/// ([`with_follow_poll`](crate::GaplessEventStore::with_follow_poll)).
pub const DEFAULT_FOLLOW_POLL: Duration = Duration::from_secs(2);

/// The history tier a shared store writes to and replays from: the Redis
/// logs of its request streams, reached over one multiplexed Redis
/// connection for every call and one pub/sub connection for every stream
/// followed live, per process.
pub(crate) struct SharedHistory {
    history: RedisHistory,
    notifier: Arc<Notifier>,
    /// The logs' idle period: a replay ends once its log did not grow for
    /// this long.
    idle: Duration,
}

/// Why [`GaplessEventStore::store_shared`](crate::GaplessEventStore::store_shared)
/// failed: nothing was stored, and rmcp ends the request's stream.
#[derive(Debug)]
pub enum SharedStoreError {
    /// The operating system's random source failed to draw a new stream's
    /// key.
    RandomSource(gapless::id::RandomSourceError),
    /// Redis did not take the event (unreachable, or it refused).
    History(HistoryError),
    /// Redis moved the stream to a new epoch (it lost events it had
    /// acknowledged, see `gapless-history`): the stream cannot continue
    /// under the ids already handed out, and a resume with one of them
    /// gets `foreign_cursor`.
    EpochMoved {
        /// The stream's epoch so far.
        was: u64,
        /// The epoch Redis continues it under.
        now: u64,
    },
    /// Redis gave the event another seq than the stream's ring here: an
    /// earlier append of this stream that failed here (a timeout) was
    /// applied in Redis after all, or the ring took an event Redis did not
    /// (written through [`GaplessEventStore::ring`](crate::GaplessEventStore::ring)
    /// while the append was under way). The stream cannot continue under
    /// the ids already handed out: its ring here is dropped, and a resume
    /// gets what Redis holds.
    OutOfStep {
        /// The seq the ring gives (or would give) the event.
        expected: u64,
        /// The seq Redis gave.
        got: u64,
    },
    /// The stream's ring here refused the event (an emit error this store
    /// does not expect); if Redis took it, the ring is dropped and a resume
    /// gets what Redis holds.
    Ring(EmitError),
}

impl From<StoreError> for SharedStoreError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::RandomSource(error) => Self::RandomSource(error),
            StoreError::Ring(error) => Self::Ring(error),
            StoreError::OutOfStep { expected, got } => Self::OutOfStep { expected, got },
        }
    }
}

impl std::fmt::Display for SharedStoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::RandomSource(error) => write!(f, "cannot draw a stream key: {error}"),
            Self::History(error) => write!(f, "the event was not stored: {error}"),
            Self::EpochMoved { was, now } => write!(
                f,
                "the shared history lost events of this stream: epoch {was:016x} continues as {now:016x}"
            ),
            Self::OutOfStep { expected, got } => write!(
                f,
                "the shared history gave this stream's event seq {got}, not {expected} as its ring here: the stream cannot go on under the ids handed out"
            ),
            Self::Ring(error) => write!(f, "the stream's ring did not take the event: {error}"),
        }
    }
}

impl std::error::Error for SharedStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::RandomSource(error) => Some(error),
            Self::History(error) => Some(error),
            Self::Ring(error) => Some(error),
            Self::EpochMoved { .. } | Self::OutOfStep { .. } => None,
        }
    }
}

impl SharedHistory {
    /// Connects to the history at `config`, and starts the announcement
    /// connection.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub(crate) async fn connect(config: HistoryConfig) -> Result<Self, HistoryError> {
        let (timeout, idle) = (config.timeout, config.idle);
        let history = RedisHistory::connect(config).await?;
        let notifier = Notifier::start(history.client(), timeout);
        Ok(Self {
            history,
            notifier,
            idle,
        })
    }

    /// Stores `payload` (at most the stream's configured `max_payload`) as
    /// the next event of `entry`'s stream: its log is created first if it
    /// is new, the event appended to it (Redis gives the seq) and then
    /// written to the stream's ring; `parsed` is the message it encodes.
    /// A response or error marks the log complete, to expire after
    /// `grace`. Returns the seq.
    ///
    /// # Errors
    /// [`SharedStoreError`]: no id is handed out for the event. For
    /// `EpochMoved`, `OutOfStep` and `Ring` the caller drops the stream's
    /// ring.
    pub(crate) async fn store(
        &self,
        entry: &StreamEntry,
        payload: &[u8],
        parsed: Option<&Arc<ServerJsonRpcMessage>>,
        grace: Duration,
    ) -> Result<u64, SharedStoreError> {
        let log = LogId::from_bytes(entry.key.to_bytes());
        let _order = entry.shared.appending.lock().await;
        entry
            .shared
            .created
            .get_or_try_init(|| async {
                match self.history.create(&log, entry.epoch(), &Meta::new()).await {
                    Ok(true) => Ok(()),
                    // 128 random bits that name another stream's log.
                    Ok(false) => Err(HistoryError::Corrupt(format!(
                        "the log of new stream {:?} exists already",
                        entry.key
                    ))),
                    Err(error) => Err(error),
                }
            })
            .await
            .map_err(SharedStoreError::History)?;
        let ring = entry.ring();
        let known = Known {
            epoch: ring.epoch(),
            published: ring.published(),
        };
        let (epoch, first) = self
            .history
            .append(
                &log,
                known,
                &[Bytes::copy_from_slice(payload)],
                tokio::time::Instant::now() + self.history.config().timeout,
            )
            .await
            .map_err(SharedStoreError::History)?;
        let expected = known.published + 1;
        if epoch != known.epoch {
            return Err(SharedStoreError::EpochMoved {
                was: known.epoch,
                now: epoch,
            });
        }
        if first != expected {
            return Err(SharedStoreError::OutOfStep {
                expected,
                got: first,
            });
        }
        // Redis holds the event at `first`: the ring must too, or the id
        // would name different events here and on other instances. (A
        // record within the configured ring's `max_payload`, the caller's
        // check, fits; the ring is written only under `appending`, but
        // for writers through `GaplessEventStore::ring`.)
        let seq = entry.emit(payload).map_err(SharedStoreError::Ring)?;
        if seq != first {
            return Err(SharedStoreError::OutOfStep {
                expected: seq,
                got: first,
            });
        }
        if let Some(message) = parsed {
            entry.remember(seq, payload.len(), message);
            if is_terminal(message) {
                entry.stored_terminal(seq);
                // Best effort: a log that is not marked expires when idle.
                if let Err(error) = self.history.complete(&log, grace).await {
                    tracing::warn!(
                        stream = %log.tag(),
                        %error,
                        "the finished stream is not marked complete in the shared history; it expires when idle"
                    );
                }
            }
        }
        Ok(seq)
    }

    /// A replay of the stream `id` names, strictly after it, from the
    /// history: the events, then the live ones to the response, or a
    /// signal. `last_event_id` is `id` as the client sent it; while it
    /// waits, the replay reads the log at least every `poll`.
    pub(crate) fn replay(
        self: &Arc<Self>,
        id: StoreEventId,
        last_event_id: &str,
        poll: Duration,
    ) -> RemoteReplay {
        let (sender, receiver) = mpsc::channel(AHEAD);
        let replay = Remote {
            shared: Arc::clone(self),
            key: id.key,
            log: LogId::from_bytes(id.key.to_bytes()),
            epoch: id.event.epoch,
            after: id.event.seq,
            last_id: last_event_id.to_owned(),
            request_id: None,
            poll,
            published: 0,
            grew: Instant::now(),
            sender,
        };
        tokio::spawn(replay.run());
        RemoteReplay { receiver }
    }
}

/// A replay served from the shared history (what a replay task sends):
/// the stream a resume of a stream another instance stored gets.
pub struct RemoteReplay {
    receiver: mpsc::Receiver<ServerSseMessage>,
}

impl Stream for RemoteReplay {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.receiver.poll_recv(cx)
    }
}

/// One replay from the shared history, run as a task of its own: it ends
/// when the client goes away (its [`RemoteReplay`] is dropped), after the
/// request's response, after a signal, or with a warning logged when Redis
/// does not answer.
struct Remote {
    shared: Arc<SharedHistory>,
    key: StreamKey,
    log: LogId,
    /// The cursor's epoch: the stream's, or the cursor is foreign.
    epoch: u64,
    /// The last seq sent (at first, the cursor's).
    after: u64,
    /// The id of the last event sent (at first, the cursor).
    last_id: String,
    /// The affected request's id, once an event read tells it.
    request_id: Option<RequestId>,
    /// The longest wait between two reads of the log.
    poll: Duration,
    /// The highest `published` read from the log.
    published: u64,
    /// When the log was last seen to grow (at first, the replay's start).
    grew: Instant,
    sender: mpsc::Sender<ServerSseMessage>,
}

/// What a replay does after a page.
enum Next {
    /// Read the next page now.
    Read,
    /// Wait for an append.
    Wait,
    /// Done: the response was sent, or a signal, or the client left.
    End,
}

impl Remote {
    async fn run(mut self) {
        // Followed before the first read: nothing appended after it and
        // announced is missed (the first change is the subscription's
        // confirmation); what is not announced is read at the next poll.
        let mut followed = self.shared.notifier.follow(self.log);
        let mut announced = true;
        let mut first = true;
        loop {
            // The first read starts at the cursor's own event: a cursor
            // that is the response ends the replay at once.
            let from = if first {
                self.after.saturating_sub(1)
            } else {
                self.after
            };
            let snapshot = match self.read(from).await {
                Ok(snapshot) => snapshot,
                Err(error) => {
                    // End after what was sent: the client resumes with the
                    // last id it got (on any instance), nothing skipped.
                    tracing::warn!(
                        stream = %self.key.tag(),
                        after = self.after,
                        %error,
                        "a replay from the shared history ends: Redis did not answer"
                    );
                    return;
                }
            };
            if let Some(snapshot) = &snapshot {
                if snapshot.published > self.published {
                    self.published = snapshot.published;
                    self.grew = Instant::now();
                }
            }
            let next = self.page(snapshot, first).await;
            first = false;
            match next {
                Next::Read => continue,
                Next::End => return,
                Next::Wait => {}
            }
            let quiet = self.grew.elapsed();
            if quiet >= self.shared.idle {
                self.abandoned().await;
                return;
            }
            let wait = self.poll.min(self.shared.idle - quiet);
            tokio::select! {
                // `None` only once the notifier is gone: polls only, then.
                change = followed.changed(), if announced => announced = change.is_some(),
                () = tokio::time::sleep(wait) => {}
                () = self.sender.closed() => return,
            }
        }
    }

    /// The log did not grow for the idle period: the storing instance
    /// stopped, or the request was abandoned. The store frees such a stream
    /// (a resume then gets `foreign_cursor`); say so now rather than keep
    /// the client waiting for a response that will not come.
    async fn abandoned(&mut self) {
        let detail = format!(
            "the stream stored nothing for {:?} (its instance stopped, or the request was abandoned): it is freed",
            self.shared.idle
        );
        let mut signal = self.foreign(&detail);
        signal.request_id = self.request_id.clone();
        self.signal(signal).await;
    }

    /// The log after seq `from`: a read that meets a broken connection (a
    /// restarted Redis) is tried again on the reconnected one, up to
    /// [`READ_ATTEMPTS`] in all, each within the history's deadline.
    async fn read(&self, from: u64) -> Result<Option<Snapshot>, HistoryError> {
        let mut attempt = 1;
        loop {
            match self.shared.history.after(&self.log, from, PAGE_BYTES).await {
                Err(HistoryError::Unavailable(_)) if attempt < READ_ATTEMPTS => attempt += 1,
                result => return result,
            }
        }
    }

    /// Sends what a page of the log holds after `self.after`.
    async fn page(&mut self, snapshot: Option<Snapshot>, first: bool) -> Next {
        let Some(snapshot) = snapshot else {
            return self
                .signal(self.foreign(
                    "the cursor names a stream no instance holds (expired, removed, or never stored here)",
                ))
                .await;
        };
        if snapshot.epoch != self.epoch {
            let detail = format!(
                "the cursor is from another incarnation of the stream (epoch {:016x}, now {:016x})",
                self.epoch, snapshot.epoch
            );
            return self.signal(self.foreign(&detail)).await;
        }
        // The ring's rule, on what Redis retains.
        match Coverage::of_retained(self.after, snapshot.first_retained, snapshot.published) {
            Coverage::Covered { .. } => self.learn(&snapshot.events),
            Coverage::Ahead { cursor, published } => {
                return self
                    .signal(Signal::ahead(cursor, published, &self.last_id))
                    .await;
            }
            Coverage::Gap(gap) => {
                self.learn(&snapshot.events);
                let mut signal = Signal::gap(&gap, &self.last_id);
                signal.request_id = self.request_id.clone();
                return self.signal(signal).await;
            }
        }
        let last_read = snapshot.events.last().map(|(seq, _)| *seq);
        for (seq, payload) in snapshot.events {
            if seq <= self.after {
                // The cursor's own event, read to see whether it ended the
                // stream.
                if first && seq == self.after && ends_stream(&payload) {
                    return Next::End;
                }
                continue;
            }
            let id = StoreEventId {
                key: self.key,
                event: EventId {
                    epoch: self.epoch,
                    seq,
                },
            }
            .to_string();
            let item = match record::decode(&payload) {
                Record::Message(json) => {
                    match serde_json::from_slice::<ServerJsonRpcMessage>(json) {
                        Ok(message) => ServerSseMessage::new(id.clone(), message),
                        Err(error) => {
                            let why = format!("was stored but does not parse back ({error})");
                            return self.lost(seq, json.len() as u64, &why).await;
                        }
                    }
                }
                Record::Marker { retry } => {
                    let mut item = ServerSseMessage::default();
                    item.event_id = Some(id.clone());
                    item.retry = retry;
                    item
                }
                Record::Lost { bytes } => {
                    let why = format!(
                        "was larger than the ring holds ({bytes} bytes) and was not stored"
                    );
                    return self.lost(seq, bytes, &why).await;
                }
                // Never appended to a log (a record of this process's
                // rings): reported, never skipped.
                Record::Closed | Record::Moved => {
                    let why = "is not an event this store appends";
                    return self.lost(seq, payload.len() as u64, why).await;
                }
            };
            let terminal = item.message.as_deref().is_some_and(is_terminal);
            if self.sender.send(item).await.is_err() {
                return Next::End;
            }
            self.after = seq;
            self.last_id = id;
            if terminal {
                return Next::End;
            }
        }
        match last_read {
            Some(last) if last < snapshot.published => Next::Read,
            _ => Next::Wait,
        }
    }

    fn foreign(&self, detail: &str) -> Signal {
        let mut signal = Signal::new(Reason::ForeignCursor, &self.last_id, detail.to_owned());
        signal.cursor = Some(self.after);
        signal
    }

    async fn lost(&mut self, seq: u64, bytes: u64, why: &str) -> Next {
        let mut signal = Signal::new(
            Reason::LostEvent,
            &self.last_id,
            format!("event {seq} after cursor {} {why}", self.after),
        );
        signal.cursor = Some(self.after);
        signal.lost = Some((seq, bytes));
        signal.request_id = self.request_id.clone();
        self.signal(signal).await
    }

    async fn signal(&mut self, signal: Signal) -> Next {
        for message in signal.into_messages(&self.last_id) {
            if self.sender.send(message).await.is_err() {
                break;
            }
        }
        Next::End
    }

    /// Learns the request's id from `events` as the local store does: its
    /// response's or error's id, else its first progress token.
    fn learn(&mut self, events: &[(u64, Bytes)]) {
        let mut progress = None;
        for (_, payload) in events {
            let Record::Message(json) = record::decode(payload) else {
                continue;
            };
            match serde_json::from_slice::<ServerJsonRpcMessage>(json) {
                Ok(ServerJsonRpcMessage::Response(response)) => {
                    self.request_id = Some(response.id);
                    return;
                }
                Ok(ServerJsonRpcMessage::Error(error)) if error.id.is_some() => {
                    self.request_id = error.id;
                    return;
                }
                Ok(ServerJsonRpcMessage::Notification(notification)) if progress.is_none() => {
                    if let ServerNotification::ProgressNotification(note) =
                        notification.notification
                    {
                        progress = Some(note.params.progress_token.0);
                    }
                }
                _ => {}
            }
        }
        if self.request_id.is_none() {
            self.request_id = progress;
        }
    }
}

/// Whether a stored record is the message that ends its stream.
fn ends_stream(payload: &[u8]) -> bool {
    match record::decode(payload) {
        Record::Message(json) => serde_json::from_slice::<ServerJsonRpcMessage>(json)
            .is_ok_and(|message| is_terminal(&message)),
        _ => false,
    }
}
