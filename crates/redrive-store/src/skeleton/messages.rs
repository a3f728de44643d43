//! Message rows and the per-row rules of enqueue, receive, settle and sweep.
//!
//! A backend finds (and locks) candidate rows with its own SQL, decodes them into
//! [`Head`]s or [`MessageRow`]s, and hands each to the function of its operation here:
//! [`receive`], [`settle`], [`sweep`]. Those ask `redrive_core::machine` and answer with
//! the [`Write`] to store — a new meta, a removal, or a dead letter (see
//! [`DeadLetterPlan`](crate::skeleton::DeadLetterPlan)) — and record in [`Effects`] what
//! the broker reports (wake-ups, expiries, lock expiries). How the write is stored
//! (one statement per row, or batched) and when it is committed is the backend's.

use std::collections::HashMap;

use redrive_core::machine::{self, Refusal, Step};
use redrive_core::{
    DeadLetterReason, EntityName, MessageMeta, MessageState, Properties, QueuePolicy, Timestamp,
};

use super::columns::{Columns, after, invariant, props_to_json};
use super::entities::QueueRow;
use crate::{
    Delivery, Effects, Enqueued, MessageRef, NewMessage, QueueCounts, ReceiveParams, SessionRef,
    SettleAction, Settled, Settlement, StoreError, StoreResult, StoredMessage,
};

// ---- rows -------------------------------------------------------------------------------

/// What the state machine needs of a message, with its identity.
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    /// The backend's key of the row, which its lock tokens carry: SQLite's rowid,
    /// PostgreSQL's sequence number (the queue is named by the operation).
    pub key: i64,
    /// Per-queue sequence number.
    pub sequence: i64,
    /// Message id.
    pub message_id: String,
    /// Session (or message group) id.
    pub session_id: Option<String>,
    /// The state the machine reads and writes.
    pub meta: MessageMeta,
}

impl Head {
    /// Reads the [`columns!(head)`](crate::columns) from column `at` on. `key` is the
    /// row's key when it is not its sequence number.
    pub fn decode(c: &impl Columns, at: usize, key: Option<i64>) -> StoreResult<Head> {
        let sequence = c.int(at)?;
        Ok(Head {
            key: key.unwrap_or(sequence),
            sequence,
            message_id: c.text(at + 1)?,
            session_id: c.text_opt(at + 2)?,
            meta: MessageMeta {
                state: c.parse(at + 3, "messages.state")?,
                visible_at: c.time(at + 4)?,
                expires_at: c.time_opt(at + 5)?,
                delivery_count: c.count(at + 6, "messages.delivery_count")?,
                lock_token: c.text_opt(at + 7)?,
                locked_until: c.time_opt(at + 8)?,
                deferred: c.flag(at + 9)?,
                first_delivered_at: c.time_opt(at + 10)?,
                last_delivered_at: c.time_opt(at + 11)?,
            },
        })
    }

    /// Whether a walk through a session (or group) in sequence order may go on to this
    /// message: only a visible Available one can be delivered, and anything else (held,
    /// scheduled, backed off) keeps the messages after it back.
    pub fn receivable_in_order(&self, now: Timestamp) -> bool {
        self.meta.state == MessageState::Available && self.meta.visible_at <= now
    }
}

/// Counts the messages whose lock ran out by `now` while their row still says `locked`
/// (`expired`: their heads; the sweep has not written their release yet) where
/// [`machine::view`] shows them: active, scheduled (a redelivery backoff) or deferred.
/// The backend's own counts take `locked` only for locks that still hold at `now`, so a
/// lock that ran out is never counted as held, and the counts agree with a browse.
pub fn count_expired_locks(
    counts: &mut QueueCounts,
    expired: &[Head],
    policy: &QueuePolicy,
    now: Timestamp,
) {
    for head in expired {
        let seen = machine::view(&head.meta, policy, now, machine::jitter_seed(head.sequence));
        match seen.state {
            MessageState::Available if seen.visible_at <= now => counts.active += 1,
            MessageState::Available => counts.scheduled += 1,
            MessageState::Deferred => counts.deferred += 1,
            // A lock that still holds is the backend's to count.
            MessageState::Locked => counts.locked += 1,
        }
    }
}

/// How many columns [`Head::decode`] reads.
pub const HEAD_COLUMNS: usize = 12;

