//! The [`Client`] handle and its builder, and the one request path every operation takes:
//! URL, token, body, timeout, problem documents, retries on the injected clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use redrive_api::Problem;
use redrive_core::clock::Clock;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{BuildError, ErrorKind, Failure, Outcome};
use crate::retry::RetryOptions;
use crate::{Admin, Publisher, Receiver, Sender, SystemClock};

/// A handle on one redrive server. Cheap to clone: clones share the connection pool, the
/// options and the clock.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use redrive_client::{Client, Message, RetryOptions};
///
/// let client = Client::builder("http://127.0.0.1:7474")
///     .token("rdt_…")
///     .timeout(Duration::from_secs(30))
///     .retry(RetryOptions::new().max_retries(5))
///     .build()?;
/// client.sender("orders").send(Message::new("hello").with_id("order-1")).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    base: Url,
    token: Option<HeaderValue>,
    timeout: Duration,
    retry: RetryOptions,
    clock: Arc<dyn Clock>,
    token_unchecked: AtomicBool,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.inner.base.as_str())
            .field("token", &self.inner.token.as_ref().map(|_| "…"))
            .field("timeout", &self.inner.timeout)
            .field("retry", &self.inner.retry)
            .finish()
    }
}

/// Where the roots that `https://` servers are checked against come from.
#[derive(Debug, Clone)]
enum TrustChoice {
    Platform,
    File(std::path::PathBuf),
    Pem(Vec<u8>),
    Given(redrive_tls::Trust),
}

/// Options of a [`Client`]; see [`Client::builder`].
#[derive(Debug, Clone)]
#[must_use]
pub struct ClientBuilder {
    url: String,
    token: Option<String>,
    timeout: Duration,
    connect_timeout: Duration,
    trust: TrustChoice,
    retry: RetryOptions,
    clock: Option<ClockHandle>,
}

/// A clock in a builder (a `dyn Clock` has no `Debug`).
#[derive(Clone)]
struct ClockHandle(Arc<dyn Clock>);

impl std::fmt::Debug for ClockHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

impl ClientBuilder {
    /// Sends `token` (an API token, `rdt_…`) as `Authorization: Bearer` with every request.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The time one attempt of a request may take, from connecting to the last byte of the
    /// answer (default 30 s). A long poll is given its wait on top.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The time a connection may take to open (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Trusts, for `https://` servers, the platform's roots plus every certificate of this
    /// PEM file (a private authority).
    pub fn ca_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.trust = TrustChoice::File(path.into());
        self
    }

    /// Trusts, for `https://` servers, only the certificates of this PEM bundle (a pinned
    /// private authority; the platform's roots are not consulted).
    pub fn ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.trust = TrustChoice::Pem(pem.into());
        self
    }

    /// Trusts exactly what `trust` trusts.
    pub fn trust(mut self, trust: redrive_tls::Trust) -> Self {
        self.trust = TrustChoice::Given(trust);
        self
    }

    /// How transient failures are retried (default [`RetryOptions::default`]).
    pub fn retry(mut self, retry: RetryOptions) -> Self {
        self.retry = retry;
        self
    }

    /// The clock every timing rule of this client reads: retry waits, lock renewal, a
    /// processor's shutdown bound and restart budget (default [`SystemClock`]). Tests pass
    /// a [`ManualClock`](redrive_core::ManualClock) and move it.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(ClockHandle(clock));
        self
    }

    /// The client, or why the options cannot make one.
    pub fn build(self) -> Result<Client, BuildError> {
        let base = parse_base(&self.url)?;
        let token = match self.token {
            None => None,
            Some(t) if t.trim().is_empty() => return Err(BuildError::InvalidToken("empty")),
            Some(t) => {
                let mut v = HeaderValue::from_str(&format!("Bearer {}", t.trim()))
                    .map_err(|_| BuildError::InvalidToken("not a valid header value"))?;
                v.set_sensitive(true);
                Some(v)
            }
        };
        for (option, d) in [
            ("timeout", self.timeout),
            ("connect_timeout", self.connect_timeout),
        ] {
            if d.is_zero() {
                return Err(BuildError::InvalidOption {
                    option,
                    reason: "must be more than zero".to_owned(),
                });
            }
        }
        self.retry.check()?;
        let trust = match self.trust {
            TrustChoice::Platform => redrive_tls::Trust::platform(),
            TrustChoice::File(path) => redrive_tls::Trust::load(Some(&path))?,
            TrustChoice::Pem(pem) => redrive_tls::Trust::only(&pem)?,
            TrustChoice::Given(t) => t,
        };
        let http = trust
            .client_builder()
            .connect_timeout(self.connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(BuildError::Http)?;
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                base,
                token,
                timeout: self.timeout,
                retry: self.retry,
                clock: self
                    .clock
                    .map_or_else(|| Arc::new(SystemClock) as Arc<dyn Clock>, |c| c.0),
                token_unchecked: AtomicBool::new(false),
            }),
        })
    }
}

