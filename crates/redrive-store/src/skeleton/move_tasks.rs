//! Message move task rows: decoding, and the rules of their writes (which progress a
//! runner may write, a cancel request, a claim of an orphan).
//!
//! The one-active-task-per-source rule is a partial unique index on `source` over the
//! active statuses, in both schemas: a create inserts with `ON CONFLICT (source) WHERE
//! status IN ('RUNNING', 'CANCELLING') DO NOTHING`, so that two nodes starting a task of
//! one source at once cannot both succeed (the second inserts nothing and is told
//! `MoveTaskRunning`).

use redrive_core::Timestamp;

use super::columns::{Columns, after, bad_value};
use crate::StoreResult;
use crate::{MAX_MOVE_TASK_PAGE, MoveTaskProgress, MoveTaskRecord, MoveTaskStatus, StoreError};

/// Reads [`columns!(move_task)`](crate::columns).
pub fn decode(c: &impl Columns) -> StoreResult<MoveTaskRecord> {
    let rate = c
        .int_opt(3)?
        .map(|r| u32::try_from(r).map_err(|e| bad_value("move_tasks.max_per_second", e)))
        .transpose()?;
    Ok(MoveTaskRecord {
        handle: c.text(0)?,
        source: c.text(1)?,
        destination: c.text_opt(2)?,
        max_per_second: rate,
        status: c.parse(4, "move_tasks.status")?,
        moved: c.unsigned(5, "move_tasks.moved")?,
        to_move: c.unsigned(6, "move_tasks.to_move")?,
        failure_reason: c.text_opt(7)?,
        owner_id: c.text(8)?,
        owner_name: c.text(9)?,
        started_at: c.time(10)?,
        updated_at: c.time(11)?,
        runner: c.text_opt(12)?,
        runner_until: c.time_opt(13)?,
    })
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
        }
    }

    fn step(status: MoveTaskStatus, moved: u64) -> MoveTaskProgress {
        MoveTaskProgress {
            status,
            moved,
            failure_reason: Some("why".into()),
            runner_until: Some(Timestamp(50)),
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
}
