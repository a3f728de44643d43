//! Locks held in memory (`crate::locks`): what the rows store meanwhile, a clean close, a
//! crash, and receives that must find messages due before the rows held.

use std::path::{Path, PathBuf};

use redrive_core::{EvidenceQuality, MessageState, QueuePolicy};
use redrive_store::{Delivery, SettleAction, Settlement, Store, StoreError};
use redrive_store_conformance::{T0, at, msg, name, params, policy};

use super::*;

fn open(path: &Path) -> SqliteStore {
    SqliteStore::open(path, SqliteOptions::default()).unwrap()
}

/// A store in a new directory, with queue `q` (default policy).
async fn with_queue() -> (tempfile::TempDir, PathBuf, SqliteStore, EntityName) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("redrive.db");
    let store = open(&path);
    let q = name("q");
    store
        .create_queue(&q, &QueuePolicy::default(), T0)
        .await
        .unwrap();
    (dir, path, store, q)
}

/// `(state, delivery_count, count_approximate)` of the row of `sequence` of queue `q`,
/// read from the file on a connection of its own.
fn row_of(path: &Path, q: &str, sequence: i64) -> Option<(String, i64, bool)> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT state, delivery_count, count_approximate FROM messages \
             WHERE sequence = ?1 AND queue_id = (SELECT id FROM queues WHERE name = ?2)",
        )
        .unwrap();
    let mut rows = stmt.query(rusqlite::params![sequence, q]).unwrap();
    rows.next()
        .unwrap()
        .map(|r| (r.get(0).unwrap(), r.get(1).unwrap(), r.get(2).unwrap()))
}

/// As [`row_of`], on queue `q`.
fn row(path: &Path, sequence: i64) -> Option<(String, i64, bool)> {
    row_of(path, "q", sequence)
}

fn markers(path: &Path) -> i64 {
    rusqlite::Connection::open(path)
        .unwrap()
        .query_row("SELECT count(*) FROM memory_locks", [], |r| r.get(0))
        .unwrap()
}

async fn send(store: &SqliteStore, q: &EntityName, ids: &[&str], now: Timestamp) {
    let messages = ids.iter().map(|id| msg(id, id.as_bytes())).collect();
    store.enqueue(q, messages, now).await.unwrap();
}

async fn take(store: &SqliteStore, q: &EntityName, max: u32, now: Timestamp) -> Vec<Delivery> {
    store
        .receive(params(q, max, 30_000, now, None))
        .await
        .unwrap()
        .deliveries
}

async fn settle(
    store: &SqliteStore,
    q: &EntityName,
    d: &Delivery,
    action: SettleAction,
    now: Timestamp,
) -> redrive_store::Settled {
    let item = Settlement {
        lock_token: d.lock_token.clone(),
        action,
    };
    let mut out = store.settle(q, vec![item], now).await.unwrap();
    out.results.remove(0).unwrap()
}

fn abandon() -> SettleAction {
    SettleAction::Abandon {
        delay_ms: Some(0),
        last_attempt: None,
    }
}

fn ids(d: &[Delivery]) -> Vec<&str> {
    d.iter().map(|d| d.message.message_id.as_str()).collect()
}

