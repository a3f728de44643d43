//! The consumer's dead-letter policy (seed 003) against the test server: the handler sees a
//! message exactly `max_redelivery` times and the next delivery is diverted with its
//! origin; the default destinations; a destination that cannot be written leaves the
//! delivery unacknowledged, reports the failure and spends the restart budget, and one
//! that comes back takes the message; undecodable messages are marked; a policy without a
//! redelivery interval is refused.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redrive_client::Clock;
use redrive_client::processor::{
    ORIGIN_MESSAGE_ID, REAL_TOPIC, REDRIVE_DELIVERY_COUNT, REDRIVE_INVALID, REDRIVE_INVALID_REASON,
    REDRIVE_LAST_ERROR, REDRIVE_ORIGIN_QUEUE, REDRIVE_ORIGIN_SEQUENCE,
};
use redrive_client::{
    Client, CloudEvent, DeadLetterPolicy, Entity, ErrorKind, ErrorSource, HandlerError,
    InvalidMessage, Message, ProcessorBuildError, ProcessorError, ProcessorErrorEvent,
    ProcessorHandle, ProcessorOptions, ProcessorStats, ReceivedMessage, RestartBudget,
};
use redrive_testkit::{TestServer, within};
use serde_json::json;
use tokio::sync::mpsc;

use crate::support::client;

const INTERVAL: Duration = Duration::from_millis(500);

async fn stats_until(h: &ProcessorHandle, f: impl Fn(&ProcessorStats) -> bool) -> ProcessorStats {
    let mut w = h.watch_stats();
    within("the processor's counts", async {
        *w.wait_for(|s| f(s)).await.unwrap()
    })
    .await
}

/// Waits until the processor has taken `received` deliveries and is done with each.
async fn round(h: &ProcessorHandle, received: u64) -> ProcessorStats {
    stats_until(h, |s| s.received == received && s.processed == received).await
}

async fn stop(h: ProcessorHandle, s: &TestServer) {
    let timeout = Duration::from_millis(10_007);
    let deadline = s.clock().now().plus(timeout);
    let task = tokio::spawn(h.shutdown(timeout));
    s.until_parked_at(deadline).await;
    s.advance(20_000);
    within("the shutdown", task).await.unwrap().unwrap();
}

async fn drain(c: &Client, queue: &str) -> Vec<ReceivedMessage> {
    let r = c.receiver(queue);
    let got = r.receive(100, Duration::ZERO).await.unwrap();
    for m in &got {
        r.complete(m).await.unwrap();
    }
    got
}

fn options(max_redelivery: u32) -> ProcessorOptions {
    ProcessorOptions::new()
        .max_concurrent_calls(6)
        .receive_wait(Duration::from_secs(20))
        .redelivery_interval(INTERVAL)
        .dead_letter_policy(DeadLetterPolicy::new(max_redelivery))
}

