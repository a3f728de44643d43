//! Session locks: one receiver holds a session at a time; the listing of a queue's
//! sessions.

use redrive_core::{EntityName, Timestamp};
use redrive_store::skeleton::columns::after;
use redrive_store::skeleton::entities::queue_not_found;
use redrive_store::skeleton::entities::{
    check_session_queue, renewed_session, session_held, session_lock, session_locked,
};
use redrive_store::{
    QueueCounts, SessionLock, SessionRef, SessionSummary, StoreResult, session_page_limit,
    session_summaries,
};
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::Db;
use crate::rows::{head, head_cols, load_queue, query_all};
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

/// The ids of a page of sessions: `(queue_id, after, limit, now)`.
const IDS: &str = "SELECT session_id FROM ( \
       SELECT DISTINCT session_id FROM messages \
       WHERE queue_id = ?1 AND session_id IS NOT NULL AND session_id > ?2 \
       ORDER BY session_id LIMIT ?3) \
     UNION \
     SELECT session_id FROM ( \
       SELECT session_id FROM sessions \
       WHERE queue_id = ?1 AND session_id > ?2 AND locked_until > ?4 \
       ORDER BY session_id LIMIT ?3) \
     ORDER BY session_id LIMIT ?3";

/// Each session's messages by state at `now`, for sessions between two ids:
/// `(queue_id, first, last, now)`.
const COUNTS: &str = "SELECT session_id, \
       coalesce(sum(state = 'available' AND due_at <= ?4), 0), \
       coalesce(sum(state = 'available' AND due_at > ?4), 0), \
       coalesce(sum(state = 'locked' AND due_at > ?4), 0), \
       coalesce(sum(state = 'deferred'), 0) \
     FROM messages \
     WHERE queue_id = ?1 AND session_id IS NOT NULL \
       AND session_id >= ?2 AND session_id <= ?3 \
     GROUP BY session_id";

/// The session locks that hold at `now`, between two ids: `(queue_id, first, last, now)`.
const LOCKS: &str = "SELECT session_id, locked_until FROM sessions \
     WHERE queue_id = ?1 AND session_id >= ?2 AND session_id <= ?3 \
       AND locked_until > ?4";

/// A page of the queue's sessions at `now` (see `Store::list_sessions`), in one read
/// transaction.
///
/// The page's ids come from the `messages_session` index (distinct session ids of the
/// queue after `after`, in order) merged with the live locks of the `sessions` table, at
/// most `limit` of each before the merge. Every session with messages between the
/// page's first and last id is on the page, so its counts, its expired message locks
/// and its session locks are each one range read over that span.
pub(crate) fn list(
    conn: &Connection,
    queue: &EntityName,
    after: Option<&str>,
    limit: u32,
    now: Timestamp,
) -> StoreResult<Vec<SessionSummary>> {
    let q = load_queue(conn, queue.as_str())?.ok_or_else(|| queue_not_found(queue))?;
    let limit = session_page_limit(limit);
    // Session ids are never empty (the broker refuses an empty one), so "" is before all.
    let after = after.unwrap_or("");
    let mut stmt = conn.prepare_cached(IDS).db()?;
    let ids: Vec<String> = query_all(&mut stmt, params![q.id, after, limit, now.0], |r| {
        r.get(0).db()
    })?;
    let (Some(first), Some(last)) = (ids.first().cloned(), ids.last().cloned()) else {
        return Ok(Vec::new());
    };
    let mut stmt = conn.prepare_cached(COUNTS).db()?;
    let counts = query_all(&mut stmt, params![q.id, first, last, now.0], |r| {
        let n = |i: usize| -> StoreResult<u64> {
            let v: i64 = r.get(i).db()?;
            u64::try_from(v).map_err(|e| redrive_store::skeleton::columns::bad_value("count", e))
        };
        Ok((
            r.get::<_, String>(0).db()?,
            QueueCounts {
                active: n(1)?,
                scheduled: n(2)?,
                locked: n(3)?,
                deferred: n(4)?,
                ..QueueCounts::default()
            },
        ))
    })?;
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            head_cols!(),
            " FROM messages WHERE queue_id = ?1 AND state = 'locked' AND due_at <= ?4 \
             AND session_id IS NOT NULL AND session_id >= ?2 AND session_id <= ?3"
        ))
        .db()?;
    let expired = query_all(&mut stmt, params![q.id, first, last, now.0], head)?;
    let mut stmt = conn.prepare_cached(LOCKS).db()?;
    let locks = query_all(&mut stmt, params![q.id, first, last, now.0], |r| {
        Ok((r.get::<_, String>(0).db()?, Timestamp(r.get(1).db()?)))
    })?;
    Ok(session_summaries(
        ids, counts, &expired, locks, &q.policy, now,
    ))
}

#[cfg(test)]
mod tests {
    use super::{COUNTS, IDS, LOCKS};
    use crate::schema;

    /// The plan of `sql` on a new database, its details joined.
    fn plan(sql: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let conn = schema::open_writer(&dir.path().join("plan.db")).unwrap();
        schema::migrate(&conn).unwrap();
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let unbound = rusqlite::params_from_iter(std::iter::repeat_n(
            rusqlite::types::Null,
            stmt.parameter_count(),
        ));
        stmt.query_map(unbound, |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect::<Vec<_>>()
            .join(" | ")
    }

    #[test]
    fn the_listing_of_sessions_reads_through_indexes() {
        let ids = plan(IDS);
        assert!(ids.contains("messages_session"), "{ids}");
        assert!(ids.contains("sqlite_autoindex_sessions_1"), "{ids}");
        let counts = plan(COUNTS);
        assert!(counts.contains("messages_session"), "{counts}");
        let locks = plan(LOCKS);
        assert!(locks.contains("sqlite_autoindex_sessions_1"), "{locks}");
    }
}
