//! The background sweep: applies lock expiries and message expiries across all queues on
//! the injected clock, so counts and metrics stay true even for queues nobody receives
//! from. (Each queue's receive path applies its own due expiries first as well, so
//! correctness of delivery does not wait for the sweep.)
//!
//! When several processes share one store, the sweep runs on one of them at a time: each
//! tick first takes or renews the store lease [`SWEEP_LEASE`]; a process that does not
//! hold it skips the tick. A holder that dies stops renewing, and another process takes
//! the lease over once it runs out (at most the lease time-to-live later).
//!
//! Every tick, on every process, also resumes the message move tasks whose runner stopped
//! ([`Broker::resume_move_tasks`]).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::Broker;
use crate::worker::{LeasedWorker, Next, Pass, Timing};

/// Rows handled per sweep pass.
const SWEEP_BATCH: u32 = 1_000;

/// Name of the store lease that elects the sweeping process.
pub const SWEEP_LEASE: &str = "sweeper";

/// Default lease time-to-live: how long after a holder dies another process takes over.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(5);

/// The sweep worker.
pub struct Sweeper {
    broker: Broker,
    interval: Duration,
    lease_ttl: Duration,
    /// When the next audit retention pass is due (milliseconds of the broker's clock).
    next_prune_ms: AtomicI64,
    /// When the next dead-letter retention pass is due.
    next_retention_ms: AtomicI64,
}

/// How often the lease holder deletes dead-letter records past their entity's retention.
pub const DEAD_LETTER_RETENTION_INTERVAL: Duration = Duration::from_secs(60);

/// Records deleted per retention batch.
const RETENTION_BATCH: u32 = 1_000;

/// How often the lease holder removes audit entries past their retention.
pub const AUDIT_PRUNE_INTERVAL: Duration = Duration::from_secs(3_600);

impl Sweeper {
    /// A sweeper running every `interval` of the broker's clock, under a lease of
    /// [`DEFAULT_LEASE_TTL`].
    pub fn new(broker: Broker, interval: Duration) -> Self {
        Sweeper {
            broker,
            interval,
            lease_ttl: DEFAULT_LEASE_TTL,
            next_prune_ms: AtomicI64::new(i64::MIN),
            next_retention_ms: AtomicI64::new(i64::MIN),
        }
    }

    /// Sets the lease time-to-live (kept above the interval, so a live holder renews in
    /// time).
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl.max(self.interval * 2);
        self
    }

    /// Sweeps until `cancel` fires. A storage error is logged and retried at the next tick;
    /// it never ends the loop.
    pub async fn run(self, cancel: CancellationToken) {
        LeasedWorker::new(&self.broker, SWEEP_LEASE)
            .run(self, cancel)
            .await;
    }

    /// One tick: sweeps if this process holds (or takes) the lease; says whether it did.
    #[cfg(test)]
    async fn tick(&mut self) -> crate::BrokerResult<bool> {
        let worker = LeasedWorker::new(&self.broker, SWEEP_LEASE);
        match worker.look(self).await? {
            None => Ok(false),
            Some(pass) => pass.map(|_| true),
        }
    }
}

impl Pass for Sweeper {
    fn timing(&self) -> Timing {
        Timing {
            lease_ttl: self.lease_ttl,
            poll: self.interval,
        }
    }

    /// Every node, lease or not: move tasks whose runner stopped are resumed here.
    async fn every_look(&mut self) {
        if let Err(e) = self.broker.resume_move_tasks().await {
            tracing::warn!(error = %e, "resuming message move tasks failed; retrying at the next tick");
        }
    }

    /// The sweep, and the audit and dead-letter retention when they are due.
    async fn pass(&mut self) -> crate::BrokerResult<Next> {
        self.broker.sweep_once().await?;
        let now = self.broker.now();
        if now.as_millis() >= self.next_prune_ms.load(Ordering::Relaxed) {
            let every = i64::try_from(AUDIT_PRUNE_INTERVAL.as_millis()).unwrap_or(i64::MAX);
            self.next_prune_ms
                .store(now.as_millis().saturating_add(every), Ordering::Relaxed);
            self.broker.prune_audit().await?;
        }
        if now.as_millis() >= self.next_retention_ms.load(Ordering::Relaxed) {
            let every =
                i64::try_from(DEAD_LETTER_RETENTION_INTERVAL.as_millis()).unwrap_or(i64::MAX);
            self.next_retention_ms
                .store(now.as_millis().saturating_add(every), Ordering::Relaxed);
            self.broker.expire_dead_letters().await?;
        }
        Ok(Next::Idle)
    }
}

impl Broker {
    /// The retention rule of every entity: deletes dead-letter records of every area older
    /// than their queue's (or subscription's) `dead_letter_retention_ms`, in batches, each
    /// logged and counted. A retention of 0 keeps records forever. Answers how many went.
    pub async fn expire_dead_letters(&self) -> crate::BrokerResult<u64> {
        let now = self.now();
        let rules: Vec<redrive_store::RetentionRule> = self
            .inner
            .store
            .list_queues()
            .await?
            .into_iter()
            .filter(|q| q.policy.dead_letter_retention_ms > 0)
            .map(|q| redrive_store::RetentionRule {
                // A record whose age has reached the retention goes: dead-lettered at or
                // before `now - retention`.
                before: now.plus_millis(
                    1 - i64::try_from(q.policy.dead_letter_retention_ms).unwrap_or(i64::MAX),
                ),
                queue: q.name,
            })
            .collect();
        if rules.is_empty() {
            return Ok(0);
        }
        let mut total = 0;
        loop {
            let deleted = self
                .inner
                .store
                .expire_dead_letters(&rules, RETENTION_BATCH)
                .await?;
            let n: u64 = deleted.iter().map(|(_, n)| n).sum();
            for (queue, n) in &deleted {
                self.inner.metrics.add(
                    crate::metrics::Counter::DeadLettersExpired,
                    queue.as_str(),
                    *n,
                );
                tracing::info!(queue = %queue, records = n,
                    "dead-letter records past their retention deleted");
            }
            total += n;
            if n < u64::from(RETENTION_BATCH) {
                return Ok(total);
            }
        }
    }

