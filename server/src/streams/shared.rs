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

use super::json_mode;
use super::numbering::Numbering;
use super::offset::{Generations, Offset};
use super::registry::CreateRefusal;
use super::rules::{
    decide, AppendRefusal, AppendRequest, Appended, Decision, Producer, WriterState,
};
use super::settings::{media_type, Settings};
use super::stream::ProducerLimits;
use crate::history::{
    Guard, History, HistoryError, Known, LogId, LogKind, Meta, MetaUpdate, Snapshot,
};
use crate::ids::PublishKey;
use bytes::Bytes;
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// Meta fields (the history keeps each as `c:<name>`).
pub(super) mod field {
    pub(crate) const CONTENT_TYPE: &str = "ct";
    pub(crate) const TTL: &str = "ttl";
    pub(crate) const EXPIRES_AT: &str = "exp";
    pub(crate) const FORKED_FROM: &str = "fork";
    pub(crate) const FORK_OFFSET: &str = "fork_off";
    pub(crate) const FORK_SUB_OFFSET: &str = "fork_sub";
    pub(crate) const PUBLISH_KEY: &str = "pk";
    /// `pending` until the create's first batch (initial body, a fork's
    /// inheritance) is in, then `done`.
    pub(crate) const INIT: &str = "init";
    pub(crate) const CLOSED: &str = "closed";
    pub(crate) const CLOSED_BY: &str = "closed_by";
    pub(crate) const STREAM_SEQ: &str = "sseq";
    /// Live forks of the stream.
    pub(crate) const FORKS: &str = "forks";
    /// Deleted while forks live (`1`).
    pub(crate) const DELETED: &str = "deleted";
    /// The last access, in ms since the Unix epoch (for `Stream-TTL`).
    pub(crate) const ACCESSED: &str = "atime";
    /// Per epoch: the lineage, the log's base, the stream's start.
    pub(crate) const LINEAGE: &str = "epoch/lineage";
    pub(crate) const BASE: &str = "epoch/base";
    pub(crate) const START: &str = "epoch/start";
    /// An idempotent producer's state: `p/<id>`, as `<epoch> <last seq>
    /// <ms of its last append>`.
    pub(crate) const PRODUCER: &str = "p/";
    /// How many `p/<id>` fields the meta holds.
    pub(crate) const PRODUCERS: &str = "producers";
    /// A fork's claim on its source, in the source's meta: `f/<the fork's
    /// log>`. Counted in `forks` once however often the fork's create is
    /// retried, and released (removed, `forks` lowered) once however many
    /// removals of the fork race.
    pub(crate) const FORK_CLAIM: &str = "f/";
    /// What the log holds: `stream` (see `crate::history::LogKind`).
    pub(crate) const KIND: &str = crate::history::LogKind::FIELD;
    /// The creating client (its address), whose admission set counts it.
    pub(crate) const CLIENT: &str = "client";

    /// The fields every look and read asks for (a producer's or a claim's
    /// field is named on top by the operation that needs it): never the
    /// whole meta, whose producer fields may be many.
    pub(crate) const VIEW: [&str; 20] = [
        CONTENT_TYPE,
        TTL,
        EXPIRES_AT,
        FORKED_FROM,
        FORK_OFFSET,
        FORK_SUB_OFFSET,
        PUBLISH_KEY,
        INIT,
        CLOSED,
        CLOSED_BY,
        STREAM_SEQ,
        FORKS,
        DELETED,
        ACCESSED,
        LINEAGE,
        BASE,
        START,
        PRODUCERS,
        KIND,
        CLIENT,
    ];
}

/// The field of a fork's claim on its source.
pub(super) fn claim_field(fork_path: &str) -> String {
    format!("{}{}", field::FORK_CLAIM, log_of(fork_path))
}

/// A producer's field value: its state and when it last appended.
fn producer_value(state: Producer, at_ms: u64) -> String {
    format!("{} {at_ms}", state.encode())
}

/// The inverse of [`producer_value`] (a value written before the time was
/// kept has none: never idle).
fn parse_producer(text: &str) -> Option<(Producer, Option<u64>)> {
    let mut parts = text.split(' ');
    let state = Producer {
        epoch: parts.next()?.parse().ok()?,
        last_seq: parts.next()?.parse().ok()?,
    };
    let at = match parts.next() {
        Some(at) => Some(at.parse().ok()?),
        None => None,
    };
    Some((state, at))
}

