//! redrive's service layer. Every interface (the native HTTP API, the CLI through it, the
//! SQS endpoint, and later push delivery) calls these operations; none talks to the
//! store directly (they do not depend on `redrive-store`), so the queue rules cannot
//! drift between interfaces. They speak to it in the records of [`model`].
//!
//! The broker validates input into core types, fills defaults (ids, expiry), calls one
//! store operation, wakes long polls, and turns the store's reported effects into metrics
//! and logs. It holds no business state of its own: the store is the state.
//!
//! # Layout
//! - [`queues`](Broker::create_queue): queue management.
//! - `messages`: send, receive with long polling, peek, settle ([`Settle`]).
//! - `sessions`: session locks.
//! - `access`: tokens, authentication, authorization, rate limits, revocation and the
//!   audit log; audited operations take an [`Actor`].
//! - `dead_letters`: the dead-letter store; operations take an [`Actor`].
//! - `worker`: the one loop of every leased worker (lease, pass, wake-up, sleep on the
//!   clock, cancellation) and its pass counter, [`Broker::passes`].
//! - `sweeper`: the background sweep of lock expiries and TTLs.
//! - [`cases`]: recovery cases (seed 001), the [`Cases`] service ([`Broker::cases`]):
//!   the advance, a person's decisions, intents, effect authorities, case groups, the
//!   case worker.
//! - `replay_plans`: bounded replay, the [`Plans`] service ([`Broker::plans`]): the dry
//!   run, a plan's life, its requests, the advance, admissions, the plan runner.
//! - `replayer`: automatic replay of dead letters, the [`Replay`] service
//!   ([`Broker::replay`]): the pass, the judgement's preparation, the case it closes,
//!   restore and its preview, settings and counts, the drain at start; the worker under
//!   a lease; imports.
//! - `mover`: message move tasks (dead-letter queue redrive), kept per process.
//! - `topics`: topics, subscriptions (each owns a queue) and publishing.
//! - `dispatcher`: push delivery of push subscriptions' events, with retries.
//! - `forward`: copies of push dead letters into a dead-letter topic.
//! - `transactions`: a group of sends, settlements and cancels across queues, applied
//!   all or nothing ([`Broker::transaction`]).
//! - `push_stats`: per-subscription delivery counters and the latency histogram.
//! - `series`: each queue's ten-second points over the last hour, in memory, bounded.
//! - `overview`: who the caller is and every entity it may see with what needs a person.
//! - `metrics`: counters and the Prometheus rendering.
//! - `health`: whether the store answers, for `/healthz`.
//! - [`model`]: the records and errors operations take and answer.
//! - `trace`: what the span of each operation records (never a whole lock token).

mod access;
pub mod cases;
mod clock;
mod context;
mod dead_letters;
mod dispatcher;
mod error;
mod failures;
mod forward;
mod health;
mod messages;
mod metrics;
pub mod model;
mod mover;
mod overview;
mod push_stats;
mod queues;
mod register;
mod relay;
mod replay_plans;
mod replayer;
mod series;
mod sessions;
mod sweeper;
#[cfg(test)]
mod tests;
mod topics;
mod trace;
mod transactions;
mod waiters;
mod worker;

use std::sync::Arc;