#[tokio::test]
async fn the_handler_sees_a_message_exactly_max_redelivery_times_then_it_is_diverted() {
    let s = TestServer::start().await;
    s.queue("numbers", json!({"max_delivery_count": 10})).await;
    s.queue("numbers-DLQ", json!({})).await;
    let c = client(&s);
    let seen: Arc<Mutex<BTreeMap<u32, Vec<u32>>>> = Arc::default();
    let h = c
        .processor("numbers", options(3).consumer("billing"), {
            let seen = seen.clone();
            move |d| {
                let seen = seen.clone();
                async move {
                    let n: u32 = d.message().body_str().unwrap().parse().unwrap();
                    seen.lock()
                        .unwrap()
                        .entry(n)
                        .or_default()
                        .push(d.message().delivery_count());
                    if n.is_multiple_of(2) {
                        Ok(())
                    } else {
                        Err(HandlerError::transient(format!("odd: {n}")))
                    }
                }
            }
        })
        .unwrap();
    assert_eq!(h.dead_letter_queue(), Some("numbers-DLQ"));
    let h = h.start();
    let batch = (1..=6)
        .map(|n| Message::new(n.to_string()).with_id(format!("n-{n}")))
        .collect();
    c.sender("numbers").send_batch(batch).await.unwrap();

    // Round 1 takes all six; rounds 2 and 3 the three odd ones again; round 4 diverts them.
    for received in [6, 9, 12] {
        round(&h, received).await;
        s.advance(INTERVAL.as_millis() as u64);
    }
    let st = round(&h, 15).await;
    assert_eq!((st.completed, st.diverted), (3, 3));
    assert_eq!((st.nacked, st.redelivery_requested), (9, 9));
    let seen = seen.lock().unwrap().clone();
    for n in [1, 3, 5] {
        assert_eq!(
            seen[&n],
            [1, 2, 3],
            "odd {n}: exactly three deliveries handled"
        );
    }
    for n in [2, 4, 6] {
        assert_eq!(seen[&n], [1], "even {n}");
    }

    let mut parked = drain(&c, "numbers-DLQ").await;
    parked.sort_by_key(|m| m.body_str().unwrap().to_owned());
    let bodies: Vec<&str> = parked.iter().map(|m| m.body_str().unwrap()).collect();
    assert_eq!(bodies, ["1", "3", "5"]);
    for m in &parked {
        let n = m.body_str().unwrap();
        assert_eq!(m.property(REAL_TOPIC).as_deref(), Some("numbers"));
        assert_eq!(m.property(ORIGIN_MESSAGE_ID), Some(format!("n-{n}")));
        assert_eq!(m.property(REDRIVE_ORIGIN_QUEUE).as_deref(), Some("numbers"));
        assert_eq!(m.property(REDRIVE_DELIVERY_COUNT).as_deref(), Some("4"));
        assert_eq!(m.property(REDRIVE_LAST_ERROR), Some(format!("odd: {n}")));
        assert!(m.property(REDRIVE_ORIGIN_SEQUENCE).is_some());
        assert_ne!(m.message_id(), format!("n-{n}"), "a new message");
    }
    let counts = s.counts("numbers").await;
    assert_eq!(counts["active"], 0);
    assert_eq!(
        counts["dead_lettered"], 0,
        "the broker never dead-lettered them"
    );

    stop(h, &s).await;
    s.stop().await;
}

#[tokio::test]
async fn a_subscription_diverts_to_topic_subscription_dlq_by_default() {
    let s = TestServer::start().await;
    let c = client(&s);
    c.admin()
        .create_topic("orders", Default::default())
        .await
        .unwrap();
    c.admin()
        .create_pull_subscription("orders", "billing", Some(10))
        .await
        .unwrap();
    s.queue("orders-billing-DLQ", json!({})).await;
    let h = c
        .subscription_processor("orders", "billing", options(1), |_d| async {
            Err(HandlerError::transient("ledger down"))
        })
        .unwrap();
    assert_eq!(h.dead_letter_queue(), Some("orders-billing-DLQ"));
    let h = h.start();
    let event = CloudEvent::from_json(json!({
        "specversion": "1.0", "id": "evt-1", "source": "/shop", "type": "order.created",
        "data": {"order": 1}
    }))
    .unwrap();
    c.publisher("orders").publish(&event).await.unwrap();
    round(&h, 1).await;
    s.advance(INTERVAL.as_millis() as u64);
    let st = round(&h, 2).await;
    assert_eq!(st.diverted, 1);
    let parked = drain(&c, "orders-billing-DLQ").await;
    assert_eq!(parked.len(), 1);
    let m = &parked[0];
    assert_eq!(m.property(REAL_TOPIC).as_deref(), Some("orders"));
    assert_eq!(m.property(ORIGIN_MESSAGE_ID).as_deref(), Some("evt-1"));
    assert_eq!(
        m.property(REDRIVE_ORIGIN_QUEUE).as_deref(),
        Some("orders.billing")
    );
    assert_eq!(m.message_type(), Some("order.created"));
    let body: serde_json::Value = serde_json::from_slice(m.body()).unwrap();
    assert_eq!(body["id"], "evt-1", "the event as received");
    stop(h, &s).await;
    s.stop().await;
}

/// What the error callback saw: source, message id, kind.
type Seen = (ErrorSource, Option<String>, Option<ErrorKind>);

fn recording() -> (
    impl Fn(&ProcessorErrorEvent) + Send + Sync + 'static,
    mpsc::UnboundedReceiver<Seen>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let f = move |e: &ProcessorErrorEvent| {
        let _ = tx.send((e.source, e.message_id.clone(), e.error.kind()));
    };
    (f, rx)
}

