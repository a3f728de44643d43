//! Message move tasks, stored as replay plans of kind `sqs_move`. The mapping, the
//! statements and the decisions are `redrive_store::skeleton::move_tasks`'s.
//!
//! A create inserts against the partial unique index of active move plans (`ON CONFLICT
//! ... DO NOTHING` waits for a concurrent insert of the same source, then sees it).
//! Progress and cancel lock the plan's row; a claim locks the orphans it takes and skips
//! those another node is claiming.

use std::sync::LazyLock;

use redrive_core::Timestamp;
use redrive_store::skeleton::move_tasks::{
    self as skeleton, GET_MOVE, INSERT_MOVE, LIST_MOVES, ORPHANS, PRUNE_MOVES, WRITE_MOVE,
    move_columns, page_limit, write_columns,
};
use redrive_store::{MoveTaskProgress, MoveTaskRecord, StoreError, StoreResult};
use tokio_postgres::Row;

use crate::pool::Db;
use crate::rows::{Cols, decode};

/// [`GET_MOVE`], locking the row.
static LOCKED: LazyLock<String> = LazyLock::new(|| format!("{GET_MOVE} FOR UPDATE"));
/// [`ORPHANS`], locking those it takes and skipping those another claim locked.
static CLAIMABLE: LazyLock<String> = LazyLock::new(|| format!("{ORPHANS} FOR UPDATE SKIP LOCKED"));

fn record(r: &Row) -> StoreResult<MoveTaskRecord> {
    skeleton::decode(&Cols(r))
}

pub(crate) async fn get(db: &Db<'_>, handle: &str) -> StoreResult<Option<MoveTaskRecord>> {
    db.query_opt(GET_MOVE, &[&handle])
        .await?
        .as_ref()
        .map(record)
        .transpose()
}

async fn locked(db: &Db<'_>, handle: &str) -> StoreResult<Option<MoveTaskRecord>> {
    db.query_opt(&LOCKED, &[&handle])
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
    let rows = db.query(LIST_MOVES, &[&source, &page_limit(limit)]).await?;
    decode(&rows, record)
}

pub(crate) async fn create(db: &Db<'_>, t: &MoveTaskRecord) -> StoreResult<MoveTaskRecord> {
    let c = move_columns(t)?;
    let p = &c.plan;
    let n = db
        .execute(
            INSERT_MOVE,
            &[
                &p.id,
                &p.queue,
                &p.destination,
                &p.owner_id,
                &p.owner_name,
                &p.spec,
                &p.items,
                &p.created_at,
                &p.version,
                &p.m.status,
                &p.m.owner_until,
                &p.m.stop_reason,
                &p.m.next_at,
                &p.m.state,
                &p.m.updated_at,
                &p.kind,
                &c.runner,
                &c.runner_until,
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
    let w = write_columns(t)?;
    db.execute(
        WRITE_MOVE,
        &[
            &w.status,
            &w.stop_reason,
            &w.state,
            &w.updated_at,
            &w.runner,
            &w.runner_until,
            &w.id,
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
        db.execute(PRUNE_MOVES, &[&w.source, &skeleton::kept()?])
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
    let rows = db.query(&CLAIMABLE, &[&now.0, &page_limit(limit)]).await?;
    let mut out = Vec::with_capacity(rows.len());
    for stored in decode(&rows, record)? {
        if let Some(w) = skeleton::claim(&stored, runner, lease_ms, now) {
            write(db, &w).await?;
            out.push(w);
        }
    }
    Ok(out)
}
