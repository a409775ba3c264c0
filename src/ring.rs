//! One stream's replay ring: its state, construction and counters. The
//! emit protocol is in `emit` (shared emitters) and `writer` (the single
//! writer); reading is in `read`.

use crate::arena::Arena;
use crate::claim::Claimed;
use crate::config::{Config, ConfigError, Geometry};
use crate::error::EmitError;
use crate::notify::Notifier;
use crate::slots::{Location, Slots};
use crate::sync::{fence, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::marker::PhantomData;

/// How a ring takes events: a type-level marker, [`ManyWriters`] or
/// [`SingleWriter`]. Sealed.
pub trait EmitMode: sealed::Sealed + Send + Sync + 'static {}

/// Any number of threads call [`Ring::emit`] at once (the default).
#[derive(Debug)]
pub enum ManyWriters {}

/// One exclusive [`Writer`](crate::Writer) emits; the ring itself has no
/// `emit`, so shared emits cannot be mixed in.
#[derive(Debug)]
pub enum SingleWriter {}

impl EmitMode for ManyWriters {}
impl EmitMode for SingleWriter {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::ManyWriters {}
    impl Sealed for super::SingleWriter {}
}

/// A bounded replay buffer for one stream of events.
///
/// Any number of threads [`emit`](Ring::emit) at once; each emit gets the
/// next dense seq (1, 2, 3, …) and copies its payload into memory that was
/// preallocated when the ring was built. Every seq handed out is committed:
/// an emit fails only for a payload larger than the ring can hold. Readers
/// [`replay_after`] a cursor and get every event after it, in order, or a
/// typed reason why not — never a silent skip and never torn bytes.
///
/// `Ring` is `Ring<ManyWriters>`; a ring with one producer is better built as
/// a [`Writer`](crate::Writer), whose ring (`Ring<SingleWriter>`) has the
/// same read API. See [`docs::protocol`](crate::docs::protocol) for the protocol.
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
pub struct Ring<M: EmitMode = ManyWriters> {
    /// Random, non-zero, fixed at construction: the incarnation of the
    /// stream that event IDs carry.
    pub(crate) epoch: u64,
    pub(crate) geometry: Geometry,
    /// The seq this ring starts after (`Config::start_after`): seqs up to
    /// it were never in this ring and are always reported evicted. Fixed.
    pub(crate) base: u64,
    /// The claim word (see `claim`): seqs and arena words handed out, packed
    /// so one `fetch_add` claims both. Never decreases (as decoded).
    pub(crate) claim: CachePadded<AtomicU64>,
    /// The published watermark: the highest `h` such that every seq `<= h`
    /// is committed. Never decreases, never exceeds the seqs claimed. Moved
    /// only by a `SeqCst` compare-and-swap from exactly `h - 1`-or-below
    /// to a committed seq (by a plain `Release` store for a single writer).
    pub(crate) published: CachePadded<AtomicU64>,
    /// A lower bound of the end position of the published records, raised
    /// (`fetch_max`) by an emitter that needs words past it: never above
    /// the words claimed, and at least `end(published) - window_words`
    /// whenever that watermark is visible. The decode reference for word
    /// positions and the emitters' fast wrap check.
    pub(crate) published_end_floor: CachePadded<AtomicU64>,
    pub(crate) slots: Slots,
    pub(crate) arena: Arena,
    pub(crate) notifier: Notifier,
    pub(crate) waits: WaitCounters,
    pub(crate) mode: PhantomData<M>,
}

/// How emitters waited at the wrap. Touched only when one waits.
#[derive(Default)]
pub(crate) struct WaitCounters {
    /// Emits (or batches) that found their slot or words still held and
    /// waited.
    pub(crate) waits: AtomicU64,
    /// Total nanoseconds those emits waited.
    pub(crate) nanos: AtomicU64,
    /// Emitters waiting right now.
    pub(crate) waiting: AtomicU64,
}

/// Counters describing a ring's life so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Seqs handed out to emitters (published or still being written).
    pub claimed: u64,
    /// The published watermark.
    pub published: u64,
    /// Published seqs no longer retained: `first_retained - 1`.
    pub evicted: u64,
    /// The oldest retained seq (`published + 1` when none is).
    pub first_retained: u64,
    /// Emits that waited at the wrap for an emitter a window behind
    /// (descheduled between claim and commit). Size `events` so this stays
    /// near zero.
    pub wrap_waits: u64,
    /// Total time those emits waited, in nanoseconds.
    pub wrap_wait_nanos: u64,
    /// Emitters waiting at the wrap right now.
    pub waiting_emitters: u64,
}

