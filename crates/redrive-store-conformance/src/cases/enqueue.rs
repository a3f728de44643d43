//! Enqueue: sequence numbers, stored fields, atomic batches, sessions, scheduling, peek.

use redrive_store::skeleton::RowError;

use super::prelude::*;

pub async fn enqueue_assigns_increasing_sequences_from_one(t: &TestStore) {
    let a = t.queue("a", QueuePolicy::default()).await;
    let b = t.queue("b", QueuePolicy::default()).await;
    let r = t
        .send(&a, vec![msg("1", b"1"), msg("2", b"2"), msg("3", b"3")], T0)
        .await;
    let got: Vec<(String, i64, bool)> = r
        .iter()
        .map(|e| (e.message_id.clone(), e.sequence, e.duplicate))
        .collect();
    assert_eq!(
        got,
        [
            ("1".to_owned(), 1, false),
            ("2".to_owned(), 2, false),
            ("3".to_owned(), 3, false)
        ]
    );
    assert_eq!(t.send1(&b, "x", T0).await, 1, "sequences are per queue");
    assert_eq!(t.send1(&a, "4", T0).await, 4);
    // Removing messages never makes a sequence number come back.
    let d = t.take(&a, 4, 30_000, T0).await;
    for x in &d {
        t.settle1(&a, &x.lock_token, SettleAction::Complete, T0)
            .await
            .unwrap();
    }
    assert_eq!(t.send1(&a, "5", T0).await, 5);
    assert!(t.send(&a, vec![], T0).await.is_empty());
}

pub async fn enqueued_message_round_trips_every_field(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let mut props = Properties::new();
    props.insert("flag".into(), PropertyValue::Bool(true));
    props.insert("n".into(), PropertyValue::Int(-42));
    props.insert("x".into(), PropertyValue::Float(1.5));
    props.insert("s".into(), PropertyValue::String("ü ✓".into()));
    let body: Vec<u8> = (0..=255u8).chain([0, 0, 255]).collect();
    let m = NewMessage {
        message_id: "order-1".into(),
        body: body.clone(),
        content_type: Some("application/octet-stream".into()),
        properties: props.clone(),
        correlation_id: Some("corr".into()),
        session_id: Some("s-1".into()),
        message_type: Some("com.example.order".into()),
        intent: Some("create-order-1".into()),
        valid_until: Some(secs(3_600)),
        scheduled_at: None,
        expires_at: Some(secs(7_200)),
    };
    let seq = t.send(&q, vec![m], T0).await[0].sequence;
    let peeked = t.s().peek(&q, 1, 10, T0).await.unwrap();
    assert_eq!(peeked.len(), 1);
    let p = &peeked[0];
    assert_eq!(p.queue, q);
    assert_eq!(p.sequence, seq);
    assert_eq!(p.message_id, "order-1");
    assert_eq!(p.body, body);
    assert_eq!(p.content_type.as_deref(), Some("application/octet-stream"));
    assert_eq!(p.properties, props);
    assert_eq!(p.correlation_id.as_deref(), Some("corr"));
    assert_eq!(p.session_id.as_deref(), Some("s-1"));
    assert_eq!(p.message_type.as_deref(), Some("com.example.order"));
    assert_eq!(p.intent.as_deref(), Some("create-order-1"));
    assert_eq!(p.valid_until, Some(secs(3_600)));
    assert_eq!(p.enqueued_at, T0);
    assert_eq!(p.scheduled_at, None);
    assert_eq!(p.state, MessageState::Available);
    assert_eq!(p.visible_at, T0);
    assert_eq!(p.expires_at, Some(secs(7_200)));
    assert_eq!(p.delivery_count, 0);
    assert_eq!(p.locked_until, None);
    assert_eq!((p.first_delivered_at, p.last_delivered_at), (None, None));
    // The delivery carries the same content.
    let d = t.take(&q, 1, 30_000, secs(1)).await;
    assert_eq!(d[0].message.body, body);
    assert_eq!(d[0].message.properties, props);
    assert_eq!(d[0].message.session_id.as_deref(), Some("s-1"));
}

pub async fn batch_enqueue_is_atomic(t: &TestStore) {
    let q = t
        .queue("orders", policy(|p| p.requires_session = true))
        .await;
    let batch = vec![
        session_msg("a", "s1"),
        msg("b", b"no session"),
        session_msg("c", "s1"),
    ];
    assert_err!(
        t.s().enqueue(&q, batch, T0).await,
        StoreError::SessionRequired { .. }
    );
    assert!(
        t.sequences(&q).await.is_empty(),
        "nothing of the batch is stored"
    );
    assert_eq!(t.counts(&q, T0).await, QueueCounts::default());
    // A valid batch afterwards is stored whole, in order.
    let r = t
        .send(&q, vec![session_msg("a", "s1"), session_msg("c", "s1")], T0)
        .await;
    assert!(r[0].sequence < r[1].sequence);
    assert_eq!(t.sequences(&q).await.len(), 2);
}

