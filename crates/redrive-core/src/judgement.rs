//! The judgement of automatic replay, as pure functions: what happens to each event of a
//! live dead-letter record, how the events to republish are cut into chunks, what the
//! stored judgement says, and how long a record whose judgement failed waits.
//!
//! One record may hold one event (a message dead-lettered here) or many (an imported Event
//! Grid dead-letter blob). The judgement is per event, never per record: each event is
//! either republished with the next attempt number on its id (`<original id>|<n>`, see
//! [`crate::id::with_replay_count`]) or quarantined for one [`QuarantineCause`]. Causes are
//! checked in a fixed order — the payload's schema, the register, the destination, the
//! attempt cap — so that a quarantined event names the cause a restore cannot clear
//! before the one it can.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::dead_letter::UnknownVariant;
use crate::id::{split_replay_count, with_replay_count};
use crate::name::EntityName;
use crate::register::{Register, RegisterAnswer, judge};
use crate::replay::AutoReplay;

/// The engine version written into every judgement.
pub const ENGINE_VERSION: &str = "redrive-replay/1";

/// Property of a republished queue message holding the id without its replay count, for
/// handlers that deduplicate on the original id.
pub const ORIGINAL_ID_PROPERTY: &str = "redrive-original-id";

/// The same as a CloudEvents extension attribute (extension names are lower-case letters
/// and digits only).
pub const ORIGINAL_ID_EXTENSION: &str = "redriveoriginalid";

/// Property naming the dead-letter record a republished message came from.
pub const REPLAYED_FROM_PROPERTY: &str = "redrive-replayed-from";

/// Failed judgements of one record after which it is flagged (metric, log,
/// `last_replay_error`); it is kept and still retried.
pub const DEFAULT_FLAG_AFTER_FAILURES: u32 = 10;

/// First wait after a failed judgement.
pub const RETRY_BASE_MS: u64 = 1_000;
/// Longest wait between two judgements of a record that keeps failing.
pub const RETRY_MAX_MS: u64 = 300_000;

/// Why an event was quarantined instead of republished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum QuarantineCause {
    /// The record's payload is not a list of events with the required attributes: it can
    /// never become publishable. The whole record goes.
    SchemaInvalid,
    /// The register says the event's handler is not idempotent: republishing would
    /// duplicate the work, not retry it.
    NotIdempotent,
    /// No register entry applies: nothing inherits a replayable default.
    TypeNotRegistered,
    /// No destination can take the event (the origin is gone, or the type is a system
    /// type that cannot be published to it).
    NoReplayDestination,
    /// The event went round `max_replay_attempts` times already.
    ReplayAttemptsExhausted,
}

impl QuarantineCause {
    /// Every cause, in the order they are checked.
    pub const ALL: [QuarantineCause; 5] = [
        QuarantineCause::SchemaInvalid,
        QuarantineCause::NotIdempotent,
        QuarantineCause::TypeNotRegistered,
        QuarantineCause::NoReplayDestination,
        QuarantineCause::ReplayAttemptsExhausted,
    ];

    /// The stored and displayed name.
    pub fn as_str(self) -> &'static str {
        match self {
            QuarantineCause::SchemaInvalid => "SchemaInvalid",
            QuarantineCause::NotIdempotent => "NotIdempotent",
            QuarantineCause::TypeNotRegistered => "TypeNotRegistered",
            QuarantineCause::NoReplayDestination => "NoReplayDestination",
            QuarantineCause::ReplayAttemptsExhausted => "ReplayAttemptsExhausted",
        }
    }

    /// Whether a restore lets the event move again: only the attempt cap is cleared by
    /// one (the count restarts at 0); every other cause is met again on sight.
    pub fn cleared_by_restore(self) -> bool {
        self == QuarantineCause::ReplayAttemptsExhausted
    }
}

impl fmt::Display for QuarantineCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for QuarantineCause {
    type Err = UnknownVariant;
    fn from_str(s: &str) -> Result<Self, UnknownVariant> {
        QuarantineCause::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownVariant {
                kind: "QuarantineCause",
                value: s.to_owned(),
            })
    }
}

/// Whether `event_type` is a system event type: raised by a platform about its own
/// resources (Azure's `Microsoft.*`, redrive's own `redrive.*`), which no application
/// origin publishes. Such an event has no destination a replay could use.
pub fn is_system_type(event_type: &str) -> bool {
    event_type.starts_with("Microsoft.") || event_type.starts_with("redrive.")
}

