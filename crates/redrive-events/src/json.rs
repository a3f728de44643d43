//! JSON documents as the broker accepts them: no object with the same key twice.
//! serde_json keeps the last of duplicate keys silently, so two readers of one document
//! (the publisher's, the subscriber's) could see two different values.

use std::collections::HashSet;

/// Refuses a JSON document in which an object has the same key twice (after unescaping).
/// Nesting is bounded by serde_json's recursion limit (128 levels), so the walk cannot
/// exhaust the stack.
pub fn check_unique_keys(bytes: &[u8]) -> Result<(), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde::Deserialize::deserialize(&mut de).and_then(|UniqueKeys| de.end())
}

/// Any JSON value, checked for duplicate keys and otherwise discarded.
struct UniqueKeys;

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueKeysVisitor)
    }
}

struct UniqueKeysVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueKeysVisitor {
    type Value = UniqueKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_i64<E>(self, _: i64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_u64<E>(self, _: u64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_f64<E>(self, _: f64) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_str<E>(self, _: &str) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_unit<E>(self) -> Result<UniqueKeys, E> {
        Ok(UniqueKeys)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<UniqueKeys, A::Error> {
        while seq.next_element::<UniqueKeys>()?.is_some() {}
        Ok(UniqueKeys)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<UniqueKeys, A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if seen.contains(&key) {
                return Err(serde::de::Error::custom(format_args!(
                    "duplicate key `{key}`"
                )));
            }
            map.next_value::<UniqueKeys>()?;
            seen.insert(key);
        }
        Ok(UniqueKeys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        assert!(check_unique_keys(br#"{"a":1,"b":[{"a":2}],"c":{"a":3}}"#).is_ok());
        for bad in [
            &br#"{"a":1,"a":2}"#[..],
            br#"[{"id":".3","id":"b"}]"#,
            br#"{"a":1,"\u0061":2}"#,
        ] {
            assert!(
                check_unique_keys(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
