//! Transactions (seed 004, "Atomic operations with transactions"): a group of sends,
//! settlements of locked deliveries and cancels of scheduled messages, on one queue or
//! several, applied all together or not at all. The case the seed names: complete the
//! original and send its follow-up, so that a crash between the two can neither lose the
//! work nor duplicate it.
//!
//! A group holds 1 to [`MAX_TRANSACTION_OPERATIONS`] operations. Each is authorized as its
//! single counterpart is (a send needs `producer` on its queue, a settlement `consumer`,
//! a cancel `producer`), then checked and filled in exactly as that counterpart checks
//! and fills it (message bounds, the queue's size limit and sessions, ids and expiry;
//! settlement reasons, delays and lock durations); the first that is refused refuses the
//! group before anything is written ([`TransactionError`] names it). The store then
//! applies the group in one database transaction
//! ([`Store::apply_transaction`](redrive_store::Store::apply_transaction)): a lock lost,
//! an unknown queue, a message no longer scheduled refuses the whole group there, and
//! nothing of it remains. A send whose id is a duplicate inside its queue's detection
//! window is accepted and not stored again (as Service Bus does), without refusing the
//! group; its result says `duplicate`.
//!
//! Audited like its parts: once applied, one entry per operation (`message.send`,
//! `message.complete`, `message.abandon`, `message.defer`, `message.dead_letter`,
//! `message.renew`, `message.cancel_scheduled`) and one `transaction` entry naming the
//! parts, all appended together; a refused group is one `transaction` entry with the
//! refused operation and its error. An applied group whose entries cannot be written
//! still answers applied (it committed; an error would have the caller apply it again):
//! the failure is logged and counted (`redrive_audit_failures_total`).

use std::collections::HashMap;

use redrive_core::access::Operation;
use redrive_core::id::LockToken;
use redrive_core::{EntityName, QueuePolicy, Timestamp, id, policy};
use redrive_store::{
    AuditFields, NewMessage, SettleAction, Settlement, TransactionOutcome, TxOperation,
};

pub use redrive_store::TxApplied;

use crate::messages::{BROKER_REASONS, LockBounds, Outgoing, Settle, check_message};
use crate::metrics::Counter;
use crate::{Actor, Broker, BrokerError, BrokerResult};

/// Most operations in one transaction (Service Bus's limit on a transaction).
pub const MAX_TRANSACTION_OPERATIONS: usize = 100;

/// One operation of a transaction, as an interface hands it to the broker.
#[derive(Debug, Clone, PartialEq)]
pub enum TxOp {
    /// A message to send to `queue` (a subscription's queue too), as
    /// [`Broker::send`] takes it.
    Send {
        /// The queue.
        queue: String,
        /// The message.
        message: Outgoing,
    },
    /// A settlement of the delivery `lock_token` of `queue`, as [`Broker::settle`] takes
    /// it.
    Settle {
        /// The queue of the delivery.
        queue: String,
        /// The delivery's lock token.
        lock_token: String,
        /// What to do.
        action: Settle,
    },
    /// A cancel of the scheduled message `sequence` of `queue`.
    CancelScheduled {
        /// The queue.
        queue: String,
        /// The scheduled message's sequence number.
        sequence: i64,
    },
}

impl TxOp {
    /// The operation's kind, as the wire names it: `send`, `complete`, `abandon`,
    /// `defer`, `dead_letter`, `renew`, `cancel_scheduled`.
    pub fn kind(&self) -> &'static str {
        match self {
            TxOp::Send { .. } => "send",
            TxOp::Settle { action, .. } => match action {
                Settle::Complete => "complete",
                Settle::Abandon { .. } => "abandon",
                Settle::Defer => "defer",
                Settle::DeadLetter { .. } => "dead_letter",
                Settle::Renew { .. } => "renew",
            },
            TxOp::CancelScheduled { .. } => "cancel_scheduled",
        }
    }

    /// The queue it acts on, as given.
    pub fn queue(&self) -> &str {
        match self {
            TxOp::Send { queue, .. }
            | TxOp::Settle { queue, .. }
            | TxOp::CancelScheduled { queue, .. } => queue,
        }
    }

    /// What its single counterpart's route needs.
    fn permission(&self) -> Operation {
        match self {
            TxOp::Send { .. } => Operation::Send,
            TxOp::Settle { .. } => Operation::Settle,
            TxOp::CancelScheduled { .. } => Operation::CancelScheduled,
        }
    }
}

