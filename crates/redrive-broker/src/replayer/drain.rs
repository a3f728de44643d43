//! The drain at start: stranded live records become candidates.

use super::*;

impl Replay {
    /// The drain at start: live records of replaying entities that are not candidates and
    /// are older than the entity's delivery window become candidates now. Answers how
    /// many did.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn drain_replay_candidates(&self) -> BrokerResult<u64> {
        let now = self.now();
        let queues = self.ctx.store.list_queues().await?;
        let subs = self.ctx.store.list_all_subscriptions().await?;
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
                .ctx
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
}
