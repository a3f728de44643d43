//! Message locks held in memory.
//!
//! Only this process writes the file, so the lock of a message (holder token, lock expiry,
//! delivery count) need not be in its row while the process runs. A receive on a queue
//! without sessions locks the message here and writes nothing; its row keeps the state it
//! had (Available, visible since before the receive). Completing deletes the row by key;
//! an abandon, a deferral, a dead letter or a lock that runs out writes the row from the
//! state held here, in one statement, as before. So a receive costs no row rewrite and no
//! sync, and a receive + complete one row delete.
//!
//! Everything that reads a message on the write connection sees it through [`LockTable`]
//! (`overlay`): the state machine decides on the message as it is, locked. The reads on
//! the read pool do the same for peeks, wake-up times and counts.
//!
//! # Transactions
//!
//! The table changes inside the writer's jobs and follows their transactions: every change
//! is journaled, a job rolled back to its savepoint undoes its own changes, a transaction
//! rolled back undoes all of them, a commit forgets the journal ([`LockTable::committed`]).
//!
//! # Crashes
//!
//! A lock lost in a crash is only a lock released early: the message is delivered again,
//! as after a lock expiry. Its delivery is not lost from the count, though. The first lock
//! held for a queue writes a marker row (`memory_locks`) in the receive's transaction; the
//! sweep removes the marker once no lock of the queue is held, and a clean close writes
//! every held lock to its row (locks survive a restart, as they did in the row) and
//! removes all markers. A marker found at open means the process stopped without closing
//! while locks of that queue may have been held: every Available message of the queue
//! then counts one delivery more, marked `count_approximate`, and a dead letter made of
//! it reports its delivery count as `approximate` ([`recover`]). A count may so be one too
//! high after a crash, never too low.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use redrive_core::Timestamp;
use redrive_core::{MessageMeta, MessageState, QueuePolicy};
use redrive_store::skeleton::Head;
use redrive_store::skeleton::messages::count_expired_locks;
use redrive_store::{AuditFields, QueueCounts, StoreResult};
use rusqlite::{Connection, params};

use crate::error::Db;

/// Most locks held in memory at once; past it a receive locks the row, as before.
pub(crate) const MAX_HELD: usize = 100_000;

/// A position in a queue's receive order: `(due_at, sequence)`.
pub(crate) type Position = (i64, i64);

/// A lock held in memory.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Held {
    pub(crate) queue_id: i64,
    pub(crate) sequence: i64,
    pub(crate) message_id: String,
    /// The message as the state machine sees it: Locked.
    pub(crate) meta: MessageMeta,
    /// The message as its row stores it.
    pub(crate) stored: MessageMeta,
}

impl Held {
    /// The message's head as it is (locked), for the state machine.
    pub(crate) fn head(&self, key: i64) -> Head {
        Head {
            key,
            sequence: self.sequence,
            message_id: self.message_id.clone(),
            session_id: None,
            meta: self.meta.clone(),
        }
    }

    fn expiry(&self, key: i64) -> (i64, i64) {
        (self.meta.locked_until.map_or(i64::MIN, |t| t.0), key)
    }
}

#[derive(Debug, Default)]
struct QueueLocks {
    /// The keys held, by lock expiry.
    by_expiry: BTreeSet<(i64, i64)>,
    /// Every row of the queue that the store shows Available and due at or before this
    /// position is held here: a receive reads candidates after it.
    hint: Option<Position>,
    /// Whether the queue's `memory_locks` marker is written (committed or in the open
    /// transaction).
    marked: bool,
}

/// One journaled change, with the value it replaced.
#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "the journal is a vector kept across transactions: a boxed lock would cost an \
              allocation per change"
)]
enum Undo {
    Held(i64, Option<Held>),
    Hint(i64, Option<Position>),
    Marked(i64, bool),
}

/// The locks held in memory, by row key (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct LockTable {
    held: HashMap<i64, Held>,
    queues: HashMap<i64, QueueLocks>,
    journal: Vec<Undo>,
    job_from: usize,
    /// Whether any row's count is approximate ([`recover`]), as found at open.
    approximate_rows: bool,
}

/// The table as the store shares it between the writer and the read pool.
#[derive(Debug)]
pub(crate) struct Locks(Mutex<LockTable>);