/// A transaction that was not applied: nothing of it was written. `operation` and `kind`
/// name the operation that refused it (its index from 0, its kind), `error` says why as
/// its single counterpart would have answered. A group refused as a whole (empty, too
/// many operations) names no operation; a failure of the storage names none either.
#[derive(Debug, thiserror::Error)]
#[error("{}", refusal_text(self))]
pub struct TransactionError {
    /// The refused operation's index in the group, when one was refused.
    pub operation: Option<usize>,
    /// Its kind ([`TxOp::kind`]).
    pub kind: Option<&'static str>,
    /// Why.
    #[source]
    pub error: BrokerError,
}

fn refusal_text(e: &TransactionError) -> String {
    match (e.operation, e.kind) {
        (Some(i), Some(kind)) => format!(
            "operation {i} ({kind}) was refused, so nothing of the transaction was applied: {}",
            e.error
        ),
        _ => e.error.to_string(),
    }
}

impl TransactionError {
    fn whole(error: BrokerError) -> Self {
        TransactionError {
            operation: None,
            kind: None,
            error,
        }
    }

    fn at(i: usize, op: &TxOp, error: impl Into<BrokerError>) -> Self {
        TransactionError {
            operation: Some(i),
            kind: Some(op.kind()),
            error: error.into(),
        }
    }
}

/// An applied transaction.
#[derive(Debug, Clone)]
pub struct TransactionApplied {
    /// Its id (`tx_…`), in the audit log's entries.
    pub id: String,
    /// One result per operation, in order.
    pub results: Vec<TxApplied>,
}

// ---- the checks a transaction's operations share with their single counterparts ----

/// Checks a settlement, alone ([`Broker::settle_with`]) or in a transaction (native
/// bounds): an application's dead-letter reason and description, its classifier, an
/// abandon's delay, a renewal's lock duration within `bounds`.
pub(crate) fn check_settlement(action: &SettleAction, bounds: LockBounds) -> BrokerResult<()> {
    match action {
        SettleAction::Renew { lock_ms, .. } => {
            bounds.check(*lock_ms)?;
        }
        SettleAction::DeadLetter {
            reason,
            description,
            by_broker,
            classifier,
        } => {
            for (field, value) in [
                ("consumer", &classifier.consumer),
                ("rule_version", &classifier.rule_version),
            ] {
                if let Some(v) = value
                    && let Err(why) = redrive_core::dead_letter::check_classifier(v)
                {
                    return Err(BrokerError::invalid(field, why));
                }
            }
            if reason.is_empty() || reason.len() > 256 {
                return Err(BrokerError::invalid(
                    "reason",
                    "must be 1 to 256 characters",
                ));
            }
            if !by_broker && BROKER_REASONS.contains(&reason.as_str()) {
                return Err(BrokerError::invalid(
                    "reason",
                    format!(
                        "`{reason}` is a reason code the broker writes; \
                         an application's dead letter needs a reason of its own"
                    ),
                ));
            }
            if description.as_ref().is_some_and(|d| d.len() > 4096) {
                return Err(BrokerError::invalid(
                    "description",
                    "must be at most 4096 characters",
                ));
            }
        }
        SettleAction::Abandon {
            delay_ms: Some(d), ..
        } if *d > policy::MAX_DEDUP_WINDOW_MS => {
            return Err(BrokerError::invalid("delay_ms", "must be at most 7 days"));
        }
        _ => {}
    }
    Ok(())
}

