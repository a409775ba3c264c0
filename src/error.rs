//! The engine's errors, in one place: what a ring reports instead of a
//! silent skip ([`ReplayError`], [`Coverage`], [`Gap`]), what an emit or a
//! read can fail with ([`EmitError`], [`ReadError`]), why a configuration
//! or a wire form is rejected, and that the OS random source failed to draw
//! an id.
//!
//! The ring's errors are defined here. The others are defined beside what
//! they reject and re-exported here: [`ConfigError`] in
//! [`config`](crate::config), next to the limits its messages name;
//! [`ParseEventIdError`] in [`event_id`](crate::event_id); [`SseError`] in
//! [`sse`](crate::sse); [`ParseIdError`] (also under its earlier name,
//! [`ParseTicketError`]) and [`RandomSourceError`] in [`id`](crate::id). The
//! session rules' answers, [`Refusal`](crate::session::Refusal) and
//! [`SilentGap`](crate::session::SilentGap), are in
//! [`session`](crate::session) with the rules that give them.
//!
//! The engine's modules import their errors from here, so this module
//! imports only modules that never import it back (`config`, `event_id`,
//! `id`, `sse`): no import cycle runs through it.
//!
//! The common ones are re-exported at the crate root.
//!
//! [`ReplayError`], [`Coverage`] and [`Gap`] are deliberately *not*
//! `#[non_exhaustive]`: they are the answer to "can this client resume?",
//! and a new kind of answer should break a `match` that handles every case
//! rather than fall into a wildcard that skips events. The other error
//! enums are `#[non_exhaustive]`: a new failure mode is a new variant.

use std::fmt;

pub use crate::config::ConfigError;
pub use crate::event_id::ParseEventIdError;
/// Why a string is not a [`Ticket`](crate::session::Ticket): the parse
/// error of every [`Id`](crate::id::Id), under its earlier name (also
/// [`gapless::session::ParseTicketError`](crate::session::ParseTicketError)).
pub use crate::id::ParseIdError as ParseTicketError;
pub use crate::id::{ParseIdError, RandomSourceError};
pub use crate::sse::SseError;

/// Events a cursor needs that the ring no longer holds.
///
/// `evicted = first_retained - cursor - 1`: the seqs `cursor + 1 ..
/// first_retained` are gone. `first_retained` is at most `published + 1`
/// (when nothing at or below `published` is left).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gap {
    /// The cursor the caller asked to resume after.
    pub cursor: u64,
    /// The oldest seq still retained: a replay could start here, no earlier.
    pub first_retained: u64,
    /// The published watermark when the gap was found.
    pub published: u64,
    /// How many seqs after `cursor` are gone.
    pub evicted: u64,
}

impl fmt::Display for Gap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} events after cursor {} are no longer retained (oldest retained {}, published {})",
            self.evicted, self.cursor, self.first_retained, self.published
        )
    }
}

/// Why [`Ring::replay_after`](crate::Ring::replay_after) returned no events.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplayError {
    /// Events after the cursor were evicted: a contiguous replay is
    /// impossible.
    Gap(Gap),
    /// The cursor is beyond the published watermark: it names events that
    /// were never published (an echoed or foreign cursor).
    Ahead {
        /// The cursor asked for.
        cursor: u64,
        /// The published watermark.
        published: u64,
    },
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Gap(gap) => gap.fmt(f),
            Self::Ahead { cursor, published } => write!(
                f,
                "cursor {cursor} is ahead of the published watermark {published}"
            ),
        }
    }
}

impl std::error::Error for ReplayError {}

/// What [`Ring::coverage`](crate::Ring::coverage) found, without copying.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Coverage {
    /// Every event `first ..= last` is retained; `first = cursor + 1`,
    /// `last = published`. Nothing to replay when `first > last`.
    Covered {
        /// `cursor + 1`.
        first: u64,
        /// The published watermark.
        last: u64,
    },
    /// Events after the cursor are gone.
    Gap(Gap),
    /// The cursor is beyond the published watermark.
    Ahead {
        /// The cursor asked for.
        cursor: u64,
        /// The published watermark.
        published: u64,
    },
}

