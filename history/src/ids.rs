//! The id the history keys its logs by: 128 bits from the operating
//! system's CSPRNG, printed as 32 lowercase hex digits
//! ([`gapless::id::Id`]). What a log is to its caller (a server session,
//! an rmcp stream, a Durable Streams stream) is the caller's: an id of its
//! own kind becomes a [`LogId`] with the same bytes
//! (`LogId::from_bytes(id.to_bytes())`).

use gapless::id::{Id, Kind};

/// Marks an [`Id`] as a [`LogId`].
#[derive(Debug)]
pub enum LogKind {}

impl Kind for LogKind {
    const NAME: &'static str = "LogId";
}

/// An unguessable, never-reused identifier of one log in the history.
///
/// [`LogId::random`] draws it from the OS CSPRNG and fails if that source
/// does (a caller answers with an error rather than use a guessable ID).
/// `Debug` prints only its tag.
pub type LogId = Id<LogKind>;
