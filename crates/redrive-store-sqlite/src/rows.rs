//! How this backend reads and writes rows: [`Cols`] (the shared decoders of
//! `redrive_store::skeleton` over rusqlite rows), the column lists of its message
//! statements, and the statements shared by several operations.

use std::fmt::Display;
use std::str::FromStr;

use redrive_core::{EntityName, MessageMeta, Timestamp};
use redrive_store::failure::FailureShape;
use redrive_store::skeleton::columns::{bad_value, invariant, millis, props_to_json, to_int};
use redrive_store::skeleton::entities::{QueueRow, queue_not_found};
use redrive_store::skeleton::{Columns, Head, MessageRow, NewRow};
use redrive_store::skeleton::{dead_letters, replay};
use redrive_store::{DeadLetterRecord, StoreResult, UndecodableRecord};
use rusqlite::{CachedStatement, Connection, OptionalExtension, Params, Row, Statement, params};

use crate::error::Db;

/// The columns of a full message, in the order [`message`] reads them: the rowid and the
/// head of `messages m`, then its contents, from the row or from `message_bodies b` (see
/// [`msg_from!`]). Either side's content columns are all NULL, so `coalesce` picks the
/// side that holds them. (The head's columns are unambiguous: `message_bodies` has none
/// of them.)
macro_rules! msg_cols {
    () => {
        concat!(
            "m.id, ",
            redrive_store::columns!(head),
            ", coalesce(m.body, b.body), coalesce(m.content_type, b.content_type), \
             coalesce(m.properties, b.properties), \
             coalesce(m.correlation_id, b.correlation_id), \
             coalesce(m.message_type, b.message_type), coalesce(m.intent, b.intent), \
             m.valid_until, m.enqueued_at, m.scheduled_at, m.last_attempt"
        )
    };
}
pub(crate) use msg_cols;

/// The tables [`msg_cols!`] reads: each message row with its contents kept apart, if any.
/// The LEFT JOIN keeps `messages` the outer loop, so the `WHERE` terms on it pick its
/// index; `message_bodies` is found by its key.
macro_rules! msg_from {
    () => {
        " FROM messages m LEFT JOIN message_bodies b ON b.id = m.id AND m.body IS NULL"
    };
}
pub(crate) use msg_from;

/// The columns of a message head (no content), in the order [`head`] reads them.
macro_rules! head_cols {
    () => {
        concat!("rowid, ", redrive_store::columns!(head))
    };
}
pub(crate) use head_cols;

/// Loads one queue, `None` if it does not exist.
pub(crate) fn load_queue(conn: &Connection, name: &str) -> StoreResult<Option<QueueRow>> {
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            redrive_store::columns!(queue),
            " FROM queues WHERE name = ?1"
        ))
        .db()?;
    query_opt(&mut stmt, [name], |r| QueueRow::decode(&Cols(r)))
}

/// The id of a queue, or `QueueNotFound` (for read paths that do not need its policy).
pub(crate) fn queue_id(conn: &Connection, name: &EntityName) -> StoreResult<i64> {
    conn.prepare_cached("SELECT id FROM queues WHERE name = ?1")
        .db()?
        .query_row([name.as_str()], |r| r.get(0))
        .optional()
        .db()?
        .ok_or_else(|| queue_not_found(name))
}

/// A SQLite row read through the shared decoders.
pub(crate) struct Cols<'r, 's>(pub &'r Row<'s>);

impl Columns for Cols<'_, '_> {
    fn int(&self, i: usize) -> StoreResult<i64> {
        self.0.get(i).db()
    }

    fn int_opt(&self, i: usize) -> StoreResult<Option<i64>> {
        self.0.get(i).db()
    }

    fn text(&self, i: usize) -> StoreResult<String> {
        self.0.get(i).db()
    }

    fn text_opt(&self, i: usize) -> StoreResult<Option<String>> {
        self.0.get(i).db()
    }

    fn bytes(&self, i: usize) -> StoreResult<Vec<u8>> {
        self.0.get(i).db()
    }

    fn flag(&self, i: usize) -> StoreResult<bool> {
        self.0.get(i).db()
    }

