//! Message move tasks: one active task per source, a cancel request, progress written by
//! the runner only, the claim of an orphan once its heartbeat passed, and the retention
//! of the most recent finished tasks per source. A move task is a replay plan of kind
//! `sqs_move`, read and written through the plan methods (`redrive_store::move_plans`
//! composes them): listed with the other plans, its budget and progress in its spec and
//! state, and no concern of the `cases` plans over the same queue.

use redrive_store::skeleton::move_tasks::new_plan;
use redrive_store::{
    MOVE_TASKS_KEPT_PER_SOURCE, MOVE_TO_SOURCE, MovePart, MoveTaskProgress, MoveTaskStatus,
    NewMove, PlanItemQuery, PlanItemRecord, PlanItemState, PlanKind, PlanMut, PlanQuery,
    PlanStatus, ReplayPlanRecord, ReplayPlanUpdate, move_plans,
};
use serde_json::json;

use super::prelude::*;

fn task(handle: &str, source: &str, runner: &str, started: Timestamp) -> NewMove {
    NewMove {
        handle: handle.to_owned(),
        source: source.to_owned(),
        destination: Some("dest".to_owned()),
        max_per_second: Some(5),
        to_move: 7,
        owner_id: "tok_0000000000000001".to_owned(),
        owner_name: "mover".to_owned(),
        runner: runner.to_owned(),
        runner_until: Timestamp(started.0 + 30_000),
        now: started,
    }
}

fn step(status: MoveTaskStatus, moved: u64, until: Option<Timestamp>) -> MoveTaskProgress {
    MoveTaskProgress {
        status,
        moved,
        failure_reason: None,
        runner_until: until,
        next_slot: None,
    }
}

/// The move-specific part of a move plan.
fn mv(p: &ReplayPlanRecord) -> MovePart {
    p.move_part().unwrap()
}

async fn handles(t: &TestStore, source: &str, limit: u32) -> Vec<String> {
    move_plans::list(t.s(), source, limit)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect()
}

