//! The end of the store's active journal, checked before the store opens:
//! a last write torn by a crash, or damaged on the disk, is cut here with a
//! warning that names what it held, instead of being dropped without a
//! word (the store cuts a torn batch silently) or stopping the start (the
//! store refuses a batch whose checksum fails). The bytes cut are saved
//! under `DIR/damaged/` first, so nothing is destroyed.
//!
//! The journal is fjall 2's: batches, each a start marker, its items and an
//! end marker with the xxh3 of the items' bytes, then zeros to the end of
//! the preallocated file. Written by `fjall::journal::marker` and read here
//! only as far as needed to find where the last intact batch ends and to
//! name the items after it (`fjall` 2.11.2 is vendored, `vendor/fjall`; the
//! tests below read journals fjall wrote).
//!
//! | marker | bytes |
//! | --- | --- |
//! | start | `1`, item count (u32 BE), seqno (u64 BE), compression `0 0` |
//! | item | `2`, value type (u8), partition length (u8), partition, key length (u16 BE), key, value length (u32 BE), value |
//! | end | `3`, xxh3 of the items' bytes (u64 BE), `F J L 2` |
//!
//! Only the last journal is looked at: a sealed one was made durable whole
//! before the next was started, and damage there is in the middle of what
//! was acknowledged, which the store reports (the start stops, naming it).

use super::streams::{key_hex, StreamKey};
use crate::LogId;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

const START: u8 = 1;
const ITEM: u8 = 2;
const END: u8 = 3;
const END_MAGIC: &[u8] = b"FJL\x02";
/// Items named in the warning at most (the rest are counted).
pub(crate) const NAMED_ITEMS: usize = 16;

/// One item of a cut batch, as far as it could be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CutItem {
    /// The store's partition it was written to.
    pub(crate) partition: String,
    /// Its key.
    pub(crate) key: Vec<u8>,
    /// `false`: a removal.
    pub(crate) insert: bool,
}

/// What was cut from the end of the active journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TailCut {
    /// The journal file.
    pub(crate) journal: PathBuf,
    /// Where the cut starts: the end of the last intact batch.
    pub(crate) at: u64,
    /// Bytes cut: up to the last byte that is not zero.
    pub(crate) bytes: u64,
    /// Whether the cut starts with a whole batch (its end marker present)
    /// whose checksum failed: damage on the disk, not a torn write; with
    /// `--fsync always` it had been acknowledged.
    pub(crate) complete: bool,
    /// The cut batch's items that could be read, in order.
    pub(crate) items: Vec<CutItem>,
    /// Where the cut bytes were saved.
    pub(crate) saved: PathBuf,
}

impl TailCut {
    /// Says what the cut held, item by item.
    pub(crate) fn warn(&self) {
        let mut held: Vec<String> = self
            .items
            .iter()
            .take(NAMED_ITEMS)
            .map(describe_item)
            .collect();
        if self.items.len() > NAMED_ITEMS {
            held.push(format!("and {} more", self.items.len() - NAMED_ITEMS));
        }
        let held = if held.is_empty() {
            "nothing readable".to_owned()
        } else {
            held.join(", ")
        };
        let how = if self.complete {
            "whole but damaged on the disk (its checksum fails): it had been acknowledged, and is lost"
        } else {
            "torn by the end of the last run: with --fsync always it was never acknowledged"
        };
        tracing::warn!(
            journal = %self.journal.display(),
            at = self.at,
            bytes = self.bytes,
            saved = %self.saved.display(),
            "disk history: the journal's last write is cut, {how}; it held: {held}"
        );
    }

    /// The Durable Streams the cut held changes of, each with what they
    /// were in words ("message 5, record"; at most [`NAMED_ITEMS`] named,
    /// then how many more), in the cut's order.
    pub(crate) fn streams(&self) -> Vec<(StreamKey, String)> {
        // Each stream's changes named, and how many more there were.
        let mut streams: Vec<(StreamKey, Vec<String>, usize)> = Vec::new();
        let mut index: HashMap<StreamKey, usize> = HashMap::new();
        for item in &self.items {
            let Some((key, what)) = stream_item(item) else {
                continue;
            };
            let at = *index.entry(key).or_insert_with(|| {
                streams.push((key, Vec::new(), 0));
                streams.len() - 1
            });
            let (_, named, more) = &mut streams[at];
            if named.len() < NAMED_ITEMS {
                named.push(format!("{}{what}", change(item)));
            } else {
                *more += 1;
            }
        }
        streams
            .into_iter()
            .map(|(key, mut named, more)| {
                if more > 0 {
                    named.push(format!("and {more} more"));
                }
                (key, named.join(", "))
            })
            .collect()
    }
}

/// "removal of " for an item that removes, else nothing.
fn change(item: &CutItem) -> &'static str {
    if item.insert {
        ""
    } else {
        "removal of "
    }
}

