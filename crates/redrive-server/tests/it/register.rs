//! The idempotency register over HTTP, on SQLite and PostgreSQL: set, replace, list,
//! delete; bad keys and bodies are 400 and change nothing; a producer is refused (403)
//! and a replayer may only read; every change is in the audit log with its actor, an
//! unchanged set is not.

use redrive_broker::AccessSettings;
use redrive_testkit::{Backend, TestServer};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

async fn scenario(s: &TestServer) {
    // Declaring a type idempotent lets replays deliver it: the operator is a replayer too.
    let (ops_id, ops) = s.token("ops", &["operator", "replayer"]).await;
    let (_, prod) = s.token("prod", &["producer"]).await;
    let (_, replayer) = s.token("replay", &["replayer"]).await;
    let put = |secret: String, key: &'static str, body: Value| async move {
        s.call_as(
            Some(&secret),
            Method::PUT,
            &format!("/v1/register/{key}"),
            Some(body),
        )
        .await
    };

    let (st, v) = put(
        ops.clone(),
        "order.created",
        json!({"answer": "idempotent", "ordering_attribute": "sequence"}),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["changed"], true);
    assert_eq!(v["entry"]["key"], "order.created");
    assert_eq!(v["entry"]["ordering_attribute"], "sequence");
    assert!(v.get("previous").is_none(), "{v}");
    // The same entry again: nothing changes, nothing is audited.
    let (st, v) = put(
        ops.clone(),
        "order.created",
        json!({"answer": "idempotent", "ordering_attribute": "sequence"}),
    )
    .await;
    assert_eq!((st, &v["changed"]), (StatusCode::OK, &json!(false)), "{v}");
    let (st, v) = put(ops.clone(), "orders:*", json!({"answer": "not_idempotent"})).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (st, v) = put(
        ops.clone(),
        "order.created",
        json!({"answer": "not_idempotent"}),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["previous"]["answer"], "idempotent");

    // Bad input: 400, nothing changed.
    for (key, body) in [
        ("a%20b", json!({"answer": "idempotent"})),
        ("orders:x", json!({"answer": "idempotent"})),
        ("t", json!({"answer": "maybe"})),
        (
            "t",
            json!({"answer": "not_idempotent", "ordering_attribute": "seq"}),
        ),
        (
            "t",
            json!({"answer": "idempotent", "ordering_attribute": ""}),
        ),
        ("t", json!({"answer": "idempotent", "extra": 1})),
    ] {
        let (st, v) = put(ops.clone(), key, body).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{key}: {v}");
    }

    // A producer may neither read nor change it; a replayer reads only.
    let (st, _) = put(prod.clone(), "t", json!({"answer": "idempotent"})).await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    let (st, _) = s
        .call_as(Some(&prod), Method::GET, "/v1/register", None)
        .await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    let (st, _) = put(replayer.clone(), "t", json!({"answer": "idempotent"})).await;
    assert_eq!(st, StatusCode::FORBIDDEN);
    let (st, v) = s
        .call_as(Some(&replayer), Method::GET, "/v1/register", None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let keys: Vec<&str> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["order.created", "orders:*"]);
    let (_, v) = s
        .call_as(Some(&ops), Method::GET, "/v1/register?limit=1", None)
        .await;
    assert_eq!(v["next_cursor"], "order.created");
    let (_, v) = s
        .call_as(
            Some(&ops),
            Method::GET,
            "/v1/register?limit=1&cursor=order.created",
            None,
        )
        .await;
    assert_eq!(v["entries"][0]["key"], "orders:*");

    let (st, v) = s
        .call_as(Some(&ops), Method::DELETE, "/v1/register/orders:*", None)
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["answer"], "not_idempotent");
    let (st, v) = s
        .call_as(Some(&ops), Method::DELETE, "/v1/register/orders:*", None)
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND, "{v}");
    assert_eq!(v["code"], "register_entry_not_found");

    let audit = s.audit("limit=1000").await;
    let changes: Vec<(&str, &str, &Value)> = audit
        .iter()
        .filter(|e| e["action"].as_str().unwrap().starts_with("register."))
        .map(|e| {
            (
                e["action"].as_str().unwrap(),
                e["actor_id"].as_str().unwrap(),
                &e["targets"][0],
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            ("register.set", ops_id.as_str(), &json!("order.created")),
            ("register.set", ops_id.as_str(), &json!("orders:*")),
            ("register.set", ops_id.as_str(), &json!("order.created")),
            ("register.delete", ops_id.as_str(), &json!("orders:*")),
        ]
    );
    assert!(
        audit
            .iter()
            .any(|e| e["action"] == "denied:ManageRegister" && e["actor_name"] == "prod")
    );
}

fn on() -> AccessSettings {
    AccessSettings {
        enabled: true,
        ..AccessSettings::default()
    }
}

#[tokio::test]
async fn the_register_is_set_listed_deleted_and_audited_on_sqlite() {
    let s = TestServer::builder().auth(on()).start().await;
    scenario(&s).await;
    s.stop().await;
}

#[tokio::test]
async fn the_register_is_set_listed_deleted_and_audited_on_postgres() {
    let Some(postgres) = Backend::postgres("the idempotency register on PostgreSQL") else {
        return;
    };
    let s = TestServer::builder()
        .backend(postgres)
        .auth(on())
        .start()
        .await;
    scenario(&s).await;
    s.stop().await;
}
