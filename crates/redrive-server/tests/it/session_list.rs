//! `GET /v1/queues/{name}/sessions`: a queue's sessions by id, over HTTP, with lock
//! expiry by the manual clock.

use serde_json::{Value, json};

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

/// The session ids of a page.
fn ids(page: &Value) -> Vec<&str> {
    page["sessions"]
        .as_array()
        .expect("a sessions array")
        .iter()
        .map(|s| s["session_id"].as_str().expect("a session id"))
        .collect()
}

#[tokio::test]
async fn sessions_are_listed_by_id_with_counts_and_live_locks_and_paged() {
    let s = TestServer::start().await;
    s.queue("sq", json!({"requires_session": true})).await;
    for (sess, body) in [("b", "b1"), ("a", "a1"), ("c", "c1"), ("a", "a2")] {
        send_session(&s, "sq", sess, body).await;
    }
    // `a` is held, one of its messages in flight.
    let (st, lock) = s
        .post(
            "/v1/queues/sq/sessions/accept",
            json!({"session_id": "a", "lock_duration_ms": 60_000}),
        )
        .await;
    assert_eq!(st, 200, "{lock}");
    let (st, got) = s
        .post(
            "/v1/queues/sq/receive",
            json!({"session_id": "a", "session_lock_token": lock["lock_token"],
                   "max_messages": 1, "lock_duration_ms": 30_000}),
        )
        .await;
    assert_eq!(st, 200, "{got}");

    let (st, page) = s.get("/v1/queues/sq/sessions").await;
    assert_eq!(st, 200, "{page}");
    assert_eq!(ids(&page), ["a", "b", "c"]);
    assert_eq!(page["next"], Value::Null, "one page holds them all");
    let a = &page["sessions"][0];
    assert_eq!(
        (
            &a["active"],
            &a["in_flight"],
            &a["scheduled"],
            &a["deferred"]
        ),
        (&json!(1), &json!(1), &json!(0), &json!(0))
    );
    assert_eq!(a["locked"], true);
    assert_eq!(a["locked_until"], lock["locked_until"]);
    assert!(a.get("lock_token").is_none(), "never the token: {a}");
    assert!(
        !page
            .to_string()
            .contains(lock["lock_token"].as_str().unwrap()),
        "the token appears nowhere: {page}"
    );
    let b = &page["sessions"][1];
    assert_eq!((&b["active"], &b["locked"]), (&json!(1), &json!(false)));
    assert!(b.get("locked_until").is_none(), "{b}");

    // Pages of two.
    let (st, first) = s.get("/v1/queues/sq/sessions?limit=2").await;
    assert_eq!(st, 200, "{first}");
    assert_eq!(ids(&first), ["a", "b"]);
    assert_eq!(first["next"], "b");
    let (_, second) = s.get("/v1/queues/sq/sessions?limit=2&after=b").await;
    assert_eq!(ids(&second), ["c"]);
    assert_eq!(second["next"], Value::Null);

    // Once the locks run out (no sweep needed), `a` is free and both its messages wait.
    s.advance(60_000);
    let (_, page) = s.get("/v1/queues/sq/sessions").await;
    let a = &page["sessions"][0];
    assert_eq!(a["locked"], false, "{a}");
    assert!(a.get("locked_until").is_none(), "{a}");
    assert_eq!((&a["active"], &a["in_flight"]), (&json!(2), &json!(0)));
    s.stop().await;
}

#[tokio::test]
async fn a_bad_page_or_an_unknown_queue_is_refused() {
    let s = TestServer::start().await;
    s.queue("sq", json!({"requires_session": true})).await;
    s.queue("plain", json!({})).await;
    for bad in ["limit=0", "limit=101", "limit=x", "after=", "nope=1"] {
        assert_problem(
            &s.get(&format!("/v1/queues/sq/sessions?{bad}")).await,
            400,
            "invalid_request",
        );
    }
    let long = "s".repeat(129);
    let r = s.get(&format!("/v1/queues/sq/sessions?after={long}")).await;
    assert_problem(&r, 400, "invalid_request");
    assert!(
        r.1.to_string().contains("after"),
        "the problem names the field: {}",
        r.1
    );
    let r = s.get("/v1/queues/sq/sessions?limit=101").await;
    assert!(
        r.1.to_string().contains("limit"),
        "the problem names the field: {}",
        r.1
    );
    let (st, ok) = s
        .get(&format!("/v1/queues/sq/sessions?after={}", "s".repeat(128)))
        .await;
    assert_eq!(st, 200, "{ok}");
    assert_problem(
        &s.get("/v1/queues/missing/sessions").await,
        404,
        "queue_not_found",
    );
    let (st, plain) = s.get("/v1/queues/plain/sessions").await;
    assert_eq!(st, 200, "{plain}");
    assert_eq!(plain, json!({"sessions": [], "next": null}));
    s.stop().await;
}
