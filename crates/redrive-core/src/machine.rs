//! The message state machine. Every backend applies these functions to decide what happens
//! to a message; none of them re-implements a rule.
//!
//! ```text
//!            send                      receive (count+1)
//!   ───────────────▶ Available ─────────────────────────▶ Locked ──complete──▶ (removed)
//!   (visible_at may      ▲  ▲                               │ │ │
//!    be in the future:   │  └──── abandon / lock expiry ────┘ │ └──dead-letter──▶ dead letter
//!    "scheduled")        │        (+ backoff; at max count    │
//!                        │         → dead letter instead)     defer
//!                        │                                    ▼
//!                        └──────────────────────────────── Deferred ──receive by seq──▶ Locked
//!   Any state but Locked: TTL passed → dead letter (TTLExpired) or removed, by policy.
//! ```

use crate::clock::Timestamp;
use crate::dead_letter::DeadLetterReason;
use crate::policy::QueuePolicy;

/// Where a message is on its queue. Stored by name in every backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageState {
    /// Waiting for a receiver. Enters on send, on abandon and on lock expiry. Only visible
    /// once `visible_at <= now`; before that it counts as *scheduled* (a scheduled enqueue
    /// or a redelivery backoff). Leaves by receive, expiry, or cancellation while scheduled.
    Available,
    /// Held by one receiver until `locked_until`. Leaves by complete (removed), abandon or
    /// lock expiry (back to Available or Deferred, or dead-lettered at the max delivery
    /// count), defer, or an explicit dead-letter. Lock expiry is applied by the receive path
    /// of its queue and by the background sweep, whichever comes first.
    Locked,
    /// Set aside by its receiver: only a receive by sequence number takes it. Leaves by that
    /// receive or by expiry.
    Deferred,
}

impl MessageState {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageState::Available => "available",
            MessageState::Locked => "locked",
            MessageState::Deferred => "deferred",
        }
    }
}

impl std::str::FromStr for MessageState {
    type Err = crate::dead_letter::UnknownVariant;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "available" => Ok(MessageState::Available),
            "locked" => Ok(MessageState::Locked),
            "deferred" => Ok(MessageState::Deferred),
            _ => Err(crate::dead_letter::UnknownVariant {
                kind: "MessageState",
                value: s.to_owned(),
            }),
        }
    }
}

/// The part of a stored message that the state machine reads and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageMeta {
    /// Current state.
    pub state: MessageState,
    /// When an Available message becomes visible.
    pub visible_at: Timestamp,
    /// When the message expires, if ever.
    pub expires_at: Option<Timestamp>,
    /// Deliveries so far; incremented, in the same commit as the lock, by every receive.
    pub delivery_count: u32,
    /// The token of the current lock (Locked only).
    pub lock_token: Option<String>,
    /// When the current lock runs out (Locked only).
    pub locked_until: Option<Timestamp>,
    /// Whether the message was deferred: a released lock returns it to Deferred.
    pub deferred: bool,
    /// Time of the first delivery.
    pub first_delivered_at: Option<Timestamp>,
    /// Time of the latest delivery.
    pub last_delivered_at: Option<Timestamp>,
}

impl MessageMeta {
    /// A message as sent: Available from `visible_at`, never delivered.
    pub fn sent(visible_at: Timestamp, expires_at: Option<Timestamp>) -> Self {
        MessageMeta {
            state: MessageState::Available,
            visible_at,
            expires_at,
            delivery_count: 0,
            lock_token: None,
            locked_until: None,
            deferred: false,
            first_delivered_at: None,
            last_delivered_at: None,
        }
    }

    /// Whether the time to live has run out at `now`.
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.expires_at.is_some_and(|e| e <= now)
    }

    /// Whether the message holds a valid lock with `token` at `now`.
    pub fn holds_lock(&self, token: &str, now: Timestamp) -> bool {
        self.state == MessageState::Locked
            && self.lock_token.as_deref() == Some(token)
            && self.locked_until.is_some_and(|u| u > now)
    }
}

/// What to do with a message after a transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Store this new meta.
    Keep(MessageMeta),
    /// Remove it: completed.
    Complete,
    /// Move it to the dead-letter target for this reason. `by_broker` is false for an
    /// application's explicit dead-letter.
    DeadLetter {
        /// Why.
        reason: DeadLetterReason,
        /// Whether the broker decided (policy) rather than the application.
        by_broker: bool,
    },
    /// Remove it: expired on a queue that does not dead-letter on expiry. Counted in a metric.
    Drop,
}

