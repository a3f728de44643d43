//! Message operations: enqueue, receive, settle, sweep (writer) and peek, next_wake
//! (readers). Every state decision is a call into `redrive_core::machine`; the SQL only
//! finds candidate rows and stores the outcome.

use std::collections::{HashMap, HashSet};

use redrive_core::machine::{self, Refusal, Step};
use redrive_core::{EntityName, MessageMeta, MessageState, Timestamp};
use redrive_store::{
    Delivery, Effects, Enqueued, MessageRef, NewMessage, ReceiveOutcome, ReceiveParams, SessionRef,
    SettleAction, SettleOutcome, Settled, Settlement, StoreError, StoreResult, StoredMessage,
    SweepOutcome,
};
use rusqlite::{CachedStatement, Connection, OptionalExtension, params};

use crate::dead_letters;
use crate::error::{Db, SqliteError, backend};
use crate::rows::{
    DELETE_ROW, Head, MetaWriter, MsgRow, NewRow, QueueInfo, allocate_sequences, delete_row,
    head_cols, insert_message, msg_cols, msg_from, props_to_json, queue_id, write_meta,
};
use crate::sessions;
use crate::writer::Tx;

/// How many due rows (expired locks, then expired messages) a receive settles on its own
/// queue before delivering; the background sweep takes care of any rest.
const RECEIVE_SWEEP_LIMIT: usize = 256;

pub(crate) fn message_ref(q: &QueueInfo, head: &Head) -> MessageRef {
    MessageRef {
        queue: q.name.clone(),
        message_id: head.message_id.clone(),
        sequence: head.sequence,
        delivery_count: head.meta.delivery_count,
    }
}

/// What applying a step did.
enum Applied {
    Kept,
    Removed,
    DeadLettered(String),
}

/// Stores the outcome of a state-machine step for message `head` of queue `q`.
fn apply(
    tx: &mut Tx<'_>,
    q: &QueueInfo,
    head: &Head,
    step: Step,
    description: Option<String>,
    now: Timestamp,
    effects: &mut Effects,
) -> StoreResult<Applied> {
    match step {
        Step::Keep(meta) => {
            write_meta(tx.conn, head.rowid, &meta)?;
            if meta.state == MessageState::Available {
                effects.wake(&q.name);
            }
            Ok(Applied::Kept)
        }
        Step::Complete => {
            delete_row(tx.conn, head.rowid)?;
            Ok(Applied::Removed)
        }
        Step::Drop => {
            delete_row(tx.conn, head.rowid)?;
            effects.expired.push(message_ref(q, head));
            Ok(Applied::Removed)
        }
        Step::DeadLetter { reason, by_broker } => {
            let id = dead_letters::dead_letter(
                tx,
                q,
                head,
                reason,
                by_broker,
                description,
                now,
                effects,
            )?;
            Ok(Applied::DeadLettered(id))
        }
    }
}

/// Applies `machine::sweep` to one message if anything is due; true if it was.
fn sweep_one(
    tx: &mut Tx<'_>,
    q: &QueueInfo,
    head: &Head,
    now: Timestamp,
    effects: &mut Effects,
) -> StoreResult<bool> {
    let Some(step) = machine::sweep(
        &head.meta,
        &q.policy,
        now,
        machine::jitter_seed(head.sequence),
    ) else {
        return Ok(false);
    };
    if head.meta.state == MessageState::Locked {
        effects.lock_expired.push(message_ref(q, head));
    }
    apply(tx, q, head, step, None, now, effects)?;
    Ok(true)
}

