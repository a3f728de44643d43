//! Automatic replay's bookkeeping of dead-letter records, written once for every backend.
//!
//! A record is a replay candidate while it is live and has a due time
//! ([`ReplayMark::due_at`]). It becomes one in the transaction that makes it live on an
//! entity whose policy enables replay — a dead letter written here ([`candidate_due`],
//! through [`DeadLetterPlan`](super::DeadLetterPlan)), an import, a move back to live (a
//! restore) — and stops being one when it leaves the live area. The replay worker claims
//! due candidates by moving their due time on ([`claimed`]); a judgement that fails moves
//! it to the retry time; a judgement that succeeds moves the record out of live.
//!
//! The column `replay_cause` (the cause of a quarantined record's judgement, by name)
//! exists only so that the counts can be grouped by it; it is written from the judgement
//! ([`cause_column`]).

use std::collections::BTreeMap;

use redrive_core::judgement::{Judgement, QuarantineCause};
use redrive_core::{Area, EntityName, QueuePolicy, Timestamp};

use super::columns::{after, to_json};
use crate::{DeadLetterRecord, QuarantineCopy, ReplayCounts, ReplayMark, StoreError, StoreResult};

/// When a record that becomes live at `now` on a queue with `policy` is judged: `None`
/// unless the policy enables automatic replay.
pub fn candidate_due(policy: &QueuePolicy, now: Timestamp) -> Option<Timestamp> {
    let r = &policy.auto_replay;
    r.enabled.then(|| after(now, r.judge_delay_ms))
}

/// The bookkeeping of a record moved from `from` to `to` at `now` on a queue with
/// `policy`: moved into live, it becomes a candidate (if the policy enables replay) with
/// its failures forgotten — a restore is one move; moved out of live, it is a candidate
/// no more; a move within an area changes nothing.
pub fn moved(
    policy: &QueuePolicy,
    mark: &ReplayMark,
    from: Area,
    to: Area,
    now: Timestamp,
) -> ReplayMark {
    match (from == to, to) {
        (true, _) => mark.clone(),
        (false, Area::Live) => ReplayMark {
            due_at: candidate_due(policy, now),
            failures: 0,
            last_error: None,
        },
        (false, _) => ReplayMark {
            due_at: None,
            ..mark.clone()
        },
    }
}

/// Bytes of record bodies one claim hands out at most (always at least one record, however
/// large): bounds the memory of a replay pass whatever the records hold.
pub const MAX_CLAIM_BYTES: u64 = 16 * 1024 * 1024;

/// How many of the due candidates, in claim order with these body sizes, one claim takes:
/// records while the bytes taken before each stay under [`MAX_CLAIM_BYTES`].
pub fn claim_cut(sizes: impl IntoIterator<Item = u64>) -> usize {
    let mut taken = 0u64;
    let mut n = 0;
    for size in sizes {
        if n > 0 && taken >= MAX_CLAIM_BYTES {
            break;
        }
        taken = taken.saturating_add(size);
        n += 1;
    }
    n
}

/// The due time a claimed candidate gets: `now + claim_ms`. A judge that dies leaves the
/// record to the next claim after that time.
pub fn claimed(now: Timestamp, claim_ms: u64) -> Timestamp {
    after(now, claim_ms)
}

/// The `replay_cause` column of a record with `judgement`.
pub fn cause_column(judgement: Option<&Judgement>) -> Option<&'static str> {
    judgement.and_then(|j| j.cause).map(QuarantineCause::as_str)
}

/// The `judgement` column.
pub fn judgement_column(judgement: Option<&Judgement>) -> StoreResult<Option<String>> {
    judgement.map(to_json).transpose()
}

/// A whole record moved to quarantine by a judgement: what the backend writes over the
/// live row (only if it is still live).
#[derive(Debug, Clone, PartialEq)]
pub struct QuarantineWrite {
    /// The message id without its replay count.
    pub message_id: String,
    /// The new body, when the judgement rewrote it (the events' ids without their replay
    /// counts); `None` keeps the stored body.
    pub body: Option<(Vec<u8>, String)>,
    /// The `judgement` column.
    pub judgement: String,
    /// The `replay_cause` column.
    pub cause: Option<&'static str>,
}

/// What quarantining `record` whole with `judgement` (and, for a record of events, the
/// rewritten `body`) writes.
pub fn quarantine_whole(
    record_message_id: &str,
    judgement: &Judgement,
    body: Option<Vec<u8>>,
) -> StoreResult<QuarantineWrite> {
    let (base, _) = redrive_core::id::split_replay_count(record_message_id);
    Ok(QuarantineWrite {
        message_id: base.to_owned(),
        body: body.map(|b| {
            let sha = redrive_core::digest::sha256_hex(&b);
            (b, sha)
        }),
        judgement: to_json(judgement)?,
        cause: judgement.cause.map(QuarantineCause::as_str),
    })
}

