//! The processor's circuit breaker against the test server, on the manual clock: it opens
//! once transient failures reach the ratio, receives nothing while open (messages stay
//! available, their delivery counts untouched), half-opens after the open duration, closes
//! on a good probe and reopens on a bad one; each change counted and told to the error
//! callback.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redrive_client::{
    BreakerState, CircuitBreaker, Clock, ErrorSource, HandlerError, Message, ProcessingError,
    ProcessorBuildError, ProcessorErrorEvent, ProcessorHandle, ProcessorOptions, ProcessorStats,
};
use redrive_testkit::{T0, TestServer, within};
use serde_json::json;
use tokio::sync::mpsc;

use crate::support::client;

const OPEN_FOR: Duration = Duration::from_secs(30);

async fn stats_until(h: &ProcessorHandle, f: impl Fn(&ProcessorStats) -> bool) -> ProcessorStats {
    let mut w = h.watch_stats();
    within("the processor's counts", async {
        *w.wait_for(|s| f(s)).await.unwrap()
    })
    .await
}

/// A processor of `orders` whose handler fails transiently while `down` is set; the
/// breaker's reports on the returned channel.
fn start(
    s: &TestServer,
    down: Arc<AtomicBool>,
) -> (ProcessorHandle, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let options = ProcessorOptions::new()
        .receive_wait(Duration::from_secs(1))
        // Failed messages stay out of the way while the breaker is watched.
        .redelivery_interval(Duration::from_secs(3600))
        .circuit_breaker(
            CircuitBreaker::new()
                .min_calls(3)
                .failure_ratio(0.5)
                .window(Duration::from_secs(60))
                .open_for(OPEN_FOR)
                .probes(1),
        )
        .on_error(move |e: &ProcessorErrorEvent| {
            if e.source == ErrorSource::CircuitBreaker {
                let what = match e.error {
                    ProcessingError::BreakerOpened { .. } => "opened",
                    ProcessingError::BreakerClosed => "closed",
                    _ => "other",
                };
                let _ = tx.send(what.to_owned());
            }
        });
    let h = client(s)
        .processor("orders", options, move |_d| {
            let down = down.clone();
            async move {
                if down.load(Ordering::SeqCst) {
                    Err(HandlerError::transient("payments: 503"))
                } else {
                    Ok(())
                }
            }
        })
        .unwrap()
        .start();
    (h, rx)
}

/// Opens the breaker with three failures at T0, then waits until the receive loop sleeps
/// until the open duration's end (its long poll, 1 s, ended first).
async fn open_it(s: &TestServer, h: &ProcessorHandle) {
    let c = client(s);
    let three: Vec<Message> = (0..3).map(|i| Message::new(format!("a{i}"))).collect();
    c.sender("orders").send_batch(three).await.unwrap();
    let st = stats_until(h, |s| s.breaker_opened == 1).await;
    assert_eq!(st.breaker, BreakerState::Open);
    assert_eq!((st.received, st.nacked), (3, 3));
    // The receive loop parks until T0 + 30 s, the breaker's reopening, once any long
    // poll in flight ends.
    s.advance(1_000);
    s.until_parked_at(T0.plus(OPEN_FOR)).await;
}

