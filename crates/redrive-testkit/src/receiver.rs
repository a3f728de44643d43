//! A fake webhook endpoint: an axum app on 127.0.0.1 that records every request, answers
//! each as the test's behaviour says, and announces every arrival on a watch channel, so
//! that a test waits for the n-th request instead of polling for it.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, Response, Uri};
use redrive_core::{Clock, ManualClock};
use serde_json::Value;

/// A request the receiver saw.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    /// The path, without the query.
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Request {
    /// A header's value as text ("" when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(|v| {
                v.to_str()
                    .expect("a header value the test can read as text")
            })
            .unwrap_or("")
    }

    /// The body as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("the request body is not JSON ({e}): {:?}", self.body))
    }

    /// Whether this is the CloudEvents validation handshake (an `OPTIONS` request) rather
    /// than a delivery.
    pub fn is_handshake(&self) -> bool {
        self.method == Method::OPTIONS
    }
}

/// How long an answer waits before it is sent.
#[derive(Clone, Default)]
pub enum Delay {
    /// At once.
    #[default]
    None,
    /// After this long on tokio's clock (paused in `start_paused` tests).
    Tokio(Duration),
    /// After this long on a manual clock (moved by the test).
    Clock(ManualClock, Duration),
    /// Never: the request is held open until the client gives up.
    Forever,
}

impl std::fmt::Debug for Delay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Delay::None => write!(f, "None"),
            Delay::Tokio(d) => write!(f, "Tokio({d:?})"),
            Delay::Clock(clock, d) => write!(f, "Clock(at {}, {d:?})", clock.now().as_millis()),
            Delay::Forever => write!(f, "Forever"),
        }
    }
}

/// How to answer one request.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
    pub delay: Delay,
}

impl Reply {
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            ..Reply::default()
        }
    }

    /// An answer that never comes (the request is held open).
    pub fn never() -> Reply {
        Reply {
            delay: Delay::Forever,
            ..Reply::status(200)
        }
    }

    /// Agreement to the CloudEvents validation handshake: 200 with
    /// `WebHook-Allowed-Origin` echoing the request's `WebHook-Request-Origin` (`*` when it
    /// names none), as the specification's example does.
    pub fn handshake(req: &Request) -> Reply {
        let origin = match req.header("webhook-request-origin") {
            "" => "*",
            origin => origin,
        };
        Reply::status(200).header("webhook-allowed-origin", origin)
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }

    /// Answers after `d` on tokio's clock.
    pub fn after(self, d: Duration) -> Reply {
        Reply {
            delay: Delay::Tokio(d),
            ..self
        }
    }

    /// Answers after `d` on `clock`.
    pub fn after_on(self, clock: &ManualClock, d: Duration) -> Reply {
        Reply {
            delay: Delay::Clock(clock.clone(), d),
            ..self
        }
    }
}

impl From<u16> for Reply {
    fn from(status: u16) -> Reply {
        Reply::status(status)
    }
}

/// Chooses the answer to a request, given how many deliveries (requests other than the
/// validation handshake) came before it.
type Behaviour = Box<dyn Fn(usize, &Request) -> Reply + Send + Sync>;

struct Shared {
    behaviour: Behaviour,
    /// Answer the validation handshake with [`Reply::handshake`] instead of asking the
    /// behaviour.
    agree_to_handshake: bool,
    requests: Mutex<Vec<Request>>,
    /// The number of deliveries so far.
    deliveries: tokio::sync::watch::Sender<usize>,
}

/// A webhook receiver on 127.0.0.1; stops serving when dropped.
pub struct Receiver {
    /// Its endpoint: `<base>/hook`.
    pub url: String,
    /// `http://127.0.0.1:<port>`; every path is served.
    pub base: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// A receiver whose `behaviour` answers every request, the validation handshake
    /// included. `behaviour` is given how many deliveries came before the request.
    pub async fn start(
        behaviour: impl Fn(usize, &Request) -> Reply + Send + Sync + 'static,
    ) -> Self {
        Receiver::serve(Box::new(behaviour), false).await
    }

