//! Ring sizing: what a user asks for ([`Config`]), what the ring builds
//! from it ([`Geometry`]), why it cannot build it ([`ConfigError`]), and
//! every size limit of the engine: a ring's sizes ([`MIN_EVENTS`],
//! [`MAX_EVENTS`], [`MIN_BYTES`], [`MAX_BYTES`]) and start ([`MAX_START`]),
//! a batch's ([`MAX_BATCH`]) and a [`Store`](crate::Store)'s shards
//! ([`MAX_SHARDS`]).
//!
//! The modules that enforce a limit import it from here, and this module
//! imports none of them (only the slot layout, for the footprint), so a
//! limit never closes an import cycle.
//!
//! [`Config`], [`Geometry`] and [`ConfigError`] are re-exported at the
//! crate root; [`ConfigError`] also in [`error`](crate::error).

use std::fmt;
use std::num::NonZeroU64;

/// The smallest index ring: two slots.
pub const MIN_EVENTS: usize = 2;
/// The largest index ring: 2^21 slots (64 MiB of slot metadata). The claim
/// word's 24-bit seq field must span every seq in flight plus a ring.
pub const MAX_EVENTS: usize = 1 << 21;
/// The smallest payload memory: 64 bytes (eight words; the largest payload
/// is then 32 bytes).
pub const MIN_BYTES: usize = 64;
/// The largest payload memory: 4 GiB (the largest payload is then 2 GiB).
pub const MAX_BYTES: usize = 1 << 32;
/// The largest seq a ring may start after: 2^62, so that seqs never wrap.
pub const MAX_START: u64 = 1 << 62;
/// The most events one [`Ring::emit_batch`](crate::Ring::emit_batch)
/// takes (and at most the ring's window). Bounds how far a parked batch can
/// hold claims ahead of the watermark, which the claim word's 24-bit seq
/// field must span.
pub const MAX_BATCH: usize = 4096;
/// The most shards a [`Store`](crate::Store) takes.
pub const MAX_SHARDS: usize = 4096;
/// Index memory per retained event: one 32-byte slot (the record's word
/// position, its length, and the stamp that commits it).
pub const BYTES_PER_EVENT: usize = crate::slots::SLOT_BYTES;
/// Event counts from here up are rounded up to a multiple of 4 (at most 3
/// more, under 5%), so that neighbouring seqs' slots sit on different
/// cache lines; smaller counts are taken as they are.
const SPREAD_FROM: usize = 64;

/// How big a [`Ring`](crate::Ring) is: how many events it retains and how
/// much payload memory it has.
///
/// **What you configure is what it costs.** `events(n)` is the number of
/// events retained (exactly `n`, or `n` rounded up to a multiple of 4 from
/// 64 up: at most 3 more) and `bytes(b)` the payload memory (exactly `b`,
/// rounded up to a whole 8-byte word). Nothing is added on top: the
/// retention reserve comes out of both, and a ring's whole preallocated
/// memory ([`Geometry::footprint`]) is `events ×`
/// [`BYTES_PER_EVENT`]` + bytes` plus under 32 bytes of alignment — so a
/// capacity plan multiplies what it configured.
///
/// **The largest payload is half the payload memory**
/// ([`Geometry::max_payload`]), as Aeron's largest message is a fraction
/// of its term: the other half is the reserve that stays readable while an
/// emitter is stalled between claim and commit (see [`Geometry`]). To take
/// payloads of up to `p` bytes, configure at least `bytes(2 * p)`.
///
/// Sizes outside [`MIN_EVENTS`]..=[`MAX_EVENTS`] and
/// [`MIN_BYTES`]..=[`MAX_BYTES`] are an error from
/// [`Ring::try_new`](crate::Ring::try_new) (and [`Config::geometry`]) and a
/// documented panic from [`Ring::new`](crate::Ring::new): never silently
/// clamped.
///
/// ```
/// use gapless::Config;
/// let config = Config::default().events(1000).bytes(1_000_000);
/// let geometry = config.geometry()?;
/// assert_eq!(geometry.events(), 1000); // as asked
/// assert_eq!(geometry.bytes(), 1_000_000); // as asked: no doubling
/// assert_eq!(geometry.max_payload(), 500_000); // half the payload memory
/// assert_eq!(geometry.stalled_retained_events(), 500);
/// assert!(geometry.footprint() <= 1000 * gapless::config::BYTES_PER_EVENT + 1_000_000 + 32);
/// # Ok::<(), gapless::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    events: usize,
    bytes: usize,
    epoch: Option<NonZeroU64>,
    start_after: u64,
}

impl Default for Config {
    /// 1024 events and 1 MiB of payload memory (payloads up to 512 KiB),
    /// with a random epoch, starting at seq 1.
    fn default() -> Self {
        Self {
            events: 1024,
            bytes: 1 << 20,
            epoch: None,
            start_after: 0,
        }
    }
}

