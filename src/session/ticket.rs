//! Single-use upgrade tickets: 128 random bits, printed as hex.

use crate::id::{Id, Kind};
use std::time::Duration;

/// How long an upgrade ticket stays valid.
pub const TICKET_TTL: Duration = Duration::from_secs(30);

/// Marks an [`Id`] as an upgrade [`Ticket`].
#[derive(Debug)]
pub enum TicketKind {}

impl Kind for TicketKind {
    const NAME: &'static str = "Ticket";
}

/// A single-use upgrade ticket: 128 bits, printed as 32 lowercase hex
/// digits. The caller draws it with [`Ticket::random`] (the OS CSPRNG);
/// `Debug` prints only its tag.
pub type Ticket = Id<TicketKind>;

/// Why a string is not a [`Ticket`] (or a 128-bit hex session ID): the
/// parse error of every [`Id`], under its earlier name.
pub use crate::id::ParseIdError as ParseTicketError;

/// Parses exactly 32 lowercase hex digits into 16 bytes: the grammar of
/// every [`Id`] (`text.parse::<Ticket>()` and [`Id::to_bytes`] do the
/// same).
///
/// # Errors
/// [`ParseTicketError`] unless `text` is exactly 32 lowercase hex digits.
pub fn parse_hex128(text: &str) -> Result<[u8; 16], ParseTicketError> {
    crate::id::parse_hex128(text)
}