impl Coverage {
    /// Whether a replay from this cursor would succeed.
    pub fn is_covered(&self) -> bool {
        matches!(self, Self::Covered { .. })
    }

    /// The coverage of `cursor` by a log that retains every seq
    /// `first_retained ..= published` (`first_retained = published + 1`
    /// when it retains none): the one rule every copy of a ring's history
    /// (a Redis history read, a store's window) answers a cursor by, with
    /// the same figures [`Ring::coverage`](crate::Ring::coverage) gives.
    ///
    /// ```
    /// use gapless::{Coverage, Gap};
    /// assert_eq!(Coverage::of_retained(4, 5, 9), Coverage::Covered { first: 5, last: 9 });
    /// assert_eq!(
    ///     Coverage::of_retained(2, 5, 9),
    ///     Coverage::Gap(Gap { cursor: 2, first_retained: 5, published: 9, evicted: 2 })
    /// );
    /// assert_eq!(Coverage::of_retained(10, 5, 9), Coverage::Ahead { cursor: 10, published: 9 });
    /// ```
    pub fn of_retained(cursor: u64, first_retained: u64, published: u64) -> Self {
        if cursor > published {
            return Self::Ahead { cursor, published };
        }
        let first_retained = first_retained.min(published.saturating_add(1));
        if cursor.saturating_add(1) < first_retained {
            return Self::Gap(Gap {
                cursor,
                first_retained,
                published,
                evicted: first_retained - cursor - 1,
            });
        }
        Self::Covered {
            first: cursor + 1,
            last: published,
        }
    }
}

/// Why [`Ring::emit`](crate::Ring::emit) did not store an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EmitError {
    /// The payload is larger than the ring can hold. No seq was consumed.
    TooLarge {
        /// The payload's length in bytes.
        len: usize,
        /// The largest payload this ring accepts.
        max: usize,
    },
    /// A batch larger than the ring's window, in events or in bytes, or
    /// than [`MAX_BATCH`](crate::config::MAX_BATCH). Nothing was emitted.
    BatchTooLarge {
        /// Events in the batch.
        events: usize,
        /// The batch's payload bytes, each padded to 8.
        bytes: u64,
        /// The most events one batch may hold on this ring.
        max_events: usize,
        /// The most padded bytes one batch may hold on this ring.
        max_bytes: u64,
    },
}

impl fmt::Display for EmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLarge { len, max } => write!(
                f,
                "payload of {len} bytes is larger than the ring can hold ({max} bytes)"
            ),
            Self::BatchTooLarge {
                events,
                bytes,
                max_events,
                max_bytes,
            } => write!(
                f,
                "a batch of {events} events and {bytes} bytes is larger than the ring takes at once ({max_events} events, {max_bytes} bytes)"
            ),
        }
    }
}

impl std::error::Error for EmitError {}

/// Why [`Ring::read`](crate::Ring::read) returned no event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReadError {
    /// Seq 0 names no event ("nothing yet").
    Zero,
    /// The seq is beyond the published watermark.
    Ahead {
        /// The seq asked for.
        seq: u64,
        /// The published watermark.
        published: u64,
    },
    /// The event was evicted or lost.
    Evicted {
        /// The seq asked for.
        seq: u64,
        /// The oldest seq still retained.
        first_retained: u64,
    },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Zero => f.write_str("seq 0 names no event"),
            Self::Ahead { seq, published } => {
                write!(
                    f,
                    "seq {seq} is ahead of the published watermark {published}"
                )
            }
            Self::Evicted {
                seq,
                first_retained,
            } => write!(
                f,
                "seq {seq} is no longer retained (oldest retained {first_retained})"
            ),
        }
    }
}

impl std::error::Error for ReadError {}