impl Config {
    /// Retain `events` events: the index has that many slots (rounded up to
    /// a multiple of 4 from 64 up, at most 3 more), [`BYTES_PER_EVENT`]
    /// each. Between [`MIN_EVENTS`] and [`MAX_EVENTS`].
    #[must_use]
    pub fn events(mut self, events: usize) -> Self {
        self.events = events;
        self
    }

    /// Give the ring `bytes` bytes of payload memory (rounded up to a whole
    /// 8-byte word), between [`MIN_BYTES`] and [`MAX_BYTES`]. The largest
    /// payload is half of it ([`Geometry::max_payload`]); each record takes
    /// its length rounded up to 8 bytes.
    #[must_use]
    pub fn bytes(mut self, bytes: usize) -> Self {
        self.bytes = bytes;
        self
    }

    /// Fix the ring's epoch instead of drawing a random one.
    ///
    /// For tests, fuzzing, and restoring a stream whose epoch was persisted.
    /// Two live rings must never share an epoch: a cursor from one would be
    /// read as a position in the other.
    #[must_use]
    pub fn epoch(mut self, epoch: NonZeroU64) -> Self {
        self.epoch = Some(epoch);
        self
    }

    /// Continue a stream whose seqs up to `seq` were handed out elsewhere:
    /// the ring's first emit gets `seq + 1`, and it reports every seq up
    /// to `seq` as evicted (a cursor below it is a gap, one at it is
    /// covered and empty). At most [`MAX_START`].
    ///
    /// For restoring a stream from an outside history (another process,
    /// a durable log) under its persisted epoch.
    ///
    /// ```
    /// use gapless::{Config, Coverage, Ring};
    /// let ring = Ring::new(Config::default().events(8).start_after(41));
    /// assert_eq!(ring.published(), 41);
    /// assert_eq!(ring.emit(b"next")?, 42);
    /// assert!(matches!(ring.coverage(41), Coverage::Covered { first: 42, last: 42 }));
    /// assert!(matches!(ring.coverage(40), Coverage::Gap(g) if g.first_retained == 42));
    /// # Ok::<(), gapless::EmitError>(())
    /// ```
    #[must_use]
    pub fn start_after(mut self, seq: u64) -> Self {
        self.start_after = seq;
        self
    }

    /// The seq the ring starts after (0 unless set).
    pub fn first_seq_after(&self) -> u64 {
        self.start_after
    }

    /// The requested number of events, before rounding.
    pub fn requested_events(&self) -> usize {
        self.events
    }

    /// The requested payload memory in bytes, before rounding.
    pub fn requested_bytes(&self) -> usize {
        self.bytes
    }

    /// The fixed epoch, if one was set.
    pub fn fixed_epoch(&self) -> Option<NonZeroU64> {
        self.epoch
    }

    /// The same configuration with both sizes clamped into their valid
    /// ranges.
    #[deprecated(
        since = "0.2.0",
        note = "a clamped size is not what was asked for; check sizes with `Config::geometry` or `Ring::try_new`"
    )]
    #[must_use]
    pub fn clamped(self) -> Self {
        Self {
            events: self.events.clamp(MIN_EVENTS, MAX_EVENTS),
            bytes: self.bytes.clamp(MIN_BYTES, MAX_BYTES),
            epoch: self.epoch,
            start_after: self.start_after.min(MAX_START),
        }
    }

    /// The layout a ring built from this configuration gets, or why there
    /// is none.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the size out of range.
    pub fn geometry(&self) -> Result<Geometry, ConfigError> {
        if self.events < MIN_EVENTS || self.events > MAX_EVENTS {
            return Err(ConfigError::Events {
                requested: self.events,
            });
        }
        if self.bytes < MIN_BYTES || self.bytes > MAX_BYTES {
            return Err(ConfigError::Bytes {
                requested: self.bytes,
            });
        }
        if self.start_after > MAX_START {
            return Err(ConfigError::StartAfter {
                requested: self.start_after,
            });
        }
        let slots = if self.events >= SPREAD_FROM {
            self.events.next_multiple_of(4)
        } else {
            self.events
        };
        let words = self.bytes.div_ceil(8);
        Ok(Geometry { slots, words })
    }
}