/// Whether a refusal is the history's lack of room: Redis at its memory
/// limit (`OOM command not allowed`, with `noeviction`), or the disk of
/// `--data-dir` full. A write of a stream answers `507`.
pub(crate) fn is_full(error: &HistoryError) -> bool {
    match error {
        HistoryError::Full(_) => true,
        HistoryError::Unavailable(cause) => cause.contains("OOM"),
        _ => false,
    }
}

/// Decisions retried at most on a meta that keeps changing under them.
pub(super) const DECIDE_TRIES: usize = 32;
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

pub(super) fn now_ms() -> u64 {
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
    match is_full(error) {
        true => AppendRefusal::StorageFull,
        false => AppendRefusal::Unavailable,
    }
}

pub(super) fn create_unavailable(error: &HistoryError) -> CreateRefusal {
    tracing::warn!(%error, "shared history (durable streams create)");
    match is_full(error) {
        true => CreateRefusal::StorageFull,
        false => CreateRefusal::Unavailable,
    }
}

/// One stream as one read of its log saw it.
pub(crate) struct View {
    /// The log's epoch: the stream's own generation.
    pub(super) epoch: u64,
    /// The log's last seq.
    pub(super) log_published: u64,
    /// The stream's seq of the log's seq 0.
    pub(super) base: u64,
    /// The stream's seqs `first_retained ..= published` are retained.
    pub(super) first_retained: u64,
    pub(super) published: u64,
    pub(crate) settings: Settings,
    pub(crate) numbering: Numbering,
    pub(super) meta: Meta,
    /// Events read with it, at the stream's seqs.
    pub(super) events: Vec<(u64, Bytes)>,
}

impl View {
    pub(super) fn of(snapshot: Snapshot) -> Result<Self, HistoryError> {
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

    pub(super) fn flag(&self, name: &str) -> bool {
        self.meta.get(name).is_some_and(|v| v == "1")
    }

    pub(crate) fn closed(&self) -> bool {
        self.flag(field::CLOSED)
    }

    pub(crate) fn soft_deleted(&self) -> bool {
        self.flag(field::DELETED)
    }

    pub(super) fn forks(&self) -> u64 {
        self.meta
            .get(field::FORKS)
            .and_then(|t| t.parse().ok())
            .unwrap_or(0)
    }

    /// The last access the meta holds (ms since the Unix epoch).
    pub(super) fn accessed(&self) -> u64 {
        self.meta
            .get(field::ACCESSED)
            .and_then(|t| t.parse().ok())
            .unwrap_or(0)
    }

    /// The creating client, whose admission set counts the stream.
    pub(super) fn client(&self) -> Option<&str> {
        self.meta.get(field::CLIENT).map(String::as_str)
    }

    pub(super) fn producers(&self) -> u64 {
        self.meta
            .get(field::PRODUCERS)
            .and_then(|t| t.parse().ok())
            .unwrap_or(0)
    }

    pub(super) fn initialised(&self) -> bool {
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

    /// Whether `Stream-TTL` or `Stream-Expires-At` has passed (the one
    /// rule of [`Settings::expired`], on the last access the meta holds).
    pub(super) fn expired(&self, now_ms: u64) -> bool {
        let idle_ms = match self.meta.get(field::ACCESSED) {
            Some(accessed) => accessed
                .parse::<u64>()
                .map_or(0, |at| now_ms.saturating_sub(at)),
            None => 0,
        };
        self.settings.expired(idle_ms, SystemTime::now)
    }

    pub(super) fn known(&self) -> Known {
        Known {
            epoch: self.epoch,
            published: self.log_published,
        }
    }
}

/// A guard that expects `name` to hold what `view` read of it.
pub(super) fn as_read(view: &View, name: &str) -> (String, Option<String>) {
    (name.to_owned(), view.meta.get(name).cloned())
}

/// What a create found or made.
pub(crate) enum SharedCreated {
    New(View),
    Existing(View),
}

/// What a stream's writes and reads need of the shared history.
pub(crate) struct SharedStreams<H> {
    pub(super) history: Arc<H>,
    pub(super) generations: Generations,
    /// The largest message a stream takes: the ring's largest payload.
    pub(super) max_payload: usize,
    /// Each history call's deadline.
    pub(super) timeout: Duration,
    /// How many producers a stream keeps, and for how long.
    pub(super) producer_limits: ProducerLimits,
    /// How many streams the shared history holds, in all and per client.
    pub(super) admission: Admission,
}

/// How many streams the shared history admits, counted in Redis (every
/// instance enforces the same bound) in two admission sets: every
/// stream's log, and each client's. A member's place lasts `ttl` (the
/// history's key time to live), renewed by the stream's appends and reads
/// at most every fifth of it: a stream whose keys expired unnoticed stops
/// counting by itself.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Admission {
    /// Streams in all (`--max-durable-streams`).
    pub(crate) total: u64,
    /// Streams one client created (`--max-durable-streams-per-client`).
    pub(crate) per_client: u64,
    /// How long a place lasts without a renewal.
    pub(crate) ttl: Duration,
}

impl Default for Admission {
    /// Unbounded (embedders and tests that set none).
    fn default() -> Self {
        Self {
            total: u64::MAX,
            per_client: u64::MAX,
            ttl: Duration::from_secs(720),
        }
    }
}

impl<H: History> SharedStreams<H> {
    pub(crate) fn new(history: Arc<H>, max_payload: usize, timeout: Duration) -> Self {
        Self {
            history,
            generations: Generations::default(),
            max_payload,
            timeout,
            producer_limits: ProducerLimits::default(),
            admission: Admission::default(),
        }
    }

