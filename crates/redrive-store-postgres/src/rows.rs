//! How this backend reads and writes rows: [`Cols`] (the shared decoders of
//! `redrive_store::skeleton` over `tokio-postgres` rows), loading queues (with their row
//! lock or guard), batched message writes, inserts.

use std::collections::BTreeMap;
use std::ops::Deref;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, PoisonError};

use redrive_core::{EntityName, MessageMeta, Timestamp};
use redrive_store::failure::FailureShape;
use redrive_store::skeleton::columns::{invariant, millis, props_to_json, to_int};
use redrive_store::skeleton::entities::{QueueRow, queue_not_found};
use redrive_store::skeleton::{Columns, Head, MessageRow, NewRow};
use redrive_store::skeleton::{dead_letters, replay};
use redrive_store::{DeadLetterRecord, StoreError, StoreResult, UndecodableRecord};
use tokio_postgres::Row;
use tokio_postgres::types::FromSql;

use crate::error::{DbExt, PostgresError};
use crate::pool::{Db, Owned};

/// The columns of a message head (what the state machine needs), in the order [`head`]
/// reads them.
macro_rules! head_cols {
    () => {
        redrive_store::columns!(head)
    };
}
pub(crate) use head_cols;

/// The columns of a full message row, in the order [`message`] reads them.
macro_rules! msg_cols {
    () => {
        concat!(
            redrive_store::columns!(head),
            ", ",
            redrive_store::columns!(content)
        )
    };
}
pub(crate) use msg_cols;

// ---- reading values ---------------------------------------------------------------------

pub(crate) fn get<'a, T: FromSql<'a>>(row: &'a Row, i: usize) -> StoreResult<T> {
    row.try_get(i).db()
}

/// A `tokio-postgres` row read through the shared decoders.
pub(crate) struct Cols<'r>(pub &'r Row);

impl Columns for Cols<'_> {
    fn int(&self, i: usize) -> StoreResult<i64> {
        get(self.0, i)
    }

    fn int_opt(&self, i: usize) -> StoreResult<Option<i64>> {
        get(self.0, i)
    }

    fn text(&self, i: usize) -> StoreResult<String> {
        get(self.0, i)
    }

    fn text_opt(&self, i: usize) -> StoreResult<Option<String>> {
        get(self.0, i)
    }

    fn bytes(&self, i: usize) -> StoreResult<Vec<u8>> {
        get(self.0, i)
    }

    fn flag(&self, i: usize) -> StoreResult<bool> {
        get(self.0, i)
    }

    /// Reads the text in place, without copying it (states are read on every row).
    fn parse<T>(&self, i: usize, column: &'static str) -> StoreResult<T>
    where
        T: std::str::FromStr,
        T::Err: std::fmt::Display,
    {
        get::<&str>(self.0, i)?
            .parse()
            .map_err(|e| redrive_store::skeleton::columns::bad_value(column, e))
    }
}

/// A non-negative count read from a `count(*)`.
pub(crate) fn count_u64(row: &Row, i: usize) -> StoreResult<u64> {
    Cols(row).unsigned(i, "count(*)")
}

/// Reads [`head_cols!`] (also the first columns of [`msg_cols!`]).
pub(crate) fn head(r: &Row) -> StoreResult<Head> {
    Head::decode(&Cols(r), 0, None)
}

/// Reads [`msg_cols!`].
pub(crate) fn message(r: &Row) -> StoreResult<MessageRow> {
    MessageRow::decode(&Cols(r), 0, None)
}

/// Reads [`columns!(dead_letter)`](redrive_store::columns).
pub(crate) fn record(r: &Row) -> StoreResult<DeadLetterRecord> {
    dead_letters::decode(&Cols(r))
}

/// Reads [`columns!(dead_letter)`](redrive_store::columns), or names a row this build
/// cannot read ([`dead_letters::decode_checked`]): the row is fetched already, so the
/// error is the row's own.
pub(crate) fn checked_record(r: &Row) -> Result<DeadLetterRecord, UndecodableRecord> {
    dead_letters::decode_checked(&Cols(r))
}

/// Decodes every row with `f`.
pub(crate) fn decode<T>(rows: &[Row], f: impl Fn(&Row) -> StoreResult<T>) -> StoreResult<Vec<T>> {
    rows.iter().map(f).collect()
}

// ---- queues -------------------------------------------------------------------------------

/// A queue as an operation sees it: the queue's row, and where this node's plain
/// receives of it start looking (shared by every copy of a cached queue).
#[derive(Debug, Clone)]
pub(crate) struct QueueInfo {
    pub row: QueueRow,
    pub floor: Arc<ReceiveFloor>,
}

