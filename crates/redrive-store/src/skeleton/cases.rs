//! Recovery cases in the store, written once for every backend.
//!
//! # When a case opens ([`opens_case`], [`OPEN_CASE`])
//!
//! A dead-letter record stands for a case unless automatic replay settles it. That is:
//!
//! - a record in **quarantine** (automatic replay held it back, or an operator moved it
//!   there);
//! - a **live** record that is no replay candidate (its entity does not replay);
//! - an **archived** record whose message went on to a dead-letter queue and that no
//!   judgement archived (the item now waits in that queue).
//!
//! A live candidate is not a case (yet): automatic replay judges it, and either settles it
//! (archived, never a case) or quarantines it (a case from then on). The case is opened in
//! the transaction that writes or moves the record: each backend runs [`OPEN_CASE`] and
//! [`OPEN_TIMELINE`] after every write that may make a record one of the above, and the
//! statements themselves check the rule, so a record that is not a case opens nothing and
//! a record that has one keeps it (`ON CONFLICT DO NOTHING`). [`opens_case`] is the same
//! rule over a decoded record, for reporting; a conformance case keeps the two equal.
//!
//! The opening copies the record's identity into the case (so the case outlives the
//! record's retention) and starts its timeline with `route_observed`. Everything after is
//! the broker's: it reads a case, asks `redrive_core::case`, and writes a
//! [`CaseUpdate`](crate::CaseUpdate) conditional on the version it read.

use redrive_core::Area;
use redrive_core::case::{CaseState, DEFAULT_REVIEW_MS, TimelineEntry};

use super::columns::{Columns, bad_value, millis, to_int, to_json};
use crate::{CaseCounts, CaseMut, CaseRecord, DeadLetterRecord, IntentRecord, StoreResult};

/// The word on an intent that holds for a case of `queue`: the first of `words` (oldest
/// first, as [`Store::intent_words`](crate::Store::intent_words) answers them) whose entity
/// scope covers the queue. A word for other entities says nothing of this case.
pub fn intent_for(words: Vec<IntentRecord>, queue: &str) -> Option<IntentRecord> {
    IntentRecord::for_queue(words, queue)
}

/// The columns of an intent row, in the order the backends read them.
pub const INTENT_COLUMNS: &str = "intent_id, entity, status, superseded_by, reason, actor, at";

/// Whether a record stands for a case (the rule of [`OPEN_CASE`], over a decoded record).
pub fn opens_case(d: &DeadLetterRecord) -> bool {
    match d.area {
        Area::Quarantine => true,
        Area::Live => d.replay.due_at.is_none(),
        Area::Archived => d.forwarded_to.is_some() && d.judgement.is_none(),
    }
}

/// The case id of a record: `case_` and the record id without its `dl_` prefix.
pub fn case_id(record_id: &str) -> String {
    crate::case_id_of(record_id)
}

/// Opens the case of record `$1` at `$2` (ms) with review deadline `$3` (ms), if the
/// record is one (see the module docs) and has none. Both backends run this text.
pub const OPEN_CASE: &str = "INSERT INTO cases (id, record_id, queue, message_id, intent_id, \
     message_type, session_id, reason, description, delivery_count, policy_version, \
     body_sha256, body_size, valid_until, dead_lettered_at, opened_at, version, state, route, \
     evidence_quality, review_deadline, next_check_at, data, route_rule, consumer, \
     rule_version) \
     SELECT 'case_' || substr(id, 4), id, queue, message_id, \
     COALESCE(NULLIF(intent, ''), message_id), message_type, session_id, reason, description, \
     delivery_count, policy_version, body_sha256, length(body), valid_until, dead_lettered_at, \
     $2, 1, 'route_observed', route_kind, \
     CASE WHEN route_target <> 'written' AND count_quality IN ('exact', 'approximate') \
     THEN 'incomplete' ELSE count_quality END, \
     $3, $2, '{}', route_rule, consumer, rule_version \
     FROM dead_letters WHERE id = $1 AND (area = 'quarantine' \
     OR (area = 'live' AND replay_due_at IS NULL) \
     OR (area = 'archived' AND forwarded_queue IS NOT NULL AND judgement IS NULL)) \
     ON CONFLICT DO NOTHING";

