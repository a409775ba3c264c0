//! A stream's side of the journal (`--data-dir`, `super::journal`): what
//! its create and appends queue, the barrier a change-less answer waits
//! on, its record, and the stream rebuilt from the journal at start-up.

use super::{
    clock_ms, AppendRefusal, AppendRequest, Arc, Bounded, MakeError, NewStream, Ordering, Producer,
    Stream, Tail, PRODUCER_ENTRY_BYTES,
};
use crate::streams::journal::{self, Journal, ProducerState, StreamRecord};
use gapless_history::{JournalWait, StreamKey, StreamOp};

/// What a stream had before a restart, beside its settings and messages:
/// given to [`Stream::restore`].
pub(crate) struct Restored {
    /// Its producers, by id, with their state on disk.
    pub(crate) producers: Vec<(String, ProducerState)>,
    pub(crate) stream_seq: Option<String>,
    pub(crate) closed_by: Option<(String, u64, u64)>,
    pub(crate) soft_deleted: bool,
    /// When it was last accessed (ms since the Unix epoch), if the record
    /// says: its `Stream-TTL` clock continues from it (the idle clock
    /// restarts).
    pub(crate) accessed_unix_ms: Option<u64>,
}

/// A change queued to the journal: acknowledged once [`Queued::durable`]
/// returns. What it shows readers is shown by then, by the journal's
/// committer ([`Shown::on_durable`]), whether or not anyone awaits it.
#[must_use = "a journaled change is acknowledged only once durable"]
pub(crate) struct Queued {
    /// The journal's answer to come, or why it took nothing.
    wait: Result<JournalWait, AppendRefusal>,
}

impl Queued {
    /// A change `submitted` to the journal.
    ///
    /// # Errors
    /// The journal took nothing.
    pub(crate) fn new(
        submitted: Result<JournalWait, AppendRefusal>,
    ) -> Result<Self, AppendRefusal> {
        Ok(Self {
            wait: Ok(submitted?),
        })
    }

    /// A change the journal did not take (the memory has it): awaiting it
    /// answers `refusal`.
    pub(crate) fn failed(refusal: AppendRefusal) -> Self {
        Self { wait: Err(refusal) }
    }

    /// Waits for the change to be durable.
    ///
    /// # Errors
    /// The journal failed (`503`) or the disk is full (`507`).
    pub(crate) async fn durable(self) -> Result<(), AppendRefusal> {
        self.wait?
            .durable()
            .await
            .map_err(|error| journal::refusal(&error))
    }
}

impl Stream {
    /// Queues what an append changed (`tail` held, `published` its last
    /// seq): the message and what the ring evicted, the producer's state
    /// and those it displaced, the record when a close or `Stream-Seq`
    /// changed it.
    pub(super) fn journal_append(
        &self,
        journal: &Journal,
        key: StreamKey,
        tail: &mut Tail,
        payload: Option<&[u8]>,
        request: &AppendRequest<'_>,
        evicted: Vec<String>,
    ) -> Result<Queued, AppendRefusal> {
        let published = tail.ring().published();
        let mut ops = Vec::with_capacity(3);
        if let Some(payload) = payload {
            ops.push(StreamOp::Message {
                stream: key,
                seq: published,
                payload: bytes::Bytes::copy_from_slice(payload),
            });
            tail.trim_journal(key, &mut ops);
        }
        if let Some((id, epoch, seq)) = request.producer {
            let state = ProducerState {
                producer: Producer {
                    epoch,
                    last_seq: seq,
                },
                at_unix_ms: journal::unix_ms_now(),
            };
            ops.push(StreamOp::Producer {
                stream: key,
                id: bytes::Bytes::copy_from_slice(id.as_bytes()),
                state: state.encode(),
            });
        }
        ops.extend(evicted.into_iter().map(|id| StreamOp::ForgetProducer {
            stream: key,
            id: bytes::Bytes::from(id.into_bytes()),
        }));
        if request.stream_seq.is_some() || request.close {
            ops.push(StreamOp::Record {
                stream: key,
                record: self.record(tail).encode(),
            });
        }
        self.submit_shown(journal, ops, published, request.close)
    }

    /// Queues `ops`, a change made when the stream's last seq was `seq`
    /// (`closes`: it closes the stream): once durable, the committer shows
    /// readers the messages up to `seq`, the stream and the close.
    pub(crate) fn submit_shown(
        &self,
        journal: &Journal,
        ops: Vec<StreamOp>,
        seq: u64,
        closes: bool,
    ) -> Result<Queued, AppendRefusal> {
        Queued::new(journal.submit_then(ops, self.shown.on_durable(seq, closes)))
    }

