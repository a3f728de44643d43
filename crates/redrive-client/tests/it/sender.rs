//! Sending and publishing against the test server: one message with every field, an
//! atomic batch, scheduling and cancelling, duplicate detection, CloudEvents to a topic,
//! and bad input refused as a typed error before any request.

use std::time::Duration;

use redrive_client::{CloudEvent, ErrorKind, MAX_SEND_BATCH, Message, QueuePolicy};
use redrive_testkit::{T0, TestServer};
use serde_json::json;

use crate::support::client;

#[tokio::test]
async fn a_message_travels_with_its_fields_and_binary_body() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let c = client(&s);
    let out = c
        .sender("orders")
        .send(
            Message::new(vec![0u8, 159, 146, 150])
                .with_id("order-7")
                .with_content_type("application/octet-stream")
                .with_property("tenant", "acme")
                .with_property("attempt", 2)
                .with_property("urgent", true)
                .with_correlation_id("corr-1")
                .with_type("order.created")
                .with_intent("intent-7"),
        )
        .await
        .unwrap();
    assert_eq!(
        (out.message_id.as_str(), out.sequence_number, out.duplicate),
        ("order-7", 1, false)
    );
    let got = c
        .receiver("orders")
        .receive(10, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    let m = &got[0];
    assert_eq!(m.body(), &[0u8, 159, 146, 150]);
    assert_eq!(m.body_str(), None);
    assert_eq!(m.message_id(), "order-7");
    assert_eq!(m.content_type(), Some("application/octet-stream"));
    assert_eq!(m.property("tenant").as_deref(), Some("acme"));
    assert_eq!(m.property("attempt").as_deref(), Some("2"));
    assert_eq!(m.property("urgent").as_deref(), Some("true"));
    assert_eq!(m.correlation_id(), Some("corr-1"));
    assert_eq!(m.message_type(), Some("order.created"));
    assert_eq!(m.intent(), Some("intent-7"));
    assert_eq!(m.delivery_count(), 1);
    assert!(m.lock_token().is_some());
    assert_eq!(m.locked_until(), Some(T0.plus_millis(30_000)));
    assert_eq!(m.enqueued_time(), Some(T0));
    s.stop().await;
}

