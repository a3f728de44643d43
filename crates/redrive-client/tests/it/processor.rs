//! The processor against the test server: its concurrency bound, lock renewal (and the
//! lost lock without it), transient and permanent failures, explicit settlement, sessions
//! in order, the error callback, and a shutdown that loses nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redrive_client::Clock;
use redrive_client::{
    ErrorKind, ErrorSource, HandlerError, Message, ProcessingError, ProcessorBuildError,
    ProcessorErrorEvent, ProcessorHandle, ProcessorOptions, ProcessorStats, RestartBudget,
};
use redrive_testkit::{T0, TestServer, within};
use serde_json::json;
use tokio::sync::{Semaphore, mpsc};

use crate::support::client;

/// What the error callback saw: source, message id, kind, text.
type Seen = (ErrorSource, Option<String>, Option<ErrorKind>, String);

fn recording() -> (
    impl Fn(&ProcessorErrorEvent) + Send + Sync + 'static,
    mpsc::UnboundedReceiver<Seen>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let f = move |e: &ProcessorErrorEvent| {
        let _ = tx.send((
            e.source,
            e.message_id.clone(),
            e.error.kind(),
            e.error.to_string(),
        ));
    };
    (f, rx)
}

/// Waits until the processor's counts satisfy `f`.
async fn stats_until(h: &ProcessorHandle, f: impl Fn(&ProcessorStats) -> bool) -> ProcessorStats {
    let mut w = h.watch_stats();
    within("the processor's counts", async {
        *w.wait_for(|s| f(s)).await.unwrap()
    })
    .await
}

/// Shuts the processor down on the server's clock: once the shutdown waits for its bound
/// (an odd 10.007 s, so that no other sleeper shares its deadline), the clock moves 20 s,
/// past the bound and the end of any receive in flight.
async fn stop(h: ProcessorHandle, s: &TestServer) {
    let timeout = Duration::from_millis(10_007);
    let deadline = s.clock().now().plus(timeout);
    let task = tokio::spawn(h.shutdown(timeout));
    s.until_parked_at(deadline).await;
    s.advance(20_000);
    within("the shutdown", task).await.unwrap().unwrap();
}

#[tokio::test]
async fn no_more_handlers_run_than_the_bound() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let c = client(&s);
    let bodies: Vec<Message> = (0..8).map(|i| Message::new(i.to_string())).collect();
    c.sender("orders").send_batch(bodies).await.unwrap();
    let gate = Arc::new(Semaphore::new(0));
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (started, mut starts) = mpsc::unbounded_channel::<()>();
    let h = c
        .processor("orders", ProcessorOptions::new().max_concurrent_calls(3), {
            let (gate, running, most) = (gate.clone(), running.clone(), most.clone());
            move |_d| {
                let (gate, running, most, started) =
                    (gate.clone(), running.clone(), most.clone(), started.clone());
                async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    let _ = started.send(());
                    gate.acquire().await.unwrap().forget();
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                }
            }
        })
        .unwrap()
        .start();
    for _ in 0..3 {
        within("a handler to start", starts.recv()).await.unwrap();
    }
    // Three handlers wait; the receive loop holds no more messages than it may run.
    assert_eq!(running.load(Ordering::SeqCst), 3);
    assert_eq!(h.stats().received, 3);
    assert_eq!(s.counts("orders").await["locked"], 3);
    gate.add_permits(8);
    let done = stats_until(&h, |st| st.completed == 8).await;
    assert_eq!(done.received, 8);
    assert_eq!(most.load(Ordering::SeqCst), 3);
    assert_eq!(s.counts("orders").await["active"], 0);
    stop(h, &s).await;
    s.stop().await;
}

#[tokio::test]
async fn zero_concurrency_and_bad_entities_are_refused_at_build() {
    let s = TestServer::start().await;
    let c = client(&s);
    let handler = |_d| async { Ok::<(), HandlerError>(()) };
    let err = c
        .processor(
            "orders",
            ProcessorOptions::new().max_concurrent_calls(0),
            handler,
        )
        .unwrap_err();
    assert!(matches!(
        err,
        ProcessorBuildError::InvalidOption {
            option: "max_concurrent_calls",
            ..
        }
    ));
    let err = c
        .processor("", ProcessorOptions::new(), handler)
        .unwrap_err();
    assert!(matches!(err, ProcessorBuildError::InvalidEntity(_)));
    let err = c
        .processor(
            "orders",
            ProcessorOptions::new().receive_wait(Duration::from_secs(21)),
            handler,
        )
        .unwrap_err();
    assert!(matches!(err, ProcessorBuildError::InvalidOption { .. }));
    s.stop().await;
}

