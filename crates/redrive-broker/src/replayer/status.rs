//! Automatic replay's settings, wake-ups and counts.

use super::*;

impl Replay {
    /// The replay settings of this node.
    pub fn replay_settings(&self) -> ReplaySettings {
        self.state
            .settings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sets the replay settings of this node (configuration, at start).
    pub fn set_replay_settings(&self, settings: ReplaySettings) {
        *self
            .state
            .settings
            .write()
            .unwrap_or_else(|e| e.into_inner()) = settings;
    }

    /// Wakes whoever takes messages from `queue` after a republish: its long polls, and
    /// push delivery (the queue may be a push subscription's).
    pub(super) fn wake_republished(&self, queue: &EntityName) {
        self.broker.inner.waiters.wake(queue.as_str());
        let state = self.broker.topic_state();
        state.push_work.notify_one();
        state.push_published.notify_waiters();
    }

    /// Wakes the replay worker (a candidate was written).
    pub(crate) fn wake_replay(&self) {
        self.state.wake.notify_one();
    }

    /// Replay counts per entity: of `queue`, or of every queue with dead letters.
    pub async fn replay_status(&self, queue: Option<&str>) -> BrokerResult<Vec<ReplayStatus>> {
        let name = queue.map(str::parse::<EntityName>).transpose()?;
        if let Some(n) = &name {
            self.ctx.store.get_queue(n).await?;
        }
        let flag = self.replay_settings().flag_after_failures;
        let mut counts = self.ctx.store.replay_counts(name.as_ref(), flag).await?;
        if let (Some(n), true) = (&name, counts.is_empty()) {
            counts.push(ReplayCounts::empty(n.clone()));
        }
        Ok(counts)
    }
}
