//! The processor: messages of a queue or pull subscription handed to a handler as they
//! come, with Service Bus's `ServiceBusProcessor` semantics and Pulsar's consumer
//! dead-letter policy.
//!
//! - **Concurrency**: at most [`max_concurrent_calls`](ProcessorOptions::max_concurrent_calls)
//!   handlers run at once; [`prefetch`](ProcessorOptions::prefetch) more messages may wait
//!   locked in the processor (their locks are not renewed while they wait; one that runs
//!   out before its turn is dropped, counted as a lost lock, and delivered again by the
//!   server). A processor with more than 64 places (concurrency plus prefetch) keeps one
//!   receive in flight per 64 places, at most 4. A handler's slot goes to the next
//!   message as soon as the handler returns; its message keeps its place until the
//!   server has answered its automatic completion. While the processor is busy (messages
//!   wait for a handler, or completions in flight will free the places it lacks) a
//!   receive waits for its share of the places, so that one request fetches a batch;
//!   when a handler would otherwise sit idle, it receives with what is free.
//! - **Handlers** run on the processor's own tasks, polled first (a handler that finishes
//!   at once costs no timer); a panic is caught and treated as a failed delivery. Work
//!   that blocks the thread belongs in `tokio::task::spawn_blocking`, as anywhere in
//!   tokio: a blocked thread also holds back the lock renewal beside the handler.
//! - **Lock renewal**: while a handler runs, its message's lock is renewed 10 s (or half
//!   a lock, when that is shorter) before it runs out, up to
//!   [`max_auto_lock_renewal`](ProcessorOptions::max_auto_lock_renewal) after the handler
//!   started, on the client's clock. A renewal the server refuses (the lock is lost) is
//!   reported, and [`Delivery::cancelled`] tells the handler.
//! - **Settlement**: explicit through the [`Delivery`], or automatic: completed when the
//!   handler returns `Ok` (with [`auto_complete`](ProcessorOptions::auto_complete); the
//!   completions of concurrent handlers go out together in one batch settle request),
//!   abandoned when it returns a transient [`HandlerError`] (after the error's delay, the
//!   processor's redelivery interval or the queue's backoff), dead-lettered at once with
//!   its reason when it returns a permanent one.
//! - **Sessions** ([`ProcessorOptions::sessions`]): each worker accepts one session,
//!   handles its messages one at a time in order, renews the session lock, and releases
//!   the session when it stays idle.
//! - **Shutdown** ([`ProcessorHandle::shutdown`]): no new receives; in-flight handlers
//!   finish, or are stopped at the timeout and their messages abandoned; prefetched
//!   messages are abandoned. Nothing is left locked by the processor.
//! - **Errors**: every processing and infrastructure failure reaches the
//!   [`on_error`](ProcessorOptions::on_error) callback with its source, entity and message
//!   id, and a `tracing` event.
//! - **Consumer dead-letter policy** ([`DeadLetterPolicy`], seed of Pulsar's consumer
//!   policy): see its documentation.
//!
//! # Telemetry
//!
//! Each stage emits a `tracing` event on target `redrive_client::processor` with `event`
//! (`received`, `completed`, `nacked`, `redelivery_requested`, `diverted`,
//! `dead_lettered`, `lock_renewed`, `lock_lost`, `divert_failed`, `worker_restarted`),
//! `count = 1` (one event per delivery), `entity` (the queue received from), `topic` (the
//! topic, or the queue), `subscription` (for a subscription),
//! `consumer` and `message_id`; `diverted` adds `dead_letter_queue` and
//! `redelivery_count`. The circuit breaker adds `breaker_opened` (with `failures` and
//! `calls`, or `probe_failed`, and `until`), `breaker_half_open` and `breaker_closed`.
//! [`ProcessorHandle::stats`] and [`ProcessorHandle::watch_stats`] count the same
//! ([`ProcessorStats`], with the breaker's state).
//!
//! # Circuit breaker
//!
//! [`circuit_breaker`](ProcessorOptions::circuit_breaker) stops receiving while the
//! handler's transient failures say a dependency is down, then probes: see
//! [`CircuitBreaker`] and the `breaker` module's rules (only transient errors and panics
//! are failures; a permanent error is the message's fault). Its opening and closing reach
//! the error callback ([`ErrorSource::CircuitBreaker`]).

