//! The processor's telemetry: one `tracing` event per delivery and stage, with the entity,
//! subscription, consumer and message id (and, for a divert, the dead-letter queue and the
//! redelivery count). A test binary of its own, so that its subscriber is the process's
//! only one and sees every event.

// Test code: a failed setup step should panic the test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use redrive_client::{
    Client, Clock, DeadLetterPolicy, HandlerError, Jitter, ProcessorOptions, RetryOptions,
};
use redrive_testkit::{TestServer, within};
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;

mod events;
use events::Events;

#[tokio::test]
async fn every_stage_of_giving_up_on_a_message_is_an_event_per_delivery() {
    let events = Events::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(events.clone()))
        .unwrap();
    let s = TestServer::start().await;
    s.topic("orders", json!({})).await;
    s.pull_sub("orders", "billing", json!({})).await;
    s.queue("orders-billing-DLQ", json!({})).await;
    let c = Client::builder(&s.url)
        .clock(Arc::new(s.clock().clone()))
        .retry(RetryOptions::new().jitter(Jitter::None))
        .build()
        .unwrap();
    let interval = Duration::from_millis(500);
    let h = c
        .subscription_processor(
            "orders",
            "billing",
            ProcessorOptions::new()
                .consumer("billing-worker")
                .receive_wait(Duration::from_secs(20))
                .redelivery_interval(interval)
                .dead_letter_policy(DeadLetterPolicy::new(2)),
            |d| async move {
                let body: serde_json::Value = serde_json::from_slice(d.message().body())?;
                if body["data"] == 2 {
                    Ok(())
                } else {
                    Err(HandlerError::transient("odd"))
                }
            },
        )
        .unwrap()
        .start();
    let events_json: Vec<serde_json::Value> = [1, 2]
        .iter()
        .map(|n| {
            json!({"specversion": "1.0", "id": format!("e-{n}"), "source": "/t",
                        "type": "number", "data": n})
        })
        .collect();
    let (st, v) = s.publish("orders", &events_json).await;
    assert_eq!(st, 201, "{v}");
    let mut w = h.watch_stats();
    // e-1 is handled twice (rejected), then diverted; e-2 completed at once.
    for received in [2u64, 3] {
        within(
            "a round",
            w.wait_for(|st| st.received == received && st.processed == received),
        )
        .await
        .unwrap();
        s.advance(500);
    }
    within(
        "the divert",
        w.wait_for(|st| st.received == 4 && st.processed == 4),
    )
    .await
    .unwrap();
    let stats = h.stats();
    assert_eq!((stats.diverted, stats.completed, stats.nacked), (1, 1, 2));

    let received = events.named("received");
    assert_eq!(received.len(), 4);
    for e in &events.matching(|_| true) {
        if e["event"] == "worker_restarted" {
            continue;
        }
        assert_eq!(e["count"], "1", "{e:?}");
        assert_eq!(e["entity"], "orders.billing", "{e:?}");
        assert_eq!(e["subscription"], "billing", "{e:?}");
        assert_eq!(e["consumer"], "billing-worker", "{e:?}");
        assert!(e["message_id"].starts_with("e-"), "{e:?}");
    }
    assert_eq!(events.named("nacked").len(), 2);
    assert_eq!(events.named("redelivery_requested").len(), 2);
    assert_eq!(events.named("completed").len(), 1);
    let diverted = events.named("diverted");
    assert_eq!(diverted.len(), 1);
    assert_eq!(diverted[0]["dead_letter_queue"], "orders-billing-DLQ");
    assert_eq!(diverted[0]["redelivery_count"], "2");
    assert_eq!(diverted[0]["message_id"], "e-1");

    let timeout = Duration::from_millis(10_007);
    let deadline = s.clock().now().plus(timeout);
    let task = tokio::spawn(h.shutdown(timeout));
    s.until_parked_at(deadline).await;
    s.advance(20_000);
    within("the shutdown", task).await.unwrap().unwrap();
    s.stop().await;
}
