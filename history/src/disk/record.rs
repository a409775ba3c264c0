//! How the disk history writes what it knows of a log beside its events
//! (one record per log, rewritten by every write to the log), and of the
//! process that last opened the directory. Both are versioned binary
//! records; decoding checks every length and never panics: a record it
//! cannot read is a [`String`] saying what is wrong.

use crate::Meta;

/// The first byte of a [`LogRecord`].
const LOG_RECORD_V1: u8 = 1;
/// The first byte of a [`RunRecord`].
const RUN_RECORD_V1: u8 = 1;

/// A log's state as written with its last write.
///
/// Invariants: `first_retained <= published + 1`; `retained` events, seqs
/// `first_retained ..= published`, are on disk when `retained > 0`, their
/// payloads `bytes` long in all; `retained == 0` means
/// `first_retained == published + 1`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LogRecord {
    /// The log's epoch.
    pub(crate) epoch: u64,
    /// The last seq written.
    pub(crate) published: u64,
    /// The oldest seq retained (`published + 1` when none is).
    pub(crate) first_retained: u64,
    /// Events retained.
    pub(crate) retained: u64,
    /// Payload bytes retained.
    pub(crate) bytes: u64,
    /// Set by `complete`: nothing more is appended.
    pub(crate) complete: bool,
    /// The caller's meta.
    pub(crate) meta: Meta,
}

impl LogRecord {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48 + self.meta.len() * 32);
        out.push(LOG_RECORD_V1);
        for n in [
            self.epoch,
            self.published,
            self.first_retained,
            self.retained,
            self.bytes,
        ] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.push(u8::from(self.complete));
        put_len(&mut out, self.meta.len());
        for (name, value) in &self.meta {
            put_text(&mut out, name);
            put_text(&mut out, value);
        }
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut reader = Reader(bytes);
        match reader.u8()? {
            LOG_RECORD_V1 => {}
            other => return Err(format!("a log record of version {other}")),
        }
        let mut record = Self {
            epoch: reader.u64()?,
            published: reader.u64()?,
            first_retained: reader.u64()?,
            retained: reader.u64()?,
            bytes: reader.u64()?,
            complete: reader.u8()? != 0,
            meta: Meta::new(),
        };
        for _ in 0..reader.u32()? {
            let name = reader.text()?;
            let value = reader.text()?;
            record.meta.insert(name, value);
        }
        reader.end()?;
        let consistent = record.first_retained <= record.published.saturating_add(1)
            && (record.retained == 0) == (record.first_retained == record.published + 1)
            && record.retained <= record.published;
        if !consistent {
            return Err(format!(
                "a log record retaining {} events from seq {} of {}",
                record.retained, record.first_retained, record.published
            ));
        }
        Ok(record)
    }
}

/// Who opened the directory last, and how it left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RunRecord {
    /// Counts the opens of the directory.
    pub(crate) run: u64,
    /// Written `true` when the history was closed (dropped) after its last
    /// write was persisted; `false` while it is open.
    pub(crate) clean: bool,
    /// Whether that run acknowledged writes before `fdatasync`
    /// (`--fsync never`).
    pub(crate) fsync_never: bool,
    /// The kernel's boot id at that run: a different one now means the
    /// machine restarted, and what was only in its page cache is gone.
    pub(crate) boot_id: String,
}

impl RunRecord {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = vec![RUN_RECORD_V1];
        out.extend_from_slice(&self.run.to_le_bytes());
        out.push(u8::from(self.clean));
        out.push(u8::from(self.fsync_never));
        put_text(&mut out, &self.boot_id);
        out
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, String> {
        let mut reader = Reader(bytes);
        match reader.u8()? {
            RUN_RECORD_V1 => {}
            other => return Err(format!("a run record of version {other}")),
        }
        let record = Self {
            run: reader.u64()?,
            clean: reader.u8()? != 0,
            fsync_never: reader.u8()? != 0,
            boot_id: reader.text()?,
        };
        reader.end()?;
        Ok(record)
    }
}

fn put_len(out: &mut Vec<u8>, len: usize) {
    // A meta field or the map is far below 4 GiB (a request's headers).
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
}

fn put_text(out: &mut Vec<u8>, text: &str) {
    put_len(out, text.len());
    out.extend_from_slice(text.as_bytes());
}

/// Reads a record front to back; every read checks the length left.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err(format!(
                "a record cut short ({} bytes left, {n} needed)",
                self.0.len()
            ));
        }
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(taken)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        let mut bytes = [0; 4];
        bytes.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(bytes))
    }

    fn u64(&mut self) -> Result<u64, String> {
        let mut bytes = [0; 8];
        bytes.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(bytes))
    }

    fn text(&mut self) -> Result<String, String> {
        let len = self.u32()? as usize;
        String::from_utf8(self.take(len)?.to_vec())
            .map_err(|_| "a field that is not UTF-8".to_owned())
    }

    fn end(&self) -> Result<(), String> {
        match self.0.len() {
            0 => Ok(()),
            left => Err(format!("{left} bytes after the record")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> LogRecord {
        LogRecord {
            epoch: 7,
            published: 9,
            first_retained: 6,
            retained: 4,
            bytes: 40,
            complete: true,
            meta: [
                ("pk".to_owned(), "k1".to_owned()),
                ("epoch/acked".to_owned(), "3".to_owned()),
            ]
            .into_iter()
            .collect(),
        }
    }

    #[test]
    fn a_log_record_reads_back_as_written() {
        let record = record();
        assert_eq!(LogRecord::decode(&record.encode()), Ok(record));
        let run = RunRecord {
            run: 3,
            clean: false,
            fsync_never: true,
            boot_id: "b0".into(),
        };
        assert_eq!(RunRecord::decode(&run.encode()), Ok(run));
    }

    #[test]
    fn every_cut_and_every_flipped_byte_is_an_error_or_another_record_never_a_panic() {
        let encoded = record().encode();
        for len in 0..encoded.len() {
            assert!(LogRecord::decode(&encoded[..len]).is_err(), "cut at {len}");
        }
        for at in 0..encoded.len() {
            for bit in 0..8 {
                let mut flipped = encoded.clone();
                flipped[at] ^= 1 << bit;
                let _ = LogRecord::decode(&flipped);
            }
        }
        let mut longer = encoded;
        longer.push(0);
        assert!(LogRecord::decode(&longer).is_err());
    }

    #[test]
    fn a_record_that_contradicts_itself_is_refused() {
        let mut record = record();
        record.retained = 0;
        assert!(LogRecord::decode(&record.encode())
            .unwrap_err()
            .contains("retaining 0 events from seq 6 of 9"));
    }
}
