//! Message content types shared by every layer: application properties.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A typed application property value (as Service Bus application properties).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PropertyValue {
    /// `true` / `false`.
    Bool(bool),
    /// A whole number.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// Text.
    String(String),
}

/// Application properties of a message, ordered by name.
pub type Properties = BTreeMap<String, PropertyValue>;

/// Property set on a resubmitted message: the id of the dead-letter record it came from.
pub const RESUBMITTED_FROM_PROPERTY: &str = "redrive-dead-letter-id";
/// Property set on a message forwarded to a dead-letter queue: why it was dead-lettered.
pub const DEAD_LETTER_REASON_PROPERTY: &str = "DeadLetterReason";
/// Property set on a message forwarded to a dead-letter queue: the reason's description.
pub const DEAD_LETTER_DESCRIPTION_PROPERTY: &str = "DeadLetterErrorDescription";
/// Property set on a message forwarded to a dead-letter queue: the queue it came from.
pub const DEAD_LETTER_SOURCE_PROPERTY: &str = "DeadLetterSource";
/// Property set on a message the broker republishes as a dead letter on another queue:
/// the entity it came from, unless the message carries one already. The name Pulsar's
/// Java client gives it, so that a dead-letter queue reads the same whichever side
/// diverted the message.
pub const REAL_TOPIC_PROPERTY: &str = "REAL_TOPIC";
/// Property set on a message the broker republishes as a dead letter on another queue:
/// the original message id, unless the message carries one already (Pulsar's Java
/// client's name, as [`REAL_TOPIC_PROPERTY`]).
pub const ORIGIN_MESSAGE_ID_PROPERTY: &str = "ORIGIN_MESSAGE_ID";
