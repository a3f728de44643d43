//! Automatic replay of dead letters (seed 000), on every backend, on the manual clock. The
//! server runs without its replay worker here: each test drives the judgement one pass at a
//! time (`Broker::replay_once`), so that what a pass did is exact. The woken worker has its
//! own test at the end.

use std::collections::BTreeMap;

use redrive_broker::{ReplayPass, ReplaySettings};
use redrive_core::Area;
use redrive_core::judgement::QuarantineCause;
use redrive_core::register::Idempotency;
use redrive_events::import::ImportFormat;
use redrive_testkit::recovery::{
    Letter, dead_letter, record, records, register, replay_passes, replaying_queue, system,
};
use redrive_testkit::{Backend, TestServer, default_settings, within};
use serde_json::{Value, json};

/// A server on `backend` without its replay worker (the tests drive the passes).
pub(crate) async fn server(backend: Backend) -> TestServer {
    TestServer::builder()
        .backend(backend)
        .settings(redrive_server::Settings {
            replay_worker: false,
            ..default_settings()
        })
        .start()
        .await
}

async fn pass(s: &TestServer) -> ReplayPass {
    replay_passes(s).await
}

fn causes(p: &ReplayPass) -> BTreeMap<QuarantineCause, u64> {
    p.quarantined.clone()
}

/// An Event Grid dead-letter blob of events `(id, type)`, each with `data_len` bytes of data.
fn blob(events: &[(&str, &str)], data_len: usize) -> Vec<u8> {
    let data = "x".repeat(data_len);
    let arr: Vec<Value> = events
        .iter()
        .map(|(id, t)| {
            json!({
                "specversion": "1.0", "id": id, "source": "/orders", "type": t,
                "data": {"v": data},
                "deadLetterReason": "MaxDeliveryAttemptsExceeded",
                "deliveryAttempts": 10,
                "lastDeliveryOutcome": "Probation",
                "publishTime": "2027-01-14T10:00:00Z",
                "lastDeliveryAttemptTime": "2027-01-14T11:00:00Z"
            })
        })
        .collect();
    serde_json::to_vec(&arr).unwrap()
}

