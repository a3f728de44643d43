//! `/v1/replay`: where each queue's dead letters stand with automatic replay (candidates,
//! failing and flagged records, archived, quarantined by cause). Operator; a listing shows
//! only the queues the caller may read this of.
//!
//! `/v1/replay/plans`: bounded replay plans — the dry run, creation, reading a plan and
//! its items, and the owner's start, pause, resume and cancel. A plan's entity is its
//! queue, which the path does not name: the route table admits any holder of the
//! operation's role (`crate::access::ROUTES`), and each handler checks the role on the
//! plan's queue once the plan is read (a listing shows only plans over queues the caller
//! may read cases of). The broker also holds a change to the plan's owner or an admin.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use redrive_api::replay::{
    CreatePlan, PlanBudget, PlanDependency, PlanItem, PlanItemList, PlanPreview, PlanProgress,
    PlanReading, PlanSelection, PlanSpec, PreviewGate, PreviewItem, ReplayPlan, ReplayPlanBudget,
    ReplayPlanList, ReplayPlanSelection, ReplayStatus, ReplayStatusList, SqsMovePlan,
};
use redrive_broker::model::{
    MAX_PLAN_ITEM_PAGE, MAX_PLAN_PAGE, PlanItemQuery, PlanItemRecord, PlanItemState, PlanKind,
    PlanQuery, PlanStatus,
};
use redrive_broker::{Actor, BrokerError, PlanAction, PlanInput, PlanSelectionInput, PlanView};
use redrive_core::Timestamp;
use redrive_core::access::Operation;
use redrive_core::id::PlanId;
use redrive_core::plan::{BudgetSpec, Dependency};
use serde::Deserialize;

use crate::AppState;
use crate::access::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery};
use crate::wire::{replay_status_out, time_in};

/// Longest plan id, cursor or filter value a request takes, bytes.
const MAX_VALUE_LEN: usize = 256;
/// Plans a listing returns when the caller names no limit.
const DEFAULT_PLAN_PAGE: u32 = 100;
/// Items a read returns when the caller names no limit.
const DEFAULT_PLAN_ITEM_PAGE: u32 = 1_000;

async fn list(
    State(s): State<AppState>,
    Caller(actor): Caller,
) -> Result<Json<ReplayStatusList>, ApiError> {
    let all = s.broker.replay().replay_status(None).await?;
    Ok(Json(ReplayStatusList {
        entities: all
            .iter()
            .filter(|c| actor.permits(Operation::ReadReplays, Some(c.queue.as_str())))
            .map(replay_status_out)
            .collect(),
    }))
}

async fn show(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<ReplayStatus>, ApiError> {
    let counts = s.broker.replay().replay_status(Some(&name)).await?;
    let one = counts
        .iter()
        .find(|c| c.queue.as_str() == name)
        .map(replay_status_out)
        .unwrap_or_else(|| ReplayStatus {
            queue: name,
            ..ReplayStatus::default()
        });
    Ok(Json(one))
}

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/replay", get(list))
        .route("/v1/replay/{name}", get(show))
        .route("/v1/replay/plans/preview", post(preview))
        .route("/v1/replay/plans", post(create).get(list_plans))
        .route("/v1/replay/plans/{id}", get(show_plan))
        .route("/v1/replay/plans/{id}/items", get(plan_items))
        .route("/v1/replay/plans/{id}/start", post(start))
        .route("/v1/replay/plans/{id}/pause", post(pause))
        .route("/v1/replay/plans/{id}/resume", post(resume))
        .route("/v1/replay/plans/{id}/cancel", post(cancel))
}

fn t(ts: Timestamp) -> String {
    ts.to_rfc3339()
}

/// A bounded text value: 1 to [`MAX_VALUE_LEN`] bytes without NUL characters.
fn text(field: &str, v: Option<String>) -> Result<Option<String>, ApiError> {
    match v {
        Some(s) if s.is_empty() || s.len() > MAX_VALUE_LEN || s.contains('\0') => {
            Err(BrokerError::invalid(
                field,
                format!("1 to {MAX_VALUE_LEN} bytes without NUL characters"),
            )
            .into())
        }
        v => Ok(v),
    }
}

