//! The test server and a small JSON client.

use std::sync::Arc;
use std::time::Duration;

use redrive_core::{ManualClock, Timestamp};
use redrive_server::Settings;
use redrive_store_sqlite::{SqliteOptions, SqliteStore};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A running server with its own SQLite file and manual clock.
pub struct TestServer {
    pub url: String,
    /// The listen address, for raw TCP clients.
    pub addr: std::net::SocketAddr,
    pub clock: ManualClock,
    pub http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

/// Push endpoints on loopback allowed: where the tests' receivers listen.
pub fn loopback() -> redrive_broker::NetworkPolicy {
    redrive_broker::NetworkPolicy::allowing(&["127.0.0.0/8", "::1"]).unwrap()
}

/// A fixed, realistic start time.
pub const T0: Timestamp = Timestamp(1_800_000_000_000);

impl TestServer {
    /// A server whose push endpoints may be on loopback (the test receivers are on
    /// 127.0.0.1; by default no loopback or private address is allowed).
    pub async fn start() -> TestServer {
        TestServer::start_with_network(loopback()).await
    }

    /// A server whose push endpoints may be the addresses `network` allows.
    pub async fn start_with_network(network: redrive_broker::NetworkPolicy) -> TestServer {
        TestServer::start_in(tempfile::tempdir().unwrap(), ManualClock::new(T0), network).await
    }

    /// A server with these settings (the sweep interval and shutdown timeout are the
    /// tests' own).
    pub async fn start_with(settings: Settings) -> TestServer {
        TestServer::start_full(
            tempfile::tempdir().unwrap(),
            ManualClock::new(T0),
            settings,
            loopback(),
        )
        .await
    }

    /// A server over the SQLite file in `dir` (created if missing) on `clock`.
    async fn start_in(
        dir: tempfile::TempDir,
        clock: ManualClock,
        network: redrive_broker::NetworkPolicy,
    ) -> TestServer {
        TestServer::start_full(dir, clock, Settings::default(), network).await
    }

    async fn start_full(
        dir: tempfile::TempDir,
        clock: ManualClock,
        settings: Settings,
        network: redrive_broker::NetworkPolicy,
    ) -> TestServer {
        let store =
            SqliteStore::open(&dir.path().join("redrive.db"), SqliteOptions::default()).unwrap();
        let store: Arc<SqliteStore> = Arc::new(store);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let scheme = if settings.tls_cert_file.is_some() {
            "https"
        } else {
            "http"
        };
        let url = format!("{scheme}://{addr}");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let settings = Settings {
            sweep_interval_ms: 1_000,
            shutdown_timeout_ms: 5_000,
            ..settings
        };
        let clock_dyn: Arc<dyn redrive_core::Clock> = Arc::new(clock.clone());
        let store_dyn: Arc<dyn redrive_store::Store> = store.clone();
        let broker = redrive_broker::Broker::with_push_network(store_dyn, clock_dyn, network);
        let task = tokio::spawn(async move {
            redrive_server::run_with(settings, broker, listener, Vec::new(), async {
                let _ = rx.await;
            })
            .await
            .unwrap();
            store.close();
        });
        TestServer {
            url,
            addr,
            clock,
            http: reqwest::Client::new(),
            stop: Some(tx),
            task: Some(task),
            _dir: dir,
        }
    }

    /// Stops the server gracefully, then starts a new one over the same SQLite file and
    /// the same manual clock (on a new port: use the returned server's `url`).
    pub async fn restart(mut self) -> TestServer {
        self.shutdown().await;
        let TestServer { clock, _dir, .. } = self;
        TestServer::start_in(_dir, clock, loopback()).await
    }

    async fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap();
        }
    }

    /// Stops the server gracefully and waits for it.
    pub async fn stop(mut self) {
        self.shutdown().await;
    }

    pub fn advance(&self, ms: u64) {
        self.clock.advance(Duration::from_millis(ms));
    }

    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.url));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let bytes = resp.bytes().await.unwrap();
        let v = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()))
        };
        (status, v)
    }

    /// The Prometheus text of `/metrics`.
    pub async fn metrics(&self) -> String {
        self.http
            .get(format!("{}/metrics", self.url))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(reqwest::Method::PATCH, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        self.call(reqwest::Method::DELETE, path, None).await
    }

    /// Creates a queue with a policy, asserting success.
    pub async fn queue(&self, name: &str, policy: Value) {
        let (s, v) = self
            .post("/v1/queues", json!({"name": name, "policy": policy}))
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
    }

    /// Sends text bodies in one batch; returns sequence numbers.
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
            .unwrap()
            .iter()
            .map(|r| r["sequence_number"].as_i64().unwrap())
            .collect()
    }

    /// Receives up to `max` without waiting.
    pub async fn receive(&self, queue: &str, max: u32) -> Vec<Value> {
        let (s, v) = self
            .post(
                &format!("/v1/queues/{queue}/receive"),
                json!({"max_messages": max}),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        v["messages"].as_array().unwrap().clone()
    }

    /// Settles one delivery; returns status and body.
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
            let r = http.post(url).json(&body).send().await.unwrap();
            r.json::<Value>().await.unwrap()
        })
    }

    /// Waits (by yielding, bounded) until `n` more tasks sleep on the manual clock than
    /// `before`: a long poll has parked. This waits for a signal, not for time.
    pub async fn until_parked(&self, before: usize) {
        for _ in 0..10_000 {
            if self.clock.sleepers() > before {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("the long poll never parked on the clock");
    }
}

/// Asserts a problem+json response with this status and code.
#[track_caller]
pub fn assert_problem(resp: &(StatusCode, Value), status: u16, code: &str) {
    assert_eq!(resp.0.as_u16(), status, "{}", resp.1);
    assert_eq!(resp.1["code"], code, "{}", resp.1);
    assert_eq!(resp.1["status"], status);
    assert!(resp.1["type"].as_str().unwrap().ends_with(code));
    assert!(resp.1["title"].is_string());
}
