//! The web console as `redrive serve` serves it: the page at `/` and its files under
//! `/console/`, public, with the strict Content Security Policy and the hardening
//! headers; entity tags with `Cache-Control: no-cache` and 304 on revalidation; 404
//! problems for unknown files; nothing at all with the console off. And the entity tags
//! of the API's `GET /v1/…` answers that the console polls with.

use redrive_broker::AccessSettings;
use redrive_server::console::CSP;
use redrive_testkit::{TestServer, default_settings};
use reqwest::StatusCode;
use serde_json::json;

async fn get(s: &TestServer, path: &str, etag: Option<&str>) -> reqwest::Response {
    let mut req = s.http.get(format!("{}{path}", s.url));
    if let Some(t) = etag {
        req = req.header("if-none-match", t);
    }
    req.send().await.unwrap()
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> &'a str {
    r.headers()
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header"))
        .to_str()
        .unwrap()
}

fn assert_hardened(r: &reqwest::Response) {
    assert_eq!(header(r, "content-security-policy"), CSP);
    assert_eq!(header(r, "x-content-type-options"), "nosniff");
    assert_eq!(header(r, "referrer-policy"), "no-referrer");
}

#[tokio::test]
async fn the_page_and_its_files_are_public_hardened_and_revalidated() {
    // With authentication on: the files need no token (they hold no data).
    let s = TestServer::builder()
        .auth(AccessSettings {
            enabled: true,
            ..AccessSettings::default()
        })
        .start()
        .await;
    let r = get(&s, "/", None).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_hardened(&r);
    assert_eq!(header(&r, "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(&r, "cache-control"), "no-cache");
    let etag = header(&r, "etag").to_owned();
    let html = r.text().await.unwrap();
    assert!(html.contains("/console/js/app.js"), "{html}");
    assert!(!html.contains("<style"), "no inline style");

    let r = get(&s, "/", Some(&etag)).await;
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
    assert_hardened(&r);
    assert_eq!(header(&r, "etag"), etag);
    assert!(r.bytes().await.unwrap().is_empty());
    // Another tag is not this file's: the whole file again.
    let r = get(&s, "/", Some("\"other\"")).await;
    assert_eq!(r.status(), StatusCode::OK);

    for (path, ty) in [
        ("/console/js/app.js", "text/javascript; charset=utf-8"),
        ("/console/js/api.js", "text/javascript; charset=utf-8"),
        ("/console/app.css", "text/css; charset=utf-8"),
    ] {
        let r = get(&s, path, None).await;
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert_hardened(&r);
        assert_eq!(header(&r, "content-type"), ty, "{path}");
        let tag = header(&r, "etag").to_owned();
        assert_ne!(tag, etag, "{path} has its own tag");
        assert_eq!(get(&s, path, Some(&tag)).await.status(), 304, "{path}");
    }
    // HEAD as GET.
    let r = s
        .http
        .head(format!("{}/console/app.css", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    s.stop().await;
}

#[tokio::test]
async fn an_unknown_file_is_a_404_problem_and_the_page_is_not_a_file() {
    let s = TestServer::start().await;
    for path in [
        "/console/nope.js",
        "/console/index.html",
        "/console/../Cargo.toml",
        "/console/%2e%2e/build.rs",
        "/console/",
    ] {
        let r = get(&s, path, None).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
        assert_eq!(
            header(&r, "content-type"),
            "application/problem+json",
            "{path}"
        );
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(v["code"], "not_found", "{path}: {v}");
    }
    // The console's answers are not the API's: a POST is not routed.
    let r = s
        .http
        .post(format!("{}/", s.url))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    s.stop().await;
}

#[tokio::test]
async fn with_the_console_off_nothing_is_served() {
    let s = TestServer::builder()
        .settings(redrive_server::Settings {
            console: false,
            ..default_settings()
        })
        .start()
        .await;
    for path in ["/", "/console/js/app.js", "/console/app.css"] {
        let r = get(&s, path, None).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
        assert!(r.headers().get("content-security-policy").is_none());
    }
    // The API is as it was.
    assert_eq!(get(&s, "/healthz", None).await.status(), StatusCode::OK);
    s.stop().await;
}

#[tokio::test]
async fn api_answers_carry_an_entity_tag_and_revalidate_with_304() {
    let s = TestServer::start().await;
    let (st, v) = s
        .call(
            reqwest::Method::POST,
            "/v1/queues",
            Some(json!({"name": "orders"})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let r = get(&s, "/v1/queues/orders", None).await;
    assert_eq!(r.status(), StatusCode::OK);
    let tag = header(&r, "etag").to_owned();
    assert_eq!(header(&r, "cache-control"), "private, no-cache");
    assert_eq!(header(&r, "vary"), "Authorization");
    let first = r.text().await.unwrap();
    assert!(first.contains("\"orders\""));

    let r = get(&s, "/v1/queues/orders", Some(&tag)).await;
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(header(&r, "etag"), tag);
    assert!(r.bytes().await.unwrap().is_empty());

    // A change changes the tag: the next revalidation gets the new body.
    let (st, v) = s
        .call(
            reqwest::Method::POST,
            "/v1/queues/orders/messages",
            Some(json!({"body": "x"})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let r = get(&s, "/v1/queues/orders", Some(&tag)).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_ne!(header(&r, "etag"), tag);

    // Errors and other methods carry none.
    let r = get(&s, "/v1/queues/nope", None).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(r.headers().get("etag").is_none());
    let r = get(&s, "/healthz", None).await;
    assert!(r.headers().get("etag").is_none());
    s.stop().await;
}
