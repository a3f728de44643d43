//! Automatic replay's operations on dead-letter records: claims, whole and partial
//! quarantine, finish, failures, the drain at start, retention, counts and import. The
//! bookkeeping is the skeleton's (`redrive_store::skeleton::replay`); here are the
//! statements.
//!
//! Every write that ends a judgement is conditional on the record still being live
//! (`WHERE area = 'live'`, or a row locked `FOR UPDATE` and then checked): under
//! `READ COMMITTED` an `UPDATE` that waited for another transaction's write of the row
//! evaluates its condition again on what that one committed, so of a judgement and an
//! operator's move (or two judgements) exactly one moves the record and the other is
//! told, through its row count, that it did not. Claims and the drain take their rows
//! with `FOR UPDATE SKIP LOCKED`: two nodes never claim the same candidate, and a record
//! another transaction is writing is left to the next look.

use redrive_core::{EntityName, Timestamp};
use redrive_store::skeleton::columns::limit as row_limit;
use redrive_store::skeleton::dead_letters::not_found;
use redrive_store::skeleton::replay::{
    CountRow, claimed, copy_record, fold_counts, imported, quarantine_whole, source_gone,
};
use redrive_store::{
    DeadLetterRecord, DrainRule, Quarantine, QuarantineCopy, ReplayClaim, ReplayCounts,
    ReplayFinish, RetentionRule, StoreResult,
};

use crate::pool::Db;
use crate::rows::{
    OnConflict, checked_record, decode, get, insert_records, queue, queue_id, record,
};

/// Candidates due at `now`, unlocked, earliest due first, across queues; each one's due
/// time moved to the claim's end in the same transaction.
pub(crate) async fn claim(
    db: &Db<'_>,
    now: Timestamp,
    limit: u32,
    claim_ms: u64,
) -> StoreResult<ReplayClaim> {
    if limit == 0 {
        return Ok(ReplayClaim::default());
    }
    // SKIP LOCKED: claims on other nodes (and records being written) are passed over,
    // so no candidate is claimed twice. The candidates in claim order with their sizes
    // first, then as many whole records as the claim's byte budget takes (the rows left
    // over are unlocked at the commit).
    let order = db
        .query(
            "SELECT id, octet_length(body)::bigint FROM dead_letters \
             WHERE replay_due_at <= $1 AND area = 'live' \
              AND (locked_until IS NULL OR locked_until <= $1) AND undecodable IS NULL \
             ORDER BY replay_due_at, id LIMIT $2 FOR UPDATE SKIP LOCKED",
            &[&now.0, &i64::from(limit)],
        )
        .await?;
    let sizes: Vec<u64> = order
        .iter()
        .map(|r| u64::try_from(r.get::<_, i64>(1)).unwrap_or(0))
        .collect();
    let take = redrive_store::skeleton::replay::claim_cut(sizes);
    let ids: Vec<String> = order.iter().take(take).map(|r| r.get(0)).collect();
    let rows = db
        .query(
            concat!(
                "SELECT ",
                redrive_store::columns!(dead_letter),
                " FROM dead_letters WHERE id = ANY($1::text[]) ORDER BY replay_due_at, id"
            ),
            &[&ids],
        )
        .await?;
    // A row that cannot be read is set aside (its reason stored, so the claim's look
    // passes over it from then on), never failing the claim of the others.
    let mut out = ReplayClaim::default();
    for row in &rows {
        match checked_record(row) {
            Ok(r) => out.records.push(r),
            Err(u) => out.undecodable.push(u),
        }
    }
    if !out.undecodable.is_empty() {
        let ids: Vec<String> = out.undecodable.iter().map(|u| u.id.clone()).collect();
        let reasons: Vec<String> = out.undecodable.iter().map(|u| u.reason.clone()).collect();
        db.defer(
            "UPDATE dead_letters AS d SET undecodable = u.reason \
             FROM unnest($1::text[], $2::text[]) AS u(id, reason) WHERE d.id = u.id",
            vec![Box::new(ids), Box::new(reasons)],
        )
        .await?;
    }
    if out.records.is_empty() {
        return Ok(out);
    }
    let due = claimed(now, claim_ms);
    let ids: Vec<String> = out.records.iter().map(|r| r.id.clone()).collect();
    // The rows are locked: the write goes out with the COMMIT.
    db.defer(
        "UPDATE dead_letters SET replay_due_at = $1 WHERE id = ANY($2::text[])",
        vec![Box::new(due.0), Box::new(ids)],
    )
    .await?;
    for r in &mut out.records {
        r.replay.due_at = Some(due);
    }
    Ok(out)
}

