//! Automatic replay's operations on dead-letter records: claims of due candidates, whole
//! and partial quarantine, the end or failure of a judgement (writer), the drain at start
//! and retention (writer), imports (writer), and the counts (readers). What to write is
//! `redrive_store::skeleton::replay`'s; the statements are here.

use redrive_core::{Area, EntityName, Timestamp};
use redrive_store::skeleton::columns::{bad_value, to_json};
use redrive_store::skeleton::dead_letters::{not_found, undecodable_reason};
use redrive_store::skeleton::replay::{
    CountRow, claimed, copy_record, fold_counts, imported, quarantine_whole, source_gone,
};
use redrive_store::{
    DeadLetterRecord, DrainRule, Quarantine, QuarantineCopy, ReplayClaim, ReplayCounts,
    ReplayFinish, RetentionRule, StoreError, StoreResult, UndecodableRecord,
};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::dead_letters::load_record;
use crate::error::Db;
use crate::rows::{insert_record, query_all, queue_id};
use crate::writer::Tx;

// ---- writes ---------------------------------------------------------------------------

/// Claims up to `max` due, live, unlocked candidates across queues, earliest due first,
/// and moves their due time to the end of the claim. A candidate whose row cannot be read
/// is set aside instead (its reason stored in `undecodable`, which the claim's look
/// passes over from then on) and reported.
pub(crate) fn claim(
    tx: &mut Tx<'_>,
    now: Timestamp,
    max: u32,
    claim_ms: u64,
) -> StoreResult<ReplayClaim> {
    // The candidates in claim order with their sizes, then as many whole records as the
    // claim's byte budget takes.
    let order: Vec<(String, String, u64)> = {
        let mut stmt = tx
            .conn
            .prepare_cached(
                "SELECT queue, id, length(body) FROM dead_letters \
                 WHERE replay_due_at IS NOT NULL AND replay_due_at <= ?1 \
                  AND area = 'live' AND (locked_until IS NULL OR locked_until <= ?1) \
                  AND undecodable IS NULL \
                 ORDER BY replay_due_at, id LIMIT ?2",
            )
            .db()?;
        let rows = stmt
            .query_map(params![now.0, i64::from(max)], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get::<_, Option<i64>>(2)?))
            })
            .db()?;
        let mut out = Vec::new();
        for row in rows {
            let (q, id, n) = row.db()?;
            out.push((q, id, n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0)));
        }
        out
    };
    let take = redrive_store::skeleton::replay::claim_cut(order.iter().map(|(_, _, n)| *n));
    let mut out = ReplayClaim::default();
    for (q, id, _) in order.into_iter().take(take) {
        let name = match q.parse::<EntityName>() {
            Ok(name) => name,
            Err(e) => {
                let reason = undecodable_reason(&bad_value("dead_letters.queue", e));
                out.undecodable.push(UndecodableRecord {
                    queue: q,
                    id,
                    reason,
                });
                continue;
            }
        };
        match load_record(tx.conn, &name, &id) {
            Ok(Some(r)) => out.records.push(r),
            Ok(None) => {}
            Err(StoreError::DeadLetterUndecodable { queue, id, reason }) => {
                out.undecodable
                    .push(UndecodableRecord { queue, id, reason });
            }
            Err(e) => return Err(e),
        }
    }
    let due = claimed(now, claim_ms);
    let mut update = tx
        .conn
        .prepare_cached("UPDATE dead_letters SET replay_due_at = ?2 WHERE id = ?1")
        .db()?;
    for r in &mut out.records {
        update.execute(params![r.id, due.0]).db()?;
        r.replay.due_at = Some(due);
    }
    let mut set_aside = tx
        .conn
        .prepare_cached("UPDATE dead_letters SET undecodable = ?2 WHERE id = ?1")
        .db()?;
    for u in &out.undecodable {
        set_aside.execute(params![u.id, u.reason]).db()?;
    }
    Ok(out)
}