/// Waits for the next error of `source`, skipping the others (the handler's rejections).
async fn next_of(
    rx: &mut mpsc::UnboundedReceiver<Seen>,
    source: ErrorSource,
) -> (Option<String>, Option<ErrorKind>) {
    within("the error callback", async {
        loop {
            let (s, id, kind) = rx.recv().await.unwrap();
            if s == source {
                return (id, kind);
            }
        }
    })
    .await
}

/// A restarted worker's pause: odd, so that no sleeper of the server shares its deadline.
const RESTART_DELAY: Duration = Duration::from_millis(1_337);

#[tokio::test]
async fn an_unwritable_destination_leaves_the_delivery_unacknowledged_until_it_comes_back() {
    let s = TestServer::start().await;
    s.queue("numbers", json!({"max_delivery_count": 10})).await;
    let c = client(&s);
    let (on_error, mut errors) = recording();
    let h = c
        .processor(
            "numbers",
            options(1)
                .max_concurrent_calls(1)
                .restart_budget(RestartBudget::new(
                    3,
                    Duration::from_secs(60),
                    RESTART_DELAY,
                ))
                .on_error(on_error),
            |_d| async { Err(HandlerError::transient("always")) },
        )
        .unwrap()
        .start();
    c.sender("numbers")
        .send(Message::new("7").with_id("seven"))
        .await
        .unwrap();
    round(&h, 1).await;
    s.advance(INTERVAL.as_millis() as u64);
    // Delivery 2 is diverted into a queue that does not exist: not acknowledged.
    let (id, kind) = next_of(&mut errors, ErrorSource::Divert).await;
    assert_eq!(
        (id.as_deref(), kind),
        (Some("seven"), Some(ErrorKind::NotFound))
    );
    let st = round(&h, 2).await;
    assert_eq!((st.divert_failed, st.diverted, st.restarts), (1, 0, 1));
    let counts = s.counts("numbers").await;
    assert_eq!(
        (counts["active"].as_u64(), counts["locked"].as_u64()),
        (Some(1), Some(0)),
        "still owed, released at once"
    );
    // The destination appears; after its pause the restarted worker takes the message
    // again and the divert goes through.
    s.queue("numbers-DLQ", json!({})).await;
    let resume = s.clock().now().plus(RESTART_DELAY);
    s.until_parked_at(resume).await;
    s.advance(RESTART_DELAY.as_millis() as u64);
    let st = round(&h, 3).await;
    assert_eq!(st.diverted, 1);
    let parked = drain(&c, "numbers-DLQ").await;
    assert_eq!(parked.len(), 1);
    assert_eq!(
        parked[0].property(ORIGIN_MESSAGE_ID).as_deref(),
        Some("seven")
    );
    assert_eq!(
        parked[0].property(REDRIVE_DELIVERY_COUNT).as_deref(),
        Some("3")
    );
    assert_eq!(s.counts("numbers").await["active"], 0);
    assert!(!h.is_finished());
    stop(h, &s).await;
    s.stop().await;
}

