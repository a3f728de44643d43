//! Storage errors, classified neutrally so that callers never look at SQLSTATEs or
//! SQLite codes.

use std::error::Error as StdError;

/// Result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// A storage operation that did not happen. Every variant but `Unavailable`,
/// `Poisoned` and `Backend` is a refusal that changed nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No queue of that name.
    #[error("queue {queue:?} does not exist")]
    QueueNotFound {
        /// The name asked for.
        queue: String,
    },
    /// A queue of that name exists already.
    #[error("queue {queue:?} already exists")]
    QueueExists {
        /// The name asked for.
        queue: String,
    },
    /// Delete without force of a queue that holds messages or live dead letters.
    #[error("queue {queue:?} is not empty ({messages} messages, {dead_letters} live dead letters)")]
    QueueNotEmpty {
        /// The queue.
        queue: String,
        /// Messages on it.
        messages: u64,
        /// Live dead letters in its store.
        dead_letters: u64,
    },
    /// The stored policy version is not the one the caller expected.
    #[error("policy version conflict: expected {expected}, found {actual}")]
    VersionConflict {
        /// What the caller expected.
        expected: u64,
        /// What is stored.
        actual: u64,
    },
    /// No message with that sequence number in the state the operation needs.
    #[error("no matching message with sequence number {sequence} on queue {queue:?}")]
    MessageNotFound {
        /// The queue.
        queue: String,
        /// The sequence number asked for.
        sequence: i64,
    },
    /// The lock expired, the message was settled already, or the token is unknown.
    #[error("the lock was lost: it expired, or the message was already settled")]
    LockLost,
    /// A lock renewal would end later than its cap, counted from the receive that took the
    /// lock (nothing changed).
    #[error(
        "the lock may last at most {cap_ms} ms from the receive that took it; {remaining_ms} ms of that remain"
    )]
    LockCapExceeded {
        /// The cap asked for.
        cap_ms: u64,
        /// What remains of it now (0 when it has passed).
        remaining_ms: u64,
    },
    /// The queue requires sessions and the message or receive names none.
    #[error("queue {queue:?} requires a session id")]
    SessionRequired {
        /// The queue.
        queue: String,
    },
    /// The queue does not use sessions but a session was named.
    #[error("queue {queue:?} does not use sessions")]
    SessionNotAllowed {
        /// The queue.
        queue: String,
    },
    /// Another receiver holds the session.
    #[error("session {session_id:?} on queue {queue:?} is locked by another receiver")]
    SessionLocked {
        /// The queue.
        queue: String,
        /// The session.
        session_id: String,
    },
    /// The session lock expired or is not held with that token.
    #[error("the session lock was lost: it expired, or was released")]
    SessionLockLost,
    /// No dead-letter record with that id on that queue (in the area the operation needs).
    #[error("dead letter {id:?} not found on queue {queue:?}")]
    DeadLetterNotFound {
        /// The queue.
        queue: String,
        /// The record id.
        id: String,
    },
    /// The dead-letter record's stored row cannot be read by this build (see
    /// [`UndecodableRecord`](crate::UndecodableRecord)); nothing changed.
    #[error("dead letter {id:?} of queue {queue:?} cannot be read: {reason}")]
    DeadLetterUndecodable {
        /// The queue.
        queue: String,
        /// The record id.
        id: String,
        /// What cannot be read.
        reason: String,
    },
    /// The queue's dead-letter target queue does not exist, so an explicit dead-letter
    /// cannot be carried out (nothing changed).
    #[error("dead-letter queue {target:?} of queue {queue:?} does not exist")]
    DeadLetterTargetMissing {
        /// The queue.
        queue: String,
        /// Its configured target.
        target: String,
    },
    /// No such topic.
    #[error("topic {topic:?} does not exist")]
    TopicNotFound {
        /// The topic.
        topic: String,
    },
    /// A topic of that name exists.
    #[error("topic {topic:?} already exists")]
    TopicExists {
        /// The topic.
        topic: String,
    },
    /// Delete of a topic that has subscriptions, without force.
    #[error("topic {topic:?} has {subscriptions} subscriptions")]
    TopicHasSubscriptions {
        /// The topic.
        topic: String,
        /// How many.
        subscriptions: u64,
    },
    /// No such subscription.
    #[error("subscription {subscription:?} of topic {topic:?} does not exist")]
    SubscriptionNotFound {
        /// The topic.
        topic: String,
        /// The subscription.
        subscription: String,
    },
    /// A subscription of that name exists on the topic.
    #[error("subscription {subscription:?} of topic {topic:?} already exists")]
    SubscriptionExists {
        /// The topic.
        topic: String,
        /// The subscription.
        subscription: String,
    },
    /// Delete of a subscription whose queue holds undelivered events, without force.
    #[error("subscription {subscription:?} of topic {topic:?} holds {messages} undelivered events")]
    SubscriptionNotEmpty {
        /// The topic.
        topic: String,
        /// The subscription.
        subscription: String,
        /// Events on its queue.
        messages: u64,
    },
    /// A token with that name (among tokens not revoked), id, secret or SQS access key
    /// exists already.
    #[error("a token named {name:?} (or with the same id, secret or SQS access key) exists")]
    TokenExists {
        /// The name asked for.
        name: String,
    },
    /// No token with that id.
    #[error("token {id:?} does not exist")]
    TokenNotFound {
        /// The id asked for.
        id: String,
    },
    /// No case with that id.
    #[error("case {id:?} does not exist")]
    CaseNotFound {
        /// The id asked for.
        id: String,
    },
    /// The case changed since it was read: nothing was written.
    #[error("case {id:?} changed (now at version {version}); read it again")]
    CaseChanged {
        /// The case.
        id: String,
        /// Its current version.
        version: u64,
    },
    /// No case group with that id.
    #[error("case group {id:?} does not exist")]
    CaseGroupNotFound {
        /// The id asked for.
        id: String,
    },
    /// The case group changed since it was read (or, for a new one, exists): nothing was
    /// written.
    #[error("case group {id:?} changed; read it again")]
    CaseGroupChanged {
        /// The group.
        id: String,
    },
    /// A timeline would grow past its bound.
    #[error("case {id:?} holds the most timeline entries a case may ({max})")]
    TimelineFull {
        /// The case.
        id: String,
        /// The bound.
        max: usize,
    },
    /// A move task of that source queue is running or being cancelled.
    #[error("a message move task is already running for queue {queue:?}")]
    MoveTaskRunning {
        /// The source queue.
        queue: String,
    },
    /// No move task with that handle.
    #[error("no message move task has the handle {handle:?}")]
    MoveTaskNotFound {
        /// The handle asked for.
        handle: String,
    },
    /// The move task is not running (a finished or cancelling task cannot be cancelled).
    #[error("message move task {handle:?} is not running")]
    MoveTaskNotRunning {
        /// The task.
        handle: String,
    },
    /// No replay plan with that id.
    #[error("replay plan {id:?} does not exist")]
    ReplayPlanNotFound {
        /// The id asked for.
        id: String,
    },
    /// A replay plan with that id exists.
    #[error("replay plan {id:?} exists")]
    ReplayPlanExists {
        /// The id.
        id: String,
    },
    /// The plan changed since it was read: nothing was written.
    #[error("replay plan {id:?} changed (now at version {version}); read it again")]
    ReplayPlanChanged {
        /// The plan.
        id: String,
        /// Its current version.
        version: u64,
    },
    /// Another plan holds the item lease on the case: nothing was written.
    #[error("case {case_id:?} is admitted by replay plan {plan_id:?}")]
    ReplayItemTaken {
        /// The case.
        case_id: String,
        /// The plan holding it.
        plan_id: String,
    },
    /// Transient: the backend is busy or unreachable. Retrying may succeed; nothing was
    /// acknowledged.
    #[error("storage unavailable: {source}")]
    Unavailable {
        /// The cause.
        #[source]
        source: Box<dyn StdError + Send + Sync>,
    },
    /// A commit or sync failed in a way that leaves the state unknown; the backend
    /// refuses all further writes until restarted.
    #[error("storage poisoned after a failed commit; restart required")]
    Poisoned,
    /// Anything else the backend reports.
    #[error("storage error: {source}")]
    Backend {
        /// The cause.
        #[source]
        source: Box<dyn StdError + Send + Sync>,
    },
}

