//! Queues: create, update with versions, delete, counts, purge.

use super::prelude::*;

pub async fn create_queue_starts_at_version_one_and_is_listed(t: &TestStore) {
    let p = policy(|p| p.max_delivery_count = 3);
    let rec = t.s().create_queue(&name("orders"), &p, T0).await.unwrap();
    assert_eq!(rec.name, name("orders"));
    assert_eq!(rec.policy, p);
    assert_eq!(rec.policy_version, 1);
    assert_eq!((rec.created_at, rec.updated_at), (T0, T0));
    assert_eq!(t.s().get_queue(&name("orders")).await.unwrap(), rec);

    t.queue("alpha", QueuePolicy::default()).await;
    let names: Vec<String> = t
        .s()
        .list_queues()
        .await
        .unwrap()
        .iter()
        .map(|q| q.name.to_string())
        .collect();
    assert_eq!(names, ["alpha", "orders"], "listed by name");
}

pub async fn create_existing_queue_is_queue_exists(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let other = policy(|p| p.max_delivery_count = 2);
    assert_err!(
        t.s().create_queue(&q, &other, secs(1)).await,
        StoreError::QueueExists { .. }
    );
    let rec = t.s().get_queue(&q).await.unwrap();
    assert_eq!(rec.policy, QueuePolicy::default(), "the first policy stays");
    assert_eq!(rec.created_at, T0);
}

pub async fn unknown_queue_is_queue_not_found(t: &TestStore) {
    let q = name("nowhere");
    let s = t.s();
    assert_err!(s.get_queue(&q).await, StoreError::QueueNotFound { .. });
    assert_err!(
        s.update_queue(&q, &QueuePolicy::default(), None, T0).await,
        StoreError::QueueNotFound { .. }
    );
    assert_err!(
        s.delete_queue(&q, true).await,
        StoreError::QueueNotFound { .. }
    );
    assert_err!(
        s.queue_counts(&q, T0).await,
        StoreError::QueueNotFound { .. }
    );
    assert_err!(
        s.enqueue(&q, vec![msg("a", b"a")], T0).await,
        StoreError::QueueNotFound { .. }
    );
    assert_err!(
        s.receive(params(&q, 1, 30_000, T0, None)).await,
        StoreError::QueueNotFound { .. }
    );
    assert_err!(
        s.peek(&q, 1, 10, T0).await,
        StoreError::QueueNotFound { .. }
    );
    assert_err!(
        s.settle(&q, vec![], T0).await,
        StoreError::QueueNotFound { .. }
    );
    assert_err!(s.next_wake(&q, T0).await, StoreError::QueueNotFound { .. });
    assert_err!(
        s.list_dead_letters(&DeadLetterQuery {
            queue: q.clone(),
            area: Area::Live,
            reason: None,
            from: None,
            to: None,
            after: None,
            limit: 10,
            filter: Default::default(),
        })
        .await,
        StoreError::QueueNotFound { .. }
    );
    assert!(s.list_queues().await.unwrap().is_empty());
}

pub async fn update_with_stale_expected_version_is_version_conflict(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let p2 = policy(|p| p.max_delivery_count = 4);
    let rec = t.s().update_queue(&q, &p2, Some(1), secs(1)).await.unwrap();
    assert_eq!(rec.policy_version, 2);
    let p3 = policy(|p| p.max_delivery_count = 9);
    match t.s().update_queue(&q, &p3, Some(1), secs(2)).await {
        Err(StoreError::VersionConflict { expected, actual }) => {
            assert_eq!((expected, actual), (1, 2));
        }
        other => panic!("expected VersionConflict, got {other:?}"),
    }
    let rec = t.s().get_queue(&q).await.unwrap();
    assert_eq!(rec.policy, p2, "a refused update changes nothing");
    assert_eq!(rec.policy_version, 2);
    assert_eq!(rec.updated_at, secs(1));
}

