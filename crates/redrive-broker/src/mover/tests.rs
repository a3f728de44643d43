//! The mover's tests: tasks across nodes, shutdown and resume, pacing, cancel, each
//! message back to its source, failures and revocation.

use std::sync::Arc;
use std::time::Duration;

use redrive_core::{ManualClock, QueuePolicy, Timestamp};
use redrive_store_sqlite::{SqliteOptions, SqliteStore};

use redrive_core::message::DEAD_LETTER_SOURCE_PROPERTY;
use redrive_store::{MovePart, MoveTaskStatus, NewMove, move_plans};

use super::spec::{MoveError, MoveSpec, MoveStatus, MoveTask, is_move_task_handle};
use super::*;
use crate::{Actor, Broker, BrokerError, Outgoing, ReceiveOptions, Settle};

struct Fixture {
    broker: Broker,
    clock: ManualClock,
    _dir: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn redrive_store::Store> =
        Arc::new(SqliteStore::open(&dir.path().join("r.db"), SqliteOptions::default()).unwrap());
    let clock = ManualClock::new(Timestamp(1_800_000_000_000));
    let broker = Broker::new(store, Arc::new(clock.clone()));
    Fixture {
        broker,
        clock,
        _dir: dir,
    }
}

async fn fill(b: &Broker, queue: &str, n: usize) {
    let msgs = (0..n)
        .map(|i| Outgoing {
            body: format!("m{i}").into_bytes(),
            ..Outgoing::default()
        })
        .collect();
    b.send(queue, msgs).await.unwrap();
}

/// The move-specific part of task `handle` as stored.
async fn part_of(store: &dyn redrive_store::Store, handle: &str) -> MovePart {
    move_plans::get(store, handle)
        .await
        .unwrap()
        .unwrap()
        .move_part()
        .unwrap()
}

async fn count(b: &Broker, queue: &str) -> u64 {
    b.get_queue(queue).await.unwrap().counts.messages()
}

async fn task(b: &Broker, source: &str) -> MoveTask {
    b.list_move_tasks(source, 1).await.unwrap().pop().unwrap()
}

