//! Automatic replay of dead letters (`GET /v1/replay`, `GET /v1/replay/{name}`) and bounded
//! replay plans (`/v1/replay/plans`).

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
    /// Records whose stored row this build cannot read: set aside from replay (never
    /// judged, never failing the others) until an operator fixes or removes them.
    #[serde(default)]
    pub undecodable: u64,
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
    /// Its name: 1 to 128 ASCII letters, digits, `-`, `_`, `.` and `:`, starting with a
    /// letter or digit.
    pub name: String,
    /// The health probe (`http://` or `https://` with a host, at most 2,048 bytes).
    pub probe_url: String,
    /// The highest error rate (0 to 1) that lets the plan go on.
    pub max_error_rate: f64,
    /// The highest latency (ms, 1 to 3,600,000) that lets the plan go on.
    pub max_latency_ms: u64,
}

/// A replay plan's budget: every field but `window` must be given (an unbounded replay is
/// refused with `replay_unbounded`); a field out of its range (`redrive_core::plan`) is
/// refused with `invalid_request` naming it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlanBudget {
    /// Items admitted per second (0.001 to 100,000).
    #[serde(default)]
    pub items_per_s: Option<f64>,
    /// Bytes admitted per second (1 KiB to 10 GiB).
    #[serde(default)]
    pub bytes_per_s: Option<u64>,
    /// Deliveries in flight at once (1 to 1,000).
    #[serde(default)]
    pub max_concurrent: Option<u32>,
    /// Items per admission window (1 to 100,000; default 10).
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
    /// The queue whose dead letters are replayed (may be left out when `group` or
    /// `signature` is given: the group's or the signature's queue).
    #[serde(default)]
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
    /// The members of this case group (`grp_…`) are the cases (not with `case_ids`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Only the cases whose dead-letter record carries this failure signature (an id of
    /// `GET /v1/failures`, 32 hex digits); not with `group` or `case_ids`. A signature
    /// belongs to one queue: `queue` may be left out, and another queue is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

impl PlanSelection {
    /// The open cases whose dead-letter record carries `signature` (an id of
    /// `GET /v1/failures`), on the signature's queue.
    pub fn by_signature(signature: impl Into<String>) -> PlanSelection {
        PlanSelection {
            signature: Some(signature.into()),
            ..PlanSelection::default()
        }
    }
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
    /// When that gate clears (RFC 3339), if it is time-bound: the failing path, which
    /// clears when the destination's latest dead letter with the item's reason leaves the
    /// failing-path window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clears_at: Option<String>,
}

/// A gate that blocks items of a preview: what it means, how many items it blocks and,
/// if it is time-bound, when it clears for all of them.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PreviewGate {
    /// The gate (as in `blocked` and an item's `gate`).
    pub gate: String,
    /// What holds the items, in words (for `destination_invalid`: the destination does not
    /// exist, or is the failing path, or the case's own destination is not valid).
    pub detail: String,
    /// Items it blocks for this cause.
    pub items: u64,
    /// When it clears for every item it blocks (RFC 3339; the latest of the items' own
    /// `clears_at`), if it is time-bound; absent otherwise: it waits on a person or a
    /// condition, not on the clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clears_at: Option<String>,
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
    /// Each gate that blocks items, by gate and then cause, with what it means and, if it
    /// is time-bound, when it clears.
    #[serde(default)]
    pub gates: Vec<PreviewGate>,
    /// The items (at most the first 1,000), by case id.
    pub item_list: Vec<PreviewItem>,
    /// Whether `item_list` stops short of `items`.
    pub truncated: bool,
}

/// `POST /v1/replay/plans`: a plan to create (the preview's body, plus what only a plan
/// that runs needs).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CreatePlan {
    /// What it replays.
    pub selection: PlanSelection,
    /// Where: the queue the items came from (absent) or another queue.
    #[serde(default)]
    pub destination: Option<String>,
    /// The budget: every limit but the window named.
    pub budget: PlanBudget,
    /// The correction every item's case must carry (its identity), if the plan names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correction: Option<String>,
    /// The owner's lease on the plan, ms (renewed by start and resume; default one hour,
    /// at most seven days): when it runs out the plan stops (`lease_lost`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
    /// The dependency's observation window, ms (default 10 s; 100 ms to 1 h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observe_ms: Option<u64>,
}

/// What a plan selected, as it was created.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReplayPlanSelection {
    /// Only these reason codes (any when empty).
    pub reasons: Vec<String>,
    /// Only these message types (any when empty).
    pub types: Vec<String>,
    /// Dead-lettered at or after (RFC 3339).
    pub from: Option<String>,
    /// Dead-lettered before (RFC 3339).
    pub to: Option<String>,
    /// Only these cases (any when empty).
    pub case_ids: Vec<String>,
    /// The case group the cases are the members of, if the plan was made from one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The failure signature the cases' records carry, if the plan selected by one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// A plan's budget, every limit named.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReplayPlanBudget {
    /// Items admitted per second.
    pub items_per_s: f64,
    /// Bytes admitted per second.
    pub bytes_per_s: u64,
    /// Deliveries in flight at once.
    pub max_concurrent: u32,
    /// Items per admission window.
    pub window: u32,
    /// The dependency reservation.
    pub dependency: PlanDependency,
}

