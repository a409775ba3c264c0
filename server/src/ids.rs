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

/// Marks an [`Id`] as a [`PublishKey`].
#[derive(Debug)]
pub enum PublishKeyKind {}

impl Kind for PublishKeyKind {
    const NAME: &'static str = "PublishKey";
}

/// With `--publish-keys`: the write capability of one session, returned
/// once by `POST /session` and presented in the [`PUBLISH_KEY_HEADER`] of
/// every emit and `DELETE`. The session ID alone then only reads.
pub type PublishKey = Id<PublishKeyKind>;

/// The request header that carries a [`PublishKey`] (defined with the wire
/// types, so the client sends what the server reads).
pub(crate) use gapless_client::wire::PUBLISH_KEY_HEADER;

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