#[tokio::test]
async fn a_plain_receive_locks_in_memory_and_writes_no_row() {
    let (_dir, path, store, q) = with_queue().await;
    send(&store, &q, &["a", "b"], T0).await;
    let got = take(&store, &q, 1, T0).await;
    assert_eq!(ids(&got), ["a"]);
    // The row is as it was; the broker shows the message as it is.
    assert_eq!(row(&path, 1), Some(("available".into(), 0, false)));
    assert_eq!(
        markers(&path),
        1,
        "the queue is marked in the receive's commit"
    );
    let counts = store.queue_counts(&q, T0).await.unwrap();
    assert_eq!((counts.active, counts.locked), (1, 1));
    let peeked = store.peek(&q, 1, 10, T0).await.unwrap();
    assert_eq!(peeked[0].state, MessageState::Locked);
    assert_eq!(peeked[0].delivery_count, 1);
    assert_eq!(
        store.next_wake(&q, T0).await.unwrap(),
        Some(at(30_000)),
        "the lock's expiry wakes a waiting receiver"
    );
    // The next receive goes past it; completing deletes the row.
    assert_eq!(ids(&take(&store, &q, 5, T0).await), ["b"]);
    settle(&store, &q, &got[0], SettleAction::Complete, T0).await;
    assert_eq!(row(&path, 1), None);
    // Once no lock of the queue is held, the sweep removes its marker.
    let d = take(&store, &q, 5, T0).await;
    assert!(d.is_empty());
    store.sweep(T0, 100).await.unwrap();
    assert_eq!(markers(&path), 1, "b is still locked");
    let b = store.peek(&q, 2, 1, T0).await.unwrap();
    assert_eq!(b[0].state, MessageState::Locked);
    store.sweep(at(30_000), 100).await.unwrap();
    assert_eq!(
        markers(&path),
        0,
        "b's lock ran out and was released to its row"
    );
    assert_eq!(row(&path, 2), Some(("available".into(), 1, false)));
}

#[tokio::test]
async fn an_abandon_writes_the_row_from_what_it_stores() {
    let (_dir, path, store, q) = with_queue().await;
    send(&store, &q, &["a"], T0).await;
    let d = take(&store, &q, 1, T0).await;
    settle(&store, &q, &d[0], abandon(), T0).await;
    assert_eq!(row(&path, 1), Some(("available".into(), 1, false)));
    let d = take(&store, &q, 1, at(1)).await;
    assert_eq!(d[0].message.delivery_count, 2);
    settle(&store, &q, &d[0], SettleAction::Defer, at(1)).await;
    assert_eq!(row(&path, 1), Some(("deferred".into(), 2, false)));
}

