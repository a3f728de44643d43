//! A queue's policy history over HTTP (`GET /v1/queues/{name}/policy/versions`): every
//! create and change is a version, newest first, paged by `before`; bounded, checked, and
//! held to the role that reads the queue. On every backend.

use redrive_broker::AccessSettings;
use redrive_testkit::{ADMIN, Backend, TestServer, assert_problem};
use reqwest::Method;
use serde_json::{Value, json};

fn versions(page: &Value) -> Vec<u64> {
    page["versions"]
        .as_array()
        .unwrap_or_else(|| panic!("{page}"))
        .iter()
        .map(|v| v["version"].as_u64().unwrap())
        .collect()
}

async fn get(s: &TestServer, path: &str) -> (reqwest::StatusCode, Value) {
    s.call_as(Some(ADMIN), Method::GET, path, None).await
}

async fn scenario(s: &TestServer) {
    let (st, v) = s
        .admin(
            Method::POST,
            "/v1/queues",
            Some(json!({"name": "orders", "policy": {"max_delivery_count": 3}})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let created_at = v["created_at"].as_str().unwrap().to_owned();
    for n in [4, 5, 6] {
        s.advance(1_000);
        let (st, v) = s
            .admin(
                Method::PATCH,
                "/v1/queues/orders",
                Some(json!({"max_delivery_count": n})),
            )
            .await;
        assert_eq!(st, 200, "{v}");
    }

    let (st, page) = get(s, "/v1/queues/orders/policy/versions").await;
    assert_eq!(st, 200, "{page}");
    assert_eq!(versions(&page), [4, 3, 2, 1]);
    assert!(page["next"].is_null(), "{page}");
    let newest = &page["versions"][0];
    assert_eq!(newest["policy"]["max_delivery_count"], 6);
    assert_eq!(
        newest["policy"]["lock_duration_ms"], 30_000,
        "the whole policy"
    );
    let oldest = &page["versions"][3];
    assert_eq!(oldest["policy"]["max_delivery_count"], 3);
    assert_eq!(oldest["changed_at"], created_at.as_str());
    assert!(newest["changed_at"].as_str().unwrap() > oldest["changed_at"].as_str().unwrap());

    // Paged by `before`: the answer names the next page.
    let (_, first) = get(s, "/v1/queues/orders/policy/versions?limit=3").await;
    assert_eq!(versions(&first), [4, 3, 2]);
    assert_eq!(first["next"], 2);
    let (_, rest) = get(s, "/v1/queues/orders/policy/versions?limit=3&before=2").await;
    assert_eq!(versions(&rest), [1]);
    assert!(rest["next"].is_null(), "{rest}");

    // Bounded and checked.
    for bad in [
        "limit=0",
        "limit=101",
        "limit=x",
        "before=0",
        "before=-1",
        "after=2",
    ] {
        let r = get(s, &format!("/v1/queues/orders/policy/versions?{bad}")).await;
        assert_problem(&r, 400, "invalid_request");
    }
    let r = get(s, "/v1/queues/orders/policy/versions?limit=0").await;
    assert_eq!(r.1["field"], "limit", "{}", r.1);
    assert_problem(
        &get(s, "/v1/queues/nowhere/policy/versions").await,
        404,
        "queue_not_found",
    );

    // The role that reads the queue reads its history; another queue's does not.
    let (_, reader) = s.token("orders-ops", &["operator:orders"]).await;
    let (st, page) = s
        .call_as(
            Some(&reader),
            Method::GET,
            "/v1/queues/orders/policy/versions",
            None,
        )
        .await;
    assert_eq!(st, 200, "{page}");
    assert_eq!(versions(&page).len(), 4);
    let (_, other) = s.token("billing-ops", &["operator:billing"]).await;
    assert_problem(
        &s.call_as(
            Some(&other),
            Method::GET,
            "/v1/queues/orders/policy/versions",
            None,
        )
        .await,
        403,
        "forbidden",
    );

    // Deleted with the queue: a queue made again under the name starts over.
    let (st, v) = s.admin(Method::DELETE, "/v1/queues/orders", None).await;
    assert_eq!(st, 204, "{v}");
    assert_problem(
        &get(s, "/v1/queues/orders/policy/versions").await,
        404,
        "queue_not_found",
    );
    let (st, v) = s
        .admin(
            Method::POST,
            "/v1/queues",
            Some(json!({"name": "orders", "policy": {}})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let (_, page) = get(s, "/v1/queues/orders/policy/versions").await;
    assert_eq!(versions(&page), [1]);
    assert_eq!(page["versions"][0]["policy"]["max_delivery_count"], 10);
}

#[tokio::test]
async fn a_queue_s_policy_versions_are_listed_newest_first_on_every_backend() {
    for backend in Backend::all("policy versions") {
        let s = TestServer::builder()
            .backend(backend)
            .auth(AccessSettings {
                enabled: true,
                ..AccessSettings::default()
            })
            .start()
            .await;
        scenario(&s).await;
        s.stop().await;
    }
}
