//! One stream's replay ring: dense seqs, a published watermark, lock-free
//! emitters and wait-free, validating readers.

use crate::arena::{words_for, Arena};
use crate::config::{Config, ConfigError, Geometry};
use crate::error::{Coverage, EmitError, Gap, ReadError, ReplayError};
use crate::event::Event;
use crate::notify::Notifier;
use crate::slots::{Claim, Location, Slots};
use crate::sync::{fence, AtomicU64, Ordering};
use bytes::Bytes;
use crossbeam_utils::CachePadded;

/// A bounded replay buffer for one stream of events.
///
/// Any number of threads [`emit`](Ring::emit) at once; each emit gets the
/// next dense seq (1, 2, 3, …) and copies its payload into memory that was
/// preallocated when the ring was built. Readers [`replay_after`] a cursor
/// and get every event after it, in order, or a typed reason why not — never
/// a silent skip and never torn bytes.
///
/// See the [crate docs](crate) for the layout and the protocol.
///
/// ```
/// use gapless::{Config, Coverage, ReplayError, Ring};
/// let ring = Ring::new(Config::default().events(4).bytes(1024));
/// for i in 1..=6u8 {
///     assert_eq!(ring.emit(&[i])?, u64::from(i));
/// }
/// // Four events are retained: 3..=6.
/// let events = ring.replay_after(2)?;
/// assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4, 5, 6]);
/// assert!(matches!(ring.replay_after(1), Err(ReplayError::Gap(g)) if g.first_retained == 3));
/// assert!(matches!(ring.coverage(9), Coverage::Ahead { published: 6, .. }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`replay_after`]: Ring::replay_after
pub struct Ring {
    /// Random, non-zero, fixed at construction: the incarnation of the
    /// stream that event IDs carry.
    epoch: u64,
    geometry: Geometry,
    /// Seqs handed out: the next emit gets `head + 1`. Never decreases.
    head: CachePadded<AtomicU64>,
    /// The highest `h` such that every seq `<= h` is committed or known
    /// lost. Never decreases, never exceeds `head`. Readers never look past
    /// it, so a replay is always a contiguous prefix.
    published: CachePadded<AtomicU64>,
    /// Every seq `<= evicted` may be gone: raised a block at a time before
    /// the arena overwrites it, and to a lost seq before that seq settles.
    /// With `head - events` (slots being reused) it bounds what readers
    /// consider retained. Never decreases.
    evicted: CachePadded<AtomicU64>,
    /// Seqs whose emitter was lapped before it committed.
    lost: AtomicU64,
    slots: Slots,
    arena: Arena,
    notifier: Notifier,
}

/// Counters describing a ring's life so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Seqs handed out to emitters (committed, lost, or still being written).
    pub claimed: u64,
    /// The published watermark.
    pub published: u64,
    /// Seqs lost before commit because their emitter was lapped.
    pub lost: u64,
    /// Published seqs no longer retained (evicted or lost): `first_retained - 1`.
    pub evicted: u64,
    /// The oldest retained seq (`published + 1` when none is).
    pub first_retained: u64,
}

impl Ring {
    /// Builds a ring, clamping sizes into range (see [`Config`]). Never fails.
    pub fn new(config: Config) -> Self {
        match Self::try_new(config.clamped()) {
            Ok(ring) => ring,
            Err(error) => unreachable!("a clamped config is always valid: {error}"),
        }
    }

    /// Builds a ring, rejecting sizes outside the documented range.
    pub fn try_new(config: Config) -> Result<Self, ConfigError> {
        let geometry = config.geometry()?;
        Ok(Self {
            epoch: config
                .fixed_epoch()
                .map_or_else(crate::epoch::random, |e| e.get()),
            geometry,
            head: CachePadded::new(AtomicU64::new(0)),
            published: CachePadded::new(AtomicU64::new(0)),
            evicted: CachePadded::new(AtomicU64::new(0)),
            lost: AtomicU64::new(0),
            slots: Slots::new(geometry.events()),
            arena: Arena::new(geometry.arena_words(), geometry.blocks()),
            notifier: Notifier::new(),
        })
    }

    /// The stream's incarnation: random, non-zero, fixed at construction.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The ring's resolved sizes.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// The largest payload [`emit`](Ring::emit) accepts.
    pub fn max_payload(&self) -> usize {
        self.geometry.max_payload()
    }

