//! Session IDs: 128 bits from the operating system's CSPRNG, printed as 32
//! lowercase hex digits ([`gapless::id::Id`]).

use gapless::id::{Id, Kind};

/// Marks an [`Id`] as a [`SessionId`].
#[derive(Debug)]
pub enum SessionKind {}

impl Kind for SessionKind {
    const NAME: &'static str = "SessionId";
}

/// An unguessable, never-reused session identifier.
///
/// [`SessionId::random`] draws it from the OS CSPRNG and fails if that
/// source does (the server answers 500 rather than issue a guessable ID).
/// `Debug` prints only its tag.
pub type SessionId = Id<SessionKind>;
