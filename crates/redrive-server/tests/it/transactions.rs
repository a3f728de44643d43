//! `POST /v1/transactions` over HTTP: the seed's complete-and-send-the-follow-up on both
//! backends, a refused operation named with its own problem and nothing applied, each
//! operation checked and authorized as its single route, the bounds, the audit entries,
//! and the origin properties of a dead letter the group forwards to a dead-letter queue.

use redrive_broker::AccessSettings;
use redrive_testkit::{Backend, TestServer, assert_problem};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

async fn transaction(s: &TestServer, ops: Value) -> (StatusCode, Value) {
    s.post("/v1/transactions", json!({ "operations": ops }))
        .await
}

async fn transaction_as(s: &TestServer, token: &str, ops: Value) -> (StatusCode, Value) {
    s.call_as(
        Some(token),
        Method::POST,
        "/v1/transactions",
        Some(json!({ "operations": ops })),
    )
    .await
}

/// A request declaring a body one byte over the route's bound, without sending it; the
/// answer's head and body as text.
async fn declared_over_the_bound(s: &TestServer) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut c = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let head = format!(
        "POST /v1/transactions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        s.addr,
        32 * 1024 * 1024 + 1
    );
    c.write_all(head.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    // The answer comes without the body being sent; its end is the problem's last brace.
    while !seen.ends_with(b"}") {
        let n = c.read(&mut buf).await.unwrap();
        assert!(n > 0, "the connection closed before the answer");
        seen.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// The answer has exactly the fields the OpenAPI document gives it, the required ones
/// present.
fn fits_the_document(answer: &Value) {
    let doc: Value = serde_json::from_str(redrive_api::OPENAPI_JSON).unwrap();
    let schemas = &doc["components"]["schemas"];
    let check = |schema: &Value, v: &Value| {
        let props = schema["properties"].as_object().unwrap();
        for (k, _) in v.as_object().unwrap() {
            assert!(props.contains_key(k), "`{k}` is not documented: {v}");
        }
        for r in schema["required"].as_array().unwrap() {
            assert!(v.get(r.as_str().unwrap()).is_some(), "{r} is missing: {v}");
        }
    };
    check(&schemas["TransactionResponse"], answer);
    for r in answer["results"].as_array().unwrap() {
        check(&schemas["OperationResult"], r);
    }
}

fn token_of(delivery: &Value) -> String {
    delivery["lock_token"].as_str().unwrap().to_owned()
}

async fn ids(s: &TestServer, queue: &str) -> Vec<String> {
    let (st, v) = s
        .get(&format!("/v1/queues/{queue}/messages?limit=100"))
        .await;
    assert_eq!(st, 200, "{v}");
    v["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["message_id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_transaction_completes_the_original_and_sends_its_follow_up() {
    for backend in Backend::all("the transaction round trip") {
        let s = TestServer::builder().backend(backend).start().await;
        s.queue("orders", json!({})).await;
        s.queue(
            "payments",
            json!({"duplicate_detection_window_ms": 600_000}),
        )
        .await;
        s.send("orders", &["order-1"]).await;
        let got = s.receive("orders", 1).await;
        let original = got[0]["message_id"].as_str().unwrap().to_owned();

        let (st, v) = transaction(
            &s,
            json!([
                {"kind": "send", "queue": "payments",
                 "message": {"message_id": format!("charge-{original}"), "body": "charge"}},
                {"kind": "complete", "queue": "orders", "lock_token": token_of(&got[0])},
            ]),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        let tx = v["transaction_id"].as_str().unwrap().to_owned();
        assert!(tx.starts_with("tx_"), "{v}");
        assert_eq!(v["results"][0]["kind"], "send");
        assert_eq!(v["results"][0]["queue"], "payments");
        assert_eq!(v["results"][0]["sequence_number"], 1);
        assert_eq!(v["results"][0]["duplicate"], false);
        assert_eq!(v["results"][1]["kind"], "complete");
        assert_eq!(v["results"][1]["message_id"], original.as_str());
        assert!(ids(&s, "orders").await.is_empty());
        assert_eq!(ids(&s, "payments").await, [format!("charge-{original}")]);
        fits_the_document(&v);

        // Audited like its parts: each decision, and the transaction naming them.
        let entries = s.audit("limit=100").await;
        let of = |action: &str| -> Vec<&Value> {
            entries.iter().filter(|e| e["action"] == action).collect()
        };
        let whole = of("transaction");
        assert_eq!(whole.len(), 1, "{entries:?}");
        assert_eq!(whole[0]["outcome"], "ok");
        let targets: Vec<&str> = whole[0]["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap())
            .collect();
        assert_eq!(
            targets,
            [
                format!("id={tx}").as_str(),
                "0:send:payments",
                "1:complete:orders"
            ]
        );
        for (action, entity) in [("message.send", "payments"), ("message.complete", "orders")] {
            let e = of(action);
            assert_eq!(e.len(), 1, "{action}: {entries:?}");
            assert_eq!(e[0]["entity"], entity);
            assert!(
                e[0]["targets"]
                    .as_array()
                    .unwrap()
                    .contains(&json!(format!("transaction={tx}"))),
                "{}",
                e[0]
            );
        }
        s.stop().await;
    }
}

#[tokio::test]
async fn a_lost_lock_refuses_the_whole_group_and_names_the_operation() {
    for backend in Backend::all("the refused transaction") {
        let s = TestServer::builder().backend(backend).start().await;
        s.queue("orders", json!({"lock_duration_ms": 10_000})).await;
        s.queue("payments", json!({})).await;
        s.send("orders", &["a", "b"]).await;
        let got = s.receive("orders", 2).await;
        // `b`'s lock is settled already; `a`'s still held.
        let (st, v) = s
            .settle("orders", &token_of(&got[1]), "complete", json!({}))
            .await;
        assert_eq!(st, 200, "{v}");

        let r = transaction(
            &s,
            json!([
                {"kind": "send", "queue": "payments", "message": {"body": "follow-up"}},
                {"kind": "complete", "queue": "orders", "lock_token": token_of(&got[0])},
                {"kind": "complete", "queue": "orders", "lock_token": token_of(&got[1])},
            ]),
        )
        .await;
        assert_problem(&r, 409, "lock_lost");
        assert_eq!(r.1["operation"], 2, "{}", r.1);
        assert_eq!(r.1["kind"], "complete");
        assert!(
            r.1["detail"]
                .as_str()
                .unwrap()
                .contains("nothing of the transaction was applied"),
            "{}",
            r.1
        );
        assert!(ids(&s, "payments").await.is_empty());
        assert_eq!(s.counts("orders").await["locked"], 1);
        let refused = s.audit("action=transaction").await;
        assert_eq!(refused.len(), 1);
        // The outcome names the error as other audited refusals do.
        assert_eq!(refused[0]["outcome"], "error:locklost");
        assert!(
            refused[0]["targets"]
                .as_array()
                .unwrap()
                .contains(&json!("refused=2"))
        );
        assert!(s.audit("action=message.complete").await.is_empty());

        // A string no lock can have (a NUL, past a token's length) is a lost lock too, on
        // PostgreSQL as on SQLite, and nothing before it applies.
        for bad in ["lk_\u{0}x".to_owned(), format!("lk_{}", "9".repeat(65))] {
            let r = transaction(
                &s,
                json!([
                    {"kind": "send", "queue": "payments", "message": {"body": "follow-up"}},
                    {"kind": "complete", "queue": "orders", "lock_token": bad},
                ]),
            )
            .await;
            assert_problem(&r, 409, "lock_lost");
            assert_eq!(r.1["operation"], 1, "{}", r.1);
            assert!(ids(&s, "payments").await.is_empty());
        }

        // A lock that ran out on the clock is lost too.
        s.advance_secs(11);
        let r = transaction(
            &s,
            json!([{"kind": "abandon", "queue": "orders", "lock_token": token_of(&got[0])}]),
        )
        .await;
        assert_problem(&r, 409, "lock_lost");
        assert_eq!(r.1["operation"], 0);
        assert_eq!(r.1["kind"], "abandon");
        s.stop().await;
    }
}

#[tokio::test]
async fn each_operation_is_checked_as_its_single_route_checks_it() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    s.queue("small", json!({"max_message_size": 1024})).await;
    s.queue("sessions", json!({"requires_session": true})).await;
    s.send("orders", &["a"]).await;
    let got = s.receive("orders", 1).await;
    let complete = json!({"kind": "complete", "queue": "orders", "lock_token": token_of(&got[0])});

    let r = transaction(
        &s,
        json!([complete, complete.clone(), {"kind": "send", "queue": "small",
            "message": {"body": "x".repeat(2_000)}}]),
    )
    .await;
    assert_problem(&r, 413, "message_too_large");
    assert_eq!(
        (r.1["operation"].clone(), r.1["kind"].clone()),
        (json!(2), json!("send"))
    );

    let r = transaction(
        &s,
        json!([{"kind": "dead_letter", "queue": "orders", "lock_token": token_of(&got[0]),
            "reason": "MaxDeliveryCountExceeded"}]),
    )
    .await;
    assert_problem(&r, 400, "invalid_request");
    assert_eq!(r.1["field"], "reason");
    assert_eq!(r.1["operation"], 0);
    assert_eq!(r.1["kind"], "dead_letter");

    let r = transaction(
        &s,
        json!([complete, {"kind": "send", "queue": "nowhere", "message": {"body": "x"}}]),
    )
    .await;
    assert_problem(&r, 404, "queue_not_found");
    assert_eq!(r.1["operation"], 1);

    let r = transaction(
        &s,
        json!([complete, {"kind": "send", "queue": "sessions", "message": {"body": "x"}}]),
    )
    .await;
    assert_problem(&r, 400, "session_required");
    assert_eq!(r.1["operation"], 1);

    let r = transaction(
        &s,
        json!([complete, {"kind": "cancel_scheduled", "queue": "orders", "sequence_number": 1}]),
    )
    .await;
    assert_problem(&r, 404, "message_not_found");
    assert_eq!(r.1["kind"], "cancel_scheduled");

    let r = transaction(
        &s,
        json!([complete, {"kind": "send", "queue": "orders",
            "message": {"body": "%%%", "body_encoding": "base64"}}]),
    )
    .await;
    assert_problem(&r, 400, "malformed_body");
    assert_eq!(r.1["operation"], 1);

    let r = transaction(
        &s,
        json!([{"kind": "renew", "queue": "orders", "lock_token": token_of(&got[0]),
            "lock_duration_ms": 10}]),
    )
    .await;
    assert_problem(&r, 400, "invalid_request");
    assert_eq!(r.1["field"], "lock_duration_ms");

    // The bounds of the group.
    assert_problem(&transaction(&s, json!([])).await, 400, "invalid_request");
    let many: Vec<Value> = (0..101).map(|_| complete.clone()).collect();
    let r = transaction(&s, Value::Array(many)).await;
    assert_problem(&r, 400, "invalid_request");
    assert_eq!(r.1["limit"], 100);
    let r = transaction(&s, json!([{"kind": "teleport", "queue": "orders"}])).await;
    assert_problem(&r, 400, "malformed_body");
    let r = transaction(
        &s,
        json!([{"kind": "complete", "queue": "orders",
        "lock_token": "t", "delay_ms": 5}]),
    )
    .await;
    assert_problem(&r, 400, "malformed_body");
    // A body over the route's bound is refused by its declared length, unread.
    let answer = declared_over_the_bound(&s).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("message_too_large"), "{answer}");
    assert!(
        answer.contains(&format!("\"limit\":{}", 32 * 1024 * 1024)),
        "{answer}"
    );

    // Nothing of any refused group was applied: the delivery is still locked, and it
    // still settles in a group of its own.
    assert_eq!(s.counts("orders").await["locked"], 1);
    let (st, v) = transaction(&s, json!([complete])).await;
    assert_eq!(st, 200, "{v}");
    assert!(ids(&s, "orders").await.is_empty());
    s.stop().await;
}

#[tokio::test]
async fn each_operation_needs_its_single_route_s_role_on_its_queue() {
    let s = TestServer::builder()
        .auth(AccessSettings {
            enabled: true,
            ..AccessSettings::default()
        })
        .start()
        .await;
    for q in ["orders", "payments"] {
        let (st, v) = s
            .admin(Method::POST, "/v1/queues", Some(json!({"name": q})))
            .await;
        assert_eq!(st, 201, "{v}");
    }
    let (st, v) = s
        .admin(
            Method::POST,
            "/v1/queues/orders/messages",
            Some(json!({"body": "order"})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let (_, worker) = s
        .token("worker", &["consumer:orders", "producer:payments"])
        .await;
    let (_, reader) = s.token("reader", &["consumer:orders"]).await;
    let (_, operator) = s.token("operator", &["operator"]).await;
    let (st, v) = s
        .call_as(
            Some(&worker),
            Method::POST,
            "/v1/queues/orders/receive",
            Some(json!({})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let token = token_of(&v["messages"][0]);
    let group = json!([
        {"kind": "complete", "queue": "orders", "lock_token": token},
        {"kind": "send", "queue": "payments", "message": {"body": "charge"}},
    ]);

    // No producer or consumer grant at all: the route itself is refused.
    let r = transaction_as(&s, &operator, group.clone()).await;
    assert_problem(&r, 403, "forbidden");
    // A consumer of orders may complete there but not send to payments.
    let r = transaction_as(&s, &reader, group.clone()).await;
    assert_problem(&r, 403, "forbidden");
    assert_eq!(r.1["operation"], 1, "{}", r.1);
    assert_eq!(r.1["kind"], "send");
    assert_eq!(r.1["permission"], "Send");
    assert_eq!(r.1["needs"], "producer");
    assert_eq!(r.1["entity"], "payments");
    let (st, v) = s.admin(Method::GET, "/v1/queues/orders", None).await;
    assert_eq!(st, 200);
    assert_eq!(v["counts"]["locked"], 1, "nothing was applied: {v}");
    let denied = s.audit("action=denied%3ASend").await;
    assert!(
        denied
            .iter()
            .any(|e| e["actor_name"] == "reader" && e["entity"] == "payments"),
        "{denied:?}"
    );

    let (st, v) = transaction_as(&s, &worker, group).await;
    assert_eq!(st, 200, "{v}");
    let (_, v) = s.admin(Method::GET, "/v1/queues/payments", None).await;
    assert_eq!(v["counts"]["active"], 1);
    let parts = s.audit("action=message.send").await;
    assert_eq!(parts[0]["actor_name"], "worker");
    s.stop().await;
}

#[tokio::test]
async fn a_dead_letter_the_group_forwards_carries_its_origin() {
    for backend in Backend::all("the origin of a forwarded dead letter") {
        let s = TestServer::builder().backend(backend).start().await;
        s.queue("numbers-parked", json!({})).await;
        s.queue("numbers", json!({"dead_letter_queue": "numbers-parked"}))
            .await;
        s.queue("evens", json!({})).await;
        s.send("numbers", &["1"]).await;
        let got = s.receive("numbers", 1).await;
        let id = got[0]["message_id"].as_str().unwrap().to_owned();
        let (st, v) = transaction(
            &s,
            json!([
                {"kind": "dead_letter", "queue": "numbers", "lock_token": token_of(&got[0]),
                 "reason": "Odd", "description": "1 is odd"},
                {"kind": "send", "queue": "evens", "message": {"body": "2"}},
            ]),
        )
        .await;
        assert_eq!(st, 200, "{v}");
        assert!(v["results"][0]["dead_letter_id"].is_string(), "{v}");
        let parked = s.receive("numbers-parked", 1).await;
        let props = &parked[0]["properties"];
        assert_eq!(props["REAL_TOPIC"], "numbers", "{props}");
        assert_eq!(props["ORIGIN_MESSAGE_ID"], id.as_str(), "{props}");
        assert_eq!(props["DeadLetterReason"], "Odd");
        assert_eq!(parked[0]["message_id"], id.as_str());
        s.stop().await;
    }
}
