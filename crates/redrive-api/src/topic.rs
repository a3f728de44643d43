//! Topics, subscriptions and publishing: `/v1/topics`, `/v1/topics/{topic}`,
//! `/v1/topics/{topic}/subscriptions[/{sub}]`, `POST /v1/topics/{topic}/events`.

pub use redrive_core::replay::{AutoReplay, AutoReplayPatch, ReplayDestination};
pub use redrive_events::{
    DeadLetterDestination, DeliverySpec, EndpointValidation, Filter, PushMode, RetryPolicy,
    SubscriptionKind, TopicPolicy,
};
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `POST /v1/topics`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTopic {
    /// The topic name.
    pub name: String,
    /// The policy; fields left out take their defaults.
    #[serde(default)]
    pub policy: TopicPolicy,
}

/// A topic.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TopicInfo {
    /// Name.
    pub name: String,
    /// Policy.
    pub policy: TopicPolicy,
    /// Version.
    pub version: u64,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
}

/// `GET /v1/topics`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TopicList {
    /// Every topic, by name.
    pub topics: Vec<TopicInfo>,
}

/// Pull or push, in a create request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubscriptionType {
    /// Read through the subscription's queue.
    Pull,
    /// Delivered to `endpoint`.
    Push,
}

/// `POST /v1/topics/{topic}/subscriptions`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateSubscription {
    /// Name, unique per topic; the subscription's queue is `<topic>.<name>`.
    pub name: String,
    /// `pull` or `push`.
    #[serde(rename = "type")]
    pub kind: SubscriptionType,
    /// Push: the endpoint URL (http or https).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Push: `structured` (default) or `binary`.
    #[serde(default)]
    pub mode: PushMode,
    /// Push: skip the webhook validation handshake (trusted endpoints); the record says so.
    #[serde(default)]
    pub skip_validation: bool,
    /// Which events it takes.
    #[serde(default)]
    pub filter: Filter,
    /// Push: retries.
    #[serde(default)]
    pub retry_policy: RetryPolicy,
    /// Push: delivery settings.
    #[serde(default)]
    pub delivery: DeliverySpec,
    /// Required for push (`{"type":"own_store"}`, `{"type":"queue","name":…}`, or
    /// `{"type":"drop","acknowledged":true}`); pull defaults to its own store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<DeadLetterDestination>,
    /// Create paused.
    #[serde(default)]
    pub paused: bool,
    /// Pull: max delivery count of the queue (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_delivery_count: Option<u32>,
    /// Automatic replay of its dead letters; fields left out take their defaults (off).
    #[serde(default)]
    pub auto_replay: AutoReplay,
    /// How long its dead-letter records (every area) are kept, ms: default 30 days, 0
    /// keeps them forever, at most 3650 days.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_retention_ms: Option<u64>,
}

/// `PATCH /v1/topics/{topic}/subscriptions/{sub}`: fields left out stay.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateSubscription {
    /// Pause (`true`) or resume (`false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// A new filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<Filter>,
    /// A change of the auto-replay policy: its fields left out stay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_replay: Option<AutoReplayPatch>,
    /// A new retention of its dead-letter records, ms (0 keeps them forever).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_retention_ms: Option<u64>,
}

/// Per-subscription stats: the durable counts of its queue, and the delivery counters
/// of the node that answers (since it started; Prometheus has the same per node).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SubscriptionStats {
    /// Paused: events are kept, no delivery attempts are made.
    #[serde(default)]
    pub paused: bool,
    /// Events waiting, deliverable now.
    pub pending: u64,
    /// Events waiting for a later attempt (backoff).
    pub in_backoff: u64,
    /// Events being delivered (locked).
    pub in_flight: u64,
    /// Events in the dead-letter store.
    pub dead_lettered: u64,
    /// Age of the oldest event not yet delivered, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_pending_age_ms: Option<u64>,
    /// Events delivered (push).
    #[serde(default)]
    pub delivered: u64,
    /// Failed attempts by class: `408`, `429`, `4xx`, `5xx`, `other`, `timeout`,
    /// `connection_error` (push; an attempt carrying a batch counts once per event).
    #[serde(default)]
    pub failed_attempts: BTreeMap<String, u64>,
    /// Events given up on and dead-lettered, by reason (push).
    #[serde(default)]
    pub dead_lettered_by_reason: BTreeMap<String, u64>,
    /// Events given up on and dropped (a subscription that accepts dropping).
    #[serde(default)]
    pub dropped: u64,
}

/// A subscription.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubscriptionInfo {
    /// The topic.
    pub topic: String,
    /// Name.
    pub name: String,
    /// Its queue (a pull subscription is received from it).
    pub queue: String,
    /// Pull or push (with endpoint, mode, and whether it was validated).
    pub kind: SubscriptionKind,
    /// Filter.
    pub filter: Filter,
    /// Retry policy (push).
    pub retry_policy: RetryPolicy,
    /// Delivery settings (push).
    pub delivery: DeliverySpec,
    /// Dead-letter destination.
    pub dead_letter: DeadLetterDestination,
    /// Paused: events are kept, no attempts made.
    pub paused: bool,
    /// Automatic replay of its dead letters.
    #[serde(default)]
    pub auto_replay: AutoReplay,
    /// How long its dead-letter records (every area) are kept, ms; 0 keeps them forever.
    #[serde(default = "redrive_core::policy::default_dead_letter_retention_ms")]
    pub dead_letter_retention_ms: u64,
    /// Version.
    pub version: u64,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
    /// Live stats.
    pub stats: SubscriptionStats,
}

/// `GET /v1/topics/{topic}/subscriptions`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SubscriptionList {
    /// Every subscription of the topic, by name.
    pub subscriptions: Vec<SubscriptionInfo>,
}

/// One published event's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishResult {
    /// The event id.
    pub id: String,
    /// Same source and id seen inside the topic's window: accepted, not fanned out again.
    pub duplicate: bool,
}

/// `POST /v1/topics/{topic}/events` answers 201 with this: every event is stored durably.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishResults {
    /// In request order.
    pub results: Vec<PublishResult>,
}

/// `DELETE /v1/topics/{topic}/subscriptions/{sub}?force=true` answers 200 with this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionDeleted {
    /// Undelivered events discarded with the subscription (logged and counted).
    pub discarded: u64,
}
