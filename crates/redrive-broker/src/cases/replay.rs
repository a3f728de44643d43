//! A case's replay: prepared (every gate checked again at admission) and sent to its
//! queue, by the case's owner or by a plan.

use redrive_core::access::Operation;
use redrive_core::case::{self, CaseState, Decision};
use redrive_core::id::CaseId;
use redrive_core::judgement::{ORIGINAL_ID_PROPERTY, REPLAYED_FROM_PROPERTY};
use redrive_core::{EntityName, PropertyValue};
use redrive_store::{CaseRecord, DeadLetterRecord};

use super::data::{self, CaseData, ReplayRecord, ReplayStatus};
use crate::{Actor, BrokerError, BrokerResult, Cases, Outgoing};

use super::advance::Step;
use super::refusal::{case_error, conflict};
use super::view::CaseView;
use redrive_core::case::step::{entry, with};

/// Who admits a replay, where, and under what.
pub(crate) struct ReplayAdmission<'a> {
    /// The owner admitting it (its name).
    pub(crate) actor: &'a str,
    /// Where the replay goes.
    pub(crate) destination: &'a EntityName,
    /// The budget it is admitted under, in words.
    pub(crate) budget: String,
    /// The plan admitting it, if any.
    pub(crate) plan_id: Option<&'a str>,
    /// The item lease written on the case with the admission (a plan's owner holds the
    /// case while its replay is in flight).
    pub(crate) lease: Option<redrive_core::case::Lease>,
    /// The case's dead-letter record when the caller read it already.
    pub(crate) record: Option<&'a DeadLetterRecord>,
}

/// The destination's validation of bytes replayed from `record` (its format and content
/// type; opaque bytes when the record is gone).
pub(crate) fn validate_for(
    record: Option<&DeadLetterRecord>,
    body: &[u8],
) -> Result<(), case::ValidationFailure> {
    match record {
        Some(r) => data::destination_validation(r.format, r.content_type.as_deref(), body),
        None => Ok(()),
    }
}

/// The refusal of a close without execution while the case's replay `message_id` still
/// waits in its queue.
pub(crate) fn replay_in_flight(id: &str, message_id: &str, what: &str) -> BrokerError {
    conflict(
        "replay_in_flight",
        format!(
            "case {id} has a replay in flight ({message_id} still waits in its queue): it cannot be {what} until that replay settles (consumed, dead-lettered again, or its effect observed)"
        ),
    )
}

impl Cases {
    /// Admits one replay of a case by its owner: the effect is reconciled now, every gate
    /// must pass, then the payload (or its equivalent transformation) goes to the case's
    /// queue as `<id>|<n>` and the case waits for its effect.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id, queue, message_type))]
    pub async fn replay_case(&self, id: &CaseId, actor: &Actor) -> BrokerResult<CaseView> {
        let id = id.as_str();
        self.authorize_case(id, actor, Operation::ReplayCase)
            .await?;
        let case = self.for_owner(id, actor).await?;
        // Reconcile now, not at planning time.
        if self
            .authority_for(case.message_type.as_deref())
            .await?
            .is_some()
        {
            self.reconcile(id, actor).await?;
        } else {
            self.advance_case(id).await?;
        }
        let case = self.for_owner(id, actor).await?;
        let known = self.known(&case).await?;
        let data = CaseData::of(&case);
        let now = self.now();
        let decision = case::decide(&data::facts(&case, &data, &known), now);
        if decision != Decision::ReplayEligible {
            let r: BrokerResult<CaseView> = Err(conflict(
                "case_not_eligible",
                format!(
                    "case {id} is not replay eligible: {}",
                    data::describe(&decision)
                ),
            ));
            return self
                .ctx
                .audited(
                    actor,
                    "case.replay",
                    Some(case.queue.as_str()),
                    vec![id.to_owned()],
                    r,
                )
                .await;
        }
        let (step, message_id, outgoing) = self
            .prepare_replay(
                &case,
                &data,
                &ReplayAdmission {
                    actor: &actor.name,
                    destination: &case.queue,
                    budget: "one item".into(),
                    plan_id: None,
                    lease: None,
                    record: None,
                },
            )
            .await?;
        let written = self.write_step(&case, step).await;
        let written = self
            .ctx
            .audited(
                actor,
                "case.replay",
                Some(case.queue.as_str()),
                vec![id.to_owned(), format!("message_id={message_id}")],
                written,
            )
            .await?;
        self.send_replay(&written, &case.queue, outgoing).await?;
        tracing::info!(case_id = %id, message_id = %message_id, owner = %actor.name, "case replay admitted");
        self.case_view(written).await
    }

