//! Errors of broker operations: input the broker refused, or what its storage refused
//! or failed, told in broker words ([`Storage`]) so that no interface names a store error.

use redrive_core::PolicyError;
use redrive_core::id::{IdError, IdKind};
use redrive_core::name::NameError;
use redrive_store::{StoreError, StoreErrorKind};

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
    /// A replay plan whose destination is the failing path: it dead-lettered one of the
    /// items' reasons within the node's failing-path window, and replaying there would
    /// repeat the failure. Refused, nothing created, until `clears_at` (code
    /// `destination_invalid`).
    #[error(
        "the destination {destination} is the failing path: it dead-lettered {reason} within \
         the last {}, and replaying there would repeat the failure; it clears at {} (in {} s)",
        crate::replay_plans::window_text(*window_ms),
        clears_at.to_rfc3339(),
        clears_in_ms.div_ceil(1_000)
    )]
    FailingPath {
        /// The destination queue.
        destination: String,
        /// The items' reason it dead-lettered (of several, the one that clears last).
        reason: String,
        /// The node's failing-path window, ms.
        window_ms: u64,
        /// When the destination stops being the failing path for every reason of the
        /// items: its latest dead letter with that reason, plus the window.
        clears_at: redrive_core::Timestamp,
        /// How long until then, ms, from when the plan was refused.
        clears_in_ms: u64,
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

/// A malformed typed id is refused as the operation refused it before ids were typed: a
/// case or replay plan id names no case or plan (`CaseNotFound`, `ReplayPlanNotFound`:
/// what its lookup answered), a case group id is an invalid `group`, a lock token names
/// no lock (`LockLost`). A dead-letter record id is named with its queue: the operations
/// that take one answer a malformed one themselves (`DeadLetterNotFound` on the queue);
/// alone it is an invalid `dead_letter_id`.
impl From<IdError> for BrokerError {
    fn from(e: IdError) -> Self {
        match e.kind {
            IdKind::Case => BrokerError::Store(StoreError::CaseNotFound { id: e.id }),
            IdKind::Group => BrokerError::invalid("group", e.to_string()),
            IdKind::Plan => BrokerError::Store(StoreError::ReplayPlanNotFound { id: e.id }),
            IdKind::Lock => BrokerError::Store(StoreError::LockLost),
            IdKind::DeadLetter => BrokerError::invalid("dead_letter_id", e.to_string()),
        }
    }
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
            BrokerError::FailingPath { .. } => "destination_invalid".into(),
            BrokerError::RedeliveryRefused(r) => format!("redelivery_refused:{}", r.code),
            BrokerError::Store(s) => format!("{:?}", s.kind()).to_lowercase(),
            _ => "refused".into(),
        }
    }

    /// What the storage refused or failed, in broker words; `None` for the broker's own
    /// refusals (matched by variant).
    pub fn storage(&self) -> Option<Storage> {
        match self {
            BrokerError::Store(e) => Some(Storage::of(e)),
            _ => None,
        }
    }

    /// The class of a storage error (`unavailable`, `poisoned`, `not_found`…), or `None`
    /// for the broker's own refusals.
    pub fn storage_class(&self) -> Option<&'static str> {
        match self {
            BrokerError::Store(e) => Some(class_name(e)),
            _ => None,
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

/// What the broker's storage refused or failed, in the broker's words: the interfaces
/// match these ([`BrokerError::storage`]), never the store's own errors. The message of
/// the [`BrokerError`] says the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Storage {
    /// No queue of that name.
    QueueNotFound {
        /// The name asked for.
        queue: String,
    },
    /// A queue of that name exists already.
    QueueExists,
    /// A delete without force of a queue that holds messages or live dead letters.
    QueueNotEmpty {
        /// Messages on it.
        messages: u64,
        /// Live dead letters in its store.
        dead_letters: u64,
    },
    /// The policy version is not the one the caller expected.
    VersionConflict {
        /// What the caller expected.
        expected: u64,
        /// What is stored.
        actual: u64,
    },
    /// No such message.
    MessageNotFound,
    /// The lock is not held: it expired, or the message was settled.
    LockLost,
    /// A lock renewal past the longest a lock may last from its receive.
    LockCapExceeded {
        /// The longest a lock may last, in ms.
        cap_ms: u64,
        /// What remains of it, in ms.
        remaining_ms: u64,
    },
    /// The queue needs a session id.
    SessionRequired,
    /// The queue does not use sessions.
    SessionNotAllowed,
    /// Another receiver holds the session.
    SessionLocked,
    /// The session lock is not held.
    SessionLockLost,
    /// No such dead letter.
    DeadLetterNotFound,
    /// A dead letter that cannot be read.
    DeadLetterUndecodable {
        /// The record.
        id: String,
        /// Why it cannot be read.
        reason: String,
    },
    /// A dead-letter target queue that does not exist.
    DeadLetterTargetMissing,
    /// No such topic.
    TopicNotFound,
    /// A topic of that name exists already.
    TopicExists,
    /// A delete without force of a topic that has subscriptions.
    TopicHasSubscriptions {
        /// How many.
        subscriptions: u64,
    },
    /// No such subscription.
    SubscriptionNotFound,
    /// A subscription of that name exists already.
    SubscriptionExists,
    /// A delete without force of a subscription with undelivered events.
    SubscriptionNotEmpty {
        /// How many.
        messages: u64,
    },
    /// A token of that name, id, secret or access key exists already.
    TokenExists,
    /// No such token.
    TokenNotFound,
    /// No such case.
    CaseNotFound,
    /// Another writer changed the case first: read it again.
    CaseChanged,
    /// No such case group.
    CaseGroupNotFound,
    /// The case's timeline is full.
    TimelineFull,
    /// No such replay plan.
    ReplayPlanNotFound,
    /// Another writer changed the plan, or another plan holds an item's case: retry.
    PlanBusy,
    /// Anything else the storage refused (a conflict of its own bookkeeping).
    Conflict,
    /// Storage is unavailable for now: retry.
    Unavailable,
    /// Storage stopped accepting writes after a failed commit: restart.
    Poisoned,
    /// A fault of the storage that is no refusal (the cause is in the error's source).
    Internal,
}

