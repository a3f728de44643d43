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

use std::collections::BTreeMap;
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
use crate::metrics::Counter;
use crate::worker::{LeasedWorker, Next, Pass, Timing};
use crate::{Actor, Broker, BrokerError, BrokerResult};

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
        match self.broker.drain_replay_candidates().await {
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
        let b = &self.broker;
        let (one, two) = tokio::join!(b.replay_once(), b.replay_once());
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

/// Records of several chunks republishing at once in one pass.
const MAX_IN_FLIGHT: usize = 2;

/// How a record's republish task ended: the record, how to end it, the events and chunks
/// sent, and the outcome.
type RepublishDone = (Key, ReplayFinish, u64, u64, BrokerResult<()>);

/// Takes the end of a republish task into the pass.
fn settle_task(
    done: Result<RepublishDone, tokio::task::JoinError>,
    work: &mut Work,
    pass: &mut ReplayPass,
) {
    match done {
        Ok((key, finish, sent, chunks, result)) => {
            pass.republished += sent;
            pass.chunks += chunks;
            match result {
                Ok(()) => work.finish(key, finish, sent),
                Err(e) => work.failed(key, e),
            }
        }
        // A panicked task's record keeps its claim and is judged again when it runs out.
        Err(e) => tracing::error!(error = %e, "a replay republish task failed"),
    }
}

/// What the judgement of one record left to do.
enum Prepared {
    /// Quarantined whole by this judgement.
    Done,
    /// Gone or judged already: nothing to do.
    AlreadyDone,
    /// Nothing to republish; end the record so.
    Finish(ReplayFinish),
    /// Republish these messages in these chunks, then end the record so.
    Republish {
        messages: Vec<NewMessage>,
        chunks: Vec<std::ops::Range<usize>>,
        finish: ReplayFinish,
    },
}

/// A claimed record: its queue, id, and failed judgements so far.
#[derive(Debug, Clone)]
struct Key {
    queue: EntityName,
    id: String,
    failures: u32,
}

/// What a pass has left to write, gathered so that it is written in few store calls.
#[derive(Default)]
struct Work {
    /// Records of one chunk, per queue, in claim order.
    combined: BTreeMap<EntityName, Vec<(Key, Vec<NewMessage>, ReplayFinish)>>,
    /// Records to end, with the events they sent.
    finished: Vec<(Key, ReplayFinish, u64)>,
    /// Records whose judgement failed.
    failed: Vec<(Key, BrokerError)>,
    /// Audit entries: record ids per queue and action.
    audit: BTreeMap<(EntityName, &'static str), Vec<String>>,
}

impl Work {
    fn combine(&mut self, key: Key, messages: Vec<NewMessage>, finish: ReplayFinish) {
        self.combined
            .entry(key.queue.clone())
            .or_default()
            .push((key, messages, finish));
    }

    fn finish(&mut self, key: Key, finish: ReplayFinish, sent: u64) {
        self.finished.push((key, finish, sent));
    }

    fn failed(&mut self, key: Key, e: BrokerError) {
        self.failed.push((key, e));
    }

    fn judged(&mut self, key: &Key) {
        self.audit
            .entry((key.queue.clone(), "replay.judge"))
            .or_default()
            .push(key.id.clone());
    }
}

/// One event of a record, ready to judge and to republish.
enum Events {
    /// The record's message.
    Message,
    /// Parsed events of a record of events.
    Parsed(Vec<DeadLetteredEvent>),
}

impl Broker {
    /// The replay settings of this node.
    pub fn replay_settings(&self) -> ReplaySettings {
        self.inner
            .replay
            .settings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sets the replay settings of this node (configuration, at start).
    pub fn set_replay_settings(&self, settings: ReplaySettings) {
        *self
            .inner
            .replay
            .settings
            .write()
            .unwrap_or_else(|e| e.into_inner()) = settings;
    }

    /// Wakes whoever takes messages from `queue` after a republish: its long polls, and
    /// push delivery (the queue may be a push subscription's).
    fn wake_republished(&self, queue: &EntityName) {
        self.inner.waiters.wake(queue.as_str());
        let state = self.topic_state();
        state.push_work.notify_one();
        state.push_published.notify_waiters();
    }

    /// Wakes the replay worker (a candidate was written).
    pub(crate) fn wake_replay(&self) {
        self.inner.replay.wake.notify_one();
    }

    /// One pass: takes a slot of the node-wide replay budget, claims one due candidate
    /// (a record: one item, its bytes charged) and judges it. Public so
    /// that tests drive replay on a manual clock.
    ///
    /// Quarantines are written record by record, first. The republish of a record whose
    /// events fit one chunk is combined with other such records of the same queue into
    /// shared store writes under the same budgets (a failed write fails each of its
    /// records whole, as its one chunk failing would); a record of several chunks
    /// republishes them in order on its own. The records are then archived in one store
    /// call.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn replay_once(&self) -> BrokerResult<ReplayPass> {
        let settings = self.replay_settings();
        let now = self.now();
        let mut pass = ReplayPass::default();
        // The node-wide replay budget (the plans' pacer): one record a slot, its bytes
        // charged once claimed; a pass the budget holds back claims nothing and says when
        // the next slot comes.
        let slot = match self.plans().node_reserve(now) {
            Ok(slot) => slot,
            Err(t) => {
                pass.next_at = Some(t);
                return Ok(pass);
            }
        };
        let claim = match self
            .inner
            .store
            .claim_replay(now, REPLAY_PER_SLOT, settings.claim_ms)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                self.plans().node_unreserve(slot);
                return Err(e.into());
            }
        };
        if claim.records.is_empty() {
            // Nothing was due: the slot is not spent.
            self.plans().node_unreserve(slot);
        }
        let bytes: u64 = claim.records.iter().map(|r| r.body.len() as u64).sum();
        self.plans().node_charge(bytes, now);
        for u in &claim.undecodable {
            // Set aside by this claim alone: logged once, then left out of every pass.
            tracing::error!(queue = %u.queue, dead_letter_id = %u.id, reason = %u.reason,
                "a dead letter cannot be read; it is set aside from automatic replay until it is fixed or removed");
        }
        pass.undecodable = claim.undecodable;
        let claimed = claim.records;
        if claimed.is_empty() {
            return Ok(pass);
        }
        let register = self.register().await?;
        let mut policies: BTreeMap<EntityName, Option<QueuePolicy>> = BTreeMap::new();
        let mut versions: BTreeMap<EntityName, u64> = BTreeMap::new();
        let mut work = Work::default();
        let mut in_flight: tokio::task::JoinSet<RepublishDone> = tokio::task::JoinSet::new();
        for record in claimed {
            pass.judged += 1;
            let policy = match policies.get(&record.queue) {
                Some(p) => p.clone(),
                None => {
                    let p = match self.inner.store.get_queue(&record.queue).await {
                        Ok(q) => {
                            versions.insert(record.queue.clone(), q.policy_version);
                            Some(q.policy)
                        }
                        Err(StoreError::QueueNotFound { .. }) => None,
                        Err(e) => return Err(e.into()),
                    };
                    policies.insert(record.queue.clone(), p.clone());
                    p
                }
            };
            let Some(policy) = policy else {
                // The queue went, and its dead letters with it.
                pass.already_done += 1;
                continue;
            };
            if !policy.auto_replay.enabled {
                // Replay was turned off after the candidate was written: the record
                // stays live; its claim runs out and it is looked at again later.
                continue;
            }
            let key = Key {
                queue: record.queue.clone(),
                id: record.id.clone(),
                failures: record.replay.failures,
            };
            let version = versions.get(&record.queue).copied().unwrap_or_default();
            match self
                .prepare(record, (&policy, version), &register, &mut pass)
                .await
            {
                Ok(Prepared::Done) => work.judged(&key),
                Ok(Prepared::AlreadyDone) => pass.already_done += 1,
                Ok(Prepared::Finish(finish)) => work.finish(key, finish, 0),
                Ok(Prepared::Republish {
                    messages,
                    chunks,
                    finish,
                }) if chunks.len() <= 1 => work.combine(key, messages, finish),
                Ok(Prepared::Republish {
                    messages,
                    chunks,
                    finish,
                }) => {
                    // Records of several chunks republish in tasks of their own (at most
                    // MAX_IN_FLIGHT at once), so that the next record is judged while the
                    // store writes this one's chunks; each record's chunks stay in order.
                    while in_flight.len() >= MAX_IN_FLIGHT {
                        if let Some(done) = in_flight.join_next().await {
                            settle_task(done, &mut work, &mut pass);
                        }
                    }
                    let task = self.clone().republish_in_order(
                        key.queue.clone(),
                        messages,
                        chunks,
                        policy.clone(),
                    );
                    in_flight.spawn(async move {
                        let (sent, chunks, result) = task.await;
                        (key, finish, sent, chunks, result)
                    });
                }
                Err(e) => work.failed(key, e),
            }
        }
        while let Some(done) = in_flight.join_next().await {
            settle_task(done, &mut work, &mut pass);
        }
        self.republish_combined(&mut work, &policies, &mut pass)
            .await;
        self.finish_all(&mut work, &mut pass).await;
        for (key, e) in std::mem::take(&mut work.failed) {
            pass.failed += 1;
            self.judgement_failed(&key.queue, &key.id, key.failures, &e, &settings)
                .await;
            work.audit
                .entry((key.queue, "replay.fail"))
                .or_default()
                .push(key.id);
        }
        let actor = Actor::system("replay");
        for ((queue, action), ids) in std::mem::take(&mut work.audit) {
            self.audit(&actor, action, Some(queue.as_str()), ids, "ok")
                .await?;
        }
        Ok(pass)
    }

    /// Republishes the records whose events fit one chunk, per queue, in shared writes
    /// under the queue's budgets. A write that fails fails each record in it.
    async fn republish_combined(
        &self,
        work: &mut Work,
        policies: &BTreeMap<EntityName, Option<QueuePolicy>>,
        pass: &mut ReplayPass,
    ) {
        for (queue, records) in std::mem::take(&mut work.combined) {
            let Some(Some(policy)) = policies.get(&queue) else {
                continue;
            };
            let budget = &policy.auto_replay;
            let mut batch: Vec<NewMessage> = Vec::new();
            let mut owners: Vec<(Key, ReplayFinish, u64)> = Vec::new();
            let mut bytes = 0usize;
            let mut records = records.into_iter().peekable();
            while let Some((key, messages, finish)) = records.next() {
                bytes += messages.iter().map(message_size).sum::<usize>();
                let n = messages.len() as u64;
                batch.extend(messages);
                owners.push((key, finish, n));
                let full = match records.peek() {
                    None => true,
                    Some((_, next, _)) => {
                        batch.len() + next.len() > budget.max_chunk_events as usize
                            || bytes + next.iter().map(message_size).sum::<usize>()
                                > budget.max_chunk_bytes as usize
                    }
                };
                if !full {
                    continue;
                }
                let n_batch = batch.len() as u64;
                match self
                    .inner
                    .store
                    .enqueue(&queue, std::mem::take(&mut batch), self.now())
                    .await
                {
                    Ok(_) => {
                        self.wake_republished(&queue);
                        pass.republished += n_batch;
                        pass.chunks += 1;
                        self.inner
                            .metrics
                            .add(Counter::ReplayRepublished, queue.as_str(), n_batch);
                        for (key, finish, n) in owners.drain(..) {
                            work.finish(key, finish, n);
                        }
                    }
                    Err(e) => {
                        let e: BrokerError = e.into();
                        for (key, _, _) in owners.drain(..) {
                            work.failed(key, BrokerError::invalid("republish", e.to_string()));
                        }
                    }
                }
                bytes = 0;
            }
        }
    }

    /// Archives (or deletes) every record whose events went out, in one store call,
    /// best-effort: a failure is logged and nothing is retried (retrying would republish
    /// events that already went out); an un-archived record stays live until retention.
    async fn finish_all(&self, work: &mut Work, pass: &mut ReplayPass) {
        let finished = std::mem::take(&mut work.finished);
        if finished.is_empty() {
            return;
        }
        let items: Vec<(EntityName, String, ReplayFinish)> = finished
            .iter()
            .map(|(k, f, _)| (k.queue.clone(), k.id.clone(), f.clone()))
            .collect();
        match self.inner.store.finish_replays(&items, self.now()).await {
            Ok(done) => {
                for ((key, finish, n), did) in finished.into_iter().zip(done) {
                    if did && let ReplayFinish::Archive(j) = &finish {
                        pass.archived += 1;
                        self.inner
                            .metrics
                            .add(Counter::ReplayArchived, key.queue.as_str(), 1);
                        self.close_replayed_case(&key, j).await;
                    }
                    tracing::debug!(queue = %key.queue, dead_letter_id = %key.id,
                        republished = n, "dead letter replayed");
                    work.judged(&key);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, records = items.len(),
                    "replayed dead letters could not be archived; they stay live until retention removes them");
                for (key, _, _) in finished {
                    work.judged(&key);
                }
            }
        }
    }

    /// The case of a record automatic replay republished (a record that was a case: one
    /// quarantined and restored, or dead-lettered before its entity replayed), closed from
    /// the outcome: one terminal entry `indeterminate` — automatic replay observes no
    /// effect, so nothing binds the republish to a completed effect — whose fields bind
    /// the original to the new message ids and the outcome, under the rule, the entity's
    /// policy version and the budget. A record settled before it was a case has none (its
    /// judgement is the record). Best-effort: a case that cannot be written is logged and
    /// left to the case worker.
    async fn close_replayed_case(&self, key: &Key, j: &Judgement) {
        let Some(r) = j.replay.as_ref() else {
            return;
        };
        let store = &self.inner.store;
        let case_id = redrive_store::case_id_of(&key.id);
        let case = match store.get_case(&case_id).await {
            Ok(c) => c,
            Err(StoreError::CaseNotFound { .. }) => return,
            Err(e) => {
                tracing::warn!(case_id = %case_id, error = %e, "the case of a replayed dead letter could not be read");
                return;
            }
        };
        // Closed already, or following a delivery of its own (a replay admitted, by its
        // owner or by hand): that delivery's observation closes it.
        if case.m.state.terminal().is_some()
            || case.m.state == redrive_core::case::CaseState::ReplayAdmitted
        {
            return;
        }
        let now = self.now();
        let ids: Vec<&str> = j
            .events
            .iter()
            .filter_map(|e| e.republished_as.as_deref())
            .collect();
        let ids = ids.join(", ");
        let mut fields = BTreeMap::new();
        for (k, v) in [
            ("rule", r.rule.clone()),
            ("policy_version", r.policy_version.to_string()),
            ("message_id", ids.clone()),
            ("budget", r.budget.clone()),
            ("destination", r.destination.clone()),
            ("outcome", r.outcome.clone()),
        ] {
            fields.insert(k.to_owned(), v);
        }
        let entry = redrive_core::case::TimelineEntry {
            at: now,
            actor: "broker".to_owned(),
            state: redrive_core::case::CaseState::Indeterminate,
            evidence: format!(
                "automatic replay republished it as {ids} to {} under policy version {} ({}); no effect authority binds the outcome: closed with the outcome {}",
                r.destination, r.policy_version, r.budget, r.outcome
            ),
            fields,
        };
        let settings = self.case_settings();
        let retention = settings
            .rule(case.queue.as_str())
            .and_then(|c| c.payload_retention_ms)
            .unwrap_or(settings.payload_retention_ms);
        let mut u = crate::cases::ops::Step::of(&case).update_of(&case);
        u.append.push(entry);
        u.set.state = redrive_core::case::CaseState::Indeterminate;
        u.set.closed_at = Some(now);
        u.set.next_check_at = None;
        u.set.payload_until = Some(now.plus_millis(i64::try_from(retention).unwrap_or(i64::MAX)));
        if let Some(d) = u.set.data.as_object_mut() {
            d.insert("next".to_owned(), "closed:indeterminate".into());
            d.remove("escalated_for");
        }
        let actor = Actor::system("replay");
        u.audit.push(redrive_store::AuditFields {
            at: now,
            actor_id: actor.id,
            actor_name: actor.name,
            action: "case.close".to_owned(),
            entity: Some(case.queue.to_string()),
            targets: vec![
                case.id.clone(),
                "state=indeterminate".to_owned(),
                format!("message_id={ids}"),
            ],
            outcome: "ok".to_owned(),
            client: None,
        });
        match store.update_case(&u).await {
            Ok(_) => {
                self.inner.metrics.audit_entries.inc();
                self.inner.metrics.add_labelled(
                    Counter::CasesClosed,
                    case.queue.as_str(),
                    "indeterminate",
                    1,
                );
            }
            Err(e) => {
                tracing::warn!(case_id = %case.id, error = %e, "the case of a replayed dead letter could not be closed; the case worker looks at it again");
            }
        }
    }

    /// Republishes one record's chunks in order; a chunk that fails (an event over the
    /// origin's size limit, a store error) stops those behind it. Answers the events and
    /// chunks sent, and how it ended.
    async fn republish_in_order(
        self,
        queue: EntityName,
        messages: Vec<NewMessage>,
        chunks: Vec<std::ops::Range<usize>>,
        policy: QueuePolicy,
    ) -> (u64, u64, BrokerResult<()>) {
        let mut messages = messages.into_iter();
        let (mut sent, mut done) = (0, 0);
        for chunk in chunks {
            let batch: Vec<NewMessage> = messages.by_ref().take(chunk.len()).collect();
            if let Err(e) = check_sizes(&batch, &policy) {
                return (sent, done, Err(e));
            }
            let n = batch.len() as u64;
            if let Err(e) = self.inner.store.enqueue(&queue, batch, self.now()).await {
                return (sent, done, Err(e.into()));
            }
            self.wake_republished(&queue);
            sent += n;
            done += 1;
            self.inner
                .metrics
                .add(Counter::ReplayRepublished, queue.as_str(), n);
        }
        (sent, done, Ok(()))
    }

    /// Records a failed judgement and flags a record that keeps failing.
    async fn judgement_failed(
        &self,
        queue: &EntityName,
        id: &str,
        failed_before: u32,
        error: &BrokerError,
        settings: &ReplaySettings,
    ) {
        let now = self.now();
        let message = error.to_string();
        // The delay grows with the record's failures, this one included.
        let failures = failed_before.saturating_add(1);
        let retry_at =
            now.plus_millis(i64::try_from(judgement::retry_delay_ms(failures)).unwrap_or(i64::MAX));
        self.inner
            .metrics
            .add(Counter::ReplayFailures, queue.as_str(), 1);
        match self
            .inner
            .store
            .fail_replay(queue, id, &message, retry_at)
            .await
        {
            Ok(Some(n)) if n >= settings.flag_after_failures => {
                if n == settings.flag_after_failures {
                    self.inner
                        .metrics
                        .add(Counter::ReplayFlagged, queue.as_str(), 1);
                }
                tracing::error!(queue = %queue, dead_letter_id = id, failures = n,
                    error = %message, "replay keeps failing on this dead letter; it is kept and retried");
            }
            Ok(Some(n)) => tracing::warn!(queue = %queue, dead_letter_id = id, failures = n,
                error = %message, "replay judgement failed; retrying after a backoff"),
            Ok(None) => {}
            Err(e) => tracing::warn!(queue = %queue, dead_letter_id = id, error = %e,
                "a failed replay judgement could not be recorded; its claim runs out and it is judged again"),
        }
    }

    /// Judges one claimed record and writes its quarantine (see the module docs for the
    /// order of effects); answers what is left to republish.
    async fn prepare(
        &self,
        record: DeadLetterRecord,
        (policy, policy_version): (&QueuePolicy, u64),
        register: &Register,
        pass: &mut ReplayPass,
    ) -> BrokerResult<Prepared> {
        let now = self.now();
        let queue = record.queue.clone();
        let events = match record.format {
            RecordFormat::Message => Events::Message,
            RecordFormat::Events => match dead_letter_events::parse_events(&record.body) {
                Ok(ev) => Events::Parsed(ev),
                Err(e) => {
                    let mut j =
                        Judgement::new(now.as_millis(), Some(QuarantineCause::SchemaInvalid));
                    j.error = Some(e.to_string());
                    return self.quarantine_whole(&record, j, None, 0, pass).await;
                }
            },
        };
        let refs = event_refs(&record, &events);
        let destination = Destination { exists: true };
        let part = judgement::partition(&policy.auto_replay, register, &queue, destination, &refs);
        let judged_events = |only: Option<QuarantineCause>| -> Vec<judgement::JudgedEvent> {
            refs.iter()
                .enumerate()
                .filter_map(|(i, e)| {
                    let cause = cause_of(&part, i);
                    match only {
                        Some(c) if cause != Some(c) => None,
                        _ => Some(judgement::judged(e, cause)),
                    }
                })
                .collect()
        };
        // 1. Quarantine first.
        if let Some(cause) = part.single_cause() {
            let mut j = Judgement::new(now.as_millis(), Some(cause));
            j.events = judged_events(None);
            let body = match &events {
                // A structured CloudEvent's own id is written back without its count too,
                // as the record's `message_id` is: the body says what the record says.
                Events::Message if is_structured(&record) => {
                    dead_letter_events::base_event_id(&record.body)
                }
                Events::Message => None,
                Events::Parsed(ev) => Some(dead_letter_events::quarantine_body(
                    &ev.iter().collect::<Vec<_>>(),
                    true,
                )),
            };
            return self
                .quarantine_whole(&record, j, body, refs.len() as u64, pass)
                .await;
        }
        if let Events::Parsed(ev) = &events {
            for (cause, idx) in &part.quarantine {
                let picked: Vec<&DeadLetteredEvent> = idx.iter().map(|&i| &ev[i]).collect();
                let body = dead_letter_events::quarantine_body(&picked, true);
                let mut j = Judgement::new(now.as_millis(), Some(*cause));
                j.copied_from = Some(record.id.clone());
                j.events = judged_events(Some(*cause));
                let copy = QuarantineCopy {
                    from: record.id.clone(),
                    id: judgement::quarantine_copy_id(&record.id, *cause),
                    body_sha256: redrive_core::digest::sha256_hex(&body),
                    body,
                    judgement: j,
                };
                match self.inner.store.put_quarantine_copy(&queue, &copy).await {
                    Ok(true) => {
                        self.quarantined(&queue, &record.id, *cause, idx.len() as u64, pass);
                    }
                    Ok(false) => {}
                    Err(StoreError::DeadLetterNotFound { .. }) => return Ok(Prepared::AlreadyDone),
                    Err(e) => return Err(e.into()),
                }
            }
        }
        // 2. What is left goes to the origin.
        if part.republish.is_empty() {
            return Ok(Prepared::Finish(ReplayFinish::Delete));
        }
        let messages = republished(&record, &events, &part, policy, now);
        let sizes: Vec<usize> = messages.iter().map(message_size).collect();
        let chunks = judgement::chunks(
            &sizes,
            policy.auto_replay.max_chunk_bytes,
            policy.auto_replay.max_chunk_events,
        );
        if chunks.len() <= 1 {
            check_sizes(&messages, policy)?;
        }
        let mut j = Judgement::new(now.as_millis(), None);
        j.events = judged_events(None);
        // The record of the republish: each event's new id, the rule, the policy version
        // and the budget it drew from.
        for (i, new_id) in &part.republish {
            if let Some(e) = j.events.get_mut(*i) {
                e.republished_as = Some(new_id.clone());
            }
        }
        let node = self.plans().node_replay_budget();
        j.replay = Some(Box::new(judgement::ReplayRecord {
            rule: "automatic_replay".to_owned(),
            policy_version,
            budget: format!(
                "node replay budget: {} items/s, {} bytes/s",
                node.items_per_s, node.bytes_per_s
            ),
            destination: queue.to_string(),
            republished_at: now.as_millis(),
            outcome: "republished".to_owned(),
        }));
        Ok(Prepared::Republish {
            messages,
            chunks,
            finish: ReplayFinish::Archive(j),
        })
    }

    async fn quarantine_whole(
        &self,
        record: &DeadLetterRecord,
        judgement: Judgement,
        body: Option<Vec<u8>>,
        events: u64,
        pass: &mut ReplayPass,
    ) -> BrokerResult<Prepared> {
        let cause = judgement.cause.unwrap_or(QuarantineCause::SchemaInvalid);
        let error = judgement.error.clone();
        let q = Quarantine { judgement, body };
        match self
            .inner
            .store
            .quarantine_dead_letter(&record.queue, &record.id, &q, self.now())
            .await
        {
            Ok(true) => {
                if let Some(e) = error {
                    tracing::error!(queue = %record.queue, dead_letter_id = %record.id,
                        error = %e, "dead letter quarantined: its payload is not a list of events");
                }
                self.quarantined(&record.queue, &record.id, cause, events.max(1), pass);
                Ok(Prepared::Done)
            }
            Ok(false) | Err(StoreError::DeadLetterNotFound { .. }) => Ok(Prepared::AlreadyDone),
            Err(e) => Err(e.into()),
        }
    }

    /// Logs and counts a quarantine this judgement created (never one it found).
    fn quarantined(
        &self,
        queue: &EntityName,
        record: &str,
        cause: QuarantineCause,
        events: u64,
        pass: &mut ReplayPass,
    ) {
        *pass.quarantined.entry(cause).or_insert(0) += events;
        self.inner.metrics.add_labelled(
            Counter::ReplayQuarantined,
            queue.as_str(),
            cause.as_str(),
            events,
        );
        tracing::error!(queue = %queue, dead_letter_id = record, cause = %cause, events,
            "dead letter events quarantined");
    }

    /// The drain at start: live records of replaying entities that are not candidates and
    /// are older than the entity's delivery window become candidates now. Answers how
    /// many did.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn drain_replay_candidates(&self) -> BrokerResult<u64> {
        let now = self.now();
        let queues = self.inner.store.list_queues().await?;
        let subs = self.inner.store.list_all_subscriptions().await?;
        let windows: BTreeMap<EntityName, u64> = subs
            .iter()
            .map(|s| {
                let ttl = u64::from(s.spec.retry_policy.event_time_to_live_minutes) * 60_000;
                (s.queue.clone(), ttl)
            })
            .collect();
        let rules: Vec<DrainRule> = queues
            .iter()
            .filter(|q| q.policy.auto_replay.enabled)
            .map(|q| {
                let window = windows
                    .get(&q.name)
                    .copied()
                    .unwrap_or(q.policy.lock_duration_ms);
                DrainRule {
                    queue: q.name.clone(),
                    older_than: now.plus_millis(-i64::try_from(window).unwrap_or(i64::MAX)),
                    due_at: now,
                }
            })
            .collect();
        if rules.is_empty() {
            return Ok(0);
        }
        let mut total = 0;
        loop {
            let n = self
                .inner
                .store
                .drain_replay_candidates(&rules, DRAIN_BATCH)
                .await?;
            total += n;
            if n < u64::from(DRAIN_BATCH) {
                break;
            }
        }
        if total > 0 {
            self.wake_replay();
        }
        Ok(total)
    }

    /// Replay counts per entity: of `queue`, or of every queue with dead letters.
    pub async fn replay_status(&self, queue: Option<&str>) -> BrokerResult<Vec<ReplayStatus>> {
        let name = queue.map(str::parse::<EntityName>).transpose()?;
        if let Some(n) = &name {
            self.inner.store.get_queue(n).await?;
        }
        let flag = self.replay_settings().flag_after_failures;
        let mut counts = self.inner.store.replay_counts(name.as_ref(), flag).await?;
        if let (Some(n), true) = (&name, counts.is_empty()) {
            counts.push(ReplayCounts::empty(n.clone()));
        }
        Ok(counts)
    }

    /// Restores a quarantined record (one move back to live, where the entity's replay
    /// judges it again), after answering what that judgement will do. With `dry_run`,
    /// only answers. Audited (`dead_letter.restore`).
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %queue, dead_letter = %id))]
    pub async fn restore_dead_letter(
        &self,
        queue: &str,
        id: &str,
        dry_run: bool,
        actor: &Actor,
    ) -> BrokerResult<RestorePreview> {
        let name: EntityName = queue.parse()?;
        let policy = self.inner.store.get_queue(&name).await?.policy;
        let record = self.inner.store.get_dead_letter(&name, id).await?;
        if record.area != Area::Quarantine {
            return Err(BrokerError::DeadLetterNotQuarantined {
                id: id.to_owned(),
                area: record.area.as_str().to_owned(),
            });
        }
        let register = self.register().await?;
        let mut preview = preview(&record, &policy, &register);
        if dry_run {
            return Ok(preview);
        }
        let mut targets = vec![id.to_owned(), format!("republish={}", preview.republish)];
        targets.extend(
            preview
                .requarantine
                .iter()
                .map(|(c, n)| format!("requarantine.{c}={n}")),
        );
        // Back in live, automatic replay delivers it again: through its case's gates. A
        // restore whose judgement republishes nothing (every event back to quarantine)
        // delivers nothing again and passes as before.
        let gate = if preview.republish == 0 {
            Ok(HandPass::NoCase)
        } else {
            self.hand_record_gate(&name, id, Area::Quarantine, HandOperation::Restore, actor)
                .await
        };
        let pass = match gate {
            Ok(p) => p,
            Err(e) => {
                return self
                    .audited(
                        actor,
                        "dead_letter.restore",
                        Some(name.as_str()),
                        targets,
                        Err(e),
                    )
                    .await;
            }
        };
        let r: BrokerResult<()> = self
            .inner
            .store
            .move_dead_letter(&name, id, Area::Live, self.now())
            .await
            .map_err(Into::into);
        match &r {
            Ok(()) => self.hand_delivered(pass, None, actor).await,
            Err(e) => self.hand_failed(&pass, e).await,
        }
        self.audited(
            actor,
            "dead_letter.restore",
            Some(name.as_str()),
            targets,
            r,
        )
        .await?;
        preview.restored = true;
        tracing::info!(queue = %name, dead_letter_id = id, actor = %actor.id,
            republish = preview.republish, "dead letter restored to live");
        self.wake_replay();
        Ok(preview)
    }
}

