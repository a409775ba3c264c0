//! A replay as one copied run: every event's payload in one buffer, read
//! without a reference count per event.

use crate::event::Event;
use crate::slots::Location;
use bytes::Bytes;
use std::ops::Range;

/// The events after a cursor, as [`Ring::replay_batch`] copied them out:
/// one buffer holding every payload, and where each one lies in it.
///
/// [`Ring::replay_after`] returns a `Vec<Event>` whose payloads share one
/// allocation; each `Event` still holds its own reference to it, which
/// costs an atomic increment to make and one to drop per event. A
/// `Replay` hands the payloads out as borrowed slices instead: a server
/// that writes them to a socket (an SSE frame per event) pays for the copy
/// and nothing per event. [`Replay::into_events`] converts when owned
/// events are needed.
///
/// ```
/// use gapless::{Config, Ring};
/// let ring = Ring::new(Config::default().events(8).bytes(1024));
/// for payload in [&b"a"[..], b"bb", b"ccc"] {
///     ring.emit(payload)?;
/// }
/// let replay = ring.replay_batch(1, u64::MAX)?;
/// assert_eq!(replay.len(), 2);
/// let seen: Vec<(u64, &[u8])> = replay.iter().collect();
/// assert_eq!(seen, [(2, &b"bb"[..]), (3, &b"ccc"[..])]);
/// assert_eq!(replay.into_events(), ring.replay_after(1)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// [`Ring::replay_batch`]: crate::Ring::replay_batch
/// [`Ring::replay_after`]: crate::Ring::replay_after
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replay {
    /// The seq of the first record; `records[i]` is seq `first + i`.
    first: u64,
    /// The copied run of arena words, from the first record's position:
    /// every record in seq order, each starting on an 8-byte boundary and
    /// zero-padded to the next.
    bytes: Bytes,
    /// Where each record lay in the arena, in seq order, as validated:
    /// adjacent from the first, so record `i` is `bytes[(pos - first
    /// record's pos) * 8 ..][..len]`, within `bytes`.
    records: Vec<Location>,
}

impl Replay {
    /// A replay of the records at `locations` (validated: adjacent, the
    /// first at `locations[0].pos`), copied into `bytes`, the first being
    /// seq `first`.
    pub(crate) fn new(first: u64, bytes: Bytes, locations: Vec<Location>) -> Self {
        Self {
            first,
            bytes,
            records: locations,
        }
    }

    /// Where each record's payload lies in `bytes`, in seq order.
    fn spans(&self) -> impl ExactSizeIterator<Item = Range<usize>> + '_ {
        let start = self.start();
        self.records
            .iter()
            .map(move |location| Self::span(start, location))
    }

    /// The arena position of the first record (where `bytes` begins).
    fn start(&self) -> u64 {
        self.records.first().map_or(0, |location| location.pos)
    }

    /// Where the payload of the record at `location` lies in `bytes`, when
    /// `bytes` begins at arena position `start`.
    fn span(start: u64, location: &Location) -> Range<usize> {
        let offset = (location.pos.wrapping_sub(start) * 8) as usize;
        offset..offset + location.len as usize
    }

    /// The number of events.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The seqs replayed, `first ..= last`; `None` when empty.
    pub fn seqs(&self) -> Option<std::ops::RangeInclusive<u64>> {
        let count = self.records.len() as u64;
        (count > 0).then(|| self.first..=self.first + count - 1)
    }

    /// Each event's seq and payload, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (u64, &[u8])> + '_ {
        let first = self.first;
        self.spans().enumerate().map(move |(i, span)| {
            let payload = self.bytes.get(span).unwrap_or_default();
            (first + i as u64, payload)
        })
    }

    /// The payload of the `index`-th event (`0 .. len()`) as a `Bytes`
    /// sharing this replay's buffer (one reference count, no copy): for
    /// handing a large payload on, to a socket's write queue say, while
    /// [`Replay::iter`] serves the rest. `None` past the end.
    pub fn share(&self, index: usize) -> Option<Bytes> {
        let span = Self::span(self.start(), self.records.get(index)?);
        // Within `bytes` for a validated replay (the field's invariant);
        // checked rather than trusted, as `iter` does.
        (span.end <= self.bytes.len()).then(|| self.bytes.slice(span))
    }

    /// The events as owned [`Event`]s sharing this replay's buffer (one
    /// reference count each).
    pub fn into_events(self) -> Vec<Event> {
        (self.first..)
            .zip(self.spans())
            .map(|(seq, span)| Event {
                seq,
                payload: self.bytes.slice(span),
            })
            .collect()
    }
}
