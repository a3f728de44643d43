//! Message operations: enqueue, receive, settle, sweep, and the reads peek and
//! next_wake. Every state decision is a call into `redrive_core::machine`; the SQL only
//! finds (and row-locks) candidate rows and stores the outcome, batched per statement.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use redrive_core::machine::Refusal;
use redrive_core::{EntityName, Timestamp};
use redrive_store::skeleton::columns::{invariant, limit};
use redrive_store::skeleton::entities::queue_not_found;
use redrive_store::skeleton::messages::{
    self as skeleton, ReceiveMode, Slot, cancellable, check_sessions, dead_letter_target,
    dedup_window, distinct, earliest, fresh, message_not_found, place, slots, token_key,
};
use redrive_store::skeleton::{Head, MessageRow, Received, Settling, Write};
use redrive_store::{
    Delivery, Effects, Enqueued, NewMessage, ReceiveOutcome, ReceiveParams, SettleAction,
    SettleOutcome, Settled, Settlement, StoreResult, StoredMessage, SweepOutcome,
};

use crate::dead_letters;
use crate::pool::{Db, Owned};
use crate::rows::{
    QueueInfo, Writes, allocate_sequences, batch_size, decode, delete_rows, drawn, get, head,
    head_cols, insert_messages, message, msg_cols, queue, queue_opt, queue_with,
    sequence_statements, session_keys,
};
use crate::sessions;

/// How many due rows (expired locks, then expired messages) a receive settles on its own
/// queue before delivering; the background sweep takes care of any rest.
const RECEIVE_SWEEP_LIMIT: usize = 256;

/// Stores what the skeleton decided for message `head` of queue `q`: new metas and
/// removals go to `writes` (applied at its next flush); a dead letter is written at once.
/// Returns the record id of a dead letter.
async fn apply(
    db: &Db<'_>,
    q: &QueueInfo,
    head: &Head,
    write: Write,
    now: Timestamp,
    effects: &mut Effects,
    writes: &mut Writes,
) -> StoreResult<Option<String>> {
    match write {
        Write::Meta(meta) => writes.update(head.key, meta),
        Write::Delete => writes.delete(head.key),
        Write::DeadLetter(cause) => {
            let id = dead_letters::dead_letter(db, q, head, cause, now, effects, writes).await?;
            return Ok(Some(id));
        }
    }
    Ok(None)
}

/// Applies the sweep's rule to one message if anything is due; true if it was.
async fn sweep_one(
    db: &Db<'_>,
    q: &QueueInfo,
    head: &Head,
    now: Timestamp,
    effects: &mut Effects,
    writes: &mut Writes,
) -> StoreResult<bool> {
    let Some(write) = skeleton::sweep(q, head, now, effects) else {
        return Ok(false);
    };
    apply(db, q, head, write, now, effects, writes).await?;
    Ok(true)
}

/// Expired locks of a queue (`$1`) at `$2`, at most `$3`, rows held by others skipped.
const SWEEP_LOCKS: &str = concat!(
    "SELECT ",
    head_cols!(),
    " FROM messages WHERE queue_id = $1 AND state = 'locked' AND due_at <= $2 \
     ORDER BY due_at LIMIT $3 FOR UPDATE SKIP LOCKED"
);

/// Expired messages of a queue (`$1`) at `$2`, at most `$3`, rows held by others skipped.
const SWEEP_EXPIRED: &str = concat!(
    "SELECT ",
    head_cols!(),
    " FROM messages WHERE queue_id = $1 AND expires_at <= $2 \
     AND state <> 'locked' ORDER BY expires_at LIMIT $3 FOR UPDATE SKIP LOCKED"
);

/// Receive candidates of a plain queue (`$1`) at `$2`, at most `$3`. SKIP LOCKED: rows
/// another receiver (or node) is taking are left to it, so concurrent receivers never
/// get the same message and never wait on each other.
const RECEIVE_CANDIDATES: &str = concat!(
    "SELECT ",
    msg_cols!(),
    " FROM messages WHERE queue_id = $1 AND state = 'available' \
     AND due_at <= $2 ORDER BY due_at, sequence LIMIT $3 FOR UPDATE SKIP LOCKED"
);

/// [`RECEIVE_CANDIDATES`] from the queue's receive floor (`$4`, see
/// [`crate::rows::ReceiveFloor`]) on.
const RECEIVE_CANDIDATES_FROM: &str = concat!(
    "SELECT ",
    msg_cols!(),
    " FROM messages WHERE queue_id = $1 AND state = 'available' \
     AND due_at <= $2 AND due_at >= $4 ORDER BY due_at, sequence LIMIT $3 \
     FOR UPDATE SKIP LOCKED"
);