/// The events of a record as the judgement sees them.
fn event_refs<'a>(record: &'a DeadLetterRecord, events: &'a Events) -> Vec<EventRef<'a>> {
    match events {
        Events::Message => vec![EventRef {
            id: &record.message_id,
            event_type: record.message_type.as_deref(),
            size: record.body.len(),
        }],
        Events::Parsed(ev) => ev.iter().map(dead_letter_events::event_ref).collect(),
    }
}

fn cause_of(part: &Partition, i: usize) -> Option<QuarantineCause> {
    part.quarantine
        .iter()
        .find(|(_, idx)| idx.contains(&i))
        .map(|(c, _)| *c)
}

/// What the next judgement of `record`, restored now, would do.
fn preview(record: &DeadLetterRecord, policy: &QueuePolicy, register: &Register) -> RestorePreview {
    let mut out = RestorePreview {
        id: record.id.clone(),
        republish: 0,
        requarantine: BTreeMap::new(),
        replay_enabled: policy.auto_replay.enabled,
        restored: false,
    };
    let events = match record.format {
        RecordFormat::Message => Events::Message,
        RecordFormat::Events => match dead_letter_events::parse_events(&record.body) {
            Ok(ev) => Events::Parsed(ev),
            Err(_) => {
                out.requarantine.insert(QuarantineCause::SchemaInvalid, 1);
                return out;
            }
        },
    };
    let refs = event_refs(record, &events);
    let part = judgement::partition(
        &policy.auto_replay,
        register,
        &record.queue,
        Destination { exists: true },
        &refs,
    );
    out.republish = part.republish.len() as u64;
    out.requarantine = part
        .quarantine
        .iter()
        .map(|(c, idx)| (*c, idx.len() as u64))
        .collect();
    out
}

