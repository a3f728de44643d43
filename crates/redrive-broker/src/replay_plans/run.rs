//! A replay plan's stored shapes (its fixed spec and its run state), its view, the
//! runner's node state, and what the runner's jobs share. The jobs are in their own
//! files: creation (`create`), the owner's changes (`owner`), one look at a plan
//! (`look`), the admissions (`admit`), the observation of replays in flight
//! (`outcomes`), the views (`view`) and the node-wide replay budget (`node`).

use std::collections::BTreeMap;

use redrive_core::Timestamp;
use redrive_core::plan::{Budget, BudgetSpec, Pacer, StopReason};
use redrive_store::{PlanItemQuery, PlanItemRecord, PlanItemState, ReplayPlanRecord, StoreError};
use serde::{Deserialize, Serialize};

use super::PlanSelectionInput;
use super::Plans;
use super::probe::Reading;
use crate::{Actor, BrokerError, BrokerResult};

pub use redrive_core::plan::look::{OBSERVE_IN_FLIGHT_MS, OBSERVE_ITEM_MAX_MS, OBSERVE_ITEM_MS};
pub use redrive_core::plan::{DEFAULT_OBSERVE_MS, DEFAULT_PLAN_LEASE_MS, MAX_PLAN_LEASE_MS};
/// How many times an advance reads a plan again when another writer changed it.
pub(super) const RETRIES: usize = 3;

/// A plan as asked for.
#[derive(Debug, Clone, Default)]
pub struct PlanInput {
    /// What it replays, and where.
    pub selection: PlanSelectionInput,
    /// Its budget: every limit named.
    pub budget: BudgetSpec,
    /// The correction every item's case must carry (its identity), if the plan names one.
    pub correction: Option<String>,
    /// The owner's lease, ms ([`DEFAULT_PLAN_LEASE_MS`] when absent).
    pub lease_ms: Option<u64>,
    /// The dependency's observation window, ms ([`DEFAULT_OBSERVE_MS`] when absent).
    pub observe_ms: Option<u64>,
}

/// A plan's fixed part: never changed once created (a change is a new plan).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanSpec {
    /// Only these reasons (any when empty).
    #[serde(default)]
    pub reasons: Vec<String>,
    /// Only these types (any when empty).
    #[serde(default)]
    pub types: Vec<String>,
    /// Dead-lettered at or after (ms).
    #[serde(default)]
    pub from_ms: Option<i64>,
    /// Dead-lettered before (ms).
    #[serde(default)]
    pub to_ms: Option<i64>,
    /// Only these cases (any when empty).
    #[serde(default)]
    pub case_ids: Vec<String>,
    /// The case group whose members are its cases, if it was made from one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The failure signature its cases' records carry, if it selected by one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// The budget (stored as [`Budget`] is: one shape from the request to the pacer).
    pub budget: Budget,
    /// The correction every item's case must carry, if named.
    #[serde(default)]
    pub correction: Option<String>,
    /// The owner's lease, ms.
    pub lease_ms: u64,
    /// The dependency's observation window, ms.
    pub observe_ms: u64,
    /// The ordering scopes the plan holds whole: each session's open cases, in order.
    #[serde(default)]
    pub sessions: BTreeMap<String, Vec<String>>,
}

impl PlanSpec {
    /// The spec of a stored plan.
    pub fn of(plan: &ReplayPlanRecord) -> BrokerResult<PlanSpec> {
        serde_json::from_value(plan.spec.clone())
            .map_err(|e| StoreError::bad_value("replay_plans.spec", e).into())
    }
}

