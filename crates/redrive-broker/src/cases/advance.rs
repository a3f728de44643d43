//! The advance: the steps the broker takes by itself on a case. Each step reads the case
//! and what is known of it ([`super::known`]), checks the route first
//! ([`super::route`]), asks [`redrive_core::case::decide`] for the decision and
//! [`redrive_core::case::step::step`] for what follows from it, asks the effect authority
//! when the step needs its answer, carries out the effects (count, log, post an
//! escalation) and writes the case with one conditional [`CaseUpdate`]; a case that
//! changed since it was read is read again and the step retried.

use redrive_core::Timestamp;
use redrive_core::case::{self, CaseError, CaseState, TimelineEntry};
use redrive_store::{AuditFields, CasePayload, CaseQuery, CaseRecord, CaseUpdate, StoreError};

use super::data::{self, CaseData, EffectRecord, Known, ReplayStatus};
use super::{CaseContext, effect};
use crate::metrics::Counter;
use crate::{Actor, BrokerError, BrokerResult, Cases};

use super::refusal::{case_error, conflict, type_words};
use super::route::route_misconfigured;
use redrive_core::case::step::ROUTE_RECHECK_MS;
use redrive_core::case::step::{
    self as core_step, Answer, Effect, Outcome, StepFacts, StepWrite, Subject, entry, with,
};

/// Steps one advance takes at most (each a write); a case needs a handful.
pub(crate) const MAX_STEPS: usize = 12;

/// One step's write, prepared from a case as read.
#[derive(Clone)]
pub(crate) struct Step {
    pub(crate) set: redrive_store::CaseMut,
    pub(crate) append: Vec<TimelineEntry>,
    pub(crate) payload: Option<CasePayload>,
    pub(crate) archive_record: bool,
    pub(crate) data: CaseData,
    /// Whether a replay of the case still waits in its queue (its next check polls it).
    pub(crate) replay_queued: bool,
}

impl Step {
    /// The case's data as this step leaves it.
    pub(crate) fn data(&self) -> &CaseData {
        &self.data
    }

    /// Has the case looked at again at `at` (the case worker's next check).
    pub(crate) fn check_at(&mut self, at: Timestamp) {
        self.set.next_check_at = Some(at);
    }

    pub(crate) fn of(case: &CaseRecord) -> Step {
        Step {
            set: case.m.clone(),
            append: Vec::new(),
            payload: None,
            archive_record: false,
            data: CaseData::of(case),
            replay_queued: false,
        }
    }

    /// The step with only the case's recorded next decision changed, if it changed: a
    /// decision the broker takes is in the listing even when it appends nothing.
    pub(crate) fn only_next(mut self, case: &CaseRecord) -> Option<(Step, bool)> {
        let recorded = CaseData::of(case);
        if self.data.next == recorded.next {
            return None;
        }
        let next = self.data.next.take();
        self.data = recorded;
        self.data.next = next;
        self.set = case.m.clone();
        self.append.clear();
        self.payload = None;
        self.archive_record = false;
        Some((self, true))
    }

    /// The update that writes this step over `case` as read (no audit entry).
    pub(crate) fn update_of(mut self, case: &CaseRecord) -> CaseUpdate {
        self.set.data = self.data.to_value();
        CaseUpdate {
            id: case.id.clone(),
            version: case.version,
            set: self.set,
            append: self.append,
            payload: self.payload,
            archive_record: self.archive_record,
            audit: Vec::new(),
        }
    }

    /// Applies what [`core_step::step`] decided to write; answers the effects the broker
    /// carries out besides.
    pub(crate) fn apply(&mut self, w: StepWrite) -> Result<Vec<Effect>, CaseError> {
        for e in w.append {
            self.push(e)?;
        }
        self.set.state = w.state;
        if let Some(at) = w.closed_at {
            self.set.closed_at = Some(at);
        }
        if let Some(at) = w.next_check_at {
            self.set.next_check_at = at;
        }
        if let Some(until) = w.payload_until {
            self.set.payload_until = Some(until);
        }
        self.data.next = Some(w.next);
        if let Some(what) = w.escalated_for {
            self.data.escalated_for = what.map(|m| m.to_string());
        }
        if let Some(seen) = w.effect {
            self.data.effect = Some(EffectRecord::of(seen));
        }
        if w.stop_last_replay
            && let Some(last) = self.data.replays.last_mut()
        {
            last.status = ReplayStatus::Stopped;
        }
        self.archive_record |= w.archive_record;
        Ok(w.effects)
    }

