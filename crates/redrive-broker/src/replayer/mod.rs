//! Automatic replay of dead letters (see `redrive_core::judgement` for the rules and
//! `redrive_store::skeleton::replay` for the bookkeeping).
//!
//! A live dead letter on an entity whose policy enables replay is a candidate from the
//! transaction that wrote it: the trigger is durable and never dropped. One process at a
//! time (the holder of the store lease [`REPLAY_LEASE`]) runs the [`Replayer`]: woken by
//! every candidate written here (and at least every poll interval, for candidates written
//! by another node or due later), it claims due candidates and judges each record:
//!
//! 1. re-reads the record's area (a claimed record is live; one that is gone or no longer
//!    live is work already done: the judge returns quietly);
//! 2. parses its events (a record of events whose payload is not a list of valid events
//!    is quarantined whole with the parse error) and judges each one;
//! 3. writes the quarantine first — the record moved whole when every event has one
//!    cause, otherwise one copy per cause, create-if-absent — and logs and counts a
//!    quarantine only when this judgement created it;
//! 4. republishes the rest to the origin, sequentially, in chunks under both budgets; a
//!    chunk that fails stops those behind it, and the record is judged again after a
//!    backoff (events already republished go again: the idempotency bar admits them);
//! 5. archives the original (or deletes it when its quarantine copies hold every event),
//!    best-effort: a failure there is logged, never retried, because retrying would
//!    republish events that already went out.
//!
//! Everything up to and including the republish is retried with backoff; a record that
//! keeps failing is flagged (metric, error log, `last_error`) after
//! [`ReplaySettings::flag_after_failures`] failures and kept, still retried at the
//! longest backoff. Nothing is discarded.
//!
//! At start, the worker drains: live records that are not candidates, of entities that
//! replay, older than the entity's delivery window, become candidates (records written
//! before replay was enabled, or moved back to live while it was off). A store that cannot
//! be read then is logged, and the worker goes on.
//!
//! # Layout
//! - this file: the settings, the pass's answer, the [`Replayer`] worker, the [`Replay`]
//!   service and the broker's calls into it;
//! - `pass`: one pass (the claim, each record judged, the republish, the archive, the
//!   failures, the audit);
//! - `prepare`: the judgement of one record and its quarantine;
//! - `case`: the case of a replayed record, closed from the outcome;
//! - `restore`: restoring a quarantined record, and its preview;
//! - `status`: settings, wake-ups and counts;
//! - `drain`: the drain at start;
//! - `import`: importing dead letters from elsewhere.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use redrive_core::case::by_hand::HandOperation;
use redrive_core::judgement::{
    self, Destination, EventRef, Judgement, ORIGINAL_ID_PROPERTY, Partition, QuarantineCause,
    REPLAYED_FROM_PROPERTY,
};
use redrive_core::register::Register;
use redrive_core::{Area, EntityName, PropertyValue, QueuePolicy, RecordFormat, Timestamp};
use redrive_events::dead_letter_events::{self, DeadLetteredEvent};
use redrive_events::import::{ImportFormat, ImportedRecord, parse_import};
use redrive_store::{
    DeadLetterRecord, DrainRule, NewMessage, Quarantine, QuarantineCopy, ReplayCounts,
    ReplayFinish, StoreError,
};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::cases::by_hand::{HandPass, HandTarget, Judged};
use crate::context::Context;
use crate::metrics::Counter;
use crate::worker::{LeasedWorker, Next, Pass, Timing};
use crate::{Actor, Broker, BrokerError, BrokerResult};

use pass::Key;
use prepare::{Events, Prepared, check_sizes, event_refs, message_size};

mod case;
mod drain;
mod import;
mod pass;
mod prepare;
mod restore;
mod status;
/// Name of the store lease that elects the replaying process.
pub const REPLAY_LEASE: &str = "replayer";

/// Records claimed per pass at most.
pub const REPLAY_BATCH: u32 = 2_000;

/// Records claimed per slot of the node-wide replay budget: one item each.
const REPLAY_PER_SLOT: u32 = 1;

/// Records the drain makes candidates per store call.
const DRAIN_BATCH: u32 = 1_000;

