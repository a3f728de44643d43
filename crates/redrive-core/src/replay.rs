//! The automatic replay policy of a queue or a subscription: whether its live dead letters
//! are judged and republished without an operator, how often an event may go round, and
//! the budgets of one republish.
//!
//! Part of the entity's versioned policy ([`QueuePolicy::auto_replay`](crate::QueuePolicy)
//! and the subscription's spec). A policy stored before replay existed has no such section
//! and reads as the default: disabled. Every field is bounded on its own — no rule relates
//! two fields — so a partial change ([`AutoReplayPatch`]) whose present fields are valid
//! keeps a valid policy valid whatever it is applied to.

use serde::{Deserialize, Serialize};

use crate::policy::{MAX_MESSAGE_SIZE_LIMIT, PolicyError};

/// Default cap on replays of one event.
pub const DEFAULT_MAX_REPLAY_ATTEMPTS: u32 = 3;
/// Highest configurable cap on replays of one event: past it a replay loop is a poison
/// event, not a transient failure.
pub const MAX_REPLAY_ATTEMPTS_LIMIT: u32 = 100;
/// Longest delay before a candidate is judged (7 days, as the other policy delays).
pub const MAX_JUDGE_DELAY_MS: u64 = 7 * 24 * 3_600_000;
/// Default byte budget of one republished chunk (1 MiB, Event Grid's publish request cap).
pub const DEFAULT_MAX_CHUNK_BYTES: u32 = 1024 * 1024;
/// Smallest byte budget of a chunk: below it a chunk holds hardly an event's envelope.
pub const MIN_CHUNK_BYTES: u32 = 1024;
/// Largest byte budget of a chunk: the largest message or event any entity accepts.
pub const MAX_CHUNK_BYTES_LIMIT: u32 = MAX_MESSAGE_SIZE_LIMIT;
/// Default and largest event budget of one chunk (Event Grid's 5,000 events per publish).
pub const MAX_CHUNK_EVENTS_LIMIT: u32 = 5_000;

/// Where a replayed event is republished. A string on the wire, so that destinations can
/// be added without breaking a stored policy or a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayDestination {
    /// Where the message was dead-lettered from: the queue itself, or the subscription's
    /// own queue (not its topic, whose other subscriptions never see the replay).
    #[default]
    Origin,
}

/// Automatic replay of an entity's live dead letters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AutoReplay {
    /// Whether live dead letters become replay candidates (default off).
    pub enabled: bool,
    /// Replays of one event before it is quarantined (`ReplayAttemptsExhausted`); counted
    /// on the event's id (`<id>|<n>`). 1 to 100, default 3.
    pub max_replay_attempts: u32,
    /// Delay between a dead letter becoming a candidate and its judgement, ms (default 0:
    /// judged at once; at most 7 days).
    pub judge_delay_ms: u64,
    /// Byte budget of one republished chunk (1 KiB to 256 MiB, default 1 MiB).
    pub max_chunk_bytes: u32,
    /// Event budget of one republished chunk (1 to 5,000, default 5,000).
    pub max_chunk_events: u32,
    /// Where replayed events go (default and only choice today: `origin`).
    pub destination: ReplayDestination,
}

impl Default for AutoReplay {
    fn default() -> Self {
        AutoReplay {
            enabled: false,
            max_replay_attempts: DEFAULT_MAX_REPLAY_ATTEMPTS,
            judge_delay_ms: 0,
            max_chunk_bytes: DEFAULT_MAX_CHUNK_BYTES,
            max_chunk_events: MAX_CHUNK_EVENTS_LIMIT,
            destination: ReplayDestination::Origin,
        }
    }
}

/// A partial change of an [`AutoReplay`]: fields left out stay.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AutoReplayPatch {
    /// New `enabled`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// New `max_replay_attempts`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_replay_attempts: Option<u32>,
    /// New `judge_delay_ms`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judge_delay_ms: Option<u64>,
    /// New `max_chunk_bytes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_chunk_bytes: Option<u32>,
    /// New `max_chunk_events`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_chunk_events: Option<u32>,
    /// New `destination`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination: Option<ReplayDestination>,
}