    /// Answers every request, the handshake included, with `status`.
    pub async fn always(status: u16) -> Self {
        Receiver::start(move |_, _| Reply::status(status)).await
    }

    /// A push endpoint: agrees to the validation handshake ([`Reply::handshake`]) and
    /// answers each delivery as `behaviour` says, given how many came before it.
    pub async fn webhook(
        behaviour: impl Fn(usize, &Request) -> Reply + Send + Sync + 'static,
    ) -> Self {
        Receiver::serve(Box::new(behaviour), true).await
    }

    /// A push endpoint answering its deliveries with `script` in order, then with `then`.
    pub async fn script<R: Into<Reply>>(
        script: impl IntoIterator<Item = R>,
        then: impl Into<Reply>,
    ) -> Self {
        let script: Vec<Reply> = script.into_iter().map(Into::into).collect();
        let then = then.into();
        Receiver::webhook(move |n, _| script.get(n).unwrap_or(&then).clone()).await
    }

    async fn serve(behaviour: Behaviour, agree_to_handshake: bool) -> Self {
        let shared = Arc::new(Shared {
            behaviour,
            agree_to_handshake,
            requests: Mutex::default(),
            deliveries: tokio::sync::watch::Sender::new(0),
        });
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the receiver");
        let addr = listener.local_addr().expect("a bound address");
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .await
                .expect("the receiver serves");
        });
        Receiver {
            url: format!("http://{addr}/hook"),
            base: format!("http://{addr}"),
            shared,
            task,
        }
    }

    /// Every request seen so far, in order, the validation handshake included.
    pub fn requests(&self) -> Vec<Request> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The deliveries seen so far (every request but the validation handshake), in order.
    pub fn deliveries(&self) -> Vec<Request> {
        self.requests()
            .into_iter()
            .filter(|r| !r.is_handshake())
            .collect()
    }

    /// Waits until at least `n` deliveries have arrived (they may still be waiting for
    /// their answer) and returns the deliveries so far. Woken by each arrival; fails the
    /// test after [`GUARD`](crate::GUARD).
    pub async fn wait_for(&self, n: usize) -> Vec<Request> {
        let mut seen = self.shared.deliveries.subscribe();
        crate::within(&format!("the receiver's delivery {n}"), async {
            seen.wait_for(|&count| count >= n)
                .await
                .map(|_| ())
                .expect("the receiver outlives its waiters");
        })
        .await;
        self.deliveries()
    }

    /// The `redrive-delivery-attempt` header of each delivery so far.
    pub fn attempts(&self) -> Vec<String> {
        self.deliveries()
            .iter()
            .map(|r| r.header("redrive-delivery-attempt").to_owned())
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let request = Request {
        method,
        path: uri.path().to_owned(),
        headers,
        body,
    };
    let reply = {
        let mut all = shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let before = all.iter().filter(|r| !r.is_handshake()).count();
        let reply = if shared.agree_to_handshake && request.is_handshake() {
            Reply::handshake(&request)
        } else {
            (shared.behaviour)(before, &request)
        };
        let delivery = !request.is_handshake();
        all.push(request);
        if delivery {
            shared.deliveries.send_replace(before + 1);
        }
        reply
    };
    match reply.delay {
        Delay::None => {}
        Delay::Tokio(d) => tokio::time::sleep(d).await,
        Delay::Clock(clock, d) => {
            let deadline = clock.now().plus(d);
            clock.sleep_until(deadline).await;
        }
        Delay::Forever => std::future::pending::<()>().await,
    }
    let mut response = Response::builder().status(reply.status);
    for (name, value) in reply.headers {
        response = response.header(name, value);
    }
    response
        .body(Body::from(reply.body))
        .expect("the scripted answer is a valid response")
}
