//! Message operations: enqueue, receive, settle, sweep (writer) and peek, next_wake
//! (readers). Every state decision is a call into `redrive_core::machine`; the SQL only
//! finds candidate rows and stores the outcome. A row read here is seen through the locks
//! held in memory ([`crate::locks`]), and a decision is written through them: a plain
//! receive holds its lock there, and a write of a held message's row starts from what
//! the row stores.

use std::collections::HashSet;

use redrive_core::machine::Refusal;
use redrive_core::{EntityName, MessageMeta, MessageState, Timestamp};
use redrive_store::skeleton::columns::{bad_value, limit};
use redrive_store::skeleton::entities::{QueueRow, queue_not_found};
use redrive_store::skeleton::messages::NewRow;
use redrive_store::skeleton::messages::{
    self as skeleton, ReceiveMode, cancellable, check_sessions, dead_letter_target, dedup_window,
    distinct, earliest, fresh, message_not_found, place, slots, token_key,
};
use redrive_store::skeleton::{Head, MessageRow, Received, Settling, Write};
use redrive_store::{
    Delivery, Effects, Enqueued, NewMessage, ReceiveOutcome, ReceiveParams, SettleOutcome, Settled,
    Settlement, StoreResult, StoredMessage, SweepOutcome,
};
use rusqlite::{CachedStatement, Connection, OptionalExtension, params};

use crate::dead_letters;
use crate::error::Db;
use crate::locks::{self, Held, Locks, MAX_HELD};
use crate::rows::{
    DELETE_ROW, MetaWriter, allocate_sequences, delete_row, head, head_cols, insert_message,
    load_queue, message, msg_cols, msg_from, query_all, query_opt, queue_id,
};
use crate::sessions;
use crate::writer::Tx;

/// How many due rows (expired locks, then expired messages) a receive settles on its own
/// queue before delivering; the background sweep takes care of any rest.
const RECEIVE_SWEEP_LIMIT: usize = 256;

/// Stores what the skeleton decided for message `head` of queue `q`; returns the record
/// id of a dead letter.
fn apply(
    tx: &mut Tx<'_>,
    q: &QueueRow,
    head: &Head,
    write: Write,
    now: Timestamp,
    effects: &mut Effects,
) -> StoreResult<Option<String>> {
    match write {
        Write::Meta(meta) => {
            let mut update = MetaWriter::new(tx.conn);
            write_row(tx, &mut update, q.id, head, &meta, None)?;
        }
        Write::Delete => remove_row(tx, head.key)?,
        Write::DeadLetter(cause) => {
            return dead_letters::dead_letter(tx, q, head, cause, now, effects).map(Some);
        }
    }
    Ok(None)
}

/// Stores `new` for the message `head` of queue `queue_id` (as it is: through its lock
/// held in memory, if any). A held lock renewed stays in memory; otherwise the lock is
/// dropped from memory and the row written from what it stores, with `attempt` as the
/// evidence of a failed push attempt.
pub(crate) fn write_row(
    tx: &Tx<'_>,
    update: &mut MetaWriter<'_>,
    queue_id: i64,
    head: &Head,
    new: &MessageMeta,
    attempt: Option<&str>,
) -> StoreResult<()> {
    let stored = {
        let mut locks = tx.locks();
        if new.state == MessageState::Locked
            && let Some(held) = locks.get(head.key)
        {
            let held = Held {
                meta: new.clone(),
                ..held.clone()
            };
            locks.hold(head.key, held);
            return Ok(());
        }
        locks.release(head.key).map(|h| h.stored)
    };
    match attempt {
        Some(attempt) => update.write_with_attempt(head.key, new, attempt)?,
        None => update.write(head.key, stored.as_ref().unwrap_or(&head.meta), new)?,
    }
    if new.state == MessageState::Available {
        tx.locks()
            .written_available(queue_id, new.visible_at.0, head.sequence);
    }
    Ok(())
}

