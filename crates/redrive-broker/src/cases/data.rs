//! What a case holds beyond its stored columns ([`CaseData`], the `data` JSON), and the
//! pure functions that turn a case and what the broker knows now into
//! [`redrive_core::case::CaseFacts`].

use std::collections::BTreeMap;

use redrive_core::Timestamp;
use redrive_core::case::{
    Authorization, Budget, CaseFacts, CaseState, CorrectionStatus, Decision, DestinationCheck,
    EffectAnswer, EffectLookup, IntentStatus, OrderingContext, PayloadCheck, RepetitionPolicy,
    ReplayProgress, RouteCheck, RouteRule, RouteTarget, Transformation, ValidationFailure,
};
use redrive_core::dead_letter::EvidenceQuality;
use redrive_store::{CaseRecord, IntentRecord};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Everything a case holds that is not a column: written by the broker, kept as JSON.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CaseData {
    /// What the route verification found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteEvidence>,
    /// The node's labels at verification (region, tenant…): the source identity.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The payload's schema version (its `dataschema` or `schema_version` property).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<String>,
    /// What another delivery of the intent may do, from the register (and whether an
    /// effect authority answers for the type) when the case was last written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition: Option<RepetitionPolicy>,
    /// Diagnostic context copied from the payload and properties under the entity's
    /// redaction policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Redacted>,
    /// The last effect authority answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<EffectRecord>,
    /// Diagnoses, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diagnoses: Vec<Diagnosis>,
    /// Corrections, oldest first; `version` counts from 1.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub corrections: Vec<Correction>,
    /// Payload transformations, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transformations: Vec<TransformationRecord>,
    /// Isolated tests, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tests: Vec<IsolatedTest>,
    /// Replays admitted, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replays: Vec<ReplayRecord>,
    /// Free notes, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<Note>,
    /// Review decisions taken on the case, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reviews: Vec<ReviewRecord>,
    /// The next decision as last computed (what the case waits for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// What the escalation named, while escalated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalated_for: Option<String>,
    /// The last delivery of the dead letter by hand that the case follows (see
    /// `cases::by_hand`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_hand: Option<super::by_hand::HandRecord>,
}

/// What the route verification found when the case was opened (and re-checked).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteEvidence {
    /// When it was checked (ms).
    pub checked_at_ms: i64,
    /// Verified, or misconfigured (the destination is still missing).
    pub check: RouteCheck,
    /// The rule the record was routed under; absent when nothing names one (an
    /// indeterminate route).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<RouteRule>,
    /// Whether the configured destination took it.
    pub target: RouteTarget,
    /// The destination that did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_target: Option<String>,
    /// Where the item waits: `own_store`, or the dead-letter queue it was forwarded to.
    pub destination: String,
    /// The attempt history the record may claim (none for a rule applied before ordinary
    /// delivery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// How far that evidence goes.
    #[serde(with = "quality")]
    pub quality: EvidenceQuality,
    /// The version of the routing policy in force when it was dead-lettered; absent
    /// when nothing says (an import whose source did not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<u64>,
    /// The consumer that applied an application's reason, when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// The version of that consumer's classification rule, when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_version: Option<String>,
}

mod quality {
    use redrive_core::dead_letter::EvidenceQuality;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(q: &EvidenceQuality, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(q.as_str())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<EvidenceQuality, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// Diagnostic context under a redaction policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Redacted {
    /// The policy's version (a digest of its allowlist).
    pub policy_version: String,
    /// The allowed fields found, by path (`body.<path>` or `properties.<name>`).
    pub fields: BTreeMap<String, Value>,
}

/// An effect authority's answer as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectRecord {
    /// Its answer.
    pub answer: EffectAnswer,
    /// The evidence it gave (the intent-to-effect binding when present), or why it could
    /// not be asked.
    pub evidence: String,
    /// The authority asked.
    pub authority: String,
    /// When (ms).
    pub at_ms: i64,
}

impl EffectRecord {
    /// The record as a step reads it.
    pub fn seen(&self) -> redrive_core::case::step::EffectSeen {
        redrive_core::case::step::EffectSeen {
            answer: self.answer,
            evidence: self.evidence.clone(),
            authority: self.authority.clone(),
            at: Timestamp(self.at_ms),
        }
    }

    /// The record of an answer a step recorded.
    pub fn of(seen: redrive_core::case::step::EffectSeen) -> EffectRecord {
        EffectRecord {
            answer: seen.answer,
            evidence: seen.evidence,
            authority: seen.authority,
            at_ms: seen.at.as_millis(),
        }
    }
}

