//! Push delivery against the answers the decision table names and the rest of the
//! delivery surface: a refused connection, 413, an endpoint slower than the timeout (on
//! the manual clock), a dead-letter topic, per-subscription statistics and Prometheus
//! metrics, the pause shown in stats, and a subscription's queue managed only through
//! its subscription.

use redrive_testkit::{Receiver, Reply, T0, TestServer, assert_problem, refused_url, within};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::topics::{event, push_sub, the_dead_letter, until_stats};

/// A push endpoint that never answers its first delivery (it holds it open) and answers
/// 200 to the others.
async fn stalling_receiver() -> Receiver {
    Receiver::webhook(|n, _| {
        if n == 0 {
            Reply::never()
        } else {
            Reply::status(200)
        }
    })
    .await
}

async fn sub_stats(s: &TestServer, topic: &str, sub: &str) -> Value {
    let (st, v) = s
        .get(&format!("/v1/topics/{topic}/subscriptions/{sub}"))
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    v["stats"].clone()
}

#[tokio::test]
async fn a_refused_connection_is_retried_then_dead_lettered_with_the_error() {
    let s = TestServer::start().await;
    let url = refused_url();
    s.topic("orders", json!({})).await;
    let (st, v) = s
        .post(
            "/v1/topics/orders/subscriptions",
            json!({"name": "hook", "type": "push", "endpoint": url, "skip_validation": true,
                   "dead_letter": {"type": "own_store"},
                   "retry_policy": {"max_delivery_attempts": 2, "jitter": 0.0}}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(v["kind"]["validation"], "skipped", "{v}");
    s.publish("orders", &[event("1", "order.created", "/eu/1")])
        .await;

    // Attempt 1 fails to connect: in backoff for 10 s, counted as a connection error.
    until_stats(
        &s,
        "hook",
        json!({"in_backoff": 1, "failed_attempts": {"connection_error": 1}}),
    )
    .await;
    s.advance(10_000);
    until_stats(
        &s,
        "hook",
        json!({"in_backoff": 0, "dead_lettered": 1,
               "failed_attempts": {"connection_error": 2},
               "dead_lettered_by_reason": {"MaxDeliveryAttemptsExceeded": 1}}),
    )
    .await;
    let (rec, evidence) = the_dead_letter(&s).await;
    assert_eq!(rec["reason"], "MaxDeliveryAttemptsExceeded");
    assert_eq!(evidence["deliveryAttempts"], 2);
    assert_eq!(evidence["lastDeliveryOutcome"], "connection error");
    assert!(evidence.get("lastHttpStatusCode").is_none(), "{evidence}");
    assert!(
        !evidence["lastDeliveryError"].as_str().unwrap().is_empty(),
        "{evidence}"
    );
    assert_eq!(
        evidence["lastDeliveryAttemptTime"],
        T0.plus_millis(10_000).to_rfc3339()
    );
    // The same diagnostics, as a first-class object of the record.
    assert_eq!(rec["diagnostics"], evidence, "{rec}");
    s.stop().await;
}

#[tokio::test]
async fn payload_too_large_is_rejected_at_once() {
    let s = TestServer::start().await;
    let rx = Receiver::script([413], 200).await;
    let url = rx.url.clone();
    s.topic("orders", json!({})).await;
    push_sub(&s, &url, json!({"jitter": 0.0})).await;
    s.publish("orders", &[event("1", "order.created", "/eu/1")])
        .await;
    until_stats(
        &s,
        "hook",
        json!({"in_backoff": 0, "dead_lettered": 1, "failed_attempts": {"4xx": 1},
               "dead_lettered_by_reason": {"EndpointRejected": 1}}),
    )
    .await;
    assert_eq!(rx.deliveries().len(), 1, "no second attempt");
    let (rec, evidence) = the_dead_letter(&s).await;
    assert_eq!(rec["reason"], "EndpointRejected");
    assert_eq!(rec["diagnostics"]["deadLetterReason"], "EndpointRejected");
    assert_eq!(evidence["lastHttpStatusCode"], 413);
    assert_eq!(evidence["lastDeliveryOutcome"], "413");
    assert_eq!(evidence["deliveryAttempts"], 1);
    assert_eq!(evidence["publishTime"], T0.to_rfc3339());
    s.stop().await;
}

#[tokio::test]
async fn an_endpoint_slower_than_the_timeout_is_retried_on_the_schedule() {
    let s = TestServer::start().await;
    let rx = stalling_receiver().await;
    let url = rx.url.clone();
    s.topic("orders", json!({})).await;
    let (st, v) = s
        .post(
            "/v1/topics/orders/subscriptions",
            json!({"name": "hook", "type": "push", "endpoint": url,
                   "dead_letter": {"type": "own_store"},
                   "delivery": {"timeout_ms": 5000},
                   "retry_policy": {"jitter": 0.0}}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    s.publish("orders", &[event("1", "order.created", "/eu/1")])
        .await;
    // Attempt 1 is open: the event is in flight until the 5 s timeout runs out.
    rx.wait_for(1).await;
    until_stats(&s, "hook", json!({"in_flight": 1})).await;
    s.advance(4_999);
    until_stats(&s, "hook", json!({"in_flight": 1, "failed_attempts": {}})).await;
    s.advance(1);
    until_stats(
        &s,
        "hook",
        json!({"in_flight": 0, "in_backoff": 1, "failed_attempts": {"timeout": 1}}),
    )
    .await;
    // The schedule counts from the end of the attempt: 10 s after the timeout.
    s.advance(9_999);
    until_stats(&s, "hook", json!({"in_backoff": 1})).await;
    assert_eq!(rx.deliveries().len(), 1);
    s.advance(1);
    until_stats(
        &s,
        "hook",
        json!({"in_backoff": 0, "pending": 0, "delivered": 1}),
    )
    .await;
    assert_eq!(rx.attempts(), ["1", "2"]);
    s.stop().await;
}

#[tokio::test]
async fn a_dead_letter_topic_gets_the_event_with_its_diagnostics() {
    let s = TestServer::start().await;
    let rx = Receiver::script([400], 200).await;
    let url = rx.url.clone();
    s.topic("orders", json!({})).await;
    s.topic("undeliverable", json!({})).await;
    let dlq = s.pull_sub("undeliverable", "all", json!({})).await;

    // The destination is checked at creation.
    for (dead_letter, field) in [
        (json!({"type": "topic", "name": "nowhere"}), "nowhere"),
        (json!({"type": "topic", "name": "orders"}), "own topic"),
    ] {
        let r = s
            .post(
                "/v1/topics/orders/subscriptions",
                json!({"name": "hook", "type": "push", "endpoint": url,
                       "dead_letter": dead_letter}),
            )
            .await;
        assert_problem(&r, 400, "invalid_request");
        assert!(r.1.to_string().contains(field), "{}", r.1);
    }
    let r = s
        .post(
            "/v1/topics/orders/subscriptions",
            json!({"name": "pull", "type": "pull",
                   "dead_letter": {"type": "topic", "name": "undeliverable"}}),
        )
        .await;
    assert_problem(&r, 400, "invalid_request");

    let (st, v) = s
        .post(
            "/v1/topics/orders/subscriptions",
            json!({"name": "hook", "type": "push", "endpoint": url,
                   "dead_letter": {"type": "topic", "name": "undeliverable"}}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let original = event("1", "order.created", "/eu/1");
    s.publish("orders", std::slice::from_ref(&original)).await;

    // A long poll on the manual clock: answered when the copy arrives, no time passes.
    let (st, got) = within(
        "the dead-lettered copy",
        s.post(
            &format!("/v1/queues/{dlq}/receive"),
            json!({"max_messages": 10, "wait_ms": 20_000}),
        ),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{got}");
    let copies = got["messages"].as_array().unwrap().clone();
    assert_eq!(copies.len(), 1, "{got}");
    let copy: Value = serde_json::from_str(copies[0]["body"].as_str().unwrap()).unwrap();
    for key in ["id", "source", "type", "subject", "data", "specversion"] {
        assert_eq!(copy[key], original[key], "{key}: {copy}");
    }
    assert_eq!(copy["deadletterreason"], "EndpointRejected", "{copy}");
    assert_eq!(copy["deliveryattempts"], 1);
    assert_eq!(copy["lasthttpstatuscode"], 400);
    assert_eq!(copy["lastdeliveryoutcome"], "400");
    assert_eq!(copy["publishtime"], T0.to_rfc3339());
    assert_eq!(copy["deadlettersubscription"], "orders/hook");

    // The evidence record stays in the subscription's own store, archived, byte-exact.
    until_stats(&s, "hook", json!({"dead_lettered": 0})).await;
    let (st, v) = s
        .get("/v1/queues/orders.hook/dead-letters?area=archived")
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let recs = v["dead_letters"].as_array().unwrap();
    assert_eq!(recs.len(), 1, "{v}");
    assert_eq!(copy["deadletterid"], recs[0]["id"]);
    let stored: Value = serde_json::from_str(recs[0]["body"].as_str().unwrap()).unwrap();
    assert_eq!(stored, original);
    s.stop().await;
}

#[tokio::test]
async fn stats_and_metrics_count_deliveries_by_outcome() {
    let s = TestServer::start().await;
    let rx = Receiver::script(
        [
            Reply::status(500),
            Reply::status(429).header("retry-after", "20"),
        ],
        200,
    )
    .await;
    let url = rx.url.clone();
    s.topic("orders", json!({})).await;
    push_sub(&s, &url, json!({"jitter": 0.0})).await;
    s.publish("orders", &[event("1", "order.created", "/eu/1")])
        .await;
    until_stats(
        &s,
        "hook",
        json!({"in_backoff": 1, "failed_attempts": {"5xx": 1}}),
    )
    .await;
    // Waiting since the publish.
    s.advance(4_000);
    until_stats(&s, "hook", json!({"oldest_pending_age_ms": 4_000})).await;
    s.advance(6_000);
    rx.wait_for(2).await;
    until_stats(
        &s,
        "hook",
        json!({"in_backoff": 1, "failed_attempts": {"5xx": 1, "429": 1}}),
    )
    .await;
    // The later of the schedule's 30 s and Retry-After's 20 s.
    s.advance(30_000);
    until_stats(
        &s,
        "hook",
        json!({"in_backoff": 0, "in_flight": 0, "pending": 0, "delivered": 1,
               "dead_lettered_by_reason": {}, "dropped": 0}),
    )
    .await;
    assert!(
        sub_stats(&s, "orders", "hook")
            .await
            .get("oldest_pending_age_ms")
            .is_none()
    );
    let text = s.metrics().await;
    let labels = "topic=\"orders\",subscription=\"hook\"";
    for line in [
        format!("redrive_push_delivered_total{{{labels}}} 1"),
        format!("redrive_push_failed_attempts_total{{{labels},class=\"5xx\"}} 1"),
        format!("redrive_push_failed_attempts_total{{{labels},class=\"429\"}} 1"),
        // Published at T0, delivered 40 s later.
        format!("redrive_push_delivery_latency_seconds_bucket{{{labels},le=\"10\"}} 0"),
        format!("redrive_push_delivery_latency_seconds_bucket{{{labels},le=\"60\"}} 1"),
        format!("redrive_push_delivery_latency_seconds_sum{{{labels}}} 40"),
        format!("redrive_push_delivery_latency_seconds_count{{{labels}}} 1"),
    ] {
        assert!(text.contains(&line), "missing {line:?} in\n{text}");
    }
    s.stop().await;
}

#[tokio::test]
async fn the_pause_shows_in_stats() {
    let s = TestServer::start().await;
    let rx = Receiver::webhook(|_, _| Reply::status(200)).await;
    let url = rx.url.clone();
    s.topic("orders", json!({})).await;
    push_sub(&s, &url, json!({})).await;
    assert_eq!(sub_stats(&s, "orders", "hook").await["paused"], false);
    let (st, v) = s
        .patch(
            "/v1/topics/orders/subscriptions/hook",
            json!({"paused": true}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    s.publish("orders", &[event("1", "order.created", "/eu/1")])
        .await;
    until_stats(&s, "hook", json!({"paused": true, "pending": 1})).await;
    assert!(rx.deliveries().is_empty());
    s.patch(
        "/v1/topics/orders/subscriptions/hook",
        json!({"paused": false}),
    )
    .await;
    until_stats(
        &s,
        "hook",
        json!({"paused": false, "pending": 0, "delivered": 1}),
    )
    .await;
    s.stop().await;
}

#[tokio::test]
async fn a_subscription_queue_is_managed_through_its_subscription() {
    let s = TestServer::start().await;
    s.topic("orders", json!({})).await;
    let q = s.pull_sub("orders", "all", json!({})).await;
    assert_eq!(q, "orders.all");
    let r = s.delete("/v1/queues/orders.all?force=true").await;
    assert_problem(&r, 400, "invalid_request");
    assert!(r.1.to_string().contains("subscription"), "{}", r.1);
    let r = s
        .patch("/v1/queues/orders.all", json!({"max_delivery_count": 2}))
        .await;
    assert_problem(&r, 400, "invalid_request");
    // Nothing changed: the queue is there, with the subscription's policy.
    let (st, v) = s.get("/v1/queues/orders.all").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["policy"]["max_delivery_count"], 10, "{v}");
    // A queue that merely looks like one (no such subscription) is an ordinary queue.
    s.queue("orders.other", json!({})).await;
    let (st, v) = s.delete("/v1/queues/orders.other").await;
    assert!(st.is_success(), "{v}");
    s.stop().await;
}

#[tokio::test]
async fn a_stalled_endpoint_holds_up_no_other_subscription() {
    let s = TestServer::start().await;
    let slow = stalling_receiver().await;
    let slow_url = slow.url.clone();
    let rx = Receiver::webhook(|_, _| Reply::status(200)).await;
    let url = rx.url.clone();
    s.topic("orders", json!({})).await;
    for (name, endpoint) in [("a-slow", &slow_url), ("b-fast", &url)] {
        let (st, v) = s
            .post(
                "/v1/topics/orders/subscriptions",
                json!({"name": name, "type": "push", "endpoint": endpoint,
                       "dead_letter": {"type": "own_store"}}),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
    }
    s.publish("orders", &[event("1", "order.created", "/eu/1")])
        .await;
    // The slow endpoint holds its request open (the clock does not move, so it never
    // times out); the other subscription is delivered meanwhile.
    slow.wait_for(1).await;
    rx.wait_for(1).await;
    until_stats(&s, "b-fast", json!({"delivered": 1, "pending": 0})).await;
    until_stats(&s, "a-slow", json!({"in_flight": 1, "delivered": 0})).await;
    // A second event reaches the fast endpoint too while the first attempt is still open.
    s.publish("orders", &[event("2", "order.created", "/eu/2")])
        .await;
    rx.wait_for(2).await;
    s.stop().await;
}

#[tokio::test]
async fn the_whole_default_schedule_is_walked_to_max_attempts() {
    let s = TestServer::start().await;
    let rx = Receiver::webhook(|_, _| Reply::status(503)).await;
    let url = rx.url.clone();
    s.topic("orders", json!({})).await;
    // Defaults: 10 attempts; a day to live so that the attempts run out first.
    push_sub(
        &s,
        &url,
        json!({"event_time_to_live_minutes": 1440, "jitter": 0.0}),
    )
    .await;
    s.publish("orders", &[event("1", "order.created", "/eu/1")])
        .await;
    rx.wait_for(1).await;
    // 10 s, 30 s, 1 min, 5 min, 10 min, 30 min, 1 h, then 3 h and 6 h (not hourly).
    let steps_s: [u64; 9] = [10, 30, 60, 300, 600, 1_800, 3_600, 10_800, 21_600];
    let mut at_ms = 0;
    for (i, step) in steps_s.iter().enumerate() {
        until_stats(&s, "hook", json!({"in_backoff": 1, "in_flight": 0})).await;
        s.advance(step * 1_000 - 1);
        until_stats(&s, "hook", json!({"in_backoff": 1})).await;
        assert_eq!(rx.deliveries().len(), i + 1, "attempt {} early", i + 2);
        s.advance(1);
        at_ms += step * 1_000;
        rx.wait_for(i + 2).await;
    }
    until_stats(
        &s,
        "hook",
        json!({"in_backoff": 0, "in_flight": 0, "dead_lettered": 1,
               "failed_attempts": {"5xx": 10},
               "dead_lettered_by_reason": {"MaxDeliveryAttemptsExceeded": 1}}),
    )
    .await;
    let want: Vec<String> = (1..=10).map(|n| n.to_string()).collect();
    assert_eq!(rx.attempts(), want);
    let (rec, evidence) = the_dead_letter(&s).await;
    assert_eq!(rec["delivery_count"], 10);
    assert_eq!(rec["routed_by"], "broker");
    assert_eq!(evidence["deliveryAttempts"], 10);
    assert_eq!(
        evidence["lastDeliveryAttemptTime"],
        T0.plus_millis(i64::try_from(at_ms).unwrap()).to_rfc3339()
    );
    s.stop().await;
}
