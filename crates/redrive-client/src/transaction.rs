//! Transactions: a [`Transaction`] collects sends, settlements and cancels of scheduled
//! messages across queues and applies them with one `POST /v1/transactions`, all
//! together or not at all.
//!
//! The case it exists for (seed 004's "scheduled re-enqueue"): complete the original and
//! send its follow-up (or a scheduled retry copy) in one step, so that a crash between two
//! separate requests cannot lose the message or duplicate it.
//!
//! A refused group answers the problem of the operation that refused it; the
//! [`TransactionError`] names that operation's index and kind, and nothing of the group
//! was applied. A commit is retried only after a failure that proves nothing happened
//! (a refused connection, a 503 or 429 answer): a repeat of an applied group would find
//! its locks settled and fail with `lock_lost`, so an unknown outcome (a timeout) is
//! returned to the caller, who can tell by receiving again.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use redrive_api::Problem;
use redrive_api::transaction::{
    MAX_TRANSACTION_OPERATIONS, MAX_TRANSACTION_REQUEST_BYTES, OperationKind, OperationResult,
    TransactionOperation, TransactionRequest, TransactionResponse,
};
use reqwest::Method;

use crate::client::{Client, Req, Retry};
use crate::error::{ErrorKind, Failure};
use crate::message::{Message, ReceivedMessage};
use crate::processor::Delivery;
use crate::receiver::{DeadLetterOptions, millis};
use crate::sender::check_name;

const WHAT: &str = "transaction";

/// A group of operations applied by [`commit`](Transaction::commit) all together or not
/// at all. Made by [`Client::transaction`]; each method adds one operation, in order, and
/// each operation sees what the ones before it did. A bad operation (an empty queue name,
/// a message without a lock, a field out of range) is remembered and refuses the commit
/// with an [`ErrorKind::Invalid`] error before anything is sent.
///
/// ```no_run
/// # async fn run(client: redrive_client::Client) -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use redrive_client::Message;
///
/// let orders = client.receiver("orders");
/// for m in orders.receive(10, Duration::from_secs(5)).await? {
///     let done = client
///         .transaction()
///         .send("payments", Message::new(m.body().to_vec()).with_id(m.message_id()))
///         .complete("orders", &m)
///         .commit()
///         .await?;
///     println!("applied as {}", done.transaction_id);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a transaction does nothing until it is committed"]
pub struct Transaction {
    client: Client,
    operations: Vec<TransactionOperation>,
    /// The first operation refused while the group was built: its index and why.
    refused: Option<(usize, OperationKind, Failure)>,
}

/// What an applied transaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransactionOutcome {
    /// The transaction's id (`tx_…`), as the server's audit entries name it.
    pub transaction_id: String,
    /// One result per operation, in order.
    pub results: Vec<OperationResult>,
}

impl Client {
    /// An empty transaction on this client's server; see [`Transaction`].
    pub fn transaction(&self) -> Transaction {
        Transaction {
            client: self.clone(),
            operations: Vec::new(),
            refused: None,
        }
    }
}

impl Transaction {
    /// How many operations the group holds.
    pub fn len(&self) -> usize {
        self.operations.len()
    }

    /// Whether the group holds no operation (a commit of it is refused).
    pub fn is_empty(&self) -> bool {
        self.operations.is_empty()
    }

    /// Adds a send of `message` to `queue` (a subscription's queue is
    /// `<topic>.<subscription>`); with a scheduled enqueue time it is a scheduled send.
    pub fn send(mut self, queue: impl Into<String>, message: Message) -> Transaction {
        let queue = queue.into();
        if let Err(f) = self.check_queue(OperationKind::Send, &queue) {
            self.refuse(OperationKind::Send, f);
            return self;
        }
        let index = self.operations.len();
        match message.to_wire(&format!("{WHAT} operation {index} (send to {queue})")) {
            Ok(wire) => self.push(TransactionOperation::Send {
                queue,
                message: wire,
            }),
            Err(f) => {
                self.refuse(OperationKind::Send, f);
                self
            }
        }
    }

