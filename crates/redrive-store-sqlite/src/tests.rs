//! SQLite-specific behaviour: group commit, savepoint isolation, poisoning, busy handling,
//! migrations, close.

use std::path::PathBuf;
use std::sync::Arc;

use redrive_core::{EntityName, MessageState, QueuePolicy, Timestamp};
use redrive_store::{NewMessage, Store, StoreError, StoreErrorKind};

use super::*;

use redrive_store_conformance::{T0, name};

/// A plain message whose body is its id.
fn msg(id: &str) -> NewMessage {
    redrive_store_conformance::msg(id, id.as_bytes())
}

fn open(options: SqliteOptions) -> (tempfile::TempDir, PathBuf, Arc<SqliteStore>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("redrive.db");
    let store = Arc::new(SqliteStore::open(&path, options).unwrap());
    (dir, path, store)
}

async fn queue(store: &SqliteStore, q: &str, policy: QueuePolicy) -> EntityName {
    let n = name(q);
    store.create_queue(&n, &policy, T0).await.unwrap();
    n
}

/// Parks the writer thread between groups until the returned sender is dropped, so that
/// jobs pile up and are committed as one group.
fn hold_writer(store: &SqliteStore) -> std::sync::mpsc::Sender<()> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    store.writer.raw(move |_| {
        let _ = rx.recv();
    });
    tx
}

/// The message ids of queue `q` in sequence order, as a peek reads them.
async fn peeked_ids(store: &SqliteStore, q: &EntityName) -> Vec<String> {
    store
        .peek(q, 1, 10, T0)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.message_id)
        .collect()
}

/// Waits (by yielding, not sleeping) until `n` jobs in total have been submitted.
async fn submitted(store: &SqliteStore, n: usize) {
    while store.writer.counters().0 < n {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_enqueues_are_acknowledged_by_one_group_commit() {
    let (_dir, _path, store) = open(SqliteOptions::default());
    let q = queue(&store, "q", QueuePolicy::default()).await;
    let (jobs, commits) = store.writer.counters();
    let release = hold_writer(&store);
    let mut tasks = Vec::new();
    for i in 0..200 {
        let (s, q) = (Arc::clone(&store), q.clone());
        tasks.push(tokio::spawn(async move {
            s.enqueue(&q, vec![msg(&format!("m{i}"))], T0).await
        }));
    }
    submitted(&store, jobs + 200).await;
    drop(release);
    let mut seqs = Vec::new();
    for t in tasks {
        seqs.push(t.await.unwrap().unwrap()[0].sequence);
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=200).collect::<Vec<i64>>());
    assert_eq!(
        store.writer.counters().1,
        commits + 1,
        "one commit for all 200"
    );
    assert_eq!(store.peek(&q, 1, 1_000, T0).await.unwrap().len(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_batch_bounds_a_group() {
    let (_dir, _path, store) = open(SqliteOptions {
        max_batch: 10,
        readers: 1,
    });
    let q = queue(&store, "q", QueuePolicy::default()).await;
    let (jobs, commits) = store.writer.counters();
    let release = hold_writer(&store);
    let mut tasks = Vec::new();
    for i in 0..35 {
        let (s, q) = (Arc::clone(&store), q.clone());
        tasks.push(tokio::spawn(async move {
            s.enqueue(&q, vec![msg(&format!("m{i}"))], T0).await
        }));
    }
    submitted(&store, jobs + 35).await;
    drop(release);
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(store.writer.counters().1, commits + 4, "10 + 10 + 10 + 5");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_job_rolls_back_only_itself() {
    let (_dir, _path, store) = open(SqliteOptions::default());
    let q = queue(&store, "q", QueuePolicy::default()).await;
    let sq = queue(
        &store,
        "sessions",
        QueuePolicy {
            requires_session: true,
            ..QueuePolicy::default()
        },
    )
    .await;
    let (jobs, commits) = store.writer.counters();
    let release = hold_writer(&store);

    let s = Arc::clone(&store);
    let (q1, sq1) = (q.clone(), sq.clone());
    let group = tokio::spawn(async move {
        let ok1 = s.enqueue(&q1, vec![msg("a")], T0);
        let refused = s.enqueue(&sq1, vec![msg("no-session")], T0);
        // Writes, then fails: its writes must not survive.
        let half_done = s.writer.write({
            let q = q1.clone();
            move |tx| {
                queues::create(tx, &name("ghost"), &QueuePolicy::default(), T0)?;
                queues::update(
                    tx,
                    &q,
                    &QueuePolicy {
                        max_delivery_count: 1,
                        ..QueuePolicy::default()
                    },
                    None,
                    T0,
                )?;
                messages::enqueue(tx, &q, vec![msg("ghost-msg")], T0)?;
                Err::<(), _>(StoreError::LockLost)
            }
        });
        let panics = s.writer.write(|_tx| -> StoreResult<()> {
            panic!("a bug inside a job (expected in this test)")
        });
        let ok2 = s.enqueue(&q1, vec![msg("b")], T0);
        tokio::join!(ok1, refused, half_done, panics, ok2)
    });
    submitted(&store, jobs + 5).await;
    drop(release);
    let (ok1, refused, half_done, panics, ok2) = group.await.unwrap();

    assert_eq!(ok1.unwrap()[0].sequence, 1);
    assert!(matches!(refused, Err(StoreError::SessionRequired { .. })));
    assert!(matches!(half_done, Err(StoreError::LockLost)));
    match panics {
        Err(StoreError::Backend { source }) => assert!(matches!(
            source.downcast_ref::<SqliteError>(),
            Some(SqliteError::Panicked)
        )),
        other => panic!("expected a backend error, got {other:?}"),
    }
    assert_eq!(
        ok2.unwrap()[0].sequence,
        2,
        "the failed job's sequence was rolled back"
    );
    assert_eq!(store.writer.counters().1, commits + 1, "still one group");
    assert!(!store.is_poisoned());

    let ids = peeked_ids(&store, &q).await;
    assert_eq!(ids, ["a", "b"]);
    assert!(matches!(
        store.get_queue(&name("ghost")).await,
        Err(StoreError::QueueNotFound { .. })
    ));
    let rec = store.get_queue(&q).await.unwrap();
    assert_eq!(rec.policy_version, 1);
    // The writer's policy cache forgot the rolled-back update too.
    let cached = store
        .writer
        .write(move |tx| Ok(tx.queue(&q)?.version))
        .await
        .unwrap();
    assert_eq!(cached, 1);
}

/// The first job of a transaction runs without a savepoint: when it fails, the whole
/// transaction is rolled back and the next job of the group begins a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_first_job_rolls_back_only_itself() {
    let (_dir, _path, store) = open(SqliteOptions::default());
    let q = queue(&store, "q", QueuePolicy::default()).await;

    // Alone in its group.
    let lone = store
        .writer
        .write({
            let q = q.clone();
            move |tx| {
                messages::enqueue(tx, &q, vec![msg("lone-ghost")], T0)?;
                Err::<(), _>(StoreError::LockLost)
            }
        })
        .await;
    assert!(matches!(lone, Err(StoreError::LockLost)));

    // First of a group, followed by a failing job and a good one.
    let (jobs, commits) = store.writer.counters();
    let release = hold_writer(&store);
    let s = Arc::clone(&store);
    let q1 = q.clone();
    let group = tokio::spawn(async move {
        let first = s.writer.write({
            let q = q1.clone();
            move |tx| {
                queues::create(tx, &name("ghost"), &QueuePolicy::default(), T0)?;
                messages::enqueue(tx, &q, vec![msg("ghost-msg")], T0)?;
                Err::<(), _>(StoreError::LockLost)
            }
        });
        let second = s.writer.write(|_tx| -> StoreResult<()> {
            panic!("a bug inside a job (expected in this test)")
        });
        let ok = s.enqueue(&q1, vec![msg("a")], T0);
        tokio::join!(first, second, ok)
    });
    submitted(&store, jobs + 3).await;
    drop(release);
    let (first, second, ok) = group.await.unwrap();
    assert!(matches!(first, Err(StoreError::LockLost)));
    assert!(matches!(second, Err(StoreError::Backend { .. })));
    assert_eq!(
        ok.unwrap()[0].sequence,
        1,
        "both failed enqueues were rolled back"
    );
    assert_eq!(store.writer.counters().1, commits + 1);
    assert!(!store.is_poisoned());
    let ids = peeked_ids(&store, &q).await;
    assert_eq!(ids, ["a"]);
    assert!(matches!(
        store.get_queue(&name("ghost")).await,
        Err(StoreError::QueueNotFound { .. })
    ));
}

/// A job that decides its refusals before writing runs without a savepoint: refused, it
/// leaves the jobs around it in the group as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decided_job_refused_before_writing_leaves_its_group_whole() {
    let (_dir, _path, store) = open(SqliteOptions::default());
    let q = queue(&store, "q", QueuePolicy::default()).await;
    let (jobs, commits) = store.writer.counters();
    let release = hold_writer(&store);
    let s = Arc::clone(&store);
    let q1 = q.clone();
    let group = tokio::spawn(async move {
        let ok1 = s.enqueue(&q1, vec![msg("a")], T0);
        let refused = s.writer.write_decided(|tx| -> StoreResult<()> {
            tx.queue(&name("nowhere"))?;
            Ok(())
        });
        let received = s.writer.write_decided({
            let q = q1.clone();
            move |tx| {
                messages::receive(
                    tx,
                    ReceiveParams {
                        queue: q,
                        max: 10,
                        lock_ms: 30_000,
                        now: T0,
                        session: None,
                    },
                )
            }
        });
        let ok2 = s.enqueue(&q1, vec![msg("b")], T0);
        tokio::join!(ok1, refused, received, ok2)
    });
    submitted(&store, jobs + 4).await;
    drop(release);
    let (ok1, refused, received, ok2) = group.await.unwrap();
    assert_eq!(ok1.unwrap()[0].sequence, 1);
    assert!(matches!(refused, Err(StoreError::QueueNotFound { .. })));
    let got: Vec<String> = received
        .unwrap()
        .deliveries
        .into_iter()
        .map(|d| d.message.message_id)
        .collect();
    assert_eq!(got, ["a"], "the receive saw the group's earlier write");
    assert_eq!(ok2.unwrap()[0].sequence, 2);
    assert_eq!(store.writer.counters().1, commits + 1, "one group");
    assert!(!store.is_poisoned());
    let states: Vec<(String, bool)> = store
        .peek(&q, 1, 10, T0)
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.message_id, m.locked_until.is_some()))
        .collect();
    assert_eq!(
        states,
        [("a".to_owned(), true), ("b".to_owned(), false)],
        "the receive's lock was committed with the rest"
    );
}

/// A job that promised to refuse before writing but wrote and then failed: without a
/// savepoint of its own only the whole transaction can be undone, so it is, and the jobs
/// that ran in it are answered `unavailable` (nothing of them happened); the jobs after
/// it begin a new transaction, and the store stays open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decided_job_that_writes_then_fails_rolls_back_its_transaction() {
    let (_dir, _path, store) = open(SqliteOptions::default());
    let q = queue(&store, "q", QueuePolicy::default()).await;
    let (jobs, commits) = store.writer.counters();
    let release = hold_writer(&store);
    let s = Arc::clone(&store);
    let q1 = q.clone();
    let group = tokio::spawn(async move {
        let before = s.enqueue(&q1, vec![msg("before")], T0);
        // Refused on its own before the broken job: its refusal stands.
        let refused = s.writer.write_decided(|tx| -> StoreResult<()> {
            tx.queue(&name("nowhere"))?;
            Ok(())
        });
        let broken = s.writer.write_decided({
            let q = q1.clone();
            move |tx| {
                messages::enqueue(tx, &q, vec![msg("ghost")], T0)?;
                Err::<(), _>(StoreError::LockLost)
            }
        });
        let after = s.enqueue(&q1, vec![msg("after")], T0);
        tokio::join!(before, refused, broken, after)
    });
    submitted(&store, jobs + 4).await;
    drop(release);
    let (before, refused, broken, after) = group.await.unwrap();
    let e = before.unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Unavailable, "{e:?}");
    assert!(
        matches!(refused, Err(StoreError::QueueNotFound { .. })),
        "{refused:?}"
    );
    assert!(matches!(broken, Err(StoreError::LockLost)));
    assert_eq!(
        after.unwrap()[0].sequence,
        1,
        "nothing before it in the group survived"
    );
    assert_eq!(store.writer.counters().1, commits + 1);
    assert!(!store.is_poisoned());
    let ids = peeked_ids(&store, &q).await;
    assert_eq!(ids, ["after"]);
}

