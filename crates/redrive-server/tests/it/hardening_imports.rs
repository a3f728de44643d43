//! What an import accepts, what a quarantine stores, and where a replay goes (issue #24,
//! items 7, 10, 11 and 12), on every backend, on the manual clock. The replay worker is
//! off: each test drives the judgement one pass at a time.

use redrive_core::Area;
use redrive_core::judgement::QuarantineCause;
use redrive_core::register::Idempotency;
use redrive_testkit::{Backend, TestServer};
use serde_json::{Value, json};

use redrive_testkit::recovery::{
    dead_letter_next, record, records, register, replay_passes, system,
};

use crate::replay::server;

/// An exported record (the native API's shape) as `redrive dlq export` writes it, times
/// before the test clock's start.
fn exported(message_id: &str) -> Value {
    json!({
        "id": "dl_0000000000000000000000000000", "queue": "orders", "area": "live",
        "message_id": message_id, "body": "hello", "body_encoding": "utf8",
        "reason": "MaxDeliveryCountExceeded", "description": "gave up",
        "delivery_count": 10, "delivery_count_quality": "exact",
        "first_delivered_at": "2027-01-15T06:01:00Z",
        "last_delivered_at": "2027-01-15T06:09:00Z",
        "enqueued_time": "2027-01-15T06:00:00Z",
        "dead_lettered_at": "2027-01-15T06:10:00Z",
        "policy_version": 1, "routed_by": "broker",
    })
}

async fn import(s: &TestServer, queue: &str, format: &str, content: String) -> (u16, Value) {
    let (st, v) = s
        .post(
            &format!("/v1/queues/{queue}/dead-letters/import"),
            json!({"format": format, "content": content}),
        )
        .await;
    (st.as_u16(), v)
}

fn json_lines(records: &[Value]) -> String {
    records
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// An Event Grid dead-letter blob of CloudEvents `(id, type)`.
fn blob(events: &[(&str, &str)]) -> Vec<Value> {
    events
        .iter()
        .map(|(id, t)| {
            json!({
                "specversion": "1.0", "id": id, "source": "/orders", "type": t,
                "data": {"n": id},
                "deadLetterReason": "MaxDeliveryAttemptsExceeded", "deliveryAttempts": 10,
                "lastDeliveryOutcome": "Probation",
                "publishTime": "2027-01-14T10:00:00Z",
                "lastDeliveryAttemptTime": "2027-01-14T11:00:00Z"
            })
        })
        .collect()
}

/// Item 7: a forged `routed_by: broker` with a broker's reason and an `exact` count is
/// stored as what an import can vouch for: routed by `import`, the count `approximate`,
/// the source's reason kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_marks_what_it_cannot_vouch_for() {
    for backend in Backend::all("the import vouching test") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("legacy", json!({})).await;
        let (st, v) = import(&s, "legacy", "json", json_lines(&[exported("m-1")])).await;
        assert_eq!(st, 201, "{name}: {v}");
        let id = v["ids"][0].as_str().unwrap().to_owned();
        let (st, r) = s.get(&format!("/v1/queues/legacy/dead-letters/{id}")).await;
        assert_eq!(st, 200, "{r}");
        assert_eq!(r["routed_by"], "import", "{name}: {r}");
        assert_eq!(r["delivery_count_quality"], "approximate", "{name}: {r}");
        assert_eq!(
            r["reason"], "MaxDeliveryCountExceeded",
            "{name}: the source's"
        );
        assert_eq!(r["delivery_count"], 10);
        // Event Grid and SQS imports say the same of who routed them.
        let eg = serde_json::to_string(&blob(&[("e-1", "order.created")])).unwrap();
        let (st, v) = import(&s, "legacy", "eventgrid", eg).await;
        assert_eq!(st, 201, "{name}: {v}");
        let r = record(&s, "legacy", v["ids"][0].as_str().unwrap()).await;
        assert_eq!(r.route, redrive_core::RouteKind::Import, "{name}");
        s.stop().await;
    }
}

