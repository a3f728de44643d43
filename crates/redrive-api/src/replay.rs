//! Automatic replay of dead letters: `GET /v1/replay`, `GET /v1/replay/{name}`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The key of [`ReplayStatus::quarantined`] for records an operator moved to quarantine
/// (no judgement, so no cause).
pub const MANUAL_QUARANTINE: &str = "manual";

/// Where the dead letters of one queue stand with automatic replay.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReplayStatus {
    /// The queue (a subscription's is `<topic>.<subscription>`).
    pub queue: String,
    /// Records in the live area.
    pub live: u64,
    /// Live records that are replay candidates.
    pub candidates: u64,
    /// Live records whose last judgement failed (retried after a backoff).
    pub failing: u64,
    /// Live records that failed at least the node's flag threshold of times.
    pub flagged: u64,
    /// Records in the archived area.
    pub archived: u64,
    /// Records in the quarantine area, by the cause of their judgement, or
    /// [`MANUAL_QUARANTINE`].
    #[serde(default)]
    pub quarantined: BTreeMap<String, u64>,
}

/// `GET /v1/replay`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReplayStatusList {
    /// Every queue with dead letters (that the caller may see), by name.
    pub entities: Vec<ReplayStatus>,
}

/// A replay plan's dependency reservation: the named dependency, its health probe and
/// the thresholds that stop the plan.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlanDependency {
    /// Its name.
    pub name: String,
    /// The health probe (`http://` or `https://`).
    pub probe_url: String,
    /// The highest error rate (0 to 1) that lets the plan go on.
    pub max_error_rate: f64,
    /// The highest latency (ms) that lets the plan go on.
    pub max_latency_ms: u64,
}

/// A replay plan's budget: every field but `window` must be given (an unbounded replay is
/// refused with `replay_unbounded`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlanBudget {
    /// Items admitted per second.
    #[serde(default)]
    pub items_per_s: Option<f64>,
    /// Bytes admitted per second.
    #[serde(default)]
    pub bytes_per_s: Option<u64>,
    /// Deliveries in flight at once.
    #[serde(default)]
    pub max_concurrent: Option<u32>,
    /// Items per admission window (default 10).
    #[serde(default)]
    pub window: Option<u32>,
    /// The dependency reservation.
    #[serde(default)]
    pub dependency: Option<PlanDependency>,
}

/// What a replay plan selects: the open cases of one queue, narrowed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PlanSelection {
    /// The queue whose dead letters are replayed.
    pub queue: String,
    /// Only these reason codes (any when empty).
    #[serde(default)]
    pub reasons: Vec<String>,
    /// Only these message types (any when empty).
    #[serde(default)]
    pub types: Vec<String>,
    /// Dead-lettered at or after (RFC 3339).
    #[serde(default)]
    pub from: Option<String>,
    /// Dead-lettered before (RFC 3339).
    #[serde(default)]
    pub to: Option<String>,
    /// Only these cases (any when empty).
    #[serde(default)]
    pub case_ids: Vec<String>,
}

/// `POST /v1/replay/plans/preview`: a plan as it would be created.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlanSpec {
    /// What it replays.
    pub selection: PlanSelection,
    /// Where: the queue the items came from (absent) or another queue (a repair queue, an
    /// isolated sink).
    #[serde(default)]
    pub destination: Option<String>,
    /// The budget.
    pub budget: PlanBudget,
}

/// One item of a preview.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PreviewItem {
    /// The case.
    pub case_id: String,
    /// The original message id.
    pub message_id: String,
    /// The reason code.
    pub reason: String,
    /// The message type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_type: Option<String>,
    /// Payload bytes.
    pub bytes: u64,
    /// The gate that blocks it now, if one does (`intent_cancelled`, `effect_present`,
    /// `effect_indeterminate`, `effect_unreachable`, `no_tested_correction`,
    /// `authorization_changed`, `ordering_missing`, `destination_invalid`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<String>,
}

/// The answer of a preview: what the plan would replay, and what blocks each item. Nothing
/// is touched.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PlanPreview {
    /// Items selected.
    pub items: u64,
    /// Their payload bytes.
    pub bytes: u64,
    /// Items no gate blocks now.
    pub eligible: u64,
    /// The least time replaying every selected item takes under the budget, ms (before
    /// processing, pauses and reconciliation: a lower bound, not a promise).
    pub lower_bound_ms: u64,
    /// Items by reason code.
    pub by_reason: BTreeMap<String, u64>,
    /// Items by message type (`""`: none).
    pub by_type: BTreeMap<String, u64>,
    /// Blocked items by gate.
    pub blocked: BTreeMap<String, u64>,
    /// The items (at most the first 1,000), by case id.
    pub item_list: Vec<PreviewItem>,
    /// Whether `item_list` stops short of `items`.
    pub truncated: bool,
}
