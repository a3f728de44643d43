//! Errors of broker operations: input the broker refused, or a store error passed on.

use redrive_core::PolicyError;
use redrive_core::name::NameError;
use redrive_store::StoreError;

/// A broker operation that did not happen. Refusals change nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// An entity name breaks the naming rule.
    #[error(transparent)]
    InvalidName(#[from] NameError),
    /// A policy breaks a rule.
    #[error(transparent)]
    InvalidPolicy(#[from] PolicyError),
    /// A request field is out of its range.
    #[error("invalid `{field}`: {why}")]
    InvalidRequest {
        /// The field.
        field: String,
        /// What is wrong.
        why: String,
    },
    /// A message (body, string headers and properties) is larger than the queue's limit.
    #[error(
        "message is {size} bytes (body, headers and properties); queue {queue:?} accepts at \
         most {limit}"
    )]
    MessageTooLarge {
        /// The queue.
        queue: String,
        /// Counted size.
        size: usize,
        /// The limit.
        limit: u32,
    },
    /// An event of a publish is not a valid CloudEvent; the whole request was refused.
    #[error("event {index} is invalid: {why}")]
    InvalidEvent {
        /// Its index in the request (0 for a single event).
        index: usize,
        /// What is wrong.
        why: String,
    },
    /// An event is larger than the topic allows; the whole request was refused.
    #[error("event {index} is {size} bytes; topic {topic:?} accepts at most {limit}")]
    EventTooLarge {
        /// The topic.
        topic: String,
        /// Its index in the request.
        index: usize,
        /// Its structured-mode size.
        size: usize,
        /// The limit.
        limit: u32,
    },
    /// A push endpoint did not pass the webhook validation handshake.
    #[error("endpoint validation failed for {endpoint}: {why}")]
    EndpointValidationFailed {
        /// The endpoint.
        endpoint: String,
        /// What happened.
        why: String,
    },
    /// A push endpoint is (or resolves to) an address push requests may not reach:
    /// loopback, private, link-local, metadata… unless the operator allows it.
    #[error("endpoint {endpoint} is not allowed: {why}")]
    EndpointForbidden {
        /// The endpoint.
        endpoint: String,
        /// Which address, and why.
        why: String,
    },
    /// A push subscription needs a dead-letter destination, or an explicit drop.
    #[error(
        "a push subscription needs a dead-letter destination: own_store, a queue, a topic, or \
         {{\"type\": \"drop\", \"acknowledged\": true}} to accept dropping undeliverable events"
    )]
    DeadLetterDestinationRequired,
    /// A restore of a dead letter that is not in the quarantine area; nothing changed.
    #[error("dead letter {id} is {area}, not in quarantine: only a quarantined record is restored")]
    DeadLetterNotQuarantined {
        /// The record.
        id: String,
        /// The area it is in.
        area: String,
    },
    /// A delete (without force) of a queue another queue or subscription names as its
    /// dead-letter target; nothing changed.
    #[error(
        "queue {queue} is the dead-letter target of {}: change their dead-letter target \
         first, or delete with force (their dead letters then stay in their own stores)",
        dependants.join(", ")
    )]
    QueueIsDeadLetterTarget {
        /// The queue.
        queue: String,
        /// The queues and subscriptions (`<topic>/<subscription>`) that name it.
        dependants: Vec<String>,
    },
    /// A case operation the case's state refuses (claimed by another owner, not the
    /// owner, closed, not eligible, an intent decided already…); nothing changed.
    #[error("{why}")]
    CaseConflict {
        /// A stable code (`case_claimed`, `not_case_owner`, `case_closed`,
        /// `case_not_eligible`, `intent_decided`, `no_effect_authority`, `payload_gone`…).
        code: String,
        /// What and why.
        why: String,
        /// The current owner, when another owner's claim is in the way.
        owner: Option<String>,
    },
    /// A delivery of a dead letter again by hand (resubmit, move to live, restore, import,
    /// move task) that its recovery case refuses; nothing was delivered.
    #[error("{}", .0.why)]
    RedeliveryRefused(Box<RedeliveryRefusal>),
    /// A replay plan cannot do what was asked now (`code` says why: `plan_state`,
    /// `destination_invalid`, `plan_busy`).
    #[error("{why}")]
    PlanConflict {
        /// The reason's code.
        code: String,
        /// Why, in words.
        why: String,
    },
    /// A replay plan whose budget leaves limits out: an unbounded replay is refused.
    #[error("an unbounded replay is refused: name {}", missing.join(", "))]
    ReplayUnbounded {
        /// The budget fields left out.
        missing: Vec<String>,
    },
    /// No valid token: missing, malformed, unknown, revoked or expired.
    #[error("{0}")]
    Unauthenticated(String),
    /// The token's grants do not permit the operation on the entity.
    #[error("{}", forbidden_text(operation, needs, entity.as_deref()))]
    Forbidden {
        /// The operation refused.
        operation: String,
        /// The roles it needs.
        needs: String,
        /// The entity it was asked on.
        entity: Option<String>,
    },
    /// The token is over its request rate.
    #[error("too many requests for this token; retry after {retry_after_ms} ms")]
    RateLimited {
        /// When a request will be admitted again.
        retry_after_ms: u64,
    },
    /// The token was revoked while the request (a long poll) or task ran.
    #[error("the token was revoked while the request was running")]
    TokenRevoked,
    /// The broker is shutting down.
    #[error("the broker is shutting down")]
    ShuttingDown,
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a recovery case refused a delivery of its dead letter by hand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedeliveryRefusal {
    /// The reason's code: `case_closed`, `replay_in_flight`, `case_claimed`,
    /// `repeat_safety`, `effect_authority`, `effect_present`, `case_busy`.
    pub code: String,
    /// Why, in words.
    pub why: String,
    /// The case.
    pub case_id: String,
    /// The operation refused (`resubmit`, `move_to_live`, …).
    pub operation: String,
    /// The case's terminal state (`case_closed`, `effect_present`).
    pub state: Option<String>,
    /// The replay in flight (`replay_in_flight`).
    pub message_id: Option<String>,
    /// The claim's holder (`case_claimed`).
    pub owner: Option<String>,
}

