//! [`GaplessEventStore`]: rmcp's `EventStore` on gapless rings.

use crate::id::{StoreEventId, StreamKey};
use crate::record::{self, Record};
use crate::replay::ReplayStream;
use crate::signal::{Reason, Signal};
use crate::stream::{is_terminal, StreamEntry};
use gapless::id::RandomSourceError;
use gapless::{Config, ConfigError, Coverage, EmitError, Ring, Store};
use rmcp::model::ServerJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::{
    EventId, EventStore, EventStoreError, EventStream, ServerSseMessage,
};
use std::convert::Infallible;
use std::sync::Arc;

/// rmcp's [`EventStore`] on gapless: one ring per rmcp stream, replays that
/// are exact or say why not.
///
/// See the [crate docs](crate) for the event ids, the signal and how rings
/// are freed.
pub struct GaplessEventStore {
    config: Config,
    /// rmcp stream id → the stream's key.
    streams: Store<String, StreamKey>,
    /// Stream key → its ring and what the store learned.
    rings: Store<StreamKey, StreamEntry>,
}

impl std::fmt::Debug for GaplessEventStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GaplessEventStore")
            .field("config", &self.config)
            .field("streams", &self.rings.len())
            .finish()
    }
}

impl GaplessEventStore {
    /// A store whose every stream gets a ring sized by `config` (and, unless
    /// `config` fixes one, a fresh random epoch).
    ///
    /// # Errors
    /// [`ConfigError`] if `config` is outside gapless's ranges.
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        config.geometry()?;
        Ok(Self {
            config,
            streams: Store::default(),
            rings: Store::default(),
        })
    }

    /// The ring size each stream gets.
    pub fn config(&self) -> Config {
        self.config
    }

    /// How many streams hold a ring.
    pub fn stream_count(&self) -> usize {
        self.rings.len()
    }

    /// The ring of the rmcp stream `stream_id`, if it has one.
    pub fn ring(&self, stream_id: &str) -> Option<Arc<Ring>> {
        let key = self.streams.get(stream_id)?;
        self.rings.get(&*key).map(|entry| Arc::clone(&entry.ring))
    }

    /// Frees the ring of the rmcp stream `stream_id` (once replays still
    /// reading it end). Replays following it live end after the events they
    /// have; a later resume with one of its ids gets the `foreign_cursor`
    /// signal. Returns whether the stream had a ring.
    pub fn remove_stream(&self, stream_id: &str) -> bool {
        let Some(key) = self.streams.remove(stream_id) else {
            return false;
        };
        let Some(entry) = self.rings.remove(&*key) else {
            return false;
        };
        // Wakes and ends live followers (see `record`); cannot be too large.
        let _ = entry.ring.emit(record::CLOSED);
        true
    }

    /// Frees the rings of every stream of the rmcp session `session_id` that
    /// this store can attribute to it: its standalone stream
    /// (`"{session_id}:common"`). rmcp names request streams with a bare
    /// uuid, so a session's request streams are freed only through
    /// [`remove_stream`](Self::remove_stream) (see the crate docs). Returns
    /// how many were freed.
    pub fn remove_session(&self, session_id: &str) -> usize {
        usize::from(self.remove_stream(&format!("{session_id}:common")))
    }

    fn entry(&self, stream_id: &str) -> Result<Arc<StreamEntry>, RandomSourceError> {
        if let Some(key) = self.streams.get(stream_id) {
            if let Some(entry) = self.rings.get(&*key) {
                return Ok(entry);
            }
        }
        // A new stream's key: a failing OS random source is an error, never
        // a guessable key.
        let (key, _) = self
            .streams
            .get_or_try_insert_with(stream_id.to_owned(), StreamKey::random)?;
        let (entry, _) = infallible(self.rings.get_or_try_insert_with(*key, || {
            Ok(StreamEntry::new(*key, Arc::new(Ring::new(self.config))))
        }));
        Ok(entry)
    }

    /// Stores one event of rmcp stream `stream_id` and returns its id. A
    /// message larger than the ring is stored as a placeholder that a replay
    /// reports as lost (the live send still carries the message).
    ///
    /// # Errors
    /// [`RandomSourceError`] only if the stream is new and the OS random
    /// source fails to draw its key (nothing is stored).
    pub fn store(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<String, RandomSourceError> {
        let entry = self.entry(stream_id)?;
        let payload = match &event.message {
            Some(message) => {
                entry.learn(message);
                serde_json::to_vec(message.as_ref()).unwrap_or_else(|_| record::lost(0))
            }
            None => record::marker(event.retry),
        };
        let seq = match entry.ring.emit(&payload) {
            Ok(seq) => seq,
            // `emit` fails only for a payload over the ring's limit.
            Err(EmitError::TooLarge { len, .. }) => match entry.ring.emit(&record::lost(len)) {
                Ok(seq) => seq,
                // A placeholder is shorter than the smallest ring's payload
                // limit (`gapless::config::MIN_BYTES`).
                Err(error) => unreachable!("a placeholder always fits: {error}"),
            },
            Err(error) => unreachable!("a single emit is never a batch: {error}"),
        };
        Ok(entry.event_id(seq))
    }

    /// The events of the cursor's stream strictly after it, then the
    /// stream's live events until its response or error; or a signal. See
    /// [`ReplayStream`].
    pub fn replay(&self, last_event_id: &str) -> ReplayStream {
        let id: StoreEventId = match last_event_id.parse() {
            Ok(id) => id,
            Err(error) => {
                return ReplayStream::signal(
                    Signal::new(
                        Reason::MalformedCursor,
                        last_event_id,
                        format!("the cursor is not an event id of this server: {error}"),
                    ),
                    crate::signal::echo_id(last_event_id),
                )
            }
        };
        let cursor = id.event.seq;
        let foreign = |detail: String| {
            let mut signal = Signal::new(Reason::ForeignCursor, last_event_id, detail);
            signal.cursor = Some(cursor);
            ReplayStream::signal(signal, last_event_id)
        };
        let Some(entry) = self.rings.get(&id.key) else {
            return foreign(
                "the cursor names a stream this server does not hold (another server process, or a removed stream)"
                    .to_owned(),
            );
        };
        if entry.ring.epoch() != id.event.epoch {
            return foreign(format!(
                "the cursor is from another incarnation of the stream (epoch {:016x}, now {:016x})",
                id.event.epoch,
                entry.ring.epoch()
            ));
        }
        match entry.ring.coverage(cursor) {
            Coverage::Covered { .. } => {}
            Coverage::Ahead { published, .. } => {
                return foreign(format!(
                    "the cursor {cursor} is beyond what the stream published ({published})"
                ))
            }
            Coverage::Gap(gap) => {
                let mut signal = Signal::gap(&gap, last_event_id);
                signal.request_id = entry.request_id();
                return ReplayStream::signal(signal, last_event_id);
            }
        }
        // A resume after the stream's last event (its response): nothing
        // follows, and nothing ever will.
        if cursor > 0 {
            if let Ok(event) = entry.ring.read(cursor) {
                if let Record::Message(json) = record::decode(&event.payload) {
                    if serde_json::from_slice::<ServerJsonRpcMessage>(json)
                        .is_ok_and(|message| is_terminal(&message))
                    {
                        return ReplayStream::done();
                    }
                }
            }
        }
        ReplayStream::follow(entry, cursor, last_event_id.to_owned())
    }
}

fn infallible<T>(result: Result<T, Infallible>) -> T {
    match result {
        Ok(value) => value,
        Err(never) => match never {},
    }
}

#[async_trait::async_trait]
impl EventStore for GaplessEventStore {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<EventId, EventStoreError> {
        Ok(self.store(stream_id, event)?)
    }

    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        Ok(Box::pin(self.replay(last_event_id)))
    }
}
