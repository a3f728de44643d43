//! Message move tasks (SQS `StartMessageMoveTask`, `ListMessageMoveTasks`,
//! `CancelMessageMoveTask`): a background task moves the messages of a queue (a
//! dead-letter queue) to a destination queue, or, without one, each message back to the
//! queue it was dead-lettered from (its `DeadLetterSource` property).
//!
//! A move is a peek-lock receive from the source, a send to the destination (the
//! dead-letter properties removed), then a complete of the source message: at least once
//! (a crash between the send and the complete leaves the message on both queues). A
//! message without a source to return to, or a send that fails, stops the task as failed
//! (the message is released).
//!
//! # A move task is a replay plan
//!
//! A task is stored as a replay plan of kind `sqs_move` (`redrive_store::MovePart`
//! is its move-specific part; `GET /v1/replay/plans` lists it), bounded by items per second only:
//! its `max_per_second`, or [`MAX_MOVE_RATE`] when it names none — a move task is never
//! unbounded. Its pace is the plan engine's ([`redrive_core::plan::Pacer`], on the
//! broker's clock: the task sleeps on the injected clock, never on wall time). Messages
//! are received in batches of at most [`MOVE_BATCH`] and never more than a second of the
//! rate; a batch takes its slots together (`k` messages at `t` hold the pacer until
//! `t + k/rate`), so at most `rate` messages move in any second that starts with a batch,
//! and over any interval of length `T` at most `⌊T·rate⌋ + k`. The pacer's state is
//! written with every heartbeat (and when the task is let go), so a task resumed on
//! another node, or after a restart, keeps its spacing: it waits for its next slot.
//! Before it waits, a task whose last receive came back short looks at the source again:
//! a source it emptied ends the task at once rather than at its next slot.
//!
//! Tasks are kept in the store, so every node sharing it lists and cancels them. One node runs a task at a time, its runner: before each
//! batch the runner writes the task's progress and renews its heartbeat
//! ([`MOVE_HEARTBEAT`] of the broker's clock), and reads back whether a cancel was asked
//! on any node (`CANCELLING`: it stops there and ends the task `CANCELLED`; a cancel asked
//! on the runner's own node stops it at once). The one-running-task-per-source rule is
//! the store's, in the transaction that creates the task.
//!
//! A task whose runner stops is resumed: at shutdown a runner lets its tasks go (they stay
//! `RUNNING`, without a heartbeat), and a runner that dies stops renewing its heartbeat.
//! Every node, on each sweeper tick ([`Broker::resume_move_tasks`]), claims the orphans
//! whose heartbeat ran out and runs them on, on their owner's authority: the owner's
//! token is read again from the store, and a task whose owner's token is revoked or gone
//! fails with `authorization_revoked`. A runner that finds another node has claimed its
//! task (its heartbeat ran out while it was alive) stops without writing anything more.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use redrive_core::case::by_hand::HandOperation;
use redrive_core::case::intent_identity;
use redrive_core::message::{
    DEAD_LETTER_DESCRIPTION_PROPERTY, DEAD_LETTER_REASON_PROPERTY, DEAD_LETTER_SOURCE_PROPERTY,
};
use redrive_core::plan::{Admission, Budget, Dependency, Pacer};
use redrive_core::{EntityName, PropertyValue, Timestamp};
use redrive_store::{
    Delivery, MovePart, MoveTaskProgress, MoveTaskStatus, NewMove, PlanStatus, ReplayPlanRecord,
    SettleAction, Settlement, StoreError, StoredMessage, move_plans,
};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::cases::by_hand::{HandPass, HandTarget};
use crate::{
    Actor, Broker, BrokerError, BrokerResult, LockBounds, Outgoing, ReceiveOptions, Settle,
};

/// Highest move rate a task may ask for (messages per second).
pub const MAX_MOVE_RATE: u32 = 500;
/// Lock the mover takes on a source message while it moves it.
const MOVE_LOCK_MS: u64 = 60_000;
/// Most messages received from the source at a time.
pub const MOVE_BATCH: u32 = 10;
/// How long a runner's heartbeat holds its task (of the broker's clock): renewed before
/// every batch (at least once a second), so a task whose heartbeat ran out has lost its
/// runner and another node resumes it.
pub const MOVE_HEARTBEAT: Duration = Duration::from_secs(30);
/// Orphaned tasks one look claims.
const CLAIM_BATCH: u32 = 10;

/// The items/s budget a task is paced by: its `max_per_second`, or [`MAX_MOVE_RATE`].
pub fn move_rate(max_per_second: Option<u32>) -> u32 {
    max_per_second
        .unwrap_or(MAX_MOVE_RATE)
        .clamp(1, MAX_MOVE_RATE)
}

/// The plan budget a task's pacer holds it to: items/s only ([`move_rate`]); bytes
/// unbounded, a batch in flight at a time, and no dependency reservation (a move reads
/// and writes this broker's own queues).
pub fn move_budget(max_per_second: Option<u32>) -> Budget {
    Budget {
        items_per_s: f64::from(move_rate(max_per_second)),
        bytes_per_s: u64::MAX,
        max_concurrent: MOVE_BATCH,
        window: MOVE_BATCH,
        dependency: Dependency {
            name: "none".to_owned(),
            probe_url: String::new(),
            max_error_rate: 1.0,
            max_latency_ms: u64::MAX,
        },
    }
}

/// The pacer of a task as stored (its next slot), or a fresh one.
fn pacer_of(record: &Held) -> Pacer {
    Pacer {
        next_item_ms: record.part.next_slot.map_or(0.0, |t| t.0 as f64),
        ..Pacer::default()
    }
}

/// The pacer's state as stored: its next slot, rounded up to the millisecond (never
/// earlier than the pacer's).
fn next_slot(p: &Pacer) -> Option<Timestamp> {
    (p.next_item_ms > 0.0).then(|| Timestamp(p.next_item_ms.ceil() as i64))
}

/// What to move, where, and how fast.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveSpec {
    /// The queue the messages leave.
    pub source: String,
    /// Where they go; `None`: each back to the queue it was dead-lettered from.
    pub destination: Option<String>,
    /// At most this many per second (1 to [`MAX_MOVE_RATE`]); `None`: as fast as it goes.
    pub max_per_second: Option<u32>,
    /// Who started it: the task runs on this actor's authority and fails with
    /// `authorization_revoked` when its token is revoked. A listed task's owner carries
    /// its id and name only (grants are read again from its token when the task resumes).
    pub owner: Actor,
}

/// The failure reason of a task whose owner's token was revoked while it ran.
pub const AUTHORIZATION_REVOKED: &str = "authorization_revoked";

/// The status of a move task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoveStatus {
    /// Moving.
    Running,
    /// The source had nothing more to move.
    Completed,
    /// Cancel asked; the task stops at its next batch.
    Cancelling,
    /// Stopped by a cancel.
    Cancelled,
    /// Stopped by an error (see the failure reason).
    Failed,
}

impl MoveStatus {
    /// The SQS name (`RUNNING`, …).
    pub fn as_str(self) -> &'static str {
        MoveTaskStatus::from(self).as_str()
    }
}