/// The quarantine copy of part of `source` as a record: the source's evidence, the copy's
/// id, body and judgement, in the quarantine area, no candidate, unlocked. It is named by
/// the events it holds, as its judgement lists them: its `message_id` is its first
/// event's id (without a replay count) and its `message_type` the type its events share
/// (none when they differ), not the source's — a copy of the events after the first of
/// a blob is not listed under the first's id, nor left untyped when the blob's types
/// differed. A judgement listing no event keeps the source's (its id without a count).
pub fn copy_record(source: &DeadLetterRecord, copy: &QuarantineCopy) -> DeadLetterRecord {
    let events = &copy.judgement.events;
    let (message_id, message_type) = match events.first() {
        Some(first) => {
            let shared = events
                .iter()
                .all(|e| e.event_type == first.event_type)
                .then(|| first.event_type.clone())
                .flatten();
            (first.id.clone(), shared)
        }
        None => {
            let (base, _) = redrive_core::id::split_replay_count(&source.message_id);
            (base.to_owned(), source.message_type.clone())
        }
    };
    DeadLetterRecord {
        id: copy.id.clone(),
        area: Area::Quarantine,
        message_id,
        message_type,
        body: copy.body.clone(),
        body_sha256: copy.body_sha256.clone(),
        dlq_delivery_count: 0,
        locked_until: None,
        replay: ReplayMark::default(),
        judgement: Some(copy.judgement.clone()),
        forwarded_to: None,
        ..source.clone()
    }
}

/// An imported record as stored on queue `queue` (policy `policy`) at `now`: live, a
/// candidate if the policy enables replay, unlocked, never delivered from here. Its route
/// evidence (route, rule, the policy version that routed it, the consumer and rule
/// version) is its source's and is kept as given: the queue it is imported into routed
/// nothing.
pub fn imported(
    queue: &EntityName,
    policy: &QueuePolicy,
    mut record: DeadLetterRecord,
    now: Timestamp,
) -> DeadLetterRecord {
    record.queue = queue.clone();
    record.area = Area::Live;
    record.forwarded_to = None;
    record.dlq_delivery_count = 0;
    record.locked_until = None;
    record.judgement = None;
    record.replay = ReplayMark {
        due_at: candidate_due(policy, now),
        failures: 0,
        last_error: None,
    };
    record
}

/// One group of a backend's count query: `SELECT queue, area, replay_cause, count(*),
/// count(replay_due_at), sum(replay_failures > 0), sum(replay_failures >= flag) ...
/// GROUP BY queue, area, replay_cause`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountRow {
    /// The queue.
    pub queue: String,
    /// The area, by name.
    pub area: String,
    /// The `replay_cause` column.
    pub cause: Option<String>,
    /// Records in the group.
    pub records: i64,
    /// Of them, with a due time (candidates, when live).
    pub candidates: i64,
    /// Of them, with at least one failed judgement.
    pub failing: i64,
    /// Of them, with at least the flag threshold of failed judgements.
    pub flagged: i64,
    /// Of them, set aside by a replay claim as unreadable (`undecodable` is set; not
    /// counted in `candidates`).
    pub undecodable: i64,
}

/// Folds count rows into one [`ReplayCounts`] per queue, by queue name. A group whose
/// area or cause this build cannot read counts as `undecodable` (one such row never
/// fails the counts of the others); a group whose queue name cannot be read belongs to no
/// queue and is left out.
pub fn fold_counts(rows: Vec<CountRow>) -> StoreResult<Vec<ReplayCounts>> {
    let mut by_queue: BTreeMap<String, ReplayCounts> = BTreeMap::new();
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    for r in rows {
        let Ok(queue) = r.queue.parse::<EntityName>() else {
            continue;
        };
        let c = by_queue
            .entry(r.queue)
            .or_insert_with(|| ReplayCounts::empty(queue));
        match r.area.parse::<Area>() {
            Ok(Area::Live) => {
                c.live += n(r.records);
                c.candidates += n(r.candidates);
                c.failing += n(r.failing);
                c.flagged += n(r.flagged);
                c.undecodable += n(r.undecodable);
            }
            Ok(Area::Archived) => c.archived += n(r.records),
            Ok(Area::Quarantine) => match r.cause.map(|s| s.parse::<QuarantineCause>()) {
                None => *c.quarantined.entry(None).or_insert(0) += n(r.records),
                Some(Ok(cause)) => *c.quarantined.entry(Some(cause)).or_insert(0) += n(r.records),
                Some(Err(_)) => c.undecodable += n(r.records),
            },
            Err(_) => c.undecodable += n(r.records),
        }
    }
    Ok(by_queue.into_values().collect())
}

