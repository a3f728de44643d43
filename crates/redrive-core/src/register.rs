//! The idempotency register: for every message type that may be replayed, whether its
//! handler is idempotent, and the rule that judges a dead-lettered message by it.
//!
//! Republishing a dead letter re-runs its handler, so only a handler written to converge
//! on the same state when run twice may see a replay. The register states that answer per
//! type, and nothing inherits a replayable default: a type without an entry is
//! [`RegisterAnswer::NotRegistered`] (the replay quarantines it), exactly like a type
//! whose handler is [`Idempotency::NotIdempotent`].
//!
//! # Keys
//!
//! An entry is keyed by a [`RegisterKey`]:
//!
//! - [`RegisterKey::Type`]: a message type, valid for every entity. A message's type is
//!   its `message_type` (`type` on the wire, as it was sent); a topic delivery carries its
//!   CloudEvents `type` there, so an event's type is always its CloudEvents `type`.
//! - [`RegisterKey::Entity`]: a queue's own `*` entry, for that queue's messages sent
//!   without a type (a CloudEvent always has one, so it never uses it).
//!
//! Text form (the CLI, the API path, the config file): a type is written as it is
//! (`com.example.order.created`); a queue's entry is `<queue>:*` (`orders:*`). A type is
//! 1 to [`MAX_TYPE_LEN`] ASCII letters, digits, `.`, `-` and `_`, starting with a letter or
//! digit, so it never contains `:` or `*` and the two forms cannot be confused.
//!
//! # The rule ([`judge`])
//!
//! A message with a type is judged by that type's entry, and only by it; a message
//! without a type by its entity's `*` entry. Nothing else falls back: a type without an
//! entry is not registered even when its entity has a `*` entry, and a message without a
//! type on an entity without a `*` entry is not registered.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::name::EntityName;

/// Longest message type the register accepts (bytes).
pub const MAX_TYPE_LEN: usize = 256;
/// Longest ordering attribute (bytes).
pub const MAX_ORDERING_ATTRIBUTE_LEN: usize = 128;
/// Most entries the register holds (so that a listing is one bounded page).
pub const MAX_REGISTER_ENTRIES: usize = 10_000;

/// Whether a type's handler may be run again by a replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Idempotency {
    /// Running the handler twice converges on the same state: replayable.
    Idempotent,
    /// A second run duplicates the work: never replayed.
    NotIdempotent,
}

impl Idempotency {
    /// The answer's name on the wire, in the CLI and in the store.
    pub fn as_str(self) -> &'static str {
        match self {
            Idempotency::Idempotent => "idempotent",
            Idempotency::NotIdempotent => "not_idempotent",
        }
    }
}

impl fmt::Display for Idempotency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Idempotency {
    type Err = RegisterError;
    fn from_str(s: &str) -> Result<Self, RegisterError> {
        match s {
            "idempotent" => Ok(Idempotency::Idempotent),
            "not_idempotent" => Ok(Idempotency::NotIdempotent),
            _ => Err(RegisterError::BadAnswer(s.to_owned())),
        }
    }
}

/// What a register entry is for: a type on every entity, or one queue's untyped messages.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RegisterKey {
    /// A message type (CloudEvents `type` for events), on every entity.
    Type(String),
    /// The `*` entry of one queue: its messages without a type.
    Entity(EntityName),
}

impl fmt::Display for RegisterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegisterKey::Type(t) => f.write_str(t),
            RegisterKey::Entity(e) => write!(f, "{e}:*"),
        }
    }
}

impl FromStr for RegisterKey {
    type Err = RegisterError;
    fn from_str(s: &str) -> Result<Self, RegisterError> {
        if let Some(entity) = s.strip_suffix(":*") {
            return entity
                .parse::<EntityName>()
                .map(RegisterKey::Entity)
                .map_err(|e| RegisterError::BadKey(s.to_owned(), e.to_string()));
        }
        check_type(s)?;
        Ok(RegisterKey::Type(s.to_owned()))
    }
}

