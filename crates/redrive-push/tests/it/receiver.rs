//! A webhook receiver for tests: records every request and answers as the test's
//! behaviour says, given the request's index (0-based) and the request itself.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, Response, Uri};

/// A request the receiver saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Seen {
    /// A header's value as text ("" when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
    }
}

/// How to answer one request.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    /// Waits this long (on tokio's clock) before answering.
    pub delay: Option<Duration>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            ..Reply::default()
        }
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }
}

type Behaviour = Arc<dyn Fn(usize, &Seen) -> Reply + Send + Sync>;

#[derive(Clone)]
struct AppState {
    behaviour: Behaviour,
    seen: Arc<Mutex<Vec<Seen>>>,
}

pub struct Receiver {
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Receiver {
    /// Starts a receiver on 127.0.0.1:0; its endpoint is `<url>` (path `/hook`).
    pub async fn start(behaviour: impl Fn(usize, &Seen) -> Reply + Send + Sync + 'static) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let state = AppState {
            behaviour: Arc::new(behaviour),
            seen: seen.clone(),
        };
        let app = Router::new().fallback(handle).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver {
            url: format!("http://{addr}/hook"),
            seen,
        }
    }

    /// Answers every request with `status`.
    pub async fn always(status: u16) -> Self {
        Receiver::start(move |_, _| Reply::status(status)).await
    }

    /// Every request seen so far, in order.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn handle(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let seen = Seen {
        method,
        path: uri.path().to_owned(),
        headers,
        body,
    };
    let reply = {
        let mut all = state.seen.lock().unwrap();
        let reply = (state.behaviour)(all.len(), &seen);
        all.push(seen);
        reply
    };
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    let mut response = Response::builder().status(reply.status);
    for (name, value) in reply.headers {
        response = response.header(name, value);
    }
    response.body(Body::from(reply.body)).unwrap()
}

/// A URL on which nothing listens: a port that was bound and released.
pub fn refused_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/hook")
}

/// Delivery settings that allow the loopback receivers of these tests (push requests
/// reach no loopback address by default).
pub fn loopback_settings() -> redrive_push::DeliverySettings {
    redrive_push::DeliverySettings {
        network: redrive_push::NetworkPolicy::allowing(&["127.0.0.0/8", "::1"]).unwrap(),
        ..redrive_push::DeliverySettings::default()
    }
}