mod breaker;
mod complete;
mod delivery;
mod policy;
mod run;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub use breaker::{BreakerState, CircuitBreaker};
pub use delivery::{Delivery, HandlerError, InvalidMessage};
pub use policy::{
    DeadLetterPolicy, Entity, ORIGIN_MESSAGE_ID, REAL_TOPIC, REDRIVE_DELIVERY_COUNT,
    REDRIVE_DIVERTED_AT, REDRIVE_INVALID, REDRIVE_INVALID_REASON, REDRIVE_LAST_ERROR,
    REDRIVE_ORIGIN_QUEUE, REDRIVE_ORIGIN_SEQUENCE, REDRIVE_ORIGIN_SESSION_ID, RestartBudget,
};
pub use run::ProcessorHandle;

use crate::error::{ErrorKind, ReceiveError, SendError, SessionError, SettleError};
use crate::message::ReceivedMessage;
use crate::{Client, receiver::MAX_WAIT};

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// The callback of [`ProcessorOptions::on_error`].
pub type ErrorCallback = Arc<dyn Fn(&ProcessorErrorEvent) + Send + Sync>;

/// How a processor runs. Build with the setters from [`ProcessorOptions::new`]; checked
/// when the processor is built.
#[derive(Clone)]
#[non_exhaustive]
pub struct ProcessorOptions {
    /// Handlers running at once (default 1; at least 1, at most 1000). With sessions, the
    /// number of sessions held at once.
    pub max_concurrent_calls: usize,
    /// Messages received ahead of a free handler (default 0). Not used with sessions,
    /// whose messages are received one at a time, in order.
    pub prefetch: usize,
    /// Complete a message whose handler returned `Ok` without settling it (default true;
    /// false leaves it to the handler, and an unsettled message's lock runs out).
    pub auto_complete: bool,
    /// How long after its handling starts a message's lock (after its acceptance, a
    /// session's) is still renewed (default 5 minutes; zero turns renewal off).
    pub max_auto_lock_renewal: Duration,
    /// How long each receive waits for messages (default 5 s, at most 20 s). A shutdown
    /// waits for a receive in flight, so that it cannot lock messages nobody handles.
    pub receive_wait: Duration,
    /// The lock duration asked for on receive (default: the queue's).
    pub lock_duration: Option<Duration>,
    /// The delay before a message abandoned after a transient failure is delivered again
    /// (default: the queue's backoff). Required with a dead-letter policy.
    pub redelivery_interval: Option<Duration>,
    /// Process sessions instead of plain messages (the queue must require sessions).
    pub sessions: bool,
    /// The consumer's dead-letter policy.
    pub dead_letter_policy: Option<DeadLetterPolicy>,
    /// How many worker restarts (a failed divert, a handler panic) the processor survives
    /// within a period before it ends with [`ProcessorError::RestartBudgetExhausted`].
    pub restart_budget: RestartBudget,
    /// The consumer's name: in telemetry, and as the `consumer` of its dead letters
    /// (default `redrive-client`).
    pub consumer: String,
    /// Receives every processing and infrastructure error.
    pub on_error: Option<ErrorCallback>,
    /// Stops receiving while the handler's failures say a dependency is down (default:
    /// none). Not with sessions.
    pub circuit_breaker: Option<CircuitBreaker>,
}

impl fmt::Debug for ProcessorOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessorOptions")
            .field("max_concurrent_calls", &self.max_concurrent_calls)
            .field("prefetch", &self.prefetch)
            .field("auto_complete", &self.auto_complete)
            .field("max_auto_lock_renewal", &self.max_auto_lock_renewal)
            .field("receive_wait", &self.receive_wait)
            .field("lock_duration", &self.lock_duration)
            .field("redelivery_interval", &self.redelivery_interval)
            .field("sessions", &self.sessions)
            .field("dead_letter_policy", &self.dead_letter_policy)
            .field("restart_budget", &self.restart_budget)
            .field("consumer", &self.consumer)
            .field("on_error", &self.on_error.as_ref().map(|_| "callback"))
            .field("circuit_breaker", &self.circuit_breaker)
            .finish()
    }
}

