//! Recovery cases (seed 001) over the API, on every backend, on the manual clock, with a
//! real HTTP effect authority. The server runs without its case worker: each test drives
//! the worker one look at a time (`Broker::cases_once`), so what a look did is exact. One
//! scenario per row of the seed's failure-shaped test matrix that cases cover (rows 6, 7,
//! 9, 10 and 13's replay half belong to bounded replay).

use std::sync::{Arc, Mutex};

use redrive_broker::Actor;
use redrive_core::register::Idempotency;
use redrive_testkit::recovery::{
    HOUR, Letter, act, case, case_id, dead_letter, dead_letter_case, register, states, to_eligible,
    until_worked, work,
};
use redrive_testkit::{Backend, TestServer, assert_problem, default_settings};
use redrive_testkit::{Receiver, Reply};
use serde_json::{Value, json};

pub(crate) async fn server(backend: Backend) -> TestServer {
    TestServer::builder()
        .backend(backend)
        .settings(redrive_server::Settings {
            replay_worker: false,
            case_worker: false,
            ..default_settings()
        })
        .start()
        .await
}

/// As [`server`], for a test that sweeps itself (`sweep_once`): the background sweep, on
/// its real-time interval, could otherwise hold an expired row (PostgreSQL's SKIP LOCKED)
/// while `sweep_once` passes it by, and the test would look before it was committed.
pub(crate) async fn hand_swept_server(backend: Backend) -> TestServer {
    TestServer::builder()
        .backend(backend)
        .settings(redrive_server::Settings {
            replay_worker: false,
            case_worker: false,
            sweep_interval_ms: 3_600_000,
            ..default_settings()
        })
        .start()
        .await
}

/// An effect authority whose answer the test changes as it goes; it records each
/// question.
pub(crate) struct Authority {
    receiver: Receiver,
    answer: Arc<Mutex<(u16, Value)>>,
}

impl Authority {
    pub(crate) async fn start(effect: &str, evidence: &str) -> Authority {
        let answer = Arc::new(Mutex::new((
            200,
            json!({"effect": effect, "evidence": evidence}),
        )));
        let a = answer.clone();
        let receiver = Receiver::start(move |_, _| {
            let (status, body) = a.lock().unwrap().clone();
            Reply {
                body: body.to_string().into_bytes(),
                ..Reply::status(status).header("content-type", "application/json")
            }
        })
        .await;
        Authority { receiver, answer }
    }

    pub(crate) fn answer(&self, effect: &str, evidence: &str) {
        *self.answer.lock().unwrap() = (200, json!({"effect": effect, "evidence": evidence}));
    }

    pub(crate) fn fail(&self, status: u16) {
        *self.answer.lock().unwrap() = (status, json!({}));
    }

    pub(crate) fn url(&self) -> String {
        self.receiver.url.clone()
    }

    pub(crate) fn questions(&self) -> Vec<Value> {
        self.receiver.requests().iter().map(|r| r.json()).collect()
    }

    pub(crate) async fn register(&self, s: &TestServer, message_type: &str) {
        let (st, v) = s
            .call(
                reqwest::Method::PUT,
                &format!("/v1/effect-authorities/{message_type}"),
                Some(json!({"url": self.receiver.url, "timeout_ms": 2000})),
            )
            .await;
        assert_eq!(st, 200, "{v}");
    }
}

/// The seed's worked example, end to end: a not-idempotent type with an effect
/// authority, dead-lettered by its consumer. The broker verifies the route, reconciles
/// (absent), and waits for a person: diagnosis, one correction, an isolated test on the
/// exact payload, one bounded replay by the owner; the authority then reports the effect
/// and the case completes bound to it.
#[tokio::test]
async fn one_item_is_worked_through_the_gates_to_completion() {
    for backend in Backend::all("the worked example") {
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        s.queue("orders-sandbox", json!({"test_sandbox": true}))
            .await;
        register(&s, "order.placed", Idempotency::NotIdempotent).await;
        let authority = Authority::start("absent", "ledger: no entry for o-1").await;
        authority.register(&s, "order.placed").await;
        let record = dead_letter(
            &s,
            "orders",
            Letter::order("o-1")
                .with(json!({"type": "order.placed", "intent": "i-1"}))
                .reason("DeserializationFailed"),
        )
        .await;
        let id = case_id(&record);
        work(&s).await;
        let c = case(&s, &id).await;
        assert_eq!(c["intent_id"], "i-1");
        assert_eq!(c["route"], "application_quarantined");
        assert_eq!(c["evidence_quality"], "exact");
        assert_eq!(
            states(&c),
            [
                "route_observed",
                "route_verified",
                "failure_classified",
                "effect_absent",
                "retained"
            ],
            "{c}"
        );
        assert_eq!(c["next"], "needs_diagnosis");
        // Metadata only: no payload in the case, the diagnostic context holds nothing the
        // (empty) redaction allowlist does not name.
        assert!(!c.to_string().contains("4111"), "{c}");
        // The authority was asked for this intent.
        let q = authority.questions();
        assert_eq!(q.len(), 1);
        assert_eq!(q[0]["intent_id"], "i-1");
        assert_eq!(q[0]["case_id"], id.as_str());
        // Only the owner works a case.
        let (st, v) = s
            .post(
                &format!("/v1/cases/{id}/diagnosis"),
                json!({"hypothesis": "h", "disconfirming_evidence": "d"}),
            )
            .await;
        assert_problem(&(st, v.clone()), 409, "case_conflict");
        assert_eq!(v["reason"], "not_case_owner");
        act(&s, &id, "claim", json!({"lease_ms": 2 * HOUR})).await;
        let c = act(
            &s,
            &id,
            "diagnosis",
            json!({
                "hypothesis": "the v2 parser rejects the order field",
                "disconfirming_evidence": "the v1 parser handles the same bytes"
            }),
        )
        .await;
        assert_eq!(c["next"], "needs_correction");
        let c = act(
            &s,
            &id,
            "corrections",
            json!({"kind": "code", "identity": "commit abc123", "addresses": "order field parse"}),
        )
        .await;
        assert_eq!(c["next"], "needs_isolated_test");
        // A pass on another fixture is no proof for this payload (row 14).
        let c = act(
            &s,
            &id,
            "tests",
            json!({
                "destination": "orders-sandbox", "fixture": "{\"order\":\"fixture\"}",
                "outcome": "pass", "evidence": "sandbox consumer completed"
            }),
        )
        .await;
        assert_eq!(c["next"], "needs_isolated_test");
        assert!(!states(&c).contains(&"correction_isolated".to_owned()));
        // The exact payload, sent to the sandbox.
        let c = act(
            &s,
            &id,
            "tests",
            json!({
                "destination": "orders-sandbox", "send": true,
                "outcome": "pass", "evidence": "sandbox consumer completed"
            }),
        )
        .await;
        assert!(
            states(&c).contains(&"correction_isolated".to_owned()),
            "{c}"
        );
        assert_eq!(c["next"], "replay_eligible");
        let sandbox = s.receive("orders-sandbox", 1).await;
        assert_eq!(sandbox.len(), 1);
        assert!(sandbox[0]["body"].as_str().unwrap().contains("o-1"));
        // One bounded replay: reconciled again first, then `o-1|1` goes to the queue.
        let c = act(&s, &id, "replay", json!({})).await;
        let st = states(&c);
        assert_eq!(
            &st[st.len() - 3..],
            ["effect_absent", "replay_eligible", "replay_admitted"],
            "{c}"
        );
        assert_eq!(authority.questions().len(), 2);
        let replayed = s.receive("orders", 1).await;
        assert_eq!(replayed[0]["message_id"], "o-1|1");
        // A second replay while one is in flight is refused.
        let (st, v) = s.post(&format!("/v1/cases/{id}/replay"), json!({})).await;
        assert_problem(&(st, v), 409, "case_conflict");
        // The consumer completes; the authority now has the effect.
        authority.answer("present", "ledger entry 981 for i-1");
        s.advance(61_000);
        work(&s).await;
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "completed", "{c}");
        let last = c["timeline"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["fields"]["binding"], "ledger entry 981 for i-1");
        // Every state kept apart on the way.
        let st = states(&c);
        for s in [
            "route_observed",
            "failure_classified",
            "diagnosis_proposed",
            "correction_identified",
            "correction_isolated",
            "replay_eligible",
            "replay_admitted",
            "effect_present",
            "completed",
        ] {
            assert!(st.contains(&s.to_owned()), "{s} in {st:?}");
        }
        // The person's decisions are audited.
        let audit = s.audit("action=case.replay").await;
        let outcomes: Vec<&str> = audit
            .iter()
            .map(|e| e["outcome"].as_str().unwrap())
            .collect();
        assert_eq!(outcomes.len(), 2, "{audit:?}");
        assert!(outcomes.contains(&"ok"));
        assert!(
            outcomes.iter().any(|o| o.starts_with("error:")),
            "{outcomes:?}"
        );
    }
}

