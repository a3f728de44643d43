//! Queue operations: create, update, delete, and the reads get, list, counts.

use std::sync::Arc;

use redrive_core::{EntityName, QueuePolicy, Timestamp};
use redrive_store::{QueueCounts, QueueRecord, StoreError, StoreResult};

use crate::pool::Db;
use crate::rows::{
    LOCK_QUEUE_EXCLUSIVE, QueueInfo, count_u64, decode, forget_queue, get, queue_cols,
    queue_from_row, queue_not_found, version_sql,
};

fn policy_json(policy: &QueuePolicy) -> StoreResult<String> {
    serde_json::to_string(policy).map_err(StoreError::backend)
}

pub(crate) async fn create(
    db: &Db<'_>,
    name: &EntityName,
    policy: &QueuePolicy,
    now: Timestamp,
) -> StoreResult<QueueRecord> {
    // One statement decides: a concurrent create of the same name waits on the unique
    // index and then does nothing.
    let row = db
        .query_opt(
            "INSERT INTO queues (name, policy, policy_version, created_at, updated_at) \
             VALUES ($1, $2, 1, $3, $3) ON CONFLICT (name) DO NOTHING RETURNING id",
            &[&name.as_str(), &policy_json(policy)?, &now.0],
        )
        .await?;
    let Some(row) = row else {
        return Err(StoreError::QueueExists {
            queue: name.to_string(),
        });
    };
    forget_queue(db, name.as_str());
    Ok(QueueInfo {
        id: get(&row, 0)?,
        name: name.clone(),
        policy: policy.clone(),
        version: 1,
        created_at: now,
        updated_at: now,
        floor: Arc::default(),
    }
    .record())
}

/// The queue locked `FOR UPDATE` and its guard taken exclusively (policy change,
/// delete): waits for every operation that holds the queue's row or its shared guard
/// (`rows::LOCK_QUEUE_SHARED`), and makes later ones wait. The statements after it see
/// what those operations committed.
async fn lock_exclusive(db: &Db<'_>, name: &EntityName) -> StoreResult<QueueInfo> {
    let row = db
        .query_opt(
            concat!(
                "SELECT ",
                queue_cols!(),
                " FROM queues WHERE name = $1 FOR UPDATE"
            ),
            &[&name.as_str()],
        )
        .await?
        .ok_or_else(|| queue_not_found(name))?;
    let q = queue_from_row(&row)?;
    db.query(LOCK_QUEUE_EXCLUSIVE, &[&q.id]).await?;
    Ok(q)
}

pub(crate) async fn update(
    db: &Db<'_>,
    name: &EntityName,
    policy: &QueuePolicy,
    expected_version: Option<u64>,
    now: Timestamp,
) -> StoreResult<QueueRecord> {
    let current = lock_exclusive(db, name).await?;
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
    db.execute(
        "UPDATE queues SET policy = $2, policy_version = $3, updated_at = $4 WHERE id = $1",
        &[
            &current.id,
            &policy_json(policy)?,
            &version_sql(version)?,
            &now.0,
        ],
    )
    .await?;
    forget_queue(db, name.as_str());
    Ok(QueueInfo {
        id: current.id,
        name: name.clone(),
        policy: policy.clone(),
        version,
        created_at: current.created_at,
        updated_at: now,
        floor: Arc::default(),
    }
    .record())
}

pub(crate) async fn delete(db: &Db<'_>, name: &EntityName, force: bool) -> StoreResult<()> {
    let q = lock_exclusive(db, name).await?;
    if !force {
        let row = db
            .query_one(
                "SELECT (SELECT count(*) FROM messages WHERE queue_id = $1), \
                 (SELECT count(*) FROM dead_letters WHERE queue = $2 AND area = 'live')",
                &[&q.id, &name.as_str()],
            )
            .await?;
        let (messages, dead_letters) = (count_u64(&row, 0)?, count_u64(&row, 1)?);
        if messages > 0 || dead_letters > 0 {
            return Err(StoreError::QueueNotEmpty {
                queue: name.to_string(),
                messages,
                dead_letters,
            });
        }
    }
    db.execute("DELETE FROM messages WHERE queue_id = $1", &[&q.id])
        .await?;
    db.execute("DELETE FROM dedup WHERE queue_id = $1", &[&q.id])
        .await?;
    db.execute("DELETE FROM sessions WHERE queue_id = $1", &[&q.id])
        .await?;
    db.execute("DELETE FROM queues WHERE id = $1", &[&q.id])
        .await?;
    db.execute(
        "DELETE FROM dead_letters WHERE queue = $1",
        &[&name.as_str()],
    )
    .await?;
    forget_queue(db, name.as_str());
    Ok(())
}

// ---- reads ----------------------------------------------------------------------------

pub(crate) async fn get_one(db: &Db<'_>, name: &EntityName) -> StoreResult<QueueRecord> {
    let row = db
        .query_opt(
            concat!("SELECT ", queue_cols!(), " FROM queues WHERE name = $1"),
            &[&name.as_str()],
        )
        .await?
        .ok_or_else(|| queue_not_found(name))?;
    Ok(queue_from_row(&row)?.record())
}

pub(crate) async fn list(db: &Db<'_>) -> StoreResult<Vec<QueueRecord>> {
    let rows = db
        .query(
            concat!("SELECT ", queue_cols!(), " FROM queues ORDER BY name"),
            &[],
        )
        .await?;
    Ok(decode(&rows, queue_from_row)?
        .iter()
        .map(QueueInfo::record)
        .collect())
}

/// Every count in one statement, so one snapshot.
pub(crate) async fn counts(
    db: &Db<'_>,
    name: &EntityName,
    now: Timestamp,
) -> StoreResult<QueueCounts> {
    let row = db
        .query_opt(
            "SELECT \
               count(m.sequence) FILTER (WHERE m.state = 'available' AND m.due_at <= $2), \
               count(m.sequence) FILTER (WHERE m.state = 'available' AND m.due_at > $2), \
               count(m.sequence) FILTER (WHERE m.state = 'locked'), \
               count(m.sequence) FILTER (WHERE m.state = 'deferred'), \
               (SELECT count(*) FROM dead_letters d WHERE d.queue = q.name \
                  AND d.area = 'live'), \
               min(m.enqueued_at) \
             FROM queues q LEFT JOIN messages m ON m.queue_id = q.id \
             WHERE q.name = $1 GROUP BY q.id, q.name",
            &[&name.as_str(), &now.0],
        )
        .await?
        .ok_or_else(|| queue_not_found(name))?;
    let oldest: Option<i64> = get(&row, 5)?;
    Ok(QueueCounts {
        active: count_u64(&row, 0)?,
        scheduled: count_u64(&row, 1)?,
        locked: count_u64(&row, 2)?,
        deferred: count_u64(&row, 3)?,
        dead_lettered: count_u64(&row, 4)?,
        oldest_enqueued_at: oldest.map(Timestamp),
    })
}
