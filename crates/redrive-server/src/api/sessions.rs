//! `/v1/queues/{name}/sessions`: accept (named or next available), renew, release.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use redrive_api::message::{AcceptSession, SessionLock, SessionTokenRequest};

use crate::AppState;
use crate::error::{ApiError, ApiJson};

fn lock_out(l: redrive_broker::model::SessionLock) -> SessionLock {
    SessionLock {
        session_id: l.session_id,
        lock_token: l.lock_token,
        locked_until: l.locked_until.to_rfc3339(),
    }
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
        .route("/v1/queues/{name}/sessions/accept", post(accept))
        .route("/v1/queues/{name}/sessions/{session}/renew", post(renew))
        .route(
            "/v1/queues/{name}/sessions/{session}/release",
            post(release),
        )
}