/// Settles up to `budget` due rows of one queue: expired locks first, then expired
/// messages. Rows another transaction holds are skipped (it is settling or delivering
/// them). Returns how many were settled and whether more are due.
async fn sweep_queue(
    db: &Db<'_>,
    q: &QueueInfo,
    now: Timestamp,
    budget: usize,
    effects: &mut Effects,
) -> StoreResult<(usize, bool)> {
    let mut writes = Writes::default();
    let rows = db
        .query(
            SWEEP_LOCKS,
            &[&q.id, &now.0, &limit(budget.saturating_add(1))],
        )
        .await?;
    let locks = decode(&rows, head)?;
    let mut done = 0;
    if locks.len() > budget {
        for head in locks.iter().take(budget) {
            done += usize::from(sweep_one(db, q, head, now, effects, &mut writes).await?);
        }
        writes.flush(db, q.id).await?;
        return Ok((done, true));
    }
    for head in &locks {
        done += usize::from(sweep_one(db, q, head, now, effects, &mut writes).await?);
    }
    writes.flush(db, q.id).await?;
    let rest = budget - locks.len();
    let rows = db
        .query(
            SWEEP_EXPIRED,
            &[&q.id, &now.0, &limit(rest.saturating_add(1))],
        )
        .await?;
    let expired = decode(&rows, head)?;
    let more = expired.len() > rest;
    for head in expired.iter().take(rest) {
        done += usize::from(sweep_one(db, q, head, now, effects, &mut writes).await?);
    }
    writes.flush(db, q.id).await?;
    Ok((done, more))
}

// ---- enqueue ----------------------------------------------------------------------------

/// Claims duplicate-detection entries: inserts one (sequence not yet known, 0) for each
/// message id, or takes over an entry whose window ended; returns the ids it claimed.
/// An id another sender holds is not returned. A concurrent sender of the same id (on
/// any node) is waited for on the unique key, and the entry stays locked by this
/// transaction, so the sender's sequence number is read afterwards, committed.
const CLAIM_DEDUP: &str = "INSERT INTO dedup (queue_id, message_id, sequence, expires_at) \
     SELECT $1, m, 0, $3 FROM unnest($2::text[]) AS m \
     ON CONFLICT (queue_id, message_id) DO UPDATE \
     SET sequence = 0, expires_at = excluded.expires_at WHERE dedup.expires_at <= $4 \
     RETURNING message_id";

