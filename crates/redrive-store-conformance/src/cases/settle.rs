//! Settlement: complete, abandon, defer, dead-letter, renew; lock tokens.

use super::prelude::*;

pub async fn complete_removes_message(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let seq = t.send1(&q, "m", T0).await;
    let d = t.take(&q, 1, 30_000, T0).await;
    let s = t
        .settle1(&q, &d[0].lock_token, SettleAction::Complete, secs(1))
        .await
        .unwrap();
    assert_eq!(s.sequence, seq);
    assert_eq!(s.message_id, "m");
    assert_eq!(s.delivery_count, 1);
    assert_eq!((s.locked_until, s.dead_letter_id), (None, None));
    assert!(t.sequences(&q).await.is_empty());
    assert_eq!(t.counts(&q, secs(1)).await, QueueCounts::default());
    assert!(t.take(&q, 1, 30_000, secs(100)).await.is_empty());
}

pub async fn settle_with_stale_lock_token_is_lock_lost(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let other = t.queue("other", QueuePolicy::default()).await;
    t.send(&q, vec![msg("a", b"a"), msg("b", b"b")], T0).await;
    let d = t.take(&q, 2, 10_000, T0).await;
    let (a, b) = (&d[0].lock_token, &d[1].lock_token);

    // Settled already.
    t.settle1(&q, a, SettleAction::Complete, secs(1))
        .await
        .unwrap();
    assert_err!(
        t.settle1(&q, a, SettleAction::Complete, secs(1)).await,
        StoreError::LockLost
    );
    // Unknown token, and a token of another queue.
    assert_err!(
        t.settle1(&q, "lk_unknown", SettleAction::Complete, secs(1))
            .await,
        StoreError::LockLost
    );
    assert_err!(
        t.settle1(&other, b, SettleAction::Complete, secs(1)).await,
        StoreError::LockLost
    );
    // Expired (the lock holds until, not including, locked_until) ...
    for action in [
        SettleAction::Complete,
        SettleAction::Abandon {
            delay_ms: None,
            last_attempt: None,
        },
        SettleAction::Defer,
        SettleAction::Renew {
            lock_ms: 10_000,
            cap_from_receive_ms: None,
        },
        SettleAction::DeadLetter {
            reason: "Bad".into(),
            description: None,
            by_broker: false,
            classifier: redrive_core::Classifier::default(),
        },
    ] {
        assert_err!(
            t.settle1(&q, b, action, secs(10)).await,
            StoreError::LockLost
        );
    }
    // ... and replaced by a new delivery's token.
    let again = t.take(&q, 1, 10_000, secs(10)).await;
    assert_eq!(again[0].message.message_id, "b");
    assert_err!(
        t.settle1(&q, b, SettleAction::Complete, secs(11)).await,
        StoreError::LockLost
    );
    t.settle1(&q, &again[0].lock_token, SettleAction::Complete, secs(11))
        .await
        .unwrap();
    assert!(t.sequences(&q).await.is_empty());
}

pub async fn settle_items_fail_independently(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    t.send(&q, vec![msg("a", b"a"), msg("b", b"b")], T0).await;
    let d = t.take(&q, 2, 30_000, T0).await;
    let out = t
        .s()
        .settle(
            &q,
            vec![
                Settlement {
                    lock_token: d[0].lock_token.clone(),
                    action: SettleAction::Complete,
                },
                Settlement {
                    lock_token: "lk_bogus".into(),
                    action: SettleAction::Complete,
                },
                Settlement {
                    lock_token: d[1].lock_token.clone(),
                    action: SettleAction::Abandon {
                        delay_ms: None,
                        last_attempt: None,
                    },
                },
            ],
            secs(1),
        )
        .await
        .unwrap();
    assert_eq!(out.results.len(), 3);
    assert_eq!(out.results[0].as_ref().unwrap().message_id, "a");
    assert!(matches!(out.results[1], Err(StoreError::LockLost)));
    assert_eq!(out.results[2].as_ref().unwrap().message_id, "b");
    assert_eq!(t.sequences(&q).await, [2]);
    let c = t.counts(&q, secs(1)).await;
    assert_eq!((c.active, c.locked), (1, 0));
}

