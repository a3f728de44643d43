//! Transactions: `POST /v1/transactions` applies a group of sends, settlements and
//! cancels of scheduled messages, on one queue or several, all together or not at all.
//!
//! A refused group answers the problem of the operation that refused it, with that
//! operation's own code (`lock_lost`, `queue_not_found`, `message_too_large`,
//! `forbidden`…) and two more members: `operation`, its index in `operations` from 0, and
//! `kind`, its kind. Whatever the problem, nothing of the group was applied.

use serde::{Deserialize, Serialize};

use crate::message::SendMessage;

/// Most operations in one transaction.
pub const MAX_TRANSACTION_OPERATIONS: usize = 100;

/// Largest body of `POST /v1/transactions`, in bytes (32 MiB): a group whose messages
/// are larger is refused (413 `message_too_large`) before it is read; send such messages
/// on their own.
pub const MAX_TRANSACTION_REQUEST_BYTES: usize = 32 * 1024 * 1024;

/// One operation, by its `kind`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum TransactionOperation {
    /// Send a message to a queue (a subscription's queue too), as
    /// `POST /v1/queues/{queue}/messages` would.
    Send {
        /// The queue.
        queue: String,
        /// The message.
        message: SendMessage,
    },
    /// Complete a delivery (remove the message).
    Complete {
        /// The queue of the delivery.
        queue: String,
        /// The delivery's lock token.
        lock_token: String,
    },
    /// Abandon a delivery (visible again after `delay_ms`, or the queue's backoff).
    Abandon {
        /// The queue of the delivery.
        queue: String,
        /// The delivery's lock token.
        lock_token: String,
        /// Delay before redelivery (at most 7 days).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        delay_ms: Option<u64>,
    },
    /// Defer a delivery (receivable by sequence number only).
    Defer {
        /// The queue of the delivery.
        queue: String,
        /// The delivery's lock token.
        lock_token: String,
    },
    /// Dead-letter a delivery with a reason.
    DeadLetter {
        /// The queue of the delivery.
        queue: String,
        /// The delivery's lock token.
        lock_token: String,
        /// Reason code (1 to 256 characters; not one of the broker's own).
        reason: String,
        /// Description (at most 4096 characters).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        /// The consumer that applied the reason.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        consumer: Option<String>,
        /// The version of the consumer's classification rule.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule_version: Option<String>,
    },
    /// Extend a delivery's lock by `lock_duration_ms` (default: the queue's).
    Renew {
        /// The queue of the delivery.
        queue: String,
        /// The delivery's lock token.
        lock_token: String,
        /// New lock duration from now.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lock_duration_ms: Option<u64>,
    },
    /// Cancel a scheduled message.
    CancelScheduled {
        /// The queue.
        queue: String,
        /// The scheduled message's sequence number.
        sequence_number: i64,
    },
}

impl TransactionOperation {
    /// The kind, as the wire names it.
    pub fn kind(&self) -> OperationKind {
        match self {
            TransactionOperation::Send { .. } => OperationKind::Send,
            TransactionOperation::Complete { .. } => OperationKind::Complete,
            TransactionOperation::Abandon { .. } => OperationKind::Abandon,
            TransactionOperation::Defer { .. } => OperationKind::Defer,
            TransactionOperation::DeadLetter { .. } => OperationKind::DeadLetter,
            TransactionOperation::Renew { .. } => OperationKind::Renew,
            TransactionOperation::CancelScheduled { .. } => OperationKind::CancelScheduled,
        }
    }

    /// The queue it acts on.
    pub fn queue(&self) -> &str {
        match self {
            TransactionOperation::Send { queue, .. }
            | TransactionOperation::Complete { queue, .. }
            | TransactionOperation::Abandon { queue, .. }
            | TransactionOperation::Defer { queue, .. }
            | TransactionOperation::DeadLetter { queue, .. }
            | TransactionOperation::Renew { queue, .. }
            | TransactionOperation::CancelScheduled { queue, .. } => queue,
        }
    }
}

/// The kind of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperationKind {
    /// A send.
    Send,
    /// A completion.
    Complete,
    /// An abandon.
    Abandon,
    /// A deferral.
    Defer,
    /// A dead-letter settlement.
    DeadLetter,
    /// A lock renewal.
    Renew,
    /// A cancel of a scheduled message.
    CancelScheduled,
}

impl OperationKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationKind::Send => "send",
            OperationKind::Complete => "complete",
            OperationKind::Abandon => "abandon",
            OperationKind::Defer => "defer",
            OperationKind::DeadLetter => "dead_letter",
            OperationKind::Renew => "renew",
            OperationKind::CancelScheduled => "cancel_scheduled",
        }
    }
}

/// Body of `POST /v1/transactions`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TransactionRequest {
    /// 1 to [`MAX_TRANSACTION_OPERATIONS`] operations, applied in this order.
    pub operations: Vec<TransactionOperation>,
}

/// What one operation did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationResult {
    /// Its kind.
    pub kind: OperationKind,
    /// Its queue.
    pub queue: String,
    /// The message's id (sends and settlements).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// The message's sequence number (for a duplicate send, the original's).
    pub sequence_number: i64,
    /// A send: true when the id was already seen inside the queue's duplicate-detection
    /// window; nothing was stored (the group was applied all the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate: Option<bool>,
    /// A renewal: the new lock expiry (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked_until: Option<String>,
    /// A settlement that dead-lettered the message: the record's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_id: Option<String>,
}

/// Answer to an applied transaction.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TransactionResponse {
    /// The transaction's id (`tx_…`), as the audit log's entries name it.
    pub transaction_id: String,
    /// One result per operation, in order.
    pub results: Vec<OperationResult>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_read_by_kind_and_refuse_unknown_fields() {
        let req: TransactionRequest = serde_json::from_value(serde_json::json!({
            "operations": [
                {"kind": "complete", "queue": "orders", "lock_token": "lk_1"},
                {"kind": "send", "queue": "payments", "message": {"body": "charge"}},
                {"kind": "cancel_scheduled", "queue": "orders", "sequence_number": 7},
                {"kind": "dead_letter", "queue": "orders", "lock_token": "lk_2",
                 "reason": "Invalid"},
            ]
        }))
        .unwrap();
        let kinds: Vec<&str> = req.operations.iter().map(|o| o.kind().as_str()).collect();
        assert_eq!(
            kinds,
            ["complete", "send", "cancel_scheduled", "dead_letter"]
        );
        assert_eq!(req.operations[1].queue(), "payments");

        let unknown = serde_json::from_value::<TransactionRequest>(serde_json::json!({
            "operations": [{"kind": "complete", "queue": "q", "lock_token": "t", "x": 1}]
        }));
        assert!(unknown.is_err());
        let no_kind = serde_json::from_value::<TransactionRequest>(serde_json::json!({
            "operations": [{"queue": "q", "lock_token": "t"}]
        }));
        assert!(no_kind.is_err());
    }
}
