//! Queue operations: create, update, delete, and the reads get, list, counts.

use redrive_core::{EntityName, QueuePolicy, Timestamp};
use redrive_store::skeleton::columns::{to_int, to_json};
use redrive_store::skeleton::entities::{
    QueueRow, check_queue_delete, mirror_subscription, queue_exists, queue_not_found,
};
use redrive_store::skeleton::messages::count_expired_locks;
use redrive_store::{
    PolicyVersionRecord, QueueCounts, QueueRecord, StoreError, StoreResult, SubscriptionSpec,
};

use crate::pool::Db;
use crate::rows::{
    Cols, LOCK_QUEUE_EXCLUSIVE, QueueInfo, count_u64, decode, forget_queue, get, head, head_cols,
    queue, queue_from_row,
};

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
            &[&name.as_str(), &to_json(policy)?, &now.0],
        )
        .await?;
    let Some(row) = row else {
        return Err(queue_exists(name));
    };
    let id = get(&row, 0)?;
    write_version(db, id, 1, policy, now).await?;
    forget_queue(db, name.as_str());
    Ok(QueueRow::created(id, name, policy, now).record())
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
                redrive_store::columns!(queue),
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
    let next = lock_exclusive(db, name)
        .await?
        .updated(policy, expected_version, now)?;
    db.execute(
        "UPDATE queues SET policy = $2, policy_version = $3, updated_at = $4 WHERE id = $1",
        &[
            &next.id,
            &to_json(policy)?,
            &to_int(next.version, "policy_version")?,
            &now.0,
        ],
    )
    .await?;
    write_version(db, next.id, next.version, policy, now).await?;
    forget_queue(db, name.as_str());
    Ok(next.record())
}

/// Mirrors a subscription's spec onto its queue's policy (the skeleton's
/// `mirror_subscription`): with the queue locked as `update` locks it, and, when anything
/// changed, the policy written at the next version, as `update` writes it, so that
/// every node's cached copy of the queue is found stale. A queue that is gone has
/// nothing to mirror onto.
pub(crate) async fn mirror(
    db: &Db<'_>,
    name: &EntityName,
    spec: &SubscriptionSpec,
    now: Timestamp,
) -> StoreResult<()> {
    let q = match lock_exclusive(db, name).await {
        Ok(q) => q,
        Err(StoreError::QueueNotFound { .. }) => return Ok(()),
        Err(e) => return Err(e),
    };
    let mut policy = q.policy.clone();
    if !mirror_subscription(&mut policy, spec) {
        return Ok(());
    }
    let next = q.updated(&policy, None, now)?;
    db.execute(
        "UPDATE queues SET policy = $2, policy_version = $3, updated_at = $4 WHERE id = $1",
        &[
            &next.id,
            &to_json(&policy)?,
            &to_int(next.version, "policy_version")?,
            &now.0,
        ],
    )
    .await?;
    write_version(db, next.id, next.version, &policy, now).await?;
    forget_queue(db, name.as_str());
    Ok(())
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
        check_queue_delete(name, count_u64(&row, 0)?, count_u64(&row, 1)?, force)?;
    }
    db.execute("DELETE FROM messages WHERE queue_id = $1", &[&q.id])
        .await?;
    db.execute("DELETE FROM dedup WHERE queue_id = $1", &[&q.id])
        .await?;
    db.execute("DELETE FROM sessions WHERE queue_id = $1", &[&q.id])
        .await?;
    db.execute(
        "DELETE FROM queue_policy_versions WHERE queue_id = $1",
        &[&q.id],
    )
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

/// Records `policy` as version `version` of queue `queue_id` (written with the change).
async fn write_version(
    db: &Db<'_>,
    queue_id: i64,
    version: u64,
    policy: &QueuePolicy,
    now: Timestamp,
) -> StoreResult<()> {
    db.execute(
        "INSERT INTO queue_policy_versions (queue_id, version, policy, changed_at) \
         VALUES ($1, $2, $3, $4)",
        &[
            &queue_id,
            &to_int(version, "queue_policy_versions.version")?,
            &to_json(policy)?,
            &now.0,
        ],
    )
    .await?;
    Ok(())
}

// ---- reads ----------------------------------------------------------------------------

/// A page of a queue's policy versions below `before`, newest first.
pub(crate) async fn policy_versions(
    db: &Db<'_>,
    name: &EntityName,
    before: Option<u64>,
    limit: u32,
) -> StoreResult<Vec<PolicyVersionRecord>> {
    let row = db
        .query_opt("SELECT id FROM queues WHERE name = $1", &[&name.as_str()])
        .await?
        .ok_or_else(|| queue_not_found(name))?;
    let id: i64 = get(&row, 0)?;
    let before = match before {
        Some(v) => to_int(v, "before")?,
        None => i64::MAX,
    };
    let rows = db
        .query(
            "SELECT version, policy, changed_at FROM queue_policy_versions \
             WHERE queue_id = $1 AND version < $2 ORDER BY version DESC LIMIT $3",
            &[&id, &before, &i64::from(limit)],
        )
        .await?;
    rows.iter()
        .map(|r| PolicyVersionRecord::decode(&Cols(r)))
        .collect()
}

pub(crate) async fn get_one(db: &Db<'_>, name: &EntityName) -> StoreResult<QueueRecord> {
    let row = db
        .query_opt(
            concat!(
                "SELECT ",
                redrive_store::columns!(queue),
                " FROM queues WHERE name = $1"
            ),
            &[&name.as_str()],
        )
        .await?
        .ok_or_else(|| queue_not_found(name))?;
    Ok(queue_from_row(&row)?.record())
}

pub(crate) async fn list(db: &Db<'_>) -> StoreResult<Vec<QueueRecord>> {
    let rows = db
        .query(
            concat!(
                "SELECT ",
                redrive_store::columns!(queue),
                " FROM queues ORDER BY name"
            ),
            &[],
        )
        .await?;
    Ok(decode(&rows, queue_from_row)?
        .iter()
        .map(|q| q.record())
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
               count(m.sequence) FILTER (WHERE m.state = 'locked' AND m.due_at > $2), \
               count(m.sequence) FILTER (WHERE m.state = 'deferred'), \
               (SELECT count(*) FROM dead_letters d WHERE d.queue = q.name \
                  AND d.area = 'live'), \
               min(m.enqueued_at), q.id \
             FROM queues q LEFT JOIN messages m ON m.queue_id = q.id \
             WHERE q.name = $1 GROUP BY q.id, q.name",
            &[&name.as_str(), &now.0],
        )
        .await?
        .ok_or_else(|| queue_not_found(name))?;
    let oldest: Option<i64> = get(&row, 5)?;
    let id: i64 = get(&row, 6)?;
    let mut counts = QueueCounts {
        active: count_u64(&row, 0)?,
        scheduled: count_u64(&row, 1)?,
        locked: count_u64(&row, 2)?,
        deferred: count_u64(&row, 3)?,
        dead_lettered: count_u64(&row, 4)?,
        oldest_enqueued_at: oldest.map(Timestamp),
    };
    // Locks that ran out by now, their release not yet written: where a browse shows them.
    let expired = db
        .query(
            concat!(
                "SELECT ",
                head_cols!(),
                " FROM messages WHERE queue_id = $1 AND state = 'locked' AND due_at <= $2"
            ),
            &[&id, &now.0],
        )
        .await?;
    if !expired.is_empty() {
        let q = queue(db, name).await?;
        count_expired_locks(&mut counts, &decode(&expired, head)?, &q.policy, now);
    }
    Ok(counts)
}
