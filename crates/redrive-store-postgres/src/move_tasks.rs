//! Message move tasks. The decisions are `redrive_store::skeleton::move_tasks`'s.
//!
//! A create inserts against the partial unique index of active tasks (`ON CONFLICT ...
//! DO NOTHING` waits for a concurrent insert of the same source, then sees it). Progress
//! and cancel lock the task's row; a claim locks the orphans it takes and skips those
//! another node is claiming.

use redrive_core::Timestamp;
use redrive_store::skeleton::columns::to_int;
use redrive_store::skeleton::move_tasks::{self as skeleton, page_limit};
use redrive_store::{
    MOVE_TASKS_KEPT_PER_SOURCE, MoveTaskProgress, MoveTaskRecord, StoreError, StoreResult,
};
use tokio_postgres::Row;

use crate::pool::Db;
use crate::rows::{Cols, decode};

fn record(r: &Row) -> StoreResult<MoveTaskRecord> {
    skeleton::decode(&Cols(r))
}

pub(crate) async fn get(db: &Db<'_>, handle: &str) -> StoreResult<Option<MoveTaskRecord>> {
    db.query_opt(
        concat!(
            "SELECT ",
            redrive_store::columns!(move_task),
            " FROM move_tasks WHERE handle = $1"
        ),
        &[&handle],
    )
    .await?
    .as_ref()
    .map(record)
    .transpose()
}

async fn locked(db: &Db<'_>, handle: &str) -> StoreResult<Option<MoveTaskRecord>> {
    db.query_opt(
        concat!(
            "SELECT ",
            redrive_store::columns!(move_task),
            " FROM move_tasks WHERE handle = $1 FOR UPDATE"
        ),
        &[&handle],
    )
    .await?
    .as_ref()
    .map(record)
    .transpose()
}

pub(crate) async fn list(
    db: &Db<'_>,
    source: &str,
    limit: u32,
) -> StoreResult<Vec<MoveTaskRecord>> {
    let rows = db
        .query(
            concat!(
                "SELECT ",
                redrive_store::columns!(move_task),
                " FROM move_tasks WHERE source = $1 ORDER BY started_at DESC, seq DESC LIMIT $2"
            ),
            &[&source, &page_limit(limit)],
        )
        .await?;
    decode(&rows, record)
}

pub(crate) async fn create(db: &Db<'_>, t: &MoveTaskRecord) -> StoreResult<MoveTaskRecord> {
    let n = db
        .execute(
            concat!(
                "INSERT INTO move_tasks (",
                redrive_store::columns!(move_task),
                ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) \
                 ON CONFLICT (source) WHERE status IN ('RUNNING', 'CANCELLING') DO NOTHING"
            ),
            &[
                &t.handle,
                &t.source,
                &t.destination,
                &t.max_per_second.map(i64::from),
                &t.status.as_str(),
                &to_int(t.moved, "move_tasks.moved")?,
                &to_int(t.to_move, "move_tasks.to_move")?,
                &t.failure_reason,
                &t.owner_id,
                &t.owner_name,
                &t.started_at.0,
                &t.updated_at.0,
                &t.runner,
                &t.runner_until.map(|u| u.0),
            ],
        )
        .await?;
    if n == 0 {
        return Err(StoreError::MoveTaskRunning {
            queue: t.source.clone(),
        });
    }
    Ok(t.clone())
}

/// Writes the mutable part of a task.
async fn write(db: &Db<'_>, t: &MoveTaskRecord) -> StoreResult<()> {
    db.execute(
        "UPDATE move_tasks SET status = $2, moved = $3, failure_reason = $4, \
         updated_at = $5, runner = $6, runner_until = $7 WHERE handle = $1",
        &[
            &t.handle,
            &t.status.as_str(),
            &to_int(t.moved, "move_tasks.moved")?,
            &t.failure_reason,
            &t.updated_at.0,
            &t.runner,
            &t.runner_until.map(|u| u.0),
        ],
    )
    .await?;
    Ok(())
}

pub(crate) async fn update(
    db: &Db<'_>,
    handle: &str,
    runner: &str,
    p: &MoveTaskProgress,
    now: Timestamp,
) -> StoreResult<Option<MoveTaskRecord>> {
    let Some(stored) = locked(db, handle).await? else {
        return Ok(None);
    };
    let Some(w) = skeleton::progress(&stored, runner, p, now) else {
        return Ok(None);
    };
    write(db, &w).await?;
    if !w.status.is_active() {
        // Keep the most recent finished tasks of the source only.
        db.execute(
            "DELETE FROM move_tasks WHERE source = $1 \
             AND status NOT IN ('RUNNING', 'CANCELLING') AND handle NOT IN \
             (SELECT handle FROM move_tasks WHERE source = $1 \
              AND status NOT IN ('RUNNING', 'CANCELLING') \
              ORDER BY started_at DESC, seq DESC LIMIT $2)",
            &[&w.source, &to_int(MOVE_TASKS_KEPT_PER_SOURCE, "kept")?],
        )
        .await?;
    }
    Ok(Some(w))
}

pub(crate) async fn cancel(
    db: &Db<'_>,
    handle: &str,
    now: Timestamp,
) -> StoreResult<MoveTaskRecord> {
    let stored = locked(db, handle)
        .await?
        .ok_or_else(|| StoreError::MoveTaskNotFound {
            handle: handle.to_owned(),
        })?;
    let w = skeleton::cancel(&stored, now)?;
    write(db, &w).await?;
    Ok(w)
}

pub(crate) async fn claim(
    db: &Db<'_>,
    runner: &str,
    lease_ms: u64,
    now: Timestamp,
    limit: u32,
) -> StoreResult<Vec<MoveTaskRecord>> {
    let rows = db
        .query(
            concat!(
                "SELECT ",
                redrive_store::columns!(move_task),
                " FROM move_tasks WHERE status IN ('RUNNING', 'CANCELLING') \
                 AND (runner_until IS NULL OR runner_until <= $1) \
                 ORDER BY started_at, seq LIMIT $2 FOR UPDATE SKIP LOCKED"
            ),
            &[&now.0, &page_limit(limit)],
        )
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for stored in decode(&rows, record)? {
        if let Some(w) = skeleton::claim(&stored, runner, lease_ms, now) {
            write(db, &w).await?;
            out.push(w);
        }
    }
    Ok(out)
}