/// A handler that holds the first delivery until released, and completes the others at
/// once.
fn held_first(
    release: Arc<Semaphore>,
    started: mpsc::UnboundedSender<u32>,
) -> impl Fn(redrive_client::Delivery) -> futures_like::Handler + Send + Sync + 'static {
    move |d| {
        let (release, started) = (release.clone(), started.clone());
        Box::pin(async move {
            let count = d.message().delivery_count();
            let _ = started.send(count);
            if count == 1 {
                release.acquire().await.unwrap().forget();
            }
            Ok(())
        })
    }
}

mod futures_like {
    use redrive_client::HandlerError;
    use std::future::Future;
    use std::pin::Pin;

    pub type Handler = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send>>;
}

#[tokio::test]
async fn renewal_keeps_a_slow_handlers_lock() {
    let s = TestServer::start().await;
    s.queue("orders", json!({"lock_duration_ms": 30_000})).await;
    let c = client(&s);
    c.sender("orders").send(Message::new("slow")).await.unwrap();
    let release = Arc::new(Semaphore::new(0));
    let (started, mut starts) = mpsc::unbounded_channel();
    let (on_error, mut errors) = recording();
    let h = c
        .processor(
            "orders",
            ProcessorOptions::new().on_error(on_error),
            held_first(release.clone(), started),
        )
        .unwrap()
        .start();
    assert_eq!(within("the handler", starts.recv()).await, Some(1));
    // Renewed 10 s before each expiry: at 20 s (lock to 50 s), at 40 s (to 70 s).
    s.until_parked_at(T0.plus_millis(20_000)).await;
    s.advance(20_000);
    s.until_parked_at(T0.plus_millis(40_000)).await;
    s.advance(20_000);
    s.until_parked_at(T0.plus_millis(60_000)).await;
    // 40 s after the receive, well past the first lock, the handler finishes.
    release.add_permits(1);
    let st = stats_until(&h, |st| st.completed == 1).await;
    assert_eq!(st.lock_renewed, 2);
    assert_eq!(st.lock_lost, 0);
    assert_eq!(st.received, 1, "never delivered again");
    let counts = s.counts("orders").await;
    assert_eq!(
        (counts["active"].as_u64(), counts["locked"].as_u64()),
        (Some(0), Some(0))
    );
    stop(h, &s).await;
    assert!(errors.try_recv().is_err(), "no error");
    s.stop().await;
}

#[tokio::test]
async fn without_renewal_a_slow_handler_loses_its_lock() {
    let s = TestServer::start().await;
    s.queue("orders", json!({"lock_duration_ms": 30_000})).await;
    let c = client(&s);
    c.sender("orders")
        .send(Message::new("slow").with_id("m-1"))
        .await
        .unwrap();
    let release = Arc::new(Semaphore::new(0));
    let (started, mut starts) = mpsc::unbounded_channel();
    let (on_error, mut errors) = recording();
    let h = c
        .processor(
            "orders",
            ProcessorOptions::new()
                .max_auto_lock_renewal(Duration::ZERO)
                .on_error(on_error),
            held_first(release.clone(), started),
        )
        .unwrap()
        .start();
    assert_eq!(within("the handler", starts.recv()).await, Some(1));
    s.advance(31_000);
    release.add_permits(1);
    let (source, id, kind, _) = within("the error", errors.recv()).await.unwrap();
    assert_eq!(source, ErrorSource::Complete);
    assert_eq!(id.as_deref(), Some("m-1"));
    assert_eq!(kind, Some(ErrorKind::LockLost));
    // The server delivers it again; the second delivery is completed.
    assert_eq!(within("the redelivery", starts.recv()).await, Some(2));
    let st = stats_until(&h, |st| st.completed == 1).await;
    assert_eq!((st.lock_lost, st.lock_renewed, st.received), (1, 0, 2));
    stop(h, &s).await;
    s.stop().await;
}

