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