async fn import_blob(s: &TestServer, queue: &str, bytes: &[u8]) -> String {
    let ids = s
        .broker
        .import_dead_letters(queue, ImportFormat::EventGrid, bytes, &system())
        .await
        .expect("import");
    assert_eq!(ids.len(), 1);
    ids[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_go_a_a1_a2_and_the_cap_quarantines_with_the_id_written_back() {
    for backend in Backend::all("the replay cycle test") {
        let name = backend.name();
        let s = server(backend).await;
        replaying_queue(&s, "q", json!({})).await;
        register(&s, "q:*", Idempotency::Idempotent).await;
        let mut record_id = dead_letter(&s, "q", Letter::new("a")).await;
        let r = record(&s, "q", &record_id).await;
        assert_eq!(
            r.replay.due_at,
            Some(s.broker.clock().now()),
            "{name}: a candidate at once"
        );
        for n in 1..=3 {
            let p = pass(&s).await;
            assert_eq!(
                (p.judged, p.republished, p.archived),
                (1, 1, 1),
                "{name}: cycle {n}"
            );
            let archived = record(&s, "q", &record_id).await;
            assert_eq!(archived.area, Area::Archived, "{name}");
            let j = archived.judgement.expect("the judgement is kept");
            assert_eq!(j.events[0].cause, None);
            let got = s.receive("q", 1).await;
            assert_eq!(
                got[0]["message_id"],
                format!("a|{n}"),
                "{name}: never a|1|2"
            );
            assert_eq!(got[0]["properties"]["redrive-original-id"], "a", "{name}");
            assert_eq!(
                got[0]["properties"]["redrive-replayed-from"],
                record_id.as_str()
            );
            let (st, v) = s
                .settle(
                    "q",
                    got[0]["lock_token"].as_str().unwrap(),
                    "dead_letter",
                    json!({"reason": "HandlerFailed"}),
                )
                .await;
            assert_eq!(st, 200, "{v}");
            record_id = v["dead_letter_id"].as_str().unwrap().to_owned();
        }
        let p = pass(&s).await;
        assert_eq!(p.republished, 0, "{name}");
        assert_eq!(
            causes(&p),
            BTreeMap::from([(QuarantineCause::ReplayAttemptsExhausted, 1)]),
            "{name}"
        );
        let q = record(&s, "q", &record_id).await;
        assert_eq!(q.area, Area::Quarantine, "{name}");
        assert_eq!(q.message_id, "a", "{name}: written back without its count");
        assert_eq!(q.reason, "HandlerFailed", "{name}: the raw evidence stays");
        let j = q.judgement.expect("judgement");
        assert_eq!(j.cause, Some(QuarantineCause::ReplayAttemptsExhausted));
        assert_eq!(j.engine, redrive_core::judgement::ENGINE_VERSION);
        assert_eq!((j.events[0].id.as_str(), j.events[0].attempts), ("a", 3));
        assert!(
            s.metrics().await.contains(
                "redrive_replay_quarantined_total{queue=\"q\",cause=\"ReplayAttemptsExhausted\"} 1"
            ),
            "{name}"
        );
        // Judged and gone from live: a pass finds nothing more.
        assert_eq!(pass(&s).await.judged, 0, "{name}");
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_batch_splits_exactly_and_poison_is_quarantined_before_the_republish() {
    for backend in Backend::all("the mixed batch test") {
        let name = backend.name();
        let s = server(backend).await;
        replaying_queue(&s, "q", json!({})).await;
        register(&s, "order.created", Idempotency::Idempotent).await;
        register(&s, "webhook.post", Idempotency::NotIdempotent).await;
        let id = import_blob(
            &s,
            "q",
            &blob(
                &[
                    ("capped|3", "order.created"),
                    ("post-1", "webhook.post"),
                    ("odd-1", "never.registered"),
                    ("ok-1", "order.created"),
                    ("ok-2|1", "order.created"),
                ],
                8,
            ),
        )
        .await;
        let p = pass(&s).await;
        assert_eq!(p.republished, 2, "{name}");
        assert_eq!(
            causes(&p),
            BTreeMap::from([
                (QuarantineCause::NotIdempotent, 1),
                (QuarantineCause::TypeNotRegistered, 1),
                (QuarantineCause::ReplayAttemptsExhausted, 1),
            ]),
            "{name}"
        );
        assert_eq!(record(&s, "q", &id).await.area, Area::Archived, "{name}");
        let quarantined = records(&s, "q", Area::Quarantine).await;
        assert_eq!(quarantined.len(), 3, "{name}: one copy per cause");
        for r in &quarantined {
            let j = r.judgement.as_ref().unwrap();
            assert_eq!(j.copied_from.as_deref(), Some(id.as_str()), "{name}");
            let events: Vec<Value> = serde_json::from_slice(&r.body).unwrap();
            assert_eq!(events.len(), 1);
            assert!(
                !events[0]["id"].as_str().unwrap().contains('|'),
                "{name}: ids written back without their count: {}",
                events[0]["id"]
            );
            assert_eq!(
                events[0]["deadLetterReason"], "MaxDeliveryAttemptsExceeded",
                "{name}: the raw diagnostics survive into the copy"
            );
        }
        let got = s.receive("q", 10).await;
        let ids: Vec<&str> = got
            .iter()
            .map(|m| m["message_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["ok-1|1", "ok-2|2"], "{name}");
        let ev: Value = serde_json::from_str(got[1]["body"].as_str().unwrap()).unwrap();
        assert_eq!(ev["id"], "ok-2|2", "{name}");
        assert_eq!(ev["redriveoriginalid"], "ok-2", "{name}");
        assert!(
            ev.get("deadLetterReason").is_none(),
            "{name}: diagnostics are not republished"
        );
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_hold_the_event_and_the_byte_budget() {
    for backend in Backend::all("the chunk test") {
        let name = backend.name();
        let s = server(backend).await;
        replaying_queue(&s, "q", json!({})).await;
        register(&s, "tiny", Idempotency::Idempotent).await;
        let ids: Vec<String> = (0..6_000).map(|i| format!("t{i}")).collect();
        let events: Vec<(&str, &str)> = ids.iter().map(|i| (i.as_str(), "tiny")).collect();
        import_blob(&s, "q", &blob(&events, 0)).await;
        let p = pass(&s).await;
        assert_eq!(
            (p.republished, p.chunks),
            (6_000, 2),
            "{name}: 5,000 then 1,000"
        );

        replaying_queue(&s, "big", json!({})).await;
        register(&s, "large", Idempotency::Idempotent).await;
        let large: Vec<String> = (0..8).map(|i| format!("l{i}")).collect();
        let events: Vec<(&str, &str)> = large.iter().map(|i| (i.as_str(), "large")).collect();
        import_blob(&s, "big", &blob(&events, 200 * 1024)).await;
        let p = pass(&s).await;
        assert_eq!(
            (p.republished, p.chunks),
            (8, 2),
            "{name}: five of 200 KiB fit a MiB"
        );
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_chunk_retries_the_whole_record_after_a_backoff_and_duplicates_are_admitted() {
    for backend in Backend::all("the chunk failure test") {
        let name = backend.name();
        let s = server(backend).await;
        replaying_queue(&s, "q", json!({"max_chunk_events": 1})).await;
        register(&s, "e", Idempotency::Idempotent).await;
        // The second event is larger than the origin takes now.
        let small = blob(&[("one", "e")], 10);
        let mut arr: Vec<Value> = serde_json::from_slice(&small).unwrap();
        let mut big: Vec<Value> = serde_json::from_slice(&blob(&[("two", "e")], 4_000)).unwrap();
        arr.append(&mut big);
        let (st, v) = s
            .patch("/v1/queues/q", json!({"max_message_size": 2_048}))
            .await;
        assert_eq!(st, 200, "{v}");
        let id = import_blob(&s, "q", &serde_json::to_vec(&arr).unwrap()).await;
        let p = pass(&s).await;
        assert_eq!(
            (p.republished, p.failed),
            (1, 1),
            "{name}: the first chunk went, the second stopped"
        );
        let r = record(&s, "q", &id).await;
        assert_eq!(r.area, Area::Live, "{name}: the record stays live");
        assert_eq!(r.replay.failures, 1, "{name}");
        assert!(
            r.replay
                .last_error
                .as_deref()
                .unwrap_or("")
                .contains("max_message_size"),
            "{name}: {:?}",
            r.replay.last_error
        );
        assert_eq!(pass(&s).await.judged, 0, "{name}: not before its backoff");
        s.patch("/v1/queues/q", json!({"max_message_size": 1_048_576}))
            .await;
        s.advance(1_000);
        let p = pass(&s).await;
        assert_eq!((p.republished, p.chunks, p.failed), (2, 2, 0), "{name}");
        assert_eq!(record(&s, "q", &id).await.area, Area::Archived, "{name}");
        let got = s.receive("q", 10).await;
        let ids: Vec<&str> = got
            .iter()
            .map(|m| m["message_id"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids,
            ["one|1", "one|1", "two|1"],
            "{name}: the duplicate is admitted"
        );
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_invalid_record_is_quarantined_whole_and_leaves_live() {
    for backend in Backend::all("the schema test") {
        let name = backend.name();
        let s = server(backend).await;
        replaying_queue(&s, "q", json!({})).await;
        let not_events = br#"{"hello": "not an array"}"#;
        let id = import_blob(&s, "q", not_events).await;
        let missing = br#"[{"specversion": "1.0", "id": "x", "type": "t"}]"#;
        let id2 = import_blob(&s, "q", missing).await;
        let p = pass(&s).await;
        assert_eq!(
            causes(&p),
            BTreeMap::from([(QuarantineCause::SchemaInvalid, 2)]),
            "{name}"
        );
        for (id, body) in [(&id, &not_events[..]), (&id2, &missing[..])] {
            let r = record(&s, "q", id).await;
            assert_eq!(r.area, Area::Quarantine, "{name}");
            assert_eq!(r.body, body, "{name}: the payload is kept as it came");
            let j = r.judgement.unwrap();
            assert_eq!(j.cause, Some(QuarantineCause::SchemaInvalid));
            assert!(j.error.is_some(), "{name}: the parse error is recorded");
        }
        assert!(records(&s, "q", Area::Live).await.is_empty(), "{name}");
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_resumes_the_cap_at_zero_and_requarantines_the_rest_saying_so_first() {
    for backend in Backend::all("the restore test") {
        let name = backend.name();
        let s = server(backend).await;
        replaying_queue(&s, "q", json!({"max_replay_attempts": 1})).await;
        register(&s, "order.created", Idempotency::Idempotent).await;
        register(&s, "webhook.post", Idempotency::NotIdempotent).await;
        let capped = import_blob(&s, "q", &blob(&[("a|1", "order.created")], 4)).await;
        let never = import_blob(&s, "q", &blob(&[("w", "webhook.post")], 4)).await;
        pass(&s).await;
        assert_eq!(
            record(&s, "q", &capped).await.area,
            Area::Quarantine,
            "{name}"
        );

        let preview = s
            .broker
            .restore_dead_letter("q", &capped.parse(), true, &system())
            .await
            .unwrap();
        assert_eq!((preview.republish, preview.restored), (1, false), "{name}");
        assert!(preview.requarantine.is_empty(), "{name}");
        assert_eq!(
            record(&s, "q", &capped).await.area,
            Area::Quarantine,
            "{name}: a dry run"
        );

        let done = s
            .broker
            .restore_dead_letter("q", &capped.parse(), false, &system())
            .await
            .unwrap();
        assert!(done.restored, "{name}");
        let p = pass(&s).await;
        assert_eq!(p.republished, 1, "{name}");
        let got = s.receive("q", 1).await;
        assert_eq!(got[0]["message_id"], "a|1", "{name}: resumed at count 0");

        let preview = s
            .broker
            .restore_dead_letter("q", &never.parse(), false, &system())
            .await
            .unwrap();
        assert_eq!(
            preview.requarantine,
            BTreeMap::from([(QuarantineCause::NotIdempotent, 1)]),
            "{name}: the answer says so before it is done"
        );
        let p = pass(&s).await;
        assert_eq!(p.republished, 0, "{name}");
        assert_eq!(
            record(&s, "q", &never).await.area,
            Area::Quarantine,
            "{name}"
        );
        let audit = s.audit("action=dead_letter.restore").await;
        assert_eq!(audit.len(), 2, "{name}: {audit:?}");
        // Only quarantined records are restored.
        let live = dead_letter(&s, "q", Letter::new("z")).await;
        assert!(
            s.broker
                .restore_dead_letter("q", &live.parse(), true, &system())
                .await
                .is_err()
        );
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_judgement_is_quiet_and_a_quarantine_is_counted_once_under_concurrent_judges() {
    for backend in Backend::all("the concurrent judgement test") {
        let name = backend.name();
        let s = server(backend).await;
        // A claim of 0 ms leaves a claimed record due: two judges at one instant both
        // take it, as two deliveries of one trigger would.
        s.broker.set_replay_settings(ReplaySettings {
            claim_ms: 0,
            ..ReplaySettings::default()
        });
        replaying_queue(&s, "q", json!({})).await;
        register(&s, "ok", Idempotency::Idempotent).await;
        dead_letter(&s, "q", Letter::new("unregistered")).await;
        import_blob(&s, "q", &blob(&[("p", "poison.type"), ("g", "ok")], 4)).await;
        // Two judges at each instant; the node-wide replay budget lets one record go a
        // millisecond, so the clock moves on between.
        let mut total = 0;
        for _ in 0..4 {
            let (a, b) = tokio::join!(s.broker.replay_once(), s.broker.replay_once());
            let (a, b) = (a.unwrap(), b.unwrap());
            total += a.quarantined.values().sum::<u64>() + b.quarantined.values().sum::<u64>();
            s.advance(1);
        }
        assert_eq!(total, 2, "{name}: each quarantine counted once");
        assert!(
            s.metrics().await.contains(
                "redrive_replay_quarantined_total{queue=\"q\",cause=\"TypeNotRegistered\"} 2"
            ),
            "{name}"
        );
        assert_eq!(records(&s, "q", Area::Quarantine).await.len(), 2, "{name}");
        assert!(records(&s, "q", Area::Live).await.is_empty(), "{name}");
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_makes_stranded_records_candidates_and_skips_young_archived_and_quarantined() {
    for backend in Backend::all("the drain test") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("q", json!({"lock_duration_ms": 30_000})).await;
        register(&s, "q:*", Idempotency::Idempotent).await;
        let old = dead_letter(&s, "q", Letter::new("old")).await;
        let archived = dead_letter(&s, "q", Letter::new("archived")).await;
        let quarantined = dead_letter(&s, "q", Letter::new("quarantined")).await;
        s.broker
            .move_dead_letter("q", &archived.parse(), Area::Archived, &system())
            .await
            .unwrap();
        s.broker
            .move_dead_letter("q", &quarantined.parse(), Area::Quarantine, &system())
            .await
            .unwrap();
        s.advance(30_001);
        let young = dead_letter(&s, "q", Letter::new("young")).await;
        assert!(
            record(&s, "q", &old).await.replay.due_at.is_none(),
            "{name}: replay was off"
        );
        s.patch("/v1/queues/q", json!({"auto_replay": {"enabled": true}}))
            .await;
        assert_eq!(
            s.broker.drain_replay_candidates().await.unwrap(),
            1,
            "{name}"
        );
        assert!(
            record(&s, "q", &old).await.replay.due_at.is_some(),
            "{name}"
        );
        assert!(
            record(&s, "q", &young).await.replay.due_at.is_none(),
            "{name}: inside the window"
        );
        assert!(
            record(&s, "q", &archived).await.replay.due_at.is_none(),
            "{name}"
        );
        assert!(
            record(&s, "q", &quarantined).await.replay.due_at.is_none(),
            "{name}"
        );
        assert_eq!(pass(&s).await.republished, 1, "{name}");
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_every_area_at_30_days_with_its_metric() {
    for backend in Backend::all("the retention test") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("q", json!({})).await;
        s.queue("forever", json!({"dead_letter_retention_ms": 0}))
            .await;
        let a = dead_letter(&s, "q", Letter::new("a")).await;
        let b = dead_letter(&s, "q", Letter::new("b")).await;
        dead_letter(&s, "forever", Letter::new("f")).await;
        s.broker
            .move_dead_letter("q", &b.parse(), Area::Quarantine, &system())
            .await
            .unwrap();
        // The sweep of the running server applies the same rule on its own schedule:
        // the test looks at what is left, whoever removed it.
        s.advance(30 * 24 * 3_600_000 - 1);
        s.broker.expire_dead_letters().await.unwrap();
        record(&s, "q", &a).await;
        record(&s, "q", &b).await;
        s.advance(1);
        let kept = dead_letter(&s, "q", Letter::new("c")).await;
        s.broker.expire_dead_letters().await.unwrap();
        assert!(
            s.broker
                .get_dead_letter("q", &a.parse(), &system())
                .await
                .is_err(),
            "{name}"
        );
        assert!(
            s.broker
                .get_dead_letter("q", &b.parse(), &system())
                .await
                .is_err(),
            "{name}: every area"
        );
        record(&s, "q", &kept).await;
        assert_eq!(
            records(&s, "forever", Area::Live).await.len(),
            1,
            "{name}: 0 keeps forever"
        );
        assert!(
            s.metrics()
                .await
                .contains("redrive_dead_letters_expired_total{queue=\"q\"} 2"),
            "{name}"
        );
        s.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_is_woken_by_the_dead_letter_write() {
    let s = TestServer::builder().start().await;
    replaying_queue(&s, "q", json!({})).await;
    register(&s, "q:*", Idempotency::Idempotent).await;
    let id = dead_letter(&s, "q", Letter::new("w")).await;
    // A long poll on the manual clock returns only when the republished message arrives:
    // nothing but the write woke the worker (the clock never moves here).
    let (st, v) = within(
        "the worker replays the new dead letter",
        s.post(
            "/v1/queues/q/receive",
            json!({"max_messages": 1, "wait_ms": 20_000}),
        ),
    )
    .await;
    assert_eq!(st, 200, "{v}");
    let got = v["messages"].as_array().expect("messages");
    assert_eq!(got.len(), 1, "{v}");
    assert_eq!(got[0]["message_id"], "w|1");
    assert_eq!(got[0]["properties"]["redrive-replayed-from"], id.as_str());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_endpoint_down_past_its_ttl_loses_nothing_every_event_delivered_or_quarantined() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use redrive_testkit::{Receiver, Reply};

    let s = server(Backend::Sqlite).await;
    let down = Arc::new(AtomicBool::new(true));
    let flag = down.clone();
    let rx = Receiver::webhook(move |_, _| {
        if flag.load(Ordering::SeqCst) {
            Reply::status(503)
        } else {
            Reply::status(200)
        }
    })
    .await;
    register(&s, "order.created", Idempotency::Idempotent).await;
    register(&s, "webhook.post", Idempotency::NotIdempotent).await;
    s.topic("orders", json!({})).await;
    let (st, v) = s
        .post(
            "/v1/topics/orders/subscriptions",
            json!({"name": "hook", "type": "push", "endpoint": rx.url,
                   "dead_letter": {"type": "own_store"},
                   "retry_policy": {"event_time_to_live_minutes": 1,
                                    "schedule_ms": [40_000], "jitter": 0.0},
                   "auto_replay": {"enabled": true}}),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let events = [
        crate::topics::event("e1", "order.created", "/1"),
        crate::topics::event("e2", "order.created", "/2"),
        crate::topics::event("e3", "webhook.post", "/3"),
    ];
    s.publish("orders", &events).await;
    crate::topics::until_stats(&s, "hook", json!({"in_backoff": 3})).await;
    s.advance(40_000);
    // The second attempts fail too; the next (at 80 s) would fall after the one-minute
    // time to live, so the events wait for it and are dead-lettered when it passes.
    rx.wait_for(6).await;
    crate::topics::until_stats(&s, "hook", json!({"in_backoff": 3, "dead_lettered": 0})).await;
    s.advance(20_000);
    crate::topics::until_stats(&s, "hook", json!({"in_backoff": 0, "dead_lettered": 3})).await;
    let failed = rx.deliveries().len();
    assert_eq!(failed, 6, "two attempts each while the endpoint was down");

    down.store(false, Ordering::SeqCst);
    let p = pass(&s).await;
    assert_eq!(p.republished, 2);
    assert_eq!(
        causes(&p),
        BTreeMap::from([(QuarantineCause::NotIdempotent, 1)])
    );
    let got = rx.wait_for(failed + 2).await;
    let mut delivered: Vec<(String, String)> = got[failed..]
        .iter()
        .map(|r| {
            let ev = r.json();
            (
                ev["id"].as_str().unwrap().to_owned(),
                ev["redriveoriginalid"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    delivered.sort();
    assert_eq!(
        delivered,
        [
            ("e1|1".to_owned(), "e1".to_owned()),
            ("e2|1".to_owned(), "e2".to_owned())
        ]
    );
    let queue = "orders.hook";
    assert!(
        records(&s, queue, Area::Live).await.is_empty(),
        "nothing left undecided"
    );
    assert_eq!(records(&s, queue, Area::Archived).await.len(), 2);
    let quarantined = records(&s, queue, Area::Quarantine).await;
    assert_eq!(quarantined.len(), 1);
    assert_eq!(quarantined[0].message_id, "e3");
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivered_judgement_logs_and_counts_its_quarantine_once() {
    for backend in Backend::all("the redelivered judgement test") {
        let name = backend.name();
        let s = server(backend).await;
        replaying_queue(&s, "q", json!({"max_chunk_events": 1})).await;
        register(&s, "e", Idempotency::Idempotent).await;
        // A poison event, then an event the origin refuses for now: the first judgement
        // quarantines the poison and fails on the second; the next one finds the
        // quarantine written and does not write, log or count it again.
        let mut arr: Vec<Value> =
            serde_json::from_slice(&blob(&[("poison", "nobody.knows")], 4)).unwrap();
        arr.extend(serde_json::from_slice::<Vec<Value>>(&blob(&[("big", "e")], 4_000)).unwrap());
        s.patch("/v1/queues/q", json!({"max_message_size": 2_048}))
            .await;
        let id = import_blob(&s, "q", &serde_json::to_vec(&arr).unwrap()).await;
        let p = pass(&s).await;
        assert_eq!(
            causes(&p),
            BTreeMap::from([(QuarantineCause::TypeNotRegistered, 1)]),
            "{name}"
        );
        assert_eq!(p.failed, 1, "{name}");
        s.patch("/v1/queues/q", json!({"max_message_size": 1_048_576}))
            .await;
        s.advance(1_000);
        let p = pass(&s).await;
        assert!(
            p.quarantined.is_empty(),
            "{name}: found, not created again: {p:?}"
        );
        assert_eq!(p.republished, 1, "{name}");
        assert_eq!(record(&s, "q", &id).await.area, Area::Archived, "{name}");
        assert_eq!(records(&s, "q", Area::Quarantine).await.len(), 1, "{name}");
        assert!(
            s.metrics().await.contains(
                "redrive_replay_quarantined_total{queue=\"q\",cause=\"TypeNotRegistered\"} 1"
            ),
            "{name}"
        );
        s.stop().await;
    }
}