#[tokio::test]
async fn transient_failures_are_redelivered_and_permanent_ones_dead_lettered_at_once() {
    let s = TestServer::start().await;
    s.queue("orders", json!({"max_delivery_count": 10})).await;
    let c = client(&s);
    let sender = c.sender("orders");
    sender
        .send(Message::new("flaky").with_id("t"))
        .await
        .unwrap();
    sender
        .send(Message::new("malformed").with_id("p"))
        .await
        .unwrap();
    let (on_error, mut errors) = recording();
    let h = c
        .processor(
            "orders",
            ProcessorOptions::new()
                .redelivery_interval(Duration::from_secs(10))
                .receive_wait(Duration::from_secs(20))
                .consumer("billing")
                .on_error(on_error),
            |d| async move {
                match (d.message().body_str(), d.message().delivery_count()) {
                    (Some("malformed"), _) => Err(HandlerError::permanent(
                        "ValidationFailed",
                        "no amount in order",
                    )),
                    (_, 1) => Err(HandlerError::transient("ledger timed out")),
                    _ => Ok(()),
                }
            },
        )
        .unwrap()
        .start();
    let st = stats_until(&h, |st| st.processed == 2).await;
    assert_eq!(
        (st.nacked, st.dead_lettered, st.redelivery_requested),
        (2, 1, 1)
    );
    // The transient one waits for the redelivery interval, then succeeds.
    assert_eq!(s.counts("orders").await["scheduled"], 1);
    s.until_parked_at(T0.plus_millis(10_000)).await;
    s.advance(10_000);
    let st = stats_until(&h, |st| st.completed == 1).await;
    assert_eq!(st.received, 3);
    let (_, page) = s.get("/v1/queues/orders/dead-letters").await;
    let records = page["dead_letters"].as_array().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["message_id"], "p");
    assert_eq!(records[0]["reason"], "ValidationFailed");
    assert_eq!(records[0]["description"], "no amount in order");
    assert_eq!(records[0]["consumer"], "billing");
    // The callback saw both handler errors, with the entity and message ids.
    let mut seen = Vec::new();
    while let Ok((source, id, _, text)) = errors.try_recv() {
        seen.push((source, id.unwrap(), text));
    }
    seen.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!((seen[0].0, seen[0].1.as_str()), (ErrorSource::Handler, "p"));
    assert!(seen[0].2.contains("ValidationFailed"), "{}", seen[0].2);
    assert_eq!((seen[1].0, seen[1].1.as_str()), (ErrorSource::Handler, "t"));
    stop(h, &s).await;
    s.stop().await;
}

#[tokio::test]
async fn a_handler_that_settles_turns_automatic_settlement_off() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let c = client(&s);
    c.sender("orders")
        .send(Message::new("later"))
        .await
        .unwrap();
    let h = c
        .processor("orders", ProcessorOptions::new(), |d| async move {
            d.defer().await?;
            assert!(d.is_settled());
            Ok(())
        })
        .unwrap()
        .start();
    let st = stats_until(&h, |st| st.processed == 1).await;
    assert_eq!(st.completed, 0);
    assert_eq!(s.counts("orders").await["deferred"], 1);
    stop(h, &s).await;
    s.stop().await;
}

#[tokio::test]
async fn a_panicking_handler_is_a_restart_and_its_message_comes_back() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let c = client(&s);
    c.sender("orders")
        .send(Message::new("boom").with_id("b"))
        .await
        .unwrap();
    let (on_error, mut errors) = recording();
    // The restarted worker pauses 1.337 s (odd: no other sleeper shares its deadline).
    let pause = Duration::from_millis(1_337);
    let h = c
        .processor(
            "orders",
            ProcessorOptions::new()
                .restart_budget(RestartBudget::new(3, Duration::from_secs(10), pause))
                .on_error(on_error),
            |d| async move {
                if d.message().delivery_count() == 1 {
                    panic!("handler bug");
                }
                Ok(())
            },
        )
        .unwrap()
        .start();
    s.until_parked_at(T0.plus(pause)).await;
    assert_eq!(
        h.stats().received,
        1,
        "the worker pauses before its next message"
    );
    s.advance(1_337);
    let st = stats_until(&h, |st| st.completed == 1).await;
    assert_eq!((st.restarts, st.nacked, st.received), (1, 1, 2));
    let (source, id, _, text) = within("the error", errors.recv()).await.unwrap();
    assert_eq!(
        (source, id.as_deref()),
        (ErrorSource::HandlerPanic, Some("b"))
    );
    assert!(text.contains("handler bug"), "{text}");
    stop(h, &s).await;
    s.stop().await;
}

