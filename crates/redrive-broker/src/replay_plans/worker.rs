//! The plan runner: advances running and paused plans when they are due. One node at a
//! time, under the store lease [`PLANS_LEASE`]: the node holding it runs every plan, so
//! the node-wide replay budget bounds them all together; when it dies, another takes the
//! lease and resumes the plans from their stored state.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::worker::{LeasedWorker, Next, Pass, Timing};
use crate::{Broker, BrokerResult};

/// The store lease under which one node runs the plans.
pub const PLANS_LEASE: &str = "replay_plans";
/// How long the lease holds without renewal.
pub const PLANS_LEASE_TTL: Duration = Duration::from_secs(30);
/// The longest a runner sleeps between looks.
pub const PLANS_POLL: Duration = Duration::from_secs(1);

/// The plan runner.
pub struct PlanWorker {
    broker: Broker,
}

impl PlanWorker {
    /// A runner over `broker`.
    pub fn new(broker: Broker) -> Self {
        PlanWorker { broker }
    }

    /// Works until `cancel` fires. Errors are logged and retried at the next look.
    pub async fn run(self, cancel: CancellationToken) {
        LeasedWorker::new(&self.broker, PLANS_LEASE)
            .run(self, cancel)
            .await;
    }
}

impl Pass for PlanWorker {
    fn timing(&self) -> Timing {
        Timing {
            lease_ttl: PLANS_LEASE_TTL,
            poll: PLANS_POLL,
        }
    }

    fn wake(&self) -> Option<&tokio::sync::Notify> {
        Some(&self.broker.inner.plans.wake)
    }

    /// One look over every running and paused plan; the next look comes when the
    /// earliest plan is due.
    async fn pass(&mut self) -> BrokerResult<Next> {
        let p = self.broker.plans_once().await?;
        Ok(p.next_at.map_or(Next::Idle, Next::By))
    }
}