impl Default for ProcessorOptions {
    fn default() -> Self {
        ProcessorOptions {
            max_concurrent_calls: 1,
            prefetch: 0,
            auto_complete: true,
            max_auto_lock_renewal: Duration::from_secs(300),
            receive_wait: Duration::from_secs(5),
            lock_duration: None,
            redelivery_interval: None,
            sessions: false,
            dead_letter_policy: None,
            restart_budget: RestartBudget::default(),
            consumer: "redrive-client".to_owned(),
            on_error: None,
            circuit_breaker: None,
        }
    }
}

impl ProcessorOptions {
    /// The defaults.
    pub fn new() -> Self {
        ProcessorOptions::default()
    }

    /// Sets [`max_concurrent_calls`](ProcessorOptions::max_concurrent_calls).
    #[must_use]
    pub fn max_concurrent_calls(mut self, n: usize) -> Self {
        self.max_concurrent_calls = n;
        self
    }

    /// Sets [`prefetch`](ProcessorOptions::prefetch).
    #[must_use]
    pub fn prefetch(mut self, n: usize) -> Self {
        self.prefetch = n;
        self
    }

    /// Sets [`auto_complete`](ProcessorOptions::auto_complete).
    #[must_use]
    pub fn auto_complete(mut self, on: bool) -> Self {
        self.auto_complete = on;
        self
    }

    /// Sets [`max_auto_lock_renewal`](ProcessorOptions::max_auto_lock_renewal).
    #[must_use]
    pub fn max_auto_lock_renewal(mut self, d: Duration) -> Self {
        self.max_auto_lock_renewal = d;
        self
    }

    /// Sets [`receive_wait`](ProcessorOptions::receive_wait).
    #[must_use]
    pub fn receive_wait(mut self, d: Duration) -> Self {
        self.receive_wait = d;
        self
    }

    /// Sets [`lock_duration`](ProcessorOptions::lock_duration).
    #[must_use]
    pub fn lock_duration(mut self, d: Duration) -> Self {
        self.lock_duration = Some(d);
        self
    }

    /// Sets [`redelivery_interval`](ProcessorOptions::redelivery_interval).
    #[must_use]
    pub fn redelivery_interval(mut self, d: Duration) -> Self {
        self.redelivery_interval = Some(d);
        self
    }

    /// Sets [`sessions`](ProcessorOptions::sessions).
    #[must_use]
    pub fn sessions(mut self, on: bool) -> Self {
        self.sessions = on;
        self
    }

    /// Sets [`dead_letter_policy`](ProcessorOptions::dead_letter_policy).
    #[must_use]
    pub fn dead_letter_policy(mut self, policy: DeadLetterPolicy) -> Self {
        self.dead_letter_policy = Some(policy);
        self
    }

    /// Sets [`restart_budget`](ProcessorOptions::restart_budget).
    #[must_use]
    pub fn restart_budget(mut self, budget: RestartBudget) -> Self {
        self.restart_budget = budget;
        self
    }

    /// Sets [`consumer`](ProcessorOptions::consumer).
    #[must_use]
    pub fn consumer(mut self, name: impl Into<String>) -> Self {
        self.consumer = name.into();
        self
    }

    /// Sets [`on_error`](ProcessorOptions::on_error).
    #[must_use]
    pub fn on_error(mut self, f: impl Fn(&ProcessorErrorEvent) + Send + Sync + 'static) -> Self {
        self.on_error = Some(Arc::new(f));
        self
    }

    /// Sets [`circuit_breaker`](ProcessorOptions::circuit_breaker).
    pub fn circuit_breaker(mut self, breaker: CircuitBreaker) -> Self {
        self.circuit_breaker = Some(breaker);
        self
    }