impl From<MoveTaskStatus> for MoveStatus {
    fn from(s: MoveTaskStatus) -> Self {
        match s {
            MoveTaskStatus::Running => MoveStatus::Running,
            MoveTaskStatus::Completed => MoveStatus::Completed,
            MoveTaskStatus::Cancelling => MoveStatus::Cancelling,
            MoveTaskStatus::Cancelled => MoveStatus::Cancelled,
            MoveTaskStatus::Failed => MoveStatus::Failed,
        }
    }
}

impl From<MoveStatus> for MoveTaskStatus {
    fn from(s: MoveStatus) -> Self {
        match s {
            MoveStatus::Running => MoveTaskStatus::Running,
            MoveStatus::Completed => MoveTaskStatus::Completed,
            MoveStatus::Cancelling => MoveTaskStatus::Cancelling,
            MoveStatus::Cancelled => MoveTaskStatus::Cancelled,
            MoveStatus::Failed => MoveTaskStatus::Failed,
        }
    }
}

/// A move task as reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveTask {
    /// Identifies the task (for cancelling).
    pub handle: String,
    /// What it moves.
    pub spec: MoveSpec,
    /// Where it is.
    pub status: MoveStatus,
    /// Messages moved so far.
    pub moved: u64,
    /// Messages on the source when the task started.
    pub to_move: u64,
    /// Why it failed.
    pub failure: Option<String>,
    /// When it started.
    pub started_at: Timestamp,
}

/// A task as the mover holds it: its plan, and the plan's move-specific part.
#[derive(Debug, Clone)]
struct Held {
    plan: ReplayPlanRecord,
    part: MovePart,
}

impl Held {
    /// The task a plan of kind `sqs_move` stores.
    fn of(plan: ReplayPlanRecord) -> BrokerResult<Held> {
        let part = plan.move_part()?;
        Ok(Held { plan, part })
    }
}

impl From<&Held> for MoveTask {
    fn from(h: &Held) -> Self {
        let (p, r) = (&h.plan, &h.part);
        MoveTask {
            handle: p.id.clone(),
            spec: MoveSpec {
                source: p.queue.clone(),
                destination: r.destination.clone(),
                max_per_second: r.max_per_second,
                owner: Actor {
                    id: p.owner_id.clone(),
                    name: p.owner_name.clone(),
                    grants: Vec::new(),
                    client: None,
                },
            },
            status: r.status.into(),
            moved: r.moved,
            to_move: r.to_move,
            failure: r.failure_reason.clone(),
            started_at: p.created_at,
        }
    }
}

/// Why a move-task operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    /// No task has this handle.
    #[error("no message move task has the handle {0:?}")]
    NotFound(String),
    /// A task of this source queue is running (or being cancelled).
    #[error("a message move task is already running for queue {0:?}")]
    AlreadyRunning(String),
    /// The task is not running (a finished task cannot be cancelled).
    #[error("message move task {0:?} is not running")]
    NotRunning(String),
    /// A broker refusal (unknown queue, invalid rate, shutdown).
    #[error(transparent)]
    Broker(#[from] BrokerError),
}

/// How every move task handle starts; 32 lowercase hex digits follow.
const MOVE_HANDLE_PREFIX: &str = "mv_";

/// Whether `handle` has the shape of a move task handle this broker hands out (whether or
/// not such a task exists), so that an interface can tell a malformed handle from an
/// unknown one.
pub fn is_move_task_handle(handle: &str) -> bool {
    handle.strip_prefix(MOVE_HANDLE_PREFIX).is_some_and(|hex| {
        hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// The tasks this node runs: a cancel asked here stops its task at once (a cancel asked
/// elsewhere is seen at the task's next batch).
#[derive(Default)]
pub(crate) struct MoveTasks {
    running: Mutex<HashMap<String, CancellationToken>>,
    /// The runners of this node, so that shutdown waits until they let their tasks go.
    runners: TaskTracker,
}

impl MoveTasks {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, CancellationToken>) -> T) -> T {
        // A panic while holding the lock leaves a consistent map (single inserts/removes).
        let mut g = self
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut g)
    }
}

/// How a task's loop stopped.
enum Stop {
    /// The source had nothing more to move.
    Done,
    /// A cancel was asked (here, or seen in the store).
    Cancelled,
    /// The broker shuts down: the task is let go for another node to resume.
    ShutDown,
    /// Another node runs the task now (or it ended): nothing more is written.
    Lost,
}

fn heartbeat_ms() -> u64 {
    u64::try_from(MOVE_HEARTBEAT.as_millis()).unwrap_or(u64::MAX)
}

impl Broker {
    /// Starts a move task; refused while another task of the same source is active.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %spec.source))]
    pub async fn start_move_task(&self, spec: MoveSpec) -> Result<MoveTask, MoveError> {
        let owner = spec.owner.clone();
        let source = spec.source.clone();
        let result = self.start_move_task_inner(spec).await;
        let targets = match &result {
            Ok(t) => vec![t.handle.clone()],
            Err(_) => Vec::new(),
        };
        let outcome = match &result {
            Ok(_) => "ok".to_owned(),
            Err(MoveError::Broker(e)) => format!("error:{}", e.code_hint()),
            Err(_) => "error:refused".to_owned(),
        };
        self.audit(&owner, "move_task.start", Some(&source), targets, &outcome)
            .await?;
        result
    }

    async fn start_move_task_inner(&self, spec: MoveSpec) -> Result<MoveTask, MoveError> {
        if let Some(r) = spec.max_per_second
            && !(1..=MAX_MOVE_RATE).contains(&r)
        {
            return Err(BrokerError::invalid(
                "max_number_of_messages_per_second",
                format!("must be between 1 and {MAX_MOVE_RATE}"),
            )
            .into());
        }
        let view = self.get_queue(&spec.source).await?;
        if let Some(d) = &spec.destination {
            if d == &spec.source {
                return Err(BrokerError::invalid(
                    "destination",
                    "must be another queue than the source",
                )
                .into());
            }
            self.queue_record(d).await?;
        }
        if self.inner.shutdown.is_cancelled() {
            return Err(BrokerError::ShuttingDown.into());
        }
        let now = self.now();
        let new = NewMove {
            handle: format!(
                "{MOVE_HANDLE_PREFIX}{:016x}{:016x}",
                fastrand::u64(..),
                fastrand::u64(..)
            ),
            source: spec.source.clone(),
            destination: spec.destination.clone(),
            max_per_second: spec.max_per_second,
            to_move: view.counts.messages(),
            owner_id: spec.owner.id.clone(),
            owner_name: spec.owner.name.clone(),
            runner: self.inner.node_id.clone(),
            runner_until: after(now, heartbeat_ms()),
            now,
        };
        let record = match move_plans::create(&*self.inner.store, &new).await {
            Ok(r) => Held::of(r)?,
            Err(StoreError::MoveTaskRunning { queue }) => {
                return Err(MoveError::AlreadyRunning(queue));
            }
            Err(e) => return Err(BrokerError::from(e).into()),
        };
        tracing::info!(handle = %record.plan.id, source = %spec.source,
            destination = ?spec.destination, rate = ?spec.max_per_second,
            to_move = record.part.to_move, "message move task started");
        let task = MoveTask {
            spec: spec.clone(),
            ..MoveTask::from(&record)
        };
        self.spawn_move(record, spec.owner);
        Ok(task)
    }

