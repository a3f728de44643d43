//! The plan runner: advances running and paused plans when they are due. One node at a
//! time, under the store lease [`PLANS_LEASE`]: the node holding it runs every plan, so
//! the node-wide replay budget bounds them all together; when it dies, another takes the
//! lease and resumes the plans from their stored state.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::Broker;

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
        let b = &self.broker;
        let ttl_ms = u64::try_from(PLANS_LEASE_TTL.as_millis()).unwrap_or(u64::MAX);
        loop {
            let held = match b
                .inner
                .store
                .try_lease(PLANS_LEASE, &b.inner.node_id, ttl_ms, b.now())
                .await
            {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!(error = %e, "replay plan lease could not be taken; retrying");
                    false
                }
            };
            let mut next = b.now().plus(PLANS_POLL);
            if held {
                match b.plans_once().await {
                    Ok(p) => {
                        if let Some(t) = p.next_at {
                            next = next.min(t);
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "replay plan pass failed; retrying"),
                }
            }
            if next <= b.now() {
                tokio::task::yield_now().await;
                continue;
            }
            tokio::select! {
                () = b.inner.plans.wake.notified() => {}
                () = b.inner.clock.sleep_until(next) => {}
                () = cancel.cancelled() => return,
            }
        }
    }
}