    /// Appends one event and returns its seq.
    ///
    /// Lock-free and allocation-free: one `fetch_add` claims the seq,
    /// another the arena words, and the payload is copied into preallocated
    /// memory. The event is readable once the published watermark reaches
    /// it, which this call advances as far as it can before returning.
    ///
    /// # Errors
    /// [`EmitError::TooLarge`] (no seq consumed) or [`EmitError::Lapped`]
    /// (the seq was consumed and readers report it as a gap).
    pub fn emit(&self, payload: &[u8]) -> Result<u64, EmitError> {
        self.check_size(payload.len())?;
        let seq = self.head.fetch_add(1, Ordering::AcqRel) + 1;
        let written = self.write(seq, payload);
        self.advance_published();
        if written {
            Ok(seq)
        } else {
            Err(EmitError::Lapped { seq })
        }
    }

    /// Appends several events with one seq claim and one watermark advance;
    /// returns their seqs as `first ..= last` (`None` for an empty batch).
    ///
    /// # Errors
    /// [`EmitError::TooLarge`] if any payload is too large (nothing is
    /// emitted); [`EmitError::BatchLapped`] if some were lost.
    pub fn emit_batch(
        &self,
        payloads: &[&[u8]],
    ) -> Result<Option<std::ops::RangeInclusive<u64>>, EmitError> {
        for payload in payloads {
            self.check_size(payload.len())?;
        }
        let count = payloads.len() as u64;
        if count == 0 {
            return Ok(None);
        }
        let first = self.head.fetch_add(count, Ordering::AcqRel) + 1;
        let mut lost = 0;
        for (seq, payload) in (first..).zip(payloads) {
            if !self.write(seq, payload) {
                lost += 1;
            }
        }
        self.advance_published();
        let last = first + count - 1;
        if lost == 0 {
            Ok(Some(first..=last))
        } else {
            Err(EmitError::BatchLapped { first, last, lost })
        }
    }

    fn check_size(&self, len: usize) -> Result<(), EmitError> {
        let max = self.max_payload();
        if len > max {
            return Err(EmitError::TooLarge { len, max });
        }
        Ok(())
    }

    /// Writes `seq`'s payload and commits it; on failure marks it lost.
    /// Returns whether it committed.
    fn write(&self, seq: u64, payload: &[u8]) -> bool {
        match self.slots.acquire(seq) {
            Claim::Owned => {}
            Claim::Lapped | Claim::Busy => {
                self.lose(seq);
                return false;
            }
        }
        let offset = if payload.is_empty() {
            0
        } else {
            let start = self.arena.claim(words_for(payload.len()));
            if self
                .arena
                .write(start, payload, seq, &self.evicted)
                .is_err()
            {
                self.lose(seq);
                self.slots.mark_lost(seq);
                return false;
            }
            start
        };
        // The slot CAS above is ordered before the new location: a reader
        // that sees the new fields sees the new stamp.
        fence(Ordering::Release);
        self.slots.set_location(seq, offset, payload.len() as u64);
        self.slots.commit(seq);
        true
    }

    /// Records `seq` as lost: raises the eviction bound past it (before its
    /// slot, if ours, says so) and counts it.
    fn lose(&self, seq: u64) {
        self.evicted.fetch_max(seq, Ordering::AcqRel);
        self.lost.fetch_add(1, Ordering::Relaxed);
    }

    /// Raises the published watermark over every settled seq after it.
    ///
    /// Every emitter calls this after settling its seq. The `SeqCst` fence
    /// makes the last one to settle (in fence order) see every earlier
    /// settlement, so the watermark never stalls below a settled prefix.
    fn advance_published(&self) {
        fence(Ordering::SeqCst);
        let head = self.head.load(Ordering::Acquire);
        let evicted = self.evicted.load(Ordering::Acquire);
        let start = self.published.load(Ordering::Acquire);
        let mut high = start.max(evicted.min(head));
        while high < head && self.slots.is_settled(high + 1) {
            high += 1;
        }
        if high > start && self.published.fetch_max(high, Ordering::AcqRel) < high {
            self.notifier.advanced();
        }
    }

