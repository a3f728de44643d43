//! Bounded replay plans. The rules are `redrive_store::skeleton::replay_plans`'s.
//!
//! A create inserts the plan with `ON CONFLICT (id) DO NOTHING` (a concurrent create of
//! the same id waits, then inserts nothing and is told `ReplayPlanExists`) and its items
//! in one statement. An update locks the plan's row (`SELECT ... FOR UPDATE`) and
//! compares the version read: of two updates from one version, the second waits for the
//! first, then is told `ReplayPlanChanged` and writes nothing. It then reads the admitted
//! items of the cases it admits and refuses the update with `ReplayItemTaken` when one
//! holds a lease it needs. Two plans' updates admitting one case at once may both pass
//! that check; the unique index `replay_plan_items_admitted` lets one of them commit and
//! fails the other with a unique violation. That violation is turned into a retryable
//! conflict: the transaction is rolled back and run again from the start, and its check
//! then sees the committed holder and answers `ReplayItemTaken` naming it.
//!
//! Message move tasks are plans of kind `sqs_move`: a create inserts with
//! `ON CONFLICT (queue) WHERE …` on the index `replay_plans_active_move` (of two nodes
//! starting a task of one source at once, the second inserts nothing and is told
//! `MoveTaskRunning`), and their progress, cancel and claim are updates like any other,
//! so the row lock and the version decide between two nodes writing one task.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use redrive_store::skeleton::Columns;
use redrive_store::skeleton::columns::to_int;
use redrive_store::skeleton::move_tasks::{PRUNE_MOVES, kept};
use redrive_store::skeleton::replay_plans::{
    self as skeleton, Bound, Built, HOLDER_COLUMNS, ItemColumns, UPDATE_PLAN, item_columns,
    mut_columns, plan_columns,
};
use redrive_store::{
    PlanItemQuery, PlanItemRecord, PlanQuery, ReplayPlanRecord, ReplayPlanUpdate, StoreError,
    StoreResult,
};
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;

use crate::error::{PostgresError, unavailable};
use crate::pool::{Db, Owned};
use crate::rows::{Cols, decode};

/// The unique index that is the item lease.
const LEASE_INDEX: &str = "replay_plan_items_admitted";

fn plan(r: &Row) -> StoreResult<ReplayPlanRecord> {
    skeleton::decode(&Cols(r))
}

fn item(r: &Row) -> StoreResult<PlanItemRecord> {
    skeleton::decode_item(&Cols(r))
}

fn owned(b: &Built) -> Owned {
    b.params
        .iter()
        .map(|p| -> Box<dyn tokio_postgres::types::ToSql + Sync + Send> {
            match p {
                Bound::Text(s) => Box::new(s.clone()),
                Bound::Int(i) => Box::new(*i),
            }
        })
        .collect()
}

pub(crate) async fn get_one(db: &Db<'_>, id: &str) -> StoreResult<ReplayPlanRecord> {
    db.query_opt(
        concat!(
            "SELECT ",
            redrive_store::columns!(replay_plan),
            " FROM replay_plans WHERE id = $1"
        ),
        &[&id],
    )
    .await?
    .as_ref()
    .map(plan)
    .transpose()?
    .ok_or_else(|| skeleton::not_found(id))
}

async fn locked(db: &Db<'_>, id: &str) -> StoreResult<ReplayPlanRecord> {
    db.query_opt(
        concat!(
            "SELECT ",
            redrive_store::columns!(replay_plan),
            " FROM replay_plans WHERE id = $1 FOR UPDATE"
        ),
        &[&id],
    )
    .await?
    .as_ref()
    .map(plan)
    .transpose()?
    .ok_or_else(|| skeleton::not_found(id))
}

pub(crate) async fn list(db: &Db<'_>, q: &PlanQuery) -> StoreResult<Vec<ReplayPlanRecord>> {
    let b = skeleton::list_sql(q);
    let rows = db.query_built(&b.sql, &owned(&b)).await?;
    decode(&rows, plan)
}