/// A full message row: its head and its contents.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageRow {
    /// Identity and state.
    pub head: Head,
    /// Body bytes.
    pub body: Vec<u8>,
    /// MIME type.
    pub content_type: Option<String>,
    /// Application properties.
    pub properties: Properties,
    /// Correlation id.
    pub correlation_id: Option<String>,
    /// Message type.
    pub message_type: Option<String>,
    /// Intent.
    pub intent: Option<String>,
    /// Valid-until time.
    pub valid_until: Option<Timestamp>,
    /// When it was stored.
    pub enqueued_at: Timestamp,
    /// Scheduled enqueue time.
    pub scheduled_at: Option<Timestamp>,
    /// The evidence of the last failed push attempt (see [`StoredMessage::last_attempt`]).
    pub last_attempt: Option<String>,
}

impl MessageRow {
    /// Reads the [`columns!(head)`](crate::columns) from column `at` on, then the
    /// [`columns!(content)`](crate::columns). `key` as for [`Head::decode`].
    pub fn decode(c: &impl Columns, at: usize, key: Option<i64>) -> StoreResult<MessageRow> {
        let head = Head::decode(c, at, key)?;
        let at = at + HEAD_COLUMNS;
        Ok(MessageRow {
            head,
            body: c.bytes(at)?,
            content_type: c.text_opt(at + 1)?,
            properties: c.properties(at + 2, "messages.properties")?,
            correlation_id: c.text_opt(at + 3)?,
            message_type: c.text_opt(at + 4)?,
            intent: c.text_opt(at + 5)?,
            valid_until: c.time_opt(at + 6)?,
            enqueued_at: c.time(at + 7)?,
            scheduled_at: c.time_opt(at + 8)?,
            last_attempt: c.text_opt(at + 9)?,
        })
    }

    /// The row as a reader that writes nothing sees it at `now` (a browse):
    /// [`machine::view`] of its state under `policy`, so a lock that ran out is shown as
    /// its release leaves it, before the sweep writes that.
    pub fn into_view(
        mut self,
        queue: &EntityName,
        policy: &QueuePolicy,
        now: Timestamp,
    ) -> StoredMessage {
        self.head.meta = machine::view(
            &self.head.meta,
            policy,
            now,
            machine::jitter_seed(self.head.sequence),
        );
        self.into_stored(queue)
    }

    /// The row as the trait shows it.
    pub fn into_stored(self, queue: &EntityName) -> StoredMessage {
        let MessageRow {
            head,
            body,
            content_type,
            properties,
            correlation_id,
            message_type,
            intent,
            valid_until,
            enqueued_at,
            scheduled_at,
            last_attempt,
        } = self;
        StoredMessage {
            queue: queue.clone(),
            sequence: head.sequence,
            message_id: head.message_id,
            body,
            content_type,
            properties,
            correlation_id,
            session_id: head.session_id,
            message_type,
            intent,
            valid_until,
            enqueued_at,
            scheduled_at,
            state: head.meta.state,
            visible_at: head.meta.visible_at,
            expires_at: head.meta.expires_at,
            delivery_count: head.meta.delivery_count,
            locked_until: head.meta.locked_until,
            first_delivered_at: head.meta.first_delivered_at,
            last_delivered_at: head.meta.last_delivered_at,
            last_attempt,
        }
    }
}

/// The message named in logs and metrics.
pub fn message_ref(queue: &EntityName, head: &Head) -> MessageRef {
    MessageRef {
        queue: queue.clone(),
        message_id: head.message_id.clone(),
        sequence: head.sequence,
        delivery_count: head.meta.delivery_count,
    }
}

/// A message to insert (sent, forwarded to a dead-letter queue, or resubmitted): always
/// Available and never delivered, enqueued at the operation's `now`.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRow<'a> {
    /// Its sequence number, drawn by the backend.
    pub sequence: i64,
    /// Message id.
    pub message_id: &'a str,
    /// Body bytes.
    pub body: &'a [u8],
    /// MIME type.
    pub content_type: Option<&'a str>,
    /// Properties as stored ([`props_to_json`]).
    pub properties: Option<String>,
    /// Correlation id.
    pub correlation_id: Option<&'a str>,
    /// Session id.
    pub session_id: Option<&'a str>,
    /// Message type.
    pub message_type: Option<&'a str>,
    /// Intent.
    pub intent: Option<&'a str>,
    /// Valid-until time.
    pub valid_until: Option<Timestamp>,
    /// Scheduled enqueue time.
    pub scheduled_at: Option<Timestamp>,
    /// Visible from.
    pub visible_at: Timestamp,
    /// Expiry.
    pub expires_at: Option<Timestamp>,
}