/// Deletes the message at `key` and any lock held for it.
pub(crate) fn remove_row(tx: &Tx<'_>, key: i64) -> StoreResult<()> {
    tx.locks().release(key);
    delete_row(tx.conn, key)
}

/// Inserts a new message of queue `queue_id` (see [`insert_message`]), which a receive
/// must find even if it is due before the rows held in memory.
pub(crate) fn insert(
    tx: &Tx<'_>,
    queue_id: i64,
    now: Timestamp,
    row: &NewRow<'_>,
) -> StoreResult<()> {
    insert_message(tx.conn, queue_id, now, row)?;
    tx.locks()
        .written_available(queue_id, row.visible_at.0, row.sequence);
    Ok(())
}

/// Shows heads read from the rows as they are: locked, when their lock is held in memory.
fn overlay_heads(tx: &Tx<'_>, heads: &mut [Head]) {
    let locks = tx.locks();
    if locks.len() > 0 {
        for h in heads {
            locks.overlay(h);
        }
    }
}

/// As [`overlay_heads`], for whole rows.
fn overlay_rows(locks: &Locks, rows: &mut [MessageRow]) {
    let locks = locks.lock();
    if locks.len() > 0 {
        for r in rows {
            locks.overlay(&mut r.head);
        }
    }
}

/// Applies the sweep's rule to one message if anything is due; true if it was.
fn sweep_one(
    tx: &mut Tx<'_>,
    q: &QueueRow,
    head: &Head,
    now: Timestamp,
    effects: &mut Effects,
) -> StoreResult<bool> {
    let Some(write) = skeleton::sweep(q, head, now, effects) else {
        return Ok(false);
    };
    apply(tx, q, head, write, now, effects)?;
    Ok(true)
}

/// Heads read on the write connection, as they are ([`overlay_heads`]).
fn heads(tx: &Tx<'_>, sql: &str, params: impl rusqlite::Params) -> StoreResult<Vec<Head>> {
    let mut stmt = tx.conn.prepare_cached(sql).db()?;
    let mut found = query_all(&mut stmt, params, head)?;
    overlay_heads(tx, &mut found);
    Ok(found)
}

/// Rows read on the write connection, as they are ([`overlay_rows`]).
fn rows(tx: &Tx<'_>, sql: &str, params: impl rusqlite::Params) -> StoreResult<Vec<MessageRow>> {
    let mut stmt = tx.conn.prepare_cached(sql).db()?;
    let mut found = query_all(&mut stmt, params, message)?;
    overlay_rows(tx.locks, &mut found);
    Ok(found)
}

/// Settles up to `budget` due rows of one queue: expired locks first, then expired
/// messages. Returns how many were settled and whether more are due.
fn sweep_queue(
    tx: &mut Tx<'_>,
    q: &QueueRow,
    now: Timestamp,
    budget: usize,
    effects: &mut Effects,
) -> StoreResult<(usize, bool)> {
    // Locks held in memory that ran out, then those in rows.
    let mut locks = tx.locks().expired(q.id, now, budget.saturating_add(1));
    let rows_wanted = budget.saturating_add(1) - locks.len();
    locks.extend(heads(
        tx,
        concat!(
            "SELECT ",
            head_cols!(),
            " FROM messages WHERE queue_id = ?1 AND state = 'locked' AND due_at <= ?2 \
             ORDER BY due_at LIMIT ?3"
        ),
        params![q.id, now.0, limit(rows_wanted)],
    )?);
    let mut done = 0;
    if locks.len() > budget {
        for head in locks.iter().take(budget) {
            done += usize::from(sweep_one(tx, q, head, now, effects)?);
        }
        return Ok((done, true));
    }
    for head in &locks {
        done += usize::from(sweep_one(tx, q, head, now, effects)?);
    }
    let rest = budget - locks.len();
    // A message locked in memory shows Available in its row: read past those (their locks
    // hold: the ones that ran out were released above).
    let held = tx.locks().held_in(q.id);
    let mut expired = heads(
        tx,
        concat!(
            "SELECT ",
            head_cols!(),
            " FROM messages WHERE queue_id = ?1 AND expires_at <= ?2 AND state <> 'locked' \
             ORDER BY expires_at LIMIT ?3"
        ),
        params![
            q.id,
            now.0,
            limit(rest.saturating_add(1).saturating_add(held))
        ],
    )?;
    expired.retain(|h| h.meta.state != MessageState::Locked);
    let more = expired.len() > rest;
    for head in expired.iter().take(rest) {
        done += usize::from(sweep_one(tx, q, head, now, effects)?);
    }
    Ok((done, more))
}

