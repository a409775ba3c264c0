//! Helpers shared by the fuzz targets.
//!
//! The SSE targets decode with `gapless::sse::Parser`, and check it against
//! `eventsource-stream`, an event-stream decoder by another author, on the
//! inputs where that crate follows the HTML standard (the engine's
//! `tests/sse_oracle.rs` lists where it does not); [`decoders`] is the same
//! module those tests use.

#[path = "../../tests/decoders/mod.rs"]
pub mod decoders;

/// `text` with every `\r\n` and every lone `\r` replaced by `\n`: what an
/// event-stream parser gives back for a payload's line breaks.
pub fn normalize_newlines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' {
            if chars.peek() == Some(&'\n') {
                chars.next();
            }
            out.push('\n');
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `bytes` is exactly the event-ID wire form
/// `<16 lowercase hex>-<decimal u64 without sign or leading zeros>`,
/// decided without `gapless`'s parser.
pub fn is_canonical_event_id(bytes: &[u8]) -> bool {
    let Some((epoch, seq)) = bytes.split_at_checked(16) else {
        return false;
    };
    let Some((b'-', seq)) = seq.split_first() else {
        return false;
    };
    let hex = |b: &u8| b.is_ascii_digit() || (b'a'..=b'f').contains(b);
    if !epoch.iter().all(hex) || seq.is_empty() || !seq.iter().all(u8::is_ascii_digit) {
        return false;
    }
    if seq.len() > 1 && seq[0] == b'0' {
        return false;
    }
    // u64::MAX has 20 digits; compare as equal-length digit strings.
    const MAX: &[u8] = b"18446744073709551615";
    seq.len() < MAX.len() || (seq.len() == MAX.len() && seq <= MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newline_normalization() {
        assert_eq!(normalize_newlines("a\r\nb\rc\n\r\r\nd"), "a\nb\nc\n\n\nd");
    }

    #[test]
    fn canonical_ids() {
        assert!(is_canonical_event_id(b"00c0ffee12345678-0"));
        assert!(is_canonical_event_id(
            b"ffffffffffffffff-18446744073709551615"
        ));
        assert!(!is_canonical_event_id(
            b"ffffffffffffffff-18446744073709551616"
        ));
        assert!(!is_canonical_event_id(b"ffffffffffffffff-01"));
        assert!(!is_canonical_event_id(b"fffffffffffffffF-1"));
        assert!(!is_canonical_event_id(b"ffffffffffffffff-"));
    }
}
