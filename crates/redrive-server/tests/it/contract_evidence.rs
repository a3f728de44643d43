//! Issue 30, items 10 and 11: evidence keeps its route (seed 001, matrix rows 18 and 20).
//! A case keeps the version of the routing policy that was in force when its record was
//! dead-lettered, under every rule; an application's reason stays bound to the consumer
//! and the rule version that applied it; an export → import round trip keeps the route
//! kind, the rule and the policy version; an import that says nothing of its route is
//! `route_indeterminate`, with no invented rule, policy version or attempt count. Every
//! scenario on every backend, on the manual clock, the case worker driven one pass at a
//! time.

use redrive_testkit::{Backend, TestServer, assert_problem};
use serde_json::{Value, json};

use redrive_testkit::recovery::{case, case_id, states, work};

use crate::cases::server;

/// Patches `queue`'s policy `times` times (each a new version).
async fn bump_policy(s: &TestServer, queue: &str, times: u64) {
    for i in 0..times {
        let (st, v) = s
            .patch(
                &format!("/v1/queues/{queue}"),
                json!({"lock_duration_ms": 30_000 + i}),
            )
            .await;
        assert_eq!(st, 200, "{v}");
    }
}

async fn record(s: &TestServer, queue: &str, id: &str) -> Value {
    let (st, v) = s
        .get(&format!("/v1/queues/{queue}/dead-letters/{id}"))
        .await;
    assert_eq!(st, 200, "{v}");
    v
}

/// Sends `id` and takes its one delivery; answers the lock token.
async fn delivered(s: &TestServer, queue: &str, id: &str, extra: Value) -> String {
    let mut msg = json!({"message_id": id, "body": format!("{{\"order\":\"{id}\"}}")});
    if let Value::Object(m) = extra {
        for (k, v) in m {
            msg[k] = v;
        }
    }
    let (st, v) = s.post(&format!("/v1/queues/{queue}/messages"), msg).await;
    assert_eq!(st, 201, "{v}");
    let got = s.receive(queue, 1).await;
    assert_eq!(got.len(), 1);
    got[0]["lock_token"].as_str().unwrap().to_owned()
}

/// The message's dead letter by the broker's delivery threshold (the queue's max
/// delivery count is 1): answers the record id.
async fn over_threshold(s: &TestServer, queue: &str, id: &str) -> String {
    let token = delivered(s, queue, id, json!({})).await;
    let (st, v) = s.settle(queue, &token, "abandon", json!({})).await;
    assert_eq!(st, 200, "{v}");
    v["dead_letter_id"]
        .as_str()
        .expect("dead-lettered")
        .to_owned()
}

