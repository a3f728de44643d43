//! One push attempt: the POST of one event (structured or binary mode) or of a batch, and
//! the [`AttemptOutcome`] it ended with.

use std::sync::Arc;
use std::time::Duration;

use redrive_core::Clock;
use redrive_events::cloudevent::{BATCH, STRUCTURED};
use redrive_events::{AttemptOutcome, CloudEvent};
use reqwest::header::{CONTENT_TYPE, HeaderName, HeaderValue};

use crate::chunk::{batch_body, encoded_batch_body};
use crate::endpoint::{UrlError, check_url};
use crate::network::{Forbidden, GuardedResolver, NetworkPolicy};
use crate::retry_after::retry_after_ms;

/// Names the subscription a request delivers for.
pub const SUBSCRIPTION_HEADER: &str = "redrive-subscription";
/// The attempt number (1-based) of this delivery.
pub const ATTEMPT_HEADER: &str = "redrive-delivery-attempt";
/// The event's id, on single-event requests.
pub const EVENT_ID_HEADER: &str = "redrive-event-id";

/// How a single event is put on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeliveryMode {
    /// `application/cloudevents+json`: the whole event in the body. The only mode that
    /// can batch.
    #[default]
    Structured,
    /// The data as the body, the attributes as `ce-*` headers.
    Binary,
}

/// Where and how a subscription's events are pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushTarget {
    /// The endpoint (see [`check_url`]).
    pub url: String,
    /// The subscription's name, sent as `redrive-subscription`.
    pub subscription: String,
    /// Structured or binary.
    pub mode: DeliveryMode,
    /// How long one attempt may take, from sending to the end of the response headers.
    pub timeout: Duration,
    /// Static extra headers (an API key, say). They cannot replace the headers this crate
    /// sets (see [`TargetError::ReservedHeader`]).
    pub headers: Vec<(String, String)>,
    /// Events per request: 1 means no batching; more requires structured mode.
    pub max_events_per_batch: usize,
}

/// A push target that cannot work, reported when the subscription is created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// The URL is not a push endpoint.
    #[error(transparent)]
    Url(#[from] UrlError),
    /// Batches are JSON arrays of structured events; binary mode carries one event.
    #[error("batching (max_events_per_batch {0}) requires structured delivery mode")]
    BatchingRequiresStructuredMode(usize),
    /// `max_events_per_batch` is 0.
    #[error("max_events_per_batch must be at least 1")]
    NoEventsPerBatch,
    /// A zero timeout.
    #[error("the delivery timeout must be positive")]
    ZeroTimeout,
    /// An extra header whose name or value is not valid HTTP.
    #[error("header `{0}` is not a valid HTTP header")]
    InvalidHeader(String),
    /// An extra header this crate sets itself (`content-type`, `ce-*`, `redrive-*`, …).
    #[error("header `{0}` is set by the broker and cannot be configured")]
    ReservedHeader(String),
}

fn is_reserved(name: &str) -> bool {
    const RESERVED: [&str; 7] = [
        "content-type",
        "content-length",
        "content-encoding",
        "transfer-encoding",
        "host",
        "connection",
        "te",
    ];
    RESERVED.contains(&name)
        || name.starts_with("ce-")
        || name.starts_with("redrive-")
        || name.starts_with("webhook-request-")
}

impl PushTarget {
    /// A single-event target with no extra headers.
    pub fn new(
        url: impl Into<String>,
        subscription: impl Into<String>,
        mode: DeliveryMode,
        timeout: Duration,
    ) -> Self {
        PushTarget {
            url: url.into(),
            subscription: subscription.into(),
            mode,
            timeout,
            headers: Vec::new(),
            max_events_per_batch: 1,
        }
    }

