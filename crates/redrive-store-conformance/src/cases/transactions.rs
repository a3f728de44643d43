//! Transactions: a group of sends, settlements and cancels of scheduled messages across
//! queues is applied whole or not at all, each operation decided as its single
//! counterpart, and seen by readers all at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use redrive_core::EntityName;
use redrive_store::{TransactionOutcome, TransactionRefusal, TxApplied, TxOperation};

use super::prelude::*;

fn send(q: &EntityName, m: NewMessage) -> TxOperation {
    TxOperation::Send {
        queue: q.clone(),
        message: m,
    }
}

fn settle(q: &EntityName, token: &str, action: SettleAction) -> TxOperation {
    TxOperation::Settle {
        queue: q.clone(),
        settlement: Settlement {
            lock_token: token.to_owned(),
            action,
        },
    }
}

fn complete(q: &EntityName, token: &str) -> TxOperation {
    settle(q, token, SettleAction::Complete)
}

fn dead_letter(reason: &str) -> SettleAction {
    SettleAction::DeadLetter {
        reason: reason.to_owned(),
        description: Some("in a transaction".into()),
        by_broker: false,
        classifier: redrive_core::Classifier::default(),
    }
}

impl TestStore {
    /// Applies a group expecting it to be applied.
    async fn apply(&self, ops: Vec<TxOperation>, now: Timestamp) -> TransactionOutcome {
        match self.store.apply_transaction(ops, now).await.unwrap() {
            Ok(outcome) => outcome,
            Err(refused) => panic!("the group was refused: {refused:?}"),
        }
    }

    /// Applies a group expecting it to be refused.
    async fn refuse(&self, ops: Vec<TxOperation>, now: Timestamp) -> TransactionRefusal {
        match self.store.apply_transaction(ops, now).await.unwrap() {
            Ok(outcome) => panic!("the group was applied: {:?}", outcome.results),
            Err(refused) => refused,
        }
    }
}

pub async fn a_transaction_whose_last_operation_lost_its_lock_applies_nothing(t: &TestStore) {
    let orders = t.queue("orders", QueuePolicy::default()).await;
    let payments = t
        .queue(
            "payments",
            policy(|p| p.duplicate_detection_window_ms = 600_000),
        )
        .await;
    t.send(
        &orders,
        vec![msg("a", b"a"), msg("b", b"b"), msg("c", b"c")],
        T0,
    )
    .await;
    let d = t.take(&orders, 3, 30_000, T0).await;
    // `c`'s lock is lost: completed already.
    t.settle1(&orders, &d[2].lock_token, SettleAction::Complete, secs(1))
        .await
        .unwrap();
    let scheduled = t
        .send(
            &orders,
            vec![NewMessage {
                scheduled_at: Some(secs(60)),
                ..msg("later", b"later")
            }],
            secs(1),
        )
        .await[0]
        .sequence;
    let before = t.counts(&orders, secs(2)).await;

    let refused = t
        .refuse(
            vec![
                send(&payments, msg("charge-a", b"charge")),
                complete(&orders, &d[0].lock_token),
                settle(&orders, &d[1].lock_token, dead_letter("Bad")),
                TxOperation::CancelScheduled {
                    queue: orders.clone(),
                    sequence: scheduled,
                },
                complete(&orders, &d[2].lock_token),
            ],
            secs(2),
        )
        .await;
    assert_eq!(refused.operation, 4);
    assert!(
        matches!(refused.error, StoreError::LockLost),
        "{:?}",
        refused.error
    );

    // Nothing of the group remains: no follow-up, `a` and `b` still locked by their
    // tokens, no dead letter, the scheduled message still there.
    assert!(t.sequences(&payments).await.is_empty());
    assert_eq!(t.counts(&payments, secs(2)).await, QueueCounts::default());
    assert_eq!(t.counts(&orders, secs(2)).await, before);
    assert_eq!(before.locked, 2);
    assert_eq!(before.scheduled, 1);
    assert!(
        t.s()
            .list_dead_letters(&DeadLetterQuery {
                queue: orders.clone(),
                area: Area::Live,
                reason: None,
                from: None,
                to: None,
                after: None,
                limit: 100,
                filter: Default::default(),
            })
            .await
            .unwrap()
            .is_empty()
    );
    // The rolled-back send left no duplicate-detection entry behind.
    let again = t
        .send(&payments, vec![msg("charge-a", b"x")], secs(3))
        .await;
    assert!(!again[0].duplicate, "the refused send was not remembered");
    // The tokens still settle.
    for token in [&d[0].lock_token, &d[1].lock_token] {
        t.settle1(&orders, token, SettleAction::Complete, secs(3))
            .await
            .unwrap();
    }
}

