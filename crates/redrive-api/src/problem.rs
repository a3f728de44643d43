//! RFC 9457 problem details and redrive's error codes.
//!
//! The codes are a contract: a code is never renamed or reused. A retired code stays in
//! [`ErrorCode`] marked as retired.

use serde::{Deserialize, Serialize};

/// Media type of error responses.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 9457 problem document. `code` is redrive's stable machine-readable code;
/// `type` is a URI built from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Problem {
    /// `https://redrive.dev/problems/<code>`.
    #[serde(rename = "type")]
    pub type_uri: String,
    /// Short summary of the problem type.
    pub title: String,
    /// HTTP status.
    pub status: u16,
    /// What exactly was wrong with this request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The stable code.
    pub code: String,
    /// Extra machine-readable facts (the limit that was exceeded, the field at fault…).
    #[serde(flatten, default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

macro_rules! codes {
    ($( $(#[$m:meta])* $v:ident = ($code:literal, $status:literal, $title:literal) ),+ $(,)?) => {
        /// Every error code redrive answers with.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorCode { $( $(#[$m])* $v ),+ }

        impl ErrorCode {
            /// Every code, for documentation and tests.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$v),+];

            /// The stable code string.
            pub fn as_str(self) -> &'static str { match self { $(ErrorCode::$v => $code),+ } }

            /// The HTTP status it is sent with.
            pub fn status(self) -> u16 { match self { $(ErrorCode::$v => $status),+ } }

            /// The problem type's title.
            pub fn title(self) -> &'static str { match self { $(ErrorCode::$v => $title),+ } }

            /// The code for a code string.
            pub fn from_code(s: &str) -> Option<ErrorCode> {
                match s { $($code => Some(ErrorCode::$v),)+ _ => None }
            }
        }
    };
}

codes! {
    /// The request body is not valid JSON, or not the expected shape.
    MalformedBody = ("malformed_body", 400, "Malformed request body"),
    /// A field has a value outside its rules.
    InvalidRequest = ("invalid_request", 400, "Invalid request"),
    /// An entity name breaks the naming rule.
    InvalidName = ("invalid_name", 400, "Invalid name"),
    /// A queue policy breaks a rule.
    InvalidPolicy = ("invalid_policy", 400, "Invalid queue policy"),
    /// A message body is larger than the queue allows.
    MessageTooLarge = ("message_too_large", 413, "Message too large"),
    /// The queue requires a session id.
    SessionRequired = ("session_required", 400, "Session required"),
    /// The queue does not use sessions.
    SessionNotAllowed = ("session_not_allowed", 400, "Sessions not enabled"),
    /// No such queue.
    QueueNotFound = ("queue_not_found", 404, "Queue not found"),
    /// No such message (in the state the operation needs).
    MessageNotFound = ("message_not_found", 404, "Message not found"),
    /// No such dead-letter record.
    DeadLetterNotFound = ("dead_letter_not_found", 404, "Dead letter not found"),
    /// No such route.
    NotFound = ("not_found", 404, "Not found"),
    /// The method is not allowed on this route.
    MethodNotAllowed = ("method_not_allowed", 405, "Method not allowed"),
    /// A queue of that name exists already.
    QueueExists = ("queue_exists", 409, "Queue already exists"),
    /// Delete of a non-empty queue without force.
    QueueNotEmpty = ("queue_not_empty", 409, "Queue not empty"),
    /// The policy version is not the expected one.
    VersionConflict = ("version_conflict", 409, "Policy version conflict"),
    /// The lock expired or the message was already settled.
    LockLost = ("lock_lost", 409, "Lock lost"),
    /// Another receiver holds the session.
    SessionLocked = ("session_locked", 409, "Session locked"),
    /// The session lock expired or was released.
    SessionLockLost = ("session_lock_lost", 409, "Session lock lost"),
    /// The queue's dead-letter queue does not exist.
    DeadLetterTargetMissing = ("dead_letter_target_missing", 409, "Dead-letter target missing"),
    /// The dead-letter record's stored row cannot be read by this build (a value outside
    /// its column's domain); nothing changed. Fix or remove the row (docs/operations.md).
    DeadLetterUndecodable = ("dead_letter_undecodable", 409, "Dead letter cannot be read"),
    /// The request's media type is not accepted.
    UnsupportedMediaType = ("unsupported_media_type", 415, "Unsupported media type"),
    /// Storage is busy or unreachable; retry after the `Retry-After` delay.
    Unavailable = ("unavailable", 503, "Service unavailable"),
    /// The server is shutting down.
    ShuttingDown = ("shutting_down", 503, "Shutting down"),
    /// No such topic.
    TopicNotFound = ("topic_not_found", 404, "Topic not found"),
    /// A topic of that name exists already.
    TopicExists = ("topic_exists", 409, "Topic already exists"),
    /// Delete of a topic that has subscriptions, without force.
    TopicHasSubscriptions = ("topic_has_subscriptions", 409, "Topic has subscriptions"),
    /// No such subscription.
    SubscriptionNotFound = ("subscription_not_found", 404, "Subscription not found"),
    /// A subscription of that name exists already on the topic.
    SubscriptionExists = ("subscription_exists", 409, "Subscription already exists"),
    /// Delete of a subscription holding undelivered events, without force.
    SubscriptionNotEmpty = ("subscription_not_empty", 409, "Subscription not empty"),
    /// An event is not a valid CloudEvent; the whole request was refused.
    InvalidEvent = ("invalid_event", 400, "Invalid event"),
    /// An event is larger than the topic allows.
    EventTooLarge = ("event_too_large", 413, "Event too large"),
    /// A push endpoint did not pass the webhook validation handshake.
    EndpointValidationFailed = ("endpoint_validation_failed", 400, "Endpoint validation failed"),
    /// A push endpoint is an address push requests may not reach (loopback, private,
    /// link-local, metadata…) and the operator did not allow it.
    EndpointForbidden = ("endpoint_forbidden", 400, "Endpoint forbidden"),
    /// A push subscription needs a dead-letter destination or an explicit drop.
    DeadLetterDestinationRequired = ("dead_letter_destination_required", 400, "Dead-letter destination required"),
    /// No valid API token: missing, malformed, unknown, revoked or expired.
    Unauthenticated = ("unauthenticated", 401, "Authentication required"),
    /// The token's grants do not permit the operation on the entity.
    Forbidden = ("forbidden", 403, "Forbidden"),
    /// The token is over its request rate; retry after the `Retry-After` delay.
    RateLimited = ("rate_limited", 429, "Too many requests"),
    /// The token was revoked while the request (a long poll) ran.
    TokenRevoked = ("token_revoked", 401, "Token revoked"),
    /// A token with that name exists (among tokens not revoked).
    TokenExists = ("token_exists", 409, "Token already exists"),
    /// No such token.
    TokenNotFound = ("token_not_found", 404, "Token not found"),
    /// No idempotency register entry with that key.
    RegisterEntryNotFound = ("register_entry_not_found", 404, "Register entry not found"),
    /// The request is not well-formed HTTP for this API: conflicting framing headers,
    /// a path that is not UTF-8 once decoded, a missing `Host`.
    MalformedRequest = ("malformed_request", 400, "Malformed request"),
    /// The `Host` header names neither this server's listen address nor an allowed host.
    MisdirectedRequest = ("misdirected_request", 421, "Misdirected request"),
    /// The request's header section or body did not arrive in time.
    RequestTimeout = ("request_timeout", 408, "Request timeout"),
    /// The request target is longer than the server reads.
    UriTooLong = ("uri_too_long", 414, "URI too long"),
    /// The request's header section is larger than the server reads.
    HeadersTooLarge = ("headers_too_large", 431, "Request header fields too large"),
    /// A restore of a dead letter that is not in the quarantine area.
    DeadLetterNotQuarantined = ("dead_letter_not_quarantined", 409, "Dead letter not quarantined"),
    /// A delete (without force) of a queue that others name as their dead-letter target.
    QueueIsDeadLetterTarget = ("queue_is_dead_letter_target", 409, "Queue is a dead-letter target"),
    /// A replay plan that leaves a budget limit out: an unbounded replay is refused
    /// (`missing` names the fields).
    ReplayUnbounded = ("replay_unbounded", 400, "Unbounded replay"),
    /// No effect authority is registered for that message type.
    EffectAuthorityNotFound = ("effect_authority_not_found", 404, "Effect authority not found"),
    /// No recovery case with that id.
    CaseNotFound = ("case_not_found", 404, "Case not found"),
    /// No case group with that id.
    CaseGroupNotFound = ("case_group_not_found", 404, "Case group not found"),
    /// A case operation its state refuses; `reason` says which (`case_claimed` with
    /// `owner`, `not_case_owner`, `case_closed`, `case_not_eligible`, `case_not_due`,
    /// `intent_decided`, `no_effect_authority`, `no_correction`, `payload_gone`,
    /// `case_state`, `case_changed`, `case_busy`, `timeline_full`). Nothing changed.
    CaseConflict = ("case_conflict", 409, "Case conflict"),
    /// A delivery of a dead letter again by hand (resubmit, move to live, restore, import,
    /// a message move task) that its recovery case refuses; `case_id`, `operation` and
    /// `reason` say which and why (`case_closed` with `state`, `replay_in_flight` with
    /// `message_id`, `case_claimed` with `owner`, `repeat_safety`, `effect_authority`,
    /// `effect_present` — the case completed instead —, `case_busy`). Nothing was
    /// delivered.
    RedeliveryRefused = ("redelivery_refused", 409, "Redelivery refused by its recovery case"),
    /// No replay plan with that id.
    ReplayPlanNotFound = ("replay_plan_not_found", 404, "Replay plan not found"),
    /// A replay plan operation refused now; `reason` says why (`plan_state`: the plan's
    /// status does not allow it; `destination_invalid`: the destination does not exist or
    /// is the failing path — then `clears_at` (RFC 3339) says when it stops being it, with
    /// `destination`, `dead_letter_reason` and `window_ms`; `plan_busy`: the plan, or an
    /// item's case, was changed by another writer — retry). Nothing changed.
    PlanConflict = ("plan_conflict", 409, "Replay plan conflict"),
    /// Anything unexpected; details are in the server's log, not in the response.
    Internal = ("internal", 500, "Internal error"),
}

impl Problem {
    /// A problem with `code` and a detail.
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Problem {
            type_uri: format!("https://redrive.dev/problems/{}", code.as_str()),
            title: code.title().to_owned(),
            status: code.status(),
            detail: Some(detail.into()),
            code: code.as_str().to_owned(),
            extra: serde_json::Map::new(),
        }
    }

    /// Adds a machine-readable fact.
    pub fn with(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.extra.insert(key.to_owned(), value.into());
        self
    }

    /// The code, if it is one this version knows.
    pub fn error_code(&self) -> Option<ErrorCode> {
        ErrorCode::from_code(&self.code)
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.title, self.code)?;
        if let Some(d) = &self.detail {
            write!(f, ": {d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for c in ErrorCode::ALL {
            assert!(seen.insert(c.as_str()), "duplicate code {}", c.as_str());
            assert_eq!(ErrorCode::from_code(c.as_str()), Some(*c));
            assert!((400..600).contains(&c.status()));
        }
    }
}