/// Why a lock is given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The receiver abandoned it, optionally asking for a delay (else the queue's backoff).
    Abandon {
        /// Delay before it is visible again, overriding the backoff.
        delay_ms: Option<u64>,
    },
    /// The lock ran out without settlement. Counts as an abandon.
    LockExpired,
}

/// A settlement or receive that the message's state does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The lock expired, was settled already, or the token is not this message's.
    #[error("the lock was lost: it expired or the message was already settled")]
    LockLost,
    /// The message is not in a state this operation applies to.
    #[error("the message is not receivable in its current state")]
    NotReceivable,
}

fn expire_step(policy: &QueuePolicy) -> Step {
    if policy.dead_letter_on_expiry {
        Step::DeadLetter {
            reason: DeadLetterReason::TtlExpired,
            by_broker: true,
        }
    } else {
        Step::Drop
    }
}

/// Receive (peek-lock) a message at `now`. `by_sequence` is true for a receive of a
/// deferred message by its sequence number; otherwise the message must be Available and
/// visible. An expired message is never delivered, and a message already delivered the
/// maximum number of times (possible after the policy was lowered) is dead-lettered
/// instead of being delivered again.
pub fn receive(
    meta: &MessageMeta,
    policy: &QueuePolicy,
    now: Timestamp,
    lock_ms: u64,
    token: String,
    by_sequence: bool,
) -> Result<Step, Refusal> {
    let receivable = match meta.state {
        MessageState::Available => !by_sequence && meta.visible_at <= now,
        MessageState::Deferred => by_sequence,
        MessageState::Locked => false,
    };
    if !receivable {
        return Err(Refusal::NotReceivable);
    }
    if meta.is_expired(now) {
        return Ok(expire_step(policy));
    }
    if meta.delivery_count >= policy.max_delivery_count {
        return Ok(Step::DeadLetter {
            reason: DeadLetterReason::MaxDeliveryCountExceeded,
            by_broker: true,
        });
    }
    let lock_ms = i64::try_from(lock_ms).unwrap_or(i64::MAX);
    Ok(Step::Keep(MessageMeta {
        state: MessageState::Locked,
        delivery_count: meta.delivery_count + 1,
        lock_token: Some(token),
        locked_until: Some(now.plus_millis(lock_ms)),
        first_delivered_at: Some(meta.first_delivered_at.unwrap_or(now)),
        last_delivered_at: Some(now),
        ..meta.clone()
    }))
}

/// Give up a lock (abandon or lock expiry). At the max delivery count the message is
/// dead-lettered; an expired message is expired; otherwise it returns to Available (or
/// Deferred, if it was deferred) after the abandon's delay or the queue's backoff.
/// `seed` makes the backoff jitter deterministic per message.
pub fn release(
    meta: &MessageMeta,
    policy: &QueuePolicy,
    now: Timestamp,
    why: Release,
    seed: u64,
) -> Step {
    if meta.delivery_count >= policy.max_delivery_count {
        return Step::DeadLetter {
            reason: DeadLetterReason::MaxDeliveryCountExceeded,
            by_broker: true,
        };
    }
    if meta.is_expired(now) {
        return expire_step(policy);
    }
    let delay = match why {
        Release::Abandon { delay_ms: Some(d) } => d,
        Release::Abandon { delay_ms: None } | Release::LockExpired => policy
            .redelivery_backoff
            .delay_ms(meta.delivery_count, seed),
    };
    // When a lock expired unnoticed, the backoff counts from the expiry, not from the sweep.
    let from = match why {
        Release::LockExpired => meta.locked_until.unwrap_or(now).min(now),
        Release::Abandon { .. } => now,
    };
    Step::Keep(MessageMeta {
        state: if meta.deferred {
            MessageState::Deferred
        } else {
            MessageState::Available
        },
        visible_at: from.plus_millis(i64::try_from(delay).unwrap_or(i64::MAX)),
        lock_token: None,
        locked_until: None,
        ..meta.clone()
    })
}