// ---- enqueue ----------------------------------------------------------------------------

pub(crate) fn enqueue(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    messages: Vec<NewMessage>,
    now: Timestamp,
) -> StoreResult<Vec<Enqueued>> {
    let q = tx.queue(queue)?;
    check_sessions(&q, &messages)?;
    let window = dedup_window(&q);
    let slots = {
        let mut lookup = tx
            .conn
            .prepare_cached(
                "SELECT sequence FROM dedup \
                 WHERE queue_id = ?1 AND message_id = ?2 AND expires_at > ?3",
            )
            .db()?;
        slots(&messages, window > 0, |id| {
            lookup
                .query_row(params![q.id, id, now.0], |r| r.get(0))
                .optional()
                .db()
        })?
    };
    let n = fresh(&slots);
    let first = if n > 0 {
        allocate_sequences(tx.conn, q.id, n)?
    } else {
        0
    };
    let (out, rows) = place(&messages, &slots, first..first + limit(n), now)?;
    for row in &rows {
        insert(tx, q.id, now, row)?;
        if window > 0 {
            tx.conn
                .prepare_cached(
                    "INSERT INTO dedup (queue_id, message_id, sequence, expires_at) \
                     VALUES (?1, ?2, ?3, ?4) ON CONFLICT (queue_id, message_id) DO UPDATE \
                     SET sequence = excluded.sequence, expires_at = excluded.expires_at",
                )
                .db()?
                .execute(params![
                    q.id,
                    row.message_id,
                    row.sequence,
                    now.plus_millis(window).0
                ])
                .db()?;
        }
    }
    Ok(out)
}

pub(crate) fn cancel_scheduled(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    sequence: i64,
    now: Timestamp,
) -> StoreResult<()> {
    let q = tx.queue(queue)?;
    let mut stmt = tx
        .conn
        .prepare_cached(concat!(
            "SELECT ",
            head_cols!(),
            ", scheduled_at FROM messages WHERE queue_id = ?1 AND sequence = ?2"
        ))
        .db()?;
    let mut found = query_opt(&mut stmt, params![q.id, sequence], |r| {
        Ok((head(r)?, r.get::<_, Option<i64>>(13).db()?.map(Timestamp)))
    })?;
    drop(stmt);
    if let Some((h, _)) = &mut found {
        overlay_heads(tx, std::slice::from_mut(h));
    }
    match found {
        Some((h, scheduled)) if cancellable(&h, scheduled, now) => remove_row(tx, h.key),
        _ => Err(message_not_found(queue, sequence)),
    }
}

/// Removes every message of the queue and releases its session locks (contents kept
/// apart go with their rows: see the `messages_delete_body` trigger).
pub(crate) fn purge(tx: &mut Tx<'_>, queue: &EntityName) -> StoreResult<u64> {
    let q = tx.queue(queue)?;
    let removed = tx
        .conn
        .prepare_cached("DELETE FROM messages WHERE queue_id = ?1")
        .db()?
        .execute([q.id])
        .db()?;
    tx.conn
        .prepare_cached("DELETE FROM sessions WHERE queue_id = ?1")
        .db()?
        .execute([q.id])
        .db()?;
    tx.locks().drop_queue(q.id);
    u64::try_from(removed).map_err(|e| bad_value("removed", e))
}