#[tokio::test]
async fn shutdown_finishes_or_abandons_everything_it_holds() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let c = client(&s);
    let bodies: Vec<Message> = (0..5).map(|i| Message::new(i.to_string())).collect();
    c.sender("orders").send_batch(bodies).await.unwrap();
    // Two handlers run: "0" finishes when released, "1" never does.
    let release = Arc::new(Semaphore::new(0));
    let (started, mut starts) = mpsc::unbounded_channel::<String>();
    let h = c
        .processor(
            "orders",
            ProcessorOptions::new().max_concurrent_calls(2).prefetch(2),
            {
                let release = release.clone();
                move |d| {
                    let (release, started) = (release.clone(), started.clone());
                    async move {
                        let body = d.message().body_str().unwrap().to_owned();
                        let _ = started.send(body.clone());
                        if body == "0" {
                            release.acquire().await.unwrap().forget();
                        } else {
                            std::future::pending::<()>().await;
                        }
                        Ok(())
                    }
                }
            },
        )
        .unwrap()
        .start();
    let mut running = vec![
        within("a handler", starts.recv()).await.unwrap(),
        within("a handler", starts.recv()).await.unwrap(),
    ];
    running.sort();
    assert_eq!(running, ["0", "1"]);
    stats_until(&h, |st| st.received == 4).await;
    assert_eq!(
        s.counts("orders").await["locked"],
        4,
        "two running, two prefetched"
    );

    let timeout = Duration::from_millis(10_007);
    let deadline = s.clock().now().plus(timeout);
    let stats = h.watch_stats();
    let shutdown = tokio::spawn(h.shutdown(timeout));
    s.until_parked_at(deadline).await;
    // The prefetched two are released at once; the running ones are not touched yet.
    let mut w = stats.clone();
    within(
        "prefetched messages abandoned",
        w.wait_for(|st| st.abandoned_on_shutdown == 2),
    )
    .await
    .unwrap();
    assert_eq!(s.counts("orders").await["locked"], 2);
    release.add_permits(1);
    let mut w = stats.clone();
    within("the released handler", w.wait_for(|st| st.completed == 1))
        .await
        .unwrap();
    // The other is stopped at the bound and its message abandoned.
    s.advance(10_007);
    within("the shutdown", shutdown).await.unwrap().unwrap();
    let st = *stats.borrow();
    assert_eq!((st.completed, st.abandoned_on_shutdown), (1, 3));
    let counts = s.counts("orders").await;
    assert_eq!(
        (counts["active"].as_u64(), counts["locked"].as_u64()),
        (Some(4), Some(0)),
        "every message not completed is back on the queue"
    );
    s.stop().await;
}

#[tokio::test]
async fn sessions_are_handled_one_per_worker_in_order() {
    let s = TestServer::start().await;
    s.queue("orders", json!({"requires_session": true})).await;
    let c = client(&s);
    let sender = c.sender("orders");
    for (session, body) in [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3)] {
        sender
            .send(Message::new(body.to_string()).with_session_id(session))
            .await
            .unwrap();
    }
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let h = c
        .processor(
            "orders",
            ProcessorOptions::new()
                .sessions(true)
                .max_concurrent_calls(2),
            {
                let seen = seen.clone();
                move |d| {
                    let seen = seen.clone();
                    async move {
                        let m = d.message();
                        seen.lock().unwrap().push((
                            m.session_id().unwrap().to_owned(),
                            m.body_str().unwrap().to_owned(),
                        ));
                        Ok(())
                    }
                }
            },
        )
        .unwrap()
        .start();
    stats_until(&h, |st| st.completed == 5).await;
    let seen = seen.lock().unwrap().clone();
    for session in ["a", "b"] {
        let order: Vec<&str> = seen
            .iter()
            .filter(|(s, _)| s == session)
            .map(|(_, b)| b.as_str())
            .collect();
        let expected: &[&str] = if session == "a" {
            &["1", "2", "3"]
        } else {
            &["1", "2"]
        };
        assert_eq!(order, expected, "session {session}");
    }
    stop(h, &s).await;
    // Released on the way out: another receiver may take the sessions.
    assert_eq!(s.counts("orders").await["locked"], 0);
    s.stop().await;
}