impl<'a> NewRow<'a> {
    /// A sent message: visible at its scheduled time (never before `now`).
    pub fn sent(m: &'a NewMessage, sequence: i64, now: Timestamp) -> StoreResult<NewRow<'a>> {
        Ok(NewRow {
            sequence,
            message_id: &m.message_id,
            body: &m.body,
            content_type: m.content_type.as_deref(),
            properties: props_to_json(&m.properties)?,
            correlation_id: m.correlation_id.as_deref(),
            session_id: m.session_id.as_deref(),
            message_type: m.message_type.as_deref(),
            intent: m.intent.as_deref(),
            valid_until: m.valid_until,
            scheduled_at: m.scheduled_at,
            visible_at: m.scheduled_at.map_or(now, |s| s.max(now)),
            expires_at: m.expires_at,
        })
    }

    /// A copy of a message put on another queue (a dead-letter queue's copy, or a
    /// resubmission), with `properties`: visible at once, expiring after the queue's
    /// default time to live.
    pub(crate) fn copy(
        message_id: &'a str,
        body: &'a [u8],
        contents: Contents<'a>,
        properties: &Properties,
        policy: &QueuePolicy,
        now: Timestamp,
    ) -> StoreResult<NewRow<'a>> {
        Ok(NewRow {
            sequence: 0,
            message_id,
            body,
            content_type: contents.content_type,
            properties: props_to_json(properties)?,
            correlation_id: contents.correlation_id,
            session_id: contents.session_id,
            message_type: contents.message_type,
            intent: contents.intent,
            valid_until: contents.valid_until,
            scheduled_at: None,
            visible_at: now,
            expires_at: policy.default_ttl_ms.map(|ttl| after(now, ttl)),
        })
    }
}

/// The attributes a copy keeps from its original.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Contents<'a> {
    pub content_type: Option<&'a str>,
    pub correlation_id: Option<&'a str>,
    pub session_id: Option<&'a str>,
    pub message_type: Option<&'a str>,
    pub intent: Option<&'a str>,
    pub valid_until: Option<Timestamp>,
}

// ---- lock tokens ------------------------------------------------------------------------

/// A message lock token: a fresh random token (`redrive_core::id::new_lock_token`) with
/// `.` and the row's key in hex appended, so that settlement finds the row by its key
/// without an index on tokens. The random part is what makes it unguessable; the machine
/// compares the whole token, so a forged suffix, a reused key or another queue's token
/// is a lost lock.
pub fn lock_token(key: i64) -> String {
    use std::fmt::Write as _;
    let mut token = redrive_core::id::new_lock_token();
    token.reserve(17);
    let _ = write!(token, ".{key:x}"); // writing to a String cannot fail
    token
}

/// The row key a lock token names, if it has the shape of one of [`lock_token`]'s.
pub fn token_key(token: &str) -> Option<i64> {
    let (_, hex) = token.rsplit_once('.')?;
    i64::from_str_radix(hex, 16).ok().filter(|k| *k > 0)
}

// ---- what a step writes -----------------------------------------------------------------

/// Why a message is dead-lettered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// The reason.
    pub reason: DeadLetterReason,
    /// The broker decided by policy (rather than the application asking).
    pub by_broker: bool,
    /// The application's description, if it gave one.
    pub description: Option<String>,
    /// The consumer and rule version of an application's dead letter (empty for the
    /// broker's).
    pub classifier: redrive_core::Classifier,
}

/// What to store for one message row.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Store this meta over the row's.
    Meta(MessageMeta),
    /// Remove the row (completed, or expired on a queue that does not dead-letter on
    /// expiry).
    Delete,
    /// Dead-letter it: see [`DeadLetterPlan`](crate::skeleton::DeadLetterPlan).
    DeadLetter(Cause),
}