    /// The write and the message of one replay admission, shared by a case's own replay
    /// and a plan's: the entries up to `replay_admitted` (with the destination, budget,
    /// digest, correction version and plan), the replay record, and the message
    /// `<id>|<n>` carrying the payload (or its latest equivalent transformation). The
    /// caller writes the step (conditional on the case's version), audits it, then sends.
    pub(crate) async fn prepare_replay(
        &self,
        case: &CaseRecord,
        data: &CaseData,
        a: &ReplayAdmission<'_>,
    ) -> BrokerResult<(Step, String, Outgoing)> {
        self.prepare_replay_onto(Step::of(case), case, data, a)
            .await
    }

    /// [`Cases::prepare_replay`] on top of a step already prepared (a reconciliation
    /// written with the admission, in one write).
    #[tracing::instrument(level = "debug", skip_all, fields(case = %case.id, queue = %case.queue, plan = ?a.plan_id))]
    pub(crate) async fn prepare_replay_onto(
        &self,
        mut step: Step,
        case: &CaseRecord,
        data: &CaseData,
        a: &ReplayAdmission<'_>,
    ) -> BrokerResult<(Step, String, Outgoing)> {
        let now = self.now();
        let fetched;
        let record = match a.record {
            Some(r) => r,
            None => {
                fetched = self
                    .ctx
                    .store
                    .get_dead_letter(&case.queue, &case.record_id)
                    .await?;
                &fetched
            }
        };
        let (body, digest) = match data.transformations.last() {
            Some(t) if t.equivalent => (
                self.ctx
                    .store
                    .case_payload(&case.id, &t.digest)
                    .await?
                    .ok_or_else(|| {
                        conflict("payload_gone", "the transformation's bytes are gone")
                    })?,
                t.digest.clone(),
            ),
            _ => (record.body.clone(), record.body_sha256.clone()),
        };
        // Checked again at the moment of admission, whoever admits it: the value window,
        // the bytes against the destination's validation, no earlier replay still queued.
        let transformed = data.transformations.last().is_some_and(|t| t.equivalent);
        let payload = if transformed {
            validate_for(Some(record), &body)
        } else {
            Ok(())
        };
        let queued = self.replay_queued(data).await?;
        if let Err(r) = case::admission_check(
            data::value_window_end(case, data),
            payload,
            queued.is_some(),
            now,
        ) {
            return Err(admission_refusal(case, r, queued.as_deref()));
        }
        let (base, n) = redrive_core::id::split_replay_count(&record.message_id);
        let message_id = format!("{base}|{}", n + 1);
        if let Some(lease) = &a.lease {
            step.set.lease = Some(lease.clone());
        }
        eligible_at_admission(&mut step, a.actor, now)?;
        let correction = data.correction().map(|c| c.version);
        let by = match a.plan_id {
            Some(p) => format!("{} (plan {p})", a.actor),
            None => a.actor.to_owned(),
        };
        step.push(with(
            entry(
                now,
                a.actor,
                CaseState::ReplayAdmitted,
                format!(
                    "one replay admitted by {by} to {} as {message_id}",
                    a.destination
                ),
            ),
            &[
                ("message_id", message_id.clone()),
                ("destination", a.destination.to_string()),
                ("digest", digest.clone()),
                ("budget", a.budget.clone()),
                ("plan_id", a.plan_id.unwrap_or_default().to_owned()),
                (
                    "correction_version",
                    correction.map(|c| c.to_string()).unwrap_or_default(),
                ),
            ],
        ))
        .map_err(case_error)?;
        step.data.replays.push(ReplayRecord {
            message_id: message_id.clone(),
            destination: a.destination.to_string(),
            digest,
            correction_version: correction,
            owner: a.actor.to_owned(),
            status: ReplayStatus::InFlight,
            at_ms: now.as_millis(),
        });
        step.set.next_check_at = Some(now.plus_millis(60_000));
        step.data.next = Some("observe_replay".to_owned());
        let outgoing = replay_message(record, body, &message_id, base);
        Ok((step, message_id, outgoing))
    }

