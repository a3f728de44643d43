//! The queue policy: every rule a queue applies to its messages, versioned as a whole.
//!
//! Durations are milliseconds. A policy is validated as a whole by [`QueuePolicy::validate`]
//! before any backend stores it; a change bumps the queue's policy version, and each
//! dead-letter record keeps the version that routed it.

use serde::{Deserialize, Serialize};

use crate::name::EntityName;
use crate::replay::AutoReplay;
use crate::sqs::SqsAttributes;

/// Shortest lock a receiver may take.
pub const MIN_LOCK_MS: u64 = 1_000;
/// Longest lock a receiver may take (5 minutes, as Service Bus).
pub const MAX_LOCK_MS: u64 = 300_000;
/// Longest duplicate-detection window (7 days).
pub const MAX_DEDUP_WINDOW_MS: u64 = 7 * 24 * 3_600_000;
/// Largest configurable message size (256 MiB).
pub const MAX_MESSAGE_SIZE_LIMIT: u32 = 256 * 1024 * 1024;
/// Default retention of dead-letter records, every area (30 days).
pub const DEFAULT_DEAD_LETTER_RETENTION_MS: u64 = 30 * 24 * 3_600_000;
/// Longest configurable retention of dead-letter records (10 years); 0 keeps them forever.
pub const MAX_DEAD_LETTER_RETENTION_MS: u64 = 3_650 * 24 * 3_600_000;

/// The default of [`QueuePolicy::dead_letter_retention_ms`] (for serde).
pub fn default_dead_letter_retention_ms() -> u64 {
    DEFAULT_DEAD_LETTER_RETENTION_MS
}

/// Checks a dead-letter retention (`field` names it in the error).
pub fn check_dead_letter_retention(ms: u64, field: &'static str) -> Result<(), PolicyError> {
    if ms > MAX_DEAD_LETTER_RETENTION_MS {
        return Err(PolicyError {
            field,
            why: "must be at most 3650 days (315360000000 ms); 0 keeps records forever".into(),
        });
    }
    Ok(())
}

/// Highest configurable max delivery count.
pub const MAX_DELIVERY_COUNT_LIMIT: u32 = 10_000;

/// Every rule a queue applies to its messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct QueuePolicy {
    /// How long a receive locks a message unless the receiver asks otherwise (default 30 s).
    pub lock_duration_ms: u64,
    /// Deliveries after which a released message is dead-lettered instead (default 10).
    pub max_delivery_count: u32,
    /// Time to live of messages that do not set their own; `None` means they never expire.
    pub default_ttl_ms: Option<u64>,
    /// Whether an expired message goes to the dead-letter store (`TTLExpired`) rather than
    /// being removed (removals are counted in a metric).
    pub dead_letter_on_expiry: bool,
    /// Window in which a repeated message id is accepted but not enqueued again; 0 is off.
    pub duplicate_detection_window_ms: u64,
    /// Whether every message must carry a session id and is received through a session.
    pub requires_session: bool,
    /// Group ordering without session locks (SQS FIFO message groups): messages that carry
    /// a session id (their *group*) are delivered in sequence order within the group, and
    /// no message of a group is delivered while any message of it is locked (SQS: none of
    /// a group while one of it is in flight). Other
    /// groups are independent, messages without a session id are plain, and one receive
    /// may return several groups and several consecutive messages of one group. Not
    /// together with `requires_session`.
    #[serde(default)]
    pub group_ordering: bool,
    /// Delay before an abandoned or lock-expired message is visible again.
    pub redelivery_backoff: Backoff,
    /// Largest accepted body, in bytes (default 1 MiB).
    pub max_message_size: u32,
    /// Where dead letters go: `None` is the queue's own dead-letter store; a name sends
    /// them to that queue (SQS style), keeping their evidence record here.
    pub dead_letter_queue: Option<EntityName>,
    /// SQS-only attributes of a queue created or changed through the SQS endpoint; absent
    /// on queues that SQS never touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sqs: Option<SqsAttributes>,
    /// Automatic replay of this queue's live dead letters (off unless enabled; a policy
    /// stored before replay existed reads as off).
    #[serde(default)]
    pub auto_replay: AutoReplay,
    /// How long dead-letter records of every area are kept before the retention rule
    /// deletes them, ms (default 30 days; `0` keeps them forever and must be said).
    #[serde(default = "default_dead_letter_retention_ms")]
    pub dead_letter_retention_ms: u64,
    /// Whether this queue is a test sandbox: a recovery case's isolated test may send its
    /// fixture here (by a caller who may also send here), and only to such a queue, never to
    /// a live one (default off; a policy stored before sandboxes existed reads as off).
    #[serde(default)]
    pub test_sandbox: bool,
}

