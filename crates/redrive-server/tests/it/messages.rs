//! Send, receive, peek and settlement over HTTP, with time moved by the manual clock.

use serde_json::json;

use redrive_testkit::{T0, TestServer, assert_problem};

#[tokio::test]
async fn send_receive_complete_carries_every_field() {
    let s = TestServer::start().await;
    s.queue("q", json!({})).await;
    let (st, v) = s
        .post(
            "/v1/queues/q/messages",
            json!({"message_id": "m-1", "body": "hello", "content_type": "text/plain",
                   "properties": {"n": 3, "ok": true, "who": "me", "x": 1.5},
                   "correlation_id": "c-1", "type": "order.created", "intent": "pay-1",
                   "valid_until": "2030-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    assert_eq!(v["results"][0]["message_id"], "m-1");
    assert_eq!(v["results"][0]["sequence_number"], 1);
    assert_eq!(v["results"][0]["duplicate"], false);

    let got = s.receive("q", 10).await;
    assert_eq!(got.len(), 1);
    let m = &got[0];
    assert_eq!(m["body"], "hello");
    assert_eq!(m["body_encoding"], "utf8");
    assert_eq!(m["content_type"], "text/plain");
    assert_eq!(
        m["properties"],
        json!({"n": 3, "ok": true, "who": "me", "x": 1.5})
    );
    assert_eq!(m["correlation_id"], "c-1");
    assert_eq!(m["type"], "order.created");
    assert_eq!(m["intent"], "pay-1");
    assert_eq!(m["valid_until"], "2030-01-01T00:00:00.000Z");
    assert_eq!(m["delivery_count"], 1);
    assert_eq!(m["state"], "locked");
    assert_eq!(m["enqueued_time"], T0.to_rfc3339());
    assert_eq!(m["locked_until"], T0.plus_millis(30_000).to_rfc3339());
    let token = m["lock_token"].as_str().unwrap();
    assert_eq!(s.counts("q").await["locked"], 1);
    let (st, v) = s.settle("q", token, "complete", json!({})).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["sequence_number"], 1);
    assert_problem(
        &s.settle("q", token, "complete", json!({})).await,
        409,
        "lock_lost",
    );
    assert_eq!(
        s.counts("q").await,
        json!({"active": 0, "scheduled": 0, "locked": 0, "deferred": 0, "dead_lettered": 0})
    );
    s.stop().await;
}

#[tokio::test]
async fn binary_bodies_round_trip_as_base64() {
    let s = TestServer::start().await;
    s.queue("q", json!({})).await;
    let (st, _) = s
        .post(
            "/v1/queues/q/messages",
            json!({"body": "AP8Q", "body_encoding": "base64"}),
        )
        .await;
    assert_eq!(st, 201);
    let got = s.receive("q", 1).await;
    assert_eq!(got[0]["body"], "AP8Q");
    assert_eq!(got[0]["body_encoding"], "base64");
    let r = s
        .post(
            "/v1/queues/q/messages",
            json!({"body": "not base64!", "body_encoding": "base64"}),
        )
        .await;
    assert_problem(&r, 400, "malformed_body");
    s.stop().await;
}

#[tokio::test]
async fn bad_sends_are_refused_whole_and_store_nothing() {
    let s = TestServer::start().await;
    s.queue("q", json!({"max_message_size": 10})).await;
    let r = s
        .post(
            "/v1/queues/q/messages",
            json!({"messages": [{"body": "small"}, {"body": "far too large a body"}]}),
        )
        .await;
    assert_problem(&r, 413, "message_too_large");
    assert_eq!(r.1["limit"], 10);
    assert_eq!(r.1["size"], 20);
    assert!(
        r.1["detail"].as_str().unwrap().contains("10"),
        "the limit is in the message"
    );

    let resp = s
        .http
        .post(format!("{}/v1/queues/q/messages", s.url))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let v: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(v["code"], "malformed_body");
    let r = s.post("/v1/queues/q/messages", json!({"body": 5})).await;
    assert_problem(&r, 400, "malformed_body");
    assert!(
        r.1["detail"]
            .as_str()
            .unwrap()
            .contains("expected a string"),
        "{}",
        r.1
    );
    assert_problem(
        &s.post("/v1/queues/q/messages", json!({"messages": []}))
            .await,
        400,
        "invalid_request",
    );
    assert_problem(
        &s.post(
            "/v1/queues/q/messages",
            json!({"body": "x", "properties": {"a": [1]}}),
        )
        .await,
        400,
        "invalid_request",
    );
    assert_problem(
        &s.post(
            "/v1/queues/q/messages",
            json!({"body": "x", "scheduled_enqueue_time": "tomorrow"}),
        )
        .await,
        400,
        "invalid_request",
    );
    assert_problem(
        &s.post(
            "/v1/queues/q/messages",
            json!({"body": "x", "time_to_live_ms": 0}),
        )
        .await,
        400,
        "invalid_request",
    );
    assert_problem(
        &s.post("/v1/queues/nope/messages", json!({"body": "x"}))
            .await,
        404,
        "queue_not_found",
    );
    assert_problem(
        &s.post("/v1/queues/q/receive", json!({"max_messages": 0}))
            .await,
        400,
        "invalid_request",
    );
    assert_problem(
        &s.post("/v1/queues/q/receive", json!({"wait_ms": 20_001}))
            .await,
        400,
        "invalid_request",
    );
    assert_problem(
        &s.post("/v1/queues/q/receive", json!({"lock_duration_ms": 300_001}))
            .await,
        400,
        "invalid_request",
    );
    assert_problem(
        &s.post("/v1/queues/nope/receive", json!({})).await,
        404,
        "queue_not_found",
    );
    assert_eq!(s.counts("q").await["active"], 0);
    s.stop().await;
}

#[tokio::test]
async fn duplicate_id_inside_window_is_accepted_but_not_enqueued() {
    let s = TestServer::start().await;
    s.queue("q", json!({"duplicate_detection_window_ms": 600_000}))
        .await;
    let send = |id: &'static str| {
        s.post(
            "/v1/queues/q/messages",
            json!({"message_id": id, "body": "x"}),
        )
    };
    let (_, a) = send("order-1").await;
    let (st, b) = send("order-1").await;
    assert_eq!(st, 201);
    assert_eq!(b["results"][0]["duplicate"], true);
    assert_eq!(
        b["results"][0]["sequence_number"],
        a["results"][0]["sequence_number"]
    );
    assert_eq!(s.counts("q").await["active"], 1);
    s.advance(600_001);
    let (_, c) = send("order-1").await;
    assert_eq!(
        c["results"][0]["duplicate"], false,
        "after the window it is new again"
    );
    assert_eq!(s.counts("q").await["active"], 2);
    s.stop().await;
}

#[tokio::test]
async fn scheduled_message_waits_for_its_time_and_can_be_cancelled() {
    let s = TestServer::start().await;
    s.queue("q", json!({})).await;
    let at = T0.plus_millis(60_000).to_rfc3339();
    let (_, v) = s.post("/v1/queues/q/messages", json!({"messages": [{"body": "later", "scheduled_enqueue_time": at}, {"body": "cancel me", "scheduled_enqueue_time": at}]})).await;
    let cancel_seq = v["results"][1]["sequence_number"].as_i64().unwrap();
    assert_eq!(s.counts("q").await["scheduled"], 2);
    let (_, peeked) = s.get("/v1/queues/q/messages").await;
    assert_eq!(peeked["messages"][0]["state"], "scheduled");
    assert!(s.receive("q", 10).await.is_empty());
    let (st, _) = s
        .delete(&format!("/v1/queues/q/messages/scheduled/{cancel_seq}"))
        .await;
    assert_eq!(st, 204);
    assert_problem(
        &s.delete(&format!("/v1/queues/q/messages/scheduled/{cancel_seq}"))
            .await,
        404,
        "message_not_found",
    );
    assert_problem(
        &s.delete("/v1/queues/q/messages/scheduled/abc").await,
        400,
        "invalid_request",
    );
    s.advance(60_000);
    let got = s.receive("q", 10).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["body"], "later");
    assert_eq!(got[0]["scheduled_enqueue_time"], at);
    s.stop().await;
}