impl Deref for QueueInfo {
    type Target = QueueRow;

    fn deref(&self) -> &QueueRow {
        &self.row
    }
}

impl From<QueueRow> for QueueInfo {
    fn from(row: QueueRow) -> Self {
        QueueInfo {
            row,
            floor: Arc::default(),
        }
    }
}

/// The lowest `due_at` at which a plain receive of a queue starts its look for
/// candidates on this node.
///
/// A receive changes its rows' `state`, so their entries in `messages_due` move from the
/// `available` range to the `locked` one; the old entries stay behind, dead, until
/// `VACUUM`, and every receive that starts at the head of the range walks over them (a
/// few thousand index pages after a few hundred thousand deliveries). Every row that
/// becomes available gets a `due_at` no earlier than the time it does, so the rows a
/// receive finds first mark where the live ones begin: the next receive starts there.
///
/// A row can still fall behind the floor: a receive that skipped rows another one held
/// and then rolled back, a send committed after later ones were received, clocks of
/// nodes a few milliseconds apart. So a receive whose bounded look finds nothing looks
/// again from the head of the range, and every [`ReceiveFloor::RESCAN_EVERY`]th receive
/// starts there anyway; such a row is delivered late, never lost.
#[derive(Debug, Default)]
pub(crate) struct ReceiveFloor {
    /// `due_at` of the first candidate of the last receive; `i64::MIN` when unknown.
    due_at: AtomicI64,
    uses: AtomicU32,
}

impl ReceiveFloor {
    /// Every this many receives of a queue on a node, one looks from the head.
    pub(crate) const RESCAN_EVERY: u32 = 64;

    /// The floor for the next receive, or `None` for a look from the head.
    pub(crate) fn next(&self) -> Option<i64> {
        let uses = self.uses.fetch_add(1, Ordering::Relaxed);
        if uses % Self::RESCAN_EVERY == Self::RESCAN_EVERY - 1 {
            return None;
        }
        let due = self.due_at.load(Ordering::Relaxed);
        (due != i64::MIN).then_some(due)
    }

    /// Records where a receive found its first candidate.
    pub(crate) fn set(&self, due_at: i64) {
        self.due_at.store(due_at, Ordering::Relaxed);
    }

    /// Forgets the floor (nothing was due).
    pub(crate) fn clear(&self) {
        self.due_at.store(i64::MIN, Ordering::Relaxed);
    }
}

/// Maps [`columns!(queue)`](redrive_store::columns).
pub(crate) fn queue_from_row(r: &Row) -> StoreResult<QueueInfo> {
    QueueRow::decode(&Cols(r)).map(QueueInfo::from)
}

/// The queue, or `QueueNotFound`, key-share locked for the rest of the transaction (see
/// [`queue_opt`]).
pub(crate) async fn queue(db: &Db<'_>, name: &EntityName) -> StoreResult<Arc<QueueInfo>> {
    queue_opt(db, name.as_str())
        .await?
        .ok_or_else(|| queue_not_found(name))
}

/// The queue, if it exists. The row is locked `FOR KEY SHARE` until the transaction ends:
/// a concurrent delete of the queue waits for this operation (and an operation that starts
/// after a delete committed finds no queue), while senders, receivers and sweeps of the
/// same queue do not block each other. Cached per operation.
pub(crate) async fn queue_opt(db: &Db<'_>, name: &str) -> StoreResult<Option<Arc<QueueInfo>>> {
    let cached = db
        .queues
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(name)
        .cloned();
    if let Some(q) = cached {
        return Ok(q);
    }
    let row = db
        .query_opt(
            concat!(
                "SELECT ",
                redrive_store::columns!(queue),
                " FROM queues WHERE name = $1 FOR KEY SHARE"
            ),
            &[&name],
        )
        .await?;
    let q = match row {
        Some(r) => Some(Arc::new(queue_from_row(&r)?)),
        None => None,
    };
    if let Some(shared) = db.shared {
        let mut shared = shared.lock().unwrap_or_else(PoisonError::into_inner);
        match &q {
            Some(q) => shared.insert(name.to_owned(), Arc::clone(q)),
            None => shared.remove(name),
        };
    }
    db.queues
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(name.to_owned(), q.clone());
    Ok(q)
}

/// Forgets a cached queue (after it changed or was deleted in this operation).
pub(crate) fn forget_queue(db: &Db<'_>, name: &str) {
    db.queues
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(name);
    if let Some(shared) = db.shared {
        shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }
}