/// A receive of queue `q` of at most `max` messages at `T0`, through the store.
async fn take(store: &SqliteStore, q: &EntityName, max: u32) -> StoreResult<Vec<String>> {
    let params = redrive_store_conformance::params(q, max, 30_000, T0, None);
    Ok(store
        .receive(params)
        .await?
        .deliveries
        .into_iter()
        .map(|d| d.message.message_id)
        .collect())
}

/// A store with queue `q` holding "first" (received, its lock in memory) and "a"
/// (waiting). The queue's first lock in memory wrote its crash marker, so that receive
/// committed; later receives of `q` write no row.
async fn first_held() -> (tempfile::TempDir, Arc<SqliteStore>, EntityName) {
    let (dir, _path, store) = open(SqliteOptions::default());
    let q = queue(&store, "q", QueuePolicy::default()).await;
    store
        .enqueue(&q, vec![msg("first"), msg("a")], T0)
        .await
        .unwrap();
    assert_eq!(take(&store, &q, 1).await.unwrap(), ["first"]);
    (dir, store, q)
}

/// A receive that writes no row (its locks held in memory) runs before the writes of its
/// group and is answered before their commit: a commit that then fails does not take its
/// answer back, and its lock and delivery stay counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_that_writes_no_row_is_answered_before_its_groups_commit() {
    let (_dir, store, q) = first_held().await;
    fail_next_commits(&store);

    let (jobs, _) = store.writer.counters();
    let release = hold_writer(&store);
    let s = Arc::clone(&store);
    let q1 = q.clone();
    let group = tokio::spawn(async move {
        tokio::join!(s.enqueue(&q1, vec![msg("b")], T0), take(&s, &q1, 10),)
    });
    submitted(&store, jobs + 2).await;
    drop(release);
    let (sent, received) = group.await.unwrap();
    assert_eq!(
        sent.unwrap_err().kind(),
        StoreErrorKind::Poisoned,
        "the group's commit failed"
    );
    assert_eq!(
        received.unwrap(),
        ["a"],
        "answered before the commit, without the send that arrived before it"
    );
    assert!(store.is_poisoned());
    let peeked: Vec<(String, MessageState, u32)> = store
        .peek(&q, 1, 10, T0)
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.message_id, m.state, m.delivery_count))
        .collect();
    assert_eq!(
        peeked,
        [
            ("first".to_owned(), MessageState::Locked, 1),
            ("a".to_owned(), MessageState::Locked, 1)
        ],
        "both deliveries still counted"
    );
}

/// A receive answered before its group's commit keeps its lock when a later job of the
/// group rolls the whole transaction back: the lock completes with its token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_answered_early_outlives_its_transactions_rollback() {
    let (_dir, store, q) = first_held().await;

    let (jobs, commits) = store.writer.counters();
    let release = hold_writer(&store);
    let s = Arc::clone(&store);
    let q1 = q.clone();
    let group = tokio::spawn(async move {
        let before = s.enqueue(&q1, vec![msg("before")], T0);
        let broken = s.writer.write_decided({
            let q = q1.clone();
            move |tx| {
                messages::enqueue(tx, &q, vec![msg("ghost")], T0)?;
                Err::<(), _>(StoreError::LockLost)
            }
        });
        let received = s.receive(redrive_store_conformance::params(&q1, 10, 30_000, T0, None));
        tokio::join!(before, broken, received)
    });
    submitted(&store, jobs + 3).await;
    drop(release);
    let (before, broken, received) = group.await.unwrap();
    assert_eq!(
        before.unwrap_err().kind(),
        StoreErrorKind::Unavailable,
        "rolled back with the broken job"
    );
    assert!(matches!(broken, Err(StoreError::LockLost)));
    let received = received.unwrap().deliveries;
    let got: Vec<&str> = received
        .iter()
        .map(|d| d.message.message_id.as_str())
        .collect();
    assert_eq!(got, ["a"]);
    assert_eq!(store.writer.counters().1, commits);
    assert!(!store.is_poisoned());
    let locked = store.queue_counts(&q, T0).await.unwrap().locked;
    assert_eq!(locked, 2, "the rollback did not take the early lock back");
    let item = redrive_store::Settlement {
        lock_token: received[0].lock_token.clone(),
        action: redrive_store::SettleAction::Complete,
    };
    let out = store.settle(&q, vec![item], T0).await.unwrap();
    assert!(out.results[0].is_ok(), "{:?}", out.results[0]);
    let ids = peeked_ids(&store, &q).await;
    assert_eq!(
        ids,
        ["first"],
        "\"a\" completed; nothing of the broken group stayed"
    );
}

