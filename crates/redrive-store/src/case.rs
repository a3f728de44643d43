//! Rows of recovery cases (see `redrive_core::case`), intents and effect authorities.
//!
//! A case is opened by the store itself, in the transaction that writes the dead-letter
//! record it stands for or moves that record into quarantine ([`skeleton::cases`]
//! holds the rule and the one statement both backends run). Everything after the opening
//! is the broker's: it loads a case, asks `redrive_core::case` what comes next, and writes
//! the new state with [`CaseUpdate`], conditional on the version it read.
//!
//! [`skeleton::cases`]: crate::skeleton::cases

use redrive_core::case::{CaseState, Lease, Route, TimelineEntry};
use redrive_core::dead_letter::EvidenceQuality;
use redrive_core::{EntityName, Timestamp};

/// Most cases one listing returns.
pub const MAX_CASE_PAGE: u32 = 1_000;
/// Most timeline entries one case holds (appends beyond it are refused).
pub const MAX_TIMELINE_ENTRIES: usize = 10_000;

/// A stored case: the identity it binds (copied from its dead-letter record when it was
/// opened, so that it outlives the record) and its mutable part.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseRecord {
    /// `case_…`, derived from the record's id (one case per record).
    pub id: String,
    /// The dead-letter record it stands for.
    pub record_id: String,
    /// The queue whose dead-letter store holds the record.
    pub queue: EntityName,
    /// The original message id.
    pub message_id: String,
    /// The intent: the message's intent id, else its message id.
    pub intent_id: String,
    /// The message type.
    pub message_type: Option<String>,
    /// The session (ordering scope) the message left.
    pub session_id: Option<String>,
    /// The dead-letter reason code.
    pub reason: String,
    /// The dead-letter description (observation, not diagnosis).
    pub description: Option<String>,
    /// The deliveries counted before the dead letter.
    pub delivery_count: u32,
    /// The version of the routing policy in force when it was dead-lettered (the
    /// record's); `None` when nothing says (an import whose source did not).
    pub policy_version: Option<u64>,
    /// The rule it was routed under (the record's); `None` when nothing names one.
    pub route_rule: Option<redrive_core::case::RouteRule>,
    /// The consumer that applied an application's reason, when it said.
    pub consumer: Option<String>,
    /// The version of that consumer's classification rule, when it said.
    pub rule_version: Option<String>,
    /// Lower-case hex SHA-256 of the exact payload bytes.
    pub body_sha256: String,
    /// Size of the payload, bytes.
    pub body_size: u64,
    /// When the intent stops being useful (`valid_until`), if ever.
    pub valid_until: Option<Timestamp>,
    /// When the record was dead-lettered.
    pub dead_lettered_at: Timestamp,
    /// When the case was opened.
    pub opened_at: Timestamp,
    /// Incremented by every update; an update names the version it read.
    pub version: u64,
    /// The mutable part.
    pub m: CaseMut,
}

/// What an update of a case may change: every column that is not the identity.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseMut {
    /// The current state: the last timeline entry's.
    pub state: CaseState,
    /// Who separated the delivery.
    pub route: Route,
    /// How far the attempt evidence goes, once verified.
    pub evidence_quality: EvidenceQuality,
    /// The current claim.
    pub lease: Option<Lease>,
    /// When the case is due for review.
    pub review_deadline: Timestamp,
    /// When the broker's case worker looks at it next (`None`: nothing scheduled).
    pub next_check_at: Option<Timestamp>,
    /// When it closed.
    pub closed_at: Option<Timestamp>,
    /// When its payload bytes are deleted (a closed case's retention), if set.
    pub payload_until: Option<Timestamp>,
    /// When they were.
    pub payload_deleted_at: Option<Timestamp>,
    /// The event's `source` (or the message's `source` property), for search.
    pub source: Option<String>,
    /// The event's `subject` (or the message's `subject` property), for search.
    pub subject: Option<String>,
    /// The rest of the case, owned by the broker (JSON object): the route verification,
    /// redacted context, diagnoses, corrections, transformations, tests, effect answers,
    /// replay decision.
    pub data: serde_json::Value,
}

/// One update of a case, written in one transaction if the case is still at `version`.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseUpdate {
    /// The case.
    pub id: String,
    /// The version the caller read: `CaseChanged` when it is no longer current.
    pub version: u64,
    /// The new mutable part.
    pub set: CaseMut,
    /// Entries appended to the timeline, in order.
    pub append: Vec<TimelineEntry>,
    /// Bytes of a new payload identity (a transformation) to keep with the case.
    pub payload: Option<CasePayload>,
    /// State repair: moves the case's record from live to archived (its effect exists).
    /// Nothing happens if the record is gone or not live.
    pub archive_record: bool,
    /// Audit entries of the decisions this update records, appended in the same
    /// transaction (none when it is not written).
    pub audit: Vec<crate::AuditFields>,
}

/// A case with what deciding about it reads beside it (see [`Store::case_reads`](crate::Store::case_reads)).
#[derive(Debug, Clone, PartialEq)]
pub struct CaseRead {
    /// The case.
    pub case: CaseRecord,
    /// Its dead-letter record, while it exists (and can be read).
    pub record: Option<crate::DeadLetterRecord>,
    /// Why its record cannot be read, when its row holds a value this build refuses
    /// ([`UndecodableRecord`](crate::UndecodableRecord)): `record` is then `None` though
    /// the record exists, and the read of the other cases goes on.
    pub record_undecodable: Option<String>,
    /// Its intent, when the producer said something of it.
    pub intent: Option<IntentRecord>,
}