/// The shared form of a queue's guard: a transaction-level advisory lock keyed by the
/// schema and the queue's id (`$1`). Operations that found their queue in the node's
/// cache take it instead of locking the queue's row, which under concurrent operations
/// would create a MultiXact and write WAL on that one row every time; an advisory lock
/// writes nothing. `update_queue` and `delete_queue` take the exclusive form
/// ([`LOCK_QUEUE_EXCLUSIVE`]) after locking the row, so they wait for every operation
/// holding either, and make later ones wait.
pub(crate) const LOCK_QUEUE_SHARED: &str = "SELECT pg_advisory_xact_lock_shared(hashtext(current_schema() || '.queue.' || $1::bigint::text))";

/// The exclusive form of [`LOCK_QUEUE_SHARED`].
pub(crate) const LOCK_QUEUE_EXCLUSIVE: &str =
    "SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.queue.' || $1::bigint::text))";

/// The check of a cached queue, run after [`LOCK_QUEUE_SHARED`] (a statement of its own,
/// so that its snapshot is taken once the lock is held): the row still has the cached id
/// and policy version.
const CHECK_QUEUE: &str = "SELECT id, policy_version FROM queues WHERE name = $1";

/// The queue and the rows of `build(queue)`'s statements, which need its id (and
/// policy). When this node has the queue cached, the statements go out in one flight
/// right behind the queue's shared guard and the check of the cached entry (and
/// `BEGIN`): one round trip for all. If the check finds the queue changed (a new policy
/// version, or deleted and created again on any node), the entry is dropped and the
/// operation fails with a retryable error, so the transaction runs again from the start
/// with a fresh look-up. The guard excludes a concurrent change or delete of the queue
/// as [`queue_opt`]'s row lock does (both wait for either), so the outcome is the same
/// as loading the queue first.
pub(crate) async fn queue_with(
    db: &Db<'_>,
    name: &EntityName,
    build: impl Fn(&QueueInfo) -> Vec<(&'static str, Owned)>,
) -> StoreResult<(Arc<QueueInfo>, Vec<Vec<Row>>)> {
    let cached = db.shared.and_then(|shared| {
        shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name.as_str())
            .cloned()
    });
    let Some(c) = cached else {
        let q = queue(db, name).await?;
        let results = db.pipeline(build(&q)).await?;
        let rows = results.into_iter().collect::<StoreResult<Vec<_>>>()?;
        return Ok((q, rows));
    };
    let mut stmts: Vec<(&'static str, Owned)> = vec![
        (LOCK_QUEUE_SHARED, vec![Box::new(c.id)]),
        (CHECK_QUEUE, vec![Box::new(name.as_str().to_owned())]),
    ];
    stmts.extend(build(&c));
    let mut results = db.pipeline(stmts).await?.into_iter();
    results.next().unwrap_or_else(|| Ok(Vec::new()))?;
    let check = results.next().unwrap_or_else(|| Ok(Vec::new()))?;
    let same = match check.first() {
        Some(r) => {
            let id: i64 = get(r, 0)?;
            let version: i64 = get(r, 1)?;
            id == c.id && u64::try_from(version).ok() == Some(c.version)
        }
        None => false,
    };
    if !same {
        forget_queue(db, name.as_str());
        return Err(StoreError::unavailable(PostgresError::StaleQueue));
    }
    let rows = results.collect::<StoreResult<Vec<_>>>()?;
    db.queues
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(name.as_str().to_owned(), Some(Arc::clone(&c)));
    Ok((c, rows))
}

/// The id of a queue, or `QueueNotFound` (read paths that do not need its policy).
pub(crate) async fn queue_id(db: &Db<'_>, name: &EntityName) -> StoreResult<i64> {
    let row = db
        .query_opt("SELECT id FROM queues WHERE name = $1", &[&name.as_str()])
        .await?
        .ok_or_else(|| queue_not_found(name))?;
    get(&row, 0)
}

// ---- messages ---------------------------------------------------------------------------

/// Loads a full row by its key.
pub(crate) async fn load_row(db: &Db<'_>, queue_id: i64, sequence: i64) -> StoreResult<MessageRow> {
    let row = db
        .query_one(
            concat!(
                "SELECT ",
                msg_cols!(),
                " FROM messages WHERE queue_id = $1 AND sequence = $2"
            ),
            &[&queue_id, &sequence],
        )
        .await?;
    message(&row)
}

/// Message writes of one queue decided by the state machine, applied together: one
/// `UPDATE ... FROM unnest(...)` for every new meta and one `DELETE ... = ANY(...)` for
/// every removal. The rows are already locked by the operation that decided them.
#[derive(Debug, Default)]
pub(crate) struct Writes {
    /// New metas by sequence; a later decision for the same row replaces an earlier one.
    updates: BTreeMap<i64, MessageMeta>,
    /// The evidence of a failed push attempt to store with a row's new meta (an
    /// abandon's), by sequence; rows without one keep theirs.
    attempts: BTreeMap<i64, String>,
    deletes: Vec<i64>,
}