// ---- receive ----------------------------------------------------------------------------

/// Where a receive may keep its lock.
#[derive(Clone, Copy, PartialEq)]
enum LockIn {
    /// In memory, for a message without a session (a plain receive).
    Memory,
    /// In the row (sessions, groups, deferred messages).
    Row,
}

/// Receives one candidate; returns the delivery if it was locked.
#[allow(clippy::too_many_arguments)]
fn receive_one(
    tx: &mut Tx<'_>,
    q: &QueueRow,
    row: MessageRow,
    lock_ms: u64,
    now: Timestamp,
    by_sequence: bool,
    lock_in: LockIn,
    update: &mut MetaWriter<'_>,
    effects: &mut Effects,
) -> StoreResult<Result<Option<Delivery>, Refusal>> {
    let (conn, table) = (tx.conn, tx.locks);
    let in_memory = lock_in == LockIn::Memory && row.head.session_id.is_none();
    let (sequence, message_id) = (row.head.sequence, row.head.message_id.clone());
    let received = skeleton::receive(q, row, now, lock_ms, by_sequence, effects, |k, o, n| {
        let mut locks = table.lock();
        // What the row stores: `o`, unless the message was seen through a lock held here.
        let stored = locks.get(k).map(|h| h.stored.clone());
        if in_memory && (stored.is_some() || locks.len() < MAX_HELD) {
            locks::mark(conn, &mut locks, q.id)?;
            let held = Held {
                queue_id: q.id,
                sequence,
                message_id,
                meta: n.clone(),
                stored: stored.unwrap_or_else(|| o.clone()),
            };
            locks.hold(k, held);
            return Ok(());
        }
        locks.release(k);
        drop(locks);
        update.write(k, stored.as_ref().unwrap_or(o), n)
    })?;
    match received {
        Ok(Received::Locked(d)) => Ok(Ok(Some(d))),
        Ok(Received::Settled { head, write }) => {
            apply(tx, q, &head, write, now, effects)?;
            Ok(Ok(None))
        }
        Err(refusal) => Ok(Err(refusal)),
    }
}

pub(crate) fn receive(tx: &mut Tx<'_>, p: ReceiveParams) -> StoreResult<ReceiveOutcome> {
    let q = tx.queue(&p.queue)?;
    let mode = ReceiveMode::of(&p, &q)?;
    if let ReceiveMode::Session(s) = mode {
        sessions::check_lock(tx.conn, q.id, s, p.now)?;
    }
    let mut out = ReceiveOutcome::default();
    sweep_queue(tx, &q, p.now, RECEIVE_SWEEP_LIMIT, &mut out.effects)?;
    let max = usize::try_from(p.max).unwrap_or(usize::MAX);
    if max == 0 {
        return Ok(out);
    }
    match mode {
        ReceiveMode::Plain => receive_plain(tx, &q, max, p.lock_ms, p.now, &mut out)?,
        ReceiveMode::Grouped => receive_grouped(tx, &q, max, p.lock_ms, p.now, &mut out)?,
        ReceiveMode::Session(s) => {
            deliver_in_order(tx, &q, &s.session_id, max, p.lock_ms, p.now, &mut out)?;
        }
    }
    Ok(out)
}

/// Keys read per page while a plain receive skips the rows held in memory.
const SKIP_PAGE: usize = 256;

