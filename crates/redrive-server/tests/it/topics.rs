//! Topics, subscriptions and publishing over HTTP: fan-out with filters into pull
//! subscriptions' queues, duplicate detection on source + id with the manual clock, an
//! all-or-nothing batch, binary mode, push endpoint validation against a real receiver,
//! the dead-letter destination rule, and push delivery: the retry schedule, giving up with
//! Event Grid's evidence (attempts, time to live), `Retry-After`, and a restart in backoff.

use reqwest::StatusCode;
use serde_json::{Value, json};

use redrive_testkit::{Receiver, Reply, T0, TestServer, assert_problem};

pub(crate) fn event(id: &str, ty: &str, subject: &str) -> Value {
    json!({
        "specversion": "1.0",
        "id": id,
        "source": "/shop",
        "type": ty,
        "subject": subject,
        "datacontenttype": "application/json",
        "data": {"n": id},
    })
}

fn ids(msgs: &[Value]) -> Vec<String> {
    msgs.iter()
        .map(|m| m["message_id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn publish_fans_out_to_pull_subscriptions_by_filter() {
    let s = TestServer::start().await;
    s.topic("orders", json!({})).await;
    let created = s
        .pull_sub(
            "orders",
            "created",
            json!({"included_event_types": ["order.created"]}),
        )
        .await;
    let eu = s
        .pull_sub("orders", "eu", json!({"subject_begins_with": "/eu/"}))
        .await;
    assert_eq!(
        (created.as_str(), eu.as_str()),
        ("orders.created", "orders.eu")
    );

    let (st, v) = s
        .publish(
            "orders",
            &[
                event("1", "order.created", "/eu/1"),
                event("2", "order.shipped", "/eu/2"),
                event("3", "order.created", "/us/3"),
                event("4", "order.shipped", "/us/4"),
            ],
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(
        v,
        json!({"results": [
            {"id": "1", "duplicate": false}, {"id": "2", "duplicate": false},
            {"id": "3", "duplicate": false}, {"id": "4", "duplicate": false},
        ]})
    );
    let got = s.receive(&created, 10).await;
    assert_eq!(ids(&got), ["1", "3"]);
    assert_eq!(got[0]["content_type"], "application/cloudevents+json");
    assert_eq!(got[0]["type"], "order.created");
    let body: Value = serde_json::from_str(got[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(body, event("1", "order.created", "/eu/1"));
    assert_eq!(ids(&s.receive(&eu, 10).await), ["1", "2"]);

    // Each subscription's state is its own: completing on one leaves the other alone.
    let (st, _) = s
        .settle(
            &created,
            got[0]["lock_token"].as_str().unwrap(),
            "complete",
            json!({}),
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    let (st, v) = s.get("/v1/topics/orders/subscriptions/eu").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["kind"], json!({"type": "pull"}));
    assert_eq!(v["dead_letter"], json!({"type": "own_store"}));
    assert_eq!(v["stats"]["in_flight"], 2);
    let (_, list) = s.get("/v1/topics/orders/subscriptions").await;
    assert_eq!(list["subscriptions"].as_array().unwrap().len(), 2);

    let metrics = s.metrics().await;
    assert!(
        metrics.contains("redrive_events_published_total{topic=\"orders\"} 4"),
        "{metrics}"
    );
    assert!(
        metrics
            .contains("redrive_subscription_events_total{topic=\"orders\",subscription=\"eu\"} 2"),
        "{metrics}"
    );
    s.stop().await;
}

#[tokio::test]
async fn duplicate_event_is_accepted_but_not_fanned_out_until_the_window_passes() {
    let s = TestServer::start().await;
    s.topic("orders", json!({"duplicate_detection_window_ms": 60_000}))
        .await;
    let q = s.pull_sub("orders", "all", json!({})).await;
    let ev = event("1", "order.created", "/eu/1");
    let (st, _) = s
        .publish_raw(
            "orders",
            "application/cloudevents+json",
            serde_json::to_vec(&ev).unwrap(),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED);
    s.advance(59_000);
    let (st, v) = s.publish("orders", std::slice::from_ref(&ev)).await;
    assert_eq!(st, StatusCode::CREATED);
    assert_eq!(v["results"][0]["duplicate"], true);
    assert_eq!(s.counts(&q).await["active"], 1);
    // Same id from another source is another event.
    let mut other = ev.clone();
    other["source"] = json!("/elsewhere");
    let (_, v) = s.publish("orders", &[other]).await;
    assert_eq!(v["results"][0]["duplicate"], false);
    // After the window the same event is accepted and fanned out again.
    s.advance(1_000);
    let (_, v) = s.publish("orders", &[ev]).await;
    assert_eq!(v["results"][0]["duplicate"], false);
    assert_eq!(s.counts(&q).await["active"], 3);
    s.stop().await;
}

#[tokio::test]
async fn a_batch_with_one_bad_event_stores_nothing() {
    let s = TestServer::start().await;
    s.topic("orders", json!({"max_event_size": 1024})).await;
    let q = s.pull_sub("orders", "all", json!({})).await;
    let mut bad = event("2", "order.created", "/eu/2");
    bad.as_object_mut().unwrap().remove("source");
    let r = s
        .publish(
            "orders",
            &[
                event("1", "order.created", "/eu/1"),
                bad,
                event("3", "x", "/y"),
            ],
        )
        .await;
    assert_problem(&r, 400, "invalid_event");
    assert_eq!(r.1["index"], 1);
    assert!(
        r.1["detail"].as_str().unwrap().contains("source"),
        "{}",
        r.1
    );
    let mut big = event("4", "order.created", "/eu/4");
    big["data"] = json!("x".repeat(2_000));
    let r = s
        .publish("orders", &[event("5", "order.created", "/eu/5"), big])
        .await;
    assert_problem(&r, 413, "event_too_large");
    assert_eq!(r.1["index"], 1);
    let r = s
        .publish_raw(
            "orders",
            "application/cloudevents+json",
            b"{not json".to_vec(),
        )
        .await;
    assert_problem(&r, 400, "invalid_event");
    let r = s
        .publish_raw("orders", "text/plain", b"hello".to_vec())
        .await;
    assert_problem(&r, 415, "unsupported_media_type");
    assert_problem(
        &s.publish("nope", &[event("1", "t", "/s")]).await,
        404,
        "topic_not_found",
    );
    assert_eq!(s.counts(&q).await["active"], 0, "nothing was stored");
    // Nothing was remembered either: event 1 is new.
    let (_, v) = s
        .publish("orders", &[event("1", "order.created", "/eu/1")])
        .await;
    assert_eq!(v["results"][0]["duplicate"], false);
    s.stop().await;
}

#[tokio::test]
async fn binary_mode_publish_is_stored_as_structured_json() {
    let s = TestServer::start().await;
    s.topic("orders", json!({})).await;
    let q = s
        .pull_sub(
            "orders",
            "created",
            json!({"included_event_types": ["order.created"]}),
        )
        .await;
    let resp = s
        .http
        .post(format!("{}/v1/topics/orders/events", s.url))
        .header("ce-specversion", "1.0")
        .header("ce-id", "b-1")
        .header("ce-source", "/shop")
        .header("ce-type", "order.created")
        .header("ce-subject", "/eu/9")
        .header("content-type", "application/json")
        .body(r#"{"total": 12}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["results"][0]["id"], "b-1");
    let got = s.receive(&q, 10).await;
    assert_eq!(ids(&got), ["b-1"]);
    let body: Value = serde_json::from_str(got[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["data"], json!({"total": 12}));
    assert_eq!(body["subject"], "/eu/9");
    // A binary event missing a required attribute is refused.
    let resp = s
        .http
        .post(format!("{}/v1/topics/orders/events", s.url))
        .header("ce-specversion", "1.0")
        .header("ce-id", "b-2")
        .header("ce-source", "/shop")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["code"], "invalid_event");
    s.stop().await;
}

#[tokio::test]
async fn push_subscription_validates_its_endpoint_and_needs_a_dead_letter_destination() {
    let s = TestServer::start().await;
    // `/ok` agrees to the validation handshake; `/no` answers without
    // `WebHook-Allowed-Origin`.
    let rx = Receiver::start(|_, req| match req.path.as_str() {
        "/ok" => Reply::handshake(req),
        _ => Reply::status(200),
    })
    .await;
    s.topic("orders", json!({})).await;
    let path = "/v1/topics/orders/subscriptions";

    let r = s
        .post(
            path,
            json!({"name": "hook", "type": "push", "endpoint": format!("{}/ok", rx.base)}),
        )
        .await;
    assert_problem(&r, 400, "dead_letter_destination_required");
    let r = s
        .post(
            path,
            json!({"name": "hook", "type": "push", "endpoint": format!("{}/ok", rx.base),
                   "dead_letter": {"type": "drop", "acknowledged": false}}),
        )
        .await;
    assert_problem(&r, 400, "dead_letter_destination_required");

    let (st, v) = s
        .post(
            path,
            json!({"name": "hook", "type": "push", "endpoint": format!("{}/ok", rx.base),
                   "dead_letter": {"type": "own_store"}}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(v["kind"]["type"], "push");
    assert_eq!(v["kind"]["validation"], "validated");
    assert_eq!(v["kind"]["mode"], "structured");
    let (_, q) = s.get("/v1/queues/orders.hook").await;
    assert_eq!(q["policy"]["max_delivery_count"], 10_000);

    let r = s
        .post(
            path,
            json!({"name": "refused", "type": "push", "endpoint": format!("{}/no", rx.base),
                   "dead_letter": {"type": "own_store"}}),
        )
        .await;
    assert_problem(&r, 400, "endpoint_validation_failed");
    assert!(
        r.1["detail"]
            .as_str()
            .unwrap()
            .contains("WebHook-Allowed-Origin"),
        "{}",
        r.1
    );
    assert_problem(
        &s.get("/v1/topics/orders/subscriptions/refused").await,
        404,
        "subscription_not_found",
    );

    // Skipping validation is allowed, and the record says so; dropping is allowed when
    // accepted explicitly.
    let (st, v) = s
        .post(
            path,
            json!({"name": "trusted", "type": "push", "endpoint": format!("{}/no", rx.base),
                   "skip_validation": true,
                   "dead_letter": {"type": "drop", "acknowledged": true}}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(v["kind"]["validation"], "skipped");
    let r = s
        .post(
            path,
            json!({"name": "bad", "type": "push", "endpoint": "ftp://example.com/x",
                   "dead_letter": {"type": "own_store"}}),
        )
        .await;
    assert_problem(&r, 400, "invalid_request");
    s.stop().await;
}

#[tokio::test]
async fn pause_resume_and_deletes_with_force() {
    let s = TestServer::start().await;
    s.topic("orders", json!({})).await;
    let q = s.pull_sub("orders", "all", json!({})).await;
    let (st, v) = s
        .patch(
            "/v1/topics/orders/subscriptions/all",
            json!({"paused": true}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["paused"], true);
    // A paused subscription keeps receiving events.
    s.publish("orders", &[event("1", "t", "/s")]).await;
    assert_eq!(s.counts(&q).await["active"], 1);
    let (_, v) = s
        .patch(
            "/v1/topics/orders/subscriptions/all",
            json!({"paused": false}),
        )
        .await;
    assert_eq!(v["paused"], false);

    assert_problem(
        &s.delete("/v1/topics/orders").await,
        409,
        "topic_has_subscriptions",
    );
    assert_problem(
        &s.delete("/v1/topics/orders/subscriptions/all").await,
        409,
        "subscription_not_empty",
    );
    let (st, v) = s
        .delete("/v1/topics/orders/subscriptions/all?force=true")
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["discarded"], 1);
    assert_problem(
        &s.get(&format!("/v1/queues/{q}")).await,
        404,
        "queue_not_found",
    );
    s.pull_sub("orders", "again", json!({})).await;
    let (st, _) = s.delete("/v1/topics/orders?force=true").await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    assert_problem(&s.get("/v1/topics/orders").await, 404, "topic_not_found");
    assert_problem(
        &s.get("/v1/queues/orders.again").await,
        404,
        "queue_not_found",
    );
    s.stop().await;
}

/// Waits until the subscription's stats have every field of `want`: it reads them, and
/// until they match waits for the next change that can move them — the push dispatcher's
/// (a receive, an attempt counted, a settlement written: `Broker::push_changes`) or a pass
/// of the sweeper (lock expiries, TTLs). Bounded by the test kit's guard, never a timing
/// rule.
pub(crate) async fn until_stats(s: &TestServer, sub: &str, want: Value) {
    let mut pushed = s.broker.push_changes();
    let mut swept = s.broker.passes(redrive_broker::SWEEP_LEASE);
    redrive_testkit::within(&format!("stats of {sub} as {want}"), async {
        loop {
            // Marked seen before the read: a change after it wakes the wait below.
            pushed.borrow_and_update();
            swept.borrow_and_update();
            let (_, v) = s
                .get(&format!("/v1/topics/orders/subscriptions/{sub}"))
                .await;
            let stats = &v["stats"];
            if want
                .as_object()
                .unwrap()
                .iter()
                .all(|(k, w)| stats.get(k) == Some(w))
            {
                return;
            }
            tokio::select! {
                r = pushed.changed() => r.expect("the broker outlives the test"),
                r = swept.changed() => r.expect("the broker outlives the test"),
            }
        }
    })
    .await;
}

#[tokio::test]
async fn push_delivery_retries_on_the_schedule_then_succeeds() {
    let s = TestServer::start().await;
    let rx = Receiver::script([500, 503], 200).await;
    let url = rx.url.clone();
    s.topic("orders", json!({})).await;
    let (st, v) = s
        .post(
            "/v1/topics/orders/subscriptions",
            json!({"name": "hook", "type": "push", "endpoint": url,
                   "dead_letter": {"type": "own_store"},
                   "retry_policy": {"jitter": 0.0}}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, _) = s
        .publish("orders", &[event("1", "order.created", "/eu/1")])
        .await;
    assert_eq!(st, StatusCode::CREATED);

    // Attempt 1 at once (500), then in backoff for 10 s.
    rx.wait_for(1).await;
    let idle = json!({"pending": 0, "in_backoff": 1, "in_flight": 0, "dead_lettered": 0});
    until_stats(&s, "hook", idle.clone()).await;
    s.advance(9_999);
    until_stats(&s, "hook", idle.clone()).await;
    assert_eq!(rx.deliveries().len(), 1, "not before its time");
    // Attempt 2 after 10 s (503), then 30 s.
    s.advance(1);
    rx.wait_for(2).await;
    until_stats(&s, "hook", idle.clone()).await;
    s.advance(29_000);
    until_stats(&s, "hook", idle).await;
    assert_eq!(rx.deliveries().len(), 2);
    // Attempt 3 after 30 more seconds succeeds: the event is complete.
    s.advance(1_000);
    rx.wait_for(3).await;
    until_stats(
        &s,
        "hook",
        json!({"pending": 0, "in_backoff": 0, "in_flight": 0, "dead_lettered": 0}),
    )
    .await;
    let seen = rx.deliveries();
    let attempts: Vec<&str> = seen
        .iter()
        .map(|r| r.header("redrive-delivery-attempt"))
        .collect();
    assert_eq!(attempts, ["1", "2", "3"]);
    assert_eq!(seen[2].json(), event("1", "order.created", "/eu/1"));
    s.stop().await;
}

#[tokio::test]
async fn push_delivery_dead_letters_a_rejected_event_at_once() {
    let s = TestServer::start().await;
    let rx = Receiver::script([400], 200).await;
    let url = rx.url.clone();
    s.topic("orders", json!({})).await;
    let (st, v) = s
        .post(
            "/v1/topics/orders/subscriptions",
            json!({"name": "hook", "type": "push", "endpoint": url,
                   "dead_letter": {"type": "own_store"}}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    s.publish("orders", &[event("1", "order.created", "/eu/1")])
        .await;
    rx.wait_for(1).await;
    until_stats(
        &s,
        "hook",
        json!({"pending": 0, "in_backoff": 0, "in_flight": 0, "dead_lettered": 1}),
    )
    .await;
    let (st, v) = s.get("/v1/queues/orders.hook/dead-letters").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let rec = &v["dead_letters"][0];
    assert_eq!(rec["reason"], "EndpointRejected", "{v}");
    assert!(rec["description"].as_str().unwrap().contains("400"), "{v}");
    s.stop().await;
}

/// Creates the push subscription `hook` on `orders` with this retry policy.
pub(crate) async fn push_sub(s: &TestServer, url: &str, retry_policy: Value) {
    let (st, v) = s
        .post(
            "/v1/topics/orders/subscriptions",
            json!({"name": "hook", "type": "push", "endpoint": url,
                   "dead_letter": {"type": "own_store"},
                   "retry_policy": retry_policy}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
}

/// The only dead-letter record of `orders.hook`, and its description parsed as the
/// evidence object.
pub(crate) async fn the_dead_letter(s: &TestServer) -> (Value, Value) {
    let (st, v) = s.get("/v1/queues/orders.hook/dead-letters").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let recs = v["dead_letters"].as_array().unwrap();
    assert_eq!(recs.len(), 1, "{v}");
    let evidence = serde_json::from_str(recs[0]["description"].as_str().unwrap()).unwrap();
    (recs[0].clone(), evidence)
}

#[tokio::test]
async fn push_delivery_gives_up_after_max_attempts_with_evidence() {
    let s = TestServer::start().await;
    let rx = Receiver::webhook(|_, _| Reply::status(500)).await;
    let url = rx.url.clone();
    s.topic("orders", json!({})).await;
    push_sub(
        &s,
        &url,
        json!({"max_delivery_attempts": 3, "event_time_to_live_minutes": 1440, "jitter": 0.0}),
    )
    .await;
    s.publish("orders", &[event("1", "order.created", "/eu/1")])
        .await;
    let idle = json!({"pending": 0, "in_backoff": 1, "in_flight": 0, "dead_lettered": 0});

    // Attempt 1 at once, attempt 2 10 s later, attempt 3 30 s after that: none early.
    rx.wait_for(1).await;
    until_stats(&s, "hook", idle.clone()).await;
    s.advance(9_999);
    until_stats(&s, "hook", idle.clone()).await;
    assert_eq!(rx.deliveries().len(), 1, "not before 10 s");
    s.advance(1);
    rx.wait_for(2).await;
    until_stats(&s, "hook", idle.clone()).await;
    s.advance(29_999);
    until_stats(&s, "hook", idle).await;
    assert_eq!(rx.deliveries().len(), 2, "not before 30 s more");
    s.advance(1);
    rx.wait_for(3).await;
    until_stats(
        &s,
        "hook",
        json!({"pending": 0, "in_backoff": 0, "in_flight": 0, "dead_lettered": 1}),
    )
    .await;
    // No fourth attempt, however long we wait.
    s.advance(3_600_000);
    until_stats(
        &s,
        "hook",
        json!({"pending": 0, "in_backoff": 0, "in_flight": 0, "dead_lettered": 1}),
    )
    .await;
    assert_eq!(rx.attempts(), ["1", "2", "3"]);

    let (rec, evidence) = the_dead_letter(&s).await;
    assert_eq!(rec["reason"], "MaxDeliveryAttemptsExceeded", "{rec}");
    assert_eq!(rec["delivery_count"], 3, "{rec}");
    assert_eq!(
        evidence,
        json!({
            "deadLetterReason": "MaxDeliveryAttemptsExceeded",
            "deliveryAttempts": 3,
            "lastDeliveryOutcome": "500",
            "lastHttpStatusCode": 500,
            "publishTime": T0.to_rfc3339(),
            "lastDeliveryAttemptTime": T0.plus_millis(40_000).to_rfc3339(),
        })
    );
    s.stop().await;
}

#[tokio::test]
async fn push_delivery_stops_at_the_event_time_to_live() {
    let s = TestServer::start().await;
    let rx = Receiver::webhook(|_, _| Reply::status(503)).await;
    let url = rx.url.clone();
    s.topic("orders", json!({})).await;
    // Ten attempts allowed, but only one minute to live.
    push_sub(
        &s,
        &url,
        json!({"event_time_to_live_minutes": 1, "jitter": 0.0}),
    )
    .await;
    s.publish("orders", &[event("1", "order.created", "/eu/1")])
        .await;
    let idle = json!({"pending": 0, "in_backoff": 1, "in_flight": 0, "dead_lettered": 0});

    rx.wait_for(1).await;
    until_stats(&s, "hook", idle.clone()).await;
    s.advance(10_000);
    rx.wait_for(2).await;
    until_stats(&s, "hook", idle).await;
    s.advance(30_000);
    // Attempt 3 at 40 s; the next would be at 100 s, past the minute: the event waits
    // for its expiry, and is given up when the minute has passed, not earlier.
    rx.wait_for(3).await;
    let waiting = json!({"pending": 0, "in_backoff": 1, "in_flight": 0, "dead_lettered": 0});
    until_stats(&s, "hook", waiting.clone()).await;
    s.advance(19_999);
    until_stats(&s, "hook", waiting).await;
    s.advance(1);
    until_stats(
        &s,
        "hook",
        json!({"pending": 0, "in_backoff": 0, "in_flight": 0, "dead_lettered": 1}),
    )
    .await;
    assert_eq!(rx.attempts(), ["1", "2", "3"]);

    let (rec, evidence) = the_dead_letter(&s).await;
    assert_eq!(rec["reason"], "TimeToLiveExceeded", "{rec}");
    assert_eq!(rec["routed_by"], "broker", "{rec}");
    assert_eq!(rec["dead_lettered_at"], T0.plus_millis(60_000).to_rfc3339());
    assert_eq!(evidence["deadLetterReason"], "TimeToLiveExceeded");
    assert_eq!(evidence["deliveryAttempts"], 3);
    assert_eq!(evidence["publishTime"], T0.to_rfc3339());
    // Given up without an attempt at the expiry: the last outcome is the third attempt's.
    assert_eq!(evidence["lastDeliveryOutcome"], "503", "{evidence}");
    assert_eq!(evidence["lastHttpStatusCode"], 503, "{evidence}");
    assert_eq!(
        evidence["lastDeliveryAttemptTime"],
        T0.plus_millis(40_000).to_rfc3339()
    );
    s.stop().await;
}

#[tokio::test]
async fn push_delivery_honours_retry_after() {
    let s = TestServer::start().await;
    let rx = Receiver::script([Reply::status(429).header("retry-after", "120")], 200).await;
    let url = rx.url.clone();
    s.topic("orders", json!({})).await;
    push_sub(&s, &url, json!({"jitter": 0.0})).await;
    s.publish("orders", &[event("1", "order.created", "/eu/1")])
        .await;
    let idle = json!({"pending": 0, "in_backoff": 1, "in_flight": 0, "dead_lettered": 0});

    rx.wait_for(1).await;
    until_stats(&s, "hook", idle.clone()).await;
    // The schedule says 10 s; the endpoint asked for 120 s.
    s.advance(10_000);
    until_stats(&s, "hook", idle.clone()).await;
    s.advance(109_999);
    until_stats(&s, "hook", idle).await;
    assert_eq!(rx.deliveries().len(), 1, "not before 120 s");
    s.advance(1);
    rx.wait_for(2).await;
    until_stats(
        &s,
        "hook",
        json!({"pending": 0, "in_backoff": 0, "in_flight": 0, "dead_lettered": 0}),
    )
    .await;
    assert_eq!(rx.attempts(), ["1", "2"]);
    s.stop().await;
}

#[tokio::test]
async fn push_state_survives_a_restart_in_backoff() {
    let s = TestServer::start().await;
    let rx = Receiver::script([500], 200).await;
    let url = rx.url.clone();
    s.topic("orders", json!({})).await;
    push_sub(&s, &url, json!({"jitter": 0.0})).await;
    s.publish("orders", &[event("1", "order.created", "/eu/1")])
        .await;
    let idle = json!({"pending": 0, "in_backoff": 1, "in_flight": 0, "dead_lettered": 0});
    rx.wait_for(1).await;
    until_stats(&s, "hook", idle.clone()).await;

    // Same SQLite file, same clock, a new process-equivalent.
    let s = s.restart().await;
    until_stats(&s, "hook", idle.clone()).await;
    s.advance(9_999);
    until_stats(&s, "hook", idle).await;
    assert_eq!(rx.deliveries().len(), 1, "the schedule survived");
    s.advance(1);
    rx.wait_for(2).await;
    until_stats(
        &s,
        "hook",
        json!({"pending": 0, "in_backoff": 0, "in_flight": 0, "dead_lettered": 0}),
    )
    .await;
    assert_eq!(rx.attempts(), ["1", "2"], "the attempt count survived");
    s.stop().await;
}

#[tokio::test]
async fn push_delivery_batches_and_settles_a_batch_by_its_one_outcome() {
    let s = TestServer::start().await;
    // Two batches answered 200, then one answered 500, then 200 again.
    let rx = Receiver::script([200, 200, 500], 200).await;
    let url = rx.url.clone();
    s.topic("orders", json!({})).await;
    let (st, v) = s
        .post(
            "/v1/topics/orders/subscriptions",
            json!({"name": "hook", "type": "push", "endpoint": url,
                   "dead_letter": {"type": "own_store"},
                   "retry_policy": {"jitter": 0.0},
                   "delivery": {"max_events_per_batch": 3}}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let five: Vec<Value> = (1..=5)
        .map(|i| event(&i.to_string(), "order.created", "/eu/1"))
        .collect();
    let (st, _) = s.publish("orders", &five).await;
    assert_eq!(st, StatusCode::CREATED);

    // Five events with at most three per batch: two batch requests, 3 + 2, all completed.
    rx.wait_for(2).await;
    let done = json!({"pending": 0, "in_backoff": 0, "in_flight": 0, "dead_lettered": 0});
    until_stats(&s, "hook", done.clone()).await;
    let first = rx.deliveries();
    assert_eq!(first.len(), 2);
    let mut sizes = Vec::new();
    let mut got = Vec::new();
    for req in &first {
        assert_eq!(req.header("redrive-delivery-attempt"), "1");
        assert_eq!(
            req.header("content-type"),
            "application/cloudevents-batch+json"
        );
        let body = req.json();
        let batch = body.as_array().expect("a batch is a JSON array");
        sizes.push(batch.len());
        got.extend(batch.iter().cloned());
    }
    sizes.sort_unstable();
    assert_eq!(sizes, [2, 3]);
    got.sort_by_key(|e| e["id"].as_str().unwrap().to_owned());
    assert_eq!(got, five);

    // A 500 on a batch retries all of its events, together, on the schedule.
    let three: Vec<Value> = (6..=8)
        .map(|i| event(&i.to_string(), "order.created", "/eu/1"))
        .collect();
    let (st, _) = s.publish("orders", &three).await;
    assert_eq!(st, StatusCode::CREATED);
    rx.wait_for(3).await;
    let backoff = json!({"pending": 0, "in_backoff": 3, "in_flight": 0, "dead_lettered": 0});
    until_stats(&s, "hook", backoff.clone()).await;
    s.advance(9_999);
    until_stats(&s, "hook", backoff).await;
    assert_eq!(rx.deliveries().len(), 3, "not before its time");
    s.advance(1);
    rx.wait_for(4).await;
    until_stats(&s, "hook", done).await;
    let seen = rx.deliveries();
    assert_eq!(seen.len(), 4);
    for req in &seen[2..] {
        assert_eq!(
            req.header("content-type"),
            "application/cloudevents-batch+json"
        );
        assert_eq!(req.json(), Value::Array(three.clone()));
    }
    assert_eq!(rx.attempts()[2..], ["1", "2"]);
    s.stop().await;
}

#[tokio::test]
async fn push_delivery_sends_the_published_bytes_as_they_are() {
    let s = TestServer::start().await;
    let rx = Receiver::webhook(|_, _| Reply::status(200)).await;
    let url = rx.url.clone();
    s.topic("orders", json!({})).await;
    for (name, batch) in [("single", 1), ("batched", 10)] {
        let (st, v) = s
            .post(
                "/v1/topics/orders/subscriptions",
                json!({"name": name, "type": "push", "endpoint": url,
                       "dead_letter": {"type": "own_store"},
                       "delivery": {"max_events_per_batch": batch}}),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
    }
    let pull = s.pull_sub("orders", "pull", json!({})).await;
    // The publisher's own spacing, key order and escapes.
    let e1 = "{ \"type\":\"order.created\", \"id\": \"e1\",\n \"source\":\"/shop\", \
              \"specversion\":\"1.0\", \"data\": {\"note\": \"caf\\u00e9 \\\"x\\\"\", \"n\": 1.50} }";
    let e2 = "{\"specversion\":\"1.0\",\"id\":\"e2\",\"source\":\"/shop\",\"type\":\"t\",\
              \"subject\":null,\"data_base64\":\"AP8=\"}";
    let e3 = "{\n  \"id\" : \"e3\" ,\"specversion\":\"1.0\",\"source\":\"/shop\",\"type\":\"t\"\n}";
    let (st, v) = s
        .publish_raw(
            "orders",
            "application/cloudevents+json",
            e1.as_bytes().to_vec(),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let batch = format!("[ {e2} ,\n{e3}\n]");
    let (st, v) = s
        .publish_raw(
            "orders",
            "application/cloudevents-batch+json",
            batch.into_bytes(),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let raw = |id: &str| match id {
        "e1" => e1,
        "e2" => e2,
        "e3" => e3,
        other => panic!("unexpected event {other}"),
    };

    // A pull subscription's queue holds the same bytes.
    let got = s.receive(&pull, 10).await;
    let bodies: Vec<&str> = got.iter().map(|m| m["body"].as_str().unwrap()).collect();
    assert_eq!(bodies, [e1, e2, e3]);

    // Three single requests and one to three batch requests, all completed.
    let done = json!({"pending": 0, "in_backoff": 0, "in_flight": 0, "dead_lettered": 0});
    until_stats(&s, "single", done.clone()).await;
    until_stats(&s, "batched", done).await;
    let seen = rx.deliveries();
    let mut singles = Vec::new();
    let mut batched = Vec::new();
    for req in &seen {
        let (sub, ct, id) = (
            req.header("redrive-subscription"),
            req.header("content-type"),
            req.header("redrive-event-id"),
        );
        let body = String::from_utf8(req.body.to_vec()).unwrap();
        if sub == "orders/single" {
            assert_eq!(ct, "application/cloudevents+json");
            assert_eq!(body, raw(id), "the stored bytes, byte for byte");
            singles.push(id.to_owned());
        } else {
            assert_eq!(sub, "orders/batched");
            assert_eq!(ct, "application/cloudevents-batch+json");
            // A valid JSON array whose elements are the stored events, joined as they are.
            let array: Value = serde_json::from_str(&body).expect("a batch is valid JSON");
            let ids: Vec<&str> = array
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["id"].as_str().unwrap())
                .collect();
            let expected = format!(
                "[{}]",
                ids.iter().map(|id| raw(id)).collect::<Vec<_>>().join(",")
            );
            assert_eq!(body, expected);
            batched.extend(ids.iter().map(|id| id.to_string()));
        }
    }
    singles.sort();
    batched.sort();
    assert_eq!(singles, ["e1", "e2", "e3"]);
    assert_eq!(batched, ["e1", "e2", "e3"]);
    s.stop().await;
}

#[tokio::test]
async fn an_event_counts_whole_with_the_headers_copied_from_it() {
    let s = TestServer::start().await;
    s.topic("t", json!({"max_event_size": 1024})).await;
    let q = s.pull_sub("t", "all", json!({})).await;
    // The structured JSON is under the limit, but with its id and type stored again as
    // the message's headers the event is over it.
    let mut ev = event(&"i".repeat(300), &"t".repeat(100), "/s");
    ev["data"] = json!("d".repeat(100));
    let json_len = serde_json::to_vec(&ev).unwrap().len();
    assert!(json_len < 1024, "{json_len}");
    let r = s.publish("t", &[ev]).await;
    assert_problem(&r, 413, "event_too_large");
    assert!(r.1["size"].as_u64().unwrap() > 1024, "{}", r.1);
    assert_eq!(s.counts(&q).await["active"], 0, "nothing stored");
    s.stop().await;
}

#[tokio::test]
async fn push_endpoints_on_private_addresses_are_refused_unless_allowed() {
    // The default: nothing private, loopback or link-local.
    let s = TestServer::builder()
        .network(redrive_broker::NetworkPolicy::default())
        .start()
        .await;
    s.topic("t", json!({})).await;
    for (i, endpoint) in [
        "http://127.0.0.1:9/internal/admin",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/hook",
        "http://[::1]:9/hook",
        "http://localhost:9/hook",
    ]
    .into_iter()
    .enumerate()
    {
        let r = s
            .post(
                "/v1/topics/t/subscriptions",
                json!({"name": format!("s{i}"), "type": "push", "endpoint": endpoint,
                       "skip_validation": true, "dead_letter": {"type": "own_store"}}),
            )
            .await;
        assert_problem(&r, 400, "endpoint_forbidden");
        assert_eq!(r.1["endpoint"], endpoint);
    }
    let (_, subs) = s.get("/v1/topics/t/subscriptions").await;
    assert_eq!(subs["subscriptions"], json!([]), "nothing created: {subs}");
    s.stop().await;

    // Allowed by the operator: created.
    let allowed =
        redrive_broker::NetworkPolicy::allowing(&["10.0.0.0/8", "169.254.169.254"]).unwrap();
    let s = TestServer::builder().network(allowed).start().await;
    s.topic("t", json!({})).await;
    for (i, endpoint) in ["http://10.0.0.1/hook", "http://169.254.169.254/x"]
        .into_iter()
        .enumerate()
    {
        let (st, v) = s
            .post(
                "/v1/topics/t/subscriptions",
                json!({"name": format!("s{i}"), "type": "push", "endpoint": endpoint,
                       "skip_validation": true, "dead_letter": {"type": "own_store"}}),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
    }
    let r = s
        .post(
            "/v1/topics/t/subscriptions",
            json!({"name": "lo", "type": "push", "endpoint": "http://127.0.0.1:9/x",
                   "skip_validation": true, "dead_letter": {"type": "own_store"}}),
        )
        .await;
    assert_problem(&r, 400, "endpoint_forbidden");
    s.stop().await;
}

#[tokio::test]
async fn an_event_that_repeats_an_attribute_is_refused_and_nothing_is_stored() {
    let s = TestServer::start().await;
    s.topic("t", json!({})).await;
    let q = s.pull_sub("t", "all", json!({})).await;
    let batch = br#"[{"specversion":"1.0","id":"a","id":"b","source":"/s","type":"t"}]"#;
    let (st, v) = s
        .publish_raw("t", "application/cloudevents-batch+json", batch.to_vec())
        .await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["code"], "invalid_event", "{v}");
    let one = br#"{"specversion":"1.0","id":"a","source":"/s","source":"/x","type":"t"}"#;
    let (st, v) = s
        .publish_raw("t", "application/cloudevents+json", one.to_vec())
        .await;
    assert_eq!(st, 400, "{v}");
    assert_eq!(s.counts(&q).await["active"], 0);
    s.stop().await;
}