    fn check(&self, entity: &Entity) -> Result<(), ProcessorBuildError> {
        if let Some(b) = &self.circuit_breaker {
            b.check()?;
            if self.sessions {
                return Err(ProcessorBuildError::InvalidOption {
                    option: "circuit_breaker",
                    reason: "not available with sessions".to_owned(),
                });
            }
        }
        if self.max_concurrent_calls == 0 || self.max_concurrent_calls > 1_000 {
            return Err(ProcessorBuildError::InvalidOption {
                option: "max_concurrent_calls",
                reason: format!("must be 1 to 1000, not {}", self.max_concurrent_calls),
            });
        }
        if self.prefetch > 10_000 {
            return Err(ProcessorBuildError::InvalidOption {
                option: "prefetch",
                reason: "at most 10000".to_owned(),
            });
        }
        if self.receive_wait > MAX_WAIT {
            return Err(ProcessorBuildError::InvalidOption {
                option: "receive_wait",
                reason: "at most 20 s".to_owned(),
            });
        }
        if let Some(d) = self.lock_duration
            && !(Duration::from_secs(1)..=Duration::from_secs(300)).contains(&d)
        {
            return Err(ProcessorBuildError::InvalidOption {
                option: "lock_duration",
                reason: "must be 1 s to 5 min".to_owned(),
            });
        }
        if self.consumer.is_empty() || self.consumer.len() > 256 {
            return Err(ProcessorBuildError::InvalidOption {
                option: "consumer",
                reason: "must be 1 to 256 bytes".to_owned(),
            });
        }
        if self.restart_budget.within.is_zero() {
            return Err(ProcessorBuildError::InvalidOption {
                option: "restart_budget.within",
                reason: "must be more than zero".to_owned(),
            });
        }
        if let Some(policy) = &self.dead_letter_policy {
            policy.check(entity, self.redelivery_interval)?;
        }
        Ok(())
    }
}

/// Why a processor could not be built. Nothing was started.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessorBuildError {
    /// The entity's name breaks the naming rule.
    #[error("invalid entity: {0}")]
    InvalidEntity(String),
    /// An option is out of range.
    #[error("invalid processor option `{option}`: {reason}")]
    InvalidOption {
        /// The option.
        option: &'static str,
        /// Why.
        reason: String,
    },
    /// A dead-letter policy without a redelivery interval: abandoned messages would not be
    /// redelivered on the consumer's schedule, and the policy would never divert on it.
    #[error(
        "a dead-letter policy needs a redelivery interval (ProcessorOptions::redelivery_interval): \
         without one a rejected message is never asked for again on the consumer's schedule, \
         so the policy does nothing"
    )]
    RedeliveryIntervalRequired,
    /// The dead-letter policy is not usable (a zero `max_redelivery`, a destination that
    /// is not a queue name, or the entity itself).
    #[error("invalid dead-letter policy: {0}")]
    InvalidPolicy(String),
}

/// Where a processor error came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorSource {
    /// Receiving messages.
    Receive,
    /// The handler (or the invalid-message handler) returned an error.
    Handler,
    /// The handler panicked.
    HandlerPanic,
    /// Completing a message.
    Complete,
    /// Abandoning a message.
    Abandon,
    /// Dead-lettering a message (a permanent failure).
    DeadLetter,
    /// Renewing a message's lock.
    RenewLock,
    /// Accepting a session.
    AcceptSession,
    /// Renewing a session's lock.
    RenewSessionLock,
    /// Releasing a session.
    ReleaseSession,
    /// Publishing a message to the dead-letter queue of the consumer's policy.
    Divert,
    /// The processor's configuration does not fit the entity.
    Configuration,
    /// The processor ended: its restart budget is spent.
    Processor,
    /// The circuit breaker opened or closed.
    CircuitBreaker,
}

/// What went wrong, in a [`ProcessorErrorEvent`].
#[derive(Debug)]
#[non_exhaustive]
pub enum ProcessingError {
    /// The handler returned this error.
    Handler(HandlerError),
    /// The handler panicked with this message.
    Panicked(String),
    /// A receive failed.
    Receive(ReceiveError),
    /// A settlement or renewal failed.
    Settle(SettleError),
    /// A session operation failed.
    Session(SessionError),
    /// A divert to the dead-letter queue failed: the message was not acknowledged.
    Divert(SendError),
    /// The lock ran out before the message was settled.
    LockExpired,
    /// The configuration does not fit the entity (the queue's max delivery count does not
    /// leave room for the policy's redeliveries).
    Configuration(String),
    /// The restart budget is spent: the processor ends.
    RestartBudgetExhausted {
        /// Restarts within the budget's period.
        restarts: u32,
    },
    /// The circuit breaker opened: no receives until `until` (then probes).
    BreakerOpened {
        /// Failures in the window (0 when a probe failed and it reopened).
        failures: u32,
        /// Outcomes in the window (0 when a probe failed and it reopened).
        calls: u32,
        /// When it half-opens.
        until: redrive_core::clock::Timestamp,
    },
    /// The circuit breaker closed: its probes succeeded, receiving resumes.
    BreakerClosed,
}

