//! Queues, topics, subscriptions and session locks: their rows, and the rules of their
//! creation, update and deletion that do not depend on how a backend stores them.

use std::collections::HashMap;

use redrive_core::{EntityName, QueuePolicy, Timestamp};

use super::columns::{Columns, after};
use crate::{
    NewMessage, NewSubscription, PublishEvent, Published, QueueRecord, SessionLock, StoreError,
    StoreResult, SubscriptionRecord, SubscriptionSpec, SubscriptionUpdate, TopicPolicy,
    TopicRecord,
};

// ---- queues -------------------------------------------------------------------------------

/// A queue as an operation sees it: its record and the integer key of its rows in the
/// hot tables (never reused).
#[derive(Debug, Clone, PartialEq)]
pub struct QueueRow {
    /// The queue's key in `messages`, `dedup`, `sessions`.
    pub id: i64,
    /// Name.
    pub name: EntityName,
    /// Policy in force.
    pub policy: QueuePolicy,
    /// Policy version.
    pub version: u64,
    /// When it was created.
    pub created_at: Timestamp,
    /// When its policy last changed.
    pub updated_at: Timestamp,
}

impl QueueRow {
    /// Reads [`columns!(queue)`](crate::columns).
    pub fn decode(c: &impl Columns) -> StoreResult<QueueRow> {
        Ok(QueueRow {
            name: c.name(0, "queues.name")?,
            policy: c.json(1, "queues.policy")?,
            version: c.unsigned(2, "queues.policy_version")?,
            created_at: c.time(3)?,
            updated_at: c.time(4)?,
            id: c.int(5)?,
        })
    }

    /// A queue just created under key `id`, at policy version 1.
    pub fn created(id: i64, name: &EntityName, policy: &QueuePolicy, now: Timestamp) -> Self {
        QueueRow {
            id,
            name: name.clone(),
            policy: policy.clone(),
            version: 1,
            created_at: now,
            updated_at: now,
        }
    }

