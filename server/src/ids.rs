//! Session IDs: 128 bits from the operating system's CSPRNG, printed as 32
//! lowercase hex digits ([`gapless::id::Id`]).

pub use gapless_history::ids::{PublishKey, PublishKeyKind, SessionId, SessionKind};

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
