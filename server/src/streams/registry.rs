//! Every live Durable Stream of this server, by path: creation (idempotent,
//! forks), lookup with expiry, deletion (soft while forks live), the
//! sweep of expired and idle streams, and what streams hold against the
//! server's limits.

use super::charge::ClientCharge;
use super::fork_point::ForkPoint;
use super::journal::{self, Journal};
use super::numbering::{Numbering, ReadRefusal};
use super::offset::Generations;
use super::removals::Removals;
use super::rules::AppendRefusal;
use super::settings::Settings;
use super::stream::{Ended, MakeError, NewStream, ProducerLimits, Queued, Stream};
use crate::admission::{Bounded, ClientShares};
use crate::client_addr::ClientKey;
use gapless::Config;
use gapless_history::StreamOp;
use hashbrown::hash_table::{Entry, HashTable};
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::Ordering;
use std::sync::RwLock;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

/// What a create asks for.
pub(crate) struct CreateRequest {
    pub(crate) path: String,
    pub(crate) settings: Settings,
    /// `Stream-Closed: true`.
    pub(crate) closed: bool,
    /// The initial body (not yet validated as JSON).
    pub(crate) body: bytes::Bytes,
    pub(crate) client: Option<ClientKey>,
    /// Draw a publish key for a new stream (`--publish-keys`).
    pub(crate) publish_key: bool,
}

/// How a create went.
pub(crate) enum Created {
    /// A new stream (`201`).
    New(Arc<Stream>),
    /// The same stream with the same settings existed (`200`).
    Existing(Arc<Stream>),
}

/// Why a create was refused.
#[derive(Debug)]
pub(crate) enum CreateRefusal {
    /// A stream with other settings is at the path (`409`).
    Conflict,
    /// The path's stream was deleted while forks of it live (`409`).
    SoftDeleted,
    /// The fork's source does not exist (`404`).
    NoSource,
    /// The fork's source was deleted while forks live (`409`).
    SourceSoftDeleted,
    /// The fork's content type differs from its source's (`409`).
    ContentTypeMismatch,
    /// The fork offset is not a position of the source (`400`).
    BadForkOffset,
    /// A fork of a fork chain already [`Numbering::MAX_LINEAGE`]
    /// generations deep (`400`).
    ForkTooDeep,
    /// The sub-offset cannot cut the message after the fork offset (`400`).
    BadSubOffset(&'static str),
    /// The initial body is not JSON (`400`).
    Json(super::json_mode::JsonRefusal),
    /// Past the memory budget (`503`).
    MemoryBudget,
    /// Past the creating client's share of the memory budget (`429`).
    ClientShare,
    /// Larger than the ring holds (`413`).
    TooLarge { len: usize, max: usize },
    /// The shared history did not answer (`503`).
    Unavailable,
    /// The shared history is at its memory limit (`507`).
    StorageFull,
    /// Over Redis: `--max-durable-streams` streams live (`503`).
    TooManyStreams,
    /// Over Redis: the client created `--max-durable-streams-per-client`
    /// live streams (`429`).
    TooManyStreamsForClient,
    /// The ring cannot be built.
    Internal(String),
}

/// Every live stream.
pub(crate) struct Streams {
    streams: ByPath,
    /// Serialises creations and deletions (forks change two streams).
    structure: Mutex<()>,
    /// Generations for new streams: each larger than every earlier one.
    generations: Generations,
    /// The configured ring of every stream.
    ring: Config,
    /// Streams idle this long are dropped.
    idle: Duration,
    origin: Instant,
    /// The memory budget the sessions share: every stream's rings,
    /// producers and overhead are charged to it, which is what bounds how
    /// many streams the server holds.
    memory: Arc<Bounded>,
    /// What each client's streams hold of `memory`, at most a share each
    /// (`--stream-memory-per-client`): a hostile client is bounded by what
    /// it makes the server hold, and a backend creating many small streams
    /// from one address is not refused at a count sized for full rings.
    client_shares: Arc<ClientShares>,
    /// How many producers each stream keeps, and for how long.
    producer_limits: ProducerLimits,
    /// With `--data-dir`: where every stream's changes are written before
    /// they are acknowledged (`journal`).
    journal: Option<Arc<Journal>>,
    /// Removals queued and known durable: readers are told a stream is
    /// gone only once its removal is.
    removals: Arc<Removals>,
}

impl Streams {
    /// No streams yet.
    pub(crate) fn new(
        ring: Config,
        idle: Duration,
        memory: Arc<Bounded>,
        client_share: u64,
    ) -> Self {
        let client_shares = ClientShares::new(client_share);
        Self {
            streams: ByPath::new(),
            structure: Mutex::new(()),
            generations: Generations::default(),
            ring,
            idle,
            origin: Instant::now(),
            memory,
            client_shares,
            producer_limits: ProducerLimits::default(),
            journal: None,
            removals: Arc::default(),
        }
    }