/// A running plan's state (kept in the plan, so a resumed plan goes on where it was).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// The pacer: earliest next admission by the item budget, ms.
    #[serde(default)]
    pub next_item_ms: f64,
    /// The pacer: until when admitted bytes hold the byte budget, ms.
    #[serde(default)]
    pub bytes_until_ms: f64,
    /// Replays in flight.
    #[serde(default)]
    pub in_flight: u32,
    /// The current admission window, from 1 (0: none opened yet).
    #[serde(default)]
    pub window: u32,
    /// Items admitted in the current window.
    #[serde(default)]
    pub window_admitted: u32,
    /// Items admitted in all.
    #[serde(default)]
    pub admitted: u64,
    /// Bytes admitted in all.
    #[serde(default)]
    pub bytes_admitted: u64,
    /// Items completed.
    #[serde(default)]
    pub completed: u64,
    /// Items whose replay stopped.
    #[serde(default)]
    pub stopped: u64,
    /// Items closed without a replay.
    #[serde(default)]
    pub closed: u64,
    /// Items a gate holds.
    #[serde(default)]
    pub held: u64,
    /// Their bytes.
    #[serde(default)]
    pub bytes_held: u64,
    /// The bytes of every item of the plan.
    #[serde(default)]
    pub bytes_total: u64,
    /// Replays that repeated a failure: (case, failure shape).
    #[serde(default)]
    pub failures: Vec<(String, String)>,
    /// The baseline reading, before the first admission.
    #[serde(default)]
    pub baseline: Option<Reading>,
    /// The latest readings (at most two).
    #[serde(default)]
    pub readings: Vec<Reading>,
    /// When the dependency was last probed, ms.
    #[serde(default)]
    pub probed_ms: Option<i64>,
    /// When the plan started, ms.
    #[serde(default)]
    pub started_ms: Option<i64>,
    /// When the last item was admitted, ms.
    #[serde(default)]
    pub last_admit_ms: Option<i64>,
    /// What stopped it, in words.
    #[serde(default)]
    pub stop_detail: Option<String>,
}

impl RunState {
    pub(super) fn of(plan: &ReplayPlanRecord) -> RunState {
        serde_json::from_value(plan.m.state.clone()).unwrap_or_default()
    }

    pub(super) fn value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// The observed admission rates (items/s, bytes/s) from the first admission's start to
    /// the last admission: 0 before two admissions.
    pub fn observed_rates(&self) -> (f64, f64) {
        match (self.started_ms, self.last_admit_ms) {
            (Some(s), Some(l)) if l > s && self.admitted > 1 => {
                let secs = (l - s) as f64 / 1000.0;
                (
                    self.admitted as f64 / secs,
                    self.bytes_admitted as f64 / secs,
                )
            }
            _ => (0.0, 0.0),
        }
    }

    pub(super) fn pacer(&self) -> Pacer {
        Pacer {
            next_item_ms: self.next_item_ms,
            bytes_until_ms: self.bytes_until_ms,
            in_flight: self.in_flight,
        }
    }

    pub(super) fn set_pacer(&mut self, p: &Pacer) {
        self.next_item_ms = p.next_item_ms;
        self.bytes_until_ms = p.bytes_until_ms;
        self.in_flight = p.in_flight;
    }
}

/// A plan as the interfaces show it.
#[derive(Debug, Clone)]
pub struct PlanView {
    /// The stored plan.
    pub plan: ReplayPlanRecord,
    /// Its fixed part.
    pub spec: PlanSpec,
    /// Its run state.
    pub run: RunState,
    /// Items still waiting.
    pub waiting: u64,
    /// The lower bound of the time the waiting items still take under the budget, ms.
    pub eta_ms: u64,
    /// An `sqs_move` plan's task (`None` for a `cases` plan).
    pub sqs_move: Option<super::moves::MovePlanView>,
}

/// What one look at the plans did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanPass {
    /// Plans advanced.
    pub advanced: u64,
    /// The earliest time a plan wants to be looked at again.
    pub next_at: Option<Timestamp>,
}

/// The node-wide replay budget, shared by every plan this node runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeReplayBudget {
    /// Items per second over all plans.
    pub items_per_s: f64,
    /// Bytes per second over all plans.
    pub bytes_per_s: u64,
}

impl Default for NodeReplayBudget {
    fn default() -> Self {
        NodeReplayBudget {
            items_per_s: 1_000.0,
            bytes_per_s: 64 * 1024 * 1024,
        }
    }
}

/// The plan runner's state on this node.
#[derive(Default)]
pub(crate) struct PlanState {
    pub(crate) wake: tokio::sync::Notify,
    pub(crate) node: std::sync::Mutex<(NodeReplayBudget, Pacer)>,
    /// The node's plan settings (the failing-path window).
    pub(super) settings: std::sync::RwLock<super::PlanSettings>,
    /// When each replay in flight was last looked at, by plan and item (this node's; a
    /// resumed plan looks at every one at once).
    pub(super) observed: std::sync::Mutex<std::collections::HashMap<(String, u32), i64>>,
}

