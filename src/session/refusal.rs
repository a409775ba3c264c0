//! Why a resume, ack or upgrade was refused: the protocol's `409` codes
//! with their figures.

use std::fmt;

/// Why a resume, ack or upgrade was refused. Each variant is one `409`
/// code of the reference server's protocol ([`Refusal::code`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// The ring evicted events after the cursor (the evicted-gap case).
    GapNotCovered {
        /// The client's cursor.
        cursor: u64,
        /// The oldest seq still retained.
        first_retained: u64,
        /// The published watermark.
        published: u64,
        /// `first_retained - cursor - 1` events are gone.
        evicted: u64,
    },
    /// The cursor is beyond what this session was ever sent (the echoed-ID case:
    /// an echoed server ID).
    CursorAhead {
        /// The client's cursor.
        cursor: u64,
        /// The highest seq the session was sent.
        sent: u64,
        /// The published watermark.
        published: u64,
    },
    /// The cursor belongs to another incarnation of the stream.
    ForeignEpoch {
        /// The client's cursor (its seq).
        cursor: u64,
        /// The cursor's epoch.
        cursor_epoch: u64,
        /// This session's epoch.
        epoch: u64,
    },
    /// Strict mode: the cursor differs from the acked cursor.
    CursorMismatch {
        /// The client's cursor.
        cursor: u64,
        /// The session's acked cursor.
        acked: u64,
    },
    /// Another upgrade for this session is in flight.
    MigrationInProgress,
    /// The ticket is unknown, used, expired, or another session's.
    BadTicket,
    /// Drain-before-upgrade mode: the client must first drain the SSE stream
    /// up to `published` (an extension: only when the operator enables it).
    NotDrained {
        /// The client's cursor.
        cursor: u64,
        /// The published watermark the cursor must reach.
        published: u64,
    },
}

impl Refusal {
    /// The protocol's error code for this refusal.
    pub fn code(&self) -> &'static str {
        match self {
            Self::GapNotCovered { .. } => "gap_not_covered",
            Self::CursorAhead { .. } => "cursor_ahead",
            Self::ForeignEpoch { .. } => "foreign_epoch",
            Self::CursorMismatch { .. } => "cursor_mismatch",
            Self::MigrationInProgress => "migration_in_progress",
            Self::BadTicket => "bad_ticket",
            Self::NotDrained { .. } => "not_drained",
        }
    }
}

impl From<crate::Gap> for Refusal {
    /// The `gap_not_covered` refusal that reports `gap`: the one place a
    /// ring's gap becomes the protocol's figures.
    fn from(gap: crate::Gap) -> Self {
        Self::GapNotCovered {
            cursor: gap.cursor,
            first_retained: gap.first_retained,
            published: gap.published,
            evicted: gap.evicted,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::GapNotCovered {
                cursor,
                first_retained,
                published,
                evicted,
            } => write!(
                f,
                "{evicted} events after cursor {cursor} were evicted (oldest retained {first_retained}, published {published}); resume from an earlier transport state is impossible"
            ),
            Self::CursorAhead {
                cursor,
                sent,
                published,
            } => write!(
                f,
                "cursor {cursor} is beyond what this session was sent ({sent}, published {published}): send your last processed ID, not one the server echoed"
            ),
            Self::ForeignEpoch {
                cursor,
                cursor_epoch,
                epoch,
            } => write!(
                f,
                "cursor {cursor_epoch:016x}-{cursor} is from another incarnation of the stream (epoch {epoch:016x})"
            ),
            Self::CursorMismatch { cursor, acked } => write!(
                f,
                "strict mode: cursor {cursor} differs from the acked cursor {acked}"
            ),
            Self::MigrationInProgress => f.write_str("another upgrade for this session is in flight"),
            Self::BadTicket => f.write_str("the upgrade ticket is unknown, used, expired, or another session's"),
            Self::NotDrained { cursor, published } => write!(
                f,
                "drain mode: cursor {cursor} has not reached the published watermark {published}; drain the SSE stream first"
            ),
        }
    }
}

impl std::error::Error for Refusal {}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_gap_becomes_gap_not_covered_with_the_same_figures() {
        let ring = crate::Ring::new(crate::Config::default().events(2).bytes(64));
        for _ in 0..5 {
            ring.emit(b"x").unwrap();
        }
        let crate::Coverage::Gap(gap) = ring.coverage(1) else {
            panic!("cursor 1 of 5 on a 2-event ring is not covered");
        };
        assert_eq!(
            Refusal::from(gap),
            Refusal::GapNotCovered {
                cursor: 1,
                first_retained: 4,
                published: 5,
                evicted: 2,
            }
        );
        assert_eq!(Refusal::from(gap).code(), "gap_not_covered");
    }
}
