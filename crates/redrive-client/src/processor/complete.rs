//! Automatic completions, batched: the processor's workers hand the messages their
//! handlers accepted to one completer, which settles whatever has gathered with one
//! batch settle request (each item judged on its own), several requests in flight. Under
//! load one request completes many messages instead of one, the shape the server's group
//! commit is fastest with; with a single message waiting it is one request as before.
//!
//! A worker waits for its message's own outcome before it takes the next message, so the
//! concurrency bound, the counts and the error reports are those of single completions.

use std::sync::Arc;

use redrive_api::message::{Settle, SettleKind, SettleRequest, SettleResponse};
use reqwest::Method;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::client::{Req, Retry};
use crate::error::{ErrorKind, Failure, Outcome, SettleError};
use crate::message::ReceivedMessage;
use crate::receiver::Receiver;

/// Most completions in one request.
const MAX_BATCH: usize = 256;
/// Batch requests in flight at once.
const IN_FLIGHT: usize = 4;

/// One completion asked for, and where its outcome goes.
pub(crate) struct Ask {
    message: Arc<ReceivedMessage>,
    reply: oneshot::Sender<Result<(), SettleError>>,
}

/// The workers' side of the completer.
#[derive(Clone)]
pub(crate) struct Completer {
    tx: mpsc::UnboundedSender<Ask>,
}

impl Completer {
    /// A completer for `receiver`'s queue; its task ends when every handle is dropped.
    pub(crate) fn start(receiver: Receiver) -> Completer {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(receiver, rx));
        Completer { tx }
    }

    /// Completes `message`, batched with others asked for meanwhile. (A single completion
    /// is only the fallback: boxed, so that this future stays small in every delivery's.)
    pub(crate) async fn complete(
        &self,
        receiver: &Receiver,
        message: &Arc<ReceivedMessage>,
    ) -> Result<(), SettleError> {
        let (reply, outcome) = oneshot::channel();
        let ask = Ask {
            message: message.clone(),
            reply,
        };
        if self.tx.send(ask).is_err() {
            return Box::pin(receiver.complete(message)).await;
        }
        match outcome.await {
            Ok(r) => r,
            // The completer is gone (the runtime is shutting down): complete alone.
            Err(_) => Box::pin(receiver.complete(message)).await,
        }
    }
}

async fn run(receiver: Receiver, mut rx: mpsc::UnboundedReceiver<Ask>) {
    let window = Arc::new(Semaphore::new(IN_FLIGHT));
    while let Some(first) = rx.recv().await {
        let Ok(permit) = window.clone().acquire_owned().await else {
            return;
        };
        // Completions come in bursts (a received batch handled at once): the tasks ready
        // to run go first, so that their completions join this request.
        if rx.is_empty() {
            tokio::task::yield_now().await;
        }
        // Everything that gathered while a request slot was taken goes in this one.
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(a) => batch.push(a),
                Err(_) => break,
            }
        }
        let receiver = receiver.clone();
        tokio::spawn(async move {
            let _permit = permit;
            settle(&receiver, batch).await;
        });
    }
}

async fn settle(receiver: &Receiver, batch: Vec<Ask>) {
    let queue = receiver.queue().to_owned();
    let what = format!("complete {} messages of {queue}", batch.len());
    let mut asks = Vec::with_capacity(batch.len());
    let mut settlements = Vec::with_capacity(batch.len());
    for ask in batch {
        match ask.message.lock_token() {
            Some(token) => {
                settlements.push(Settle {
                    lock_token: token.to_owned(),
                    action: SettleKind::Complete,
                    delay_ms: None,
                    reason: None,
                    description: None,
                    consumer: None,
                    rule_version: None,
                    lock_duration_ms: None,
                });
                asks.push(ask);
            }
            None => {
                let _ = ask.reply.send(Err(Failure::invalid(
                    &what,
                    "the message holds no lock (a peeked message)",
                )
                .into()));
            }
        }
    }
    if asks.is_empty() {
        return;
    }
    let client = receiver.client();
    let url = client.endpoint(&["v1", "queues", &queue, "settle"]);
    let req = Req::new(Method::POST, url).json(&SettleRequest::Batch { settlements });
    match client.json::<SettleResponse>(req, Retry::IfUnchanged).await {
        Ok(answer) if answer.results.len() == asks.len() => {
            for (ask, result) in asks.into_iter().zip(answer.results) {
                let outcome = match result.error {
                    None => Ok(()),
                    Some(problem) => Err(item_failure(&ask, &queue, problem).into()),
                };
                let _ = ask.reply.send(outcome);
            }
        }
        Ok(answer) => {
            let n = answer.results.len();
            for ask in asks {
                let mut f = Failure::invalid(
                    &what,
                    format!("the server answered {n} results for a batch of this size"),
                );
                f.kind = ErrorKind::Server;
                f.outcome = Outcome::Unknown;
                let _ = ask.reply.send(Err(f.into()));
            }
        }
        Err(failure) => {
            for ask in asks {
                let _ = ask.reply.send(Err(copy(&failure).into()));
            }
        }
    }
}

/// One item's refusal, as a single completion's would be.
fn item_failure(ask: &Ask, queue: &str, problem: redrive_api::Problem) -> Failure {
    Failure {
        kind: ErrorKind::of_problem(&problem),
        status: Some(problem.status),
        problem: Some(Box::new(problem)),
        what: format!("complete message {} of {queue}", ask.message.message_id()),
        detail: None,
        source: None,
        outcome: Outcome::Unchanged,
        retry_after: None,
        attempts: 1,
        tls: false,
    }
}

/// The request's failure, for each of its items.
fn copy(f: &Failure) -> Failure {
    Failure {
        kind: f.kind,
        problem: f.problem.clone(),
        status: f.status,
        what: f.what.clone(),
        detail: Some(f.to_string()),
        source: None,
        outcome: f.outcome,
        retry_after: f.retry_after,
        attempts: f.attempts,
        tls: f.tls,
    }
}
