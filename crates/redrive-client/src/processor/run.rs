//! The running processor: a receive loop feeding bounded workers (or one session per
//! worker), lock renewal beside each handler, settlement after it, the policy's divert,
//! the restart budget, and the shutdown that abandons what it cannot finish.
//!
//! Every wait reads the client's clock; nothing here sleeps on tokio time.

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redrive_core::clock::{Clock, Timestamp};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::ErrorKind;
use crate::message::ReceivedMessage;
use crate::processor::breaker::{Admit, Breaker, BreakerState, Transition, Verdict};
use crate::processor::complete::Completer;
use crate::processor::delivery::{Class, DeliveryCtx};
use crate::processor::{
    DeadLetterPolicy, Dispatch, Entity, ErrorSource, HandlerError, ProcessingError, ProcessorError,
    ProcessorErrorEvent, ProcessorOptions, ProcessorStats,
};
use crate::receiver::{DeadLetterOptions, MAX_RECEIVE_BATCH, Receiver, SessionReceiver};
use crate::{Client, Sender};

const TARGET: &str = "redrive_client::processor";

/// Last errors remembered per message id (for a divert's evidence), oldest forgotten first.
const MAX_LAST_ERRORS: usize = 10_000;

/// What a dispatch produced: the handler's result, and whether the decode step refused
/// the message (its reason).
pub(crate) struct Handled {
    pub(crate) invalid: Option<String>,
    pub(crate) result: Result<(), HandlerError>,
}

/// The decode step as a check: why a message is undecodable, if it is.
pub(crate) type InvalidCheck = Arc<dyn Fn(&ReceivedMessage) -> Option<String> + Send + Sync>;

/// Everything a processor is made of before it starts.
pub(crate) struct Setup {
    pub(crate) client: Client,
    pub(crate) entity: Entity,
    pub(crate) options: ProcessorOptions,
    dispatch: Dispatch,
    is_invalid: InvalidCheck,
    receiver: Receiver,
    /// The policy's dead-letter sender: made with the processor, used at the first divert.
    pub(crate) dead_letter: Option<Sender>,
}

impl Setup {
    pub(crate) fn new(
        client: Client,
        entity: Entity,
        options: ProcessorOptions,
        dispatch: Dispatch,
        is_invalid: InvalidCheck,
    ) -> Setup {
        let mut receiver = client.receiver(entity.receive_queue());
        if let Some(d) = options.lock_duration {
            receiver = receiver.lock_duration(d);
        }
        let dead_letter = options
            .dead_letter_policy
            .as_ref()
            .map(|p| client.sender(p.queue_for(&entity)).assign_message_ids(true));
        Setup {
            client,
            entity,
            options,
            dispatch,
            is_invalid,
            receiver,
            dead_letter,
        }
    }
}

struct Counters {
    received: AtomicU64,
    processed: AtomicU64,
    handled: AtomicU64,
    completed: AtomicU64,
    nacked: AtomicU64,
    redelivery_requested: AtomicU64,
    dead_lettered: AtomicU64,
    diverted: AtomicU64,
    divert_failed: AtomicU64,
    invalid: AtomicU64,
    lock_renewed: AtomicU64,
    lock_lost: AtomicU64,
    restarts: AtomicU64,
    abandoned_on_shutdown: AtomicU64,
    breaker_opened: AtomicU64,
    breaker_closed: AtomicU64,
    /// The breaker's state: 0 closed, 1 open, 2 half-open.
    breaker: std::sync::atomic::AtomicU8,
    /// The counts, published by [`publish`] after changes (several changes close
    /// together make one publication).
    watch: watch::Sender<ProcessorStats>,
    /// Wakes the publisher.
    changed: Arc<Notify>,
}

impl Drop for Counters {
    fn drop(&mut self) {
        // The publisher finds the counts gone and ends.
        self.changed.notify_one();
    }
}

impl Counters {
    fn new() -> Counters {
        let zero = AtomicU64::new;
        Counters {
            received: zero(0),
            processed: zero(0),
            handled: zero(0),
            completed: zero(0),
            nacked: zero(0),
            redelivery_requested: zero(0),
            dead_lettered: zero(0),
            diverted: zero(0),
            divert_failed: zero(0),
            invalid: zero(0),
            lock_renewed: zero(0),
            lock_lost: zero(0),
            restarts: zero(0),
            abandoned_on_shutdown: zero(0),
            breaker_opened: zero(0),
            breaker_closed: zero(0),
            breaker: std::sync::atomic::AtomicU8::new(0),
            watch: watch::Sender::new(ProcessorStats::default()),
            changed: Arc::new(Notify::new()),
        }
    }

    /// Counts one on `c`; the publisher publishes it.
    fn hit(&self, c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
        self.changed.notify_one();
    }

    /// Publishes the counts now (read under the watch's lock, so a later publication
    /// never shows older counts).
    fn publish_now(&self) {
        self.watch.send_modify(|s| *s = self.snapshot());
    }

    fn snapshot(&self) -> ProcessorStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ProcessorStats {
            received: g(&self.received),
            processed: g(&self.processed),
            handled: g(&self.handled),
            completed: g(&self.completed),
            nacked: g(&self.nacked),
            redelivery_requested: g(&self.redelivery_requested),
            dead_lettered: g(&self.dead_lettered),
            diverted: g(&self.diverted),
            divert_failed: g(&self.divert_failed),
            invalid: g(&self.invalid),
            lock_renewed: g(&self.lock_renewed),
            lock_lost: g(&self.lock_lost),
            restarts: g(&self.restarts),
            abandoned_on_shutdown: g(&self.abandoned_on_shutdown),
            breaker_opened: g(&self.breaker_opened),
            breaker_closed: g(&self.breaker_closed),
            breaker: match self.breaker.load(Ordering::Relaxed) {
                1 => BreakerState::Open,
                2 => BreakerState::HalfOpen,
                _ => BreakerState::Closed,
            },
        }
    }
}

