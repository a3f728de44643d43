//! `/v1/topics`: topics, their subscriptions, and publishing CloudEvents (structured,
//! batch and binary mode).

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use redrive_api::ErrorCode;
use redrive_api::topic::{
    CreateSubscription, CreateTopic, PublishResult, PublishResults, SubscriptionDeleted,
    SubscriptionInfo, SubscriptionList, SubscriptionStats, SubscriptionType, TopicInfo, TopicList,
    UpdateSubscription,
};
use redrive_broker::model::{SubscriptionRecord, SubscriptionUpdate, TopicRecord};
use redrive_broker::{EventInput, PushInput, SubscriptionInput, SubscriptionView};
use serde::Deserialize;

use redrive_core::access::Operation;

use crate::AppState;
use crate::access::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery};

fn topic_out(r: &TopicRecord) -> TopicInfo {
    TopicInfo {
        name: r.name.to_string(),
        policy: r.policy.clone(),
        version: r.version,
        created_at: r.created_at.to_rfc3339(),
        updated_at: r.updated_at.to_rfc3339(),
    }
}

fn sub_out(r: &SubscriptionRecord, stats: SubscriptionStats) -> SubscriptionInfo {
    SubscriptionInfo {
        topic: r.topic.to_string(),
        name: r.name.to_string(),
        queue: r.queue.to_string(),
        kind: r.spec.kind.clone(),
        filter: r.spec.filter.clone(),
        retry_policy: r.spec.retry_policy.clone(),
        delivery: r.spec.delivery.clone(),
        dead_letter: r.spec.dead_letter.clone(),
        paused: r.spec.paused,
        auto_replay: r.spec.auto_replay.clone(),
        dead_letter_retention_ms: r.spec.dead_letter_retention_ms,
        version: r.version,
        created_at: r.created_at.to_rfc3339(),
        updated_at: r.updated_at.to_rfc3339(),
        stats,
    }
}

fn view_out(v: &SubscriptionView) -> SubscriptionInfo {
    sub_out(
        &v.record,
        SubscriptionStats {
            paused: v.record.spec.paused,
            pending: v.counts.active,
            in_backoff: v.counts.scheduled,
            in_flight: v.counts.locked,
            dead_lettered: v.counts.dead_lettered,
            oldest_pending_age_ms: v.oldest_pending_age_ms,
            delivered: v.delivery.delivered,
            failed_attempts: v.delivery.failed_attempts.clone(),
            dead_lettered_by_reason: v.delivery.dead_lettered.clone(),
            dropped: v.delivery.dropped,
        },
    )
}

async fn create_topic(
    State(s): State<AppState>,
    Caller(actor): Caller,
    ApiJson(req): ApiJson<CreateTopic>,
) -> Result<impl IntoResponse, ApiError> {
    s.broker
        .authorize(&actor, Operation::CreateEntity, Some(&req.name))
        .await?;
    let rec = s.broker.create_topic(&req.name, req.policy).await?;
    Ok((StatusCode::CREATED, Json(topic_out(&rec))))
}

async fn list_topics(
    State(s): State<AppState>,
    Caller(actor): Caller,
) -> Result<Json<TopicList>, ApiError> {
    let topics = s.broker.list_topics().await?;
    Ok(Json(TopicList {
        topics: topics
            .iter()
            .filter(|t| actor.permits(Operation::ReadMetadata, Some(t.name.as_str())))
            .map(topic_out)
            .collect(),
    }))
}

async fn show_topic(
    State(s): State<AppState>,
    Path(topic): Path<String>,
) -> Result<Json<TopicInfo>, ApiError> {
    Ok(Json(topic_out(&s.broker.get_topic(&topic).await?)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteQuery {
    #[serde(default)]
    force: bool,
}

async fn delete_topic(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(topic): Path<String>,
    ApiQuery(q): ApiQuery<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    s.broker.delete_topic(&topic, q.force, &actor).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn create_sub(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(topic): Path<String>,
    ApiJson(req): ApiJson<CreateSubscription>,
) -> Result<impl IntoResponse, ApiError> {
    let push = match (req.kind, req.endpoint) {
        (SubscriptionType::Pull, None) => None,
        (SubscriptionType::Pull, Some(_)) => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "`endpoint` applies to push subscriptions",
            ));
        }
        (SubscriptionType::Push, None) => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "a push subscription needs an `endpoint`",
            ));
        }
        (SubscriptionType::Push, Some(endpoint)) => Some(PushInput {
            endpoint,
            mode: req.mode,
            skip_validation: req.skip_validation,
        }),
    };
    let rec = s
        .broker
        .create_subscription(
            &topic,
            SubscriptionInput {
                name: req.name,
                push,
                filter: req.filter,
                retry_policy: req.retry_policy,
                delivery: req.delivery,
                dead_letter: req.dead_letter,
                paused: req.paused,
                max_delivery_count: req.max_delivery_count,
                auto_replay: req.auto_replay,
                dead_letter_retention_ms: req.dead_letter_retention_ms,
            },
            &actor,
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(sub_out(
            &rec,
            SubscriptionStats {
                paused: rec.spec.paused,
                ..SubscriptionStats::default()
            },
        )),
    ))
}