fn bad(field: &'static str, why: &str) -> Result<(), PolicyError> {
    Err(PolicyError {
        field,
        why: why.to_owned(),
    })
}

fn check_attempts(n: u32) -> Result<(), PolicyError> {
    if !(1..=MAX_REPLAY_ATTEMPTS_LIMIT).contains(&n) {
        bad(
            "auto_replay.max_replay_attempts",
            "must be between 1 and 100",
        )?;
    }
    Ok(())
}

fn check_delay(ms: u64) -> Result<(), PolicyError> {
    if ms > MAX_JUDGE_DELAY_MS {
        bad(
            "auto_replay.judge_delay_ms",
            "must be at most 7 days (604800000)",
        )?;
    }
    Ok(())
}

fn check_chunk_bytes(n: u32) -> Result<(), PolicyError> {
    if !(MIN_CHUNK_BYTES..=MAX_CHUNK_BYTES_LIMIT).contains(&n) {
        bad(
            "auto_replay.max_chunk_bytes",
            "must be between 1024 and 268435456 bytes",
        )?;
    }
    Ok(())
}

fn check_chunk_events(n: u32) -> Result<(), PolicyError> {
    if !(1..=MAX_CHUNK_EVENTS_LIMIT).contains(&n) {
        bad("auto_replay.max_chunk_events", "must be between 1 and 5000")?;
    }
    Ok(())
}

impl AutoReplay {
    /// Checks every field; the first broken rule is returned, its field named
    /// `auto_replay.<field>`.
    pub fn validate(&self) -> Result<(), PolicyError> {
        check_attempts(self.max_replay_attempts)?;
        check_delay(self.judge_delay_ms)?;
        check_chunk_bytes(self.max_chunk_bytes)?;
        check_chunk_events(self.max_chunk_events)
    }

    /// This policy with `patch` applied. Validating the patch ([`AutoReplayPatch::validate`])
    /// is enough for the result of applying it to a valid policy to be valid.
    pub fn patched(&self, patch: &AutoReplayPatch) -> AutoReplay {
        AutoReplay {
            enabled: patch.enabled.unwrap_or(self.enabled),
            max_replay_attempts: patch
                .max_replay_attempts
                .unwrap_or(self.max_replay_attempts),
            judge_delay_ms: patch.judge_delay_ms.unwrap_or(self.judge_delay_ms),
            max_chunk_bytes: patch.max_chunk_bytes.unwrap_or(self.max_chunk_bytes),
            max_chunk_events: patch.max_chunk_events.unwrap_or(self.max_chunk_events),
            destination: patch.destination.unwrap_or(self.destination),
        }
    }
}

impl AutoReplayPatch {
    /// Checks the fields present, by the rules of [`AutoReplay::validate`].
    pub fn validate(&self) -> Result<(), PolicyError> {
        if let Some(n) = self.max_replay_attempts {
            check_attempts(n)?;
        }
        if let Some(ms) = self.judge_delay_ms {
            check_delay(ms)?;
        }
        if let Some(n) = self.max_chunk_bytes {
            check_chunk_bytes(n)?;
        }
        if let Some(n) = self.max_chunk_events {
            check_chunk_events(n)?;
        }
        Ok(())
    }

