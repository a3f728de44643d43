//! Automatic replay's bookkeeping: candidates written with the record, claims, whole and
//! partial quarantine, the end and failure of a judgement, the drain at start, retention,
//! counts, imports, and moves between areas.

use std::collections::BTreeMap;

use redrive_core::judgement::{JudgedEvent, Judgement, QuarantineCause, quarantine_copy_id};
use redrive_core::{AutoReplay, AutoReplayPatch, EntityName, RecordFormat};
use redrive_events::Filter;
use redrive_store::{
    DeadLetterDestination, DeadLetterRecord, DrainRule, NewSubscription, Quarantine,
    QuarantineCopy, ReplayCounts, ReplayFinish, ReplayMark, RetentionRule, SubscriptionKind,
    SubscriptionSpec, SubscriptionUpdate, TopicPolicy,
};

use super::prelude::*;

/// A policy with automatic replay on, judging `delay_ms` after a record becomes live.
fn replaying(delay_ms: u64) -> QueuePolicy {
    policy(|p| {
        p.auto_replay.enabled = true;
        p.auto_replay.judge_delay_ms = delay_ms;
    })
}

/// Sends `id` and dead-letters it at `now` by the application's decision; returns the
/// record id and whether the effect says it is a replay candidate.
async fn dead_letter(t: &TestStore, q: &EntityName, id: &str, now: Timestamp) -> (String, bool) {
    t.send1(q, id, now).await;
    let d = t.take(q, 1, 30_000, now).await;
    assert_eq!(d.len(), 1, "the message just sent is received");
    let out = t
        .s()
        .settle(
            q,
            vec![Settlement {
                lock_token: d[0].lock_token.clone(),
                action: SettleAction::DeadLetter {
                    reason: "Bad".into(),
                    description: None,
                    by_broker: false,
                    classifier: redrive_core::Classifier::default(),
                },
            }],
            now,
        )
        .await
        .unwrap();
    assert!(out.results[0].is_ok(), "{:?}", out.results);
    assert_eq!(out.effects.dead_lettered.len(), 1);
    let e = &out.effects.dead_lettered[0];
    (e.dead_letter_id.clone(), e.candidate)
}

/// The record id only.
async fn dl(t: &TestStore, q: &EntityName, id: &str, now: Timestamp) -> String {
    dead_letter(t, q, id, now).await.0
}

async fn get(t: &TestStore, q: &EntityName, id: &str) -> DeadLetterRecord {
    t.s().get_dead_letter(q, id).await.unwrap()
}

async fn due(t: &TestStore, q: &EntityName, id: &str) -> Option<Timestamp> {
    get(t, q, id).await.replay.due_at
}

fn ids(records: &[DeadLetterRecord]) -> Vec<&str> {
    records.iter().map(|r| r.id.as_str()).collect()
}

/// A judgement at `at`: quarantined for `cause`, or (no cause) republished, with the
/// record of the republish (kept whole by the store).
fn judgement(at: Timestamp, cause: Option<QuarantineCause>) -> Judgement {
    Judgement {
        events: vec![JudgedEvent {
            id: "ev-1".into(),
            attempts: 2,
            event_type: Some("order.created".into()),
            cause,
            republished_as: cause.is_none().then(|| "ev-1|3".into()),
        }],
        replay: cause.is_none().then(|| {
            Box::new(redrive_core::judgement::ReplayRecord {
                rule: "automatic_replay".into(),
                policy_version: 3,
                budget: "node replay budget: 4 items/s, 65536 bytes/s".into(),
                destination: "orders".into(),
                republished_at: at.0,
                outcome: "republished".into(),
            })
        }),
        ..Judgement::new(at.0, cause)
    }
}

fn pull_spec(auto_replay: AutoReplay, retention_ms: u64) -> SubscriptionSpec {
    SubscriptionSpec {
        kind: SubscriptionKind::Pull,
        filter: Filter::default(),
        retry_policy: Default::default(),
        delivery: Default::default(),
        dead_letter: DeadLetterDestination::OwnStore,
        paused: false,
        auto_replay,
        dead_letter_retention_ms: retention_ms,
    }
}

pub async fn a_dead_letter_on_a_replaying_queue_is_a_candidate_due_after_the_judge_delay(
    t: &TestStore,
) {
    let q = t.queue("orders", replaying(5_000)).await;
    let (id, candidate) = dead_letter(t, &q, "m1", secs(1)).await;
    assert!(candidate, "the effect says so: the broker wakes its worker");
    let r = get(t, &q, &id).await;
    assert_eq!(r.area, Area::Live);
    assert_eq!(
        r.replay,
        ReplayMark {
            due_at: Some(secs(6)),
            failures: 0,
            last_error: None,
        }
    );
    assert_eq!(r.format, RecordFormat::Message);
    assert_eq!(r.judgement, None);
}

