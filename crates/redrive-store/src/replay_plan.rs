//! Rows of bounded replay plans (seed 001, "Turn 'replay slowly' into a testable budget";
//! the budget, pacing and stop rules are `redrive_core::plan`'s).
//!
//! A plan is created with every item it selected, in admission order (`seq`). Its
//! identity (selection, destination, budget, owner) never changes: changing any of them
//! is a new plan, a new reviewed decision. What changes — status, the owner's lease, the
//! runner's pacing state and counters, and the items' states — is written by
//! [`ReplayPlanUpdate`], conditional on the version the writer read, so that a plan is
//! advanced by one writer at a time whatever the number of nodes.
//!
//! The item lease: at most one item of any plan is `admitted` for a case at a time (a
//! unique index over admitted items' case ids, in both schemas). An update that would
//! admit a case another plan's item holds writes nothing and is refused with
//! `ReplayItemTaken`: two plans (or two tools driving plans) over one item, one admits it.

use std::fmt;
use std::str::FromStr;

use redrive_core::Timestamp;

/// Most plans one listing returns.
pub const MAX_PLAN_PAGE: u32 = 1_000;
/// Most items one read of a plan's items returns.
pub const MAX_PLAN_ITEM_PAGE: u32 = 10_000;

macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident, $what:literal { $($(#[$vm:meta])* $v:ident = $s:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vm])* $v,)*
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$v,)*];

            /// The stored name.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$v => $s,)*
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($s => Ok($name::$v),)*
                    other => Err(format!(concat!("unknown ", $what, " {:?}"), other)),
                }
            }
        }
    };
}

named_enum! {
    /// Where a plan stands.
    PlanStatus, "plan status" {
        /// Created (its items selected, its identity fixed), not started yet.
        Planned = "planned",
        /// Admitting items under its budget.
        Running = "running",
        /// Paused by its owner: nothing is admitted; evidence and state are kept.
        Paused = "paused",
        /// Halted by a stop condition (the reason is recorded).
        Stopped = "stopped",
        /// Every item reached a terminal or named no-replay state.
        Completed = "completed",
        /// Cancelled by its owner.
        Cancelled = "cancelled",
        /// A cancel was asked of an `sqs_move` plan: its runner stops at its next look
        /// and ends it `cancelled` (a `cases` plan is cancelled at once).
        Cancelling = "cancelling",
    }
}

impl PlanStatus {
    /// Whether the plan may still admit or observe items (`running`, `paused`, and
    /// `cancelling` until its runner has stopped).
    pub fn is_active(self) -> bool {
        matches!(
            self,
            PlanStatus::Running | PlanStatus::Paused | PlanStatus::Cancelling
        )
    }
}

named_enum! {
    /// What a plan's items are.
    PlanKind, "plan kind" {
        /// Open recovery cases of one queue, each admitted through its gates (the plan
        /// runner's).
        Cases = "cases",
        /// The messages of one queue, moved to a destination or each back to its source
        /// (an SQS message move task, `StartMessageMoveTask`): bounded by items/s only,
        /// run by the mover, with no item rows.
        SqsMove = "sqs_move",
    }
}

named_enum! {
    /// Where one item of a plan stands.
    PlanItemState, "plan item state" {
        /// Not admitted yet.
        Waiting = "waiting",
        /// A gate blocks it (the gate is the item's `detail`): a named no-replay state.
        Held = "held",
        /// Admitted: its replay is in flight, its outcome not yet observed. Holds the
        /// item lease on its case.
        Admitted = "admitted",
        /// Its case completed (the replay's effect evidence, or the effect found present).
        Completed = "completed",
        /// Its replay stopped (the trigger is the item's `detail`): the case went back to
        /// diagnosis or waits on indeterminate evidence.
        Stopped = "stopped",
        /// Closed without a replay (cancelled, superseded, expired, rejected…; the state is
        /// the `detail`).
        Closed = "closed",
    }
}

impl PlanItemState {
    /// Whether the item is settled for its window: terminal or a named no-replay state.
    pub fn is_settled(self) -> bool {
        !matches!(self, PlanItemState::Waiting | PlanItemState::Admitted)
    }
}

