//! Queue management.

use redrive_core::access::Operation;
use redrive_core::{AutoReplay, EntityName, QueuePolicy};
use redrive_store::{
    MAX_POLICY_VERSION_PAGE, PolicyVersionRecord, QueueCounts, QueueRecord, StoreError,
};

use crate::{Actor, Broker, BrokerError, BrokerResult};

/// How many times [`Broker::change_queue_policy`] makes a change that raced another.
const POLICY_CHANGE_ATTEMPTS: u32 = 3;

/// A queue with its live counts.
#[derive(Debug, Clone)]
pub struct QueueView {
    /// The stored queue.
    pub record: QueueRecord,
    /// Counts at the time of the read.
    pub counts: QueueCounts,
    /// Age of the oldest message in milliseconds.
    pub oldest_age_ms: Option<u64>,
}

impl Broker {
    /// Creates a queue. The policy is validated; a dead-letter queue must exist and not be
    /// the queue itself.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %name))]
    pub async fn create_queue(&self, name: &str, policy: QueuePolicy) -> BrokerResult<QueueRecord> {
        let name: EntityName = name.parse()?;
        self.check_policy(&name, &policy).await?;
        let rec = self
            .inner
            .store
            .create_queue(&name, &policy, self.now())
            .await?;
        tracing::info!(queue = %name, "queue created");
        Ok(rec)
    }