pub async fn a_dead_letter_on_a_queue_without_replay_is_not_a_candidate(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let (id, candidate) = dead_letter(t, &q, "m1", secs(1)).await;
    assert!(!candidate);
    assert_eq!(get(t, &q, &id).await.replay, ReplayMark::default());
    assert!(
        t.s()
            .claim_replay_candidates(secs(1_000), 10, 60_000)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn a_dead_letter_forwarded_to_a_dead_letter_queue_is_not_a_candidate(t: &TestStore) {
    t.queue("orders-dlq", QueuePolicy::default()).await;
    let q = t
        .queue(
            "orders",
            policy(|p| {
                p.auto_replay.enabled = true;
                p.dead_letter_queue = Some(name("orders-dlq"));
            }),
        )
        .await;
    let (id, candidate) = dead_letter(t, &q, "m1", secs(1)).await;
    assert!(!candidate, "the live work is the forwarded copy");
    let r = get(t, &q, &id).await;
    assert_eq!(r.area, Area::Archived);
    assert_eq!(r.replay.due_at, None);
    assert!(
        t.s()
            .claim_replay_candidates(secs(1_000), 10, 60_000)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn subscriptions_mirror_replay_and_retention_onto_their_queue(t: &TestStore) {
    let topic = name("orders");
    t.s()
        .create_topic(&topic, &TopicPolicy::default(), T0)
        .await
        .unwrap();
    let queue = name("orders.audit");
    let on = AutoReplay {
        enabled: true,
        judge_delay_ms: 2_000,
        ..AutoReplay::default()
    };
    t.s()
        .create_subscription(
            &NewSubscription {
                topic: topic.clone(),
                name: name("audit"),
                queue: queue.clone(),
                queue_policy: QueuePolicy {
                    max_delivery_count: 7,
                    ..QueuePolicy::default()
                },
                spec: pull_spec(on.clone(), 86_400_000),
            },
            T0,
        )
        .await
        .unwrap();
    let qr = t.s().get_queue(&queue).await.unwrap();
    assert_eq!(qr.policy.auto_replay, on);
    assert_eq!(qr.policy.dead_letter_retention_ms, 86_400_000);
    assert_eq!(qr.policy.max_delivery_count, 7, "the rest is the caller's");
    assert_eq!(qr.policy_version, 1);
    let (id, candidate) = dead_letter(t, &queue, "e1", secs(1)).await;
    assert!(candidate, "the dead-letter path reads the queue's policy");
    assert_eq!(due(t, &queue, &id).await, Some(secs(3)));

    // A change of replay or retention is a policy change of the queue.
    let rec = t
        .s()
        .update_subscription(
            &topic,
            &name("audit"),
            &SubscriptionUpdate {
                auto_replay: Some(AutoReplayPatch {
                    judge_delay_ms: Some(9_000),
                    ..AutoReplayPatch::default()
                }),
                dead_letter_retention_ms: Some(0),
                ..SubscriptionUpdate::default()
            },
            secs(10),
        )
        .await
        .unwrap();
    let qr = t.s().get_queue(&queue).await.unwrap();
    assert_eq!(qr.policy.auto_replay, rec.spec.auto_replay);
    assert_eq!(qr.policy.auto_replay.judge_delay_ms, 9_000);
    assert_eq!(qr.policy.dead_letter_retention_ms, 0);
    assert_eq!((qr.policy_version, qr.updated_at), (2, secs(10)));
    let (id, _) = dead_letter(t, &queue, "e2", secs(11)).await;
    assert_eq!(due(t, &queue, &id).await, Some(secs(20)));
    let r = get(t, &queue, &id).await;
    assert_eq!(r.policy_version, Some(2));

    // A change of anything else leaves the queue as it is.
    t.s()
        .update_subscription(
            &topic,
            &name("audit"),
            &SubscriptionUpdate {
                paused: Some(true),
                ..SubscriptionUpdate::default()
            },
            secs(12),
        )
        .await
        .unwrap();
    let qr = t.s().get_queue(&queue).await.unwrap();
    assert_eq!((qr.policy_version, qr.updated_at), (2, secs(10)));

    // Off again: no more candidates.
    t.s()
        .update_subscription(
            &topic,
            &name("audit"),
            &SubscriptionUpdate {
                auto_replay: Some(AutoReplayPatch {
                    enabled: Some(false),
                    ..AutoReplayPatch::default()
                }),
                ..SubscriptionUpdate::default()
            },
            secs(13),
        )
        .await
        .unwrap();
    let qr = t.s().get_queue(&queue).await.unwrap();
    assert!(!qr.policy.auto_replay.enabled);
    assert_eq!(qr.policy_version, 3);
    let (_, candidate) = dead_letter(t, &queue, "e3", secs(14)).await;
    assert!(!candidate);
}

pub async fn claim_takes_due_live_unlocked_candidates_earliest_first_and_moves_them_on(
    t: &TestStore,
) {
    let a = t.queue("a", replaying(0)).await;
    let b = t.queue("b", replaying(0)).await;
    let off = t.queue("off", QueuePolicy::default()).await;
    let x = dl(t, &a, "x", secs(1)).await;
    let z = dl(t, &a, "z", secs(2)).await;
    let v = dl(t, &b, "v", at(2_500)).await;
    let y = dl(t, &a, "y", secs(3)).await;
    let w = dl(t, &a, "w", secs(10)).await;
    dl(t, &off, "n", secs(1)).await;
    // A dead-letter receiver holds x (the oldest record of `a`) until secs(34).
    let held = t
        .s()
        .receive_dead_letters(&a, 1, 30_000, secs(4))
        .await
        .unwrap();
    assert_eq!(held[0].record.id, x);

    let first = t
        .s()
        .claim_replay_candidates(secs(5), 2, 60_000)
        .await
        .unwrap();
    assert_eq!(ids(&first), [z.as_str(), v.as_str()], "earliest due first");
    assert!(first.iter().all(|r| r.replay.due_at == Some(secs(65))));
    assert_eq!(
        due(t, &a, &z).await,
        Some(secs(65)),
        "stored with the claim"
    );
    let second = t
        .s()
        .claim_replay_candidates(secs(5), 10, 60_000)
        .await
        .unwrap();
    assert_eq!(
        ids(&second),
        [y.as_str()],
        "not x (locked), not w (not due)"
    );
    assert!(
        t.s()
            .claim_replay_candidates(secs(5), 10, 60_000)
            .await
            .unwrap()
            .is_empty(),
        "claimed records are not claimed again before the claim runs out"
    );

    // Once the claim ran out (and x's lock), every one comes back.
    let again = t
        .s()
        .claim_replay_candidates(secs(65), 10, 1_000)
        .await
        .unwrap();
    let got = ids(&again);
    assert_eq!(got[..2], [x.as_str(), w.as_str()]);
    let mut rest = got[2..].to_vec();
    rest.sort_unstable();
    let mut expected = vec![z.as_str(), v.as_str(), y.as_str()];
    expected.sort_unstable();
    assert_eq!(rest, expected);
    assert!(again.iter().all(|r| r.replay.due_at == Some(secs(66))));
}

pub async fn quarantine_whole_moves_a_live_record_once_and_writes_its_id_back(t: &TestStore) {
    let q = t.queue("orders", replaying(0)).await;
    let id = dl(t, &q, "order-1|2", secs(1)).await;
    let before = get(t, &q, &id).await;
    let locked = t
        .s()
        .receive_dead_letters(&q, 1, 30_000, secs(2))
        .await
        .unwrap();
    let j = judgement(secs(3), Some(QuarantineCause::NotIdempotent));
    let whole = Quarantine {
        judgement: j.clone(),
        body: None,
    };
    assert!(
        t.s()
            .quarantine_dead_letter(&q, &id, &whole, secs(3))
            .await
            .unwrap()
    );
    let r = get(t, &q, &id).await;
    assert_eq!(r.area, Area::Quarantine);
    assert_eq!(
        r.message_id, "order-1",
        "written back without its replay count"
    );
    assert_eq!(r.judgement, Some(j.clone()), "the judgement round-trips");
    assert_eq!(r.replay.due_at, None);
    assert_eq!(r.locked_until, None);
    assert_eq!(
        (r.body.clone(), r.body_sha256.clone()),
        (before.body, before.body_sha256)
    );
    assert_eq!(r.reason, before.reason);
    assert_err!(
        t.s()
            .settle_dead_letter(&q, &locked[0].lock_token, true, secs(4))
            .await,
        StoreError::LockLost
    );
    // Somebody got there first: nothing changes.
    let other = Quarantine {
        judgement: judgement(secs(5), Some(QuarantineCause::TypeNotRegistered)),
        body: Some(b"[]".to_vec()),
    };
    assert!(
        !t.s()
            .quarantine_dead_letter(&q, &id, &other, secs(5))
            .await
            .unwrap()
    );
    assert_eq!(get(t, &q, &id).await, r);

    // A record of events gets its rewritten body.
    let id2 = dl(t, &q, "m2", secs(6)).await;
    let body = br#"[{"id":"ev-1"}]"#.to_vec();
    assert!(
        t.s()
            .quarantine_dead_letter(
                &q,
                &id2,
                &Quarantine {
                    judgement: j.clone(),
                    body: Some(body.clone()),
                },
                secs(7),
            )
            .await
            .unwrap()
    );
    let r2 = get(t, &q, &id2).await;
    assert_eq!(r2.body, body);
    assert_eq!(r2.body_sha256, redrive_core::digest::sha256_hex(&body));

    assert_err!(
        t.s()
            .quarantine_dead_letter(&q, "dl_nope", &whole, secs(8))
            .await,
        StoreError::DeadLetterNotFound { .. }
    );
}

pub async fn a_quarantined_record_is_never_claimed(t: &TestStore) {
    let q = t.queue("orders", replaying(0)).await;
    let judged = dl(t, &q, "m1", secs(1)).await;
    let moved = dl(t, &q, "m2", secs(2)).await;
    assert!(
        t.s()
            .quarantine_dead_letter(
                &q,
                &judged,
                &Quarantine {
                    judgement: judgement(secs(3), Some(QuarantineCause::SchemaInvalid)),
                    body: None,
                },
                secs(3),
            )
            .await
            .unwrap()
    );
    t.s()
        .move_dead_letter(&q, &moved, Area::Quarantine, secs(3))
        .await
        .unwrap();
    assert!(
        t.s()
            .claim_replay_candidates(secs(1_000), 10, 60_000)
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn quarantine_copy_is_create_if_absent_and_copies_the_evidence(t: &TestStore) {
    let q = t.queue("orders", replaying(0)).await;
    let mut props = Properties::new();
    props.insert("k".into(), PropertyValue::String("v".into()));
    t.send(
        &q,
        vec![NewMessage {
            properties: props.clone(),
            correlation_id: Some("c".into()),
            content_type: Some("application/json".into()),
            ..msg("batch|1", b"[1,2]")
        }],
        secs(1),
    )
    .await;
    let d = t.take(&q, 1, 30_000, secs(1)).await;
    let id = t
        .settle1(
            &q,
            &d[0].lock_token,
            SettleAction::DeadLetter {
                reason: "Bad".into(),
                description: Some("why".into()),
                by_broker: false,
                classifier: redrive_core::Classifier::default(),
            },
            secs(2),
        )
        .await
        .unwrap()
        .dead_letter_id
        .unwrap();
    let source = get(t, &q, &id).await;
    let cause = QuarantineCause::NotIdempotent;
    let body = b"[2]".to_vec();
    let copy = QuarantineCopy {
        from: id.clone(),
        id: quarantine_copy_id(&id, cause),
        body: body.clone(),
        body_sha256: redrive_core::digest::sha256_hex(&body),
        judgement: Judgement {
            copied_from: Some(id.clone()),
            ..judgement(secs(3), Some(cause))
        },
    };
    assert!(t.s().put_quarantine_copy(&q, &copy).await.unwrap());
    assert!(
        !t.s().put_quarantine_copy(&q, &copy).await.unwrap(),
        "written once"
    );
    let c = get(t, &q, &copy.id).await;
    assert_eq!(
        c,
        DeadLetterRecord {
            id: copy.id.clone(),
            area: Area::Quarantine,
            // Named by the events it holds, as its judgement lists them.
            message_id: "ev-1".into(),
            message_type: Some("order.created".into()),
            body: body.clone(),
            body_sha256: copy.body_sha256.clone(),
            dlq_delivery_count: 0,
            locked_until: None,
            replay: ReplayMark::default(),
            judgement: Some(copy.judgement.clone()),
            forwarded_to: None,
            ..source.clone()
        }
    );
    assert_eq!(c.properties, props);
    assert_eq!(c.description.as_deref(), Some("why"));
    assert_eq!(
        get(t, &q, &id).await,
        source,
        "the source record is untouched"
    );

    // Events of several types leave the copy untyped; a judgement listing no event keeps
    // the source's id (without its count) and type.
    let event = |id: &str, t: &str| JudgedEvent {
        id: id.into(),
        attempts: 0,
        event_type: Some(t.into()),
        cause: Some(cause),
        republished_as: None,
    };
    let mixed = QuarantineCopy {
        id: quarantine_copy_id(&id, QuarantineCause::ReplayAttemptsExhausted),
        judgement: Judgement {
            events: vec![event("w", "webhook.post"), event("x", "order.created")],
            ..copy.judgement.clone()
        },
        ..copy.clone()
    };
    assert!(t.s().put_quarantine_copy(&q, &mixed).await.unwrap());
    let m = get(t, &q, &mixed.id).await;
    assert_eq!((m.message_id.as_str(), m.message_type), ("w", None));
    let bare = QuarantineCopy {
        id: quarantine_copy_id(&id, QuarantineCause::NoReplayDestination),
        judgement: Judgement {
            events: Vec::new(),
            ..copy.judgement.clone()
        },
        ..copy.clone()
    };
    assert!(t.s().put_quarantine_copy(&q, &bare).await.unwrap());
    let b = get(t, &q, &bare.id).await;
    assert_eq!(
        (b.message_id.as_str(), b.message_type),
        ("batch", source.message_type.clone())
    );

    // Whatever area the copy is in now, it exists.
    t.s()
        .move_dead_letter(&q, &copy.id, Area::Archived, secs(4))
        .await
        .unwrap();
    assert!(!t.s().put_quarantine_copy(&q, &copy).await.unwrap());

    // The source gone, no copy of it can be written.
    assert!(
        t.s()
            .finish_replay(&q, &id, &ReplayFinish::Delete, secs(5))
            .await
            .unwrap()
    );
    let later = QuarantineCopy {
        id: quarantine_copy_id(&id, QuarantineCause::TypeNotRegistered),
        ..copy.clone()
    };
    assert_err!(
        t.s().put_quarantine_copy(&q, &later).await,
        StoreError::DeadLetterNotFound { .. }
    );
    assert_err!(
        t.s().get_dead_letter(&q, &later.id).await,
        StoreError::DeadLetterNotFound { .. }
    );
}

pub async fn finish_replay_archives_or_deletes_only_a_live_record(t: &TestStore) {
    let q = t.queue("orders", replaying(0)).await;
    let archived = dl(t, &q, "m1", secs(1)).await;
    let deleted = dl(t, &q, "m2", secs(2)).await;
    let moved = dl(t, &q, "m3", secs(3)).await;
    let locked = t
        .s()
        .receive_dead_letters(&q, 1, 30_000, secs(4))
        .await
        .unwrap();
    assert_eq!(locked[0].record.id, archived);

    let j = judgement(secs(5), None);
    let archive = ReplayFinish::Archive(j.clone());
    assert!(
        t.s()
            .finish_replay(&q, &archived, &archive, secs(5))
            .await
            .unwrap()
    );
    let r = get(t, &q, &archived).await;
    assert_eq!(r.area, Area::Archived);
    assert_eq!(r.judgement, Some(j.clone()));
    assert_eq!((r.replay.due_at, r.locked_until), (None, None));
    assert_err!(
        t.s()
            .settle_dead_letter(&q, &locked[0].lock_token, true, secs(6))
            .await,
        StoreError::LockLost
    );
    assert!(
        !t.s()
            .finish_replay(&q, &archived, &ReplayFinish::Delete, secs(6))
            .await
            .unwrap(),
        "no longer live"
    );
    assert_eq!(get(t, &q, &archived).await, r, "nothing changes");

    assert!(
        t.s()
            .finish_replay(&q, &deleted, &ReplayFinish::Delete, secs(7))
            .await
            .unwrap()
    );
    assert_err!(
        t.s().get_dead_letter(&q, &deleted).await,
        StoreError::DeadLetterNotFound { .. }
    );
    assert!(
        !t.s()
            .finish_replay(&q, &deleted, &ReplayFinish::Delete, secs(8))
            .await
            .unwrap(),
        "gone"
    );

    t.s()
        .move_dead_letter(&q, &moved, Area::Quarantine, secs(8))
        .await
        .unwrap();
    assert!(
        !t.s()
            .finish_replay(&q, &moved, &archive, secs(9))
            .await
            .unwrap()
    );
    assert!(
        !t.s()
            .finish_replay(&q, &moved, &ReplayFinish::Delete, secs(9))
            .await
            .unwrap()
    );
    let m = get(t, &q, &moved).await;
    assert_eq!((m.area, m.judgement), (Area::Quarantine, None));
    assert!(
        t.s()
            .claim_replay_candidates(secs(1_000), 10, 60_000)
            .await
            .unwrap()
            .is_empty(),
        "an archived record is no candidate"
    );
}

pub async fn fail_replay_counts_failures_and_makes_the_record_due_at_the_retry_time(t: &TestStore) {
    let q = t.queue("orders", replaying(0)).await;
    let id = dl(t, &q, "m1", secs(1)).await;
    assert_eq!(
        t.s().fail_replay(&q, &id, "boom", secs(100)).await.unwrap(),
        Some(1)
    );
    assert_eq!(
        get(t, &q, &id).await.replay,
        ReplayMark {
            due_at: Some(secs(100)),
            failures: 1,
            last_error: Some("boom".into()),
        }
    );
    assert_eq!(
        t.s().fail_replay(&q, &id, "down", secs(200)).await.unwrap(),
        Some(2)
    );
    let r = get(t, &q, &id).await;
    assert_eq!(
        (r.replay.failures, r.replay.last_error.as_deref()),
        (2, Some("down"))
    );
    assert!(
        t.s()
            .claim_replay_candidates(secs(150), 10, 60_000)
            .await
            .unwrap()
            .is_empty()
    );
    let got = t
        .s()
        .claim_replay_candidates(secs(200), 10, 60_000)
        .await
        .unwrap();
    assert_eq!(ids(&got), [id.as_str()]);
    assert_eq!(got[0].replay.failures, 2);

    t.s()
        .move_dead_letter(&q, &id, Area::Quarantine, secs(201))
        .await
        .unwrap();
    assert_eq!(
        t.s().fail_replay(&q, &id, "late", secs(300)).await.unwrap(),
        None
    );
    let r = get(t, &q, &id).await;
    assert_eq!(
        r.replay,
        ReplayMark {
            due_at: None,
            failures: 2,
            last_error: Some("down".into()),
        },
        "nothing changes; the failures stay with the record as evidence"
    );
    assert_eq!(
        t.s()
            .fail_replay(&q, "dl_nope", "x", secs(300))
            .await
            .unwrap(),
        None
    );
}

pub async fn drain_makes_old_unlocked_live_records_candidates_up_to_the_limit(t: &TestStore) {
    let a = t.queue("a", QueuePolicy::default()).await;
    let b = t.queue("b", QueuePolicy::default()).await;
    let held = dl(t, &a, "held", at(500)).await;
    let lapsed = dl(t, &a, "lapsed", at(700)).await;
    let old1 = dl(t, &a, "old1", secs(1)).await;
    let old2 = dl(t, &a, "old2", secs(2)).await;
    let archived = dl(t, &a, "archived", secs(2)).await;
    let quarantined = dl(t, &a, "quarantined", secs(2)).await;
    let young = dl(t, &a, "young", secs(50)).await;
    let b1 = dl(t, &b, "b1", secs(1)).await;
    let b2 = dl(t, &b, "b2", secs(2)).await;
    t.s()
        .move_dead_letter(&a, &archived, Area::Archived, secs(3))
        .await
        .unwrap();
    t.s()
        .move_dead_letter(&a, &quarantined, Area::Quarantine, secs(3))
        .await
        .unwrap();
    // `held` is locked past the due time of the drain, `lapsed` only until before it.
    let h = t
        .s()
        .receive_dead_letters(&a, 1, 300_000, secs(4))
        .await
        .unwrap();
    assert_eq!(h[0].record.id, held);
    let l = t
        .s()
        .receive_dead_letters(&a, 1, 1_000, secs(4))
        .await
        .unwrap();
    assert_eq!(l[0].record.id, lapsed);
    // Replay turned on: a record dead-lettered now is a candidate already.
    t.s()
        .update_queue(&a, &replaying(1_000), None, secs(5))
        .await
        .unwrap();
    let (fresh, candidate) = dead_letter(t, &a, "fresh", secs(5)).await;
    assert!(candidate);

    let rules = [
        DrainRule {
            queue: a.clone(),
            older_than: secs(10),
            due_at: secs(20),
        },
        DrainRule {
            queue: b.clone(),
            older_than: secs(10),
            due_at: secs(30),
        },
    ];
    assert_eq!(
        t.s().drain_replay_candidates(&rules, 2).await.unwrap(),
        2,
        "at most the limit"
    );
    assert_eq!(due(t, &a, &lapsed).await, Some(secs(20)), "oldest first");
    assert_eq!(due(t, &a, &old1).await, Some(secs(20)));
    assert_eq!(due(t, &a, &old2).await, None);
    assert_eq!(t.s().drain_replay_candidates(&rules, 2).await.unwrap(), 2);
    assert_eq!(due(t, &a, &old2).await, Some(secs(20)));
    assert_eq!(
        due(t, &b, &b1).await,
        Some(secs(30)),
        "the limit is for all rules"
    );
    assert_eq!(due(t, &b, &b2).await, None);
    assert_eq!(t.s().drain_replay_candidates(&rules, 10).await.unwrap(), 1);
    assert_eq!(due(t, &b, &b2).await, Some(secs(30)));
    assert_eq!(t.s().drain_replay_candidates(&rules, 10).await.unwrap(), 0);

    assert_eq!(due(t, &a, &held).await, None, "locked");
    assert_eq!(due(t, &a, &young).await, None, "too young");
    assert_eq!(due(t, &a, &archived).await, None);
    assert_eq!(due(t, &a, &quarantined).await, None);
    assert_eq!(
        get(t, &a, &archived).await.area,
        Area::Archived,
        "never touched"
    );
    assert_eq!(
        due(t, &a, &fresh).await,
        Some(secs(6)),
        "a candidate keeps its due time"
    );
}

pub async fn retention_deletes_every_area_before_the_cutoff_up_to_the_limit(t: &TestStore) {
    let a = t.queue("a", replaying(0)).await;
    let b = t.queue("b", QueuePolicy::default()).await;
    let c = t.queue("c", QueuePolicy::default()).await;
    let live = dl(t, &a, "live", secs(1)).await;
    let archived = dl(t, &a, "archived", secs(2)).await;
    let quarantined = dl(t, &a, "quarantined", secs(3)).await;
    let kept = dl(t, &a, "kept", secs(20)).await;
    let b1 = dl(t, &b, "b1", secs(1)).await;
    let c1 = dl(t, &c, "c1", secs(1)).await;
    t.s()
        .move_dead_letter(&a, &archived, Area::Archived, secs(4))
        .await
        .unwrap();
    t.s()
        .move_dead_letter(&a, &quarantined, Area::Quarantine, secs(4))
        .await
        .unwrap();
    t.s()
        .receive_dead_letters(&a, 1, 300_000, secs(5))
        .await
        .unwrap();

    let rules = [
        RetentionRule {
            queue: a.clone(),
            before: secs(10),
        },
        RetentionRule {
            queue: b.clone(),
            before: secs(10),
        },
    ];
    assert_eq!(
        t.s().expire_dead_letters(&rules, 2).await.unwrap(),
        [(a.clone(), 2)]
    );
    for id in [&live, &archived] {
        assert_err!(
            t.s().get_dead_letter(&a, id).await,
            StoreError::DeadLetterNotFound { .. }
        );
    }
    assert_eq!(get(t, &a, &quarantined).await.area, Area::Quarantine);
    assert_eq!(
        t.s().expire_dead_letters(&rules, 10).await.unwrap(),
        [(a.clone(), 1), (b.clone(), 1)]
    );
    assert!(
        t.s()
            .expire_dead_letters(&rules, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_err!(
        t.s().get_dead_letter(&b, &b1).await,
        StoreError::DeadLetterNotFound { .. }
    );
    assert_eq!(get(t, &a, &kept).await.area, Area::Live, "after the cutoff");
    assert_eq!(get(t, &c, &c1).await.area, Area::Live, "no rule for it");
}

pub async fn replay_counts_group_by_area_and_cause(t: &TestStore) {
    let a = t.queue("a", QueuePolicy::default()).await;
    let b = t.queue("b", QueuePolicy::default()).await;
    let c = t.queue("c", QueuePolicy::default()).await;
    let not_candidate = dl(t, &a, "n0", secs(1)).await;
    t.s()
        .update_queue(&a, &replaying(0), None, secs(2))
        .await
        .unwrap();
    let mut live = Vec::new();
    for i in 1..=8 {
        live.push(dl(t, &a, &format!("m{i}"), secs(2 + i)).await);
    }
    dl(t, &b, "b1", secs(3)).await;
    // Failures: m1 twice, m2 once.
    for (id, times) in [(&live[0], 2), (&live[1], 1)] {
        for _ in 0..times {
            t.s()
                .fail_replay(&a, id, "down", secs(100))
                .await
                .unwrap()
                .unwrap();
        }
    }
    let whole = |cause| Quarantine {
        judgement: judgement(secs(20), Some(cause)),
        body: None,
    };
    for id in [&live[2], &live[3]] {
        assert!(
            t.s()
                .quarantine_dead_letter(&a, id, &whole(QuarantineCause::NotIdempotent), secs(20))
                .await
                .unwrap()
        );
    }
    let cause = QuarantineCause::TypeNotRegistered;
    let copy = QuarantineCopy {
        from: live[4].clone(),
        id: quarantine_copy_id(&live[4], cause),
        body: b"[]".to_vec(),
        body_sha256: redrive_core::digest::sha256_hex(b"[]"),
        judgement: judgement(secs(20), Some(cause)),
    };
    assert!(t.s().put_quarantine_copy(&a, &copy).await.unwrap());
    assert!(
        t.s()
            .finish_replay(
                &a,
                &live[4],
                &ReplayFinish::Archive(judgement(secs(20), None)),
                secs(20)
            )
            .await
            .unwrap()
    );
    t.s()
        .move_dead_letter(&a, &live[5], Area::Quarantine, secs(21))
        .await
        .unwrap();

    let counts = t.s().replay_counts(None, 2).await.unwrap();
    let queues: Vec<&str> = counts.iter().map(|c| c.queue.as_str()).collect();
    assert_eq!(queues, ["a", "b"], "by name, only queues with records");
    // Live: n0 (no candidate), m1, m2, m7, m8.
    assert_eq!(
        counts[0],
        ReplayCounts {
            queue: a.clone(),
            live: 5,
            candidates: 4,
            failing: 2,
            flagged: 1,
            undecodable: 0,
            archived: 1,
            quarantined: BTreeMap::from([
                (None, 1),
                (Some(QuarantineCause::NotIdempotent), 2),
                (Some(QuarantineCause::TypeNotRegistered), 1),
            ]),
        }
    );
    assert_eq!(
        counts[1],
        ReplayCounts {
            live: 1,
            ..ReplayCounts::empty(b.clone())
        }
    );
    assert_eq!(
        t.s().replay_counts(Some(&a), 2).await.unwrap(),
        [counts[0].clone()]
    );
    let flag_at_one = t.s().replay_counts(Some(&a), 1).await.unwrap();
    assert_eq!((flag_at_one[0].failing, flag_at_one[0].flagged), (2, 2));
    assert_eq!(
        t.s().replay_counts(Some(&c), 2).await.unwrap(),
        [ReplayCounts::empty(c.clone())]
    );
    assert_err!(
        t.s().replay_counts(Some(&name("gone")), 2).await,
        StoreError::QueueNotFound { .. }
    );
    assert_eq!(get(t, &a, &not_candidate).await.replay.due_at, None);
}

pub async fn import_stores_live_records_that_are_candidates_where_replay_is_on(t: &TestStore) {
    let src = t.queue("src", QueuePolicy::default()).await;
    let on = t.queue("on", replaying(1_000)).await;
    let off = t.queue("off", QueuePolicy::default()).await;
    t.s()
        .update_queue(&on, &replaying(1_000), None, secs(1))
        .await
        .unwrap();
    let id = dl(t, &src, "m1", secs(1)).await;
    t.s()
        .receive_dead_letters(&src, 1, 30_000, secs(2))
        .await
        .unwrap();
    let template = get(t, &src, &id).await;
    let blob = |n: &str| DeadLetterRecord {
        id: redrive_core::id::new_dead_letter_id(secs(3)),
        area: Area::Quarantine,
        format: RecordFormat::Events,
        message_id: n.to_owned(),
        body: br#"[{"id":"e"}]"#.to_vec(),
        body_sha256: redrive_core::digest::sha256_hex(br#"[{"id":"e"}]"#),
        judgement: Some(judgement(secs(3), None)),
        replay: ReplayMark {
            due_at: Some(secs(1)),
            failures: 4,
            last_error: Some("x".into()),
        },
        forwarded_to: Some((name("elsewhere"), 9)),
        // An import's own route kind reads back as it was written, and so does the
        // route evidence its source gave (none of a policy version here).
        route: RouteKind::Import,
        route_kind: redrive_core::case::Route::RouteIndeterminate,
        route_rule: None,
        policy_version: None,
        consumer: Some("orders-consumer@4".into()),
        rule_version: Some("sku-rule-7".into()),
        ..template.clone()
    };
    let (r1, r2) = (blob("blob-1"), blob("blob-2"));
    t.s()
        .import_dead_letters(&on, vec![r1.clone(), r2.clone()], secs(10))
        .await
        .unwrap();
    let got = get(t, &on, &r1.id).await;
    assert_eq!(
        got,
        DeadLetterRecord {
            queue: on.clone(),
            area: Area::Live,
            // Its route evidence (the policy version that routed it with the rest) is
            // its own: the queue it is imported into routed nothing.
            forwarded_to: None,
            dlq_delivery_count: 0,
            locked_until: None,
            judgement: None,
            replay: ReplayMark {
                due_at: Some(secs(11)),
                failures: 0,
                last_error: None,
            },
            ..r1.clone()
        }
    );
    assert_eq!(get(t, &on, &r2.id).await.message_id, "blob-2");

    let r3 = blob("blob-3");
    t.s()
        .import_dead_letters(&off, vec![r3.clone()], secs(10))
        .await
        .unwrap();
    let got = get(t, &off, &r3.id).await;
    assert_eq!((got.area, got.replay.due_at), (Area::Live, None));
    assert_eq!(got.format, RecordFormat::Events);

    // One transaction: a record that cannot be stored stores none.
    let r4 = blob("blob-4");
    assert!(
        t.s()
            .import_dead_letters(&off, vec![r4.clone(), r3.clone()], secs(11))
            .await
            .is_err()
    );
    assert_err!(
        t.s().get_dead_letter(&off, &r4.id).await,
        StoreError::DeadLetterNotFound { .. }
    );
    assert_err!(
        t.s()
            .import_dead_letters(&name("gone"), vec![blob("blob-5")], secs(11))
            .await,
        StoreError::QueueNotFound { .. }
    );
}

pub async fn moving_into_live_is_a_restore_and_moving_out_ends_the_candidate(t: &TestStore) {
    let q = t.queue("orders", replaying(1_000)).await;
    let id = dl(t, &q, "m1", secs(1)).await;
    t.s().fail_replay(&q, &id, "down", secs(50)).await.unwrap();
    t.s()
        .fail_replay(&q, &id, "still down", secs(60))
        .await
        .unwrap();
    // Within the live area nothing changes.
    t.s()
        .move_dead_letter(&q, &id, Area::Live, secs(10))
        .await
        .unwrap();
    let failing = ReplayMark {
        due_at: Some(secs(60)),
        failures: 2,
        last_error: Some("still down".into()),
    };
    assert_eq!(get(t, &q, &id).await.replay, failing);

    t.s()
        .move_dead_letter(&q, &id, Area::Quarantine, secs(20))
        .await
        .unwrap();
    assert_eq!(
        get(t, &q, &id).await.replay,
        ReplayMark {
            due_at: None,
            ..failing.clone()
        }
    );
    t.s()
        .move_dead_letter(&q, &id, Area::Live, secs(30))
        .await
        .unwrap();
    assert_eq!(
        get(t, &q, &id).await.replay,
        ReplayMark {
            due_at: Some(secs(31)),
            failures: 0,
            last_error: None,
        },
        "a restore: a candidate again, its failures forgotten"
    );
    t.s()
        .move_dead_letter(&q, &id, Area::Archived, secs(40))
        .await
        .unwrap();
    assert_eq!(due(t, &q, &id).await, None);

    // On a queue without replay, a restored record is no candidate.
    let off = t.queue("off", QueuePolicy::default()).await;
    let other = dl(t, &off, "m2", secs(1)).await;
    t.s()
        .move_dead_letter(&off, &other, Area::Quarantine, secs(2))
        .await
        .unwrap();
    t.s()
        .move_dead_letter(&off, &other, Area::Live, secs(3))
        .await
        .unwrap();
    assert_eq!(due(t, &off, &other).await, None);

    // A resubmission archives the record: a candidate no more.
    let resubmitted = dl(t, &q, "m3", secs(41)).await;
    assert_eq!(due(t, &q, &resubmitted).await, Some(secs(42)));
    t.s()
        .resubmit_dead_letter(&q, &resubmitted, secs(43))
        .await
        .unwrap();
    let r = get(t, &q, &resubmitted).await;
    assert_eq!((r.area, r.replay.due_at), (Area::Archived, None));
    assert!(
        t.s()
            .claim_replay_candidates(secs(1_000), 10, 60_000)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A claim stops at its byte budget (`MAX_CLAIM_BYTES`), in claim order, and always takes
/// one record however large; the records it leaves stay due for the next claim.
pub async fn a_claim_stops_at_its_byte_budget(t: &TestStore) {
    let src = t.queue("src", QueuePolicy::default()).await;
    let on = t.queue("on", replaying(0)).await;
    let id = dl(t, &src, "m1", secs(1)).await;
    let template = get(t, &src, &id).await;
    let big = vec![b'x'; 8 * 1024 * 1024];
    let records: Vec<DeadLetterRecord> = (0..3)
        .map(|i| DeadLetterRecord {
            id: redrive_core::id::new_dead_letter_id(secs(2)),
            message_id: format!("big-{i}"),
            body: big.clone(),
            body_sha256: redrive_core::digest::sha256_hex(&big),
            ..template.clone()
        })
        .collect();
    t.s()
        .import_dead_letters(&on, records.clone(), secs(3))
        .await
        .unwrap();
    let first = t
        .s()
        .claim_replay_candidates(secs(3), 10, 60_000)
        .await
        .unwrap();
    let ids: Vec<&str> = first.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids,
        [records[0].id.as_str(), records[1].id.as_str()],
        "16 MiB of bodies in the first claim"
    );
    let second = t
        .s()
        .claim_replay_candidates(secs(3), 10, 60_000)
        .await
        .unwrap();
    assert_eq!(second.len(), 1, "the third waited for the next claim");
    assert_eq!(second[0].id, records[2].id);
}

/// A record an operator moves counts under no judgement's cause any more: quarantined by
/// a judgement, restored, then put back in quarantine by hand, it counts as `manual`.
pub async fn an_operator_move_counts_under_no_judgement_cause(t: &TestStore) {
    let q = t.queue("orders", replaying(0)).await;
    let id = dl(t, &q, "m1", secs(1)).await;
    let quarantine = Quarantine {
        judgement: judgement(secs(2), Some(QuarantineCause::NotIdempotent)),
        body: None,
    };
    assert!(
        t.s()
            .quarantine_dead_letter(&q, &id, &quarantine, secs(2))
            .await
            .unwrap()
    );
    let counts = |c: Vec<ReplayCounts>| c[0].quarantined.clone();
    assert_eq!(
        counts(t.s().replay_counts(Some(&q), 10).await.unwrap()),
        BTreeMap::from([(Some(QuarantineCause::NotIdempotent), 1)])
    );
    t.s()
        .move_dead_letter(&q, &id, Area::Live, secs(3))
        .await
        .unwrap();
    t.s()
        .move_dead_letter(&q, &id, Area::Quarantine, secs(4))
        .await
        .unwrap();
    assert_eq!(
        counts(t.s().replay_counts(Some(&q), 10).await.unwrap()),
        BTreeMap::from([(None, 1)]),
        "moved there by hand"
    );
    assert!(
        get(t, &q, &id).await.judgement.is_some(),
        "the judgement stays as history"
    );
}