/// One statement; an empty page is told apart from a missing plan by a second look.
pub(crate) async fn items(
    db: &Db<'_>,
    plan_id: &str,
    q: &PlanItemQuery,
) -> StoreResult<Vec<PlanItemRecord>> {
    let b = skeleton::items_sql(plan_id, q);
    let rows = db.query_built(&b.sql, &owned(&b)).await?;
    if rows.is_empty() {
        get_one(db, plan_id).await?;
    }
    decode(&rows, item)
}

/// Items as parallel arrays for `unnest`.
#[derive(Default)]
struct ItemArrays {
    seq: Vec<i64>,
    case_id: Vec<String>,
    bytes: Vec<i64>,
    state: Vec<&'static str>,
    window: Vec<Option<i64>>,
    message_id: Vec<Option<String>>,
    detail: Vec<Option<String>>,
    updated_at: Vec<i64>,
}

impl ItemArrays {
    fn of<'i>(items: impl Iterator<Item = &'i PlanItemRecord>) -> StoreResult<ItemArrays> {
        let mut a = ItemArrays::default();
        for i in items {
            let ItemColumns {
                seq,
                case_id,
                bytes,
                state,
                window,
                message_id,
                detail,
                updated_at,
            } = item_columns(i)?;
            a.seq.push(seq);
            a.case_id.push(case_id);
            a.bytes.push(bytes);
            a.state.push(state);
            a.window.push(window);
            a.message_id.push(message_id);
            a.detail.push(detail);
            a.updated_at.push(updated_at);
        }
        Ok(a)
    }
}

pub(crate) async fn create(
    db: &Db<'_>,
    p: &ReplayPlanRecord,
    items: &[PlanItemRecord],
) -> StoreResult<ReplayPlanRecord> {
    skeleton::check_new(p, items)?;
    let c = plan_columns(p)?;
    let (insert, refused) = skeleton::insert_statement(p);
    let n = db
        .execute(
            insert,
            &[
                &c.id,
                &c.queue,
                &c.destination,
                &c.owner_id,
                &c.owner_name,
                &c.spec,
                &c.items,
                &c.created_at,
                &c.version,
                &c.m.status,
                &c.m.owner_until,
                &c.m.stop_reason,
                &c.m.next_at,
                &c.m.state,
                &c.m.updated_at,
                &c.kind,
                &c.m.runner,
                &c.m.runner_until,
            ],
        )
        .await?;
    if n == 0 {
        return Err(refused);
    }
    if !items.is_empty() {
        let a = ItemArrays::of(items.iter())?;
        db.defer(
            concat!(
                "INSERT INTO replay_plan_items (plan_id, ",
                redrive_store::columns!(replay_plan_item),
                ") SELECT $1, u.* FROM unnest($2::bigint[], $3::text[], $4::bigint[], \
                 $5::text[], $6::bigint[], $7::text[], $8::text[], $9::bigint[]) AS u"
            ),
            vec![
                Box::new(p.id.clone()),
                Box::new(a.seq),
                Box::new(a.case_id),
                Box::new(a.bytes),
                Box::new(a.state),
                Box::new(a.window),
                Box::new(a.message_id),
                Box::new(a.detail),
                Box::new(a.updated_at),
            ],
        )
        .await?;
    }
    Ok(p.clone())
}

/// The admitted items of the cases `$1` (through the lease's index).
static HOLDERS: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {HOLDER_COLUMNS} FROM replay_plan_items \
         WHERE case_id = ANY($1::text[]) AND state = 'admitted'"
    )
});

/// Replaces the items of plan `$1` given as arrays, by seq; answers the seqs written.
const UPDATE_ITEMS: &str = "UPDATE replay_plan_items i SET case_id = u.case_id, \
     bytes = u.bytes, state = u.state, admit_window = u.w, message_id = u.message_id, \
     detail = u.detail, updated_at = u.updated_at \
     FROM unnest($2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::bigint[], \
       $7::text[], $8::text[], $9::bigint[]) \
       AS u(seq, case_id, bytes, state, w, message_id, detail, updated_at) \
     WHERE i.plan_id = $1 AND i.seq = u.seq RETURNING i.seq";

