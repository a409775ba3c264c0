//! Property tests of the two wire formats (DESIGN §6, PROTOCOL "Delivery"):
//!
//! - the event ID text form: every ID prints and parses back to itself, and
//!   the strict parser never panics and accepts only strings that print back
//!   byte for byte;
//! - SSE framing: checked against an independent event-stream parser written
//!   here from the HTML standard, §9.2.6 "Interpreting an event stream", so
//!   that no payload can add, split, rename or renumber an event.

use gapless::sse::{self, SseError};
use gapless::{EventId, ParseEventIdError, MAX_EVENT_ID_LEN};
use proptest::prelude::*;
use proptest::sample::Index;

/// Cases for the main properties (CI requires at least 1000).
const CASES: u32 = 1000;
/// Cases for the cheap properties over arbitrary input.
const MANY_CASES: u32 = 4000;

// ---------------------------------------------------------------------------
// A reference event-stream parser, written from the HTML standard (§9.2.6).
// ---------------------------------------------------------------------------

/// One event as a browser's `EventSource` would dispatch it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Dispatched {
    /// The event's type: the event type buffer, or "message" if it was empty.
    event_type: String,
    /// The data buffer with one trailing LF removed.
    data: String,
    /// The event source's last event ID string at dispatch time.
    last_event_id: String,
}

/// Everything a stream did to an `EventSource`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Interpreted {
    /// Dispatched events, in order.
    events: Vec<Dispatched>,
    /// The last event ID buffer when the stream ended.
    last_event_id_buffer: String,
    /// The reconnection time, if a valid `retry` field set it.
    retry: Option<u128>,
    /// The name of every field processed (comment lines excluded), in order.
    field_names: Vec<String>,
    /// Number of comment lines (lines starting with ':').
    comments: usize,
}

/// Interprets a whole event stream as the HTML standard describes.
///
/// The stream is UTF-8 decoded (invalid sequences become U+FFFD), one
/// leading BOM is dropped, and it is split into lines ended by CRLF, LF or
/// CR. A trailing line with no end of line is incomplete and is discarded,
/// as is an event that was not ended by a blank line.
fn interpret(stream: &[u8]) -> Interpreted {
    let decoded = String::from_utf8_lossy(stream);
    let mut rest: &str = decoded.strip_prefix('\u{FEFF}').unwrap_or(&decoded);

    let mut result = Interpreted::default();
    let mut data_buffer = String::new();
    let mut event_type_buffer = String::new();
    let mut last_event_id_buffer = String::new();
    // The event source's "last event ID string".
    let mut last_event_id_string = String::new();

    while let Some(end) = rest.find(['\r', '\n']) {
        let line = &rest[..end];
        let next = if rest[end..].starts_with("\r\n") {
            end + 2
        } else {
            end + 1
        };
        rest = &rest[next..];

        if line.is_empty() {
            // Dispatch the event.
            last_event_id_string.clone_from(&last_event_id_buffer);
            if data_buffer.is_empty() {
                event_type_buffer.clear();
                continue;
            }
            if data_buffer.ends_with('\n') {
                data_buffer.pop();
            }
            let event_type = if event_type_buffer.is_empty() {
                "message".to_owned()
            } else {
                event_type_buffer.clone()
            };
            result.events.push(Dispatched {
                event_type,
                data: std::mem::take(&mut data_buffer),
                last_event_id: last_event_id_string.clone(),
            });
            event_type_buffer.clear();
            continue;
        }
        if line.starts_with(':') {
            result.comments += 1;
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        result.field_names.push(field.to_owned());
        match field {
            "event" => value.clone_into(&mut event_type_buffer),
            "data" => {
                data_buffer.push_str(value);
                data_buffer.push('\n');
            }
            // An ID containing NUL is ignored.
            "id" if !value.contains('\0') => value.clone_into(&mut last_event_id_buffer),
            // Only ASCII digits set the reconnection time; saturate rather
            // than overflow, since only "was it set" matters here.
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                let time = value.bytes().fold(0u128, |acc, digit| {
                    acc.saturating_mul(10)
                        .saturating_add(u128::from(digit - b'0'))
                });
                result.retry = Some(time);
            }
            _ => {}
        }
    }
    // End of stream: the pending (undispatched) event is discarded.
    result.last_event_id_buffer = last_event_id_buffer;
    result
}

