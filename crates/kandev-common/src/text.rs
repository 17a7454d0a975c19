//! Text on its way to Postgres, which refuses NUL characters in `text` and
//! `\u0000` in `jsonb`. Agents may write anything; what they wrote must
//! never be the reason a run's outcome is not stored.

use std::borrow::Cow;

/// What a NUL character becomes.
pub const NUL_REPLACEMENT: char = '\u{FFFD}';

/// `text` with every NUL character replaced by U+FFFD.
pub fn without_nul(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', &NUL_REPLACEMENT.to_string()))
    } else {
        Cow::Borrowed(text)
    }
}

/// Replaces NUL characters in every string (and key) of a JSON value.
pub fn strip_nul_json(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::String(s) => {
            if let Cow::Owned(clean) = without_nul(s) {
                *s = clean;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nul_json),
        Value::Object(map) => {
            if map.keys().any(|k| k.contains('\0')) {
                let entries = std::mem::take(map);
                for (k, mut v) in entries {
                    strip_nul_json(&mut v);
                    map.insert(without_nul(&k).into_owned(), v);
                }
            } else {
                map.values_mut().for_each(strip_nul_json);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nul_characters_are_replaced_everywhere() {
        assert!(matches!(without_nul("clean"), Cow::Borrowed("clean")));
        assert_eq!(without_nul("a\0b"), "a\u{FFFD}b");
        let mut value = json!({"summary": "x\0y", "k\0": ["\0", 1, {"n": "\0"}]});
        strip_nul_json(&mut value);
        assert_eq!(
            value,
            json!({"summary": "x\u{FFFD}y", "k\u{FFFD}": ["\u{FFFD}", 1, {"n": "\u{FFFD}"}]})
        );
        assert!(!value.to_string().contains("\\u0000"));
    }
}
