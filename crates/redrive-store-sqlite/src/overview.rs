//! The overview's counts: a fixed number of grouped reads over the indexes of messages
//! (`messages_due`), dead letters (`dead_letters_area`, `dead_letters_candidates`) and
//! cases (`cases_open_by_queue`), whatever the number of queues.

use std::collections::HashMap;

use redrive_core::{EntityName, Timestamp};
use redrive_store::skeleton::columns::bad_value;
use redrive_store::skeleton::entities::QueueRow;
use redrive_store::skeleton::messages::count_expired_locks;
use redrive_store::{CaseTally, EntityCounts, OverviewCounts, QueueCounts, StoreResult};
use rusqlite::{Connection, params};

use crate::error::Db;
use crate::locks::Locks;
use crate::rows::{Cols, head, head_cols, query_all};

fn n(v: i64) -> StoreResult<u64> {
    u64::try_from(v).map_err(|e| bad_value("count(*)", e))
}

/// Every queue's counts at `now`, its quarantined and flagged records, and the open cases
/// of every queue. One reader connection: the statements see the same committed state
/// unless a write lands between them (counts are a moment's look either way).
pub(crate) fn counts(
    conn: &Connection,
    now: Timestamp,
    flag_after: u32,
    locks: &Locks,
) -> StoreResult<OverviewCounts> {
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            redrive_store::columns!(queue),
            " FROM queues ORDER BY name"
        ))
        .db()?;
    let rows = query_all(&mut stmt, [], |r| QueueRow::decode(&Cols(r)))?;
    let by_id: HashMap<i64, usize> = rows.iter().enumerate().map(|(i, q)| (q.id, i)).collect();
    let by_name: HashMap<&str, usize> = rows
        .iter()
        .enumerate()
        .map(|(i, q)| (q.name.as_str(), i))
        .collect();
    let mut out: Vec<EntityCounts> = rows
        .iter()
        .map(|q| EntityCounts {
            queue: q.name.clone(),
            counts: QueueCounts::default(),
            quarantined: 0,
            flagged: 0,
        })
        .collect();
    // Messages by queue, state and whether due: one pass of `messages_due`.
    let mut stmt = conn
        .prepare_cached(
            "SELECT queue_id, state, due_at <= ?1, count(*), min(enqueued_at) FROM messages \
             GROUP BY queue_id, state, due_at <= ?1",
        )
        .db()?;
    let groups = query_all(&mut stmt, [now.0], |r| {
        Ok((
            r.get::<_, i64>(0).db()?,
            r.get::<_, String>(1).db()?,
            r.get::<_, bool>(2).db()?,
            n(r.get(3).db()?)?,
            r.get::<_, Option<i64>>(4).db()?,
        ))
    })?;
    let mut expired_locks = Vec::new();
    for (queue_id, state, due, count, oldest) in groups {
        let Some(&i) = by_id.get(&queue_id) else {
            continue;
        };
        let c = &mut out[i].counts;
        match (state.as_str(), due) {
            ("available", true) => c.active += count,
            ("available", false) => c.scheduled += count,
            ("locked", false) => c.locked += count,
            ("locked", true) => expired_locks.push(i),
            _ => c.deferred += count,
        }
        if let Some(t) = oldest {
            c.oldest_enqueued_at = Some(
                c.oldest_enqueued_at
                    .map_or(Timestamp(t), |o| o.min(Timestamp(t))),
            );
        }
    }
    // Locks that ran out by now, their release not yet written: where a browse shows them
    // (as `queue_counts` counts them), read only for the queues that have some.
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            head_cols!(),
            " FROM messages WHERE queue_id = ?1 AND state = 'locked' AND due_at <= ?2"
        ))
        .db()?;
    for i in expired_locks {
        let expired = query_all(&mut stmt, params![rows[i].id, now.0], head)?;
        count_expired_locks(&mut out[i].counts, &expired, &rows[i].policy, now);
    }
    // Locks held in memory: their rows were counted as the rows show them.
    {
        let locks = locks.lock();
        for (q, entry) in rows.iter().zip(out.iter_mut()) {
            locks.correct_counts(q.id, &q.policy, &mut entry.counts, now);
        }
    }
    // Dead letters by queue and area: `dead_letters_area` alone.
    let mut stmt = conn
        .prepare_cached("SELECT queue, area, count(*) FROM dead_letters GROUP BY queue, area")
        .db()?;
    let groups = query_all(&mut stmt, [], |r| {
        Ok((
            r.get::<_, String>(0).db()?,
            r.get::<_, String>(1).db()?,
            n(r.get(2).db()?)?,
        ))
    })?;
    for (queue, area, count) in groups {
        let Some(&i) = by_name.get(queue.as_str()) else {
            continue;
        };
        match area.as_str() {
            "live" => out[i].counts.dead_lettered += count,
            "quarantine" => out[i].quarantined += count,
            _ => {}
        }
    }
    // Flagged records are live candidates (a failed judgement keeps one due again):
    // `dead_letters_candidates`, as long as the replay backlog.
    let mut stmt = conn
        .prepare_cached(
            "SELECT queue, count(*) FROM dead_letters INDEXED BY dead_letters_candidates \
             WHERE replay_due_at IS NOT NULL AND area = 'live' AND replay_failures >= ?1 \
             GROUP BY queue",
        )
        .db()?;
    let groups = query_all(&mut stmt, [i64::from(flag_after)], |r| {
        Ok((r.get::<_, String>(0).db()?, n(r.get(1).db()?)?))
    })?;
    for (queue, count) in groups {
        if let Some(&i) = by_name.get(queue.as_str()) {
            out[i].flagged += count;
        }
    }
    Ok(OverviewCounts {
        queues: out,
        cases: Vec::new(),
    })
}

/// The open cases of every queue: `cases_open_by_queue` alone (a second reader runs it
/// beside [`counts`]).
pub(crate) fn cases(
    conn: &Connection,
    now: Timestamp,
) -> StoreResult<Vec<(EntityName, CaseTally)>> {
    // Open cases by queue: the open cases' partial index `cases_open_by_queue`.
    let mut stmt = conn
        .prepare_cached(
            "SELECT queue, count(*), coalesce(sum(review_deadline <= ?1), 0), \
             coalesce(sum(state = 'escalated'), 0) \
             FROM cases INDEXED BY cases_open_by_queue WHERE closed_at IS NULL \
             GROUP BY queue ORDER BY queue",
        )
        .db()?;
    let cases = query_all(&mut stmt, [now.0], |r| {
        Ok((
            r.get::<_, String>(0)
                .db()?
                .parse::<EntityName>()
                .map_err(|e| bad_value("cases.queue", e))?,
            CaseTally {
                open: n(r.get(1).db()?)?,
                overdue: n(r.get(2).db()?)?,
                escalated: n(r.get(3).db()?)?,
            },
        ))
    })?;
    Ok(cases)
}
