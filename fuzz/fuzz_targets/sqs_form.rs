//! The query protocol's folding of flattened parameters (`Attribute.1.Name`, ...) into the
//! JSON 1.0 input shape, on raw pairs (no URL decoding in the way, so nesting and odd keys
//! are reached at once).
//!
//! Input layout: pairs separated by `&`, key and value by the first `=` (bytes read as
//! lossy UTF-8).
//!
//! What must hold: no panic; parameters with a plain name (no `.`, not one of the names
//! the fold renames, not an index) come out unchanged, the last one of a name winning, as
//! the JSON protocol would carry them.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

/// The function under test; re-point here if its signature changes. `None`: refused
/// (a name too long or too deeply dotted), which is an answer too.
fn form_to_json(pairs: Vec<(String, String)>) -> Option<Map<String, Value>> {
    redrive_sqs::protocol::form_to_json(pairs.into_iter()).ok()
}

/// Names the fold renames or reshapes.
fn is_special(k: &str) -> bool {
    matches!(
        k,
        "Attribute"
            | "Tag"
            | "MessageAttribute"
            | "MessageSystemAttribute"
            | "AttributeName"
            | "MessageAttributeName"
            | "MessageSystemAttributeName"
            | "TagKey"
    ) || k.ends_with("BatchRequestEntry")
}

/// Names the renamed ones take (a plain parameter of that name meets them).
fn is_rename_target(k: &str) -> bool {
    matches!(
        k,
        "Attributes"
            | "Tags"
            | "MessageAttributes"
            | "MessageSystemAttributes"
            | "AttributeNames"
            | "MessageAttributeNames"
            | "MessageSystemAttributeNames"
            | "TagKeys"
            | "Entries"
    )
}

fn is_plain(k: &str) -> bool {
    !k.is_empty()
        && k.bytes().all(|b| b.is_ascii_alphanumeric())
        && !k.bytes().all(|b| b.is_ascii_digit())
        && !is_special(k)
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let pairs: Vec<(String, String)> = text
        .split('&')
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => (p.to_owned(), String::new()),
        })
        .collect();
    let Some(out) = form_to_json(pairs.clone()) else {
        return;
    };
    let mut expected = Map::new();
    let mut others = false;
    for (k, v) in &pairs {
        if is_plain(k) {
            expected.insert(k.clone(), Value::String(v.clone()));
        } else {
            others = true;
        }
    }
    if !others {
        assert_eq!(out, expected, "plain parameters pass through unchanged");
    } else {
        // Other parameters must not disturb plain ones whose name nothing else shares.
        for (k, v) in &expected {
            let shared = is_rename_target(k)
                || pairs
                    .iter()
                    .any(|(o, _)| o != k && o.split('.').next() == Some(k.as_str()));
            if !shared {
                assert_eq!(out.get(k), Some(v), "plain parameter {k:?} kept");
            }
        }
    }
});
