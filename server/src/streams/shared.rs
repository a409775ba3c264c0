//! Durable Streams over the shared history (`--redis`, `--redis-cluster`):
//! any instance creates, appends to, reads, follows and deletes any
//! stream, with the same offsets everywhere. The history is the third
//! user of the [`History`] trait (after the server's sessions and
//! `gapless-rmcp`), and it is the stream: an instance keeps no copy, so a
//! read sees every append acknowledged by any instance before it.
//!
//! A stream at path `p` is the log `sha256("gapless durable stream\n" p)`
//! (its first 16 bytes). Its settings and state are caller fields of the
//! log's meta, and every decision on them is one atomic step with its
//! append ([`History::append_guarded`]): an idempotent producer's seq, a
//! `Stream-Seq`, the closure, a fork's claim on its source, the deletion.
//! An instance that decided on a meta another one changed meanwhile is
//! refused, reads the meta again and decides again.
//!
//! The log's epoch is the stream's own generation: a stream starts under a
//! generation from the clock, and a history that lost events continues it
//! under a later one, so offsets sort byte-wise across everything. A fork
//! copies what it inherits into its own log in the same step that creates
//! it (`init`): the log's seq `h` is the stream's seq `h + base`.

use super::feed::PAGE_BYTES;
use super::json_mode;
use super::numbering::Numbering;
use super::offset::{Generations, Offset};
use super::registry::CreateRefusal;
use super::rules::{
    decide, AppendRefusal, AppendRequest, Appended, Decision, Producer, WriterState,
};
use super::shared_feed::SharedFeed;
use super::stream::{media_type, sub_offset_prefix, Settings};
use crate::history::{Guard, History, HistoryError, Known, LogId, Meta, MetaUpdate, Snapshot};
use crate::ids::PublishKey;
use bytes::Bytes;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// Meta fields (the history keeps each as `c:<name>`).
mod field {
    pub(super) const CONTENT_TYPE: &str = "ct";
    pub(super) const TTL: &str = "ttl";
    pub(super) const EXPIRES_AT: &str = "exp";
    pub(super) const FORKED_FROM: &str = "fork";
    pub(super) const FORK_OFFSET: &str = "fork_off";
    pub(super) const FORK_SUB_OFFSET: &str = "fork_sub";
    pub(super) const PUBLISH_KEY: &str = "pk";
    /// `pending` until the create's first batch (initial body, a fork's
    /// inheritance) is in, then `done`.
    pub(super) const INIT: &str = "init";
    pub(super) const CLOSED: &str = "closed";
    pub(super) const CLOSED_BY: &str = "closed_by";
    pub(super) const STREAM_SEQ: &str = "sseq";
    /// Live forks of the stream.
    pub(super) const FORKS: &str = "forks";
    /// Deleted while forks live (`1`).
    pub(super) const DELETED: &str = "deleted";
    /// The last access, in ms since the Unix epoch (for `Stream-TTL`).
    pub(super) const ACCESSED: &str = "atime";
    /// Per epoch: the lineage, the log's base, the stream's start.
    pub(super) const LINEAGE: &str = "epoch/lineage";
    pub(super) const BASE: &str = "epoch/base";
    pub(super) const START: &str = "epoch/start";
    /// An idempotent producer's state: `p/<id>`.
    pub(super) const PRODUCER: &str = "p/";
}

/// Decisions retried at most on a meta that keeps changing under them.
const DECIDE_TRIES: usize = 32;
/// `Stream-TTL` access times are written at most this often.
const ACCESS_RESOLUTION_MS: u64 = 1000;

/// The log of the stream at `path`.
pub(crate) fn log_of(path: &str) -> LogId {
    let digest = Sha256::new()
        .chain_update(b"gapless durable stream\n")
        .chain_update(path.as_bytes())
        .finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    LogId::from_bytes(bytes)
}

fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis(),
    )
    .unwrap_or(u64::MAX)
}

fn unavailable(error: &HistoryError) -> AppendRefusal {
    tracing::warn!(%error, "shared history (durable streams)");
    AppendRefusal::Unavailable
}

