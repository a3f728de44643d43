//! The writer thread: one connection, group commit, fail-stop.
//!
//! Every write operation is a job sent over a channel. The thread blocks for the first job,
//! drains whatever else is queued (up to `max_batch`), and runs the group in one
//! `BEGIN IMMEDIATE` transaction, each job but the transaction's first inside its own
//! savepoint. A job that fails is rolled back to its savepoint (the first job: the whole
//! transaction, which holds nothing else; the next job begins a new one) and only its
//! caller sees the error. After one `COMMIT`
//! (one WAL sync under `synchronous=FULL`) every caller gets its result. If the commit
//! fails, nobody's result is acknowledged and the store poisons itself: the state on disk
//! is unknown, so every later write is refused with `Poisoned` until a restart.
//!
//! Receives ([`Writer::read_first`]) run first in their group, in their order of arrival,
//! so they see only what earlier groups committed. One that wrote no row (its locks are
//! held in memory, see [`crate::locks`]) is answered at once: it has nothing to sync, and
//! its locks are kept whatever becomes of the transaction after it. A receive that wrote
//! (a crash marker, a row lock, a dead letter) waits for the commit like any other job.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use redrive_core::EntityName;
use redrive_store::skeleton::entities::{QueueRow, queue_not_found};
use redrive_store::{StoreError, StoreResult};
use rusqlite::Connection;
use tokio::sync::oneshot;

use crate::cache::{QueueCache, TxQueues};
use crate::error::{SqliteError, backend, is_busy};
use crate::locks::{self, LockTable, Locks};
use crate::rows::load_queue;

/// What a job sees: the write connection inside the group's transaction, and the queue
/// records as that transaction sees them (see [`crate::cache`]).
pub(crate) struct Tx<'c> {
    pub conn: &'c Connection,
    cache: &'c QueueCache,
    queues: &'c mut TxQueues,
    /// The message locks held in memory (see [`crate::locks`]).
    pub locks: &'c Locks,
}

impl Tx<'_> {
    /// The locks held in memory, for one step (the read pool waits while it is held).
    pub(crate) fn locks(&self) -> std::sync::MutexGuard<'_, LockTable> {
        self.locks.lock()
    }

    /// The queue, or `QueueNotFound`.
    pub(crate) fn queue(&mut self, name: &EntityName) -> StoreResult<Arc<QueueRow>> {
        self.queue_opt(name.as_str())?
            .ok_or_else(|| queue_not_found(name))
    }

    /// The queue, if it exists.
    pub(crate) fn queue_opt(&mut self, name: &str) -> StoreResult<Option<Arc<QueueRow>>> {
        if let Some(q) = self.queues.get(self.cache, name) {
            return Ok(Some(q));
        }
        let Some(q) = load_queue(self.conn, name)? else {
            return Ok(None);
        };
        let q = Arc::new(q);
        self.queues.loaded(Arc::clone(&q));
        Ok(Some(q))
    }

    /// Marks a queue changed or deleted by this job: its record is read again, and
    /// forgotten by the cache when the transaction commits.
    pub(crate) fn forget_queue(&mut self, name: &str) {
        self.queues.changed(name);
    }
}

