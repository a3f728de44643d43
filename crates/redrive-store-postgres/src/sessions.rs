//! Session locks: one receiver holds a session at a time, across every node; the listing
//! of a queue's sessions.
//!
//! Taking a lock is one `INSERT ... ON CONFLICT DO UPDATE ... WHERE the old lock ran out`
//! statement: PostgreSQL locks the conflicting row and re-checks the condition on its
//! latest version, so of two nodes accepting the same session at once exactly one wins.

use redrive_core::{EntityName, Timestamp};
use redrive_store::skeleton::columns::after;
use redrive_store::skeleton::entities::{
    check_session_queue, renewed_session, session_held, session_lock, session_locked,
};
use redrive_store::{
    QueueCounts, SessionLock, SessionRef, SessionSummary, StoreResult, session_page_limit,
    session_summaries,
};

use crate::pool::Db;
use crate::rows::{count_u64, decode, get, head, head_cols, queue};

/// How many sessions an unnamed accept tries when others take its candidates first.
const ACCEPT_ATTEMPTS: usize = 16;

/// The queue's id, if it uses sessions.
async fn session_queue(db: &Db<'_>, name: &EntityName) -> StoreResult<i64> {
    let q = queue(db, name).await?;
    check_session_queue(&q)?;
    Ok(q.id)
}

/// `SessionLockLost` unless `s` is held with its token at `now`. The session row stays
/// locked until the transaction ends, so receives within one session run one at a time.
pub(crate) async fn check_lock(
    db: &Db<'_>,
    queue_id: i64,
    s: &SessionRef,
    now: Timestamp,
) -> StoreResult<()> {
    let held = db
        .query_opt(
            "SELECT 1 FROM sessions WHERE queue_id = $1 AND session_id = $2 \
             AND lock_token = $3 AND locked_until > $4 FOR UPDATE",
            &[&queue_id, &s.session_id, &s.lock_token, &now.0],
        )
        .await?;
    session_held(held.is_some())
}

/// Takes the lock of `session_id` unless a live lock holds it; `None` if one does.
async fn try_take(
    db: &Db<'_>,
    queue_id: i64,
    session_id: &str,
    lock_ms: u64,
    now: Timestamp,
) -> StoreResult<Option<SessionLock>> {
    let lock = session_lock(session_id, lock_ms, now);
    let taken = db
        .query_opt(
            "INSERT INTO sessions (queue_id, session_id, lock_token, locked_until) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (queue_id, session_id) DO UPDATE \
             SET lock_token = excluded.lock_token, locked_until = excluded.locked_until \
             WHERE sessions.locked_until <= $5 RETURNING 1",
            &[
                &queue_id,
                &lock.session_id,
                &lock.lock_token,
                &lock.locked_until.0,
                &now.0,
            ],
        )
        .await?;
    Ok(taken.map(|_| lock))
}

pub(crate) async fn accept(
    db: &Db<'_>,
    name: &EntityName,
    session_id: Option<&str>,
    lock_ms: u64,
    now: Timestamp,
) -> StoreResult<Option<SessionLock>> {
    let qid = session_queue(db, name).await?;
    if let Some(id) = session_id {
        return match try_take(db, qid, id, lock_ms, now).await? {
            Some(lock) => Ok(Some(lock)),
            None => Err(session_locked(name, id)),
        };
    }
    // The session of the oldest visible message whose session is free: no live session
    // lock, and no message of it under a live message lock. If another receiver takes it
    // between the look and the take, the next one is tried.
    let mut passed: Vec<String> = Vec::new();
    for _ in 0..ACCEPT_ATTEMPTS {
        let next = db
            .query_opt(
                "SELECT m.session_id FROM messages m \
                 WHERE m.queue_id = $1 AND m.state = 'available' AND m.due_at <= $2 \
                   AND m.session_id IS NOT NULL AND m.session_id <> ALL($3::text[]) \
                   AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.queue_id = m.queue_id \
                       AND s.session_id = m.session_id AND s.locked_until > $2) \
                   AND NOT EXISTS (SELECT 1 FROM messages l WHERE l.queue_id = m.queue_id \
                       AND l.session_id = m.session_id AND l.state = 'locked' \
                       AND l.due_at > $2) \
                 ORDER BY m.sequence LIMIT 1",
                &[&qid, &now.0, &passed],
            )
            .await?;
        let Some(row) = next else {
            return Ok(None);
        };
        let id: String = get(&row, 0)?;
        if let Some(lock) = try_take(db, qid, &id, lock_ms, now).await? {
            return Ok(Some(lock));
        }
        passed.push(id);
    }
    Ok(None)
}

