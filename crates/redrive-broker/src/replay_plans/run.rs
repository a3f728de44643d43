//! Running a replay plan: creation (the selection fixed, the ordering scopes recorded),
//! start, pause, resume, cancel, and the advance that admits items under the budget and
//! observes their outcomes.
//!
//! # One advance ([`Broker::advance_plan`])
//!
//! 1. The owner's lease and current authorization are read: a lease that ran out, or a
//!    token revoked, expired or no longer granted `replayer` on the source and the
//!    destination, is a stop condition.
//! 2. Every admitted item's case is advanced (its replay observed through the effect
//!    authority): a completed case completes the item; a closed one closes it; a stopped
//!    replay stops it with its trigger — lost effect evidence and a repeated failure shape
//!    are stop conditions of the plan.
//! 3. The dependency is probed once per observation window (and before a window opens).
//! 4. The stop conditions are checked (`redrive_core::plan::stop`, in the seed's order).
//! 5. While running, the next waiting items are admitted one at a time, in order, within
//!    the window, each only after its gates pass now: the case reconciled with its effect
//!    authority now, its decision eligible, no other owner's claim on it, the destination
//!    off the failing path, its session's predecessors resolved; then the plan's pacer and
//!    the node's replay budget must both say now. The admission is written to the plan
//!    first (the item lease), then to the case (`replay_admitted`, bound to the plan and
//!    budget), then the replay `<id>|<n>` is sent.
//! 6. A window whose items all settled opens the next one only if the gates still pass
//!    (a fresh probe within thresholds); a plan with nothing waiting and nothing in flight
//!    completes.
//!
//! Every write of a plan is conditional on the version read, so one advance at a time
//! changes a plan, on any node; the pacing state is in the plan, so a resumed plan keeps
//! its spacing, and an item already admitted is never admitted again.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use redrive_core::access::Operation;
use redrive_core::case::{self, CaseState, Lease};
use redrive_core::plan::{self, Budget, BudgetSpec, Dependency, Observations, Pacer, StopReason};
use redrive_core::{EntityName, Timestamp};
use redrive_store::{
    AuditFields, CaseQuery, CaseRecord, DeadLetterRecord, PlanItemQuery, PlanItemRecord,
    PlanItemState, PlanKind, PlanMut, PlanQuery, PlanStatus, ReplayPlanRecord, ReplayPlanUpdate,
    StoreError,
};
use serde::{Deserialize, Serialize};

use super::probe::{self, Reading};
use super::{PlanSelectionInput, budget_refusal, checked_budget, gate_of};
use crate::cases::CaseContext;
use crate::cases::data::{self, CaseData, Known, ReplayStatus};
use crate::cases::ops::{ReplayAdmission, Step};
use crate::metrics::Counter;
use crate::{Actor, Broker, BrokerError, BrokerResult, Outgoing};

