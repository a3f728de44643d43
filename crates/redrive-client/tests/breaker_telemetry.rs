//! The circuit breaker's telemetry: `breaker_opened`, `breaker_half_open` and
//! `breaker_closed` are `tracing` events with the topic, subscription, consumer and entity,
//! in the order the breaker changed, on the manual clock. A test binary of its own, so that
//! its subscriber is the process's only one and sees every event.

// Test code: a failed setup step should panic the test.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redrive_client::{
    BreakerState, CircuitBreaker, Client, HandlerError, Jitter, ProcessorOptions, RetryOptions,
};
use redrive_testkit::{T0, TestServer, within};
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt;

mod events;
use events::Events;

const OPEN_FOR: Duration = Duration::from_secs(30);

/// A CloudEvent numbered `n`.
fn event(n: u32) -> serde_json::Value {
    json!({"specversion": "1.0", "id": format!("e-{n}"), "source": "/t", "type": "number", "data": n})
}

#[tokio::test]
async fn each_change_of_the_breaker_is_an_event_with_its_subscription_and_consumer() {
    let events = Events::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(events.clone()))
        .unwrap();
    let s = TestServer::start().await;
    s.topic("orders", json!({})).await;
    s.pull_sub("orders", "billing", json!({})).await;
    let c = Client::builder(&s.url)
        .clock(Arc::new(s.clock().clone()))
        .retry(RetryOptions::new().jitter(Jitter::None))
        .build()
        .unwrap();
    let down = Arc::new(AtomicBool::new(true));
    let handler_down = down.clone();
    let h = c
        .subscription_processor(
            "orders",
            "billing",
            ProcessorOptions::new()
                .consumer("billing-worker")
                .receive_wait(Duration::from_secs(1))
                .redelivery_interval(Duration::from_secs(3600))
                .circuit_breaker(
                    CircuitBreaker::new()
                        .min_calls(3)
                        .failure_ratio(0.5)
                        .window(Duration::from_secs(60))
                        .open_for(OPEN_FOR)
                        .probes(1),
                ),
            move |_d| {
                let down = handler_down.clone();
                async move {
                    if down.load(Ordering::SeqCst) {
                        Err(HandlerError::transient("payments: 503"))
                    } else {
                        Ok(())
                    }
                }
            },
        )
        .unwrap()
        .start();
    let mut w = h.watch_stats();

    // Three transient failures open it.
    let three: Vec<serde_json::Value> = (0..3).map(event).collect();
    let (status, v) = s.publish("orders", &three).await;
    assert_eq!(status, 201, "{v}");
    within("the breaker opens", w.wait_for(|st| st.breaker_opened == 1))
        .await
        .unwrap();
    // The receive loop's long poll ends, and it parks until the breaker may probe.
    s.advance(1_000);
    s.until_parked_at(T0.plus(OPEN_FOR)).await;

    // The dependency is back: after the open duration one probe is received, succeeds,
    // and the breaker closes.
    down.store(false, Ordering::SeqCst);
    let (status, v) = s.publish("orders", &[event(3)]).await;
    assert_eq!(status, 201, "{v}");
    s.advance(OPEN_FOR.as_millis() as u64);
    let st = *within(
        "the breaker closes",
        w.wait_for(|st| st.breaker_closed == 1),
    )
    .await
    .unwrap();
    assert_eq!(st.breaker, BreakerState::Closed);

    let seen = events.matching(|e| e.starts_with("breaker_"));
    let names: Vec<&str> = seen.iter().map(|e| e["event"].as_str()).collect();
    assert_eq!(
        names,
        ["breaker_opened", "breaker_half_open", "breaker_closed"]
    );
    for e in &seen {
        assert_eq!(e["topic"], "orders", "{e:?}");
        assert_eq!(e["subscription"], "billing", "{e:?}");
        assert_eq!(e["consumer"], "billing-worker", "{e:?}");
        assert_eq!(e["count"], "1", "{e:?}");
    }
    // The opening says why: the failures and calls in the window, and until when.
    assert_eq!(seen[0]["failures"], "3");
    assert_eq!(seen[0]["calls"], "3");
    assert!(seen[0].contains_key("until"), "{:?}", seen[0]);

    h.shutdown(Duration::from_secs(5)).await.unwrap();
    s.stop().await;
}
