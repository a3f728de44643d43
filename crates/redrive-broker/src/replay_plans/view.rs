//! A replay plan as the interfaces show it: its view, its items, the list of plans and
//! the running plans' gauges.

use redrive_store::{
    PlanItemQuery, PlanItemRecord, PlanKind, PlanQuery, PlanStatus, ReplayPlanRecord,
};

use super::Plans;
use super::run::*;
use crate::BrokerResult;

impl Plans {
    /// The view of a plan now.
    #[tracing::instrument(level = "debug", skip_all, fields(plan = %id, queue = tracing::field::Empty))]
    pub async fn get_plan(&self, id: &str) -> BrokerResult<PlanView> {
        let plan = self.ctx.store.get_replay_plan(id).await?;
        tracing::Span::current().record("queue", plan.queue.as_str());
        self.plan_view(plan).await
    }

    pub(super) async fn plan_view(&self, plan: ReplayPlanRecord) -> BrokerResult<PlanView> {
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

    /// A page of plans.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = query.queue.as_deref()))]
    pub async fn list_plans(&self, query: &PlanQuery) -> BrokerResult<Vec<ReplayPlanRecord>> {
        Ok(self.ctx.store.list_replay_plans(query).await?)
    }

    /// The view of a plan already read (its waiting items counted now).
    #[tracing::instrument(level = "debug", skip_all, fields(plan = %plan.id, queue = %plan.queue))]
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
        Ok(self.ctx.store.replay_plan_items(id, query).await?)
    }

    /// The running plans' gauges, read at scrape time: replays in flight, and how much of
    /// each budget the plan uses (observed admission rate over the budget's rate, in-flight
    /// deliveries over the concurrency bound).
    pub(crate) async fn render_plan_metrics(&self, out: &mut String) -> BrokerResult<()> {
        use std::fmt::Write as _;
        let plans = self
            .ctx
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
}