/// A plan id from the path: 1 to [`MAX_VALUE_LEN`] bytes without NUL (`id` otherwise, as
/// every bounded value here), then a plan's (`plan_…`, or a move task's `mv_…`): one of
/// another shape names no plan (404 `replay_plan_not_found`, as its lookup answers).
fn plan_id(id: String) -> Result<PlanId, ApiError> {
    let id = text("id", Some(id))?.unwrap_or_default();
    id.parse::<PlanId>()
        .map_err(|e| ApiError::from(BrokerError::from(e)))
}

/// A comma-separated list of names, each parsed.
fn names<T: std::str::FromStr<Err = String>>(
    field: &str,
    v: Option<String>,
) -> Result<Vec<T>, ApiError> {
    match text(field, v)? {
        None => Ok(Vec::new()),
        Some(s) => s
            .split(',')
            .map(|p| {
                p.parse::<T>()
                    .map_err(|e| BrokerError::invalid(field, e).into())
            })
            .collect(),
    }
}

fn limit(v: Option<u32>, default: u32, max: u32) -> Result<u32, ApiError> {
    let l = v.unwrap_or(default);
    if l == 0 || l > max {
        return Err(BrokerError::invalid("limit", format!("between 1 and {max}")).into());
    }
    Ok(l)
}

/// The observed rate of `amount` over a plan's admissions: 0 with fewer than two
/// admissions, or none yet.
fn rate(amount: u64, admitted: u64, started_ms: Option<i64>, last_ms: Option<i64>) -> f64 {
    match (started_ms, last_ms) {
        (Some(s), Some(l)) if admitted >= 2 && l > s => amount as f64 * 1000.0 / (l - s) as f64,
        _ => 0.0,
    }
}

/// A plan as the API shows it: a `cases` plan with its selection and whole budget, an
/// `sqs_move` plan with its task (its budget is items/s only; no owner's lease).
pub(crate) fn plan_out(v: &PlanView) -> ReplayPlan {
    let p = &v.plan;
    let spec = &v.spec;
    let run = &v.run;
    let b = &spec.budget;
    let reading = |r: &redrive_broker::Reading| PlanReading {
        error_rate: r.error_rate,
        latency_ms: r.latency_ms,
    };
    let cases = v.sqs_move.is_none();
    ReplayPlan {
        id: p.id.clone(),
        kind: p.kind.to_string(),
        queue: p.queue.clone(),
        destination: match &v.sqs_move {
            Some(m) => m.destination.clone(),
            None => Some(p.destination.clone()),
        },
        owner: p.owner_name.clone(),
        status: p.m.status.to_string(),
        stop_reason: p.m.stop_reason.clone(),
        stop_detail: run.stop_detail.clone(),
        created_at: t(p.created_at),
        updated_at: t(p.m.updated_at),
        owner_until: cases.then(|| t(p.m.owner_until)),
        selection: ReplayPlanSelection {
            reasons: spec.reasons.clone(),
            types: spec.types.clone(),
            from: spec.from_ms.map(|ms| t(Timestamp(ms))),
            to: spec.to_ms.map(|ms| t(Timestamp(ms))),
            case_ids: spec.case_ids.clone(),
            group: spec.group.clone(),
            signature: spec.signature.clone(),
        },
        correction: spec.correction.clone(),
        budget: cases.then(|| ReplayPlanBudget {
            items_per_s: b.items_per_s,
            bytes_per_s: b.bytes_per_s,
            max_concurrent: b.max_concurrent,
            window: b.window,
            dependency: PlanDependency {
                name: b.dependency.name.clone(),
                probe_url: b.dependency.probe_url.clone(),
                max_error_rate: b.dependency.max_error_rate,
                max_latency_ms: b.dependency.max_latency_ms,
            },
        }),
        lease_ms: cases.then_some(spec.lease_ms),
        observe_ms: cases.then_some(spec.observe_ms),
        sessions: spec.sessions.clone(),
        baseline: run.baseline.as_ref().map(reading),
        readings: run.readings.iter().map(reading).collect(),
        progress: PlanProgress {
            items: v.sqs_move.as_ref().map_or(p.items, |m| m.to_move),
            waiting: v.waiting,
            admitted: run.admitted,
            in_flight: run.in_flight,
            completed: run.completed,
            stopped: run.stopped,
            closed: run.closed,
            held: run.held,
            bytes_admitted: run.bytes_admitted,
            window: run.window,
            window_admitted: run.window_admitted,
            items_per_s: rate(
                run.admitted,
                run.admitted,
                run.started_ms,
                run.last_admit_ms,
            ),
            bytes_per_s: rate(
                run.bytes_admitted,
                run.admitted,
                run.started_ms,
                run.last_admit_ms,
            ),
            eta_ms: v.eta_ms,
        },
        sqs_move: v.sqs_move.as_ref().map(|m| SqsMovePlan {
            max_per_second: m.max_per_second,
            items_per_s: m.items_per_s,
            to_source: m.destination.is_none(),
            moved: m.moved,
            to_move: m.to_move,
            failure_reason: m.failure_reason.clone(),
        }),
    }
}

