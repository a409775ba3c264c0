//! The event ids this store hands to rmcp, and their strict parser.
//!
//! Grammar (every byte ASCII, nothing else accepted):
//!
//! ```text
//! event-id = stream-key "." epoch "-" seq
//! stream-key = 32 lowercase hex digits      ; random, 128 bits, per rmcp stream
//! epoch      = 16 lowercase hex digits      ; the stream's ring epoch
//! seq        = "0" / nonzero-digit *digit   ; decimal, fits in u64, no leading zeros
//! ```
//!
//! e.g. `3f0c9a5e1d2b4c6a8e7f90123456789a.00c0ffee12345678-42`. The part after
//! the dot is exactly a [`gapless::EventId`].

use gapless::id::{Id, Kind};
use std::fmt;
use std::str::FromStr;

/// Length of a stream key in hex digits.
pub const STREAM_KEY_LEN: usize = 32;

/// Longest valid event id: a key, a dot and a [`gapless::EventId`].
pub const MAX_ID_LEN: usize = STREAM_KEY_LEN + 1 + gapless::event_id::MAX_EVENT_ID_LEN;

/// Marks a [`gapless::id::Id`] as a [`StreamKey`].
#[derive(Debug)]
pub enum StreamKeyKind {}

impl Kind for StreamKeyKind {
    const NAME: &'static str = "StreamKey";
}

/// A random 128-bit key naming one rmcp stream in event ids; printed as 32
/// lowercase hex digits, and in `Debug` only as its tag.
///
/// It is unguessable on purpose: rmcp hands a stateless `GET` with a
/// `Last-Event-ID` straight to the store, with no session check, so knowing
/// a key is what entitles a client to a stream's events. `StreamKey::random`
/// draws it from the operating system's random source, and if that source
/// fails it is an error (the store's `store_event` returns it), never a
/// weaker key.
pub type StreamKey = Id<StreamKeyKind>;

/// One event's id as this store writes it: its stream's key, the stream
/// ring's epoch and the event's seq.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StoreEventId {
    /// The rmcp stream's key.
    pub key: StreamKey,
    /// The ring's epoch and the event's seq.
    pub event: gapless::EventId,
}

impl fmt::Display for StoreEventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.key, self.event)
    }
}

/// Why a string is not a [`StoreEventId`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParseIdError {
    /// Longer than [`MAX_ID_LEN`] bytes.
    TooLong {
        /// The input's length in bytes.
        len: usize,
    },
    /// No `.` after the 32-digit stream key.
    MissingDot,
    /// The stream key is not 32 lowercase hex digits.
    BadKey,
    /// The part after the dot is not a [`gapless::EventId`].
    BadEvent(gapless::error::ParseEventIdError),
}

impl fmt::Display for ParseIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooLong { len } => {
                write!(
                    f,
                    "event id is {len} bytes long; at most {MAX_ID_LEN} are allowed"
                )
            }
            Self::MissingDot => f.write_str("event id needs a '.' after its 32-digit stream key"),
            Self::BadKey => f.write_str("event id stream key must be 32 lowercase hex digits"),
            Self::BadEvent(error) => write!(f, "event id after the stream key: {error}"),
        }
    }
}

impl std::error::Error for ParseIdError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::BadEvent(error) => Some(error),
            _ => None,
        }
    }
}

/// Stream keys drawn per read of the operating system's random source
/// ([`random_key`]).
const KEYS_PER_DRAW: usize = 16;

/// Random bytes read from the OS for the next keys of this thread.
struct KeyPool {
    bytes: [u8; 16 * KEYS_PER_DRAW],
    /// The next key's index; `KEYS_PER_DRAW` once every key is taken.
    next: usize,
}

thread_local! {
    static KEYS: std::cell::RefCell<KeyPool> = const {
        std::cell::RefCell::new(KeyPool {
            bytes: [0; 16 * KEYS_PER_DRAW],
            next: KEYS_PER_DRAW,
        })
    };
}