/// The payload as a conforming client gives it back: CRLF and lone CR
/// become LF.
fn normalize_line_breaks(payload: &str) -> String {
    payload.replace("\r\n", "\n").replace('\r', "\n")
}

fn dispatched(event_type: &str, data: &str, last_event_id: &str) -> Dispatched {
    Dispatched {
        event_type: event_type.to_owned(),
        data: data.to_owned(),
        last_event_id: last_event_id.to_owned(),
    }
}

#[test]
fn reference_parser_follows_the_html_standard_examples() {
    // §9.2.6's examples, and the rules they do not show.
    let stock = interpret(b"data: YHOO\ndata: +2\ndata: 10\n\n");
    assert_eq!(stock.events, [dispatched("message", "YHOO\n+2\n10", "")]);

    let ids = interpret(
        b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n",
    );
    assert_eq!(
        ids.events,
        [
            dispatched("message", "first event", "1"),
            dispatched("message", "second event", ""),
            dispatched("message", " third event", ""),
        ]
    );
    assert_eq!(ids.comments, 1);

    let empties = interpret(b"data\n\ndata\ndata\n\ndata:");
    assert_eq!(
        empties.events,
        [
            dispatched("message", "", ""),
            dispatched("message", "\n", "")
        ]
    );

    let same = interpret(b"data:test\n\ndata: test\n\n");
    assert_eq!(
        same.events,
        [
            dispatched("message", "test", ""),
            dispatched("message", "test", "")
        ]
    );

    // CR and CRLF end lines too; one leading BOM is dropped.
    let mixed = interpret(b"\xef\xbb\xbfevent: a\rdata: 1\r\n\r\ndata: 2\r\r");
    assert_eq!(
        mixed.events,
        [dispatched("a", "1", ""), dispatched("message", "2", "")]
    );
    // A second BOM is part of the first field name, so the field is unknown.
    let two_boms = interpret("\u{FEFF}\u{FEFF}data: x\n\n".as_bytes());
    assert!(two_boms.events.is_empty());

    // An ID containing NUL is ignored; IDs persist across events; a blank
    // line with no data dispatches nothing but still sets the last event ID.
    let nul = interpret(b"id: 7\ndata: a\n\nid: 8\0\ndata: b\n\nid: 9\n\ndata: c\n\n");
    assert_eq!(
        nul.events,
        [
            dispatched("message", "a", "7"),
            dispatched("message", "b", "7"),
            dispatched("message", "c", "9"),
        ]
    );
    assert_eq!(nul.last_event_id_buffer, "9");

    // retry: digits only; an event type does not outlive its event.
    let retry = interpret(b"retry: 12x\nretry: \nevent: e\n\nretry: 3000\ndata: d\n\n");
    assert_eq!(retry.retry, Some(3000));
    assert_eq!(retry.events, [dispatched("message", "d", "")]);
    assert_eq!(interpret(b"retry: 1 \n").retry, None);

    // An unterminated event is not dispatched.
    assert!(interpret(b"data: x\n").events.is_empty());
}

// ---------------------------------------------------------------------------
// Strategies.
// ---------------------------------------------------------------------------

fn any_u64_with_edges() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => any::<u64>(),
        1 => 0u64..=20,
        1 => (0u64..=20).prop_map(|back| u64::MAX - back),
        1 => (0u32..64).prop_map(|shift| 1u64 << shift),
        1 => (1u32..20).prop_map(|exp| 10u64.pow(exp)),
    ]
}

fn event_ids() -> impl Strategy<Value = EventId> {
    (any_u64_with_edges(), any_u64_with_edges()).prop_map(|(epoch, seq)| EventId { epoch, seq })
}

