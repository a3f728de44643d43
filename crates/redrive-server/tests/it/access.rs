//! The access model over HTTP: authentication, the permission matrix of every role and
//! route (on SQLite, and on PostgreSQL when a test database is configured), scopes,
//! payload access, revocation (at once, and mid-long-poll), rate limits, and the audit
//! log with its chain.

use std::collections::BTreeSet;
use std::time::Duration;

use redrive_broker::AccessSettings;
use redrive_core::Timestamp;
use redrive_server::access::{AUTHENTICATED, PUBLIC, ROUTES};
use redrive_testkit::recovery::{Letter, dead_letter};
use redrive_testkit::{Backend, T0, TestServer};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// Routes each role may call, written out by hand (not derived from the table under
/// test). `admin` may call every route.
fn allowed(role: &str) -> BTreeSet<(&'static str, &'static str)> {
    let q = "/v1/queues/{name}";
    let rows: &[(&str, &str)] = match role {
        "producer" => &[
            ("POST", "/v1/queues/{name}/messages"),
            ("DELETE", "/v1/queues/{name}/messages/scheduled/{seq}"),
            ("POST", "/v1/topics/{topic}/events"),
            ("POST", "/v1/intents/{id}/cancel"),
            ("POST", "/v1/intents/{id}/supersede"),
            ("POST", "/v1/transactions"),
        ],
        "consumer" => &[
            ("POST", "/v1/queues/{name}/messages/deferred/receive"),
            ("POST", "/v1/queues/{name}/receive"),
            ("POST", "/v1/queues/{name}/settle"),
            ("POST", "/v1/queues/{name}/sessions/accept"),
            ("POST", "/v1/queues/{name}/sessions/{session}/renew"),
            ("POST", "/v1/queues/{name}/sessions/{session}/release"),
            ("POST", "/v1/transactions"),
        ],
        "operator" => &[
            ("GET", "/v1/queues"),
            ("POST", "/v1/queues"),
            ("GET", q),
            ("GET", "/v1/queues/{name}/series"),
            ("GET", "/v1/queues/{name}/policy/versions"),
            ("GET", "/v1/queues/{name}/sessions"),
            ("GET", "/v1/overview"),
            ("PATCH", q),
            ("DELETE", q),
            ("POST", "/v1/queues/{name}/purge"),
            ("GET", "/v1/queues/{name}/dead-letters"),
            ("GET", "/v1/failures"),
            ("GET", "/v1/queues/{name}/dead-letters/{id}"),
            ("POST", "/v1/queues/{name}/dead-letters/{id}/move"),
            ("POST", "/v1/queues/{name}/dead-letters/{id}/restore"),
            ("GET", "/v1/replay"),
            ("GET", "/v1/replay/{name}"),
            ("GET", "/metrics"),
            ("GET", "/v1/topics"),
            ("POST", "/v1/topics"),
            ("GET", "/v1/topics/{topic}"),
            ("DELETE", "/v1/topics/{topic}"),
            ("GET", "/v1/topics/{topic}/subscriptions"),
            ("POST", "/v1/topics/{topic}/subscriptions"),
            ("GET", "/v1/topics/{topic}/subscriptions/{sub}"),
            ("PATCH", "/v1/topics/{topic}/subscriptions/{sub}"),
            ("DELETE", "/v1/topics/{topic}/subscriptions/{sub}"),
            ("GET", "/v1/register"),
            ("PUT", "/v1/register/{key}"),
            ("DELETE", "/v1/register/{key}"),
            ("GET", "/v1/cases"),
            ("GET", "/v1/cases/counts"),
            ("GET", "/v1/cases/{id}"),
            ("POST", "/v1/cases/{id}/claim"),
            ("POST", "/v1/cases/{id}/release"),
            ("POST", "/v1/cases/{id}/notes"),
            ("POST", "/v1/cases/{id}/diagnosis"),
            ("POST", "/v1/cases/{id}/corrections"),
            ("POST", "/v1/cases/{id}/transformations"),
            ("POST", "/v1/cases/{id}/tests"),
            ("POST", "/v1/cases/{id}/reconcile"),
            ("POST", "/v1/cases/{id}/close"),
            ("POST", "/v1/cases/{id}/review"),
            ("GET", "/v1/case-groups"),
            ("POST", "/v1/case-groups"),
            ("GET", "/v1/case-groups/{id}"),
            ("POST", "/v1/case-groups/{id}/claim"),
            ("POST", "/v1/case-groups/{id}/release"),
            ("POST", "/v1/case-groups/{id}/diagnosis"),
            ("POST", "/v1/case-groups/{id}/corrections"),
            ("POST", "/v1/case-groups/{id}/tests"),
            ("POST", "/v1/case-groups/{id}/close"),
            ("GET", "/v1/intents/{id}"),
            ("GET", "/v1/effect-authorities"),
            ("PUT", "/v1/effect-authorities/{type}"),
            ("DELETE", "/v1/effect-authorities/{type}"),
            ("GET", "/v1/replay/plans"),
            ("GET", "/v1/replay/plans/{id}"),
            ("GET", "/v1/replay/plans/{id}/items"),
        ],
        "replayer" => &[
            ("POST", "/v1/queues/{name}/dead-letters/{id}/resubmit"),
            ("GET", "/v1/register"),
            ("POST", "/v1/cases/{id}/replay"),
            ("GET", "/v1/effect-authorities"),
            ("POST", "/v1/replay/plans/preview"),
            ("POST", "/v1/replay/plans"),
            ("POST", "/v1/replay/plans/{id}/start"),
            ("POST", "/v1/replay/plans/{id}/pause"),
            ("POST", "/v1/replay/plans/{id}/resume"),
            ("POST", "/v1/replay/plans/{id}/cancel"),
        ],
        "payload-reader" => &[
            ("GET", "/v1/queues/{name}/messages"),
            ("GET", "/v1/queues/{name}/dead-letters"),
            ("GET", "/v1/failures"),
            ("GET", "/v1/queues/{name}/dead-letters/{id}"),
            ("GET", "/v1/cases/{id}/payload"),
        ],
        _ => &[],
    };
    rows.iter().copied().collect()
}

