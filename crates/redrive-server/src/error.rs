//! The one API error type at the HTTP edge: every failure becomes an RFC 9457
//! `application/problem+json` response with a stable code. Client faults say exactly what
//! was wrong; server faults are logged in full and answered with a generic body.
//!
//! Also holds the request extractors whose rejections use the same format, so malformed
//! input gets a problem document too.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use redrive_api::problem::PROBLEM_JSON;
use redrive_api::{ErrorCode, Problem};
use redrive_broker::{BrokerError, Storage};
use serde::de::DeserializeOwned;

/// An error response.
#[derive(Debug)]
pub struct ApiError(pub Box<Problem>);

impl ApiError {
    /// A problem with `code` and a detail.
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        ApiError(Box::new(Problem::new(code, detail)))
    }
}

impl From<Problem> for ApiError {
    fn from(p: Problem) -> Self {
        ApiError(Box::new(p))
    }
}

/// The problem document for a broker error. Shared by single and batch responses.
pub fn problem_for(e: &BrokerError) -> Problem {
    use ErrorCode as C;
    match e {
        BrokerError::InvalidName(n) => Problem::new(C::InvalidName, n.to_string()),
        BrokerError::InvalidPolicy(p) => {
            Problem::new(C::InvalidPolicy, p.to_string()).with("field", p.field)
        }
        BrokerError::InvalidRequest { field, why } => {
            Problem::new(C::InvalidRequest, format!("invalid `{field}`: {why}"))
                .with("field", field.as_str())
        }
        BrokerError::MessageTooLarge { size, limit, .. } => {
            Problem::new(C::MessageTooLarge, e.to_string())
                .with("size", *size)
                .with("limit", *limit)
        }
        BrokerError::ShuttingDown => Problem::new(C::ShuttingDown, e.to_string()),
        BrokerError::Unauthenticated(why) => Problem::new(C::Unauthenticated, why.as_str()),
        BrokerError::Forbidden {
            operation,
            needs,
            entity,
        } => {
            let p = Problem::new(C::Forbidden, e.to_string())
                .with("operation", operation.as_str())
                .with("needs", needs.as_str());
            match entity {
                Some(en) => p.with("entity", en.as_str()),
                None => p,
            }
        }
        BrokerError::RateLimited { retry_after_ms } => {
            Problem::new(C::RateLimited, e.to_string()).with("retry_after_ms", *retry_after_ms)
        }
        BrokerError::TokenRevoked => Problem::new(C::TokenRevoked, e.to_string()),
        BrokerError::InvalidEvent { index, why } => {
            Problem::new(C::InvalidEvent, format!("event {index} is invalid: {why}"))
                .with("index", *index)
                .with("reason", why.as_str())
        }
        BrokerError::EventTooLarge {
            index, size, limit, ..
        } => Problem::new(C::EventTooLarge, e.to_string())
            .with("index", *index)
            .with("size", *size)
            .with("limit", *limit),
        BrokerError::EndpointValidationFailed { endpoint, why } => {
            Problem::new(C::EndpointValidationFailed, e.to_string())
                .with("endpoint", endpoint.as_str())
                .with("reason", why.as_str())
        }
        BrokerError::EndpointForbidden { endpoint, why } => {
            Problem::new(C::EndpointForbidden, e.to_string())
                .with("endpoint", endpoint.as_str())
                .with("reason", why.as_str())
        }
        BrokerError::DeadLetterDestinationRequired => {
            Problem::new(C::DeadLetterDestinationRequired, e.to_string())
        }
        BrokerError::DeadLetterNotQuarantined { id, area } => {
            Problem::new(C::DeadLetterNotQuarantined, e.to_string())
                .with("id", id.as_str())
                .with("area", area.as_str())
        }
        BrokerError::QueueIsDeadLetterTarget { queue, dependants } => {
            Problem::new(C::QueueIsDeadLetterTarget, e.to_string())
                .with("queue", queue.as_str())
                .with("dependants", dependants.clone())
        }
        BrokerError::CaseConflict { code, owner, .. } => {
            let p = Problem::new(C::CaseConflict, e.to_string()).with("reason", code.as_str());
            match owner {
                Some(o) => p.with("owner", o.as_str()),
                None => p,
            }
        }
        BrokerError::RedeliveryRefused(r) => {
            let mut p = Problem::new(C::RedeliveryRefused, e.to_string())
                .with("reason", r.code.as_str())
                .with("case_id", r.case_id.as_str())
                .with("operation", r.operation.as_str());
            for (k, v) in [
                ("state", &r.state),
                ("message_id", &r.message_id),
                ("owner", &r.owner),
            ] {
                if let Some(v) = v {
                    p = p.with(k, v.as_str());
                }
            }
            p
        }
        BrokerError::PlanConflict { code, .. } => {
            Problem::new(C::PlanConflict, e.to_string()).with("reason", code.as_str())
        }
        BrokerError::FailingPath {
            destination,
            reason,
            window_ms,
            clears_at,
            ..
        } => Problem::new(C::PlanConflict, e.to_string())
            .with("reason", "destination_invalid")
            .with("destination", destination.as_str())
            .with("dead_letter_reason", reason.as_str())
            .with("window_ms", *window_ms)
            .with("clears_at", clears_at.to_rfc3339()),
        BrokerError::ReplayUnbounded { missing } => {
            Problem::new(C::ReplayUnbounded, e.to_string()).with("missing", missing.clone())
        }
        _ => match e.storage() {
            Some(s) => problem_for_storage(e, s),
            None => internal(e),
        },
    }
}