pub use access::{
    AccessSettings, Actor, CreatedToken, DEFAULT_AUDIT_RETENTION_DAYS, MAX_AUDIT_FILTER_LEN,
    MAX_GRANTS, RevocationWatch, TOKEN_PREFIX, TokenSpec, looks_like_token, secret_hash,
};
pub use cases::{CaseSettings, CaseWorker, Cases};
pub use clock::SystemClock;
pub use dead_letters::{DeadLetterFilter, DeadLetterListing};
pub use dispatcher::Dispatcher;
pub use error::{BrokerError, BrokerResult, RedeliveryRefusal, Storage};
pub use failures::{
    DEFAULT_FAILURE_PAGE, FailureFilter, FailureListing, FailureShape, FailureSignature,
    MAX_FAILURE_PAGE, SPARKLINE_HOURS,
};
pub use health::StoreHealth;
pub use messages::{
    BROKER_REASONS, HeldSession, LockBounds, MAX_RECEIVE_BATCH, MAX_SEND_BATCH, MAX_SQS_LOCK_MS,
    MAX_WAIT_MS, Outgoing, ReceiveOptions, Settle,
};
pub use mover::{
    AUTHORIZATION_REVOKED, MAX_MOVE_RATE, MOVE_BATCH, MoveError, MoveSpec, MoveStatus, MoveTask,
    is_move_task_handle, move_budget, move_rate,
};
pub use overview::{
    HighlightView, MAX_HIGHLIGHTS_PER_KIND, OverviewView, PushHealth, QueueOverview,
    SubscriptionOverview, TopicOverview,
};
pub use push_stats::{LATENCY_BUCKETS_S, PushCounters};
pub use queues::QueueView;
pub use redrive_push::{NetworkError, NetworkPolicy};
pub use register::RegisterChange;
pub use relay::WakeupRelay;
pub use replay_plans::{
    BlockingGate, DEFAULT_OBSERVE_MS, DEFAULT_PLAN_LEASE_MS, MAX_PLAN_ITEMS, MAX_PLAN_LEASE_MS,
    MAX_PREVIEW_LIST, MAX_SELECTION_VALUES, MovePlanView, NodeReplayBudget, PLANS_LEASE,
    PlanAction, PlanInput, PlanPass, PlanPreview, PlanSelectionInput, PlanSettings, PlanSpec,
    PlanView, PlanWorker, Plans, PreviewItem, Reading, RunState,
};
pub use replayer::{
    REPLAY_BATCH, REPLAY_LEASE, Replay, ReplayPass, ReplaySettings, ReplayStatus, Replayer,
    RestorePreview,
};
pub use series::{
    MAX_REASONS, MAX_SERIES_ENTITIES, OTHER_REASON, SERIES_INTERVAL_MS, SERIES_POINTS, SeriesEvent,
    SeriesPointView,
};
pub use sessions::{DEFAULT_SESSION_PAGE, MAX_SESSION_PAGE, SessionPage, SessionSummary};
pub use sweeper::{DEAD_LETTER_RETENTION_INTERVAL, DEFAULT_LEASE_TTL, SWEEP_LEASE, Sweeper};
pub use topics::{
    EventInput, MAX_PUBLISH_BATCH, PUBLISH_MEDIA_TYPES, PUSH_MAX_DELIVERY_COUNT, PublishedEvent,
    PushInput, SUBSCRIPTION_LOCK_MS, SubscriptionInput, SubscriptionView, VALIDATION_ORIGIN,
    subscription_queue,
};
pub use transactions::{
    MAX_TRANSACTION_OPERATIONS, TransactionApplied, TransactionError, TxApplied, TxOp,
};

use redrive_core::Clock;
use redrive_store::Store;
use tokio_util::sync::CancellationToken;

/// The broker: a cheap `Clone` handle.
#[derive(Clone)]
pub struct Broker {
    inner: Arc<Inner>,
}

struct Inner {
    /// The narrow context the services work over (the same store, clock and metrics as
    /// the fields below).
    ctx: context::Context,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    waiters: waiters::Waiters,
    metrics: Arc<metrics::Metrics>,
    shutdown: CancellationToken,
    /// The mover: SQS message move tasks, over `ctx`.
    mover: mover::Mover,
    /// Topic counters and the endpoint-validation client.
    topics: topics::TopicState,
    /// How callers are admitted.
    access_settings: AccessSettings,
    /// Rate-limit buckets and revocation guards of this node.
    access: access::AccessState,
    /// Which private and special addresses push endpoints may be (none by default).
    push_network: redrive_push::NetworkPolicy,
    /// Which certificates every outgoing `https://` request trusts (push, validation,
    /// effect authorities, probes, escalation webhooks).
    trust: redrive_tls::Trust,
    /// The replay worker's wake-up and settings.
    replay: Arc<replayer::ReplayState>,
    /// The case worker's wake-up, settings and HTTP client.
    cases: Arc<cases::CaseState>,
    /// The plan runner's wake-up and the node-wide replay budget.
    plans: Arc<replay_plans::PlanState>,
    /// The finished passes of each leased worker ([`Broker::passes`]).
    passes: worker::PassCounters,
    /// Each queue's recent activity on this node.
    series: series::Series,
}