    /// Checks everything that would otherwise fail at send time: the URL, the batching
    /// and mode combination, the timeout and the extra headers.
    pub fn validate(&self) -> Result<(), TargetError> {
        check_url(&self.url)?;
        match (self.max_events_per_batch, self.mode) {
            (0, _) => return Err(TargetError::NoEventsPerBatch),
            (n, DeliveryMode::Binary) if n > 1 => {
                return Err(TargetError::BatchingRequiresStructuredMode(n));
            }
            _ => {}
        }
        if self.timeout.is_zero() {
            return Err(TargetError::ZeroTimeout);
        }
        if HeaderValue::from_str(&self.subscription).is_err() {
            return Err(TargetError::InvalidHeader(SUBSCRIPTION_HEADER.to_owned()));
        }
        for (name, value) in &self.headers {
            let parsed = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| TargetError::InvalidHeader(name.clone()))?;
            if is_reserved(parsed.as_str()) {
                return Err(TargetError::ReservedHeader(name.clone()));
            }
            HeaderValue::from_str(value).map_err(|_| TargetError::InvalidHeader(name.clone()))?;
        }
        Ok(())
    }
}

/// Settings of a [`Deliverer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliverySettings {
    /// How much of a response body is read (and discarded) so the connection can be
    /// reused; a longer body closes the connection instead.
    pub max_response_body_bytes: usize,
    /// The `User-Agent` of push requests.
    pub user_agent: String,
    /// Which private and special addresses requests may reach (none by default); see
    /// [`crate::network`].
    pub network: NetworkPolicy,
    /// Which certificates `https://` endpoints are trusted by: the platform's roots and
    /// any extra CA bundle ([`redrive_tls`]).
    pub trust: redrive_tls::Trust,
}

impl Default for DeliverySettings {
    fn default() -> Self {
        DeliverySettings {
            max_response_body_bytes: 64 * 1024,
            user_agent: concat!("redrive/", env!("CARGO_PKG_VERSION")).to_owned(),
            network: NetworkPolicy::default(),
            trust: redrive_tls::Trust::platform(),
        }
    }
}

/// An attempt's outcome with the error behind it, for the dead-letter evidence
/// ("last outcome").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// What [`redrive_events::RetryPolicy::decide`] judges.
    pub outcome: AttemptOutcome,
    /// For a timeout or connection error, what happened (the error chain).
    pub error: Option<String>,
}

/// An event already in structured form: its id and its JSON object as stored (what the
/// publisher sent, or what the broker encoded), sent without being parsed again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedEvent {
    /// The event's id (the `redrive-event-id` of a single-event request).
    pub id: String,
    /// The event's structured-mode JSON.
    pub json: Vec<u8>,
}

/// Sends push requests. Cheap to clone (the HTTP client and clock are shared handles).
#[derive(Clone)]
pub struct Deliverer {
    client: reqwest::Client,
    settings: DeliverySettings,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Deliverer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deliverer")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The HTTP client push delivery and endpoint validation expect: redirects are not
/// followed (a 3xx is an outcome of its own), no environment proxy is consulted, host
/// names resolve only to the addresses `settings.network` allows ([`GuardedResolver`]),
/// and `https://` endpoints must present a certificate `settings.trust` accepts.
/// IP-literal URLs are not resolved: check them with
/// [`NetworkPolicy::check_literal`] before sending, as [`Deliverer`] does.
pub fn http_client(settings: &DeliverySettings) -> Result<reqwest::Client, reqwest::Error> {
    settings
        .trust
        .client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(settings.user_agent.clone())
        .no_proxy()
        .dns_resolver(GuardedResolver::new(settings.network.clone()))
        .build()
}

impl Deliverer {
    /// A deliverer with its own client (see [`http_client`]). `clock` is the broker's
    /// clock: a `Retry-After` date is measured against it when the response has no `Date`.
    pub fn new(settings: DeliverySettings, clock: Arc<dyn Clock>) -> Result<Self, reqwest::Error> {
        let client = http_client(&settings)?;
        Ok(Deliverer::with_client(client, settings, clock))
    }

    /// A deliverer on a given client (which should not follow redirects).
    pub fn with_client(
        client: reqwest::Client,
        settings: DeliverySettings,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Deliverer {
            client,
            settings,
            clock,
        }
    }

    /// The client, to validate endpoints with the same settings.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// Delivers `events` to `target` as attempt number `attempt`; see [`Self::deliver_detailed`].
    pub async fn deliver(
        &self,
        target: &PushTarget,
        events: &[CloudEvent],
        attempt: u32,
    ) -> AttemptOutcome {
        self.deliver_detailed(target, events, attempt).await.outcome
    }