fn problem_for_storage(e: &BrokerError, s: Storage) -> Problem {
    use ErrorCode as C;
    let code = match s {
        Storage::QueueNotFound { .. } => C::QueueNotFound,
        Storage::QueueExists => C::QueueExists,
        Storage::QueueNotEmpty {
            messages,
            dead_letters,
        } => {
            return Problem::new(
                C::QueueNotEmpty,
                format!("{e}; delete with force=true to remove them"),
            )
            .with("messages", messages)
            .with("dead_letters", dead_letters);
        }
        Storage::VersionConflict { expected, actual } => {
            return Problem::new(C::VersionConflict, e.to_string())
                .with("expected_version", expected)
                .with("actual_version", actual);
        }
        Storage::MessageNotFound => C::MessageNotFound,
        Storage::TopicNotFound => C::TopicNotFound,
        Storage::TopicExists => C::TopicExists,
        Storage::TopicHasSubscriptions { subscriptions } => {
            return Problem::new(
                C::TopicHasSubscriptions,
                format!("{e}; delete with force=true to delete them and their events"),
            )
            .with("subscriptions", subscriptions);
        }
        Storage::SubscriptionNotFound => C::SubscriptionNotFound,
        Storage::SubscriptionExists => C::SubscriptionExists,
        Storage::SubscriptionNotEmpty { messages } => {
            return Problem::new(
                C::SubscriptionNotEmpty,
                format!("{e}; delete with force=true to discard them"),
            )
            .with("messages", messages);
        }
        Storage::TokenExists => C::TokenExists,
        Storage::TokenNotFound => C::TokenNotFound,
        Storage::LockLost => C::LockLost,
        Storage::SessionRequired => C::SessionRequired,
        Storage::SessionNotAllowed => C::SessionNotAllowed,
        Storage::SessionLocked => C::SessionLocked,
        Storage::SessionLockLost => C::SessionLockLost,
        Storage::DeadLetterNotFound => C::DeadLetterNotFound,
        Storage::DeadLetterTargetMissing => C::DeadLetterTargetMissing,
        Storage::DeadLetterUndecodable { id, reason } => {
            return Problem::new(C::DeadLetterUndecodable, e.to_string())
                .with("dead_letter_id", id)
                .with("reason", reason);
        }
        Storage::CaseNotFound => C::CaseNotFound,
        Storage::CaseGroupNotFound => C::CaseGroupNotFound,
        Storage::CaseChanged => {
            return Problem::new(C::CaseConflict, e.to_string()).with("reason", "case_changed");
        }
        Storage::TimelineFull => {
            return Problem::new(C::CaseConflict, e.to_string()).with("reason", "timeline_full");
        }
        Storage::ReplayPlanNotFound => C::ReplayPlanNotFound,
        // Another writer changed the plan, or holds an item's case: retry.
        Storage::PlanBusy => {
            return Problem::new(C::PlanConflict, e.to_string()).with("reason", "plan_busy");
        }
        Storage::Unavailable => {
            tracing::warn!(error = %e, "storage unavailable");
            return Problem::new(C::Unavailable, "storage is temporarily unavailable; retry");
        }
        Storage::Poisoned => {
            tracing::error!(error = %e, "storage poisoned");
            return Problem::new(
                C::Unavailable,
                "storage stopped accepting writes after a failed commit; the server needs a restart",
            );
        }
        _ => return internal(e),
    };
    Problem::new(code, e.to_string())
}

