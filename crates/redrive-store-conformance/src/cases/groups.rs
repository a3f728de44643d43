//! Group ordering (`QueuePolicy::group_ordering`, SQS FIFO message groups): order within a
//! group without session locks, groups independent of each other.

use super::prelude::*;

fn ids(d: &[redrive_store::Delivery]) -> Vec<&str> {
    d.iter().map(|d| d.message.message_id.as_str()).collect()
}

async fn grouped_queue(t: &TestStore) -> redrive_core::EntityName {
    t.queue("fifo", policy(|p| p.group_ordering = true)).await
}

pub async fn group_ordering_delivers_each_group_in_order_one_in_flight(t: &TestStore) {
    let q = grouped_queue(t).await;
    t.send(
        &q,
        vec![
            session_msg("a1", "g1"),
            session_msg("a2", "g1"),
            session_msg("a3", "g1"),
        ],
        T0,
    )
    .await;
    let first = t.take(&q, 2, 30_000, T0).await;
    assert_eq!(
        ids(&first),
        ["a1", "a2"],
        "consecutive messages of one group"
    );
    assert!(
        t.take(&q, 10, 30_000, secs(1)).await.is_empty(),
        "a3 waits while a1 and a2 are locked"
    );
    t.settle1(&q, &first[0].lock_token, SettleAction::Complete, secs(2))
        .await
        .unwrap();
    assert!(
        t.take(&q, 10, 30_000, secs(2)).await.is_empty(),
        "a2 is still locked"
    );
    t.settle1(&q, &first[1].lock_token, SettleAction::Complete, secs(3))
        .await
        .unwrap();
    let next = t.take(&q, 10, 30_000, secs(3)).await;
    assert_eq!(ids(&next), ["a3"]);
    assert!(t.take(&q, 10, 30_000, secs(4)).await.is_empty());
}

pub async fn group_ordering_lets_other_groups_pass_a_blocked_one(t: &TestStore) {
    let q = grouped_queue(t).await;
    t.send(
        &q,
        vec![
            session_msg("a1", "g1"),
            session_msg("a2", "g1"),
            session_msg("b1", "g2"),
            msg("p1", b"plain"),
            session_msg("b2", "g2"),
            session_msg("c1", "g3"),
        ],
        T0,
    )
    .await;
    let one = t.take(&q, 1, 30_000, T0).await;
    assert_eq!(ids(&one), ["a1"]);
    let rest = t.take(&q, 10, 30_000, secs(1)).await;
    assert_eq!(
        ids(&rest),
        ["b1", "b2", "p1", "c1"],
        "g1 is blocked; other groups and plain messages pass, each group in order"
    );
    assert!(t.take(&q, 10, 30_000, secs(2)).await.is_empty());
    t.settle1(&q, &one[0].lock_token, SettleAction::Complete, secs(3))
        .await
        .unwrap();
    assert_eq!(ids(&t.take(&q, 10, 30_000, secs(3)).await), ["a2"]);
}

pub async fn group_ordering_after_abandon_redelivers_the_same_head_first(t: &TestStore) {
    let q = grouped_queue(t).await;
    t.send(
        &q,
        vec![
            session_msg("m1", "g"),
            session_msg("m2", "g"),
            session_msg("m3", "g"),
        ],
        T0,
    )
    .await;
    let d = t.take(&q, 1, 10_000, T0).await;
    assert_eq!(ids(&d), ["m1"]);
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
    let d = t.take(&q, 1, 10_000, secs(1)).await;
    assert_eq!(ids(&d), ["m1"], "the abandoned head comes first again");
    assert_eq!(d[0].message.delivery_count, 2);
    // Its lock runs out: m1 again, before m2 and m3.
    let out = t.recv(&q, 10, 10_000, secs(12)).await;
    assert_eq!(out.effects.lock_expired.len(), 1);
    assert_eq!(ids(&out.deliveries), ["m1", "m2", "m3"]);
    assert_eq!(out.deliveries[0].message.delivery_count, 3);
}

/// One receive call: (receiver, call number).
type Call = (usize, i32);

pub async fn group_ordering_concurrent_receivers_never_share_a_group(t: &TestStore) {
    const GROUPS: usize = 30;
    const PER_GROUP: usize = 4;
    const RECEIVERS: usize = 6;
    let q = grouped_queue(t).await;
    let mut batch = Vec::new();
    for i in 0..PER_GROUP {
        for g in 0..GROUPS {
            batch.push(session_msg(&format!("g{g}-{i}"), &format!("g{g}")));
        }
    }
    t.send(&q, batch, T0).await;
    let mut tasks = Vec::new();
    for r in 0..RECEIVERS {
        let store = std::sync::Arc::clone(&t.store);
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            // (receive call number, group, message id) per delivery.
            let mut got = Vec::new();
            let mut call = 0;
            loop {
                let max = u32::try_from(1 + r % 5).unwrap();
                let out = store
                    .receive(params(&q, max, 300_000, secs(1), None))
                    .await
                    .unwrap();
                if out.deliveries.is_empty() {
                    return got;
                }
                call += 1;
                for d in out.deliveries {
                    let group = d.message.session_id.clone().unwrap();
                    got.push(((r, call), group, d.message.message_id));
                }
            }
        }));
    }
    let mut by_group: std::collections::BTreeMap<String, Vec<(Call, String)>> =
        std::collections::BTreeMap::new();
    for task in tasks {
        for (call, group, id) in task.await.unwrap() {
            by_group.entry(group).or_default().push((call, id));
        }
    }
    assert_eq!(by_group.len(), GROUPS, "every group's head was delivered");
    for (group, got) in by_group {
        let first_call = got[0].0;
        assert!(
            got.iter().all(|(c, _)| *c == first_call),
            "{group}: one receive took the group, nothing after it while locked: {got:?}"
        );
        let ids: Vec<&str> = got.iter().map(|(_, id)| id.as_str()).collect();
        let expected: Vec<String> = (0..ids.len()).map(|i| format!("{group}-{i}")).collect();
        assert_eq!(ids, expected, "{group}: a prefix of the group, in order");
    }
}
