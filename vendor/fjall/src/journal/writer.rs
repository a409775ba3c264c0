// Copyright (c) 2024-present, fjall-rs
// This source code is licensed under both the Apache 2.0 and MIT License
// (found in the LICENSE-* files in the repository)

use super::marker::{serialize_marker_item, Marker};
use crate::{batch::item::Item as BatchItem, file::fsync_directory, journal::recovery::JournalId};
use lsm_tree::{coding::Encode, EncodeError, SeqNo, ValueType};
use std::{
    fs::{File, OpenOptions},
    hash::Hasher,
    io::{BufWriter, Seek, SeekFrom, Write},
    path::{Path, PathBuf},
};

// TODO: this should be a keyspace configuration
pub const PRE_ALLOCATED_BYTES: u64 = 32 * 1_024 * 1_024;

pub const JOURNAL_BUFFER_BYTES: usize = 8 * 1_024;

/// (gapless patch) How many bytes of zeros are written ahead of the
/// journal's end at a time. See `Writer::zero_fill_ahead`.
pub const ZERO_FILL_BYTES: u64 = 1_024 * 1_024;

/// (gapless patch) Zeros are written again once fewer than this many
/// written bytes are left ahead of the journal's end.
pub const ZERO_FILL_LOW_WATER_BYTES: u64 = 256 * 1_024;

pub struct Writer {
    pub(crate) path: PathBuf,
    file: BufWriter<File>,
    buf: Vec<u8>,

    is_buffer_dirty: bool,

    /// (gapless patch) The offset in the file where the next record lands.
    /// `None` until the first write to a journal opened from an existing
    /// file: recovery cuts that file's invalid end after this writer is
    /// made (upstream opens it for appending), so its end is read then.
    end: Option<u64>,

    /// (gapless patch) Every byte below this offset has been written to the
    /// file, by a record or by `zero_fill_ahead`; `zero_fill_ahead` keeps it
    /// at least `end`, and only ever writes zeros at or above `end`, where
    /// no record has been and none is buffered.
    written_to: u64,

    /// (gapless patch) Set once writing zeros failed (a full disk, say):
    /// the file is then only appended to, as without the patch.
    zero_fill_failed: bool,
}

/// (gapless patch) Writes `zeros` at `offset` of `file`, without moving its
/// cursor.
#[cfg(unix)]
fn write_zeros_at(file: &File, zeros: &[u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, zeros, offset)
}

/// (gapless patch) Elsewhere the journal is only appended to, as upstream.
#[cfg(not(unix))]
fn write_zeros_at(_file: &File, _zeros: &[u8], _offset: u64) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// The persist mode allows setting the durability guarantee of previous writes
#[derive(Copy, Clone, Debug, Eq, PartialEq)]
pub enum PersistMode {
    /// Flushes data to OS buffers. This allows the OS to write out data in case of an
    /// application crash.
    ///
    /// When this function returns, data is **not** guaranteed to be persisted in case
    /// of a power loss event or OS crash.
    Buffer,

    /// Flushes data using `fdatasync`.
    ///
    /// Use if you know that `fdatasync` is sufficient for your file system and/or operating system.
    SyncData,

    /// Flushes data + metadata using `fsync`.
    SyncAll,
}

impl Writer {
    pub fn len(&self) -> crate::Result<u64> {
        Ok(self.file.get_ref().metadata()?.len())
    }

    pub fn rotate(&mut self) -> crate::Result<(PathBuf, PathBuf)> {
        self.persist(PersistMode::SyncAll)?;

        log::debug!(
            "Sealing active journal at {:?}, len={}B",
            self.path,
            self.path
                .metadata()
                .inspect_err(|e| {
                    log::error!(
                        "Failed to get file metadata of journal file at {:?}: {e:?}",
                        self.path
                    );
                })?
                .len(),
        );

        let prev_path = self.path.clone();

        let folder = self
            .path
            .parent()
            .expect("should have parent")
            .to_path_buf();

        let journal_id = self
            .path
            .file_name()
            .expect("should be valid file name")
            .to_str()
            .expect("should be valid journal file name")
            .parse::<JournalId>()
            .expect("should be valid journal ID");

        let new_path = folder.join((journal_id + 1).to_string());
        log::debug!("Rotating active journal to {new_path:?}");

        *self = Self::create_new(new_path.clone())?;

        // IMPORTANT: fsync folder on Unix
        fsync_directory(&folder)?;

        Ok((prev_path, new_path))
    }

