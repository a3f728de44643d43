//! The PostgreSQL backend of the redrive [`Store`]: any number of stateless redrive nodes
//! share one database; each operation is one PostgreSQL transaction.
//!
//! # Transactions
//!
//! Every write operation of the trait runs in one `READ COMMITTED` transaction on a pooled
//! connection and is acknowledged only after its `COMMIT` returned. Consistency comes from
//! row locks taken by the statements that find the rows, never from a process-local lock,
//! so it holds across nodes:
//!
//! - **Queue rows.** An operation loads its queue `FOR KEY SHARE`, or, when the node has
//!   the queue cached (the hot paths), takes the queue's shared guard instead — a
//!   transaction-level advisory lock keyed by schema and queue id, which unlike a row
//!   lock writes no WAL and creates no MultiXact — and then checks the cached id and
//!   policy version: operations on one queue run side by side, while `delete_queue` and
//!   `update_queue` (which take `FOR UPDATE` and then the guard exclusively) wait for
//!   them and make later ones wait, so no operation writes into a queue that is being
//!   deleted, and a dead-letter record carries the policy version that decided it.
//! - **Senders.** `enqueue` draws its sequence numbers from the queue's own PostgreSQL
//!   sequence (`queue_seq_<id>`, created and dropped with the queue by triggers), which
//!   neither waits nor is undone by a rollback: senders of one queue run side by side
//!   and numbers are unique and increasing, with a gap where a send rolled back. Where
//!   order is promised — the messages of one session or message group — senders first
//!   take a transaction-level advisory lock per (queue, session), so the next sender of
//!   that session draws only after this one committed: sequence order is commit order
//!   within a session, and a receiver never sees a session's 6 while its 5 is in
//!   flight. Duplicate detection claims its entries with `INSERT ... ON CONFLICT` on
//!   (queue, message id): a concurrent sender of the same id waits on the unique key
//!   and then reads the first one's sequence number. Forwarding to a dead-letter queue
//!   and resubmission draw their numbers the same way.
//! - **Receivers.** A receive selects its candidates with `FOR UPDATE SKIP LOCKED`: rows
//!   another receiver (on any node) is taking are skipped rather than waited for, so
//!   concurrent receivers never get the same message and never block each other. A
//!   receive of a session first locks the session's row, so receives within one session
//!   run one at a time, and takes the session's messages in sequence order with plain
//!   `FOR UPDATE`.
//! - **Settlements** lock their messages (`FOR UPDATE`, in sequence order) and wait: of
//!   two settlements of one lock, the second sees what the first left and is refused by
//!   the state machine. Session locks are taken with one
//!   `INSERT ... ON CONFLICT DO UPDATE ... WHERE the old lock ran out`, so one node wins.
//! - **Automatic replay.** The replay worker claims candidates across queues with
//!   `FOR UPDATE SKIP LOCKED` and moves their due time on in the same transaction, so
//!   two nodes never claim the same candidate; the drain at start and the retention rule
//!   take their rows the same way. Every write that ends a judgement (quarantine, finish,
//!   a failure) is conditional on the record still being live, and its row count is the
//!   answer: of a judgement and an operator's move, exactly one takes the record out of
//!   the live area, and a judgement that lost is told so and changes nothing. A
//!   quarantine copy is written with `INSERT ... ON CONFLICT (id) DO NOTHING` while its
//!   source is held `FOR SHARE`. A subscription's change writes the mirrored replay and
//!   retention settings onto its queue's policy in the same transaction, at the next
//!   policy version, locked as a policy change locks it.
//! - **Recovery cases.** Every write that inserts a dead-letter record or moves one
//!   between areas (a dead letter, a quarantine, a quarantine copy, an import, a move, a
//!   resubmission) runs the shared opening statements of `redrive_store::skeleton::cases`
//!   over the records' ids in its own transaction, so a record that stands for a case
//!   never exists without it; a record that has one keeps it (`ON CONFLICT DO NOTHING`).
//!   `update_case` locks the case's row and compares the version read: of two updates
//!   from one version the second waits, then is told `CaseChanged` and writes nothing.
//!   Payload retention takes its cases `FOR UPDATE SKIP LOCKED`. An intent's first word
//!   is kept with `INSERT ... ON CONFLICT DO NOTHING`, then read back.
//! - **Bounded replay plans.** `update_replay_plan` locks the plan's row and compares the
//!   version read, as `update_case` does. The item lease is the unique index over
//!   admitted items' case ids: an update checks it before writing, and one that loses a
//!   race for a case to a concurrent plan's admission (the index's unique violation) is
//!   rolled back and run again like a conflict, then refused with `ReplayItemTaken`.
//!
//! A transaction that loses a deadlock (`40P01`) or a serialization conflict (`40001`)
//! was rolled back by the server; it is run again from the start, up to
//! [`TRANSACTION_ATTEMPTS`] times in all, and then reported as
//! [`StoreError::Unavailable`]. Nothing else is retried: in particular a failed `COMMIT`
//! is never repeated, since its outcome may be unknown.
//!
//! Reads (`get_queue`, `list_queues`, `queue_counts`, `peek`, `next_wake`,
//! `list_dead_letters`, `get_dead_letter`, `replay_counts`, cases with their searches,
//! counts, timelines and payloads, intents, effect authorities, token lookups, audit pages,
//! replay plans and their items) are each one statement outside an explicit transaction,
//! so one snapshot; only an empty answer takes a second look, to tell it apart from a
//! missing queue (or plan).
//!
//! # Rules
//!
//! Every state decision is a call into `redrive_core::machine` with the queue's stored
//! policy, exactly as in the SQLite backend: SQL finds and locks candidate rows, Rust
//! decides, SQL stores the outcome. The Rust between the two — the row mapping, the
//! per-row rules of receive, settle and sweep, the dead-letter plan, the audit chain — is
//! `redrive_store::skeleton`'s, the same code the SQLite backend runs; this crate holds
//! the SQL, the transactions, the batching and the queue cache. The choices documented
//! by the SQLite backend hold here too: a receive first settles up to 256 due rows of its queue (expired locks, then
//! expired messages) and the background sweep takes any rest; an expired message is never
//! delivered; a broker-routed dead letter whose dead-letter queue is unusable falls back
//! to the queue's own store (live area, with the reason in its description), while an
//! application's dead-letter to a missing queue is refused and changes nothing.
//!
//! A message lock token is `redrive_core::id::new_lock_token()` followed by `.` and the
//! message's sequence number in hex: the random part makes it unguessable, the suffix lets
//! settlement (which names the queue) find the row by its primary key, so tokens need no
//! index. The state machine still compares the whole token, so a forged suffix, a token of
//! another queue or of an earlier delivery is a lost lock.
//!
//! # Batching and round trips
//!
//! The hot paths use one statement per step, whatever the batch size: an enqueue batch is
//! one `INSERT ... SELECT FROM unnest($1::bigint[], ...)` (plus one claim and one update
//! of duplicate-detection entries when the queue has a window); a receive locks its
//! candidates with one `SELECT` and stores every new lock with one
//! `UPDATE ... FROM unnest(...)`; a settle call locks its rows with one `SELECT` and
//! stores them with one `UPDATE` and one `DELETE ... WHERE sequence = ANY($2)`, and a
//! settle call of completions only (the common case) is one `DELETE ... RETURNING` of the
//! rows whose lock the given tokens still hold, every returned row confirmed by
//! `machine::complete` (the rest take the general path). Dead
//! letters are written one by one (they are rare and carry a copy of the body).
//! Statements are prepared once per connection and cached with it.
//!
//! Statements are pipelined (see `pool::Db`): `BEGIN` goes out with the first statement;
//! writes whose results are not needed go out with the next statement or with `COMMIT`
//! (and the wake-up `NOTIFY` after it); and a node keeps the queues it has seen (id and
//! policy), so a send, a plain receive or a settle sends its first statements (the
//! sequence draw; the two sweep looks and the candidates; the rows to settle) in one
//! flight with the check of its queue, which takes the queue's shared guard and compares
//! id and policy version. A check that finds the queue changed (on any node) drops the
//! entry and runs the transaction again from the start. A send, a receive and a settle
//! are thus two round trips each.
//!
//! # Several nodes: leases and wake-ups
//!
//! `try_lease` is one `INSERT ... ON CONFLICT DO UPDATE ... WHERE the holder is the same
//! or the lease ran out` on the `leases` table, so one node at a time runs the sweep.
//! (Sweeps on several nodes would still be safe — they skip rows another transaction
//! holds — only wasteful.)
//!
//! After a write that made something receivable commits (a send, an abandon, a released
//! lock, a forwarded dead letter, a resubmission, a policy change, a released session),
//! the same connection runs `pg_notify` with the queue's names on a channel per schema,
//! as a separate statement right behind the `COMMIT` (same flight) with
//! `synchronous_commit` off for it alone. Not inside the write's transaction: a
//! transaction that notifies holds a database-wide lock from pre-commit to the end of its
//! commit, which would serialise every sender's commit (flush included) across the
//! cluster. A wake-up is only a hint, so one lost to a crash between the commit and the
//! notification costs latency, never a message.
//!
//! `remote_wakeups` starts, on first use, a task with one dedicated connection that
//! `LISTEN`s and passes the names on; once listening (again, after a lost connection) it
//! announces every queue once, so nothing that became receivable while it was not
//! listening is missed.
//!
//! # Time
//!
//! Every method takes `now` from the caller, as the trait says; no statement reads the
//! database clock, so a manual clock drives this backend as it drives SQLite. In
//! production, nodes sharing a database read [`DatabaseClock`]: the node's clock plus an
//! offset measured against the database's `clock_timestamp()` (and kept fresh), so every
//! node decides lock expiry and visibility on the database's timeline whatever its own
//! clock says. A node whose clock runs ahead therefore does not expire another node's
//! lock early: the error is bounded by half a round trip to the database plus the local
//! clock's drift between measurements, milliseconds against locks of at least a second.
//!
//! # Errors
//!
//! Pool timeouts, connection failures and lost connections, server shutdown, too many
//! connections, lock timeouts, and conflicts that exhausted their retries are
//! [`StoreError::Unavailable`]; every other database error is [`StoreError::Backend`]
//! (see [`PostgresError`] for this backend's own causes). Refusals (`QueueNotFound`,
//! `LockLost`, ...) are decided before anything is written and roll the transaction back.
//!
//! # Durability
//!
//! A write is acknowledged only after PostgreSQL's `COMMIT` returned. Each connection
//! raises an explicit `synchronous_commit = off` to `on` (stronger settings, such as
//! `remote_apply` for synchronous replicas, are kept), so an acknowledged write survives a
//! crash of the database server. There is no poisoning as in SQLite: a failed commit
//! leaves that one operation unacknowledged (`Unavailable`), and the database stays the
//! single source of truth for every node.
//!
//! # Schema
//!
//! Tables live in [`PostgresOptions::schema`] (created if missing) or, without one, in the
//! first schema of the connection's `search_path` (normally `public`; a dedicated schema
//! is recommended, since the table names are plain: `queues`, `messages`, `dedup`,
//! `sessions`, `dead_letters`, `leases`, `topics`, `subscriptions`, `tokens`, `audit_log`,
//! ...). Versioned migrations (embedded SQL, recorded in
//! `redrive_schema_migrations`) are applied at [`PostgresStore::connect`] in one
//! transaction under a transaction-level advisory lock keyed by the schema, so several
//! nodes starting at once migrate one after the other; a schema whose version is newer
//! than this build knows is refused with [`PostgresError::SchemaTooNew`].
//! [`PostgresStore::migrate`] does the same without opening a store (`redrive migrate`).
//!
//! The conformance suite isolates its cases by schema: each case creates a fresh
//! `rd_test_<random>` schema in the database named by `REDRIVE_TEST_POSTGRES_URL`,
//! connects with it, reconnects to it for the durability cases, and drops it afterwards.
//!
//! # Layout
//!
//! - `pool`: the connection pool, the per-connection statement cache, and `Db`, the
//!   handle every operation queries through.
//! - `schema` and `migrations/`: versioned migrations.
//! - `rows`: the shared decoders over `tokio-postgres` rows, queue loading with its row
//!   lock, batched message writes, inserts (dead-letter records in batches, for imports).
//! - `queues`, `messages`, `sessions`, `dead_letters`, `replay`, `leases`, `topics`: the
//!   operations.
//! - `cases`: the opening of recovery cases, their reads, searches (filters bound as
//!   parameters of a statement built per search) and updates, intents and effect
//!   authorities.
//! - `access`: tokens and the audit log (appends from every node serialised on the one
//!   row of `audit_chain`, so they form one chain).
//! - `wakeups`: LISTEN/NOTIFY between nodes.
//! - `error`: [`PostgresError`] and the mapping into [`StoreError`].