impl Writes {
    /// Stores `meta` for the message at `flush`.
    pub(crate) fn update(&mut self, sequence: i64, meta: MessageMeta) {
        self.updates.insert(sequence, meta);
    }

    /// Stores `meta` for the message at `flush`, with `attempt` as the evidence of its
    /// last failed push attempt, in the same statement.
    pub(crate) fn update_with_attempt(
        &mut self,
        sequence: i64,
        meta: MessageMeta,
        attempt: String,
    ) {
        self.updates.insert(sequence, meta);
        self.attempts.insert(sequence, attempt);
    }

    /// Removes the message at `flush`.
    pub(crate) fn delete(&mut self, sequence: i64) {
        self.updates.remove(&sequence);
        self.attempts.remove(&sequence);
        self.deletes.push(sequence);
    }

    /// Drops any pending write of a message that was removed directly (dead-lettered).
    pub(crate) fn forget(&mut self, sequence: i64) {
        self.updates.remove(&sequence);
        self.attempts.remove(&sequence);
        self.deletes.retain(|s| *s != sequence);
    }

    /// Applies and clears the pending writes: one `UPDATE` and one `DELETE`, sent with
    /// the operation's next statement or its `COMMIT` ([`Db::defer`]).
    pub(crate) async fn flush(&mut self, db: &Db<'_>, queue_id: i64) -> StoreResult<()> {
        if !self.updates.is_empty() {
            let updates = std::mem::take(&mut self.updates);
            let mut attempts = std::mem::take(&mut self.attempts);
            let n = updates.len();
            let mut seq = Vec::with_capacity(n);
            let mut state = Vec::with_capacity(n);
            let mut visible_at = Vec::with_capacity(n);
            let mut expires_at = Vec::with_capacity(n);
            let mut delivery_count = Vec::with_capacity(n);
            let mut lock_token = Vec::with_capacity(n);
            let mut locked_until = Vec::with_capacity(n);
            let mut deferred = Vec::with_capacity(n);
            let mut first = Vec::with_capacity(n);
            let mut last = Vec::with_capacity(n);
            let mut attempt: Vec<Option<String>> = Vec::with_capacity(n);
            for (s, m) in updates {
                attempt.push(attempts.remove(&s));
                seq.push(s);
                state.push(m.state.as_str());
                visible_at.push(m.visible_at.0);
                expires_at.push(millis(m.expires_at));
                delivery_count.push(i64::from(m.delivery_count));
                lock_token.push(m.lock_token);
                locked_until.push(millis(m.locked_until));
                deferred.push(m.deferred);
                first.push(millis(m.first_delivered_at));
                last.push(millis(m.last_delivered_at));
            }
            db.defer(
                "UPDATE messages AS m SET state = u.state, visible_at = u.visible_at, \
                 expires_at = u.expires_at, delivery_count = u.delivery_count, \
                 lock_token = u.lock_token, locked_until = u.locked_until, \
                 deferred = u.deferred, first_delivered_at = u.first_delivered_at, \
                 last_delivered_at = u.last_delivered_at, \
                 last_attempt = coalesce(u.last_attempt, m.last_attempt) \
                 FROM unnest($2::bigint[], $3::text[], $4::bigint[], $5::bigint[], \
                   $6::bigint[], $7::text[], $8::bigint[], $9::boolean[], $10::bigint[], \
                   $11::bigint[], $12::text[]) \
                   AS u(sequence, state, visible_at, expires_at, delivery_count, lock_token, \
                        locked_until, deferred, first_delivered_at, last_delivered_at, \
                        last_attempt) \
                 WHERE m.queue_id = $1 AND m.sequence = u.sequence",
                vec![
                    Box::new(queue_id),
                    Box::new(seq),
                    Box::new(state),
                    Box::new(visible_at),
                    Box::new(expires_at),
                    Box::new(delivery_count),
                    Box::new(lock_token),
                    Box::new(locked_until),
                    Box::new(deferred),
                    Box::new(first),
                    Box::new(last),
                    Box::new(attempt),
                ],
            )
            .await?;
        }
        if !self.deletes.is_empty() {
            let deletes = std::mem::take(&mut self.deletes);
            db.defer(DELETE_ROWS, vec![Box::new(queue_id), Box::new(deletes)])
                .await?;
        }
        Ok(())
    }
}

const DELETE_ROWS: &str =
    "DELETE FROM messages WHERE queue_id = $1 AND sequence = ANY($2::bigint[])";