/// The timeline entry of `state` (the first).
fn entry(c: &Value, state: &str) -> Value {
    c["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["state"] == state)
        .unwrap_or_else(|| panic!("no {state} entry: {c}"))
        .clone()
}

async fn import(s: &TestServer, queue: &str, format: &str, content: String) -> Vec<String> {
    let (st, v) = s
        .post(
            &format!("/v1/queues/{queue}/dead-letters/import"),
            json!({"format": format, "content": content}),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_str().unwrap().to_owned())
        .collect()
}

/// Row 18: a case keeps the policy version that routed it — under the delivery
/// threshold and under expiry — after the queue's policy moved on; the record, its
/// description, the case's identity and its route evidence all name the same version.
#[tokio::test]
async fn a_case_keeps_the_policy_version_that_routed_it() {
    for backend in Backend::all("the routing policy version test") {
        let name = backend.name();
        let s = crate::cases::hand_swept_server(backend).await;
        s.queue(
            "orders",
            json!({"max_delivery_count": 1, "dead_letter_on_expiry": true}),
        )
        .await;
        bump_policy(&s, "orders", 2).await;
        let threshold = over_threshold(&s, "orders", "o-1").await;
        let (st, v) = s
            .post(
                "/v1/queues/orders/messages",
                json!({"message_id": "o-2", "body": "x", "time_to_live_ms": 1000}),
            )
            .await;
        assert_eq!(st, 201, "{v}");
        s.advance(2_000);
        s.broker.sweep_once().await.expect("a sweep");
        let (_, page) = s.get("/v1/queues/orders/dead-letters").await;
        let expired = page["dead_letters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["message_id"] == "o-2")
            .expect("the expired message's record")["id"]
            .as_str()
            .unwrap()
            .to_owned();
        // The policy moves on before the broker looks at the cases.
        bump_policy(&s, "orders", 2).await;
        let (_, q) = s.get("/v1/queues/orders").await;
        assert_eq!(q["policy_version"], 5, "{name}");
        work(&s).await;

        for (id, rule) in [(&threshold, "delivery_threshold"), (&expired, "expiry")] {
            let r = record(&s, "orders", id).await;
            assert_eq!(r["policy_version"], 3, "{name}: {r}");
            assert_eq!(r["route"], "broker_routed", "{name}: {r}");
            assert_eq!(r["route_rule"], rule, "{name}: {r}");
            let c = case(&s, &case_id(id)).await;
            assert_eq!(c["policy_version"], 3, "{name}: {c}");
            assert_eq!(c["route_rule"], rule, "{name}: {c}");
            assert_eq!(c["record"]["route"]["policy_version"], 3, "{name}: {c}");
            assert_eq!(c["record"]["route"]["rule"], rule, "{name}: {c}");
            let verified = entry(&c, "route_verified");
            assert_eq!(verified["fields"]["policy_version"], "3", "{name}: {c}");
            assert_eq!(verified["fields"]["rule"], rule, "{name}: {c}");
            assert!(c.get("consumer").is_none(), "{name}: the broker's: {c}");
        }
        let r = record(&s, "orders", &threshold).await;
        assert!(
            r["description"]
                .as_str()
                .unwrap()
                .contains("(policy version 3)"),
            "{name}: the description names the same version: {r}"
        );
        let c = case(&s, &case_id(&threshold)).await;
        assert_eq!(
            entry(&c, "route_verified")["evidence"],
            "routed under the delivery_threshold rule, policy version 3",
            "{name}"
        );
        let c = case(&s, &case_id(&expired)).await;
        assert_eq!(c["state"], "expired", "{name}: {c}");
        s.stop().await;
    }
}

/// Row 20: an application's dead letter with a consumer and a rule version keeps both on
/// the record, on the case (identity, route evidence, the classified failure) and in
/// the export; the reason stays an observation, no diagnosis.
#[tokio::test]
async fn an_application_reason_stays_bound_to_its_consumer_and_rule_version() {
    for backend in Backend::all("the application classifier test") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        bump_policy(&s, "orders", 1).await;
        let token = delivered(&s, "orders", "o-20", json!({})).await;
        let (st, v) = s
            .settle(
                "orders",
                &token,
                "dead_letter",
                json!({"reason": "bad-sku", "description": "sku 12 unknown",
                       "consumer": "orders-consumer@4.2.0", "rule_version": "sku-rules/7"}),
            )
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        let id = v["dead_letter_id"].as_str().unwrap().to_owned();
        let r = record(&s, "orders", &id).await;
        assert_eq!(
            (&r["routed_by"], &r["route"], &r["route_rule"]),
            (
                &json!("application"),
                &json!("application_quarantined"),
                &json!("application")
            ),
            "{name}: {r}"
        );
        assert_eq!(
            (&r["consumer"], &r["rule_version"], &r["policy_version"]),
            (
                &json!("orders-consumer@4.2.0"),
                &json!("sku-rules/7"),
                &json!(2)
            ),
            "{name}: {r}"
        );
        work(&s).await;
        let c = case(&s, &case_id(&id)).await;
        assert_eq!(c["route"], "application_quarantined", "{name}");
        assert_eq!(
            (&c["consumer"], &c["rule_version"], &c["route_rule"]),
            (
                &json!("orders-consumer@4.2.0"),
                &json!("sku-rules/7"),
                &json!("application")
            ),
            "{name}: {c}"
        );
        let route = &c["record"]["route"];
        assert_eq!(route["consumer"], "orders-consumer@4.2.0", "{name}: {c}");
        assert_eq!(route["rule_version"], "sku-rules/7", "{name}: {c}");
        let verified = entry(&c, "route_verified");
        assert_eq!(
            (
                &verified["fields"]["consumer"],
                &verified["fields"]["rule_version"]
            ),
            (&json!("orders-consumer@4.2.0"), &json!("sku-rules/7")),
            "{name}: {verified}"
        );
        assert!(
            verified["evidence"]
                .as_str()
                .unwrap()
                .contains("consumer orders-consumer@4.2.0, rule version sku-rules/7"),
            "{name}: {verified}"
        );
        let classified = entry(&c, "failure_classified");
        assert_eq!(classified["fields"]["reason"], "bad-sku", "{name}");
        assert_eq!(
            classified["fields"]["consumer"], "orders-consumer@4.2.0",
            "{name}"
        );
        assert_eq!(classified["fields"]["rule_version"], "sku-rules/7");
        assert!(
            !states(&c).contains(&"diagnosis_proposed".to_owned()),
            "{name}: a classification, not a diagnosis: {c}"
        );
        // The export (the listing `redrive dlq export` writes) carries them.
        let (_, page) = s.get("/v1/queues/orders/dead-letters").await;
        let exported = &page["dead_letters"][0];
        assert_eq!(exported["consumer"], "orders-consumer@4.2.0", "{name}");
        assert_eq!(exported["rule_version"], "sku-rules/7", "{name}");
        s.stop().await;
    }
}

/// Bounds: a consumer or rule version that is empty, longer than 256 bytes or not
/// printable, or one given with another action, is refused with a problem naming the
/// field, and nothing changes: the delivery stays locked to its holder, no record is
/// written. SQS has no such fields and is not touched.
#[tokio::test]
async fn a_bad_consumer_or_rule_version_is_refused_and_changes_nothing() {
    for backend in Backend::all("the classifier bounds test") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        let token = delivered(&s, "orders", "o-30", json!({})).await;
        let long = "c".repeat(257);
        for (field, value) in [
            ("consumer", json!(long)),
            ("consumer", json!("")),
            ("consumer", json!("orders\u{7}")),
            ("rule_version", json!("v1\nv2")),
            ("rule_version", json!("   ")),
        ] {
            let mut body = json!({"reason": "bad-sku"});
            body[field] = value.clone();
            let r = s.settle("orders", &token, "dead_letter", body).await;
            assert_problem(&r, 400, "invalid_request");
            assert_eq!(r.1["field"], field, "{name}: {value}: {}", r.1);
        }
        let r = s
            .settle("orders", &token, "complete", json!({"consumer": "x"}))
            .await;
        assert_problem(&r, 400, "invalid_request");
        // A batch with one bad item is refused whole.
        let r = s
            .post(
                "/v1/queues/orders/settle",
                json!({"settlements": [
                    {"lock_token": token, "action": "dead_letter", "reason": "bad-sku",
                     "consumer": long},
                ]}),
            )
            .await;
        assert_problem(&r, 400, "invalid_request");
        let (_, page) = s.get("/v1/queues/orders/dead-letters").await;
        assert_eq!(page["dead_letters"], json!([]), "{name}: nothing written");
        // 256 bytes exactly is taken, by the same holder's lock.
        let (st, v) = s
            .settle(
                "orders",
                &token,
                "dead_letter",
                json!({"reason": "bad-sku", "consumer": "c".repeat(256)}),
            )
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        let r = record(&s, "orders", v["dead_letter_id"].as_str().unwrap()).await;
        assert_eq!(r["consumer"].as_str().unwrap().len(), 256, "{name}");
        assert!(r.get("rule_version").is_none(), "{name}: not given: {r}");
        s.stop().await;
    }
}