/// One stream as one read of its log saw it.
pub(crate) struct View {
    /// The log's epoch: the stream's own generation.
    pub(super) epoch: u64,
    /// The log's last seq.
    log_published: u64,
    /// The stream's seq of the log's seq 0.
    base: u64,
    /// The stream's seqs `first_retained ..= published` are retained.
    pub(super) first_retained: u64,
    pub(super) published: u64,
    pub(crate) settings: Settings,
    pub(crate) numbering: Numbering,
    meta: Meta,
    /// Events read with it, at the stream's seqs.
    pub(super) events: Vec<(u64, Bytes)>,
}

impl View {
    fn of(snapshot: Snapshot) -> Result<Self, HistoryError> {
        let meta = snapshot.meta;
        let number = |name: &str| -> Result<u64, HistoryError> {
            meta.get(name).map_or(Ok(0), |text| {
                text.parse()
                    .map_err(|_| HistoryError::Corrupt(format!("stream field {name}: {text:?}")))
            })
        };
        let base = number(field::BASE)?;
        let start = number(field::START)?;
        let lineage = match meta.get(field::LINEAGE) {
            Some(text) => Numbering::parse_lineage(text)
                .ok_or_else(|| HistoryError::Corrupt(format!("stream lineage {text:?}")))?,
            None => Vec::new(),
        };
        let expires_at = meta.get(field::EXPIRES_AT).and_then(|text| {
            chrono::DateTime::parse_from_rfc3339(text)
                .ok()
                .map(|at| (text.clone(), SystemTime::from(at)))
        });
        let settings = Settings {
            content_type: meta.get(field::CONTENT_TYPE).cloned().unwrap_or_default(),
            ttl_secs: meta.get(field::TTL).and_then(|t| t.parse().ok()),
            expires_at,
            forked_from: meta.get(field::FORKED_FROM).cloned(),
            fork_offset: meta.get(field::FORK_OFFSET).and_then(|t| Offset::parse(t)),
            fork_sub_offset: number(field::FORK_SUB_OFFSET)?,
        };
        Ok(Self {
            epoch: snapshot.epoch,
            log_published: snapshot.published,
            base,
            first_retained: snapshot.first_retained + base,
            published: snapshot.published + base,
            settings,
            numbering: Numbering::new(lineage, snapshot.epoch, start),
            events: snapshot
                .events
                .into_iter()
                .map(|(seq, payload)| (seq + base, payload))
                .collect(),
            meta,
        })
    }

    fn flag(&self, name: &str) -> bool {
        self.meta.get(name).is_some_and(|v| v == "1")
    }

    pub(crate) fn closed(&self) -> bool {
        self.flag(field::CLOSED)
    }

    pub(crate) fn soft_deleted(&self) -> bool {
        self.flag(field::DELETED)
    }

    fn forks(&self) -> u64 {
        self.meta
            .get(field::FORKS)
            .and_then(|t| t.parse().ok())
            .unwrap_or(0)
    }

    fn initialised(&self) -> bool {
        self.meta.get(field::INIT).is_none_or(|v| v == "done")
    }

    pub(super) fn json(&self) -> bool {
        media_type(&self.settings.content_type) == "application/json"
    }

    /// The stream's tail offset.
    pub(crate) fn tail(&self) -> Offset {
        self.numbering.offset_of(self.published)
    }

    pub(crate) fn publish_key(&self) -> Option<PublishKey> {
        self.meta
            .get(field::PUBLISH_KEY)
            .and_then(|key| key.parse().ok())
    }

    /// Whether `Stream-TTL` or `Stream-Expires-At` has passed.
    fn expired(&self, now_ms: u64) -> bool {
        if let Some((_, at)) = &self.settings.expires_at {
            if SystemTime::now() >= *at {
                return true;
            }
        }
        match (self.settings.ttl_secs, self.meta.get(field::ACCESSED)) {
            (Some(ttl), Some(accessed)) => accessed
                .parse::<u64>()
                .is_ok_and(|at| now_ms >= at.saturating_add(ttl.saturating_mul(1000))),
            _ => false,
        }
    }

    /// What the meta holds of the producer `id` (its field and state).
    fn producer(&self, id: &str) -> (String, Option<&String>) {
        let name = format!("{}{id}", field::PRODUCER);
        let held = self.meta.get(&name);
        (name, held)
    }

    fn known(&self) -> Known {
        Known {
            epoch: self.epoch,
            published: self.log_published,
        }
    }
}