/// A diagnosis: a hypothesis apart from the observation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diagnosis {
    /// The hypothesis.
    pub hypothesis: String,
    /// What would disconfirm it (or did).
    pub disconfirming_evidence: String,
    /// Who proposed it.
    pub owner: String,
    /// When (ms).
    pub at_ms: i64,
}

/// The kind of a correction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CorrectionKind {
    /// Code.
    Code,
    /// Configuration.
    Config,
    /// Data.
    Data,
    /// A permission.
    Permission,
    /// A dependency.
    Dependency,
    /// A policy.
    Policy,
}

impl CorrectionKind {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            CorrectionKind::Code => "code",
            CorrectionKind::Config => "config",
            CorrectionKind::Data => "data",
            CorrectionKind::Permission => "permission",
            CorrectionKind::Dependency => "dependency",
            CorrectionKind::Policy => "policy",
        }
    }
}

/// A recorded, versioned change that claims to address a failure shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Correction {
    /// Its version on the case, from 1.
    pub version: u32,
    /// Its kind.
    pub kind: CorrectionKind,
    /// Its identity (a commit, a config version, a ticket).
    pub identity: String,
    /// The failure shape it claims to address.
    pub addresses: String,
    /// Who recorded it.
    pub actor: String,
    /// When (ms).
    pub at_ms: i64,
}

/// A payload transformation: a new payload identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransformationRecord {
    /// SHA-256 of the original bytes it was made from (the case's payload identity, which
    /// stays as it was).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub original_digest: String,
    /// SHA-256 of the transformed bytes (kept with the case).
    pub digest: String,
    /// Their size.
    pub size: u64,
    /// The deterministic transformation's version.
    pub transformation_version: String,
    /// Every changed field.
    pub changed_fields: Vec<String>,
    /// The authority that permits the change.
    pub authority: String,
    /// Whether the intent stays equivalent (claimed under that authority).
    pub equivalent: bool,
    /// Who recorded it.
    pub actor: String,
    /// When (ms).
    pub at_ms: i64,
}

/// The outcome of an isolated test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TestOutcome {
    /// The fixture was handled.
    Pass,
    /// It failed.
    Fail,
}

/// An isolated test of a correction against a fixture at a destination.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IsolatedTest {
    /// The correction tested.
    pub correction_version: u32,
    /// SHA-256 of the fixture's bytes.
    pub fixture_digest: String,
    /// Whether the fixture is this case's exact payload (or its transformation).
    pub exact_payload: bool,
    /// Where it ran (an isolated sink).
    pub destination: String,
    /// Whether the broker sent the fixture there.
    pub sent: bool,
    /// The outcome.
    pub outcome: TestOutcome,
    /// The evidence of the outcome.
    pub evidence: String,
    /// Who recorded it.
    pub actor: String,
    /// When (ms).
    pub at_ms: i64,
}

/// Where a replay stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplayStatus {
    /// Delivered to the destination; its effect not yet observed.
    InFlight,
    /// It repeated the failure (dead-lettered again).
    Failed,
    /// Stopped.
    Stopped,
    /// Its effect was established.
    Completed,
}

/// One replay admitted for a case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayRecord {
    /// The replay's message id (`<id>|<n>`).
    pub message_id: String,
    /// Where it went.
    pub destination: String,
    /// The payload identity replayed.
    pub digest: String,
    /// The correction it was admitted under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correction_version: Option<u32>,
    /// Who admitted it.
    pub owner: String,
    /// Where it stands.
    pub status: ReplayStatus,
    /// When it was admitted (ms).
    pub at_ms: i64,
}

/// A note on a case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    /// The text.
    pub text: String,
    /// Who wrote it.
    pub actor: String,
    /// When (ms).
    pub at_ms: i64,
}

/// A review decision on an overdue case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewRecord {
    /// `archive`, `delete` or `extend`.
    pub decision: String,
    /// The policy it was taken under.
    pub policy: String,
    /// Who took it.
    pub actor: String,
    /// When (ms).
    pub at_ms: i64,
}

impl CaseData {
    /// The data of a stored case (an empty object reads as the default).
    pub fn of(case: &CaseRecord) -> CaseData {
        serde_json::from_value(case.m.data.clone()).unwrap_or_default()
    }

