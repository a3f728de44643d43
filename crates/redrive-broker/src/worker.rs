//! The one shape of every background loop that runs on one node at a time: the
//! [`Sweeper`](crate::Sweeper), the [`Replayer`](crate::Replayer), the
//! [`CaseWorker`](crate::CaseWorker) and the [`PlanWorker`](crate::PlanWorker).
//!
//! A [`LeasedWorker`] looks again and again. Each look takes or renews its store lease
//! (`Store::try_lease` under this node's id); when the lease is held it runs one pass of
//! its [`Pass`], which answers when it wants to look again ([`Next`]). Between looks it
//! waits on the pass's wake-up, the injected clock (never longer than the pass's longest
//! sleep, and never longer than half the lease, so a live holder renews in time), or
//! cancellation. A lease or pass error is logged and retried at the next look; it never
//! ends the loop.
//!
//! Every finished pass (whatever its outcome) adds one to the worker's pass counter, a
//! `tokio::sync::watch` channel per lease name: [`Broker::passes`] answers a receiver, so
//! that a test waits for "the next pass finished" instead of polling.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use redrive_core::Timestamp;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::context::Context;
use crate::{Broker, BrokerResult};

/// When a pass wants the next look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// More to do now: look again at once (after letting other tasks run).
    Now,
    /// Look again by this time at the latest (sooner when woken or at the longest sleep).
    By(Timestamp),
    /// Nothing due: look again when woken or after the longest sleep.
    Idle,
}

impl Next {
    /// The sooner of two answers (two passes run side by side, say).
    pub(crate) fn min(self, other: Next) -> Next {
        match (self, other) {
            (Next::Now, _) | (_, Next::Now) => Next::Now,
            (Next::By(a), Next::By(b)) => Next::By(a.min(b)),
            (Next::By(t), Next::Idle) | (Next::Idle, Next::By(t)) => Next::By(t),
            (Next::Idle, Next::Idle) => Next::Idle,
        }
    }
}

/// How long a worker's lease holds and how long it sleeps at most, read at every look (the
/// settings may change while it runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timing {
    /// The lease time-to-live: how long after this node dies another takes over.
    pub(crate) lease_ttl: Duration,
    /// The longest sleep between two looks (bounded by half the lease as well).
    pub(crate) poll: Duration,
}

impl Timing {
    /// The longest wait between two looks: the poll interval, at most half the lease.
    fn longest_sleep(&self) -> Duration {
        self.poll.min(self.lease_ttl / 2)
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.lease_ttl.as_millis()).unwrap_or(u64::MAX)
    }
}

/// What one worker does: its pass, its timing and its wake-up.
pub(crate) trait Pass: Send {
    /// The lease and the longest sleep, read before each look.
    fn timing(&self) -> Timing;

    /// What wakes the worker before its deadline (none: only the clock).
    fn wake(&self) -> Option<&Notify> {
        None
    }

    /// Runs at every look on every node, lease or not, before the lease is taken.
    fn every_look(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }

    /// One pass, run while this node holds the lease.
    fn pass(&mut self) -> impl Future<Output = BrokerResult<Next>> + Send;
}

/// The pass counters of a broker's workers, one `watch` channel per lease name.
#[derive(Default)]
pub(crate) struct PassCounters {
    senders: Mutex<BTreeMap<String, watch::Sender<u64>>>,
}

impl PassCounters {
    /// The counter of `lease`, created at zero on first use.
    fn sender(&self, lease: &str) -> watch::Sender<u64> {
        self.senders
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(lease.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .clone()
    }
}

impl Broker {
    /// The count of finished passes of the worker running under the store lease `lease`
    /// on this node ([`SWEEP_LEASE`](crate::SWEEP_LEASE),
    /// [`REPLAY_LEASE`](crate::REPLAY_LEASE), [`CASES_LEASE`](crate::cases::CASES_LEASE),
    /// [`PLANS_LEASE`](crate::PLANS_LEASE)): a pass adds one
    /// when it ends, whatever its outcome; a look that did not hold the lease adds
    /// nothing. Waiting on `changed()` waits for the next pass to finish.
    pub fn passes(&self, lease: &str) -> watch::Receiver<u64> {
        self.inner.passes.sender(lease).subscribe()
    }
}

/// A loop that runs its pass while this node holds the store lease `lease`.
pub(crate) struct LeasedWorker {
    lease: &'static str,
    ctx: Context,
    passes: watch::Sender<u64>,
}

impl LeasedWorker {
    /// A worker of `broker` under the store lease `lease`.
    pub(crate) fn new(broker: &Broker, lease: &'static str) -> Self {
        LeasedWorker {
            lease,
            ctx: broker.inner.ctx.clone(),
            passes: broker.inner.passes.sender(lease),
        }
    }