pub async fn abandon_makes_message_visible_again(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    t.send1(&q, "m", T0).await;
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
    let s = out.results[0].as_ref().unwrap();
    assert_eq!((s.delivery_count, s.locked_until), (1, None));
    assert!(
        out.effects.woken.contains(&q),
        "long polls on the queue look again"
    );
    let d = t.take(&q, 1, 30_000, secs(1)).await;
    assert_eq!(d[0].message.delivery_count, 2);
}

pub async fn abandon_with_delay_and_backoff(t: &TestStore) {
    // Fixed backoff: visible again 5 s after the abandon.
    let q = t
        .queue(
            "fixed",
            policy(|p| p.redelivery_backoff = Backoff::Fixed { delay_ms: 5_000 }),
        )
        .await;
    t.send1(&q, "m", T0).await;
    let d = t.take(&q, 1, 30_000, T0).await;
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
    assert!(t.take(&q, 1, 30_000, at(5_999)).await.is_empty());
    assert_eq!(t.counts(&q, secs(2)).await.scheduled, 1);
    assert_eq!(t.s().next_wake(&q, secs(2)).await.unwrap(), Some(secs(6)));
    let d = t.take(&q, 1, 30_000, secs(6)).await;
    assert_eq!(d.len(), 1);
    // An explicit delay overrides the backoff.
    t.settle1(
        &q,
        &d[0].lock_token,
        SettleAction::Abandon {
            delay_ms: Some(2_000),
            last_attempt: None,
        },
        secs(7),
    )
    .await
    .unwrap();
    assert!(t.take(&q, 1, 30_000, at(8_999)).await.is_empty());
    assert_eq!(t.take(&q, 1, 30_000, secs(9)).await.len(), 1);

    // Exponential backoff without jitter: 1 s, 2 s, 4 s, then capped at 4 s.
    let q = t
        .queue(
            "exp",
            policy(|p| {
                p.redelivery_backoff = Backoff::Exponential {
                    initial_ms: 1_000,
                    max_ms: 4_000,
                    jitter: 0.0,
                }
            }),
        )
        .await;
    t.send1(&q, "m", T0).await;
    let mut now = T0;
    for expected in [1_000, 2_000, 4_000, 4_000] {
        let d = t.take(&q, 1, 30_000, now).await;
        assert_eq!(d.len(), 1, "visible at {now:?}");
        t.settle1(
            &q,
            &d[0].lock_token,
            SettleAction::Abandon {
                delay_ms: None,
                last_attempt: None,
            },
            now,
        )
        .await
        .unwrap();
        assert!(
            t.take(&q, 1, 30_000, now.plus_millis(expected - 1))
                .await
                .is_empty()
        );
        now = now.plus_millis(expected);
    }
}

