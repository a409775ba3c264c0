//! The SSE decoder on arbitrary bytes: `gapless::sse::Parser` never panics,
//! gives the same events and ends in the same state however the bytes are
//! split into chunks, dispatches only well-formed events, and dispatches
//! the same events as the independent `eventsource-stream` decoder on every
//! input where that crate follows the HTML standard.

#![no_main]

use arbitrary::Arbitrary;
use gapless_fuzz::decoders::{self, Dispatched};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    /// Where to split the stream (each taken modulo its length + 1).
    cuts: Vec<u16>,
    /// The rest of the input.
    stream: &'a [u8],
}

fuzz_target!(|input: Input<'_>| {
    let stream = input.stream;
    let mut at: Vec<usize> = input
        .cuts
        .iter()
        .map(|&cut| usize::from(cut) % (stream.len() + 1))
        .collect();
    at.sort_unstable();
    let mut chunks = Vec::with_capacity(at.len() + 1);
    let mut start = 0;
    for end in at {
        chunks.push(&stream[start..end]);
        start = end;
    }
    chunks.push(&stream[start..]);

    let (events, parser) = decoders::parse(&chunks);
    let state = |p: &gapless::sse::Parser| (p.retry(), p.last_event_id().to_owned(), p.comments());
    let (whole, whole_parser) = decoders::parse(&[stream]);
    assert_eq!(events, whole, "the chunking changed the events");
    assert_eq!(state(&parser), state(&whole_parser));
    let bytes: Vec<&[u8]> = stream.chunks(1).collect();
    let (bytewise, byte_parser) = decoders::parse(&bytes);
    assert_eq!(events, bytewise, "byte by byte changed the events");
    assert_eq!(state(&parser), state(&byte_parser));

    for event in &events {
        assert!(!event.event_type.is_empty() && !event.event_type.contains(['\r', '\n']));
        assert!(!event.data.contains('\r'));
        assert!(!event.last_event_id.contains(['\0', '\r', '\n']));
        if let Some(id) = &event.id {
            assert_eq!(id, &event.last_event_id);
        }
    }

    if decoders::oracle_conforms_on(stream) {
        let theirs = decoders::oracle(&chunks).expect("eventsource-stream refused UTF-8");
        let theirs: Vec<Dispatched> = theirs.iter().map(Dispatched::from).collect();
        let ours: Vec<Dispatched> = events.iter().map(Dispatched::from).collect();
        assert_eq!(
            ours, theirs,
            "gapless::sse::Parser (left), eventsource-stream (right)"
        );
    }
});