/// Cases a look advances or writes at once (their commits shared).
pub(super) const PARALLEL: usize = 32;
/// Most replays in flight one look observes (the oldest due first).
pub(super) const OBSERVE_BATCH: usize = 64;
/// Most waiting items one look reads ahead at a time.
pub(super) const PREFETCH: usize = 64;

pub(super) fn join_error(e: tokio::task::JoinError) -> BrokerError {
    BrokerError::Store(StoreError::Unavailable {
        source: Box::new(std::io::Error::other(format!(
            "a replay plan task failed: {e}"
        ))),
    })
}

/// Most replays in flight whose last look a node remembers.
pub(super) const MAX_OBSERVED: usize = 100_000;

pub(super) fn plan_conflict(code: &str, why: impl Into<String>) -> BrokerError {
    BrokerError::PlanConflict {
        code: code.to_owned(),
        why: why.into(),
    }
}

impl Plans {
    pub(crate) fn wake_plans(&self) {
        self.state.wake.notify_one();
    }

    /// Whether any item of a plan waits.
    pub(super) async fn has_waiting(&self, plan_id: &str) -> BrokerResult<bool> {
        Ok(!self
            .items_in(plan_id, PlanItemState::Waiting, 1)
            .await?
            .is_empty())
    }

    /// A plan's replays in flight (its admitted items: at most its concurrency bound,
    /// which one page holds).
    pub(super) async fn in_flight_items(&self, plan_id: &str) -> BrokerResult<Vec<PlanItemRecord>> {
        self.items_in(
            plan_id,
            PlanItemState::Admitted,
            redrive_store::MAX_PLAN_ITEM_PAGE,
        )
        .await
    }

    /// The first `limit` items of a plan in `state`, in order.
    pub(super) async fn items_in(
        &self,
        plan_id: &str,
        state: PlanItemState,
        limit: u32,
    ) -> BrokerResult<Vec<PlanItemRecord>> {
        Ok(self
            .ctx
            .store
            .replay_plan_items(
                plan_id,
                &PlanItemQuery {
                    states: vec![state],
                    after_seq: None,
                    limit,
                },
            )
            .await?)
    }
}

/// `f` over `inputs`, [`PARALLEL`] at a time, the answers in the inputs' order.
pub(super) async fn side_by_side<T, R, F, Fut>(
    plans: &Plans,
    inputs: Vec<T>,
    mut f: F,
) -> BrokerResult<Vec<R>>
where
    F: FnMut(Plans, T) -> Fut,
    Fut: std::future::Future<Output = R> + Send + 'static,
    R: Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    let mut out: Vec<(usize, R)> = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.into_iter().enumerate() {
        if set.len() >= PARALLEL
            && let Some(r) = set.join_next().await
        {
            out.push(r.map_err(join_error)?);
        }
        let fut = f(plans.clone(), input);
        set.spawn(async move { (i, fut.await) });
    }
    while let Some(r) = set.join_next().await {
        out.push(r.map_err(join_error)?);
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out.into_iter().map(|(_, r)| r).collect())
}

/// The plan's owner as an actor (for the audit entries of its admissions).
pub(super) fn plan_actor(plan: &ReplayPlanRecord) -> Actor {
    Actor {
        id: plan.owner_id.clone(),
        name: plan.owner_name.clone(),
        grants: Vec::new(),
        client: None,
    }
}

pub(super) fn stop_words(reason: &StopReason, detail: Option<&str>) -> String {
    match reason {
        StopReason::EffectUnavailable { item } => {
            format!("authoritative evidence of {item}'s prior effect is unavailable")
        }
        StopReason::EffectIndeterminate { item } => {
            format!("the replay of {item} produced an indeterminate effect")
        }
        StopReason::RepeatedFailure { shape, items } => format!(
            "two replays ({} and {}) showed the same failure shape: {shape}",
            items[0], items[1]
        ),
        StopReason::ErrorRate {
            observed,
            threshold,
        } => format!("the dependency's error rate {observed} crossed its threshold {threshold}"),
        StopReason::Latency {
            observed,
            threshold,
        } => format!(
            "the dependency's latency ({} ms, {} ms) crossed its threshold {threshold} ms for two observation windows",
            observed[0], observed[1]
        ),
        StopReason::OrderingChanged => "the ordering evidence changed: a session's open cases differ from the plan's".into(),
        StopReason::AuthorizationChanged => {
            "the owner's authorization changed: its token is revoked, expired or no longer grants replayer on the source and destination".into()
        }
        StopReason::LeaseLost => "the owner's lease on the plan ran out".into(),
        StopReason::BudgetUnobservable => format!(
            "the dependency's capacity could not be observed{}",
            detail.map(|d| format!(": {d}")).unwrap_or_default()
        ),
    }
}