/// Pieces that try to break SSE framing.
const HOSTILE: &[&str] = &[
    "\n",
    "\r",
    "\r\n",
    "\n\r",
    "\n\n",
    "\r\r",
    "\r\n\r\n",
    ":",
    ": ",
    "id:",
    "id: ",
    "id: 99",
    "event:",
    "event: gap",
    "retry:",
    "retry: 0",
    "data:",
    "data: ",
    "",
    " ",
    "  ",
    "\t",
    "\0",
    "\u{FEFF}",
    "\u{85}",
    "\u{2028}",
    "\u{2029}",
    "\u{b}",
    "\u{c}",
    "é",
    "😀",
    "日本",
    "{\"a\":1}",
    "\n\nid: 1\nretry: 5\nevent: x\ndata: y\n\n",
];

fn payload_piece() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(HOSTILE).prop_map(str::to_owned),
        2 => "[a-z0-9 :{}\",]{0,6}",
        1 => any::<String>(),
    ]
}

/// Payloads made of hostile pieces.
fn payloads() -> impl Strategy<Value = String> {
    prop::collection::vec(payload_piece(), 0..16).prop_map(|pieces| pieces.concat())
}

/// Valid event types: non-empty, no CR or LF.
fn event_types() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => prop::sample::select(&[
            "gap", "message", " gap", "gap ", "  ", ":", "id", "data: x", "\u{FEFF}", "\0", "é",
        ][..])
        .prop_map(str::to_owned),
        1 => "[^\r\n]{1,12}",
    ]
}

/// Event types the encoder must refuse: empty, or with a line break.
fn bad_event_types() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => Just(String::new()),
        4 => (
            "[^\r\n]{0,6}",
            prop::sample::select(&["\n", "\r", "\r\n"][..]),
            ".{0,6}",
        )
            .prop_map(|(before, brk, after)| format!("{before}{brk}{after}")),
    ]
}

/// Byte sequences that are never UTF-8, whatever follows them.
const BAD_UTF8: &[&[u8]] = &[
    &[0x80],
    &[0xff],
    &[0xfe],
    &[0xc0, 0x80],
    &[0xc1, 0xbf],
    &[0xc3, 0x28],
    &[0xe2, 0x82, 0x28],
    &[0xed, 0xa0, 0x80],
    &[0xef, 0xbf, 0x7f],
    &[0xf0, 0x90, 0x80, 0x41],
    &[0xf4, 0x90, 0x80, 0x80],
    &[0xf5, 0x80, 0x80, 0x80],
    &[0xf8, 0x88, 0x80, 0x80, 0x80],
];

/// Byte strings that are not UTF-8: a valid prefix, a bad sequence, any tail.
fn non_utf8_payloads() -> impl Strategy<Value = Vec<u8>> {
    (
        payloads(),
        prop::sample::select(BAD_UTF8),
        prop::collection::vec(any::<u8>(), 0..8),
    )
        .prop_map(|(prefix, bad, tail)| {
            let mut bytes = prefix.into_bytes();
            bytes.extend_from_slice(bad);
            bytes.extend_from_slice(&tail);
            bytes
        })
}

// ---------------------------------------------------------------------------
// EventId.
// ---------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------
// SSE framing.
// ---------------------------------------------------------------------------