/// The messages republished for the events the partition lets go.
fn republished(
    record: &DeadLetterRecord,
    events: &Events,
    part: &Partition,
    policy: &QueuePolicy,
    now: Timestamp,
) -> Vec<NewMessage> {
    let expires_at = policy
        .default_ttl_ms
        .map(|t| now.plus_millis(i64::try_from(t).unwrap_or(i64::MAX)));
    let mut out = Vec::with_capacity(part.republish.len());
    for (i, new_id) in &part.republish {
        let (original, _) = redrive_core::id::split_replay_count(new_id);
        let mut properties = record.properties.clone();
        properties.insert(
            ORIGINAL_ID_PROPERTY.to_owned(),
            PropertyValue::String(original.to_owned()),
        );
        properties.insert(
            REPLAYED_FROM_PROPERTY.to_owned(),
            PropertyValue::String(record.id.clone()),
        );
        let (body, content_type, message_type) = match events {
            Events::Message => {
                let body = if is_structured(record) {
                    dead_letter_events::rewrite_event_id(&record.body, new_id, original)
                        .unwrap_or_else(|_| record.body.clone())
                } else {
                    record.body.clone()
                };
                (
                    body,
                    record.content_type.clone(),
                    record.message_type.clone(),
                )
            }
            Events::Parsed(ev) => (
                dead_letter_events::republished(&ev[*i], new_id, original),
                Some(redrive_events::cloudevent::STRUCTURED.to_owned()),
                Some(ev[*i].event_type.clone()),
            ),
        };
        out.push(NewMessage {
            message_id: new_id.clone(),
            body,
            content_type,
            properties,
            correlation_id: record.correlation_id.clone(),
            session_id: record.session_id.clone(),
            message_type,
            intent: record.intent.clone(),
            valid_until: record.valid_until,
            scheduled_at: None,
            expires_at,
        });
    }
    out
}