fn internal(e: &dyn std::error::Error) -> Problem {
    let mut chain = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        chain.push_str(": ");
        chain.push_str(&s.to_string());
        src = s.source();
    }
    tracing::error!(error = %chain, "internal error");
    Problem::new(
        ErrorCode::Internal,
        "an internal error occurred; see the server log",
    )
}

impl From<BrokerError> for ApiError {
    fn from(e: BrokerError) -> Self {
        ApiError(Box::new(problem_for(&e)))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        problem_response(&self.0)
    }
}

/// Renders a problem as a response (with `Retry-After` on 503 and 429).
pub fn problem_response(p: &Problem) -> Response {
    let status = StatusCode::from_u16(p.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = serde_json::to_vec(p).unwrap_or_else(|_| b"{}".to_vec());
    let mut resp = (status, body).into_response();
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    if status == StatusCode::SERVICE_UNAVAILABLE {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if status == StatusCode::TOO_MANY_REQUESTS {
        let ms = p
            .extra
            .get("retry_after_ms")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(1_000);
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(ms.div_ceil(1_000).max(1)),
        );
    }
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"redrive\""),
        );
    }
    resp
}

/// A JSON body whose every rejection is a problem document. The media type is checked by
/// the native API's guard (a body must be `application/json`); here the body is read
/// (a stalled read is a 408), then parsed as `T` by [`read_body`].
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = body_bytes(req, state).await?;
        read_body(&bytes).map(ApiJson)
    }
}

/// [`ApiJson`] for a body that may be left out: an empty body reads as `T::default()`.
pub struct OptionalApiJson<T>(pub T);

impl<T: DeserializeOwned + Default, S: Send + Sync> FromRequest<S> for OptionalApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = body_bytes(req, state).await?;
        if bytes.is_empty() {
            return Ok(OptionalApiJson(T::default()));
        }
        read_body(&bytes).map(OptionalApiJson)
    }
}

/// The whole body, within the route's limit (a larger one is a 413); a stalled read is a
/// 408.
async fn body_bytes<S: Send + Sync>(
    req: Request,
    state: &S,
) -> Result<axum::body::Bytes, ApiError> {
    axum::body::Bytes::from_request(req, state)
        .await
        .map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(ErrorCode::MessageTooLarge, "the request body is too large")
            } else if caused_by_timeout(&e) {
                ApiError::new(
                    ErrorCode::RequestTimeout,
                    "the request body did not arrive in time",
                )
            } else {
                ApiError::new(
                    ErrorCode::MalformedBody,
                    format!("could not read the body: {e}"),
                )
            }
        })
}