/// Item 7: impossible or unbounded evidence is refused whole with a problem naming the
/// record and the field; nothing is stored; the refusal is audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_refuses_impossible_evidence_naming_the_record_and_the_field() {
    for backend in Backend::all("the impossible import test") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("legacy", json!({"max_message_size": 1_048_576}))
            .await;
        let with = |patch: Value| {
            let mut r = exported("m-2");
            for (k, v) in patch.as_object().unwrap() {
                r[k] = v.clone();
            }
            json_lines(&[exported("m-1"), r])
        };
        let big_body = "b".repeat(2 * 1024 * 1024);
        let mut cases: Vec<(&str, String, &str)> = vec![
            (
                "json",
                with(json!({"dead_lettered_at": "9999-12-31T00:00:00Z"})),
                "`dead_lettered_at`",
            ),
            (
                "json",
                with(json!({"enqueued_time": "1900-01-01T00:00:00Z"})),
                "`enqueued_time`",
            ),
            (
                "json",
                with(json!({"reason": "r".repeat(10 * 1024)})),
                "`reason`",
            ),
            (
                "json",
                with(json!({"description": "d".repeat(1024 * 1024)})),
                "`description`",
            ),
            (
                "json",
                with(json!({"message_id": "m".repeat(10 * 1024)})),
                "`message_id`",
            ),
            ("json", with(json!({"body": big_body.clone()})), "`body`"),
        ];
        let sqs = json!({"Messages": [{
            "MessageId": "s-1", "ReceiptHandle": "h", "Body": big_body,
            "Attributes": {"ApproximateReceiveCount": "3", "SentTimestamp": "1799999000000"},
        }]});
        cases.push(("sqs", sqs.to_string(), "record 0: `body`"));
        for attempts in [json!(-1), json!(4_294_967_295u64), json!("10"), json!([])] {
            let mut events = blob(&[("e-1", "order.created"), ("e-2", "order.created")]);
            events[1]["deliveryAttempts"] = attempts;
            cases.push((
                "eventgrid",
                serde_json::to_string(&events).unwrap(),
                "record 0: `[1].deliveryAttempts`",
            ));
        }
        let refusals = cases.len();
        for (format, content, names) in cases {
            let resp = import(&s, "legacy", format, content).await;
            let what = format!("{name} {format} {names}");
            assert_eq!(resp.0, 400, "{what}: {}", resp.1);
            assert_eq!(resp.1["code"], "invalid_request", "{what}: {}", resp.1);
            assert_eq!(resp.1["field"], "content", "{what}: {}", resp.1);
            let detail = resp.1["detail"].as_str().unwrap_or_default();
            assert!(detail.contains(names), "{what}: {detail}");
            if format == "json" {
                assert!(
                    detail.starts_with("invalid `content`: record 1 (line 2): "),
                    "{what}: {detail}"
                );
            }
            assert!(detail.len() < 1_024, "{what}: the detail stays short");
        }
        for area in [Area::Live, Area::Archived, Area::Quarantine] {
            assert!(
                records(&s, "legacy", area).await.is_empty(),
                "{name}: nothing stored"
            );
        }
        let refused = s.audit("action=dead_letter.import").await;
        assert_eq!(refused.len(), refusals, "{name}: every refusal is audited");
        assert!(
            refused.iter().all(|e| e["outcome"]
                .as_str()
                .is_some_and(|o| o.starts_with("error"))),
            "{name}: {refused:?}"
        );
        s.stop().await;
    }
}

