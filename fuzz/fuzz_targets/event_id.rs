//! The event-ID wire form (DESIGN §6): the strict parser never panics,
//! accepts exactly the canonical strings (decided here without it), and
//! every accepted string prints back byte for byte; every `(epoch, seq)`
//! survives display then parse. The same bytes also go through the other
//! token the server parses from requests: 128-bit hex (upgrade tickets and
//! session IDs), accepted iff exactly 32 lowercase hex digits, printing back
//! identically.

#![no_main]

use gapless::error::ParseEventIdError;
use gapless::event_id::MAX_EVENT_ID_LEN;
use gapless::session::{parse_hex128, Ticket};
use gapless::EventId;
use gapless_fuzz::is_canonical_event_id;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Arbitrary bytes: never a panic, and accepted iff canonical.
    let parsed = EventId::parse(data);
    match parsed {
        Ok(id) => assert_eq!(id.to_string().as_bytes(), data, "{id:?}"),
        Err(ParseEventIdError::TooLong { len }) => {
            assert_eq!(len, data.len());
            assert!(len > MAX_EVENT_ID_LEN);
        }
        Err(_) => assert!(data.len() <= MAX_EVENT_ID_LEN),
    }
    assert_eq!(
        parsed.is_ok(),
        is_canonical_event_id(data),
        "{:?}",
        String::from_utf8_lossy(data)
    );
    // `FromStr` is the same parser.
    if let Ok(text) = std::str::from_utf8(data) {
        assert_eq!(text.parse::<EventId>(), parsed);
    }

    // The same bytes as an (epoch, seq): display then parse is the identity.
    let mut words = [0u8; 16];
    let n = data.len().min(16);
    words[..n].copy_from_slice(&data[..n]);
    let id = EventId {
        epoch: u64::from_le_bytes(words[..8].try_into().unwrap()),
        seq: u64::from_le_bytes(words[8..].try_into().unwrap()),
    };
    let text = id.to_string();
    assert!(text.len() <= MAX_EVENT_ID_LEN, "{text}");
    assert!(is_canonical_event_id(text.as_bytes()), "{text}");
    assert_eq!(EventId::parse(text.as_bytes()), Ok(id), "{text}");

    // Tickets and session IDs.
    if let Ok(text) = std::str::from_utf8(data) {
        let canonical = text.len() == 32
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        match parse_hex128(text) {
            Ok(bytes) => {
                assert!(canonical, "{text:?}");
                assert_eq!(Ticket::from_bytes(bytes).to_string(), text);
            }
            Err(_) => assert!(!canonical, "{text:?}"),
        }
    }
});
