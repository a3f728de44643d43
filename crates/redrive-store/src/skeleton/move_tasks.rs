//! Message move task rows: a move task is a replay plan of kind `sqs_move` (schema 11),
//! read and written here in the task's SQS terms, and the rules of its writes (which
//! progress a runner may write, a cancel request, a claim of an orphan).
//!
//! # The mapping ([`to_plan`], [`from_plan`])
//!
//! | move task | plan |
//! | --- | --- |
//! | `handle` (`mv_…`) | `id` |
//! | `source` | `queue` |
//! | `destination`, `None` | `destination`, [`MOVE_TO_SOURCE`] |
//! | `max_per_second` | `spec` `{"max_per_second": n \| null}` |
//! | `RUNNING`, `CANCELLING`, `COMPLETED`, `CANCELLED` | `running`, `cancelling`, `completed`, `cancelled` |
//! | `FAILED` with its reason | `stopped` with `stop_reason` = the reason |
//! | `moved`, `to_move`, `next_slot` | `state` `{"moved", "to_move", "next_item_ms", "failure_reason"}` |
//! | `owner_id`, `owner_name`, `started_at`, `updated_at` | the same, `created_at` |
//! | `runner`, `runner_until` | the columns `runner`, `runner_until` |
//!
//! A move plan holds no item rows (`items` 0) and no owner's lease (`owner_until` is
//! [`NO_LEASE`]: it runs on its owner's token, read again when it resumes); every write
//! bumps its `version`. Its creation order is the column `seq` (ties of `created_at`).
//!
//! The one-active-task-per-source rule is the partial unique index
//! `replay_plans_active_move` on `queue` over `sqs_move` plans `running` or
//! `cancelling`: a create inserts with `ON CONFLICT (queue) WHERE …  DO NOTHING`
//! ([`INSERT_MOVE`]), so that two nodes starting a task of one source at once cannot both
//! succeed (the second inserts nothing and is told `MoveTaskRunning`). A `cases` plan over
//! the same queue is not concerned.

use redrive_core::Timestamp;
use serde_json::json;

use super::columns::{Columns, RowError, after, bad_value, to_int, to_json};
use super::replay_plans::{self, PlanColumns, plan_columns};
use crate::StoreResult;
use crate::{
    MAX_MOVE_TASK_PAGE, MOVE_TO_SOURCE, MoveTaskProgress, MoveTaskRecord, MoveTaskStatus, PlanKind,
    PlanMut, PlanStatus, ReplayPlanRecord, StoreError,
};

/// The `owner_until` of a move plan: it holds no owner's lease.
pub const NO_LEASE: Timestamp = Timestamp(i64::MAX);

/// Inserts a move plan: [`MoveColumns`] as `$1…$18` (the plan's columns in the order of
/// [`columns!(replay_plan)`](crate::columns), then `runner`, `runner_until`), its `seq`
/// the next one. Inserts nothing while the source has an active move plan.
pub const INSERT_MOVE: &str = concat!(
    "INSERT INTO replay_plans (",
    crate::columns!(replay_plan),
    ", runner, runner_until, seq) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, \
     $12, $13, $14, $15, $16, $17, $18, (SELECT coalesce(max(seq), 0) + 1 FROM replay_plans)) \
     ON CONFLICT (queue) WHERE kind = 'sqs_move' AND status IN ('running', 'cancelling') \
     DO NOTHING"
);

/// One move plan by id (`$1`).
pub const GET_MOVE: &str = concat!(
    "SELECT ",
    crate::columns!(move_task),
    " FROM replay_plans WHERE id = $1 AND kind = 'sqs_move'"
);

/// The move plans of a source (`$1`), most recently started first, at most `$2`.
pub const LIST_MOVES: &str = concat!(
    "SELECT ",
    crate::columns!(move_task),
    " FROM replay_plans WHERE kind = 'sqs_move' AND queue = $1 \
     ORDER BY created_at DESC, seq DESC LIMIT $2"
);

/// The orphaned move plans at `$1` (active, heartbeat passed or none), oldest first, at
/// most `$2` (a backend that locks appends its locking clause).
pub const ORPHANS: &str = concat!(
    "SELECT ",
    crate::columns!(move_task),
    " FROM replay_plans WHERE kind = 'sqs_move' AND status IN ('running', 'cancelling') \
     AND (runner_until IS NULL OR runner_until <= $1) ORDER BY created_at, seq LIMIT $2"
);

/// Writes a move plan's mutable part ([`WriteColumns`] as `$1…$6`, the id `$7`) and bumps
/// its version.
pub const WRITE_MOVE: &str = "UPDATE replay_plans SET status = $1, stop_reason = $2, \
     state = $3, updated_at = $4, runner = $5, runner_until = $6, version = version + 1 \
     WHERE id = $7 AND kind = 'sqs_move'";

