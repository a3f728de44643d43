//! Recovery fixtures over a [`TestServer`]: dead letters made the way a consumer makes
//! them, a type's register entry, a case acted on (as a token or anonymously) and worked
//! to replay eligibility, the workers driven one pass at a time, and the views the tests
//! read (a case, a plan, a record). Written once here so that every recovery test starts
//! from the same steps.

use redrive_broker::model::DeadLetterRecord;
use redrive_broker::{Actor, DeadLetterFilter, ReplayPass};
use redrive_core::Area;
use redrive_core::register::{Idempotency, RegisterEntry, RegisterKey};
use reqwest::{Method, StatusCode};
use serde_json::{Map, Value, json};

use crate::{ADMIN, TestServer, default_settings};

/// An hour in milliseconds (leases, windows, deadlines).
pub const HOUR: u64 = 3_600_000;

/// The actor the tests' direct broker calls run as.
pub fn system() -> Actor {
    Actor::system("test")
}

/// A server's settings with its replay, case and plan workers off: the test drives each
/// of them one pass at a time (`replay_once`, `cases_once`, `plans_once`).
pub fn without_workers() -> redrive_server::Settings {
    redrive_server::Settings {
        replay_worker: false,
        case_worker: false,
        plan_worker: false,
        ..default_settings()
    }
}

/// A message to send and dead-letter on its first delivery, and how: its fields, the
/// settle's reason and description, and the token it all goes with.
#[derive(Debug, Clone)]
pub struct Letter {
    message: Map<String, Value>,
    reason: String,
    description: Option<String>,
    token: Option<String>,
}

impl Letter {
    /// Message `id` with the body `body of <id>`, dead-lettered as `HandlerFailed`.
    pub fn new(id: &str) -> Letter {
        Letter::message(json!({"message_id": id, "body": format!("body of {id}")}))
    }

    /// An order: message `id` with the body `{"order":"<id>","card":"4111"}`,
    /// dead-lettered with the description `parse error at $.order`.
    pub fn order(id: &str) -> Letter {
        Letter::message(json!({
            "message_id": id,
            "body": format!("{{\"order\":\"{id}\",\"card\":\"4111\"}}"),
        }))
        .description("parse error at $.order")
    }

    /// A message of exactly these fields (the broker names one without a `message_id`),
    /// dead-lettered as `HandlerFailed`.
    pub fn message(fields: Value) -> Letter {
        let Value::Object(message) = fields else {
            panic!("a message is a JSON object: {fields}");
        };
        Letter {
            message,
            reason: "HandlerFailed".to_owned(),
            description: None,
            token: None,
        }
    }

    /// The fields of `extra` set on the message too (its type, intent, session, ...).
    pub fn with(mut self, extra: Value) -> Letter {
        if let Value::Object(m) = extra {
            self.message.extend(m);
        }
        self
    }

    /// Dead-lettered with this reason.
    pub fn reason(mut self, reason: &str) -> Letter {
        reason.clone_into(&mut self.reason);
        self
    }

    /// Dead-lettered with this description.
    pub fn description(mut self, description: &str) -> Letter {
        self.description = Some(description.to_owned());
        self
    }

    /// Sent, received and settled with this bearer token.
    pub fn token(mut self, token: &str) -> Letter {
        self.token = Some(token.to_owned());
        self
    }

    /// Sent, received and settled with the [`ADMIN`] token.
    pub fn as_admin(self) -> Letter {
        self.token(ADMIN)
    }

    fn settle_body(&self, lock_token: &str) -> Value {
        let mut body =
            json!({"lock_token": lock_token, "action": "dead_letter", "reason": self.reason});
        if let Some(d) = &self.description {
            body["description"] = json!(d);
        }
        body
    }
}

