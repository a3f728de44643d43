//! Metrics, health, and routing errors.

use serde_json::json;

use redrive_testkit::{TestServer, assert_problem};

#[tokio::test]
async fn metrics_count_every_outcome_and_expose_live_counts() {
    let s = TestServer::start().await;
    s.queue(
        "m",
        json!({"max_delivery_count": 1, "duplicate_detection_window_ms": 60_000}),
    )
    .await;
    let (st, _) = s.post("/v1/queues/m/messages", json!({"messages": [{"message_id": "a", "body": "1"}, {"message_id": "a", "body": "1"}, {"message_id": "b", "body": "2"}]})).await;
    assert_eq!(st, 201);
    let got = s.receive("m", 2).await;
    s.settle(
        "m",
        got[0]["lock_token"].as_str().unwrap(),
        "complete",
        json!({}),
    )
    .await;
    s.settle(
        "m",
        got[1]["lock_token"].as_str().unwrap(),
        "abandon",
        json!({}),
    )
    .await;

    let resp = s
        .http
        .get(format!("{}/metrics", s.url))
        .send()
        .await
        .unwrap();
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let text = resp.text().await.unwrap();
    for line in [
        "redrive_messages_sent_total{queue=\"m\"} 2",
        "redrive_messages_duplicate_total{queue=\"m\"} 1",
        "redrive_messages_received_total{queue=\"m\"} 2",
        "redrive_messages_completed_total{queue=\"m\"} 1",
        "redrive_messages_abandoned_total{queue=\"m\"} 1",
        "redrive_messages_dead_lettered_total{queue=\"m\",reason=\"MaxDeliveryCountExceeded\"} 1",
        "redrive_queue_dead_lettered_messages{queue=\"m\"} 1",
        "redrive_queue_active_messages{queue=\"m\"} 0",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    s.stop().await;
}

#[tokio::test]
async fn health_answers_and_unknown_routes_are_problems() {
    let s = TestServer::start().await;
    let (st, v) = s.get("/healthz").await;
    assert_eq!(st, 200);
    assert_eq!(
        v,
        json!({"status": "ok", "store": "ok", "backend": "sqlite"})
    );
    assert_problem(&s.get("/v2/nothing").await, 404, "not_found");
    assert_problem(
        &s.delete("/v1/queues/x/receive").await,
        405,
        "method_not_allowed",
    );
    let resp = s
        .http
        .get(format!("{}/v1/queues/nope", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    s.stop().await;
}

#[tokio::test]
async fn every_operation_of_the_openapi_document_is_routed() {
    let s = TestServer::start().await;
    let (st, doc) = s.get("/openapi.json").await;
    assert_eq!(st, 200);
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 18);
    for (path, ops) in paths {
        let concrete = path
            .replace("{name}", "q")
            .replace("{seq}", "1")
            .replace("{session}", "s")
            .replace("{id}", "dl_x");
        for method in ops.as_object().unwrap().keys() {
            let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let body =
                (m == reqwest::Method::POST || m == reqwest::Method::PATCH).then(|| json!({}));
            let (status, v) = s.call(m, &concrete, body).await;
            let code = v["code"].as_str().unwrap_or("");
            assert!(
                code != "not_found" && code != "method_not_allowed",
                "{method} {path} is documented but not routed ({status} {v})"
            );
        }
    }
    s.stop().await;
}