impl ProcessingError {
    /// The client error kind, when the failure is a request's.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            ProcessingError::Receive(e) => Some(e.kind()),
            ProcessingError::Settle(e) => Some(e.kind()),
            ProcessingError::Session(e) => Some(e.kind()),
            ProcessingError::Divert(e) => Some(e.kind()),
            ProcessingError::LockExpired => Some(ErrorKind::LockLost),
            _ => None,
        }
    }
}

impl fmt::Display for ProcessingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcessingError::Handler(e) => write!(f, "handler failed: {e}"),
            ProcessingError::Panicked(m) => write!(f, "handler panicked: {m}"),
            ProcessingError::Receive(e) => e.fmt(f),
            ProcessingError::Settle(e) => e.fmt(f),
            ProcessingError::Session(e) => e.fmt(f),
            ProcessingError::Divert(e) => write!(f, "divert to the dead-letter queue failed: {e}"),
            ProcessingError::LockExpired => {
                f.write_str("the lock ran out before the message was handled")
            }
            ProcessingError::Configuration(m) => f.write_str(m),
            ProcessingError::RestartBudgetExhausted { restarts } => {
                write!(
                    f,
                    "{restarts} worker restarts within the restart budget's period"
                )
            }
            ProcessingError::BreakerOpened {
                failures,
                calls,
                until,
            } => {
                if *calls == 0 {
                    write!(
                        f,
                        "circuit breaker reopened: a probe failed; receiving again after {}",
                        until.to_rfc3339()
                    )
                } else {
                    write!(
                        f,
                        "circuit breaker opened: {failures} of {calls} handled messages failed; receiving again after {}",
                        until.to_rfc3339()
                    )
                }
            }
            ProcessingError::BreakerClosed => {
                f.write_str("circuit breaker closed: its probes succeeded; receiving resumed")
            }
        }
    }
}

/// One error, as the [`on_error`](ProcessorOptions::on_error) callback receives it.
#[derive(Debug)]
#[non_exhaustive]
pub struct ProcessorErrorEvent {
    /// Where it came from.
    pub source: ErrorSource,
    /// The queue the processor receives from (a subscription's `<topic>.<subscription>`).
    pub entity: String,
    /// The message concerned, if any.
    pub message_id: Option<String>,
    /// What went wrong.
    pub error: ProcessingError,
}

/// Why a processor ended on its own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProcessorError {
    /// More worker restarts than the budget allows within its period (a dead-letter queue
    /// that stays unwritable, a handler that keeps panicking). Every message it held was
    /// abandoned.
    #[error(
        "processor of {entity} stopped: {restarts} worker restarts within {within:?} (budget {max_restarts}); last failure: {last_failure}"
    )]
    RestartBudgetExhausted {
        /// The entity.
        entity: String,
        /// Restarts counted within the period.
        restarts: u32,
        /// The budget.
        max_restarts: u32,
        /// Its period.
        within: Duration,
        /// The failure that spent it.
        last_failure: String,
    },
}