#[cfg(test)]
mod tests {
    use redrive_store::{PlanKind, PlanMut, PlanStatus};

    use super::*;

    /// A `replay_plans.spec` value as rows hold it: every field written.
    const STORED: &str = r#"{"reasons":["schema_mismatch"],"types":["order.created"],"from_ms":1700000000000,"to_ms":null,"case_ids":[],"budget":{"items_per_s":1.0,"bytes_per_s":65536,"max_concurrent":2,"window":10,"dependency":{"name":"ledger-db","probe_url":"http://ledger.internal/health","max_error_rate":0.05,"max_latency_ms":250}},"correction":"fix-1","lease_ms":3600000,"observe_ms":10000,"sessions":{"s1":["case_a","case_b"]}}"#;

    #[test]
    fn a_stored_spec_decodes_and_encodes_back_the_same() {
        let spec: PlanSpec = serde_json::from_str(STORED).unwrap();
        assert_eq!(spec.budget.items_per_s, 1.0);
        assert_eq!(spec.budget.bytes_per_s, 65_536);
        assert_eq!(spec.budget.max_concurrent, 2);
        assert_eq!(spec.budget.window, 10);
        assert_eq!(spec.budget.dependency.name, "ledger-db");
        assert_eq!(
            spec.budget.dependency.probe_url,
            "http://ledger.internal/health"
        );
        assert_eq!(spec.budget.dependency.max_error_rate, 0.05);
        assert_eq!(spec.budget.dependency.max_latency_ms, 250);
        assert_eq!(spec.correction.as_deref(), Some("fix-1"));
        assert_eq!(spec.sessions["s1"], ["case_a", "case_b"]);
        let want: serde_json::Value = serde_json::from_str(STORED).unwrap();
        assert_eq!(serde_json::to_value(&spec).unwrap(), want);
        let record = ReplayPlanRecord {
            id: "plan_1".into(),
            kind: PlanKind::Cases,
            queue: "orders".into(),
            destination: "orders".into(),
            owner_id: "anonymous".into(),
            owner_name: "anonymous".into(),
            spec: want,
            items: 0,
            created_at: Timestamp(0),
            version: 0,
            m: PlanMut {
                status: PlanStatus::Planned,
                owner_until: Timestamp(0),
                stop_reason: None,
                next_at: None,
                state: serde_json::Value::Null,
                updated_at: Timestamp(0),
            },
        };
        assert_eq!(PlanSpec::of(&record).unwrap(), spec);
    }

    /// A plan selected by signature keeps it; a spec without one writes no such key.
    #[test]
    fn a_spec_s_signature_is_kept_and_left_out_when_absent() {
        let mut spec: PlanSpec = serde_json::from_str(STORED).unwrap();
        assert_eq!(spec.signature, None);
        assert!(
            serde_json::to_value(&spec)
                .unwrap()
                .get("signature")
                .is_none()
        );
        spec.signature = Some("0f".repeat(16));
        let value = serde_json::to_value(&spec).unwrap();
        assert_eq!(value["signature"], "0f".repeat(16));
        let back: PlanSpec = serde_json::from_value(value).unwrap();
        assert_eq!(back, spec);
    }

    /// A row written before the optional fields existed still decodes (they default).
    #[test]
    fn a_stored_spec_without_its_optional_fields_decodes() {
        let text = r#"{"budget":{"items_per_s":0.5,"bytes_per_s":1024,"max_concurrent":1,"window":1,"dependency":{"name":"d","probe_url":"https://d","max_error_rate":1.0,"max_latency_ms":1}},"lease_ms":60000,"observe_ms":100}"#;
        let spec: PlanSpec = serde_json::from_str(text).unwrap();
        assert!(spec.reasons.is_empty() && spec.case_ids.is_empty());
        assert_eq!(spec.correction, None);
        assert!(spec.sessions.is_empty());
        assert_eq!(spec.budget.items_per_s, 0.5);
        assert_eq!(spec.budget.dependency.probe_url, "https://d");
    }
}
