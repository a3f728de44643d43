//! `/v1/case-groups`: case groups — the cases of one queue worked as one (create, list,
//! show, and claim, release, diagnose, correct, test and close them by one decision).
//!
//! A group's entity is its queue, which the path does not name: the route table admits
//! any holder of the operation's role (`crate::access::ROUTES`), and the broker checks the
//! role on the group's queue once it has read the group (a test of exact payloads needs
//! `payload-reader` there too). Each route is one broker call answering the whole group:
//! its decisions, its members as they are now, and each member's outcome of the decision
//! just taken.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use redrive_api::case::{
    CaseGroup, CaseGroupDecision, CaseGroupList, CaseGroupOutcome, CaseGroupSummary, ClaimCase,
    CloseCase, CorrectCase, CreateCaseGroup, DiagnoseCase, TestCaseGroup,
};
use redrive_broker::BrokerError;
use redrive_broker::cases::{
    CaseGroup as Group, GroupAction, GroupDecision, GroupSelection, GroupView,
};
use redrive_core::id::GroupId;
use redrive_core::{EntityName, Timestamp};
use serde::Deserialize;

use super::cases::{correction_kind, summary, test_outcome, text};
use crate::AppState;
use crate::access::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery, OptionalApiJson, problem_for};
use crate::wire::time_in;

/// The case group a path names: a malformed id is an invalid `group` (400), parsed where
/// the broker is called, after the handler's own checks of the request.
fn group_id(id: &str) -> Result<GroupId, ApiError> {
    id.parse::<GroupId>()
        .map_err(|e| ApiError::from(BrokerError::from(e)))
}

fn t(ts: Timestamp) -> String {
    ts.to_rfc3339()
}

fn selection_out(s: &GroupSelection) -> CreateCaseGroup {
    CreateCaseGroup {
        queue: s.queue.clone(),
        reason: s.reason.clone(),
        message_type: s.message_type.clone(),
        from: s.from_ms.map(|ms| t(Timestamp(ms))),
        to: s.to_ms.map(|ms| t(Timestamp(ms))),
        signature: s.signature.clone(),
        intent_prefix: s.intent_prefix.clone(),
    }
}

fn decision_out(d: &GroupDecision) -> CaseGroupDecision {
    CaseGroupDecision {
        action: d.action.clone(),
        actor: d.actor.clone(),
        at: t(Timestamp(d.at_ms)),
        fields: d.fields.clone(),
        applied: d.applied,
        refused: d.refused,
    }
}

fn group_out(v: GroupView, now: Timestamp) -> CaseGroup {
    let g = &v.group;
    let mut by_state: BTreeMap<String, u64> = BTreeMap::new();
    for c in &v.members {
        *by_state.entry(c.m.state.to_string()).or_default() += 1;
    }
    CaseGroup {
        id: g.id.clone(),
        queue: g.queue.to_string(),
        selection: selection_out(&g.selection),
        created_by: g.created_by.clone(),
        created_at: t(g.created_at),
        closed_at: g.closed_at.map(t),
        size: g.case_ids.len(),
        by_state,
        cases: v
            .members
            .iter()
            .map(|c| summary(c, super::cases::listed_next(c), now))
            .collect(),
        decisions: g.decisions.iter().map(decision_out).collect(),
        outcomes: v
            .outcomes
            .into_iter()
            .map(|o| match o.result {
                Ok(view) => CaseGroupOutcome {
                    case_id: o.case_id,
                    ok: true,
                    state: Some(view.case.m.state.to_string()),
                    next: Some(view.next),
                    code: None,
                    detail: None,
                },
                Err(e) => {
                    let p = problem_for(&e);
                    let code = match p.extra.get("reason").and_then(|r| r.as_str()) {
                        Some(r) => format!("{}:{r}", p.code),
                        None => p.code.clone(),
                    };
                    CaseGroupOutcome {
                        case_id: o.case_id,
                        ok: false,
                        state: None,
                        next: None,
                        code: Some(code),
                        detail: p.detail,
                    }
                }
            })
            .collect(),
    }
}

fn summary_out(g: &Group) -> CaseGroupSummary {
    CaseGroupSummary {
        id: g.id.clone(),
        queue: g.queue.to_string(),
        selection: selection_out(&g.selection),
        created_by: g.created_by.clone(),
        created_at: t(g.created_at),
        closed_at: g.closed_at.map(t),
        size: g.case_ids.len(),
        decisions: g.decisions.len(),
    }
}

fn answer(s: &AppState, v: GroupView) -> Json<CaseGroup> {
    Json(group_out(v, s.broker.clock().now()))
}