    /// Whether readers are told the stream is closed: with a journal,
    /// only once its close is durable.
    pub(crate) fn closed_for_readers(&self) -> bool {
        self.is_closed() && self.shown.closure_durable()
    }

    /// [`Self::closed_for_readers`], once what a reader is about to be
    /// told is durable: a stream whose creation or close is queued to the
    /// journal and not yet durable is answered after a barrier behind it,
    /// so that no reader learns of a stream, or of its close, that a
    /// restart could take back (a reader told a stream is closed stops
    /// reading it). Two loads when nothing is pending.
    pub(crate) async fn settled_for_readers(&self, journal: Option<&Journal>) -> bool {
        let pending =
            !self.shown.creation_durable() || (self.is_closed() && !self.shown.closure_durable());
        if let (true, Some(journal)) = (pending, journal) {
            // Queued under the writer lock, so behind the change seen: a
            // close is queued under it as its flag is set, a creation
            // before the stream can be found. Durable, it shows them.
            if let Ok(queued) = self.barrier(journal) {
                let _ = queued.durable().await;
            }
        }
        self.closed_for_readers()
    }

    /// The stream's journal record as it is now (`tail` held).
    fn record(&self, tail: &Tail) -> StreamRecord {
        let (lineage, own_generation, start_after) = self.numbering.parts();
        StreamRecord {
            version: journal::RECORD_VERSION,
            path: self.path.clone(),
            content_type: self.settings.content_type.clone(),
            ttl_secs: self.settings.ttl_secs,
            expires_at: self
                .settings
                .expires_at
                .as_ref()
                .map(|(text, _)| text.clone()),
            forked_from: self.settings.forked_from.clone(),
            fork_offset: self.settings.fork_offset.map(|offset| offset.to_string()),
            fork_sub_offset: self.settings.fork_sub_offset,
            lineage: lineage.to_vec(),
            own_generation,
            start_after,
            ring_start: self.ring_start,
            closed: self.is_closed(),
            closed_by: tail.closed_by.clone(),
            stream_seq: tail.stream_seq.clone(),
            publish_key: self.publish_key.map(|key| key.to_string()),
            soft_deleted: self.soft_deleted.load(Ordering::Acquire),
            accessed_unix_ms: Some(self.note_access_journaled()),
            client: self.creator.map(|client| client.to_string()),
        }
    }

    /// Notes the last access as the one the journal holds (a record being
    /// written says it), and returns it as a wall-clock time (ms since the
    /// Unix epoch).
    fn note_access_journaled(&self) -> u64 {
        let access = self.last_access_ms.load(Ordering::Relaxed);
        self.journaled_access_ms.store(access, Ordering::Relaxed);
        journal::unix_ms_now().saturating_sub(clock_ms(self.origin).saturating_sub(access))
    }

    /// The stream's clock `ago` before now.
    fn clock_ago(&self, ago: std::time::Duration) -> u64 {
        clock_ms(self.origin).saturating_sub(u64::try_from(ago.as_millis()).unwrap_or(u64::MAX))
    }

    /// Sets the last access `ago` before now (tests of the clocks).
    #[cfg(test)]
    pub(crate) fn accessed_ago(&self, ago: std::time::Duration) {
        self.last_access_ms
            .store(self.clock_ago(ago), Ordering::Relaxed);
    }

    /// Takes the journal record to say the access of `ago` before now
    /// (tests of the clocks).
    #[cfg(test)]
    pub(crate) fn journaled_ago(&self, ago: std::time::Duration) {
        self.journaled_access_ms
            .store(self.clock_ago(ago), Ordering::Relaxed);
    }

    /// How far the last access runs ahead of what the journal record says
    /// (0: the record says it).
    pub(crate) fn access_unjournaled_ms(&self) -> u64 {
        self.last_access_ms
            .load(Ordering::Relaxed)
            .saturating_sub(self.journaled_access_ms.load(Ordering::Relaxed))
    }

    /// Writes the stream's record again when its last access runs ahead
    /// of what the record says, by `at_least_ms` or more. Nobody waits for
    /// it: a journal that failed simply leaves the older access on disk.
    pub(crate) fn journal_access(&self, journal: &Journal, at_least_ms: u64) {
        let Some(key) = self.journal_key else {
            return;
        };
        let behind = |stream: &Self| {
            let ahead = stream.access_unjournaled_ms();
            ahead > 0 && ahead >= at_least_ms
        };
        if !behind(self) {
            return;
        }
        let tail = self.tail();
        // Under the writer lock: ordered with the record's other writes,
        // and never after the stream's removal.
        if !behind(self) || self.gone.load(Ordering::Acquire) {
            return;
        }
        let record = StreamOp::Record {
            stream: key,
            record: self.record(&tail).encode(),
        };
        drop(journal.submit(vec![record]));
    }

