//! The overview's counts: a fixed number of grouped reads over the indexes of messages
//! (`messages_due`), dead letters (`dead_letters_area`, `dead_letters_candidates`) and
//! cases, whatever the number of queues.

use std::collections::HashMap;

use redrive_core::{EntityName, Timestamp};
use redrive_store::skeleton::columns::bad_value;
use redrive_store::skeleton::messages::count_expired_locks;
use redrive_store::{CaseTally, EntityCounts, OverviewCounts, QueueCounts, StoreResult};

use crate::pool::Db;
use crate::rows::{count_u64, decode, get, head, head_cols, queue_from_row};

/// Every queue's counts at `now`, its quarantined and flagged records, and the open cases
/// of every queue (autocommit reads: each statement its own snapshot, counts being a
/// moment's look either way).
pub(crate) async fn counts(
    db: &Db<'_>,
    now: Timestamp,
    flag_after: u32,
) -> StoreResult<OverviewCounts> {
    let rows = db
        .query(
            concat!(
                "SELECT ",
                redrive_store::columns!(queue),
                " FROM queues ORDER BY name"
            ),
            &[],
        )
        .await?;
    let queues = decode(&rows, queue_from_row)?;
    let by_id: HashMap<i64, usize> = queues.iter().enumerate().map(|(i, q)| (q.id, i)).collect();
    let by_name: HashMap<&str, usize> = queues
        .iter()
        .enumerate()
        .map(|(i, q)| (q.name.as_str(), i))
        .collect();
    let mut out: Vec<EntityCounts> = queues
        .iter()
        .map(|q| EntityCounts {
            queue: q.name.clone(),
            counts: QueueCounts::default(),
            quarantined: 0,
            flagged: 0,
        })
        .collect();
    let groups = db
        .query(
            "SELECT queue_id, state, due_at <= $1, count(*), min(enqueued_at) FROM messages \
             GROUP BY queue_id, state, due_at <= $1",
            &[&now.0],
        )
        .await?;
    let mut expired_locks = Vec::new();
    for r in &groups {
        let queue_id: i64 = get(r, 0)?;
        let state: String = get(r, 1)?;
        let due: bool = get(r, 2)?;
        let count = count_u64(r, 3)?;
        let oldest: Option<i64> = get(r, 4)?;
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
    for i in expired_locks {
        let expired = db
            .query(
                concat!(
                    "SELECT ",
                    head_cols!(),
                    " FROM messages WHERE queue_id = $1 AND state = 'locked' AND due_at <= $2"
                ),
                &[&queues[i].id, &now.0],
            )
            .await?;
        count_expired_locks(
            &mut out[i].counts,
            &decode(&expired, head)?,
            &queues[i].policy,
            now,
        );
    }
    let groups = db
        .query(
            "SELECT queue, area, count(*) FROM dead_letters GROUP BY queue, area",
            &[],
        )
        .await?;
    for r in &groups {
        let queue: String = get(r, 0)?;
        let area: String = get(r, 1)?;
        let count = count_u64(r, 2)?;
        let Some(&i) = by_name.get(queue.as_str()) else {
            continue;
        };
        match area.as_str() {
            "live" => out[i].counts.dead_lettered += count,
            "quarantine" => out[i].quarantined += count,
            _ => {}
        }
    }
    // Flagged records are live candidates (a failed judgement keeps one due again).
    let flag = i64::from(flag_after);
    let groups = db
        .query(
            "SELECT queue, count(*) FROM dead_letters \
             WHERE replay_due_at IS NOT NULL AND area = 'live' AND replay_failures >= $1 \
             GROUP BY queue",
            &[&flag],
        )
        .await?;
    for r in &groups {
        let queue: String = get(r, 0)?;
        if let Some(&i) = by_name.get(queue.as_str()) {
            out[i].flagged += count_u64(r, 1)?;
        }
    }
    let groups = db
        .query(
            "SELECT queue, count(*), count(*) FILTER (WHERE review_deadline <= $1), \
             count(*) FILTER (WHERE state = 'escalated') \
             FROM cases WHERE closed_at IS NULL GROUP BY queue ORDER BY queue",
            &[&now.0],
        )
        .await?;
    let mut cases = Vec::with_capacity(groups.len());
    for r in &groups {
        let queue: String = get(r, 0)?;
        let queue: EntityName = queue.parse().map_err(|e| bad_value("cases.queue", e))?;
        cases.push((
            queue,
            CaseTally {
                open: count_u64(r, 1)?,
                overdue: count_u64(r, 2)?,
                escalated: count_u64(r, 3)?,
            },
        ));
    }
    Ok(OverviewCounts { queues: out, cases })
}
