//! The dead-letter store of a queue: `/v1/queues/{name}/dead-letters/...`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::message::BodyEncoding;

/// A dead-letter record with its evidence.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeadLetter {
    /// Stable record id (`dl_…`, time-sortable).
    pub id: String,
    /// Queue whose store holds it (the source queue).
    pub queue: String,
    /// `live`, `archived` or `quarantine`.
    pub area: String,
    /// Original message id.
    pub message_id: String,
    /// Original sequence number.
    pub sequence_number: i64,
    /// Session it left, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The exact bytes, per `body_encoding`; absent unless the caller may read payloads
    /// (`payload-reader`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// How `body` is encoded.
    pub body_encoding: BodyEncoding,
    /// SHA-256 of the bytes, lower-case hex.
    pub body_sha256: String,
    /// Size of the bytes.
    pub body_size: usize,
    /// MIME type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// Application properties.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub properties: Map<String, Value>,
    /// Correlation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// Message type.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub message_type: Option<String>,
    /// Reason code (`MaxDeliveryCountExceeded`, `TTLExpired`, or the application's).
    pub reason: String,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Push delivery's diagnostics, when a push subscription gave up on the event
    /// (Event Grid's fields: `deadLetterReason`, `deliveryAttempts`, `lastDeliveryOutcome`,
    /// `lastHttpStatusCode`, `publishTime`, `lastDeliveryAttemptTime`, and
    /// `lastDeliveryError` after a timeout or connection error). Read from the record's
    /// description, where the dispatcher writes them as a JSON object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<Map<String, Value>>,
    /// Deliveries before dead-lettering.
    pub delivery_count: u32,
    /// `exact` or `approximate`.
    pub delivery_count_quality: String,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_delivered_at: Option<String>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_delivered_at: Option<String>,
    /// RFC 3339.
    pub enqueued_time: String,
    /// RFC 3339.
    pub dead_lettered_at: String,
    /// Policy version that routed it.
    pub policy_version: u64,
    /// `broker` or `application`.
    pub routed_by: String,
    /// Dead-letter queue it was forwarded to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarded_to_queue: Option<String>,
    /// Its sequence number there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarded_sequence_number: Option<i64>,
    /// Receives from the dead-letter store.
    pub dead_letter_delivery_count: u32,
    /// Dead-letter receive: the token that settles it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_token: Option<String>,
    /// Dead-letter receive: RFC 3339 lock expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked_until: Option<String>,
}

/// A page of records.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetterPage {
    /// The records, oldest first.
    pub dead_letters: Vec<DeadLetter>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `POST /v1/queues/{name}/dead-letters/receive`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiveDeadLetters {
    /// At most this many (default 1, max 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_messages: Option<u32>,
    /// Lock duration (default: the queue's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_duration_ms: Option<u64>,
}

/// `POST /v1/queues/{name}/dead-letters/settle`: `complete` removes the record, `abandon`
/// unlocks it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettleDeadLetter {
    /// The lock token.
    pub lock_token: String,
    /// `complete` or `abandon`.
    pub action: DeadLetterAction,
}

/// Settlement of a dead-letter delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadLetterAction {
    /// Remove the record.
    Complete,
    /// Unlock it.
    Abandon,
}

/// `POST /v1/queues/{name}/dead-letters/{id}/move`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoveDeadLetter {
    /// `live`, `archived` or `quarantine`.
    pub area: String,
}
