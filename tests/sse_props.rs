//! Property tests of SSE framing (DESIGN §6, PROTOCOL "Delivery"): whatever
//! the payload, `sse::encode` either refuses it and leaves the output as it
//! was, or appends exactly one event that reads back with its ID, its type
//! and its payload (line breaks normalised to LF), so that no payload can
//! add, split, rename or renumber an event.
//!
//! Every stream is read back twice, by `gapless::sse::Parser` and by the
//! independent `eventsource-stream` crate, which must agree
//! (`tests/sse_oracle.rs` compares the two on arbitrary streams).

mod common;
mod decoders;

use common::{event_ids, CASES, MANY_CASES};
use decoders::{dispatched, Dispatched};
use gapless::sse::{self, Parser, SseError};
use gapless::EventId;
use proptest::prelude::*;

/// The payload as a conforming client gives it back: CRLF and lone CR
/// become LF.
fn normalize_line_breaks(payload: &str) -> String {
    payload.replace("\r\n", "\n").replace('\r', "\n")
}

/// A stream as the two decoders read it back.
struct ReadBack {
    /// The events, on which both decoders agree.
    events: Vec<Dispatched>,
    /// For each event, the `id:` field of its own block (our parser's view).
    own_ids: Vec<Option<String>>,
    /// Our parser as the stream left it: last event ID, retry, comments.
    parser: Parser,
    /// Whether `eventsource-stream` reported a `retry` field with an event.
    retry_seen: bool,
}

/// Reads `stream` back with both decoders and checks that they agree.
fn read_back(stream: &[u8]) -> Result<ReadBack, TestCaseError> {
    prop_assert!(
        decoders::oracle_conforms_on(stream),
        "a stream eventsource-stream misreads: {:?}",
        String::from_utf8_lossy(stream)
    );
    let (ours, parser) = decoders::parse(&[stream]);
    let theirs = decoders::oracle(&[stream]).map_err(|e| {
        TestCaseError::fail(format!(
            "eventsource-stream refused {:?}: {e}",
            String::from_utf8_lossy(stream)
        ))
    })?;
    let events: Vec<Dispatched> = ours.iter().map(Dispatched::from).collect();
    let oracle: Vec<Dispatched> = theirs.iter().map(Dispatched::from).collect();
    prop_assert_eq!(
        &events,
        &oracle,
        "gapless::sse::Parser (left) and eventsource-stream (right) disagree on {:?}",
        String::from_utf8_lossy(stream)
    );
    Ok(ReadBack {
        events,
        own_ids: ours.into_iter().map(|event| event.id).collect(),
        parser,
        retry_seen: theirs.iter().any(|event| event.retry.is_some()),
    })
}

/// The encoder's promise about its lines, which neither decoder reports
/// (both ignore unknown fields): LF line ends only, the stream ends with a
/// blank line, every other line is an `id: `, `event: ` or `data: ` field,
/// and there are `ids` `id:` fields in all.
fn check_frame_shape(stream: &[u8], ids: usize) -> Result<(), TestCaseError> {
    let text = String::from_utf8_lossy(stream);
    prop_assert!(!stream.contains(&b'\r'), "CR in {:?}", text);
    prop_assert!(
        stream.is_empty() || stream.ends_with(b"\n\n"),
        "unterminated {:?}",
        text
    );
    let mut id_fields = 0;
    for line in stream
        .split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
    {
        prop_assert!(
            [&b"id: "[..], b"event: ", b"data: "]
                .iter()
                .any(|field| line.starts_with(field)),
            "line {:?} in {:?}",
            String::from_utf8_lossy(line),
            text
        );
        id_fields += usize::from(line.starts_with(b"id: "));
    }
    prop_assert_eq!(id_fields, ids, "id fields in {:?}", text);
    Ok(())
}

// ---------------------------------------------------------------------------
// Strategies.
// ---------------------------------------------------------------------------

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
    check_frame_shape(&out, 1)?;
    let read = read_back(&out)?;
    let expected = dispatched(
        event_type.unwrap_or("message"),
        &normalize_line_breaks(payload),
        &id.to_string(),
    );
    prop_assert_eq!(
        &read.events,
        &vec![expected],
        "stream {:?}",
        String::from_utf8_lossy(&out)
    );
    prop_assert_eq!(read.own_ids, vec![Some(id.to_string())]);
    prop_assert!(!read.retry_seen);
    prop_assert_eq!(read.parser.retry(), None);
    prop_assert_eq!(read.parser.last_event_id(), id.to_string());
    prop_assert_eq!(read.parser.comments(), 0);
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
        check_frame_shape(&out, events.len())?;
        let read = read_back(&out)?;
        let expected: Vec<Dispatched> = events
            .iter()
            .map(|(id, event_type, payload)| Dispatched {
                event_type: event_type.clone().unwrap_or_else(|| "message".to_owned()),
                data: normalize_line_breaks(payload),
                last_event_id: id.to_string(),
            })
            .collect();
        prop_assert_eq!(read.events, expected);
        prop_assert!(read.own_ids.iter().all(Option::is_some), "an event without its id field");
        prop_assert!(!read.retry_seen);
        prop_assert_eq!(read.parser.retry(), None);
        let last = events.last().map(|(id, _, _)| id.to_string()).unwrap_or_default();
        prop_assert_eq!(read.parser.last_event_id(), last);
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
        check_frame_shape(&out[start..], 0)?;
        let alone = read_back(&out[start..])?;
        prop_assert_eq!(alone.own_ids, vec![None]);
        prop_assert_eq!(alone.parser.last_event_id(), "");
        prop_assert!(!alone.retry_seen);
        prop_assert_eq!(alone.parser.retry(), None);
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
        let read = read_back(&out)?;
        prop_assert_eq!(read.events, expected);
        prop_assert_eq!(read.parser.last_event_id(), last_id);
        prop_assert!(!read.retry_seen);
        prop_assert_eq!(read.parser.retry(), None);
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
                let read = read_back(&out[1..])?;
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
        read_back(&out).unwrap().events,
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