/// Makes the next COMMIT on the writer fail: a deferred foreign key (on TEMP tables of
/// the write connection only) that every message insert violates. SQLite checks deferred
/// constraints at COMMIT, so the commit itself is refused, as a failing disk would.
fn fail_next_commits(store: &SqliteStore) {
    let (tx, rx) = std::sync::mpsc::channel();
    store.writer.raw(move |conn| {
        let r = conn.execute_batch(
            "PRAGMA foreign_keys = ON;
             CREATE TEMP TABLE trap_parent (id INTEGER PRIMARY KEY);
             CREATE TEMP TABLE trap_child (pid INTEGER
                 REFERENCES trap_parent (id) DEFERRABLE INITIALLY DEFERRED);
             CREATE TEMP TRIGGER trap AFTER INSERT ON main.messages
                 BEGIN INSERT INTO trap_child VALUES (1); END;",
        );
        let _ = tx.send(r);
    });
    rx.recv().unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_commit_fails_the_group_and_poisons_the_store() {
    let (_dir, path, store) = open(SqliteOptions::default());
    let q = queue(&store, "q", QueuePolicy::default()).await;
    store.enqueue(&q, vec![msg("before")], T0).await.unwrap();
    fail_next_commits(&store);

    let (jobs, _) = store.writer.counters();
    let release = hold_writer(&store);
    let s = Arc::clone(&store);
    let q1 = q.clone();
    let group = tokio::spawn(async move {
        let p = QueuePolicy::default();
        tokio::join!(
            s.enqueue(&q1, vec![msg("lost-1")], T0),
            s.update_queue(&q1, &p, None, T0),
        )
    });
    submitted(&store, jobs + 2).await;
    drop(release);
    let (a, b) = group.await.unwrap();
    assert_eq!(a.unwrap_err().kind(), StoreErrorKind::Poisoned);
    assert_eq!(
        b.unwrap_err().kind(),
        StoreErrorKind::Poisoned,
        "a job that succeeded on its own is not acknowledged either"
    );
    assert!(store.is_poisoned());
    // The health check says so.
    assert!(matches!(store.ping().await, Err(StoreError::Poisoned)));

    // Fail-stop: every later write is refused, even ones that would not hit the trap.
    assert!(matches!(
        store
            .create_queue(&name("other"), &QueuePolicy::default(), T0)
            .await,
        Err(StoreError::Poisoned)
    ));
    assert!(matches!(
        store.enqueue(&q, vec![msg("later")], T0).await,
        Err(StoreError::Poisoned)
    ));
    // Reads still answer, and show that nothing of the failed group was committed.
    let ids = peeked_ids(&store, &q).await;
    assert_eq!(ids, ["before"]);
    assert_eq!(store.get_queue(&q).await.unwrap().policy_version, 1);

    // A restart clears the poison.
    store.close();
    drop(store);
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    assert!(!store.is_poisoned());
    assert_eq!(
        store.enqueue(&q, vec![msg("after")], T0).await.unwrap()[0].sequence,
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_database_is_unavailable_not_poisoned() {
    let (_dir, path, store) = open(SqliteOptions::default());
    let q = queue(&store, "q", QueuePolicy::default()).await;
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();

    let e = store.enqueue(&q, vec![msg("a")], T0).await.unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Unavailable);
    assert!(!store.is_poisoned());
    // Reads are not blocked by a writer (WAL).
    assert!(store.peek(&q, 1, 10, T0).await.unwrap().is_empty());

    other.execute_batch("COMMIT").unwrap();
    assert_eq!(
        store.enqueue(&q, vec![msg("a")], T0).await.unwrap()[0].sequence,
        1
    );
}

#[tokio::test]
async fn a_newer_schema_is_refused() {
    let (_dir, path, store) = open(SqliteOptions::default());
    store.close();
    drop(store);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        let v: i64 = conn
            .query_row("SELECT max(version) FROM schema_migrations", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        conn.execute(
            "INSERT INTO schema_migrations (version) VALUES (?1)",
            [SCHEMA_VERSION + 1],
        )
        .unwrap();
    }
    match SqliteStore::open(&path, SqliteOptions::default()) {
        Err(StoreError::Backend { source }) => match source.downcast_ref::<SqliteError>() {
            Some(SqliteError::SchemaTooNew { found, known }) => {
                assert_eq!((*found, *known), (SCHEMA_VERSION + 1, SCHEMA_VERSION));
            }
            other => panic!("expected SchemaTooNew, got {other:?}"),
        },
        other => panic!("expected a backend error, got {other:?}"),
    }
}

#[tokio::test]
async fn reopening_keeps_the_schema_and_data() {
    let (_dir, path, store) = open(SqliteOptions::default());
    let q = queue(&store, "q", QueuePolicy::default()).await;
    store.enqueue(&q, vec![msg("a")], T0).await.unwrap();
    store.close();
    drop(store);
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    assert_eq!(store.peek(&q, 1, 10, T0).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_are_visible_to_a_new_instance_without_checkpoint() {
    // The first instance is never closed (no checkpoint), as if the process had died: the
    // acknowledged commits are in the WAL and a new instance sees them.
    let (_dir, path, first) = open(SqliteOptions::default());
    let q = queue(&first, "q", QueuePolicy::default()).await;
    first
        .enqueue(&q, vec![msg("a"), msg("b")], T0)
        .await
        .unwrap();
    Arc::into_inner(first).unwrap().abandon_as_crashed();
    let second = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    assert_eq!(second.peek(&q, 1, 10, T0).await.unwrap().len(), 2);
    assert_eq!(
        second.enqueue(&q, vec![msg("c")], T0).await.unwrap()[0].sequence,
        3
    );
}

/// One process serves a database file at a time: a second open while the first store
/// holds the file is refused, names the lock file, and changes nothing (not even the
/// crash markers of the locks the first holds in memory); once the first is closed, the
/// file opens again.
#[tokio::test]
async fn a_second_store_on_a_file_in_use_is_refused() {
    let (_dir, path, first) = open(SqliteOptions::default());
    let q = queue(&first, "q", QueuePolicy::default()).await;
    first.enqueue(&q, vec![msg("a")], T0).await.unwrap();
    let params = redrive_store_conformance::params(&q, 1, 30_000, T0, None);
    let held = first.receive(params).await.unwrap().deliveries;
    assert_eq!(held.len(), 1);

    let e = SqliteStore::open(&path, SqliteOptions::default()).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("open in another process") && text.contains("redrive.db.lock"),
        "{text}"
    );
    let StoreError::Backend { source } = &e else {
        panic!("{e:?}")
    };
    assert!(
        matches!(
            source.downcast_ref::<SqliteError>(),
            Some(SqliteError::InUse { .. })
        ),
        "{e:?}"
    );
    // The first store is as it was: its lock completes, the message counted once.
    let peeked = first.peek(&q, 1, 10, T0).await.unwrap();
    assert_eq!(peeked[0].delivery_count, 1);
    let item = redrive_store::Settlement {
        lock_token: held[0].lock_token.clone(),
        action: redrive_store::SettleAction::Complete,
    };
    assert!(first.settle(&q, vec![item], T0).await.unwrap().results[0].is_ok());
    first.close();
    let again = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    assert!(again.peek(&q, 1, 10, T0).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_closed_store_refuses_work_and_close_is_idempotent() {
    let (_dir, _path, store) = open(SqliteOptions::default());
    let q = queue(&store, "q", QueuePolicy::default()).await;
    store.ping().await.unwrap();
    store.close();
    store.close();
    let e = store.ping().await.unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Unavailable);
    let e = store.enqueue(&q, vec![msg("a")], T0).await.unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Unavailable);
    let e = store.peek(&q, 1, 10, T0).await.unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Unavailable);
}

#[tokio::test]
async fn open_creates_missing_parent_directories() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a").join("b").join("redrive.db");
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    assert!(path.exists());
    assert!(store.list_queues().await.unwrap().is_empty());
}

/// The hot queries use an index (no full scan of `messages`).
#[test]
fn hot_queries_use_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let conn = schema::open_writer(&dir.path().join("plan.db")).unwrap();
    schema::migrate(&conn).unwrap();
    let plan = |sql: &str| -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let unbound = rusqlite::params_from_iter(std::iter::repeat_n(
            rusqlite::types::Null,
            stmt.parameter_count(),
        ));
        let rows = stmt
            .query_map(unbound, |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect::<Vec<_>>();
        rows.join(" | ")
    };
    let cases = [
        (
            "SELECT rowid FROM messages WHERE queue_id = ?1 AND state = 'available' \
             AND due_at <= ?2 ORDER BY due_at, sequence LIMIT ?3",
            "messages_due",
        ),
        (
            "SELECT rowid FROM messages WHERE queue_id = ?1 AND state = 'locked' \
             AND due_at <= ?2 ORDER BY due_at LIMIT ?3",
            "messages_due",
        ),
        (
            "SELECT rowid FROM messages WHERE queue_id = ?1 AND expires_at <= ?2 \
             AND state <> 'locked' ORDER BY expires_at LIMIT ?3",
            "messages_expiry",
        ),
        (
            "SELECT min(due_at) FROM messages WHERE queue_id = 1 AND state = 'locked'",
            "messages_due",
        ),
        (
            "SELECT rowid FROM messages WHERE queue_id = 1 AND session_id = 's' \
             AND sequence > 0 AND state <> 'deferred' ORDER BY sequence LIMIT 10",
            "messages_session",
        ),
        (
            "SELECT rowid FROM messages WHERE rowid = 7 AND queue_id = 1",
            "INTEGER PRIMARY KEY",
        ),
        (
            "SELECT rowid FROM messages \
             WHERE queue_id = ?1 AND state = 'available' AND due_at <= ?2 \
               AND (due_at, sequence) > (?3, ?4) \
             ORDER BY due_at, sequence LIMIT ?5",
            // The index starts at the position (the row value) and holds every column
            // read: SQLite defers the table seek and never makes it.
            "USING INDEX messages_due (queue_id=? AND state=? AND (due_at,sequence)>(?,?)",
        ),
        (
            "SELECT count_approximate FROM messages WHERE rowid = ?1",
            "INTEGER PRIMARY KEY",
        ),
        (
            "SELECT rowid FROM messages WHERE queue_id = 1 AND sequence >= 3 \
             ORDER BY sequence LIMIT 10",
            "sqlite_autoindex_messages_1",
        ),
        (
            concat!(
                "SELECT ",
                rows::msg_cols!(),
                rows::msg_from!(),
                " WHERE queue_id = ?1 AND state = 'available' AND due_at <= ?2 \
                 ORDER BY due_at, sequence LIMIT ?3"
            ),
            "messages_due",
        ),
        (
            concat!(
                "SELECT ",
                rows::msg_cols!(),
                rows::msg_from!(),
                " WHERE queue_id = ?1 AND state = 'available' AND due_at <= ?2 \
                 AND (due_at, sequence) > (?3, ?4) ORDER BY due_at, sequence LIMIT ?5"
            ),
            "USING INDEX messages_due (queue_id=? AND state=? AND (due_at,sequence)>(?,?)",
        ),
        (
            concat!(
                "SELECT ",
                rows::msg_cols!(),
                rows::msg_from!(),
                " WHERE queue_id = ?1 AND sequence >= ?2 ORDER BY sequence LIMIT ?3"
            ),
            "sqlite_autoindex_messages_1",
        ),
    ];
    for (sql, index) in cases {
        let p = plan(sql);
        assert!(p.contains(index), "{sql}\n  plan: {p}");
        assert!(!p.contains("SCAN messages"), "{sql}\n  plan: {p}");
        assert!(!p.contains("SCAN b"), "{sql}\n  plan: {p}");
        if p.contains(" b ") {
            assert!(
                p.contains("SEARCH b USING INTEGER PRIMARY KEY"),
                "{sql}\n  plan: {p}"
            );
        }
    }
}