/// The whole body of `req` if it is at most `limit` bytes, refused (413
/// `message_too_large`, with `limit`) by its `Content-Length` before a byte is read, or as
/// soon as more arrives than the limit; a stalled read is a 408. For routes whose bound
/// depends on what the request names (a case's transformation, bounded by its queue).
pub async fn body_within(req: Request, limit: usize) -> Result<axum::body::Bytes, ApiError> {
    let too_large = || {
        ApiError::from(
            Problem::new(
                ErrorCode::MessageTooLarge,
                format!("the request body is larger than this route takes ({limit} bytes)"),
            )
            .with("limit", limit as u64),
        )
    };
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut body = req.into_body();
    let mut out = Vec::new();
    loop {
        let frame = std::future::poll_fn(|cx| {
            http_body::Body::poll_frame(std::pin::Pin::new(&mut body), cx)
        })
        .await;
        match frame {
            None => break,
            Some(Ok(f)) => {
                if let Ok(data) = f.into_data() {
                    if out.len() + data.len() > limit {
                        return Err(too_large());
                    }
                    out.extend_from_slice(&data);
                }
            }
            Some(Err(e)) => {
                return Err(if caused_by_timeout(&e) {
                    ApiError::new(
                        ErrorCode::RequestTimeout,
                        "the request body did not arrive in time",
                    )
                } else {
                    ApiError::new(
                        ErrorCode::MalformedBody,
                        format!("could not read the body: {e}"),
                    )
                });
            }
        }
    }
    Ok(out.into())
}

/// Reads a request body as `T` in one pass that also refuses an object with the same key
/// twice (after unescaping), which serde would accept, keeping the last (see
/// [`redrive_events::json::from_slice`]). The body must be a JSON object.
pub fn read_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.is_empty() {
        return Err(ApiError::new(
            ErrorCode::MalformedBody,
            "the request body is empty; a JSON document is expected",
        ));
    }
    reject_non_object(bytes)?;
    redrive_events::json::from_slice_at(bytes).map_err(|(field, e)| {
        if field.is_empty() {
            return ApiError::new(ErrorCode::MalformedBody, format!("invalid JSON body: {e}"));
        }
        // A value of the wrong type (or shape) is named by its field.
        ApiError::from(
            Problem::new(
                ErrorCode::MalformedBody,
                format!("invalid JSON body: {field:?}: {e}"),
            )
            .with("field", field),
        )
    })
}

/// Every request body of the native API is a JSON object: serde would also read a struct
/// from an array of its fields in order (`[null, null]`), which no client means.
fn reject_non_object(bytes: &[u8]) -> Result<(), ApiError> {
    match bytes.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Ok(()),
        _ => Err(ApiError::new(
            ErrorCode::MalformedBody,
            "the request body must be a JSON object",
        )),
    }
}

