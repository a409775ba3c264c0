//! The registry rebuilt from the journal at start-up (`--data-dir`):
//! every stream the journal holds comes back with its settings, offsets
//! and generation, closure, `Stream-Seq`, producers, soft deletion and
//! forks, its ring refilled with the messages it retained, all of them
//! durable. A fork is rebuilt after its source and counted on it again.
//!
//! After a run that may have lost acknowledged writes (`--fsync never`,
//! then a machine restart before it closed), every stream continues under
//! a new generation: an offset handed out past what survived names a
//! generation the stream has no position in, and is refused rather than
//! served other messages.
//!
//! A `Stream-TTL` stream's TTL clock continues from the last access its
//! record holds (written again once the access runs
//! `journal::ACCESS_JOURNAL_EVERY` ahead of it, and at a clean stop;
//! counted from `journal::ACCESS_SLACK` after it), a producer's idle clock
//! from its last append; the
//! `--idle-timeout` clock restarts (downtime is not idleness). A stream is
//! charged to its creating client's share of the memory budget again (a
//! client gets no second share from a restart).

use super::charge::ClientCharge;
use super::journal::{Journal, ProducerState, StreamRecord};
use super::stream::{MakeError, NewStream, Restored, Stream};
use super::Streams;
use crate::client_addr::ClientKey;
use bytes::Bytes;
use gapless_history::{key_hex, StoredStream, StreamKey, StreamOp};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What a start-up restored.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Report {
    pub(crate) streams: usize,
    pub(crate) messages: u64,
    pub(crate) producers: usize,
    /// Streams whose record could not be read: left out, and left on disk.
    pub(crate) unreadable: usize,
}

/// Why the journal's streams cannot be served.
#[derive(Debug)]
pub(crate) enum RestoreError {
    /// The store could not be read.
    Store(String),
    /// Restoring takes more than the memory budget.
    MemoryBudget { path: String },
    /// A message is larger than the configured ring holds.
    TooLarge {
        path: String,
        len: usize,
        max: usize,
    },
    /// A ring cannot be built.
    Config(String),
    /// The new generations after a lossy restart could not be written.
    Journal,
}

impl std::fmt::Display for RestoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Store(why) => write!(f, "the data directory's streams cannot be read: {why}"),
            Self::MemoryBudget { path } => write!(
                f,
                "the data directory's streams need more than --memory-budget (at stream {path:?}): raise it"
            ),
            Self::TooLarge { path, len, max } => write!(
                f,
                "stream {path:?} holds a message of {len} bytes, larger than the ring holds ({max}): raise --ring-bytes"
            ),
            Self::Config(why) => write!(f, "a restored stream's ring: {why}"),
            Self::Journal => write!(f, "the restored streams' new generations could not be written"),
        }
    }
}

impl std::error::Error for RestoreError {}

/// One stream read back, not yet rebuilt.
struct Loaded {
    key: StreamKey,
    record: StreamRecord,
    messages: Vec<(u64, Bytes)>,
    producers: Vec<(Bytes, Bytes)>,
}