/// Deletes the finished move plans of a source (`$1`) but the most recent `$2`.
pub const PRUNE_MOVES: &str = "DELETE FROM replay_plans WHERE kind = 'sqs_move' \
     AND queue = $1 AND status NOT IN ('running', 'cancelling') AND id NOT IN \
     (SELECT id FROM replay_plans WHERE kind = 'sqs_move' AND queue = $1 \
      AND status NOT IN ('running', 'cancelling') \
      ORDER BY created_at DESC, seq DESC LIMIT $2)";

/// A move plan's status.
pub fn plan_status(s: MoveTaskStatus) -> PlanStatus {
    match s {
        MoveTaskStatus::Running => PlanStatus::Running,
        MoveTaskStatus::Completed => PlanStatus::Completed,
        MoveTaskStatus::Cancelling => PlanStatus::Cancelling,
        MoveTaskStatus::Cancelled => PlanStatus::Cancelled,
        MoveTaskStatus::Failed => PlanStatus::Stopped,
    }
}

/// A move task's status from its plan's (`planned` and `paused` are never a move plan's).
pub fn task_status(s: PlanStatus) -> StoreResult<MoveTaskStatus> {
    Ok(match s {
        PlanStatus::Running => MoveTaskStatus::Running,
        PlanStatus::Completed => MoveTaskStatus::Completed,
        PlanStatus::Cancelling => MoveTaskStatus::Cancelling,
        PlanStatus::Cancelled => MoveTaskStatus::Cancelled,
        PlanStatus::Stopped => MoveTaskStatus::Failed,
        other => {
            return Err(bad_value(
                "replay_plans.status",
                format!("{other} is not a move plan's status"),
            ));
        }
    })
}

/// A move plan's runner state (JSON object).
pub fn state(t: &MoveTaskRecord) -> serde_json::Value {
    json!({
        "moved": t.moved,
        "to_move": t.to_move,
        "next_item_ms": t.next_slot.map(|s| s.0),
        "failure_reason": t.failure_reason,
    })
}

/// The plan a move task is stored as (see the module docs).
pub fn to_plan(t: &MoveTaskRecord) -> ReplayPlanRecord {
    let status = plan_status(t.status);
    ReplayPlanRecord {
        id: t.handle.clone(),
        kind: PlanKind::SqsMove,
        queue: t.source.clone(),
        destination: t
            .destination
            .clone()
            .unwrap_or_else(|| MOVE_TO_SOURCE.to_owned()),
        owner_id: t.owner_id.clone(),
        owner_name: t.owner_name.clone(),
        spec: json!({ "max_per_second": t.max_per_second }),
        items: 0,
        created_at: t.started_at,
        version: 1,
        m: PlanMut {
            status,
            owner_until: NO_LEASE,
            stop_reason: if status == PlanStatus::Stopped {
                t.failure_reason.clone()
            } else {
                None
            },
            next_at: None,
            state: state(t),
            updated_at: t.updated_at,
        },
    }
}

fn count(state: &serde_json::Value, key: &'static str) -> StoreResult<u64> {
    state
        .get(key)
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| bad_value("replay_plans.state", format!("{key} missing")))
}

/// The move task a plan of kind `sqs_move` stores, with its runner's columns.
pub fn from_plan(
    p: &ReplayPlanRecord,
    runner: Option<String>,
    runner_until: Option<Timestamp>,
) -> StoreResult<MoveTaskRecord> {
    if p.kind != PlanKind::SqsMove {
        return Err(RowError::Invariant("a move task read from a plan of another kind").into());
    }
    let rate = match p.spec.get("max_per_second") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|r| u32::try_from(r).ok())
                .ok_or_else(|| bad_value("replay_plans.spec", "max_per_second"))?,
        ),
    };
    let status = task_status(p.m.status)?;
    Ok(MoveTaskRecord {
        handle: p.id.clone(),
        source: p.queue.clone(),
        destination: (p.destination != MOVE_TO_SOURCE).then(|| p.destination.clone()),
        max_per_second: rate,
        status,
        moved: count(&p.m.state, "moved")?,
        to_move: count(&p.m.state, "to_move")?,
        failure_reason: if status == MoveTaskStatus::Failed {
            p.m.stop_reason.clone()
        } else {
            None
        },
        owner_id: p.owner_id.clone(),
        owner_name: p.owner_name.clone(),
        started_at: p.created_at,
        updated_at: p.m.updated_at,
        runner,
        runner_until,
        next_slot: p
            .m
            .state
            .get("next_item_ms")
            .and_then(serde_json::Value::as_i64)
            .map(Timestamp),
    })
}

