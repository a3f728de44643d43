//! The recovery contract's terminal states and decisions (issue 30, items 3 to 7), over the
//! API, on every backend, on the manual clock, the case worker driven one pass at a time
//! (`Broker::cases_once`): a case is not closed while its replay waits in its queue; a
//! transformation that fails the destination's validation is never recorded; every
//! decision the broker takes is recorded within one pass; an overdue case with no owner
//! names its owner and deadline; a value window's end closes the case at once.

use redrive_broker::Actor;
use redrive_core::register::Idempotency;
use redrive_testkit::{Backend, TestServer, assert_problem};
use serde_json::{Value, json};

use redrive_testkit::recovery::{
    HOUR, Letter, act, case, case_id, dead_letter_case, register, states, to_eligible, work,
};

use crate::cases::server;

/// The last timeline entry of a case.
fn last(c: &Value) -> Value {
    c["timeline"].as_array().unwrap().last().unwrap().clone()
}

/// The case as the listing shows it.
async fn listed(s: &TestServer, queue: &str, id: &str) -> Value {
    let (st, v) = s.get(&format!("/v1/cases?queue={queue}")).await;
    assert_eq!(st, 200, "{v}");
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} listed in {v}"))
}

/// Item 3: while a case's replay waits in its queue, no path closes the case without
/// execution. A person's close (rejected, indeterminate) and a review's archive are
/// refused with `replay_in_flight` naming the replay; the producer's cancel is kept but
/// does not close the case, which holds (`hold:replay_in_flight`) once its replay is
/// stopped; when the replay leaves the queue the case closes `cancelled` at the next pass.
#[tokio::test]
async fn a_case_is_not_closed_while_its_replay_waits_in_its_queue() {
    for backend in Backend::all("the replay in flight test") {
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        s.queue("sandbox", json!({"test_sandbox": true})).await;
        register(&s, "orders:*", Idempotency::Idempotent).await;
        let id = dead_letter_case(
            &s,
            "orders",
            Letter::order("o-1")
                .with(json!({"intent": "i-1"}))
                .reason("Boom"),
        )
        .await;
        work(&s).await;
        let c = to_eligible(&s, &id, "sandbox").await;
        assert_eq!(c["next"], "replay_eligible", "{c}");
        let c = act(&s, &id, "replay", json!({})).await;
        assert_eq!(c["state"], "replay_admitted", "{c}");
        for state in ["rejected", "indeterminate"] {
            let (st, v) = s
                .post(
                    &format!("/v1/cases/{id}/close"),
                    json!({"state": state, "evidence": "schema policy v7"}),
                )
                .await;
            assert_problem(&(st, v.clone()), 409, "case_conflict");
            assert_eq!(v["reason"], "replay_in_flight", "{v}");
            assert!(v["detail"].as_str().unwrap().contains("o-1|1"), "{v}");
        }
        let (st, v) = s
            .post(
                &format!("/v1/cases/{id}/review"),
                json!({"decision": "archive", "policy": "ops-7"}),
            )
            .await;
        assert_problem(&(st, v.clone()), 409, "case_conflict");
        assert_eq!(v["reason"], "replay_in_flight", "{v}");
        // The refusals are audited and changed nothing.
        let audit = s.audit("action=case.close").await;
        assert_eq!(audit.len(), 2, "{audit:?}");
        assert!(audit.iter().all(|e| e["outcome"] != "ok"), "{audit:?}");
        assert_eq!(case(&s, &id).await["state"], "replay_admitted");
        // The producer's word is kept; the case is not closed by it.
        let (st, v) = s
            .post("/v1/intents/i-1/cancel", json!({"queue": "orders"}))
            .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["status"], "cancelled", "{v}");
        assert_eq!(case(&s, &id).await["state"], "replay_admitted");
        // The claim runs out: the broker stops the replay; the cancelled intent does not
        // close the case while the replay still waits in the queue.
        s.advance(4 * HOUR + 1_000);
        work(&s).await;
        let c = case(&s, &id).await;
        assert!(states(&c).contains(&"replay_stopped".to_owned()), "{c}");
        assert_eq!(c["state"], "retained", "{c}");
        assert_eq!(c["next"], "hold:replay_in_flight", "{c}");
        assert_eq!(
            listed(&s, "orders", &id).await["next"],
            "hold:replay_in_flight"
        );
        // Nothing of the replay was withdrawn: the consumer takes it and completes it.
        let got = s.receive("orders", 1).await;
        assert_eq!(got[0]["message_id"], "o-1|1");
        let (st, v) = s
            .settle(
                "orders",
                got[0]["lock_token"].as_str().unwrap(),
                "complete",
                json!({}),
            )
            .await;
        assert!(st.is_success(), "{v}");
        s.advance(61_000);
        s.broker.cases_once().await.unwrap();
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "cancelled", "{c}");
    }
}