/// A plain receive: the visible messages oldest first, each locked in memory. The rows
/// held in memory still show Available in `messages_due`, oldest first: the receive
/// starts after the queue's hint (every waiting row before it is held already), skips
/// the held rows that follow by their keys alone (the index holds every column read),
/// and reads whole rows from the first one not held on. The hint moves on to the last row
/// passed while every row passed is held (or locked now), and goes whenever a row is
/// written Available at or before it.
fn receive_plain(
    tx: &mut Tx<'_>,
    q: &QueueRow,
    max: usize,
    lock_ms: u64,
    now: Timestamp,
    out: &mut ReceiveOutcome,
) -> StoreResult<()> {
    // Statements held across the loop: no statement-cache round trip per row.
    let conn = tx.conn;
    let start = tx.locks().hint(q.id);
    let mut after = start.unwrap_or((i64::MIN, i64::MIN));
    let mut hint = start;
    if tx.locks().held_in(q.id) > 0 {
        let mut keys = conn
            .prepare_cached(
                "SELECT rowid FROM messages \
                 WHERE queue_id = ?1 AND state = 'available' AND due_at <= ?2 \
                   AND (due_at, sequence) > (?3, ?4) \
                 ORDER BY due_at, sequence LIMIT ?5",
            )
            .db()?;
        'skip: loop {
            let found = query_all(
                &mut keys,
                params![q.id, now.0, after.0, after.1, limit(SKIP_PAGE)],
                |r| r.get::<_, i64>(0).db(),
            )?;
            let locks = tx.locks();
            for &key in &found {
                // A held row's position from what its row stores (an Available row is
                // due at its visibility time).
                let Some(h) = locks.get(key) else {
                    break 'skip;
                };
                after = (h.stored.visible_at.0, h.sequence);
                hint = Some(after);
            }
            if found.len() < SKIP_PAGE {
                break;
            }
        }
    }
    let mut select = conn
        .prepare_cached(concat!(
            "SELECT ",
            msg_cols!(),
            msg_from!(),
            " WHERE queue_id = ?1 AND state = 'available' AND due_at <= ?2 \
             AND (due_at, sequence) > (?3, ?4) ORDER BY due_at, sequence LIMIT ?5"
        ))
        .db()?;
    let mut update = MetaWriter::new(conn);
    // Whether every row passed so far is held in memory or locked now, and whether a
    // candidate was settled instead (its row written: the hint stays).
    let (mut prefix, mut settled) = (true, false);
    'pages: while out.deliveries.len() < max {
        let want = max - out.deliveries.len();
        let page = query_all(
            &mut select,
            params![q.id, now.0, after.0, after.1, limit(want)],
            message,
        )?;
        let n = page.len();
        for row in page {
            if out.deliveries.len() >= max {
                break 'pages;
            }
            let at = (row.head.meta.visible_at.0, row.head.sequence);
            after = at;
            if tx.locks().get(row.head.key).is_some() {
                hint = if prefix { Some(at) } else { hint };
                continue;
            }
            let got = receive_one(
                tx,
                q,
                row,
                lock_ms,
                now,
                false,
                LockIn::Memory,
                &mut update,
                &mut out.effects,
            )?;
            match got {
                // Held here, or locked in its row: either way no longer waiting.
                Ok(Some(d)) => {
                    out.deliveries.push(d);
                    hint = if prefix { Some(at) } else { hint };
                }
                _ => (prefix, settled) = (false, true),
            }
        }
        if n < want {
            break;
        }
    }
    // A write during this receive that cleared the hint stands.
    if !settled && hint != start && tx.locks().hint(q.id) == start {
        tx.locks().set_hint(q.id, hint);
    }
    Ok(())
}

/// Candidates read per page by a group-ordered receive.
const GROUP_PAGE: usize = 64;

