//! Transactions ([`redrive_store::transaction`]): the group is one writer job, so it runs
//! inside the group commit's transaction like any other write, in its own savepoint when
//! it is not the transaction's first job. Each operation is the single operation's own
//! function (`messages::enqueue`, `settle`, `cancel_scheduled`) on the same connection, so
//! each sees what the ones before it wrote. The first refusal ends the job with an error
//! ([`transaction::refused`]): the writer rolls the job back (its savepoint, or the whole
//! transaction when it was the first job) and nothing of the group remains. A commit that
//! fails poisons the store as for every job: no operation of the group is acknowledged.

use redrive_core::Timestamp;
use redrive_store::skeleton::columns::invariant;
use redrive_store::transaction::{self, TransactionOutcome, TxApplied, TxOperation};
use redrive_store::{StoreError, StoreResult};

use crate::messages;
use crate::writer::Tx;

/// Applies `operations` in order; the first refusal is the job's error (see the module
/// docs).
pub(crate) fn apply(
    tx: &mut Tx<'_>,
    operations: Vec<TxOperation>,
    now: Timestamp,
) -> StoreResult<TransactionOutcome> {
    let mut out = TransactionOutcome {
        results: Vec::with_capacity(operations.len()),
        effects: Default::default(),
    };
    for (i, op) in operations.into_iter().enumerate() {
        let applied = apply_one(tx, op, now, &mut out).map_err(|e| transaction::refused(i, e))?;
        out.results.push(applied);
    }
    Ok(out)
}

fn apply_one(
    tx: &mut Tx<'_>,
    op: TxOperation,
    now: Timestamp,
    out: &mut TransactionOutcome,
) -> StoreResult<TxApplied> {
    match op {
        TxOperation::Send { queue, message } => {
            let mut sent = messages::enqueue(tx, &queue, vec![message], now)?;
            sent.pop().map(TxApplied::Sent).ok_or_else(missing)
        }
        TxOperation::Settle { queue, settlement } => {
            let mut settled = messages::settle(tx, &queue, vec![settlement], now)?;
            out.effects.extend(std::mem::take(&mut settled.effects));
            match settled.results.pop() {
                Some(r) => r.map(TxApplied::Settled),
                None => Err(missing()),
            }
        }
        TxOperation::CancelScheduled { queue, sequence } => {
            messages::cancel_scheduled(tx, &queue, sequence, now)?;
            Ok(TxApplied::Cancelled { sequence })
        }
    }
}

/// An operation that answered without its result (a bug): the group is rolled back.
fn missing() -> StoreError {
    invariant("an operation of a transaction answered without its result")
}
