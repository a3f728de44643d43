//! Topics and subscriptions: create, delete, update (writer), get and list (readers), and
//! publish (writer): duplicate detection by `source`+`id` and fan-out to subscription
//! queues in one transaction.

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
use rusqlite::{Connection, Row, params};

use crate::error::Db;
use crate::rows::{Cols, query_all, query_opt};
use crate::writer::Tx;
use crate::{messages, queues};

fn topic(r: &Row<'_>) -> StoreResult<TopicRecord> {
    skeleton::topic(&Cols(r))
}

fn subscription(r: &Row<'_>) -> StoreResult<SubscriptionRecord> {
    skeleton::subscription(&Cols(r))
}

fn load_topic(conn: &Connection, name: &EntityName) -> StoreResult<Option<TopicRecord>> {
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            redrive_store::columns!(topic),
            " FROM topics WHERE name = ?1"
        ))
        .db()?;
    query_opt(&mut stmt, [name.as_str()], topic)
}

fn load_sub(
    conn: &Connection,
    topic: &EntityName,
    name: &EntityName,
) -> StoreResult<Option<SubscriptionRecord>> {
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            redrive_store::columns!(subscription),
            " FROM subscriptions WHERE topic = ?1 AND name = ?2"
        ))
        .db()?;
    query_opt(&mut stmt, [topic.as_str(), name.as_str()], subscription)
}

fn subs_of(conn: &Connection, topic: &EntityName) -> StoreResult<Vec<SubscriptionRecord>> {
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            redrive_store::columns!(subscription),
            " FROM subscriptions WHERE topic = ?1 ORDER BY name"
        ))
        .db()?;
    query_all(&mut stmt, [topic.as_str()], subscription)
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
        return Err(topic_exists(name));
    }
    Ok(new_topic(name, policy, now))
}

pub(crate) fn delete_topic(tx: &mut Tx<'_>, name: &EntityName, force: bool) -> StoreResult<()> {
    if load_topic(tx.conn, name)?.is_none() {
        return Err(topic_not_found(name));
    }
    let subs = subs_of(tx.conn, name)?;
    check_topic_delete(name, &subs, force)?;
    for s in &subs {
        queue_gone_is_deleted(queues::delete(tx, &s.queue, true))?;
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
        return Err(subscription_exists(sub));
    }
    let mut queue_policy = sub.queue_policy.clone();
    mirror_subscription(&mut queue_policy, &sub.spec);
    queues::create(tx, &sub.queue, &queue_policy, now)?;
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
    Ok(new_subscription(sub, now))
}

pub(crate) fn update_subscription(
    tx: &mut Tx<'_>,
    topic: &EntityName,
    name: &EntityName,
    update: &SubscriptionUpdate,
    now: Timestamp,
) -> StoreResult<SubscriptionRecord> {
    let rec = load_sub(tx.conn, topic, name)?.ok_or_else(|| subscription_not_found(topic, name))?;
    let rec = updated_subscription(rec, update, now);
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
            to_int(rec.version, "version")?,
            now.0
        ])
        .db()?;
    mirror_onto_queue(tx, &rec, now)?;
    Ok(rec)
}

/// Writes what the subscription's spec says about its dead letters onto its queue's
/// policy, as a policy change of the queue (next version, cache forgotten at commit),
/// when that changes it. A queue that is gone has nothing to mirror onto.
fn mirror_onto_queue(tx: &mut Tx<'_>, rec: &SubscriptionRecord, now: Timestamp) -> StoreResult<()> {
    let Some(q) = tx.queue_opt(rec.queue.as_str())? else {
        return Ok(());
    };
    let mut policy = q.policy.clone();
    if mirror_subscription(&mut policy, &rec.spec) {
        queues::update(tx, &rec.queue, &policy, None, now)?;
    }
    Ok(())
}

pub(crate) fn delete_subscription(
    tx: &mut Tx<'_>,
    topic: &EntityName,
    name: &EntityName,
    force: bool,
) -> StoreResult<u64> {
    let rec = load_sub(tx.conn, topic, name)?.ok_or_else(|| subscription_not_found(topic, name))?;
    let messages = queues::count(
        tx.conn,
        "SELECT count(*) FROM messages m JOIN queues q ON q.id = m.queue_id WHERE q.name = ?1",
        [rec.queue.as_str()],
    )?;
    check_subscription_delete(&rec, messages, force)?;
    queue_gone_is_deleted(queues::delete(tx, &rec.queue, true))?;
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
    let window = topic_window(&t);
    let mut fresh = vec![true; events.len()];
    if window > 0 {
        let conn = tx.conn;
        conn.prepare_cached("DELETE FROM topic_dedup WHERE topic = ?1 AND expires_at <= ?2")
            .db()?
            .execute(params![topic.as_str(), now.0])
            .db()?;
        let mut seen = conn
            .prepare_cached(
                "SELECT 1 FROM topic_dedup \
                 WHERE topic = ?1 AND dedup_key = ?2 AND expires_at > ?3",
            )
            .db()?;
        let mut remember = conn
            .prepare_cached(
                "INSERT INTO topic_dedup (topic, dedup_key, expires_at) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (topic, dedup_key) DO UPDATE SET expires_at = excluded.expires_at",
            )
            .db()?;
        for (ev, fresh) in events.iter().zip(fresh.iter_mut()) {
            *fresh = !seen
                .exists(params![topic.as_str(), ev.dedup_key, now.0])
                .db()?;
            if *fresh {
                remember
                    .execute(params![
                        topic.as_str(),
                        ev.dedup_key,
                        now.plus_millis(window).0
                    ])
                    .db()?;
            }
        }
    }
    let (out, per_queue) = fan_out(events, &fresh);
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
        .prepare_cached(concat!(
            "SELECT ",
            redrive_store::columns!(topic),
            " FROM topics ORDER BY name"
        ))
        .db()?;
    query_all(&mut stmt, [], topic)
}

pub(crate) fn get_subscription(
    conn: &Connection,
    topic: &EntityName,
    name: &EntityName,
) -> StoreResult<SubscriptionRecord> {
    load_sub(conn, topic, name)?.ok_or_else(|| subscription_not_found(topic, name))
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
        .prepare_cached(concat!(
            "SELECT ",
            redrive_store::columns!(subscription),
            " FROM subscriptions ORDER BY topic, name"
        ))
        .db()?;
    query_all(&mut stmt, [], subscription)
}