/// Quarantines a live record whole; `Ok(false)` when it is no longer live.
pub(crate) async fn quarantine(
    db: &Db<'_>,
    queue: &EntityName,
    id: &str,
    q: &Quarantine,
    now: Timestamp,
) -> StoreResult<bool> {
    // Locked: a concurrent move or judgement of the record waits, or went first.
    let found = db
        .query_opt(
            "SELECT area, message_id FROM dead_letters WHERE queue = $1 AND id = $2 \
             FOR UPDATE",
            &[&queue.as_str(), &id],
        )
        .await?;
    let Some(row) = found else {
        return Err(not_found(queue, id));
    };
    let area: &str = get(&row, 0)?;
    if area != redrive_core::Area::Live.as_str() {
        return Ok(false);
    }
    let message_id: &str = get(&row, 1)?;
    let w = quarantine_whole(message_id, &q.judgement, q.body.clone())?;
    let (body, sha) = match w.body {
        Some((body, sha)) => (Some(body), Some(sha)),
        None => (None, None),
    };
    let changed = db
        .execute(
            "UPDATE dead_letters SET area = 'quarantine', message_id = $3, \
             body = coalesce($4, body), body_sha256 = coalesce($5, body_sha256), \
             judgement = $6, replay_cause = $7, replay_due_at = NULL, \
             lock_token = NULL, locked_until = NULL \
             WHERE queue = $1 AND id = $2 AND area = 'live'",
            &[
                &queue.as_str(),
                &id,
                &w.message_id,
                &body,
                &sha,
                &w.judgement,
                &w.cause,
            ],
        )
        .await?;
    if changed != 1 {
        return Ok(false);
    }
    crate::cases::open_one(db, id, now).await?;
    Ok(true)
}

/// Writes a quarantine copy, create-if-absent; `DeadLetterNotFound` when its source is
/// gone.
pub(crate) async fn put_copy(
    db: &Db<'_>,
    queue: &EntityName,
    copy: &QuarantineCopy,
) -> StoreResult<bool> {
    // The source is read FOR SHARE: it cannot be deleted (a finish that deletes it, the
    // retention rule) or changed until the copy is written.
    let source = db
        .query_opt(
            concat!(
                "SELECT ",
                redrive_store::columns!(dead_letter),
                " FROM dead_letters WHERE queue = $1 AND id = $2 FOR SHARE"
            ),
            &[&queue.as_str(), &copy.from],
        )
        .await?;
    let Some(source) = source else {
        return Err(source_gone(queue, &copy.from));
    };
    let made = copy_record(&record(&source)?, copy);
    // ON CONFLICT: of two writers of one copy id (whatever the area of an existing
    // record), one inserts and the other waits on the key and then does nothing.
    // The trait gives no clock here: the case opens at the judgement's time.
    let now = Timestamp(copy.judgement.judged_at);
    let inserted = insert_records(db, std::slice::from_ref(&made), OnConflict::Skip, now).await?;
    Ok(inserted == 1)
}

/// Archives (with the judgement) or deletes a live record; `Ok(false)` when it is gone or
/// no longer live.
pub(crate) async fn finish(
    db: &Db<'_>,
    queue: &EntityName,
    id: &str,
    finish: &ReplayFinish,
) -> StoreResult<bool> {
    let changed = match finish {
        ReplayFinish::Archive(judgement) => {
            let column = redrive_store::skeleton::replay::judgement_column(Some(judgement))?;
            let cause = redrive_store::skeleton::replay::cause_column(Some(judgement));
            db.execute(
                "UPDATE dead_letters SET area = 'archived', judgement = $3, \
                 replay_cause = $4, replay_due_at = NULL, lock_token = NULL, \
                 locked_until = NULL WHERE queue = $1 AND id = $2 AND area = 'live'",
                &[&queue.as_str(), &id, &column, &cause],
            )
            .await?
        }
        ReplayFinish::Delete => {
            db.execute(
                "DELETE FROM dead_letters WHERE queue = $1 AND id = $2 AND area = 'live'",
                &[&queue.as_str(), &id],
            )
            .await?
        }
    };
    Ok(changed == 1)
}

/// One more failed judgement of a live record, due again at `retry_at`; the failures so
/// far, or `None` when it is gone or no longer live.
pub(crate) async fn fail(
    db: &Db<'_>,
    queue: &EntityName,
    id: &str,
    error: &str,
    retry_at: Timestamp,
) -> StoreResult<Option<u32>> {
    let row = db
        .query_opt(
            "UPDATE dead_letters SET replay_failures = replay_failures + 1, \
             last_replay_error = $3, replay_due_at = $4 \
             WHERE queue = $1 AND id = $2 AND area = 'live' RETURNING replay_failures",
            &[&queue.as_str(), &id, &error, &retry_at.0],
        )
        .await?;
    match row {
        Some(row) => {
            let failures: i64 = get(&row, 0)?;
            u32::try_from(failures).map(Some).map_err(|e| {
                redrive_store::skeleton::columns::bad_value("dead_letters.replay_failures", e)
            })
        }
        None => Ok(None),
    }
}