pub async fn abandon_at_max_delivery_count_dead_letters_with_evidence(t: &TestStore) {
    let q = t
        .queue("orders", policy(|p| p.max_delivery_count = 2))
        .await;
    t.send1(&q, "filler", T0).await;
    let mut props = Properties::new();
    props.insert("tenant".into(), PropertyValue::String("acme".into()));
    props.insert("attempt".into(), PropertyValue::Int(7));
    let body = b"\x00\xffpoison \xc3\x28 bytes".to_vec();
    let m = NewMessage {
        message_id: "m-1".into(),
        body: body.clone(),
        content_type: Some("application/json".into()),
        properties: props.clone(),
        correlation_id: Some("corr-1".into()),
        session_id: Some("s-1".into()),
        message_type: Some("order.created".into()),
        intent: Some("create-order".into()),
        valid_until: Some(secs(86_400)),
        scheduled_at: None,
        expires_at: None,
    };
    let seq = t.send(&q, vec![m], T0).await[0].sequence;
    assert_eq!(seq, 2);
    // Take the filler out of the way.
    let f = t.take(&q, 1, 30_000, T0).await;
    t.settle1(&q, &f[0].lock_token, SettleAction::Complete, T0)
        .await
        .unwrap();

    let d = t.take(&q, 1, 30_000, secs(1)).await;
    t.settle1(
        &q,
        &d[0].lock_token,
        SettleAction::Abandon {
            delay_ms: None,
            last_attempt: None,
        },
        secs(2),
    )
    .await
    .unwrap();
    let d = t.take(&q, 1, 30_000, secs(3)).await;
    assert_eq!(d[0].message.delivery_count, 2);
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
            secs(4),
        )
        .await
        .unwrap();
    let s = out.results[0].as_ref().unwrap();
    let id = s.dead_letter_id.clone().expect("dead-lettered");
    assert_eq!(out.effects.dead_lettered.len(), 1);
    let e = &out.effects.dead_lettered[0];
    assert_eq!(e.dead_letter_id, id);
    assert_eq!(e.reason, DeadLetterReason::MaxDeliveryCountExceeded);
    assert_eq!((e.message.sequence, e.message.delivery_count), (2, 2));
    assert_eq!(e.forwarded_to, None);

    let r = t.s().get_dead_letter(&q, &id).await.unwrap();
    assert_eq!(r.id, id);
    assert_eq!(r.queue, q);
    assert_eq!(r.area, Area::Live);
    assert_eq!(r.message_id, "m-1");
    assert_eq!(r.sequence, 2);
    assert_eq!(r.session_id.as_deref(), Some("s-1"));
    assert_eq!(r.body, body, "the exact bytes");
    assert_eq!(r.body_sha256, redrive_core::digest::sha256_hex(&body));
    assert_eq!(r.content_type.as_deref(), Some("application/json"));
    assert_eq!(r.properties, props);
    assert_eq!(r.correlation_id.as_deref(), Some("corr-1"));
    assert_eq!(r.message_type.as_deref(), Some("order.created"));
    assert_eq!(r.intent.as_deref(), Some("create-order"));
    assert_eq!(r.valid_until, Some(secs(86_400)));
    assert_eq!(r.reason, "MaxDeliveryCountExceeded");
    assert_eq!(r.delivery_count, 2);
    assert_eq!(r.count_quality, EvidenceQuality::Exact);
    assert_eq!(r.first_delivered_at, Some(secs(1)));
    assert_eq!(r.last_delivered_at, Some(secs(3)));
    assert_eq!(r.enqueued_at, T0);
    assert_eq!(r.dead_lettered_at, secs(4));
    assert_eq!(r.policy_version, Some(1));
    assert_eq!(r.route, RouteKind::Broker);
    assert_eq!(r.forwarded_to, None);
    assert_eq!(r.dlq_delivery_count, 0);
    assert_eq!(r.locked_until, None);

    assert!(
        t.sequences(&q).await.is_empty(),
        "the message left the queue"
    );
    assert_eq!(t.counts(&q, secs(4)).await.dead_lettered, 1);
}

