//! The node-wide replay budget, shared by every plan this node runs and by automatic
//! replay: one pacer under one lock.

use redrive_core::Timestamp;
use redrive_core::plan::{Budget, Dependency, Pacer};

use super::Plans;
use super::run::*;

impl Plans {
    /// Sets the node-wide replay budget.
    #[tracing::instrument(level = "debug", skip_all, fields(items_per_s = budget.items_per_s, bytes_per_s = budget.bytes_per_s))]
    pub fn set_node_replay_budget(&self, budget: NodeReplayBudget) {
        let mut node = self.state.node.lock().unwrap_or_else(|p| p.into_inner());
        node.0 = budget;
    }

    /// Whether the node-wide budget lets an item of `bytes` go now (`None`), or when.
    pub(super) fn node_check(&self, bytes: u64, now: Timestamp) -> Option<Timestamp> {
        let node = self.state.node.lock().unwrap_or_else(|p| p.into_inner());
        let b = node_budget(&node.0, bytes);
        match node.1.check(&b, bytes, now) {
            redrive_core::plan::Admission::At(t) => Some(t),
            _ => None,
        }
    }

    /// The node budget's next slot for a look at `now` ([`redrive_core::plan::Pacer::slot`]).
    pub(super) fn node_slot(&self, now: Timestamp) -> Timestamp {
        let node = self.state.node.lock().unwrap_or_else(|p| p.into_inner());
        node.1.slot(now)
    }

    pub(super) fn node_admit(&self, bytes: u64, now: Timestamp) {
        let mut node = self.state.node.lock().unwrap_or_else(|p| p.into_inner());
        let b = node_budget(&node.0, bytes);
        node.1.admit(&b, bytes, now);
        node.1.in_flight = 0;
    }

    /// Takes one item of the node-wide replay budget now, for automatic replay (whose
    /// records' sizes are known only once claimed): `Err(t)` when the budget lets the next
    /// item go at `t` only (nothing is taken). The item's bytes are charged by
    /// [`Plans::node_charge`] once known; until they are paid for at the node's byte rate
    /// no item goes, so the same bound holds as for the plans (same pacer, same state).
    pub(crate) fn node_reserve(&self, now: Timestamp) -> Result<Reserved, Timestamp> {
        let mut node = self.state.node.lock().unwrap_or_else(|p| p.into_inner());
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

    /// Gives back a slot [`Plans::node_reserve`] took for nothing (no record was due),
    /// unless another admission came after it.
    pub(crate) fn node_unreserve(&self, r: Reserved) {
        let mut node = self.state.node.lock().unwrap_or_else(|p| p.into_inner());
        if node.1 == r.after {
            node.1 = r.before;
        }
    }

    /// Charges `bytes` admitted at `now` (by [`Plans::node_reserve`]) to the node's byte
    /// budget: no item goes until they are paid for.
    pub(crate) fn node_charge(&self, bytes: u64, now: Timestamp) {
        let mut node = self.state.node.lock().unwrap_or_else(|p| p.into_inner());
        let rate = node.0.bytes_per_s.max(1) as f64;
        let from = (now.as_millis() as f64).max(node.1.bytes_until_ms);
        node.1.bytes_until_ms = from + bytes as f64 * 1000.0 / rate;
    }

    /// The node-wide replay budget.
    pub fn node_replay_budget(&self) -> NodeReplayBudget {
        self.state.node.lock().unwrap_or_else(|p| p.into_inner()).0
    }
}

/// A slot of the node-wide replay budget taken by [`Plans::node_reserve`]: the pacer
/// before and after.
pub(crate) struct Reserved {
    before: Pacer,
    after: Pacer,
}

/// The node's budget as a pacing budget (concurrency is each plan's).
pub(super) fn node_budget(n: &NodeReplayBudget, bytes: u64) -> Budget {
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
