//! Message move tasks as replay plans of kind `sqs_move` (schema 11): the move-specific
//! part of such a plan (its spec and state, typed as [`MovePart`]), the statements that
//! insert one under the one-active-task-per-source rule and prune finished ones, and the
//! rules of a task's writes (which progress a runner may write, a cancel request, a claim
//! of an orphan), each answering the plan's next mutable part for a version-checked
//! `update_replay_plan`.
//!
//! # The mapping ([`part`], [`to_mut`], [`new_plan`])
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
//! | `runner`, `runner_until` | `state` `{"runner", "runner_until"}`, kept in the columns `runner`, `runner_until` |
//! | `owner_id`, `owner_name`, `started_at`, `updated_at` | the same, `created_at` |
//!
//! The runner's columns are the store's copy of the state's `runner` and
//! `runner_until`: written from the state with every write of the plan, and read back
//! into it ([`read_runner`]), so that rows written before the state held them read the
//! same. A move plan holds no item rows (`items` 0) and no owner's lease (`owner_until`
//! is [`NO_LEASE`]: it runs on its owner's token, read again when it resumes); every
//! write bumps its `version`. Its creation order is the column `seq` (ties of
//! `created_at`).
//!
//! The one-active-task-per-source rule is the partial unique index
//! `replay_plans_active_move` on `queue` over `sqs_move` plans `running` or
//! `cancelling`: a create inserts with `ON CONFLICT (queue) WHERE …  DO NOTHING`
//! ([`INSERT_MOVE`]), so that two nodes starting a task of one source at once cannot both
//! succeed (the second inserts nothing and is told `MoveTaskRunning`). A `cases` plan over
//! the same queue is not concerned.

use redrive_core::Timestamp;
use serde_json::json;

use super::columns::{RowError, after, bad_value, to_int};
use crate::StoreResult;
use crate::{
    MAX_MOVE_TASK_PAGE, MOVE_TO_SOURCE, MovePart, MoveTaskProgress, MoveTaskStatus, NewMove,
    PlanKind, PlanMut, PlanStatus, ReplayPlanRecord, StoreError,
};

/// The `owner_until` of a move plan: it holds no owner's lease.
pub const NO_LEASE: Timestamp = Timestamp(i64::MAX);

/// Inserts a move plan: [`PlanColumns`](super::replay_plans::PlanColumns) as `$1…$18`
/// (in the order of [`columns!(replay_plan)`](crate::columns)), its `seq` the next one.
/// Inserts nothing while the source has an active move plan.
pub const INSERT_MOVE: &str = concat!(
    "INSERT INTO replay_plans (",
    crate::columns!(replay_plan),
    ", seq) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, \
     $17, $18, (SELECT coalesce(max(seq), 0) + 1 FROM replay_plans)) \
     ON CONFLICT (queue) WHERE kind = 'sqs_move' AND status IN ('running', 'cancelling') \
     DO NOTHING"
);

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

/// Puts the runner's columns into a move plan's state as read (see the module docs).
pub fn read_runner(
    state: &mut serde_json::Value,
    runner: Option<String>,
    runner_until: Option<Timestamp>,
) -> StoreResult<()> {
    let obj = state
        .as_object_mut()
        .ok_or_else(|| bad_value("replay_plans.state", "not a JSON object"))?;
    obj.insert("runner".to_owned(), json!(runner));
    obj.insert("runner_until".to_owned(), json!(runner_until.map(|u| u.0)));
    Ok(())
}

/// A move plan's state (JSON object) for `t`.
pub fn state(t: &MovePart) -> serde_json::Value {
    json!({
        "moved": t.moved,
        "to_move": t.to_move,
        "next_item_ms": t.next_slot.map(|s| s.0),
        "failure_reason": t.failure_reason,
        "runner": t.runner,
        "runner_until": t.runner_until.map(|u| u.0),
    })
}

/// The mutable part of a move plan that stores `t`, written at `updated_at`.
pub fn to_mut(t: &MovePart, updated_at: Timestamp) -> PlanMut {
    let status = plan_status(t.status);
    PlanMut {
        status,
        owner_until: NO_LEASE,
        stop_reason: if status == PlanStatus::Stopped {
            t.failure_reason.clone()
        } else {
            None
        },
        next_at: None,
        state: state(t),
        updated_at,
    }
}

