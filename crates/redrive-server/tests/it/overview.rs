//! The console's first look over HTTP, on every backend: `GET /v1/whoami` with and
//! without authentication, `GET /v1/overview` (empty on a fresh store, counts after sends,
//! locks, dead letters and quarantine, only what the caller's grants cover) and a queue's
//! series (`GET /v1/queues/{name}/series`) on the manual clock.

use redrive_broker::AccessSettings;
use redrive_testkit::recovery::without_workers;
use redrive_testkit::{ADMIN, Backend, TestServer, assert_problem};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn on() -> AccessSettings {
    AccessSettings {
        enabled: true,
        ..AccessSettings::default()
    }
}

async fn server(backend: Backend, auth: bool) -> TestServer {
    let b = TestServer::builder()
        .backend(backend)
        .settings(without_workers());
    if auth { b.auth(on()) } else { b }.start().await
}

async fn overview_as(s: &TestServer, token: Option<&str>) -> (StatusCode, Value) {
    s.call_as(token, Method::GET, "/v1/overview", None).await
}

/// The entry of queue `name` in an overview.
fn queue<'a>(o: &'a Value, name: &str) -> &'a Value {
    o["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == name)
        .unwrap_or_else(|| panic!("{name} is in {o}"))
}

/// Receives one message of `q` and dead-letters it for `reason`; the record's id.
async fn dead_letter(s: &TestServer, q: &str, reason: &str) -> String {
    let m = s.receive(q, 1).await;
    assert_eq!(m.len(), 1);
    let lock = m[0]["lock_token"].as_str().unwrap();
    let (st, v) = s
        .settle(q, lock, "dead_letter", json!({"reason": reason}))
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (st, v) = s.get(&format!("/v1/queues/{q}/dead-letters")).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["reason"] == reason)
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .next_back()
        .expect("the record just written")
}

#[tokio::test]
async fn the_overview_of_a_fresh_store_is_empty() {
    for backend in Backend::all("the empty overview") {
        let s = server(backend, false).await;
        let (st, o) = overview_as(&s, None).await;
        assert_eq!(st, StatusCode::OK, "{o}");
        assert_eq!(o["empty"], true, "{o}");
        assert_eq!(o["queues"], json!([]));
        assert_eq!(o["topics"], json!([]));
        assert_eq!(o["highlights"], json!([]));
        assert_eq!(o["flagged_replays"], 0);
        assert_eq!(o["cases"], json!({"open": 0, "overdue": 0, "escalated": 0}));
        assert!(o["generated_at"].as_str().unwrap().ends_with('Z'), "{o}");
        s.stop().await;
    }
}

