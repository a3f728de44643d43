//! Listing the tasks of a source (`ListMessageMoveTasks`), whichever node started them.

use redrive_store::move_plans;

use super::Mover;
use super::spec::{Held, MoveTask};
use crate::{Broker, BrokerResult};

impl Mover {
    /// The most recent tasks of `source`, newest first, at most `max`.
    #[tracing::instrument(level = "debug", skip_all, fields(source = %source))]
    pub(crate) async fn list(&self, source: &str, max: usize) -> BrokerResult<Vec<MoveTask>> {
        let limit = u32::try_from(max).unwrap_or(u32::MAX);
        let plans = move_plans::list(&*self.ctx.store, source, limit).await?;
        plans
            .into_iter()
            .map(|p| Held::of(p).map(|h| MoveTask::from(&h)))
            .collect()
    }
}

impl Broker {
    /// The most recent tasks of a source queue, newest first, at most `max`, whichever
    /// node started them.
    pub async fn list_move_tasks(&self, source: &str, max: usize) -> BrokerResult<Vec<MoveTask>> {
        self.mover().list(source, max).await
    }

    /// A count of what the move tasks this node runs wrote: one more after each heartbeat
    /// (a task's progress, before every batch) and after each run's end — completed,
    /// cancelled, failed, let go at shutdown, or lost to another node — once it is written.
    /// Waiting on `changed()` waits for the next of them, so a caller that reads a task
    /// after subscribing and waits when it is not there yet misses none.
    pub fn move_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.mover().changes.subscribe()
    }
}