    /// Appends an entry if the timeline allows it after what is appended so far.
    pub(crate) fn push(&mut self, e: TimelineEntry) -> Result<(), CaseError> {
        case::may_append(Some(self.set.state), e.state)?;
        self.set.state = e.state;
        if let Some(t) = e.state.terminal() {
            self.set.closed_at = Some(e.at);
            let _ = t;
        }
        self.append.push(e);
        Ok(())
    }
}

/// The decisions a step of the broker's records, for the audit log: a closing, an
/// escalation, a stopped replay, a repaired record (`state=<state>`, `repair=archive_record`).
pub(crate) fn decisions(step: &Step) -> Vec<String> {
    let mut out: Vec<String> = step
        .append
        .iter()
        .filter(|e| {
            e.state.terminal().is_some()
                || matches!(e.state, CaseState::Escalated | CaseState::ReplayStopped)
        })
        .map(|e| format!("state={}", e.state))
        .collect();
    if step.archive_record {
        out.push("repair=archive_record".to_owned());
    }
    out
}

/// When a case waiting at `now` is looked at next ([`case::next_check`]): its review
/// deadline, the end of its value window or its claim's expiry, whichever comes first, and
/// within a minute while a replay of it waits in its queue (none: nothing scheduled).
pub(crate) fn next_check(case: &CaseRecord, step: &Step, now: Timestamp) -> Option<Timestamp> {
    let next = case::next_check(
        step.set.review_deadline,
        data::value_window_end(case, &step.data),
        step.set.lease.as_ref().map(|l| l.until),
        step.replay_queued,
        now,
    );
    // A route still to repair is checked again every minute.
    if route_misconfigured(&step.data) {
        let poll = now.plus_millis(ROUTE_RECHECK_MS);
        return Some(next.map_or(poll, |n| n.min(poll)));
    }
    next
}

impl Cases {
    pub(crate) async fn write_step(
        &self,
        case: &CaseRecord,
        step: Step,
    ) -> BrokerResult<CaseRecord> {
        Ok(self.ctx.store.update_case(&step.update_of(case)).await?)
    }

    /// Advances a case as far as the broker may by itself. Returns the case as left.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id, queue))]
    pub async fn advance_case(&self, id: &str) -> BrokerResult<CaseRecord> {
        let ctx = self.case_context().await?;
        let case = self.ctx.store.get_case(id).await?;
        tracing::Span::current().record("queue", case.queue.as_str());
        self.advance_read_case(case, &ctx).await
    }

    /// [`Cases::advance_case`] within a pass: the case's steps taken in memory and
    /// written at once ([`Cases::steps_in`]), read again and retried when another writer
    /// changed it meanwhile.
    pub(crate) async fn advance_case_in(
        &self,
        id: &str,
        ctx: &CaseContext,
    ) -> BrokerResult<CaseRecord> {
        let case = self.ctx.store.get_case(id).await?;
        self.advance_read_case(case, ctx).await
    }