/// Item 4: a transformation whose bytes fail the validation the broker applies to what
/// goes to the destination is refused at once (400, naming the field and the rule) and
/// nothing is recorded: an Event Grid event whose `eventTime` is "yesterday at noon", a
/// structured CloudEvent whose `time` is. A valid, equivalent transformation keeps both
/// identities and goes on.
#[tokio::test]
async fn a_transformation_failing_the_destination_validation_is_refused() {
    for backend in Backend::all("the transformation validation test") {
        let s = server(backend).await;
        s.queue("events", json!({"auto_replay": {"enabled": true}}))
            .await;
        s.queue("sandbox", json!({})).await;
        register(&s, "t", Idempotency::Idempotent).await;
        // A record of events whose schema is invalid: quarantined by the judgement.
        let ids = s
            .broker
            .import_dead_letters(
                "events",
                redrive_events::import::ImportFormat::EventGrid,
                // Event Grid's reason and count say how it was routed.
                br#"[{"specversion": "1.0", "id": "x", "type": "t",
                      "deadLetterReason": "MaxDeliveryAttemptsExceeded", "deliveryAttempts": 3}]"#,
                &Actor::system("test"),
            )
            .await
            .unwrap();
        s.broker.replay_once().await.unwrap();
        let id = case_id(&ids[0]);
        work(&s).await;
        act(&s, &id, "claim", json!({"lease_ms": HOUR})).await;
        act(
            &s,
            &id,
            "diagnosis",
            json!({"hypothesis": "no source", "disconfirming_evidence": "d"}),
        )
        .await;
        let before = case(&s, &id).await;
        let t = |event: Value| {
            json!({
                "body": json!([event]).to_string(), "transformation_version": "fix/1",
                "changed_fields": ["eventTime"], "authority": "events team",
                "equivalent": true, "addresses": "schema"
            })
        };
        let bad = json!({"id": "x", "eventType": "t", "subject": "s",
            "eventTime": "yesterday at noon", "dataVersion": "1", "data": {}});
        let (st, v) = s
            .post(&format!("/v1/cases/{id}/transformations"), t(bad))
            .await;
        assert_problem(&(st, v.clone()), 400, "invalid_request");
        let detail = v["detail"].as_str().unwrap();
        assert!(detail.contains("body[0].eventTime"), "{v}");
        assert!(detail.contains("RFC 3339"), "{v}");
        let after = case(&s, &id).await;
        assert_eq!(states(&after), states(&before), "nothing recorded");
        assert!(after["record"].get("transformations").is_none(), "{after}");
        assert!(s.audit("action=case.transform").await.is_empty());
        assert_ne!(after["next"], "replay_eligible");
        // A valid one is recorded with both identities and may then be tested.
        let good = json!({"id": "x", "eventType": "t", "subject": "s",
            "eventTime": "2027-01-14T12:00:00Z", "dataVersion": "1", "data": {}});
        let c = act(&s, &id, "transformations", t(good)).await;
        let tr = &c["record"]["transformations"][0];
        assert_eq!(tr["original_digest"], c["payload_sha256"], "{c}");
        assert_ne!(tr["digest"], c["payload_sha256"], "{c}");
        let c = act(
            &s,
            &id,
            "tests",
            json!({"destination": "sandbox", "outcome": "pass", "evidence": "ok"}),
        )
        .await;
        assert_eq!(c["next"], "replay_eligible", "{c}");

        // A structured CloudEvent message: its transformation must stay a CloudEvent.
        s.queue("ce", json!({})).await;
        register(&s, "ce:*", Idempotency::Idempotent).await;
        let event = |time: &str| {
            json!({"specversion": "1.0", "id": "e-1", "source": "/orders", "type": "order.placed",
                "time": time, "data": {"order": "o-9"}})
            .to_string()
        };
        let (st, v) = s
            .post(
                "/v1/queues/ce/messages",
                json!({"message_id": "e-1", "body": event("2027-01-14T12:00:00Z"),
                    "content_type": "application/cloudevents+json"}),
            )
            .await;
        assert_eq!(st, 201, "{v}");
        let got = s.receive("ce", 1).await;
        let (st, v) = s
            .settle(
                "ce",
                got[0]["lock_token"].as_str().unwrap(),
                "dead_letter",
                json!({"reason": "Boom"}),
            )
            .await;
        assert_eq!(st, 200, "{v}");
        let ce = case_id(v["dead_letter_id"].as_str().unwrap());
        work(&s).await;
        act(&s, &ce, "claim", json!({"lease_ms": HOUR})).await;
        let (st, v) = s
            .post(
                &format!("/v1/cases/{ce}/transformations"),
                json!({"body": event("yesterday at noon"), "transformation_version": "t/1",
                    "changed_fields": ["time"], "authority": "orders team", "equivalent": true,
                    "addresses": "time"}),
            )
            .await;
        assert_problem(&(st, v.clone()), 400, "invalid_request");
        assert!(v["detail"].as_str().unwrap().contains("body.time"), "{v}");
        assert!(
            case(&s, &ce).await["record"]
                .get("transformations")
                .is_none()
        );
    }
}