fn parse_base(url: &str) -> Result<Url, BuildError> {
    let bad = |reason: &str| BuildError::InvalidUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let base: Url = url
        .parse()
        .map_err(|e: url_error::ParseError| bad(&e.to_string()))?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err(bad("expected http:// or https://"));
    }
    if base.cannot_be_a_base() || base.host_str().is_none() {
        return Err(bad("expected http://HOST:PORT"));
    }
    if base.query().is_some() || base.fragment().is_some() {
        return Err(bad("a server URL has no query or fragment"));
    }
    Ok(base)
}

/// `url`'s parse error, named through reqwest (which re-exports the `url` crate's type).
mod url_error {
    pub(crate) type ParseError = <reqwest::Url as std::str::FromStr>::Err;
}

impl Client {
    /// Options for a client of the server at `url` (`http://127.0.0.1:7474`).
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            url: url.into(),
            token: None,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            trust: TrustChoice::Platform,
            retry: RetryOptions::default(),
            clock: None,
        }
    }

    /// A sender to the queue `queue`.
    pub fn sender(&self, queue: impl Into<String>) -> Sender {
        Sender::new(self.clone(), queue.into())
    }

    /// A publisher of CloudEvents to the topic `topic`.
    pub fn publisher(&self, topic: impl Into<String>) -> Publisher {
        Publisher::new(self.clone(), topic.into())
    }

    /// A peek-lock receiver of the queue `queue`.
    pub fn receiver(&self, queue: impl Into<String>) -> Receiver {
        Receiver::new(self.clone(), queue.into())
    }

    /// A peek-lock receiver of the pull subscription `subscription` of `topic` (its queue
    /// `<topic>.<subscription>`).
    pub fn subscription_receiver(&self, topic: &str, subscription: &str) -> Receiver {
        Receiver::new(self.clone(), format!("{topic}.{subscription}"))
    }

    /// Management of queues, topics and subscriptions.
    pub fn admin(&self) -> Admin {
        Admin::new(self.clone())
    }

    /// The server's base URL.
    pub fn url(&self) -> &Url {
        &self.inner.base
    }

    /// The clock this client reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The retry options.
    pub fn retry_options(&self) -> &RetryOptions {
        &self.inner.retry
    }

    /// Whether a server answered a request that carried this client's token saying it did
    /// not check it (`redrive-authentication: off`: the server runs without
    /// authentication, and every caller has every right).
    pub fn token_unchecked(&self) -> bool {
        self.inner.token_unchecked.load(Ordering::Relaxed)
    }

    /// The URL of `segments` under the base, each segment percent-encoded.
    pub(crate) fn endpoint(&self, segments: &[&str]) -> Url {
        let mut url = self.inner.base.clone();
        // `parse_base` refused cannot-be-a-base URLs, so the segments are there.
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty();
            path.extend(segments);
        }
        url
    }

    /// Sends `req`, retrying transient failures as `retry` allows; the answer on success.
    pub(crate) async fn execute(&self, req: Req, retry: Retry) -> Result<Answer, Failure> {
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let mut failure = match self.once(&req).await {
                Ok(answer) => return Ok(answer),
                Err(f) => f,
            };
            failure.attempts = attempt;
            let allowed = failure.is_transient()
                && match retry {
                    Retry::Always => true,
                    Retry::IfUnchanged => failure.outcome == Outcome::Unchanged,
                    Retry::Never => false,
                };
            if !allowed || attempt > self.inner.retry.max_retries {
                return Err(failure);
            }
            let wait = self
                .inner
                .retry
                .wait(attempt - 1, fastrand::f64(), failure.retry_after);
            tracing::debug!(
                target: "redrive_client::retry",
                request = %failure.what,
                kind = %failure.kind,
                attempt,
                wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                "transient failure; retrying"
            );
            let deadline = self.inner.clock.now().plus(wait);
            self.inner.clock.sleep_until(deadline).await;
        }
    }

    /// One attempt.
    async fn once(&self, req: &Req) -> Result<Answer, Failure> {
        let what = format!("{} {}", req.method, req.url.path());
        let mut builder = self
            .inner
            .http
            .request(req.method.clone(), req.url.clone())
            .timeout(self.inner.timeout + req.extra_time);
        if let Some(t) = &self.inner.token {
            builder = builder.header(AUTHORIZATION, t.clone());
        }
        if let Some((ct, body)) = &req.body {
            builder = builder.header(CONTENT_TYPE, *ct).body(body.clone());
        }
        let resp = builder.send().await.map_err(|e| transport(&what, e))?;
        if self.inner.token.is_some()
            && resp
                .headers()
                .get(redrive_api::access::AUTHENTICATION_HEADER)
                .is_some_and(|v| v == "off")
        {
            self.inner.token_unchecked.store(true, Ordering::Relaxed);
        }
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = resp.bytes().await.map_err(|e| transport(&what, e))?;
        if status.is_success() {
            return Ok(Answer { status, body });
        }
        let problem = serde_json::from_slice::<Problem>(&body).ok().map(Box::new);
        let retry_after = problem
            .as_ref()
            .and_then(|p| p.extra.get("retry_after_ms"))
            .and_then(serde_json::Value::as_u64)
            .map(Duration::from_millis)
            .or(retry_after);
        let kind = problem.as_ref().map_or_else(
            || ErrorKind::of_status(status.as_u16()),
            |p| ErrorKind::of_problem(p),
        );
        let detail = problem.is_none().then(|| {
            let text = String::from_utf8_lossy(&body);
            let start: String = text.trim().chars().take(200).collect();
            if start.is_empty() {
                format!("HTTP {}", status.as_u16())
            } else {
                format!("HTTP {}: {start}", status.as_u16())
            }
        });
        Err(Failure {
            kind,
            problem,
            status: Some(status.as_u16()),
            what,
            detail,
            source: None,
            outcome: Outcome::Unchanged,
            retry_after,
            attempts: 1,
            tls: false,
        })
    }

    /// A JSON request whose success carries a JSON body.
    pub(crate) async fn json<T: DeserializeOwned>(
        &self,
        req: Req,
        retry: Retry,
    ) -> Result<T, Failure> {
        let what = format!("{} {}", req.method, req.url.path());
        let answer = self.execute(req, retry).await?;
        answer.decode(&what)
    }
}