/// Rebuilds `streams` (empty) from `journal`.
///
/// # Errors
/// [`RestoreError`]: nothing is served from a journal it cannot restore
/// whole.
pub(crate) async fn restore(streams: &Streams, journal: &Journal) -> Result<Report, RestoreError> {
    let stored = journal
        .disk()
        .stored_streams()
        .map_err(|error| RestoreError::Store(error.to_string()))?;
    let mut report = Report::default();
    let mut loaded = Vec::with_capacity(stored.len());
    for StoredStream {
        key,
        record,
        messages,
        producers,
    } in stored
    {
        match StreamRecord::decode(&record) {
            Ok(record) => loaded.push(Loaded {
                key,
                record,
                messages: contiguous(messages, key),
                producers,
            }),
            Err(why) => {
                report.unreadable += 1;
                tracing::error!(
                    key = %key_hex(&key), %why,
                    "a stream's record in the data directory cannot be read: the stream is left out (its readers get 404) and left on disk"
                );
            }
        }
    }
    // Sources before their forks: by depth of the fork chain.
    let by_path: HashMap<String, usize> = loaded
        .iter()
        .enumerate()
        .map(|(at, stream)| (stream.record.path.clone(), at))
        .collect();
    let depth = |mut at: usize| {
        let mut depth = 0;
        while let Some(source) = loaded[at]
            .record
            .forked_from
            .as_ref()
            .and_then(|path| by_path.get(path))
        {
            depth += 1;
            at = *source;
            if depth > loaded.len() {
                break;
            }
        }
        depth
    };
    let mut order: Vec<(usize, usize)> = (0..loaded.len()).map(|at| (depth(at), at)).collect();
    order.sort_unstable();

    let parts = streams.parts();
    let lossy = journal.disk().lost_acknowledged_writes();
    let mut rewritten = Vec::new();
    let mut made: HashMap<String, Arc<Stream>> = HashMap::with_capacity(loaded.len());
    let mut slots: Vec<Option<Loaded>> = loaded.into_iter().map(Some).collect();
    for (_, at) in order {
        let Some(Loaded {
            key,
            mut record,
            messages,
            producers,
        }) = slots[at].take()
        else {
            continue;
        };
        parts.generations.above(record.own_generation);
        let settings = record
            .settings()
            .map_err(|why| RestoreError::Store(format!("stream {:?}: {why}", record.path)))?;
        let last = messages.last().map_or(record.ring_start, |&(seq, _)| seq);
        if lossy {
            // What was handed out under the stream's generation past
            // `last` may be lost: later messages take a new one.
            record.lineage.push((record.own_generation, last));
            record.own_generation = parts.generations.next();
            rewritten.push(StreamOp::Record {
                stream: key,
                record: record.encode(),
            });
        }
        let source = record
            .forked_from
            .as_ref()
            .and_then(|path| made.get(path))
            .cloned();
        if record.forked_from.is_some() && source.is_none() {
            tracing::warn!(path = %record.path, "a restored fork's source is not in the data directory: it stands alone");
        }
        let producers: Vec<(String, ProducerState)> = producers
            .into_iter()
            .filter_map(|(id, state)| {
                let id = String::from_utf8(id.to_vec()).ok()?;
                Some((id, ProducerState::decode(&state)?))
            })
            .collect();
        report.producers += producers.len();
        report.messages += messages.len() as u64;
        let ring_start = messages
            .first()
            .map_or(record.ring_start, |&(seq, _)| seq.saturating_sub(1));
        let path = record.path.clone();
        let inherited: Vec<Bytes> = messages.into_iter().map(|(_, payload)| payload).collect();
        let client = record.client.as_deref().and_then(|text| match text.parse() {
            Ok(ip) => Some(ClientCharge {
                shares: Arc::clone(parts.client_shares),
                client: ClientKey::of(ip),
            }),
            Err(_) => {
                tracing::warn!(path = %record.path, client = text, "a restored stream's client is no address: it is charged to no client's share");
                None
            }
        });
        let make = |client: Option<ClientCharge>| {
            Stream::restore(
                NewStream {
                    path: path.clone(),
                    settings: settings.clone(),
                    lineage: record.lineage.clone(),
                    own_generation: record.own_generation,
                    full: parts.ring,
                    inherited: inherited.clone(),
                    start_after: record.start_after,
                    ring_start,
                    closed: record.closed,
                    origin: parts.origin,
                    source: source.clone(),
                    producer_limits: parts.producer_limits,
                    publish_key: record
                        .publish_key
                        .as_deref()
                        .and_then(|key| key.parse().ok()),
                    client,
                    journal_key: Some(key),
                },
                Restored {
                    producers: producers.clone(),
                    stream_seq: record.stream_seq.clone(),
                    closed_by: record.closed_by.clone(),
                    soft_deleted: record.soft_deleted,
                    accessed_unix_ms: record.accessed_unix_ms,
                },
                parts.memory,
            )
        };
        // Charged to its client's share again, as before the restart; past
        // it (the share was lowered meanwhile), it is restored uncharged:
        // an acknowledged stream is never dropped for a share.
        let creator = client.as_ref().map(|charge| charge.client);
        let made_stream = match make(client) {
            Err(MakeError::ClientShare) => {
                tracing::warn!(path = ?path, "a restored stream is past its client's share of the memory budget (lowered since?): restored, not charged to it");
                make(None).map(|mut stream| {
                    stream.creator = creator;
                    stream
                })
            }
            made => made,
        };
        let stream = made_stream.map_err(|error| match error {
            MakeError::MemoryBudget | MakeError::ClientShare => {
                RestoreError::MemoryBudget { path: path.clone() }
            }
            MakeError::TooLarge { len, max } => RestoreError::TooLarge {
                path: path.clone(),
                len,
                max,
            },
            MakeError::Config(why) => RestoreError::Config(why),
        })?;
        if let Some(source) = &source {
            source.forks.fetch_add(1, Ordering::AcqRel);
        }
        let stream = Arc::new(stream);
        streams.insert_restored(Arc::clone(&stream));
        made.insert(path, stream);
        report.streams += 1;
    }
    // The store named what it cut by key: here is the path.
    let cut = journal.disk().streams_in_cut_tail();
    if !cut.is_empty() {
        let by_key: HashMap<StreamKey, &str> = made
            .values()
            .filter_map(|stream| Some((stream.journal_key?, stream.path.as_str())))
            .collect();
        for (key, what) in cut {
            match by_key.get(key) {
                Some(path) => tracing::warn!(
                    cut = %what,
                    "the journal's cut last write held changes of the stream at {:?}: it continues from what is before them",
                    format!("/v1/stream/{path}")
                ),
                None => tracing::warn!(
                    key = %key_hex(key),
                    cut = %what,
                    "the journal's cut last write held changes of a stream not restored (made or removed by that write, or its record unreadable)"
                ),
            }
        }
    }
    if !rewritten.is_empty() {
        journal
            .submit(rewritten)
            .map_err(|_| RestoreError::Journal)?
            .durable()
            .await
            .map_err(|_| RestoreError::Journal)?;
    }
    Ok(report)
}

