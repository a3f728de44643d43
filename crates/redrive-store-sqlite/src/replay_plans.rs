//! Bounded replay plans, message move tasks (`sqs_move` plans) among them: create and
//! update (writer), get, list and item reads (readers). The rules are
//! `redrive_store::skeleton::replay_plans`'s and `skeleton::move_tasks`'s.
//!
//! The writer is the only writer, so the item lease is checked by reading the admitted
//! items of the cases an update admits inside its transaction, before anything is
//! written: an update refused with `ReplayItemTaken` fails as a refusal (its job is
//! rolled back, the store stays healthy) and never reaches the unique index, which
//! remains the guard.

use redrive_store::skeleton::move_tasks::{PRUNE_MOVES, kept};
use redrive_store::skeleton::replay_plans::{
    self as skeleton, Bound, Built, HOLDER_COLUMNS, UPDATE_PLAN, item_columns, mut_columns,
    plan_columns,
};
use redrive_store::{
    PlanItemQuery, PlanItemRecord, PlanQuery, ReplayPlanRecord, ReplayPlanUpdate, StoreResult,
};
use rusqlite::types::Value;
use rusqlite::{Connection, Row, params, params_from_iter};

use crate::error::Db;
use crate::rows::{Cols, query_all, query_opt};
use crate::writer::Tx;

/// Inserts one item of plan `?1`, in the order of `columns!(replay_plan_item)`.
const INSERT_ITEM: &str = concat!(
    "INSERT INTO replay_plan_items (plan_id, ",
    redrive_store::columns!(replay_plan_item),
    ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
);

/// Replaces an item: its columns after `seq`, in the order of
/// `columns!(replay_plan_item)`, as `?1…?7`, then the plan `?8` and the seq `?9`.
const UPDATE_ITEM: &str = "UPDATE replay_plan_items SET case_id = ?1, bytes = ?2, state = ?3, \
     admit_window = ?4, message_id = ?5, detail = ?6, updated_at = ?7 \
     WHERE plan_id = ?8 AND seq = ?9";

fn plan(r: &Row<'_>) -> StoreResult<ReplayPlanRecord> {
    skeleton::decode(&Cols(r))
}

fn item(r: &Row<'_>) -> StoreResult<PlanItemRecord> {
    skeleton::decode_item(&Cols(r))
}

fn values(b: &Built) -> Vec<Value> {
    b.params
        .iter()
        .map(|p| match p {
            Bound::Text(s) => Value::Text(s.clone()),
            Bound::Int(i) => Value::Integer(*i),
        })
        .collect()
}

fn find(conn: &Connection, id: &str) -> StoreResult<Option<ReplayPlanRecord>> {
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            redrive_store::columns!(replay_plan),
            " FROM replay_plans WHERE id = ?1"
        ))
        .db()?;
    query_opt(&mut stmt, [id], plan)
}

pub(crate) fn get(conn: &Connection, id: &str) -> StoreResult<ReplayPlanRecord> {
    find(conn, id)?.ok_or_else(|| skeleton::not_found(id))
}

pub(crate) fn list(conn: &Connection, q: &PlanQuery) -> StoreResult<Vec<ReplayPlanRecord>> {
    let b = skeleton::list_sql(q);
    let mut stmt = conn.prepare_cached(&b.sql).db()?;
    query_all(&mut stmt, params_from_iter(values(&b)), plan)
}

/// One statement; an empty page is told apart from a missing plan by a second look.
pub(crate) fn items(
    conn: &Connection,
    plan_id: &str,
    q: &PlanItemQuery,
) -> StoreResult<Vec<PlanItemRecord>> {
    let b = skeleton::items_sql(plan_id, q);
    let mut stmt = conn.prepare_cached(&b.sql).db()?;
    let out = query_all(&mut stmt, params_from_iter(values(&b)), item)?;
    if out.is_empty() {
        get(conn, plan_id)?;
    }
    Ok(out)
}

pub(crate) fn create(
    tx: &mut Tx<'_>,
    p: &ReplayPlanRecord,
    items: &[PlanItemRecord],
) -> StoreResult<ReplayPlanRecord> {
    skeleton::check_new(p, items)?;
    let c = plan_columns(p)?;
    let (insert, refused) = skeleton::insert_statement(p);
    let n = tx
        .conn
        .prepare_cached(insert)
        .db()?
        .execute(params![
            c.id,
            c.queue,
            c.destination,
            c.owner_id,
            c.owner_name,
            c.spec,
            c.items,
            c.created_at,
            c.version,
            c.m.status,
            c.m.owner_until,
            c.m.stop_reason,
            c.m.next_at,
            c.m.state,
            c.m.updated_at,
            c.kind,
            c.m.runner,
            c.m.runner_until,
        ])
        .db()?;
    if n == 0 {
        return Err(refused);
    }
    let mut stmt = tx.conn.prepare_cached(INSERT_ITEM).db()?;
    for i in items {
        let i = item_columns(i)?;
        stmt.execute(params![
            p.id,
            i.seq,
            i.case_id,
            i.bytes,
            i.state,
            i.window,
            i.message_id,
            i.detail,
            i.updated_at,
        ])
        .db()?;
    }
    Ok(p.clone())
}

pub(crate) fn update(tx: &mut Tx<'_>, u: &ReplayPlanUpdate) -> StoreResult<ReplayPlanRecord> {
    skeleton::check_update(u)?;
    let conn = tx.conn;
    let stored = get(conn, &u.id)?;
    skeleton::check_version(&stored, u)?;
    let m = mut_columns(&u.set)?;
    // The item lease, before anything is written (see the module docs).
    let mut holders = Vec::new();
    {
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {HOLDER_COLUMNS} FROM replay_plan_items \
                 WHERE case_id = ?1 AND state = 'admitted'"
            ))
            .db()?;
        for case_id in skeleton::admitted_cases(u) {
            holders.extend(query_all(&mut stmt, [case_id], |r| {
                skeleton::decode_holder(&Cols(r))
            })?);
        }
    }
    skeleton::lease_conflict(u, &holders)?;
    let order = skeleton::write_order(u);
    let mut written = 0_u64;
    let mut found = std::collections::BTreeSet::new();
    {
        let mut stmt = conn.prepare_cached(UPDATE_ITEM).db()?;
        for i in &order {
            let c = item_columns(i)?;
            let n = stmt
                .execute(params![
                    c.case_id,
                    c.bytes,
                    c.state,
                    c.window,
                    c.message_id,
                    c.detail,
                    c.updated_at,
                    u.id,
                    c.seq,
                ])
                .db()?;
            if n > 0 {
                written += 1;
                found.insert(i.seq);
            }
        }
    }
    skeleton::items_written(&u.id, &order, written, Some(&found))?;
    let version = redrive_store::skeleton::columns::to_int(u.version, "replay_plans.version")?;
    conn.prepare_cached(UPDATE_PLAN)
        .db()?
        .execute(params![
            m.status,
            m.owner_until,
            m.stop_reason,
            m.next_at,
            m.state,
            m.updated_at,
            m.runner,
            m.runner_until,
            u.id,
            version,
        ])
        .db()?;
    if skeleton::ends_move(&stored, u) {
        // Keep the most recent finished move plans of the queue only.
        conn.prepare_cached(PRUNE_MOVES)
            .db()?
            .execute(params![stored.queue, kept()?])
            .db()?;
    }
    Ok(skeleton::written(stored, u))
}
