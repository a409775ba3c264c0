//! Property tests of the event ID text form (DESIGN §6, PROTOCOL
//! "Delivery"): every ID prints and parses back to itself, and the strict
//! parser never panics and accepts only strings that print back byte for
//! byte, agreeing with an independent statement of the accepted form.

mod common;

use common::{event_ids, CASES, MANY_CASES};
use gapless::error::ParseEventIdError;
use gapless::event_id::MAX_EVENT_ID_LEN;
use gapless::EventId;
use proptest::prelude::*;
use proptest::sample::Index;

/// An independent statement of the accepted form: 16 lowercase hex digits,
/// '-', then a canonical decimal (no sign, no leading zero) below 2^64.
fn reference_parse(bytes: &[u8]) -> Option<EventId> {
    if bytes.len() < 18 || bytes[16] != b'-' {
        return None;
    }
    let (epoch, seq) = (&bytes[..16], &bytes[17..]);
    if !epoch
        .iter()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return None;
    }
    if !seq.iter().all(u8::is_ascii_digit) || (seq.len() > 1 && seq[0] == b'0') {
        return None;
    }
    let epoch = u64::from_str_radix(std::str::from_utf8(epoch).ok()?, 16).ok()?;
    let seq: u64 = std::str::from_utf8(seq).ok()?.parse().ok()?;
    Some(EventId { epoch, seq })
}

/// The universal parser properties: never panics (the call returns), an
/// accepted input prints back byte for byte, over-long input is `TooLong`,
/// and it accepts exactly what the reference accepts.
fn check_parse(bytes: &[u8]) -> Result<(), TestCaseError> {
    let parsed = EventId::parse(bytes);
    if let Ok(id) = parsed {
        let printed = id.to_string();
        prop_assert_eq!(printed.as_bytes(), bytes, "accepted {:?}", id);
    }
    if bytes.len() > MAX_EVENT_ID_LEN {
        prop_assert_eq!(parsed, Err(ParseEventIdError::TooLong { len: bytes.len() }));
    }
    prop_assert_eq!(parsed.ok(), reference_parse(bytes));
    if let Ok(text) = std::str::from_utf8(bytes) {
        prop_assert_eq!(text.parse::<EventId>(), parsed, "FromStr differs");
    }
    Ok(())
}

/// A small edit of a valid ID's text.
#[derive(Clone, Debug)]
enum Mutation {
    /// Swap the case of the ASCII character at an index.
    FlipCase(Index),
    /// Insert a character at an index.
    Insert(Index, char),
    /// Put a '0' in front of the seq.
    LeadingZeroOnSeq,
    /// Append decimal digits to the seq.
    AppendDigits(String),
    /// Keep only a strict prefix.
    Truncate(Index),
    /// Remove the character at an index.
    Delete(Index),
    /// Replace the character at an index.
    Replace(Index, char),
}

fn mutations() -> impl Strategy<Value = Mutation> {
    let chars = prop_oneof![
        4 => prop::sample::select(
            &['+', '-', ' ', '0', '1', '9', 'a', 'f', 'g', 'A', 'F', '\t', '\n', '\0', 'é', '٣', '０'][..]
        ),
        1 => any::<char>(),
    ];
    prop_oneof![
        any::<Index>().prop_map(Mutation::FlipCase),
        (any::<Index>(), chars.clone()).prop_map(|(at, c)| Mutation::Insert(at, c)),
        Just(Mutation::LeadingZeroOnSeq),
        "[0-9]{1,24}".prop_map(Mutation::AppendDigits),
        any::<Index>().prop_map(Mutation::Truncate),
        any::<Index>().prop_map(Mutation::Delete),
        (any::<Index>(), chars).prop_map(|(at, c)| Mutation::Replace(at, c)),
    ]
}

/// What `parse` must return for a mutated ID, as far as the mutation alone
/// decides it.
#[derive(Clone, Debug)]
enum Expect {
    /// Exactly this result.
    Exactly(Result<EventId, ParseEventIdError>),
    /// Some error (the variant depends on where the edit landed).
    SomeError,
    /// Whatever the reference parser says.
    Reference,
}

