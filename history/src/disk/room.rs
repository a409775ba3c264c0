//! Whether the disk history has room for a write: the store under its own
//! bound (`--data-dir-max-bytes`) and the filesystem with more free space
//! than the reserve (`--data-dir-reserve`). Checked before a write is
//! queued, so a full disk is refused as [`HistoryError::Full`] without the
//! store ever failing a write on it (after a failed write it takes no
//! more, until a restart): the write is refused, nothing acknowledged is
//! touched, and writes are taken again as soon as space returns. The
//! reserve is what the store needs besides the writes themselves: flushing
//! its memtables (64 MiB for each message partition) and compacting write
//! new tables before old ones go.

use crate::HistoryError;
use std::fs::File;
use std::path::PathBuf;

/// The disk history's bounds on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskLimits {
    /// The store's size (journals and tables) at most; `None`: no bound
    /// but the filesystem's.
    pub max_bytes: Option<u64>,
    /// Free space the filesystem keeps: a write is refused while less is
    /// available to this process.
    pub reserve_bytes: u64,
}

impl Default for DiskLimits {
    fn default() -> Self {
        Self {
            max_bytes: None,
            reserve_bytes: DEFAULT_RESERVE,
        }
    }
}

/// The default reserve: both message partitions' memtables, flushed.
pub const DEFAULT_RESERVE: u64 = 128 << 20;

pub(crate) struct Room {
    /// The data directory, for the refusals' words.
    dir: PathBuf,
    /// The data directory, open: its filesystem is asked for free space
    /// through the descriptor, without a path lookup on every write.
    opened: File,
    limits: DiskLimits,
}

impl Room {
    /// The room of `dir`, which must exist.
    pub(crate) fn open(dir: PathBuf, limits: DiskLimits) -> std::io::Result<Self> {
        let opened = File::open(&dir)?;
        Ok(Self {
            dir,
            opened,
            limits,
        })
    }

    /// `Ok` when a write may be queued; `size` is the store's size now.
    pub(crate) fn check(&self, size: u64) -> Result<(), HistoryError> {
        if let Some(max) = self.limits.max_bytes {
            if size >= max {
                return Err(HistoryError::Full(format!(
                    "the disk log holds {size} bytes, its bound (--data-dir-max-bytes) is {max}"
                )));
            }
        }
        let available = self.available()?;
        if available < self.limits.reserve_bytes {
            return Err(HistoryError::Full(format!(
                "{} has {available} bytes free, below the reserve (--data-dir-reserve) of {}",
                self.dir.display(),
                self.limits.reserve_bytes
            )));
        }
        Ok(())
    }

    /// Bytes the filesystem of the directory has free for this process.
    fn available(&self) -> Result<u64, HistoryError> {
        let stat = rustix::fs::fstatvfs(&self.opened).map_err(|error| {
            HistoryError::Unavailable(format!("statvfs {}: {error}", self.dir.display()))
        })?;
        Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_is_refused_past_the_bound_or_into_the_reserve_and_taken_otherwise() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let room = |limits| Room::open(dir.path().into(), limits).expect("the directory opens");
        let free = room(DiskLimits::default()).available().expect("statvfs");
        let fits = DiskLimits {
            max_bytes: Some(1000),
            reserve_bytes: 0,
        };
        assert!(room(fits).check(999).is_ok());
        assert!(matches!(room(fits).check(1000), Err(HistoryError::Full(_))));
        let reserve_past_free = DiskLimits {
            max_bytes: None,
            reserve_bytes: free.saturating_mul(2).max(1),
        };
        match room(reserve_past_free).check(0) {
            Err(HistoryError::Full(why)) => assert!(why.contains("--data-dir-reserve"), "{why}"),
            other => panic!("a reserve past the free space: {other:?}"),
        }
    }
}
