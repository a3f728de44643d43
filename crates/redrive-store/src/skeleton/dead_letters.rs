//! Dead letters: where one goes ([`DeadLetterPlan`]), the record's row, resubmission,
//! and the peek-lock of a queue's dead-letter store.
//!
//! Dead-lettering a message is one path for receive, settle and sweep. The backend loads
//! the message's row and, when the queue names a dead-letter queue, that queue; the plan
//! decides the rest: whether the target can take a copy (else, for a broker-routed
//! message, the fallback to the queue's own store, with the reason in the record's
//! description; for an application's, the refusal), the copy's properties, the record's
//! area and description. The backend then draws the copy's sequence number and inserts
//! it, inserts the record the plan finishes with, and removes the message.

use redrive_core::case::RouteTarget;
use redrive_core::message::RESUBMITTED_FROM_PROPERTY;
use redrive_core::{Area, EntityName, MessageMeta, PropertyValue, Timestamp};

use super::columns::{Columns, after, bad_value};
use super::entities::QueueRow;
use super::messages::{Cause, Contents, Head, MessageRow, NewRow, message_ref};
use crate::dead_letter::{
    Routing, TargetUnfit, broker_description, check_target, evidence_record, fallback_description,
    forwarded_properties,
};
use crate::{
    DeadLetterDelivery, DeadLetterPage, DeadLetterRecord, DeadLettered, Effects, Enqueued,
    MessageRef, ReplayMark, StoreError, StoreResult, UndecodableRecord,
};

/// `DeadLetterTargetMissing`: an application's dead-letter on `q` whose dead-letter
/// queue does not exist (refused; nothing changes).
pub fn target_missing(q: &QueueRow) -> StoreError {
    StoreError::DeadLetterTargetMissing {
        queue: q.name.to_string(),
        target: q
            .policy
            .dead_letter_queue
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
    }
}

/// `DeadLetterNotFound`.
pub fn not_found(queue: &EntityName, id: &str) -> StoreError {
    StoreError::DeadLetterNotFound {
        queue: queue.to_string(),
        id: id.to_owned(),
    }
}

/// Where one dead letter goes, decided before anything is written.
#[derive(Debug)]
pub struct DeadLetterPlan {
    row: MessageRow,
    meta: MessageMeta,
    message: MessageRef,
    cause: Cause,
    source: EntityName,
    policy_version: u64,
    now: Timestamp,
    /// When a record left live here is judged by automatic replay (the queue's policy
    /// enables it), if it is.
    replay_due: Option<Timestamp>,
    /// The dead-letter queue that takes a copy.
    target: Option<QueueRow>,
    /// The dead-letter queue that could not, and why.
    unfit: Option<(EntityName, TargetUnfit)>,
}

impl DeadLetterPlan {
    /// Plans the dead letter of the message `head` of queue `q` at `now`. `row` is its
    /// stored row (its contents; `head.meta` is the state at this moment, which may be
    /// newer); `target` is the queue's dead-letter queue as loaded, if the policy names
    /// one and it exists. Refuses an application's dead-letter to a missing queue with
    /// `DeadLetterTargetMissing` (the caller checks first; this keeps the rule in one
    /// place).
    pub fn new(
        q: &QueueRow,
        head: &Head,
        row: MessageRow,
        cause: Cause,
        target: Option<&QueueRow>,
        now: Timestamp,
    ) -> StoreResult<DeadLetterPlan> {
        let mut cause = cause;
        if cause.description.is_none() {
            cause.description = broker_description(
                &cause.reason,
                &head.meta,
                q.policy.max_delivery_count,
                q.version,
            );
        }
        let mut plan = DeadLetterPlan {
            message: message_ref(&q.name, head),
            meta: head.meta.clone(),
            row,
            cause,
            source: q.name.clone(),
            policy_version: q.version,
            now,
            replay_due: super::replay::candidate_due(&q.policy, now),
            target: None,
            unfit: None,
        };
        let Some(name) = &q.policy.dead_letter_queue else {
            return Ok(plan);
        };
        let fit = check_target(
            &q.name,
            name,
            target.map(|t| t.policy.requires_session),
            plan.row.head.session_id.is_some(),
        )
        .and_then(|()| target.ok_or(TargetUnfit::Missing));
        match fit {
            Ok(t) => plan.target = Some(t.clone()),
            Err(TargetUnfit::Missing) if !plan.cause.by_broker => return Err(target_missing(q)),
            Err(unfit) => {
                plan.cause.description = Some(fallback_description(
                    plan.cause.description.take(),
                    name,
                    unfit,
                    &q.name,
                ));
                plan.unfit = Some((name.clone(), unfit));
            }
        }
        Ok(plan)
    }