    /// Sends an admitted replay to `destination`; a send that fails stops the case's replay
    /// (`replay_stopped`, the error as evidence) and is returned.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %written.id, queue = %destination, message_type = ?outgoing.message_type))]
    pub(crate) async fn send_replay(
        &self,
        written: &CaseRecord,
        destination: &EntityName,
        outgoing: Outgoing,
    ) -> BrokerResult<()> {
        let Err(e) = self.broker.send(destination.as_str(), vec![outgoing]).await else {
            return Ok(());
        };
        self.send_replay_failed(written, &e).await?;
        Err(e)
    }

    /// Records that an admitted replay could not be sent: the case's replay stops
    /// (`replay_stopped`, the error as evidence).
    pub(crate) async fn send_replay_failed(
        &self,
        written: &CaseRecord,
        e: &BrokerError,
    ) -> BrokerResult<()> {
        let mut step = Step::of(written);
        if let Some(last) = step.data.replays.last_mut() {
            last.status = ReplayStatus::Stopped;
        }
        step.push(entry(
            self.now(),
            "broker",
            CaseState::ReplayStopped,
            format!("the replay could not be delivered: {e}"),
        ))
        .map_err(case_error)?;
        self.write_step(written, step).await?;
        Ok(())
    }
}

/// The refusal of a replay at admission, in the case's words.
fn admission_refusal(
    case: &CaseRecord,
    r: case::AdmissionRefusal,
    queued: Option<&str>,
) -> BrokerError {
    match r {
        case::AdmissionRefusal::Expired { deadline } => conflict(
            "case_expired",
            format!(
                "case {}'s value window ended at {}: no replay is admitted (the case closes expired)",
                case.id,
                deadline.to_rfc3339()
            ),
        ),
        case::AdmissionRefusal::PayloadInvalid(f) => conflict(
            "transformation_invalid",
            format!(
                "case {}'s transformation fails the destination's validation ({f}): it is never replayed",
                case.id
            ),
        ),
        case::AdmissionRefusal::ReplayQueued => {
            replay_in_flight(&case.id, queued.unwrap_or_default(), "replayed again")
        }
    }
}

/// The message a replay sends: the record's (or its transformation's) bytes and
/// properties, with the original id and the record it was replayed from.
fn replay_message(
    record: &redrive_store::DeadLetterRecord,
    body: Vec<u8>,
    message_id: &str,
    base: &str,
) -> Outgoing {
    let mut props = record.properties.clone();
    props.insert(
        ORIGINAL_ID_PROPERTY.into(),
        PropertyValue::String(base.to_owned()),
    );
    props.insert(
        REPLAYED_FROM_PROPERTY.into(),
        PropertyValue::String(record.id.clone()),
    );
    Outgoing {
        message_id: Some(message_id.to_owned()),
        body,
        content_type: record.content_type.clone(),
        properties: props,
        correlation_id: record.correlation_id.clone(),
        session_id: record.session_id.clone(),
        message_type: record.message_type.clone(),
        intent: record.intent.clone(),
        valid_until: record.valid_until,
        ..Outgoing::default()
    }
}

/// Records on `step` that every gate passes at admission, after an intent-active entry
/// where the case's state allows no eligibility directly.
fn eligible_at_admission(
    step: &mut Step,
    actor: &str,
    now: redrive_core::Timestamp,
) -> BrokerResult<()> {
    if step.set.state != CaseState::ReplayEligible
        && step
            .push(entry(
                now,
                actor,
                CaseState::ReplayEligible,
                "every gate passes at admission",
            ))
            .is_err()
    {
        step.push(entry(
            now,
            actor,
            CaseState::IntentActive,
            "the intent is active and inside its value window at admission",
        ))
        .map_err(case_error)?;
        step.push(entry(
            now,
            actor,
            CaseState::ReplayEligible,
            "every gate passes at admission",
        ))
        .map_err(case_error)?;
    }
    Ok(())
}
