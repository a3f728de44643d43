//! Retries of transient failures, against a scripted HTTP server on 127.0.0.1 (its answers
//! set by the test) and against the real server's rate limit: each wait is computed, taken
//! on the manual clock, floored by `Retry-After`, and bounded by `max_retries`; a send
//! without a message id and a settlement after an answer that proves nothing are not
//! repeated.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use redrive_client::{Client, ErrorKind, Jitter, ManualClock, Message, RetryOptions, Timestamp};
use redrive_testkit::{T0, TestServer, within};
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::support::{client, fixed_retries};

/// One scripted answer.
#[derive(Clone)]
struct Answer {
    status: u16,
    retry_after: Option<&'static str>,
    body: Value,
}

fn problem(status: u16, code: &str) -> Answer {
    Answer {
        status,
        retry_after: None,
        body: json!({"type": format!("https://redrive.dev/problems/{code}"), "title": code,
                     "status": status, "code": code}),
    }
}

fn sent(id: &str) -> Answer {
    Answer {
        status: 201,
        retry_after: None,
        body: json!({"results": [{"message_id": id, "sequence_number": 1, "duplicate": false}]}),
    }
}

/// A server answering each request with the next scripted answer (the last one once the
/// script runs out), recording how many requests came.
#[derive(Clone, Default)]
struct Script {
    answers: Arc<Mutex<VecDeque<Answer>>>,
    requests: Arc<Mutex<Vec<Value>>>,
    arrived: Arc<Notify>,
}

impl Script {
    async fn start(answers: Vec<Answer>) -> (Script, String) {
        let script = Script {
            answers: Arc::new(Mutex::new(answers.into())),
            ..Script::default()
        };
        let s = script.clone();
        let app = Router::new().fallback(move |body: Bytes| {
            let s = s.clone();
            async move { s.answer(&body) }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (script, url)
    }

    fn answer(&self, body: &[u8]) -> Response {
        self.requests
            .lock()
            .unwrap()
            .push(serde_json::from_slice(body).unwrap_or(Value::Null));
        self.arrived.notify_waiters();
        let a = {
            let mut q = self.answers.lock().unwrap();
            if q.len() > 1 {
                q.pop_front().unwrap()
            } else {
                q.front().cloned().unwrap()
            }
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if let Some(ra) = a.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static(ra));
        }
        (
            StatusCode::from_u16(a.status).unwrap(),
            headers,
            serde_json::to_vec(&a.body).unwrap(),
        )
            .into_response()
    }

    fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }
}

fn scripted_client(url: &str, clock: &ManualClock, retry: RetryOptions) -> Client {
    Client::builder(url)
        .clock(Arc::new(clock.clone()))
        .retry(retry)
        .build()
        .unwrap()
}

/// Waits until the client sleeps on the clock until exactly `at`.
async fn parked_at(clock: &ManualClock, at: Timestamp) {
    within(
        "the retry to wait on the clock",
        clock.when_parked(move |c| c.sleeping_until(at)),
    )
    .await;
}

#[tokio::test]
async fn a_503_is_retried_after_the_computed_delay_on_the_clock() {
    let (script, url) = Script::start(vec![
        problem(503, "unavailable"),
        problem(503, "unavailable"),
        sent("order-1"),
    ])
    .await;
    let clock = ManualClock::new(T0);
    let c = scripted_client(&url, &clock, fixed_retries());
    let send = tokio::spawn({
        let c = c.clone();
        async move {
            c.sender("orders")
                .send(Message::new("x").with_id("order-1"))
                .await
        }
    });
    // First retry: the base delay (100 ms), not a moment earlier.
    parked_at(&clock, T0.plus_millis(100)).await;
    assert_eq!(script.count(), 1);
    clock.advance(Duration::from_millis(99));
    assert!(!send.is_finished());
    clock.advance(Duration::from_millis(1));
    // Second retry: doubled (200 ms after the second failure).
    parked_at(&clock, T0.plus_millis(300)).await;
    assert_eq!(script.count(), 2);
    clock.advance(Duration::from_millis(200));
    let out = within("the send", send).await.unwrap().unwrap();
    assert_eq!(out.message_id, "order-1");
    assert_eq!(script.count(), 3);
}

