//! What a person does on a case: claim, release, note, diagnose, correct, transform, test,
//! reconcile, close, review. Each is audited and followed by the advance.

use redrive_core::access::Operation;
use redrive_core::case::{self, CaseState};
use redrive_core::id::CaseId;
use redrive_core::{EntityName, PropertyValue, Timestamp};
use redrive_store::{CasePayload, CaseRecord, StoreError};

use super::data::{
    CaseData, Correction, CorrectionKind, Diagnosis, IsolatedTest, Note, ReplayStatus,
    ReviewRecord, TestOutcome, TransformationRecord,
};
use super::{MAX_CASE_LEASE_MS, MAX_CHANGED_FIELDS, MAX_EXTEND_MS, MAX_TEXT_LEN};
use crate::{Actor, BrokerError, BrokerResult, Cases, Outgoing};

use super::advance::Step;
use super::refusal::{case_error, claimed, conflict, type_words};
use super::replay::{replay_in_flight, validate_for};
use super::view::CaseView;
use redrive_core::case::step::{entry, with};

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

pub(crate) fn check_text(field: &str, s: &str, required: bool) -> BrokerResult<()> {
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

impl Cases {
    /// Loads a case for a person's change: open, and leased by `actor` unless `claim`.
    pub(crate) async fn for_owner(&self, id: &str, actor: &Actor) -> BrokerResult<CaseRecord> {
        let case = self.ctx.store.get_case(id).await?;
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
    pub(crate) async fn person_change<F>(
        &self,
        id: &str,
        actor: &Actor,
        action: &str,
        targets: Vec<String>,
        need_owner: bool,
        build: F,
    ) -> BrokerResult<CaseView>
    where
        F: FnMut(&CaseRecord, &mut Step, Timestamp) -> BrokerResult<()>,
    {
        self.person_change_in(None, id, actor, action, targets, need_owner, build)
            .await
    }

    /// [`Cases::person_change`] as one item of a case group's decision: every timeline
    /// entry it appends, and its audit entry, name the group.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn person_change_in<F>(
        &self,
        group: Option<&str>,
        id: &str,
        actor: &Actor,
        action: &str,
        mut targets: Vec<String>,
        need_owner: bool,
        mut build: F,
    ) -> BrokerResult<CaseView>
    where
        F: FnMut(&CaseRecord, &mut Step, Timestamp) -> BrokerResult<()>,
    {
        if let Some(g) = group {
            targets.push(format!("group={g}"));
        }
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
                self.ctx.store.get_case(id).await?
            };
            queue = Some(case.queue.clone());
            let mut step = Step::of(&case);
            let now = self.now();
            if let Err(e) = build(&case, &mut step, now) {
                result = Err(e);
                break;
            }
            if let Some(g) = group {
                for e in &mut step.append {
                    e.fields.insert("group".to_owned(), g.to_owned());
                }
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
            .ctx
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
    pub async fn claim_case(
        &self,
        id: &CaseId,
        lease_ms: Option<u64>,
        actor: &Actor,
    ) -> BrokerResult<CaseView> {
        let id = id.as_str();
        self.claim_in(id, lease_ms, actor, None).await
    }

    /// [`Cases::claim_case`], as one item of case group `group` when given.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id, queue, message_type))]
    pub(crate) async fn claim_in(
        &self,
        id: &str,
        lease_ms: Option<u64>,
        actor: &Actor,
        group: Option<&str>,
    ) -> BrokerResult<CaseView> {
        self.authorize_case(id, actor, Operation::WorkCases).await?;
        let ms = lease_ms.unwrap_or(self.case_settings().default_lease_ms);
        if ms == 0 || ms > MAX_CASE_LEASE_MS {
            return Err(BrokerError::invalid(
                "lease_ms",
                format!("must be between 1 and {MAX_CASE_LEASE_MS}"),
            ));
        }
        self.person_change_in(
            group,
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
                if let Some(g) = group {
                    step.data.notes.push(Note {
                        text: format!("claimed with case group {g}"),
                        actor: actor.name.clone(),
                        at_ms: now.as_millis(),
                    });
                }
                Ok(())
            },
        )
        .await
    }

    /// Releases `actor`'s claim on a case.
    pub async fn release_case(&self, id: &CaseId, actor: &Actor) -> BrokerResult<CaseView> {
        let id = id.as_str();
        self.release_in(id, actor, None).await
    }

    /// [`Cases::release_case`], as one item of case group `group` when given.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id, queue, message_type))]
    pub(crate) async fn release_in(
        &self,
        id: &str,
        actor: &Actor,
        group: Option<&str>,
    ) -> BrokerResult<CaseView> {
        self.authorize_case(id, actor, Operation::WorkCases).await?;
        self.person_change_in(
            group,
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
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id, queue, message_type))]
    pub async fn note_case(
        &self,
        id: &CaseId,
        text: &str,
        actor: &Actor,
    ) -> BrokerResult<CaseView> {
        let id = id.as_str();
        self.authorize_case(id, actor, Operation::WorkCases).await?;
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
    pub async fn diagnose_case(
        &self,
        id: &CaseId,
        hypothesis: &str,
        disconfirming: &str,
        actor: &Actor,
    ) -> BrokerResult<CaseView> {
        let id = id.as_str();
        self.diagnose_in(id, hypothesis, disconfirming, actor, None)
            .await
    }

    /// [`Cases::diagnose_case`], as one item of case group `group` when given.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id, queue, message_type))]
    pub(crate) async fn diagnose_in(
        &self,
        id: &str,
        hypothesis: &str,
        disconfirming: &str,
        actor: &Actor,
        group: Option<&str>,
    ) -> BrokerResult<CaseView> {
        self.authorize_case(id, actor, Operation::WorkCases).await?;
        check_text("hypothesis", hypothesis, true)?;
        check_text("disconfirming_evidence", disconfirming, true)?;
        self.person_change_in(
            group,
            id,
            actor,
            "case.diagnose",
            vec![],
            true,
            |_, step, now| {
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
            },
        )
        .await
    }

    /// Records a correction: a versioned change that claims to address a failure shape.
    pub async fn correct_case(
        &self,
        id: &CaseId,
        kind: CorrectionKind,
        identity: &str,
        addresses: &str,
        actor: &Actor,
    ) -> BrokerResult<CaseView> {
        let id = id.as_str();
        self.correct_in(id, kind, identity, addresses, actor, None)
            .await
    }

    /// [`Cases::correct_case`], as one item of case group `group` when given.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id, queue, message_type))]
    pub(crate) async fn correct_in(
        &self,
        id: &str,
        kind: CorrectionKind,
        identity: &str,
        addresses: &str,
        actor: &Actor,
        group: Option<&str>,
    ) -> BrokerResult<CaseView> {
        self.authorize_case(id, actor, Operation::WorkCases).await?;
        check_text("identity", identity, true)?;
        check_text("addresses", addresses, true)?;
        self.person_change_in(
            group,
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

    /// The largest payload a transformation of case `id` may carry, for `actor` who may
    /// work the case: what its queue takes. Asked before the transformation's body is
    /// read, so that no more than that is read.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id, queue, message_type))]
    pub async fn case_transform_limit(&self, id: &CaseId, actor: &Actor) -> BrokerResult<u32> {
        let id = id.as_str();
        let case = self
            .authorized_case(id, actor, Operation::WorkCases)
            .await?;
        self.case_message_limit(&case.queue).await
    }

    /// The largest body a replay of a case of `queue` may carry: the queue's
    /// `max_message_size` (the default policy's when the queue is gone, where nothing can be
    /// replayed anyway). Bounds a transformation, before its request body is read too.
    pub(crate) async fn case_message_limit(&self, queue: &EntityName) -> BrokerResult<u32> {
        match self.ctx.store.get_queue(queue).await {
            Ok(q) => Ok(q.policy.max_message_size),
            Err(StoreError::QueueNotFound { .. }) => {
                Ok(redrive_core::QueuePolicy::default().max_message_size)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Judges a transformation's bytes against the validation of what goes to the case's
    /// queue ([`case::judge_transformation`]).
    async fn judge_transformation(
        &self,
        case: &CaseRecord,
        input: &TransformInput,
    ) -> BrokerResult<case::Transformation> {
        let record = self.case_record(case).await?;
        case::judge_transformation(validate_for(record.as_ref(), &input.body), input.equivalent)
            .map_err(|f| {
                BrokerError::invalid(
                    f.field.clone(),
                    format!(
                        "{} — the validation applied to what goes to queue {}; a transformation that fails it is not recorded",
                        f.rule, case.queue
                    ),
                )
            })
    }

    /// Records a payload transformation: a new payload identity kept with the case (the
    /// original stays as it is), and the correction it stands for.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id, queue, message_type))]
    pub async fn transform_case(
        &self,
        id: &CaseId,
        input: TransformInput,
        actor: &Actor,
    ) -> BrokerResult<CaseView> {
        let id = id.as_str();
        self.authorize_case(id, actor, Operation::WorkCases).await?;
        check_transform_input(&input)?;
        let case = self.ctx.store.get_case(id).await?;
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
        self.judge_transformation(&case, &input).await?;
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

    /// The sink of an isolated test: away from the live path (not the case's queue or its
    /// dead-letter queue) and, when the broker sends the fixture, a test sandbox the caller
    /// may send to.
    async fn test_sink(
        &self,
        case: &CaseRecord,
        data: &CaseData,
        input: &TestInput,
        actor: &Actor,
    ) -> BrokerResult<EntityName> {
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
            self.may_test_send(actor, &sink).await?;
        }
        Ok(sink)
    }

    /// Whether `actor` may send an isolated test to `sink`: a test send writes to its
    /// destination, so the caller must be allowed to send there, and the destination
    /// must be declared a sandbox (`test_sandbox: true`), never a live queue.
    pub(super) async fn may_test_send(&self, actor: &Actor, sink: &EntityName) -> BrokerResult<()> {
        self.broker
            .authorize(actor, Operation::Send, Some(sink.as_str()))
            .await?;
        let sandbox = match self.ctx.store.get_queue(sink).await {
            Ok(q) => q.policy.test_sandbox,
            Err(StoreError::QueueNotFound { .. }) => false,
            Err(e) => return Err(e.into()),
        };
        if sandbox {
            Ok(())
        } else {
            Err(BrokerError::invalid(
                "destination",
                format!(
                    "{sink} is not a test sandbox: a test sends only to a queue whose policy says `test_sandbox: true`"
                ),
            ))
        }
    }

    /// Records an isolated test of a correction (sending the fixture first, when asked, to
    /// a queue declared a test sandbox, which the caller may send to). A pass on this
    /// case's exact payload is evidence (`correction_isolated`), not recovery; a pass on
    /// another fixture leaves the case where it was.
    pub async fn test_case(
        &self,
        id: &CaseId,
        input: TestInput,
        actor: &Actor,
    ) -> BrokerResult<CaseView> {
        let id = id.as_str();
        self.test_in(id, input, actor, None).await
    }

    /// [`Cases::test_case`], as one item of case group `group` when given.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id, queue, message_type))]
    pub(crate) async fn test_in(
        &self,
        id: &str,
        input: TestInput,
        actor: &Actor,
        group: Option<&str>,
    ) -> BrokerResult<CaseView> {
        self.authorize_case(id, actor, Operation::WorkCases).await?;
        // The exact payload is read for the test: the caller must be allowed to read it.
        if input.fixture.is_none() {
            self.authorize_case(id, actor, Operation::ReadCasePayload)
                .await?;
        }
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
        let sink = self.test_sink(&case, &data, &input, actor).await?;
        // A transformation in force that fails the destination's validation is never
        // tested (checked again now: the rule may have come after it was recorded).
        if data.transformations.last().is_some() {
            let record = match self
                .ctx
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
                Some(d) => self.ctx.store.case_payload(id, d).await?.ok_or_else(|| {
                    conflict("payload_gone", "the transformation's bytes are gone")
                })?,
                None => self.read_payload(id, None, actor).await?.1,
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
            self.broker
                .send(
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
        self.person_change_in(group, id, actor, "case.test", vec![format!("correction={version}"), format!("fixture={digest}"), format!("outcome={:?}", input.outcome).to_lowercase()], true, |_, step, now| {
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
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id, queue, message_type))]
    pub async fn reconcile_case(&self, id: &CaseId, actor: &Actor) -> BrokerResult<CaseView> {
        let id = id.as_str();
        self.reconcile(id, actor).await
    }

    /// [`Cases::reconcile_case`] once the actor is authorized (a replay reconciles first).
    pub(crate) async fn reconcile(&self, id: &str, actor: &Actor) -> BrokerResult<CaseView> {
        let case = self.ctx.store.get_case(id).await?;
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
            .ctx
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
    pub async fn close_case(
        &self,
        id: &CaseId,
        terminal: case::Terminal,
        evidence: &str,
        actor: &Actor,
    ) -> BrokerResult<CaseView> {
        let id = id.as_str();
        self.close_in(id, terminal, evidence, actor, None).await
    }

    /// [`Cases::close_case`], as one item of case group `group` when given.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id, queue, message_type))]
    pub(crate) async fn close_in(
        &self,
        id: &str,
        terminal: case::Terminal,
        evidence: &str,
        actor: &Actor,
        group: Option<&str>,
    ) -> BrokerResult<CaseView> {
        self.authorize_case(id, actor, Operation::WorkCases).await?;
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
        let case = self.ctx.store.get_case(id).await?;
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
        self.person_change_in(
            group,
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
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id, queue, message_type))]
    pub async fn review_case(
        &self,
        id: &CaseId,
        decision: ReviewDecision,
        policy: &str,
        actor: &Actor,
    ) -> BrokerResult<CaseView> {
        let id = id.as_str();
        self.authorize_case(id, actor, Operation::WorkCases).await?;
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
                let case = self.ctx.store.get_case(id).await?;
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
}

/// The named fields of a transformation: non-empty texts within bounds, 1 to
/// [`MAX_CHANGED_FIELDS`] changed fields.
fn check_transform_input(input: &TransformInput) -> BrokerResult<()> {
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
    Ok(())
}
