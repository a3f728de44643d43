//! Push delivery as Event Grid applies it to webhooks ("Message delivery and retry"): a
//! 404 is retried on the schedule, a 403 is dead-lettered at once and routed by the
//! broker, the time to live is exact on the manual clock, and an application cannot
//! borrow the broker's reason codes.

use redrive_testkit::{Receiver, T0, TestServer, assert_problem};
use reqwest::StatusCode;
use serde_json::json;

use crate::topics::{event, push_sub, the_dead_letter, until_stats};

#[tokio::test]
async fn a_404_endpoint_is_retried_on_the_schedule_not_dead_lettered() {
    let s = TestServer::start().await;
    let rx = Receiver::script([404, 404], 200).await;
    let url = rx.url.clone();
    s.topic("orders", json!({})).await;
    push_sub(&s, &url, json!({"jitter": 0.0})).await;
    s.publish("orders", &[event("1", "order.created", "/eu/1")])
        .await;
    let waiting = json!({"pending": 0, "in_backoff": 1, "in_flight": 0, "dead_lettered": 0});
    rx.wait_for(1).await;
    until_stats(&s, "hook", waiting.clone()).await;
    s.advance(10_000);
    rx.wait_for(2).await;
    until_stats(&s, "hook", waiting).await;
    s.advance(30_000);
    rx.wait_for(3).await;
    until_stats(
        &s,
        "hook",
        json!({"pending": 0, "in_backoff": 0, "in_flight": 0, "dead_lettered": 0,
               "failed_attempts": {"4xx": 2}}),
    )
    .await;
    let attempts: Vec<String> = rx
        .deliveries()
        .iter()
        .map(|r| r.header("redrive-delivery-attempt").to_owned())
        .collect();
    assert_eq!(attempts, ["1", "2", "3"]);
    let (st, v) = s.get("/v1/queues/orders.hook/dead-letters").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["dead_letters"], json!([]), "{v}");
    s.stop().await;
}

#[tokio::test]
async fn a_403_is_dead_lettered_at_once_and_routed_by_the_broker() {
    let s = TestServer::start().await;
    let rx = Receiver::script([403], 200).await;
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
    s.advance(3_600_000);
    until_stats(&s, "hook", json!({"in_backoff": 0, "dead_lettered": 1})).await;
    assert_eq!(rx.deliveries().len(), 1, "no second attempt");
    let (rec, evidence) = the_dead_letter(&s).await;
    assert_eq!(rec["reason"], "EndpointRejected", "{rec}");
    assert_eq!(rec["routed_by"], "broker", "{rec}");
    assert_eq!(evidence["lastHttpStatusCode"], 403);
    assert_eq!(evidence["deliveryAttempts"], 1);
    s.stop().await;
}

#[tokio::test]
async fn the_time_to_live_is_exact_the_event_waits_for_it() {
    let s = TestServer::start().await;
    let rx = Receiver::script([503, 503, 503], 200).await;
    let url = rx.url.clone();
    s.topic("orders", json!({})).await;
    // Attempts at 0 s, 10 s and 40 s; the next would be at 70 s, after the one-minute
    // time to live.
    push_sub(
        &s,
        &url,
        json!({"jitter": 0.0, "event_time_to_live_minutes": 1,
               "schedule_ms": [10_000, 30_000]}),
    )
    .await;
    s.publish("orders", &[event("1", "order.created", "/eu/1")])
        .await;
    let waiting = json!({"pending": 0, "in_backoff": 1, "in_flight": 0, "dead_lettered": 0});
    rx.wait_for(1).await;
    until_stats(&s, "hook", waiting.clone()).await;
    s.advance(10_000);
    rx.wait_for(2).await;
    until_stats(&s, "hook", waiting.clone()).await;
    s.advance(30_000);
    rx.wait_for(3).await;
    // Not dead-lettered when the next retry is found to fall after the expiry: it waits.
    until_stats(&s, "hook", waiting.clone()).await;
    s.advance(19_999);
    until_stats(&s, "hook", waiting).await;
    s.advance(1);
    until_stats(
        &s,
        "hook",
        json!({"pending": 0, "in_backoff": 0, "in_flight": 0, "dead_lettered": 1,
               "dead_lettered_by_reason": {"TimeToLiveExceeded": 1}}),
    )
    .await;
    assert_eq!(
        rx.deliveries().len(),
        3,
        "no attempt at or after the expiry"
    );
    let (rec, evidence) = the_dead_letter(&s).await;
    assert_eq!(rec["routed_by"], "broker", "{rec}");
    assert_eq!(
        rec["dead_lettered_at"],
        T0.plus_millis(60_000).to_rfc3339(),
        "{rec}"
    );
    assert_eq!(evidence["deadLetterReason"], "TimeToLiveExceeded");
    assert_eq!(evidence["deliveryAttempts"], 3);
    assert_eq!(evidence["publishTime"], T0.to_rfc3339());
    s.stop().await;
}

#[tokio::test]
async fn an_application_cannot_borrow_the_brokers_reason_codes() {
    let s = TestServer::start().await;
    s.queue("q", json!({})).await;
    s.send("q", &["abc"]).await;
    let got = s.receive("q", 1).await;
    let token = got[0]["lock_token"].as_str().unwrap();
    for reason in [
        "MaxDeliveryCountExceeded",
        "TTLExpired",
        "MaxDeliveryAttemptsExceeded",
        "TimeToLiveExceeded",
        "EndpointRejected",
    ] {
        let r = s
            .settle("q", token, "dead_letter", json!({"reason": reason}))
            .await;
        assert_problem(&r, 400, "invalid_request");
        assert_eq!(r.1["field"], "reason", "{reason}: {}", r.1);
    }
    // Nothing changed: no record, and the lock still holds the message.
    let (st, v) = s.get("/v1/queues/q/dead-letters").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["dead_letters"], json!([]), "{v}");
    let (st, v) = s
        .settle("q", token, "dead_letter", json!({"reason": "Unparseable"}))
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let id = v["dead_letter_id"].as_str().unwrap();
    let (st, r) = s.get(&format!("/v1/queues/q/dead-letters/{id}")).await;
    assert_eq!(st, StatusCode::OK, "{r}");
    assert_eq!(r["reason"], "Unparseable");
    assert_eq!(r["routed_by"], "application");
    assert_eq!(r["delivery_count"], 1);
    s.stop().await;
}
