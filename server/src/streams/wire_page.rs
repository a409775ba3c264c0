//! A catch-up page as it goes on the wire: the payloads after a cursor,
//! one after the other (or one JSON array), copied straight from the ring
//! into a few buffers of at most [`CHUNK_BYTES`], and the last page a
//! stream built kept, charged to the memory budget, for the next reader
//! from the same place.
//!
//! Why chunks and not one buffer: the server fixes the allocator's mmap
//! threshold at 128 KiB, so a buffer of a whole page (up to 1 MiB) would
//! be mapped, faulted in page by page and unmapped on every read; buffers
//! under the threshold come from the heap and are reused. A dozen chunks
//! go out in one vectored write, where a body chunk per message (thousands
//! for small messages) went through hyper's write queue one by one.
//!
//! Why the cache: N readers catching up from the same offset (a page
//! behind a CDN miss, a fleet of consumers restarting) would each copy and
//! encode the same bytes; the first builds the page and the others share
//! its buffers. A page is kept while the ring it was read from is the
//! stream's ring and nothing was published since: the same ring and the
//! same watermark mean the same messages, since only an emit evicts.

use super::charge::{take_charge, Charge};
use super::numbering::ReadRefusal;
use super::stream::Stream;
use crate::admission::Bounded;
use bytes::{Bytes, BytesMut};
use gapless::{ReplayError, Ring, SingleWriter};
use std::sync::{Arc, PoisonError, Weak};

/// The largest buffer of a page: under the allocator's mmap threshold.
pub(crate) const CHUNK_BYTES: usize = 64 << 10;

/// A page smaller than this is not kept: building it costs less than
/// the lock and the charge.
const KEEP_FROM: usize = 16 << 10;

/// Payload bytes aimed at per ring read: its copy stays under the mmap
/// threshold too.
const BATCH_BYTES: usize = 96 << 10;

/// A page of a stream after a cursor, encoded for the wire.
#[derive(Clone, Debug, Default)]
pub(crate) struct WirePage {
    /// The body, in order: each chunk at most [`CHUNK_BYTES`] (a single
    /// payload larger than that is its own chunk).
    pub(crate) chunks: Vec<Bytes>,
    /// The body's length: the chunks' lengths summed.
    pub(crate) len: usize,
    /// The number of messages in it.
    pub(crate) count: u64,
    /// The seq of the last message in it (the read's cursor if none).
    pub(crate) cursor: u64,
    /// The ring's watermark when it was read.
    pub(crate) published: u64,
}

/// The page a stream built last, while it stays valid (module docs).
#[derive(Debug)]
pub(crate) struct KeptPage {
    /// The ring it was read from: a new ring (a fork's, a restart of the
    /// numbering) is other messages.
    ring: Weak<Ring<SingleWriter>>,
    /// The cursor it was read after.
    after: u64,
    /// Whether it is a JSON array.
    json: bool,
    page: WirePage,
    /// The page's buffers, charged to the budget while kept.
    _charge: Charge,
}

/// Appends payloads to a page, in buffers of at most [`CHUNK_BYTES`].
struct Builder {
    chunks: Vec<Bytes>,
    current: BytesMut,
    len: usize,
}