/// Counts of what a processor did, one per delivery (a snapshot; see
/// [`ProcessorHandle::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProcessorStats {
    /// Deliveries received.
    pub received: u64,
    /// Deliveries the processor is done with, whatever the outcome (not counting those
    /// abandoned because it stopped).
    pub processed: u64,
    /// Deliveries handed to the handler (or the invalid-message handler).
    pub handled: u64,
    /// Deliveries completed by the processor (not counting explicit settlements).
    pub completed: u64,
    /// Deliveries a handler rejected (returned an error or panicked).
    pub nacked: u64,
    /// Deliveries abandoned to be delivered again.
    pub redelivery_requested: u64,
    /// Deliveries dead-lettered at once (a permanent failure).
    pub dead_lettered: u64,
    /// Deliveries diverted to the policy's dead-letter queue and acknowledged.
    pub diverted: u64,
    /// Diverts that failed (the delivery not acknowledged).
    pub divert_failed: u64,
    /// Undecodable deliveries.
    pub invalid: u64,
    /// Lock renewals.
    pub lock_renewed: u64,
    /// Locks lost (a renewal refused, or a prefetched message whose lock ran out).
    pub lock_lost: u64,
    /// Worker restarts.
    pub restarts: u64,
    /// Messages abandoned because the processor stopped.
    pub abandoned_on_shutdown: u64,
    /// Times the circuit breaker opened (from closed, or again after a failed probe).
    pub breaker_opened: u64,
    /// Times the circuit breaker closed after good probes.
    pub breaker_closed: u64,
    /// Where the circuit breaker stands now.
    pub breaker: BreakerState,
}

type Dispatch = Arc<dyn Fn(Arc<delivery::DeliveryCtx>) -> BoxFuture<run::Handled> + Send + Sync>;
type Decode<T> = Arc<dyn Fn(&ReceivedMessage) -> Result<T, InvalidMessage> + Send + Sync>;
type InvalidHandler =
    Arc<dyn Fn(Delivery<InvalidMessage>) -> BoxFuture<Result<(), HandlerError>> + Send + Sync>;

/// A processor being configured: [`Client::processor_builder`]; `T` is what the decode
/// step makes of each message (`()` without one).
#[must_use]
pub struct ProcessorBuilder<T> {
    client: Client,
    entity: Entity,
    options: ProcessorOptions,
    decode: Decode<T>,
    invalid: Option<InvalidHandler>,
}

impl<T> fmt::Debug for ProcessorBuilder<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessorBuilder")
            .field("entity", &self.entity)
            .field("options", &self.options)
            .finish()
    }
}

impl ProcessorBuilder<()> {
    pub(crate) fn new(client: Client, entity: Entity) -> ProcessorBuilder<()> {
        ProcessorBuilder {
            client,
            entity,
            options: ProcessorOptions::default(),
            decode: Arc::new(|_| Ok(())),
            invalid: None,
        }
    }
}

impl<T: Send + 'static> ProcessorBuilder<T> {
    /// The options.
    pub fn options(mut self, options: ProcessorOptions) -> Self {
        self.options = options;
        self
    }

    /// The decode step: what the handler gets as [`Delivery::value`]. A message it refuses
    /// goes to the [`handle_invalid`](ProcessorBuilder::handle_invalid) handler instead
    /// (without one, it is rejected as a transient failure), and, diverted by a dead-letter
    /// policy, is marked [`REDRIVE_INVALID`].
    pub fn decode<U: Send + 'static>(
        self,
        decode: impl Fn(&ReceivedMessage) -> Result<U, InvalidMessage> + Send + Sync + 'static,
    ) -> ProcessorBuilder<U> {
        ProcessorBuilder {
            client: self.client,
            entity: self.entity,
            options: self.options,
            decode: Arc::new(decode),
            invalid: self.invalid,
        }
    }

    /// The handler of messages the decode step refuses; its result settles the message as
    /// the handler's does.
    pub fn handle_invalid<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(Delivery<InvalidMessage>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        self.invalid = Some(Arc::new(move |d| Box::pin(handler(d))));
        self
    }

    /// The processor, with `handler` for every decoded message; checked, not started
    /// ([`Processor::start`]).
    pub fn build<F, Fut>(self, handler: F) -> Result<Processor, ProcessorBuildError>
    where
        F: Fn(Delivery<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        self.entity.check()?;
        self.options.check(&self.entity)?;
        let decode = self.decode;
        let invalid = self.invalid;
        let handler = Arc::new(handler);
        let check_decode = decode.clone();
        let dispatch: Dispatch =
            Arc::new(
                move |ctx: Arc<delivery::DeliveryCtx>| match decode(&ctx.message) {
                    Ok(value) => {
                        let fut = handler(Delivery { ctx, value });
                        Box::pin(async move {
                            run::Handled {
                                invalid: None,
                                result: fut.await,
                            }
                        })
                    }
                    Err(why) => {
                        let reason = why.reason().to_owned();
                        match &invalid {
                            Some(h) => {
                                let fut = h(Delivery { ctx, value: why });
                                Box::pin(async move {
                                    run::Handled {
                                        invalid: Some(reason),
                                        result: fut.await,
                                    }
                                })
                            }
                            None => Box::pin(async move {
                                run::Handled {
                                    invalid: Some(reason),
                                    result: Err(HandlerError::transient(why)),
                                }
                            }),
                        }
                    }
                },
            );
        let is_invalid: run::InvalidCheck = Arc::new(move |m: &ReceivedMessage| {
            check_decode(m).err().map(|e| e.reason().to_owned())
        });
        Ok(Processor::new(
            self.client,
            self.entity,
            self.options,
            dispatch,
            is_invalid,
        ))
    }
}

