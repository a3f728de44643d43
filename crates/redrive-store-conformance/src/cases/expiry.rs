//! Time to live: expired messages are never delivered; they are dead-lettered or removed,
//! and always reported.

use super::prelude::*;

fn expiring(id: &str, at: Timestamp) -> NewMessage {
    NewMessage {
        expires_at: Some(at),
        ..msg(id, id.as_bytes())
    }
}

pub async fn expired_message_is_never_delivered(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let seq = t.send(&q, vec![expiring("m1", secs(10))], T0).await[0].sequence;
    let out = t.recv(&q, 10, 30_000, secs(10)).await;
    assert!(out.deliveries.is_empty());
    assert_eq!(
        out.effects
            .expired
            .iter()
            .map(|m| m.sequence)
            .collect::<Vec<_>>(),
        [seq]
    );
    assert!(t.sequences(&q).await.is_empty());

    // Expiring while locked: the lock is honoured, then the message expires instead of
    // coming back.
    let seq = t.send(&q, vec![expiring("m2", secs(30))], secs(20)).await[0].sequence;
    let d = t.take(&q, 1, 30_000, secs(20)).await;
    assert_eq!(seqs(&d), [seq]);
    let out = t.recv(&q, 10, 30_000, secs(50)).await;
    assert!(out.deliveries.is_empty());
    assert_eq!(out.effects.lock_expired.len(), 1);
    assert_eq!(
        out.effects
            .expired
            .iter()
            .map(|m| m.sequence)
            .collect::<Vec<_>>(),
        [seq]
    );
    assert!(t.sequences(&q).await.is_empty());
}

pub async fn ttl_expiry_dead_letters_with_real_count_when_enabled(t: &TestStore) {
    let q = t
        .queue("orders", policy(|p| p.dead_letter_on_expiry = true))
        .await;
    // "one" is delivered once and abandoned; "zero" is never delivered.
    let one = t.send(&q, vec![expiring("one", secs(10))], T0).await[0].sequence;
    let d = t.take(&q, 1, 5_000, T0).await;
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
    let zero = t.send(&q, vec![expiring("zero", secs(10))], secs(3)).await[0].sequence;

    let out = t.s().sweep(secs(10), 100).await.unwrap();
    assert!(!out.more);
    assert!(out.effects.expired.is_empty(), "dead-lettered, not dropped");
    assert_eq!(out.effects.dead_lettered.len(), 2);
    assert!(
        out.effects
            .dead_lettered
            .iter()
            .all(|d| d.reason == DeadLetterReason::TtlExpired)
    );
    let by_seq = |s: i64| {
        out.effects
            .dead_lettered
            .iter()
            .find(|d| d.message.sequence == s)
            .unwrap()
            .dead_letter_id
            .clone()
    };
    let rec = t.s().get_dead_letter(&q, &by_seq(zero)).await.unwrap();
    assert_eq!(rec.reason, "TTLExpired");
    assert_eq!(rec.delivery_count, 0, "never delivered: count 0");
    assert_eq!(
        (rec.first_delivered_at, rec.last_delivered_at),
        (None, None)
    );
    assert_eq!(rec.route, RouteKind::Broker);
    assert_eq!(rec.count_quality, EvidenceQuality::Exact);
    assert_eq!(rec.enqueued_at, secs(3));
    assert_eq!(rec.dead_lettered_at, secs(10));
    assert_eq!(rec.body, b"zero");
    let rec = t.s().get_dead_letter(&q, &by_seq(one)).await.unwrap();
    assert_eq!(rec.reason, "TTLExpired");
    assert_eq!(rec.delivery_count, 1, "the real count");
    assert_eq!(
        (rec.first_delivered_at, rec.last_delivered_at),
        (Some(T0), Some(T0))
    );
    assert_eq!(rec.count_quality, EvidenceQuality::Exact);
    assert!(t.sequences(&q).await.is_empty());
    assert_eq!(t.counts(&q, secs(10)).await.dead_lettered, 2);
}

pub async fn ttl_expiry_without_dlq_is_removed_and_reported(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let r = t
        .send(
            &q,
            vec![
                expiring("a", secs(10)),
                expiring("b", secs(10)),
                expiring("c", secs(20)),
                msg("d", b"forever"),
            ],
            T0,
        )
        .await;
    let out = t.s().sweep(at(9_999), 100).await.unwrap();
    assert_eq!(out.effects, Default::default(), "nothing due yet");
    let out = t.s().sweep(secs(10), 100).await.unwrap();
    let mut expired: Vec<(i64, String, u32)> = out
        .effects
        .expired
        .iter()
        .map(|m| (m.sequence, m.message_id.clone(), m.delivery_count))
        .collect();
    expired.sort();
    assert_eq!(
        expired,
        [
            (r[0].sequence, "a".into(), 0),
            (r[1].sequence, "b".into(), 0)
        ]
    );
    assert!(out.effects.dead_lettered.is_empty());
    assert_eq!(t.sequences(&q).await, [r[2].sequence, r[3].sequence]);
    assert_eq!(
        t.counts(&q, secs(10)).await.dead_lettered,
        0,
        "no record kept"
    );
}

pub async fn expired_deferred_message_is_expired_not_delivered(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let seq = t.send(&q, vec![expiring("m", secs(10))], T0).await[0].sequence;
    let d = t.take(&q, 1, 30_000, T0).await;
    t.settle1(&q, &d[0].lock_token, SettleAction::Defer, secs(1))
        .await
        .unwrap();
    let out = t
        .s()
        .receive_deferred(&q, &[seq], 30_000, secs(10))
        .await
        .unwrap();
    assert!(out.deliveries.is_empty());
    assert_eq!(
        out.effects
            .expired
            .iter()
            .map(|m| m.sequence)
            .collect::<Vec<_>>(),
        [seq]
    );
    assert!(t.sequences(&q).await.is_empty());
}

pub async fn abandon_after_ttl_removes_message(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    t.send(&q, vec![expiring("m", secs(10))], T0).await;
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
            secs(15),
        )
        .await
        .unwrap();
    assert!(out.results[0].is_ok());
    assert_eq!(out.effects.expired.len(), 1);
    assert!(t.sequences(&q).await.is_empty());
}
