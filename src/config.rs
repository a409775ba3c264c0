//! Ring sizing: what a user asks for ([`Config`]) and what the ring builds
//! from it ([`Geometry`]).

use std::fmt;
use std::num::NonZeroU64;

/// The smallest index ring: two slots.
pub const MIN_EVENTS: usize = 2;
/// The largest index ring: 2^21 slots (64 MiB of slot metadata). The claim
/// word's 24-bit seq field must span every seq in flight plus a ring.
pub const MAX_EVENTS: usize = 1 << 21;
/// The smallest byte arena: 64 bytes (eight words).
pub const MIN_BYTES: usize = 64;
/// The largest payload capacity: 4 GiB (an 8 GiB arena with its reserve).
pub const MAX_BYTES: usize = 1 << 32;
/// The largest seq a ring may start after: 2^62, so that seqs never wrap.
pub const MAX_START: u64 = 1 << 62;

/// How big a [`Ring`](crate::Ring) is: how many events it retains and how
/// many payload bytes.
///
/// Both bounds are fixed at construction and preallocated; a ring's memory
/// never grows. Sizes are rounded up to powers of two (so that a seq maps to
/// its slot and a byte position to its arena word with a mask). The arena is
/// twice the rounded byte count: the second half is the retention reserve
/// (see [`Geometry`]), so a ring built with `bytes(n)` accepts a payload of
/// `n` bytes.
/// [`Ring::try_new`](crate::Ring::try_new) rejects sizes outside
/// [`MIN_EVENTS`]..=[`MAX_EVENTS`] and [`MIN_BYTES`]..=[`MAX_BYTES`] with a
/// [`ConfigError`]; [`Ring::new`](crate::Ring::new) clamps them into range
/// instead, so it never fails.
///
/// ```
/// use gapless::Config;
/// let config = Config::default().events(1000).bytes(1 << 20);
/// let geometry = config.geometry().unwrap();
/// assert_eq!(geometry.events(), 1024); // rounded up to a power of two
/// assert_eq!(geometry.max_payload(), 1 << 20);
/// assert_eq!(geometry.arena_bytes(), 2 << 20); // with the reserve
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    events: usize,
    bytes: usize,
    epoch: Option<NonZeroU64>,
    start_after: u64,
}

impl Default for Config {
    /// 1024 events and 1 MiB of payload, with a random epoch, starting at
    /// seq 1.
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
    /// Retain at most `events` events (rounded up to a power of two).
    #[must_use]
    pub fn events(mut self, events: usize) -> Self {
        self.events = events;
        self
    }

    /// Accept payloads of up to `bytes` bytes, and retain at least that many
    /// bytes of the newest events (rounded up to a power of two; the arena
    /// is twice that).
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

    /// The requested number of payload bytes, before rounding.
    pub fn requested_bytes(&self) -> usize {
        self.bytes
    }

    /// The fixed epoch, if one was set.
    pub fn fixed_epoch(&self) -> Option<NonZeroU64> {
        self.epoch
    }

    /// The same configuration with both sizes clamped into their valid
    /// ranges.
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
        let slots = self.events.next_power_of_two();
        let words = 2 * self.bytes.div_ceil(8).next_power_of_two();
        Ok(Geometry { slots, words })
    }
}

/// The resolved layout of a ring: `events` slots and `arena_words` words,
/// both powers of two, each half of it a retention reserve.
///
/// An emitter of seq `s` at words `[p, p + n)` writes only once the
/// published watermark `P` satisfies `P >= s - window()` and the published
/// records end at or past `p + n - window_words()`. So the newest
/// [`reserve_events`](Geometry::reserve_events) published events, and the
/// newest [`reserve_words`](Geometry::reserve_words) words of published
/// records, are never overwritten while the watermark stands still (an
/// emitter is stalled between claim and commit): replays of them keep
/// succeeding. While the watermark moves, all `events` are retained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    slots: usize,
    words: usize,
}