pub async fn a_good_transaction_applies_every_operation(t: &TestStore) {
    let orders = t.queue("orders", QueuePolicy::default()).await;
    let payments = t.queue("payments", QueuePolicy::default()).await;
    let audit = t
        .queue(
            "audit-trail",
            policy(|p| p.duplicate_detection_window_ms = 600_000),
        )
        .await;
    t.send1(&audit, "seen", T0).await;
    t.send(
        &orders,
        (0..4).map(|i| msg(&format!("m{i}"), b"x")).collect(),
        T0,
    )
    .await;
    let scheduled = t
        .send(
            &orders,
            vec![NewMessage {
                scheduled_at: Some(secs(60)),
                ..msg("later", b"later")
            }],
            T0,
        )
        .await[0]
        .sequence;
    let d = t.take(&orders, 4, 30_000, T0).await;
    assert_eq!(seqs(&d), [1, 2, 3, 4]);

    let out = t
        .apply(
            vec![
                complete(&orders, &d[0].lock_token),
                settle(
                    &orders,
                    &d[1].lock_token,
                    SettleAction::Abandon {
                        delay_ms: Some(5_000),
                        last_attempt: None,
                    },
                ),
                settle(&orders, &d[2].lock_token, SettleAction::Defer),
                settle(&orders, &d[3].lock_token, dead_letter("Invalid")),
                TxOperation::CancelScheduled {
                    queue: orders.clone(),
                    sequence: scheduled,
                },
                send(&payments, msg("charge-1", b"charge")),
                send(
                    &payments,
                    NewMessage {
                        scheduled_at: Some(secs(30)),
                        ..msg("retry-1", b"retry")
                    },
                ),
                // A duplicate inside the window is accepted and dropped, not a refusal.
                send(&audit, msg("seen", b"again")),
            ],
            secs(1),
        )
        .await;

    assert_eq!(out.results.len(), 8);
    let settled: Vec<(i64, &str)> = out.results[..4]
        .iter()
        .map(|r| match r {
            TxApplied::Settled(s) => (s.sequence, s.message_id.as_str()),
            other => panic!("a settlement answered {other:?}"),
        })
        .collect();
    assert_eq!(settled, [(1, "m0"), (2, "m1"), (3, "m2"), (4, "m3")]);
    let TxApplied::Settled(dl) = &out.results[3] else {
        unreachable!()
    };
    let record = dl.dead_letter_id.clone().expect("the dead letter's record");
    assert_eq!(
        out.results[4],
        TxApplied::Cancelled {
            sequence: scheduled
        }
    );
    let sent: Vec<(String, i64, bool)> = out.results[5..]
        .iter()
        .map(|r| match r {
            TxApplied::Sent(e) => (e.message_id.clone(), e.sequence, e.duplicate),
            other => panic!("a send answered {other:?}"),
        })
        .collect();
    assert_eq!(
        sent,
        [
            ("charge-1".to_owned(), 1, false),
            ("retry-1".to_owned(), 2, false),
            ("seen".to_owned(), 1, true),
        ]
    );
    assert_eq!(out.effects.dead_lettered.len(), 1);
    assert_eq!(out.effects.dead_lettered[0].dead_letter_id, record);
    let same_ops = [
        complete(&orders, "x"),
        complete(&orders, "x"),
        complete(&orders, "x"),
        complete(&orders, "x"),
        TxOperation::CancelScheduled {
            queue: orders.clone(),
            sequence: scheduled,
        },
        send(&payments, msg("charge-1", b"")),
        send(&payments, msg("retry-1", b"")),
        send(&audit, msg("seen", b"")),
    ];
    let woken = out.woken(&same_ops);
    assert!(woken.contains(&"payments"), "{woken:?}");
    assert!(!woken.contains(&"audit-trail"), "{woken:?}");

    // Every operation's effect, as its single counterpart leaves it.
    let c = t.counts(&orders, secs(1)).await;
    assert_eq!(
        (c.active, c.scheduled, c.locked, c.deferred, c.dead_lettered),
        (0, 1, 0, 1, 1),
        "m1 backed off, m2 deferred, m3 dead-lettered, `later` cancelled: {c:?}"
    );
    assert_eq!(t.sequences(&orders).await, [2, 3]);
    let r = t.s().get_dead_letter(&orders, &record).await.unwrap();
    assert_eq!(r.message_id, "m3");
    assert_eq!(r.reason, "Invalid");
    assert_eq!(r.description.as_deref(), Some("in a transaction"));
    let c = t.counts(&payments, secs(1)).await;
    assert_eq!((c.active, c.scheduled), (1, 1));
    assert_eq!(
        seqs(&t.take(&payments, 10, 30_000, secs(30)).await),
        [1, 2],
        "the scheduled follow-up is visible from its time"
    );
    assert_eq!(t.sequences(&audit).await, [1], "the duplicate was dropped");
    assert_eq!(
        seqs(&t.take(&orders, 10, 30_000, secs(6)).await),
        [2],
        "the abandoned message comes back after its delay"
    );
}