/// Whether a message record's body is a structured-mode CloudEvent (a topic
/// subscription's message).
fn is_structured(record: &DeadLetterRecord) -> bool {
    record
        .content_type
        .as_deref()
        .is_some_and(|c| c.starts_with(redrive_events::cloudevent::STRUCTURED))
}

/// `Err` naming the first message over the origin's size limit: the origin would refuse
/// it from a sender, and takes it no more from a replay.
fn check_sizes(messages: &[NewMessage], policy: &QueuePolicy) -> BrokerResult<()> {
    match messages
        .iter()
        .find(|m| m.body.len() > policy.max_message_size as usize)
    {
        Some(big) => Err(BrokerError::invalid(
            "republish",
            format!(
                "event {} is {} bytes, over the origin's max_message_size of {}",
                big.message_id,
                big.body.len(),
                policy.max_message_size
            ),
        )),
        None => Ok(()),
    }
}

/// The bytes a republished message counts against the chunk budget.
fn message_size(m: &NewMessage) -> usize {
    m.body.len()
        + m.properties
            .iter()
            .map(|(k, v)| {
                k.len()
                    + match v {
                        PropertyValue::String(s) => s.len(),
                        _ => 8,
                    }
            })
            .sum::<usize>()
}

impl Broker {
    /// Imports dead letters from elsewhere into the live area of `queue`'s dead-letter
    /// store (`format`: an Event Grid dead-letter blob, SQS `ReceiveMessage` output, or
    /// redrive's own export), in one transaction; each record becomes a replay candidate
    /// if the queue replays. Audited (`dead_letter.import`). Answers the new records' ids.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %queue, format = %format.as_str()))]
    pub async fn import_dead_letters(
        &self,
        queue: &str,
        format: ImportFormat,
        bytes: &[u8],
        actor: &Actor,
    ) -> BrokerResult<Vec<String>> {
        let name: EntityName = queue.parse()?;
        let now = self.now();
        let record = self.inner.store.get_queue(&name).await?;
        let checked = parse_import(format, bytes, now)
            .map_err(|e| BrokerError::invalid("body", e.to_string()))
            .and_then(|parsed| {
                for (index, r) in parsed.iter().enumerate() {
                    check_imported(&name, index, r, record.policy.max_message_size)?;
                }
                Ok(parsed)
            });
        let parsed = match checked {
            Ok(p) => p,
            Err(e) => {
                // A refused import is a decision too: audited with the reason, nothing
                // stored.
                let targets = vec![format!("format={}", format.as_str()), "records=0".into()];
                tracing::info!(queue = %name, format = format.as_str(), actor = %actor.id,
                    error = %e, "dead-letter import refused");
                return self
                    .audited(
                        actor,
                        "dead_letter.import",
                        Some(name.as_str()),
                        targets,
                        Err(e),
                    )
                    .await;
            }
        };
        let records: Vec<DeadLetterRecord> = parsed
            .into_iter()
            .map(|r| imported_record(&name, r, now))
            .collect();
        let ids: Vec<String> = records.iter().map(|r| r.id.clone()).collect();
        // A record whose intent has a case here delivers it again (automatic replay, a
        // resubmit): every one goes through its case's gates, or the import is refused
        // whole, as any refused import is.
        let passes = match self.import_gates(&name, &records, actor).await {
            Ok(p) => p,
            Err(e) => {
                let targets = vec![format!("format={}", format.as_str()), "records=0".into()];
                tracing::info!(queue = %name, format = format.as_str(), actor = %actor.id,
                    error = %e, "dead-letter import refused by a recovery case");
                return self
                    .audited(
                        actor,
                        "dead_letter.import",
                        Some(name.as_str()),
                        targets,
                        Err(e),
                    )
                    .await;
            }
        };
        let result: BrokerResult<()> = self
            .inner
            .store
            .import_dead_letters(&name, records, now)
            .await
            .map_err(Into::into);
        for pass in passes {
            match &result {
                Ok(()) => self.hand_delivered(pass, None, actor).await,
                Err(e) => self.hand_failed(&pass, e).await,
            }
        }
        let mut targets = vec![
            format!("format={}", format.as_str()),
            format!("records={}", ids.len()),
        ];
        if let (Some(first), Some(last)) = (ids.first(), ids.last()) {
            targets.push(format!("first={first}"));
            targets.push(format!("last={last}"));
        }
        self.audited(
            actor,
            "dead_letter.import",
            Some(name.as_str()),
            targets,
            result,
        )
        .await?;
        tracing::info!(queue = %name, records = ids.len(), format = format.as_str(),
            actor = %actor.id, "dead letters imported");
        self.wake_replay();
        Ok(ids)
    }
}