/// Imports JSON-Lines records into `queue`; answers the record ids.
pub(crate) async fn import(s: &TestServer, queue: &str, lines: &[Value]) -> Vec<String> {
    let times = json!({"enqueued_time": "2027-01-15T06:00:00Z", "dead_lettered_at": "2027-01-15T07:00:00Z"});
    let content: Vec<String> = lines
        .iter()
        .map(|l| {
            let mut l = l.clone();
            for (k, v) in times.as_object().unwrap() {
                l[k] = v.clone();
            }
            l.to_string()
        })
        .collect();
    let (st, v) = s
        .post(
            &format!("/v1/queues/{queue}/dead-letters/import"),
            json!({"format": "json", "content": content.join("\n")}),
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

/// Row 1: the dead-letter queue was missing when the broker routed the message. The
/// record falls back to the queue's own store and says so; the case's attempt evidence is
/// incomplete, it asks for the configuration to be repaired, and the fallback is counted.
#[tokio::test]
async fn a_missing_dead_letter_queue_makes_the_evidence_incomplete() {
    for backend in Backend::all("the missing target test") {
        let s = server(backend).await;
        s.queue("dlq-x", json!({})).await;
        s.queue(
            "src",
            json!({"max_delivery_count": 1, "dead_letter_queue": "dlq-x"}),
        )
        .await;
        assert_eq!(s.delete("/v1/queues/dlq-x?force=true").await.0, 204);
        s.send("src", &["poison"]).await;
        let got = s.receive("src", 1).await;
        s.settle(
            "src",
            got[0]["lock_token"].as_str().unwrap(),
            "abandon",
            json!({}),
        )
        .await;
        let (_, page) = s.get("/v1/cases?queue=src").await;
        let id = page["cases"][0]["id"].as_str().expect("a case").to_owned();
        assert_eq!(page["cases"][0]["evidence_quality"], "incomplete", "{page}");
        work(&s).await;
        let c = case(&s, &id).await;
        assert_eq!(c["route"], "broker_routed");
        assert_eq!(c["next"], "repair:route_configuration", "{c}");
        assert_eq!(c["record"]["route"]["missing_target"], "dlq-x");
        assert_eq!(c["record"]["route"]["check"], "misconfigured");
        assert!(
            c["timeline"][1]["evidence"]
                .as_str()
                .unwrap()
                .contains("dlq-x"),
            "{c}"
        );
        let metrics = s.metrics().await;
        assert!(
            metrics
                .contains("redrive_dead_letter_fallbacks_total{queue=\"src\",target=\"dlq-x\"} 1"),
            "{metrics}"
        );
        // The configuration is repaired: the route verifies, the evidence stays incomplete.
        s.queue("dlq-x", json!({})).await;
        s.advance(61_000);
        work(&s).await;
        let c = case(&s, &id).await;
        assert!(states(&c).contains(&"route_verified".to_owned()), "{c}");
        assert_eq!(c["evidence_quality"], "incomplete");
        assert_ne!(c["next"], "repair:route_configuration");
    }
}

/// Rows 2 and 16: the effect exists. No replay: the record still in the dead-letter store
/// is archived (state repair) and the case completes bound to the effect.
#[tokio::test]
async fn an_effect_that_exists_completes_the_case_and_repairs_the_record() {
    for backend in Backend::all("the effect present test") {
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        register(&s, "order.placed", Idempotency::NotIdempotent).await;
        let authority = Authority::start("present", "ledger entry 77 for i-2").await;
        authority.register(&s, "order.placed").await;
        let record = dead_letter(
            &s,
            "orders",
            Letter::order("o-2")
                .with(json!({"type": "order.placed", "intent": "i-2"}))
                .reason("AckLost"),
        )
        .await;
        let id = case_id(&record);
        work(&s).await;
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "completed", "{c}");
        let st = states(&c);
        assert!(st.contains(&"effect_present".to_owned()));
        assert!(!st.contains(&"replay_admitted".to_owned()));
        let last = c["timeline"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["fields"]["binding"], "ledger entry 77 for i-2");
        assert_eq!(last["fields"]["repair"], "archive_record");
        let (_, r) = s
            .get(&format!("/v1/queues/orders/dead-letters/{record}"))
            .await;
        assert_eq!(r["area"], "archived", "{r}");
        // Nothing was sent again.
        assert!(s.receive("orders", 1).await.is_empty());
        // The broker's decision is in the audit log, as a person's would be.
        let decided = s.audit("action=case.decide").await;
        assert_eq!(decided.len(), 1, "{decided:?}");
        assert_eq!(decided[0]["actor_name"], "cases");
        assert_eq!(
            decided[0]["targets"],
            json!([id, "state=completed", "repair=archive_record"])
        );
        assert!(
            s.metrics()
                .await
                .contains("redrive_cases_closed_total{queue=\"orders\",state=\"completed\"} 1")
        );
    }
}

/// Decision-table row 3 and matrix row 11's start: the authority cannot say (or cannot be
/// reached). No replay; the case is escalated with the missing authority named.
#[tokio::test]
async fn an_effect_that_cannot_be_established_escalates_with_the_authority_named() {
    for backend in Backend::all("the indeterminate effect test") {
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        register(&s, "order.placed", Idempotency::NotIdempotent).await;
        let authority = Authority::start("indeterminate", "ledger partition offline").await;
        authority.register(&s, "order.placed").await;
        let a = dead_letter(
            &s,
            "orders",
            Letter::order("o-3")
                .with(json!({"type": "order.placed"}))
                .reason("Timeout"),
        )
        .await;
        work(&s).await;
        authority.fail(503);
        let b = dead_letter(
            &s,
            "orders",
            Letter::order("o-4")
                .with(json!({"type": "order.placed"}))
                .reason("Timeout"),
        )
        .await;
        work(&s).await;
        let ca = case(&s, &case_id(&a)).await;
        assert_eq!(ca["state"], "escalated", "{ca}");
        assert_eq!(ca["next"], "escalate:effect_authority");
        let last = ca["timeline"].as_array().unwrap().last().unwrap().clone();
        assert!(
            last["evidence"]
                .as_str()
                .unwrap()
                .contains(&authority.receiver.url),
            "{last}"
        );
        let cb = case(&s, &case_id(&b)).await;
        assert_eq!(cb["state"], "escalated", "{cb}");
        assert!(states(&cb).contains(&"effect_indeterminate".to_owned()));
        assert_eq!(cb["record"]["effect"]["answer"], "unreachable");
        let m = s.metrics().await;
        assert!(
            m.contains(
                "redrive_cases_escalated_total{queue=\"orders\",missing=\"effect_authority\"} 2"
            ),
            "{m}"
        );
        // The unreachable authority is asked again after a while (quietly while it stays
        // unreachable); once it answers, the case goes on from its answer.
        s.advance(60_000);
        work(&s).await;
        assert_eq!(
            authority.questions().len(),
            2,
            "not asked again before the retry time"
        );
        authority.answer("absent", "no ledger entry for o-4");
        s.advance(5 * 60_000);
        work(&s).await;
        assert_eq!(authority.questions().len(), 3);
        let cb = case(&s, &case_id(&b)).await;
        assert_eq!(cb["record"]["effect"]["answer"], "absent", "{cb}");
        assert!(states(&cb).contains(&"effect_absent".to_owned()));
        assert_ne!(cb["next"], "escalate:effect_authority");
        // An escalated case is not replayed.
        act(&s, &case_id(&a), "claim", json!({})).await;
        let (st, v) = s
            .post(&format!("/v1/cases/{}/replay", case_id(&a)), json!({}))
            .await;
        assert_problem(&(st, v.clone()), 409, "case_conflict");
        assert_eq!(v["reason"], "case_not_eligible", "{v}");
        assert!(s.receive("orders", 1).await.is_empty());
    }
}

/// Row 3: the producer cancels the intent while its item waits: the case closes without
/// execution and a later replay is refused. A superseded intent closes the same way,
/// naming its successor.
#[tokio::test]
async fn a_cancelled_or_superseded_intent_closes_without_execution() {
    for backend in Backend::all("the intent test") {
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        register(&s, "order.placed", Idempotency::Idempotent).await;
        let a = dead_letter(
            &s,
            "orders",
            Letter::order("o-5")
                .with(json!({"type": "order.placed", "intent": "i-5"}))
                .reason("Boom"),
        )
        .await;
        let b = dead_letter(
            &s,
            "orders",
            Letter::order("o-6")
                .with(json!({"type": "order.placed", "intent": "i-6"}))
                .reason("Boom"),
        )
        .await;
        work(&s).await;
        let (st, v) = s
            .post(
                "/v1/intents/i-5/cancel",
                json!({"reason": "customer cancelled"}),
            )
            .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["status"], "cancelled");
        assert_eq!(v["closed"], json!([case_id(&a)]));
        let c = case(&s, &case_id(&a)).await;
        assert_eq!(c["state"], "cancelled", "{c}");
        assert!(!states(&c).contains(&"replay_admitted".to_owned()));
        let (st, v) = s
            .post(&format!("/v1/cases/{}/replay", case_id(&a)), json!({}))
            .await;
        assert_problem(&(st, v.clone()), 409, "case_conflict");
        // The first word stands.
        let (st, v) = s
            .post("/v1/intents/i-5/supersede", json!({"by": "i-9"}))
            .await;
        assert_problem(&(st, v.clone()), 409, "case_conflict");
        assert_eq!(v["reason"], "intent_decided");
        let (st, v) = s
            .post("/v1/intents/i-6/supersede", json!({"by": "i-7"}))
            .await;
        assert_eq!(st, 200, "{v}");
        let c = case(&s, &case_id(&b)).await;
        assert_eq!(c["state"], "superseded");
        let last = c["timeline"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["fields"]["superseded_by"], "i-7");
        let (_, i) = s.get("/v1/intents/i-6").await;
        assert_eq!(i["status"], "superseded");
        assert_eq!(i["cases"], json!([case_id(&b)]));
        let (st, v) = s.post("/v1/intents/i-8/supersede", json!({})).await;
        assert_eq!(st, 400, "{v}");
    }
}