/// One event of a record, as the judgement sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventRef<'a> {
    /// Its id as dead-lettered, possibly with a replay count (`a|2`).
    pub id: &'a str,
    /// Its type (`None`: a queue message without one).
    pub event_type: Option<&'a str>,
    /// Its size as republished, in bytes (for the chunk budget).
    pub size: usize,
}

/// What the judgement decided for one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Republish under `id` (the original id with attempt `attempt`).
    Republish {
        /// The id to publish under: `<original>|<attempt>`.
        id: String,
        /// The attempt number it carries (1 for an event never replayed before).
        attempt: u32,
    },
    /// Quarantine for this cause.
    Quarantine(QuarantineCause),
}

/// What the judge knows about where the record's events would go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Destination {
    /// Whether the origin entity exists now.
    pub exists: bool,
}

/// Judges one event of a record of `entity` (see the module's order of causes).
pub fn judge_event(
    policy: &AutoReplay,
    register: &Register,
    entity: &EntityName,
    destination: Destination,
    event: &EventRef<'_>,
) -> Verdict {
    match judge(register, entity, event.event_type) {
        RegisterAnswer::NotIdempotent => {
            return Verdict::Quarantine(QuarantineCause::NotIdempotent);
        }
        RegisterAnswer::NotRegistered => {
            return Verdict::Quarantine(QuarantineCause::TypeNotRegistered);
        }
        RegisterAnswer::Idempotent { .. } => {}
    }
    if !destination.exists || event.event_type.is_some_and(is_system_type) {
        return Verdict::Quarantine(QuarantineCause::NoReplayDestination);
    }
    let (_, done) = split_replay_count(event.id);
    if done >= policy.max_replay_attempts {
        return Verdict::Quarantine(QuarantineCause::ReplayAttemptsExhausted);
    }
    Verdict::Republish {
        id: with_replay_count(event.id, done + 1),
        attempt: done + 1,
    }
}

/// A record's events partitioned by their verdicts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Partition {
    /// Indexes of the events to republish, in record order, each with its new id.
    pub republish: Vec<(usize, String)>,
    /// Indexes of the events to quarantine, by cause, in record order.
    pub quarantine: BTreeMap<QuarantineCause, Vec<usize>>,
}

impl Partition {
    /// Whether every event is quarantined for one and the same cause (then the record
    /// moves to quarantine whole, keeping its id).
    pub fn single_cause(&self) -> Option<QuarantineCause> {
        match (self.republish.is_empty(), self.quarantine.len()) {
            (true, 1) => self.quarantine.keys().next().copied(),
            _ => None,
        }
    }
}

/// Judges every event of a record.
pub fn partition(
    policy: &AutoReplay,
    register: &Register,
    entity: &EntityName,
    destination: Destination,
    events: &[EventRef<'_>],
) -> Partition {
    let mut out = Partition::default();
    for (i, e) in events.iter().enumerate() {
        match judge_event(policy, register, entity, destination, e) {
            Verdict::Republish { id, .. } => out.republish.push((i, id)),
            Verdict::Quarantine(c) => out.quarantine.entry(c).or_default().push(i),
        }
    }
    out
}

/// Cuts events of `sizes` (in order) into consecutive chunks holding at most
/// `max_events` events and at most `max_bytes` bytes each. An event larger than
/// `max_bytes` on its own goes alone in its chunk (the destination's own size rule then
/// decides whether it is taken); no chunk is empty.
pub fn chunks(sizes: &[usize], max_bytes: u32, max_events: u32) -> Vec<Range<usize>> {
    let (max_bytes, max_events) = (max_bytes as usize, (max_events as usize).max(1));
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0usize);
    for (i, &size) in sizes.iter().enumerate() {
        let full = i - start >= max_events || (i > start && bytes.saturating_add(size) > max_bytes);
        if full {
            out.push(start..i);
            start = i;
            bytes = 0;
        }
        bytes = bytes.saturating_add(size);
    }
    if start < sizes.len() {
        out.push(start..sizes.len());
    }
    out
}

/// How long a record waits after its `failures`-th failed judgement: doubling from
/// [`RETRY_BASE_MS`], at most [`RETRY_MAX_MS`] (the longest backoff, where a record that
/// keeps failing stays).
pub fn retry_delay_ms(failures: u32) -> u64 {
    let shift = failures.saturating_sub(1).min(20);
    RETRY_BASE_MS.saturating_mul(1 << shift).min(RETRY_MAX_MS)
}

