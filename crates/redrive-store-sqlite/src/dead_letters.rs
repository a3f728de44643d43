//! Dead letters: the one dead-lettering path shared by receive, settle and sweep (the
//! plan is the skeleton's, the statements are here), and the operations on a queue's
//! dead-letter store.

use redrive_core::{Area, EntityName, EvidenceQuality, Timestamp};
use redrive_store::failure::{FailureQuery, FailureSignature, sparkline, sparkline_start};
use redrive_store::skeleton::columns::millis;
use redrive_store::skeleton::dead_letters::{
    check_lock, check_resubmit, lock_records, not_found, page, resubmitted, undecodable,
};
use redrive_store::skeleton::entities::QueueRow;
use redrive_store::skeleton::failures::{
    Bind, Dialect, failures_sql, hours_sql, list_sql, signature_row,
};
use redrive_store::skeleton::replay::moved;
use redrive_store::skeleton::{Cause, DeadLetterPlan, Head};
use redrive_store::{
    DeadLetterDelivery, DeadLetterPage, DeadLetterQuery, DeadLetterRecord, Effects, Enqueued,
    ReplayMark, StoreError, StoreResult,
};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

use crate::error::Db;
use crate::rows::{
    Cols, allocate_sequences, insert_record, load_row, query_all, query_records, queue_id,
};
use crate::writer::Tx;

/// Dead-letters the message `head` of queue `q`: writes the evidence record (and, when the
/// queue names a dead-letter queue that can take it, a copy there), removes the message,
/// reports it. Returns the record's id.
pub(crate) fn dead_letter(
    tx: &mut Tx<'_>,
    q: &QueueRow,
    head: &Head,
    cause: Cause,
    now: Timestamp,
    effects: &mut Effects,
) -> StoreResult<String> {
    // The row as it is (its lock may be held in memory), and whether a crash left its
    // delivery count approximate (`crate::locks::recover`).
    let mut row = load_row(tx.conn, head.key)?;
    row.head.meta = head.meta.clone();
    let approximate =
        tx.locks().approximate_rows() && crate::locks::count_approximate(tx.conn, head.key)?;
    let target = match &q.policy.dead_letter_queue {
        Some(t) => tx.queue_opt(t.as_str())?,
        None => None,
    };
    let plan = DeadLetterPlan::new(q, head, row, cause, target.as_deref(), now)?;
    let forwarded = match plan.target() {
        Some(t) => {
            let sequence = allocate_sequences(tx.conn, t.id, 1)?;
            crate::messages::insert(tx, t.id, now, &plan.copy(sequence)?)?;
            Some(sequence)
        }
        None => None,
    };
    let mut record = plan.finish(forwarded, effects);
    if approximate {
        record.count_quality = EvidenceQuality::Approximate;
    }
    insert_record(tx.conn, &record, now)?;
    crate::messages::remove_row(tx, head.key)?;
    Ok(record.id)
}

/// A record of `queue`, in any area.
pub(crate) fn load_record(
    conn: &Connection,
    queue: &EntityName,
    id: &str,
) -> StoreResult<Option<DeadLetterRecord>> {
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            redrive_store::columns!(dead_letter),
            " FROM dead_letters WHERE queue = ?1 AND id = ?2"
        ))
        .db()?;
    match query_records(&mut stmt, params![queue.as_str(), id])?.pop() {
        Some(Ok(r)) => Ok(Some(r)),
        Some(Err(u)) => Err(undecodable(u)),
        None => Ok(None),
    }
}

// ---- reads ----------------------------------------------------------------------------

pub(crate) fn list(conn: &Connection, q: &DeadLetterQuery) -> StoreResult<DeadLetterPage> {
    queue_id(conn, &q.queue)?;
    let (sql, binds) = list_sql::<Sqlite>(q);
    let mut stmt = conn.prepare_cached(&sql).db()?;
    let rows = query_records(&mut stmt, params_from_iter(values(binds)?))?;
    Ok(page(rows))
}

/// This backend's SQL for the shared statements of [`redrive_store::skeleton::failures`].
pub(crate) struct Sqlite;

impl Dialect for Sqlite {
    fn placeholder(n: usize) -> String {
        format!("?{n}")
    }
    fn contains(column: &str, p: &str) -> String {
        // lower() folds ASCII letters only, as the filter promises.
        format!("instr(lower({column}), {p}) > 0")
    }
    fn one_of(column: &str, p: &str) -> String {
        format!("{column} IN (SELECT value FROM json_each({p}))")
    }
}

/// The values of a built statement (a list as a JSON array, for `json_each`).
fn values(binds: Vec<Bind>) -> StoreResult<Vec<Value>> {
    binds
        .into_iter()
        .map(|b| {
            Ok(match b {
                Bind::Text(s) => Value::Text(s),
                Bind::Int(i) => Value::Integer(i),
                Bind::List(l) => Value::Text(
                    serde_json::to_string(&l)
                        .map_err(|e| redrive_store::skeleton::columns::bad_value("queues", e))?,
                ),
            })
        })
        .collect()
}

