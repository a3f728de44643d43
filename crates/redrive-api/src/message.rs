//! Messages: send, receive (peek-lock), peek, settle, sessions.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How a body is carried in JSON.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BodyEncoding {
    /// The body is the UTF-8 text itself.
    #[default]
    Utf8,
    /// The body is base64 (standard alphabet, padded).
    Base64,
}

/// One message to send.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendMessage {
    /// Client-chosen id (the duplicate-detection key); generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// The body, as text or base64 per `body_encoding`.
    pub body: String,
    /// How `body` is encoded.
    #[serde(default)]
    pub body_encoding: BodyEncoding,
    /// MIME type of the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// Application properties: string, number or boolean values.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub properties: Map<String, Value>,
    /// Correlation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// Session id (required on session queues).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Message type (for events, the CloudEvents `type`).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub message_type: Option<String>,
    /// Stable id of the semantic operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<String>,
    /// RFC 3339 time after which completing the message no longer helps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<String>,
    /// RFC 3339 time before which the message is not visible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_enqueue_time: Option<String>,
    /// Time to live in milliseconds (else the queue's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_to_live_ms: Option<u64>,
}

/// `POST /v1/queues/{name}/messages`: one message, or `{"messages": [...]}` for an atomic
/// batch.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum SendRequest {
    /// A batch: all stored or none.
    Batch {
        /// The messages.
        messages: Vec<SendMessage>,
    },
    /// One message.
    One(Box<SendMessage>),
}

/// The outcome for one sent message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SendResult {
    /// Message id.
    pub message_id: String,
    /// Sequence number (the original one for a duplicate).
    pub sequence_number: i64,
    /// True when the id was already seen inside the duplicate-detection window; nothing
    /// was enqueued.
    pub duplicate: bool,
}

/// Answer to a send.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SendResponse {
    /// One result per message, in order.
    pub results: Vec<SendResult>,
}

/// `POST /v1/queues/{name}/receive`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiveRequest {
    /// At most this many messages (1 to 1000, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_messages: Option<u32>,
    /// Lock duration (default: the queue's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_duration_ms: Option<u64>,
    /// Long-poll: wait up to this long (at most 20000) for a first message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// For session queues: the session held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// For session queues: the session lock token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_lock_token: Option<String>,
}

/// A message as delivered or peeked.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Message {
    /// Message id.
    pub message_id: String,
    /// Sequence number.
    pub sequence_number: i64,
    /// Body per `body_encoding` (text when it is valid UTF-8, else base64).
    pub body: String,
    /// How `body` is encoded.
    pub body_encoding: BodyEncoding,
    /// MIME type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// Application properties.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub properties: Map<String, Value>,
    /// Correlation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// Session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Message type.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub message_type: Option<String>,
    /// Intent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<String>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<String>,
    /// RFC 3339.
    pub enqueued_time: String,
    /// RFC 3339, if it was scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_enqueue_time: Option<String>,
    /// RFC 3339, if it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// `available`, `scheduled` (visible later), `locked` or `deferred` (peek); `locked` (receive).
    pub state: String,
    /// Deliveries so far, this one included.
    pub delivery_count: u32,
    /// The token that settles this delivery (receive only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_token: Option<String>,
    /// RFC 3339 lock expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked_until: Option<String>,
}

/// Answer to a receive or peek.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MessageList {
    /// The messages.
    pub messages: Vec<Message>,
}

/// What to do with a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SettleKind {
    /// Remove it.
    Complete,
    /// Release it for redelivery (after `delay_ms` or the queue's backoff).
    Abandon,
    /// Set it aside; receivable by sequence number only.
    Defer,
    /// Move it to the dead-letter store with `reason` and `description`.
    DeadLetter,
    /// Extend the lock by `lock_duration_ms` (default: the queue's).
    Renew,
}

/// One settlement. `POST /v1/queues/{name}/settle` takes one, or `{"settlements": [...]}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settle {
    /// The delivery's lock token.
    pub lock_token: String,
    /// The action.
    pub action: SettleKind,
    /// Abandon: delay before redelivery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Dead-letter: reason code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Dead-letter: description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Dead-letter: the consumer that applied the reason (printable, at most 256 bytes),
    /// kept on the record and its case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// Dead-letter: the version of the consumer's classification rule (printable, at most
    /// 256 bytes), kept on the record and its case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_version: Option<String>,
    /// Renew: new lock duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_duration_ms: Option<u64>,
}

/// Body of `POST /v1/queues/{name}/settle`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
pub enum SettleRequest {
    /// Many settlements, each judged on its own.
    Batch {
        /// The settlements.
        settlements: Vec<Settle>,
    },
    /// One settlement; a lost lock is an error response.
    One(Settle),
}

/// The outcome of one settlement.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SettleResult {
    /// The lock token settled.
    pub lock_token: String,
    /// Sequence number (absent when the lock was unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_number: Option<i64>,
    /// New lock expiry (renew).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked_until: Option<String>,
    /// Record id, when the settlement dead-lettered the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_id: Option<String>,
    /// The problem, when this item failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<crate::Problem>,
}

/// Answer to a batch settle.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SettleResponse {
    /// One result per settlement, in order.
    pub results: Vec<SettleResult>,
}

/// `POST /v1/queues/{name}/messages/deferred/receive`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiveDeferred {
    /// Sequence numbers of deferred messages.
    pub sequence_numbers: Vec<i64>,
    /// Lock duration (default: the queue's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_duration_ms: Option<u64>,
}

/// `POST /v1/queues/{name}/sessions/accept`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceptSession {
    /// A named session; else the next available one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Session lock duration (default: the queue's lock duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_duration_ms: Option<u64>,
    /// Wait up to this long (at most 20000) for a session with messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// `POST /v1/queues/{name}/sessions/{id}/renew` and `/release`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionTokenRequest {
    /// The session lock token.
    pub lock_token: String,
    /// Renew: new lock duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_duration_ms: Option<u64>,
}

/// A held session lock. `accept` answers 204 when no session is available.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SessionLock {
    /// The session.
    pub session_id: String,
    /// The token.
    pub lock_token: String,
    /// RFC 3339.
    pub locked_until: String,
}

/// One session of `GET /v1/queues/{name}/sessions`: its messages by state and whether a
/// receiver holds it. Never the lock token.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SessionSummary {
    /// The session.
    pub session_id: String,
    /// Messages available and visible now.
    pub active: u64,
    /// Messages visible only later (scheduled, or a redelivery's backoff).
    pub scheduled: u64,
    /// Messages under a live message lock.
    pub in_flight: u64,
    /// Deferred messages.
    pub deferred: u64,
    /// Whether a receiver holds the session now.
    pub locked: bool,
    /// When the session's lock runs out (RFC 3339), while it holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked_until: Option<String>,
}

/// `GET /v1/queues/{name}/sessions`: a page of a queue's sessions, by id.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SessionPage {
    /// The sessions.
    pub sessions: Vec<SessionSummary>,
    /// `after` for the next page; `null` on the last.
    pub next: Option<String>,
}