/// The latest dead-letter time of the cases of queue `$1` with reason `$2` (no row: none),
/// read as one step down the index `cases_queue_reason_age` (schema version 12) rather
/// than over the queue's cases. Both backends run this text.
pub const LATEST_DEAD_LETTER: &str = "SELECT dead_lettered_at FROM cases \
     WHERE queue = $1 AND reason = $2 ORDER BY dead_lettered_at DESC LIMIT 1";

/// The first timeline entry of the case of record `$1`, at `$2` (ms), if it has none. Run
/// right after [`OPEN_CASE`].
pub const OPEN_TIMELINE: &str = "INSERT INTO case_timeline (case_id, seq, at, actor, state, \
     evidence, fields) \
     SELECT c.id, 1, $2, 'broker', 'route_observed', \
     'dead-lettered (' || c.route || '): ' || c.reason, '{}' \
     FROM cases c WHERE c.record_id = $1 \
     AND NOT EXISTS (SELECT 1 FROM case_timeline t WHERE t.case_id = c.id) \
     ON CONFLICT DO NOTHING";

/// The review deadline a case opened at `now` gets before the broker applies its entity's
/// rule: [`DEFAULT_REVIEW_MS`] later.
pub fn default_review_deadline(now: redrive_core::Timestamp) -> i64 {
    super::columns::after(now, DEFAULT_REVIEW_MS).0
}

/// The column list of [`decode`] (a `SELECT` of `cases`).
pub const CASE_COLUMNS: &str = "id, record_id, queue, message_id, intent_id, message_type, \
     session_id, reason, description, delivery_count, policy_version, body_sha256, body_size, \
     valid_until, dead_lettered_at, opened_at, version, state, route, evidence_quality, owner, \
     lease_until, review_deadline, next_check_at, closed_at, payload_until, payload_deleted_at, \
     source, subject, data, route_rule, consumer, rule_version";

/// Reads [`CASE_COLUMNS`].
pub fn decode(c: &impl Columns) -> StoreResult<CaseRecord> {
    let lease = match (c.text_opt(20)?, c.time_opt(21)?) {
        (Some(owner), Some(until)) => Some(redrive_core::case::Lease { owner, until }),
        _ => None,
    };
    Ok(CaseRecord {
        id: c.text(0)?,
        record_id: c.text(1)?,
        queue: c.name(2, "cases.queue")?,
        message_id: c.text(3)?,
        intent_id: c.text(4)?,
        message_type: c.text_opt(5)?,
        session_id: c.text_opt(6)?,
        reason: c.text(7)?,
        description: c.text_opt(8)?,
        delivery_count: c.count(9, "cases.delivery_count")?,
        // 0: no version is known (policy versions start at 1).
        policy_version: Some(c.unsigned(10, "cases.policy_version")?).filter(|v| *v > 0),
        route_rule: match c.text_opt(30)? {
            Some(r) => Some(r.parse().map_err(|e| bad_value("cases.route_rule", e))?),
            None => None,
        },
        consumer: c.text_opt(31)?,
        rule_version: c.text_opt(32)?,
        body_sha256: c.text(11)?,
        body_size: c.unsigned(12, "cases.body_size")?,
        valid_until: c.time_opt(13)?,
        dead_lettered_at: c.time(14)?,
        opened_at: c.time(15)?,
        version: c.unsigned(16, "cases.version")?,
        m: CaseMut {
            state: c.parse(17, "cases.state")?,
            route: c.parse(18, "cases.route")?,
            evidence_quality: c.parse(19, "cases.evidence_quality")?,
            lease,
            review_deadline: c.time(22)?,
            next_check_at: c.time_opt(23)?,
            closed_at: c.time_opt(24)?,
            payload_until: c.time_opt(25)?,
            payload_deleted_at: c.time_opt(26)?,
            source: c.text_opt(27)?,
            subject: c.text_opt(28)?,
            data: c.json(29, "cases.data")?,
        },
    })
}

