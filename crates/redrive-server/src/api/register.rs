//! `/v1/register`: the idempotency register of replayable message types (see
//! `redrive_core::register`). Reading needs operator or replayer, changing needs operator
//! (see `crate::access::ROUTES`); every change is audited by the broker. A key or body
//! that is not valid is a 400 and changes nothing.

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use redrive_api::ErrorCode;
use redrive_api::register::{RegisterEntry, RegisterPage, RegisterSet, SetRegisterEntry};
use redrive_broker::model::{MAX_REGISTER_PAGE, RegisterRecord};
use redrive_core::register::{self, Idempotency, RegisterKey};
use serde::Deserialize;

use crate::AppState;
use crate::access::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery};

fn entry_out(r: &RegisterRecord) -> RegisterEntry {
    RegisterEntry {
        key: r.entry.key.to_string(),
        answer: r.entry.answer.to_string(),
        ordering_attribute: r.entry.ordering_attribute.clone(),
        updated_at: r.updated_at.to_rfc3339(),
    }
}

fn invalid(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(ErrorCode::InvalidRequest, e.to_string())
}

fn key_in(key: &str) -> Result<RegisterKey, ApiError> {
    key.parse().map_err(invalid)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    cursor: Option<String>,
    limit: Option<u32>,
}

async fn list(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<ListParams>,
) -> Result<Json<RegisterPage>, ApiError> {
    let limit = q.limit.unwrap_or(MAX_REGISTER_PAGE);
    let after = match q.cursor {
        None => None,
        Some(c) => Some(c.parse::<RegisterKey>().map_err(|_| {
            ApiError::new(
                ErrorCode::InvalidRequest,
                "`cursor` is not a cursor from a previous page",
            )
        })?),
    };
    let records = s.broker.list_register(after.as_ref(), limit).await?;
    let next_cursor = (records.len() == limit as usize)
        .then(|| records.last().map(|r| r.entry.key.to_string()))
        .flatten();
    Ok(Json(RegisterPage {
        entries: records.iter().map(entry_out).collect(),
        next_cursor,
    }))
}

async fn set(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(key): Path<String>,
    ApiJson(req): ApiJson<SetRegisterEntry>,
) -> Result<Json<RegisterSet>, ApiError> {
    let key = key_in(&key)?;
    let answer: Idempotency = req.answer.parse().map_err(invalid)?;
    let entry =
        register::RegisterEntry::new(key, answer, req.ordering_attribute).map_err(invalid)?;
    let change = s.broker.set_register_entry(&actor, entry.clone()).await?;
    let updated_at = match (&change.previous, change.changed) {
        (Some(p), false) => p.updated_at,
        _ => s.broker.clock().now(),
    };
    Ok(Json(RegisterSet {
        entry: entry_out(&RegisterRecord { entry, updated_at }),
        previous: change.previous.as_ref().map(entry_out),
        changed: change.changed,
    }))
}

async fn delete(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(key): Path<String>,
) -> Result<Json<RegisterEntry>, ApiError> {
    let key = key_in(&key)?;
    match s.broker.delete_register_entry(&actor, &key).await? {
        Some(r) => Ok(Json(entry_out(&r))),
        None => Err(ApiError::new(
            ErrorCode::RegisterEntryNotFound,
            format!("no register entry {key}"),
        )),
    }
}

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/register", get(list))
        .route("/v1/register/{key}", axum::routing::put(set).delete(delete))
}
