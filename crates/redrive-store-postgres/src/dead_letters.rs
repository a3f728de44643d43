//! Dead letters: the one dead-lettering path shared by receive, settle and sweep (the
//! plan is the skeleton's, the statements are here), and the operations on a queue's
//! dead-letter store.

use redrive_core::{Area, EntityName, Timestamp};
use redrive_store::skeleton::columns::millis;
use redrive_store::skeleton::dead_letters::{
    check_lock, check_resubmit, lock_records, not_found, page, resubmitted, undecodable,
};
use redrive_store::skeleton::replay::moved;
use redrive_store::skeleton::{Cause, DeadLetterPlan, Head};
use redrive_store::{
    DeadLetterDelivery, DeadLetterPage, DeadLetterQuery, DeadLetterRecord, Effects, Enqueued,
    StoreError, StoreResult,
};

use redrive_store::failure::{FailureQuery, FailureSignature, sparkline, sparkline_start};
use redrive_store::skeleton::Columns;
use redrive_store::skeleton::failures::{
    Bind, Dialect, failures_sql, hours_sql, list_sql, signature_row,
};
use tokio_postgres::types::ToSql;

use crate::pool::{Db, Owned};
use crate::rows::{
    Cols, QueueInfo, Writes, allocate_one, checked_record, delete_rows, get, insert_messages,
    insert_record, load_row, queue, queue_id, queue_opt,
};

/// Dead-letters the message `head` of queue `q` (its row locked by the caller): writes
/// the evidence record (and, when the queue names a dead-letter queue that can take it,
/// a copy there), removes the message at once (dropping any write of it pending in
/// `writes`), reports it. Returns the record's id.
pub(crate) async fn dead_letter(
    db: &Db<'_>,
    q: &QueueInfo,
    head: &Head,
    cause: Cause,
    now: Timestamp,
    effects: &mut Effects,
    writes: &mut Writes,
) -> StoreResult<String> {
    let row = load_row(db, q.id, head.key).await?;
    let target = match &q.policy.dead_letter_queue {
        Some(t) => queue_opt(db, t.as_str()).await?,
        None => None,
    };
    let plan = DeadLetterPlan::new(q, head, row, cause, target.as_deref().map(|t| &t.row), now)?;
    let forwarded = match plan.target() {
        Some(t) => {
            let sequence = allocate_one(db, t.id, plan.session_id()).await?;
            insert_messages(db, t.id, now, &[plan.copy(sequence)?]).await?;
            Some(sequence)
        }
        None => None,
    };
    let record = plan.finish(forwarded, effects);
    insert_record(db, &record, now).await?;
    writes.forget(head.key);
    delete_rows(db, q.id, &[head.key]).await?;
    Ok(record.id)
}

/// One record; with `lock`, its row stays locked until the transaction ends.
pub(crate) async fn load_record(
    db: &Db<'_>,
    queue: &EntityName,
    id: &str,
    lock: bool,
) -> StoreResult<Option<DeadLetterRecord>> {
    let sql = if lock {
        concat!(
            "SELECT ",
            redrive_store::columns!(dead_letter),
            " FROM dead_letters WHERE queue = $1 AND id = $2 FOR UPDATE"
        )
    } else {
        concat!(
            "SELECT ",
            redrive_store::columns!(dead_letter),
            " FROM dead_letters WHERE queue = $1 AND id = $2"
        )
    };
    match db.query_opt(sql, &[&queue.as_str(), &id]).await? {
        Some(row) => checked_record(&row).map(Some).map_err(undecodable),
        None => Ok(None),
    }
}

// ---- reads ----------------------------------------------------------------------------

/// One statement (one snapshot); an empty page is told apart from a missing queue by a
/// second look (records are deleted with their queue, in one transaction).
pub(crate) async fn list(db: &Db<'_>, q: &DeadLetterQuery) -> StoreResult<DeadLetterPage> {
    let (sql, binds) = list_sql::<Postgres>(q);
    let rows = db.query_built(&sql, &values(binds)).await?;
    if rows.is_empty() {
        queue_id(db, &q.queue).await?;
    }
    Ok(page(rows.iter().map(checked_record).collect()))
}

/// This backend's SQL for the shared statements of [`redrive_store::skeleton::failures`].
pub(crate) struct Postgres;

impl Dialect for Postgres {
    fn placeholder(n: usize) -> String {
        format!("${n}")
    }
    fn contains(column: &str, p: &str) -> String {
        format!("strpos(lower({column}), {p}::text) > 0")
    }
    fn one_of(column: &str, p: &str) -> String {
        format!("{column} = ANY({p}::text[])")
    }
}

/// The values of a built statement.
fn values(binds: Vec<Bind>) -> Owned {
    binds
        .into_iter()
        .map(|b| -> Box<dyn ToSql + Sync + Send> {
            match b {
                Bind::Text(s) => Box::new(s),
                Bind::Int(i) => Box::new(i),
                Bind::List(l) => Box::new(l),
            }
        })
        .collect()
}

/// A page of the failure aggregate, each signature with its sparkline.
pub(crate) async fn failures(db: &Db<'_>, q: &FailureQuery) -> StoreResult<Vec<FailureSignature>> {
    let (sql, binds) = failures_sql::<Postgres>(q);
    let rows = db.query_built(&sql, &values(binds)).await?;
    let mut out = rows
        .iter()
        .map(|r| signature_row(&Cols(r), q.area))
        .collect::<StoreResult<Vec<_>>>()?;
    let hours = hours_sql::<Postgres>();
    let start = sparkline_start(q.now);
    for f in &mut out {
        let params: Owned = vec![
            Box::new(f.id.clone()),
            Box::new(q.area.as_str().to_owned()),
            Box::new(start),
        ];
        let rows = db.query_built(&hours, &params).await?;
        let buckets = rows
            .iter()
            .map(|r| Ok((Cols(r).int(0)?, Cols(r).int(1)?)))
            .collect::<StoreResult<Vec<_>>>()?;
        f.sparkline = sparkline(q.now, &buckets);
    }
    Ok(out)
}

