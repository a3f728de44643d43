//! Bounded replay (seed 001): the [`Plans`] service, and the dry run of a replay plan. A plan's budget must name every
//! limit (`redrive_core::plan::BudgetSpec::check`: an unbounded replay is refused); the
//! preview resolves its selection over open cases, groups the items by reason and type,
//! adds their bytes and the lower bound of the time they take under the budget, and names
//! for each item the gate that blocks it now — and, for each blocking gate, what it means
//! and, when it is time-bound (the failing path), when it clears. Nothing is touched: no
//! effect authority is asked, no case or record is written.

use std::collections::BTreeMap;

use redrive_core::case::{self, Closure, Decision, EffectAnswer, Gate, Missing, Repair};
use redrive_core::plan::{self, BudgetError, BudgetSpec};
use redrive_core::{EntityName, Timestamp};
use redrive_store::{CaseQuery, CaseRecord, StoreError};

use crate::cases::data::{self, CaseData};
use crate::{BrokerError, BrokerResult};

mod admit;
mod create;
mod look;
mod moves;
mod node;
mod outcomes;
mod owner;
mod probe;
mod requests;
mod run;
mod service;
mod signature;
mod view;
mod worker;

pub use moves::{MovePlanView, PlanAction};
pub use probe::Reading;
pub(crate) use run::PlanState;
pub use run::{
    DEFAULT_OBSERVE_MS, DEFAULT_PLAN_LEASE_MS, MAX_PLAN_LEASE_MS, NodeReplayBudget, PlanInput,
    PlanPass, PlanSpec, PlanView, RunState,
};
pub use service::Plans;
pub use worker::{PLANS_LEASE, PlanWorker};

/// A budget with every limit named, or the refusal: `ReplayUnbounded` naming what is
/// left out, `InvalidRequest` for a limit out of range.
pub(crate) fn checked_budget(budget: &BudgetSpec) -> BrokerResult<redrive_core::plan::Budget> {
    budget.check().map_err(budget_refusal)
}

/// The broker's refusal of a plan field the core judged out of range (or left out).
pub(crate) fn budget_refusal(e: BudgetError) -> BrokerError {
    match e {
        BudgetError::Unbounded { missing } => BrokerError::ReplayUnbounded {
            missing: missing.iter().map(|m| (*m).to_owned()).collect(),
        },
        BudgetError::OutOfRange { field, why } => BrokerError::invalid(field, why),
    }
}

/// Most items one plan selects.
pub const MAX_PLAN_ITEMS: usize = 100_000;
/// Most items a preview lists one by one (the counts cover every item).
pub const MAX_PREVIEW_LIST: usize = 1_000;
/// Most reasons, types or case ids a selection names.
pub const MAX_SELECTION_VALUES: usize = 100;
/// The replay plan settings of a node (configuration, at start: `[replay_plans]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanSettings {
    /// The failing-path window, ms: a destination that dead-lettered an item's reason less
    /// than this long ago is the failing path for it — a plan over that reason is refused,
    /// the preview and the admission hold the item — until the window has passed over its
    /// latest such dead letter (`redrive_core::plan::failing_path_clears_at`). One second
    /// to 24 hours; default five minutes.
    pub failing_path_window_ms: u64,
}

impl Default for PlanSettings {
    fn default() -> Self {
        PlanSettings {
            failing_path_window_ms: plan::DEFAULT_FAILING_PATH_WINDOW_MS,
        }
    }
}

/// A duration of the failing-path window in words: whole seconds, else milliseconds.
pub(crate) fn window_text(ms: u64) -> String {
    if ms.is_multiple_of(1_000) {
        format!("{} s", ms / 1_000)
    } else {
        format!("{ms} ms")
    }
}

