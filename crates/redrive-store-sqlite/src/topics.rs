//! Topics and subscriptions: create, delete, update (writer), get and list (readers), and
//! publish (writer): duplicate detection by `source`+`id` and fan-out to subscription
//! queues in one transaction.

use std::collections::HashMap;

use redrive_core::{EntityName, Timestamp};
use redrive_store::{
    NewMessage, NewSubscription, PublishEvent, Published, StoreError, StoreResult,
    SubscriptionRecord, SubscriptionSpec, SubscriptionUpdate, TopicPolicy, TopicRecord,
};
use rusqlite::{Connection, OptionalExtension, Row, params};

use crate::error::{Db, SqliteError, backend};
use crate::writer::Tx;
use crate::{messages, queues};

fn to_json<T: serde::Serialize>(v: &T) -> StoreResult<String> {
    serde_json::to_string(v).map_err(StoreError::backend)
}

fn from_json<T: serde::de::DeserializeOwned>(s: &str) -> StoreResult<T> {
    serde_json::from_str(s).map_err(StoreError::backend)
}

fn name_of(s: &str) -> StoreResult<EntityName> {
    s.parse().map_err(StoreError::backend)
}

fn version_of(v: i64) -> StoreResult<u64> {
    u64::try_from(v).map_err(|_| backend(SqliteError::OutOfRange("version")))
}

fn topic_not_found(name: &EntityName) -> StoreError {
    StoreError::TopicNotFound {
        topic: name.to_string(),
    }
}

fn sub_not_found(topic: &EntityName, name: &EntityName) -> StoreError {
    StoreError::SubscriptionNotFound {
        topic: topic.to_string(),
        subscription: name.to_string(),
    }
}

type TopicRow = (String, String, i64, i64, i64);

fn topic_row(r: &Row<'_>) -> rusqlite::Result<TopicRow> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

fn topic_record(row: TopicRow) -> StoreResult<TopicRecord> {
    Ok(TopicRecord {
        name: name_of(&row.0)?,
        policy: from_json(&row.1)?,
        version: version_of(row.2)?,
        created_at: Timestamp(row.3),
        updated_at: Timestamp(row.4),
    })
}

type SubRow = (String, String, String, String, i64, i64, i64);

const SUB_COLS: &str = "topic, name, queue, spec, version, created_at, updated_at";

fn sub_row(r: &Row<'_>) -> rusqlite::Result<SubRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
    ))
}

fn sub_record(row: SubRow) -> StoreResult<SubscriptionRecord> {
    Ok(SubscriptionRecord {
        topic: name_of(&row.0)?,
        name: name_of(&row.1)?,
        queue: name_of(&row.2)?,
        spec: from_json::<SubscriptionSpec>(&row.3)?,
        version: version_of(row.4)?,
        created_at: Timestamp(row.5),
        updated_at: Timestamp(row.6),
    })
}

fn load_topic(conn: &Connection, name: &EntityName) -> StoreResult<Option<TopicRecord>> {
    conn.prepare_cached(
        "SELECT name, policy, version, created_at, updated_at FROM topics WHERE name = ?1",
    )
    .db()?
    .query_row([name.as_str()], topic_row)
    .optional()
    .db()?
    .map(topic_record)
    .transpose()
}

fn load_sub(
    conn: &Connection,
    topic: &EntityName,
    name: &EntityName,
) -> StoreResult<Option<SubscriptionRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {SUB_COLS} FROM subscriptions WHERE topic = ?1 AND name = ?2"
    ))
    .db()?
    .query_row([topic.as_str(), name.as_str()], sub_row)
    .optional()
    .db()?
    .map(sub_record)
    .transpose()
}

fn subs_of(conn: &Connection, topic: &EntityName) -> StoreResult<Vec<SubscriptionRecord>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {SUB_COLS} FROM subscriptions WHERE topic = ?1 ORDER BY name"
        ))
        .db()?;
    let rows = stmt.query_map([topic.as_str()], sub_row).db()?;
    rows.map(|r| r.db().and_then(sub_record)).collect()
}

// ---- writes ---------------------------------------------------------------------------