/// A processor, built and checked but not started. The dead-letter sender of its policy
/// exists already: it needs nothing from the server until its first divert.
pub struct Processor {
    inner: run::Setup,
}

impl fmt::Debug for Processor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Processor")
            .field("entity", &self.inner.entity)
            .field("options", &self.inner.options)
            .finish()
    }
}

impl Processor {
    fn new(
        client: Client,
        entity: Entity,
        options: ProcessorOptions,
        dispatch: Dispatch,
        is_invalid: run::InvalidCheck,
    ) -> Processor {
        Processor {
            inner: run::Setup::new(client, entity, options, dispatch, is_invalid),
        }
    }

    /// The entity.
    pub fn entity(&self) -> &Entity {
        &self.inner.entity
    }

    /// The queue the policy diverts to, if the processor has a policy.
    pub fn dead_letter_queue(&self) -> Option<&str> {
        self.inner.dead_letter.as_ref().map(|s| s.queue())
    }

    /// Starts receiving and handling (on the current tokio runtime).
    pub fn start(self) -> ProcessorHandle {
        run::start(self.inner)
    }
}

impl Client {
    /// A processor of the queue `queue` handing each message to `handler`; see the
    /// [`processor`](crate::processor) module. Checked, not started.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use redrive_client::{Client, HandlerError, ProcessorOptions};
    ///
    /// let client = Client::builder("http://127.0.0.1:7474").build()?;
    /// let options = ProcessorOptions::new()
    ///     .max_concurrent_calls(8)
    ///     .on_error(|e| eprintln!("{:?} on {}: {}", e.source, e.entity, e.error));
    /// let handle = client
    ///     .processor("orders", options, |d| async move {
    ///         let body = d.message().body_str().ok_or("not text")?;
    ///         if body.is_empty() {
    ///             return Err(HandlerError::permanent("EmptyOrder", "no content"));
    ///         }
    ///         Ok(())
    ///     })?
    ///     .start();
    /// // … later:
    /// handle.shutdown(Duration::from_secs(30)).await?;
    /// # Ok(()) }
    /// ```
    pub fn processor<F, Fut>(
        &self,
        queue: &str,
        options: ProcessorOptions,
        handler: F,
    ) -> Result<Processor, ProcessorBuildError>
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        self.processor_builder(Entity::queue(queue))
            .options(options)
            .build(handler)
    }

    /// A processor of the pull subscription `subscription` of `topic` (its queue
    /// `<topic>.<subscription>`); as [`Client::processor`].
    pub fn subscription_processor<F, Fut>(
        &self,
        topic: &str,
        subscription: &str,
        options: ProcessorOptions,
        handler: F,
    ) -> Result<Processor, ProcessorBuildError>
    where
        F: Fn(Delivery) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        self.processor_builder(Entity::subscription(topic, subscription))
            .options(options)
            .build(handler)
    }

    /// A processor of `entity` to configure step by step (a decode step, an
    /// invalid-message handler).
    pub fn processor_builder(&self, entity: Entity) -> ProcessorBuilder<()> {
        ProcessorBuilder::new(self.clone(), entity)
    }
}
