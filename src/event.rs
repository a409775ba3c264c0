//! One retained event as a reader gets it.

use bytes::Bytes;

/// An event copied out of a ring: its seq and its payload.
///
/// The payload is an owned copy; a replay's payloads share one allocation.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Event {
    /// The event's seq: dense, starting at 1.
    pub seq: u64,
    /// The bytes given to `emit`.
    pub payload: Bytes,
}