/// Row 17: an item that expired is closed `expired` with its deadline as evidence, and
/// no processing failure is invented for it.
#[tokio::test]
async fn an_expired_item_is_closed_expired_not_diagnosed() {
    for backend in Backend::all("the expiry test") {
        let s = hand_swept_server(backend).await;
        s.queue("orders", json!({"dead_letter_on_expiry": true}))
            .await;
        let (st, v) = s
            .post(
                "/v1/queues/orders/messages",
                json!({"message_id": "o-10", "body": "x", "time_to_live_ms": 1000}),
            )
            .await;
        assert_eq!(st, 201, "{v}");
        s.advance(2_000);
        s.broker.sweep_once().await.expect("a sweep");
        let (_, page) = s.get("/v1/cases?queue=orders").await;
        let id = page["cases"][0]["id"].as_str().expect("a case").to_owned();
        work(&s).await;
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "expired", "{c}");
        let st = states(&c);
        assert!(!st.contains(&"failure_classified".to_owned()), "{st:?}");
        let last = c["timeline"].as_array().unwrap().last().unwrap().clone();
        assert!(last["fields"]["deadline"].as_str().is_some(), "{last}");
        assert_eq!(last["fields"]["rule"], "expiry");
        assert_eq!(c["record"]["route"]["rule"], "expiry");
    }
}