/// Payload bytes kept with a case under their digest (a transformation's output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CasePayload {
    /// Lower-case hex SHA-256 of `body`.
    pub digest: String,
    /// The bytes.
    pub body: Vec<u8>,
}

/// A search over cases. Every filter is answered from an index or a metadata column;
/// payloads are never read.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CaseQuery {
    /// Cases of this queue's dead-letter store.
    pub queue: Option<EntityName>,
    /// With this reason code.
    pub reason: Option<String>,
    /// Of this message type.
    pub message_type: Option<String>,
    /// With this source.
    pub source: Option<String>,
    /// With this subject.
    pub subject: Option<String>,
    /// In one of these states (any when empty).
    pub states: Vec<CaseState>,
    /// Only open cases (not closed).
    pub open: bool,
    /// Owned by (lease holder, whether or not the lease is still live).
    pub owner: Option<String>,
    /// Open and past their review deadline at this time.
    pub overdue_at: Option<Timestamp>,
    /// Dead-lettered at or after.
    pub since: Option<Timestamp>,
    /// Dead-lettered before.
    pub until: Option<Timestamp>,
    /// With this evidence quality.
    pub evidence_quality: Option<EvidenceQuality>,
    /// Whose description contains this text (case-sensitive substring).
    pub text: Option<String>,
    /// Of this intent.
    pub intent_id: Option<String>,
    /// Cursor: cases with an id greater than this (ids are time-ordered).
    pub after: Option<String>,
    /// Most to return (at most [`MAX_CASE_PAGE`]).
    pub limit: u32,
}

/// Counts of the cases a query matches (its cursor and limit ignored).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CaseCounts {
    /// How many.
    pub total: u64,
    /// By reason code.
    pub by_reason: std::collections::BTreeMap<String, u64>,
    /// By message type (`""` for none).
    pub by_type: std::collections::BTreeMap<String, u64>,
    /// By state.
    pub by_state: std::collections::BTreeMap<String, u64>,
    /// The oldest opening among them.
    pub oldest_opened_at: Option<Timestamp>,
}

/// What a producer said about an intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntentStatus {
    /// Cancelled: its open cases close without execution.
    Cancelled,
    /// Superseded by a newer intent.
    Superseded,
}

impl IntentStatus {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            IntentStatus::Cancelled => "cancelled",
            IntentStatus::Superseded => "superseded",
        }
    }

    /// Parses a stored name.
    pub fn parse(s: &str) -> Option<IntentStatus> {
        match s {
            "cancelled" => Some(IntentStatus::Cancelled),
            "superseded" => Some(IntentStatus::Superseded),
            _ => None,
        }
    }
}

/// Most words on one intent a read answers (one per entity scope a producer spoke for).
pub const MAX_INTENT_WORDS: u32 = 256;

/// A producer's word on an intent, for the entities it was accepted for. The first word
/// on an intent for one `entity` stands; words for other entities stand beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntentRecord {
    /// The intent id.
    pub intent_id: String,
    /// The entities the word holds for, as a grant's scope: `*` (every entity), a queue
    /// name, or a name prefix ending in `*` (`redrive_core::access::Scope`'s text form).
    /// It closes only cases of the queues it covers.
    pub entity: String,
    /// Cancelled or superseded.
    pub status: IntentStatus,
    /// The intent that replaces it (superseded only).
    pub superseded_by: Option<String>,
    /// Why, as the producer said.
    pub reason: Option<String>,
    /// Who said it.
    pub actor: String,
    /// When.
    pub at: Timestamp,
}

impl IntentRecord {
    /// The word on an intent that holds for a case of `queue`: the first of `words`
    /// (oldest first, as [`Store::intent_words`](crate::Store::intent_words) answers them)
    /// whose entity scope covers the queue. A word for other entities says nothing of
    /// this case.
    pub fn for_queue(words: Vec<IntentRecord>, queue: &str) -> Option<IntentRecord> {
        words.into_iter().find(|w| {
            w.entity
                .parse::<redrive_core::access::Scope>()
                .is_ok_and(|s| s.covers(queue))
        })
    }
}

/// The case id of a dead-letter record: `case_` and the record id without its `dl_`
/// prefix (the rule the backends' `OPEN_CASE` statement applies in SQL).
pub fn case_id_of(record_id: &str) -> String {
    format!(
        "case_{}",
        record_id.strip_prefix("dl_").unwrap_or(record_id)
    )
}

/// An effect authority: the HTTP endpoint that answers, for an intent of one message type,
/// whether its effect exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectAuthority {
    /// The message type it answers for.
    pub message_type: String,
    /// The endpoint (`http://` or `https://`).
    pub url: String,
    /// How long an answer may take, ms.
    pub timeout_ms: u64,
    /// When it was registered or last changed.
    pub updated_at: Timestamp,
}

/// A case group: cases a person works as one, with one reviewed decision for many items.
/// The store keeps the group's document as the broker wrote it (its selection, its members
/// and its decisions); the broker owns that document's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseGroupRecord {
    /// `grp_…`, time-ordered.
    pub id: String,
    /// The queue whose cases it holds.
    pub queue: EntityName,
    /// When it was created.
    pub created_at: Timestamp,
    /// Its version: 1 when created, one more at each write.
    pub version: u64,
    /// The broker's document.
    pub doc: serde_json::Value,
}

/// The most case groups one page lists.
pub const MAX_CASE_GROUP_PAGE: u32 = 1_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intent_status_names_round_trip() {
        for s in [IntentStatus::Cancelled, IntentStatus::Superseded] {
            assert_eq!(IntentStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(IntentStatus::parse("active"), None);
    }
}