/// A plan's selection and destination.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanSelectionInput {
    /// The queue whose dead letters are replayed.
    pub queue: String,
    /// Only these reasons (any when empty).
    pub reasons: Vec<String>,
    /// Only these types (any when empty).
    pub types: Vec<String>,
    /// Dead-lettered at or after.
    pub from: Option<Timestamp>,
    /// Dead-lettered before.
    pub to: Option<Timestamp>,
    /// Only these cases (any when empty).
    pub case_ids: Vec<String>,
    /// The cases of this case group (`grp_…`): its queue is the selection's queue (named
    /// or left empty), and its members are the plan's case ids.
    pub group: Option<String>,
    /// Only the cases whose dead-letter record carries this failure signature (an id of
    /// `GET /v1/failures`): its queue is the selection's queue (named or left empty); not
    /// with `group` or `case_ids`.
    pub signature: Option<String>,
    /// Where the items go: the queue they came from when `None`.
    pub destination: Option<String>,
}

/// One item of a preview.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewItem {
    /// The case.
    pub case_id: String,
    /// The original message id.
    pub message_id: String,
    /// Its reason.
    pub reason: String,
    /// Its type.
    pub message_type: Option<String>,
    /// Its payload bytes.
    pub bytes: u64,
    /// The gate that blocks it now.
    pub gate: Option<&'static str>,
    /// When that gate clears, if it is time-bound (the failing path: the destination's
    /// latest dead letter with the item's reason leaves the window).
    pub clears_at: Option<Timestamp>,
}

/// A gate that blocks items of a preview, with what it means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockingGate {
    /// The gate's code (`no_tested_correction`, `destination_invalid`, …).
    pub gate: &'static str,
    /// What holds the items, in words.
    pub detail: String,
    /// Items it blocks.
    pub items: u64,
    /// When it clears for every item it blocks, if it is time-bound: the latest of the
    /// items' times (each item has its own).
    pub clears_at: Option<Timestamp>,
}

/// The dry run of a plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanPreview {
    /// Items selected.
    pub items: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Items no gate blocks now.
    pub eligible: u64,
    /// The lower bound of the time every item takes under the budget, ms.
    pub lower_bound_ms: u64,
    /// Items by reason.
    pub by_reason: BTreeMap<String, u64>,
    /// Items by type.
    pub by_type: BTreeMap<String, u64>,
    /// Blocked items by gate.
    pub blocked: BTreeMap<String, u64>,
    /// Each gate that blocks items, with what it means and, if time-bound, when it clears:
    /// by gate, then detail (one entry per cause of a gate: `destination_invalid` has three
    /// — the case's own destination, a destination that does not exist, the failing path).
    pub gates: Vec<BlockingGate>,
    /// The first items, by case id.
    pub item_list: Vec<PreviewItem>,
}

/// What a gate's code means, in words, for a preview (for `destination_invalid` the case's
/// own destination check: a destination that does not exist, and the failing path, are
/// told by the preview itself).
pub fn gate_detail(gate: &str) -> &'static str {
    match gate {
        "effect_present" => "the effect already exists: nothing to replay",
        "intent_cancelled" => "its producer cancelled the intent",
        "intent_superseded" => "a newer intent supersedes it",
        "intent_expired" => "the intent's value window ended",
        "payload_invalid" => "the payload fails the current schema or payload policy",
        "closed_indeterminate" => "the case closed without a known effect",
        "route_unverified" => "the dead-letter route is not verified",
        "effect_not_reconciled" => "its effect authority has not been asked yet",
        "effect_indeterminate" => "its effect authority cannot tell whether the effect exists",
        "effect_unreachable" => "its effect authority could not be reached",
        "effect_authority_missing" => "no effect authority is registered for its type",
        "authorization_changed" => "the authority that admitted the intent changed",
        "destination_invalid" => "the case's replay destination is not valid",
        "not_repeatable" => "its type may not be delivered twice",
        "retention_unbounded" => "no retention rule bounds its kept payload",
        "payload_gone" => "the exact payload bytes are gone",
        "budget_unbounded" => "no replay budget is named",
        "ordering_missing" => "its session's ordering context is missing",
        "capacity_unavailable" => "the capacity the replay needs is unavailable",
        "replay_in_flight" => "a replay of the case is in flight",
        "no_tested_correction" => {
            "it needs a diagnosis and a correction tested on its exact payload"
        }
        "new_intent" => "its transformation is not equivalent: a new intent, not a replay",
        _ => "the case's decision holds it",
    }
}