#[tokio::test]
async fn opens_receives_nothing_while_open_and_closes_on_a_good_probe() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let down = Arc::new(AtomicBool::new(true));
    let (h, mut reports) = start(&s, down.clone());
    open_it(&s, &h).await;
    assert_eq!(
        within("the report", reports.recv()).await.unwrap(),
        "opened"
    );

    // Sent while open: not received, their delivery counts untouched.
    let c = client(&s);
    c.sender("orders")
        .send_batch(vec![Message::new("b0"), Message::new("b1")])
        .await
        .unwrap();
    assert_eq!(h.stats().received, 3);
    let counts = s.counts("orders").await;
    assert_eq!(
        (counts["active"].as_u64(), counts["locked"].as_u64()),
        (Some(2), Some(0))
    );
    let peeked = c.receiver("orders").peek(0, 10).await.unwrap();
    let waiting: Vec<u32> = peeked
        .iter()
        .filter(|m| m.body_str().is_some_and(|b| b.starts_with('b')))
        .map(|m| m.delivery_count())
        .collect();
    assert_eq!(waiting, [0, 0]);

    // The dependency is back; after the open duration one probe is received, succeeds,
    // and the breaker closes: the other message follows.
    down.store(false, Ordering::SeqCst);
    s.advance(OPEN_FOR.as_millis() as u64);
    let st = stats_until(&h, |s| s.breaker_closed == 1 && s.completed == 2).await;
    assert_eq!(st.breaker, BreakerState::Closed);
    assert_eq!(st.breaker_opened, 1);
    assert_eq!(
        within("the report", reports.recv()).await.unwrap(),
        "closed"
    );
    stop(h, &s).await;
    s.stop().await;
}

#[tokio::test]
async fn a_failed_probe_reopens_it_and_only_the_probe_was_received() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let down = Arc::new(AtomicBool::new(true));
    let (h, mut reports) = start(&s, down.clone());
    open_it(&s, &h).await;
    let c = client(&s);
    c.sender("orders")
        .send_batch(vec![Message::new("b0"), Message::new("b1")])
        .await
        .unwrap();

    s.advance(OPEN_FOR.as_millis() as u64);
    let st = stats_until(&h, |s| s.breaker_opened == 2).await;
    assert_eq!(st.breaker, BreakerState::Open);
    assert_eq!(st.received, 4, "one probe, not the whole queue");
    assert_eq!(st.breaker_closed, 0);
    assert_eq!(s.counts("orders").await["active"].as_u64(), Some(1));
    assert_eq!(
        within("the report", reports.recv()).await.unwrap(),
        "opened"
    );
    assert_eq!(
        within("the report", reports.recv()).await.unwrap(),
        "opened"
    );
    // The receive loop sleeps on the breaker, no receive in flight: the shutdown is
    // immediate.
    within("the shutdown", h.shutdown(Duration::from_secs(10)))
        .await
        .unwrap();
    s.stop().await;
}

#[tokio::test]
async fn permanent_failures_do_not_open_it() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let options = ProcessorOptions::new().circuit_breaker(CircuitBreaker::new().min_calls(2));
    let h = client(&s)
        .processor("orders", options, |_d| async {
            Err(HandlerError::permanent("Malformed", "no amount"))
        })
        .unwrap()
        .start();
    let three: Vec<Message> = (0..3).map(|i| Message::new(i.to_string())).collect();
    client(&s).sender("orders").send_batch(three).await.unwrap();
    let st = stats_until(&h, |s| s.dead_lettered == 3).await;
    assert_eq!((st.breaker, st.breaker_opened), (BreakerState::Closed, 0));
    stop(h, &s).await;
    s.stop().await;
}

#[test]
fn bad_breaker_options_are_refused_when_built() {
    let c = redrive_client::Client::builder("http://127.0.0.1:9")
        .build()
        .unwrap();
    for (breaker, sessions) in [
        (CircuitBreaker::new().failure_ratio(0.0), false),
        (CircuitBreaker::new().probes(0), false),
        (CircuitBreaker::new(), true),
    ] {
        let options = ProcessorOptions::new()
            .circuit_breaker(breaker)
            .sessions(sessions);
        let r = c.processor("orders", options, |_d| async { Ok(()) });
        assert!(
            matches!(r, Err(ProcessorBuildError::InvalidOption { .. })),
            "{breaker:?} sessions={sessions}"
        );
    }
}

async fn stop(h: ProcessorHandle, s: &TestServer) {
    let timeout = Duration::from_millis(10_007);
    let deadline = s.clock().now().plus(timeout);
    let task = tokio::spawn(h.shutdown(timeout));
    s.until_parked_at(deadline).await;
    s.advance(20_000);
    within("the shutdown", task).await.unwrap().unwrap();
}