/// How automatic replay runs on this node.
#[derive(Debug, Clone)]
pub struct ReplaySettings {
    /// Failed judgements after which a record is flagged (default 10).
    pub flag_after_failures: u32,
    /// How long a claimed candidate is held before another claim may take it, should
    /// its judge die (default 60 s).
    pub claim_ms: u64,
    /// Longest sleep between two looks for due candidates (default 1 s): bounds the delay
    /// of candidates written by another node or made due by a judge delay.
    pub poll_interval: Duration,
    /// Lease time-to-live: how long after the replaying process dies another one takes
    /// over (default 5 s).
    pub lease_ttl: Duration,
}

impl Default for ReplaySettings {
    fn default() -> Self {
        ReplaySettings {
            flag_after_failures: judgement::DEFAULT_FLAG_AFTER_FAILURES,
            claim_ms: 60_000,
            poll_interval: Duration::from_secs(1),
            lease_ttl: crate::DEFAULT_LEASE_TTL,
        }
    }
}

/// What the broker keeps for automatic replay: the worker's wake-up and settings.
pub(crate) struct ReplayState {
    pub(crate) wake: Notify,
    pub(crate) settings: std::sync::RwLock<ReplaySettings>,
}

impl Default for ReplayState {
    fn default() -> Self {
        ReplayState {
            wake: Notify::new(),
            settings: std::sync::RwLock::new(ReplaySettings::default()),
        }
    }
}

/// What one pass over due candidates did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayPass {
    /// Records claimed and judged.
    pub judged: u64,
    /// Events republished to their origin.
    pub republished: u64,
    /// Chunks they were republished in (one store write each).
    pub chunks: u64,
    /// Events quarantined by this pass (a quarantine another judgement had written
    /// already is not counted again), by cause.
    pub quarantined: BTreeMap<QuarantineCause, u64>,
    /// Records archived after their republish.
    pub archived: u64,
    /// Judgements that failed (the record is retried after a backoff).
    pub failed: u64,
    /// Records already judged or gone when their turn came (nothing done).
    pub already_done: u64,
    /// Records this pass's claim set aside because their stored row cannot be read
    /// (each logged once, here; no claim takes them again until an operator fixes or
    /// removes them).
    pub undecodable: Vec<redrive_store::UndecodableRecord>,
    /// When the node-wide replay budget lets the next record go, if it held this pass
    /// back (the worker sleeps until then; nothing was claimed).
    pub next_at: Option<Timestamp>,
}

/// What the next judgement of a quarantined record will do, were it restored now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestorePreview {
    /// The record.
    pub id: String,
    /// Events that would be republished.
    pub republish: u64,
    /// Events that would be quarantined again, by cause (a restore clears only the attempt
    /// cap).
    pub requarantine: BTreeMap<QuarantineCause, u64>,
    /// Whether the entity replays automatically (if not, the restored record waits live).
    pub replay_enabled: bool,
    /// Whether the restore was done (false for a dry run).
    pub restored: bool,
}

/// The replay counts of one entity.
pub type ReplayStatus = ReplayCounts;

/// The replay worker of one process.
pub struct Replayer {
    broker: Broker,
    /// Whether this worker has drained stranded records since it started.
    drained: bool,
}

impl Replayer {
    /// A worker over `broker`, run as its [`ReplaySettings`] say.
    pub fn new(broker: Broker) -> Self {
        Replayer {
            broker,
            drained: false,
        }
    }

    /// Replays until `cancel` fires. Errors are logged and retried at the next look; they
    /// never end the loop.
    pub async fn run(self, cancel: CancellationToken) {
        LeasedWorker::new(&self.broker, REPLAY_LEASE)
            .run(self, cancel)
            .await;
    }

    /// The drain, once per start of the worker (at its first pass holding the lease).
    async fn drain_once(&mut self) {
        if std::mem::replace(&mut self.drained, true) {
            return;
        }
        match self.broker.replay().drain_replay_candidates().await {
            Ok(n) if n > 0 => {
                tracing::info!(
                    records = n,
                    "replay drain made stranded dead letters candidates"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e,
                "replay drain could not read the store; it runs again at the next start"),
        }
    }
}

impl Pass for Replayer {
    fn timing(&self) -> Timing {
        let settings = self.broker.replay_settings();
        Timing {
            lease_ttl: settings.lease_ttl,
            poll: settings.poll_interval,
        }
    }

