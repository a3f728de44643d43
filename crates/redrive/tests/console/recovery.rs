//! The recovery pages in a browser, one story: a dead letter's case worked from claim to
//! `replay_eligible` on the case page (claim, diagnose, correct, an isolated test sent to
//! a sandbox; a review refused with the API's reason); a bounded replay plan of it
//! previewed, created, started and watched until it completes (a consumer takes the
//! replay, the effect authority then answers `present`); a payload revealed on the
//! dead-letter page and its entry found on the audit page, the chain verified; a token
//! created with a grant, revoked on the tokens page, and a sign-in with it refused with
//! the API's reason. Every page is screenshotted and checked for accessible names and
//! console errors.
//!
//! The effect authority and the plan's dependency probe are a small HTTP server of the
//! test's own on loopback, so the server must allow loopback addresses
//! (`REDRIVE_PUSH_ALLOWED_NETWORKS`), and its failing-path window is one second so that
//! a plan may replay to the queue that dead-lettered the item a moment ago: the harness
//! starts the server with those two settings added.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::routing::{get, post};
use reqwest::Method;
use serde_json::{Value, json};

use crate::harness::{self, NARROW, WIDE};

/// How long the server may take to start, or a plan to finish, on a busy machine before
/// the test gives up: a bound on waiting for real processes, not a timing rule.
const BOUND: Duration = Duration::from_secs(90);

/// The message type of the story's dead letter: not idempotent, with an effect authority.
const TYPE: &str = "order.capture";

/// The test's effect authority and dependency probe: the effect is absent until the
/// test's consumer has taken the replay, then present.
#[derive(Clone, Default)]
struct Ledger {
    present: Arc<AtomicBool>,
    asked: Arc<AtomicU32>,
}

async fn effects(State(l): State<Ledger>, Json(q): Json<Value>) -> Json<Value> {
    l.asked.fetch_add(1, Ordering::SeqCst);
    let intent = q["intent_id"].as_str().unwrap_or_default().to_owned();
    if l.present.load(Ordering::SeqCst) {
        Json(
            json!({"effect": "present", "evidence": format!("ledger entry bound to intent {intent}")}),
        )
    } else {
        Json(
            json!({"effect": "absent", "evidence": format!("no ledger entry for intent {intent}")}),
        )
    }
}

async fn health() -> Json<Value> {
    Json(json!({"error_rate": 0.0, "latency_ms": 1}))
}