/// The drain at start: live records that are not candidates and not locked, of each
/// rule's queue and older than its bound, become candidates; at most `limit` in all,
/// rules in order, oldest first within each.
///
/// Without a clock of its own, "not locked" is judged at the rule's `due_at`: a record
/// whose dead-letter lock runs out by the time it would be due is taken (a claim checks
/// the lock again at its own time).
pub(crate) async fn drain(db: &Db<'_>, rules: &[DrainRule], limit: u32) -> StoreResult<u64> {
    let mut left = u64::from(limit);
    for rule in rules {
        if left == 0 {
            break;
        }
        let n = db
            .execute(
                "UPDATE dead_letters SET replay_due_at = $4 WHERE id IN (\
                   SELECT id FROM dead_letters WHERE queue = $1 AND area = 'live' \
                   AND replay_due_at IS NULL AND dead_lettered_at < $2 \
                   AND (locked_until IS NULL OR locked_until <= $4) \
                   ORDER BY dead_lettered_at, id LIMIT $3 FOR UPDATE SKIP LOCKED)",
                &[
                    &rule.queue.as_str(),
                    &rule.older_than.0,
                    &row_limit(usize::try_from(left).unwrap_or(usize::MAX)),
                    &rule.due_at.0,
                ],
            )
            .await?;
        left = left.saturating_sub(n);
    }
    Ok(u64::from(limit) - left)
}

/// Retention: deletes the oldest records (every area) of each rule's queue older than
/// its bound, at most `limit` in all; how many per queue, where any.
pub(crate) async fn expire(
    db: &Db<'_>,
    rules: &[RetentionRule],
    limit: u32,
) -> StoreResult<Vec<(EntityName, u64)>> {
    let mut left = u64::from(limit);
    let mut out = Vec::new();
    for rule in rules {
        if left == 0 {
            break;
        }
        // SKIP LOCKED: a record another transaction is writing (a judgement, a receive)
        // is left to the next round rather than waited for.
        let n = db
            .execute(
                "DELETE FROM dead_letters WHERE id IN (\
                   SELECT id FROM dead_letters WHERE queue = $1 AND dead_lettered_at < $2 \
                   ORDER BY dead_lettered_at, id LIMIT $3 FOR UPDATE SKIP LOCKED)",
                &[
                    &rule.queue.as_str(),
                    &rule.before.0,
                    &row_limit(usize::try_from(left).unwrap_or(usize::MAX)),
                ],
            )
            .await?;
        if n > 0 {
            match out.iter_mut().find(|(q, _)| *q == rule.queue) {
                Some((_, total)) => *total += n,
                None => out.push((rule.queue.clone(), n)),
            }
        }
        left = left.saturating_sub(n);
    }
    Ok(out)
}

/// The count query's columns and table; its `WHERE` (if any) and `GROUP BY` follow
/// (`$1`: the flag threshold).
macro_rules! count_sql {
    ($rest:literal) => {
        concat!(
            "SELECT queue, area, replay_cause, count(*), \
             count(replay_due_at) FILTER (WHERE undecodable IS NULL), \
             count(*) FILTER (WHERE replay_failures > 0), \
             count(*) FILTER (WHERE replay_failures >= $1), count(undecodable) \
             FROM dead_letters",
            $rest,
            " GROUP BY queue, area, replay_cause"
        )
    };
}

/// The counts, one statement (one snapshot), folded by the skeleton. A named queue with
/// no records counts zero everywhere (`QueueNotFound` when there is no such queue).
pub(crate) async fn counts(
    db: &Db<'_>,
    queue: Option<&EntityName>,
    flag_after: u32,
) -> StoreResult<Vec<ReplayCounts>> {
    let flag = i64::from(flag_after);
    // Two statements rather than one with `$2 IS NULL OR ...`, so that one queue's counts
    // are planned on its index.
    let rows = match queue {
        Some(q) => {
            db.query(count_sql!(" WHERE queue = $2"), &[&flag, &q.as_str()])
                .await?
        }
        None => db.query(count_sql!(""), &[&flag]).await?,
    };
    let rows = decode(&rows, |r| {
        Ok(CountRow {
            queue: get(r, 0)?,
            area: get(r, 1)?,
            cause: get(r, 2)?,
            records: get(r, 3)?,
            candidates: get(r, 4)?,
            failing: get(r, 5)?,
            flagged: get(r, 6)?,
            undecodable: get(r, 7)?,
        })
    })?;
    let mut out = fold_counts(rows)?;
    if let Some(q) = queue
        && out.is_empty()
    {
        queue_id(db, q).await?;
        out.push(ReplayCounts::empty(q.clone()));
    }
    Ok(out)
}

/// Stores imported records in the live area of `name`, as the skeleton makes them.
pub(crate) async fn import(
    db: &Db<'_>,
    name: &EntityName,
    records: &[DeadLetterRecord],
    now: Timestamp,
) -> StoreResult<()> {
    // Key-share locked: the queue is not deleted (nor its policy changed) under the
    // import, and the records carry the policy version that made them candidates.
    let q = queue(db, name).await?;
    let made: Vec<DeadLetterRecord> = records
        .iter()
        .map(|r| imported(&q.name, &q.policy, r.clone(), now))
        .collect();
    insert_records(db, &made, OnConflict::Fail, now).await?;
    Ok(())
}
