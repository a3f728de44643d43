//! The operations interfaces call in place of reading and writing the store's types
//! themselves: settlement with its defaults, sends built from the policy, policy changes
//! from the stored policy, dead-letter sources, the audit page bounds, store health.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use redrive_core::id::{LockToken, Named};
use redrive_core::{ManualClock, QueuePolicy, Timestamp};
use redrive_store_sqlite::{SqliteOptions, SqliteStore};

use crate::model::{AuditQuery, MAX_REGISTER_PAGE};
use crate::{
    Actor, Broker, BrokerError, LockBounds, MAX_AUDIT_FILTER_LEN, Outgoing, ReceiveOptions, Settle,
};
use redrive_store::StoreError;

const T0: Timestamp = Timestamp(1_800_000_000_000);

struct Fixture {
    broker: Broker,
    clock: ManualClock,
    _dir: tempfile::TempDir,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("a temp dir");
    let store: Arc<dyn redrive_store::Store> = Arc::new(
        SqliteStore::open(&dir.path().join("r.db"), SqliteOptions::default())
            .expect("the store opens"),
    );
    let clock = ManualClock::new(T0);
    Fixture {
        broker: Broker::new(store, Arc::new(clock.clone())),
        clock,
        _dir: dir,
    }
}

fn msg(body: &str) -> Outgoing {
    Outgoing {
        body: body.as_bytes().to_vec(),
        ..Outgoing::default()
    }
}

