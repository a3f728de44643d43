//! `/v1/tokens` and `/v1/audit`: create, list and revoke API tokens; read and verify the
//! audit log. Admin only (see `crate::access::ROUTES`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use redrive_api::ErrorCode;
use redrive_api::access::{
    AuditEntry, AuditPage, AuditVerification, CreateToken, CreatedToken, Token, TokenList,
};
use redrive_broker::TokenSpec;
use redrive_broker::model::{AuditQuery, TokenRecord};
use redrive_core::access::Grant;
use serde::Deserialize;

use crate::AppState;
use crate::access::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery};
use crate::wire::time_in;

fn token_out(r: &TokenRecord, now: redrive_core::Timestamp) -> Token {
    let status = if r.revoked_at.is_some() {
        "revoked"
    } else if r.is_active(now) {
        "active"
    } else {
        "expired"
    };
    Token {
        id: r.token.id.clone(),
        name: r.token.name.clone(),
        grants: r.token.grants.iter().map(Grant::to_string).collect(),
        created_by: r.token.created_by.clone(),
        created_at: r.created_at.to_rfc3339(),
        expires_at: r.token.expires_at.map(|t| t.to_rfc3339()),
        revoked_at: r.revoked_at.map(|t| t.to_rfc3339()),
        status: status.to_owned(),
        sqs_access_key_id: r.token.sqs.as_ref().map(|c| c.access_key_id.clone()),
    }
}

async fn create(
    State(s): State<AppState>,
    Caller(actor): Caller,
    ApiJson(req): ApiJson<CreateToken>,
) -> Result<impl IntoResponse, ApiError> {
    if req.grants.len() > redrive_broker::MAX_GRANTS {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("at most {} grants", redrive_broker::MAX_GRANTS),
        ));
    }
    let mut grants = Vec::with_capacity(req.grants.len());
    for g in &req.grants {
        grants.push(g.parse::<Grant>().map_err(|e| {
            ApiError::new(ErrorCode::InvalidRequest, format!("invalid `grants`: {e}"))
        })?);
    }
    let created = s
        .broker
        .create_token(
            &actor,
            TokenSpec {
                name: req.name,
                grants,
                expires_at: time_in("expires_at", req.expires_at)?,
                sqs: req.sqs,
            },
        )
        .await?;
    let now = s.broker.clock().now();
    Ok((
        StatusCode::CREATED,
        Json(CreatedToken {
            token: token_out(&created.record, now),
            secret: created.secret,
            sqs_secret_access_key: created
                .record
                .token
                .sqs
                .as_ref()
                .map(|c| c.secret_access_key.clone()),
        }),
    ))
}

async fn list(State(s): State<AppState>) -> Result<Json<TokenList>, ApiError> {
    let now = s.broker.clock().now();
    let tokens = s.broker.list_tokens().await?;
    Ok(Json(TokenList {
        tokens: tokens.iter().map(|t| token_out(t, now)).collect(),
    }))
}

async fn revoke(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(id): Path<String>,
) -> Result<Json<Token>, ApiError> {
    let r = s.broker.revoke_token(&actor, &id).await?;
    Ok(Json(token_out(&r, s.broker.clock().now())))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditParams {
    actor: Option<String>,
    entity: Option<String>,
    action: Option<String>,
    from: Option<String>,
    to: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
}

async fn audit_list(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<AuditParams>,
) -> Result<Json<AuditPage>, ApiError> {
    let limit = q.limit.unwrap_or(100);
    let after_seq = match q.cursor {
        None => None,
        Some(c) => Some(c.parse::<i64>().map_err(|_| {
            ApiError::new(
                ErrorCode::InvalidRequest,
                "`cursor` is not a cursor from a previous page",
            )
        })?),
    };
    let entries = s
        .broker
        .list_audit(&AuditQuery {
            actor_id: q.actor,
            entity: q.entity,
            action: q.action,
            from: time_in("from", q.from)?,
            to: time_in("to", q.to)?,
            after_seq,
            limit,
        })
        .await?;
    let next_cursor = (entries.len() == limit as usize)
        .then(|| entries.last().map(|e| e.seq.to_string()))
        .flatten();
    Ok(Json(AuditPage {
        entries: entries
            .into_iter()
            .map(|e| AuditEntry {
                seq: e.seq,
                at: e.fields.at.to_rfc3339(),
                actor_id: e.fields.actor_id,
                actor_name: e.fields.actor_name,
                action: e.fields.action,
                entity: e.fields.entity,
                targets: e.fields.targets,
                outcome: e.fields.outcome,
                client: e.fields.client,
                prev_hash: e.prev_hash,
                hash: e.hash,
            })
            .collect(),
        next_cursor,
    }))
}

async fn audit_verify(State(s): State<AppState>) -> Result<Json<AuditVerification>, ApiError> {
    let (head, result) = s.broker.verify_audit().await?;
    let (head_seq, head_hash) = match head {
        Some(h) => (Some(h.seq), Some(h.hash)),
        None => (None, None),
    };
    Ok(Json(match result {
        Ok(sum) => AuditVerification {
            ok: true,
            entries: sum.entries,
            first_seq: sum.first_seq,
            last_seq: sum.last_seq,
            head_seq,
            head_hash,
            broken_at: None,
            detail: None,
        },
        Err(e) => AuditVerification {
            ok: false,
            entries: 0,
            first_seq: 0,
            last_seq: 0,
            head_seq,
            head_hash,
            broken_at: Some(e.seq()),
            detail: Some(e.to_string()),
        },
    }))
}

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/tokens", get(list).post(create))
        .route("/v1/tokens/{id}/revoke", post(revoke))
        .route("/v1/audit", get(audit_list))
        .route("/v1/audit/verify", post(audit_verify))
}
