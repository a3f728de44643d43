//! Delivering a dead letter again by hand goes through its recovery case.
//!
//! A resubmit, a move back to the live area (where automatic replay takes the record), a
//! restore, an import into the live area and an SQS message move task each deliver the
//! intent of a case again. Before one does, the case's gates are asked
//! ([`redrive_core::case::by_hand::judge`]): a closed case, a replay in flight, another
//! token's claim, or a type registered `not_idempotent` whose effect authority does not
//! answer `absent` now refuses it ([`BrokerError::RedeliveryRefused`], audited by the
//! operation as its refusal; nothing changes). An authority that answers `present`
//! completes the case (the effect is recorded, a live record archived) and the delivery is
//! refused.
//!
//! An allowed delivery is on the case's timeline, by the person's name, with the
//! operation, the message id and the destination, in the words of a case's own replay
//! (`replay_eligible`, `replay_admitted`):
//!
//! - where the authority answered `absent`, the admission is written before the delivery
//!   (conditional on the case's version, so a concurrent replay lets one through), and the
//!   case then follows it as it follows a replay — the authority observes it, `present`
//!   completes, a repeated dead letter stops it — but never stops it for a lost claim: the
//!   hand delivery had none ([`facts_lease`]);
//! - where nobody can bind the effect (no authority, or one that could not answer, for an
//!   idempotent or unregistered type), the delivery is made and the case closes
//!   `indeterminate` at once, the person's action as its evidence.

use redrive_core::case::by_hand::{self as hand, HandEffect, HandFacts, HandOperation};
use redrive_core::case::by_hand::{HandVerdict, Refusal};
use redrive_core::case::{self, CaseState, EffectAnswer, Lease, TimelineEntry};
use redrive_core::register::judge;
use redrive_core::{EntityName, Timestamp};
use redrive_store::{AuditFields, CaseQuery, CaseRecord, CaseUpdate, StoreError};
use serde::{Deserialize, Serialize};

use super::data::{CaseData, EffectRecord, ReplayRecord, ReplayStatus};
use super::effect;
use crate::error::RedeliveryRefusal;
use crate::metrics::Counter;
use crate::{Actor, BrokerError, BrokerResult, Cases};

/// The delivery by hand a case follows (kept in its data while it is the replay in
/// flight).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandRecord {
    /// The operation (`resubmit`, `move_to_live`, …).
    pub operation: HandOperation,
    /// Who delivered it (a token's name).
    pub by: String,
    /// The message id it carries.
    pub message_id: String,
    /// Where it went.
    pub destination: String,
    /// When (ms).
    pub at_ms: i64,
}

/// The claim a case's facts carry: a standing one for the person whose delivery by hand
/// is the case's replay in flight, else the case's own.
pub(crate) fn facts_lease(claim: Option<&Lease>, data: &CaseData) -> Option<Lease> {
    let by = data
        .by_hand
        .as_ref()
        .filter(|h| {
            data.replays.last().is_some_and(|r| {
                r.status == ReplayStatus::InFlight
                    && r.message_id == h.message_id
                    && r.at_ms == h.at_ms
            })
        })
        .map(|h| h.by.as_str());
    hand::observing_lease(claim, by)
}

/// What a delivery by hand would deliver.
#[derive(Debug, Clone)]
pub(crate) struct HandTarget {
    /// The operation.
    pub(crate) operation: HandOperation,
    /// The message id the delivery carries (for a record handed to automatic replay, the
    /// id that replay gives it; empty when it is several events).
    pub(crate) message_id: String,
    /// Where it goes.
    pub(crate) destination: String,
    /// The payload identity delivered.
    pub(crate) digest: String,
}

/// A delivery by hand its case allows.
#[derive(Debug)]
pub(crate) enum HandPass {
    /// No case stands for it: nothing to ask, nothing to record.
    NoCase,
    /// Allowed, and the case's admission is written: it follows the delivery. A delivery
    /// that then fails is recorded with [`Cases::hand_failed`].
    Followed(Box<CaseRecord>),
    /// Allowed; once delivered, [`Cases::hand_delivered`] closes the case
    /// `indeterminate`.
    Close {
        /// The case as judged.
        case: Box<CaseRecord>,
        /// The authority's answer, when one was asked.
        effect: Option<EffectRecord>,
        /// What was delivered.
        target: HandTarget,
    },
}

/// A case's verdict on a delivery, before anything is written.
pub(crate) struct Judged {
    case: CaseRecord,
    allowed: Allowed,
    effect: Option<EffectRecord>,
    target: HandTarget,
}

impl Judged {
    /// The case judged.
    pub(crate) fn case_id(&self) -> &str {
        &self.case.id
    }
}