pub async fn application_dead_letter_keeps_reason_and_description(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    t.send1(&q, "m", T0).await;
    let d = t.take(&q, 1, 30_000, secs(1)).await;
    let out = t
        .s()
        .settle(
            &q,
            vec![Settlement {
                lock_token: d[0].lock_token.clone(),
                action: SettleAction::DeadLetter {
                    reason: "BadFormat".into(),
                    description: Some("field `total` missing".into()),
                    by_broker: false,
                    classifier: redrive_core::Classifier {
                        consumer: Some("orders-consumer@4".into()),
                        rule_version: Some("total-rule-2".into()),
                    },
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
    assert_eq!(
        out.effects.dead_lettered[0].reason,
        DeadLetterReason::Application("BadFormat".into())
    );
    let r = t.s().get_dead_letter(&q, &id).await.unwrap();
    assert_eq!(r.reason, "BadFormat");
    assert_eq!(r.description.as_deref(), Some("field `total` missing"));
    assert_eq!(r.route, RouteKind::Application);
    assert_eq!(r.delivery_count, 1);
    assert_eq!(r.dead_lettered_at, secs(2));
    assert_eq!(r.body, b"m");
    // The route evidence: the consumer and rule version that applied the reason, the
    // rule and the policy version, on the record and on its case.
    assert_eq!(
        (r.consumer.as_deref(), r.rule_version.as_deref()),
        (Some("orders-consumer@4"), Some("total-rule-2"))
    );
    assert_eq!(
        (r.route_kind, r.route_rule, r.policy_version),
        (
            redrive_core::case::Route::ApplicationQuarantined,
            Some(redrive_core::case::RouteRule::Application),
            Some(1)
        )
    );
    let c = t
        .s()
        .get_case(&redrive_store::skeleton::cases::case_id(&id))
        .await
        .unwrap();
    assert_eq!(
        (c.consumer.as_deref(), c.rule_version.as_deref()),
        (Some("orders-consumer@4"), Some("total-rule-2"))
    );
    assert_eq!(
        (c.route_rule, c.policy_version),
        (Some(redrive_core::case::RouteRule::Application), Some(1))
    );
    assert!(t.sequences(&q).await.is_empty());
}

pub async fn defer_then_receive_by_sequence(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let seq = t.send1(&q, "m", T0).await;
    let d = t.take(&q, 1, 30_000, T0).await;
    t.settle1(&q, &d[0].lock_token, SettleAction::Defer, secs(1))
        .await
        .unwrap();
    assert_eq!(t.counts(&q, secs(1)).await.deferred, 1);
    assert!(
        t.take(&q, 10, 30_000, secs(1_000)).await.is_empty(),
        "a plain receive never takes a deferred message"
    );
    let out = t
        .s()
        .receive_deferred(&q, &[seq], 30_000, secs(2))
        .await
        .unwrap();
    assert_eq!(seqs(&out.deliveries), [seq]);
    let m = &out.deliveries[0].message;
    assert_eq!(m.state, MessageState::Locked);
    assert_eq!(m.delivery_count, 2);
    assert_eq!(out.deliveries[0].locked_until, secs(32));
    // Released again, it goes back to Deferred, not Available.
    t.settle1(
        &q,
        &out.deliveries[0].lock_token,
        SettleAction::Abandon {
            delay_ms: None,
            last_attempt: None,
        },
        secs(3),
    )
    .await
    .unwrap();
    let c = t.counts(&q, secs(3)).await;
    assert_eq!((c.active, c.deferred), (0, 1));
    let out = t
        .s()
        .receive_deferred(&q, &[seq], 30_000, secs(4))
        .await
        .unwrap();
    t.settle1(
        &q,
        &out.deliveries[0].lock_token,
        SettleAction::Complete,
        secs(5),
    )
    .await
    .unwrap();
    assert_err!(
        t.s().receive_deferred(&q, &[seq], 30_000, secs(6)).await,
        StoreError::MessageNotFound { .. }
    );
}

pub async fn receive_deferred_of_unknown_or_not_deferred_is_message_not_found(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let seq = t.send1(&q, "m", T0).await;
    assert_err!(
        t.s().receive_deferred(&q, &[seq], 30_000, T0).await,
        StoreError::MessageNotFound { .. }
    );
    assert_err!(
        t.s().receive_deferred(&q, &[404], 30_000, T0).await,
        StoreError::MessageNotFound { .. }
    );
    let p = t.s().peek(&q, 1, 1, T0).await.unwrap();
    assert_eq!(
        (p[0].state, p[0].delivery_count),
        (MessageState::Available, 0)
    );
}

pub async fn renew_extends_lock(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    t.send1(&q, "m", T0).await;
    let d = t.take(&q, 1, 10_000, T0).await;
    let s = t
        .settle1(
            &q,
            &d[0].lock_token,
            SettleAction::Renew {
                lock_ms: 10_000,
                cap_from_receive_ms: None,
            },
            secs(8),
        )
        .await
        .unwrap();
    assert_eq!(s.locked_until, Some(secs(18)));
    assert_eq!(s.delivery_count, 1, "renewing is not a delivery");
    assert!(
        t.take(&q, 1, 10_000, secs(12)).await.is_empty(),
        "still locked"
    );
    assert_eq!(t.s().next_wake(&q, secs(12)).await.unwrap(), Some(secs(18)));
    t.settle1(&q, &d[0].lock_token, SettleAction::Complete, secs(17))
        .await
        .unwrap();

    // Renewing a lock that already ran out is too late.
    t.send1(&q, "n", secs(20)).await;
    let d = t.take(&q, 1, 10_000, secs(20)).await;
    assert_err!(
        t.settle1(
            &q,
            &d[0].lock_token,
            SettleAction::Renew {
                lock_ms: 10_000,
                cap_from_receive_ms: None,
            },
            secs(30)
        )
        .await,
        StoreError::LockLost
    );
}

pub async fn renew_past_its_cap_from_the_receive_is_refused(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    t.send1(&q, "m", T0).await;
    let d = t.take(&q, 1, 10_000, secs(2)).await;
    let renew = |lock_ms| SettleAction::Renew {
        lock_ms,
        cap_from_receive_ms: Some(60_000),
    };
    // Received at 2 s: the lock may end at 62 s, not later.
    let s = t
        .settle1(&q, &d[0].lock_token, renew(57_000), secs(5))
        .await
        .unwrap();
    assert_eq!(s.locked_until, Some(secs(62)));
    assert_err!(
        t.settle1(&q, &d[0].lock_token, renew(50_001), secs(12))
            .await,
        StoreError::LockCapExceeded {
            cap_ms: 60_000,
            remaining_ms: 50_000
        }
    );
    // The refusal changed nothing: the lock still ends at 62 s.
    assert!(t.take(&q, 1, 10_000, secs(61)).await.is_empty());
    assert_eq!(t.s().next_wake(&q, secs(61)).await.unwrap(), Some(secs(62)));
    // A new receive counts from itself.
    let again = t.take(&q, 1, 10_000, secs(62)).await;
    assert_eq!(again.len(), 1);
    let s = t
        .settle1(&q, &again[0].lock_token, renew(60_000), secs(62))
        .await
        .unwrap();
    assert_eq!(s.locked_until, Some(secs(122)));
}

pub async fn abandon_keeps_the_evidence_of_the_last_failed_attempt(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    t.send(&q, vec![msg("m", b"m"), msg("other", b"other")], T0)
        .await;
    let abandon = |evidence: Option<&str>| SettleAction::Abandon {
        delay_ms: Some(1_000),
        last_attempt: evidence.map(str::to_owned),
    };
    let evidence_of = |d: &[redrive_store::Delivery], id: &str| {
        d.iter()
            .find(|d| d.message.message_id == id)
            .unwrap_or_else(|| panic!("{id} received"))
            .message
            .last_attempt
            .clone()
    };
    let a = r#"{"attempt":1,"outcome":"500","status":500,"started":1000}"#;
    let b = r#"{"attempt":4,"outcome":"timeout","error":"deadline","started":9000}"#;

    // Never abandoned with evidence: none.
    let d = t.take(&q, 2, 30_000, secs(1)).await;
    assert_eq!(d.len(), 2);
    assert_eq!(evidence_of(&d, "m"), None);
    // One call: an abandon with evidence next to one without, both written in it.
    let (m, other) = if d[0].message.message_id == "m" {
        (&d[0], &d[1])
    } else {
        (&d[1], &d[0])
    };
    let out = t
        .s()
        .settle(
            &q,
            vec![
                Settlement {
                    lock_token: m.lock_token.clone(),
                    action: abandon(Some(a)),
                },
                Settlement {
                    lock_token: other.lock_token.clone(),
                    action: abandon(None),
                },
            ],
            secs(2),
        )
        .await
        .unwrap();
    assert!(out.results.iter().all(Result::is_ok), "{:?}", out.results);
    // Shown by a peek, and by the next receive.
    let peeked = t.s().peek(&q, 1, 10, secs(2)).await.unwrap();
    let shown: Vec<(&str, Option<&str>)> = peeked
        .iter()
        .map(|m| (m.message_id.as_str(), m.last_attempt.as_deref()))
        .collect();
    assert_eq!(shown, [("m", Some(a)), ("other", None)]);
    let d = t.take(&q, 2, 30_000, secs(3)).await;
    assert_eq!(evidence_of(&d, "m").as_deref(), Some(a));
    assert_eq!(evidence_of(&d, "other"), None);
    let m = d.iter().find(|d| d.message.message_id == "m").unwrap();
    let other = d.iter().find(|d| d.message.message_id == "other").unwrap();

    // An abandon without evidence (a consumer's) keeps it, and so do a renewal and a
    // lock that runs out.
    t.settle1(&q, &m.lock_token, abandon(None), secs(4))
        .await
        .unwrap();
    let d = t.take(&q, 1, 1_000, secs(5)).await;
    assert_eq!(d[0].message.message_id, "m");
    assert_eq!(evidence_of(&d, "m").as_deref(), Some(a));
    t.settle1(
        &q,
        &d[0].lock_token,
        SettleAction::Renew {
            lock_ms: 1_000,
            cap_from_receive_ms: None,
        },
        secs(5),
    )
    .await
    .unwrap();
    let d = t.take(&q, 1, 30_000, secs(7)).await;
    assert_eq!(d[0].message.message_id, "m", "its lock ran out");
    assert_eq!(evidence_of(&d, "m").as_deref(), Some(a));

    // A later attempt's evidence replaces it.
    t.settle1(&q, &d[0].lock_token, abandon(Some(b)), secs(8))
        .await
        .unwrap();
    let d = t.take(&q, 1, 30_000, secs(9)).await;
    assert_eq!(evidence_of(&d, "m").as_deref(), Some(b));
    assert_eq!(d[0].message.delivery_count, 5);

    // Dead-lettering and completing are unaffected: the record keeps its own
    // description, and the other message leaves the queue.
    let id = t
        .settle1(
            &q,
            &d[0].lock_token,
            SettleAction::DeadLetter {
                reason: "TimeToLiveExceeded".into(),
                description: Some("expired".into()),
                by_broker: true,
                classifier: redrive_core::Classifier::default(),
            },
            secs(10),
        )
        .await
        .unwrap()
        .dead_letter_id
        .expect("dead-lettered");
    let r = t.s().get_dead_letter(&q, &id).await.unwrap();
    assert_eq!(r.description.as_deref(), Some("expired"));
    assert_eq!(r.delivery_count, 5);
    assert_err!(
        t.settle1(&q, &other.lock_token, SettleAction::Complete, secs(40))
            .await,
        StoreError::LockLost
    );
    let d = t.take(&q, 1, 30_000, secs(40)).await;
    assert_eq!(d[0].message.message_id, "other");
    assert_eq!(d[0].message.last_attempt, None);
    t.settle1(&q, &d[0].lock_token, SettleAction::Complete, secs(41))
        .await
        .unwrap();
    assert!(t.sequences(&q).await.is_empty());
}
