//! `GET /v1/failures`: dead letters across queues grouped by the shape of their failure,
//! from the aggregate the store keeps (bounded, indexed, keyset paging). A caller sees
//! the signatures of the queues whose dead letters it may read.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use redrive_api::ErrorCode;
use redrive_api::failure::{FailurePage, FailureSignature};
use redrive_broker::{FailureFilter, FailureSignature as Signature};
use redrive_core::Area;
use serde::Deserialize;

use crate::AppState;
use crate::access::Caller;
use crate::error::{ApiError, ApiQuery};
use crate::wire::time_in;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    queue: Option<String>,
    area: Option<String>,
    from: Option<String>,
    to: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
}

fn area(s: &str) -> Result<Area, ApiError> {
    s.parse().map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("area {s:?} is not one of live, archived, quarantine"),
        )
    })
}

/// A signature to the wire.
fn signature_out(s: Signature) -> FailureSignature {
    FailureSignature {
        id: s.id,
        queue: s.shape.queue.to_string(),
        area: s.area.as_str().to_owned(),
        reason: s.shape.reason,
        route_kind: s.shape.route_kind,
        outcome_class: s.shape.outcome_class,
        message_type: s.shape.message_type,
        source: s.shape.source,
        description: s.shape.description,
        count: s.count,
        live: s.live,
        first_seen: s.first_seen.to_rfc3339(),
        last_seen: s.last_seen.to_rfc3339(),
        sparkline: s.sparkline,
    }
}

async fn list(
    State(s): State<AppState>,
    Caller(actor): Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<FailurePage>, ApiError> {
    let filter = FailureFilter {
        queue: q.queue,
        area: q.area.as_deref().map(area).transpose()?,
        from: time_in("from", q.from)?,
        to: time_in("to", q.to)?,
        cursor: q.cursor,
        limit: q.limit,
    };
    let page = s.broker.list_failures(filter, &actor).await?;
    Ok(Json(FailurePage {
        signatures: page.signatures.into_iter().map(signature_out).collect(),
        next_cursor: page.next,
    }))
}

pub(crate) fn router() -> Router<AppState> {
    Router::new().route("/v1/failures", get(list))
}