pub use redrive_core::plan::{DEFAULT_OBSERVE_MS, DEFAULT_PLAN_LEASE_MS, MAX_PLAN_LEASE_MS};
/// How often a running plan with replays in flight looks at them, ms.
pub const OBSERVE_IN_FLIGHT_MS: i64 = 1_000;
/// The least time between two looks at one replay in flight (each asks its effect
/// authority), ms: the first look comes this long after the admission; later ones a
/// quarter of the replay's age apart, at most [`OBSERVE_ITEM_MAX_MS`].
pub const OBSERVE_ITEM_MS: i64 = 250;
/// The most time between two looks at one replay in flight, ms.
pub const OBSERVE_ITEM_MAX_MS: i64 = 2_000;
/// Most items one advance admits (the rest at the next).
pub const ADMIT_BATCH: usize = 1_000;
/// How many times an advance reads a plan again when another writer changed it.
const RETRIES: usize = 3;

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
    fn of(plan: &ReplayPlanRecord) -> RunState {
        serde_json::from_value(plan.m.state.clone()).unwrap_or_default()
    }

    fn value(&self) -> serde_json::Value {
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

    fn pacer(&self) -> Pacer {
        Pacer {
            next_item_ms: self.next_item_ms,
            bytes_until_ms: self.bytes_until_ms,
            in_flight: self.in_flight,
        }
    }

    fn set_pacer(&mut self, p: &Pacer) {
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
    /// When each replay in flight was last looked at, by plan and item (this node's; a
    /// resumed plan looks at every one at once).
    observed: std::sync::Mutex<std::collections::HashMap<(String, u32), i64>>,
}

/// Cases a look advances or writes at once (their commits shared).
const PARALLEL: usize = 32;
/// Most replays in flight one look observes (the oldest due first).
const OBSERVE_BATCH: usize = 64;
/// Most waiting items one look reads ahead at a time.
const PREFETCH: usize = 64;

fn join_error(e: tokio::task::JoinError) -> BrokerError {
    BrokerError::Store(StoreError::Unavailable {
        source: Box::new(std::io::Error::other(format!(
            "a replay plan task failed: {e}"
        ))),
    })
}

/// Most replays in flight whose last look a node remembers.
const MAX_OBSERVED: usize = 100_000;

fn plan_conflict(code: &str, why: impl Into<String>) -> BrokerError {
    BrokerError::PlanConflict {
        code: code.to_owned(),
        why: why.into(),
    }
}

/// Where an admitted item's case stands.
enum Outcome {
    InFlight,
    NotRecorded,
    Completed,
    Closed(String),
    Stopped(String),
}

impl Broker {
    /// Sets the node-wide replay budget.
    pub fn set_node_replay_budget(&self, budget: NodeReplayBudget) {
        let mut node = self
            .inner
            .plans
            .node
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        node.0 = budget;
    }

    pub(crate) fn wake_plans(&self) {
        self.inner.plans.wake.notify_one();
    }

    /// Creates a plan over the selection, owned by `actor`: refused when its budget is
    /// unbounded or out of range, when the destination does not exist or is the failing
    /// path (it dead-lettered one of the items' reasons within
    /// [`FAILURE_PERSISTS_MS`](super::FAILURE_PERSISTS_MS)), or when `actor` may not
    /// replay to the destination. The items are fixed now, in order; a session's items are
    /// held `ordering_missing` unless the plan holds every open case of the session.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %input.selection.queue))]
    pub async fn create_plan(&self, input: &PlanInput, actor: &Actor) -> BrokerResult<PlanView> {
        let r = self.create_plan_inner(input, actor).await;
        let targets = match &r {
            Ok(v) => vec![v.plan.id.clone(), format!("items={}", v.plan.items)],
            Err(_) => Vec::new(),
        };
        self.audited(
            actor,
            "replay.plan_create",
            Some(input.selection.queue.as_str()),
            targets,
            r,
        )
        .await
    }

    async fn create_plan_inner(&self, input: &PlanInput, actor: &Actor) -> BrokerResult<PlanView> {
        // Every field's range is judged in one place (redrive_core::plan), before anything
        // is read or stored.
        let budget = checked_budget(&input.budget)?;
        let lease_ms = plan::check_lease_ms(input.lease_ms).map_err(budget_refusal)?;
        let observe_ms = plan::check_observe_ms(input.observe_ms).map_err(budget_refusal)?;
        if let Some(c) = &input.correction {
            plan::check_correction(c).map_err(budget_refusal)?;
        }
        let sel = &input.selection;
        let (queue, destination, destination_exists) = self.resolve_selection(sel).await?;
        if !destination_exists {
            return Err(plan_conflict(
                "destination_invalid",
                format!("the destination queue {destination} does not exist"),
            ));
        }
        self.authorize(actor, Operation::ReplayCase, Some(destination.as_str()))
            .await?;
        let mut cases = self.select(&queue, sel).await?;
        cases.sort_by(|a, b| (a.dead_lettered_at, &a.id).cmp(&(b.dead_lettered_at, &b.id)));
        let now = self.now();
        let reasons: BTreeSet<&str> = cases.iter().map(|c| c.reason.as_str()).collect();
        for reason in reasons {
            if self.failure_persists(&destination, reason, now).await? {
                return Err(plan_conflict(
                    "destination_invalid",
                    format!(
                        "the destination {destination} is the failing path: it dead-lettered {reason} within the last {} s, and replaying there would repeat the failure",
                        super::FAILURE_PERSISTS_MS / 1000
                    ),
                ));
            }
        }
        // The ordering scopes: a session is admitted only whole.
        let selected: BTreeSet<&str> = cases.iter().map(|c| c.id.as_str()).collect();
        let mut sessions: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut missing: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let session_ids: BTreeSet<&str> = cases
            .iter()
            .filter_map(|c| c.session_id.as_deref())
            .collect();
        for session in session_ids {
            let all = self.session_cases(&queue, session).await?;
            let absent: Vec<String> = all
                .iter()
                .filter(|c| !selected.contains(c.id.as_str()))
                .map(|c| c.id.clone())
                .collect();
            if absent.is_empty() {
                sessions.insert(
                    session.to_owned(),
                    all.iter().map(|c| c.id.clone()).collect(),
                );
            } else {
                missing.insert(session.to_owned(), absent);
            }
        }
        let spec = PlanSpec {
            reasons: sel.reasons.clone(),
            types: sel.types.clone(),
            from_ms: sel.from.map(|t| t.as_millis()),
            to_ms: sel.to.map(|t| t.as_millis()),
            case_ids: sel.case_ids.clone(),
            budget,
            correction: input.correction.clone(),
            lease_ms,
            observe_ms,
            sessions,
        };
        let mut run = RunState {
            bytes_total: cases.iter().map(|c| c.body_size).sum(),
            ..RunState::default()
        };
        let items: Vec<PlanItemRecord> = cases
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let held = c.session_id.as_ref().and_then(|s| missing.get(s));
                if held.is_some() {
                    run.held += 1;
                    run.bytes_held += c.body_size;
                }
                PlanItemRecord {
                    seq: i as u32,
                    case_id: c.id.clone(),
                    bytes: c.body_size,
                    state: if held.is_some() {
                        PlanItemState::Held
                    } else {
                        PlanItemState::Waiting
                    },
                    window: None,
                    message_id: None,
                    detail: held.map(|m| {
                        format!(
                            "ordering_missing: the session's open cases {} are not in the plan",
                            m.join(", ")
                        )
                    }),
                    updated_at: now,
                }
            })
            .collect();
        let id = redrive_core::id::new_dead_letter_id(now).replacen("dl_", "plan_", 1);
        let record = ReplayPlanRecord {
            id,
            kind: PlanKind::Cases,
            queue: queue.to_string(),
            destination: destination.to_string(),
            owner_id: actor.id.clone(),
            owner_name: actor.name.clone(),
            spec: serde_json::to_value(&spec).unwrap_or_default(),
            items: items.len() as u64,
            created_at: now,
            version: 0,
            m: PlanMut {
                status: PlanStatus::Planned,
                owner_until: now,
                stop_reason: None,
                next_at: None,
                state: run.value(),
                updated_at: now,
            },
        };
        let written = self.inner.store.create_replay_plan(&record, &items).await?;
        self.plan_view(written).await
    }

    /// The open cases of `session` on `queue`, in dead-letter order.
    async fn session_cases(
        &self,
        queue: &EntityName,
        session: &str,
    ) -> BrokerResult<Vec<CaseRecord>> {
        let mut out = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .inner
                .store
                .list_cases(&CaseQuery {
                    queue: Some(queue.clone()),
                    open: true,
                    after: after.clone(),
                    limit: redrive_store::MAX_CASE_PAGE,
                    ..CaseQuery::default()
                })
                .await?;
            let full = page.len() == redrive_store::MAX_CASE_PAGE as usize;
            after = page.last().map(|c| c.id.clone());
            out.extend(
                page.into_iter()
                    .filter(|c| c.session_id.as_deref() == Some(session)),
            );
            if !full {
                break;
            }
        }
        out.sort_by(|a, b| (a.dead_lettered_at, &a.id).cmp(&(b.dead_lettered_at, &b.id)));
        Ok(out)
    }

    /// The view of a plan now.
    #[tracing::instrument(level = "debug", skip_all, fields(plan = %id))]
    pub async fn get_plan(&self, id: &str) -> BrokerResult<PlanView> {
        let plan = self.inner.store.get_replay_plan(id).await?;
        self.plan_view(plan).await
    }

    async fn plan_view(&self, plan: ReplayPlanRecord) -> BrokerResult<PlanView> {
        if plan.kind == PlanKind::SqsMove {
            return super::moves::move_plan_view(plan);
        }
        let spec = PlanSpec::of(&plan)?;
        let run = RunState::of(&plan);
        // From the counters, not a scan: every item is waiting, held, or was admitted.
        let waiting = plan.items.saturating_sub(run.admitted + run.held);
        let bytes = run
            .bytes_total
            .saturating_sub(run.bytes_admitted + run.bytes_held);
        let eta_ms = spec.budget.lower_bound_ms(waiting, bytes);
        Ok(PlanView {
            plan,
            spec,
            run,
            waiting,
            eta_ms,
            sqs_move: None,
        })
    }

    /// Whether any item of a plan waits.
    async fn has_waiting(&self, plan_id: &str) -> BrokerResult<bool> {
        Ok(!self
            .items_in(plan_id, PlanItemState::Waiting, 1)
            .await?
            .is_empty())
    }

    /// A page of plans.
    pub async fn list_plans(&self, query: &PlanQuery) -> BrokerResult<Vec<ReplayPlanRecord>> {
        Ok(self.inner.store.list_replay_plans(query).await?)
    }

    /// The view of a plan already read (its waiting items counted now).
    pub async fn view_plan(&self, plan: ReplayPlanRecord) -> BrokerResult<PlanView> {
        self.plan_view(plan).await
    }

    /// A page of a plan's items.
    #[tracing::instrument(level = "debug", skip_all, fields(plan = %id))]
    pub async fn plan_items(
        &self,
        id: &str,
        query: &PlanItemQuery,
    ) -> BrokerResult<Vec<PlanItemRecord>> {
        Ok(self.inner.store.replay_plan_items(id, query).await?)
    }

    /// Starts a planned plan: its owner's lease runs from now.
    #[tracing::instrument(level = "debug", skip_all, fields(plan = %id))]
    pub async fn start_plan(&self, id: &str, actor: &Actor) -> BrokerResult<PlanView> {
        self.owner_change(id, actor, "replay.plan_start", |plan, run, now| {
            if plan.m.status != PlanStatus::Planned {
                return Err(plan_conflict(
                    "plan_state",
                    format!(
                        "plan {} is {}; only a planned plan starts",
                        plan.id, plan.m.status
                    ),
                ));
            }
            let spec = PlanSpec::of(plan)?;
            run.started_ms = Some(now.as_millis());
            Ok(PlanMut {
                status: PlanStatus::Running,
                owner_until: now.plus_millis(spec.lease_ms as i64),
                next_at: Some(now),
                ..plan.m.clone()
            })
        })
        .await
    }

    /// Pauses a running plan: nothing more is admitted; replays in flight are still
    /// observed, and no evidence is reset.
    #[tracing::instrument(level = "debug", skip_all, fields(plan = %id))]
    pub async fn pause_plan(&self, id: &str, actor: &Actor) -> BrokerResult<PlanView> {
        self.owner_change(id, actor, "replay.plan_pause", |plan, _run, _now| {
            if plan.m.status != PlanStatus::Running {
                return Err(plan_conflict(
                    "plan_state",
                    format!(
                        "plan {} is {}; only a running plan pauses",
                        plan.id, plan.m.status
                    ),
                ));
            }
            Ok(PlanMut {
                status: PlanStatus::Paused,
                ..plan.m.clone()
            })
        })
        .await
    }

    /// Resumes a paused plan under the same budget and evidence; the owner's lease is
    /// renewed from now.
    #[tracing::instrument(level = "debug", skip_all, fields(plan = %id))]
    pub async fn resume_plan(&self, id: &str, actor: &Actor) -> BrokerResult<PlanView> {
        self.owner_change(id, actor, "replay.plan_resume", |plan, _run, now| {
            if plan.m.status != PlanStatus::Paused {
                return Err(plan_conflict(
                    "plan_state",
                    format!(
                        "plan {} is {}; only a paused plan resumes",
                        plan.id, plan.m.status
                    ),
                ));
            }
            let spec = PlanSpec::of(plan)?;
            Ok(PlanMut {
                status: PlanStatus::Running,
                owner_until: now.plus_millis(spec.lease_ms as i64),
                next_at: Some(now),
                ..plan.m.clone()
            })
        })
        .await
    }

    /// Cancels a plan that has not ended: nothing more is admitted; its replays in flight
    /// go on being observed by their cases.
    #[tracing::instrument(level = "debug", skip_all, fields(plan = %id))]
    pub async fn cancel_plan(&self, id: &str, actor: &Actor) -> BrokerResult<PlanView> {
        self.owner_change(id, actor, "replay.plan_cancel", |plan, _run, _now| {
            if !(plan.m.status.is_active() || plan.m.status == PlanStatus::Planned) {
                return Err(plan_conflict(
                    "plan_state",
                    format!("plan {} has ended ({})", plan.id, plan.m.status),
                ));
            }
            Ok(PlanMut {
                status: PlanStatus::Cancelled,
                next_at: None,
                ..plan.m.clone()
            })
        })
        .await
    }

    /// An owner's change of a plan's status: by its owner (or an admin), written
    /// conditionally (retried when the runner wrote in between), audited.
    async fn owner_change<F>(
        &self,
        id: &str,
        actor: &Actor,
        action: &str,
        f: F,
    ) -> BrokerResult<PlanView>
    where
        F: Fn(&ReplayPlanRecord, &mut RunState, Timestamp) -> BrokerResult<PlanMut>,
    {
        let mut result = Err(plan_conflict("plan_busy", "the plan kept changing"));
        let mut queue = None;
        for _ in 0..RETRIES * 3 {
            let plan = self.inner.store.get_replay_plan(id).await?;
            queue = Some(plan.queue.clone());
            if plan.owner_id != actor.id && !actor.permits(Operation::ManageTokens, None) {
                // Refused before anything is tried: audited as a refusal, not as a failed
                // change.
                return Err(self
                    .refuse(
                        actor,
                        action,
                        "the plan's owner or admin",
                        Some(&plan.queue),
                    )
                    .await);
            }
            if plan.kind != PlanKind::Cases {
                // A move task's plan is moved by the move task operations only.
                result = Err(plan_conflict(
                    "plan_state",
                    format!(
                        "plan {id} is a {} plan: it is cancelled as a message move task",
                        plan.kind
                    ),
                ));
                break;
            }
            let now = self.now();
            let mut run = RunState::of(&plan);
            let mut set = match f(&plan, &mut run, now) {
                Ok(s) => s,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            let mut items = Vec::new();
            if set.status == PlanStatus::Cancelled {
                items = self
                    .release_admitted(&plan, &mut run, "plan_cancelled", now)
                    .await?;
            }
            set.state = run.value();
            set.updated_at = now;
            match self
                .inner
                .store
                .update_replay_plan(&ReplayPlanUpdate {
                    id: plan.id.clone(),
                    version: plan.version,
                    set,
                    items,
                })
                .await
            {
                Ok(written) => {
                    result = Ok(written);
                    break;
                }
                Err(StoreError::ReplayPlanChanged { .. }) => continue,
                Err(e) => {
                    result = Err(e.into());
                    break;
                }
            }
        }
        let targets = vec![id.to_owned()];
        let written = self
            .audited(actor, action, queue.as_deref(), targets, result)
            .await?;
        self.wake_plans();
        self.plan_view(written).await
    }

    /// The admitted items of a plan that ends, released (their replays go on being
    /// observed by their cases): stopped with `detail`.
    async fn release_admitted(
        &self,
        plan: &ReplayPlanRecord,
        run: &mut RunState,
        detail: &str,
        now: Timestamp,
    ) -> BrokerResult<Vec<PlanItemRecord>> {
        let admitted = self.in_flight_items(&plan.id).await?;
        run.in_flight = 0;
        Ok(admitted
            .into_iter()
            .map(|mut i| {
                i.state = PlanItemState::Stopped;
                i.detail = Some(detail.to_owned());
                i.updated_at = now;
                i
            })
            .collect())
    }

    /// A plan's replays in flight (its admitted items: at most its concurrency bound,
    /// which one page holds).
    async fn in_flight_items(&self, plan_id: &str) -> BrokerResult<Vec<PlanItemRecord>> {
        self.items_in(
            plan_id,
            PlanItemState::Admitted,
            redrive_store::MAX_PLAN_ITEM_PAGE,
        )
        .await
    }

    /// The first `limit` items of a plan in `state`, in order.
    async fn items_in(
        &self,
        plan_id: &str,
        state: PlanItemState,
        limit: u32,
    ) -> BrokerResult<Vec<PlanItemRecord>> {
        Ok(self
            .inner
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

    /// The plan's owner as an actor now, if it is still authorized to replay from the
    /// source to the destination (`None`: its token was revoked, expired or changed).
    async fn plan_owner(&self, plan: &ReplayPlanRecord) -> BrokerResult<Option<Actor>> {
        let actor = match plan.owner_id.as_str() {
            "anonymous" => Some(Actor::anonymous()),
            "system" => Some(Actor::system(&plan.owner_name)),
            id => {
                let now = self.now();
                self.inner
                    .store
                    .list_tokens()
                    .await?
                    .iter()
                    .find(|t| t.token.id == id && t.is_active(now))
                    .map(crate::access::actor_of)
            }
        };
        Ok(actor.filter(|a| {
            a.permits(Operation::ReplayCase, Some(&plan.queue))
                && a.permits(Operation::ReplayCase, Some(&plan.destination))
        }))
    }

    /// One look at every active plan that is due: public so that tests drive plans on a
    /// manual clock.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn plans_once(&self) -> BrokerResult<PlanPass> {
        let mut pass = PlanPass::default();
        let mut after = None;
        loop {
            let page = self
                .inner
                .store
                .list_replay_plans(&PlanQuery {
                    status: vec![PlanStatus::Running, PlanStatus::Paused],
                    // `sqs_move` plans are the mover's (`crate::mover`).
                    kinds: vec![PlanKind::Cases],
                    after: after.clone(),
                    ..PlanQuery::default()
                })
                .await?;
            let full = page.len() == redrive_store::MAX_PLAN_PAGE as usize;
            after = page.last().map(|p| p.id.clone());
            for plan in page {
                let now = self.now();
                let due = plan.m.next_at.is_none_or(|t| t <= now);
                let next = if due {
                    match self.advance_plan(&plan.id).await {
                        Ok(p) => {
                            pass.advanced += 1;
                            p.m.next_at.filter(|_| p.m.status.is_active())
                        }
                        Err(e) => {
                            tracing::warn!(plan_id = %plan.id, error = %e, "replay plan could not be advanced; retrying");
                            Some(now.plus_millis(OBSERVE_IN_FLIGHT_MS))
                        }
                    }
                } else {
                    plan.m.next_at
                };
                if let Some(t) = next {
                    pass.next_at = Some(pass.next_at.map_or(t, |n: Timestamp| n.min(t)));
                }
            }
            if !full {
                return Ok(pass);
            }
        }
    }

    /// Advances a plan once (see the module docs), retried when another writer changed it
    /// in between. Returns the plan as written.
    #[tracing::instrument(level = "debug", skip_all, fields(plan = %id))]
    pub async fn advance_plan(&self, id: &str) -> BrokerResult<ReplayPlanRecord> {
        let mut last = None;
        for _ in 0..RETRIES {
            match self.advance_plan_once(id).await {
                Ok(p) => return Ok(p),
                Err(BrokerError::Store(e @ StoreError::ReplayPlanChanged { .. })) => {
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.map_or_else(
            || plan_conflict("plan_busy", "the plan kept changing"),
            Into::into,
        ))
    }

    async fn advance_plan_once(&self, id: &str) -> BrokerResult<ReplayPlanRecord> {
        let mut plan = self.inner.store.get_replay_plan(id).await?;
        if !plan.m.status.is_active() {
            return Ok(plan);
        }
        let spec = PlanSpec::of(&plan)?;
        let budget = spec.budget.clone();
        let mut run = RunState::of(&plan);
        // The effect authorities, the register and the queues, read once for the look.
        let ctx = Arc::new(self.case_context().await?);
        let now = self.now();
        let mut obs = Observations::default();
        let mut items: BTreeMap<u32, PlanItemRecord> = BTreeMap::new();
        let mut changed = false;

        // 1. The owner's lease and current authorization.
        if plan.m.owner_until <= now {
            obs.lease_lost = true;
        }
        if self.plan_owner(&plan).await?.is_none() {
            obs.authorization_changed = true;
        }

        // 2. The replays in flight.
        let mut pacer = run.pacer();
        // At most OBSERVE_BATCH a look, in admission order: a look stays short, so the
        // admissions keep their pace; the rest are looked at by the next looks.
        let in_flight = self.in_flight_items(&plan.id).await?;
        let mut due: Vec<PlanItemRecord> = in_flight
            .iter()
            .filter(|i| self.observe_due(&plan.id, i.seq, i.updated_at, now, false))
            .cloned()
            .collect();
        let more_due = due.len() > OBSERVE_BATCH;
        due.truncate(OBSERVE_BATCH);
        due.retain(|i| self.observe_due(&plan.id, i.seq, i.updated_at, now, true));
        // Beside the observation, what the admissions read (nothing is written): the
        // waiting items the pacer may let go now and what their gates read.
        let running = plan.m.status == PlanStatus::Running;
        let ahead = async {
            let room = if run.window == 0 || run.window_admitted >= budget.window {
                budget.window
            } else {
                budget.window - run.window_admitted
            } as usize;
            let limit = (slots_now(&pacer, &budget, now, ADMIT_BATCH) + 1).min(room);
            if !running || limit == 0 {
                return Ok::<_, BrokerError>(ReadAhead::default());
            }
            let waiting = self
                .items_in(&plan.id, PlanItemState::Waiting, limit as u32)
                .await?;
            let n = admissible(&pacer, &budget, waiting.iter(), now, room.min(PREFETCH));
            let fetched = self.prefetch(&ctx, waiting[..n].to_vec()).await?;
            Ok(ReadAhead {
                all: waiting.len() < limit,
                waiting,
                fetched,
            })
        };
        let (observed, ahead) = tokio::join!(self.outcomes(due, &ctx), ahead);
        let ahead = ahead?;
        for (mut item, outcome) in observed? {
            let (state, detail) = match outcome {
                Outcome::InFlight => continue,
                Outcome::NotRecorded => {
                    pacer.finish();
                    run.admitted = run.admitted.saturating_sub(1);
                    run.bytes_admitted = run.bytes_admitted.saturating_sub(item.bytes);
                    item.state = PlanItemState::Waiting;
                    item.window = None;
                    item.message_id = None;
                    item.updated_at = now;
                    items.insert(item.seq, item);
                    changed = true;
                    continue;
                }
                Outcome::Completed => {
                    run.completed += 1;
                    (PlanItemState::Completed, "completed".to_owned())
                }
                Outcome::Closed(state) => {
                    run.closed += 1;
                    (PlanItemState::Closed, state)
                }
                Outcome::Stopped(trigger) => {
                    run.stopped += 1;
                    match trigger.as_str() {
                        "lost_effect_evidence" => {
                            obs.effect_indeterminate.push(item.case_id.clone())
                        }
                        "repeated_failure" => {
                            let shape = self.failure_shape(&item.case_id).await?;
                            run.failures.push((item.case_id.clone(), shape));
                        }
                        "lost_lease" => obs.lease_lost = true,
                        "evidence_changed" => obs.authorization_changed = true,
                        _ => {}
                    }
                    (PlanItemState::Stopped, trigger)
                }
            };
            pacer.finish();
            self.inner
                .metrics
                .add_labelled(Counter::PlanItems, &plan.queue, state.as_str(), 1);
            item.state = state;
            item.detail = Some(detail);
            item.updated_at = now;
            items.insert(item.seq, item);
            changed = true;
        }
        obs.failures = run.failures.clone();
        // The replays this look saw settle (or go back to waiting).
        let settled: BTreeSet<u32> = items.keys().copied().collect();
        // Held items are looked at again when a replay settled or nothing is in flight:
        // one whose case reached a terminal state closes; a session's successor goes back
        // to waiting once its predecessors' cases are terminal (admitted in order).
        let mut holds = Vec::new();
        let mut released = false;
        if running && run.held > 0 && (!settled.is_empty() || pacer.in_flight == 0) {
            released = self
                .reexamine_held(&plan, &spec, &mut run, &mut items, &mut holds, now)
                .await?;
            changed |= released || !holds.is_empty();
        }

        // 3. The dependency, once per observation window (and before the first window).
        // A window opens when the last one's items all settled (or none opened yet), and
        // only if the gates still pass: the dependency is read again first.
        let opening = running
            && (run.window == 0 || (run.window_admitted >= budget.window && pacer.in_flight == 0))
            && self.has_waiting(&plan.id).await?;
        let probe_due = opening
            || run
                .probed_ms
                .is_none_or(|t| now.as_millis() - t >= spec.observe_ms as i64);
        if running && probe_due && !obs.lease_lost && !obs.authorization_changed {
            self.observe_dependency(&budget, &mut run, &mut obs, now)
                .await;
            changed = true;
        }

        // 4. Stop conditions.
        let stop = redrive_core::plan::stop(&budget, &obs);
        if let Some(reason) = stop {
            run.set_pacer(&pacer);
            return self.stop_plan(&plan, run, items, &reason, now).await;
        }

        // 5. Admissions (each item a gate holds is an audit entry once written).
        let mut next_at = released.then_some(now);
        let mut admitted_now = false;
        if running {
            if opening {
                run.window += 1;
                run.window_admitted = 0;
                changed = true;
            }
            let window_room = budget.window.saturating_sub(run.window_admitted);
            if window_room > 0 {
                // The items the pacer may let go now (and one to learn when the next may):
                // a paced look reads a few, not a batch. Those read ahead serve when they
                // are enough (or all there are).
                let limit =
                    (slots_now(&pacer, &budget, now, ADMIT_BATCH) + 1).min(window_room as usize);
                let waiting = if ahead.all || ahead.waiting.len() >= limit {
                    let mut w = ahead.waiting;
                    w.truncate(limit);
                    w
                } else {
                    self.items_in(&plan.id, PlanItemState::Waiting, limit as u32)
                        .await?
                };
                let mut look = Look {
                    ctx: Arc::clone(&ctx),
                    destination: plan.destination.parse()?,
                    failing: BTreeMap::new(),
                    batch: Vec::new(),
                };
                let mut waiting: VecDeque<PlanItemRecord> = waiting.into();
                let mut fetched: HashMap<u32, Option<Pre>> = ahead.fetched.into_iter().collect();
                while let Some(item) = waiting.pop_front() {
                    if run.window_admitted >= budget.window {
                        break;
                    }
                    if !fetched.contains_key(&item.seq) {
                        // Read ahead, side by side, the items the pacer lets go now.
                        let room = budget.window.saturating_sub(run.window_admitted) as usize;
                        let n = admissible(
                            &pacer,
                            &budget,
                            std::iter::once(&item).chain(waiting.iter()),
                            now,
                            room.min(PREFETCH),
                        );
                        if n > 0 {
                            let ahead: Vec<PlanItemRecord> = std::iter::once(item.clone())
                                .chain(waiting.iter().take(n - 1).cloned())
                                .collect();
                            fetched.extend(self.prefetch(&ctx, ahead).await?);
                        }
                    }
                    let pre = fetched.remove(&item.seq);
                    match self
                        .gate_item(
                            &plan, &spec, &budget, &mut run, &mut pacer, &items, &mut look, item,
                            pre, now,
                        )
                        .await?
                    {
                        Admit::Prepared => {}
                        Admit::Held(i) => {
                            holds.push(self.hold_entry(&plan, &i, now));
                            run.held += 1;
                            run.bytes_held += i.bytes;
                            self.inner.metrics.add_labelled(
                                Counter::PlanItems,
                                &plan.queue,
                                "held",
                                1,
                            );
                            items.insert(i.seq, i);
                            changed = true;
                        }
                        Admit::Later(t) => {
                            next_at = t.map(|t| budget.next_look(t, now));
                            break;
                        }
                        Admit::Wait => {}
                        Admit::Stop(reason) => {
                            // Nothing of the batch was written: its slots are given back.
                            for p in &look.batch {
                                run.admitted -= 1;
                                run.bytes_admitted -= p.item.bytes;
                                pacer.finish();
                            }
                            run.set_pacer(&pacer);
                            let stopped = self.stop_plan(&plan, run, items, &reason, now).await?;
                            self.append_holds(holds).await?;
                            return Ok(stopped);
                        }
                    }
                }
                if !look.batch.is_empty() {
                    admitted_now = true;
                    let batch = std::mem::take(&mut look.batch);
                    plan = self
                        .commit_batch(
                            &plan,
                            &mut run,
                            &mut pacer,
                            &mut items,
                            batch,
                            next_at.unwrap_or(now),
                            now,
                        )
                        .await?;
                }
            }
        }
        run.set_pacer(&pacer);

        // 6. Completion: nothing waiting, nothing in flight.
        let mut status = plan.m.status;
        if running && run.in_flight == 0 {
            // Items this look held are still `waiting` in the store until it writes them.
            let waiting_left = self
                .items_in(&plan.id, PlanItemState::Waiting, items.len() as u32 + 1)
                .await?;
            let still_waiting = waiting_left.iter().any(|w| {
                items
                    .get(&w.seq)
                    .is_none_or(|i| i.state == PlanItemState::Waiting)
            }) || items.values().any(|i| i.state == PlanItemState::Waiting);
            // Never completed with items held: the plan stays running, holding them (each
            // with its gate, `GET …/items?state=held`), and looks at them again.
            if !still_waiting && run.held == 0 {
                status = PlanStatus::Completed;
                changed = true;
            }
        }
        let observe = now.plus_millis(OBSERVE_IN_FLIGHT_MS);
        let probe_at = run
            .probed_ms
            .map(|t| Timestamp(t + spec.observe_ms as i64))
            .unwrap_or(now);
        let mut wake = next_at.unwrap_or(probe_at).min(probe_at);
        if run.in_flight > 0 {
            // The next look comes when a replay in flight is due to be looked at (a full
            // window opens the next one as soon as its last replay is seen settled).
            let still: Vec<&PlanItemRecord> = in_flight
                .iter()
                .filter(|i| !settled.contains(&i.seq))
                .collect();
            let mut first = self.next_observation(&plan.id, &still, now);
            if admitted_now {
                first = Some(first.map_or(now.plus_millis(OBSERVE_ITEM_MS), |t| {
                    t.min(now.plus_millis(OBSERVE_ITEM_MS))
                }));
            }
            wake = wake.min(observe);
            if let Some(t) = first {
                wake = wake.min(t.max(now.plus_millis(redrive_core::plan::LOOK_GAP_MS)));
            }
        }
        if more_due {
            // Replays left unobserved by this look's bound: the next look comes soon.
            wake = wake.min(now.plus_millis(redrive_core::plan::LOOK_GAP_MS));
        }
        let wake = wake.max(now).min(plan.m.owner_until.max(now));
        if !changed && plan.m.next_at == Some(wake) {
            return Ok(plan);
        }
        let written = self
            .inner
            .store
            .update_replay_plan(&ReplayPlanUpdate {
                id: plan.id.clone(),
                version: plan.version,
                set: PlanMut {
                    status,
                    next_at: if status.is_active() { Some(wake) } else { None },
                    state: run.value(),
                    updated_at: now,
                    ..plan.m.clone()
                },
                items: items.into_values().collect(),
            })
            .await?;
        self.append_holds(holds).await?;
        if status == PlanStatus::Completed {
            self.inner
                .metrics
                .add_labelled(Counter::PlansEnded, &plan.queue, "completed", 1);
            self.audit(
                &Actor::system("replay_plans"),
                "replay.plan_complete",
                Some(&plan.queue),
                vec![plan.id.clone(), format!("completed={}", run.completed)],
                "ok",
            )
            .await?;
        }
        Ok(written)
    }

    /// Reads the dependency's probe into `run` and `obs`.
    async fn observe_dependency(
        &self,
        budget: &Budget,
        run: &mut RunState,
        obs: &mut Observations,
        now: Timestamp,
    ) {
        run.probed_ms = Some(now.as_millis());
        match probe::read(
            &self.case_client(),
            self.push_network(),
            &budget.dependency.probe_url,
        )
        .await
        {
            Ok(r) => {
                if run.baseline.is_none() {
                    run.baseline = Some(r);
                }
                run.readings.push(r);
                if run.readings.len() > 2 {
                    run.readings.remove(0);
                }
                obs.error_rate = Some(r.error_rate);
                obs.latency_ms = run.readings.iter().map(|r| r.latency_ms).collect();
            }
            Err(why) => {
                obs.budget_unobservable = true;
                run.stop_detail = Some(why);
            }
        }
    }

    /// Halts a plan with `reason`: recorded, counted, audited; its admitted items released.
    async fn stop_plan(
        &self,
        plan: &ReplayPlanRecord,
        mut run: RunState,
        mut items: BTreeMap<u32, PlanItemRecord>,
        reason: &StopReason,
        now: Timestamp,
    ) -> BrokerResult<ReplayPlanRecord> {
        let detail = stop_words(reason, run.stop_detail.as_deref());
        run.stop_detail = Some(detail.clone());
        for i in self
            .release_admitted(
                plan,
                &mut run,
                &format!("plan_stopped:{}", reason.as_str()),
                now,
            )
            .await?
        {
            // An item observed in this advance keeps its outcome.
            items.entry(i.seq).or_insert(i);
        }
        let written = self
            .inner
            .store
            .update_replay_plan(&ReplayPlanUpdate {
                id: plan.id.clone(),
                version: plan.version,
                set: PlanMut {
                    status: PlanStatus::Stopped,
                    stop_reason: Some(reason.as_str().to_owned()),
                    next_at: None,
                    state: run.value(),
                    updated_at: now,
                    ..plan.m.clone()
                },
                items: items.into_values().collect(),
            })
            .await?;
        self.inner
            .metrics
            .add_labelled(Counter::PlansEnded, &plan.queue, reason.as_str(), 1);
        tracing::error!(plan_id = %plan.id, reason = reason.as_str(), "replay plan stopped: {detail}");
        self.audit(
            &Actor::system("replay_plans"),
            "replay.plan_stop",
            Some(&plan.queue),
            vec![plan.id.clone(), format!("reason={}", reason.as_str())],
            "ok",
        )
        .await?;
        Ok(written)
    }

    /// Where an admitted item's case stands, as advanced by this look.
    async fn outcome_of(&self, item: &PlanItemRecord, case: CaseRecord) -> BrokerResult<Outcome> {
        if let Some(t) = case.m.state.terminal() {
            return Ok(if t == case::Terminal::Completed {
                Outcome::Completed
            } else {
                Outcome::Closed(t.to_string())
            });
        }
        let data = CaseData::of(&case);
        let Some(replay) = data
            .replays
            .iter()
            .rev()
            .find(|r| Some(&r.message_id) == item.message_id.as_ref())
        else {
            // The admission never reached the case (a crash between the two writes):
            // nothing was sent; the item waits again.
            return Ok(Outcome::NotRecorded);
        };
        match replay.status {
            ReplayStatus::InFlight | ReplayStatus::Failed => Ok(Outcome::InFlight),
            ReplayStatus::Completed => Ok(Outcome::Completed),
            ReplayStatus::Stopped => {
                let timeline = self.inner.store.case_timeline(&case.id).await?;
                let trigger = timeline
                    .iter()
                    .rev()
                    .find(|e| e.state == CaseState::ReplayStopped)
                    .and_then(|e| e.fields.get("trigger").cloned())
                    .unwrap_or_else(|| "delivery_failed".to_owned());
                Ok(Outcome::Stopped(trigger))
            }
        }
    }

    /// The failure shape a repeated failure showed: the correction's claimed shape, else
    /// the case's reason.
    async fn failure_shape(&self, case_id: &str) -> BrokerResult<String> {
        let case = self.inner.store.get_case(case_id).await?;
        let data = CaseData::of(&case);
        Ok(data
            .correction()
            .map(|c| c.addresses.clone())
            .unwrap_or_else(|| case.reason.clone()))
    }

    /// Looks at one waiting item now: its pacing, then its gates (the case reconciled with
    /// its effect authority now). An item every gate passes is prepared — the plan's
    /// pacer takes its slot — but nothing of it is written yet: [`Broker::commit_batch`]
    /// writes the batch.
    #[allow(clippy::too_many_arguments)]
    async fn gate_item(
        &self,
        plan: &ReplayPlanRecord,
        spec: &PlanSpec,
        budget: &Budget,
        run: &mut RunState,
        pacer: &mut Pacer,
        seen: &BTreeMap<u32, PlanItemRecord>,
        look: &mut Look,
        mut item: PlanItemRecord,
        pre: Option<Option<Pre>>,
        now: Timestamp,
    ) -> BrokerResult<Admit> {
        let hold = |mut item: PlanItemRecord, gate: String| {
            item.state = PlanItemState::Held;
            item.detail = Some(gate);
            item.updated_at = now;
            Admit::Held(item)
        };
        // The pacing first: nothing is asked of anyone for an item that must wait.
        match pacer.check(budget, item.bytes, now) {
            redrive_core::plan::Admission::Now => {}
            redrive_core::plan::Admission::At(t) => return Ok(Admit::Later(Some(t))),
            redrive_core::plan::Admission::Concurrency => return Ok(Admit::Later(None)),
            redrive_core::plan::Admission::TooLarge => {
                let why = format!(
                    "too_large: {} bytes exceed one second of the byte budget ({} bytes/s); it takes a separate path",
                    item.bytes, budget.bytes_per_s
                );
                return Ok(hold(item, why));
            }
        }
        if let Some(t) = self.node_check(item.bytes, now) {
            return Ok(Admit::Later(Some(t)));
        }
        let pre = match pre {
            Some(p) => p,
            None => self.prefetch_one(&item.case_id, &look.ctx).await?,
        };
        let Some(Pre {
            case,
            known,
            record,
            undecodable,
        }) = pre
        else {
            return Ok(hold(item, "case_gone".into()));
        };
        if let Some(why) = undecodable {
            // Nothing is decided about a record nobody can read: held until an operator
            // fixes or removes its row.
            return Ok(hold(item, format!("record_undecodable: {why}")));
        }
        // Ordering: a session goes in its order, each after its predecessor resolved.
        if let Some(session) = &case.session_id {
            let Some(order) = spec.sessions.get(session) else {
                return Ok(hold(item, "ordering_missing".into()));
            };
            let now_open = self.session_cases(&case.queue, session).await?;
            if now_open.iter().any(|c| !order.contains(&c.id)) {
                return Ok(Admit::Stop(StopReason::OrderingChanged));
            }
            let pos = order.iter().position(|c| *c == case.id).unwrap_or(0);
            for before in &order[..pos] {
                if look.batch.iter().any(|p| p.item.case_id == *before) {
                    return Ok(Admit::Wait);
                }
                match self.predecessor_state(&plan.id, before, seen).await? {
                    Some(PlanItemState::Completed | PlanItemState::Closed) => {}
                    Some(PlanItemState::Waiting | PlanItemState::Admitted) => {
                        return Ok(Admit::Wait);
                    }
                    // A predecessor that did not complete here blocks its successors
                    // until its case reaches a terminal state some other way.
                    _ if self.case_terminal(before).await? => {}
                    _ => {
                        return Ok(hold(
                            item,
                            format!("ordering_blocked: its predecessor {before} did not complete"),
                        ));
                    }
                }
            }
        }
        // Another owner's claim holds the case.
        if let Some(o) = case::owner_at(case.m.lease.as_ref(), now)
            && o != plan.owner_name
        {
            return Ok(hold(item, format!("case_claimed: {o} holds it")));
        }
        // The destination must be off the failing path now.
        let persists = match look.failing.get(&case.reason) {
            Some(p) => *p,
            None => {
                let p = self
                    .failure_persists(&look.destination, &case.reason, now)
                    .await?;
                look.failing.insert(case.reason.clone(), p);
                p
            }
        };
        if persists {
            return Ok(hold(
                item,
                "destination_invalid: the destination is the failing path".into(),
            ));
        }
        // A plan replays only items whose effect an authority establishes: the outcome of
        // every replay must be observable (seed 001's stop rule on lost effect evidence).
        if look.ctx.authority(case.message_type.as_deref()).is_none() {
            return Ok(hold(
                item,
                "effect_authority_missing: no effect authority is registered for its type".into(),
            ));
        }
        // Reconcile now, not at planning time; the answer is written with the admission
        // (or alone, as evidence, when a gate then holds the item).
        let mut step = Step::of(&case);
        self.reconcile_into(&case, &mut step, now, &plan.owner_name, &look.ctx)
            .await?;
        let data = step.data().clone();
        let held = |gate: String| Held { gate, stop: None };
        let outcome = if data
            .effect
            .as_ref()
            .is_some_and(|e| e.answer == case::EffectAnswer::Unreachable)
        {
            Some(Held {
                gate: "effect_unreachable".into(),
                stop: Some(StopReason::EffectUnavailable {
                    item: case.id.clone(),
                }),
            })
        } else if let Some(c) = spec
            .correction
            .as_ref()
            .filter(|c| data.correction().is_none_or(|k| &k.identity != *c))
        {
            Some(held(format!(
                "no_tested_correction: the case does not carry correction {c}"
            )))
        } else {
            let decision = case::decide(&data::facts(&case, &data, &known), now);
            gate_of(&decision, &data).map(|g| held(g.to_owned()))
        };
        if let Some(h) = outcome {
            // The reconciliation is evidence: written, audited, the case advanced.
            step.check_at(now);
            let written = self.write_step(&case, step).await;
            let owner = plan_actor(plan);
            match self
                .audited(
                    &owner,
                    "case.reconcile",
                    Some(case.queue.as_str()),
                    vec![case.id.clone(), format!("plan_id={}", plan.id)],
                    written,
                )
                .await
            {
                Ok(_) => {
                    if let Err(e) = self.advance_case_in(&case.id, &look.ctx).await {
                        tracing::warn!(case_id = %case.id, error = %e, "case could not be advanced");
                    }
                }
                // Another tool changed the case meanwhile: look at it again later.
                Err(BrokerError::Store(StoreError::CaseChanged { .. })) => {
                    return Ok(Admit::Later(Some(now.plus_millis(OBSERVE_IN_FLIGHT_MS))));
                }
                Err(e) => return Err(e),
            }
            return Ok(match h.stop {
                Some(reason) => Admit::Stop(reason),
                None => hold(item, h.gate),
            });
        }
        let lease = Lease {
            owner: plan.owner_name.clone(),
            until: plan.m.owner_until,
        };
        let (step, message_id, outgoing) = self
            .prepare_replay_onto(
                step,
                &case,
                &data,
                &ReplayAdmission {
                    actor: &plan.owner_name,
                    destination: &look.destination,
                    budget: spec.budget.describe(),
                    plan_id: Some(&plan.id),
                    lease: Some(lease),
                    record: record.as_ref(),
                },
            )
            .await?;
        pacer.admit(budget, item.bytes, now);
        self.node_admit(item.bytes, now);
        run.admitted += 1;
        run.bytes_admitted += item.bytes;
        run.window_admitted += 1;
        run.last_admit_ms = Some(now.as_millis());
        item.state = PlanItemState::Admitted;
        item.window = Some(run.window);
        item.message_id = Some(message_id.clone());
        item.detail = None;
        item.updated_at = now;
        look.batch.push(Prepared {
            case,
            step,
            message_id,
            outgoing,
            item,
        });
        Ok(Admit::Prepared)
    }

    /// Writes a look's admissions: the plan first, with every item this look changed (the
    /// item lease of each admitted one: a case another plan holds is held instead, and
    /// the write is tried again), then each case (`replay_admitted`; a case another tool
    /// changed meanwhile puts its item back to waiting), then the audit entries, then the
    /// replays, sent together. Returns the plan as written.
    #[allow(clippy::too_many_arguments)]
    async fn commit_batch(
        &self,
        plan: &ReplayPlanRecord,
        run: &mut RunState,
        pacer: &mut Pacer,
        items: &mut BTreeMap<u32, PlanItemRecord>,
        mut batch: Vec<Prepared>,
        next_at: Timestamp,
        now: Timestamp,
    ) -> BrokerResult<ReplayPlanRecord> {
        let undo = |run: &mut RunState, pacer: &mut Pacer, item: &mut PlanItemRecord| {
            run.admitted -= 1;
            run.bytes_admitted -= item.bytes;
            run.window_admitted = run.window_admitted.saturating_sub(1);
            pacer.finish();
            item.state = PlanItemState::Waiting;
            item.window = None;
            item.message_id = None;
        };
        let written = loop {
            for p in &batch {
                items.insert(p.item.seq, p.item.clone());
            }
            let mut state = run.clone();
            state.set_pacer(pacer);
            let r = self
                .inner
                .store
                .update_replay_plan(&ReplayPlanUpdate {
                    id: plan.id.clone(),
                    version: plan.version,
                    set: PlanMut {
                        state: state.value(),
                        updated_at: now,
                        next_at: Some(next_at),
                        ..plan.m.clone()
                    },
                    items: items.values().cloned().collect(),
                })
                .await;
            match r {
                Ok(p) => break p,
                Err(StoreError::ReplayItemTaken { case_id, plan_id }) => {
                    let Some(i) = batch.iter().position(|p| p.item.case_id == case_id) else {
                        return Err(StoreError::ReplayItemTaken { case_id, plan_id }.into());
                    };
                    let mut taken = batch.remove(i);
                    undo(run, pacer, &mut taken.item);
                    taken.item.state = PlanItemState::Held;
                    taken.item.detail = Some(format!("item_leased: plan {plan_id} admitted it"));
                    run.held += 1;
                    run.bytes_held += taken.item.bytes;
                    items.insert(taken.item.seq, taken.item);
                }
                Err(e) => return Err(e.into()),
            }
        };
        items.clear();
        let owner = plan_actor(plan);
        let mut sent = Vec::new();
        let mut back = Vec::new();
        // The cases in one write, each with the audit entry of its admission.
        let updates: Vec<_> = batch
            .iter()
            .map(|p| {
                let mut u = p.step.clone().update_of(&p.case);
                u.audit.push(AuditFields {
                    at: now,
                    actor_id: owner.id.clone(),
                    actor_name: owner.name.clone(),
                    action: "case.replay".to_owned(),
                    entity: Some(p.case.queue.to_string()),
                    targets: vec![
                        p.case.id.clone(),
                        format!("message_id={}", p.message_id),
                        format!("plan_id={}", plan.id),
                    ],
                    outcome: "ok".to_owned(),
                    client: None,
                });
                u
            })
            .collect();
        let answers = self.inner.store.update_cases(&updates).await?;
        for (p, written) in batch.into_iter().zip(answers) {
            match written {
                Ok(c) => {
                    self.inner.metrics.audit_entries.inc();
                    // Its first look comes OBSERVE_ITEM_MS after the admission.
                    self.observe_due(&plan.id, p.item.seq, now, now, true);
                    sent.push((c, p.outgoing));
                }
                Err(StoreError::CaseChanged { .. }) => {
                    // Nothing was sent; the item waits again.
                    let mut item = p.item;
                    undo(run, pacer, &mut item);
                    item.updated_at = now;
                    back.push(item);
                }
                Err(e) => {
                    tracing::warn!(plan_id = %plan.id, case_id = %p.case.id, error = %e, "plan admission not recorded on its case");
                }
            }
        }
        if !sent.is_empty() {
            let messages: Vec<Outgoing> = sent.iter().map(|(_, o)| o.clone()).collect();
            let bytes: u64 = sent.iter().map(|(_, o)| o.body.len() as u64).sum();
            match self.send(plan.destination.as_str(), messages).await {
                Ok(_) => {}
                Err(e) => {
                    // A send that fails stops each case's replay (nothing was delivered).
                    for (c, _) in &sent {
                        if let Err(e2) = self.send_replay_failed(c, &e).await {
                            tracing::warn!(case_id = %c.id, error = %e2, "replay stop not recorded");
                        }
                    }
                    tracing::warn!(plan_id = %plan.id, error = %e, "plan replays could not be sent");
                }
            }
            self.inner.metrics.add_labelled(
                Counter::PlanItems,
                &plan.queue,
                "admitted",
                sent.len() as u64,
            );
            self.inner
                .metrics
                .add_labelled(Counter::PlanBytes, &plan.queue, "admitted", bytes);
        }
        if back.is_empty() {
            return Ok(written);
        }
        let mut state = run.clone();
        state.set_pacer(pacer);
        Ok(self
            .inner
            .store
            .update_replay_plan(&ReplayPlanUpdate {
                id: written.id.clone(),
                version: written.version,
                set: PlanMut {
                    state: state.value(),
                    updated_at: now,
                    ..written.m.clone()
                },
                items: back,
            })
            .await?)
    }

    /// Reads `case_id` and what its gates need (`None`: the case is gone), its effect
    /// authority asked ahead.
    async fn prefetch_one(&self, case_id: &str, ctx: &CaseContext) -> BrokerResult<Option<Pre>> {
        let case = match self.inner.store.get_case(case_id).await {
            Ok(c) => c,
            Err(StoreError::CaseNotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let (known, record) = match self.known_in(&case, ctx).await {
            Ok(k) => k,
            Err(BrokerError::Store(StoreError::DeadLetterUndecodable { reason, .. })) => {
                let intent = redrive_store::IntentRecord::for_queue(
                    self.inner.store.intent_words(&case.intent_id).await?,
                    case.queue.as_str(),
                );
                let known = self.known_of(&case, None, intent, ctx).await?;
                return Ok(Some(Pre {
                    case,
                    known,
                    record: None,
                    undecodable: Some(reason),
                }));
            }
            Err(e) => return Err(e),
        };
        if case.m.state.terminal().is_none() {
            self.ask_ahead(ctx, &case).await;
        }
        Ok(Some(Pre {
            case,
            known,
            record,
            undecodable: None,
        }))
    }

    /// [`Broker::prefetch_one`] for `items` (their cases, records and intents in one
    /// read; their effect authorities asked [`PARALLEL`] side by side), by `seq`.
    async fn prefetch(
        &self,
        ctx: &Arc<CaseContext>,
        items: Vec<PlanItemRecord>,
    ) -> BrokerResult<Vec<(u32, Option<Pre>)>> {
        let mut reads = self.case_reads_of(&items).await?;
        let ctx = Arc::clone(ctx);
        side_by_side(self, items, move |b, item| {
            let ctx = Arc::clone(&ctx);
            let read = reads.remove(&item.case_id);
            async move {
                let Some(r) = read else {
                    return (item.seq, Ok(None));
                };
                let pre = async {
                    let known = b
                        .known_of(&r.case, r.record.as_ref(), r.intent, &ctx)
                        .await?;
                    if r.case.m.state.terminal().is_none() && r.record_undecodable.is_none() {
                        b.ask_ahead(&ctx, &r.case).await;
                    }
                    Ok(Some(Pre {
                        case: r.case,
                        known,
                        record: r.record,
                        undecodable: r.record_undecodable,
                    }))
                };
                (item.seq, pre.await)
            }
        })
        .await?
        .into_iter()
        .map(|(s, p)| p.map(|p| (s, p)))
        .collect()
    }

    /// The cases of `items` with their records and intents, in one read, by case id.
    async fn case_reads_of(
        &self,
        items: &[PlanItemRecord],
    ) -> BrokerResult<HashMap<String, redrive_store::CaseRead>> {
        let ids: Vec<String> = items.iter().map(|i| i.case_id.clone()).collect();
        let mut out = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(redrive_store::MAX_CASE_PAGE as usize) {
            for r in self.inner.store.case_reads(chunk).await? {
                out.insert(r.case.id.clone(), r);
            }
        }
        Ok(out)
    }

    /// Whether `case_id`'s case is in a terminal state (a case that is gone is: nothing of
    /// it can be replayed any more).
    async fn case_terminal(&self, case_id: &str) -> BrokerResult<bool> {
        match self.inner.store.get_case(case_id).await {
            Ok(c) => Ok(c.m.state.terminal().is_some()),
            Err(StoreError::CaseNotFound { .. }) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    /// Looks again at a plan's held items (at most a page of them, in order): an item whose
    /// case reached a terminal state meanwhile is closed with that state; a session's
    /// successor held for its ordering goes back to waiting once every predecessor's case
    /// is terminal. Each change is an audit entry (`replay.plan_settle`,
    /// `replay.plan_release`). Answers whether an item went back to waiting.
    async fn reexamine_held(
        &self,
        plan: &ReplayPlanRecord,
        spec: &PlanSpec,
        run: &mut RunState,
        items: &mut BTreeMap<u32, PlanItemRecord>,
        holds: &mut Vec<AuditFields>,
        now: Timestamp,
    ) -> BrokerResult<bool> {
        let held = self
            .items_in(
                &plan.id,
                PlanItemState::Held,
                redrive_store::MAX_PLAN_ITEM_PAGE,
            )
            .await?;
        let mut released = false;
        for mut item in held {
            if items.contains_key(&item.seq) {
                continue;
            }
            let case = match self.inner.store.get_case(&item.case_id).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(plan_id = %plan.id, case_id = %item.case_id, error = %e, "a held item's case could not be read; it stays held");
                    continue;
                }
            };
            let gate = item.detail.clone().unwrap_or_default();
            let action = if let Some(t) = case.m.state.terminal() {
                run.closed += 1;
                item.state = PlanItemState::Closed;
                item.detail = Some(format!("{t}: its case reached {t} while held ({gate})"));
                "replay.plan_settle"
            } else if gate.starts_with("ordering_")
                && let Some(order) = case.session_id.as_ref().and_then(|s| spec.sessions.get(s))
            {
                let pos = order.iter().position(|c| *c == case.id).unwrap_or(0);
                let mut clear = true;
                for before in &order[..pos] {
                    if !self.case_terminal(before).await? {
                        clear = false;
                        break;
                    }
                }
                if !clear {
                    continue;
                }
                released = true;
                item.state = PlanItemState::Waiting;
                item.detail = None;
                "replay.plan_release"
            } else {
                continue;
            };
            run.held = run.held.saturating_sub(1);
            run.bytes_held = run.bytes_held.saturating_sub(item.bytes);
            item.updated_at = now;
            let actor = Actor::system("replay_plans");
            holds.push(AuditFields {
                at: now,
                actor_id: actor.id,
                actor_name: actor.name,
                action: action.to_owned(),
                entity: Some(plan.queue.clone()),
                targets: vec![
                    plan.id.clone(),
                    item.case_id.clone(),
                    format!("gate={gate}"),
                    format!("state={}", item.state),
                ],
                outcome: "ok".to_owned(),
                client: None,
            });
            items.insert(item.seq, item);
        }
        Ok(released)
    }

    async fn predecessor_state(
        &self,
        plan_id: &str,
        case_id: &str,
        seen: &BTreeMap<u32, PlanItemRecord>,
    ) -> BrokerResult<Option<PlanItemState>> {
        if let Some(i) = seen.values().find(|i| i.case_id == case_id) {
            return Ok(Some(i.state));
        }
        // Paged by seq: a large plan holds more items than one read returns.
        let mut after_seq = None;
        loop {
            let page = self
                .inner
                .store
                .replay_plan_items(
                    plan_id,
                    &PlanItemQuery {
                        states: Vec::new(),
                        after_seq,
                        limit: redrive_store::MAX_PLAN_ITEM_PAGE,
                    },
                )
                .await?;
            if let Some(i) = page.iter().find(|i| i.case_id == case_id) {
                return Ok(Some(i.state));
            }
            if page.len() < redrive_store::MAX_PLAN_ITEM_PAGE as usize {
                break;
            }
            after_seq = page.last().map(|i| i.seq);
        }
        Ok(None)
    }

    /// The running plans' gauges, read at scrape time: replays in flight, and how much of
    /// each budget the plan uses (observed admission rate over the budget's rate, in-flight
    /// deliveries over the concurrency bound).
    pub(crate) async fn render_plan_metrics(&self, out: &mut String) -> BrokerResult<()> {
        use std::fmt::Write as _;
        let plans = self
            .inner
            .store
            .list_replay_plans(&PlanQuery {
                status: vec![PlanStatus::Running, PlanStatus::Paused],
                ..PlanQuery::default()
            })
            .await?;
        let _ = writeln!(
            out,
            "# HELP redrive_replay_plans_active Bounded replay plans running or paused."
        );
        let _ = writeln!(out, "# TYPE redrive_replay_plans_active gauge");
        let _ = writeln!(out, "redrive_replay_plans_active {}", plans.len());
        let _ = writeln!(
            out,
            "# HELP redrive_replay_plan_budget_utilisation Share of a running plan's budget in use: observed items/s and bytes/s over their limits, deliveries in flight over the concurrency bound."
        );
        let _ = writeln!(out, "# TYPE redrive_replay_plan_budget_utilisation gauge");
        for plan in &plans {
            let Ok(spec) = PlanSpec::of(plan) else {
                continue;
            };
            let run = RunState::of(plan);
            let (items, bytes) = run.observed_rates();
            let b = &spec.budget;
            for (budget, v) in [
                ("items", items / b.items_per_s),
                ("bytes", bytes / b.bytes_per_s as f64),
                (
                    "concurrency",
                    f64::from(run.in_flight) / f64::from(b.max_concurrent),
                ),
            ] {
                let _ = writeln!(
                    out,
                    "redrive_replay_plan_budget_utilisation{{plan=\"{}\",queue=\"{}\",budget=\"{budget}\"}} {v}",
                    plan.id, plan.queue
                );
            }
        }
        Ok(())
    }

    /// The outcomes of replays in flight, in the items' order: each case read and
    /// stepped in memory ([`Broker::steps_in`]: its effect authority asked), [`PARALLEL`]
    /// side by side; the steps written in one write; a case another writer changed
    /// meanwhile advanced alone.
    async fn outcomes(
        &self,
        items: Vec<PlanItemRecord>,
        ctx: &Arc<CaseContext>,
    ) -> BrokerResult<Vec<(PlanItemRecord, Outcome)>> {
        let mut reads = self.case_reads_of(&items).await?;
        let c = Arc::clone(ctx);
        let stepped = side_by_side(self, items, move |b, item| {
            let ctx = Arc::clone(&c);
            let read = reads.remove(&item.case_id);
            async move {
                let Some(r) = read else {
                    return (item, Ok::<_, BrokerError>(None));
                };
                if let Some(why) = &r.record_undecodable {
                    // Its record cannot be read: observed as it stands, no step taken.
                    tracing::warn!(case_id = %r.case.id, reason = %why,
                        "the record of a case in flight cannot be read; no step is taken");
                    return (item, Ok(Some((r.case, None))));
                }
                let stepped = async {
                    let known = b
                        .known_of(&r.case, r.record.as_ref(), r.intent, &ctx)
                        .await?;
                    b.steps_known(&r.case, &ctx, &known).await
                };
                let u = match stepped.await {
                    Ok(u) => u,
                    Err(e) => {
                        tracing::warn!(case_id = %r.case.id, error = %e, "case could not be advanced");
                        None
                    }
                };
                (item, Ok(Some((r.case, u))))
            }
        })
        .await?;
        let mut updates = Vec::new();
        let mut read = Vec::with_capacity(stepped.len());
        for (item, r) in stepped {
            match r? {
                None => read.push((item, None, None)),
                Some((case, u)) => {
                    let at = u.map(|(u, finished)| {
                        updates.push(u);
                        (updates.len() - 1, finished)
                    });
                    read.push((item, Some(case), at));
                }
            }
        }
        let mut answers: Vec<Option<redrive_store::StoreResult<CaseRecord>>> = self
            .inner
            .store
            .update_cases(&updates)
            .await?
            .into_iter()
            .map(Some)
            .collect();
        let mut out = Vec::with_capacity(read.len());
        for (item, case, at) in read {
            let Some(case) = case else {
                out.push((item, Outcome::Closed("case_gone".into())));
                continue;
            };
            let answer = at.and_then(|(i, finished)| {
                let audited = updates[i].audit.len() as u64;
                answers[i].take().map(|a| (a, finished, audited))
            });
            let case = match answer {
                None => case,
                Some((Ok(written), finished, audited)) => {
                    self.inner.metrics.audit_entries.add(audited);
                    if finished {
                        written
                    } else {
                        self.advance_read_case(written, ctx).await?
                    }
                }
                Some((Err(StoreError::CaseNotFound { .. }), _, _)) => {
                    out.push((item, Outcome::Closed("case_gone".into())));
                    continue;
                }
                Some((Err(e), _, _)) => {
                    if !matches!(e, StoreError::CaseChanged { .. }) {
                        tracing::warn!(case_id = %case.id, error = %e, "case could not be advanced");
                    }
                    match self.advance_case_in(&case.id, ctx).await {
                        Ok(c) => c,
                        Err(BrokerError::Store(StoreError::CaseNotFound { .. })) => {
                            out.push((item, Outcome::Closed("case_gone".into())));
                            continue;
                        }
                        Err(e) => {
                            tracing::warn!(case_id = %case.id, error = %e, "case could not be advanced");
                            self.inner.store.get_case(&case.id).await?
                        }
                    }
                }
            };
            let outcome = self.outcome_of(&item, case).await?;
            out.push((item, outcome));
        }
        Ok(out)
    }

    /// The audit entry of a plan's decision to hold an item (its gate named).
    fn hold_entry(
        &self,
        plan: &ReplayPlanRecord,
        item: &PlanItemRecord,
        now: Timestamp,
    ) -> AuditFields {
        let actor = Actor::system("replay_plans");
        AuditFields {
            at: now,
            actor_id: actor.id,
            actor_name: actor.name,
            action: "replay.plan_hold".to_owned(),
            entity: Some(plan.queue.clone()),
            targets: vec![
                plan.id.clone(),
                item.case_id.clone(),
                format!("gate={}", item.detail.as_deref().unwrap_or_default()),
            ],
            outcome: "ok".to_owned(),
            client: None,
        }
    }

    async fn append_holds(&self, holds: Vec<AuditFields>) -> BrokerResult<()> {
        if holds.is_empty() {
            return Ok(());
        }
        self.inner.store.append_audit(&holds).await?;
        self.inner.metrics.audit_entries.add(holds.len() as u64);
        Ok(())
    }

    /// Whether a replay in flight, admitted at `admitted`, is due to be looked at: not
    /// within [`OBSERVE_ITEM_MS`] of the last look, nor within a quarter of its age (at
    /// most [`OBSERVE_ITEM_MAX_MS`]): a replay that takes long is asked about less often.
    /// Remembers this look when `mark`.
    fn observe_due(
        &self,
        plan_id: &str,
        seq: u32,
        admitted: Timestamp,
        now: Timestamp,
        mark: bool,
    ) -> bool {
        let mut seen = self
            .inner
            .plans
            .observed
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let key = (plan_id.to_owned(), seq);
        let age = now.as_millis() - admitted.as_millis();
        let gap = (age / 4).clamp(OBSERVE_ITEM_MS, OBSERVE_ITEM_MAX_MS);
        if seen.get(&key).is_some_and(|t| now.as_millis() - t < gap) {
            return false;
        }
        if !mark {
            return true;
        }
        if seen.len() >= MAX_OBSERVED {
            seen.clear();
        }
        seen.insert(key, now.as_millis());
        true
    }

    /// When the first of `items` (replays in flight) is due to be looked at again (see
    /// [`Broker::observe_due`]; one never looked at by this node: now).
    fn next_observation(
        &self,
        plan_id: &str,
        items: &[&PlanItemRecord],
        now: Timestamp,
    ) -> Option<Timestamp> {
        let seen = self
            .inner
            .plans
            .observed
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        items
            .iter()
            .map(|i| {
                let age = now.as_millis() - i.updated_at.as_millis();
                let gap = (age / 4).clamp(OBSERVE_ITEM_MS, OBSERVE_ITEM_MAX_MS);
                match seen.get(&(plan_id.to_owned(), i.seq)) {
                    Some(t) => Timestamp(t + gap),
                    None => now,
                }
            })
            .min()
    }

    /// Whether the node-wide budget lets an item of `bytes` go now (`None`), or when.
    fn node_check(&self, bytes: u64, now: Timestamp) -> Option<Timestamp> {
        let node = self
            .inner
            .plans
            .node
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let b = node_budget(&node.0, bytes);
        match node.1.check(&b, bytes, now) {
            redrive_core::plan::Admission::At(t) => Some(t),
            _ => None,
        }
    }

    fn node_admit(&self, bytes: u64, now: Timestamp) {
        let mut node = self
            .inner
            .plans
            .node
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let b = node_budget(&node.0, bytes);
        node.1.admit(&b, bytes, now);
        node.1.in_flight = 0;
    }
}

impl Broker {
    /// Takes one item of the node-wide replay budget now, for automatic replay (whose
    /// records' sizes are known only once claimed): `Err(t)` when the budget lets the next
    /// item go at `t` only (nothing is taken). The item's bytes are charged by
    /// [`Broker::node_charge`] once known; until they are paid for at the node's byte rate
    /// no item goes, so the same bound holds as for the plans (same pacer, same state).
    pub(crate) fn node_reserve(&self, now: Timestamp) -> Result<Reserved, Timestamp> {
        let mut node = self
            .inner
            .plans
            .node
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let b = node_budget(&node.0, 0);
        match node.1.check(&b, 0, now) {
            redrive_core::plan::Admission::At(t) => Err(t),
            _ => {
                let before = node.1;
                node.1.admit(&b, 0, now);
                node.1.in_flight = 0;
                Ok(Reserved {
                    before,
                    after: node.1,
                })
            }
        }
    }

    /// Gives back a slot [`Broker::node_reserve`] took for nothing (no record was due),
    /// unless another admission came after it.
    pub(crate) fn node_unreserve(&self, r: Reserved) {
        let mut node = self
            .inner
            .plans
            .node
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if node.1 == r.after {
            node.1 = r.before;
        }
    }

    /// Charges `bytes` admitted at `now` (by [`Broker::node_reserve`]) to the node's byte
    /// budget: no item goes until they are paid for.
    pub(crate) fn node_charge(&self, bytes: u64, now: Timestamp) {
        let mut node = self
            .inner
            .plans
            .node
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let rate = node.0.bytes_per_s.max(1) as f64;
        let from = (now.as_millis() as f64).max(node.1.bytes_until_ms);
        node.1.bytes_until_ms = from + bytes as f64 * 1000.0 / rate;
    }

    /// The node-wide replay budget.
    pub fn node_replay_budget(&self) -> NodeReplayBudget {
        self.inner
            .plans
            .node
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
    }
}

/// A slot of the node-wide replay budget taken by [`Broker::node_reserve`]: the pacer
/// before and after.
pub(crate) struct Reserved {
    before: Pacer,
    after: Pacer,
}

/// `f` over `inputs`, [`PARALLEL`] at a time, the answers in the inputs' order.
async fn side_by_side<T, R, F, Fut>(
    broker: &Broker,
    inputs: Vec<T>,
    mut f: F,
) -> BrokerResult<Vec<R>>
where
    F: FnMut(Broker, T) -> Fut,
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
        let fut = f(broker.clone(), input);
        set.spawn(async move { (i, fut.await) });
    }
    while let Some(r) = set.join_next().await {
        out.push(r.map_err(join_error)?);
    }
    out.sort_by_key(|(i, _)| *i);
    Ok(out.into_iter().map(|(_, r)| r).collect())
}

/// The node's budget as a pacing budget (concurrency is each plan's).
fn node_budget(n: &NodeReplayBudget, bytes: u64) -> Budget {
    Budget {
        items_per_s: n.items_per_s,
        // An item larger than a second of the node's bytes still goes, alone.
        bytes_per_s: n.bytes_per_s.max(bytes),
        max_concurrent: u32::MAX,
        window: u32::MAX,
        dependency: Dependency {
            name: String::new(),
            probe_url: String::new(),
            max_error_rate: 1.0,
            max_latency_ms: u64::MAX,
        },
    }
}

enum Admit {
    /// Every gate passes: prepared in the look's batch.
    Prepared,
    /// A gate holds it.
    Held(PlanItemRecord),
    /// The budget says not yet: at this time (`None`: when a delivery finishes).
    Later(Option<Timestamp>),
    /// Its turn has not come (a predecessor in flight); the next item may go.
    Wait,
    /// A stop condition.
    Stop(StopReason),
}

/// A gate that holds an item, and the stop condition it is, if any.
struct Held {
    gate: String,
    stop: Option<StopReason>,
}

/// What an item's gates read of its case, read ahead (its effect authority asked ahead
/// into the look's context).
struct Pre {
    case: CaseRecord,
    known: Known,
    record: Option<DeadLetterRecord>,
    /// Why the case's record cannot be read, if its row holds a value this build
    /// refuses: the item is held, never admitted on a guess.
    undecodable: Option<String>,
}

/// How many of `items`, in order, the pacer lets go at `now` (at most `limit`).
fn admissible<'a>(
    pacer: &Pacer,
    budget: &Budget,
    items: impl Iterator<Item = &'a PlanItemRecord>,
    now: Timestamp,
    limit: usize,
) -> usize {
    let mut p = *pacer;
    let mut n = 0;
    for i in items {
        if n >= limit || p.check(budget, i.bytes, now) != redrive_core::plan::Admission::Now {
            break;
        }
        p.admit(budget, i.bytes, now);
        n += 1;
    }
    n
}

/// How many items the pacer's item and concurrency budgets let go at `now` (at most
/// `limit`); the byte budget is checked item by item.
fn slots_now(pacer: &Pacer, budget: &Budget, now: Timestamp, limit: usize) -> usize {
    let mut p = *pacer;
    let mut n = 0;
    while n < limit && p.check(budget, 0, now) == redrive_core::plan::Admission::Now {
        p.admit(budget, 0, now);
        n += 1;
    }
    n
}

/// What a look read ahead for its admissions, beside its observation.
#[derive(Default)]
struct ReadAhead {
    /// The first waiting items.
    waiting: Vec<PlanItemRecord>,
    /// Whether they are all the waiting items.
    all: bool,
    /// What the gates of the first of them read.
    fetched: Vec<(u32, Option<Pre>)>,
}

/// An admission prepared, not yet written.
struct Prepared {
    case: CaseRecord,
    step: Step,
    message_id: String,
    outgoing: Outgoing,
    item: PlanItemRecord,
}

/// What one look reads once: the pass's context (effect authorities, register), the destination,
/// whether it is the failing path for each reason, and the admissions prepared so far.
struct Look {
    ctx: Arc<CaseContext>,
    destination: EntityName,
    failing: BTreeMap<String, bool>,
    batch: Vec<Prepared>,
}

/// The plan's owner as an actor (for the audit entries of its admissions).
fn plan_actor(plan: &ReplayPlanRecord) -> Actor {
    Actor {
        id: plan.owner_id.clone(),
        name: plan.owner_name.clone(),
        grants: Vec::new(),
        client: None,
    }
}

fn stop_words(reason: &StopReason, detail: Option<&str>) -> String {
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
