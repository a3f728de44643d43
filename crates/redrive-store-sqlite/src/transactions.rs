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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use redrive_core::QueuePolicy;
    use redrive_store::{SettleAction, Settlement, Store, TxApplied};
    use redrive_store_conformance::{T0, msg, name};

    use super::*;
    use crate::{SqliteOptions, SqliteStore};

    fn send(queue: &str, id: &str) -> TxOperation {
        TxOperation::Send {
            queue: name(queue),
            message: msg(id, id.as_bytes()),
        }
    }

    fn complete(queue: &str, token: &str) -> TxOperation {
        TxOperation::Settle {
            queue: name(queue),
            settlement: Settlement {
                lock_token: token.to_owned(),
                action: SettleAction::Complete,
            },
        }
    }

    /// A refused group inside a group commit leaves nothing, whether it is the commit's
    /// first job (the transaction is rolled back and the next job begins another) or a
    /// later one (its savepoint is); the other jobs of the commit stand.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refused_group_inside_a_group_commit_leaves_nothing_and_the_others_stand() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(
            SqliteStore::open(&dir.path().join("redrive.db"), SqliteOptions::default()).unwrap(),
        );
        for q in ["orders", "payments"] {
            store
                .create_queue(&name(q), &QueuePolicy::default(), T0)
                .await
                .unwrap();
        }
        store
            .enqueue(&name("orders"), vec![msg("o1", b"o1")], T0)
            .await
            .unwrap();
        let held = store
            .receive(redrive_store_conformance::params(
                &name("orders"),
                1,
                30_000,
                T0,
                None,
            ))
            .await
            .unwrap()
            .deliveries;
        let token = held[0].lock_token.clone();
        let (jobs, commits) = store.writer.counters();

        // The writer waits between groups until `release` goes, so the four jobs below
        // are one group, in this order.
        let (release, wait) = std::sync::mpsc::channel::<()>();
        store.writer.raw(move |_| {
            let _ = wait.recv();
        });
        let s = Arc::clone(&store);
        let token_for_group = token.clone();
        let group = tokio::spawn(async move {
            let token = token_for_group;
            let first_refused = s.apply_transaction(
                vec![send("payments", "ghost-1"), complete("orders", "lk_bogus")],
                T0,
            );
            let payments = name("payments");
            let plain = s.enqueue(&payments, vec![msg("plain", b"p")], T0);
            let later_refused = s.apply_transaction(
                vec![
                    complete("orders", &token),
                    send("payments", "ghost-2"),
                    complete("orders", &token),
                ],
                T0,
            );
            let applied =
                s.apply_transaction(vec![complete("orders", &token), send("payments", "f1")], T0);
            tokio::join!(first_refused, plain, later_refused, applied)
        });
        while store.writer.counters().0 < jobs + 4 {
            tokio::task::yield_now().await;
        }
        drop(release);
        let (first_refused, plain, later_refused, applied) = group.await.unwrap();

        let first = first_refused.unwrap().unwrap_err();
        assert_eq!(first.operation, 1);
        assert!(matches!(first.error, StoreError::LockLost));
        plain.unwrap();
        let later = later_refused.unwrap().unwrap_err();
        assert_eq!(
            later.operation, 2,
            "the lock its own first operation settled"
        );
        let applied = applied.unwrap().unwrap();
        assert!(matches!(applied.results[0], TxApplied::Settled(_)));
        assert_eq!(store.writer.counters().1, commits + 1, "one group commit");
        assert!(!store.is_poisoned());

        let on = |q: &'static str| {
            let s = Arc::clone(&store);
            async move {
                s.peek(&name(q), 1, 100, T0)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|m| m.message_id)
                    .collect::<Vec<_>>()
            }
        };
        assert!(on("orders").await.is_empty());
        assert_eq!(on("payments").await, ["plain", "f1"]);
    }
}
