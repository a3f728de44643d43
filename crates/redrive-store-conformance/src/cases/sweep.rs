//! The background sweep: lock expiry and message expiry across queues, bounded.

use super::prelude::*;

pub async fn sweep_releases_expired_locks_across_queues(t: &TestStore) {
    let a = t.queue("a", QueuePolicy::default()).await;
    let b = t.queue("b", QueuePolicy::default()).await;
    t.send1(&a, "m", T0).await;
    t.send1(&b, "m", T0).await;
    t.take(&a, 1, 10_000, T0).await;
    t.take(&b, 1, 10_000, T0).await;

    let out = t.s().sweep(at(9_999), 100).await.unwrap();
    assert_eq!(out.effects, Default::default());
    assert!(!out.more);

    let out = t.s().sweep(secs(10), 100).await.unwrap();
    assert!(!out.more);
    let mut released: Vec<String> = out
        .effects
        .lock_expired
        .iter()
        .map(|m| m.queue.to_string())
        .collect();
    released.sort();
    assert_eq!(released, ["a", "b"]);
    assert!(out.effects.woken.contains(&a) && out.effects.woken.contains(&b));
    for q in [&a, &b] {
        let c = t.counts(q, secs(10)).await;
        assert_eq!((c.active, c.locked), (1, 0));
        let p = t.s().peek(q, 1, 1, secs(10)).await.unwrap();
        assert_eq!(p[0].delivery_count, 1, "the delivery stays counted");
    }
    let again = t.s().sweep(secs(10), 100).await.unwrap();
    assert_eq!(again.effects, Default::default(), "nothing is swept twice");
}

pub async fn sweep_respects_limit_and_reports_more(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let batch = (0..5)
        .map(|i| NewMessage {
            expires_at: Some(secs(10)),
            ..msg(&format!("m{i}"), b"x")
        })
        .collect();
    t.send(&q, batch, T0).await;
    let mut seen = Vec::new();
    let mut rounds = 0;
    loop {
        let out = t.s().sweep(secs(10), 2).await.unwrap();
        assert!(out.effects.expired.len() <= 2, "at most the limit");
        seen.extend(out.effects.expired.iter().map(|m| m.sequence));
        rounds += 1;
        if !out.more {
            break;
        }
        assert!(rounds < 10, "the sweep makes progress");
    }
    seen.sort_unstable();
    assert_eq!(seen, [1, 2, 3, 4, 5]);
    assert!(rounds >= 3);
    assert!(t.sequences(&q).await.is_empty());
}

pub async fn sweep_dead_letters_at_max_count_on_lock_expiry(t: &TestStore) {
    let q = t
        .queue("orders", policy(|p| p.max_delivery_count = 1))
        .await;
    let seq = t.send1(&q, "m", T0).await;
    t.take(&q, 1, 10_000, secs(1)).await;
    let out = t.s().sweep(secs(11), 100).await.unwrap();
    assert_eq!(
        out.effects
            .lock_expired
            .iter()
            .map(|m| m.sequence)
            .collect::<Vec<_>>(),
        [seq]
    );
    assert_eq!(out.effects.dead_lettered.len(), 1);
    let r = t
        .s()
        .get_dead_letter(&q, &out.effects.dead_lettered[0].dead_letter_id)
        .await
        .unwrap();
    assert_eq!(r.reason, "MaxDeliveryCountExceeded");
    assert_eq!(r.delivery_count, 1);
    assert_eq!(r.route, RouteKind::Broker);
    assert_eq!(r.last_delivered_at, Some(secs(1)));
    assert_eq!(r.dead_lettered_at, secs(11));
    assert!(t.sequences(&q).await.is_empty());
}

pub async fn sweep_forgets_expired_duplicate_entries(t: &TestStore) {
    let q = t
        .queue(
            "orders",
            policy(|p| p.duplicate_detection_window_ms = 60_000),
        )
        .await;
    t.send1(&q, "a", T0).await;
    t.s().sweep(secs(30), 100).await.unwrap();
    let dup = t.send(&q, vec![msg("a", b"a")], secs(30)).await;
    assert!(
        dup[0].duplicate,
        "inside the window the entry survives a sweep"
    );
    t.s().sweep(secs(60), 100).await.unwrap();
    let fresh = t.send(&q, vec![msg("a", b"a")], secs(61)).await;
    assert!(!fresh[0].duplicate);
    assert_eq!(fresh[0].sequence, 2);
}
