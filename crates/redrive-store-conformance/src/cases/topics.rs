//! Topics and subscriptions: CRUD, the subscription's own queue, atomic fan-out at
//! publish, duplicate detection by source + id within the topic's window, forced deletes.

use redrive_core::EntityName;
use redrive_events::Filter;
use redrive_store::{
    DeadLetterDestination, NewSubscription, PublishEvent, SubscriptionKind, SubscriptionSpec,
    SubscriptionUpdate, TopicPolicy,
};

use super::prelude::*;

fn pull_spec() -> SubscriptionSpec {
    SubscriptionSpec {
        kind: SubscriptionKind::Pull,
        filter: Filter::default(),
        retry_policy: Default::default(),
        delivery: Default::default(),
        dead_letter: DeadLetterDestination::OwnStore,
        paused: false,
        auto_replay: Default::default(),
        dead_letter_retention_ms: redrive_core::policy::DEFAULT_DEAD_LETTER_RETENTION_MS,
    }
}

async fn topic(t: &TestStore, n: &str, window_ms: u64) -> EntityName {
    let p = TopicPolicy {
        duplicate_detection_window_ms: window_ms,
        ..TopicPolicy::default()
    };
    t.s().create_topic(&name(n), &p, T0).await.unwrap();
    name(n)
}

async fn sub(t: &TestStore, topic: &EntityName, n: &str) -> EntityName {
    let queue = name(&format!("{topic}.{n}"));
    let rec = t
        .s()
        .create_subscription(
            &NewSubscription {
                topic: topic.clone(),
                name: name(n),
                queue: queue.clone(),
                queue_policy: QueuePolicy::default(),
                spec: pull_spec(),
            },
            T0,
        )
        .await
        .unwrap();
    assert_eq!(rec.queue, queue);
    queue
}

fn event(key: &str, to: &[&EntityName]) -> PublishEvent {
    PublishEvent {
        dedup_key: format!("src\n{key}"),
        deliveries: to
            .iter()
            .map(|q| ((*q).clone(), msg(key, key.as_bytes())))
            .collect(),
    }
}

pub async fn topic_crud_round_trips(t: &TestStore) {
    let p = TopicPolicy {
        duplicate_detection_window_ms: 1_000,
        max_event_size: 4_096,
    };
    let rec = t.s().create_topic(&name("orders"), &p, T0).await.unwrap();
    assert_eq!((rec.version, rec.created_at, &rec.policy), (1, T0, &p));
    assert_err!(
        t.s().create_topic(&name("orders"), &p, T0).await,
        StoreError::TopicExists { .. }
    );
    topic(t, "audit", 0).await;
    let got = t.s().get_topic(&name("orders")).await.unwrap();
    assert_eq!(got, rec);
    let all: Vec<String> = t
        .s()
        .list_topics()
        .await
        .unwrap()
        .iter()
        .map(|r| r.name.to_string())
        .collect();
    assert_eq!(all, ["audit", "orders"]);
    t.s().delete_topic(&name("orders"), false).await.unwrap();
    assert_err!(
        t.s().get_topic(&name("orders")).await,
        StoreError::TopicNotFound { .. }
    );
    assert_err!(
        t.s().delete_topic(&name("orders"), false).await,
        StoreError::TopicNotFound { .. }
    );
}

pub async fn subscription_crud_with_its_queue(t: &TestStore) {
    let tp = topic(t, "orders", 0).await;
    assert_err!(
        t.s()
            .create_subscription(
                &NewSubscription {
                    topic: name("missing"),
                    name: name("a"),
                    queue: name("missing.a"),
                    queue_policy: QueuePolicy::default(),
                    spec: pull_spec(),
                },
                T0
            )
            .await,
        StoreError::TopicNotFound { .. }
    );
    let q = sub(t, &tp, "audit").await;
    // The queue exists and is an ordinary queue.
    t.s().get_queue(&q).await.unwrap();
    assert_err!(
        t.s()
            .create_subscription(
                &NewSubscription {
                    topic: tp.clone(),
                    name: name("audit"),
                    queue: q.clone(),
                    queue_policy: QueuePolicy::default(),
                    spec: pull_spec(),
                },
                T0
            )
            .await,
        StoreError::SubscriptionExists { .. }
    );
    sub(t, &tp, "billing").await;
    let subs = t.s().list_subscriptions(&tp).await.unwrap();
    let names: Vec<&str> = subs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["audit", "billing"]);
    assert_eq!(subs[0].spec, pull_spec());
    assert_err!(
        t.s().list_subscriptions(&name("missing")).await,
        StoreError::TopicNotFound { .. }
    );
    assert_eq!(
        t.s()
            .delete_subscription(&tp, &name("audit"), false)
            .await
            .unwrap(),
        0
    );
    assert_err!(
        t.s().get_subscription(&tp, &name("audit")).await,
        StoreError::SubscriptionNotFound { .. }
    );
    assert_err!(t.s().get_queue(&q).await, StoreError::QueueNotFound { .. });
}