/// Removes message rows.
pub(crate) async fn delete_rows(db: &Db<'_>, queue_id: i64, sequences: &[i64]) -> StoreResult<()> {
    db.execute(DELETE_ROWS, &[&queue_id, &sequences]).await?;
    Ok(())
}

/// Serialises the senders of the named sessions (or message groups) of a queue until
/// the transaction ends: a transaction-level advisory lock per (schema and queue,
/// session), taken in the order given (callers sort, so two batches cannot deadlock).
/// Taken before the sequence numbers are drawn, it makes sequence order commit order
/// within a session: the next sender of the session draws its numbers only after this
/// one committed or rolled back. (The key space differs from the receive side's group
/// locks, so senders and receivers do not wait on each other.)
pub(crate) const LOCK_SESSION_SENDERS: &str = "SELECT count(pg_advisory_xact_lock(\
     hashtext(current_schema() || '.send.' || $1::bigint::text), hashtext(s))) \
     FROM unnest($2::text[]) AS s";

/// Draws `$2` numbers from the queue's sequence (`queue_seq_<id>`, created with the
/// queue). `nextval` neither waits nor is undone by a rollback, so senders of one queue
/// run side by side; numbers are unique and increasing, and a rolled-back send leaves a
/// gap.
pub(crate) const NEXT_SEQUENCES: &str =
    "SELECT nextval(('queue_seq_' || $1::bigint)::regclass) FROM generate_series(1, $2::int)";