    pub fn create_new<P: Into<PathBuf>>(path: P) -> crate::Result<Self> {
        let path = path.into();

        let file = File::create(&path).inspect_err(|e| {
            log::error!("Failed to create journal file at {path:?}: {e:?}");
        })?;

        file.set_len(PRE_ALLOCATED_BYTES).inspect_err(|e| {
            log::error!(
                "Failed to set journal file size to {PRE_ALLOCATED_BYTES}B at {path:?}: {e:?}"
            );
        })?;

        file.sync_all().inspect_err(|e| {
            log::error!("Failed to fsync journal file at {path:?}: {e:?}");
        })?;

        Ok(Self::at(path, file, Some(0)))
    }

    /// (gapless patch) A writer whose next record lands at `end` of `file`.
    fn at(path: PathBuf, file: File, end: Option<u64>) -> Self {
        Self {
            path,
            file: BufWriter::with_capacity(JOURNAL_BUFFER_BYTES, file),
            buf: Vec::new(),
            is_buffer_dirty: false,
            end,
            written_to: end.unwrap_or(0),
            zero_fill_failed: false,
        }
    }

    /// (gapless patch) Writes zeros ahead of the journal's end, so that the
    /// records written there land on blocks the file system has already
    /// allocated and written.
    ///
    /// A journal preallocated with `set_len` alone is sparse: every
    /// `fdatasync` that follows a write into a hole must also write the
    /// file's block map, a second I/O the caller waits for. On a block
    /// device without a volatile cache that doubles the cost of a commit.
    /// Zeros are what a hole reads as, so what the file holds and how it is
    /// recovered are the same as without the patch; only the blocks are
    /// allocated ahead, one `ZERO_FILL_BYTES` step at a time, and the
    /// block map is written once per step instead of once per commit. The
    /// file is longer than upstream's (by `ZERO_FILL_BYTES` at most) where
    /// the zeros pass its end: once its records pass the preallocated
    /// length, and in a journal recovery cut back. `len` counts them.
    ///
    /// Best effort: a failure stops the zero fill for this file (appends then
    /// allocate as they go, as without the patch) and is never an error of
    /// the write that triggered it.
    fn zero_fill_ahead(&mut self, end: u64) {
        self.written_to = self.written_to.max(end);
        if self.zero_fill_failed || self.written_to - end >= ZERO_FILL_LOW_WATER_BYTES {
            return;
        }
        #[allow(clippy::cast_possible_truncation)]
        let zeros = vec![0; ZERO_FILL_BYTES as usize];
        // Positional: the file's cursor (where `file` writes records, at
        // `end` once its buffer is flushed) does not move, and the zeros
        // land at or above `end`, where no record is.
        match write_zeros_at(self.file.get_ref(), &zeros, self.written_to) {
            Ok(()) => self.written_to += ZERO_FILL_BYTES,
            Err(e) => {
                log::warn!(
                    "Could not write zeros ahead of journal {:?} at {}, appending without: {e:?}",
                    self.path,
                    self.written_to
                );
                self.zero_fill_failed = true;
            }
        }
    }

    pub fn from_file<P: AsRef<Path>>(path: P) -> crate::Result<Self> {
        let path = path.as_ref();

        if !path.try_exists()? {
            let file = OpenOptions::new()
                .create_new(true)
                .write(true)
                .open(path)
                .inspect_err(|e| {
                    log::error!("Failed to create journal file at {path:?}: {e:?}");
                })?;

            file.set_len(PRE_ALLOCATED_BYTES).inspect_err(|e| {
                log::error!(
                    "Failed to set journal file size to {PRE_ALLOCATED_BYTES}B at {path:?}: {e:?}"
                );
            })?;

            file.sync_all().inspect_err(|e| {
                log::error!("Failed to fsync journal file at {path:?}: {e:?}");
            })?;

            return Ok(Self::at(path.into(), file, Some(0)));
        }

        // (gapless patch) Not `append(true)`: on Linux a positional write to
        // a file opened for appending lands at its end whatever its offset,
        // and the zeros `zero_fill_ahead` writes would move that end.
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .inspect_err(|e| {
                log::error!("Failed to open journal file at {path:?}: {e:?}");
            })?;

        Ok(Self::at(path.into(), file, None))
    }

    /// (gapless patch) Where the next record lands: the file's end at the
    /// first write, once recovery has cut what was invalid (see `end`).
    fn end(&mut self) -> std::io::Result<u64> {
        if let Some(end) = self.end {
            return Ok(end);
        }
        let end = self.file.seek(SeekFrom::End(0))?;
        self.written_to = end;
        self.end = Some(end);
        Ok(end)
    }