/// The resolved layout of a ring: its index of
/// [`events`](Geometry::events) slots and its arena of
/// [`bytes`](Geometry::bytes) of payload memory, and every figure derived
/// from them.
///
/// Each is split in two: a **window** that emitters may run ahead of the
/// published watermark, and a **reserve** behind it. An emitter of seq `s`
/// at words `[p, p + n)` writes only once the published watermark `P`
/// satisfies `P >= s - window()` and the published records end at or past
/// `p + n - window_words()`. So while the watermark stands still (an emitter
/// is stalled between claim and commit), the newest
/// [`stalled_retained_events`](Geometry::stalled_retained_events) published
/// events and the newest
/// [`stalled_retained_bytes`](Geometry::stalled_retained_bytes) of published
/// records are never overwritten: replays of them keep succeeding. While the
/// watermark moves, all `events` (as far as `bytes` holds them) are
/// retained. The reserve is half of each, rounded down; the window the rest.
///
/// ```
/// use gapless::Config;
/// let g = Config::default().events(4096).bytes(4096 * (256 + 64)).geometry()?;
/// assert_eq!((g.events(), g.window(), g.stalled_retained_events()), (4096, 2048, 2048));
/// assert_eq!(g.bytes(), 1_310_720);
/// assert_eq!(g.max_payload(), 655_360);
/// assert_eq!(g.stalled_retained_bytes(), 655_360);
/// assert_eq!(g.footprint(), 4096 * 32 + 24 + 1_310_720);
/// # Ok::<(), gapless::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Index slots: the events retained.
    slots: usize,
    /// Arena words: the payload memory in 8-byte words.
    words: usize,
}

impl Geometry {
    /// Events retained while the watermark moves: the number of index
    /// slots.
    pub fn events(&self) -> usize {
        self.slots
    }

    /// Payload memory in bytes: the arena, reserve included (`bytes(n)`
    /// rounded up to a whole word).
    pub fn bytes(&self) -> usize {
        self.words * 8
    }

    /// The newest published events guaranteed to stay retained while the
    /// watermark stands still (an emitter stalled between claim and
    /// commit): half the slots, rounded down.
    pub fn stalled_retained_events(&self) -> usize {
        self.reserve_slots()
    }

    /// The newest bytes of published records (each rounded up to 8 bytes)
    /// guaranteed to stay retained while the watermark stands still: half
    /// the payload memory, rounded down to a word.
    pub fn stalled_retained_bytes(&self) -> usize {
        self.reserve_arena_words() * 8
    }

    /// The newest published events an emitter never overwrites.
    #[deprecated(since = "0.2.0", note = "renamed `stalled_retained_events`")]
    pub fn reserve_events(&self) -> usize {
        self.reserve_slots()
    }

    /// The newest words of published records an emitter never overwrites.
    #[deprecated(
        since = "0.2.0",
        note = "use `stalled_retained_bytes` (in bytes: words × 8)"
    )]
    pub fn reserve_words(&self) -> usize {
        self.reserve_arena_words()
    }

    /// How many seqs past the watermark may be written: `events -
    /// stalled_retained_events`. Emitters further ahead wait at the wrap.
    pub fn window(&self) -> usize {
        self.slots - self.reserve_slots()
    }

    /// Arena size in 8-byte words, reserve included.
    pub fn arena_words(&self) -> usize {
        self.words
    }

    /// Arena size in bytes, reserve included: the same as
    /// [`Geometry::bytes`].
    pub fn arena_bytes(&self) -> usize {
        self.bytes()
    }

    /// How many words past the end of the published records may be
    /// written: `arena_words` minus the reserve.
    pub fn window_words(&self) -> usize {
        self.words - self.reserve_arena_words()
    }

    /// The largest payload an emit accepts: the window, half the payload
    /// memory (rounded up to a word). A batch's records together fit in it
    /// too.
    pub fn max_payload(&self) -> usize {
        self.window_words() * 8
    }

    /// Bytes of memory the ring preallocates: its slots
    /// ([`BYTES_PER_EVENT`] each, plus 24 bytes to align them to 32) and
    /// its arena. Resident only as emits first write it, up to this and
    /// never beyond.
    pub fn footprint(&self) -> usize {
        crate::slots::Slots::allocation_bytes(self.slots) + self.words * 8
    }

    /// Slots in the reserve: half, rounded down.
    pub(crate) fn reserve_slots(&self) -> usize {
        self.slots / 2
    }

    /// Arena words in the reserve: half, rounded down.
    pub(crate) fn reserve_arena_words(&self) -> usize {
        self.words / 2
    }
}