impl Locks {
    /// The table of a store just opened: `approximate_rows` as [`recover`] found it.
    pub(crate) fn new(approximate_rows: bool) -> Locks {
        Locks(Mutex::new(LockTable {
            approximate_rows,
            ..LockTable::default()
        }))
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, LockTable> {
        // The table is consistent after every call: a panic elsewhere cannot leave it
        // half-changed.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl LockTable {
    /// Whether a row may have an approximate count (see [`count_approximate`]).
    pub(crate) fn approximate_rows(&self) -> bool {
        self.approximate_rows
    }

    /// How many locks are held.
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }

    /// The lock held for `key`.
    pub(crate) fn get(&self, key: i64) -> Option<&Held> {
        self.held.get(&key)
    }

    /// Shows `head` as it is: its meta replaced by the lock held for it. Returns the meta
    /// its row stores when a lock is held.
    pub(crate) fn overlay(&self, head: &mut Head) -> Option<MessageMeta> {
        let held = self.held.get(&head.key)?;
        head.meta = held.meta.clone();
        Some(held.stored.clone())
    }

    /// Holds (or renews) the lock of `key`.
    pub(crate) fn hold(&mut self, key: i64, held: Held) {
        let old = self.set(key, Some(held));
        self.journal.push(Undo::Held(key, old));
    }

    /// Drops the lock held for `key`, if any; returns it.
    pub(crate) fn release(&mut self, key: i64) -> Option<Held> {
        if !self.held.contains_key(&key) {
            return None;
        }
        let old = self.set(key, None);
        self.journal.push(Undo::Held(key, old.clone()));
        old
    }

    fn set(&mut self, key: i64, new: Option<Held>) -> Option<Held> {
        let old = match &new {
            Some(h) => self.held.insert(key, h.clone()),
            None => self.held.remove(&key),
        };
        if let Some(o) = &old
            && let Some(q) = self.queues.get_mut(&o.queue_id)
        {
            q.by_expiry.remove(&o.expiry(key));
        }
        if let Some(n) = &new {
            let q = self.queues.entry(n.queue_id).or_default();
            q.by_expiry.insert(n.expiry(key));
        }
        old
    }

    /// The heads (as they are: locked) of the locks of `queue_id` that ran out by `now`,
    /// oldest expiry first, at most `max`.
    pub(crate) fn expired(&self, queue_id: i64, now: Timestamp, max: usize) -> Vec<Head> {
        let Some(q) = self.queues.get(&queue_id) else {
            return Vec::new();
        };
        q.by_expiry
            .range(..=(now.0, i64::MAX))
            .take(max)
            .filter_map(|&(_, key)| self.held.get(&key).map(|h| h.head(key)))
            .collect()
    }

    /// How many locks of `queue_id` are held.
    pub(crate) fn held_in(&self, queue_id: i64) -> usize {
        self.queues.get(&queue_id).map_or(0, |q| q.by_expiry.len())
    }

    /// When the first lock of `queue_id` held here runs out.
    pub(crate) fn next_unlock(&self, queue_id: i64) -> Option<i64> {
        let q = self.queues.get(&queue_id)?;
        q.by_expiry.first().map(|&(t, _)| t)
    }

    /// Drops every lock of `queue_id` (its rows were deleted: a purge, a deletion).
    pub(crate) fn drop_queue(&mut self, queue_id: i64) {
        let keys: Vec<i64> = match self.queues.get(&queue_id) {
            Some(q) => q.by_expiry.iter().map(|&(_, k)| k).collect(),
            None => return,
        };
        for key in keys {
            self.release(key);
        }
        self.set_hint(queue_id, None);
    }

    /// Where a receive on `queue_id` may start reading candidates.
    pub(crate) fn hint(&self, queue_id: i64) -> Option<Position> {
        self.queues.get(&queue_id).and_then(|q| q.hint)
    }

    pub(crate) fn set_hint(&mut self, queue_id: i64, hint: Option<Position>) {
        let q = self.queues.entry(queue_id).or_default();
        if q.hint != hint {
            let old = std::mem::replace(&mut q.hint, hint);
            self.journal.push(Undo::Hint(queue_id, old));
        }
    }

    /// A row of `queue_id` was written Available, visible at `visible_at`: a receive must
    /// find it, so the hint goes if the row is at or before it.
    pub(crate) fn written_available(&mut self, queue_id: i64, visible_at: i64, sequence: i64) {
        if let Some(h) = self.hint(queue_id)
            && (visible_at, sequence) <= h
        {
            self.set_hint(queue_id, None);
        }
    }

    /// Whether the `memory_locks` marker of `queue_id` is written.
    pub(crate) fn marked(&self, queue_id: i64) -> bool {
        self.queues.get(&queue_id).is_some_and(|q| q.marked)
    }

    pub(crate) fn set_marked(&mut self, queue_id: i64, marked: bool) {
        let q = self.queues.entry(queue_id).or_default();
        if q.marked != marked {
            q.marked = marked;
            self.journal.push(Undo::Marked(queue_id, !marked));
        }
    }

    /// The queues marked while none of their locks is held.
    pub(crate) fn idle_marked(&self) -> Vec<i64> {
        self.queues
            .iter()
            .filter(|(_, q)| q.marked && q.by_expiry.is_empty())
            .map(|(&id, _)| id)
            .collect()
    }

    /// Corrects `counts` of `queue_id`, read from the rows, for the locks held here: a
    /// held message is counted as its row shows it (Available) by the rows' counts, and
    /// as it is (Locked, or as its released lock leaves it when it ran out) here.
    pub(crate) fn correct_counts(
        &self,
        queue_id: i64,
        policy: &QueuePolicy,
        counts: &mut QueueCounts,
        now: Timestamp,
    ) {
        let Some(q) = self.queues.get(&queue_id) else {
            return;
        };
        let mut expired = Vec::new();
        for &(until, key) in &q.by_expiry {
            let Some(held) = self.held.get(&key) else {
                continue;
            };
            if held.stored.state == MessageState::Available && held.stored.visible_at <= now {
                counts.active = counts.active.saturating_sub(1);
            } else {
                counts.scheduled = counts.scheduled.saturating_sub(1);
            }
            if until > now.0 {
                counts.locked += 1;
            } else {
                expired.push(held.head(key));
            }
        }
        count_expired_locks(counts, &expired, policy, now);
    }

    /// Marks the start of a job: [`LockTable::job_rolled_back`] undoes what follows.
    pub(crate) fn begin_job(&mut self) {
        self.job_from = self.journal.len();
    }

    /// Undoes the changes of the job rolled back to its savepoint.
    pub(crate) fn job_rolled_back(&mut self) {
        self.undo_to(self.job_from);
    }

    /// Undoes every change of the transaction rolled back.
    pub(crate) fn rolled_back(&mut self) {
        self.undo_to(0);
        self.job_from = 0;
    }

    /// The transaction committed: its changes stay.
    pub(crate) fn committed(&mut self) {
        self.journal.clear();
        self.job_from = 0;
    }

    fn undo_to(&mut self, mark: usize) {
        while self.journal.len() > mark {
            match self.journal.pop() {
                Some(Undo::Held(key, old)) => {
                    self.set(key, old);
                }
                Some(Undo::Hint(queue, old)) => self.queues.entry(queue).or_default().hint = old,
                Some(Undo::Marked(queue, old)) => {
                    self.queues.entry(queue).or_default().marked = old;
                }
                None => break,
            }
        }
    }

    /// Takes every held lock and marker out of the table (a clean close writes them).
    pub(crate) fn take_all(&mut self) -> Vec<(i64, Held)> {
        self.journal.clear();
        self.job_from = 0;
        self.queues.clear();
        self.held.drain().collect()
    }
}

/// Writes the marker of `queue_id` if it is not written yet (see the module
/// documentation); the caller holds a lock of the queue in the same transaction.
pub(crate) fn mark(conn: &Connection, table: &mut LockTable, queue_id: i64) -> StoreResult<()> {
    if table.marked(queue_id) {
        return Ok(());
    }
    conn.prepare_cached("INSERT OR IGNORE INTO memory_locks (queue_id) VALUES (?1)")
        .db()?
        .execute([queue_id])
        .db()?;
    table.set_marked(queue_id, true);
    Ok(())
}

/// Removes the markers of the queues none of whose locks is held (the sweep's).
pub(crate) fn unmark_idle(conn: &Connection, table: &mut LockTable) -> StoreResult<()> {
    for queue_id in table.idle_marked() {
        conn.prepare_cached("DELETE FROM memory_locks WHERE queue_id = ?1")
            .db()?
            .execute([queue_id])
            .db()?;
        table.set_marked(queue_id, false);
    }
    Ok(())
}

/// The audit action of [`recover`]'s decision, one entry per queue concerned.
pub(crate) const RAISED_ACTION: &str = "messages.count_raised";

/// At open, before any write: a marker left means the process stopped without closing
/// while locks of that queue may have been held in memory. Every Available message of such
/// a queue counts one delivery more, marked approximate: which of them were delivered is
/// not known, and a delivery must not go uncounted. The decision is an audit entry per
/// queue (by `system`, at `now`, the queue as its entity and the number of messages raised
/// as its target). Returns whether any message's count is approximate now (raised now or
/// by an earlier crash).
pub(crate) fn recover(conn: &Connection, now: Timestamp) -> StoreResult<bool> {
    let tx = conn.unchecked_transaction().db()?;
    let per_queue: Vec<(String, i64)> = {
        let mut stmt = tx
            .prepare(
                "SELECT q.name, count(*) FROM memory_locks k \
                 JOIN queues q ON q.id = k.queue_id \
                 JOIN messages m ON m.queue_id = k.queue_id \
                   AND m.state = 'available' AND m.session_id IS NULL \
                 GROUP BY q.name ORDER BY q.name",
            )
            .db()?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).db()?;
        rows.collect::<rusqlite::Result<_>>().db()?
    };
    let entries: Vec<AuditFields> = per_queue
        .into_iter()
        .map(|(queue, n)| AuditFields {
            at: now,
            actor_id: "system".into(),
            actor_name: "recovery".into(),
            action: RAISED_ACTION.into(),
            entity: Some(queue),
            targets: vec![format!("messages={n}")],
            outcome: "ok".into(),
            client: None,
        })
        .collect();
    if !entries.is_empty() {
        crate::access::append_on(&tx, &entries)?;
    }
    let raised = tx
        .execute(
            "UPDATE messages SET delivery_count = delivery_count + 1, count_approximate = 1 \
             WHERE state = 'available' AND session_id IS NULL \
               AND queue_id IN (SELECT queue_id FROM memory_locks)",
            [],
        )
        .db()?;
    tx.execute("DELETE FROM memory_locks", []).db()?;
    let approximate = tx
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM messages WHERE count_approximate = 1)",
            [],
            |r| r.get(0),
        )
        .db()?;
    tx.commit().db()?;
    if raised > 0 {
        tracing::warn!(
            messages = raised,
            "the store was not closed while message locks were held in memory: the \
             delivery counts of the queues concerned were raised by one and marked approximate"
        );
    }
    Ok(approximate)
}

