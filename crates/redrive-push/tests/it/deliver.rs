//! What a push request looks like to the receiver, and what each kind of answer (or
//! silence) becomes as an `AttemptOutcome`, judged by redrive-events' table.

use std::sync::Arc;
use std::time::Duration;

use redrive_core::{ManualClock, Timestamp};
use redrive_events::cloudevent::{BATCH, STRUCTURED};
use redrive_events::{AttemptOutcome, CloudEvent, GiveUp, RetryPolicy, Verdict};
use redrive_push::{Deliverer, DeliveryMode, EncodedEvent, PushTarget, TargetError, chunk};
use redrive_testkit::{Receiver, Reply, refused_url, within};
use serde_json::json;

use crate::loopback_settings;

// 2026-11-29T21:00:00Z
const NOW: Timestamp = Timestamp(1_795_986_000_000);

fn deliverer() -> Deliverer {
    Deliverer::new(loopback_settings(), Arc::new(ManualClock::new(NOW))).unwrap()
}

fn target(url: &str, mode: DeliveryMode) -> PushTarget {
    let t = PushTarget {
        headers: vec![("x-api-key".into(), "k1".into())],
        ..PushTarget::new(url, "orders-push", mode, Duration::from_secs(5))
    };
    t.validate().unwrap();
    t
}

fn event(id: &str) -> CloudEvent {
    CloudEvent::from_json(json!({
        "specversion": "1.0",
        "id": id,
        "source": "/orders",
        "type": "order.created",
        "subject": "orders/1 ä",
        "datacontenttype": "application/json",
        "data": {"amount": 5, "items": ["a", "b"]},
        "tenant": "acme",
    }))
    .unwrap()
}

fn status(status: u16, retry_after_ms: Option<u64>) -> AttemptOutcome {
    AttemptOutcome::Status {
        status,
        retry_after_ms,
    }
}

fn verdict(outcome: &AttemptOutcome) -> Verdict {
    let policy = RetryPolicy {
        jitter: 0.0,
        ..RetryPolicy::default()
    };
    policy.decide(outcome, 1, NOW, NOW, 0)
}

#[tokio::test]
async fn structured_mode_posts_the_event_as_json_with_the_redrive_headers() {
    let rx = Receiver::always(200).await;
    let e = event("e1");
    let outcome = deliverer()
        .deliver(
            &target(&rx.url, DeliveryMode::Structured),
            std::slice::from_ref(&e),
            3,
        )
        .await;
    assert_eq!(outcome, status(200, None));
    assert_eq!(verdict(&outcome), Verdict::Delivered);
    let seen = rx.requests();
    assert_eq!(seen.len(), 1);
    let req = &seen[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.path, "/hook");
    assert_eq!(req.header("content-type"), STRUCTURED);
    assert_eq!(req.header("redrive-subscription"), "orders-push");
    assert_eq!(req.header("redrive-delivery-attempt"), "3");
    assert_eq!(req.header("redrive-event-id"), "e1");
    assert_eq!(req.header("x-api-key"), "k1");
    assert!(req.header("ce-id").is_empty(), "no binary headers");
    let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
    assert_eq!(body, e.to_json());
    assert_eq!(CloudEvent::from_json(body).unwrap(), e);
}

#[tokio::test]
async fn binary_mode_posts_the_data_with_ce_headers() {
    let rx = Receiver::always(204).await;
    let e = event("e2");
    let outcome = deliverer()
        .deliver(
            &target(&rx.url, DeliveryMode::Binary),
            std::slice::from_ref(&e),
            1,
        )
        .await;
    assert_eq!(outcome, status(204, None));
    let req = &rx.requests()[0];
    assert_eq!(req.header("content-type"), "application/json");
    assert_eq!(req.header("ce-specversion"), "1.0");
    assert_eq!(req.header("ce-id"), "e2");
    assert_eq!(req.header("ce-source"), "/orders");
    assert_eq!(req.header("ce-type"), "order.created");
    assert_eq!(req.header("ce-subject"), "orders/1%20%C3%A4");
    assert_eq!(req.header("ce-tenant"), "acme");
    assert_eq!(req.header("redrive-event-id"), "e2");
    assert_eq!(req.header("redrive-delivery-attempt"), "1");
    assert_eq!(req.header("redrive-subscription"), "orders-push");
    let data: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
    assert_eq!(data, json!({"amount": 5, "items": ["a", "b"]}));
    // What the receiver got is the same event.
    let headers: Vec<(&str, &str)> = req
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.to_str().unwrap()))
        .collect();
    assert_eq!(CloudEvent::from_binary(headers, &req.body).unwrap(), e);
}