/// Abandon under `token`.
pub fn abandon(
    meta: &MessageMeta,
    policy: &QueuePolicy,
    token: &str,
    now: Timestamp,
    delay_ms: Option<u64>,
    seed: u64,
) -> Result<Step, Refusal> {
    check(meta, token, now)?;
    Ok(release(
        meta,
        policy,
        now,
        Release::Abandon { delay_ms },
        seed,
    ))
}

/// Complete under `token`: the message is removed.
pub fn complete(meta: &MessageMeta, token: &str, now: Timestamp) -> Result<Step, Refusal> {
    check(meta, token, now)?;
    Ok(Step::Complete)
}

/// Defer under `token`: afterwards only a receive by sequence number takes it.
pub fn defer(meta: &MessageMeta, token: &str, now: Timestamp) -> Result<Step, Refusal> {
    check(meta, token, now)?;
    Ok(Step::Keep(MessageMeta {
        state: MessageState::Deferred,
        deferred: true,
        lock_token: None,
        locked_until: None,
        ..meta.clone()
    }))
}

/// Dead-letter under `token`, by the application's decision.
pub fn dead_letter(
    meta: &MessageMeta,
    token: &str,
    now: Timestamp,
    reason: &str,
) -> Result<Step, Refusal> {
    check(meta, token, now)?;
    Ok(Step::DeadLetter {
        reason: DeadLetterReason::Application(reason.to_owned()),
        by_broker: false,
    })
}

/// Renew the lock under `token` for `lock_ms` from `now`.
pub fn renew(
    meta: &MessageMeta,
    token: &str,
    now: Timestamp,
    lock_ms: u64,
) -> Result<Step, Refusal> {
    check(meta, token, now)?;
    Ok(Step::Keep(MessageMeta {
        locked_until: Some(now.plus_millis(i64::try_from(lock_ms).unwrap_or(i64::MAX))),
        ..meta.clone()
    }))
}

/// What the background sweep (and the receive path of the message's queue) does to a
/// message at `now`: an expired lock is released, an expired message is expired. `None`
/// when nothing is due.
pub fn sweep(meta: &MessageMeta, policy: &QueuePolicy, now: Timestamp, seed: u64) -> Option<Step> {
    match meta.state {
        MessageState::Locked => {
            if meta.locked_until.is_some_and(|u| u <= now) {
                Some(release(meta, policy, now, Release::LockExpired, seed))
            } else {
                None
            }
        }
        MessageState::Available | MessageState::Deferred => {
            meta.is_expired(now).then(|| expire_step(policy))
        }
    }
}

/// How a message stands at `now` for a reader that writes nothing (a browse, the queue
/// counts). A lock that has run out holds nothing from that moment, whether or not the
/// sweep (or a receive of its queue) has written its release yet: it is shown as its
/// release leaves it ([`release`] for [`Release::LockExpired`], the sweep's step), so a
/// browse never shows `locked` with a past `locked_until` while a settlement answers
/// `LockLost`. A message whose release dead-letters it (its last delivery) or drops it
/// (its time to live ran out) is shown unlocked, waiting for that step: available (or
/// deferred) from its lock's expiry. Anything else is shown as stored.
pub fn view(meta: &MessageMeta, policy: &QueuePolicy, now: Timestamp, seed: u64) -> MessageMeta {
    let Some(until) = meta.locked_until.filter(|u| *u <= now) else {
        return meta.clone();
    };
    if meta.state != MessageState::Locked {
        return meta.clone();
    }
    match release(meta, policy, now, Release::LockExpired, seed) {
        Step::Keep(next) => next,
        Step::Complete | Step::DeadLetter { .. } | Step::Drop => MessageMeta {
            state: if meta.deferred {
                MessageState::Deferred
            } else {
                MessageState::Available
            },
            visible_at: until,
            lock_token: None,
            locked_until: None,
            ..meta.clone()
        },
    }
}

fn check(meta: &MessageMeta, token: &str, now: Timestamp) -> Result<(), Refusal> {
    if meta.holds_lock(token, now) {
        Ok(())
    } else {
        Err(Refusal::LockLost)
    }
}

/// The seed for a message's backoff jitter: stable per queue sequence number.
pub fn jitter_seed(sequence: i64) -> u64 {
    u64::from_ne_bytes(sequence.to_ne_bytes())
}
