//! Message move tasks: one active task per source, a cancel request, progress written by
//! the runner only, the claim of an orphan once its heartbeat passed, and the retention
//! of the most recent finished tasks per source.

use redrive_store::{MOVE_TASKS_KEPT_PER_SOURCE, MoveTaskProgress, MoveTaskRecord, MoveTaskStatus};

use super::prelude::*;

fn task(handle: &str, source: &str, runner: &str, started: Timestamp) -> MoveTaskRecord {
    MoveTaskRecord {
        handle: handle.to_owned(),
        source: source.to_owned(),
        destination: Some("dest".to_owned()),
        max_per_second: Some(5),
        status: MoveTaskStatus::Running,
        moved: 0,
        to_move: 7,
        failure_reason: None,
        owner_id: "tok_0000000000000001".to_owned(),
        owner_name: "mover".to_owned(),
        started_at: started,
        updated_at: started,
        runner: Some(runner.to_owned()),
        runner_until: Some(Timestamp(started.0 + 30_000)),
    }
}

fn step(status: MoveTaskStatus, moved: u64, until: Option<Timestamp>) -> MoveTaskProgress {
    MoveTaskProgress {
        status,
        moved,
        failure_reason: None,
        runner_until: until,
    }
}

async fn handles(t: &TestStore, source: &str, limit: u32) -> Vec<String> {
    t.s()
        .list_move_tasks(source, limit)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.handle)
        .collect()
}

pub async fn one_move_task_is_active_per_source_and_tasks_round_trip(t: &TestStore) {
    let a = task("mv_a", "dlq", "node-1", secs(1));
    assert_eq!(t.s().create_move_task(&a).await.unwrap(), a);
    assert_eq!(t.s().get_move_task("mv_a").await.unwrap(), Some(a.clone()));
    assert_eq!(t.s().get_move_task("mv_none").await.unwrap(), None);
    // Another task of the same source is refused, from any node, and not stored.
    assert_err!(
        t.s()
            .create_move_task(&task("mv_b", "dlq", "node-2", secs(2)))
            .await,
        StoreError::MoveTaskRunning { .. }
    );
    assert_eq!(t.s().get_move_task("mv_b").await.unwrap(), None);
    // Another source is free; a cancelling task still holds its source.
    t.s()
        .create_move_task(&task("mv_c", "other", "node-2", secs(2)))
        .await
        .unwrap();
    t.s().cancel_move_task("mv_a", secs(3)).await.unwrap();
    assert_err!(
        t.s()
            .create_move_task(&task("mv_b", "dlq", "node-2", secs(4)))
            .await,
        StoreError::MoveTaskRunning { .. }
    );
    // Once it ended, a new task of the source may start; the listing is newest first.
    t.s()
        .update_move_task(
            "mv_a",
            "node-1",
            &step(MoveTaskStatus::Running, 1, None),
            secs(5),
        )
        .await
        .unwrap()
        .unwrap();
    let ended = t
        .s()
        .update_move_task(
            "mv_a",
            "node-1",
            &step(MoveTaskStatus::Completed, 1, None),
            secs(5),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ended.status, MoveTaskStatus::Cancelled);
    // Same start time: creation order decides.
    t.s()
        .create_move_task(&task("mv_b", "dlq", "node-2", secs(1)))
        .await
        .unwrap();
    assert_eq!(handles(t, "dlq", 10).await, ["mv_b", "mv_a"]);
    assert_eq!(handles(t, "dlq", 1).await, ["mv_b"]);
    assert_eq!(handles(t, "other", 10).await, ["mv_c"]);
    assert!(handles(t, "nothing", 10).await.is_empty());
}

pub async fn a_move_task_cancel_is_asked_of_a_running_task_only(t: &TestStore) {
    t.s()
        .create_move_task(&task("mv_a", "dlq", "node-1", secs(1)))
        .await
        .unwrap();
    assert_err!(
        t.s().cancel_move_task("mv_none", secs(2)).await,
        StoreError::MoveTaskNotFound { .. }
    );
    let c = t.s().cancel_move_task("mv_a", secs(2)).await.unwrap();
    assert_eq!(
        (c.status, c.updated_at),
        (MoveTaskStatus::Cancelling, secs(2))
    );
    assert_eq!(c.runner.as_deref(), Some("node-1"));
    assert_err!(
        t.s().cancel_move_task("mv_a", secs(3)).await,
        StoreError::MoveTaskNotRunning { .. }
    );
    // The runner's progress does not undo the request: it sees it in what it wrote.
    let seen = t
        .s()
        .update_move_task(
            "mv_a",
            "node-1",
            &step(MoveTaskStatus::Running, 2, Some(secs(40))),
            secs(4),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((seen.status, seen.moved), (MoveTaskStatus::Cancelling, 2));
    let ended = t
        .s()
        .update_move_task(
            "mv_a",
            "node-1",
            &step(MoveTaskStatus::Cancelled, 2, None),
            secs(5),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ended.status, MoveTaskStatus::Cancelled);
    assert_err!(
        t.s().cancel_move_task("mv_a", secs(6)).await,
        StoreError::MoveTaskNotRunning { .. }
    );
}

pub async fn move_task_progress_is_written_by_its_runner_only(t: &TestStore) {
    t.s()
        .create_move_task(&task("mv_a", "dlq", "node-1", secs(1)))
        .await
        .unwrap();
    assert_eq!(
        t.s()
            .update_move_task(
                "mv_a",
                "node-2",
                &step(MoveTaskStatus::Running, 5, Some(secs(90))),
                secs(2),
            )
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        t.s()
            .update_move_task(
                "mv_none",
                "node-1",
                &step(MoveTaskStatus::Running, 5, None),
                secs(2),
            )
            .await
            .unwrap(),
        None
    );
    let w = t
        .s()
        .update_move_task(
            "mv_a",
            "node-1",
            &step(MoveTaskStatus::Running, 3, Some(secs(60))),
            secs(2),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (w.moved, w.runner_until, w.updated_at),
        (3, Some(secs(60)), secs(2))
    );
    assert_eq!(t.s().get_move_task("mv_a").await.unwrap(), Some(w));
    let failed = t
        .s()
        .update_move_task(
            "mv_a",
            "node-1",
            &MoveTaskProgress {
                status: MoveTaskStatus::Failed,
                moved: 4,
                failure_reason: Some("authorization_revoked".to_owned()),
                runner_until: None,
            },
            secs(3),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            failed.status,
            failed.failure_reason.as_deref(),
            failed.runner
        ),
        (MoveTaskStatus::Failed, Some("authorization_revoked"), None)
    );
    // A finished task is written no more.
    assert_eq!(
        t.s()
            .update_move_task(
                "mv_a",
                "node-1",
                &step(MoveTaskStatus::Running, 9, Some(secs(90))),
                secs(4),
            )
            .await
            .unwrap(),
        None
    );
    assert_eq!(t.s().get_move_task("mv_a").await.unwrap().unwrap().moved, 4);
}