/// A guard that expects `name` to hold what `view` read of it.
fn as_read(view: &View, name: &str) -> (String, Option<String>) {
    (name.to_owned(), view.meta.get(name).cloned())
}

/// What a create found or made.
pub(crate) enum SharedCreated {
    New(View),
    Existing(View),
}

/// What a stream's writes and reads need of the shared history.
pub(crate) struct SharedStreams<H> {
    history: Arc<H>,
    generations: Generations,
    /// The largest message a stream takes: the ring's largest payload.
    max_payload: usize,
    /// Each history call's deadline.
    timeout: Duration,
}

impl<H: History> SharedStreams<H> {
    pub(crate) fn new(history: Arc<H>, max_payload: usize, timeout: Duration) -> Self {
        Self {
            history,
            generations: Generations::default(),
            max_payload,
            timeout,
        }
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.timeout
    }

    /// The stream at `path` with its events after its seq `after` (at most
    /// `max_bytes`), if it exists and has not expired (an expired one is
    /// deleted first).
    pub(super) async fn read(
        &self,
        path: &str,
        after: u64,
        max_bytes: usize,
    ) -> Result<Option<View>, HistoryError> {
        let log = log_of(path);
        let Some(snapshot) = self.history.after(&log, after, max_bytes).await? else {
            return Ok(None);
        };
        let mut view = View::of(snapshot)?;
        if view.base > 0 && after != u64::MAX {
            // The first read took `after` as the log's seq.
            let log_after = after.saturating_sub(view.base);
            let Some(snapshot) = self.history.after(&log, log_after, max_bytes).await? else {
                return Ok(None);
            };
            view = View::of(snapshot)?;
        }
        if view.soft_deleted() && view.forks() == 0 {
            // Marked deleted, its last fork gone, but its log not deleted
            // (Redis failed between the two steps): finish the removal.
            self.purge(path, view.settings.forked_from.clone()).await?;
            return Ok(None);
        }
        if !view.soft_deleted() && view.expired(now_ms()) {
            self.remove(path, &view).await?;
            return Ok(None);
        }
        Ok(Some(view))
    }

    /// The stream at `path`, its meta only.
    pub(crate) async fn look(&self, path: &str) -> Result<Option<View>, HistoryError> {
        self.read(path, u64::MAX, 0).await
    }

    /// Restarts a `Stream-TTL` stream's clock (at most once a second).
    pub(super) async fn touch(&self, path: &str, view: &View) {
        if view.settings.ttl_secs.is_none() {
            return;
        }
        let now = now_ms();
        let last = view
            .meta
            .get(field::ACCESSED)
            .and_then(|t| t.parse::<u64>().ok())
            .unwrap_or(0);
        if now.saturating_sub(last) < ACCESS_RESOLUTION_MS {
            return;
        }
        let update = MetaUpdate {
            raise: vec![(field::ACCESSED.to_owned(), now)],
            ..MetaUpdate::default()
        };
        if let Err(error) = self.history.update_meta(&log_of(path), &update).await {
            tracing::debug!(%error, "refreshing a stream's access time");
        }
    }

    /// An append with `guard` (meta writes only when `payloads` is empty):
    /// `Ok(None)` when the meta changed since `view` was read.
    async fn guarded(
        &self,
        path: &str,
        view: &View,
        payloads: &[Bytes],
        mut guard: Guard,
    ) -> Result<Option<(u64, u64)>, HistoryError> {
        guard.next_epoch = Some(self.generations.next().max(view.epoch + 1));
        self.history
            .append_guarded(
                &log_of(path),
                view.known(),
                payloads,
                &guard,
                self.deadline(),
            )
            .await
    }