/// What a state-machine step means for the row `head` of queue `q`, reported in
/// `effects`: a message made Available again wakes the queue's receivers, and one
/// expired without dead-lettering is reported as expired.
pub fn write_for(
    q: &QueueRow,
    head: &Head,
    step: Step,
    description: Option<String>,
    effects: &mut Effects,
) -> Write {
    match step {
        Step::Keep(meta) => {
            if meta.state == MessageState::Available {
                effects.wake(&q.name);
            }
            Write::Meta(meta)
        }
        Step::Complete => Write::Delete,
        Step::Drop => {
            effects.expired.push(message_ref(&q.name, head));
            Write::Delete
        }
        Step::DeadLetter { reason, by_broker } => Write::DeadLetter(Cause {
            reason,
            by_broker,
            description,
            classifier: redrive_core::Classifier::default(),
        }),
    }
}

// ---- enqueue ----------------------------------------------------------------------------

/// `SessionRequired` when the queue requires sessions and a message has none.
pub fn check_sessions(q: &QueueRow, messages: &[NewMessage]) -> StoreResult<()> {
    if q.policy.requires_session && messages.iter().any(|m| m.session_id.is_none()) {
        return Err(StoreError::SessionRequired {
            queue: q.name.to_string(),
        });
    }
    Ok(())
}

/// The queue's duplicate-detection window in milliseconds; 0 when detection is off.
pub fn dedup_window(q: &QueueRow) -> i64 {
    i64::try_from(q.policy.duplicate_detection_window_ms).unwrap_or(i64::MAX)
}

/// What becomes of one message of an enqueue batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Stored, under a new sequence number.
    New,
    /// Its id was seen inside the window: not stored; the original's sequence number.
    Duplicate(i64),
    /// Repeats the id of an earlier message of the same batch (by index): answered as
    /// that one is.
    RepeatOf(usize),
}

/// The slots of a batch. With duplicate detection on, `seen` is asked, once per distinct
/// id in batch order, for the sequence number of a message stored with that id inside
/// the window.
pub fn slots(
    messages: &[NewMessage],
    detect: bool,
    mut seen: impl FnMut(&str) -> StoreResult<Option<i64>>,
) -> StoreResult<Vec<Slot>> {
    if !detect {
        return Ok(vec![Slot::New; messages.len()]);
    }
    let mut first: HashMap<&str, usize> = HashMap::with_capacity(messages.len());
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let id = m.message_id.as_str();
        if let Some(&j) = first.get(id) {
            out.push(Slot::RepeatOf(j));
            continue;
        }
        first.insert(id, i);
        out.push(match seen(id)? {
            Some(sequence) => Slot::Duplicate(sequence),
            None => Slot::New,
        });
    }
    Ok(out)
}

/// How many messages of a batch are stored.
pub fn fresh(slots: &[Slot]) -> usize {
    slots.iter().filter(|s| matches!(s, Slot::New)).count()
}

/// The answers of a batch and the rows to insert, given its slots and the sequence
/// numbers drawn for its fresh messages (ascending, one each).
pub fn place<'m>(
    messages: &'m [NewMessage],
    slots: &[Slot],
    numbers: impl IntoIterator<Item = i64>,
    now: Timestamp,
) -> StoreResult<(Vec<Enqueued>, Vec<NewRow<'m>>)> {
    let mut numbers = numbers.into_iter();
    let mut out: Vec<Enqueued> = Vec::with_capacity(messages.len());
    let mut rows = Vec::with_capacity(fresh(slots));
    for (m, slot) in messages.iter().zip(slots) {
        let (sequence, duplicate) = match *slot {
            Slot::Duplicate(sequence) => (sequence, true),
            Slot::RepeatOf(j) => (out[j].sequence, true),
            Slot::New => {
                let sequence = numbers.next().ok_or_else(|| {
                    invariant("a sequence draw returned fewer numbers than asked")
                })?;
                rows.push(NewRow::sent(m, sequence, now)?);
                (sequence, false)
            }
        };
        out.push(Enqueued {
            message_id: m.message_id.clone(),
            sequence,
            duplicate,
        });
    }
    if numbers.next().is_some() {
        return Err(invariant(
            "a sequence draw returned more numbers than asked",
        ));
    }
    Ok((out, rows))
}