pub(crate) async fn enqueue(
    db: &Db<'_>,
    name: &EntityName,
    messages: &[NewMessage],
    now: Timestamp,
) -> StoreResult<Vec<Enqueued>> {
    let n = batch_size(messages.len())?;
    let sessions = session_keys(messages.iter().map(|m| m.session_id.as_deref()));
    let missing_session = messages.iter().any(|m| m.session_id.is_none());
    // Without duplicate detection, every message is new: the sequence numbers are drawn
    // in the queue's first flight.
    let (q, first) = queue_with(db, name, |q| {
        if q.policy.duplicate_detection_window_ms == 0
            && n > 0
            && !(q.policy.requires_session && missing_session)
        {
            sequence_statements(q.id, sessions.clone(), n)
        } else {
            Vec::new()
        }
    })
    .await?;
    check_sessions(&q, messages)?;
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    let window = dedup_window(&q);
    let mut seen: HashMap<String, i64> = HashMap::new();
    if window > 0 {
        // Sorted, so that two batches claim their entries in the same order.
        let mut ids: Vec<&str> = messages.iter().map(|m| m.message_id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        let rows = db
            .query(
                CLAIM_DEDUP,
                &[&q.id, &ids, &now.plus_millis(window).0, &now.0],
            )
            .await?;
        let claimed: HashSet<String> = decode(&rows, |r| get::<String>(r, 0))?
            .into_iter()
            .collect();
        let held: Vec<&str> = ids
            .into_iter()
            .filter(|id| !claimed.contains(*id))
            .collect();
        if !held.is_empty() {
            let rows = db
                .query(
                    "SELECT message_id, sequence FROM dedup \
                     WHERE queue_id = $1 AND message_id = ANY($2::text[])",
                    &[&q.id, &held],
                )
                .await?;
            for r in &rows {
                seen.insert(get(r, 0)?, get(r, 1)?);
            }
        }
    }
    let slots = slots(messages, window > 0, |id| Ok(seen.get(id).copied()))?;
    let numbers = match first.last() {
        Some(rows) if window == 0 => drawn(rows)?,
        _ if fresh(&slots) == 0 => Vec::new(),
        _ => {
            let stored = messages
                .iter()
                .zip(&slots)
                .filter(|(_, s)| **s == Slot::New);
            let sessions = session_keys(stored.map(|(m, _)| m.session_id.as_deref()));
            allocate_sequences(db, q.id, sessions, fresh(&slots)).await?
        }
    };
    let (out, rows) = place(messages, &slots, numbers, now)?;
    insert_messages(db, q.id, now, &rows).await?;
    if window > 0 && !rows.is_empty() {
        let ids: Vec<&str> = rows.iter().map(|r| r.message_id).collect();
        let seqs: Vec<i64> = rows.iter().map(|r| r.sequence).collect();
        db.defer(
            "UPDATE dedup d SET sequence = u.sequence \
             FROM unnest($2::text[], $3::bigint[]) AS u(message_id, sequence) \
             WHERE d.queue_id = $1 AND d.message_id = u.message_id",
            vec![
                Box::new(q.id),
                Box::new(ids.into_iter().map(str::to_owned).collect::<Vec<String>>()),
                Box::new(seqs),
            ],
        )
        .await?;
    }
    Ok(out)
}

pub(crate) async fn cancel_scheduled(
    db: &Db<'_>,
    name: &EntityName,
    sequence: i64,
    now: Timestamp,
) -> StoreResult<()> {
    let q = queue(db, name).await?;
    let found = db
        .query_opt(
            concat!(
                "SELECT ",
                head_cols!(),
                ", scheduled_at FROM messages WHERE queue_id = $1 AND sequence = $2 FOR UPDATE"
            ),
            &[&q.id, &sequence],
        )
        .await?;
    let cancel = match found {
        Some(r) => {
            let scheduled: Option<i64> = get(&r, 12)?;
            cancellable(&head(&r)?, scheduled.map(Timestamp), now)
        }
        None => false,
    };
    if !cancel {
        return Err(message_not_found(name, sequence));
    }
    delete_rows(db, q.id, &[sequence]).await
}

/// Removes every message of the queue and releases its session locks. A message a
/// concurrent operation holds (`FOR UPDATE`) is removed once that operation committed: the
/// delete waits for it and finds the row again.
pub(crate) async fn purge(db: &Db<'_>, name: &EntityName) -> StoreResult<u64> {
    let q = queue(db, name).await?;
    let removed = db
        .execute("DELETE FROM messages WHERE queue_id = $1", &[&q.id])
        .await?;
    db.execute("DELETE FROM sessions WHERE queue_id = $1", &[&q.id])
        .await?;
    Ok(removed)
}

// ---- receive ----------------------------------------------------------------------------

/// Receives one candidate (row locked by the caller); returns the delivery if it was
/// locked. The new meta is written at the next flush of `writes`.
#[allow(clippy::too_many_arguments)]
async fn receive_one(
    db: &Db<'_>,
    q: &QueueInfo,
    row: MessageRow,
    lock_ms: u64,
    now: Timestamp,
    by_sequence: bool,
    effects: &mut Effects,
    writes: &mut Writes,
) -> StoreResult<Result<Option<Delivery>, Refusal>> {
    let received = skeleton::receive(q, row, now, lock_ms, by_sequence, effects, |k, _, n| {
        writes.update(k, n.clone());
        Ok(())
    })?;
    match received {
        Ok(Received::Locked(d)) => Ok(Ok(Some(d))),
        Ok(Received::Settled { head, write }) => {
            apply(db, q, &head, write, now, effects, writes).await?;
            Ok(Ok(None))
        }
        Err(refusal) => Ok(Err(refusal)),
    }
}

pub(crate) async fn receive(db: &Db<'_>, p: &ReceiveParams) -> StoreResult<ReceiveOutcome> {
    let max = usize::try_from(p.max).unwrap_or(usize::MAX);
    // A plain receive sends the two sweep looks and its candidates' look in the queue's
    // first flight; when nothing is due (the usual case) the candidates are this
    // receive's, otherwise the due rows are settled first and the candidates looked for
    // again. The candidates' look starts at the queue's receive floor when there is one.
    // (A mutex, not a cell: the closure runs inside a future that must be Send.)
    let floor = Mutex::new(None::<i64>);
    let (q, first) = queue_with(db, &p.queue, |q| {
        if p.session.is_none() && !q.policy.requires_session && !q.policy.group_ordering && max > 0
        {
            let sweep = limit(RECEIVE_SWEEP_LIMIT + 1);
            let from = q.floor.next();
            *floor.lock().unwrap_or_else(PoisonError::into_inner) = from;
            let candidates: (&'static str, Owned) = match from {
                Some(due) => (
                    RECEIVE_CANDIDATES_FROM,
                    vec![
                        Box::new(q.id),
                        Box::new(p.now.0),
                        Box::new(limit(max)),
                        Box::new(due),
                    ],
                ),
                None => (
                    RECEIVE_CANDIDATES,
                    vec![Box::new(q.id), Box::new(p.now.0), Box::new(limit(max))],
                ),
            };
            vec![
                (
                    SWEEP_LOCKS,
                    vec![Box::new(q.id), Box::new(p.now.0), Box::new(sweep)],
                ),
                (
                    SWEEP_EXPIRED,
                    vec![Box::new(q.id), Box::new(p.now.0), Box::new(sweep)],
                ),
                candidates,
            ]
        } else {
            Vec::new()
        }
    })
    .await?;
    let bounded = floor
        .into_inner()
        .unwrap_or_else(PoisonError::into_inner)
        .is_some();
    if let [locks, expired, candidates] = first.as_slice()
        && locks.is_empty()
        && expired.is_empty()
    {
        let mut out = ReceiveOutcome::default();
        let mut writes = Writes::default();
        let found = candidates.len();
        let rows = decode(candidates, message)?;
        match rows.first() {
            // Candidates are available rows, whose due_at is their visible_at.
            Some(first) => q.floor.set(first.head.meta.visible_at.0),
            None if !bounded => q.floor.clear(),
            None => {}
        }
        for row in rows {
            let got = receive_one(
                db,
                &q,
                row,
                p.lock_ms,
                p.now,
                false,
                &mut out.effects,
                &mut writes,
            )
            .await?;
            if let Ok(Some(d)) = got {
                out.deliveries.push(d);
            }
        }
        writes.flush(db, q.id).await?;
        // More is wanted when candidates were refused, or when a look from the floor
        // found nothing (a row behind the floor is found from the head).
        if (found == max || (bounded && found == 0)) && out.deliveries.len() < max {
            receive_plain(db, &q, max, p.lock_ms, p.now, &mut out, &mut writes).await?;
            writes.flush(db, q.id).await?;
        }
        return Ok(out);
    }
    let mode = ReceiveMode::of(p, &q)?;
    if let ReceiveMode::Session(s) = mode {
        sessions::check_lock(db, q.id, s, p.now).await?;
    }
    let mut out = ReceiveOutcome::default();
    sweep_queue(db, &q, p.now, RECEIVE_SWEEP_LIMIT, &mut out.effects).await?;
    if max == 0 {
        return Ok(out);
    }
    let mut writes = Writes::default();
    let (lock_ms, now) = (p.lock_ms, p.now);
    match mode {
        ReceiveMode::Plain => receive_plain(db, &q, max, lock_ms, now, &mut out, &mut writes).await,
        ReceiveMode::Grouped => {
            receive_grouped(db, &q, max, lock_ms, now, &mut out, &mut writes).await
        }
        ReceiveMode::Session(s) => {
            let sid = s.session_id.as_str();
            deliver_in_order(db, &q, sid, max, lock_ms, now, &mut out, &mut writes).await
        }
    }?;
    writes.flush(db, q.id).await?;
    Ok(out)
}

async fn receive_plain(
    db: &Db<'_>,
    q: &QueueInfo,
    max: usize,
    lock_ms: u64,
    now: Timestamp,
    out: &mut ReceiveOutcome,
    writes: &mut Writes,
) -> StoreResult<()> {
    while out.deliveries.len() < max {
        let want = max - out.deliveries.len();
        // SKIP LOCKED: rows another receiver (or node) is taking are left to it, so
        // concurrent receivers never get the same message and never wait on each other.
        let rows = db
            .query(RECEIVE_CANDIDATES, &[&q.id, &now.0, &limit(want)])
            .await?;
        let found = rows.len();
        for row in decode(&rows, message)? {
            let got =
                receive_one(db, q, row, lock_ms, now, false, &mut out.effects, writes).await?;
            if let Ok(Some(d)) = got {
                out.deliveries.push(d);
            }
        }
        if found < want {
            break;
        }
        // The next round must not find this round's rows (locked by us, so not skipped).
        writes.flush(db, q.id).await?;
    }
    Ok(())
}

/// Candidates read per page by a group-ordered receive.
const GROUP_PAGE: usize = 64;

/// Receive on a `group_ordering` queue: visible messages oldest first, as a plain receive;
/// a message with a session id (its group) is taken through its group instead: the group's
/// messages in sequence order from its first one, none while one of it is locked. Each
/// group is looked at once per receive.
///
/// Concurrent receivers: a group is walked only under a transaction-level advisory lock
/// on (schema and queue, group) hashes, taken with `pg_try_advisory_xact_lock`, so a group another receiver
/// is walking is skipped (the group analogue of SKIP LOCKED) and, once the lock is ours,
/// that receiver has committed and its locks are seen (READ COMMITTED: every statement
/// reads the latest commits). The group's rows are then locked `FOR UPDATE` and the head
/// rule re-checked inside this transaction; plain messages are locked `FOR UPDATE SKIP
/// LOCKED` one by one. No message reaches two receivers.
async fn receive_grouped(
    db: &Db<'_>,
    q: &QueueInfo,
    max: usize,
    lock_ms: u64,
    now: Timestamp,
    out: &mut ReceiveOutcome,
    writes: &mut Writes,
) -> StoreResult<()> {
    let mut seen: HashSet<String> = HashSet::new();
    let (mut after_due, mut after_seq) = (i64::MIN, i64::MIN);
    while out.deliveries.len() < max {
        // Unlocked look at the candidates; each is locked (and re-checked) before use.
        let rows = db
            .query(
                concat!(
                    "SELECT ",
                    head_cols!(),
                    " FROM messages WHERE queue_id = $1 AND state = 'available' \
                     AND due_at <= $2 AND (due_at, sequence) > ($3, $4) \
                     ORDER BY due_at, sequence LIMIT $5"
                ),
                &[&q.id, &now.0, &after_due, &after_seq, &limit(GROUP_PAGE)],
            )
            .await?;
        let found = rows.len();
        for head in decode(&rows, head)? {
            if out.deliveries.len() >= max {
                break;
            }
            // Available rows are due at their visibility time.
            after_due = head.meta.visible_at.0;
            after_seq = head.sequence;
            match head.session_id {
                None => {
                    let locked = db
                        .query_opt(
                            concat!(
                                "SELECT ",
                                msg_cols!(),
                                " FROM messages WHERE queue_id = $1 AND sequence = $2 \
                                 AND state = 'available' AND due_at <= $3 \
                                 FOR UPDATE SKIP LOCKED"
                            ),
                            &[&q.id, &head.sequence, &now.0],
                        )
                        .await?;
                    let Some(row) = locked else { continue };
                    let row = message(&row)?;
                    let got =
                        receive_one(db, q, row, lock_ms, now, false, &mut out.effects, writes)
                            .await?;
                    if let Ok(Some(d)) = got {
                        out.deliveries.push(d);
                    }
                }
                Some(group) => {
                    if !seen.insert(group.clone()) {
                        continue;
                    }
                    let row = db
                        .query_one(
                            "SELECT pg_try_advisory_xact_lock(\
                             hashtext(current_schema() || '.' || $1::bigint::text), \
                             hashtext($2::text))",
                            &[&q.id, &group],
                        )
                        .await?;
                    let mine: bool = get(&row, 0)?;
                    if mine {
                        deliver_in_order(db, q, &group, max, lock_ms, now, out, writes).await?;
                    }
                }
            }
        }
        writes.flush(db, q.id).await?;
        if found < GROUP_PAGE {
            break;
        }
    }
    Ok(())
}

/// Delivers the messages of one session (or group) in sequence order, as long as they are
/// consecutive visible Available messages, and nothing while one of them is locked.
#[allow(clippy::too_many_arguments)]
async fn deliver_in_order(
    db: &Db<'_>,
    q: &QueueInfo,
    sid: &str,
    max: usize,
    lock_ms: u64,
    now: Timestamp,
    out: &mut ReceiveOutcome,
    writes: &mut Writes,
) -> StoreResult<()> {
    let qid = q.id;
    // Nothing is delivered while any message of the session is locked; locks that ran out
    // are released first. (The session lock, or a group's advisory lock, held by this
    // receive keeps other receivers of the session out; the rows are locked against the
    // sweep.)
    let rows = db
        .query(
            concat!(
                "SELECT ",
                head_cols!(),
                " FROM messages WHERE queue_id = $1 AND session_id = $2 AND state = 'locked' \
                 ORDER BY sequence FOR UPDATE"
            ),
            &[&qid, &sid],
        )
        .await?;
    let mut held = false;
    for head in decode(&rows, head)? {
        if !sweep_one(db, q, &head, now, &mut out.effects, writes).await? {
            held = true;
        }
    }
    writes.flush(db, qid).await?;
    if held {
        return Ok(());
    }
    // Then the session's messages in sequence order, skipping deferred ones, as long as
    // they are consecutive visible Available messages.
    let mut after = i64::MIN;
    loop {
        let want = max - out.deliveries.len();
        let rows = db
            .query(
                concat!(
                    "SELECT ",
                    msg_cols!(),
                    " FROM messages WHERE queue_id = $1 AND session_id = $2 AND sequence > $3 \
                     AND state <> 'deferred' ORDER BY sequence LIMIT $4 FOR UPDATE"
                ),
                &[&qid, &sid, &after, &limit(want.saturating_add(8))],
            )
            .await?;
        if rows.is_empty() {
            return Ok(());
        }
        for row in decode(&rows, message)? {
            after = row.head.sequence;
            if sweep_one(db, q, &row.head, now, &mut out.effects, writes).await? {
                continue;
            }
            if !row.head.receivable_in_order(now) {
                return Ok(());
            }
            let got =
                receive_one(db, q, row, lock_ms, now, false, &mut out.effects, writes).await?;
            if let Ok(Some(d)) = got {
                out.deliveries.push(d);
                if out.deliveries.len() >= max {
                    return Ok(());
                }
            }
        }
    }
}

pub(crate) async fn receive_deferred(
    db: &Db<'_>,
    name: &EntityName,
    sequences: &[i64],
    lock_ms: u64,
    now: Timestamp,
) -> StoreResult<ReceiveOutcome> {
    let q = queue(db, name).await?;
    let mut out = ReceiveOutcome::default();
    let seen = distinct(sequences);
    let rows = db
        .query(
            concat!(
                "SELECT ",
                msg_cols!(),
                " FROM messages WHERE queue_id = $1 AND sequence = ANY($2::bigint[]) \
                 ORDER BY sequence FOR UPDATE"
            ),
            &[&q.id, &seen],
        )
        .await?;
    let mut found: HashMap<i64, MessageRow> = decode(&rows, message)?
        .into_iter()
        .map(|r| (r.head.sequence, r))
        .collect();
    let mut writes = Writes::default();
    for sequence in seen {
        let not_found = || message_not_found(name, sequence);
        let row = found.remove(&sequence).ok_or_else(not_found)?;
        match receive_one(
            db,
            &q,
            row,
            lock_ms,
            now,
            true,
            &mut out.effects,
            &mut writes,
        )
        .await?
        {
            Ok(Some(d)) => out.deliveries.push(d),
            Ok(None) => {} // expired or at the max count on the way: see effects
            Err(_) => return Err(not_found()),
        }
    }
    writes.flush(db, q.id).await?;
    Ok(out)
}

// ---- settle -----------------------------------------------------------------------------

/// Completes the messages whose lock the given token (`$3`) still holds at `$4`, by
/// sequence (`$2`), in one statement, and returns the rows as they were. The condition is
/// the one `machine::complete` checks (only a receive sets a token, and only on a Locked
/// message; `state` is left out so that the planner cannot prefer `messages_due`'s
/// locked range to the primary key), and the caller asks the machine about every row
/// returned; a row that is not returned (another token, a lock that ran out, a message
/// gone) is left to the general path. The `DELETE` takes each row's lock itself and, when
/// a concurrent settlement changed the row first, looks at it again.
const COMPLETE_HELD: &str = concat!(
    "DELETE FROM messages USING unnest($2::bigint[], $3::text[]) AS u(seq, token) \
     WHERE queue_id = $1 AND sequence = u.seq \
     AND lock_token = u.token AND locked_until > $4 RETURNING ",
    head_cols!()
);

pub(crate) async fn settle(
    db: &Db<'_>,
    name: &EntityName,
    items: &[Settlement],
    now: Timestamp,
) -> StoreResult<SettleOutcome> {
    if !items.is_empty()
        && items
            .iter()
            .all(|i| matches!(i.action, SettleAction::Complete))
    {
        return complete_all(db, name, items, now).await;
    }
    let mut out = SettleOutcome {
        results: Vec::with_capacity(items.len()),
        effects: Effects::default(),
    };
    let mut wanted: Vec<i64> = items
        .iter()
        .filter_map(|i| token_key(&i.lock_token))
        .collect();
    wanted.sort_unstable();
    wanted.dedup();
    // Locked in sequence order (so concurrent batches cannot deadlock on each other) and
    // waited for: a concurrent settlement of the same lock finishes first, and this one
    // then sees what it left. Sent with the queue's look-up, in one flight.
    let (q, first) = queue_with(db, name, |q| {
        if wanted.is_empty() {
            Vec::new()
        } else {
            vec![(SETTLE_ROWS, vec![Box::new(q.id), Box::new(wanted.clone())])]
        }
    })
    .await?;
    let mut heads: HashMap<i64, Head> = match first.first() {
        Some(rows) => decode(rows, head)?
            .into_iter()
            .map(|h| (h.key, h))
            .collect(),
        None => HashMap::new(),
    };
    let target_missing = match dead_letter_target(&q, items) {
        Some(target) => queue_opt(db, target.as_str()).await?.is_none(),
        None => false,
    };
    let mut writes = Writes::default();
    for item in items {
        let r = settle_one(
            db,
            &q,
            item,
            now,
            target_missing,
            &mut heads,
            &mut out.effects,
            &mut writes,
        )
        .await?;
        out.results.push(r);
    }
    writes.flush(db, q.id).await?;
    Ok(out)
}

/// Rows of the given sequences, locked `FOR UPDATE` in sequence order (so concurrent
/// batches cannot deadlock on each other) and waited for.
const SETTLE_ROWS: &str = concat!(
    "SELECT ",
    head_cols!(),
    " FROM messages WHERE queue_id = $1 AND sequence = ANY($2::bigint[]) \
     ORDER BY sequence FOR UPDATE"
);

/// A settle call of completions only (the common case): the first completion of each
/// message is tried with [`COMPLETE_HELD`], in the queue's first flight; every item that
/// statement did not complete (a lost lock, a repeated token) then takes the general path,
/// which decides it from the row as it is now.
async fn complete_all(
    db: &Db<'_>,
    name: &EntityName,
    items: &[Settlement],
    now: Timestamp,
) -> StoreResult<SettleOutcome> {
    let mut out = SettleOutcome {
        results: Vec::with_capacity(items.len()),
        effects: Effects::default(),
    };
    // The first token given for each message, in sequence order (the order the rows are
    // locked in, as by the general path).
    let mut firsts: Vec<(i64, &str)> = Vec::with_capacity(items.len());
    let mut asked: HashSet<i64> = HashSet::with_capacity(items.len());
    for item in items {
        if let Some(s) = token_key(&item.lock_token)
            && asked.insert(s)
        {
            firsts.push((s, item.lock_token.as_str()));
        }
    }
    firsts.sort_unstable_by_key(|(s, _)| *s);
    let seqs: Vec<i64> = firsts.iter().map(|(s, _)| *s).collect();
    let tokens: Vec<String> = firsts.iter().map(|(_, t)| (*t).to_owned()).collect();
    let (q, first) = queue_with(db, name, |q| {
        if seqs.is_empty() {
            Vec::new()
        } else {
            vec![(
                COMPLETE_HELD,
                vec![
                    Box::new(q.id),
                    Box::new(seqs.clone()),
                    Box::new(tokens.clone()),
                    Box::new(now.0),
                ],
            )]
        }
    })
    .await?;
    let mut completed: HashMap<i64, Head> = match first.first() {
        Some(rows) => decode(rows, head)?
            .into_iter()
            .map(|h| (h.key, h))
            .collect(),
        None => HashMap::new(),
    };
    let mut rest: Vec<i64> = seqs
        .into_iter()
        .filter(|s| !completed.contains_key(s))
        .collect();
    rest.sort_unstable();
    let mut heads: HashMap<i64, Head> = if rest.is_empty() {
        HashMap::new()
    } else {
        let rows = db.query(SETTLE_ROWS, &[&q.id, &rest]).await?;
        decode(&rows, head)?
            .into_iter()
            .map(|h| (h.key, h))
            .collect()
    };
    let mut writes = Writes::default();
    for item in items {
        let done = token_key(&item.lock_token).and_then(|s| completed.remove(&s));
        let r = match done {
            Some(head) => {
                match skeleton::settle(&q, Some(head), item, now, false, &mut out.effects) {
                    Ok(Settling {
                        write: Write::Delete,
                        settled,
                        ..
                    }) => Ok(settled),
                    // The statement's condition is the machine's: a refusal here is a bug,
                    // and the error rolls the deletion back.
                    _ => {
                        return Err(invariant(
                            "the state machine refused a completion the statement made",
                        ));
                    }
                }
            }
            None => {
                settle_one(
                    db,
                    &q,
                    item,
                    now,
                    false,
                    &mut heads,
                    &mut out.effects,
                    &mut writes,
                )
                .await?
            }
        };
        out.results.push(r);
    }
    writes.flush(db, q.id).await?;
    Ok(out)
}

/// One settlement. The outer error aborts the whole call (a storage failure); the inner
/// one is this item's refusal, decided before anything is written. `heads` holds the
/// batch's rows as the earlier items left them.
#[allow(clippy::too_many_arguments)]
async fn settle_one(
    db: &Db<'_>,
    q: &QueueInfo,
    item: &Settlement,
    now: Timestamp,
    target_missing: bool,
    heads: &mut HashMap<i64, Head>,
    effects: &mut Effects,
    writes: &mut Writes,
) -> StoreResult<StoreResult<Settled>> {
    // The machine compares the whole token: a forged suffix or another queue's token is
    // refused.
    let found = token_key(&item.lock_token).and_then(|k| heads.get(&k).cloned());
    let Settling {
        head,
        write,
        mut settled,
        last_attempt,
    } = match skeleton::settle(q, found, item, now, target_missing, effects) {
        Ok(decided) => decided,
        Err(refusal) => return Ok(Err(refusal)),
    };
    match &write {
        Write::Meta(meta) => {
            if let Some(h) = heads.get_mut(&head.key) {
                h.meta = meta.clone();
            }
        }
        Write::Delete | Write::DeadLetter(_) => {
            heads.remove(&head.key);
        }
    }
    settled.dead_letter_id = match (write, last_attempt) {
        (Write::Meta(meta), Some(attempt)) => {
            writes.update_with_attempt(head.key, meta, attempt);
            None
        }
        (write, _) => apply(db, q, &head, write, now, effects, writes).await?,
    };
    Ok(Ok(settled))
}

// ---- sweep ------------------------------------------------------------------------------

pub(crate) async fn sweep(db: &Db<'_>, now: Timestamp, max: u32) -> StoreResult<SweepOutcome> {
    let budget = usize::try_from(max).unwrap_or(usize::MAX);
    // Only queues with something due: an expired lock, or an expired message.
    let rows = db
        .query(
            "SELECT q.name FROM queues q WHERE \
               EXISTS (SELECT 1 FROM messages m WHERE m.queue_id = q.id \
                 AND m.state = 'locked' AND m.due_at <= $1) \
               OR EXISTS (SELECT 1 FROM messages m WHERE m.queue_id = q.id \
                 AND m.expires_at <= $1 AND m.state <> 'locked') \
             ORDER BY q.name",
            &[&now.0],
        )
        .await?;
    let names = decode(&rows, |r| get::<String>(r, 0))?;
    let mut out = SweepOutcome::default();
    let mut left = budget;
    for name in names {
        let Some(q) = queue_opt(db, &name).await? else {
            continue;
        };
        let (done, more) = sweep_queue(db, &q, now, left, &mut out.effects).await?;
        left -= done.min(left);
        if more {
            out.more = true;
            break;
        }
    }
    let forgotten = db
        .execute(
            "DELETE FROM dedup d USING \
               (SELECT queue_id, message_id FROM dedup WHERE expires_at <= $1 \
                LIMIT $2 FOR UPDATE SKIP LOCKED) x \
             WHERE d.queue_id = x.queue_id AND d.message_id = x.message_id",
            &[&now.0, &limit(budget)],
        )
        .await?;
    if usize::try_from(forgotten).unwrap_or(usize::MAX) >= budget {
        let left = db
            .query_opt(
                "SELECT 1 FROM dedup WHERE expires_at <= $1 LIMIT 1",
                &[&now.0],
            )
            .await?;
        out.more |= left.is_some();
    }
    sessions::forget_expired(db, now).await?;
    Ok(out)
}

// ---- reads ------------------------------------------------------------------------------

/// One statement (one snapshot); an empty page is told apart from a missing queue by a
/// second look.
pub(crate) async fn peek(
    db: &Db<'_>,
    name: &EntityName,
    from_sequence: i64,
    max: u32,
    now: Timestamp,
) -> StoreResult<Vec<StoredMessage>> {
    // The policy says where a lock that ran out is shown (its release's backoff).
    let q = queue(db, name).await?;
    let rows = db
        .query(
            concat!(
                "SELECT ",
                msg_cols!(),
                " FROM messages WHERE queue_id = $1 \
                 AND sequence >= $2 ORDER BY sequence LIMIT $3"
            ),
            &[&q.id, &from_sequence, &i64::from(max)],
        )
        .await?;
    Ok(decode(&rows, message)?
        .into_iter()
        .map(|r| r.into_view(name, &q.policy, now))
        .collect())
}

pub(crate) async fn next_wake(
    db: &Db<'_>,
    name: &EntityName,
    now: Timestamp,
) -> StoreResult<Option<Timestamp>> {
    let row = db
        .query_opt(
            "SELECT \
               (SELECT min(due_at) FROM messages \
                 WHERE queue_id = q.id AND state = 'available' AND due_at > $2), \
               (SELECT min(due_at) FROM messages WHERE queue_id = q.id AND state = 'locked') \
             FROM queues q WHERE q.name = $1",
            &[&name.as_str(), &now.0],
        )
        .await?
        .ok_or_else(|| queue_not_found(name))?;
    let visible: Option<i64> = get(&row, 0)?;
    let unlocked: Option<i64> = get(&row, 1)?;
    Ok(earliest(visible, unlocked))
}
