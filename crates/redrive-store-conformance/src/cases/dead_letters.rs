//! Dead letters: forwarding, resubmission, peek-lock of the store, listing, areas.

use redrive_core::message::{
    DEAD_LETTER_DESCRIPTION_PROPERTY, DEAD_LETTER_REASON_PROPERTY, DEAD_LETTER_SOURCE_PROPERTY,
    ORIGIN_MESSAGE_ID_PROPERTY, REAL_TOPIC_PROPERTY, RESUBMITTED_FROM_PROPERTY,
};

use super::prelude::*;

fn query(q: &redrive_core::EntityName, area: Area) -> DeadLetterQuery {
    DeadLetterQuery {
        queue: q.clone(),
        area,
        reason: None,
        from: None,
        to: None,
        after: None,
        limit: 100,
        filter: Default::default(),
    }
}

fn text(s: &str) -> PropertyValue {
    PropertyValue::String(s.to_owned())
}

pub async fn dead_letter_to_another_queue_forwards_copy_and_keeps_evidence(t: &TestStore) {
    let dlq = t.queue("orders-dlq", QueuePolicy::default()).await;
    let q = t
        .queue(
            "orders",
            policy(|p| {
                p.dead_letter_queue = Some(name("orders-dlq"));
                p.max_delivery_count = 1;
            }),
        )
        .await;
    t.send1(&dlq, "already-there", T0).await;
    let mut props = Properties::new();
    props.insert("a".into(), PropertyValue::Int(1));
    t.send(
        &q,
        vec![NewMessage {
            properties: props.clone(),
            correlation_id: Some("c".into()),
            ..msg("m1", b"body-1")
        }],
        T0,
    )
    .await;

    // An application dead-letter.
    let d = t.take(&q, 1, 30_000, secs(1)).await;
    let out = t
        .s()
        .settle(
            &q,
            vec![Settlement {
                lock_token: d[0].lock_token.clone(),
                action: SettleAction::DeadLetter {
                    reason: "Bad".into(),
                    description: Some("why".into()),
                    by_broker: false,
                    classifier: redrive_core::Classifier::default(),
                },
            }],
            secs(2),
        )
        .await
        .unwrap();
    let id = out.results[0]
        .as_ref()
        .unwrap()
        .dead_letter_id
        .clone()
        .unwrap();
    let e = &out.effects.dead_lettered[0];
    let (fq, fseq) = e.forwarded_to.clone().expect("forwarded");
    assert_eq!((fq.clone(), fseq), (dlq.clone(), 2));
    assert!(out.effects.woken.contains(&dlq));

    // The evidence stays with the source queue, archived (the live work is the copy).
    let r = t.s().get_dead_letter(&q, &id).await.unwrap();
    assert_eq!(r.area, Area::Archived);
    assert_eq!(r.forwarded_to, Some((dlq.clone(), 2)));
    assert_eq!(r.reason, "Bad");
    assert_eq!(r.description.as_deref(), Some("why"));
    assert_eq!(r.route, RouteKind::Application);
    assert_eq!(r.body, b"body-1");
    assert_eq!(r.delivery_count, 1);
    assert!(
        t.s()
            .list_dead_letters(&query(&q, Area::Live))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(t.counts(&q, secs(2)).await.dead_lettered, 0);
    let archived = t
        .s()
        .list_dead_letters(&query(&q, Area::Archived))
        .await
        .unwrap();
    assert_eq!(
        archived.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        [id.as_str()]
    );

    // The copy: same id, body and properties, plus where and why it came from.
    let copy = t.s().peek(&dlq, 2, 1, T0).await.unwrap().remove(0);
    assert_eq!(copy.message_id, "m1");
    assert_eq!(copy.body, b"body-1");
    assert_eq!(copy.correlation_id.as_deref(), Some("c"));
    assert_eq!(copy.delivery_count, 0);
    assert_eq!(copy.state, MessageState::Available);
    let mut expected = props.clone();
    expected.insert(DEAD_LETTER_REASON_PROPERTY.into(), text("Bad"));
    expected.insert(DEAD_LETTER_DESCRIPTION_PROPERTY.into(), text("why"));
    expected.insert(DEAD_LETTER_SOURCE_PROPERTY.into(), text("orders"));
    expected.insert(REAL_TOPIC_PROPERTY.into(), text("orders"));
    expected.insert(ORIGIN_MESSAGE_ID_PROPERTY.into(), text("m1"));
    assert_eq!(copy.properties, expected);
    let got = t.take(&dlq, 10, 30_000, secs(3)).await;
    assert_eq!(seqs(&got), [1, 2]);

    // A broker dead-letter (max delivery count) is forwarded the same way.
    t.send1(&q, "m2", secs(4)).await;
    let d = t.take(&q, 1, 30_000, secs(4)).await;
    let s = t
        .settle1(
            &q,
            &d[0].lock_token,
            SettleAction::Abandon {
                delay_ms: None,
                last_attempt: None,
            },
            secs(5),
        )
        .await
        .unwrap();
    let r = t
        .s()
        .get_dead_letter(&q, s.dead_letter_id.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(r.route, RouteKind::Broker);
    assert_eq!(r.area, Area::Archived);
    let (_, seq) = r.forwarded_to.clone().unwrap();
    let copy = t.s().peek(&dlq, seq, 1, T0).await.unwrap().remove(0);
    assert_eq!(copy.message_id, "m2");
    assert_eq!(
        copy.properties.get(DEAD_LETTER_REASON_PROPERTY),
        Some(&text("MaxDeliveryCountExceeded"))
    );
}

pub async fn application_dead_letter_to_missing_queue_is_refused_and_changes_nothing(
    t: &TestStore,
) {
    let q = t
        .queue(
            "orders",
            policy(|p| p.dead_letter_queue = Some(name("gone"))),
        )
        .await;
    t.send1(&q, "m1", T0).await;
    let d = t.take(&q, 1, 30_000, T0).await;
    assert_err!(
        t.settle1(
            &q,
            &d[0].lock_token,
            SettleAction::DeadLetter {
                reason: "Bad".into(),
                description: None,
                by_broker: false,
                classifier: redrive_core::Classifier::default(),
            },
            secs(1),
        )
        .await,
        StoreError::DeadLetterTargetMissing { .. }
    );
    let p = t.s().peek(&q, 1, 1, secs(1)).await.unwrap();
    assert_eq!(
        p[0].state,
        MessageState::Locked,
        "still locked by its receiver"
    );
    assert!(
        t.s()
            .list_dead_letters(&query(&q, Area::Live))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        t.s()
            .list_dead_letters(&query(&q, Area::Archived))
            .await
            .unwrap()
            .is_empty()
    );
    t.settle1(&q, &d[0].lock_token, SettleAction::Complete, secs(2))
        .await
        .unwrap();
}

pub async fn broker_dead_letter_to_missing_queue_falls_back_to_own_store(t: &TestStore) {
    let q = t
        .queue(
            "orders",
            policy(|p| {
                p.dead_letter_queue = Some(name("gone"));
                p.max_delivery_count = 1;
            }),
        )
        .await;
    t.send1(&q, "m1", T0).await;
    let d = t.take(&q, 1, 30_000, T0).await;
    let out = t
        .s()
        .settle(
            &q,
            vec![Settlement {
                lock_token: d[0].lock_token.clone(),
                action: SettleAction::Abandon {
                    delay_ms: None,
                    last_attempt: None,
                },
            }],
            secs(1),
        )
        .await
        .unwrap();
    let id = out.results[0]
        .as_ref()
        .unwrap()
        .dead_letter_id
        .clone()
        .expect("nothing is lost: a record in the own store");
    assert_eq!(out.effects.dead_lettered[0].forwarded_to, None);
    let r = t.s().get_dead_letter(&q, &id).await.unwrap();
    assert_eq!(r.area, Area::Live);
    assert_eq!(r.forwarded_to, None);
    assert_eq!(r.reason, "MaxDeliveryCountExceeded");
    assert!(r.description.is_some(), "the fallback is explained");
    assert!(t.sequences(&q).await.is_empty());
}

pub async fn resubmit_creates_new_sequence_and_archives_record(t: &TestStore) {
    let q = t
        .queue(
            "orders",
            policy(|p| p.duplicate_detection_window_ms = 3_600_000),
        )
        .await;
    let mut props = Properties::new();
    props.insert("k".into(), text("v"));
    t.send(
        &q,
        vec![NewMessage {
            properties: props.clone(),
            content_type: Some("text/plain".into()),
            ..msg("m1", b"payload")
        }],
        T0,
    )
    .await;
    let d = t.take(&q, 1, 30_000, T0).await;
    let id = t
        .settle1(
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
        .unwrap()
        .dead_letter_id
        .unwrap();
    t.send1(&q, "other", T0).await;

    let e = t.s().resubmit_dead_letter(&q, &id, secs(10)).await.unwrap();
    assert_eq!(e.message_id, "m1");
    assert_eq!(e.sequence, 3, "a new sequence number");
    assert!(
        !e.duplicate,
        "duplicate detection does not apply to a resubmission"
    );
    let r = t.s().get_dead_letter(&q, &id).await.unwrap();
    assert_eq!(r.area, Area::Archived);
    assert!(
        t.s()
            .list_dead_letters(&query(&q, Area::Live))
            .await
            .unwrap()
            .is_empty()
    );

    let m = t.s().peek(&q, 3, 1, T0).await.unwrap().remove(0);
    assert_eq!(m.message_id, "m1");
    assert_eq!(m.body, b"payload");
    assert_eq!(m.content_type.as_deref(), Some("text/plain"));
    assert_eq!((m.delivery_count, m.state), (0, MessageState::Available));
    assert_eq!(m.enqueued_at, secs(10));
    let mut expected = props.clone();
    expected.insert(RESUBMITTED_FROM_PROPERTY.into(), text(&id));
    assert_eq!(m.properties, expected);

    assert_err!(
        t.s().resubmit_dead_letter(&q, &id, secs(11)).await,
        StoreError::DeadLetterNotFound { .. }
    );
    assert_err!(
        t.s().resubmit_dead_letter(&q, "dl_nope", secs(11)).await,
        StoreError::DeadLetterNotFound { .. }
    );
    assert_eq!(t.sequences(&q).await, [2, 3]);
}

pub async fn dlq_peek_lock_receive_and_complete(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let r1 = t.dead_letter_one(&q, "m1", "Bad", secs(1)).await;
    let r2 = t.dead_letter_one(&q, "m2", "Bad", secs(2)).await;
    let r3 = t.dead_letter_one(&q, "m3", "Bad", secs(3)).await;

    let got = t
        .s()
        .receive_dead_letters(&q, 2, 30_000, secs(10))
        .await
        .unwrap();
    assert_eq!(
        got.iter().map(|d| d.record.id.as_str()).collect::<Vec<_>>(),
        [r1.as_str(), r2.as_str()],
        "oldest first"
    );
    assert!(got.iter().all(|d| d.record.dlq_delivery_count == 1
        && d.locked_until == secs(40)
        && d.record.locked_until == Some(secs(40))));
    let more = t
        .s()
        .receive_dead_letters(&q, 10, 30_000, secs(10))
        .await
        .unwrap();
    assert_eq!(
        more.iter()
            .map(|d| d.record.id.as_str())
            .collect::<Vec<_>>(),
        [r3.as_str()],
        "locked records are not received again"
    );
    assert!(
        t.s()
            .receive_dead_letters(&q, 10, 30_000, secs(10))
            .await
            .unwrap()
            .is_empty()
    );

    // Complete removes the record; the token is then spent.
    t.s()
        .settle_dead_letter(&q, &got[0].lock_token, true, secs(11))
        .await
        .unwrap();
    assert_err!(
        t.s().get_dead_letter(&q, &r1).await,
        StoreError::DeadLetterNotFound { .. }
    );
    assert_err!(
        t.s()
            .settle_dead_letter(&q, &got[0].lock_token, true, secs(11))
            .await,
        StoreError::LockLost
    );
    // Abandon unlocks it at once.
    t.s()
        .settle_dead_letter(&q, &got[1].lock_token, false, secs(12))
        .await
        .unwrap();
    let again = t
        .s()
        .receive_dead_letters(&q, 10, 30_000, secs(12))
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].record.id, r2);
    assert_eq!(again[0].record.dlq_delivery_count, 2);
    // A lock that ran out frees the record, and its token settles nothing.
    let late = t
        .s()
        .receive_dead_letters(&q, 10, 30_000, secs(40))
        .await
        .unwrap();
    assert_eq!(late.len(), 1);
    assert_eq!(late[0].record.id, r3);
    assert_err!(
        t.s()
            .settle_dead_letter(&q, &more[0].lock_token, true, secs(40))
            .await,
        StoreError::LockLost
    );
    assert_err!(
        t.s()
            .settle_dead_letter(&q, "lk_unknown", true, secs(40))
            .await,
        StoreError::LockLost
    );
    assert_eq!(t.counts(&q, secs(40)).await.dead_lettered, 2);
}

pub async fn dead_letter_list_filters_and_pages(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let mut ids = Vec::new();
    for (i, reason) in ["A", "B", "A", "B", "A"].iter().enumerate() {
        let i = i64::try_from(i).unwrap() + 1;
        ids.push(
            t.dead_letter_one(&q, &format!("m{i}"), reason, secs(i))
                .await,
        );
    }
    let list = |q: DeadLetterQuery| async move { t.s().list_dead_letters(&q).await.unwrap() };
    let idv =
        |v: Vec<redrive_store::DeadLetterRecord>| v.into_iter().map(|r| r.id).collect::<Vec<_>>();

    assert_eq!(
        idv(list(query(&q, Area::Live)).await),
        ids,
        "all, by id (time order)"
    );
    let a = idv(list(DeadLetterQuery {
        reason: Some("A".into()),
        ..query(&q, Area::Live)
    })
    .await);
    assert_eq!(a, [ids[0].clone(), ids[2].clone(), ids[4].clone()]);
    let window = idv(list(DeadLetterQuery {
        from: Some(secs(2)),
        to: Some(secs(4)),
        ..query(&q, Area::Live)
    })
    .await);
    assert_eq!(
        window,
        [ids[1].clone(), ids[2].clone()],
        "from inclusive, to exclusive"
    );

    let mut pages = Vec::new();
    let mut after = None;
    loop {
        let page = idv(list(DeadLetterQuery {
            after: after.clone(),
            limit: 2,
            ..query(&q, Area::Live)
        })
        .await);
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 2);
        after = page.last().cloned();
        pages.push(page);
    }
    assert_eq!(pages.len(), 3);
    assert_eq!(pages.concat(), ids);

    t.s()
        .move_dead_letter(&q, &ids[1], Area::Quarantine, secs(6))
        .await
        .unwrap();
    assert_eq!(list(query(&q, Area::Live)).await.len(), 4);
    assert_eq!(
        idv(list(query(&q, Area::Quarantine)).await),
        [ids[1].clone()]
    );
    let both = idv(list(DeadLetterQuery {
        reason: Some("B".into()),
        ..query(&q, Area::Live)
    })
    .await);
    assert_eq!(both, [ids[3].clone()]);
}