fn caused_by_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.is::<crate::BodyReadTimeout>() {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Reads a JSON value as `T`, with the problem document naming what did not fit.
pub fn from_json<T: DeserializeOwned>(v: serde_json::Value) -> Result<T, ApiError> {
    serde_json::from_value(v)
        .map_err(|e| ApiError::new(ErrorCode::MalformedBody, format!("invalid JSON body: {e}")))
}

/// Query parameters whose rejection is a problem document.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| ApiQuery(q.0))
            .map_err(|e| {
                ApiError::new(
                    ErrorCode::InvalidRequest,
                    format!("invalid query: {}", e.body_text()),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_must_be_json_objects() {
        assert!(reject_non_object(b" \n{}").is_ok());
        let e = read_body::<serde_json::Value>(b"")
            .err()
            .map(|e| e.0.code.clone());
        assert_eq!(e.as_deref(), Some("malformed_body"));
        for bad in [&b"[null, null]"[..], b"1", b"\"x\"", b"null", b"  [{}]"] {
            let e = reject_non_object(bad).err().map(|e| e.0.code.clone());
            assert_eq!(e.as_deref(), Some("malformed_body"));
        }
    }

    #[test]
    fn a_value_of_the_wrong_type_is_named_by_its_field() {
        let e = read_body::<redrive_api::queue::CreateQueue>(
            br#"{"name":"q","policy":{"max_delivery_count":"ten"}}"#,
        )
        .expect_err("refused");
        assert_eq!(e.0.code, "malformed_body");
        assert_eq!(
            e.0.extra.get("field"),
            Some(&serde_json::json!("policy.max_delivery_count"))
        );
        let detail = e.0.detail.unwrap_or_default();
        assert!(
            detail.starts_with(r#"invalid JSON body: "policy.max_delivery_count": invalid type: string "ten", expected u32"#),
            "{detail}"
        );
        // Broken JSON has no field to name: its position is enough.
        let e =
            read_body::<redrive_api::queue::CreateQueue>(br#"{"name":"q","#).expect_err("refused");
        assert!(!e.0.extra.contains_key("field"), "{:?}", e.0);
        assert!(e.0.detail.unwrap_or_default().contains("line 1"));
    }

    #[test]
    fn duplicate_keys_are_refused_at_any_depth_and_after_unescaping() {
        let read = |b: &[u8]| read_body::<serde_json::Value>(b);
        assert!(read(br#"{"a":1,"b":[{"a":2}],"c":{"a":3}}"#).is_ok());
        for bad in [
            &br#"{"a":1,"a":2}"#[..],
            br#"{"x":[{"k":1,"k":1}]}"#,
            br#"{"a":1,"\u0061":2}"#,
        ] {
            let e = read(bad).err().map(|e| e.0.code.clone());
            assert_eq!(e.as_deref(), Some("malformed_body"));
        }
        // A typed body: also inside what the type ignores.
        let e = read_body::<redrive_api::message::ReceiveRequest>(
            br#"{"max_messages":1,"max_messages":2}"#,
        );
        let detail = e.err().and_then(|e| e.0.detail.clone()).unwrap_or_default();
        assert!(detail.contains("duplicate key `max_messages`"), "{detail}");
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(10_000), "]".repeat(10_000));
        let e = read(deep.as_bytes()).err().map(|e| e.0.code.clone());
        assert_eq!(e.as_deref(), Some("malformed_body"));
    }

    #[test]
    fn the_failing_path_refusal_says_when_it_clears() {
        let p = problem_for(&BrokerError::FailingPath {
            destination: "orders".into(),
            reason: "ParseError".into(),
            window_ms: 300_000,
            clears_at: redrive_core::Timestamp(1_240_000),
            clears_in_ms: 239_001,
        });
        assert_eq!((p.status, p.code.as_str()), (409, "plan_conflict"));
        assert_eq!(
            p.detail.as_deref(),
            Some(
                "the destination orders is the failing path: it dead-lettered ParseError within \
                 the last 300 s, and replaying there would repeat the failure; it clears at \
                 1970-01-01T00:20:40.000Z (in 240 s)"
            )
        );
        let extra = serde_json::Value::Object(p.extra);
        assert_eq!(
            extra,
            serde_json::json!({"reason": "destination_invalid", "destination": "orders",
                               "dead_letter_reason": "ParseError", "window_ms": 300_000,
                               "clears_at": "1970-01-01T00:20:40.000Z"})
        );
    }

    #[test]
    fn an_unavailable_store_is_a_503_with_retry_after_and_no_internals() {
        let e = BrokerError::Store(redrive_store::StoreError::unavailable(
            std::io::Error::other("connection to 10.0.0.1 refused"),
        ));
        let resp = ApiError::from(e).into_response();
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        assert_eq!(resp.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
        let p = problem_for(&BrokerError::Store(redrive_store::StoreError::unavailable(
            std::io::Error::other("connection to 10.0.0.1 refused"),
        )));
        assert_eq!(p.code, "unavailable");
        assert!(!p.detail.unwrap_or_default().contains("10.0.0.1"));
        let poisoned = problem_for(&BrokerError::Store(redrive_store::StoreError::Poisoned));
        assert_eq!(
            (poisoned.status, poisoned.code.as_str()),
            (503, "unavailable")
        );
    }
}