pub async fn an_orphaned_move_task_is_claimed_once_its_heartbeat_passed(t: &TestStore) {
    // Heartbeats until 31 s and 32 s; a finished task is never claimed.
    t.s()
        .create_move_task(&task("mv_a", "a", "node-1", secs(1)))
        .await
        .unwrap();
    t.s()
        .create_move_task(&task("mv_b", "b", "node-1", secs(2)))
        .await
        .unwrap();
    t.s()
        .create_move_task(&task("mv_c", "c", "node-1", secs(3)))
        .await
        .unwrap();
    t.s()
        .update_move_task(
            "mv_c",
            "node-1",
            &step(MoveTaskStatus::Completed, 7, None),
            secs(3),
        )
        .await
        .unwrap()
        .unwrap();
    t.s().cancel_move_task("mv_b", secs(4)).await.unwrap();
    assert!(
        t.s()
            .claim_move_tasks("node-2", 30_000, Timestamp(secs(31).0 - 1), 10)
            .await
            .unwrap()
            .is_empty(),
        "no heartbeat has passed"
    );
    let first = t
        .s()
        .claim_move_tasks("node-2", 30_000, secs(31), 10)
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].handle, "mv_a");
    assert_eq!(
        (first[0].runner.as_deref(), first[0].runner_until),
        (Some("node-2"), Some(secs(61)))
    );
    // The old runner lost it: its progress is refused.
    assert_eq!(
        t.s()
            .update_move_task(
                "mv_a",
                "node-1",
                &step(MoveTaskStatus::Running, 1, Some(secs(70))),
                secs(31),
            )
            .await
            .unwrap(),
        None
    );
    // A cancelling orphan is claimed too (its new runner ends it); limits hold.
    let later = t
        .s()
        .claim_move_tasks("node-3", 30_000, secs(100), 1)
        .await
        .unwrap();
    assert_eq!(later.len(), 1);
    assert_eq!(later[0].handle, "mv_a", "oldest first");
    let rest = t
        .s()
        .claim_move_tasks("node-3", 30_000, secs(100), 10)
        .await
        .unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(
        (rest[0].handle.as_str(), rest[0].status),
        ("mv_b", MoveTaskStatus::Cancelling)
    );
    // A runner that let its task go (no heartbeat) leaves it claimable at once.
    t.s()
        .update_move_task(
            "mv_b",
            "node-3",
            &step(MoveTaskStatus::Running, 0, None),
            secs(101),
        )
        .await
        .unwrap()
        .unwrap();
    let again = t
        .s()
        .claim_move_tasks("node-1", 30_000, secs(101), 10)
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].handle, "mv_b");
}

pub async fn only_the_most_recent_finished_move_tasks_of_a_source_are_kept(t: &TestStore) {
    let n = MOVE_TASKS_KEPT_PER_SOURCE + 2;
    for i in 0..n {
        let handle = format!("mv_{i:02}");
        let started = secs(i64::try_from(i).unwrap() + 1);
        t.s()
            .create_move_task(&task(&handle, "dlq", "node-1", started))
            .await
            .unwrap();
        t.s()
            .update_move_task(
                &handle,
                "node-1",
                &step(MoveTaskStatus::Completed, 0, None),
                started,
            )
            .await
            .unwrap()
            .unwrap();
    }
    // Another source's tasks are not counted against this one.
    t.s()
        .create_move_task(&task("mv_other", "other", "node-1", secs(1)))
        .await
        .unwrap();
    let kept = handles(t, "dlq", 100).await;
    let expected: Vec<String> = (2..n).rev().map(|i| format!("mv_{i:02}")).collect();
    assert_eq!(kept, expected);
    assert_eq!(t.s().get_move_task("mv_00").await.unwrap(), None);
    // A running task is kept beside ten finished ones.
    t.s()
        .create_move_task(&task("mv_run", "dlq", "node-1", secs(100)))
        .await
        .unwrap();
    assert_eq!(
        handles(t, "dlq", 100).await.len(),
        MOVE_TASKS_KEPT_PER_SOURCE + 1
    );
    assert_eq!(handles(t, "other", 100).await, ["mv_other"]);
}