/// Publishes the counts after changes, off the workers' path: a worker counts with one
/// atomic add and a wake-up, and a burst of changes becomes one publication (watchers see
/// the latest counts, as a `watch` always promises, not every step).
async fn publish(stats: Weak<Counters>, changed: Arc<Notify>) {
    loop {
        changed.notified().await;
        let Some(stats) = stats.upgrade() else {
            return;
        };
        stats.publish_now();
    }
}

/// The last error per message id, bounded.
#[derive(Default)]
struct LastErrors {
    by_id: HashMap<String, String>,
    order: VecDeque<String>,
}

struct Shared {
    setup: Setup,
    queue: String,
    clock: Arc<dyn Clock>,
    stats: Arc<Counters>,
    /// Every task of the processor: workers, receive loops, completions in flight.
    tracker: TaskTracker,
    /// Received messages waiting for a handler slot.
    waiting: AtomicUsize,
    /// Handled messages whose automatic completion is in flight (each holds a place).
    completing: AtomicUsize,
    /// Wakes the receive loops when what [`receive_now`] reads changed: the last waiting
    /// message taken, a handler slot freed, a completion answered.
    changed: Notify,
    /// No new receives; workers finish what they hold.
    stop: CancellationToken,
    /// Handlers still running are stopped and their messages abandoned.
    abort: CancellationToken,
    /// How long a shutdown waits for handlers; `None`: not at all (the processor failed).
    shutdown_timeout: Mutex<Option<Duration>>,
    failure: Mutex<Option<ProcessorError>>,
    restarts: Mutex<VecDeque<Timestamp>>,
    last_errors: Mutex<LastErrors>,
    /// The circuit breaker, when the options ask for one.
    breaker: Option<Breaker>,
    /// Automatic completions, batched.
    completer: Completer,
}

/// Locks a mutex whose every critical section is a short, panic-free update: a poisoned
/// lock is still consistent.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn options(&self) -> &ProcessorOptions {
        &self.setup.options
    }

    fn receiver(&self) -> &Receiver {
        &self.setup.receiver
    }

    fn event(&self, event: &'static str, message_id: &str) {
        let sub = self.setup.entity.subscription_name().unwrap_or("");
        let topic = self.setup.entity.real_topic();
        let consumer = self.options().consumer.as_str();
        match event {
            "received" | "completed" | "lock_renewed" => tracing::debug!(
                target: TARGET, event, count = 1u64, entity = %self.queue,
                topic, subscription = sub, consumer, message_id, "{event}"
            ),
            "lock_lost" | "divert_failed" => tracing::warn!(
                target: TARGET, event, count = 1u64, entity = %self.queue,
                topic, subscription = sub, consumer, message_id, "{event}"
            ),
            _ => tracing::info!(
                target: TARGET, event, count = 1u64, entity = %self.queue,
                topic, subscription = sub, consumer, message_id, "{event}"
            ),
        }
    }

    fn report(&self, source: ErrorSource, message_id: Option<&str>, error: ProcessingError) {
        tracing::warn!(
            target: TARGET,
            entity = %self.queue,
            source = ?source,
            message_id = message_id.unwrap_or(""),
            error = %error,
            "processor error"
        );
        if let Some(cb) = &self.options().on_error {
            let event = ProcessorErrorEvent {
                source,
                entity: self.queue.clone(),
                message_id: message_id.map(str::to_owned),
                error,
            };
            // The application's callback must not take a worker down with it.
            if std::panic::catch_unwind(AssertUnwindSafe(|| cb(&event))).is_err() {
                tracing::error!(target: TARGET, entity = %self.queue, "the error callback panicked");
            }
        }
    }

    fn remember_error(&self, message_id: &str, error: String) {
        let mut g = lock(&self.last_errors);
        if g.by_id.insert(message_id.to_owned(), error).is_none() {
            g.order.push_back(message_id.to_owned());
        }
        while g.order.len() > MAX_LAST_ERRORS {
            if let Some(old) = g.order.pop_front() {
                g.by_id.remove(&old);
            }
        }
    }

    fn last_error(&self, message_id: &str) -> Option<String> {
        lock(&self.last_errors).by_id.get(message_id).cloned()
    }

    fn forget_error(&self, message_id: &str) {
        let mut g = lock(&self.last_errors);
        if g.by_id.remove(message_id).is_some() {
            g.order.retain(|id| id != message_id);
        }
    }

    /// A worker went down (a failed divert, a panicking handler): counted against the
    /// restart budget; one too many ends the processor.
    fn restart(&self, why: &str) {
        let budget = self.options().restart_budget;
        let now = self.clock.now();
        let count = {
            let mut r = lock(&self.restarts);
            r.push_back(now);
            while r.front().is_some_and(|t| now.since(*t) >= budget.within) {
                r.pop_front();
            }
            u32::try_from(r.len()).unwrap_or(u32::MAX)
        };
        self.stats.hit(&self.stats.restarts);
        if count <= budget.max_restarts {
            tracing::warn!(
                target: TARGET, event = "worker_restarted", entity = %self.queue,
                restarts = count, max_restarts = budget.max_restarts, reason = why,
                "worker restarted"
            );
            return;
        }
        tracing::error!(
            target: TARGET, entity = %self.queue, restarts = count,
            max_restarts = budget.max_restarts, reason = why,
            "restart budget spent; the processor stops"
        );
        {
            let mut f = lock(&self.failure);
            if f.is_none() {
                *f = Some(ProcessorError::RestartBudgetExhausted {
                    entity: self.queue.clone(),
                    restarts: count,
                    max_restarts: budget.max_restarts,
                    within: budget.within,
                    last_failure: why.to_owned(),
                });
            }
        }
        self.report(
            ErrorSource::Processor,
            None,
            ProcessingError::RestartBudgetExhausted { restarts: count },
        );
        *lock(&self.shutdown_timeout) = None;
        self.stop.cancel();
    }

    /// Publishes a change of the breaker's state: counts, state, tracing, and (opened,
    /// closed) the error callback.
    fn breaker_changed(&self, t: Transition) {
        let state = self
            .breaker
            .as_ref()
            .map_or(BreakerState::Closed, Breaker::state);
        let code = match state {
            BreakerState::Open => 1,
            BreakerState::HalfOpen => 2,
            _ => 0,
        };
        self.stats.breaker.store(code, Ordering::Relaxed);
        let sub = self.setup.entity.subscription_name().unwrap_or("");
        let topic = self.setup.entity.real_topic();
        let consumer = self.options().consumer.as_str();
        let until = self
            .breaker
            .as_ref()
            .and_then(|b| b.open_until())
            .unwrap_or_default();
        match t {
            Transition::Opened { failures, calls } => {
                self.stats.hit(&self.stats.breaker_opened);
                tracing::warn!(target: TARGET, event = "breaker_opened", count = 1u64,
                    entity = %self.queue, topic, subscription = sub, consumer, failures, calls,
                    until = %until.to_rfc3339(), "circuit breaker opened");
                self.report(
                    ErrorSource::CircuitBreaker,
                    None,
                    ProcessingError::BreakerOpened {
                        failures,
                        calls,
                        until,
                    },
                );
            }
            Transition::Reopened => {
                self.stats.hit(&self.stats.breaker_opened);
                tracing::warn!(target: TARGET, event = "breaker_opened", count = 1u64,
                    entity = %self.queue, topic, subscription = sub, consumer, probe_failed = true,
                    until = %until.to_rfc3339(), "circuit breaker reopened");
                self.report(
                    ErrorSource::CircuitBreaker,
                    None,
                    ProcessingError::BreakerOpened {
                        failures: 0,
                        calls: 0,
                        until,
                    },
                );
            }
            Transition::HalfOpened => {
                self.stats.changed.notify_one();
                tracing::info!(target: TARGET, event = "breaker_half_open", count = 1u64,
                    entity = %self.queue, topic, subscription = sub, consumer,
                    "circuit breaker half-open: probing");
            }
            Transition::Closed => {
                self.stats.hit(&self.stats.breaker_closed);
                tracing::info!(target: TARGET, event = "breaker_closed", count = 1u64,
                    entity = %self.queue, topic, subscription = sub, consumer,
                    "circuit breaker closed");
                self.report(
                    ErrorSource::CircuitBreaker,
                    None,
                    ProcessingError::BreakerClosed,
                );
            }
        }
    }

    /// Tells the breaker what a delivery said about the dependency.
    fn judge(&self, verdict: Verdict) {
        if let Some(b) = &self.breaker
            && let Some(t) = b.record(self.clock.now(), verdict)
        {
            self.breaker_changed(t);
        }
    }

    /// A received message left the waiting line (a worker took it, or it was released).
    fn took_one(&self) {
        if self.waiting.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.changed.notify_waiters();
        }
    }

    async fn sleep(&self, d: Duration) {
        let deadline = self.clock.now().plus(d);
        self.clock.sleep_until(deadline).await;
    }

    /// Releases a message the processor will not handle, at once.
    async fn abandon_on_shutdown(&self, m: &ReceivedMessage) {
        match self.receiver().abandon_after(m, Duration::ZERO).await {
            Ok(()) => self.stats.hit(&self.stats.abandoned_on_shutdown),
            Err(e) => self.report(
                ErrorSource::Abandon,
                Some(m.message_id()),
                ProcessingError::Settle(e),
            ),
        }
    }
}