    /// Reads the text in place, without copying it (states are read on every row).
    fn parse<T>(&self, i: usize, column: &'static str) -> StoreResult<T>
    where
        T: FromStr,
        T::Err: Display,
    {
        self.0
            .get_ref(i)
            .db()?
            .as_str()
            .map_err(|e| bad_value(column, e))?
            .parse()
            .map_err(|e| bad_value(column, e))
    }
}

/// Runs a statement and decodes every row with `f`.
pub(crate) fn query_all<T>(
    stmt: &mut Statement<'_>,
    params: impl Params,
    f: impl Fn(&Row<'_>) -> StoreResult<T>,
) -> StoreResult<Vec<T>> {
    let mut rows = stmt.query(params).db()?;
    let mut out = Vec::new();
    while let Some(r) = rows.next().db()? {
        out.push(f(r)?);
    }
    Ok(out)
}

/// Runs a statement and decodes its first row with `f`, if there is one.
pub(crate) fn query_opt<T>(
    stmt: &mut Statement<'_>,
    params: impl Params,
    f: impl Fn(&Row<'_>) -> StoreResult<T>,
) -> StoreResult<Option<T>> {
    let mut rows = stmt.query(params).db()?;
    match rows.next().db()? {
        Some(r) => f(r).map(Some),
        None => Ok(None),
    }
}

/// Reads [`head_cols!`] (also the first columns of [`msg_cols!`]): the rowid, then the
/// shared head columns.
pub(crate) fn head(r: &Row<'_>) -> StoreResult<Head> {
    Head::decode(&Cols(r), 1, Some(r.get(0).db()?))
}

/// Reads [`msg_cols!`].
pub(crate) fn message(r: &Row<'_>) -> StoreResult<MessageRow> {
    MessageRow::decode(&Cols(r), 1, Some(r.get(0).db()?))
}

/// Reads [`columns!(dead_letter)`](redrive_store::columns), or names a row this build
/// cannot read ([`dead_letters::decode_checked`]).
pub(crate) fn checked_record(r: &Row<'_>) -> Result<DeadLetterRecord, UndecodableRecord> {
    dead_letters::decode_checked(&Cols(r))
}

/// Runs a statement over [`columns!(dead_letter)`](redrive_store::columns) and reads each
/// row: an error of the statement fails the call, a row that cannot be read is named
/// beside the others.
pub(crate) fn query_records(
    stmt: &mut Statement<'_>,
    params: impl Params,
) -> StoreResult<Vec<Result<DeadLetterRecord, UndecodableRecord>>> {
    let mut rows = stmt.query(params).db()?;
    let mut out = Vec::new();
    while let Some(r) = rows.next().db()? {
        out.push(checked_record(r));
    }
    Ok(out)
}

/// Loads a full row by rowid.
pub(crate) fn load_row(conn: &Connection, rowid: i64) -> StoreResult<MessageRow> {
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            msg_cols!(),
            msg_from!(),
            " WHERE m.id = ?1"
        ))
        .db()?;
    query_opt(&mut stmt, [rowid], message)?
        .ok_or_else(|| invariant("a message row to dead-letter is gone"))
}

/// Stores a new meta for a message (see [`write_meta_with`]).
pub(crate) const WRITE_META: &str = "UPDATE messages SET state = ?1, visible_at = ?2, \
     expires_at = ?3, delivery_count = ?4, lock_token = ?5, locked_until = ?6, deferred = ?7, \
     first_delivered_at = ?8, last_delivered_at = ?9 WHERE rowid = ?10";

/// Stores a new meta for a message with the evidence of a failed push attempt (an
/// abandon's, see [`MetaWriter::write_with_attempt`]).
const WRITE_META_ATTEMPT: &str = "UPDATE messages SET state = ?1, visible_at = ?2, \
     expires_at = ?3, delivery_count = ?4, lock_token = ?5, locked_until = ?6, deferred = ?7, \
     first_delivered_at = ?8, last_delivered_at = ?9, last_attempt = ?11 WHERE rowid = ?10";

/// Stores a new meta that differs from the old one only in the columns a receive
/// changes (see [`MetaWriter`]).
const WRITE_LOCK: &str = "UPDATE messages SET state = ?1, delivery_count = ?2, \
     lock_token = ?3, locked_until = ?4, first_delivered_at = ?5, last_delivered_at = ?6 \
     WHERE rowid = ?7";

/// Stores a new meta that differs from the old one only in the columns a released or
/// deferred lock changes (see [`MetaWriter`]).
const WRITE_UNLOCK: &str = "UPDATE messages SET state = ?1, visible_at = ?2, \
     lock_token = ?3, locked_until = ?4, deferred = ?5 WHERE rowid = ?6";

/// Removes a message row (and, through the `messages_delete_body` trigger, its contents
/// kept apart).
pub(crate) const DELETE_ROW: &str = "DELETE FROM messages WHERE rowid = ?1";

/// Stores meta changes decided by the state machine, held by a caller across many rows.
/// It writes only the columns that changed (one of three statements), which spares
/// SQLite binding, comparing and re-indexing columns that stay the same; the stored
/// result is the same as [`WRITE_META`]'s.
pub(crate) struct MetaWriter<'c> {
    conn: &'c Connection,
    full: Option<CachedStatement<'c>>,
    lock: Option<CachedStatement<'c>>,
    unlock: Option<CachedStatement<'c>>,
    attempt: Option<CachedStatement<'c>>,
}

