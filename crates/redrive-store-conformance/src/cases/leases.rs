//! Leases: the election of the one process that runs once-only work (the sweep).

use super::prelude::*;

pub async fn lease_is_held_by_one_holder_until_it_runs_out(t: &TestStore) {
    let s = t.s();
    assert!(s.try_lease("sweeper", "node-a", 5_000, T0).await.unwrap());
    assert!(
        !s.try_lease("sweeper", "node-b", 5_000, at(1))
            .await
            .unwrap(),
        "held by a"
    );
    assert!(
        s.try_lease("sweeper", "node-a", 5_000, at(4_000))
            .await
            .unwrap(),
        "the holder renews"
    );
    assert!(
        !s.try_lease("sweeper", "node-b", 5_000, at(8_999))
            .await
            .unwrap(),
        "the renewal counts from its own time"
    );
    assert!(
        s.try_lease("sweeper", "node-b", 5_000, at(9_000))
            .await
            .unwrap(),
        "an expired lease is taken over"
    );
    assert!(
        !s.try_lease("sweeper", "node-a", 5_000, at(9_001))
            .await
            .unwrap()
    );
    assert!(
        s.try_lease("other", "node-a", 5_000, at(9_001))
            .await
            .unwrap(),
        "leases are independent by name"
    );
}
