//! Bounded replay plans (seed 001, "Turn 'replay slowly' into a testable budget") over the
//! API, on every backend, on the manual clock, with a real HTTP effect authority and a
//! real HTTP dependency probe. The server runs without its workers: each test drives the
//! plans one look at a time (`Broker::plans_once`), so what a look admitted is exact. One
//! scenario per row of the seed's failure-shaped test matrix that bounded replay covers
//! (rows 6, 7, 9, 10, 11 and 13), the seed's worked example, a restart mid-plan, and an
//! item whose record cannot be read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use redrive_broker::Actor;
use redrive_core::Clock as _;
use redrive_core::register::{Idempotency, RegisterEntry, RegisterKey};
use redrive_testkit::recovery::{Workup, plan, register, without_workers};
use redrive_testkit::{Backend, Receiver, Reply, TestServer, assert_problem};
use serde_json::{Value, json};

pub(crate) const KIB: u64 = 1024;

pub(crate) async fn server(backend: Backend) -> TestServer {
    TestServer::builder()
        .backend(backend)
        .settings(settings())
        .start()
        .await
}

pub(crate) fn settings() -> redrive_server::Settings {
    without_workers()
}

/// An effect authority: an intent's effect is present once the test's consumer applied
/// it, absent before; it can be made to fail.
#[derive(Clone)]
pub(crate) struct Ledger {
    receiver: Arc<Receiver>,
    applied: Arc<Mutex<BTreeSet<String>>>,
    failing: Arc<Mutex<Option<u16>>>,
}

impl Ledger {
    pub(crate) async fn start() -> Ledger {
        let applied: Arc<Mutex<BTreeSet<String>>> = Arc::default();
        let failing: Arc<Mutex<Option<u16>>> = Arc::default();
        let (a, f) = (applied.clone(), failing.clone());
        let receiver = Receiver::start(move |_, req| {
            if let Some(status) = *f.lock().unwrap() {
                return Reply::status(status);
            }
            let intent = req.json()["intent_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let effect = if a.lock().unwrap().contains(&intent) {
                json!({"effect": "present", "evidence": format!("ledger entry for {intent}")})
            } else {
                json!({"effect": "absent", "evidence": format!("no ledger entry for {intent}")})
            };
            Reply {
                body: effect.to_string().into_bytes(),
                ..Reply::status(200).header("content-type", "application/json")
            }
        })
        .await;
        Ledger {
            receiver: Arc::new(receiver),
            applied,
            failing,
        }
    }

    pub(crate) fn apply(&self, intent: &str) {
        self.applied.lock().unwrap().insert(intent.to_owned());
    }

