//! Message move tasks (SQS `StartMessageMoveTask`): the task's state kept in the store,
//! so that every node sharing it lists and cancels it, and a node resumes it when the one
//! running it stops.
//!
//! A move task is stored as a replay plan of kind `sqs_move` (`replay_plans`, schema 11;
//! see [`skeleton::move_tasks`](crate::skeleton::move_tasks) for the mapping): listed by
//! `list_replay_plans` with the other plans, and read and written here in the task's SQS
//! terms.
//!
//! A task is run by one node at a time, its `runner`, while the runner's heartbeat lease
//! (`runner_until`) lasts; the runner renews it with every progress it writes. A task
//! still active whose lease ran out is an orphan, which any node may claim.

use std::fmt;
use std::str::FromStr;

use redrive_core::Timestamp;

/// The status of a move task, by its SQS name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MoveTaskStatus {
    /// Moving.
    Running,
    /// The source had nothing more to move.
    Completed,
    /// Cancel asked; the runner stops at its next batch.
    Cancelling,
    /// Stopped by a cancel.
    Cancelled,
    /// Stopped by an error (see the failure reason).
    Failed,
}

impl MoveTaskStatus {
    /// The SQS name (`RUNNING`, …), as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            MoveTaskStatus::Running => "RUNNING",
            MoveTaskStatus::Completed => "COMPLETED",
            MoveTaskStatus::Cancelling => "CANCELLING",
            MoveTaskStatus::Cancelled => "CANCELLED",
            MoveTaskStatus::Failed => "FAILED",
        }
    }

    /// Whether a task in this status still has a runner to do something (`RUNNING`,
    /// `CANCELLING`): at most one such task per source.
    pub fn is_active(self) -> bool {
        matches!(self, MoveTaskStatus::Running | MoveTaskStatus::Cancelling)
    }
}

impl fmt::Display for MoveTaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MoveTaskStatus {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "RUNNING" => MoveTaskStatus::Running,
            "COMPLETED" => MoveTaskStatus::Completed,
            "CANCELLING" => MoveTaskStatus::Cancelling,
            "CANCELLED" => MoveTaskStatus::Cancelled,
            "FAILED" => MoveTaskStatus::Failed,
            other => return Err(format!("unknown move task status {other:?}")),
        })
    }
}

/// A stored move task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveTaskRecord {
    /// Identifies the task (`mv_…`).
    pub handle: String,
    /// The queue the messages leave.
    pub source: String,
    /// Where they go; `None`: each back to the queue it was dead-lettered from.
    pub destination: Option<String>,
    /// At most this many per second; `None`: as fast as it goes.
    pub max_per_second: Option<u32>,
    /// Where it is.
    pub status: MoveTaskStatus,
    /// Messages moved so far.
    pub moved: u64,
    /// Messages on the source when the task started.
    pub to_move: u64,
    /// Why it failed.
    pub failure_reason: Option<String>,
    /// The token id of the actor whose authority the task runs on (`anonymous` when
    /// authentication is off).
    pub owner_id: String,
    /// That actor's name.
    pub owner_name: String,
    /// When it started.
    pub started_at: Timestamp,
    /// When it was last written.
    pub updated_at: Timestamp,
    /// The node running it (`None` once it finished).
    pub runner: Option<String>,
    /// Until when the runner's heartbeat holds the task; after that it is an orphan.
    pub runner_until: Option<Timestamp>,
    /// The pacing state: the earliest time the task's pacer lets the next message go
    /// (`None`: at once). Written with every heartbeat, so that a resumed task keeps its
    /// spacing.
    pub next_slot: Option<Timestamp>,
}

/// What a runner writes of its task: progress and heartbeat, or its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveTaskProgress {
    /// `Running` while it moves (a stored `CANCELLING` stays), or how it ended.
    pub status: MoveTaskStatus,
    /// Messages moved so far.
    pub moved: u64,
    /// Why it failed (with `Failed`).
    pub failure_reason: Option<String>,
    /// The heartbeat: the task stays the runner's until then. `None`: the runner lets it
    /// go now (it stops, at shutdown, and another node may claim it at once).
    pub runner_until: Option<Timestamp>,
    /// The pacing state as the runner leaves it (see [`MoveTaskRecord::next_slot`]).
    pub next_slot: Option<Timestamp>,
}

/// Finished tasks kept per source queue (the most recent); older ones are deleted when a
/// task of the source finishes.
pub const MOVE_TASKS_KEPT_PER_SOURCE: usize = 10;

/// Most tasks one listing returns.
pub const MAX_MOVE_TASK_PAGE: u32 = 100;

impl MoveTaskRecord {
    /// The move task a replay plan of kind `sqs_move` stores, with its runner's columns
    /// (the mapping of [`skeleton::move_tasks`](crate::skeleton::move_tasks)).
    pub fn from_plan(
        p: &crate::ReplayPlanRecord,
        runner: Option<String>,
        runner_until: Option<redrive_core::Timestamp>,
    ) -> crate::StoreResult<MoveTaskRecord> {
        crate::skeleton::move_tasks::from_plan(p, runner, runner_until)
    }
}