pub async fn policy_update_bumps_version_and_dead_letters_record_it(t: &TestStore) {
    let q = t
        .queue("orders", policy(|p| p.max_delivery_count = 5))
        .await;
    let p2 = policy(|p| p.max_delivery_count = 6);
    let rec = t
        .s()
        .update_queue(&q, &p2, Some(1), secs(10))
        .await
        .unwrap();
    assert_eq!(rec.policy_version, 2);
    assert_eq!(rec.policy, p2);
    assert_eq!((rec.created_at, rec.updated_at), (T0, secs(10)));
    assert_eq!(t.s().get_queue(&q).await.unwrap(), rec);

    // An application dead-letter under version 2.
    let id = t.dead_letter_one(&q, "m1", "Bad", secs(11)).await;
    let r = t.s().get_dead_letter(&q, &id).await.unwrap();
    assert_eq!(r.policy_version, Some(2));

    // A broker dead-letter (max delivery count) under version 3.
    let p3 = policy(|p| p.max_delivery_count = 1);
    let rec = t.s().update_queue(&q, &p3, None, secs(12)).await.unwrap();
    assert_eq!(rec.policy_version, 3);
    t.send1(&q, "m2", secs(13)).await;
    let d = t.take(&q, 1, 30_000, secs(13)).await;
    let settled = t
        .settle1(
            &q,
            &d[0].lock_token,
            SettleAction::Abandon {
                delay_ms: None,
                last_attempt: None,
            },
            secs(14),
        )
        .await
        .unwrap();
    let r = t
        .s()
        .get_dead_letter(&q, settled.dead_letter_id.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(r.reason, "MaxDeliveryCountExceeded");
    assert_eq!(r.policy_version, Some(3));
    assert_eq!(
        r.route_rule,
        Some(redrive_core::case::RouteRule::DeliveryThreshold)
    );
    // The cases keep the version that routed each, whatever the queue's is now.
    t.s().update_queue(&q, &p2, None, secs(15)).await.unwrap();
    for (record, version) in [(&id, 2), (&r.id, 3)] {
        let c = t
            .s()
            .get_case(&redrive_store::skeleton::cases::case_id(record))
            .await
            .unwrap();
        assert_eq!(c.policy_version, Some(version), "{record}");
    }
}

pub async fn delete_non_empty_queue_needs_force(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    t.send1(&q, "m1", T0).await;
    match t.s().delete_queue(&q, false).await {
        Err(StoreError::QueueNotEmpty {
            messages,
            dead_letters,
            ..
        }) => assert_eq!((messages, dead_letters), (1, 0)),
        other => panic!("expected QueueNotEmpty, got {other:?}"),
    }
    // Only a dead letter left: still not empty.
    let d = t.take(&q, 1, 30_000, T0).await;
    t.settle1(
        &q,
        &d[0].lock_token,
        SettleAction::DeadLetter {
            reason: "Bad".into(),
            description: None,
            by_broker: false,
            classifier: redrive_core::Classifier::default(),
        },
        T0,
    )
    .await
    .unwrap();
    match t.s().delete_queue(&q, false).await {
        Err(StoreError::QueueNotEmpty {
            messages,
            dead_letters,
            ..
        }) => assert_eq!((messages, dead_letters), (0, 1)),
        other => panic!("expected QueueNotEmpty, got {other:?}"),
    }
    t.send1(&q, "m2", T0).await;
    t.s().delete_queue(&q, true).await.unwrap();
    assert_err!(t.s().get_queue(&q).await, StoreError::QueueNotFound { .. });

    // A new queue of the same name starts empty: nothing of the old one leaks in.
    t.queue("orders", QueuePolicy::default()).await;
    assert_eq!(t.counts(&q, T0).await, QueueCounts::default());
    assert!(t.sequences(&q).await.is_empty());
    let all = t
        .s()
        .list_dead_letters(&DeadLetterQuery {
            queue: q.clone(),
            area: Area::Live,
            reason: None,
            from: None,
            to: None,
            after: None,
            limit: 100,
            filter: Default::default(),
        })
        .await
        .unwrap();
    assert!(all.is_empty());
    assert!(t.take(&q, 10, 30_000, secs(1)).await.is_empty());
}

pub async fn delete_empty_queue_without_force(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let d = {
        t.send1(&q, "m1", T0).await;
        t.take(&q, 1, 30_000, T0).await
    };
    t.settle1(&q, &d[0].lock_token, SettleAction::Complete, T0)
        .await
        .unwrap();
    t.s().delete_queue(&q, false).await.unwrap();
    assert!(t.s().list_queues().await.unwrap().is_empty());
}

pub async fn counts_add_up(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    assert_eq!(t.counts(&q, T0).await, QueueCounts::default());
    t.send(
        &q,
        vec![
            msg("a", b"a"),
            msg("b", b"b"),
            msg("c", b"c"),
            msg("d", b"d"),
        ],
        T0,
    )
    .await;
    t.send(
        &q,
        vec![NewMessage {
            scheduled_at: Some(secs(60)),
            ..msg("e", b"e")
        }],
        secs(5),
    )
    .await;
    let d = t.take(&q, 3, 300_000, secs(5)).await;
    assert_eq!(seqs(&d), [1, 2, 3]);
    t.settle1(&q, &d[1].lock_token, SettleAction::Defer, secs(5))
        .await
        .unwrap();
    t.settle1(
        &q,
        &d[2].lock_token,
        SettleAction::DeadLetter {
            reason: "Bad".into(),
            description: None,
            by_broker: false,
            classifier: redrive_core::Classifier::default(),
        },
        secs(5),
    )
    .await
    .unwrap();
    let c = t.counts(&q, secs(6)).await;
    assert_eq!(
        c,
        QueueCounts {
            active: 1,
            scheduled: 1,
            locked: 1,
            deferred: 1,
            dead_lettered: 1,
            oldest_enqueued_at: Some(T0),
        }
    );
    assert_eq!(c.messages(), 4);
    assert_eq!(c.messages(), t.sequences(&q).await.len() as u64);
    // The scheduled one becomes active; nothing else moves.
    let c = t.counts(&q, secs(60)).await;
    assert_eq!((c.active, c.scheduled, c.locked, c.deferred), (2, 0, 1, 1));
    // Removing the oldest moves the oldest enqueue time.
    t.settle1(&q, &d[0].lock_token, SettleAction::Complete, secs(61))
        .await
        .unwrap();
    let next = t.take(&q, 1, 300_000, secs(61)).await;
    assert_eq!(
        seqs(&next),
        [4],
        "visible since T0, before the scheduled one"
    );
    t.settle1(&q, &next[0].lock_token, SettleAction::Complete, secs(61))
        .await
        .unwrap();
    let deferred = t
        .s()
        .receive_deferred(&q, &[2], 300_000, secs(61))
        .await
        .unwrap()
        .deliveries;
    t.settle1(
        &q,
        &deferred[0].lock_token,
        SettleAction::Complete,
        secs(61),
    )
    .await
    .unwrap();
    let c = t.counts(&q, secs(61)).await;
    assert_eq!(c.oldest_enqueued_at, Some(secs(5)));
    assert_eq!((c.active, c.messages()), (1, 1));
}

pub async fn ping_answers_and_names_its_backend(t: &TestStore) {
    t.store.ping().await.unwrap();
    let name = t.store.backend_name();
    assert!(
        !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase()),
        "{name:?}"
    );
    // A ping changes nothing.
    assert!(t.store.list_queues().await.unwrap().is_empty());
}

