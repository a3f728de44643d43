//! Queue operations: create, update, delete (writer) and get, list, counts (readers).

use redrive_core::{Area, EntityName, QueuePolicy, Timestamp};
use redrive_store::skeleton::columns::{bad_value, to_int, to_json};
use redrive_store::skeleton::entities::{
    QueueRow, check_queue_delete, queue_exists, queue_not_found,
};
use redrive_store::skeleton::messages::count_expired_locks;
use redrive_store::{PolicyVersionRecord, QueueCounts, QueueRecord, StoreResult};
use rusqlite::{Connection, params};

use crate::error::Db;
use crate::locks::Locks;
use crate::rows::{Cols, head, head_cols, load_queue, query_all};
use crate::writer::Tx;

pub(crate) fn create(
    tx: &mut Tx<'_>,
    name: &EntityName,
    policy: &QueuePolicy,
    now: Timestamp,
) -> StoreResult<QueueRecord> {
    if tx.queue_opt(name.as_str())?.is_some() {
        return Err(queue_exists(name));
    }
    let id: i64 = tx
        .conn
        .prepare_cached(
            "INSERT INTO queues (name, policy, policy_version, created_at, updated_at, \
             next_sequence) VALUES (?1, ?2, 1, ?3, ?3, 1) RETURNING id",
        )
        .db()?
        .query_row(params![name.as_str(), to_json(policy)?, now.0], |r| {
            r.get(0)
        })
        .db()?;
    write_version(tx.conn, id, 1, policy, now)?;
    tx.forget_queue(name.as_str());
    Ok(QueueRow::created(id, name, policy, now).record())
}

pub(crate) fn update(
    tx: &mut Tx<'_>,
    name: &EntityName,
    policy: &QueuePolicy,
    expected_version: Option<u64>,
    now: Timestamp,
) -> StoreResult<QueueRecord> {
    let next = tx.queue(name)?.updated(policy, expected_version, now)?;
    tx.conn
        .prepare_cached(
            "UPDATE queues SET policy = ?2, policy_version = ?3, updated_at = ?4 WHERE id = ?1",
        )
        .db()?
        .execute(params![
            next.id,
            to_json(policy)?,
            to_int(next.version, "policy_version")?,
            now.0
        ])
        .db()?;
    write_version(tx.conn, next.id, next.version, policy, now)?;
    tx.forget_queue(name.as_str());
    Ok(next.record())
}

pub(crate) fn delete(tx: &mut Tx<'_>, name: &EntityName, force: bool) -> StoreResult<()> {
    let q = tx.queue(name)?;
    let conn = tx.conn;
    if !force {
        let messages = count(
            conn,
            "SELECT count(*) FROM messages WHERE queue_id = ?1",
            params![q.id],
        )?;
        let dead_letters = count(
            conn,
            "SELECT count(*) FROM dead_letters WHERE queue = ?1 AND area = 'live'",
            params![q.name.as_str()],
        )?;
        check_queue_delete(name, messages, dead_letters, force)?;
    }
    for sql in [
        "DELETE FROM messages WHERE queue_id = ?1",
        "DELETE FROM dedup WHERE queue_id = ?1",
        "DELETE FROM sessions WHERE queue_id = ?1",
        "DELETE FROM queue_policy_versions WHERE queue_id = ?1",
        "DELETE FROM queues WHERE id = ?1",
    ] {
        conn.prepare_cached(sql).db()?.execute([q.id]).db()?;
    }
    conn.prepare_cached("DELETE FROM dead_letters WHERE queue = ?1")
        .db()?
        .execute([name.as_str()])
        .db()?;
    conn.prepare_cached("DELETE FROM memory_locks WHERE queue_id = ?1")
        .db()?
        .execute([q.id])
        .db()?;
    {
        let mut locks = tx.locks();
        locks.drop_queue(q.id);
        locks.set_marked(q.id, false);
    }
    tx.forget_queue(name.as_str());
    Ok(())
}

