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
use super::registry::{initial_payload, CreateRefusal};
use super::rules::{
    decide, AppendRefusal, AppendRequest, Appended, Decision, Producer, WriterState,
};
use super::stream::{media_type, sub_offset_prefix, ProducerLimits, Settings};
use crate::client_addr::ClientKey;
use crate::history::{
    Admission as Admitted, Guard, History, HistoryError, Known, LogId, LogKind, Meta, MetaUpdate,
    Snapshot,
};
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
    /// An idempotent producer's state: `p/<id>`, as `<epoch> <last seq>
    /// <ms of its last append>`.
    pub(super) const PRODUCER: &str = "p/";
    /// How many `p/<id>` fields the meta holds.
    pub(super) const PRODUCERS: &str = "producers";
    /// A fork's claim on its source, in the source's meta: `f/<the fork's
    /// log>`. Counted in `forks` once however often the fork's create is
    /// retried, and released (removed, `forks` lowered) once however many
    /// removals of the fork race.
    pub(super) const FORK_CLAIM: &str = "f/";
    /// What the log holds: `stream` (see `crate::history::LogKind`).
    pub(super) const KIND: &str = crate::history::LogKind::FIELD;
    /// The creating client (its address), whose admission set counts it.
    pub(super) const CLIENT: &str = "client";

    /// The fields every look and read asks for (a producer's or a claim's
    /// field is named on top by the operation that needs it): never the
    /// whole meta, whose producer fields may be many.
    pub(super) const VIEW: [&str; 20] = [
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
fn claim_field(fork_path: &str) -> String {
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

/// Whether a Redis refusal is its memory limit (`OOM command not
/// allowed`, with `noeviction`): a write of a stream answers `507`.
pub(crate) fn is_full(error: &HistoryError) -> bool {
    matches!(error, HistoryError::Unavailable(cause) if cause.contains("OOM"))
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
    match is_full(error) {
        true => AppendRefusal::StorageFull,
        false => AppendRefusal::Unavailable,
    }
}

fn create_unavailable(error: &HistoryError) -> CreateRefusal {
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

    /// The last access the meta holds (ms since the Unix epoch).
    fn accessed(&self) -> u64 {
        self.meta
            .get(field::ACCESSED)
            .and_then(|t| t.parse().ok())
            .unwrap_or(0)
    }

    /// The creating client, whose admission set counts the stream.
    fn client(&self) -> Option<&str> {
        self.meta.get(field::CLIENT).map(String::as_str)
    }

    fn producers(&self) -> u64 {
        self.meta
            .get(field::PRODUCERS)
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

    /// Whether `Stream-TTL` or `Stream-Expires-At` has passed (the one
    /// rule of [`Settings::expired`], on the last access the meta holds).
    fn expired(&self, now_ms: u64) -> bool {
        let idle_ms = match self.meta.get(field::ACCESSED) {
            Some(accessed) => accessed
                .parse::<u64>()
                .map_or(0, |at| now_ms.saturating_sub(at)),
            None => 0,
        };
        self.settings.expired(idle_ms, SystemTime::now())
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
    /// How many producers a stream keeps, and for how long.
    producer_limits: ProducerLimits,
    /// How many streams the shared history holds, in all and per client.
    admission: Admission,
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

/// The admission set of every stream.
const ALL_STREAMS: &str = "durable-streams";

/// The admission set of `client`'s streams.
fn client_set(client: &str) -> String {
    format!("durable-streams/{client}")
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

    /// How often a stream's places are renewed, at most.
    fn renew_every_ms(&self) -> u64 {
        u64::try_from(self.admission.ttl.as_millis() / 5).unwrap_or(u64::MAX)
    }

    /// Takes the new stream at `path` a place in all and in `client`'s
    /// set: `Ok(added)`, what this call added (a place the same stream
    /// already held is not added again, nor given back on failure).
    async fn admit(&self, path: &str, client: Option<&str>) -> Result<(bool, bool), CreateRefusal> {
        let member = log_of(path).to_string();
        let ttl = self.admission.ttl;
        let down = |error: HistoryError| create_unavailable(&error);
        let all = match self
            .history
            .admit(ALL_STREAMS, &member, self.admission.total, ttl)
            .await
            .map_err(down)?
        {
            Admitted::Admitted { added } => added,
            Admitted::Full { .. } => return Err(CreateRefusal::TooManyStreams),
        };
        let Some(client) = client else {
            return Ok((all, false));
        };
        match self
            .history
            .admit(&client_set(client), &member, self.admission.per_client, ttl)
            .await
        {
            Ok(Admitted::Admitted { added }) => Ok((all, added)),
            Ok(Admitted::Full { .. }) => {
                self.give_back(path, None, (all, false)).await;
                Err(CreateRefusal::TooManyStreamsForClient)
            }
            Err(error) => {
                self.give_back(path, None, (all, false)).await;
                Err(down(error))
            }
        }
    }

    /// Gives back the places `added` says were taken for `path`.
    async fn give_back(&self, path: &str, client: Option<&str>, added: (bool, bool)) {
        let member = log_of(path).to_string();
        if added.0 {
            if let Err(error) = self.history.release(ALL_STREAMS, &member).await {
                tracing::warn!(%error, "giving back a stream's place");
            }
        }
        if let (true, Some(client)) = (added.1, client) {
            if let Err(error) = self.history.release(&client_set(client), &member).await {
                tracing::warn!(%error, "giving back a stream's place");
            }
        }
    }

    /// Renews the places of the stream at `path` (created by `client`).
    async fn renew_places(&self, path: &str, client: Option<&str>) {
        let member = log_of(path).to_string();
        let ttl = self.admission.ttl;
        if let Err(error) = self.history.renew(ALL_STREAMS, &member, ttl).await {
            tracing::debug!(%error, "renewing a stream's place");
        }
        if let Some(client) = client {
            if let Err(error) = self.history.renew(&client_set(client), &member, ttl).await {
                tracing::debug!(%error, "renewing a stream's place");
            }
        }
    }

    /// The same streams with `limits` on each stream's producers.
    pub(crate) fn with_producer_limits(mut self, limits: ProducerLimits) -> Self {
        self.producer_limits = limits;
        self
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
        self.read_with(path, after, max_bytes, &[]).await
    }

    /// [`read`](Self::read), with the fields of [`field::VIEW`] and
    /// `extra` of the meta (never the whole meta). A log that is not a
    /// stream's (a session's: its id is a log id too) is none.
    async fn read_with(
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
    ///
    /// The log is created `init=pending`; a fork then claims its source
    /// (once, however often it is retried: [`field::FORK_CLAIM`]); the
    /// first messages (a fork's inheritance, in pages, then the body) are
    /// appended and the last page marks it `done`. A create that stops
    /// half way is completed by a retry with the same settings, or undone:
    /// a fork whose claim is refused deletes the log it made.
    pub(crate) async fn create(
        &self,
        path: &str,
        asked: Settings,
        closed: bool,
        body: &[u8],
        publish_key: Option<PublishKey>,
        client: Option<ClientKey>,
    ) -> Result<SharedCreated, CreateRefusal> {
        let down = |error: HistoryError| create_unavailable(&error);
        let client = client.map(|client| client.to_string());
        // A stream at the path answers first: an idempotent re-PUT of a
        // fork holds after its source is gone.
        let mut pending = false;
        if let Some(view) = self.look(path).await.map_err(down)? {
            if let Some(answer) = existing_answer(&view, &asked, closed) {
                return answer.map(|()| SharedCreated::Existing(view));
            }
            pending = true;
        }
        let mut settings = asked.clone();
        let mut numbering = Numbering::default();
        let mut base = 0;
        let mut inherited = Vec::new();
        if let Some(source_path) = asked.forked_from.clone() {
            let source = match self.look(&source_path).await.map_err(down)? {
                Some(source) if !source.soft_deleted() => source,
                found => {
                    // A half-made fork of a source now gone cannot be
                    // completed: undone.
                    if pending {
                        self.undo(path).await;
                    }
                    return Err(match found {
                        Some(_) => CreateRefusal::SourceSoftDeleted,
                        None => CreateRefusal::NoSource,
                    });
                }
            };
            settings
                .inherit(&source.settings)
                .map_err(|_| CreateRefusal::ContentTypeMismatch)?;
            let offset = settings.fork_offset.unwrap_or_else(|| source.tail());
            let seq = source
                .numbering
                .seq_of(offset, source.published)
                .ok_or(CreateRefusal::BadForkOffset)?;
            settings.fork_offset = Some(offset);
            let lineage = source.numbering.fork_lineage(seq);
            if lineage.len() > Numbering::MAX_LINEAGE {
                return Err(CreateRefusal::ForkTooDeep);
            }
            let first_base = source
                .first_retained
                .saturating_sub(1)
                .max(source.numbering.start_after())
                .min(seq);
            let copied = self
                .inheritance(&source_path, source.epoch, first_base, seq)
                .await?;
            base = copied.0;
            inherited = copied.1;
            if settings.fork_sub_offset > 0 {
                let prefix = self
                    .prefix_after(&source_path, seq, settings.fork_sub_offset, source.json())
                    .await?;
                inherited.push(Bytes::from(prefix));
            }
            numbering = Numbering::new(lineage, 0, source.numbering.start_after());
        }
        settings.default_content_type();
        let initial = initial_payload(settings.json(), body)?;
        let mut first = inherited;
        first.extend(initial.map(Bytes::from));
        if let Some(large) = first.iter().find(|p| p.len() > self.max_payload) {
            return Err(CreateRefusal::TooLarge {
                len: large.len(),
                max: self.max_payload,
            });
        }
        let generation = self.generations.next();
        let meta = new_meta(&settings, publish_key, &numbering, base, client.as_deref());
        let log = log_of(path);
        // A new stream takes its places first (a pending one has its
        // creator's); a log found at the path gives back what this took.
        let places = match pending {
            true => (false, false),
            false => self.admit(path, client.as_deref()).await?,
        };
        let created = match self.history.create(&log, generation, &meta).await {
            Ok(created) => created,
            Err(error) => {
                self.give_back(path, client.as_deref(), places).await;
                return Err(down(error));
            }
        };
        if !created {
            self.give_back(path, client.as_deref(), places).await;
        }
        let view = match self.look(path).await.map_err(down)? {
            Some(view) => view,
            // Deleted meanwhile (or a session's log at this id).
            None if created => return Err(CreateRefusal::Unavailable),
            None => return Err(CreateRefusal::Conflict),
        };
        if !created {
            if let Some(answer) = existing_answer(&view, &asked, closed) {
                return answer.map(|()| SharedCreated::Existing(view));
            }
            // A create that stopped before its first batch, with the same
            // settings: this one completes it, from the base it recorded.
            if view.base != base {
                // The source was trimmed since: what this request copied
                // is not what the log's offsets claim. Undone; a retry
                // makes the fork afresh.
                self.undo(path).await;
                return Err(CreateRefusal::Unavailable);
            }
        }
        if let Some(source) = &settings.forked_from {
            if let Err(refused) = self.claim_source(source, path).await {
                if !matches!(refused, CreateRefusal::Unavailable) {
                    self.undo(path).await;
                }
                return Err(refused);
            }
        }
        self.put_first(path, view, &first, closed).await?;
        let view = self
            .look(path)
            .await
            .map_err(down)?
            .ok_or(CreateRefusal::Unavailable)?;
        Ok(match created {
            true => SharedCreated::New(view),
            false => SharedCreated::Existing(view),
        })
    }

    /// Appends a new stream's first messages in pages of at most
    /// [`PAGE_BYTES`] (a fork's copy is never one call of its whole
    /// inheritance), the last marking it `done` (and closed, if asked).
    async fn put_first(
        &self,
        path: &str,
        mut view: View,
        first: &[Bytes],
        closed: bool,
    ) -> Result<(), CreateRefusal> {
        let down = |error: HistoryError| create_unavailable(&error);
        let mut pages = pages_of(first, PAGE_BYTES).peekable();
        if pages.peek().is_none() {
            pages = pages_of(&[], PAGE_BYTES).peekable();
        }
        let mut page = pages.next().unwrap_or(&[]);
        loop {
            let last = pages.peek().is_none();
            let mut guard = Guard {
                expect: vec![
                    (field::INIT.to_owned(), Some("pending".to_owned())),
                    // Pages are appended in order by one creator: another
                    // one's page in between refuses this one's.
                    (field::BASE.to_owned(), view.meta.get(field::BASE).cloned()),
                ],
                ..Guard::default()
            };
            if last {
                guard.set.push((field::INIT.to_owned(), "done".to_owned()));
                if closed {
                    guard.set.push((field::CLOSED.to_owned(), "1".to_owned()));
                }
            }
            match self.guarded(path, &view, page, guard).await {
                Ok(Some(_)) => {}
                // Completed (or being completed) by a concurrent retry of
                // the same create: its pages are the same.
                Ok(None) => return Ok(()),
                Err(error) => return Err(down(error)),
            }
            if last {
                return Ok(());
            }
            page = pages.next().unwrap_or(&[]);
            view = self
                .look(path)
                .await
                .map_err(down)?
                .ok_or(CreateRefusal::Unavailable)?;
        }
    }

    /// Deletes the log of a create that cannot complete (best effort: a
    /// log left `pending` answers `503` to appends until its keys expire).
    async fn undo(&self, path: &str) {
        if let Err(error) = self.history.delete(&log_of(path)).await {
            tracing::warn!(%error, "undoing a stream's create");
        }
    }

    /// The source's messages after `base` up to `last` (its stream seqs),
    /// and the base they start after: exactly what the source retains of
    /// them when read. Should the source be trimmed past the copy while
    /// it is made, it continues from the source's new first message (the
    /// base moves up, the messages before it are dropped), so the fork's
    /// offsets always number the messages it holds.
    ///
    /// # Errors
    /// `503` when the source continued under another epoch meanwhile (its
    /// seqs name other messages) or is gone.
    async fn inheritance(
        &self,
        path: &str,
        epoch: u64,
        mut base: u64,
        last: u64,
    ) -> Result<(u64, Vec<Bytes>), CreateRefusal> {
        let down = |error: HistoryError| create_unavailable(&error);
        let mut events: Vec<Bytes> = Vec::new();
        let mut cursor = base;
        while cursor < last {
            let view = self
                .read(path, cursor, PAGE_BYTES)
                .await
                .map_err(down)?
                .ok_or(CreateRefusal::NoSource)?;
            if view.epoch != epoch {
                return Err(CreateRefusal::Unavailable);
            }
            if view.first_retained > cursor + 1 {
                // Trimmed past the cursor: start after what is left.
                let new_base = (view.first_retained - 1).min(last);
                let dropped = usize::try_from(new_base - base).unwrap_or(usize::MAX);
                events.drain(..dropped.min(events.len()));
                base = new_base;
                cursor = cursor.max(new_base);
                continue;
            }
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
                return Err(CreateRefusal::Unavailable);
            }
        }
        debug_assert_eq!(base + events.len() as u64, last.max(base));
        Ok((base, events))
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
            .map_err(|error| create_unavailable(&error))?
            .ok_or(CreateRefusal::NoSource)?;
        let Some((_, payload)) = view.events.into_iter().find(|(s, _)| *s == seq + 1) else {
            return Err(CreateRefusal::BadSubOffset(
                "no message after the fork offset",
            ));
        };
        sub_offset_prefix(&payload, sub, json).map_err(CreateRefusal::BadSubOffset)
    }

    /// Counts the fork at `fork_path` on `source` (its claim field and
    /// `forks`, in one guarded step), unless it was deleted meanwhile. A
    /// claim already made (a retried create) is not made twice.
    async fn claim_source(&self, source: &str, fork_path: &str) -> Result<(), CreateRefusal> {
        let claim = claim_field(fork_path);
        for _ in 0..DECIDE_TRIES {
            let view = self
                .read_with(source, u64::MAX, 0, &[&claim])
                .await
                .map_err(|error| create_unavailable(&error))?
                .ok_or(CreateRefusal::NoSource)?;
            if view.meta.contains_key(&claim) {
                return Ok(());
            }
            if view.soft_deleted() {
                return Err(CreateRefusal::SourceSoftDeleted);
            }
            let guard = Guard {
                expect: vec![
                    (field::DELETED.to_owned(), None),
                    (claim.clone(), None),
                    as_read(&view, field::FORKS),
                ],
                set: vec![
                    (field::FORKS.to_owned(), (view.forks() + 1).to_string()),
                    (claim.clone(), "1".to_owned()),
                ],
                ..Guard::default()
            };
            match self.guarded(source, &view, &[], guard).await {
                Ok(Some(_)) => return Ok(()),
                Ok(None) => continue,
                Err(error) => return Err(create_unavailable(&error)),
            }
        }
        Err(CreateRefusal::Unavailable)
    }

    /// The producers to drop so that a new one fits in `path`'s cap: the
    /// ones idle past the limit, then the idlest, down to seven eighths
    /// of the cap (so this whole-meta read is made once per cap/8 new
    /// producers, not per append), each with the value it was read at.
    async fn evictions(&self, path: &str, now: u64) -> Result<Vec<(String, String)>, HistoryError> {
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
        // Validated before the meta is read (and before any retry).
        let payload = match (self.json_of(path).await?, body.is_empty()) {
            (_, true) => Ok(None),
            (true, false) => json_mode::payload(body, false).map_err(AppendRefusal::Json),
            (false, false) => Ok(Some(body.to_vec())),
        };
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
            let payload = match &payload {
                Ok(payload) => payload.clone(),
                Err(refused) => return Err(refused.clone()),
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
            let payloads: Vec<Bytes> = payload.into_iter().map(Bytes::from).collect();
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

    /// Whether the stream at `path` is in JSON mode (`false` for none:
    /// the append that follows finds it gone).
    async fn json_of(&self, path: &str) -> Result<bool, AppendRefusal> {
        Ok(self
            .look(path)
            .await
            .map_err(|e| unavailable(&e))?
            .is_some_and(|view| view.json()))
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
    async fn remove(&self, path: &str, view: &View) -> Result<bool, HistoryError> {
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
    async fn purge(
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
    async fn release_source(
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

/// The answer to a create that found `view`'s stream at its path: `None`
/// when it is a create with the same settings that has not put its first
/// messages in yet (the caller completes it).
fn existing_answer(
    view: &View,
    asked: &Settings,
    closed: bool,
) -> Option<Result<(), CreateRefusal>> {
    if view.soft_deleted() {
        return Some(Err(CreateRefusal::SoftDeleted));
    }
    if !view.settings.same_create(view.closed(), asked, closed) {
        // A pending create is not closed yet: compared as it will be.
        let pending_same = !view.initialised() && view.settings.same_create(closed, asked, closed);
        if !pending_same {
            return Some(Err(CreateRefusal::Conflict));
        }
    }
    view.initialised().then_some(Ok(()))
}

/// The meta a new stream's log is created with (`init=pending`).
fn new_meta(
    settings: &Settings,
    publish_key: Option<PublishKey>,
    numbering: &Numbering,
    base: u64,
    client: Option<&str>,
) -> Meta {
    let mut meta = Meta::new();
    let mut put = |name: &str, value: String| {
        meta.insert(name.to_owned(), value);
    };
    if let Some(client) = client {
        put(field::CLIENT, client.to_owned());
    }
    put(
        field::KIND,
        crate::history::LogKind::Stream.as_str().to_owned(),
    );
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
    put(field::PRODUCERS, "0".to_owned());
    put(field::ACCESSED, now_ms().to_string());
    put(field::LINEAGE, numbering.encode_lineage());
    put(field::BASE, base.to_string());
    put(field::START, numbering.start_after().to_string());
    meta
}

/// `payloads` cut into runs of at most `max_bytes` (at least one payload
/// each).
fn pages_of(payloads: &[Bytes], max_bytes: usize) -> impl Iterator<Item = &[Bytes]> {
    let mut rest = payloads;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut bytes = 0;
        let mut take = 0;
        for payload in rest {
            if take > 0 && bytes + payload.len() > max_bytes {
                break;
            }
            bytes += payload.len();
            take += 1;
        }
        let (page, left) = rest.split_at(take);
        rest = left;
        Some(page)
    })
}

#[cfg(test)]
#[path = "shared_tests.rs"]
mod tests;