pub async fn move_dead_letter_between_areas(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let id = t.dead_letter_one(&q, "m1", "Bad", T0).await;
    let locked = t
        .s()
        .receive_dead_letters(&q, 1, 30_000, secs(1))
        .await
        .unwrap();
    for area in [Area::Quarantine, Area::Archived, Area::Live] {
        t.s()
            .move_dead_letter(&q, &id, area, secs(1))
            .await
            .unwrap();
        assert_eq!(t.s().get_dead_letter(&q, &id).await.unwrap().area, area);
    }
    assert_err!(
        t.s()
            .settle_dead_letter(&q, &locked[0].lock_token, true, secs(2))
            .await,
        StoreError::LockLost
    );
    t.s()
        .move_dead_letter(&q, &id, Area::Quarantine, secs(2))
        .await
        .unwrap();
    assert!(
        t.s()
            .receive_dead_letters(&q, 10, 30_000, secs(2))
            .await
            .unwrap()
            .is_empty(),
        "only the live area is received"
    );
    assert_eq!(t.counts(&q, secs(2)).await.dead_lettered, 0);
    assert_err!(
        t.s().resubmit_dead_letter(&q, &id, secs(2)).await,
        StoreError::DeadLetterNotFound { .. }
    );
    assert_err!(
        t.s()
            .move_dead_letter(&q, "dl_nope", Area::Live, secs(2))
            .await,
        StoreError::DeadLetterNotFound { .. }
    );
}

