//! Concurrent callers: no message is delivered twice, no sequence is handed out twice, a
//! lock is settled once.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::prelude::*;

pub async fn two_receivers_never_get_same_message(t: &TestStore) {
    const MESSAGES: usize = 300;
    const RECEIVERS: usize = 8;
    let q = t.queue("orders", QueuePolicy::default()).await;
    let batch: Vec<NewMessage> = (0..MESSAGES).map(|i| msg(&format!("m{i}"), b"x")).collect();
    for chunk in batch.chunks(100) {
        t.send(&q, chunk.to_vec(), T0).await;
    }
    let mut tasks = Vec::new();
    for r in 0..RECEIVERS {
        let store = Arc::clone(&t.store);
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let max = u32::try_from(1 + r % 7).unwrap();
                let out = store
                    .receive(params(&q, max, 300_000, secs(1), None))
                    .await
                    .unwrap();
                if out.deliveries.is_empty() {
                    return got;
                }
                got.extend(
                    out.deliveries
                        .into_iter()
                        .map(|d| (d.message.sequence, d.lock_token)),
                );
            }
        }));
    }
    let mut sequences = Vec::new();
    let mut tokens = BTreeSet::new();
    for task in tasks {
        for (seq, token) in task.await.unwrap() {
            sequences.push(seq);
            assert!(tokens.insert(token), "lock tokens are unique");
        }
    }
    sequences.sort_unstable();
    let expected: Vec<i64> = (1..=i64::try_from(MESSAGES).unwrap()).collect();
    assert_eq!(sequences, expected, "every message delivered exactly once");
    assert_eq!(t.counts(&q, secs(1)).await.locked, MESSAGES as u64);
}

pub async fn concurrent_enqueues_get_distinct_sequences(t: &TestStore) {
    const TASKS: usize = 16;
    const EACH: usize = 20;
    let q = t.queue("orders", QueuePolicy::default()).await;
    let mut tasks = Vec::new();
    for k in 0..TASKS {
        let store = Arc::clone(&t.store);
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..EACH {
                let r = store
                    .enqueue(&q, vec![msg(&format!("{k}-{i}"), b"x")], T0)
                    .await
                    .unwrap();
                seqs.push(r[0].sequence);
            }
            seqs
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let mine = task.await.unwrap();
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "in order per caller");
        all.extend(mine);
    }
    all.sort_unstable();
    let n = i64::try_from(TASKS * EACH).unwrap();
    assert_eq!(all, (1..=n).collect::<Vec<_>>());
    assert_eq!(
        t.sequences(&q).await.len(),
        TASKS * EACH,
        "every acknowledged enqueue is stored"
    );
}

pub async fn concurrent_settlements_of_one_lock_succeed_once(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    t.send1(&q, "m", T0).await;
    let d = t.take(&q, 1, 30_000, T0).await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = Arc::clone(&t.store);
        let q = q.clone();
        let token = d[0].lock_token.clone();
        tasks.push(tokio::spawn(async move {
            let action = if i % 2 == 0 {
                SettleAction::Complete
            } else {
                SettleAction::Abandon {
                    delay_ms: None,
                    last_attempt: None,
                }
            };
            let mut out = store
                .settle(
                    &q,
                    vec![Settlement {
                        lock_token: token,
                        action,
                    }],
                    secs(1),
                )
                .await
                .unwrap();
            out.results.remove(0)
        }));
    }
    let mut ok = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => ok += 1,
            Err(StoreError::LockLost) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(ok, 1, "exactly one settlement wins");
}