/// Quarantines a live record whole and opens its case at `now`; `false` when it is no
/// longer live.
pub(crate) fn quarantine(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    id: &str,
    q: Quarantine,
    now: Timestamp,
) -> StoreResult<bool> {
    let found = load_record(tx.conn, queue, id)?.ok_or_else(|| not_found(queue, id))?;
    if found.area != Area::Live {
        return Ok(false);
    }
    let w = quarantine_whole(&found.message_id, &q.judgement, q.body)?;
    let (body, sha) = w.body.unzip();
    let n = tx
        .conn
        .prepare_cached(
            "UPDATE dead_letters SET area = 'quarantine', message_id = ?3, \
             body = coalesce(?4, body), body_sha256 = coalesce(?5, body_sha256), \
             judgement = ?6, replay_cause = ?7, replay_due_at = NULL, lock_token = NULL, \
             locked_until = NULL WHERE queue = ?1 AND id = ?2 AND area = 'live'",
        )
        .db()?
        .execute(params![
            queue.as_str(),
            id,
            w.message_id,
            body,
            sha,
            w.judgement,
            w.cause
        ])
        .db()?;
    if n == 0 {
        return Ok(false);
    }
    crate::cases::open(tx.conn, id, now)?;
    Ok(true)
}

/// Writes a quarantine copy if no record has its id; `false` when one has. Its case opens
/// at the judgement's time (the trait gives this write no other).
pub(crate) fn put_copy(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    copy: &QuarantineCopy,
) -> StoreResult<bool> {
    let source =
        load_record(tx.conn, queue, &copy.from)?.ok_or_else(|| source_gone(queue, &copy.from))?;
    let exists = tx
        .conn
        .prepare_cached("SELECT 1 FROM dead_letters WHERE id = ?1")
        .db()?
        .exists([&copy.id])
        .db()?;
    if exists {
        return Ok(false);
    }
    let now = Timestamp(copy.judgement.judged_at);
    insert_record(tx.conn, &copy_record(&source, copy), now)?;
    Ok(true)
}

/// Archives (with the judgement) or deletes a live record; `false` when it is gone or
/// no longer live.
pub(crate) fn finish(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    id: &str,
    finish: &ReplayFinish,
) -> StoreResult<bool> {
    let n = match finish {
        ReplayFinish::Archive(j) => tx
            .conn
            .prepare_cached(
                "UPDATE dead_letters SET area = 'archived', judgement = ?3, replay_cause = ?4, \
                 replay_due_at = NULL, lock_token = NULL, locked_until = NULL \
                 WHERE queue = ?1 AND id = ?2 AND area = 'live'",
            )
            .db()?
            .execute(params![
                queue.as_str(),
                id,
                to_json(j)?,
                j.cause.map(|c| c.as_str())
            ])
            .db()?,
        ReplayFinish::Delete => tx
            .conn
            .prepare_cached(
                "DELETE FROM dead_letters WHERE queue = ?1 AND id = ?2 AND area = 'live'",
            )
            .db()?
            .execute(params![queue.as_str(), id])
            .db()?,
    };
    Ok(n > 0)
}

/// Counts a failed judgement of a live record and makes it due again at `retry_at`.
pub(crate) fn fail(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    id: &str,
    error: &str,
    retry_at: Timestamp,
) -> StoreResult<Option<u32>> {
    let failures: Option<i64> = tx
        .conn
        .prepare_cached(
            "UPDATE dead_letters SET replay_failures = replay_failures + 1, \
             last_replay_error = ?3, replay_due_at = ?4 \
             WHERE queue = ?1 AND id = ?2 AND area = 'live' RETURNING replay_failures",
        )
        .db()?
        .query_row(params![queue.as_str(), id, error, retry_at.0], |r| r.get(0))
        .optional()
        .db()?;
    failures
        .map(|n| u32::try_from(n).map_err(|e| bad_value("dead_letters.replay_failures", e)))
        .transpose()
}

/// The drain at start: live, unlocked records of each rule's queue that are not
/// candidates and were dead-lettered before its `older_than` become candidates due at
/// its `due_at`, oldest first, at most `max` in all. A record counts as unlocked when no
/// lock holds it at its due time (a lock that runs out before then does not keep it
/// back: the claim skips it while the lock holds).
pub(crate) fn drain(tx: &mut Tx<'_>, rules: &[DrainRule], max: u32) -> StoreResult<u64> {
    let mut stmt = tx
        .conn
        .prepare_cached(
            "UPDATE dead_letters SET replay_due_at = ?3 WHERE id IN ( \
               SELECT id FROM dead_letters WHERE queue = ?1 AND dead_lettered_at < ?2 \
                 AND area = 'live' AND replay_due_at IS NULL \
                 AND (locked_until IS NULL OR locked_until <= ?3) \
               ORDER BY dead_lettered_at, id LIMIT ?4)",
        )
        .db()?;
    let mut made = 0u64;
    for rule in rules {
        let left = u64::from(max) - made;
        if left == 0 {
            break;
        }
        let n = stmt
            .execute(params![
                rule.queue.as_str(),
                rule.older_than.0,
                rule.due_at.0,
                i64::try_from(left).unwrap_or(i64::MAX),
            ])
            .db()?;
        made += u64::try_from(n).unwrap_or(0);
    }
    Ok(made)
}

