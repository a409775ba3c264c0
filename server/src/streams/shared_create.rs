//! Creating a stream in the shared history: its log made `pending`, a
//! fork's claim on its source, its first messages (a fork's inheritance,
//! copied exactly, in pages) and the mark that it is done; a create that
//! stopped half way is completed by a retry or undone.

use super::feed::PAGE_BYTES;
use super::fork_point::sub_offset_prefix;
use super::numbering::Numbering;
use super::registry::{initial_payload, CreateRefusal};
use super::settings::Settings;
use super::shared::{
    as_read, claim_field, create_unavailable, field, log_of, now_ms, SharedCreated, SharedStreams,
    View, DECIDE_TRIES,
};
use crate::client_addr::ClientKey;
use crate::history::{Guard, History, HistoryError, Meta};
use crate::ids::PublishKey;
use bytes::Bytes;

impl<H: History> SharedStreams<H> {
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
    pub(super) async fn put_first(
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
    pub(super) async fn undo(&self, path: &str) {
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
    pub(super) async fn inheritance(
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
    pub(super) async fn prefix_after(
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
    pub(super) async fn claim_source(
        &self,
        source: &str,
        fork_path: &str,
    ) -> Result<(), CreateRefusal> {
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
}

/// The answer to a create that found `view`'s stream at its path: `None`
/// when it is a create with the same settings that has not put its first
/// messages in yet (the caller completes it).
pub(super) fn existing_answer(
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
pub(super) fn new_meta(
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
pub(super) fn pages_of(payloads: &[Bytes], max_bytes: usize) -> impl Iterator<Item = &[Bytes]> {
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
