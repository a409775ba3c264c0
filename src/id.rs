//! 128-bit random identifiers: one type for every id that is also a
//! credential (upgrade tickets, session IDs, lease tokens, stream keys).
//!
//! An [`Id<K>`] is 16 bytes from the operating system's CSPRNG, printed as
//! exactly 32 lowercase hex digits and parsed back only from exactly that.
//! The marker `K` (a [`Kind`]) keeps ids of different kinds apart as types
//! while they share one implementation:
//!
//! ```
//! use gapless::id::{Id, Kind};
//!
//! /// Marks an order id.
//! pub enum OrderKind {}
//! impl Kind for OrderKind {
//!     const NAME: &'static str = "OrderId";
//! }
//! pub type OrderId = Id<OrderKind>;
//!
//! let id = OrderId::random()?;
//! let text = id.to_string();
//! assert_eq!(text.len(), 32);
//! assert_eq!(text.parse::<OrderId>(), Ok(id));
//! // Debug is redacted: the kind and a short tag, never the id.
//! assert_eq!(format!("{id:?}"), format!("OrderId({})", id.tag()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A failing random source is an error ([`RandomSourceError`]), never a
//! fallback to something weaker: an id that could be guessed is worse than
//! no id.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::str::FromStr;

/// What an [`Id`] identifies: a marker type (usually an uninhabited `enum`)
/// that makes ids of different kinds different types.
pub trait Kind {
    /// The name [`Id`]'s `Debug` prints, e.g. `"SessionId"`.
    const NAME: &'static str;
}

/// A 128-bit random identifier of kind `K`, printed as 32 lowercase hex
/// digits.
///
/// Ids are credentials (knowing one grants access to what it names), so
/// `Debug` prints only the kind and the id's [`Tag`], never the id: log
/// `id.tag()` or `{id:?}`, never `{id}`. `Display` is the wire form.
///
/// `Id<K>` is `Send`, `Sync` and `Copy` whatever `K` is, and compares,
/// hashes and orders by its bytes.
///
/// Ids of different kinds do not mix:
///
/// ```compile_fail
/// use gapless::id::{Id, Kind};
/// enum A {}
/// impl Kind for A { const NAME: &'static str = "A"; }
/// enum B {}
/// impl Kind for B { const NAME: &'static str = "B"; }
/// let b: Id<B> = Id::<A>::from_bytes([0; 16]);
/// ```
pub struct Id<K: Kind> {
    bytes: [u8; 16],
    // `fn() -> K`: no ownership of a `K`, so no auto trait depends on it.
    kind: PhantomData<fn() -> K>,
}

impl<K: Kind> Id<K> {
    /// A fresh id: 16 bytes from the operating system's CSPRNG.
    ///
    /// # Errors
    /// [`RandomSourceError`] if the OS random source fails. There is no
    /// fallback: the caller reports an error rather than issue an id that
    /// could be guessed.
    pub fn random() -> Result<Self, RandomSourceError> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).map_err(RandomSourceError)?;
        Ok(Self::from_bytes(bytes))
    }

    /// The id with these bytes (tests, fixtures, ids read back from
    /// storage). An id that must be unguessable comes from
    /// [`random`](Self::random).
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Self {
            bytes,
            kind: PhantomData,
        }
    }

    /// The id's 16 bytes, in the order `Display` prints them.
    pub const fn to_bytes(&self) -> [u8; 16] {
        self.bytes
    }

    /// The id's [`Tag`]: what logs carry instead of the id.
    pub fn tag(&self) -> Tag {
        // Fixed keys: the same id has the same tag in every process, on
        // every toolchain (the crate's SipHash-1-3 is pinned; std's
        // `DefaultHasher` is not).
        let mut hasher = siphasher::sip::SipHasher13::new_with_keys(0, 0);
        hasher.write(&self.bytes);
        // The low 32 bits of SipHash's output; the truncation is the point.
        Tag(hasher.finish() as u32)
    }
}

impl<K: Kind> Clone for Id<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: Kind> Copy for Id<K> {}

impl<K: Kind> PartialEq for Id<K> {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl<K: Kind> Eq for Id<K> {}

impl<K: Kind> Hash for Id<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.bytes.hash(state);
    }
}

impl<K: Kind> PartialOrd for Id<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K: Kind> Ord for Id<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.bytes.cmp(&other.bytes)
    }
}

/// Exactly 32 lowercase hex digits: the wire form (and, in the server, the
/// Redis key form).
impl<K: Kind> fmt::Display for Id<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One `pad` of 32 digits rather than 16 formatted bytes: ids are
        // formatted on hot paths (a Redis key per call).
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [0u8; 32];
        for (pair, byte) in hex.chunks_exact_mut(2).zip(self.bytes) {
            pair[0] = DIGITS[usize::from(byte >> 4)];
            pair[1] = DIGITS[usize::from(byte & 0x0f)];
        }
        // Every byte is an ASCII hex digit.
        f.pad(std::str::from_utf8(&hex).map_err(|_| fmt::Error)?)
    }
}