/// A received message waiting for a worker, with its place in the bound.
struct Held {
    message: ReceivedMessage,
    place: OwnedSemaphorePermit,
}

/// A running processor. [`shutdown`](ProcessorHandle::shutdown) stops it; dropping the
/// handle stops it too (in the background, waiting up to 30 s for handlers).
pub struct ProcessorHandle {
    shared: Arc<Shared>,
    task: Option<tokio::task::JoinHandle<Result<(), ProcessorError>>>,
}

impl std::fmt::Debug for ProcessorHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessorHandle")
            .field("entity", &self.shared.setup.entity)
            .field("stats", &self.stats())
            .finish()
    }
}

impl ProcessorHandle {
    /// What the processor did so far.
    pub fn stats(&self) -> ProcessorStats {
        self.shared.stats.snapshot()
    }

    /// The counts as they change: a receiver that always comes to the latest counts
    /// (changes close together are published once), to wait for a condition:
    /// `watch.wait_for(|s| s.completed >= 10)`.
    pub fn watch_stats(&self) -> watch::Receiver<ProcessorStats> {
        self.shared.stats.watch.subscribe()
    }

    /// The entity.
    pub fn entity(&self) -> &Entity {
        &self.shared.setup.entity
    }

    /// Whether the processor has ended (shut down, or failed on its own).
    pub fn is_finished(&self) -> bool {
        self.task.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Completes when the processor ends on its own (its restart budget spent) or is shut
    /// down elsewhere; the handle stays usable.
    pub async fn stopped(&self) {
        self.shared.stop.cancelled().await;
    }

    /// Stops the processor: no new receives (a receive in flight is awaited, and what it
    /// returns abandoned), prefetched messages abandoned, in-flight handlers given
    /// `timeout` on the client's clock to finish — then stopped and their messages
    /// abandoned. Returns how it ended: `Err` when it had already failed on its own.
    pub async fn shutdown(mut self, timeout: Duration) -> Result<(), ProcessorError> {
        {
            let mut t = lock(&self.shared.shutdown_timeout);
            if !self.shared.stop.is_cancelled() {
                *t = Some(timeout);
            }
        }
        self.shared.stop.cancel();
        self.finish().await
    }

    /// Waits for the processor to end on its own (its restart budget spent) or through a
    /// shutdown requested elsewhere; how it ended.
    pub async fn join(mut self) -> Result<(), ProcessorError> {
        self.finish().await
    }

    async fn finish(&mut self) -> Result<(), ProcessorError> {
        let Some(task) = self.task.take() else {
            return Ok(());
        };
        match task.await {
            Ok(r) => r,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // The supervisor is never aborted; a runtime shutting down ends it.
            Err(_) => Ok(()),
        }
    }
}

impl Drop for ProcessorHandle {
    fn drop(&mut self) {
        if self.task.is_some() && !self.shared.stop.is_cancelled() {
            *lock(&self.shared.shutdown_timeout) = Some(Duration::from_secs(30));
            self.shared.stop.cancel();
        }
    }
}

pub(crate) fn start(setup: Setup) -> ProcessorHandle {
    let queue = setup.entity.receive_queue();
    let clock = setup.client.clock().clone();
    let breaker = setup.options.circuit_breaker.map(Breaker::new);
    let completer = Completer::start(setup.receiver.clone());
    let stats = Arc::new(Counters::new());
    tokio::spawn(publish(Arc::downgrade(&stats), stats.changed.clone()));
    let shared = Arc::new(Shared {
        setup,
        queue,
        clock,
        stats,
        tracker: TaskTracker::new(),
        waiting: AtomicUsize::new(0),
        completing: AtomicUsize::new(0),
        changed: Notify::new(),
        stop: CancellationToken::new(),
        abort: CancellationToken::new(),
        shutdown_timeout: Mutex::new(None),
        failure: Mutex::new(None),
        restarts: Mutex::new(VecDeque::new()),
        last_errors: Mutex::new(LastErrors::default()),
        breaker,
        completer,
    });
    let task = tokio::spawn(supervise(shared.clone()));
    ProcessorHandle {
        shared,
        task: Some(task),
    }
}

async fn supervise(shared: Arc<Shared>) -> Result<(), ProcessorError> {
    let check = tokio::spawn(check_config(shared.clone()));
    let tracker = shared.tracker.clone();
    let n = shared.options().max_concurrent_calls;
    if shared.options().sessions {
        for _ in 0..n {
            tracker.spawn(session_worker(shared.clone()));
        }
    } else {
        let places = n + shared.options().prefetch;
        let held = Arc::new(Semaphore::new(places));
        // One receive in flight per 64 places (at most 4): a large processor is not held
        // to one request's round trip between batches.
        let loops = (places / 64).clamp(1, 4);
        let refill = refill_batch(places, loops);
        // The concurrency bound: a received message waits for one of `n` handler slots,
        // first come first served.
        let slots = Arc::new(Semaphore::new(n));
        for _ in 0..loops {
            tracker.spawn(receive_loop(
                shared.clone(),
                held.clone(),
                slots.clone(),
                refill,
            ));
        }
    }
    tracker.close();
    tracing::info!(target: TARGET, entity = %shared.queue, concurrency = n, "processor started");

    shared.stop.cancelled().await;
    // Prefetched messages release themselves now (each waits for a handler slot or the
    // stop), not after the handlers finish.
    tracing::info!(target: TARGET, entity = %shared.queue, "processor stopping");
    let timeout = *lock(&shared.shutdown_timeout);
    match timeout {
        Some(t) => {
            let deadline = shared.clock.now().plus(t);
            tokio::select! {
                () = tracker.wait() => {}
                () = shared.clock.sleep_until(deadline) => {
                    shared.abort.cancel();
                    tracker.wait().await;
                }
            }
        }
        None => {
            shared.abort.cancel();
            tracker.wait().await;
        }
    }
    check.abort();
    shared.stats.publish_now();
    tracing::info!(target: TARGET, entity = %shared.queue, "processor stopped");
    match lock(&shared.failure).take() {
        Some(f) => Err(f),
        None => Ok(()),
    }
}

/// Tells the application when the entity's own max delivery count leaves no room for the
/// policy's redeliveries (the server would dead-letter first). Best effort: without the
/// right to read the queue, nothing is said.
async fn check_config(shared: Arc<Shared>) {
    let Some(policy) = &shared.options().dead_letter_policy else {
        return;
    };
    match shared.setup.client.admin().get_queue(&shared.queue).await {
        Ok(info) if info.policy.max_delivery_count <= policy.max_redelivery => shared.report(
            ErrorSource::Configuration,
            None,
            ProcessingError::Configuration(format!(
                "the queue {} dead-letters after {} deliveries, which leaves no room for a \
                 dead-letter policy diverting after {}: raise its max_delivery_count above {}",
                shared.queue,
                info.policy.max_delivery_count,
                policy.max_redelivery,
                policy.max_redelivery
            )),
        ),
        Ok(_) => {}
        Err(e) => tracing::debug!(
            target: TARGET, entity = %shared.queue, error = %e,
            "cannot read the queue's policy to check the dead-letter policy against it"
        ),
    }
}

/// How many free places a receive loop gathers before it receives while the processor is
/// busy: its share of the places, so that under load one request fetches a batch rather
/// than the one place the last completion freed.
fn refill_batch(places: usize, loops: usize) -> usize {
    (places / loops.max(1)).clamp(1, MAX_RECEIVE_BATCH as usize)
}

/// Whether a receive loop holding `free` places receives now rather than wait for more:
/// when it has its batch (`want`), or when a handler slot would otherwise sit idle (no
/// received message waits for one) and the completions in flight would not bring the
/// places up to a batch anyway. Otherwise the places it lacks are on their way back.
fn receive_now(
    free: usize,
    want: usize,
    waiting: usize,
    idle_slots: usize,
    completing: usize,
) -> bool {
    free >= want || (waiting == 0 && idle_slots > 0 && free + completing < want)
}

async fn receive_loop(
    shared: Arc<Shared>,
    held: Arc<Semaphore>,
    slots: Arc<Semaphore>,
    refill: usize,
) {
    let mut failures: u32 = 0;
    loop {
        let first = tokio::select! {
            biased;
            () = shared.stop.cancelled() => return,
            p = held.clone().acquire_owned() => match p {
                Ok(p) => p,
                // The semaphore is never closed.
                Err(_) => return,
            },
        };
        // The breaker is asked once a place is free, so that the verdict of the delivery
        // that held it is in.
        let mut limit = MAX_RECEIVE_BATCH;
        let mut probes = 0;
        if let Some(b) = &shared.breaker {
            let changed = b.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (admit, t) = b.admit(shared.clock.now());
            if let Some(t) = t {
                shared.breaker_changed(t);
            }
            match admit {
                Admit::Any => {}
                Admit::Probes(n) => {
                    limit = n.min(MAX_RECEIVE_BATCH);
                    probes = n;
                }
                Admit::Until(at) => {
                    drop(first);
                    tokio::select! {
                        biased;
                        () = shared.stop.cancelled() => return,
                        () = shared.clock.sleep_until(at) => {}
                    }
                    continue;
                }
                Admit::AwaitProbes => {
                    drop(first);
                    tokio::select! {
                        biased;
                        () = shared.stop.cancelled() => return,
                        () = changed => {}
                    }
                    continue;
                }
            }
        }
        let mut permits = vec![first];
        let want = refill.min(limit as usize);
        loop {
            while permits.len() < limit as usize {
                match held.clone().try_acquire_owned() {
                    Ok(p) => permits.push(p),
                    Err(_) => break,
                }
            }
            let changed = shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if receive_now(
                permits.len(),
                want,
                shared.waiting.load(Ordering::Acquire),
                slots.available_permits(),
                shared.completing.load(Ordering::Acquire),
            ) {
                break;
            }
            tokio::select! {
                biased;
                () = shared.stop.cancelled() => return,
                p = held.clone().acquire_owned() => match p {
                    Ok(p) => permits.push(p),
                    Err(_) => return,
                },
                () = changed => {}
            }
        }
        let max = u32::try_from(permits.len()).unwrap_or(MAX_RECEIVE_BATCH);
        // Not raced with the stop: a receive dropped mid-flight could lock messages on the
        // server that nobody handles. It ends within the receive wait.
        match shared
            .receiver()
            .receive(max, shared.options().receive_wait)
            .await
        {
            Ok(messages) => {
                failures = 0;
                if probes > 0
                    && let Some(b) = &shared.breaker
                {
                    let got = u32::try_from(messages.len()).unwrap_or(u32::MAX);
                    b.unused_probes(probes.saturating_sub(got));
                }
                for message in messages {
                    shared.stats.hit(&shared.stats.received);
                    shared.event("received", message.message_id());
                    let Some(permit) = permits.pop() else {
                        // More messages than asked for: never kept unbounded.
                        shared.abandon_on_shutdown(&message).await;
                        continue;
                    };
                    if shared.stop.is_cancelled() {
                        shared.abandon_on_shutdown(&message).await;
                        continue;
                    }
                    shared.waiting.fetch_add(1, Ordering::AcqRel);
                    shared.tracker.spawn(deliver(
                        shared.clone(),
                        slots.clone(),
                        Held {
                            message,
                            place: permit,
                        },
                    ));
                }
            }
            Err(e) => {
                if let Some(b) = &shared.breaker {
                    b.unused_probes(probes);
                }
                failures = failures.saturating_add(1);
                shared.report(ErrorSource::Receive, None, ProcessingError::Receive(e));
                let wait = backoff(failures);
                tokio::select! {
                    biased;
                    () = shared.stop.cancelled() => return,
                    () = shared.sleep(wait) => {}
                }
            }
        }
    }
}

/// The pause after `n` receive failures in a row (the client already retried each):
/// 1 s doubling to 30 s.
fn backoff(n: u32) -> Duration {
    let secs = 1u64 << n.saturating_sub(1).min(5);
    Duration::from_secs(secs.min(30))
}

/// A received message: it waits for a handler slot (a prefetched message), then is
/// processed; one still waiting when the processor stops is released at once.
async fn deliver(shared: Arc<Shared>, slots: Arc<Semaphore>, held: Held) {
    let slot = tokio::select! {
        biased;
        () = shared.stop.cancelled() => None,
        s = slots.acquire_owned() => s.ok(),
    };
    shared.took_one();
    let Some(slot) = slot else {
        // The slots are never closed: only the stop gets here.
        shared.abandon_on_shutdown(&held.message).await;
        return;
    };
    let Held { message, place } = held;
    let (outcome, verdict, completion) = process_one(&shared, message).await;
    shared.judge(verdict);
    let Some(message) = completion else {
        shared.stats.hit(&shared.stats.processed);
        // A handler that went down keeps its slot through the pause.
        pause_after(&shared, outcome).await;
        drop((slot, place));
        shared.changed.notify_waiters();
        return;
    };
    // The handler's call is over: its slot goes to the next message at once, while this
    // one keeps its place in the bound until the server has answered its completion.
    drop(slot);
    shared.completing.fetch_add(1, Ordering::AcqRel);
    shared.changed.notify_waiters();
    complete(&shared, &message).await;
    shared.stats.hit(&shared.stats.processed);
    shared.completing.fetch_sub(1, Ordering::AcqRel);
    drop(place);
    shared.changed.notify_waiters();
}

/// One delivery of a session, completed before the session's next message is handled,
/// so that the session is settled in order.
async fn process_in_order(shared: &Arc<Shared>, message: ReceivedMessage) {
    let (outcome, verdict, completion) = process_one(shared, message).await;
    shared.judge(verdict);
    if let Some(message) = completion {
        complete(shared, &message).await;
    }
    shared.stats.hit(&shared.stats.processed);
    pause_after(shared, outcome).await;
}

/// A worker that went down pauses before its next delivery.
async fn pause_after(shared: &Shared, outcome: Outcome) {
    if outcome == Outcome::Restarted {
        tokio::select! {
            biased;
            () = shared.stop.cancelled() => {}
            () = shared.sleep(shared.options().restart_budget.delay) => {}
        }
    }
}

/// A handler's future with its panics caught: `Err` carries the panic's payload.
struct CatchUnwind<F>(F);

impl<F: Future + Unpin> Future for CatchUnwind<F> {
    type Output = Result<F::Output, Box<dyn std::any::Any + Send>>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let inner = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| std::pin::Pin::new(inner).poll(cx))) {
            Ok(std::task::Poll::Ready(v)) => std::task::Poll::Ready(Ok(v)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(panic) => std::task::Poll::Ready(Err(panic)),
        }
    }
}