async fn list_subs(
    State(s): State<AppState>,
    Path(topic): Path<String>,
) -> Result<Json<SubscriptionList>, ApiError> {
    let views = s.broker.list_subscriptions(&topic).await?;
    Ok(Json(SubscriptionList {
        subscriptions: views.iter().map(view_out).collect(),
    }))
}

async fn show_sub(
    State(s): State<AppState>,
    Path((topic, sub)): Path<(String, String)>,
) -> Result<Json<SubscriptionInfo>, ApiError> {
    Ok(Json(view_out(
        &s.broker.get_subscription(&topic, &sub).await?,
    )))
}

async fn update_sub(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path((topic, sub)): Path<(String, String)>,
    ApiJson(req): ApiJson<UpdateSubscription>,
) -> Result<Json<SubscriptionInfo>, ApiError> {
    s.broker
        .update_subscription(
            &topic,
            &sub,
            SubscriptionUpdate {
                paused: req.paused,
                filter: req.filter,
                auto_replay: req.auto_replay,
                dead_letter_retention_ms: req.dead_letter_retention_ms,
            },
            &actor,
        )
        .await?;
    Ok(Json(view_out(
        &s.broker.get_subscription(&topic, &sub).await?,
    )))
}

async fn delete_sub(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path((topic, sub)): Path<(String, String)>,
    ApiQuery(q): ApiQuery<DeleteQuery>,
) -> Result<Json<SubscriptionDeleted>, ApiError> {
    let discarded = s
        .broker
        .delete_subscription(&topic, &sub, q.force, &actor)
        .await?;
    Ok(Json(SubscriptionDeleted { discarded }))
}

/// The publish mode from the request's media type and headers.
fn event_input(headers: &HeaderMap, body: Bytes) -> Result<EventInput, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let base = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match base.as_str() {
        redrive_events::cloudevent::STRUCTURED => Ok(EventInput::Structured(body.to_vec())),
        redrive_events::cloudevent::BATCH => Ok(EventInput::Batch(body.to_vec())),
        _ if headers.contains_key("ce-specversion") || headers.contains_key("ce-id") => {
            let mut h = Vec::new();
            for (name, value) in headers {
                let n = name.as_str();
                if n.starts_with("ce-") || n == "content-type" {
                    let v = value.to_str().map_err(|_| {
                        ApiError::new(
                            ErrorCode::InvalidEvent,
                            format!("header `{n}` is not visible ASCII"),
                        )
                    })?;
                    h.push((n.to_owned(), v.to_owned()));
                }
            }
            Ok(EventInput::Binary {
                headers: h,
                body: body.to_vec(),
            })
        }
        _ => Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "publish with Content-Type application/cloudevents+json (one event), \
             application/cloudevents-batch+json (a batch), or in binary mode (ce-* headers)",
        )),
    }
}

async fn publish(
    State(s): State<AppState>,
    Path(topic): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let input = event_input(&headers, body)?;
    let results = s.broker.publish(&topic, input).await?;
    Ok((
        StatusCode::CREATED,
        Json(PublishResults {
            results: results
                .into_iter()
                .map(|r| PublishResult {
                    id: r.id,
                    duplicate: r.duplicate,
                })
                .collect(),
        }),
    ))
}

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/topics", get(list_topics).post(create_topic))
        .route("/v1/topics/{topic}", get(show_topic).delete(delete_topic))
        .route(
            "/v1/topics/{topic}/subscriptions",
            get(list_subs).post(create_sub),
        )
        .route(
            "/v1/topics/{topic}/subscriptions/{sub}",
            get(show_sub).patch(update_sub).delete(delete_sub),
        )
        .route("/v1/topics/{topic}/events", post(publish))
}
