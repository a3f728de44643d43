//! Transactions: a group of sends, settlements and cancels of scheduled messages, on one
//! queue or several, that a backend applies in one database transaction
//! ([`Store::apply_transaction`](crate::Store::apply_transaction)): all of them or none.
//!
//! Each operation is decided exactly as its single counterpart decides it (`enqueue`,
//! `settle`, `cancel_scheduled`), in the group's order, each seeing what the ones before
//! it wrote. The first one refused ends the group: nothing of it is written, and the
//! answer names that operation ([`TransactionRefusal`]).
//!
//! A backend carries a refusal out of its transaction as an error (so that its usual
//! rollback runs): [`refused`] wraps it, [`take_refusal`] unwraps it once the transaction
//! is rolled back. Storage failures (`Unavailable`, `Poisoned`, `Backend`) are never
//! refusals: they pass through as they are.

use redrive_core::EntityName;

use crate::{Effects, Enqueued, NewMessage, Settled, Settlement, StoreError, StoreErrorKind};

/// One operation of a transaction.
#[derive(Debug, Clone, PartialEq)]
pub enum TxOperation {
    /// Stores a message as [`Store::enqueue`](crate::Store::enqueue) would (a batch of
    /// one): sequence number, duplicate detection, sessions. A duplicate inside the
    /// queue's window is accepted and not stored again (its result says so); it does not
    /// refuse the group.
    Send {
        /// The queue.
        queue: EntityName,
        /// The message, its defaults filled in.
        message: NewMessage,
    },
    /// Settles a locked delivery as [`Store::settle`](crate::Store::settle) would (a
    /// call of one item); its refusal (`LockLost`, `DeadLetterTargetMissing`,
    /// `LockCapExceeded`) refuses the group.
    Settle {
        /// The queue of the delivery.
        queue: EntityName,
        /// The lock token and what to do.
        settlement: Settlement,
    },
    /// Removes a scheduled message as
    /// [`Store::cancel_scheduled`](crate::Store::cancel_scheduled) would.
    CancelScheduled {
        /// The queue.
        queue: EntityName,
        /// The scheduled message's sequence number.
        sequence: i64,
    },
}

impl TxOperation {
    /// The queue the operation acts on.
    pub fn queue(&self) -> &EntityName {
        match self {
            TxOperation::Send { queue, .. }
            | TxOperation::Settle { queue, .. }
            | TxOperation::CancelScheduled { queue, .. } => queue,
        }
    }
}

/// What one operation of an applied transaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxApplied {
    /// The message was stored, or was a duplicate inside the window (`duplicate`).
    Sent(Enqueued),
    /// The delivery was settled.
    Settled(Settled),
    /// The scheduled message with this sequence number was removed.
    Cancelled {
        /// Its sequence number.
        sequence: i64,
    },
}

/// A transaction that was applied whole.
#[derive(Debug, Default)]
pub struct TransactionOutcome {
    /// One result per operation, in order.
    pub results: Vec<TxApplied>,
    /// Side effects of the settlements (dead letters, woken queues).
    pub effects: Effects,
}

impl TransactionOutcome {
    /// The queues on which something became receivable: those of stored (not duplicate)
    /// sends, and the effects' woken queues; each once.
    pub fn woken<'a>(&'a self, ops: &'a [TxOperation]) -> Vec<&'a str> {
        let mut out: Vec<&str> = Vec::new();
        let sent = ops.iter().zip(&self.results).filter_map(|(op, r)| match r {
            TxApplied::Sent(e) if !e.duplicate => Some(op.queue().as_str()),
            _ => None,
        });
        for q in sent.chain(self.effects.woken.iter().map(EntityName::as_str)) {
            if !out.contains(&q) {
                out.push(q);
            }
        }
        out
    }
}

/// The operation that refused a transaction; nothing of the group was written.
#[derive(Debug, thiserror::Error)]
#[error("operation {operation} of the transaction was refused: {error}")]
pub struct TransactionRefusal {
    /// Its index in the group, from 0.
    pub operation: usize,
    /// Why, as its single counterpart would have answered.
    #[source]
    pub error: StoreError,
}

/// Whether `e` is a refusal (changed nothing, the caller's to fix) rather than a failure
/// of the storage.
pub fn is_refusal(e: &StoreError) -> bool {
    !matches!(
        e.kind(),
        StoreErrorKind::Unavailable | StoreErrorKind::Poisoned | StoreErrorKind::Other
    )
}

/// `e`, the answer of operation `operation`, as the error that ends the backend's
/// transaction: a refusal is wrapped (see [`take_refusal`]), a storage failure passes
/// through as it is.
pub fn refused(operation: usize, e: StoreError) -> StoreError {
    if is_refusal(&e) {
        StoreError::backend(TransactionRefusal {
            operation,
            error: e,
        })
    } else {
        e
    }
}

/// The refusal [`refused`] wrapped, once the backend rolled its transaction back; any
/// other error stays an error.
pub fn take_refusal(e: StoreError) -> Result<TransactionRefusal, StoreError> {
    match e {
        StoreError::Backend { source } => match source.downcast::<TransactionRefusal>() {
            Ok(r) => Ok(*r),
            Err(source) => Err(StoreError::Backend { source }),
        },
        other => Err(other),
    }
}

/// The answer of [`Store::apply_transaction`](crate::Store::apply_transaction) from the
/// backend's transaction result: the outcome, or the refusal, or the storage error.
pub fn settle_refusal(
    result: Result<TransactionOutcome, StoreError>,
) -> Result<Result<TransactionOutcome, TransactionRefusal>, StoreError> {
    match result {
        Ok(outcome) => Ok(Ok(outcome)),
        Err(e) => take_refusal(e).map(Err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_crosses_the_rollback_and_a_failure_stays_one() {
        let wrapped = refused(3, StoreError::LockLost);
        let back = take_refusal(wrapped).expect("a refusal");
        assert_eq!(back.operation, 3);
        assert!(matches!(back.error, StoreError::LockLost));

        let poisoned = refused(1, StoreError::Poisoned);
        assert!(matches!(take_refusal(poisoned), Err(StoreError::Poisoned)));
        let backend = StoreError::backend(std::io::Error::other("disk"));
        assert!(matches!(
            take_refusal(refused(0, backend)),
            Err(StoreError::Backend { .. })
        ));
    }
}