    /// One look: the pass's every-node step, then the lease; the pass runs when it is held.
    /// Answers `None` when another node holds the lease, or the pass's outcome. An error
    /// taking the lease is the `Err`.
    pub(crate) async fn look<P: Pass>(
        &self,
        pass: &mut P,
    ) -> BrokerResult<Option<BrokerResult<Next>>> {
        pass.every_look().await;
        let timing = pass.timing();
        let held = self
            .ctx
            .store
            .try_lease(
                self.lease,
                &self.ctx.node_id,
                timing.ttl_ms(),
                self.ctx.now(),
            )
            .await?;
        if !held {
            return Ok(None);
        }
        let span = tracing::debug_span!("worker_pass", lease = self.lease);
        let out = pass.pass().instrument(span).await;
        self.passes.send_modify(|n| *n += 1);
        Ok(Some(out))
    }

    /// Looks until `cancel` fires. Errors are logged and retried at the next look; they
    /// never end the loop.
    pub(crate) async fn run<P: Pass>(self, mut pass: P, cancel: CancellationToken) {
        loop {
            if cancel.is_cancelled() {
                return;
            }
            let next = match self.look(&mut pass).await {
                Ok(Some(Ok(next))) => next,
                Ok(Some(Err(e))) => {
                    tracing::warn!(lease = self.lease, error = %e, "worker pass failed; retrying");
                    Next::Idle
                }
                Ok(None) => Next::Idle,
                Err(e) => {
                    tracing::warn!(lease = self.lease, error = %e,
                        "worker lease could not be taken; retrying");
                    Next::Idle
                }
            };
            let now = self.ctx.now();
            let mut until = now.plus(pass.timing().longest_sleep());
            match next {
                Next::Now => {
                    tokio::task::yield_now().await;
                    continue;
                }
                Next::By(t) => until = until.min(t),
                Next::Idle => {}
            }
            if until <= now {
                tokio::task::yield_now().await;
                continue;
            }
            let woken = async {
                match pass.wake() {
                    Some(wake) => wake.notified().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = woken => {}
                () = self.ctx.clock.sleep_until(until) => {}
                () = cancel.cancelled() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use redrive_core::{Clock as _, ManualClock, Timestamp};
    use redrive_store_sqlite::{SqliteOptions, SqliteStore};
    use tokio::sync::Notify;
    use tokio_util::sync::CancellationToken;

    use super::{LeasedWorker, Next, Pass, Timing};
    use crate::{Broker, BrokerResult};

    const T0: Timestamp = Timestamp(1_800_000_000_000);
    const LEASE: &str = "test_worker";

    /// A pass that counts its runs and answers the next look from a script (then `Idle`).
    struct Probe {
        runs: Arc<AtomicU32>,
        wake: Arc<Notify>,
        script: Vec<Next>,
    }

    impl Pass for Probe {
        fn timing(&self) -> Timing {
            Timing {
                lease_ttl: Duration::from_secs(600),
                poll: Duration::from_secs(60),
            }
        }

        fn wake(&self) -> Option<&Notify> {
            Some(&self.wake)
        }

        async fn pass(&mut self) -> BrokerResult<Next> {
            self.runs.fetch_add(1, Ordering::SeqCst);
            Ok(if self.script.is_empty() {
                Next::Idle
            } else {
                self.script.remove(0)
            })
        }
    }

    fn probe(script: Vec<Next>) -> (Probe, Arc<AtomicU32>, Arc<Notify>) {
        let runs = Arc::new(AtomicU32::new(0));
        let wake = Arc::new(Notify::new());
        let p = Probe {
            runs: runs.clone(),
            wake: wake.clone(),
            script,
        };
        (p, runs, wake)
    }

    struct Fixture {
        store: Arc<dyn redrive_store::Store>,
        clock: ManualClock,
        _dir: tempfile::TempDir,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn redrive_store::Store> = Arc::new(
            SqliteStore::open(&dir.path().join("r.db"), SqliteOptions::default()).unwrap(),
        );
        Fixture {
            store,
            clock: ManualClock::new(T0),
            _dir: dir,
        }
    }

    impl Fixture {
        fn broker(&self) -> Broker {
            Broker::new(self.store.clone(), Arc::new(self.clock.clone()))
        }
    }

    #[tokio::test]
    async fn a_pass_runs_while_the_lease_is_held_and_not_while_another_holds_it() {
        let f = fixture();
        let (a, b) = (f.broker(), f.broker());
        let (mut pa, runs_a, _) = probe(Vec::new());
        let (mut pb, runs_b, _) = probe(Vec::new());
        let (wa, wb) = (LeasedWorker::new(&a, LEASE), LeasedWorker::new(&b, LEASE));

        let look = |w: &'static str| {
            move |o: BrokerResult<Option<BrokerResult<Next>>>| {
                o.unwrap_or_else(|e| panic!("{w}: lease error {e}"))
                    .map(|p| p.unwrap_or_else(|e| panic!("{w}: pass error {e}")))
            }
        };
        let (la, lb) = (look("a"), look("b"));
        assert_eq!(la(wa.look(&mut pa).await), Some(Next::Idle));
        assert_eq!(
            runs_a.load(Ordering::SeqCst),
            1,
            "a holds the lease and ran"
        );
        assert_eq!(lb(wb.look(&mut pb).await), None);
        assert_eq!(runs_b.load(Ordering::SeqCst), 0, "b does not run beside a");
        assert_eq!(
            *b.passes(LEASE).borrow(),
            0,
            "a look without the lease is no pass"
        );

        // a stops renewing: b takes over once the lease has run out, and a stays out.
        f.clock.advance(Duration::from_secs(599));
        assert_eq!(lb(wb.look(&mut pb).await), None);
        f.clock.advance(Duration::from_secs(1));
        assert_eq!(lb(wb.look(&mut pb).await), Some(Next::Idle));
        assert_eq!(la(wa.look(&mut pa).await), None);
        assert_eq!(runs_a.load(Ordering::SeqCst), 1);
        assert_eq!(runs_b.load(Ordering::SeqCst), 1);
        assert_eq!(*a.passes(LEASE).borrow(), 1);
        assert_eq!(*b.passes(LEASE).borrow(), 1);
    }

    #[tokio::test]
    async fn a_wake_runs_a_pass_before_the_clock_deadline_and_cancellation_ends_the_loop() {
        let f = fixture();
        let broker = f.broker();
        let (p, runs, wake) = probe(Vec::new());
        let mut passes = broker.passes(LEASE);
        let cancel = CancellationToken::new();
        let run = tokio::spawn(LeasedWorker::new(&broker, LEASE).run(p, cancel.clone()));

        passes.wait_for(|n| *n == 1).await.unwrap();
        wake.notify_one();
        passes.wait_for(|n| *n == 2).await.unwrap();
        assert_eq!(
            f.clock.now(),
            T0,
            "the wake, not the clock, ran the second pass"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 2);

        // Without a wake, the next pass waits for the longest sleep on the clock.
        f.clock.advance(Duration::from_secs(60));
        passes.wait_for(|n| *n == 3).await.unwrap();

        cancel.cancel();
        run.await.expect("the loop ends when cancelled");
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert_eq!(*passes.borrow(), 3);
    }

    #[tokio::test]
    async fn the_signal_counts_passes_more_to_do_runs_at_once_and_a_deadline_is_kept() {
        let f = fixture();
        let broker = f.broker();
        let soon = T0.plus(Duration::from_secs(5));
        let (p, runs, _) = probe(vec![Next::Now, Next::Now, Next::By(soon)]);
        let mut passes = broker.passes(LEASE);
        let cancel = CancellationToken::new();
        let run = tokio::spawn(LeasedWorker::new(&broker, LEASE).run(p, cancel.clone()));

        // Three passes at once (two said "more now"), then a wait until `soon`.
        passes.wait_for(|n| *n == 3).await.unwrap();
        assert_eq!(f.clock.now(), T0);
        f.clock.advance(Duration::from_secs(4));
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        assert_eq!(*passes.borrow(), 3, "not before the pass's deadline");
        f.clock.advance(Duration::from_secs(1));
        passes.wait_for(|n| *n == 4).await.unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 4);

        cancel.cancel();
        run.await.unwrap();
    }
}
