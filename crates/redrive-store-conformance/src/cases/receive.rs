//! Peek-lock receive: locks, order, delivery counts, lock expiry, wake times.

use super::prelude::*;

pub async fn receive_hides_message_until_lock_expires(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let seq = t.send1(&q, "m", T0).await;
    let d = t.take(&q, 10, 30_000, T0).await;
    assert_eq!(d.len(), 1);
    let first = &d[0];
    assert_eq!(first.message.sequence, seq);
    assert_eq!(first.message.state, MessageState::Locked);
    assert_eq!(first.message.delivery_count, 1);
    assert_eq!(first.locked_until, secs(30));
    assert_eq!(first.message.locked_until, Some(secs(30)));
    assert!(!first.lock_token.is_empty());

    assert!(t.take(&q, 10, 30_000, secs(1)).await.is_empty());
    assert!(t.take(&q, 10, 30_000, at(29_999)).await.is_empty());
    let c = t.counts(&q, secs(1)).await;
    assert_eq!((c.active, c.locked), (0, 1));

    let out = t.recv(&q, 10, 30_000, secs(30)).await;
    assert_eq!(
        seqs(&out.deliveries),
        [seq],
        "the lock ran out: delivered again"
    );
    assert_eq!(out.deliveries[0].message.delivery_count, 2);
    assert_ne!(out.deliveries[0].lock_token, first.lock_token);
    assert_eq!(
        out.effects
            .lock_expired
            .iter()
            .map(|m| m.sequence)
            .collect::<Vec<_>>(),
        [seq],
        "the expired lock is reported"
    );
}

pub async fn receive_returns_oldest_first_up_to_max(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    for i in 0..5 {
        t.send1(&q, &format!("m{i}"), at(i)).await;
    }
    assert_eq!(seqs(&t.take(&q, 2, 30_000, secs(1)).await), [1, 2]);
    assert_eq!(seqs(&t.take(&q, 10, 30_000, secs(1)).await), [3, 4, 5]);
    assert!(t.take(&q, 10, 30_000, secs(1)).await.is_empty());
    assert!(t.take(&q, 0, 30_000, secs(1)).await.is_empty());
}

pub async fn receive_counts_deliveries_and_records_delivery_times(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    t.send1(&q, "m", T0).await;
    let d = t.take(&q, 1, 30_000, secs(1)).await;
    let m = &d[0].message;
    assert_eq!(m.delivery_count, 1);
    assert_eq!(
        (m.first_delivered_at, m.last_delivered_at),
        (Some(secs(1)), Some(secs(1)))
    );
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
    let d = t.take(&q, 1, 30_000, secs(5)).await;
    let m = &d[0].message;
    assert_eq!(m.delivery_count, 2);
    assert_eq!(
        (m.first_delivered_at, m.last_delivered_at),
        (Some(secs(1)), Some(secs(5)))
    );
    assert_eq!(m.enqueued_at, T0);
    let p = t.s().peek(&q, 1, 1, secs(5)).await.unwrap();
    assert_eq!(
        p[0].delivery_count, 2,
        "the count is stored, not just returned"
    );
}

pub async fn lock_expiry_counts_as_abandon(t: &TestStore) {
    let q = t
        .queue("orders", policy(|p| p.max_delivery_count = 2))
        .await;
    let seq = t.send1(&q, "m", T0).await;
    let d1 = t.take(&q, 1, 10_000, T0).await;
    assert_eq!(d1[0].message.delivery_count, 1);
    // Never settled: at expiry it is released like an abandon and delivered again.
    let out = t.recv(&q, 1, 10_000, secs(10)).await;
    assert_eq!(out.deliveries[0].message.delivery_count, 2);
    assert_eq!(out.effects.lock_expired.len(), 1);
    assert_err!(
        t.settle1(&q, &d1[0].lock_token, SettleAction::Complete, secs(11))
            .await,
        StoreError::LockLost
    );
    // Expiring again at the max count dead-letters it instead.
    let out = t.recv(&q, 1, 10_000, secs(20)).await;
    assert!(out.deliveries.is_empty());
    assert_eq!(out.effects.lock_expired.len(), 1);
    assert_eq!(out.effects.dead_lettered.len(), 1);
    let dl = &out.effects.dead_lettered[0];
    assert_eq!(dl.reason, DeadLetterReason::MaxDeliveryCountExceeded);
    assert_eq!(dl.message.sequence, seq);
    assert_eq!(dl.message.delivery_count, 2);
    let r = t.s().get_dead_letter(&q, &dl.dead_letter_id).await.unwrap();
    assert_eq!(r.delivery_count, 2);
    assert_eq!(r.route, RouteKind::Broker);
    assert_eq!(r.last_delivered_at, Some(secs(10)));
    assert!(t.sequences(&q).await.is_empty());
}

