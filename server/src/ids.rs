//! Session IDs: 128 bits from the operating system's CSPRNG, printed as 32
//! lowercase hex digits ([`gapless::id::Id`]).

use gapless::id::{Id, Kind};
use gapless_history::LogId;

/// Marks an [`Id`] as a [`SessionId`].
#[derive(Debug)]
pub enum SessionKind {}

impl Kind for SessionKind {
    const NAME: &'static str = "SessionId";
}

/// An unguessable, never-reused identifier of one session.
///
/// [`SessionId::random`] draws it from the OS CSPRNG and fails if that
/// source does (a caller answers with an error rather than use a guessable
/// ID). `Debug` prints only its tag. With `--redis`, the session's log in
/// the shared history has the same bytes ([`log_of`]).
pub type SessionId = Id<SessionKind>;

/// Marks an [`Id`] as a [`PublishKey`].
#[derive(Debug)]
pub enum PublishKeyKind {}

impl Kind for PublishKeyKind {
    const NAME: &'static str = "PublishKey";
}

/// The write capability of one session (`serve --publish-keys`), kept
/// beside the session in the shared history (its meta field `pk`), and
/// presented as `Authorization: Bearer <key>` (`extract::PresentedKey`).
pub type PublishKey = Id<PublishKeyKind>;

/// The log of session `id` in the shared history: the same bytes, so the
/// same Redis keys on every instance.
pub(crate) fn log_of(id: &SessionId) -> LogId {
    LogId::from_bytes(id.to_bytes())
}

/// Whether two keys are equal, in time independent of where they differ
/// (a key compared byte by byte with an early exit leaks, by timing, how
/// much of a guess was right).
pub(crate) fn same_key(a: &PublishKey, b: &PublishKey) -> bool {
    let difference = a
        .to_bytes()
        .iter()
        .zip(b.to_bytes())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}