    /// Runs `record` on this node (its runner now) on `owner`'s authority.
    fn spawn_move(&self, record: Held, owner: Actor) {
        let cancel = self.inner.shutdown.child_token();
        self.inner
            .moves
            .with(|m| m.insert(record.plan.id.clone(), cancel.clone()));
        // Revoking the owner's token stops the task at once.
        let guard = self.revocation_guard(&owner);
        let broker = self.clone();
        self.inner
            .moves
            .runners
            .spawn(async move { broker.run_move(record, owner, cancel, guard).await });
    }

    /// Waits until every move task this node runs has stopped — after
    /// [`Broker::begin_shutdown`], once each has let its task go in the store for another
    /// node (or this one, restarted) to resume. The server waits on it before it closes
    /// the store.
    pub async fn move_tasks_stopped(&self) {
        let runners = &self.inner.moves.runners;
        runners.close();
        runners.wait().await;
        runners.reopen();
    }

    /// The most recent tasks of a source queue, newest first, at most `max`, whichever
    /// node started them.
    pub async fn list_move_tasks(&self, source: &str, max: usize) -> BrokerResult<Vec<MoveTask>> {
        let limit = u32::try_from(max).unwrap_or(u32::MAX);
        let plans = move_plans::list(&*self.inner.store, source, limit).await?;
        plans
            .into_iter()
            .map(|p| Held::of(p).map(|h| MoveTask::from(&h)))
            .collect()
    }

    /// Asks a running task to stop, whichever node runs it; answers the task as it is
    /// now (status `CANCELLING`).
    #[tracing::instrument(level = "debug", skip_all, fields(task = %handle))]
    pub async fn cancel_move_task(
        &self,
        handle: &str,
        actor: &Actor,
    ) -> Result<MoveTask, MoveError> {
        let result = self.cancel_move_task_inner(handle).await;
        let (entity, outcome) = match &result {
            Ok(t) => (Some(t.spec.source.clone()), "ok"),
            Err(_) => (None, "error:refused"),
        };
        self.audit(
            actor,
            "move_task.cancel",
            entity.as_deref(),
            vec![handle.chars().take(64).collect()],
            outcome,
        )
        .await?;
        result
    }

    async fn cancel_move_task_inner(&self, handle: &str) -> Result<MoveTask, MoveError> {
        let record = match move_plans::cancel(&*self.inner.store, handle, self.now()).await {
            Ok(r) => Held::of(r)?,
            Err(StoreError::MoveTaskNotFound { .. }) => {
                return Err(MoveError::NotFound(handle.to_owned()));
            }
            Err(StoreError::MoveTaskNotRunning { .. }) => {
                return Err(MoveError::NotRunning(handle.to_owned()));
            }
            Err(e) => return Err(BrokerError::from(e).into()),
        };
        // Run here: stop it now; elsewhere its runner sees the request at its next batch.
        if let Some(c) = self.inner.moves.with(|m| m.get(handle).cloned()) {
            c.cancel();
        }
        tracing::info!(
            handle,
            moved = record.part.moved,
            "message move task cancelling"
        );
        Ok(MoveTask::from(&record))
    }

