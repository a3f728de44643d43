//! Topics and subscriptions: create, delete, update, get and list, and publish: duplicate
//! detection by `source`+`id` and fan-out to subscription queues in one transaction.
//!
//! A topic's row is locked `FOR SHARE` by the operations that need it to exist (publish,
//! create subscription) and `FOR UPDATE` by its delete, so a delete waits for them and
//! they never write under a topic that is going away.

use redrive_core::{EntityName, Timestamp};
use redrive_store::skeleton::columns::{to_int, to_json};
use redrive_store::skeleton::entities::{
    self as skeleton, check_subscription_delete, check_topic_delete, fan_out, mirror_subscription,
    new_subscription, new_topic, queue_gone_is_deleted, subscription_exists,
    subscription_not_found, topic_exists, topic_not_found, topic_window, updated_subscription,
};
use redrive_store::{
    NewSubscription, PublishEvent, Published, StoreResult, SubscriptionRecord, SubscriptionUpdate,
    TopicPolicy, TopicRecord,
};
use tokio_postgres::Row;

use crate::pool::Db;
use crate::rows::{Cols, count_u64, decode};
use crate::{messages, queues};

fn topic_record(r: &Row) -> StoreResult<TopicRecord> {
    skeleton::topic(&Cols(r))
}

fn sub_record(r: &Row) -> StoreResult<SubscriptionRecord> {
    skeleton::subscription(&Cols(r))
}

async fn topic_shared(db: &Db<'_>, name: &EntityName) -> StoreResult<TopicRecord> {
    let row = db
        .query_opt(
            concat!(
                "SELECT ",
                redrive_store::columns!(topic),
                " FROM topics WHERE name = $1 FOR SHARE"
            ),
            &[&name.as_str()],
        )
        .await?
        .ok_or_else(|| topic_not_found(name))?;
    topic_record(&row)
}

async fn subs_of(db: &Db<'_>, topic: &EntityName) -> StoreResult<Vec<SubscriptionRecord>> {
    let rows = db
        .query(
            concat!(
                "SELECT ",
                redrive_store::columns!(subscription),
                " FROM subscriptions WHERE topic = $1 ORDER BY name"
            ),
            &[&topic.as_str()],
        )
        .await?;
    decode(&rows, sub_record)
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
        return Err(topic_exists(name));
    }
    Ok(new_topic(name, policy, now))
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
    check_topic_delete(name, &subs, force)?;
    for s in &subs {
        queue_gone_is_deleted(queues::delete(db, &s.queue, true).await)?;
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
        return Err(subscription_exists(sub));
    }
    // The queue's policy carries what the subscription says about its dead letters.
    let mut policy = sub.queue_policy.clone();
    mirror_subscription(&mut policy, &sub.spec);
    queues::create(db, &sub.queue, &policy, now).await?;
    Ok(new_subscription(sub, now))
}

async fn sub_for_update(
    db: &Db<'_>,
    topic: &EntityName,
    name: &EntityName,
) -> StoreResult<SubscriptionRecord> {
    let row = db
        .query_opt(
            concat!(
                "SELECT ",
                redrive_store::columns!(subscription),
                " FROM subscriptions WHERE topic = $1 AND name = $2 FOR UPDATE"
            ),
            &[&topic.as_str(), &name.as_str()],
        )
        .await?
        .ok_or_else(|| subscription_not_found(topic, name))?;
    sub_record(&row)
}

pub(crate) async fn update_subscription(
    db: &Db<'_>,
    topic: &EntityName,
    name: &EntityName,
    update: &SubscriptionUpdate,
    now: Timestamp,
) -> StoreResult<SubscriptionRecord> {
    let rec = updated_subscription(sub_for_update(db, topic, name).await?, update, now);
    db.execute(
        "UPDATE subscriptions SET spec = $3, version = $4, updated_at = $5 \
         WHERE topic = $1 AND name = $2",
        &[
            &topic.as_str(),
            &name.as_str(),
            &to_json(&rec.spec)?,
            &to_int(rec.version, "version")?,
            &now.0,
        ],
    )
    .await?;
    // Same transaction: the dead-letter path reads the queue's policy alone.
    queues::mirror(db, &rec.queue, &rec.spec, now).await?;
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
    check_subscription_delete(&rec, messages, force)?;
    queue_gone_is_deleted(queues::delete(db, &rec.queue, true).await)?;
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
    let window = topic_window(&t);
    let mut fresh = vec![true; events.len()];
    if window > 0 {
        for (ev, fresh) in events.iter().zip(fresh.iter_mut()) {
            // One statement decides, so concurrent publishes of one key agree: a row comes
            // back when the key is new or its window has passed, none for a duplicate.
            *fresh = db
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
                .await?
                .is_some();
        }
    }
    // The operation may run again (a conflict), so the events stay the caller's.
    let (out, per_queue) = fan_out(events.to_vec(), &fresh);
    for (queue, msgs) in per_queue {
        messages::enqueue(db, &queue, &msgs, now).await?;
    }
    Ok(out)
}

// ---- reads ----------------------------------------------------------------------------

pub(crate) async fn get_topic(db: &Db<'_>, name: &EntityName) -> StoreResult<TopicRecord> {
    let row = db
        .query_opt(
            concat!(
                "SELECT ",
                redrive_store::columns!(topic),
                " FROM topics WHERE name = $1"
            ),
            &[&name.as_str()],
        )
        .await?
        .ok_or_else(|| topic_not_found(name))?;
    topic_record(&row)
}

pub(crate) async fn list_topics(db: &Db<'_>) -> StoreResult<Vec<TopicRecord>> {
    let rows = db
        .query(
            concat!(
                "SELECT ",
                redrive_store::columns!(topic),
                " FROM topics ORDER BY name"
            ),
            &[],
        )
        .await?;
    decode(&rows, topic_record)
}

pub(crate) async fn get_subscription(
    db: &Db<'_>,
    topic: &EntityName,
    name: &EntityName,
) -> StoreResult<SubscriptionRecord> {
    let row = db
        .query_opt(
            concat!(
                "SELECT ",
                redrive_store::columns!(subscription),
                " FROM subscriptions WHERE topic = $1 AND name = $2"
            ),
            &[&topic.as_str(), &name.as_str()],
        )
        .await?
        .ok_or_else(|| subscription_not_found(topic, name))?;
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
            concat!(
                "SELECT ",
                redrive_store::columns!(subscription),
                " FROM subscriptions ORDER BY topic, name"
            ),
            &[],
        )
        .await?;
    decode(&rows, sub_record)
}
