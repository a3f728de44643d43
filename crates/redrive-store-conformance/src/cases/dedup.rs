//! Duplicate detection on message id within the queue's window.

use super::prelude::*;

fn window(ms: u64) -> QueuePolicy {
    policy(|p| p.duplicate_detection_window_ms = ms)
}

pub async fn duplicate_id_within_window_is_not_enqueued_again(t: &TestStore) {
    let q = t.queue("orders", window(60_000)).await;
    let first = t.send(&q, vec![msg("a", b"first")], T0).await;
    assert_eq!((first[0].sequence, first[0].duplicate), (1, false));
    let again = t.send(&q, vec![msg("a", b"second")], at(59_999)).await;
    assert_eq!(again[0].message_id, "a");
    assert_eq!((again[0].sequence, again[0].duplicate), (1, true));
    let p = t.s().peek(&q, 1, 10, T0).await.unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].body, b"first", "nothing stored for the duplicate");

    // Still a duplicate after the original was completed.
    let d = t.take(&q, 1, 30_000, secs(1)).await;
    t.settle1(&q, &d[0].lock_token, SettleAction::Complete, secs(1))
        .await
        .unwrap();
    let again = t.send(&q, vec![msg("a", b"third")], secs(30)).await;
    assert_eq!((again[0].sequence, again[0].duplicate), (1, true));
    assert!(t.sequences(&q).await.is_empty());
    // Other ids are unaffected.
    assert_eq!(t.send1(&q, "b", secs(30)).await, 2);
}

pub async fn duplicate_after_window_is_enqueued(t: &TestStore) {
    let q = t.queue("orders", window(60_000)).await;
    t.send1(&q, "a", T0).await;
    let later = t.send(&q, vec![msg("a", b"again")], secs(60)).await;
    assert_eq!((later[0].sequence, later[0].duplicate), (2, false));
    assert_eq!(t.sequences(&q).await, [1, 2]);
    // The window now runs from the second enqueue.
    let dup = t.send(&q, vec![msg("a", b"x")], secs(100)).await;
    assert_eq!((dup[0].sequence, dup[0].duplicate), (2, true));
}

pub async fn duplicate_inside_one_batch_counts_once(t: &TestStore) {
    let q = t.queue("orders", window(60_000)).await;
    let r = t
        .send(&q, vec![msg("a", b"1"), msg("b", b"2"), msg("a", b"3")], T0)
        .await;
    let got: Vec<(i64, bool)> = r.iter().map(|e| (e.sequence, e.duplicate)).collect();
    assert_eq!(got, [(1, false), (2, false), (1, true)]);
    let p = t.s().peek(&q, 1, 10, T0).await.unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!(p[0].body, b"1");
}

pub async fn without_window_same_id_is_enqueued_twice(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let r = t.send(&q, vec![msg("a", b"1"), msg("a", b"2")], T0).await;
    assert_eq!(
        r.iter()
            .map(|e| (e.sequence, e.duplicate))
            .collect::<Vec<_>>(),
        [(1, false), (2, false)]
    );
    assert_eq!(t.send1(&q, "a", T0).await, 3);
}