    /// Adds the completion of a delivery received from `queue`.
    pub fn complete(self, queue: impl Into<String>, message: &ReceivedMessage) -> Transaction {
        self.settlement(
            OperationKind::Complete,
            queue.into(),
            message,
            |queue, t| TransactionOperation::Complete {
                queue,
                lock_token: t,
            },
        )
    }

    /// Adds the abandon of a delivery received from `queue`, visible again after `delay`
    /// (`None`: the queue's backoff).
    pub fn abandon(
        self,
        queue: impl Into<String>,
        message: &ReceivedMessage,
        delay: Option<Duration>,
    ) -> Transaction {
        self.settlement(OperationKind::Abandon, queue.into(), message, |queue, t| {
            TransactionOperation::Abandon {
                queue,
                lock_token: t,
                delay_ms: delay.map(millis),
            }
        })
    }

    /// Adds the deferral of a delivery received from `queue`.
    pub fn defer(self, queue: impl Into<String>, message: &ReceivedMessage) -> Transaction {
        self.settlement(OperationKind::Defer, queue.into(), message, |queue, t| {
            TransactionOperation::Defer {
                queue,
                lock_token: t,
            }
        })
    }

    /// Adds the dead-lettering of a delivery received from `queue`, with its reason.
    pub fn dead_letter(
        self,
        queue: impl Into<String>,
        message: &ReceivedMessage,
        options: DeadLetterOptions,
    ) -> Transaction {
        self.settlement(
            OperationKind::DeadLetter,
            queue.into(),
            message,
            |queue, t| TransactionOperation::DeadLetter {
                queue,
                lock_token: t,
                reason: options.reason,
                description: options.description,
                consumer: options.consumer,
                rule_version: options.rule_version,
            },
        )
    }

    /// Adds the cancel of the scheduled message `sequence_number` of `queue`.
    pub fn cancel_scheduled(mut self, queue: impl Into<String>, sequence_number: i64) -> Self {
        let queue = queue.into();
        if let Err(f) = self.check_queue(OperationKind::CancelScheduled, &queue) {
            self.refuse(OperationKind::CancelScheduled, f);
            return self;
        }
        self.push(TransactionOperation::CancelScheduled {
            queue,
            sequence_number,
        })
    }

    /// Adds the completion of a processor's delivery (on its entity's queue), and marks
    /// it settled so that the processor does not settle it again. If the commit fails,
    /// the message stays locked until its lock runs out, then is delivered again.
    pub fn complete_delivery<T>(self, delivery: &Delivery<T>) -> Transaction {
        delivery.ctx.mark_settled();
        let queue = delivery.ctx.entity.receive_queue();
        self.complete(queue, &delivery.ctx.message)
    }

    /// Adds the abandon of a processor's delivery, as
    /// [`complete_delivery`](Transaction::complete_delivery) does its completion.
    pub fn abandon_delivery<T>(
        self,
        delivery: &Delivery<T>,
        delay: Option<Duration>,
    ) -> Transaction {
        delivery.ctx.mark_settled();
        let queue = delivery.ctx.entity.receive_queue();
        self.abandon(queue, &delivery.ctx.message, delay)
    }

    /// Adds the dead-lettering of a processor's delivery, as
    /// [`complete_delivery`](Transaction::complete_delivery) does its completion.
    pub fn dead_letter_delivery<T>(
        self,
        delivery: &Delivery<T>,
        options: DeadLetterOptions,
    ) -> Transaction {
        delivery.ctx.mark_settled();
        let queue = delivery.ctx.entity.receive_queue();
        self.dead_letter(queue, &delivery.ctx.message, options)
    }

