//! The failure signatures of dead letters written before schema 19, filled in when the
//! store opens.
//!
//! A record written before version 19 has no signature and stays out of the aggregate of
//! failures (`GET /v1/failures`). Masking its description is Rust, not SQL, so the store
//! does it at open, after the migrations and before the writer starts: in batches of at
//! most [`BATCH`] records (fewer when their bodies pass
//! [`MAX_CLAIM_BYTES`](redrive_store::skeleton::replay::MAX_CLAIM_BYTES)), in id order,
//! each batch its own transaction. A batch computes each record's shape with
//! [`FailureShape::of`], as the insert path does, keeps the shape's fields in
//! `failure_signatures`, and sets the record's `signature` and `source`; the trigger of
//! schema 22 counts it into its area's aggregate as a new record is counted on insert
//! (`rows::count_signature`).
//!
//! Completion is not recorded apart: the records left to do are those of the partial
//! index `dead_letters_unsigned`, so once none is left, every later open costs one probe
//! of an empty index. A backfill cut short (a crash, a failed batch) leaves the rest
//! without a signature, and the next open resumes with them; a record done already is
//! never counted again (the UPDATE asks for `signature IS NULL`). A row this build cannot
//! read keeps no signature and is passed over (and counted in the log) at each open.

use redrive_core::EntityName;
use redrive_store::failure::FailureShape;
use redrive_store::skeleton::columns::bad_value;
use redrive_store::skeleton::dead_letters::undecodable_reason;
use redrive_store::skeleton::replay::claim_cut;
use redrive_store::{StoreError, StoreResult, UndecodableRecord};
use rusqlite::{Connection, params};

use crate::dead_letters::load_record;
use crate::error::Db;
use crate::rows::insert_signature;

/// The most records one batch reads.
#[cfg(not(test))]
pub(crate) const BATCH: i64 = 500;
/// Two in unit tests, so that a few records take several batches.
#[cfg(test)]
pub(crate) const BATCH: i64 = 2;

/// The next records without a signature, with their body sizes: `(after, limit)`.
/// Read through the partial index `dead_letters_unsigned`.
const UNSIGNED: &str = "SELECT queue, id, length(body) FROM dead_letters \
     WHERE signature IS NULL AND id > ?1 ORDER BY id LIMIT ?2";

/// What a backfill did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Backfilled {
    /// Records that got their signature.
    pub(crate) signed: u64,
    /// Records passed over because their row cannot be read.
    pub(crate) unreadable: u64,
}

/// Fills in the signatures of every record without one, a batch per transaction, and
/// logs how many. An error stops it after the batches already committed.
pub(crate) fn run(conn: &Connection) -> StoreResult<Backfilled> {
    let mut done = Backfilled::default();
    let mut after = String::new();
    loop {
        conn.execute_batch("BEGIN IMMEDIATE").db()?;
        let batch = match batch(conn, &after, &mut done) {
            Ok(b) => b,
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                return Err(e);
            }
        };
        conn.execute_batch("COMMIT").db()?;
        match batch {
            Some(last) => after = last,
            None => break,
        }
    }
    if done != Backfilled::default() {
        tracing::info!(
            signed = done.signed,
            unreadable = done.unreadable,
            "backfilled the failure signatures of dead letters written before schema 19"
        );
    }
    Ok(done)
}

/// One batch: the records without a signature after id `after`. Returns the last id it
/// looked at, `None` when there was none left.
fn batch(conn: &Connection, after: &str, done: &mut Backfilled) -> StoreResult<Option<String>> {
    let order: Vec<(String, String, u64)> = {
        let mut stmt = conn.prepare_cached(UNSIGNED).db()?;
        let rows = stmt
            .query_map(params![after, BATCH], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get::<_, Option<i64>>(2)?))
            })
            .db()?;
        let mut out = Vec::new();
        for row in rows {
            let (q, id, n) = row.db()?;
            out.push((q, id, n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0)));
        }
        out
    };
    let take = claim_cut(order.iter().map(|(_, _, n)| *n));
    let mut last = None;
    for (queue, id, _) in order.into_iter().take(take) {
        match sign(conn, &queue, &id)? {
            Ok(signed) => done.signed += u64::from(signed),
            Err(u) => {
                tracing::warn!(queue = %u.queue, id = %u.id, reason = %u.reason,
                    "a dead letter without a failure signature cannot be read; left without one");
                done.unreadable += 1;
            }
        }
        last = Some(id);
    }
    Ok(last)
}

