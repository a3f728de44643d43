//! Failures by signature (`GET /v1/failures`) and the narrower filters of the dead-letter
//! list, on every backend.

use redrive_broker::AccessSettings;
use redrive_testkit::{ADMIN, Backend, TestServer, assert_problem};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn on() -> AccessSettings {
    AccessSettings {
        enabled: true,
        ..AccessSettings::default()
    }
}

async fn server(backend: Backend) -> TestServer {
    let s = TestServer::builder()
        .backend(backend)
        .auth(on())
        .start()
        .await;
    for q in ["orders", "billing"] {
        let (st, v) = s
            .admin(
                Method::POST,
                "/v1/queues",
                Some(json!({"name": q, "policy": {}})),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
    }
    s
}

/// Sends `message` to `queue`, receives it and dead-letters it with `reason` and
/// `description`; returns the record id.
async fn dead_letter(
    s: &TestServer,
    queue: &str,
    message: Value,
    reason: &str,
    description: &str,
) -> String {
    let (st, v) = s
        .admin(
            Method::POST,
            &format!("/v1/queues/{queue}/messages"),
            Some(message),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, v) = s
        .admin(
            Method::POST,
            &format!("/v1/queues/{queue}/receive"),
            Some(json!({"max_messages": 1})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let token = v["messages"][0]["lock_token"].as_str().unwrap().to_owned();
    let (st, v) = s
        .admin(
            Method::POST,
            &format!("/v1/queues/{queue}/settle"),
            Some(json!({"lock_token": token, "action": "dead_letter",
                        "reason": reason, "description": description})),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["dead_letter_id"].as_str().unwrap().to_owned()
}

async fn get_as(s: &TestServer, token: &str, path: &str) -> (StatusCode, Value) {
    s.call_as(Some(token), Method::GET, path, None).await
}

fn ids(page: &Value, key: &str) -> Vec<String> {
    page[key]
        .as_array()
        .unwrap_or_else(|| panic!("{page}"))
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn signatures_scenario(s: &TestServer) {
    let a = dead_letter(
        s,
        "orders",
        json!({"body": "1", "type": "order.created"}),
        "ValidationFailed",
        "no amount in order ord_7Hx91KzQ (line 3)",
    )
    .await;
    s.advance(1_000);
    let b = dead_letter(
        s,
        "orders",
        json!({"body": "2", "type": "order.created"}),
        "ValidationFailed",
        "no amount in order ord_3Jd82LpA (line 17)",
    )
    .await;
    s.advance(1_000);
    dead_letter(
        s,
        "orders",
        json!({"body": "3", "type": "order.created"}),
        "PriceMissing",
        "no amount in order ord_3Jd82LpA (line 17)",
    )
    .await;
    s.advance(1_000);
    dead_letter(
        s,
        "billing",
        json!({"body": "4"}),
        "Declined",
        "card 4242 declined",
    )
    .await;

    let (st, page) = get_as(s, ADMIN, "/v1/failures").await;
    assert_eq!(st, StatusCode::OK, "{page}");
    let sigs = page["signatures"].as_array().unwrap();
    assert_eq!(sigs.len(), 3, "{page}");
    assert!(page["next_cursor"].is_null());
    // Newest first: billing, then the two of orders.
    assert_eq!(sigs[0]["queue"], "billing");
    assert_eq!(sigs[0]["description"], "card <n> declined");
    let grouped = &sigs[2];
    assert_eq!(grouped["queue"], "orders");
    assert_eq!(grouped["reason"], "ValidationFailed");
    assert_eq!(grouped["description"], "no amount in order <id> (line <n>)");
    assert_eq!(grouped["message_type"], "order.created");
    assert_eq!(grouped["outcome_class"], "handler_error");
    assert_eq!(grouped["route_kind"], "application_quarantined");
    assert_eq!(
        (grouped["count"].as_u64(), grouped["live"].as_u64()),
        (Some(2), Some(2))
    );
    let spark = grouped["sparkline"].as_array().unwrap();
    assert_eq!(spark.len(), 24);
    assert_eq!(spark[23], 2);
    // A different reason is another signature.
    assert_eq!(sigs[1]["reason"], "PriceMissing");
    assert_ne!(sigs[1]["id"], grouped["id"]);

    // `signature=` on the dead-letter list returns exactly that group's records.
    let id = grouped["id"].as_str().unwrap();
    let (st, list) = get_as(
        s,
        ADMIN,
        &format!("/v1/queues/orders/dead-letters?signature={id}"),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{list}");
    assert_eq!(ids(&list, "dead_letters"), [a, b]);

    // Pages by cursor.
    let (_, p1) = get_as(s, ADMIN, "/v1/failures?limit=2").await;
    assert_eq!(p1["signatures"].as_array().unwrap().len(), 2);
    let cursor = p1["next_cursor"].as_str().unwrap();
    let (_, p2) = get_as(s, ADMIN, &format!("/v1/failures?limit=2&cursor={cursor}")).await;
    assert_eq!(ids(&p2, "signatures"), [id.to_owned()]);
    let (_, one) = get_as(s, ADMIN, "/v1/failures?queue=billing").await;
    assert_eq!(one["signatures"].as_array().unwrap().len(), 1);
    let (_, none) = get_as(s, ADMIN, "/v1/failures?area=quarantine").await;
    assert!(none["signatures"].as_array().unwrap().is_empty());

    // A caller sees only the queues whose dead letters it may read.
    let (_, billing) = s.token("billing-ops", &["operator:billing"]).await;
    let (st, mine) = get_as(s, &billing, "/v1/failures").await;
    assert_eq!(st, StatusCode::OK, "{mine}");
    let queues: Vec<&str> = mine["signatures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["queue"].as_str().unwrap())
        .collect();
    assert_eq!(queues, ["billing"]);
    assert_problem(
        &get_as(s, &billing, "/v1/failures?queue=orders").await,
        403,
        "forbidden",
    );
    let (_, sender) = s.token("sender", &["producer:*"]).await;
    assert_problem(&get_as(s, &sender, "/v1/failures").await, 403, "forbidden");

    // Bounded and checked.
    for bad in [
        "/v1/failures?limit=0",
        "/v1/failures?limit=501",
        "/v1/failures?cursor=dl_1",
        "/v1/failures?area=lost",
        "/v1/failures?from=yesterday",
        "/v1/failures?nothing=1",
    ] {
        assert_problem(&get_as(s, ADMIN, bad).await, 400, "invalid_request");
    }
    assert_problem(
        &get_as(s, ADMIN, "/v1/failures?queue=nowhere").await,
        404,
        "queue_not_found",
    );
}

#[tokio::test]
async fn failures_are_grouped_by_signature_on_every_backend() {
    for backend in Backend::all("failures by signature") {
        let s = server(backend).await;
        signatures_scenario(&s).await;
        s.stop().await;
    }
}

async fn filters_scenario(s: &TestServer) {
    let a = dead_letter(
        s,
        "orders",
        json!({"body": "a", "type": "order.paid", "properties": {"source": "/shop"}}),
        "Bad",
        "Payment TIMEOUT after 30 s",
    )
    .await;
    let b = dead_letter(
        s,
        "orders",
        json!({"body": "b", "type": "order.created", "properties": {"source": "/shop"}}),
        "Bad",
        "stock missing",
    )
    .await;
    let c = dead_letter(
        s,
        "orders",
        json!({"body": "c", "type": "order.paid", "properties": {"source": "/billing"}}),
        "Bad",
        "payment timeout after 31 s",
    )
    .await;
    let list = |q: &'static str| async move {
        let (st, v) = get_as(s, ADMIN, &format!("/v1/queues/orders/dead-letters?{q}")).await;
        assert_eq!(st, StatusCode::OK, "{q}: {v}");
        v
    };
    assert_eq!(
        ids(&list("type=order.paid").await, "dead_letters"),
        [a.clone(), c.clone()]
    );
    assert_eq!(
        ids(&list("source=%2Fshop").await, "dead_letters"),
        [a.clone(), b.clone()]
    );
    assert_eq!(
        ids(&list("text=timeout%20AFTER").await, "dead_letters"),
        [a.clone(), c.clone()]
    );
    assert_eq!(ids(&list("quality=exact").await, "dead_letters").len(), 3);
    assert!(ids(&list("quality=approximate").await, "dead_letters").is_empty());
    let paged = list("type=order.paid&limit=1").await;
    assert_eq!(ids(&paged, "dead_letters"), [a.as_str()]);
    let cursor = paged["next_cursor"].as_str().unwrap().to_owned();
    let (_, next) = get_as(
        s,
        ADMIN,
        &format!("/v1/queues/orders/dead-letters?type=order.paid&limit=1&cursor={cursor}"),
    )
    .await;
    assert_eq!(ids(&next, "dead_letters"), [c.as_str()]);

    // payload=false: no bodies even for a payload reader, and no payload read audited.
    let reads = s.audit("action=dead_letter.read").await.len();
    let bare = list("payload=false").await;
    assert_eq!(bare["dead_letters"].as_array().unwrap().len(), 3);
    assert!(
        bare["dead_letters"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r.get("body").is_none())
    );
    assert_eq!(s.audit("action=dead_letter.read").await.len(), reads);
    let full = list("payload=true").await;
    assert_eq!(full["dead_letters"][0]["body"], "a");

    let long = "x".repeat(201);
    for bad in [
        "quality=sometimes".to_owned(),
        format!("text={long}"),
        "text=".to_owned(),
        "signature=abc".to_owned(),
        "payload=maybe".to_owned(),
    ] {
        assert_problem(
            &get_as(s, ADMIN, &format!("/v1/queues/orders/dead-letters?{bad}")).await,
            400,
            "invalid_request",
        );
    }
}

#[tokio::test]
async fn dead_letter_list_filters_are_checked_and_served_by_the_store_on_every_backend() {
    for backend in Backend::all("dead-letter list filters") {
        let s = server(backend).await;
        filters_scenario(&s).await;
        s.stop().await;
    }
}