/// A new stream's key: 16 bytes from the operating system's random source,
/// as [`StreamKey::random`] draws them, read for [`KEYS_PER_DRAW`] keys at
/// once per thread (one system call per 16 streams instead of one each;
/// each key's bytes are wiped from the pool as it is taken).
///
/// # Errors
/// [`gapless::id::RandomSourceError`] if the OS random source fails: there
/// is no fallback to a weaker key.
pub(crate) fn random_key() -> Result<StreamKey, gapless::id::RandomSourceError> {
    let pooled = KEYS.with(|pool| {
        let mut pool = pool.try_borrow_mut().ok()?;
        if pool.next == KEYS_PER_DRAW {
            getrandom::fill(&mut pool.bytes).ok()?;
            pool.next = 0;
        }
        let at = pool.next * 16;
        let mut key = [0u8; 16];
        key.copy_from_slice(&pool.bytes[at..at + 16]);
        pool.bytes[at..at + 16].fill(0);
        pool.next += 1;
        Some(StreamKey::from_bytes(key))
    });
    match pooled {
        Some(key) => Ok(key),
        // The source failed (or the pool is in use): one key drawn on its
        // own, which reports the source's error if it fails again.
        None => StreamKey::random(),
    }
}

impl FromStr for StoreEventId {
    type Err = ParseIdError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bytes = text.as_bytes();
        if bytes.len() > MAX_ID_LEN {
            return Err(ParseIdError::TooLong { len: bytes.len() });
        }
        let Some(dot) = bytes.iter().position(|&b| b == b'.') else {
            return Err(ParseIdError::MissingDot);
        };
        let (key, rest) = (&bytes[..dot], &bytes[dot + 1..]);
        // `StreamKey`'s parser: exactly 32 lowercase hex digits. The key
        // ends before an ASCII `.`, so it is valid UTF-8.
        let key = std::str::from_utf8(key)
            .ok()
            .and_then(|key| key.parse::<StreamKey>().ok())
            .ok_or(ParseIdError::BadKey)?;
        let event = gapless::EventId::parse(rest).map_err(ParseIdError::BadEvent)?;
        Ok(Self { key, event })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gapless::{error::ParseEventIdError, EventId};

    const KEY: &str = "3f0c9a5e1d2b4c6a8e7f90123456789a";

    /// Keys taken from the pool across several draws are all distinct and
    /// none is the wiped (zero) key. Mutation: not advancing the pool's
    /// index hands out one key 16 times.
    #[test]
    fn pooled_keys_are_distinct_across_draws() {
        let keys: std::collections::HashSet<[u8; 16]> = (0..KEYS_PER_DRAW * 3 + 1)
            .map(|_| random_key().expect("the OS random source").to_bytes())
            .collect();
        assert_eq!(keys.len(), KEYS_PER_DRAW * 3 + 1);
        assert!(!keys.contains(&[0; 16]));
    }