    /// A barrier in the journal: durable once every change of the stream
    /// queued before it is, which it then shows.
    ///
    /// # Errors
    /// The journal failed.
    pub(crate) fn barrier(&self, journal: &Journal) -> Result<Queued, AppendRefusal> {
        let tail = self.tail();
        self.barrier_under(journal, &tail)
    }

    /// [`Self::barrier`], the writer lock held (`tail`): a close seen
    /// under it was queued before the barrier.
    pub(super) fn barrier_under(
        &self,
        journal: &Journal,
        tail: &Tail,
    ) -> Result<Queued, AppendRefusal> {
        let published = tail.ring().published();
        self.submit_shown(journal, Vec::new(), published, self.is_closed())
    }

    /// The stream's journal record as it is now.
    pub(crate) fn record_now(&self) -> StreamRecord {
        let tail = self.tail();
        self.record(&tail)
    }

    /// What a new stream writes to the journal: its record and every
    /// message its ring holds.
    pub(crate) fn creation(&self, key: StreamKey) -> Vec<StreamOp> {
        let tail = self.tail();
        let mut ops = vec![StreamOp::Record {
            stream: key,
            record: self.record(&tail).encode(),
        }];
        let ring = tail.ring();
        let mut cursor = tail.journaled_from.saturating_sub(1);
        while cursor < ring.published() {
            let Ok(events) = ring.replay_range(cursor, ring.published().min(cursor + 256)) else {
                break;
            };
            if events.is_empty() {
                break;
            }
            for event in events {
                cursor = event.seq;
                ops.push(StreamOp::Message {
                    stream: key,
                    seq: event.seq,
                    payload: event.payload,
                });
            }
        }
        ops
    }

    /// A stream as it was before a restart: `new` (its settings,
    /// numbering and retained messages), then `restored`, every message
    /// durable.
    pub(crate) fn restore(
        new: NewStream,
        restored: Restored,
        budget: &Arc<Bounded>,
    ) -> Result<Self, MakeError> {
        let stream = Self::new(new, budget)?;
        {
            let mut tail = stream.tail();
            tail.stream_seq = restored.stream_seq;
            tail.closed_by = restored.closed_by;
            let mut producers = restored.producers;
            // The idle longest first: each entry's rank of last append.
            producers.sort_by_key(|(_, state)| state.at_unix_ms);
            for (id, state) in producers {
                if journal::since_unix_ms(state.at_unix_ms) >= stream.producer_limits.idle {
                    continue;
                }
                let charge = stream
                    .charge(budget, id.len() as u64 + PRODUCER_ENTRY_BYTES)
                    .map_err(|refusal| match refusal {
                        AppendRefusal::ClientShare => MakeError::ClientShare,
                        _ => MakeError::MemoryBudget,
                    })?;
                let _ = tail.record_producer(
                    &id,
                    state.producer,
                    stream.clock_ago(journal::since_unix_ms(state.at_unix_ms)),
                    Some(charge),
                    stream.producer_limits,
                );
            }
            stream.shown.restored(tail.ring().published());
        }
        if let Some(at) = restored.accessed_unix_ms {
            // The record may be a period behind the last access (a crash
            // before the next pass): counted from after it, a crash
            // shortens no stream's life.
            let slack = u64::try_from(journal::ACCESS_SLACK.as_millis()).unwrap_or(u64::MAX);
            let at = at.saturating_add(slack);
            let access = stream.clock_ago(journal::since_unix_ms(at));
            stream.last_access_ms.store(access, Ordering::Relaxed);
            stream.journaled_access_ms.store(access, Ordering::Relaxed);
        }
        stream
            .soft_deleted
            .store(restored.soft_deleted, Ordering::Release);
        Ok(stream)
    }
}

impl Tail {
    /// Removes from the journal the messages the ring evicted since the
    /// last trim: the journal holds what the ring holds.
    fn trim_journal(&mut self, key: StreamKey, ops: &mut Vec<StreamOp>) {
        let first = self.ring().first_retained_from(self.journaled_from);
        if first > self.journaled_from {
            ops.push(StreamOp::Trim {
                stream: key,
                first: self.journaled_from,
                last: first - 1,
            });
            self.journaled_from = first;
        }
    }
}