/// A concrete path for a routed pattern.
fn concrete(pattern: &str) -> String {
    pattern
        .replace("{name}", "q")
        .replace("{topic}", "t")
        .replace("{seq}", "1")
        .replace("{session}", "s")
        .replace("{id}", "dl_x")
        .replace("{sub}", "s")
        .replace("{key}", "t")
        .replace("{type}", "t")
}

/// Every role × every route: refused with 403 `forbidden` exactly where the hand-written
/// table says so; any other answer (success, 400, 404, 409…) means the guard let it by.
async fn matrix(s: &TestServer) {
    let roles = [
        "producer",
        "consumer",
        "operator",
        "replayer",
        "payload-reader",
        "admin",
    ];
    let mut secrets = Vec::new();
    for role in roles {
        let (_, secret) = s.token(&format!("m-{role}"), &[role]).await;
        secrets.push((role, secret));
    }
    for (role, secret) in &secrets {
        let ok = allowed(role);
        for (method, pattern, _, _) in ROUTES {
            let path = concrete(pattern);
            // Bodies are left out: an allowed request fails validation, never the guard.
            let (st, v) = s.call_as(Some(secret), method.clone(), &path, None).await;
            let expect_allowed = *role == "admin" || ok.contains(&(method.as_str(), *pattern));
            if expect_allowed {
                assert!(
                    st != StatusCode::FORBIDDEN && st != StatusCode::UNAUTHORIZED,
                    "{role} {method} {pattern}: expected allowed, got {st} {v}"
                );
            } else {
                assert_eq!(
                    st,
                    StatusCode::FORBIDDEN,
                    "{role} {method} {pattern}: expected forbidden, got {v}"
                );
                assert_eq!(v["code"], "forbidden", "{v}");
            }
        }
    }
    // Refusals are audited.
    let denied = s.audit("action=denied%3APeek").await;
    assert!(denied.iter().any(|e| e["actor_name"] == "m-producer"));
    assert!(denied.iter().all(|e| e["outcome"] == "denied"));
}