/// How a delivery ended for its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Done,
    /// The worker went down and is restarted.
    Restarted,
}

/// What is left of a delivery once its handler returned: the automatic completion, when
/// the handler accepted it and did not settle it itself.
type Completion = Option<Arc<ReceivedMessage>>;

/// One delivery: diverted, or handled with its lock renewed, then settled (an automatic
/// completion is returned to be sent).
async fn process_one(
    shared: &Arc<Shared>,
    message: ReceivedMessage,
) -> (Outcome, Verdict, Completion) {
    let message = Arc::new(message);
    let id = message.message_id().to_owned();
    if message
        .locked_until()
        .is_some_and(|u| u <= shared.clock.now())
    {
        // Its lock ran out while it waited in the prefetch buffer: it is the server's
        // again, delivered again without this processor doing anything.
        shared.stats.hit(&shared.stats.lock_lost);
        shared.event("lock_lost", &id);
        shared.report(
            ErrorSource::RenewLock,
            Some(&id),
            ProcessingError::LockExpired,
        );
        return (Outcome::Done, Verdict::Ignored, None);
    }
    if let Some(policy) = &shared.options().dead_letter_policy
        && message.delivery_count() > policy.max_redelivery
    {
        return (
            Box::pin(divert(shared, policy, &message)).await,
            Verdict::Ignored,
            None,
        );
    }
    let ctx = Arc::new(DeliveryCtx {
        receiver: shared.receiver().clone(),
        entity: shared.setup.entity.clone(),
        message: message.clone(),
        settled: Mutex::new(false),
        cancel: CancellationToken::new(),
    });
    shared.stats.hit(&shared.stats.handled);
    // The handler runs in this task, polled first: one that finishes at once costs no
    // lock-renewal timer. A panic is caught here as a spawned task's would be.
    let mut handler = CatchUnwind((shared.setup.dispatch)(ctx.clone()));
    let renewal = renew_message_lock(shared, &message, &ctx);
    tokio::pin!(renewal);
    let mut renewing = true;
    let outcome = loop {
        tokio::select! {
            biased;
            r = &mut handler => break Some(r),
            () = shared.abort.cancelled() => {
                ctx.cancel.cancel();
                break None;
            }
            () = &mut renewal, if renewing => renewing = false,
        }
    };
    // A stopped handler is dropped before its message is released.
    drop(handler);
    let mut verdict = Verdict::Ignored;
    let mut completion = None;
    match outcome {
        None => {
            if !ctx.is_settled() {
                Box::pin(shared.abandon_on_shutdown(&message)).await;
            }
        }
        Some(Err(panic)) => {
            let why = panic_text(panic.as_ref());
            shared.stats.hit(&shared.stats.nacked);
            shared.event("nacked", &id);
            shared.remember_error(&id, format!("handler panicked: {why}"));
            if !ctx.is_settled() {
                Box::pin(redeliver(shared, &message, Some(Duration::ZERO))).await;
            }
            shared.report(
                ErrorSource::HandlerPanic,
                Some(&id),
                ProcessingError::Panicked(why.clone()),
            );
            shared.restart(&format!("handler panicked on message {id}: {why}"));
            return (Outcome::Restarted, Verdict::Failure, None);
        }
        Some(Ok(Handled { invalid, result })) => {
            if invalid.is_some() {
                shared.stats.hit(&shared.stats.invalid);
            } else {
                verdict = match &result {
                    Ok(()) => Verdict::Success,
                    Err(e) => match e.class {
                        Class::Transient { .. } => Verdict::Failure,
                        // The message's fault: the dependency answered.
                        Class::Permanent { .. } => Verdict::Success,
                    },
                };
            }
            completion = settle_after(shared, &ctx, result).await;
        }
    }
    (Outcome::Done, verdict, completion)
}