pub async fn each_operation_of_a_transaction_sees_the_ones_before_it(t: &TestStore) {
    let orders = t.queue("orders", QueuePolicy::default()).await;
    let dedup = t
        .queue(
            "dedup",
            policy(|p| p.duplicate_detection_window_ms = 600_000),
        )
        .await;
    t.send1(&orders, "m", T0).await;
    let d = t.take(&orders, 1, 30_000, T0).await;

    // The same lock settled twice in one group: the second finds it gone, and the first
    // is rolled back with it.
    let refused = t
        .refuse(
            vec![
                complete(&orders, &d[0].lock_token),
                settle(&orders, &d[0].lock_token, SettleAction::Defer),
            ],
            secs(1),
        )
        .await;
    assert_eq!(refused.operation, 1);
    assert!(matches!(refused.error, StoreError::LockLost));
    assert_eq!(t.counts(&orders, secs(1)).await.locked, 1);

    // Two sends of one id to a queue with duplicate detection: the second is the
    // first's duplicate, with its sequence number.
    let out = t
        .apply(
            vec![
                send(&dedup, msg("once", b"1")),
                send(&dedup, msg("once", b"2")),
            ],
            secs(1),
        )
        .await;
    let sent: Vec<(i64, bool)> = out
        .results
        .iter()
        .map(|r| match r {
            TxApplied::Sent(e) => (e.sequence, e.duplicate),
            other => panic!("a send answered {other:?}"),
        })
        .collect();
    assert_eq!(sent, [(1, false), (1, true)]);
    assert_eq!(t.sequences(&dedup).await, [1]);

    // A message sent scheduled can be cancelled by a later operation of the group.
    let out = t
        .apply(
            vec![
                send(
                    &orders,
                    NewMessage {
                        scheduled_at: Some(secs(60)),
                        ..msg("later", b"later")
                    },
                ),
                TxOperation::CancelScheduled {
                    queue: orders.clone(),
                    sequence: 2,
                },
            ],
            secs(1),
        )
        .await;
    assert_eq!(out.results[1], TxApplied::Cancelled { sequence: 2 });
    assert_eq!(t.sequences(&orders).await, [1]);
}

