//! An in-memory [`History`] for unit tests: the same rules as the Redis
//! scripts (the append assigns the next seqs; retention by events and by
//! payload bytes, never below the newest event; reads paged by bytes),
//! with faults to inject: unreachable, and an append applied but answered
//! as a failure (a Redis that ran the script after the caller's deadline).
//! Each append announces the session's new last seq, as the script's
//! `PUBLISH` does. A Redis restart that lost events can be simulated
//! ([`MemoryHistory::restart_losing`]): the next append continues the
//! session under a new epoch, as the script does.

use super::{History, HistoryConfig, HistoryError, Known, Snapshot};
use crate::SessionId;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::watch;

/// One session as the fake holds it.
#[derive(Clone, Debug, Default)]
pub struct Stored {
    /// The session's epoch.
    pub epoch: u64,
    /// The last seq appended.
    pub published: u64,
    /// The highest acknowledged cursor.
    pub acked: u64,
    /// The highest seq handed to a transport.
    pub sent: u64,
    /// Retained events by seq.
    pub events: BTreeMap<u64, Bytes>,
    /// The run of the fake that created or last appended to the session
    /// (`0`: unknown, as a meta hash without `inc`).
    pub inc: u64,
}

/// Faults the next calls meet.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// Every call fails as unavailable.
    pub down: bool,
    /// The next append is applied, then answered as unavailable.
    pub land_then_fail: bool,
}

/// The fake.
pub struct MemoryHistory {
    config: HistoryConfig,
    sessions: Mutex<HashMap<SessionId, Stored>>,
    faults: Mutex<Faults>,
    /// Append calls that reached the fake (batches, not events).
    pub appends: AtomicUsize,
    /// How long each append takes (a round trip to Redis).
    latency: Duration,
    /// The last seq of the latest append, of any session.
    announced: watch::Sender<u64>,
    /// The fake's run (Redis's `run_id`): a restart changes it.
    run: AtomicU64,
    /// Whether a restart keeps every acknowledged event (AOF, fsync always).
    lossless: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl MemoryHistory {
    /// An empty fake keeping `retention` events and `retention_bytes` of
    /// payload per session.
    pub fn new(retention: usize, retention_bytes: usize) -> Self {
        Self {
            config: HistoryConfig {
                url: "memory://".into(),
                cluster: false,
                timeout: Duration::from_secs(1),
                retention,
                retention_bytes,
                idle: Duration::from_secs(600),
                ca_file: None,
            },
            sessions: Mutex::new(HashMap::new()),
            faults: Mutex::new(Faults::default()),
            appends: AtomicUsize::new(0),
            latency: Duration::ZERO,
            announced: watch::channel(0).0,
            run: AtomicU64::new(1),
            lossless: false,
        }
    }

    /// The same fake, telling appends that a restart loses nothing.
    pub fn lossless(mut self) -> Self {
        self.lossless = true;
        self
    }

    /// A restart of the fake (a new run) that brought session `id` back as
    /// it was at seq `kept` (a snapshot): the events after it, and its
    /// cursors past it, are lost. Under the same epoch, `published` alone
    /// would hand their seqs out again.
    pub fn restart_losing(&self, id: &SessionId, kept: u64) {
        self.run.fetch_add(1, Ordering::Relaxed);
        if let Some(stored) = lock(&self.sessions).get_mut(id) {
            stored.events.retain(|seq, _| *seq <= kept);
            stored.published = stored.published.min(kept);
            stored.acked = stored.acked.min(kept);
            stored.sent = stored.sent.min(kept);
        }
    }

    /// The same fake, each append taking `latency`.
    pub fn with_latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    /// Announcements of appends (any session's new last seq).
    pub fn announcements(&self) -> watch::Receiver<u64> {
        self.announced.subscribe()
    }

    /// Puts session `id` in the fake as `stored`.
    pub fn put(&self, id: SessionId, stored: Stored) {
        lock(&self.sessions).insert(id, stored);
    }

    /// Session `id` as the fake holds it.
    pub fn get(&self, id: &SessionId) -> Option<Stored> {
        lock(&self.sessions).get(id).cloned()
    }

    /// Sets the faults.
    pub fn set_faults(&self, faults: Faults) {
        *lock(&self.faults) = faults;
    }

    fn check_up(&self) -> Result<(), HistoryError> {
        if lock(&self.faults).down {
            return Err(HistoryError::Unavailable("the fake is down".into()));
        }
        Ok(())
    }
}

impl History for MemoryHistory {
    fn config(&self) -> &HistoryConfig {
        &self.config
    }

    async fn append(
        &self,
        id: &SessionId,
        known: Known,
        payloads: &[Bytes],
    ) -> Result<(u64, u64), HistoryError> {
        self.check_up()?;
        self.appends.fetch_add(1, Ordering::Relaxed);
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        let (epoch, first, last) = {
            let mut sessions = lock(&self.sessions);
            let stored = sessions.get_mut(id).ok_or(HistoryError::Gone)?;
            // As the script: a restart that may have lost events, or a
            // history behind the caller's ring, continues under a new epoch.
            let run = self.run.load(Ordering::Relaxed);
            let restarted = stored.inc != 0 && stored.inc != run;
            if (restarted && !self.lossless)
                || (stored.epoch == known.epoch && stored.published < known.published)
            {
                stored.epoch = stored.epoch.wrapping_mul(31).wrapping_add(run).max(1);
                stored.events.clear();
                stored.published = 0;
                stored.acked = 0;
                stored.sent = 0;
            }
            stored.inc = run;
            let first = stored.published + 1;
            for (seq, payload) in (first..).zip(payloads) {
                stored.events.insert(seq, payload.clone());
            }
            stored.published += payloads.len() as u64;
            let mut bytes: usize = stored.events.values().map(Bytes::len).sum();
            while stored.events.len() > self.config.retention
                || (bytes > self.config.retention_bytes && stored.events.len() > 1)
            {
                if let Some((_, dropped)) = stored.events.pop_first() {
                    bytes -= dropped.len();
                }
            }
            (stored.epoch, first, stored.published)
        };
        self.announced.send_replace(last);
        let mut faults = lock(&self.faults);
        if std::mem::take(&mut faults.land_then_fail) {
            return Err(HistoryError::Unavailable("applied, answered late".into()));
        }
        Ok((epoch, first))
    }

    async fn after(
        &self,
        id: &SessionId,
        after: u64,
        max_bytes: usize,
    ) -> Result<Option<Snapshot>, HistoryError> {
        self.check_up()?;
        Ok(lock(&self.sessions).get(id).map(|stored| {
            let mut total = 0;
            let events = stored
                .events
                .range(after + 1..)
                .take_while(|(_, payload)| {
                    let fits = total == 0 || total + payload.len() <= max_bytes;
                    total += payload.len().max(1);
                    fits
                })
                .take(512)
                .map(|(seq, payload)| (*seq, payload.clone()))
                .collect();
            Snapshot {
                epoch: stored.epoch,
                published: stored.published,
                acked: stored.acked,
                sent: stored.sent,
                first_retained: stored
                    .events
                    .keys()
                    .next()
                    .copied()
                    .unwrap_or(stored.published + 1),
                events,
                publish_key: None,
            }
        }))
    }
}