pub async fn one_move_task_is_active_per_source_and_tasks_round_trip(t: &TestStore) {
    let a = task("mv_a", "dlq", "node-1", secs(1));
    let a = new_plan(&a);
    assert_eq!(
        move_plans::create(t.s(), &task("mv_a", "dlq", "node-1", secs(1)))
            .await
            .unwrap(),
        a
    );
    assert_eq!(
        move_plans::get(t.s(), "mv_a").await.unwrap(),
        Some(a.clone())
    );
    assert_eq!(move_plans::get(t.s(), "mv_none").await.unwrap(), None);
    // Another task of the same source is refused, from any node, and not stored.
    assert_err!(
        move_plans::create(t.s(), &task("mv_b", "dlq", "node-2", secs(2))).await,
        StoreError::MoveTaskRunning { .. }
    );
    assert_eq!(move_plans::get(t.s(), "mv_b").await.unwrap(), None);
    // Another source is free; a cancelling task still holds its source.
    move_plans::create(t.s(), &task("mv_c", "other", "node-2", secs(2)))
        .await
        .unwrap();
    move_plans::cancel(t.s(), "mv_a", secs(3)).await.unwrap();
    assert_err!(
        move_plans::create(t.s(), &task("mv_b", "dlq", "node-2", secs(4))).await,
        StoreError::MoveTaskRunning { .. }
    );
    // Once it ended, a new task of the source may start; the listing is newest first.
    move_plans::progress(
        t.s(),
        "mv_a",
        "node-1",
        &step(MoveTaskStatus::Running, 1, None),
        secs(5),
    )
    .await
    .unwrap()
    .unwrap();
    let ended = move_plans::progress(
        t.s(),
        "mv_a",
        "node-1",
        &step(MoveTaskStatus::Completed, 1, None),
        secs(5),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(mv(&ended).status, MoveTaskStatus::Cancelled);
    // Same start time: creation order decides.
    move_plans::create(t.s(), &task("mv_b", "dlq", "node-2", secs(1)))
        .await
        .unwrap();
    assert_eq!(handles(t, "dlq", 10).await, ["mv_b", "mv_a"]);
    assert_eq!(handles(t, "dlq", 1).await, ["mv_b"]);
    assert_eq!(handles(t, "other", 10).await, ["mv_c"]);
    assert!(handles(t, "nothing", 10).await.is_empty());
}

pub async fn a_move_task_cancel_is_asked_of_a_running_task_only(t: &TestStore) {
    move_plans::create(t.s(), &task("mv_a", "dlq", "node-1", secs(1)))
        .await
        .unwrap();
    assert_err!(
        move_plans::cancel(t.s(), "mv_none", secs(2)).await,
        StoreError::MoveTaskNotFound { .. }
    );
    let c = move_plans::cancel(t.s(), "mv_a", secs(2)).await.unwrap();
    assert_eq!(
        (mv(&c).status, c.m.updated_at),
        (MoveTaskStatus::Cancelling, secs(2))
    );
    assert_eq!(mv(&c).runner.as_deref(), Some("node-1"));
    assert_err!(
        move_plans::cancel(t.s(), "mv_a", secs(3)).await,
        StoreError::MoveTaskNotRunning { .. }
    );
    // The runner's progress does not undo the request: it sees it in what it wrote.
    let seen = move_plans::progress(
        t.s(),
        "mv_a",
        "node-1",
        &step(MoveTaskStatus::Running, 2, Some(secs(40))),
        secs(4),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        (mv(&seen).status, mv(&seen).moved),
        (MoveTaskStatus::Cancelling, 2)
    );
    let ended = move_plans::progress(
        t.s(),
        "mv_a",
        "node-1",
        &step(MoveTaskStatus::Cancelled, 2, None),
        secs(5),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(mv(&ended).status, MoveTaskStatus::Cancelled);
    assert_err!(
        move_plans::cancel(t.s(), "mv_a", secs(6)).await,
        StoreError::MoveTaskNotRunning { .. }
    );
}

pub async fn move_task_progress_is_written_by_its_runner_only(t: &TestStore) {
    move_plans::create(t.s(), &task("mv_a", "dlq", "node-1", secs(1)))
        .await
        .unwrap();
    assert_eq!(
        move_plans::progress(
            t.s(),
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
        move_plans::progress(
            t.s(),
            "mv_none",
            "node-1",
            &step(MoveTaskStatus::Running, 5, None),
            secs(2),
        )
        .await
        .unwrap(),
        None
    );
    let w = move_plans::progress(
        t.s(),
        "mv_a",
        "node-1",
        &step(MoveTaskStatus::Running, 3, Some(secs(60))),
        secs(2),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        (mv(&w).moved, mv(&w).runner_until, w.m.updated_at),
        (3, Some(secs(60)), secs(2))
    );
    assert_eq!(move_plans::get(t.s(), "mv_a").await.unwrap(), Some(w));
    let failed = move_plans::progress(
        t.s(),
        "mv_a",
        "node-1",
        &MoveTaskProgress {
            status: MoveTaskStatus::Failed,
            moved: 4,
            failure_reason: Some("authorization_revoked".to_owned()),
            runner_until: None,
            next_slot: None,
        },
        secs(3),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        (
            mv(&failed).status,
            mv(&failed).failure_reason.as_deref(),
            mv(&failed).runner
        ),
        (MoveTaskStatus::Failed, Some("authorization_revoked"), None)
    );
    // A finished task is written no more.
    assert_eq!(
        move_plans::progress(
            t.s(),
            "mv_a",
            "node-1",
            &step(MoveTaskStatus::Running, 9, Some(secs(90))),
            secs(4),
        )
        .await
        .unwrap(),
        None
    );
    assert_eq!(
        move_plans::get(t.s(), "mv_a")
            .await
            .unwrap()
            .map(|p| mv(&p).moved),
        Some(4)
    );
}

pub async fn an_orphaned_move_task_is_claimed_once_its_heartbeat_passed(t: &TestStore) {
    // Heartbeats until 31 s and 32 s; a finished task is never claimed.
    move_plans::create(t.s(), &task("mv_a", "a", "node-1", secs(1)))
        .await
        .unwrap();
    move_plans::create(t.s(), &task("mv_b", "b", "node-1", secs(2)))
        .await
        .unwrap();
    move_plans::create(t.s(), &task("mv_c", "c", "node-1", secs(3)))
        .await
        .unwrap();
    move_plans::progress(
        t.s(),
        "mv_c",
        "node-1",
        &step(MoveTaskStatus::Completed, 7, None),
        secs(3),
    )
    .await
    .unwrap()
    .unwrap();
    move_plans::cancel(t.s(), "mv_b", secs(4)).await.unwrap();
    assert!(
        move_plans::claim(t.s(), "node-2", 30_000, Timestamp(secs(31).0 - 1), 10)
            .await
            .unwrap()
            .is_empty(),
        "no heartbeat has passed"
    );
    let first = move_plans::claim(t.s(), "node-2", 30_000, secs(31), 10)
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].id, "mv_a");
    assert_eq!(
        (mv(&first[0]).runner.as_deref(), mv(&first[0]).runner_until),
        (Some("node-2"), Some(secs(61)))
    );
    // The old runner lost it: its progress is refused.
    assert_eq!(
        move_plans::progress(
            t.s(),
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
    let later = move_plans::claim(t.s(), "node-3", 30_000, secs(100), 1)
        .await
        .unwrap();
    assert_eq!(later.len(), 1);
    assert_eq!(later[0].id, "mv_a", "oldest first");
    let rest = move_plans::claim(t.s(), "node-3", 30_000, secs(100), 10)
        .await
        .unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(
        (rest[0].id.as_str(), mv(&rest[0]).status),
        ("mv_b", MoveTaskStatus::Cancelling)
    );
    // A runner that let its task go (no heartbeat) leaves it claimable at once.
    move_plans::progress(
        t.s(),
        "mv_b",
        "node-3",
        &step(MoveTaskStatus::Running, 0, None),
        secs(101),
    )
    .await
    .unwrap()
    .unwrap();
    let again = move_plans::claim(t.s(), "node-1", 30_000, secs(101), 10)
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].id, "mv_b");
}

pub async fn only_the_most_recent_finished_move_tasks_of_a_source_are_kept(t: &TestStore) {
    let n = MOVE_TASKS_KEPT_PER_SOURCE + 2;
    for i in 0..n {
        let handle = format!("mv_{i:02}");
        let started = secs(i64::try_from(i).unwrap() + 1);
        move_plans::create(t.s(), &task(&handle, "dlq", "node-1", started))
            .await
            .unwrap();
        move_plans::progress(
            t.s(),
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
    move_plans::create(t.s(), &task("mv_other", "other", "node-1", secs(1)))
        .await
        .unwrap();
    let kept = handles(t, "dlq", 100).await;
    let expected: Vec<String> = (2..n).rev().map(|i| format!("mv_{i:02}")).collect();
    assert_eq!(kept, expected);
    assert_eq!(move_plans::get(t.s(), "mv_00").await.unwrap(), None);
    // A running task is kept beside ten finished ones.
    move_plans::create(t.s(), &task("mv_run", "dlq", "node-1", secs(100)))
        .await
        .unwrap();
    assert_eq!(
        handles(t, "dlq", 100).await.len(),
        MOVE_TASKS_KEPT_PER_SOURCE + 1
    );
    assert_eq!(handles(t, "other", 100).await, ["mv_other"]);
}

/// A running `cases` plan over `queue` with one waiting item.
fn cases_plan(id: &str, queue: &str) -> (ReplayPlanRecord, Vec<PlanItemRecord>) {
    let plan = ReplayPlanRecord {
        id: id.to_owned(),
        kind: PlanKind::Cases,
        queue: queue.to_owned(),
        destination: queue.to_owned(),
        owner_id: "tok_0000000000000001".to_owned(),
        owner_name: "replayer".to_owned(),
        spec: json!({"budget": {"items_per_s": 1.0}}),
        items: 1,
        created_at: secs(1),
        version: 1,
        m: PlanMut {
            status: PlanStatus::Running,
            owner_until: secs(3_600),
            stop_reason: None,
            next_at: Some(secs(1)),
            state: json!({"admitted": 0}),
            updated_at: secs(1),
        },
    };
    let items = vec![PlanItemRecord {
        seq: 0,
        case_id: format!("case_{id}"),
        bytes: 10,
        state: PlanItemState::Waiting,
        window: None,
        message_id: None,
        detail: None,
        updated_at: secs(1),
    }];
    (plan, items)
}

async fn plans_of(t: &TestStore, kinds: Vec<PlanKind>) -> Vec<ReplayPlanRecord> {
    t.s()
        .list_replay_plans(&PlanQuery {
            kinds,
            ..PlanQuery::default()
        })
        .await
        .unwrap()
}

pub async fn a_move_task_is_listed_as_an_sqs_move_plan_with_its_budget_and_progress(t: &TestStore) {
    let a = task("mv_a", "dlq", "node-1", secs(1));
    move_plans::create(t.s(), &a).await.unwrap();
    let back = NewMove {
        destination: None,
        max_per_second: None,
        ..task("mv_b", "other", "node-1", secs(2))
    };
    move_plans::create(t.s(), &back).await.unwrap();
    let (c, items) = cases_plan("plan_c", "dlq");
    t.s().create_replay_plan(&c, &items).await.unwrap();
    let written = move_plans::progress(
        t.s(),
        "mv_a",
        "node-1",
        &MoveTaskProgress {
            next_slot: Some(Timestamp(secs(3).0 + 200)),
            ..step(MoveTaskStatus::Running, 3, Some(secs(33)))
        },
        secs(3),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(mv(&written).next_slot, Some(Timestamp(secs(3).0 + 200)));
    // Listed with the other plans, by kind.
    let all: Vec<(String, PlanKind)> = plans_of(t, Vec::new())
        .await
        .into_iter()
        .map(|p| (p.id, p.kind))
        .collect();
    assert_eq!(
        all,
        [
            ("mv_a".to_owned(), PlanKind::SqsMove),
            ("mv_b".to_owned(), PlanKind::SqsMove),
            ("plan_c".to_owned(), PlanKind::Cases)
        ]
    );
    let cases = plans_of(t, vec![PlanKind::Cases]).await;
    assert_eq!(cases, vec![c]);
    let moves = plans_of(t, vec![PlanKind::SqsMove]).await;
    assert_eq!(moves.len(), 2);
    let p = &moves[0];
    assert_eq!(
        (
            p.id.as_str(),
            p.queue.as_str(),
            p.destination.as_str(),
            p.m.status,
            p.items
        ),
        ("mv_a", "dlq", "dest", PlanStatus::Running, 0)
    );
    assert_eq!(
        (p.owner_id.as_str(), p.owner_name.as_str()),
        ("tok_0000000000000001", "mover")
    );
    assert_eq!(p.created_at, secs(1));
    assert_eq!(p.m.updated_at, secs(3));
    // The budget in the spec, the progress and the pacing in the runner state.
    assert_eq!(p.spec["max_per_second"], json!(5));
    assert_eq!(p.m.state["moved"], json!(3));
    assert_eq!(p.m.state["to_move"], json!(7));
    assert_eq!(p.m.state["next_item_ms"], json!(secs(3).0 + 200));
    assert_eq!(t.s().get_replay_plan("mv_a").await.unwrap(), *p);
    // Its writes are plan updates on the version read: one on an older version (a write
    // that met a cancel, a claim or its runner's progress) writes nothing.
    let stale = t
        .s()
        .update_replay_plan(&ReplayPlanUpdate {
            id: "mv_a".to_owned(),
            version: p.version - 1,
            set: PlanMut {
                status: PlanStatus::Cancelling,
                ..p.m.clone()
            },
            items: Vec::new(),
        })
        .await;
    assert_err!(stale, StoreError::ReplayPlanChanged { .. });
    assert_eq!(t.s().get_replay_plan("mv_a").await.unwrap(), *p);
    // The runner's columns read back in its state.
    assert_eq!(p.m.state["runner"], json!("node-1"));
    assert_eq!(p.m.state["runner_until"], json!(secs(33).0));
    // Each message back to its source, and no rate named.
    let b = &moves[1];
    assert_eq!(b.destination, MOVE_TO_SOURCE);
    assert_eq!(b.spec["max_per_second"], json!(null));
    // A move plan holds no items; its cancel and its failure read as plan statuses.
    assert!(
        t.s()
            .replay_plan_items("mv_a", &PlanItemQuery::default())
            .await
            .unwrap()
            .is_empty()
    );
    move_plans::cancel(t.s(), "mv_a", secs(4)).await.unwrap();
    assert_eq!(
        t.s().get_replay_plan("mv_a").await.unwrap().m.status,
        PlanStatus::Cancelling
    );
    move_plans::progress(
        t.s(),
        "mv_b",
        "node-1",
        &MoveTaskProgress {
            status: MoveTaskStatus::Failed,
            moved: 1,
            failure_reason: Some("authorization_revoked".to_owned()),
            runner_until: None,
            next_slot: None,
        },
        secs(5),
    )
    .await
    .unwrap()
    .unwrap();
    let failed = t.s().get_replay_plan("mv_b").await.unwrap();
    assert_eq!(
        (failed.m.status, failed.m.stop_reason.as_deref()),
        (PlanStatus::Stopped, Some("authorization_revoked"))
    );
    assert_eq!(failed.m.state["moved"], json!(1));
    let stopped = t
        .s()
        .list_replay_plans(&PlanQuery {
            status: vec![PlanStatus::Stopped],
            kinds: vec![PlanKind::SqsMove],
            ..PlanQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(stopped, vec![failed]);
}

pub async fn a_second_active_move_task_is_refused_while_cases_plans_of_the_queue_are_not_affected(
    t: &TestStore,
) {
    let (c, items) = cases_plan("plan_c", "dlq");
    t.s().create_replay_plan(&c, &items).await.unwrap();
    move_plans::create(t.s(), &task("mv_a", "dlq", "node-1", secs(1)))
        .await
        .unwrap();
    assert_err!(
        move_plans::create(t.s(), &task("mv_b", "dlq", "node-2", secs(2))).await,
        StoreError::MoveTaskRunning { .. }
    );
    // Another cases plan over the queue is created, and the first one advanced, while the
    // move task is active.
    let (d, items) = cases_plan("plan_d", "dlq");
    t.s().create_replay_plan(&d, &items).await.unwrap();
    let advanced = t
        .s()
        .update_replay_plan(&ReplayPlanUpdate {
            id: "plan_c".to_owned(),
            version: 1,
            set: PlanMut {
                status: PlanStatus::Paused,
                updated_at: secs(3),
                ..c.m.clone()
            },
            items: Vec::new(),
        })
        .await
        .unwrap();
    assert_eq!(advanced.m.status, PlanStatus::Paused);
    // The move tasks of the queue are its move plans only.
    assert_eq!(handles(t, "dlq", 10).await, ["mv_a"]);
    assert_eq!(move_plans::get(t.s(), "plan_c").await.unwrap(), None);
    assert_err!(
        move_plans::cancel(t.s(), "plan_c", secs(3)).await,
        StoreError::MoveTaskNotFound { .. }
    );
    // No cases plan is claimed, and the retention of finished tasks spares them.
    let claimed = move_plans::claim(t.s(), "node-2", 30_000, secs(1_000), 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, "mv_a");
    for i in 0..MOVE_TASKS_KEPT_PER_SOURCE + 1 {
        let handle = if i == 0 {
            "mv_a".to_owned()
        } else {
            let h = format!("mv_{i:02}");
            move_plans::create(
                t.s(),
                &task(&h, "dlq", "node-2", secs(1_000 + i64::try_from(i).unwrap())),
            )
            .await
            .unwrap();
            h
        };
        move_plans::progress(
            t.s(),
            &handle,
            "node-2",
            &step(MoveTaskStatus::Completed, 0, None),
            secs(2_000),
        )
        .await
        .unwrap()
        .unwrap();
    }
    assert_eq!(
        handles(t, "dlq", 100).await.len(),
        MOVE_TASKS_KEPT_PER_SOURCE
    );
    let cases: Vec<String> = plans_of(t, vec![PlanKind::Cases])
        .await
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(cases, ["plan_c", "plan_d"]);
}