/// The gate a case's next decision names, for a plan: `None` when a plan's owner may admit
/// it now (the case's own claim and review do not bind a plan, which holds its own lease).
pub fn gate_of(decision: &Decision, data: &CaseData) -> Option<&'static str> {
    match decision {
        Decision::Closed(t) => Some(match t {
            case::Terminal::Completed => "effect_present",
            case::Terminal::Cancelled => "intent_cancelled",
            case::Terminal::Superseded => "intent_superseded",
            case::Terminal::Expired => "intent_expired",
            case::Terminal::Rejected => "payload_invalid",
            case::Terminal::Indeterminate => "closed_indeterminate",
        }),
        Decision::Close(c) => Some(match c {
            Closure::Completed { .. } => "effect_present",
            Closure::Cancelled => "intent_cancelled",
            Closure::Superseded => "intent_superseded",
            Closure::Expired { .. } => "intent_expired",
            Closure::Rejected => "payload_invalid",
        }),
        Decision::Repair(Repair::ArchiveRecord) => Some("effect_present"),
        Decision::Repair(Repair::RouteConfiguration) | Decision::VerifyRoute => {
            Some("route_unverified")
        }
        Decision::Reconcile => Some("effect_not_reconciled"),
        Decision::Escalate { missing } => Some(match missing {
            Missing::EffectAuthority => match data.effect.as_ref().map(|e| e.answer) {
                Some(EffectAnswer::Indeterminate) => "effect_indeterminate",
                Some(EffectAnswer::Unreachable) => "effect_unreachable",
                _ => "effect_authority_missing",
            },
            Missing::CurrentAuthorization => "authorization_changed",
            Missing::ReplayDestination => "destination_invalid",
            Missing::RepeatSafety => "not_repeatable",
            Missing::RetentionRule => "retention_unbounded",
            Missing::PayloadIdentity => "payload_gone",
            Missing::RouteEvidence => "route_unverified",
            Missing::ReplayBudget => "budget_unbounded",
            // Overdue without an owner: the plan's owner takes it.
            Missing::Owner => return None,
        }),
        Decision::Hold {
            gate: Gate::Ordering,
            ..
        } => Some("ordering_missing"),
        Decision::Hold {
            gate: Gate::Capacity,
            ..
        } => Some("capacity_unavailable"),
        Decision::Hold {
            gate: Gate::ReplayInFlight,
            ..
        } => Some("replay_in_flight"),
        Decision::NeedsDiagnosis | Decision::NeedsCorrection | Decision::NeedsIsolatedTest => {
            Some("no_tested_correction")
        }
        Decision::NewIntent => Some("new_intent"),
        Decision::ObserveReplay | Decision::StopReplay { .. } => Some("replay_in_flight"),
        Decision::ReplayEligible | Decision::AssignOwner | Decision::Review { .. } => None,
    }
}

