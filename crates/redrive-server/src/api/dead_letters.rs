//! `/v1/queues/{name}/dead-letters`: list (filters, cursor), show, peek-lock receive and
//! settle, resubmit, move between areas, restore from quarantine (with its preview), and
//! import from elsewhere.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use redrive_api::ErrorCode;
use redrive_api::dead_letter::{
    DeadLetter, DeadLetterAction, DeadLetterPage, ImportDeadLetters, ImportResult, MoveDeadLetter,
    ReceiveDeadLetters, RestoreDeadLetter, RestoreResult, SettleDeadLetter, UndecodableDeadLetter,
};
use redrive_api::message::SendResult;
use redrive_broker::{Actor, BrokerError, DeadLetterFilter};
use redrive_core::access::Operation;
use redrive_core::{Area, EvidenceQuality};
use redrive_events::import::{ImportFormat, MAX_IMPORT_BYTES};
use serde::Deserialize;

use crate::AppState;
use crate::access::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery, OptionalApiJson};
use crate::wire::{dead_letter_out, restore_out, time_in};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    area: Option<String>,
    reason: Option<String>,
    from: Option<String>,
    to: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
    #[serde(rename = "type")]
    message_type: Option<String>,
    source: Option<String>,
    quality: Option<String>,
    text: Option<String>,
    signature: Option<String>,
    /// `false`: no payload bodies, even for a payload reader (and no payload read to
    /// audit).
    payload: Option<bool>,
}

fn quality(s: &str) -> Result<EvidenceQuality, ApiError> {
    s.parse().map_err(|_| {
        ApiError::from(BrokerError::invalid(
            "quality",
            format!("{s:?} is not one of exact, approximate, incomplete, unavailable"),
        ))
    })
}

fn area(s: &str) -> Result<Area, ApiError> {
    s.parse().map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("area {s:?} is not one of live, archived, quarantine"),
        )
    })
}

async fn list(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(queue): Path<String>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<DeadLetterPage>, ApiError> {
    let filter = DeadLetterFilter {
        area: q.area.as_deref().map(area).transpose()?,
        reason: q.reason,
        from: time_in("from", q.from)?,
        to: time_in("to", q.to)?,
        cursor: q.cursor,
        limit: q.limit,
        message_type: q.message_type,
        source: q.source,
        quality: q.quality.as_deref().map(quality).transpose()?,
        text: q.text,
        signature: q.signature,
        without_payloads: q.payload == Some(false),
    };
    let payloads = !filter.without_payloads && payload_reader(&actor, &queue);
    let page = s
        .broker
        .list_dead_letter_page(&queue, filter, &actor)
        .await?;
    Ok(Json(DeadLetterPage {
        dead_letters: page
            .records
            .iter()
            .map(|r| dead_letter_out(r, None, payloads))
            .collect(),
        undecodable: page
            .undecodable
            .into_iter()
            .map(|u| UndecodableDeadLetter {
                id: u.id,
                reason: u.reason,
            })
            .collect(),
        next_cursor: page.next,
    }))
}

/// Whether the caller may see payloads of the queue's dead letters.
fn payload_reader(actor: &Actor, queue: &str) -> bool {
    actor.permits(Operation::ReadDeadLetterPayload, Some(queue))
}

async fn show(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path((queue, id)): Path<(String, String)>,
) -> Result<Json<DeadLetter>, ApiError> {
    let r = s
        .broker
        .get_dead_letter(&queue, &id.parse(), &actor)
        .await?;
    Ok(Json(dead_letter_out(
        &r,
        None,
        payload_reader(&actor, &queue),
    )))
}

async fn receive(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(queue): Path<String>,
    ApiJson(req): ApiJson<ReceiveDeadLetters>,
) -> Result<Json<DeadLetterPage>, ApiError> {
    let got = s
        .broker
        .receive_dead_letters(
            &queue,
            req.max_messages.unwrap_or(1),
            req.lock_duration_ms,
            &actor,
        )
        .await?;
    Ok(Json(DeadLetterPage {
        dead_letters: got
            .iter()
            .map(|d| dead_letter_out(&d.record, Some((&d.lock_token, d.locked_until)), true))
            .collect(),
        undecodable: Vec::new(),
        next_cursor: None,
    }))
}

async fn settle(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(queue): Path<String>,
    ApiJson(req): ApiJson<SettleDeadLetter>,
) -> Result<StatusCode, ApiError> {
    let complete = req.action == DeadLetterAction::Complete;
    s.broker
        .settle_dead_letter(&queue, &req.lock_token.parse(), complete, &actor)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn resubmit(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path((queue, id)): Path<(String, String)>,
) -> Result<impl IntoResponse, ApiError> {
    let e = s
        .broker
        .resubmit_dead_letter(&queue, &id.parse(), &actor)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(SendResult {
            message_id: e.message_id,
            sequence_number: e.sequence,
            duplicate: e.duplicate,
        }),
    ))
}