    /// The same registry, every stream's changes written to `journal`.
    pub(crate) fn with_journal(mut self, journal: Arc<Journal>) -> Self {
        self.journal = Some(journal);
        self
    }

    /// The journal, with `--data-dir`.
    pub(crate) fn journal(&self) -> Option<&Journal> {
        self.journal.as_deref()
    }

    /// Waits, with a journal, until every removal begun so far is durable:
    /// call it before telling a reader a stream is gone.
    pub(crate) async fn removals_settled(&self) {
        // Under the lock the removals queue their writes under.
        self.removals.settled(self.journal(), || self.lock()).await;
    }

    /// The stream at `path` as a reader is told of it: as [`Self::get`],
    /// but a stream missing or soft-deleted is answered so only once the
    /// removal that made it so is durable (looked up again then).
    pub(crate) async fn get_for_readers(&self, path: &str) -> Option<Arc<Stream>> {
        let found = self.get(path);
        let gone = || {
            found
                .as_ref()
                .is_none_or(|stream| stream.soft_deleted.load(Ordering::Acquire))
        };
        if self.journal.is_none() || !gone() {
            return found;
        }
        self.removals_settled().await;
        self.get(path)
    }

    /// The registry's clock origin, generations, ring, producer limits
    /// and budget, for the start-up that rebuilds it (`restore`).
    pub(super) fn parts(&self) -> RegistryParts<'_> {
        RegistryParts {
            generations: &self.generations,
            ring: self.ring,
            origin: self.origin,
            producer_limits: self.producer_limits,
            memory: &self.memory,
            client_shares: &self.client_shares,
        }
    }

    /// Puts a restored stream in (start-up: no other call runs yet).
    pub(super) fn insert_restored(&self, stream: Arc<Stream>) {
        self.streams.insert(stream);
    }

    /// The same registry with `limits` on each stream's producers.
    pub(crate) fn with_producer_limits(mut self, limits: ProducerLimits) -> Self {
        self.producer_limits = limits;
        self
    }

    /// The memory budget streams take from.
    pub(crate) fn budget(&self) -> &Arc<Bounded> {
        &self.memory
    }

    /// Restarts `stream`'s TTL and idle clocks.
    pub(crate) fn touch(&self, stream: &Stream) {
        stream.touch();
    }

    /// Whether `stream` expired (its TTL, on [`Stream::since_access_ms`],
    /// or `Stream-Expires-At`) or was idle past the registry's idle limit
    /// ([`Stream::idle_ms`]). `now`: the wall clock, read only for a
    /// stream with an `Expires-At`.
    fn expired(&self, stream: &Stream, now: impl FnOnce() -> SystemTime) -> bool {
        stream.settings.expired(stream.since_access_ms(), now)
            || u128::from(stream.idle_ms()) >= self.idle.as_millis()
    }

