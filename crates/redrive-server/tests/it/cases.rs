//! Recovery cases (seed 001) over the API, on every backend, on the manual clock, with a
//! real HTTP effect authority. The server runs without its case worker: each test drives
//! the worker one look at a time (`Broker::cases_once`), so what a look did is exact. One
//! scenario per row of the seed's failure-shaped test matrix that cases cover (rows 6, 7,
//! 9, 10 and 13's replay half belong to bounded replay).

use std::sync::{Arc, Mutex};

use redrive_broker::Actor;
use redrive_core::register::{Idempotency, RegisterEntry, RegisterKey};
use redrive_testkit::{Receiver, Reply};
use redrive_testkit::{Backend, TestServer, assert_problem, default_settings};
use serde_json::{Value, json};

const HOUR: u64 = 3_600_000;

async fn server(backend: Backend) -> TestServer {
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

async fn register(s: &TestServer, key: &str, answer: Idempotency) {
    let entry = RegisterEntry::new(key.parse::<RegisterKey>().unwrap(), answer, None).unwrap();
    s.broker
        .set_register_entry(&Actor::system("test"), entry)
        .await
        .unwrap();
}

/// An effect authority whose answer the test changes as it goes; it records each
/// question.
struct Authority {
    receiver: Receiver,
    answer: Arc<Mutex<(u16, Value)>>,
}

impl Authority {
    async fn start(effect: &str, evidence: &str) -> Authority {
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

    fn answer(&self, effect: &str, evidence: &str) {
        *self.answer.lock().unwrap() = (200, json!({"effect": effect, "evidence": evidence}));
    }

    fn fail(&self, status: u16) {
        *self.answer.lock().unwrap() = (status, json!({}));
    }

    fn questions(&self) -> Vec<Value> {
        self.receiver.requests().iter().map(|r| r.json()).collect()
    }

    async fn register(&self, s: &TestServer, message_type: &str) {
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

/// Sends a message with `extra` fields and dead-letters its first delivery with `reason`;
/// answers the record id.
async fn dead_letter(s: &TestServer, queue: &str, id: &str, extra: Value, reason: &str) -> String {
    let mut msg = json!({"message_id": id, "body": format!("{{\"order\":\"{id}\",\"card\":\"4111\"}}")});
    if let Value::Object(m) = extra {
        for (k, v) in m {
            msg[k] = v;
        }
    }
    let (st, v) = s.post(&format!("/v1/queues/{queue}/messages"), msg).await;
    assert_eq!(st, 201, "{v}");
    let got = s.receive(queue, 1).await;
    assert_eq!(got.len(), 1);
    let (st, v) = s
        .settle(
            queue,
            got[0]["lock_token"].as_str().unwrap(),
            "dead_letter",
            json!({"reason": reason, "description": "parse error at $.order"}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    v["dead_letter_id"].as_str().unwrap().to_owned()
}

fn case_id(record: &str) -> String {
    format!("case_{}", record.trim_start_matches("dl_"))
}

async fn case(s: &TestServer, id: &str) -> Value {
    let (st, v) = s.get(&format!("/v1/cases/{id}")).await;
    assert_eq!(st, 200, "{v}");
    v
}

/// Looks until a look advances nothing.
async fn work(s: &TestServer) {
    for _ in 0..10 {
        let pass = s.broker.cases_once().await.expect("a case pass");
        if pass.advanced == 0 {
            return;
        }
    }
}

fn states(c: &Value) -> Vec<String> {
    c["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["state"].as_str().unwrap().to_owned())
        .collect()
}

async fn act(s: &TestServer, id: &str, action: &str, body: Value) -> Value {
    let (st, v) = s.post(&format!("/v1/cases/{id}/{action}"), body).await;
    assert_eq!(st, 200, "{action}: {v}");
    v
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
        s.queue("orders-sandbox", json!({})).await;
        register(&s, "order.placed", Idempotency::NotIdempotent).await;
        let authority = Authority::start("absent", "ledger: no entry for o-1").await;
        authority.register(&s, "order.placed").await;
        let record = dead_letter(&s, "orders", "o-1", json!({"type": "order.placed", "intent": "i-1"}), "DeserializationFailed").await;
        let id = case_id(&record);
        work(&s).await;
        let c = case(&s, &id).await;
        assert_eq!(c["intent_id"], "i-1");
        assert_eq!(c["route"], "application_quarantined");
        assert_eq!(c["evidence_quality"], "exact");
        assert_eq!(
            states(&c),
            ["route_observed", "route_verified", "failure_classified", "effect_absent", "retained"],
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
        let (st, v) = s.post(&format!("/v1/cases/{id}/diagnosis"), json!({"hypothesis": "h", "disconfirming_evidence": "d"})).await;
        assert_problem(&(st, v.clone()), 409, "case_conflict");
        assert_eq!(v["reason"], "not_case_owner");
        act(&s, &id, "claim", json!({"lease_ms": 2 * HOUR})).await;
        let c = act(&s, &id, "diagnosis", json!({
            "hypothesis": "the v2 parser rejects the order field",
            "disconfirming_evidence": "the v1 parser handles the same bytes"
        })).await;
        assert_eq!(c["next"], "needs_correction");
        let c = act(&s, &id, "corrections", json!({"kind": "code", "identity": "commit abc123", "addresses": "order field parse"})).await;
        assert_eq!(c["next"], "needs_isolated_test");
        // A pass on another fixture is no proof for this payload (row 14).
        let c = act(&s, &id, "tests", json!({
            "destination": "orders-sandbox", "fixture": "{\"order\":\"fixture\"}",
            "outcome": "pass", "evidence": "sandbox consumer completed"
        })).await;
        assert_eq!(c["next"], "needs_isolated_test");
        assert!(!states(&c).contains(&"correction_isolated".to_owned()));
        // The exact payload, sent to the sandbox.
        let c = act(&s, &id, "tests", json!({
            "destination": "orders-sandbox", "send": true,
            "outcome": "pass", "evidence": "sandbox consumer completed"
        })).await;
        assert!(states(&c).contains(&"correction_isolated".to_owned()), "{c}");
        assert_eq!(c["next"], "replay_eligible");
        let sandbox = s.receive("orders-sandbox", 1).await;
        assert_eq!(sandbox.len(), 1);
        assert!(sandbox[0]["body"].as_str().unwrap().contains("o-1"));
        // One bounded replay: reconciled again first, then `o-1|1` goes to the queue.
        let c = act(&s, &id, "replay", json!({})).await;
        let st = states(&c);
        assert_eq!(&st[st.len() - 3..], ["effect_absent", "replay_eligible", "replay_admitted"], "{c}");
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
        for s in ["route_observed", "failure_classified", "diagnosis_proposed", "correction_identified", "correction_isolated", "replay_eligible", "replay_admitted", "effect_present", "completed"] {
            assert!(st.contains(&s.to_owned()), "{s} in {st:?}");
        }
        // The person's decisions are audited.
        let audit = s.audit("action=case.replay").await;
        let outcomes: Vec<&str> = audit.iter().map(|e| e["outcome"].as_str().unwrap()).collect();
        assert_eq!(outcomes.len(), 2, "{audit:?}");
        assert!(outcomes.contains(&"ok"));
        assert!(outcomes.iter().any(|o| o.starts_with("error:")), "{outcomes:?}");
    }
}