pub async fn a_refused_operation_is_named_with_its_single_counterpart_s_error(t: &TestStore) {
    let orders = t.queue("orders", QueuePolicy::default()).await;
    let sessions = t
        .queue("sessions", policy(|p| p.requires_session = true))
        .await;
    let forwarding = t
        .queue(
            "forwarding",
            policy(|p| p.dead_letter_queue = Some(name("gone"))),
        )
        .await;
    t.send1(&orders, "m", T0).await;
    t.send1(&forwarding, "f", T0).await;
    let d = t.take(&orders, 1, 30_000, T0).await;
    let f = t.take(&forwarding, 1, 30_000, T0).await;
    let token = d[0].lock_token.clone();
    let ok = || complete(&orders, &token);

    let r = t
        .refuse(vec![ok(), send(&name("nowhere"), msg("x", b"x"))], secs(1))
        .await;
    assert_eq!(r.operation, 1);
    assert!(
        matches!(r.error, StoreError::QueueNotFound { .. }),
        "{:?}",
        r.error
    );

    let r = t
        .refuse(vec![send(&sessions, msg("x", b"x")), ok()], secs(1))
        .await;
    assert_eq!(r.operation, 0);
    assert!(matches!(r.error, StoreError::SessionRequired { .. }));

    let r = t
        .refuse(
            vec![
                ok(),
                TxOperation::CancelScheduled {
                    queue: orders.clone(),
                    sequence: 1,
                },
            ],
            secs(1),
        )
        .await;
    assert_eq!(r.operation, 1);
    assert!(matches!(r.error, StoreError::MessageNotFound { .. }));

    let r = t
        .refuse(
            vec![
                ok(),
                settle(&forwarding, &f[0].lock_token, dead_letter("Bad")),
            ],
            secs(1),
        )
        .await;
    assert_eq!(r.operation, 1);
    assert!(matches!(
        r.error,
        StoreError::DeadLetterTargetMissing { .. }
    ));

    // After every refusal the delivery is still locked by its token.
    assert_eq!(t.counts(&orders, secs(1)).await.locked, 1);
    assert_eq!(t.counts(&forwarding, secs(1)).await.locked, 1);
    let out = t.apply(vec![ok()], secs(1)).await;
    assert!(matches!(out.results[0], TxApplied::Settled(_)));
    assert!(t.sequences(&orders).await.is_empty());
}

pub async fn a_completion_and_its_follow_up_are_seen_together(t: &TestStore) {
    const GROUPS: usize = 40;
    let orders = t.queue("orders", QueuePolicy::default()).await;
    let payments = t.queue("payments", QueuePolicy::default()).await;
    let batch: Vec<NewMessage> = (0..GROUPS).map(|i| msg(&format!("o{i}"), b"x")).collect();
    t.send(&orders, batch, T0).await;
    let d = t
        .take(&orders, u32::try_from(GROUPS).unwrap(), 300_000, T0)
        .await;
    assert_eq!(d.len(), GROUPS);

    // A reader looks at the originals, then at the follow-ups, while the groups commit:
    // an original gone at the first look was completed by a commit that also stored its
    // follow-up, so the second look finds it. Never neither.
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let store = Arc::clone(&t.store);
        let (orders, payments, done) = (orders.clone(), payments.clone(), done.clone());
        tokio::spawn(async move {
            let mut looks = 0u64;
            loop {
                let finished = done.load(Ordering::Acquire);
                let originals: Vec<String> = store
                    .peek(&orders, 1, 10_000, secs(1))
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|m| m.message_id)
                    .collect();
                let follow_ups: Vec<String> = store
                    .peek(&payments, 1, 10_000, secs(1))
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|m| m.message_id)
                    .collect();
                for i in 0..GROUPS {
                    let original = originals.contains(&format!("o{i}"));
                    let follow_up = follow_ups.contains(&format!("f{i}"));
                    assert!(
                        original || follow_up,
                        "o{i} is completed but its follow-up is not there"
                    );
                }
                looks += 1;
                if finished {
                    return looks;
                }
                tokio::task::yield_now().await;
            }
        })
    };
    let mut groups = Vec::new();
    for (i, delivery) in d.iter().enumerate() {
        let store = Arc::clone(&t.store);
        let ops = vec![
            complete(&orders, &delivery.lock_token),
            send(&payments, msg(&format!("f{i}"), b"follow-up")),
        ];
        groups.push(tokio::spawn(async move {
            store.apply_transaction(ops, secs(1)).await
        }));
    }
    for g in groups {
        assert!(matches!(g.await.unwrap(), Ok(Ok(_))));
    }
    done.store(true, Ordering::Release);
    assert!(reader.await.unwrap() >= 1);

    assert!(t.sequences(&orders).await.is_empty());
    assert_eq!(t.sequences(&payments).await.len(), GROUPS);
}