/// One read lists the subscriptions of every topic, by topic and then name; a topic
/// deleted with its subscriptions takes them out of the list.
pub async fn all_subscriptions_are_listed_by_topic_and_name(t: &TestStore) {
    assert!(t.s().list_all_subscriptions().await.unwrap().is_empty());
    let orders = topic(t, "orders", 0).await;
    let audit = topic(t, "audit", 0).await;
    topic(t, "empty", 0).await;
    sub(t, &orders, "shipping").await;
    sub(t, &orders, "billing").await;
    sub(t, &audit, "archive").await;
    let all = t.s().list_all_subscriptions().await.unwrap();
    let keys: Vec<(&str, &str)> = all
        .iter()
        .map(|s| (s.topic.as_str(), s.name.as_str()))
        .collect();
    assert_eq!(
        keys,
        [
            ("audit", "archive"),
            ("orders", "billing"),
            ("orders", "shipping")
        ]
    );
    assert_eq!(all[1].queue, name("orders.billing"));
    assert_eq!(all[1].spec, pull_spec());
    t.s().delete_topic(&orders, true).await.unwrap();
    let left: Vec<String> = t
        .s()
        .list_all_subscriptions()
        .await
        .unwrap()
        .into_iter()
        .map(|s| format!("{}/{}", s.topic, s.name))
        .collect();
    assert_eq!(left, ["audit/archive"]);
}

pub async fn pause_flag_and_filter_round_trip(t: &TestStore) {
    let tp = topic(t, "orders", 0).await;
    sub(t, &tp, "audit").await;
    let filter = Filter {
        included_event_types: vec!["order.created".into()],
        subject_begins_with: Some("/eu/".into()),
        ..Filter::default()
    };
    let rec = t
        .s()
        .update_subscription(
            &tp,
            &name("audit"),
            &SubscriptionUpdate {
                paused: Some(true),
                filter: Some(filter.clone()),
                auto_replay: Some(redrive_core::AutoReplayPatch {
                    enabled: Some(true),
                    max_replay_attempts: Some(5),
                    ..Default::default()
                }),
                dead_letter_retention_ms: None,
            },
            secs(5),
        )
        .await
        .unwrap();
    assert!(rec.spec.paused);
    assert_eq!((rec.version, rec.updated_at), (2, secs(5)));
    let got = t.s().get_subscription(&tp, &name("audit")).await.unwrap();
    assert_eq!(got, rec);
    assert_eq!(got.spec.filter, filter);
    assert_eq!(
        got.spec.auto_replay,
        redrive_core::AutoReplay {
            enabled: true,
            max_replay_attempts: 5,
            ..Default::default()
        },
        "the patch is applied to the stored policy and kept"
    );
    let resumed = t
        .s()
        .update_subscription(
            &tp,
            &name("audit"),
            &SubscriptionUpdate {
                paused: Some(false),
                ..SubscriptionUpdate::default()
            },
            secs(6),
        )
        .await
        .unwrap();
    assert!(!resumed.spec.paused);
    assert_eq!(resumed.spec.filter, filter, "a field left out stays");
    assert_eq!(resumed.spec.auto_replay, got.spec.auto_replay);
    assert_err!(
        t.s()
            .update_subscription(&tp, &name("nope"), &SubscriptionUpdate::default(), T0)
            .await,
        StoreError::SubscriptionNotFound { .. }
    );
}