/// Signs one record: `Ok(Ok(true))` when this call set its signature, `Ok(Ok(false))`
/// when it has one already or is gone, `Ok(Err(..))` when its row cannot be read.
fn sign(conn: &Connection, queue: &str, id: &str) -> StoreResult<Result<bool, UndecodableRecord>> {
    let name: EntityName = match queue.parse() {
        Ok(n) => n,
        Err(e) => {
            return Ok(Err(UndecodableRecord {
                queue: queue.to_owned(),
                id: id.to_owned(),
                reason: undecodable_reason(&bad_value("dead_letters.queue", e)),
            }));
        }
    };
    let record = match load_record(conn, &name, id) {
        Ok(Some(r)) => r,
        Ok(None) => return Ok(Ok(false)),
        Err(StoreError::DeadLetterUndecodable { queue, id, reason }) => {
            return Ok(Err(UndecodableRecord { queue, id, reason }));
        }
        Err(e) => return Err(e),
    };
    let shape = FailureShape::of(&record);
    let signature = shape.id();
    insert_signature(conn, &signature, &shape)?;
    let changed = conn
        .prepare_cached(
            "UPDATE dead_letters SET signature = ?2, source = ?3 \
             WHERE id = ?1 AND signature IS NULL",
        )
        .db()?
        .execute(params![id, signature, shape.source])
        .db()?;
    Ok(Ok(changed > 0))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use redrive_core::{Area, Classifier, Properties, PropertyValue, QueuePolicy, Timestamp};
    use redrive_store::failure::{FailureQuery, FailureSignature};
    use redrive_store::{NewMessage, SettleAction, Settlement, Store};
    use redrive_store_conformance::{T0, at, msg, name, params};

    use crate::{SqliteOptions, SqliteStore};

    const HOUR: i64 = 3_600_000;

    /// Dead-letters a new message of `q` with `description` at `now`.
    async fn fail(store: &SqliteStore, q: &str, id: &str, description: &str, now: Timestamp) {
        let q = name(q);
        let mut properties = Properties::new();
        properties.insert("source".into(), PropertyValue::String("shop".into()));
        store
            .enqueue(
                &q,
                vec![NewMessage {
                    properties,
                    ..msg(id, b"{}")
                }],
                now,
            )
            .await
            .unwrap();
        let d = store
            .receive(params(&q, 1, 30_000, now, None))
            .await
            .unwrap()
            .deliveries;
        let out = store
            .settle(
                &q,
                vec![Settlement {
                    lock_token: d[0].lock_token.clone(),
                    action: SettleAction::DeadLetter {
                        reason: "Bad".into(),
                        description: Some(description.into()),
                        by_broker: false,
                        classifier: Classifier::default(),
                    },
                }],
                now,
            )
            .await
            .unwrap();
        assert!(out.results[0].as_ref().unwrap().dead_letter_id.is_some());
    }

    async fn failures(store: &SqliteStore, area: Area) -> Vec<FailureSignature> {
        store
            .list_failures(&FailureQuery {
                area,
                queues: None,
                from: None,
                to: None,
                after: None,
                limit: 100,
                now: at(3 * HOUR),
            })
            .await
            .unwrap()
    }

    /// Makes every record of the file at `path` look written before schema 19: no
    /// signature, no source, and nothing of them in the aggregate.
    fn forget_signatures(path: &Path) {
        let conn = crate::schema::open_writer(path).unwrap();
        conn.execute_batch(
            "UPDATE dead_letters SET signature = NULL, source = NULL; \
             DELETE FROM failure_signatures; DELETE FROM failure_signature_counts; \
             DELETE FROM failure_signature_hours;",
        )
        .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_without_a_signature_are_counted_once_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("redrive.db");
        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        store
            .create_queue(&name("orders"), &QueuePolicy::default(), T0)
            .await
            .unwrap();
        // Three records of one shape and one of another, archived: two batches of two
        // in tests.
        fail(&store, "orders", "m1", "order 17 has no amount", T0).await;
        fail(&store, "orders", "m2", "order 18 has no amount", at(HOUR)).await;
        fail(
            &store,
            "orders",
            "m3",
            "order 19 has no amount",
            at(2 * HOUR),
        )
        .await;
        fail(&store, "orders", "m4", "timeout after 30s", at(2 * HOUR)).await;
        let archived = store
            .list_dead_letters(&redrive_store::DeadLetterQuery {
                queue: name("orders"),
                area: Area::Live,
                reason: None,
                from: None,
                to: None,
                after: None,
                limit: 100,
                filter: redrive_store::RecordFilter::default(),
            })
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.message_id == "m4")
            .unwrap()
            .id;
        store
            .move_dead_letter(&name("orders"), &archived, Area::Archived, at(2 * HOUR))
            .await
            .unwrap();
        // The live area counts m4's shape too (count 1, live 0): the backfill, which
        // finds m4 archived, cannot know it was live once.
        let written_live: Vec<FailureSignature> = failures(&store, Area::Live)
            .await
            .into_iter()
            .filter(|s| s.live > 0)
            .collect();
        let written_archived = failures(&store, Area::Archived).await;
        assert_eq!(written_live.len(), 1);
        assert_eq!(written_live[0].count, 3);
        store.close();
        drop(store);

        forget_signatures(&path);
        {
            let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
            let live = failures(&store, Area::Live).await;
            assert_eq!(live.len(), 1, "the three records share one shape");
            let s = &live[0];
            assert_eq!(
                s.id, written_live[0].id,
                "the shape the insert path computes"
            );
            assert_eq!(s.shape, written_live[0].shape);
            assert_eq!(s.shape.source.as_deref(), Some("shop"));
            assert_eq!((s.count, s.live), (3, 3));
            assert_eq!((s.first_seen, s.last_seen), (T0, at(2 * HOUR)));
            assert_eq!(s.sparkline, written_live[0].sparkline);
            let archived = failures(&store, Area::Archived).await;
            assert_eq!(archived.len(), 1);
            assert_eq!(archived[0].id, written_archived[0].id);
            assert_eq!((archived[0].count, archived[0].live), (1, 1));
            let unsigned: i64 = crate::schema::open_reader(&path)
                .unwrap()
                .query_row(
                    "SELECT count(*) FROM dead_letters WHERE signature IS NULL",
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(unsigned, 0);
        }
        // A second open finds nothing to do and counts nothing twice.
        let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        let live = failures(&store, Area::Live).await;
        assert_eq!((live[0].count, live[0].live), (3, 3));
        assert_eq!(failures(&store, Area::Archived).await[0].count, 1);
    }

    #[test]
    fn the_records_left_are_found_through_the_partial_index() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::schema::open_writer(&dir.path().join("plan.db")).unwrap();
        crate::schema::migrate(&conn).unwrap();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {}", super::UNSIGNED))
            .unwrap()
            .query_map(
                rusqlite::params![rusqlite::types::Null, rusqlite::types::Null],
                |r| r.get::<_, String>(3),
            )
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let plan = plan.join(" | ");
        assert!(plan.contains("dead_letters_unsigned"), "{plan}");
        assert!(
            !plan.contains("TEMP B-TREE"),
            "ordered by the index: {plan}"
        );
    }

    #[test]
    fn a_backfill_cut_short_resumes_and_a_signed_record_is_not_signed_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("redrive.db");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
            store
                .create_queue(&name("orders"), &QueuePolicy::default(), T0)
                .await
                .unwrap();
            for i in 0..5 {
                fail(
                    &store,
                    "orders",
                    &format!("m{i}"),
                    "order 1 has no amount",
                    T0,
                )
                .await;
            }
            store.close();
        });
        forget_signatures(&path);
        let conn = crate::schema::open_writer(&path).unwrap();
        // One batch commits, then the process stops: the rest stay without a signature.
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        let mut done = super::Backfilled::default();
        let last = super::batch(&conn, "", &mut done).unwrap().unwrap();
        conn.execute_batch("COMMIT").unwrap();
        assert_eq!(done.signed, 2);
        // A batch over records signed already signs none of them again.
        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        for (queue, id) in conn
            .prepare("SELECT queue, id FROM dead_letters WHERE id <= ?1")
            .unwrap()
            .query_map([&last], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect::<Vec<_>>()
        {
            assert!(!super::sign(&conn, &queue, &id).unwrap().unwrap());
        }
        conn.execute_batch("COMMIT").unwrap();
        // The next open does the other three.
        assert_eq!(super::run(&conn).unwrap().signed, 3);
        assert_eq!(super::run(&conn).unwrap(), super::Backfilled::default());
        drop(conn);
        rt.block_on(async {
            let store = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
            let live = failures(&store, Area::Live).await;
            assert_eq!(live.len(), 1);
            assert_eq!((live[0].count, live[0].live), (5, 5));
        });
    }
}