impl<M: EmitMode> Ring<M> {
    /// Builds a ring for either mode; the public constructors pick it.
    pub(crate) fn build(config: Config) -> Result<Self, ConfigError> {
        let geometry = config.geometry()?;
        let base = config.first_seq_after();
        Ok(Self {
            epoch: config
                .fixed_epoch()
                .unwrap_or_else(crate::epoch::random)
                .get(),
            geometry,
            base,
            // `base` seqs and no words claimed, all of them published: the
            // state of a ring whose `base` events were evicted.
            claim: CachePadded::new(AtomicU64::new(
                Claimed {
                    seqs: base,
                    words: 0,
                }
                .encode(),
            )),
            published: CachePadded::new(AtomicU64::new(base)),
            published_end_floor: CachePadded::new(AtomicU64::new(0)),
            slots: Slots::new(geometry.events()),
            arena: Arena::new(geometry.arena_words()),
            notifier: Notifier::new(),
            waits: WaitCounters::default(),
            mode: PhantomData,
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

    /// The largest payload an emit accepts : half the configured payload memory ([`Geometry::max_payload`](crate::Geometry::max_payload)).
    pub fn max_payload(&self) -> usize {
        self.geometry.max_payload()
    }

    /// The published watermark: every seq up to it is committed, and
    /// replays stop there.
    pub fn published(&self) -> u64 {
        self.published.load(Ordering::Acquire)
    }

    /// The oldest retained seq (`published() + 1` when none is). A lower
    /// bound if emitters overtook this call by a whole ring.
    pub fn first_retained(&self) -> u64 {
        self.retention().first_retained
    }

    /// [`Ring::first_retained`], searched up from `from`: a seq at or
    /// below the oldest retained one, such as an earlier answer (eviction
    /// only grows). It costs O(log k) slot reads for `k` seqs evicted since
    /// `from` where the search from scratch costs O(log events): a writer
    /// that tracks what its ring still holds asks after every emit, and
    /// most emits evict one event or none. A `from` above the oldest
    /// retained seq is an error of the caller's, answered with `from`
    /// (at most `published() + 1`).
    pub fn first_retained_from(&self, from: u64) -> u64 {
        self.retention_from(from).first_retained
    }

    /// Counters for monitoring.
    pub fn stats(&self) -> Stats {
        let retention = self.retention();
        Stats {
            claimed: retention.claimed,
            published: retention.published,
            evicted: retention.first_retained - 1,
            first_retained: retention.first_retained,
            wrap_waits: self.waits.waits.load(Ordering::Relaxed),
            wrap_wait_nanos: self.waits.nanos.load(Ordering::Relaxed),
            waiting_emitters: self.waits.waiting.load(Ordering::Relaxed),
        }
    }

    /// Refuses a payload larger than the ring can hold.
    pub(crate) fn check_fits(&self, len: usize) -> Result<(), EmitError> {
        let max = self.max_payload();
        if len > max {
            return Err(EmitError::TooLarge { len, max });
        }
        Ok(())
    }

    /// Stores `seq`'s payload at word `pos` and records its location (not
    /// its stamp). The caller emits `seq`, has claimed it and passed its
    /// wrap check, and has issued `fence(Release)` since.
    #[inline]
    pub(crate) fn write_record(&self, seq: u64, pos: u64, payload: &[u8]) {
        self.arena.write(pos, payload);
        self.slots.set_location(
            seq,
            Location {
                pos,
                len: payload.len() as u64,
            },
        );
    }

    /// [`Ring::write_record`] and then the stamp that commits `seq`, under
    /// the same contract: the single shared emit.
    #[inline]
    pub(crate) fn write_committed(&self, seq: u64, pos: u64, payload: &[u8]) {
        self.arena.write(pos, payload);
        self.slots.set_location_and_commit(
            seq,
            Location {
                pos,
                len: payload.len() as u64,
            },
        );
    }

    pub(crate) fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    /// The claim word decoded between two reads of the watermark and the
    /// end floor, or `None` when they moved so far in between (a ring of
    /// events or two arenas of words) that everything read before `opened`
    /// is gone and the word cannot be decoded against it.
    ///
    /// Call after the reads to validate; issues `fence(Acquire)` first, so
    /// every `Relaxed` read before it that saw a newer record's store sees
    /// that record's claim in the result.
    pub(crate) fn claimed_since(&self, opened: Opened) -> Option<Validation> {
        fence(Ordering::Acquire);
        // `Acquire`: synchronises with every claim up to this value, so each
        // claimer's earlier wrap checks (which bound its claims by the
        // watermark) happen before the re-reads below.
        let word = self.claim.load(Ordering::Acquire);
        let published = self.published.load(Ordering::Acquire);
        let floor = self.published_end_floor.load(Ordering::Acquire);
        let events = self.slots.len();
        let words = self.arena.len();
        if published.wrapping_sub(opened.published) >= events
            || floor.wrapping_sub(opened.floor) >= 2 * words
        {
            return None;
        }
        Some(Validation {
            claimed: Claimed::decode(word, opened.published, opened.floor),
            published,
            floor,
        })
    }

    /// Reads the watermark and end floor that open a bracketed decode.
    pub(crate) fn open(&self) -> Opened {
        Opened {
            published: self.published.load(Ordering::Acquire),
            floor: self.published_end_floor.load(Ordering::Acquire),
        }
    }
}

/// What a reader validates its reads against: the claim word and the
/// watermark and end floor, all read after its `fence(Acquire)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Validation {
    /// The claim word, decoded.
    pub(crate) claimed: Claimed,
    /// The watermark, read after the claim word.
    pub(crate) published: u64,
    /// The end floor, read after the watermark.
    pub(crate) floor: u64,
}

/// The first half of a bracketed decode of the claim word (see
/// [`Ring::claimed_since`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Opened {
    /// The watermark, read first.
    pub(crate) published: u64,
    /// The end floor, read next.
    pub(crate) floor: u64,
}

impl<M: EmitMode> std::fmt::Debug for Ring<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("epoch", &format_args!("{:016x}", self.epoch))
            .field("geometry", &self.geometry)
            .field("stats", &self.stats())
            .finish()
    }
}