impl Serialize for RegisterKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RegisterKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Whether `t` may be a register type: 1 to [`MAX_TYPE_LEN`] ASCII letters, digits, `.`,
/// `-`, `_`, starting with a letter or digit.
pub fn check_type(t: &str) -> Result<(), RegisterError> {
    let ok = !t.is_empty()
        && t.len() <= MAX_TYPE_LEN
        && t.as_bytes()[0].is_ascii_alphanumeric()
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if ok {
        Ok(())
    } else {
        Err(RegisterError::BadKey(
            t.to_owned(),
            format!(
                "a type is 1 to {MAX_TYPE_LEN} ASCII letters, digits, '.', '-' or '_', \
                 starting with a letter or digit; a queue's own entry is written <queue>:*"
            ),
        ))
    }
}

/// One entry of the register.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterEntry {
    /// What it is for.
    pub key: RegisterKey,
    /// Whether the handler may be replayed.
    pub answer: Idempotency,
    /// The attribute (a property, or a CloudEvents extension attribute) holding the
    /// ordering value a time-dependent handler compares before it writes, so that a stale
    /// replayed event does not overwrite a newer state. `None`: the handler needs none.
    pub ordering_attribute: Option<String>,
}

impl RegisterEntry {
    /// A valid entry: an ordering attribute is 1 to [`MAX_ORDERING_ATTRIBUTE_LEN`] ASCII
    /// letters, digits, `.`, `-`, `_`, and only an idempotent type has one (a type that is
    /// never replayed orders nothing).
    pub fn new(
        key: RegisterKey,
        answer: Idempotency,
        ordering_attribute: Option<String>,
    ) -> Result<Self, RegisterError> {
        if let Some(a) = &ordering_attribute {
            let ok = !a.is_empty()
                && a.len() <= MAX_ORDERING_ATTRIBUTE_LEN
                && a.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
            if !ok {
                return Err(RegisterError::BadOrderingAttribute(a.clone()));
            }
            if answer == Idempotency::NotIdempotent {
                return Err(RegisterError::OrderingWithoutReplay);
            }
        }
        Ok(RegisterEntry {
            key,
            answer,
            ordering_attribute,
        })
    }
}

/// What the register says about one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterAnswer {
    /// Replayable; a time-dependent handler needs the message's `ordering` attribute.
    Idempotent {
        /// The entry's ordering attribute.
        ordering: Option<String>,
    },
    /// Its entry says the handler is not idempotent: never replayed.
    NotIdempotent,
    /// No entry applies: never replayed (nothing inherits a replayable default).
    NotRegistered,
}

/// The register as a lookup table.
pub type Register = BTreeMap<RegisterKey, RegisterEntry>;

/// Builds the lookup table from stored entries.
pub fn register_of(entries: impl IntoIterator<Item = RegisterEntry>) -> Register {
    entries.into_iter().map(|e| (e.key.clone(), e)).collect()
}

/// Judges a message of `entity` with `message_type` (see the module's rule): the exact
/// type's entry; for a message without a type (or with an empty one), its entity's `*`
/// entry; otherwise [`RegisterAnswer::NotRegistered`]. No other fallback exists.
pub fn judge(
    register: &Register,
    entity: &EntityName,
    message_type: Option<&str>,
) -> RegisterAnswer {
    let key = match message_type.filter(|t| !t.is_empty()) {
        Some(t) => RegisterKey::Type(t.to_owned()),
        None => RegisterKey::Entity(entity.clone()),
    };
    match register.get(&key) {
        Some(e) => match e.answer {
            Idempotency::Idempotent => RegisterAnswer::Idempotent {
                ordering: e.ordering_attribute.clone(),
            },
            Idempotency::NotIdempotent => RegisterAnswer::NotIdempotent,
        },
        None => RegisterAnswer::NotRegistered,
    }
}

