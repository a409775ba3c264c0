//! The journal of the server's in-process Durable Streams under
//! `--data-dir`: the ring stays in front (every stream lives in the
//! server's registry, and reads never touch the disk), and each change a
//! stream makes — its record (settings, numbering, closure, ...), a
//! message, a producer's state, a trimmed or deleted stream — is a
//! [`StreamOp`] written through the disk history's group commit, so one
//! `fdatasync` acknowledges every change that arrived while the last one
//! ran, in the order they were queued. What a record and a producer's
//! state hold is the server's: the store keeps them as bytes.
//!
//! At start-up the server reads back every record ([`DiskHistory::stored_streams`]),
//! each stream's messages and producers, and rebuilds its rings.

use super::commit::{GroupCommit, OnDurable, Op, Part, Pending};
use super::{store_error, DiskHistory};
use crate::HistoryError;
use bytes::Bytes;
use fjall::Slice;

/// A stream's key in the journal: 16 bytes the server derives from its
/// path (a hash), the prefix of its messages' and producers' keys.
pub type StreamKey = [u8; 16];

/// A stream's key (or any key of the store) as the logs write it:
/// lowercase hex.
pub fn key_hex(key: &[u8]) -> String {
    key.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// One change of a Durable Stream, written with the others of its
/// [`DiskHistory::journal_streams`] call as one atomic batch.
#[derive(Clone, Debug)]
pub enum StreamOp {
    /// Writes the stream's record.
    Record {
        /// The stream.
        stream: StreamKey,
        /// The server's encoding of the stream.
        record: Bytes,
    },
    /// Removes the stream: its record, messages and producers.
    Remove {
        /// The stream.
        stream: StreamKey,
    },
    /// Writes message `seq`.
    Message {
        /// The stream.
        stream: StreamKey,
        /// Its seq.
        seq: u64,
        /// Its payload.
        payload: Bytes,
    },
    /// Removes messages `first ..= last` (retention dropped them).
    Trim {
        /// The stream.
        stream: StreamKey,
        /// The first seq removed.
        first: u64,
        /// The last seq removed.
        last: u64,
    },
    /// Writes producer `id`'s state.
    Producer {
        /// The stream.
        stream: StreamKey,
        /// The producer's id.
        id: Bytes,
        /// The server's encoding of its state.
        state: Bytes,
    },
    /// Forgets producer `id` (evicted).
    ForgetProducer {
        /// The stream.
        stream: StreamKey,
        /// The producer's id.
        id: Bytes,
    },
}

impl StreamOp {
    fn push(self, ops: &mut Vec<Op>) {
        match self {
            Self::Record { stream, record } => ops.push(Op::Insert(
                Part::Streams,
                Slice::from(&stream[..]),
                Slice::from(record),
            )),
            Self::Remove { stream } => {
                ops.push(Op::Remove(Part::Streams, Slice::from(&stream[..])));
                ops.push(Op::RemovePrefix(
                    Part::StreamEvents,
                    Slice::from(&stream[..]),
                ));
                ops.push(Op::RemovePrefix(Part::Producers, Slice::from(&stream[..])));
            }
            Self::Message {
                stream,
                seq,
                payload,
            } => ops.push(Op::Insert(
                Part::StreamEvents,
                Slice::from(&message_key(&stream, seq)[..]),
                Slice::from(payload),
            )),
            Self::Trim {
                stream,
                first,
                last,
            } => {
                for seq in first..=last {
                    ops.push(Op::Remove(
                        Part::StreamEvents,
                        Slice::from(&message_key(&stream, seq)[..]),
                    ));
                }
            }
            Self::Producer { stream, id, state } => ops.push(Op::Insert(
                Part::Producers,
                Slice::from(producer_key(&stream, &id)),
                Slice::from(state),
            )),
            Self::ForgetProducer { stream, id } => ops.push(Op::Remove(
                Part::Producers,
                Slice::from(producer_key(&stream, &id)),
            )),
        }
    }
}

/// The key of message `seq` of `stream`.
fn message_key(stream: &StreamKey, seq: u64) -> [u8; 24] {
    let mut key = [0; 24];
    key[..16].copy_from_slice(stream);
    key[16..].copy_from_slice(&seq.to_be_bytes());
    key
}

/// The key of producer `id` of `stream`.
fn producer_key(stream: &StreamKey, id: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(16 + id.len());
    key.extend_from_slice(stream);
    key.extend_from_slice(id);
    key
}

/// A message's or producer's key: its stream's key, and the rest.
fn split_key(key: &[u8]) -> Result<(StreamKey, &[u8]), HistoryError> {
    let (stream, rest) = key
        .split_at_checked(16)
        .ok_or_else(|| HistoryError::Corrupt(format!("a stream key of {} bytes", key.len())))?;
    let stream = StreamKey::try_from(stream)
        .map_err(|_| HistoryError::Corrupt("a stream key of the wrong length".into()))?;
    Ok((stream, rest))
}

/// The index in `streams` (sorted by key) of `stream`, searching on from
/// `at` (the keys searched for ascend): `None` for one with no record (a
/// leftover of a removal, never served).
fn find(streams: &[StoredStream], at: &mut usize, stream: &StreamKey) -> Option<usize> {
    while streams.get(*at).is_some_and(|stored| stored.key < *stream) {
        *at += 1;
    }
    streams
        .get(*at)
        .filter(|stored| stored.key == *stream)
        .map(|_| *at)
}

/// What a caller of [`DiskHistory::journal_streams`] awaits: the changes
/// durable (or written, with `--fsync never`).
#[must_use = "a change is acknowledged only once it is durable"]
pub struct JournalWait(Pending);

impl JournalWait {
    /// Waits until the changes are durable.
    ///
    /// # Errors
    /// The write or its `fdatasync` failed (the history fails for good:
    /// [`HistoryError::Unavailable`], or [`HistoryError::Full`]).
    pub async fn durable(self) -> Result<(), HistoryError> {
        GroupCommit::durable(self.0).await
    }
}

/// A stream as the journal holds it.
#[derive(Debug)]
pub struct StoredStream {
    /// Its key.
    pub key: StreamKey,
    /// Its record, as the server wrote it.
    pub record: Bytes,
    /// Its retained messages, by seq, ascending.
    pub messages: Vec<(u64, Bytes)>,
    /// Its producers: id and state, as the server wrote them.
    pub producers: Vec<(Bytes, Bytes)>,
}

impl DiskHistory {
    /// `Ok` when a change that adds to the disk may be made: call it
    /// before the change is decided, so that a full disk refuses it
    /// before anything (in memory or on disk) changes.
    ///
    /// # Errors
    /// The history failed ([`HistoryError::Unavailable`]), or the disk is
    /// at its bound or its reserve ([`HistoryError::Full`]).
    pub fn journal_room(&self) -> Result<(), HistoryError> {
        self.room()
    }

    /// Queues `ops` as one atomic write after every write queued before
    /// (call it under the lock that orders the stream's changes, after
    /// [`Self::journal_room`]); await the answer before acknowledging
    /// them. An empty `ops` is a barrier: durable once everything queued
    /// before it is.
    ///
    /// # Errors
    /// The history failed: no write is taken until a restart.
    pub fn journal_streams(&self, ops: Vec<StreamOp>) -> Result<JournalWait, HistoryError> {
        self.submit_streams(ops, None)
    }

    /// [`Self::journal_streams`], and `then` runs once the changes are
    /// durable (not if they fail), before the answer is sent, whether or
    /// not anyone still awaits it: what shows a durable change to readers
    /// then never depends on its writer staying. It runs on the thread
    /// that writes the batch (the committer thread, or a request writing
    /// it inline): it must be short, and neither block nor panic.
    ///
    /// # Errors
    /// As [`Self::journal_streams`] (`then` is dropped, not run).
    pub fn journal_streams_then(
        &self,
        ops: Vec<StreamOp>,
        then: impl FnOnce() + Send + 'static,
    ) -> Result<JournalWait, HistoryError> {
        self.submit_streams(ops, Some(Box::new(then)))
    }

    fn submit_streams(
        &self,
        ops: Vec<StreamOp>,
        then: Option<OnDurable>,
    ) -> Result<JournalWait, HistoryError> {
        let mut changes = Vec::with_capacity(ops.len() + 2);
        for op in ops {
            op.push(&mut changes);
        }
        self.commit.submit_then(changes, then).map(JournalWait)
    }

    /// Every stream the journal holds, with its messages and producers
    /// (start-up).
    ///
    /// # Errors
    /// The store cannot be read.
    pub fn stored_streams(&self) -> Result<Vec<StoredStream>, HistoryError> {
        // Three scans in key order, merged by stream (each partition's
        // keys start with the stream's): no lookup per stream.
        let mut streams: Vec<StoredStream> = Vec::new();
        for entry in self.partitions.streams.iter() {
            let (key, record) = entry.map_err(store_error)?;
            let key = StreamKey::try_from(&key[..]).map_err(|_| {
                HistoryError::Corrupt(format!(
                    "a stream record under a key of {} bytes",
                    key.len()
                ))
            })?;
            streams.push(StoredStream {
                key,
                record: Bytes::from(record),
                messages: Vec::new(),
                producers: Vec::new(),
            });
        }
        let mut at = 0;
        for entry in self.partitions.stream_events.iter() {
            let (key, payload) = entry.map_err(store_error)?;
            let (stream, seq) = split_key(&key)?;
            let seq = <[u8; 8]>::try_from(seq).map_err(|_| {
                HistoryError::Corrupt(format!("a stream message key of {} bytes", key.len()))
            })?;
            if let Some(stored) = find(&streams, &mut at, &stream) {
                streams[stored]
                    .messages
                    .push((u64::from_be_bytes(seq), Bytes::from(payload)));
            }
        }
        let mut at = 0;
        for entry in self.partitions.producers.iter() {
            let (key, state) = entry.map_err(store_error)?;
            let (stream, id) = split_key(&key)?;
            if let Some(stored) = find(&streams, &mut at, &stream) {
                streams[stored]
                    .producers
                    .push((Bytes::copy_from_slice(id), Bytes::from(state)));
            }
        }
        Ok(streams)
    }

    /// Marks the last run of the closed history in `dir` as one that did
    /// not close, on another boot of the machine: with `--fsync never`,
    /// the next open takes it as a power cut that may have lost
    /// acknowledged writes (tests of what follows one).
    ///
    /// # Panics
    /// The store cannot be opened or holds no run record.
    #[cfg(any(test, feature = "test-support"))]
    pub fn as_if_the_machine_restarted_unclosed(dir: &std::path::Path) {
        let keyspace = fjall::Config::new(dir.join("store"))
            .open()
            .expect("the store");
        let runs = keyspace
            .open_partition("runs", fjall::PartitionCreateOptions::default())
            .expect("runs");
        let mut run = super::record::RunRecord::decode(
            &runs
                .get(super::RUN_KEY)
                .expect("get")
                .expect("a run record"),
        )
        .expect("decode");
        run.clean = false;
        run.boot_id = "another boot".into();
        runs.insert(super::RUN_KEY, run.encode()).expect("insert");
        keyspace
            .persist(fjall::PersistMode::SyncAll)
            .expect("persist");
    }

    /// Holds the group commit until the guard is dropped: what is queued
    /// meanwhile is neither written nor answered (tests of what readers
    /// are shown before a change is durable).
    #[cfg(any(test, feature = "test-support"))]
    pub fn hold_commits(&self) -> super::commit::CommitsHeld<'_> {
        self.commit.hold()
    }

    /// The Durable Streams whose changes start-up cut from the journal's
    /// damaged last write (a torn or corrupt tail), each with what they
    /// were ("message 5, record"): the server names them by path.
    pub fn streams_in_cut_tail(&self) -> &[(StreamKey, String)] {
        &self.cut_streams
    }

    /// Whether the last run may have lost writes it acknowledged: it ran
    /// with `--fsync never` and the machine restarted before it closed.
    /// Every stream then continues under a new generation.
    pub fn lost_acknowledged_writes(&self) -> bool {
        self.lossy
    }
}