/// At a clean close: writes every held lock to its row, as a lock in the row would have
/// been, and removes every marker, in one transaction.
pub(crate) fn flush(conn: &Connection, held: &[(i64, Held)]) -> StoreResult<()> {
    let tx = conn.unchecked_transaction().db()?;
    for (key, h) in held {
        crate::rows::write_meta(&tx, *key, &h.meta)?;
    }
    tx.execute("DELETE FROM memory_locks", []).db()?;
    tx.commit().db()
}

/// Whether the row at `key` was marked approximate by [`recover`].
pub(crate) fn count_approximate(conn: &Connection, key: i64) -> StoreResult<bool> {
    conn.prepare_cached("SELECT count_approximate FROM messages WHERE rowid = ?1")
        .db()?
        .query_row(params![key], |r| r.get(0))
        .db()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(queue_id: i64, until: i64) -> Held {
        let mut meta = MessageMeta::sent(Timestamp(0), None);
        let stored = meta.clone();
        meta.state = MessageState::Locked;
        meta.locked_until = Some(Timestamp(until));
        meta.delivery_count = 1;
        Held {
            queue_id,
            sequence: until,
            message_id: format!("m{until}"),
            meta,
            stored,
        }
    }

    #[test]
    fn a_job_rolled_back_undoes_only_its_own_changes() {
        let mut t = LockTable::default();
        t.begin_job();
        t.hold(1, held(7, 100));
        t.set_hint(7, Some((0, 1)));
        t.set_marked(7, true);
        t.begin_job();
        t.release(1);
        t.hold(2, held(7, 50));
        t.written_available(7, 0, 0);
        assert_eq!(t.hint(7), None);
        t.job_rolled_back();
        assert!(t.get(1).is_some() && t.get(2).is_none());
        assert_eq!((t.hint(7), t.marked(7)), (Some((0, 1)), true));
        assert_eq!(t.next_unlock(7), Some(100));
        t.rolled_back();
        assert_eq!(
            (t.len(), t.held_in(7), t.hint(7), t.marked(7)),
            (0, 0, None, false)
        );
    }

    #[test]
    fn a_commit_keeps_the_changes_and_expiry_order_follows_renewals() {
        let mut t = LockTable::default();
        t.begin_job();
        t.hold(1, held(7, 100));
        t.hold(2, held(7, 50));
        t.hold(3, held(8, 10));
        t.committed();
        t.rolled_back();
        assert_eq!((t.len(), t.held_in(7), t.held_in(8)), (3, 2, 1));
        let expired: Vec<i64> = t
            .expired(7, Timestamp(100), 10)
            .iter()
            .map(|h| h.key)
            .collect();
        assert_eq!(expired, [2, 1]);
        // A renewal moves the lock's expiry.
        t.hold(2, held(7, 200));
        assert_eq!(t.next_unlock(7), Some(100));
        assert_eq!(t.expired(7, Timestamp(150), 10).len(), 1);
        t.drop_queue(7);
        assert_eq!((t.len(), t.held_in(7), t.idle_marked()), (1, 0, vec![]));
    }

    #[test]
    fn counts_show_a_held_message_as_it_is() {
        let mut t = LockTable::default();
        t.hold(1, held(7, 100));
        t.hold(2, held(7, 50));
        let policy = QueuePolicy::default();
        let mut counts = QueueCounts {
            active: 5,
            ..QueueCounts::default()
        };
        t.correct_counts(7, &policy, &mut counts, Timestamp(60));
        // Both were counted active by their rows; one lock holds, one ran out (active again).
        assert_eq!((counts.active, counts.locked), (4, 1));
    }
}