mod access;
mod backfill;
mod cases;
mod clock;
mod dead_letters;
mod error;
mod leases;
mod messages;
mod overview;
mod pool;
mod queues;
mod register;
mod replay;
mod replay_plans;
mod rows;
mod schema;
mod sessions;
mod topics;
mod transactions;
mod wakeups;

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use redrive_core::register::{RegisterEntry, RegisterKey};
use redrive_core::{Area, EntityName, QueuePolicy, Timestamp};
use redrive_store::PolicyVersionRecord;
use redrive_store::{
    AuditEntry, AuditFields, AuditQuery, ChainHead, NewToken, RegisterRecord, TokenRecord,
};
use redrive_store::{
    Capabilities, DeadLetterDelivery, DeadLetterQuery, DeadLetterRecord, Effects, Enqueued,
    NewMessage, QueueCounts, QueueRecord, ReceiveOutcome, ReceiveParams, SessionLock,
    SettleOutcome, Settlement, Store, StoreError, StoreResult, StoredMessage, SweepOutcome,
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

pub use clock::{DatabaseClock, LocalTime};
pub use error::PostgresError;
pub use schema::LATEST_VERSION as SCHEMA_VERSION;

use error::{DbExt, backend, is_retryable};
use pool::{Pool, QueueCache};
use wakeups::Wakeups;

/// How many times a write transaction is run at most when it loses a deadlock or a
/// serialization conflict.
pub const TRANSACTION_ATTEMPTS: u32 = 3;

/// Settings of a [`PostgresStore`].
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// Most connections the store opens for its operations (default 16); listening for
    /// remote wake-ups, once asked for, takes one more. Each node needs its own share of
    /// the server's `max_connections`.
    pub pool_size: usize,
    /// The schema that holds redrive's tables, created if missing; `None` uses the first
    /// schema of the connection's `search_path` (normally `public`).
    pub schema: Option<String>,
    /// Longest run of one statement (PostgreSQL's `statement_timeout`, set on every pooled
    /// connection; default 10 s): a statement blocked by a lock or a stalled server fails
    /// with `Unavailable` rather than hanging. The URL's `statement_timeout_ms` parameter
    /// overrides it. Migrations are not bounded by it.
    pub statement_timeout: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            pool_size: 16,
            schema: None,
            statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
        }
    }
}

