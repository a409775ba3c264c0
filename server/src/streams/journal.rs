//! The journal of this process's streams under `--data-dir`: the ring
//! stays in front (every stream lives in the registry; reads never touch
//! the disk) and every change a stream makes is written to the disk
//! history's stream partitions through its group commit
//! ([`DiskHistory::journal_streams`]) before it is acknowledged.
//!
//! What is written, per stream (its [`StreamKey`]: its generation at
//! creation and a hash of its path, so a stream re-created at a path is
//! another key):
//!
//! - its [`StreamRecord`] — settings, numbering, closure, `Stream-Seq`,
//!   publish key, soft deletion — at its creation and whenever one of
//!   those changes (a close, a `Stream-Seq`, a deletion while forks live);
//! - each message, under its seq, with the removal of what the ring
//!   evicted (the disk keeps what the ring keeps);
//! - each idempotent producer's state ([`ProducerState`]), and the
//!   removal of a producer evicted at the cap;
//! - the removal of the whole stream when it goes.
//!
//! A change is queued under the lock that orders the stream's changes (its
//! writer lock; the registry's structure lock for creates and deletions),
//! so the journal holds them in their order. Readers see a stream's
//! messages up to its last durable seq only (`super::shown`), moved by
//! the committer once the change is durable.

use super::offset::Offset;
use super::rules::{AppendRefusal, Producer};
use super::settings::Settings;
use crate::history::HistoryError;
use bytes::Bytes;
use gapless_history::{DiskHistory, JournalWait, StreamKey, StreamOp};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The version of [`StreamRecord`]'s encoding.
pub(crate) const RECORD_VERSION: u32 = 1;

/// How far, with a journal, a `Stream-TTL` stream's last access may run
/// ahead of what its record says before the record is written again (the
/// registry's sweep looks every second): one record per active such stream
/// per period.
pub(crate) const ACCESS_JOURNAL_EVERY: Duration = Duration::from_secs(30);

/// How much later than its record says a restored `Stream-TTL` stream's
/// last access may have been: [`ACCESS_JOURNAL_EVERY`], the sweep's second,
/// and the pass that writes the records and their commit (a few seconds at
/// most). A restored TTL clock counts from this much after the record's
/// access, so that a crash shortens no stream's life.
pub(crate) const ACCESS_SLACK: Duration = Duration::from_secs(35);

/// The disk history this process's streams are journaled to.
pub(crate) struct Journal {
    disk: Arc<DiskHistory>,
}

impl Journal {
    pub(crate) fn new(disk: Arc<DiskHistory>) -> Self {
        Self { disk }
    }

    /// The disk history.
    pub(crate) fn disk(&self) -> &DiskHistory {
        &self.disk
    }

    /// `Ok` when a change that adds to the disk may be decided.
    ///
    /// # Errors
    /// The disk is full (`507`) or the history failed (`503`).
    pub(crate) fn room(&self) -> Result<(), AppendRefusal> {
        self.disk.journal_room().map_err(|error| refusal(&error))
    }

    /// Queues `ops` after every change queued before.
    ///
    /// # Errors
    /// The history failed: nothing is taken until a restart.
    pub(crate) fn submit(&self, ops: Vec<StreamOp>) -> Result<JournalWait, AppendRefusal> {
        self.disk
            .journal_streams(ops)
            .map_err(|error| refusal(&error))
    }

    /// [`Self::submit`], and `then` runs on the thread that writes the
    /// batch (the committer, or a request inline) once the changes are
    /// durable, before anyone awaiting them hears so (see
    /// [`DiskHistory::journal_streams_then`]): short, never blocking.
    ///
    /// # Errors
    /// As [`Self::submit`].
    pub(crate) fn submit_then(
        &self,
        ops: Vec<StreamOp>,
        then: impl FnOnce() + Send + 'static,
    ) -> Result<JournalWait, AppendRefusal> {
        self.disk
            .journal_streams_then(ops, then)
            .map_err(|error| refusal(&error))
    }
}