#[tokio::test]
async fn lock_expiry_counts_as_abandon_and_a_late_settle_is_lock_lost() {
    let s = TestServer::start().await;
    s.queue("q", json!({"lock_duration_ms": 5_000})).await;
    s.send("q", &["a"]).await;
    let first = s.receive("q", 1).await;
    let t1 = first[0]["lock_token"].as_str().unwrap().to_owned();
    assert!(
        s.receive("q", 1).await.is_empty(),
        "locked messages are hidden"
    );
    s.advance(5_000);
    assert_problem(
        &s.settle("q", &t1, "complete", json!({})).await,
        409,
        "lock_lost",
    );
    let second = s.receive("q", 1).await;
    assert_eq!(second[0]["delivery_count"], 2);
    assert_ne!(second[0]["lock_token"], first[0]["lock_token"]);
    s.stop().await;
}

#[tokio::test]
async fn renew_extends_the_lock() {
    let s = TestServer::start().await;
    s.queue("q", json!({"lock_duration_ms": 5_000})).await;
    s.send("q", &["a"]).await;
    let got = s.receive("q", 1).await;
    let tok = got[0]["lock_token"].as_str().unwrap();
    s.advance(4_000);
    let (st, v) = s
        .settle("q", tok, "renew", json!({"lock_duration_ms": 10_000}))
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["locked_until"], T0.plus_millis(14_000).to_rfc3339());
    s.advance(9_000);
    assert!(
        s.receive("q", 1).await.is_empty(),
        "still locked after the original expiry"
    );
    let (st, _) = s.settle("q", tok, "complete", json!({})).await;
    assert_eq!(st, 200);
    s.stop().await;
}