    /// (gapless patch) Counts `bytes` written whole at the end, and writes
    /// zeros ahead of it when due.
    fn wrote(&mut self, bytes: usize, end: u64, zero_fill_failed: bool) {
        let end = end + bytes as u64;
        self.end = Some(end);
        self.zero_fill_failed = zero_fill_failed;
        self.zero_fill_ahead(end);
    }

    /// Persists the journal file.
    pub(crate) fn persist(&mut self, mode: PersistMode) -> std::io::Result<()> {
        log::trace!("Persisting journal at {:?} with mode={mode:?}", self.path);

        if self.is_buffer_dirty {
            self.file.flush().inspect_err(|e| {
                log::error!(
                    "Failed to flush journal IO buffers at {:?}: {e:?}",
                    self.path
                );
            })?;
            self.is_buffer_dirty = false;
        }

        match mode {
            PersistMode::SyncAll => self.file.get_mut().sync_all().inspect_err(|e| {
                log::error!("Failed to fsync journal file at {:?}: {e:?}", self.path);
            }),
            PersistMode::SyncData => self.file.get_mut().sync_data().inspect_err(|e| {
                log::error!("Failed to fsyncdata journal file at {:?}: {e:?}", self.path);
            }),
            PersistMode::Buffer => Ok(()),
        }
    }

    /// Writes a batch start marker to the journal
    fn write_start(&mut self, item_count: u32, seqno: SeqNo) -> Result<usize, EncodeError> {
        debug_assert!(self.buf.is_empty());

        Marker::Start {
            item_count,
            seqno,
            compression: lsm_tree::CompressionType::None,
        }
        .encode_into(&mut self.buf)?;

        self.file.write_all(&self.buf)?;

        Ok(self.buf.len())
    }

    /// Writes a batch end marker to the journal
    fn write_end(&mut self, checksum: u64) -> Result<usize, EncodeError> {
        debug_assert!(self.buf.is_empty());

        Marker::End(checksum).encode_into(&mut self.buf)?;

        self.file.write_all(&self.buf)?;

        Ok(self.buf.len())
    }

    pub(crate) fn write_raw(
        &mut self,
        partition: &str,
        key: &[u8],
        value: &[u8],
        value_type: ValueType,
        seqno: u64,
    ) -> crate::Result<usize> {
        self.is_buffer_dirty = true;

        // (gapless patch) A record that fails halfway leaves the file's end
        // unknown: the zero fill stays off for this file unless it completes.
        let end = self.end()?;
        let zero_fill_failed = std::mem::replace(&mut self.zero_fill_failed, true);

        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        let mut byte_count = 0;

        self.buf.clear();
        byte_count += self.write_start(1, seqno)?;
        self.buf.clear();

        serialize_marker_item(&mut self.buf, partition, key, value, value_type)?;

        self.file.write_all(&self.buf)?;

        hasher.update(&self.buf);
        byte_count += self.buf.len();

        self.buf.clear();
        let checksum = hasher.finish();
        byte_count += self.write_end(checksum)?;

        self.wrote(byte_count, end, zero_fill_failed);

        Ok(byte_count)
    }

    pub fn write_batch<'a>(
        &mut self,
        items: impl Iterator<Item = &'a BatchItem>,
        batch_size: usize,
        seqno: SeqNo,
    ) -> crate::Result<usize> {
        if batch_size == 0 {
            return Ok(0);
        }

        self.is_buffer_dirty = true;

        // (gapless patch) As in `write_raw`.
        let end = self.end()?;
        let zero_fill_failed = std::mem::replace(&mut self.zero_fill_failed, true);

        self.buf.clear();

        // NOTE: entries.len() is surely never > u32::MAX
        #[allow(clippy::cast_possible_truncation)]
        let item_count = batch_size as u32;

        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        let mut byte_count = 0;

        byte_count += self.write_start(item_count, seqno)?;
        self.buf.clear();

        for item in items {
            debug_assert!(self.buf.is_empty());

            serialize_marker_item(
                &mut self.buf,
                &item.partition,
                &item.key,
                &item.value,
                item.value_type,
            )?;

            self.file.write_all(&self.buf)?;

            hasher.update(&self.buf);
            byte_count += self.buf.len();

            self.buf.clear();
        }

        let checksum = hasher.finish();
        byte_count += self.write_end(checksum)?;

        self.wrote(byte_count, end, zero_fill_failed);

        Ok(byte_count)
    }
}