/// What a journal failure answers.
pub(crate) fn refusal(error: &HistoryError) -> AppendRefusal {
    match error {
        HistoryError::Full(_) => AppendRefusal::StorageFull,
        _ => AppendRefusal::Unavailable,
    }
}

/// The key of a stream made at `path` under `generation`.
pub(crate) fn key_of(path: &str, generation: u64) -> StreamKey {
    let digest = Sha256::new()
        .chain_update(b"gapless durable stream journal\n")
        .chain_update(path.as_bytes())
        .finalize();
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&generation.to_be_bytes());
    key[8..].copy_from_slice(&digest[..8]);
    key
}

/// A stream's record: everything but its messages and producers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StreamRecord {
    /// [`RECORD_VERSION`].
    pub(crate) version: u32,
    pub(crate) path: String,
    pub(crate) content_type: String,
    pub(crate) ttl_secs: Option<u64>,
    /// `Stream-Expires-At` as given (RFC 3339).
    pub(crate) expires_at: Option<String>,
    pub(crate) forked_from: Option<String>,
    /// The fork offset, as the wire writes it.
    pub(crate) fork_offset: Option<String>,
    pub(crate) fork_sub_offset: u64,
    /// The numbering: the inherited generations, the stream's own, and
    /// the seq before its first message ever.
    pub(crate) lineage: Vec<(u64, u64)>,
    pub(crate) own_generation: u64,
    pub(crate) start_after: u64,
    /// The seq before the first message its first ring held: its tail
    /// while it holds no message.
    pub(crate) ring_start: u64,
    pub(crate) closed: bool,
    /// The producer append that closed it: id, epoch, seq.
    pub(crate) closed_by: Option<(String, u64, u64)>,
    pub(crate) stream_seq: Option<String>,
    /// With `--publish-keys`: the key, as its text.
    pub(crate) publish_key: Option<String>,
    /// Deleted while forks of it live.
    pub(crate) soft_deleted: bool,
    /// Its last read or append (ms since the Unix epoch) when the record
    /// was written: its `Stream-TTL` clock continues from it after a
    /// restart (`ACCESS_SLACK` later). Absent from records of earlier
    /// builds (the clock then restarts at the start-up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) accessed_unix_ms: Option<u64>,
    /// The creating client's key (an IPv4 address, or an IPv6 `/64` as its
    /// first address), whose share of the memory budget the stream is
    /// charged to again after a restart. Absent for a stream made without
    /// a client address, and in records of earlier builds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) client: Option<String>,
}

impl StreamRecord {
    /// The record's bytes.
    pub(crate) fn encode(&self) -> Bytes {
        // A record of strings and numbers always serialises.
        Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }

    /// The record in `bytes`.
    ///
    /// # Errors
    /// Not a record of a version this build reads.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        let record: Self = serde_json::from_slice(bytes).map_err(|error| error.to_string())?;
        if record.version != RECORD_VERSION {
            return Err(format!(
                "record version {} (this build reads {RECORD_VERSION})",
                record.version
            ));
        }
        Ok(record)
    }

    /// The settings the record holds.
    ///
    /// # Errors
    /// An expiry or fork offset that does not parse.
    pub(crate) fn settings(&self) -> Result<Settings, String> {
        let expires_at = match &self.expires_at {
            Some(text) => Some(
                chrono::DateTime::parse_from_rfc3339(text)
                    .map(|at| (text.clone(), SystemTime::from(at)))
                    .map_err(|error| format!("Stream-Expires-At {text:?}: {error}"))?,
            ),
            None => None,
        };
        let fork_offset = match &self.fork_offset {
            Some(text) => Some(Offset::parse(text).ok_or_else(|| format!("fork offset {text:?}"))?),
            None => None,
        };
        Ok(Settings {
            content_type: self.content_type.clone(),
            ttl_secs: self.ttl_secs,
            expires_at,
            forked_from: self.forked_from.clone(),
            fork_offset,
            fork_sub_offset: self.fork_sub_offset,
        })
    }
}