/// When a request may be repeated after a transient failure (see [`crate::retry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// After any transient failure: a repeat is harmless.
    Always,
    /// Only after a failure that proves nothing happened.
    IfUnchanged,
    /// Never.
    Never,
}

/// A request, kept whole so that each attempt sends the same bytes.
#[derive(Debug, Clone)]
pub(crate) struct Req {
    pub(crate) method: Method,
    pub(crate) url: Url,
    pub(crate) body: Option<(&'static str, Bytes)>,
    /// Time the server may take on top of the client's timeout (a long poll's wait).
    pub(crate) extra_time: Duration,
}

impl Req {
    pub(crate) fn new(method: Method, url: Url) -> Req {
        Req {
            method,
            url,
            body: None,
            extra_time: Duration::ZERO,
        }
    }

    /// The JSON of `body`.
    pub(crate) fn json(self, body: &impl Serialize) -> Req {
        // The wire types serialize infallibly (strings, numbers, maps with string keys).
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        self.body("application/json", bytes)
    }

    /// A body of this media type.
    pub(crate) fn body(mut self, content_type: &'static str, bytes: Vec<u8>) -> Req {
        self.body = Some((content_type, Bytes::from(bytes)));
        self
    }

    /// Allows the server `extra` more than the client's timeout.
    pub(crate) fn wait(mut self, extra: Duration) -> Req {
        self.extra_time = extra;
        self
    }
}

/// A successful answer.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) body: Bytes,
}