    /// Applies the group: every operation, or none. Refused before sending (kind
    /// [`ErrorKind::Invalid`], or [`ErrorKind::TooLarge`] for a body over the server's
    /// limit) when it is empty, holds more than [`MAX_TRANSACTION_OPERATIONS`], or an
    /// operation was bad when added.
    pub async fn commit(self) -> Result<TransactionOutcome, TransactionError> {
        if let Some((index, kind, failure)) = self.refused {
            return Err(TransactionError::new(failure, Some((index, kind))));
        }
        let n = self.operations.len();
        if n == 0 || n > MAX_TRANSACTION_OPERATIONS {
            return Err(TransactionError::new(
                Failure::invalid(
                    WHAT,
                    format!(
                        "a transaction holds 1 to {MAX_TRANSACTION_OPERATIONS} operations, not {n}"
                    ),
                ),
                None,
            ));
        }
        let body = TransactionRequest {
            operations: self.operations,
        };
        let req = Req::new(Method::POST, self.client.endpoint(&["v1", "transactions"])).json(&body);
        if let Some((_, bytes)) = &req.body
            && bytes.len() > MAX_TRANSACTION_REQUEST_BYTES
        {
            let mut f = Failure::invalid(
                WHAT,
                format!(
                    "the group's body is {} bytes, over the server's {MAX_TRANSACTION_REQUEST_BYTES}: send large messages on their own",
                    bytes.len()
                ),
            );
            f.kind = ErrorKind::TooLarge;
            return Err(TransactionError::new(f, None));
        }
        let answer: TransactionResponse = self
            .client
            .json(req, Retry::IfUnchanged)
            .await
            .map_err(TransactionError::from_failure)?;
        if answer.results.len() != n {
            return Err(TransactionError::new(
                Failure::invalid(
                    WHAT,
                    format!(
                        "the server answered {} results for {n} operations",
                        answer.results.len()
                    ),
                ),
                None,
            ));
        }
        Ok(TransactionOutcome {
            transaction_id: answer.transaction_id,
            results: answer.results,
        })
    }

    fn settlement(
        mut self,
        kind: OperationKind,
        queue: String,
        message: &ReceivedMessage,
        make: impl FnOnce(String, String) -> TransactionOperation,
    ) -> Transaction {
        if let Err(f) = self.check_queue(kind, &queue) {
            self.refuse(kind, f);
            return self;
        }
        let Some(token) = message.lock_token() else {
            let index = self.operations.len();
            let f = Failure::invalid(
                format!("{WHAT} operation {index} ({})", kind.as_str()),
                format!(
                    "message {} carries no lock (a peeked message cannot be settled)",
                    message.message_id()
                ),
            );
            self.refuse(kind, f);
            return self;
        };
        let op = make(queue, token.to_owned());
        self.push(op)
    }

    fn check_queue(&self, kind: OperationKind, queue: &str) -> Result<(), Failure> {
        let index = self.operations.len();
        check_name(
            &format!("{WHAT} operation {index} ({} on {queue:?})", kind.as_str()),
            queue,
        )
    }

    fn push(mut self, op: TransactionOperation) -> Transaction {
        self.operations.push(op);
        self
    }

    /// Remembers the first bad operation; it still takes its place, so that later
    /// indexes stay those the caller counted.
    fn refuse(&mut self, kind: OperationKind, failure: Failure) {
        if self.refused.is_none() {
            self.refused = Some((self.operations.len(), kind, failure));
        }
        // A placeholder keeps the indexes; the commit refuses before sending anything.
        self.operations.push(TransactionOperation::CancelScheduled {
            queue: String::new(),
            sequence_number: 0,
        });
    }
}

/// A transaction was not applied: nothing of it was. [`kind`](TransactionError::kind) is
/// the refusing operation's (a lost lock is [`ErrorKind::LockLost`]),
/// [`operation`](TransactionError::operation) its index and kind when one operation
/// refused the group.
#[non_exhaustive]
pub struct TransactionError {
    failure: Box<Failure>,
    operation: Option<(usize, OperationKind)>,
}