    /// The stream at `path`, if it is live or soft-deleted (an expired one
    /// is removed first).
    pub(crate) fn get(&self, path: &str) -> Option<Arc<Stream>> {
        let stream = self.streams.get(path)?;
        if !stream.soft_deleted.load(Ordering::Acquire) && self.expired(&stream, SystemTime::now) {
            let _structure = self.lock();
            self.remove_if_expired_locked(&stream);
            return self.streams.get(path);
        }
        Some(stream)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.structure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Creates the stream `request` asks for, or finds the same one.
    ///
    /// Everything that costs (a fork's copy, parsing the initial body,
    /// drawing a key, building the ring) is done before the structure
    /// lock, which is then held for the checks and the insertion alone: a
    /// create that lost a race to the same path gives back what it built.
    #[cfg(test)]
    pub(crate) fn create(&self, request: CreateRequest) -> Result<Created, CreateRefusal> {
        self.create_queued(request)
            .map(|(created, _queued)| created)
    }

    /// [`Self::create`], and with a journal the write to await before the
    /// create is acknowledged (a new stream's record and messages, or for
    /// one found, everything queued before).
    pub(crate) fn create_queued(
        &self,
        request: CreateRequest,
    ) -> Result<(Created, Option<Queued>), CreateRefusal> {
        if let Some(journal) = &self.journal {
            journal.room().map_err(create_refusal)?;
        }
        // An expired stream at the path goes first.
        if let Some(existing) = self.get(&request.path) {
            return self.existing(existing, &request);
        }
        let source = match &request.settings.forked_from {
            Some(path) => {
                let source = self.get(path).ok_or(CreateRefusal::NoSource)?;
                if source.soft_deleted.load(Ordering::Acquire) {
                    return Err(CreateRefusal::SourceSoftDeleted);
                }
                Some(source)
            }
            None => None,
        };
        let stream = self.build(&request, source)?;
        let _structure = self.lock();
        if let Some(existing) = self.streams.get(&request.path) {
            return self.existing(existing, &request);
        }
        if let Some(source) = &stream.source {
            // The source must still be the live stream it was read as:
            // deleted meanwhile, the fork would count itself on a stream
            // that is going.
            if source.gone.load(Ordering::Acquire) {
                return Err(CreateRefusal::NoSource);
            }
            if source.soft_deleted.load(Ordering::Acquire) {
                return Err(CreateRefusal::SourceSoftDeleted);
            }
        }
        // Queued before the stream is found by anyone: nothing of it is
        // journaled before its record.
        let queued = match (&self.journal, stream.journal_key) {
            (Some(journal), Some(key)) => Some(
                stream
                    .submit_shown(
                        journal,
                        stream.creation(key),
                        stream.ring().published(),
                        request.closed,
                    )
                    .map_err(create_refusal)?,
            ),
            _ => None,
        };
        if let Some(source) = &stream.source {
            source.forks.fetch_add(1, Ordering::AcqRel);
        }
        let stream = Arc::new(stream);
        self.streams.insert(Arc::clone(&stream));
        Ok((Created::New(stream), queued))
    }

    /// The answer to a create that found `stream`: with a journal, after
    /// everything queued of it (its own creation may still be on the way).
    fn existing(
        &self,
        stream: Arc<Stream>,
        request: &CreateRequest,
    ) -> Result<(Created, Option<Queued>), CreateRefusal> {
        let created = existing_answer(stream, request)?;
        let queued = match (&self.journal, &created) {
            (Some(journal), Created::Existing(stream)) => {
                Some(stream.barrier(journal).map_err(create_refusal)?)
            }
            _ => None,
        };
        Ok((created, queued))
    }

    /// The stream `request` asks for, built and filled, not yet inserted.
    fn build(
        &self,
        request: &CreateRequest,
        source: Option<Arc<Stream>>,
    ) -> Result<Stream, CreateRefusal> {
        let mut settings = request.settings.clone();
        let mut fork: Option<ForkPoint> = None;
        let mut prefix = None;
        if let Some(source) = &source {
            settings
                .inherit(&source.settings)
                .map_err(|_| CreateRefusal::ContentTypeMismatch)?;
            let offset = settings.fork_offset.unwrap_or_else(|| source.tail_offset());
            let point = source
                .fork_point(offset)
                .map_err(|_: ReadRefusal| CreateRefusal::BadForkOffset)?;
            if point.lineage.len() > Numbering::MAX_LINEAGE {
                return Err(CreateRefusal::ForkTooDeep);
            }
            if settings.fork_sub_offset > 0 {
                prefix = Some(
                    source
                        .prefix_after(point.seq, settings.fork_sub_offset)
                        .map_err(CreateRefusal::BadSubOffset)?,
                );
            }
            settings.fork_offset = Some(offset);
            fork = Some(point);
        }
        settings.default_content_type();
        // A JSON initial body's minified copy is counted while the stream
        // is built.
        let _transient = match settings.json() && !request.body.is_empty() {
            true => Some(
                self.memory
                    .take(request.body.len() as u64)
                    .ok_or(CreateRefusal::MemoryBudget)?,
            ),
            false => None,
        };
        let initial = initial_payload(settings.json(), &request.body)?;
        let publish_key = match request.publish_key {
            true => Some(
                crate::ids::PublishKey::random()
                    .map_err(|e| CreateRefusal::Internal(e.to_string()))?,
            ),
            false => None,
        };
        let generation = self.generations.next();
        let journal_key = self
            .journal
            .as_ref()
            .map(|_| journal::key_of(&request.path, generation));
        let (lineage, start_after, ring_start, inherited) = match fork {
            Some(point) => (
                point.lineage,
                point.start_after,
                point.ring_start,
                point.inherited,
            ),
            None => (Vec::new(), 0, 0, Vec::new()),
        };
        let stream = Stream::new(
            NewStream {
                path: request.path.clone(),
                settings,
                lineage,
                own_generation: generation,
                full: self.ring,
                inherited,
                start_after,
                ring_start,
                closed: false,
                origin: self.origin,
                source,
                producer_limits: self.producer_limits,
                publish_key,
                client: request.client.map(|client| ClientCharge {
                    shares: Arc::clone(&self.client_shares),
                    client,
                }),
                journal_key,
            },
            &self.memory,
        )
        .map_err(|error| match error {
            MakeError::MemoryBudget => CreateRefusal::MemoryBudget,
            MakeError::ClientShare => CreateRefusal::ClientShare,
            MakeError::TooLarge { len, max } => CreateRefusal::TooLarge { len, max },
            MakeError::Config(what) => CreateRefusal::Internal(what),
        })?;
        for payload in [prefix, initial].into_iter().flatten() {
            stream
                .append_payload(&payload, &self.memory)
                .map_err(|refusal| match refusal {
                    super::rules::AppendRefusal::TooLarge { len, max } => {
                        CreateRefusal::TooLarge { len, max }
                    }
                    super::rules::AppendRefusal::ClientShare => CreateRefusal::ClientShare,
                    _ => CreateRefusal::MemoryBudget,
                })?;
        }
        if request.closed {
            let close = super::rules::AppendRequest {
                close: true,
                ..Default::default()
            };
            // Not yet journaled: its creation writes the closure.
            let _ = stream.append(&[], &close, &self.memory, None);
        }
        Ok(stream)
    }

    /// Deletes the stream at `path`: `Some(true)` deleted, `Some(false)`
    /// already soft-deleted (`410`), `None` no such stream (or another
    /// delete removed it first).
    #[cfg(test)]
    pub(crate) fn delete(&self, path: &str) -> Option<bool> {
        self.delete_queued(path).0
    }

    /// [`Self::delete`], and with a journal the write to await before the
    /// deletion is acknowledged.
    pub(crate) fn delete_queued(&self, path: &str) -> (Option<bool>, Option<Queued>) {
        let Some(stream) = self.get(path) else {
            return (None, None);
        };
        let _structure = self.lock();
        if stream.soft_deleted.load(Ordering::Acquire) {
            return (Some(false), None);
        }
        // Numbered before a reader can see it.
        let removal = self.removals.begin();
        match stream.end_if(|stream| !stream.soft_deleted.load(Ordering::Acquire)) {
            Some(ended) => {
                let ops = self.ended_locked(&stream, ended);
                (Some(true), self.journal_ends(ops, removal))
            }
            None if stream.soft_deleted.load(Ordering::Acquire) => (Some(false), None),
            None => (None, None),
        }
    }

    /// Queues what ended streams write (their removal, a soft deletion's
    /// record): once durable, the committer marks removal `number`
    /// durable, whether or not anyone awaits it. A journal that failed
    /// keeps them until it is restarted: the answer says so.
    fn journal_ends(&self, ops: Vec<StreamOp>, number: u64) -> Option<Queued> {
        let journal = self.journal.as_ref()?;
        if ops.is_empty() {
            return None;
        }
        match Queued::new(journal.submit_then(ops, self.removals.on_durable(number))) {
            Ok(queued) => Some(queued),
            Err(refusal) => Some(Queued::failed(refusal)),
        }
    }

    /// Removes `stream` if it is still expired, decided under its writer
    /// lock (an append acknowledged before restarted its clock).
    fn remove_if_expired_locked(&self, stream: &Arc<Stream>) {
        // Numbered before a reader can see it.
        let removal = self.removals.begin();
        let now = SystemTime::now();
        let ended = stream.end_if(|stream| {
            !stream.soft_deleted.load(Ordering::Acquire) && self.expired(stream, || now)
        });
        if let Some(ended) = ended {
            let ops = self.ended_locked(stream, ended);
            // Nobody waits for an expiry: it is durable with the next
            // group commit, which marks it so.
            drop(self.journal_ends(ops, removal));
        }
    }

    /// What follows `stream`'s end (by its only ender: [`Stream::end_if`]
    /// ends a stream once): a removed stream leaves the registry and
    /// releases its source, and the source goes too when it was
    /// soft-deleted and this was its last fork, and so on up the chain.
    /// With a journal, what the ends write is returned.
    fn ended_locked(&self, stream: &Arc<Stream>, ended: Ended) -> Vec<StreamOp> {
        let mut ops = Vec::new();
        let journaled = self.journal.is_some();
        if ended == Ended::SoftDeleted {
            if let (true, Some(key)) = (journaled, stream.journal_key) {
                ops.push(StreamOp::Record {
                    stream: key,
                    record: stream.record_now().encode(),
                });
            }
            return ops;
        }
        let mut next = Some(Arc::clone(stream));
        while let Some(stream) = next.take() {
            if let (true, Some(key)) = (journaled, stream.journal_key) {
                ops.push(StreamOp::Remove { stream: key });
            }
            if self
                .streams
                .get(&stream.path)
                .is_some_and(|live| Arc::ptr_eq(&live, &stream))
            {
                self.streams.remove(&stream.path);
            }
            let Some(source) = &stream.source else {
                continue;
            };
            let left = source.forks.fetch_sub(1, Ordering::AcqRel) - 1;
            if left == 0 {
                let last = source.end_if(|source| source.soft_deleted.load(Ordering::Acquire));
                if last == Some(Ended::Removed) {
                    next = Some(Arc::clone(source));
                }
            }
        }
        ops
    }

    /// Drops every expired or idle stream (soft-deleting those with forks).
    /// With a journal, returns the live `Stream-TTL` streams whose last
    /// access runs [`journal::ACCESS_JOURNAL_EVERY`] or more ahead of
    /// their record (at most [`ACCESSES_PER_PASS`]), for
    /// [`Self::journal_accesses`] off the runtime's threads.
    pub(crate) fn sweep(&self) -> Vec<Arc<Stream>> {
        let now = SystemTime::now();
        let expired = self.streams.select(usize::MAX, |stream| {
            !stream.soft_deleted.load(Ordering::Acquire) && self.expired(stream, || now)
        });
        for stream in expired {
            let _structure = self.lock();
            self.remove_if_expired_locked(&stream);
        }
        if self.journal.is_none() {
            return Vec::new();
        }
        let behind_ms = journal_every_ms();
        self.streams.select(ACCESSES_PER_PASS, |stream| {
            keeps_ttl_clock(stream) && stream.access_unjournaled_ms() >= behind_ms
        })
    }

    /// With a journal: writes the record of each of `streams` (live
    /// `Stream-TTL` ones) whose last access runs `at_least_ms` or more
    /// ahead of it, so that its TTL clock comes back after a restart (the
    /// idle clock restarts there: downtime is not idleness). Nothing while
    /// the disk refuses writes: a record the filesystem failed would fail
    /// the journal for good (a restart then counts those TTLs from older
    /// accesses). A lock and an encoded record per stream written: run it
    /// off the runtime's threads.
    pub(crate) fn journal_accesses(&self, streams: &[Arc<Stream>], at_least_ms: u64) {
        let Some(journal) = self.journal.as_deref() else {
            return;
        };
        if journal.room().is_err() {
            return;
        }
        for stream in streams {
            stream.journal_access(journal, at_least_ms);
        }
    }

    /// Live streams (soft-deleted ones included).
    pub(crate) fn len(&self) -> usize {
        self.streams.len()
    }
}

impl Drop for Streams {
    /// A clean stop writes every live `Stream-TTL` stream's last access
    /// its record does not say yet (the journal writes what is queued
    /// before it closes).
    fn drop(&mut self) {
        if self.journal.is_none() {
            return;
        }
        let ttl = self.streams.select(usize::MAX, keeps_ttl_clock);
        self.journal_accesses(&ttl, 0);
    }
}

/// Whether the journal keeps `stream`'s last access: a live `Stream-TTL`
/// stream's (its TTL clock survives a restart; the idle clock restarts).
fn keeps_ttl_clock(stream: &Stream) -> bool {
    stream.settings.ttl_secs.is_some() && !stream.soft_deleted.load(Ordering::Acquire)
}

/// `Stream-TTL` streams whose access [`Streams::sweep`] returns at most at
/// once: a pass writes a record for each, and the rest wait a second.
const ACCESSES_PER_PASS: usize = 4096;

/// [`journal::ACCESS_JOURNAL_EVERY`] in milliseconds.
pub(crate) fn journal_every_ms() -> u64 {
    u64::try_from(journal::ACCESS_JOURNAL_EVERY.as_millis()).unwrap_or(u64::MAX)
}

/// What a journal's refusal answers a create.
fn create_refusal(refusal: AppendRefusal) -> CreateRefusal {
    match refusal {
        AppendRefusal::StorageFull => CreateRefusal::StorageFull,
        _ => CreateRefusal::Unavailable,
    }
}

/// What the start-up that rebuilds the registry uses of it.
pub(super) struct RegistryParts<'a> {
    pub(super) generations: &'a Generations,
    pub(super) ring: Config,
    pub(super) origin: Instant,
    pub(super) producer_limits: ProducerLimits,
    pub(super) memory: &'a Arc<Bounded>,
    pub(super) client_shares: &'a Arc<ClientShares>,
}