fn item_out(i: &PlanItemRecord) -> PlanItem {
    PlanItem {
        seq: i.seq,
        case_id: i.case_id.clone(),
        bytes: i.bytes,
        state: i.state.to_string(),
        window: i.window,
        message_id: i.message_id.clone(),
        detail: i.detail.clone(),
        updated_at: t(i.updated_at),
    }
}

/// A selection and budget as the broker takes them.
fn selection_in(
    sel: PlanSelection,
    destination: Option<String>,
) -> Result<PlanSelectionInput, ApiError> {
    Ok(PlanSelectionInput {
        queue: sel.queue,
        reasons: sel.reasons,
        types: sel.types,
        from: time_in("from", sel.from)?,
        to: time_in("to", sel.to)?,
        case_ids: sel.case_ids,
        group: sel.group,
        signature: text("selection.signature", sel.signature)?,
        destination,
    })
}

fn budget_in(b: PlanBudget) -> BudgetSpec {
    BudgetSpec {
        items_per_s: b.items_per_s,
        bytes_per_s: b.bytes_per_s,
        max_concurrent: b.max_concurrent,
        window: b.window,
        dependency: b.dependency.map(|d| Dependency {
            name: d.name,
            probe_url: d.probe_url,
            max_error_rate: d.max_error_rate,
            max_latency_ms: d.max_latency_ms,
        }),
    }
}