impl Answer {
    pub(crate) fn decode<T: DeserializeOwned>(&self, what: &str) -> Result<T, Failure> {
        serde_json::from_slice(&self.body).map_err(|e| Failure {
            kind: ErrorKind::Server,
            problem: None,
            status: Some(self.status.as_u16()),
            what: what.to_owned(),
            detail: Some(format!("unexpected answer: {e}")),
            source: Some(Box::new(e)),
            // The server acted on the request; only its answer is unreadable.
            outcome: Outcome::Unknown,
            retry_after: None,
            attempts: 1,
            tls: false,
        })
    }
}

fn transport(what: &str, e: reqwest::Error) -> Failure {
    let tls = redrive_tls::tls_failure(&e).is_some();
    // A connection that was never made carried nothing; after that, the server may have
    // read the request.
    let (kind, outcome) = if e.is_connect() {
        (ErrorKind::Transport, Outcome::Unchanged)
    } else if e.is_timeout() {
        (ErrorKind::Timeout, Outcome::Unknown)
    } else {
        (ErrorKind::Transport, Outcome::Unknown)
    };
    Failure {
        kind,
        problem: None,
        status: None,
        what: what.to_owned(),
        detail: None,
        source: Some(Box::new(e)),
        outcome,
        retry_after: None,
        attempts: 1,
        tls,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_encode_segments_and_keep_a_base_path() {
        let c = Client::builder("http://127.0.0.1:7474/base/")
            .build()
            .unwrap();
        assert_eq!(
            c.endpoint(&["v1", "queues", "a b/c"]).as_str(),
            "http://127.0.0.1:7474/base/v1/queues/a%20b%2Fc"
        );
    }

    #[test]
    fn bad_options_are_refused_with_a_typed_error() {
        for url in ["", "ftp://x", "not a url", "http://x?q=1", "mailto:a@b"] {
            assert!(
                matches!(
                    Client::builder(url).build(),
                    Err(BuildError::InvalidUrl { .. })
                ),
                "{url}"
            );
        }
        assert!(matches!(
            Client::builder("http://x").token(" ").build(),
            Err(BuildError::InvalidToken(_))
        ));
        assert!(matches!(
            Client::builder("http://x").token("a\nb").build(),
            Err(BuildError::InvalidToken(_))
        ));
        assert!(matches!(
            Client::builder("http://x").timeout(Duration::ZERO).build(),
            Err(BuildError::InvalidOption {
                option: "timeout",
                ..
            })
        ));
        assert!(matches!(
            Client::builder("http://x").ca_pem("no pem here").build(),
            Err(BuildError::Trust(_))
        ));
        assert!(matches!(
            Client::builder("http://x")
                .retry(RetryOptions::new().max_retries(1_000))
                .build(),
            Err(BuildError::InvalidOption { .. })
        ));
    }

    #[test]
    fn a_client_is_debug_without_its_token() {
        let c = Client::builder("http://x")
            .token("rdt_secret")
            .build()
            .unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("rdt_secret"), "{shown}");
    }
}