/// A store written at schema version 3 (bodies in the message rows) opens at the current
/// version with every message's contents, state and lock intact, and deletes contents
/// with their messages.
#[tokio::test]
async fn version_3_messages_keep_their_contents_through_the_migration() {
    use redrive_core::PropertyValue;
    use redrive_store::{ReceiveParams, SettleAction, Settlement};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("redrive.db");
    let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let kib: Vec<u8> = (0..1024u32).map(|i| (i * 7 % 256) as u8).collect();
    let mut props = redrive_core::Properties::new();
    props.insert("n".to_owned(), PropertyValue::Int(7));
    props.insert("s".to_owned(), PropertyValue::String("x".to_owned()));
    let props_json = redrive_store::skeleton::columns::props_to_json(&props)
        .unwrap()
        .unwrap();
    let locked_token = "tokentokentoken.2";
    {
        let conn = schema::open_writer(&path).unwrap();
        conn.execute_batch("CREATE TABLE schema_migrations (version INTEGER NOT NULL PRIMARY KEY)")
            .unwrap();
        for (v, sql) in schema::MIGRATIONS.iter().filter(|(v, _)| *v <= 3) {
            conn.execute_batch(sql).unwrap();
            conn.execute("INSERT INTO schema_migrations (version) VALUES (?1)", [v])
                .unwrap();
        }
        let policy = serde_json::to_string(&QueuePolicy::default()).unwrap();
        conn.execute(
            "INSERT INTO queues (name, policy, policy_version, created_at, updated_at, \
             next_sequence) VALUES ('q', ?1, 1, ?2, ?2, 4)",
            rusqlite::params![policy, T0.0],
        )
        .unwrap();
        let insert = "INSERT INTO messages (rowid, queue_id, sequence, message_id, body, \
             content_type, properties, correlation_id, session_id, message_type, intent, \
             valid_until, enqueued_at, scheduled_at, state, visible_at, expires_at, \
             delivery_count, lock_token, locked_until, deferred) VALUES \
             (?1, 1, ?1, ?2, ?3, ?4, ?5, ?6, NULL, ?7, ?8, ?9, ?10, NULL, ?11, ?10, NULL, \
             ?12, ?13, ?14, 0)";
        conn.execute(
            insert,
            rusqlite::params![
                1,
                "m1",
                kib,
                "application/cloudevents+json",
                props_json,
                "c1",
                "t1",
                "i1",
                T0.0 + 3_600_000,
                T0.0,
                "available",
                0,
                None::<String>,
                None::<i64>
            ],
        )
        .unwrap();
        conn.execute(
            insert,
            rusqlite::params![
                2,
                "m2",
                Vec::<u8>::new(),
                None::<String>,
                None::<String>,
                None::<String>,
                None::<String>,
                None::<String>,
                None::<i64>,
                T0.0,
                "locked",
                1,
                locked_token,
                T0.0 + 60_000
            ],
        )
        .unwrap();
        conn.execute(
            insert,
            rusqlite::params![
                3,
                "m3",
                big,
                "application/octet-stream",
                None::<String>,
                None::<String>,
                None::<String>,
                None::<String>,
                None::<i64>,
                T0.0,
                "available",
                0,
                None::<String>,
                None::<i64>
            ],
        )
        .unwrap();
    }

    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let apart = |path: &std::path::Path| -> i64 {
        rusqlite::Connection::open(path)
            .unwrap()
            .query_row("SELECT count(*) FROM message_bodies", [], |r| r.get(0))
            .unwrap()
    };
    // The two messages with more than `INLINE_CONTENT_MAX` bytes of contents.
    assert_eq!(apart(&path), 2);
    let q = name("q");
    let peeked = store.peek(&q, 1, 10, T0).await.unwrap();
    assert_eq!(peeked.len(), 3);
    let m1 = &peeked[0];
    assert_eq!((m1.sequence, m1.message_id.as_str()), (1, "m1"));
    assert_eq!(m1.body, kib);
    assert_eq!(
        m1.content_type.as_deref(),
        Some("application/cloudevents+json")
    );
    assert_eq!(m1.properties, props);
    assert_eq!(m1.correlation_id.as_deref(), Some("c1"));
    assert_eq!(m1.message_type.as_deref(), Some("t1"));
    assert_eq!(m1.intent.as_deref(), Some("i1"));
    assert_eq!(m1.valid_until, Some(Timestamp(T0.0 + 3_600_000)));
    assert_eq!(peeked[1].body, Vec::<u8>::new());
    assert_eq!(peeked[1].state, redrive_core::MessageState::Locked);
    assert_eq!(peeked[1].delivery_count, 1);
    assert!(peeked[1].properties.is_empty());
    assert_eq!(peeked[2].body, big);

    // The lock taken before the migration still settles (the rowid its token names kept).
    let settled = store
        .settle(
            &q,
            vec![Settlement {
                lock_token: locked_token.to_owned(),
                action: SettleAction::Complete,
            }],
            T0.plus_millis(1),
        )
        .await
        .unwrap();
    assert!(settled.results[0].is_ok(), "{:?}", settled.results);

    // Receive delivers the same contents; dead-lettering copies them into the record.
    let got = store
        .receive(ReceiveParams {
            queue: q.clone(),
            max: 10,
            lock_ms: 30_000,
            now: T0.plus_millis(2),
            session: None,
        })
        .await
        .unwrap();
    assert_eq!(got.deliveries.len(), 2);
    assert_eq!(got.deliveries[0].message.body, kib);
    assert_eq!(got.deliveries[0].message.properties, props);
    assert_eq!(got.deliveries[1].message.body, big);
    let settled = store
        .settle(
            &q,
            vec![
                Settlement {
                    lock_token: got.deliveries[0].lock_token.clone(),
                    action: SettleAction::DeadLetter {
                        reason: "bad".to_owned(),
                        description: None,
                        by_broker: false,
                        classifier: redrive_core::Classifier::default(),
                    },
                },
                Settlement {
                    lock_token: got.deliveries[1].lock_token.clone(),
                    action: SettleAction::Complete,
                },
            ],
            T0.plus_millis(3),
        )
        .await
        .unwrap();
    let dl_id = settled.results[0]
        .as_ref()
        .unwrap()
        .dead_letter_id
        .clone()
        .unwrap();
    let record = store.get_dead_letter(&q, &dl_id).await.unwrap();
    assert_eq!(record.body, kib);
    assert_eq!(record.properties, props);
    assert_eq!(record.correlation_id.as_deref(), Some("c1"));
    assert!(store.peek(&q, 1, 10, T0).await.unwrap().is_empty());
    assert_eq!(apart(&path), 0);

    // New messages either side of the bound read back the same.
    let mut small = msg("small");
    small.body = vec![3; rows::INLINE_CONTENT_MAX - props_json.len()];
    small.properties = props.clone();
    let mut large = msg("large");
    large.body = vec![5; rows::INLINE_CONTENT_MAX + 1];
    large.content_type = Some("text/plain".to_owned());
    store
        .enqueue(&q, vec![small.clone(), large.clone()], T0.plus_millis(4))
        .await
        .unwrap();
    assert_eq!(apart(&path), 1);
    let peeked = store.peek(&q, 1, 10, T0).await.unwrap();
    assert_eq!(peeked.len(), 2);
    assert_eq!(peeked[0].body, small.body);
    assert_eq!(peeked[0].properties, props);
    assert_eq!(peeked[1].body, large.body);
    assert_eq!(peeked[1].content_type.as_deref(), Some("text/plain"));
    assert!(peeked[1].properties.is_empty());
    // A purge takes the contents kept apart with the messages.
    assert_eq!(
        store.purge_messages(&q, T0.plus_millis(5)).await.unwrap(),
        2
    );
    assert_eq!(apart(&path), 0);
    store
        .enqueue(&q, vec![large.clone()], T0.plus_millis(6))
        .await
        .unwrap();
    assert_eq!(apart(&path), 1);
    store.delete_queue(&q, true).await.unwrap();
    assert_eq!(apart(&path), 0);
    store.close();
    drop(store);

    let conn = rusqlite::Connection::open(&path).unwrap();
    let left: (i64, i64) = conn
        .query_row(
            "SELECT (SELECT count(*) FROM messages), (SELECT count(*) FROM message_bodies)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(left, (0, 0));
}

fn audit_fields(i: i64) -> redrive_store::AuditFields {
    redrive_store::AuditFields {
        at: T0.plus_millis(i),
        actor_id: "tok_000000000000000a".to_owned(),
        actor_name: "ops".to_owned(),
        action: "message.peek".to_owned(),
        entity: Some("orders".to_owned()),
        targets: vec![format!("m{i}")],
        outcome: "ok".to_owned(),
        client: None,
    }
}

fn chained(entries: &[redrive_store::AuditEntry]) -> Vec<redrive_core::audit::ChainedEntry> {
    entries.iter().cloned().map(Into::into).collect()
}

/// An audit row edited behind the store's back (here with plain SQL) no longer verifies;
/// nor does a log with a row deleted from its middle.
#[tokio::test]
async fn an_audit_row_edited_in_the_file_fails_verification() {
    use redrive_core::audit::{ChainError, verify};
    use redrive_store::AuditQuery;

    let (_dir, path, store) = open(SqliteOptions::default());
    let fields: Vec<_> = (1..=5).map(audit_fields).collect();
    store.append_audit(&fields).await.unwrap();
    let all = store.list_audit(&AuditQuery::default()).await.unwrap();
    assert!(verify(&chained(&all), store.audit_head().await.unwrap().as_ref()).is_ok());

    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute("UPDATE audit_log SET outcome = 'denied' WHERE seq = 3", [])
        .unwrap();
    let all = store.list_audit(&AuditQuery::default()).await.unwrap();
    assert_eq!(all[2].fields.outcome, "denied");
    assert_eq!(
        verify(&chained(&all), store.audit_head().await.unwrap().as_ref()),
        Err(ChainError::Altered { seq: 3 })
    );

    raw.execute("UPDATE audit_log SET outcome = 'ok' WHERE seq = 3", [])
        .unwrap();
    raw.execute("DELETE FROM audit_log WHERE seq = 2", [])
        .unwrap();
    let all = store.list_audit(&AuditQuery::default()).await.unwrap();
    assert_eq!(
        verify(&chained(&all), store.audit_head().await.unwrap().as_ref()),
        Err(ChainError::Unlinked {
            seq: 3,
            prev_seq: 1
        })
    );
}

/// A store written at schema version 4 opens at the current version with its messages,
/// and gains the token and audit tables.
#[tokio::test]
async fn version_4_database_migrates_to_the_access_tables() {
    use redrive_core::access::{Grant, Role};
    use redrive_store::{AuditQuery, NewToken};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("redrive.db");
    {
        let conn = schema::open_writer(&path).unwrap();
        conn.execute_batch("CREATE TABLE schema_migrations (version INTEGER NOT NULL PRIMARY KEY)")
            .unwrap();
        for (v, sql) in schema::MIGRATIONS.iter().filter(|(v, _)| *v <= 4) {
            conn.execute_batch(sql).unwrap();
            conn.execute("INSERT INTO schema_migrations (version) VALUES (?1)", [v])
                .unwrap();
        }
        let has_tokens: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name IN ('tokens', 'audit_log')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(has_tokens, 0);
    }
    {
        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        let q = queue(&store, "q", QueuePolicy::default()).await;
        store.enqueue(&q, vec![msg("a")], T0).await.unwrap();
        store.close();
    }
    // Version 4 again, with data in it, as an older build would have left it.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "DROP TABLE memory_locks; DROP INDEX messages_approximate; \
             ALTER TABLE messages DROP COLUMN count_approximate; \
             DROP TRIGGER dead_letters_signature_backfill; DROP INDEX dead_letters_unsigned; \
             DROP TABLE queue_policy_versions; \
             DROP TRIGGER dead_letters_signature_move; \
             DROP TRIGGER dead_letters_signature_leave; DROP TRIGGER queues_signatures_drop; \
             DROP TABLE failure_signatures; DROP TABLE failure_signature_counts; \
             DROP TABLE failure_signature_hours; DROP INDEX dead_letters_signature; \
             ALTER TABLE dead_letters DROP COLUMN signature; \
             ALTER TABLE dead_letters DROP COLUMN source; \
             DROP TABLE tokens; DROP TABLE audit_log; DROP TABLE audit_head; \
             ALTER TABLE dead_letters DROP COLUMN undecodable; \
             ALTER TABLE messages DROP COLUMN last_attempt; \
             ALTER TABLE dead_letters DROP COLUMN route_kind; \
             ALTER TABLE dead_letters DROP COLUMN route_rule; \
             ALTER TABLE dead_letters DROP COLUMN consumer; \
             ALTER TABLE dead_letters DROP COLUMN rule_version; \
             DROP TABLE idempotency_register; \
             DROP INDEX dead_letters_candidates; DROP INDEX dead_letters_age; \
             ALTER TABLE dead_letters DROP COLUMN format; \
             ALTER TABLE dead_letters DROP COLUMN replay_due_at; \
             ALTER TABLE dead_letters DROP COLUMN replay_failures; \
             ALTER TABLE dead_letters DROP COLUMN last_replay_error; \
             ALTER TABLE dead_letters DROP COLUMN judgement; \
             ALTER TABLE dead_letters DROP COLUMN replay_cause; \
             ALTER TABLE dead_letters DROP COLUMN route_target; \
             ALTER TABLE dead_letters DROP COLUMN missing_target; \
             DROP TABLE cases; DROP TABLE case_timeline; DROP TABLE case_payloads; \
             DROP TABLE intents; DROP TABLE effect_authorities; DROP TABLE case_groups; \
             DROP TABLE replay_plans; DROP TABLE replay_plan_items; \
             DELETE FROM schema_migrations WHERE version >= 5;",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("SELECT max(version) FROM schema_migrations", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!((version, SCHEMA_VERSION), (24, 24));
    // The queue's current policy is its one version (schema 21's backfill).
    let versions = store
        .list_policy_versions(&name("q"), None, 10)
        .await
        .unwrap();
    assert_eq!(versions.iter().map(|v| v.version).collect::<Vec<_>>(), [1]);
    assert_eq!(store.peek(&name("q"), 1, 10, T0).await.unwrap().len(), 1);
    let token = NewToken {
        id: "tok_000000000000000a".to_owned(),
        name: "ops".to_owned(),
        secret_hash: "ab".repeat(32),
        grants: vec![Grant::all(Role::Admin)],
        created_by: "bootstrap".to_owned(),
        expires_at: None,
        sqs: None,
    };
    store.create_token(&token, T0).await.unwrap();
    assert_eq!(
        store
            .find_token(&token.secret_hash)
            .await
            .unwrap()
            .unwrap()
            .token,
        token
    );
    store.append_audit(&[audit_fields(1)]).await.unwrap();
    assert_eq!(
        store.list_audit(&AuditQuery::default()).await.unwrap()[0].seq,
        1
    );
}

/// A store written at schema version 6 opens at the latest version with its dead letters
/// readable: records of one message, never judged, and not replay candidates (only a drain
/// makes existing records candidates), even on a queue whose policy now enables replay.
/// Not being candidates, they stand for cases, which version 8 opens as of their
/// dead-letter time.
#[tokio::test]
async fn version_6_dead_letters_read_as_messages_and_are_not_candidates() {
    use redrive_core::{Area, AutoReplay, RecordFormat};
    use redrive_store::{DrainRule, ReplayMark};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("redrive.db");
    {
        let conn = schema::open_writer(&path).unwrap();
        conn.execute_batch("CREATE TABLE schema_migrations (version INTEGER NOT NULL PRIMARY KEY)")
            .unwrap();
        for (v, sql) in schema::MIGRATIONS.iter().filter(|(v, _)| *v <= 6) {
            conn.execute_batch(sql).unwrap();
            conn.execute("INSERT INTO schema_migrations (version) VALUES (?1)", [v])
                .unwrap();
        }
        let policy = QueuePolicy {
            auto_replay: AutoReplay {
                enabled: true,
                ..AutoReplay::default()
            },
            ..QueuePolicy::default()
        };
        conn.execute(
            "INSERT INTO queues (name, policy, policy_version, created_at, updated_at, \
             next_sequence) VALUES ('q', ?1, 1, ?2, ?2, 2)",
            rusqlite::params![serde_json::to_string(&policy).unwrap(), T0.0],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO dead_letters (id, queue, area, message_id, sequence, body, \
             body_sha256, reason, delivery_count, count_quality, enqueued_at, \
             dead_lettered_at, policy_version, route, dlq_delivery_count) VALUES \
             ('dl_old', 'q', 'live', 'm1', 1, x'6869', ?1, 'Bad', 1, 'exact', ?2, ?2, 1, \
             'application', 0)",
            rusqlite::params![redrive_core::digest::sha256_hex(b"hi"), T0.0],
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let version = schema::current_version(&schema::open_reader(&path).unwrap()).unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let q = name("q");
    let r = store.get_dead_letter(&q, "dl_old").await.unwrap();
    assert_eq!((r.area, r.message_id.as_str()), (Area::Live, "m1"));
    assert_eq!(r.route_target, redrive_core::case::RouteTarget::Written);
    assert_eq!(r.missing_target, None);
    let case = store.get_case("case_old").await.unwrap();
    assert_eq!((case.record_id.as_str(), case.opened_at), ("dl_old", T0));
    assert_eq!((case.intent_id.as_str(), case.body_size), ("m1", 2));
    assert_eq!(store.case_timeline("case_old").await.unwrap().len(), 1);
    assert_eq!(r.body, b"hi");
    assert_eq!(r.format, RecordFormat::Message);
    assert_eq!(r.replay, ReplayMark::default());
    assert_eq!(r.judgement, None);
    let later = T0.plus_millis(3_600_000);
    assert!(
        store
            .claim_replay_candidates(later, 10, 60_000)
            .await
            .unwrap()
            .is_empty()
    );
    let counts = store.replay_counts(Some(&q), 3).await.unwrap();
    assert_eq!((counts[0].live, counts[0].candidates), (1, 0));
    // The drain is what makes it a candidate.
    let drained = store
        .drain_replay_candidates(
            &[DrainRule {
                queue: q.clone(),
                older_than: later,
                due_at: later,
            }],
            10,
        )
        .await
        .unwrap();
    assert_eq!(drained, 1);
    let claimed = store
        .claim_replay_candidates(later, 10, 60_000)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, "dl_old");
}

/// Automatic replay's queries use their indexes.
#[test]
fn replay_queries_use_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let conn = schema::open_writer(&dir.path().join("plan.db")).unwrap();
    schema::migrate(&conn).unwrap();
    let plan = |sql: &str| -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let unbound = rusqlite::params_from_iter(std::iter::repeat_n(
            rusqlite::types::Null,
            stmt.parameter_count(),
        ));
        stmt.query_map(unbound, |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let cases = [
        (
            "SELECT id FROM dead_letters WHERE replay_due_at IS NOT NULL \
             AND replay_due_at <= ?1 AND area = 'live' \
             AND (locked_until IS NULL OR locked_until <= ?1) \
             ORDER BY replay_due_at, id LIMIT ?2",
            "dead_letters_candidates",
        ),
        (
            "SELECT id FROM dead_letters WHERE queue = ?1 AND dead_lettered_at < ?2 \
             AND area = 'live' AND replay_due_at IS NULL \
             AND (locked_until IS NULL OR locked_until <= ?3) \
             ORDER BY dead_lettered_at, id LIMIT ?4",
            "dead_letters_age",
        ),
        (
            "SELECT id FROM dead_letters WHERE queue = ?1 AND dead_lettered_at < ?2 \
             ORDER BY dead_lettered_at, id LIMIT ?3",
            "dead_letters_age",
        ),
    ];
    for (sql, index) in cases {
        let p = plan(sql);
        assert!(p.contains(index), "{sql}\n  plan: {p}");
        assert!(!p.contains("SCAN dead_letters"), "{sql}\n  plan: {p}");
    }
}

/// A case opens in the transaction of the write that makes its record one: when the
/// opening fails, the move or import fails whole and leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_opening_fails_the_write_that_needed_it() {
    use redrive_core::Area;
    use redrive_store::skeleton::cases::case_id;

    let (_dir, _path, store) = open(SqliteOptions::default());
    let replaying = QueuePolicy {
        auto_replay: redrive_core::AutoReplay {
            enabled: true,
            ..redrive_core::AutoReplay::default()
        },
        ..QueuePolicy::default()
    };
    let q = queue(&store, "q", replaying).await;
    let plain = queue(&store, "plain", QueuePolicy::default()).await;
    store.enqueue(&q, vec![msg("m1")], T0).await.unwrap();
    let d = store
        .receive(redrive_store_conformance::params(&q, 1, 30_000, T0, None))
        .await
        .unwrap()
        .deliveries;
    let out = store
        .settle(
            &q,
            vec![redrive_store::Settlement {
                lock_token: d[0].lock_token.clone(),
                action: redrive_store::SettleAction::DeadLetter {
                    reason: "Bad".into(),
                    description: None,
                    by_broker: false,
                    classifier: redrive_core::Classifier::default(),
                },
            }],
            T0,
        )
        .await
        .unwrap();
    let id = out.effects.dead_lettered[0].dead_letter_id.clone();
    let template = store.get_dead_letter(&q, &id).await.unwrap();
    let refuse = |sql: &'static str| {
        let (done, wait) = std::sync::mpsc::channel();
        store.writer.raw(move |conn| {
            conn.execute_batch(sql).unwrap();
            done.send(()).unwrap();
        });
        wait.recv().unwrap();
    };
    refuse(
        "CREATE TRIGGER refuse_cases BEFORE INSERT ON cases \
         BEGIN SELECT RAISE(ABORT, 'refused'); END;",
    );
    assert!(
        store
            .move_dead_letter(&q, &id, Area::Quarantine, T0)
            .await
            .is_err()
    );
    assert_eq!(
        store.get_dead_letter(&q, &id).await.unwrap().area,
        Area::Live,
        "the move was rolled back with the opening"
    );
    let imported = redrive_store::DeadLetterRecord {
        id: redrive_core::id::new_dead_letter_id(T0),
        ..template
    };
    assert!(
        store
            .import_dead_letters(&plain, vec![imported.clone()], T0)
            .await
            .is_err()
    );
    assert!(matches!(
        store.get_dead_letter(&plain, &imported.id).await,
        Err(StoreError::DeadLetterNotFound { .. })
    ));
    assert!(!store.is_poisoned(), "one job failed, nothing more");

    refuse("DROP TRIGGER refuse_cases;");
    store
        .move_dead_letter(&q, &id, Area::Quarantine, T0)
        .await
        .unwrap();
    assert_eq!(store.get_case(&case_id(&id)).await.unwrap().record_id, id);
    store
        .import_dead_letters(&plain, vec![imported.clone()], T0)
        .await
        .unwrap();
    assert_eq!(
        store
            .case_timeline(&case_id(&imported.id))
            .await
            .unwrap()
            .len(),
        1
    );
}