async fn create(
    State(s): State<AppState>,
    Caller(actor): Caller,
    ApiJson(req): ApiJson<CreateCaseGroup>,
) -> Result<(StatusCode, Json<CaseGroup>), ApiError> {
    let selection = GroupSelection {
        queue: req.queue,
        reason: text("reason", req.reason)?,
        message_type: text("type", req.message_type)?,
        from_ms: time_in("from", req.from)?.map(|t| t.as_millis()),
        to_ms: time_in("to", req.to)?.map(|t| t.as_millis()),
        signature: text("signature", req.signature)?,
        intent_prefix: text("intent_prefix", req.intent_prefix)?,
    };
    let v = s
        .broker
        .cases()
        .create_case_group(selection, &actor)
        .await?;
    Ok((StatusCode::CREATED, answer(&s, v)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    queue: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
}

async fn list(
    State(s): State<AppState>,
    Caller(actor): Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<CaseGroupList>, ApiError> {
    let queue: Option<EntityName> = text("queue", q.queue)?
        .map(|n| n.parse().map_err(BrokerError::from))
        .transpose()?;
    let limit = q.limit.unwrap_or(100);
    let cursor = text("cursor", q.cursor)?;
    let groups = s
        .broker
        .cases()
        .case_groups(queue.as_ref(), cursor.as_deref(), limit, &actor)
        .await?;
    let next_cursor = (groups.len() == limit as usize)
        .then(|| groups.last().map(|g| g.id.clone()))
        .flatten();
    Ok(Json(CaseGroupList {
        groups: groups.iter().map(summary_out).collect(),
        next_cursor,
    }))
}

async fn show(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<Json<CaseGroup>, ApiError> {
    let v = s.broker.cases().case_group(&group_id(&id)?, &actor).await?;
    Ok(answer(&s, v))
}

async fn decide(
    s: &AppState,
    id: &str,
    action: GroupAction,
    actor: &redrive_broker::Actor,
) -> Result<Json<CaseGroup>, ApiError> {
    let v = s
        .broker
        .cases()
        .decide_case_group(&group_id(id)?, action, actor)
        .await?;
    Ok(answer(s, v))
}

async fn claim(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    OptionalApiJson(req): OptionalApiJson<ClaimCase>,
) -> Result<Json<CaseGroup>, ApiError> {
    let lease_ms = req.lease_ms;
    decide(&s, &id, GroupAction::Claim { lease_ms }, &actor).await
}

async fn release(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<Json<CaseGroup>, ApiError> {
    decide(&s, &id, GroupAction::Release, &actor).await
}

async fn diagnose(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<DiagnoseCase>,
) -> Result<Json<CaseGroup>, ApiError> {
    let action = GroupAction::Diagnose {
        hypothesis: req.hypothesis,
        disconfirming: req.disconfirming_evidence,
    };
    decide(&s, &id, action, &actor).await
}

async fn correct(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<CorrectCase>,
) -> Result<Json<CaseGroup>, ApiError> {
    let action = GroupAction::Correct {
        kind: correction_kind(&req.kind)?,
        identity: req.identity,
        addresses: req.addresses,
    };
    decide(&s, &id, action, &actor).await
}

/// The most members a group test names as failed (a group holds at most as many).
const MAX_FAILED: usize = redrive_broker::cases::MAX_GROUP_CASES;

async fn test(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<TestCaseGroup>,
) -> Result<Json<CaseGroup>, ApiError> {
    let outcome = test_outcome(&req.outcome)?;
    if req.failed.len() > MAX_FAILED {
        return Err(BrokerError::invalid("failed", format!("at most {MAX_FAILED} cases")).into());
    }
    let action = GroupAction::Test {
        destination: req.destination,
        send: req.send,
        outcome,
        failed: req.failed,
        evidence: req.evidence,
    };
    decide(&s, &id, action, &actor).await
}

async fn close(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    ApiJson(req): ApiJson<CloseCase>,
) -> Result<Json<CaseGroup>, ApiError> {
    let terminal = match req.state.as_str() {
        "rejected" | "indeterminate" => req.state.parse().map_err(|_| {
            ApiError::from(BrokerError::invalid("state", "rejected or indeterminate"))
        })?,
        other => {
            return Err(BrokerError::invalid(
                "state",
                format!("{other:?} is not rejected or indeterminate"),
            )
            .into());
        }
    };
    let action = GroupAction::Close {
        terminal,
        evidence: req.evidence,
    };
    decide(&s, &id, action, &actor).await
}

/// The case-group routes (small bodies).
pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/case-groups", get(list).post(create))
        .route("/v1/case-groups/{id}", get(show))
        .route("/v1/case-groups/{id}/claim", post(claim))
        .route("/v1/case-groups/{id}/release", post(release))
        .route("/v1/case-groups/{id}/diagnosis", post(diagnose))
        .route("/v1/case-groups/{id}/corrections", post(correct))
        .route("/v1/case-groups/{id}/tests", post(test))
        .route("/v1/case-groups/{id}/close", post(close))
}
