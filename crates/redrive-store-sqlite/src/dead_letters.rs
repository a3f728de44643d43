//! Dead letters: the one dead-lettering path shared by receive, settle and sweep, and the
//! operations on a queue's dead-letter store.

use redrive_core::message::RESUBMITTED_FROM_PROPERTY;
use redrive_core::{Area, DeadLetterReason, EntityName, PropertyValue, Timestamp};
use redrive_store::dead_letter::{
    Routing, TargetUnfit, broker_description, check_target, evidence_record, fallback_description,
    forwarded_properties,
};
use redrive_store::{
    DeadLetterDelivery, DeadLetterQuery, DeadLetterRecord, DeadLettered, Effects, Enqueued,
    StoreError, StoreResult,
};
use rusqlite::{Connection, OptionalExtension, params};

use crate::error::Db;
use crate::messages::message_ref;
use crate::rows::{
    Head, NewRow, QueueInfo, allocate_sequences, delete_row, dl_cols, insert_message,
    insert_record, load_row, props_to_json, queue_id, record_from_row,
};
use crate::writer::Tx;

/// Whether an application dead-letter on `q` would be refused because its dead-letter
/// queue does not exist (checked before anything is changed).
pub(crate) fn target_missing(tx: &mut Tx<'_>, q: &QueueInfo) -> StoreResult<Option<StoreError>> {
    let Some(target) = &q.policy.dead_letter_queue else {
        return Ok(None);
    };
    if target != &q.name && tx.queue_opt(target.as_str())?.is_none() {
        return Ok(Some(StoreError::DeadLetterTargetMissing {
            queue: q.name.to_string(),
            target: target.to_string(),
        }));
    }
    Ok(None)
}

/// Dead-letters the message `head` of queue `q`: writes the evidence record (and, when the
/// queue names a dead-letter queue, a copy there), removes the message, reports it.
#[allow(clippy::too_many_arguments)] // one shared path; every argument is evidence
pub(crate) fn dead_letter(
    tx: &mut Tx<'_>,
    q: &QueueInfo,
    head: &Head,
    reason: DeadLetterReason,
    by_broker: bool,
    description: Option<String>,
    now: Timestamp,
    effects: &mut Effects,
) -> StoreResult<String> {
    let row = load_row(tx.conn, head.rowid)?;
    let meta = &head.meta;
    let mut description = description
        .or_else(|| broker_description(&reason, meta, q.policy.max_delivery_count, q.version));
    let mut area = Area::Live;
    let mut forwarded_to: Option<(EntityName, i64)> = None;

    if let Some(target) = &q.policy.dead_letter_queue {
        let found = tx.queue_opt(target.as_str())?;
        let fit = check_target(
            &q.name,
            target,
            found.as_ref().map(|t| t.policy.requires_session),
            row.head.session_id.is_some(),
        )
        .and_then(|()| found.ok_or(TargetUnfit::Missing));
        match fit {
            Ok(t) => {
                let sequence = allocate_sequences(tx.conn, t.id, 1)?;
                let props =
                    forwarded_properties(&row.properties, &reason, description.as_deref(), &q.name);
                let props = props_to_json(&props)?;
                insert_message(
                    tx.conn,
                    &NewRow {
                        queue_id: t.id,
                        sequence,
                        message_id: &head.message_id,
                        body: &row.body,
                        content_type: row.content_type.as_deref(),
                        properties: props.as_deref(),
                        correlation_id: row.correlation_id.as_deref(),
                        session_id: row.head.session_id.as_deref(),
                        message_type: row.message_type.as_deref(),
                        intent: row.intent.as_deref(),
                        valid_until: row.valid_until,
                        enqueued_at: now,
                        scheduled_at: None,
                        visible_at: now,
                        expires_at: t
                            .policy
                            .default_ttl_ms
                            .map(|ttl| now.plus_millis(i64::try_from(ttl).unwrap_or(i64::MAX))),
                    },
                )?;
                effects.wake(&t.name);
                forwarded_to = Some((t.name.clone(), sequence));
                area = Area::Archived;
            }
            Err(unfit) => {
                if !by_broker && unfit == TargetUnfit::Missing {
                    // Callers check `target_missing` first; this keeps the rule in one place.
                    return Err(StoreError::DeadLetterTargetMissing {
                        queue: q.name.to_string(),
                        target: target.to_string(),
                    });
                }
                description = Some(fallback_description(description, target, unfit, &q.name));
                tracing::warn!(queue = %q.name, target = %target, why = unfit.why(),
                    "dead-letter queue unusable; record kept in the queue's own store");
            }
        }
    }

    let id = redrive_core::id::new_dead_letter_id(now);
    let routing = Routing {
        area,
        description,
        by_broker,
        forwarded_to: forwarded_to.clone(),
    };
    let message = row.into_stored(&q.name);
    let record = evidence_record(id.clone(), message, meta, &reason, routing, q.version, now);
    insert_record(tx.conn, &record)?;
    delete_row(tx.conn, head.rowid)?;
    effects.dead_lettered.push(DeadLettered {
        message: message_ref(q, head),
        dead_letter_id: id.clone(),
        reason,
        forwarded_to,
    });
    Ok(id)
}