/// Item 11: an export → import round trip keeps the route kind, the rule and the policy
/// version (and an application's consumer and rule version): a record routed under
/// policy version 3 is imported as routed under version 3, by the rule it was routed
/// under, into a queue whose own policy is at version 1 — and again after a second
/// round trip. The import itself stays `routed_by: import`.
#[tokio::test]
async fn an_export_import_round_trip_keeps_the_route() {
    for backend in Backend::all("the export import round trip test") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("orders", json!({"max_delivery_count": 1})).await;
        s.queue("legacy", json!({})).await;
        s.queue("archive", json!({})).await;
        bump_policy(&s, "orders", 2).await;
        over_threshold(&s, "orders", "o-1").await;
        let token = delivered(&s, "orders", "o-2", json!({})).await;
        let (st, v) = s
            .settle(
                "orders",
                &token,
                "dead_letter",
                json!({"reason": "bad-sku", "consumer": "orders-consumer@4",
                       "rule_version": "sku-rules/7"}),
            )
            .await;
        assert_eq!(st, 200, "{name}: {v}");
        let (_, page) = s.get("/v1/queues/orders/dead-letters").await;
        let mut lines: Vec<Value> = page["dead_letters"].as_array().unwrap().clone();
        assert_eq!(lines.len(), 2, "{name}: {page}");
        // A record another redrive routed under a filter rule, as its export says.
        let mut filtered = lines[0].clone();
        filtered["message_id"] = json!("o-3");
        filtered["reason"] = json!("FilterEvaluationException");
        filtered["route_rule"] = json!("filter");
        filtered["delivery_count"] = json!(0);
        lines.push(filtered);
        let export = |ls: &[Value]| {
            ls.iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        };
        let ids = import(&s, "legacy", "json", export(&lines)).await;
        work(&s).await;
        let expected = [
            ("o-1", "broker_routed", "delivery_threshold"),
            ("o-2", "application_quarantined", "application"),
            ("o-3", "broker_routed", "filter"),
        ];
        let mut again = Vec::new();
        for (id, (message, route, rule)) in ids.iter().zip(expected) {
            let r = record(&s, "legacy", id).await;
            assert_eq!(r["message_id"], message, "{name}");
            assert_eq!(r["routed_by"], "import", "{name}: {r}");
            assert_eq!(
                (&r["route"], &r["route_rule"], &r["policy_version"]),
                (&json!(route), &json!(rule), &json!(3)),
                "{name}: {r}"
            );
            let c = case(&s, &case_id(id)).await;
            assert_eq!(c["route"], route, "{name}: {c}");
            assert_eq!(c["policy_version"], 3, "{name}: {c}");
            assert_eq!(c["record"]["route"]["rule"], rule, "{name}: {c}");
            assert_eq!(c["record"]["route"]["policy_version"], 3, "{name}: {c}");
            let evidence = entry(&c, "route_verified")["evidence"].clone();
            assert!(
                evidence.as_str().unwrap().contains("policy version 3"),
                "{name}: {evidence}"
            );
            assert!(
                !evidence.as_str().unwrap().contains("policy version 1"),
                "{name}: {evidence}"
            );
            again.push(r);
        }
        let app = &again[1];
        assert_eq!(
            (&app["consumer"], &app["rule_version"]),
            (&json!("orders-consumer@4"), &json!("sku-rules/7")),
            "{name}: {app}"
        );
        let c = case(&s, &case_id(&ids[1])).await;
        assert_eq!(c["consumer"], "orders-consumer@4", "{name}: {c}");
        assert_eq!(c["rule_version"], "sku-rules/7", "{name}: {c}");
        // The filter rule stays routing evidence: no receive history, no failure.
        let c = case(&s, &case_id(&ids[2])).await;
        assert!(
            c["record"]["route"].get("attempts").is_none(),
            "{name}: {c}"
        );
        assert!(!states(&c).contains(&"failure_classified".to_owned()));

        // A second round trip, from the imported records' own export.
        let ids = import(&s, "archive", "json", export(&again)).await;
        for (id, (_, route, rule)) in ids.iter().zip(expected) {
            let r = record(&s, "archive", id).await;
            assert_eq!(
                (&r["route"], &r["route_rule"], &r["policy_version"]),
                (&json!(route), &json!(rule), &json!(3)),
                "{name}: {r}"
            );
        }
        s.stop().await;
    }
}