    /// The dead-letter queue that takes a copy, if any: the backend draws a sequence
    /// number there (for the message's session) and inserts [`DeadLetterPlan::copy`].
    pub fn target(&self) -> Option<&QueueRow> {
        self.target.as_ref()
    }

    /// The message's session (the copy's, for drawing its number).
    pub fn session_id(&self) -> Option<&str> {
        self.row.head.session_id.as_deref()
    }

    /// The copy for the dead-letter queue under `sequence`: the message with the reason,
    /// description and source queue added to its properties, visible at once.
    pub fn copy(&self, sequence: i64) -> StoreResult<NewRow<'_>> {
        let Some(t) = &self.target else {
            return Err(super::columns::invariant(
                "a copy asked of a dead letter that stays in its own store",
            ));
        };
        let row = &self.row;
        let props = forwarded_properties(
            &row.properties,
            &row.head.message_id,
            &self.cause.reason,
            self.cause.description.as_deref(),
            &self.source,
        );
        let mut copy = NewRow::copy(
            &row.head.message_id,
            &row.body,
            Contents {
                content_type: row.content_type.as_deref(),
                correlation_id: row.correlation_id.as_deref(),
                session_id: row.head.session_id.as_deref(),
                message_type: row.message_type.as_deref(),
                intent: row.intent.as_deref(),
                valid_until: row.valid_until,
            },
            &props,
            &t.policy,
            self.now,
        )?;
        copy.sequence = sequence;
        Ok(copy)
    }

    /// The evidence record, under a new id, once the copy (if any) is stored under
    /// `forwarded` on the target: archived when a copy went on, live otherwise. Reports
    /// the dead letter (and wakes the target's receivers) in `effects`.
    pub fn finish(self, forwarded: Option<i64>, effects: &mut Effects) -> DeadLetterRecord {
        let forwarded_to = match (&self.target, forwarded) {
            (Some(t), Some(sequence)) => {
                effects.wake(&t.name);
                Some((t.name.clone(), sequence))
            }
            _ => None,
        };
        let id = redrive_core::id::new_dead_letter_id(self.now);
        let (route_target, missing_target) = match &self.unfit {
            Some((target, _)) => (RouteTarget::FellBack, Some(target.to_string())),
            None => (RouteTarget::Written, None),
        };
        let routing = Routing {
            area: if forwarded_to.is_some() {
                Area::Archived
            } else {
                Area::Live
            },
            description: self.cause.description,
            by_broker: self.cause.by_broker,
            forwarded_to: forwarded_to.clone(),
            route_target,
            missing_target,
            classifier: self.cause.classifier,
        };
        let mut record = evidence_record(
            id.clone(),
            self.row.into_stored(&self.source),
            &self.meta,
            &self.cause.reason,
            routing,
            self.policy_version,
            self.now,
        );
        if record.area == Area::Live {
            record.replay.due_at = self.replay_due;
        }
        effects.dead_lettered.push(DeadLettered {
            message: self.message,
            dead_letter_id: id,
            reason: self.cause.reason,
            forwarded_to,
            candidate: record.replay.due_at.is_some(),
            fell_back_from: self.unfit.map(|(target, _)| target),
            case_opened: super::cases::opens_case(&record),
        });
        record
    }
}

