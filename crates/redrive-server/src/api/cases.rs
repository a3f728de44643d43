//! `/v1/cases`: recovery cases (list, search, count, show, work them, replay one),
//! `/v1/intents/{id}` (a producer's cancel or supersede) and `/v1/effect-authorities`.
//!
//! A case's entity is its queue, which the path does not name: the route table admits
//! any holder of the operation's role (`crate::access::ROUTES`), and each case operation
//! of the broker checks the role on the case's queue once it has read the case (a listing
//! shows only the cases of queues the caller may read). Each route is one broker call,
//! which answers with the whole case; a transformation asks its queue's limit first, to
//! bound the body it reads. Payload bytes are a separate read (`payload-reader`), audited
//! by the broker; everything that changes a case is audited too.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use redrive_api::ErrorCode;
use redrive_api::case::{
    CancelIntent, Case, CaseCounts, CaseEntry, CaseLease, CasePage, CasePayload, CaseSummary,
    ClaimCase, CloseCase, CorrectCase, DiagnoseCase, EffectAuthority, EffectAuthorityList, Intent,
    IntentWord, NoteCase, ReviewCase, SetEffectAuthority, SupersedeIntent, TestCase, TransformCase,
};
use redrive_broker::BrokerError;
use redrive_broker::cases::data::{CorrectionKind, TestOutcome};
use redrive_broker::cases::{CaseView, ReviewDecision, TestInput, TransformInput, check_filter};
use redrive_broker::model::{CaseQuery, CaseRecord, IntentRecord, IntentStatus, MAX_CASE_PAGE};
use redrive_core::Timestamp;
use redrive_core::access::Operation;
use redrive_core::case::{CaseState, TimelineEntry};
use redrive_core::id::CaseId;
use serde::Deserialize;

use crate::AppState;
use crate::access::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery, OptionalApiJson, body_within, read_body};
use crate::wire::{body_in, body_out, time_in};

fn t(ts: Timestamp) -> String {
    ts.to_rfc3339()
}

pub(super) fn summary(c: &CaseRecord, next: String, now: Timestamp) -> CaseSummary {
    let m = &c.m;
    CaseSummary {
        id: c.id.clone(),
        record_id: c.record_id.clone(),
        queue: c.queue.to_string(),
        message_id: c.message_id.clone(),
        intent_id: c.intent_id.clone(),
        message_type: c.message_type.clone(),
        session_id: c.session_id.clone(),
        reason: c.reason.clone(),
        description: c.description.clone(),
        signature: redrive_core::case::signature::signature(c.description.as_deref()),
        route: m.route.to_string(),
        evidence_quality: m.evidence_quality.to_string(),
        state: m.state.to_string(),
        next,
        lease: m.lease.as_ref().map(|l| CaseLease {
            owner: l.owner.clone(),
            until: t(l.until),
            live: l.is_live(now),
        }),
        review_deadline: t(m.review_deadline),
        overdue: m.closed_at.is_none() && m.review_deadline <= now,
        dead_lettered_at: t(c.dead_lettered_at),
        opened_at: t(c.opened_at),
        closed_at: m.closed_at.map(t),
        valid_until: c.valid_until.map(t),
        source: m.source.clone(),
        subject: m.subject.clone(),
        payload_sha256: c.body_sha256.clone(),
        payload_size: c.body_size,
        payload_deleted_at: m.payload_deleted_at.map(t),
        delivery_count: c.delivery_count,
        policy_version: c.policy_version,
        route_rule: c.route_rule.map(|r| r.to_string()),
        consumer: c.consumer.clone(),
        rule_version: c.rule_version.clone(),
        version: c.version,
    }
}

pub(super) fn listed_next(c: &CaseRecord) -> String {
    if c.m.state.terminal().is_some() {
        return format!("closed:{}", c.m.state);
    }
    c.m.data
        .get("next")
        .and_then(|v| v.as_str())
        .unwrap_or("verify_route")
        .to_owned()
}

fn entry_out(e: &TimelineEntry) -> CaseEntry {
    CaseEntry {
        at: t(e.at),
        actor: e.actor.clone(),
        state: e.state.to_string(),
        evidence: e.evidence.clone(),
        fields: e.fields.clone(),
    }
}