/// Rows 8, 18 and 19: imported evidence keeps its quality and its rule. Approximate
/// counts stay approximate; a filter or size routing is routing evidence with no receive
/// history and no failure classified.
#[tokio::test]
async fn imported_evidence_keeps_its_quality_and_routing_rules_stay_routing_evidence() {
    for backend in Backend::all("the imported evidence test") {
        let s = server(backend).await;
        s.queue("legacy", json!({})).await;
        let ids = import(&s, "legacy", &[
            json!({"message_id": "m-1", "body": "a", "reason": "MaxReceiveCountExceeded", "delivery_count": 5, "delivery_count_quality": "approximate"}),
            json!({"message_id": "m-2", "body": "b", "reason": "FilterEvaluationException", "delivery_count": 0, "delivery_count_quality": "exact"}),
            json!({"message_id": "m-3", "body": "c", "reason": "MessageSizeExceeded", "delivery_count": 0, "delivery_count_quality": "exact"}),
        ]).await;
        work(&s).await;
        let approx = case(&s, &case_id(&ids[0])).await;
        assert_eq!(approx["evidence_quality"], "approximate", "{approx}");
        assert!(states(&approx).contains(&"attempts_approximate".to_owned()));
        assert_eq!(approx["record"]["route"]["attempts"], 5);
        for (id, rule) in [(&ids[1], "filter"), (&ids[2], "size")] {
            let c = case(&s, &case_id(id)).await;
            assert_eq!(c["record"]["route"]["rule"], rule, "{c}");
            assert!(
                c["record"]["route"].get("attempts").is_none(),
                "no receive history: {c}"
            );
            assert!(
                !states(&c).contains(&"failure_classified".to_owned()),
                "{c}"
            );
            assert!(!states(&c).contains(&"diagnosis_proposed".to_owned()));
        }
        let (_, counts) = s.get("/v1/cases/counts?queue=legacy").await;
        assert_eq!(counts["total"], 3, "{counts}");
        assert_eq!(counts["by_reason"]["FilterEvaluationException"], 1);
    }
}

/// Row 20: an application's reason stays a classification bound to the consumer: the
/// route is application_quarantined, the reason an observation, no diagnosis until a
/// person proposes one.
#[tokio::test]
async fn an_application_reason_is_an_observation_not_a_diagnosis() {
    for backend in Backend::all("the application reason test") {
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        let record = dead_letter(&s, "orders", Letter::order("o-20").reason("bad-sku")).await;
        work(&s).await;
        let c = case(&s, &case_id(&record)).await;
        assert_eq!(c["route"], "application_quarantined");
        assert_eq!(c["record"]["route"]["rule"], "application");
        let classified = c["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["state"] == "failure_classified")
            .expect("classified")
            .clone();
        assert_eq!(classified["fields"]["reason"], "bad-sku");
        assert!(c["record"].get("diagnoses").is_none());
        // Without a register entry the type may not be repeated: the case waits for a
        // person's diagnosis first, and names what is missing after.
        assert!(
            c["next"] == "needs_diagnosis" || c["next"] == "escalate:repeat_safety",
            "{c}"
        );
    }
}

/// Rows 12 and 15: an unowned case past its review deadline is escalated (metric); its
/// owner then decides under a named policy. A closed case's payload is deleted after its
/// retention, keeping the digest and the timeline; the payload is a separate, audited
/// read for payload readers only.
#[tokio::test]
async fn overdue_cases_escalate_and_closed_payloads_expire() {
    for backend in Backend::all("the review and retention test") {
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        register(&s, "order.placed", Idempotency::Idempotent).await;
        let record = dead_letter(
            &s,
            "orders",
            Letter::order("o-30")
                .with(json!({"type": "order.placed"}))
                .reason("Boom"),
        )
        .await;
        let id = case_id(&record);
        work(&s).await;
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "retained", "{c}");
        assert_eq!(c["overdue"], false);
        // The review deadline (24 h) passes with nobody owning it.
        s.advance(24 * HOUR + 1_000);
        work(&s).await;
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "escalated", "{c}");
        assert_eq!(c["next"], "escalate:owner");
        assert_eq!(c["overdue"], true);
        let (_, over) = s.get("/v1/cases?overdue=true").await;
        assert_eq!(over["cases"].as_array().unwrap().len(), 1);
        assert!(
            s.metrics()
                .await
                .contains("redrive_cases_escalated_total{queue=\"orders\",missing=\"owner\"} 1")
        );
        // Reviewing needs an owner; a claim retains it under the claimant.
        act(&s, &id, "claim", json!({"lease_ms": 4 * HOUR})).await;
        let c = act(
            &s,
            &id,
            "review",
            json!({"decision": "extend", "extend_ms": 2 * HOUR, "policy": "ops-retention-v3"}),
        )
        .await;
        assert_eq!(c["state"], "retained", "{c}");
        assert_eq!(c["overdue"], false);
        s.advance(2 * HOUR + 1_000);
        let c = act(
            &s,
            &id,
            "review",
            json!({"decision": "archive", "policy": "ops-retention-v3"}),
        )
        .await;
        assert_eq!(c["state"], "indeterminate", "{c}");
        let (_, r) = s
            .get(&format!("/v1/queues/orders/dead-letters/{record}"))
            .await;
        assert_eq!(r["area"], "archived");
        // The payload is readable (audited) until the retention (7 days) passes.
        let (st, p) = s.get(&format!("/v1/cases/{id}/payload")).await;
        assert_eq!(st, 200, "{p}");
        assert!(p["body"].as_str().unwrap().contains("o-30"));
        assert_eq!(s.audit("action=case.payload_read").await.len(), 1);
        s.advance(7 * 24 * HOUR + 1_000);
        let pass = s.broker.cases_once().await.unwrap();
        assert_eq!(pass.payloads_deleted, 1);
        let (st, p) = s.get(&format!("/v1/cases/{id}/payload")).await;
        assert_problem(&(st, p.clone()), 409, "case_conflict");
        assert_eq!(p["reason"], "payload_gone");
        let c = case(&s, &id).await;
        assert!(c["payload_deleted_at"].is_string(), "{c}");
        assert_eq!(c["payload_sha256"].as_str().unwrap().len(), 64);
        assert!(states(&c).len() >= 4, "the timeline stays");
    }
}

