//! The SQLite backend of the redrive [`Store`]: one embedded file, WAL mode, one writer
//! thread with group commit.
//!
//! # Writes: one thread, group commit, fail-stop
//!
//! One dedicated OS thread owns the only write connection. Every write operation (all but
//! the reads listed below) is a job sent to it over a channel. The thread blocks for the
//! first job, drains whatever else is queued (up to [`SqliteOptions::max_batch`]) and runs
//! the group in one `BEGIN IMMEDIATE` transaction, each job inside its own `SAVEPOINT`: a
//! job that fails is rolled back to its savepoint and only its caller gets the error. (The
//! first job of a transaction needs no savepoint: if it fails, the transaction holds
//! nothing else and is rolled back whole, and the next job begins a new one. A savepoint
//! copies every page its job touches, so this matters for the common small group.)
//! Then one `COMMIT` — with WAL and `synchronous=FULL`, one sync for the whole group — and
//! only then does each caller get its result. There is no per-message sync anywhere.
//!
//! If `COMMIT` fails (or the transaction cannot be managed at all), nobody in the group is
//! acknowledged and the store poisons itself: every later write returns
//! [`StoreError::Poisoned`] until the process restarts, because the state on disk is not
//! known. A `BEGIN` refused with `SQLITE_BUSY` (another process holds the write lock past
//! the busy timeout) wrote nothing, so it fails the group with `Unavailable` instead.
//!
//! # Reads: a pool of read-only connections
//!
//! `get_queue`, `list_queues`, `queue_counts`, `list_sessions`, `peek`, `list_dead_letters`,
//! `get_dead_letter`, `replay_counts`, `next_wake`, the token lookups, `list_audit` and the
//! case reads (`get_case`, `case_timeline`, `list_cases`, `case_counts`, `case_payload`,
//! `due_cases`, `intent_words`, `list_effect_authorities`) run on a small pool ([`SqliteOptions::readers`]) of
//! read-only connections through `tokio::task::spawn_blocking`, each inside one read
//! transaction (one consistent snapshot). WAL lets them run while the writer writes, and
//! a write is acknowledged only after its commit, so a read that starts after an
//! acknowledgement sees it.
//!
//! # Rules
//!
//! Every state decision is a call into `redrive_core::machine` with the queue's stored
//! policy; SQL only finds candidate rows and stores outcomes. What the SQLite and
//! PostgreSQL stores do alike between reading a row and writing one (the row mapping, the
//! per-row rules, the dead-letter plan, the audit chain) is `redrive_store::skeleton`'s;
//! this crate holds the SQL and the transactions. One cache of queue records (`cache`),
//! exact because only this process writes the file, serves the writer's jobs and the
//! read path: it holds committed records only, and forgets a queue when the commit of a
//! change to it returns. Every connection has a busy timeout; `SQLITE_BUSY`/`SQLITE_LOCKED` map to
//! [`StoreError::Unavailable`]. A receive first settles up to 256 due rows of its queue
//! (expired locks, then expired messages); the background sweep takes any rest, and an
//! expired message is never delivered either way.
//!
//! # Locks held in memory
//!
//! A receive on a queue without sessions keeps the message's lock (token, expiry,
//! delivery count) in the writer's memory and writes nothing; what it must not lose is
//! kept honest by a marker per queue and by a clean close writing every lock to its row.
//! See `locks`.
//!
//! # Schema
//!
//! Versioned migrations (embedded SQL, `schema_migrations(version)`) are applied in order at
//! [`SqliteStore::open`]; a database whose version is newer than this build knows is
//! refused with [`SqliteError::SchemaTooNew`].
//!
//! The hot tables (`messages`, `dedup`, `sessions`) key rows by the queue's integer id
//! (never reused) rather than its name, which keeps their indexes small. One index over a
//! generated `due_at` column (visibility time when Available, lock expiry when Locked)
//! serves receive, lock expiry, wake-up times and counts. A message lock token is
//! `redrive_core::id::new_lock_token()` followed by `.` and the row's rowid in hex: the
//! random part makes it unguessable, the suffix lets settlement find the row by its key,
//! so tokens need no index. Settlement still compares the whole token (through the state
//! machine), so a forged suffix or a reused rowid is a lost lock.
//!
//! A dead-letter record carries automatic replay's bookkeeping (schema version 7): a live
//! record with a `replay_due_at` is a replay candidate, written in the transaction that
//! makes it live on a queue whose policy enables replay, and claimed through a partial
//! index over due times; `replay_cause` repeats the cause of a record's judgement only so
//! that the counts can group by it. What each replay operation writes is
//! `redrive_store::skeleton::replay`'s (see `replay`).
//!
//! Recovery cases (schema version 8) are opened by the store itself: every write that
//! inserts a dead-letter record or changes its area runs the shared opening statements
//! (`redrive_store::skeleton::cases::OPEN_CASE`, `OPEN_TIMELINE`) in its own transaction,
//! right after that write (see `cases::open`); the statements check whether the record
//! stands for a case, so a record that is none opens nothing and one that has a case keeps
//! it. A record just inserted opens its case from the record as written instead, by the
//! same rule and into the same columns, as one row from values that SQLite writes without
//! a statement journal (`cases::open_inserted`). A case update is one writer job,
//! conditional on the version its caller read.
//!
//! Bounded replay plans (schema version 10) are written by writer jobs: an update checks
//! the version its caller read and the item lease (the admitted items of the cases it
//! admits) before it writes anything, so a refused update is a refusal, never a failed
//! statement (see `replay_plans`).
//!
//! A message's contents (body, content type, properties, correlation id, type, intent)
//! stay in its `messages` row when the body and properties together are at most 512 bytes
//! (`rows::INLINE_CONTENT_MAX`); larger ones live in `message_bodies`, keyed by the row's
//! id (its rowid): written once at enqueue, read by a join when a message is delivered,
//! peeked or dead-lettered, and deleted with the row by the `messages_delete_body`
//! trigger. Receive and settlement then update small rows, so the pages they write to the
//! WAL hold tens of messages rather than the few that fit with large bodies.