#[tokio::test]
async fn a_destination_that_stays_unwritable_spends_the_budget_and_ends_the_processor() {
    let s = TestServer::start().await;
    s.queue("numbers", json!({"max_delivery_count": 10})).await;
    // The destination exists but refuses the copy: larger than it allows.
    s.queue("numbers-DLQ", json!({"max_message_size": 1024}))
        .await;
    let c = client(&s);
    let (on_error, mut errors) = recording();
    let h = c
        .processor(
            "numbers",
            options(1)
                .max_concurrent_calls(1)
                .restart_budget(RestartBudget::new(
                    2,
                    Duration::from_secs(60),
                    RESTART_DELAY,
                ))
                .on_error(on_error),
            |_d| async { Err(HandlerError::transient("always")) },
        )
        .unwrap()
        .start();
    c.sender("numbers")
        .send(Message::new(vec![b'x'; 2_000]).with_id("big"))
        .await
        .unwrap();
    round(&h, 1).await;
    s.advance(INTERVAL.as_millis() as u64);
    for failed in 1..=2u64 {
        let (_, kind) = next_of(&mut errors, ErrorSource::Divert).await;
        assert_eq!(kind, Some(ErrorKind::TooLarge));
        stats_until(&h, |st| {
            st.divert_failed == failed && st.processed == failed + 1
        })
        .await;
        let resume = s.clock().now().plus(RESTART_DELAY);
        s.until_parked_at(resume).await;
        s.advance(RESTART_DELAY.as_millis() as u64);
    }
    // The third failure in the period is one more than the budget: the processor ends,
    // and the application hears it.
    let (_, kind) = next_of(&mut errors, ErrorSource::Divert).await;
    assert_eq!(kind, Some(ErrorKind::TooLarge));
    next_of(&mut errors, ErrorSource::Processor).await;
    let err = within("the processor to end", h.join()).await.unwrap_err();
    let ProcessorError::RestartBudgetExhausted {
        entity,
        restarts,
        max_restarts,
        ..
    } = err
    else {
        panic!("{err:?}")
    };
    assert_eq!((entity.as_str(), restarts, max_restarts), ("numbers", 3, 2));
    // Nothing was dropped or quietly acknowledged.
    let counts = s.counts("numbers").await;
    assert_eq!(
        (counts["active"].as_u64(), counts["locked"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(s.counts("numbers-DLQ").await["active"], 0);
    s.stop().await;
}

#[tokio::test]
async fn an_undecodable_message_is_diverted_as_received_and_marked() {
    let s = TestServer::start().await;
    s.queue("numbers", json!({"max_delivery_count": 10})).await;
    s.queue("numbers-DLQ", json!({})).await;
    let c = client(&s);
    let h = c
        .processor_builder(Entity::queue("numbers"))
        .options(options(2))
        .decode(|m| {
            m.body_str()
                .and_then(|b| b.parse::<u32>().ok())
                .ok_or_else(|| InvalidMessage::new("not a number"))
        })
        .handle_invalid(|d| async move {
            Err(HandlerError::transient(format!(
                "cannot read {}",
                d.message().message_id()
            )))
        })
        .build(|_d| async { Ok(()) })
        .unwrap()
        .start();
    c.sender("numbers")
        .send(Message::new(vec![0xff, 0xfe]).with_id("garbage"))
        .await
        .unwrap();
    for received in [1, 2] {
        round(&h, received).await;
        s.advance(INTERVAL.as_millis() as u64);
    }
    let st = round(&h, 3).await;
    assert_eq!((st.invalid, st.diverted), (2, 1));
    let parked = drain(&c, "numbers-DLQ").await;
    let m = &parked[0];
    assert_eq!(m.body(), &[0xff, 0xfe], "the bytes as received");
    assert_eq!(m.property(REDRIVE_INVALID).as_deref(), Some("true"));
    assert_eq!(
        m.property(REDRIVE_INVALID_REASON).as_deref(),
        Some("not a number")
    );
    assert_eq!(
        m.property(REDRIVE_LAST_ERROR).as_deref(),
        Some("cannot read garbage")
    );
    stop(h, &s).await;
    s.stop().await;
}

#[tokio::test]
async fn a_policy_without_a_redelivery_interval_is_refused_at_build() {
    let s = TestServer::start().await;
    let c = client(&s);
    let err = c
        .processor(
            "numbers",
            ProcessorOptions::new().dead_letter_policy(DeadLetterPolicy::new(3)),
            |_d| async { Ok(()) },
        )
        .unwrap_err();
    assert_eq!(err, ProcessorBuildError::RedeliveryIntervalRequired);
    assert!(err.to_string().contains("redelivery interval"), "{err}");
    let err = c
        .processor("numbers", options(0), |_d| async { Ok(()) })
        .unwrap_err();
    assert!(matches!(err, ProcessorBuildError::InvalidPolicy(_)));
    s.stop().await;
}

#[tokio::test]
async fn a_queue_that_dead_letters_first_is_reported_at_start() {
    let s = TestServer::start().await;
    s.queue("numbers", json!({"max_delivery_count": 3})).await;
    let c = client(&s);
    let (on_error, mut errors) = recording();
    let h = c
        .processor("numbers", options(3).on_error(on_error), |_d| async {
            Ok(())
        })
        .unwrap()
        .start();
    next_of(&mut errors, ErrorSource::Configuration).await;
    stop(h, &s).await;
    s.stop().await;
}