/// Receive on a `group_ordering` queue: visible messages oldest first, as a plain receive;
/// a message with a session id (its group) is taken through its group instead: the group's
/// messages in sequence order from its first one, none while one of it is locked. Each
/// group is looked at once per receive.
fn receive_grouped(
    tx: &mut Tx<'_>,
    q: &QueueRow,
    max: usize,
    lock_ms: u64,
    now: Timestamp,
    out: &mut ReceiveOutcome,
) -> StoreResult<()> {
    let conn = tx.conn;
    // Blocked groups keep their rows visible: page on (due_at, sequence) past them.
    let mut select = conn
        .prepare_cached(concat!(
            "SELECT ",
            msg_cols!(),
            msg_from!(),
            " WHERE queue_id = ?1 AND state = 'available' AND due_at <= ?2 \
             AND (due_at > ?3 OR (due_at = ?3 AND sequence > ?4)) \
             ORDER BY due_at, sequence LIMIT ?5"
        ))
        .db()?;
    let mut update = MetaWriter::new(conn);
    let mut seen: HashSet<String> = HashSet::new();
    let (mut after_due, mut after_seq) = (i64::MIN, i64::MIN);
    while out.deliveries.len() < max {
        let mut candidates = query_all(
            &mut select,
            params![q.id, now.0, after_due, after_seq, limit(GROUP_PAGE)],
            message,
        )?;
        overlay_rows(tx.locks, &mut candidates);
        let found = candidates.len();
        for row in candidates {
            if out.deliveries.len() >= max {
                return Ok(());
            }
            // Available rows are due at their visibility time.
            after_due = row.head.meta.visible_at.0;
            after_seq = row.head.sequence;
            match row.head.session_id.clone() {
                None => {
                    let got = receive_one(
                        tx,
                        q,
                        row,
                        lock_ms,
                        now,
                        false,
                        LockIn::Row,
                        &mut update,
                        &mut out.effects,
                    )?;
                    if let Ok(Some(d)) = got {
                        out.deliveries.push(d);
                    }
                }
                Some(group) => {
                    if seen.insert(group.clone()) {
                        deliver_in_order(tx, q, &group, max, lock_ms, now, out)?;
                    }
                }
            }
        }
        if found < GROUP_PAGE {
            break;
        }
    }
    Ok(())
}

/// Delivers the messages of one session (or group) in sequence order, as long as they are
/// consecutive visible Available messages, and nothing while one of them is locked.
#[allow(clippy::too_many_arguments)]
fn deliver_in_order(
    tx: &mut Tx<'_>,
    q: &QueueRow,
    sid: &str,
    max: usize,
    lock_ms: u64,
    now: Timestamp,
    out: &mut ReceiveOutcome,
) -> StoreResult<()> {
    let qid = q.id;
    // Nothing is delivered while any message of the session is locked; locks that ran out
    // are released first.
    let locked = heads(
        tx,
        concat!(
            "SELECT ",
            head_cols!(),
            " FROM messages WHERE queue_id = ?1 AND session_id = ?2 AND state = 'locked'"
        ),
        params![qid, sid],
    )?;
    let mut held = false;
    for head in &locked {
        if !sweep_one(tx, q, head, now, &mut out.effects)? {
            held = true;
        }
    }
    if held {
        return Ok(());
    }
    // Then the session's messages in sequence order, skipping deferred ones, as long as
    // they are consecutive visible Available messages.
    let mut after = i64::MIN;
    loop {
        let want = max - out.deliveries.len();
        let page = rows(
            tx,
            concat!(
                "SELECT ",
                msg_cols!(),
                msg_from!(),
                " WHERE queue_id = ?1 AND session_id = ?2 AND sequence > ?3 \
                 AND state <> 'deferred' ORDER BY sequence LIMIT ?4"
            ),
            params![qid, sid, after, limit(want.saturating_add(8))],
        )?;
        if page.is_empty() {
            return Ok(());
        }
        for row in page {
            after = row.head.sequence;
            if sweep_one(tx, q, &row.head, now, &mut out.effects)? {
                continue;
            }
            if !row.head.receivable_in_order(now) {
                return Ok(());
            }
            let mut update = MetaWriter::new(tx.conn);
            let got = receive_one(
                tx,
                q,
                row,
                lock_ms,
                now,
                false,
                LockIn::Row,
                &mut update,
                &mut out.effects,
            )?;
            if let Ok(Some(d)) = got {
                out.deliveries.push(d);
                if out.deliveries.len() >= max {
                    return Ok(());
                }
            }
        }
    }
}

