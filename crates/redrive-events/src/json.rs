//! JSON documents as the broker accepts them: no object with the same key twice.
//! serde_json keeps the last of duplicate keys silently, so two readers of one document
//! (the publisher's, the subscriber's) could see two different values.
//!
//! [`from_slice`] reads a document in one pass, building the target while it refuses a
//! repeated key: every request body and every published event is parsed once.
//! [`check_unique_keys`] is the same rule as a check on its own (a reference for tests
//! and fuzzing).

use std::collections::HashSet;
use std::fmt;

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};

/// Reads `T` from a JSON document in one pass, refusing (as serde_json does not) an object
/// with the same key twice after unescaping, at any depth, in the parts `T` reads and in
/// those it ignores alike. Otherwise as `serde_json::from_slice`: the same errors, with
/// their position, and nesting bounded by serde_json's recursion limit (128 levels).
///
/// Object keys reach `T` as strings (every key of redrive's documents is one).
pub fn from_slice<'de, T: de::Deserialize<'de>>(bytes: &'de [u8]) -> Result<T, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = T::deserialize(Unique(&mut de))?;
    de.end()?;
    Ok(value)
}

/// [`from_slice`] that also says where in the document a value did not fit: the path of
/// the field (`policy.max_delivery_count`, `events[2].id`; empty for the document
/// itself) beside the error.
pub fn from_slice_at<'de, T: de::Deserialize<'de>>(
    bytes: &'de [u8],
) -> Result<T, (String, serde_json::Error)> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(Unique(&mut de)).map_err(|e| {
        let path = e.path().to_string();
        let e = e.into_inner();
        // Only a value that did not fit has a field; broken JSON has a position.
        let named =
            e.classify() == serde_json::error::Category::Data && path != "." && !path.contains('?');
        (if named { path } else { String::new() }, e)
    })?;
    de.end().map_err(|e| (String::new(), e))?;
    Ok(value)
}

/// A deserializer whose every object refuses a repeated key: it hands the target's
/// visitors wrapped, so that each map they walk is checked as it is read.
struct Unique<D>(D);

/// A visitor whose maps, sequences, options and enums are read through [`Unique`].
struct Checked<V>(V);

/// A seed whose value is read through [`Unique`].
struct Seed<S>(S);

/// A map access that remembers the keys it has handed out.
struct Keys<A> {
    inner: A,
    seen: HashSet<String>,
}

struct Seq<A>(A);

struct Enum<A>(A);

struct Variant<A>(A);

