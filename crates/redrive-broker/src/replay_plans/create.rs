//! Creating a replay plan: the budget and fields judged, the destination checked, the
//! selection fixed in order, and each session's ordering scope recorded.

use std::collections::{BTreeMap, BTreeSet};

use redrive_core::access::Operation;
use redrive_core::plan;
use redrive_core::{EntityName, Timestamp};
use redrive_store::{
    CaseQuery, CaseRecord, PlanItemRecord, PlanItemState, PlanKind, PlanMut, PlanStatus,
    ReplayPlanRecord,
};

use super::Plans;
use super::run::*;
use super::{budget_refusal, checked_budget};
use crate::{Actor, BrokerError, BrokerResult};

impl Plans {
    /// Creates a plan over the selection, owned by `actor`: refused when its budget is
    /// unbounded or out of range, when the destination does not exist, when it is the
    /// failing path (it dead-lettered one of the items' reasons within the node's
    /// failing-path window: [`BrokerError::FailingPath`], saying when it clears), or when
    /// `actor` may not replay to the destination. The items are fixed now, in order; a
    /// session's items are held `ordering_missing` unless the plan holds every open case
    /// of the session.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %input.selection.queue, plan = tracing::field::Empty))]
    pub async fn create_plan(&self, input: &PlanInput, actor: &Actor) -> BrokerResult<PlanView> {
        let r = self.create_plan_inner(input, actor).await;
        if let Ok(v) = &r {
            tracing::Span::current().record("plan", v.plan.id.as_str());
        }
        let targets = match &r {
            Ok(v) => vec![v.plan.id.clone(), format!("items={}", v.plan.items)],
            Err(_) => Vec::new(),
        };
        self.ctx
            .audited(
                actor,
                "replay.plan_create",
                Some(input.selection.queue.as_str()),
                targets,
                r,
            )
            .await
    }

    pub(super) async fn create_plan_inner(
        &self,
        input: &PlanInput,
        actor: &Actor,
    ) -> BrokerResult<PlanView> {
        // Every field's range is judged in one place (redrive_core::plan), before anything
        // is read or stored.
        let budget = checked_budget(&input.budget)?;
        let lease_ms = plan::check_lease_ms(input.lease_ms).map_err(budget_refusal)?;
        let observe_ms = plan::check_observe_ms(input.observe_ms).map_err(budget_refusal)?;
        if let Some(c) = &input.correction {
            plan::check_correction(c).map_err(budget_refusal)?;
        }
        let sel = &self.of_signature(&input.selection).await?;
        let (queue, destination, destination_exists) = self.resolve_selection(sel).await?;
        if !destination_exists {
            return Err(plan_conflict(
                "destination_invalid",
                format!("the destination queue {destination} does not exist"),
            ));
        }
        self.broker
            .authorize(actor, Operation::ReplayCase, Some(destination.as_str()))
            .await?;
        let mut cases = self.select(&queue, sel).await?;
        cases.sort_by(|a, b| (a.dead_lettered_at, &a.id).cmp(&(b.dead_lettered_at, &b.id)));
        let now = self.now();
        // Every reason is asked (one indexed read each), so that the refusal names the time
        // the plan would be accepted: when the last of them clears.
        let reasons: BTreeSet<&str> = cases.iter().map(|c| c.reason.as_str()).collect();
        let mut failing: Option<(Timestamp, &str)> = None;
        for reason in reasons {
            if let Some(t) = self.failing_path(&destination, reason, now).await?
                && failing.is_none_or(|(latest, _)| t > latest)
            {
                failing = Some((t, reason));
            }
        }
        if let Some((clears_at, reason)) = failing {
            return Err(BrokerError::FailingPath {
                destination: destination.to_string(),
                reason: reason.to_owned(),
                window_ms: self.plan_settings().failing_path_window_ms,
                clears_at,
                clears_in_ms: u64::try_from(clears_at.0.saturating_sub(now.0)).unwrap_or(0),
            });
        }
        let (sessions, missing) = self.ordering_scopes(&queue, &cases).await?;
        let spec = PlanSpec {
            reasons: sel.reasons.clone(),
            types: sel.types.clone(),
            from_ms: sel.from.map(|t| t.as_millis()),
            to_ms: sel.to.map(|t| t.as_millis()),
            case_ids: sel.case_ids.clone(),
            group: sel.group.clone(),
            signature: sel.signature.clone(),
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
        let items = plan_items(&cases, &missing, &mut run, now);
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
        let written = self.ctx.store.create_replay_plan(&record, &items).await?;
        self.plan_view(written).await
    }

    /// The ordering scopes of a selection: a session is admitted only whole. Each
    /// session of the selected cases whose open cases are all selected, with them in
    /// order; and each session some of whose open cases are not, with those.
    async fn ordering_scopes(
        &self,
        queue: &EntityName,
        cases: &[CaseRecord],
    ) -> BrokerResult<(Scopes, Scopes)> {
        let selected: BTreeSet<&str> = cases.iter().map(|c| c.id.as_str()).collect();
        let mut sessions: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut missing: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let session_ids: BTreeSet<&str> = cases
            .iter()
            .filter_map(|c| c.session_id.as_deref())
            .collect();
        for session in session_ids {
            let all = self.session_cases(queue, session).await?;
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
        Ok((sessions, missing))
    }

    /// The open cases of `session` on `queue`, in dead-letter order.
    pub(super) async fn session_cases(
        &self,
        queue: &EntityName,
        session: &str,
    ) -> BrokerResult<Vec<CaseRecord>> {
        let mut out = Vec::new();
        let mut after = None;
        loop {
            let page = self
                .ctx
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
}

/// Sessions and their cases, by session id.
type Scopes = BTreeMap<String, Vec<String>>;

/// A plan's items, in order: a case of a session the plan does not hold whole is held
/// `ordering_missing` (counted in `run`), every other waits.
fn plan_items(
    cases: &[CaseRecord],
    missing: &Scopes,
    run: &mut RunState,
    now: Timestamp,
) -> Vec<PlanItemRecord> {
    cases
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
        .collect()
}