#[tokio::test]
async fn retry_after_is_honoured_when_longer_than_the_backoff() {
    let mut limited = problem(429, "rate_limited");
    limited.retry_after = Some("3");
    let (script, url) = Script::start(vec![limited, sent("a")]).await;
    let clock = ManualClock::new(T0);
    let c = scripted_client(&url, &clock, fixed_retries());
    let send = tokio::spawn({
        let c = c.clone();
        async move {
            c.sender("orders")
                .send(Message::new("x").with_id("a"))
                .await
        }
    });
    parked_at(&clock, T0.plus_millis(3_000)).await;
    assert!(
        !clock.sleeping_until(T0.plus_millis(100)),
        "not the backoff"
    );
    clock.advance(Duration::from_millis(3_000));
    within("the send", send).await.unwrap().unwrap();
    assert_eq!(script.count(), 2);
}

#[tokio::test]
async fn the_last_error_is_returned_once_max_retries_are_spent() {
    let (script, url) = Script::start(vec![problem(503, "unavailable")]).await;
    let clock = ManualClock::new(T0);
    let c = scripted_client(&url, &clock, fixed_retries().max_retries(2));
    let send = tokio::spawn({
        let c = c.clone();
        async move {
            c.sender("orders")
                .send(Message::new("x").with_id("a"))
                .await
        }
    });
    parked_at(&clock, T0.plus_millis(100)).await;
    clock.advance(Duration::from_millis(100));
    parked_at(&clock, T0.plus_millis(300)).await;
    clock.advance(Duration::from_millis(200));
    let err = within("the send", send).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert_eq!(err.code(), Some("unavailable"));
    assert_eq!(err.status(), Some(503));
    assert_eq!(err.attempts(), 3);
    assert!(err.is_transient());
    assert_eq!(script.count(), 3);
    assert_eq!(clock.sleepers(), 0, "no fourth wait");
}