/// One reading of the dependency's health probe.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct PlanReading {
    /// Its error rate, 0 to 1.
    pub error_rate: f64,
    /// Its latency, ms.
    pub latency_ms: u64,
}

/// How far a plan got.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PlanProgress {
    /// Items the plan holds.
    pub items: u64,
    /// Items not admitted yet.
    pub waiting: u64,
    /// Items admitted in all.
    pub admitted: u64,
    /// Replays in flight.
    pub in_flight: u32,
    /// Items whose case completed.
    pub completed: u64,
    /// Items whose replay stopped.
    pub stopped: u64,
    /// Items closed without a replay.
    pub closed: u64,
    /// Items a gate holds.
    pub held: u64,
    /// Payload bytes admitted in all.
    pub bytes_admitted: u64,
    /// The current admission window, from 1 (0: none opened yet).
    pub window: u32,
    /// Items admitted in the current window.
    pub window_admitted: u32,
    /// The observed admission rate: items admitted over the seconds from the start to the
    /// last admission (0 with fewer than two admissions).
    pub items_per_s: f64,
    /// The observed byte rate, likewise.
    pub bytes_per_s: f64,
    /// The least time the waiting items still take under the budget, ms (a lower bound).
    pub eta_ms: u64,
}

/// What an `sqs_move` plan is: an SQS message move task (`StartMessageMoveTask`), run by
/// the broker's mover and bounded by items per second only.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SqsMovePlan {
    /// The rate the task asked for (`MaxNumberOfMessagesPerSecond`; `null`: none named).
    pub max_per_second: Option<u32>,
    /// The items/s budget it is paced by: its rate, or the highest move rate (500) when it
    /// named none.
    pub items_per_s: f64,
    /// Whether each message goes back to the queue it was dead-lettered from (no
    /// destination named).
    pub to_source: bool,
    /// Messages moved so far.
    pub moved: u64,
    /// Messages on the source when the task started.
    pub to_move: u64,
    /// Why it failed (status `stopped`; also its `stop_reason`).
    pub failure_reason: Option<String>,
}

/// A replay plan.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReplayPlan {
    /// `plan_…` (`mv_…`: an SQS message move task's handle).
    pub id: String,
    /// `cases` (a plan over open recovery cases) or `sqs_move` (an SQS message move task).
    pub kind: String,
    /// The queue whose dead letters (open cases) it replays, or whose messages it moves.
    pub queue: String,
    /// Where the replays go (`null`: an `sqs_move` plan that moves each message back to
    /// the queue it was dead-lettered from).
    pub destination: Option<String>,
    /// The owner's name (the token that created it).
    pub owner: String,
    /// `planned`, `running`, `paused`, `stopped`, `completed`, `cancelled`, or
    /// `cancelling` (an `sqs_move` plan whose cancel its runner has not seen yet).
    pub status: String,
    /// Why it stopped (a stop reason's name; an `sqs_move` plan's failure reason), once
    /// stopped.
    pub stop_reason: Option<String>,
    /// What stopped it, in words.
    pub stop_detail: Option<String>,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// When it last changed (RFC 3339).
    pub updated_at: String,
    /// Until when the owner's lease holds (RFC 3339; `null` for an `sqs_move` plan, which
    /// runs on its owner's token).
    pub owner_until: Option<String>,
    /// What it selected.
    pub selection: ReplayPlanSelection,
    /// The correction every item's case must carry, if named.
    pub correction: Option<String>,
    /// Its budget (`null` for an `sqs_move` plan: its items/s budget is in `sqs_move`).
    pub budget: Option<ReplayPlanBudget>,
    /// The owner's lease, ms (`null` for an `sqs_move` plan).
    pub lease_ms: Option<u64>,
    /// The dependency's observation window, ms (`null` for an `sqs_move` plan).
    pub observe_ms: Option<u64>,
    /// The ordering scopes it holds whole: each session's open cases, in order.
    pub sessions: BTreeMap<String, Vec<String>>,
    /// The dependency's reading before the first admission.
    pub baseline: Option<PlanReading>,
    /// The latest readings (at most two), latest last.
    pub readings: Vec<PlanReading>,
    /// How far it got (an `sqs_move` plan: its items are the messages to move, admitted
    /// and completed those moved).
    pub progress: PlanProgress,
    /// The message move task, for an `sqs_move` plan (`null` for a `cases` plan).
    pub sqs_move: Option<SqsMovePlan>,
}

/// `GET /v1/replay/plans`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ReplayPlanList {
    /// Plans by id (only those over queues the caller may read cases of).
    pub plans: Vec<ReplayPlan>,
}

/// One item of a plan.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PlanItem {
    /// Its position in admission order, from 0.
    pub seq: u32,
    /// The case it replays.
    pub case_id: String,
    /// Its payload bytes.
    pub bytes: u64,
    /// `waiting`, `held`, `admitted`, `completed`, `stopped` or `closed`.
    pub state: String,
    /// The admission window it was admitted in, from 1.
    pub window: Option<u32>,
    /// The replay's message id, once admitted.
    pub message_id: Option<String>,
    /// The gate that holds it, the trigger that stopped it, or the terminal state.
    pub detail: Option<String>,
    /// When it last changed (RFC 3339).
    pub updated_at: String,
}

/// `GET /v1/replay/plans/{id}/items`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PlanItemList {
    /// Items by `seq`.
    pub items: Vec<PlanItem>,
}