enum Allowed {
    Follow,
    Close,
}

fn entry(now: Timestamp, actor: &str, state: CaseState, evidence: String) -> TimelineEntry {
    TimelineEntry {
        at: now,
        actor: actor.to_owned(),
        state,
        evidence,
        fields: Default::default(),
    }
}

fn with(mut e: TimelineEntry, fields: &[(&str, String)]) -> TimelineEntry {
    for (k, v) in fields {
        e.fields.insert((*k).to_owned(), v.clone());
    }
    e
}

fn refused(case: &CaseRecord, op: HandOperation, r: &Refusal) -> BrokerError {
    BrokerError::RedeliveryRefused(Box::new(RedeliveryRefusal {
        code: r.code().to_owned(),
        why: r.describe(&case.id, op),
        case_id: case.id.clone(),
        operation: op.to_string(),
        state: match r {
            Refusal::CaseClosed(t) => Some(t.to_string()),
            Refusal::EffectPresent => Some("completed".to_owned()),
            _ => None,
        },
        message_id: match r {
            Refusal::ReplayInFlight(m) if !m.is_empty() => Some(m.clone()),
            _ => None,
        },
        owner: match r {
            Refusal::CaseClaimed(o) => Some(o.clone()),
            _ => None,
        },
    }))
}

fn busy(case: &CaseRecord, op: HandOperation) -> BrokerError {
    BrokerError::RedeliveryRefused(Box::new(RedeliveryRefusal {
        code: "case_busy".to_owned(),
        why: format!(
            "case {} changed while its dead letter was to be delivered again ({op}): nothing was delivered; retry",
            case.id
        ),
        case_id: case.id.clone(),
        operation: op.to_string(),
        state: None,
        message_id: None,
        owner: None,
    }))
}

/// Appends `e` to `append` if the timeline allows it after `state`, which it moves.
fn push(state: &mut CaseState, append: &mut Vec<TimelineEntry>, e: TimelineEntry) -> bool {
    if case::may_append(Some(*state), e.state).is_err() {
        return false;
    }
    *state = e.state;
    append.push(e);
    true
}

fn effect_entry(now: Timestamp, who: &str, e: &EffectRecord) -> TimelineEntry {
    let state = match e.answer {
        EffectAnswer::Present => CaseState::EffectPresent,
        EffectAnswer::Absent => CaseState::EffectAbsent,
        EffectAnswer::Indeterminate | EffectAnswer::Unreachable => CaseState::EffectIndeterminate,
    };
    with(
        entry(
            now,
            who,
            state,
            format!("effect authority answered {}: {}", e.answer, e.evidence),
        ),
        &[
            ("authority", e.authority.clone()),
            ("answer", e.answer.to_string()),
        ],
    )
}