/// Sends a handled message's automatic completion and counts its outcome.
async fn complete(shared: &Shared, message: &Arc<ReceivedMessage>) {
    let id = message.message_id();
    match shared.completer.complete(shared.receiver(), message).await {
        Ok(()) => {
            shared.stats.hit(&shared.stats.completed);
            shared.event("completed", id);
            shared.forget_error(id);
        }
        Err(e) => {
            if e.kind() == ErrorKind::LockLost {
                shared.stats.hit(&shared.stats.lock_lost);
                shared.event("lock_lost", id);
            }
            shared.report(ErrorSource::Complete, Some(id), ProcessingError::Settle(e));
        }
    }
}

/// Settles a handled delivery as its handler's result says, unless the handler did; an
/// automatic completion is returned, to be sent without holding the worker.
async fn settle_after(
    shared: &Arc<Shared>,
    ctx: &DeliveryCtx,
    result: Result<(), HandlerError>,
) -> Completion {
    let message = &ctx.message;
    let id = message.message_id();
    match result {
        Ok(()) => {
            if ctx.is_settled() {
                shared.forget_error(id);
                return None;
            }
            if !shared.options().auto_complete {
                tracing::debug!(target: TARGET, entity = %shared.queue, message_id = id,
                    "handled without settlement; auto-complete is off");
                return None;
            }
            Some(message.clone())
        }
        Err(error) => {
            shared.stats.hit(&shared.stats.nacked);
            shared.event("nacked", id);
            let text = error.error.to_string();
            shared.remember_error(id, text.clone());
            if !ctx.is_settled() {
                match &error.class {
                    Class::Transient { delay } => {
                        let delay = delay.or(shared.options().redelivery_interval);
                        Box::pin(redeliver(shared, message, delay)).await;
                    }
                    Class::Permanent { reason } => {
                        let description: String = text.chars().take(4096).collect();
                        let options = DeadLetterOptions::new(reason.clone())
                            .description(description)
                            .consumer(shared.options().consumer.clone());
                        match Box::pin(shared.receiver().dead_letter(message, options)).await {
                            Ok(_) => {
                                shared.stats.hit(&shared.stats.dead_lettered);
                                shared.event("dead_lettered", id);
                                shared.forget_error(id);
                            }
                            Err(e) => {
                                let refused = e.kind() == ErrorKind::Invalid;
                                shared.report(
                                    ErrorSource::DeadLetter,
                                    Some(id),
                                    ProcessingError::Settle(e),
                                );
                                // A reason the server refuses leaves the message locked:
                                // released rather than stuck until its lock runs out.
                                if refused {
                                    Box::pin(redeliver(
                                        shared,
                                        message,
                                        shared.options().redelivery_interval,
                                    ))
                                    .await;
                                }
                            }
                        }
                    }
                }
            }
            shared.report(
                ErrorSource::Handler,
                Some(id),
                ProcessingError::Handler(error),
            );
            None
        }
    }
}

