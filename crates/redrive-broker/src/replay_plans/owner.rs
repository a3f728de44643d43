//! The owner's changes of a replay plan (start, pause, resume, cancel), by its owner or
//! an admin, written conditionally and audited; and the owner's authorization now.

use redrive_core::Timestamp;
use redrive_core::access::Operation;
use redrive_store::{
    PlanItemRecord, PlanItemState, PlanKind, PlanMut, PlanStatus, ReplayPlanRecord,
    ReplayPlanUpdate, StoreError,
};

use super::Plans;
use super::run::*;
use crate::{Actor, BrokerResult};

impl Plans {
    /// Starts a planned plan: its owner's lease runs from now.
    #[tracing::instrument(level = "debug", skip_all, fields(plan = %id, queue = tracing::field::Empty))]
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
    #[tracing::instrument(level = "debug", skip_all, fields(plan = %id, queue = tracing::field::Empty))]
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
    #[tracing::instrument(level = "debug", skip_all, fields(plan = %id, queue = tracing::field::Empty))]
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
    #[tracing::instrument(level = "debug", skip_all, fields(plan = %id, queue = tracing::field::Empty))]
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
    pub(super) async fn owner_change<F>(
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
            let plan = self.ctx.store.get_replay_plan(id).await?;
            queue = Some(plan.queue.clone());
            tracing::Span::current().record("queue", plan.queue.as_str());
            if plan.owner_id != actor.id && !actor.permits(Operation::ManageTokens, None) {
                // Refused before anything is tried: audited as a refusal, not as a failed
                // change.
                return Err(self
                    .broker
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
                .ctx
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
            .ctx
            .audited(actor, action, queue.as_deref(), targets, result)
            .await?;
        self.wake_plans();
        self.plan_view(written).await
    }

    /// The admitted items of a plan that ends, released (their replays go on being
    /// observed by their cases): stopped with `detail`.
    pub(super) async fn release_admitted(
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

    /// The plan's owner as an actor now, if it is still authorized to replay from the
    /// source to the destination (`None`: its token was revoked, expired or changed).
    pub(super) async fn plan_owner(&self, plan: &ReplayPlanRecord) -> BrokerResult<Option<Actor>> {
        let actor = match plan.owner_id.as_str() {
            "anonymous" => Some(Actor::anonymous()),
            "system" => Some(Actor::system(&plan.owner_name)),
            id => {
                let now = self.now();
                self.ctx
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
}