/// Item 11: an imported event with neither `deadLetterReason` nor `deliveryAttempts`,
/// an exported line that names no route and no rule, and an SQS message (SQS does not
/// say why it moved a message) are `route_indeterminate`: no rule, no policy version, no
/// invented attempt count (an SQS receive count stays, approximate). The case escalates
/// for the route evidence it lacks.
#[tokio::test]
async fn an_import_that_says_nothing_of_its_route_is_route_indeterminate() {
    for backend in Backend::all("the indeterminate import test") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("legacy", json!({})).await;
        let blob = json!([{
            "specversion": "1.0", "id": "e-1", "source": "/orders", "type": "order.created",
            "data": {"n": 1}, "publishTime": "2027-01-14T10:00:00Z",
            "lastDeliveryAttemptTime": "2027-01-14T11:00:00Z"
        }]);
        let eg = import(&s, "legacy", "eventgrid", blob.to_string()).await;
        let line = json!({
            "message_id": "j-1", "body": "b", "reason": "Imported",
            "delivery_count": 0, "delivery_count_quality": "incomplete",
            "enqueued_time": "2027-01-15T06:00:00Z",
            "dead_lettered_at": "2027-01-15T07:00:00Z"
        });
        let js = import(&s, "legacy", "json", line.to_string()).await;
        let sqs = json!({"Messages": [{
            "MessageId": "sqs-1", "Body": "hello",
            "Attributes": {"ApproximateReceiveCount": "4", "SentTimestamp": "1799989200000"}
        }]});
        let sq = import(&s, "legacy", "sqs", sqs.to_string()).await;
        work(&s).await;
        for (id, attempts) in [(&eg[0], None), (&js[0], None), (&sq[0], Some(4))] {
            let r = record(&s, "legacy", id).await;
            assert_eq!(r["route"], "route_indeterminate", "{name}: {r}");
            assert!(r.get("route_rule").is_none(), "{name}: {r}");
            assert!(r.get("policy_version").is_none(), "{name}: {r}");
            let c = case(&s, &case_id(id)).await;
            assert_eq!(c["route"], "route_indeterminate", "{name}: {c}");
            assert!(c.get("policy_version").is_none(), "{name}: {c}");
            assert!(c.get("route_rule").is_none(), "{name}: {c}");
            let route = &c["record"]["route"];
            assert!(route.get("rule").is_none(), "{name}: {c}");
            assert!(route.get("policy_version").is_none(), "{name}: {c}");
            assert_eq!(route.get("attempts").and_then(Value::as_u64), attempts);
            assert_eq!(c["next"], "escalate:route_evidence", "{name}: {c}");
            let text = c["timeline"].to_string();
            assert!(!text.contains("delivery_threshold"), "{name}: {text}");
            assert!(!text.contains("policy version 1"), "{name}: {text}");
            assert!(
                !states(&c).contains(&"failure_classified".to_owned()),
                "{name}: {c}"
            );
        }
        let c = case(&s, &case_id(&sq[0])).await;
        assert_eq!(c["evidence_quality"], "approximate", "{name}: {c}");
        assert!(states(&c).contains(&"attempts_approximate".to_owned()));
        s.stop().await;
    }
}

