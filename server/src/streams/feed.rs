//! Where a read's messages come from: a [`Feed`] pages through a stream
//! after a cursor and waits for it to change. The in-process stream's ring
//! is one ([`LocalFeed`]); the shared history is the other
//! (`shared::SharedFeed`). Catch-up, long-poll and SSE reads are written
//! once, over a feed.

use super::numbering::{Numbering, ReadRefusal};
use super::offset::{Offset, Start};
use super::registry::Streams;
use super::stream::{Changes, Stream};
use super::wire_page::WirePage;
use bytes::Bytes;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// The most payload bytes one page carries (at least one message): a
/// live read's batch, and a read from the shared history (one call).
pub(crate) const PAGE_BYTES: usize = 1 << 20;

/// The most payload bytes a catch-up answer from this process's ring
/// carries: the ring is in memory, so a large stream is read in a few
/// round trips rather than one per MiB (a stream at the default
/// retention, 4 MiB, in one). The page is built in buffers of 64 KiB
/// (`wire_page`).
pub(crate) const CATCH_UP_PAGE_BYTES: usize = 16 << 20;

/// One page of a stream after a cursor, and the stream as the read saw it.
#[derive(Debug, Default)]
pub(crate) struct Page {
    /// One payload per message, seqs `cursor_before + 1 ..= cursor`.
    pub(crate) payloads: Vec<Bytes>,
    /// The seq of the last message returned (the read's cursor if none).
    pub(crate) cursor: u64,
    /// The stream's last seq.
    pub(crate) published: u64,
    /// Whether the stream is closed.
    pub(crate) closed: bool,
    /// The stream's offsets.
    pub(crate) numbering: Numbering,
    /// The stream's content type.
    pub(crate) content_type: String,
    /// JSON mode.
    pub(crate) json: bool,
    /// The page already encoded for a catch-up answer
    /// ([`Feed::read_catch_up`]); `payloads` is then empty.
    pub(crate) wire: Option<WirePage>,
}

impl Page {
    /// Whether the page reaches the stream's tail.
    pub(crate) fn up_to_date(&self) -> bool {
        self.cursor >= self.published
    }

    /// Whether the reader is at the tail of a closed stream.
    pub(crate) fn at_closed_tail(&self) -> bool {
        self.closed && self.up_to_date()
    }

    /// The offset after the page.
    pub(crate) fn next(&self) -> Offset {
        self.numbering.offset_of(self.cursor)
    }

    /// Whether the page holds no message.
    pub(crate) fn is_empty(&self) -> bool {
        self.payloads.is_empty() && self.wire.as_ref().is_none_or(|wire| wire.count == 0)
    }
}

/// Where a read starts.
#[derive(Debug)]
pub(crate) struct Started {
    /// The seq the read continues after.
    pub(crate) cursor: u64,
    /// The stream's content type.
    pub(crate) content_type: String,
}

/// Why a feed stopped.
#[derive(Debug)]
pub(crate) enum FeedEnd {
    /// The stream is gone (deleted, expired), or soft-deleted under a
    /// live reader.
    Gone,
    /// The stream was deleted while forks of it live (`410`).
    SoftDeleted,
    /// Retention overtook the reader, or the offset is not a position.
    Refused(ReadRefusal),
    /// The shared history did not answer.
    Unavailable,
}

/// A stream to read, as a live reader sees it.
pub(crate) trait Feed: Send + 'static {
    /// Where a read from `start` continues: after which seq, and the
    /// stream's content type.
    fn start(&mut self, start: Start) -> impl Future<Output = Result<Started, FeedEnd>> + Send;

    /// The messages after `cursor`, at most [`PAGE_BYTES`] (at least one
    /// when there is one). Changes after this call wake [`Feed::wait`].
    fn read(&mut self, cursor: u64) -> impl Future<Output = Result<Page, FeedEnd>> + Send;

    /// [`Feed::read`] for a catch-up answer: the page may come encoded
    /// ([`Page::wire`]) instead of as payloads.
    fn read_catch_up(&mut self, cursor: u64) -> impl Future<Output = Result<Page, FeedEnd>> + Send {
        self.read(cursor)
    }

    /// Waits until the stream may have changed since the last read, or
    /// `timeout`: `false` when the time ran out.
    fn wait(&mut self, timeout: Duration) -> impl Future<Output = bool> + Send;
}

/// A stream of this process.
pub(crate) struct LocalFeed {
    stream: Arc<Stream>,
    changed: Changes,
    /// Every read restarts the stream's TTL and idle clocks: a stream
    /// followed by a live reader stays.
    streams: Arc<Streams>,
}

impl LocalFeed {
    pub(crate) fn new(stream: Arc<Stream>, streams: Arc<Streams>) -> Self {
        let changed = Changes::of(Arc::clone(&stream));
        Self {
            stream,
            changed,
            streams,
        }
    }

    fn ended(&self) -> bool {
        self.stream.gone.load(Ordering::Acquire) || self.stream.soft_deleted.load(Ordering::Acquire)
    }

    /// What every page does first: marks the stream's changes seen (a
    /// change after it wakes `wait`), ends the read of a stream that is
    /// gone once its removal is durable, restarts the stream's clocks, and
    /// says whether readers are told it is closed
    /// ([`Stream::settled_for_readers`]).
    async fn begin_page(&mut self) -> Result<bool, FeedEnd> {
        self.changed.mark_seen();
        if self.ended() {
            self.streams.removals_settled().await;
            return Err(FeedEnd::Gone);
        }
        self.streams.touch(&self.stream);
        Ok(self
            .stream
            .settled_for_readers(self.streams.journal())
            .await)
    }
}

impl Feed for LocalFeed {
    async fn start(&mut self, start: Start) -> Result<Started, FeedEnd> {
        let cursor = self.stream.cursor_of(start).map_err(FeedEnd::Refused)?;
        Ok(Started {
            cursor,
            content_type: self.stream.settings.content_type.clone(),
        })
    }

    async fn read(&mut self, cursor: u64) -> Result<Page, FeedEnd> {
        let closed = self.begin_page().await?;
        let chunk = self
            .stream
            .read_after(cursor, PAGE_BYTES)
            .map_err(FeedEnd::Refused)?;
        Ok(Page {
            payloads: chunk.payloads,
            cursor: chunk.cursor,
            published: chunk.published,
            closed,
            numbering: self.stream.numbering.clone(),
            content_type: self.stream.settings.content_type.clone(),
            json: self.stream.json,
            wire: None,
        })
    }

    async fn read_catch_up(&mut self, cursor: u64) -> Result<Page, FeedEnd> {
        let closed = self.begin_page().await?;
        let wire = self
            .stream
            .wire_page_after(cursor, CATCH_UP_PAGE_BYTES, self.streams.budget())
            .map_err(FeedEnd::Refused)?;
        Ok(Page {
            payloads: Vec::new(),
            cursor: wire.cursor,
            published: wire.published,
            closed,
            numbering: self.stream.numbering.clone(),
            content_type: self.stream.settings.content_type.clone(),
            json: self.stream.json,
            wire: Some(wire),
        })
    }

    async fn wait(&mut self, timeout: Duration) -> bool {
        self.changed.wait(timeout).await
    }
}