async fn move_to(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path((queue, id)): Path<(String, String)>,
    ApiJson(req): ApiJson<MoveDeadLetter>,
) -> Result<StatusCode, ApiError> {
    let to = area(&req.area)?;
    s.broker
        .move_dead_letter(&queue, &id.parse(), to, &actor)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn restore(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path((queue, id)): Path<(String, String)>,
    OptionalApiJson(req): OptionalApiJson<RestoreDeadLetter>,
) -> Result<Json<RestoreResult>, ApiError> {
    let preview = s
        .broker
        .restore_dead_letter(&queue, &id.parse(), req.dry_run, &actor)
        .await?;
    Ok(Json(restore_out(&preview)))
}

/// The format of an import, checked before its content is read.
fn import_format(s: &str) -> Result<ImportFormat, ApiError> {
    s.parse().map_err(|_| {
        let names: Vec<&str> = ImportFormat::ALL.iter().map(|f| f.as_str()).collect();
        ApiError::from(BrokerError::invalid(
            "format",
            format!("{s:?} is not one of {}", names.join(", ")),
        ))
    })
}

async fn import(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(queue): Path<String>,
    ApiJson(req): ApiJson<ImportDeadLetters>,
) -> Result<impl IntoResponse, ApiError> {
    let format = import_format(&req.format)?;
    if req.content.len() > MAX_IMPORT_BYTES {
        return Err(ApiError::from(
            redrive_api::Problem::new(
                ErrorCode::MessageTooLarge,
                format!(
                    "`content` is {} bytes; an import takes at most {MAX_IMPORT_BYTES}",
                    req.content.len()
                ),
            )
            .with("field", "content")
            .with("size", req.content.len())
            .with("limit", MAX_IMPORT_BYTES),
        ));
    }
    let ids = s
        .broker
        .import_dead_letters(&queue, format, req.content.as_bytes(), &actor)
        .await
        .map_err(|e| match e {
            // The broker names the bytes it was given; on the wire they are `content`.
            BrokerError::InvalidRequest { field, why } if field == "body" => {
                BrokerError::invalid("content", why)
            }
            e => e,
        })?;
    Ok((
        StatusCode::CREATED,
        Json(ImportResult {
            imported: ids.len() as u64,
            ids,
        }),
    ))
}

/// Largest request body of an import: room for [`MAX_IMPORT_BYTES`] of content with its
/// JSON string escapes.
pub(crate) const MAX_IMPORT_REQUEST_BYTES: usize = 2 * MAX_IMPORT_BYTES;

/// The import route, with its own body limit ([`MAX_IMPORT_REQUEST_BYTES`]).
pub(crate) fn import_router() -> Router<AppState> {
    Router::new().route("/v1/queues/{name}/dead-letters/import", post(import))
}

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/queues/{name}/dead-letters", get(list))
        .route("/v1/queues/{name}/dead-letters/receive", post(receive))
        .route("/v1/queues/{name}/dead-letters/settle", post(settle))
        .route("/v1/queues/{name}/dead-letters/{id}", get(show))
        .route(
            "/v1/queues/{name}/dead-letters/{id}/resubmit",
            post(resubmit),
        )
        .route("/v1/queues/{name}/dead-letters/{id}/move", post(move_to))
        .route("/v1/queues/{name}/dead-letters/{id}/restore", post(restore))
}
