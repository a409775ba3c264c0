//! rmcp's [`EventStore`] on a [`GaplessEventStore`]: in this process, or
//! with [`GaplessEventStore::with_history`] over the history tier that
//! several instances share ([`crate::shared`]).

use crate::id::StoreEventId;
use crate::record;
use crate::shared::{RemoteReplay, SharedHistory, SharedStoreError, DEFAULT_TIMEOUT};
use crate::stream::StreamKind;
use crate::GaplessEventStore;
use gapless_history::{HistoryConfig, HistoryError};
use rmcp::transport::streamable_http_server::session::{
    EventId, EventStore, EventStoreError, EventStream, ServerSseMessage,
};
use std::sync::Arc;
use std::time::Duration;

/// The shortest [`GaplessEventStore::with_follow_poll`] period.
const MIN_FOLLOW_POLL: Duration = Duration::from_millis(10);

impl GaplessEventStore {
    /// The history configuration this store's request streams need in the
    /// Redis at `url`: logs trimmed to the request rings' events and bytes,
    /// expiring after the limits' idle period, every call within
    /// [`DEFAULT_TIMEOUT`].
    pub fn history_config(&self, url: impl Into<String>) -> HistoryConfig {
        HistoryConfig {
            url: url.into(),
            cluster: false,
            timeout: DEFAULT_TIMEOUT,
            retention: self.config().requested_events(),
            retention_bytes: self.config().requested_bytes(),
            idle: self.limits().idle,
            ca_file: None,
        }
    }

    /// This store over the shared history `config` (usually
    /// [`history_config`](Self::history_config)): its request streams are
    /// stored in Redis, and a resume of a stream another instance stored is
    /// served from there (see the crate docs).
    ///
    /// # Errors
    /// A malformed URL, or a Redis that does not answer in time.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub async fn with_history(mut self, config: HistoryConfig) -> Result<Self, HistoryError> {
        self.shared = Some(Arc::new(SharedHistory::connect(config).await?));
        Ok(self)
    }

    /// This store with replays of streams another instance stores reading
    /// the history at least every `period` (at least 10 ms) while they wait
    /// for the stream's next event, announced or not (default
    /// [`DEFAULT_FOLLOW_POLL`](crate::shared::DEFAULT_FOLLOW_POLL)).
    /// Announcements are at most once: one lost (this instance's
    /// subscription down, or the storing instance gone before it
    /// published) delays an event by `period` at most.
    #[must_use]
    pub fn with_follow_poll(mut self, period: Duration) -> Self {
        self.follow_poll = period.max(MIN_FOLLOW_POLL);
        self
    }

    /// Whether this store keeps request streams in a shared history.
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// Stores one event of rmcp stream `stream_id` in the shared history
    /// (a request stream of a shared store) or in this process only (a
    /// standalone stream, or a store without a history), and returns its
    /// id; see [`store`](Self::store) for what is stored.
    ///
    /// # Errors
    /// [`SharedStoreError`]: nothing was stored.
    pub async fn store_shared(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<String, SharedStoreError> {
        let now = self.clock_now();
        let now_ms = self.maybe_sweep(now);
        let entry = self
            .entry(stream_id, now)
            .map_err(SharedStoreError::RandomSource)?;
        let shared = match &self.shared {
            Some(shared) if entry.kind == StreamKind::Request => Arc::clone(shared),
            _ => return Ok(self.store_local(&entry, event, now_ms)?),
        };
        let mut parsed = None;
        let mut payload = match &event.message {
            Some(message) => match serde_json::to_vec(message.as_ref()) {
                Ok(json) => {
                    parsed = Some(message);
                    json
                }
                Err(_) => record::lost(0),
            },
            None => record::marker(event.retry),
        };
        // What the stream's configured ring takes (a stream may still be
        // on its smaller first ring, which grows for it).
        let max_payload = self
            .ring_config(entry.kind)
            .geometry()
            .map_or(0, |geometry| geometry.max_payload());
        if payload.len() > max_payload {
            payload = record::lost(payload.len());
            parsed = None;
        }
        let grace = self.limits().completed_grace;
        match shared.store(&entry, &payload, parsed, grace).await {
            Ok(seq) => {
                // Learned once Redis and the ring hold the event: a
                // response Redis did not take does not complete the stream.
                entry.stored(event.message.as_deref(), now_ms);
                Ok(entry.event_id(seq))
            }
            Err(error) => {
                if matches!(
                    error,
                    SharedStoreError::EpochMoved { .. }
                        | SharedStoreError::OutOfStep { .. }
                        | SharedStoreError::Ring(_)
                ) {
                    // This process's copy no longer matches Redis: drop it,
                    // so that every resume asks Redis (and gets what Redis
                    // holds, or `foreign_cursor` for the old epoch).
                    self.free(&entry.key, &entry);
                }
                Err(error)
            }
        }
    }

    /// A replay of `last_event_id` from the shared history, when this store
    /// is shared and the cursor names a stream this process does not hold;
    /// `None` otherwise (the local [`replay`](Self::replay) answers).
    fn replay_shared(&self, last_event_id: &str) -> Option<RemoteReplay> {
        let shared = self.shared.as_ref()?;
        let id: StoreEventId = last_event_id.parse().ok()?;
        if self.holds(&id.key) {
            return None;
        }
        Some(shared.replay(id, last_event_id, self.follow_poll))
    }
}

#[async_trait::async_trait]
impl EventStore for GaplessEventStore {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<EventId, EventStoreError> {
        if self.shared.is_some() {
            return Ok(self.store_shared(stream_id, event).await?);
        }
        Ok(self.store(stream_id, event)?)
    }

    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        if let Some(remote) = self.replay_shared(last_event_id) {
            return Ok(Box::pin(remote));
        }
        Ok(Box::pin(self.replay(last_event_id)))
    }
}