pub(crate) async fn renew(
    db: &Db<'_>,
    name: &EntityName,
    session_id: &str,
    lock_token: &str,
    lock_ms: u64,
    now: Timestamp,
) -> StoreResult<SessionLock> {
    let qid = session_queue(db, name).await?;
    let locked_until = after(now, lock_ms);
    let changed = db
        .execute(
            "UPDATE sessions SET locked_until = $4 WHERE queue_id = $1 AND session_id = $2 \
             AND lock_token = $3 AND locked_until > $5",
            &[&qid, &session_id, &lock_token, &locked_until.0, &now.0],
        )
        .await?;
    renewed_session(changed > 0, session_id, lock_token, locked_until)
}

pub(crate) async fn release(
    db: &Db<'_>,
    name: &EntityName,
    session_id: &str,
    lock_token: &str,
) -> StoreResult<()> {
    let qid = session_queue(db, name).await?;
    let changed = db
        .execute(
            "DELETE FROM sessions WHERE queue_id = $1 AND session_id = $2 AND lock_token = $3",
            &[&qid, &session_id, &lock_token],
        )
        .await?;
    session_held(changed > 0)
}

/// Forgets session locks that ran out.
pub(crate) async fn forget_expired(db: &Db<'_>, now: Timestamp) -> StoreResult<()> {
    db.execute("DELETE FROM sessions WHERE locked_until <= $1", &[&now.0])
        .await?;
    Ok(())
}

/// A page of the queue's sessions at `now` (see `Store::list_sessions`).
///
/// The page's ids come from the `messages_session` index (distinct session ids of the
/// queue after `after`, in order) merged with the live locks of the `sessions` table, at
/// most `limit` of each before the merge; each session's counts are one indexed read of
/// its messages. Like the queue's counts, the counts and locks are one statement and the
/// messages whose lock ran out by `now` a second one.
pub(crate) async fn list(
    db: &Db<'_>,
    name: &EntityName,
    after: Option<&str>,
    limit: u32,
    now: Timestamp,
) -> StoreResult<Vec<SessionSummary>> {
    let q = queue(db, name).await?;
    let limit = i64::from(session_page_limit(limit));
    // Session ids are never empty (the broker refuses an empty one), so "" is before all.
    let after = after.unwrap_or("");
    let rows = db
        .query(
            "WITH ids AS ( \
               (SELECT DISTINCT session_id FROM messages \
                WHERE queue_id = $1 AND session_id IS NOT NULL AND session_id > $2 \
                ORDER BY session_id LIMIT $3) \
               UNION \
               (SELECT session_id FROM sessions \
                WHERE queue_id = $1 AND session_id > $2 AND locked_until > $4 \
                ORDER BY session_id LIMIT $3) \
               ORDER BY session_id LIMIT $3) \
             SELECT i.session_id, c.active, c.scheduled, c.locked, c.deferred, s.locked_until \
             FROM ids i \
             CROSS JOIN LATERAL ( \
               SELECT count(*) FILTER (WHERE m.state = 'available' AND m.due_at <= $4) \
                        AS active, \
                      count(*) FILTER (WHERE m.state = 'available' AND m.due_at > $4) \
                        AS scheduled, \
                      count(*) FILTER (WHERE m.state = 'locked' AND m.due_at > $4) \
                        AS locked, \
                      count(*) FILTER (WHERE m.state = 'deferred') AS deferred \
               FROM messages m \
               WHERE m.queue_id = $1 AND m.session_id = i.session_id) c \
             LEFT JOIN sessions s ON s.queue_id = $1 AND s.session_id = i.session_id \
               AND s.locked_until > $4 \
             ORDER BY i.session_id",
            &[&q.id, &after, &limit, &now.0],
        )
        .await?;
    let mut ids = Vec::with_capacity(rows.len());
    let mut counts = Vec::with_capacity(rows.len());
    let mut locks = Vec::new();
    for row in &rows {
        let id: String = get(row, 0)?;
        counts.push((
            id.clone(),
            QueueCounts {
                active: count_u64(row, 1)?,
                scheduled: count_u64(row, 2)?,
                locked: count_u64(row, 3)?,
                deferred: count_u64(row, 4)?,
                ..QueueCounts::default()
            },
        ));
        if let Some(until) = get::<Option<i64>>(row, 5)? {
            locks.push((id.clone(), Timestamp(until)));
        }
        ids.push(id);
    }
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let expired = db
        .query(
            concat!(
                "SELECT ",
                head_cols!(),
                " FROM messages WHERE queue_id = $1 AND state = 'locked' AND due_at <= $3 \
                 AND session_id = ANY($2::text[])"
            ),
            &[&q.id, &ids, &now.0],
        )
        .await?;
    let expired = decode(&expired, head)?;
    Ok(session_summaries(
        ids, counts, &expired, locks, &q.policy, now,
    ))
}
