//! The wire form of an event ID: `<epoch as 16 lowercase hex>-<seq>`.

use std::fmt;
use std::str::FromStr;

/// Longest valid text: 16 hex digits, a dash, 20 decimal digits.
pub const MAX_EVENT_ID_LEN: usize = 16 + 1 + 20;

/// An event's identity on the wire: the ring's epoch and the event's seq.
///
/// The text form is `<epoch as 16 lowercase hex digits>-<seq in decimal>`,
/// e.g. `00c0ffee12345678-42`. Seq 0 means "processed nothing". Parsing is
/// strict: exactly that shape, no signs, spaces, leading zeros, upper case,
/// overflow or other bytes, so every accepted string prints back the same.
///
/// ```
/// use gapless::EventId;
/// let id: EventId = "00c0ffee12345678-42".parse()?;
/// assert_eq!(id, EventId { epoch: 0x00c0_ffee_1234_5678, seq: 42 });
/// assert_eq!(id.to_string(), "00c0ffee12345678-42");
/// assert!("00C0FFEE12345678-42".parse::<EventId>().is_err());
/// # Ok::<(), gapless::error::ParseEventIdError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId {
    /// The ring's epoch.
    pub epoch: u64,
    /// The event's seq.
    pub seq: u64,
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}-{}", self.epoch, self.seq)
    }
}

/// Why a string is not an [`EventId`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ParseEventIdError {
    /// Longer than [`MAX_EVENT_ID_LEN`] bytes.
    TooLong {
        /// The input's length in bytes.
        len: usize,
    },
    /// No `-` after 16 hex digits.
    MissingDash,
    /// The epoch is not 16 lowercase hex digits.
    BadEpoch,
    /// The seq is not a decimal number without sign or leading zeros.
    BadSeq,
    /// The seq does not fit in 64 bits.
    SeqOverflow,
}

impl fmt::Display for ParseEventIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong { len } => write!(
                f,
                "event ID is {len} bytes long; at most {MAX_EVENT_ID_LEN} are allowed"
            ),
            Self::MissingDash => f.write_str("event ID needs a '-' after its 16-digit epoch"),
            Self::BadEpoch => f.write_str("event ID epoch must be exactly 16 lowercase hex digits"),
            Self::BadSeq => {
                f.write_str("event ID seq must be a decimal number without sign or leading zeros")
            }
            Self::SeqOverflow => f.write_str("event ID seq does not fit in 64 bits"),
        }
    }
}

impl std::error::Error for ParseEventIdError {}

impl FromStr for EventId {
    type Err = ParseEventIdError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text.as_bytes())
    }
}

impl EventId {
    /// Parses the wire form from raw bytes (a header value, say).
    ///
    /// # Errors
    /// [`ParseEventIdError`] for anything but the exact form.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseEventIdError> {
        if bytes.len() > MAX_EVENT_ID_LEN {
            return Err(ParseEventIdError::TooLong { len: bytes.len() });
        }
        let (epoch, rest) = match bytes.split_at_checked(16) {
            Some(parts) => parts,
            None => {
                return Err(if bytes.iter().all(u8::is_ascii_hexdigit) {
                    ParseEventIdError::MissingDash
                } else {
                    ParseEventIdError::BadEpoch
                })
            }
        };
        let mut epoch_value = 0u64;
        for &digit in epoch {
            let nibble = match digit {
                b'0'..=b'9' => digit - b'0',
                b'a'..=b'f' => digit - b'a' + 10,
                _ => return Err(ParseEventIdError::BadEpoch),
            };
            epoch_value = epoch_value << 4 | u64::from(nibble);
        }
        let seq = match rest.split_first() {
            Some((b'-', seq)) => seq,
            _ => return Err(ParseEventIdError::MissingDash),
        };
        if seq.is_empty() || (seq.len() > 1 && seq[0] == b'0') {
            return Err(ParseEventIdError::BadSeq);
        }
        let mut seq_value = 0u64;
        for &digit in seq {
            if !digit.is_ascii_digit() {
                return Err(ParseEventIdError::BadSeq);
            }
            seq_value = seq_value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(digit - b'0')))
                .ok_or(ParseEventIdError::SeqOverflow)?;
        }
        Ok(Self {
            epoch: epoch_value,
            seq: seq_value,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_exact_form_only() {
        let ok = |s: &str| s.parse::<EventId>();
        assert_eq!(ok("0000000000000001-0"), Ok(EventId { epoch: 1, seq: 0 }));
        assert_eq!(
            ok("ffffffffffffffff-18446744073709551615"),
            Ok(EventId {
                epoch: u64::MAX,
                seq: u64::MAX
            })
        );
        use ParseEventIdError::*;
        for (input, error) in [
            ("", MissingDash),
            ("0000000000000001", MissingDash),
            ("0000000000000001-", BadSeq),
            ("0000000000000001-01", BadSeq),
            ("0000000000000001-+1", BadSeq),
            ("0000000000000001- 1", BadSeq),
            ("0000000000000001-1 ", BadSeq),
            ("000000000000000A-1", BadEpoch),
            ("000000000000001-1", BadEpoch),
            (" 000000000000001-1", BadEpoch),
            ("00000000000000011-1", MissingDash),
            ("0000000000000001-18446744073709551616", SeqOverflow),
            ("0000000000000001-99999999999999999999", SeqOverflow),
            (
                "0000000000000001-999999999999999999999",
                TooLong { len: 38 },
            ),
            ("0000000000000001-1é", BadSeq),
            ("é000000000000001-1", BadEpoch),
        ] {
            assert_eq!(ok(input), Err(error), "{input:?}");
        }
    }
}