/// A Durable Stream's item: the stream, and what of it the item was in
/// words ("message 5", "record", "producer \"p\""), by the stream
/// partitions' key layout (the table at the top of `disk.rs`).
fn stream_item(item: &CutItem) -> Option<(StreamKey, String)> {
    let key: StreamKey = item.key.get(..16)?.try_into().ok()?;
    let what = match item.partition.as_str() {
        "stream_events" => format!(
            "message {}",
            u64::from_be_bytes(item.key.get(16..24)?.try_into().ok()?)
        ),
        "streams" => "record".to_owned(),
        "producers" => format!("producer {:?}", String::from_utf8_lossy(&item.key[16..])),
        _ => return None,
    };
    Some((key, what))
}

/// One journal item in words: whose it was, by the partitions' key layout
/// (the table at the top of `disk.rs`).
fn describe_item(item: &CutItem) -> String {
    let prefix = |key: &[u8]| -> Option<[u8; 16]> { key.get(..16)?.try_into().ok() };
    let seq =
        |key: &[u8]| -> Option<u64> { Some(u64::from_be_bytes(key.get(16..24)?.try_into().ok()?)) };
    let what = match (item.partition.as_str(), prefix(&item.key), seq(&item.key)) {
        ("events", Some(id), Some(seq)) => format!("log {} event {seq}", LogId::from_bytes(id)),
        ("logs", Some(id), _) => format!("log {} record", LogId::from_bytes(id)),
        (partition, _, _) => match stream_item(item) {
            Some((key, what)) => format!("stream {} {what}", key_hex(&key)),
            None => format!("{partition} key {}", key_hex(&item.key)),
        },
    };
    format!("{}{what}", change(item))
}

/// How a journal's bytes end.
#[derive(Debug, PartialEq, Eq)]
struct Scan {
    /// The end of the last intact batch.
    intact: usize,
    /// The end of the last byte that is not zero (`intact` when the rest
    /// is zeros: nothing to cut).
    data_end: usize,
    /// Whether the first batch after `intact` has its end marker.
    complete: bool,
    /// The items of that batch that could be read.
    items: Vec<CutItem>,
}

/// Reads one marker's fields from `bytes` at a cursor; `None` past the end.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let taken = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(taken)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }

    fn u32(&mut self) -> Option<usize> {
        let b = self.take(4)?;
        usize::try_from(u32::from_be_bytes([b[0], b[1], b[2], b[3]])).ok()
    }

    fn u64(&mut self) -> Option<u64> {
        let b = self.take(8)?;
        let mut word = [0; 8];
        word.copy_from_slice(b);
        Some(u64::from_be_bytes(word))
    }
}

/// One batch read from `at`: `Ok(end)` when it is intact, else what could
/// be read of it (whether its end marker was there, its items).
fn batch(bytes: &[u8], at: usize) -> Result<usize, (bool, Vec<CutItem>)> {
    let mut cursor = Cursor { bytes, at };
    let mut items = Vec::new();
    let header = (|| {
        if cursor.u8()? != START {
            return None;
        }
        let count = cursor.u32()?;
        cursor.take(8)?; // seqno
                         // No compression: anything else the store would refuse by a panic.
        if cursor.take(2)? != [0, 0] {
            return None;
        }
        Some(count)
    })();
    let Some(count) = header else {
        return Err((false, items));
    };
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for _ in 0..count {
        let start = cursor.at;
        // The item's name (partition and key), then its value: an item
        // torn inside its value is still named.
        let named = (|| {
            if cursor.u8()? != ITEM {
                return None;
            }
            let value_type = cursor.u8()?;
            let partition_len = usize::from(cursor.u8()?);
            let partition = std::str::from_utf8(cursor.take(partition_len)?).ok()?;
            // A store's partitions have names: zeros here are a torn write.
            if partition.is_empty() || partition.contains('\0') {
                return None;
            }
            let partition = partition.to_owned();
            let key_len = cursor.u16()?;
            let key = cursor.take(key_len)?.to_vec();
            Some(CutItem {
                partition,
                key,
                insert: value_type == 0,
            })
        })();
        let Some(item) = named else {
            return Err((false, items));
        };
        items.push(item);
        let value = cursor.u32().and_then(|len| cursor.take(len));
        if value.is_none() {
            return Err((false, items));
        }
        hasher.update(&bytes[start..cursor.at]);
    }
    let end = (|| {
        if cursor.u8()? != END {
            return None;
        }
        let checksum = cursor.u64()?;
        let magic = cursor.take(END_MAGIC.len())?;
        Some((checksum, magic == END_MAGIC))
    })();
    match end {
        Some((checksum, true)) if checksum == hasher.digest() => Ok(cursor.at),
        Some(_) => Err((true, items)),
        None => Err((false, items)),
    }
}

