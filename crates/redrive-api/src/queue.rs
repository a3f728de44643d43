//! Queue management: `POST /v1/queues`, `GET|PATCH|DELETE /v1/queues/{name}`,
//! `GET /v1/queues`, `POST /v1/queues/{name}/purge`, and a queue's policy history,
//! `GET /v1/queues/{name}/policy/versions`.

pub use redrive_core::policy::{Backoff, QueuePolicy};
use serde::{Deserialize, Serialize};

/// `POST /v1/queues`. Fields of `policy` that are left out take their defaults.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateQueue {
    /// The queue name.
    pub name: String,
    /// The policy.
    #[serde(default)]
    pub policy: QueuePolicy,
}

/// `PATCH /v1/queues/{name}` takes a JSON merge patch (RFC 7386) of the policy, optionally
/// wrapped as `{"policy": {...}, "expected_version": n}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateQueue {
    /// Merge patch applied to the current policy.
    pub policy: serde_json::Value,
    /// Refuse with `version_conflict` unless the stored version is this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
}

/// A queue with its policy and live counts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueueInfo {
    /// Name.
    pub name: String,
    /// Policy in force.
    pub policy: QueuePolicy,
    /// Version of the policy.
    pub policy_version: u64,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
    /// Live counts.
    pub counts: QueueCounts,
}

/// Live counts of a queue.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct QueueCounts {
    /// Visible now.
    pub active: u64,
    /// Visible later (scheduled, or in redelivery backoff).
    pub scheduled: u64,
    /// Locked by receivers.
    pub locked: u64,
    /// Deferred.
    pub deferred: u64,
    /// Live dead letters.
    pub dead_lettered: u64,
    /// Age of the oldest message on the queue, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_message_age_ms: Option<u64>,
}

/// `GET /v1/queues`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueueList {
    /// Every queue, by name.
    pub queues: Vec<QueueInfo>,
}

/// The answer to `POST /v1/queues/{name}/purge`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct PurgeResult {
    /// Messages removed, whatever their state (locked by a receiver, deferred and
    /// scheduled ones included).
    pub removed: u64,
}

/// One version of a queue's policy (`GET /v1/queues/{name}/policy/versions`). Who
/// changed it is in the audit log.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PolicyVersion {
    /// The policy version (1 at creation, +1 on every change).
    pub version: u64,
    /// The policy in force from this version on.
    pub policy: QueuePolicy,
    /// When this version was written (RFC 3339).
    pub changed_at: String,
}

/// `GET /v1/queues/{name}/policy/versions`: a page of a queue's policy history, newest
/// version first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PolicyVersionList {
    /// The versions, newest first.
    pub versions: Vec<PolicyVersion>,
    /// The `before` of the next page; `None` on the last.
    pub next: Option<u64>,
}