    /// Replaces a queue's policy (bumping its version).
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %name))]
    pub async fn update_queue(
        &self,
        name: &str,
        policy: QueuePolicy,
        expected_version: Option<u64>,
        actor: &Actor,
    ) -> BrokerResult<QueueRecord> {
        let name: EntityName = name.parse()?;
        // Automatic replay delivers dead letters to the queue, and a dead-letter queue
        // receives the queue's dead letters: turning either on or changing it needs the
        // role those deliveries need (refused before anything changes).
        if policy.auto_replay.enabled || policy.dead_letter_queue.is_some() {
            let before = match self.inner.store.get_queue(&name).await {
                Ok(q) => Some(q.policy),
                Err(StoreError::QueueNotFound { .. }) => None,
                Err(e) => return Err(e.into()),
            };
            self.authorize_auto_replay(
                actor,
                name.as_str(),
                before.as_ref().map(|p| &p.auto_replay),
                &policy.auto_replay,
            )
            .await?;
            self.authorize_dead_letter_queue(
                actor,
                before.as_ref().and_then(|p| p.dead_letter_queue.as_ref()),
                policy.dead_letter_queue.as_ref(),
            )
            .await?;
        }
        let result = async {
            self.refuse_subscription_queue(&name).await?;
            self.check_policy(&name, &policy).await?;
            Ok(self
                .inner
                .store
                .update_queue(&name, &policy, expected_version, self.now())
                .await?)
        }
        .await;
        let rec: QueueRecord = self
            .audited(
                actor,
                "queue.update",
                Some(name.as_str()),
                Vec::new(),
                result,
            )
            .await?;
        tracing::info!(queue = %name, policy_version = rec.policy_version, "queue policy updated");
        // A shorter backoff or a new policy may make messages receivable sooner.
        self.inner.waiters.wake(name.as_str());
        Ok(rec)
    }

    /// Refuses a change of an entity's automatic replay from `before` (`None`: the entity
    /// is new) to `after` that leaves it enabled with other settings (turning it on, or
    /// changing it while on) unless `actor` may replay there (`replayer`): replays are
    /// deliveries to the entity. Turning it off, or leaving it as it is, needs nothing more.
    pub async fn authorize_auto_replay(
        &self,
        actor: &Actor,
        entity: &str,
        before: Option<&AutoReplay>,
        after: &AutoReplay,
    ) -> BrokerResult<()> {
        if after.enabled && before != Some(after) {
            self.authorize(actor, Operation::Replay, Some(entity))
                .await?;
        }
        Ok(())
    }

    /// Refuses a change of a queue's dead-letter queue from `before` to `after` (setting
    /// one, or another one) unless `actor` may send to `after` (`producer` there): the
    /// queue's dead letters become messages on it, as if sent. Removing it, or leaving it
    /// as it is, needs nothing more.
    pub async fn authorize_dead_letter_queue(
        &self,
        actor: &Actor,
        before: Option<&EntityName>,
        after: Option<&EntityName>,
    ) -> BrokerResult<()> {
        if let Some(target) = after
            && before != Some(target)
        {
            self.authorize(actor, Operation::Send, Some(target.as_str()))
                .await?;
        }
        Ok(())
    }

    /// Changes a queue's policy from the stored one: `change` gets the current policy and
    /// answers the new one (an interface's merge patch, or its attributes mapped onto the
    /// policy), which is then stored as [`Broker::update_queue`] stores it. The update is
    /// conditional on the version `change` saw, or on `expected_version` when the caller
    /// gives one; without it, an update that raced another is made again from the newer
    /// policy (a few times), so that neither change is lost. A refusal of `change` is
    /// answered as it is, and nothing is stored.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %name))]
    pub async fn change_queue_policy<E: From<BrokerError>>(
        &self,
        name: &str,
        expected_version: Option<u64>,
        actor: &Actor,
        mut change: impl FnMut(&QueuePolicy) -> Result<QueuePolicy, E>,
    ) -> Result<QueueRecord, E> {
        let entity: EntityName = name.parse().map_err(BrokerError::from)?;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let current = self
                .inner
                .store
                .get_queue(&entity)
                .await
                .map_err(BrokerError::from)?;
            let policy = change(&current.policy)?;
            let expected = expected_version.or(Some(current.policy_version));
            match self.update_queue(name, policy, expected, actor).await {
                Err(BrokerError::Store(StoreError::VersionConflict { .. }))
                    if expected_version.is_none() && attempts < POLICY_CHANGE_ATTEMPTS => {}
                other => return other.map_err(E::from),
            }
        }
    }

    /// The queues whose policy names `queue` as their dead-letter queue, by name.
    /// `QueueNotFound` when `queue` does not exist.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %queue))]
    pub async fn dead_letter_sources(&self, queue: &str) -> BrokerResult<Vec<EntityName>> {
        let name: EntityName = queue.parse()?;
        self.inner.store.get_queue(&name).await?;
        Ok(self
            .inner
            .store
            .list_queues()
            .await?
            .into_iter()
            .filter(|r| r.policy.dead_letter_queue.as_ref() == Some(&name))
            .map(|r| r.name)
            .collect())
    }

    /// Dead-letter routing fails loudly rather than quietly: a queue that other queues or
    /// subscriptions name as their dead-letter target is not deleted without force
    /// (`QueueIsDeadLetterTarget`, naming them). The SQS endpoint deletes as SQS does.
    async fn refuse_dead_letter_target(&self, name: &EntityName) -> BrokerResult<()> {
        let subs = self.inner.store.list_all_subscriptions().await?;
        // A subscription's queue is reported as its subscription.
        let sub_queues: Vec<&EntityName> = subs.iter().map(|s| &s.queue).collect();
        let mut dependants: Vec<String> = self
            .inner
            .store
            .list_queues()
            .await?
            .into_iter()
            .filter(|r| r.policy.dead_letter_queue.as_ref() == Some(name))
            .filter(|r| !sub_queues.contains(&&r.name))
            .map(|r| r.name.to_string())
            .collect();
        for sub in &subs {
            let forwards_here = matches!(
                &sub.spec.dead_letter,
                redrive_store::DeadLetterDestination::Queue { name: target } if target == name
            );
            if forwards_here {
                dependants.push(format!("{}/{}", sub.topic, sub.name));
            }
        }
        if dependants.is_empty() {
            return Ok(());
        }
        Err(BrokerError::QueueIsDeadLetterTarget {
            queue: name.to_string(),
            dependants,
        })
    }

    /// A subscription's queue (`<topic>.<subscription>`) is managed with its subscription:
    /// deleting it or changing its policy through the queue API would leave the
    /// subscription without its queue or with rules it did not set.
    async fn refuse_subscription_queue(&self, name: &EntityName) -> BrokerResult<()> {
        let s = name.as_str();
        for (i, _) in s.match_indices('.') {
            let (Ok(topic), Ok(sub)) = (
                s[..i].parse::<EntityName>(),
                s[i + 1..].parse::<EntityName>(),
            ) else {
                continue;
            };
            match self.inner.store.get_subscription(&topic, &sub).await {
                Ok(rec) if rec.queue == *name => {
                    return Err(BrokerError::invalid(
                        "name",
                        format!(
                            "queue \"{name}\" belongs to subscription \"{sub}\" of topic \"{topic}\"; \
                             manage it through the subscription"
                        ),
                    ));
                }
                Ok(_)
                | Err(
                    redrive_store::StoreError::TopicNotFound { .. }
                    | redrive_store::StoreError::SubscriptionNotFound { .. },
                ) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    async fn check_policy(&self, name: &EntityName, policy: &QueuePolicy) -> BrokerResult<()> {
        policy.validate()?;
        if let Some(target) = &policy.dead_letter_queue {
            if target == name {
                return Err(BrokerError::invalid(
                    "dead_letter_queue",
                    "a queue cannot be its own dead-letter queue",
                ));
            }
            match self.inner.store.get_queue(target).await {
                Ok(_) => {}
                Err(redrive_store::StoreError::QueueNotFound { .. }) => {
                    return Err(BrokerError::invalid(
                        "dead_letter_queue",
                        format!("queue \"{target}\" does not exist"),
                    ));
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// One queue with its counts.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %name))]
    pub async fn get_queue(&self, name: &str) -> BrokerResult<QueueView> {
        let name: EntityName = name.parse()?;
        let record = self.inner.store.get_queue(&name).await?;
        self.view(record).await
    }

    /// The stored policy of a queue.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %name))]
    pub async fn queue_record(&self, name: &str) -> BrokerResult<QueueRecord> {
        let name: EntityName = name.parse()?;
        Ok(self.inner.store.get_queue(&name).await?)
    }

    /// A page of a queue's policy history, newest version first: the versions below
    /// `before` (from the newest when `None`), at most `limit`. `InvalidRequest` naming
    /// the field for a `before` that is no version or a `limit` out of 1 to
    /// [`MAX_POLICY_VERSION_PAGE`].
    /// `QueueNotFound` for an unknown queue.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %name))]
    pub async fn policy_versions(
        &self,
        name: &str,
        before: Option<u64>,
        limit: u32,
    ) -> BrokerResult<Vec<PolicyVersionRecord>> {
        let name: EntityName = name.parse()?;
        if before.is_some_and(|b| b == 0 || i64::try_from(b).is_err()) {
            return Err(BrokerError::invalid(
                "before",
                "must be a policy version (from 1)",
            ));
        }
        if limit == 0 || limit > MAX_POLICY_VERSION_PAGE {
            return Err(BrokerError::invalid(
                "limit",
                format!("must be between 1 and {MAX_POLICY_VERSION_PAGE}"),
            ));
        }
        Ok(self
            .inner
            .store
            .list_policy_versions(&name, before, limit)
            .await?)
    }

    async fn view(&self, record: QueueRecord) -> BrokerResult<QueueView> {
        let now = self.now();
        let counts = self.inner.store.queue_counts(&record.name, now).await?;
        let oldest_age_ms = counts
            .oldest_enqueued_at
            .map(|t| u64::try_from(now.since(t).as_millis()).unwrap_or(u64::MAX));
        Ok(QueueView {
            record,
            counts,
            oldest_age_ms,
        })
    }

    /// Every queue with its counts.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn list_queues(&self) -> BrokerResult<Vec<QueueView>> {
        let records = self.inner.store.list_queues().await?;
        let mut out = Vec::with_capacity(records.len());
        for r in records {
            out.push(self.view(r).await?);
        }
        Ok(out)
    }

    /// Deletes a queue; without `force` only when it holds no messages or live dead
    /// letters.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %name, force))]
    pub async fn delete_queue(&self, name: &str, force: bool, actor: &Actor) -> BrokerResult<()> {
        let name: EntityName = name.parse()?;
        let result = async {
            self.refuse_subscription_queue(&name).await?;
            if !force {
                self.refuse_dead_letter_target(&name).await?;
            }
            Ok(self.inner.store.delete_queue(&name, force).await?)
        }
        .await;
        let targets = if force {
            vec!["force".to_owned()]
        } else {
            Vec::new()
        };
        self.audited(actor, "queue.delete", Some(name.as_str()), targets, result)
            .await?;
        self.inner.waiters.forget(name.as_str());
        self.inner.metrics.forget_queue(name.as_str());
        self.forget_series(name.as_str());
        tracing::info!(queue = %name, force, "queue deleted");
        Ok(())
    }

    /// Prometheus text for `/metrics`.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn render_metrics(&self) -> BrokerResult<String> {
        let views = self.list_queues().await?;
        let gauges: Vec<_> = views
            .into_iter()
            .map(|v| (v.record.name.to_string(), v.counts, v.oldest_age_ms))
            .collect();
        let mut out = self.inner.metrics.render(&gauges);
        out.push_str(&self.render_topic_metrics());
        let flag = self.replay_settings().flag_after_failures;
        let replay = self.inner.store.replay_counts(None, flag).await?;
        crate::metrics::render_replay(&mut out, &replay);
        self.cases().render_case_metrics(&mut out).await?;
        self.render_plan_metrics(&mut out).await?;
        self.render_series_metrics(&mut out);
        let head = self.inner.store.audit_head().await?;
        crate::metrics::render_audit_head(&mut out, head.as_ref());
        Ok(out)
    }
}