impl Default for QueuePolicy {
    fn default() -> Self {
        QueuePolicy {
            lock_duration_ms: 30_000,
            max_delivery_count: 10,
            default_ttl_ms: None,
            dead_letter_on_expiry: false,
            duplicate_detection_window_ms: 0,
            requires_session: false,
            group_ordering: false,
            redelivery_backoff: Backoff::None,
            max_message_size: 1024 * 1024,
            dead_letter_queue: None,
            sqs: None,
            auto_replay: AutoReplay::default(),
            dead_letter_retention_ms: DEFAULT_DEAD_LETTER_RETENTION_MS,
            test_sandbox: false,
        }
    }
}

/// Where a queue's dead letters go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadLetterTarget {
    /// The queue's own dead-letter store.
    Store,
    /// Another queue.
    Queue(EntityName),
}

/// Delay before an abandoned or lock-expired message is delivered again. Service Bus has
/// none; redrive lets the queue declare one so a failing dependency is not hammered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Backoff {
    /// Visible again at once.
    #[default]
    None,
    /// The same delay every time.
    Fixed {
        /// The delay.
        delay_ms: u64,
    },
    /// `initial_ms * 2^(deliveries-1)`, capped at `max_ms`, then reduced by up to
    /// `jitter` (a fraction from 0 to 1) so that released messages do not return in step.
    Exponential {
        /// Delay after the first delivery.
        initial_ms: u64,
        /// Upper bound of the delay.
        max_ms: u64,
        /// Fraction of the delay that is randomised away (0 = none, 1 = full jitter).
        #[serde(default)]
        jitter: f64,
    },
}

/// A policy that breaks a rule, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid policy field `{field}`: {why}")]
pub struct PolicyError {
    /// The offending field.
    pub field: &'static str,
    /// What is wrong with it.
    pub why: String,
}

fn bad(field: &'static str, why: impl Into<String>) -> Result<(), PolicyError> {
    Err(PolicyError {
        field,
        why: why.into(),
    })
}

impl QueuePolicy {
    /// Checks every field; the first broken rule is returned.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if !(MIN_LOCK_MS..=MAX_LOCK_MS).contains(&self.lock_duration_ms) {
            bad(
                "lock_duration_ms",
                "must be between 1000 and 300000 (5 minutes)",
            )?;
        }
        if !(1..=MAX_DELIVERY_COUNT_LIMIT).contains(&self.max_delivery_count) {
            bad("max_delivery_count", "must be between 1 and 10000")?;
        }
        if self.default_ttl_ms == Some(0) {
            bad("default_ttl_ms", "must be positive (omit it for no expiry)")?;
        }
        if self.duplicate_detection_window_ms > MAX_DEDUP_WINDOW_MS {
            bad(
                "duplicate_detection_window_ms",
                "must be at most 7 days (604800000)",
            )?;
        }
        if self.group_ordering && self.requires_session {
            bad(
                "group_ordering",
                "cannot be combined with requires_session (sessions already keep order)",
            )?;
        }
        if self.max_message_size == 0 || self.max_message_size > MAX_MESSAGE_SIZE_LIMIT {
            bad("max_message_size", "must be between 1 and 268435456 bytes")?;
        }
        match self.redelivery_backoff {
            Backoff::None => {}
            Backoff::Fixed { delay_ms } => {
                if delay_ms > MAX_DEDUP_WINDOW_MS {
                    bad("redelivery_backoff.delay_ms", "must be at most 7 days")?;
                }
            }
            Backoff::Exponential {
                initial_ms,
                max_ms,
                jitter,
            } => {
                if initial_ms == 0 {
                    bad("redelivery_backoff.initial_ms", "must be positive")?;
                }
                if max_ms < initial_ms || max_ms > MAX_DEDUP_WINDOW_MS {
                    bad(
                        "redelivery_backoff.max_ms",
                        "must be at least initial_ms and at most 7 days",
                    )?;
                }
                if !(0.0..=1.0).contains(&jitter) {
                    bad("redelivery_backoff.jitter", "must be between 0 and 1")?;
                }
            }
        }
        if let Some(sqs) = &self.sqs
            && let Err((field, why)) = sqs.check()
        {
            bad(field, why)?;
        }
        self.auto_replay.validate()?;
        check_dead_letter_retention(self.dead_letter_retention_ms, "dead_letter_retention_ms")?;
        Ok(())
    }

    /// Where this queue's dead letters go.
    pub fn dead_letter_target(&self) -> DeadLetterTarget {
        match &self.dead_letter_queue {
            None => DeadLetterTarget::Store,
            Some(q) => DeadLetterTarget::Queue(q.clone()),
        }
    }
}