#[tokio::test]
async fn overview_counts_match_after_sends_locks_dead_letters_and_quarantine() {
    for backend in Backend::all("the overview's counts") {
        let s = server(backend, false).await;
        s.queue("orders", json!({"lock_duration_ms": 60_000})).await;
        s.queue("quiet", json!({})).await;
        s.topic("shop", json!({})).await;
        s.pull_sub("shop", "billing", json!({})).await;
        s.send("orders", &["a", "b", "c", "d"]).await;
        // `a` stays locked; `b` and `c` are dead-lettered; `c` is then quarantined.
        assert_eq!(s.receive("orders", 1).await.len(), 1);
        dead_letter(&s, "orders", "Bad").await;
        let c = dead_letter(&s, "orders", "Worse").await;
        let (st, v) = s
            .post(
                &format!("/v1/queues/orders/dead-letters/{c}/move"),
                json!({"area": "quarantine"}),
            )
            .await;
        assert_eq!(st, StatusCode::NO_CONTENT, "{v}");
        s.advance_secs(5);

        let (st, o) = overview_as(&s, None).await;
        assert_eq!(st, StatusCode::OK, "{o}");
        assert_eq!(o["empty"], false);
        let orders = queue(&o, "orders");
        assert_eq!(
            orders["counts"],
            json!({"active": 1, "scheduled": 0, "locked": 1, "deferred": 0,
                   "dead_lettered": 1, "quarantined": 1}),
            "{o}"
        );
        assert_eq!(orders["kind"], "queue");
        assert!(orders["oldest_message_age_ms"].as_u64().unwrap() >= 5_000);
        assert_eq!(
            orders["replay"],
            json!({"state": "off", "flagged": 0, "quarantined": 1})
        );
        // The counts agree with the queue's own.
        let own = s.counts("orders").await;
        for k in ["active", "scheduled", "locked", "deferred", "dead_lettered"] {
            assert_eq!(orders["counts"][k], own[k], "{k}: {own}");
        }
        let quiet = queue(&o, "quiet");
        assert_eq!(quiet["oldest_message_age_ms"], Value::Null);
        assert_eq!(quiet["replay"], Value::Null);
        // The subscription's queue is listed as the subscription's.
        let billing = queue(&o, "shop.billing");
        assert_eq!(
            (
                &billing["kind"],
                &billing["topic"],
                &billing["subscription"]
            ),
            (&json!("subscription"), &json!("shop"), &json!("billing"))
        );
        assert_eq!(
            o["topics"],
            json!([{"name": "shop", "subscriptions": [
                {"name": "billing", "queue": "shop.billing", "push": null}]}])
        );
        // Both records stand for an open case (no worker runs here).
        assert_eq!(o["cases"], json!({"open": 2, "overdue": 0, "escalated": 0}));
        assert_eq!(
            o["highlights"],
            json!([
                {"kind": "dead_letters", "entity": "orders", "count": 1, "detail": "1 dead letter"},
                {"kind": "quarantine", "entity": "orders", "count": 1,
                 "detail": "1 record in quarantine"},
            ])
        );
        // Past the review deadline (a day by default) both cases are overdue.
        s.advance_secs(2 * 24 * 3600);
        let (_, o) = overview_as(&s, None).await;
        assert_eq!(o["cases"]["overdue"], 2, "{o}");
        assert!(
            o["highlights"]
                .as_array()
                .unwrap()
                .iter()
                .any(|h| h["kind"] == "case_overdue" && h["count"] == 2),
            "{o}"
        );
        s.stop().await;
    }
}

