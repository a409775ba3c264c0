//! Reading a ring: wait-free replays, O(1) coverage checks and the gap
//! figures, all validated against the claim word decoded between two reads
//! of the watermark and the end floor, `(P1, F1)` and `(P2, F2)` (see
//! [`Ring::claimed_since`]). With `H` seqs and `T` words claimed, record
//! `s` at word `pos` is intact iff
//!
//! ```text
//! s   > H - events        or  P2 <  s + reserve_events  (its slot), and
//! pos >= T - arena_words  or  F2 <= pos + reserve_words (its words).
//! ```
//!
//! Why that is sound, and why checking the first record of a replay checks
//! all of it: [`docs::protocol`](crate::docs::protocol#replay-and-validation).

use crate::error::{Coverage, Gap, ReadError, ReplayError};
use crate::event::Event;
use crate::replay::Replay;
use crate::ring::{EmitMode, Ring, Validation};
use crate::slots::Location;
use bytes::Bytes;

/// A ring's retention, as one bracketed read saw it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Retention {
    /// Seqs claimed (the watermark if the decode failed).
    pub(crate) claimed: u64,
    /// The watermark.
    pub(crate) published: u64,
    /// The oldest retained seq, `published + 1` when none is. A lower bound
    /// when emitters overtook the read by a whole ring.
    pub(crate) first_retained: u64,
}

impl<M: EmitMode> Ring<M> {
    /// Whether record `seq` at `location` is intact under `validation`.
    fn intact(&self, seq: u64, location: Location, validation: Validation) -> bool {
        let claimed = validation.claimed;
        let reserve_events = self.geometry.reserve_slots() as u64;
        let reserve_words = self.geometry.reserve_arena_words() as u64;
        let slot = seq.wrapping_add(self.slots.len()) > claimed.seqs
            || validation.published < seq.wrapping_add(reserve_events);
        let words = location.pos.wrapping_add(self.arena.len()) >= claimed.words
            || validation.floor <= location.pos.wrapping_add(reserve_words);
        seq > self.base && slot && words && location.pos <= claimed.words
    }

    /// Whether a replay after `cursor` would succeed now, without copying:
    /// O(1) whatever the gap. A [`Coverage::Gap`] carries the same figures
    /// a replay would report.
    pub fn coverage(&self, cursor: u64) -> Coverage {
        let opened = self.open();
        let published = opened.published;
        if cursor > published {
            return Coverage::Ahead { cursor, published };
        }
        if cursor < published {
            let location = self.slots.locate(cursor + 1);
            let covered = self
                .claimed_since(opened)
                .is_some_and(|validation| self.intact(cursor + 1, location, validation));
            if !covered {
                return Coverage::Gap(self.gap(cursor));
            }
        }
        Coverage::Covered {
            first: cursor + 1,
            last: published,
        }
    }