fn heads(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> StoreResult<Vec<Head>> {
    let mut stmt = conn.prepare_cached(sql).db()?;
    let rows = stmt.query_map(params, Head::from_row).db()?;
    rows.map(|r| r.db()).collect()
}

fn rows(conn: &Connection, sql: &str, params: impl rusqlite::Params) -> StoreResult<Vec<MsgRow>> {
    let mut stmt = conn.prepare_cached(sql).db()?;
    let rows = stmt.query_map(params, MsgRow::from_row).db()?;
    rows.map(|r| r.db()).collect()
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Settles up to `budget` due rows of one queue: expired locks first, then expired
/// messages. Returns how many were settled and whether more are due.
fn sweep_queue(
    tx: &mut Tx<'_>,
    q: &QueueInfo,
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

enum Slot {
    New,
    /// Seen inside the window: the original sequence.
    Duplicate(i64),
    /// Repeats an earlier message of the same batch (by index).
    RepeatOf(usize),
}

pub(crate) fn enqueue(
    tx: &mut Tx<'_>,
    queue: &EntityName,
    messages: Vec<NewMessage>,
    now: Timestamp,
) -> StoreResult<Vec<Enqueued>> {
    let q = tx.queue(queue)?;
    if q.policy.requires_session && messages.iter().any(|m| m.session_id.is_none()) {
        return Err(StoreError::SessionRequired {
            queue: queue.to_string(),
        });
    }
    let window = i64::try_from(q.policy.duplicate_detection_window_ms).unwrap_or(i64::MAX);
    let mut slots = Vec::with_capacity(messages.len());
    if window > 0 {
        let mut first_in_batch: HashMap<&str, usize> = HashMap::new();
        let mut lookup = tx
            .conn
            .prepare_cached(
                "SELECT sequence FROM dedup \
                 WHERE queue_id = ?1 AND message_id = ?2 AND expires_at > ?3",
            )
            .db()?;
        for (i, m) in messages.iter().enumerate() {
            if let Some(&j) = first_in_batch.get(m.message_id.as_str()) {
                slots.push(Slot::RepeatOf(j));
                continue;
            }
            let seen: Option<i64> = lookup
                .query_row(params![q.id, m.message_id, now.0], |r| r.get(0))
                .optional()
                .db()?;
            match seen {
                Some(seq) => slots.push(Slot::Duplicate(seq)),
                None => {
                    first_in_batch.insert(m.message_id.as_str(), i);
                    slots.push(Slot::New);
                }
            }
        }
    } else {
        slots.extend(messages.iter().map(|_| Slot::New));
    }
    let fresh = slots.iter().filter(|s| matches!(s, Slot::New)).count();
    let mut next = if fresh > 0 {
        allocate_sequences(tx.conn, q.id, fresh)?
    } else {
        0
    };
    let mut out: Vec<Enqueued> = Vec::with_capacity(messages.len());
    for (m, slot) in messages.iter().zip(&slots) {
        let (sequence, duplicate) = match *slot {
            Slot::Duplicate(seq) => (seq, true),
            Slot::RepeatOf(j) => (out[j].sequence, true),
            Slot::New => {
                let sequence = next;
                next += 1;
                let props = props_to_json(&m.properties)?;
                let visible_at = m.scheduled_at.map_or(now, |s| s.max(now));
                insert_message(
                    tx.conn,
                    &NewRow {
                        queue_id: q.id,
                        sequence,
                        message_id: &m.message_id,
                        body: &m.body,
                        content_type: m.content_type.as_deref(),
                        properties: props.as_deref(),
                        correlation_id: m.correlation_id.as_deref(),
                        session_id: m.session_id.as_deref(),
                        message_type: m.message_type.as_deref(),
                        intent: m.intent.as_deref(),
                        valid_until: m.valid_until,
                        enqueued_at: now,
                        scheduled_at: m.scheduled_at,
                        visible_at,
                        expires_at: m.expires_at,
                    },
                )?;
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
                            m.message_id,
                            sequence,
                            now.plus_millis(window).0
                        ])
                        .db()?;
                }
                (sequence, false)
            }
        };
        out.push(Enqueued {
            message_id: m.message_id.clone(),
            sequence,
            duplicate,
        });
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
    let found: Option<(Head, Option<i64>)> = tx
        .conn
        .prepare_cached(concat!(
            "SELECT ",
            head_cols!(),
            ", scheduled_at FROM messages WHERE queue_id = ?1 AND sequence = ?2"
        ))
        .db()?
        .query_row(params![q.id, sequence], |r| {
            Ok((Head::from_row(r)?, r.get(13)?))
        })
        .optional()
        .db()?;
    let cancellable = found.filter(|(h, scheduled)| {
        h.meta.state == MessageState::Available
            && h.meta.delivery_count == 0
            && scheduled.is_some()
            && h.meta.visible_at > now
    });
    let Some((h, _)) = cancellable else {
        return Err(StoreError::MessageNotFound {
            queue: queue.to_string(),
            sequence,
        });
    };
    delete_row(tx.conn, h.rowid)
}

// ---- receive ----------------------------------------------------------------------------

fn deliver(q: &QueueInfo, row: MsgRow, mut meta: MessageMeta) -> StoreResult<Delivery> {
    // The stored message does not show the token: move it out rather than copy it.
    let (Some(lock_token), Some(locked_until)) = (meta.lock_token.take(), meta.locked_until) else {
        return Err(backend(SqliteError::Invariant(
            "machine::receive returned a lock without token or expiry",
        )));
    };
    let mut row = row;
    row.head.meta = meta;
    Ok(Delivery {
        message: row.into_stored(&q.name),
        lock_token,
        locked_until,
    })
}

/// A message lock token: a fresh random token (`redrive_core::id::new_lock_token`) with the
/// row's rowid appended, so that settlement finds the row by its key without an index on
/// tokens. The random part is what makes it unguessable; the whole token must match.
fn lock_token_for(rowid: i64) -> String {
    use std::fmt::Write as _;
    let mut token = redrive_core::id::new_lock_token();
    token.reserve(17);
    let _ = write!(token, ".{rowid:x}"); // writing to a String cannot fail
    token
}

/// The rowid a lock token names, if it has the shape of one of ours.
fn token_rowid(token: &str) -> Option<i64> {
    let (_, hex) = token.rsplit_once('.')?;
    i64::from_str_radix(hex, 16).ok().filter(|r| *r > 0)
}

/// Receives one candidate; returns the delivery if it was locked.
#[allow(clippy::too_many_arguments)]
fn receive_one(
    tx: &mut Tx<'_>,
    q: &QueueInfo,
    row: MsgRow,
    lock_ms: u64,
    now: Timestamp,
    by_sequence: bool,
    update: &mut MetaWriter<'_>,
    effects: &mut Effects,
) -> StoreResult<Result<Option<Delivery>, Refusal>> {
    let token = lock_token_for(row.head.rowid);
    let step = match machine::receive(&row.head.meta, &q.policy, now, lock_ms, token, by_sequence) {
        Ok(step) => step,
        Err(refusal) => return Ok(Err(refusal)),
    };
    match step {
        Step::Keep(meta) => {
            update.write(row.head.rowid, &row.head.meta, &meta)?;
            Ok(Ok(Some(deliver(q, row, meta)?)))
        }
        other => {
            apply(tx, q, &row.head, other, None, now, effects)?;
            Ok(Ok(None))
        }
    }
}

pub(crate) fn receive(tx: &mut Tx<'_>, p: ReceiveParams) -> StoreResult<ReceiveOutcome> {
    let q = tx.queue(&p.queue)?;
    match (&p.session, q.policy.requires_session) {
        (None, true) => {
            return Err(StoreError::SessionRequired {
                queue: p.queue.to_string(),
            });
        }
        (Some(_), false) => {
            return Err(StoreError::SessionNotAllowed {
                queue: p.queue.to_string(),
            });
        }
        _ => {}
    }
    if let Some(s) = &p.session {
        sessions::check_lock(tx.conn, q.id, s, p.now)?;
    }
    let mut out = ReceiveOutcome::default();
    sweep_queue(tx, &q, p.now, RECEIVE_SWEEP_LIMIT, &mut out.effects)?;
    let max = usize::try_from(p.max).unwrap_or(usize::MAX);
    if max == 0 {
        return Ok(out);
    }
    match &p.session {
        None if q.policy.group_ordering => {
            receive_grouped(tx, &q, max, p.lock_ms, p.now, &mut out)?;
        }
        None => receive_plain(tx, &q, max, p.lock_ms, p.now, &mut out)?,
        Some(s) => receive_session(tx, &q, s, max, p.lock_ms, p.now, &mut out)?,
    }
    Ok(out)
}

fn receive_plain(
    tx: &mut Tx<'_>,
    q: &QueueInfo,
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
        let candidates: Vec<MsgRow> = select
            .query_map(params![q.id, now.0, limit(want)], MsgRow::from_row)
            .db()?
            .map(|r| r.db())
            .collect::<StoreResult<_>>()?;
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

#[allow(clippy::too_many_arguments)]
fn receive_session(
    tx: &mut Tx<'_>,
    q: &QueueInfo,
    session: &SessionRef,
    max: usize,
    lock_ms: u64,
    now: Timestamp,
    out: &mut ReceiveOutcome,
) -> StoreResult<()> {
    deliver_in_order(tx, q, session.session_id.as_str(), max, lock_ms, now, out)
}

/// Candidates read per page by a group-ordered receive.
const GROUP_PAGE: usize = 64;

/// Receive on a `group_ordering` queue: visible messages oldest first, as a plain receive;
/// a message with a session id (its group) is taken through its group instead: the group's
/// messages in sequence order from its first one, none while one of it is locked. Each
/// group is looked at once per receive.
fn receive_grouped(
    tx: &mut Tx<'_>,
    q: &QueueInfo,
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
        let candidates: Vec<MsgRow> = select
            .query_map(
                params![q.id, now.0, after_due, after_seq, limit(GROUP_PAGE)],
                MsgRow::from_row,
            )
            .db()?
            .map(|r| r.db())
            .collect::<StoreResult<_>>()?;
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
    q: &QueueInfo,
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
            if row.head.meta.state != MessageState::Available || row.head.meta.visible_at > now {
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
    let mut seen = Vec::with_capacity(sequences.len());
    for &sequence in sequences {
        if seen.contains(&sequence) {
            continue;
        }
        seen.push(sequence);
        let not_found = || StoreError::MessageNotFound {
            queue: queue.to_string(),
            sequence,
        };
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
    for item in items {
        // On a group-ordered queue a settled message may unblock its group.
        let unblocks =
            q.policy.group_ordering && !matches!(item.action, SettleAction::Renew { .. });
        let r = settle_one(tx, &q, item, now, &mut stmts, &mut out.effects)?;
        if unblocks && r.is_ok() {
            out.effects.wake(&q.name);
        }
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
    q: &QueueInfo,
    item: Settlement,
    now: Timestamp,
    stmts: &mut SettleStatements<'_>,
    effects: &mut Effects,
) -> StoreResult<StoreResult<Settled>> {
    let Some(rowid) = token_rowid(&item.lock_token) else {
        return Ok(Err(StoreError::LockLost));
    };
    let found = stmts
        .lookup
        .query_row(params![rowid, q.id], Head::from_row)
        .optional()
        .db()?;
    // The machine compares the whole token: a reused rowid or a forged suffix is refused.
    let Some(head) = found else {
        return Ok(Err(StoreError::LockLost));
    };
    let token = item.lock_token.as_str();
    let meta = &head.meta;
    let seed = machine::jitter_seed(head.sequence);
    let (step, description) = match item.action {
        SettleAction::Complete => (machine::complete(meta, token, now), None),
        SettleAction::Abandon { delay_ms } => (
            machine::abandon(meta, &q.policy, token, now, delay_ms, seed),
            None,
        ),
        SettleAction::Defer => (machine::defer(meta, token, now), None),
        SettleAction::Renew { lock_ms } => (machine::renew(meta, token, now, lock_ms), None),
        SettleAction::DeadLetter {
            reason,
            description,
        } => (machine::dead_letter(meta, token, now, &reason), description),
    };
    let step = match step {
        Ok(step) => step,
        Err(Refusal::LockLost | Refusal::NotReceivable) => return Ok(Err(StoreError::LockLost)),
    };
    let by_application = matches!(
        step,
        Step::DeadLetter {
            by_broker: false,
            ..
        }
    );
    let refusal = if by_application {
        dead_letters::target_missing(tx, q)?
    } else {
        None
    };
    if let Some(refusal) = refusal {
        return Ok(Err(refusal));
    }
    let mut settled = Settled {
        sequence: head.sequence,
        message_id: head.message_id.clone(),
        delivery_count: head.meta.delivery_count,
        locked_until: None,
        dead_letter_id: None,
    };
    match step {
        Step::Keep(meta) => {
            stmts.update.write(head.rowid, &head.meta, &meta)?;
            if meta.state == MessageState::Available {
                effects.wake(&q.name);
            }
            settled.locked_until = meta.locked_until;
        }
        Step::Complete => {
            stmts.delete.execute([head.rowid]).db()?;
        }
        other => {
            if let Applied::DeadLettered(id) =
                apply(tx, q, &head, other, description, now, effects)?
            {
                settled.dead_letter_id = Some(id);
            }
        }
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
) -> StoreResult<Vec<StoredMessage>> {
    let qid = queue_id(conn, queue)?;
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
    Ok(found.into_iter().map(|r| r.into_stored(queue)).collect())
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
    Ok(match (visible, unlocked) {
        (Some(a), Some(b)) => Some(Timestamp(a.min(b))),
        (a, b) => a.or(b).map(Timestamp),
    })
}
