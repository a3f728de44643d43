//! `/v1/replay`: where each queue's dead letters stand with automatic replay (candidates,
//! failing and flagged records, archived, quarantined by cause). Operator; a listing shows
//! only the queues the caller may read this of.

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use redrive_api::replay::{PlanPreview, PlanSpec, PreviewItem, ReplayStatus, ReplayStatusList};
use redrive_broker::{BrokerError, PlanSelectionInput};
use redrive_core::access::Operation;
use redrive_core::plan::{BudgetSpec, Dependency};

use crate::AppState;
use crate::access::Caller;
use crate::error::ApiError;
use crate::wire::replay_status_out;

async fn list(
    State(s): State<AppState>,
    Caller(actor): Caller,
) -> Result<Json<ReplayStatusList>, ApiError> {
    let all = s.broker.replay_status(None).await?;
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
    let counts = s.broker.replay_status(Some(&name)).await?;
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
}

/// `POST /v1/replay/plans/preview`: the dry run of a replay plan (role replayer on the
/// selection's queue, checked here: the path names no entity). An unbounded budget is
/// refused with `replay_unbounded`; nothing is touched.
async fn preview(
    State(s): State<AppState>,
    Caller(actor): Caller,
    crate::error::ApiJson(req): crate::error::ApiJson<PlanSpec>,
) -> Result<Json<PlanPreview>, crate::error::ApiError> {
    if !actor.permits(Operation::ReplayCase, Some(&req.selection.queue)) {
        return Err(BrokerError::Forbidden {
            operation: "ReplayCase".to_owned(),
            needs: "replayer".to_owned(),
            entity: Some(req.selection.queue.clone()),
        }
        .into());
    }
    let sel = req.selection;
    let selection = PlanSelectionInput {
        queue: sel.queue,
        reasons: sel.reasons,
        types: sel.types,
        from: crate::wire::time_in("from", sel.from)?,
        to: crate::wire::time_in("to", sel.to)?,
        case_ids: sel.case_ids,
        destination: req.destination,
    };
    let b = req.budget;
    let budget = BudgetSpec {
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
    };
    let p = s.broker.preview_plan(&selection, &budget).await?;
    Ok(Json(PlanPreview {
        items: p.items,
        bytes: p.bytes,
        eligible: p.eligible,
        lower_bound_ms: p.lower_bound_ms,
        by_reason: p.by_reason,
        by_type: p.by_type,
        blocked: p.blocked,
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
            })
            .collect(),
    }))
}
