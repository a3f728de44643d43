//! The plan service: what the broker answers for replay plans (`Broker::plans`).
//!
//! [`Plans`] holds the `Context` (store, clock, metrics, audit), the plan state of this
//! node (`PlanState`: the runner's wake-up, the node-wide replay budget, when each
//! replay in flight was last looked at), the case service and one handle of the rest of
//! the broker. A plan admits case replays: it advances cases and reads their decisions,
//! prepares their replays and records a failed send ([`Cases`]); it sends the replays
//! (the queue core's send), asks callers' authorization, changes move plans and reads
//! the push network policy for its probes. Those live on the broker, so the handle is
//! the broker itself; nothing else of it is read.

use std::sync::Arc;

use redrive_core::Timestamp;

use redrive_store::ReplayPlanRecord;

use super::PlanSettings;
use super::run::{NodeReplayBudget, PlanPass, PlanState, PlanView};
use crate::context::Context;
use crate::{Actor, Broker, BrokerResult, Cases};

/// The replay plans of a broker: a cheap `Clone`.
#[derive(Clone)]
pub struct Plans {
    /// Store, clock, metrics and audit.
    pub(super) ctx: Context,
    /// The runner's wake-up, the node-wide budget, the observation times.
    pub(super) state: Arc<PlanState>,
    /// The case operations: the advance, what is known of a case, a replay prepared.
    pub(super) cases: Cases,
    /// The queue send, authorization, move plans and the push network policy.
    pub(super) broker: Broker,
}

impl Broker {
    /// The replay plans.
    pub fn plans(&self) -> Plans {
        Plans {
            ctx: self.inner.ctx.clone(),
            state: self.inner.plans.clone(),
            cases: self.cases(),
            broker: self.clone(),
        }
    }
}

/// The plan calls the broker keeps for its callers outside the service (the workers'
/// tests drive plans one look at a time, the mover reads a move plan's view, `/metrics`
/// renders the plan gauges, `serve` sets the node budget and the plan settings); each is
/// one line over [`Broker::plans`].
impl Broker {
    /// [`Plans::plans_once`].
    pub async fn plans_once(&self) -> BrokerResult<PlanPass> {
        self.plans().plans_once().await
    }

    /// [`Plans::advance_plan`].
    pub async fn advance_plan(&self, id: &str) -> BrokerResult<ReplayPlanRecord> {
        self.plans().advance_plan(id).await
    }

    /// [`Plans::get_plan`].
    pub async fn get_plan(&self, id: &str) -> BrokerResult<PlanView> {
        self.plans().get_plan(id).await
    }

    /// [`Plans::pause_plan`].
    pub async fn pause_plan(&self, id: &str, actor: &Actor) -> BrokerResult<PlanView> {
        self.plans().pause_plan(id, actor).await
    }

    /// [`Plans::set_node_replay_budget`].
    pub fn set_node_replay_budget(&self, budget: NodeReplayBudget) {
        self.plans().set_node_replay_budget(budget);
    }

    /// [`Plans::node_replay_budget`].
    pub fn node_replay_budget(&self) -> NodeReplayBudget {
        self.plans().node_replay_budget()
    }

    /// [`Plans::set_plan_settings`].
    pub fn set_plan_settings(&self, settings: PlanSettings) -> BrokerResult<()> {
        self.plans().set_plan_settings(settings)
    }

    /// [`Plans::plan_settings`].
    pub fn plan_settings(&self) -> PlanSettings {
        self.plans().plan_settings()
    }

    /// [`Plans::render_plan_metrics`].
    pub(crate) async fn render_plan_metrics(&self, out: &mut String) -> BrokerResult<()> {
        self.plans().render_plan_metrics(out).await
    }
}

impl Plans {
    /// The time now, on the injected clock.
    pub(super) fn now(&self) -> Timestamp {
        self.ctx.now()
    }
}
