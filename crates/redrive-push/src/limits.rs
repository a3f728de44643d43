//! Bounded push concurrency: at most `per_subscription` requests in flight for one
//! subscription and at most `per_endpoint` for one endpoint (`host:port`, shared by every
//! subscription pointing at it), as tokio semaphores whose permits the delivering task
//! holds until its request is over.
//!
//! The registry stays bounded: an entry nobody holds or waits on is equivalent to a fresh
//! one, so such entries are pruned (amortised, whenever the registry has doubled since the
//! last pruning), and [`ConcurrencyLimits::remove_subscription`] drops a deleted
//! subscription's entry at once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The registry of per-subscription and per-endpoint semaphores. Cheap to share
/// (`Arc<ConcurrencyLimits>`); no global state.
#[derive(Debug)]
pub struct ConcurrencyLimits {
    per_subscription: usize,
    per_endpoint: usize,
    inner: Mutex<Registry>,
}

#[derive(Debug, Default)]
struct Registry {
    subscriptions: HashMap<String, Arc<Semaphore>>,
    endpoints: HashMap<String, Arc<Semaphore>>,
    /// Entry count after the last pruning; the next one runs at twice this.
    pruned_at: usize,
}

/// A semaphore is idle when only the registry holds it: every permit holder and every
/// waiter in `acquire_owned` keeps its own `Arc`.
fn prune(map: &mut HashMap<String, Arc<Semaphore>>) {
    map.retain(|_, s| Arc::strong_count(s) > 1);
}

impl ConcurrencyLimits {
    /// Limits of `per_subscription` and `per_endpoint` concurrent requests (0 counts as 1).
    pub fn new(per_subscription: usize, per_endpoint: usize) -> Self {
        ConcurrencyLimits {
            per_subscription: per_subscription.clamp(1, Semaphore::MAX_PERMITS),
            per_endpoint: per_endpoint.clamp(1, Semaphore::MAX_PERMITS),
            inner: Mutex::new(Registry::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        // The registry is consistent after any panic (single map operations), so a
        // poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a slot of `subscription` and then of `endpoint_key` (always in this
    /// order, so two acquirers never hold one each while waiting for the other). Hold both
    /// permits until the request is over.
    pub async fn acquire(
        &self,
        subscription: &str,
        endpoint_key: &str,
    ) -> (OwnedSemaphorePermit, OwnedSemaphorePermit) {
        let (sub, endpoint) = {
            let mut r = self.lock();
            let total = r.subscriptions.len() + r.endpoints.len();
            if total >= (2 * r.pruned_at).max(64) {
                prune(&mut r.subscriptions);
                prune(&mut r.endpoints);
                r.pruned_at = r.subscriptions.len() + r.endpoints.len();
            }
            let sub = r
                .subscriptions
                .entry(subscription.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_subscription)))
                .clone();
            let endpoint = r
                .endpoints
                .entry(endpoint_key.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_endpoint)))
                .clone();
            (sub, endpoint)
        };
        // The semaphores are never closed, so acquiring cannot fail; should that change,
        // a closed semaphore is replaced by an unbounded slot rather than a panic.
        let sub_permit = match sub.acquire_owned().await {
            Ok(p) => p,
            Err(_) => unbounded_permit(),
        };
        let endpoint_permit = match endpoint.acquire_owned().await {
            Ok(p) => p,
            Err(_) => unbounded_permit(),
        };
        (sub_permit, endpoint_permit)
    }

    /// Forgets a removed subscription's entry. Requests still in flight keep their permits
    /// (on the old semaphore) until they finish.
    pub fn remove_subscription(&self, subscription: &str) {
        self.lock().subscriptions.remove(subscription);
    }

    /// Drops every idle entry now.
    pub fn prune(&self) {
        let mut r = self.lock();
        prune(&mut r.subscriptions);
        prune(&mut r.endpoints);
        r.pruned_at = r.subscriptions.len() + r.endpoints.len();
    }

    /// The number of (subscription, endpoint) entries held.
    pub fn len(&self) -> (usize, usize) {
        let r = self.lock();
        (r.subscriptions.len(), r.endpoints.len())
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == (0, 0)
    }
}

fn unbounded_permit() -> OwnedSemaphorePermit {
    let s = Arc::new(Semaphore::new(1));
    match s.try_acquire_owned() {
        Ok(p) => p,
        // A fresh one-permit semaphore always has its permit.
        Err(_) => unreachable!("a fresh semaphore has a permit"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_subscription_never_exceeds_its_limit() {
        let limits = ConcurrencyLimits::new(2, 10);
        let a = limits.acquire("s", "h:80").await;
        let b = limits.acquire("s", "h:81").await;
        let third = tokio::time::timeout(Duration::from_millis(0), limits.acquire("s", "h:82"));
        assert!(third.await.is_err(), "a third request waits");
        // Another subscription is not affected.
        let _other = limits.acquire("t", "h:83").await;
        drop(a);
        let _c = limits.acquire("s", "h:82").await;
        drop(b);
    }

    #[tokio::test]
    async fn an_endpoint_is_shared_across_subscriptions() {
        let limits = ConcurrencyLimits::new(10, 1);
        let held = limits.acquire("s1", "h:80").await;
        let waiting = tokio::time::timeout(Duration::from_millis(0), limits.acquire("s2", "h:80"));
        assert!(waiting.await.is_err());
        drop(held);
        let _ok = limits.acquire("s2", "h:80").await;
    }

    #[tokio::test]
    async fn idle_entries_are_pruned_and_removed_subscriptions_forgotten() {
        let limits = ConcurrencyLimits::new(1, 1);
        for i in 0..1000 {
            let _p = limits.acquire(&format!("s{i}"), &format!("h:{i}")).await;
        }
        let (subs, endpoints) = limits.len();
        assert!(subs <= 130 && endpoints <= 130, "{subs} {endpoints}");
        let held = limits.acquire("kept", "h:1").await;
        limits.prune();
        assert_eq!(limits.len(), (1, 1), "only the entries in use remain");
        limits.remove_subscription("kept");
        assert_eq!(limits.len(), (0, 1));
        drop(held);
        limits.prune();
        assert!(limits.is_empty());
    }
}