/// JSON has no NaN or infinity: a property holding one would be stored as `null`, which
/// does not read back, and the message could never be delivered. The whole batch is
/// refused instead (the shared row mapping's `RowError::NonFiniteProperty`).
pub async fn a_non_finite_property_is_refused_and_the_batch_stores_nothing(t: &TestStore) {
    let q = t.queue("q", QueuePolicy::default()).await;
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let mut m = msg("bad", b"bad");
        m.properties.insert("x".into(), PropertyValue::Float(bad));
        match t.s().enqueue(&q, vec![msg("ok", b"ok"), m], T0).await {
            Err(StoreError::Backend { source }) => assert!(
                matches!(
                    source.downcast_ref::<RowError>(),
                    Some(RowError::NonFiniteProperty { name }) if name == "x"
                ),
                "{source}"
            ),
            other => panic!("expected a backend error, got {other:?}"),
        }
    }
    assert!(t.sequences(&q).await.is_empty(), "the batch stored nothing");
    // Finite floats round-trip as floats.
    let mut m = msg("two", b"two");
    m.properties.insert("x".into(), PropertyValue::Float(2.0));
    t.send(&q, vec![m.clone()], T0).await;
    let got = t.s().peek(&q, 1, 10, T0).await.expect("peek");
    assert_eq!(got[0].properties, m.properties);
}

pub async fn session_id_on_plain_queue_is_an_attribute(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    t.send(&q, vec![session_msg("a", "s1"), msg("b", b"b")], T0)
        .await;
    let d = t.take(&q, 10, 30_000, T0).await;
    assert_eq!(seqs(&d), [1, 2], "received without a session");
    assert_eq!(d[0].message.session_id.as_deref(), Some("s1"));
    assert_eq!(d[1].message.session_id, None);
}

pub async fn scheduled_message_invisible_until_time(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let r = t
        .send(
            &q,
            vec![
                NewMessage {
                    scheduled_at: Some(secs(10)),
                    ..msg("later", b"later")
                },
                NewMessage {
                    scheduled_at: Some(at(-5_000)),
                    ..msg("past", b"past")
                },
            ],
            T0,
        )
        .await;
    let peeked = t.s().peek(&q, 1, 10, T0).await.unwrap();
    assert_eq!(peeked[0].visible_at, secs(10));
    assert_eq!(peeked[0].scheduled_at, Some(secs(10)));
    assert_eq!(
        peeked[1].visible_at, T0,
        "a past schedule is visible at once"
    );
    let c = t.counts(&q, T0).await;
    assert_eq!((c.active, c.scheduled), (1, 1));

    let d = t.take(&q, 10, 30_000, T0).await;
    assert_eq!(seqs(&d), [r[1].sequence]);
    assert_eq!(t.s().next_wake(&q, T0).await.unwrap(), Some(secs(10)));
    assert!(t.take(&q, 10, 30_000, at(9_999)).await.is_empty());
    let d = t.take(&q, 10, 30_000, secs(10)).await;
    assert_eq!(seqs(&d), [r[0].sequence]);
    assert_eq!(d[0].message.scheduled_at, Some(secs(10)));
}

pub async fn cancel_scheduled_removes_it(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let seq = t
        .send(
            &q,
            vec![NewMessage {
                scheduled_at: Some(secs(10)),
                ..msg("later", b"later")
            }],
            T0,
        )
        .await[0]
        .sequence;
    t.s().cancel_scheduled(&q, seq, secs(5)).await.unwrap();
    assert!(t.sequences(&q).await.is_empty());
    assert!(t.take(&q, 10, 30_000, secs(10)).await.is_empty());
    assert_eq!(t.s().next_wake(&q, secs(5)).await.unwrap(), None);
    assert_err!(
        t.s().cancel_scheduled(&q, seq, secs(5)).await,
        StoreError::MessageNotFound { .. }
    );
}

pub async fn cancel_scheduled_refuses_messages_that_are_not_scheduled(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let plain = t.send1(&q, "plain", T0).await;
    let due = t
        .send(
            &q,
            vec![NewMessage {
                scheduled_at: Some(secs(10)),
                ..msg("due", b"due")
            }],
            T0,
        )
        .await[0]
        .sequence;
    assert_err!(
        t.s().cancel_scheduled(&q, plain, T0).await,
        StoreError::MessageNotFound { .. }
    );
    assert_err!(
        t.s().cancel_scheduled(&q, due, secs(10)).await,
        StoreError::MessageNotFound { .. }
    );
    assert_err!(
        t.s().cancel_scheduled(&q, 999, T0).await,
        StoreError::MessageNotFound { .. }
    );
    assert_eq!(
        t.sequences(&q).await,
        [plain, due],
        "refusals change nothing"
    );
}

pub async fn peek_browses_without_locking_or_counting(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    t.send(&q, vec![msg("1", b"1"), msg("2", b"2"), msg("3", b"3")], T0)
        .await;
    let p = t.s().peek(&q, 2, 5, T0).await.unwrap();
    assert_eq!(p.iter().map(|m| m.sequence).collect::<Vec<_>>(), [2, 3]);
    let p = t.s().peek(&q, 1, 2, T0).await.unwrap();
    assert_eq!(p.iter().map(|m| m.sequence).collect::<Vec<_>>(), [1, 2]);
    assert!(p.iter().all(|m| m.delivery_count == 0));

    let d = t.take(&q, 1, 30_000, secs(1)).await;
    assert_eq!(seqs(&d), [1], "peek locked nothing");
    assert_eq!(d[0].message.delivery_count, 1, "peek counted nothing");
    let p = t.s().peek(&q, 1, 1, T0).await.unwrap();
    assert_eq!(p[0].state, MessageState::Locked);
    assert_eq!(p[0].delivery_count, 1);
    assert_eq!(p[0].locked_until, Some(secs(31)));
}