impl Storage {
    fn of(e: &StoreError) -> Storage {
        use StoreError as E;
        match e {
            E::QueueNotFound { queue } => Storage::QueueNotFound {
                queue: queue.clone(),
            },
            E::QueueExists { .. } => Storage::QueueExists,
            E::QueueNotEmpty {
                messages,
                dead_letters,
                ..
            } => Storage::QueueNotEmpty {
                messages: *messages,
                dead_letters: *dead_letters,
            },
            E::VersionConflict { expected, actual } => Storage::VersionConflict {
                expected: *expected,
                actual: *actual,
            },
            E::MessageNotFound { .. } => Storage::MessageNotFound,
            E::LockLost => Storage::LockLost,
            E::LockCapExceeded {
                cap_ms,
                remaining_ms,
            } => Storage::LockCapExceeded {
                cap_ms: *cap_ms,
                remaining_ms: *remaining_ms,
            },
            E::SessionRequired { .. } => Storage::SessionRequired,
            E::SessionNotAllowed { .. } => Storage::SessionNotAllowed,
            E::SessionLocked { .. } => Storage::SessionLocked,
            E::SessionLockLost => Storage::SessionLockLost,
            E::DeadLetterNotFound { .. } => Storage::DeadLetterNotFound,
            E::DeadLetterUndecodable { id, reason, .. } => Storage::DeadLetterUndecodable {
                id: id.clone(),
                reason: reason.clone(),
            },
            E::DeadLetterTargetMissing { .. } => Storage::DeadLetterTargetMissing,
            E::TopicNotFound { .. } => Storage::TopicNotFound,
            E::TopicExists { .. } => Storage::TopicExists,
            E::TopicHasSubscriptions { subscriptions, .. } => Storage::TopicHasSubscriptions {
                subscriptions: *subscriptions,
            },
            E::SubscriptionNotFound { .. } => Storage::SubscriptionNotFound,
            E::SubscriptionExists { .. } => Storage::SubscriptionExists,
            E::SubscriptionNotEmpty { messages, .. } => Storage::SubscriptionNotEmpty {
                messages: *messages,
            },
            E::TokenExists { .. } => Storage::TokenExists,
            E::TokenNotFound { .. } => Storage::TokenNotFound,
            E::CaseNotFound { .. } => Storage::CaseNotFound,
            E::CaseChanged { .. } => Storage::CaseChanged,
            E::CaseGroupNotFound { .. } => Storage::CaseGroupNotFound,
            E::TimelineFull { .. } => Storage::TimelineFull,
            E::ReplayPlanNotFound { .. } => Storage::ReplayPlanNotFound,
            E::ReplayPlanChanged { .. } | E::ReplayItemTaken { .. } => Storage::PlanBusy,
            E::Unavailable { .. } => Storage::Unavailable,
            E::Poisoned => Storage::Poisoned,
            e if e.kind() == StoreErrorKind::Conflict => Storage::Conflict,
            _ => Storage::Internal,
        }
    }
}