impl Broker {
    /// The gates of an import's records (see `cases::by_hand`): each record whose intent
    /// has a case on `queue` is judged first (none is admitted while one may still be
    /// refused), then the followed ones are admitted. `Err`: the first refusal.
    async fn import_gates(
        &self,
        queue: &EntityName,
        records: &[DeadLetterRecord],
        actor: &Actor,
    ) -> BrokerResult<Vec<HandPass>> {
        let mut judged: Vec<Judged> = Vec::new();
        for r in records {
            let intent = redrive_core::case::intent_identity(r.intent.as_deref(), &r.message_id);
            let Some(case) = self.case_of_intent(queue, intent).await? else {
                continue;
            };
            if judged.iter().any(|j| j.case_id() == case.id) {
                // One delivery per case and import: the first record stands for it.
                continue;
            }
            let message_id = match r.format {
                RecordFormat::Message => {
                    let (_, n) = redrive_core::id::split_replay_count(&r.message_id);
                    redrive_core::id::with_replay_count(&r.message_id, n + 1)
                }
                RecordFormat::Events => String::new(),
            };
            let target = HandTarget {
                operation: HandOperation::Import,
                message_id,
                destination: queue.to_string(),
                digest: r.body_sha256.clone(),
            };
            judged.push(self.hand_judge(case, target, actor).await?);
        }
        let mut passes = Vec::with_capacity(judged.len());
        for j in judged {
            match self.hand_admit(j, actor).await {
                Ok(p) => passes.push(p),
                Err(e) => {
                    for p in &passes {
                        self.hand_failed(p, &e).await;
                    }
                    return Err(e);
                }
            }
        }
        Ok(passes)
    }
}

