//! SQS errors as clients parse them: the modeled error's shape name (`__type` in AWS JSON),
//! its query-protocol code (`Error.Code` in XML and the `x-amzn-query-error` header, which
//! boto3 and the AWS SDKs use to raise `QueueDoesNotExist` and friends), the HTTP status and
//! whether the sender is at fault; and the mapping of broker errors onto them.

use redrive_broker::{BrokerError, Storage};

/// The kinds of error the endpoint answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The queue named by the request does not exist.
    QueueDoesNotExist,
    /// A queue with this name exists with other attribute values.
    QueueNameExists,
    /// An attribute name is not one SQS knows.
    InvalidAttributeName,
    /// An attribute value is out of range or malformed.
    InvalidAttributeValue,
    /// A request parameter is out of range or malformed.
    InvalidParameterValue,
    /// A required parameter is missing.
    MissingParameter,
    /// The body holds characters SQS does not allow.
    InvalidMessageContents,
    /// The receipt handle is not one this endpoint issued.
    ReceiptHandleIsInvalid,
    /// The message is not in flight (its visibility timeout ran out or it was deleted).
    MessageNotInflight,
    /// A purge of this queue happened less than 60 seconds ago.
    PurgeQueueInProgress,
    /// Two batch entries share an id.
    BatchEntryIdsNotDistinct,
    /// The batch's messages together exceed the size limit.
    BatchRequestTooLong,
    /// The batch has no entries.
    EmptyBatchRequest,
    /// A batch entry id breaks the id rule.
    InvalidBatchEntryId,
    /// The batch has more than 10 entries.
    TooManyEntriesInBatchRequest,
    /// The action or feature is not supported (yet).
    UnsupportedOperation,
    /// A limit was reached (e.g. one active message move task per queue).
    OverLimit,
    /// A resource (e.g. a message move task) was not found.
    ResourceNotFound,
    /// The access key is not one of the configured keys.
    InvalidClientTokenId,
    /// The request signature does not match.
    SignatureDoesNotMatch,
    /// The credentials do not permit the action on the queue.
    AccessDenied,
    /// The credentials are over their request rate.
    RequestThrottled,
    /// The request is not a well-formed SQS request.
    MalformedRequest,
    /// The request body is larger than the endpoint takes.
    RequestTooLarge,
    /// The broker is shutting down or its storage is unavailable.
    ServiceUnavailable,
    /// An internal error (logged in full; the client sees a generic message).
    InternalFailure,
}