    /// Claims the move tasks whose runner stopped (their heartbeat ran out, or the runner
    /// let them go at shutdown) and runs them on this node; answers how many. Called on
    /// every sweeper tick, so a node resumes orphans when it starts and while it runs.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn resume_move_tasks(&self) -> BrokerResult<usize> {
        if self.inner.shutdown.is_cancelled() {
            return Ok(0);
        }
        let claimed = move_plans::claim(
            &*self.inner.store,
            &self.inner.node_id,
            heartbeat_ms(),
            self.now(),
            CLAIM_BATCH,
        )
        .await?;
        let mut resumed = 0;
        for plan in claimed {
            let record = Held::of(plan)?;
            if self.inner.moves.with(|m| m.contains_key(&record.plan.id)) {
                // Still running here (its heartbeat ran out on the clock between two
                // batches): the claim only renewed it.
                continue;
            }
            match self.move_owner(&record).await? {
                Some(owner) => {
                    tracing::info!(handle = %record.plan.id, source = %record.plan.queue,
                        moved = record.part.moved, "message move task resumed");
                    self.spawn_move(record, owner);
                    resumed += 1;
                }
                None => {
                    let owner = MoveTask::from(&record).spec.owner;
                    let end = MoveTaskProgress {
                        status: MoveTaskStatus::Failed,
                        moved: record.part.moved,
                        failure_reason: Some(AUTHORIZATION_REVOKED.to_owned()),
                        runner_until: None,
                        next_slot: record.part.next_slot,
                    };
                    self.end_move(&record, &owner, &end, 0).await;
                }
            }
        }
        Ok(resumed)
    }

    /// The actor a resumed task runs on: its owner's token read again (`None` when it is
    /// revoked, expired or gone); `anonymous` and `system` as they are.
    async fn move_owner(&self, record: &Held) -> BrokerResult<Option<Actor>> {
        let listed = MoveTask::from(record).spec.owner;
        if !listed.is_token() {
            return Ok(Some(match listed.id.as_str() {
                "anonymous" => Actor::anonymous(),
                "system" => Actor::system(&listed.name),
                _ => listed,
            }));
        }
        let now = self.now();
        Ok(self
            .inner
            .store
            .list_tokens()
            .await?
            .iter()
            .find(|t| t.token.id == record.plan.owner_id && t.is_active(now))
            .map(crate::access::actor_of))
    }

    /// Writes the end of a task this node runs and audits it (when the write took), with
    /// how many messages their recovery case refused (`skipped`).
    async fn end_move(&self, record: &Held, owner: &Actor, end: &MoveTaskProgress, skipped: u64) {
        let handle = &record.plan.id;
        let written = match move_plans::progress(
            &*self.inner.store,
            handle,
            &self.inner.node_id,
            end,
            self.now(),
        )
        .await
        .and_then(|w| w.map(|p| p.move_part().map(|m| (p, m))).transpose())
        {
            Ok(w) => w,
            Err(e) => {
                tracing::error!(error = %e, handle, "the end of a move task was not written");
                return;
            }
        };
        let Some((plan, w)) = written else {
            tracing::info!(handle, "message move task is run by another node now");
            return;
        };
        let mut targets = vec![
            handle.clone(),
            format!("moved={}", w.moved),
            format!("skipped={skipped}"),
        ];
        if let Some(f) = &w.failure_reason {
            targets.push(format!("failure={f}"));
        }
        let outcome = w.status.as_str().to_ascii_lowercase();
        if let Err(e) = self
            .audit(owner, "move_task.end", Some(&plan.queue), targets, &outcome)
            .await
        {
            tracing::error!(error = %e, handle, "audit entry of a move task's end not written");
        }
    }

    #[tracing::instrument(level = "debug", skip_all, fields(task = %record.plan.id, queue = %record.plan.queue))]
    async fn run_move(
        &self,
        record: Held,
        owner: Actor,
        cancel: CancellationToken,
        revoked: CancellationToken,
    ) {
        let handle = record.plan.id.clone();
        let spec = MoveTask::from(&record).spec;
        let mut moved = record.part.moved;
        let mut pacer = pacer_of(&record);
        let stop = cancel.child_token();
        let mut skipped: Vec<Delivery> = Vec::new();
        let result = tokio::select! {
            r = self.move_loop(&handle, &spec, &stop, &mut moved, &mut pacer, &mut skipped) => r,
            () = revoked.cancelled() => Err(AUTHORIZATION_REVOKED.to_owned()),
        };
        // Messages their recovery case refused stay on the source, available again.
        let skipped_count = skipped.len() as u64;
        self.release(&handle, &spec.source, skipped).await;
        // A revocation that lands between batches ends the loop through the select; one
        // noticed only after the loop ended still counts as the reason it stopped.
        let result = if revoked.is_cancelled() {
            Err(AUTHORIZATION_REVOKED.to_owned())
        } else {
            result
        };
        self.inner.moves.with(|m| m.remove(&handle));
        let (status, failure, runner_until) = match result {
            Err(reason) => (MoveTaskStatus::Failed, Some(reason), None),
            Ok(Stop::Lost) => {
                tracing::info!(handle, "message move task is run by another node now");
                return;
            }
            Ok(Stop::ShutDown) => {
                // Left running, without a heartbeat: another node (or this one, after a
                // restart) resumes it at once.
                let go = MoveTaskProgress {
                    status: MoveTaskStatus::Running,
                    moved,
                    failure_reason: None,
                    runner_until: None,
                    next_slot: next_slot(&pacer),
                };
                if let Err(e) = move_plans::progress(
                    &*self.inner.store,
                    &handle,
                    &self.inner.node_id,
                    &go,
                    self.now(),
                )
                .await
                {
                    tracing::warn!(error = %e, handle,
                        "a move task was not let go at shutdown; it resumes when its heartbeat runs out");
                }
                tracing::info!(handle, moved, "message move task left for another node");
                return;
            }
            Ok(Stop::Cancelled) => (MoveTaskStatus::Cancelled, None, None),
            Ok(Stop::Done) => (MoveTaskStatus::Completed, None, None),
        };
        let end = MoveTaskProgress {
            status,
            moved,
            failure_reason: failure,
            runner_until,
            next_slot: next_slot(&pacer),
        };
        self.end_move(&record, &owner, &end, skipped_count).await;
        tracing::info!(handle, skipped = skipped_count, "message move task ended");
    }

    /// Writes progress and the pacing state and renews the heartbeat; says whether to go
    /// on.
    async fn beat(&self, handle: &str, moved: u64, pacer: &Pacer) -> Option<Stop> {
        let now = self.now();
        let p = MoveTaskProgress {
            status: MoveTaskStatus::Running,
            moved,
            failure_reason: None,
            runner_until: Some(after(now, heartbeat_ms())),
            next_slot: next_slot(pacer),
        };
        match move_plans::progress(&*self.inner.store, handle, &self.inner.node_id, &p, now).await {
            Ok(None) => Some(Stop::Lost),
            Ok(Some(w)) if w.m.status == PlanStatus::Cancelling => Some(Stop::Cancelled),
            Ok(Some(_)) => None,
            Err(e) => {
                // The receive that follows meets the same store; a heartbeat missed here
                // is renewed at the next batch (or the task is resumed elsewhere).
                tracing::warn!(error = %e, handle, "move task progress not written");
                None
            }
        }
    }

    /// Moves until the source is empty, the task is cancelled, or the broker shuts down;
    /// `Err` with the reason when a message cannot be moved. `moved` counts as it goes;
    /// `pacer` holds the task to its rate (see the module docs). A message its recovery
    /// case refuses stays on the source, held in `skipped` (once each) until the task
    /// ends, and the task goes on past it.
    async fn move_loop(
        &self,
        handle: &str,
        spec: &MoveSpec,
        cancel: &CancellationToken,
        moved: &mut u64,
        pacer: &mut Pacer,
        skipped: &mut Vec<Delivery>,
    ) -> Result<Stop, String> {
        let stopped = |c: &CancellationToken| {
            if self.inner.shutdown.is_cancelled() {
                Stop::ShutDown
            } else if c.is_cancelled() {
                Stop::Cancelled
            } else {
                Stop::Done
            }
        };
        let budget = move_budget(spec.max_per_second);
        // A batch never takes more than a second of the rate.
        let want = MOVE_BATCH.min(move_rate(spec.max_per_second));
        // Messages received and not yet moved (a look taken before a wait).
        let mut held: Vec<Delivery> = Vec::new();
        // Whether the last receive came back short: the source may be empty.
        let mut short = false;
        loop {
            if cancel.is_cancelled() {
                self.release(handle, &spec.source, held).await;
                return Ok(stopped(cancel));
            }
            if let Some(stop) = self.beat(handle, *moved, pacer).await {
                self.release(handle, &spec.source, held).await;
                return Ok(stop);
            }
            if let Admission::At(at) = pacer.check(&budget, 0, self.now()) {
                if short && held.is_empty() {
                    held = self.receive_batch(&spec.source, want).await?;
                    if held.is_empty() {
                        return Ok(Stop::Done);
                    }
                    short = held.len() < want as usize;
                }
                tokio::select! {
                    () = self.inner.clock.sleep_until(at) => {}
                    () = cancel.cancelled() => {
                        self.release(handle, &spec.source, held).await;
                        return Ok(stopped(cancel));
                    }
                }
                // Beat again first: a cancel asked elsewhere is seen before moving on.
                continue;
            }
            if held.is_empty() {
                held = self.receive_batch(&spec.source, want).await?;
                if held.is_empty() {
                    return Ok(Stop::Done);
                }
            }
            short = held.len() < want as usize;
            // The batch takes its slots together.
            let now = self.now();
            for _ in &held {
                pacer.admit(&budget, 0, now);
            }
            let mut rest = std::mem::take(&mut held).into_iter();
            while let Some(d) = rest.next() {
                let one = self.move_one(handle, spec, &d).await;
                pacer.finish();
                match one {
                    Err(reason) => {
                        self.release(
                            handle,
                            &spec.source,
                            std::iter::once(d).chain(rest).collect(),
                        )
                        .await;
                        return Err(reason);
                    }
                    Ok(true) => *moved += 1,
                    Ok(false) => {
                        match skipped
                            .iter_mut()
                            .find(|s| s.message.sequence == d.message.sequence)
                        {
                            // Received again after its lock ran out: counted once.
                            Some(s) => *s = d,
                            None => skipped.push(d),
                        }
                    }
                }
            }
            tokio::task::yield_now().await;
        }
    }

    /// Receives up to `want` messages of `source` under the mover's lock.
    async fn receive_batch(&self, source: &str, want: u32) -> Result<Vec<Delivery>, String> {
        self.receive(
            source,
            ReceiveOptions {
                max: want,
                lock_ms: Some(MOVE_LOCK_MS),
                wait_ms: 0,
                session: None,
                until_revoked: None,
            },
        )
        .await
        .map_err(|e| format!("receiving from {source}: {e}"))
    }

    /// Releases messages received and not moved (available again at once).
    async fn release(&self, handle: &str, source: &str, held: Vec<Delivery>) {
        if held.is_empty() {
            return;
        }
        let release: Vec<Settlement> = held
            .into_iter()
            .map(|d| Settlement {
                lock_token: d.lock_token,
                action: SettleAction::Abandon {
                    delay_ms: Some(0),
                    last_attempt: None,
                },
            })
            .collect();
        if let Err(e) = self.settle_items(source, release, LockBounds::Native).await {
            tracing::warn!(handle, error = %e, "releasing unmoved messages failed");
        }
    }

    /// Sends one delivery to its destination, then completes it on the source: `true`.
    /// A message that stands for a recovery case (the latest case of its intent on the
    /// queue that dead-lettered it, its `DeadLetterSource`) goes through the case's gates
    /// first (`cases::by_hand`); refused, it is not sent (`false`, audited
    /// `move_task.move` with the reason).
    async fn move_one(&self, handle: &str, spec: &MoveSpec, d: &Delivery) -> Result<bool, String> {
        let m = &d.message;
        let dest = match (
            &spec.destination,
            m.properties.get(DEAD_LETTER_SOURCE_PROPERTY),
        ) {
            (Some(dest), _) => dest.clone(),
            (None, Some(PropertyValue::String(q))) => q.clone(),
            (None, _) => {
                return Err(format!(
                    "message {} has no original source queue to return to",
                    m.message_id
                ));
            }
        };
        let pass = match self.move_gate(handle, spec, d, &dest).await {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(false),
            Err(e) => return Err(format!("judging message {}: {e}", m.message_id)),
        };
        let out = outgoing(m);
        let sent = match self.send(&dest, vec![out.clone()]).await {
            Ok(sent) => sent,
            Err(e) => {
                self.hand_failed(&pass, &e).await;
                return Err(format!("sending message {} to {dest}: {e}", m.message_id));
            }
        };
        let mut sent_id = sent.first().map(|e| e.message_id.clone());
        if sent.first().is_some_and(|e| e.duplicate) {
            // The destination's duplicate detection knows the id: moved messages are not
            // duplicates, so send it under a new id rather than lose it.
            let fresh = Outgoing {
                message_id: None,
                ..out
            };
            match self.send(&dest, vec![fresh]).await {
                Ok(again) => sent_id = again.first().map(|e| e.message_id.clone()),
                Err(e) => {
                    self.hand_failed(&pass, &e).await;
                    return Err(format!("sending message {} to {dest}: {e}", m.message_id));
                }
            }
        }
        self.hand_delivered(pass, sent_id.as_deref(), &spec.owner)
            .await;
        let done = self
            .settle(&spec.source, vec![(d.lock_token.clone(), Settle::Complete)])
            .await
            .map_err(|e| format!("completing message {}: {e}", m.message_id))?;
        if let Some(Err(e)) = done.first() {
            // The lock ran out: the message stays on the source and may be moved again.
            tracing::warn!(message_id = %m.message_id, error = %e,
                "moved message could not be completed on the source");
        }
        Ok(true)
    }

    /// The gate of moving `d` to `dest` (see [`Broker::move_one`]): `Ok(None)` when its
    /// case refuses it (audited); `Err` when the case could not be asked.
    async fn move_gate(
        &self,
        handle: &str,
        spec: &MoveSpec,
        d: &Delivery,
        dest: &str,
    ) -> BrokerResult<Option<HandPass>> {
        let m = &d.message;
        let case = match m.properties.get(DEAD_LETTER_SOURCE_PROPERTY) {
            Some(PropertyValue::String(q)) => match q.parse::<EntityName>() {
                Ok(origin) => {
                    let intent = intent_identity(m.intent.as_deref(), &m.message_id);
                    self.case_of_intent(&origin, intent).await?
                }
                Err(_) => None,
            },
            _ => None,
        };
        let target = HandTarget {
            operation: HandOperation::MoveTask,
            message_id: m.message_id.clone(),
            destination: dest.to_owned(),
            digest: redrive_core::digest::sha256_hex(&m.body),
        };
        match self.hand_gate(case, target, &spec.owner).await {
            Ok(p) => Ok(Some(p)),
            Err(e @ BrokerError::RedeliveryRefused(_)) => {
                let case_id = match &e {
                    BrokerError::RedeliveryRefused(r) => r.case_id.clone(),
                    _ => String::new(),
                };
                tracing::info!(handle, message_id = %m.message_id, case_id = %case_id,
                    error = %e, "message move task skipped a message its recovery case refuses");
                let outcome = format!("error:{}", e.code_hint());
                self.audit(
                    &spec.owner,
                    "move_task.move",
                    Some(&spec.source),
                    vec![handle.to_owned(), m.message_id.clone(), case_id],
                    &outcome,
                )
                .await?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// The message to send for a moved one: the same id, body and properties, without the
/// dead-letter properties.
fn outgoing(m: &StoredMessage) -> Outgoing {
    let mut properties = m.properties.clone();
    for p in [
        DEAD_LETTER_REASON_PROPERTY,
        DEAD_LETTER_DESCRIPTION_PROPERTY,
        DEAD_LETTER_SOURCE_PROPERTY,
    ] {
        properties.remove(p);
    }
    Outgoing {
        message_id: Some(m.message_id.clone()),
        body: m.body.clone(),
        content_type: m.content_type.clone(),
        properties,
        correlation_id: m.correlation_id.clone(),
        session_id: m.session_id.clone(),
        message_type: m.message_type.clone(),
        intent: m.intent.clone(),
        valid_until: m.valid_until,
        scheduled_at: None,
        ttl_ms: None,
    }
}

/// `ms` after `now`, saturating.
fn after(now: Timestamp, ms: u64) -> Timestamp {
    now.plus_millis(i64::try_from(ms).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use redrive_core::{ManualClock, QueuePolicy, Timestamp};
    use redrive_store_sqlite::{SqliteOptions, SqliteStore};

    use super::*;

    struct Fixture {
        broker: Broker,
        clock: ManualClock,
        _dir: tempfile::TempDir,
    }

    async fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn redrive_store::Store> = Arc::new(
            SqliteStore::open(&dir.path().join("r.db"), SqliteOptions::default()).unwrap(),
        );
        let clock = ManualClock::new(Timestamp(1_800_000_000_000));
        let broker = Broker::new(store, Arc::new(clock.clone()));
        Fixture {
            broker,
            clock,
            _dir: dir,
        }
    }

    async fn fill(b: &Broker, queue: &str, n: usize) {
        let msgs = (0..n)
            .map(|i| Outgoing {
                body: format!("m{i}").into_bytes(),
                ..Outgoing::default()
            })
            .collect();
        b.send(queue, msgs).await.unwrap();
    }

    /// The move-specific part of task `handle` as stored.
    async fn part_of(store: &dyn redrive_store::Store, handle: &str) -> MovePart {
        move_plans::get(store, handle)
            .await
            .unwrap()
            .unwrap()
            .move_part()
            .unwrap()
    }

    async fn count(b: &Broker, queue: &str) -> u64 {
        b.get_queue(queue).await.unwrap().counts.messages()
    }

    async fn task(b: &Broker, source: &str) -> MoveTask {
        b.list_move_tasks(source, 1).await.unwrap().pop().unwrap()
    }

    /// Waits (yielding, bounded) until the newest task of `source` satisfies `ok`: a
    /// signal, not a timing rule.
    async fn until_task(
        b: &Broker,
        source: &str,
        mut ok: impl FnMut(&MoveTask) -> bool,
    ) -> MoveTask {
        for _ in 0..10_000 {
            let t = task(b, source).await;
            if ok(&t) {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("condition never held");
    }

    /// Waits until the task has moved `n` and sleeps on the clock for its next second.
    async fn parked_at(f: &Fixture, source: &str, n: u64) {
        for _ in 0..10_000 {
            if task(&f.broker, source).await.moved == n && f.clock.sleepers() == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("the task never parked at {n}");
    }

    /// Another broker (node) over the fixture's store and clock.
    fn other_node(f: &Fixture) -> Broker {
        Broker::new(f.broker.inner.store.clone(), Arc::new(f.clock.clone()))
    }

    fn rate_one() -> MoveSpec {
        MoveSpec {
            source: "dlq".to_owned(),
            destination: Some("dest".to_owned()),
            max_per_second: Some(1),
            owner: Actor::anonymous(),
        }
    }

    async fn dlq_and_dest(b: &Broker, n: usize) {
        b.create_queue("dlq", QueuePolicy::default()).await.unwrap();
        b.create_queue("dest", QueuePolicy::default())
            .await
            .unwrap();
        fill(b, "dlq", n).await;
    }

    #[tokio::test]
    async fn a_task_is_listed_and_cancelled_through_another_node() {
        let f = fixture().await;
        let (b, b2) = (&f.broker, &other_node(&f));
        dlq_and_dest(b, 3).await;
        let t = b.start_move_task(rate_one()).await.unwrap();
        parked_at(&f, "dlq", 1).await;
        let seen = b2.list_move_tasks("dlq", 10).await.unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!(
            (
                seen[0].handle.as_str(),
                seen[0].status,
                seen[0].moved,
                seen[0].to_move
            ),
            (t.handle.as_str(), MoveStatus::Running, 1, 3)
        );
        assert!(matches!(
            b2.start_move_task(rate_one()).await,
            Err(MoveError::AlreadyRunning(_))
        ));
        let c = b2
            .cancel_move_task(&t.handle, &Actor::anonymous())
            .await
            .unwrap();
        assert_eq!(c.status, MoveStatus::Cancelling);
        // The runner sees the request at its next batch, when its next second comes.
        assert_eq!(task(b, "dlq").await.status, MoveStatus::Cancelling);
        f.clock.advance(Duration::from_secs(1));
        let ended = until_task(b2, "dlq", |t| t.status == MoveStatus::Cancelled).await;
        assert_eq!(ended.moved, 1);
        f.clock.advance(Duration::from_secs(5));
        tokio::task::yield_now().await;
        assert_eq!(count(b, "dest").await, 1);
        assert_eq!(count(b, "dlq").await, 2);
        assert!(matches!(
            b2.cancel_move_task(&t.handle, &Actor::anonymous()).await,
            Err(MoveError::NotRunning(_))
        ));
    }

    #[tokio::test]
    async fn a_task_let_go_at_shutdown_is_resumed_by_another_node_and_completes() {
        let f = fixture().await;
        let (b, b2) = (&f.broker, &other_node(&f));
        dlq_and_dest(b, 3).await;
        let t = b.start_move_task(rate_one()).await.unwrap();
        parked_at(&f, "dlq", 1).await;
        assert_eq!(
            b2.resume_move_tasks().await.unwrap(),
            0,
            "its runner's heartbeat holds it"
        );
        b.begin_shutdown();
        b.move_tasks_stopped().await;
        let store = b.inner.store.clone();
        let let_go = part_of(&*store, &t.handle).await;
        assert_eq!(let_go.runner_until, None, "let go at shutdown");
        assert_eq!((let_go.status, let_go.moved), (MoveTaskStatus::Running, 1));
        // A second later (the stopped runner's sleep went with it): the resumed runner is
        // the only sleeper.
        f.clock.advance(Duration::from_secs(1));
        assert_eq!(f.clock.sleepers(), 0);
        assert_eq!(b2.resume_move_tasks().await.unwrap(), 1);
        assert_eq!(
            part_of(&*store, &t.handle).await.runner.as_deref(),
            Some(b2.node_id())
        );
        parked_at(&f, "dlq", 2).await;
        f.clock.advance(Duration::from_secs(1));
        parked_at(&f, "dlq", 3).await;
        f.clock.advance(Duration::from_secs(1));
        let done = until_task(b2, "dlq", |t| t.status == MoveStatus::Completed).await;
        assert_eq!((done.moved, done.to_move), (3, 3));
        assert_eq!(count(b2, "dest").await, 3);
        assert_eq!(count(b2, "dlq").await, 0);
    }

    #[tokio::test]
    async fn a_resumed_task_keeps_its_spacing_and_does_not_exceed_its_rate() {
        let f = fixture().await;
        let (b, b2) = (&f.broker, &other_node(&f));
        dlq_and_dest(b, 7).await;
        let t0 = b.now();
        let t = b
            .start_move_task(MoveSpec {
                max_per_second: Some(2),
                ..rate_one()
            })
            .await
            .unwrap();
        // Two at t0 (one batch, a second of the rate); the next two not before t0 + 1 s.
        parked_at(&f, "dlq", 2).await;
        b.begin_shutdown();
        b.move_tasks_stopped().await;
        let store = b.inner.store.clone();
        let let_go = part_of(&*store, &t.handle).await;
        assert_eq!(let_go.runner_until, None);
        assert_eq!(let_go.next_slot, Some(t0.plus_millis(1_000)));
        // The plan shows the task, its budget and its pacing state.
        let plan = store.get_replay_plan(&t.handle).await.unwrap();
        assert_eq!(plan.kind, redrive_store::PlanKind::SqsMove);
        assert_eq!(plan.m.state["next_item_ms"], t0.plus_millis(1_000).0);
        // Resumed on another node at the same instant: it waits for its slot (the stopped
        // runner's sleep went with it).
        assert_eq!(b2.resume_move_tasks().await.unwrap(), 1);
        let slot = t0.plus_millis(1_000);
        for _ in 0..10_000 {
            let now = part_of(&*store, &t.handle).await;
            if now.runner.as_deref() == Some(b2.node_id()) && f.clock.sleeping_until(slot) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(
            f.clock.sleeping_until(slot),
            "the resumed runner waits on the clock for its slot"
        );
        assert_eq!(task(b2, "dlq").await.moved, 2, "nothing more at t0");
        assert_eq!(count(b2, "dest").await, 2);
        f.clock.advance(Duration::from_millis(999));
        tokio::task::yield_now().await;
        assert_eq!(task(b2, "dlq").await.moved, 2, "nothing before t0 + 1 s");
        f.clock.advance(Duration::from_millis(1));
        parked_at(&f, "dlq", 4).await;
        assert_eq!(b2.now(), t0.plus_millis(1_000));
        assert_eq!(
            count(b2, "dest").await,
            4,
            "four in [t0, t0 + 1 s]: the rate kept"
        );
        f.clock.advance(Duration::from_secs(1));
        parked_at(&f, "dlq", 6).await;
        f.clock.advance(Duration::from_secs(1));
        let done = until_task(b2, "dlq", |t| t.status == MoveStatus::Completed).await;
        assert_eq!((done.moved, done.to_move), (7, 7));
    }

    #[tokio::test]
    async fn a_task_without_a_rate_is_paced_at_the_highest_rate() {
        let f = fixture().await;
        let b = &f.broker;
        dlq_and_dest(b, 25).await;
        let t0 = b.now();
        b.start_move_task(MoveSpec {
            max_per_second: None,
            ..rate_one()
        })
        .await
        .unwrap();
        // A batch of ten at t0 holds the pacer for ten slots of 1/500 s.
        parked_at(&f, "dlq", 10).await;
        let stored = b.list_move_tasks("dlq", 1).await.unwrap();
        assert_eq!(stored[0].spec.max_per_second, None);
        let slot = part_of(&*b.inner.store, &stored[0].handle).await.next_slot;
        assert_eq!(slot, Some(t0.plus_millis(20)));
        f.clock.advance(Duration::from_millis(20));
        parked_at(&f, "dlq", 20).await;
        f.clock.advance(Duration::from_millis(20));
        // Five left: moved, and the source found empty without waiting for the next slot.
        let done = until_task(b, "dlq", |t| t.status == MoveStatus::Completed).await;
        assert_eq!(done.moved, 25);
        assert_eq!(b.now(), t0.plus_millis(40));
    }

    #[tokio::test]
    async fn a_task_whose_runner_died_is_resumed_once_its_heartbeat_ran_out() {
        let f = fixture().await;
        let b = &f.broker;
        dlq_and_dest(b, 2).await;
        let now = b.now();
        let handle = format!("mv_{}", "0".repeat(32));
        move_plans::create(
            &*b.inner.store,
            &NewMove {
                handle: handle.clone(),
                source: "dlq".to_owned(),
                destination: Some("dest".to_owned()),
                max_per_second: None,
                to_move: 2,
                owner_id: "anonymous".to_owned(),
                owner_name: "anonymous".to_owned(),
                runner: "node-gone".to_owned(),
                runner_until: after(now, heartbeat_ms()),
                now,
            },
        )
        .await
        .unwrap();
        assert_eq!(b.resume_move_tasks().await.unwrap(), 0);
        f.clock.advance(MOVE_HEARTBEAT - Duration::from_millis(1));
        assert_eq!(b.resume_move_tasks().await.unwrap(), 0);
        f.clock.advance(Duration::from_millis(1));
        assert_eq!(b.resume_move_tasks().await.unwrap(), 1);
        let done = until_task(b, "dlq", |t| t.status == MoveStatus::Completed).await;
        assert_eq!((done.handle.as_str(), done.moved), (handle.as_str(), 2));
        assert_eq!(count(b, "dest").await, 2);
        // A finished task is never resumed.
        f.clock.advance(MOVE_HEARTBEAT * 2);
        assert_eq!(b.resume_move_tasks().await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_task_whose_owner_was_revoked_while_it_was_orphaned_fails_on_resume() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn redrive_store::Store> = Arc::new(
            SqliteStore::open(&dir.path().join("r.db"), SqliteOptions::default()).unwrap(),
        );
        let clock = ManualClock::new(Timestamp(1_800_000_000_000));
        let node = || {
            Broker::with_access(
                store.clone(),
                Arc::new(clock.clone()),
                crate::AccessSettings {
                    enabled: true,
                    ..crate::AccessSettings::default()
                },
            )
        };
        let f = Fixture {
            broker: node(),
            clock: clock.clone(),
            _dir: dir,
        };
        let (b, b2) = (&f.broker, &node());
        dlq_and_dest(b, 3).await;
        let created = b
            .create_token(
                &Actor::system("test"),
                crate::TokenSpec {
                    name: "mover".into(),
                    grants: vec!["replayer".parse().unwrap()],
                    ..crate::TokenSpec::default()
                },
            )
            .await
            .unwrap();
        let owner = b.authenticate(Some(&created.secret), None).await.unwrap();
        let t = b
            .start_move_task(MoveSpec {
                owner: owner.clone(),
                ..rate_one()
            })
            .await
            .unwrap();
        parked_at(&f, "dlq", 1).await;
        b.begin_shutdown();
        b.move_tasks_stopped().await;
        // The token is revoked on the other node while nobody runs the task.
        b2.revoke_token(&Actor::system("test"), &owner.id)
            .await
            .unwrap();
        assert_eq!(b2.resume_move_tasks().await.unwrap(), 0);
        let ended = task(b2, "dlq").await;
        assert_eq!(ended.handle, t.handle);
        assert_eq!(ended.status, MoveStatus::Failed);
        assert_eq!(ended.failure.as_deref(), Some(AUTHORIZATION_REVOKED));
        assert_eq!(ended.moved, 1);
        assert_eq!(count(b2, "dlq").await, 2);
    }

    #[tokio::test]
    async fn the_rate_is_honoured_second_by_second_and_the_task_completes() {
        let f = fixture().await;
        let b = &f.broker;
        b.create_queue("dlq", QueuePolicy::default()).await.unwrap();
        b.create_queue("dest", QueuePolicy::default())
            .await
            .unwrap();
        fill(b, "dlq", 5).await;
        let started = b
            .start_move_task(MoveSpec {
                source: "dlq".to_owned(),
                destination: Some("dest".to_owned()),
                max_per_second: Some(2),
                owner: Actor::anonymous(),
            })
            .await
            .unwrap();
        assert_eq!(started.status, MoveStatus::Running);
        assert_eq!(started.to_move, 5);
        parked_at(&f, "dlq", 2).await;
        assert_eq!(count(b, "dest").await, 2);
        assert_eq!(count(b, "dlq").await, 3);
        f.clock.advance(Duration::from_secs(1));
        parked_at(&f, "dlq", 4).await;
        assert_eq!(count(b, "dest").await, 4);
        f.clock.advance(Duration::from_secs(1));
        until_task(b, "dlq", |t| t.status == MoveStatus::Completed).await;
        let t = task(b, "dlq").await;
        assert_eq!((t.moved, t.to_move), (5, 5));
        assert_eq!(count(b, "dest").await, 5);
        assert_eq!(count(b, "dlq").await, 0);
        assert!(matches!(
            b.cancel_move_task(&t.handle, &Actor::anonymous()).await,
            Err(MoveError::NotRunning(_))
        ));
    }

    #[test]
    fn handles_have_one_shape() {
        assert!(is_move_task_handle(&format!("mv_{}", "0a".repeat(16))));
        for bad in [
            "",
            "mv_",
            "mv_unknown",
            &format!("mv_{}", "0A".repeat(16)),
            &format!("mv_{}", "0".repeat(31)),
            &format!("xx_{}", "0".repeat(32)),
        ] {
            assert!(!is_move_task_handle(bad), "{bad}");
        }
    }

    #[tokio::test]
    async fn cancel_stops_the_task_and_one_task_runs_per_source() {
        let f = fixture().await;
        let b = &f.broker;
        b.create_queue("dlq", QueuePolicy::default()).await.unwrap();
        b.create_queue("dest", QueuePolicy::default())
            .await
            .unwrap();
        fill(b, "dlq", 3).await;
        let spec = MoveSpec {
            source: "dlq".to_owned(),
            destination: Some("dest".to_owned()),
            max_per_second: Some(1),
            owner: Actor::anonymous(),
        };
        let t = b.start_move_task(spec.clone()).await.unwrap();
        assert!(is_move_task_handle(&t.handle));
        parked_at(&f, "dlq", 1).await;
        assert!(matches!(
            b.start_move_task(spec.clone()).await,
            Err(MoveError::AlreadyRunning(_))
        ));
        let c = b
            .cancel_move_task(&t.handle, &Actor::anonymous())
            .await
            .unwrap();
        assert_eq!(c.status, MoveStatus::Cancelling);
        until_task(b, "dlq", |t| t.status == MoveStatus::Cancelled).await;
        f.clock.advance(Duration::from_secs(5));
        tokio::task::yield_now().await;
        assert_eq!(task(b, "dlq").await.moved, 1);
        assert_eq!(count(b, "dlq").await, 2);
        assert_eq!(count(b, "dest").await, 1);
        assert!(matches!(
            b.cancel_move_task("mv_unknown", &Actor::anonymous()).await,
            Err(MoveError::NotFound(_))
        ));
        // A new task may start once the old one ended; listed newest first.
        b.start_move_task(spec).await.unwrap();
        let both = b.list_move_tasks("dlq", 10).await.unwrap();
        assert_eq!(both.len(), 2);
        assert_eq!(both[1].handle, t.handle);
        assert!(matches!(
            b.start_move_task(MoveSpec {
                source: "dlq".to_owned(),
                destination: None,
                max_per_second: Some(501),
                owner: Actor::anonymous(),
            })
            .await,
            Err(MoveError::Broker(BrokerError::InvalidRequest { .. }))
        ));
    }

    #[tokio::test]
    async fn without_destination_each_message_returns_to_its_source() {
        let f = fixture().await;
        let b = &f.broker;
        b.create_queue("dlq", QueuePolicy::default()).await.unwrap();
        let to_dlq = QueuePolicy {
            max_delivery_count: 1,
            dead_letter_queue: Some("dlq".parse().unwrap()),
            ..QueuePolicy::default()
        };
        for q in ["a", "b"] {
            b.create_queue(q, to_dlq.clone()).await.unwrap();
            fill(b, q, 1).await;
            let d = b
                .receive(
                    q,
                    ReceiveOptions {
                        max: 1,
                        ..ReceiveOptions::default()
                    },
                )
                .await
                .unwrap();
            b.settle(
                q,
                vec![(d[0].lock_token.clone(), Settle::Abandon { delay_ms: None })],
            )
            .await
            .unwrap();
        }
        assert_eq!(count(b, "dlq").await, 2);
        b.start_move_task(MoveSpec {
            source: "dlq".to_owned(),
            destination: None,
            max_per_second: None,
            owner: Actor::anonymous(),
        })
        .await
        .unwrap();
        until_task(b, "dlq", |t| t.status == MoveStatus::Completed).await;
        assert_eq!(task(b, "dlq").await.moved, 2);
        for q in ["a", "b"] {
            let back = b.peek(q, 1, 10, &Actor::anonymous()).await.unwrap();
            assert_eq!(back.len(), 1, "{q} got its message back");
            assert!(!back[0].properties.contains_key(DEAD_LETTER_SOURCE_PROPERTY));
        }
        assert_eq!(count(b, "dlq").await, 0);
    }

    #[tokio::test]
    async fn a_message_without_a_source_fails_the_task_and_stays() {
        let f = fixture().await;
        let b = &f.broker;
        b.create_queue("dlq", QueuePolicy::default()).await.unwrap();
        fill(b, "dlq", 1).await;
        b.start_move_task(MoveSpec {
            source: "dlq".to_owned(),
            destination: None,
            max_per_second: None,
            owner: Actor::anonymous(),
        })
        .await
        .unwrap();
        until_task(b, "dlq", |t| t.status == MoveStatus::Failed).await;
        assert!(task(b, "dlq").await.failure.unwrap().contains("source"));
        assert_eq!(b.get_queue("dlq").await.unwrap().counts.active, 1);
    }

    #[tokio::test]
    async fn revoking_the_owners_token_stops_the_task_with_authorization_revoked() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn redrive_store::Store> = Arc::new(
            SqliteStore::open(&dir.path().join("r.db"), SqliteOptions::default()).unwrap(),
        );
        let clock = ManualClock::new(Timestamp(1_800_000_000_000));
        let f = Fixture {
            broker: Broker::with_access(
                store,
                Arc::new(clock.clone()),
                crate::AccessSettings {
                    enabled: true,
                    ..crate::AccessSettings::default()
                },
            ),
            clock,
            _dir: dir,
        };
        let b = &f.broker;
        b.create_queue("dlq", QueuePolicy::default()).await.unwrap();
        b.create_queue("dest", QueuePolicy::default())
            .await
            .unwrap();
        fill(b, "dlq", 3).await;
        let created = b
            .create_token(
                &Actor::system("test"),
                crate::TokenSpec {
                    name: "mover".into(),
                    grants: vec!["replayer".parse().unwrap()],
                    ..crate::TokenSpec::default()
                },
            )
            .await
            .unwrap();
        let owner = b.authenticate(Some(&created.secret), None).await.unwrap();
        let t = b
            .start_move_task(MoveSpec {
                source: "dlq".to_owned(),
                destination: Some("dest".to_owned()),
                max_per_second: Some(1),
                owner: owner.clone(),
            })
            .await
            .unwrap();
        parked_at(&f, "dlq", 1).await;
        b.revoke_token(&Actor::system("test"), &owner.id)
            .await
            .unwrap();
        until_task(b, "dlq", |t| t.status == MoveStatus::Failed).await;
        let ended = task(b, "dlq").await;
        assert_eq!(ended.failure.as_deref(), Some(AUTHORIZATION_REVOKED));
        assert_eq!(ended.moved, 1);
        // Nothing more moves, whatever the clock does.
        f.clock.advance(Duration::from_secs(5));
        tokio::task::yield_now().await;
        assert_eq!(count(b, "dest").await, 1);
        assert_eq!(count(b, "dlq").await, 2);
        // The task's end is audited just after its status changes: wait for the entry.
        let mut log = Vec::new();
        for _ in 0..10_000 {
            log = b
                .list_audit(&redrive_store::AuditQuery {
                    actor_id: Some(owner.id.clone()),
                    limit: 100,
                    ..redrive_store::AuditQuery::default()
                })
                .await
                .unwrap();
            if log.len() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let acts: Vec<(&str, &str)> = log
            .iter()
            .map(|e| (e.fields.action.as_str(), e.fields.outcome.as_str()))
            .collect();
        assert_eq!(
            acts,
            [("move_task.start", "ok"), ("move_task.end", "failed")]
        );
        assert!(log[1].fields.targets.contains(&t.handle));
        assert!(
            log[1]
                .fields
                .targets
                .contains(&format!("failure={AUTHORIZATION_REVOKED}"))
        );
    }
}
