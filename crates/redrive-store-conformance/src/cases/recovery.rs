//! Recovery cases: which dead-letter writes open one and what it starts with, conditional
//! updates, searches and counts, the cases due for a check, payload retention, intents
//! and effect authorities.

use std::collections::BTreeMap;

use redrive_core::EntityName;
use redrive_core::case::{CaseState, Lease, Route, RouteTarget, TimelineEntry};
use redrive_core::judgement::{Judgement, QuarantineCause, quarantine_copy_id};
use redrive_store::skeleton::cases::{case_id, default_review_deadline, opens_case};
use redrive_store::{
    CaseMut, CasePayload, CaseQuery, CaseRecord, CaseUpdate, DeadLetterRecord, DeadLettered,
    EffectAuthority, IntentRecord, IntentStatus, MAX_TIMELINE_ENTRIES, Quarantine, QuarantineCopy,
    ReplayFinish,
};

use super::prelude::*;

/// A policy with automatic replay on, judging a second after a record becomes live.
fn replaying() -> QueuePolicy {
    policy(|p| {
        p.auto_replay.enabled = true;
        p.auto_replay.judge_delay_ms = 1_000;
    })
}

/// Sends `m`, receives it and dead-letters it at `now` by the application's decision
/// (reason `reason`, description `description`); returns what the settlement reported.
async fn app_dead_letter(
    t: &TestStore,
    q: &EntityName,
    m: NewMessage,
    reason: &str,
    description: Option<&str>,
    now: Timestamp,
) -> DeadLettered {
    let id = m.message_id.clone();
    t.send(q, vec![m], now).await;
    let d = t.take(q, 1, 30_000, now).await;
    assert_eq!(d.len(), 1, "the message just sent is received");
    assert_eq!(d[0].message.message_id, id);
    let out = t
        .s()
        .settle(
            q,
            vec![Settlement {
                lock_token: d[0].lock_token.clone(),
                action: SettleAction::DeadLetter {
                    reason: reason.to_owned(),
                    description: description.map(str::to_owned),
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
    out.effects.dead_lettered[0].clone()
}

/// Dead-letters `id` (body = id) by the application with reason `Bad` at `now`.
async fn dl(t: &TestStore, q: &EntityName, id: &str, now: Timestamp) -> DeadLettered {
    app_dead_letter(t, q, msg(id, id.as_bytes()), "Bad", None, now).await
}

/// Sends `m` to a queue whose `max_delivery_count` is 1, receives it at `now` and abandons
/// it a second later: the broker dead-letters it. Returns what the settlement reported.
async fn broker_dead_letter(
    t: &TestStore,
    q: &EntityName,
    m: NewMessage,
    now: Timestamp,
) -> DeadLettered {
    t.send(q, vec![m], now).await;
    let d = t.take(q, 1, 30_000, now).await;
    assert_eq!(d.len(), 1, "the message just sent is received");
    let out = t
        .s()
        .settle(
            q,
            vec![Settlement {
                lock_token: d[0].lock_token.clone(),
                action: SettleAction::Abandon {
                    delay_ms: None,
                    last_attempt: None,
                },
            }],
            now.plus_millis(1_000),
        )
        .await
        .unwrap();
    assert!(out.results[0].is_ok(), "{:?}", out.results);
    assert_eq!(
        out.effects.dead_lettered.len(),
        1,
        "the last delivery gave up"
    );
    out.effects.dead_lettered[0].clone()
}

async fn record(t: &TestStore, q: &EntityName, id: &str) -> DeadLetterRecord {
    t.s().get_dead_letter(q, id).await.unwrap()
}

/// The case of record `record_id`, which must exist.
async fn case_of(t: &TestStore, record_id: &str) -> CaseRecord {
    t.s().get_case(&case_id(record_id)).await.unwrap()
}

/// Asserts that record `id` of `q` has no case.
async fn no_case(t: &TestStore, record_id: &str) {
    assert_err!(
        t.s().get_case(&case_id(record_id)).await,
        StoreError::CaseNotFound { .. }
    );
}

/// Asserts that the opening rule over the stored record agrees with whether the store
/// opened a case for it (for records that were not moved after they were written).
async fn rule_agrees(t: &TestStore, q: &EntityName, record_id: &str) {
    let r = record(t, q, record_id).await;
    let has = t.s().get_case(&case_id(record_id)).await.is_ok();
    assert_eq!(
        opens_case(&r),
        has,
        "the rule and the store agree on {record_id} ({:?})",
        r.area
    );
}

/// A case's update writing `set` and appending `append` over `c` as read.
fn update(c: &CaseRecord, set: CaseMut, append: Vec<TimelineEntry>) -> CaseUpdate {
    CaseUpdate {
        id: c.id.clone(),
        version: c.version,
        set,
        append,
        payload: None,
        archive_record: false,
        audit: Vec::new(),
    }
}

fn entry(at: Timestamp, actor: &str, state: CaseState, evidence: &str) -> TimelineEntry {
    TimelineEntry {
        at,
        actor: actor.to_owned(),
        state,
        evidence: evidence.to_owned(),
        fields: BTreeMap::new(),
    }
}

/// Writes `f` applied to the mutable part of `record_id`'s case, expecting success.
async fn change(t: &TestStore, record_id: &str, f: impl FnOnce(&mut CaseMut)) -> CaseRecord {
    let c = case_of(t, record_id).await;
    let mut set = c.m.clone();
    f(&mut set);
    t.s()
        .update_case(&update(&c, set, Vec::new()))
        .await
        .unwrap()
}

fn ids(cases: &[CaseRecord]) -> Vec<String> {
    cases.iter().map(|c| c.id.clone()).collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn judgement(at: Timestamp, cause: Option<QuarantineCause>) -> Judgement {
    Judgement::new(at.0, cause)
}

pub async fn a_dead_letter_without_auto_replay_opens_a_case_with_the_record_identity(
    t: &TestStore,
) {
    let q = t
        .queue("orders", policy(|p| p.max_delivery_count = 1))
        .await;
    let m = NewMessage {
        message_type: Some("order.created".into()),
        intent: Some("intent-1".into()),
        valid_until: Some(secs(3_600)),
        session_id: None,
        ..msg("m1", b"payload")
    };
    let e = broker_dead_letter(t, &q, m, secs(1)).await;
    assert!(e.case_opened, "not settled by automatic replay: a case");
    assert!(!e.candidate);
    assert_eq!(e.fell_back_from, None);
    let r = record(t, &q, &e.dead_letter_id).await;
    assert_eq!(
        (r.route_target, r.missing_target.as_deref()),
        (RouteTarget::Written, None)
    );
    let c = case_of(t, &e.dead_letter_id).await;
    assert_eq!(c.id, case_id(&r.id));
    assert!(c.id.starts_with("case_"));
    assert_eq!(c.record_id, r.id);
    assert_eq!(c.queue, q);
    assert_eq!(c.message_id, "m1");
    assert_eq!(c.intent_id, "intent-1", "the message's intent");
    assert_eq!(c.message_type.as_deref(), Some("order.created"));
    assert_eq!(c.reason, "MaxDeliveryCountExceeded");
    assert_eq!(c.description, r.description);
    assert_eq!(c.delivery_count, 1);
    assert_eq!(c.policy_version, Some(1));
    assert_eq!(c.body_sha256, redrive_core::digest::sha256_hex(b"payload"));
    assert_eq!(c.body_size, 7);
    assert_eq!(c.valid_until, Some(secs(3_600)));
    assert_eq!(c.dead_lettered_at, secs(2));
    assert_eq!(c.opened_at, secs(2));
    assert_eq!(c.version, 1);
    assert_eq!(c.m.state, CaseState::RouteObserved);
    assert_eq!(c.m.route, Route::BrokerRouted);
    assert_eq!(c.m.evidence_quality, r.count_quality);
    assert_eq!(c.m.lease, None);
    assert_eq!(c.m.review_deadline.0, default_review_deadline(secs(2)));
    assert_eq!(
        c.m.next_check_at,
        Some(secs(2)),
        "the case worker looks at it now"
    );
    assert_eq!(
        (c.m.closed_at, c.m.payload_until, c.m.payload_deleted_at),
        (None, None, None)
    );
    assert!(c.m.data.as_object().is_some_and(|o| o.is_empty()));
    let tl = t.s().case_timeline(&c.id).await.unwrap();
    assert_eq!(tl.len(), 1);
    assert_eq!(
        (tl[0].at, tl[0].actor.as_str(), tl[0].state),
        (secs(2), "broker", CaseState::RouteObserved)
    );
    assert!(tl[0].evidence.contains("MaxDeliveryCountExceeded"));
    rule_agrees(t, &q, &r.id).await;

    // The application's dead letter of a message without an intent: the intent is its id.
    let e = app_dead_letter(t, &q, msg("m2", b"xy"), "Bad", Some("disk full"), secs(5)).await;
    assert!(e.case_opened);
    let c = case_of(t, &e.dead_letter_id).await;
    assert_eq!(c.intent_id, "m2", "no intent: the message id");
    assert_eq!(c.m.route, Route::ApplicationQuarantined);
    assert_eq!(
        (c.reason.as_str(), c.description.as_deref()),
        ("Bad", Some("disk full"))
    );
    assert_eq!(
        (c.message_type, c.valid_until, c.body_size),
        (None, None, 2)
    );
    assert_eq!(c.opened_at, secs(5));
    rule_agrees(t, &q, &e.dead_letter_id).await;
}

pub async fn a_dead_letter_on_a_replaying_queue_opens_its_case_only_when_quarantined(
    t: &TestStore,
) {
    let q = t.queue("orders", replaying()).await;
    let e = dl(t, &q, "m1", secs(1)).await;
    assert!(e.candidate);
    assert!(!e.case_opened, "automatic replay judges it first");
    no_case(t, &e.dead_letter_id).await;
    rule_agrees(t, &q, &e.dead_letter_id).await;
    let quarantine = Quarantine {
        judgement: judgement(secs(2), Some(QuarantineCause::NotIdempotent)),
        body: None,
    };
    assert!(
        t.s()
            .quarantine_dead_letter(&q, &e.dead_letter_id, &quarantine, secs(2))
            .await
            .unwrap()
    );
    let c = case_of(t, &e.dead_letter_id).await;
    assert_eq!((c.opened_at, c.version), (secs(2), 1));
    assert_eq!(c.dead_lettered_at, secs(1));
    assert_eq!(c.m.state, CaseState::RouteObserved);
    assert_eq!(c.m.route, Route::ApplicationQuarantined);
    let tl = t.s().case_timeline(&c.id).await.unwrap();
    assert_eq!(tl.len(), 1);
    assert_eq!(tl[0].at, secs(2));
    rule_agrees(t, &q, &e.dead_letter_id).await;
    // A second quarantine of the same record does nothing, and opens nothing twice.
    assert!(
        !t.s()
            .quarantine_dead_letter(&q, &e.dead_letter_id, &quarantine, secs(3))
            .await
            .unwrap()
    );
    assert_eq!(t.s().case_timeline(&c.id).await.unwrap().len(), 1);

    // A quarantine copy of part of a record is a case; the record itself stays a candidate.
    let src = dl(t, &q, "m2", secs(4)).await;
    let cause = QuarantineCause::TypeNotRegistered;
    let body = b"[2]".to_vec();
    let copy = QuarantineCopy {
        from: src.dead_letter_id.clone(),
        id: quarantine_copy_id(&src.dead_letter_id, cause),
        body: body.clone(),
        body_sha256: redrive_core::digest::sha256_hex(&body),
        judgement: Judgement {
            copied_from: Some(src.dead_letter_id.clone()),
            ..judgement(secs(5), Some(cause))
        },
    };
    assert!(t.s().put_quarantine_copy(&q, &copy).await.unwrap());
    let c = case_of(t, &copy.id).await;
    assert_eq!(c.record_id, copy.id);
    assert_eq!(
        (c.body_sha256.as_str(), c.body_size),
        (copy.body_sha256.as_str(), 3)
    );
    assert_eq!(c.message_id, "m2");
    assert_eq!(t.s().case_timeline(&c.id).await.unwrap().len(), 1);
    rule_agrees(t, &q, &copy.id).await;
    no_case(t, &src.dead_letter_id).await;
    assert!(!t.s().put_quarantine_copy(&q, &copy).await.unwrap());
    assert_eq!(t.s().case_timeline(&c.id).await.unwrap().len(), 1);

    // A judgement that settles a candidate (archived with it) opens nothing.
    let settled = dl(t, &q, "m3", secs(6)).await;
    assert!(
        t.s()
            .finish_replay(
                &q,
                &settled.dead_letter_id,
                &ReplayFinish::Archive(judgement(secs(7), None)),
                secs(7),
            )
            .await
            .unwrap()
    );
    assert_eq!(
        record(t, &q, &settled.dead_letter_id).await.area,
        Area::Archived
    );
    no_case(t, &settled.dead_letter_id).await;
    rule_agrees(t, &q, &settled.dead_letter_id).await;
}

pub async fn a_forwarded_dead_letter_opens_a_case_and_a_fallback_is_incomplete_evidence(
    t: &TestStore,
) {
    t.queue("orders-dlq", QueuePolicy::default()).await;
    // Forwarded: the archived record stands for the item now waiting in the dead-letter
    // queue, even where automatic replay is on (a forwarded record is no candidate).
    let q = t
        .queue(
            "orders",
            policy(|p| {
                p.dead_letter_queue = Some(name("orders-dlq"));
                p.max_delivery_count = 1;
                p.auto_replay.enabled = true;
            }),
        )
        .await;
    let e = broker_dead_letter(t, &q, msg("m1", b"a"), secs(1)).await;
    assert!(e.forwarded_to.is_some());
    assert!(e.case_opened);
    assert_eq!(e.fell_back_from, None);
    let r = record(t, &q, &e.dead_letter_id).await;
    assert_eq!(r.area, Area::Archived);
    assert_eq!(r.route_target, RouteTarget::Written);
    let c = case_of(t, &r.id).await;
    assert_eq!(
        (c.queue.clone(), c.m.route),
        (q.clone(), Route::BrokerRouted)
    );
    assert_eq!(c.m.evidence_quality, r.count_quality);
    rule_agrees(t, &q, &r.id).await;

    // Its dead-letter queue is missing: the record falls back to the queue's own store,
    // says so, and the case's attempt evidence is at most incomplete.
    let f = t
        .queue(
            "payments",
            policy(|p| {
                p.dead_letter_queue = Some(name("gone"));
                p.max_delivery_count = 1;
            }),
        )
        .await;
    let e = broker_dead_letter(t, &f, msg("m2", b"b"), secs(3)).await;
    assert_eq!(e.forwarded_to, None);
    assert_eq!(e.fell_back_from, Some(name("gone")));
    assert!(e.case_opened);
    let r = record(t, &f, &e.dead_letter_id).await;
    assert_eq!(r.area, Area::Live);
    assert_eq!(r.route_target, RouteTarget::FellBack);
    assert_eq!(r.missing_target.as_deref(), Some("gone"));
    assert_eq!(r.count_quality, EvidenceQuality::Exact);
    let c = case_of(t, &r.id).await;
    assert_eq!(c.m.evidence_quality, EvidenceQuality::Incomplete);
    assert_eq!(c.m.route, Route::BrokerRouted);
    rule_agrees(t, &f, &r.id).await;
}

fn decided(at: Timestamp, case_id: &str, what: &str) -> redrive_store::AuditFields {
    redrive_store::AuditFields {
        at,
        actor_id: "system:cases".into(),
        actor_name: "cases".into(),
        action: "case.decide".into(),
        entity: Some("orders".into()),
        targets: vec![case_id.to_owned(), what.to_owned()],
        outcome: "ok".into(),
        client: None,
    }
}

async fn decisions_on(t: &TestStore) -> Vec<Vec<String>> {
    t.s()
        .list_audit(&redrive_store::AuditQuery {
            action: Some("case.decide".into()),
            limit: 100,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.fields.targets)
        .collect()
}

pub async fn update_cases_writes_a_batch_each_with_its_audit_and_refuses_each_alone(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let mut cases = Vec::new();
    for (i, m) in ["m1", "m2", "m3"].into_iter().enumerate() {
        let e = dl(t, &q, m, secs(1 + i as i64)).await;
        cases.push(case_of(t, &e.dead_letter_id).await);
    }
    let retained = |c: &CaseRecord| CaseMut {
        state: CaseState::Retained,
        ..c.m.clone()
    };
    let with_audit = |c: &CaseRecord, what: &str| CaseUpdate {
        audit: vec![decided(secs(20), &c.id, what)],
        ..update(
            c,
            retained(c),
            vec![entry(secs(20), "broker", CaseState::Retained, "kept")],
        )
    };
    // One update alone: its audit entry is written with it; a stale one writes neither.
    let stale = CaseUpdate {
        version: 9,
        ..with_audit(&cases[0], "stale")
    };
    assert_err!(
        t.s().update_case(&stale).await,
        StoreError::CaseChanged { version: 1, .. }
    );
    assert!(decisions_on(t).await.is_empty(), "nothing audited");

    // A batch: the second is stale and the fourth names no case; each is refused alone.
    let gone = CaseUpdate {
        id: "case_none".into(),
        ..with_audit(&cases[0], "gone")
    };
    let answers = t
        .s()
        .update_cases(&[
            with_audit(&cases[2], "third"),
            CaseUpdate {
                version: 7,
                ..with_audit(&cases[1], "second")
            },
            with_audit(&cases[0], "first"),
            gone,
        ])
        .await
        .unwrap();
    assert_eq!(answers.len(), 4, "one answer for each update, in order");
    let third = answers[0].as_ref().unwrap();
    assert_eq!(
        (third.id.as_str(), third.version),
        (cases[2].id.as_str(), 2)
    );
    assert_eq!(third.m.state, CaseState::Retained);
    assert!(matches!(
        answers[1],
        Err(StoreError::CaseChanged { version: 1, .. })
    ));
    let first = answers[2].as_ref().unwrap();
    assert_eq!(
        (first.id.as_str(), first.version),
        (cases[0].id.as_str(), 2)
    );
    assert!(matches!(answers[3], Err(StoreError::CaseNotFound { .. })));
    assert_eq!(
        t.s().get_case(&cases[1].id).await.unwrap(),
        cases[1],
        "nothing of it written"
    );
    assert_eq!(t.s().case_timeline(&cases[1].id).await.unwrap().len(), 1);
    assert_eq!(t.s().case_timeline(&cases[0].id).await.unwrap().len(), 2);
    let mut audited = decisions_on(t).await;
    audited.sort();
    assert_eq!(
        audited,
        vec![
            vec![cases[0].id.clone(), "first".to_owned()],
            vec![cases[2].id.clone(), "third".to_owned()],
        ],
        "the audit entries of the updates written, and only theirs"
    );
    assert!(t.s().update_cases(&[]).await.unwrap().is_empty());
}

pub async fn update_case_is_conditional_on_the_version_read_and_writes_everything_at_once(
    t: &TestStore,
) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let e = dl(t, &q, "m1", secs(1)).await;
    let c = case_of(t, &e.dead_letter_id).await;
    assert_eq!(c.version, 1);
    let set = CaseMut {
        state: CaseState::Retained,
        route: Route::RouteIndeterminate,
        evidence_quality: EvidenceQuality::Approximate,
        lease: Some(Lease {
            owner: "alice".into(),
            until: secs(100),
        }),
        review_deadline: secs(500),
        next_check_at: Some(secs(200)),
        closed_at: Some(secs(300)),
        payload_until: Some(secs(400)),
        payload_deleted_at: None,
        source: Some("svc".into()),
        subject: Some("order/1".into()),
        data: serde_json::json!({"diagnosis": {"text": "schema drift"}, "n": 2}),
    };
    let mut fields = BTreeMap::new();
    fields.insert("policy_version".to_owned(), "1".to_owned());
    let appended = vec![
        TimelineEntry {
            fields,
            ..entry(
                secs(10),
                "alice",
                CaseState::PayloadPreserved,
                "digest matches",
            )
        },
        entry(secs(11), "alice", CaseState::Retained, "kept for review"),
    ];
    let body = b"transformed".to_vec();
    let digest = redrive_core::digest::sha256_hex(&body);

    // Read at another version: nothing is written.
    let stale = CaseUpdate {
        version: 2,
        payload: Some(CasePayload {
            digest: digest.clone(),
            body: body.clone(),
        }),
        archive_record: true,
        audit: Vec::new(),
        ..update(&c, set.clone(), appended.clone())
    };
    assert_err!(
        t.s().update_case(&stale).await,
        StoreError::CaseChanged { version: 1, .. }
    );
    assert_eq!(case_of(t, &e.dead_letter_id).await, c, "nothing written");
    assert_eq!(t.s().case_timeline(&c.id).await.unwrap().len(), 1);
    assert_eq!(t.s().case_payload(&c.id, &digest).await.unwrap(), None);
    assert_eq!(record(t, &q, &e.dead_letter_id).await.area, Area::Live);

    // A timeline may not grow past its bound: refused whole.
    let too_many = update(
        &c,
        set.clone(),
        vec![entry(secs(9), "alice", CaseState::Retained, "x"); MAX_TIMELINE_ENTRIES],
    );
    assert_err!(
        t.s().update_case(&too_many).await,
        StoreError::TimelineFull { .. }
    );
    assert_eq!(case_of(t, &e.dead_letter_id).await, c, "nothing written");

    // At the version read: everything in one write.
    let written = t
        .s()
        .update_case(&CaseUpdate {
            version: 1,
            ..stale.clone()
        })
        .await
        .unwrap();
    assert_eq!(written.version, 2);
    assert_eq!(written.m, set, "every mutable field as written");
    assert_eq!(
        CaseRecord {
            version: 1,
            m: c.m.clone(),
            ..written.clone()
        },
        c,
        "the identity stays"
    );
    assert_eq!(case_of(t, &e.dead_letter_id).await, written);
    let tl = t.s().case_timeline(&c.id).await.unwrap();
    assert_eq!(tl.len(), 3);
    assert_eq!(tl[0].state, CaseState::RouteObserved);
    assert_eq!(
        &tl[1..],
        &appended[..],
        "appended in order, with times and fields"
    );
    assert_eq!(
        t.s().case_payload(&c.id, &digest).await.unwrap(),
        Some(body.clone())
    );
    assert_eq!(t.s().case_payload(&c.id, "other").await.unwrap(), None);
    let r = record(t, &q, &e.dead_letter_id).await;
    assert_eq!(r.area, Area::Archived, "the record's state repaired");
    assert_eq!(r.locked_until, None);

    // The version read is now stale.
    assert_err!(
        t.s()
            .update_case(&update(&c, set.clone(), Vec::new()))
            .await,
        StoreError::CaseChanged { version: 2, .. }
    );
    // Clearing optional fields writes them as cleared.
    let cleared = CaseMut {
        lease: None,
        next_check_at: None,
        closed_at: None,
        payload_until: None,
        source: None,
        subject: None,
        data: serde_json::json!({}),
        ..set.clone()
    };
    let again = t
        .s()
        .update_case(&update(&written, cleared.clone(), Vec::new()))
        .await
        .unwrap();
    assert_eq!((again.version, again.m.clone()), (3, cleared));
    assert_eq!(t.s().case_timeline(&c.id).await.unwrap().len(), 3);

    // The repair moves only a live record: a quarantined one stays.
    let e2 = dl(t, &q, "m2", secs(20)).await;
    t.s()
        .move_dead_letter(&q, &e2.dead_letter_id, Area::Quarantine, secs(21))
        .await
        .unwrap();
    let c2 = case_of(t, &e2.dead_letter_id).await;
    let u = CaseUpdate {
        archive_record: true,
        audit: Vec::new(),
        ..update(&c2, c2.m.clone(), Vec::new())
    };
    assert_eq!(t.s().update_case(&u).await.unwrap().version, 2);
    assert_eq!(
        record(t, &q, &e2.dead_letter_id).await.area,
        Area::Quarantine
    );

    // Unknown cases.
    let unknown = CaseUpdate {
        id: "case_unknown".into(),
        ..update(&c, set, Vec::new())
    };
    assert_err!(
        t.s().update_case(&unknown).await,
        StoreError::CaseNotFound { .. }
    );
    assert_err!(
        t.s().get_case("case_unknown").await,
        StoreError::CaseNotFound { .. }
    );
    assert_err!(
        t.s().case_timeline("case_unknown").await,
        StoreError::CaseNotFound { .. }
    );
    assert_eq!(
        t.s().case_payload("case_unknown", &digest).await.unwrap(),
        None
    );
}

pub async fn list_cases_filters_and_pages_and_counts_group_them(t: &TestStore) {
    let a = t.queue("a", QueuePolicy::default()).await;
    let b = t.queue("b", QueuePolicy::default()).await;
    let typed = |id: &str| NewMessage {
        message_type: Some("t1".into()),
        ..msg(id, id.as_bytes())
    };
    let r1 = app_dead_letter(
        t,
        &a,
        typed("m1"),
        "Bad",
        Some("disk full on host-1"),
        secs(1),
    )
    .await
    .dead_letter_id;
    let r2 = app_dead_letter(t, &a, msg("m2", b"2"), "Worse", None, secs(2))
        .await
        .dead_letter_id;
    let m3 = NewMessage {
        intent: Some("i-3".into()),
        ..typed("m3")
    };
    let r3 = app_dead_letter(t, &b, m3, "Bad", Some("timeout"), secs(3))
        .await
        .dead_letter_id;
    let r4 = app_dead_letter(t, &b, msg("m4", b"4"), "Other", None, secs(4))
        .await
        .dead_letter_id;
    let (c1, c2, c3, c4) = (case_id(&r1), case_id(&r2), case_id(&r3), case_id(&r4));
    change(t, &r1, |m| {
        m.lease = Some(Lease {
            owner: "alice".into(),
            until: secs(100),
        });
        m.state = CaseState::Retained;
        m.source = Some("svc-a".into());
        m.subject = Some("s1".into());
        m.evidence_quality = EvidenceQuality::Approximate;
        m.review_deadline = secs(50);
    })
    .await;
    change(t, &r2, |m| {
        m.state = CaseState::Cancelled;
        m.closed_at = Some(secs(60));
        m.review_deadline = secs(40);
    })
    .await;
    change(t, &r3, |m| m.review_deadline = secs(1_000)).await;

    let list = |q: CaseQuery| async move { ids(&t.s().list_cases(&q).await.unwrap()) };
    let all = sorted(vec![c1.clone(), c2.clone(), c3.clone(), c4.clone()]);
    assert_eq!(
        list(CaseQuery::default()).await,
        all,
        "limit 0: a default page"
    );
    let checks: Vec<(CaseQuery, Vec<&String>)> = vec![
        (
            CaseQuery {
                queue: Some(a.clone()),
                ..Default::default()
            },
            vec![&c1, &c2],
        ),
        (
            CaseQuery {
                reason: Some("Bad".into()),
                ..Default::default()
            },
            vec![&c1, &c3],
        ),
        (
            CaseQuery {
                message_type: Some("t1".into()),
                ..Default::default()
            },
            vec![&c1, &c3],
        ),
        (
            CaseQuery {
                source: Some("svc-a".into()),
                ..Default::default()
            },
            vec![&c1],
        ),
        (
            CaseQuery {
                subject: Some("s1".into()),
                ..Default::default()
            },
            vec![&c1],
        ),
        (
            CaseQuery {
                states: vec![CaseState::RouteObserved],
                ..Default::default()
            },
            vec![&c3, &c4],
        ),
        (
            CaseQuery {
                states: vec![CaseState::Retained, CaseState::Cancelled],
                ..Default::default()
            },
            vec![&c1, &c2],
        ),
        (
            CaseQuery {
                open: true,
                ..Default::default()
            },
            vec![&c1, &c3, &c4],
        ),
        (
            CaseQuery {
                owner: Some("alice".into()),
                ..Default::default()
            },
            vec![&c1],
        ),
        (
            CaseQuery {
                overdue_at: Some(secs(55)),
                ..Default::default()
            },
            vec![&c1],
        ),
        (
            CaseQuery {
                since: Some(secs(2)),
                ..Default::default()
            },
            vec![&c2, &c3, &c4],
        ),
        (
            CaseQuery {
                until: Some(secs(3)),
                ..Default::default()
            },
            vec![&c1, &c2],
        ),
        (
            CaseQuery {
                since: Some(secs(2)),
                until: Some(secs(4)),
                ..Default::default()
            },
            vec![&c2, &c3],
        ),
        (
            CaseQuery {
                evidence_quality: Some(EvidenceQuality::Approximate),
                ..Default::default()
            },
            vec![&c1],
        ),
        (
            CaseQuery {
                text: Some("host".into()),
                ..Default::default()
            },
            vec![&c1],
        ),
        (
            CaseQuery {
                text: Some("Host".into()),
                ..Default::default()
            },
            vec![],
        ),
        (
            CaseQuery {
                intent_id: Some("i-3".into()),
                ..Default::default()
            },
            vec![&c3],
        ),
        (
            CaseQuery {
                intent_id: Some("m2".into()),
                ..Default::default()
            },
            vec![&c2],
        ),
        (
            CaseQuery {
                queue: Some(b.clone()),
                reason: Some("Bad".into()),
                ..Default::default()
            },
            vec![&c3],
        ),
    ];
    for (query, want) in checks {
        let want = sorted(want.into_iter().cloned().collect());
        assert_eq!(list(query.clone()).await, want, "{query:?}");
    }

    // Paging by the cursor returns every case once, in id order.
    let mut paged = Vec::new();
    let mut after = None;
    loop {
        let page = list(CaseQuery {
            after: after.clone(),
            limit: 1,
            ..Default::default()
        })
        .await;
        assert!(page.len() <= 1, "the limit holds");
        let Some(last) = page.last().cloned() else {
            break;
        };
        paged.extend(page);
        after = Some(last);
    }
    assert_eq!(paged, all);

    // Counts group what the filters match; the cursor and the limit do not count.
    let counts = t
        .s()
        .case_counts(&CaseQuery {
            after: Some(all[3].clone()),
            limit: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(counts.total, 4);
    assert_eq!(
        counts.by_reason,
        BTreeMap::from([("Bad".into(), 2), ("Other".into(), 1), ("Worse".into(), 1)])
    );
    assert_eq!(
        counts.by_type,
        BTreeMap::from([(String::new(), 2), ("t1".into(), 2)])
    );
    assert_eq!(
        counts.by_state,
        BTreeMap::from([
            ("cancelled".into(), 1),
            ("retained".into(), 1),
            ("route_observed".into(), 2)
        ])
    );
    assert_eq!(counts.oldest_opened_at, Some(secs(1)));
    let counts = t
        .s()
        .case_counts(&CaseQuery {
            queue: Some(b.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(counts.total, 2);
    assert_eq!(counts.oldest_opened_at, Some(secs(3)));
    assert_eq!(
        counts.by_reason,
        BTreeMap::from([("Bad".into(), 1), ("Other".into(), 1)])
    );
    let none = t
        .s()
        .case_counts(&CaseQuery {
            reason: Some("nothing".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(none, Default::default());
}

/// The latest dead-letter time of a queue's cases with one reason: the newest case's,
/// whatever order the cases were written in, open or closed; that queue's and that
/// reason's only; none before the first.
pub async fn the_latest_dead_letter_of_a_queue_and_reason_is_its_newest_case(t: &TestStore) {
    let a = t.queue("a", QueuePolicy::default()).await;
    let b = t.queue("b", QueuePolicy::default()).await;
    let latest = |q: EntityName, reason: &'static str| async move {
        t.s().latest_case_dead_letter(&q, reason).await.unwrap()
    };
    assert_eq!(latest(a.clone(), "Bad").await, None, "no case yet");
    let newest = app_dead_letter(t, &a, msg("m1", b"1"), "Bad", None, secs(50))
        .await
        .dead_letter_id;
    app_dead_letter(t, &a, msg("m2", b"2"), "Bad", None, secs(30)).await;
    app_dead_letter(t, &a, msg("m3", b"3"), "Worse", None, secs(90)).await;
    app_dead_letter(t, &b, msg("m4", b"4"), "Bad", None, secs(200)).await;
    assert_eq!(latest(a.clone(), "Bad").await, Some(secs(50)));
    assert_eq!(latest(a.clone(), "Worse").await, Some(secs(90)));
    assert_eq!(latest(b.clone(), "Bad").await, Some(secs(200)));
    assert_eq!(latest(b.clone(), "Worse").await, None, "another queue's");
    assert_eq!(latest(a.clone(), "bad").await, None, "reasons are exact");
    // A closed case still says when the queue last failed that way.
    change(t, &newest, |m| {
        m.state = CaseState::Cancelled;
        m.closed_at = Some(secs(60));
    })
    .await;
    assert_eq!(latest(a.clone(), "Bad").await, Some(secs(50)));
}

pub async fn due_cases_are_those_whose_check_time_came_earliest_first(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let mut records = Vec::new();
    for (i, id) in ["m1", "m2", "m3", "m4"].iter().enumerate() {
        let at = secs(i64::try_from(i).unwrap() + 1);
        records.push(dl(t, &q, id, at).await.dead_letter_id);
    }
    assert!(t.s().due_cases(T0, 10).await.unwrap().is_empty());
    change(t, &records[0], |m| m.next_check_at = Some(secs(30))).await;
    change(t, &records[1], |m| m.next_check_at = None).await;
    change(t, &records[2], |m| m.next_check_at = Some(secs(20))).await;
    let due = |now, limit| async move { ids(&t.s().due_cases(now, limit).await.unwrap()) };
    let c = |i: usize| case_id(&records[i]);
    assert_eq!(due(secs(4), 10).await, vec![c(3)], "opened due at once");
    assert_eq!(due(secs(25), 10).await, vec![c(3), c(2)]);
    assert_eq!(due(secs(30), 10).await, vec![c(3), c(2), c(0)]);
    assert_eq!(due(secs(30), 2).await, vec![c(3), c(2)], "the limit holds");
    assert_eq!(
        due(secs(1_000_000), 10).await.len(),
        3,
        "nothing scheduled: never due"
    );
}

pub async fn drop_case_payloads_deletes_the_record_and_kept_bytes_and_keeps_the_case(
    t: &TestStore,
) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let r1 = dl(t, &q, "m1", secs(1)).await.dead_letter_id;
    let r2 = dl(t, &q, "m2", secs(2)).await.dead_letter_id;
    let r3 = dl(t, &q, "m3", secs(3)).await.dead_letter_id;
    let body = b"kept".to_vec();
    let digest = redrive_core::digest::sha256_hex(&body);
    let c1 = case_of(t, &r1).await;
    let mut set = c1.m.clone();
    set.state = CaseState::Rejected;
    set.payload_until = Some(secs(100));
    set.closed_at = Some(secs(50));
    let c1 = t
        .s()
        .update_case(&CaseUpdate {
            payload: Some(CasePayload {
                digest: digest.clone(),
                body: body.clone(),
            }),
            ..update(
                &c1,
                set,
                vec![entry(secs(50), "bob", CaseState::Rejected, "no")],
            )
        })
        .await
        .unwrap();
    change(t, &r2, |m| m.payload_until = Some(secs(200))).await;
    assert!(
        t.s()
            .drop_case_payloads(secs(99), 10)
            .await
            .unwrap()
            .is_empty()
    );

    assert_eq!(
        t.s().drop_case_payloads(secs(150), 10).await.unwrap(),
        vec![c1.id.clone()]
    );
    assert_err!(
        t.s().get_dead_letter(&q, &r1).await,
        StoreError::DeadLetterNotFound { .. }
    );
    assert_eq!(t.s().case_payload(&c1.id, &digest).await.unwrap(), None);
    let after = case_of(t, &r1).await;
    assert_eq!(after.m.payload_deleted_at, Some(secs(150)));
    assert_eq!(after.version, c1.version + 1);
    assert_eq!(
        (after.body_sha256.as_str(), after.m.state),
        (c1.body_sha256.as_str(), CaseState::Rejected),
        "the case and its digest stay"
    );
    assert_eq!(t.s().case_timeline(&c1.id).await.unwrap().len(), 2);
    assert!(
        t.s()
            .drop_case_payloads(secs(150), 10)
            .await
            .unwrap()
            .is_empty(),
        "each once"
    );
    assert_eq!(record(t, &q, &r2).await.id, r2, "not due yet: kept");

    assert_eq!(
        t.s().drop_case_payloads(secs(250), 1).await.unwrap(),
        vec![case_id(&r2)]
    );
    assert!(
        t.s()
            .drop_case_payloads(secs(250), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(record(t, &q, &r3).await.id, r3, "no retention set: kept");
    assert_eq!(case_of(t, &r3).await.m.payload_deleted_at, None);
}

pub async fn case_reads_give_each_case_with_its_record_and_intent_in_order(t: &TestStore) {
    let q = t.queue("orders", QueuePolicy::default()).await;
    let mut cases = Vec::new();
    for (i, m) in ["m1", "m2", "m3"].into_iter().enumerate() {
        let e = dl(t, &q, m, secs(1 + i as i64)).await;
        cases.push(case_of(t, &e.dead_letter_id).await);
    }
    // A word for another queue says nothing of these cases; the one for theirs does.
    let elsewhere = IntentRecord {
        intent_id: cases[1].intent_id.clone(),
        entity: "billing".into(),
        status: IntentStatus::Superseded,
        superseded_by: Some("other".into()),
        reason: None,
        actor: "billing-service".into(),
        at: secs(4),
    };
    t.s().put_intent(&elsewhere).await.unwrap();
    let said = IntentRecord {
        intent_id: cases[1].intent_id.clone(),
        entity: "ord*".into(),
        status: IntentStatus::Cancelled,
        superseded_by: None,
        reason: Some("customer cancelled".into()),
        actor: "orders-service".into(),
        at: secs(5),
    };
    t.s().put_intent(&said).await.unwrap();
    // The third's record goes under its payload retention.
    let c3 = &cases[2];
    t.s()
        .update_case(&update(
            c3,
            CaseMut {
                payload_until: Some(secs(10)),
                ..c3.m.clone()
            },
            Vec::new(),
        ))
        .await
        .unwrap();
    assert_eq!(
        t.s().drop_case_payloads(secs(20), 10).await.unwrap(),
        vec![c3.id.clone()]
    );
    let ids = vec![
        cases[2].id.clone(),
        "case_none".to_owned(),
        cases[0].id.clone(),
        cases[1].id.clone(),
    ];
    let reads = t.s().case_reads(&ids).await.unwrap();
    let got: Vec<&str> = reads.iter().map(|r| r.case.id.as_str()).collect();
    assert_eq!(
        got,
        vec![
            cases[2].id.as_str(),
            cases[0].id.as_str(),
            cases[1].id.as_str()
        ],
        "in the order asked, an id without a case left out"
    );
    assert_eq!(reads[0].record, None, "its record is gone");
    assert_eq!(reads[0].case, t.s().get_case(&cases[2].id).await.unwrap());
    for r in &reads[1..] {
        let record = r.record.as_ref().expect("the record exists");
        assert_eq!(record.id, r.case.record_id);
        assert_eq!(
            *record,
            t.s().get_dead_letter(&q, &r.case.record_id).await.unwrap()
        );
        assert_eq!(r.case, t.s().get_case(&r.case.id).await.unwrap());
    }
    assert_eq!(reads[1].intent, None, "nothing said of the first's intent");
    assert_eq!(
        reads[2].intent,
        Some(said),
        "the word whose entity covers the queue"
    );
    assert!(t.s().case_reads(&[]).await.unwrap().is_empty());
}

pub async fn the_first_word_on_an_intent_stands(t: &TestStore) {
    let first = IntentRecord {
        intent_id: "intent-1".into(),
        entity: "orders".into(),
        status: IntentStatus::Cancelled,
        superseded_by: None,
        reason: Some("customer cancelled".into()),
        actor: "orders-service".into(),
        at: secs(1),
    };
    assert_eq!(t.s().put_intent(&first).await.unwrap(), first);
    let later = IntentRecord {
        status: IntentStatus::Superseded,
        superseded_by: Some("intent-2".into()),
        reason: None,
        actor: "other".into(),
        at: secs(2),
        ..first.clone()
    };
    assert_eq!(
        t.s().put_intent(&later).await.unwrap(),
        first,
        "the first for the entity stands"
    );
    assert_eq!(
        t.s().intent_words("intent-1").await.unwrap(),
        vec![first.clone()]
    );
    assert!(t.s().intent_words("intent-9").await.unwrap().is_empty());
    // A word for other entities stands beside it, oldest first.
    let billing = IntentRecord {
        entity: "billing*".into(),
        ..later.clone()
    };
    assert_eq!(t.s().put_intent(&billing).await.unwrap(), billing);
    let words = t.s().intent_words("intent-1").await.unwrap();
    assert_eq!(words, vec![first.clone(), billing.clone()]);
    assert_eq!(
        redrive_store::skeleton::cases::intent_for(words.clone(), "billing-eu"),
        Some(billing)
    );
    assert_eq!(
        redrive_store::skeleton::cases::intent_for(words.clone(), "orders"),
        Some(first)
    );
    assert_eq!(
        redrive_store::skeleton::cases::intent_for(words, "ordersX"),
        None,
        "a word for one queue says nothing of another"
    );
    let other = IntentRecord {
        intent_id: "intent-3".into(),
        ..later
    };
    assert_eq!(t.s().put_intent(&other).await.unwrap(), other);
    assert_eq!(t.s().intent_words("intent-3").await.unwrap(), vec![other]);
}

pub async fn effect_authorities_are_put_replaced_listed_and_deleted(t: &TestStore) {
    assert!(t.s().list_effect_authorities().await.unwrap().is_empty());
    let auth = |ty: &str, url: &str, timeout_ms: u64, at: Timestamp| EffectAuthority {
        message_type: ty.into(),
        url: url.into(),
        timeout_ms,
        updated_at: at,
    };
    let b = auth("order.paid", "https://pay.example/effects", 2_000, secs(1));
    let a = auth(
        "order.created",
        "http://orders.internal/effects",
        500,
        secs(2),
    );
    t.s().put_effect_authority(&b).await.unwrap();
    t.s().put_effect_authority(&a).await.unwrap();
    assert_eq!(
        t.s().list_effect_authorities().await.unwrap(),
        vec![a.clone(), b.clone()],
        "by message type"
    );
    let b2 = auth("order.paid", "https://pay2.example/effects", 9_000, secs(3));
    t.s().put_effect_authority(&b2).await.unwrap();
    assert_eq!(
        t.s().list_effect_authorities().await.unwrap(),
        vec![a.clone(), b2.clone()],
        "replaced"
    );
    assert!(
        t.s()
            .delete_effect_authority("order.created")
            .await
            .unwrap()
    );
    assert!(
        !t.s()
            .delete_effect_authority("order.created")
            .await
            .unwrap()
    );
    assert_eq!(t.s().list_effect_authorities().await.unwrap(), vec![b2]);
}

pub async fn moving_a_record_into_quarantine_opens_its_case_once(t: &TestStore) {
    let q = t.queue("orders", replaying()).await;
    let id = dl(t, &q, "m1", secs(1)).await.dead_letter_id;
    no_case(t, &id).await;
    t.s()
        .move_dead_letter(&q, &id, Area::Quarantine, secs(2))
        .await
        .unwrap();
    let c = case_of(t, &id).await;
    assert_eq!(c.opened_at, secs(2));
    rule_agrees(t, &q, &id).await;
    // Back to live (a candidate again) and into quarantine again: still the one case.
    t.s()
        .move_dead_letter(&q, &id, Area::Live, secs(3))
        .await
        .unwrap();
    assert!(record(t, &q, &id).await.replay.due_at.is_some());
    assert_eq!(case_of(t, &id).await, c, "a case once opened stays");
    t.s()
        .move_dead_letter(&q, &id, Area::Quarantine, secs(4))
        .await
        .unwrap();
    assert_eq!(case_of(t, &id).await, c);
    let all = t
        .s()
        .list_cases(&CaseQuery {
            queue: Some(q.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ids(&all), vec![c.id.clone()], "no duplicate");
    let tl = t.s().case_timeline(&c.id).await.unwrap();
    assert_eq!(tl.len(), 1, "only the opening");
    assert_eq!(tl[0].at, secs(2));

    // A candidate moved to the archive by hand is settled, not a case.
    let other = dl(t, &q, "m2", secs(5)).await.dead_letter_id;
    t.s()
        .move_dead_letter(&q, &other, Area::Archived, secs(6))
        .await
        .unwrap();
    no_case(t, &other).await;
    rule_agrees(t, &q, &other).await;
    // On a queue without replay, a record moved back to live from the archive is one.
    let plain = t.queue("plain", QueuePolicy::default()).await;
    let p = dl(t, &plain, "m3", secs(7)).await.dead_letter_id;
    let opened = case_of(t, &p).await;
    t.s()
        .move_dead_letter(&plain, &p, Area::Archived, secs(8))
        .await
        .unwrap();
    t.s()
        .move_dead_letter(&plain, &p, Area::Live, secs(9))
        .await
        .unwrap();
    assert_eq!(case_of(t, &p).await, opened, "the same case");
}

pub async fn import_opens_cases_where_no_replay_settles_the_records(t: &TestStore) {
    let src = t.queue("src", QueuePolicy::default()).await;
    let off = t.queue("off", QueuePolicy::default()).await;
    let on = t.queue("on", replaying()).await;
    let id = dl(t, &src, "m1", secs(1)).await.dead_letter_id;
    let template = record(t, &src, &id).await;
    let imported = |n: &str, intent: Option<&str>| DeadLetterRecord {
        id: redrive_core::id::new_dead_letter_id(secs(2)),
        message_id: n.to_owned(),
        intent: intent.map(str::to_owned),
        message_type: Some("order.created".into()),
        reason: "Imported".into(),
        route: RouteKind::Broker,
        // The case's route is the record's route evidence.
        route_kind: Route::BrokerRouted,
        route_target: RouteTarget::Unknown,
        missing_target: None,
        count_quality: EvidenceQuality::Exact,
        ..template.clone()
    };
    let (r1, r2) = (imported("i-1", Some("intent-9")), imported("i-2", None));
    t.s()
        .import_dead_letters(&off, vec![r1.clone(), r2.clone()], secs(10))
        .await
        .unwrap();
    let c1 = case_of(t, &r1.id).await;
    assert_eq!(c1.queue, off);
    assert_eq!(c1.opened_at, secs(10));
    assert_eq!(
        (c1.message_id.as_str(), c1.intent_id.as_str()),
        ("i-1", "intent-9")
    );
    assert_eq!(c1.reason, "Imported");
    assert_eq!(c1.m.route, Route::BrokerRouted);
    assert_eq!(
        c1.m.evidence_quality,
        EvidenceQuality::Incomplete,
        "no word of where it went: at most incomplete"
    );
    assert_eq!(t.s().case_timeline(&c1.id).await.unwrap().len(), 1);
    assert_eq!(case_of(t, &r2.id).await.intent_id, "i-2");
    let stored = record(t, &off, &r1.id).await;
    assert_eq!(stored.route_target, RouteTarget::Unknown);
    rule_agrees(t, &off, &r1.id).await;
    rule_agrees(t, &off, &r2.id).await;

    let r3 = imported("i-3", None);
    t.s()
        .import_dead_letters(&on, vec![r3.clone()], secs(10))
        .await
        .unwrap();
    no_case(t, &r3.id).await;
    rule_agrees(t, &on, &r3.id).await;
}

/// `skeleton::cases::opens_case` over every record a store holds agrees with whether the
/// store opened a case for it, across every way a record is written.
pub async fn the_opening_rule_agrees_with_the_cases_the_store_opened(t: &TestStore) {
    t.queue("dlq", QueuePolicy::default()).await;
    let plain = t.queue("plain", policy(|p| p.max_delivery_count = 1)).await;
    let on = t.queue("on", replaying()).await;
    let fwd = t
        .queue(
            "fwd",
            policy(|p| {
                p.dead_letter_queue = Some(name("dlq"));
                p.max_delivery_count = 1;
            }),
        )
        .await;
    let fallback = t
        .queue(
            "fallback",
            policy(|p| {
                p.dead_letter_queue = Some(name("gone"));
                p.max_delivery_count = 1;
                p.auto_replay.enabled = true;
            }),
        )
        .await;
    dl(t, &plain, "a1", secs(1)).await;
    broker_dead_letter(t, &plain, msg("a2", b"x"), secs(1)).await;
    let candidate = dl(t, &on, "b1", secs(2)).await.dead_letter_id;
    let quarantined = dl(t, &on, "b2", secs(2)).await.dead_letter_id;
    assert!(
        t.s()
            .quarantine_dead_letter(
                &on,
                &quarantined,
                &Quarantine {
                    judgement: judgement(secs(3), Some(QuarantineCause::NotIdempotent)),
                    body: None,
                },
                secs(3),
            )
            .await
            .unwrap()
    );
    let settled = dl(t, &on, "b3", secs(2)).await.dead_letter_id;
    t.s()
        .finish_replay(
            &on,
            &settled,
            &ReplayFinish::Archive(judgement(secs(3), None)),
            secs(3),
        )
        .await
        .unwrap();
    broker_dead_letter(t, &fwd, msg("c1", b"y"), secs(4)).await;
    let fell = broker_dead_letter(t, &fallback, msg("d1", b"z"), secs(5)).await;
    assert!(
        fell.candidate,
        "a fallback on a replaying queue is a candidate"
    );
    assert!(!fell.case_opened);
    let mut seen = 0;
    for q in [&plain, &on, &fwd, &fallback] {
        for area in [Area::Live, Area::Quarantine, Area::Archived] {
            let records = t
                .s()
                .list_dead_letters(&DeadLetterQuery {
                    queue: q.clone(),
                    area,
                    reason: None,
                    from: None,
                    to: None,
                    after: None,
                    limit: 100,
                    filter: Default::default(),
                })
                .await
                .unwrap();
            for r in records {
                rule_agrees(t, q, &r.id).await;
                seen += 1;
            }
        }
    }
    assert_eq!(seen, 7, "every record written above");
    let opened = t.s().case_counts(&CaseQuery::default()).await.unwrap();
    assert_eq!(
        opened.total, 4,
        "plain (2), the quarantined and the forwarded record"
    );
    no_case(t, &candidate).await;
    no_case(t, &settled).await;
}

/// A case as updated, its timeline, its kept payload, intents and effect authorities are
/// there after a reopen.
pub async fn cases_survive_reopen(t: &TestStore) {
    let durable = t.store.capabilities().durable;
    let Some(reopen) = t.reopen.as_ref().filter(|_| durable) else {
        eprintln!("skipping cases_survive_reopen: the store cannot be reopened durably");
        return;
    };
    let q = t.queue("orders", QueuePolicy::default()).await;
    let id = dl(t, &q, "m1", secs(1)).await.dead_letter_id;
    let c = case_of(t, &id).await;
    let body = b"kept".to_vec();
    let digest = redrive_core::digest::sha256_hex(&body);
    let written = t
        .s()
        .update_case(&CaseUpdate {
            payload: Some(CasePayload {
                digest: digest.clone(),
                body: body.clone(),
            }),
            ..update(
                &c,
                CaseMut {
                    state: CaseState::Retained,
                    ..c.m.clone()
                },
                vec![entry(secs(2), "alice", CaseState::Retained, "kept")],
            )
        })
        .await
        .unwrap();
    let timeline = t.s().case_timeline(&c.id).await.unwrap();
    let intent = IntentRecord {
        intent_id: "m1".into(),
        entity: "*".into(),
        status: IntentStatus::Cancelled,
        superseded_by: None,
        reason: None,
        actor: "producer".into(),
        at: secs(3),
    };
    t.s().put_intent(&intent).await.unwrap();
    let authority = EffectAuthority {
        message_type: "order.created".into(),
        url: "https://orders.example/effects".into(),
        timeout_ms: 1_000,
        updated_at: secs(3),
    };
    t.s().put_effect_authority(&authority).await.unwrap();

    let s = reopen();
    assert_eq!(s.get_case(&c.id).await.unwrap(), written);
    assert_eq!(s.case_timeline(&c.id).await.unwrap(), timeline);
    assert_eq!(s.case_payload(&c.id, &digest).await.unwrap(), Some(body));
    assert_eq!(s.intent_words("m1").await.unwrap(), vec![intent]);
    assert_eq!(s.list_effect_authorities().await.unwrap(), vec![authority]);
}

/// Case groups: a new group is version 1 and its id is taken once; an update is
/// conditional on the version read; a listing is by id, per queue, paged.
pub async fn case_groups_are_created_once_updated_on_their_version_and_listed(t: &TestStore) {
    use redrive_store::CaseGroupRecord;
    let group = |id: &str, queue: &str, at: i64, members: &[&str]| CaseGroupRecord {
        id: id.into(),
        queue: name(queue),
        created_at: secs(at),
        version: 0,
        doc: serde_json::json!({"case_ids": members}),
    };
    assert!(matches!(
        t.s().get_case_group("grp_none").await,
        Err(StoreError::CaseGroupNotFound { .. })
    ));
    let a = group("grp_01", "orders", 1, &["case_a", "case_b"]);
    let written = t.s().put_case_group(&a, None).await.unwrap();
    assert_eq!(written.version, 1);
    assert_eq!(written.doc, a.doc);
    assert_eq!(written.queue, name("orders"));
    assert_eq!(written.created_at, secs(1));
    assert!(
        matches!(
            t.s().put_case_group(&a, None).await,
            Err(StoreError::CaseGroupChanged { .. })
        ),
        "an id is taken once"
    );
    let mut changed = written.clone();
    changed.doc = serde_json::json!({"case_ids": ["case_a"], "decisions": [1]});
    let v2 = t.s().put_case_group(&changed, Some(1)).await.unwrap();
    assert_eq!(v2.version, 2);
    assert_eq!(v2.doc, changed.doc);
    let mut stale = written.clone();
    stale.doc = serde_json::json!({"lost": true});
    assert!(
        matches!(
            t.s().put_case_group(&stale, Some(1)).await,
            Err(StoreError::CaseGroupChanged { .. })
        ),
        "a write at a version no longer current writes nothing"
    );
    assert_eq!(t.s().get_case_group("grp_01").await.unwrap(), v2);
    assert!(matches!(
        t.s()
            .put_case_group(&group("grp_09", "orders", 1, &[]), Some(1))
            .await,
        Err(StoreError::CaseGroupNotFound { .. })
    ));
    t.s()
        .put_case_group(&group("grp_02", "payments", 2, &["case_c"]), None)
        .await
        .unwrap();
    t.s()
        .put_case_group(&group("grp_03", "orders", 3, &[]), None)
        .await
        .unwrap();
    let ids = |v: Vec<CaseGroupRecord>| v.into_iter().map(|g| g.id).collect::<Vec<_>>();
    assert_eq!(
        ids(t.s().list_case_groups(None, None, 10).await.unwrap()),
        ["grp_01", "grp_02", "grp_03"]
    );
    assert_eq!(
        ids(t
            .s()
            .list_case_groups(Some(&name("orders")), None, 10)
            .await
            .unwrap()),
        ["grp_01", "grp_03"]
    );
    assert_eq!(
        ids(t
            .s()
            .list_case_groups(Some(&name("orders")), Some("grp_01"), 10)
            .await
            .unwrap()),
        ["grp_03"]
    );
    assert_eq!(
        ids(t.s().list_case_groups(None, None, 2).await.unwrap()),
        ["grp_01", "grp_02"]
    );
}