/// A stored plan.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayPlanRecord {
    /// `plan_…` (`mv_…` for an `sqs_move` plan: the SQS task handle).
    pub id: String,
    /// What its items are.
    pub kind: PlanKind,
    /// The queue whose dead letters (cases) it replays, or whose messages it moves.
    pub queue: String,
    /// Where the replays go (for an `sqs_move` plan, [`MOVE_TO_SOURCE`]: each message back
    /// to the queue it was dead-lettered from).
    pub destination: String,
    /// The owner: the id of the token that created it.
    pub owner_id: String,
    /// The owner's name.
    pub owner_name: String,
    /// The plan's fixed part as the broker wrote it (JSON object: selection, budget,
    /// correction reference, ordering scopes). The store keeps it as it is.
    pub spec: serde_json::Value,
    /// How many items it holds.
    pub items: u64,
    /// When it was created.
    pub created_at: Timestamp,
    /// Incremented by every update; an update names the version it read.
    pub version: u64,
    /// The mutable part.
    pub m: PlanMut,
}

/// What an update of a plan may change.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanMut {
    /// Where it stands.
    pub status: PlanStatus,
    /// The owner's lease on the plan: when it passes, the plan stops (`lease_lost`).
    pub owner_until: Timestamp,
    /// Why it stopped (a stop reason's name), once stopped.
    pub stop_reason: Option<String>,
    /// When its runner looks at it next (`None`: not scheduled; an active plan is due).
    pub next_at: Option<Timestamp>,
    /// The runner's state (JSON object: pacing, window, counters, observations), the
    /// broker's; the store keeps it as it is.
    pub state: serde_json::Value,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// One item of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanItemRecord {
    /// Its position in admission order, from 0.
    pub seq: u32,
    /// The case it replays.
    pub case_id: String,
    /// Its payload bytes (for the byte budget).
    pub bytes: u64,
    /// Where it stands.
    pub state: PlanItemState,
    /// The admission window it was admitted in, from 1.
    pub window: Option<u32>,
    /// The replay's message id (`<id>|<n>`), once admitted.
    pub message_id: Option<String>,
    /// The gate that holds it, the trigger that stopped it, or the terminal state.
    pub detail: Option<String>,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// One update of a plan, written in one transaction if the plan is still at `version`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayPlanUpdate {
    /// The plan.
    pub id: String,
    /// The version the caller read: `ReplayPlanChanged` when it is no longer current.
    pub version: u64,
    /// The new mutable part.
    pub set: PlanMut,
    /// Items written (replaced by `seq`; each must exist). An item made `admitted` takes
    /// the item lease on its case, or the whole update is refused with
    /// `ReplayItemTaken`.
    pub items: Vec<PlanItemRecord>,
}

/// The destination an `sqs_move` plan stores when it moves each message back to the queue
/// it was dead-lettered from (no queue is named so).
pub const MOVE_TO_SOURCE: &str = "";

/// Which plans a listing returns, by id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanQuery {
    /// Only these statuses (any when empty).
    pub status: Vec<PlanStatus>,
    /// Only these kinds (any when empty).
    pub kinds: Vec<PlanKind>,
    /// Only plans over this queue.
    pub queue: Option<String>,
    /// Only plans whose id is greater than this (paging).
    pub after: Option<String>,
    /// At most this many (0 or more than [`MAX_PLAN_PAGE`] means [`MAX_PLAN_PAGE`]).
    pub limit: u32,
    /// The order of the page (by id unless told otherwise).
    pub order: PlanOrder,
}

/// The order of a listing of plans.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PlanOrder {
    /// By id (the order `after` pages in).
    #[default]
    Id,
    /// Most recently created first (ties of `created_at` by creation order).
    Newest,
    /// Oldest first (ties of `created_at` by creation order).
    Oldest,
}

/// Which items of a plan a read returns, by `seq`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanItemQuery {
    /// Only items in these states (any when empty).
    pub states: Vec<PlanItemState>,
    /// Only items whose `seq` is greater than this (paging).
    pub after_seq: Option<u32>,
    /// At most this many (0 or more than [`MAX_PLAN_ITEM_PAGE`] means
    /// [`MAX_PLAN_ITEM_PAGE`]).
    pub limit: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in PlanStatus::ALL {
            assert_eq!(s.as_str().parse::<PlanStatus>().unwrap(), *s);
        }
        for s in PlanItemState::ALL {
            assert_eq!(s.as_str().parse::<PlanItemState>().unwrap(), *s);
        }
        for k in PlanKind::ALL {
            assert_eq!(k.as_str().parse::<PlanKind>().unwrap(), *k);
        }
        assert!("move".parse::<PlanKind>().is_err());
        assert!(PlanStatus::Cancelling.is_active());
        assert!("RUNNING".parse::<PlanStatus>().is_err());
        assert!(PlanStatus::Paused.is_active());
        assert!(!PlanStatus::Stopped.is_active());
        assert!(PlanItemState::Held.is_settled());
        assert!(!PlanItemState::Admitted.is_settled());
    }
}
