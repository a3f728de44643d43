//! Queue operations: create, update, delete (writer) and get, list, counts (readers).

use std::sync::Arc;

use redrive_core::{Area, EntityName, QueuePolicy, Timestamp};
use redrive_store::{QueueCounts, QueueRecord, StoreError, StoreResult};
use rusqlite::{Connection, params};

use crate::error::{Db, SqliteError, backend};
use crate::rows::{QueueInfo, load_queue, queue_from_row, queue_id, queue_not_found};
use crate::writer::Tx;

fn policy_json(policy: &QueuePolicy) -> StoreResult<String> {
    serde_json::to_string(policy).map_err(StoreError::backend)
}

fn version_sql(v: u64) -> StoreResult<i64> {
    i64::try_from(v).map_err(|_| backend(SqliteError::OutOfRange("policy_version")))
}

pub(crate) fn create(
    tx: &mut Tx<'_>,
    name: &EntityName,
    policy: &QueuePolicy,
    now: Timestamp,
) -> StoreResult<QueueRecord> {
    if tx.queue_opt(name.as_str())?.is_some() {
        return Err(StoreError::QueueExists {
            queue: name.to_string(),
        });
    }
    let id: i64 = tx
        .conn
        .prepare_cached(
            "INSERT INTO queues (name, policy, policy_version, created_at, updated_at, \
             next_sequence) VALUES (?1, ?2, 1, ?3, ?3, 1) RETURNING id",
        )
        .db()?
        .query_row(params![name.as_str(), policy_json(policy)?, now.0], |r| {
            r.get(0)
        })
        .db()?;
    tx.forget_queue(name.as_str());
    Ok(QueueInfo {
        id,
        name: name.clone(),
        policy: policy.clone(),
        version: 1,
        created_at: now,
        updated_at: now,
    }
    .record())
}

pub(crate) fn update(
    tx: &mut Tx<'_>,
    name: &EntityName,
    policy: &QueuePolicy,
    expected_version: Option<u64>,
    now: Timestamp,
) -> StoreResult<QueueRecord> {
    let current = tx.queue(name)?;
    match expected_version {
        Some(expected) if expected != current.version => {
            return Err(StoreError::VersionConflict {
                expected,
                actual: current.version,
            });
        }
        _ => {}
    }
    let version = current.version + 1;
    tx.conn
        .prepare_cached(
            "UPDATE queues SET policy = ?2, policy_version = ?3, updated_at = ?4 WHERE name = ?1",
        )
        .db()?
        .execute(params![
            name.as_str(),
            policy_json(policy)?,
            version_sql(version)?,
            now.0
        ])
        .db()?;
    tx.forget_queue(name.as_str());
    Ok(QueueInfo {
        id: current.id,
        name: name.clone(),
        policy: policy.clone(),
        version,
        created_at: current.created_at,
        updated_at: now,
    }
    .record())
}

pub(crate) fn delete(tx: &mut Tx<'_>, name: &EntityName, force: bool) -> StoreResult<()> {
    let q: Arc<QueueInfo> = tx.queue(name)?;
    let conn = tx.conn;
    if !force {
        let messages = count(
            conn,
            "SELECT count(*) FROM messages WHERE queue_id = ?1",
            q.id,
        )?;
        let dead_letters = count_named(
            conn,
            "SELECT count(*) FROM dead_letters WHERE queue = ?1 AND area = 'live'",
            q.name.as_str(),
        )?;
        if messages > 0 || dead_letters > 0 {
            return Err(StoreError::QueueNotEmpty {
                queue: name.to_string(),
                messages,
                dead_letters,
            });
        }
    }
    for sql in [
        "DELETE FROM messages WHERE queue_id = ?1",
        "DELETE FROM dedup WHERE queue_id = ?1",
        "DELETE FROM sessions WHERE queue_id = ?1",
        "DELETE FROM queues WHERE id = ?1",
    ] {
        conn.prepare_cached(sql).db()?.execute([q.id]).db()?;
    }
    conn.prepare_cached("DELETE FROM dead_letters WHERE queue = ?1")
        .db()?
        .execute([name.as_str()])
        .db()?;
    tx.forget_queue(name.as_str());
    Ok(())
}

fn count(conn: &Connection, sql: &str, queue_id: i64) -> StoreResult<u64> {
    let n: i64 = conn
        .prepare_cached(sql)
        .db()?
        .query_row([queue_id], |r| r.get(0))
        .db()?;
    u64::try_from(n).map_err(|_| backend(SqliteError::OutOfRange("count")))
}

fn count_named(conn: &Connection, sql: &str, queue: &str) -> StoreResult<u64> {
    let n: i64 = conn
        .prepare_cached(sql)
        .db()?
        .query_row([queue], |r| r.get(0))
        .db()?;
    u64::try_from(n).map_err(|_| backend(SqliteError::OutOfRange("count")))
}

fn count_at(conn: &Connection, sql: &str, queue_id: i64, now: Timestamp) -> StoreResult<u64> {
    let n: i64 = conn
        .prepare_cached(sql)
        .db()?
        .query_row(params![queue_id, now.0], |r| r.get(0))
        .db()?;
    u64::try_from(n).map_err(|_| backend(SqliteError::OutOfRange("count")))
}

// ---- reads ----------------------------------------------------------------------------

pub(crate) fn get(conn: &Connection, name: &EntityName) -> StoreResult<QueueRecord> {
    load_queue(conn, name.as_str())?
        .map(|q| q.record())
        .ok_or_else(|| queue_not_found(name))
}

pub(crate) fn list(conn: &Connection) -> StoreResult<Vec<QueueRecord>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT name, policy, policy_version, created_at, updated_at, id FROM queues \
             ORDER BY name",
        )
        .db()?;
    let rows = stmt.query_map([], queue_from_row).db()?;
    rows.map(|r| r.map(|q| q.record()).db()).collect()
}

pub(crate) fn counts(
    conn: &Connection,
    name: &EntityName,
    now: Timestamp,
) -> StoreResult<QueueCounts> {
    let q = queue_id(conn, name)?;
    let oldest: Option<i64> = conn
        .prepare_cached("SELECT min(enqueued_at) FROM messages WHERE queue_id = ?1")
        .db()?
        .query_row([q], |r| r.get(0))
        .db()?;
    Ok(QueueCounts {
        active: count_at(
            conn,
            "SELECT count(*) FROM messages \
             WHERE queue_id = ?1 AND state = 'available' AND due_at <= ?2",
            q,
            now,
        )?,
        scheduled: count_at(
            conn,
            "SELECT count(*) FROM messages \
             WHERE queue_id = ?1 AND state = 'available' AND due_at > ?2",
            q,
            now,
        )?,
        locked: count(
            conn,
            "SELECT count(*) FROM messages WHERE queue_id = ?1 AND state = 'locked'",
            q,
        )?,
        deferred: count(
            conn,
            "SELECT count(*) FROM messages WHERE queue_id = ?1 AND state = 'deferred'",
            q,
        )?,
        dead_lettered: conn
            .prepare_cached("SELECT count(*) FROM dead_letters WHERE queue = ?1 AND area = ?2")
            .db()?
            .query_row(params![name.as_str(), Area::Live.as_str()], |r| {
                r.get::<_, i64>(0)
            })
            .db()
            .and_then(|n| {
                u64::try_from(n).map_err(|_| backend(SqliteError::OutOfRange("count")))
            })?,
        oldest_enqueued_at: oldest.map(Timestamp),
    })
}
