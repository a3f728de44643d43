//! Operations endpoints: `/metrics` (Prometheus text), `/healthz`, and the OpenAPI
//! document at `/openapi.json`.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};

use crate::AppState;
use crate::error::ApiError;

async fn metrics(State(s): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    let text = s.broker.render_metrics().await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text))
}

async fn healthz(State(s): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    // A read through the store proves it answers.
    s.broker.list_queues().await?;
    Ok(Json(serde_json::json!({"status": "ok"})))
}

async fn openapi() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        redrive_api::OPENAPI_JSON,
    )
}

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(openapi))
}