pub(crate) fn receive_deferred(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    sequences: &[i64],
    lock_ms: u64,
    now: Timestamp,
) -> StoreResult<ReceiveOutcome> {
    let q = tx.queue(queue)?;
    let mut out = ReceiveOutcome::default();
    for sequence in distinct(sequences) {
        let not_found = || message_not_found(queue, sequence);
        let row = rows(
            tx,
            concat!(
                "SELECT ",
                msg_cols!(),
                msg_from!(),
                " WHERE queue_id = ?1 AND sequence = ?2"
            ),
            params![q.id, sequence],
        )?
        .pop()
        .ok_or_else(not_found)?;
        let mut update = MetaWriter::new(tx.conn);
        match receive_one(
            tx,
            &q,
            row,
            lock_ms,
            now,
            true,
            LockIn::Row,
            &mut update,
            &mut out.effects,
        )? {
            Ok(Some(d)) => out.deliveries.push(d),
            Ok(None) => {} // expired or at the max count on the way: see effects
            Err(_) => return Err(not_found()),
        }
    }
    Ok(out)
}

// ---- settle -----------------------------------------------------------------------------

pub(crate) fn settle(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    items: Vec<Settlement>,
    now: Timestamp,
) -> StoreResult<SettleOutcome> {
    let q = tx.queue(queue)?;
    let target_missing = match dead_letter_target(&q, &items) {
        Some(target) => tx.queue_opt(target.as_str())?.is_none(),
        None => false,
    };
    let mut out = SettleOutcome {
        results: Vec::with_capacity(items.len()),
        effects: Effects::default(),
    };
    let conn = tx.conn;
    let mut stmts = SettleStatements {
        lookup: conn
            .prepare_cached(concat!(
                "SELECT ",
                head_cols!(),
                " FROM messages WHERE rowid = ?1 AND queue_id = ?2"
            ))
            .db()?,
        update: MetaWriter::new(conn),
        delete: conn.prepare_cached(DELETE_ROW).db()?,
    };
    for item in &items {
        let r = settle_one(
            tx,
            &q,
            item,
            now,
            target_missing,
            &mut stmts,
            &mut out.effects,
        )?;
        out.results.push(r);
    }
    Ok(out)
}

/// The statements of the settle hot path, held across the items of one call.
struct SettleStatements<'c> {
    lookup: CachedStatement<'c>,
    update: MetaWriter<'c>,
    delete: CachedStatement<'c>,
}

/// One settlement. The outer error aborts the whole call (a storage failure); the inner
/// one is this item's refusal, decided before anything is written.
fn settle_one(
    tx: &mut Tx<'_>,
    q: &QueueRow,
    item: &Settlement,
    now: Timestamp,
    target_missing: bool,
    stmts: &mut SettleStatements<'_>,
    effects: &mut Effects,
) -> StoreResult<StoreResult<Settled>> {
    // The machine compares the whole token: a reused rowid or a forged suffix is refused.
    // A lock held in memory has its row's head: no read before the write.
    let held = token_key(&item.lock_token).map(|rowid| {
        let locks = tx.locks();
        let head = locks
            .get(rowid)
            .filter(|h| h.queue_id == q.id)
            .map(|h| h.head(rowid));
        (rowid, head)
    });
    let found = match held {
        Some((_, Some(head))) => Some(head),
        Some((rowid, None)) => query_opt(&mut stmts.lookup, params![rowid, q.id], head)?,
        None => None,
    };
    let Settling {
        head,
        write,
        mut settled,
        last_attempt,
    } = match skeleton::settle(q, found, item, now, target_missing, effects) {
        Ok(decided) => decided,
        Err(refusal) => return Ok(Err(refusal)),
    };
    match write {
        Write::Meta(meta) => write_row(
            tx,
            &mut stmts.update,
            q.id,
            &head,
            &meta,
            last_attempt.as_deref(),
        )?,
        Write::Delete => {
            tx.locks().release(head.key);
            stmts.delete.execute([head.key]).db()?;
        }
        dead => settled.dead_letter_id = apply(tx, q, &head, dead, now, effects)?,
    }
    Ok(Ok(settled))
}