/// Applies `mutation` to `valid` (the ASCII text of `id`).
fn mutate(valid: &str, id: EventId, mutation: &Mutation) -> (String, Expect) {
    use ParseEventIdError::*;
    let mut text = valid.to_owned();
    let expect = match mutation {
        Mutation::FlipCase(at) => {
            let at = at.index(text.len());
            let c = text.as_bytes()[at];
            let flipped = if c.is_ascii_lowercase() {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            text.replace_range(at..=at, &char::from(flipped).to_string());
            if flipped == c {
                Expect::Exactly(Ok(id))
            } else {
                // Only the epoch holds letters.
                Expect::Exactly(Err(BadEpoch))
            }
        }
        Mutation::Insert(at, c) => {
            let at = at.index(text.len() + 1);
            text.insert(at, *c);
            if text.len() > MAX_EVENT_ID_LEN {
                Expect::Exactly(Err(TooLong { len: text.len() }))
            } else if !c.is_ascii_alphanumeric() {
                // A sign, a second '-', a space, a control character or
                // anything non-ASCII is never valid anywhere.
                Expect::SomeError
            } else {
                // A digit may land harmlessly inside the seq.
                Expect::Reference
            }
        }
        Mutation::LeadingZeroOnSeq => {
            text.insert(17, '0');
            Expect::Exactly(if text.len() > MAX_EVENT_ID_LEN {
                Err(TooLong { len: text.len() })
            } else {
                Err(BadSeq)
            })
        }
        Mutation::AppendDigits(digits) => {
            text.push_str(digits);
            Expect::Exactly(if text.len() > MAX_EVENT_ID_LEN {
                Err(TooLong { len: text.len() })
            } else if id.seq == 0 {
                Err(BadSeq)
            } else {
                match text[17..].parse::<u64>() {
                    Ok(seq) => Ok(EventId {
                        epoch: id.epoch,
                        seq,
                    }),
                    Err(_) => Err(SeqOverflow),
                }
            })
        }
        Mutation::Truncate(at) => {
            let keep = at.index(text.len());
            text.truncate(keep);
            Expect::Exactly(match keep {
                // Hex digits and no dash yet.
                0..=16 => Err(MissingDash),
                17 => Err(BadSeq),
                // A prefix of a canonical decimal is canonical.
                _ => Ok(EventId {
                    epoch: id.epoch,
                    seq: text[17..].parse().expect("digits"),
                }),
            })
        }
        Mutation::Delete(at) => {
            let at = at.index(text.len());
            text.remove(at);
            Expect::Reference
        }
        Mutation::Replace(at, c) => {
            let at = at.index(text.len());
            text.replace_range(at..=at, &c.to_string());
            Expect::Reference
        }
    };
    (text, expect)
}

fn id_text_chars() -> impl Strategy<Value = Vec<u8>> {
    // Bytes drawn mostly from the ID alphabet, so that many inputs come close
    // to (or hit) the accepted form.
    prop::collection::vec(
        prop_oneof![
            6 => prop::sample::select(&b"0123456789abcdef"[..]),
            1 => prop::sample::select(&b"-ABCDEFgx +0\0\xff\xc3\xa9"[..]),
        ],
        0..=MAX_EVENT_ID_LEN + 3,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn event_id_display_then_parse_gives_back_the_same_id(id in event_ids()) {
        let text = id.to_string();
        prop_assert!(text.len() <= MAX_EVENT_ID_LEN);
        prop_assert_eq!(EventId::parse(text.as_bytes()), Ok(id));
        prop_assert_eq!(text.parse::<EventId>(), Ok(id));
    }

    #[test]
    fn event_id_near_misses_are_rejected_or_print_back_exactly(
        id in event_ids(),
        mutation in mutations(),
    ) {
        let valid = id.to_string();
        let (text, expect) = mutate(&valid, id, &mutation);
        // Never panics, prints back exactly, agrees with the reference.
        check_parse(text.as_bytes())?;
        let parsed = EventId::parse(text.as_bytes());
        match expect {
            Expect::Exactly(expected) => {
                prop_assert_eq!(parsed, expected, "{:?} from {:?}", text, mutation);
            }
            Expect::SomeError => {
                prop_assert!(parsed.is_err(), "{:?} accepted as {:?}", text, parsed);
            }
            Expect::Reference => {}
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: MANY_CASES, ..ProptestConfig::default() })]

    #[test]
    fn event_id_parse_of_arbitrary_bytes_never_panics_and_accepts_only_canonical_text(
        bytes in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        check_parse(&bytes)?;
    }

    #[test]
    fn event_id_parse_of_id_alphabet_bytes_accepts_only_canonical_text(
        bytes in id_text_chars(),
    ) {
        check_parse(&bytes)?;
    }

    #[test]
    fn event_id_from_str_of_arbitrary_strings_never_panics_and_accepts_only_canonical_text(
        text in any::<String>(),
    ) {
        check_parse(text.as_bytes())?;
    }

    #[test]
    fn event_id_parse_of_shaped_strings_accepts_only_canonical_text(
        text in "[0-9a-fA-F]{14,18}-?[+-]?[0-9]{0,22}",
    ) {
        check_parse(text.as_bytes())?;
    }
}

#[test]
fn event_id_errors_name_what_is_wrong() {
    use ParseEventIdError::*;
    let cases: &[(&[u8], Result<EventId, ParseEventIdError>)] = &[
        (b"0000000000000000-0", Ok(EventId { epoch: 0, seq: 0 })),
        (
            b"00c0ffee12345678-42",
            Ok(EventId {
                epoch: 0x00c0_ffee_1234_5678,
                seq: 42,
            }),
        ),
        (
            b"ffffffffffffffff-18446744073709551615",
            Ok(EventId {
                epoch: u64::MAX,
                seq: u64::MAX,
            }),
        ),
        (b"00C0FFEE12345678-42", Err(BadEpoch)),
        (b"00c0ffee1234567g-42", Err(BadEpoch)),
        (b"00c0ffee1234567\xff-42", Err(BadEpoch)),
        (b"+0c0ffee12345678-42", Err(BadEpoch)),
        (b"00c0ffee12345678_42", Err(MissingDash)),
        (b"00c0ffee12345678", Err(MissingDash)),
        (b"00c0ffee12345678-", Err(BadSeq)),
        (b"00c0ffee12345678--42", Err(BadSeq)),
        (b"00c0ffee12345678-+42", Err(BadSeq)),
        (b"00c0ffee12345678-042", Err(BadSeq)),
        (b"00c0ffee12345678-00", Err(BadSeq)),
        (b"00c0ffee12345678-42 ", Err(BadSeq)),
        (b"00c0ffee12345678-42\n", Err(BadSeq)),
        (b"00c0ffee12345678-42\0", Err(BadSeq)),
        (b"00c0ffee12345678-4\xc3\xa9", Err(BadSeq)),
        (b"00c0ffee12345678-\xd9\xa3", Err(BadSeq)),
        (b"00c0ffee12345678-18446744073709551616", Err(SeqOverflow)),
        (b"00c0ffee12345678-30000000000000000000", Err(SeqOverflow)),
        (
            b"00c0ffee12345678-100000000000000000000",
            Err(TooLong { len: 38 }),
        ),
        (
            b"00c0ffee12345678-42                   ",
            Err(TooLong { len: 38 }),
        ),
    ];
    for (input, expected) in cases {
        assert_eq!(
            EventId::parse(input),
            *expected,
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
    let long = vec![b'0'; 10_000];
    assert_eq!(EventId::parse(&long), Err(TooLong { len: 10_000 }));
    // Every error has a message.
    for error in [
        TooLong { len: 38 },
        MissingDash,
        BadEpoch,
        BadSeq,
        SeqOverflow,
    ] {
        assert!(!error.to_string().is_empty());
    }
}
