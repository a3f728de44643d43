//! Recovery cases (`/v1/cases`), intents (`/v1/intents`) and effect authorities
//! (`/v1/effect-authorities`).
//!
//! A case's listing shows metadata only; its payload is a separate read
//! (`GET /v1/cases/{id}/payload`, role `payload-reader`, audited).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A case's claim.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CaseLease {
    /// The owner.
    pub owner: String,
    /// When the claim runs out (RFC 3339).
    pub until: String,
    /// Whether it still holds.
    pub live: bool,
}

/// A case in a listing: metadata, never the payload.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CaseSummary {
    /// `case_…`.
    pub id: String,
    /// The dead-letter record it stands for.
    pub record_id: String,
    /// The queue whose dead-letter store holds the record (a subscription's is
    /// `<topic>.<subscription>`).
    pub queue: String,
    /// The original message id.
    pub message_id: String,
    /// The intent: the message's intent id, else its message id.
    pub intent_id: String,
    /// The message type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_type: Option<String>,
    /// The session (ordering scope) the message left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The dead-letter reason code (an observation, not a diagnosis).
    pub reason: String,
    /// The description that came with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The failure signature: the description with ids, numbers and times masked, so
    /// that the cases of one failure shape share it (a case group selects by it).
    #[serde(default)]
    pub signature: String,
    /// `broker_routed`, `application_quarantined` or `route_indeterminate`.
    pub route: String,
    /// `exact`, `approximate`, `incomplete` or `unavailable`.
    pub evidence_quality: String,
    /// The current state (the last timeline entry's).
    pub state: String,
    /// What the case waits for now (`needs_diagnosis`, `escalate:effect_authority`,
    /// `replay_eligible`, `closed:completed`…).
    pub next: String,
    /// The claim, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<CaseLease>,
    /// The review deadline (RFC 3339).
    pub review_deadline: String,
    /// Open and past its review deadline.
    pub overdue: bool,
    /// When the record was dead-lettered.
    pub dead_lettered_at: String,
    /// When the case was opened.
    pub opened_at: String,
    /// When it closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_at: Option<String>,
    /// The value window's end (`valid_until`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<String>,
    /// The event's or message's `source`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The event's or message's `subject`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// SHA-256 of the exact payload bytes (lower-case hex).
    pub payload_sha256: String,
    /// Size of the payload, bytes.
    pub payload_size: u64,
    /// When the payload bytes were deleted under the retention rule (the digest stays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_deleted_at: Option<String>,
    /// The deliveries counted before the dead letter.
    pub delivery_count: u32,
    /// The version of the routing policy in force when it was dead-lettered (for an
    /// import, its source's); absent when nothing says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<u64>,
    /// The rule it was routed under; absent when nothing names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_rule: Option<String>,
    /// The consumer that applied an application's reason, when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// The version of that consumer's classification rule, when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_version: Option<String>,
    /// Incremented by every change.
    pub version: u64,
}

/// One timeline entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CaseEntry {
    /// When (RFC 3339).
    pub at: String,
    /// Who: `broker` or the token's name.
    pub actor: String,
    /// The state it moved the case to.
    pub state: String,
    /// The evidence, in words.
    pub evidence: String,
    /// The evidence, as named fields.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: BTreeMap<String, String>,
}

/// `GET /v1/cases/{id}`: the case, what the broker recorded about it (route evidence,
/// redacted context, effect, diagnoses, corrections, transformations, tests, replays,
/// notes, reviews) and its timeline.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Case {
    /// The metadata.
    #[serde(flatten)]
    pub summary: CaseSummary,
    /// The rest of the case (a JSON object).
    pub record: serde_json::Value,
    /// The append-only timeline, oldest first.
    pub timeline: Vec<CaseEntry>,
}

/// `GET /v1/cases`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CasePage {
    /// The cases, by id.
    pub cases: Vec<CaseSummary>,
    /// The cursor of the next page, if there may be one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `GET /v1/cases/counts`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CaseCounts {
    /// How many match.
    pub total: u64,
    /// By reason code.
    pub by_reason: BTreeMap<String, u64>,
    /// By message type (`""`: none).
    pub by_type: BTreeMap<String, u64>,
    /// By state.
    pub by_state: BTreeMap<String, u64>,
    /// The oldest opening among them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_opened_at: Option<String>,
}

/// `POST /v1/cases/{id}/claim`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ClaimCase {
    /// How long, ms (the node's default, 15 minutes, when absent; at most 24 hours).
    #[serde(default)]
    pub lease_ms: Option<u64>,
}

