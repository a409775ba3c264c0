//! The stores the servers run: gapless behind an observer that tells the
//! proxy what was stored, and the report-only mutants.

use super::*;

/// What the server stored so far (seen through [`Observed`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Stored {
    pub(crate) responses: usize,
    pub(crate) progress: u32,
}

/// A transparent wrapper that reports what its store stored, so the proxy
/// can hold a resume until the result is stored (no sleeps).
pub(crate) struct Observed {
    pub(crate) inner: Arc<dyn EventStore>,
    pub(crate) stored: watch::Sender<Stored>,
}

#[async_trait::async_trait]
impl EventStore for Observed {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<EventId, EventStoreError> {
        let id = self.inner.store_event(stream_id, event).await?;
        if let Some(message) = &event.message {
            match &**message {
                ServerJsonRpcMessage::Response(_) | ServerJsonRpcMessage::Error(_) => {
                    self.stored.send_modify(|stored| stored.responses += 1);
                }
                ServerJsonRpcMessage::Notification(notification)
                    if matches!(
                        notification.notification,
                        ServerNotification::ProgressNotification(_)
                    ) =>
                {
                    self.stored.send_modify(|stored| stored.progress += 1);
                }
                _ => {}
            }
        }
        Ok(id)
    }

    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        self.inner.replay_events_after(last_event_id).await
    }
}

pub(crate) type NaiveStream = (u64, VecDeque<(u64, ServerSseMessage)>);

/// Mutant `naive`: a store that behaves like rmcp's own cache — keeps the
/// last `capacity` events of a stream, replays FROM the cursor (re-sending
/// it), saturates an evicted cursor to the oldest event, answers an unknown
/// cursor with `Err` (an empty 200), and replays a finite snapshot.
pub(crate) struct Naive {
    pub(crate) capacity: usize,
    /// Per stream: the last seq, and the retained (seq, event)s.
    pub(crate) streams: Mutex<HashMap<String, NaiveStream>>,
}

#[async_trait::async_trait]
impl EventStore for Naive {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<EventId, EventStoreError> {
        let mut streams = self.streams.lock().expect("naive store lock");
        let (next, events) = streams.entry(stream_id.to_owned()).or_default();
        *next += 1;
        let id = format!("{stream_id}/{next}");
        let mut event = event.clone();
        event.event_id = Some(id.clone());
        events.push_back((*next, event));
        if events.len() > self.capacity {
            events.pop_front();
        }
        Ok(id)
    }

    async fn replay_events_after(
        &self,
        last_event_id: &str,
    ) -> Result<EventStream, EventStoreError> {
        let (stream, seq) = last_event_id
            .rsplit_once('/')
            .and_then(|(stream, seq)| Some((stream, seq.parse::<u64>().ok()?)))
            .ok_or("malformed cursor")?;
        let streams = self.streams.lock().expect("naive store lock");
        let (_, events) = streams.get(stream).ok_or("unknown cursor")?;
        let replay: Vec<ServerSseMessage> = events
            .iter()
            .filter(|(s, _)| *s >= seq)
            .map(|(_, event)| event.clone())
            .collect();
        Ok(Box::pin(futures_util::stream::iter(replay)))
    }
}

/// Mutant `err`: gapless, but every resume is answered with `Err`.
pub(crate) struct Failing(Arc<dyn EventStore>);

#[async_trait::async_trait]
impl EventStore for Failing {
    async fn store_event(
        &self,
        stream_id: &str,
        event: &ServerSseMessage,
    ) -> Result<EventId, EventStoreError> {
        self.0.store_event(stream_id, event).await
    }

    async fn replay_events_after(&self, _: &str) -> Result<EventStream, EventStoreError> {
        Err("mutant: no replay".into())
    }
}

/// The store a scenario's server gets: gapless (over the shared history
/// at `redis`, if given), or the mutant named by `GAPLESS_RMCP_MUTANT`,
/// wrapped in [`Observed`]; `None` for rmcp's own cache.
pub(crate) async fn make_store(
    ring_events: usize,
    redis: Option<&str>,
    stored: watch::Sender<Stored>,
) -> Option<Arc<dyn EventStore>> {
    let local =
        || GaplessEventStore::new(Config::default().events(ring_events)).expect("a ring config");
    let gapless = async || {
        let store = local();
        let store = match redis {
            None => store,
            Some(url) => {
                let config = store.history_config(url);
                store
                    .with_history(config)
                    .await
                    .expect("the test's redis-server answers")
            }
        };
        Arc::new(store) as Arc<dyn EventStore>
    };
    let inner: Arc<dyn EventStore> = match std::env::var("GAPLESS_RMCP_MUTANT").as_deref() {
        Err(_) | Ok("" | "none") => gapless().await,
        Ok("rmcp-cache") => return None,
        Ok("naive") => Arc::new(Naive {
            capacity: ring_events,
            streams: Mutex::default(),
        }),
        Ok("err") => Arc::new(Failing(gapless().await)),
        // A store per process: what the shared history replaces.
        Ok("per-process") => Arc::new(local()),
        Ok(other) => {
            panic!("GAPLESS_RMCP_MUTANT={other}: expected rmcp-cache, naive, err or per-process")
        }
    };
    Some(Arc::new(Observed { inner, stored }))
}
