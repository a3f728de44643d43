//! Bounded replay (seed 001): the [`Plans`] service, and the dry run of a replay plan. A plan's budget must name every
//! limit (`redrive_core::plan::BudgetSpec::check`: an unbounded replay is refused); the
//! preview resolves its selection over open cases, groups the items by reason and type,
//! adds their bytes and the lower bound of the time they take under the budget, and names
//! for each item the gate that blocks it now. Nothing is touched: no effect authority is
//! asked, no case or record is written.

use std::collections::BTreeMap;

use redrive_core::case::{self, Closure, Decision, EffectAnswer, Gate, Missing, Repair};
use redrive_core::plan::{BudgetError, BudgetSpec};
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
/// How recent a dead letter of the destination with the items' reason must be for the
/// failure to count as persisting, ms: a destination that is that failing path is refused.
pub const FAILURE_PERSISTS_MS: i64 = 5 * 60 * 1000;

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
    /// The first items, by case id.
    pub item_list: Vec<PreviewItem>,
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
        let (queue, destination, destination_exists) = self.resolve_selection(selection).await?;
        let cases = self.select(&queue, selection).await?;
        let now = self.now();
        let mut out = PlanPreview::default();
        let mut failing: BTreeMap<String, bool> = BTreeMap::new();
        let ctx = self.cases.case_context().await?;
        for c in &cases {
            let data = CaseData::of(c);
            let (known, _) = self.cases.known_in(c, &ctx).await?;
            let decision = case::decide(&data::facts(c, &data, &known), now);
            let mut gate = gate_of(&decision, &data);
            if gate.is_none() && !destination_exists {
                gate = Some("destination_invalid");
            }
            if gate.is_none() {
                let persists = match failing.get(&c.reason) {
                    Some(p) => *p,
                    None => {
                        let p = self.failure_persists(&destination, &c.reason, now).await?;
                        failing.insert(c.reason.clone(), p);
                        p
                    }
                };
                if persists {
                    gate = Some("destination_invalid");
                }
            }
            out.items += 1;
            out.bytes += c.body_size;
            *out.by_reason.entry(c.reason.clone()).or_insert(0) += 1;
            *out.by_type
                .entry(c.message_type.clone().unwrap_or_default())
                .or_insert(0) += 1;
            match gate {
                Some(g) => *out.blocked.entry(g.to_owned()).or_insert(0) += 1,
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
                });
            }
        }
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

    /// The open cases a selection names, by id, at most [`MAX_PLAN_ITEMS`].
    pub(crate) async fn select(
        &self,
        queue: &EntityName,
        s: &PlanSelectionInput,
    ) -> BrokerResult<Vec<CaseRecord>> {
        let wanted = |c: &CaseRecord| {
            c.queue == *queue
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

    /// Whether `queue` dead-lettered with `reason` within [`FAILURE_PERSISTS_MS`] of `now`:
    /// the failure that produced the items persists there, and replaying into it would make
    /// a loop.
    pub(crate) async fn failure_persists(
        &self,
        queue: &EntityName,
        reason: &str,
        now: Timestamp,
    ) -> BrokerResult<bool> {
        let recent = self
            .ctx
            .store
            .list_cases(&CaseQuery {
                queue: Some(queue.clone()),
                reason: Some(reason.to_owned()),
                since: Some(now.plus_millis(-FAILURE_PERSISTS_MS)),
                limit: 1,
                ..CaseQuery::default()
            })
            .await?;
        Ok(!recent.is_empty())
    }
}