/// Default [`PostgresOptions::statement_timeout`].
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest `statement_timeout_ms` a URL may set (one hour).
pub const MAX_STATEMENT_TIMEOUT: Duration = Duration::from_secs(3_600);
/// What an operation may take beyond the statement timeout (waiting for a connection,
/// round trips) before the client gives up on it with `Unavailable`: the bound that
/// holds when the server cannot even say its statement timed out (packets dropped).
pub const OPERATION_MARGIN: Duration = Duration::from_secs(5);

/// The PostgreSQL store. Cheap to share behind an `Arc`; many stores (on many nodes) may
/// use one database at once.
pub struct PostgresStore {
    pool: Pool,
    /// Client-side bound of one operation: statement timeout + [`OPERATION_MARGIN`].
    op_timeout: Duration,
    wakeups: Wakeups,
    /// Queues as this node last saw them (checked by every operation that uses them).
    queues: QueueCache,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("closed", &self.pool.is_closed())
            .finish_non_exhaustive()
    }
}

pub(crate) fn parse_url(url: &str) -> Result<tokio_postgres::Config, StoreError> {
    parse_url_with(url).map(|(config, _)| config)
}

/// Parses a connection URL, taking off redrive's `statement_timeout_ms` parameter
/// (which the driver does not know) and returning it. The query starts at the first `?`
/// after the user info (which, as the driver reads it, ends at the first `@`).
pub(crate) fn parse_url_with(
    url: &str,
) -> Result<(tokio_postgres::Config, Option<Duration>), StoreError> {
    let mut timeout = None;
    let mut driver_url = url.to_owned();
    if let Some(after_scheme) = url.find("://").map(|i| i + 3) {
        let authority_at = url[after_scheme..]
            .find('@')
            .map_or(after_scheme, |i| after_scheme + i + 1);
        if let Some(q) = url[authority_at..].find('?').map(|i| authority_at + i) {
            let mut kept = Vec::new();
            for pair in url[q + 1..].split('&').filter(|p| !p.is_empty()) {
                match pair.split_once('=') {
                    Some(("statement_timeout_ms", v)) => {
                        let ms = v
                            .parse::<u64>()
                            .ok()
                            .map(Duration::from_millis)
                            .filter(|d| !d.is_zero() && *d <= MAX_STATEMENT_TIMEOUT)
                            .ok_or_else(|| {
                                backend(PostgresError::InvalidParameter(format!(
                                    "statement_timeout_ms {v:?} must be a whole number of \
                                     milliseconds from 1 to {}",
                                    MAX_STATEMENT_TIMEOUT.as_millis()
                                )))
                            })?;
                        timeout = Some(ms);
                    }
                    _ => kept.push(pair),
                }
            }
            driver_url = url[..q].to_owned();
            if !kept.is_empty() {
                driver_url.push('?');
                driver_url.push_str(&kept.join("&"));
            }
        }
    }
    let config = driver_url
        .parse::<tokio_postgres::Config>()
        .map_err(|e| backend(PostgresError::InvalidUrl(e)))?;
    Ok((config, timeout))
}