/// Serves the ledger on a loopback port; returns its address.
async fn serve_ledger(ledger: Ledger) -> SocketAddr {
    let app = axum::Router::new()
        .route("/effects", post(effects))
        .route("/health", get(health))
        .with_state(ledger);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

async fn ok(c: &harness::Console, method: Method, path: &str, body: Option<Value>) -> Value {
    c.ok(method, path, body).await
}

/// Sends `body` to `queue` (of `message_type`, with an intent) and dead-letters it;
/// returns the record's id.
async fn dead_letter(
    c: &harness::Console,
    queue: &str,
    message_type: &str,
    id: &str,
    body: &str,
    reason: &str,
    description: &str,
) -> String {
    ok(
        c,
        Method::POST,
        &format!("/v1/queues/{queue}/messages"),
        Some(
            json!({"body": body, "message_id": id, "type": message_type, "intent": id,
                    "content_type": "application/json"}),
        ),
    )
    .await;
    c.dead_letter_next(queue, reason, description).await
}

/// Whether the page fits a phone's width (nothing scrolls sideways but tables inside
/// their own container).
async fn fits(c: &harness::Console) -> bool {
    c.eval("return document.documentElement.scrollWidth <= window.innerWidth + 1")
        .await
        == Value::Bool(true)
}

/// Scrolls back to the top of the page: a control at the top of a page reached from further
/// down another may sit under the sticky header, where a click would land on the header.
async fn top(c: &harness::Console) {
    c.eval("window.scrollTo(0, 0); return true").await;
}

#[tokio::test]
async fn a_case_is_worked_replayed_under_a_plan_audited_and_a_revoked_token_refused() {
    let env = [
        ("REDRIVE_PUSH_ALLOWED_NETWORKS", "127.0.0.0/8"),
        ("REDRIVE_REPLAY_PLANS_FAILING_PATH_WINDOW", "1s"),
    ];
    let Some(c) = harness::start_with_env("recovery", &env).await else {
        return;
    };
    let ledger = Ledger::default();
    let ledger_addr = serve_ledger(ledger.clone()).await;

    // ---- set-up through the API: the type, its authority, the queues, a dead letter ----
    ok(
        &c,
        Method::PUT,
        &format!("/v1/register/{TYPE}"),
        Some(json!({"answer": "not_idempotent"})),
    )
    .await;
    ok(
        &c,
        Method::PUT,
        &format!("/v1/effect-authorities/{TYPE}"),
        Some(json!({"url": format!("http://{ledger_addr}/effects"), "timeout_ms": 3000})),
    )
    .await;
    for (name, policy) in [
        ("orders", json!({"max_delivery_count": 3})),
        ("orders-sandbox", json!({"test_sandbox": true})),
        ("payments", json!({})),
    ] {
        ok(
            &c,
            Method::POST,
            "/v1/queues",
            Some(json!({"name": name, "policy": policy})),
        )
        .await;
    }
    dead_letter(
        &c,
        "orders",
        TYPE,
        "cap-1",
        r#"{"capture": 1, "amount_minor": 1250}"#,
        "ParseError",
        "unknown field amount_minor in capture 1",
    )
    .await;
    let page = ok(&c, Method::GET, "/v1/cases?queue=orders", None).await;
    let case = page["cases"][0]["id"].as_str().unwrap().to_owned();
    // The case worker asks the ledger when the case opens; once it has, the case waits
    // for a person's diagnosis.
    let started = Instant::now();
    loop {
        let shown = ok(&c, Method::GET, &format!("/v1/cases/{case}"), None).await;
        if shown["next"] == "needs_diagnosis" {
            break;
        }
        assert!(
            started.elapsed() < BOUND,
            "the case never came to wait for a diagnosis: {shown}\n{}",
            c.server_log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    c.sign_in().await;

    // ---- the cases list, filtered by queue ----
    c.goto("cases").await;
    c.wait_for_text("Recovery cases").await;
    c.fill("Queue", "orders").await;
    c.click_button("Apply filters").await;
    c.wait_for_text(&case).await;
    c.wait_for_text("1 case match").await;
    c.wait_for_text("Case groups").await;
    c.check_page("cases").await;

    // ---- one case, worked to replay_eligible ----
    c.click_link(&case).await;
    c.wait_for_text(&format!("Case {case}")).await;
    c.wait_for_text("unknown field amount_minor in capture 1")
        .await;
    c.wait_for_text("Timeline").await;
    c.wait_for_text("next: needs_diagnosis").await;
    c.check_page("case").await;

    // The exact bytes only on request: an audited read.
    c.assert_no_text("\"amount_minor\": 1250").await;
    c.click_button("Reveal case payload").await;
    c.wait_for_text("\"amount_minor\": 1250").await;
    c.wait_for_text("this read is recorded in the audit log")
        .await;

    c.click_button("Claim").await;
    c.wait_for_text("Claim: done.").await;

    c.fill(
        "Hypothesis",
        "producer schema 4 sends amount_minor; the consumer reads schema 3 only",
    )
    .await;
    c.fill(
        "Disconfirming evidence",
        "a schema-3 capture fails the same way",
    )
    .await;
    c.click_button("Record diagnosis").await;
    c.wait_for_text("Diagnose: done.").await;
    c.wait_for_text("next needs_correction").await;

    c.fill(
        "Correction identity (commit, config version, ticket)",
        "orders-consumer@4f2c1e9",
    )
    .await;
    c.fill(
        "Failure shape it addresses",
        "ParseError on schema-4 amount_minor",
    )
    .await;
    c.click_button("Record correction").await;
    c.wait_for_text("Correct: done.").await;
    c.wait_for_text("next needs_isolated_test").await;

    c.fill("Sandbox queue", "orders-sandbox").await;
    let checked = c
        .eval("const b = document.querySelector('input[type=checkbox][name=send]'); b.click(); return b.checked")
        .await;
    assert_eq!(checked, Value::Bool(true));
    c.fill(
        "Test evidence",
        "consumer 2.4.0 against orders-sandbox parsed the capture",
    )
    .await;
    c.click_button("Record test").await;
    c.wait_for_text("Isolated test: done. State replay_eligible")
        .await;
    c.wait_for_text("correction_isolated").await;
    let shown = ok(&c, Method::GET, &format!("/v1/cases/{case}"), None).await;
    assert_eq!(shown["state"], "replay_eligible", "{shown}");
    let sandbox = ok(&c, Method::GET, "/v1/queues/orders-sandbox", None).await;
    assert_eq!(
        sandbox["counts"]["active"], 1,
        "the test sent nothing to the sandbox: {sandbox}"
    );
    c.check_page("case-eligible").await;

    // A decision the case's state refuses is shown with the API's reason.
    c.choose("Review decision", "extend").await;
    c.fill("Review policy", "keep while the fix deploys").await;
    c.fill("Extend by (hours; extend only)", "2").await;
    c.click_button("Record review").await;
    c.wait_for_text("Review: refused.").await;
    c.wait_for_text("case_not_due").await;
    c.drain_console_errors(&["/review", "409"]).await;
    c.check_page("case-refused").await;

    // A phone: the case page does not scroll sideways.
    c.window(NARROW).await;
    c.wait_for_text("Decisions").await;
    assert!(fits(&c).await, "the case page scrolls sideways on a phone");
    c.screenshot("case-narrow").await;
    c.window(WIDE).await;
    top(&c).await;

    // ---- a bounded replay plan: preview, create, start, watch it complete ----
    c.click_link("Plan a bounded replay of this case").await;
    c.wait_for_text("New plan").await;
    let seeded = c
        .eval("return [document.querySelector('.rc-plan-form input[name=queue]').value, document.querySelector('.rc-plan-form input[name=case_ids]').value]")
        .await;
    assert_eq!(
        seeded,
        json!(["orders", case]),
        "the selection was not seeded from the address"
    );
    c.fill("Items per second", "5").await;
    c.fill("Dependency name", "ledger").await;
    c.fill(
        "Dependency probe URL",
        &format!("http://{ledger_addr}/health"),
    )
    .await;
    c.click_button("Preview (dry run)").await;
    c.wait_for_text("Dry run").await;
    c.wait_for_text("1 item, ").await;
    c.wait_for_text("1 eligible now").await;
    c.wait_for_text("at least 200 ms under this budget").await;
    c.wait_for_text("No gate blocks any item.").await;
    c.wait_for_text("nothing: eligible").await;
    c.check_page("plan-preview").await;

    c.click_button("Create plan").await;
    c.wait_for_text("Replay plan plan_").await;
    c.wait_for_text("Status planned").await;
    c.check_page("plan-planned").await;
    let plan = c
        .eval("return location.hash.split('/').pop()")
        .await
        .as_str()
        .unwrap()
        .to_owned();
    top(&c).await;
    c.click_button("Start plan").await;
    c.wait_for_text("Start plan: done").await;

    // The consumer of `orders` takes the replay; then the ledger has the effect.
    let started = Instant::now();
    loop {
        let (st, v) = c
            .api(
                Method::POST,
                "/v1/queues/orders/receive",
                Some(json!({"max_messages": 1, "wait_ms": 1000})),
            )
            .await;
        assert_eq!(st, 200, "{v}");
        if let Some(m) = v["messages"].as_array().and_then(|a| a.first()) {
            assert_eq!(m["message_id"], "cap-1|1", "{m}");
            let lock = m["lock_token"].as_str().unwrap();
            ok(
                &c,
                Method::POST,
                "/v1/queues/orders/settle",
                Some(json!({"lock_token": lock, "action": "complete"})),
            )
            .await;
            ledger.present.store(true, Ordering::SeqCst);
            break;
        }
        assert!(
            started.elapsed() < BOUND,
            "the plan never replayed the case: {}\n{}",
            ok(&c, Method::GET, &format!("/v1/replay/plans/{plan}"), None).await,
            c.server_log()
        );
    }
    let started = Instant::now();
    loop {
        let p = ok(&c, Method::GET, &format!("/v1/replay/plans/{plan}"), None).await;
        if p["status"] == "completed" {
            break;
        }
        assert!(
            started.elapsed() < BOUND && p["status"] == "running",
            "the plan did not complete: {p}\n{}",
            c.server_log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The page polls every 5 s: it shows the end without a reload.
    c.wait_for_text("The plan completed.").await;
    c.wait_for_text("1 of 1 settled (1 completed, 0 held)")
        .await;
    c.wait_for_text("cap-1|1").await;
    let shown = ok(&c, Method::GET, &format!("/v1/cases/{case}"), None).await;
    assert_eq!(shown["state"], "completed", "{shown}");
    assert!(ledger.asked.load(Ordering::SeqCst) >= 2);
    c.check_page("plan-completed").await;
    c.eval("document.getElementById('rc-chart-h').scrollIntoView(); return true")
        .await;
    c.screenshot("plan-chart").await;
    c.window(NARROW).await;
    assert!(fits(&c).await, "the plan page scrolls sideways on a phone");
    c.screenshot("plan-narrow").await;
    c.window(WIDE).await;

    c.goto("plans").await;
    c.wait_for_text(&plan).await;
    c.wait_for_text("completed").await;
    c.check_page("plans").await;

    // ---- a payload revealed on the dead-letter page, then its audit entry ----
    // (Another type: the ledger now answers `present`, which would close a case of
    // `TYPE` at once and archive its record.)
    let revealed = dead_letter(
        &c,
        "payments",
        "payment.refund",
        "pay-9",
        r#"{"payment": 9}"#,
        "Declined",
        "card declined for payment 9",
    )
    .await;
    c.goto("dead-letters/payments").await;
    c.wait_for_text("card declined for payment 9").await;
    c.click_button(&format!("Inspect {revealed}")).await;
    c.click_button("Reveal payload").await;
    c.wait_for_text("recorded in the audit log").await;
    c.goto("audit").await;
    c.wait_for_text("Audit log").await;
    c.fill(
        "Action (e.g. dead_letter.read, case.claim)",
        "dead_letter.read",
    )
    .await;
    c.click_button("Apply filters").await;
    c.wait_for_text(&revealed).await;
    c.wait_for_text("dead_letter.read").await;
    c.assert_audited("case.payload_read", &case).await;
    c.click_button("Verify chain").await;
    c.wait_for_text("The chain holds").await;
    c.wait_for_text("Entries checked").await;
    c.check_page("audit").await;

    // ---- a token: created with a grant, revoked, then refused at sign-in ----
    c.goto("tokens").await;
    c.wait_for_text("API tokens").await;
    c.fill("Token name", "night-operator").await;
    c.fill(
        "Entity of grant 1 (empty: every entity; orders; orders.*)",
        "orders",
    )
    .await;
    c.click_button("Create token").await;
    c.wait_for_text("Copy the secret now").await;
    let secret = c
        .eval("return document.querySelector('input.rc-secret').value")
        .await
        .as_str()
        .unwrap()
        .to_owned();
    assert!(secret.starts_with("rdt_"), "{secret}");
    c.wait_for_text("operator:orders").await;
    c.check_page("token-created").await;
    let (st, _) = c
        .api_as(&secret, Method::GET, "/v1/cases?queue=orders", None)
        .await;
    assert_eq!(st, 200, "the new token does not work before it is revoked");

    c.click_button("Revoke token night-operator").await;
    c.wait_for_text("Revoke token night-operator (").await;
    c.screenshot("token-revoke-confirm").await;
    c.click_button("Confirm").await;
    c.wait_for_text("Token night-operator revoked.").await;
    c.wait_for_text("revoked").await;
    c.check_page("token-revoked").await;

    c.click_button("Sign out").await;
    c.wait_for_text("Sign in to redrive").await;
    c.fill("API token", &secret).await;
    c.click_button("Sign in").await;
    c.wait_for_text("the token is unknown, revoked or expired")
        .await;
    // The refused sign-in is logged by the browser (401): that one is expected.
    c.drain_console_errors(&["401"]).await;
    c.check_page("revoked-sign-in").await;
    let (st, v) = c
        .api_as(&secret, Method::GET, "/v1/cases?queue=orders", None)
        .await;
    assert_eq!(st, 401, "{v}");

    c.finish().await;
}