impl<'c> MetaWriter<'c> {
    pub(crate) fn new(conn: &'c Connection) -> Self {
        MetaWriter {
            conn,
            full: None,
            lock: None,
            unlock: None,
            attempt: None,
        }
    }

    fn stmt<'s>(
        conn: &'c Connection,
        slot: &'s mut Option<CachedStatement<'c>>,
        sql: &str,
    ) -> StoreResult<&'s mut CachedStatement<'c>> {
        if slot.is_none() {
            *slot = Some(conn.prepare_cached(sql).db()?);
        }
        slot.as_mut()
            .ok_or_else(|| invariant("statement slot just filled"))
    }

    /// Stores `new` over `old` for the message at `rowid`.
    pub(crate) fn write(
        &mut self,
        rowid: i64,
        old: &MessageMeta,
        new: &MessageMeta,
    ) -> StoreResult<()> {
        let kept_times = old.expires_at == new.expires_at;
        if kept_times && old.visible_at == new.visible_at && old.deferred == new.deferred {
            let stmt = Self::stmt(self.conn, &mut self.lock, WRITE_LOCK)?;
            stmt.execute(params![
                new.state.as_str(),
                i64::from(new.delivery_count),
                new.lock_token,
                millis(new.locked_until),
                millis(new.first_delivered_at),
                millis(new.last_delivered_at),
                rowid,
            ])
            .db()?;
        } else if kept_times
            && old.delivery_count == new.delivery_count
            && old.first_delivered_at == new.first_delivered_at
            && old.last_delivered_at == new.last_delivered_at
        {
            let stmt = Self::stmt(self.conn, &mut self.unlock, WRITE_UNLOCK)?;
            stmt.execute(params![
                new.state.as_str(),
                new.visible_at.0,
                new.lock_token,
                millis(new.locked_until),
                new.deferred,
                rowid,
            ])
            .db()?;
        } else {
            let stmt = Self::stmt(self.conn, &mut self.full, WRITE_META)?;
            write_meta_with(stmt, rowid, new)?;
        }
        Ok(())
    }

    /// Stores `new` for the message at `rowid` and, in the same statement, `attempt` as
    /// the evidence of its last failed push attempt (an abandon that carries one).
    pub(crate) fn write_with_attempt(
        &mut self,
        rowid: i64,
        new: &MessageMeta,
        attempt: &str,
    ) -> StoreResult<()> {
        let stmt = Self::stmt(self.conn, &mut self.attempt, WRITE_META_ATTEMPT)?;
        stmt.execute(params![
            new.state.as_str(),
            new.visible_at.0,
            millis(new.expires_at),
            i64::from(new.delivery_count),
            new.lock_token,
            millis(new.locked_until),
            new.deferred,
            millis(new.first_delivered_at),
            millis(new.last_delivered_at),
            rowid,
            attempt,
        ])
        .db()?;
        Ok(())
    }
}

/// Stores a new meta for a message.
pub(crate) fn write_meta(conn: &Connection, rowid: i64, m: &MessageMeta) -> StoreResult<()> {
    let mut stmt = conn.prepare_cached(WRITE_META).db()?;
    write_meta_with(&mut stmt, rowid, m)
}

