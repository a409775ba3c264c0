//! Session IDs: 128 bits from the operating system's CSPRNG, printed as 32
//! lowercase hex digits.

use std::fmt;
use std::str::FromStr;

/// An unguessable, never-reused session identifier.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionId([u8; 16]);

impl SessionId {
    /// A fresh ID from the OS CSPRNG.
    ///
    /// # Errors
    /// The OS random source failed (the server answers 500 rather than issue
    /// a guessable ID).
    pub fn random() -> Result<Self, getrandom::Error> {
        Ok(Self(random_bytes()?))
    }
}

/// 16 bytes from the OS CSPRNG (session IDs and upgrade tickets).
pub(crate) fn random_bytes() -> Result<[u8; 16], getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(bytes)
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({self})")
    }
}

impl FromStr for SessionId {
    type Err = gapless::session::ParseTicketError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        gapless::session::parse_hex128(text).map(Self)
    }
}
