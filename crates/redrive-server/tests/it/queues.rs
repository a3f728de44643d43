//! Queue management over HTTP.

use serde_json::json;

use redrive_testkit::{TestServer, assert_problem};

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
