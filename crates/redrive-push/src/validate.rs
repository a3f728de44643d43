//! Endpoint validation: the abuse-protection handshake of the CloudEvents HTTP webhook
//! spec (§4), run when a push subscription is created so that a wrong or unwilling
//! endpoint is a clear, typed problem then rather than a stream of dead letters later.
//!
//! `OPTIONS <url>` with `WebHook-Request-Origin: <origin>` (and `WebHook-Request-Rate`
//! when asked); the endpoint agrees with a 2xx whose `WebHook-Allowed-Origin` is the
//! origin or `*`. If it sends an `Allow` header, that must include `POST`, the method
//! deliveries use. Asynchronous approval through `WebHook-Request-Callback` is not
//! offered.

use std::time::Duration;

use reqwest::header::{ALLOW, HeaderValue};

use crate::deliver::error_chain;
use crate::endpoint::{UrlError, check_url};

/// Names the sender asking for permission.
pub const REQUEST_ORIGIN: &str = "webhook-request-origin";
/// The rate (requests per minute) the sender would like.
pub const REQUEST_RATE: &str = "webhook-request-rate";
/// The origin the endpoint accepts (the requested one, or `*`).
pub const ALLOWED_ORIGIN: &str = "webhook-allowed-origin";
/// The rate the endpoint accepts (requests per minute, or `*`).
pub const ALLOWED_RATE: &str = "webhook-allowed-rate";

/// Why an endpoint was not validated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// The URL is not a push endpoint.
    #[error(transparent)]
    InvalidUrl(#[from] UrlError),
    /// The origin cannot be sent as a header value.
    #[error("the origin `{0}` is not a valid header value")]
    InvalidOrigin(String),
    /// No connection (refused, reset, DNS…).
    #[error("the endpoint is unreachable: {0}")]
    Unreachable(String),
    /// The TLS handshake failed or the endpoint's certificate was refused (what is wrong,
    /// in an operator's words: an untrusted issuer, a wrong name, an expiry).
    #[error("the endpoint's TLS was refused: {0}")]
    Tls(String),
    /// No answer within the timeout.
    #[error("the endpoint did not answer the validation request within {0:?}")]
    Timeout(Duration),
    /// A status other than 2xx.
    #[error("the endpoint answered the validation request with status {0}")]
    Status(u16),
    /// A 2xx without `WebHook-Allowed-Origin`: the endpoint did not agree.
    #[error("the endpoint's answer has no WebHook-Allowed-Origin header")]
    MissingAllowedOrigin,
    /// `WebHook-Allowed-Origin` names someone else.
    #[error("the endpoint allows origin `{allowed}`, not `{expected}`")]
    MismatchedAllowedOrigin {
        /// The origin we sent.
        expected: String,
        /// What the endpoint allows.
        allowed: String,
    },
    /// An `Allow` header without `POST`.
    #[error("the endpoint does not allow POST (Allow: {0})")]
    PostNotAllowed(String),
}

/// The rate an endpoint agreed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllowedRate {
    /// `*`.
    Unlimited,
    /// Requests per minute.
    PerMinute(u32),
}

/// What a successful handshake told us.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Validated {
    /// `WebHook-Allowed-Rate`, if the endpoint sent a valid one.
    pub allowed_rate: Option<AllowedRate>,
}

/// Runs the handshake against `url` on behalf of `origin`. Use a client that does not
/// follow redirects ([`crate::http_client`]): a redirect is then a `Status(3xx)`.
pub async fn validate_endpoint(
    client: &reqwest::Client,
    url: &str,
    origin: &str,
    timeout: Duration,
) -> Result<(), ValidationError> {
    validate_endpoint_with_rate(client, url, origin, None, timeout)
        .await
        .map(|_| ())
}

/// [`validate_endpoint`], asking for `rate` requests per minute and returning what the
/// endpoint allowed.
pub async fn validate_endpoint_with_rate(
    client: &reqwest::Client,
    url: &str,
    origin: &str,
    rate: Option<u32>,
    timeout: Duration,
) -> Result<Validated, ValidationError> {
    let url = check_url(url)?;
    let origin_value =
        HeaderValue::from_str(origin).map_err(|_| ValidationError::InvalidOrigin(origin.into()))?;
    let mut request = client
        .request(reqwest::Method::OPTIONS, url)
        .timeout(timeout)
        .header(REQUEST_ORIGIN, origin_value);
    if let Some(rate) = rate {
        request = request.header(REQUEST_RATE, rate.to_string());
    }
    let response = request.send().await.map_err(|e| {
        if e.is_timeout() {
            ValidationError::Timeout(timeout)
        } else if let Some(tls) = redrive_tls::tls_failure(&e) {
            ValidationError::Tls(tls.to_string())
        } else {
            ValidationError::Unreachable(error_chain(&e))
        }
    })?;
    let status = response.status();
    if !status.is_success() {
        return Err(ValidationError::Status(status.as_u16()));
    }
    let headers = response.headers();
    let allowed = headers
        .get(ALLOWED_ORIGIN)
        .ok_or(ValidationError::MissingAllowedOrigin)?;
    let allowed = String::from_utf8_lossy(allowed.as_bytes())
        .trim()
        .to_owned();
    if allowed != "*" && !allowed.eq_ignore_ascii_case(origin) {
        return Err(ValidationError::MismatchedAllowedOrigin {
            expected: origin.to_owned(),
            allowed,
        });
    }
    if let Some(allow) = headers.get(ALLOW) {
        let allow = String::from_utf8_lossy(allow.as_bytes()).into_owned();
        if !allow
            .split(',')
            .any(|m| m.trim().eq_ignore_ascii_case("POST"))
        {
            return Err(ValidationError::PostNotAllowed(allow));
        }
    }
    let allowed_rate = headers
        .get(ALLOWED_RATE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| match v.trim() {
            "*" => Some(AllowedRate::Unlimited),
            n => n
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .map(AllowedRate::PerMinute),
        });
    Ok(Validated { allowed_rate })
}