/// `POST /v1/cases/{id}/notes`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NoteCase {
    /// The note (at most 4096 bytes).
    pub text: String,
}

/// `POST /v1/cases/{id}/diagnosis`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DiagnoseCase {
    /// The hypothesis.
    pub hypothesis: String,
    /// What would disconfirm it (or did).
    pub disconfirming_evidence: String,
}

/// `POST /v1/cases/{id}/corrections`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CorrectCase {
    /// `code`, `config`, `data`, `permission`, `dependency` or `policy`.
    pub kind: String,
    /// Its identity (a commit, a config version, a ticket).
    pub identity: String,
    /// The failure shape it claims to address.
    pub addresses: String,
}

/// `POST /v1/cases/{id}/transformations`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TransformCase {
    /// The transformed bytes.
    pub body: String,
    /// `utf8` (default) or `base64`.
    #[serde(default)]
    pub body_encoding: crate::message::BodyEncoding,
    /// The deterministic transformation's version.
    pub transformation_version: String,
    /// Every changed field.
    pub changed_fields: Vec<String>,
    /// The authority that permits the change.
    pub authority: String,
    /// Whether the intent stays equivalent (a non-equivalent transformation is a new
    /// intent, sent through the ordinary path, never replayed).
    pub equivalent: bool,
    /// The failure shape it addresses.
    pub addresses: String,
}

/// `POST /v1/cases/{id}/tests`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TestCase {
    /// The correction tested (the latest when absent).
    #[serde(default)]
    pub correction_version: Option<u32>,
    /// The fixture's bytes; the case's exact payload (or its latest transformation)
    /// when absent.
    #[serde(default)]
    pub fixture: Option<String>,
    /// `utf8` (default) or `base64`.
    #[serde(default)]
    pub fixture_encoding: crate::message::BodyEncoding,
    /// The isolated sink queue (never the case's queue or its dead-letter queue).
    pub destination: String,
    /// Send the fixture to the sink now.
    #[serde(default)]
    pub send: bool,
    /// `pass` or `fail`.
    pub outcome: String,
    /// The evidence of the outcome.
    pub evidence: String,
}

/// `POST /v1/cases/{id}/close`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CloseCase {
    /// `rejected` or `indeterminate`.
    pub state: String,
    /// The evidence (the policy and the validation failure, or why the effect cannot be
    /// established).
    pub evidence: String,
}

/// `POST /v1/cases/{id}/review`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ReviewCase {
    /// `archive`, `delete` or `extend`.
    pub decision: String,
    /// The policy the decision is taken under.
    pub policy: String,
    /// For `extend`: how much longer, ms (at most 30 days).
    #[serde(default)]
    pub extend_ms: Option<u64>,
}

/// `GET /v1/cases/{id}/payload`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CasePayload {
    /// The case.
    pub case_id: String,
    /// SHA-256 of the bytes.
    pub sha256: String,
    /// The bytes.
    pub body: String,
    /// `utf8` or `base64`.
    pub body_encoding: crate::message::BodyEncoding,
}

/// `POST /v1/intents/{id}/cancel`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CancelIntent {
    /// Why.
    #[serde(default)]
    pub reason: Option<String>,
    /// The queue the word is for (the caller must produce to it); absent: the one scope
    /// the caller may produce to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
}

/// `POST /v1/intents/{id}/supersede`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SupersedeIntent {
    /// The intent that replaces it.
    pub by: String,
    /// Why.
    #[serde(default)]
    pub reason: Option<String>,
    /// The queue the word is for (the caller must produce to it); absent: the one scope
    /// the caller may produce to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
}

/// An intent: what its producer said, and its cases.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Intent {
    /// The intent id.
    pub intent_id: String,
    /// `active` (nothing said), `cancelled` or `superseded`.
    pub status: String,
    /// The intent that replaces it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
    /// Why, as the producer said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who said it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// When.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// The entities the word above holds for: `*`, a queue, or a prefix ending in `*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entity: Option<String>,
    /// Every word on the intent, oldest first, each for its entities (a read shows all of
    /// them; a cancel or supersede answers the word it stored above).
    #[serde(default)]
    pub words: Vec<IntentWord>,
    /// Its cases (that the caller may see), by id.
    pub cases: Vec<String>,
    /// The cases this request closed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub closed: Vec<String>,
}