/// Refuses imported record `index` that a live dead letter of `queue` could not be: the
/// bounds of a send (ids, content type, properties, headers) and, for one message, the
/// queue's `max_message_size` (the record's events are each held to it when they are
/// republished). The error names the record and the field, as a parse error does.
fn check_imported(
    queue: &EntityName,
    index: usize,
    r: &ImportedRecord,
    max_message_size: u32,
) -> BrokerResult<()> {
    let as_sent = crate::messages::Outgoing {
        message_id: Some(r.message_id.clone()),
        body: match r.format {
            RecordFormat::Message => r.body.clone(),
            RecordFormat::Events => Vec::new(),
        },
        content_type: r.content_type.clone(),
        properties: r.properties.clone(),
        correlation_id: r.correlation_id.clone(),
        session_id: r.session_id.clone(),
        message_type: r.message_type.clone(),
        ..Default::default()
    };
    let at = match r.line {
        Some(line) => format!("record {index} (line {line})"),
        None => format!("record {index}"),
    };
    match crate::messages::check_message(queue, &as_sent, max_message_size) {
        Ok(_) => Ok(()),
        Err(BrokerError::InvalidRequest { field, why }) => Err(BrokerError::invalid(
            "body",
            format!("{at}: `{field}` {why}"),
        )),
        Err(BrokerError::MessageTooLarge { size, limit, .. }) => Err(BrokerError::invalid(
            "body",
            format!(
                "{at}: `body` is {size} bytes with its headers and properties; \
                 queue {queue} takes messages of at most {limit}"
            ),
        )),
        Err(e) => Err(e),
    }
}