/// A producer's state on disk: its epoch and last seq, and when it last
/// appended (ms since the Unix epoch, so its idle time survives a
/// restart), as `<epoch> <last seq> <ms>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProducerState {
    pub(crate) producer: Producer,
    pub(crate) at_unix_ms: u64,
}

impl ProducerState {
    pub(crate) fn encode(&self) -> Bytes {
        Bytes::from(format!(
            "{} {} {}",
            self.producer.epoch, self.producer.last_seq, self.at_unix_ms
        ))
    }

    /// The state in `bytes`, if it is one.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut parts = text.split(' ');
        let state = Self {
            producer: Producer {
                epoch: parts.next()?.parse().ok()?,
                last_seq: parts.next()?.parse().ok()?,
            },
            at_unix_ms: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(state)
    }
}

/// Milliseconds since the Unix epoch now.
pub(crate) fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// How long ago `at_unix_ms` was (zero for a time ahead of the clock).
pub(crate) fn since_unix_ms(at_unix_ms: u64) -> Duration {
    Duration::from_millis(unix_ms_now().saturating_sub(at_unix_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written_and_a_damaged_one_is_an_error() {
        let record = StreamRecord {
            version: RECORD_VERSION,
            path: "a/b".into(),
            content_type: "application/json".into(),
            ttl_secs: Some(60),
            expires_at: Some("2030-01-01T00:00:00Z".into()),
            forked_from: Some("a".into()),
            fork_offset: Some(
                Offset {
                    generation: 7,
                    seq: 3,
                }
                .to_string(),
            ),
            fork_sub_offset: 2,
            lineage: vec![(7, 3)],
            own_generation: 9,
            start_after: 0,
            ring_start: 3,
            closed: true,
            closed_by: Some(("p".into(), 1, 4)),
            stream_seq: Some("0042".into()),
            publish_key: None,
            soft_deleted: false,
            accessed_unix_ms: Some(1_800_000_000_000),
            client: Some("2001:db8::".into()),
        };
        let bytes = record.encode();
        assert_eq!(StreamRecord::decode(&bytes), Ok(record.clone()));
        let settings = record.settings().expect("settings");
        assert_eq!(
            settings.fork_offset,
            Some(Offset {
                generation: 7,
                seq: 3
            })
        );
        assert!(settings.expires_at.is_some());
        for cut in 0..bytes.len() {
            assert!(StreamRecord::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        // A record of an earlier build has no access: it reads as none.
        let earlier = String::from_utf8(bytes.to_vec())
            .expect("JSON")
            .replace(",\"accessed_unix_ms\":1800000000000", "");
        assert_ne!(earlier.as_bytes(), &bytes[..], "the field was written");
        assert_eq!(
            StreamRecord::decode(earlier.as_bytes()).map(|record| record.accessed_unix_ms),
            Ok(None)
        );
        let newer = StreamRecord {
            version: RECORD_VERSION + 1,
            ..record
        };
        assert!(StreamRecord::decode(&newer.encode()).is_err());
    }

    #[test]
    fn a_producer_state_reads_back_and_anything_else_is_none() {
        let state = ProducerState {
            producer: Producer {
                epoch: 2,
                last_seq: 9,
            },
            at_unix_ms: 1_700_000_000_000,
        };
        assert_eq!(ProducerState::decode(&state.encode()), Some(state));
        for bad in ["", "1", "1 2", "1 2 3 4", "a 2 3", "1 -2 3"] {
            assert_eq!(ProducerState::decode(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn keys_differ_by_path_and_by_generation() {
        assert_ne!(key_of("a", 1), key_of("b", 1));
        assert_ne!(key_of("a", 1), key_of("a", 2));
        assert_eq!(key_of("a", 1), key_of("a", 1));
    }
}
