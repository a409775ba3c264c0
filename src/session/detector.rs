//! The client side: a detector that no event passes after a hole.

use crate::event_id::EventId;
use std::fmt;

/// What a client saw that it must not accept silently.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SilentGap {
    /// An event arrived after a hole: `expected` was never delivered.
    Hole {
        /// The seq that should have come.
        expected: u64,
        /// The seq that came.
        got: u64,
    },
    /// An event arrived again or out of order.
    Backwards {
        /// The seq that should have come.
        expected: u64,
        /// The seq that came.
        got: u64,
    },
    /// An event from another incarnation of the stream.
    ForeignEpoch {
        /// The epoch the client follows.
        expected: u64,
        /// The epoch that came.
        got: u64,
    },
}

impl fmt::Display for SilentGap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Hole { expected, got } => {
                write!(f, "silent gap: expected seq {expected}, got {got}")
            }
            Self::Backwards { expected, got } => {
                write!(
                    f,
                    "duplicate or reordered event: expected seq {expected}, got {got}"
                )
            }
            Self::ForeignEpoch { expected, got } => {
                write!(f, "event from epoch {got:016x}, following {expected:016x}")
            }
        }
    }
}

impl std::error::Error for SilentGap {}

/// Client side: asserts that every event received is `last + 1`, across
/// reconnects and migrations, so a hole can never pass unnoticed.
///
/// ```
/// use gapless::session::{GapDetector, SilentGap};
/// use gapless::EventId;
/// let mut detector = GapDetector::new(0xab, 10);
/// detector.observe(EventId { epoch: 0xab, seq: 11 })?;
/// // Migrating with the true cursor: the first frame must be 12.
/// assert_eq!(detector.cursor().seq, 11);
/// assert_eq!(
///     detector.observe(EventId { epoch: 0xab, seq: 14 }),
///     Err(SilentGap::Hole { expected: 12, got: 14 })
/// );
/// # Ok::<(), SilentGap>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GapDetector {
    epoch: u64,
    /// The last seq processed.
    last: u64,
    /// Events accepted.
    received: u64,
    /// Seqs the server reported as gone (never silently).
    reported_lost: u64,
}

impl GapDetector {
    /// A detector for a stream of `epoch` whose last processed seq is
    /// `last` (0 for none).
    pub fn new(epoch: u64, last: u64) -> Self {
        Self {
            epoch,
            last,
            received: 0,
            reported_lost: 0,
        }
    }

    /// The client's true cursor: send this on resume and upgrade.
    pub fn cursor(&self) -> EventId {
        EventId {
            epoch: self.epoch,
            seq: self.last,
        }
    }

    /// Events accepted so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Seqs skipped because the server *reported* them gone.
    pub fn reported_lost(&self) -> u64 {
        self.reported_lost
    }

    /// Accepts `id` if it is exactly the next event.
    ///
    /// # Errors
    /// [`SilentGap`] for anything else; the detector is unchanged.
    pub fn observe(&mut self, id: EventId) -> Result<(), SilentGap> {
        if id.epoch != self.epoch {
            return Err(SilentGap::ForeignEpoch {
                expected: self.epoch,
                got: id.epoch,
            });
        }
        let expected = self.last + 1;
        if id.seq > expected {
            return Err(SilentGap::Hole {
                expected,
                got: id.seq,
            });
        }
        if id.seq < expected {
            return Err(SilentGap::Backwards {
                expected,
                got: id.seq,
            });
        }
        self.last = id.seq;
        self.received += 1;
        Ok(())
    }

    /// The server refused a resume with a gap (a 409 `gap_not_covered` or a
    /// `gap` event): the client accepts the loss explicitly and continues
    /// from `first_retained - 1`. Returns how many seqs were skipped.
    pub fn accept_reported_gap(&mut self, first_retained: u64) -> u64 {
        let skipped = first_retained.saturating_sub(self.last + 1);
        self.last = self.last.max(first_retained.saturating_sub(1));
        self.reported_lost += skipped;
        skipped
    }

    /// Follows a new incarnation of the stream (the server re-created the
    /// session): starts over from seq 0 of `epoch`.
    pub fn restart(&mut self, epoch: u64) {
        self.epoch = epoch;
        self.last = 0;
    }
}