/// A register key, answer or entry that is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// Neither a valid type nor `<queue>:*`.
    #[error("invalid register key {0:?}: {1}")]
    BadKey(String, String),
    /// Not `idempotent` or `not_idempotent`.
    #[error("invalid answer {0:?} (expected idempotent or not_idempotent)")]
    BadAnswer(String),
    /// An ordering attribute that is empty, too long, or has other characters.
    #[error(
        "invalid ordering attribute {0:?}: 1 to {MAX_ORDERING_ATTRIBUTE_LEN} ASCII letters, digits, '.', '-' or '_'"
    )]
    BadOrderingAttribute(String),
    /// An ordering attribute on a type that is never replayed.
    #[error(
        "an ordering attribute is only for an idempotent type (a not_idempotent type is never replayed)"
    )]
    OrderingWithoutReplay,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> RegisterKey {
        s.parse().expect("valid key")
    }

    fn name(s: &str) -> EntityName {
        s.parse().expect("valid name")
    }

    fn entry(k: &str, a: Idempotency, o: Option<&str>) -> RegisterEntry {
        RegisterEntry::new(key(k), a, o.map(str::to_owned)).expect("valid entry")
    }

    #[test]
    fn keys_parse_and_print_round_trip() {
        assert_eq!(
            key("com.example.order-created_v1"),
            RegisterKey::Type("com.example.order-created_v1".into())
        );
        assert_eq!(key("orders:*"), RegisterKey::Entity(name("orders")));
        for s in ["Microsoft.Storage.BlobCreated", "orders:*", "a"] {
            assert_eq!(key(s).to_string(), s);
        }
    }

    #[test]
    fn bad_keys_are_refused() {
        let long = "a".repeat(MAX_TYPE_LEN + 1);
        for s in [
            "", "*", ":*", "a b", "a:b", "a*", ".a", "-a", "a/b", "é", &long,
        ] {
            assert!(
                matches!(s.parse::<RegisterKey>(), Err(RegisterError::BadKey(..))),
                "{s:?}"
            );
        }
        assert!("a".repeat(MAX_TYPE_LEN).parse::<RegisterKey>().is_ok());
    }

    #[test]
    fn answers_parse_and_entries_are_checked() {
        assert_eq!("idempotent".parse(), Ok(Idempotency::Idempotent));
        assert_eq!("not_idempotent".parse(), Ok(Idempotency::NotIdempotent));
        assert!(matches!(
            "yes".parse::<Idempotency>(),
            Err(RegisterError::BadAnswer(_))
        ));
        for bad in ["", "a b", &"x".repeat(MAX_ORDERING_ATTRIBUTE_LEN + 1)] {
            assert_eq!(
                RegisterEntry::new(key("t"), Idempotency::Idempotent, Some(bad.to_owned())),
                Err(RegisterError::BadOrderingAttribute(bad.to_owned()))
            );
        }
        assert_eq!(
            RegisterEntry::new(key("t"), Idempotency::NotIdempotent, Some("seq".into())),
            Err(RegisterError::OrderingWithoutReplay)
        );
    }

    #[test]
    fn the_exact_type_decides() {
        let reg = register_of([
            entry("order.created", Idempotency::Idempotent, Some("sequence")),
            entry("webhook.process", Idempotency::NotIdempotent, None),
        ]);
        let q = name("orders");
        assert_eq!(
            judge(&reg, &q, Some("order.created")),
            RegisterAnswer::Idempotent {
                ordering: Some("sequence".into())
            }
        );
        assert_eq!(
            judge(&reg, &q, Some("webhook.process")),
            RegisterAnswer::NotIdempotent
        );
    }

    #[test]
    fn nothing_falls_back() {
        // The entity's `*` entry is for its untyped messages only: an unknown type on
        // that entity is not registered, and so is an untyped message elsewhere.
        let reg = register_of([
            entry("orders:*", Idempotency::Idempotent, None),
            entry("order.created", Idempotency::Idempotent, None),
        ]);
        let q = name("orders");
        assert_eq!(
            judge(&reg, &q, Some("order.deleted")),
            RegisterAnswer::NotRegistered
        );
        assert_eq!(
            judge(&reg, &q, Some("Order.Created")),
            RegisterAnswer::NotRegistered
        );
        assert_eq!(
            judge(&reg, &name("billing"), None),
            RegisterAnswer::NotRegistered
        );
        assert_eq!(
            judge(&Register::new(), &q, Some("order.created")),
            RegisterAnswer::NotRegistered
        );
    }

    #[test]
    fn an_untyped_message_uses_its_entitys_entry() {
        let reg = register_of([
            entry("orders:*", Idempotency::Idempotent, None),
            entry("billing:*", Idempotency::NotIdempotent, None),
        ]);
        assert_eq!(
            judge(&reg, &name("orders"), None),
            RegisterAnswer::Idempotent { ordering: None }
        );
        assert_eq!(
            judge(&reg, &name("orders"), Some("")),
            RegisterAnswer::Idempotent { ordering: None }
        );
        assert_eq!(
            judge(&reg, &name("billing"), None),
            RegisterAnswer::NotIdempotent
        );
    }
}