/// `MessageNotFound`.
pub fn message_not_found(queue: &EntityName, sequence: i64) -> StoreError {
    StoreError::MessageNotFound {
        queue: queue.to_string(),
        sequence,
    }
}

/// Whether a message may be cancelled at `now`: still scheduled (it was sent with a
/// scheduled time that has not come) and never delivered.
pub fn cancellable(head: &Head, scheduled_at: Option<Timestamp>, now: Timestamp) -> bool {
    head.meta.state == MessageState::Available
        && head.meta.delivery_count == 0
        && scheduled_at.is_some()
        && head.meta.visible_at > now
}

// ---- receive ----------------------------------------------------------------------------

/// How a receive finds its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiveMode<'p> {
    /// Visible messages, oldest first.
    Plain,
    /// As plain, but a message of a group is taken through its group, in order.
    Grouped,
    /// The messages of the session held by the receiver, in order.
    Session(&'p SessionRef),
}

impl<'p> ReceiveMode<'p> {
    /// The mode of `p` on queue `q`: `SessionRequired` without a session on a session
    /// queue, `SessionNotAllowed` with one on another queue.
    pub fn of(p: &'p ReceiveParams, q: &QueueRow) -> StoreResult<ReceiveMode<'p>> {
        match (&p.session, q.policy.requires_session) {
            (None, true) => Err(StoreError::SessionRequired {
                queue: p.queue.to_string(),
            }),
            (Some(_), false) => Err(StoreError::SessionNotAllowed {
                queue: p.queue.to_string(),
            }),
            (Some(s), true) => Ok(ReceiveMode::Session(s)),
            (None, false) if q.policy.group_ordering => Ok(ReceiveMode::Grouped),
            (None, false) => Ok(ReceiveMode::Plain),
        }
    }
}

/// What a receive did with one candidate.
#[derive(Debug, Clone, PartialEq)]
pub enum Received {
    /// Locked and delivered (its new meta was passed to the caller's `lock`).
    Locked(Delivery),
    /// Not delivered: expired, or delivered the maximum number of times already; store
    /// `write` for `head`.
    Settled {
        /// The row.
        head: Head,
        /// What to store.
        write: Write,
    },
}

/// Receives one candidate row at `now` (`by_sequence`: a deferred message asked for by
/// its sequence number). When the machine locks it, `lock(key, old, new)` stores the new
/// meta and the delivery is returned; a refusal (not receivable) is the inner error and
/// changes nothing.
pub fn receive(
    q: &QueueRow,
    mut row: MessageRow,
    now: Timestamp,
    lock_ms: u64,
    by_sequence: bool,
    effects: &mut Effects,
    lock: impl FnOnce(i64, &MessageMeta, &MessageMeta) -> StoreResult<()>,
) -> StoreResult<Result<Received, Refusal>> {
    let token = lock_token(row.head.key);
    let step = match machine::receive(&row.head.meta, &q.policy, now, lock_ms, token, by_sequence) {
        Ok(step) => step,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let mut meta = match step {
        Step::Keep(meta) => meta,
        other => {
            let write = write_for(q, &row.head, other, None, effects);
            return Ok(Ok(Received::Settled {
                head: row.head,
                write,
            }));
        }
    };
    let Some(locked_until) = meta.locked_until.filter(|_| meta.lock_token.is_some()) else {
        return Err(invariant(
            "machine::receive returned a lock without token or expiry",
        ));
    };
    lock(row.head.key, &row.head.meta, &meta)?;
    // The stored message does not show the token: move it out rather than copy it.
    let lock_token = meta.lock_token.take().unwrap_or_default();
    row.head.meta = meta;
    Ok(Ok(Received::Locked(Delivery {
        message: row.into_stored(&q.name),
        lock_token,
        locked_until,
    })))
}

/// The sequence numbers of a receive by sequence, each once, in the order asked.
pub fn distinct(sequences: &[i64]) -> Vec<i64> {
    let mut seen = Vec::with_capacity(sequences.len());
    for &s in sequences {
        if !seen.contains(&s) {
            seen.push(s);
        }
    }
    seen
}

/// The earliest of two due times (`next_wake`).
pub fn earliest(a: Option<i64>, b: Option<i64>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(Timestamp(a.min(b))),
        (a, b) => a.or(b).map(Timestamp),
    }
}

// ---- settle -----------------------------------------------------------------------------

/// The dead-letter queue that must exist for a settle call of `items` on `q`: the
/// queue's target when an item asks to dead-letter and the target is another queue. The
/// backend looks it up once and passes whether it is missing to [`settle`].
pub fn dead_letter_target<'q>(q: &'q QueueRow, items: &[Settlement]) -> Option<&'q EntityName> {
    let target = q
        .policy
        .dead_letter_queue
        .as_ref()
        .filter(|t| **t != q.name)?;
    items
        .iter()
        .any(|i| matches!(i.action, SettleAction::DeadLetter { .. }))
        .then_some(target)
}