/// The plan a new move task is stored as: `RUNNING`, nothing moved, run by its runner.
pub fn new_plan(n: &NewMove) -> ReplayPlanRecord {
    let t = MovePart {
        max_per_second: n.max_per_second,
        destination: n.destination.clone(),
        status: MoveTaskStatus::Running,
        moved: 0,
        to_move: n.to_move,
        failure_reason: None,
        runner: Some(n.runner.clone()),
        runner_until: Some(n.runner_until),
        next_slot: None,
    };
    ReplayPlanRecord {
        id: n.handle.clone(),
        kind: PlanKind::SqsMove,
        queue: n.source.clone(),
        destination: n
            .destination
            .clone()
            .unwrap_or_else(|| MOVE_TO_SOURCE.to_owned()),
        owner_id: n.owner_id.clone(),
        owner_name: n.owner_name.clone(),
        spec: json!({ "max_per_second": n.max_per_second }),
        items: 0,
        created_at: n.now,
        version: 1,
        m: to_mut(&t, n.now),
    }
}

fn count(state: &serde_json::Value, key: &'static str) -> StoreResult<u64> {
    state
        .get(key)
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| bad_value("replay_plans.state", format!("{key} missing")))
}

fn time(state: &serde_json::Value, key: &str) -> Option<Timestamp> {
    state
        .get(key)
        .and_then(serde_json::Value::as_i64)
        .map(Timestamp)
}

