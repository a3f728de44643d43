//! Session locks: one receiver holds a session at a time.

use redrive_core::{EntityName, Timestamp};
use redrive_store::skeleton::columns::after;
use redrive_store::skeleton::entities::{
    check_session_queue, renewed_session, session_held, session_lock, session_locked,
};
use redrive_store::{SessionLock, SessionRef, StoreResult};
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::Db;
use crate::writer::Tx;

/// The queue's id, if it uses sessions.
fn session_queue(tx: &mut Tx<'_>, queue: &EntityName) -> StoreResult<i64> {
    let q = tx.queue(queue)?;
    check_session_queue(&q)?;
    Ok(q.id)
}

/// `SessionLockLost` unless `s` is held with its token at `now`.
pub(crate) fn check_lock(
    conn: &Connection,
    queue_id: i64,
    s: &SessionRef,
    now: Timestamp,
) -> StoreResult<()> {
    let held = conn
        .prepare_cached(
            "SELECT 1 FROM sessions WHERE queue_id = ?1 AND session_id = ?2 \
             AND lock_token = ?3 AND locked_until > ?4",
        )
        .db()?
        .exists(params![queue_id, s.session_id, s.lock_token, now.0])
        .db()?;
    session_held(held)
}

pub(crate) fn accept(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    session_id: Option<String>,
    lock_ms: u64,
    now: Timestamp,
) -> StoreResult<Option<SessionLock>> {
    let qid = session_queue(tx, queue)?;
    let session_id = match session_id {
        Some(id) => {
            let live = tx
                .conn
                .prepare_cached(
                    "SELECT 1 FROM sessions WHERE queue_id = ?1 AND session_id = ?2 \
                     AND locked_until > ?3",
                )
                .db()?
                .exists(params![qid, id, now.0])
                .db()?;
            if live {
                return Err(session_locked(queue, &id));
            }
            id
        }
        None => {
            // The session of the oldest visible message whose session is free: no live
            // session lock, and no message of it under a live message lock.
            let next: Option<String> = tx
                .conn
                .prepare_cached(
                    "SELECT m.session_id FROM messages m \
                     WHERE m.queue_id = ?1 AND m.state = 'available' AND m.due_at <= ?2 \
                       AND m.session_id IS NOT NULL \
                       AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.queue_id = m.queue_id \
                           AND s.session_id = m.session_id AND s.locked_until > ?2) \
                       AND NOT EXISTS (SELECT 1 FROM messages l WHERE l.queue_id = m.queue_id \
                           AND l.session_id = m.session_id AND l.state = 'locked' \
                           AND l.due_at > ?2) \
                     ORDER BY m.sequence LIMIT 1",
                )
                .db()?
                .query_row(params![qid, now.0], |r| r.get(0))
                .optional()
                .db()?;
            match next {
                Some(id) => id,
                None => return Ok(None),
            }
        }
    };
    let lock = session_lock(&session_id, lock_ms, now);
    tx.conn
        .prepare_cached(
            "INSERT INTO sessions (queue_id, session_id, lock_token, locked_until) \
             VALUES (?1, ?2, ?3, ?4) ON CONFLICT (queue_id, session_id) DO UPDATE \
             SET lock_token = excluded.lock_token, locked_until = excluded.locked_until",
        )
        .db()?
        .execute(params![
            qid,
            lock.session_id,
            lock.lock_token,
            lock.locked_until.0
        ])
        .db()?;
    Ok(Some(lock))
}

pub(crate) fn renew(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    session_id: &str,
    lock_token: &str,
    lock_ms: u64,
    now: Timestamp,
) -> StoreResult<SessionLock> {
    let qid = session_queue(tx, queue)?;
    let locked_until = after(now, lock_ms);
    let changed = tx
        .conn
        .prepare_cached(
            "UPDATE sessions SET locked_until = ?4 WHERE queue_id = ?1 AND session_id = ?2 \
             AND lock_token = ?3 AND locked_until > ?5",
        )
        .db()?
        .execute(params![qid, session_id, lock_token, locked_until.0, now.0])
        .db()?;
    renewed_session(changed > 0, session_id, lock_token, locked_until)
}

pub(crate) fn release(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    session_id: &str,
    lock_token: &str,
) -> StoreResult<()> {
    let qid = session_queue(tx, queue)?;
    let changed = tx
        .conn
        .prepare_cached(
            "DELETE FROM sessions WHERE queue_id = ?1 AND session_id = ?2 AND lock_token = ?3",
        )
        .db()?
        .execute(params![qid, session_id, lock_token])
        .db()?;
    session_held(changed > 0)
}

/// Forgets session locks that ran out.
pub(crate) fn forget_expired(conn: &Connection, now: Timestamp) -> StoreResult<()> {
    conn.prepare_cached("DELETE FROM sessions WHERE locked_until <= ?1")
        .db()?
        .execute([now.0])
        .db()?;
    Ok(())
}