    /// One sweep: every due lock expiry and message expiry, in passes of a bounded size.
    pub async fn sweep_once(&self) -> crate::BrokerResult<()> {
        loop {
            let out = self.inner.store.sweep(self.now(), SWEEP_BATCH).await?;
            self.apply_effects(&out.effects);
            if !out.more {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use redrive_core::{ManualClock, QueuePolicy, Timestamp};
    use redrive_store_sqlite::{SqliteOptions, SqliteStore};

    use super::*;
    use crate::{Outgoing, ReceiveOptions};

    #[tokio::test]
    async fn one_node_sweeps_at_a_time_and_another_takes_over_when_it_stops() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn redrive_store::Store> = Arc::new(
            SqliteStore::open(&dir.path().join("r.db"), SqliteOptions::default()).unwrap(),
        );
        let clock = ManualClock::new(Timestamp(1_800_000_000_000));
        let a = Broker::new(store.clone(), Arc::new(clock.clone()));
        let b = Broker::new(store.clone(), Arc::new(clock.clone()));
        let mut sweep_a =
            Sweeper::new(a.clone(), Duration::from_secs(1)).with_lease_ttl(Duration::from_secs(5));
        let mut sweep_b =
            Sweeper::new(b.clone(), Duration::from_secs(1)).with_lease_ttl(Duration::from_secs(5));

        a.create_queue("q", QueuePolicy::default()).await.unwrap();
        let msg = Outgoing {
            body: b"x".to_vec(),
            ..Outgoing::default()
        };
        a.send("q", vec![msg]).await.unwrap();
        let opts = ReceiveOptions {
            max: 1,
            lock_ms: Some(1_000),
            ..ReceiveOptions::default()
        };
        assert_eq!(a.receive("q", opts).await.unwrap().len(), 1);

        assert!(
            sweep_a.tick().await.unwrap(),
            "the first node takes the lease"
        );
        clock.advance(Duration::from_secs(1));
        assert!(
            !sweep_b.tick().await.unwrap(),
            "the other node does not sweep"
        );
        // The counts show the expired lock released whoever sweeps (they read the lock
        // time); the sweep itself is told by the node's lock-expiry counter.
        let swept = |text: String| {
            text.lines().any(|l| {
                l.starts_with("redrive_locks_expired_total{")
                    && l.contains("queue=\"q\"")
                    && l.ends_with(" 1")
            })
        };
        assert!(
            !swept(b.render_metrics().await.unwrap()),
            "nothing was swept by b"
        );
        assert!(sweep_a.tick().await.unwrap());
        assert!(
            swept(a.render_metrics().await.unwrap()),
            "a swept the expired lock"
        );
        assert_eq!(a.get_queue("q").await.unwrap().counts.active, 1);

        // a dies: it renews no more. b takes over once the lease has run out.
        clock.advance(Duration::from_millis(4_999));
        assert!(!sweep_b.tick().await.unwrap());
        clock.advance(Duration::from_millis(1));
        assert!(
            sweep_b.tick().await.unwrap(),
            "b takes over after the lease time-to-live"
        );
        assert!(
            !sweep_a.tick().await.unwrap(),
            "and a, back, does not sweep beside it"
        );
    }

    #[tokio::test]
    async fn the_lease_holder_removes_audit_entries_past_retention_and_records_it() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn redrive_store::Store> = Arc::new(
            SqliteStore::open(&dir.path().join("r.db"), SqliteOptions::default()).unwrap(),
        );
        let clock = ManualClock::new(Timestamp(1_800_000_000_000));
        let b = Broker::with_access(
            store,
            Arc::new(clock.clone()),
            crate::AccessSettings {
                audit_retention_days: 1,
                ..crate::AccessSettings::default()
            },
        );
        let actor = crate::Actor::system("test");
        for i in 0..3 {
            b.audit(
                &actor,
                "message.peek",
                Some("q"),
                vec![format!("m{i}")],
                "ok",
            )
            .await
            .unwrap();
        }
        let mut sweeper = Sweeper::new(b.clone(), Duration::from_secs(1));
        // Nothing is old enough yet.
        sweeper.tick().await.unwrap();
        let all = |b: Broker| async move {
            b.list_audit(&redrive_store::AuditQuery {
                limit: redrive_store::MAX_AUDIT_PAGE,
                ..redrive_store::AuditQuery::default()
            })
            .await
            .unwrap()
        };
        assert_eq!(all(b.clone()).await.len(), 3);
        clock.advance(Duration::from_secs(2 * 86_400));
        b.audit(&actor, "message.peek", Some("q"), vec!["new".into()], "ok")
            .await
            .unwrap();
        sweeper.tick().await.unwrap();
        let left = all(b.clone()).await;
        let actions: Vec<&str> = left.iter().map(|e| e.fields.action.as_str()).collect();
        assert_eq!(
            actions,
            ["message.peek", redrive_core::audit::PRUNED_ACTION]
        );
        assert_eq!(left[0].fields.targets, ["new"]);
        assert!(left[1].fields.targets.contains(&"through_seq=3".to_owned()));
        assert_eq!(b.verify_audit().await.unwrap().1.map(|s| s.entries), Ok(2));
    }
}