/// Item 10: a message dead letter (a topic subscription's CloudEvent) quarantined at the
/// cap is stored under its id without the count in its body too, as a blob's events are;
/// restored, it resumes at `|1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantined_event_keeps_no_count_in_its_body_in_either_record_format() {
    for backend in Backend::all("the quarantined body test") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue(
            "q",
            json!({"auto_replay": {"enabled": true, "max_replay_attempts": 2}}),
        )
        .await;
        register(&s, "q:*", Idempotency::Idempotent).await;
        register(&s, "order.created", Idempotency::Idempotent).await;
        let event = json!({
            "specversion": "1.0", "id": "pe-1|2", "source": "/shop", "type": "order.created",
            "data": {"n": 1}, "redriveoriginalid": "pe-1",
        });
        let (st, v) = s
            .post(
                "/v1/queues/q/messages",
                json!({"message_id": "pe-1|2", "body": event.to_string(),
                       "content_type": "application/cloudevents+json"}),
            )
            .await;
        assert_eq!(st, 201, "{v}");
        let message = dead_letter_next(&s, "q").await;
        let events = serde_json::to_string(&blob(&[("be-1|2", "order.created")])).unwrap();
        let (st, v) = import(&s, "q", "eventgrid", events).await;
        assert_eq!(st, 201, "{v}");
        let imported = v["ids"][0].as_str().unwrap().to_owned();

        let p = replay_passes(&s).await;
        assert_eq!(
            p.quarantined.get(&QuarantineCause::ReplayAttemptsExhausted),
            Some(&2),
            "{name}: {p:?}"
        );
        let m = record(&s, "q", &message).await;
        assert_eq!(m.area, Area::Quarantine, "{name}");
        assert_eq!(m.message_id, "pe-1", "{name}");
        let body: Value = serde_json::from_slice(&m.body).unwrap();
        assert_eq!(
            body["id"], "pe-1",
            "{name}: the body says what the record says"
        );
        assert_eq!(body["data"], json!({"n": 1}), "{name}: the rest is kept");
        assert_eq!(m.body_sha256, redrive_core::digest::sha256_hex(&m.body));
        let b = record(&s, "q", &imported).await;
        assert_eq!(b.message_id, "be-1", "{name}");
        let body: Value = serde_json::from_slice(&b.body).unwrap();
        assert_eq!(body[0]["id"], "be-1", "{name}");

        // Restored, both resume at |1.
        for id in [&message, &imported] {
            s.broker
                .restore_dead_letter("q", &id.parse(), false, &system())
                .await
                .unwrap();
        }
        let p = replay_passes(&s).await;
        assert_eq!(p.republished, 2, "{name}: {p:?}");
        let mut got: Vec<(String, String)> = s
            .receive("q", 10)
            .await
            .iter()
            .map(|m| {
                let body: Value = serde_json::from_str(m["body"].as_str().unwrap()).unwrap();
                (
                    m["message_id"].as_str().unwrap().to_owned(),
                    body["id"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("be-1|1".to_owned(), "be-1|1".to_owned()),
                ("pe-1|1".to_owned(), "pe-1|1".to_owned())
            ],
            "{name}"
        );
        s.stop().await;
    }
}

/// Item 11: a quarantine copy cut from an imported blob is listed by the events it holds
/// (its first event's id, their shared type), and its case knows the type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_copies_are_listed_by_the_events_they_hold() {
    for backend in Backend::all("the quarantine copy naming test") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("q", json!({"auto_replay": {"enabled": true}}))
            .await;
        register(&s, "order.created", Idempotency::Idempotent).await;
        register(&s, "webhook.post", Idempotency::NotIdempotent).await;
        let events = blob(&[
            ("a", "order.created"),
            ("w|1", "webhook.post"),
            ("x", "webhook.post"),
            ("u", "never.registered"),
        ]);
        let (st, v) = import(
            &s,
            "q",
            "eventgrid",
            serde_json::to_string(&events).unwrap(),
        )
        .await;
        assert_eq!(st, 201, "{v}");
        let p = replay_passes(&s).await;
        assert_eq!(p.republished, 1, "{name}: {p:?}");
        let copies = records(&s, "q", Area::Quarantine).await;
        let listed = |cause| {
            copies
                .iter()
                .find(|r| r.judgement.as_ref().and_then(|j| j.cause) == Some(cause))
                .unwrap_or_else(|| panic!("{name}: a copy for {cause}"))
        };
        let hooks = listed(QuarantineCause::NotIdempotent);
        assert_eq!(
            hooks.message_id, "w",
            "{name}: not the blob's first event `a`"
        );
        assert_eq!(
            hooks.message_type.as_deref(),
            Some("webhook.post"),
            "{name}"
        );
        let unknown = listed(QuarantineCause::TypeNotRegistered);
        assert_eq!(unknown.message_id, "u", "{name}");
        assert_eq!(
            unknown.message_type.as_deref(),
            Some("never.registered"),
            "{name}"
        );
        let case_id = format!("case_{}", hooks.id.trim_start_matches("dl_"));
        let (st, c) = s.get(&format!("/v1/cases/{case_id}")).await;
        assert_eq!(st, 200, "{c}");
        assert_eq!(c["message_id"], "w", "{name}: {c}");
        assert_eq!(c["message_type"], "webhook.post", "{name}: {c}");
        s.stop().await;
    }
}

