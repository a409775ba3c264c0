//! An in-memory [`History`] for unit tests: the same rules as the Redis
//! scripts (the append assigns the next seqs; retention by events and by
//! payload bytes, never below the newest event; reads paged by bytes),
//! with faults to inject: unreachable, and an append applied but answered
//! as a failure (a Redis that ran the script after the caller's deadline).
//! Each append announces the log's new last seq, as the script's
//! `PUBLISH` does. A Redis restart that lost events can be simulated
//! ([`MemoryHistory::restart_losing`]): the next append continues the
//! session under a new epoch, as the script does.
//!
//! Admission sets ([`History::admit`]) keep each member's expiry on
//! tokio's clock, as tokens do: a test with paused time moves it with
//! `tokio::time::advance` (or its auto-advance), and a `ttl` of zero
//! expires a member at once, as in Redis.

use super::{
    counter, Admission, Guard, History, HistoryConfig, HistoryError, Known, Meta, MetaUpdate,
    Snapshot, Updated,
};
use crate::announce::{Announcer, LocalFollower};
use crate::expiring::{AdmissionSets, Tokens};
use crate::LogId;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// One log as the fake holds it.
#[derive(Clone, Debug, Default)]
pub struct Stored {
    /// The log's epoch.
    pub epoch: u64,
    /// The last seq appended.
    pub published: u64,
    /// Retained events by seq.
    pub events: BTreeMap<u64, Bytes>,
    /// The caller's meta.
    pub meta: Meta,
    /// The run of the fake that created or last appended to the log
    /// (`0`: unknown, as a meta hash without `inc`).
    pub inc: u64,
    /// Set by [`History::complete`]: nothing more is appended.
    pub complete: bool,
}

/// Faults the next calls meet.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// Every call fails as unavailable.
    pub down: bool,
    /// The next append is applied, then answered as unavailable.
    pub land_then_fail: bool,
    /// Appends are never answered (a Redis that stopped answering): each
    /// waits for its deadline, then fails as unavailable, not applied.
    pub stall_appends: bool,
}

/// The fake.
pub struct MemoryHistory {
    config: HistoryConfig,
    logs: Mutex<HashMap<LogId, Stored>>,
    tokens: Tokens,
    admissions: AdmissionSets,
    faults: Mutex<Faults>,
    /// Append calls that reached the fake (batches, not events).
    pub appends: AtomicUsize,
    /// Read calls ([`History::after`], [`History::after_fields`]) that
    /// reached the fake.
    pub reads: AtomicUsize,
    /// How long each append and each read takes (a round trip to Redis).
    latency: Duration,
    /// The last seq of the latest append, of any log.
    announced: watch::Sender<u64>,
    /// Each followed log's last seq, as its appends announce it.
    followed: Announcer,
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
    /// payload per log.
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
            logs: Mutex::new(HashMap::new()),
            tokens: Tokens::default(),
            admissions: AdmissionSets::default(),
            faults: Mutex::new(Faults::default()),
            appends: AtomicUsize::new(0),
            reads: AtomicUsize::new(0),
            latency: Duration::ZERO,
            announced: watch::channel(0).0,
            followed: Announcer::default(),
            run: AtomicU64::new(1),
            lossless: false,
        }
    }

    /// The same fake, telling appends that a restart loses nothing.
    pub fn lossless(mut self) -> Self {
        self.lossless = true;
        self
    }

    /// A restart of the fake (a new run) that brought log `id` back as it
    /// was at seq `kept` (a snapshot): the events after it are lost. Under
    /// the same epoch, `published` alone would hand their seqs out again.
    pub fn restart_losing(&self, id: &LogId, kept: u64) {
        self.run.fetch_add(1, Ordering::Relaxed);
        if let Some(stored) = lock(&self.logs).get_mut(id) {
            stored.events.retain(|seq, _| *seq <= kept);
            stored.published = stored.published.min(kept);
        }
    }

    /// The same fake, each append and read taking `latency`.
    pub fn with_latency(mut self, latency: Duration) -> Self {
        self.latency = latency;
        self
    }

    /// Announcements of appends (any log's new last seq).
    pub fn announcements(&self) -> watch::Receiver<u64> {
        self.announced.subscribe()
    }

    /// Puts log `id` in the fake as `stored`.
    pub fn put(&self, id: LogId, stored: Stored) {
        lock(&self.logs).insert(id, stored);
    }

    /// Log `id` as the fake holds it.
    pub fn get(&self, id: &LogId) -> Option<Stored> {
        lock(&self.logs).get(id).cloned()
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

    /// A read ([`History::after`]): the whole meta, or only the fields
    /// `fields` names that the log has.
    async fn read(
        &self,
        id: &LogId,
        after: u64,
        max_bytes: usize,
        fields: Option<&[&str]>,
    ) -> Result<Option<Snapshot>, HistoryError> {
        self.check_up()?;
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.round_trip().await;
        Ok(lock(&self.logs).get(id).map(|stored| {
            let mut total = 0;
            let events = stored
                .events
                // After `u64::MAX`: none (a read of the meta alone).
                .range((Bound::Excluded(after), Bound::Unbounded))
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
                first_retained: stored
                    .events
                    .keys()
                    .next()
                    .copied()
                    .unwrap_or(stored.published + 1),
                events,
                meta: match fields {
                    None => stored.meta.clone(),
                    Some(fields) => fields
                        .iter()
                        .filter_map(|name| {
                            let value = stored.meta.get(*name)?;
                            Some(((*name).to_owned(), value.clone()))
                        })
                        .collect(),
                },
            }
        }))
    }

    async fn round_trip(&self) {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
    }
}