fn forbidden_text(operation: &str, needs: &str, entity: Option<&str>) -> String {
    match entity {
        Some(e) => format!("this token may not do {operation} on {e:?}: it needs {needs} on it"),
        None => format!("this token may not do {operation}: it needs {needs}"),
    }
}

impl BrokerError {
    /// A short stable name of the error's kind, for audit outcomes (`error:<name>`).
    pub fn code_hint(&self) -> String {
        match self {
            BrokerError::InvalidName(_) => "invalid_name".into(),
            BrokerError::InvalidPolicy(_) => "invalid_policy".into(),
            BrokerError::InvalidRequest { .. } => "invalid_request".into(),
            BrokerError::Unauthenticated(_) => "unauthenticated".into(),
            BrokerError::Forbidden { .. } => "forbidden".into(),
            BrokerError::RateLimited { .. } => "rate_limited".into(),
            BrokerError::TokenRevoked => "token_revoked".into(),
            BrokerError::ShuttingDown => "shutting_down".into(),
            BrokerError::DeadLetterNotQuarantined { .. } => "dead_letter_not_quarantined".into(),
            BrokerError::QueueIsDeadLetterTarget { .. } => "queue_is_dead_letter_target".into(),
            BrokerError::CaseConflict { code, .. } => code.clone(),
            BrokerError::ReplayUnbounded { .. } => "replay_unbounded".into(),
            BrokerError::PlanConflict { code, .. } => code.clone(),
            BrokerError::RedeliveryRefused(r) => format!("redelivery_refused:{}", r.code),
            BrokerError::Store(s) => format!("{:?}", s.kind()).to_lowercase(),
            _ => "refused".into(),
        }
    }

    /// An out-of-range request field.
    pub fn invalid(field: impl Into<String>, why: impl Into<String>) -> Self {
        BrokerError::InvalidRequest {
            field: field.into(),
            why: why.into(),
        }
    }
}

/// Result of a broker operation.
pub type BrokerResult<T> = Result<T, BrokerError>;