    pub(crate) fn fail(&self, status: Option<u16>) {
        *self.failing.lock().unwrap() = status;
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

/// The dependency's health probe: answers what the test sets.
pub(crate) struct Probe {
    receiver: Receiver,
    reading: Arc<Mutex<(u16, Value)>>,
}

impl Probe {
    pub(crate) async fn start() -> Probe {
        let reading = Arc::new(Mutex::new((
            200,
            json!({"error_rate": 0.0, "latency_ms": 20}),
        )));
        let r = reading.clone();
        let receiver = Receiver::start(move |_, _| {
            let (status, body) = r.lock().unwrap().clone();
            Reply {
                body: body.to_string().into_bytes(),
                ..Reply::status(status).header("content-type", "application/json")
            }
        })
        .await;
        Probe { receiver, reading }
    }

    pub(crate) fn set(&self, error_rate: f64, latency_ms: u64) {
        *self.reading.lock().unwrap() = (
            200,
            json!({"error_rate": error_rate, "latency_ms": latency_ms}),
        );
    }

    pub(crate) fn fail(&self, status: u16) {
        *self.reading.lock().unwrap() = (status, json!({}));
    }

    pub(crate) fn dependency(&self) -> Value {
        json!({"name": "ledger-db", "probe_url": self.receiver.url, "max_error_rate": 0.05, "max_latency_ms": 250})
    }
}

/// A budget of `items_per_s`, 64 KiB a second, `concurrent` deliveries and a `window`,
/// drawing on `probe`'s dependency.
pub(crate) fn budget(probe: &Probe, items_per_s: f64, concurrent: u32, window: u32) -> Value {
    json!({"items_per_s": items_per_s, "bytes_per_s": 64 * KIB, "max_concurrent": concurrent, "window": window, "dependency": probe.dependency()})
}

/// The seed's budget: one item a second, 64 KiB a second, two concurrent, window ten.
fn seed_budget(probe: &Probe) -> Value {
    budget(probe, 1.0, 2, 10)
}

/// `n` messages of `order.placed` (intent `i-<k>`, body of `size` bytes, in `session` if
/// given) dead-lettered by their consumer, their cases opened and each worked to
/// eligibility by the (anonymous) owner: diagnosis, correction `c1`, an isolated test on
/// the exact payload. Then five quiet minutes pass: the origin is no longer the failing
/// path. Answers the case ids in dead-letter order.
pub(crate) async fn eligible(
    s: &TestServer,
    queue: &str,
    tag: &str,
    n: usize,
    size: usize,
    session: Option<&str>,
) -> Vec<String> {
    let ids = dead_lettered(s, queue, tag, n, size, session).await;
    for id in &ids {
        Workup::seed().token(None).to_eligible(s, id).await;
    }
    s.advance(6 * 60_000);
    ids
}

/// Sends `n` messages of `size` bytes to `queue` (ids `<tag>-<k>`, type `order.placed`,
/// intents `<tag>-i-<k>`, in `session` when given) and dead-letters each as
/// `ParseError`; answers their cases, oldest first, as the case worker left them.
pub(crate) async fn dead_lettered(
    s: &TestServer,
    queue: &str,
    tag: &str,
    n: usize,
    size: usize,
    session: Option<&str>,
) -> Vec<String> {
    let body = "x".repeat(size);
    for k in 0..n {
        let mut msg = json!({"message_id": format!("{tag}-{k}"), "body": body, "type": "order.placed", "intent": format!("{tag}-i-{k}")});
        if let Some(sid) = session {
            msg["session_id"] = json!(sid);
        }
        let (st, v) = s.post(&format!("/v1/queues/{queue}/messages"), msg).await;
        assert_eq!(st, 201, "{v}");
    }
    if let Some(sid) = session {
        let dead = drain_session(
            s,
            queue,
            sid,
            "dead_letter",
            json!({"reason": "ParseError", "description": "parse error at $.order"}),
            None,
        )
        .await;
        assert_eq!(dead.len(), n);
    } else {
        let mut left = n;
        while left > 0 {
            let got = s.receive(queue, 10).await;
            assert!(!got.is_empty(), "{left} messages left to dead-letter");
            for m in got {
                let (st, v) = s
                    .settle(
                        queue,
                        m["lock_token"].as_str().unwrap(),
                        "dead_letter",
                        json!({"reason": "ParseError", "description": "parse error at $.order"}),
                    )
                    .await;
                assert_eq!(st, 200, "{v}");
                left -= 1;
            }
            s.advance(1);
        }
    }
    for _ in 0..(n / 100 + 3) {
        s.broker.cases_once().await.unwrap();
    }
    let (st, page) = s
        .get(&format!("/v1/cases?queue={queue}&open=true&limit=1000"))
        .await;
    assert_eq!(st, 200, "{page}");
    let mut cases: Vec<(String, String)> = page["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            c["message_id"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{tag}-"))
        })
        .map(|c| {
            (
                c["dead_lettered_at"].as_str().unwrap().to_owned(),
                c["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    cases.sort();
    let ids: Vec<String> = cases.into_iter().map(|(_, id)| id).collect();
    assert_eq!(ids.len(), n);
    ids
}

/// Takes the messages of `session` on `queue` one at a time (a session delivers the next
/// only once the one before is settled), settling each with `action` and `extra`; a
/// completed one's effect is applied in `ledger` first. Answers their message ids.
pub(crate) async fn drain_session(
    s: &TestServer,
    queue: &str,
    session: &str,
    action: &str,
    extra: Value,
    ledger: Option<&Ledger>,
) -> Vec<String> {
    let (st, lock) = s
        .post(
            &format!("/v1/queues/{queue}/sessions/accept"),
            json!({"session_id": session}),
        )
        .await;
    if st == 204 {
        return Vec::new();
    }
    assert_eq!(st, 200, "{lock}");
    let token = lock["lock_token"].as_str().unwrap().to_owned();
    let mut seen = Vec::new();
    loop {
        let (st, got) = s
            .post(
                &format!("/v1/queues/{queue}/receive"),
                json!({"session_id": session, "session_lock_token": token, "max_messages": 1}),
            )
            .await;
        assert_eq!(st, 200, "{got}");
        let Some(m) = got["messages"].as_array().unwrap().first().cloned() else {
            break;
        };
        if let Some(l) = ledger {
            l.apply(m["intent"].as_str().unwrap_or_default());
        }
        let (st, v) = s
            .settle(
                queue,
                m["lock_token"].as_str().unwrap(),
                action,
                extra.clone(),
            )
            .await;
        assert_eq!(st, 200, "{v}");
        seen.push(m["message_id"].as_str().unwrap().to_owned());
    }
    let (st, v) = s
        .post(
            &format!("/v1/queues/{queue}/sessions/{session}/release"),
            json!({"lock_token": token}),
        )
        .await;
    assert!(st.is_success(), "{v}");
    seen
}

/// The fixture every scenario starts from: queues `orders` and `sandbox`, the type
/// `order.placed` not idempotent with the ledger as its effect authority.
pub(crate) async fn fixture(s: &TestServer) -> Ledger {
    s.queue("orders", json!({})).await;
    s.queue("sandbox", json!({})).await;
    register(s, "order.placed", Idempotency::NotIdempotent).await;
    let ledger = Ledger::start().await;
    ledger.register(s, "order.placed").await;
    ledger
}

pub(crate) async fn create(s: &TestServer, body: Value) -> Value {
    let (st, v) = s.post("/v1/replay/plans", body).await;
    assert_eq!(st, 201, "{v}");
    v
}

pub(crate) async fn items(s: &TestServer, id: &str) -> Vec<Value> {
    let (st, v) = s
        .get(&format!("/v1/replay/plans/{id}/items?limit=10000"))
        .await;
    assert_eq!(st, 200, "{v}");
    v["items"].as_array().unwrap().clone()
}

pub(crate) async fn act(s: &TestServer, id: &str, action: &str) -> Value {
    let (st, v) = s
        .post(&format!("/v1/replay/plans/{id}/{action}"), json!({}))
        .await;
    assert_eq!(st, 200, "{action}: {v}");
    v
}

/// The consumer: receives the replays on `queue`, applies each one's effect in the
/// ledger (unless `fail`: then it dead-letters it again with the same reason), completes
/// it. Answers the message ids it saw.
pub(crate) async fn consume(
    s: &TestServer,
    queue: &str,
    ledger: &Ledger,
    fail: bool,
) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let got = s.receive(queue, 10).await;
        if got.is_empty() {
            return seen;
        }
        for m in got {
            let id = m["message_id"].as_str().unwrap().to_owned();
            let lock = m["lock_token"].as_str().unwrap();
            if fail {
                s.settle(
                    queue,
                    lock,
                    "dead_letter",
                    json!({"reason": "ParseError", "description": "parse error at $.order"}),
                )
                .await;
            } else {
                let intent = m["intent"].as_str().unwrap_or_default().to_owned();
                ledger.apply(&intent);
                let (st, v) = s.settle(queue, lock, "complete", json!({})).await;
                assert_eq!(st, 200, "{v}");
            }
            seen.push(id);
        }
    }
}

/// One step of the clock: the plans look, the consumer works.
pub(crate) async fn tick(s: &TestServer, ledger: &Ledger, ms: u64) -> Vec<String> {
    s.broker.plans_once().await.expect("a plan pass");
    let seen = consume(s, "orders", ledger, false).await;
    s.advance(ms);
    seen
}

/// When each case's replay was admitted (ms), from its timeline.
pub(crate) async fn admissions(s: &TestServer, cases: &[String]) -> Vec<(i64, String, u64)> {
    let mut out = Vec::new();
    for id in cases {
        let (_, c) = s.get(&format!("/v1/cases/{id}")).await;
        for e in c["timeline"].as_array().unwrap() {
            if e["state"] == "replay_admitted" {
                let at = chrono_ms(e["at"].as_str().unwrap());
                out.push((at, id.clone(), c["payload_size"].as_u64().unwrap_or(0)));
            }
        }
    }
    out.sort();
    out
}

fn chrono_ms(rfc3339: &str) -> i64 {
    redrive_core::Timestamp::parse_rfc3339(rfc3339)
        .expect("an RFC 3339 time")
        .as_millis()
}

/// The seed's worked example, end to end: 240 items of 40 KiB, one item a second, 64 KiB
/// a second, two concurrent deliveries, windows of ten. Every admission is spaced a second
/// apart at least and the bytes never run ahead of 64 KiB/s; never more than two in
/// flight; windows open one after the other; every item completes bound to its effect;
/// the whole takes at least the 240 s lower bound.
#[tokio::test]
async fn the_seeds_worked_example_runs_within_its_budget() {
    for backend in Backend::all("the seed's worked example") {
        let name = backend.name();
        let s = server(backend).await;
        let ledger = fixture(&s).await;
        let probe = Probe::start().await;
        let cases = dead_lettered(&s, "orders", "orders", 240, 40 * 1024, None).await;
        // The 240 cases are worked as one: a group, one claim, one diagnosis, one
        // correction, and one batch of isolated tests (each exact payload sent to the
        // sandbox, each case's outcome its own).
        s.queue("orders-sandbox", json!({"test_sandbox": true}))
            .await;
        let (st, g) = s
            .post(
                "/v1/case-groups",
                json!({"queue": "orders", "reason": "ParseError"}),
            )
            .await;
        assert_eq!(st, 201, "{name}: {g}");
        assert_eq!(g["size"], 240, "{name}");
        let group = g["id"].as_str().unwrap().to_owned();
        let w = Workup::seed();
        for (action, body) in [
            ("claim", json!({"lease_ms": w.lease_ms})),
            (
                "diagnosis",
                json!({"hypothesis": w.hypothesis,
                                  "disconfirming_evidence": w.disconfirming_evidence}),
            ),
            (
                "corrections",
                json!({"kind": "code", "identity": "c1", "addresses": w.addresses}),
            ),
            (
                "tests",
                json!({"destination": "orders-sandbox", "send": true, "outcome": "pass",
                              "evidence": w.evidence}),
            ),
        ] {
            let (st, v) = s
                .post(&format!("/v1/case-groups/{group}/{action}"), body)
                .await;
            assert_eq!(st, 200, "{name}: {action}: {v}");
            assert!(
                v["outcomes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|o| o["ok"] == true),
                "{name}: {action}: every case took it"
            );
        }
        let (_, g) = s.get(&format!("/v1/case-groups/{group}")).await;
        assert_eq!(
            g["by_state"],
            json!({"replay_eligible": 240}),
            "{name}: {}",
            g["by_state"]
        );
        let mut sandbox = 0;
        loop {
            let got = s.receive("orders-sandbox", 100).await;
            if got.is_empty() {
                break;
            }
            sandbox += got.len();
        }
        assert_eq!(sandbox, 240, "{name}: one test message per exact payload");
        s.advance(6 * 60_000);
        let spec = json!({"selection": {"group": group, "reasons": ["ParseError"]}, "budget": seed_budget(&probe)});
        let (st, preview) = s.post("/v1/replay/plans/preview", spec.clone()).await;
        assert_eq!(st, 200, "{name}: {preview}");
        assert_eq!(preview["eligible"], 240, "{name}: {preview}");
        assert_eq!(preview["lower_bound_ms"], 240_000, "{name}");
        let p = create(&s, spec).await;
        let id = p["id"].as_str().unwrap().to_owned();
        assert_eq!(p["status"], "planned", "{name}: {p}");
        assert_eq!(p["progress"]["items"], 240, "{name}: {p}");
        assert_eq!(p["progress"]["eta_ms"], 240_000, "{name}: {p}");
        let started = s.broker.clock().now().as_millis();
        act(&s, &id, "start").await;
        let mut in_flight_max = 0;
        let mut windows = Vec::new();
        for _ in 0..2_000 {
            tick(&s, &ledger, 250).await;
            let p = plan(&s, &id).await;
            in_flight_max = in_flight_max.max(p["progress"]["in_flight"].as_u64().unwrap());
            let w = p["progress"]["window"].as_u64().unwrap();
            if windows.last() != Some(&w) {
                windows.push(w);
            }
            if p["status"] != "running" {
                break;
            }
        }
        let p = plan(&s, &id).await;
        assert_eq!(p["status"], "completed", "{name}: {p}");
        assert_eq!(p["progress"]["completed"], 240, "{name}: {p}");
        assert_eq!(p["progress"]["bytes_admitted"], 240 * 40 * 1024, "{name}");
        assert!(in_flight_max <= 2, "{name}: {in_flight_max} in flight");
        assert_eq!(windows, (1..=24).collect::<Vec<u64>>(), "{name}");
        let admitted = admissions(&s, &cases).await;
        assert_eq!(admitted.len(), 240, "{name}: one replay per item");
        for pair in admitted.windows(2) {
            let gap = pair[1].0 - pair[0].0;
            assert!(gap >= 1_000, "{name}: {gap} ms between admissions");
            // The byte budget: the earlier item's bytes paid for at 64 KiB/s.
            let paid = (pair[0].2 * 1000).div_ceil(64 * KIB) as i64;
            assert!(gap >= paid, "{name}: {gap} ms < {paid} ms for the bytes");
        }
        // Over any window of the clock, at most ⌊T·rate⌋ + 1 items.
        for (i, (t, _, _)) in admitted.iter().enumerate() {
            let within = admitted[i..]
                .iter()
                .take_while(|(u, _, _)| *u < t + 10_000)
                .count();
            assert!(within <= 11, "{name}: {within} admissions in 10 s");
        }
        let last = admitted.last().unwrap().0;
        assert!(
            last - started >= 239_000,
            "{name}: finished before the lower bound"
        );
        // Each case is bound: original → replay `<id>|1` → effect → completed.
        let (_, c) = s.get(&format!("/v1/cases/{}", cases[17])).await;
        assert_eq!(c["state"], "completed", "{name}: {c}");
        let tl = c["timeline"].as_array().unwrap();
        let adm = tl.iter().find(|e| e["state"] == "replay_admitted").unwrap();
        assert_eq!(adm["fields"]["plan_id"], id.as_str(), "{name}");
        assert_eq!(adm["fields"]["message_id"], "orders-17|1", "{name}");
        assert!(
            adm["fields"]["budget"]
                .as_str()
                .unwrap()
                .contains("1 items/s"),
            "{name}: {adm}"
        );
        assert!(
            tl.last().unwrap()["fields"]["binding"]
                .as_str()
                .unwrap()
                .contains("orders-i-17"),
            "{name}"
        );
        // The dependency's baseline was recorded before the first item.
        assert_eq!(p["baseline"]["latency_ms"], 20, "{name}: {p}");
        let metrics = s.metrics().await;
        assert!(
            metrics.contains(
                "redrive_replay_plan_items_total{queue=\"orders\",outcome=\"admitted\"} 240"
            ),
            "{name}"
        );
        assert!(
            metrics.contains(
                "redrive_replay_plans_ended_total{queue=\"orders\",reason=\"completed\"} 1"
            ),
            "{name}"
        );
        s.stop().await;
    }
}

/// Row 9: an unbounded bulk redrive is refused, and nothing is created.
#[tokio::test]
async fn row_9_an_unbounded_plan_is_refused() {
    for backend in Backend::all("row 9") {
        let s = server(backend).await;
        fixture(&s).await;
        let r = s
            .post(
                "/v1/replay/plans",
                json!({"selection": {"queue": "orders"}, "budget": {"items_per_s": 5.0, "max_concurrent": 2}}),
            )
            .await;
        assert_problem(&r, 400, "replay_unbounded");
        assert_eq!(r.1["missing"], json!(["bytes_per_s", "dependency"]));
        let (_, list) = s.get("/v1/replay/plans").await;
        assert_eq!(list["plans"], json!([]));
        s.stop().await;
    }
}

/// Row 6: the parser is repaired but the dependency is not: the capacity gate blocks the
/// replay (nothing admitted, the plan stopped naming the dependency's error rate). Latency
/// over its threshold stops a plan only after two observation windows; a probe that
/// cannot be read stops it as a budget that cannot be observed.
#[tokio::test]
async fn row_6_an_unavailable_dependency_blocks_the_replay() {
    for backend in Backend::all("row 6") {
        let name = backend.name();
        let s = server(backend).await;
        let ledger = fixture(&s).await;
        let probe = Probe::start().await;
        eligible(&s, "orders", "o", 6, 100, None).await;
        let spec = json!({"selection": {"queue": "orders"}, "budget": seed_budget(&probe), "observe_ms": 5000});
        // Error rate over the threshold: stopped before the first item.
        probe.set(0.4, 20);
        let a = create(&s, spec.clone()).await;
        let a = a["id"].as_str().unwrap().to_owned();
        act(&s, &a, "start").await;
        tick(&s, &ledger, 100).await;
        let p = plan(&s, &a).await;
        assert_eq!(p["status"], "stopped", "{name}: {p}");
        assert_eq!(p["stop_reason"], "dependency_error_rate", "{name}");
        assert_eq!(p["progress"]["admitted"], 0, "{name}");
        let (_, flight) = s.get("/v1/cases?queue=orders&state=replay_admitted").await;
        assert_eq!(flight["cases"], json!([]), "{name}");
        // Latency: one slow window is observed, the second stops the plan.
        probe.set(0.0, 20);
        let slow = json!({"selection": {"queue": "orders"}, "budget": budget(&probe, 0.2, 2, 10), "observe_ms": 5000});
        let b = create(&s, slow).await;
        let b = b["id"].as_str().unwrap().to_owned();
        act(&s, &b, "start").await;
        tick(&s, &ledger, 1_000).await;
        assert_eq!(plan(&s, &b).await["progress"]["admitted"], 1, "{name}");
        probe.set(0.0, 900);
        for _ in 0..5 {
            tick(&s, &ledger, 1_000).await;
        }
        let p = plan(&s, &b).await;
        assert_eq!(p["status"], "running", "{name}: one slow window: {p}");
        for _ in 0..5 {
            tick(&s, &ledger, 1_000).await;
        }
        let p = plan(&s, &b).await;
        assert_eq!(p["status"], "stopped", "{name}: {p}");
        assert_eq!(p["stop_reason"], "dependency_latency", "{name}");
        // A probe that answers 503: the budget cannot be observed.
        probe.fail(503);
        let c = create(&s, spec).await;
        let c = c["id"].as_str().unwrap().to_owned();
        act(&s, &c, "start").await;
        tick(&s, &ledger, 100).await;
        let p = plan(&s, &c).await;
        assert_eq!(p["stop_reason"], "budget_unobservable", "{name}: {p}");
        assert!(
            p["stop_detail"].as_str().unwrap().contains("503"),
            "{name}: {p}"
        );
        let audit = s.audit("action=replay.plan_stop").await;
        assert_eq!(audit.len(), 3, "{name}: {audit:?}");
        s.stop().await;
    }
}

/// Row 7: a FIFO item is not replayed without its sequence context. A plan that holds
/// only part of a session's open cases holds them all and names the missing ones; a plan
/// holding the whole session replays it in order, each item only after the one before
/// it completed; a new dead letter of the session meanwhile stops the plan.
#[tokio::test]
async fn row_7_a_session_is_replayed_whole_and_in_order() {
    for backend in Backend::all("row 7") {
        let name = backend.name();
        let s = server(backend).await;
        let ledger = Ledger::start().await;
        s.queue("orders", json!({"requires_session": true})).await;
        s.queue("sandbox", json!({})).await;
        let entry = RegisterEntry::new(
            "order.placed".parse::<RegisterKey>().unwrap(),
            Idempotency::NotIdempotent,
            None,
        )
        .unwrap();
        s.broker
            .set_register_entry(&Actor::system("test"), entry)
            .await
            .unwrap();
        ledger.register(&s, "order.placed").await;
        let probe = Probe::start().await;
        let cases = eligible(&s, "orders", "orders", 3, 100, Some("cart-1")).await;
        let b = budget(&probe, 10.0, 2, 10);
        // Part of the session: held, the missing cases named.
        let part = create(
            &s,
            json!({"selection": {"queue": "orders", "case_ids": [cases[0], cases[1]]}, "budget": b}),
        )
        .await;
        let its = items(&s, part["id"].as_str().unwrap()).await;
        for i in &its {
            assert_eq!(i["state"], "held", "{name}: {i}");
            let d = i["detail"].as_str().unwrap();
            assert!(d.starts_with("ordering_missing"), "{name}: {d}");
            assert!(d.contains(cases[2].as_str()), "{name}: {d}");
        }
        assert_eq!(part["progress"]["held"], 2, "{name}");
        // The whole session: in order, one at a time although two may be in flight.
        let whole = create(&s, json!({"selection": {"queue": "orders"}, "budget": b})).await;
        assert_eq!(
            whole["sessions"]["cart-1"],
            json!(cases),
            "{name}: the plan says which"
        );
        let id = whole["id"].as_str().unwrap().to_owned();
        act(&s, &id, "start").await;
        let mut order = Vec::new();
        for _ in 0..60 {
            s.broker.plans_once().await.unwrap();
            let p = plan(&s, &id).await;
            assert!(
                p["progress"]["in_flight"].as_u64().unwrap() <= 1,
                "{name}: a session goes one at a time: {p}"
            );
            // The session's consumer takes the replays in order.
            order.extend(
                drain_session(&s, "orders", "cart-1", "complete", json!({}), Some(&ledger)).await,
            );
            s.advance(500);
            if p["status"] != "running" {
                break;
            }
        }
        assert_eq!(order, ["orders-0|1", "orders-1|1", "orders-2|1"], "{name}");
        assert_eq!(plan(&s, &id).await["status"], "completed", "{name}");
        // Ordering evidence changes under a running plan: a new dead letter of the
        // session stops it.
        let more = eligible(&s, "orders", "c2", 2, 100, Some("cart-2")).await;
        let p2 = create(
            &s,
            json!({"selection": {"queue": "orders", "case_ids": more}, "budget": b}),
        )
        .await;
        let p2 = p2["id"].as_str().unwrap().to_owned();
        let (st, v) = s
            .post(
                "/v1/queues/orders/messages",
                json!({"message_id": "late", "body": "b", "type": "order.placed", "session_id": "cart-2"}),
            )
            .await;
        assert_eq!(st, 201, "{v}");
        let late = drain_session(
            &s,
            "orders",
            "cart-2",
            "dead_letter",
            json!({"reason": "Other"}),
            None,
        )
        .await;
        assert_eq!(late, ["late"], "{name}");
        s.broker.cases_once().await.unwrap();
        act(&s, &p2, "start").await;
        s.broker.plans_once().await.unwrap();
        let p = plan(&s, &p2).await;
        assert_eq!(p["status"], "stopped", "{name}: {p}");
        assert_eq!(p["stop_reason"], "ordering_changed", "{name}");
        s.stop().await;
    }
}

/// Row 10: a destination that resolves back to the failing path is refused — the origin
/// while it still dead-letters the items' reason; a queue that does not exist — and once
/// the failure has stopped the origin is a valid destination again. A replay that
/// repeats the failure makes the origin the failing path again: the next items are held,
/// and a second replay with the same failure shape stops the plan.
#[tokio::test]
async fn row_10_a_destination_on_the_failing_path_is_refused() {
    for backend in Backend::all("row 10") {
        let name = backend.name();
        let s = server(backend).await;
        let ledger = fixture(&s).await;
        let probe = Probe::start().await;
        let cases = eligible(&s, "orders", "o", 4, 100, None).await;
        let b = budget(&probe, 10.0, 1, 10);
        // A fresh dead letter with the same reason: the origin is failing now.
        let (st, _) = s
            .post(
                "/v1/queues/orders/messages",
                json!({"message_id": "fresh", "body": "b"}),
            )
            .await;
        assert_eq!(st, 201);
        let got = s.receive("orders", 1).await;
        s.settle(
            "orders",
            got[0]["lock_token"].as_str().unwrap(),
            "dead_letter",
            json!({"reason": "ParseError"}),
        )
        .await;
        // It clears when that dead letter is five minutes old: the refusal says when.
        let clears = s.clock().now().plus_millis(300_000).to_rfc3339();
        let spec = json!({"selection": {"queue": "orders", "case_ids": cases}, "budget": b});
        let r = s.post("/v1/replay/plans", spec.clone()).await;
        assert_problem(&r, 409, "plan_conflict");
        assert_eq!(r.1["reason"], "destination_invalid", "{name}");
        assert_eq!(r.1["clears_at"], clears, "{name}: {}", r.1);
        assert!(
            r.1["detail"]
                .as_str()
                .unwrap()
                .ends_with(&format!("it clears at {clears} (in 300 s)")),
            "{name}: {}",
            r.1
        );
        let mut elsewhere = spec.clone();
        elsewhere["destination"] = json!("nowhere");
        let r = s.post("/v1/replay/plans", elsewhere).await;
        assert_problem(&r, 409, "plan_conflict");
        // Five quiet minutes: valid again. Two replays in flight at once fail again in
        // the same shape: the plan stops.
        s.advance(6 * 60_000);
        let two = budget(&probe, 100.0, 2, 10);
        let p = create(
            &s,
            json!({"selection": {"queue": "orders", "case_ids": cases[..2]}, "budget": two}),
        )
        .await;
        let id = p["id"].as_str().unwrap().to_owned();
        act(&s, &id, "start").await;
        s.broker.plans_once().await.unwrap();
        // At 100 items/s the next slot is 10 ms away; a plan that catches up looks again
        // no sooner than LOOK_GAP_MS.
        s.advance(redrive_core::plan::LOOK_GAP_MS as u64);
        s.broker.plans_once().await.unwrap();
        assert_eq!(plan(&s, &id).await["progress"]["in_flight"], 2, "{name}");
        consume(&s, "orders", &ledger, true).await;
        s.broker.cases_once().await.unwrap();
        s.broker.cases_once().await.unwrap();
        s.advance(1_000);
        s.broker.plans_once().await.unwrap();
        let p = plan(&s, &id).await;
        assert_eq!(p["status"], "stopped", "{name}: {p}");
        assert_eq!(p["stop_reason"], "repeated_failure", "{name}: {p}");
        assert!(
            p["stop_detail"]
                .as_str()
                .unwrap()
                .contains("order field parse"),
            "{name}: {p}"
        );
        // The cases whose replays failed are back to diagnosis.
        for i in items(&s, &id).await {
            assert_eq!(i["state"], "stopped", "{name}: {i}");
            assert_eq!(i["detail"], "repeated_failure", "{name}: {i}");
            let (_, c) = s
                .get(&format!("/v1/cases/{}", i["case_id"].as_str().unwrap()))
                .await;
            assert_eq!(c["state"], "replay_stopped", "{name}: {c}");
        }
        // One replay at a time: the first fails again, and the origin is the failing path
        // once more, so the next item is held rather than sent into it.
        s.advance(6 * 60_000);
        let one = budget(&probe, 100.0, 1, 10);
        let p = create(
            &s,
            json!({"selection": {"queue": "orders", "case_ids": cases[2..]}, "budget": one}),
        )
        .await;
        let id = p["id"].as_str().unwrap().to_owned();
        act(&s, &id, "start").await;
        for _ in 0..60 {
            s.broker.plans_once().await.unwrap();
            consume(&s, "orders", &ledger, true).await;
            s.broker.cases_once().await.unwrap();
            s.broker.cases_once().await.unwrap();
            s.advance(100);
            if plan(&s, &id).await["status"] != "running" {
                break;
            }
        }
        // Never completed with an item held: the plan stays running, holding it.
        let p = plan(&s, &id).await;
        assert_eq!(p["status"], "running", "{name}: {p}");
        assert_eq!(p["progress"]["held"], 1, "{name}: {p}");
        let its = items(&s, &id).await;
        assert_eq!(its[0]["state"], "stopped", "{name}: {its:?}");
        assert_eq!(its[1]["state"], "held", "{name}: {its:?}");
        // Held with the time the destination stops being the failing path.
        assert!(
            its[1]["detail"]
                .as_str()
                .unwrap()
                .starts_with("destination_invalid: the destination is the failing path until "),
            "{name}: {its:?}"
        );
        // The plan's decision to hold it is an audit entry.
        let holds = s.audit("action=replay.plan_hold").await;
        assert_eq!(holds.len(), 1, "{name}: {holds:?}");
        assert!(
            holds[0]["targets"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t.as_str().unwrap().starts_with("gate=destination_invalid")),
            "{name}: {holds:?}"
        );
        s.stop().await;
    }
}

/// Row 11: effect evidence lost during the replay halts the plan (indeterminate), and an
/// authority that cannot be reached at admission stops it before anything is sent.
#[tokio::test]
async fn row_11_lost_effect_evidence_halts_the_plan() {
    for backend in Backend::all("row 11") {
        let name = backend.name();
        let s = server(backend).await;
        let ledger = fixture(&s).await;
        let probe = Probe::start().await;
        let cases = eligible(&s, "orders", "o", 4, 100, None).await;
        let b = budget(&probe, 1.0, 2, 10);
        let p = create(
            &s,
            json!({"selection": {"queue": "orders", "case_ids": cases[..2]}, "budget": b}),
        )
        .await;
        let id = p["id"].as_str().unwrap().to_owned();
        act(&s, &id, "start").await;
        s.broker.plans_once().await.unwrap();
        assert_eq!(plan(&s, &id).await["progress"]["admitted"], 1, "{name}");
        // The replay is delivered, then the ledger stops answering.
        let got = s.receive("orders", 10).await;
        assert_eq!(got.len(), 1, "{name}");
        ledger.fail(Some(500));
        s.advance(1_000);
        s.broker.plans_once().await.unwrap();
        let p = plan(&s, &id).await;
        assert_eq!(p["status"], "stopped", "{name}: {p}");
        assert_eq!(p["stop_reason"], "effect_indeterminate", "{name}");
        assert_eq!(p["progress"]["admitted"], 1, "{name}: no second item");
        // At admission: nothing is sent.
        let q = create(
            &s,
            json!({"selection": {"queue": "orders", "case_ids": cases[2..]}, "budget": b}),
        )
        .await;
        let q = q["id"].as_str().unwrap().to_owned();
        act(&s, &q, "start").await;
        s.broker.plans_once().await.unwrap();
        let p = plan(&s, &q).await;
        assert_eq!(p["stop_reason"], "effect_unavailable", "{name}: {p}");
        assert_eq!(p["progress"]["admitted"], 0, "{name}");
        assert!(s.receive("orders", 10).await.is_empty(), "{name}");
        s.stop().await;
    }
}

/// Row 13: two plans over the same items, started together: each item is admitted by
/// exactly one of them (the item lease), and a person cannot replay an item a plan holds.
#[tokio::test]
async fn row_13_two_plans_over_one_item_admit_it_once() {
    for backend in Backend::all("row 13") {
        let name = backend.name();
        let s = server(backend).await;
        let ledger = fixture(&s).await;
        let probe = Probe::start().await;
        let cases = eligible(&s, "orders", "o", 6, 100, None).await;
        let b = budget(&probe, 100.0, 6, 10);
        let spec = json!({"selection": {"queue": "orders"}, "budget": b});
        let a = create(&s, spec.clone()).await["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let b = create(&s, spec).await["id"].as_str().unwrap().to_owned();
        act(&s, &a, "start").await;
        act(&s, &b, "start").await;
        let (ra, rb) = tokio::join!(s.broker.advance_plan(&a), s.broker.advance_plan(&b));
        ra.unwrap();
        rb.unwrap();
        for _ in 0..10 {
            s.broker.plans_once().await.unwrap();
            s.advance(100);
        }
        let sent: Vec<String> = consume(&s, "orders", &ledger, false).await;
        let mut per_case: BTreeMap<String, usize> = BTreeMap::new();
        for m in &sent {
            *per_case
                .entry(m.split('|').next().unwrap().to_owned())
                .or_default() += 1;
        }
        assert_eq!(per_case.len(), 6, "{name}: {sent:?}");
        assert!(per_case.values().all(|n| *n == 1), "{name}: {sent:?}");
        assert!(sent.iter().all(|m| m.ends_with("|1")), "{name}: {sent:?}");
        let admitted_a = plan(&s, &a).await["progress"]["admitted"].as_u64().unwrap();
        let admitted_b = plan(&s, &b).await["progress"]["admitted"].as_u64().unwrap();
        assert_eq!(admitted_a + admitted_b, 6, "{name}");
        // A person's replay of a case a plan holds is refused.
        let (st, v) = s
            .post(&format!("/v1/cases/{}/replay", cases[0]), json!({}))
            .await;
        assert_problem(&(st, v), 409, "case_conflict");
        s.stop().await;
    }
}

/// A case whose dead-letter row this build cannot read (corrupted behind the server's
/// back) holds its item, `record_undecodable` with the reason, and the plan admits the
/// others: one unreadable record never stops a plan's look.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_whose_record_cannot_be_read_is_held_and_the_others_replay() {
    for backend in Backend::all("the unreadable plan item test") {
        let name = backend.name();
        let s = server(backend).await;
        let ledger = fixture(&s).await;
        let probe = Probe::start().await;
        let cases = eligible(&s, "orders", "u", 3, 100, None).await;
        let b = budget(&probe, 100.0, 3, 10);
        let id = create(&s, json!({"selection": {"queue": "orders"}, "budget": b})).await["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let (st, c) = s.get(&format!("/v1/cases/{}", cases[0])).await;
        assert_eq!(st, 200, "{name}: {c}");
        let record = c["record_id"].as_str().unwrap().to_owned();
        s.sql(&format!(
            "UPDATE dead_letters SET count_quality = 'bogus' WHERE id = '{record}'"
        ))
        .await;
        act(&s, &id, "start").await;
        for _ in 0..10 {
            s.broker.plans_once().await.expect("a plan pass");
            s.advance(100);
        }
        let sent = consume(&s, "orders", &ledger, false).await;
        assert_eq!(sent.len(), 2, "{name}: {sent:?}");
        assert!(
            sent.iter().all(|m| !m.starts_with("u-0")),
            "{name}: {sent:?}"
        );
        let held: Vec<Value> = items(&s, &id)
            .await
            .into_iter()
            .filter(|i| i["state"] == "held")
            .collect();
        assert_eq!(held.len(), 1, "{name}: {held:?}");
        assert_eq!(held[0]["case_id"], cases[0].as_str(), "{name}");
        assert!(
            held[0]["detail"]
                .as_str()
                .unwrap()
                .starts_with("record_undecodable: "),
            "{name}: {held:?}"
        );
        s.stop().await;
    }
}

/// A restart mid-plan: the plan resumes from its stored state, keeps its spacing, and
/// admits no item twice. Pause holds admissions (the clock passing changes nothing),
/// resume goes on under the same budget, and cancel ends the plan.
#[tokio::test]
async fn a_plan_resumes_after_a_restart_without_a_duplicate_admission() {
    for backend in Backend::all("plan restart") {
        let name = backend.name();
        let s = server(backend).await;
        let ledger = fixture(&s).await;
        let probe = Probe::start().await;
        let cases = eligible(&s, "orders", "o", 8, 100, None).await;
        let b = budget(&probe, 1.0, 2, 4);
        let id = create(&s, json!({"selection": {"queue": "orders"}, "budget": b})).await["id"]
            .as_str()
            .unwrap()
            .to_owned();
        act(&s, &id, "start").await;
        let mut sent = Vec::new();
        for _ in 0..6 {
            sent.extend(tick(&s, &ledger, 500).await);
        }
        let before = plan(&s, &id).await["progress"]["admitted"]
            .as_u64()
            .unwrap();
        assert!((2..=4).contains(&before), "{name}: {before}");
        // Pause: the clock passes, nothing is admitted.
        act(&s, &id, "pause").await;
        for _ in 0..6 {
            sent.extend(tick(&s, &ledger, 1_000).await);
        }
        let p = plan(&s, &id).await;
        assert_eq!(p["status"], "paused", "{name}");
        assert_eq!(p["progress"]["admitted"], before, "{name}: {p}");
        act(&s, &id, "resume").await;
        sent.extend(tick(&s, &ledger, 500).await);
        // Restart on the same store.
        let s = s.restart().await;
        for _ in 0..40 {
            sent.extend(tick(&s, &ledger, 500).await);
            if plan(&s, &id).await["status"] != "running" {
                break;
            }
        }
        let p = plan(&s, &id).await;
        assert_eq!(p["status"], "completed", "{name}: {p}");
        assert_eq!(p["progress"]["admitted"], 8, "{name}");
        let unique: BTreeSet<&String> = sent.iter().collect();
        assert_eq!(unique.len(), sent.len(), "{name}: {sent:?}");
        assert_eq!(sent.len(), 8, "{name}: {sent:?}");
        assert!(sent.iter().all(|m| m.ends_with("|1")), "{name}: {sent:?}");
        let admitted = admissions(&s, &cases).await;
        for pair in admitted.windows(2) {
            assert!(pair[1].0 - pair[0].0 >= 1_000, "{name}: {admitted:?}");
        }
        // A finished plan cannot be cancelled; a planned one can.
        let (st, v) = s
            .post(&format!("/v1/replay/plans/{id}/cancel"), json!({}))
            .await;
        assert_problem(&(st, v.clone()), 409, "plan_conflict");
        assert_eq!(v["reason"], "plan_state", "{name}");
        s.stop().await;
    }
}

/// A full window opens the next one as soon as its last replay is seen settled: the plan
/// is looked at again when a replay in flight is due to be observed (a quarter of a
/// second after its admission), not a second later; and the budget still holds.
#[tokio::test]
async fn a_full_window_opens_the_next_when_its_last_replay_is_seen_settled() {
    use redrive_core::clock::Clock as _;
    for backend in Backend::all("window turnover") {
        let name = backend.name();
        let s = server(backend).await;
        let ledger = fixture(&s).await;
        let probe = Probe::start().await;
        let cases = eligible(&s, "orders", "w", 4, 100, None).await;
        let id = create(
            &s,
            json!({"selection": {"queue": "orders"}, "budget": budget(&probe, 100.0, 2, 2)}),
        )
        .await["id"]
            .as_str()
            .unwrap()
            .to_owned();
        act(&s, &id, "start").await;
        let mut full_at = None;
        let mut reopened_at = None;
        for _ in 0..100 {
            let pass = s.broker.plans_once().await.expect("a plan pass");
            let now = s.clock().now();
            let p = plan(&s, &id).await;
            let progress = &p["progress"];
            if full_at.is_none() && progress["admitted"] == 2 {
                full_at = Some(now);
                // The first replay is due to be looked at 250 ms after its admission.
                let next = pass.next_at.expect("a running plan is looked at again");
                assert!(
                    next.as_millis() - now.as_millis() <= 250,
                    "{name}: the next look {} ms away",
                    next.as_millis() - now.as_millis()
                );
            }
            if progress["window"] == 2 && progress["admitted"].as_u64().unwrap() > 2 {
                reopened_at = Some(now);
                break;
            }
            consume(&s, "orders", &ledger, false).await;
            let wait = pass
                .next_at
                .map_or(20, |t| (t.as_millis() - now.as_millis()).max(1));
            s.advance(wait as u64);
        }
        let (full, reopened) = (full_at.expect("window 1 filled"), reopened_at);
        let reopened = reopened.unwrap_or_else(|| panic!("{name}: window 2 never opened"));
        let pause = reopened.as_millis() - full.as_millis();
        assert!(
            pause <= 500,
            "{name}: window 2 opened {pause} ms after window 1 filled"
        );
        // The items/s budget holds across the turnover: over any interval of T ms, at most
        // (T + 100 ms) at 100 items/s, plus one (the catch-up bound).
        let admitted = admissions(&s, &cases).await;
        assert!(admitted.len() >= 3, "{name}: {admitted:?}");
        for i in 0..admitted.len() {
            for j in i..admitted.len() {
                let span = admitted[j].0 - admitted[i].0;
                let bound = (span + 100) / 10 + 1;
                assert!((j - i + 1) as i64 <= bound, "{name}: {admitted:?}");
            }
        }
        s.stop().await;
    }
}

/// Row 4 under a plan: the owner's token revoked mid-plan stops it
/// (`authorization_changed`) before another item goes.
#[tokio::test]
async fn a_revoked_owner_stops_the_plan() {
    let s = TestServer::builder()
        .settings(settings())
        .auth(redrive_broker::AccessSettings {
            enabled: true,
            ..redrive_broker::AccessSettings::default()
        })
        .start()
        .await;
    for q in ["orders", "sandbox"] {
        let (st, v) = s
            .admin(
                reqwest::Method::POST,
                "/v1/queues",
                Some(json!({"name": q})),
            )
            .await;
        assert_eq!(st, 201, "{v}");
    }
    register(&s, "order.placed", Idempotency::NotIdempotent).await;
    let ledger = Ledger::start().await;
    let (st, v) = s
        .admin(
            reqwest::Method::PUT,
            "/v1/effect-authorities/order.placed",
            Some(json!({"url": ledger.receiver.url, "timeout_ms": 2000})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let probe = Probe::start().await;
    let (tok_id, owner) = s
        .token(
            "ops",
            &[
                "operator:*",
                "replayer:orders",
                "producer:*",
                "consumer:*",
                "payload-reader:orders",
            ],
        )
        .await;
    let o = Some(owner.as_str());
    for k in 0..3 {
        let (st, v) = s
            .call_as(
                o,
                reqwest::Method::POST,
                "/v1/queues/orders/messages",
                Some(json!({"message_id": format!("o-{k}"), "body": "b", "type": "order.placed"})),
            )
            .await;
        assert_eq!(st, 201, "{v}");
        let (_, got) = s
            .call_as(
                o,
                reqwest::Method::POST,
                "/v1/queues/orders/receive",
                Some(json!({"max_messages": 1})),
            )
            .await;
        let lock = got["messages"][0]["lock_token"]
            .as_str()
            .unwrap()
            .to_owned();
        let (st, v) = s
            .call_as(
                o,
                reqwest::Method::POST,
                "/v1/queues/orders/settle",
                Some(json!({"lock_token": lock, "action": "dead_letter", "reason": "ParseError"})),
            )
            .await;
        assert!(st.is_success(), "{v}");
    }
    s.broker.cases_once().await.unwrap();
    s.broker.cases_once().await.unwrap();
    let (_, page) = s
        .call_as(o, reqwest::Method::GET, "/v1/cases?queue=orders", None)
        .await;
    for c in page["cases"].as_array().unwrap() {
        Workup::seed()
            .token(o)
            .to_eligible(&s, c["id"].as_str().unwrap())
            .await;
    }
    s.advance(6 * 60_000);
    let b = budget(&probe, 1.0, 1, 10);
    let (st, p) = s
        .call_as(
            o,
            reqwest::Method::POST,
            "/v1/replay/plans",
            Some(json!({"selection": {"queue": "orders"}, "budget": b})),
        )
        .await;
    assert_eq!(st, 201, "{p}");
    let id = p["id"].as_str().unwrap().to_owned();
    // Another replayer may not start someone else's plan.
    let (_, other) = s.token("other", &["operator:*", "replayer:orders"]).await;
    let (st, v) = s
        .call_as(
            Some(&other),
            reqwest::Method::POST,
            &format!("/v1/replay/plans/{id}/start"),
            None,
        )
        .await;
    assert_eq!(st, 403, "{v}");
    // Audited as a refusal on the plan's queue, not as a failed start.
    let denied: Vec<_> = s
        .audit("action=denied%3Areplay.plan_start&limit=100")
        .await
        .into_iter()
        .filter(|e| e["actor_name"] == "other")
        .collect();
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert_eq!(denied[0]["entity"], "orders", "{denied:?}");
    assert_eq!(denied[0]["outcome"], "denied", "{denied:?}");
    assert!(
        s.audit("action=replay.plan_start&limit=100")
            .await
            .iter()
            .all(|e| e["actor_name"] != "other")
    );
    let (st, v) = s
        .call_as(
            o,
            reqwest::Method::POST,
            &format!("/v1/replay/plans/{id}/start"),
            None,
        )
        .await;
    assert_eq!(st, 200, "{v}");
    s.broker.plans_once().await.unwrap();
    let (_, got) = s
        .call_as(
            o,
            reqwest::Method::POST,
            "/v1/queues/orders/receive",
            Some(json!({"max_messages": 10})),
        )
        .await;
    assert_eq!(got["messages"].as_array().unwrap().len(), 1);
    ledger.apply("o-0");
    let (st, _) = s
        .admin(
            reqwest::Method::POST,
            &format!("/v1/tokens/{tok_id}/revoke"),
            None,
        )
        .await;
    assert!(st.is_success());
    s.advance(2_000);
    s.broker.plans_once().await.unwrap();
    let (_, p) = s
        .admin(
            reqwest::Method::GET,
            &format!("/v1/replay/plans/{id}"),
            None,
        )
        .await;
    assert_eq!(p["status"], "stopped", "{p}");
    assert_eq!(p["stop_reason"], "authorization_changed", "{p}");
    assert_eq!(p["progress"]["admitted"], 1, "{p}");
    s.stop().await;
}