/// `DeadLetterNotFound` for a quarantine copy whose source record is gone.
pub fn source_gone(queue: &EntityName, id: &str) -> StoreError {
    super::dead_letters::not_found(queue, id)
}

#[cfg(test)]
mod tests {
    use redrive_core::AutoReplay;

    use super::*;

    fn policy(enabled: bool, delay: u64) -> QueuePolicy {
        QueuePolicy {
            auto_replay: AutoReplay {
                enabled,
                judge_delay_ms: delay,
                ..AutoReplay::default()
            },
            ..QueuePolicy::default()
        }
    }

    #[test]
    fn a_record_is_a_candidate_only_where_replay_is_enabled() {
        assert_eq!(candidate_due(&policy(false, 0), Timestamp(5)), None);
        assert_eq!(
            candidate_due(&policy(true, 0), Timestamp(5)),
            Some(Timestamp(5))
        );
        assert_eq!(
            candidate_due(&policy(true, 10), Timestamp(5)),
            Some(Timestamp(15))
        );
    }

    #[test]
    fn a_move_into_live_is_a_restore_and_a_move_out_ends_the_candidate() {
        let failing = ReplayMark {
            due_at: Some(Timestamp(9)),
            failures: 4,
            last_error: Some("down".into()),
        };
        let p = policy(true, 0);
        let out = moved(&p, &failing, Area::Live, Area::Quarantine, Timestamp(20));
        assert_eq!(out.due_at, None);
        assert_eq!(
            out.failures, 4,
            "the evidence of failures stays with the record"
        );
        let back = moved(&p, &out, Area::Quarantine, Area::Live, Timestamp(30));
        assert_eq!(
            back,
            ReplayMark {
                due_at: Some(Timestamp(30)),
                failures: 0,
                last_error: None
            }
        );
        assert_eq!(
            moved(
                &policy(false, 0),
                &out,
                Area::Quarantine,
                Area::Live,
                Timestamp(30)
            )
            .due_at,
            None
        );
        assert_eq!(
            moved(&p, &failing, Area::Live, Area::Live, Timestamp(40)),
            failing
        );
    }

    #[test]
    fn a_claim_stops_at_its_byte_budget_but_takes_at_least_one() {
        let mib = 1024 * 1024;
        assert_eq!(claim_cut([8 * mib, 8 * mib, 8 * mib]), 2);
        assert_eq!(claim_cut([100 * mib, 1]), 1);
        assert_eq!(claim_cut(std::iter::repeat_n(256, 1_000)), 1_000);
        assert_eq!(claim_cut([]), 0);
    }

    #[test]
    fn a_whole_quarantine_writes_the_id_back_without_its_count() {
        let j = Judgement::new(7, Some(QuarantineCause::ReplayAttemptsExhausted));
        let w = quarantine_whole("order-1|3", &j, None).unwrap();
        assert_eq!(w.message_id, "order-1");
        assert_eq!(w.cause, Some("ReplayAttemptsExhausted"));
        assert!(w.body.is_none());
        let w = quarantine_whole("x", &j, Some(b"[]".to_vec())).unwrap();
        assert_eq!(w.body.unwrap().1, redrive_core::digest::sha256_hex(b"[]"));
    }

    #[test]
    fn counts_fold_by_queue_area_and_cause() {
        let row = |q: &str, area: &str, cause: Option<&str>, records, candidates| CountRow {
            queue: q.into(),
            area: area.into(),
            cause: cause.map(Into::into),
            records,
            candidates,
            failing: 1,
            flagged: 0,
            undecodable: 0,
        };
        let c = fold_counts(vec![
            row("a", "live", None, 5, 3),
            row("a", "quarantine", Some("NotIdempotent"), 2, 0),
            row("a", "quarantine", None, 1, 0),
            row("a", "archived", None, 4, 0),
            row("b", "live", None, 1, 1),
        ])
        .unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!((c[0].live, c[0].candidates, c[0].failing), (5, 3, 1));
        assert_eq!(c[0].archived, 4);
        assert_eq!(c[0].quarantined[&Some(QuarantineCause::NotIdempotent)], 2);
        assert_eq!(c[0].quarantined[&None], 1);
        assert_eq!(c[1].queue.as_str(), "b");
        // A group this build cannot read counts as undecodable and fails nothing else;
        // one without a readable queue belongs to none.
        let c = fold_counts(vec![
            row("a", "live", None, 5, 3),
            row("a", "lost", None, 2, 0),
            row("a", "quarantine", Some("NoSuchCause"), 1, 0),
            row("not a name!", "live", None, 7, 7),
        ])
        .unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].live, c[0].candidates, c[0].undecodable), (5, 3, 3));
        assert!(c[0].quarantined.is_empty());
    }
}
