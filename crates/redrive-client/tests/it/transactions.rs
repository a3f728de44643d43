//! Transactions against the test server: a group applied whole, a lost lock refusing the
//! whole group with its operation named and nothing applied, bad input typed before
//! anything is sent, and a processor handler completing its message and sending a
//! scheduled retry copy in one step.

use std::time::Duration;

use redrive_client::Clock;
use redrive_client::{
    ErrorKind, HandlerError, Message, OperationKind, ProcessorOptions, ProcessorStats,
};
use redrive_testkit::{TestServer, within};
use serde_json::json;

use crate::support::client;

#[tokio::test]
async fn a_group_across_queues_is_applied_whole() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    s.queue("payments", json!({})).await;
    let c = client(&s);
    c.sender("orders")
        .send(Message::new("order 7"))
        .await
        .unwrap();
    let scheduled = c
        .sender("payments")
        .schedule(
            Message::new("old"),
            s.clock().now().plus(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    let orders = c.receiver("orders");
    let m = orders.receive(1, Duration::ZERO).await.unwrap().remove(0);

    let done = c
        .transaction()
        .send("payments", Message::new("charge order 7").with_id("pay-7"))
        .complete("orders", &m)
        .cancel_scheduled("payments", scheduled.sequence_number)
        .commit()
        .await
        .unwrap();

    assert!(
        done.transaction_id.starts_with("tx_"),
        "{}",
        done.transaction_id
    );
    let kinds: Vec<OperationKind> = done.results.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [
            OperationKind::Send,
            OperationKind::Complete,
            OperationKind::CancelScheduled
        ]
    );
    assert_eq!(done.results[0].message_id.as_deref(), Some("pay-7"));
    let orders_counts = s.counts("orders").await;
    assert_eq!(orders_counts["active"].as_u64(), Some(0));
    assert_eq!(orders_counts["locked"].as_u64(), Some(0));
    let pay = c
        .receiver("payments")
        .receive(10, Duration::ZERO)
        .await
        .unwrap();
    let bodies: Vec<&str> = pay.iter().filter_map(|m| m.body_str()).collect();
    assert_eq!(
        bodies,
        ["charge order 7"],
        "the scheduled one was cancelled"
    );
    assert_eq!(s.counts("payments").await["scheduled"].as_u64(), Some(0));
    s.stop().await;
}

#[tokio::test]
async fn a_lost_lock_refuses_the_whole_group_naming_the_operation() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    s.queue("payments", json!({})).await;
    let c = client(&s);
    c.sender("orders")
        .send_batch(vec![Message::new("a"), Message::new("b")])
        .await
        .unwrap();
    let orders = c.receiver("orders");
    let got = orders.receive(2, Duration::ZERO).await.unwrap();
    let (a, b) = (&got[0], &got[1]);
    // `b` is settled already: its lock is no longer this receiver's.
    orders.complete(b).await.unwrap();

    let err = c
        .transaction()
        .send("payments", Message::new("follow-up"))
        .complete("orders", a)
        .complete("orders", b)
        .commit()
        .await
        .unwrap_err();

    assert_eq!(err.kind(), ErrorKind::LockLost);
    assert_eq!(err.code(), Some("lock_lost"));
    assert_eq!(err.operation(), Some((2, OperationKind::Complete)));
    assert_eq!(err.attempts(), 1, "a refused group is not repeated");
    assert_eq!(err.problem().unwrap().extra["operation"], json!(2));
    // Nothing applied: no follow-up, and `a` is still locked and completable.
    assert_eq!(s.counts("payments").await["active"].as_u64(), Some(0));
    assert_eq!(s.counts("orders").await["locked"].as_u64(), Some(1));
    orders.complete(a).await.unwrap();
    s.stop().await;
}

#[tokio::test]
async fn bad_input_is_typed_and_sends_nothing() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let c = client(&s);
    c.sender("orders").send(Message::new("a")).await.unwrap();
    let peeked = c.receiver("orders").peek(0, 1).await.unwrap().remove(0);

    let no_lock = c
        .transaction()
        .send("orders", Message::new("x"))
        .complete("orders", &peeked)
        .commit()
        .await
        .unwrap_err();
    assert_eq!(no_lock.kind(), ErrorKind::Invalid);
    assert_eq!(no_lock.operation(), Some((1, OperationKind::Complete)));
    assert_eq!(no_lock.attempts(), 0);

    let bad_name = c
        .transaction()
        .send("", Message::new("x"))
        .commit()
        .await
        .unwrap_err();
    assert_eq!(
        (bad_name.kind(), bad_name.attempts()),
        (ErrorKind::Invalid, 0)
    );

    // The server's own refusal: a queue that does not exist, named by its index.
    let missing = c
        .transaction()
        .send("orders", Message::new("x"))
        .send("nowhere", Message::new("y"))
        .commit()
        .await
        .unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);
    assert_eq!(missing.operation(), Some((1, OperationKind::Send)));
    assert_eq!(s.counts("orders").await["active"].as_u64(), Some(1));
    s.stop().await;
}

#[tokio::test]
async fn a_handler_completes_its_message_and_sends_a_scheduled_retry_in_one_step() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let c = client(&s);
    c.sender("orders")
        .send(Message::new("order 7").with_property("attempt", 1))
        .await
        .unwrap();
    let tx_client = c.clone();
    let h = c
        .processor("orders", ProcessorOptions::new(), move |d| {
            let c = tx_client.clone();
            async move {
                let attempt: i64 = d
                    .message()
                    .property("attempt")
                    .and_then(|a| a.parse().ok())
                    .unwrap_or(1);
                if attempt > 1 {
                    return Ok(());
                }
                let at = c.clock().now().plus(Duration::from_secs(20));
                let retry = Message::new(d.message().body().to_vec())
                    .with_property("attempt", attempt + 1)
                    .with_scheduled_enqueue_time(at);
                c.transaction()
                    .send("orders", retry)
                    .complete_delivery(&d)
                    .commit()
                    .await
                    .map_err(HandlerError::transient)?;
                Ok(())
            }
        })
        .unwrap()
        .start();
    let mut w = h.watch_stats();
    let seen: ProcessorStats = within("the first handling", async {
        *w.wait_for(|s| s.processed == 1).await.unwrap()
    })
    .await;
    assert_eq!(
        (seen.completed, seen.nacked),
        (0, 0),
        "settled by the transaction"
    );
    let counts = s.counts("orders").await;
    assert_eq!(
        (
            counts["active"].as_u64(),
            counts["locked"].as_u64(),
            counts["scheduled"].as_u64()
        ),
        (Some(0), Some(0), Some(1))
    );
    // The shutdown waits for the receive in flight, which ends on the server's clock.
    let timeout = Duration::from_millis(10_007);
    let deadline = s.clock().now().plus(timeout);
    let task = tokio::spawn(h.shutdown(timeout));
    s.until_parked_at(deadline).await;
    s.advance(20_000);
    within("the shutdown", task).await.unwrap().unwrap();
    s.stop().await;
}