fn case_out(v: &CaseView, now: Timestamp) -> Case {
    Case {
        summary: summary(&v.case, v.next.clone(), now),
        record: v.case.m.data.clone(),
        timeline: v.timeline.iter().map(entry_out).collect(),
    }
}

/// Answers a case operation with the case as the broker left it (with its timeline).
fn changed(s: &AppState, v: CaseView) -> Json<Case> {
    Json(case_out(&v, s.broker.clock().now()))
}

/// The case a path names. A malformed id names no case: 404 `case_not_found`, as its
/// lookup answers; parsed where the broker is called, so that every refusal the handler
/// makes first comes first, as before.
fn case_id(id: &str) -> Result<CaseId, ApiError> {
    id.parse::<CaseId>()
        .map_err(|e| ApiError::from(BrokerError::from(e)))
}

pub(super) fn text(field: &str, v: Option<String>) -> Result<Option<String>, ApiError> {
    check_filter(field, v.as_deref())?;
    Ok(v)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Search {
    queue: Option<String>,
    reason: Option<String>,
    #[serde(rename = "type")]
    message_type: Option<String>,
    source: Option<String>,
    subject: Option<String>,
    state: Option<String>,
    open: Option<bool>,
    owner: Option<String>,
    overdue: Option<bool>,
    from: Option<String>,
    to: Option<String>,
    evidence_quality: Option<String>,
    q: Option<String>,
    intent: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
}

fn query_of(q: Search, now: Timestamp) -> Result<CaseQuery, ApiError> {
    let states = match text("state", q.state)? {
        None => Vec::new(),
        Some(s) => s
            .split(',')
            .map(|p| {
                p.parse::<CaseState>()
                    .map_err(|e| ApiError::from(BrokerError::invalid("state", e.to_string())))
            })
            .collect::<Result<Vec<_>, _>>()?,
    };
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_CASE_PAGE {
        return Err(BrokerError::invalid("limit", format!("between 1 and {MAX_CASE_PAGE}")).into());
    }
    Ok(CaseQuery {
        queue: text("queue", q.queue)?
            .map(|n| n.parse().map_err(BrokerError::from))
            .transpose()?,
        reason: text("reason", q.reason)?,
        message_type: text("type", q.message_type)?,
        source: text("source", q.source)?,
        subject: text("subject", q.subject)?,
        states,
        open: q.open.unwrap_or(false),
        owner: text("owner", q.owner)?,
        overdue_at: q.overdue.unwrap_or(false).then_some(now),
        since: time_in("from", q.from)?,
        until: time_in("to", q.to)?,
        evidence_quality: text("evidence_quality", q.evidence_quality)?
            .map(|s| {
                s.parse()
                    .map_err(|e| BrokerError::invalid("evidence_quality", format!("{e}")))
            })
            .transpose()?,
        text: text("q", q.q)?,
        intent_id: text("intent", q.intent)?,
        after: text("cursor", q.cursor)?,
        limit,
    })
}

async fn list(
    State(s): State<AppState>,
    Caller(actor): Caller,
    ApiQuery(q): ApiQuery<Search>,
) -> Result<Json<CasePage>, ApiError> {
    let now = s.broker.clock().now();
    let query = query_of(q, now)?;
    let cases = s.broker.cases().list_cases(&query, &actor).await?;
    let full = cases.len() == query.limit as usize;
    let next_cursor = full.then(|| cases.last().map(|c| c.id.clone())).flatten();
    Ok(Json(CasePage {
        cases: cases
            .iter()
            .filter(|c| actor.permits(Operation::ReadCases, Some(c.queue.as_str())))
            .map(|c| summary(c, listed_next(c), now))
            .collect(),
        next_cursor,
    }))
}

async fn counts(
    State(s): State<AppState>,
    Caller(actor): Caller,
    ApiQuery(q): ApiQuery<Search>,
) -> Result<Json<CaseCounts>, ApiError> {
    let now = s.broker.clock().now();
    // Counts over every queue need the role on every queue (an unscoped grant).
    let query = query_of(q, now)?;
    let c = s.broker.cases().case_counts(&query, &actor).await?;
    Ok(Json(CaseCounts {
        total: c.total,
        by_reason: c.by_reason,
        by_type: c.by_type,
        by_state: c.by_state,
        oldest_opened_at: c.oldest_opened_at.map(t),
    }))
}

async fn show(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<Json<Case>, ApiError> {
    let v = s.broker.cases().get_case(&case_id(&id)?, &actor).await?;
    Ok(changed(&s, v))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PayloadQuery {
    digest: Option<String>,
}

async fn payload(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<PayloadQuery>,
) -> Result<Json<CasePayload>, ApiError> {
    let (sha256, bytes) = s
        .broker
        .cases()
        .case_payload(&case_id(&id)?, q.digest.as_deref(), &actor)
        .await?;
    let (body, body_encoding) = body_out(&bytes);
    Ok(Json(CasePayload {
        case_id: id,
        sha256,
        body,
        body_encoding,
    }))
}

async fn claim(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    OptionalApiJson(req): OptionalApiJson<ClaimCase>,
) -> Result<Json<Case>, ApiError> {
    let v = s
        .broker
        .cases()
        .claim_case(&case_id(&id)?, req.lease_ms, &actor)
        .await?;
    Ok(changed(&s, v))
}

async fn release(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<Json<Case>, ApiError> {
    let v = s
        .broker
        .cases()
        .release_case(&case_id(&id)?, &actor)
        .await?;
    Ok(changed(&s, v))
}

async fn note(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<NoteCase>,
) -> Result<Json<Case>, ApiError> {
    let v = s
        .broker
        .cases()
        .note_case(&case_id(&id)?, &req.text, &actor)
        .await?;
    Ok(changed(&s, v))
}

async fn diagnose(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<DiagnoseCase>,
) -> Result<Json<Case>, ApiError> {
    let v = s
        .broker
        .cases()
        .diagnose_case(
            &case_id(&id)?,
            &req.hypothesis,
            &req.disconfirming_evidence,
            &actor,
        )
        .await?;
    Ok(changed(&s, v))
}

pub(super) fn correction_kind(s: &str) -> Result<CorrectionKind, ApiError> {
    serde_json::from_value(serde_json::Value::String(s.to_owned())).map_err(|_| {
        BrokerError::invalid(
            "kind",
            format!("{s:?} is not one of code, config, data, permission, dependency, policy"),
        )
        .into()
    })
}

async fn correct(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<CorrectCase>,
) -> Result<Json<Case>, ApiError> {
    let kind = correction_kind(&req.kind)?;
    let v = s
        .broker
        .cases()
        .correct_case(&case_id(&id)?, kind, &req.identity, &req.addresses, &actor)
        .await?;
    Ok(changed(&s, v))
}

/// Room a transformation's request takes beside its body: the named fields (free text
/// of at most 4096 bytes each, up to 256 changed fields) and the body's quotes.
const TRANSFORM_FIELDS_BYTES: usize = 2 * 1024 * 1024;

/// The largest transformation request for a payload of at most `limit` bytes: the payload
/// base64-encoded (a text body of as many bytes is shorter unless it is mostly escapes,
/// which base64 carries instead) and the fields.
fn transform_request_limit(limit: u32) -> usize {
    (limit as usize).div_ceil(3) * 4 + TRANSFORM_FIELDS_BYTES
}

async fn transform(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    request: axum::extract::Request,
) -> Result<Json<Case>, ApiError> {
    // Who may and how much, before a byte of the body is read: the payload of a replay
    // is bounded by the case's queue.
    let limit = s
        .broker
        .cases()
        .case_transform_limit(&case_id(&id)?, &actor)
        .await?;
    let bytes = body_within(request, transform_request_limit(limit)).await?;
    let req: TransformCase = read_body(&bytes)?;
    let body = body_in(req.body, req.body_encoding)?;
    let v = s
        .broker
        .cases()
        .transform_case(
            &case_id(&id)?,
            TransformInput {
                body,
                transformation_version: req.transformation_version,
                changed_fields: req.changed_fields,
                authority: req.authority,
                equivalent: req.equivalent,
                addresses: req.addresses,
            },
            &actor,
        )
        .await?;
    Ok(changed(&s, v))
}

/// A test's outcome word: `pass` or `fail`.
pub(super) fn test_outcome(word: &str) -> Result<TestOutcome, ApiError> {
    match word {
        "pass" => Ok(TestOutcome::Pass),
        "fail" => Ok(TestOutcome::Fail),
        other => {
            Err(BrokerError::invalid("outcome", format!("{other:?} is not pass or fail")).into())
        }
    }
}

async fn test(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<TestCase>,
) -> Result<Json<Case>, ApiError> {
    let outcome = test_outcome(&req.outcome)?;
    let fixture = req
        .fixture
        .map(|f| body_in(f, req.fixture_encoding))
        .transpose()?;
    let v = s
        .broker
        .cases()
        .test_case(
            &case_id(&id)?,
            TestInput {
                correction_version: req.correction_version,
                fixture,
                destination: req.destination,
                send: req.send,
                outcome,
                evidence: req.evidence,
            },
            &actor,
        )
        .await?;
    Ok(changed(&s, v))
}

async fn reconcile(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<Json<Case>, ApiError> {
    let v = s
        .broker
        .cases()
        .reconcile_case(&case_id(&id)?, &actor)
        .await?;
    Ok(changed(&s, v))
}

async fn close(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<CloseCase>,
) -> Result<Json<Case>, ApiError> {
    let terminal = req.state.parse().map_err(|_| {
        ApiError::from(BrokerError::invalid(
            "state",
            format!("{:?} is not rejected or indeterminate", req.state),
        ))
    })?;
    let v = s
        .broker
        .cases()
        .close_case(&case_id(&id)?, terminal, &req.evidence, &actor)
        .await?;
    Ok(changed(&s, v))
}

async fn review(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<ReviewCase>,
) -> Result<Json<Case>, ApiError> {
    let decision = match (req.decision.as_str(), req.extend_ms) {
        ("archive", None) => ReviewDecision::Archive,
        ("delete", None) => ReviewDecision::Delete,
        ("extend", Some(ms)) => ReviewDecision::Extend(ms),
        ("extend", None) => {
            return Err(BrokerError::invalid("extend_ms", "extend needs extend_ms").into());
        }
        ("archive" | "delete", Some(_)) => {
            return Err(BrokerError::invalid("extend_ms", "only extend takes extend_ms").into());
        }
        (other, _) => {
            return Err(BrokerError::invalid(
                "decision",
                format!("{other:?} is not archive, delete or extend"),
            )
            .into());
        }
    };
    let v = s
        .broker
        .cases()
        .review_case(&case_id(&id)?, decision, &req.policy, &actor)
        .await?;
    Ok(changed(&s, v))
}

async fn replay(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<Json<Case>, ApiError> {
    let v = s.broker.cases().replay_case(&case_id(&id)?, &actor).await?;
    Ok(changed(&s, v))
}

fn intent_id(id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > 256 || id.contains('\0') {
        return Err(BrokerError::invalid("id", "an intent id is 1 to 256 bytes").into());
    }
    Ok(())
}

fn word_out(r: &IntentRecord) -> IntentWord {
    IntentWord {
        entity: r.entity.clone(),
        status: r.status.as_str().to_owned(),
        superseded_by: r.superseded_by.clone(),
        reason: r.reason.clone(),
        actor: r.actor.clone(),
        at: t(r.at),
    }
}

fn intent_out(
    id: &str,
    record: Option<&IntentRecord>,
    words: &[IntentRecord],
    cases: Vec<String>,
    closed: Vec<String>,
) -> Intent {
    Intent {
        intent_id: id.to_owned(),
        status: record.map_or("active", |r| r.status.as_str()).to_owned(),
        superseded_by: record.and_then(|r| r.superseded_by.clone()),
        reason: record.and_then(|r| r.reason.clone()),
        actor: record.map(|r| r.actor.clone()),
        at: record.map(|r| t(r.at)),
        entity: record.map(|r| r.entity.clone()),
        words: words.iter().map(word_out).collect(),
        cases,
        closed,
    }
}

async fn get_intent(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<Json<Intent>, ApiError> {
    intent_id(&id)?;
    let v = s.broker.cases().intent_view(&id, &actor).await?;
    Ok(Json(intent_out(
        &id,
        v.words.first(),
        &v.words,
        v.cases,
        Vec::new(),
    )))
}

async fn cancel_intent(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    OptionalApiJson(req): OptionalApiJson<CancelIntent>,
) -> Result<Json<Intent>, ApiError> {
    intent_id(&id)?;
    let out = s
        .broker
        .cases()
        .update_intent(
            &id,
            IntentStatus::Cancelled,
            None,
            req.reason.as_deref(),
            req.queue.as_deref(),
            &actor,
        )
        .await?;
    Ok(word_spoken(&id, out))
}

/// The intent as it stands after a word on it: its words, the cases the caller may read,
/// and the cases the word closed.
fn word_spoken(id: &str, out: redrive_broker::cases::IntentOutcome) -> Json<Intent> {
    Json(intent_out(
        id,
        Some(&out.intent),
        &out.view.words,
        out.view.cases,
        out.closed,
    ))
}

async fn supersede_intent(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<SupersedeIntent>,
) -> Result<Json<Intent>, ApiError> {
    intent_id(&id)?;
    let out = s
        .broker
        .cases()
        .update_intent(
            &id,
            IntentStatus::Superseded,
            Some(&req.by),
            req.reason.as_deref(),
            req.queue.as_deref(),
            &actor,
        )
        .await?;
    Ok(word_spoken(&id, out))
}

fn authority_out(a: &redrive_broker::model::EffectAuthority) -> EffectAuthority {
    EffectAuthority {
        message_type: a.message_type.clone(),
        url: a.url.clone(),
        timeout_ms: a.timeout_ms,
        updated_at: t(a.updated_at),
    }
}

async fn list_authorities(
    State(s): State<AppState>,
) -> Result<Json<EffectAuthorityList>, ApiError> {
    let list = s.broker.cases().list_effect_authorities().await?;
    Ok(Json(EffectAuthorityList {
        authorities: list.iter().map(authority_out).collect(),
    }))
}

async fn put_authority(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(message_type): Path<String>,
    ApiJson(req): ApiJson<SetEffectAuthority>,
) -> Result<Json<EffectAuthority>, ApiError> {
    let a = s
        .broker
        .cases()
        .put_effect_authority(&message_type, &req.url, req.timeout_ms, &actor)
        .await?;
    Ok(Json(authority_out(&a)))
}

async fn delete_authority(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(message_type): Path<String>,
) -> Result<StatusCode, ApiError> {
    if s.broker
        .cases()
        .delete_effect_authority(&message_type, &actor)
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::new(
            ErrorCode::EffectAuthorityNotFound,
            format!("no effect authority is registered for {message_type:?}"),
        ))
    }
}

/// The route that carries a payload (a transformation): its body is bounded by the case's
/// queue in the handler, below the API's largest.
pub(crate) fn payload_router() -> Router<AppState> {
    Router::new().route("/v1/cases/{id}/transformations", post(transform))
}

/// Every other route of cases, intents and effect authorities (small bodies).
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/cases", get(list))
        .route("/v1/cases/counts", get(counts))
        .route("/v1/cases/{id}", get(show))
        .route("/v1/cases/{id}/payload", get(payload))
        .route("/v1/cases/{id}/claim", post(claim))
        .route("/v1/cases/{id}/release", post(release))
        .route("/v1/cases/{id}/notes", post(note))
        .route("/v1/cases/{id}/diagnosis", post(diagnose))
        .route("/v1/cases/{id}/corrections", post(correct))
        .route("/v1/cases/{id}/tests", post(test))
        .route("/v1/cases/{id}/reconcile", post(reconcile))
        .route("/v1/cases/{id}/close", post(close))
        .route("/v1/cases/{id}/review", post(review))
        .route("/v1/cases/{id}/replay", post(replay))
        .route("/v1/intents/{id}", get(get_intent))
        .route("/v1/intents/{id}/cancel", post(cancel_intent))
        .route("/v1/intents/{id}/supersede", post(supersede_intent))
        .route("/v1/effect-authorities", get(list_authorities))
        .route(
            "/v1/effect-authorities/{type}",
            put(put_authority).delete(delete_authority),
        )
}
