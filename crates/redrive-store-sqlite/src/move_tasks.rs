//! Message move tasks, stored as replay plans of kind `sqs_move`: create, progress,
//! cancel and claim (writer), get and list (readers). The mapping, the statements and the
//! decisions are `redrive_store::skeleton::move_tasks`'s.

use redrive_core::Timestamp;
use redrive_store::skeleton::move_tasks::{
    self as skeleton, GET_MOVE, INSERT_MOVE, LIST_MOVES, ORPHANS, PRUNE_MOVES, WRITE_MOVE,
    move_columns, page_limit, write_columns,
};
use redrive_store::{MoveTaskProgress, MoveTaskRecord, StoreError, StoreResult};
use rusqlite::{Connection, Row, params};

use crate::error::Db;
use crate::rows::{Cols, query_all, query_opt};
use crate::writer::Tx;

fn record(r: &Row<'_>) -> StoreResult<MoveTaskRecord> {
    skeleton::decode(&Cols(r))
}

pub(crate) fn get(conn: &Connection, handle: &str) -> StoreResult<Option<MoveTaskRecord>> {
    let mut stmt = conn.prepare_cached(GET_MOVE).db()?;
    query_opt(&mut stmt, [handle], record)
}

pub(crate) fn list(
    conn: &Connection,
    source: &str,
    limit: u32,
) -> StoreResult<Vec<MoveTaskRecord>> {
    let mut stmt = conn.prepare_cached(LIST_MOVES).db()?;
    query_all(&mut stmt, params![source, page_limit(limit)], record)
}

pub(crate) fn create(tx: &mut Tx<'_>, t: &MoveTaskRecord) -> StoreResult<MoveTaskRecord> {
    let c = move_columns(t)?;
    let p = &c.plan;
    let n = tx
        .conn
        .prepare_cached(INSERT_MOVE)
        .db()?
        .execute(params![
            p.id,
            p.queue,
            p.destination,
            p.owner_id,
            p.owner_name,
            p.spec,
            p.items,
            p.created_at,
            p.version,
            p.m.status,
            p.m.owner_until,
            p.m.stop_reason,
            p.m.next_at,
            p.m.state,
            p.m.updated_at,
            p.kind,
            c.runner,
            c.runner_until,
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
    let w = write_columns(t)?;
    tx.conn
        .prepare_cached(WRITE_MOVE)
        .db()?
        .execute(params![
            w.status,
            w.stop_reason,
            w.state,
            w.updated_at,
            w.runner,
            w.runner_until,
            w.id,
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
            .prepare_cached(PRUNE_MOVES)
            .db()?
            .execute(params![w.source, skeleton::kept()?])
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
        let mut stmt = tx.conn.prepare_cached(ORPHANS).db()?;
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
