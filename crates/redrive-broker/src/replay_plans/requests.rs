//! The plans' requests as the interfaces ask them: one call each, the caller's
//! permission on the plan's (or selection's) queue checked first, answering the whole
//! view.

use redrive_core::access::Operation;
use redrive_core::id::{GroupId, PlanId};
use redrive_core::plan::BudgetSpec;
use redrive_store::{PlanItemQuery, PlanItemRecord, PlanKind, PlanQuery};

use super::run::{PlanInput, PlanView};
use super::{PlanAction, PlanPreview, PlanSelectionInput, Plans};

use crate::{Actor, BrokerError, BrokerResult};

impl Plans {
    /// Creates a plan for `actor`, who must be a replayer on the selection's queue (the
    /// destination is checked by [`Plans::create_plan`]).
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %input.selection.queue))]
    pub async fn create(&self, input: &PlanInput, actor: &Actor) -> BrokerResult<PlanView> {
        let mut input = input.clone();
        self.authorize_named(&input.selection, actor).await?;
        input.selection = self.of_group(&input.selection).await?;
        input.selection = self.of_signature(&input.selection).await?;
        let queue = input.selection.queue.as_str();
        self.broker
            .authorize(actor, Operation::ReplayCase, Some(queue))
            .await?;
        self.create_plan(&input, actor).await
    }

    /// Refuses `actor` on the queue the selection names, if it names one, before its case
    /// group or failure signature is looked up: a caller without `replayer` there learns
    /// nothing of the queue, the group or the signature from the refusal. The queue a
    /// group or signature resolves to is checked again once known.
    async fn authorize_named(
        &self,
        selection: &PlanSelectionInput,
        actor: &Actor,
    ) -> BrokerResult<()> {
        if selection.queue.is_empty() {
            return Ok(());
        }
        self.broker
            .authorize(actor, Operation::ReplayCase, Some(selection.queue.as_str()))
            .await
    }

    /// The selection with its case group, if it names one, made its queue and case ids:
    /// refused when it also names case ids, or a queue the group's cases are not of.
    async fn of_group(&self, selection: &PlanSelectionInput) -> BrokerResult<PlanSelectionInput> {
        let Some(id) = &selection.group else {
            return Ok(selection.clone());
        };
        if !selection.case_ids.is_empty() {
            return Err(BrokerError::invalid(
                "case_ids",
                "a plan names case ids or a case group, not both",
            ));
        }
        let id: GroupId = id.parse()?;
        let id = id.as_str();
        let group = self.ctx.store.get_case_group(id).await?;
        let ids: Vec<String> =
            serde_json::from_value(group.doc["case_ids"].clone()).map_err(|e| {
                BrokerError::Store(redrive_store::StoreError::bad_value("case_groups.doc", e))
            })?;
        if !selection.queue.is_empty() && selection.queue != group.queue.as_str() {
            return Err(BrokerError::invalid(
                "queue",
                format!(
                    "case group {id} holds cases of queue {}, not {}",
                    group.queue, selection.queue
                ),
            ));
        }
        Ok(PlanSelectionInput {
            queue: group.queue.to_string(),
            case_ids: ids,
            ..selection.clone()
        })
    }

    /// The dry run of a plan for `actor`, who must be a replayer on the selection's queue.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %selection.queue))]
    pub async fn preview(
        &self,
        selection: &PlanSelectionInput,
        budget: &BudgetSpec,
        actor: &Actor,
    ) -> BrokerResult<PlanPreview> {
        self.authorize_named(selection, actor).await?;
        let selection = self.of_group(selection).await?;
        let selection = self.of_signature(&selection).await?;
        self.broker
            .authorize(actor, Operation::ReplayCase, Some(selection.queue.as_str()))
            .await?;
        self.preview_plan(&selection, budget).await
    }

    /// A page of plans as `actor` may see them: refused when the query names a queue
    /// whose cases `actor` may not read; otherwise only the plans over queues it may.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = query.queue.as_deref()))]
    pub async fn list(&self, query: &PlanQuery, actor: &Actor) -> BrokerResult<Vec<PlanView>> {
        if let Some(queue) = &query.queue {
            self.broker
                .authorize(actor, Operation::ReadCases, Some(queue))
                .await?;
        }
        let mut views = Vec::new();
        for plan in self.list_plans(query).await? {
            if actor.permits(Operation::ReadCases, Some(&plan.queue)) {
                views.push(self.view_plan(plan).await?);
            }
        }
        Ok(views)
    }

    /// The view of a plan, for `actor` allowed `op` on its queue.
    #[tracing::instrument(level = "debug", skip_all, fields(plan = %id))]
    pub async fn show(&self, id: &PlanId, op: Operation, actor: &Actor) -> BrokerResult<PlanView> {
        let view = self.get_plan(id.as_str()).await?;
        self.broker
            .authorize(actor, op, Some(&view.plan.queue))
            .await?;
        Ok(view)
    }

    /// A page of a plan's items, for `actor` allowed to read cases on its queue.
    #[tracing::instrument(level = "debug", skip_all, fields(plan = %id))]
    pub async fn items(
        &self,
        id: &PlanId,
        query: &PlanItemQuery,
        actor: &Actor,
    ) -> BrokerResult<Vec<PlanItemRecord>> {
        let view = self.show(id, Operation::ReadCases, actor).await?;
        self.plan_items(&view.plan.id, query).await
    }

    /// The owner's change of a plan by `actor`, a replayer on its queue (the change itself
    /// holds it to the plan's owner or an admin). A move plan's change is the mover's.
    #[tracing::instrument(level = "debug", skip_all, fields(plan = %id, action = action.as_str()))]
    pub async fn change(
        &self,
        id: &PlanId,
        action: PlanAction,
        actor: &Actor,
    ) -> BrokerResult<PlanView> {
        let view = self.show(id, Operation::ReplayCase, actor).await?;
        if view.plan.kind == PlanKind::SqsMove {
            return self
                .broker
                .change_move_plan(&view.plan, action, actor)
                .await;
        }
        let id = view.plan.id.as_str();
        match action {
            PlanAction::Start => self.start_plan(id, actor).await,
            PlanAction::Pause => self.pause_plan(id, actor).await,
            PlanAction::Resume => self.resume_plan(id, actor).await,
            PlanAction::Cancel => self.cancel_plan(id, actor).await,
        }
    }
}