    /// This queue with `policy` at the next version, or `VersionConflict` when the
    /// caller expected another version than the current one.
    pub fn updated(
        &self,
        policy: &QueuePolicy,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> StoreResult<QueueRow> {
        if let Some(expected) = expected_version.filter(|e| *e != self.version) {
            return Err(StoreError::VersionConflict {
                expected,
                actual: self.version,
            });
        }
        Ok(QueueRow {
            policy: policy.clone(),
            version: self.version + 1,
            updated_at: now,
            ..self.clone()
        })
    }

    /// The record the trait shows.
    pub fn record(&self) -> QueueRecord {
        QueueRecord {
            name: self.name.clone(),
            policy: self.policy.clone(),
            policy_version: self.version,
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

/// `QueueNotFound`.
pub fn queue_not_found(name: &EntityName) -> StoreError {
    StoreError::QueueNotFound {
        queue: name.to_string(),
    }
}

/// `QueueExists`.
pub fn queue_exists(name: &EntityName) -> StoreError {
    StoreError::QueueExists {
        queue: name.to_string(),
    }
}

/// Whether a queue holding `messages` and `dead_letters` (live) may be deleted: always
/// with `force`, otherwise only when empty (`QueueNotEmpty`).
pub fn check_queue_delete(
    name: &EntityName,
    messages: u64,
    dead_letters: u64,
    force: bool,
) -> StoreResult<()> {
    if force || (messages == 0 && dead_letters == 0) {
        return Ok(());
    }
    Err(StoreError::QueueNotEmpty {
        queue: name.to_string(),
        messages,
        dead_letters,
    })
}

// ---- sessions -----------------------------------------------------------------------------

/// `SessionNotAllowed` unless the queue uses sessions.
pub fn check_session_queue(q: &QueueRow) -> StoreResult<()> {
    if q.policy.requires_session {
        Ok(())
    } else {
        Err(StoreError::SessionNotAllowed {
            queue: q.name.to_string(),
        })
    }
}

/// A new lock of `session_id` for `lock_ms` from `now`, with a fresh token.
pub fn session_lock(session_id: &str, lock_ms: u64, now: Timestamp) -> SessionLock {
    SessionLock {
        session_id: session_id.to_owned(),
        lock_token: redrive_core::id::new_lock_token(),
        locked_until: after(now, lock_ms),
    }
}

/// `SessionLockLost` unless the statement that checks, renews or releases a session lock
/// under its token found it held.
pub fn session_held(held: bool) -> StoreResult<()> {
    if held {
        Ok(())
    } else {
        Err(StoreError::SessionLockLost)
    }
}

/// The lock of `session_id` under `lock_token`, renewed until `locked_until` when the
/// renewing statement found it `held` (else `SessionLockLost`).
pub fn renewed_session(
    held: bool,
    session_id: &str,
    lock_token: &str,
    locked_until: Timestamp,
) -> StoreResult<SessionLock> {
    session_held(held)?;
    Ok(SessionLock {
        session_id: session_id.to_owned(),
        lock_token: lock_token.to_owned(),
        locked_until,
    })
}

/// `SessionLocked`: a live lock of another receiver holds the session.
pub fn session_locked(q: &EntityName, session_id: &str) -> StoreError {
    StoreError::SessionLocked {
        queue: q.to_string(),
        session_id: session_id.to_owned(),
    }
}

// ---- topics and subscriptions -------------------------------------------------------------

/// Reads [`columns!(topic)`](crate::columns).
pub fn topic(c: &impl Columns) -> StoreResult<TopicRecord> {
    Ok(TopicRecord {
        name: c.name(0, "topics.name")?,
        policy: c.json(1, "topics.policy")?,
        version: c.unsigned(2, "topics.version")?,
        created_at: c.time(3)?,
        updated_at: c.time(4)?,
    })
}

/// Reads [`columns!(subscription)`](crate::columns).
pub fn subscription(c: &impl Columns) -> StoreResult<SubscriptionRecord> {
    Ok(SubscriptionRecord {
        topic: c.name(0, "subscriptions.topic")?,
        name: c.name(1, "subscriptions.name")?,
        queue: c.name(2, "subscriptions.queue")?,
        spec: c.json(3, "subscriptions.spec")?,
        version: c.unsigned(4, "subscriptions.version")?,
        created_at: c.time(5)?,
        updated_at: c.time(6)?,
    })
}

/// A topic just created, at version 1.
pub fn new_topic(name: &EntityName, policy: &TopicPolicy, now: Timestamp) -> TopicRecord {
    TopicRecord {
        name: name.clone(),
        policy: policy.clone(),
        version: 1,
        created_at: now,
        updated_at: now,
    }
}

/// A subscription just created, at version 1.
pub fn new_subscription(sub: &NewSubscription, now: Timestamp) -> SubscriptionRecord {
    SubscriptionRecord {
        topic: sub.topic.clone(),
        name: sub.name.clone(),
        queue: sub.queue.clone(),
        spec: sub.spec.clone(),
        version: 1,
        created_at: now,
        updated_at: now,
    }
}

/// `rec` with `update` applied at the next version.
pub fn updated_subscription(
    mut rec: SubscriptionRecord,
    update: &SubscriptionUpdate,
    now: Timestamp,
) -> SubscriptionRecord {
    if let Some(p) = update.paused {
        rec.spec.paused = p;
    }
    if let Some(f) = &update.filter {
        rec.spec.filter = f.clone();
    }
    if let Some(p) = &update.auto_replay {
        rec.spec.auto_replay = rec.spec.auto_replay.patched(p);
    }
    if let Some(ms) = update.dead_letter_retention_ms {
        rec.spec.dead_letter_retention_ms = ms;
    }
    rec.version += 1;
    rec.updated_at = now;
    rec
}

/// Mirrors what a subscription's spec says about its dead letters onto its queue's
/// policy: automatic replay and retention. The store calls it on the queue policy it
/// stores when a subscription is created, and again (writing the queue's policy in the
/// same transaction) whenever the subscription changes; the dead-letter path then reads
/// the queue's policy alone. Says whether anything changed.
pub fn mirror_subscription(policy: &mut QueuePolicy, spec: &SubscriptionSpec) -> bool {
    let before = (policy.auto_replay.clone(), policy.dead_letter_retention_ms);
    policy.auto_replay = spec.auto_replay.clone();
    policy.dead_letter_retention_ms = spec.dead_letter_retention_ms;
    before != (policy.auto_replay.clone(), policy.dead_letter_retention_ms)
}

/// `TopicNotFound`.
pub fn topic_not_found(name: &EntityName) -> StoreError {
    StoreError::TopicNotFound {
        topic: name.to_string(),
    }
}

/// `TopicExists`.
pub fn topic_exists(name: &EntityName) -> StoreError {
    StoreError::TopicExists {
        topic: name.to_string(),
    }
}

/// `SubscriptionNotFound`.
pub fn subscription_not_found(topic: &EntityName, name: &EntityName) -> StoreError {
    StoreError::SubscriptionNotFound {
        topic: topic.to_string(),
        subscription: name.to_string(),
    }
}

/// `SubscriptionExists`.
pub fn subscription_exists(sub: &NewSubscription) -> StoreError {
    StoreError::SubscriptionExists {
        topic: sub.topic.to_string(),
        subscription: sub.name.to_string(),
    }
}

/// Whether a topic with `subscriptions` may be deleted: always with `force` (they go
/// with it), otherwise only without any (`TopicHasSubscriptions`).
pub fn check_topic_delete(
    topic: &EntityName,
    subscriptions: &[SubscriptionRecord],
    force: bool,
) -> StoreResult<()> {
    if force || subscriptions.is_empty() {
        return Ok(());
    }
    Err(StoreError::TopicHasSubscriptions {
        topic: topic.to_string(),
        subscriptions: subscriptions.len() as u64,
    })
}

/// Whether a subscription whose queue holds `messages` may be deleted: always with
/// `force` (they are discarded, and reported), otherwise only when it holds none
/// (`SubscriptionNotEmpty`).
pub fn check_subscription_delete(
    rec: &SubscriptionRecord,
    messages: u64,
    force: bool,
) -> StoreResult<()> {
    if force || messages == 0 {
        return Ok(());
    }
    Err(StoreError::SubscriptionNotEmpty {
        topic: rec.topic.to_string(),
        subscription: rec.name.to_string(),
        messages,
    })
}

/// A subscription's queue gone already is no reason to keep the subscription: deleting
/// it finds nothing to delete.
pub fn queue_gone_is_deleted(r: StoreResult<()>) -> StoreResult<()> {
    match r {
        Err(StoreError::QueueNotFound { .. }) => Ok(()),
        other => other,
    }
}

/// The topic's duplicate-detection window in milliseconds; 0 when detection is off.
pub fn topic_window(t: &TopicRecord) -> i64 {
    i64::try_from(t.policy.duplicate_detection_window_ms).unwrap_or(i64::MAX)
}

/// A publish's answers and the messages it enqueues, per queue in order of first
/// appearance, each queue's in event order (so that sequence numbers follow publishing
/// order). `fresh[i]` says whether event `i`'s key was new inside the window (always
/// true without detection); a duplicate fans out nothing.
pub fn fan_out(
    events: Vec<PublishEvent>,
    fresh: &[bool],
) -> (Vec<Published>, Vec<(EntityName, Vec<NewMessage>)>) {
    let mut out = Vec::with_capacity(events.len());
    let mut per_queue: Vec<(EntityName, Vec<NewMessage>)> = Vec::new();
    let mut index: HashMap<EntityName, usize> = HashMap::new();
    for (ev, fresh) in events.into_iter().zip(fresh.iter().copied()) {
        out.push(Published { duplicate: !fresh });
        if !fresh {
            continue;
        }
        for (queue, m) in ev.deliveries {
            let i = *index.entry(queue.clone()).or_insert_with(|| {
                per_queue.push((queue, Vec::new()));
                per_queue.len() - 1
            });
            per_queue[i].1.push(m);
        }
    }
    (out, per_queue)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skeleton::testing::{message as m, name as n};

    #[test]
    fn a_publish_fans_out_per_queue_in_event_order_and_skips_duplicates() {
        let ev = |key: &str, to: &[(&str, &str)]| PublishEvent {
            dedup_key: key.to_owned(),
            deliveries: to.iter().map(|(q, id)| (n(q), m(id))).collect(),
        };
        let events = vec![
            ev("1", &[("b", "1b"), ("a", "1a")]),
            ev("2", &[("a", "2a")]),
            ev("3", &[("b", "3b")]),
        ];
        let (answers, queues) = fan_out(events, &[true, false, true]);
        let dup: Vec<bool> = answers.iter().map(|p| p.duplicate).collect();
        assert_eq!(dup, [false, true, false]);
        let got: Vec<(String, Vec<String>)> = queues
            .into_iter()
            .map(|(q, ms)| {
                (
                    q.to_string(),
                    ms.into_iter().map(|m| m.message_id).collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("b".to_owned(), vec!["1b".to_owned(), "3b".to_owned()]),
                ("a".to_owned(), vec!["1a".to_owned()]),
            ]
        );
    }

    #[test]
    fn a_stale_expected_version_is_a_conflict() {
        let q = QueueRow::created(3, &n("q"), &QueuePolicy::default(), Timestamp(1));
        let next = q
            .updated(&QueuePolicy::default(), Some(1), Timestamp(2))
            .expect("current version");
        assert_eq!(
            (next.id, next.version, next.updated_at),
            (3, 2, Timestamp(2))
        );
        assert!(matches!(
            next.updated(&QueuePolicy::default(), Some(1), Timestamp(3)),
            Err(StoreError::VersionConflict {
                expected: 1,
                actual: 2
            })
        ));
    }
}