    /// Creates the stream `settings` describes at `path` (with `body` as
    /// its first message), or finds the same one.
    pub(crate) async fn create(
        &self,
        path: &str,
        mut settings: Settings,
        closed: bool,
        body: &[u8],
        publish_key: Option<PublishKey>,
    ) -> Result<SharedCreated, CreateRefusal> {
        let history_down = |error: HistoryError| {
            tracing::warn!(%error, "shared history (durable streams create)");
            CreateRefusal::Unavailable
        };
        let mut inherited = Vec::new();
        let mut numbering = Numbering::default();
        let mut base = 0;
        let source_view = match &settings.forked_from {
            Some(source) => {
                let view = self
                    .look(source)
                    .await
                    .map_err(history_down)?
                    .ok_or(CreateRefusal::NoSource)?;
                if view.soft_deleted() {
                    return Err(CreateRefusal::SourceSoftDeleted);
                }
                Some(view)
            }
            None => None,
        };
        if let Some(source) = &source_view {
            if settings.content_type.is_empty() {
                settings.content_type = source.settings.content_type.clone();
            } else if media_type(&settings.content_type)
                != media_type(&source.settings.content_type)
            {
                return Err(CreateRefusal::ContentTypeMismatch);
            }
            let offset = settings.fork_offset.unwrap_or_else(|| source.tail());
            let seq = source
                .numbering
                .seq_of(offset, source.published)
                .ok_or(CreateRefusal::BadForkOffset)?;
            settings.fork_offset = Some(offset);
            if settings.ttl_secs.is_none() && settings.expires_at.is_none() {
                settings.ttl_secs = source.settings.ttl_secs;
                settings.expires_at = source.settings.expires_at.clone();
            }
            let source_path = settings.forked_from.clone().unwrap_or_default();
            base = source
                .first_retained
                .saturating_sub(1)
                .max(source.numbering.start_after())
                .min(seq);
            inherited = self
                .events_between(&source_path, base, seq)
                .await
                .map_err(history_down)?;
            if settings.fork_sub_offset > 0 {
                let prefix = self
                    .prefix_after(&source_path, seq, settings.fork_sub_offset, source.json())
                    .await?;
                inherited.push(Bytes::from(prefix));
            }
            numbering = Numbering::new(
                source.numbering.fork_lineage(seq),
                0,
                source.numbering.start_after(),
            );
        }
        if settings.content_type.is_empty() {
            settings.content_type = "application/octet-stream".to_owned();
        }
        let json = media_type(&settings.content_type) == "application/json";
        let initial = match (json, body.is_empty()) {
            (_, true) => None,
            (true, false) => json_mode::payload(body, true).map_err(CreateRefusal::Json)?,
            (false, false) => Some(body.to_vec()),
        };
        let mut first = inherited;
        first.extend(initial.map(Bytes::from));
        if let Some(large) = first.iter().find(|p| p.len() > self.max_payload) {
            return Err(CreateRefusal::TooLarge {
                len: large.len(),
                max: self.max_payload,
            });
        }
        let generation = self.generations.next();
        let mut meta = Meta::new();
        let mut put = |name: &str, value: String| {
            meta.insert(name.to_owned(), value);
        };
        put(field::CONTENT_TYPE, settings.content_type.clone());
        if let Some(ttl) = settings.ttl_secs {
            put(field::TTL, ttl.to_string());
        }
        if let Some((raw, _)) = &settings.expires_at {
            put(field::EXPIRES_AT, raw.clone());
        }
        if let Some(source) = &settings.forked_from {
            put(field::FORKED_FROM, source.clone());
        }
        if let Some(offset) = settings.fork_offset {
            put(field::FORK_OFFSET, offset.to_string());
        }
        if settings.fork_sub_offset > 0 {
            put(field::FORK_SUB_OFFSET, settings.fork_sub_offset.to_string());
        }
        if let Some(key) = publish_key {
            put(field::PUBLISH_KEY, key.to_string());
        }
        put(field::INIT, "pending".to_owned());
        put(field::FORKS, "0".to_owned());
        put(field::ACCESSED, now_ms().to_string());
        put(field::LINEAGE, numbering.encode_lineage());
        put(field::BASE, base.to_string());
        put(field::START, numbering.start_after().to_string());
        let log = log_of(path);
        let created = self
            .history
            .create(&log, generation, &meta)
            .await
            .map_err(history_down)?;
        if !created {
            let view = self
                .look(path)
                .await
                .map_err(history_down)?
                .ok_or(CreateRefusal::Unavailable)?;
            if view.soft_deleted() {
                return Err(CreateRefusal::SoftDeleted);
            }
            if !same_settings(&view, &settings, closed) {
                return Err(CreateRefusal::Conflict);
            }
            if view.initialised() {
                return Ok(SharedCreated::Existing(view));
            }
            // A create that stopped before its first batch: this request
            // (the same settings) puts it in.
        } else if let Some(source) = &settings.forked_from {
            self.claim_source(source).await?;
        }
        let view = self
            .look(path)
            .await
            .map_err(history_down)?
            .ok_or(CreateRefusal::Unavailable)?;
        let mut set = vec![(field::INIT.to_owned(), "done".to_owned())];
        if closed {
            set.push((field::CLOSED.to_owned(), "1".to_owned()));
        }
        let guard = Guard {
            expect: vec![(field::INIT.to_owned(), Some("pending".to_owned()))],
            set,
            next_epoch: None,
            unset: Vec::new(),
        };
        if view.epoch != generation && created {
            tracing::debug!("a stream's log moved epoch before its first batch");
        }
        match self.guarded(path, &view, &first, guard).await {
            // Put in here, or by a concurrent retry of the same create.
            Ok(_) => {}
            Err(error) => return Err(history_down(error)),
        }
        let view = self
            .look(path)
            .await
            .map_err(history_down)?
            .ok_or(CreateRefusal::Unavailable)?;
        Ok(match created {
            true => SharedCreated::New(view),
            false => SharedCreated::Existing(view),
        })
    }

