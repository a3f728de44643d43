//! Operations endpoints: `/metrics` (Prometheus text), `/healthz`, and the OpenAPI
//! document at `/openapi.json`.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};

use redrive_api::{ErrorCode, Problem};

use crate::AppState;
use crate::error::{ApiError, problem_response};

async fn metrics(State(s): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    let text = s.broker.render_metrics().await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text))
}

/// `200 {"status":"ok","store":"ok","backend":…}` when the store answers a ping; otherwise
/// `503` (with `Retry-After`) and a problem naming the dependency that is down: the store,
/// its backend and the error's kind (`unavailable`, `poisoned`…). The cause stays in the
/// log.
async fn healthz(State(s): State<AppState>) -> axum::response::Response {
    let health = s.broker.store_health().await;
    let backend = health.backend;
    match health.answer {
        Ok(()) => Json(serde_json::json!({"status": "ok", "store": "ok", "backend": backend}))
            .into_response(),
        Err(e) => {
            let kind = e.storage_class().unwrap_or("other");
            tracing::warn!(backend, kind, error = %e, "health check: the store does not answer");
            problem_response(
                &Problem::new(
                    ErrorCode::Unavailable,
                    format!("the store ({backend}) does not answer: {kind}"),
                )
                .with("dependency", "store")
                .with("store", "unavailable")
                .with("backend", backend)
                .with("kind", kind),
            )
        }
    }
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
