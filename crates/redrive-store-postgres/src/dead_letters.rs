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

use crate::messages::message_ref;
use crate::pool::Db;
use crate::rows::{
    Head, NewRow, QueueInfo, Writes, allocate_one, decode, delete_rows, dl_cols, get,
    insert_messages, insert_record, load_row, props_to_json, queue, queue_id, queue_opt,
    record_from_row,
};

/// Whether an application dead-letter on `q` would be refused because its dead-letter
/// queue does not exist (checked before anything is changed).
pub(crate) async fn target_missing(db: &Db<'_>, q: &QueueInfo) -> StoreResult<Option<StoreError>> {
    let Some(target) = &q.policy.dead_letter_queue else {
        return Ok(None);
    };
    if target != &q.name && queue_opt(db, target.as_str()).await?.is_none() {
        return Ok(Some(StoreError::DeadLetterTargetMissing {
            queue: q.name.to_string(),
            target: target.to_string(),
        }));
    }
    Ok(None)
}

/// Dead-letters the message `head` of queue `q` (its row locked by the caller): writes
/// the evidence record (and, when the queue names a dead-letter queue, a copy there),
/// removes the message at once (dropping any write of it pending in `writes`), reports
/// it.
#[allow(clippy::too_many_arguments)] // one shared path; every argument is evidence
pub(crate) async fn dead_letter(
    db: &Db<'_>,
    q: &QueueInfo,
    head: &Head,
    reason: DeadLetterReason,
    by_broker: bool,
    description: Option<String>,
    now: Timestamp,
    effects: &mut Effects,
    writes: &mut Writes,
) -> StoreResult<String> {
    let row = load_row(db, q.id, head.sequence).await?;
    let meta = &head.meta;
    let mut description = description
        .or_else(|| broker_description(&reason, meta, q.policy.max_delivery_count, q.version));
    let mut area = Area::Live;
    let mut forwarded_to: Option<(EntityName, i64)> = None;

    if let Some(target) = &q.policy.dead_letter_queue {
        let found = queue_opt(db, target.as_str()).await?;
        let fit = check_target(
            &q.name,
            target,
            found.as_ref().map(|t| t.policy.requires_session),
            row.head.session_id.is_some(),
        )
        .and_then(|()| found.ok_or(TargetUnfit::Missing));
        match fit {
            Ok(t) => {
                let sequence = allocate_one(db, t.id, row.head.session_id.as_deref()).await?;
                let props =
                    forwarded_properties(&row.properties, &reason, description.as_deref(), &q.name);
                let copy = NewRow {
                    sequence,
                    message_id: &head.message_id,
                    body: &row.body,
                    content_type: row.content_type.as_deref(),
                    properties: props_to_json(&props)?,
                    correlation_id: row.correlation_id.as_deref(),
                    session_id: row.head.session_id.as_deref(),
                    message_type: row.message_type.as_deref(),
                    intent: row.intent.as_deref(),
                    valid_until: row.valid_until,
                    scheduled_at: None,
                    visible_at: now,
                    expires_at: t
                        .policy
                        .default_ttl_ms
                        .map(|ttl| now.plus_millis(i64::try_from(ttl).unwrap_or(i64::MAX))),
                };
                insert_messages(db, t.id, now, &[copy]).await?;
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
    insert_record(db, &record).await?;
    writes.forget(head.sequence);
    delete_rows(db, q.id, &[head.sequence]).await?;
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

/// One record; with `lock`, its row stays locked until the transaction ends.
async fn load_record(
    db: &Db<'_>,
    queue: &EntityName,
    id: &str,
    lock: bool,
) -> StoreResult<Option<DeadLetterRecord>> {
    let sql = if lock {
        concat!(
            "SELECT ",
            dl_cols!(),
            " FROM dead_letters WHERE queue = $1 AND id = $2 FOR UPDATE"
        )
    } else {
        concat!(
            "SELECT ",
            dl_cols!(),
            " FROM dead_letters WHERE queue = $1 AND id = $2"
        )
    };
    match db.query_opt(sql, &[&queue.as_str(), &id]).await? {
        Some(row) => record_from_row(&row).map(Some),
        None => Ok(None),
    }
}

// ---- reads ----------------------------------------------------------------------------

/// One statement (one snapshot); an empty page is told apart from a missing queue by a
/// second look (records are deleted with their queue, in one transaction).
pub(crate) async fn list(db: &Db<'_>, q: &DeadLetterQuery) -> StoreResult<Vec<DeadLetterRecord>> {
    let rows = db
        .query(
            concat!(
                "SELECT ",
                dl_cols!(),
                " FROM dead_letters WHERE queue = $1 AND area = $2 \
                  AND ($3::text IS NULL OR reason = $3) \
                  AND ($4::bigint IS NULL OR dead_lettered_at >= $4) \
                  AND ($5::bigint IS NULL OR dead_lettered_at < $5) \
                  AND ($6::text IS NULL OR id > $6) \
                 ORDER BY id LIMIT $7"
            ),
            &[
                &q.queue.as_str(),
                &q.area.as_str(),
                &q.reason,
                &q.from.map(|t| t.0),
                &q.to.map(|t| t.0),
                &q.after,
                &i64::from(q.limit),
            ],
        )
        .await?;
    if rows.is_empty() {
        queue_id(db, &q.queue).await?;
    }
    decode(&rows, record_from_row)
}

pub(crate) async fn get_one(
    db: &Db<'_>,
    queue: &EntityName,
    id: &str,
) -> StoreResult<DeadLetterRecord> {
    match load_record(db, queue, id, false).await? {
        Some(record) => Ok(record),
        None => {
            queue_id(db, queue).await?;
            Err(not_found(queue, id))
        }
    }
}

// ---- writes ---------------------------------------------------------------------------

pub(crate) async fn receive(
    db: &Db<'_>,
    name: &EntityName,
    max: u32,
    lock_ms: u64,
    now: Timestamp,
) -> StoreResult<Vec<DeadLetterDelivery>> {
    queue(db, name).await?;
    // SKIP LOCKED: concurrent dead-letter receivers take different records.
    let rows = db
        .query(
            concat!(
                "SELECT ",
                dl_cols!(),
                " FROM dead_letters WHERE queue = $1 AND area = 'live' \
                  AND (locked_until IS NULL OR locked_until <= $2) \
                 ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED"
            ),
            &[&name.as_str(), &now.0, &i64::from(max)],
        )
        .await?;
    let records = decode(&rows, record_from_row)?;
    if records.is_empty() {
        return Ok(Vec::new());
    }
    let locked_until = now.plus_millis(i64::try_from(lock_ms).unwrap_or(i64::MAX));
    let mut out = Vec::with_capacity(records.len());
    let mut ids = Vec::with_capacity(records.len());
    let mut tokens = Vec::with_capacity(records.len());
    let mut counts = Vec::with_capacity(records.len());
    for mut record in records {
        let token = redrive_core::id::new_lock_token();
        record.dlq_delivery_count += 1;
        record.locked_until = Some(locked_until);
        ids.push(record.id.clone());
        tokens.push(token.clone());
        counts.push(i64::from(record.dlq_delivery_count));
        out.push(DeadLetterDelivery {
            record,
            lock_token: token,
            locked_until,
        });
    }
    db.execute(
        "UPDATE dead_letters AS d SET lock_token = u.token, locked_until = $1, \
         dlq_delivery_count = u.n \
         FROM unnest($2::text[], $3::text[], $4::bigint[]) AS u(id, token, n) \
         WHERE d.id = u.id",
        &[&locked_until.0, &ids, &tokens, &counts],
    )
    .await?;
    Ok(out)
}

pub(crate) async fn settle(
    db: &Db<'_>,
    name: &EntityName,
    lock_token: &str,
    complete: bool,
    now: Timestamp,
) -> StoreResult<()> {
    queue(db, name).await?;
    let found = db
        .query_opt(
            "SELECT id, locked_until FROM dead_letters WHERE lock_token = $1 AND queue = $2 \
             FOR UPDATE",
            &[&lock_token, &name.as_str()],
        )
        .await?;
    let Some(row) = found else {
        return Err(StoreError::LockLost);
    };
    let id: String = get(&row, 0)?;
    let until: Option<i64> = get(&row, 1)?;
    if until.is_none_or(|u| u <= now.0) {
        return Err(StoreError::LockLost);
    }
    let sql = if complete {
        "DELETE FROM dead_letters WHERE id = $1"
    } else {
        "UPDATE dead_letters SET lock_token = NULL, locked_until = NULL WHERE id = $1"
    };
    db.execute(sql, &[&id]).await?;
    Ok(())
}

pub(crate) async fn resubmit(
    db: &Db<'_>,
    name: &EntityName,
    id: &str,
    now: Timestamp,
) -> StoreResult<Enqueued> {
    let q = queue(db, name).await?;
    // Locked: of two concurrent resubmissions, the second finds the record archived.
    let record = load_record(db, name, id, true)
        .await?
        .filter(|r| r.area == Area::Live)
        .ok_or_else(|| not_found(name, id))?;
    if q.policy.requires_session && record.session_id.is_none() {
        return Err(StoreError::SessionRequired {
            queue: name.to_string(),
        });
    }
    let mut props = record.properties.clone();
    props.insert(
        RESUBMITTED_FROM_PROPERTY.to_owned(),
        PropertyValue::String(record.id.clone()),
    );
    let sequence = allocate_one(db, q.id, record.session_id.as_deref()).await?;
    let row = NewRow {
        sequence,
        message_id: &record.message_id,
        body: &record.body,
        content_type: record.content_type.as_deref(),
        properties: props_to_json(&props)?,
        correlation_id: record.correlation_id.as_deref(),
        session_id: record.session_id.as_deref(),
        message_type: record.message_type.as_deref(),
        intent: record.intent.as_deref(),
        valid_until: record.valid_until,
        scheduled_at: None,
        visible_at: now,
        expires_at: q
            .policy
            .default_ttl_ms
            .map(|ttl| now.plus_millis(i64::try_from(ttl).unwrap_or(i64::MAX))),
    };
    insert_messages(db, q.id, now, &[row]).await?;
    set_area(db, &record.id, Area::Archived).await?;
    Ok(Enqueued {
        message_id: record.message_id,
        sequence,
        duplicate: false,
    })
}

pub(crate) async fn move_to(db: &Db<'_>, name: &EntityName, id: &str, to: Area) -> StoreResult<()> {
    queue(db, name).await?;
    let changed = db
        .execute(
            "UPDATE dead_letters SET area = $3, lock_token = NULL, locked_until = NULL \
             WHERE queue = $1 AND id = $2",
            &[&name.as_str(), &id, &to.as_str()],
        )
        .await?;
    if changed == 0 {
        return Err(not_found(name, id));
    }
    Ok(())
}

/// Moves a record and drops any dead-letter receiver's lock on it (a lock is a claim on
/// the live record; after a move it settles nothing).
async fn set_area(db: &Db<'_>, id: &str, to: Area) -> StoreResult<()> {
    db.execute(
        "UPDATE dead_letters SET area = $2, lock_token = NULL, locked_until = NULL WHERE id = $1",
        &[&id, &to.as_str()],
    )
    .await?;
    Ok(())
}