/// One event as the judgement recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgedEvent {
    /// The event's id without its replay count.
    pub id: String,
    /// The replay count it arrived with.
    pub attempts: u32,
    /// Its type, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    /// Why it was quarantined; `None`: republished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<QuarantineCause>,
    /// The id it was republished under (`<id>|<n>`), if republished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub republished_as: Option<String>,
}

/// What automatic replay did with a record it republished: the rule, the entity's policy
/// version, the node-wide budget it drew from, where and when it went, and the outcome.
/// Kept in the archived record's judgement, so what was replayed, when and under which
/// rule stays answerable for as long as the record is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayRecord {
    /// The rule: `automatic_replay`.
    pub rule: String,
    /// The entity's policy version the republish was judged under.
    pub policy_version: u64,
    /// The budget it drew from, in words (the node-wide replay budget).
    pub budget: String,
    /// Where the events went.
    pub destination: String,
    /// When (ms since the epoch).
    pub republished_at: i64,
    /// The outcome: `republished` (every event went; the consumer's effect is not
    /// observed: automatic replay binds no effect authority).
    pub outcome: String,
}

/// The judgement stored on a record the engine quarantined or archived.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Judgement {
    /// The engine that judged ([`ENGINE_VERSION`]).
    pub engine: String,
    /// When, in milliseconds since the epoch.
    pub judged_at: i64,
    /// The cause of this record's quarantine (every event in it has it), if quarantined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<QuarantineCause>,
    /// The record it was copied from, for a quarantine copy of part of a record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copied_from: Option<String>,
    /// Why the payload could not be read as events (`SchemaInvalid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Every event judged, with its cause.
    #[serde(default)]
    pub events: Vec<JudgedEvent>,
    /// The republish, for a record automatic replay republished and archived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<Box<ReplayRecord>>,
}

impl Judgement {
    /// A judgement at `judged_at` by this engine.
    pub fn new(judged_at: i64, cause: Option<QuarantineCause>) -> Judgement {
        Judgement {
            engine: ENGINE_VERSION.to_owned(),
            judged_at,
            cause,
            copied_from: None,
            error: None,
            events: Vec::new(),
            replay: None,
        }
    }
}

/// The judged form of `event` with `cause`.
pub fn judged(event: &EventRef<'_>, cause: Option<QuarantineCause>) -> JudgedEvent {
    let (id, attempts) = split_replay_count(event.id);
    JudgedEvent {
        id: id.to_owned(),
        attempts,
        event_type: event.event_type.map(str::to_owned),
        cause,
        republished_as: None,
    }
}