impl PostgresStore {
    /// Connects to the database at `url` (a `postgres://` URL or a `key=value` string),
    /// applies pending migrations, gives the dead letters written before schema 19 their
    /// failure signatures (`backfill`), and returns a store with a pool of
    /// [`PostgresOptions::pool_size`] connections (opened as needed).
    pub async fn connect(url: &str, options: PostgresOptions) -> Result<PostgresStore, StoreError> {
        if options.pool_size == 0 {
            return Err(backend(PostgresError::EmptyPool));
        }
        let (mut config, in_url) = parse_url_with(url)?;
        pool::bound_network(&mut config);
        let statement_timeout = in_url.unwrap_or(options.statement_timeout);
        let schema = options.schema.as_deref();
        let mut client = pool::connect_one(&config, schema).await?;
        schema::migrate(&mut client, schema).await?;
        // The schema the tables are in names the wake-up channel.
        let in_schema: Option<String> = client
            .query_one("SELECT current_schema()", &[])
            .await
            .db()?
            .try_get(0usize)
            .db()?;
        drop(client);
        let wakeups = Wakeups::new(
            config.clone(),
            pool::on_connect_sql(schema),
            wakeups::channel_for(in_schema.as_deref().unwrap_or("public")),
        );
        let store = PostgresStore {
            pool: Pool::new(config, schema, options.pool_size, statement_timeout),
            op_timeout: statement_timeout + OPERATION_MARGIN,
            wakeups,
            queues: QueueCache::default(),
        };
        store.backfill_signatures().await?;
        Ok(store)
    }

    /// Applies pending migrations to the database at `url` without opening a store, and
    /// returns the schema version now in force (for `redrive migrate`).
    pub async fn migrate(url: &str, options: PostgresOptions) -> Result<u32, StoreError> {
        let config = parse_url(url)?;
        let schema = options.schema.as_deref();
        let mut client = pool::connect_one(&config, schema).await?;
        schema::migrate(&mut client, schema).await
    }

    /// Refuses new operations (they fail with `Unavailable`, [`PostgresError::Closed`]) and
    /// closes idle connections; operations in flight finish and their connections close
    /// after them. Idempotent.
    pub fn close(&self) {
        self.pool.close();
        self.wakeups.stop();
    }
}

impl PostgresStore {
    /// Runs one operation within the client-side bound: past it the operation is
    /// abandoned (its connection, marked busy or inside a transaction, is closed, and an
    /// open transaction is rolled back by the server) and fails with `Unavailable`.
    async fn bounded<T>(&self, op: impl Future<Output = StoreResult<T>>) -> StoreResult<T> {
        match tokio::time::timeout(self.op_timeout, op).await {
            Ok(r) => r,
            Err(_) => Err(error::unavailable(PostgresError::OperationTimeout(
                self.op_timeout,
            ))),
        }
    }
}

/// The queues an operation's effects made something receivable on.
fn woken(effects: &Effects) -> Vec<&str> {
    effects.woken.iter().map(EntityName::as_str).collect()
}

/// Runs `$body` (an expression of `$db: &Db` returning a future of `StoreResult`) in one
/// transaction on a pooled connection, commits, and runs it again from the start if the
/// server rolled it back for a deadlock or serialization conflict. After the commit,
/// `$wakes` (an expression of `$v`, the committed value) names the queues on which other
/// nodes' long polls should look again; they are notified on the same connection. The
/// whole, retries included, is bounded by the store's operation bound.
macro_rules! write_tx {
    ($store:expr, |$db:ident| $body:expr) => {
        write_tx!($store, |$db| $body, |_committed| Vec::<&str>::new())
    };
    ($store:expr, |$db:ident| $body:expr, |$v:ident| $wakes:expr) => {{
        $store.bounded(async {
            let mut attempt: u32 = 1;
            loop {
                let conn = $store.pool.get().await?;
                let result = {
                    let $db = conn.transaction(&$store.queues);
                    let $db = &$db;
                    match $body.await {
                        Ok(value) => {
                            let queues: Vec<&str> = {
                                let $v = &value;
                                $wakes
                            };
                            $db.commit($store.wakeups.channel(), &queues)
                                .await
                                .map(|()| value)
                        }
                        Err(e) => {
                            // A connection whose rollback failed is closed, not reused (it
                            // stays marked as inside a transaction).
                            let _ = $db.rollback().await;
                            Err(e)
                        }
                    }
                };
                match result {
                    Ok(value) => break Ok(value),
                    Err(e) if is_retryable(&e) && attempt < TRANSACTION_ATTEMPTS => {
                        tracing::debug!(error = %e, attempt, "transaction conflict; running it again");
                        attempt += 1;
                    }
                    Err(e) => break Err(e),
                }
            }
        })
        .await
    }};
}

