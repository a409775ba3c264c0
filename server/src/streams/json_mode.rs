//! JSON mode (`Content-Type: application/json`): an append is validated,
//! a top-level array is flattened one level into its elements, and a read
//! answers every message in one JSON array.
//!
//! One append is one ring event whose payload is its values' minified
//! texts joined by `,` (what goes between `[` and `]` on a read), so a
//! read only joins payloads and never re-encodes a value.

use crate::json::minify;
use serde_json::value::RawValue;

/// Why an append is not JSON the stream takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum JsonRefusal {
    /// The body is not one JSON value.
    Invalid(String),
    /// `[]` on an append (it would append nothing).
    EmptyArray,
}

/// The payload an append of `body` stores, or `None` for `[]` when
/// `initial` (a create's body may be empty of values).
///
/// The body is validated without building a tree (serde's `RawValue`
/// borrows it) and minified once: an array's minified text is its
/// elements' minified texts joined by `,` between its brackets, so the
/// payload is that text without them. What it allocates is the payload
/// alone, at most the body's length: the transient memory of a JSON body
/// is bounded by the body.
pub(crate) fn payload(body: &[u8], initial: bool) -> Result<Option<Vec<u8>>, JsonRefusal> {
    let value: &RawValue =
        serde_json::from_slice(body).map_err(|e| JsonRefusal::Invalid(e.to_string()))?;
    let mut text = minify(value.get().as_bytes());
    if text.first() != Some(&b'[') {
        return Ok(Some(text));
    }
    if text == b"[]" {
        return match initial {
            true => Ok(None),
            false => Err(JsonRefusal::EmptyArray),
        };
    }
    // `[` + elements + `]`: the elements, in place.
    text.pop();
    text.remove(0);
    Ok(Some(text))
}

/// The values of one stored payload, each as its JSON text (for a fork's
/// sub-offset, which cuts an append after its first values).
pub(crate) fn values(payload: &[u8]) -> Option<Vec<String>> {
    let mut wrapped = Vec::with_capacity(payload.len() + 2);
    wrapped.push(b'[');
    wrapped.extend_from_slice(payload);
    wrapped.push(b']');
    let values: Vec<&RawValue> = serde_json::from_slice(&wrapped).ok()?;
    Some(values.iter().map(|v| v.get().to_owned()).collect())
}

/// Appends `[` + the payloads joined by `,` + `]` to `out`.
pub(crate) fn array<'a>(out: &mut Vec<u8>, payloads: impl IntoIterator<Item = &'a [u8]>) {
    out.push(b'[');
    for (i, payload) in payloads.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(payload);
    }
    out.push(b']');
}

#[cfg(test)]
mod tests {
    use super::{array, payload, values, JsonRefusal};

    #[test]
    fn arrays_flatten_one_level_and_values_keep_their_text() {
        assert_eq!(
            payload(b" [ {\"a\" : 1}, [2, 3], 1e5 ] ", false).unwrap(),
            Some(b"{\"a\":1},[2,3],1e5".to_vec())
        );
        assert_eq!(
            payload(b"{\"x\": \"a b\"}", false).unwrap(),
            Some(b"{\"x\":\"a b\"}".to_vec())
        );
        assert_eq!(payload(b"[]", true).unwrap(), None);
        assert_eq!(payload(b"[ ]", false), Err(JsonRefusal::EmptyArray));
        assert!(matches!(
            payload(b"{\"a\":", false),
            Err(JsonRefusal::Invalid(_))
        ));
        assert!(matches!(
            payload(b"1 2", false),
            Err(JsonRefusal::Invalid(_))
        ));
        // Nested arrays are one value each; strings keep their brackets
        // and commas; whitespace inside strings stays.
        assert_eq!(
            payload(b"[ [ ] , \"[a, b]\" , [[1] ] ]", false).unwrap(),
            Some(b"[],\"[a, b]\",[[1]]".to_vec())
        );
        assert_eq!(payload(b"\t[\n]\r", true).unwrap(), None);
        let mut out = Vec::new();
        array(&mut out, [&b"1,2"[..], &b"{}"[..]]);
        assert_eq!(out, b"[1,2,{}]");
        assert_eq!(values(b"1,[2],\"a,b\"").unwrap(), ["1", "[2]", "\"a,b\""]);
    }
}