/// The mutable columns of a case as bound by an update, in the order of
/// [`UPDATE_COLUMNS`].
#[derive(Debug, Clone, PartialEq)]
pub struct MutColumns {
    /// `state`.
    pub state: &'static str,
    /// `route`.
    pub route: &'static str,
    /// `evidence_quality`.
    pub evidence_quality: &'static str,
    /// `owner`.
    pub owner: Option<String>,
    /// `lease_until`.
    pub lease_until: Option<i64>,
    /// `review_deadline`.
    pub review_deadline: i64,
    /// `next_check_at`.
    pub next_check_at: Option<i64>,
    /// `closed_at`.
    pub closed_at: Option<i64>,
    /// `payload_until`.
    pub payload_until: Option<i64>,
    /// `payload_deleted_at`.
    pub payload_deleted_at: Option<i64>,
    /// `source`.
    pub source: Option<String>,
    /// `subject`.
    pub subject: Option<String>,
    /// `data` (JSON text).
    pub data: String,
}

/// The columns an update sets, in the order of [`MutColumns`]' fields; the backend binds
/// them as `$1…$13`, then the id as `$14` and the version read as `$15`:
/// `UPDATE cases SET <col> = $n, …, version = version + 1 WHERE id = $14 AND version = $15`.
pub const UPDATE_COLUMNS: [&str; 13] = [
    "state",
    "route",
    "evidence_quality",
    "owner",
    "lease_until",
    "review_deadline",
    "next_check_at",
    "closed_at",
    "payload_until",
    "payload_deleted_at",
    "source",
    "subject",
    "data",
];

/// The update statement of a case, for both backends (see [`UPDATE_COLUMNS`]).
/// Whether an update of a batch was refused on its own (its case changed, is gone, or its
/// timeline is full: nothing of it written) rather than failing the batch.
pub fn refused_update(e: &crate::StoreError) -> bool {
    matches!(
        e,
        crate::StoreError::CaseChanged { .. }
            | crate::StoreError::CaseNotFound { .. }
            | crate::StoreError::TimelineFull { .. }
    )
}

pub fn update_sql() -> String {
    let sets: Vec<String> = UPDATE_COLUMNS
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{c} = ${}", i + 1))
        .collect();
    format!(
        "UPDATE cases SET {}, version = version + 1 WHERE id = $14 AND version = $15",
        sets.join(", ")
    )
}

/// The mutable part as bound.
pub fn mut_columns(m: &CaseMut) -> StoreResult<MutColumns> {
    if !m.data.is_object() {
        return Err(bad_value("cases.data", "not a JSON object"));
    }
    Ok(MutColumns {
        state: m.state.as_str(),
        route: m.route.as_str(),
        evidence_quality: m.evidence_quality.as_str(),
        owner: m.lease.as_ref().map(|l| l.owner.clone()),
        lease_until: m.lease.as_ref().map(|l| l.until.0),
        review_deadline: m.review_deadline.0,
        next_check_at: millis(m.next_check_at),
        closed_at: millis(m.closed_at),
        payload_until: millis(m.payload_until),
        payload_deleted_at: millis(m.payload_deleted_at),
        source: m.source.clone(),
        subject: m.subject.clone(),
        data: to_json(&m.data)?,
    })
}

/// A timeline entry as stored: `(seq, at, actor, state, evidence, fields)`, `seq`
/// counting from 1 per case.
#[derive(Debug, Clone, PartialEq)]
pub struct EntryColumns {
    /// `seq`.
    pub seq: i64,
    /// `at`.
    pub at: i64,
    /// `actor`.
    pub actor: String,
    /// `state`.
    pub state: &'static str,
    /// `evidence`.
    pub evidence: String,
    /// `fields` (JSON text).
    pub fields: String,
}

