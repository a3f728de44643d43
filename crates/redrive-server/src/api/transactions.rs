//! `/v1/transactions`: a group of sends, settlements and cancels of scheduled messages,
//! on one queue or several, applied all together or not at all (seed 004).
//!
//! The route's permission row admits any caller holding `producer` or `consumer`
//! somewhere; the broker then authorizes each operation on its own queue as its single
//! route would. A refusal is the problem of the refused operation with its own code, plus
//! `operation` (its index from 0) and `kind`; nothing of the group was applied.

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use redrive_api::transaction::{
    MAX_TRANSACTION_OPERATIONS, MAX_TRANSACTION_REQUEST_BYTES, OperationKind, OperationResult,
    TransactionOperation, TransactionRequest, TransactionResponse,
};
use redrive_api::{ErrorCode, Problem};
use redrive_broker::{Settle, TransactionError, TxApplied, TxOp};

use crate::AppState;
use crate::access::Caller;
use crate::error::{ApiError, body_within, problem_for, read_body};
use crate::wire::outgoing;

/// The problem of a refused transaction: the refused operation's own problem, naming
/// it. In a `forbidden` problem the permission it lacked moves from `operation` to
/// `permission`.
pub(crate) fn transaction_problem(e: &TransactionError) -> Problem {
    let p = problem_for(&e.error);
    match (e.operation, e.kind) {
        (Some(i), Some(kind)) => name_operation(p, i, kind),
        _ => p,
    }
}

fn name_operation(mut p: Problem, index: usize, kind: &str) -> Problem {
    if let Some(permission) = p.extra.remove("operation") {
        p.extra.insert("permission".to_owned(), permission);
    }
    p.detail = Some(match p.detail.take() {
        Some(d) => {
            format!("operation {index} ({kind}): {d}; nothing of the transaction was applied")
        }
        None => format!(
            "operation {index} ({kind}) was refused; nothing of the transaction was applied"
        ),
    });
    p.with("operation", index).with("kind", kind)
}

/// An operation from the wire to the broker's input.
fn operation(op: TransactionOperation) -> Result<TxOp, ApiError> {
    let settle = |queue: String, lock_token: String, action: Settle| TxOp::Settle {
        queue,
        lock_token,
        action,
    };
    Ok(match op {
        TransactionOperation::Send { queue, message } => TxOp::Send {
            queue,
            message: outgoing(message)?,
        },
        TransactionOperation::Complete { queue, lock_token } => {
            settle(queue, lock_token, Settle::Complete)
        }
        TransactionOperation::Abandon {
            queue,
            lock_token,
            delay_ms,
        } => settle(queue, lock_token, Settle::Abandon { delay_ms }),
        TransactionOperation::Defer { queue, lock_token } => {
            settle(queue, lock_token, Settle::Defer)
        }
        TransactionOperation::DeadLetter {
            queue,
            lock_token,
            reason,
            description,
            consumer,
            rule_version,
        } => settle(
            queue,
            lock_token,
            Settle::DeadLetter {
                reason,
                description,
                classifier: redrive_core::Classifier {
                    consumer,
                    rule_version,
                },
            },
        ),
        TransactionOperation::Renew {
            queue,
            lock_token,
            lock_duration_ms,
        } => settle(
            queue,
            lock_token,
            Settle::Renew {
                lock_ms: lock_duration_ms,
            },
        ),
        TransactionOperation::CancelScheduled {
            queue,
            sequence_number,
        } => TxOp::CancelScheduled {
            queue,
            sequence: sequence_number,
        },
    })
}

fn result(kind: OperationKind, queue: String, applied: TxApplied) -> OperationResult {
    let mut out = OperationResult {
        kind,
        queue,
        message_id: None,
        sequence_number: 0,
        duplicate: None,
        locked_until: None,
        dead_letter_id: None,
    };
    match applied {
        TxApplied::Sent(e) => {
            out.message_id = Some(e.message_id);
            out.sequence_number = e.sequence;
            out.duplicate = Some(e.duplicate);
        }
        TxApplied::Settled(s) => {
            out.message_id = Some(s.message_id);
            out.sequence_number = s.sequence;
            out.locked_until = s.locked_until.map(|t| t.to_rfc3339());
            out.dead_letter_id = s.dead_letter_id;
        }
        TxApplied::Cancelled { sequence } => out.sequence_number = sequence,
    }
    out
}

async fn apply(
    State(s): State<AppState>,
    Caller(actor): Caller,
    request: axum::extract::Request,
) -> Result<Json<TransactionResponse>, ApiError> {
    // Bounded before a byte is parsed: a declared length over the bound is refused unread.
    let bytes = body_within(request, MAX_TRANSACTION_REQUEST_BYTES).await?;
    let req: TransactionRequest = read_body(&bytes)?;
    let n = req.operations.len();
    if n == 0 || n > MAX_TRANSACTION_OPERATIONS {
        return Err(Problem::new(
            ErrorCode::InvalidRequest,
            format!(
                "invalid `operations`: a transaction holds 1 to {MAX_TRANSACTION_OPERATIONS} \
                 operations, not {n}"
            ),
        )
        .with("field", "operations")
        .with("limit", MAX_TRANSACTION_OPERATIONS)
        .into());
    }
    let described: Vec<(OperationKind, String)> = req
        .operations
        .iter()
        .map(|o| (o.kind(), o.queue().to_owned()))
        .collect();
    let mut ops = Vec::with_capacity(n);
    for (i, op) in req.operations.into_iter().enumerate() {
        let kind = op.kind();
        ops.push(
            operation(op).map_err(|e| ApiError::from(name_operation(*e.0, i, kind.as_str())))?,
        );
    }
    let applied = s
        .broker
        .transaction(ops, &actor)
        .await
        .map_err(|e| ApiError::from(transaction_problem(&e)))?;
    Ok(Json(TransactionResponse {
        transaction_id: applied.id,
        results: described
            .into_iter()
            .zip(applied.results)
            .map(|((kind, queue), r)| result(kind, queue, r))
            .collect(),
    }))
}

/// The route; its body is bounded by [`MAX_TRANSACTION_REQUEST_BYTES`] in the handler.
pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/v1/transactions", post(apply))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_and_the_broker_agree_on_the_group_bound() {
        assert_eq!(
            MAX_TRANSACTION_OPERATIONS,
            redrive_broker::MAX_TRANSACTION_OPERATIONS
        );
    }

    #[test]
    fn a_refusal_names_its_operation_and_keeps_its_code() {
        let forbidden = Problem::new(ErrorCode::Forbidden, "no")
            .with("operation", "Settle")
            .with("needs", "consumer");
        let p = name_operation(forbidden, 3, "complete");
        assert_eq!(p.code, "forbidden");
        assert_eq!(p.extra["operation"], 3);
        assert_eq!(p.extra["kind"], "complete");
        assert_eq!(p.extra["permission"], "Settle");
        assert!(p.detail.unwrap().starts_with("operation 3 (complete): no"));
    }
}