/// Reads [`columns!(move_task)`](crate::columns).
pub fn decode(c: &impl Columns) -> StoreResult<MoveTaskRecord> {
    let plan = replay_plans::decode(c)?;
    from_plan(&plan, c.text_opt(16)?, c.time_opt(17)?)
}

/// A new move plan as bound by [`INSERT_MOVE`].
#[derive(Debug, Clone, PartialEq)]
pub struct MoveColumns {
    /// The plan's columns.
    pub plan: PlanColumns,
    /// `runner`.
    pub runner: Option<String>,
    /// `runner_until`.
    pub runner_until: Option<i64>,
}

/// A new move task as bound.
pub fn move_columns(t: &MoveTaskRecord) -> StoreResult<MoveColumns> {
    Ok(MoveColumns {
        plan: plan_columns(&to_plan(t))?,
        runner: t.runner.clone(),
        runner_until: t.runner_until.map(|u| u.0),
    })
}

/// A move plan's mutable part as bound by [`WRITE_MOVE`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteColumns {
    /// `status`.
    pub status: &'static str,
    /// `stop_reason`.
    pub stop_reason: Option<String>,
    /// `state` (JSON text).
    pub state: String,
    /// `updated_at`.
    pub updated_at: i64,
    /// `runner`.
    pub runner: Option<String>,
    /// `runner_until`.
    pub runner_until: Option<i64>,
    /// `id`.
    pub id: String,
}

/// A task's write as bound.
pub fn write_columns(t: &MoveTaskRecord) -> StoreResult<WriteColumns> {
    let p = to_plan(t);
    Ok(WriteColumns {
        status: p.m.status.as_str(),
        stop_reason: p.m.stop_reason,
        state: to_json(&p.m.state)?,
        updated_at: t.updated_at.0,
        runner: t.runner.clone(),
        runner_until: t.runner_until.map(|u| u.0),
        id: t.handle.clone(),
    })
}

/// The retention bound as bound by [`PRUNE_MOVES`].
pub fn kept() -> StoreResult<i64> {
    to_int(crate::MOVE_TASKS_KEPT_PER_SOURCE, "kept")
}

/// What `runner` writing `p` at `now` makes of the stored task: `None` (nothing is
/// written) when it is finished or another node runs it. While it runs, a stored
/// `CANCELLING` stays (a cancel asked elsewhere is not undone by progress), and a task
/// that ends without error after a cancel was asked ends `CANCELLED`. An ended task
/// keeps no runner.
pub fn progress(
    stored: &MoveTaskRecord,
    runner: &str,
    p: &MoveTaskProgress,
    now: Timestamp,
) -> Option<MoveTaskRecord> {
    if !stored.status.is_active() || stored.runner.as_deref() != Some(runner) {
        return None;
    }
    let cancelling = stored.status == MoveTaskStatus::Cancelling;
    let status = match p.status {
        MoveTaskStatus::Running if cancelling => MoveTaskStatus::Cancelling,
        MoveTaskStatus::Completed if cancelling => MoveTaskStatus::Cancelled,
        s => s,
    };
    let ended = !status.is_active();
    Some(MoveTaskRecord {
        status,
        moved: p.moved,
        failure_reason: if status == MoveTaskStatus::Failed {
            p.failure_reason.clone()
        } else {
            None
        },
        updated_at: now,
        runner: if ended { None } else { stored.runner.clone() },
        runner_until: if ended { None } else { p.runner_until },
        next_slot: p.next_slot,
        ..stored.clone()
    })
}

/// A cancel request at `now`: `RUNNING` becomes `CANCELLING`; any other status is
/// `MoveTaskNotRunning`.
pub fn cancel(stored: &MoveTaskRecord, now: Timestamp) -> StoreResult<MoveTaskRecord> {
    if stored.status != MoveTaskStatus::Running {
        return Err(StoreError::MoveTaskNotRunning {
            handle: stored.handle.clone(),
        });
    }
    Ok(MoveTaskRecord {
        status: MoveTaskStatus::Cancelling,
        updated_at: now,
        ..stored.clone()
    })
}

/// Whether the task is an orphan at `now`: active, and its runner's heartbeat passed (or
/// it has none).
pub fn orphaned(stored: &MoveTaskRecord, now: Timestamp) -> bool {
    stored.status.is_active() && stored.runner_until.is_none_or(|u| u <= now)
}

/// A claim by `runner` at `now` with a heartbeat of `lease_ms`: the task as written, or
/// `None` when it is not an orphan.
pub fn claim(
    stored: &MoveTaskRecord,
    runner: &str,
    lease_ms: u64,
    now: Timestamp,
) -> Option<MoveTaskRecord> {
    orphaned(stored, now).then(|| MoveTaskRecord {
        runner: Some(runner.to_owned()),
        runner_until: Some(after(now, lease_ms)),
        updated_at: now,
        ..stored.clone()
    })
}