impl Plans {
    /// The dry run of a plan: refused when its budget is unbounded (`ReplayUnbounded`) or
    /// out of range; otherwise what it would replay and what blocks each item. Touches
    /// nothing.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %selection.queue))]
    pub async fn preview_plan(
        &self,
        selection: &PlanSelectionInput,
        budget: &BudgetSpec,
    ) -> BrokerResult<PlanPreview> {
        let budget = checked_budget(budget)?;
        let selection = &self.of_signature(selection).await?;
        let (queue, destination, destination_exists) = self.resolve_selection(selection).await?;
        let cases = self.select(&queue, selection).await?;
        let now = self.now();
        let window = window_text(self.plan_settings().failing_path_window_ms);
        let mut out = PlanPreview::default();
        let mut failing: BTreeMap<String, Option<Timestamp>> = BTreeMap::new();
        // Each gate's causes, by (gate, detail): items, and the latest clear time.
        let mut gates: BTreeMap<(&'static str, String), (u64, Option<Timestamp>)> = BTreeMap::new();
        let ctx = self.cases.case_context().await?;
        for c in &cases {
            let data = CaseData::of(c);
            let (known, _) = self.cases.known_in(c, &ctx).await?;
            let decision = case::decide(&data::facts(c, &data, &known), now);
            let mut gate = gate_of(&decision, &data);
            let mut detail = None;
            let mut clears_at = None;
            if gate.is_none() && !destination_exists {
                gate = Some("destination_invalid");
                detail = Some(format!(
                    "the destination queue {destination} does not exist"
                ));
            }
            if gate.is_none() {
                let clears = match failing.get(&c.reason) {
                    Some(t) => *t,
                    None => {
                        let t = self.failing_path(&destination, &c.reason, now).await?;
                        failing.insert(c.reason.clone(), t);
                        t
                    }
                };
                if let Some(t) = clears {
                    gate = Some("destination_invalid");
                    detail = Some(format!(
                        "the destination {destination} is the failing path: it dead-lettered the item's reason within the last {window}"
                    ));
                    clears_at = Some(t);
                }
            }
            out.items += 1;
            out.bytes += c.body_size;
            *out.by_reason.entry(c.reason.clone()).or_insert(0) += 1;
            *out.by_type
                .entry(c.message_type.clone().unwrap_or_default())
                .or_insert(0) += 1;
            match gate {
                Some(g) => {
                    *out.blocked.entry(g.to_owned()).or_insert(0) += 1;
                    let detail = detail.unwrap_or_else(|| gate_detail(g).to_owned());
                    let entry = gates.entry((g, detail)).or_insert((0, None));
                    entry.0 += 1;
                    entry.1 = entry.1.max(clears_at);
                }
                None => out.eligible += 1,
            }
            if out.item_list.len() < MAX_PREVIEW_LIST {
                out.item_list.push(PreviewItem {
                    case_id: c.id.clone(),
                    message_id: c.message_id.clone(),
                    reason: c.reason.clone(),
                    message_type: c.message_type.clone(),
                    bytes: c.body_size,
                    gate,
                    clears_at,
                });
            }
        }
        out.gates = gates
            .into_iter()
            .map(|((gate, detail), (items, clears_at))| BlockingGate {
                gate,
                detail,
                items,
                clears_at,
            })
            .collect();
        out.lower_bound_ms = budget.lower_bound_ms(out.items, out.bytes);
        Ok(out)
    }

    /// A selection's queue and destination, checked: bounded values, the queue exists;
    /// and whether the destination does.
    pub(crate) async fn resolve_selection(
        &self,
        selection: &PlanSelectionInput,
    ) -> BrokerResult<(EntityName, EntityName, bool)> {
        for (field, n) in [
            ("reasons", selection.reasons.len()),
            ("types", selection.types.len()),
            ("case_ids", selection.case_ids.len()),
        ] {
            // A group's members were bounded when it was made (MAX_GROUP_CASES).
            if n > MAX_SELECTION_VALUES && !(field == "case_ids" && selection.group.is_some()) {
                return Err(BrokerError::invalid(
                    field,
                    format!("at most {MAX_SELECTION_VALUES} values"),
                ));
            }
        }
        for v in selection
            .reasons
            .iter()
            .chain(&selection.types)
            .chain(&selection.case_ids)
        {
            if v.is_empty() || v.len() > 256 || v.contains('\0') {
                return Err(BrokerError::invalid(
                    "selection",
                    "reasons, types and case ids are 1 to 256 bytes without NUL characters",
                ));
            }
        }
        let queue: EntityName = selection.queue.parse()?;
        // The queue must exist (QueueNotFound otherwise).
        self.ctx.store.get_queue(&queue).await?;
        let destination: EntityName = match &selection.destination {
            Some(d) => d
                .parse()
                .map_err(|e| BrokerError::invalid("destination", format!("{e}")))?,
            None => queue.clone(),
        };
        let destination_exists = match self.ctx.store.get_queue(&destination).await {
            Ok(_) => true,
            Err(StoreError::QueueNotFound { .. }) => false,
            Err(e) => return Err(e.into()),
        };
        Ok((queue, destination, destination_exists))
    }

    /// The open cases a selection names, by id, at most [`MAX_PLAN_ITEMS`] (with a
    /// signature: those whose record carries it).
    pub(crate) async fn select(
        &self,
        queue: &EntityName,
        s: &PlanSelectionInput,
    ) -> BrokerResult<Vec<CaseRecord>> {
        let records = match &s.signature {
            Some(sig) => Some(self.signature_records(queue, sig).await?),
            None => None,
        };
        let wanted = |c: &CaseRecord| {
            c.queue == *queue
                && records.as_ref().is_none_or(|r| r.contains(&c.record_id))
                && c.m.closed_at.is_none()
                && (s.reasons.is_empty() || s.reasons.contains(&c.reason))
                && (s.types.is_empty()
                    || c.message_type.as_ref().is_some_and(|t| s.types.contains(t)))
                && s.from.is_none_or(|f| c.dead_lettered_at >= f)
                && s.to.is_none_or(|t| c.dead_lettered_at < t)
        };
        let mut out = Vec::new();
        if !s.case_ids.is_empty() {
            for id in &s.case_ids {
                match self.ctx.store.get_case(id).await {
                    Ok(c) if wanted(&c) => out.push(c),
                    Ok(_) | Err(StoreError::CaseNotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            out.sort_by(|a, b| a.id.cmp(&b.id));
            return Ok(out);
        }
        let mut after = None;
        loop {
            let page = self
                .ctx
                .store
                .list_cases(&CaseQuery {
                    queue: Some(queue.clone()),
                    open: true,
                    since: s.from,
                    until: s.to,
                    after: after.clone(),
                    limit: redrive_store::MAX_CASE_PAGE,
                    ..CaseQuery::default()
                })
                .await?;
            let full = page.len() == redrive_store::MAX_CASE_PAGE as usize;
            after = page.last().map(|c| c.id.clone());
            out.extend(page.into_iter().filter(|c| wanted(c)));
            if out.len() >= MAX_PLAN_ITEMS {
                out.truncate(MAX_PLAN_ITEMS);
                return Ok(out);
            }
            if !full {
                return Ok(out);
            }
        }
    }

    /// When `queue` stops being the failing path for `reason`, if it is that path at `now`:
    /// it dead-lettered `reason` within this node's failing-path window
    /// ([`PlanSettings::failing_path_window_ms`]), so the failure that produced the items
    /// persists there and replaying into it would make a loop. `None`: it is not. One
    /// indexed read of the store (the latest such dead letter).
    pub(crate) async fn failing_path(
        &self,
        queue: &EntityName,
        reason: &str,
        now: Timestamp,
    ) -> BrokerResult<Option<Timestamp>> {
        let latest = self
            .ctx
            .store
            .latest_case_dead_letter(queue, reason)
            .await?;
        let window = self.plan_settings().failing_path_window_ms;
        Ok(plan::failing_path_clears_at(latest, window, now))
    }

    /// The replay plan settings of this node.
    pub fn plan_settings(&self) -> PlanSettings {
        *self
            .state
            .settings
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sets the replay plan settings of this node (configuration, at start): refused,
    /// changing nothing, when the failing-path window is out of its range
    /// (`InvalidRequest`, field `failing_path_window`).
    pub fn set_plan_settings(&self, settings: PlanSettings) -> BrokerResult<()> {
        plan::check_failing_path_window_ms(settings.failing_path_window_ms)
            .map_err(budget_refusal)?;
        *self
            .state
            .settings
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = settings;
        Ok(())
    }
}
