//! Peek-lock receiving and settling against the test server: complete, abandon with a
//! delay, defer and receive by sequence number, dead-letter with a reason, lock renewal
//! and a lost lock, long polls that end on the clock.

use std::time::Duration;

use redrive_client::{DeadLetterOptions, ErrorKind, MAX_RECEIVE_BATCH, Message};
use redrive_testkit::{T0, TestServer, within};
use serde_json::json;

use crate::support::client;

#[tokio::test]
async fn a_completed_message_is_gone_and_a_second_settlement_is_lock_lost() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let c = client(&s);
    c.sender("orders").send(Message::new("a")).await.unwrap();
    let r = c.receiver("orders");
    let m = r.receive(1, Duration::ZERO).await.unwrap().remove(0);
    r.complete(&m).await.unwrap();
    let err = r.complete(&m).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LockLost);
    assert_eq!(err.code(), Some("lock_lost"));
    assert_eq!(
        err.attempts(),
        1,
        "a settlement is not repeated on a refusal"
    );
    let counts = s.counts("orders").await;
    assert_eq!(
        (counts["active"].as_u64(), counts["locked"].as_u64()),
        (Some(0), Some(0))
    );
    s.stop().await;
}

#[tokio::test]
async fn an_abandoned_message_comes_back_after_its_delay_with_its_count() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let c = client(&s);
    c.sender("orders").send(Message::new("a")).await.unwrap();
    let r = c.receiver("orders");
    let m = r.receive(1, Duration::ZERO).await.unwrap().remove(0);
    r.abandon_after(&m, Duration::from_secs(10)).await.unwrap();
    assert!(r.receive(1, Duration::ZERO).await.unwrap().is_empty());
    // A long poll waits on the server's clock, and ends when the message is due.
    let poll = tokio::spawn({
        let r = r.clone();
        async move { r.receive(1, Duration::from_secs(20)).await }
    });
    s.until_parked_at(T0.plus_millis(10_000)).await;
    s.advance(10_000);
    let again = within("the long poll", poll).await.unwrap().unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].delivery_count(), 2);
    r.abandon(&again[0]).await.unwrap();
    assert_eq!(
        r.receive(1, Duration::ZERO).await.unwrap()[0].delivery_count(),
        3
    );
    s.stop().await;
}

#[tokio::test]
async fn a_deferred_message_is_received_only_by_its_sequence_number() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let c = client(&s);
    let sent = c
        .sender("orders")
        .send(Message::new("later"))
        .await
        .unwrap();
    let r = c.receiver("orders");
    let m = r.receive(1, Duration::ZERO).await.unwrap().remove(0);
    r.defer(&m).await.unwrap();
    assert!(r.receive(1, Duration::ZERO).await.unwrap().is_empty());
    assert_eq!(s.counts("orders").await["deferred"], 1);
    let got = r.receive_deferred(&[sent.sequence_number]).await.unwrap();
    assert_eq!(got[0].body_str(), Some("later"));
    r.complete(&got[0]).await.unwrap();
    assert_eq!(s.counts("orders").await["deferred"], 0);
    let err = r.receive_deferred(&[]).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    s.stop().await;
}

#[tokio::test]
async fn a_dead_lettered_message_keeps_its_reason_and_description() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let c = client(&s);
    c.sender("orders").send(Message::new("bad")).await.unwrap();
    let r = c.receiver("orders");
    let m = r.receive(1, Duration::ZERO).await.unwrap().remove(0);
    let id = r
        .dead_letter(
            &m,
            DeadLetterOptions::new("ValidationFailed")
                .description("no amount")
                .consumer("billing")
                .rule_version("v2"),
        )
        .await
        .unwrap()
        .expect("a record id");
    let (st, record) = s.get(&format!("/v1/queues/orders/dead-letters/{id}")).await;
    assert_eq!(st, 200, "{record}");
    assert_eq!(record["reason"], "ValidationFailed");
    assert_eq!(record["description"], "no amount");
    assert_eq!(record["routed_by"], "application");
    // A reserved reason is refused, and the message stays this receiver's.
    c.sender("orders")
        .send(Message::new("again"))
        .await
        .unwrap();
    let m = r.receive(1, Duration::ZERO).await.unwrap().remove(0);
    let err = r
        .dead_letter(&m, DeadLetterOptions::new("MaxDeliveryCountExceeded"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    r.complete(&m).await.unwrap();
    let err = r
        .dead_letter(&m, DeadLetterOptions::new(""))
        .await
        .unwrap_err();
    assert_eq!((err.kind(), err.attempts()), (ErrorKind::Invalid, 0));
    s.stop().await;
}

#[tokio::test]
async fn a_renewed_lock_outlives_the_first_and_an_expired_one_is_lost() {
    let s = TestServer::start().await;
    s.queue("orders", json!({"lock_duration_ms": 30_000})).await;
    let c = client(&s);
    c.sender("orders").send(Message::new("a")).await.unwrap();
    c.sender("orders").send(Message::new("b")).await.unwrap();
    let r = c.receiver("orders");
    let mut got = r.receive(2, Duration::ZERO).await.unwrap();
    let (mut a, b) = (got.remove(0), got.remove(0));
    s.advance(20_000);
    let until = r.renew_lock(&mut a).await.unwrap();
    assert_eq!(until, T0.plus_millis(50_000));
    assert_eq!(a.locked_until(), Some(until));
    s.advance(20_000);
    r.complete(&a).await.unwrap();
    let err = r.complete(&b).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LockLost);
    let mut b = b;
    let err = r.renew_lock(&mut b).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LockLost);
    s.stop().await;
}

#[tokio::test]
async fn receive_bounds_are_checked_before_any_request() {
    let s = TestServer::start().await;
    let c = client(&s);
    let r = c.receiver("orders");
    for err in [
        r.receive(0, Duration::ZERO).await.unwrap_err(),
        r.receive(MAX_RECEIVE_BATCH + 1, Duration::ZERO)
            .await
            .unwrap_err(),
        r.receive(1, Duration::from_secs(21)).await.unwrap_err(),
        c.receiver("").receive(1, Duration::ZERO).await.unwrap_err(),
    ] {
        assert_eq!(
            (err.kind(), err.attempts()),
            (ErrorKind::Invalid, 0),
            "{err}"
        );
    }
    let err = r.receive(1, Duration::ZERO).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    s.stop().await;
}