#[tokio::test]
async fn abandon_with_delay_and_with_queue_backoff() {
    let s = TestServer::start().await;
    s.queue(
        "q",
        json!({"redelivery_backoff": {"kind": "fixed", "delay_ms": 10_000}}),
    )
    .await;
    s.send("q", &["a"]).await;
    let got = s.receive("q", 1).await;
    s.settle(
        "q",
        got[0]["lock_token"].as_str().unwrap(),
        "abandon",
        json!({"delay_ms": 2_000}),
    )
    .await;
    assert_eq!(s.counts("q").await["scheduled"], 1);
    assert!(s.receive("q", 1).await.is_empty());
    s.advance(2_000);
    let got = s.receive("q", 1).await;
    assert_eq!(got[0]["delivery_count"], 2);
    s.settle(
        "q",
        got[0]["lock_token"].as_str().unwrap(),
        "abandon",
        json!({}),
    )
    .await;
    s.advance(9_999);
    assert!(
        s.receive("q", 1).await.is_empty(),
        "the queue's backoff holds it"
    );
    s.advance(1);
    assert_eq!(s.receive("q", 1).await[0]["delivery_count"], 3);
    s.stop().await;
}

#[tokio::test]
async fn deferred_message_is_only_receivable_by_sequence_number() {
    let s = TestServer::start().await;
    s.queue("q", json!({})).await;
    let seqs = s.send("q", &["a"]).await;
    let got = s.receive("q", 1).await;
    let (st, _) = s
        .settle(
            "q",
            got[0]["lock_token"].as_str().unwrap(),
            "defer",
            json!({}),
        )
        .await;
    assert_eq!(st, 200);
    assert_eq!(s.counts("q").await["deferred"], 1);
    assert!(s.receive("q", 1).await.is_empty());
    let (st, v) = s
        .post(
            "/v1/queues/q/messages/deferred/receive",
            json!({"sequence_numbers": [seqs[0]]}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let m = &v["messages"][0];
    assert_eq!(m["delivery_count"], 2);
    let (st, _) = s
        .settle(
            "q",
            m["lock_token"].as_str().unwrap(),
            "complete",
            json!({}),
        )
        .await;
    assert_eq!(st, 200);
    let r = s
        .post(
            "/v1/queues/q/messages/deferred/receive",
            json!({"sequence_numbers": [seqs[0]]}),
        )
        .await;
    assert_problem(&r, 404, "message_not_found");
    s.stop().await;
}

#[tokio::test]
async fn batch_settle_judges_each_item_on_its_own() {
    let s = TestServer::start().await;
    s.queue("q", json!({})).await;
    s.send("q", &["a", "b"]).await;
    let got = s.receive("q", 2).await;
    let (st, v) = s
        .post(
            "/v1/queues/q/settle",
            json!({"settlements": [
                {"lock_token": got[0]["lock_token"], "action": "complete"},
                {"lock_token": "lk_unknown", "action": "complete"},
                {"lock_token": got[1]["lock_token"], "action": "dead_letter", "reason": "Bad", "description": "no"}
            ]}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let r = v["results"].as_array().unwrap();
    assert!(r[0]["error"].is_null());
    assert_eq!(r[1]["error"]["code"], "lock_lost");
    assert!(r[2]["dead_letter_id"].as_str().unwrap().starts_with("dl_"));
    assert_eq!(s.counts("q").await["dead_lettered"], 1);
    assert_problem(
        &s.settle("q", "lk_x", "dead_letter", json!({})).await,
        400,
        "invalid_request",
    );
    assert_problem(
        &s.post(
            "/v1/queues/q/settle",
            json!({"lock_token": "x", "action": "explode"}),
        )
        .await,
        400,
        "malformed_body",
    );
    s.stop().await;
}

#[tokio::test]
async fn peek_browses_from_a_sequence_without_locking() {
    let s = TestServer::start().await;
    s.queue("q", json!({})).await;
    s.send("q", &["a", "b", "c"]).await;
    let (st, v) = s.get("/v1/queues/q/messages?from_sequence=2&limit=5").await;
    assert_eq!(st, 200);
    let bodies: Vec<&str> = v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["body"].as_str().unwrap())
        .collect();
    assert_eq!(bodies, vec!["b", "c"]);
    assert_eq!(v["messages"][0]["delivery_count"], 0);
    assert!(v["messages"][0]["lock_token"].is_null());
    assert_eq!(s.receive("q", 3).await.len(), 3, "peek locked nothing");
    assert_problem(
        &s.get("/v1/queues/q/messages?limit=abc").await,
        400,
        "invalid_request",
    );
    s.stop().await;
}

#[tokio::test]
async fn expired_message_is_never_delivered() {
    let s = TestServer::start().await;
    s.queue("keep", json!({"dead_letter_on_expiry": true}))
        .await;
    s.queue("drop", json!({"default_ttl_ms": 1_000})).await;
    s.post(
        "/v1/queues/keep/messages",
        json!({"body": "k", "time_to_live_ms": 1_000}),
    )
    .await;
    s.send("drop", &["d"]).await;
    s.advance(1_000);
    assert!(s.receive("keep", 1).await.is_empty());
    assert!(s.receive("drop", 1).await.is_empty());
    let (_, page) = s.get("/v1/queues/keep/dead-letters").await;
    let rec = &page["dead_letters"][0];
    assert_eq!(rec["reason"], "TTLExpired");
    assert_eq!(rec["delivery_count"], 0);
    assert_eq!(rec["routed_by"], "broker");
    assert_eq!(s.counts("drop").await["dead_lettered"], 0);
    let text = s.metrics().await;
    assert!(
        text.contains("redrive_messages_expired_total{queue=\"drop\"} 1"),
        "{text}"
    );
    s.stop().await;
}

#[tokio::test]
async fn long_poll_is_woken_by_a_send() {
    let s = TestServer::start().await;
    s.queue("q", json!({})).await;
    let before = s.clock().sleepers();
    let poll = s.spawn_receive("q", json!({"wait_ms": 20_000}));
    s.until_parked(before).await;
    s.send("q", &["wake"]).await;
    let v = poll.await.unwrap();
    assert_eq!(v["messages"][0]["body"], "wake");
    s.stop().await;
}

#[tokio::test]
async fn long_poll_ends_empty_at_its_wait_time() {
    let s = TestServer::start().await;
    s.queue("q", json!({})).await;
    // Parked by its own deadline: the count of sleepers also grows when a worker sleeps
    // again, and advancing before the poll sleeps would leave it waiting forever.
    let poll = s.spawn_receive("q", json!({"wait_ms": 5_000}));
    s.until_parked_at(T0.plus_millis(5_000)).await;
    s.advance(5_000);
    let v = poll.await.unwrap();
    assert_eq!(v["messages"], json!([]));
    s.stop().await;
}

#[tokio::test]
async fn long_poll_wakes_when_a_scheduled_message_comes_due() {
    let s = TestServer::start().await;
    s.queue("q", json!({})).await;
    s.post(
        "/v1/queues/q/messages",
        json!({"body": "due", "scheduled_enqueue_time": T0.plus_millis(3_000).to_rfc3339()}),
    )
    .await;
    // It sleeps until the message comes due (before its own deadline).
    let poll = s.spawn_receive("q", json!({"wait_ms": 20_000}));
    s.until_parked_at(T0.plus_millis(3_000)).await;
    s.advance(3_000);
    let v = poll.await.unwrap();
    assert_eq!(v["messages"][0]["body"], "due");
    s.stop().await;
}

#[tokio::test]
async fn properties_and_headers_count_against_the_size_limit_and_are_bounded() {
    let s = TestServer::start().await;
    s.queue("q", json!({"max_message_size": 1024})).await;
    // A small body with a large property: the property counts.
    let r = s
        .post(
            "/v1/queues/q/messages",
            json!({"body": "x", "properties": {"big": "y".repeat(2_000)}}),
        )
        .await;
    assert_problem(&r, 413, "message_too_large");
    assert_eq!(r.1["limit"], 1024);
    assert!(r.1["size"].as_u64().unwrap() > 2_000, "{}", r.1);
    // The content type counts, and has a bound of its own.
    let r = s
        .post(
            "/v1/queues/q/messages",
            json!({"body": "x", "content_type": "a".repeat(1_100)}),
        )
        .await;
    assert_problem(&r, 400, "invalid_request");
    assert_eq!(r.1["field"], "content_type");
    // Body, property names and values, and the string headers are summed.
    let r = s
        .post(
            "/v1/queues/q/messages",
            json!({"body": "b".repeat(600), "correlation_id": "c".repeat(100),
                   "properties": {"p".repeat(100): "v".repeat(250)}}),
        )
        .await;
    assert_problem(&r, 413, "message_too_large");
    assert_eq!(r.1["size"], 600 + 100 + 100 + 250);

    // Bounds that hold whatever the queue's limit.
    s.queue("big", json!({"max_message_size": 10_485_760}))
        .await;
    let refused = [
        json!({"body": "x", "content_type": "a".repeat(257)}),
        json!({"body": "x", "session_id": "s".repeat(129)}),
        json!({"body": "x", "message_id": "m".repeat(129)}),
        json!({"body": "x", "properties": {"n".repeat(257): 1}}),
        json!({"body": "x", "properties": {"p": "v".repeat(40_000)}}),
        json!({"body": "x", "properties": (0..257)
            .map(|i| (format!("p{i}"), json!(i)))
            .collect::<serde_json::Map<_, _>>()}),
        json!({"body": "x", "properties": (0..3)
            .map(|i| (format!("p{i}"), json!("v".repeat(30_000))))
            .collect::<serde_json::Map<_, _>>()}),
    ];
    for body in refused {
        let r = s.post("/v1/queues/big/messages", body).await;
        assert_problem(&r, 400, "invalid_request");
    }
    // A property of 100 MiB on a queue whose limit is 256 MiB: refused, not stored.
    s.queue("huge", json!({"max_message_size": 268_435_456}))
        .await;
    let r = s
        .post(
            "/v1/queues/huge/messages",
            json!({"body": "x", "properties": {"p": "v".repeat(100 << 20)}}),
        )
        .await;
    assert_problem(&r, 400, "invalid_request");
    for q in ["q", "big", "huge"] {
        let (_, peeked) = s.get(&format!("/v1/queues/{q}/messages")).await;
        assert_eq!(peeked["messages"], json!([]), "nothing stored on {q}");
    }
    // At the bounds: accepted.
    let (st, v) = s
        .post(
            "/v1/queues/big/messages",
            json!({"body": "x", "content_type": "a".repeat(256), "session_id": "s".repeat(128),
                   "properties": {"n".repeat(256): "v".repeat(30_000)}}),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    s.stop().await;
}
