//! Resuming after a restart or a node's loss: every node claims the tasks whose runner
//! stopped (its heartbeat ran out, or it let them go at shutdown) and runs them on, on
//! their owner's authority read again; and at shutdown this node's runners let their
//! tasks go.

use redrive_store::{MoveTaskProgress, MoveTaskStatus, move_plans};

use super::spec::{AUTHORIZATION_REVOKED, Held, MoveTask};
use super::{CLAIM_BATCH, Mover, heartbeat_ms};
use crate::{Actor, Broker, BrokerResult};

impl Mover {
    /// Claims up to [`CLAIM_BATCH`] orphaned tasks for this node (each renewed with a
    /// heartbeat).
    async fn claim(&self) -> BrokerResult<Vec<Held>> {
        let claimed = move_plans::claim(
            &*self.ctx.store,
            self.node(),
            heartbeat_ms(),
            self.ctx.now(),
            CLAIM_BATCH,
        )
        .await?;
        claimed.into_iter().map(Held::of).collect()
    }

    /// The actor a resumed task runs on: its owner's token read again (`None` when it is
    /// revoked, expired or gone); `anonymous` and `system` as they are.
    async fn owner(&self, record: &Held) -> BrokerResult<Option<Actor>> {
        let listed = MoveTask::from(record).spec.owner;
        if !listed.is_token() {
            return Ok(Some(match listed.id.as_str() {
                "anonymous" => Actor::anonymous(),
                "system" => Actor::system(&listed.name),
                _ => listed,
            }));
        }
        let now = self.ctx.now();
        Ok(self
            .ctx
            .store
            .list_tokens()
            .await?
            .iter()
            .find(|t| t.token.id == record.plan.owner_id && t.is_active(now))
            .map(crate::access::actor_of))
    }
}

impl Broker {
    /// Claims the move tasks whose runner stopped (their heartbeat ran out, or the runner
    /// let them go at shutdown) and runs them on this node; answers how many. Called on
    /// every sweeper tick, so a node resumes orphans when it starts and while it runs. A
    /// task whose owner's token is revoked or gone fails with `authorization_revoked`.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn resume_move_tasks(&self) -> BrokerResult<usize> {
        if self.inner.shutdown.is_cancelled() {
            return Ok(0);
        }
        let mover = self.mover();
        let mut resumed = 0;
        for record in mover.claim().await? {
            if mover.with(|m| m.contains_key(&record.plan.id)) {
                // Still running here (its heartbeat ran out on the clock between two
                // batches): the claim only renewed it.
                continue;
            }
            match mover.owner(&record).await? {
                Some(owner) => {
                    tracing::info!(task = %record.plan.id, source = %record.plan.queue,
                        destination = ?record.part.destination, moved = record.part.moved,
                        "message move task resumed");
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
                    mover.end(&record, &owner, &end, 0).await;
                }
            }
        }
        Ok(resumed)
    }

    /// Waits until every move task this node runs has stopped — after
    /// [`Broker::begin_shutdown`], once each has let its task go in the store for another
    /// node (or this one, restarted) to resume. The server waits on it before it closes
    /// the store.
    pub async fn move_tasks_stopped(&self) {
        let runners = &self.mover().runners;
        runners.close();
        runners.wait().await;
        runners.reopen();
    }
}