/// Encodes one numbered event and checks it reads back as exactly one event.
fn check_one_event(
    id: &EventId,
    event_type: Option<&str>,
    payload: &str,
) -> Result<(), TestCaseError> {
    let mut out = Vec::new();
    prop_assert_eq!(
        sse::encode(&mut out, id, event_type, payload.as_bytes()),
        Ok(())
    );
    prop_assert!(std::str::from_utf8(&out).is_ok(), "output is not UTF-8");
    let read = interpret(&out);
    let expected = Dispatched {
        event_type: event_type.unwrap_or("message").to_owned(),
        data: normalize_line_breaks(payload),
        last_event_id: id.to_string(),
    };
    prop_assert_eq!(
        &read.events,
        &vec![expected],
        "stream {:?}",
        String::from_utf8_lossy(&out)
    );
    prop_assert_eq!(read.retry, None);
    prop_assert_eq!(read.last_event_id_buffer, id.to_string());
    for field in &read.field_names {
        prop_assert!(
            ["id", "event", "data"].contains(&field.as_str()),
            "field {:?} in {:?}",
            field,
            String::from_utf8_lossy(&out)
        );
    }
    prop_assert_eq!(
        read.field_names.iter().filter(|f| *f == "id").count(),
        1,
        "exactly one id field"
    );
    prop_assert_eq!(read.comments, 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    #[test]
    fn sse_hostile_payload_reads_back_as_exactly_one_message_with_its_id_and_normalized_data(
        id in event_ids(),
        payload in payloads(),
    ) {
        check_one_event(&id, None, &payload)?;
    }

    #[test]
    fn sse_arbitrary_string_payload_reads_back_as_exactly_one_message(
        id in event_ids(),
        payload in any::<String>(),
    ) {
        check_one_event(&id, None, &payload)?;
    }

    #[test]
    fn sse_named_event_type_reads_back_unchanged(
        id in event_ids(),
        event_type in event_types(),
        payload in payloads(),
    ) {
        check_one_event(&id, Some(&event_type), &payload)?;
    }

    #[test]
    fn sse_concatenated_events_read_back_in_order_one_for_one(
        events in prop::collection::vec(
            (event_ids(), prop::option::weighted(0.3, event_types()), payloads()),
            0..8,
        ),
    ) {
        let mut out = Vec::new();
        for (id, event_type, payload) in &events {
            prop_assert_eq!(
                sse::encode(&mut out, id, event_type.as_deref(), payload.as_bytes()),
                Ok(())
            );
        }
        let read = interpret(&out);
        let expected: Vec<Dispatched> = events
            .iter()
            .map(|(id, event_type, payload)| Dispatched {
                event_type: event_type.clone().unwrap_or_else(|| "message".to_owned()),
                data: normalize_line_breaks(payload),
                last_event_id: id.to_string(),
            })
            .collect();
        prop_assert_eq!(read.events, expected);
        prop_assert_eq!(read.retry, None);
        let last = events.last().map(|(id, _, _)| id.to_string()).unwrap_or_default();
        prop_assert_eq!(read.last_event_id_buffer, last);
    }

    #[test]
    fn sse_encode_appends_to_existing_output(
        prefix in prop::collection::vec(any::<u8>(), 0..32),
        id in event_ids(),
        payload in payloads(),
    ) {
        let mut alone = Vec::new();
        sse::encode(&mut alone, &id, None, payload.as_bytes()).unwrap();
        let mut out = prefix.clone();
        sse::encode(&mut out, &id, None, payload.as_bytes()).unwrap();
        prop_assert_eq!(&out[..prefix.len()], &prefix[..]);
        prop_assert_eq!(&out[prefix.len()..], &alone[..]);
    }

    #[test]
    fn sse_unnumbered_event_keeps_the_last_event_id(
        before in prop::option::of(event_ids()),
        event_type in event_types(),
        payload in payloads(),
        after in prop::option::of((event_ids(), payloads())),
    ) {
        let mut out = Vec::new();
        let mut expected = Vec::new();
        let mut last_id = String::new();
        if let Some(id) = before {
            sse::encode(&mut out, &id, None, b"before").unwrap();
            last_id = id.to_string();
            expected.push(dispatched("message", "before", &last_id));
        }
        let start = out.len();
        prop_assert_eq!(
            sse::encode_unnumbered(&mut out, &event_type, payload.as_bytes()),
            Ok(())
        );
        // On its own, the unnumbered event holds no id field at all.
        let alone = interpret(&out[start..]);
        prop_assert!(
            !alone.field_names.iter().any(|f| f == "id"),
            "id field in {:?}",
            String::from_utf8_lossy(&out[start..])
        );
        prop_assert_eq!(alone.retry, None);
        expected.push(Dispatched {
            event_type: event_type.clone(),
            data: normalize_line_breaks(&payload),
            last_event_id: last_id.clone(),
        });
        if let Some((id, payload)) = &after {
            sse::encode(&mut out, id, None, payload.as_bytes()).unwrap();
            last_id = id.to_string();
            expected.push(Dispatched {
                event_type: "message".to_owned(),
                data: normalize_line_breaks(payload),
                last_event_id: last_id.clone(),
            });
        }
        let read = interpret(&out);
        prop_assert_eq!(read.events, expected);
        prop_assert_eq!(read.last_event_id_buffer, last_id);
        prop_assert_eq!(read.retry, None);
    }

    #[test]
    fn sse_non_utf8_payload_is_refused_with_its_offset_and_output_untouched(
        prefix in prop::collection::vec(any::<u8>(), 0..16),
        id in event_ids(),
        event_type in prop::option::of(event_types()),
        payload in non_utf8_payloads(),
    ) {
        let at = std::str::from_utf8(&payload).unwrap_err().valid_up_to();
        let mut out = prefix.clone();
        prop_assert_eq!(
            sse::encode(&mut out, &id, event_type.as_deref(), &payload),
            Err(SseError::NotUtf8 { at })
        );
        prop_assert_eq!(&out, &prefix);
        prop_assert_eq!(
            sse::encode_unnumbered(&mut out, event_type.as_deref().unwrap_or("gap"), &payload),
            Err(SseError::NotUtf8 { at })
        );
        prop_assert_eq!(&out, &prefix);
    }

    #[test]
    fn sse_bad_event_type_is_refused_and_output_untouched(
        prefix in prop::collection::vec(any::<u8>(), 0..16),
        id in event_ids(),
        event_type in bad_event_types(),
        payload in payloads(),
    ) {
        let mut out = prefix.clone();
        prop_assert_eq!(
            sse::encode(&mut out, &id, Some(&event_type), payload.as_bytes()),
            Err(SseError::BadEventType)
        );
        prop_assert_eq!(&out, &prefix);
        prop_assert_eq!(
            sse::encode_unnumbered(&mut out, &event_type, payload.as_bytes()),
            Err(SseError::BadEventType)
        );
        prop_assert_eq!(&out, &prefix);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: MANY_CASES, ..ProptestConfig::default() })]

    #[test]
    fn sse_arbitrary_byte_payload_is_framed_iff_utf8(
        id in event_ids(),
        payload in prop::collection::vec(any::<u8>(), 0..48),
    ) {
        let mut out = vec![b'x'];
        let result = sse::encode(&mut out, &id, None, &payload);
        match std::str::from_utf8(&payload) {
            Ok(text) => {
                prop_assert_eq!(result, Ok(()));
                let read = interpret(&out[1..]);
                prop_assert_eq!(
                    read.events,
                    vec![dispatched("message", &normalize_line_breaks(text), &id.to_string())]
                );
            }
            Err(error) => {
                prop_assert_eq!(result, Err(SseError::NotUtf8 { at: error.valid_up_to() }));
                prop_assert_eq!(out, vec![b'x']);
            }
        }
    }
}

