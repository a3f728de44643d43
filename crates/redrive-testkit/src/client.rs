//! A small JSON client for the native API of a [`TestServer`]: requests with or without a
//! token, the resources tests create over and over, the manual clock, and long polls.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::{ADMIN, TestServer};

impl TestServer {
    /// A request to the native API with an optional bearer token; the answer's status and
    /// body (JSON; a non-JSON body as a string; an empty one as `null`).
    pub async fn call_as(
        &self,
        token: Option<&str>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.url));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("the test server answers");
        let status = resp.status();
        let bytes = resp.bytes().await.expect("the whole answer");
        let v = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        (status, v)
    }

    /// A request without a token.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        self.call_as(None, method, path, body).await
    }

    /// A request with the [`ADMIN`] token.
    pub async fn admin(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        self.call_as(Some(ADMIN), method, path, body).await
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::PATCH, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::DELETE, path, None).await
    }

    /// The Prometheus text of `/metrics`.
    pub async fn metrics(&self) -> String {
        self.http
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .expect("the test server answers")
            .text()
            .await
            .expect("the whole answer")
    }

    /// Creates a queue with a policy, asserting success.
    pub async fn queue(&self, name: &str, policy: Value) {
        let (s, v) = self
            .post("/v1/queues", json!({"name": name, "policy": policy}))
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
    }

    /// Sends text bodies in one batch; returns their sequence numbers.
    pub async fn send(&self, queue: &str, bodies: &[&str]) -> Vec<i64> {
        let msgs: Vec<Value> = bodies.iter().map(|b| json!({"body": b})).collect();
        let (s, v) = self
            .post(
                &format!("/v1/queues/{queue}/messages"),
                json!({"messages": msgs}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        v["results"]
            .as_array()
            .expect("a results array")
            .iter()
            .map(|r| r["sequence_number"].as_i64().expect("a sequence number"))
            .collect()
    }

    /// Receives up to `max` messages without waiting.
    pub async fn receive(&self, queue: &str, max: u32) -> Vec<Value> {
        let (s, v) = self
            .post(
                &format!("/v1/queues/{queue}/receive"),
                json!({"max_messages": max}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v["messages"].as_array().expect("a messages array").clone()
    }

    /// Settles one delivery with `action` and the fields of `extra`; status and body.
    pub async fn settle(
        &self,
        queue: &str,
        token: &str,
        action: &str,
        extra: Value,
    ) -> (StatusCode, Value) {
        let mut body = json!({"lock_token": token, "action": action});
        if let Value::Object(m) = extra {
            for (k, v) in m {
                body[k] = v;
            }
        }
        self.post(&format!("/v1/queues/{queue}/settle"), body).await
    }

    /// A queue's counts.
    pub async fn counts(&self, queue: &str) -> Value {
        let (s, v) = self.get(&format!("/v1/queues/{queue}")).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v["counts"].clone()
    }

    /// Starts a (long-polling) receive in the background; its answer comes from the handle.
    pub fn spawn_receive(&self, queue: &str, body: Value) -> tokio::task::JoinHandle<Value> {
        let url = format!("{}/v1/queues/{queue}/receive", self.url);
        let http = self.http.clone();
        tokio::spawn(async move {
            let r = http
                .post(url)
                .json(&body)
                .send()
                .await
                .expect("the test server answers");
            r.json::<Value>().await.expect("a JSON answer")
        })
    }

    /// Creates a topic with a policy, asserting success.
    pub async fn topic(&self, name: &str, policy: Value) {
        let (s, v) = self
            .post("/v1/topics", json!({"name": name, "policy": policy}))
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
    }

    /// Creates a pull subscription with a filter; returns its queue.
    pub async fn pull_sub(&self, topic: &str, name: &str, filter: Value) -> String {
        let (s, v) = self
            .post(
                &format!("/v1/topics/{topic}/subscriptions"),
                json!({"name": name, "type": "pull", "filter": filter}),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        v["queue"]
            .as_str()
            .expect("the subscription's queue")
            .to_owned()
    }

    /// Publishes `body` with this content type; status and body of the answer (`null`
    /// when it is not JSON).
    pub async fn publish_raw(&self, topic: &str, ct: &str, body: Vec<u8>) -> (StatusCode, Value) {
        let resp = self
            .http
            .post(format!("{}/v1/topics/{topic}/events", self.url))
            .header("content-type", ct)
            .body(body)
            .send()
            .await
            .expect("the test server answers");
        let status = resp.status();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// Publishes `events` as one batch.
    pub async fn publish(&self, topic: &str, events: &[Value]) -> (StatusCode, Value) {
        self.publish_raw(
            topic,
            "application/cloudevents-batch+json",
            serde_json::to_vec(&Value::Array(events.to_vec())).expect("events serialize"),
        )
        .await
    }

    /// A new token with `grants`, made by the admin; returns (id, secret).
    pub async fn token(&self, name: &str, grants: &[&str]) -> (String, String) {
        let (st, v) = self
            .admin(
                Method::POST,
                "/v1/tokens",
                Some(json!({"name": name, "grants": grants})),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
        (
            v["id"].as_str().expect("a token id").to_owned(),
            v["secret"].as_str().expect("a token secret").to_owned(),
        )
    }

    /// The audit entries the admin reads with `query`.
    pub async fn audit(&self, query: &str) -> Vec<Value> {
        let (st, v) = self
            .admin(Method::GET, &format!("/v1/audit?{query}"), None)
            .await;
        assert_eq!(st, StatusCode::OK, "{v}");
        v["entries"].as_array().expect("an entries array").clone()
    }

    /// Moves the manual clock on by `ms` milliseconds.
    pub fn advance(&self, ms: u64) {
        self.clock().advance(Duration::from_millis(ms));
    }

    /// Moves the manual clock on by `secs` seconds.
    pub fn advance_secs(&self, secs: u64) {
        self.clock().advance(Duration::from_secs(secs));
    }

    /// Waits until more tasks sleep on the manual clock than `before`: a long poll has
    /// parked. Woken by the clock each time a sleep parks
    /// ([`ManualClock::when_parked`](redrive_core::ManualClock::when_parked)), bounded by
    /// [`GUARD`](crate::GUARD).
    pub async fn until_parked(&self, before: usize) {
        let parked = self.clock().when_parked(move |c| c.sleepers() > before);
        crate::within("a long poll parking on the clock", parked).await;
    }

    /// Waits until something sleeps on the server's clock until exactly `deadline` (a
    /// long poll's end, say): unlike [`TestServer::until_parked`], not fooled by a worker
    /// polled again meanwhile.
    pub async fn until_parked_at(&self, deadline: redrive_core::Timestamp) {
        let parked = self
            .clock()
            .when_parked(move |c| c.sleeping_until(deadline));
        crate::within("a long poll parking on the clock", parked).await;
    }

    /// Waits until a sleep parks on the server's clock after the `seen`-th
    /// ([`ManualClock::parks`](redrive_core::ManualClock::parks)): a background worker
    /// that sleeps on the clock between passes has finished one. Bounded by
    /// [`GUARD`](crate::GUARD).
    pub async fn parked_after(&self, seen: u64) {
        let parked = self.clock().when_parked(move |c| c.parks() > seen);
        crate::within("a sleep parking on the clock", parked).await;
    }
}

/// Asserts a problem+json response with this status and code.
#[track_caller]
pub fn assert_problem(resp: &(StatusCode, Value), status: u16, code: &str) {
    assert_eq!(resp.0.as_u16(), status, "{}", resp.1);
    assert_eq!(resp.1["code"], code, "{}", resp.1);
    assert_eq!(resp.1["status"], status);
    assert!(
        resp.1["type"].as_str().is_some_and(|t| t.ends_with(code)),
        "{}",
        resp.1
    );
    assert!(resp.1["title"].is_string());
}