#[tokio::test]
async fn several_events_go_as_one_batch_array_in_order() {
    let rx = Receiver::always(200).await;
    let events: Vec<_> = ["b1", "b2", "b3"].into_iter().map(event).collect();
    let mut t = target(&rx.url, DeliveryMode::Structured);
    t.max_events_per_batch = 2;
    t.validate().unwrap();
    let d = deliverer();
    let batches = chunk(events.clone(), t.max_events_per_batch, 1 << 20);
    for batch in &batches {
        assert_eq!(d.deliver(&t, batch, 1).await, status(200, None));
    }
    let seen = rx.requests();
    assert_eq!(seen.len(), 2);
    let mut received = Vec::new();
    for req in &seen {
        assert_eq!(req.header("content-type"), BATCH);
        assert_eq!(req.header("redrive-subscription"), "orders-push");
        assert_eq!(req.header("redrive-delivery-attempt"), "1");
        let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
        received.extend(CloudEvent::batch_from_json(body).unwrap());
    }
    assert!(
        seen[0].header("redrive-event-id").is_empty(),
        "two events: no single id"
    );
    // The last batch holds one event and is still an array: one format per subscription.
    assert_eq!(seen[1].header("redrive-event-id"), "b3");
    assert_eq!(received, events);
}

#[tokio::test]
async fn encoded_events_are_sent_byte_for_byte() {
    let rx = Receiver::always(200).await;
    // As a publisher might send them: spacing and key order of its own.
    let raw = |id: &str| {
        EncodedEvent {
        id: id.to_owned(),
        json: format!(
            "{{ \"type\": \"order.created\",\n  \"id\": \"{id}\", \"source\": \"/orders\", \"specversion\": \"1.0\", \"data\": {{\"k\": \"\\u00e4\"}} }}"
        )
        .into_bytes(),
    }
    };
    let d = deliverer();
    let single = target(&rx.url, DeliveryMode::Structured);
    assert_eq!(
        d.deliver_encoded(&single, vec![raw("r1")], 2).await.outcome,
        status(200, None)
    );
    let mut batching = target(&rx.url, DeliveryMode::Structured);
    batching.max_events_per_batch = 10;
    let events = vec![raw("r2"), raw("r3")];
    assert_eq!(
        d.deliver_encoded(&batching, events.clone(), 1)
            .await
            .outcome,
        status(200, None)
    );
    assert_eq!(
        d.deliver_encoded(&batching, vec![raw("r4")], 1)
            .await
            .outcome,
        status(200, None)
    );
    assert_eq!(
        d.deliver_encoded(&single, Vec::new(), 1).await.outcome,
        status(204, None),
        "nothing to send"
    );
    let seen = rx.requests();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0].header("content-type"), STRUCTURED);
    assert_eq!(seen[0].header("redrive-event-id"), "r1");
    assert_eq!(seen[0].header("redrive-delivery-attempt"), "2");
    assert_eq!(seen[0].header("redrive-subscription"), "orders-push");
    assert_eq!(seen[0].header("x-api-key"), "k1");
    assert_eq!(
        seen[0].body,
        raw("r1").json,
        "the stored bytes, as they are"
    );
    assert_eq!(seen[1].header("content-type"), BATCH);
    assert!(seen[1].header("redrive-event-id").is_empty());
    let mut expected = b"[".to_vec();
    expected.extend_from_slice(&events[0].json);
    expected.push(b',');
    expected.extend_from_slice(&events[1].json);
    expected.push(b']');
    assert_eq!(seen[1].body, expected);
    let parsed: serde_json::Value = serde_json::from_slice(&seen[1].body).unwrap();
    let batch = CloudEvent::batch_from_json(parsed).unwrap();
    assert_eq!(batch[1].id, "r3");
    // One event for a batching target is still an array.
    assert_eq!(seen[2].header("content-type"), BATCH);
    assert_eq!(seen[2].header("redrive-event-id"), "r4");
    let one: Vec<serde_json::Value> = serde_json::from_slice(&seen[2].body).unwrap();
    assert_eq!(one.len(), 1);
}

