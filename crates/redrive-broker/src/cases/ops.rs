//! The operations on cases: the advance (what the broker decides by itself) and what a
//! person asks for. Every write is one conditional [`CaseUpdate`]; a case that changed
//! since it was read is read again and the step retried.

use redrive_core::access::{EVERY_ENTITY, Operation, Role, Scope};
use redrive_core::case::{
    self, CaseError, CaseState, Decision, RepetitionPolicy, RouteCheck, RouteRule, RouteTarget,
    TimelineEntry,
};
use redrive_core::judgement::{ORIGINAL_ID_PROPERTY, QuarantineCause, REPLAYED_FROM_PROPERTY};
use redrive_core::register::judge;
use redrive_core::{EntityName, PropertyValue, Timestamp};
use redrive_store::{
    AuditFields, CasePayload, CaseQuery, CaseRecord, CaseUpdate, DeadLetterRecord, EffectAuthority,
    IntentRecord, IntentStatus, StoreError,
};

use super::data::{
    self, CaseData, Correction, CorrectionKind, Diagnosis, EffectRecord, IsolatedTest, Known, Note,
    ReplayRecord, ReplayStatus, ReviewRecord, RouteEvidence, TestOutcome, TransformationRecord,
};
use super::{
    CaseContext, MAX_CASE_LEASE_MS, MAX_CHANGED_FIELDS, MAX_EXTEND_MS, MAX_TEXT_LEN, effect,
};
use crate::metrics::Counter;
use crate::{Actor, Broker, BrokerError, BrokerResult, Outgoing};

use redrive_core::case::step::ROUTE_RECHECK_MS;
use redrive_core::case::step::{
    self as core_step, Answer, Effect, Outcome, StepFacts, StepWrite, Subject, entry, with,
};

/// Steps one advance takes at most (each a write); a case needs a handful.
const MAX_STEPS: usize = 12;

/// Messages read per page when a replay is looked for in its destination queue.
const REPLAY_SCAN_PAGE: u32 = 500;
/// Pages read at most: a replay not found in the first 10,000 messages of a longer queue
/// counts as still waiting.
const REPLAY_SCAN_PAGES: usize = 20;

/// A case as the interfaces show it: its record, its data, the next decision. The
/// timeline is read apart ([`Broker::case_timeline`]).
#[derive(Debug, Clone)]
pub struct CaseView {
    /// The stored case.
    pub case: CaseRecord,
    /// Its data.
    pub data: CaseData,
    /// The next decision now, in words (`escalate:effect_authority`, `needs_diagnosis`…).
    pub next: String,
    /// Whether it is past its review deadline while open.
    pub overdue: bool,
}

/// An isolated test as asked for.
#[derive(Debug, Clone)]
pub struct TestInput {
    /// The correction tested (the latest when absent).
    pub correction_version: Option<u32>,
    /// The fixture's bytes; the case's exact payload (or its latest transformation) when
    /// absent.
    pub fixture: Option<Vec<u8>>,
    /// The isolated destination: a sink queue.
    pub destination: String,
    /// Whether the broker sends the fixture to the sink (a queue) now.
    pub send: bool,
    /// The outcome observed there.
    pub outcome: TestOutcome,
    /// Its evidence.
    pub evidence: String,
}

/// A transformation as asked for.
#[derive(Debug, Clone)]
pub struct TransformInput {
    /// The transformed bytes.
    pub body: Vec<u8>,
    /// The deterministic transformation's version.
    pub transformation_version: String,
    /// Every changed field.
    pub changed_fields: Vec<String>,
    /// The authority that permits it.
    pub authority: String,
    /// Whether the intent stays equivalent.
    pub equivalent: bool,
    /// The failure shape it addresses.
    pub addresses: String,
}

/// A review decision on an overdue case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewDecision {
    /// Archive the record and close the case `indeterminate`.
    Archive,
    /// Delete the payload now and close the case `indeterminate`.
    Delete,
    /// Keep it under its owner for this long more, ms.
    Extend(u64),
}

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

/// What an intent update did.
#[derive(Debug, Clone)]
pub struct IntentOutcome {
    /// The stored word on the intent for its entity (the first one stands).
    pub intent: IntentRecord,
    /// The cases it closed.
    pub closed: Vec<String>,
}

/// How a route's evidence names its policy version: `, policy version N`, or that none
/// is known.
fn policy_phrase(version: Option<u64>) -> String {
    match version {
        Some(v) => format!(", policy version {v}"),
        None => ", policy version unknown".to_owned(),
    }
}

fn conflict(code: &str, why: impl Into<String>) -> BrokerError {
    BrokerError::CaseConflict {
        code: code.to_owned(),
        why: why.into(),
        owner: None,
    }
}

fn claimed(why: impl Into<String>, owner: &str) -> BrokerError {
    BrokerError::CaseConflict {
        code: "case_claimed".to_owned(),
        why: why.into(),
        owner: Some(owner.to_owned()),
    }
}

fn case_error(e: CaseError) -> BrokerError {
    if let CaseError::Claimed { owner, .. } = &e {
        return claimed(e.to_string(), owner);
    }
    let code = match &e {
        CaseError::Claimed { .. } => "case_claimed",
        CaseError::NotOwner { .. } => "not_case_owner",
        CaseError::Closed { .. } => "case_closed",
        _ => "case_state",
    };
    conflict(code, e.to_string())
}

fn check_text(field: &str, s: &str, required: bool) -> BrokerResult<()> {
    if required && s.trim().is_empty() {
        return Err(BrokerError::invalid(field, "must not be empty"));
    }
    if s.contains('\0') {
        return Err(BrokerError::invalid(
            field,
            "must not contain NUL characters",
        ));
    }
    if s.len() > MAX_TEXT_LEN {
        return Err(BrokerError::invalid(
            field,
            format!("at most {MAX_TEXT_LEN} bytes"),
        ));
    }
    Ok(())
}