/// Runs `$body` (an expression of `$db: &Db`) as single statements outside an explicit
/// transaction, within the store's operation bound.
macro_rules! read {
    ($store:expr, |$db:ident| $body:expr) => {{
        $store
            .bounded(async {
                let conn = $store.pool.get().await?;
                conn.busy();
                let result = {
                    let $db = conn.autocommit();
                    let $db = &$db;
                    $body.await
                };
                conn.done();
                result
            })
            .await
    }};
}

impl PostgresStore {
    /// Fills in the failure signatures of dead letters written before schema 19, a
    /// batch per transaction, and logs how many (see `backfill`). An error stops it
    /// after the batches already committed; the next connect resumes.
    async fn backfill_signatures(&self) -> StoreResult<()> {
        let mut done = backfill::Backfilled::default();
        let mut after = String::new();
        loop {
            let batch = write_tx!(self, |db| backfill::batch(db, &after))?;
            done.signed += batch.done.signed;
            done.unreadable += batch.done.unreadable;
            match batch.last {
                Some(last) => after = last,
                None => break,
            }
        }
        if done != backfill::Backfilled::default() {
            tracing::info!(
                signed = done.signed,
                unreadable = done.unreadable,
                "backfilled the failure signatures of dead letters written before schema 19"
            );
        }
        Ok(())
    }
}