/// The column list of [`decode_entry`] (a `SELECT` of `case_timeline`, ordered by `seq`).
pub const ENTRY_COLUMNS: &str = "at, actor, state, evidence, fields";

/// The entries appended after `last_seq` entries, as stored.
pub fn entry_columns(last_seq: i64, entries: &[TimelineEntry]) -> StoreResult<Vec<EntryColumns>> {
    entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            Ok(EntryColumns {
                seq: last_seq + to_int(i, "case_timeline.seq")? + 1,
                at: e.at.0,
                actor: e.actor.clone(),
                state: e.state.as_str(),
                evidence: e.evidence.clone(),
                fields: to_json(&e.fields)?,
            })
        })
        .collect()
}

/// Reads [`ENTRY_COLUMNS`].
pub fn decode_entry(c: &impl Columns) -> StoreResult<TimelineEntry> {
    Ok(TimelineEntry {
        at: c.time(0)?,
        actor: c.text(1)?,
        state: c.parse::<CaseState>(2, "case_timeline.state")?,
        evidence: c.text(3)?,
        fields: c.json(4, "case_timeline.fields")?,
    })
}

/// The columns of a case group, as [`decode_group`] reads them.
pub const GROUP_COLUMNS: &str = "id, queue, created_at, version, doc";

/// The statement that inserts a case group (`$1`…`$5` as [`GROUP_COLUMNS`]).
pub const INSERT_GROUP: &str =
    "INSERT INTO case_groups (id, queue, created_at, version, doc) VALUES ($1, $2, $3, $4, $5)";

/// The statement that writes a case group still at version `$3`: its document `$2`, its
/// version `$4` (one more), for id `$1`.
pub const UPDATE_GROUP: &str =
    "UPDATE case_groups SET doc = $2, version = $4 WHERE id = $1 AND version = $3";

/// Reads [`GROUP_COLUMNS`].
pub fn decode_group(c: &impl Columns) -> StoreResult<crate::CaseGroupRecord> {
    Ok(crate::CaseGroupRecord {
        id: c.text(0)?,
        queue: c.name(1, "case_groups.queue")?,
        created_at: c.time(2)?,
        version: c.unsigned(3, "case_groups.version")?,
        doc: c.json(4, "case_groups.doc")?,
    })
}

/// Adds one `(group, count)` row of a grouped count to `counts` (`which`: `reason`,
/// `type` or `state`).
pub fn add_count(counts: &mut CaseCounts, which: &str, group: Option<String>, n: u64) {
    let group = group.unwrap_or_default();
    let map = match which {
        "reason" => &mut counts.by_reason,
        "type" => &mut counts.by_type,
        _ => &mut counts.by_state,
    };
    *map.entry(group).or_insert(0) += n;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_case_id_follows_the_record_id() {
        assert_eq!(case_id("dl_0193abc"), "case_0193abc");
        assert_eq!(case_id("other"), "case_other");
    }

    #[test]
    fn the_update_binds_every_mutable_column_then_id_and_version() {
        let sql = update_sql();
        assert!(sql.starts_with("UPDATE cases SET state = $1, route = $2,"));
        assert!(sql.contains("data = $13, version = version + 1 WHERE id = $14 AND version = $15"));
    }

    #[test]
    fn appended_entries_continue_the_numbering() {
        let e = |s| TimelineEntry {
            at: redrive_core::Timestamp(5),
            actor: "alice".into(),
            state: s,
            evidence: "x".into(),
            fields: Default::default(),
        };
        let rows = entry_columns(3, &[e(CaseState::Retained), e(CaseState::Escalated)]).unwrap();
        assert_eq!(
            rows.iter().map(|r| (r.seq, r.state)).collect::<Vec<_>>(),
            vec![(4, "retained"), (5, "escalated")]
        );
        assert_eq!(rows[0].fields, "{}");
    }
}
