//! Message move tasks (SQS `StartMessageMoveTask`): the task's state kept in the store,
//! so that every node sharing it lists and cancels it, and a node resumes it when the one
//! running it stops.
//!
//! A move task is stored as a replay plan of kind `sqs_move` (`replay_plans`, schema 11;
//! see [`skeleton::move_tasks`](crate::skeleton::move_tasks) for the mapping), read and
//! written through the plan methods of the [`Store`](crate::Store) like any plan: what
//! is the task's own (its rate, progress, pacing, runner) is its plan's spec and state,
//! typed as [`MovePart`]; its operations ([`move_plans`]) find the plan, decide, and
//! write it on the version they read.
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

/// The move-specific part of a plan of kind `sqs_move`, read from its spec, state and
/// destination ([`ReplayPlanRecord::move_part`]); the rest of the task is the plan's:
/// its handle is the plan's `id`, its source the `queue`, its owner the plan's owner,
/// its start `created_at`, its last write `updated_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MovePart {
    /// At most this many per second; `None`: as fast as it goes.
    pub max_per_second: Option<u32>,
    /// Where the messages go; `None`: each back to the queue it was dead-lettered from.
    pub destination: Option<String>,
    /// Where it is.
    pub status: MoveTaskStatus,
    /// Messages moved so far.
    pub moved: u64,
    /// Messages on the source when the task started.
    pub to_move: u64,
    /// Why it failed.
    pub failure_reason: Option<String>,
    /// The node running it (`None` once it finished).
    pub runner: Option<String>,
    /// Until when the runner's heartbeat holds the task; after that it is an orphan.
    pub runner_until: Option<Timestamp>,
    /// The pacing state: the earliest time the task's pacer lets the next message go
    /// (`None`: at once). Written with every heartbeat, so that a resumed task keeps its
    /// spacing.
    pub next_slot: Option<Timestamp>,
}

/// A new move task, as its plan is created ([`skeleton::move_tasks::new_plan`]).
///
/// [`skeleton::move_tasks::new_plan`]: crate::skeleton::move_tasks::new_plan
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMove {
    /// Identifies the task (`mv_…`).
    pub handle: String,
    /// The queue the messages leave.
    pub source: String,
    /// Where they go; `None`: each back to the queue it was dead-lettered from.
    pub destination: Option<String>,
    /// At most this many per second; `None`: as fast as it goes.
    pub max_per_second: Option<u32>,
    /// Messages on the source now.
    pub to_move: u64,
    /// The token id of the actor whose authority the task runs on (`anonymous` when
    /// authentication is off).
    pub owner_id: String,
    /// That actor's name.
    pub owner_name: String,
    /// The node that runs it.
    pub runner: String,
    /// Until when its heartbeat holds it.
    pub runner_until: Timestamp,
    /// Now: when it starts.
    pub now: Timestamp,
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
    /// The pacing state as the runner leaves it (see [`MovePart::next_slot`]).
    pub next_slot: Option<Timestamp>,
}

/// Finished tasks kept per source queue (the most recent); older ones are deleted when a
/// task of the source finishes.
pub const MOVE_TASKS_KEPT_PER_SOURCE: usize = 10;

/// Most tasks one listing returns.
pub const MAX_MOVE_TASK_PAGE: u32 = 100;

impl crate::ReplayPlanRecord {
    /// The move-specific part of a plan of kind `sqs_move` (the mapping of
    /// [`skeleton::move_tasks`](crate::skeleton::move_tasks)); a plan of another kind is
    /// a caller's bug.
    pub fn move_part(&self) -> crate::StoreResult<MovePart> {
        crate::skeleton::move_tasks::part(self)
    }
}

/// A move task's operations, over the plan methods of the [`Store`](crate::Store): each
/// finds the plan, asks [`skeleton::move_tasks`](crate::skeleton::move_tasks) what to
/// write, and writes it with `update_replay_plan` on the version it read. A write that
/// meets another (`ReplayPlanChanged`: a cancel, a claim, a runner's progress) reads the
/// plan again and decides again, so that every backend gives one answer to writers on
/// many nodes.
pub mod move_plans {
    use redrive_core::Timestamp;

    use super::{MoveTaskProgress, NewMove};
    use crate::skeleton::move_tasks as rules;
    use crate::{
        PlanKind, PlanMut, PlanOrder, PlanQuery, PlanStatus, ReplayPlanRecord, ReplayPlanUpdate,
        Store, StoreError, StoreResult,
    };

    /// How many times a write that met another reads again before giving up with
    /// `ReplayPlanChanged`.
    const ATTEMPTS: usize = 8;

    /// Stores a new task (`RUNNING`, its runner and heartbeat) as its plan. Refused with
    /// `MoveTaskRunning` while a task of the same source is `RUNNING` or `CANCELLING`, in
    /// the same transaction: one active task per source, whichever node asks.
    pub async fn create(store: &dyn Store, n: &NewMove) -> StoreResult<ReplayPlanRecord> {
        store.create_replay_plan(&rules::new_plan(n), &[]).await
    }