impl Broker {
    /// A broker over `store`, reading time from `clock`, without authentication, whose
    /// push endpoints may only be public addresses.
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        Self::with_options(
            store,
            clock,
            AccessSettings::default(),
            redrive_push::NetworkPolicy::default(),
        )
    }

    /// [`Broker::new`] admitting callers as `access` says.
    pub fn with_access(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        access: AccessSettings,
    ) -> Self {
        Self::with_options(store, clock, access, redrive_push::NetworkPolicy::default())
    }

    /// [`Broker::new`] with push endpoints also allowed on the addresses `push_network`
    /// allows (loopback, private networks…): checked when a push subscription is created
    /// and, by the [`Dispatcher`] built over this broker, at every connection.
    pub fn with_push_network(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        push_network: redrive_push::NetworkPolicy,
    ) -> Self {
        Self::with_options(store, clock, AccessSettings::default(), push_network)
    }

    /// A broker with both: how callers are admitted and where push may connect; outgoing
    /// `https://` requests trust the platform's roots.
    pub fn with_options(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        access: AccessSettings,
        push_network: redrive_push::NetworkPolicy,
    ) -> Self {
        Self::with_outgoing(
            store,
            clock,
            access,
            push_network,
            redrive_tls::Trust::platform(),
        )
    }

    /// [`Broker::with_options`] whose outgoing `https://` requests trust `trust` (the
    /// platform's roots plus an operator's extra CA bundle, say).
    pub fn with_outgoing(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        access: AccessSettings,
        push_network: redrive_push::NetworkPolicy,
        trust: redrive_tls::Trust,
    ) -> Self {
        let metrics = Arc::new(metrics::Metrics::default());
        let node_id = format!("node-{:016x}", fastrand::u64(..));
        let ctx = context::Context {
            store: store.clone(),
            clock: clock.clone(),
            metrics: metrics.clone(),
            node_id: node_id.into(),
        };
        Broker {
            inner: Arc::new(Inner {
                ctx: ctx.clone(),
                store,
                clock,
                waiters: waiters::Waiters::default(),
                metrics,
                shutdown: CancellationToken::new(),
                mover: mover::Mover::new(ctx),
                topics: topics::TopicState::default(),
                access_settings: access,
                access: access::AccessState::default(),
                push_network,
                trust,
                replay: Arc::default(),
                cases: Arc::default(),
                plans: Arc::default(),
                passes: worker::PassCounters::default(),
                series: series::Series::default(),
            }),
        }
    }

    /// The clock the broker reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The addresses push endpoints may be beyond public ones.
    pub fn push_network(&self) -> &redrive_push::NetworkPolicy {
        &self.inner.push_network
    }

    /// The settings push requests are sent with (the broker's network policy and trust).
    pub(crate) fn delivery_settings(&self) -> redrive_push::DeliverySettings {
        redrive_push::DeliverySettings {
            network: self.inner.push_network.clone(),
            trust: self.inner.trust.clone(),
            ..redrive_push::DeliverySettings::default()
        }
    }

    /// The mover service (SQS message move tasks).
    pub(crate) fn mover(&self) -> &mover::Mover {
        &self.inner.mover
    }

    /// This process's id among those sharing the store.
    pub fn node_id(&self) -> &str {
        &self.inner.ctx.node_id
    }

    /// Ends every long poll now and refuses new ones, and stops message move tasks; used
    /// at shutdown.
    pub fn begin_shutdown(&self) {
        self.inner.shutdown.cancel();
    }

    fn now(&self) -> redrive_core::Timestamp {
        self.inner.clock.now()
    }

    fn apply_effects(&self, effects: &redrive_store::Effects) {
        self.inner.metrics.effects(effects);
        for d in &effects.dead_lettered {
            (self.inner.series).dead_lettered(
                d.message.queue.as_str(),
                d.reason.as_str(),
                self.now(),
            );
            tracing::info!(
                queue = %d.message.queue,
                message_id = %d.message.message_id,
                sequence = d.message.sequence,
                delivery_count = d.message.delivery_count,
                reason = %d.reason,
                dead_letter_id = %d.dead_letter_id,
                "message dead-lettered"
            );
            if let Some((q, _)) = &d.forwarded_to {
                self.inner.waiters.wake(q.as_str());
            }
            if let Some(target) = &d.fell_back_from {
                // Seed 003: fail loudly when the dead-letter destination is unavailable.
                tracing::error!(
                    queue = %d.message.queue,
                    target = %target,
                    dead_letter_id = %d.dead_letter_id,
                    route_evidence = "incomplete",
                    "dead-letter queue missing or unfit: record kept in the queue's own store"
                );
            }
        }
        if effects.dead_lettered.iter().any(|d| d.candidate) {
            self.wake_replay();
        }
        if effects.dead_lettered.iter().any(|d| d.case_opened) {
            self.inner.cases.wake.notify_one();
        }
        for e in &effects.expired {
            tracing::info!(
                queue = %e.queue, message_id = %e.message_id, sequence = e.sequence,
                delivery_count = e.delivery_count, "message expired and removed"
            );
        }
        for e in &effects.lock_expired {
            tracing::debug!(
                queue = %e.queue, message_id = %e.message_id, sequence = e.sequence,
                delivery_count = e.delivery_count, "lock expired"
            );
        }
        for q in &effects.woken {
            self.inner.waiters.wake(q.as_str());
        }
    }
}