/// `NAME(tag)`, e.g. `SessionId(1f2e3d4c)`: never the id itself.
impl<K: Kind> fmt::Debug for Id<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", K::NAME, self.tag())
    }
}

/// Exactly 32 lowercase hex digits; anything else (upper case, a sign,
/// whitespace, another length) is refused, so every accepted string prints
/// back the same.
impl<K: Kind> FromStr for Id<K> {
    type Err = ParseIdError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_hex128(text).map(Self::from_bytes)
    }
}

/// Parses exactly 32 lowercase hex digits into 16 bytes: the grammar of
/// every [`Id`].
pub(crate) fn parse_hex128(text: &str) -> Result<[u8; 16], ParseIdError> {
    let bytes = text.as_bytes();
    if bytes.len() != 32 {
        return Err(ParseIdError);
    }
    let nibble = |b: u8| match b {
        b'0'..=b'9' => Ok(b - b'0'),
        b'a'..=b'f' => Ok(b - b'a' + 10),
        _ => Err(ParseIdError),
    };
    let mut out = [0u8; 16];
    for (byte, pair) in out.iter_mut().zip(bytes.chunks_exact(2)) {
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Ok(out)
}

/// A short digest of an [`Id`] for logs: 32 bits of a fixed-key SipHash
/// of the id, printed as 8 lowercase hex digits.
///
/// It identifies an id in logs across processes, instances and builds (the
/// same id has the same tag wherever it is computed: SipHash-1-3 with the
/// keys `(0, 0)`, from the `siphasher` crate, whatever the Rust toolchain)
/// without revealing it: a tag cannot be turned
/// back into its id, and leaves 96 of the id's 128 bits unknown. Different
/// ids may share a tag (one pair in about 2^32), so a tag names an id in a
/// log, not in a lookup.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag(u32);

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:08x}", self.0)
    }
}

impl fmt::Debug for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tag({self})")
    }
}

/// Why a string is not an [`Id`]: it is not exactly 32 lowercase hex
/// digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ParseIdError;

impl fmt::Display for ParseIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("expected exactly 32 lowercase hex digits")
    }
}

impl std::error::Error for ParseIdError {}

/// The operating system's random source failed, so [`Id::random`] issued
/// no id (rather than a weaker one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RandomSourceError(getrandom::Error);

impl fmt::Display for RandomSourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the OS random source failed: {}", self.0)
    }
}