/// Stores a new meta for a message with a statement the caller holds (prepared from
/// [`WRITE_META`]) across many rows.
pub(crate) fn write_meta_with(
    stmt: &mut Statement<'_>,
    rowid: i64,
    m: &MessageMeta,
) -> StoreResult<()> {
    stmt.execute(params![
        m.state.as_str(),
        m.visible_at.0,
        millis(m.expires_at),
        i64::from(m.delivery_count),
        m.lock_token,
        millis(m.locked_until),
        m.deferred,
        millis(m.first_delivered_at),
        millis(m.last_delivered_at),
        rowid,
    ])
    .db()?;
    Ok(())
}

/// Removes a message row.
pub(crate) fn delete_row(conn: &Connection, rowid: i64) -> StoreResult<()> {
    conn.prepare_cached(DELETE_ROW)
        .db()?
        .execute([rowid])
        .db()?;
    Ok(())
}

/// Reserves `n` sequence numbers on a queue; returns the first.
pub(crate) fn allocate_sequences(conn: &Connection, queue_id: i64, n: usize) -> StoreResult<i64> {
    let n = to_int(n, "batch size")?;
    let next: i64 = conn
        .prepare_cached(
            "UPDATE queues SET next_sequence = next_sequence + ?2 WHERE id = ?1 \
             RETURNING next_sequence",
        )
        .db()?
        .query_row(params![queue_id, n], |r| r.get(0))
        .db()?;
    Ok(next - n)
}

/// Contents (body and properties JSON) larger than this go to `message_bodies`; smaller
/// ones stay in the message row. Migration 4 applies the same bound to existing rows.
pub(crate) const INLINE_CONTENT_MAX: usize = 512;

