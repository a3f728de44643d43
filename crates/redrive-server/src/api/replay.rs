//! `/v1/replay`: where each queue's dead letters stand with automatic replay (candidates,
//! failing and flagged records, archived, quarantined by cause). Operator; a listing shows
//! only the queues the caller may read this of.

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use redrive_api::replay::{ReplayStatus, ReplayStatusList};
use redrive_core::access::Operation;

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
}
