//! SSE framing (DESIGN §6): whatever the payload, `sse::encode` either
//! refuses it (not UTF-8, or a bad event type) and leaves `out` as it was,
//! or appends exactly one event that `gapless::sse::Parser` and the
//! independent `eventsource-stream` decoder both read back with the same ID,
//! the same type and the payload's text with line breaks normalised to LF,
//! and nothing else: its lines are `id:`, `event:` and `data:` fields and
//! one closing blank line, with no retry, comment or second event.

#![no_main]

use arbitrary::Arbitrary;
use gapless::sse::{self, SseError};
use gapless::EventId;
use gapless_fuzz::decoders::{self, Dispatched};
use gapless_fuzz::normalize_newlines;
use libfuzzer_sys::fuzz_target;

/// Borrowed slices, so that payload bytes are input bytes (a `Vec<u8>`
/// would spend a continuation byte on each).
#[derive(Arbitrary, Debug)]
struct Input<'a> {
    epoch: u64,
    seq: u64,
    /// `None` for a plain `message` event (the common case).
    event_type: Option<&'a str>,
    /// Bytes already in the output buffer, which encode must not touch.
    prefix: &'a [u8],
    /// The rest of the input.
    payload: &'a [u8],
}

fuzz_target!(|input: Input<'_>| {
    let id = EventId {
        epoch: input.epoch,
        seq: input.seq,
    };
    let mut out = input.prefix.to_vec();
    let result = sse::encode(&mut out, &id, input.event_type, input.payload);

    let text = std::str::from_utf8(input.payload);
    let type_ok = input
        .event_type
        .is_none_or(|t| !t.is_empty() && !t.contains(['\r', '\n']));
    match result {
        Err(SseError::NotUtf8 { at }) => {
            let error = text.expect_err("refused valid UTF-8");
            assert_eq!(at, error.valid_up_to());
            assert_eq!(out, input.prefix, "a refusal changed `out`");
            return;
        }
        Err(SseError::BadEventType) => {
            assert!(text.is_ok() && !type_ok, "refused a good event type");
            assert_eq!(out, input.prefix, "a refusal changed `out`");
            return;
        }
        Ok(()) => assert!(text.is_ok() && type_ok, "accepted what it must refuse"),
        // `SseError` is non-exhaustive: a refusal this target does not know
        // is a finding, not something to skip.
        Err(other) => panic!("unexpected refusal {other:?}"),
    }
    let payload = text.unwrap();

    assert!(
        out.starts_with(input.prefix),
        "encode changed bytes already in `out`"
    );
    let framed = &out[input.prefix.len()..];
    assert!(
        std::str::from_utf8(framed).is_ok(),
        "framed event is not UTF-8"
    );
    // The frame's own lines, which no decoder reports: LF line ends only,
    // then `id: `, `event: ` and `data: ` fields (one `id`), then one blank
    // line: no unknown field, no partial line, nothing after the event.
    assert!(
        framed.ends_with(b"\n\n") && !framed.contains(&b'\r'),
        "{:?}",
        String::from_utf8_lossy(framed)
    );
    let lines: Vec<&[u8]> = framed[..framed.len() - 2].split(|&b| b == b'\n').collect();
    for line in &lines {
        assert!(
            [&b"id: "[..], b"event: ", b"data: "]
                .iter()
                .any(|field| line.starts_with(field)),
            "line {:?}",
            String::from_utf8_lossy(line)
        );
    }
    assert_eq!(lines.iter().filter(|l| l.starts_with(b"id: ")).count(), 1);

    let (events, parser) = decoders::parse(&[framed]);
    let expected = Dispatched {
        event_type: input.event_type.unwrap_or("message").to_owned(),
        data: normalize_newlines(payload),
        last_event_id: id.to_string(),
    };
    let read: Vec<Dispatched> = events.iter().map(Dispatched::from).collect();
    assert_eq!(read, [expected], "{:?}", String::from_utf8_lossy(framed));
    assert_eq!(events[0].id, Some(id.to_string()));
    assert_eq!(parser.last_event_id(), id.to_string());
    assert_eq!(parser.retry(), None, "a retry field got through");
    assert_eq!(parser.comments(), 0);
    let bytes: Vec<&[u8]> = framed.chunks(1).collect();
    assert_eq!(decoders::parse(&bytes).0, events, "read byte by byte");

    assert!(decoders::oracle_conforms_on(framed));
    let theirs = decoders::oracle(&[framed]).expect("eventsource-stream refused the frame");
    let theirs: Vec<Dispatched> = theirs.iter().map(Dispatched::from).collect();
    assert_eq!(theirs, read, "eventsource-stream reads it otherwise");

    // Framing is self-delimiting: the same event twice is two events.
    let twice = [framed, framed].concat();
    assert_eq!(decoders::parse(&[&twice]).0.len(), 2);
});