    /// As stored.
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or_else(|_| Value::Object(Default::default()))
    }

    /// The latest correction.
    pub fn correction(&self) -> Option<&Correction> {
        self.corrections.last()
    }

    /// Where the latest correction stands: its tests decide, the last one counting.
    pub fn correction_status(&self) -> CorrectionStatus {
        let Some(c) = self.correction() else {
            return CorrectionStatus::None;
        };
        let tests: Vec<&IsolatedTest> = self
            .tests
            .iter()
            .filter(|t| t.correction_version == c.version)
            .collect();
        if tests
            .iter()
            .any(|t| t.outcome == TestOutcome::Pass && t.exact_payload)
            && tests.last().is_some_and(|t| t.outcome == TestOutcome::Pass)
        {
            return CorrectionStatus::PassedExactPayload;
        }
        match tests.last() {
            None => CorrectionStatus::Untested,
            Some(t) if t.outcome == TestOutcome::Fail => CorrectionStatus::TestFailed,
            Some(_) => CorrectionStatus::PassedOtherFixture,
        }
    }

    /// The transformation in force (the latest).
    pub fn transformation(&self) -> Transformation {
        match self.transformations.last() {
            None => Transformation::None,
            Some(t) if t.equivalent => Transformation::Equivalent,
            Some(_) => Transformation::NotEquivalent,
        }
    }

    /// Where the case's replay stands.
    pub fn replay_progress(&self) -> ReplayProgress {
        let Some(last) = self.replays.last() else {
            return ReplayProgress::NotStarted;
        };
        match last.status {
            ReplayStatus::InFlight => ReplayProgress::InFlight,
            ReplayStatus::Failed => ReplayProgress::Failed,
            // A correction recorded after the stop starts the path again.
            ReplayStatus::Stopped => {
                if self.correction().is_some_and(|c| c.at_ms > last.at_ms) {
                    ReplayProgress::NotStarted
                } else {
                    ReplayProgress::Stopped
                }
            }
            ReplayStatus::Completed => ReplayProgress::NotStarted,
        }
    }
}

/// What the broker knows now about a case beyond its record: the inputs of [`facts`].
#[derive(Debug, Clone)]
pub struct Known {
    /// The dead-letter record still exists, with its area.
    pub record_area: Option<redrive_core::Area>,
    /// The record's replay judgement found its payload schema-invalid.
    pub schema_invalid: bool,
    /// The entity's retention rule bounds kept payloads.
    pub retention_bounded: bool,
    /// The producer's word on the intent.
    pub intent: Option<IntentRecord>,
    /// An effect authority is registered for the case's message type.
    pub has_authority: bool,
    /// The repetition policy from the register now.
    pub repetition: RepetitionPolicy,
    /// The case's origin (the queue it is replayed to) exists.
    pub destination_exists: bool,
    /// Open cases of the same session on the same queue dead-lettered before this one.
    pub blocked_by: u64,
    /// The message id of the case's last replay while it still waits in (or is locked on)
    /// its destination queue.
    pub replay_queued: Option<String>,
    /// Where the transformation in force fails the destination's validation (checked
    /// again on every read: a transformation is never eligible while it fails).
    pub transformation_failure: Option<ValidationFailure>,
}

/// When a case's value window ends: the message's `valid_until`, else, for a message
/// dead-lettered because its time to live ran out, the dead letter itself (the time to
/// live was its window).
pub fn value_window_end(case: &CaseRecord, data: &CaseData) -> Option<Timestamp> {
    let rule = data.route.as_ref().map_or(case.route_rule, |r| r.rule);
    // An expiry ends the value window at the dead letter if the message had no
    // `valid_until` of its own: the time to live was its window.
    case.valid_until.or(match rule {
        Some(RouteRule::Expiry) => Some(case.dead_lettered_at),
        _ => None,
    })
}