/// Why a [`Config`] cannot build a ring (or a [`Store`](crate::Store) its
/// shards).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The event count is outside [`MIN_EVENTS`]..=[`MAX_EVENTS`].
    Events {
        /// What was asked for.
        requested: usize,
    },
    /// The payload memory is outside [`MIN_BYTES`]..=[`MAX_BYTES`].
    Bytes {
        /// What was asked for.
        requested: usize,
    },
    /// The starting seq is above [`MAX_START`].
    StartAfter {
        /// What was asked for.
        requested: u64,
    },
    /// A [`Store`](crate::Store)'s shard count is outside
    /// 1..=[`MAX_SHARDS`].
    Shards {
        /// What was asked for.
        requested: usize,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Events { requested } => write!(
                f,
                "a ring retains between {MIN_EVENTS} and {MAX_EVENTS} events, not {requested}"
            ),
            Self::Bytes { requested } => write!(
                f,
                "a ring's payload memory is between {MIN_BYTES} and {MAX_BYTES} bytes, not {requested}"
            ),
            Self::StartAfter { requested } => {
                write!(
                    f,
                    "a ring starts after seq {MAX_START} at most, not {requested}"
                )
            }
            Self::Shards { requested } => write!(
                f,
                "a store has between 1 and {MAX_SHARDS} shards, not {requested}"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is configured is what is built: exact sizes, not powers of two.
    #[test]
    fn sizes_are_taken_as_asked() {
        let g = Config::default().events(3).bytes(65).geometry().unwrap();
        assert_eq!(g.events(), 3);
        assert_eq!((g.stalled_retained_events(), g.window()), (1, 2));
        assert_eq!(g.arena_words(), 9);
        assert_eq!(g.bytes(), 72, "rounded up to a whole word");
        assert_eq!((g.reserve_arena_words(), g.window_words()), (4, 5));
        assert_eq!(g.max_payload(), 40);
        let g = Config::default()
            .events(1025)
            .bytes(5 << 20)
            .geometry()
            .unwrap();
        assert_eq!(g.events(), 1028, "a multiple of 4 from 64 up");
        assert_eq!(g.bytes(), 5 << 20);
        assert_eq!(g.max_payload(), 5 << 19);
    }

    /// The footprint target: within 10% of what was asked, at every size.
    #[test]
    fn every_size_costs_within_ten_percent_of_what_was_asked() {
        let sizes = (MIN_EVENTS..200).chain([
            1000,
            1023,
            1025,
            4095,
            4097,
            100_003,
            MAX_EVENTS - 1,
            MAX_EVENTS,
        ]);
        for events in sizes {
            for bytes in [MIN_BYTES, 65, 1000, 4097, 1 << 20, (1 << 20) + 1, 4_456_448] {
                let g = Config::default()
                    .events(events)
                    .bytes(bytes)
                    .geometry()
                    .unwrap();
                assert!(
                    g.events() >= events && g.events() * 10 <= events * 11,
                    "events({events}) gives {}",
                    g.events()
                );
                assert!(
                    g.bytes() >= bytes && g.bytes() <= bytes + 7,
                    "bytes({bytes}) gives {}",
                    g.bytes()
                );
                // Over what was asked: at most 3 slots (rounding to a
                // multiple of 4), 7 bytes (to a word) and 24 (alignment);
                // within 10% from 320 bytes up.
                let asked = events * BYTES_PER_EVENT + bytes;
                let over = g.footprint() - asked;
                assert!(
                    over <= 3 * BYTES_PER_EVENT + 7 + 24,
                    "{events} events, {bytes} B: {over} over"
                );
                assert!(
                    asked < 320 || g.footprint() * 10 <= asked * 11,
                    "{events} events, {bytes} B: {} of {asked}",
                    g.footprint()
                );
                assert_eq!(g.window() + g.stalled_retained_events(), g.events());
                assert_eq!(g.max_payload() + g.stalled_retained_bytes(), g.bytes());
                assert!(
                    2 * g.max_payload() >= g.bytes(),
                    "the largest payload is half"
                );
            }
        }
    }

    #[test]
    fn rejects_out_of_range_sizes() {
        assert_eq!(
            Config::default().events(0).geometry(),
            Err(ConfigError::Events { requested: 0 })
        );
        assert_eq!(
            Config::default().events(MAX_EVENTS + 1).geometry(),
            Err(ConfigError::Events {
                requested: MAX_EVENTS + 1
            })
        );
        assert_eq!(
            Config::default().bytes(MIN_BYTES - 1).geometry(),
            Err(ConfigError::Bytes {
                requested: MIN_BYTES - 1
            })
        );
        assert_eq!(
            Config::default().bytes(usize::MAX).geometry(),
            Err(ConfigError::Bytes {
                requested: usize::MAX
            })
        );
        assert!(Config::default()
            .events(usize::MAX)
            .geometry()
            .unwrap_err()
            .to_string()
            .contains("events"));
    }

    #[test]
    #[allow(deprecated)]
    fn clamping_is_explicit_and_always_yields_a_geometry() {
        for (events, bytes) in [(0, 0), (usize::MAX, usize::MAX), (1, 1 << 40)] {
            let g = Config::default()
                .events(events)
                .bytes(bytes)
                .clamped()
                .geometry()
                .unwrap();
            assert!(g.events() >= MIN_EVENTS && g.events() <= MAX_EVENTS);
            assert!(g.bytes() >= MIN_BYTES && g.bytes() <= MAX_BYTES);
        }
    }
}