/// Where the intact batches of a journal's `bytes` end, and what follows.
fn scan(bytes: &[u8]) -> Scan {
    let data_end = bytes.iter().rposition(|&b| b != 0).map_or(0, |at| at + 1);
    let mut intact = 0;
    while intact < data_end {
        match batch(bytes, intact) {
            Ok(end) => intact = end,
            Err((complete, items)) => {
                return Scan {
                    intact,
                    data_end,
                    complete,
                    items,
                }
            }
        }
    }
    Scan {
        intact,
        data_end: data_end.max(intact),
        complete: false,
        items: Vec::new(),
    }
}

/// The journal the store writes to: the highest-numbered file under
/// `journals`.
pub(super) fn active_journal(journals: &Path) -> std::io::Result<Option<PathBuf>> {
    let mut active: Option<(u64, PathBuf)> = None;
    let entries = match std::fs::read_dir(journals) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    for entry in entries {
        let entry = entry?;
        let Some(number) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u64>().ok())
        else {
            continue;
        };
        if active.as_ref().is_none_or(|(highest, _)| number > *highest) {
            active = Some((number, entry.path()));
        }
    }
    Ok(active.map(|(_, path)| path))
}

/// Cuts a damaged end off the active journal under `store` (saving the
/// bytes under `damaged` first); `None` when it ends intact.
pub(crate) fn cut_damaged_tail(store: &Path, damaged: &Path) -> std::io::Result<Option<TailCut>> {
    let Some(journal) = active_journal(&store.join("journals"))? else {
        return Ok(None);
    };
    let bytes = std::fs::read(&journal)?;
    let scan = scan(&bytes);
    if scan.intact >= scan.data_end {
        return Ok(None);
    }
    std::fs::create_dir_all(damaged)?;
    let name = journal
        .file_name()
        .map_or_else(String::new, |name| name.to_string_lossy().into_owned());
    let saved = damaged.join(format!("journal-{name}-at-{}", scan.intact));
    let mut copy = File::create(&saved)?;
    copy.write_all(&bytes[scan.intact..scan.data_end])?;
    copy.sync_all()?;
    File::open(damaged)?.sync_all()?;
    let file = OpenOptions::new().write(true).open(&journal)?;
    file.set_len(scan.intact as u64)?;
    file.sync_all()?;
    Ok(Some(TailCut {
        journal,
        at: scan.intact as u64,
        bytes: (scan.data_end - scan.intact) as u64,
        complete: scan.complete,
        items: scan.items,
        saved,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjall::{Config, PartitionCreateOptions, PersistMode};

    const START_LEN: usize = 1 + 4 + 8 + 2;
    const END_LEN: usize = 1 + 8 + END_MAGIC.len();

    /// A store under `dir` with batches of two items each written
    /// (`count` of them), closed: its active journal's bytes.
    fn journal_of(dir: &Path, count: u8) -> (PathBuf, Vec<u8>) {
        {
            let keyspace = Config::new(dir).open().expect("the store");
            let part = keyspace
                .open_partition("stream_events", PartitionCreateOptions::default())
                .expect("a partition");
            for n in 0..count {
                let mut batch = keyspace.batch();
                batch.insert(&part, [n; 24], vec![b'a' + n; 100]);
                batch.remove(&part, [n; 8]);
                batch.commit().expect("a batch");
            }
            keyspace.persist(PersistMode::SyncAll).expect("persist");
        }
        let journal = active_journal(&dir.join("journals"))
            .expect("the journals")
            .expect("a journal");
        let bytes = std::fs::read(&journal).expect("the journal");
        (journal, bytes)
    }

    #[test]
    fn a_journal_fjall_wrote_is_intact_to_its_last_batch() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (_, bytes) = journal_of(dir.path(), 3);
        let scan = scan(&bytes);
        // Three batches of a start, two items and an end, then zeros.
        let item = |key: usize, value: usize| 1 + 1 + 1 + 13 + 2 + key + 4 + value;
        let batch = START_LEN + item(24, 100) + item(8, 0) + END_LEN;
        assert_eq!((scan.intact, scan.data_end), (3 * batch, 3 * batch));
        assert!(bytes[scan.intact..].iter().all(|&b| b == 0));
    }

    #[test]
    fn a_torn_or_flipped_last_batch_is_found_and_named() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (_, bytes) = journal_of(dir.path(), 3);
        let whole = scan(&bytes).intact;
        let last = whole / 3 * 2;
        // Torn inside its second item: the first item is named.
        let mut torn = bytes.clone();
        torn[last + START_LEN + 146 + 10..].fill(0);
        let scan_torn = scan(&torn);
        assert_eq!(scan_torn.intact, last);
        assert!(!scan_torn.complete);
        assert_eq!(scan_torn.items.len(), 1);
        assert_eq!(scan_torn.items[0].partition, "stream_events");
        assert_eq!(scan_torn.items[0].key, vec![2; 24]);
        assert!(scan_torn.items[0].insert);
        // A flipped byte in the first item's value: whole, checksum failed.
        let mut flipped = bytes.clone();
        flipped[last + START_LEN + 60] ^= 0x20;
        let scan_flipped = scan(&flipped);
        assert_eq!((scan_flipped.intact, scan_flipped.data_end), (last, whole));
        assert!(scan_flipped.complete);
        assert_eq!(scan_flipped.items.len(), 2);
        assert!(!scan_flipped.items[1].insert);
    }

    #[test]
    fn every_cut_and_every_flipped_byte_leaves_an_intact_prefix_and_never_panics() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (_, mut bytes) = journal_of(dir.path(), 2);
        let whole = scan(&bytes).intact;
        let first = whole / 2;
        bytes.truncate(whole + 64); // the rest is zeros too
        for at in 0..whole {
            let mut cut = bytes[..at].to_vec();
            cut.resize(whole + 64, 0);
            let scan_cut = scan(&cut);
            assert!(scan_cut.intact == 0 || scan_cut.intact == first || scan_cut.intact == whole);
            assert!(
                scan_cut.intact <= at,
                "cut at {at}: intact to {}",
                scan_cut.intact
            );
            // A batch's seqno is covered by no checksum: a flipped one is
            // another intact batch to the store as well.
            let seqno = |batch: usize| batch + 5..batch + 13;
            if seqno(0).contains(&at) || seqno(first).contains(&at) {
                continue;
            }
            let mut flipped = bytes.clone();
            flipped[at] ^= 0x01;
            let scan_flipped = scan(&flipped);
            assert!(
                scan_flipped.intact <= at,
                "flipped at {at}: intact to {}",
                scan_flipped.intact
            );
        }
    }

    #[test]
    fn any_damage_after_intact_batches_keeps_them_and_never_panics() {
        use proptest::prelude::*;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (_, mut bytes) = journal_of(dir.path(), 3);
        let whole = scan(&bytes).intact;
        bytes.truncate(whole);
        let boundaries = [0, whole / 3, whole / 3 * 2, whole];
        // Random bytes over a random suffix of the journal (from a random
        // point on, the journal is replaced), then zeros.
        let damage = (
            0..=whole,
            proptest::collection::vec(any::<u8>(), 0..400),
            0..64usize,
        );
        let mut runner = proptest::test_runner::TestRunner::default();
        runner
            .run(&damage, |(from, garbage, zeros)| {
                let mut damaged = bytes[..from].to_vec();
                damaged.extend_from_slice(&garbage);
                damaged.resize(damaged.len() + zeros, 0);
                let scan = scan(&damaged);
                prop_assert!(scan.intact <= scan.data_end && scan.data_end <= damaged.len());
                // Every whole batch before the damage is kept, and the cut
                // starts at a batch boundary (a garbage batch with a right
                // checksum aside, which random bytes do not make).
                let kept = boundaries
                    .iter()
                    .copied()
                    .filter(|&b| b <= from)
                    .max()
                    .unwrap_or(0);
                prop_assert!(
                    scan.intact >= kept.min(scan.data_end),
                    "{} < {kept}",
                    scan.intact
                );
                prop_assert!(boundaries.contains(&scan.intact) || scan.intact > from);
                Ok(())
            })
            .expect("the property");
    }

    #[test]
    fn a_cut_saves_the_bytes_truncates_the_journal_and_the_store_opens_with_the_rest() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let store = dir.path().join("store");
        let (journal, bytes) = journal_of(&store, 3);
        let whole = scan(&bytes).intact;
        let last = whole / 3 * 2;
        let mut flipped = bytes.clone();
        flipped[last + START_LEN + 60] ^= 0x20;
        std::fs::write(&journal, &flipped).expect("write the journal");
        let damaged = dir.path().join("damaged");
        let cut = cut_damaged_tail(&store, &damaged)
            .expect("the cut")
            .expect("a damaged tail");
        assert_eq!((cut.at, cut.bytes), (last as u64, (whole - last) as u64));
        assert_eq!(
            std::fs::read(&cut.saved).expect("the saved bytes"),
            flipped[last..whole]
        );
        assert_eq!(
            std::fs::metadata(&journal).expect("the journal").len(),
            last as u64
        );
        assert_eq!(
            cut_damaged_tail(&store, &damaged).expect("a second look"),
            None
        );
        let keyspace = Config::new(&store).open().expect("the store opens");
        let part = keyspace
            .open_partition("stream_events", PartitionCreateOptions::default())
            .expect("a partition");
        assert!(part.get([1; 24]).expect("a read").is_some());
        assert!(part.get([2; 24]).expect("a read").is_none());
    }
}