impl ErrorKind {
    /// The modeled shape name (`__type` after `com.amazonaws.sqs#`).
    pub fn shape(self) -> &'static str {
        use ErrorKind as K;
        match self {
            K::QueueDoesNotExist => "QueueDoesNotExist",
            K::QueueNameExists => "QueueNameExists",
            K::InvalidAttributeName => "InvalidAttributeName",
            K::InvalidAttributeValue => "InvalidAttributeValue",
            K::InvalidParameterValue => "InvalidParameterValueException",
            K::MissingParameter => "MissingParameter",
            K::InvalidMessageContents => "InvalidMessageContents",
            K::ReceiptHandleIsInvalid => "ReceiptHandleIsInvalid",
            K::MessageNotInflight => "MessageNotInflight",
            K::PurgeQueueInProgress => "PurgeQueueInProgress",
            K::BatchEntryIdsNotDistinct => "BatchEntryIdsNotDistinct",
            K::BatchRequestTooLong => "BatchRequestTooLong",
            K::EmptyBatchRequest => "EmptyBatchRequest",
            K::InvalidBatchEntryId => "InvalidBatchEntryId",
            K::TooManyEntriesInBatchRequest => "TooManyEntriesInBatchRequest",
            K::UnsupportedOperation => "UnsupportedOperation",
            K::OverLimit => "OverLimit",
            K::ResourceNotFound => "ResourceNotFoundException",
            K::InvalidClientTokenId => "InvalidClientTokenId",
            K::SignatureDoesNotMatch => "SignatureDoesNotMatch",
            K::AccessDenied => "AccessDeniedException",
            K::RequestThrottled => "RequestThrottled",
            K::MalformedRequest => "InvalidParameterValueException",
            K::RequestTooLarge => "RequestEntityTooLarge",
            K::ServiceUnavailable => "ServiceUnavailable",
            K::InternalFailure => "InternalFailure",
        }
    }

    /// The query-protocol error code (`Error.Code`, first half of `x-amzn-query-error`).
    pub fn code(self) -> &'static str {
        use ErrorKind as K;
        match self {
            K::QueueDoesNotExist => "AWS.SimpleQueueService.NonExistentQueue",
            K::QueueNameExists => "QueueAlreadyExists",
            K::InvalidAttributeName => "InvalidAttributeName",
            K::InvalidAttributeValue => "InvalidAttributeValue",
            K::InvalidParameterValue | K::MalformedRequest => "InvalidParameterValue",
            K::MissingParameter => "MissingParameter",
            K::InvalidMessageContents => "InvalidMessageContents",
            K::ReceiptHandleIsInvalid => "ReceiptHandleIsInvalid",
            K::MessageNotInflight => "AWS.SimpleQueueService.MessageNotInflight",
            K::PurgeQueueInProgress => "AWS.SimpleQueueService.PurgeQueueInProgress",
            K::BatchEntryIdsNotDistinct => "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
            K::BatchRequestTooLong => "AWS.SimpleQueueService.BatchRequestTooLong",
            K::EmptyBatchRequest => "AWS.SimpleQueueService.EmptyBatchRequest",
            K::InvalidBatchEntryId => "AWS.SimpleQueueService.InvalidBatchEntryId",
            K::TooManyEntriesInBatchRequest => {
                "AWS.SimpleQueueService.TooManyEntriesInBatchRequest"
            }
            K::UnsupportedOperation => "AWS.SimpleQueueService.UnsupportedOperation",
            K::OverLimit => "OverLimit",
            K::ResourceNotFound => "ResourceNotFoundException",
            K::InvalidClientTokenId => "InvalidClientTokenId",
            K::SignatureDoesNotMatch => "SignatureDoesNotMatch",
            K::AccessDenied => "AccessDenied",
            K::RequestThrottled => "RequestThrottled",
            K::RequestTooLarge => "RequestEntityTooLarge",
            K::ServiceUnavailable => "ServiceUnavailable",
            K::InternalFailure => "InternalFailure",
        }
    }

    /// The HTTP status.
    pub fn status(self) -> u16 {
        use ErrorKind as K;
        match self {
            K::PurgeQueueInProgress
            | K::OverLimit
            | K::InvalidClientTokenId
            | K::SignatureDoesNotMatch
            | K::AccessDenied => 403,
            K::ResourceNotFound => 404,
            K::RequestTooLarge => 413,
            K::ServiceUnavailable => 503,
            K::InternalFailure => 500,
            _ => 400,
        }
    }

    /// `Sender` for client faults, `Receiver` for server faults.
    pub fn fault(self) -> &'static str {
        if self.status() >= 500 {
            "Receiver"
        } else {
            "Sender"
        }
    }
}

/// An SQS error answer. Refused requests change nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqsError {
    /// What kind.
    pub kind: ErrorKind,
    /// The human-readable message.
    pub message: String,
}

impl SqsError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        SqsError {
            kind,
            message: message.into(),
        }
    }

    /// `QueueDoesNotExist` with the AWS wording.
    pub fn no_queue() -> Self {
        SqsError::new(
            ErrorKind::QueueDoesNotExist,
            "The specified queue does not exist.",
        )
    }

    /// `MissingParameter` naming the parameter.
    pub fn missing(param: &str) -> Self {
        SqsError::new(
            ErrorKind::MissingParameter,
            format!("The request must contain the parameter {param}."),
        )
    }

    /// `InvalidParameterValue` naming the parameter, its value and the reason.
    pub fn invalid_param(param: &str, value: impl std::fmt::Display, why: &str) -> Self {
        SqsError::new(
            ErrorKind::InvalidParameterValue,
            format!("Value {value} for parameter {param} is invalid. Reason: {why}"),
        )
    }

    /// `InvalidAttributeValue` for a queue attribute.
    pub fn invalid_attr(name: &str, why: &str) -> Self {
        SqsError::new(
            ErrorKind::InvalidAttributeValue,
            format!("Invalid value for the parameter {name}. Reason: {why}"),
        )
    }
}