/// The neutral class of a [`StoreError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreErrorKind {
    /// Something named does not exist.
    NotFound,
    /// The operation conflicts with the current state.
    Conflict,
    /// A lock (message or session) is not held.
    LockLost,
    /// The request does not fit the entity's policy.
    Invalid,
    /// Transient; retry later.
    Unavailable,
    /// Fail-stopped; restart.
    Poisoned,
    /// Anything else.
    Other,
}

impl StoreError {
    /// The neutral class of this error.
    pub fn kind(&self) -> StoreErrorKind {
        match self {
            StoreError::QueueNotFound { .. }
            | StoreError::MessageNotFound { .. }
            | StoreError::DeadLetterNotFound { .. }
            | StoreError::TopicNotFound { .. }
            | StoreError::SubscriptionNotFound { .. }
            | StoreError::TokenNotFound { .. }
            | StoreError::CaseNotFound { .. }
            | StoreError::CaseGroupNotFound { .. }
            | StoreError::MoveTaskNotFound { .. }
            | StoreError::ReplayPlanNotFound { .. } => StoreErrorKind::NotFound,
            StoreError::CaseChanged { .. }
            | StoreError::CaseGroupChanged { .. }
            | StoreError::TimelineFull { .. }
            | StoreError::MoveTaskRunning { .. }
            | StoreError::MoveTaskNotRunning { .. }
            | StoreError::ReplayPlanExists { .. }
            | StoreError::ReplayPlanChanged { .. }
            | StoreError::ReplayItemTaken { .. } => StoreErrorKind::Conflict,
            StoreError::TopicExists { .. }
            | StoreError::TopicHasSubscriptions { .. }
            | StoreError::SubscriptionExists { .. }
            | StoreError::SubscriptionNotEmpty { .. }
            | StoreError::TokenExists { .. } => StoreErrorKind::Conflict,
            StoreError::QueueExists { .. }
            | StoreError::QueueNotEmpty { .. }
            | StoreError::VersionConflict { .. }
            | StoreError::SessionLocked { .. }
            | StoreError::DeadLetterTargetMissing { .. }
            | StoreError::DeadLetterUndecodable { .. } => StoreErrorKind::Conflict,
            StoreError::LockLost | StoreError::SessionLockLost => StoreErrorKind::LockLost,
            StoreError::SessionRequired { .. }
            | StoreError::SessionNotAllowed { .. }
            | StoreError::LockCapExceeded { .. } => StoreErrorKind::Invalid,
            StoreError::Unavailable { .. } => StoreErrorKind::Unavailable,
            StoreError::Poisoned => StoreErrorKind::Poisoned,
            StoreError::Backend { .. } => StoreErrorKind::Other,
        }
    }

    /// Wraps a backend error.
    pub fn backend(e: impl StdError + Send + Sync + 'static) -> Self {
        StoreError::Backend {
            source: Box::new(e),
        }
    }

    /// A stored value that cannot be read (`column` is `table.column`).
    pub fn bad_value(column: &'static str, why: impl std::fmt::Display) -> Self {
        crate::skeleton::columns::bad_value(column, why)
    }

    /// Wraps a transient backend error.
    pub fn unavailable(e: impl StdError + Send + Sync + 'static) -> Self {
        StoreError::Unavailable {
            source: Box::new(e),
        }
    }
}