/// Retention: deletes the records of each rule's queue dead-lettered before its
/// `before`, every area, oldest first, at most `max` in all.
pub(crate) fn expire(
    tx: &mut Tx<'_>,
    rules: &[RetentionRule],
    max: u32,
) -> StoreResult<Vec<(EntityName, u64)>> {
    let mut stmt = tx
        .conn
        .prepare_cached(
            "DELETE FROM dead_letters WHERE id IN ( \
               SELECT id FROM dead_letters WHERE queue = ?1 AND dead_lettered_at < ?2 \
               ORDER BY dead_lettered_at, id LIMIT ?3)",
        )
        .db()?;
    let mut out: Vec<(EntityName, u64)> = Vec::new();
    let mut deleted = 0u64;
    for rule in rules {
        let left = u64::from(max) - deleted;
        if left == 0 {
            break;
        }
        let n = stmt
            .execute(params![
                rule.queue.as_str(),
                rule.before.0,
                i64::try_from(left).unwrap_or(i64::MAX),
            ])
            .db()?;
        let n = u64::try_from(n).unwrap_or(0);
        if n == 0 {
            continue;
        }
        deleted += n;
        match out.iter_mut().find(|(q, _)| *q == rule.queue) {
            Some((_, total)) => *total += n,
            None => out.push((rule.queue.clone(), n)),
        }
    }
    Ok(out)
}

/// Stores imported records live on `queue`, each a candidate if its policy replays.
pub(crate) fn import(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    records: Vec<DeadLetterRecord>,
    now: Timestamp,
) -> StoreResult<()> {
    let q = tx.queue(queue)?;
    for r in records {
        insert_record(tx.conn, &imported(&q.name, &q.policy, r, now), now)?;
    }
    Ok(())
}

// ---- reads ----------------------------------------------------------------------------

/// The count query's columns, after its `FROM ... WHERE`: grouped by queue, area and
/// cause (`?1`: the flag threshold).
macro_rules! count_cols {
    () => {
        "SELECT queue, area, replay_cause, count(*), \
         coalesce(sum(replay_due_at IS NOT NULL AND undecodable IS NULL), 0), \
         coalesce(sum(replay_failures > 0), 0), coalesce(sum(replay_failures >= ?1), 0), \
         count(undecodable) FROM dead_letters"
    };
}

fn count_row(r: &Row<'_>) -> StoreResult<CountRow> {
    Ok(CountRow {
        queue: r.get(0).db()?,
        area: r.get(1).db()?,
        cause: r.get(2).db()?,
        records: r.get(3).db()?,
        candidates: r.get(4).db()?,
        failing: r.get(5).db()?,
        flagged: r.get(6).db()?,
        undecodable: r.get(7).db()?,
    })
}

/// The replay counts of `queue` (`QueueNotFound` if it does not exist; all zero when it
/// has no records), or of every queue that has records.
pub(crate) fn counts(
    conn: &Connection,
    queue: Option<&EntityName>,
    flag_after: u32,
) -> StoreResult<Vec<ReplayCounts>> {
    let flag = i64::from(flag_after);
    let Some(q) = queue else {
        let mut stmt = conn
            .prepare_cached(concat!(
                count_cols!(),
                " GROUP BY queue, area, replay_cause"
            ))
            .db()?;
        return fold_counts(query_all(&mut stmt, [flag], count_row)?);
    };
    queue_id(conn, q)?;
    let mut stmt = conn
        .prepare_cached(concat!(
            count_cols!(),
            " WHERE queue = ?2 GROUP BY queue, area, replay_cause"
        ))
        .db()?;
    let mut out = fold_counts(query_all(&mut stmt, params![flag, q.as_str()], count_row)?)?;
    if out.is_empty() {
        out.push(ReplayCounts::empty(q.clone()));
    }
    Ok(out)
}