impl From<BrokerError> for SqsError {
    fn from(e: BrokerError) -> Self {
        match e {
            BrokerError::InvalidName(n) => SqsError::new(
                ErrorKind::InvalidParameterValue,
                format!("Invalid queue name: {n}"),
            ),
            BrokerError::InvalidPolicy(p) => {
                SqsError::new(ErrorKind::InvalidAttributeValue, p.to_string())
            }
            BrokerError::InvalidRequest { field, why } => SqsError::new(
                ErrorKind::InvalidParameterValue,
                format!("Value for parameter {field} is invalid. Reason: {why}"),
            ),
            BrokerError::MessageTooLarge { limit, .. } => SqsError::new(
                ErrorKind::InvalidParameterValue,
                format!(
                    "One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes."
                ),
            ),
            BrokerError::ShuttingDown => SqsError::new(
                ErrorKind::ServiceUnavailable,
                "The service is shutting down; retry against a running server.",
            ),
            BrokerError::Unauthenticated(why) => SqsError::new(
                ErrorKind::InvalidClientTokenId,
                format!("The security token included in the request is invalid: {why}"),
            ),
            BrokerError::TokenRevoked => SqsError::new(
                ErrorKind::InvalidClientTokenId,
                "The security token was revoked while the request was running.",
            ),
            e @ BrokerError::Forbidden { .. } => SqsError::new(
                ErrorKind::AccessDenied,
                format!("Access to the resource is denied: {e}"),
            ),
            e @ BrokerError::RateLimited { .. } => {
                SqsError::new(ErrorKind::RequestThrottled, e.to_string())
            }
            other => match other.storage() {
                Some(s) => from_storage(&other, s),
                None => internal(&other),
            },
        }
    }
}

fn from_storage(e: &BrokerError, s: Storage) -> SqsError {
    match s {
        Storage::QueueNotFound { .. } => SqsError::no_queue(),
        Storage::QueueExists => SqsError::new(
            ErrorKind::QueueNameExists,
            "A queue already exists with the same name and a different value for an attribute.",
        ),
        Storage::LockLost => SqsError::new(
            ErrorKind::MessageNotInflight,
            "The message referred to is not in flight.",
        ),
        // SQS: "the visibility timeout for a message can't exceed 12 hours from the time
        // of the ReceiveMessage"; a longer one is an invalid VisibilityTimeout.
        Storage::LockCapExceeded {
            cap_ms,
            remaining_ms,
        } => SqsError::new(
            ErrorKind::InvalidParameterValue,
            format!(
                "Value for parameter VisibilityTimeout is invalid. Reason: Total \
                 VisibilityTimeout for the message is beyond the limit [{} seconds]; {} \
                 seconds remain since the message was received.",
                cap_ms / 1_000,
                remaining_ms / 1_000
            ),
        ),
        Storage::MessageNotFound => SqsError::new(
            ErrorKind::ReceiptHandleIsInvalid,
            "The input receipt handle is invalid.",
        ),
        Storage::Unavailable | Storage::Poisoned => {
            tracing::warn!(error = %e, "storage unavailable");
            SqsError::new(
                ErrorKind::ServiceUnavailable,
                "The service is temporarily unavailable; retry.",
            )
        }
        Storage::SessionRequired | Storage::SessionNotAllowed => SqsError::new(
            ErrorKind::UnsupportedOperation,
            format!("{e}: session queues are served by the native API only."),
        ),
        _ => internal(e),
    }
}

/// An internal error: logged with its chain, answered generically.
pub fn internal(e: &dyn std::error::Error) -> SqsError {
    let mut chain = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        chain.push_str(": ");
        chain.push_str(&s.to_string());
        src = s.source();
    }
    tracing::error!(error = %chain, "internal error in the SQS endpoint");
    SqsError::new(
        ErrorKind::InternalFailure,
        "The request processing has failed because of an unknown error, exception or failure.",
    )
}

/// Result of an SQS action.
pub type SqsResult<T> = Result<T, SqsError>;
