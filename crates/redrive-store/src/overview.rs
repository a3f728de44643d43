//! The overview's counts: every queue's messages, dead letters, flagged replay records and
//! open cases, in one store read ([`Store::overview_counts`](crate::Store::overview_counts)).

use redrive_core::EntityName;

use crate::QueueCounts;

/// One queue's counts as the overview shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntityCounts {
    /// The queue (a subscription's queue too).
    pub queue: EntityName,
    /// What [`Store::queue_counts`](crate::Store::queue_counts) answers for the queue at
    /// the same `now`.
    pub counts: QueueCounts,
    /// Records in the quarantine area of its dead-letter store.
    pub quarantined: u64,
    /// Live replay candidates whose judgement failed at least the flag threshold of times.
    pub flagged: u64,
}

/// The open cases of one queue's dead letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CaseTally {
    /// Open (not closed) cases.
    pub open: u64,
    /// Open cases whose review deadline is at or before `now`.
    pub overdue: u64,
    /// Open cases in the `escalated` state.
    pub escalated: u64,
}

/// What [`Store::overview_counts`](crate::Store::overview_counts) answers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OverviewCounts {
    /// Every queue, by name.
    pub queues: Vec<EntityCounts>,
    /// The open cases of every queue that has some, by queue name.
    pub cases: Vec<(EntityName, CaseTally)>,
}