#[tokio::test]
async fn binary_mode_with_batching_is_refused_up_front() {
    let mut t = PushTarget::new(
        "http://127.0.0.1:1/hook",
        "s",
        DeliveryMode::Binary,
        Duration::from_secs(5),
    );
    t.max_events_per_batch = 10;
    assert_eq!(
        t.validate(),
        Err(TargetError::BatchingRequiresStructuredMode(10))
    );
}

#[tokio::test]
async fn a_500_is_retried() {
    let rx = Receiver::always(500).await;
    let outcome = deliverer()
        .deliver(&target(&rx.url, DeliveryMode::Structured), &[event("e")], 1)
        .await;
    assert_eq!(outcome, status(500, None));
    assert_eq!(verdict(&outcome), Verdict::RetryAt(NOW.plus_millis(10_000)));
}

#[tokio::test]
async fn an_endpoint_failing_twice_then_accepting_sees_three_attempts() {
    let rx = Receiver::start(|n, _| Reply::status(if n < 2 { 503 } else { 200 })).await;
    let (d, t) = (deliverer(), target(&rx.url, DeliveryMode::Structured));
    let mut outcomes = Vec::new();
    for attempt in 1..=3 {
        outcomes.push(d.deliver(&t, &[event("e")], attempt).await);
    }
    assert_eq!(
        outcomes,
        [status(503, None), status(503, None), status(200, None)]
    );
    let attempts: Vec<_> = rx
        .requests()
        .iter()
        .map(|r| r.header("redrive-delivery-attempt").to_owned())
        .collect();
    assert_eq!(attempts, ["1", "2", "3"]);
}

#[tokio::test]
async fn a_400_or_413_dead_letters_at_once() {
    for code in [400, 413] {
        let rx = Receiver::always(code).await;
        let outcome = deliverer()
            .deliver(&target(&rx.url, DeliveryMode::Structured), &[event("e")], 1)
            .await;
        assert_eq!(outcome, status(code, None));
        assert_eq!(
            verdict(&outcome),
            Verdict::DeadLetter(GiveUp::EndpointRejected(code))
        );
    }
}

#[tokio::test]
async fn a_408_is_retried() {
    let rx = Receiver::always(408).await;
    let outcome = deliverer()
        .deliver(&target(&rx.url, DeliveryMode::Structured), &[event("e")], 1)
        .await;
    assert_eq!(outcome, status(408, None));
    assert!(matches!(verdict(&outcome), Verdict::RetryAt(_)));
}

#[tokio::test]
async fn a_429_carries_retry_after_in_seconds() {
    let rx = Receiver::start(|_, _| Reply::status(429).header("retry-after", "120")).await;
    let outcome = deliverer()
        .deliver(&target(&rx.url, DeliveryMode::Structured), &[event("e")], 1)
        .await;
    assert_eq!(outcome, status(429, Some(120_000)));
    assert_eq!(
        verdict(&outcome),
        Verdict::RetryAt(NOW.plus_millis(120_000))
    );
}

