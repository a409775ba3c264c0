//! Every live Durable Stream of this server, by path: creation (idempotent,
//! forks), lookup with expiry, deletion (soft while forks live), the
//! sweep of expired and idle streams, and what streams hold against the
//! server's limits.

use super::numbering::{Numbering, ReadRefusal};
use super::offset::Generations;
use super::stream::{Ended, ForkPoint, MakeError, NewStream, ProducerLimits, Settings, Stream};
use crate::admission::{Bounded, Held, PerClient};
use crate::client_addr::ClientKey;
use gapless::{Config, Store};
use std::sync::atomic::Ordering;
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
    /// At `--max-sessions` (`503`), or the client's share (`429`).
    TooMany,
    TooManyForClient,
    /// Past the memory budget (`503`).
    MemoryBudget,
    /// Larger than the ring holds (`413`).
    TooLarge {
        len: usize,
        max: usize,
    },
    /// The shared history did not answer (`503`).
    Unavailable,
    /// The ring cannot be built.
    Internal(String),
}

/// Every live stream.
pub(crate) struct Streams {
    streams: Store<String, Stream>,
    /// Serialises creations and deletions (forks change two streams).
    structure: Mutex<()>,
    /// Generations for new streams: each larger than every earlier one.
    generations: Generations,
    /// The configured ring of every stream.
    ring: Config,
    /// Streams idle this long are dropped.
    idle: Duration,
    origin: Instant,
    /// The server's limits, shared with the sessions.
    slots: Arc<Bounded>,
    memory: Arc<Bounded>,
    per_client: Arc<PerClient>,
    /// How many producers each stream keeps, and for how long.
    producer_limits: ProducerLimits,
}

impl Streams {
    /// No streams yet.
    pub(crate) fn new(
        ring: Config,
        idle: Duration,
        slots: Arc<Bounded>,
        memory: Arc<Bounded>,
        per_client: Arc<PerClient>,
    ) -> Self {
        Self {
            streams: Store::new(16),
            structure: Mutex::new(()),
            generations: Generations::default(),
            ring,
            idle,
            origin: Instant::now(),
            slots,
            memory,
            per_client,
            producer_limits: ProducerLimits::default(),
        }
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

    fn expired(&self, stream: &Stream, now: SystemTime) -> bool {
        stream.settings.expired(stream.idle_ms(), now)
            || u128::from(stream.idle_ms()) >= self.idle.as_millis()
    }

    /// The stream at `path`, if it is live or soft-deleted (an expired one
    /// is removed first).
    pub(crate) fn get(&self, path: &str) -> Option<Arc<Stream>> {
        let stream = self.streams.get(path)?;
        if !stream.soft_deleted.load(Ordering::Acquire) && self.expired(&stream, SystemTime::now())
        {
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
    pub(crate) fn create(&self, request: CreateRequest) -> Result<Created, CreateRefusal> {
        // An expired stream at the path goes first.
        if let Some(existing) = self.get(&request.path) {
            return existing_answer(existing, &request);
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
            return existing_answer(existing, &request);
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
            source.forks.fetch_add(1, Ordering::AcqRel);
        }
        // The path is free under the lock: this inserts `stream`.
        let (stream, _) = self
            .streams
            .get_or_insert_with(request.path.clone(), || stream);
        Ok(Created::New(stream))
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
        // The initial body's copy is counted while the stream is built.
        let _transient = self
            .memory
            .take(request.body.len() as u64)
            .ok_or(CreateRefusal::MemoryBudget)?;
        let initial = initial_payload(settings.json(), &request.body)?;
        let publish_key = match request.publish_key {
            true => Some(
                crate::ids::PublishKey::random()
                    .map_err(|e| CreateRefusal::Internal(e.to_string()))?,
            ),
            false => None,
        };
        let admission = self.admit(request.client)?;
        let generation = self.generations.next();
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
                admission: admission.0,
                client: admission.1,
            },
            &self.memory,
        )
        .map_err(|error| match error {
            MakeError::MemoryBudget => CreateRefusal::MemoryBudget,
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
                    _ => CreateRefusal::MemoryBudget,
                })?;
        }
        if request.closed {
            let close = super::rules::AppendRequest {
                close: true,
                ..Default::default()
            };
            let _ = stream.append(&[], &close, &self.memory);
        }
        Ok(stream)
    }

    /// A stream slot, its client's slot.
    fn admit(
        &self,
        client: Option<ClientKey>,
    ) -> Result<(Vec<Held>, Option<crate::admission::ClientSlot>), CreateRefusal> {
        let slot = self.slots.take(1).ok_or(CreateRefusal::TooMany)?;
        let client = match client {
            Some(client) => Some(
                self.per_client
                    .take(client)
                    .ok_or(CreateRefusal::TooManyForClient)?,
            ),
            None => None,
        };
        Ok((vec![slot], client))
    }

    /// Deletes the stream at `path`: `Some(true)` deleted, `Some(false)`
    /// already soft-deleted (`410`), `None` no such stream (or another
    /// delete removed it first).
    pub(crate) fn delete(&self, path: &str) -> Option<bool> {
        let stream = self.get(path)?;
        let _structure = self.lock();
        if stream.soft_deleted.load(Ordering::Acquire) {
            return Some(false);
        }
        match stream.end_if(|stream| !stream.soft_deleted.load(Ordering::Acquire)) {
            Some(ended) => {
                self.ended_locked(&stream, ended);
                Some(true)
            }
            None if stream.soft_deleted.load(Ordering::Acquire) => Some(false),
            None => None,
        }
    }

    /// Removes `stream` if it is still expired, decided under its writer
    /// lock (an append acknowledged before restarted its clock).
    fn remove_if_expired_locked(&self, stream: &Arc<Stream>) {
        let now = SystemTime::now();
        let ended = stream.end_if(|stream| {
            !stream.soft_deleted.load(Ordering::Acquire) && self.expired(stream, now)
        });
        if let Some(ended) = ended {
            self.ended_locked(stream, ended);
        }
    }

    /// What follows `stream`'s end (by its only ender: [`Stream::end_if`]
    /// ends a stream once): a removed stream leaves the registry and
    /// releases its source, and the source goes too when it was
    /// soft-deleted and this was its last fork, and so on up the chain.
    fn ended_locked(&self, stream: &Arc<Stream>, ended: Ended) {
        if ended == Ended::SoftDeleted {
            return;
        }
        let mut next = Some(Arc::clone(stream));
        while let Some(stream) = next.take() {
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
    }

    /// Drops every expired or idle stream (soft-deleting those with forks).
    pub(crate) fn sweep(&self) {
        let now = SystemTime::now();
        for (_, stream) in self.streams.entries() {
            if !stream.soft_deleted.load(Ordering::Acquire) && self.expired(&stream, now) {
                let _structure = self.lock();
                self.remove_if_expired_locked(&stream);
            }
        }
    }

    /// Live streams (soft-deleted ones included).
    pub(crate) fn len(&self) -> usize {
        self.streams.len()
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