/// The message to store for `m` on `queue`, alone ([`Broker::send`]) or in a transaction:
/// bounds and the queue's size limit, its session rule, a generated id, the expiry from
/// the message's time to live or the queue's default.
pub(crate) fn new_message(
    queue: &EntityName,
    policy: &QueuePolicy,
    m: Outgoing,
    now: Timestamp,
) -> BrokerResult<NewMessage> {
    check_message(queue, &m, policy.max_message_size)?;
    if policy.requires_session && m.session_id.is_none() {
        return Err(redrive_store::StoreError::SessionRequired {
            queue: queue.to_string(),
        }
        .into());
    }
    if m.ttl_ms == Some(0) {
        return Err(BrokerError::invalid("time_to_live_ms", "must be positive"));
    }
    let ttl = m.ttl_ms.or(policy.default_ttl_ms);
    let start = m.scheduled_at.map_or(now, |s| s.max(now));
    Ok(NewMessage {
        message_id: m.message_id.unwrap_or_else(id::new_message_id),
        body: m.body,
        content_type: m.content_type,
        properties: m.properties,
        correlation_id: m.correlation_id,
        session_id: m.session_id,
        message_type: m.message_type,
        intent: m.intent,
        valid_until: m.valid_until,
        scheduled_at: m.scheduled_at.filter(|s| *s > now),
        expires_at: ttl.map(|t| start.plus_millis(i64::try_from(t).unwrap_or(i64::MAX))),
    })
}

/// The audit action of an operation's kind.
fn audit_action(kind: &str) -> String {
    format!("message.{kind}")
}

impl Broker {
    /// Applies a transaction for `actor` (see the module docs): every operation, or none.
    #[tracing::instrument(level = "debug", skip_all, fields(operations = ops.len()))]
    pub async fn transaction(
        &self,
        ops: Vec<TxOp>,
        actor: &Actor,
    ) -> Result<TransactionApplied, TransactionError> {
        let tx_id = format!("tx_{:032x}", fastrand::u128(..));
        let kinds: Vec<String> = ops
            .iter()
            .enumerate()
            .map(|(i, op)| format!("{i}:{}:{}", op.kind(), op.queue()))
            .collect();
        let result = self.transaction_unaudited(&tx_id, ops, actor).await;
        let mut targets = vec![format!("id={tx_id}")];
        targets.extend(kinds);
        match result {
            Ok((applied, parts)) => {
                let mut entries = parts;
                entries.push(self.audit_fields(actor, "transaction", None, targets, "ok"));
                if let Err(e) = self.append_audit_entries(&entries).await {
                    // The group committed and stands: answering an error would have the
                    // caller apply it again. The log and the failure counter say what the
                    // audit log misses.
                    tracing::error!(error = %e, transaction = %tx_id, actor = %actor.id,
                        "audit entries of an applied transaction not written");
                    self.inner.metrics.audit_failures.inc();
                }
                Ok(applied)
            }
            Err(e) => {
                if let Some(i) = e.operation {
                    targets.push(format!("refused={i}"));
                }
                let outcome = format!("error:{}", e.error.code_hint());
                let fields = self.audit_fields(actor, "transaction", None, targets, &outcome);
                if let Err(audit) = self.append_audit_entries(&[fields]).await {
                    tracing::error!(error = %audit, transaction = %tx_id, actor = %actor.id,
                        "audit entry of a refused transaction not written");
                    self.inner.metrics.audit_failures.inc();
                }
                Err(e)
            }
        }
    }

    fn audit_fields(
        &self,
        actor: &Actor,
        action: &str,
        entity: Option<&str>,
        targets: Vec<String>,
        outcome: &str,
    ) -> AuditFields {
        AuditFields {
            at: self.now(),
            actor_id: actor.id.clone(),
            actor_name: actor.name.clone(),
            action: action.to_owned(),
            entity: entity.map(str::to_owned),
            targets,
            outcome: outcome.to_owned(),
            client: actor.client.clone(),
        }
    }

    async fn append_audit_entries(&self, entries: &[AuditFields]) -> BrokerResult<()> {
        self.inner.store.append_audit(entries).await?;
        self.inner
            .metrics
            .audit_entries
            .add(u64::try_from(entries.len()).unwrap_or(u64::MAX));
        Ok(())
    }