pub async fn purge_removes_every_message_in_flight_too_and_keeps_dead_letters(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let other = t.queue("other", QueuePolicy::default()).await;
    t.send1(&other, "kept", T0).await;
    let dead = t.dead_letter_one(&q, "dead", "Bad", T0).await;
    // Five messages: locked, deferred, visible (with contents larger than any row keeps
    // inline), scheduled, and one more locked to be settled after the purge.
    t.send(&q, vec![msg("locked", b"l"), msg("deferred", b"d")], T0)
        .await;
    let d = t.take(&q, 2, 300_000, T0).await;
    assert_eq!(d.len(), 2);
    t.settle1(&q, &d[1].lock_token, SettleAction::Defer, T0)
        .await
        .unwrap();
    t.send(
        &q,
        vec![
            msg("visible", &vec![7u8; 256 * 1024]),
            NewMessage {
                scheduled_at: Some(secs(600)),
                ..msg("scheduled", b"s")
            },
        ],
        secs(1),
    )
    .await;
    let c = t.counts(&q, secs(1)).await;
    assert_eq!(
        (c.active, c.scheduled, c.locked, c.deferred, c.dead_lettered),
        (1, 1, 1, 1, 1)
    );

    assert_eq!(t.s().purge_messages(&q, secs(2)).await.unwrap(), 4);
    assert!(t.sequences(&q).await.is_empty());
    let c = t.counts(&q, secs(2)).await;
    assert_eq!(c.messages(), 0);
    assert_eq!(c.dead_lettered, 1, "dead-letter records are not messages");
    assert_eq!(t.s().get_dead_letter(&q, &dead).await.unwrap().id, dead);
    // The holder of a purged message's lock has lost it, whatever it does.
    for action in [
        SettleAction::Complete,
        SettleAction::Abandon {
            delay_ms: None,
            last_attempt: None,
        },
        SettleAction::Renew {
            lock_ms: 10_000,
            cap_from_receive_ms: None,
        },
    ] {
        assert_err!(
            t.settle1(&q, &d[0].lock_token, action, secs(3)).await,
            StoreError::LockLost
        );
    }
    // Nothing comes back: not the scheduled one at its time, not the deferred one.
    assert!(t.take(&q, 10, 30_000, secs(700)).await.is_empty());
    assert_err!(
        t.s()
            .receive_deferred(&q, &[d[1].message.sequence], 30_000, secs(700))
            .await,
        StoreError::MessageNotFound { .. }
    );
    assert_eq!(t.s().next_wake(&q, secs(3)).await.unwrap(), None);
    // Another queue is untouched.
    assert_eq!(t.sequences(&other).await.len(), 1);
    // The queue keeps working, its sequence numbers going on.
    let last = d[1].message.sequence;
    let seq = t.send1(&q, "after", secs(701)).await;
    assert!(seq > last, "sequence numbers are not reused");
    let got = t.take(&q, 10, 30_000, secs(701)).await;
    assert_eq!(seqs(&got), [seq]);
    t.settle1(&q, &got[0].lock_token, SettleAction::Complete, secs(702))
        .await
        .unwrap();
    // An empty queue purges to nothing; an unknown one is not found.
    assert_eq!(t.s().purge_messages(&q, secs(703)).await.unwrap(), 0);
    assert_err!(
        t.s().purge_messages(&name("missing"), secs(703)).await,
        StoreError::QueueNotFound { .. }
    );
}

