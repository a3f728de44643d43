//! Queue management over HTTP.

use serde_json::json;

use redrive_testkit::{TestServer, assert_problem};
use reqwest::Method;

#[tokio::test]
async fn queue_lifecycle_create_show_list_update_delete() {
    let s = TestServer::start().await;
    let (st, v) = s
        .post(
            "/v1/queues",
            json!({"name": "orders", "policy": {"max_delivery_count": 5}}),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["name"], "orders");
    assert_eq!(v["policy_version"], 1);
    assert_eq!(v["policy"]["max_delivery_count"], 5);
    assert_eq!(
        v["policy"]["lock_duration_ms"], 30_000,
        "defaults fill the rest"
    );
    assert_eq!(v["counts"]["active"], 0);

    s.queue("billing", json!({})).await;
    let (_, list) = s.get("/v1/queues").await;
    let names: Vec<&str> = list["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["billing", "orders"]);

    let (st, v) = s
        .patch("/v1/queues/orders", json!({"lock_duration_ms": 60_000}))
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["policy_version"], 2);
    assert_eq!(v["policy"]["lock_duration_ms"], 60_000);
    assert_eq!(
        v["policy"]["max_delivery_count"], 5,
        "a merge patch keeps the other fields"
    );

    let (st, v) = s
        .patch(
            "/v1/queues/orders",
            json!({"policy": {"max_delivery_count": 7}, "expected_version": 2}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["policy_version"], 3);

    let (st, _) = s.delete("/v1/queues/orders").await;
    assert_eq!(st, 204);
    assert_problem(&s.get("/v1/queues/orders").await, 404, "queue_not_found");
    s.stop().await;
}

#[tokio::test]
async fn bad_queue_requests_are_typed_problems_and_change_nothing() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    assert_problem(
        &s.post("/v1/queues", json!({"name": "orders"})).await,
        409,
        "queue_exists",
    );
    assert_problem(
        &s.post("/v1/queues", json!({"name": "bad name"})).await,
        400,
        "invalid_name",
    );
    let r = s
        .post(
            "/v1/queues",
            json!({"name": "q2", "policy": {"lock_duration_ms": 0}}),
        )
        .await;
    assert_problem(&r, 400, "invalid_policy");
    assert_eq!(r.1["field"], "lock_duration_ms");
    assert_problem(
        &s.post(
            "/v1/queues",
            json!({"name": "q3", "policy": {"no_such_field": 1}}),
        )
        .await,
        400,
        "malformed_body",
    );
    let r = s
        .post(
            "/v1/queues",
            json!({"name": "q4", "policy": {"dead_letter_queue": "missing"}}),
        )
        .await;
    assert_problem(&r, 400, "invalid_request");
    assert_problem(
        &s.patch("/v1/queues/orders", json!({"max_delivery_count": 0}))
            .await,
        400,
        "invalid_policy",
    );
    let r = s
        .patch(
            "/v1/queues/orders",
            json!({"policy": {"max_delivery_count": 3}, "expected_version": 9}),
        )
        .await;
    assert_problem(&r, 409, "version_conflict");
    assert_problem(
        &s.patch("/v1/queues/missing", json!({})).await,
        404,
        "queue_not_found",
    );

    let (_, list) = s.get("/v1/queues").await;
    assert_eq!(
        list["queues"].as_array().unwrap().len(),
        1,
        "nothing was created"
    );
    let (_, q) = s.get("/v1/queues/orders").await;
    assert_eq!(q["policy_version"], 1, "nothing was changed");
    s.stop().await;
}

#[tokio::test]
async fn deleting_a_non_empty_queue_needs_force() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    s.send("orders", &["a", "b"]).await;
    let r = s.delete("/v1/queues/orders").await;
    assert_problem(&r, 409, "queue_not_empty");
    assert_eq!(r.1["messages"], 2);
    assert_eq!(s.counts("orders").await["active"], 2);
    let (st, _) = s.delete("/v1/queues/orders?force=true").await;
    assert_eq!(st, 204);
    assert_problem(&s.get("/v1/queues/orders").await, 404, "queue_not_found");
    s.stop().await;
}

/// A purge is the operator's: it removes messages locked by a receiver too, whose
/// settlement then answers `lock_lost`, and it is audited.
#[tokio::test]
async fn purge_removes_locked_messages_and_their_holders_lose_the_lock() {
    let s = TestServer::builder()
        .auth(redrive_broker::AccessSettings {
            enabled: true,
            ..redrive_broker::AccessSettings::default()
        })
        .start()
        .await;
    let (_, ops) = s.token("ops", &["operator"]).await;
    let (_, worker) = s.token("worker", &["consumer", "producer"]).await;
    let as_ops = |method: Method, path: &'static str| s.call_as(Some(&ops), method, path, None);
    let (st, v) = s
        .call_as(
            Some(&ops),
            Method::POST,
            "/v1/queues",
            Some(json!({"name": "orders"})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let (st, v) = s
        .call_as(
            Some(&worker),
            Method::POST,
            "/v1/queues/orders/messages",
            Some(json!({"messages": [{"body": "a"}, {"body": "b"}, {"body": "c"}]})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let (st, v) = s
        .call_as(
            Some(&worker),
            Method::POST,
            "/v1/queues/orders/receive",
            Some(json!({"max_messages": 1})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let token = v["messages"][0]["lock_token"].as_str().unwrap().to_owned();

    // The receiver may not purge: the lock token is no right over the queue.
    assert_problem(
        &s.call_as(Some(&worker), Method::POST, "/v1/queues/orders/purge", None)
            .await,
        403,
        "forbidden",
    );
    let (st, v) = as_ops(Method::POST, "/v1/queues/orders/purge").await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v, json!({"removed": 3}), "the locked message counts");
    let (_, q) = as_ops(Method::GET, "/v1/queues/orders").await;
    let c = &q["counts"];
    assert_eq!(
        (&c["active"], &c["locked"], &c["scheduled"], &c["deferred"]),
        (&json!(0), &json!(0), &json!(0), &json!(0)),
        "{q}"
    );

    // The holder's settlement finds its lock gone.
    assert_problem(
        &s.call_as(
            Some(&worker),
            Method::POST,
            "/v1/queues/orders/settle",
            Some(json!({"lock_token": token, "action": "complete"})),
        )
        .await,
        409,
        "lock_lost",
    );
    let purges = s.audit("action=queue.purge").await;
    assert_eq!(purges.len(), 1, "{purges:?}");
    assert_eq!(purges[0]["actor_name"], "ops");
    assert_eq!(purges[0]["entity"], "orders");
    assert_eq!(purges[0]["targets"], json!(["removed=3"]));
    assert_eq!(purges[0]["outcome"], "ok");
    assert_problem(
        &as_ops(Method::POST, "/v1/queues/missing/purge").await,
        404,
        "queue_not_found",
    );
    s.stop().await;
}