/// A settlement decided: what to store for the row, and the item's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Settling {
    /// The row settled.
    pub head: Head,
    /// What to store for it.
    pub write: Write,
    /// The item's answer; the backend fills in `dead_letter_id` after dead-lettering.
    pub settled: Settled,
    /// The evidence of a failed push attempt to store on the row with `write` (an
    /// abandon's, always a [`Write::Meta`]); `None` leaves the row's as it is.
    pub last_attempt: Option<String>,
}

/// One settlement of the row `head` (`None`: no row has the token's key). The error is
/// this item's refusal, decided before anything is written: `LockLost`, or
/// `DeadLetterTargetMissing` for an application's dead-letter when `target_missing`.
pub fn settle(
    q: &QueueRow,
    head: Option<Head>,
    item: &Settlement,
    now: Timestamp,
    target_missing: bool,
    effects: &mut Effects,
) -> StoreResult<Settling> {
    let Some(head) = head else {
        return Err(StoreError::LockLost);
    };
    let token = item.lock_token.as_str();
    let meta = &head.meta;
    let seed = machine::jitter_seed(head.sequence);
    let (step, description) = match &item.action {
        SettleAction::Complete => (machine::complete(meta, token, now), None),
        SettleAction::Abandon { delay_ms, .. } => (
            machine::abandon(meta, &q.policy, token, now, *delay_ms, seed),
            None,
        ),
        SettleAction::Defer => (machine::defer(meta, token, now), None),
        SettleAction::Renew { lock_ms, .. } => (machine::renew(meta, token, now, *lock_ms), None),
        SettleAction::DeadLetter {
            reason,
            description,
            by_broker,
            ..
        } => (
            machine::dead_letter(meta, token, now, reason).map(|step| match step {
                Step::DeadLetter { reason, .. } if *by_broker => Step::DeadLetter {
                    reason,
                    by_broker: true,
                },
                other => other,
            }),
            description.clone(),
        ),
    };
    let step = step.map_err(|_| StoreError::LockLost)?;
    if let SettleAction::Renew {
        lock_ms,
        cap_from_receive_ms: Some(cap_ms),
    } = item.action
    {
        check_lock_cap(meta.last_delivered_at, now, lock_ms, cap_ms)?;
    }
    if target_missing
        && matches!(
            step,
            Step::DeadLetter {
                by_broker: false,
                ..
            }
        )
    {
        return Err(super::dead_letters::target_missing(q));
    }
    let mut write = write_for(q, &head, step, description, effects);
    if let (Write::DeadLetter(cause), SettleAction::DeadLetter { classifier, .. }) =
        (&mut write, &item.action)
        && !cause.by_broker
    {
        cause.classifier = classifier.clone();
    }
    let settled = Settled {
        sequence: head.sequence,
        message_id: head.message_id.clone(),
        delivery_count: head.meta.delivery_count,
        locked_until: match &write {
            Write::Meta(m) => m.locked_until,
            _ => None,
        },
        dead_letter_id: None,
    };
    // On a group-ordered queue a settled message may unblock its group.
    if q.policy.group_ordering && !matches!(item.action, SettleAction::Renew { .. }) {
        effects.wake(&q.name);
    }
    // Only a lock released by an abandon stores the attempt's evidence.
    let last_attempt = match (&item.action, &write) {
        (SettleAction::Abandon { last_attempt, .. }, Write::Meta(_)) => last_attempt.clone(),
        _ => None,
    };
    Ok(Settling {
        head,
        write,
        settled,
        last_attempt,
    })
}