    fn is_lower_hex(byte: u8) -> bool {
        byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte)
    }

    fn parse(text: &str) -> Result<StoreEventId, ParseIdError> {
        text.parse()
    }

    #[test]
    fn round_trips() {
        let id = StoreEventId {
            key: StreamKey::from_bytes(
                0x3f0c_9a5e_1d2b_4c6a_8e7f_9012_3456_789a_u128.to_be_bytes(),
            ),
            event: EventId {
                epoch: 0x00c0_ffee_1234_5678,
                seq: 42,
            },
        };
        let text = id.to_string();
        assert_eq!(text, format!("{KEY}.00c0ffee12345678-42"));
        assert_eq!(parse(&text), Ok(id));
        let max = StoreEventId {
            key: StreamKey::from_bytes([0xff; 16]),
            event: EventId {
                epoch: u64::MAX,
                seq: u64::MAX,
            },
        };
        assert_eq!(max.to_string().len(), MAX_ID_LEN);
        assert_eq!(parse(&max.to_string()), Ok(max));
        let zero = StoreEventId {
            key: StreamKey::from_bytes([0; 16]),
            event: EventId { epoch: 0, seq: 0 },
        };
        assert_eq!(parse(&zero.to_string()), Ok(zero));
    }

    #[test]
    fn rejects_wrong_key_lengths_and_case() {
        assert_eq!(
            parse(&format!("{}.00c0ffee12345678-42", &KEY[1..])),
            Err(ParseIdError::BadKey)
        );
        assert_eq!(
            parse(&format!("{KEY}0.00c0ffee12345678-42")),
            Err(ParseIdError::BadKey)
        );
        assert_eq!(parse(".00c0ffee12345678-42"), Err(ParseIdError::BadKey));
        let upper = KEY.to_uppercase();
        assert_eq!(
            parse(&format!("{upper}.00c0ffee12345678-42")),
            Err(ParseIdError::BadKey)
        );
        assert_eq!(
            parse(&format!("{}g.00c0ffee12345678-42", &KEY[1..])),
            Err(ParseIdError::BadKey)
        );
        assert_eq!(
            parse(&format!("+{}.00c0ffee12345678-42", &KEY[1..])),
            Err(ParseIdError::BadKey)
        );
    }

    #[test]
    fn rejects_missing_parts() {
        assert_eq!(parse(""), Err(ParseIdError::MissingDot));
        assert_eq!(parse(KEY), Err(ParseIdError::MissingDot));
        assert_eq!(
            parse(&format!("{KEY}00c0ffee12345678-42")),
            Err(ParseIdError::MissingDot)
        );
        assert_eq!(
            parse(&format!("{KEY}.")),
            Err(ParseIdError::BadEvent(ParseEventIdError::MissingDash))
        );
        assert_eq!(
            parse(&format!("{KEY}.00c0ffee12345678")),
            Err(ParseIdError::BadEvent(ParseEventIdError::MissingDash))
        );
        assert_eq!(
            parse(&format!("{KEY}.00c0ffee12345678-")),
            Err(ParseIdError::BadEvent(ParseEventIdError::BadSeq))
        );
        assert_eq!(
            parse(&format!("{KEY}.-42")),
            Err(ParseIdError::BadEvent(ParseEventIdError::BadEpoch))
        );
        // rmcp's own ids ("0/3", "3") and uuids are malformed here.
        assert_eq!(parse("0/3"), Err(ParseIdError::MissingDot));
        assert_eq!(parse("3"), Err(ParseIdError::MissingDot));
        assert_eq!(parse("1.00c0ffee12345678-42"), Err(ParseIdError::BadKey));
        assert_eq!(
            parse("c8f5a2a0-2b0e-4b8e-9d7e-1f2a3b4c5d6e"),
            Err(ParseIdError::MissingDot)
        );
    }

    #[test]
    fn rejects_bad_epochs_and_seqs() {
        assert_eq!(
            parse(&format!("{KEY}.00C0FFEE12345678-42")),
            Err(ParseIdError::BadEvent(ParseEventIdError::BadEpoch))
        );
        assert_eq!(
            parse(&format!("{KEY}.0c0ffee12345678-42")),
            Err(ParseIdError::BadEvent(ParseEventIdError::BadEpoch))
        );
        assert_eq!(
            parse(&format!("{KEY}.00c0ffee12345678-042")),
            Err(ParseIdError::BadEvent(ParseEventIdError::BadSeq))
        );
        assert_eq!(
            parse(&format!("{KEY}.00c0ffee12345678-+1")),
            Err(ParseIdError::BadEvent(ParseEventIdError::BadSeq))
        );
        assert_eq!(
            parse(&format!("{KEY}.00c0ffee12345678-18446744073709551616")),
            Err(ParseIdError::BadEvent(ParseEventIdError::SeqOverflow))
        );
        assert_eq!(
            parse(&format!("{KEY}.00c0ffee12345678-18446744073709551615")).map(|id| id.event.seq),
            Ok(u64::MAX)
        );
        assert_eq!(
            parse(&format!("{KEY}.00c0ffee12345678.42")),
            Err(ParseIdError::BadEvent(ParseEventIdError::MissingDash))
        );
    }

    #[test]
    fn rejects_too_long_and_non_ascii() {
        let long = format!("{KEY}.00c0ffee12345678-184467440737095516150");
        assert_eq!(
            parse(&long),
            Err(ParseIdError::TooLong {
                len: MAX_ID_LEN + 1
            })
        );
        assert!(parse(&format!("{KEY}.00c0ffee12345678-4é")).is_err());
        assert!(parse(&format!("{}é.00c0ffee12345678-4", &KEY[2..])).is_err());
    }

    #[test]
    fn errors_display() {
        for error in [
            ParseIdError::TooLong { len: 99 },
            ParseIdError::MissingDot,
            ParseIdError::BadKey,
            ParseIdError::BadEvent(ParseEventIdError::SeqOverflow),
        ] {
            assert!(!error.to_string().is_empty());
        }
        assert!(ParseIdError::TooLong { len: 99 }.to_string().contains("99"));
    }

    #[test]
    fn random_keys_differ_and_print_32_lowercase_hex() {
        let a = StreamKey::random().expect("the OS random source");
        let b = StreamKey::random().expect("the OS random source");
        assert_ne!(a, b);
        let text = a.to_string();
        assert_eq!(text.len(), STREAM_KEY_LEN);
        assert!(text.bytes().all(is_lower_hex));
        // Keys are credentials: `Debug` (also of an event id) is redacted.
        let id = StoreEventId {
            key: a,
            event: EventId { epoch: 1, seq: 2 },
        };
        assert!(!format!("{id:?}").contains(&text));
    }
}
