//! Session locks: one receiver holds a session at a time, across every node.
//!
//! Taking a lock is one `INSERT ... ON CONFLICT DO UPDATE ... WHERE the old lock ran out`
//! statement: PostgreSQL locks the conflicting row and re-checks the condition on its
//! latest version, so of two nodes accepting the same session at once exactly one wins.

use redrive_core::{EntityName, Timestamp};
use redrive_store::skeleton::columns::after;
use redrive_store::skeleton::entities::{
    check_session_queue, renewed_session, session_held, session_lock, session_locked,
};
use redrive_store::{SessionLock, SessionRef, StoreResult};

use crate::pool::Db;
use crate::rows::{get, queue};

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