/// Abandons a rejected delivery so that it is delivered again after `delay` (or the
/// queue's backoff).
async fn redeliver(shared: &Shared, message: &ReceivedMessage, delay: Option<Duration>) {
    let id = message.message_id();
    let r = match delay {
        Some(d) => shared.receiver().abandon_after(message, d).await,
        None => shared.receiver().abandon(message).await,
    };
    match r {
        Ok(()) => {
            shared.stats.hit(&shared.stats.redelivery_requested);
            shared.event("redelivery_requested", id);
        }
        Err(e) => {
            if e.kind() == ErrorKind::LockLost {
                shared.stats.hit(&shared.stats.lock_lost);
                shared.event("lock_lost", id);
            }
            shared.report(ErrorSource::Abandon, Some(id), ProcessingError::Settle(e));
        }
    }
}

/// Publishes the delivery to the policy's dead-letter queue, then acknowledges it; a
/// failed publish leaves it unacknowledged (released at once) and restarts the worker.
async fn divert(
    shared: &Arc<Shared>,
    policy: &DeadLetterPolicy,
    message: &ReceivedMessage,
) -> Outcome {
    let id = message.message_id();
    let Some(sender) = &shared.setup.dead_letter else {
        return Outcome::Done;
    };
    let last = shared.last_error(id);
    let invalid = (shared.setup.is_invalid)(message);
    let copy = DeadLetterPolicy::diverted(
        &shared.setup.entity,
        message,
        last.as_deref(),
        invalid.as_deref(),
        shared.clock.now(),
    );
    match sender.send(copy).await {
        Ok(_) => match shared.receiver().complete(message).await {
            Ok(()) => {
                shared.stats.hit(&shared.stats.diverted);
                shared.forget_error(id);
                tracing::info!(
                    target: TARGET,
                    event = "diverted",
                    count = 1u64,
                    entity = %shared.queue,
                    topic = shared.setup.entity.real_topic(),
                    subscription = shared.setup.entity.subscription_name().unwrap_or(""),
                    consumer = %shared.options().consumer,
                    message_id = id,
                    dead_letter_queue = %sender.queue(),
                    redelivery_count = message.delivery_count().saturating_sub(1),
                    max_redelivery = policy.max_redelivery,
                    "diverted"
                );
            }
            Err(e) => {
                // The copy is stored; the original comes back and is diverted again: the
                // dead-letter queue's reader tolerates the duplicate (at-least-once).
                if e.kind() == ErrorKind::LockLost {
                    shared.stats.hit(&shared.stats.lock_lost);
                    shared.event("lock_lost", id);
                }
                shared.report(ErrorSource::Complete, Some(id), ProcessingError::Settle(e));
            }
        },
        Err(e) => {
            shared.stats.hit(&shared.stats.divert_failed);
            shared.event("divert_failed", id);
            if let Err(a) = shared
                .receiver()
                .abandon_after(message, Duration::ZERO)
                .await
            {
                shared.report(ErrorSource::Abandon, Some(id), ProcessingError::Settle(a));
            }
            let why = format!("divert of message {id} to {} failed: {e}", sender.queue());
            shared.report(ErrorSource::Divert, Some(id), ProcessingError::Divert(e));
            shared.restart(&why);
            return Outcome::Restarted;
        }
    }
    Outcome::Done
}