/// The statements that reserve `n` sequence numbers of a queue for messages of
/// `sessions` (sorted, distinct): the session locks, if any, then the draw. Run them
/// with [`Db::pipeline`]; [`drawn`] reads the numbers from the last one's rows.
pub(crate) fn sequence_statements(
    queue_id: i64,
    sessions: Vec<String>,
    n: i32,
) -> Vec<(&'static str, Owned)> {
    let mut out: Vec<(&'static str, Owned)> = Vec::with_capacity(2);
    if !sessions.is_empty() {
        out.push((
            LOCK_SESSION_SENDERS,
            vec![Box::new(queue_id), Box::new(sessions)],
        ));
    }
    out.push((NEXT_SEQUENCES, vec![Box::new(queue_id), Box::new(n)]));
    out
}

/// A batch size as bound.
pub(crate) fn batch_size(n: usize) -> StoreResult<i32> {
    i32::try_from(n).map_err(|_| redrive_store::skeleton::RowError::OutOfRange("batch size").into())
}

/// The numbers drawn by [`NEXT_SEQUENCES`], ascending.
pub(crate) fn drawn(rows: &[Row]) -> StoreResult<Vec<i64>> {
    let mut v = decode(rows, |r| get::<i64>(r, 0))?;
    v.sort_unstable();
    Ok(v)
}

/// The distinct session ids among `sessions`, sorted.
pub(crate) fn session_keys<'s>(sessions: impl Iterator<Item = Option<&'s str>>) -> Vec<String> {
    let mut v: Vec<String> = sessions.flatten().map(str::to_owned).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Reserves `n` sequence numbers on a queue for messages of `sessions` (see
/// [`sequence_statements`]); ascending.
pub(crate) async fn allocate_sequences(
    db: &Db<'_>,
    queue_id: i64,
    sessions: Vec<String>,
    n: usize,
) -> StoreResult<Vec<i64>> {
    let results = db
        .pipeline(sequence_statements(queue_id, sessions, batch_size(n)?))
        .await?;
    let mut last = Vec::new();
    for r in results {
        last = r?;
    }
    drawn(&last)
}

/// Reserves one sequence number on a queue for a message of `session`.
pub(crate) async fn allocate_one(
    db: &Db<'_>,
    queue_id: i64,
    session: Option<&str>,
) -> StoreResult<i64> {
    allocate_sequences(db, queue_id, session_keys(std::iter::once(session)), 1)
        .await?
        .first()
        .copied()
        .ok_or_else(|| invariant("a sequence draw returned no number"))
}

/// Inserts Available, never delivered messages, all enqueued at `now`, in one statement.
pub(crate) async fn insert_messages(
    db: &Db<'_>,
    queue_id: i64,
    now: Timestamp,
    rows: &[NewRow<'_>],
) -> StoreResult<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let sequence: Vec<i64> = rows.iter().map(|r| r.sequence).collect();
    let message_id: Vec<String> = rows.iter().map(|r| r.message_id.to_owned()).collect();
    let body: Vec<Vec<u8>> = rows.iter().map(|r| r.body.to_vec()).collect();
    let owned = |v: Option<&str>| v.map(str::to_owned);
    let content_type: Vec<Option<String>> = rows.iter().map(|r| owned(r.content_type)).collect();
    let properties: Vec<Option<String>> = rows.iter().map(|r| r.properties.clone()).collect();
    let correlation_id: Vec<Option<String>> =
        rows.iter().map(|r| owned(r.correlation_id)).collect();
    let session_id: Vec<Option<String>> = rows.iter().map(|r| owned(r.session_id)).collect();
    let message_type: Vec<Option<String>> = rows.iter().map(|r| owned(r.message_type)).collect();
    let intent: Vec<Option<String>> = rows.iter().map(|r| owned(r.intent)).collect();
    let valid_until: Vec<Option<i64>> = rows.iter().map(|r| millis(r.valid_until)).collect();
    let scheduled_at: Vec<Option<i64>> = rows.iter().map(|r| millis(r.scheduled_at)).collect();
    let visible_at: Vec<i64> = rows.iter().map(|r| r.visible_at.0).collect();
    let expires_at: Vec<Option<i64>> = rows.iter().map(|r| millis(r.expires_at)).collect();
    db.defer(
        "INSERT INTO messages (queue_id, sequence, message_id, body, content_type, properties, \
         correlation_id, session_id, message_type, intent, valid_until, enqueued_at, \
         scheduled_at, state, visible_at, expires_at, delivery_count, deferred) \
         SELECT $1, u.sequence, u.message_id, u.body, u.content_type, u.properties, \
           u.correlation_id, u.session_id, u.message_type, u.intent, u.valid_until, $2, \
           u.scheduled_at, 'available', u.visible_at, u.expires_at, 0, false \
         FROM unnest($3::bigint[], $4::text[], $5::bytea[], $6::text[], $7::text[], \
           $8::text[], $9::text[], $10::text[], $11::text[], $12::bigint[], $13::bigint[], \
           $14::bigint[], $15::bigint[]) \
           AS u(sequence, message_id, body, content_type, properties, correlation_id, \
                session_id, message_type, intent, valid_until, scheduled_at, visible_at, \
                expires_at)",
        vec![
            Box::new(queue_id),
            Box::new(now.0),
            Box::new(sequence),
            Box::new(message_id),
            Box::new(body),
            Box::new(content_type),
            Box::new(properties),
            Box::new(correlation_id),
            Box::new(session_id),
            Box::new(message_type),
            Box::new(intent),
            Box::new(valid_until),
            Box::new(scheduled_at),
            Box::new(visible_at),
            Box::new(expires_at),
        ],
    )
    .await
}

// ---- dead letters ----------------------------------------------------------------------

/// The `INSERT` of dead-letter records (unlocked) from one array per column, then `$tail`.
macro_rules! insert_records_sql {
    ($tail:literal) => {
        concat!(
            "INSERT INTO dead_letters (id, queue, area, message_id, sequence, session_id, body, \
             body_sha256, content_type, properties, correlation_id, message_type, intent, \
             valid_until, reason, description, delivery_count, count_quality, \
             first_delivered_at, last_delivered_at, enqueued_at, dead_lettered_at, \
             policy_version, route, forwarded_queue, forwarded_sequence, dlq_delivery_count, \
             format, replay_due_at, replay_failures, last_replay_error, judgement, replay_cause, \
             route_target, missing_target, route_kind, route_rule, consumer, rule_version, \
             signature, source) \
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], \
               $5::bigint[], $6::text[], $7::bytea[], $8::text[], $9::text[], $10::text[], \
               $11::text[], $12::text[], $13::text[], $14::bigint[], $15::text[], $16::text[], \
               $17::bigint[], $18::text[], $19::bigint[], $20::bigint[], $21::bigint[], \
               $22::bigint[], $23::bigint[], $24::text[], $25::text[], $26::bigint[], \
               $27::bigint[], $28::text[], $29::bigint[], $30::bigint[], $31::text[], \
               $32::text[], $33::text[], $34::text[], $35::text[], $36::text[], $37::text[], \
               $38::text[], $39::text[], $40::text[], $41::text[])",
            $tail
        )
    };
}

/// Whether an insert of records that already exist fails or leaves them as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnConflict {
    /// A record whose id exists fails the statement (and the operation).
    Fail,
    /// A record whose id exists is skipped (create-if-absent).
    Skip,
}

/// Most records one `INSERT` of [`insert_records`] carries.
const RECORDS_PER_STATEMENT: usize = 500;
/// Most body bytes one `INSERT` of [`insert_records`] carries (a batch holds at least one
/// record, whatever its size).
const RECORD_BYTES_PER_STATEMENT: usize = 8 * 1024 * 1024;

/// Inserts one dead-letter record (unlocked) and opens its case, if it is one, at `now`.
pub(crate) async fn insert_record(
    db: &Db<'_>,
    d: &DeadLetterRecord,
    now: Timestamp,
) -> StoreResult<()> {
    insert_records(db, std::slice::from_ref(d), OnConflict::Fail, now).await?;
    Ok(())
}

/// Inserts dead-letter records (unlocked), every column from the record (the replay
/// columns included: `judgement` and `replay_cause` as the skeleton writes them), in
/// statements of at most [`RECORDS_PER_STATEMENT`] records and about
/// [`RECORD_BYTES_PER_STATEMENT`] of bodies, then opens the cases of those that are
/// cases (`crate::cases::open`, at `now`; a record skipped because its id exists keeps
/// whatever case it has). Returns how many were inserted.
pub(crate) async fn insert_records(
    db: &Db<'_>,
    records: &[DeadLetterRecord],
    on_conflict: OnConflict,
    now: Timestamp,
) -> StoreResult<u64> {
    let mut inserted = 0;
    let mut rest = records;
    while !rest.is_empty() {
        let mut n = 0;
        let mut bytes = 0;
        while n < rest.len() && n < RECORDS_PER_STATEMENT {
            bytes += rest[n].body.len();
            if n > 0 && bytes > RECORD_BYTES_PER_STATEMENT {
                break;
            }
            n += 1;
        }
        let (batch, tail) = rest.split_at(n);
        inserted += insert_batch(db, batch, on_conflict).await?;
        rest = tail;
    }
    crate::cases::open(db, records.iter().map(|r| r.id.clone()).collect(), now).await?;
    Ok(inserted)
}

/// One `INSERT` of [`insert_records`].
async fn insert_batch(
    db: &Db<'_>,
    records: &[DeadLetterRecord],
    on_conflict: OnConflict,
) -> StoreResult<u64> {
    let n = records.len();
    let mut id = Vec::with_capacity(n);
    let mut queue = Vec::with_capacity(n);
    let mut area = Vec::with_capacity(n);
    let mut message_id = Vec::with_capacity(n);
    let mut sequence = Vec::with_capacity(n);
    let mut session_id = Vec::with_capacity(n);
    let mut body = Vec::with_capacity(n);
    let mut body_sha256 = Vec::with_capacity(n);
    let mut content_type = Vec::with_capacity(n);
    let mut properties = Vec::with_capacity(n);
    let mut correlation_id = Vec::with_capacity(n);
    let mut message_type = Vec::with_capacity(n);
    let mut intent = Vec::with_capacity(n);
    let mut valid_until = Vec::with_capacity(n);
    let mut reason = Vec::with_capacity(n);
    let mut description = Vec::with_capacity(n);
    let mut delivery_count = Vec::with_capacity(n);
    let mut count_quality = Vec::with_capacity(n);
    let mut first_delivered_at = Vec::with_capacity(n);
    let mut last_delivered_at = Vec::with_capacity(n);
    let mut enqueued_at = Vec::with_capacity(n);
    let mut dead_lettered_at = Vec::with_capacity(n);
    let mut policy_version = Vec::with_capacity(n);
    let mut route = Vec::with_capacity(n);
    let mut forwarded_queue = Vec::with_capacity(n);
    let mut forwarded_sequence = Vec::with_capacity(n);
    let mut dlq_delivery_count = Vec::with_capacity(n);
    let mut format = Vec::with_capacity(n);
    let mut replay_due_at = Vec::with_capacity(n);
    let mut replay_failures = Vec::with_capacity(n);
    let mut last_replay_error = Vec::with_capacity(n);
    let mut judgement = Vec::with_capacity(n);
    let mut replay_cause = Vec::with_capacity(n);
    let mut route_target = Vec::with_capacity(n);
    let mut missing_target = Vec::with_capacity(n);
    let mut route_kind = Vec::with_capacity(n);
    let mut route_rule = Vec::with_capacity(n);
    let mut consumer = Vec::with_capacity(n);
    let mut rule_version = Vec::with_capacity(n);
    let mut signature = Vec::with_capacity(n);
    let mut source = Vec::with_capacity(n);
    let mut shapes: Vec<(String, FailureShape)> = Vec::with_capacity(n);
    for d in records {
        let shape = FailureShape::of(d);
        let signature_id = shape.id();
        signature.push(signature_id.clone());
        source.push(shape.source.clone());
        shapes.push((signature_id, shape));
        id.push(d.id.clone());
        queue.push(d.queue.as_str().to_owned());
        area.push(d.area.as_str());
        message_id.push(d.message_id.clone());
        sequence.push(d.sequence);
        session_id.push(d.session_id.clone());
        body.push(d.body.clone());
        body_sha256.push(d.body_sha256.clone());
        content_type.push(d.content_type.clone());
        properties.push(props_to_json(&d.properties)?);
        correlation_id.push(d.correlation_id.clone());
        message_type.push(d.message_type.clone());
        intent.push(d.intent.clone());
        valid_until.push(millis(d.valid_until));
        reason.push(d.reason.clone());
        description.push(d.description.clone());
        delivery_count.push(i64::from(d.delivery_count));
        count_quality.push(d.count_quality.as_str());
        first_delivered_at.push(millis(d.first_delivered_at));
        last_delivered_at.push(millis(d.last_delivered_at));
        enqueued_at.push(d.enqueued_at.0);
        dead_lettered_at.push(d.dead_lettered_at.0);
        // 0: no version is known (policy versions start at 1).
        policy_version.push(to_int(d.policy_version.unwrap_or(0), "policy_version")?);
        route.push(d.route.as_str());
        forwarded_queue.push(d.forwarded_to.as_ref().map(|(q, _)| q.as_str().to_owned()));
        forwarded_sequence.push(d.forwarded_to.as_ref().map(|(_, s)| *s));
        dlq_delivery_count.push(i64::from(d.dlq_delivery_count));
        format.push(d.format.as_str());
        replay_due_at.push(millis(d.replay.due_at));
        replay_failures.push(i64::from(d.replay.failures));
        last_replay_error.push(d.replay.last_error.clone());
        judgement.push(replay::judgement_column(d.judgement.as_ref())?);
        replay_cause.push(replay::cause_column(d.judgement.as_ref()));
        route_target.push(d.route_target.as_str());
        missing_target.push(d.missing_target.clone());
        route_kind.push(d.route_kind.as_str());
        route_rule.push(d.route_rule.map(|r| r.as_str()));
        consumer.push(d.consumer.clone());
        rule_version.push(d.rule_version.clone());
    }
    insert_signatures(db, &shapes).await?;
    let sql = match on_conflict {
        OnConflict::Fail => insert_records_sql!(""),
        OnConflict::Skip => insert_records_sql!(" ON CONFLICT (id) DO NOTHING"),
    };
    db.execute(
        sql,
        &[
            &id,
            &queue,
            &area,
            &message_id,
            &sequence,
            &session_id,
            &body,
            &body_sha256,
            &content_type,
            &properties,
            &correlation_id,
            &message_type,
            &intent,
            &valid_until,
            &reason,
            &description,
            &delivery_count,
            &count_quality,
            &first_delivered_at,
            &last_delivered_at,
            &enqueued_at,
            &dead_lettered_at,
            &policy_version,
            &route,
            &forwarded_queue,
            &forwarded_sequence,
            &dlq_delivery_count,
            &format,
            &replay_due_at,
            &replay_failures,
            &last_replay_error,
            &judgement,
            &replay_cause,
            &route_target,
            &missing_target,
            &route_kind,
            &route_rule,
            &consumer,
            &rule_version,
            &signature,
            &source,
        ],
    )
    .await
}

/// Keeps the fields of the failure signatures of a batch (once each; an id is a hash of
/// its fields), before the records that name them are inserted.
pub(crate) async fn insert_signatures(
    db: &Db<'_>,
    shapes: &[(String, FailureShape)],
) -> StoreResult<()> {
    let mut id = Vec::with_capacity(shapes.len());
    let mut queue = Vec::with_capacity(shapes.len());
    let mut reason = Vec::with_capacity(shapes.len());
    let mut route_kind = Vec::with_capacity(shapes.len());
    let mut outcome_class = Vec::with_capacity(shapes.len());
    let mut message_type = Vec::with_capacity(shapes.len());
    let mut source = Vec::with_capacity(shapes.len());
    let mut description = Vec::with_capacity(shapes.len());
    for (i, s) in shapes {
        id.push(i.clone());
        queue.push(s.queue.as_str().to_owned());
        reason.push(s.reason.clone());
        route_kind.push(s.route_kind.clone());
        outcome_class.push(s.outcome_class.clone());
        message_type.push(s.message_type.clone());
        source.push(s.source.clone());
        description.push(s.description.clone());
    }
    db.execute(
        "INSERT INTO failure_signatures (id, queue, reason, route_kind, outcome_class, \
         message_type, source, description) \
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
           $6::text[], $7::text[], $8::text[]) ON CONFLICT (id) DO NOTHING",
        &[
            &id,
            &queue,
            &reason,
            &route_kind,
            &outcome_class,
            &message_type,
            &source,
            &description,
        ],
    )
    .await?;
    Ok(())
}
