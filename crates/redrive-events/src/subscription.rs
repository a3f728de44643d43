//! The vocabulary of topics and subscriptions that travels on the wire as it is stored:
//! a topic's policy and what a subscription is (pull or push, its delivery settings, its
//! dead-letter destination). Beside [`Filter`](crate::Filter) and
//! [`RetryPolicy`](crate::RetryPolicy), the other halves of a subscription, so that the
//! wire types (`redrive-api`) and the store share one definition without the wire crate
//! depending on the store.

use redrive_core::EntityName;
use serde::{Deserialize, Serialize};

/// Longest duplicate-detection window of a topic: 7 days.
pub const MAX_TOPIC_DEDUP_WINDOW_MS: u64 = 7 * 24 * 3_600_000;

/// A topic's policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TopicPolicy {
    /// Window in which an event with the same `source` and `id` is accepted but not fanned
    /// out again (default 10 min; 0 turns detection off; at most 7 days).
    pub duplicate_detection_window_ms: u64,
    /// Largest structured-mode event accepted, in bytes (default 1 MiB).
    pub max_event_size: u32,
}

impl Default for TopicPolicy {
    fn default() -> Self {
        TopicPolicy {
            duplicate_detection_window_ms: 600_000,
            max_event_size: 1024 * 1024,
        }
    }
}

/// How a push subscription sends one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PushMode {
    /// `application/cloudevents+json`.
    #[default]
    Structured,
    /// `ce-*` headers, the data as the body.
    Binary,
}

/// Whether a push endpoint passed the webhook validation handshake at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndpointValidation {
    /// The endpoint agreed to receive events.
    Validated,
    /// The caller asked to skip the handshake (a trusted endpoint).
    Skipped,
}

/// Pull (the subscription's queue is read directly) or push (an HTTP endpoint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum SubscriptionKind {
    /// Receive, settle and dead-letter through the subscription's queue.
    Pull,
    /// Delivered to an endpoint.
    Push {
        /// The endpoint URL.
        endpoint: String,
        /// Structured or binary mode.
        #[serde(default)]
        mode: PushMode,
        /// Whether the endpoint was validated or validation was skipped.
        validation: EndpointValidation,
    },
}

/// Delivery settings of a push subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeliverySpec {
    /// Per-attempt timeout (default 30 s).
    pub timeout_ms: u64,
    /// Attempts in flight at once (default 10).
    pub max_concurrency: u32,
    /// Events per request (default 1: no batching).
    pub max_events_per_batch: u32,
    /// Preferred request body size when batching (default 64 KiB).
    pub preferred_batch_bytes: u32,
}

impl Default for DeliverySpec {
    fn default() -> Self {
        DeliverySpec {
            timeout_ms: 30_000,
            max_concurrency: 10,
            max_events_per_batch: 1,
            preferred_batch_bytes: 65_536,
        }
    }
}

/// Where events a subscription gives up on go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum DeadLetterDestination {
    /// The dead-letter store of the subscription's queue.
    OwnStore,
    /// A copy goes to this queue (the evidence record stays in the own store).
    Queue {
        /// The queue.
        name: EntityName,
    },
    /// A copy is published to this topic, with the diagnostics as extension attributes
    /// (the evidence record stays in the own store, archived once the copy is stored).
    Topic {
        /// The topic.
        name: EntityName,
    },
    /// Events given up on are dropped (logged and counted); only with `acknowledged`.
    Drop {
        /// The caller accepted dropping explicitly.
        acknowledged: bool,
    },
}
