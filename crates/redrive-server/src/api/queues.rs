//! `/v1/queues`: create, list, show, update (JSON merge patch of the policy), delete,
//! purge, and the policy's version history.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use redrive_api::ErrorCode;
use redrive_api::queue::{
    CreateQueue, PolicyVersion, PolicyVersionList, PurgeResult, QueueList, QueuePolicy,
};
use serde::Deserialize;
use serde_json::Value;

use redrive_core::access::Operation;

use crate::AppState;
use crate::access::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery};
use crate::wire::queue_out;

async fn create(
    State(s): State<AppState>,
    Caller(actor): Caller,
    ApiJson(req): ApiJson<CreateQueue>,
) -> Result<impl IntoResponse, ApiError> {
    s.broker
        .authorize(&actor, Operation::CreateEntity, Some(&req.name))
        .await?;
    s.broker
        .authorize_auto_replay(&actor, &req.name, None, &req.policy.auto_replay)
        .await?;
    s.broker
        .authorize_dead_letter_queue(&actor, None, req.policy.dead_letter_queue.as_ref())
        .await?;
    let rec = s.broker.create_queue(&req.name, req.policy).await?;
    let view = s.broker.get_queue(rec.name.as_str()).await?;
    Ok((StatusCode::CREATED, Json(queue_out(&view))))
}

async fn list(
    State(s): State<AppState>,
    Caller(actor): Caller,
) -> Result<Json<QueueList>, ApiError> {
    let views = s.broker.list_queues().await?;
    Ok(Json(QueueList {
        queues: views
            .iter()
            .filter(|v| actor.permits(Operation::ReadMetadata, Some(v.record.name.as_str())))
            .map(queue_out)
            .collect(),
    }))
}

async fn show(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let view = s.broker.get_queue(&name).await?;
    Ok(Json(queue_out(&view)))
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(serde_json::Map::new());
            }
            if let Value::Object(t) = target {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(&k);
                    } else {
                        merge(t.entry(k).or_insert(Value::Null), v);
                    }
                }
            }
        }
        other => *target = other,
    }
}

async fn update(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<Value>,
) -> Result<impl IntoResponse, ApiError> {
    let Value::Object(mut obj) = body else {
        return Err(ApiError::new(
            ErrorCode::MalformedBody,
            "expected a JSON object (a merge patch of the policy)",
        ));
    };
    let (patch, expected) = if obj.contains_key("policy") {
        let expected = match obj.remove("expected_version") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                ApiError::new(
                    ErrorCode::InvalidRequest,
                    "`expected_version` must be a whole number",
                )
            })?),
        };
        let patch = obj.remove("policy").unwrap_or(Value::Null);
        if let Some(k) = obj.keys().next() {
            return Err(ApiError::new(
                ErrorCode::MalformedBody,
                format!("unknown field `{k}`"),
            ));
        }
        (patch, expected)
    } else {
        (Value::Object(obj), None)
    };
    s.broker
        .change_queue_policy(&name, expected, &actor, |current| {
            let mut doc = serde_json::to_value(current)
                .map_err(|e| ApiError::new(ErrorCode::Internal, e.to_string()))?;
            merge(&mut doc, patch.clone());
            serde_json::from_value::<QueuePolicy>(doc).map_err(|e| {
                ApiError::new(ErrorCode::InvalidPolicy, format!("invalid policy: {e}"))
            })
        })
        .await?;
    let view = s.broker.get_queue(&name).await?;
    Ok(Json(queue_out(&view)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteQuery {
    #[serde(default)]
    force: bool,
}

async fn delete(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    s.broker.delete_queue(&name, q.force, &actor).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Removes every message of the queue, locked ones too (their holders' settlements
/// answer `lock_lost`); dead letters stay. Audited by the broker.
async fn purge(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(name): Path<String>,
) -> Result<Json<PurgeResult>, ApiError> {
    let removed = s.broker.purge(&name, &actor).await?;
    Ok(Json(PurgeResult { removed }))
}

/// Versions a page of the policy history holds when the caller names no limit.
const DEFAULT_POLICY_VERSION_PAGE: u32 = 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct VersionsQuery {
    before: Option<u64>,
    limit: Option<u32>,
}

/// `GET /v1/queues/{name}/policy/versions`: a page of the queue's policy history, newest
/// first, and the `before` of the next page (`null` on the last).
async fn policy_versions(
    State(s): State<AppState>,
    Path(name): Path<String>,
    ApiQuery(q): ApiQuery<VersionsQuery>,
) -> Result<Json<PolicyVersionList>, ApiError> {
    let limit = q.limit.unwrap_or(DEFAULT_POLICY_VERSION_PAGE);
    let page = s.broker.policy_versions(&name, q.before, limit).await?;
    let next = (page.len() == limit as usize)
        .then(|| page.last().map(|v| v.version))
        .flatten()
        .filter(|&v| v > 1);
    Ok(Json(PolicyVersionList {
        versions: page
            .into_iter()
            .map(|v| PolicyVersion {
                version: v.version,
                policy: v.policy,
                changed_at: v.changed_at.to_rfc3339(),
            })
            .collect(),
        next,
    }))
}

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/queues", get(list).post(create))
        .route("/v1/queues/{name}", get(show).patch(update).delete(delete))
        .route("/v1/queues/{name}/purge", post(purge))
        .route("/v1/queues/{name}/policy/versions", get(policy_versions))
}

#[cfg(test)]
mod tests {
    use super::merge;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut doc = json!({"a": 1, "b": {"c": 2, "d": 3}});
        merge(&mut doc, json!({"a": null, "b": {"c": 5}, "e": [1]}));
        assert_eq!(doc, json!({"b": {"c": 5, "d": 3}, "e": [1]}));
    }
}