/// Records `policy` as version `version` of queue `queue_id` (written with the change).
fn write_version(
    conn: &Connection,
    queue_id: i64,
    version: u64,
    policy: &QueuePolicy,
    now: Timestamp,
) -> StoreResult<()> {
    conn.prepare_cached(
        "INSERT INTO queue_policy_versions (queue_id, version, policy, changed_at) \
         VALUES (?1, ?2, ?3, ?4)",
    )
    .db()?
    .execute(params![
        queue_id,
        to_int(version, "queue_policy_versions.version")?,
        to_json(policy)?,
        now.0
    ])
    .db()?;
    Ok(())
}

/// A `count(*)`.
pub(crate) fn count(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> StoreResult<u64> {
    let mut stmt = conn.prepare_cached(sql).db()?;
    let n = stmt.query_row(params, |r| r.get::<_, i64>(0)).db()?;
    u64::try_from(n).map_err(|e| bad_value("count(*)", e))
}

// ---- reads ----------------------------------------------------------------------------

pub(crate) fn get(conn: &Connection, name: &EntityName) -> StoreResult<QueueRow> {
    load_queue(conn, name.as_str())?.ok_or_else(|| queue_not_found(name))
}

/// A page of a queue's policy versions below `before`, newest first.
pub(crate) fn policy_versions(
    conn: &Connection,
    name: &EntityName,
    before: Option<u64>,
    limit: u32,
) -> StoreResult<Vec<PolicyVersionRecord>> {
    let q = get(conn, name)?;
    let before = match before {
        Some(v) => to_int(v, "before")?,
        None => i64::MAX,
    };
    let mut stmt = conn
        .prepare_cached(
            "SELECT version, policy, changed_at FROM queue_policy_versions \
             WHERE queue_id = ?1 AND version < ?2 ORDER BY version DESC LIMIT ?3",
        )
        .db()?;
    query_all(&mut stmt, params![q.id, before, i64::from(limit)], |r| {
        PolicyVersionRecord::decode(&Cols(r))
    })
}

pub(crate) fn list(conn: &Connection) -> StoreResult<Vec<QueueRecord>> {
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            redrive_store::columns!(queue),
            " FROM queues ORDER BY name"
        ))
        .db()?;
    query_all(&mut stmt, [], |r| {
        QueueRow::decode(&Cols(r)).map(|q| q.record())
    })
}

pub(crate) fn counts(
    conn: &Connection,
    name: &EntityName,
    now: Timestamp,
    locks: &Locks,
) -> StoreResult<QueueCounts> {
    let row = load_queue(conn, name.as_str())?.ok_or_else(|| queue_not_found(name))?;
    let q = row.id;
    let oldest: Option<i64> = conn
        .prepare_cached("SELECT min(enqueued_at) FROM messages WHERE queue_id = ?1")
        .db()?
        .query_row([q], |r| r.get(0))
        .db()?;
    let mut counts = QueueCounts {
        active: count(
            conn,
            "SELECT count(*) FROM messages \
             WHERE queue_id = ?1 AND state = 'available' AND due_at <= ?2",
            params![q, now.0],
        )?,
        scheduled: count(
            conn,
            "SELECT count(*) FROM messages \
             WHERE queue_id = ?1 AND state = 'available' AND due_at > ?2",
            params![q, now.0],
        )?,
        locked: count(
            conn,
            "SELECT count(*) FROM messages \
             WHERE queue_id = ?1 AND state = 'locked' AND due_at > ?2",
            params![q, now.0],
        )?,
        deferred: count(
            conn,
            "SELECT count(*) FROM messages WHERE queue_id = ?1 AND state = 'deferred'",
            params![q],
        )?,
        dead_lettered: count(
            conn,
            "SELECT count(*) FROM dead_letters WHERE queue = ?1 AND area = ?2",
            params![name.as_str(), Area::Live.as_str()],
        )?,
        oldest_enqueued_at: oldest.map(Timestamp),
    };
    // Locks that ran out by now, their release not yet written: where a browse shows them.
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            head_cols!(),
            " FROM messages WHERE queue_id = ?1 AND state = 'locked' AND due_at <= ?2"
        ))
        .db()?;
    let expired = query_all(&mut stmt, params![q, now.0], head)?;
    count_expired_locks(&mut counts, &expired, &row.policy, now);
    locks
        .lock()
        .correct_counts(q, &row.policy, &mut counts, now);
    Ok(counts)
}