#[tokio::test]
async fn a_caller_with_a_grant_on_one_queue_sees_only_that_queue() {
    for backend in Backend::all("the overview's visibility") {
        let s = server(backend, true).await;
        for q in ["orders", "billing"] {
            let (st, v) = s
                .admin(
                    Method::POST,
                    "/v1/queues",
                    Some(json!({"name": q, "policy": {}})),
                )
                .await;
            assert_eq!(st, StatusCode::CREATED, "{v}");
            let (st, v) = s
                .admin(
                    Method::POST,
                    &format!("/v1/queues/{q}/messages"),
                    Some(json!({"body": "x"})),
                )
                .await;
            assert_eq!(st, StatusCode::CREATED, "{v}");
        }
        let (_, operator) = s.token("orders-operator", &["operator:orders"]).await;
        let (st, o) = overview_as(&s, Some(&operator)).await;
        assert_eq!(st, StatusCode::OK, "{o}");
        let names: Vec<&str> = o["queues"]
            .as_array()
            .unwrap()
            .iter()
            .map(|q| q["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["orders"]);
        assert_eq!(queue(&o, "orders")["counts"]["active"], 1);
        assert_eq!(o["empty"], false);
        // The admin sees both.
        let (_, all) = overview_as(&s, Some(ADMIN)).await;
        assert_eq!(all["queues"].as_array().unwrap().len(), 2);
        // A grant on another queue only: nothing to see, which is `empty`.
        let (_, other) = s.token("other-operator", &["operator:nothing-here"]).await;
        let (st, o) = overview_as(&s, Some(&other)).await;
        assert_eq!(st, StatusCode::OK, "{o}");
        assert_eq!((&o["empty"], &o["queues"]), (&json!(true), &json!([])));
        // Without the operator role the overview is refused; without a token, too.
        let (_, consumer) = s.token("orders-consumer", &["consumer:orders"]).await;
        assert_problem(&overview_as(&s, Some(&consumer)).await, 403, "forbidden");
        assert_problem(&overview_as(&s, None).await, 401, "unauthenticated");
        // The series follows the queue's row: operator on that queue.
        let series = |q: &str, t: &str| {
            let (q, t) = (q.to_owned(), t.to_owned());
            let s = &s;
            async move {
                s.call_as(
                    Some(&t),
                    Method::GET,
                    &format!("/v1/queues/{q}/series"),
                    None,
                )
                .await
            }
        };
        assert_eq!(series("orders", &operator).await.0, StatusCode::OK);
        assert_problem(&series("billing", &operator).await, 403, "forbidden");
        s.stop().await;
    }
}

#[tokio::test]
async fn whoami_names_the_caller_with_and_without_authentication() {
    for backend in Backend::all("whoami") {
        let open = server(backend.clone(), false).await;
        let (st, v) = open.get("/v1/whoami").await;
        assert_eq!(st, StatusCode::OK, "{v}");
        assert_eq!(
            v,
            json!({"auth": false, "actor": "anonymous", "grants": [], "roles_summary": []})
        );
        open.stop().await;

        let s = server(backend, true).await;
        let (id, shop) = s
            .token("shop", &["producer:orders", "consumer:orders.*"])
            .await;
        let (st, v) = s
            .call_as(Some(&shop), Method::GET, "/v1/whoami", None)
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        assert_eq!(v["auth"], true);
        assert_eq!(v["actor"], "shop");
        assert_eq!(v["token_id"], id.as_str());
        assert_eq!(v["grants"], json!(["producer:orders", "consumer:orders.*"]));
        assert_eq!(v["roles_summary"], json!(["producer", "consumer"]));
        let (_, v) = s
            .call_as(Some(ADMIN), Method::GET, "/v1/whoami", None)
            .await;
        assert_eq!(v["roles_summary"], json!(["admin"]));
        assert_problem(
            &s.call_as(None, Method::GET, "/v1/whoami", None).await,
            401,
            "unauthenticated",
        );
        // A revoked token is refused like on every other route.
        let (st, _) = s
            .admin(Method::POST, &format!("/v1/tokens/{id}/revoke"), None)
            .await;
        assert_eq!(st, StatusCode::OK);
        assert_problem(
            &s.call_as(Some(&shop), Method::GET, "/v1/whoami", None)
                .await,
            401,
            "unauthenticated",
        );
        s.stop().await;
    }
}

#[tokio::test]
async fn a_send_a_complete_and_a_dead_letter_appear_in_the_queue_s_series() {
    for backend in Backend::all("the queue series") {
        let s = server(backend, false).await;
        s.queue("orders", json!({})).await;
        s.send("orders", &["a", "b"]).await;
        let m = s.receive("orders", 1).await;
        let (st, v) = s
            .settle(
                "orders",
                m[0]["lock_token"].as_str().unwrap(),
                "complete",
                json!({}),
            )
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        dead_letter(&s, "orders", "ValidationFailed").await;

        let (st, v) = s.get("/v1/queues/orders/series").await;
        assert_eq!(st, StatusCode::OK, "{v}");
        assert_eq!(
            (&v["queue"], &v["interval_ms"]),
            (&json!("orders"), &json!(10_000))
        );
        let points = v["points"].as_array().unwrap();
        assert_eq!(points.len(), 360);
        let last = &points[359];
        assert_eq!(
            (
                &last["sent"],
                &last["received"],
                &last["completed"],
                &last["dead_lettered"]
            ),
            (&json!(2), &json!(2), &json!(1), &json!(1)),
            "{last}"
        );
        assert_eq!(
            last["dead_lettered_by_reason"],
            json!({"ValidationFailed": 1})
        );
        assert!(points[..359].iter().all(|p| p["sent"] == 0));
        // Ten seconds on, the same counts are the point before the current one.
        s.advance_secs(10);
        let (_, v) = s.get("/v1/queues/orders/series").await;
        let points = v["points"].as_array().unwrap();
        assert_eq!(points[358]["sent"], 2);
        assert_eq!(points[359]["sent"], 0);
        assert!(points[358]["at"].as_str().unwrap() < points[359]["at"].as_str().unwrap());
        assert_problem(
            &s.get("/v1/queues/nope/series").await,
            404,
            "queue_not_found",
        );
        s.stop().await;
    }
}