impl std::error::Error for RandomSourceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    enum TestKind {}
    impl Kind for TestKind {
        const NAME: &'static str = "TestId";
    }
    type TestId = Id<TestKind>;

    const BYTES: [u8; 16] = [
        0x3f, 0x0c, 0x9a, 0x5e, 0x1d, 0x2b, 0x4c, 0x6a, 0x8e, 0x7f, 0x90, 0x12, 0x34, 0x56, 0x78,
        0x9a,
    ];
    const TEXT: &str = "3f0c9a5e1d2b4c6a8e7f90123456789a";

    fn parse(text: &str) -> Result<TestId, ParseIdError> {
        text.parse()
    }

    #[test]
    fn display_and_from_str_round_trip() {
        let id = TestId::from_bytes(BYTES);
        assert_eq!(id.to_string(), TEXT);
        assert_eq!(parse(TEXT), Ok(id));
        assert_eq!(parse(TEXT).map(|id| id.to_bytes()), Ok(BYTES));
        for bytes in [[0; 16], [0xff; 16]] {
            let id = TestId::from_bytes(bytes);
            assert_eq!(parse(&id.to_string()), Ok(id));
        }
        assert_eq!(TestId::from_bytes([0; 16]).to_string(), "0".repeat(32));
        assert_eq!(TestId::from_bytes([0xff; 16]).to_string(), "f".repeat(32));
    }

    #[test]
    fn parser_rejects_anything_but_32_lowercase_hex_digits() {
        for bad in [
            String::new(),
            TEXT.to_uppercase(),
            TEXT.replacen('f', "F", 1),
            TEXT[1..].to_owned(),
            format!("{TEXT}0"),
            format!("{}g", &TEXT[1..]),
            format!("+{}", &TEXT[1..]),
            format!(" {}", &TEXT[1..]),
            format!("{}\n", &TEXT[1..]),
            format!("0x{}", &TEXT[2..]),
            // 32 bytes, but one character is two of them.
            format!("{}é", &TEXT[2..]),
            // 32 characters, 33 bytes.
            format!("{}é", &TEXT[1..]),
        ] {
            assert_eq!(parse(&bad), Err(ParseIdError), "{bad:?}");
        }
        assert!(!ParseIdError.to_string().is_empty());
    }

    #[test]
    fn debug_never_prints_the_id() {
        let id = TestId::from_bytes(BYTES);
        let debug = format!("{id:?}");
        assert_eq!(debug, format!("TestId({})", id.tag()));
        assert!(!debug.contains(TEXT), "{debug}");
        // Not even its first bytes.
        assert!(!debug.contains(&TEXT[..8]), "{debug}");
        for _ in 0..16 {
            let id = TestId::random().unwrap();
            let debug = format!("{id:?} {id:#?}");
            assert!(!debug.contains(&id.to_string()), "{debug}");
        }
    }

    #[test]
    fn random_ids_differ() {
        let n = if cfg!(miri) { 8 } else { 1000 };
        let ids: HashSet<TestId> = (0..n).map(|_| TestId::random().unwrap()).collect();
        assert_eq!(ids.len(), n);
    }

    #[test]
    fn the_tag_is_8_hex_digits_stable_and_spread() {
        let id = TestId::from_bytes(BYTES);
        let tag = id.tag().to_string();
        assert_eq!(tag.len(), 8);
        assert!(tag.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
        assert_eq!(id.tag(), TestId::from_bytes(BYTES).tag());
        assert_eq!(format!("{:?}", id.tag()), format!("Tag({tag})"));
        assert!(!TEXT.contains(&tag));
        // Ids differing in one bit, and random ids, get different tags.
        let mut flipped = BYTES;
        flipped[15] ^= 1;
        assert_ne!(TestId::from_bytes(flipped).tag(), id.tag());
        let n = if cfg!(miri) { 16 } else { 500 };
        let tags: HashSet<Tag> = (0..n).map(|_| TestId::random().unwrap().tag()).collect();
        // 500 random 32-bit tags collide with probability ~3e-5.
        assert!(tags.len() + 2 >= n, "{} distinct tags of {n}", tags.len());
    }

    #[test]
    fn the_tag_of_a_known_id_is_pinned() {
        // SipHash-1-3 with keys (0, 0), its low 32 bits: a change of
        // hasher, keys or truncation changes these, and every log line
        // that names an id with it.
        assert_eq!(TestId::from_bytes(BYTES).tag().to_string(), "08d3cf3c");
        assert_eq!(TestId::from_bytes([0; 16]).tag().to_string(), "3e25b2a0");
    }

    #[test]
    fn equality_hash_and_order_follow_the_bytes() {
        let low = TestId::from_bytes([0; 16]);
        let mut bytes = [0; 16];
        bytes[0] = 1;
        let high = TestId::from_bytes(bytes);
        assert!(low < high);
        assert_ne!(low, high);
        let set: HashSet<TestId> = [low, high, low].into_iter().collect();
        assert_eq!(set.len(), 2);
    }

    #[test]
    fn ids_are_send_sync_and_copy_whatever_the_kind() {
        // A kind that is neither `Send` nor `Sync`.
        struct Local(std::rc::Rc<u8>);
        impl Kind for Local {
            const NAME: &'static str = "Local";
        }
        fn assert_traits<T: Send + Sync + Copy + 'static>() {}
        assert_traits::<Id<Local>>();
        let _ = Local(std::rc::Rc::new(0)).0;
    }

    #[test]
    fn a_failing_source_is_an_error_naming_its_cause() {
        let error = RandomSourceError(getrandom::Error::UNSUPPORTED);
        let text = error.to_string();
        assert!(text.contains("OS random source"), "{text}");
        assert!(
            text.contains(&getrandom::Error::UNSUPPORTED.to_string()),
            "{text}"
        );
        let source = std::error::Error::source(&error).expect("a source");
        assert_eq!(
            source.to_string(),
            getrandom::Error::UNSUPPORTED.to_string()
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 256 }))]

        #[test]
        fn every_id_prints_32_lowercase_hex_and_parses_back(bytes in any::<[u8; 16]>()) {
            let id = TestId::from_bytes(bytes);
            let text = id.to_string();
            prop_assert_eq!(text.len(), 32);
            prop_assert!(text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
            prop_assert_eq!(parse(&text), Ok(id));
            let debug = format!("{id:?}");
            prop_assert!(!debug.contains(&text));
        }

        #[test]
        fn exactly_32_lowercase_hex_digits_parse_and_print_back(
            text in "[0-9a-f]{31,33}|[0-9a-fA-F]{32}|[0-9a-f+ é]{30,33}",
        ) {
            let grammar = text.len() == 32
                && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            prop_assert_eq!(parse(&text).is_ok(), grammar);
            if let Ok(id) = parse(&text) {
                prop_assert_eq!(id.to_string(), text);
            }
        }
    }
}