pub async fn unknown_dead_letter_is_not_found(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let other = t.queue("other", QueuePolicy::default()).await;
    let id = t.dead_letter_one(&q, "m1", "Bad", T0).await;
    assert_err!(
        t.s().get_dead_letter(&q, "dl_nope").await,
        StoreError::DeadLetterNotFound { .. }
    );
    assert_err!(
        t.s().get_dead_letter(&other, &id).await,
        StoreError::DeadLetterNotFound { .. }
    );
    assert_eq!(t.s().get_dead_letter(&q, &id).await.unwrap().id, id);
}

pub async fn a_forwarded_copy_carries_its_origin_unless_it_has_one(t: &TestStore) {
    let dlq = t.queue("numbers-dlq", QueuePolicy::default()).await;
    let q = t
        .queue(
            "numbers",
            policy(|p| {
                p.dead_letter_queue = Some(name("numbers-dlq"));
                p.max_delivery_count = 1;
            }),
        )
        .await;
    // One message as sent; one diverted before, carrying the origin it was given then.
    let mut diverted = Properties::new();
    diverted.insert(REAL_TOPIC_PROPERTY.into(), text("orders"));
    diverted.insert(ORIGIN_MESSAGE_ID_PROPERTY.into(), text("3:0:-1"));
    t.send(
        &q,
        vec![
            msg("n1", b"1"),
            NewMessage {
                properties: diverted,
                ..msg("n3", b"3")
            },
        ],
        T0,
    )
    .await;
    // Dead-lettered by the broker (max delivery count, at the abandon) and by the
    // application: the server's own republish either way.
    let d = t.take(&q, 2, 30_000, T0).await;
    t.settle1(
        &q,
        &d[0].lock_token,
        SettleAction::Abandon {
            delay_ms: None,
            last_attempt: None,
        },
        secs(1),
    )
    .await
    .unwrap();
    t.settle1(
        &q,
        &d[1].lock_token,
        SettleAction::DeadLetter {
            reason: "Odd".into(),
            description: None,
            by_broker: false,
            classifier: redrive_core::Classifier::default(),
        },
        secs(1),
    )
    .await
    .unwrap();
    let copies = t.s().peek(&dlq, 1, 10, secs(1)).await.unwrap();
    let origin: Vec<(&str, &PropertyValue, &PropertyValue)> = copies
        .iter()
        .map(|m| {
            (
                m.message_id.as_str(),
                &m.properties[REAL_TOPIC_PROPERTY],
                &m.properties[ORIGIN_MESSAGE_ID_PROPERTY],
            )
        })
        .collect();
    assert_eq!(
        origin,
        [
            ("n1", &text("numbers"), &text("n1")),
            ("n3", &text("orders"), &text("3:0:-1")),
        ]
    );
    // Where this broker took it from is still said, whatever the message carried.
    for m in &copies {
        assert_eq!(m.properties[DEAD_LETTER_SOURCE_PROPERTY], text("numbers"));
    }
}
