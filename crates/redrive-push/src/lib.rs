//! The HTTP side of push delivery: validating an endpoint when a subscription is created,
//! POSTing CloudEvents to it, turning what happened into an
//! [`AttemptOutcome`](redrive_events::AttemptOutcome), batching, and bounding concurrency.
//! Independent of storage: the dispatcher that takes events from a subscription's queue,
//! calls [`Deliverer::deliver`] and schedules retries with
//! [`RetryPolicy::decide`](redrive_events::RetryPolicy::decide) on the injected clock
//! lives elsewhere.
//!
//! # Requests
//!
//! One event goes in the target's [`DeliveryMode`]: structured
//! (`application/cloudevents+json`, the whole event as JSON) or binary (the data as the
//! body, attributes as `ce-*` headers). A batching target
//! ([`PushTarget::max_events_per_batch`] > 1) always gets an
//! `application/cloudevents-batch+json` array (even of one event), which requires
//! structured mode: a binary target with batching is refused by [`PushTarget::validate`],
//! not at send time. Every request carries `redrive-subscription`,
//! `redrive-delivery-attempt` (1-based) and, when it holds one event, `redrive-event-id`,
//! plus the target's static headers.
//!
//! # Outcomes
//!
//! What [`Deliverer::deliver`] reports; what happens next is decided by redrive-events'
//! table ([`redrive_events::retry`]), not here.
//!
//! | what happened | [`AttemptOutcome`](redrive_events::AttemptOutcome) |
//! | --- | --- |
//! | any HTTP answer, 1xx to 5xx (a redirect is an answer: it is not followed) | `Status { status, retry_after_ms }` |
//! | … with `Retry-After: <seconds>` | `retry_after_ms` = seconds × 1000 |
//! | … with `Retry-After: <HTTP date>` | `retry_after_ms` = date − the response's `Date` (or the clock's now), at least 0 |
//! | no answer within the target's timeout | `Timeout` |
//! | the TLS handshake failed or the endpoint's certificate was refused (untrusted issuer, wrong name, expired) | `TlsError` |
//! | refused, reset, DNS failure, any other transport error | `ConnectionError` |
//! | the host is (or resolves only to) an address the [`NetworkPolicy`] forbids | `ConnectionError`, not sent |
//!
//! At most [`DeliverySettings::max_response_body_bytes`] (64 KiB) of a response body is
//! read, and discarded.
//!
//! # Layout
//! - [`endpoint`]: which URLs may be endpoints; the `host:port` endpoint key.
//! - [`validate`]: the CloudEvents webhook validation handshake.
//! - [`deliver`]: [`PushTarget`], [`Deliverer`] and the outcome of one attempt.
//! - [`retry_after`]: `Retry-After` and HTTP dates.
//! - [`chunk`](mod@chunk): batches bounded by event count and body bytes.
//! - [`limits`]: per-subscription and per-endpoint concurrency.
//! - [`network`]: which addresses requests may reach (public only, unless allowed).

pub mod chunk;
pub mod deliver;
pub mod endpoint;
pub mod limits;
pub mod network;
pub mod retry_after;
pub mod validate;

pub use chunk::{chunk, chunk_by, encoded_batch_body};
pub use deliver::{
    ATTEMPT_HEADER, Deliverer, Delivery, DeliveryMode, DeliverySettings, EVENT_ID_HEADER,
    EncodedEvent, PushTarget, SUBSCRIPTION_HEADER, TargetError, http_client,
};
pub use endpoint::{UrlError, check_url, endpoint_key};
pub use limits::ConcurrencyLimits;
pub use network::{Forbidden, GuardedResolver, NetworkError, NetworkPolicy};
pub use validate::{
    AllowedRate, Validated, ValidationError, validate_endpoint, validate_endpoint_with_rate,
};
