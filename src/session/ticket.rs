//! Single-use upgrade tickets: 128 random bits, printed as hex.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// How long an upgrade ticket stays valid.
pub const TICKET_TTL: Duration = Duration::from_secs(30);

/// A single-use upgrade ticket: 128 bits, printed as 32 lowercase hex
/// digits. The caller draws it from a CSPRNG.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket(pub [u8; 16]);

impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Tickets are credentials: never print them whole in logs.
        write!(f, "Ticket({:02x}{:02x}…)", self.0[0], self.0[1])
    }
}

/// Why a string is not a [`Ticket`] (or a 128-bit hex session ID).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ParseTicketError;

impl fmt::Display for ParseTicketError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("expected exactly 32 lowercase hex digits")
    }
}

impl std::error::Error for ParseTicketError {}

/// Parses exactly 32 lowercase hex digits into 16 bytes.
pub fn parse_hex128(text: &str) -> Result<[u8; 16], ParseTicketError> {
    let bytes = text.as_bytes();
    if bytes.len() != 32 {
        return Err(ParseTicketError);
    }
    let nibble = |b: u8| match b {
        b'0'..=b'9' => Ok(b - b'0'),
        b'a'..=b'f' => Ok(b - b'a' + 10),
        _ => Err(ParseTicketError),
    };
    let mut out = [0u8; 16];
    for (byte, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Ok(out)
}

impl FromStr for Ticket {
    type Err = ParseTicketError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_hex128(text).map(Ticket)
    }
}