macro_rules! forward_deserialize {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            self.0.$method(Checked(visitor))
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Unique<D> {
    type Error = D::Error;

    forward_deserialize! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32
        deserialize_i64 deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32
        deserialize_u64 deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char
        deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
        deserialize_option deserialize_unit deserialize_seq deserialize_map
        deserialize_identifier
    }

    /// An ignored value is walked, not skipped: a repeated key inside it is refused too.
    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(Checked(visitor))
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_unit_struct(name, Checked(visitor))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_newtype_struct(name, Checked(visitor))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_tuple(len, Checked(visitor))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_tuple_struct(name, len, Checked(visitor))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_struct(name, fields, Checked(visitor))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_enum(name, variants, Checked(visitor))
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($method:ident: $ty:ty),*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.0.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Checked<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.expecting(f)
    }

    forward_visit! {
        visit_bool: bool, visit_i8: i8, visit_i16: i16, visit_i32: i32, visit_i64: i64,
        visit_i128: i128, visit_u8: u8, visit_u16: u16, visit_u32: u32, visit_u64: u64,
        visit_u128: u128, visit_f32: f32, visit_f64: f64, visit_char: char,
        visit_str: &str, visit_borrowed_str: &'de str, visit_string: String,
        visit_bytes: &[u8], visit_borrowed_bytes: &'de [u8], visit_byte_buf: Vec<u8>
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.0.visit_some(Unique(d))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.0.visit_newtype_struct(Unique(d))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.0.visit_seq(Seq(seq))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(Keys {
            inner: map,
            seen: HashSet::new(),
        })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.0.visit_enum(Enum(data))
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Unique(d))
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Keys<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let Some(key) = self.inner.next_key::<String>()? else {
            return Ok(None);
        };
        if self.seen.contains(&key) {
            return Err(de::Error::custom(format_args!("duplicate key `{key}`")));
        }
        let value = seed.deserialize(de::value::StrDeserializer::<A::Error>::new(&key))?;
        self.seen.insert(key);
        Ok(Some(value))
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.inner.next_value_seed(Seed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Seq<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.0.next_element_seed(Seed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Enum<A> {
    type Error = A::Error;
    type Variant = Variant<A::Variant>;

    fn variant_seed<V: DeserializeSeed<'de>>(
        self,
        seed: V,
    ) -> Result<(V::Value, Self::Variant), A::Error> {
        self.0
            .variant_seed(Seed(seed))
            .map(|(value, rest)| (value, Variant(rest)))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Variant<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.0.newtype_variant_seed(Seed(seed))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.0.tuple_variant(len, Checked(visitor))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.0.struct_variant(fields, Checked(visitor))
    }
}

/// Refuses a JSON document in which an object has the same key twice (after unescaping),
/// building nothing: the rule of [`from_slice`] on its own. Nesting is bounded by
/// serde_json's recursion limit (128 levels), so the walk cannot exhaust the stack.
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

    #[derive(Debug, PartialEq, serde::Deserialize)]
    struct Known {
        a: u32,
        #[serde(default)]
        props: std::collections::BTreeMap<String, serde_json::Value>,
        #[serde(default)]
        kind: Option<crate::SubscriptionKind>,
    }

    /// Documents both readers must agree on: the one-pass reader refuses exactly what the
    /// standalone check refuses, whatever part of the target reads (or skips) the object.
    const CASES: &[&str] = &[
        r#"{"a":1}"#,
        r#"{"a":1,"a":2}"#,
        r#"{"a":1,"\u0061":2}"#,
        r#"{"a":1,"props":{"x":1,"y":[{"k":1,"k":2}]}}"#,
        r#"{"a":1,"props":{"x":1,"x":1}}"#,
        r#"{"a":1,"ignored":{"deep":[{"z":1,"z":2}]}}"#,
        r#"{"a":1,"ignored":{"deep":[{"z":1,"y":2}]}}"#,
        r#"{"a":1,"kind":{"type":"pull","type":"pull"}}"#,
        r#"{"a":1,"kind":{"type":"push","endpoint":"http://x","validation":"skipped"}}"#,
    ];

    #[test]
    fn one_pass_reading_refuses_exactly_what_the_check_refuses() {
        for case in CASES {
            let bytes = case.as_bytes();
            let checked = check_unique_keys(bytes).is_ok();
            let as_value = from_slice::<serde_json::Value>(bytes);
            let as_known = from_slice::<Known>(bytes);
            assert_eq!(as_value.is_ok(), checked, "Value: {case}");
            assert_eq!(as_known.is_ok(), checked, "typed: {case}");
            if checked {
                // Otherwise it reads what serde_json reads.
                let direct: serde_json::Value = serde_json::from_slice(bytes).expect("valid");
                assert_eq!(as_value.ok(), Some(direct), "{case}");
                let direct: Known = serde_json::from_slice(bytes).expect("valid");
                assert_eq!(as_known.ok(), Some(direct), "{case}");
            } else {
                let e = as_known.err().map(|e| e.to_string()).unwrap_or_default();
                assert!(e.starts_with("duplicate key `"), "{case}: {e}");
                assert!(e.contains(" at line 1 column "), "{case}: {e}");
            }
        }
    }

    #[test]
    fn one_pass_reading_keeps_serde_json_errors_and_bounds() {
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let e = from_slice::<serde_json::Value>(deep.as_bytes()).err();
        assert!(
            e.is_some_and(|e| e.to_string().contains("recursion limit")),
            "deep nesting is refused"
        );
        let e = from_slice::<Known>(br#"{"a":"x"}"#)
            .err()
            .map(|e| e.to_string());
        let direct = serde_json::from_slice::<Known>(br#"{"a":"x"}"#)
            .err()
            .map(|e| e.to_string());
        assert_eq!(e, direct, "a type error reads as serde_json's");
        assert!(
            from_slice::<serde_json::Value>(br#"{"a":1} x"#).is_err(),
            "trailing bytes"
        );
    }
}