pub async fn publish_fans_out_atomically(t: &TestStore) {
    let tp = topic(t, "orders", 60_000).await;
    let a = sub(t, &tp, "a").await;
    let b = sub(t, &tp, "b").await;
    let r = t
        .s()
        .publish(&tp, vec![event("1", &[&a, &b]), event("2", &[&b])], T0)
        .await
        .unwrap();
    assert_eq!(r.iter().filter(|p| p.duplicate).count(), 0);
    assert_eq!(t.sequences(&a).await, [1]);
    assert_eq!(t.sequences(&b).await, [1, 2]);
    let on_b = t.s().peek(&b, 1, 10, T0).await.unwrap();
    assert_eq!(on_b[1].message_id, "2");

    // A delivery to a queue that is gone fails the whole batch: nothing is stored, and
    // the keys of the refused batch are not remembered.
    let gone = name("orders.gone");
    assert_err!(
        t.s()
            .publish(&tp, vec![event("3", &[&a]), event("4", &[&gone])], secs(1))
            .await,
        StoreError::QueueNotFound { .. }
    );
    assert_eq!(t.sequences(&a).await, [1]);
    let again = t
        .s()
        .publish(&tp, vec![event("3", &[&a])], secs(2))
        .await
        .unwrap();
    assert!(!again[0].duplicate);
    // Sequence numbers are unique and increasing, not contiguous: the refused batch may
    // have drawn a number it never stored.
    let seqs = t.sequences(&a).await;
    assert_eq!(seqs.len(), 2);
    assert!(seqs[0] == 1 && seqs[1] > seqs[0], "{seqs:?}");
    assert_err!(
        t.s()
            .publish(&name("missing"), vec![event("x", &[])], T0)
            .await,
        StoreError::TopicNotFound { .. }
    );
}

pub async fn duplicate_event_inside_window_is_not_fanned_out_again(t: &TestStore) {
    let tp = topic(t, "orders", 60_000).await;
    let a = sub(t, &tp, "a").await;
    t.s()
        .publish(&tp, vec![event("1", &[&a])], T0)
        .await
        .unwrap();
    let dup = t
        .s()
        .publish(&tp, vec![event("1", &[&a])], at(59_999))
        .await
        .unwrap();
    assert!(dup[0].duplicate);
    assert_eq!(t.sequences(&a).await, [1]);
    // Twice in one batch: once.
    let r = t
        .s()
        .publish(&tp, vec![event("2", &[&a]), event("2", &[&a])], secs(1))
        .await
        .unwrap();
    assert_eq!(
        r.iter().map(|p| p.duplicate).collect::<Vec<_>>(),
        [false, true]
    );
    assert_eq!(t.sequences(&a).await, [1, 2]);
    // Same id from another source is another event.
    let other = PublishEvent {
        dedup_key: "other\n1".into(),
        deliveries: vec![(a.clone(), msg("1", b"1"))],
    };
    assert!(!t.s().publish(&tp, vec![other], secs(2)).await.unwrap()[0].duplicate);
    // After the window the same key is a new event.
    let later = t
        .s()
        .publish(&tp, vec![event("1", &[&a])], secs(60))
        .await
        .unwrap();
    assert!(!later[0].duplicate);
    assert_eq!(t.sequences(&a).await, [1, 2, 3, 4]);
}

pub async fn without_topic_window_duplicates_fan_out(t: &TestStore) {
    let tp = topic(t, "orders", 0).await;
    let a = sub(t, &tp, "a").await;
    let r = t
        .s()
        .publish(&tp, vec![event("1", &[&a]), event("1", &[&a])], T0)
        .await
        .unwrap();
    assert!(r.iter().all(|p| !p.duplicate));
    assert_eq!(t.sequences(&a).await, [1, 2]);
}

pub async fn delete_topic_and_subscription_need_force(t: &TestStore) {
    let tp = topic(t, "orders", 60_000).await;
    let a = sub(t, &tp, "a").await;
    let b = sub(t, &tp, "b").await;
    t.s()
        .publish(&tp, vec![event("1", &[&a, &b])], T0)
        .await
        .unwrap();
    assert_err!(
        t.s().delete_topic(&tp, false).await,
        StoreError::TopicHasSubscriptions {
            subscriptions: 2,
            ..
        }
    );
    assert_err!(
        t.s().delete_subscription(&tp, &name("a"), false).await,
        StoreError::SubscriptionNotEmpty { messages: 1, .. }
    );
    t.s().get_queue(&a).await.unwrap();
    assert_eq!(
        t.s()
            .delete_subscription(&tp, &name("a"), true)
            .await
            .unwrap(),
        1,
        "the discarded events are reported"
    );
    assert_err!(t.s().get_queue(&a).await, StoreError::QueueNotFound { .. });
    t.s().delete_topic(&tp, true).await.unwrap();
    assert_err!(t.s().get_queue(&b).await, StoreError::QueueNotFound { .. });
    assert_err!(t.s().get_topic(&tp).await, StoreError::TopicNotFound { .. });
    // The name is free again, with no subscriptions and no remembered keys.
    let tp = topic(t, "orders", 60_000).await;
    assert!(t.s().list_subscriptions(&tp).await.unwrap().is_empty());
    let a = sub(t, &tp, "a").await;
    let r = t
        .s()
        .publish(&tp, vec![event("1", &[&a])], secs(1))
        .await
        .unwrap();
    assert!(!r[0].duplicate);
}
