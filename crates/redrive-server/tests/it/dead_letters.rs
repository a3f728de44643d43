//! The dead-letter store: evidence, listing, peek-lock receive, resubmit, areas, and
//! forwarding to a dead-letter queue.

use serde_json::json;

use redrive_testkit::{T0, TestServer, assert_problem};

#[tokio::test]
async fn application_dead_letter_keeps_the_evidence() {
    let s = TestServer::start().await;
    s.queue("q", json!({})).await;
    s.post(
        "/v1/queues/q/messages",
        json!({"message_id": "m1", "body": "abc", "properties": {"k": "v"}}),
    )
    .await;
    let got = s.receive("q", 1).await;
    s.advance(1_500);
    let (st, v) = s
        .settle(
            "q",
            got[0]["lock_token"].as_str().unwrap(),
            "dead_letter",
            json!({"reason": "ValidationFailed", "description": "no amount"}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let id = v["dead_letter_id"].as_str().unwrap();
    let (st, r) = s.get(&format!("/v1/queues/q/dead-letters/{id}")).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["body"], "abc");
    assert_eq!(
        r["body_sha256"],
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(r["body_size"], 3);
    assert_eq!(r["reason"], "ValidationFailed");
    assert_eq!(r["description"], "no amount");
    assert_eq!(r["delivery_count"], 1);
    assert_eq!(r["delivery_count_quality"], "exact");
    assert_eq!(r["routed_by"], "application");
    assert_eq!(r["area"], "live");
    assert_eq!(r["message_id"], "m1");
    assert_eq!(r["sequence_number"], 1);
    assert_eq!(r["policy_version"], 1);
    assert_eq!(r["properties"], json!({"k": "v"}));
    assert_eq!(r["first_delivered_at"], T0.to_rfc3339());
    assert_eq!(r["last_delivered_at"], T0.to_rfc3339());
    assert_eq!(r["enqueued_time"], T0.to_rfc3339());
    assert_eq!(r["dead_lettered_at"], T0.plus_millis(1_500).to_rfc3339());
    assert_problem(
        &s.get("/v1/queues/q/dead-letters/dl_nothing").await,
        404,
        "dead_letter_not_found",
    );
    s.stop().await;
}

#[tokio::test]
async fn listing_filters_by_reason_and_time_and_pages_with_a_cursor() {
    let s = TestServer::start().await;
    s.queue("q", json!({})).await;
    s.send("q", &["1", "2", "3", "4", "5"]).await;
    let got = s.receive("q", 5).await;
    for (i, m) in got.iter().enumerate() {
        let reason = if i % 2 == 0 { "Even" } else { "Odd" };
        s.settle(
            "q",
            m["lock_token"].as_str().unwrap(),
            "dead_letter",
            json!({"reason": reason}),
        )
        .await;
        s.advance(1_000);
    }
    let (_, p1) = s.get("/v1/queues/q/dead-letters?limit=2").await;
    assert_eq!(p1["dead_letters"].as_array().unwrap().len(), 2);
    let cursor = p1["next_cursor"].as_str().unwrap();
    let (_, p2) = s
        .get(&format!(
            "/v1/queues/q/dead-letters?limit=2&cursor={cursor}"
        ))
        .await;
    let (_, p3) = s
        .get(&format!(
            "/v1/queues/q/dead-letters?limit=2&cursor={}",
            p2["next_cursor"].as_str().unwrap()
        ))
        .await;
    let all: Vec<String> = [&p1, &p2, &p3]
        .iter()
        .flat_map(|p| {
            p["dead_letters"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["body"].as_str().unwrap().to_owned())
        })
        .collect();
    assert_eq!(all, vec!["1", "2", "3", "4", "5"]);
    assert!(p3["next_cursor"].is_null());

    let (_, even) = s.get("/v1/queues/q/dead-letters?reason=Even").await;
    assert_eq!(even["dead_letters"].as_array().unwrap().len(), 3);
    let from = T0.plus_millis(1_000).to_rfc3339();
    let to = T0.plus_millis(3_000).to_rfc3339();
    let (_, window) = s
        .get(&format!("/v1/queues/q/dead-letters?from={from}&to={to}"))
        .await;
    let bodies: Vec<&str> = window["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, vec!["2", "3"]);
    assert_problem(
        &s.get("/v1/queues/q/dead-letters?area=lost").await,
        400,
        "invalid_request",
    );
    assert_problem(
        &s.get("/v1/queues/q/dead-letters?from=yesterday").await,
        400,
        "invalid_request",
    );
    assert_problem(
        &s.get("/v1/queues/nope/dead-letters").await,
        404,
        "queue_not_found",
    );
    s.stop().await;
}

#[tokio::test]
async fn dead_letters_can_be_received_with_a_lock_and_completed() {
    let s = TestServer::start().await;
    s.queue("q", json!({})).await;
    s.send("q", &["x"]).await;
    let got = s.receive("q", 1).await;
    s.settle(
        "q",
        got[0]["lock_token"].as_str().unwrap(),
        "dead_letter",
        json!({"reason": "R"}),
    )
    .await;
    let (st, v) = s
        .post(
            "/v1/queues/q/dead-letters/receive",
            json!({"max_messages": 5}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let d = &v["dead_letters"][0];
    assert_eq!(d["body"], "x");
    assert_eq!(d["dead_letter_delivery_count"], 1);
    let tok = d["lock_token"].as_str().unwrap();
    let (_, again) = s.post("/v1/queues/q/dead-letters/receive", json!({})).await;
    assert_eq!(again["dead_letters"], json!([]), "locked while held");
    let (st, _) = s
        .post(
            "/v1/queues/q/dead-letters/settle",
            json!({"lock_token": tok, "action": "complete"}),
        )
        .await;
    assert_eq!(st, 204);
    assert_problem(
        &s.post(
            "/v1/queues/q/dead-letters/settle",
            json!({"lock_token": tok, "action": "complete"}),
        )
        .await,
        409,
        "lock_lost",
    );
    assert_eq!(s.counts("q").await["dead_lettered"], 0);
    s.stop().await;
}

#[tokio::test]
async fn resubmit_sends_it_back_with_a_new_sequence_and_archives_the_record() {
    let s = TestServer::start().await;
    s.queue("q", json!({"duplicate_detection_window_ms": 600_000}))
        .await;
    s.post(
        "/v1/queues/q/messages",
        json!({"message_id": "m1", "body": "x", "properties": {"a": 1}}),
    )
    .await;
    let got = s.receive("q", 1).await;
    let (_, v) = s
        .settle(
            "q",
            got[0]["lock_token"].as_str().unwrap(),
            "dead_letter",
            json!({"reason": "R"}),
        )
        .await;
    let id = v["dead_letter_id"].as_str().unwrap().to_owned();
    let (st, r) = s
        .post(
            &format!("/v1/queues/q/dead-letters/{id}/resubmit"),
            json!({}),
        )
        .await;
    assert_eq!(st, 201, "{r}");
    assert_eq!(r["message_id"], "m1");
    assert_eq!(
        r["duplicate"], false,
        "duplicate detection does not apply to resubmits"
    );
    assert_eq!(r["sequence_number"], 2);
    let again = s.receive("q", 1).await;
    assert_eq!(again[0]["message_id"], "m1");
    assert_eq!(again[0]["delivery_count"], 1);
    assert_eq!(
        again[0]["properties"],
        json!({"a": 1, "redrive-dead-letter-id": id})
    );
    let (_, rec) = s.get(&format!("/v1/queues/q/dead-letters/{id}")).await;
    assert_eq!(rec["area"], "archived");
    assert_problem(
        &s.post(
            &format!("/v1/queues/q/dead-letters/{id}/resubmit"),
            json!({}),
        )
        .await,
        404,
        "dead_letter_not_found",
    );
    s.stop().await;
}

#[tokio::test]
async fn records_move_between_areas() {
    let s = TestServer::start().await;
    s.queue("q", json!({})).await;
    s.send("q", &["x"]).await;
    let got = s.receive("q", 1).await;
    let (_, v) = s
        .settle(
            "q",
            got[0]["lock_token"].as_str().unwrap(),
            "dead_letter",
            json!({"reason": "R"}),
        )
        .await;
    let id = v["dead_letter_id"].as_str().unwrap();
    let (st, _) = s
        .post(
            &format!("/v1/queues/q/dead-letters/{id}/move"),
            json!({"area": "quarantine"}),
        )
        .await;
    assert_eq!(st, 204);
    let (_, live) = s.get("/v1/queues/q/dead-letters").await;
    assert_eq!(live["dead_letters"], json!([]));
    let (_, q) = s.get("/v1/queues/q/dead-letters?area=quarantine").await;
    assert_eq!(q["dead_letters"][0]["id"], id);
    assert_problem(
        &s.post(
            &format!("/v1/queues/q/dead-letters/{id}/move"),
            json!({"area": "nowhere"}),
        )
        .await,
        400,
        "invalid_request",
    );
    s.stop().await;
}

#[tokio::test]
async fn dead_letter_queue_target_receives_a_copy_and_the_evidence_stays() {
    let s = TestServer::start().await;
    s.queue("orders-dlq", json!({})).await;
    s.queue(
        "orders",
        json!({"max_delivery_count": 1, "dead_letter_queue": "orders-dlq"}),
    )
    .await;
    s.send("orders", &["poison"]).await;
    let got = s.receive("orders", 1).await;
    s.settle(
        "orders",
        got[0]["lock_token"].as_str().unwrap(),
        "abandon",
        json!({}),
    )
    .await;
    let moved = s.receive("orders-dlq", 1).await;
    assert_eq!(moved[0]["body"], "poison");
    assert_eq!(
        moved[0]["properties"]["DeadLetterReason"],
        "MaxDeliveryCountExceeded"
    );
    assert_eq!(moved[0]["properties"]["DeadLetterSource"], "orders");
    let (_, page) = s.get("/v1/queues/orders/dead-letters?area=archived").await;
    let rec = &page["dead_letters"][0];
    assert_eq!(rec["forwarded_to_queue"], "orders-dlq");
    assert_eq!(rec["delivery_count"], 1);
    assert_eq!(rec["reason"], "MaxDeliveryCountExceeded");
    s.stop().await;
}

#[tokio::test]
async fn a_queue_others_dead_letter_into_is_not_deleted_without_force() {
    let s = TestServer::start().await;
    s.queue("dlq", json!({})).await;
    s.queue("orders", json!({"dead_letter_queue": "dlq"})).await;
    s.topic("events", json!({})).await;
    let (st, v) = s
        .post(
            "/v1/topics/events/subscriptions",
            json!({"name": "pull", "type": "pull",
                   "dead_letter": {"type": "queue", "name": "dlq"}}),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let r = s.delete("/v1/queues/dlq").await;
    assert_problem(&r, 409, "queue_is_dead_letter_target");
    assert_eq!(
        r.1["dependants"],
        json!(["orders", "events/pull"]),
        "{}",
        r.1
    );
    let (st, _) = s.get("/v1/queues/dlq").await;
    assert_eq!(st, 200, "nothing changed");
    // A queue nobody names goes as before; with force, a target goes too.
    s.queue("plain", json!({})).await;
    assert_eq!(s.delete("/v1/queues/plain").await.0, 204);
    assert_eq!(s.delete("/v1/queues/dlq?force=true").await.0, 204);
    s.stop().await;
}
