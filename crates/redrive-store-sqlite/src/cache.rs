//! The store's one cache of queue records, shared by the writer thread and the read
//! path.
//!
//! Only this process writes the file, so the cache can be exact: it holds committed
//! records only. The writer keeps what an open transaction loads or changes apart
//! ([`TxQueues`]) — a job sees its transaction's own changes, readers never see them —
//! and only once the group's `COMMIT` returned, before any caller is answered, forgets
//! the queues the transaction changed and publishes what it loaded. A job rolled back
//! drops what its transaction loaded (it may reflect the job's undone changes); a
//! transaction rolled back whole drops everything it held; a poisoned store forgets
//! every record. A read-path fill that raced a commit which changed a queue is not
//! cached: each such commit moves the generation. The cache saves a read-pool round
//! trip (a thread hop) on every send and receive, and parsing a policy on every write.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use redrive_store::skeleton::entities::QueueRow;

/// Most queues cached; past it the cache starts over (bounded memory whatever the
/// number of queues).
const LIMIT: usize = 10_000;

/// Committed queue records by name.
#[derive(Debug, Default)]
pub(crate) struct QueueCache {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Moves whenever a commit changed or removed a queue.
    generation: u64,
    queues: HashMap<String, Arc<QueueRow>>,
}

impl State {
    fn insert(&mut self, name: String, q: Arc<QueueRow>) {
        if self.queues.len() >= LIMIT {
            self.queues.clear();
        }
        self.queues.insert(name, q);
    }
}

impl QueueCache {
    fn state(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the state consistent, so a poisoned lock is usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The committed record of `name`, if cached.
    pub(crate) fn get(&self, name: &str) -> Option<Arc<QueueRow>> {
        self.state().queues.get(name).cloned()
    }

    /// The generation to pass to [`QueueCache::fill`], taken before reading.
    pub(crate) fn generation(&self) -> u64 {
        self.state().generation
    }

    /// Caches a record the read path read after taking `generation`, unless a commit
    /// changed a queue since (the record may predate it).
    pub(crate) fn fill(&self, generation: u64, q: Arc<QueueRow>) {
        let mut state = self.state();
        if state.generation == generation {
            state.insert(q.name.to_string(), q);
        }
    }

    /// After the commit of a transaction: forgets the queues it changed and caches the
    /// records it loaded (as its end left them, hence as committed).
    pub(crate) fn commit(&self, tx: &mut TxQueues) {
        // The common group (sends, receives, settlements of cached queues) has nothing to
        // publish: it does not take the lock.
        if tx.changed.is_empty() && tx.loaded.is_empty() {
            return;
        }
        let mut state = self.state();
        if !tx.changed.is_empty() {
            state.generation += 1;
            for name in tx.changed.drain() {
                state.queues.remove(&name);
            }
        }
        for (name, q) in tx.loaded.drain() {
            state.insert(name, q);
        }
    }

    /// Forgets every record (the state on disk is unknown).
    pub(crate) fn clear(&self) {
        let mut state = self.state();
        state.generation += 1;
        state.queues.clear();
    }
}

/// What the open transaction loaded and changed, kept from readers until its commit.
#[derive(Debug, Default)]
pub(crate) struct TxQueues {
    /// Records loaded inside the transaction (after any change of theirs in it).
    loaded: HashMap<String, Arc<QueueRow>>,
    /// Queues the transaction changed or removed: their cached records are stale for it.
    changed: HashSet<String>,
}

impl TxQueues {
    /// The record of `name` as the transaction sees it, if known without reading: loaded
    /// by it, or committed and not changed by it.
    pub(crate) fn get(&self, cache: &QueueCache, name: &str) -> Option<Arc<QueueRow>> {
        if let Some(q) = self.loaded.get(name) {
            return Some(Arc::clone(q));
        }
        if self.changed.contains(name) {
            return None;
        }
        cache.get(name)
    }

    /// Remembers a record the transaction read.
    pub(crate) fn loaded(&mut self, q: Arc<QueueRow>) {
        self.loaded.insert(q.name.to_string(), q);
    }

    /// Marks `name` changed or removed by the transaction.
    pub(crate) fn changed(&mut self, name: &str) {
        self.loaded.remove(name);
        self.changed.insert(name.to_owned());
    }

    /// A job was rolled back to its savepoint: what the transaction loaded may show the
    /// job's undone changes. (What it changed stays marked: those queues are read again.)
    pub(crate) fn job_rolled_back(&mut self) {
        self.loaded.clear();
    }

    /// The transaction was rolled back whole, or the store poisoned: nothing of it holds.
    pub(crate) fn reset(&mut self) {
        self.loaded.clear();
        self.changed.clear();
    }
}

#[cfg(test)]
mod tests {
    use redrive_core::{QueuePolicy, Timestamp};

    use super::*;

    fn q(name: &str, version: u64) -> Arc<QueueRow> {
        let mut q = QueueRow::created(
            1,
            &name.parse().unwrap_or_else(|e| panic!("{e}")),
            &QueuePolicy::default(),
            Timestamp(0),
        );
        q.version = version;
        Arc::new(q)
    }

    #[test]
    fn a_transaction_s_records_reach_readers_only_at_its_commit() {
        let cache = QueueCache::default();
        cache.fill(cache.generation(), q("a", 1));
        let mut tx = TxQueues::default();
        // The transaction changes `a` and reads it again: it sees its own version,
        // readers still the committed one.
        tx.changed("a");
        assert!(tx.get(&cache, "a").is_none());
        tx.loaded(q("a", 2));
        assert_eq!(tx.get(&cache, "a").map(|q| q.version), Some(2));
        assert_eq!(cache.get("a").map(|q| q.version), Some(1));
        // A read that started before the commit is not cached after it.
        let before = cache.generation();
        cache.commit(&mut tx);
        assert_eq!(cache.get("a").map(|q| q.version), Some(2));
        cache.fill(before, q("a", 1));
        assert_eq!(cache.get("a").map(|q| q.version), Some(2));
    }

    #[test]
    fn a_rolled_back_job_leaves_nothing_behind() {
        let cache = QueueCache::default();
        cache.fill(cache.generation(), q("a", 1));
        let mut tx = TxQueues::default();
        tx.changed("a");
        tx.loaded(q("a", 2));
        tx.job_rolled_back();
        // Read again inside the transaction; the committed record is not trusted for it.
        assert!(tx.get(&cache, "a").is_none());
        tx.loaded(q("a", 1));
        cache.commit(&mut tx);
        assert_eq!(cache.get("a").map(|q| q.version), Some(1));
        tx.changed("b");
        tx.reset();
        cache.clear();
        assert!(cache.get("a").is_none());
        assert!(tx.get(&cache, "b").is_none());
    }
}