#[tokio::test]
async fn a_429_retry_after_date_counts_from_the_response_date() {
    // The endpoint's clock is far from ours (NOW is 2026); the wait is what it meant.
    let rx = Receiver::start(|_, _| {
        Reply::status(429)
            .header("date", "Sun, 06 Nov 1994 08:49:37 GMT")
            .header("retry-after", "Sun, 06 Nov 1994 08:51:07 GMT")
    })
    .await;
    let outcome = deliverer()
        .deliver(&target(&rx.url, DeliveryMode::Structured), &[event("e")], 1)
        .await;
    assert_eq!(outcome, status(429, Some(90_000)));
}

#[tokio::test]
async fn a_redirect_is_an_outcome_and_is_not_followed() {
    let rx = Receiver::start(|n, _| {
        if n == 0 {
            Reply::status(307).header("location", "/elsewhere")
        } else {
            Reply::status(200)
        }
    })
    .await;
    let outcome = deliverer()
        .deliver(&target(&rx.url, DeliveryMode::Structured), &[event("e")], 1)
        .await;
    assert_eq!(outcome, status(307, None));
    assert_eq!(rx.requests().len(), 1, "the Location was not visited");
}

#[tokio::test]
async fn a_large_response_body_does_not_change_the_outcome() {
    let rx = Receiver::start(|_, _| Reply {
        body: vec![b'x'; 1 << 20],
        ..Reply::status(200)
    })
    .await;
    let (d, t) = (deliverer(), target(&rx.url, DeliveryMode::Structured));
    assert_eq!(d.deliver(&t, &[event("e")], 1).await, status(200, None));
    // The connection is not left in a bad state for the next request.
    assert_eq!(d.deliver(&t, &[event("e")], 2).await, status(200, None));
}

#[tokio::test]
async fn a_slow_endpoint_times_out_at_the_target_timeout_on_the_injected_clock() {
    let rx = Receiver::start(|_, _| Reply::status(200).after(Duration::from_secs(3_600))).await;
    let clock = ManualClock::new(NOW);
    let d = Deliverer::new(loopback_settings(), Arc::new(clock.clone())).unwrap();
    let t = target(&rx.url, DeliveryMode::Structured);
    let attempt = tokio::spawn(async move { d.deliver_detailed(&t, &[event("e")], 1).await });
    // The request arrives; the answer does not.
    assert_eq!(rx.wait_for(1).await.len(), 1, "the request arrived");
    // The attempt waits on the injected clock until exactly the 5 s timeout: woken by the
    // clock when its sleep parks, no time passes for it.
    let timeout = NOW.plus_millis(5_000);
    within(
        "the attempt's timeout parking",
        clock.when_parked(move |c| c.sleeping_until(timeout)),
    )
    .await;
    assert_eq!(clock.sleepers(), 1, "the timeout is the attempt's one wait");
    clock.advance(Duration::from_millis(4_999));
    assert!(clock.sleeping_until(timeout), "still waiting at 4.999 s");
    assert!(!attempt.is_finished(), "not before the 5 s timeout");
    clock.advance(Duration::from_millis(1));
    let delivery = attempt.await.unwrap();
    assert_eq!(delivery.outcome, AttemptOutcome::Timeout);
    assert!(delivery.error.unwrap().contains("5000 ms"));
    assert!(matches!(verdict(&delivery.outcome), Verdict::RetryAt(_)));
}

#[tokio::test]
async fn a_port_nobody_listens_on_is_a_connection_error() {
    let url = refused_url();
    let delivery = deliverer()
        .deliver_detailed(&target(&url, DeliveryMode::Structured), &[event("e")], 1)
        .await;
    assert_eq!(delivery.outcome, AttemptOutcome::ConnectionError);
    assert!(delivery.error.is_some());
    assert!(matches!(verdict(&delivery.outcome), Verdict::RetryAt(_)));
}

#[tokio::test]
async fn no_events_send_nothing() {
    let rx = Receiver::always(500).await;
    let outcome = deliverer()
        .deliver(&target(&rx.url, DeliveryMode::Structured), &[], 1)
        .await;
    assert_eq!(outcome, status(204, None));
    assert!(rx.requests().is_empty());
}