/// Imported route evidence is held to the same bounds as a settlement's: an unknown
/// route or rule, a policy version of 0, a consumer that is not printable is refused
/// naming the record and the field; nothing is imported.
#[tokio::test]
async fn imported_route_evidence_is_bounded() {
    for backend in Backend::all("the imported route bounds test") {
        let name = backend.name();
        let s = server(backend).await;
        s.queue("legacy", json!({})).await;
        let base = json!({
            "message_id": "j-1", "body": "b", "reason": "MaxDeliveryCountExceeded",
            "delivery_count": 2, "delivery_count_quality": "exact",
            "enqueued_time": "2027-01-15T06:00:00Z",
            "dead_lettered_at": "2027-01-15T07:00:00Z"
        });
        for (field, value) in [
            ("route", json!("somebody")),
            ("route_rule", json!("whim")),
            ("routed_by", json!("nobody")),
            ("policy_version", json!(0)),
            ("consumer", json!("a\u{0}b")),
            ("rule_version", json!("x".repeat(257))),
        ] {
            let mut line = base.clone();
            line[field] = value.clone();
            let r = s
                .post(
                    "/v1/queues/legacy/dead-letters/import",
                    json!({"format": "json", "content": line.to_string()}),
                )
                .await;
            assert_problem(&r, 400, "invalid_request");
            assert!(
                r.1["detail"].as_str().unwrap().contains(field),
                "{name}: {value}: {}",
                r.1
            );
        }
        let (_, page) = s.get("/v1/queues/legacy/dead-letters").await;
        assert_eq!(page["dead_letters"], json!([]), "{name}: nothing imported");
        s.stop().await;
    }
}
