//! A catch-up page as it goes on the wire: the payloads after a cursor,
//! one after the other (or one JSON array), copied straight from the ring
//! into a few buffers of at most [`CHUNK_BYTES`], and the last page a
//! stream built kept, charged to the memory budget, for the next reader
//! from the same place.
//!
//! Why chunks and not one buffer: the server fixes the allocator's mmap
//! threshold at 128 KiB, so a buffer of a whole page (up to 16 MiB) would
//! be mapped, faulted in page by page and unmapped on every read; chunks
//! come from the read buffers' pool (`read_buffers`) and go back to it
//! warm. A dozen chunks go out in one vectored write, where a body chunk
//! per message (thousands for small messages) went through hyper's write
//! queue one by one. A payload of [`SHARE_FROM`] or more is not copied
//! again: its chunk is a slice of the buffer the ring was read into.
//!
//! Why the cache: N readers catching up from the same offset (a page
//! behind a CDN miss, a fleet of consumers restarting) would each copy and
//! encode the same bytes; the first builds the page and the others share
//! its buffers. A page is kept while the ring it was read from is the
//! stream's ring and nothing was published since: the same ring and the
//! same watermark mean the same messages, since only an emit evicts.

use super::charge::{take_charge, Charge};
use super::numbering::ReadRefusal;
use super::read_buffers::{ReadBuffer, READ_BUFFERS};
use super::stream::Stream;
use crate::admission::Bounded;
use bytes::Bytes;
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

/// A payload at least this large goes on the wire as a slice of the ring
/// read's buffer rather than copied once more into a chunk (which costs
/// more than the slice's reference count from about this size).
const SHARE_FROM: usize = 16 << 10;

/// A page of a stream after a cursor, encoded for the wire.
#[derive(Clone, Debug, Default)]
pub(crate) struct WirePage {
    /// The body, in order: each chunk at most [`CHUNK_BYTES`] of copied
    /// payloads, or one payload of at least [`SHARE_FROM`] (of any size)
    /// shared from the buffer the ring was read into.
    pub(crate) chunks: Vec<Bytes>,
    /// The body's length: the chunks' lengths summed.
    pub(crate) len: usize,
    /// What the chunks keep allocated (about `len`, more for a last chunk
    /// partly filled): what keeping the page is charged.
    pub(crate) held: usize,
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

/// Appends payloads to a page, in pooled buffers of at most
/// [`CHUNK_BYTES`], or as shared slices of the ring read's buffer.
struct Builder {
    chunks: Vec<Bytes>,
    /// The chunk being filled; `None` until the first byte after a chunk
    /// was sealed.
    current: Option<ReadBuffer>,
    /// The bytes in `chunks` and `current`.
    len: usize,
    /// What `chunks` keep allocated: the sealed buffers' capacities, and
    /// the shared slices' lengths (their buffers are about that size).
    held: usize,
}

/// A page's body as [`Builder`] made it.
struct Body {
    chunks: Vec<Bytes>,
    /// The chunks' lengths summed.
    len: usize,
    /// What the chunks keep allocated (at least `len`, about).
    held: usize,
}

impl Builder {
    fn new() -> Self {
        Self {
            chunks: Vec::new(),
            current: None,
            len: 0,
            held: 0,
        }
    }

    /// Copies `bytes` to the end of the page.
    fn push(&mut self, bytes: &[u8]) {
        let filled = self.current.as_ref().map_or(0, ReadBuffer::len);
        if filled > 0 && filled + bytes.len() > CHUNK_BYTES {
            self.seal();
        }
        self.current
            .get_or_insert_with(|| READ_BUFFERS.take(CHUNK_BYTES.max(bytes.len())))
            .extend_from_slice(bytes);
        self.len += bytes.len();
    }

    /// Puts `bytes` at the end of the page as a chunk of its own, without
    /// copying it.
    fn push_shared(&mut self, bytes: Bytes) {
        self.seal();
        self.len += bytes.len();
        self.held += bytes.len();
        self.chunks.push(bytes);
    }

    /// Ends the chunk being filled, if it has anything.
    fn seal(&mut self) {
        if let Some(current) = self.current.take() {
            if !current.is_empty() {
                self.held += current.capacity();
                self.chunks.push(Bytes::from_owner(current));
            }
        }
    }

    fn finish(mut self) -> Body {
        self.seal();
        Body {
            chunks: self.chunks,
            len: self.len,
            held: self.held,
        }
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
    let body = body.finish();
    (body.chunks, body.len)
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
        let published = self.visible(&ring);
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
            if let Ok(charge) = take_charge(budget, self.client.as_ref(), page.held as u64) {
                *self.kept_page() = Some(Box::new(KeptPage {
                    ring: Arc::downgrade(&ring),
                    after: cursor,
                    json: self.json,
                    page: page.clone(),
                    _charge: charge,
                }));
            }
        }
        Ok(page)
    }

    fn kept_page(&self) -> std::sync::MutexGuard<'_, Option<Box<KeptPage>>> {
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
        // Events per ring read: one until the first read tells their size
        // (a guess of more could copy megabytes into a buffer too large
        // for the read buffers' pool).
        let mut batch = 1u64;
        'pages: while read < published && (payload_bytes < max_bytes || count == 0) {
            let last = published.min(read + batch);
            let replay = match ring.replay_batch_in(read, last, READ_BUFFERS.take(0)) {
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
            for (index, (seq, payload)) in replay.iter().enumerate() {
                if payload_bytes >= max_bytes && count > 0 {
                    break 'pages;
                }
                if self.json && count > 0 {
                    body.push(b",");
                }
                // Shared only when large: a share is a reference count
                // taken and dropped, dearer than copying a small payload.
                match (payload.len() >= SHARE_FROM)
                    .then(|| replay.share(index))
                    .flatten()
                {
                    Some(shared) => body.push_shared(shared),
                    None => body.push(payload),
                }
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
        let body = body.finish();
        Ok(WirePage {
            chunks: body.chunks,
            len: body.len,
            held: body.held,
            count,
            cursor: read,
            published,
        })
    }
}
