//! An in-memory [`History`] for unit tests: the same rules as the Redis
//! scripts (lease first, next seq next, retention by count), with faults
//! to inject: unreachable, and an append applied but answered as a failure
//! (a Redis that ran the script after the caller's deadline).

use super::{Acquired, History, HistoryConfig, HistoryError, Snapshot, Tail, Token};
use crate::ids::SessionId;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;

/// One session as the fake holds it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stored {
    pub(crate) epoch: u64,
    pub(crate) published: u64,
    pub(crate) acked: u64,
    pub(crate) sent: u64,
    /// Retained events by seq.
    pub(crate) events: BTreeMap<u64, Bytes>,
    /// The lease holder, if any (no expiry: tests move it by hand).
    pub(crate) lease: Option<Token>,
}

/// Faults the next calls meet.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Faults {
    /// Every call fails as unavailable.
    pub(crate) down: bool,
    /// The next append is applied, then answered as unavailable.
    pub(crate) land_then_fail: bool,
}

/// The fake.
pub(crate) struct MemoryHistory {
    config: HistoryConfig,
    sessions: Arc<Mutex<HashMap<SessionId, Stored>>>,
    faults: Mutex<Faults>,
    /// Append calls that reached the fake (batches, not events).
    pub(crate) appends: AtomicUsize,
    /// How long each append takes (a round trip to Redis).
    latency: Duration,
    appended: Arc<Notify>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl MemoryHistory {
    /// An empty fake keeping `retention` events per session.
    pub(crate) fn new(retention: usize) -> Self {
        Self {
            config: HistoryConfig {
                url: "memory://".into(),
                timeout: Duration::from_secs(1),
                lease_ttl: Duration::from_secs(3),
                retention,
                idle: Duration::from_secs(600),
            },
            sessions: Arc::new(Mutex::new(HashMap::new())),
            faults: Mutex::new(Faults::default()),
            appends: AtomicUsize::new(0),
            latency: Duration::ZERO,
            appended: Arc::new(Notify::new()),
        }
    }

    /// The same fake, each append taking `latency`.
    pub(crate) fn with_latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    /// Puts session `id` in the fake as `stored`.
    pub(crate) fn put(&self, id: SessionId, stored: Stored) {
        lock(&self.sessions).insert(id, stored);
    }

    /// Session `id` as the fake holds it.
    pub(crate) fn get(&self, id: &SessionId) -> Option<Stored> {
        lock(&self.sessions).get(id).cloned()
    }

    /// Sets the faults.
    pub(crate) fn set_faults(&self, faults: Faults) {
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
    type Tail = MemoryTail;

    fn config(&self) -> &HistoryConfig {
        &self.config
    }

    async fn append(
        &self,
        id: &SessionId,
        owner: Token,
        first: u64,
        payloads: &[Bytes],
    ) -> Result<u64, HistoryError> {
        self.check_up()?;
        self.appends.fetch_add(1, Ordering::Relaxed);
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        let last = {
            let mut sessions = lock(&self.sessions);
            let stored = sessions.get_mut(id).ok_or(HistoryError::Gone)?;
            if stored.lease != Some(owner) {
                return Err(HistoryError::NotOwner {
                    retry_after: Duration::from_millis(1500),
                });
            }
            if first != stored.published + 1 {
                return Err(HistoryError::Behind {
                    published: stored.published,
                });
            }
            for (seq, payload) in (first..).zip(payloads) {
                stored.events.insert(seq, payload.clone());
            }
            stored.published = first + payloads.len() as u64 - 1;
            while stored.events.len() > self.config.retention {
                stored.events.pop_first();
            }
            stored.published
        };
        self.appended.notify_waiters();
        let mut faults = lock(&self.faults);
        if std::mem::take(&mut faults.land_then_fail) {
            return Err(HistoryError::Unavailable("applied, answered late".into()));
        }
        Ok(last)
    }

    async fn acquire(&self, id: &SessionId, owner: Token) -> Result<Acquired, HistoryError> {
        self.check_up()?;
        let mut sessions = lock(&self.sessions);
        let stored = sessions.get_mut(id).ok_or(HistoryError::Gone)?;
        match stored.lease {
            Some(holder) if holder != owner => Ok(Acquired::Held {
                retry_after: Duration::from_millis(1500),
            }),
            _ => {
                stored.lease = Some(owner);
                Ok(Acquired::Owner {
                    published: stored.published,
                })
            }
        }
    }

    async fn renew(&self, id: &SessionId, owner: Token) -> Result<bool, HistoryError> {
        self.check_up()?;
        Ok(lock(&self.sessions)
            .get(id)
            .is_some_and(|stored| stored.lease == Some(owner)))
    }

    async fn release(&self, id: &SessionId, owner: Token) -> Result<(), HistoryError> {
        self.check_up()?;
        if let Some(stored) = lock(&self.sessions).get_mut(id) {
            if stored.lease == Some(owner) {
                stored.lease = None;
            }
        }
        Ok(())
    }

    async fn after(
        &self,
        id: &SessionId,
        after: u64,
        count: usize,
    ) -> Result<Option<Snapshot>, HistoryError> {
        self.check_up()?;
        Ok(lock(&self.sessions).get(id).map(|stored| Snapshot {
            epoch: stored.epoch,
            published: stored.published,
            acked: stored.acked,
            sent: stored.sent,
            events: stored
                .events
                .range(after + 1..)
                .take(count)
                .map(|(seq, payload)| (*seq, payload.clone()))
                .collect(),
            publish_key: None,
        }))
    }

    async fn tail(&self, id: &SessionId) -> Result<MemoryTail, HistoryError> {
        self.check_up()?;
        Ok(MemoryTail {
            id: *id,
            sessions: Arc::clone(&self.sessions),
            appended: Arc::clone(&self.appended),
        })
    }
}

/// The fake's tail: waits for an append notification, then reads.
pub(crate) struct MemoryTail {
    id: SessionId,
    sessions: Arc<Mutex<HashMap<SessionId, Stored>>>,
    appended: Arc<Notify>,
}

impl Tail for MemoryTail {
    async fn next(
        &mut self,
        after: u64,
        block: Duration,
    ) -> Result<Vec<(u64, Bytes)>, HistoryError> {
        let read = |sessions: &Mutex<HashMap<SessionId, Stored>>| -> Vec<(u64, Bytes)> {
            lock(sessions)
                .get(&self.id)
                .map(|stored| {
                    stored
                        .events
                        .range(after + 1..)
                        .map(|(seq, payload)| (*seq, payload.clone()))
                        .collect()
                })
                .unwrap_or_default()
        };
        // Registered before the read, so an append right after it wakes us.
        let notified = self.appended.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let events = read(&self.sessions);
        if !events.is_empty() {
            return Ok(events);
        }
        let _ = tokio::time::timeout(block, notified).await;
        Ok(read(&self.sessions))
    }
}