    /// The task `handle`, if it exists (a plan of another kind is not one).
    pub async fn get(store: &dyn Store, handle: &str) -> StoreResult<Option<ReplayPlanRecord>> {
        match store.get_replay_plan(handle).await {
            Ok(p) if p.kind == PlanKind::SqsMove => Ok(Some(p)),
            Ok(_) | Err(StoreError::ReplayPlanNotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The tasks of `source`, most recently started first, at most `limit` (capped at
    /// [`MAX_MOVE_TASK_PAGE`](crate::MAX_MOVE_TASK_PAGE)).
    pub async fn list(
        store: &dyn Store,
        source: &str,
        limit: u32,
    ) -> StoreResult<Vec<ReplayPlanRecord>> {
        let limit = rules::page_limit(limit);
        if limit == 0 {
            return Ok(Vec::new());
        }
        store
            .list_replay_plans(&PlanQuery {
                kinds: vec![PlanKind::SqsMove],
                queue: Some(source.to_owned()),
                order: PlanOrder::Newest,
                limit,
                ..PlanQuery::default()
            })
            .await
    }

    /// Finds `handle` and writes what `decide` makes of it, reading again when the write
    /// met another; `Ok(None)` when there is no such task or `decide` writes nothing.
    async fn write(
        store: &dyn Store,
        handle: &str,
        decide: impl Fn(&ReplayPlanRecord) -> StoreResult<Option<PlanMut>>,
    ) -> StoreResult<Option<ReplayPlanRecord>> {
        let mut last = None;
        for _ in 0..ATTEMPTS {
            let Some(stored) = get(store, handle).await? else {
                return Ok(None);
            };
            let Some(set) = decide(&stored)? else {
                return Ok(None);
            };
            let update = ReplayPlanUpdate {
                id: stored.id.clone(),
                version: stored.version,
                set,
                items: Vec::new(),
            };
            match store.update_replay_plan(&update).await {
                Ok(w) => return Ok(Some(w)),
                Err(e @ StoreError::ReplayPlanChanged { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| crate::skeleton::replay_plans::not_found(handle)))
    }

    /// Writes a runner's progress, heartbeat or end of task `handle`, only while `runner`
    /// runs it and it is active (see [`rules::progress`]: a stored `CANCELLING` stays
    /// until the runner ends the task). A task that ends here is kept, with the
    /// [`MOVE_TASKS_KEPT_PER_SOURCE`](crate::MOVE_TASKS_KEPT_PER_SOURCE) most recent
    /// finished tasks of its source; older ones are deleted (by `update_replay_plan`).
    /// Returns the task as written, or `None` (nothing written) when it is gone,
    /// finished, or another node runs it.
    pub async fn progress(
        store: &dyn Store,
        handle: &str,
        runner: &str,
        p: &MoveTaskProgress,
        now: Timestamp,
    ) -> StoreResult<Option<ReplayPlanRecord>> {
        write(store, handle, |stored| {
            Ok(rules::progress(&stored.move_part()?, runner, p, now))
        })
        .await
    }

    /// Asks a running task to stop: `RUNNING` becomes `CANCELLING` (its runner sees it at
    /// its next batch). `MoveTaskNotFound`; `MoveTaskNotRunning` when it is not
    /// `RUNNING`. Returns the task as written.
    pub async fn cancel(
        store: &dyn Store,
        handle: &str,
        now: Timestamp,
    ) -> StoreResult<ReplayPlanRecord> {
        write(store, handle, |stored| {
            rules::cancel(handle, &stored.move_part()?, now).map(Some)
        })
        .await?
        .ok_or_else(|| StoreError::MoveTaskNotFound {
            handle: handle.to_owned(),
        })
    }

    /// Claims up to `limit` orphaned tasks — `RUNNING` or `CANCELLING` whose heartbeat
    /// (`runner_until`) is at or before `now`, oldest first — for `runner`, with a
    /// heartbeat until `now + lease_ms`. Each claim is a write on the version read, so a
    /// task goes to one claimer (one that meets another's write passes it by). Returns
    /// the claimed tasks as written.
    pub async fn claim(
        store: &dyn Store,
        runner: &str,
        lease_ms: u64,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<ReplayPlanRecord>> {
        // At most one active move plan per queue: the page holds every one of them.
        let active = store
            .list_replay_plans(&PlanQuery {
                status: vec![PlanStatus::Running, PlanStatus::Cancelling],
                kinds: vec![PlanKind::SqsMove],
                order: PlanOrder::Oldest,
                ..PlanQuery::default()
            })
            .await?;
        let mut out = Vec::new();
        for stored in active {
            if out.len() >= rules::page_limit(limit) as usize {
                break;
            }
            let Some(set) = rules::claim(&stored.move_part()?, runner, lease_ms, now) else {
                continue;
            };
            let update = ReplayPlanUpdate {
                id: stored.id.clone(),
                version: stored.version,
                set,
                items: Vec::new(),
            };
            match store.update_replay_plan(&update).await {
                Ok(w) => out.push(w),
                Err(
                    StoreError::ReplayPlanChanged { .. } | StoreError::ReplayPlanNotFound { .. },
                ) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}