    /// [`Cases::advance_case_in`] from the case as just read.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %case.id, queue = %case.queue))]
    pub(crate) async fn advance_read_case(
        &self,
        mut case: CaseRecord,
        ctx: &CaseContext,
    ) -> BrokerResult<CaseRecord> {
        for _ in 0..MAX_STEPS {
            let Some((update, finished)) = self.steps_in(&case, ctx).await? else {
                return Ok(case);
            };
            match self.write_update(&update).await {
                Ok(written) => {
                    case = written;
                    if finished {
                        return Ok(case);
                    }
                }
                Err(BrokerError::Store(StoreError::CaseChanged { .. })) => {
                    case = self.ctx.store.get_case(&case.id).await?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(case)
    }

    /// Writes a case update prepared by [`Cases::steps_in`] (its audit entries with it).
    pub(crate) async fn write_update(&self, update: &CaseUpdate) -> BrokerResult<CaseRecord> {
        let written = self.ctx.store.update_case(update).await?;
        self.ctx
            .metrics
            .audit_entries
            .add(update.audit.len() as u64);
        Ok(written)
    }

    /// The steps the broker takes by itself on `case` now, one after the other in memory,
    /// as one update: every step's timeline entries and the last step's fields, with the
    /// audit entry of each decision it makes about the item (`None`: nothing to write).
    /// The second value says whether the case then waits (`false`: a step could not be
    /// joined to the others — two kept payloads — and the case has more to do once this
    /// update is written).
    pub(crate) async fn steps_in(
        &self,
        case: &CaseRecord,
        ctx: &CaseContext,
    ) -> BrokerResult<Option<(CaseUpdate, bool)>> {
        let (known, _) = self.known_in(case, ctx).await?;
        self.steps_known(case, ctx, &known).await
    }

    /// [`Cases::steps_in`] with what the broker knows beyond the case already read: it
    /// does not change with the case's own steps (a repaired record closes the case).
    pub(crate) async fn steps_known(
        &self,
        case: &CaseRecord,
        ctx: &CaseContext,
        known: &Known,
    ) -> BrokerResult<Option<(CaseUpdate, bool)>> {
        let mut view = case.clone();
        let mut update: Option<CaseUpdate> = None;
        for _ in 0..MAX_STEPS {
            if view.m.state.terminal().is_some() {
                break;
            }
            let Some((step, done)) = self.step(&view, ctx, known).await? else {
                break;
            };
            let decided = decisions(&step);
            let u = update.get_or_insert_with(|| CaseUpdate {
                id: case.id.clone(),
                version: case.version,
                set: case.m.clone(),
                append: Vec::new(),
                payload: None,
                archive_record: false,
                audit: Vec::new(),
            });
            if step.payload.is_some() && u.payload.is_some() {
                return Ok(update.map(|u| (u, false)));
            }
            let mut set = step.set;
            set.data = step.data.to_value();
            view.m = set.clone();
            u.set = set;
            u.append.extend(step.append);
            u.archive_record |= step.archive_record;
            if step.payload.is_some() {
                u.payload = step.payload;
            }
            if !decided.is_empty() {
                // The broker's own decisions about the item are audited, as a person's are.
                let actor = Actor::system("cases");
                u.audit.push(AuditFields {
                    at: self.now(),
                    actor_id: actor.id,
                    actor_name: actor.name,
                    action: "case.decide".to_owned(),
                    entity: Some(case.queue.to_string()),
                    targets: std::iter::once(case.id.clone()).chain(decided).collect(),
                    outcome: "ok".to_owned(),
                    client: None,
                });
            }
            if done {
                break;
            }
        }
        Ok(update.map(|u| (u, true)))
    }

    /// The next step of a case: what to write, and whether the case then waits. Find (the
    /// route check, what is known), decide ([`case::decide`], then [`core_step::step`] for
    /// what follows from the decision), carry out the effects, and leave the write in the
    /// returned step.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %case.id, queue = %case.queue, message_type = ?case.message_type))]
    pub(crate) async fn step(
        &self,
        case: &CaseRecord,
        ctx: &CaseContext,
        known: &Known,
    ) -> BrokerResult<Option<(Step, bool)>> {
        let now = self.now();
        let settings = self.case_settings();
        let mut step = Step::of(case);
        step.data.repetition = Some(known.repetition);
        step.replay_queued = known.replay_queued.is_some();
        // Route verification comes first, and a misconfigured route is checked again.
        let route_checked_now = step.data.route.is_none() || route_misconfigured(&step.data);
        if route_checked_now {
            self.verify_route(case, &mut step, &settings, now).await?;
            if !route_misconfigured(&step.data) {
                return Ok(Some((step, false)));
            }
        }
        let facts = data::facts(case, &step.data, known);
        let decision = case::decide(&facts, now);
        let missing = case::missing_now(&facts, now);
        let retention_ms = settings
            .rule(case.queue.as_str())
            .and_then(|r| r.payload_retention_ms)
            .unwrap_or(settings.payload_retention_ms);
        let recorded = CaseData::of(case);
        let mut answer = None;
        let outcome = loop {
            let effect = step.data.effect.as_ref().map(EffectRecord::seen);
            let f = StepFacts {
                now,
                subject: Subject {
                    queue: case.queue.as_str(),
                    intent_id: &case.intent_id,
                    message_type: case.message_type.as_deref(),
                    review_deadline: case.m.review_deadline,
                },
                state: step.set.state,
                recorded_state: case.m.state,
                review_deadline: step.set.review_deadline,
                next_check_at: step.set.next_check_at,
                recorded_next_check_at: case.m.next_check_at,
                recorded_next: recorded.next.as_deref(),
                escalated_for: step.data.escalated_for.as_deref(),
                lease: step.set.lease.as_ref(),
                value_window_end: data::value_window_end(case, &step.data),
                replay_queued: step.replay_queued,
                route_misconfigured: route_misconfigured(&step.data),
                route_checked_now,
                route_rule: step.data.route.as_ref().and_then(|r| r.rule),
                effect: effect.as_ref(),
                has_authority: known.has_authority,
                superseded_by: known
                    .intent
                    .as_ref()
                    .and_then(|i| i.superseded_by.as_deref()),
                pending: !step.append.is_empty(),
                retention_ms,
                missing_now: &missing,
            };
            match core_step::step(&f, &decision, answer.as_ref()).map_err(case_error)? {
                Outcome::AskAuthority if answer.is_none() => {
                    answer = Some(self.ask_authority(case, ctx).await?);
                }
                o => break o,
            }
        };
        match outcome {
            Outcome::Nothing | Outcome::AskAuthority => Ok(None),
            Outcome::NextOnly(next) => {
                step.data.next = Some(next);
                Ok(step.only_next(case))
            }
            Outcome::Write(w) => {
                let finished = w.finished;
                let effects = step.apply(w).map_err(case_error)?;
                self.carry_out(case, effects).await;
                Ok(Some((step, finished)))
            }
        }
    }

    /// Carries out what a step decided beside its write: counts and logs a closing, counts,
    /// logs and posts an escalation.
    pub(crate) async fn carry_out(&self, case: &CaseRecord, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Closed(state) => {
                    self.ctx.metrics.add_labelled(
                        Counter::CasesClosed,
                        case.queue.as_str(),
                        state.as_str(),
                        1,
                    );
                    tracing::info!(case_id = %case.id, queue = %case.queue, state = %state, "recovery case closed");
                }
                Effect::Escalated { missing, text } => {
                    let what = missing.as_str();
                    self.ctx.metrics.add_labelled(
                        Counter::CasesEscalated,
                        case.queue.as_str(),
                        what,
                        1,
                    );
                    tracing::error!(case_id = %case.id, queue = %case.queue, missing = %what, "recovery case escalated: {text}");
                    self.post_escalation(case, what, &text).await;
                }
            }
        }
    }

    /// Asks the effect authority of the case's type about its intent (or takes the answer
    /// a pass already has), and counts the lookup.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %case.id, queue = %case.queue, message_type = ?case.message_type))]
    pub(crate) async fn ask_authority(
        &self,
        case: &CaseRecord,
        ctx: &CaseContext,
    ) -> BrokerResult<Answer> {
        let Some(authority) = ctx.authority(case.message_type.as_deref()) else {
            return Err(conflict(
                "no_effect_authority",
                format!("no effect authority is registered for {}", type_words(case)),
            ));
        };
        let (answer, evidence) = match ctx.take_answer(&case.id) {
            Some(a) => a,
            None => {
                effect::ask(
                    &self.case_client(),
                    self.broker.push_network(),
                    authority,
                    case,
                )
                .await
            }
        };
        self.ctx.metrics.add_labelled(
            Counter::EffectLookups,
            case.queue.as_str(),
            answer.as_str(),
            1,
        );
        Ok(Answer {
            answer,
            evidence,
            authority: authority.url.clone(),
        })
    }

    /// Closes the case on `step` with `e` ([`core_step::close`]): the payload is kept for
    /// the queue's retention; the closing is counted and logged.
    pub(crate) fn close_into(
        &self,
        step: &mut Step,
        e: TimelineEntry,
        case: &CaseRecord,
        settings: &super::CaseSettings,
        _now: Timestamp,
    ) -> BrokerResult<()> {
        let retention = settings
            .rule(case.queue.as_str())
            .and_then(|r| r.payload_retention_ms)
            .unwrap_or(settings.payload_retention_ms);
        let w = core_step::close(step.set.state, e, retention).map_err(case_error)?;
        for effect in step.apply(w).map_err(case_error)? {
            if let Effect::Closed(state) = effect {
                self.ctx.metrics.add_labelled(
                    Counter::CasesClosed,
                    case.queue.as_str(),
                    state.as_str(),
                    1,
                );
                tracing::info!(case_id = %case.id, queue = %case.queue, state = %state, "recovery case closed");
            }
        }
        Ok(())
    }

    /// Asks the effect authority and records its answer on `step` as `actor`'s.
    pub(crate) async fn reconcile_into(
        &self,
        case: &CaseRecord,
        step: &mut Step,
        now: Timestamp,
        actor: &str,
        ctx: &CaseContext,
    ) -> BrokerResult<()> {
        let a = self.ask_authority(case, ctx).await?;
        let (e, seen) = core_step::answered(&a, now, actor);
        step.data.effect = Some(EffectRecord::of(seen));
        step.push(e).map_err(case_error)
    }

    /// Marks the in-flight replay whose message this case's record is as failed: it
    /// repeated the failure.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %case.id, queue = %case.queue))]
    pub(crate) async fn replay_failed(
        &self,
        case: &CaseRecord,
        now: Timestamp,
    ) -> BrokerResult<()> {
        // A replay is `<id>|<n>`; a resubmit by hand keeps `<id>` (cases::by_hand).
        let others = self
            .ctx
            .store
            .list_cases(&CaseQuery {
                intent_id: Some(case.intent_id.clone()),
                open: true,
                limit: 100,
                ..CaseQuery::default()
            })
            .await?;
        for other in others.into_iter().filter(|o| o.id != case.id) {
            let mut step = Step::of(&other);
            let Some(last) = step.data.replays.last_mut() else {
                continue;
            };
            if last.status != ReplayStatus::InFlight || last.message_id != case.message_id {
                continue;
            }
            last.status = ReplayStatus::Failed;
            step.push(with(
                entry(
                    now,
                    "broker",
                    CaseState::FailureClassified,
                    format!(
                        "the replay {} was dead-lettered again ({}): it repeated the failure",
                        case.message_id, case.reason
                    ),
                ),
                &[("replay_case", case.id.clone())],
            ))
            .map_err(case_error)?;
            step.set.next_check_at = Some(now);
            match self.write_step(&other, step).await {
                Ok(_) | Err(BrokerError::Store(StoreError::CaseChanged { .. })) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    #[tracing::instrument(level = "debug", skip_all, fields(case = %case.id, queue = %case.queue, missing = %missing))]
    pub(crate) async fn post_escalation(&self, case: &CaseRecord, missing: &str, text: &str) {
        let Some(url) = self.case_settings().escalation_webhook else {
            return;
        };
        if let Err(f) = self.broker.push_network().check_literal(&url) {
            tracing::error!(url = %url, error = %f, "escalation webhook not allowed");
            return;
        }
        let body = serde_json::json!({
            "case_id": case.id,
            "queue": case.queue.as_str(),
            "intent_id": case.intent_id,
            "reason": case.reason,
            "missing": missing,
            "evidence": text,
            "review_deadline": case.m.review_deadline.to_rfc3339(),
        });
        let r = self
            .case_client()
            .post(&url)
            .timeout(std::time::Duration::from_secs(5))
            .json(&body)
            .send()
            .await;
        match r {
            Ok(resp) if resp.status().is_success() => {}
            Ok(resp) => {
                tracing::error!(url = %url, status = %resp.status(), "escalation webhook refused the escalation")
            }
            Err(e) => tracing::error!(url = %url, error = %e, "escalation webhook unreachable"),
        }
    }
}