/// The class of a storage error, for health reports and metrics: `not_found`,
/// `conflict`, `lock_lost`, `invalid`, `unavailable`, `poisoned`, `other`.
fn class_name(e: &StoreError) -> &'static str {
    match e.kind() {
        StoreErrorKind::NotFound => "not_found",
        StoreErrorKind::Conflict => "conflict",
        StoreErrorKind::LockLost => "lock_lost",
        StoreErrorKind::Invalid => "invalid",
        StoreErrorKind::Unavailable => "unavailable",
        StoreErrorKind::Poisoned => "poisoned",
        StoreErrorKind::Other => "other",
    }
}

/// Result of a broker operation.
pub type BrokerResult<T> = Result<T, BrokerError>;

#[cfg(test)]
mod tests {
    use super::*;

    fn storage(e: StoreError) -> Option<Storage> {
        BrokerError::Store(e).storage()
    }

    #[test]
    fn storage_errors_are_told_in_broker_words() {
        let q = || "orders".to_owned();
        assert_eq!(
            storage(StoreError::QueueNotFound { queue: q() }),
            Some(Storage::QueueNotFound { queue: q() })
        );
        assert_eq!(
            storage(StoreError::QueueNotEmpty {
                queue: q(),
                messages: 3,
                dead_letters: 1
            }),
            Some(Storage::QueueNotEmpty {
                messages: 3,
                dead_letters: 1
            })
        );
        // Two store conflicts of a plan are one thing to a caller: retry.
        for e in [
            StoreError::ReplayPlanChanged {
                id: "p".into(),
                version: 2,
            },
            StoreError::ReplayItemTaken {
                case_id: "c".into(),
                plan_id: "p".into(),
            },
        ] {
            assert_eq!(storage(e), Some(Storage::PlanBusy));
        }
        assert_eq!(
            storage(StoreError::MoveTaskRunning { queue: q() }),
            Some(Storage::Conflict)
        );
        assert_eq!(storage(StoreError::Poisoned), Some(Storage::Poisoned));
        let backend = BrokerError::Store(StoreError::backend(std::io::Error::other("disk")));
        assert_eq!(backend.storage(), Some(Storage::Internal));
        assert_eq!(backend.storage_class(), Some("other"));
        let gone = BrokerError::Store(StoreError::unavailable(std::io::Error::other("down")));
        assert_eq!(gone.storage_class(), Some("unavailable"));
        // The broker's own refusals are matched by variant, not as storage.
        assert_eq!(BrokerError::ShuttingDown.storage(), None);
        assert_eq!(BrokerError::invalid("x", "y").storage_class(), None);
    }
}
