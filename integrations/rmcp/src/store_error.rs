//! [`StoreError`]: why a store into a stream's ring stored nothing (the
//! local store's error, which the shared store's wraps).

use gapless::id::RandomSourceError;
use gapless::EmitError;

/// Why [`GaplessEventStore::store`](crate::GaplessEventStore::store) stored nothing.
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// The operating system's random source failed to draw a new stream's
    /// key.
    RandomSource(RandomSourceError),
    /// The stream's ring refused the event for another reason than its
    /// size (a message too large is stored as a placeholder): one of
    /// gapless's emit errors this store does not expect.
    Ring(EmitError),
    /// The stream's ring gave an event leaving the stream's window another
    /// seq than the one handed out for it: the stream cannot go on under
    /// the ids already handed out, and the store frees it (a resume then
    /// gets `foreign_cursor`).
    OutOfStep {
        /// The seq handed out.
        expected: u64,
        /// The seq the ring gave.
        got: u64,
    },
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::RandomSource(error) => write!(f, "cannot draw a stream key: {error}"),
            Self::Ring(error) => write!(f, "the stream's ring did not take the event: {error}"),
            Self::OutOfStep { expected, got } => write!(
                f,
                "the stream's ring gave event {expected} seq {got}: the stream cannot go on under the ids handed out"
            ),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::RandomSource(error) => Some(error),
            Self::Ring(error) => Some(error),
            Self::OutOfStep { .. } => None,
        }
    }
}