/// One shard of [`ByPath`]: the streams whose path hashes to it, each
/// found by that hash (`ByPath::hasher`'s) and its own path (the key is
/// not held twice).
type Shard = RwLock<HashTable<Arc<Stream>>>;

/// The streams by path: shards of a hash table under a `RwLock` each. A
/// lookup hashes the path once (the hash picks the shard and probes its
/// table), holds the shard's read lock for one probe and an `Arc` clone;
/// an insert or a removal (serialised anyway by the registry's structure
/// lock) holds its write lock for one table operation. Unlike the
/// engine's `Store`, whose read-copy-update copies a shard's table per
/// insert (for sessions, read far more than created), a backend creating
/// 100,000 streams pays the same for the last as for the first.
struct ByPath {
    shards: Box<[Shard]>,
    hasher: RandomState,
}

impl ByPath {
    const SHARDS: usize = 64;

    fn new() -> Self {
        Self {
            shards: (0..Self::SHARDS)
                .map(|_| RwLock::new(HashTable::new()))
                .collect(),
            hasher: RandomState::new(),
        }
    }

    /// `path`'s hash and its shard. The shard comes from middle bits of
    /// the hash: a table probes from its low bits and tags entries with
    /// its top 7, which would carry no information within a shard taken
    /// from either.
    fn shard(&self, path: &str) -> (u64, &Shard) {
        let hash = self.hasher.hash_one(path);
        let at = (hash >> 32) as usize % Self::SHARDS;
        (hash, &self.shards[at])
    }

