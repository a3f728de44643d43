//! The dead-letter store of a queue: `/v1/queues/{name}/dead-letters/...`.

use std::collections::BTreeMap;

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
    /// `exact`, `approximate` (some deliveries may not have been counted, or the source's
    /// own count is approximate: an import from Event Grid or SQS) or `incomplete` (the
    /// source did not say: an import whose evidence lacks the count or the times).
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
    /// The version of the routing policy in force when it was dead-lettered (for an
    /// import, its source's); absent when nothing says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<u64>,
    /// `broker`, `application`, or `import` (imported from elsewhere: another system
    /// routed it, and nothing here vouches for who or why).
    pub routed_by: String,
    /// How the evidence says it was separated: `broker_routed`,
    /// `application_quarantined` or `route_indeterminate` (an import whose source did
    /// not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// The rule it was routed under (`delivery_threshold`, `expiry`, `filter`, `size`,
    /// `application`); absent when nothing names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_rule: Option<String>,
    /// The consumer that applied an application's reason, when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// The version of that consumer's classification rule, when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_version: Option<String>,
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
    /// What the bytes hold: `message` (one message) or `events` (a JSON array of
    /// dead-lettered events, judged event by event).
    #[serde(default = "message_format")]
    pub format: String,
    /// Its automatic replay state.
    #[serde(default)]
    pub replay: ReplayState,
    /// The last judgement of automatic replay, on a record it quarantined or archived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judgement: Option<Judgement>,
}

fn message_format() -> String {
    "message".to_owned()
}

/// The automatic replay state of a record.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReplayState {
    /// A live record with a due time: automatic replay judges it at or after `due_at`.
    pub candidate: bool,
    /// RFC 3339: when it is judged next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<String>,
    /// Judgements of it that failed (reset by a restore).
    pub failures: u32,
    /// The error of the last failed judgement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// What automatic replay decided about a record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Judgement {
    /// The engine that judged.
    pub engine: String,
    /// RFC 3339.
    pub judged_at: String,
    /// Why the record is quarantined (every event in it has this cause): `SchemaInvalid`,
    /// `NotIdempotent`, `TypeNotRegistered`, `NoReplayDestination` or
    /// `ReplayAttemptsExhausted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// The record this quarantine copy holds part of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copied_from: Option<String>,
    /// Why the payload could not be read as events (`SchemaInvalid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Every event judged.
    #[serde(default)]
    pub events: Vec<JudgedEvent>,
    /// For a record automatic replay republished (archived): the rule, the entity's
    /// policy version, the budget, where and when, and the outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<JudgedReplay>,
}

/// What automatic replay did with a record it republished.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct JudgedReplay {
    /// `automatic_replay`.
    pub rule: String,
    /// The entity's policy version it was judged under.
    pub policy_version: u64,
    /// The budget it drew from, in words (the node-wide replay budget).
    pub budget: String,
    /// Where the events went.
    pub destination: String,
    /// RFC 3339.
    pub republished_at: String,
    /// `republished`.
    pub outcome: String,
}

/// One event of a judgement.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct JudgedEvent {
    /// The event's id without its replay count.
    pub id: String,
    /// Replays it had been through when judged.
    pub attempts: u32,
    /// Its type.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    /// Why it was quarantined; absent: republished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// The id it was republished under (`<id>|<n>`), if republished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub republished_as: Option<String>,
}

/// A page of records.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DeadLetterPage {
    /// The records, oldest first.
    pub dead_letters: Vec<DeadLetter>,
    /// Records of the page whose stored row this build cannot read, by id, with what
    /// cannot be read (they count toward the page's limit); absent when there are none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub undecodable: Vec<UndecodableDeadLetter>,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A dead-letter record whose stored row cannot be read (a value outside its column's
/// domain): listed by id, never failing the page. Fix or remove its row
/// (docs/operations.md).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct UndecodableDeadLetter {
    /// The record id.
    pub id: String,
    /// What cannot be read: the column and why.
    pub reason: String,
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

/// `POST /v1/queues/{name}/dead-letters/{id}/restore`; the body is optional.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestoreDeadLetter {
    /// Only answer what a restore would do (default false).
    #[serde(default)]
    pub dry_run: bool,
}

/// The answer to a restore: what the next judgement of the record will do.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RestoreResult {
    /// The record.
    pub id: String,
    /// Whether it was moved back to live (false for a dry run).
    pub restored: bool,
    /// Whether the queue replays automatically (if not, a restored record waits live).
    pub replay_enabled: bool,
    /// Events the next judgement will republish.
    pub republish: u64,
    /// Events it will quarantine again, by cause (a restore clears only
    /// `ReplayAttemptsExhausted`).
    #[serde(default)]
    pub requarantine: BTreeMap<String, u64>,
}

/// `POST /v1/queues/{name}/dead-letters/import`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportDeadLetters {
    /// `eventgrid` (one Event Grid dead-letter blob), `sqs` (the JSON output of SQS
    /// `ReceiveMessage`) or `json` (JSON Lines of [`DeadLetter`] records, as exported).
    pub format: String,
    /// The file's text (at most 64 MiB).
    pub content: String,
}

/// The answer to an import.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ImportResult {
    /// Records stored.
    pub imported: u64,
    /// Their ids, in input order.
    pub ids: Vec<String>,
}