    /// Delivers `events` to `target` as attempt number `attempt`: a target batching
    /// (`max_events_per_batch` > 1) gets a batch array, even of one event; otherwise the
    /// one event goes in the target's mode. `target` is assumed
    /// [validated](PushTarget::validate) and the events [chunked](crate::chunk()) by its
    /// `max_events_per_batch`; several events for a non-batching target (a caller bug)
    /// still go out, as a batch. `redrive-event-id` is sent when the request holds one
    /// event. No events: nothing is sent and the outcome is a 204, since nothing was left
    /// to deliver. A request that cannot even be built (an event attribute that is not a
    /// valid header value in binary mode) is reported as `ConnectionError` with its error.
    pub async fn deliver_detailed(
        &self,
        target: &PushTarget,
        events: &[CloudEvent],
        attempt: u32,
    ) -> Delivery {
        if let Err(e) = self.settings.network.check_literal(&target.url) {
            return refused(&e);
        }
        let mut request = self.request(target, attempt);
        if let [event] = events {
            request = request.header(EVENT_ID_HEADER, &event.id);
        }
        // A batching subscription always gets arrays, even of one event, so that its
        // receiver sees one format.
        let batching = target.max_events_per_batch > 1 || events.len() > 1;
        request = match (events, target.mode) {
            ([], _) => return nothing_to_deliver(),
            (many, _) if batching => request.header(CONTENT_TYPE, BATCH).body(batch_body(many)),
            ([event, ..], DeliveryMode::Structured) => request
                .header(CONTENT_TYPE, STRUCTURED)
                .body(serde_json::to_vec(&event.to_json()).unwrap_or_default()),
            ([event, ..], DeliveryMode::Binary) => {
                let (headers, body) = event.to_binary();
                for (name, value) in headers {
                    request = request.header(name, value);
                }
                request.body(body)
            }
        };
        self.send(request, target.timeout).await
    }

    /// Delivers events already in structured form, as stored, to a structured `target`:
    /// one event's JSON is the body as it is; a batching target (or several events) gets
    /// `[` + the events' JSON joined by `,` + `]` (see [`encoded_batch_body`]). Nothing is
    /// parsed or re-encoded. The headers and outcomes are those of
    /// [`Self::deliver_detailed`]. A binary target needs the parsed event: use
    /// [`Self::deliver_detailed`] for it (here, binary is treated as structured).
    pub async fn deliver_encoded(
        &self,
        target: &PushTarget,
        mut events: Vec<EncodedEvent>,
        attempt: u32,
    ) -> Delivery {
        if let Err(e) = self.settings.network.check_literal(&target.url) {
            return refused(&e);
        }
        let mut request = self.request(target, attempt);
        if let [event] = events.as_slice() {
            request = request.header(EVENT_ID_HEADER, &event.id);
        }
        let batching = target.max_events_per_batch > 1 || events.len() > 1;
        request = match events.len() {
            0 => return nothing_to_deliver(),
            _ if batching => request
                .header(CONTENT_TYPE, BATCH)
                .body(encoded_batch_body(&events)),
            _ => {
                let json = std::mem::take(&mut events[0].json);
                request.header(CONTENT_TYPE, STRUCTURED).body(json)
            }
        };
        self.send(request, target.timeout).await
    }

    /// The POST with the headers every push request carries.
    fn request(&self, target: &PushTarget, attempt: u32) -> reqwest::RequestBuilder {
        let mut request = self
            .client
            .post(&target.url)
            .header(SUBSCRIPTION_HEADER, &target.subscription)
            .header(ATTEMPT_HEADER, attempt.to_string());
        for (name, value) in &target.headers {
            request = request.header(name, value);
        }
        request
    }

    /// Sends `request` and classifies what happened. The timeout covers the whole
    /// exchange (connect, request, answer, bounded body) and reads the injected clock, like
    /// every other timing rule.
    async fn send(&self, request: reqwest::RequestBuilder, timeout: Duration) -> Delivery {
        let deadline = self.clock.now().plus(timeout);
        tokio::select! {
            d = self.exchange(request) => d,
            () = self.clock.sleep_until(deadline) => Delivery {
                outcome: AttemptOutcome::Timeout,
                error: Some(format!(
                    "no answer within the delivery timeout of {} ms",
                    timeout.as_millis()
                )),
            },
        }
    }