/// Reads [`columns!(dead_letter)`](crate::columns).
pub fn decode(c: &impl Columns) -> StoreResult<DeadLetterRecord> {
    let forwarded_to = match (c.text_opt(24)?, c.int_opt(25)?) {
        (Some(q), Some(s)) => Some((
            q.parse::<EntityName>()
                .map_err(|e| bad_value("dead_letters.forwarded_queue", e))?,
            s,
        )),
        _ => None,
    };
    Ok(DeadLetterRecord {
        id: c.text(0)?,
        queue: c.name(1, "dead_letters.queue")?,
        area: c.parse(2, "dead_letters.area")?,
        message_id: c.text(3)?,
        sequence: c.int(4)?,
        session_id: c.text_opt(5)?,
        body: c.bytes(6)?,
        body_sha256: c.text(7)?,
        content_type: c.text_opt(8)?,
        properties: c.properties(9, "dead_letters.properties")?,
        correlation_id: c.text_opt(10)?,
        message_type: c.text_opt(11)?,
        intent: c.text_opt(12)?,
        valid_until: c.time_opt(13)?,
        reason: c.text(14)?,
        description: c.text_opt(15)?,
        delivery_count: c.count(16, "dead_letters.delivery_count")?,
        count_quality: c.parse(17, "dead_letters.count_quality")?,
        first_delivered_at: c.time_opt(18)?,
        last_delivered_at: c.time_opt(19)?,
        enqueued_at: c.time(20)?,
        dead_lettered_at: c.time(21)?,
        // 0: no version is known (policy versions start at 1).
        policy_version: Some(c.unsigned(22, "dead_letters.policy_version")?).filter(|v| *v > 0),
        route: c.parse(23, "dead_letters.route")?,
        forwarded_to,
        dlq_delivery_count: c.count(26, "dead_letters.dlq_delivery_count")?,
        locked_until: c.time_opt(27)?,
        format: c.parse(28, "dead_letters.format")?,
        replay: ReplayMark {
            due_at: c.time_opt(29)?,
            failures: c.count(30, "dead_letters.replay_failures")?,
            last_error: c.text_opt(31)?,
        },
        judgement: match c.text_opt(32)? {
            Some(j) => {
                Some(serde_json::from_str(&j).map_err(|e| bad_value("dead_letters.judgement", e))?)
            }
            None => None,
        },
        route_target: c.parse(33, "dead_letters.route_target")?,
        missing_target: c.text_opt(34)?,
        route_kind: c.parse(35, "dead_letters.route_kind")?,
        route_rule: match c.text_opt(36)? {
            Some(r) => Some(
                r.parse()
                    .map_err(|e| bad_value("dead_letters.route_rule", e))?,
            ),
            None => None,
        },
        consumer: c.text_opt(37)?,
        rule_version: c.text_opt(38)?,
    })
}

/// Reads [`columns!(dead_letter)`](crate::columns) as [`decode`] does, or, when the row
/// holds a value this build cannot read, names the row and why. The row has been fetched
/// already, so an error here is the row's own, never the connection's: the caller sets
/// the row aside and goes on with the others.
pub fn decode_checked(c: &impl Columns) -> Result<DeadLetterRecord, UndecodableRecord> {
    decode(c).map_err(|e| UndecodableRecord {
        id: c.text(0).unwrap_or_default(),
        queue: c.text(1).unwrap_or_default(),
        reason: undecodable_reason(&e),
    })
}

/// What cannot be read, from the decoder's error (without the wrapping of a backend
/// error).
pub fn undecodable_reason(e: &StoreError) -> String {
    match e {
        StoreError::Backend { source } => source.to_string(),
        other => other.to_string(),
    }
}