    fn wake(&self) -> Option<&Notify> {
        Some(&self.broker.inner.replay.wake)
    }

    /// The drain at start, then two passes at once (their claims never overlap): one's
    /// store writes share commits with the other's, and one judges while the other
    /// writes. A claim may stop short of the batch (its byte budget): look again at once
    /// while passes find work.
    async fn pass(&mut self) -> BrokerResult<Next> {
        self.drain_once().await;
        let r = self.broker.replay();
        let (one, two) = tokio::join!(r.replay_once(), r.replay_once());
        let mut next = Next::Idle;
        for pass in [one, two] {
            match pass {
                Ok(pass) if pass.judged > 0 || !pass.undecodable.is_empty() => next = Next::Now,
                Ok(pass) => {
                    if let Some(t) = pass.next_at {
                        next = next.min(Next::By(t));
                    }
                }
                Err(e) => tracing::warn!(error = %e, "replay pass failed; retrying"),
            }
        }
        Ok(next)
    }
}

/// Automatic replay as the broker answers it ([`Broker::replay`]): a cheap `Clone`.
///
/// It holds the `Context` (store, clock, metrics, audit), the replay state of this node
/// (`ReplayState`: the worker's wake-up and the settings) and one handle of the rest of
/// the broker. A judgement reads the register, draws on the node-wide replay budget (the
/// plans'), wakes the long polls and push delivery of the queues it republishes to, and
/// closes or gates the cases of the records it replays (the case operations, reached
/// through [`Broker::cases`]); those live on the broker or are reached from it, so the
/// handle is the broker itself.
#[derive(Clone)]
pub struct Replay {
    /// Store, clock, metrics and audit.
    ctx: Context,
    /// The worker's wake-up and the settings.
    state: Arc<ReplayState>,
    /// The register, the node budget, the waiters and push delivery, the case operations.
    broker: Broker,
}

impl Replay {
    /// The time now, on the injected clock.
    fn now(&self) -> Timestamp {
        self.ctx.now()
    }
}

/// Automatic replay's calls the broker keeps for its callers outside the service (the
/// interfaces, `serve`, the tests driving replay one pass at a time); each is one line
/// over [`Broker::replay`].
impl Broker {
    /// Automatic replay.
    pub fn replay(&self) -> Replay {
        Replay {
            ctx: self.inner.ctx.clone(),
            state: self.inner.replay.clone(),
            broker: self.clone(),
        }
    }

    /// [`Replay::replay_settings`].
    pub fn replay_settings(&self) -> ReplaySettings {
        self.replay().replay_settings()
    }

    /// [`Replay::set_replay_settings`].
    pub fn set_replay_settings(&self, settings: ReplaySettings) {
        self.replay().set_replay_settings(settings);
    }

    /// [`Replay::wake_replay`].
    pub(crate) fn wake_replay(&self) {
        self.inner.replay.wake.notify_one();
    }

    /// [`Replay::replay_once`].
    pub async fn replay_once(&self) -> BrokerResult<ReplayPass> {
        self.replay().replay_once().await
    }

    /// [`Replay::drain_replay_candidates`].
    pub async fn drain_replay_candidates(&self) -> BrokerResult<u64> {
        self.replay().drain_replay_candidates().await
    }

    /// [`Replay::replay_status`].
    pub async fn replay_status(&self, queue: Option<&str>) -> BrokerResult<Vec<ReplayStatus>> {
        self.replay().replay_status(queue).await
    }

    /// [`Replay::restore_dead_letter`].
    pub async fn restore_dead_letter(
        &self,
        queue: &str,
        named: &redrive_core::id::Named<redrive_core::DeadLetterId>,
        dry_run: bool,
        actor: &Actor,
    ) -> BrokerResult<RestorePreview> {
        self.replay()
            .restore_dead_letter(queue, named, dry_run, actor)
            .await
    }
}
