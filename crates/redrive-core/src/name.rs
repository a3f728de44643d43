//! Validated entity names (queues, and later topics and subscriptions).

use std::fmt;
use std::str::FromStr;

/// A queue (or other entity) name: 1 to 80 characters of ASCII letters, digits, `-`, `_` and
/// `.`, starting with a letter or digit. The same rule as SQS queue names (which allows the
/// `.fifo` suffix), so every native queue is addressable through the SQS endpoint too.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntityName(String);

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid name {name:?}: {why}")]
pub struct NameError {
    /// The name as given.
    pub name: String,
    /// What rule it breaks.
    pub why: &'static str,
}

/// Longest accepted name.
pub const MAX_NAME_LEN: usize = 80;

impl FromStr for EntityName {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, NameError> {
        let err = |why| NameError {
            name: s.to_owned(),
            why,
        };
        if s.is_empty() {
            return Err(err("must not be empty"));
        }
        if s.len() > MAX_NAME_LEN {
            return Err(err("must be at most 80 characters"));
        }
        if !s.as_bytes()[0].is_ascii_alphanumeric() {
            return Err(err("must start with a letter or digit"));
        }
        if !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return Err(err("may contain only letters, digits, '-', '_' and '.'"));
        }
        Ok(EntityName(s.to_owned()))
    }
}

impl EntityName {
    /// The name as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EntityName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for EntityName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl serde::Serialize for EntityName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for EntityName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_sqs_style_names_and_refuses_others() {
        for ok in [
            "orders",
            "orders-dlq",
            "a",
            "Orders_2.fifo",
            &"x".repeat(80),
        ] {
            assert!(ok.parse::<EntityName>().is_ok(), "{ok}");
        }
        for bad in ["", "-x", ".x", "a b", "a/b", "ä", &"x".repeat(81), "a$"] {
            assert!(bad.parse::<EntityName>().is_err(), "{bad}");
        }
    }
}