/// An imported record as a dead-letter record of `queue`, under a new id. Its route
/// evidence is what its source said (the route, the rule, the policy version that routed
/// it, the consumer and rule version), kept as read: `queue`'s policy routed nothing.
fn imported_record(queue: &EntityName, r: ImportedRecord, now: Timestamp) -> DeadLetterRecord {
    DeadLetterRecord {
        id: redrive_core::id::new_dead_letter_id(now),
        queue: queue.clone(),
        area: Area::Live,
        message_id: r.message_id,
        sequence: 0,
        session_id: r.session_id,
        body_sha256: redrive_core::digest::sha256_hex(&r.body),
        body: r.body,
        content_type: r.content_type,
        properties: r.properties,
        correlation_id: r.correlation_id,
        message_type: r.message_type,
        intent: None,
        valid_until: None,
        reason: r.reason,
        description: r.description,
        delivery_count: r.delivery_count,
        count_quality: r.count_quality,
        first_delivered_at: r.first_delivered_at,
        last_delivered_at: r.last_delivered_at,
        enqueued_at: r.enqueued_at,
        dead_lettered_at: r.dead_lettered_at,
        policy_version: r.policy_version,
        // Another system routed it there (Event Grid's retry policy, SQS's redrive
        // policy, another redrive): nothing here saw who or why, whatever the source
        // says, so it is no broker's or application's decision of this one.
        route: redrive_core::RouteKind::Import,
        forwarded_to: None,
        dlq_delivery_count: 0,
        locked_until: None,
        format: r.format,
        replay: redrive_store::ReplayMark::default(),
        judgement: None,
        // The other broker's dead-letter destination took it (here it is); its attempt
        // evidence keeps the quality the import gave it.
        route_target: redrive_core::case::RouteTarget::Written,
        missing_target: None,
        route_kind: r.route_kind,
        route_rule: r.route_rule,
        consumer: r.consumer,
        rule_version: r.rule_version,
    }
}