impl Geometry {
    /// Events retained: the number of index slots.
    pub fn events(&self) -> usize {
        self.slots
    }

    /// The newest published events an emitter never overwrites: half the
    /// slots.
    pub fn reserve_events(&self) -> usize {
        self.slots / 2
    }

    /// How far ahead of the watermark seqs may be written: `events -
    /// reserve_events`. Emitters further ahead wait at the wrap.
    pub fn window(&self) -> usize {
        self.slots - self.reserve_events()
    }

    /// Arena size in 8-byte words, reserve included.
    pub fn arena_words(&self) -> usize {
        self.words
    }

    /// Arena size in bytes, reserve included.
    pub fn arena_bytes(&self) -> usize {
        self.words * 8
    }

    /// The newest words of published records an emitter never overwrites:
    /// half the arena.
    pub fn reserve_words(&self) -> usize {
        self.words / 2
    }

    /// How far past the end of the published records words may be written:
    /// `arena_words - reserve_words`.
    pub fn window_words(&self) -> usize {
        self.words - self.reserve_words()
    }

    /// The largest payload an emit accepts: `window_words` words, at least
    /// the `bytes` the ring was configured with.
    pub fn max_payload(&self) -> usize {
        self.window_words() * 8
    }

    /// Bytes of memory the ring preallocates for slots and arena.
    pub fn footprint(&self) -> usize {
        self.slots * crate::slots::SLOT_BYTES + self.words * 8
    }
}

/// Why a [`Config`] cannot build a ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// The event count is outside [`MIN_EVENTS`]..=[`MAX_EVENTS`].
    Events {
        /// What was asked for.
        requested: usize,
    },
    /// The byte count is outside [`MIN_BYTES`]..=[`MAX_BYTES`].
    Bytes {
        /// What was asked for.
        requested: usize,
    },
    /// The starting seq is above [`MAX_START`].
    StartAfter {
        /// What was asked for.
        requested: u64,
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
                "a ring holds between {MIN_BYTES} and {MAX_BYTES} payload bytes, not {requested}"
            ),
            Self::StartAfter { requested } => {
                write!(
                    f,
                    "a ring starts after seq {MAX_START} at most, not {requested}"
                )
            }
        }
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_to_powers_of_two() {
        let g = Config::default().events(3).bytes(65).geometry().unwrap();
        assert_eq!(g.events(), 4);
        assert_eq!((g.reserve_events(), g.window()), (2, 2));
        assert_eq!(g.arena_words(), 32);
        assert_eq!((g.reserve_words(), g.window_words()), (16, 16));
        assert_eq!(g.max_payload(), 128);
    }

    #[test]
    fn rejects_zero_and_absurd_sizes() {
        assert_eq!(
            Config::default().events(0).geometry(),
            Err(ConfigError::Events { requested: 0 })
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
    fn clamping_always_yields_a_geometry() {
        for (events, bytes) in [(0, 0), (usize::MAX, usize::MAX), (1, 1 << 40)] {
            let g = Config::default()
                .events(events)
                .bytes(bytes)
                .clamped()
                .geometry()
                .unwrap();
            assert!(g.events() >= MIN_EVENTS && g.events() <= MAX_EVENTS);
            assert!(g.max_payload() >= MIN_BYTES && g.max_payload() <= MAX_BYTES);
        }
    }

    #[test]
    fn bytes_n_accepts_a_payload_of_n_bytes() {
        for bytes in [MIN_BYTES, 65, 1000, 1 << 20, MAX_BYTES] {
            let g = Config::default().bytes(bytes).geometry().unwrap();
            assert!(
                g.max_payload() >= bytes,
                "bytes({bytes}) accepts only {}",
                g.max_payload()
            );
            assert_eq!(g.max_payload() + g.reserve_words() * 8, g.arena_bytes());
        }
    }
}