#[test]
fn sse_targeted_framing_cases() {
    let id = EventId {
        epoch: 0xab,
        seq: 7,
    };
    for payload in [
        "",
        "\n",
        "\r",
        "\r\n",
        "\n\r",
        " ",
        " lead",
        "trail ",
        ":",
        "\n\n\n",
        "a\rb\nc\r\nd",
        "data: x\n\nid: 1\nretry: 1\nevent: y\n",
        "\u{FEFF}bom",
        "nul\0",
    ] {
        check_one_event(&id, None, payload).unwrap();
        check_one_event(&id, Some("gap"), payload).unwrap();
    }

    let mut out = Vec::new();
    sse::encode(&mut out, &id, Some("gap"), b"{\"gap\":1}").unwrap();
    assert_eq!(
        interpret(&out).events,
        [dispatched("gap", "{\"gap\":1}", "00000000000000ab-7")]
    );

    for bad in ["", "\n", "\r", "a\nb", "a\r", "\r\nb"] {
        let mut out = b"keep".to_vec();
        assert_eq!(
            sse::encode(&mut out, &id, Some(bad), b"x"),
            Err(SseError::BadEventType),
            "{bad:?}"
        );
        assert_eq!(
            sse::encode_unnumbered(&mut out, bad, b"x"),
            Err(SseError::BadEventType),
            "{bad:?}"
        );
        assert_eq!(out, b"keep");
    }

    let mut out = b"keep".to_vec();
    assert_eq!(
        sse::encode(&mut out, &id, None, b"ok\xffno"),
        Err(SseError::NotUtf8 { at: 2 })
    );
    assert_eq!(out, b"keep");
}