#[tokio::test]
async fn every_role_is_allowed_and_refused_per_the_matrix_on_sqlite() {
    let s = TestServer::builder().auth(on()).start().await;
    matrix(&s).await;
    s.stop().await;
}

#[tokio::test]
async fn every_role_is_allowed_and_refused_per_the_matrix_on_postgres() {
    let Some(postgres) = Backend::postgres("the permission matrix on PostgreSQL") else {
        return;
    };
    let s = TestServer::builder()
        .backend(postgres)
        .auth(on())
        .start()
        .await;
    matrix(&s).await;
    s.stop().await;
}

fn on() -> AccessSettings {
    AccessSettings {
        enabled: true,
        ..AccessSettings::default()
    }
}

#[test]
fn the_permission_table_covers_exactly_the_documented_routes() {
    let doc: Value = serde_json::from_str(redrive_api::OPENAPI_JSON).unwrap();
    let mut documented = BTreeSet::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            if ["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                documented.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    let mut table: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p, _, _)| (m.to_string(), (*p).to_owned()))
        .collect();
    table.extend(PUBLIC.iter().map(|(m, p)| (m.to_string(), (*p).to_owned())));
    table.extend(
        AUTHENTICATED
            .iter()
            .map(|(m, p)| (m.to_string(), (*p).to_owned())),
    );
    // The API description documents itself only by being served.
    documented.insert(("GET".into(), "/openapi.json".into()));
    assert_eq!(table, documented);
}

#[tokio::test]
async fn requests_without_a_valid_token_are_refused() {
    let s = TestServer::builder().auth(on()).start().await;
    let check = |r: (StatusCode, Value)| {
        assert_eq!(r.0, StatusCode::UNAUTHORIZED, "{}", r.1);
        assert_eq!(r.1["code"], "unauthenticated", "{}", r.1);
    };
    check(s.call_as(None, Method::GET, "/v1/queues", None).await);
    check(
        s.call_as(Some("nope"), Method::GET, "/v1/queues", None)
            .await,
    );
    let unknown = format!("rdt_{}", "b".repeat(64));
    check(
        s.call_as(Some(&unknown), Method::GET, "/v1/queues", None)
            .await,
    );
    let resp = s
        .http
        .get(format!("{}/v1/queues", s.url))
        .header("authorization", "Basic abc")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert!(resp.headers().contains_key("www-authenticate"));
    // Health and the API description stay public.
    assert_eq!(s.call_as(None, Method::GET, "/healthz", None).await.0, 200);
    assert_eq!(
        s.call_as(None, Method::GET, "/openapi.json", None).await.0,
        200
    );
    s.stop().await;
}

#[tokio::test]
async fn an_expired_token_is_refused_on_the_injected_clock() {
    let s = TestServer::builder().auth(on()).start().await;
    let expires = T0.plus_millis(60_000).to_rfc3339();
    let (st, v) = s
        .admin(
            Method::POST,
            "/v1/tokens",
            Some(json!({"name": "short", "grants": ["operator"], "expires_at": expires})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    let secret = v["secret"].as_str().unwrap().to_owned();
    assert_eq!(
        s.call_as(Some(&secret), Method::GET, "/v1/queues", None)
            .await
            .0,
        200
    );
    s.clock().advance(Duration::from_secs(60));
    let r = s
        .call_as(Some(&secret), Method::GET, "/v1/queues", None)
        .await;
    assert_eq!(r.0, 401, "{}", r.1);
    s.stop().await;
}

#[tokio::test]
async fn scopes_limit_a_token_to_its_entities_and_listings_show_only_those() {
    let s = TestServer::builder().auth(on()).start().await;
    for q in ["orders", "orders-eu", "payments"] {
        let (st, v) = s
            .admin(Method::POST, "/v1/queues", Some(json!({"name": q})))
            .await;
        assert_eq!(st, 201, "{v}");
    }
    let (_, prod) = s.token("p", &["producer:orders"]).await;
    let send = |q: &'static str| {
        let s = &s;
        let prod = prod.clone();
        async move {
            s.call_as(
                Some(&prod),
                Method::POST,
                &format!("/v1/queues/{q}/messages"),
                Some(json!({"body": "x"})),
            )
            .await
        }
    };
    assert_eq!(send("orders").await.0, 201);
    assert_eq!(send("orders-eu").await.0, 403);
    assert_eq!(send("payments").await.0, 403);

    let (_, ops) = s.token("o", &["operator:orders*"]).await;
    let (st, v) = s.call_as(Some(&ops), Method::GET, "/v1/queues", None).await;
    assert_eq!(st, 200, "{v}");
    let names: Vec<&str> = v["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["orders", "orders-eu"]);
    // Creating is checked against the name in the body.
    let r = s
        .call_as(
            Some(&ops),
            Method::POST,
            "/v1/queues",
            Some(json!({"name": "payments-2"})),
        )
        .await;
    assert_eq!(r.0, 403, "{}", r.1);
    let r = s
        .call_as(
            Some(&ops),
            Method::POST,
            "/v1/queues",
            Some(json!({"name": "orders-us"})),
        )
        .await;
    assert_eq!(r.0, 201, "{}", r.1);
    s.stop().await;
}

/// Makes queue `q` and a dead letter of `body` on it (as `Bad`) through the admin; returns
/// its record id.
async fn bad_letter(s: &TestServer, q: &str, body: &str) -> String {
    s.admin(Method::POST, "/v1/queues", Some(json!({"name": q})))
        .await;
    let letter = Letter::message(json!({"body": body})).reason("Bad");
    dead_letter(s, q, letter.as_admin()).await
}

#[tokio::test]
async fn dead_letter_bodies_only_for_payload_readers_and_every_read_is_audited() {
    let s = TestServer::builder().auth(on()).start().await;
    let id = bad_letter(&s, "q", "secret-body").await;
    let (ops_id, ops) = s.token("ops", &["operator:q"]).await;
    let (reader_id, reader) = s.token("reader", &["payload-reader:q"]).await;

    let (st, v) = s
        .call_as(Some(&ops), Method::GET, "/v1/queues/q/dead-letters", None)
        .await;
    assert_eq!(st, 200, "{v}");
    assert!(v["dead_letters"][0].get("body").is_none(), "{v}");
    assert_eq!(v["dead_letters"][0]["reason"], "Bad");
    let (_, one) = s
        .call_as(
            Some(&ops),
            Method::GET,
            &format!("/v1/queues/q/dead-letters/{id}"),
            None,
        )
        .await;
    assert!(one.get("body").is_none(), "{one}");
    assert!(
        s.audit(&format!("actor={ops_id}&action=dead_letter.read"))
            .await
            .is_empty(),
        "metadata reads are not payload reads"
    );

    let (_, v) = s
        .call_as(
            Some(&reader),
            Method::GET,
            "/v1/queues/q/dead-letters",
            None,
        )
        .await;
    assert_eq!(v["dead_letters"][0]["body"], "secret-body");
    let (_, one) = s
        .call_as(
            Some(&reader),
            Method::GET,
            &format!("/v1/queues/q/dead-letters/{id}"),
            None,
        )
        .await;
    assert_eq!(one["body"], "secret-body");
    let reads = s
        .audit(&format!("actor={reader_id}&action=dead_letter.read"))
        .await;
    assert_eq!(reads.len(), 2, "{reads:?}");
    assert!(reads.iter().all(|e| e["targets"][0] == id.as_str()));
    assert!(reads.iter().all(|e| e["entity"] == "q"));
    assert!(reads.iter().all(|e| e["client"] == "127.0.0.1"));

    // Peek is a payload read too.
    let (st, _) = s
        .call_as(Some(&reader), Method::GET, "/v1/queues/q/messages", None)
        .await;
    assert_eq!(st, 200);
    assert_eq!(
        s.audit(&format!("actor={reader_id}&action=message.peek"))
            .await
            .len(),
        1
    );
    s.stop().await;
}

#[tokio::test]
async fn operator_acts_are_audited_and_the_chain_verifies() {
    let s = TestServer::builder().auth(on()).start().await;
    let id = bad_letter(&s, "q", "b").await;
    let (st, _) = s
        .admin(
            Method::POST,
            &format!("/v1/queues/q/dead-letters/{id}/move"),
            Some(json!({"area": "quarantine"})),
        )
        .await;
    assert_eq!(st, 204);
    let (st, _) = s
        .admin(
            Method::PATCH,
            "/v1/queues/q",
            Some(json!({"max_delivery_count": 5})),
        )
        .await;
    assert_eq!(st, 200);
    let (tok_id, _) = s.token("t1", &["consumer:q"]).await;
    let (st, _) = s
        .admin(Method::POST, &format!("/v1/tokens/{tok_id}/revoke"), None)
        .await;
    assert_eq!(st, 200);
    let (st, _) = s
        .admin(Method::DELETE, "/v1/queues/q?force=true", None)
        .await;
    assert_eq!(st, 204);

    let all = s.audit("limit=1000").await;
    let actions: Vec<&str> = all.iter().map(|e| e["action"].as_str().unwrap()).collect();
    for a in [
        "token.create",
        "dead_letter.move",
        "queue.update",
        "token.revoke",
        "queue.delete",
    ] {
        assert!(actions.contains(&a), "{a} missing from {actions:?}");
    }
    let mv = all
        .iter()
        .find(|e| e["action"] == "dead_letter.move")
        .unwrap();
    assert_eq!(mv["targets"], json!([id, "to=quarantine"]));
    assert_eq!(mv["outcome"], "ok");
    for w in all.windows(2) {
        assert_eq!(w[1]["prev_hash"], w[0]["hash"]);
    }
    let (st, v) = s.admin(Method::POST, "/v1/audit/verify", None).await;
    assert_eq!(st, 200);
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["entries"], all.len());
    s.stop().await;
}

#[tokio::test]
async fn revocation_takes_effect_at_once_and_ends_a_long_poll() {
    let s = TestServer::builder().auth(on()).start().await;
    s.admin(Method::POST, "/v1/queues", Some(json!({"name": "q"})))
        .await;
    let (id, secret) = s.token("c", &["consumer:q"]).await;
    let poll = {
        let http = s.http.clone();
        let url = format!("{}/v1/queues/q/receive", s.url);
        let secret = secret.clone();
        tokio::spawn(async move {
            let r = http
                .post(url)
                .bearer_auth(secret)
                .json(&json!({"wait_ms": 20_000}))
                .send()
                .await
                .unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        })
    };
    // Wait (for a signal, not for time) until the long poll sleeps on the clock, by its
    // own deadline: a worker sleeping again also grows the count of sleepers, and a
    // revocation before the poll is in would refuse it as unauthenticated instead.
    s.until_parked_at(redrive_testkit::T0.plus_millis(20_000))
        .await;
    let (st, _) = s
        .admin(Method::POST, &format!("/v1/tokens/{id}/revoke"), None)
        .await;
    assert_eq!(st, 200);
    let (st, v) = poll.await.unwrap();
    assert_eq!(st, StatusCode::UNAUTHORIZED, "{v}");
    assert_eq!(v["code"], "token_revoked");
    let r = s
        .call_as(
            Some(&secret),
            Method::POST,
            "/v1/queues/q/receive",
            Some(json!({})),
        )
        .await;
    assert_eq!(r.0, 401);
    assert_eq!(r.1["code"], "unauthenticated");
    let (_, list) = s.admin(Method::GET, "/v1/tokens", None).await;
    let t = list["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id.as_str())
        .unwrap()
        .clone();
    assert_eq!(t["status"], "revoked");
    assert!(t.get("secret").is_none());
    s.stop().await;
}

#[tokio::test]
async fn a_token_over_its_rate_gets_429_with_retry_after_until_the_clock_moves() {
    let s = TestServer::builder()
        .auth(AccessSettings {
            enabled: true,
            rate_limit_per_s: 2,
            rate_limit_burst: 2,
            ..AccessSettings::default()
        })
        .start()
        .await;
    let (_, secret) = s.token("busy", &["operator"]).await;
    for _ in 0..2 {
        assert_eq!(
            s.call_as(Some(&secret), Method::GET, "/v1/queues", None)
                .await
                .0,
            200
        );
    }
    let resp = s
        .http
        .get(format!("{}/v1/queues", s.url))
        .bearer_auth(&secret)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(resp.headers()["retry-after"], "1");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["code"], "rate_limited");
    // Another token is not held back by this one's bucket.
    let (_, other) = s.token("calm", &["operator"]).await;
    assert_eq!(
        s.call_as(Some(&other), Method::GET, "/v1/queues", None)
            .await
            .0,
        200
    );
    s.clock().advance(Duration::from_millis(500));
    assert_eq!(
        s.call_as(Some(&secret), Method::GET, "/v1/queues", None)
            .await
            .0,
        200
    );
    s.stop().await;
}

#[tokio::test]
async fn token_requests_are_validated_and_secrets_never_listed() {
    let s = TestServer::builder().auth(on()).start().await;
    let bad = |body: Value| {
        let s = &s;
        async move { s.admin(Method::POST, "/v1/tokens", Some(body)).await }
    };
    let r = bad(json!({"name": "x", "grants": ["owner"]})).await;
    assert_eq!(r.0, 400, "{}", r.1);
    let r = bad(json!({"name": "x", "grants": []})).await;
    assert_eq!(r.0, 400, "{}", r.1);
    let r = bad(json!({"name": "x", "grants": ["admin:q"]})).await;
    assert_eq!(r.0, 400, "{}", r.1);
    let r = bad(json!({"name": "bad name", "grants": ["admin"]})).await;
    assert_eq!(r.0, 400, "{}", r.1);
    let r = bad(json!({"name": "x", "grants": ["admin"], "expires_at": Timestamp(0).to_rfc3339()}))
        .await;
    assert_eq!(r.0, 400, "{}", r.1);
    s.token("dup", &["producer"]).await;
    let r = bad(json!({"name": "dup", "grants": ["producer"]})).await;
    assert_eq!(r.0, 409, "{}", r.1);
    assert_eq!(r.1["code"], "token_exists");
    let r = s
        .admin(Method::POST, "/v1/tokens/tok_0000000000000000/revoke", None)
        .await;
    assert_eq!(r.0, 404, "{}", r.1);
    let (st, v) = s
        .admin(
            Method::POST,
            "/v1/tokens",
            Some(json!({"name": "sqs", "grants": ["producer"], "sqs": true})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    assert!(v["sqs_access_key_id"].as_str().unwrap().starts_with("RDK"));
    assert_eq!(v["sqs_secret_access_key"].as_str().unwrap().len(), 40);
    let (_, list) = s.admin(Method::GET, "/v1/tokens", None).await;
    let text = list.to_string();
    assert!(!text.contains("rdt_"), "{text}");
    assert!(!text.contains(v["sqs_secret_access_key"].as_str().unwrap()));
    s.stop().await;
}

#[tokio::test]
async fn control_routes_take_small_bodies_only() {
    let s = TestServer::builder().auth(on()).start().await;
    let big = "x".repeat(redrive_server::MAX_CONTROL_REQUEST_BYTES + 1);
    let (st, v) = s
        .admin(
            Method::POST,
            "/v1/queues",
            Some(json!({"name": "q", "pad": big})),
        )
        .await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    let (st, _) = s.admin(Method::GET, "/v1/queues/q", None).await;
    assert_eq!(st, 404, "nothing was created");
    // A message of the same size is fine on the send route.
    s.admin(
        Method::POST,
        "/v1/queues",
        Some(json!({"name": "q", "policy": {"max_message_size": 4_194_304}})),
    )
    .await;
    let body = "y".repeat(redrive_server::MAX_CONTROL_REQUEST_BYTES + 1);
    let (st, v) = s
        .admin(
            Method::POST,
            "/v1/queues/q/messages",
            Some(json!({"body": body})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    s.stop().await;
}