pub(crate) async fn get_one(
    db: &Db<'_>,
    queue: &EntityName,
    id: &str,
) -> StoreResult<DeadLetterRecord> {
    match load_record(db, queue, id, false).await? {
        Some(record) => Ok(record),
        None => {
            queue_id(db, queue).await?;
            Err(not_found(queue, id))
        }
    }
}

// ---- writes ---------------------------------------------------------------------------

pub(crate) async fn receive(
    db: &Db<'_>,
    name: &EntityName,
    max: u32,
    lock_ms: u64,
    now: Timestamp,
) -> StoreResult<Vec<DeadLetterDelivery>> {
    queue(db, name).await?;
    // SKIP LOCKED: concurrent dead-letter receivers take different records.
    let rows = db
        .query(
            concat!(
                "SELECT ",
                redrive_store::columns!(dead_letter),
                " FROM dead_letters WHERE queue = $1 AND area = 'live' \
                  AND (locked_until IS NULL OR locked_until <= $2) AND undecodable IS NULL \
                 ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED"
            ),
            &[&name.as_str(), &now.0, &i64::from(max)],
        )
        .await?;
    // A row that cannot be read is passed over: it is neither locked nor handed out.
    let records = rows.iter().filter_map(|r| checked_record(r).ok()).collect();
    let out = lock_records(records, lock_ms, now);
    if out.is_empty() {
        return Ok(out);
    }
    let ids: Vec<&str> = out.iter().map(|d| d.record.id.as_str()).collect();
    let tokens: Vec<&str> = out.iter().map(|d| d.lock_token.as_str()).collect();
    let counts: Vec<i64> = out
        .iter()
        .map(|d| i64::from(d.record.dlq_delivery_count))
        .collect();
    let locked_until = out[0].locked_until;
    db.execute(
        "UPDATE dead_letters AS d SET lock_token = u.token, locked_until = $1, \
         dlq_delivery_count = u.n \
         FROM unnest($2::text[], $3::text[], $4::bigint[]) AS u(id, token, n) \
         WHERE d.id = u.id",
        &[&locked_until.0, &ids, &tokens, &counts],
    )
    .await?;
    Ok(out)
}

pub(crate) async fn settle(
    db: &Db<'_>,
    name: &EntityName,
    lock_token: &str,
    complete: bool,
    now: Timestamp,
) -> StoreResult<()> {
    queue(db, name).await?;
    let found = db
        .query_opt(
            "SELECT id, locked_until FROM dead_letters WHERE lock_token = $1 AND queue = $2 \
             FOR UPDATE",
            &[&lock_token, &name.as_str()],
        )
        .await?;
    let Some(row) = found else {
        return Err(StoreError::LockLost);
    };
    let id: String = get(&row, 0)?;
    check_lock(get(&row, 1)?, now)?;
    let sql = if complete {
        "DELETE FROM dead_letters WHERE id = $1"
    } else {
        "UPDATE dead_letters SET lock_token = NULL, locked_until = NULL WHERE id = $1"
    };
    db.execute(sql, &[&id]).await?;
    Ok(())
}

pub(crate) async fn resubmit(
    db: &Db<'_>,
    name: &EntityName,
    id: &str,
    now: Timestamp,
) -> StoreResult<Enqueued> {
    let q = queue(db, name).await?;
    // Locked: of two concurrent resubmissions, the second finds the record archived.
    let record = check_resubmit(&q, id, load_record(db, name, id, true).await?)?;
    let sequence = allocate_one(db, q.id, record.session_id.as_deref()).await?;
    let (row, enqueued) = resubmitted(&q, &record, sequence, now)?;
    insert_messages(db, q.id, now, &[row]).await?;
    archive(db, &record.id).await?;
    crate::cases::open_one(db, &record.id, now).await?;
    Ok(enqueued)
}

/// Moves a record: its replay bookkeeping as the skeleton's `moved` says for the queue's
/// policy (loaded, so the move is decided by the policy in force), any lock released.
/// The record's row is locked first, so that a concurrent claim, judgement or move sees
/// what this one left.
pub(crate) async fn move_to(
    db: &Db<'_>,
    name: &EntityName,
    id: &str,
    to: Area,
    now: Timestamp,
) -> StoreResult<()> {
    let q = queue(db, name).await?;
    let record = load_record(db, name, id, true)
        .await?
        .ok_or_else(|| not_found(name, id))?;
    let mark = moved(&q.policy, &record.replay, record.area, to, now);
    db.execute(
        "UPDATE dead_letters SET area = $2, lock_token = NULL, locked_until = NULL, \
         replay_due_at = $3, replay_failures = $4, last_replay_error = $5, \
         replay_cause = CASE WHEN area = $2 THEN replay_cause ELSE NULL END WHERE id = $1",
        &[
            &record.id,
            &to.as_str(),
            &millis(mark.due_at),
            &i64::from(mark.failures),
            &mark.last_error,
        ],
    )
    .await?;
    crate::cases::open_one(db, &record.id, now).await
}

/// Archives a resubmitted record: no longer a candidate, and any dead-letter receiver's
/// lock dropped (a lock is a claim on the live record; after a move it settles nothing).
async fn archive(db: &Db<'_>, id: &str) -> StoreResult<()> {
    db.execute(
        "UPDATE dead_letters SET area = 'archived', lock_token = NULL, locked_until = NULL, \
         replay_due_at = NULL WHERE id = $1",
        &[&id],
    )
    .await?;
    Ok(())
}
