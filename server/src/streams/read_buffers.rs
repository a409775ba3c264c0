//! The buffers a catch-up read copies into, recycled: a bounded pool that a
//! buffer goes back to when the last `Bytes` made from it is dropped.
//!
//! Why: a catch-up page is copied out of the ring (one buffer per ring
//! read) and into the chunks that go on the wire, and both live until the
//! socket has taken them. Freed, those blocks sit at the top of the
//! allocator's heap, which glibc hands back to the OS once more than its
//! trim threshold (128 KiB) is free there; the next read then faults every
//! page in again and the kernel zeroes it. A read of a 64 MiB stream spent
//! two thirds of its server time in those faults. Kept here instead, a
//! buffer is reused warm.
//!
//! What it holds is bounded: at most [`POOL_BYTES`] of capacity, in
//! buffers of at most [`LARGEST_KEPT`] each; a buffer that does not fit is
//! freed as before. Buffers in use are not the pool's: a kept wire page's
//! are charged to the memory budget by its stream, the others leave with
//! the answer that carries them.

use std::sync::{Mutex, PoisonError};

/// Capacity the server's pool keeps at most, summed over its buffers: four
/// catch-up pages of 16 MiB. One reader paging through a long stream holds
/// two (the page its stream keeps, the page being built).
pub(crate) const POOL_BYTES: usize = 64 << 20;

/// The largest buffer the server's pool keeps: larger ones (a single
/// message of megabytes) are freed when done.
pub(crate) const LARGEST_KEPT: usize = 1 << 20;

/// The server's pool, for every catch-up read.
pub(crate) static READ_BUFFERS: BufferPool = BufferPool::new(POOL_BYTES, LARGEST_KEPT);

/// Free buffers, bounded in number and size.
#[derive(Debug)]
pub(crate) struct BufferPool {
    free: Mutex<Free>,
    /// The most capacity `free` holds, summed.
    bound: usize,
    /// The largest capacity a buffer may have to be kept.
    largest_kept: usize,
}

/// The free buffers and their summed capacity.
#[derive(Debug)]
struct Free {
    /// Empty buffers, each of capacity at most the pool's `largest_kept`.
    buffers: Vec<Vec<u8>>,
    /// `buffers`' capacities summed: at most the pool's `bound`.
    bytes: usize,
}

impl BufferPool {
    /// An empty pool that keeps at most `bound` bytes of capacity, in
    /// buffers of at most `largest_kept` each.
    pub(crate) const fn new(bound: usize, largest_kept: usize) -> Self {
        Self {
            free: Mutex::new(Free {
                buffers: Vec::new(),
                bytes: 0,
            }),
            bound,
            largest_kept,
        }
    }

    fn free(&self) -> std::sync::MutexGuard<'_, Free> {
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An empty buffer with room for at least `capacity` bytes: a pooled
    /// one when there is one (grown if it is smaller), else a new one.
    pub(crate) fn take(&'static self, capacity: usize) -> ReadBuffer {
        let reused = {
            let mut free = self.free();
            let buffer = free.buffers.pop();
            if let Some(buffer) = &buffer {
                free.bytes -= buffer.capacity();
            }
            buffer
        };
        let mut bytes = reused.unwrap_or_default();
        bytes.reserve(capacity);
        ReadBuffer { bytes, pool: self }
    }

    /// Keeps `buffer`, emptied, if it fits the bounds; frees it otherwise.
    fn give_back(&self, mut buffer: Vec<u8>) {
        let capacity = buffer.capacity();
        if capacity == 0 || capacity > self.largest_kept {
            return;
        }
        let mut free = self.free();
        if free.bytes + capacity <= self.bound {
            buffer.clear();
            free.bytes += capacity;
            free.buffers.push(buffer);
        }
    }

    /// The summed capacity of the free buffers.
    #[cfg(test)]
    fn pooled_bytes(&self) -> usize {
        self.free().bytes
    }
}

/// A buffer from a [`BufferPool`], empty when taken; it goes back on drop.
/// Made into `Bytes` with `Bytes::from_owner` (or given to
/// `Ring::replay_batch_in`), it goes back when the last of those is
/// dropped.
#[derive(Debug)]
pub(crate) struct ReadBuffer {
    bytes: Vec<u8>,
    pool: &'static BufferPool,
}

impl ReadBuffer {
    /// The bytes written so far.
    pub(crate) fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The bytes it can hold without growing.
    pub(crate) fn capacity(&self) -> usize {
        self.bytes.capacity()
    }

    /// Whether nothing was written.
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Appends `bytes`.
    pub(crate) fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }
}

impl AsRef<[u8]> for ReadBuffer {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl AsMut<Vec<u8>> for ReadBuffer {
    fn as_mut(&mut self) -> &mut Vec<u8> {
        &mut self.bytes
    }
}

impl Drop for ReadBuffer {
    fn drop(&mut self) {
        self.pool.give_back(std::mem::take(&mut self.bytes));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn pool(bound: usize, largest_kept: usize) -> &'static BufferPool {
        Box::leak(Box::new(BufferPool::new(bound, largest_kept)))
    }

    #[test]
    fn a_buffer_goes_back_when_its_last_bytes_is_dropped_and_comes_out_empty() {
        let pool = pool(1 << 20, 1 << 16);
        let mut buffer = pool.take(1000);
        buffer.extend_from_slice(b"payload");
        let pointer = buffer.as_ref().as_ptr();
        let body = Bytes::from_owner(buffer);
        let shared = body.slice(1..4);
        drop(body);
        assert_eq!(pool.pooled_bytes(), 0, "a slice still holds it");
        drop(shared);
        assert!(pool.pooled_bytes() >= 1000);
        // Reused, and empty: what it held is not read again.
        let again = pool.take(10);
        assert_eq!(again.as_ref().as_ptr(), pointer);
        assert!(again.is_empty());
        assert_eq!(pool.pooled_bytes(), 0);
    }

    #[test]
    fn the_pool_keeps_no_more_than_its_bounds() {
        let pool = pool(4 << 10, 1 << 10);
        // Eight buffers of 1 KiB come back; four fit the bound.
        let buffers: Vec<ReadBuffer> = (0..8).map(|_| pool.take(1 << 10)).collect();
        drop(buffers);
        assert_eq!(pool.pooled_bytes(), 4 << 10);
        // One taken and grown past the largest kept is freed, not pooled.
        let mut grown = pool.take(0);
        assert_eq!(pool.pooled_bytes(), 3 << 10);
        grown.extend_from_slice(&[7; 2 << 10]);
        drop(grown);
        assert_eq!(pool.pooled_bytes(), 3 << 10);
    }
}
