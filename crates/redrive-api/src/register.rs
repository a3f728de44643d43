//! The idempotency register (`/v1/register`): which message types a replay may
//! republish. Operator or replayer read it; operator changes it (admin both).
//!
//! A key is a message type (`com.example.order.created`: 1 to 256 ASCII letters, digits,
//! `.`, `-`, `_`, starting with a letter or digit), valid on every entity, or a queue's
//! own entry `<queue>:*`, for that queue's messages sent without a type.

use serde::{Deserialize, Serialize};

/// `PUT /v1/register/{key}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetRegisterEntry {
    /// `idempotent` or `not_idempotent`.
    pub answer: String,
    /// The attribute holding the ordering value a time-dependent handler compares (only
    /// for `idempotent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordering_attribute: Option<String>,
}

/// A register entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterEntry {
    /// A type, or `<queue>:*`.
    pub key: String,
    /// `idempotent` or `not_idempotent`.
    pub answer: String,
    /// The ordering attribute, when the handler needs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordering_attribute: Option<String>,
    /// When it was last changed (RFC 3339).
    pub updated_at: String,
}

/// The answer of `PUT /v1/register/{key}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterSet {
    /// The entry now stored.
    pub entry: RegisterEntry,
    /// The entry it replaced, if there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<RegisterEntry>,
    /// Whether anything changed (an unchanged entry is not audited).
    pub changed: bool,
}

/// `GET /v1/register`: a page in key order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisterPage {
    /// The entries.
    pub entries: Vec<RegisterEntry>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}