/// The case worker's queries, the opening and the searches by queue or intent use their
/// indexes.
#[test]
fn case_queries_use_indexes() {
    use redrive_store::skeleton::cases::{LATEST_DEAD_LETTER, OPEN_CASE, OPEN_TIMELINE};

    let dir = tempfile::tempdir().unwrap();
    let conn = schema::open_writer(&dir.path().join("plan.db")).unwrap();
    schema::migrate(&conn).unwrap();
    let plan = |sql: &str| -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let unbound = rusqlite::params_from_iter(std::iter::repeat_n(
            rusqlite::types::Null,
            stmt.parameter_count(),
        ));
        stmt.query_map(unbound, |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let due = format!("SELECT id {}", crate::cases::DUE);
    let payload_due = format!("SELECT id, record_id {}", crate::cases::PAYLOAD_DUE);
    let cases = [
        (due.as_str(), "cases_due"),
        (payload_due.as_str(), "cases_payload_due"),
        (
            "SELECT id FROM cases WHERE queue = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
            "cases_queue",
        ),
        (
            "SELECT id FROM cases WHERE intent_id = ?1 ORDER BY id LIMIT ?2",
            "cases_intent",
        ),
        (LATEST_DEAD_LETTER, "cases_queue_reason_age"),
    ];
    for (sql, index) in cases {
        let p = plan(sql);
        assert!(p.contains(index), "{sql}\n  plan: {p}");
        assert!(!p.contains("SCAN cases"), "{sql}\n  plan: {p}");
    }
    for sql in [OPEN_CASE, OPEN_TIMELINE] {
        let p = plan(sql);
        assert!(!p.contains("SCAN dead_letters"), "{sql}\n  plan: {p}");
        assert!(!p.contains("SCAN c"), "{sql}\n  plan: {p}");
        assert!(!p.contains("SCAN t"), "{sql}\n  plan: {p}");
    }
}

/// Token lookups and the filtered audit pages use an index.
#[test]
fn access_queries_use_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let conn = schema::open_writer(&dir.path().join("plan.db")).unwrap();
    schema::migrate(&conn).unwrap();
    let plan = |sql: &str| -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let unbound = rusqlite::params_from_iter(std::iter::repeat_n(
            rusqlite::types::Null,
            stmt.parameter_count(),
        ));
        stmt.query_map(unbound, |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let cases = [
        (
            "SELECT id FROM tokens WHERE secret_hash = ?1",
            "sqlite_autoindex_tokens_2",
        ),
        (
            "SELECT id FROM tokens WHERE sqs_access_key_id = ?1",
            "sqlite_autoindex_tokens_3",
        ),
        (
            "SELECT id FROM tokens WHERE id = ?1",
            "sqlite_autoindex_tokens_1",
        ),
        (
            "SELECT seq FROM audit_log WHERE seq > ?1 AND actor_id = ?2 ORDER BY seq LIMIT ?3",
            "audit_log_actor",
        ),
        (
            "SELECT seq FROM audit_log WHERE seq > ?1 AND entity = ?2 ORDER BY seq LIMIT ?3",
            "audit_log_entity",
        ),
        (
            "SELECT seq FROM audit_log WHERE seq > ?1 AND action = ?2 ORDER BY seq LIMIT ?3",
            "audit_log_action",
        ),
        (
            "SELECT seq FROM audit_log WHERE seq > ?1 AND at >= ?2 AND at < ?3 \
             ORDER BY seq LIMIT ?4",
            "audit_log_at",
        ),
    ];
    for (sql, index) in cases {
        let p = plan(sql);
        assert!(p.contains(index), "{sql}\n  plan: {p}");
        assert!(!p.contains("SCAN"), "{sql}\n  plan: {p}");
    }
}
#[cfg(unix)]
fn mode(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[cfg(unix)]
#[tokio::test]
async fn a_new_store_is_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let path = data.join("redrive.db");
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    store
        .create_queue(&name("q"), &QueuePolicy::default(), T0)
        .await
        .unwrap();
    store.enqueue(&name("q"), vec![msg("a")], T0).await.unwrap();
    assert_eq!(mode(&data), 0o700, "directory");
    assert_eq!(mode(&path), 0o600, "database");
    for suffix in ["-wal", "-shm"] {
        let p = data.join(format!("redrive.db{suffix}"));
        assert!(p.exists(), "{suffix} exists while open");
        assert_eq!(mode(&p), 0o600, "{suffix}");
    }
}

#[cfg(unix)]
#[tokio::test]
async fn an_existing_open_directory_and_database_are_tightened() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = data.join("redrive.db");
    std::fs::write(&path, b"").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    assert!(store.list_queues().await.unwrap().is_empty());
    assert_eq!(mode(&data), 0o700);
    assert_eq!(mode(&path), 0o600);
}