    /// Every event after `cursor` up to the published watermark, in order.
    ///
    /// Wait-free: one pass over at most `events` slots, one copy of at most
    /// the arena, one validation. A copy that was overwritten while it was
    /// read makes the whole replay a [`ReplayError::Gap`], never torn bytes.
    /// `replay_after(0)` on a fresh ring is `Ok([])`. The events share one
    /// allocation.
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
        self.replay_batch(cursor, last).map(Replay::into_events)
    }

    /// The events `cursor + 1 ..= min(last, published())` as one
    /// [`Replay`]: the same copy and validation as [`Ring::replay_range`],
    /// with the payloads borrowed from one buffer instead of an owned
    /// `Bytes` (and its reference count) per event. `u64::MAX` as `last`
    /// replays everything after `cursor`.
    ///
    /// # Errors
    /// As [`Ring::replay_range`].
    pub fn replay_batch(&self, cursor: u64, last: u64) -> Result<Replay, ReplayError> {
        let mut bytes = Vec::new();
        Ok(match self.copy_batch(cursor, last, &mut bytes)? {
            Some(locations) => Replay::new(cursor + 1, Bytes::from(bytes), locations),
            None => Replay::default(),
        })
    }

    /// [`Ring::replay_batch`] into a buffer the caller gives: the records
    /// are copied into `buffer`'s `Vec` (its contents replaced, its
    /// capacity reused), and the [`Replay`] keeps `buffer` until the replay
    /// and every `Bytes` shared from it ([`Replay::share`]) are dropped. A
    /// server that recycles its buffers (a pool whose `buffer` type puts
    /// the `Vec` back on drop) then allocates and faults in nothing per
    /// read once warm. `buffer` is dropped at once on an error or an empty
    /// replay.
    ///
    /// ```
    /// use gapless::{Config, Ring};
    /// let ring = Ring::new(Config::default().events(8).bytes(1024));
    /// ring.emit(&b"hello"[..])?;
    /// let replay = ring.replay_batch_in(0, u64::MAX, Vec::with_capacity(4096))?;
    /// assert_eq!(replay.share(0).as_deref(), Some(&b"hello"[..]));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`Ring::replay_range`].
    pub fn replay_batch_in<B>(
        &self,
        cursor: u64,
        last: u64,
        mut buffer: B,
    ) -> Result<Replay, ReplayError>
    where
        B: AsRef<[u8]> + AsMut<Vec<u8>> + Send + 'static,
    {
        Ok(match self.copy_batch(cursor, last, buffer.as_mut())? {
            Some(locations) => Replay::new(cursor + 1, Bytes::from_owner(buffer), locations),
            None => Replay::default(),
        })
    }

    /// Copies the records `cursor + 1 ..= min(last, published())` into
    /// `bytes` and validates them: their locations, `None` when there are
    /// none.
    fn copy_batch(
        &self,
        cursor: u64,
        last: u64,
        bytes: &mut Vec<u8>,
    ) -> Result<Option<Vec<Location>>, ReplayError> {
        let opened = self.open();
        let published = opened.published;
        if cursor > published {
            return Err(ReplayError::Ahead { cursor, published });
        }
        let last = last.min(published);
        if cursor >= last {
            return Ok(None);
        }
        let count = last - cursor;
        if count > self.slots.len() {
            // More than a ring of events: the first is certainly gone.
            return Err(ReplayError::Gap(self.gap(cursor)));
        }
        let locations: Vec<Location> = (cursor + 1..=last).map(|s| self.slots.locate(s)).collect();
        let (start, end) = (locations[0].pos, locations[locations.len() - 1].end());
        // Records of consecutive seqs are adjacent; anything else means a
        // slot was reused under us, which the validation below reports.
        let adjacent = locations.windows(2).all(|w| w[0].end() == w[1].pos);
        let words = end.wrapping_sub(start);
        if adjacent && words <= self.arena.len() {
            self.arena.copy_words_into(start, words as usize, bytes);
        }
        let valid = adjacent
            && words <= self.arena.len()
            && self
                .claimed_since(opened)
                .is_some_and(|validation| self.intact(cursor + 1, locations[0], validation));
        if !valid {
            return Err(ReplayError::Gap(self.gap(cursor)));
        }
        // Valid: the locations are the records', adjacent from `start`, so
        // each lies within the `words` copied.
        Ok(Some(locations))
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

    /// The gap after `cursor`, which the caller found evicted
    /// (`cursor < published`).
    fn gap(&self, cursor: u64) -> Gap {
        let retention = self.retention();
        let published = retention.published;
        // The caller saw `cursor + 1` gone, and eviction only grows.
        let first_retained = retention.first_retained.max(cursor + 2).min(published + 1);
        Gap {
            cursor,
            first_retained,
            published,
            evicted: first_retained - cursor - 1,
        }
    }

    /// The oldest retained seq, by binary search over the slots against one
    /// decoded claim, checked against a second: O(log events). Emitters that
    /// overtake the search by a whole ring make it try again, at most
    /// `ATTEMPTS` times, then settle for a lower bound.
    pub(crate) fn retention(&self) -> Retention {
        self.retention_from(0)
    }

    /// [`Ring::retention`] with the search starting at `from`, a seq known
    /// to be at or below the oldest retained (0 for none known): upwards
    /// from it in steps that double, then by halves within the last step.
    pub(crate) fn retention_from(&self, from: u64) -> Retention {
        const ATTEMPTS: usize = 3;
        let mut published = 0;
        for _ in 0..ATTEMPTS {
            match self.try_retention(from) {
                Ok(retention) => return retention,
                Err(seen) => published = published.max(seen),
            }
        }
        self.retention_lower_bound(published)
    }

    /// One attempt of [`Ring::retention_from`]; `Err` carries the
    /// watermark seen when emitters overtook it.
    fn try_retention(&self, from: u64) -> Result<Retention, u64> {
        let opened = self.open();
        let published = opened.published;
        let events = self.slots.len();
        let before = self.claimed_since(opened).ok_or(published)?;
        // Seqs below the claimed seqs' ring and the watermark's reserve are
        // gone; search the rest.
        let reserve_events = self.geometry.reserve_slots() as u64;
        let gone = |v: Validation| {
            (v.claimed.seqs + 1)
                .saturating_sub(events)
                .min((v.published + 1).saturating_sub(reserve_events))
        };
        let mut low = gone(before).max(self.base + 1);
        let mut high = published + 1;
        if from > low {
            // Gallop from the hint: the first intact seq in `from ..` lies
            // within the first step that lands on an intact one.
            low = from.min(high);
            let mut step = 1;
            while low < high {
                let probe = (low + step - 1).min(high - 1);
                if self.intact(probe, self.slots.locate(probe), before) {
                    high = probe;
                    break;
                }
                low = probe + 1;
                step *= 2;
            }
        }
        while low < high {
            let middle = low + (high - low) / 2;
            let location = self.slots.locate(middle);
            if self.intact(middle, location, before) {
                high = middle;
            } else {
                low = middle + 1;
            }
        }
        let found = low;
        let location = (found <= published).then(|| self.slots.locate(found));
        let after = self.claimed_since(opened).ok_or(published)?;
        let first_retained = match location {
            None => published + 1,
            Some(location) if self.intact(found, location, after) => found,
            // Overwritten (or torn) during the search: everything up to it
            // is gone too, and so is every seq whose slot was claimed again.
            Some(_) => (found + 1).max(gone(after)).min(published + 1),
        };
        Ok(Retention {
            claimed: after.claimed.seqs,
            published,
            first_retained,
        })
    }

    /// Retention when the claim word could not be decoded because emitters
    /// overtook the read by a ring: seqs a ring below the re-read watermark
    /// are certainly gone; report that lower bound.
    fn retention_lower_bound(&self, published_before: u64) -> Retention {
        let published = self.published().max(published_before);
        Retention {
            claimed: published,
            published,
            first_retained: (published + 1)
                .saturating_sub(self.slots.len())
                .max(self.base + 1),
        }
    }
}