/// The page size a listing asks for, capped at [`MAX_MOVE_TASK_PAGE`].
pub fn page_limit(limit: u32) -> i64 {
    i64::from(limit.min(MAX_MOVE_TASK_PAGE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(status: MoveTaskStatus, runner: Option<&str>, until: Option<i64>) -> MoveTaskRecord {
        MoveTaskRecord {
            handle: "mv_1".into(),
            source: "dlq".into(),
            destination: None,
            max_per_second: None,
            status,
            moved: 0,
            to_move: 3,
            failure_reason: None,
            owner_id: "anonymous".into(),
            owner_name: "anonymous".into(),
            started_at: Timestamp(0),
            updated_at: Timestamp(0),
            runner: runner.map(str::to_owned),
            runner_until: until.map(Timestamp),
            next_slot: None,
        }
    }

    fn step(status: MoveTaskStatus, moved: u64) -> MoveTaskProgress {
        MoveTaskProgress {
            status,
            moved,
            failure_reason: Some("why".into()),
            runner_until: Some(Timestamp(50)),
            next_slot: Some(Timestamp(7)),
        }
    }

    #[test]
    fn progress_is_the_runners_and_keeps_a_cancel() {
        use MoveTaskStatus::*;
        let t = task(Running, Some("a"), Some(10));
        assert_eq!(progress(&t, "b", &step(Running, 1), Timestamp(5)), None);
        let w = progress(&t, "a", &step(Running, 1), Timestamp(5)).unwrap();
        assert_eq!(
            (w.status, w.moved, w.failure_reason.as_deref()),
            (Running, 1, None)
        );
        assert_eq!(w.runner_until, Some(Timestamp(50)));
        let c = task(Cancelling, Some("a"), Some(10));
        assert_eq!(
            progress(&c, "a", &step(Running, 2), Timestamp(5))
                .unwrap()
                .status,
            Cancelling
        );
        let done = progress(&c, "a", &step(Completed, 2), Timestamp(5)).unwrap();
        assert_eq!(
            (done.status, done.runner, done.runner_until),
            (Cancelled, None, None)
        );
        let failed = progress(&t, "a", &step(Failed, 2), Timestamp(5)).unwrap();
        assert_eq!(failed.failure_reason.as_deref(), Some("why"));
        assert_eq!(
            progress(&failed, "a", &step(Running, 3), Timestamp(6)),
            None
        );
    }

    #[test]
    fn only_an_orphan_is_claimed_and_only_a_running_task_cancelled() {
        use MoveTaskStatus::*;
        let t = task(Running, Some("a"), Some(10));
        assert_eq!(claim(&t, "b", 30, Timestamp(9)), None);
        let c = claim(&t, "b", 30, Timestamp(10)).unwrap();
        assert_eq!(
            (c.runner.as_deref(), c.runner_until),
            (Some("b"), Some(Timestamp(40)))
        );
        assert_eq!(
            claim(&task(Completed, None, None), "b", 30, Timestamp(99)),
            None
        );
        assert_eq!(cancel(&t, Timestamp(3)).unwrap().status, Cancelling);
        assert!(matches!(
            cancel(&task(Cancelling, Some("a"), None), Timestamp(3)),
            Err(StoreError::MoveTaskNotRunning { .. })
        ));
        assert_eq!((page_limit(5), page_limit(1_000)), (5, 100));
    }

    #[test]
    fn a_task_round_trips_through_its_plan() {
        use MoveTaskStatus::*;
        for (status, plan) in [
            (Running, PlanStatus::Running),
            (Completed, PlanStatus::Completed),
            (Cancelling, PlanStatus::Cancelling),
            (Cancelled, PlanStatus::Cancelled),
            (Failed, PlanStatus::Stopped),
        ] {
            let mut t = task(status, Some("a"), Some(10));
            t.max_per_second = Some(3);
            t.moved = 2;
            t.next_slot = Some(Timestamp(1_500));
            if status == Failed {
                t.failure_reason = Some("authorization_revoked".into());
            }
            let p = to_plan(&t);
            assert_eq!((p.kind, p.m.status, p.items), (PlanKind::SqsMove, plan, 0));
            assert_eq!(p.destination, MOVE_TO_SOURCE);
            assert_eq!(
                p.m.stop_reason.as_deref(),
                (status == Failed).then_some("authorization_revoked")
            );
            let back = from_plan(&p, t.runner.clone(), t.runner_until).unwrap();
            assert_eq!(back, t);
        }
        let mut p = to_plan(&task(Running, None, None));
        p.m.status = PlanStatus::Paused;
        assert!(from_plan(&p, None, None).is_err());
        p.m.status = PlanStatus::Running;
        p.kind = PlanKind::Cases;
        assert!(from_plan(&p, None, None).is_err());
    }
}
