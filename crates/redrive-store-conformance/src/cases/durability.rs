//! Durability: what was acknowledged is there after a reopen.

use super::prelude::*;

fn can_reopen(t: &TestStore, case: &str) -> bool {
    if !t.store.capabilities().durable {
        eprintln!("skipping {case}: the backend is not durable");
        return false;
    }
    if t.reopen.is_none() {
        eprintln!("skipping {case}: the harness cannot reopen this backend");
        return false;
    }
    true
}

pub async fn acknowledged_enqueue_survives_reopen(t: &TestStore) {
    if !can_reopen(t, "acknowledged_enqueue_survives_reopen") {
        return;
    }
    let q = t
        .queue(
            "orders",
            policy(|p| p.duplicate_detection_window_ms = 600_000),
        )
        .await;
    for b in 0..5 {
        let batch = (0..20).map(|i| msg(&format!("m{b}-{i}"), b"x")).collect();
        t.send(&q, batch, T0).await;
    }
    let d = t.take(&q, 10, 300_000, secs(1)).await;
    for x in &d[..5] {
        t.settle1(&q, &x.lock_token, SettleAction::Complete, secs(1))
            .await
            .unwrap();
    }
    let before = t.counts(&q, secs(2)).await;

    let s = (t.reopen.as_ref().unwrap())();
    let after = s.queue_counts(&q, secs(2)).await.unwrap();
    assert_eq!(after, before);
    assert_eq!(after.messages(), 95);
    assert_eq!(s.get_queue(&q).await.unwrap().policy_version, 1);
    let p = s.peek(&q, 1, 1_000, T0).await.unwrap();
    assert_eq!(p.len(), 95);
    assert_eq!(p[0].sequence, 6);
    // Sequence numbers continue; duplicate detection remembers.
    let dup = s
        .enqueue(&q, vec![msg("m0-0", b"x")], secs(3))
        .await
        .unwrap();
    assert!(dup[0].duplicate);
    let next = s
        .enqueue(&q, vec![msg("new", b"x")], secs(3))
        .await
        .unwrap();
    assert_eq!(next[0].sequence, 101);
}

pub async fn locks_and_dead_letters_survive_reopen(t: &TestStore) {
    if !can_reopen(t, "locks_and_dead_letters_survive_reopen") {
        return;
    }
    let q = t.queue("orders", QueuePolicy::default()).await;
    let id = t.dead_letter_one(&q, "dead", "Bad", T0).await;
    t.send1(&q, "held", T0).await;
    let d = t.take(&q, 1, 60_000, secs(1)).await;

    let s = (t.reopen.as_ref().unwrap())();
    let r = s.get_dead_letter(&q, &id).await.unwrap();
    assert_eq!((r.reason.as_str(), r.area), ("Bad", Area::Live));
    assert!(
        s.receive(params(&q, 1, 60_000, secs(2), None))
            .await
            .unwrap()
            .deliveries
            .is_empty(),
        "the lock survived"
    );
    let mut out = s
        .settle(
            &q,
            vec![Settlement {
                lock_token: d[0].lock_token.clone(),
                action: SettleAction::Complete,
            }],
            secs(3),
        )
        .await
        .unwrap();
    out.results.remove(0).unwrap();
    assert!(s.peek(&q, 1, 10, T0).await.unwrap().is_empty());
}
