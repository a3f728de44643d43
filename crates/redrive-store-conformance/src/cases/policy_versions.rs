//! A queue's policy history: one version per create and update, newest first, paged by
//! version, gone with the queue.

use super::prelude::*;

pub async fn policy_versions_are_kept_newest_first_and_go_with_the_queue(t: &TestStore) {
    let s = t.s();
    let q = name("orders");
    let v1 = policy(|p| p.max_delivery_count = 3);
    let v2 = policy(|p| p.max_delivery_count = 5);
    let v3 = policy(|p| p.max_delivery_count = 7);
    s.create_queue(&q, &v1, T0).await.unwrap();
    s.update_queue(&q, &v2, Some(1), secs(1)).await.unwrap();
    s.update_queue(&q, &v3, None, secs(2)).await.unwrap();
    // Another queue's history is its own.
    t.queue("billing", QueuePolicy::default()).await;

    let all = s.list_policy_versions(&q, None, 100).await.unwrap();
    let seen: Vec<(u64, u32, Timestamp)> = all
        .iter()
        .map(|v| (v.version, v.policy.max_delivery_count, v.changed_at))
        .collect();
    assert_eq!(
        seen,
        [(3, 7, secs(2)), (2, 5, secs(1)), (1, 3, T0)],
        "newest first, each policy as written"
    );
    assert_eq!(all[0].policy, v3);

    // Keyset pages by version.
    let first = s.list_policy_versions(&q, None, 2).await.unwrap();
    assert_eq!(first.iter().map(|v| v.version).collect::<Vec<_>>(), [3, 2]);
    let rest = s.list_policy_versions(&q, Some(2), 2).await.unwrap();
    assert_eq!(rest.iter().map(|v| v.version).collect::<Vec<_>>(), [1]);
    assert_eq!(rest[0].policy, v1);
    assert!(
        s.list_policy_versions(&q, Some(1), 2)
            .await
            .unwrap()
            .is_empty()
    );

    let other = s
        .list_policy_versions(&name("billing"), None, 100)
        .await
        .unwrap();
    assert_eq!(other.len(), 1);
    assert_eq!(other[0].version, 1);

    // A refused update writes no version.
    assert_err!(
        s.update_queue(&q, &v1, Some(1), secs(3)).await,
        StoreError::VersionConflict { .. }
    );
    assert_eq!(
        s.list_policy_versions(&q, None, 100).await.unwrap().len(),
        3
    );

    s.delete_queue(&q, true).await.unwrap();
    assert_err!(
        s.list_policy_versions(&q, None, 100).await,
        StoreError::QueueNotFound { .. }
    );
    // A queue made again under the name starts a history of its own.
    s.create_queue(&q, &v2, secs(4)).await.unwrap();
    let again = s.list_policy_versions(&q, None, 100).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].version, again[0].changed_at), (1, secs(4)));
    assert_eq!(again[0].policy, v2);
}