/// One producer's word on an intent, for the entities it was accepted for.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct IntentWord {
    /// `*`, a queue name, or a name prefix ending in `*`.
    pub entity: String,
    /// `cancelled` or `superseded`.
    pub status: String,
    /// The intent that replaces it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
    /// Why, as the producer said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who said it.
    pub actor: String,
    /// When.
    pub at: String,
}

/// An effect authority.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct EffectAuthority {
    /// The message type it answers for.
    pub message_type: String,
    /// The endpoint.
    pub url: String,
    /// How long an answer may take, ms.
    pub timeout_ms: u64,
    /// When it was registered or changed.
    pub updated_at: String,
}

/// `PUT /v1/effect-authorities/{type}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SetEffectAuthority {
    /// The endpoint (`http://` or `https://`).
    pub url: String,
    /// How long an answer may take, ms (default 5000, at most 60000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// `GET /v1/effect-authorities`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct EffectAuthorityList {
    /// By message type.
    pub authorities: Vec<EffectAuthority>,
}

/// `POST /v1/case-groups`: a group of the open cases of one queue that match every filter
/// given, now (its members are fixed then).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CreateCaseGroup {
    /// The queue whose cases it holds.
    pub queue: String,
    /// With this reason code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Of this message type.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub message_type: Option<String>,
    /// Dead-lettered at or after (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Dead-lettered before (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Whose failure signature (the description with ids, numbers and times masked, as
    /// a case group shows it) is this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Whose intent id starts with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent_prefix: Option<String>,
}

/// A decision taken on a case group.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CaseGroupDecision {
    /// `claim`, `release`, `diagnose`, `correct`, `test` or `close`.
    pub action: String,
    /// Who took it.
    pub actor: String,
    /// When (RFC 3339).
    pub at: String,
    /// What was decided.
    pub fields: std::collections::BTreeMap<String, String>,
    /// Members it was carried out on.
    pub applied: u32,
    /// Members that refused it.
    pub refused: u32,
}

/// One member's outcome of the decision just taken.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CaseGroupOutcome {
    /// The case.
    pub case_id: String,
    /// Whether the decision was carried out on it.
    pub ok: bool,
    /// Its state after (when carried out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Its next decision after (when carried out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// Why it refused: the problem's code and reason (`case_conflict:case_claimed`…).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Why it refused, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A case group: its selection, its decisions, its members as they are now, and — in the
/// answer to a decision — each member's outcome.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CaseGroup {
    /// `grp_…`.
    pub id: String,
    /// The queue whose cases it holds.
    pub queue: String,
    /// How its members were selected.
    pub selection: CreateCaseGroup,
    /// Who created it.
    pub created_by: String,
    /// When (RFC 3339).
    pub created_at: String,
    /// When it was closed (RFC 3339); a closed group takes no decision.
    pub closed_at: Option<String>,
    /// How many members it holds.
    pub size: usize,
    /// Its members by state now.
    pub by_state: std::collections::BTreeMap<String, u64>,
    /// Its members now, by id.
    pub cases: Vec<CaseSummary>,
    /// Its decisions, oldest first.
    pub decisions: Vec<CaseGroupDecision>,
    /// Each member's outcome of the decision this answers (empty for a read).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outcomes: Vec<CaseGroupOutcome>,
}

/// A case group in a listing.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CaseGroupSummary {
    /// `grp_…`.
    pub id: String,
    /// The queue whose cases it holds.
    pub queue: String,
    /// How its members were selected.
    pub selection: CreateCaseGroup,
    /// Who created it.
    pub created_by: String,
    /// When (RFC 3339).
    pub created_at: String,
    /// When it was closed (RFC 3339).
    pub closed_at: Option<String>,
    /// How many members it holds.
    pub size: usize,
    /// How many decisions it holds.
    pub decisions: usize,
}

/// `GET /v1/case-groups`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CaseGroupList {
    /// The groups, by id.
    pub groups: Vec<CaseGroupSummary>,
    /// The cursor of the next page, if there may be one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `POST /v1/case-groups/{id}/tests`: an isolated test of each member's exact payload at
/// one sandbox queue.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TestCaseGroup {
    /// The sandbox queue (a queue declared a test sandbox).
    pub destination: String,
    /// Send each member's exact payload there now.
    #[serde(default)]
    pub send: bool,
    /// `pass` or `fail`: the outcome observed for every member not in `failed`.
    pub outcome: String,
    /// Members whose payload failed the test (their outcome is `fail`).
    #[serde(default)]
    pub failed: Vec<String>,
    /// The evidence of the outcome.
    pub evidence: String,
}
