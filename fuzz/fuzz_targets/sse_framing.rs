//! SSE framing (DESIGN §6): whatever the payload, `sse::encode` either
//! refuses it (not UTF-8, or a bad event type) and leaves `out` as it was,
//! or appends exactly one event that an independent WHATWG event-stream
//! interpreter (`gapless_fuzz::EventStream`) reads back with the same ID,
//! the same type and the payload's text with line breaks normalised to LF,
//! and nothing else: no retry, no other field, no second event.

#![no_main]

use arbitrary::Arbitrary;
use gapless::sse::{self, SseError};
use gapless::EventId;
use gapless_fuzz::{normalize_newlines, EventStream};
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
    // A stream starts with the framed event (a leading BOM would be dropped
    // by the interpreter, but the frame starts with "id: ").
    let stream = EventStream::interpret(framed);
    let expected = gapless_fuzz::Dispatched {
        event_type: input.event_type.unwrap_or("message").to_owned(),
        data: normalize_newlines(payload),
        last_event_id: id.to_string(),
    };
    assert_eq!(
        stream.events,
        [expected],
        "{:?}",
        String::from_utf8_lossy(framed)
    );
    assert_eq!(stream.last_event_id_buffer, id.to_string());
    assert_eq!(stream.retry, None, "a retry field got through");
    assert!(
        stream.unknown_fields.is_empty(),
        "fields {:?}",
        stream.unknown_fields
    );
    assert_eq!(stream.ignored_ids, 0);
    assert_eq!(stream.comments, 0);
    assert!(
        stream.trailing.is_empty() && !stream.pending,
        "event not closed"
    );

    // Framing is self-delimiting: the same event twice is two events.
    let twice = [framed, framed].concat();
    assert_eq!(EventStream::interpret(&twice).events.len(), 2);
});
