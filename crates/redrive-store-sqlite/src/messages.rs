//! Message operations: enqueue, receive, settle, sweep (writer) and peek, next_wake
//! (readers). Every state decision is a call into `redrive_core::machine`; the SQL only
//! finds candidate rows and stores the outcome.

use std::collections::HashSet;

use redrive_core::machine::Refusal;
use redrive_core::{EntityName, Timestamp};
use redrive_store::skeleton::columns::{bad_value, limit};
use redrive_store::skeleton::entities::{QueueRow, queue_not_found};
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
use crate::rows::{
    DELETE_ROW, MetaWriter, allocate_sequences, delete_row, head, head_cols, insert_message,
    load_queue, message, msg_cols, msg_from, query_all, queue_id, write_meta,
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
        Write::Meta(meta) => write_meta(tx.conn, head.key, &meta)?,
        Write::Delete => delete_row(tx.conn, head.key)?,
        Write::DeadLetter(cause) => {
            return dead_letters::dead_letter(tx, q, head, cause, now, effects).map(Some);
        }
    }
    Ok(None)
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

fn heads(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> StoreResult<Vec<Head>> {
    let mut stmt = conn.prepare_cached(sql).db()?;
    query_all(&mut stmt, params, head)
}

fn rows(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> StoreResult<Vec<MessageRow>> {
    let mut stmt = conn.prepare_cached(sql).db()?;
    query_all(&mut stmt, params, message)
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
    let locks = heads(
        tx.conn,
        concat!(
            "SELECT ",
            head_cols!(),
            " FROM messages WHERE queue_id = ?1 AND state = 'locked' AND due_at <= ?2 \
             ORDER BY due_at LIMIT ?3"
        ),
        params![q.id, now.0, limit(budget.saturating_add(1))],
    )?;
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
    let expired = heads(
        tx.conn,
        concat!(
            "SELECT ",
            head_cols!(),
            " FROM messages WHERE queue_id = ?1 AND expires_at <= ?2 AND state <> 'locked' \
             ORDER BY expires_at LIMIT ?3"
        ),
        params![q.id, now.0, limit(rest.saturating_add(1))],
    )?;
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
        insert_message(tx.conn, q.id, now, row)?;
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
    let found = crate::rows::query_opt(&mut stmt, params![q.id, sequence], |r| {
        Ok((head(r)?, r.get::<_, Option<i64>>(13).db()?.map(Timestamp)))
    })?;
    match found {
        Some((h, scheduled)) if cancellable(&h, scheduled, now) => delete_row(tx.conn, h.key),
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
    u64::try_from(removed).map_err(|e| bad_value("removed", e))
}

// ---- receive ----------------------------------------------------------------------------

/// Receives one candidate; returns the delivery if it was locked.
#[allow(clippy::too_many_arguments)]
fn receive_one(
    tx: &mut Tx<'_>,
    q: &QueueRow,
    row: MessageRow,
    lock_ms: u64,
    now: Timestamp,
    by_sequence: bool,
    update: &mut MetaWriter<'_>,
    effects: &mut Effects,
) -> StoreResult<Result<Option<Delivery>, Refusal>> {
    let received = skeleton::receive(q, row, now, lock_ms, by_sequence, effects, |k, o, n| {
        update.write(k, o, n)
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
    let mut select = conn
        .prepare_cached(concat!(
            "SELECT ",
            msg_cols!(),
            msg_from!(),
            " WHERE queue_id = ?1 AND state = 'available' AND due_at <= ?2 \
             ORDER BY due_at, sequence LIMIT ?3"
        ))
        .db()?;
    let mut update = MetaWriter::new(conn);
    while out.deliveries.len() < max {
        let want = max - out.deliveries.len();
        let candidates = query_all(&mut select, params![q.id, now.0, limit(want)], message)?;
        let found = candidates.len();
        for row in candidates {
            let got = receive_one(
                tx,
                q,
                row,
                lock_ms,
                now,
                false,
                &mut update,
                &mut out.effects,
            )?;
            if let Ok(Some(d)) = got {
                out.deliveries.push(d);
            }
        }
        if found < want {
            break;
        }
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
        let candidates = query_all(
            &mut select,
            params![q.id, now.0, after_due, after_seq, limit(GROUP_PAGE)],
            message,
        )?;
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
        tx.conn,
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
            tx.conn,
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
            tx.conn,
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
    let found = match token_key(&item.lock_token) {
        Some(rowid) => crate::rows::query_opt(&mut stmts.lookup, params![rowid, q.id], head)?,
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
        Write::Meta(meta) => match &last_attempt {
            Some(attempt) => stmts.update.write_with_attempt(head.key, &meta, attempt)?,
            None => stmts.update.write(head.key, &head.meta, &meta)?,
        },
        Write::Delete => {
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
    Ok(out)
}

// ---- reads ------------------------------------------------------------------------------

pub(crate) fn peek(
    conn: &Connection,
    queue: &EntityName,
    from_sequence: i64,
    max: u32,
    now: Timestamp,
) -> StoreResult<Vec<StoredMessage>> {
    let q = load_queue(conn, queue.as_str())?.ok_or_else(|| queue_not_found(queue))?;
    let qid = q.id;
    let found = rows(
        conn,
        concat!(
            "SELECT ",
            msg_cols!(),
            msg_from!(),
            " WHERE queue_id = ?1 AND sequence >= ?2 ORDER BY sequence LIMIT ?3"
        ),
        params![qid, from_sequence, i64::from(max)],
    )?;
    Ok(found
        .into_iter()
        .map(|r| r.into_view(queue, &q.policy, now))
        .collect())
}

pub(crate) fn next_wake(
    conn: &Connection,
    queue: &EntityName,
    now: Timestamp,
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
    Ok(earliest(visible, unlocked))
}
