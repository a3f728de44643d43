//! Topics and subscriptions: create, delete, update, get and list, and publish: duplicate
//! detection by `source`+`id` and fan-out to subscription queues in one transaction.
//!
//! A topic's row is locked `FOR SHARE` by the operations that need it to exist (publish,
//! create subscription) and `FOR UPDATE` by its delete, so a delete waits for them and
//! they never write under a topic that is going away.

use std::collections::HashMap;

use redrive_core::{EntityName, Timestamp};
use redrive_store::{
    NewMessage, NewSubscription, PublishEvent, Published, StoreError, StoreResult,
    SubscriptionRecord, SubscriptionSpec, SubscriptionUpdate, TopicPolicy, TopicRecord,
};
use tokio_postgres::Row;

use crate::pool::Db;
use crate::rows::{count_u64, get, version_sql};
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
    u64::try_from(v)
        .map_err(|_| StoreError::backend(crate::error::PostgresError::OutOfRange("version")))
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

fn topic_record(r: &Row) -> StoreResult<TopicRecord> {
    Ok(TopicRecord {
        name: name_of(&get::<String>(r, 0)?)?,
        policy: from_json(&get::<String>(r, 1)?)?,
        version: version_of(get(r, 2)?)?,
        created_at: Timestamp(get(r, 3)?),
        updated_at: Timestamp(get(r, 4)?),
    })
}

fn sub_record(r: &Row) -> StoreResult<SubscriptionRecord> {
    Ok(SubscriptionRecord {
        topic: name_of(&get::<String>(r, 0)?)?,
        name: name_of(&get::<String>(r, 1)?)?,
        queue: name_of(&get::<String>(r, 2)?)?,
        spec: from_json::<SubscriptionSpec>(&get::<String>(r, 3)?)?,
        version: version_of(get(r, 4)?)?,
        created_at: Timestamp(get(r, 5)?),
        updated_at: Timestamp(get(r, 6)?),
    })
}

async fn topic_shared(db: &Db<'_>, name: &EntityName) -> StoreResult<TopicRecord> {
    let row = db
        .query_opt(
            "SELECT name, policy, version, created_at, updated_at FROM topics \
             WHERE name = $1 FOR SHARE",
            &[&name.as_str()],
        )
        .await?
        .ok_or_else(|| topic_not_found(name))?;
    topic_record(&row)
}

async fn subs_of(db: &Db<'_>, topic: &EntityName) -> StoreResult<Vec<SubscriptionRecord>> {
    let rows = db
        .query(
            "SELECT topic, name, queue, spec, version, created_at, updated_at \
             FROM subscriptions WHERE topic = $1 ORDER BY name",
            &[&topic.as_str()],
        )
        .await?;
    rows.iter().map(sub_record).collect()
}

// ---- writes ---------------------------------------------------------------------------