/// Item 5: a decision caused by a change elsewhere is recorded within one pass, though
/// the case's own check time has not come: its dead letter completed by a dead-letter
/// receiver, the case escalates `payload_identity` on the timeline and in the listing.
#[tokio::test]
async fn a_decision_is_recorded_within_one_pass_of_the_case_worker() {
    for backend in Backend::all("the recorded decision test") {
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        register(&s, "orders:*", Idempotency::Idempotent).await;
        let id = dead_letter_case(&s, "orders", Letter::order("o-5").reason("Boom")).await;
        work(&s).await;
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "retained", "{c}");
        assert_eq!(listed(&s, "orders", &id).await["next"], "needs_diagnosis");
        // The record goes by another path: a dead-letter receiver completes it.
        let actor = Actor::system("test");
        let got = s
            .broker
            .receive_dead_letters("orders", 1, None, &actor)
            .await
            .unwrap();
        s.broker
            .settle_dead_letter("orders", &got[0].lock_token.parse(), true, &actor)
            .await
            .unwrap();
        let pass = s.broker.cases_once().await.unwrap();
        assert_eq!(pass.advanced, 0, "the case was not due");
        assert_eq!(pass.swept, 1, "{pass:?}");
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "escalated", "{c}");
        assert_eq!(last(&c)["fields"]["missing"], "payload_identity", "{c}");
        assert_eq!(c["next"], "escalate:payload_identity");
        assert_eq!(
            listed(&s, "orders", &id).await["next"],
            "escalate:payload_identity"
        );
        // Recorded once: a further pass changes nothing.
        let n = states(&c).len();
        let pass = s.broker.cases_once().await.unwrap();
        assert_eq!(pass.swept, 0, "{pass:?}");
        assert_eq!(states(&case(&s, &id).await).len(), n);
    }
}