/// Writes `items` of plan `id` in one statement and answers the seqs it found. A
/// violation of the item lease's index (a concurrent plan committed an admission of the
/// same case) becomes a retryable conflict (see the module docs).
async fn write_items(
    db: &Db<'_>,
    id: &str,
    items: &[&PlanItemRecord],
) -> StoreResult<BTreeSet<u32>> {
    if items.is_empty() {
        return Ok(BTreeSet::new());
    }
    let a = ItemArrays::of(items.iter().copied())?;
    let rows = db
        .query(
            UPDATE_ITEMS,
            &[
                &id,
                &a.seq,
                &a.case_id,
                &a.bytes,
                &a.state,
                &a.window,
                &a.message_id,
                &a.detail,
                &a.updated_at,
            ],
        )
        .await
        .map_err(lease_lost_to_a_race)?;
    rows.iter()
        .map(|r| Cols(r).count(0, "replay_plan_items.seq"))
        .collect()
}

/// A unique violation of [`LEASE_INDEX`] as a retryable conflict; any other error as it is.
fn lease_lost_to_a_race(e: StoreError) -> StoreError {
    let StoreError::Backend { source } = e else {
        return e;
    };
    match source.downcast::<tokio_postgres::Error>() {
        Ok(pg) => {
            let lease = pg.code() == Some(&SqlState::UNIQUE_VIOLATION)
                && pg
                    .as_db_error()
                    .and_then(|d| d.constraint())
                    .is_some_and(|c| c == LEASE_INDEX);
            if lease {
                unavailable(PostgresError::Conflict(*pg))
            } else {
                StoreError::backend(*pg)
            }
        }
        Err(source) => StoreError::Backend { source },
    }
}

pub(crate) async fn update(db: &Db<'_>, u: &ReplayPlanUpdate) -> StoreResult<ReplayPlanRecord> {
    skeleton::check_update(u)?;
    // Locked: a concurrent update of the plan waits here, then sees this one's version.
    let stored = locked(db, &u.id).await?;
    skeleton::check_version(&stored, u)?;
    let m = mut_columns(&u.set)?;
    let cases = skeleton::admitted_cases(u);
    if !cases.is_empty() {
        let rows = db.query(&HOLDERS, &[&cases]).await?;
        let holders = decode(&rows, |r| skeleton::decode_holder(&Cols(r)))?;
        skeleton::lease_conflict(u, &holders)?;
    }
    // Leases released before leases taken (`write_order`): one statement each.
    let order = skeleton::write_order(u);
    let split = order
        .iter()
        .position(|i| i.state == redrive_store::PlanItemState::Admitted)
        .unwrap_or(order.len());
    let mut found = write_items(db, &u.id, &order[..split]).await?;
    found.extend(write_items(db, &u.id, &order[split..]).await?);
    let written = u64::try_from(found.len()).unwrap_or(u64::MAX);
    skeleton::items_written(&u.id, &order, written, Some(&found))?;
    let version = to_int(u.version, "replay_plans.version")?;
    let n = db
        .execute(
            UPDATE_PLAN,
            &[
                &m.status,
                &m.owner_until,
                &m.stop_reason,
                &m.next_at,
                &m.state,
                &m.updated_at,
                &m.runner,
                &m.runner_until,
                &u.id,
                &version,
            ],
        )
        .await?;
    if n != 1 {
        return Err(crate::error::backend(PostgresError::Invariant(
            "a locked plan's version changed",
        )));
    }
    if skeleton::ends_move(&stored, u) {
        // Keep the most recent finished move plans of the queue only.
        db.execute(PRUNE_MOVES, &[&stored.queue, &kept()?]).await?;
    }
    Ok(skeleton::written(stored, u))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_errors_pass_through_the_lease_mapping() {
        let e = lease_lost_to_a_race(StoreError::LockLost);
        assert!(matches!(e, StoreError::LockLost));
        let e = lease_lost_to_a_race(crate::error::backend(PostgresError::Closed));
        assert!(matches!(e, StoreError::Backend { .. }));
    }
}