#[tokio::test]
async fn invalid_messages_go_to_their_own_handler() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let c = client(&s);
    let sender = c.sender("orders");
    sender.send(Message::new("41")).await.unwrap();
    sender.send(Message::new("forty-two")).await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let h = c
        .processor_builder(redrive_client::Entity::queue("orders"))
        .decode(|m| {
            m.body_str()
                .and_then(|b| b.parse::<u64>().ok())
                .ok_or_else(|| redrive_client::InvalidMessage::new("not a number"))
        })
        .handle_invalid({
            let tx = tx.clone();
            move |d| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(format!("invalid: {}", d.value().reason()));
                    Ok(())
                }
            }
        })
        .build(move |d| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(format!("number {}", d.value() + 1));
                Ok(())
            }
        })
        .unwrap()
        .start();
    let st = stats_until(&h, |st| st.completed == 2).await;
    assert_eq!(st.invalid, 1);
    let mut got = vec![rx.recv().await.unwrap(), rx.recv().await.unwrap()];
    got.sort();
    assert_eq!(got, ["invalid: not a number", "number 42"]);
    stop(h, &s).await;
    s.stop().await;
}

#[test]
fn processing_errors_name_their_kind() {
    assert_eq!(
        ProcessingError::LockExpired.kind(),
        Some(ErrorKind::LockLost)
    );
}

#[tokio::test]
async fn a_session_held_past_its_lock_is_renewed_and_keeps_its_order() {
    let s = TestServer::start().await;
    s.queue(
        "orders",
        json!({"requires_session": true, "lock_duration_ms": 30_000}),
    )
    .await;
    let c = client(&s);
    for body in ["a1", "a2"] {
        c.sender("orders")
            .send(Message::new(body).with_session_id("a"))
            .await
            .unwrap();
    }
    let release = Arc::new(Semaphore::new(0));
    let (started, mut starts) = mpsc::unbounded_channel::<String>();
    let (on_error, mut errors) = recording();
    let h = c
        .processor(
            "orders",
            ProcessorOptions::new()
                .sessions(true)
                .receive_wait(Duration::from_secs(20))
                .on_error(on_error),
            {
                let release = release.clone();
                move |d| {
                    let (release, started) = (release.clone(), started.clone());
                    async move {
                        let body = d.message().body_str().unwrap().to_owned();
                        let _ = started.send(body.clone());
                        if body == "a1" {
                            release.acquire().await.unwrap().forget();
                        }
                        Ok(())
                    }
                }
            },
        )
        .unwrap()
        .start();
    assert_eq!(within("a1", starts.recv()).await.unwrap(), "a1");
    // The session's lock and a1's are both renewed 10 s before they run out.
    s.until_parked_at(T0.plus_millis(20_000)).await;
    s.advance(20_000);
    s.until_parked_at(T0.plus_millis(40_000)).await;
    s.advance(20_000);
    release.add_permits(1);
    // 40 s in, past both first locks: a1 completes and a2 follows in the same session.
    assert_eq!(within("a2", starts.recv()).await.unwrap(), "a2");
    let st = stats_until(&h, |st| st.completed == 2).await;
    assert!(st.lock_renewed >= 1, "{st:?}");
    assert_eq!(st.lock_lost, 0);
    assert!(
        errors.try_recv().is_err(),
        "no lost lock, session or message"
    );
    stop(h, &s).await;
    assert_eq!(s.counts("orders").await["locked"], 0);
    s.stop().await;
}
