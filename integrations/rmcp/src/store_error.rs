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
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::RandomSource(error) => write!(f, "cannot draw a stream key: {error}"),
            Self::Ring(error) => write!(f, "the stream's ring did not take the event: {error}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::RandomSource(error) => Some(error),
            Self::Ring(error) => Some(error),
        }
    }
}
