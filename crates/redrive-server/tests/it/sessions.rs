//! Sessions: ordered groups held by one receiver at a time.

use serde_json::json;

use redrive_testkit::{TestServer, assert_problem};

async fn send_session(s: &TestServer, q: &str, session: &str, body: &str) {
    let (st, v) = s
        .post(
            &format!("/v1/queues/{q}/messages"),
            json!({"body": body, "session_id": session}),
        )
        .await;
    assert_eq!(st, 201, "{v}");
}

#[tokio::test]
async fn session_queue_needs_session_ids_and_a_held_session() {
    let s = TestServer::start().await;
    s.queue("sq", json!({"requires_session": true})).await;
    s.queue("plain", json!({})).await;
    assert_problem(
        &s.post("/v1/queues/sq/messages", json!({"body": "x"})).await,
        400,
        "session_required",
    );
    assert_problem(
        &s.post("/v1/queues/sq/receive", json!({})).await,
        400,
        "session_required",
    );
    assert_problem(
        &s.post("/v1/queues/plain/sessions/accept", json!({})).await,
        400,
        "session_not_allowed",
    );
    assert_problem(
        &s.post("/v1/queues/sq/receive", json!({"session_id": "a"}))
            .await,
        400,
        "invalid_request",
    );
    let (st, _) = s.post("/v1/queues/sq/sessions/accept", json!({})).await;
    assert_eq!(st, 204, "no session has messages yet");
    s.stop().await;
}

#[tokio::test]
async fn one_receiver_holds_a_session_and_gets_it_in_order() {
    let s = TestServer::start().await;
    s.queue("sq", json!({"requires_session": true})).await;
    for (sess, body) in [("a", "a1"), ("b", "b1"), ("a", "a2"), ("a", "a3")] {
        send_session(&s, "sq", sess, body).await;
    }
    let (st, lock_a) = s.post("/v1/queues/sq/sessions/accept", json!({})).await;
    assert_eq!(st, 200, "{lock_a}");
    assert_eq!(
        lock_a["session_id"], "a",
        "the session with the oldest message comes first"
    );
    let tok_a = lock_a["lock_token"].as_str().unwrap();

    assert_problem(
        &s.post("/v1/queues/sq/sessions/accept", json!({"session_id": "a"}))
            .await,
        409,
        "session_locked",
    );
    let (_, lock_b) = s.post("/v1/queues/sq/sessions/accept", json!({})).await;
    assert_eq!(
        lock_b["session_id"], "b",
        "the next receiver gets the other session"
    );

    let recv = |max: u32| {
        s.post(
            "/v1/queues/sq/receive",
            json!({"session_id": "a", "session_lock_token": tok_a, "max_messages": max}),
        )
    };
    let (st, v) = recv(1).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["messages"][0]["body"], "a1");
    let (_, v2) = recv(5).await;
    assert_eq!(v2["messages"], json!([]), "a2 waits while a1 is locked");
    s.settle(
        "sq",
        v["messages"][0]["lock_token"].as_str().unwrap(),
        "complete",
        json!({}),
    )
    .await;
    let (_, v3) = recv(5).await;
    let bodies: Vec<&str> = v3["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, vec!["a2", "a3"]);

    let wrong = s
        .post(
            "/v1/queues/sq/receive",
            json!({"session_id": "a", "session_lock_token": "lk_wrong"}),
        )
        .await;
    assert_problem(&wrong, 409, "session_lock_lost");

    let (st, renewed) = s
        .post(
            "/v1/queues/sq/sessions/a/renew",
            json!({"lock_token": tok_a, "lock_duration_ms": 60_000}),
        )
        .await;
    assert_eq!(st, 200, "{renewed}");
    let (st, _) = s
        .post(
            "/v1/queues/sq/sessions/a/release",
            json!({"lock_token": tok_a}),
        )
        .await;
    assert_eq!(st, 204);
    assert_problem(
        &s.post(
            "/v1/queues/sq/sessions/a/renew",
            json!({"lock_token": tok_a}),
        )
        .await,
        409,
        "session_lock_lost",
    );
    s.stop().await;
}

#[tokio::test]
async fn an_expired_session_lock_frees_the_session() {
    let s = TestServer::start().await;
    s.queue(
        "sq",
        json!({"requires_session": true, "lock_duration_ms": 5_000}),
    )
    .await;
    send_session(&s, "sq", "a", "a1").await;
    let (_, l1) = s
        .post("/v1/queues/sq/sessions/accept", json!({"session_id": "a"}))
        .await;
    s.advance(5_000);
    let (st, l2) = s
        .post("/v1/queues/sq/sessions/accept", json!({"session_id": "a"}))
        .await;
    assert_eq!(st, 200, "{l2}");
    assert_ne!(l1["lock_token"], l2["lock_token"]);
    s.stop().await;
}

/// A session is one ordered stream held as a whole: while any message of it is locked —
/// a later one taken in the same batch included — none is delivered, so a message
/// abandoned from a batch comes back only after the rest of its batch is settled, and
/// the session's order holds.
#[tokio::test]
async fn an_abandoned_message_of_a_batch_waits_for_the_rest_of_its_batch() {
    let s = TestServer::start().await;
    s.queue("sq", json!({"requires_session": true})).await;
    for body in ["m1", "m2", "m3", "m4"] {
        send_session(&s, "sq", "a", body).await;
    }
    let (_, lock) = s
        .post("/v1/queues/sq/sessions/accept", json!({"session_id": "a"}))
        .await;
    let tok = lock["lock_token"].as_str().unwrap().to_owned();
    let recv = |max: u32| {
        s.post(
            "/v1/queues/sq/receive",
            json!({"session_id": "a", "session_lock_token": tok, "max_messages": max}),
        )
    };
    let (_, batch) = recv(3).await;
    let tokens: Vec<String> = batch["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["lock_token"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(tokens.len(), 3);
    s.settle("sq", &tokens[0], "abandon", json!({})).await;
    let (_, v) = recv(5).await;
    assert_eq!(
        v["messages"],
        json!([]),
        "m1 (abandoned) waits while m2 and m3 of its batch are locked"
    );
    s.settle("sq", &tokens[1], "complete", json!({})).await;
    s.settle("sq", &tokens[2], "complete", json!({})).await;
    let (_, v) = recv(5).await;
    let bodies: Vec<&str> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, ["m1", "m4"]);
    s.stop().await;
}