fn not_found(queue: &EntityName, id: &str) -> StoreError {
    StoreError::DeadLetterNotFound {
        queue: queue.to_string(),
        id: id.to_owned(),
    }
}

fn load_record(
    conn: &Connection,
    queue: &EntityName,
    id: &str,
) -> StoreResult<Option<DeadLetterRecord>> {
    conn.prepare_cached(concat!(
        "SELECT ",
        dl_cols!(),
        " FROM dead_letters WHERE queue = ?1 AND id = ?2"
    ))
    .db()?
    .query_row(params![queue.as_str(), id], record_from_row)
    .optional()
    .db()
}

// ---- reads ----------------------------------------------------------------------------

pub(crate) fn list(conn: &Connection, q: &DeadLetterQuery) -> StoreResult<Vec<DeadLetterRecord>> {
    queue_id(conn, &q.queue)?;
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            dl_cols!(),
            " FROM dead_letters WHERE queue = ?1 AND area = ?2 \
              AND (?3 IS NULL OR reason = ?3) \
              AND (?4 IS NULL OR dead_lettered_at >= ?4) \
              AND (?5 IS NULL OR dead_lettered_at < ?5) \
              AND (?6 IS NULL OR id > ?6) \
             ORDER BY id LIMIT ?7"
        ))
        .db()?;
    let rows = stmt
        .query_map(
            params![
                q.queue.as_str(),
                q.area.as_str(),
                q.reason,
                q.from.map(|t| t.0),
                q.to.map(|t| t.0),
                q.after,
                i64::from(q.limit),
            ],
            record_from_row,
        )
        .db()?;
    rows.map(|r| r.db()).collect()
}

pub(crate) fn get(
    conn: &Connection,
    queue: &EntityName,
    id: &str,
) -> StoreResult<DeadLetterRecord> {
    queue_id(conn, queue)?;
    load_record(conn, queue, id)?.ok_or_else(|| not_found(queue, id))
}

// ---- writes ---------------------------------------------------------------------------

pub(crate) fn receive(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    max: u32,
    lock_ms: u64,
    now: Timestamp,
) -> StoreResult<Vec<DeadLetterDelivery>> {
    tx.queue(queue)?;
    let records: Vec<DeadLetterRecord> = {
        let mut stmt = tx
            .conn
            .prepare_cached(concat!(
                "SELECT ",
                dl_cols!(),
                " FROM dead_letters WHERE queue = ?1 AND area = 'live' \
                  AND (locked_until IS NULL OR locked_until <= ?2) \
                 ORDER BY id LIMIT ?3"
            ))
            .db()?;
        let rows = stmt
            .query_map(
                params![queue.as_str(), now.0, i64::from(max)],
                record_from_row,
            )
            .db()?;
        rows.map(|r| r.db()).collect::<StoreResult<_>>()?
    };
    let locked_until = now.plus_millis(i64::try_from(lock_ms).unwrap_or(i64::MAX));
    let mut out = Vec::with_capacity(records.len());
    for mut record in records {
        let token = redrive_core::id::new_lock_token();
        record.dlq_delivery_count += 1;
        record.locked_until = Some(locked_until);
        tx.conn
            .prepare_cached(
                "UPDATE dead_letters SET lock_token = ?2, locked_until = ?3, \
                 dlq_delivery_count = ?4 WHERE id = ?1",
            )
            .db()?
            .execute(params![
                record.id,
                token,
                locked_until.0,
                i64::from(record.dlq_delivery_count)
            ])
            .db()?;
        out.push(DeadLetterDelivery {
            record,
            lock_token: token,
            locked_until,
        });
    }
    Ok(out)
}

