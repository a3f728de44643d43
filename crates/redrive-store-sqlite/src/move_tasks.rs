//! Message move tasks: create, progress, cancel and claim (writer), get and list
//! (readers). The decisions are `redrive_store::skeleton::move_tasks`'s.

use redrive_core::Timestamp;
use redrive_store::skeleton::columns::to_int;
use redrive_store::skeleton::move_tasks::{self as skeleton, page_limit};
use redrive_store::{
    MOVE_TASKS_KEPT_PER_SOURCE, MoveTaskProgress, MoveTaskRecord, StoreError, StoreResult,
};
use rusqlite::{Connection, Row, params};

use crate::error::Db;
use crate::rows::{Cols, query_all, query_opt};
use crate::writer::Tx;

fn record(r: &Row<'_>) -> StoreResult<MoveTaskRecord> {
    skeleton::decode(&Cols(r))
}

pub(crate) fn get(conn: &Connection, handle: &str) -> StoreResult<Option<MoveTaskRecord>> {
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            redrive_store::columns!(move_task),
            " FROM move_tasks WHERE handle = ?1"
        ))
        .db()?;
    query_opt(&mut stmt, [handle], record)
}

pub(crate) fn list(
    conn: &Connection,
    source: &str,
    limit: u32,
) -> StoreResult<Vec<MoveTaskRecord>> {
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            redrive_store::columns!(move_task),
            " FROM move_tasks WHERE source = ?1 ORDER BY started_at DESC, seq DESC LIMIT ?2"
        ))
        .db()?;
    query_all(&mut stmt, params![source, page_limit(limit)], record)
}

pub(crate) fn create(tx: &mut Tx<'_>, t: &MoveTaskRecord) -> StoreResult<MoveTaskRecord> {
    let n = tx
        .conn
        .prepare_cached(concat!(
            "INSERT INTO move_tasks (seq, ",
            redrive_store::columns!(move_task),
            ") VALUES ((SELECT coalesce(max(seq), 0) + 1 FROM move_tasks), \
             ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) \
             ON CONFLICT (source) WHERE status IN ('RUNNING', 'CANCELLING') DO NOTHING"
        ))
        .db()?
        .execute(params![
            t.handle,
            t.source,
            t.destination,
            t.max_per_second,
            t.status.as_str(),
            to_int(t.moved, "move_tasks.moved")?,
            to_int(t.to_move, "move_tasks.to_move")?,
            t.failure_reason,
            t.owner_id,
            t.owner_name,
            t.started_at.0,
            t.updated_at.0,
            t.runner,
            t.runner_until.map(|u| u.0),
        ])
        .db()?;
    if n == 0 {
        return Err(StoreError::MoveTaskRunning {
            queue: t.source.clone(),
        });
    }
    Ok(t.clone())
}

/// Writes the mutable part of a task.
fn write(tx: &mut Tx<'_>, t: &MoveTaskRecord) -> StoreResult<()> {
    tx.conn
        .prepare_cached(
            "UPDATE move_tasks SET status = ?2, moved = ?3, failure_reason = ?4, \
             updated_at = ?5, runner = ?6, runner_until = ?7 WHERE handle = ?1",
        )
        .db()?
        .execute(params![
            t.handle,
            t.status.as_str(),
            to_int(t.moved, "move_tasks.moved")?,
            t.failure_reason,
            t.updated_at.0,
            t.runner,
            t.runner_until.map(|u| u.0),
        ])
        .db()?;
    Ok(())
}

pub(crate) fn update(
    tx: &mut Tx<'_>,
    handle: &str,
    runner: &str,
    p: &MoveTaskProgress,
    now: Timestamp,
) -> StoreResult<Option<MoveTaskRecord>> {
    let Some(stored) = get(tx.conn, handle)? else {
        return Ok(None);
    };
    let Some(w) = skeleton::progress(&stored, runner, p, now) else {
        return Ok(None);
    };
    write(tx, &w)?;
    if !w.status.is_active() {
        // Keep the most recent finished tasks of the source only.
        tx.conn
            .prepare_cached(
                "DELETE FROM move_tasks WHERE source = ?1 \
                 AND status NOT IN ('RUNNING', 'CANCELLING') AND handle NOT IN \
                 (SELECT handle FROM move_tasks WHERE source = ?1 \
                  AND status NOT IN ('RUNNING', 'CANCELLING') \
                  ORDER BY started_at DESC, seq DESC LIMIT ?2)",
            )
            .db()?
            .execute(params![
                w.source,
                to_int(MOVE_TASKS_KEPT_PER_SOURCE, "kept")?
            ])
            .db()?;
    }
    Ok(Some(w))
}

pub(crate) fn cancel(tx: &mut Tx<'_>, handle: &str, now: Timestamp) -> StoreResult<MoveTaskRecord> {
    let stored = get(tx.conn, handle)?.ok_or_else(|| StoreError::MoveTaskNotFound {
        handle: handle.to_owned(),
    })?;
    let w = skeleton::cancel(&stored, now)?;
    write(tx, &w)?;
    Ok(w)
}

pub(crate) fn claim(
    tx: &mut Tx<'_>,
    runner: &str,
    lease_ms: u64,
    now: Timestamp,
    limit: u32,
) -> StoreResult<Vec<MoveTaskRecord>> {
    let found = {
        let mut stmt = tx
            .conn
            .prepare_cached(concat!(
                "SELECT ",
                redrive_store::columns!(move_task),
                " FROM move_tasks WHERE status IN ('RUNNING', 'CANCELLING') \
                 AND (runner_until IS NULL OR runner_until <= ?1) \
                 ORDER BY started_at, seq LIMIT ?2"
            ))
            .db()?;
        query_all(&mut stmt, params![now.0, page_limit(limit)], record)?
    };
    let mut out = Vec::with_capacity(found.len());
    for stored in found {
        if let Some(w) = skeleton::claim(&stored, runner, lease_ms, now) {
            write(tx, &w)?;
            out.push(w);
        }
    }
    Ok(out)
}