/// The newest contiguous run of `messages` (ascending by seq): the journal
/// holds one run per stream, and anything else is left out with a warning.
fn contiguous(mut messages: Vec<(u64, Bytes)>, key: StreamKey) -> Vec<(u64, Bytes)> {
    let run_start = messages
        .windows(2)
        .rposition(|pair| pair[1].0 != pair[0].0 + 1)
        .map_or(0, |at| at + 1);
    if run_start > 0 {
        tracing::warn!(
            key = %key_hex(&key),
            left_out = run_start,
            from = messages[run_start].0,
            "a stream's messages in the data directory are not one run: the older ones are left out"
        );
        messages.drain(..run_start);
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_newest_run_of_messages_is_kept() {
        let run = |seqs: &[u64]| -> Vec<(u64, Bytes)> {
            seqs.iter().map(|&seq| (seq, Bytes::new())).collect()
        };
        let seqs = |messages: Vec<(u64, Bytes)>| -> Vec<u64> {
            messages.into_iter().map(|(seq, _)| seq).collect()
        };
        assert_eq!(seqs(contiguous(run(&[4, 5, 6]), [0; 16])), vec![4, 5, 6]);
        assert_eq!(seqs(contiguous(run(&[1, 3, 4]), [0; 16])), vec![3, 4]);
        assert_eq!(seqs(contiguous(run(&[]), [0; 16])), Vec::<u64>::new());
    }
}