/// A follower of one log of a [`MemoryHistory`].
pub type MemoryFollower = LocalFollower;

impl History for MemoryHistory {
    type Follower = MemoryFollower;

    fn config(&self) -> &HistoryConfig {
        &self.config
    }

    async fn create(&self, id: &LogId, epoch: u64, meta: &Meta) -> Result<bool, HistoryError> {
        self.check_up()?;
        let mut logs = lock(&self.logs);
        if logs.contains_key(id) {
            return Ok(false);
        }
        logs.insert(
            *id,
            Stored {
                epoch,
                meta: meta.clone(),
                inc: self.run.load(Ordering::Relaxed),
                ..Stored::default()
            },
        );
        Ok(true)
    }

    async fn append_guarded(
        &self,
        id: &LogId,
        known: Known,
        payloads: &[Bytes],
        guard: &Guard,
        deadline: Instant,
    ) -> Result<Option<(u64, u64)>, HistoryError> {
        self.check_up()?;
        self.appends.fetch_add(1, Ordering::Relaxed);
        let late = || HistoryError::Unavailable("no answer by the deadline".into());
        if lock(&self.faults).stall_appends {
            tokio::time::sleep_until(deadline).await;
            return Err(late());
        }
        if tokio::time::timeout_at(deadline, self.round_trip())
            .await
            .is_err()
        {
            return Err(late());
        }
        let (epoch, first, last) = {
            let mut logs = lock(&self.logs);
            let stored = logs.get_mut(id).ok_or(HistoryError::Gone)?;
            let holds = guard
                .expect
                .iter()
                .all(|(name, value)| stored.meta.get(name) == value.as_ref());
            if !holds {
                return Ok(None);
            }
            // As the script: a restart that may have lost events, or a
            // history behind the caller's ring, continues under a new epoch.
            let run = self.run.load(Ordering::Relaxed);
            let restarted = stored.inc != 0 && stored.inc != run;
            if (restarted && !self.lossless)
                || (stored.epoch == known.epoch && stored.published < known.published)
            {
                stored.epoch = guard
                    .next_epoch
                    .filter(|epoch| *epoch != 0)
                    .unwrap_or_else(|| stored.epoch.wrapping_mul(31).wrapping_add(run).max(1));
                stored.events.clear();
                stored.published = 0;
                stored
                    .meta
                    .retain(|name, _| !name.starts_with(crate::PER_EPOCH));
            }
            stored.inc = run;
            for (name, value) in &guard.set {
                stored.meta.insert(name.clone(), value.clone());
            }
            for name in &guard.unset {
                stored.meta.remove(name);
            }
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
        self.followed.announce(id, last);
        let mut faults = lock(&self.faults);
        if std::mem::take(&mut faults.land_then_fail) {
            return Err(HistoryError::Unavailable("applied, answered late".into()));
        }
        Ok(Some((epoch, first)))
    }

    async fn after(
        &self,
        id: &LogId,
        after: u64,
        max_bytes: usize,
    ) -> Result<Option<Snapshot>, HistoryError> {
        self.read(id, after, max_bytes, None).await
    }

    async fn after_fields(
        &self,
        id: &LogId,
        after: u64,
        max_bytes: usize,
        fields: &[&str],
    ) -> Result<Option<Snapshot>, HistoryError> {
        self.read(id, after, max_bytes, Some(fields)).await
    }

    fn follow(&self, id: &LogId) -> MemoryFollower {
        let published = lock(&self.logs)
            .get(id)
            .map_or(0, |stored| stored.published);
        self.followed.follow(id, published)
    }

    async fn complete(&self, id: &LogId, _grace: Duration) -> Result<bool, HistoryError> {
        self.check_up()?;
        Ok(lock(&self.logs)
            .get_mut(id)
            .map(|stored| stored.complete = true)
            .is_some())
    }

    async fn delete(&self, id: &LogId) -> Result<bool, HistoryError> {
        self.check_up()?;
        Ok(lock(&self.logs).remove(id).is_some())
    }

    async fn update_meta(&self, id: &LogId, update: &MetaUpdate) -> Result<Updated, HistoryError> {
        self.check_up()?;
        let mut logs = lock(&self.logs);
        let stored = logs.get_mut(id).ok_or(HistoryError::Gone)?;
        let refused = update.epoch.is_some_and(|epoch| epoch != stored.epoch)
            || match &update.at_most {
                Some((name, value)) => counter(&stored.meta, name)? > *value,
                None => false,
            };
        if !refused {
            if let Some(name) = &update.increment {
                let next = counter(&stored.meta, name)? + 1;
                stored.meta.insert(name.clone(), next.to_string());
            }
            for (name, value) in &update.raise {
                if *value > counter(&stored.meta, name)? {
                    stored.meta.insert(name.clone(), value.to_string());
                }
            }
        }
        let meta = match &update.fields {
            None => stored.meta.clone(),
            Some(fields) => fields
                .iter()
                .filter_map(|name| Some((name.clone(), stored.meta.get(name)?.clone())))
                .collect(),
        };
        Ok(Updated {
            applied: !refused,
            epoch: stored.epoch,
            meta,
        })
    }

    async fn put_token(
        &self,
        id: &LogId,
        name: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<(), HistoryError> {
        self.check_up()?;
        self.tokens.put(id, name, value, ttl);
        Ok(())
    }

    async fn take_token(&self, id: &LogId, name: &str) -> Result<Option<String>, HistoryError> {
        self.check_up()?;
        Ok(self.tokens.take(id, name))
    }

    async fn admit(
        &self,
        set: &str,
        member: &str,
        limit: u64,
        ttl: Duration,
    ) -> Result<Admission, HistoryError> {
        self.check_up()?;
        Ok(self.admissions.admit(set, member, limit, ttl))
    }

    async fn renew(&self, set: &str, member: &str, ttl: Duration) -> Result<bool, HistoryError> {
        self.check_up()?;
        Ok(self.admissions.renew(set, member, ttl))
    }

    async fn release(&self, set: &str, member: &str) -> Result<bool, HistoryError> {
        self.check_up()?;
        Ok(self.admissions.release(set, member))
    }

    async fn count(&self, set: &str) -> Result<u64, HistoryError> {
        self.check_up()?;
        Ok(self.admissions.count(set))
    }

    async fn has_token(&self, id: &LogId, name: &str) -> Result<bool, HistoryError> {
        self.check_up()?;
        Ok(self.tokens.has(id, name))
    }
}