/// One step's write, prepared from a case as read.
#[derive(Clone)]
pub(crate) struct Step {
    set: redrive_store::CaseMut,
    append: Vec<TimelineEntry>,
    payload: Option<CasePayload>,
    archive_record: bool,
    data: CaseData,
    /// Whether a replay of the case still waits in its queue (its next check polls it).
    replay_queued: bool,
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
    fn only_next(mut self, case: &CaseRecord) -> Option<(Step, bool)> {
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
    fn apply(&mut self, w: StepWrite) -> Result<Vec<Effect>, CaseError> {
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
    fn push(&mut self, e: TimelineEntry) -> Result<(), CaseError> {
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

impl Broker {
    pub(crate) async fn write_step(
        &self,
        case: &CaseRecord,
        step: Step,
    ) -> BrokerResult<CaseRecord> {
        Ok(self.inner.store.update_case(&step.update_of(case)).await?)
    }

    /// What the broker knows now about `case` beyond its record.
    pub(crate) async fn known(&self, case: &CaseRecord) -> BrokerResult<Known> {
        let ctx = self.case_context().await?;
        Ok(self.known_in(case, &ctx).await?.0)
    }

    /// [`Broker::known`] within a pass (its authorities, register and queues read once),
    /// with the case's dead-letter record when it still exists.
    pub(crate) async fn known_in(
        &self,
        case: &CaseRecord,
        ctx: &CaseContext,
    ) -> BrokerResult<(Known, Option<DeadLetterRecord>)> {
        let store = &self.inner.store;
        let record = match store.get_dead_letter(&case.queue, &case.record_id).await {
            Ok(r) => Some(r),
            Err(StoreError::DeadLetterNotFound { .. } | StoreError::QueueNotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        let intent = redrive_store::IntentRecord::for_queue(
            store.intent_words(&case.intent_id).await?,
            case.queue.as_str(),
        );
        let known = self.known_of(case, record.as_ref(), intent, ctx).await?;
        Ok((known, record))
    }

    /// [`Broker::known_in`] with the case's record and intent already read.
    pub(crate) async fn known_of(
        &self,
        case: &CaseRecord,
        record: Option<&DeadLetterRecord>,
        intent: Option<IntentRecord>,
        ctx: &CaseContext,
    ) -> BrokerResult<Known> {
        let store = &self.inner.store;
        let (record_area, schema_invalid) = match record {
            Some(r) => (
                Some(r.area),
                r.judgement
                    .as_ref()
                    .and_then(|j| j.cause)
                    .is_some_and(|c| c == QuarantineCause::SchemaInvalid),
            ),
            None => (None, false),
        };
        let queue = self.context_queue(ctx, &case.queue).await?;
        let authority = ctx.authority(case.message_type.as_deref());
        let answer = judge(ctx.register(), &case.queue, case.message_type.as_deref());
        let blocked_by = match &case.session_id {
            None => 0,
            Some(session) => {
                let open = store
                    .list_cases(&CaseQuery {
                        queue: Some(case.queue.clone()),
                        open: true,
                        until: Some(case.dead_lettered_at),
                        limit: redrive_store::MAX_CASE_PAGE,
                        ..CaseQuery::default()
                    })
                    .await?;
                open.iter()
                    .filter(|c| c.id != case.id && c.session_id.as_deref() == Some(session))
                    .count() as u64
            }
        };
        let data = CaseData::of(case);
        let replay_queued = self.replay_queued(&data).await?;
        let transformation_failure = self.transformation_failure(case, &data, record).await?;
        let known = Known {
            record_area,
            schema_invalid,
            replay_queued,
            transformation_failure,
            retention_bounded: queue
                .as_ref()
                .is_none_or(|q| q.policy.dead_letter_retention_ms > 0),
            intent,
            has_authority: authority.is_some(),
            repetition: RepetitionPolicy::from_register(&answer, authority.is_some()),
            destination_exists: queue.is_some(),
            blocked_by,
        };
        Ok(known)
    }

    /// The message id of the case's last replay while it still waits in (or is locked on)
    /// its destination queue: a replay that was neither completed nor dead-lettered again
    /// (in flight, or stopped) is looked for there by its message id.
    pub(crate) async fn replay_queued(&self, data: &CaseData) -> BrokerResult<Option<String>> {
        let Some(last) = data
            .replays
            .last()
            .filter(|r| matches!(r.status, ReplayStatus::InFlight | ReplayStatus::Stopped))
        else {
            return Ok(None);
        };
        let Ok(queue) = last.destination.parse::<EntityName>() else {
            return Ok(None);
        };
        let now = self.now();
        let mut from = 0;
        for _ in 0..REPLAY_SCAN_PAGES {
            let page = match self
                .inner
                .store
                .peek(&queue, from, REPLAY_SCAN_PAGE, now)
                .await
            {
                Ok(p) => p,
                Err(StoreError::QueueNotFound { .. }) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            if page
                .iter()
                .any(|m| m.message_id == last.message_id && m.expires_at.is_none_or(|t| t > now))
            {
                return Ok(Some(last.message_id.clone()));
            }
            match page.last() {
                Some(m) if page.len() == REPLAY_SCAN_PAGE as usize => from = m.sequence + 1,
                _ => return Ok(None),
            }
        }
        // A queue longer than the scan: the replay is not shown gone, so it counts as
        // still waiting.
        Ok(Some(last.message_id.clone()))
    }

    /// Where the transformation in force fails the validation of the case's destination
    /// (its bytes gone count as a failure: nothing can be tested or replayed from them).
    pub(crate) async fn transformation_failure(
        &self,
        case: &CaseRecord,
        data: &CaseData,
        record: Option<&DeadLetterRecord>,
    ) -> BrokerResult<Option<case::ValidationFailure>> {
        let Some(t) = data.transformations.last() else {
            return Ok(None);
        };
        let Some(body) = self.inner.store.case_payload(&case.id, &t.digest).await? else {
            return Ok(Some(case::ValidationFailure {
                field: "body".to_owned(),
                rule: format!("the transformation's bytes ({}) are gone", t.digest),
            }));
        };
        Ok(validate_for(record, &body).err())
    }

    pub(crate) async fn authority_for(
        &self,
        message_type: Option<&str>,
    ) -> BrokerResult<Option<EffectAuthority>> {
        let Some(t) = message_type else {
            return Ok(None);
        };
        Ok(self
            .inner
            .store
            .list_effect_authorities()
            .await?
            .into_iter()
            .find(|a| a.message_type == t))
    }

    /// The view of a case now.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id))]
    pub async fn get_case(&self, id: &str) -> BrokerResult<CaseView> {
        let case = self.inner.store.get_case(id).await?;
        self.case_view(case).await
    }

    pub(crate) async fn case_view(&self, case: CaseRecord) -> BrokerResult<CaseView> {
        let data = CaseData::of(&case);
        let now = self.now();
        let next = if case.m.state.terminal().is_some() {
            format!("closed:{}", case.m.state)
        } else {
            let known = self.known(&case).await?;
            data::describe(&case::decide(&data::facts(&case, &data, &known), now))
        };
        let overdue = case.m.closed_at.is_none() && case.m.review_deadline <= now;
        Ok(CaseView {
            case,
            data,
            next,
            overdue,
        })
    }

    /// The timeline of a case, oldest first.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id))]
    pub async fn case_timeline(&self, id: &str) -> BrokerResult<Vec<TimelineEntry>> {
        Ok(self.inner.store.case_timeline(id).await?)
    }

    /// Cases a query matches (metadata only).
    pub async fn list_cases(&self, query: &CaseQuery) -> BrokerResult<Vec<CaseRecord>> {
        if query.limit > redrive_store::MAX_CASE_PAGE {
            return Err(BrokerError::invalid(
                "limit",
                format!("at most {}", redrive_store::MAX_CASE_PAGE),
            ));
        }
        Ok(self.inner.store.list_cases(query).await?)
    }

    /// Counts of the cases a query matches.
    pub async fn case_counts(&self, query: &CaseQuery) -> BrokerResult<redrive_store::CaseCounts> {
        Ok(self.inner.store.case_counts(query).await?)
    }

    /// The payload of a case: its exact bytes, or the transformation `digest` kept with
    /// it. An audited read.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id))]
    pub async fn case_payload(
        &self,
        id: &str,
        digest: Option<&str>,
        actor: &Actor,
    ) -> BrokerResult<(String, Vec<u8>)> {
        let case = self.inner.store.get_case(id).await?;
        let result = async {
            match digest.filter(|d| *d != case.body_sha256) {
                Some(d) => match self.inner.store.case_payload(id, d).await? {
                    Some(b) => Ok((d.to_owned(), b)),
                    None => Err(conflict(
                        "payload_gone",
                        format!("case {id} keeps no payload with digest {d}"),
                    )),
                },
                None => {
                    if case.m.payload_deleted_at.is_some() {
                        return Err(conflict(
                            "payload_gone",
                            format!("the payload of case {id} was deleted under its retention rule; its digest {} remains", case.body_sha256),
                        ));
                    }
                    match self
                        .inner
                        .store
                        .get_dead_letter(&case.queue, &case.record_id)
                        .await
                    {
                        Ok(r) => Ok((r.body_sha256, r.body)),
                        Err(StoreError::DeadLetterNotFound { .. }) => Err(conflict(
                            "payload_gone",
                            format!("the record of case {id} is gone; its digest {} remains", case.body_sha256),
                        )),
                        Err(e) => Err(e.into()),
                    }
                }
            }
        }
        .await;
        self.audited(
            actor,
            "case.payload_read",
            Some(case.queue.as_str()),
            vec![
                id.to_owned(),
                format!("digest={}", digest.unwrap_or(&case.body_sha256)),
            ],
            result,
        )
        .await
    }

    /// Advances a case as far as the broker may by itself. Returns the case as left.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id))]
    pub async fn advance_case(&self, id: &str) -> BrokerResult<CaseRecord> {
        let ctx = self.case_context().await?;
        self.advance_case_in(id, &ctx).await
    }

    /// [`Broker::advance_case`] within a pass: the case's steps taken in memory and
    /// written at once ([`Broker::steps_in`]), read again and retried when another writer
    /// changed it meanwhile.
    pub(crate) async fn advance_case_in(
        &self,
        id: &str,
        ctx: &CaseContext,
    ) -> BrokerResult<CaseRecord> {
        let case = self.inner.store.get_case(id).await?;
        self.advance_read_case(case, ctx).await
    }

    /// [`Broker::advance_case_in`] from the case as just read.
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
                    case = self.inner.store.get_case(&case.id).await?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(case)
    }

    /// Writes a case update prepared by [`Broker::steps_in`] (its audit entries with it).
    pub(crate) async fn write_update(&self, update: &CaseUpdate) -> BrokerResult<CaseRecord> {
        let written = self.inner.store.update_case(update).await?;
        self.inner
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

    /// [`Broker::steps_in`] with what the broker knows beyond the case already read: it
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
    #[tracing::instrument(level = "debug", skip_all, fields(case = %case.id, queue = %case.queue))]
    async fn step(
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
    async fn carry_out(&self, case: &CaseRecord, effects: Vec<Effect>) {
        for effect in effects {
            match effect {
                Effect::Closed(state) => {
                    self.inner.metrics.add_labelled(
                        Counter::CasesClosed,
                        case.queue.as_str(),
                        state.as_str(),
                        1,
                    );
                    tracing::info!(case_id = %case.id, queue = %case.queue, state = %state, "recovery case closed");
                }
                Effect::Escalated { missing, text } => {
                    let what = missing.as_str();
                    self.inner.metrics.add_labelled(
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
            None => effect::ask(&self.case_client(), self.push_network(), authority, case).await,
        };
        self.inner.metrics.add_labelled(
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
    fn close_into(
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
                self.inner.metrics.add_labelled(
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

    async fn verify_route(
        &self,
        case: &CaseRecord,
        step: &mut Step,
        settings: &super::CaseSettings,
        now: Timestamp,
    ) -> BrokerResult<()> {
        let record = match self
            .inner
            .store
            .get_dead_letter(&case.queue, &case.record_id)
            .await
        {
            Ok(r) => Some(r),
            Err(StoreError::DeadLetterNotFound { .. } | StoreError::QueueNotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        let first = step.data.route.is_none();
        // The rule, the policy version and the classifier are the record's as routed
        // (copied onto the case when it opened): never re-derived, never invented.
        let rule = case.route_rule;
        let (target, missing) = record.as_ref().map_or((RouteTarget::Unknown, None), |r| {
            (r.route_target, r.missing_target.clone())
        });
        let still_missing = match &missing {
            Some(t) => match t.parse::<EntityName>() {
                Ok(n) => matches!(
                    self.inner.store.get_queue(&n).await,
                    Err(StoreError::QueueNotFound { .. })
                ),
                Err(_) => true,
            },
            None => false,
        };
        let counted = record
            .as_ref()
            .map_or(case.m.evidence_quality, |r| r.count_quality);
        let quality = case::verified_quality(counted, target);
        let check = if still_missing {
            RouteCheck::Misconfigured
        } else {
            RouteCheck::Verified
        };
        let destination = record
            .as_ref()
            .and_then(|r| r.forwarded_to.as_ref().map(|(q, _)| q.to_string()))
            .unwrap_or_else(|| "own_store".to_owned());
        let attempts = case::attempt_evidence(rule, counted, case.delivery_count);
        step.data.route = Some(RouteEvidence {
            checked_at_ms: now.as_millis(),
            check,
            rule,
            target,
            missing_target: missing.clone(),
            destination: destination.clone(),
            attempts,
            quality,
            policy_version: case.policy_version,
            consumer: case.consumer.clone(),
            rule_version: case.rule_version.clone(),
        });
        step.set.evidence_quality = quality;
        let unknown = || "unknown".to_owned();
        let mut fields = vec![
            ("route", case.m.route.to_string()),
            ("rule", rule.map_or_else(unknown, |r| r.to_string())),
            ("target", target.to_string()),
            ("destination", destination),
            (
                "policy_version",
                case.policy_version.map_or_else(unknown, |v| v.to_string()),
            ),
            ("evidence_quality", quality.to_string()),
            (
                "attempts",
                attempts.map_or_else(
                    || "none (routed before delivery)".to_owned(),
                    |a| a.to_string(),
                ),
            ),
        ];
        if let Some(m) = &missing {
            fields.push(("missing_target", m.clone()));
        }
        if let Some(c) = &case.consumer {
            fields.push(("consumer", c.clone()));
        }
        if let Some(v) = &case.rule_version {
            fields.push(("rule_version", v.clone()));
        }
        if first {
            let rule_cfg = settings.rule(case.queue.as_str());
            step.set.review_deadline =
                case::review_deadline(case.opened_at, rule_cfg.and_then(|r| r.review_ms));
            step.data.labels = settings.labels.clone();
            if let Some(r) = &record {
                let allow = rule_cfg.map(|r| r.redact_allow.clone()).unwrap_or_default();
                step.data.context = Some(data::Redacted {
                    policy_version: data::redaction_version(&allow),
                    fields: data::redact(&r.body, &r.properties, &allow),
                });
                let prop = |n: &str| match r.properties.get(n) {
                    Some(PropertyValue::String(s)) => Some(s.clone()),
                    _ => None,
                };
                step.data.schema_version = prop("dataschema").or_else(|| prop("schema_version"));
                step.set.source = prop("source");
                step.set.subject = prop("subject");
            }
        }
        if check == RouteCheck::Misconfigured {
            let target_name = missing.clone().unwrap_or_default();
            if first {
                step.push(with(
                    entry(now, "broker", CaseState::Retained, format!("dead-letter queue {target_name} was missing at routing and still is: repair the configuration; the attempt history is incomplete")),
                    &fields,
                ))
                .map_err(case_error)?;
            }
            // Checked again until the configuration is repaired.
            step.set.next_check_at = Some(now.plus_millis(ROUTE_RECHECK_MS));
            return Ok(());
        }
        let evidence = match (&missing, rule) {
            (Some(t), _) => format!(
                "dead-letter queue {t} was missing at routing (repaired since); the attempt history is incomplete"
            ),
            (None, None) => "nothing says how it was routed: route indeterminate, no rule or policy version recorded".to_owned(),
            (None, Some(rule @ (RouteRule::Filter | RouteRule::Size))) => format!(
                "routed under the {rule} rule before ordinary delivery{}: routing evidence, not a payload diagnosis; no receive history",
                policy_phrase(case.policy_version)
            ),
            (None, Some(rule)) => {
                let mut e = format!(
                    "routed under the {rule} rule{}",
                    policy_phrase(case.policy_version)
                );
                if let Some(c) = &case.consumer {
                    e.push_str(&format!("; reason applied by consumer {c}"));
                }
                if let Some(v) = &case.rule_version {
                    e.push_str(&format!(", rule version {v}"));
                }
                e
            }
        };
        step.push(with(
            entry(now, "broker", CaseState::RouteVerified, evidence),
            &fields,
        ))
        .map_err(case_error)?;
        if quality == redrive_core::dead_letter::EvidenceQuality::Approximate {
            step.push(entry(
                now,
                "broker",
                CaseState::AttemptsApproximate,
                "the provider's semantics support no exact delivery count",
            ))
            .map_err(case_error)?;
        }
        if first && rule.is_some_and(RouteRule::observes_consumer_failure) {
            let observed = record
                .as_ref()
                .and_then(|r| r.description.clone())
                .or_else(|| case.description.clone())
                .unwrap_or_default();
            step.push(with(
                entry(
                    now,
                    "broker",
                    CaseState::FailureClassified,
                    if observed.is_empty() {
                        format!("observed: {}", case.reason)
                    } else {
                        format!("observed: {} — {observed}", case.reason)
                    },
                ),
                &classified_fields(case, observed),
            ))
            .map_err(case_error)?;
            // A dead letter of a replay this broker admitted is that replay's outcome.
            self.replay_failed(case, now).await?;
        }
        step.set.next_check_at = Some(now);
        Ok(())
    }

    /// Marks the in-flight replay whose message this case's record is as failed: it
    /// repeated the failure.
    async fn replay_failed(&self, case: &CaseRecord, now: Timestamp) -> BrokerResult<()> {
        // A replay is `<id>|<n>`; a resubmit by hand keeps `<id>` (cases::by_hand).
        let others = self
            .inner
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

    async fn post_escalation(&self, case: &CaseRecord, missing: &str, text: &str) {
        let Some(url) = self.case_settings().escalation_webhook else {
            return;
        };
        if let Err(f) = self.push_network().check_literal(&url) {
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

    /// Loads a case for a person's change: open, and leased by `actor` unless `claim`.
    async fn for_owner(&self, id: &str, actor: &Actor) -> BrokerResult<CaseRecord> {
        let case = self.inner.store.get_case(id).await?;
        if let Some(t) = case.m.state.terminal() {
            return Err(conflict(
                "case_closed",
                format!("case {id} is closed ({t})"),
            ));
        }
        let now = self.now();
        match case::owner_at(case.m.lease.as_ref(), now) {
            Some(o) if o == actor.name => Ok(case),
            Some(o) => Err(claimed(
                format!("case {id} is claimed by {o}; only its owner changes it"),
                o,
            )),
            None => Err(conflict(
                "not_case_owner",
                format!("claim case {id} first: one owner at a time works a case"),
            )),
        }
    }

    /// A person's change: built from the case as read, written conditionally, retried on
    /// a concurrent change, audited, then the case advanced.
    async fn person_change<F>(
        &self,
        id: &str,
        actor: &Actor,
        action: &str,
        targets: Vec<String>,
        need_owner: bool,
        mut build: F,
    ) -> BrokerResult<CaseView>
    where
        F: FnMut(&CaseRecord, &mut Step, Timestamp) -> BrokerResult<()>,
    {
        let mut result = Err(conflict(
            "case_busy",
            format!("case {id} kept changing; try again"),
        ));
        let mut queue = None;
        for _ in 0..4 {
            let case = if need_owner {
                match self.for_owner(id, actor).await {
                    Ok(c) => c,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            } else {
                self.inner.store.get_case(id).await?
            };
            queue = Some(case.queue.clone());
            let mut step = Step::of(&case);
            let now = self.now();
            if let Err(e) = build(&case, &mut step, now) {
                result = Err(e);
                break;
            }
            match self.write_step(&case, step).await {
                Ok(c) => {
                    result = Ok(c);
                    break;
                }
                Err(BrokerError::Store(StoreError::CaseChanged { .. })) => continue,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let mut all = vec![id.to_owned()];
        all.extend(targets);
        let written = self
            .audited(
                actor,
                action,
                queue.as_ref().map(EntityName::as_str),
                all,
                result,
            )
            .await?;
        let advanced = self.advance_case(&written.id).await?;
        self.case_view(advanced).await
    }

    /// Claims a case for `actor` (or renews its own claim) for `lease_ms`.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id))]
    pub async fn claim_case(
        &self,
        id: &str,
        lease_ms: Option<u64>,
        actor: &Actor,
    ) -> BrokerResult<CaseView> {
        let ms = lease_ms.unwrap_or(self.case_settings().default_lease_ms);
        if ms == 0 || ms > MAX_CASE_LEASE_MS {
            return Err(BrokerError::invalid(
                "lease_ms",
                format!("must be between 1 and {MAX_CASE_LEASE_MS}"),
            ));
        }
        self.person_change(
            id,
            actor,
            "case.claim",
            vec![format!("lease_ms={ms}")],
            false,
            |case, step, now| {
                if let Some(t) = case.m.state.terminal() {
                    return Err(conflict(
                        "case_closed",
                        format!("case {} is closed ({t})", case.id),
                    ));
                }
                let lease =
                    case::claim(case.m.lease.as_ref(), &actor.name, now, ms).map_err(case_error)?;
                if case.m.state == CaseState::Escalated {
                    step.push(with(
                        entry(
                            now,
                            &actor.name,
                            CaseState::Retained,
                            format!("claimed by {}: retained under its owner", actor.name),
                        ),
                        &[("owner", actor.name.clone())],
                    ))
                    .map_err(case_error)?;
                }
                // A claim answers an escalation for a missing owner, not any other.
                if step.data.escalated_for.as_deref() == Some("owner") {
                    step.data.escalated_for = None;
                }
                step.set.lease = Some(lease);
                Ok(())
            },
        )
        .await
    }

    /// Releases `actor`'s claim on a case.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id))]
    pub async fn release_case(&self, id: &str, actor: &Actor) -> BrokerResult<CaseView> {
        self.person_change(
            id,
            actor,
            "case.release",
            vec![],
            false,
            |case, step, now| {
                case::release(case.m.lease.as_ref(), &actor.name, now).map_err(case_error)?;
                step.set.lease = None;
                Ok(())
            },
        )
        .await
    }

    /// Adds a note (no state change).
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id))]
    pub async fn note_case(&self, id: &str, text: &str, actor: &Actor) -> BrokerResult<CaseView> {
        check_text("text", text, true)?;
        self.person_change(id, actor, "case.note", vec![], false, |_, step, now| {
            step.data.notes.push(Note {
                text: text.to_owned(),
                actor: actor.name.clone(),
                at_ms: now.as_millis(),
            });
            Ok(())
        })
        .await
    }

    /// Records a diagnosis (the owner's hypothesis and its disconfirming evidence).
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id))]
    pub async fn diagnose_case(
        &self,
        id: &str,
        hypothesis: &str,
        disconfirming: &str,
        actor: &Actor,
    ) -> BrokerResult<CaseView> {
        check_text("hypothesis", hypothesis, true)?;
        check_text("disconfirming_evidence", disconfirming, true)?;
        self.person_change(id, actor, "case.diagnose", vec![], true, |_, step, now| {
            step.data.diagnoses.push(Diagnosis {
                hypothesis: hypothesis.to_owned(),
                disconfirming_evidence: disconfirming.to_owned(),
                owner: actor.name.clone(),
                at_ms: now.as_millis(),
            });
            step.push(with(
                entry(
                    now,
                    &actor.name,
                    CaseState::DiagnosisProposed,
                    format!("hypothesis: {hypothesis}"),
                ),
                &[("disconfirming_evidence", disconfirming.to_owned())],
            ))
            .map_err(case_error)
        })
        .await
    }

    /// Records a correction: a versioned change that claims to address a failure shape.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id))]
    pub async fn correct_case(
        &self,
        id: &str,
        kind: CorrectionKind,
        identity: &str,
        addresses: &str,
        actor: &Actor,
    ) -> BrokerResult<CaseView> {
        check_text("identity", identity, true)?;
        check_text("addresses", addresses, true)?;
        self.person_change(
            id,
            actor,
            "case.correct",
            vec![format!("identity={identity}")],
            true,
            |_, step, now| {
                let version = u32::try_from(step.data.corrections.len() + 1).unwrap_or(u32::MAX);
                step.data.corrections.push(Correction {
                    version,
                    kind,
                    identity: identity.to_owned(),
                    addresses: addresses.to_owned(),
                    actor: actor.name.clone(),
                    at_ms: now.as_millis(),
                });
                step.push(with(
                    entry(
                        now,
                        &actor.name,
                        CaseState::CorrectionIdentified,
                        format!(
                            "correction {version} ({}) {identity} claims to address: {addresses}",
                            kind.as_str()
                        ),
                    ),
                    &[
                        ("correction_version", version.to_string()),
                        ("identity", identity.to_owned()),
                    ],
                ))
                .map_err(case_error)
            },
        )
        .await
    }

    /// The largest body a replay of a case of `queue` may carry: the queue's
    /// `max_message_size` (the default policy's when the queue is gone, where nothing can be
    /// replayed anyway). Bounds a transformation, before its request body is read too.
    pub async fn case_message_limit(&self, queue: &EntityName) -> BrokerResult<u32> {
        match self.inner.store.get_queue(queue).await {
            Ok(q) => Ok(q.policy.max_message_size),
            Err(StoreError::QueueNotFound { .. }) => {
                Ok(redrive_core::QueuePolicy::default().max_message_size)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Records a payload transformation: a new payload identity kept with the case (the
    /// original stays as it is), and the correction it stands for.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id))]
    pub async fn transform_case(
        &self,
        id: &str,
        input: TransformInput,
        actor: &Actor,
    ) -> BrokerResult<CaseView> {
        check_text(
            "transformation_version",
            &input.transformation_version,
            true,
        )?;
        check_text("authority", &input.authority, true)?;
        check_text("addresses", &input.addresses, true)?;
        if input.changed_fields.is_empty() || input.changed_fields.len() > MAX_CHANGED_FIELDS {
            return Err(BrokerError::invalid(
                "changed_fields",
                format!("name 1 to {MAX_CHANGED_FIELDS} fields"),
            ));
        }
        for f in &input.changed_fields {
            check_text("changed_fields", f, true)?;
        }
        let case = self.inner.store.get_case(id).await?;
        // A transformation is what a replay would send: no larger than its destination takes.
        let limit = self.case_message_limit(&case.queue).await?;
        if input.body.len() > limit as usize {
            return Err(BrokerError::MessageTooLarge {
                queue: case.queue.to_string(),
                size: input.body.len(),
                limit,
            });
        }
        // The new bytes pass the destination's validation, or nothing is recorded.
        let record = match self
            .inner
            .store
            .get_dead_letter(&case.queue, &case.record_id)
            .await
        {
            Ok(r) => Some(r),
            Err(StoreError::DeadLetterNotFound { .. } | StoreError::QueueNotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        case::judge_transformation(validate_for(record.as_ref(), &input.body), input.equivalent)
            .map_err(|f| {
                BrokerError::invalid(
                    f.field.clone(),
                    format!(
                        "{} — the validation applied to what goes to queue {}; a transformation that fails it is not recorded",
                        f.rule, case.queue
                    ),
                )
            })?;
        let digest = redrive_core::digest::sha256_hex(&input.body);
        let d2 = digest.clone();
        // Both payload identities are bound in the audit entry.
        let original = case.body_sha256;
        self.person_change(
            id,
            actor,
            "case.transform",
            vec![
                format!("original={original}"),
                format!("transformed={digest}"),
                format!("equivalent={}", input.equivalent),
            ],
            true,
            move |case, step, now| {
                if case.body_sha256 == d2 {
                    return Err(BrokerError::invalid(
                        "body",
                        "the transformation leaves the payload as it is",
                    ));
                }
                let version = u32::try_from(step.data.corrections.len() + 1).unwrap_or(u32::MAX);
                step.data.transformations.push(TransformationRecord {
                    original_digest: case.body_sha256.clone(),
                    digest: d2.clone(),
                    size: input.body.len() as u64,
                    transformation_version: input.transformation_version.clone(),
                    changed_fields: input.changed_fields.clone(),
                    authority: input.authority.clone(),
                    equivalent: input.equivalent,
                    actor: actor.name.clone(),
                    at_ms: now.as_millis(),
                });
                step.data.corrections.push(Correction {
                    version,
                    kind: CorrectionKind::Data,
                    identity: format!("transformation {} ({})", input.transformation_version, d2),
                    addresses: input.addresses.clone(),
                    actor: actor.name.clone(),
                    at_ms: now.as_millis(),
                });
                step.payload = Some(CasePayload {
                    digest: d2.clone(),
                    body: input.body.clone(),
                });
                step.push(with(
                    entry(
                        now,
                        &actor.name,
                        CaseState::CorrectionIdentified,
                        format!(
                            "transformation {} makes payload {} from {}; {}",
                            input.transformation_version,
                            d2,
                            case.body_sha256,
                            if input.equivalent {
                                "equivalent intent"
                            } else {
                                "NOT equivalent: a new intent, never a replay"
                            }
                        ),
                    ),
                    &[
                        ("correction_version", version.to_string()),
                        ("original_digest", case.body_sha256.clone()),
                        ("transformed_digest", d2.clone()),
                        ("changed_fields", input.changed_fields.join(",")),
                        ("authority", input.authority.clone()),
                        ("equivalent", input.equivalent.to_string()),
                    ],
                ))
                .map_err(case_error)
            },
        )
        .await
    }

    /// Records an isolated test of a correction (sending the fixture first, when asked, to
    /// a queue declared a test sandbox, which the caller may send to). A pass on this
    /// case's exact payload is evidence (`correction_isolated`), not recovery; a pass on
    /// another fixture leaves the case where it was.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id))]
    pub async fn test_case(
        &self,
        id: &str,
        input: TestInput,
        actor: &Actor,
    ) -> BrokerResult<CaseView> {
        check_text("evidence", &input.evidence, true)?;
        let case = self.for_owner(id, actor).await?;
        let data = CaseData::of(&case);
        let Some(latest) = data.correction() else {
            return Err(conflict(
                "no_correction",
                format!("case {id} has no correction to test"),
            ));
        };
        let version = input.correction_version.unwrap_or(latest.version);
        if !data.corrections.iter().any(|c| c.version == version) {
            return Err(BrokerError::invalid(
                "correction_version",
                format!("case {id} has no correction {version}"),
            ));
        }
        let sink: EntityName = input
            .destination
            .parse()
            .map_err(|e| BrokerError::invalid("destination", format!("{e}")))?;
        let forwarded = data
            .route
            .as_ref()
            .map(|r| r.destination.clone())
            .unwrap_or_default();
        if sink == case.queue || sink.as_str() == forwarded {
            return Err(BrokerError::invalid(
                "destination",
                "an isolated test runs away from the live path: not the case's queue or its dead-letter queue",
            ));
        }
        if input.send {
            // A test send writes to its destination: the caller must be allowed to send
            // there, and the destination must be declared a sandbox, never a live queue.
            self.authorize(actor, Operation::Send, Some(sink.as_str()))
                .await?;
            let sandbox = match self.inner.store.get_queue(&sink).await {
                Ok(q) => q.policy.test_sandbox,
                Err(StoreError::QueueNotFound { .. }) => false,
                Err(e) => return Err(e.into()),
            };
            if !sandbox {
                return Err(BrokerError::invalid(
                    "destination",
                    format!(
                        "{sink} is not a test sandbox: a test sends only to a queue whose policy says `test_sandbox: true`"
                    ),
                ));
            }
        }
        // A transformation in force that fails the destination's validation is never
        // tested (checked again now: the rule may have come after it was recorded).
        if data.transformations.last().is_some() {
            let record = match self
                .inner
                .store
                .get_dead_letter(&case.queue, &case.record_id)
                .await
            {
                Ok(r) => Some(r),
                Err(StoreError::DeadLetterNotFound { .. }) => None,
                Err(e) => return Err(e.into()),
            };
            if let Some(f) = self
                .transformation_failure(&case, &data, record.as_ref())
                .await?
            {
                return Err(conflict(
                    "transformation_invalid",
                    format!(
                        "case {id}'s transformation fails the destination's validation ({f}): it is never tested or replayed; record another correction"
                    ),
                ));
            }
        }
        let transformed = data.transformations.last().map(|t| t.digest.clone());
        let fixture = match &input.fixture {
            Some(b) => b.clone(),
            None => match &transformed {
                Some(d) => self.inner.store.case_payload(id, d).await?.ok_or_else(|| {
                    conflict("payload_gone", "the transformation's bytes are gone")
                })?,
                None => self.case_payload(id, None, actor).await?.1,
            },
        };
        let digest = redrive_core::digest::sha256_hex(&fixture);
        let exact = digest == case.body_sha256 || transformed.as_deref() == Some(digest.as_str());
        if input.send {
            let mut props = redrive_core::Properties::new();
            props.insert(
                "redrive-case-test".into(),
                PropertyValue::String(id.to_owned()),
            );
            self.send(
                sink.as_str(),
                vec![Outgoing {
                    message_id: Some(format!("{id}-test-{}", data.tests.len() + 1)),
                    body: fixture,
                    properties: props,
                    message_type: case.message_type.clone(),
                    ..Outgoing::default()
                }],
            )
            .await?;
        }
        self.person_change(id, actor, "case.test", vec![format!("correction={version}"), format!("fixture={digest}"), format!("outcome={:?}", input.outcome).to_lowercase()], true, |_, step, now| {
            step.data.tests.push(IsolatedTest {
                correction_version: version,
                fixture_digest: digest.clone(),
                exact_payload: exact,
                destination: sink.to_string(),
                sent: input.send,
                outcome: input.outcome,
                evidence: input.evidence.clone(),
                actor: actor.name.clone(),
                at_ms: now.as_millis(),
            });
            let fields = [("correction_version", version.to_string()), ("fixture_digest", digest.clone()), ("exact_payload", exact.to_string()), ("destination", sink.to_string())];
            match (input.outcome, exact) {
                (TestOutcome::Pass, true) => {
                    if step.set.state != CaseState::CorrectionIdentified {
                        let c = step.data.corrections.iter().find(|c| c.version == version).cloned();
                        let ident = c.map(|c| c.identity).unwrap_or_default();
                        step.push(entry(now, &actor.name, CaseState::CorrectionIdentified, format!("correction {version} ({ident}) under test"))).map_err(case_error)?;
                    }
                    step.push(with(entry(now, &actor.name, CaseState::CorrectionIsolated, format!("correction {version} passed an isolated test on this exact payload at {sink}: evidence, not recovery — {}", input.evidence)), &fields)).map_err(case_error)
                }
                (TestOutcome::Fail, _) => step.push(with(entry(now, &actor.name, CaseState::FailureClassified, format!("correction {version} failed its isolated test at {sink}: {}", input.evidence)), &fields)).map_err(case_error),
                // A pass on another fixture is kept as a record only.
                (TestOutcome::Pass, false) => Ok(()),
            }
        })
        .await
    }

    /// Asks the effect authority now and records its answer.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id))]
    pub async fn reconcile_case(&self, id: &str, actor: &Actor) -> BrokerResult<CaseView> {
        let case = self.inner.store.get_case(id).await?;
        if let Some(t) = case.m.state.terminal() {
            return Err(conflict(
                "case_closed",
                format!("case {id} is closed ({t})"),
            ));
        }
        let mut step = Step::of(&case);
        let now = self.now();
        let ctx = self.case_context().await?;
        let r = match self
            .reconcile_into(&case, &mut step, now, &actor.name, &ctx)
            .await
        {
            Ok(()) => self.write_step(&case, step).await,
            Err(e) => Err(e),
        };
        let written = self
            .audited(
                actor,
                "case.reconcile",
                Some(case.queue.as_str()),
                vec![id.to_owned()],
                r,
            )
            .await?;
        let advanced = self.advance_case(&written.id).await?;
        self.case_view(advanced).await
    }

    /// Closes a case as `rejected` or `indeterminate` (the terminal states only a person
    /// decides).
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id))]
    pub async fn close_case(
        &self,
        id: &str,
        terminal: case::Terminal,
        evidence: &str,
        actor: &Actor,
    ) -> BrokerResult<CaseView> {
        check_text("evidence", evidence, true)?;
        if !matches!(
            terminal,
            case::Terminal::Rejected | case::Terminal::Indeterminate | case::Terminal::Completed
        ) {
            return Err(BrokerError::invalid(
                "state",
                "a person closes a case rejected, indeterminate, or completed (a type without an effect authority); cancelled and superseded are the producer's word, expired the value window's",
            ));
        }
        let settings = self.case_settings();
        // Completed needs intent-bound evidence: an effect authority gives it where one is
        // registered; without one, the closer attests it, recorded as the binding.
        let case = self.inner.store.get_case(id).await?;
        if terminal == case::Terminal::Completed
            && self
                .authority_for(case.message_type.as_deref())
                .await?
                .is_some()
        {
            return Err(conflict(
                "case_state",
                format!(
                    "an effect authority answers for {}: reconcile instead, its answer completes the case",
                    type_words(&case)
                ),
            ));
        }
        // A close without execution is refused while a replay of the case still waits in
        // its queue: the terminal state would not be true (withdrawn is not an option the
        // broker takes for the owner; the replay settles first).
        let queued = if terminal == case::Terminal::Completed {
            None
        } else {
            self.replay_queued(&CaseData::of(&case)).await?
        };
        self.person_change(
            id,
            actor,
            "case.close",
            vec![format!("state={terminal}")],
            true,
            |case, step, now| {
                if let Some(m) = &queued {
                    return Err(replay_in_flight(&case.id, m, &format!("closed {terminal}")));
                }
                if case.m.state == CaseState::ReplayAdmitted && terminal == case::Terminal::Rejected
                {
                    return Err(conflict(
                        "case_state",
                        "a replay is in flight: observe it or close indeterminate",
                    ));
                }
                if terminal == case::Terminal::Completed {
                    step.push(with(
                        entry(
                            now,
                            &actor.name,
                            CaseState::EffectPresent,
                            format!("the effect exists, attested by {}: {evidence}", actor.name),
                        ),
                        &[("attested_by", actor.name.clone())],
                    ))
                    .map_err(case_error)?;
                    if let Some(last) = step
                        .data
                        .replays
                        .last_mut()
                        .filter(|r| r.status == ReplayStatus::InFlight)
                    {
                        last.status = ReplayStatus::Completed;
                    }
                    let e = with(
                        entry(
                            now,
                            &actor.name,
                            CaseState::Completed,
                            "completed on attested effect evidence",
                        ),
                        &[("binding", evidence.to_owned())],
                    );
                    return self.close_into(step, e, case, &settings, now);
                }
                let e = entry(now, &actor.name, terminal.into(), evidence.to_owned());
                self.close_into(step, e, case, &settings, now)
            },
        )
        .await
    }

    /// The owner's decision on an overdue case: archive, delete, or extend its review.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id))]
    pub async fn review_case(
        &self,
        id: &str,
        decision: ReviewDecision,
        policy: &str,
        actor: &Actor,
    ) -> BrokerResult<CaseView> {
        check_text("policy", policy, true)?;
        if let ReviewDecision::Extend(ms) = decision
            && (ms == 0 || ms > MAX_EXTEND_MS)
        {
            return Err(BrokerError::invalid(
                "extend_ms",
                format!("must be between 1 and {MAX_EXTEND_MS}"),
            ));
        }
        let settings = self.case_settings();
        let name = match &decision {
            ReviewDecision::Archive => "archive".to_owned(),
            ReviewDecision::Delete => "delete".to_owned(),
            ReviewDecision::Extend(ms) => format!("extend:{ms}"),
        };
        // Archive and delete close the case: refused while a replay of it still waits in
        // its queue.
        let queued = match decision {
            ReviewDecision::Extend(_) => None,
            _ => {
                let case = self.inner.store.get_case(id).await?;
                self.replay_queued(&CaseData::of(&case)).await?
            }
        };
        self.person_change(
            id,
            actor,
            "case.review",
            vec![format!("decision={name}"), format!("policy={policy}")],
            true,
            |case, step, now| {
                if let Some(m) = &queued {
                    return Err(replay_in_flight(
                        &case.id,
                        m,
                        &format!("closed by a review {name}"),
                    ));
                }
                if case.m.review_deadline > now {
                    return Err(conflict(
                        "case_not_due",
                        format!(
                            "case {} is not due for review until {}",
                            case.id,
                            case.m.review_deadline.to_rfc3339()
                        ),
                    ));
                }
                step.data.reviews.push(ReviewRecord {
                    decision: name.clone(),
                    policy: policy.to_owned(),
                    actor: actor.name.clone(),
                    at_ms: now.as_millis(),
                });
                match decision {
                    ReviewDecision::Extend(ms) => {
                        step.set.review_deadline =
                            now.plus_millis(i64::try_from(ms).unwrap_or(i64::MAX));
                        step.data.escalated_for = None;
                        step.push(with(
                            entry(
                                now,
                                &actor.name,
                                CaseState::Retained,
                                format!(
                                    "review extended under policy {policy} to {}",
                                    step.set.review_deadline.to_rfc3339()
                                ),
                            ),
                            &[("policy", policy.to_owned())],
                        ))
                        .map_err(case_error)?;
                        step.set.next_check_at = Some(step.set.review_deadline);
                        Ok(())
                    }
                    ReviewDecision::Archive => {
                        step.archive_record = true;
                        let e = with(
                            entry(
                                now,
                                &actor.name,
                                CaseState::Indeterminate,
                                format!("unresolved at review: archived under policy {policy}"),
                            ),
                            &[("policy", policy.to_owned()), ("review", "archive".into())],
                        );
                        self.close_into(step, e, case, &settings, now)
                    }
                    ReviewDecision::Delete => {
                        let e = with(
                            entry(
                                now,
                                &actor.name,
                                CaseState::Indeterminate,
                                format!(
                                    "unresolved at review: payload deleted under policy {policy}"
                                ),
                            ),
                            &[("policy", policy.to_owned()), ("review", "delete".into())],
                        );
                        self.close_into(step, e, case, &settings, now)?;
                        step.set.payload_until = Some(now);
                        Ok(())
                    }
                }
            },
        )
        .await
    }

    /// Admits one replay of a case by its owner: the effect is reconciled now, every gate
    /// must pass, then the payload (or its equivalent transformation) goes to the case's
    /// queue as `<id>|<n>` and the case waits for its effect.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id))]
    pub async fn replay_case(&self, id: &str, actor: &Actor) -> BrokerResult<CaseView> {
        let case = self.for_owner(id, actor).await?;
        // Reconcile now, not at planning time.
        if self
            .authority_for(case.message_type.as_deref())
            .await?
            .is_some()
        {
            self.reconcile_case(id, actor).await?;
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

    /// [`Broker::prepare_replay`] on top of a step already prepared (a reconciliation
    /// written with the admission, in one write).
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
                    .inner
                    .store
                    .get_dead_letter(&case.queue, &case.record_id)
                    .await?;
                &fetched
            }
        };
        let (body, digest) = match data.transformations.last() {
            Some(t) if t.equivalent => (
                self.inner
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
            return Err(match r {
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
                case::AdmissionRefusal::ReplayQueued => replay_in_flight(
                    &case.id,
                    queued.as_deref().unwrap_or_default(),
                    "replayed again",
                ),
            });
        }
        let (base, n) = redrive_core::id::split_replay_count(&record.message_id);
        let message_id = format!("{base}|{}", n + 1);
        if let Some(lease) = &a.lease {
            step.set.lease = Some(lease.clone());
        }
        if step.set.state != CaseState::ReplayEligible
            && step
                .push(entry(
                    now,
                    a.actor,
                    CaseState::ReplayEligible,
                    "every gate passes at admission",
                ))
                .is_err()
        {
            step.push(entry(
                now,
                a.actor,
                CaseState::IntentActive,
                "the intent is active and inside its value window at admission",
            ))
            .map_err(case_error)?;
            step.push(entry(
                now,
                a.actor,
                CaseState::ReplayEligible,
                "every gate passes at admission",
            ))
            .map_err(case_error)?;
        }
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
        let mut props = record.properties.clone();
        props.insert(
            ORIGINAL_ID_PROPERTY.into(),
            PropertyValue::String(base.to_owned()),
        );
        props.insert(
            REPLAYED_FROM_PROPERTY.into(),
            PropertyValue::String(record.id.clone()),
        );
        let outgoing = Outgoing {
            message_id: Some(message_id.clone()),
            body,
            content_type: record.content_type.clone(),
            properties: props,
            correlation_id: record.correlation_id.clone(),
            session_id: record.session_id.clone(),
            message_type: record.message_type.clone(),
            intent: record.intent.clone(),
            valid_until: record.valid_until,
            ..Outgoing::default()
        };
        Ok((step, message_id, outgoing))
    }

    /// Sends an admitted replay to `destination`; a send that fails stops the case's replay
    /// (`replay_stopped`, the error as evidence) and is returned.
    pub(crate) async fn send_replay(
        &self,
        written: &CaseRecord,
        destination: &EntityName,
        outgoing: Outgoing,
    ) -> BrokerResult<()> {
        let Err(e) = self.send(destination.as_str(), vec![outgoing]).await else {
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

    /// The entity scope a producer's word on an intent is for: the queue it names (the
    /// caller must produce to it), or else the one scope the caller may produce to (`*`
    /// for an unscoped producer or an admin). Refused, and audited, when the caller may not
    /// produce to the named queue or to anything; a caller producing to several scopes
    /// names the queue (400).
    async fn intent_scope(&self, queue: Option<&str>, actor: &Actor) -> BrokerResult<Scope> {
        if let Some(q) = queue {
            let name: EntityName = q
                .parse()
                .map_err(|e| BrokerError::invalid("queue", format!("{e}")))?;
            self.authorize(actor, Operation::UpdateIntent, Some(name.as_str()))
                .await?;
            return Ok(Scope::Entity(name.to_string()));
        }
        if actor.permits(Operation::UpdateIntent, Some(EVERY_ENTITY)) {
            return Ok(Scope::All);
        }
        let mut scopes: Vec<Scope> = actor
            .grants
            .iter()
            .filter(|g| g.role == Role::Producer)
            .map(|g| g.scope.clone())
            .collect();
        scopes.sort();
        scopes.dedup();
        match scopes.len() {
            0 => {
                self.authorize(actor, Operation::UpdateIntent, Some(EVERY_ENTITY))
                    .await?;
                Err(BrokerError::invalid("queue", "no entity to speak for"))
            }
            1 => Ok(scopes.remove(0)),
            _ => Err(BrokerError::invalid(
                "queue",
                format!(
                    "this token may produce to {}: name the queue the word is for",
                    scopes
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    /// A producer's cancel or supersede of an intent, for the entities it may produce to
    /// (the queue it names, or else its one producer scope): the open cases of the intent
    /// on those entities close without execution, and no other. The first word on an
    /// intent for entities stands (a different later one for the same entities, or for
    /// fewer, is refused); the word is kept with its entity, actor and time, and audited
    /// with its entity.
    #[tracing::instrument(level = "debug", skip_all, fields(intent = %intent_id))]
    pub async fn update_intent(
        &self,
        intent_id: &str,
        status: IntentStatus,
        superseded_by: Option<&str>,
        reason: Option<&str>,
        queue: Option<&str>,
        actor: &Actor,
    ) -> BrokerResult<IntentOutcome> {
        check_text("intent_id", intent_id, true)?;
        if intent_id.len() > 256 {
            return Err(BrokerError::invalid("intent_id", "at most 256 bytes"));
        }
        if let Some(r) = reason {
            check_text("reason", r, false)?;
        }
        if let Some(b) = superseded_by {
            check_text("by", b, true)?;
        }
        match (status, superseded_by) {
            (IntentStatus::Superseded, None) => {
                return Err(BrokerError::invalid(
                    "by",
                    "a superseded intent names the intent that replaces it",
                ));
            }
            (IntentStatus::Superseded, Some(b))
                if b == intent_id || b.is_empty() || b.len() > 256 =>
            {
                return Err(BrokerError::invalid(
                    "by",
                    "another intent id, at most 256 bytes",
                ));
            }
            _ => {}
        }
        let scope = self.intent_scope(queue, actor).await?;
        let entity = scope.to_string();
        let wanted = IntentRecord {
            intent_id: intent_id.to_owned(),
            entity: entity.clone(),
            status,
            superseded_by: superseded_by.map(str::to_owned),
            reason: reason.map(str::to_owned),
            actor: actor.name.clone(),
            at: self.now(),
        };
        // A word said earlier for entities that include these stands for them too: the
        // oldest word covering a case's queue is the one its case takes.
        let earlier = self
            .inner
            .store
            .intent_words(intent_id)
            .await?
            .into_iter()
            .find(|w| w.entity.parse::<Scope>().is_ok_and(|s| s.includes(&scope)));
        let stored = match earlier {
            Some(w) => Ok(w),
            None => self.inner.store.put_intent(&wanted).await,
        };
        let action = match status {
            IntentStatus::Cancelled => "intent.cancel",
            IntentStatus::Superseded => "intent.supersede",
        };
        // A different word already stands: refused, and audited as that refusal.
        let stored = stored.map_err(BrokerError::from).and_then(|w| {
            if w.status != status || w.superseded_by != wanted.superseded_by {
                Err(conflict(
                    "intent_decided",
                    format!(
                        "intent {intent_id} was {} already for {}",
                        w.status.as_str(),
                        w.entity
                    ),
                ))
            } else {
                Ok(w)
            }
        });
        let stored = self
            .audited(
                actor,
                action,
                Some(&entity),
                vec![intent_id.to_owned(), format!("entity={entity}")],
                stored,
            )
            .await?;
        let open = self
            .inner
            .store
            .list_cases(&CaseQuery {
                intent_id: Some(intent_id.to_owned()),
                open: true,
                limit: redrive_store::MAX_CASE_PAGE,
                ..CaseQuery::default()
            })
            .await?;
        let mut closed = Vec::new();
        for c in open.iter().filter(|c| scope.covers(c.queue.as_str())) {
            let after = self.advance_case(&c.id).await?;
            if after.m.state.terminal().is_some() {
                closed.push(after.id);
            }
        }
        Ok(IntentOutcome {
            intent: stored,
            closed,
        })
    }

    /// Every word producers said about an intent, oldest first (each for its entities).
    pub async fn intent_words(&self, intent_id: &str) -> BrokerResult<Vec<IntentRecord>> {
        Ok(self.inner.store.intent_words(intent_id).await?)
    }

    /// Registers (or replaces) the effect authority of a message type.
    #[tracing::instrument(level = "debug", skip_all, fields(message_type = %message_type))]
    pub async fn put_effect_authority(
        &self,
        message_type: &str,
        url: &str,
        timeout_ms: Option<u64>,
        actor: &Actor,
    ) -> BrokerResult<EffectAuthority> {
        redrive_core::register::check_type(message_type)
            .map_err(|e| BrokerError::invalid("message_type", e.to_string()))?;
        let timeout_ms = timeout_ms.unwrap_or(effect::DEFAULT_TIMEOUT_MS);
        effect::check(url, timeout_ms)?;
        // The push network policy applies to authorities too: refused now, not at every
        // lookup.
        self.push_network()
            .check_url(url)
            .await
            .map_err(|f| BrokerError::EndpointForbidden {
                endpoint: url.to_owned(),
                why: f.to_string(),
            })?;
        let a = EffectAuthority {
            message_type: message_type.to_owned(),
            url: url.to_owned(),
            timeout_ms,
            updated_at: self.now(),
        };
        let r = self
            .inner
            .store
            .put_effect_authority(&a)
            .await
            .map(|()| a.clone());
        self.audited(
            actor,
            "effect_authority.put",
            None,
            vec![message_type.to_owned(), format!("url={url}")],
            r.map_err(Into::into),
        )
        .await
    }

    /// Removes the effect authority of a message type; whether there was one.
    #[tracing::instrument(level = "debug", skip_all, fields(message_type = %message_type))]
    pub async fn delete_effect_authority(
        &self,
        message_type: &str,
        actor: &Actor,
    ) -> BrokerResult<bool> {
        let r = self.inner.store.delete_effect_authority(message_type).await;
        self.audited(
            actor,
            "effect_authority.delete",
            None,
            vec![message_type.to_owned()],
            r.map_err(Into::into),
        )
        .await
    }

    /// Every effect authority.
    pub async fn list_effect_authorities(&self) -> BrokerResult<Vec<EffectAuthority>> {
        Ok(self.inner.store.list_effect_authorities().await?)
    }

    /// Registers the authorities of the configuration (at start); returns how many.
    pub async fn apply_effect_authorities(
        &self,
        list: &[(String, String, Option<u64>)],
    ) -> BrokerResult<usize> {
        let actor = Actor::system("config");
        for (t, url, timeout) in list {
            self.put_effect_authority(t, url, *timeout, &actor).await?;
        }
        Ok(list.len())
    }
}

/// The decisions a step of the broker's records, for the audit log: a closing, an
/// escalation, a stopped replay, a repaired record (`state=<state>`, `repair=archive_record`).
/// The fields of a case's `failure_classified` entry at its opening: the reason and the
/// observation, bound to the consumer and rule version that applied an application's
/// reason when it named them.
fn classified_fields(case: &CaseRecord, observed: String) -> Vec<(&'static str, String)> {
    let mut fields = vec![("reason", case.reason.clone()), ("observation", observed)];
    if let Some(c) = &case.consumer {
        fields.push(("consumer", c.clone()));
    }
    if let Some(v) = &case.rule_version {
        fields.push(("rule_version", v.clone()));
    }
    fields
}

fn decisions(step: &Step) -> Vec<String> {
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

/// Whether the case's route was found misconfigured (its dead-letter queue still missing).
fn route_misconfigured(data: &CaseData) -> bool {
    data.route
        .as_ref()
        .is_some_and(|r| r.check == RouteCheck::Misconfigured)
}

/// The destination's validation of bytes replayed from `record` (its format and content
/// type; opaque bytes when the record is gone).
fn validate_for(
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
fn replay_in_flight(id: &str, message_id: &str, what: &str) -> BrokerError {
    conflict(
        "replay_in_flight",
        format!(
            "case {id} has a replay in flight ({message_id} still waits in its queue): it cannot be {what} until that replay settles (consumed, dead-lettered again, or its effect observed)"
        ),
    )
}

/// `message type "x"`, or `a message without a type` (for texts).
fn type_words(case: &CaseRecord) -> String {
    core_step::type_words(case.queue.as_str(), case.message_type.as_deref())
}