    /// The transaction without its `transaction` entry: the applied results and the
    /// audit entries of its parts.
    async fn transaction_unaudited(
        &self,
        tx_id: &str,
        ops: Vec<TxOp>,
        actor: &Actor,
    ) -> Result<(TransactionApplied, Vec<AuditFields>), TransactionError> {
        if ops.is_empty() {
            return Err(TransactionError::whole(BrokerError::invalid(
                "operations",
                "a transaction needs at least one operation",
            )));
        }
        if ops.len() > MAX_TRANSACTION_OPERATIONS {
            return Err(TransactionError::whole(BrokerError::invalid(
                "operations",
                format!("a transaction holds at most {MAX_TRANSACTION_OPERATIONS} operations"),
            )));
        }
        // Every operation is authorized before any is looked at further: a refusal names
        // the first one the caller may not do.
        for (i, op) in ops.iter().enumerate() {
            self.authorize(actor, op.permission(), Some(op.queue()))
                .await
                .map_err(|e| TransactionError::at(i, op, e))?;
        }
        let now = self.now();
        let mut policies: HashMap<String, QueuePolicy> = HashMap::new();
        let mut store_ops = Vec::with_capacity(ops.len());
        for (i, op) in ops.iter().enumerate() {
            let converted = self
                .prepare(op.clone(), &mut policies, now)
                .await
                .map_err(|e| TransactionError::at(i, op, e))?;
            store_ops.push(converted);
        }
        let outcome = match self
            .inner
            .store
            .apply_transaction(store_ops.clone(), now)
            .await
        {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(refusal)) => {
                let i = refusal.operation;
                return Err(match ops.get(i) {
                    Some(op) => TransactionError::at(i, op, refusal.error),
                    None => TransactionError::whole(refusal.error.into()),
                });
            }
            Err(e) => return Err(TransactionError::whole(e.into())),
        };
        self.transaction_applied(&ops, &store_ops, &outcome);
        let parts = ops
            .iter()
            .zip(&outcome.results)
            .map(|(op, r)| {
                let mut targets = match r {
                    TxApplied::Sent(e) => {
                        let mut t = vec![
                            format!("message_id={}", e.message_id),
                            format!("sequence={}", e.sequence),
                        ];
                        if e.duplicate {
                            t.push("duplicate=true".to_owned());
                        }
                        t
                    }
                    TxApplied::Settled(s) => {
                        let mut t = vec![
                            format!("message_id={}", s.message_id),
                            format!("sequence={}", s.sequence),
                        ];
                        if let Some(dl) = &s.dead_letter_id {
                            t.push(format!("dead_letter_id={dl}"));
                        }
                        t
                    }
                    TxApplied::Cancelled { sequence } => vec![format!("sequence={sequence}")],
                };
                targets.push(format!("transaction={tx_id}"));
                self.audit_fields(
                    actor,
                    &audit_action(op.kind()),
                    Some(op.queue()),
                    targets,
                    "ok",
                )
            })
            .collect();
        Ok((
            TransactionApplied {
                id: tx_id.to_owned(),
                results: outcome.results,
            },
            parts,
        ))
    }

    /// The store's operation for `op`, checked as its single counterpart checks it.
    async fn prepare(
        &self,
        op: TxOp,
        policies: &mut HashMap<String, QueuePolicy>,
        now: Timestamp,
    ) -> BrokerResult<TxOperation> {
        let name: EntityName = op.queue().parse()?;
        let policy = match policies.get(op.queue()) {
            Some(p) => p.clone(),
            None => {
                let p = self.inner.store.get_queue(&name).await?.policy;
                policies.insert(op.queue().to_owned(), p.clone());
                p
            }
        };
        Ok(match op {
            TxOp::Send { message, .. } => TxOperation::Send {
                message: new_message(&name, &policy, message, now)?,
                queue: name,
            },
            TxOp::Settle {
                lock_token, action, ..
            } => {
                let action = action.action(policy.lock_duration_ms);
                check_settlement(&action, LockBounds::Native)?;
                // A string no lock can have (over-long, a NUL) never reaches the store: it
                // is the lost lock a single settle answers for it.
                let lock_token = lock_token.parse::<LockToken>()?.into_string();
                TxOperation::Settle {
                    queue: name,
                    settlement: Settlement { lock_token, action },
                }
            }
            TxOp::CancelScheduled { sequence, .. } => TxOperation::CancelScheduled {
                queue: name,
                sequence,
            },
        })
    }

    /// Counts, logs and wakes for an applied group as its single operations would.
    fn transaction_applied(
        &self,
        ops: &[TxOp],
        store_ops: &[TxOperation],
        outcome: &TransactionOutcome,
    ) {
        let metrics = &self.inner.metrics;
        for (op, r) in ops.iter().zip(&outcome.results) {
            let queue = op.queue();
            match (op, r) {
                (_, TxApplied::Sent(e)) => {
                    let counter = if e.duplicate {
                        Counter::Duplicates
                    } else {
                        Counter::Sent
                    };
                    metrics.add(counter, queue, 1);
                    self.record_series(queue, counter);
                    tracing::debug!(queue, message_id = %e.message_id, sequence = e.sequence,
                        duplicate = e.duplicate, "message sent");
                }
                (TxOp::Settle { action, .. }, TxApplied::Settled(s)) => {
                    let counter = match action {
                        Settle::Complete => Some(Counter::Completed),
                        Settle::Abandon { .. } => Some(Counter::Abandoned),
                        Settle::Defer => Some(Counter::Deferred),
                        Settle::DeadLetter { .. } | Settle::Renew { .. } => None,
                    };
                    if let Some(c) = counter {
                        metrics.add(c, queue, 1);
                        self.record_series(queue, c);
                    }
                    if matches!(action, Settle::Abandon { .. }) {
                        self.inner.waiters.wake(queue);
                    }
                    tracing::debug!(queue, message_id = %s.message_id, sequence = s.sequence,
                        delivery_count = s.delivery_count, action = op.kind(), "message settled");
                }
                (_, TxApplied::Cancelled { sequence }) => {
                    tracing::info!(queue, sequence, "scheduled message cancelled");
                }
                _ => {}
            }
        }
        self.apply_effects(&outcome.effects);
        for q in outcome.woken(store_ops) {
            self.inner.waiters.wake(q);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_its_operation_and_kind() {
        let op = TxOp::Settle {
            queue: "orders".into(),
            lock_token: "lk_1".into(),
            action: Settle::DeadLetter {
                reason: "Bad".into(),
                description: None,
                classifier: redrive_core::Classifier::default(),
            },
        };
        assert_eq!(op.kind(), "dead_letter");
        let e = TransactionError::at(2, &op, BrokerError::invalid("reason", "too long"));
        assert_eq!((e.operation, e.kind), (Some(2), Some("dead_letter")));
        assert!(
            e.to_string()
                .starts_with("operation 2 (dead_letter) was refused")
        );
        let whole = TransactionError::whole(BrokerError::invalid("operations", "empty"));
        assert_eq!((whole.operation, whole.kind), (None, None));
    }

    fn check_settlement_natively(action: &SettleAction) -> BrokerResult<()> {
        check_settlement(action, LockBounds::Native)
    }

    #[test]
    fn settlements_are_checked_as_the_single_settle_checks_them() {
        let dl = |reason: &str| SettleAction::DeadLetter {
            reason: reason.into(),
            description: None,
            by_broker: false,
            classifier: redrive_core::Classifier::default(),
        };
        assert!(check_settlement_natively(&dl("Invalid")).is_ok());
        assert!(check_settlement_natively(&dl("")).is_err());
        assert!(check_settlement_natively(&dl("MaxDeliveryCountExceeded")).is_err());
        let renew = |lock_ms| SettleAction::Renew {
            lock_ms,
            cap_from_receive_ms: None,
        };
        assert!(check_settlement_natively(&renew(30_000)).is_ok());
        assert!(check_settlement_natively(&renew(10)).is_err());
        let abandon = |d| SettleAction::Abandon {
            delay_ms: Some(d),
            last_attempt: None,
        };
        assert!(check_settlement_natively(&abandon(1_000)).is_ok());
        assert!(check_settlement_natively(&abandon(policy::MAX_DEDUP_WINDOW_MS + 1)).is_err());
    }
}
