//! The ids the history keys its logs by: 128 bits from the operating
//! system's CSPRNG, printed as 32 lowercase hex digits
//! ([`gapless::id::Id`]).

use gapless::id::{Id, Kind};

/// Marks an [`Id`] as a [`SessionId`].
#[derive(Debug)]
pub enum SessionKind {}

impl Kind for SessionKind {
    const NAME: &'static str = "SessionId";
}

/// An unguessable, never-reused identifier of one log in the history: a
/// server session, or one rmcp stream of `gapless-rmcp`.
///
/// [`SessionId::random`] draws it from the OS CSPRNG and fails if that
/// source does (a caller answers with an error rather than use a guessable
/// ID). `Debug` prints only its tag.
pub type SessionId = Id<SessionKind>;

/// Marks an [`Id`] as a [`PublishKey`].
#[derive(Debug)]
pub enum PublishKeyKind {}

impl Kind for PublishKeyKind {
    const NAME: &'static str = "PublishKey";
}

/// The write capability of one server session (`serve --publish-keys`),
/// kept beside the session in the history.
pub type PublishKey = Id<PublishKeyKind>;
