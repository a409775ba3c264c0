//! Every live Durable Stream of this server, by path: creation (idempotent,
//! forks), lookup with expiry, deletion (soft while forks live), the
//! sweep of expired and idle streams, and what streams hold against the
//! server's limits.

use super::numbering::ReadRefusal;
use super::offset::Generations;
use super::stream::{media_type, ForkPoint, MakeError, NewStream, Settings, Stream};
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
        }
    }

    /// The memory budget streams take from.
    pub(crate) fn budget(&self) -> &Arc<Bounded> {
        &self.memory
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Restarts `stream`'s TTL and idle clocks.
    pub(crate) fn touch(&self, stream: &Stream) {
        stream
            .last_access_ms
            .store(self.now_ms(), Ordering::Relaxed);
    }

    fn expired(&self, stream: &Stream, now: SystemTime) -> bool {
        if let Some((_, at)) = &stream.settings.expires_at {
            if now >= *at {
                return true;
            }
        }
        let idle_ms = self
            .now_ms()
            .saturating_sub(stream.last_access_ms.load(Ordering::Relaxed));
        if let Some(ttl) = stream.settings.ttl_secs {
            if idle_ms >= ttl.saturating_mul(1000) {
                return true;
            }
        }
        u128::from(idle_ms) >= self.idle.as_millis()
    }

    /// The stream at `path`, if it is live or soft-deleted (an expired one
    /// is removed first).
    pub(crate) fn get(&self, path: &str) -> Option<Arc<Stream>> {
        let stream = self.streams.get(path)?;
        if !stream.soft_deleted.load(Ordering::Acquire) && self.expired(&stream, SystemTime::now())
        {
            let _structure = self.lock();
            self.remove_locked(&stream);
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
    pub(crate) fn create(&self, request: CreateRequest) -> Result<Created, CreateRefusal> {
        // Expired streams at the path (and a fork's source) go first.
        let _ = self.get(&request.path);
        if let Some(source) = &request.settings.forked_from {
            let _ = self.get(source);
        }
        let _structure = self.lock();
        if let Some(existing) = self.streams.get(&request.path) {
            if existing.soft_deleted.load(Ordering::Acquire) {
                return Err(CreateRefusal::SoftDeleted);
            }
            return match same_settings(&existing, &request) {
                true => Ok(Created::Existing(existing)),
                false => Err(CreateRefusal::Conflict),
            };
        }
        let source = match &request.settings.forked_from {
            Some(source) => {
                let source = self.streams.get(source).ok_or(CreateRefusal::NoSource)?;
                if source.soft_deleted.load(Ordering::Acquire) {
                    return Err(CreateRefusal::SourceSoftDeleted);
                }
                Some(source)
            }
            None => None,
        };
        let mut settings = request.settings;
        let mut fork: Option<ForkPoint> = None;
        let mut prefix = None;
        if let Some(source) = &source {
            if settings.content_type.is_empty() {
                settings.content_type = source.settings.content_type.clone();
            } else if media_type(&settings.content_type)
                != media_type(&source.settings.content_type)
            {
                return Err(CreateRefusal::ContentTypeMismatch);
            }
            let offset = settings.fork_offset.unwrap_or_else(|| source.tail_offset());
            let point = source
                .fork_point(offset)
                .map_err(|_: ReadRefusal| CreateRefusal::BadForkOffset)?;
            if settings.fork_sub_offset > 0 {
                prefix = Some(
                    source
                        .prefix_after(point.seq, settings.fork_sub_offset)
                        .map_err(CreateRefusal::BadSubOffset)?,
                );
            }
            settings.fork_offset = Some(offset);
            if settings.ttl_secs.is_none() && settings.expires_at.is_none() {
                settings.ttl_secs = source.settings.ttl_secs;
                settings.expires_at = source.settings.expires_at.clone();
            }
            fork = Some(point);
        }
        if settings.content_type.is_empty() {
            settings.content_type = "application/octet-stream".to_owned();
        }
        let json = media_type(&settings.content_type) == "application/json";
        let initial = match (json, request.body.is_empty()) {
            (_, true) => None,
            (true, false) => {
                super::json_mode::payload(&request.body, true).map_err(CreateRefusal::Json)?
            }
            (false, false) => Some(request.body.to_vec()),
        };
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
                now_ms: self.now_ms(),
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
        let plain = super::rules::AppendRequest {
            close: request.closed,
            ..Default::default()
        };
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
            let _ = stream.append(&[], &plain, &self.memory);
        }
        let (stream, _) = self.streams.get_or_insert_with(request.path, || stream);
        if let Some(source) = &source {
            source.forks.fetch_add(1, Ordering::AcqRel);
        }
        Ok(Created::New(stream))
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
    /// already soft-deleted (`410`), `None` no such stream.
    pub(crate) fn delete(&self, path: &str) -> Option<bool> {
        let stream = self.get(path)?;
        let _structure = self.lock();
        if stream.soft_deleted.load(Ordering::Acquire) {
            return Some(false);
        }
        self.remove_locked(&stream);
        Some(true)
    }

    /// Removes `stream` (soft when forks of it live), and its source when
    /// that was soft-deleted and this was its last fork.
    fn remove_locked(&self, stream: &Arc<Stream>) {
        if stream.forks.load(Ordering::Acquire) > 0 {
            stream.soft_deleted.store(true, Ordering::Release);
            stream.wake();
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
            stream.gone.store(true, Ordering::Release);
            stream.wake();
            let Some(source) = stream
                .settings
                .forked_from
                .as_deref()
                .and_then(|source| self.streams.get(source))
            else {
                continue;
            };
            let left = source
                .forks
                .fetch_sub(1, Ordering::AcqRel)
                .saturating_sub(1);
            if left == 0 && source.soft_deleted.load(Ordering::Acquire) {
                next = Some(source);
            }
        }
    }

    /// Drops every expired or idle stream (soft-deleting those with forks).
    pub(crate) fn sweep(&self) {
        let now = SystemTime::now();
        for (_, stream) in self.streams.entries() {
            if !stream.soft_deleted.load(Ordering::Acquire) && self.expired(&stream, now) {
                let _structure = self.lock();
                self.remove_locked(&stream);
            }
        }
    }

    /// Live streams (soft-deleted ones included).
    pub(crate) fn len(&self) -> usize {
        self.streams.len()
    }
}

/// Whether `request` asks for what `existing` was created with.
fn same_settings(existing: &Stream, request: &CreateRequest) -> bool {
    let asked = &request.settings;
    let have = &existing.settings;
    let content_type = |t: &str| match media_type(t) {
        m if m.is_empty() => "application/octet-stream".to_owned(),
        m => m,
    };
    let type_matches = match (&asked.forked_from, asked.content_type.is_empty()) {
        (Some(_), true) => true,
        _ => content_type(&asked.content_type) == content_type(&have.content_type),
    };
    let expiry_matches = match &asked.forked_from {
        // A fork inherits its source's expiry when it asks for none.
        Some(_) if asked.ttl_secs.is_none() && asked.expires_at.is_none() => true,
        _ => {
            asked.ttl_secs == have.ttl_secs
                && asked.expires_at.as_ref().map(|(s, _)| s)
                    == have.expires_at.as_ref().map(|(s, _)| s)
        }
    };
    type_matches
        && expiry_matches
        && request.closed == existing.is_closed()
        && asked.forked_from == have.forked_from
        && (asked.fork_offset.is_none() || asked.fork_offset == have.fork_offset)
        && asked.fork_sub_offset == have.fork_sub_offset
}