/// Item 6 (matrix row 15): at the review deadline a case nobody owns is escalated for its
/// owner and the passed deadline, whatever else it already waited on (here repeat safety),
/// and the escalation names that too.
#[tokio::test]
async fn an_overdue_unowned_case_escalates_for_its_owner_and_deadline() {
    for backend in Backend::all("the overdue owner test") {
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        // No register entry: never replayed by the broker.
        let id = dead_letter_case(&s, "orders", Letter::order("o-6").reason("Boom")).await;
        work(&s).await;
        let c = case(&s, &id).await;
        assert_eq!(c["next"], "escalate:repeat_safety", "{c}");
        let deadline = c["review_deadline"].as_str().unwrap().to_owned();
        s.advance(24 * HOUR + 1_000);
        work(&s).await;
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "escalated", "{c}");
        let e = last(&c);
        assert_eq!(e["fields"]["missing"], "owner", "{c}");
        assert_eq!(e["fields"]["also_missing"], "repeat_safety", "{c}");
        assert_eq!(e["fields"]["review_deadline"], deadline.as_str(), "{c}");
        let text = e["evidence"].as_str().unwrap();
        assert!(
            text.contains("no owner") && text.contains(&deadline),
            "{text}"
        );
        assert!(text.contains("repeat_safety"), "{text}");
        assert_eq!(c["next"], "escalate:owner");
        assert_eq!(listed(&s, "orders", &id).await["next"], "escalate:owner");
        let escalations: Vec<Value> = c["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["state"] == "escalated")
            .cloned()
            .collect();
        assert_eq!(escalations.len(), 2, "{c}");
        // The recorded decision is the broker's: the sweep finds nothing to record.
        assert_eq!(s.broker.cases_once().await.unwrap().swept, 0);
    }
}

/// Item 7: a `replay_eligible` case is looked at when its value window ends, and one pass
/// then closes it `expired`; a replay asked for after the window ended is refused and the
/// case closed `expired`, nothing delivered.
#[tokio::test]
async fn a_value_window_closes_an_eligible_case_at_once_and_at_admission() {
    for backend in Backend::all("the eligible expiry test") {
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        s.queue("sandbox", json!({"test_sandbox": true})).await;
        register(&s, "orders:*", Idempotency::Idempotent).await;
        let window = json!({"valid_until": "2027-01-15T09:00:00Z"});
        let a = dead_letter_case(
            &s,
            "orders",
            Letter::order("o-7").with(window.clone()).reason("Boom"),
        )
        .await;
        let b = dead_letter_case(
            &s,
            "orders",
            Letter::order("o-8").with(window).reason("Boom"),
        )
        .await;
        work(&s).await;
        for id in [&a, &b] {
            let c = to_eligible(&s, id, "sandbox").await;
            assert_eq!(c["state"], "replay_eligible", "{c}");
        }
        // 10 s past the window: one pass closes the eligible case.
        s.advance(HOUR + 10_000);
        s.broker.cases_once().await.unwrap();
        let c = case(&s, &a).await;
        assert_eq!(c["state"], "expired", "{c}");
        assert_eq!(last(&c)["fields"]["deadline"], "2027-01-15T09:00:00.000Z");
        // The same pass closed the other; asked for now, its replay is refused.
        let c = case(&s, &b).await;
        assert_eq!(c["state"], "expired", "{c}");
        let (st, v) = s.post(&format!("/v1/cases/{b}/replay"), json!({})).await;
        assert_problem(&(st, v), 409, "case_conflict");
        assert!(s.receive("orders", 10).await.is_empty());
    }
}

/// Item 7 at admission: a case the worker has not looked at since its window ended is
/// closed `expired` by the replay request itself, which is refused.
#[tokio::test]
async fn a_replay_asked_for_after_the_value_window_is_refused_and_closes_expired() {
    for backend in Backend::all("the admission expiry test") {
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        s.queue("sandbox", json!({"test_sandbox": true})).await;
        register(&s, "orders:*", Idempotency::Idempotent).await;
        let id = dead_letter_case(
            &s,
            "orders",
            Letter::order("o-9")
                .with(json!({"valid_until": "2027-01-15T09:00:00Z"}))
                .reason("Boom"),
        )
        .await;
        work(&s).await;
        to_eligible(&s, &id, "sandbox").await;
        s.advance(HOUR + 10_000);
        let (st, v) = s.post(&format!("/v1/cases/{id}/replay"), json!({})).await;
        assert_problem(&(st, v), 409, "case_conflict");
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "expired", "{c}");
        assert!(!states(&c).contains(&"replay_admitted".to_owned()), "{c}");
        assert!(s.receive("orders", 10).await.is_empty());
    }
}