mod access;
mod backfill;
mod cache;
mod cases;
mod dead_letters;
mod error;
mod files;
mod leases;
mod locks;
mod messages;
mod overview;
mod queues;
mod readers;
mod register;
mod replay;
mod replay_plans;
mod rows;
mod schema;
mod sessions;
mod topics;
mod transactions;
mod writer;

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use redrive_core::case::TimelineEntry;
use redrive_core::register::{RegisterEntry, RegisterKey};
use redrive_core::{Area, EntityName, QueuePolicy, Timestamp};
use redrive_store::PolicyVersionRecord;
use redrive_store::{
    AuditEntry, AuditFields, AuditQuery, ChainHead, NewToken, RegisterRecord, TokenRecord,
};
use redrive_store::{
    Capabilities, DeadLetterDelivery, DeadLetterQuery, DeadLetterRecord, Enqueued, NewMessage,
    QueueCounts, QueueRecord, ReceiveOutcome, ReceiveParams, SessionLock, SettleOutcome,
    Settlement, Store, StoreError, StoreResult, StoredMessage, SweepOutcome,
};
use redrive_store::{
    CaseCounts, CaseGroupRecord, CaseQuery, CaseRecord, CaseUpdate, EffectAuthority, IntentRecord,
};
use redrive_store::{
    DeadLetterPage, DrainRule, Quarantine, QuarantineCopy, ReplayClaim, ReplayCounts, ReplayFinish,
    RetentionRule,
};
use redrive_store::{
    NewSubscription, PublishEvent, Published, SubscriptionRecord, SubscriptionUpdate, TopicPolicy,
    TopicRecord,
};
use redrive_store::{PlanItemQuery, PlanItemRecord, PlanQuery, ReplayPlanRecord, ReplayPlanUpdate};

pub use error::SqliteError;
pub use schema::LATEST_VERSION as SCHEMA_VERSION;

use cache::QueueCache;
use error::Db as _;
use readers::ReadPool;
use writer::Writer;

/// Tuning of a [`SqliteStore`].
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Most write operations sharing one commit (default 1024).
    pub max_batch: usize,
    /// Read-only connections in the read pool (default 4).
    pub readers: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            max_batch: 1024,
            readers: 4,
        }
    }
}