#[tokio::test]
async fn locks_held_in_memory_outlive_a_clean_close() {
    let (_dir, path, store, q) = with_queue().await;
    send(&store, &q, &["a", "b"], T0).await;
    let got = take(&store, &q, 1, T0).await;
    store.close();
    assert_eq!(row(&path, 1), Some(("locked".into(), 1, false)));
    assert_eq!(markers(&path), 0);
    drop(store);
    let store = open(&path);
    // Still locked after the restart: not received again, and its token completes it.
    assert_eq!(ids(&take(&store, &q, 5, at(1)).await), ["b"]);
    settle(&store, &q, &got[0], SettleAction::Complete, at(1)).await;
    assert_eq!(row(&path, 1), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_with_locks_held_counts_their_deliveries_approximate() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("redrive.db");
    let store = open(&path);
    let (q, other) = (name("q"), name("other"));
    let two = policy(|p| p.max_delivery_count = 2);
    store.create_queue(&q, &two, T0).await.unwrap();
    store.create_queue(&other, &two, T0).await.unwrap();
    send(&store, &q, &["a", "b"], T0).await;
    send(&store, &other, &["c"], T0).await;
    // `other`'s message is received and abandoned: its count is in its row, and no lock
    // of `other` is held when the process stops.
    let c = take(&store, &other, 1, T0).await;
    settle(&store, &other, &c[0], abandon(), T0).await;
    store.sweep(T0, 100).await.unwrap();
    let got = take(&store, &q, 1, T0).await;
    assert_eq!(ids(&got), ["a"]);
    // The process stops without closing: the writer never writes again.
    store.abandon_as_crashed();
    let store = open(&path);
    // Which of q's messages was delivered is not known: each counts one more, approximate.
    assert_eq!(row(&path, 1), Some(("available".into(), 1, true)));
    assert_eq!(row(&path, 2), Some(("available".into(), 1, true)));
    assert_eq!(
        row_of(&path, "other", 1),
        Some(("available".into(), 1, false))
    );
    assert_eq!(markers(&path), 0);
    // The decision is audited: one entry for `q`, none for `other`.
    let audit = store
        .list_audit(&redrive_store::AuditQuery {
            action: Some(crate::locks::RAISED_ACTION.into()),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let audited: Vec<_> = audit
        .iter()
        .map(|e| (e.fields.entity.as_deref(), e.fields.targets.clone()))
        .collect();
    assert_eq!(audited, [(Some("q"), vec!["messages=2".to_owned()])]);
    // `a` is received again at its second delivery, abandoned past the maximum, and its
    // dead letter says its count is approximate.
    let again = take(&store, &q, 1, at(1)).await;
    assert_eq!(ids(&again), ["a"]);
    assert_eq!(again[0].message.delivery_count, 2);
    let r = settle(&store, &q, &again[0], abandon(), at(1)).await;
    let id = r.dead_letter_id.expect("dead-lettered at the maximum");
    let record = store.get_dead_letter(&q, &id).await.unwrap();
    assert_eq!(record.delivery_count, 2);
    assert_eq!(record.count_quality, EvidenceQuality::Approximate);
    // `other`'s count stayed exact.
    let c = take(&store, &other, 1, at(1)).await;
    let r = settle(&store, &other, &c[0], abandon(), at(1)).await;
    let id = r.dead_letter_id.expect("dead-lettered at the maximum");
    let record = store.get_dead_letter(&other, &id).await.unwrap();
    assert_eq!(record.count_quality, EvidenceQuality::Exact);
}

#[tokio::test]
async fn a_message_due_before_the_locks_held_is_received() {
    let (_dir, _path, store, q) = with_queue().await;
    send(&store, &q, &["a", "b", "c"], at(10)).await;
    let held = take(&store, &q, 3, at(10)).await;
    assert_eq!(ids(&held), ["a", "b", "c"]);
    // Abandoned at the same millisecond: due at (10, 1), before c's (10, 3).
    settle(&store, &q, &held[0], abandon(), at(10)).await;
    assert_eq!(ids(&take(&store, &q, 5, at(10)).await), ["a"]);
    // A send whose time was read before the receives: due at 5.
    send(&store, &q, &["d"], at(5)).await;
    assert_eq!(ids(&take(&store, &q, 5, at(10)).await), ["d"]);
    // Locks that ran out: released by the receive's sweep, received again.
    let again = take(&store, &q, 5, at(30_011)).await;
    let counts: Vec<(&str, u32)> = again
        .iter()
        .map(|d| (d.message.message_id.as_str(), d.message.delivery_count))
        .collect();
    assert_eq!(counts, [("a", 3), ("b", 2), ("c", 2), ("d", 2)]);
}

#[tokio::test]
async fn purging_or_deleting_a_queue_drops_its_locks() {
    let (_dir, path, store, q) = with_queue().await;
    send(&store, &q, &["a"], T0).await;
    let d = take(&store, &q, 1, T0).await;
    assert_eq!(store.purge_messages(&q, T0).await.unwrap(), 1);
    let item = Settlement {
        lock_token: d[0].lock_token.clone(),
        action: SettleAction::Complete,
    };
    let out = store.settle(&q, vec![item], T0).await.unwrap();
    assert!(out.results[0].is_err(), "the purged message's lock is gone");
    assert_eq!(store.queue_counts(&q, T0).await.unwrap().messages(), 0);
    send(&store, &q, &["b"], T0).await;
    assert_eq!(ids(&take(&store, &q, 1, T0).await), ["b"]);
    store.delete_queue(&q, true).await.unwrap();
    assert_eq!(markers(&path), 0, "the deleted queue's marker went with it");
    assert!(matches!(
        store.queue_counts(&q, T0).await,
        Err(StoreError::QueueNotFound { .. })
    ));
}