/// Item 11: the id grammar at the server. `plain|01` and `|3` carry no count: their
/// first replay appends one, and `|3` is not read as an empty original id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_whose_suffix_is_no_count_replay_from_attempt_one() {
    for backend in Backend::all("the id grammar test") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("q", json!({"auto_replay": {"enabled": true}}))
            .await;
        register(&s, "q:*", Idempotency::Idempotent).await;
        for id in ["plain|01", "|3", "a|0", "b|7"] {
            let (st, v) = s
                .post(
                    "/v1/queues/q/messages",
                    json!({"message_id": id, "body": "x"}),
                )
                .await;
            assert_eq!(st, 201, "{v}");
            dead_letter_next(&s, "q").await;
        }
        let p = replay_passes(&s).await;
        assert_eq!(p.republished, 3, "{name}: {p:?}");
        assert_eq!(
            p.quarantined.get(&QuarantineCause::ReplayAttemptsExhausted),
            Some(&1),
            "{name}: b|7 is at its cap"
        );
        let mut got: Vec<String> = s
            .receive("q", 10)
            .await
            .iter()
            .map(|m| {
                assert_eq!(
                    m["properties"]["redrive-original-id"],
                    m["message_id"]
                        .as_str()
                        .unwrap()
                        .rsplit_once('|')
                        .unwrap()
                        .0
                );
                m["message_id"].as_str().unwrap().to_owned()
            })
            .collect();
        got.sort();
        assert_eq!(got, ["a|0|1", "plain|01|1", "|3|1"], "{name}");
        let q = records(&s, "q", Area::Quarantine).await;
        assert_eq!(q.len(), 1);
        assert_eq!(q[0].message_id, "b", "{name}");
        s.stop().await;
    }
}

/// Item 12: a subscription's replay goes to the subscription's own queue, never to its
/// topic: another subscription of the topic does not see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_replays_to_its_own_queue_not_to_its_topic() {
    for backend in Backend::all("the subscription replay destination test") {
        let name = backend.name();
        let s = server(backend).await;
        register(&s, "order.created", Idempotency::Idempotent).await;
        s.topic("orders", json!({})).await;
        let (st, v) = s
            .post(
                "/v1/topics/orders/subscriptions",
                json!({"name": "a", "type": "pull", "auto_replay": {"enabled": true}}),
            )
            .await;
        assert_eq!(st, 201, "{v}");
        let a = v["queue"].as_str().unwrap().to_owned();
        let b = s.pull_sub("orders", "b", json!({})).await;
        let (st, v) = s
            .publish(
                "orders",
                &[crate::topics::event("e1", "order.created", "/1")],
            )
            .await;
        assert_eq!(st.as_u16() / 100, 2, "{v}");
        assert_eq!(s.receive(&b, 10).await.len(), 1, "{name}: b has its copy");
        dead_letter_next(&s, &a).await;
        let p = replay_passes(&s).await;
        assert_eq!(p.republished, 1, "{name}: {p:?}");
        let got = s.receive(&a, 10).await;
        assert_eq!(got.len(), 1, "{name}");
        assert_eq!(got[0]["message_id"], "e1|1", "{name}");
        assert!(
            s.receive(&b, 10).await.is_empty(),
            "{name}: the topic's other subscription sees no replay"
        );
        s.stop().await;
    }
}
