//! Transactions ([`redrive_store::transaction`]): the group is one SQL transaction. Each
//! operation is the single operation's own function (`messages::enqueue`, `settle`,
//! `cancel_scheduled`) on the same transaction, so each sees what the ones before it
//! wrote and takes the row locks it takes alone (a deadlock with another group is
//! PostgreSQL's to detect: the transaction is run again from the start, as every write
//! is). The first refusal ends the transaction with an error
//! ([`transaction::refused`]), which rolls it back: nothing of the group remains.

use redrive_core::Timestamp;
use redrive_store::skeleton::columns::invariant;
use redrive_store::transaction::{self, TransactionOutcome, TxApplied, TxOperation};
use redrive_store::{StoreError, StoreResult};

use crate::messages;
use crate::pool::Db;

/// Applies `operations` in order; the first refusal is the transaction's error (see the
/// module docs).
pub(crate) async fn apply(
    db: &Db<'_>,
    operations: &[TxOperation],
    now: Timestamp,
) -> StoreResult<TransactionOutcome> {
    let mut out = TransactionOutcome {
        results: Vec::with_capacity(operations.len()),
        effects: Default::default(),
    };
    for (i, op) in operations.iter().enumerate() {
        let applied = apply_one(db, op, now, &mut out)
            .await
            .map_err(|e| transaction::refused(i, e))?;
        out.results.push(applied);
    }
    Ok(out)
}

async fn apply_one(
    db: &Db<'_>,
    op: &TxOperation,
    now: Timestamp,
    out: &mut TransactionOutcome,
) -> StoreResult<TxApplied> {
    match op {
        TxOperation::Send { queue, message } => {
            let mut sent = messages::enqueue(db, queue, std::slice::from_ref(message), now).await?;
            sent.pop().map(TxApplied::Sent).ok_or_else(missing)
        }
        TxOperation::Settle { queue, settlement } => {
            let mut settled =
                messages::settle(db, queue, std::slice::from_ref(settlement), now).await?;
            out.effects.extend(std::mem::take(&mut settled.effects));
            match settled.results.pop() {
                Some(r) => r.map(TxApplied::Settled),
                None => Err(missing()),
            }
        }
        TxOperation::CancelScheduled { queue, sequence } => {
            messages::cancel_scheduled(db, queue, *sequence, now).await?;
            Ok(TxApplied::Cancelled {
                sequence: *sequence,
            })
        }
    }
}

/// An operation that answered without its result (a bug): the group is rolled back.
fn missing() -> StoreError {
    invariant("an operation of a transaction answered without its result")
}