/// Sends `n` messages and receives them with a 10 s lock; answers their lock tokens.
async fn locked(b: &Broker, queue: &str, n: u32) -> Vec<Named<LockToken>> {
    let msgs = (0..n).map(|i| msg(&format!("m{i}"))).collect();
    b.send(queue, msgs).await.unwrap();
    let got = b
        .receive(
            queue,
            ReceiveOptions {
                max: n,
                lock_ms: Some(10_000),
                ..ReceiveOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(got.len(), n as usize);
    got.into_iter().map(|d| d.lock_token.parse()).collect()
}

#[tokio::test]
async fn a_renewal_without_a_duration_takes_the_queues_lock_duration() {
    let f = fixture();
    let b = &f.broker;
    let policy = QueuePolicy {
        lock_duration_ms: 45_000,
        ..QueuePolicy::default()
    };
    b.create_queue("q", policy).await.unwrap();
    let tokens = locked(b, "q", 2).await;
    f.clock.advance(Duration::from_secs(5));
    let now = T0.plus_millis(5_000);
    let out = b
        .settle(
            "q",
            vec![
                (tokens[0].clone(), Settle::Renew { lock_ms: None }),
                (
                    tokens[1].clone(),
                    Settle::Renew {
                        lock_ms: Some(20_000),
                    },
                ),
            ],
        )
        .await
        .unwrap();
    let until: Vec<_> = out.into_iter().map(|r| r.unwrap().locked_until).collect();
    assert_eq!(
        until,
        vec![Some(now.plus_millis(45_000)), Some(now.plus_millis(20_000))]
    );
}

#[tokio::test]
async fn a_renewal_is_checked_against_the_interfaces_bounds() {
    let f = fixture();
    let b = &f.broker;
    b.create_queue("q", QueuePolicy::default()).await.unwrap();
    let tokens = locked(b, "q", 1).await;
    // Native locks are 1 s to 5 min.
    let e = b
        .settle_one(
            "q",
            tokens[0].clone(),
            Settle::Renew { lock_ms: Some(0) },
            LockBounds::Native,
        )
        .await;
    assert!(
        matches!(e, Err(BrokerError::InvalidRequest { ref field, .. }) if field == "lock_duration_ms"),
        "{e:?}"
    );
    // An SQS visibility timeout of 0 releases the message at once.
    b.settle_one(
        "q",
        tokens[0].clone(),
        Settle::Renew { lock_ms: Some(0) },
        LockBounds::Sqs,
    )
    .await
    .unwrap();
    let again = b
        .receive(
            "q",
            ReceiveOptions {
                max: 1,
                ..ReceiveOptions::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(again.len(), 1, "released, visible again");
}

#[tokio::test]
async fn each_settlement_is_answered_on_its_own() {
    let f = fixture();
    let b = &f.broker;
    b.create_queue("q", QueuePolicy::default()).await.unwrap();
    let tokens = locked(b, "q", 1).await;
    let out = b
        .settle(
            "q",
            vec![
                ("lk_unknown".parse(), Settle::Complete),
                (tokens[0].clone(), Settle::Complete),
            ],
        )
        .await
        .unwrap();
    assert!(
        matches!(out[0], Err(BrokerError::Store(StoreError::LockLost))),
        "{:?}",
        out[0]
    );
    assert!(out[1].is_ok());
    assert_eq!(b.get_queue("q").await.unwrap().counts.messages(), 0);
    // One settlement: its refusal is the error.
    let one = b
        .settle_one("q", tokens[0].clone(), Settle::Complete, LockBounds::Sqs)
        .await;
    assert!(matches!(one, Err(BrokerError::Store(StoreError::LockLost))));
    // A renewal's default needs the queue: a missing one is refused as such.
    let missing = b
        .settle(
            "nope",
            vec![(tokens[0].clone(), Settle::Renew { lock_ms: None })],
        )
        .await;
    assert!(matches!(
        missing,
        Err(BrokerError::Store(StoreError::QueueNotFound { .. }))
    ));
}

#[tokio::test]
async fn a_string_that_cannot_be_a_lock_token_is_a_lost_lock_after_the_batchs_checks() {
    let f = fixture();
    let b = &f.broker;
    b.create_queue("q", QueuePolicy::default()).await.unwrap();
    let tokens = locked(b, "q", 2).await;
    let malformed = || format!("lk_{}", "a".repeat(65)).parse::<LockToken>();
    assert!(malformed().is_err());
    // Each item on its own, in order, around the held ones.
    let out = b
        .settle(
            "q",
            vec![
                (malformed(), Settle::Complete),
                (tokens[0].clone(), Settle::Complete),
                ("nope".parse(), Settle::Defer),
                (tokens[1].clone(), Settle::Defer),
                (malformed(), Settle::Renew { lock_ms: None }),
            ],
        )
        .await
        .unwrap();
    let lost: Vec<bool> = out
        .iter()
        .map(|r| matches!(r, Err(BrokerError::Store(StoreError::LockLost))))
        .collect();
    assert_eq!(lost, [true, false, true, false, true], "{out:?}");
    assert_eq!(out[1].as_ref().unwrap().sequence, 1);
    assert_eq!(out[3].as_ref().unwrap().sequence, 2);
    // The batch's checks see every item: a bad action refuses the whole batch.
    let refused = b
        .settle(
            "q",
            vec![(
                malformed(),
                Settle::Abandon {
                    delay_ms: Some(8 * 24 * 3_600_000),
                },
            )],
        )
        .await;
    assert!(
        matches!(refused, Err(BrokerError::InvalidRequest { ref field, .. }) if field == "delay_ms"),
        "{refused:?}"
    );
    // With no token the store could hold, the queue is still looked up.
    let missing = b
        .settle_one("nope", malformed(), Settle::Complete, LockBounds::Native)
        .await;
    assert!(
        matches!(
            missing,
            Err(BrokerError::Store(StoreError::QueueNotFound { .. }))
        ),
        "{missing:?}"
    );
    let one = b
        .settle_one("q", malformed(), Settle::Complete, LockBounds::Sqs)
        .await;
    assert!(matches!(one, Err(BrokerError::Store(StoreError::LockLost))));
}

#[tokio::test]
async fn a_built_send_reads_the_policy_and_sends_what_was_built() {
    let f = fixture();
    let b = &f.broker;
    let policy = QueuePolicy {
        max_message_size: 4_096,
        ..QueuePolicy::default()
    };
    b.create_queue("q", policy).await.unwrap();
    let (sent, seen) = b
        .send_built("q", |p| {
            Ok::<_, BrokerError>((vec![msg("a"), msg("b")], p.max_message_size))
        })
        .await
        .unwrap();
    assert_eq!(seen, 4_096, "build saw the stored policy");
    assert_eq!(sent.len(), 2);
    assert_eq!(b.get_queue("q").await.unwrap().counts.messages(), 2);
    // Nothing built: nothing sent, no error (every entry of a batch was refused).
    let (sent, ()) = b
        .send_built("q", |_| Ok::<_, BrokerError>((Vec::new(), ())))
        .await
        .unwrap();
    assert!(sent.is_empty());
    assert_eq!(b.get_queue("q").await.unwrap().counts.messages(), 2);
    // The broker's own checks still apply to what was built.
    let big = Outgoing {
        body: vec![b'x'; 5_000],
        ..Outgoing::default()
    };
    let e = b
        .send_built("q", |_| Ok::<_, BrokerError>((vec![big], ())))
        .await;
    assert!(
        matches!(e, Err(BrokerError::MessageTooLarge { .. })),
        "{e:?}"
    );
    // A refusal of `build` is answered as it is; a missing queue never reaches it.
    let calls = AtomicU32::new(0);
    let e = b
        .send_built("nope", |_| {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok::<_, BrokerError>((vec![msg("x")], ()))
        })
        .await;
    assert!(matches!(
        e,
        Err(BrokerError::Store(StoreError::QueueNotFound { .. }))
    ));
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_change_that_raced_another_is_made_again_from_the_newer_policy() {
    let f = fixture();
    let b = f.broker.clone();
    b.create_queue("q", QueuePolicy::default()).await.unwrap();
    let actor = Actor::anonymous();
    let calls = AtomicU32::new(0);
    let rec = b
        .change_queue_policy("q", None, &actor, |current| {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                // Another writer changes the policy between the read and the write.
                let other = QueuePolicy {
                    max_delivery_count: 7,
                    ..current.clone()
                };
                let b = b.clone();
                tokio::task::block_in_place(|| {
                    tokio::runtime::Handle::current().block_on(async {
                        b.update_queue("q", other, None, &Actor::anonymous())
                            .await
                            .unwrap();
                    });
                });
            }
            Ok::<_, BrokerError>(QueuePolicy {
                lock_duration_ms: 50_000,
                ..current.clone()
            })
        })
        .await
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2, "made again once");
    assert_eq!(rec.policy.max_delivery_count, 7, "the other change stays");
    assert_eq!(rec.policy.lock_duration_ms, 50_000);
    assert_eq!(rec.policy_version, 3);

    // With the caller's expected version, a stale change is refused, not made again.
    let calls = AtomicU32::new(0);
    let e = b
        .change_queue_policy("q", Some(1), &actor, |current| {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok::<_, BrokerError>(current.clone())
        })
        .await;
    assert!(
        matches!(
            e,
            Err(BrokerError::Store(StoreError::VersionConflict { .. }))
        ),
        "{e:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // A refused change stores nothing.
    let e = b
        .change_queue_policy("q", None, &actor, |_| {
            Err(BrokerError::invalid("policy", "refused by the interface"))
        })
        .await;
    assert!(matches!(e, Err(BrokerError::InvalidRequest { .. })));
    assert_eq!(b.queue_record("q").await.unwrap().policy_version, 3);
    // The broker's policy rules apply to the changed policy.
    let e = b
        .change_queue_policy("q", None, &actor, |current| {
            Ok::<_, BrokerError>(QueuePolicy {
                dead_letter_queue: Some("q".parse().unwrap()),
                ..current.clone()
            })
        })
        .await;
    assert!(
        matches!(e, Err(BrokerError::InvalidRequest { ref field, .. }) if field == "dead_letter_queue")
    );
}

#[tokio::test]
async fn dead_letter_sources_are_the_queues_naming_it() {
    let f = fixture();
    let b = &f.broker;
    b.create_queue("dlq", QueuePolicy::default()).await.unwrap();
    for name in ["b", "a"] {
        let policy = QueuePolicy {
            dead_letter_queue: Some("dlq".parse().unwrap()),
            ..QueuePolicy::default()
        };
        b.create_queue(name, policy).await.unwrap();
    }
    b.create_queue("c", QueuePolicy::default()).await.unwrap();
    let names: Vec<String> = b
        .dead_letter_sources("dlq")
        .await
        .unwrap()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(names, ["a", "b"]);
    assert!(b.dead_letter_sources("c").await.unwrap().is_empty());
    assert!(matches!(
        b.dead_letter_sources("nope").await,
        Err(BrokerError::Store(StoreError::QueueNotFound { .. }))
    ));
}

#[tokio::test]
async fn an_audit_page_is_bounded() {
    let f = fixture();
    let b = &f.broker;
    let page = |limit, actor: Option<String>| AuditQuery {
        limit,
        actor_id: actor,
        ..AuditQuery::default()
    };
    for bad in [page(0, None), page(1_001, None)] {
        let e = b.list_audit(&bad).await;
        assert!(
            matches!(e, Err(BrokerError::InvalidRequest { ref field, .. }) if field == "limit")
        );
    }
    let long = "x".repeat(MAX_AUDIT_FILTER_LEN + 1);
    let e = b.list_audit(&page(10, Some(long))).await;
    assert!(matches!(e, Err(BrokerError::InvalidRequest { ref field, .. }) if field == "actor"));
    let fits = "x".repeat(MAX_AUDIT_FILTER_LEN);
    assert!(
        b.list_audit(&page(10, Some(fits)))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn store_health_names_the_backend_and_its_answer() {
    let f = fixture();
    let h = f.broker.store_health().await;
    assert_eq!(h.backend, "sqlite");
    assert!(h.answer.is_ok());
}

#[tokio::test]
async fn register_changes_are_audited_and_an_unchanged_set_is_not() {
    use redrive_core::register::{Idempotency, RegisterAnswer, RegisterEntry, judge};
    let f = fixture();
    let b = &f.broker;
    let entry = |k: &str, a| RegisterEntry::new(k.parse().expect("key"), a, None).expect("entry");
    let actions = || async {
        b.list_audit(&AuditQuery {
            limit: 100,
            ..AuditQuery::default()
        })
        .await
        .expect("audit page")
        .into_iter()
        .map(|e| (e.fields.action, e.fields.actor_id, e.fields.entity))
        .collect::<Vec<_>>()
    };
    let ops = Actor::system("ops");
    let set = b
        .set_register_entry(&ops, entry("order.created", Idempotency::Idempotent))
        .await
        .expect("set");
    assert_eq!((set.previous, set.changed), (None, true));
    let again = b
        .set_register_entry(&ops, entry("order.created", Idempotency::Idempotent))
        .await
        .expect("set");
    assert!(!again.changed);
    assert_eq!(
        b.apply_register(&[
            entry("order.created", Idempotency::Idempotent),
            entry("orders:*", Idempotency::NotIdempotent),
        ])
        .await
        .expect("applied"),
        1
    );
    let reg = b.register().await.expect("register");
    let q = "orders".parse().expect("name");
    assert_eq!(judge(&reg, &q, None), RegisterAnswer::NotIdempotent);
    assert_eq!(
        judge(&reg, &q, Some("order.created")),
        RegisterAnswer::Idempotent { ordering: None }
    );
    let key = "order.created".parse().expect("key");
    assert!(
        b.delete_register_entry(&ops, &key)
            .await
            .expect("delete")
            .is_some()
    );
    assert!(
        b.delete_register_entry(&ops, &key)
            .await
            .expect("delete")
            .is_none()
    );
    assert_eq!(
        actions().await,
        [
            ("register.set".to_owned(), "system".to_owned(), None),
            (
                "register.set".to_owned(),
                "system".to_owned(),
                Some("orders".to_owned())
            ),
            ("register.delete".to_owned(), "system".to_owned(), None),
        ]
    );
    for bad in [0, MAX_REGISTER_PAGE + 1] {
        assert!(matches!(
            b.list_register(None, bad).await,
            Err(BrokerError::InvalidRequest { .. })
        ));
    }
    assert_eq!(b.list_register(None, 10).await.expect("page").len(), 1);
}

#[tokio::test]
async fn a_store_that_cannot_be_read_fails_the_drain_and_the_replay_worker_keeps_running() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let sqlite = Arc::new(
        SqliteStore::open(&dir.path().join("r.db"), SqliteOptions::default())
            .expect("the store opens"),
    );
    let store: Arc<dyn redrive_store::Store> = sqlite.clone();
    let clock = ManualClock::new(T0);
    let b = Broker::new(store, Arc::new(clock.clone()));
    b.create_queue(
        "q",
        QueuePolicy {
            auto_replay: redrive_core::AutoReplay {
                enabled: true,
                ..redrive_core::AutoReplay::default()
            },
            ..QueuePolicy::default()
        },
    )
    .await
    .unwrap();
    sqlite.close();
    assert!(
        b.drain_replay_candidates().await.is_err(),
        "the drain reports the store"
    );
    let cancel = tokio_util::sync::CancellationToken::new();
    let worker = tokio::spawn(crate::Replayer::new(b.clone()).run(cancel.clone()));
    // The worker meets the same store at its first look, logs, and waits for the next.
    for _ in 0..3 {
        tokio::task::yield_now().await;
        clock.advance(Duration::from_secs(1));
    }
    assert!(
        !worker.is_finished(),
        "a failing store never ends the worker"
    );
    cancel.cancel();
    worker
        .await
        .expect("the worker ends on cancel, without a panic");
}
