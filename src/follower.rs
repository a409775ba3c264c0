//! Live tailing: a cursor that yields the events after it as they are
//! published.

use crate::error::ReplayError;
use crate::event::Event;
use crate::ring::{EmitMode, ManyWriters, Ring};
use std::marker::PhantomData;
use std::ops::Deref;
use std::task::{Context, Poll};

/// Follows a ring from a cursor: each call yields the events published
/// since the last one, in order, with no hole.
///
/// Waiting costs emitters nothing while nobody waits (one load after a fence
/// they issue anyway). A follower that falls a full ring behind is not
/// skipped forward: it gets [`ReplayError::Gap`] and its cursor stays where
/// it was.
///
/// `R` is anything that derefs to a [`Ring`]: `&Ring`, `Arc<Ring>`, or the
/// `Arc<Ring<SingleWriter>>` of a [`Writer`](crate::Writer).
///
/// ```
/// use gapless::{Config, Follower, Ring};
/// use std::sync::Arc;
/// let ring = Arc::new(Ring::new(Config::default()));
/// let mut follower = Follower::new(Arc::clone(&ring), 0);
/// let emitter = std::thread::spawn(move || {
///     for i in 0..3u8 {
///         ring.emit(&[i]).unwrap();
///     }
/// });
/// let mut seen = Vec::new();
/// while seen.len() < 3 {
///     seen.extend(follower.wait()?.into_iter().map(|e| e.seq));
/// }
/// assert_eq!(seen, [1, 2, 3]);
/// emitter.join().unwrap();
/// # Ok::<(), gapless::ReplayError>(())
/// ```
#[derive(Debug)]
pub struct Follower<R: Deref<Target = Ring<M>>, M: EmitMode = ManyWriters> {
    ring: R,
    /// The last seq yielded (or the starting cursor).
    cursor: u64,
    /// The most events one call yields (`u64::MAX`: all published).
    max_batch: u64,
    mode: PhantomData<fn() -> M>,
}

impl<R: Deref<Target = Ring<M>>, M: EmitMode> Follower<R, M> {
    /// A follower that next yields `cursor + 1`.
    pub fn new(ring: R, cursor: u64) -> Self {
        Self {
            ring,
            cursor,
            max_batch: u64::MAX,
            mode: PhantomData,
        }
    }

    /// Yields at most `max_batch` events per call (at least one), so a
    /// reader that writes each batch to a slow peer holds a bounded copy
    /// rather than everything published since its cursor.
    pub fn with_max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = u64::try_from(max_batch.max(1)).unwrap_or(u64::MAX);
        self
    }

    /// The last seq yielded.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The ring followed.
    pub fn ring(&self) -> &Ring<M> {
        &self.ring
    }

    /// The events published since the last call, possibly none. Never
    /// blocks.
    ///
    /// # Errors
    /// [`ReplayError::Gap`] when the follower was lapped;
    /// [`ReplayError::Ahead`] when it started beyond the watermark.
    pub fn try_next(&mut self) -> Result<Vec<Event>, ReplayError> {
        // Clamped to the watermark by `replay_range`.
        let last = self.cursor.saturating_add(self.max_batch);
        let events = self.ring.replay_range(self.cursor, last)?;
        if let Some(last) = events.last() {
            self.cursor = last.seq;
        }
        Ok(events)
    }

    /// Blocks until at least one event follows the cursor, then yields
    /// them.
    ///
    /// # Errors
    /// As [`Follower::try_next`].
    pub fn wait(&mut self) -> Result<Vec<Event>, ReplayError> {
        loop {
            let events = self.try_next()?;
            if !events.is_empty() {
                return Ok(events);
            }
            let cursor = self.cursor;
            let ring: &Ring<M> = &self.ring;
            ring.notifier().wait_until(|| ring.published() > cursor);
        }
    }

    /// Like [`Follower::wait`], giving up after `timeout` with `Ok` of no
    /// events.
    ///
    /// # Errors
    /// As [`Follower::try_next`].
    #[cfg(not(loom))]
    pub fn wait_timeout(
        &mut self,
        timeout: std::time::Duration,
    ) -> Result<Vec<Event>, ReplayError> {
        let events = self.try_next()?;
        if !events.is_empty() {
            return Ok(events);
        }
        let cursor = self.cursor;
        let ring: &Ring<M> = &self.ring;
        if ring
            .notifier()
            .wait_until_timeout(|| ring.published() > cursor, timeout)
        {
            self.try_next()
        } else {
            Ok(Vec::new())
        }
    }

    /// Async form of [`Follower::wait`] for any executor: `Ready` with at
    /// least one event (or an error), else `Pending` with `cx`'s waker
    /// registered for the next advance of the watermark.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Result<Vec<Event>, ReplayError>> {
        loop {
            match self.try_next() {
                Ok(events) if events.is_empty() => {}
                ready => return Poll::Ready(ready),
            }
            let cursor = self.cursor;
            let ring: &Ring<M> = &self.ring;
            if !ring
                .notifier()
                .register(cx.waker(), || ring.published() > cursor)
            {
                return Poll::Pending;
            }
        }
    }
}