/// A listing's page from its rows as read, in order.
pub fn page(rows: Vec<Result<DeadLetterRecord, UndecodableRecord>>) -> DeadLetterPage {
    let mut out = DeadLetterPage::default();
    for row in rows {
        match row {
            Ok(r) => out.records.push(r),
            Err(u) => out.undecodable.push(u),
        }
    }
    out
}

/// `DeadLetterUndecodable`: an operation on one record whose row cannot be read.
pub fn undecodable(u: UndecodableRecord) -> StoreError {
    StoreError::DeadLetterUndecodable {
        queue: u.queue,
        id: u.id,
        reason: u.reason,
    }
}

/// Locks live records taken by a dead-letter receive for `lock_ms` from `now`: each gets
/// a fresh token and one more delivery from the store. The backend stores each
/// delivery's token, lock expiry and count.
pub fn lock_records(
    records: Vec<DeadLetterRecord>,
    lock_ms: u64,
    now: Timestamp,
) -> Vec<DeadLetterDelivery> {
    let locked_until = after(now, lock_ms);
    records
        .into_iter()
        .map(|mut record| {
            record.dlq_delivery_count += 1;
            record.locked_until = Some(locked_until);
            DeadLetterDelivery {
                record,
                lock_token: redrive_core::id::new_lock_token(),
                locked_until,
            }
        })
        .collect()
}

/// `LockLost` unless a record found by its lock token is still locked at `now`.
pub fn check_lock(locked_until: Option<i64>, now: Timestamp) -> StoreResult<()> {
    match locked_until {
        Some(until) if until > now.0 => Ok(()),
        _ => Err(StoreError::LockLost),
    }
}

/// `DeadLetterNotFound` unless the record (as loaded) is live: only live records are
/// resubmitted. `SessionRequired` when `q` requires sessions and the record has none.
pub fn check_resubmit(
    q: &QueueRow,
    id: &str,
    record: Option<DeadLetterRecord>,
) -> StoreResult<DeadLetterRecord> {
    let record = record
        .filter(|r| r.area == Area::Live)
        .ok_or_else(|| not_found(&q.name, id))?;
    if q.policy.requires_session && record.session_id.is_none() {
        return Err(StoreError::SessionRequired {
            queue: q.name.to_string(),
        });
    }
    Ok(record)
}

/// The message a resubmission puts back on `q` under `sequence`: the record's message,
/// with a property naming the record, visible at once. The record is then archived.
pub fn resubmitted<'r>(
    q: &QueueRow,
    record: &'r DeadLetterRecord,
    sequence: i64,
    now: Timestamp,
) -> StoreResult<(NewRow<'r>, Enqueued)> {
    let mut props = record.properties.clone();
    props.insert(
        RESUBMITTED_FROM_PROPERTY.to_owned(),
        PropertyValue::String(record.id.clone()),
    );
    let mut row = NewRow::copy(
        &record.message_id,
        &record.body,
        Contents {
            content_type: record.content_type.as_deref(),
            correlation_id: record.correlation_id.as_deref(),
            session_id: record.session_id.as_deref(),
            message_type: record.message_type.as_deref(),
            intent: record.intent.as_deref(),
            valid_until: record.valid_until,
        },
        &props,
        &q.policy,
        now,
    )?;
    row.sequence = sequence;
    let enqueued = Enqueued {
        message_id: record.message_id.clone(),
        sequence,
        duplicate: false,
    };
    Ok((row, enqueued))
}

#[cfg(test)]
mod tests {
    use redrive_core::{DeadLetterReason, MessageState, Properties, QueuePolicy, RouteKind};

    use super::*;
    use crate::skeleton::testing::name as n;

    fn queue(name: &str, dlq: Option<&str>) -> QueueRow {
        QueueRow::created(
            1,
            &n(name),
            &QueuePolicy {
                dead_letter_queue: dlq.map(n),
                default_ttl_ms: Some(1_000),
                ..QueuePolicy::default()
            },
            Timestamp(0),
        )
    }

