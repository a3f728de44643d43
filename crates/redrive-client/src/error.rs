//! Errors: one type per operation family ([`SendError`], [`ReceiveError`], [`SettleError`],
//! [`SessionError`], [`AdminError`]), each classified by one [`ErrorKind`] and carrying the
//! server's RFC 9457 [`Problem`] when the server answered with one.
//!
//! Callers match on [`kind`](SendError::kind), never on message text; the problem's
//! `code` is redrive's stable error code for finer decisions.

use std::error::Error as StdError;
use std::fmt;

use redrive_api::Problem;

/// What went wrong, independent of the operation: the small closed set callers decide on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The queue, topic, subscription, message, session or record does not exist (404).
    NotFound,
    /// The message's lock or the session's lock expired, was released, or the message was
    /// settled already (409 `lock_lost`, `session_lock_lost`): the delivery is no longer
    /// this receiver's.
    LockLost,
    /// The state of the entity refuses the operation (409: exists already, not empty, a
    /// version conflict, a session held by another receiver…).
    Conflict,
    /// The request is not acceptable: refused by this client before it was sent (an empty
    /// name, an empty or oversized batch, a value out of range) or by the server (400).
    Invalid,
    /// No valid token (401).
    Unauthorized,
    /// The token's grants do not permit the operation (403).
    Forbidden,
    /// A message, event or batch is larger than the entity allows (413).
    TooLarge,
    /// The token is over its request rate (429); retried by the client's retry options.
    RateLimited,
    /// The server or its storage is unavailable or shutting down (503); retried by the
    /// client's retry options.
    Unavailable,
    /// The request could not be sent or the connection failed before an answer: refused,
    /// reset, a TLS failure.
    Transport,
    /// No answer within the request timeout: the server may or may not have acted.
    Timeout,
    /// The server failed (500) or answered something this client cannot read.
    Server,
}

impl ErrorKind {
    /// The kind of a problem document: by its stable code first, its status otherwise.
    pub fn of_problem(p: &Problem) -> ErrorKind {
        match p.code.as_str() {
            "lock_lost" | "session_lock_lost" => ErrorKind::LockLost,
            "rate_limited" => ErrorKind::RateLimited,
            "unavailable" | "shutting_down" => ErrorKind::Unavailable,
            "message_too_large" | "event_too_large" => ErrorKind::TooLarge,
            "unauthenticated" | "token_revoked" => ErrorKind::Unauthorized,
            "forbidden" => ErrorKind::Forbidden,
            "internal" => ErrorKind::Server,
            _ => ErrorKind::of_status(p.status),
        }
    }

    /// The kind of an HTTP error status.
    pub fn of_status(status: u16) -> ErrorKind {
        match status {
            401 => ErrorKind::Unauthorized,
            403 => ErrorKind::Forbidden,
            404 => ErrorKind::NotFound,
            408 => ErrorKind::Timeout,
            409 => ErrorKind::Conflict,
            413 => ErrorKind::TooLarge,
            429 => ErrorKind::RateLimited,
            503 => ErrorKind::Unavailable,
            400..=499 => ErrorKind::Invalid,
            _ => ErrorKind::Server,
        }
    }

    /// A short name for logs (`lock_lost`, `unavailable`…).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not_found",
            ErrorKind::LockLost => "lock_lost",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Invalid => "invalid",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Transport => "transport",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Server => "server",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a failed request may have been acted on by the server: decides which
/// operations a retry is safe for (see [`crate::RetryOptions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The request certainly changed nothing: it was never sent (the connection was
    /// refused), or the server refused it (every error answer: "a refused request changes
    /// nothing").
    Unchanged,
    /// Unknown: the request was sent and no answer came (a timeout, a reset connection).
    Unknown,
}

/// The failure every operation error wraps.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) kind: ErrorKind,
    pub(crate) problem: Option<Box<Problem>>,
    pub(crate) status: Option<u16>,
    /// What failed: `POST /v1/queues/orders/messages`, or the client's own check.
    pub(crate) what: String,
    /// The detail when there is no problem document (a client check, a body that is not a
    /// problem).
    pub(crate) detail: Option<String>,
    pub(crate) source: Option<Box<dyn StdError + Send + Sync>>,
    pub(crate) outcome: Outcome,
    /// `Retry-After` (or the problem's `retry_after_ms`), when the server gave one.
    pub(crate) retry_after: Option<std::time::Duration>,
    /// Requests made, retries included.
    pub(crate) attempts: u32,
    /// A TLS failure: never transient (a certificate refused stays refused).
    pub(crate) tls: bool,
}

impl Failure {
    /// Bad input caught before any request was made.
    pub(crate) fn invalid(what: impl Into<String>, detail: impl Into<String>) -> Failure {
        Failure {
            kind: ErrorKind::Invalid,
            problem: None,
            status: None,
            what: what.into(),
            detail: Some(detail.into()),
            source: None,
            outcome: Outcome::Unchanged,
            retry_after: None,
            attempts: 0,
            tls: false,
        }
    }