/// Sends `letter`'s message to `queue` and dead-letters its first delivery; answers the
/// record id.
pub async fn dead_letter(s: &TestServer, queue: &str, letter: Letter) -> String {
    let (st, v) = s
        .call_as(
            letter.token.as_deref(),
            Method::POST,
            &format!("/v1/queues/{queue}/messages"),
            Some(Value::Object(letter.message.clone())),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    settle_next(s, queue, &letter).await
}

/// [`dead_letter`], answering the id of the case the record opens.
pub async fn dead_letter_case(s: &TestServer, queue: &str, letter: Letter) -> String {
    case_id(&dead_letter(s, queue, letter).await)
}

/// Dead-letters the next delivery of `queue` as `HandlerFailed`; answers the record id.
pub async fn dead_letter_next(s: &TestServer, queue: &str) -> String {
    settle_next(s, queue, &Letter::message(json!({}))).await
}

async fn settle_next(s: &TestServer, queue: &str, letter: &Letter) -> String {
    let token = letter.token.as_deref();
    let (st, got) = s
        .call_as(
            token,
            Method::POST,
            &format!("/v1/queues/{queue}/receive"),
            Some(json!({"max_messages": 1})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{got}");
    let lock = got["messages"][0]["lock_token"]
        .as_str()
        .unwrap_or_else(|| panic!("a message to dead-letter on {queue}: {got}"));
    let (st, v) = s
        .call_as(
            token,
            Method::POST,
            &format!("/v1/queues/{queue}/settle"),
            Some(letter.settle_body(lock)),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["dead_letter_id"]
        .as_str()
        .expect("a dead-letter id")
        .to_owned()
}

/// The id of the case a dead-letter record opens.
pub fn case_id(record: &str) -> String {
    format!("case_{}", record.trim_start_matches("dl_"))
}

/// Sets the register entry of `key` (a type, or `queue:*`) to `answer`.
pub async fn register(s: &TestServer, key: &str, answer: Idempotency) {
    let entry = RegisterEntry::new(key.parse::<RegisterKey>().unwrap(), answer, None).unwrap();
    s.broker.set_register_entry(&system(), entry).await.unwrap();
}

/// A queue whose dead letters replay, with `extra` fields in its `auto_replay` policy.
pub async fn replaying_queue(s: &TestServer, name: &str, extra: Value) {
    let mut replay = json!({"enabled": true});
    if let Value::Object(m) = extra {
        replay.as_object_mut().expect("an object").extend(m);
    }
    s.queue(name, json!({"auto_replay": replay})).await;
}

/// The case as the API shows it.
pub async fn case(s: &TestServer, id: &str) -> Value {
    let (st, v) = s.get(&format!("/v1/cases/{id}")).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v
}

/// The states of a case's timeline, in order.
pub fn states(c: &Value) -> Vec<String> {
    c["timeline"]
        .as_array()
        .expect("a timeline")
        .iter()
        .map(|e| e["state"].as_str().expect("a state").to_owned())
        .collect()
}

/// Drives the case worker until a look advances nothing (ten looks at most).
pub async fn work(s: &TestServer) {
    for _ in 0..10 {
        let pass = s.broker.cases_once().await.expect("a case pass");
        if pass.advanced == 0 {
            return;
        }
    }
}

/// Acts on a case anonymously (`POST /v1/cases/{id}/{action}`), asserting success;
/// answers the case.
pub async fn act(s: &TestServer, id: &str, action: &str, body: Value) -> Value {
    act_as(s, None, id, action, body).await
}

/// Acts on a case as `token` (anonymously when `None`), asserting success; answers the
/// case.
pub async fn act_as(
    s: &TestServer,
    token: Option<&str>,
    id: &str,
    action: &str,
    body: Value,
) -> Value {
    let (st, v) = s
        .call_as(
            token,
            Method::POST,
            &format!("/v1/cases/{id}/{action}"),
            Some(body),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{action} {id}: {v}");
    v
}

/// The words an owner works a case up with: a claim's lease, a diagnosis, one code
/// correction, an isolated test on the exact payload.
#[derive(Debug, Clone)]
pub struct Workup {
    pub token: Option<String>,
    pub lease_ms: u64,
    pub hypothesis: &'static str,
    pub disconfirming_evidence: &'static str,
    pub addresses: &'static str,
    /// Where the isolated test ran.
    pub destination: String,
    pub evidence: &'static str,
}

impl Workup {
    /// Short words, a four-hour lease, tested on `destination`, anonymously.
    pub fn new(destination: &str) -> Workup {
        Workup {
            token: None,
            lease_ms: 4 * HOUR,
            hypothesis: "h",
            disconfirming_evidence: "d",
            addresses: "shape",
            destination: destination.to_owned(),
            evidence: "ok",
        }
    }

    /// The seed's worked example: the v2 parser and the order field, a day's lease,
    /// tested on `sandbox`.
    pub fn seed() -> Workup {
        Workup {
            lease_ms: 24 * HOUR,
            hypothesis: "the v2 parser rejects the order field",
            disconfirming_evidence: "v1 parses the same bytes",
            addresses: "order field parse",
            evidence: "sandbox consumer completed",
            ..Workup::new("sandbox")
        }
    }

    /// Acted as `token` (anonymously when `None`).
    pub fn token(mut self, token: Option<&str>) -> Workup {
        self.token = token.map(str::to_owned);
        self
    }

    /// Claims the case, diagnoses it and records correction `c1`; answers the case.
    pub async fn to_correction(&self, s: &TestServer, id: &str) -> Value {
        let token = self.token.as_deref();
        act_as(s, token, id, "claim", json!({"lease_ms": self.lease_ms})).await;
        act_as(
            s,
            token,
            id,
            "diagnosis",
            json!({"hypothesis": self.hypothesis,
                   "disconfirming_evidence": self.disconfirming_evidence}),
        )
        .await;
        act_as(
            s,
            token,
            id,
            "corrections",
            json!({"kind": "code", "identity": "c1", "addresses": self.addresses}),
        )
        .await
    }

    /// [`Workup::to_correction`], then a passing isolated test: the case is eligible for
    /// a bounded replay. Answers the case.
    pub async fn to_eligible(&self, s: &TestServer, id: &str) -> Value {
        self.to_correction(s, id).await;
        act_as(
            s,
            self.token.as_deref(),
            id,
            "tests",
            json!({"destination": self.destination, "outcome": "pass",
                   "evidence": self.evidence}),
        )
        .await
    }
}

/// Claims a case and takes it through diagnosis, one correction and an isolated test on
/// its exact payload (to `sandbox`), anonymously: [`Workup::new`]. Answers the case.
pub async fn to_eligible(s: &TestServer, id: &str, sandbox: &str) -> Value {
    Workup::new(sandbox).to_eligible(s, id).await
}

/// A dead-letter record as the broker reads it.
pub async fn record(s: &TestServer, queue: &str, id: &str) -> DeadLetterRecord {
    s.broker
        .get_dead_letter(queue, &id.parse(), &system())
        .await
        .unwrap_or_else(|e| panic!("record {id}: {e}"))
}

/// A queue's dead-letter records in `area` (a thousand at most).
pub async fn records(s: &TestServer, queue: &str, area: Area) -> Vec<DeadLetterRecord> {
    let filter = DeadLetterFilter {
        area: Some(area),
        limit: Some(1_000),
        ..Default::default()
    };
    s.broker
        .list_dead_letters(queue, filter, &system())
        .await
        .unwrap()
        .0
}

/// Replay passes until no candidate is due, the manual clock moved to each slot of the
/// node-wide replay budget a pass waits for (a pass takes one record a slot): what they
/// did together.
pub async fn replay_passes(s: &TestServer) -> ReplayPass {
    let mut all = ReplayPass::default();
    loop {
        let p = s.broker.replay_once().await.expect("a replay pass");
        if let Some(t) = p.next_at {
            let now = s.broker.clock().now();
            s.advance(
                u64::try_from(t.as_millis() - now.as_millis())
                    .unwrap_or(0)
                    .max(1),
            );
            continue;
        }
        let done = p.judged == 0 && p.undecodable.is_empty();
        all.judged += p.judged;
        all.republished += p.republished;
        all.chunks += p.chunks;
        for (c, n) in p.quarantined {
            *all.quarantined.entry(c).or_default() += n;
        }
        all.archived += p.archived;
        all.failed += p.failed;
        all.already_done += p.already_done;
        all.undecodable.extend(p.undecodable);
        if done {
            return all;
        }
    }
}

/// The replay plan as the API shows it.
pub async fn plan(s: &TestServer, id: &str) -> Value {
    view(s, &format!("/v1/replay/plans/{id}")).await
}

/// A JSON view of the native API (`GET path`), asserting success.
pub async fn view(s: &TestServer, path: &str) -> Value {
    let (st, v) = s.get(path).await;
    assert_eq!(st, StatusCode::OK, "{path}: {v}");
    v
}

/// Looks at `GET path` until the view satisfies `ok`, waiting between looks for the next
/// write of a move task this node runs (a heartbeat with its progress, or its end:
/// [`Broker::move_changes`](redrive_broker::Broker::move_changes)). Answers the view.
/// Bounded by [`GUARD`](crate::GUARD) of real time, never a timing rule.
pub async fn until_moved(s: &TestServer, path: &str, ok: impl Fn(&Value) -> bool) -> Value {
    let mut changes = s.broker.move_changes();
    crate::within(&format!("{path} as expected"), async {
        loop {
            // Marked seen before the read: a write after it wakes the wait below.
            changes.borrow_and_update();
            let v = view(s, path).await;
            if ok(&v) {
                return v;
            }
            changes
                .changed()
                .await
                .expect("the broker outlives the test");
        }
    })
    .await
}

/// Looks at `GET path` until the view satisfies `ok`, waiting between looks for the
/// server's background workers to finish a pass: for the next sleep to park on its
/// manual clock ([`TestServer::parked_after`]), as each worker's does once a pass.
/// Answers the view.
pub async fn until_worked(s: &TestServer, path: &str, ok: impl Fn(&Value) -> bool) -> Value {
    loop {
        let seen = s.clock().parks();
        let v = view(s, path).await;
        if ok(&v) {
            return v;
        }
        s.parked_after(seen).await;
    }
}