    /// The same streams admitted within `admission`.
    pub(crate) fn with_admission(mut self, admission: Admission) -> Self {
        self.admission = admission;
        self
    }

    /// The same streams with `limits` on each stream's producers.
    pub(crate) fn with_producer_limits(mut self, limits: ProducerLimits) -> Self {
        self.producer_limits = limits;
        self
    }

    pub(super) fn deadline(&self) -> Instant {
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
        self.read_with(path, after, max_bytes, &[]).await
    }

    /// [`read`](Self::read), with the fields of [`field::VIEW`] and
    /// `extra` of the meta (never the whole meta). A log that is not a
    /// stream's (a session's: its id is a log id too) is none.
    pub(super) async fn read_with(
        &self,
        path: &str,
        after: u64,
        max_bytes: usize,
        extra: &[&str],
    ) -> Result<Option<View>, HistoryError> {
        let log = log_of(path);
        let names: Vec<&str> = field::VIEW
            .iter()
            .copied()
            .chain(extra.iter().copied())
            .collect();
        let Some(snapshot) = self
            .history
            .after_fields(&log, after, max_bytes, &names)
            .await?
        else {
            return Ok(None);
        };
        if LogKind::of(&snapshot.meta) != Some(LogKind::Stream) {
            return Ok(None);
        }
        let mut view = View::of(snapshot)?;
        if view.base > 0 && after != u64::MAX {
            // The first read took `after` as the log's seq.
            let log_after = after.saturating_sub(view.base);
            let Some(snapshot) = self
                .history
                .after_fields(&log, log_after, max_bytes, &names)
                .await?
            else {
                return Ok(None);
            };
            view = View::of(snapshot)?;
        }
        if view.soft_deleted() && view.forks() == 0 {
            // Marked deleted, its last fork gone, but its log not deleted
            // (Redis failed between the two steps): finish the removal.
            self.purge(path, view.settings.forked_from.clone(), view.client())
                .await?;
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
    ///
    /// Any stream's access time is also raised, and its admission places
    /// renewed, every fifth of their time to live: a stream only read
    /// keeps its place.
    pub(super) async fn touch(&self, path: &str, view: &View) {
        let now = now_ms();
        let since = now.saturating_sub(view.accessed());
        let ttl_due = view.settings.ttl_secs.is_some() && since >= ACCESS_RESOLUTION_MS;
        let renew_due = since >= self.renew_every_ms();
        if renew_due {
            self.renew_places(path, view.client()).await;
        }
        if !(ttl_due || renew_due) {
            return;
        }
        let update = MetaUpdate {
            raise: vec![(field::ACCESSED.to_owned(), now)],
            // Nothing read back: the meta is not moved for a touch.
            fields: Some(Vec::new()),
            ..MetaUpdate::default()
        };
        if let Err(error) = self.history.update_meta(&log_of(path), &update).await {
            tracing::debug!(%error, "refreshing a stream's access time");
        }
    }

    /// An append with `guard` (meta writes only when `payloads` is empty):
    /// `Ok(None)` when the meta changed since `view` was read.
    pub(super) async fn guarded(
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

    /// The producers to drop so that a new one fits in `path`'s cap: the
    /// ones idle past the limit, then the idlest, down to seven eighths
    /// of the cap (so this whole-meta read is made once per cap/8 new
    /// producers, not per append), each with the value it was read at.
    pub(super) async fn evictions(
        &self,
        path: &str,
        now: u64,
    ) -> Result<Vec<(String, String)>, HistoryError> {
        let Some(snapshot) = self.history.after(&log_of(path), u64::MAX, 0).await? else {
            return Err(HistoryError::Gone);
        };
        let limits = self.producer_limits;
        let idle_ms = u64::try_from(limits.idle.as_millis()).unwrap_or(u64::MAX);
        let mut producers: Vec<(String, String, u64)> = snapshot
            .meta
            .into_iter()
            .filter(|(name, _)| name.starts_with(field::PRODUCER))
            .map(|(name, value)| {
                let at = parse_producer(&value).and_then(|(_, at)| at).unwrap_or(0);
                (name, value, at)
            })
            .collect();
        producers.sort_by_key(|(_, _, at)| *at);
        let keep = limits.per_stream - limits.per_stream / 8 - 1;
        let expired = producers
            .iter()
            .take_while(|(_, _, at)| now.saturating_sub(*at) >= idle_ms)
            .count();
        let drop = expired.max(producers.len().saturating_sub(keep));
        Ok(producers
            .into_iter()
            .take(drop)
            .map(|(name, value, _)| (name, value))
            .collect())
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
        let producer_field = request
            .producer
            .map(|(id, _, _)| format!("{}{id}", field::PRODUCER));
        let extra: Vec<&str> = producer_field.iter().map(String::as_str).collect();
        // Parsed once, when the first look tells the stream's mode; a
        // retry reuses it (`Bytes`: no copy).
        let mut parsed: Option<Result<Option<Bytes>, AppendRefusal>> = None;
        for _ in 0..DECIDE_TRIES {
            let view = self
                .read_with(path, u64::MAX, 0, &extra)
                .await
                .map_err(|e| unavailable(&e))?
                .ok_or(AppendRefusal::Gone)?;
            check(&view)?;
            if !view.initialised() {
                return Err(AppendRefusal::Unavailable);
            }
            let now = now_ms();
            let producer_held = producer_field
                .as_ref()
                .and_then(|name| view.meta.get(name).cloned());
            let idle_ms = u64::try_from(self.producer_limits.idle.as_millis()).unwrap_or(u64::MAX);
            let known = producer_held
                .as_deref()
                .and_then(parse_producer)
                .filter(|(_, at)| at.is_none_or(|at| now.saturating_sub(at) < idle_ms))
                .map(|(state, _)| state);
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
                producer: known,
            };
            if let Decision::Answer(answer) = decide(&state, request, body.is_empty(), view.tail())?
            {
                self.touch(path, &view).await;
                return Ok(answer);
            }
            let payload = parsed
                .get_or_insert_with(|| match (view.json(), body.is_empty()) {
                    (_, true) => Ok(None),
                    (true, false) => json_mode::payload(body, false)
                        .map(|payload| payload.map(Bytes::from))
                        .map_err(AppendRefusal::Json),
                    (false, false) => Ok(Some(Bytes::copy_from_slice(body))),
                })
                .clone()?;
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
                set: vec![(field::ACCESSED.to_owned(), now.to_string())],
                ..Guard::default()
            };
            if let (Some(name), Some((id, epoch, seq))) = (&producer_field, request.producer) {
                guard.expect.push((name.clone(), producer_held.clone()));
                let state = Producer {
                    epoch,
                    last_seq: seq,
                };
                guard.set.push((name.clone(), producer_value(state, now)));
                if producer_held.is_none() {
                    // A producer new to the stream is counted; at the cap,
                    // the idle and the idlest make room.
                    let mut count = view.producers() + 1;
                    guard.expect.push(as_read(&view, field::PRODUCERS));
                    if view.producers() >= self.producer_limits.per_stream as u64 {
                        let evicted = self.evictions(path, now).await.map_err(|e| match e {
                            HistoryError::Gone => AppendRefusal::Gone,
                            e => unavailable(&e),
                        })?;
                        for (name, value) in evicted {
                            count -= 1;
                            guard.expect.push((name.clone(), Some(value)));
                            guard.unset.push(name);
                        }
                    }
                    guard
                        .set
                        .push((field::PRODUCERS.to_owned(), count.to_string()));
                }
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
            let payloads: Vec<Bytes> = payload.into_iter().collect();
            match self.guarded(path, &view, &payloads, guard).await {
                Ok(Some((epoch, first))) => {
                    if now.saturating_sub(view.accessed()) >= self.renew_every_ms() {
                        self.renew_places(path, view.client()).await;
                    }
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
    /// releases its source; `false` when the meta changed meanwhile. The
    /// guard includes the last access: an append acknowledged after the
    /// look (which restarted a TTL) refuses the removal, and the caller
    /// decides again on what it finds.
    pub(super) async fn remove(&self, path: &str, view: &View) -> Result<bool, HistoryError> {
        let guard = Guard {
            expect: vec![
                (field::DELETED.to_owned(), None),
                as_read(view, field::FORKS),
                as_read(view, field::ACCESSED),
            ],
            set: vec![(field::DELETED.to_owned(), "1".to_owned())],
            ..Guard::default()
        };
        if self.guarded(path, view, &[], guard).await?.is_none() {
            return Ok(false);
        }
        if view.forks() > 0 {
            return Ok(true);
        }
        self.purge(path, view.settings.forked_from.clone(), view.client())
            .await?;
        Ok(true)
    }

    /// Deletes the log of the stream at `path` (marked deleted, with no
    /// forks), then releases its source, and the source's when that was
    /// its last fork, and so on.
    pub(super) async fn purge(
        &self,
        path: &str,
        source: Option<String>,
        client: Option<&str>,
    ) -> Result<(), HistoryError> {
        let mut next = Some((path.to_owned(), source, client.map(str::to_owned)));
        while let Some((path, source, client)) = next.take() {
            // Only the deleter that found the log releases its source, and
            // the release removes the fork's claim: two purges of one
            // stream never release it twice.
            let deleted = self.history.delete(&log_of(&path)).await?;
            if deleted {
                self.give_back(&path, client.as_deref(), (true, true)).await;
            }
            let (true, Some(source)) = (deleted, source) else {
                break;
            };
            next = self.release_source(&source, &path).await?;
        }
        Ok(())
    }

    /// Uncounts the fork at `fork_path` on `source` (removes its claim and
    /// lowers `forks`, in one guarded step; nothing if it holds no claim);
    /// the source to delete next when it was soft-deleted and this was its
    /// last fork.
    pub(super) async fn release_source(
        &self,
        source: &str,
        fork_path: &str,
    ) -> Result<Option<(String, Option<String>, Option<String>)>, HistoryError> {
        let claim = claim_field(fork_path);
        let names = [
            field::FORKS,
            field::DELETED,
            field::FORKED_FROM,
            field::KIND,
            field::CONTENT_TYPE,
            field::CLIENT,
            claim.as_str(),
        ];
        for _ in 0..DECIDE_TRIES {
            // As it is, expired or not (its expiry is the caller's
            // business: this only releases the fork's claim).
            let Some(snapshot) = self
                .history
                .after_fields(&log_of(source), u64::MAX, 0, &names)
                .await?
            else {
                return Ok(None);
            };
            if !snapshot.meta.contains_key(&claim) {
                return Ok(None);
            }
            let view = View::of(snapshot)?;
            let left = view.forks().saturating_sub(1);
            let guard = Guard {
                expect: vec![
                    as_read(&view, field::FORKS),
                    as_read(&view, field::DELETED),
                    as_read(&view, &claim),
                ],
                set: vec![(field::FORKS.to_owned(), left.to_string())],
                unset: vec![claim.clone()],
                ..Guard::default()
            };
            if self.guarded(source, &view, &[], guard).await?.is_some() {
                return Ok((left == 0 && view.soft_deleted()).then(|| {
                    (
                        source.to_owned(),
                        view.settings.forked_from.clone(),
                        view.client().map(str::to_owned),
                    )
                }));
            }
        }
        Err(HistoryError::Unavailable(
            "a fork count kept changing under its update".into(),
        ))
    }

    /// A follower of the appends to the stream at `path`'s log.
    pub(super) fn follow(&self, path: &str) -> H::Follower {
        self.history.follow(&log_of(path))
    }
}

#[cfg(test)]
#[path = "shared_tests.rs"]
mod tests;
