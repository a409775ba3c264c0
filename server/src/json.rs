//! Compacting JSON text without re-encoding it.

/// Removes the whitespace between tokens of *valid* JSON text, leaving every
/// string, number and key order exactly as written. (Re-serialising through
/// a parsed value would sort keys, respell numbers and drop escapes.)
pub(crate) fn minify(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len());
    let mut in_string = false;
    let mut escaped = false;
    for &byte in json {
        if in_string {
            out.push(byte);
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
        } else if !matches!(byte, b' ' | b'\t' | b'\n' | b'\r') {
            if byte == b'"' {
                in_string = true;
            }
            out.push(byte);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::minify;
    use proptest::prelude::*;

    #[test]
    fn keeps_tokens_exactly_and_drops_only_insignificant_whitespace() {
        let input = b" {\"b\" : 1,\n\t\"a\": [ 1e5 , \"x \\\" y\\n\" ,\r\n 12345678901234567890123 ], \"\\u00e9 \\/\": null } ";
        assert_eq!(
            minify(input),
            b"{\"b\":1,\"a\":[1e5,\"x \\\" y\\n\",12345678901234567890123],\"\\u00e9 \\/\":null}"
        );
    }

    proptest! {
        /// Any JSON value, pretty-printed: minifying gives text that parses to
        /// the same value, contains no raw line break, and is idempotent.
        #[test]
        fn minified_json_means_the_same(value in json_value()) {
            let pretty = serde_json::to_vec_pretty(&value).unwrap();
            let compact = minify(&pretty);
            prop_assert_eq!(serde_json::from_slice::<serde_json::Value>(&compact).unwrap(), value);
            prop_assert!(!compact.contains(&b'\n') && !compact.contains(&b'\r'));
            prop_assert_eq!(minify(&compact), compact);
        }
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            ".*".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                prop::collection::btree_map(".*", inner, 0..4)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }
}