/// `POST /v1/replay/plans`: creates a plan owned by the caller (role replayer on the
/// selection's queue, checked here; on the destination, checked by the broker).
async fn create(
    State(s): State<AppState>,
    Caller(actor): Caller,
    ApiJson(req): ApiJson<CreatePlan>,
) -> Result<(StatusCode, Json<ReplayPlan>), ApiError> {
    let input = PlanInput {
        selection: selection_in(req.selection, req.destination)?,
        budget: budget_in(req.budget),
        correction: req.correction,
        lease_ms: req.lease_ms,
        observe_ms: req.observe_ms,
    };
    let v = s.broker.plans().create(&input, &actor).await?;
    Ok((StatusCode::CREATED, Json(plan_out(&v))))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanSearch {
    status: Option<String>,
    kind: Option<String>,
    queue: Option<String>,
    after: Option<String>,
    limit: Option<u32>,
}

/// `GET /v1/replay/plans`: a page of plans by id, only over queues the caller may read
/// cases of.
async fn list_plans(
    State(s): State<AppState>,
    Caller(actor): Caller,
    ApiQuery(q): ApiQuery<PlanSearch>,
) -> Result<Json<ReplayPlanList>, ApiError> {
    let queue = text("queue", q.queue)?
        .map(|n| {
            n.parse::<redrive_core::EntityName>()
                .map(|n| n.to_string())
                .map_err(BrokerError::from)
        })
        .transpose()?;
    let query = PlanQuery {
        status: names::<PlanStatus>("status", q.status)?,
        kinds: names::<PlanKind>("kind", q.kind)?,
        queue,
        after: text("after", q.after)?,
        limit: limit(q.limit, DEFAULT_PLAN_PAGE, MAX_PLAN_PAGE)?,
        ..PlanQuery::default()
    };
    let views = s.broker.plans().list(&query, &actor).await?;
    let plans = views.iter().map(plan_out).collect();
    Ok(Json(ReplayPlanList { plans }))
}

/// `GET /v1/replay/plans/{id}` (operator on the plan's queue).
async fn show_plan(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<Json<ReplayPlan>, ApiError> {
    let v = s
        .broker
        .plans()
        .show(&plan_id(id)?, Operation::ReadCases, &actor)
        .await?;
    Ok(Json(plan_out(&v)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ItemSearch {
    state: Option<String>,
    after: Option<u32>,
    limit: Option<u32>,
}

/// `GET /v1/replay/plans/{id}/items` (operator on the plan's queue): a page of its items
/// by `seq`.
async fn plan_items(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<ItemSearch>,
) -> Result<Json<PlanItemList>, ApiError> {
    let query = PlanItemQuery {
        states: names::<PlanItemState>("state", q.state)?,
        after_seq: q.after,
        limit: limit(q.limit, DEFAULT_PLAN_ITEM_PAGE, MAX_PLAN_ITEM_PAGE)?,
    };
    let items = s
        .broker
        .plans()
        .items(&plan_id(id)?, &query, &actor)
        .await?;
    Ok(Json(PlanItemList {
        items: items.iter().map(item_out).collect(),
    }))
}

/// The owner's change of a plan (role replayer on the plan's queue; the broker holds it to
/// the plan's owner or an admin).
async fn change(
    s: &AppState,
    actor: &Actor,
    id: String,
    action: PlanAction,
) -> Result<Json<ReplayPlan>, ApiError> {
    let v = s
        .broker
        .plans()
        .change(&plan_id(id)?, action, actor)
        .await?;
    Ok(Json(plan_out(&v)))
}

/// `POST /v1/replay/plans/{id}/start`: a planned plan runs; the owner's lease runs from
/// now.
async fn start(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<Json<ReplayPlan>, ApiError> {
    change(&s, &actor, id, PlanAction::Start).await
}

/// `POST /v1/replay/plans/{id}/pause`: a running plan admits nothing more.
async fn pause(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<Json<ReplayPlan>, ApiError> {
    change(&s, &actor, id, PlanAction::Pause).await
}

/// `POST /v1/replay/plans/{id}/resume`: a paused plan runs again under the same budget.
async fn resume(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<Json<ReplayPlan>, ApiError> {
    change(&s, &actor, id, PlanAction::Resume).await
}

/// `POST /v1/replay/plans/{id}/cancel`: a plan that has not ended admits nothing more.
async fn cancel(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<Json<ReplayPlan>, ApiError> {
    change(&s, &actor, id, PlanAction::Cancel).await
}

/// `POST /v1/replay/plans/preview`: the dry run of a replay plan (role replayer on the
/// selection's queue, checked here: the path names no entity). An unbounded budget is
/// refused with `replay_unbounded`; nothing is touched.
async fn preview(
    State(s): State<AppState>,
    Caller(actor): Caller,
    ApiJson(req): ApiJson<PlanSpec>,
) -> Result<Json<PlanPreview>, ApiError> {
    let selection = selection_in(req.selection, req.destination)?;
    let budget = budget_in(req.budget);
    let p = s
        .broker
        .plans()
        .preview(&selection, &budget, &actor)
        .await?;
    Ok(Json(PlanPreview {
        items: p.items,
        bytes: p.bytes,
        eligible: p.eligible,
        lower_bound_ms: p.lower_bound_ms,
        by_reason: p.by_reason,
        by_type: p.by_type,
        blocked: p.blocked,
        gates: p
            .gates
            .into_iter()
            .map(|g| PreviewGate {
                gate: g.gate.to_owned(),
                detail: g.detail,
                items: g.items,
                clears_at: g.clears_at.map(|t| t.to_rfc3339()),
            })
            .collect(),
        truncated: (p.item_list.len() as u64) < p.items,
        item_list: p
            .item_list
            .into_iter()
            .map(|i| PreviewItem {
                case_id: i.case_id,
                message_id: i.message_id,
                reason: i.reason,
                message_type: i.message_type,
                bytes: i.bytes,
                gate: i.gate.map(str::to_owned),
                clears_at: i.clears_at.map(|t| t.to_rfc3339()),
            })
            .collect(),
    }))
}