pub(crate) fn settle(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    lock_token: &str,
    complete: bool,
    now: Timestamp,
) -> StoreResult<()> {
    tx.queue(queue)?;
    let found: Option<(String, Option<i64>)> = tx
        .conn
        .prepare_cached(
            "SELECT id, locked_until FROM dead_letters WHERE lock_token = ?1 AND queue = ?2",
        )
        .db()?
        .query_row(params![lock_token, queue.as_str()], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .optional()
        .db()?;
    let Some((id, Some(until))) = found else {
        return Err(StoreError::LockLost);
    };
    if until <= now.0 {
        return Err(StoreError::LockLost);
    }
    let sql = if complete {
        "DELETE FROM dead_letters WHERE id = ?1"
    } else {
        "UPDATE dead_letters SET lock_token = NULL, locked_until = NULL WHERE id = ?1"
    };
    tx.conn.prepare_cached(sql).db()?.execute([id]).db()?;
    Ok(())
}

pub(crate) fn resubmit(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    id: &str,
    now: Timestamp,
) -> StoreResult<Enqueued> {
    let q = tx.queue(queue)?;
    let record = load_record(tx.conn, queue, id)?
        .filter(|r| r.area == Area::Live)
        .ok_or_else(|| not_found(queue, id))?;
    if q.policy.requires_session && record.session_id.is_none() {
        return Err(StoreError::SessionRequired {
            queue: queue.to_string(),
        });
    }
    let mut props = record.properties.clone();
    props.insert(
        RESUBMITTED_FROM_PROPERTY.to_owned(),
        PropertyValue::String(record.id.clone()),
    );
    let props = props_to_json(&props)?;
    let sequence = allocate_sequences(tx.conn, q.id, 1)?;
    insert_message(
        tx.conn,
        &NewRow {
            queue_id: q.id,
            sequence,
            message_id: &record.message_id,
            body: &record.body,
            content_type: record.content_type.as_deref(),
            properties: props.as_deref(),
            correlation_id: record.correlation_id.as_deref(),
            session_id: record.session_id.as_deref(),
            message_type: record.message_type.as_deref(),
            intent: record.intent.as_deref(),
            valid_until: record.valid_until,
            enqueued_at: now,
            scheduled_at: None,
            visible_at: now,
            expires_at: q
                .policy
                .default_ttl_ms
                .map(|ttl| now.plus_millis(i64::try_from(ttl).unwrap_or(i64::MAX))),
        },
    )?;
    set_area(tx.conn, &record.id, Area::Archived)?;
    Ok(Enqueued {
        message_id: record.message_id,
        sequence,
        duplicate: false,
    })
}

pub(crate) fn move_to(tx: &mut Tx<'_>, queue: &EntityName, id: &str, to: Area) -> StoreResult<()> {
    tx.queue(queue)?;
    let exists = tx
        .conn
        .prepare_cached("SELECT 1 FROM dead_letters WHERE queue = ?1 AND id = ?2")
        .db()?
        .exists(params![queue.as_str(), id])
        .db()?;
    if !exists {
        return Err(not_found(queue, id));
    }
    set_area(tx.conn, id, to)
}

/// Moves a record and drops any dead-letter receiver's lock on it (a lock is a claim on
/// the live record; after a move it settles nothing).
fn set_area(conn: &Connection, id: &str, to: Area) -> StoreResult<()> {
    conn.prepare_cached(
        "UPDATE dead_letters SET area = ?2, lock_token = NULL, locked_until = NULL WHERE id = ?1",
    )
    .db()?
    .execute(params![id, to.as_str()])
    .db()?;
    Ok(())
}
