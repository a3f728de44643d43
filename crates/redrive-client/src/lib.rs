//! The Rust client of redrive's native HTTP API.
//!
//! - [`Client`]: a cheap-to-clone handle on one server (token, TLS, timeouts, retries of
//!   transient failures on an injected [`Clock`]).
//! - [`Sender`] and [`Publisher`]: messages to a queue (one, an atomic batch, scheduled),
//!   CloudEvents to a topic.
//! - [`Receiver`] and [`SessionReceiver`]: peek-lock receive, settlement (complete,
//!   abandon, defer, dead-letter), lock renewal, deferred messages, sessions.
//! - [`Admin`]: queues, topics and pull subscriptions.
//! - [`Recovery`]: dead letters, replay plans, recovery cases and groups, intents, effect
//!   authorities; [`Access`]: tokens, the audit log, the register; [`Wire`]: the queue
//!   operations with the wire types, for tools that print what the server answered.
//! - [`Transaction`]: sends, settlements and cancels across queues, applied all together
//!   or not at all ([`Client::transaction`]).
//! - [`processor`]: a [`Processor`] hands each message to a handler with bounded
//!   concurrency, lock renewal, automatic or explicit settlement, sessions, graceful
//!   shutdown, and a consumer [`DeadLetterPolicy`] (Pulsar's, seed 003).
//!
//! Every operation family has its error type ([`SendError`], [`ReceiveError`],
//! [`SettleError`], [`SessionError`], [`AdminError`]), each classified by one
//! [`ErrorKind`] and carrying the server's [`Problem`] document.
//! Which failures are retried, and why that differs between a send and a settlement, is
//! in [`retry`].
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use redrive_client::{Client, Message};
//!
//! let client = Client::builder("http://127.0.0.1:7474").build()?;
//! client.sender("orders").send(Message::new("order 7").with_id("order-7")).await?;
//! let receiver = client.receiver("orders");
//! for m in receiver.receive(10, Duration::from_secs(5)).await? {
//!     println!("{}", m.body_str().unwrap_or("<binary>"));
//!     receiver.complete(&m).await?;
//! }
//! # Ok(()) }
//! ```
//!
//! # Examples
//!
//! Runnable against a local server (`redrive serve`; `REDRIVE_URL` and `REDRIVE_TOKEN` to
//! point them elsewhere):
//!
//! - `cargo run -p redrive-client --example odds_evens`: Pulsar's dead-letter flow — odd
//!   numbers rejected three times, then diverted to `numbers-billing-DLQ` and read back
//!   with their origin.
//! - `cargo run -p redrive-client --example processor`: concurrency, permanent and
//!   transient failures, the error callback, a graceful shutdown.
//! - `cargo run -p redrive-client --example transaction`: an order's payment sent and the
//!   order completed in one call, and a refused group applying nothing.
//!
//! # Layout
//! - `client`: [`Client`], [`ClientBuilder`] and the one request path.
//! - [`retry`]: [`RetryOptions`] and what is retried.
//! - `error`: the operation errors and [`ErrorKind`].
//! - `message`: [`Message`], [`ReceivedMessage`].
//! - `sender`, `receiver`, `admin`: the operations.
//! - [`processor`]: the processor and the consumer dead-letter policy.
//! - `clock`: [`SystemClock`], the production clock.

#![deny(missing_docs)]

mod access;
mod admin;
mod client;
mod clock;
mod error;
mod message;
pub mod processor;
mod receiver;
mod recovery;
pub mod retry;
mod sender;
mod transaction;
mod wire;

pub use access::{Access, AuditQuery};
pub use admin::Admin;
pub use client::{Client, ClientBuilder};
pub use clock::SystemClock;
pub use error::{
    AccessError, AdminError, BuildError, ErrorKind, ReceiveError, RecoveryError, SendError,
    SessionError, SettleError,
};
pub use message::{MAX_ID_LEN, Message, ReceivedMessage, SendOutcome};
pub use processor::{
    BreakerState, CircuitBreaker, DeadLetterPolicy, Delivery, Entity, ErrorSource, HandlerError,
    InvalidMessage, ProcessingError, Processor, ProcessorBuildError, ProcessorBuilder,
    ProcessorError, ProcessorErrorEvent, ProcessorHandle, ProcessorOptions, ProcessorStats,
    RestartBudget,
};
pub use receiver::{DeadLetterOptions, MAX_RECEIVE_BATCH, MAX_WAIT, Receiver, SessionReceiver};
pub use recovery::{CaseQuery, DeadLetterQuery, FailureQuery, RawDeadLetterPage, Recovery};
pub use redrive_api::transaction::{MAX_TRANSACTION_OPERATIONS, OperationKind, OperationResult};
pub use retry::{Jitter, RetryOptions};
pub use sender::{MAX_PUBLISH_BATCH, MAX_SEND_BATCH, PublishOutcome, Publisher, Sender};
pub use transaction::{Transaction, TransactionError, TransactionOutcome};
pub use wire::Wire;

pub use redrive_api::Problem;
pub use redrive_api::queue::QueuePolicy;
pub use redrive_api::topic::TopicPolicy;
pub use redrive_core::clock::{Clock, ManualClock, Timestamp};
pub use redrive_events::CloudEvent;