/// Refuses a renewal at `now` by `lock_ms` that would end more than `cap_ms` after
/// `received_at`, the receive that took the lock (the renewal of a held lock: the latest
/// delivery is the one that took it). Ending exactly at the cap is allowed.
pub fn check_lock_cap(
    received_at: Option<Timestamp>,
    now: Timestamp,
    lock_ms: u64,
    cap_ms: u64,
) -> StoreResult<()> {
    let Some(received_at) = received_at else {
        return Ok(());
    };
    let elapsed = u64::try_from(now.0.saturating_sub(received_at.0)).unwrap_or(0);
    let remaining_ms = cap_ms.saturating_sub(elapsed);
    if lock_ms > remaining_ms {
        return Err(StoreError::LockCapExceeded {
            cap_ms,
            remaining_ms,
        });
    }
    Ok(())
}

// ---- sweep ------------------------------------------------------------------------------

/// What the sweep (or the receive path of its queue) does to `head` at `now`: an expired
/// lock is released (and reported as a lock expiry), an expired message expired. `None`
/// when nothing is due.
pub fn sweep(q: &QueueRow, head: &Head, now: Timestamp, effects: &mut Effects) -> Option<Write> {
    let step = machine::sweep(
        &head.meta,
        &q.policy,
        now,
        machine::jitter_seed(head.sequence),
    )?;
    if head.meta.state == MessageState::Locked {
        effects.lock_expired.push(message_ref(&q.name, head));
    }
    Some(write_for(q, head, step, None, effects))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_cap_counts_from_the_receive() {
        let received = Some(Timestamp(1_000));
        assert!(check_lock_cap(received, Timestamp(1_000), 10_000, 10_000).is_ok());
        assert!(check_lock_cap(received, Timestamp(4_000), 7_000, 10_000).is_ok());
        assert!(matches!(
            check_lock_cap(received, Timestamp(4_000), 7_001, 10_000),
            Err(StoreError::LockCapExceeded {
                cap_ms: 10_000,
                remaining_ms: 7_000
            })
        ));
        assert!(matches!(
            check_lock_cap(received, Timestamp(20_000), 0, 10_000),
            Ok(())
        ));
        assert!(matches!(
            check_lock_cap(received, Timestamp(20_000), 1, 10_000),
            Err(StoreError::LockCapExceeded {
                remaining_ms: 0,
                ..
            })
        ));
        assert!(check_lock_cap(None, Timestamp(0), u64::MAX, 0).is_ok());
    }
    use crate::skeleton::testing::message as m;

    #[test]
    fn lock_tokens_carry_their_key() {
        let t = lock_token(0x1234);
        assert!(t.starts_with("lk_"));
        assert_eq!(token_key(&t), Some(0x1234));
        assert_eq!(token_key("lk_unknown"), None);
        assert_eq!(token_key("lk_x.zz"), None);
        assert_eq!(token_key("lk_x.0"), None);
        assert_ne!(lock_token(1), lock_token(1));
    }

    #[test]
    fn a_batch_asks_once_per_id_and_repeats_answer_as_the_first() {
        let batch = [m("a"), m("b"), m("a"), m("c"), m("b")];
        let mut asked = Vec::new();
        let slots = slots(&batch, true, |id| {
            asked.push(id.to_owned());
            Ok((id == "b").then_some(7))
        })
        .expect("slots");
        assert_eq!(asked, ["a", "b", "c"]);
        assert_eq!(
            slots,
            [
                Slot::New,
                Slot::Duplicate(7),
                Slot::RepeatOf(0),
                Slot::New,
                Slot::RepeatOf(1)
            ]
        );
        let (out, rows) = place(&batch, &slots, [10, 11], Timestamp(5)).expect("place");
        let answers: Vec<(i64, bool)> = out.iter().map(|e| (e.sequence, e.duplicate)).collect();
        assert_eq!(
            answers,
            [(10, false), (7, true), (10, true), (11, false), (7, true)]
        );
        assert_eq!(rows.len(), 2);
        assert!(place(&batch, &slots, [10], Timestamp(5)).is_err());
        assert!(place(&batch, &slots, [10, 11, 12], Timestamp(5)).is_err());
        assert_eq!(
            super::slots(&batch, false, |_| panic!("not asked")).expect("slots"),
            [Slot::New; 5]
        );
    }
}