    /// The source's messages `after + 1 ..= last` (its stream seqs).
    async fn events_between(
        &self,
        path: &str,
        after: u64,
        last: u64,
    ) -> Result<Vec<Bytes>, HistoryError> {
        let mut events = Vec::new();
        let mut cursor = after;
        while cursor < last {
            let Some(view) = self.read(path, cursor, PAGE_BYTES).await? else {
                return Err(HistoryError::Gone);
            };
            let mut progressed = false;
            for (seq, payload) in view.events {
                if seq != cursor + 1 || seq > last {
                    break;
                }
                cursor = seq;
                events.push(payload);
                progressed = true;
            }
            if !progressed {
                // Trimmed meanwhile: the fork starts where the source now
                // does (its readers get the 410 for the rest).
                return Ok(events);
            }
        }
        Ok(events)
    }

    /// The first bytes (or JSON values) of the source's message after
    /// `seq`: a fork's sub-offset.
    async fn prefix_after(
        &self,
        path: &str,
        seq: u64,
        sub: u64,
        json: bool,
    ) -> Result<Vec<u8>, CreateRefusal> {
        let view = self
            .read(path, seq, 1)
            .await
            .map_err(|_| CreateRefusal::Unavailable)?
            .ok_or(CreateRefusal::NoSource)?;
        let Some((_, payload)) = view.events.into_iter().find(|(s, _)| *s == seq + 1) else {
            return Err(CreateRefusal::BadSubOffset(
                "no message after the fork offset",
            ));
        };
        sub_offset_prefix(&payload, sub, json).map_err(CreateRefusal::BadSubOffset)
    }

    /// Counts a new fork on `source`, unless it was deleted meanwhile.
    async fn claim_source(&self, source: &str) -> Result<(), CreateRefusal> {
        for _ in 0..DECIDE_TRIES {
            let view = self
                .look(source)
                .await
                .map_err(|_| CreateRefusal::Unavailable)?
                .ok_or(CreateRefusal::NoSource)?;
            let guard = Guard {
                expect: vec![
                    (field::DELETED.to_owned(), None),
                    as_read(&view, field::FORKS),
                ],
                set: vec![(field::FORKS.to_owned(), (view.forks() + 1).to_string())],
                next_epoch: None,
                unset: Vec::new(),
            };
            match self.guarded(source, &view, &[], guard).await {
                Ok(Some(_)) => return Ok(()),
                Ok(None) if view.soft_deleted() => return Err(CreateRefusal::SourceSoftDeleted),
                Ok(None) => continue,
                Err(_) => return Err(CreateRefusal::Unavailable),
            }
        }
        Err(CreateRefusal::Unavailable)
    }