/// A store written at schema version 10 with move tasks in `move_tasks` opens at version
/// 11 with each task a replay plan of kind `sqs_move`: listed with the plans, read as the
/// same task, its source still held by the running one, and `move_tasks` gone.
#[tokio::test]
async fn version_10_move_tasks_become_sqs_move_plans() {
    use redrive_store::{
        MovePart, MoveTaskStatus, NewMove, PlanKind, PlanQuery, PlanStatus, move_plans,
        skeleton::move_tasks,
    };

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("redrive.db");
    {
        let conn = schema::open_writer(&path).unwrap();
        conn.execute_batch("CREATE TABLE schema_migrations (version INTEGER NOT NULL PRIMARY KEY)")
            .unwrap();
        for (v, sql) in schema::MIGRATIONS.iter().filter(|(v, _)| *v <= 10) {
            conn.execute_batch(sql).unwrap();
            conn.execute("INSERT INTO schema_migrations (version) VALUES (?1)", [v])
                .unwrap();
        }
        let insert = "INSERT INTO move_tasks (handle, seq, source, destination, \
             max_per_second, status, moved, to_move, failure_reason, owner_id, owner_name, \
             started_at, updated_at, runner, runner_until) VALUES \
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'tok_0000000000000001', 'mover', ?10, ?11, \
             ?12, ?13)";
        conn.execute(
            insert,
            rusqlite::params![
                "mv_run",
                2,
                "dlq",
                "dest",
                5,
                "RUNNING",
                3,
                7,
                None::<String>,
                T0.0,
                T0.0 + 9,
                "node-1",
                T0.0 + 30_000
            ],
        )
        .unwrap();
        conn.execute(
            insert,
            rusqlite::params![
                "mv_old",
                1,
                "dlq",
                None::<String>,
                None::<i64>,
                "FAILED",
                1,
                4,
                "authorization_revoked",
                T0.0,
                T0.0 + 5,
                None::<String>,
                None::<i64>
            ],
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("SELECT max(version) FROM schema_migrations", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'move_tasks'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 0, "move_tasks is dropped");
    let plans = store
        .list_replay_plans(&PlanQuery::default())
        .await
        .unwrap();
    let listed: Vec<(&str, PlanKind, PlanStatus, Option<&str>)> = plans
        .iter()
        .map(|p| {
            (
                p.id.as_str(),
                p.kind,
                p.m.status,
                p.m.stop_reason.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            (
                "mv_old",
                PlanKind::SqsMove,
                PlanStatus::Stopped,
                Some("authorization_revoked")
            ),
            ("mv_run", PlanKind::SqsMove, PlanStatus::Running, None),
        ]
    );
    assert_eq!(plans[1].spec["max_per_second"], serde_json::json!(5));
    assert_eq!(plans[1].m.state["moved"], serde_json::json!(3));
    assert_eq!(plans[0].destination, redrive_store::MOVE_TO_SOURCE);
    assert_eq!(plans[0].m.owner_until, move_tasks::NO_LEASE);
    let run = move_plans::get(&store, "mv_run").await.unwrap().unwrap();
    assert_eq!(
        (
            run.id.as_str(),
            run.queue.as_str(),
            run.owner_id.as_str(),
            run.owner_name.as_str(),
            run.created_at,
            run.m.updated_at
        ),
        (
            "mv_run",
            "dlq",
            "tok_0000000000000001",
            "mover",
            T0,
            Timestamp(T0.0 + 9)
        )
    );
    assert_eq!(
        run.move_part().unwrap(),
        MovePart {
            destination: Some("dest".to_owned()),
            max_per_second: Some(5),
            status: MoveTaskStatus::Running,
            moved: 3,
            to_move: 7,
            failure_reason: None,
            runner: Some("node-1".to_owned()),
            runner_until: Some(Timestamp(T0.0 + 30_000)),
            next_slot: None,
        }
    );
    // Newest first by creation order (same start time), and the running task still holds
    // its source.
    let handles: Vec<String> = move_plans::list(&store, "dlq", 10)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(handles, ["mv_run", "mv_old"]);
    let second = NewMove {
        handle: "mv_new".to_owned(),
        source: "dlq".to_owned(),
        destination: None,
        max_per_second: None,
        to_move: 0,
        owner_id: "anonymous".to_owned(),
        owner_name: "anonymous".to_owned(),
        runner: "node-2".to_owned(),
        runner_until: Timestamp(T0.0 + 30_000),
        now: T0,
    };
    assert!(matches!(
        move_plans::create(&store, &second).await,
        Err(StoreError::MoveTaskRunning { .. })
    ));
    store.close();
}

/// A word on an intent stored at version 12 (one per intent, for every entity) keeps
/// holding for every entity at version 13 (entity `*`), and words for other entities
/// can then stand beside it.
#[tokio::test]
async fn version_12_intents_hold_for_every_entity_after_the_migration() {
    use redrive_store::{IntentRecord, IntentStatus};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("redrive.db");
    {
        let conn = schema::open_writer(&path).unwrap();
        conn.execute_batch("CREATE TABLE schema_migrations (version INTEGER NOT NULL PRIMARY KEY)")
            .unwrap();
        for (v, sql) in schema::MIGRATIONS.iter().filter(|(v, _)| *v <= 12) {
            conn.execute_batch(sql).unwrap();
            conn.execute("INSERT INTO schema_migrations (version) VALUES (?1)", [v])
                .unwrap();
        }
        conn.execute(
            "INSERT INTO intents (intent_id, status, superseded_by, reason, actor, at) \
             VALUES ('i-1', 'cancelled', NULL, 'gone', 'orders-service', ?1)",
            [T0.0],
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
    let old = IntentRecord {
        intent_id: "i-1".into(),
        entity: "*".into(),
        status: IntentStatus::Cancelled,
        superseded_by: None,
        reason: Some("gone".into()),
        actor: "orders-service".into(),
        at: T0,
    };
    assert_eq!(store.intent_words("i-1").await.unwrap(), vec![old.clone()]);
    let billing = IntentRecord {
        entity: "billing".into(),
        status: IntentStatus::Superseded,
        superseded_by: Some("i-2".into()),
        at: Timestamp(T0.0 + 1),
        ..old.clone()
    };
    assert_eq!(store.put_intent(&billing).await.unwrap(), billing);
    assert_eq!(store.intent_words("i-1").await.unwrap(), vec![old, billing]);
    store.close();
}

/// The failure aggregate is read by its indexes, and a dead-letter listing by signature
/// by `(queue, area, signature, id)`: neither scans the dead letters (nor the aggregate,
/// when no queue list narrows it).
#[test]
fn failure_queries_use_indexes() {
    use redrive_core::Area;
    use redrive_store::failure::FailureQuery;
    use redrive_store::skeleton::failures::{failures_sql, hours_sql, list_sql};
    use redrive_store::{DeadLetterQuery, RecordFilter};

    use crate::dead_letters::Sqlite;

    let dir = tempfile::tempdir().unwrap();
    let conn = schema::open_writer(&dir.path().join("plan.db")).unwrap();
    schema::migrate(&conn).unwrap();
    let plan = |sql: &str| -> String {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let unbound = rusqlite::params_from_iter(std::iter::repeat_n(
            rusqlite::types::Null,
            stmt.parameter_count(),
        ));
        stmt.query_map(unbound, |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect::<Vec<_>>()
            .join(" | ")
    };
    let by_signature = list_sql::<Sqlite>(&DeadLetterQuery {
        queue: name("q"),
        area: Area::Live,
        reason: None,
        from: None,
        to: None,
        after: Some("dl_1".into()),
        limit: 10,
        filter: RecordFilter {
            signature: Some("0".repeat(32)),
            text: Some("x".into()),
            ..RecordFilter::default()
        },
    })
    .0;
    let p = plan(&by_signature);
    assert!(
        p.contains("dead_letters_signature"),
        "{by_signature}\n  plan: {p}"
    );
    let query = FailureQuery {
        area: Area::Live,
        queues: None,
        from: None,
        to: None,
        after: Some((T0, "0".repeat(32))),
        limit: 100,
        now: T0,
    };
    let recent = failures_sql::<Sqlite>(&query).0;
    let p = plan(&recent);
    assert!(
        p.contains("failure_signature_counts_recent"),
        "{recent}\n  plan: {p}"
    );
    assert!(!p.contains("TEMP B-TREE"), "{recent}\n  plan: {p}");
    let some = failures_sql::<Sqlite>(&FailureQuery {
        queues: Some(vec![name("q")]),
        ..query
    })
    .0;
    let p = plan(&some);
    assert!(!p.contains("SCAN c"), "{some}\n  plan: {p}");
    let hours = hours_sql::<Sqlite>();
    let p = plan(&hours);
    assert!(!p.contains("SCAN"), "{hours}\n  plan: {p}");
}

/// A statement whose journal outgrows memory (`SQLITE_STMTJRNL_SPILL`, .cargo/config.toml)
/// moves it to a temporary file and goes on: deleting a queue with thousands of dead
/// letters and their cases journals far more than 1 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_journal_larger_than_memory_spills_to_a_file() {
    use redrive_store::{SettleAction, Settlement};
    let (_dir, _path, store) = open(SqliteOptions::default());
    let q = queue(&store, "q", QueuePolicy::default()).await;
    let n = 3_000;
    for chunk in 0..n / 500 {
        let batch: Vec<NewMessage> = (0..500).map(|i| msg(&format!("m{chunk}-{i}"))).collect();
        store.enqueue(&q, batch, T0).await.unwrap();
    }
    loop {
        let got = store
            .receive(ReceiveParams {
                queue: q.clone(),
                max: 500,
                lock_ms: 30_000,
                now: T0,
                session: None,
            })
            .await
            .unwrap();
        if got.deliveries.is_empty() {
            break;
        }
        let items = got
            .deliveries
            .into_iter()
            .map(|d| Settlement {
                lock_token: d.lock_token,
                action: SettleAction::DeadLetter {
                    reason: "bad".to_owned(),
                    description: None,
                    by_broker: false,
                    classifier: redrive_core::Classifier::default(),
                },
            })
            .collect();
        let settled = store.settle(&q, items, T0).await.unwrap();
        assert!(settled.results.iter().all(Result::is_ok));
    }
    store.delete_queue(&q, true).await.unwrap();
    assert!(matches!(
        store.get_queue(&q).await,
        Err(StoreError::QueueNotFound { .. })
    ));
    assert!(!store.is_poisoned());
}

/// A dead letter's case opened from the record as written (`cases::open_inserted`, one row
/// from values) is, column for column, the case `OPEN_CASE` and `OPEN_TIMELINE` open from
/// its row, for records with and without an intent, a type, a session, a description and
/// a validity.
#[tokio::test]
async fn a_case_opened_from_the_inserted_record_is_the_one_its_row_opens() {
    let (_dir, _path, store) = open(SqliteOptions::default());
    let q = queue(&store, "q", QueuePolicy::default()).await;
    let mut plain = msg("m-plain");
    plain.body = "é and ü: not one byte a character".as_bytes().to_vec();
    let mut rich = msg("m-rich");
    rich.intent = Some("order-42".into());
    rich.message_type = Some("order.placed".into());
    rich.valid_until = Some(Timestamp(T0.0 + 3_600_000));
    let mut empty_intent = msg("m-empty-intent");
    empty_intent.intent = Some(String::new());
    let mut session = msg("m-session");
    session.session_id = Some("s-1".into());
    let q_sessions = queue(
        &store,
        "qs",
        QueuePolicy {
            group_ordering: true,
            ..QueuePolicy::default()
        },
    )
    .await;
    store
        .enqueue(&q, vec![plain, rich, empty_intent], T0)
        .await
        .unwrap();
    store.enqueue(&q_sessions, vec![session], T0).await.unwrap();
    let mut ids = Vec::new();
    for (queue, n, description) in [(&q, 3, Some("parse error")), (&q_sessions, 1, None)] {
        let params = redrive_store_conformance::params(queue, n, 30_000, T0, None);
        let deliveries = store.receive(params).await.unwrap().deliveries;
        assert_eq!(deliveries.len(), n as usize);
        let items = deliveries
            .iter()
            .map(|d| redrive_store::Settlement {
                lock_token: d.lock_token.clone(),
                action: redrive_store::SettleAction::DeadLetter {
                    reason: "Bad".into(),
                    description: description.map(str::to_owned),
                    by_broker: false,
                    classifier: redrive_core::Classifier::default(),
                },
            })
            .collect();
        let out = store
            .settle(queue, items, Timestamp(T0.0 + 5))
            .await
            .unwrap();
        ids.extend(
            out.effects
                .dead_lettered
                .iter()
                .map(|d| d.dead_letter_id.clone()),
        );
    }
    assert_eq!(ids.len(), 4);
    let (done, wait) = std::sync::mpsc::channel();
    store.writer.raw(move |conn| {
        let rows = |table: &str, key: &str, id: &str| -> Vec<Vec<rusqlite::types::Value>> {
            let mut stmt = conn
                .prepare(&format!("SELECT * FROM {table} WHERE {key} = ?1"))
                .unwrap();
            let n = stmt.column_count();
            stmt.query_map([id], |r| {
                (0..n)
                    .map(|i| r.get::<_, rusqlite::types::Value>(i))
                    .collect()
            })
            .unwrap()
            .map(Result::unwrap)
            .collect()
        };
        let mut compared = Vec::new();
        for id in &ids {
            let case_id = redrive_store::case_id_of(id);
            let inserted = (
                rows("cases", "id", &case_id),
                rows("case_timeline", "case_id", &case_id),
            );
            assert_eq!(inserted.0.len(), 1, "{id} opened a case");
            assert_eq!(inserted.1.len(), 1, "{id}'s case has its first entry");
            let opened_at: i64 = conn
                .query_row(
                    "SELECT opened_at FROM cases WHERE id = ?1",
                    [&case_id],
                    |r| r.get(0),
                )
                .unwrap();
            conn.execute("DELETE FROM case_timeline WHERE case_id = ?1", [&case_id])
                .unwrap();
            conn.execute("DELETE FROM cases WHERE id = ?1", [&case_id])
                .unwrap();
            crate::cases::open(conn, id, Timestamp(opened_at)).unwrap();
            let from_row = (
                rows("cases", "id", &case_id),
                rows("case_timeline", "case_id", &case_id),
            );
            compared.push((
                id.clone(),
                inserted == from_row,
                format!("{inserted:?}\n{from_row:?}"),
            ));
        }
        done.send(compared).unwrap();
    });
    for (id, same, rows) in wait.recv().unwrap() {
        assert!(same, "{id}:\n{rows}");
    }
}