/// Row 11: the effect evidence is lost while a replay is in flight: the replay halts and
/// the case goes back to diagnosis instead of retrying.
#[tokio::test]
async fn lost_effect_evidence_halts_a_replay_in_flight() {
    for backend in Backend::all("the lost evidence test") {
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        s.queue("sandbox", json!({})).await;
        register(&s, "order.placed", Idempotency::NotIdempotent).await;
        let authority = Authority::start("absent", "no ledger entry").await;
        authority.register(&s, "order.placed").await;
        let record = dead_letter(
            &s,
            "orders",
            Letter::order("o-40")
                .with(json!({"type": "order.placed"}))
                .reason("Boom"),
        )
        .await;
        let id = case_id(&record);
        work(&s).await;
        let c = to_eligible(&s, &id, "sandbox").await;
        assert_eq!(c["next"], "replay_eligible", "{c}");
        act(&s, &id, "replay", json!({})).await;
        authority.fail(500);
        s.advance(61_000);
        work(&s).await;
        let c = case(&s, &id).await;
        let st = states(&c);
        assert!(st.contains(&"replay_stopped".to_owned()), "{st:?}");
        let stop = c["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["state"] == "replay_stopped")
            .unwrap()
            .clone();
        assert_eq!(stop["fields"]["trigger"], "lost_effect_evidence");
        assert_eq!(c["record"]["replays"][0]["status"], "stopped");
        assert_ne!(c["next"], "replay_eligible", "{c}");
    }
}

/// A replay that repeats the failure (dead-lettered again) stops, and the case goes back
/// to diagnosis; the new dead letter is a case of the same intent.
#[tokio::test]
async fn a_replay_that_fails_again_stops_and_returns_to_diagnosis() {
    for backend in Backend::all("the repeated failure test") {
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        s.queue("sandbox", json!({})).await;
        register(&s, "order.placed", Idempotency::Idempotent).await;
        let record = dead_letter(
            &s,
            "orders",
            Letter::order("o-50")
                .with(json!({"type": "order.placed", "intent": "i-50"}))
                .reason("Boom"),
        )
        .await;
        let id = case_id(&record);
        work(&s).await;
        to_eligible(&s, &id, "sandbox").await;
        act(&s, &id, "replay", json!({})).await;
        // The replay fails the same way.
        let again = s.receive("orders", 1).await;
        assert_eq!(again[0]["message_id"], "o-50|1");
        s.settle(
            "orders",
            again[0]["lock_token"].as_str().unwrap(),
            "dead_letter",
            json!({"reason": "Boom"}),
        )
        .await;
        work(&s).await;
        let c = case(&s, &id).await;
        let st = states(&c);
        assert!(st.contains(&"replay_stopped".to_owned()), "{st:?}");
        let stop = c["timeline"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["state"] == "replay_stopped")
            .unwrap()
            .clone();
        assert_eq!(stop["fields"]["trigger"], "repeated_failure");
        assert_eq!(c["next"], "needs_diagnosis", "{c}");
        let (_, group) = s.get("/v1/cases?intent=i-50").await;
        assert_eq!(group["cases"].as_array().unwrap().len(), 2, "{group}");
    }
}

/// One owner at a time: a second claim is refused naming the owner; payloads need
/// payload-reader; a listing never carries a payload.
#[tokio::test]
async fn one_owner_at_a_time_and_payloads_only_for_payload_readers() {
    let s = TestServer::builder()
        .settings(redrive_server::Settings {
            replay_worker: false,
            case_worker: false,
            ..default_settings()
        })
        .auth(redrive_broker::AccessSettings {
            enabled: true,
            ..redrive_broker::AccessSettings::default()
        })
        .start()
        .await;
    s.admin(
        reqwest::Method::POST,
        "/v1/queues",
        Some(json!({"name": "orders"})),
    )
    .await;
    let (_, alice) = s
        .token(
            "alice",
            &["operator:orders", "producer:orders", "consumer:orders"],
        )
        .await;
    let (_, bob) = s
        .token("bob", &["operator:orders", "payload-reader:orders"])
        .await;
    let (_, eve) = s.token("eve", &["operator:billing"]).await;
    let (st, v) = s
        .call_as(
            Some(&alice),
            reqwest::Method::POST,
            "/v1/queues/orders/messages",
            Some(json!({"message_id": "o-60", "body": "secret-body"})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let (_, got) = s
        .call_as(
            Some(&alice),
            reqwest::Method::POST,
            "/v1/queues/orders/receive",
            Some(json!({"max_messages": 1})),
        )
        .await;
    let token = got["messages"][0]["lock_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let (st, v) = s
        .call_as(
            Some(&alice),
            reqwest::Method::POST,
            "/v1/queues/orders/settle",
            Some(json!({"lock_token": token, "action": "dead_letter", "reason": "Boom"})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let id = case_id(v["dead_letter_id"].as_str().unwrap());
    work(&s).await;
    let (st, page) = s
        .call_as(
            Some(&alice),
            reqwest::Method::GET,
            "/v1/cases?queue=orders",
            None,
        )
        .await;
    assert_eq!(st, 200, "{page}");
    assert!(!page.to_string().contains("secret-body"));
    let (st, _) = s
        .call_as(
            Some(&eve),
            reqwest::Method::GET,
            &format!("/v1/cases/{id}"),
            None,
        )
        .await;
    assert_eq!(st, 403);
    let (_, eve_page) = s
        .call_as(Some(&eve), reqwest::Method::GET, "/v1/cases", None)
        .await;
    assert_eq!(eve_page["cases"], json!([]), "{eve_page}");
    let path = format!("/v1/cases/{id}/claim");
    let (st, v) = s
        .call_as(Some(&alice), reqwest::Method::POST, &path, Some(json!({})))
        .await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = s
        .call_as(Some(&bob), reqwest::Method::POST, &path, Some(json!({})))
        .await;
    assert_problem(&(st, v.clone()), 409, "case_conflict");
    assert_eq!(v["reason"], "case_claimed");
    assert!(v["detail"].as_str().unwrap().contains("alice"), "{v}");
    let payload = format!("/v1/cases/{id}/payload");
    let (st, _) = s
        .call_as(Some(&alice), reqwest::Method::GET, &payload, None)
        .await;
    assert_eq!(st, 403);
    let (st, v) = s
        .call_as(Some(&bob), reqwest::Method::GET, &payload, None)
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["body"], "secret-body");
    let reads = s.audit("action=case.payload_read").await;
    assert_eq!(reads.len(), 1);
    assert_eq!(reads[0]["actor_name"], "bob");
}

/// Row 5: a code correction that passes its isolated test does not make an invalid
/// payload valid: a record automatic replay quarantined as schema-invalid is rejected
/// under its policy once the correction is tested, unless an equivalent transformation
/// makes it valid.
#[tokio::test]
async fn a_code_correction_does_not_make_an_invalid_payload_valid() {
    for backend in Backend::all("the schema validity test") {
        let s = server(backend).await;
        s.queue("events", json!({"auto_replay": {"enabled": true}}))
            .await;
        s.queue("sandbox", json!({})).await;
        // Its type may be replayed: what holds it is its payload, nothing else.
        register(&s, "t", Idempotency::Idempotent).await;
        let ids = s
            .broker
            .import_dead_letters(
                "events",
                redrive_events::import::ImportFormat::EventGrid,
                // Event Grid's reason and count say how it was routed (an event with
                // neither is route_indeterminate, and escalated for that first).
                br#"[{"specversion": "1.0", "id": "x", "type": "t",
                      "deadLetterReason": "MaxDeliveryAttemptsExceeded", "deliveryAttempts": 3}]"#,
                &Actor::system("test"),
            )
            .await
            .unwrap();
        // A candidate is not a case until the judgement quarantines it.
        let (st, _) = s.get(&format!("/v1/cases/{}", case_id(&ids[0]))).await;
        assert_eq!(st, 404);
        redrive_testkit::recovery::replay_passes(&s).await;
        let id = case_id(&ids[0]);
        work(&s).await;
        let c = case(&s, &id).await;
        assert_ne!(c["state"], "rejected", "{c}");
        let c = to_eligible(&s, &id, "sandbox").await;
        assert_eq!(c["state"], "rejected", "{c}");
        assert!(!states(&c).contains(&"replay_admitted".to_owned()));
    }
}

/// Row 4: a revoked token's old admission is not authority: the replay is refused.
#[tokio::test]
async fn a_revoked_token_cannot_replay() {
    let s = TestServer::builder()
        .settings(redrive_server::Settings {
            replay_worker: false,
            case_worker: false,
            ..default_settings()
        })
        .auth(redrive_broker::AccessSettings {
            enabled: true,
            ..redrive_broker::AccessSettings::default()
        })
        .start()
        .await;
    s.admin(
        reqwest::Method::POST,
        "/v1/queues",
        Some(json!({"name": "orders"})),
    )
    .await;
    s.admin(
        reqwest::Method::POST,
        "/v1/queues",
        Some(json!({"name": "sandbox"})),
    )
    .await;
    register(&s, "order.placed", Idempotency::Idempotent).await;
    let (tok_id, owner) = s
        .token(
            "ops",
            &["operator:*", "replayer:orders", "payload-reader:orders"],
        )
        .await;
    let (st, v) = s
        .admin(
            reqwest::Method::POST,
            "/v1/queues/orders/messages",
            Some(json!({"message_id": "o-70", "body": "b", "type": "order.placed"})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let (_, got) = s
        .admin(
            reqwest::Method::POST,
            "/v1/queues/orders/receive",
            Some(json!({"max_messages": 1})),
        )
        .await;
    let lock = got["messages"][0]["lock_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, v) = s
        .admin(
            reqwest::Method::POST,
            "/v1/queues/orders/settle",
            Some(json!({"lock_token": lock, "action": "dead_letter", "reason": "Boom"})),
        )
        .await;
    let id = case_id(v["dead_letter_id"].as_str().unwrap());
    work(&s).await;
    let call = |path: String, body: Value| {
        let s = &s;
        let owner = owner.clone();
        async move {
            s.call_as(Some(&owner), reqwest::Method::POST, &path, Some(body))
                .await
        }
    };
    for (action, body) in [
        ("claim", json!({"lease_ms": HOUR})),
        (
            "diagnosis",
            json!({"hypothesis": "h", "disconfirming_evidence": "d"}),
        ),
        (
            "corrections",
            json!({"kind": "code", "identity": "c", "addresses": "a"}),
        ),
        (
            "tests",
            json!({"destination": "sandbox", "outcome": "pass", "evidence": "ok"}),
        ),
    ] {
        let (st, v) = call(format!("/v1/cases/{id}/{action}"), body).await;
        assert_eq!(st, 200, "{action}: {v}");
    }
    let (st, v) = s
        .admin(
            reqwest::Method::POST,
            &format!("/v1/tokens/{tok_id}/revoke"),
            None,
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = call(format!("/v1/cases/{id}/replay"), json!({})).await;
    assert_eq!(st, 401, "{v}");
    let (_, got) = s
        .admin(
            reqwest::Method::POST,
            "/v1/queues/orders/receive",
            Some(json!({"max_messages": 1})),
        )
        .await;
    assert_eq!(got["messages"], json!([]), "nothing was replayed");
}

/// A transformation is a new payload identity kept beside the original; an equivalent one
/// is replayed in its place, a non-equivalent one never (a new intent).
#[tokio::test]
async fn transformations_keep_both_identities_and_only_equivalent_ones_replay() {
    for backend in Backend::all("the transformation test") {
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        s.queue("sandbox", json!({})).await;
        register(&s, "order.placed", Idempotency::Idempotent).await;
        let a = dead_letter_case(
            &s,
            "orders",
            Letter::order("o-80")
                .with(json!({"type": "order.placed"}))
                .reason("Boom"),
        )
        .await;
        let b = dead_letter_case(
            &s,
            "orders",
            Letter::order("o-81")
                .with(json!({"type": "order.placed"}))
                .reason("Boom"),
        )
        .await;
        work(&s).await;
        for id in [&a, &b] {
            act(&s, id, "claim", json!({"lease_ms": HOUR})).await;
            act(
                &s,
                id,
                "diagnosis",
                json!({"hypothesis": "h", "disconfirming_evidence": "d"}),
            )
            .await;
        }
        let t = |equivalent: bool| {
            json!({
                "body": "{\"order\":\"o-8x\",\"sku\":\"A-1\"}", "transformation_version": "sku-fix/2",
                "changed_fields": ["sku"], "authority": "catalog team", "equivalent": equivalent,
                "addresses": "unknown sku"
            })
        };
        let c = act(&s, &a, "transformations", t(true)).await;
        let original = c["payload_sha256"].as_str().unwrap().to_owned();
        let digest = c["record"]["transformations"][0]["digest"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_ne!(original, digest);
        let entry = c["timeline"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(entry["fields"]["original_digest"], original.as_str());
        assert_eq!(entry["fields"]["transformed_digest"], digest.as_str());
        let audit = s.audit("action=case.transform").await;
        assert!(
            audit[0]["targets"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t == &json!(format!("original={original}"))),
            "{audit:?}"
        );
        // The original bytes and the transformed ones are both kept.
        let (_, p) = s.get(&format!("/v1/cases/{a}/payload")).await;
        assert!(p["body"].as_str().unwrap().contains("o-80"));
        let (_, p) = s
            .get(&format!("/v1/cases/{a}/payload?digest={digest}"))
            .await;
        assert!(p["body"].as_str().unwrap().contains("A-1"), "{p}");
        // The test of the transformation on its own bytes is the exact fixture.
        let c = act(
            &s,
            &a,
            "tests",
            json!({"destination": "sandbox", "outcome": "pass", "evidence": "ok"}),
        )
        .await;
        assert_eq!(c["next"], "replay_eligible", "{c}");
        act(&s, &a, "replay", json!({})).await;
        let got = s.receive("orders", 1).await;
        assert_eq!(got[0]["message_id"], "o-80|1");
        assert!(got[0]["body"].as_str().unwrap().contains("A-1"));
        let c = act(&s, &b, "transformations", t(false)).await;
        assert_eq!(c["next"], "new_intent", "{c}");
        let (st, v) = s.post(&format!("/v1/cases/{b}/replay"), json!({})).await;
        assert_problem(&(st, v), 409, "case_conflict");
    }
}

/// The redaction allowlist of the entity governs the diagnostic context (its version
/// recorded), the node's labels are the source identity, the review deadline follows the
/// entity's rule, and an escalation is also posted to the webhook.
#[tokio::test]
async fn entity_rules_govern_context_review_and_escalation() {
    let s = server(Backend::Sqlite).await;
    let hook = Receiver::always(204).await;
    let mut settings = s.broker.case_settings();
    settings.rules.push(redrive_broker::cases::CaseRule {
        entity: "pay*".into(),
        review_ms: Some(HOUR),
        payload_retention_ms: None,
        redact_allow: vec!["body.order".into(), "properties.tenant".into()],
    });
    settings.labels.insert("region".into(), "eu-1".into());
    settings.escalation_webhook = Some(hook.url.clone());
    s.broker.set_case_settings(settings);
    s.queue("payments", json!({})).await;
    register(&s, "payments:*", Idempotency::Idempotent).await;
    let record = dead_letter(
        &s,
        "payments",
        Letter::order("p-1")
            .with(json!({"properties": {"tenant": "t-9", "token": "secret"}}))
            .reason("Boom"),
    )
    .await;
    let id = case_id(&record);
    work(&s).await;
    let c = case(&s, &id).await;
    let ctx = &c["record"]["context"];
    assert_eq!(ctx["fields"]["body.order"], "p-1", "{c}");
    assert_eq!(ctx["fields"]["properties.tenant"], "t-9");
    assert!(
        !c.to_string().contains("4111") && !c.to_string().contains("secret"),
        "{c}"
    );
    assert_eq!(ctx["policy_version"].as_str().unwrap().len(), 12);
    assert_eq!(c["record"]["labels"]["region"], "eu-1");
    assert_eq!(c["review_deadline"], "2027-01-15T09:00:00.000Z", "{c}");
    s.advance(HOUR + 1_000);
    work(&s).await;
    let c = case(&s, &id).await;
    assert_eq!(c["state"], "escalated", "{c}");
    let posted = hook.wait_for(1).await;
    let body = posted[0].json();
    assert_eq!(body["case_id"], id.as_str());
    assert_eq!(body["missing"], "owner");
}

/// Without an effect authority, the owner attests the effect of a replay and closes the
/// case completed (the attestation is the binding); with one, only its answer completes.
#[tokio::test]
async fn an_owner_attests_the_effect_where_no_authority_answers() {
    for backend in Backend::all("the attested completion test") {
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        s.queue("sandbox", json!({})).await;
        register(&s, "order.placed", Idempotency::Idempotent).await;
        let record = dead_letter(
            &s,
            "orders",
            Letter::order("o-90")
                .with(json!({"type": "order.placed"}))
                .reason("Boom"),
        )
        .await;
        let id = case_id(&record);
        work(&s).await;
        to_eligible(&s, &id, "sandbox").await;
        act(&s, &id, "replay", json!({})).await;
        let c = act(
            &s,
            &id,
            "close",
            json!({"state": "completed", "evidence": "order o-90 row 5512 in orders db"}),
        )
        .await;
        assert_eq!(c["state"], "completed", "{c}");
        let st = states(&c);
        assert_eq!(&st[st.len() - 2..], ["effect_present", "completed"]);
        let last = c["timeline"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(
            last["fields"]["binding"],
            "order o-90 row 5512 in orders db"
        );
        assert_eq!(c["record"]["replays"][0]["status"], "completed");
        // With an authority registered, a person cannot close it completed.
        register(&s, "order.paid", Idempotency::NotIdempotent).await;
        let authority = Authority::start("absent", "none").await;
        authority.register(&s, "order.paid").await;
        s.queue("payments", json!({})).await;
        let other = dead_letter_case(
            &s,
            "payments",
            Letter::order("o-91")
                .with(json!({"type": "order.paid"}))
                .reason("Boom"),
        )
        .await;
        work(&s).await;
        act(&s, &other, "claim", json!({})).await;
        let (st, v) = s
            .post(
                &format!("/v1/cases/{other}/close"),
                json!({"state": "completed", "evidence": "trust me"}),
            )
            .await;
        assert_problem(&(st, v), 409, "case_conflict");
        // An authority on an address the network policy refuses is refused at once.
        let (st, v) = s
            .call(
                reqwest::Method::PUT,
                "/v1/effect-authorities/order.x",
                Some(json!({"url": "http://169.254.169.254/latest"})),
            )
            .await;
        assert_problem(&(st, v), 400, "endpoint_forbidden");
        let (st, v) = s.delete("/v1/effect-authorities/order.nothing").await;
        assert_problem(&(st, v), 404, "effect_authority_not_found");
    }
}

/// Row 12: a queue that keeps dead letters forever holds payloads in indefinite
/// retention: its cases are escalated for a retention rule before anything else.
#[tokio::test]
async fn indefinite_retention_is_escalated() {
    for backend in Backend::all("the indefinite retention test") {
        let s = server(backend).await;
        s.queue("vault", json!({"dead_letter_retention_ms": 0}))
            .await;
        register(&s, "vault:*", Idempotency::Idempotent).await;
        let id = dead_letter_case(&s, "vault", Letter::order("v-1").reason("Boom")).await;
        work(&s).await;
        let c = case(&s, &id).await;
        assert_eq!(c["next"], "escalate:retention_rule", "{c}");
        assert_eq!(c["state"], "escalated");
        assert_eq!(c["record"]["repetition"], "idempotency_protected");
    }
}

/// The case worker runs by itself: woken by the opening, it verifies the route and
/// retains the case without a test driving it; a push subscription's quarantined event
/// is a case of the subscription's queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_case_worker_takes_up_an_opened_case_by_itself() {
    let s = TestServer::builder()
        .settings(redrive_server::Settings {
            replay_worker: false,
            ..default_settings()
        })
        .start()
        .await;
    s.queue("orders", json!({})).await;
    let id = dead_letter_case(&s, "orders", Letter::order("o-100").reason("Boom")).await;
    // Each pass of the worker ends parked on the clock: the look after a park is exact.
    let c = until_worked(&s, &format!("/v1/cases/{id}"), |c| {
        c["state"] != "route_observed"
    })
    .await;
    assert!(states(&c).contains(&"route_verified".to_owned()), "{c}");
    let m = s.metrics().await;
    assert!(m.contains("redrive_cases{state="), "{m}");
    assert!(
        m.contains("redrive_case_oldest_unresolved_seconds 0"),
        "{m}"
    );
}

/// Row 17's other half: an intent whose value window (`valid_until`) ends while its case
/// waits is expired at that moment, with the deadline as evidence.
#[tokio::test]
async fn a_value_window_that_ends_while_the_case_waits_expires_it() {
    for backend in Backend::all("the value window test") {
        let s = server(backend).await;
        s.queue("orders", json!({})).await;
        register(&s, "orders:*", Idempotency::Idempotent).await;
        let id = dead_letter_case(
            &s,
            "orders",
            Letter::order("o-110")
                .with(json!({"valid_until": "2027-01-15T10:00:00Z"}))
                .reason("Boom"),
        )
        .await;
        work(&s).await;
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "retained", "{c}");
        s.advance(2 * HOUR + 1_000);
        work(&s).await;
        let c = case(&s, &id).await;
        assert_eq!(c["state"], "expired", "{c}");
        let last = c["timeline"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(last["fields"]["deadline"], "2027-01-15T10:00:00.000Z");
    }
}

/// A mass dead-lettering is worked a batch at a time: a pass advances at most
/// `CASE_BATCH` due cases, the next pass takes the rest, none is due again at once, and
/// each case's decision is recorded, counted and audited exactly once.
#[tokio::test]
async fn a_burst_of_dead_letters_is_worked_a_batch_at_a_time() {
    let batch = u64::from(redrive_broker::cases::CASE_BATCH);
    let n = batch + 30;
    for backend in Backend::all("the case batch test") {
        let s = server(backend).await;
        s.queue("burst", json!({})).await;
        for i in 0..n {
            dead_letter(&s, "burst", Letter::order(&format!("b-{i}"))).await;
        }
        let first = s.broker.cases_once().await.unwrap();
        assert_eq!(first.advanced, batch, "{first:?}");
        let second = s.broker.cases_once().await.unwrap();
        assert_eq!(second.advanced, n - batch, "{second:?}");
        let third = s.broker.cases_once().await.unwrap();
        assert_eq!(third.advanced, 0, "nothing is due again at once: {third:?}");
        let (st, v) = s.get("/v1/cases?state=escalated&limit=1000").await;
        assert_eq!(st, 200, "{v}");
        let escalated = v["cases"].as_array().unwrap();
        assert_eq!(escalated.len() as u64, n, "{v}");
        assert!(
            escalated
                .iter()
                .all(|c| c["next"] == "escalate:repeat_safety"),
            "{v}"
        );
        let metrics = s.metrics().await;
        assert!(
            metrics.contains(&format!(
                "redrive_cases_escalated_total{{queue=\"burst\",missing=\"repeat_safety\"}} {n}"
            )),
            "{metrics}"
        );
        let decided = s.audit("action=case.decide&limit=1000").await;
        assert_eq!(decided.len() as u64, n, "one audit entry per decision");
    }
}