impl Builder {
    fn new() -> Self {
        Self {
            chunks: Vec::new(),
            current: BytesMut::new(),
            len: 0,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        if self.current.len() + bytes.len() > CHUNK_BYTES && !self.current.is_empty() {
            self.chunks.push(self.current.split().freeze());
        }
        if self.current.capacity() == 0 {
            self.current.reserve(CHUNK_BYTES.max(bytes.len()));
        }
        self.current.extend_from_slice(bytes);
        self.len += bytes.len();
    }

    fn finish(mut self) -> (Vec<Bytes>, usize) {
        if !self.current.is_empty() {
            self.chunks.push(self.current.freeze());
        }
        (self.chunks, self.len)
    }
}

/// `payloads` encoded as a page's body (one after the other, or a JSON
/// array), in buffers of at most [`CHUNK_BYTES`]: the chunks and their
/// length.
pub(crate) fn encode(payloads: &[Bytes], json: bool) -> (Vec<Bytes>, usize) {
    let mut body = Builder::new();
    if json {
        body.push(b"[");
    }
    for (i, payload) in payloads.iter().enumerate() {
        if json && i > 0 {
            body.push(b",");
        }
        body.push(payload);
    }
    if json {
        body.push(b"]");
    }
    body.finish()
}

impl Stream {
    /// The page after `cursor`, at most `max_bytes` of payload (at least
    /// one message when there is one), encoded: the payloads one after the
    /// other, or a JSON array for a JSON stream. Served from the kept page
    /// when it is valid (module docs); a page built here of at least
    /// [`KEEP_FROM`] bytes is kept if `budget` (and the creating client's
    /// share) can hold it.
    ///
    /// # Errors
    /// [`ReadRefusal::Gap`] when retention overtook the reader.
    pub(crate) fn wire_page_after(
        &self,
        cursor: u64,
        max_bytes: usize,
        budget: &Arc<Bounded>,
    ) -> Result<WirePage, ReadRefusal> {
        let ring = self.ring();
        let published = ring.published();
        if let Some(kept) = self.kept_page().as_ref() {
            if kept.after == cursor
                && kept.json == self.json
                && kept.page.published == published
                && Weak::ptr_eq(&kept.ring, &Arc::downgrade(&ring))
            {
                return Ok(kept.page.clone());
            }
        }
        let page = self.build_page(&ring, cursor, published, max_bytes)?;
        if page.len >= KEEP_FROM {
            if let Ok(charge) = take_charge(budget, self.client.as_ref(), page.len as u64) {
                *self.kept_page() = Some(KeptPage {
                    ring: Arc::downgrade(&ring),
                    after: cursor,
                    json: self.json,
                    page: page.clone(),
                    _charge: charge,
                });
            }
        }
        Ok(page)
    }

    fn kept_page(&self) -> std::sync::MutexGuard<'_, Option<KeptPage>> {
        self.kept_page
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the page after `cursor` from `ring`, up to `published`.
    fn build_page(
        &self,
        ring: &Ring<SingleWriter>,
        cursor: u64,
        published: u64,
        max_bytes: usize,
    ) -> Result<WirePage, ReadRefusal> {
        let mut body = Builder::new();
        if self.json {
            body.push(b"[");
        }
        let mut read = cursor;
        let mut count = 0u64;
        let mut payload_bytes = 0usize;
        // Events per ring read: 32 until the first read tells their size.
        let mut batch = 32u64;
        'pages: while read < published && (payload_bytes < max_bytes || count == 0) {
            let last = published.min(read + batch);
            let replay = match ring.replay_batch(read, last) {
                Ok(replay) => replay,
                // Retention overtook the page after it began: what was
                // gathered is served, and the next read, from the offset
                // the client then holds, gets the `410`.
                Err(ReplayError::Gap(_)) if count > 0 => break,
                Err(ReplayError::Gap(gap)) => {
                    return Err(self.numbering.gap(
                        self.offset_of(read),
                        gap.first_retained,
                        Some(read),
                    ))
                }
                Err(ReplayError::Ahead { .. }) => break,
            };
            let mut batch_bytes = 0usize;
            for (seq, payload) in replay.iter() {
                if payload_bytes >= max_bytes && count > 0 {
                    break 'pages;
                }
                if self.json && count > 0 {
                    body.push(b",");
                }
                body.push(payload);
                payload_bytes += payload.len();
                batch_bytes += payload.len();
                count += 1;
                read = seq;
            }
            let average = (batch_bytes / replay.len().max(1)).max(1);
            batch = (BATCH_BYTES / average).clamp(1, 4096) as u64;
        }
        if self.json {
            body.push(b"]");
        }
        let (chunks, len) = body.finish();
        Ok(WirePage {
            chunks,
            len,
            count,
            cursor: read,
            published,
        })
    }
}
