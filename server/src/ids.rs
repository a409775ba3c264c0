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

/// The one publish-key check of both wires: whether a write presenting
/// `presented` may go to a session or stream that holds `expected`. With a
/// key, only the same key (compared by [`same_key`]); without one (made
/// without `--publish-keys`), `keyless_open` says: a session stays open to
/// writes (`Entry::may_publish`), a stream is open unless the server now
/// requires keys (`handlers::streams`).
pub(crate) fn may_write(
    expected: Option<&PublishKey>,
    presented: Option<&PublishKey>,
    keyless_open: bool,
) -> bool {
    match (expected, presented) {
        (None, _) => keyless_open,
        (Some(expected), Some(presented)) => same_key(expected, presented),
        (Some(_), None) => false,
    }
}

/// Whether two keys are equal, in time independent of where they differ
/// (a key compared byte by byte with an early exit leaks, by timing, how
/// much of a guess was right).
fn same_key(a: &PublishKey, b: &PublishKey) -> bool {
    let difference = a
        .to_bytes()
        .iter()
        .zip(b.to_bytes())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}
