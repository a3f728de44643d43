//! Row types, their mapping to and from SQLite, and the statements shared by several
//! operations.

use redrive_core::{
    Area, EntityName, EvidenceQuality, MessageMeta, MessageState, Properties, PropertyValue,
    QueuePolicy, RouteKind, Timestamp,
};
use redrive_store::{DeadLetterRecord, QueueRecord, StoreError, StoreResult, StoredMessage};
use rusqlite::types::Type;
use rusqlite::{CachedStatement, Connection, OptionalExtension, Row, Statement, params};

use crate::error::{Db, SqliteError, backend};

/// The columns of a full message, in the order [`MsgRow::from_row`] reads them: the row
/// of `messages m` and its contents, from the row or from `message_bodies b` (see
/// [`msg_from!`]). Either side's content columns are all NULL, so `coalesce` picks the
/// side that holds them.
macro_rules! msg_cols {
    () => {
        "m.id, m.sequence, m.message_id, m.session_id, m.state, m.visible_at, m.expires_at, \
         m.delivery_count, m.lock_token, m.locked_until, m.deferred, m.first_delivered_at, \
         m.last_delivered_at, coalesce(m.body, b.body), \
         coalesce(m.content_type, b.content_type), coalesce(m.properties, b.properties), \
         coalesce(m.correlation_id, b.correlation_id), \
         coalesce(m.message_type, b.message_type), coalesce(m.intent, b.intent), \
         m.valid_until, m.enqueued_at, m.scheduled_at"
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

/// The columns of a message head (no content), in the order [`Head::from_row`] reads them.
macro_rules! head_cols {
    () => {
        "rowid, sequence, message_id, session_id, state, visible_at, expires_at, \
         delivery_count, lock_token, locked_until, deferred, first_delivered_at, \
         last_delivered_at"
    };
}
pub(crate) use head_cols;

/// The columns of a dead-letter record, in the order [`record_from_row`] reads them.
macro_rules! dl_cols {
    () => {
        "id, queue, area, message_id, sequence, session_id, body, body_sha256, content_type, \
         properties, correlation_id, message_type, intent, valid_until, reason, description, \
         delivery_count, count_quality, first_delivered_at, last_delivered_at, enqueued_at, \
         dead_lettered_at, policy_version, route, forwarded_queue, forwarded_sequence, \
         dlq_delivery_count, locked_until"
    };
}
pub(crate) use dl_cols;

/// A queue as the writer caches it.
#[derive(Debug, Clone)]
pub(crate) struct QueueInfo {
    /// The integer key of the queue's rows in the hot tables.
    pub id: i64,
    pub name: EntityName,
    pub policy: QueuePolicy,
    pub version: u64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl QueueInfo {
    pub(crate) fn record(&self) -> QueueRecord {
        QueueRecord {
            name: self.name.clone(),
            policy: self.policy.clone(),
            policy_version: self.version,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

/// Loads one queue, `None` if it does not exist.
pub(crate) fn load_queue(conn: &Connection, name: &str) -> StoreResult<Option<QueueInfo>> {
    conn.prepare_cached(
        "SELECT name, policy, policy_version, created_at, updated_at, id FROM queues \
         WHERE name = ?1",
    )
    .db()?
    .query_row([name], queue_from_row)
    .optional()
    .db()
}

/// Maps `name, policy, policy_version, created_at, updated_at, id`.
pub(crate) fn queue_from_row(r: &Row<'_>) -> rusqlite::Result<QueueInfo> {
    let name: String = r.get(0)?;
    let policy: String = r.get(1)?;
    Ok(QueueInfo {
        name: name.parse().map_err(|e| conv(0, e))?,
        policy: serde_json::from_str(&policy).map_err(|e| conv(1, e))?,
        version: u64::try_from(r.get::<_, i64>(2)?).map_err(|e| conv(2, e))?,
        created_at: Timestamp(r.get(3)?),
        updated_at: Timestamp(r.get(4)?),
        id: r.get(5)?,
    })
}

pub(crate) fn queue_not_found(name: &EntityName) -> StoreError {
    StoreError::QueueNotFound {
        queue: name.to_string(),
    }
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

fn conv(i: usize, e: impl std::error::Error + Send + Sync + 'static) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(i, Type::Text, Box::new(e))
}

fn ts(v: Option<i64>) -> Option<Timestamp> {
    v.map(Timestamp)
}

fn ms(v: Option<Timestamp>) -> Option<i64> {
    v.map(|t| t.0)
}

fn count(i: usize, v: i64) -> rusqlite::Result<u32> {
    u32::try_from(v).map_err(|e| conv(i, e))
}

pub(crate) fn props_to_json(p: &Properties) -> StoreResult<Option<String>> {
    if p.is_empty() {
        return Ok(None);
    }
    // JSON has no NaN or infinity: serde_json would write `null`, which does not read
    // back as a property, and the stored message could never be delivered.
    if let Some((name, _)) = p
        .iter()
        .find(|(_, v)| matches!(v, PropertyValue::Float(f) if !f.is_finite()))
    {
        return Err(backend(SqliteError::NonFiniteProperty {
            name: name.clone(),
        }));
    }
    serde_json::to_string(p)
        .map(Some)
        .map_err(StoreError::backend)
}

fn props_from_json(i: usize, s: Option<String>) -> rusqlite::Result<Properties> {
    match s {
        None => Ok(Properties::new()),
        Some(s) => serde_json::from_str(&s).map_err(|e| conv(i, e)),
    }
}

/// Reads a `MessageState` column without copying its text.
fn state_at(r: &Row<'_>, i: usize) -> rusqlite::Result<MessageState> {
    r.get_ref(i)?
        .as_str()
        .map_err(|e| conv(i, e))?
        .parse::<MessageState>()
        .map_err(|e| conv(i, e))
}

/// What the state machine needs of a message, plus its identity.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    pub rowid: i64,
    pub sequence: i64,
    pub message_id: String,
    pub session_id: Option<String>,
    pub meta: MessageMeta,
}

impl Head {
    /// Reads [`head_cols!`] (also the first columns of [`msg_cols!`]).
    pub(crate) fn from_row(r: &Row<'_>) -> rusqlite::Result<Head> {
        Ok(Head {
            rowid: r.get(0)?,
            sequence: r.get(1)?,
            message_id: r.get(2)?,
            session_id: r.get(3)?,
            meta: MessageMeta {
                state: state_at(r, 4)?,
                visible_at: Timestamp(r.get(5)?),
                expires_at: ts(r.get(6)?),
                delivery_count: count(7, r.get(7)?)?,
                lock_token: r.get(8)?,
                locked_until: ts(r.get(9)?),
                deferred: r.get(10)?,
                first_delivered_at: ts(r.get(11)?),
                last_delivered_at: ts(r.get(12)?),
            },
        })
    }
}

/// A full message row.
#[derive(Debug, Clone)]
pub(crate) struct MsgRow {
    pub head: Head,
    pub body: Vec<u8>,
    pub content_type: Option<String>,
    pub properties: Properties,
    pub correlation_id: Option<String>,
    pub message_type: Option<String>,
    pub intent: Option<String>,
    pub valid_until: Option<Timestamp>,
    pub enqueued_at: Timestamp,
    pub scheduled_at: Option<Timestamp>,
}

impl MsgRow {
    /// Reads [`msg_cols!`].
    pub(crate) fn from_row(r: &Row<'_>) -> rusqlite::Result<MsgRow> {
        Ok(MsgRow {
            head: Head::from_row(r)?,
            body: r.get(13)?,
            content_type: r.get(14)?,
            properties: props_from_json(15, r.get(15)?)?,
            correlation_id: r.get(16)?,
            message_type: r.get(17)?,
            intent: r.get(18)?,
            valid_until: ts(r.get(19)?),
            enqueued_at: Timestamp(r.get(20)?),
            scheduled_at: ts(r.get(21)?),
        })
    }

    /// The row as the trait shows it.
    pub(crate) fn into_stored(self, queue: &EntityName) -> StoredMessage {
        let MsgRow {
            head,
            body,
            content_type,
            properties,
            correlation_id,
            message_type,
            intent,
            valid_until,
            enqueued_at,
            scheduled_at,
        } = self;
        StoredMessage {
            queue: queue.clone(),
            sequence: head.sequence,
            message_id: head.message_id,
            body,
            content_type,
            properties,
            correlation_id,
            session_id: head.session_id,
            message_type,
            intent,
            valid_until,
            enqueued_at,
            scheduled_at,
            state: head.meta.state,
            visible_at: head.meta.visible_at,
            expires_at: head.meta.expires_at,
            delivery_count: head.meta.delivery_count,
            locked_until: head.meta.locked_until,
            first_delivered_at: head.meta.first_delivered_at,
            last_delivered_at: head.meta.last_delivered_at,
        }
    }
}

/// Loads a full row by rowid.
pub(crate) fn load_row(conn: &Connection, rowid: i64) -> StoreResult<MsgRow> {
    conn.prepare_cached(concat!(
        "SELECT ",
        msg_cols!(),
        msg_from!(),
        " WHERE m.id = ?1"
    ))
    .db()?
    .query_row([rowid], MsgRow::from_row)
    .db()
}

/// Stores a new meta for a message (see [`write_meta_with`]).
pub(crate) const WRITE_META: &str = "UPDATE messages SET state = ?1, visible_at = ?2, \
     expires_at = ?3, delivery_count = ?4, lock_token = ?5, locked_until = ?6, deferred = ?7, \
     first_delivered_at = ?8, last_delivered_at = ?9 WHERE rowid = ?10";

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
}

impl<'c> MetaWriter<'c> {
    pub(crate) fn new(conn: &'c Connection) -> Self {
        MetaWriter {
            conn,
            full: None,
            lock: None,
            unlock: None,
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
            .ok_or_else(|| backend(SqliteError::Invariant("statement slot just filled")))
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
                ms(new.locked_until),
                ms(new.first_delivered_at),
                ms(new.last_delivered_at),
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
                ms(new.locked_until),
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
        ms(m.expires_at),
        i64::from(m.delivery_count),
        m.lock_token,
        ms(m.locked_until),
        m.deferred,
        ms(m.first_delivered_at),
        ms(m.last_delivered_at),
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
    let n = i64::try_from(n).map_err(|_| backend(SqliteError::OutOfRange("batch size")))?;
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

/// A message to insert (new, forwarded or resubmitted).
pub(crate) struct NewRow<'a> {
    pub queue_id: i64,
    pub sequence: i64,
    pub message_id: &'a str,
    pub body: &'a [u8],
    pub content_type: Option<&'a str>,
    pub properties: Option<&'a str>,
    pub correlation_id: Option<&'a str>,
    pub session_id: Option<&'a str>,
    pub message_type: Option<&'a str>,
    pub intent: Option<&'a str>,
    pub valid_until: Option<Timestamp>,
    pub enqueued_at: Timestamp,
    pub scheduled_at: Option<Timestamp>,
    pub visible_at: Timestamp,
    pub expires_at: Option<Timestamp>,
}

/// Contents (body and properties JSON) larger than this go to `message_bodies`; smaller
/// ones stay in the message row. Migration 4 applies the same bound to existing rows.
pub(crate) const INLINE_CONTENT_MAX: usize = 512;

/// Inserts an Available, never delivered message: its row, with its contents when they
/// are small, or else followed by its contents in `message_bodies` under the row's id.
pub(crate) fn insert_message(conn: &Connection, m: &NewRow<'_>) -> StoreResult<()> {
    let size = m.body.len() + m.properties.map_or(0, str::len);
    let inline = size <= INLINE_CONTENT_MAX;
    let (body, content_type, properties, correlation_id, message_type, intent) = if inline {
        (
            Some(m.body),
            m.content_type,
            m.properties,
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
        m.queue_id,
        m.sequence,
        m.message_id,
        m.session_id,
        ms(m.valid_until),
        m.enqueued_at.0,
        ms(m.scheduled_at),
        m.visible_at.0,
        ms(m.expires_at),
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

/// Reads [`dl_cols!`].
pub(crate) fn record_from_row(r: &Row<'_>) -> rusqlite::Result<DeadLetterRecord> {
    let queue: String = r.get(1)?;
    let area: String = r.get(2)?;
    let quality: String = r.get(17)?;
    let route: String = r.get(23)?;
    let fwd_queue: Option<String> = r.get(24)?;
    let fwd_seq: Option<i64> = r.get(25)?;
    let forwarded_to = match (fwd_queue, fwd_seq) {
        (Some(q), Some(s)) => Some((q.parse::<EntityName>().map_err(|e| conv(24, e))?, s)),
        _ => None,
    };
    Ok(DeadLetterRecord {
        id: r.get(0)?,
        queue: queue.parse().map_err(|e| conv(1, e))?,
        area: area.parse::<Area>().map_err(|e| conv(2, e))?,
        message_id: r.get(3)?,
        sequence: r.get(4)?,
        session_id: r.get(5)?,
        body: r.get(6)?,
        body_sha256: r.get(7)?,
        content_type: r.get(8)?,
        properties: props_from_json(9, r.get(9)?)?,
        correlation_id: r.get(10)?,
        message_type: r.get(11)?,
        intent: r.get(12)?,
        valid_until: ts(r.get(13)?),
        reason: r.get(14)?,
        description: r.get(15)?,
        delivery_count: count(16, r.get(16)?)?,
        count_quality: quality
            .parse::<EvidenceQuality>()
            .map_err(|e| conv(17, e))?,
        first_delivered_at: ts(r.get(18)?),
        last_delivered_at: ts(r.get(19)?),
        enqueued_at: Timestamp(r.get(20)?),
        dead_lettered_at: Timestamp(r.get(21)?),
        policy_version: u64::try_from(r.get::<_, i64>(22)?).map_err(|e| conv(22, e))?,
        route: route.parse::<RouteKind>().map_err(|e| conv(23, e))?,
        forwarded_to,
        dlq_delivery_count: count(26, r.get(26)?)?,
        locked_until: ts(r.get(27)?),
    })
}

/// Inserts a dead-letter record (unlocked).
pub(crate) fn insert_record(conn: &Connection, d: &DeadLetterRecord) -> StoreResult<()> {
    let properties = props_to_json(&d.properties)?;
    let version = i64::try_from(d.policy_version)
        .map_err(|_| backend(SqliteError::OutOfRange("policy_version")))?;
    conn.prepare_cached(
        "INSERT INTO dead_letters (id, queue, area, message_id, sequence, session_id, body, \
         body_sha256, content_type, properties, correlation_id, message_type, intent, \
         valid_until, reason, description, delivery_count, count_quality, first_delivered_at, \
         last_delivered_at, enqueued_at, dead_lettered_at, policy_version, route, \
         forwarded_queue, forwarded_sequence, dlq_delivery_count) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, \
         ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27)",
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
        ms(d.valid_until),
        d.reason,
        d.description,
        i64::from(d.delivery_count),
        d.count_quality.as_str(),
        ms(d.first_delivered_at),
        ms(d.last_delivered_at),
        d.enqueued_at.0,
        d.dead_lettered_at.0,
        version,
        d.route.as_str(),
        d.forwarded_to.as_ref().map(|(q, _)| q.as_str()),
        d.forwarded_to.as_ref().map(|(_, s)| *s),
        i64::from(d.dlq_delivery_count),
    ])
    .db()?;
    Ok(())
}