// ---- sweep ------------------------------------------------------------------------------

pub(crate) fn sweep(tx: &mut Tx<'_>, now: Timestamp, max: u32) -> StoreResult<SweepOutcome> {
    let budget = usize::try_from(max).unwrap_or(usize::MAX);
    let names: Vec<String> = {
        let mut stmt = tx
            .conn
            .prepare_cached("SELECT name FROM queues ORDER BY name")
            .db()?;
        let rows = stmt.query_map([], |r| r.get(0)).db()?;
        rows.collect::<rusqlite::Result<_>>().db()?
    };
    let mut out = SweepOutcome::default();
    let mut left = budget;
    for name in names {
        let Some(q) = tx.queue_opt(&name)? else {
            continue;
        };
        let (done, more) = sweep_queue(tx, &q, now, left, &mut out.effects)?;
        left -= done.min(left);
        if more {
            out.more = true;
            break;
        }
    }
    let forgotten = tx
        .conn
        .prepare_cached(
            "DELETE FROM dedup WHERE rowid IN \
             (SELECT rowid FROM dedup WHERE expires_at <= ?1 LIMIT ?2)",
        )
        .db()?
        .execute(params![now.0, limit(budget)])
        .db()?;
    if forgotten == budget {
        let left = tx
            .conn
            .prepare_cached("SELECT 1 FROM dedup WHERE expires_at <= ?1 LIMIT 1")
            .db()?
            .exists([now.0])
            .db()?;
        out.more |= left;
    }
    sessions::forget_expired(tx.conn, now)?;
    let conn = tx.conn;
    locks::unmark_idle(conn, &mut tx.locks())?;
    Ok(out)
}

// ---- reads ------------------------------------------------------------------------------

pub(crate) fn peek(
    conn: &Connection,
    queue: &EntityName,
    from_sequence: i64,
    max: u32,
    now: Timestamp,
    locks: &Locks,
) -> StoreResult<Vec<StoredMessage>> {
    let q = load_queue(conn, queue.as_str())?.ok_or_else(|| queue_not_found(queue))?;
    let qid = q.id;
    let mut stmt = conn
        .prepare_cached(concat!(
            "SELECT ",
            msg_cols!(),
            msg_from!(),
            " WHERE queue_id = ?1 AND sequence >= ?2 ORDER BY sequence LIMIT ?3"
        ))
        .db()?;
    let mut found = query_all(
        &mut stmt,
        params![qid, from_sequence, i64::from(max)],
        message,
    )?;
    overlay_rows(locks, &mut found);
    Ok(found
        .into_iter()
        .map(|r| r.into_view(queue, &q.policy, now))
        .collect())
}

pub(crate) fn next_wake(
    conn: &Connection,
    queue: &EntityName,
    now: Timestamp,
    locks: &Locks,
) -> StoreResult<Option<Timestamp>> {
    let qid = queue_id(conn, queue)?;
    let visible: Option<i64> = conn
        .prepare_cached(
            "SELECT min(due_at) FROM messages \
             WHERE queue_id = ?1 AND state = 'available' AND due_at > ?2",
        )
        .db()?
        .query_row(params![qid, now.0], |r| r.get(0))
        .db()?;
    let unlocked: Option<i64> = conn
        .prepare_cached("SELECT min(due_at) FROM messages WHERE queue_id = ?1 AND state = 'locked'")
        .db()?
        .query_row([qid], |r| r.get(0))
        .db()?;
    let unlocked = match (unlocked, locks.lock().next_unlock(qid)) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(earliest(visible, unlocked))
}