/// The margin a lock is renewed ahead of its expiry: 10 s, or half the lock when that is
/// shorter.
fn margin(span: Duration) -> Duration {
    (span / 2).min(Duration::from_secs(10))
}

fn before(t: Timestamp, d: Duration) -> Timestamp {
    Timestamp(t.0.saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)))
}

/// Renews the delivery's lock ahead of its expiry until the renewal window closes or the
/// lock is lost; returns then (the handler goes on).
async fn renew_message_lock(shared: &Shared, message: &ReceivedMessage, ctx: &DeliveryCtx) {
    let max = shared.options().max_auto_lock_renewal;
    let (Some(token), Some(mut until)) = (message.lock_token(), message.locked_until()) else {
        return;
    };
    if max.is_zero() {
        return;
    }
    let id = message.message_id();
    let start = shared.clock.now();
    let window_ends = start.plus(max);
    let margin = margin(until.since(start));
    let mut next = before(until, margin);
    loop {
        if next >= window_ends {
            return;
        }
        shared.clock.sleep_until(next).await;
        match Box::pin(shared.receiver().renew_token(id, token)).await {
            Ok(u) => {
                until = u;
                next = before(u, margin);
                shared.stats.hit(&shared.stats.lock_renewed);
                shared.event("lock_renewed", id);
            }
            Err(e) if matches!(e.kind(), ErrorKind::LockLost | ErrorKind::NotFound) => {
                shared.stats.hit(&shared.stats.lock_lost);
                shared.event("lock_lost", id);
                ctx.cancel.cancel();
                shared.report(ErrorSource::RenewLock, Some(id), ProcessingError::Settle(e));
                return;
            }
            Err(e) => {
                shared.report(ErrorSource::RenewLock, Some(id), ProcessingError::Settle(e));
                let now = shared.clock.now();
                if now >= until {
                    shared.stats.hit(&shared.stats.lock_lost);
                    shared.event("lock_lost", id);
                    ctx.cancel.cancel();
                    return;
                }
                next = now.plus(until.since(now) / 2);
            }
        }
    }
}