/// The validation the broker applies to bytes going to a case's destination as a record
/// of `format` with `content_type`, the same automatic replay's judgement applies: a
/// record of events (an Event Grid dead-letter blob) must be a list of valid CloudEvent
/// 1.0 or Event Grid events (`SchemaInvalid` otherwise); a structured-mode CloudEvent
/// message must be a valid CloudEvent 1.0; other bytes are opaque to the broker. A failure
/// names the field (`body[0].eventTime`, `body.time`) and the rule.
pub fn destination_validation(
    format: redrive_core::RecordFormat,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<(), ValidationFailure> {
    use redrive_events::cloudevent::{CloudEvent, EventError, STRUCTURED};
    use redrive_events::dead_letter_events::{SchemaError, parse_events};
    fn of_event(prefix: &str, e: &EventError) -> ValidationFailure {
        match e {
            EventError::Invalid { name, why } => ValidationFailure {
                field: format!("{prefix}.{name}"),
                rule: why.clone(),
            },
            EventError::Missing(name) => ValidationFailure {
                field: format!("{prefix}.{name}"),
                rule: "a required attribute, must be present and not empty".to_owned(),
            },
            other => ValidationFailure {
                field: prefix.to_owned(),
                rule: other.to_string(),
            },
        }
    }
    match format {
        redrive_core::RecordFormat::Events => {
            parse_events(body).map(|_| ()).map_err(|e| match &e {
                SchemaError::Event { index, error } => of_event(&format!("body[{index}]"), error),
                SchemaError::Message(error) => of_event("body", error),
                other => ValidationFailure {
                    field: "body".to_owned(),
                    rule: other.to_string(),
                },
            })
        }
        redrive_core::RecordFormat::Message
            if content_type.is_some_and(|c| c.starts_with(STRUCTURED)) =>
        {
            CloudEvent::from_slice(body)
                .map(|_| ())
                .map_err(|e| of_event("body", &e))
        }
        redrive_core::RecordFormat::Message => Ok(()),
    }
}

/// The facts of a case at `now` for [`redrive_core::case::decide`].
pub fn facts(case: &CaseRecord, data: &CaseData, known: &Known) -> CaseFacts {
    let m = &case.m;
    let effect = match (&data.effect, known.has_authority) {
        (Some(e), _) => EffectLookup::Answered {
            answer: e.answer,
            evidence: e.evidence.clone(),
        },
        (None, true) => EffectLookup::NotAsked,
        (None, false) => EffectLookup::NoAuthority,
    };
    let value_window_end = value_window_end(case, data);
    let transformation = match data.transformation() {
        Transformation::None => Transformation::None,
        _ if known.transformation_failure.is_some() => Transformation::FailsValidation,
        t => t,
    };
    CaseFacts {
        closed: m.state.terminal(),
        payload_preserved: m.payload_deleted_at.is_none() && known.record_area.is_some(),
        route: m.route,
        route_check: data
            .route
            .as_ref()
            .map_or(RouteCheck::Unverified, |r| r.check),
        retention_bounded: known.retention_bounded,
        intent: match known.intent.as_ref().map(|i| i.status) {
            None => IntentStatus::Active,
            Some(redrive_store::IntentStatus::Cancelled) => IntentStatus::Cancelled,
            Some(redrive_store::IntentStatus::Superseded) => IntentStatus::Superseded,
        },
        value_window_end,
        effect,
        repetition: known.repetition,
        diagnosed: !data.diagnoses.is_empty(),
        correction: data.correction_status(),
        transformation,
        authorization: Authorization::Current,
        payload_check: if known.schema_invalid {
            PayloadCheck::Invalid
        } else {
            PayloadCheck::Valid
        },
        ordering: match (&case.session_id, known.blocked_by) {
            (None, _) => OrderingContext::NotRequired,
            (Some(_), 0) => OrderingContext::InContext,
            (Some(_), _) => OrderingContext::Missing,
        },
        destination: if known.destination_exists {
            DestinationCheck::Valid
        } else {
            DestinationCheck::Missing
        },
        lease: super::by_hand::facts_lease(m.lease.as_ref(), data),
        // One case's replay is one item: bounded by itself.
        budget: Budget::Available,
        replay: data.replay_progress(),
        replay_queued: known.replay_queued.is_some(),
        record_live: known.record_area == Some(redrive_core::Area::Live),
        review_deadline: m.review_deadline,
    }
}

/// A decision as words: its name and what it names (`escalate` / `effect_authority`).
pub fn describe(d: &Decision) -> String {
    d.words()
}

/// The allowlisted diagnostic context of a payload and its properties: each allowed
/// path (`body.a.b` into a JSON body, `properties.name`) that is present, nothing else.
/// A body that is not JSON contributes nothing.
pub fn redact(
    body: &[u8],
    properties: &redrive_core::Properties,
    allow: &[String],
) -> BTreeMap<String, Value> {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    let mut out = BTreeMap::new();
    for path in allow {
        if let Some(rest) = path.strip_prefix("body.") {
            let mut v = json.as_ref();
            for part in rest.split('.') {
                v = v.and_then(|v| v.get(part));
            }
            if let Some(v) = v {
                out.insert(path.clone(), v.clone());
            }
        } else if let Some(name) = path.strip_prefix("properties.")
            && let Some(v) = properties.get(name)
        {
            out.insert(path.clone(), serde_json::to_value(v).unwrap_or(Value::Null));
        }
    }
    out
}

/// The version of a redaction policy: the first 12 hex digits of the SHA-256 of its
/// sorted allowlist, so equal policies have equal versions on every node.
pub fn redaction_version(allow: &[String]) -> String {
    let mut sorted: Vec<&str> = allow.iter().map(String::as_str).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let digest = redrive_core::digest::sha256_hex(sorted.join("\n").as_bytes());
    digest[..12].to_owned()
}

/// The state a case waiting on `decision` is put in when it is not there already:
/// `retained` (with its owner and review time) or `escalated`.
pub fn waiting_state(decision: &Decision) -> Option<CaseState> {
    redrive_core::case::step::waiting_state(decision)
}

/// Whether `t` is at or after `now`.
pub fn not_before(t: Timestamp, now: Timestamp) -> bool {
    t >= now
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test(version: u32, exact: bool, outcome: TestOutcome) -> IsolatedTest {
        IsolatedTest {
            correction_version: version,
            fixture_digest: "f".into(),
            exact_payload: exact,
            destination: "sink".into(),
            sent: false,
            outcome,
            evidence: String::new(),
            actor: "a".into(),
            at_ms: 0,
        }
    }

    fn correction(version: u32, at_ms: i64) -> Correction {
        Correction {
            version,
            kind: CorrectionKind::Code,
            identity: format!("c{version}"),
            addresses: "parse".into(),
            actor: "a".into(),
            at_ms,
        }
    }

    #[test]
    fn only_a_pass_on_the_exact_payload_of_the_latest_correction_counts() {
        let mut d = CaseData::default();
        assert_eq!(d.correction_status(), CorrectionStatus::None);
        d.corrections.push(correction(1, 0));
        assert_eq!(d.correction_status(), CorrectionStatus::Untested);
        d.tests.push(test(1, false, TestOutcome::Pass));
        assert_eq!(d.correction_status(), CorrectionStatus::PassedOtherFixture);
        d.tests.push(test(1, true, TestOutcome::Fail));
        assert_eq!(d.correction_status(), CorrectionStatus::TestFailed);
        d.tests.push(test(1, true, TestOutcome::Pass));
        assert_eq!(d.correction_status(), CorrectionStatus::PassedExactPayload);
        // A new correction needs its own test.
        d.corrections.push(correction(2, 5));
        assert_eq!(d.correction_status(), CorrectionStatus::Untested);
    }

    #[test]
    fn redaction_keeps_only_allowed_fields() {
        let body = br#"{"order":{"id":"o-1","card":"4111"},"amount":5}"#;
        let mut props = redrive_core::Properties::new();
        props.insert(
            "tenant".into(),
            redrive_core::PropertyValue::String("t1".into()),
        );
        props.insert(
            "secret".into(),
            redrive_core::PropertyValue::String("s".into()),
        );
        let allow = vec![
            "body.order.id".to_owned(),
            "body.missing".to_owned(),
            "properties.tenant".to_owned(),
        ];
        let out = redact(body, &props, &allow);
        assert_eq!(out.len(), 2);
        assert_eq!(out["body.order.id"], Value::String("o-1".into()));
        assert!(out.contains_key("properties.tenant"));
        assert!(redact(b"not json", &props, &["body.a".to_owned()]).is_empty());
    }

    #[test]
    fn equal_allowlists_have_equal_versions() {
        let a = redaction_version(&["b".into(), "a".into()]);
        assert_eq!(a, redaction_version(&["a".into(), "b".into(), "a".into()]));
        assert_ne!(a, redaction_version(&["a".into()]));
        assert_eq!(a.len(), 12);
    }

    #[test]
    fn a_correction_after_a_stopped_replay_starts_the_path_again() {
        let mut d = CaseData::default();
        d.replays.push(ReplayRecord {
            message_id: "m|1".into(),
            destination: "q".into(),
            digest: "x".into(),
            correction_version: Some(1),
            owner: "a".into(),
            status: ReplayStatus::Stopped,
            at_ms: 10,
        });
        d.corrections.push(correction(1, 5));
        assert_eq!(d.replay_progress(), ReplayProgress::Stopped);
        d.corrections.push(correction(2, 20));
        assert_eq!(d.replay_progress(), ReplayProgress::NotStarted);
    }
}