/// The SQLite store. Dropping it closes it (see [`SqliteStore::close`]).
pub struct SqliteStore {
    writer: Writer,
    readers: ReadPool,
    /// The queue records, shared with the writer (see `cache`).
    queues: Arc<QueueCache>,
    /// The message locks held in memory, shared with the writer (see `locks`).
    locks: Arc<locks::Locks>,
    /// The database's lock file, held open (and so locked) until the store is closed
    /// (`files::lock`).
    lock_file: std::sync::Mutex<Option<std::fs::File>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("poisoned", &self.writer.is_poisoned())
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database file at `path` (parent directories
    /// created; the directory 0700, the database and its WAL files 0600), in WAL mode with
    /// `synchronous=FULL`, applies migrations, and gives the dead letters written before
    /// schema 19 their failure signatures (`backfill`). The store holds the lock file
    /// `<path>.lock` until it is closed: while another process (or another store of this
    /// one) has the file open, this fails with [`SqliteError::InUse`].
    pub fn open(path: &Path, options: SqliteOptions) -> Result<SqliteStore, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            files::prepare_dir(dir).map_err(StoreError::backend)?;
        }
        // Before anything reads the file: a crash marker is only a crash's if no other
        // process holds the locks it marks.
        let lock_file = files::lock(path).map_err(StoreError::backend)?;
        files::create_db_file(path).map_err(StoreError::backend)?;
        let conn = schema::open_writer(path)?;
        schema::migrate(&conn)?;
        backfill::run(&conn)?;
        // The system clock, as the one process on this file decides time by: the time of
        // the recovery's audit entries.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let approximate_rows = locks::recover(&conn, Timestamp(now))?;
        files::restrict_files(path).map_err(StoreError::backend)?;
        let readers = ReadPool::open(path.to_path_buf(), options.readers)?;
        let queues = Arc::new(QueueCache::default());
        let locks = Arc::new(locks::Locks::new(approximate_rows));
        let writer = Writer::start(
            conn,
            options.max_batch,
            Arc::clone(&queues),
            Arc::clone(&locks),
        )?;
        Ok(SqliteStore {
            writer,
            readers,
            queues,
            locks,
            lock_file: std::sync::Mutex::new(Some(lock_file)),
        })
    }

    /// Stops the writer thread after it finishes the work already queued, checkpoints
    /// the WAL and releases the database's lock file. Later calls fail with
    /// `Unavailable` ([`SqliteError::Closed`]). Idempotent. Blocks while the queued work
    /// finishes.
    pub fn close(&self) {
        self.writer.close();
        self.readers.close();
        drop(
            self.lock_file
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take(),
        );
    }

    /// Leaves the store as a process that died would: nothing more is written, nothing
    /// is closed or flushed, and only the lock file is released (as the operating system
    /// releases it when a process ends), so that the file can be opened again as after
    /// a crash. For crash tests.
    #[cfg(test)]
    pub(crate) fn abandon_as_crashed(self) {
        drop(
            self.lock_file
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take(),
        );
        std::mem::forget(self);
    }

    /// Whether a failed commit has poisoned the store (all writes refused).
    pub fn is_poisoned(&self) -> bool {
        self.writer.is_poisoned()
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        self.close();
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            durable: true,
            multi_node: false,
        }
    }

    fn backend_name(&self) -> &'static str {
        "sqlite"
    }

    async fn ping(&self) -> StoreResult<()> {
        if self.writer.is_poisoned() {
            return Err(StoreError::Poisoned);
        }
        self.readers
            .read(|c| c.query_row("SELECT 1", [], |_| Ok(())).db())
            .await
    }

    async fn create_queue(
        &self,
        name: &EntityName,
        policy: &QueuePolicy,
        now: Timestamp,
    ) -> StoreResult<QueueRecord> {
        let (name, policy) = (name.clone(), policy.clone());
        self.writer
            .write(move |tx| queues::create(tx, &name, &policy, now))
            .await
    }

    async fn update_queue(
        &self,
        name: &EntityName,
        policy: &QueuePolicy,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> StoreResult<QueueRecord> {
        let (name, policy) = (name.clone(), policy.clone());
        self.writer
            .write(move |tx| queues::update(tx, &name, &policy, expected_version, now))
            .await
    }

    async fn get_queue(&self, name: &EntityName) -> StoreResult<QueueRecord> {
        if let Some(q) = self.queues.get(name.as_str()) {
            return Ok(q.record());
        }
        let generation = self.queues.generation();
        let key = name.clone();
        let q = Arc::new(self.readers.read(move |c| queues::get(c, &key)).await?);
        let record = q.record();
        self.queues.fill(generation, q);
        Ok(record)
    }

    async fn list_queues(&self) -> StoreResult<Vec<QueueRecord>> {
        self.readers.read(queues::list).await
    }

    async fn delete_queue(&self, name: &EntityName, force: bool) -> StoreResult<()> {
        let name = name.clone();
        self.writer
            .write(move |tx| queues::delete(tx, &name, force))
            .await
    }

    async fn queue_counts(&self, name: &EntityName, now: Timestamp) -> StoreResult<QueueCounts> {
        let (name, locks) = (name.clone(), Arc::clone(&self.locks));
        self.readers
            .read(move |c| queues::counts(c, &name, now, &locks))
            .await
    }

    async fn list_policy_versions(
        &self,
        queue: &EntityName,
        before: Option<u64>,
        limit: u32,
    ) -> StoreResult<Vec<PolicyVersionRecord>> {
        let queue = queue.clone();
        self.readers
            .read(move |c| queues::policy_versions(c, &queue, before, limit))
            .await
    }

    async fn enqueue(
        &self,
        queue: &EntityName,
        messages: Vec<NewMessage>,
        now: Timestamp,
    ) -> StoreResult<Vec<Enqueued>> {
        let queue = queue.clone();
        self.writer
            .write(move |tx| messages::enqueue(tx, &queue, messages, now))
            .await
    }

    async fn cancel_scheduled(
        &self,
        queue: &EntityName,
        sequence: i64,
        now: Timestamp,
    ) -> StoreResult<()> {
        let queue = queue.clone();
        self.writer
            .write(move |tx| messages::cancel_scheduled(tx, &queue, sequence, now))
            .await
    }

    async fn purge_messages(&self, queue: &EntityName, _now: Timestamp) -> StoreResult<u64> {
        let queue = queue.clone();
        self.writer
            .write(move |tx| messages::purge(tx, &queue))
            .await
    }

    async fn receive(&self, params: ReceiveParams) -> StoreResult<ReceiveOutcome> {
        self.writer
            .read_first(move |tx| messages::receive(tx, params))
            .await
    }

    async fn receive_deferred(
        &self,
        queue: &EntityName,
        sequences: &[i64],
        lock_ms: u64,
        now: Timestamp,
    ) -> StoreResult<ReceiveOutcome> {
        let (queue, sequences) = (queue.clone(), sequences.to_vec());
        self.writer
            .write(move |tx| messages::receive_deferred(tx, &queue, &sequences, lock_ms, now))
            .await
    }

    async fn peek(
        &self,
        queue: &EntityName,
        from_sequence: i64,
        limit: u32,
        now: Timestamp,
    ) -> StoreResult<Vec<StoredMessage>> {
        let (queue, locks) = (queue.clone(), Arc::clone(&self.locks));
        self.readers
            .read(move |c| messages::peek(c, &queue, from_sequence, limit, now, &locks))
            .await
    }

    async fn settle(
        &self,
        queue: &EntityName,
        items: Vec<Settlement>,
        now: Timestamp,
    ) -> StoreResult<SettleOutcome> {
        let queue = queue.clone();
        self.writer
            .write_decided(move |tx| messages::settle(tx, &queue, items, now))
            .await
    }

    async fn apply_transaction(
        &self,
        operations: Vec<redrive_store::TxOperation>,
        now: Timestamp,
    ) -> StoreResult<Result<redrive_store::TransactionOutcome, redrive_store::TransactionRefusal>>
    {
        let result = self
            .writer
            .write(move |tx| transactions::apply(tx, operations, now))
            .await;
        redrive_store::transaction::settle_refusal(result)
    }

    async fn next_wake(
        &self,
        queue: &EntityName,
        now: Timestamp,
    ) -> StoreResult<Option<Timestamp>> {
        let (queue, locks) = (queue.clone(), Arc::clone(&self.locks));
        self.readers
            .read(move |c| messages::next_wake(c, &queue, now, &locks))
            .await
    }

    async fn accept_session(
        &self,
        queue: &EntityName,
        session_id: Option<&str>,
        lock_ms: u64,
        now: Timestamp,
    ) -> StoreResult<Option<SessionLock>> {
        let (queue, session_id) = (queue.clone(), session_id.map(str::to_owned));
        self.writer
            .write(move |tx| sessions::accept(tx, &queue, session_id, lock_ms, now))
            .await
    }

    async fn renew_session(
        &self,
        queue: &EntityName,
        session_id: &str,
        lock_token: &str,
        lock_ms: u64,
        now: Timestamp,
    ) -> StoreResult<SessionLock> {
        let (queue, session_id, lock_token) =
            (queue.clone(), session_id.to_owned(), lock_token.to_owned());
        self.writer
            .write(move |tx| sessions::renew(tx, &queue, &session_id, &lock_token, lock_ms, now))
            .await
    }

    async fn release_session(
        &self,
        queue: &EntityName,
        session_id: &str,
        lock_token: &str,
        _now: Timestamp,
    ) -> StoreResult<()> {
        let (queue, session_id, lock_token) =
            (queue.clone(), session_id.to_owned(), lock_token.to_owned());
        self.writer
            .write(move |tx| sessions::release(tx, &queue, &session_id, &lock_token))
            .await
    }

    async fn list_sessions(
        &self,
        queue: &EntityName,
        after: Option<&str>,
        limit: u32,
        now: Timestamp,
    ) -> StoreResult<Vec<redrive_store::SessionSummary>> {
        let (queue, after) = (queue.clone(), after.map(str::to_owned));
        self.readers
            .read(move |c| sessions::list(c, &queue, after.as_deref(), limit, now))
            .await
    }

    async fn sweep(&self, now: Timestamp, limit: u32) -> StoreResult<SweepOutcome> {
        self.writer
            .write(move |tx| messages::sweep(tx, now, limit))
            .await
    }

    async fn list_dead_letter_page(&self, query: &DeadLetterQuery) -> StoreResult<DeadLetterPage> {
        let query = query.clone();
        self.readers
            .read(move |c| dead_letters::list(c, &query))
            .await
    }

    async fn get_dead_letter(&self, queue: &EntityName, id: &str) -> StoreResult<DeadLetterRecord> {
        let (queue, id) = (queue.clone(), id.to_owned());
        self.readers
            .read(move |c| dead_letters::get(c, &queue, &id))
            .await
    }

    async fn receive_dead_letters(
        &self,
        queue: &EntityName,
        max: u32,
        lock_ms: u64,
        now: Timestamp,
    ) -> StoreResult<Vec<DeadLetterDelivery>> {
        let queue = queue.clone();
        self.writer
            .write(move |tx| dead_letters::receive(tx, &queue, max, lock_ms, now))
            .await
    }

    async fn settle_dead_letter(
        &self,
        queue: &EntityName,
        lock_token: &str,
        complete: bool,
        now: Timestamp,
    ) -> StoreResult<()> {
        let (queue, lock_token) = (queue.clone(), lock_token.to_owned());
        self.writer
            .write(move |tx| dead_letters::settle(tx, &queue, &lock_token, complete, now))
            .await
    }

    async fn resubmit_dead_letter(
        &self,
        queue: &EntityName,
        id: &str,
        now: Timestamp,
    ) -> StoreResult<Enqueued> {
        let (queue, id) = (queue.clone(), id.to_owned());
        self.writer
            .write(move |tx| dead_letters::resubmit(tx, &queue, &id, now))
            .await
    }

    async fn move_dead_letter(
        &self,
        queue: &EntityName,
        id: &str,
        to: Area,
        now: Timestamp,
    ) -> StoreResult<()> {
        let (queue, id) = (queue.clone(), id.to_owned());
        self.writer
            .write(move |tx| dead_letters::move_to(tx, &queue, &id, to, now))
            .await
    }

    async fn claim_replay(
        &self,
        now: Timestamp,
        limit: u32,
        claim_ms: u64,
    ) -> StoreResult<ReplayClaim> {
        self.writer
            .write(move |tx| replay::claim(tx, now, limit, claim_ms))
            .await
    }

    async fn quarantine_dead_letter(
        &self,
        queue: &EntityName,
        id: &str,
        q: &Quarantine,
        now: Timestamp,
    ) -> StoreResult<bool> {
        let (queue, id, q) = (queue.clone(), id.to_owned(), q.clone());
        self.writer
            .write(move |tx| replay::quarantine(tx, &queue, &id, q, now))
            .await
    }

    async fn put_quarantine_copy(
        &self,
        queue: &EntityName,
        copy: &QuarantineCopy,
    ) -> StoreResult<bool> {
        let (queue, copy) = (queue.clone(), copy.clone());
        self.writer
            .write(move |tx| replay::put_copy(tx, &queue, &copy))
            .await
    }

    async fn finish_replay(
        &self,
        queue: &EntityName,
        id: &str,
        finish: &ReplayFinish,
        _now: Timestamp,
    ) -> StoreResult<bool> {
        let (queue, id, finish) = (queue.clone(), id.to_owned(), finish.clone());
        self.writer
            .write(move |tx| replay::finish(tx, &queue, &id, &finish))
            .await
    }

    async fn finish_replays(
        &self,
        items: &[(EntityName, String, ReplayFinish)],
        _now: Timestamp,
    ) -> StoreResult<Vec<bool>> {
        let items = items.to_vec();
        self.writer
            .write(move |tx| {
                items
                    .iter()
                    .map(|(queue, id, finish)| replay::finish(tx, queue, id, finish))
                    .collect()
            })
            .await
    }

    async fn fail_replay(
        &self,
        queue: &EntityName,
        id: &str,
        error: &str,
        retry_at: Timestamp,
    ) -> StoreResult<Option<u32>> {
        let (queue, id, error) = (queue.clone(), id.to_owned(), error.to_owned());
        self.writer
            .write(move |tx| replay::fail(tx, &queue, &id, &error, retry_at))
            .await
    }

    async fn drain_replay_candidates(&self, rules: &[DrainRule], limit: u32) -> StoreResult<u64> {
        let rules = rules.to_vec();
        self.writer
            .write(move |tx| replay::drain(tx, &rules, limit))
            .await
    }

    async fn expire_dead_letters(
        &self,
        rules: &[RetentionRule],
        limit: u32,
    ) -> StoreResult<Vec<(EntityName, u64)>> {
        let rules = rules.to_vec();
        self.writer
            .write(move |tx| replay::expire(tx, &rules, limit))
            .await
    }

    async fn replay_counts(
        &self,
        queue: Option<&EntityName>,
        flag_after: u32,
    ) -> StoreResult<Vec<ReplayCounts>> {
        let queue = queue.cloned();
        self.readers
            .read(move |c| replay::counts(c, queue.as_ref(), flag_after))
            .await
    }

    async fn import_dead_letters(
        &self,
        queue: &EntityName,
        records: Vec<DeadLetterRecord>,
        now: Timestamp,
    ) -> StoreResult<()> {
        let queue = queue.clone();
        self.writer
            .write(move |tx| replay::import(tx, &queue, records, now))
            .await
    }

    async fn get_case(&self, id: &str) -> StoreResult<CaseRecord> {
        let id = id.to_owned();
        self.readers.read(move |c| cases::get(c, &id)).await
    }

    async fn case_reads(&self, ids: &[String]) -> StoreResult<Vec<redrive_store::CaseRead>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids = ids.to_vec();
        self.readers.read(move |c| cases::reads(c, &ids)).await
    }

    async fn case_timeline(&self, id: &str) -> StoreResult<Vec<TimelineEntry>> {
        let id = id.to_owned();
        self.readers.read(move |c| cases::timeline(c, &id)).await
    }

    async fn list_cases(&self, query: &CaseQuery) -> StoreResult<Vec<CaseRecord>> {
        let query = query.clone();
        self.readers.read(move |c| cases::list(c, &query)).await
    }

    async fn case_counts(&self, query: &CaseQuery) -> StoreResult<CaseCounts> {
        let query = query.clone();
        self.readers.read(move |c| cases::counts(c, &query)).await
    }

    async fn latest_case_dead_letter(
        &self,
        queue: &EntityName,
        reason: &str,
    ) -> StoreResult<Option<Timestamp>> {
        let (queue, reason) = (queue.to_string(), reason.to_owned());
        self.readers
            .read(move |c| cases::latest_dead_letter(c, &queue, &reason))
            .await
    }

    async fn update_case(&self, update: &CaseUpdate) -> StoreResult<CaseRecord> {
        let update = update.clone();
        self.writer
            .write(move |tx| cases::update(tx, &update))
            .await
    }

    async fn update_cases(
        &self,
        updates: &[CaseUpdate],
    ) -> StoreResult<Vec<StoreResult<CaseRecord>>> {
        if updates.is_empty() {
            return Ok(Vec::new());
        }
        let updates = updates.to_vec();
        self.writer
            .write(move |tx| cases::update_many(tx, &updates))
            .await
    }

    async fn case_payload(&self, id: &str, digest: &str) -> StoreResult<Option<Vec<u8>>> {
        let (id, digest) = (id.to_owned(), digest.to_owned());
        self.readers
            .read(move |c| cases::payload(c, &id, &digest))
            .await
    }

    async fn due_cases(&self, now: Timestamp, limit: u32) -> StoreResult<Vec<CaseRecord>> {
        self.readers.read(move |c| cases::due(c, now, limit)).await
    }

    async fn drop_case_payloads(&self, now: Timestamp, limit: u32) -> StoreResult<Vec<String>> {
        self.writer
            .write(move |tx| cases::drop_payloads(tx, now, limit))
            .await
    }

    async fn put_intent(&self, intent: &IntentRecord) -> StoreResult<IntentRecord> {
        let intent = intent.clone();
        self.writer
            .write(move |tx| cases::put_intent(tx, &intent))
            .await
    }

    async fn intent_words(&self, intent_id: &str) -> StoreResult<Vec<IntentRecord>> {
        let intent_id = intent_id.to_owned();
        self.readers
            .read(move |c| cases::intent_words(c, &intent_id))
            .await
    }

    async fn put_effect_authority(&self, authority: &EffectAuthority) -> StoreResult<()> {
        let authority = authority.clone();
        self.writer
            .write(move |tx| cases::put_authority(tx, &authority))
            .await
    }

    async fn delete_effect_authority(&self, message_type: &str) -> StoreResult<bool> {
        let message_type = message_type.to_owned();
        self.writer
            .write(move |tx| cases::delete_authority(tx, &message_type))
            .await
    }

    async fn list_effect_authorities(&self) -> StoreResult<Vec<EffectAuthority>> {
        self.readers.read(cases::list_authorities).await
    }

    async fn put_case_group(
        &self,
        group: &CaseGroupRecord,
        expected: Option<u64>,
    ) -> StoreResult<CaseGroupRecord> {
        let group = group.clone();
        self.writer
            .write(move |tx| cases::put_group(tx, &group, expected))
            .await
    }

    async fn get_case_group(&self, id: &str) -> StoreResult<CaseGroupRecord> {
        let id = id.to_owned();
        self.readers.read(move |c| cases::get_group(c, &id)).await
    }

    async fn list_case_groups(
        &self,
        queue: Option<&EntityName>,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<CaseGroupRecord>> {
        let queue = queue.map(|q| q.as_str().to_owned());
        let after = after.map(str::to_owned);
        self.readers
            .read(move |c| cases::list_groups(c, queue.as_deref(), after.as_deref(), limit))
            .await
    }

    async fn try_lease(
        &self,
        name: &str,
        holder: &str,
        ttl_ms: u64,
        now: Timestamp,
    ) -> StoreResult<bool> {
        let (name, holder) = (name.to_owned(), holder.to_owned());
        let until = redrive_store::skeleton::columns::after(now, ttl_ms);
        self.writer
            .write(move |tx| leases::try_take(tx, &name, &holder, until, now))
            .await
    }

    async fn create_token(&self, token: &NewToken, now: Timestamp) -> StoreResult<TokenRecord> {
        let token = token.clone();
        self.writer
            .write(move |tx| access::create_token(tx, &token, now))
            .await
    }

    async fn list_tokens(&self) -> StoreResult<Vec<TokenRecord>> {
        self.readers.read(access::list_tokens).await
    }

    async fn find_token(&self, secret_hash: &str) -> StoreResult<Option<TokenRecord>> {
        let secret_hash = secret_hash.to_owned();
        self.readers
            .read(move |c| access::find_token(c, &secret_hash))
            .await
    }

    async fn find_token_by_sqs_key(&self, access_key_id: &str) -> StoreResult<Option<TokenRecord>> {
        let access_key_id = access_key_id.to_owned();
        self.readers
            .read(move |c| access::find_token_by_sqs_key(c, &access_key_id))
            .await
    }

    async fn revoke_token(&self, id: &str, now: Timestamp) -> StoreResult<TokenRecord> {
        let id = id.to_owned();
        self.writer
            .write(move |tx| access::revoke_token(tx, &id, now))
            .await
    }

    async fn append_audit(&self, entries: &[AuditFields]) -> StoreResult<Vec<AuditEntry>> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let entries = entries.to_vec();
        self.writer
            .write(move |tx| access::append_audit(tx, &entries))
            .await
    }

    async fn audit_head(&self) -> StoreResult<Option<ChainHead>> {
        self.readers.read(access::audit_head).await
    }

    async fn list_audit(&self, query: &AuditQuery) -> StoreResult<Vec<AuditEntry>> {
        let query = query.clone();
        self.readers
            .read(move |c| access::list_audit(c, &query))
            .await
    }

    async fn prune_audit(&self, before: Timestamp, fields: &AuditFields) -> StoreResult<u64> {
        let fields = fields.clone();
        self.writer
            .write(move |tx| access::prune_audit(tx, before, &fields))
            .await
    }

    async fn put_register_entry(
        &self,
        entry: &RegisterEntry,
        now: Timestamp,
    ) -> StoreResult<Option<RegisterRecord>> {
        let entry = entry.clone();
        self.writer
            .write(move |tx| register::put(tx, &entry, now))
            .await
    }

    async fn delete_register_entry(
        &self,
        key: &RegisterKey,
    ) -> StoreResult<Option<RegisterRecord>> {
        let key = key.clone();
        self.writer
            .write(move |tx| register::delete(tx, &key))
            .await
    }

    async fn list_register(
        &self,
        after: Option<&RegisterKey>,
        limit: u32,
    ) -> StoreResult<Vec<RegisterRecord>> {
        let after = after.map(ToString::to_string);
        self.readers
            .read(move |c| register::list(c, after.as_deref(), limit))
            .await
    }

    async fn create_replay_plan(
        &self,
        plan: &ReplayPlanRecord,
        items: &[PlanItemRecord],
    ) -> StoreResult<ReplayPlanRecord> {
        let (plan, items) = (plan.clone(), items.to_vec());
        self.writer
            .write(move |tx| replay_plans::create(tx, &plan, &items))
            .await
    }

    async fn get_replay_plan(&self, id: &str) -> StoreResult<ReplayPlanRecord> {
        let id = id.to_owned();
        self.readers.read(move |c| replay_plans::get(c, &id)).await
    }

    async fn list_replay_plans(&self, query: &PlanQuery) -> StoreResult<Vec<ReplayPlanRecord>> {
        let query = query.clone();
        self.readers
            .read(move |c| replay_plans::list(c, &query))
            .await
    }

    async fn update_replay_plan(&self, update: &ReplayPlanUpdate) -> StoreResult<ReplayPlanRecord> {
        let update = update.clone();
        self.writer
            .write(move |tx| replay_plans::update(tx, &update))
            .await
    }

    async fn replay_plan_items(
        &self,
        plan_id: &str,
        query: &PlanItemQuery,
    ) -> StoreResult<Vec<PlanItemRecord>> {
        let (plan_id, query) = (plan_id.to_owned(), query.clone());
        self.readers
            .read(move |c| replay_plans::items(c, &plan_id, &query))
            .await
    }

    async fn create_topic(
        &self,
        name: &EntityName,
        policy: &TopicPolicy,
        now: Timestamp,
    ) -> StoreResult<TopicRecord> {
        let (name, policy) = (name.clone(), policy.clone());
        self.writer
            .write(move |tx| topics::create_topic(tx, &name, &policy, now))
            .await
    }

    async fn get_topic(&self, name: &EntityName) -> StoreResult<TopicRecord> {
        let name = name.clone();
        self.readers
            .read(move |c| topics::get_topic(c, &name))
            .await
    }

    async fn list_topics(&self) -> StoreResult<Vec<TopicRecord>> {
        self.readers.read(topics::list_topics).await
    }

    async fn delete_topic(&self, name: &EntityName, force: bool) -> StoreResult<()> {
        let name = name.clone();
        self.writer
            .write(move |tx| topics::delete_topic(tx, &name, force))
            .await
    }

    async fn create_subscription(
        &self,
        sub: &NewSubscription,
        now: Timestamp,
    ) -> StoreResult<SubscriptionRecord> {
        let sub = sub.clone();
        self.writer
            .write(move |tx| topics::create_subscription(tx, &sub, now))
            .await
    }

    async fn get_subscription(
        &self,
        topic: &EntityName,
        name: &EntityName,
    ) -> StoreResult<SubscriptionRecord> {
        let (topic, name) = (topic.clone(), name.clone());
        self.readers
            .read(move |c| topics::get_subscription(c, &topic, &name))
            .await
    }

    async fn list_subscriptions(&self, topic: &EntityName) -> StoreResult<Vec<SubscriptionRecord>> {
        let topic = topic.clone();
        self.readers
            .read(move |c| topics::list_subscriptions(c, &topic))
            .await
    }

    async fn list_all_subscriptions(&self) -> StoreResult<Vec<SubscriptionRecord>> {
        self.readers.read(topics::list_all_subscriptions).await
    }

    async fn update_subscription(
        &self,
        topic: &EntityName,
        name: &EntityName,
        update: &SubscriptionUpdate,
        now: Timestamp,
    ) -> StoreResult<SubscriptionRecord> {
        let (topic, name, update) = (topic.clone(), name.clone(), update.clone());
        self.writer
            .write(move |tx| topics::update_subscription(tx, &topic, &name, &update, now))
            .await
    }

    async fn delete_subscription(
        &self,
        topic: &EntityName,
        name: &EntityName,
        force: bool,
    ) -> StoreResult<u64> {
        let (topic, name) = (topic.clone(), name.clone());
        self.writer
            .write(move |tx| topics::delete_subscription(tx, &topic, &name, force))
            .await
    }

    async fn publish(
        &self,
        topic: &EntityName,
        events: Vec<PublishEvent>,
        now: Timestamp,
    ) -> StoreResult<Vec<Published>> {
        let topic = topic.clone();
        self.writer
            .write(move |tx| topics::publish(tx, &topic, events, now))
            .await
    }

    async fn list_failures(
        &self,
        query: &redrive_store::failure::FailureQuery,
    ) -> StoreResult<Vec<redrive_store::failure::FailureSignature>> {
        let query = query.clone();
        self.readers
            .read(move |c| dead_letters::failures(c, &query))
            .await
    }

    async fn overview_counts(
        &self,
        now: Timestamp,
        flag_after: u32,
    ) -> StoreResult<redrive_store::OverviewCounts> {
        // Two readers at once: the counts of queues and dead letters, and the open cases.
        let locks = Arc::clone(&self.locks);
        let (mut counts, cases) = tokio::try_join!(
            self.readers
                .read(move |c| overview::counts(c, now, flag_after, &locks)),
            self.readers.read(move |c| overview::cases(c, now)),
        )?;
        counts.cases = cases;
        Ok(counts)
    }
}

#[cfg(test)]
mod memory_locks_tests;
#[cfg(test)]
mod tests;