/// A page of the failure aggregate, each signature with its sparkline.
pub(crate) fn failures(conn: &Connection, q: &FailureQuery) -> StoreResult<Vec<FailureSignature>> {
    let (sql, binds) = failures_sql::<Sqlite>(q);
    let mut stmt = conn.prepare_cached(&sql).db()?;
    let mut out = query_all(&mut stmt, params_from_iter(values(binds)?), |r| {
        signature_row(&Cols(r), q.area)
    })?;
    let mut hours = conn.prepare_cached(&hours_sql::<Sqlite>()).db()?;
    let start = sparkline_start(q.now);
    for f in &mut out {
        let buckets = query_all(&mut hours, params![f.id, q.area.as_str(), start], |r| {
            Ok((r.get::<_, i64>(0).db()?, r.get::<_, i64>(1).db()?))
        })?;
        f.sparkline = sparkline(q.now, &buckets);
    }
    Ok(out)
}

pub(crate) fn get(
    conn: &Connection,
    queue: &EntityName,
    id: &str,
) -> StoreResult<DeadLetterRecord> {
    queue_id(conn, queue)?;
    load_record(conn, queue, id)?.ok_or_else(|| not_found(queue, id))
}

// ---- writes ---------------------------------------------------------------------------

pub(crate) fn receive(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    max: u32,
    lock_ms: u64,
    now: Timestamp,
) -> StoreResult<Vec<DeadLetterDelivery>> {
    tx.queue(queue)?;
    let records = {
        let mut stmt = tx
            .conn
            .prepare_cached(concat!(
                "SELECT ",
                redrive_store::columns!(dead_letter),
                " FROM dead_letters WHERE queue = ?1 AND area = 'live' \
                  AND (locked_until IS NULL OR locked_until <= ?2) AND undecodable IS NULL \
                 ORDER BY id LIMIT ?3"
            ))
            .db()?;
        // A row that cannot be read is passed over: it is neither locked nor handed out.
        query_records(&mut stmt, params![queue.as_str(), now.0, i64::from(max)])?
            .into_iter()
            .filter_map(Result::ok)
            .collect()
    };
    let out = lock_records(records, lock_ms, now);
    let mut update = tx
        .conn
        .prepare_cached(
            "UPDATE dead_letters SET lock_token = ?2, locked_until = ?3, \
             dlq_delivery_count = ?4 WHERE id = ?1",
        )
        .db()?;
    for d in &out {
        update
            .execute(params![
                d.record.id,
                d.lock_token,
                d.locked_until.0,
                i64::from(d.record.dlq_delivery_count)
            ])
            .db()?;
    }
    Ok(out)
}

pub(crate) fn settle(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    lock_token: &str,
    complete: bool,
    now: Timestamp,
) -> StoreResult<()> {
    tx.queue(queue)?;
    let found: Option<(String, Option<i64>)> = tx
        .conn
        .prepare_cached(
            "SELECT id, locked_until FROM dead_letters WHERE lock_token = ?1 AND queue = ?2",
        )
        .db()?
        .query_row(params![lock_token, queue.as_str()], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()
        .db()?;
    let Some((id, until)) = found else {
        return Err(StoreError::LockLost);
    };
    check_lock(until, now)?;
    let sql = if complete {
        "DELETE FROM dead_letters WHERE id = ?1"
    } else {
        "UPDATE dead_letters SET lock_token = NULL, locked_until = NULL WHERE id = ?1"
    };
    tx.conn.prepare_cached(sql).db()?.execute([id]).db()?;
    Ok(())
}

pub(crate) fn resubmit(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    id: &str,
    now: Timestamp,
) -> StoreResult<Enqueued> {
    let q = tx.queue(queue)?;
    let record = check_resubmit(&q, id, load_record(tx.conn, queue, id)?)?;
    let sequence = allocate_sequences(tx.conn, q.id, 1)?;
    let (row, enqueued) = resubmitted(&q, &record, sequence, now)?;
    crate::messages::insert(tx, q.id, now, &row)?;
    let mark = moved(&q.policy, &record.replay, record.area, Area::Archived, now);
    set_area(tx.conn, &record.id, Area::Archived, &mark, now)?;
    Ok(enqueued)
}

/// Moves a record to another area at `now` with its replay bookkeeping
/// ([`moved`]: into live on a queue that replays, a candidate with its failures
/// forgotten; out of live, a candidate no more), and drops any dead-letter receiver's
/// lock on it (a lock is a claim on the live record; after a move it settles nothing).
pub(crate) fn move_to(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    id: &str,
    to: Area,
    now: Timestamp,
) -> StoreResult<()> {
    let q = tx.queue(queue)?;
    let record = load_record(tx.conn, queue, id)?.ok_or_else(|| not_found(queue, id))?;
    let mark = moved(&q.policy, &record.replay, record.area, to, now);
    set_area(tx.conn, id, to, &mark, now)
}

/// Moves a record, writes its replay bookkeeping, and drops any lock on it. A move to
/// another area is not a judgement's: the record no longer counts under the cause of
/// one (its judgement stays, as history). Opens the record's case at `now` if it stands
/// for one in its new area ([`crate::cases::open`]; a case it had stays, whatever the
/// area).
fn set_area(
    conn: &Connection,
    id: &str,
    to: Area,
    mark: &ReplayMark,
    now: Timestamp,
) -> StoreResult<()> {
    conn.prepare_cached(
        "UPDATE dead_letters SET area = ?2, replay_due_at = ?3, replay_failures = ?4, \
         last_replay_error = ?5, lock_token = NULL, locked_until = NULL, \
         replay_cause = CASE WHEN area = ?2 THEN replay_cause ELSE NULL END WHERE id = ?1",
    )
    .db()?
    .execute(params![
        id,
        to.as_str(),
        millis(mark.due_at),
        i64::from(mark.failures),
        mark.last_error,
    ])
    .db()?;
    crate::cases::open(conn, id, now)
}