/// The id of the quarantine copy of the events of record `record_id` quarantined for
/// `cause`: the same for every judgement of that record (so that writing it is
/// create-if-absent), sorting with the record (the time prefix `dl_` + 12 hex digits is
/// kept), as long as a record id whatever the number of cycles.
pub fn quarantine_copy_id(record_id: &str, cause: QuarantineCause) -> String {
    let prefix: String = record_id.chars().take(15).collect();
    let digest = crate::digest::sha256_hex(format!("{record_id}\n{cause}").as_bytes());
    format!("{prefix}{}", &digest[..16])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::register::{Idempotency, RegisterEntry, RegisterKey, register_of};

    fn n(s: &str) -> EntityName {
        s.parse().unwrap()
    }

    fn register() -> Register {
        let e =
            |k: &str, a| RegisterEntry::new(k.parse::<RegisterKey>().unwrap(), a, None).unwrap();
        register_of([
            e("order.created", Idempotency::Idempotent),
            e("webhook.post", Idempotency::NotIdempotent),
            e("Microsoft.Storage.BlobCreated", Idempotency::Idempotent),
            e("q:*", Idempotency::Idempotent),
        ])
    }

    fn ev<'a>(id: &'a str, t: Option<&'a str>) -> EventRef<'a> {
        EventRef {
            id,
            event_type: t,
            size: 10,
        }
    }

    const HERE: Destination = Destination { exists: true };

    #[test]
    fn a_mixed_batch_splits_by_cause() {
        let events = [
            ev("a|3", Some("order.created")),
            ev("b", Some("webhook.post")),
            ev("c", Some("unknown.type")),
            ev("d", Some("order.created")),
            ev("e|1", Some("order.created")),
        ];
        let p = partition(&AutoReplay::default(), &register(), &n("q"), HERE, &events);
        assert_eq!(p.republish, [(3, "d|1".to_owned()), (4, "e|2".to_owned())]);
        assert_eq!(p.quarantine[&QuarantineCause::ReplayAttemptsExhausted], [0]);
        assert_eq!(p.quarantine[&QuarantineCause::NotIdempotent], [1]);
        assert_eq!(p.quarantine[&QuarantineCause::TypeNotRegistered], [2]);
        assert_eq!(p.single_cause(), None);
    }

    #[test]
    fn the_register_is_checked_before_the_cap_and_untyped_messages_use_the_entity_entry() {
        let reg = register();
        let pol = AutoReplay::default();
        assert_eq!(
            judge_event(&pol, &reg, &n("q"), HERE, &ev("x|9", Some("webhook.post"))),
            Verdict::Quarantine(QuarantineCause::NotIdempotent)
        );
        assert_eq!(
            judge_event(&pol, &reg, &n("q"), HERE, &ev("x|2", None)),
            Verdict::Republish {
                id: "x|3".into(),
                attempt: 3
            }
        );
        assert_eq!(
            judge_event(&pol, &reg, &n("other"), HERE, &ev("x", None)),
            Verdict::Quarantine(QuarantineCause::TypeNotRegistered)
        );
    }

    #[test]
    fn system_types_and_a_missing_origin_have_no_destination() {
        let reg = register();
        let pol = AutoReplay::default();
        let blob = ev("x", Some("Microsoft.Storage.BlobCreated"));
        assert_eq!(
            judge_event(&pol, &reg, &n("q"), HERE, &blob),
            Verdict::Quarantine(QuarantineCause::NoReplayDestination)
        );
        let gone = Destination { exists: false };
        assert_eq!(
            judge_event(&pol, &reg, &n("q"), gone, &ev("x", Some("order.created"))),
            Verdict::Quarantine(QuarantineCause::NoReplayDestination)
        );
    }

    #[test]
    fn ids_go_round_with_a_rewritten_suffix() {
        let reg = register();
        let pol = AutoReplay::default();
        let mut id = "a".to_owned();
        let mut seen = vec![id.clone()];
        loop {
            match judge_event(&pol, &reg, &n("q"), HERE, &ev(&id, Some("order.created"))) {
                Verdict::Republish { id: next, .. } => id = next,
                Verdict::Quarantine(c) => {
                    assert_eq!(c, QuarantineCause::ReplayAttemptsExhausted);
                    break;
                }
            }
            seen.push(id.clone());
        }
        assert_eq!(seen, ["a", "a|1", "a|2", "a|3"]);
    }

    #[test]
    fn chunks_hold_both_budgets() {
        let tiny = vec![200usize; 6_000];
        let c = chunks(&tiny, 1024 * 1024, 5_000);
        assert_eq!(c, [0..5_000, 5_000..6_000]);
        let large = vec![300 * 1024usize; 4];
        assert_eq!(
            chunks(&large, 1024 * 1024, 5_000),
            [0..3, 3..4],
            "three of 300 KiB fit a MiB, the fourth goes on"
        );
        assert_eq!(chunks(&[5_000, 10], 1_024, 10), [0..1, 1..2]);
        assert!(chunks(&[], 1_024, 10).is_empty());
    }

    #[test]
    fn failed_judgements_back_off_to_a_ceiling() {
        assert_eq!(retry_delay_ms(1), 1_000);
        assert_eq!(retry_delay_ms(2), 2_000);
        assert_eq!(retry_delay_ms(9), 256_000);
        assert_eq!(retry_delay_ms(10), RETRY_MAX_MS);
        assert_eq!(retry_delay_ms(u32::MAX), RETRY_MAX_MS);
    }

    #[test]
    fn copy_ids_are_stable_bounded_and_sort_with_their_record() {
        let id = &crate::id::new_dead_letter_id(crate::Timestamp(1_800_000_000_000));
        let a = quarantine_copy_id(id, QuarantineCause::NotIdempotent);
        assert_eq!(a, quarantine_copy_id(id, QuarantineCause::NotIdempotent));
        assert_ne!(
            a,
            quarantine_copy_id(id, QuarantineCause::TypeNotRegistered)
        );
        assert_eq!(a.len(), id.len());
        assert_eq!(&a[..15], &id[..15]);
        let again = quarantine_copy_id(&a, QuarantineCause::NotIdempotent);
        assert_eq!(again.len(), id.len());
        assert_ne!(again, a);
    }

    #[test]
    fn causes_round_trip_and_only_the_cap_is_cleared_by_restore() {
        for c in QuarantineCause::ALL {
            assert_eq!(c.as_str().parse::<QuarantineCause>(), Ok(c));
            assert_eq!(
                c.cleared_by_restore(),
                c == QuarantineCause::ReplayAttemptsExhausted
            );
        }
        assert!("Lost".parse::<QuarantineCause>().is_err());
    }
}