/// Waits (yielding, bounded) until the newest task of `source` satisfies `ok`: a
/// signal, not a timing rule.
async fn until_task(b: &Broker, source: &str, mut ok: impl FnMut(&MoveTask) -> bool) -> MoveTask {
    for _ in 0..10_000 {
        let t = task(b, source).await;
        if ok(&t) {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("condition never held");
}

/// Waits until the task has moved `n` and sleeps on the clock for its next second.
async fn parked_at(f: &Fixture, source: &str, n: u64) {
    for _ in 0..10_000 {
        if task(&f.broker, source).await.moved == n && f.clock.sleepers() == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("the task never parked at {n}");
}

/// Another broker (node) over the fixture's store and clock.
fn other_node(f: &Fixture) -> Broker {
    Broker::new(f.broker.inner.store.clone(), Arc::new(f.clock.clone()))
}

fn rate_one() -> MoveSpec {
    MoveSpec {
        source: "dlq".to_owned(),
        destination: Some("dest".to_owned()),
        max_per_second: Some(1),
        owner: Actor::anonymous(),
    }
}

async fn dlq_and_dest(b: &Broker, n: usize) {
    b.create_queue("dlq", QueuePolicy::default()).await.unwrap();
    b.create_queue("dest", QueuePolicy::default())
        .await
        .unwrap();
    fill(b, "dlq", n).await;
}

#[tokio::test]
async fn a_task_is_listed_and_cancelled_through_another_node() {
    let f = fixture().await;
    let (b, b2) = (&f.broker, &other_node(&f));
    dlq_and_dest(b, 3).await;
    let t = b.start_move_task(rate_one()).await.unwrap();
    parked_at(&f, "dlq", 1).await;
    let seen = b2.list_move_tasks("dlq", 10).await.unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (
            seen[0].handle.as_str(),
            seen[0].status,
            seen[0].moved,
            seen[0].to_move
        ),
        (t.handle.as_str(), MoveStatus::Running, 1, 3)
    );
    assert!(matches!(
        b2.start_move_task(rate_one()).await,
        Err(MoveError::AlreadyRunning(_))
    ));
    let c = b2
        .cancel_move_task(&t.handle, &Actor::anonymous())
        .await
        .unwrap();
    assert_eq!(c.status, MoveStatus::Cancelling);
    // The runner sees the request at its next batch, when its next second comes.
    assert_eq!(task(b, "dlq").await.status, MoveStatus::Cancelling);
    f.clock.advance(Duration::from_secs(1));
    let ended = until_task(b2, "dlq", |t| t.status == MoveStatus::Cancelled).await;
    assert_eq!(ended.moved, 1);
    f.clock.advance(Duration::from_secs(5));
    tokio::task::yield_now().await;
    assert_eq!(count(b, "dest").await, 1);
    assert_eq!(count(b, "dlq").await, 2);
    assert!(matches!(
        b2.cancel_move_task(&t.handle, &Actor::anonymous()).await,
        Err(MoveError::NotRunning(_))
    ));
}

#[tokio::test]
async fn a_task_let_go_at_shutdown_is_resumed_by_another_node_and_completes() {
    let f = fixture().await;
    let (b, b2) = (&f.broker, &other_node(&f));
    dlq_and_dest(b, 3).await;
    let t = b.start_move_task(rate_one()).await.unwrap();
    parked_at(&f, "dlq", 1).await;
    assert_eq!(
        b2.resume_move_tasks().await.unwrap(),
        0,
        "its runner's heartbeat holds it"
    );
    b.begin_shutdown();
    b.move_tasks_stopped().await;
    let store = b.inner.store.clone();
    let let_go = part_of(&*store, &t.handle).await;
    assert_eq!(let_go.runner_until, None, "let go at shutdown");
    assert_eq!((let_go.status, let_go.moved), (MoveTaskStatus::Running, 1));
    // A second later (the stopped runner's sleep went with it): the resumed runner is
    // the only sleeper.
    f.clock.advance(Duration::from_secs(1));
    assert_eq!(f.clock.sleepers(), 0);
    assert_eq!(b2.resume_move_tasks().await.unwrap(), 1);
    assert_eq!(
        part_of(&*store, &t.handle).await.runner.as_deref(),
        Some(b2.node_id())
    );
    parked_at(&f, "dlq", 2).await;
    f.clock.advance(Duration::from_secs(1));
    parked_at(&f, "dlq", 3).await;
    f.clock.advance(Duration::from_secs(1));
    let done = until_task(b2, "dlq", |t| t.status == MoveStatus::Completed).await;
    assert_eq!((done.moved, done.to_move), (3, 3));
    assert_eq!(count(b2, "dest").await, 3);
    assert_eq!(count(b2, "dlq").await, 0);
}

#[tokio::test]
async fn a_resumed_task_keeps_its_spacing_and_does_not_exceed_its_rate() {
    let f = fixture().await;
    let (b, b2) = (&f.broker, &other_node(&f));
    dlq_and_dest(b, 7).await;
    let t0 = b.now();
    let t = b
        .start_move_task(MoveSpec {
            max_per_second: Some(2),
            ..rate_one()
        })
        .await
        .unwrap();
    // Two at t0 (one batch, a second of the rate); the next two not before t0 + 1 s.
    parked_at(&f, "dlq", 2).await;
    b.begin_shutdown();
    b.move_tasks_stopped().await;
    let store = b.inner.store.clone();
    let let_go = part_of(&*store, &t.handle).await;
    assert_eq!(let_go.runner_until, None);
    assert_eq!(let_go.next_slot, Some(t0.plus_millis(1_000)));
    // The plan shows the task, its budget and its pacing state.
    let plan = store.get_replay_plan(&t.handle).await.unwrap();
    assert_eq!(plan.kind, redrive_store::PlanKind::SqsMove);
    assert_eq!(plan.m.state["next_item_ms"], t0.plus_millis(1_000).0);
    // Resumed on another node at the same instant: it waits for its slot (the stopped
    // runner's sleep went with it).
    assert_eq!(b2.resume_move_tasks().await.unwrap(), 1);
    let slot = t0.plus_millis(1_000);
    for _ in 0..10_000 {
        let now = part_of(&*store, &t.handle).await;
        if now.runner.as_deref() == Some(b2.node_id()) && f.clock.sleeping_until(slot) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(
        f.clock.sleeping_until(slot),
        "the resumed runner waits on the clock for its slot"
    );
    assert_eq!(task(b2, "dlq").await.moved, 2, "nothing more at t0");
    assert_eq!(count(b2, "dest").await, 2);
    f.clock.advance(Duration::from_millis(999));
    tokio::task::yield_now().await;
    assert_eq!(task(b2, "dlq").await.moved, 2, "nothing before t0 + 1 s");
    f.clock.advance(Duration::from_millis(1));
    parked_at(&f, "dlq", 4).await;
    assert_eq!(b2.now(), t0.plus_millis(1_000));
    assert_eq!(
        count(b2, "dest").await,
        4,
        "four in [t0, t0 + 1 s]: the rate kept"
    );
    f.clock.advance(Duration::from_secs(1));
    parked_at(&f, "dlq", 6).await;
    f.clock.advance(Duration::from_secs(1));
    let done = until_task(b2, "dlq", |t| t.status == MoveStatus::Completed).await;
    assert_eq!((done.moved, done.to_move), (7, 7));
}

#[tokio::test]
async fn a_task_without_a_rate_is_paced_at_the_highest_rate() {
    let f = fixture().await;
    let b = &f.broker;
    dlq_and_dest(b, 25).await;
    let t0 = b.now();
    b.start_move_task(MoveSpec {
        max_per_second: None,
        ..rate_one()
    })
    .await
    .unwrap();
    // A batch of ten at t0 holds the pacer for ten slots of 1/500 s.
    parked_at(&f, "dlq", 10).await;
    let stored = b.list_move_tasks("dlq", 1).await.unwrap();
    assert_eq!(stored[0].spec.max_per_second, None);
    let slot = part_of(&*b.inner.store, &stored[0].handle).await.next_slot;
    assert_eq!(slot, Some(t0.plus_millis(20)));
    f.clock.advance(Duration::from_millis(20));
    parked_at(&f, "dlq", 20).await;
    f.clock.advance(Duration::from_millis(20));
    // Five left: moved, and the source found empty without waiting for the next slot.
    let done = until_task(b, "dlq", |t| t.status == MoveStatus::Completed).await;
    assert_eq!(done.moved, 25);
    assert_eq!(b.now(), t0.plus_millis(40));
}

#[tokio::test]
async fn a_task_whose_runner_died_is_resumed_once_its_heartbeat_ran_out() {
    let f = fixture().await;
    let b = &f.broker;
    dlq_and_dest(b, 2).await;
    let now = b.now();
    let handle = format!("mv_{}", "0".repeat(32));
    move_plans::create(
        &*b.inner.store,
        &NewMove {
            handle: handle.clone(),
            source: "dlq".to_owned(),
            destination: Some("dest".to_owned()),
            max_per_second: None,
            to_move: 2,
            owner_id: "anonymous".to_owned(),
            owner_name: "anonymous".to_owned(),
            runner: "node-gone".to_owned(),
            runner_until: after(now, heartbeat_ms()),
            now,
        },
    )
    .await
    .unwrap();
    assert_eq!(b.resume_move_tasks().await.unwrap(), 0);
    f.clock.advance(MOVE_HEARTBEAT - Duration::from_millis(1));
    assert_eq!(b.resume_move_tasks().await.unwrap(), 0);
    f.clock.advance(Duration::from_millis(1));
    assert_eq!(b.resume_move_tasks().await.unwrap(), 1);
    let done = until_task(b, "dlq", |t| t.status == MoveStatus::Completed).await;
    assert_eq!((done.handle.as_str(), done.moved), (handle.as_str(), 2));
    assert_eq!(count(b, "dest").await, 2);
    // A finished task is never resumed.
    f.clock.advance(MOVE_HEARTBEAT * 2);
    assert_eq!(b.resume_move_tasks().await.unwrap(), 0);
}

#[tokio::test]
async fn a_task_whose_owner_was_revoked_while_it_was_orphaned_fails_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn redrive_store::Store> =
        Arc::new(SqliteStore::open(&dir.path().join("r.db"), SqliteOptions::default()).unwrap());
    let clock = ManualClock::new(Timestamp(1_800_000_000_000));
    let node = || {
        Broker::with_access(
            store.clone(),
            Arc::new(clock.clone()),
            crate::AccessSettings {
                enabled: true,
                ..crate::AccessSettings::default()
            },
        )
    };
    let f = Fixture {
        broker: node(),
        clock: clock.clone(),
        _dir: dir,
    };
    let (b, b2) = (&f.broker, &node());
    dlq_and_dest(b, 3).await;
    let created = b
        .create_token(
            &Actor::system("test"),
            crate::TokenSpec {
                name: "mover".into(),
                grants: vec!["replayer".parse().unwrap()],
                ..crate::TokenSpec::default()
            },
        )
        .await
        .unwrap();
    let owner = b.authenticate(Some(&created.secret), None).await.unwrap();
    let t = b
        .start_move_task(MoveSpec {
            owner: owner.clone(),
            ..rate_one()
        })
        .await
        .unwrap();
    parked_at(&f, "dlq", 1).await;
    b.begin_shutdown();
    b.move_tasks_stopped().await;
    // The token is revoked on the other node while nobody runs the task.
    b2.revoke_token(&Actor::system("test"), &owner.id)
        .await
        .unwrap();
    assert_eq!(b2.resume_move_tasks().await.unwrap(), 0);
    let ended = task(b2, "dlq").await;
    assert_eq!(ended.handle, t.handle);
    assert_eq!(ended.status, MoveStatus::Failed);
    assert_eq!(ended.failure.as_deref(), Some(AUTHORIZATION_REVOKED));
    assert_eq!(ended.moved, 1);
    assert_eq!(count(b2, "dlq").await, 2);
}

#[tokio::test]
async fn the_rate_is_honoured_second_by_second_and_the_task_completes() {
    let f = fixture().await;
    let b = &f.broker;
    b.create_queue("dlq", QueuePolicy::default()).await.unwrap();
    b.create_queue("dest", QueuePolicy::default())
        .await
        .unwrap();
    fill(b, "dlq", 5).await;
    let started = b
        .start_move_task(MoveSpec {
            source: "dlq".to_owned(),
            destination: Some("dest".to_owned()),
            max_per_second: Some(2),
            owner: Actor::anonymous(),
        })
        .await
        .unwrap();
    assert_eq!(started.status, MoveStatus::Running);
    assert_eq!(started.to_move, 5);
    parked_at(&f, "dlq", 2).await;
    assert_eq!(count(b, "dest").await, 2);
    assert_eq!(count(b, "dlq").await, 3);
    f.clock.advance(Duration::from_secs(1));
    parked_at(&f, "dlq", 4).await;
    assert_eq!(count(b, "dest").await, 4);
    f.clock.advance(Duration::from_secs(1));
    until_task(b, "dlq", |t| t.status == MoveStatus::Completed).await;
    let t = task(b, "dlq").await;
    assert_eq!((t.moved, t.to_move), (5, 5));
    assert_eq!(count(b, "dest").await, 5);
    assert_eq!(count(b, "dlq").await, 0);
    assert!(matches!(
        b.cancel_move_task(&t.handle, &Actor::anonymous()).await,
        Err(MoveError::NotRunning(_))
    ));
}

#[test]
fn handles_have_one_shape() {
    assert!(is_move_task_handle(&format!("mv_{}", "0a".repeat(16))));
    for bad in [
        "",
        "mv_",
        "mv_unknown",
        &format!("mv_{}", "0A".repeat(16)),
        &format!("mv_{}", "0".repeat(31)),
        &format!("xx_{}", "0".repeat(32)),
    ] {
        assert!(!is_move_task_handle(bad), "{bad}");
    }
}

#[tokio::test]
async fn cancel_stops_the_task_and_one_task_runs_per_source() {
    let f = fixture().await;
    let b = &f.broker;
    b.create_queue("dlq", QueuePolicy::default()).await.unwrap();
    b.create_queue("dest", QueuePolicy::default())
        .await
        .unwrap();
    fill(b, "dlq", 3).await;
    let spec = MoveSpec {
        source: "dlq".to_owned(),
        destination: Some("dest".to_owned()),
        max_per_second: Some(1),
        owner: Actor::anonymous(),
    };
    let t = b.start_move_task(spec.clone()).await.unwrap();
    assert!(is_move_task_handle(&t.handle));
    parked_at(&f, "dlq", 1).await;
    assert!(matches!(
        b.start_move_task(spec.clone()).await,
        Err(MoveError::AlreadyRunning(_))
    ));
    let c = b
        .cancel_move_task(&t.handle, &Actor::anonymous())
        .await
        .unwrap();
    assert_eq!(c.status, MoveStatus::Cancelling);
    until_task(b, "dlq", |t| t.status == MoveStatus::Cancelled).await;
    f.clock.advance(Duration::from_secs(5));
    tokio::task::yield_now().await;
    assert_eq!(task(b, "dlq").await.moved, 1);
    assert_eq!(count(b, "dlq").await, 2);
    assert_eq!(count(b, "dest").await, 1);
    assert!(matches!(
        b.cancel_move_task("mv_unknown", &Actor::anonymous()).await,
        Err(MoveError::NotFound(_))
    ));
    // A new task may start once the old one ended; listed newest first.
    b.start_move_task(spec).await.unwrap();
    let both = b.list_move_tasks("dlq", 10).await.unwrap();
    assert_eq!(both.len(), 2);
    assert_eq!(both[1].handle, t.handle);
    assert!(matches!(
        b.start_move_task(MoveSpec {
            source: "dlq".to_owned(),
            destination: None,
            max_per_second: Some(501),
            owner: Actor::anonymous(),
        })
        .await,
        Err(MoveError::Broker(BrokerError::InvalidRequest { .. }))
    ));
}

#[tokio::test]
async fn without_destination_each_message_returns_to_its_source() {
    let f = fixture().await;
    let b = &f.broker;
    b.create_queue("dlq", QueuePolicy::default()).await.unwrap();
    let to_dlq = QueuePolicy {
        max_delivery_count: 1,
        dead_letter_queue: Some("dlq".parse().unwrap()),
        ..QueuePolicy::default()
    };
    for q in ["a", "b"] {
        b.create_queue(q, to_dlq.clone()).await.unwrap();
        fill(b, q, 1).await;
        let d = b
            .receive(
                q,
                ReceiveOptions {
                    max: 1,
                    ..ReceiveOptions::default()
                },
            )
            .await
            .unwrap();
        b.settle(
            q,
            vec![(d[0].lock_token.parse(), Settle::Abandon { delay_ms: None })],
        )
        .await
        .unwrap();
    }
    assert_eq!(count(b, "dlq").await, 2);
    b.start_move_task(MoveSpec {
        source: "dlq".to_owned(),
        destination: None,
        max_per_second: None,
        owner: Actor::anonymous(),
    })
    .await
    .unwrap();
    until_task(b, "dlq", |t| t.status == MoveStatus::Completed).await;
    assert_eq!(task(b, "dlq").await.moved, 2);
    for q in ["a", "b"] {
        let back = b.peek(q, 1, 10, &Actor::anonymous()).await.unwrap();
        assert_eq!(back.len(), 1, "{q} got its message back");
        assert!(!back[0].properties.contains_key(DEAD_LETTER_SOURCE_PROPERTY));
    }
    assert_eq!(count(b, "dlq").await, 0);
}

#[tokio::test]
async fn a_message_without_a_source_fails_the_task_and_stays() {
    let f = fixture().await;
    let b = &f.broker;
    b.create_queue("dlq", QueuePolicy::default()).await.unwrap();
    fill(b, "dlq", 1).await;
    b.start_move_task(MoveSpec {
        source: "dlq".to_owned(),
        destination: None,
        max_per_second: None,
        owner: Actor::anonymous(),
    })
    .await
    .unwrap();
    until_task(b, "dlq", |t| t.status == MoveStatus::Failed).await;
    assert!(task(b, "dlq").await.failure.unwrap().contains("source"));
    assert_eq!(b.get_queue("dlq").await.unwrap().counts.active, 1);
}

#[tokio::test]
async fn revoking_the_owners_token_stops_the_task_with_authorization_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn redrive_store::Store> =
        Arc::new(SqliteStore::open(&dir.path().join("r.db"), SqliteOptions::default()).unwrap());
    let clock = ManualClock::new(Timestamp(1_800_000_000_000));
    let f = Fixture {
        broker: Broker::with_access(
            store,
            Arc::new(clock.clone()),
            crate::AccessSettings {
                enabled: true,
                ..crate::AccessSettings::default()
            },
        ),
        clock,
        _dir: dir,
    };
    let b = &f.broker;
    b.create_queue("dlq", QueuePolicy::default()).await.unwrap();
    b.create_queue("dest", QueuePolicy::default())
        .await
        .unwrap();
    fill(b, "dlq", 3).await;
    let created = b
        .create_token(
            &Actor::system("test"),
            crate::TokenSpec {
                name: "mover".into(),
                grants: vec!["replayer".parse().unwrap()],
                ..crate::TokenSpec::default()
            },
        )
        .await
        .unwrap();
    let owner = b.authenticate(Some(&created.secret), None).await.unwrap();
    let t = b
        .start_move_task(MoveSpec {
            source: "dlq".to_owned(),
            destination: Some("dest".to_owned()),
            max_per_second: Some(1),
            owner: owner.clone(),
        })
        .await
        .unwrap();
    parked_at(&f, "dlq", 1).await;
    b.revoke_token(&Actor::system("test"), &owner.id)
        .await
        .unwrap();
    until_task(b, "dlq", |t| t.status == MoveStatus::Failed).await;
    let ended = task(b, "dlq").await;
    assert_eq!(ended.failure.as_deref(), Some(AUTHORIZATION_REVOKED));
    assert_eq!(ended.moved, 1);
    // Nothing more moves, whatever the clock does.
    f.clock.advance(Duration::from_secs(5));
    tokio::task::yield_now().await;
    assert_eq!(count(b, "dest").await, 1);
    assert_eq!(count(b, "dlq").await, 2);
    // The task's end is audited just after its status changes: wait for the entry.
    let mut log = Vec::new();
    for _ in 0..10_000 {
        log = b
            .list_audit(&redrive_store::AuditQuery {
                actor_id: Some(owner.id.clone()),
                limit: 100,
                ..redrive_store::AuditQuery::default()
            })
            .await
            .unwrap();
        if log.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let acts: Vec<(&str, &str)> = log
        .iter()
        .map(|e| (e.fields.action.as_str(), e.fields.outcome.as_str()))
        .collect();
    assert_eq!(
        acts,
        [("move_task.start", "ok"), ("move_task.end", "failed")]
    );
    assert!(log[1].fields.targets.contains(&t.handle));
    assert!(
        log[1]
            .fields
            .targets
            .contains(&format!("failure={AUTHORIZATION_REVOKED}"))
    );
}