impl TransactionError {
    fn new(failure: Failure, operation: Option<(usize, OperationKind)>) -> TransactionError {
        TransactionError {
            failure: Box::new(failure),
            operation,
        }
    }

    fn from_failure(failure: Failure) -> TransactionError {
        let operation = failure.problem.as_deref().and_then(|p| {
            let index = p.extra.get("operation")?.as_u64()?;
            let kind =
                serde_json::from_value::<OperationKind>(p.extra.get("kind")?.clone()).ok()?;
            Some((usize::try_from(index).ok()?, kind))
        });
        TransactionError::new(failure, operation)
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.failure.kind
    }

    /// The index (from 0, in the order the operations were added) and kind of the
    /// operation that refused the group, when one did.
    pub fn operation(&self) -> Option<(usize, OperationKind)> {
        self.operation
    }

    /// The server's problem document, when it answered with one.
    pub fn problem(&self) -> Option<&Problem> {
        self.failure.problem.as_deref()
    }

    /// The problem's stable code (`lock_lost`, `queue_not_found`…), when there is one.
    pub fn code(&self) -> Option<&str> {
        self.failure.problem.as_deref().map(|p| p.code.as_str())
    }

    /// The HTTP status, when the server answered.
    pub fn status(&self) -> Option<u16> {
        self.failure.status
    }

    /// Whether a later attempt may succeed, after this client's own retries gave up. A
    /// timeout is transient but leaves the outcome unknown: receive again before retrying.
    pub fn is_transient(&self) -> bool {
        self.failure.is_transient()
    }

    /// How many requests were made, retries included (0: refused before sending).
    pub fn attempts(&self) -> u32 {
        self.failure.attempts
    }
}

impl fmt::Debug for TransactionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransactionError")
            .field("kind", &self.failure.kind)
            .field("operation", &self.operation)
            .field("status", &self.failure.status)
            .field("problem", &self.failure.problem)
            .field("detail", &self.failure.detail)
            .field("attempts", &self.failure.attempts)
            .finish()
    }
}

impl fmt::Display for TransactionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.failure, f)?;
        if let Some((i, k)) = self.operation
            && self.failure.problem.is_none()
        {
            write!(f, " (operation {i}, {})", k.as_str())?;
        }
        Ok(())
    }
}

impl StdError for TransactionError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.failure
            .source
            .as_ref()
            .map(|s| s.as_ref() as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> Client {
        Client::builder("http://127.0.0.1:9").build().unwrap()
    }

    #[tokio::test]
    async fn bad_operations_refuse_the_commit_before_sending_and_name_their_index() {
        let e = client()
            .transaction()
            .cancel_scheduled("orders", 1)
            .send("", Message::new("x"))
            .commit()
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid);
        assert_eq!(e.operation(), Some((1, OperationKind::Send)));
        assert_eq!(e.attempts(), 0);

        let e = client().transaction().commit().await.unwrap_err();
        assert_eq!((e.kind(), e.operation()), (ErrorKind::Invalid, None));

        let mut tx = client().transaction();
        for i in 0..=MAX_TRANSACTION_OPERATIONS {
            tx = tx.cancel_scheduled("orders", i64::try_from(i).unwrap());
        }
        let e = tx.commit().await.unwrap_err();
        assert_eq!((e.kind(), e.attempts()), (ErrorKind::Invalid, 0));
    }

    #[tokio::test]
    async fn a_group_over_the_servers_body_limit_is_too_large_unsent() {
        let big = vec![b'a'; MAX_TRANSACTION_REQUEST_BYTES / 2 + 1];
        let e = client()
            .transaction()
            .send("a", Message::new(big.clone()))
            .send("a", Message::new(big))
            .commit()
            .await
            .unwrap_err();
        assert_eq!((e.kind(), e.attempts()), (ErrorKind::TooLarge, 0));
    }
}