impl Backoff {
    /// The delay before delivery number `deliveries + 1`, after `deliveries` deliveries.
    /// `seed` makes the jitter deterministic for a given message and count (the caller
    /// derives it from the message), so that the state machine stays a pure function.
    pub fn delay_ms(&self, deliveries: u32, seed: u64) -> u64 {
        match *self {
            Backoff::None => 0,
            Backoff::Fixed { delay_ms } => delay_ms,
            Backoff::Exponential {
                initial_ms,
                max_ms,
                jitter,
            } => {
                let shift = deliveries.saturating_sub(1).min(62);
                let raw = initial_ms.saturating_mul(1u64 << shift).min(max_ms);
                if jitter <= 0.0 {
                    return raw;
                }
                let unit = unit_interval(splitmix64(seed ^ u64::from(deliveries)));
                // Delays are far below 2^53 ms, so the float round trip is exact enough.
                #[allow(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    clippy::cast_precision_loss
                )]
                let cut = (raw as f64 * jitter * unit) as u64;
                raw - cut.min(raw)
            }
        }
    }
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[allow(clippy::cast_precision_loss)] // 53 random bits are what an f64 mantissa holds
fn unit_interval(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_match_service_bus() {
        let p = QueuePolicy::default();
        p.validate().unwrap();
        assert_eq!(p.lock_duration_ms, 30_000);
        assert_eq!(p.max_delivery_count, 10);
        assert_eq!(p.max_message_size, 1 << 20);
        assert_eq!(p.duplicate_detection_window_ms, 0);
    }

    #[test]
    fn out_of_range_fields_are_named() {
        let p = QueuePolicy {
            lock_duration_ms: 300_001,
            ..QueuePolicy::default()
        };
        assert_eq!(p.validate().unwrap_err().field, "lock_duration_ms");
        let p = QueuePolicy {
            max_delivery_count: 0,
            ..QueuePolicy::default()
        };
        assert_eq!(p.validate().unwrap_err().field, "max_delivery_count");
        let p = QueuePolicy {
            duplicate_detection_window_ms: MAX_DEDUP_WINDOW_MS + 1,
            ..QueuePolicy::default()
        };
        assert_eq!(
            p.validate().unwrap_err().field,
            "duplicate_detection_window_ms"
        );
        let p = QueuePolicy {
            redelivery_backoff: Backoff::Exponential {
                initial_ms: 10,
                max_ms: 5,
                jitter: 0.0,
            },
            ..QueuePolicy::default()
        };
        assert_eq!(p.validate().unwrap_err().field, "redelivery_backoff.max_ms");
    }

    #[test]
    fn a_policy_stored_before_auto_replay_reads_as_disabled() {
        let old = r#"{"lock_duration_ms":30000,"max_delivery_count":10,"default_ttl_ms":null,
            "dead_letter_on_expiry":false,"duplicate_detection_window_ms":0,
            "requires_session":false,"redelivery_backoff":{"kind":"none"},
            "max_message_size":1048576,"dead_letter_queue":null}"#;
        let p: QueuePolicy = serde_json::from_str(old).expect("old policy reads");
        assert_eq!(p.auto_replay, AutoReplay::default());
        assert!(!p.auto_replay.enabled);
        let v = serde_json::to_value(&p).expect("serializes");
        assert_eq!(v["auto_replay"]["enabled"], false);
        let back: QueuePolicy = serde_json::from_value(v).expect("round trip");
        assert_eq!(back, p);
    }

    #[test]
    fn auto_replay_errors_surface_from_the_queue_policy() {
        let p = QueuePolicy {
            auto_replay: AutoReplay {
                max_replay_attempts: 0,
                ..AutoReplay::default()
            },
            ..QueuePolicy::default()
        };
        assert_eq!(
            p.validate().unwrap_err().field,
            "auto_replay.max_replay_attempts"
        );
    }

    #[test]
    fn group_ordering_is_off_by_default_and_excludes_sessions() {
        assert!(!QueuePolicy::default().group_ordering);
        let p = QueuePolicy {
            group_ordering: true,
            ..QueuePolicy::default()
        };
        p.validate().unwrap();
        let p = QueuePolicy {
            group_ordering: true,
            requires_session: true,
            ..QueuePolicy::default()
        };
        assert_eq!(p.validate().unwrap_err().field, "group_ordering");
    }

    #[test]
    fn exponential_backoff_doubles_caps_and_jitters_down() {
        let b = Backoff::Exponential {
            initial_ms: 100,
            max_ms: 1_000,
            jitter: 0.0,
        };
        let delays: Vec<u64> = (1..=6).map(|n| b.delay_ms(n, 7)).collect();
        assert_eq!(delays, vec![100, 200, 400, 800, 1_000, 1_000]);
        let j = Backoff::Exponential {
            initial_ms: 1_000,
            max_ms: 1_000,
            jitter: 0.5,
        };
        for seed in 0..100 {
            let d = j.delay_ms(3, seed);
            assert!((500..=1_000).contains(&d), "{d}");
            assert_eq!(d, j.delay_ms(3, seed), "deterministic for one seed");
        }
        assert_eq!(Backoff::Fixed { delay_ms: 42 }.delay_ms(9, 1), 42);
        assert_eq!(Backoff::None.delay_ms(9, 1), 0);
    }
}