impl Cases {
    /// The case of the dead-letter record `record_id`, if it has one.
    pub(crate) async fn case_of_record(&self, record_id: &str) -> BrokerResult<Option<CaseRecord>> {
        let id = redrive_store::case_id_of(record_id);
        match self.ctx.store.get_case(&id).await {
            Ok(c) => Ok(Some(c)),
            Err(StoreError::CaseNotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The latest case of intent `intent` (a message's intent, else its id) on `queue`'s
    /// dead-letter store: the one a copy of its dead letter (an import, a message of a
    /// dead-letter queue) delivers again. A replay's id (`<id>|<n>`) also finds the
    /// cases of `<id>`.
    pub(crate) async fn case_of_intent(
        &self,
        queue: &EntityName,
        intent: &str,
    ) -> BrokerResult<Option<CaseRecord>> {
        let (base, _) = redrive_core::id::split_replay_count(intent);
        for id in [intent, base] {
            let found = self
                .ctx
                .store
                .list_cases(&CaseQuery {
                    queue: Some(queue.clone()),
                    intent_id: Some(id.to_owned()),
                    limit: redrive_store::MAX_CASE_PAGE,
                    ..CaseQuery::default()
                })
                .await?;
            if let Some(c) = found.into_iter().max_by(|a, b| a.id.cmp(&b.id)) {
                return Ok(Some(c));
            }
        }
        Ok(None)
    }

    /// Asks `case`'s gates about delivering its dead letter again by hand (see the module
    /// docs). `Ok(judged)`: allowed, nothing written yet ([`Cases::hand_admit`] writes
    /// it). `Err`: refused; an effect found present has completed the case first.
    pub(crate) async fn hand_judge(
        &self,
        case: CaseRecord,
        target: HandTarget,
        actor: &Actor,
    ) -> BrokerResult<Judged> {
        let op = target.operation;
        let data = CaseData::of(&case);
        let register = self.broker.register().await?;
        let answer = judge(&register, &case.queue, case.message_type.as_deref());
        let authority = self.authority_for(case.message_type.as_deref()).await?;
        let in_flight = data
            .replays
            .last()
            .filter(|r| r.status == ReplayStatus::InFlight)
            .map(|r| r.message_id.as_str());
        let mut facts = HandFacts {
            state: case.m.state,
            in_flight,
            lease: case.m.lease.as_ref(),
            who: &actor.name,
            register: &answer,
            effect: if authority.is_some() {
                HandEffect::NotAsked
            } else {
                HandEffect::NoAuthority
            },
        };
        let mut verdict = hand::judge(&facts, self.now());
        let mut asked = None;
        if verdict == HandVerdict::AskAuthority
            && let Some(a) = &authority
        {
            let (answer, evidence) =
                effect::ask(&self.case_client(), self.broker.push_network(), a, &case).await;
            self.ctx.metrics.add_labelled(
                Counter::EffectLookups,
                case.queue.as_str(),
                answer.as_str(),
                1,
            );
            asked = Some(EffectRecord {
                answer,
                evidence,
                authority: a.url.clone(),
                at_ms: self.now().as_millis(),
            });
            facts.effect = HandEffect::Answered(answer);
            verdict = hand::judge(&facts, self.now());
        }
        let allowed = match verdict {
            HandVerdict::Refuse(r) => return Err(refused(&case, op, &r)),
            HandVerdict::AskAuthority => {
                return Err(refused(
                    &case,
                    op,
                    &Refusal::EffectAuthority(EffectAnswer::Unreachable),
                ));
            }
            HandVerdict::Complete => {
                let Some(e) = asked else {
                    return Err(refused(&case, op, &Refusal::EffectPresent));
                };
                self.hand_complete(&case, &e, op, actor).await?;
                return Err(refused(&case, op, &Refusal::EffectPresent));
            }
            HandVerdict::Follow => Allowed::Follow,
            HandVerdict::CloseIndeterminate => Allowed::Close,
        };
        Ok(Judged {
            case,
            allowed,
            effect: asked,
            target,
        })
    }

    /// Writes what an allowed delivery needs before it is made: a followed one's
    /// admission (conditional on the case as judged: a case changed since refuses it,
    /// `case_busy`).
    pub(crate) async fn hand_admit(&self, j: Judged, actor: &Actor) -> BrokerResult<HandPass> {
        let Judged {
            case,
            allowed,
            effect,
            target,
        } = j;
        let Allowed::Follow = allowed else {
            return Ok(HandPass::Close {
                case: Box::new(case),
                effect,
                target,
            });
        };
        let now = self.now();
        let who = actor.name.as_str();
        let op = target.operation;
        let mut data = CaseData::of(&case);
        let mut set = case.m.clone();
        let mut append = Vec::new();
        let mut state = set.state;
        if let Some(e) = &effect {
            push(&mut state, &mut append, effect_entry(now, who, e));
            data.effect = Some(e.clone());
        }
        let eligible = entry(
            now,
            who,
            CaseState::ReplayEligible,
            format!(
                "delivered again by hand by {who} ({op}): the effect authority answered absent; the case's other gates were the person's to judge"
            ),
        );
        let as_id = if target.message_id.is_empty() {
            "the ids automatic replay gives it".to_owned()
        } else {
            target.message_id.clone()
        };
        let admitted = with(
            entry(
                now,
                who,
                CaseState::ReplayAdmitted,
                format!(
                    "one delivery by hand by {who} ({op}) to {} as {as_id}",
                    target.destination
                ),
            ),
            &[
                ("message_id", target.message_id.clone()),
                ("destination", target.destination.clone()),
                ("digest", target.digest.clone()),
                ("budget", "one item".to_owned()),
                ("operation", op.to_string()),
                ("by_hand", who.to_owned()),
                ("plan_id", String::new()),
            ],
        );
        if !push(&mut state, &mut append, eligible) || !push(&mut state, &mut append, admitted) {
            return Err(busy(&case, op));
        }
        data.replays.push(ReplayRecord {
            message_id: target.message_id.clone(),
            destination: target.destination.clone(),
            digest: target.digest.clone(),
            correction_version: data.correction().map(|c| c.version),
            owner: who.to_owned(),
            status: ReplayStatus::InFlight,
            at_ms: now.as_millis(),
        });
        data.by_hand = Some(HandRecord {
            operation: op,
            by: who.to_owned(),
            message_id: target.message_id.clone(),
            destination: target.destination.clone(),
            at_ms: now.as_millis(),
        });
        data.next = Some("observe_replay".to_owned());
        data.escalated_for = None;
        set.state = state;
        set.next_check_at = Some(now.plus_millis(60_000));
        set.data = data.to_value();
        let update = CaseUpdate {
            id: case.id.clone(),
            version: case.version,
            set,
            append,
            payload: None,
            archive_record: false,
            audit: vec![self.hand_audit(&case, actor, op, "replay_admitted", &target)],
        };
        match self.write_update(&update).await {
            Ok(written) => {
                tracing::info!(case_id = %case.id, operation = %op, message_id = %target.message_id,
                    by = who, "dead letter delivered again by hand; the case follows it");
                self.state.wake.notify_one();
                Ok(HandPass::Followed(Box::new(written)))
            }
            Err(BrokerError::Store(StoreError::CaseChanged { .. })) => Err(busy(&case, op)),
            Err(e) => Err(e),
        }
    }

    /// [`Cases::hand_judge`] then [`Cases::hand_admit`]; no case: [`HandPass::NoCase`].
    pub(crate) async fn hand_gate(
        &self,
        case: Option<CaseRecord>,
        target: HandTarget,
        actor: &Actor,
    ) -> BrokerResult<HandPass> {
        let Some(case) = case else {
            return Ok(HandPass::NoCase);
        };
        let judged = self.hand_judge(case, target, actor).await?;
        self.hand_admit(judged, actor).await
    }

    /// Records what came of an allowed delivery once it is made: a case the delivery
    /// closes is closed `indeterminate` with the person's action as its evidence (as
    /// `message_id`, when the operation learned it only now). Errors are logged: the
    /// delivery is made.
    pub(crate) async fn hand_delivered(
        &self,
        pass: HandPass,
        message_id: Option<&str>,
        actor: &Actor,
    ) {
        let HandPass::Close {
            case,
            effect,
            mut target,
        } = pass
        else {
            return;
        };
        if let Some(m) = message_id {
            target.message_id = m.to_owned();
        }
        let mut case = *case;
        for _ in 0..5 {
            match self
                .hand_close(&case, effect.as_ref(), &target, actor)
                .await
            {
                Ok(()) => return,
                Err(BrokerError::Store(StoreError::CaseChanged { .. })) => {
                    match self.ctx.store.get_case(&case.id).await {
                        Ok(c) => case = c,
                        Err(e) => {
                            tracing::error!(case_id = %case.id, error = %e, "a delivery by hand could not be recorded on its case");
                            return;
                        }
                    }
                }
                Err(e) => {
                    tracing::error!(case_id = %case.id, error = %e, "a delivery by hand could not be recorded on its case");
                    return;
                }
            }
        }
        tracing::error!(case_id = %case.id, "a delivery by hand could not be recorded on its case: it kept changing");
    }

    /// Records that an allowed delivery could not be made: a followed case's replay stops
    /// (`replay_stopped`, the error as evidence); a case to close is left as it was.
    pub(crate) async fn hand_failed(&self, pass: &HandPass, e: &BrokerError) {
        if let HandPass::Followed(written) = pass
            && let Err(w) = self.send_replay_failed(written, e).await
        {
            tracing::error!(case_id = %written.id, error = %w, "a failed delivery by hand could not be recorded on its case");
        }
    }

    async fn hand_close(
        &self,
        case: &CaseRecord,
        effect: Option<&EffectRecord>,
        target: &HandTarget,
        actor: &Actor,
    ) -> BrokerResult<()> {
        if case.m.state.terminal().is_some() {
            tracing::warn!(case_id = %case.id, state = %case.m.state,
                "a delivery by hand was made while its case closed meanwhile");
            return Ok(());
        }
        let now = self.now();
        let who = actor.name.as_str();
        let op = target.operation;
        let mut data = CaseData::of(case);
        let mut set = case.m.clone();
        let mut append = Vec::new();
        let mut state = set.state;
        if let Some(e) = effect {
            push(&mut state, &mut append, effect_entry(now, who, e));
            data.effect = Some(e.clone());
        }
        let why = match effect {
            Some(e) => format!(
                "its effect authority could not bind its effect ({})",
                e.answer
            ),
            None => "no effect authority can bind its effect".to_owned(),
        };
        let as_id = if target.message_id.is_empty() {
            format!(
                "the ids automatic replay of {} gives it",
                target.destination
            )
        } else {
            target.message_id.clone()
        };
        let closing = with(
            entry(
                now,
                who,
                CaseState::Indeterminate,
                format!("delivered again by hand by {who} ({op}) as {as_id}; {why}"),
            ),
            &[
                ("message_id", target.message_id.clone()),
                ("destination", target.destination.clone()),
                ("digest", target.digest.clone()),
                ("operation", op.to_string()),
                ("by_hand", who.to_owned()),
            ],
        );
        if !push(&mut state, &mut append, closing) {
            return Err(busy(case, op));
        }
        self.close_set(case, &mut set, &mut data, CaseState::Indeterminate, now);
        set.state = state;
        set.data = data.to_value();
        let update = CaseUpdate {
            id: case.id.clone(),
            version: case.version,
            set,
            append,
            payload: None,
            archive_record: false,
            audit: vec![self.hand_audit(case, actor, op, "indeterminate", target)],
        };
        self.write_update(&update).await?;
        tracing::info!(case_id = %case.id, operation = %op, message_id = %target.message_id,
            by = who, "dead letter delivered again by hand; the case closed indeterminate");
        Ok(())
    }

    /// The effect exists: recorded (by the person who asked), a live record archived,
    /// and the case closed `completed` bound to it, as the case's own reconciliation does.
    async fn hand_complete(
        &self,
        case: &CaseRecord,
        e: &EffectRecord,
        op: HandOperation,
        actor: &Actor,
    ) -> BrokerResult<()> {
        let now = self.now();
        let mut data = CaseData::of(case);
        let mut set = case.m.clone();
        let mut append = Vec::new();
        let mut state = set.state;
        let done = push(&mut state, &mut append, effect_entry(now, &actor.name, e))
            && push(
                &mut state,
                &mut append,
                with(
                    entry(
                        now,
                        "broker",
                        CaseState::Completed,
                        format!(
                            "the effect exists: completed; asked before a delivery by hand ({op}), which is refused (a live record is archived rather than delivered again)"
                        ),
                    ),
                    &[
                        ("binding", e.evidence.clone()),
                        ("repair", "archive_record".to_owned()),
                        ("operation", op.to_string()),
                    ],
                ),
            );
        if !done {
            return Err(busy(case, op));
        }
        data.effect = Some(e.clone());
        self.close_set(case, &mut set, &mut data, CaseState::Completed, now);
        set.state = state;
        set.data = data.to_value();
        let target = HandTarget {
            operation: op,
            message_id: String::new(),
            destination: String::new(),
            digest: case.body_sha256.clone(),
        };
        let update = CaseUpdate {
            id: case.id.clone(),
            version: case.version,
            set,
            append,
            payload: None,
            archive_record: true,
            audit: vec![self.hand_audit(case, actor, op, "completed", &target)],
        };
        match self.write_update(&update).await {
            Ok(_) => {
                tracing::info!(case_id = %case.id, operation = %op,
                    "the effect exists: the case completed and the delivery by hand is refused");
                Ok(())
            }
            // Refused either way: whoever changed it decides the case now.
            Err(BrokerError::Store(StoreError::CaseChanged { .. })) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// What closing a case sets (as the case's own closures do): its payload's
    /// retention, no next check, the next decision `closed:<state>`.
    fn close_set(
        &self,
        case: &CaseRecord,
        set: &mut redrive_store::CaseMut,
        data: &mut CaseData,
        state: CaseState,
        now: Timestamp,
    ) {
        let settings = self.case_settings();
        let retention = settings
            .rule(case.queue.as_str())
            .and_then(|r| r.payload_retention_ms)
            .unwrap_or(settings.payload_retention_ms);
        set.payload_until = Some(now.plus_millis(i64::try_from(retention).unwrap_or(i64::MAX)));
        set.next_check_at = None;
        set.closed_at = Some(now);
        data.escalated_for = None;
        data.next = Some(format!("closed:{state}"));
        self.ctx
            .metrics
            .add_labelled(Counter::CasesClosed, case.queue.as_str(), state.as_str(), 1);
    }

    fn hand_audit(
        &self,
        case: &CaseRecord,
        actor: &Actor,
        op: HandOperation,
        state: &str,
        target: &HandTarget,
    ) -> AuditFields {
        let mut targets = vec![
            case.id.clone(),
            format!("operation={op}"),
            format!("state={state}"),
        ];
        if !target.message_id.is_empty() {
            targets.push(format!("message_id={}", target.message_id));
        }
        if !target.destination.is_empty() {
            targets.push(format!("destination={}", target.destination));
        }
        AuditFields {
            at: self.now(),
            actor_id: actor.id.clone(),
            actor_name: actor.name.clone(),
            action: "case.by_hand".to_owned(),
            entity: Some(case.queue.to_string()),
            targets,
            outcome: "ok".to_owned(),
            client: actor.client.clone(),
        }
    }
}
