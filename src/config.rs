//! Ring sizing: what a user asks for ([`Config`]) and what the ring builds
//! from it ([`Geometry`]).

use std::fmt;
use std::num::NonZeroU64;

/// The smallest index ring: two slots.
pub const MIN_EVENTS: usize = 2;
/// The largest index ring: 2^22 slots (128 MiB of slot metadata).
pub const MAX_EVENTS: usize = 1 << 22;
/// The smallest byte arena: 64 bytes (eight words).
pub const MIN_BYTES: usize = 64;
/// The largest byte arena: 4 GiB.
pub const MAX_BYTES: usize = 1 << 32;

/// The most leases an arena is divided into (see [`Geometry::blocks`]).
const MAX_BLOCKS: usize = 64;

/// How big a [`Ring`](crate::Ring) is: how many events it retains and how
/// many payload bytes.
///
/// Both bounds are fixed at construction and preallocated; a ring's memory
/// never grows. Sizes are rounded up to powers of two (so that a seq maps to
/// its slot and a byte position to its arena word with a mask).
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
/// assert_eq!(geometry.arena_bytes(), 1 << 20);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    events: usize,
    bytes: usize,
    epoch: Option<NonZeroU64>,
}

impl Default for Config {
    /// 1024 events and 1 MiB of payload, with a random epoch.
    fn default() -> Self {
        Self {
            events: 1024,
            bytes: 1 << 20,
            epoch: None,
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

    /// Retain at most `bytes` payload bytes (rounded up to a power of two).
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
        let slots = self.events.next_power_of_two();
        let words = self.bytes.div_ceil(8).next_power_of_two();
        let blocks = words.min(MAX_BLOCKS);
        Ok(Geometry {
            slots,
            words,
            blocks,
        })
    }
}

/// The resolved layout of a ring. All three counts are powers of two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    slots: usize,
    words: usize,
    blocks: usize,
}

impl Geometry {
    /// Events retained: the number of index slots.
    pub fn events(&self) -> usize {
        self.slots
    }

    /// Payload capacity in 8-byte arena words.
    pub fn arena_words(&self) -> usize {
        self.words
    }

    /// Payload capacity in bytes.
    pub fn arena_bytes(&self) -> usize {
        self.words * 8
    }

    /// How many leases the arena is divided into. A writer may write into a
    /// block only while no writer of an earlier lap of that block is still
    /// writing; a reader's retention bound moves a block at a time.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Words per block.
    pub fn block_words(&self) -> usize {
        self.words / self.blocks
    }

    /// The largest payload an emit accepts: the arena less one block, so that
    /// a record never spans two laps of the same block.
    pub fn max_payload(&self) -> usize {
        (self.words - self.block_words()) * 8
    }

    /// Bytes of memory the ring preallocates for slots, arena and leases.
    pub fn footprint(&self) -> usize {
        self.slots * crate::slots::SLOT_BYTES
            + self.words * 8
            + self.blocks * crate::arena::LEASE_BYTES
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
        assert_eq!(g.arena_words(), 16);
        assert_eq!(g.blocks(), 16);
        assert_eq!(g.block_words(), 1);
        assert_eq!(g.max_payload(), 15 * 8);
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
            assert!(g.arena_bytes() >= MIN_BYTES && g.arena_bytes() <= MAX_BYTES);
        }
    }

    #[test]
    fn large_arenas_have_at_most_64_blocks() {
        let g = Config::default().bytes(1 << 20).geometry().unwrap();
        assert_eq!(g.blocks(), 64);
        assert_eq!(g.block_words(), (1 << 17) / 64);
    }
}