    /// The published watermark: every seq up to it is committed or known
    /// lost, and replays stop there.
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Acquire)
    }

    /// Every seq up to the returned one may be gone.
    fn evicted_through(&self) -> u64 {
        let reused = self
            .head
            .load(Ordering::Acquire)
            .saturating_sub(self.slots.len());
        self.evicted.load(Ordering::Acquire).max(reused)
    }

    /// The oldest retained seq (`published() + 1` when none is).
    pub fn first_retained(&self) -> u64 {
        let published = self.published();
        self.evicted_through().min(published) + 1
    }

    /// Counters for monitoring.
    pub fn stats(&self) -> Stats {
        let published = self.published();
        let first_retained = self.evicted_through().min(published) + 1;
        Stats {
            claimed: self.head.load(Ordering::Acquire),
            published,
            lost: self.lost.load(Ordering::Relaxed),
            evicted: first_retained - 1,
            first_retained,
        }
    }

    /// Whether a replay after `cursor` would succeed now, without copying:
    /// O(1) whatever the gap.
    pub fn coverage(&self, cursor: u64) -> Coverage {
        let published = self.published();
        if cursor > published {
            return Coverage::Ahead { cursor, published };
        }
        if cursor < published {
            let evicted = self.evicted_through();
            if cursor < evicted {
                return Coverage::Gap(Gap::new(cursor, evicted, published));
            }
        }
        Coverage::Covered {
            first: cursor + 1,
            last: published,
        }
    }

    /// Every event after `cursor` up to the published watermark, in order.
    ///
    /// Wait-free: at most `events` copies, then one validation pass; a copy
    /// that was overwritten while it was read makes the whole replay a
    /// [`ReplayError::Gap`], never torn bytes. `replay_after(0)` on a fresh
    /// ring is `Ok([])`.
    ///
    /// # Errors
    /// [`ReplayError::Ahead`] when `cursor > published()`;
    /// [`ReplayError::Gap`] when events after `cursor` are gone.
    pub fn replay_after(&self, cursor: u64) -> Result<Vec<Event>, ReplayError> {
        self.replay_range(cursor, u64::MAX)
    }

    /// Like [`Ring::replay_after`] but stops at `last` (clamped to the
    /// watermark): the events `cursor + 1 ..= min(last, published())`.
    ///
    /// # Errors
    /// As [`Ring::replay_after`]; only events up to `last` need be retained.
    pub fn replay_range(&self, cursor: u64, last: u64) -> Result<Vec<Event>, ReplayError> {
        let published = self.published();
        if cursor > published {
            return Err(ReplayError::Ahead { cursor, published });
        }
        let last = last.min(published);
        if cursor >= last {
            return Ok(Vec::new());
        }
        let evicted = self.evicted_through();
        if cursor < evicted {
            return Err(ReplayError::Gap(Gap::new(cursor, evicted, published)));
        }
        // Copy first, validate after one fence (a seqlock read per event).
        let max_len = self.max_payload() as u64;
        let locations: Vec<Option<Location>> = (cursor + 1..=last)
            .map(|seq| self.slots.locate(seq).filter(|l| l.len <= max_len))
            .collect();
        let total = locations.iter().flatten().map(|l| l.len as usize).sum();
        let mut bytes = Vec::with_capacity(total);
        for location in locations.iter().flatten() {
            self.arena
                .copy_into(location.offset, location.len as usize, &mut bytes);
        }
        fence(Ordering::Acquire);
        // Any overwrite we may have copied raised the bound before its first
        // byte (and any slot reuse raised `head`), so the bound re-read after
        // the fence covers every event whose copy is suspect.
        let stale = (cursor + 1..)
            .zip(&locations)
            .filter(|(seq, location)| !location.as_ref().is_some_and(|l| self.slots.still(*seq, l)))
            .map(|(seq, _)| seq)
            .last();
        let evicted = self.evicted_through();
        debug_assert!(
            stale.is_none_or(|seq| seq <= evicted),
            "seq {stale:?} changed under a reader but the bound {evicted} does not cover it"
        );
        let evicted = evicted.max(stale.unwrap_or(0));
        if cursor < evicted {
            return Err(ReplayError::Gap(Gap::new(cursor, evicted, published)));
        }
        let mut bytes = Bytes::from(bytes);
        Ok((cursor + 1..)
            .zip(locations)
            .map(|(seq, location)| Event {
                seq,
                payload: bytes.split_to(location.map_or(0, |l| l.len as usize)),
            })
            .collect())
    }

    /// One event by seq.
    ///
    /// # Errors
    /// [`ReadError::Zero`] for seq 0, [`ReadError::Ahead`] beyond the
    /// watermark, [`ReadError::Evicted`] when it is gone.
    pub fn read(&self, seq: u64) -> Result<Event, ReadError> {
        if seq == 0 {
            return Err(ReadError::Zero);
        }
        match self.replay_range(seq - 1, seq) {
            Ok(mut events) => events.pop().ok_or(ReadError::Ahead {
                seq,
                published: self.published(),
            }),
            Err(ReplayError::Ahead { published, .. }) => Err(ReadError::Ahead { seq, published }),
            Err(ReplayError::Gap(gap)) => Err(ReadError::Evicted {
                seq,
                first_retained: gap.first_retained,
            }),
        }
    }

    pub(crate) fn notifier(&self) -> &Notifier {
        &self.notifier
    }
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("epoch", &format_args!("{:016x}", self.epoch))
            .field("geometry", &self.geometry)
            .field("stats", &self.stats())
            .finish()
    }
}