/// Inserts an Available, never delivered message of queue `queue_id`, enqueued at
/// `now`: its row, with its contents when they are small, or else followed by its
/// contents in `message_bodies` under the row's id.
pub(crate) fn insert_message(
    conn: &Connection,
    queue_id: i64,
    now: Timestamp,
    m: &NewRow<'_>,
) -> StoreResult<()> {
    let size = m.body.len() + m.properties.as_deref().map_or(0, str::len);
    let inline = size <= INLINE_CONTENT_MAX;
    let (body, content_type, properties, correlation_id, message_type, intent) = if inline {
        (
            Some(m.body),
            m.content_type,
            m.properties.as_deref(),
            m.correlation_id,
            m.message_type,
            m.intent,
        )
    } else {
        (None, None, None, None, None, None)
    };
    conn.prepare_cached(
        "INSERT INTO messages (queue_id, sequence, message_id, session_id, valid_until, \
         enqueued_at, scheduled_at, state, visible_at, expires_at, delivery_count, deferred, \
         body, content_type, properties, correlation_id, message_type, intent) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'available', ?8, ?9, 0, 0, ?10, ?11, ?12, ?13, \
         ?14, ?15)",
    )
    .db()?
    .execute(params![
        queue_id,
        m.sequence,
        m.message_id,
        m.session_id,
        millis(m.valid_until),
        now.0,
        millis(m.scheduled_at),
        m.visible_at.0,
        millis(m.expires_at),
        body,
        content_type,
        properties,
        correlation_id,
        message_type,
        intent,
    ])
    .db()?;
    if inline {
        return Ok(());
    }
    let id = conn.last_insert_rowid();
    conn.prepare_cached(
        "INSERT INTO message_bodies (id, body, content_type, properties, correlation_id, \
         message_type, intent) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )
    .db()?
    .execute(params![
        id,
        m.body,
        m.content_type,
        m.properties,
        m.correlation_id,
        m.message_type,
        m.intent,
    ])
    .db()?;
    Ok(())
}

/// Inserts a dead-letter record (unlocked), with its replay bookkeeping and judgement, and
/// opens its case at `now` if it stands for one ([`crate::cases::open_inserted`]).
pub(crate) fn insert_record(
    conn: &Connection,
    d: &DeadLetterRecord,
    now: Timestamp,
) -> StoreResult<()> {
    let properties = props_to_json(&d.properties)?;
    let judgement = replay::judgement_column(d.judgement.as_ref())?;
    // 0: no version is known (policy versions start at 1).
    let version = to_int(d.policy_version.unwrap_or(0), "policy_version")?;
    let shape = FailureShape::of(d);
    let signature = shape.id();
    insert_signature(conn, &signature, &shape)?;
    conn.prepare_cached(
        "INSERT INTO dead_letters (id, queue, area, message_id, sequence, session_id, body, \
         body_sha256, content_type, properties, correlation_id, message_type, intent, \
         valid_until, reason, description, delivery_count, count_quality, first_delivered_at, \
         last_delivered_at, enqueued_at, dead_lettered_at, policy_version, route, \
         forwarded_queue, forwarded_sequence, dlq_delivery_count, format, replay_due_at, \
         replay_failures, last_replay_error, judgement, replay_cause, route_target, \
         missing_target, route_kind, route_rule, consumer, rule_version, signature, source) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, \
         ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33, ?34, \
         ?35, ?36, ?37, ?38, ?39, ?40, ?41)",
    )
    .db()?
    .execute(params![
        d.id,
        d.queue.as_str(),
        d.area.as_str(),
        d.message_id,
        d.sequence,
        d.session_id,
        d.body,
        d.body_sha256,
        d.content_type,
        properties,
        d.correlation_id,
        d.message_type,
        d.intent,
        millis(d.valid_until),
        d.reason,
        d.description,
        i64::from(d.delivery_count),
        d.count_quality.as_str(),
        millis(d.first_delivered_at),
        millis(d.last_delivered_at),
        d.enqueued_at.0,
        d.dead_lettered_at.0,
        version,
        d.route.as_str(),
        d.forwarded_to.as_ref().map(|(q, _)| q.as_str()),
        d.forwarded_to.as_ref().map(|(_, s)| *s),
        i64::from(d.dlq_delivery_count),
        d.format.as_str(),
        millis(d.replay.due_at),
        i64::from(d.replay.failures),
        d.replay.last_error,
        judgement,
        replay::cause_column(d.judgement.as_ref()),
        d.route_target.as_str(),
        d.missing_target,
        d.route_kind.as_str(),
        d.route_rule.map(|r| r.as_str()),
        d.consumer,
        d.rule_version,
        signature,
        shape.source,
    ])
    .db()?;
    count_signature(conn, &signature, d)?;
    crate::cases::open_inserted(conn, d, version, now)
}

/// Counts a record just inserted into its signature's aggregate in its area: count, live,
/// first and last seen, the hour of its dead-lettering (the latest 24 hours kept). What
/// the insert trigger of schema 19 did (schema 23 dropped it; see its migration).
fn count_signature(conn: &Connection, signature: &str, d: &DeadLetterRecord) -> StoreResult<()> {
    let (area, queue, at) = (d.area.as_str(), d.queue.as_str(), d.dead_lettered_at.0);
    conn.prepare_cached(
        "INSERT INTO failure_signature_counts \
         (signature, area, queue, count, live, first_seen, last_seen) \
         VALUES (?1, ?2, ?3, 1, 1, ?4, ?4) \
         ON CONFLICT (signature, area) DO UPDATE SET \
         count = count + 1, live = live + 1, \
         first_seen = min(first_seen, excluded.first_seen), \
         last_seen = max(last_seen, excluded.last_seen)",
    )
    .db()?
    .execute(params![signature, area, queue, at])
    .db()?;
    let hour = at / 3_600_000;
    conn.prepare_cached(
        "INSERT INTO failure_signature_hours (signature, area, queue, hour, count) \
         VALUES (?1, ?2, ?3, ?4, 1) \
         ON CONFLICT (signature, area, hour) DO UPDATE SET count = count + 1",
    )
    .db()?
    .execute(params![signature, area, queue, hour])
    .db()?;
    conn.prepare_cached(
        "DELETE FROM failure_signature_hours WHERE signature = ?1 AND area = ?2 \
         AND hour < (SELECT max(hour) FROM failure_signature_hours \
                     WHERE signature = ?1 AND area = ?2) - 23",
    )
    .db()?
    .execute(params![signature, area])
    .db()?;
    Ok(())
}

/// Keeps the fields of failure signature `id` (once; the id is a hash of them).
pub(crate) fn insert_signature(conn: &Connection, id: &str, s: &FailureShape) -> StoreResult<()> {
    conn.prepare_cached(
        "INSERT INTO failure_signatures (id, queue, reason, route_kind, outcome_class, \
         message_type, source, description) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
         ON CONFLICT (id) DO NOTHING",
    )
    .db()?
    .execute(params![
        id,
        s.queue.as_str(),
        s.reason,
        s.route_kind,
        s.outcome_class,
        s.message_type,
        s.source,
        s.description,
    ])
    .db()?;
    Ok(())
}