#[tokio::test]
async fn a_batch_is_stored_whole_or_not_at_all() {
    let s = TestServer::start().await;
    s.queue("orders", json!({"max_message_size": 1024})).await;
    let c = client(&s);
    let sender = c.sender("orders");
    let ok = sender
        .send_batch(vec![
            Message::new("a"),
            Message::new("b"),
            Message::new("c"),
        ])
        .await
        .unwrap();
    let seqs: Vec<i64> = ok.iter().map(|o| o.sequence_number).collect();
    assert_eq!(seqs, [1, 2, 3]);
    let err = sender
        .send_batch(vec![Message::new("d"), Message::new(vec![b'x'; 2_000])])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TooLarge);
    assert_eq!(err.code(), Some("message_too_large"));
    assert_eq!(
        s.counts("orders").await["active"],
        3,
        "nothing of the refused batch"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_scheduled_message_appears_at_its_time_unless_cancelled() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let c = client(&s);
    let sender = c.sender("orders");
    let at = T0.plus_millis(60_000);
    let keep = sender.schedule(Message::new("keep"), at).await.unwrap();
    let drop = sender.schedule(Message::new("drop"), at).await.unwrap();
    sender.cancel_scheduled(drop.sequence_number).await.unwrap();
    let receiver = c.receiver("orders");
    assert!(
        receiver
            .receive(10, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    s.advance(60_000);
    let got = receiver.receive(10, Duration::ZERO).await.unwrap();
    let bodies: Vec<&str> = got.iter().map(|m| m.body_str().unwrap()).collect();
    assert_eq!(bodies, ["keep"]);
    assert_eq!(got[0].sequence_number(), keep.sequence_number);
    // Cancelling again: the message is gone.
    let err = sender
        .cancel_scheduled(drop.sequence_number)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    s.stop().await;
}

#[tokio::test]
async fn a_repeated_id_inside_the_window_is_a_duplicate() {
    let s = TestServer::start().await;
    let c = client(&s);
    c.admin()
        .create_queue(
            "orders",
            serde_json::from_value::<QueuePolicy>(
                json!({"duplicate_detection_window_ms": 600_000}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let sender = c.sender("orders");
    let first = sender.send(Message::new("a").with_id("o-1")).await.unwrap();
    let again = sender.send(Message::new("a").with_id("o-1")).await.unwrap();
    assert!(!first.duplicate);
    assert!(again.duplicate);
    assert_eq!(again.sequence_number, first.sequence_number);
    assert_eq!(s.counts("orders").await["active"], 1);
    s.stop().await;
}

fn event(id: &str, n: u64) -> CloudEvent {
    CloudEvent::from_json(json!({
        "specversion": "1.0", "id": id, "source": "/tests", "type": "number",
        "data": {"n": n}
    }))
    .unwrap()
}

#[tokio::test]
async fn events_are_published_one_or_as_a_batch_and_reach_a_pull_subscription() {
    let s = TestServer::start().await;
    let c = client(&s);
    let admin = c.admin();
    admin
        .create_topic("numbers", Default::default())
        .await
        .unwrap();
    let sub = admin
        .create_pull_subscription("numbers", "billing", Some(5))
        .await
        .unwrap();
    assert_eq!(sub.queue, "numbers.billing");
    let publisher = c.publisher("numbers");
    let one = publisher.publish(&event("e-1", 1)).await.unwrap();
    assert_eq!((one.id.as_str(), one.duplicate), ("e-1", false));
    let batch = publisher
        .publish_batch(&[event("e-2", 2), event("e-3", 3), event("e-1", 1)])
        .await
        .unwrap();
    let dup: Vec<bool> = batch.iter().map(|r| r.duplicate).collect();
    assert_eq!(
        dup,
        [false, false, true],
        "the topic's window drops e-1 again"
    );
    let got = c
        .subscription_receiver("numbers", "billing")
        .receive(10, Duration::ZERO)
        .await
        .unwrap();
    let ids: Vec<&str> = got.iter().map(|m| m.message_id()).collect();
    assert_eq!(ids, ["e-1", "e-2", "e-3"]);
    let body: serde_json::Value = serde_json::from_slice(got[1].body()).unwrap();
    assert_eq!(body["data"]["n"], 2);
    let err = publisher.publish_batch(&[]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    let err = c
        .publisher("absent")
        .publish(&event("e", 1))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(err.code(), Some("topic_not_found"));
    s.stop().await;
}

#[tokio::test]
async fn bad_input_is_a_typed_error_and_sends_nothing() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let c = client(&s);
    let cases = [
        c.sender("").send(Message::new("x")).await.unwrap_err(),
        c.sender("bad name")
            .send(Message::new("x"))
            .await
            .unwrap_err(),
        c.sender("orders").send_batch(Vec::new()).await.unwrap_err(),
        c.sender("orders")
            .send_batch(vec![Message::new("x"); MAX_SEND_BATCH + 1])
            .await
            .unwrap_err(),
        c.sender("orders")
            .send(Message::new("x").with_id("x".repeat(129)))
            .await
            .unwrap_err(),
    ];
    for err in cases {
        assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
        assert_eq!(err.attempts(), 0, "refused before sending: {err}");
        assert!(err.problem().is_none());
    }
    assert_eq!(s.counts("orders").await["active"], 0);
    // The server's own refusals carry its problem.
    let err = c
        .sender("orders")
        .send(Message::new("x").with_property("p".repeat(300), "v"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert_eq!(err.code(), Some("invalid_request"));
    assert_eq!(err.attempts(), 1);
    let err = c
        .sender("missing")
        .send(Message::new("x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(err.code(), Some("queue_not_found"));
    s.stop().await;
}