pub(crate) fn create_topic(
    tx: &mut Tx<'_>,
    name: &EntityName,
    policy: &TopicPolicy,
    now: Timestamp,
) -> StoreResult<TopicRecord> {
    let inserted = tx
        .conn
        .prepare_cached(
            "INSERT INTO topics (name, policy, version, created_at, updated_at) \
             VALUES (?1, ?2, 1, ?3, ?3) ON CONFLICT (name) DO NOTHING",
        )
        .db()?
        .execute(params![name.as_str(), to_json(policy)?, now.0])
        .db()?;
    if inserted == 0 {
        return Err(StoreError::TopicExists {
            topic: name.to_string(),
        });
    }
    Ok(TopicRecord {
        name: name.clone(),
        policy: policy.clone(),
        version: 1,
        created_at: now,
        updated_at: now,
    })
}

pub(crate) fn delete_topic(tx: &mut Tx<'_>, name: &EntityName, force: bool) -> StoreResult<()> {
    if load_topic(tx.conn, name)?.is_none() {
        return Err(topic_not_found(name));
    }
    let subs = subs_of(tx.conn, name)?;
    if !subs.is_empty() && !force {
        return Err(StoreError::TopicHasSubscriptions {
            topic: name.to_string(),
            subscriptions: subs.len() as u64,
        });
    }
    for s in &subs {
        match queues::delete(tx, &s.queue, true) {
            Ok(()) | Err(StoreError::QueueNotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    for sql in [
        "DELETE FROM subscriptions WHERE topic = ?1",
        "DELETE FROM topic_dedup WHERE topic = ?1",
        "DELETE FROM topics WHERE name = ?1",
    ] {
        tx.conn
            .prepare_cached(sql)
            .db()?
            .execute([name.as_str()])
            .db()?;
    }
    Ok(())
}

pub(crate) fn create_subscription(
    tx: &mut Tx<'_>,
    sub: &NewSubscription,
    now: Timestamp,
) -> StoreResult<SubscriptionRecord> {
    if load_topic(tx.conn, &sub.topic)?.is_none() {
        return Err(topic_not_found(&sub.topic));
    }
    if load_sub(tx.conn, &sub.topic, &sub.name)?.is_some() {
        return Err(StoreError::SubscriptionExists {
            topic: sub.topic.to_string(),
            subscription: sub.name.to_string(),
        });
    }
    queues::create(tx, &sub.queue, &sub.queue_policy, now)?;
    tx.conn
        .prepare_cached(
            "INSERT INTO subscriptions (topic, name, queue, spec, version, created_at, \
             updated_at) VALUES (?1, ?2, ?3, ?4, 1, ?5, ?5)",
        )
        .db()?
        .execute(params![
            sub.topic.as_str(),
            sub.name.as_str(),
            sub.queue.as_str(),
            to_json(&sub.spec)?,
            now.0
        ])
        .db()?;
    Ok(SubscriptionRecord {
        topic: sub.topic.clone(),
        name: sub.name.clone(),
        queue: sub.queue.clone(),
        spec: sub.spec.clone(),
        version: 1,
        created_at: now,
        updated_at: now,
    })
}

pub(crate) fn update_subscription(
    tx: &mut Tx<'_>,
    topic: &EntityName,
    name: &EntityName,
    update: &SubscriptionUpdate,
    now: Timestamp,
) -> StoreResult<SubscriptionRecord> {
    let mut rec = load_sub(tx.conn, topic, name)?.ok_or_else(|| sub_not_found(topic, name))?;
    if let Some(p) = update.paused {
        rec.spec.paused = p;
    }
    if let Some(f) = &update.filter {
        rec.spec.filter = f.clone();
    }
    rec.version += 1;
    rec.updated_at = now;
    let version =
        i64::try_from(rec.version).map_err(|_| backend(SqliteError::OutOfRange("version")))?;
    tx.conn
        .prepare_cached(
            "UPDATE subscriptions SET spec = ?3, version = ?4, updated_at = ?5 \
             WHERE topic = ?1 AND name = ?2",
        )
        .db()?
        .execute(params![
            topic.as_str(),
            name.as_str(),
            to_json(&rec.spec)?,
            version,
            now.0
        ])
        .db()?;
    Ok(rec)
}

pub(crate) fn delete_subscription(
    tx: &mut Tx<'_>,
    topic: &EntityName,
    name: &EntityName,
    force: bool,
) -> StoreResult<u64> {
    let rec = load_sub(tx.conn, topic, name)?.ok_or_else(|| sub_not_found(topic, name))?;
    let messages: i64 = tx
        .conn
        .prepare_cached(
            "SELECT count(*) FROM messages m JOIN queues q ON q.id = m.queue_id \
             WHERE q.name = ?1",
        )
        .db()?
        .query_row([rec.queue.as_str()], |r| r.get(0))
        .db()?;
    let messages =
        u64::try_from(messages).map_err(|_| backend(SqliteError::OutOfRange("count")))?;
    if messages > 0 && !force {
        return Err(StoreError::SubscriptionNotEmpty {
            topic: topic.to_string(),
            subscription: name.to_string(),
            messages,
        });
    }
    match queues::delete(tx, &rec.queue, true) {
        Ok(()) | Err(StoreError::QueueNotFound { .. }) => {}
        Err(e) => return Err(e),
    }
    tx.conn
        .prepare_cached("DELETE FROM subscriptions WHERE topic = ?1 AND name = ?2")
        .db()?
        .execute([topic.as_str(), name.as_str()])
        .db()?;
    Ok(messages)
}

pub(crate) fn publish(
    tx: &mut Tx<'_>,
    topic: &EntityName,
    events: Vec<PublishEvent>,
    now: Timestamp,
) -> StoreResult<Vec<Published>> {
    let t = load_topic(tx.conn, topic)?.ok_or_else(|| topic_not_found(topic))?;
    let window = i64::try_from(t.policy.duplicate_detection_window_ms).unwrap_or(i64::MAX);
    if window > 0 {
        tx.conn
            .prepare_cached("DELETE FROM topic_dedup WHERE topic = ?1 AND expires_at <= ?2")
            .db()?
            .execute(params![topic.as_str(), now.0])
            .db()?;
    }
    let mut out = Vec::with_capacity(events.len());
    // Per queue, in event order, so sequence numbers follow publishing order.
    let mut per_queue: Vec<(EntityName, Vec<NewMessage>)> = Vec::new();
    let mut index: HashMap<EntityName, usize> = HashMap::new();
    for ev in events {
        if window > 0 {
            let seen: Option<i64> = tx
                .conn
                .prepare_cached(
                    "SELECT expires_at FROM topic_dedup \
                     WHERE topic = ?1 AND dedup_key = ?2 AND expires_at > ?3",
                )
                .db()?
                .query_row(params![topic.as_str(), ev.dedup_key, now.0], |r| r.get(0))
                .optional()
                .db()?;
            if seen.is_some() {
                out.push(Published { duplicate: true });
                continue;
            }
            tx.conn
                .prepare_cached(
                    "INSERT INTO topic_dedup (topic, dedup_key, expires_at) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (topic, dedup_key) DO UPDATE SET expires_at = excluded.expires_at",
                )
                .db()?
                .execute(params![
                    topic.as_str(),
                    ev.dedup_key,
                    now.plus_millis(window).0
                ])
                .db()?;
        }
        for (queue, m) in ev.deliveries {
            let i = *index.entry(queue.clone()).or_insert_with(|| {
                per_queue.push((queue, Vec::new()));
                per_queue.len() - 1
            });
            per_queue[i].1.push(m);
        }
        out.push(Published { duplicate: false });
    }
    for (queue, msgs) in per_queue {
        messages::enqueue(tx, &queue, msgs, now)?;
    }
    Ok(out)
}

// ---- reads ----------------------------------------------------------------------------

pub(crate) fn get_topic(conn: &Connection, name: &EntityName) -> StoreResult<TopicRecord> {
    load_topic(conn, name)?.ok_or_else(|| topic_not_found(name))
}

pub(crate) fn list_topics(conn: &Connection) -> StoreResult<Vec<TopicRecord>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT name, policy, version, created_at, updated_at FROM topics ORDER BY name",
        )
        .db()?;
    let rows = stmt.query_map([], topic_row).db()?;
    rows.map(|r| r.db().and_then(topic_record)).collect()
}

pub(crate) fn get_subscription(
    conn: &Connection,
    topic: &EntityName,
    name: &EntityName,
) -> StoreResult<SubscriptionRecord> {
    load_sub(conn, topic, name)?.ok_or_else(|| sub_not_found(topic, name))
}

pub(crate) fn list_subscriptions(
    conn: &Connection,
    topic: &EntityName,
) -> StoreResult<Vec<SubscriptionRecord>> {
    if load_topic(conn, topic)?.is_none() {
        return Err(topic_not_found(topic));
    }
    subs_of(conn, topic)
}

pub(crate) fn list_all_subscriptions(conn: &Connection) -> StoreResult<Vec<SubscriptionRecord>> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {SUB_COLS} FROM subscriptions ORDER BY topic, name"
        ))
        .db()?;
    let rows = stmt.query_map([], sub_row).db()?;
    rows.map(|r| r.db().and_then(sub_record)).collect()
}
