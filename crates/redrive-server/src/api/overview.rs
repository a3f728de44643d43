//! `GET /v1/whoami` (any authenticated caller), `GET /v1/overview` (`read-metadata`; only
//! what the caller may see) and `GET /v1/queues/{name}/series` (`read-metadata` on the
//! queue): the console's first look and its charts.

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use redrive_api::overview::{
    Highlight, Overview, OverviewCases, OverviewCounts, OverviewPush, OverviewQueue,
    OverviewReplay, OverviewSubscription, OverviewTopic, Series, SeriesPoint, Whoami,
};
use redrive_broker::{Broker, OverviewView, SERIES_INTERVAL_MS};

use crate::AppState;
use crate::access::Caller;
use crate::error::ApiError;

async fn whoami(State(s): State<AppState>, Caller(actor): Caller) -> Json<Whoami> {
    let auth = s.broker.auth_enabled();
    Json(if auth {
        Whoami {
            auth,
            actor: actor.name.clone(),
            token_id: Some(actor.id.clone()),
            grants: actor.grants.iter().map(ToString::to_string).collect(),
            roles_summary: Broker::roles_summary(&actor)
                .into_iter()
                .map(str::to_owned)
                .collect(),
        }
    } else {
        // Without authentication everyone is anonymous and may do anything: no grants to
        // show, the console says so plainly.
        Whoami {
            auth,
            actor: "anonymous".to_owned(),
            token_id: None,
            grants: Vec::new(),
            roles_summary: Vec::new(),
        }
    })
}

fn overview_out(v: OverviewView) -> Overview {
    let queues: Vec<OverviewQueue> = v
        .queues
        .into_iter()
        .map(|q| {
            let replay = if q.auto_replay.is_some() || q.quarantined > 0 || q.flagged > 0 {
                Some(OverviewReplay {
                    state: if q.auto_replay.is_some() { "on" } else { "off" }.to_owned(),
                    max_replay_attempts: q.auto_replay,
                    flagged: q.flagged,
                    quarantined: q.quarantined,
                })
            } else {
                None
            };
            let (kind, topic, subscription) = match q.subscription {
                Some((t, s)) => ("subscription", Some(t), Some(s)),
                None => ("queue", None, None),
            };
            OverviewQueue {
                name: q.name,
                kind: kind.to_owned(),
                topic,
                subscription,
                counts: OverviewCounts {
                    active: q.counts.active,
                    scheduled: q.counts.scheduled,
                    locked: q.counts.locked,
                    deferred: q.counts.deferred,
                    dead_lettered: q.counts.dead_lettered,
                    quarantined: q.quarantined,
                },
                oldest_message_age_ms: q.oldest_age_ms,
                replay,
            }
        })
        .collect();
    let topics: Vec<OverviewTopic> = v
        .topics
        .into_iter()
        .map(|t| OverviewTopic {
            name: t.name,
            subscriptions: t
                .subscriptions
                .into_iter()
                .map(|s| OverviewSubscription {
                    name: s.name,
                    queue: s.queue,
                    push: s.push.map(|p| OverviewPush {
                        endpoint: p.endpoint,
                        health: p.health.to_owned(),
                        in_backoff: p.in_backoff,
                        failed_attempts: p.failed_attempts,
                        delivered: p.delivered,
                    }),
                })
                .collect(),
        })
        .collect();
    let empty = queues.is_empty() && topics.is_empty();
    Overview {
        generated_at: v.generated_at.to_rfc3339(),
        queues,
        topics,
        cases: OverviewCases {
            open: v.cases.open,
            overdue: v.cases.overdue,
            escalated: v.cases.escalated,
        },
        flagged_replays: v.flagged_replays,
        highlights: v
            .highlights
            .into_iter()
            .map(|h| Highlight {
                kind: h.kind.to_owned(),
                entity: h.entity,
                count: h.count,
                detail: h.detail,
            })
            .collect(),
        empty,
    }
}

async fn overview(
    State(s): State<AppState>,
    Caller(actor): Caller,
) -> Result<Json<Overview>, ApiError> {
    Ok(Json(overview_out(s.broker.overview(&actor).await?)))
}

async fn series(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Series>, ApiError> {
    let points = s.broker.queue_series(&name).await?;
    Ok(Json(Series {
        queue: name,
        interval_ms: SERIES_INTERVAL_MS.unsigned_abs(),
        points: points
            .into_iter()
            .map(|p| SeriesPoint {
                at: p.at.to_rfc3339(),
                sent: p.sent,
                received: p.received,
                completed: p.completed,
                abandoned: p.abandoned,
                dead_lettered: p.dead_lettered.iter().map(|(_, n)| n).sum(),
                dead_lettered_by_reason: p.dead_lettered.into_iter().collect(),
                push_delivered: p.push_delivered,
                push_failed: p.push_failed,
            })
            .collect(),
    }))
}

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/whoami", get(whoami))
        .route("/v1/overview", get(overview))
        .route("/v1/queues/{name}/series", get(series))
}