pub(crate) async fn create_topic(
    db: &Db<'_>,
    name: &EntityName,
    policy: &TopicPolicy,
    now: Timestamp,
) -> StoreResult<TopicRecord> {
    let n = db
        .execute(
            "INSERT INTO topics (name, policy, version, created_at, updated_at) \
             VALUES ($1, $2, 1, $3, $3) ON CONFLICT (name) DO NOTHING",
            &[&name.as_str(), &to_json(policy)?, &now.0],
        )
        .await?;
    if n == 0 {
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

pub(crate) async fn delete_topic(db: &Db<'_>, name: &EntityName, force: bool) -> StoreResult<()> {
    let found = db
        .query_opt(
            "SELECT name FROM topics WHERE name = $1 FOR UPDATE",
            &[&name.as_str()],
        )
        .await?;
    if found.is_none() {
        return Err(topic_not_found(name));
    }
    let subs = subs_of(db, name).await?;
    if !subs.is_empty() && !force {
        return Err(StoreError::TopicHasSubscriptions {
            topic: name.to_string(),
            subscriptions: subs.len() as u64,
        });
    }
    for s in &subs {
        match queues::delete(db, &s.queue, true).await {
            Ok(()) | Err(StoreError::QueueNotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    db.execute(
        "DELETE FROM subscriptions WHERE topic = $1",
        &[&name.as_str()],
    )
    .await?;
    db.execute(
        "DELETE FROM topic_dedup WHERE topic = $1",
        &[&name.as_str()],
    )
    .await?;
    db.execute("DELETE FROM topics WHERE name = $1", &[&name.as_str()])
        .await?;
    Ok(())
}

pub(crate) async fn create_subscription(
    db: &Db<'_>,
    sub: &NewSubscription,
    now: Timestamp,
) -> StoreResult<SubscriptionRecord> {
    topic_shared(db, &sub.topic).await?;
    let n = db
        .execute(
            "INSERT INTO subscriptions (topic, name, queue, spec, version, created_at, \
             updated_at) VALUES ($1, $2, $3, $4, 1, $5, $5) \
             ON CONFLICT (topic, name) DO NOTHING",
            &[
                &sub.topic.as_str(),
                &sub.name.as_str(),
                &sub.queue.as_str(),
                &to_json(&sub.spec)?,
                &now.0,
            ],
        )
        .await?;
    if n == 0 {
        return Err(StoreError::SubscriptionExists {
            topic: sub.topic.to_string(),
            subscription: sub.name.to_string(),
        });
    }
    queues::create(db, &sub.queue, &sub.queue_policy, now).await?;
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

async fn sub_for_update(
    db: &Db<'_>,
    topic: &EntityName,
    name: &EntityName,
) -> StoreResult<SubscriptionRecord> {
    let row = db
        .query_opt(
            "SELECT topic, name, queue, spec, version, created_at, updated_at \
             FROM subscriptions WHERE topic = $1 AND name = $2 FOR UPDATE",
            &[&topic.as_str(), &name.as_str()],
        )
        .await?
        .ok_or_else(|| sub_not_found(topic, name))?;
    sub_record(&row)
}

pub(crate) async fn update_subscription(
    db: &Db<'_>,
    topic: &EntityName,
    name: &EntityName,
    update: &SubscriptionUpdate,
    now: Timestamp,
) -> StoreResult<SubscriptionRecord> {
    let mut rec = sub_for_update(db, topic, name).await?;
    if let Some(p) = update.paused {
        rec.spec.paused = p;
    }
    if let Some(f) = &update.filter {
        rec.spec.filter = f.clone();
    }
    rec.version += 1;
    rec.updated_at = now;
    db.execute(
        "UPDATE subscriptions SET spec = $3, version = $4, updated_at = $5 \
         WHERE topic = $1 AND name = $2",
        &[
            &topic.as_str(),
            &name.as_str(),
            &to_json(&rec.spec)?,
            &version_sql(rec.version)?,
            &now.0,
        ],
    )
    .await?;
    Ok(rec)
}

pub(crate) async fn delete_subscription(
    db: &Db<'_>,
    topic: &EntityName,
    name: &EntityName,
    force: bool,
) -> StoreResult<u64> {
    let rec = sub_for_update(db, topic, name).await?;
    let row = db
        .query_one(
            "SELECT count(*) FROM messages m JOIN queues q ON q.id = m.queue_id \
             WHERE q.name = $1",
            &[&rec.queue.as_str()],
        )
        .await?;
    let messages = count_u64(&row, 0)?;
    if messages > 0 && !force {
        return Err(StoreError::SubscriptionNotEmpty {
            topic: topic.to_string(),
            subscription: name.to_string(),
            messages,
        });
    }
    match queues::delete(db, &rec.queue, true).await {
        Ok(()) | Err(StoreError::QueueNotFound { .. }) => {}
        Err(e) => return Err(e),
    }
    db.execute(
        "DELETE FROM subscriptions WHERE topic = $1 AND name = $2",
        &[&topic.as_str(), &name.as_str()],
    )
    .await?;
    Ok(messages)
}

pub(crate) async fn publish(
    db: &Db<'_>,
    topic: &EntityName,
    events: &[PublishEvent],
    now: Timestamp,
) -> StoreResult<Vec<Published>> {
    let t = topic_shared(db, topic).await?;
    let window = i64::try_from(t.policy.duplicate_detection_window_ms).unwrap_or(i64::MAX);
    let mut out = Vec::with_capacity(events.len());
    let mut per_queue: Vec<(&EntityName, Vec<NewMessage>)> = Vec::new();
    let mut index: HashMap<&EntityName, usize> = HashMap::new();
    for ev in events {
        if window > 0 {
            // One statement decides, so concurrent publishes of one key agree: a row comes
            // back when the key is new or its window has passed, none for a duplicate.
            let fresh = db
                .query_opt(
                    "INSERT INTO topic_dedup (topic, dedup_key, expires_at) \
                     VALUES ($1, $2, $3) ON CONFLICT (topic, dedup_key) DO UPDATE \
                     SET expires_at = excluded.expires_at \
                     WHERE topic_dedup.expires_at <= $4 RETURNING expires_at",
                    &[
                        &topic.as_str(),
                        &ev.dedup_key,
                        &now.plus_millis(window).0,
                        &now.0,
                    ],
                )
                .await?;
            if fresh.is_none() {
                out.push(Published { duplicate: true });
                continue;
            }
        }
        for (queue, m) in &ev.deliveries {
            let i = *index.entry(queue).or_insert_with(|| {
                per_queue.push((queue, Vec::new()));
                per_queue.len() - 1
            });
            per_queue[i].1.push(m.clone());
        }
        out.push(Published { duplicate: false });
    }
    for (queue, msgs) in per_queue {
        messages::enqueue(db, queue, &msgs, now).await?;
    }
    Ok(out)
}

// ---- reads ----------------------------------------------------------------------------

pub(crate) async fn get_topic(db: &Db<'_>, name: &EntityName) -> StoreResult<TopicRecord> {
    let row = db
        .query_opt(
            "SELECT name, policy, version, created_at, updated_at FROM topics WHERE name = $1",
            &[&name.as_str()],
        )
        .await?
        .ok_or_else(|| topic_not_found(name))?;
    topic_record(&row)
}

pub(crate) async fn list_topics(db: &Db<'_>) -> StoreResult<Vec<TopicRecord>> {
    let rows = db
        .query(
            "SELECT name, policy, version, created_at, updated_at FROM topics ORDER BY name",
            &[],
        )
        .await?;
    rows.iter().map(topic_record).collect()
}

pub(crate) async fn get_subscription(
    db: &Db<'_>,
    topic: &EntityName,
    name: &EntityName,
) -> StoreResult<SubscriptionRecord> {
    let row = db
        .query_opt(
            "SELECT topic, name, queue, spec, version, created_at, updated_at \
             FROM subscriptions WHERE topic = $1 AND name = $2",
            &[&topic.as_str(), &name.as_str()],
        )
        .await?
        .ok_or_else(|| sub_not_found(topic, name))?;
    sub_record(&row)
}

pub(crate) async fn list_subscriptions(
    db: &Db<'_>,
    topic: &EntityName,
) -> StoreResult<Vec<SubscriptionRecord>> {
    get_topic(db, topic).await?;
    subs_of(db, topic).await
}

pub(crate) async fn list_all_subscriptions(db: &Db<'_>) -> StoreResult<Vec<SubscriptionRecord>> {
    let rows = db
        .query(
            "SELECT topic, name, queue, spec, version, created_at, updated_at \
             FROM subscriptions ORDER BY topic, name",
            &[],
        )
        .await?;
    rows.iter().map(sub_record).collect()
}
