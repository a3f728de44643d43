//! `/v1/queues/{name}/sessions`: the queue's sessions, by id; accept (named or next
//! available), renew, release.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use redrive_api::message::{
    AcceptSession, SessionLock, SessionPage, SessionSummary, SessionTokenRequest,
};
use serde::Deserialize;

use crate::AppState;
use crate::error::{ApiError, ApiJson, ApiQuery};

fn lock_out(l: redrive_broker::model::SessionLock) -> SessionLock {
    SessionLock {
        session_id: l.session_id,
        lock_token: l.lock_token,
        locked_until: l.locked_until.to_rfc3339(),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    after: Option<String>,
    limit: Option<u32>,
}

fn summary_out(s: redrive_broker::SessionSummary) -> SessionSummary {
    SessionSummary {
        locked: s.locked(),
        locked_until: s.locked_until.map(|t| t.to_rfc3339()),
        session_id: s.session_id,
        active: s.active,
        scheduled: s.scheduled,
        in_flight: s.in_flight,
        deferred: s.deferred,
    }
}

async fn list(
    State(s): State<AppState>,
    Path(queue): Path<String>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<SessionPage>, ApiError> {
    let page = s
        .broker
        .list_sessions(&queue, q.after.as_deref(), q.limit)
        .await?;
    Ok(Json(SessionPage {
        sessions: page.sessions.into_iter().map(summary_out).collect(),
        next: page.next,
    }))
}

async fn accept(
    State(s): State<AppState>,
    Path(queue): Path<String>,
    ApiJson(req): ApiJson<AcceptSession>,
) -> Result<Response, ApiError> {
    let got = s
        .broker
        .accept_session(
            &queue,
            req.session_id.as_deref(),
            req.lock_duration_ms,
            req.wait_ms.unwrap_or(0),
        )
        .await?;
    Ok(match got {
        Some(l) => Json(lock_out(l)).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    })
}

async fn renew(
    State(s): State<AppState>,
    Path((queue, session)): Path<(String, String)>,
    ApiJson(req): ApiJson<SessionTokenRequest>,
) -> Result<Json<SessionLock>, ApiError> {
    let l = s
        .broker
        .renew_session(
            &queue,
            &session,
            &req.lock_token.parse(),
            req.lock_duration_ms,
        )
        .await?;
    Ok(Json(lock_out(l)))
}

async fn release(
    State(s): State<AppState>,
    Path((queue, session)): Path<(String, String)>,
    ApiJson(req): ApiJson<SessionTokenRequest>,
) -> Result<StatusCode, ApiError> {
    s.broker
        .release_session(&queue, &session, &req.lock_token.parse())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/queues/{name}/sessions", get(list))
        .route("/v1/queues/{name}/sessions/accept", post(accept))
        .route("/v1/queues/{name}/sessions/{session}/renew", post(renew))
        .route(
            "/v1/queues/{name}/sessions/{session}/release",
            post(release),
        )
}