    /// Whether the patch changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == AutoReplayPatch::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_off_and_as_the_issue_states() {
        let a = AutoReplay::default();
        a.validate().expect("defaults are valid");
        assert!(!a.enabled);
        assert_eq!(a.max_replay_attempts, 3);
        assert_eq!(a.judge_delay_ms, 0);
        assert_eq!(a.max_chunk_bytes, 1 << 20);
        assert_eq!(a.max_chunk_events, 5_000);
        assert_eq!(a.destination, ReplayDestination::Origin);
    }

    #[test]
    fn bounds_are_inclusive_and_name_the_field() {
        let field = |a: AutoReplay| a.validate().expect_err("out of bounds").field;
        let d = AutoReplay::default;
        for ok in [
            AutoReplay {
                max_replay_attempts: 1,
                judge_delay_ms: MAX_JUDGE_DELAY_MS,
                max_chunk_bytes: MIN_CHUNK_BYTES,
                max_chunk_events: 1,
                ..d()
            },
            AutoReplay {
                max_replay_attempts: 100,
                max_chunk_bytes: MAX_CHUNK_BYTES_LIMIT,
                max_chunk_events: 5_000,
                ..d()
            },
        ] {
            ok.validate().expect("at the bounds");
        }
        let attempts = "auto_replay.max_replay_attempts";
        assert_eq!(
            field(AutoReplay {
                max_replay_attempts: 0,
                ..d()
            }),
            attempts
        );
        assert_eq!(
            field(AutoReplay {
                max_replay_attempts: 101,
                ..d()
            }),
            attempts
        );
        assert_eq!(
            field(AutoReplay {
                judge_delay_ms: MAX_JUDGE_DELAY_MS + 1,
                ..d()
            }),
            "auto_replay.judge_delay_ms"
        );
        let bytes = "auto_replay.max_chunk_bytes";
        assert_eq!(
            field(AutoReplay {
                max_chunk_bytes: 1023,
                ..d()
            }),
            bytes
        );
        let over = MAX_CHUNK_BYTES_LIMIT + 1;
        assert_eq!(
            field(AutoReplay {
                max_chunk_bytes: over,
                ..d()
            }),
            bytes
        );
        let events = "auto_replay.max_chunk_events";
        assert_eq!(
            field(AutoReplay {
                max_chunk_events: 0,
                ..d()
            }),
            events
        );
        assert_eq!(
            field(AutoReplay {
                max_chunk_events: 5_001,
                ..d()
            }),
            events
        );
    }

    #[test]
    fn serde_round_trip_and_destination_is_a_string() {
        let a = AutoReplay {
            enabled: true,
            max_replay_attempts: 7,
            judge_delay_ms: 30_000,
            max_chunk_bytes: 4096,
            max_chunk_events: 10,
            destination: ReplayDestination::Origin,
        };
        let v = serde_json::to_value(&a).expect("serializes");
        assert_eq!(v["destination"], "origin");
        let back: AutoReplay = serde_json::from_value(v).expect("reads back");
        assert_eq!(back, a);
        let partial: AutoReplay =
            serde_json::from_str(r#"{"enabled":true}"#).expect("missing fields default");
        assert_eq!(
            partial,
            AutoReplay {
                enabled: true,
                ..AutoReplay::default()
            }
        );
        assert!(serde_json::from_str::<AutoReplay>(r#"{"enabled":true,"bogus":1}"#).is_err());
        assert!(serde_json::from_str::<AutoReplay>(r#"{"destination":"elsewhere"}"#).is_err());
    }

    #[test]
    fn a_patch_changes_only_its_fields_and_checks_them() {
        let base = AutoReplay::default();
        let p: AutoReplayPatch =
            serde_json::from_str(r#"{"max_replay_attempts":5}"#).expect("a patch");
        p.validate().expect("valid patch");
        assert_eq!(
            base.patched(&p),
            AutoReplay {
                max_replay_attempts: 5,
                ..base.clone()
            }
        );
        assert!(AutoReplayPatch::default().is_empty());
        assert!(!p.is_empty());
        let bad = AutoReplayPatch {
            max_chunk_events: Some(0),
            ..AutoReplayPatch::default()
        };
        assert_eq!(
            bad.validate().expect_err("zero events").field,
            "auto_replay.max_chunk_events"
        );
        assert!(serde_json::from_str::<AutoReplayPatch>(r#"{"nope":true}"#).is_err());
    }
}