pub async fn purge_releases_the_queue_s_session_locks(t: &TestStore) {
    let q = t
        .queue("orders", policy(|p| p.requires_session = true))
        .await;
    t.send(&q, vec![session_msg("a1", "s1")], T0).await;
    let held = t
        .s()
        .accept_session(&q, Some("s1"), 300_000, T0)
        .await
        .unwrap()
        .expect("named session");
    let d = t
        .s()
        .receive(params(
            &q,
            1,
            30_000,
            T0,
            Some(SessionRef {
                session_id: held.session_id.clone(),
                lock_token: held.lock_token.clone(),
            }),
        ))
        .await
        .unwrap()
        .deliveries;
    assert_eq!(d.len(), 1);
    assert_eq!(t.s().purge_messages(&q, secs(1)).await.unwrap(), 1);
    // The session is free for another receiver at once; the old lock is gone.
    t.send(&q, vec![session_msg("a2", "s1")], secs(2)).await;
    let next = t
        .s()
        .accept_session(&q, None, 30_000, secs(2))
        .await
        .unwrap()
        .expect("the session is free");
    assert_eq!(next.session_id, "s1");
    assert_ne!(next.lock_token, held.lock_token);
    assert_err!(
        t.s()
            .renew_session(&q, "s1", &held.lock_token, 30_000, secs(2))
            .await,
        StoreError::SessionLockLost
    );
}