#[async_trait]
impl Store for PostgresStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            durable: true,
            multi_node: true,
        }
    }

    fn backend_name(&self) -> &'static str {
        "postgres"
    }

    async fn ping(&self) -> StoreResult<()> {
        read!(self, |db| db.query("SELECT 1", &[])).map(|_| ())
    }

    async fn create_queue(
        &self,
        name: &EntityName,
        policy: &QueuePolicy,
        now: Timestamp,
    ) -> StoreResult<QueueRecord> {
        write_tx!(self, |db| queues::create(db, name, policy, now))
    }

    async fn update_queue(
        &self,
        name: &EntityName,
        policy: &QueuePolicy,
        expected_version: Option<u64>,
        now: Timestamp,
    ) -> StoreResult<QueueRecord> {
        // A new policy (a shorter backoff, say) may make messages receivable sooner.
        write_tx!(
            self,
            |db| queues::update(db, name, policy, expected_version, now),
            |_updated| vec![name.as_str()]
        )
    }

    async fn get_queue(&self, name: &EntityName) -> StoreResult<QueueRecord> {
        read!(self, |db| queues::get_one(db, name))
    }

    async fn list_queues(&self) -> StoreResult<Vec<QueueRecord>> {
        read!(self, |db| queues::list(db))
    }

    async fn delete_queue(&self, name: &EntityName, force: bool) -> StoreResult<()> {
        write_tx!(self, |db| queues::delete(db, name, force))
    }

    async fn queue_counts(&self, name: &EntityName, now: Timestamp) -> StoreResult<QueueCounts> {
        read!(self, |db| queues::counts(db, name, now))
    }

    async fn list_policy_versions(
        &self,
        queue: &EntityName,
        before: Option<u64>,
        limit: u32,
    ) -> StoreResult<Vec<PolicyVersionRecord>> {
        read!(self, |db| queues::policy_versions(db, queue, before, limit))
    }

    async fn enqueue(
        &self,
        queue: &EntityName,
        messages: Vec<NewMessage>,
        now: Timestamp,
    ) -> StoreResult<Vec<Enqueued>> {
        write_tx!(
            self,
            |db| messages::enqueue(db, queue, &messages, now),
            |sent| {
                if sent.iter().any(|e| !e.duplicate) {
                    vec![queue.as_str()]
                } else {
                    Vec::new()
                }
            }
        )
    }

    async fn cancel_scheduled(
        &self,
        queue: &EntityName,
        sequence: i64,
        now: Timestamp,
    ) -> StoreResult<()> {
        write_tx!(self, |db| messages::cancel_scheduled(
            db, queue, sequence, now
        ))
    }

    async fn purge_messages(&self, queue: &EntityName, _now: Timestamp) -> StoreResult<u64> {
        write_tx!(self, |db| messages::purge(db, queue))
    }

    async fn receive(&self, params: ReceiveParams) -> StoreResult<ReceiveOutcome> {
        write_tx!(self, |db| messages::receive(db, &params), |out| woken(
            &out.effects
        ))
    }

    async fn receive_deferred(
        &self,
        queue: &EntityName,
        sequences: &[i64],
        lock_ms: u64,
        now: Timestamp,
    ) -> StoreResult<ReceiveOutcome> {
        write_tx!(
            self,
            |db| messages::receive_deferred(db, queue, sequences, lock_ms, now),
            |out| woken(&out.effects)
        )
    }

    async fn peek(
        &self,
        queue: &EntityName,
        from_sequence: i64,
        limit: u32,
        now: Timestamp,
    ) -> StoreResult<Vec<StoredMessage>> {
        read!(self, |db| messages::peek(
            db,
            queue,
            from_sequence,
            limit,
            now
        ))
    }

    async fn settle(
        &self,
        queue: &EntityName,
        items: Vec<Settlement>,
        now: Timestamp,
    ) -> StoreResult<SettleOutcome> {
        write_tx!(self, |db| messages::settle(db, queue, &items, now), |out| {
            woken(&out.effects)
        })
    }

    async fn apply_transaction(
        &self,
        operations: Vec<redrive_store::TxOperation>,
        now: Timestamp,
    ) -> StoreResult<Result<redrive_store::TransactionOutcome, redrive_store::TransactionRefusal>>
    {
        let result = write_tx!(
            self,
            |db| transactions::apply(db, &operations, now),
            |out| out.woken(&operations)
        );
        redrive_store::transaction::settle_refusal(result)
    }

    async fn next_wake(
        &self,
        queue: &EntityName,
        now: Timestamp,
    ) -> StoreResult<Option<Timestamp>> {
        read!(self, |db| messages::next_wake(db, queue, now))
    }

    async fn accept_session(
        &self,
        queue: &EntityName,
        session_id: Option<&str>,
        lock_ms: u64,
        now: Timestamp,
    ) -> StoreResult<Option<SessionLock>> {
        write_tx!(self, |db| sessions::accept(
            db, queue, session_id, lock_ms, now
        ))
    }

    async fn renew_session(
        &self,
        queue: &EntityName,
        session_id: &str,
        lock_token: &str,
        lock_ms: u64,
        now: Timestamp,
    ) -> StoreResult<SessionLock> {
        write_tx!(self, |db| sessions::renew(
            db, queue, session_id, lock_token, lock_ms, now
        ))
    }

    async fn release_session(
        &self,
        queue: &EntityName,
        session_id: &str,
        lock_token: &str,
        _now: Timestamp,
    ) -> StoreResult<()> {
        write_tx!(
            self,
            |db| sessions::release(db, queue, session_id, lock_token),
            |_released| vec![queue.as_str()]
        )
    }

    async fn list_sessions(
        &self,
        queue: &EntityName,
        after: Option<&str>,
        limit: u32,
        now: Timestamp,
    ) -> StoreResult<Vec<redrive_store::SessionSummary>> {
        read!(self, |db| sessions::list(db, queue, after, limit, now))
    }

    async fn sweep(&self, now: Timestamp, limit: u32) -> StoreResult<SweepOutcome> {
        write_tx!(self, |db| messages::sweep(db, now, limit), |out| woken(
            &out.effects
        ))
    }

    async fn list_dead_letter_page(&self, query: &DeadLetterQuery) -> StoreResult<DeadLetterPage> {
        read!(self, |db| dead_letters::list(db, query))
    }

    async fn get_dead_letter(&self, queue: &EntityName, id: &str) -> StoreResult<DeadLetterRecord> {
        read!(self, |db| dead_letters::get_one(db, queue, id))
    }

    async fn receive_dead_letters(
        &self,
        queue: &EntityName,
        max: u32,
        lock_ms: u64,
        now: Timestamp,
    ) -> StoreResult<Vec<DeadLetterDelivery>> {
        write_tx!(self, |db| dead_letters::receive(
            db, queue, max, lock_ms, now
        ))
    }

    async fn settle_dead_letter(
        &self,
        queue: &EntityName,
        lock_token: &str,
        complete: bool,
        now: Timestamp,
    ) -> StoreResult<()> {
        write_tx!(self, |db| dead_letters::settle(
            db, queue, lock_token, complete, now
        ))
    }

    async fn resubmit_dead_letter(
        &self,
        queue: &EntityName,
        id: &str,
        now: Timestamp,
    ) -> StoreResult<Enqueued> {
        write_tx!(
            self,
            |db| dead_letters::resubmit(db, queue, id, now),
            |_resubmitted| vec![queue.as_str()]
        )
    }

    async fn move_dead_letter(
        &self,
        queue: &EntityName,
        id: &str,
        to: Area,
        now: Timestamp,
    ) -> StoreResult<()> {
        write_tx!(self, |db| dead_letters::move_to(db, queue, id, to, now))
    }

    async fn claim_replay(
        &self,
        now: Timestamp,
        limit: u32,
        claim_ms: u64,
    ) -> StoreResult<ReplayClaim> {
        write_tx!(self, |db| replay::claim(db, now, limit, claim_ms))
    }

    async fn quarantine_dead_letter(
        &self,
        queue: &EntityName,
        id: &str,
        q: &Quarantine,
        now: Timestamp,
    ) -> StoreResult<bool> {
        write_tx!(self, |db| replay::quarantine(db, queue, id, q, now))
    }

    async fn put_quarantine_copy(
        &self,
        queue: &EntityName,
        copy: &QuarantineCopy,
    ) -> StoreResult<bool> {
        write_tx!(self, |db| replay::put_copy(db, queue, copy))
    }

    async fn finish_replay(
        &self,
        queue: &EntityName,
        id: &str,
        finish: &ReplayFinish,
        _now: Timestamp,
    ) -> StoreResult<bool> {
        write_tx!(self, |db| replay::finish(db, queue, id, finish))
    }

    async fn finish_replays(
        &self,
        items: &[(EntityName, String, ReplayFinish)],
        _now: Timestamp,
    ) -> StoreResult<Vec<bool>> {
        write_tx!(self, |db| async {
            let mut out = Vec::with_capacity(items.len());
            for (queue, id, finish) in items {
                out.push(replay::finish(db, queue, id, finish).await?);
            }
            Ok::<_, StoreError>(out)
        })
    }

    async fn fail_replay(
        &self,
        queue: &EntityName,
        id: &str,
        error: &str,
        retry_at: Timestamp,
    ) -> StoreResult<Option<u32>> {
        write_tx!(self, |db| replay::fail(db, queue, id, error, retry_at))
    }

    async fn drain_replay_candidates(&self, rules: &[DrainRule], limit: u32) -> StoreResult<u64> {
        write_tx!(self, |db| replay::drain(db, rules, limit))
    }

    async fn expire_dead_letters(
        &self,
        rules: &[RetentionRule],
        limit: u32,
    ) -> StoreResult<Vec<(EntityName, u64)>> {
        write_tx!(self, |db| replay::expire(db, rules, limit))
    }

    async fn replay_counts(
        &self,
        queue: Option<&EntityName>,
        flag_after: u32,
    ) -> StoreResult<Vec<ReplayCounts>> {
        read!(self, |db| replay::counts(db, queue, flag_after))
    }

    async fn import_dead_letters(
        &self,
        queue: &EntityName,
        records: Vec<DeadLetterRecord>,
        now: Timestamp,
    ) -> StoreResult<()> {
        write_tx!(self, |db| replay::import(db, queue, &records, now))
    }

    async fn get_case(&self, id: &str) -> StoreResult<CaseRecord> {
        read!(self, |db| cases::get_one(db, id))
    }

    async fn case_reads(&self, ids: &[String]) -> StoreResult<Vec<redrive_store::CaseRead>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        read!(self, |db| cases::reads(db, ids))
    }

    async fn case_timeline(&self, id: &str) -> StoreResult<Vec<redrive_core::case::TimelineEntry>> {
        read!(self, |db| cases::timeline(db, id))
    }

    async fn list_cases(&self, query: &CaseQuery) -> StoreResult<Vec<CaseRecord>> {
        read!(self, |db| cases::list(db, query))
    }

    async fn case_counts(&self, query: &CaseQuery) -> StoreResult<CaseCounts> {
        read!(self, |db| cases::counts(db, query))
    }

    async fn latest_case_dead_letter(
        &self,
        queue: &EntityName,
        reason: &str,
    ) -> StoreResult<Option<Timestamp>> {
        read!(self, |db| cases::latest_dead_letter(
            db,
            queue.as_str(),
            reason
        ))
    }

    async fn update_case(&self, update: &CaseUpdate) -> StoreResult<CaseRecord> {
        write_tx!(self, |db| cases::update(db, update))
    }

    async fn update_cases(
        &self,
        updates: &[CaseUpdate],
    ) -> StoreResult<Vec<StoreResult<CaseRecord>>> {
        if updates.is_empty() {
            return Ok(Vec::new());
        }
        write_tx!(self, |db| cases::update_many(db, updates))
    }

    async fn case_payload(&self, id: &str, digest: &str) -> StoreResult<Option<Vec<u8>>> {
        read!(self, |db| cases::payload(db, id, digest))
    }

    async fn due_cases(&self, now: Timestamp, limit: u32) -> StoreResult<Vec<CaseRecord>> {
        read!(self, |db| cases::due(db, now, limit))
    }

    async fn drop_case_payloads(&self, now: Timestamp, limit: u32) -> StoreResult<Vec<String>> {
        write_tx!(self, |db| cases::drop_payloads(db, now, limit))
    }

    async fn put_intent(&self, intent: &IntentRecord) -> StoreResult<IntentRecord> {
        write_tx!(self, |db| cases::put_intent(db, intent))
    }

    async fn intent_words(&self, intent_id: &str) -> StoreResult<Vec<IntentRecord>> {
        read!(self, |db| cases::intent_words(db, intent_id))
    }

    async fn put_effect_authority(&self, authority: &EffectAuthority) -> StoreResult<()> {
        write_tx!(self, |db| cases::put_authority(db, authority))
    }

    async fn delete_effect_authority(&self, message_type: &str) -> StoreResult<bool> {
        write_tx!(self, |db| cases::delete_authority(db, message_type))
    }

    async fn list_effect_authorities(&self) -> StoreResult<Vec<EffectAuthority>> {
        read!(self, |db| cases::list_authorities(db))
    }

    async fn put_case_group(
        &self,
        group: &CaseGroupRecord,
        expected: Option<u64>,
    ) -> StoreResult<CaseGroupRecord> {
        write_tx!(self, |db| cases::put_group(db, group, expected))
    }

    async fn get_case_group(&self, id: &str) -> StoreResult<CaseGroupRecord> {
        read!(self, |db| cases::get_group(db, id))
    }

    async fn list_case_groups(
        &self,
        queue: Option<&EntityName>,
        after: Option<&str>,
        limit: u32,
    ) -> StoreResult<Vec<CaseGroupRecord>> {
        let queue = queue.map(EntityName::as_str);
        read!(self, |db| cases::list_groups(db, queue, after, limit))
    }

    fn remote_wakeups(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        if self.pool.is_closed() {
            return None;
        }
        self.wakeups.subscribe()
    }

    async fn try_lease(
        &self,
        name: &str,
        holder: &str,
        ttl_ms: u64,
        now: Timestamp,
    ) -> StoreResult<bool> {
        let until = redrive_store::skeleton::columns::after(now, ttl_ms);
        write_tx!(self, |db| leases::try_take(db, name, holder, until, now))
    }

    async fn put_register_entry(
        &self,
        entry: &RegisterEntry,
        now: Timestamp,
    ) -> StoreResult<Option<RegisterRecord>> {
        write_tx!(self, |db| register::put(db, entry, now))
    }

    async fn delete_register_entry(
        &self,
        key: &RegisterKey,
    ) -> StoreResult<Option<RegisterRecord>> {
        write_tx!(self, |db| register::delete(db, key))
    }

    async fn list_register(
        &self,
        after: Option<&RegisterKey>,
        limit: u32,
    ) -> StoreResult<Vec<RegisterRecord>> {
        let after = after.map(ToString::to_string);
        read!(self, |db| register::list(db, after.as_deref(), limit))
    }

    async fn create_replay_plan(
        &self,
        plan: &ReplayPlanRecord,
        items: &[PlanItemRecord],
    ) -> StoreResult<ReplayPlanRecord> {
        write_tx!(self, |db| replay_plans::create(db, plan, items))
    }

    async fn get_replay_plan(&self, id: &str) -> StoreResult<ReplayPlanRecord> {
        read!(self, |db| replay_plans::get_one(db, id))
    }

    async fn list_replay_plans(&self, query: &PlanQuery) -> StoreResult<Vec<ReplayPlanRecord>> {
        read!(self, |db| replay_plans::list(db, query))
    }

    async fn update_replay_plan(&self, update: &ReplayPlanUpdate) -> StoreResult<ReplayPlanRecord> {
        write_tx!(self, |db| replay_plans::update(db, update))
    }

    async fn replay_plan_items(
        &self,
        plan_id: &str,
        query: &PlanItemQuery,
    ) -> StoreResult<Vec<PlanItemRecord>> {
        read!(self, |db| replay_plans::items(db, plan_id, query))
    }

    async fn create_token(&self, token: &NewToken, now: Timestamp) -> StoreResult<TokenRecord> {
        write_tx!(self, |db| access::create_token(db, token, now))
    }

    async fn list_tokens(&self) -> StoreResult<Vec<TokenRecord>> {
        read!(self, |db| access::list_tokens(db))
    }

    async fn find_token(&self, secret_hash: &str) -> StoreResult<Option<TokenRecord>> {
        read!(self, |db| access::find_token(db, secret_hash))
    }

    async fn find_token_by_sqs_key(&self, access_key_id: &str) -> StoreResult<Option<TokenRecord>> {
        read!(self, |db| access::find_token_by_sqs_key(db, access_key_id))
    }

    async fn revoke_token(&self, id: &str, now: Timestamp) -> StoreResult<TokenRecord> {
        write_tx!(self, |db| access::revoke_token(db, id, now))
    }

    async fn append_audit(&self, entries: &[AuditFields]) -> StoreResult<Vec<AuditEntry>> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        write_tx!(self, |db| access::append_audit(db, entries))
    }

    async fn audit_head(&self) -> StoreResult<Option<ChainHead>> {
        read!(self, |db| access::audit_head(db))
    }

    async fn list_audit(&self, query: &AuditQuery) -> StoreResult<Vec<AuditEntry>> {
        read!(self, |db| access::list_audit(db, query))
    }

    async fn prune_audit(&self, before: Timestamp, fields: &AuditFields) -> StoreResult<u64> {
        write_tx!(self, |db| access::prune_audit(db, before, fields))
    }

    async fn create_topic(
        &self,
        name: &EntityName,
        policy: &TopicPolicy,
        now: Timestamp,
    ) -> StoreResult<TopicRecord> {
        write_tx!(self, |db| topics::create_topic(db, name, policy, now))
    }

    async fn get_topic(&self, name: &EntityName) -> StoreResult<TopicRecord> {
        read!(self, |db| topics::get_topic(db, name))
    }

    async fn list_topics(&self) -> StoreResult<Vec<TopicRecord>> {
        read!(self, |db| topics::list_topics(db))
    }

    async fn delete_topic(&self, name: &EntityName, force: bool) -> StoreResult<()> {
        write_tx!(self, |db| topics::delete_topic(db, name, force))
    }

    async fn create_subscription(
        &self,
        sub: &NewSubscription,
        now: Timestamp,
    ) -> StoreResult<SubscriptionRecord> {
        write_tx!(self, |db| topics::create_subscription(db, sub, now))
    }

    async fn get_subscription(
        &self,
        topic: &EntityName,
        name: &EntityName,
    ) -> StoreResult<SubscriptionRecord> {
        read!(self, |db| topics::get_subscription(db, topic, name))
    }

    async fn list_subscriptions(&self, topic: &EntityName) -> StoreResult<Vec<SubscriptionRecord>> {
        read!(self, |db| topics::list_subscriptions(db, topic))
    }

    async fn list_all_subscriptions(&self) -> StoreResult<Vec<SubscriptionRecord>> {
        read!(self, |db| topics::list_all_subscriptions(db))
    }

    async fn update_subscription(
        &self,
        topic: &EntityName,
        name: &EntityName,
        update: &SubscriptionUpdate,
        now: Timestamp,
    ) -> StoreResult<SubscriptionRecord> {
        write_tx!(self, |db| topics::update_subscription(
            db, topic, name, update, now
        ))
    }

    async fn delete_subscription(
        &self,
        topic: &EntityName,
        name: &EntityName,
        force: bool,
    ) -> StoreResult<u64> {
        write_tx!(self, |db| topics::delete_subscription(
            db, topic, name, force
        ))
    }

    async fn publish(
        &self,
        topic: &EntityName,
        events: Vec<PublishEvent>,
        now: Timestamp,
    ) -> StoreResult<Vec<Published>> {
        // Other nodes' long polls on every queue an event may have gone to look again.
        let mut queues: Vec<&str> = events
            .iter()
            .flat_map(|e| e.deliveries.iter().map(|(q, _)| q.as_str()))
            .collect();
        queues.sort_unstable();
        queues.dedup();
        write_tx!(
            self,
            |db| topics::publish(db, topic, &events, now),
            |published| {
                if published.iter().any(|p| !p.duplicate) {
                    queues.clone()
                } else {
                    Vec::new()
                }
            }
        )
    }

    async fn list_failures(
        &self,
        query: &redrive_store::failure::FailureQuery,
    ) -> StoreResult<Vec<redrive_store::failure::FailureSignature>> {
        read!(self, |db| dead_letters::failures(db, query))
    }

    async fn overview_counts(
        &self,
        now: Timestamp,
        flag_after: u32,
    ) -> StoreResult<redrive_store::OverviewCounts> {
        read!(self, |db| overview::counts(db, now, flag_after))
    }
}