    /// A success whose answer cannot be read (`what` is the request).
    pub(crate) fn unexpected(what: &str, detail: &str) -> Failure {
        Failure {
            kind: ErrorKind::Server,
            problem: None,
            status: None,
            what: what.to_owned(),
            detail: Some(format!("unexpected answer: {detail}")),
            source: None,
            // The server acted on the request; only its answer is unreadable.
            outcome: Outcome::Unknown,
            retry_after: None,
            attempts: 1,
            tls: false,
        }
    }

    /// Whether retrying may help: unavailable, rate limited, a connection failure or a
    /// timeout (not a TLS failure).
    pub(crate) fn is_transient(&self) -> bool {
        match self.kind {
            ErrorKind::Unavailable | ErrorKind::RateLimited | ErrorKind::Timeout => true,
            ErrorKind::Transport => !self.tls,
            _ => false,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.what)?;
        match (&self.problem, &self.detail, &self.source) {
            (Some(p), _, _) => {
                write!(f, "{p}")?;
                if let Some(field) = p.extra.get("field").and_then(|v| v.as_str()) {
                    write!(f, " (field {field})")?;
                }
            }
            (None, Some(d), _) => f.write_str(d)?,
            (None, None, Some(s)) => f.write_str(&redrive_tls::explain(s.as_ref()))?,
            (None, None, None) => write!(f, "{}", self.kind)?,
        }
        if self.attempts > 1 {
            write!(f, " (after {} attempts)", self.attempts)?;
        }
        Ok(())
    }
}

macro_rules! operation_error {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[non_exhaustive]
        pub struct $name(pub(crate) Box<Failure>);

        impl $name {
            /// What went wrong.
            pub fn kind(&self) -> ErrorKind {
                self.0.kind
            }

            /// The server's problem document, when it answered with one.
            pub fn problem(&self) -> Option<&Problem> {
                self.0.problem.as_deref()
            }

            /// The problem's stable code (`lock_lost`, `queue_not_found`…), when there is one.
            pub fn code(&self) -> Option<&str> {
                self.0.problem.as_deref().map(|p| p.code.as_str())
            }

            /// The HTTP status, when the server answered.
            pub fn status(&self) -> Option<u16> {
                self.0.status
            }

            /// Whether a later attempt may succeed (unavailable, rate limited, a
            /// connection failure or a timeout), after this client's own retries gave up.
            pub fn is_transient(&self) -> bool {
                self.0.is_transient()
            }

            /// How many requests were made, retries included (0: refused before sending).
            pub fn attempts(&self) -> u32 {
                self.0.attempts
            }

            /// What failed, with no problem document to say it: this client's own check
            /// of the input, an answer that is not a problem (`HTTP 502: …`), or one it
            /// cannot read.
            pub fn detail(&self) -> Option<&str> {
                self.0.detail.as_deref()
            }

            /// The delay the server asked for (`Retry-After`), when it gave one.
            pub fn retry_after(&self) -> Option<std::time::Duration> {
                self.0.retry_after
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("kind", &self.0.kind)
                    .field("what", &self.0.what)
                    .field("status", &self.0.status)
                    .field("problem", &self.0.problem)
                    .field("detail", &self.0.detail)
                    .field("attempts", &self.0.attempts)
                    .finish()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl StdError for $name {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                self.0
                    .source
                    .as_ref()
                    .map(|s| s.as_ref() as &(dyn StdError + 'static))
            }
        }

        impl From<Failure> for $name {
            fn from(f: Failure) -> Self {
                $name(Box::new(f))
            }
        }
    };
}

operation_error! {
    /// A send, a scheduled send, a cancel of a scheduled message, or a publish to a topic
    /// failed.
    SendError
}

operation_error! {
    /// A receive (of the queue, of deferred messages, of a session) failed.
    ReceiveError
}

operation_error! {
    /// A settlement (complete, abandon, defer, dead-letter) or a lock renewal failed.
    SettleError
}

operation_error! {
    /// Accepting, renewing or releasing a session failed.
    SessionError
}

operation_error! {
    /// A management call (queues, topics, subscriptions) failed.
    AdminError
}

operation_error! {
    /// A recovery call (dead letters, replay, plans, cases, case groups, intents, effect
    /// authorities) failed.
    RecoveryError
}

operation_error! {
    /// An access call (tokens, the audit log, the register) failed.
    AccessError
}

/// Why a [`Client`](crate::Client) could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The server URL does not parse, or is not `http://` or `https://` with a host.
    #[error("invalid server URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The token is empty or holds characters an HTTP header cannot carry.
    #[error("invalid token: {0}")]
    InvalidToken(&'static str),
    /// An option is out of range (a zero timeout, a retry delay above its maximum…).
    #[error("invalid option `{option}`: {reason}")]
    InvalidOption {
        /// The option.
        option: &'static str,
        /// Why.
        reason: String,
    },
    /// The extra CA bundle cannot be used.
    #[error(transparent)]
    Trust(#[from] redrive_tls::TrustError),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Http(#[source] reqwest::Error),
}