/// The move-specific part of a plan of kind `sqs_move`.
pub fn part(p: &ReplayPlanRecord) -> StoreResult<MovePart> {
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
    let s = &p.m.state;
    Ok(MovePart {
        max_per_second: rate,
        destination: (p.destination != MOVE_TO_SOURCE).then(|| p.destination.clone()),
        status,
        moved: count(s, "moved")?,
        to_move: count(s, "to_move")?,
        failure_reason: if status == MoveTaskStatus::Failed {
            p.m.stop_reason.clone()
        } else {
            None
        },
        runner: s
            .get("runner")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned),
        runner_until: time(s, "runner_until"),
        next_slot: time(s, "next_item_ms"),
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
    stored: &MovePart,
    runner: &str,
    p: &MoveTaskProgress,
    now: Timestamp,
) -> Option<PlanMut> {
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
    let w = MovePart {
        status,
        moved: p.moved,
        failure_reason: if status == MoveTaskStatus::Failed {
            p.failure_reason.clone()
        } else {
            None
        },
        runner: if ended { None } else { stored.runner.clone() },
        runner_until: if ended { None } else { p.runner_until },
        next_slot: p.next_slot,
        ..stored.clone()
    };
    Some(to_mut(&w, now))
}

/// A cancel request of task `handle` at `now`: `RUNNING` becomes `CANCELLING`; any other
/// status is `MoveTaskNotRunning`.
pub fn cancel(handle: &str, stored: &MovePart, now: Timestamp) -> StoreResult<PlanMut> {
    if stored.status != MoveTaskStatus::Running {
        return Err(StoreError::MoveTaskNotRunning {
            handle: handle.to_owned(),
        });
    }
    let w = MovePart {
        status: MoveTaskStatus::Cancelling,
        ..stored.clone()
    };
    Ok(to_mut(&w, now))
}

/// Whether the task is an orphan at `now`: active, and its runner's heartbeat passed (or
/// it has none).
pub fn orphaned(stored: &MovePart, now: Timestamp) -> bool {
    stored.status.is_active() && stored.runner_until.is_none_or(|u| u <= now)
}

/// A claim by `runner` at `now` with a heartbeat of `lease_ms`: the plan's next mutable
/// part, or `None` when it is not an orphan.
pub fn claim(stored: &MovePart, runner: &str, lease_ms: u64, now: Timestamp) -> Option<PlanMut> {
    orphaned(stored, now).then(|| {
        let w = MovePart {
            runner: Some(runner.to_owned()),
            runner_until: Some(after(now, lease_ms)),
            ..stored.clone()
        };
        to_mut(&w, now)
    })
}

/// The page size a listing asks for, capped at [`MAX_MOVE_TASK_PAGE`].
pub fn page_limit(limit: u32) -> u32 {
    limit.min(MAX_MOVE_TASK_PAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(status: MoveTaskStatus, runner: Option<&str>, until: Option<i64>) -> MovePart {
        MovePart {
            max_per_second: None,
            destination: None,
            status,
            moved: 0,
            to_move: 3,
            failure_reason: None,
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

    fn back(m: PlanMut) -> MovePart {
        let mut p = new_plan(&NewMove {
            handle: "mv_1".into(),
            source: "dlq".into(),
            destination: None,
            max_per_second: None,
            to_move: 3,
            owner_id: "anonymous".into(),
            owner_name: "anonymous".into(),
            runner: "a".into(),
            runner_until: Timestamp(10),
            now: Timestamp(0),
        });
        p.m = m;
        part(&p).unwrap()
    }

    #[test]
    fn progress_is_the_runners_and_keeps_a_cancel() {
        use MoveTaskStatus::*;
        let t = task(Running, Some("a"), Some(10));
        assert_eq!(progress(&t, "b", &step(Running, 1), Timestamp(5)), None);
        let w = back(progress(&t, "a", &step(Running, 1), Timestamp(5)).unwrap());
        assert_eq!(
            (w.status, w.moved, w.failure_reason.as_deref()),
            (Running, 1, None)
        );
        assert_eq!(w.runner_until, Some(Timestamp(50)));
        let c = task(Cancelling, Some("a"), Some(10));
        assert_eq!(
            back(progress(&c, "a", &step(Running, 2), Timestamp(5)).unwrap()).status,
            Cancelling
        );
        let done = back(progress(&c, "a", &step(Completed, 2), Timestamp(5)).unwrap());
        assert_eq!(
            (done.status, done.runner, done.runner_until),
            (Cancelled, None, None)
        );
        let failed = back(progress(&t, "a", &step(Failed, 2), Timestamp(5)).unwrap());
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
        let c = back(claim(&t, "b", 30, Timestamp(10)).unwrap());
        assert_eq!(
            (c.runner.as_deref(), c.runner_until),
            (Some("b"), Some(Timestamp(40)))
        );
        assert_eq!(
            claim(&task(Completed, None, None), "b", 30, Timestamp(99)),
            None
        );
        assert_eq!(
            back(cancel("mv_1", &t, Timestamp(3)).unwrap()).status,
            Cancelling
        );
        assert!(matches!(
            cancel("mv_1", &task(Cancelling, Some("a"), None), Timestamp(3)),
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
            let m = to_mut(&t, Timestamp(4));
            assert_eq!(m.status, plan);
            assert_eq!(m.owner_until, NO_LEASE);
            assert_eq!(
                m.stop_reason.as_deref(),
                (status == Failed).then_some("authorization_revoked")
            );
            let mut p = new_plan(&NewMove {
                handle: "mv_1".into(),
                source: "dlq".into(),
                destination: None,
                max_per_second: Some(3),
                to_move: 3,
                owner_id: "anonymous".into(),
                owner_name: "anonymous".into(),
                runner: "a".into(),
                runner_until: Timestamp(10),
                now: Timestamp(0),
            });
            assert_eq!((p.kind, p.items), (PlanKind::SqsMove, 0));
            assert_eq!(p.destination, MOVE_TO_SOURCE);
            p.m = m;
            assert_eq!(part(&p).unwrap(), t);
        }
        let mut p = new_plan(&NewMove {
            handle: "mv_1".into(),
            source: "dlq".into(),
            destination: Some("dest".into()),
            max_per_second: None,
            to_move: 0,
            owner_id: "anonymous".into(),
            owner_name: "anonymous".into(),
            runner: "a".into(),
            runner_until: Timestamp(10),
            now: Timestamp(0),
        });
        assert_eq!(part(&p).unwrap().destination.as_deref(), Some("dest"));
        p.m.status = PlanStatus::Paused;
        assert!(part(&p).is_err());
        p.m.status = PlanStatus::Running;
        p.kind = PlanKind::Cases;
        assert!(part(&p).is_err());
        // A row written before the state held the runner reads it from the columns.
        let mut s = json!({"moved": 1, "to_move": 2, "next_item_ms": null, "failure_reason": null});
        read_runner(&mut s, Some("n".into()), Some(Timestamp(9))).unwrap();
        assert_eq!(
            (s["runner"].as_str(), s["runner_until"].as_i64()),
            (Some("n"), Some(9))
        );
    }
}