    /// Sends a built request and reads its answer.
    async fn exchange(&self, request: reqwest::RequestBuilder) -> Delivery {
        match request.send().await {
            Ok(mut response) => {
                let status = response.status().as_u16();
                let retry_after_ms = retry_after_ms(response.headers(), self.clock.now());
                // Read (and drop) a bounded body; errors or a slow body change nothing:
                // the status is the answer.
                let mut read = 0usize;
                while read < self.settings.max_response_body_bytes {
                    match response.chunk().await {
                        Ok(Some(bytes)) => read += bytes.len(),
                        Ok(None) | Err(_) => break,
                    }
                }
                Delivery {
                    outcome: AttemptOutcome::Status {
                        status,
                        retry_after_ms,
                    },
                    error: None,
                }
            }
            Err(e) => Delivery {
                outcome: transport_outcome(&e),
                error: Some(error_chain(&e)),
            },
        }
    }
}

/// The outcome of a request that got no answer: a timeout, a TLS failure (handshake or
/// certificate) or any other connection failure.
fn transport_outcome(e: &reqwest::Error) -> AttemptOutcome {
    if e.is_timeout() {
        AttemptOutcome::Timeout
    } else if redrive_tls::tls_failure(e).is_some() {
        AttemptOutcome::TlsError
    } else {
        AttemptOutcome::ConnectionError
    }
}

/// No events: nothing is sent, and the outcome is a 204 since nothing was left to deliver.
fn nothing_to_deliver() -> Delivery {
    Delivery {
        outcome: AttemptOutcome::Status {
            status: 204,
            retry_after_ms: None,
        },
        error: None,
    }
}

/// A request to a forbidden address, not sent: a connection error with the reason.
fn refused(e: &Forbidden) -> Delivery {
    Delivery {
        outcome: AttemptOutcome::ConnectionError,
        error: Some(format!("not connecting: {e}")),
    }
}

/// An error and its sources, `a: b: c`, led by what is wrong when it is a TLS failure
/// ([`redrive_tls::explain`]).
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    redrive_tls::explain(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> PushTarget {
        PushTarget::new(
            "http://example.com/hook",
            "orders-push",
            DeliveryMode::Structured,
            Duration::from_secs(30),
        )
    }

    #[test]
    fn batching_requires_structured_mode() {
        let mut t = target();
        t.max_events_per_batch = 10;
        assert_eq!(t.validate(), Ok(()));
        t.mode = DeliveryMode::Binary;
        assert_eq!(
            t.validate(),
            Err(TargetError::BatchingRequiresStructuredMode(10))
        );
        t.max_events_per_batch = 1;
        assert_eq!(t.validate(), Ok(()));
        t.max_events_per_batch = 0;
        assert_eq!(t.validate(), Err(TargetError::NoEventsPerBatch));
    }

    #[test]
    fn targets_are_checked_up_front() {
        let mut t = target();
        t.url = "ftp://example.com".into();
        assert!(matches!(
            t.validate(),
            Err(TargetError::Url(UrlError::Scheme(_)))
        ));
        let mut t = target();
        t.timeout = Duration::ZERO;
        assert_eq!(t.validate(), Err(TargetError::ZeroTimeout));
        for reserved in ["Content-Type", "ce-id", "redrive-delivery-attempt", "Host"] {
            let mut t = target();
            t.headers = vec![(reserved.into(), "x".into())];
            assert_eq!(
                t.validate(),
                Err(TargetError::ReservedHeader(reserved.into())),
                "{reserved}"
            );
        }
        let mut t = target();
        t.headers = vec![("bad name".into(), "x".into())];
        assert!(matches!(t.validate(), Err(TargetError::InvalidHeader(_))));
        let mut t = target();
        t.headers = vec![("x-api-key".into(), "line\nbreak".into())];
        assert!(matches!(t.validate(), Err(TargetError::InvalidHeader(_))));
        let mut t = target();
        t.headers = vec![("x-api-key".into(), "secret".into())];
        assert_eq!(t.validate(), Ok(()));
    }
}
