//! Starting a task (`StartMessageMoveTask`) and asking one to stop
//! (`CancelMessageMoveTask`), each audited (`move_task.start`, `move_task.cancel`).

use redrive_store::{MoveTaskStatus, NewMove, StoreError, move_plans};

use super::spec::{Held, MoveError, MoveSpec, MoveTask, check_destination, check_rate, new_handle};
use super::{Mover, after, heartbeat_ms};
use crate::{Actor, Broker, BrokerError};

impl Mover {
    /// Stores a new task of `spec` with `to_move` messages on its source, run by this
    /// node. `AlreadyRunning` while another task of the source is active.
    #[tracing::instrument(level = "debug", skip_all,
        fields(source = %spec.source, destination = ?spec.destination))]
    async fn create(&self, spec: &MoveSpec, to_move: u64) -> Result<Held, MoveError> {
        let now = self.ctx.now();
        let new = NewMove {
            handle: new_handle(),
            source: spec.source.clone(),
            destination: spec.destination.clone(),
            max_per_second: spec.max_per_second,
            to_move,
            owner_id: spec.owner.id.clone(),
            owner_name: spec.owner.name.clone(),
            runner: self.node().to_owned(),
            runner_until: after(now, heartbeat_ms()),
            now,
        };
        match move_plans::create(&*self.ctx.store, &new).await {
            Ok(r) => Ok(Held::of(r)?),
            Err(StoreError::MoveTaskRunning { queue }) => Err(MoveError::AlreadyRunning(queue)),
            Err(e) => Err(BrokerError::from(e).into()),
        }
    }

    /// Asks task `handle` to stop in the store (whichever node runs it) and stops it now
    /// when this node runs it; answers the task as written (`CANCELLING`).
    #[tracing::instrument(level = "debug", skip_all, fields(task = %handle))]
    pub(crate) async fn cancel(&self, handle: &str) -> Result<MoveTask, MoveError> {
        let record = match move_plans::cancel(&*self.ctx.store, handle, self.ctx.now()).await {
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
        if let Some(c) = self.with(|m| m.get(handle).cloned()) {
            c.cancel();
        }
        debug_assert_eq!(record.part.status, MoveTaskStatus::Cancelling);
        tracing::info!(handle, source = %record.plan.queue, moved = record.part.moved,
            "message move task cancelling");
        Ok(MoveTask::from(&record))
    }
}

impl Broker {
    /// Starts a move task; refused while another task of the same source is active.
    #[tracing::instrument(level = "debug", skip_all,
        fields(queue = %spec.source, destination = ?spec.destination))]
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
        self.mover()
            .ctx
            .audit(&owner, "move_task.start", Some(&source), targets, &outcome)
            .await?;
        result
    }

    /// The checks (rate, source, destination, not shutting down), the task stored, and
    /// its runner spawned here.
    async fn start_move_task_inner(&self, spec: MoveSpec) -> Result<MoveTask, MoveError> {
        check_rate(&spec)?;
        let view = self.get_queue(&spec.source).await?;
        if let Some(d) = &spec.destination {
            check_destination(&spec)?;
            self.queue_record(d).await?;
        }
        if self.inner.shutdown.is_cancelled() {
            return Err(BrokerError::ShuttingDown.into());
        }
        let record = self.mover().create(&spec, view.counts.messages()).await?;
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

    /// Runs `record` on this node (its runner now) on `owner`'s authority: the runner
    /// holds a clone of this broker for the queue operations of its run (see the module
    /// docs).
    pub(super) fn spawn_move(&self, record: Held, owner: Actor) {
        let mover = self.mover();
        let cancel = self.inner.shutdown.child_token();
        mover.with(|m| m.insert(record.plan.id.clone(), cancel.clone()));
        // Revoking the owner's token stops the task at once.
        let guard = self.revocation_guard(&owner);
        let broker = self.clone();
        mover
            .runners
            .spawn(async move { broker.run_move(record, owner, cancel, guard).await });
    }

    /// Asks a running task to stop, whichever node runs it; answers the task as it is
    /// now (status `CANCELLING`).
    #[tracing::instrument(level = "debug", skip_all, fields(task = %handle))]
    pub async fn cancel_move_task(
        &self,
        handle: &str,
        actor: &Actor,
    ) -> Result<MoveTask, MoveError> {
        let result = self.mover().cancel(handle).await;
        let (entity, outcome) = match &result {
            Ok(t) => (Some(t.spec.source.clone()), "ok"),
            Err(_) => (None, "error:refused"),
        };
        self.mover()
            .ctx
            .audit(
                actor,
                "move_task.cancel",
                entity.as_deref(),
                vec![handle.chars().take(64).collect()],
                outcome,
            )
            .await?;
        result
    }
}