    /// The hash of an entry, for the table to move it when it grows.
    fn rehash(&self) -> impl Fn(&Arc<Stream>) -> u64 + '_ {
        |stream| self.hasher.hash_one(stream.path.as_str())
    }

    fn get(&self, path: &str) -> Option<Arc<Stream>> {
        let (hash, shard) = self.shard(path);
        let shard = shard.read().unwrap_or_else(PoisonError::into_inner);
        shard.find(hash, |held| held.path == path).map(Arc::clone)
    }

    /// Inserts `stream` at its path, in place of any stream there.
    fn insert(&self, stream: Arc<Stream>) {
        let (hash, shard) = self.shard(&stream.path);
        let mut shard = shard.write().unwrap_or_else(PoisonError::into_inner);
        match shard.entry(hash, |held| held.path == stream.path, self.rehash()) {
            Entry::Occupied(mut held) => *held.get_mut() = stream,
            Entry::Vacant(vacant) => {
                vacant.insert(stream);
            }
        }
    }

    fn remove(&self, path: &str) {
        let (hash, shard) = self.shard(path);
        let mut shard = shard.write().unwrap_or_else(PoisonError::into_inner);
        if let Ok(held) = shard.find_entry(hash, |held| held.path == path) {
            held.remove();
        }
    }

    fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| shard.read().unwrap_or_else(PoisonError::into_inner).len())
            .sum()
    }

    /// The streams `pick` picks, shard by shard (each shard's a snapshot),
    /// at most `max`. Only those are held: a snapshot of every stream would
    /// keep a deleted one (and the memory it is charged) alive while it is
    /// walked, past the deletion's answer.
    fn select(&self, max: usize, mut pick: impl FnMut(&Stream) -> bool) -> Vec<Arc<Stream>> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let shard = shard.read().unwrap_or_else(PoisonError::into_inner);
            for stream in shard.iter() {
                if out.len() >= max {
                    return out;
                }
                if pick(stream) {
                    out.push(Arc::clone(stream));
                }
            }
        }
        out
    }
}

/// The answer to a create that found `existing` at its path.
fn existing_answer(
    existing: Arc<Stream>,
    request: &CreateRequest,
) -> Result<Created, CreateRefusal> {
    if existing.soft_deleted.load(Ordering::Acquire) {
        return Err(CreateRefusal::SoftDeleted);
    }
    match existing
        .settings
        .same_create(existing.is_closed(), &request.settings, request.closed)
    {
        true => Ok(Created::Existing(existing)),
        false => Err(CreateRefusal::Conflict),
    }
}

/// The first message a create's `body` makes: `None` for an empty body
/// (or `[]` in JSON mode).
///
/// # Errors
/// A JSON stream's body that is not JSON.
pub(crate) fn initial_payload(json: bool, body: &[u8]) -> Result<Option<Vec<u8>>, CreateRefusal> {
    match (json, body.is_empty()) {
        (_, true) => Ok(None),
        (true, false) => super::json_mode::payload(body, true).map_err(CreateRefusal::Json),
        (false, false) => Ok(Some(body.to_vec())),
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "registry_restart_tests.rs"]
mod restart_tests;
