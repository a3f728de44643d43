//! The kit holds to what its users rely on: the receiver records, answers as scripted and
//! wakes waiters on arrival; a test server keeps its store and clock across a restart on
//! every backend, admits only the admin token with authentication on, serves SQS when
//! asked, and can run on the system clock.

// Test code: a failed unwrap is a failed test, with its location.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use redrive_broker::AccessSettings;
use redrive_core::{Clock, ManualClock, Timestamp};
use redrive_testkit::{ADMIN, Backend, Receiver, Reply, T0, TestServer};
use reqwest::{Method, StatusCode};
use serde_json::json;

async fn post(url: &str, body: &'static str) -> u16 {
    reqwest::Client::new()
        .post(url)
        .header("redrive-delivery-attempt", "1")
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn a_scripted_receiver_answers_in_order_and_agrees_to_the_handshake() {
    let rx = Receiver::script([500, 429], 200).await;
    let handshake = reqwest::Client::new()
        .request(Method::OPTIONS, &rx.url)
        .header("webhook-request-origin", "broker.example")
        .send()
        .await
        .unwrap();
    assert_eq!(handshake.status(), 200);
    assert_eq!(
        handshake.headers()["webhook-allowed-origin"],
        "broker.example"
    );
    let mut statuses = Vec::new();
    for body in ["a", "b", "c", "d"] {
        statuses.push(post(&rx.url, body).await);
    }
    assert_eq!(
        statuses,
        [500, 429, 200, 200],
        "the handshake is not a delivery"
    );
    let all = rx.requests();
    assert_eq!(all.len(), 5);
    assert!(all[0].is_handshake());
    let bodies: Vec<_> = rx.deliveries().iter().map(|r| r.body.clone()).collect();
    assert_eq!(bodies, ["a", "b", "c", "d"]);
    assert_eq!(rx.attempts(), ["1", "1", "1", "1"]);
    assert_eq!(rx.deliveries()[0].path, "/hook");
}

#[tokio::test]
async fn a_waiter_is_woken_by_a_request_still_waiting_for_its_answer() {
    let rx = Receiver::webhook(|_, _| Reply::never()).await;
    let url = rx.url.clone();
    let client = tokio::spawn(async move { post(&url, "held").await });
    let seen = rx.wait_for(1).await;
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body, "held");
    assert!(!client.is_finished(), "the answer is held back");
    client.abort();
}

#[tokio::test]
async fn an_answer_delayed_on_a_manual_clock_comes_when_the_clock_moves() {
    let clock = ManualClock::new(T0);
    let delayed = clock.clone();
    let rx = Receiver::webhook(move |_, _| {
        Reply::status(202).after_on(&delayed, Duration::from_secs(5))
    })
    .await;
    let url = rx.url.clone();
    let client = tokio::spawn(async move { post(&url, "x").await });
    rx.wait_for(1).await;
    // The answer sleeps on the clock (a signal, not a timing rule).
    redrive_testkit::within("the answer waiting on the clock", async {
        while clock.sleepers() == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    clock.advance(Duration::from_millis(4_999));
    assert!(!client.is_finished());
    clock.advance(Duration::from_millis(1));
    assert_eq!(client.await.unwrap(), 202);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_keeps_its_store_and_clock_across_a_restart_on_every_backend() {
    for backend in Backend::all("the kit's restart test") {
        let name = backend.name();
        let s = TestServer::builder().backend(backend.clone()).start().await;
        assert_eq!(s.backend, backend);
        s.queue("q", json!({})).await;
        s.send("q", &["kept"]).await;
        s.advance(1_500);
        let s = s.restart().await;
        assert_eq!(s.counts("q").await["active"], 1, "{name}");
        assert_eq!(s.clock().now(), T0.plus_millis(1_500), "{name}");
        let got = s.receive("q", 10).await;
        assert_eq!(got[0]["body"], "kept", "{name}");
        s.stop().await;
    }
}

#[tokio::test]
async fn with_authentication_on_only_a_token_is_admitted() {
    let s = TestServer::builder()
        .auth(AccessSettings {
            enabled: true,
            ..AccessSettings::default()
        })
        .start()
        .await;
    let (st, v) = s.get("/v1/queues").await;
    assert_eq!(st, StatusCode::UNAUTHORIZED, "{v}");
    let (st, v) = s.admin(Method::GET, "/v1/queues", None).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let (_, secret) = s.token("ops", &["operator"]).await;
    let (st, _) = s
        .call_as(Some(&secret), Method::GET, "/v1/queues", None)
        .await;
    assert_eq!(st, StatusCode::OK);
    assert!(ADMIN.starts_with(redrive_broker::TOKEN_PREFIX));
    s.stop().await;
}

#[tokio::test]
async fn the_sqs_endpoint_is_served_on_its_own_listener_when_asked() {
    let plain = TestServer::start().await;
    assert_eq!(plain.sqs_url, None);
    plain.stop().await;
    let s = TestServer::builder()
        .sqs(redrive_sqs::SqsConfig::default())
        .start()
        .await;
    let sqs = s.sqs_url.clone().unwrap();
    assert_ne!(sqs, s.url);
    let r = s
        .http
        .post(format!("{sqs}/"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("Action=CreateQueue&QueueName=orders")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // The same broker: the native API sees the queue.
    let (st, v) = s.get("/v1/queues/orders").await;
    assert_eq!(st, StatusCode::OK, "{v}");
    s.stop().await;
}

#[tokio::test]
async fn a_server_on_the_system_clock_reads_wall_time() {
    let s = TestServer::builder().system_clock().start().await;
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let now: Timestamp = s.broker.clock().now();
    let wall = i64::try_from(wall.as_millis()).unwrap();
    assert!((now.as_millis() - wall).abs() < 60_000, "{now:?}");
    let manual = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        s.clock();
    }));
    assert!(manual.is_err(), "no manual clock to hand out");
    s.stop().await;
}
