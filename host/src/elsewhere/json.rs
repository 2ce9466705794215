//! JSON text from elsewhere — an app's answer, a worker's line — weighed
//! before it is parsed.
//!
//! Parsed into a `serde_json::Value`, every value of a text takes at least
//! 32 bytes whatever its own length (an array's slots grow by doubling, so
//! up to 64): `[0,0,…]`, two bytes a value, becomes 16 to 32 times its size.
//! An app that answers 60 MB of zeros would make its worker, and then its
//! launcher, hold a GiB or two for that one answer. So a text's values are
//! counted first, in one pass that allocates nothing ([`values`]), and a
//! text with more than its reader takes is refused before any of it is
//! parsed.

/// The most values a text may make: one, and one more for each `[`, `{`
/// and `,` outside a string. (Every value is the text's own, an array's
/// element or an object's member; a list of `k ≥ 1` of them has its bracket
/// and `k - 1` commas: exact, but for one more for each empty list or
/// object.) For a text that is not JSON, what a parser makes of it before
/// it gives up is counted too.
pub fn values(text: &[u8]) -> usize {
    let (mut n, mut within, mut escaped) = (1usize, false, false);
    for &b in text {
        if within {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                within = false;
            }
        } else {
            match b {
                b'"' => within = true,
                b'[' | b'{' | b',' => n += 1,
                _ => {}
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::values;

    /// What `serde_json` makes of `text`: its values, and how many of them
    /// are empty lists or objects.
    fn made(text: &str) -> (usize, usize) {
        fn count(v: &serde_json::Value) -> (usize, usize) {
            let inner: Vec<(usize, usize)> = match v {
                serde_json::Value::Array(a) => a.iter().map(count).collect(),
                serde_json::Value::Object(o) => o.values().map(count).collect(),
                _ => return (1, 0),
            };
            let empty = usize::from(inner.is_empty());
            inner.iter().fold((1, empty), |(n, e), (m, f)| (n + m, e + f))
        }
        count(&serde_json::from_str(text).unwrap())
    }

    #[test]
    fn values_are_what_a_parser_makes_and_one_more_for_each_empty_list() {
        for text in [
            "0",
            "\"a\"",
            "[]",
            "{}",
            "[0]",
            "[0,0,0]",
            "[[],[[]],{}]",
            r#"{"a":1,"b":[1,2,{"c":null}]}"#,
            r#"  [ 1 , "x" , true ]  "#,
        ] {
            let (counted, (parsed, empty)) = (values(text.as_bytes()), made(text));
            assert_eq!(counted, parsed + empty, "{text}: counted {counted}, a parser makes {parsed} ({empty} empty)");
        }
        let zeros = format!("[{}0]", "0,".repeat(99_999));
        assert_eq!(values(zeros.as_bytes()), 100_001);
        assert_eq!(made(&zeros), (100_001, 0));
    }

    #[test]
    fn what_a_string_holds_is_not_counted_and_its_escapes_do_not_end_it() {
        assert_eq!(values(br#""[,{,[,{""#), 1);
        assert_eq!(values(br#"["a\",[,{", "\\", ",,"]"#), 4);
        assert_eq!(values(br#""\\\"[""#), 1);
        // A text cut inside a string counts nothing after its quote.
        assert_eq!(values(br#"["a,b"#), 2);
    }
}