    /// Appends `body` to the stream at `path` as `request` says, deciding
    /// on its meta in the same step as the append.
    pub(crate) async fn append(
        &self,
        path: &str,
        body: &[u8],
        request: &AppendRequest<'_>,
        check: impl Fn(&View) -> Result<(), AppendRefusal>,
    ) -> Result<Appended, AppendRefusal> {
        for _ in 0..DECIDE_TRIES {
            let view = self
                .look(path)
                .await
                .map_err(|e| unavailable(&e))?
                .ok_or(AppendRefusal::Gone)?;
            check(&view)?;
            if !view.initialised() {
                return Err(AppendRefusal::Unavailable);
            }
            let (producer_field, producer_held) = match request.producer {
                Some((id, _, _)) => {
                    let (name, held) = view.producer(id);
                    (Some(name), held.cloned())
                }
                None => (None, None),
            };
            let closed_by = view.meta.get(field::CLOSED_BY).and_then(|text| {
                let mut parts = text.rsplitn(3, ' ');
                let seq = parts.next()?.parse().ok()?;
                let epoch = parts.next()?.parse().ok()?;
                Some((parts.next()?.to_owned(), epoch, seq))
            });
            let state = WriterState {
                closed: view.closed(),
                closed_by: closed_by
                    .as_ref()
                    .map(|(id, epoch, seq)| (id.as_str(), *epoch, *seq)),
                stream_seq: view.meta.get(field::STREAM_SEQ).map(String::as_str),
                producer: producer_held.as_deref().and_then(Producer::parse),
            };
            if let Decision::Answer(answer) = decide(&state, request, body.is_empty(), view.tail())?
            {
                self.touch(path, &view).await;
                return Ok(answer);
            }
            let payload = match (view.json(), body.is_empty()) {
                (_, true) => None,
                (true, false) => json_mode::payload(body, false).map_err(AppendRefusal::Json)?,
                (false, false) => Some(body.to_vec()),
            };
            if let Some(payload) = &payload {
                if payload.len() > self.max_payload {
                    return Err(AppendRefusal::TooLarge {
                        len: payload.len(),
                        max: self.max_payload,
                    });
                }
            }
            let mut guard = Guard {
                expect: vec![
                    (field::CLOSED.to_owned(), None),
                    (field::DELETED.to_owned(), None),
                    as_read(&view, field::STREAM_SEQ),
                ],
                set: vec![(field::ACCESSED.to_owned(), now_ms().to_string())],
                next_epoch: None,
                unset: Vec::new(),
            };
            if let (Some(name), Some((id, epoch, seq))) = (producer_field, request.producer) {
                guard.expect.push((name.clone(), producer_held));
                guard.set.push((
                    name,
                    Producer {
                        epoch,
                        last_seq: seq,
                    }
                    .encode(),
                ));
                if request.close {
                    guard
                        .set
                        .push((field::CLOSED_BY.to_owned(), format!("{id} {epoch} {seq}")));
                }
            }
            if let Some(seq) = request.stream_seq {
                guard
                    .set
                    .push((field::STREAM_SEQ.to_owned(), seq.to_owned()));
            }
            if request.close {
                guard.set.push((field::CLOSED.to_owned(), "1".to_owned()));
            }
            let payloads: Vec<Bytes> = payload.into_iter().map(Bytes::from).collect();
            match self.guarded(path, &view, &payloads, guard).await {
                Ok(Some((epoch, first))) => {
                    let count = payloads.len() as u64;
                    // The log's last seq now, at the stream's seqs (a new
                    // epoch starts the stream's own numbering afresh).
                    let last_log = first + count - 1;
                    let tail = match epoch == view.epoch {
                        true => view.numbering.offset_of(last_log + view.base),
                        false => Offset {
                            generation: epoch,
                            seq: last_log,
                        },
                    };
                    return Ok(Appended::Done {
                        tail,
                        closed: request.close,
                    });
                }
                Ok(None) => continue,
                Err(HistoryError::Gone) => return Err(AppendRefusal::Gone),
                Err(error) => return Err(unavailable(&error)),
            }
        }
        Err(AppendRefusal::Unavailable)
    }