async fn session_worker(shared: Arc<Shared>) {
    let mut failures: u32 = 0;
    loop {
        if shared.stop.is_cancelled() {
            return;
        }
        // Not raced with the stop, as a receive: an accept dropped mid-flight could lock a
        // session nobody holds.
        let accepted = shared
            .receiver()
            .accept_session(None, shared.options().receive_wait)
            .await;
        let session = match accepted {
            Ok(Some(s)) => {
                failures = 0;
                s
            }
            Ok(None) => continue,
            Err(e) => {
                failures = failures.saturating_add(1);
                shared.report(
                    ErrorSource::AcceptSession,
                    None,
                    ProcessingError::Session(e),
                );
                tokio::select! {
                    biased;
                    () = shared.stop.cancelled() => return,
                    () = shared.sleep(backoff(failures)) => continue,
                }
            }
        };
        run_session(&shared, &session).await;
    }
}

/// Handles a session's messages one at a time, in order, while its lock is renewed;
/// releases it when it goes idle or the processor stops.
async fn run_session(shared: &Arc<Shared>, session: &SessionReceiver) {
    let lost = CancellationToken::new();
    tracing::debug!(target: TARGET, entity = %shared.queue, session_id = session.session_id(), "session accepted");
    let renewal = renew_session_lock(shared, session, &lost);
    tokio::pin!(renewal);
    let work = async {
        loop {
            if shared.stop.is_cancelled() || lost.is_cancelled() {
                return;
            }
            match session.receive(1, shared.options().receive_wait).await {
                Ok(messages) if messages.is_empty() => return,
                Ok(messages) => {
                    for m in messages {
                        shared.stats.hit(&shared.stats.received);
                        shared.event("received", m.message_id());
                        if shared.stop.is_cancelled() || lost.is_cancelled() {
                            shared.abandon_on_shutdown(&m).await;
                            continue;
                        }
                        process_in_order(shared, m).await;
                    }
                }
                Err(e) => {
                    if e.kind() == ErrorKind::LockLost {
                        lost.cancel();
                    }
                    shared.report(ErrorSource::Receive, None, ProcessingError::Receive(e));
                    return;
                }
            }
        }
    };
    tokio::pin!(work);
    let mut renewing = true;
    loop {
        tokio::select! {
            biased;
            () = &mut work => break,
            () = &mut renewal, if renewing => renewing = false,
        }
    }
    if !lost.is_cancelled()
        && let Err(e) = session.release().await
    {
        shared.report(
            ErrorSource::ReleaseSession,
            None,
            ProcessingError::Session(e),
        );
    }
}

async fn renew_session_lock(shared: &Shared, session: &SessionReceiver, lost: &CancellationToken) {
    let max = shared.options().max_auto_lock_renewal;
    if max.is_zero() {
        return;
    }
    let start = shared.clock.now();
    let window_ends = start.plus(max);
    let mut until = session.locked_until();
    let margin = margin(until.since(start));
    let mut next = before(until, margin);
    loop {
        if next >= window_ends {
            return;
        }
        shared.clock.sleep_until(next).await;
        match session.renew_session_lock().await {
            Ok(u) => {
                until = u;
                next = before(u, margin);
                tracing::debug!(target: TARGET, event = "session_lock_renewed", entity = %shared.queue,
                    session_id = session.session_id(), "session lock renewed");
            }
            Err(e) if matches!(e.kind(), ErrorKind::LockLost | ErrorKind::NotFound) => {
                lost.cancel();
                shared.report(
                    ErrorSource::RenewSessionLock,
                    None,
                    ProcessingError::Session(e),
                );
                return;
            }
            Err(e) => {
                shared.report(
                    ErrorSource::RenewSessionLock,
                    None,
                    ProcessingError::Session(e),
                );
                let now = shared.clock.now();
                if now >= until {
                    lost.cancel();
                    return;
                }
                next = now.plus(until.since(now) / 2);
            }
        }
    }
}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receive_failures_back_off_from_one_to_thirty_seconds() {
        let secs: Vec<u64> = (1..=8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 30, 30, 30]);
    }

    #[test]
    fn a_receive_loop_gathers_its_share_of_the_places_up_to_one_request() {
        assert_eq!(refill_batch(128, 2), 64);
        assert_eq!(refill_batch(1024, 4), 256);
        // One request's most, however many places.
        assert_eq!(refill_batch(10_000, 4), MAX_RECEIVE_BATCH as usize);
        assert_eq!(refill_batch(1, 1), 1);
        assert_eq!(refill_batch(3, 0), 3);
    }

    #[test]
    fn a_receive_waits_for_a_batch_only_while_the_processor_is_busy() {
        // (free, want, waiting, idle slots, completing)
        // A whole batch: now.
        assert!(receive_now(64, 64, 10, 0, 0));
        // Messages still wait for a handler: wait for more places.
        assert!(!receive_now(1, 64, 5, 3, 0));
        // A handler would sit idle and nothing is on its way back: now, with what is free.
        assert!(receive_now(1, 64, 0, 1, 0));
        // A handler would sit idle, but completions in flight will bring a batch: wait.
        assert!(!receive_now(10, 64, 0, 64, 54));
        assert!(receive_now(10, 64, 0, 64, 53));
        // Every handler busy and nothing waiting: the free places gather.
        assert!(!receive_now(3, 64, 0, 0, 0));
    }

    #[test]
    fn locks_are_renewed_ten_seconds_or_half_a_lock_ahead() {
        assert_eq!(margin(Duration::from_secs(30)), Duration::from_secs(10));
        assert_eq!(margin(Duration::from_secs(8)), Duration::from_secs(4));
        assert_eq!(
            before(Timestamp(10_000), Duration::from_secs(4)),
            Timestamp(6_000)
        );
    }
}