    fn row(session: Option<&str>) -> MessageRow {
        MessageRow {
            head: Head {
                key: 9,
                sequence: 4,
                message_id: "m".to_owned(),
                session_id: session.map(str::to_owned),
                meta: MessageMeta {
                    state: MessageState::Locked,
                    delivery_count: 2,
                    ..MessageMeta::sent(Timestamp(0), None)
                },
            },
            body: b"b".to_vec(),
            content_type: None,
            properties: Properties::new(),
            correlation_id: None,
            message_type: None,
            intent: None,
            valid_until: None,
            enqueued_at: Timestamp(0),
            scheduled_at: None,
            last_attempt: None,
        }
    }

    fn cause(by_broker: bool) -> Cause {
        Cause {
            reason: if by_broker {
                DeadLetterReason::MaxDeliveryCountExceeded
            } else {
                DeadLetterReason::Application("Bad".to_owned())
            },
            by_broker,
            description: None,
            classifier: redrive_core::Classifier::default(),
        }
    }

    #[test]
    fn a_fit_target_takes_a_copy_and_the_record_is_archived() {
        let (q, t) = (queue("q", Some("dlq")), queue("dlq", None));
        let r = row(None);
        let plan = DeadLetterPlan::new(&q, &r.head, r.clone(), cause(true), Some(&t), Timestamp(5))
            .expect("plan");
        assert_eq!(plan.target().map(|t| t.name.as_str()), Some("dlq"));
        let copy = plan.copy(41).expect("copy");
        assert_eq!((copy.sequence, copy.visible_at), (41, Timestamp(5)));
        assert_eq!(copy.expires_at, Some(Timestamp(1_005)));
        assert!(
            copy.properties
                .as_deref()
                .is_some_and(|p| p.contains("DeadLetterSource"))
        );
        let mut effects = Effects::default();
        let record = plan.finish(Some(41), &mut effects);
        assert_eq!(record.area, Area::Archived);
        assert_eq!(record.forwarded_to, Some((n("dlq"), 41)));
        assert_eq!(record.route, RouteKind::Broker);
        assert_eq!(effects.woken, [n("dlq")]);
        assert_eq!(effects.dead_lettered[0].dead_letter_id, record.id);
    }

    #[test]
    fn an_unfit_target_keeps_a_broker_dead_letter_and_refuses_an_application_s() {
        let q = queue("q", Some("dlq"));
        let r = row(None);
        assert!(matches!(
            DeadLetterPlan::new(&q, &r.head, r.clone(), cause(false), None, Timestamp(5)),
            Err(StoreError::DeadLetterTargetMissing { .. })
        ));
        let plan = DeadLetterPlan::new(&q, &r.head, r.clone(), cause(true), None, Timestamp(5))
            .expect("plan");
        assert!(plan.target().is_none());
        let record = plan.finish(None, &mut Effects::default());
        assert_eq!(record.area, Area::Live);
        assert!(
            record
                .description
                .as_deref()
                .is_some_and(|d| d.contains("dead-letter queue dlq does not exist"))
        );
        // A target that needs sessions cannot take a message without one, even when the
        // application asks: the record stays in the own store.
        let mut t = queue("dlq", None);
        t.policy.requires_session = true;
        let plan =
            DeadLetterPlan::new(&q, &r.head, r.clone(), cause(false), Some(&t), Timestamp(5))
                .expect("plan");
        assert!(plan.target().is_none());
    }

    #[test]
    fn a_dead_letter_lock_holds_until_it_runs_out() {
        assert!(check_lock(Some(10), Timestamp(9)).is_ok());
        assert!(matches!(
            check_lock(Some(10), Timestamp(10)),
            Err(StoreError::LockLost)
        ));
        assert!(matches!(
            check_lock(None, Timestamp(0)),
            Err(StoreError::LockLost)
        ));
    }
}