    /// Deletes the stream at `path`: `Some(true)` deleted (or soft-deleted,
    /// with forks), `Some(false)` already soft-deleted, `None` none.
    pub(crate) async fn delete(
        &self,
        path: &str,
        check: impl Fn(&View) -> Result<(), AppendRefusal>,
    ) -> Result<Option<bool>, AppendRefusal> {
        for _ in 0..DECIDE_TRIES {
            let Some(view) = self.look(path).await.map_err(|e| unavailable(&e))? else {
                return Ok(None);
            };
            if view.soft_deleted() {
                return Ok(Some(false));
            }
            check(&view)?;
            match self.remove(path, &view).await {
                Ok(true) => return Ok(Some(true)),
                Ok(false) => continue,
                Err(HistoryError::Gone) => return Ok(None),
                Err(error) => return Err(unavailable(&error)),
            }
        }
        Err(AppendRefusal::Unavailable)
    }

    /// Removes the stream `view` read (soft while forks live), then
    /// releases its source; `false` when the meta changed meanwhile.
    async fn remove(&self, path: &str, view: &View) -> Result<bool, HistoryError> {
        let guard = Guard {
            expect: vec![
                (field::DELETED.to_owned(), None),
                as_read(view, field::FORKS),
            ],
            set: vec![(field::DELETED.to_owned(), "1".to_owned())],
            next_epoch: None,
            unset: Vec::new(),
        };
        if self.guarded(path, view, &[], guard).await?.is_none() {
            return Ok(false);
        }
        if view.forks() > 0 {
            return Ok(true);
        }
        self.purge(path, view.settings.forked_from.clone()).await?;
        Ok(true)
    }

    /// Deletes the log of the stream at `path` (marked deleted, with no
    /// forks), then releases its source, and the source's when that was
    /// its last fork, and so on.
    async fn purge(&self, path: &str, source: Option<String>) -> Result<(), HistoryError> {
        let mut next = Some((path.to_owned(), source));
        while let Some((path, source)) = next.take() {
            // Only the deleter that found the log releases its source:
            // two purges of one stream never release it twice.
            let deleted = self.history.delete(&log_of(&path)).await?;
            let (true, Some(source)) = (deleted, source) else {
                break;
            };
            next = self.release_source(&source).await?;
        }
        Ok(())
    }

    /// Uncounts a fork of `source`; the source to delete next when it was
    /// soft-deleted and this was its last fork.
    async fn release_source(
        &self,
        source: &str,
    ) -> Result<Option<(String, Option<String>)>, HistoryError> {
        for _ in 0..DECIDE_TRIES {
            // As it is, expired or not (its expiry is the caller's
            // business: this only releases the fork's claim).
            let Some(snapshot) = self.history.after(&log_of(source), u64::MAX, 0).await? else {
                return Ok(None);
            };
            let view = View::of(snapshot)?;
            let left = view.forks().saturating_sub(1);
            let guard = Guard {
                expect: vec![as_read(&view, field::FORKS), as_read(&view, field::DELETED)],
                set: vec![(field::FORKS.to_owned(), left.to_string())],
                next_epoch: None,
                unset: Vec::new(),
            };
            if self.guarded(source, &view, &[], guard).await?.is_some() {
                return Ok((left == 0 && view.soft_deleted())
                    .then(|| (source.to_owned(), view.settings.forked_from.clone())));
            }
        }
        Err(HistoryError::Unavailable(
            "a fork count kept changing under its update".into(),
        ))
    }

    /// A feed of the stream at `path`, following its log.
    pub(crate) fn feed(self: &Arc<Self>, path: &str) -> SharedFeed<H> {
        SharedFeed {
            shared: Arc::clone(self),
            path: path.to_owned(),
            follower: self.history.follow(&log_of(path)),
            epoch: None,
        }
    }
}

/// Whether a create asks for what `view`'s stream was created with.
fn same_settings(view: &View, asked: &Settings, closed: bool) -> bool {
    let have = &view.settings;
    let content_type = |t: &str| match media_type(t) {
        m if m.is_empty() => "application/octet-stream".to_owned(),
        m => m,
    };
    let expiry_matches = asked.ttl_secs == have.ttl_secs
        && asked.expires_at.as_ref().map(|(s, _)| s) == have.expires_at.as_ref().map(|(s, _)| s);
    content_type(&asked.content_type) == content_type(&have.content_type)
        && expiry_matches
        && closed == view.closed()
        && asked.forked_from == have.forked_from
        && (asked.fork_offset.is_none() || asked.fork_offset == have.fork_offset)
        && asked.fork_sub_offset == have.fork_sub_offset
}

#[cfg(test)]
#[path = "shared_tests.rs"]
mod tests;