#[tokio::test]
async fn a_send_without_a_message_id_is_not_retried() {
    let (script, url) = Script::start(vec![problem(503, "unavailable"), sent("x")]).await;
    let clock = ManualClock::new(T0);
    let c = scripted_client(&url, &clock, fixed_retries());
    let err = c
        .sender("orders")
        .send(Message::new("x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable);
    assert_eq!(err.attempts(), 1);
    assert_eq!(script.count(), 1);
    // With ids assigned by the sender, the same send is retried.
    let send = tokio::spawn({
        let c = c.clone();
        async move {
            c.sender("orders")
                .assign_message_ids(true)
                .send(Message::new("x"))
                .await
        }
    });
    within("the script's second answer", async {
        while script.count() < 2 {
            script.arrived.notified().await;
        }
    })
    .await;
    let body = script.requests.lock().unwrap()[1].clone();
    let id = body["message_id"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 32, "a client-assigned id: {body}");
    // The script's last answer (201) repeats: no retry needed after it.
    within("the send", send).await.unwrap().unwrap();
}

#[tokio::test]
async fn a_client_error_is_not_retried_and_keeps_the_problem() {
    let (script, url) = Script::start(vec![problem(404, "queue_not_found")]).await;
    let clock = ManualClock::new(T0);
    let c = scripted_client(&url, &clock, fixed_retries());
    let err = c
        .sender("orders")
        .send(Message::new("x").with_id("a"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(err.code(), Some("queue_not_found"));
    assert_eq!(err.problem().unwrap().status, 404);
    assert_eq!(script.count(), 1);
}

#[tokio::test]
async fn full_jitter_waits_at_most_the_bound() {
    let (script, url) = Script::start(vec![problem(503, "unavailable"), sent("a")]).await;
    let clock = ManualClock::new(T0);
    let retry = fixed_retries().jitter(Jitter::Full);
    let c = scripted_client(&url, &clock, retry);
    let send = tokio::spawn({
        let c = c.clone();
        async move {
            c.sender("orders")
                .send(Message::new("x").with_id("a"))
                .await
        }
    });
    // The draw may be zero (no wait at all); otherwise the wait parks, and the bound
    // (100 ms) is enough to end it.
    let parked = clock.when_parked(|c| c.sleepers() > 0);
    tokio::pin!(send);
    tokio::select! {
        r = &mut send => { r.unwrap().unwrap(); }
        () = within("the retry to wait", parked) => {
            clock.advance(Duration::from_millis(100));
            within("the send", send).await.unwrap().unwrap();
        }
    }
    assert_eq!(script.count(), 2);
}

#[tokio::test]
async fn a_refused_connection_is_retried_even_for_a_settlement() {
    // Nothing listens: the request was never sent, so a repeat is safe for any operation.
    let url = redrive_testkit::refused_url().replace("/hook", "");
    let clock = ManualClock::new(T0);
    let c = scripted_client(&url, &clock, fixed_retries().max_retries(1));
    let receive = tokio::spawn({
        let c = c.clone();
        async move { c.receiver("orders").receive(1, Duration::ZERO).await }
    });
    parked_at(&clock, T0.plus_millis(100)).await;
    clock.advance(Duration::from_millis(100));
    let err = within("the receive", receive).await.unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transport);
    assert_eq!(err.attempts(), 2);
}

#[tokio::test]
async fn the_servers_rate_limit_is_waited_out_on_its_clock() {
    let s = TestServer::builder()
        .auth(redrive_broker::AccessSettings {
            enabled: true,
            rate_limit_per_s: 1,
            rate_limit_burst: 1,
            ..redrive_broker::AccessSettings::default()
        })
        .start()
        .await;
    // Every admin call spends the admin's bucket: a second waits a second.
    let (st, v) = s
        .admin(
            reqwest::Method::POST,
            "/v1/queues",
            Some(json!({"name": "orders"})),
        )
        .await;
    assert_eq!(st, 201, "{v}");
    s.advance(1_000);
    let (_, secret) = s
        .token("app", &["producer:orders", "consumer:orders"])
        .await;
    s.advance(1_000);
    let (_, strict_secret) = s.token("strict", &["producer:orders"]).await;
    let c = Client::builder(&s.url)
        .token(secret)
        .clock(Arc::new(s.clock().clone()))
        .retry(fixed_retries())
        .build()
        .unwrap();
    let sender = c.sender("orders");
    sender.send(Message::new("1").with_id("one")).await.unwrap();
    let second = tokio::spawn({
        let sender = sender.clone();
        async move { sender.send(Message::new("2").with_id("two")).await }
    });
    // The bucket refills in one second: the problem's retry_after_ms, not the 100 ms
    // backoff.
    parked_at(s.clock(), T0.plus_millis(3_000)).await;
    s.advance(1_000);
    let out = within("the second send", second).await.unwrap().unwrap();
    assert_eq!(out.message_id, "two");
    assert!(!c.token_unchecked());
    // Without retries the same limit is a typed error.
    let strict = Client::builder(&s.url)
        .token(strict_secret)
        .clock(Arc::new(s.clock().clone()))
        .retry(RetryOptions::none())
        .build()
        .unwrap();
    strict
        .sender("orders")
        .send(Message::new("3").with_id("3"))
        .await
        .unwrap();
    let err = strict
        .sender("orders")
        .send(Message::new("4").with_id("4"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited);
    assert_eq!(err.retry_after(), Some(Duration::from_millis(1_000)));
    s.stop().await;
}

#[tokio::test]
async fn a_token_the_server_does_not_check_is_noticed() {
    let s = TestServer::start().await;
    s.queue("orders", json!({})).await;
    let c = Client::builder(&s.url)
        .token("rdt_0000000000000000000000000000000000000000000000000000000000000001")
        .clock(Arc::new(s.clock().clone()))
        .build()
        .unwrap();
    c.sender("orders").send(Message::new("x")).await.unwrap();
    assert!(c.token_unchecked());
    assert!(!client(&s).token_unchecked());
    s.stop().await;
}