pub async fn a_lock_that_ran_out_is_shown_released_before_any_sweep(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    t.send1(&q, "m", T0).await;
    let d = t.take(&q, 1, 10_000, T0).await;
    assert_eq!(d[0].locked_until, secs(10));
    // While the lock holds, browse and counts show it locked.
    let p = t.s().peek(&q, 1, 1, at(9_999)).await.unwrap();
    assert_eq!(p[0].state, MessageState::Locked);
    assert_eq!(p[0].locked_until, Some(secs(10)));
    let c = t.counts(&q, at(9_999)).await;
    assert_eq!((c.active, c.locked), (0, 1));
    // From the lock's expiry on, with no sweep and no receive since: available at once,
    // unlocked, its delivery still counted, and the counts agree.
    let p = t.s().peek(&q, 1, 1, secs(10)).await.unwrap();
    assert_eq!(
        (p[0].state, p[0].locked_until, p[0].delivery_count),
        (MessageState::Available, None, 1)
    );
    assert_eq!(p[0].visible_at, secs(10));
    let c = t.counts(&q, secs(10)).await;
    assert_eq!((c.active, c.scheduled, c.locked, c.deferred), (1, 0, 0, 0));
    // ... and settlement answers what the view says: the lock is lost.
    assert_err!(
        t.settle1(&q, &d[0].lock_token, SettleAction::Complete, secs(10))
            .await,
        StoreError::LockLost
    );

    // With a redelivery backoff, the view is what the sweep will write: scheduled after
    // the backoff from the lock's expiry.
    let b = t
        .queue(
            "backoff",
            policy(|p| p.redelivery_backoff = Backoff::Fixed { delay_ms: 5_000 }),
        )
        .await;
    t.send1(&b, "m", T0).await;
    t.take(&b, 1, 10_000, T0).await;
    let p = t.s().peek(&b, 1, 1, secs(12)).await.unwrap();
    assert_eq!(
        (p[0].state, p[0].visible_at, p[0].locked_until),
        (MessageState::Available, secs(15), None)
    );
    let c = t.counts(&b, secs(12)).await;
    assert_eq!((c.active, c.scheduled, c.locked), (0, 1, 0));
    // The sweep then writes just that.
    t.s().sweep(secs(12), 100).await.unwrap();
    assert_eq!(t.s().peek(&b, 1, 1, secs(12)).await.unwrap(), p);
    assert_eq!(t.counts(&b, secs(12)).await, c);
}

pub async fn receive_on_session_queue_without_session_is_session_required(t: &TestStore) {
    let q = t
        .queue("orders", policy(|p| p.requires_session = true))
        .await;
    t.send(&q, vec![session_msg("a", "s1")], T0).await;
    assert_err!(
        t.s().receive(params(&q, 1, 30_000, T0, None)).await,
        StoreError::SessionRequired { .. }
    );
    assert_eq!(t.counts(&q, T0).await.active, 1, "nothing was locked");
}

pub async fn receive_with_session_on_plain_queue_is_session_not_allowed(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    t.send(&q, vec![session_msg("a", "s1")], T0).await;
    let s = SessionRef {
        session_id: "s1".into(),
        lock_token: "lk_none".into(),
    };
    assert_err!(
        t.s().receive(params(&q, 1, 30_000, T0, Some(s))).await,
        StoreError::SessionNotAllowed { .. }
    );
    assert_eq!(t.counts(&q, T0).await.active, 1);
}

pub async fn next_wake_reports_schedule_and_lock_expiry(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    assert_eq!(t.s().next_wake(&q, T0).await.unwrap(), None);
    t.send(
        &q,
        vec![NewMessage {
            scheduled_at: Some(secs(50)),
            ..msg("later", b"later")
        }],
        T0,
    )
    .await;
    assert_eq!(t.s().next_wake(&q, T0).await.unwrap(), Some(secs(50)));
    t.send1(&q, "now", T0).await;
    assert_eq!(
        t.s().next_wake(&q, T0).await.unwrap(),
        Some(secs(50)),
        "a visible message is no future wake"
    );
    let d = t.take(&q, 1, 10_000, T0).await;
    assert_eq!(
        t.s().next_wake(&q, T0).await.unwrap(),
        Some(secs(10)),
        "a lock running out makes its message receivable again"
    );
    t.settle1(&q, &d[0].lock_token, SettleAction::Complete, secs(1))
        .await
        .unwrap();
    assert_eq!(t.s().next_wake(&q, secs(1)).await.unwrap(), Some(secs(50)));
}

pub async fn lowered_max_delivery_count_dead_letters_on_receive(t: &TestStore) {
    let q = t
        .queue("orders", policy(|p| p.max_delivery_count = 5))
        .await;
    t.send1(&q, "m", T0).await;
    for i in 0..2 {
        let d = t.take(&q, 1, 30_000, secs(i)).await;
        t.settle1(
            &q,
            &d[0].lock_token,
            SettleAction::Abandon {
                delay_ms: None,
                last_attempt: None,
            },
            secs(i),
        )
        .await
        .unwrap();
    }
    t.s()
        .update_queue(&q, &policy(|p| p.max_delivery_count = 2), Some(1), secs(3))
        .await
        .unwrap();
    let out = t.recv(&q, 1, 30_000, secs(4)).await;
    assert!(out.deliveries.is_empty(), "not delivered a third time");
    assert_eq!(out.effects.dead_lettered.len(), 1);
    let r = t
        .s()
        .get_dead_letter(&q, &out.effects.dead_lettered[0].dead_letter_id)
        .await
        .unwrap();
    assert_eq!(r.reason, "MaxDeliveryCountExceeded");
    assert_eq!(r.delivery_count, 2);
    assert_eq!(r.policy_version, Some(2));
}