/// A unit of work for the writer, type-erased.
trait Job: Send {
    /// Runs the work inside the job's savepoint; false if it failed (roll it back).
    fn run(&mut self, tx: &mut Tx<'_>) -> bool;
    /// Whether the job decides every refusal before it writes ([`Writer::write_decided`]):
    /// it then runs without a savepoint of its own.
    fn decided(&self) -> bool;
    /// Whether the job may be answered before the commit when it wrote no row
    /// ([`Writer::read_first`]): it then runs before the group's other jobs.
    fn early(&self) -> bool;
    /// Delivers the result once the group's fate is known; `failure` overrides it.
    fn finish(self: Box<Self>, failure: Option<GroupFailure>);
}

struct TypedJob<F, T> {
    work: Option<F>,
    decided: bool,
    early: bool,
    result: Option<StoreResult<T>>,
    reply: oneshot::Sender<StoreResult<T>>,
}

impl<F, T> Job for TypedJob<F, T>
where
    F: FnOnce(&mut Tx<'_>) -> StoreResult<T> + Send,
    T: Send,
{
    fn run(&mut self, tx: &mut Tx<'_>) -> bool {
        let Some(work) = self.work.take() else {
            return false;
        };
        let result = catch_unwind(AssertUnwindSafe(|| work(tx)))
            .unwrap_or_else(|_| Err(backend(SqliteError::Panicked)));
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn decided(&self) -> bool {
        self.decided
    }

    fn early(&self) -> bool {
        self.early
    }

    fn finish(self: Box<Self>, failure: Option<GroupFailure>) {
        let result = match failure {
            Some(f) => Err(f.error()),
            None => self
                .result
                .unwrap_or_else(|| Err(backend(SqliteError::Panicked))),
        };
        // The caller may have given up waiting (its future was dropped); nothing to do.
        let _ = self.reply.send(result);
    }
}

/// The place of a job answered before its group's commit.
struct Answered;

impl Job for Answered {
    fn run(&mut self, _: &mut Tx<'_>) -> bool {
        true
    }
    fn decided(&self) -> bool {
        true
    }
    fn early(&self) -> bool {
        true
    }
    fn finish(self: Box<Self>, _: Option<GroupFailure>) {}
}

/// Why a whole group failed.
#[derive(Debug, Clone)]
enum GroupFailure {
    /// The state is unknown or the store was poisoned earlier.
    Poisoned,
    /// The transaction could not start (locked by another process); nothing happened.
    Busy(String),
    /// A job of the transaction that promised to fail before writing wrote and then failed:
    /// the transaction was rolled back whole, and this job's work with it.
    RolledBack,
}

impl GroupFailure {
    fn error(&self) -> StoreError {
        match self {
            GroupFailure::Poisoned => StoreError::Poisoned,
            GroupFailure::Busy(m) => StoreError::unavailable(SqliteError::Busy(m.clone())),
            GroupFailure::RolledBack => StoreError::unavailable(SqliteError::RolledBack),
        }
    }
}

enum Msg {
    Job(Box<dyn Job>),
    Close,
    /// Runs a closure on the write connection outside any transaction (tests only: fault
    /// injection).
    #[cfg(test)]
    Raw(Box<dyn FnOnce(&Connection) + Send>),
}

/// The handle the store keeps.
pub(crate) struct Writer {
    sender: Sender<Msg>,
    thread: Mutex<Option<JoinHandle<()>>>,
    poisoned: Arc<AtomicBool>,
    #[cfg(test)]
    test: Arc<TestCounters>,
}

impl Writer {
    /// Starts the writer thread on `conn`, keeping `cache` exact (see [`crate::cache`]).
    pub(crate) fn start(
        conn: Connection,
        max_batch: usize,
        cache: Arc<QueueCache>,
        locks: Arc<Locks>,
    ) -> StoreResult<Writer> {
        let (sender, receiver) = channel();
        let poisoned = Arc::new(AtomicBool::new(false));
        #[cfg(test)]
        let test = Arc::new(TestCounters::default());
        let mut state = WriterThread {
            conn,
            receiver,
            max_batch: max_batch.max(1),
            poisoned: Arc::clone(&poisoned),
            cache,
            queues: TxQueues::default(),
            locks,
            #[cfg(test)]
            test: Arc::clone(&test),
        };
        let thread = std::thread::Builder::new()
            .name("redrive-sqlite-writer".into())
            .spawn(move || state.run())
            .map_err(StoreError::backend)?;
        Ok(Writer {
            sender,
            thread: Mutex::new(Some(thread)),
            poisoned,
            #[cfg(test)]
            test,
        })
    }

    /// Runs `work` in the next group commit and returns its result once committed.
    pub(crate) async fn write<T, F>(&self, work: F) -> StoreResult<T>
    where
        F: FnOnce(&mut Tx<'_>) -> StoreResult<T> + Send + 'static,
        T: Send + 'static,
    {
        self.submit(work, false, false).await
    }

    /// As [`Writer::write`], for work that decides every refusal before it writes (an
    /// error after its first write is a storage failure): it runs without a savepoint of
    /// its own, which spares the savepoint's copy of every page it touches. Should it write
    /// and then fail all the same, the writer rolls the whole transaction back and answers
    /// the transaction's other jobs `unavailable` (nothing of them was acknowledged).
    pub(crate) async fn write_decided<T, F>(&self, work: F) -> StoreResult<T>
    where
        F: FnOnce(&mut Tx<'_>) -> StoreResult<T> + Send + 'static,
        T: Send + 'static,
    {
        self.submit(work, true, false).await
    }

    /// As [`Writer::write_decided`], for work that mostly reads (a receive whose locks are
    /// held in memory): it runs before the group's other jobs, and if it wrote no row it is
    /// answered at once, before the group commits. Its locks in memory are then kept
    /// whatever becomes of the transaction, as if it had committed on its own.
    pub(crate) async fn read_first<T, F>(&self, work: F) -> StoreResult<T>
    where
        F: FnOnce(&mut Tx<'_>) -> StoreResult<T> + Send + 'static,
        T: Send + 'static,
    {
        self.submit(work, true, true).await
    }

    async fn submit<T, F>(&self, work: F, decided: bool, early: bool) -> StoreResult<T>
    where
        F: FnOnce(&mut Tx<'_>) -> StoreResult<T> + Send + 'static,
        T: Send + 'static,
    {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(StoreError::Poisoned);
        }
        let (reply, rx) = oneshot::channel();
        let job = Box::new(TypedJob {
            work: Some(work),
            decided,
            early,
            result: None,
            reply,
        });
        self.sender
            .send(Msg::Job(job))
            .map_err(|_| StoreError::unavailable(SqliteError::Closed))?;
        #[cfg(test)]
        self.test.submitted.fetch_add(1, Ordering::SeqCst);
        // A dropped reply means the writer stopped before running the job (closed).
        rx.await
            .unwrap_or_else(|_| Err(StoreError::unavailable(SqliteError::Closed)))
    }

    /// Whether a failed commit has poisoned the store.
    pub(crate) fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Asks the thread to stop after the queued work and waits for it. Idempotent.
    pub(crate) fn close(&self) {
        let handle = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(handle) = handle {
            let _ = self.sender.send(Msg::Close);
            if handle.join().is_err() {
                tracing::error!("the SQLite writer thread panicked");
            }
        }
    }

    /// Queues `f` to run on the write connection between groups, without waiting
    /// (tests: fault injection, holding the writer while jobs pile up).
    #[cfg(test)]
    pub(crate) fn raw(&self, f: impl FnOnce(&Connection) + Send + 'static) {
        let _ = self.sender.send(Msg::Raw(Box::new(f)));
    }

    /// Counters for tests: (jobs submitted, groups committed).
    #[cfg(test)]
    pub(crate) fn counters(&self) -> (usize, usize) {
        (
            self.test.submitted.load(Ordering::SeqCst),
            self.test.commits.load(Ordering::SeqCst),
        )
    }
}

/// Counters that let tests observe grouping without timing.
#[cfg(test)]
#[derive(Default)]
struct TestCounters {
    submitted: std::sync::atomic::AtomicUsize,
    commits: std::sync::atomic::AtomicUsize,
}

struct WriterThread {
    conn: Connection,
    receiver: Receiver<Msg>,
    max_batch: usize,
    poisoned: Arc<AtomicBool>,
    cache: Arc<QueueCache>,
    /// What the open transaction loaded and changed.
    queues: TxQueues,
    /// The message locks held in memory; their journal follows the transaction's.
    locks: Arc<Locks>,
    #[cfg(test)]
    test: Arc<TestCounters>,
}

impl WriterThread {
    fn run(&mut self) {
        let mut group: Vec<Box<dyn Job>> = Vec::with_capacity(self.max_batch);
        let mut closing = false;
        while !closing {
            match self.receiver.recv() {
                Ok(Msg::Job(job)) => group.push(job),
                Ok(Msg::Close) | Err(_) => break,
                #[cfg(test)]
                Ok(Msg::Raw(f)) => {
                    f(&self.conn);
                    continue;
                }
            }
            while group.len() < self.max_batch {
                match self.receiver.try_recv() {
                    Ok(Msg::Job(job)) => group.push(job),
                    Ok(Msg::Close) => {
                        closing = true;
                        break;
                    }
                    #[cfg(test)]
                    Ok(Msg::Raw(f)) => {
                        // Run the group so far first, then the closure, in arrival order.
                        self.commit_group(&mut group);
                        f(&self.conn);
                    }
                    Err(_) => break,
                }
            }
            self.commit_group(&mut group);
        }
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if self.poisoned.load(Ordering::Acquire) {
            return;
        }
        // Locks held in memory go to their rows, as if they had been written there.
        let held = self.locks.lock().take_all();
        if let Err(e) = locks::flush(&self.conn, &held) {
            tracing::error!(error = %e, "writing the locks held in memory at close failed");
            return;
        }
        if let Err(e) = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        {
            tracing::warn!(error = %e, "WAL checkpoint at close failed");
        }
    }

    fn poison(&mut self, what: &str, e: &rusqlite::Error) {
        tracing::error!(
            error = %e,
            "SQLite {what} failed; the store is poisoned and refuses writes until restarted"
        );
        self.poisoned.store(true, Ordering::Release);
        self.queues.reset();
        self.locks.lock().rolled_back();
        self.cache.clear();
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }

    fn fail_all(group: &mut Vec<Box<dyn Job>>, failure: &GroupFailure) {
        for job in group.drain(..) {
            job.finish(Some(failure.clone()));
        }
    }

    fn exec(&self, sql: &str) -> rusqlite::Result<()> {
        self.conn.prepare_cached(sql)?.execute([])?;
        Ok(())
    }

    /// Starts the group's transaction; on failure finishes every job from `from` on with
    /// the group failure (jobs before `from` failed on their own and rolled back, so their
    /// own errors stand) and returns false.
    fn begin(&mut self, group: &mut Vec<Box<dyn Job>>, from: usize) -> bool {
        let Err(e) = self.exec("BEGIN IMMEDIATE") else {
            return true;
        };
        // Nothing was written, so the state is known: a lock held by another process is
        // transient; anything else is not understood and stops the store.
        let failure = if is_busy(&e) {
            GroupFailure::Busy(e.to_string())
        } else {
            self.poison("BEGIN", &e);
            GroupFailure::Poisoned
        };
        for (i, job) in group.drain(..).enumerate() {
            job.finish((i >= from).then(|| failure.clone()));
        }
        false
    }

    /// Runs the group. The first job of a transaction runs without a savepoint: if it
    /// fails, the whole transaction holds nothing else, so it is rolled back instead (and
    /// the next job begins a new one). Every later job runs in its own savepoint, but for
    /// a job that decides its refusals before it writes ([`Writer::write_decided`]): its
    /// failure left nothing to roll back. This saves the savepoint's page copies for the
    /// common group of one or two jobs, and for the receives and settlements of a busy one.
    fn commit_group(&mut self, group: &mut Vec<Box<dyn Job>>) {
        if group.is_empty() {
            return;
        }
        if self.poisoned.load(Ordering::Acquire) {
            Self::fail_all(group, &GroupFailure::Poisoned);
            return;
        }
        // Reads first ([`Writer::read_first`]); the sort is stable, so each kind keeps its
        // order of arrival.
        group.sort_by_key(|job| !job.early());
        // A job answered with a failure of the group's rather than its own result.
        let mut overrides: Vec<Option<GroupFailure>> = vec![None; group.len()];
        // Which jobs ran to success (only those are undone by a rollback of the whole
        // transaction: a refused job's own refusal stands).
        let mut succeeded = vec![false; group.len()];
        // Whether a transaction is open, where it began and whether it holds at least one
        // job that succeeded.
        let mut in_tx = false;
        let mut tx_from = 0;
        let mut holds_work = false;
        let mut tx_changes = 0;
        for i in 0..group.len() {
            if !in_tx {
                if !self.begin(group, i) {
                    return;
                }
                in_tx = true;
                tx_from = i;
                tx_changes = self.conn.total_changes();
            }
            if !holds_work {
                if self.run_job(group, i) {
                    if group[i].early() && self.conn.total_changes() == tx_changes {
                        // It wrote no row: nothing of it waits for the commit, and its
                        // locks in memory stay whatever becomes of the transaction.
                        self.locks.lock().committed();
                        std::mem::replace(&mut group[i], Box::new(Answered)).finish(None);
                        continue;
                    }
                    succeeded[i] = true;
                    holds_work = true;
                    continue;
                }
                // The transaction held only this job: nothing of it remains.
                self.queues.reset();
                self.locks.lock().rolled_back();
                if !self.rollback(group) {
                    return;
                }
                in_tx = false;
                continue;
            }
            if group[i].decided() {
                let before = self.conn.total_changes();
                if self.run_job(group, i) {
                    succeeded[i] = true;
                    continue;
                }
                if self.conn.is_autocommit() {
                    // SQLite rolled the whole transaction back on its own (for example
                    // after SQLITE_FULL): as when a savepoint cannot be released.
                    let e = rusqlite::Error::SqliteFailure(
                        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
                        Some("the transaction was rolled back under a write".into()),
                    );
                    self.poison("write", &e);
                    Self::fail_all(group, &GroupFailure::Poisoned);
                    return;
                }
                if self.conn.total_changes() == before {
                    // Refused before it wrote a row: only its locks held in memory (if
                    // any) to undo.
                    self.queues.job_rolled_back();
                    self.locks.lock().job_rolled_back();
                    continue;
                }
                // It wrote, then failed: only the whole transaction can be undone. The
                // jobs that succeeded in it are answered as not done.
                tracing::warn!(
                    "a write that promised to fail before writing wrote first; its \
                     transaction was rolled back and its other writes answered unavailable"
                );
                self.queues.reset();
                self.locks.lock().rolled_back();
                if !self.rollback(group) {
                    return;
                }
                for j in tx_from..i {
                    if succeeded[j] {
                        overrides[j] = Some(GroupFailure::RolledBack);
                    }
                }
                in_tx = false;
                holds_work = false;
                continue;
            }
            if let Err(e) = self.exec("SAVEPOINT job") {
                self.poison("SAVEPOINT", &e);
                Self::fail_all(group, &GroupFailure::Poisoned);
                return;
            }
            let ok = self.run_job(group, i);
            succeeded[i] = ok;
            let end = if ok {
                self.exec("RELEASE job")
            } else {
                self.queues.job_rolled_back();
                self.locks.lock().job_rolled_back();
                self.exec("ROLLBACK TO job")
                    .and_then(|()| self.exec("RELEASE job"))
            };
            if let Err(e) = end {
                // SQLite may have rolled the whole transaction back on its own (for
                // example after SQLITE_FULL): no job of the group can be acknowledged.
                self.poison("savepoint release", &e);
                Self::fail_all(group, &GroupFailure::Poisoned);
                return;
            }
        }
        if in_tx {
            let committed = self.exec("COMMIT");
            if let Err(e) = committed {
                self.poison("COMMIT", &e);
                Self::fail_all(group, &GroupFailure::Poisoned);
                return;
            }
            // Before anyone is answered: a caller that reads after its answer sees it.
            self.cache.commit(&mut self.queues);
            self.locks.lock().committed();
            #[cfg(test)]
            self.test.commits.fetch_add(1, Ordering::SeqCst);
        }
        for (job, failure) in group.drain(..).zip(overrides) {
            job.finish(failure);
        }
    }

    /// Runs job `i` of the group in the open transaction; false if it failed.
    fn run_job(&mut self, group: &mut [Box<dyn Job>], i: usize) -> bool {
        self.locks.lock().begin_job();
        let mut tx = Tx {
            conn: &self.conn,
            cache: &self.cache,
            queues: &mut self.queues,
            locks: &self.locks,
        };
        group[i].run(&mut tx)
    }

    /// Rolls the open transaction back (SQLite may already have done so on its own, for
    /// example after SQLITE_FULL); false, with the group failed and the store poisoned, if
    /// that failed.
    fn rollback(&mut self, group: &mut Vec<Box<dyn Job>>) -> bool {
        if !self.conn.is_autocommit()
            && let Err(e) = self.exec("ROLLBACK")
        {
            self.poison("ROLLBACK", &e);
            Self::fail_all(group, &GroupFailure::Poisoned);
            return false;
        }
        true
    }
}
