//! `/v1/queues/{name}/messages`, `/receive`, `/settle`: send, peek, receive (peek-lock with
//! long polling), receive of deferred messages, cancel of scheduled messages, settlement.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use redrive_api::ErrorCode;
use redrive_api::message::{
    MessageList, ReceiveDeferred, ReceiveRequest, SendMessage, SendRequest, SendResponse,
    SendResult, Settle, SettleKind, SettleRequest, SettleResponse, SettleResult,
};
use redrive_broker::{HeldSession, ReceiveOptions};
use redrive_core::id::{LockToken, Named};
use serde::Deserialize;
use serde_json::Value;

use crate::AppState;
use crate::access::Caller;
use crate::error::{ApiError, ApiJson, ApiQuery, from_json, problem_for};
use crate::wire::{message_out, outgoing};

async fn send(
    State(s): State<AppState>,
    Path(queue): Path<String>,
    ApiJson(body): ApiJson<Value>,
) -> Result<impl IntoResponse, ApiError> {
    // Decided by shape first, so that a bad field gets serde's precise message rather
    // than "matched no variant".
    let msgs = if body.get("messages").is_some() {
        match from_json::<SendRequest>(body)? {
            SendRequest::Batch { messages } => messages,
            SendRequest::One(m) => vec![*m],
        }
    } else {
        vec![from_json::<SendMessage>(body)?]
    };
    let mut out = Vec::with_capacity(msgs.len());
    for m in msgs {
        out.push(outgoing(m)?);
    }
    let results = s.broker.send(&queue, out).await?;
    Ok((
        StatusCode::CREATED,
        Json(SendResponse {
            results: results
                .into_iter()
                .map(|r| SendResult {
                    message_id: r.message_id,
                    sequence_number: r.sequence,
                    duplicate: r.duplicate,
                })
                .collect(),
        }),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PeekQuery {
    #[serde(default)]
    from_sequence: Option<i64>,
    #[serde(default)]
    limit: Option<u32>,
}

async fn peek(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(queue): Path<String>,
    ApiQuery(q): ApiQuery<PeekQuery>,
) -> Result<Json<MessageList>, ApiError> {
    let now = s.broker.clock().now();
    let msgs = s
        .broker
        .peek(
            &queue,
            q.from_sequence.unwrap_or(1),
            q.limit.unwrap_or(10),
            &actor,
        )
        .await?;
    Ok(Json(MessageList {
        messages: msgs.iter().map(|m| message_out(m, None, now)).collect(),
    }))
}

async fn receive(
    State(s): State<AppState>,
    Caller(actor): Caller,
    Path(queue): Path<String>,
    ApiJson(req): ApiJson<ReceiveRequest>,
) -> Result<Json<MessageList>, ApiError> {
    let session = match (req.session_id, req.session_lock_token) {
        (Some(session_id), Some(lock_token)) => Some(HeldSession {
            session_id,
            lock_token: lock_token.parse(),
        }),
        (None, None) => None,
        _ => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "`session_id` and `session_lock_token` go together (accept the session first)",
            ));
        }
    };
    let deliveries = s
        .broker
        .receive(
            &queue,
            ReceiveOptions {
                max: req.max_messages.unwrap_or(1),
                lock_ms: req.lock_duration_ms,
                wait_ms: req.wait_ms.unwrap_or(0),
                session,
                // A long poll ends when the caller's token is revoked.
                until_revoked: Some(s.broker.revocation_guard(&actor)),
            },
        )
        .await?;
    let now = s.broker.clock().now();
    Ok(Json(MessageList {
        messages: deliveries
            .iter()
            .map(|d| message_out(&d.message, Some((&d.lock_token, d.locked_until)), now))
            .collect(),
    }))
}

async fn receive_deferred(
    State(s): State<AppState>,
    Path(queue): Path<String>,
    ApiJson(req): ApiJson<ReceiveDeferred>,
) -> Result<Json<MessageList>, ApiError> {
    let deliveries = s
        .broker
        .receive_deferred(&queue, &req.sequence_numbers, req.lock_duration_ms)
        .await?;
    let now = s.broker.clock().now();
    Ok(Json(MessageList {
        messages: deliveries
            .iter()
            .map(|d| message_out(&d.message, Some((&d.lock_token, d.locked_until)), now))
            .collect(),
    }))
}

async fn cancel_scheduled(
    State(s): State<AppState>,
    Path((queue, seq)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let seq: i64 = seq.parse().map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("sequence number {seq:?} is not a number"),
        )
    })?;
    s.broker.cancel_scheduled(&queue, seq).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A settlement from the wire to the broker's input: its lock token parsed (a string that
/// cannot be one is settled as a lost lock), its action checked.
fn settlement(s: Settle) -> Result<(Named<LockToken>, redrive_broker::Settle), ApiError> {
    use redrive_broker::Settle as To;
    if s.action != SettleKind::DeadLetter {
        for (field, given) in [("consumer", &s.consumer), ("rule_version", &s.rule_version)] {
            if given.is_some() {
                return Err(ApiError::new(
                    ErrorCode::InvalidRequest,
                    format!("`{field}` is given with a dead_letter settlement only"),
                ));
            }
        }
    }
    let action = match s.action {
        SettleKind::Complete => To::Complete,
        SettleKind::Abandon => To::Abandon {
            delay_ms: s.delay_ms,
        },
        SettleKind::Defer => To::Defer,
        SettleKind::DeadLetter => To::DeadLetter {
            reason: s.reason.ok_or_else(|| {
                ApiError::new(ErrorCode::InvalidRequest, "dead_letter needs a `reason`")
            })?,
            description: s.description,
            classifier: redrive_core::Classifier {
                consumer: s.consumer,
                rule_version: s.rule_version,
            },
        },
        SettleKind::Renew => To::Renew {
            lock_ms: s.lock_duration_ms,
        },
    };
    Ok((s.lock_token.parse(), action))
}

async fn settle(
    State(s): State<AppState>,
    Path(queue): Path<String>,
    ApiJson(body): ApiJson<Value>,
) -> Result<Response, ApiError> {
    let (items, batch) = if body.get("settlements").is_some() {
        match from_json::<SettleRequest>(body)? {
            SettleRequest::Batch { settlements } => (settlements, true),
            SettleRequest::One(one) => (vec![one], false),
        }
    } else {
        (vec![from_json::<Settle>(body)?], false)
    };
    // Each answer names its token as the request gave it.
    let tokens: Vec<String> = items.iter().map(|s| s.lock_token.clone()).collect();
    let settlements = items
        .into_iter()
        .map(settlement)
        .collect::<Result<Vec<_>, _>>()?;
    let outcome = s.broker.settle(&queue, settlements).await?;
    let mut results = Vec::with_capacity(tokens.len());
    for (token, r) in tokens.into_iter().zip(outcome) {
        results.push(match r {
            Ok(st) => SettleResult {
                lock_token: token,
                sequence_number: Some(st.sequence),
                locked_until: st.locked_until.map(|t| t.to_rfc3339()),
                dead_letter_id: st.dead_letter_id,
                error: None,
            },
            Err(e) => {
                let p = problem_for(&e);
                if !batch {
                    return Err(ApiError(Box::new(p)));
                }
                SettleResult {
                    lock_token: token,
                    sequence_number: None,
                    locked_until: None,
                    dead_letter_id: None,
                    error: Some(p),
                }
            }
        });
    }
    if batch {
        Ok(Json(SettleResponse { results }).into_response())
    } else {
        Ok(Json(results.remove(0)).into_response())
    }
}

pub(crate) fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/queues/{name}/messages", get(peek).post(send))
        .route(
            "/v1/queues/{name}/messages/scheduled/{seq}",
            delete(cancel_scheduled),
        )
        .route(
            "/v1/queues/{name}/messages/deferred/receive",
            post(receive_deferred),
        )
        .route("/v1/queues/{name}/receive", post(receive))
        .route("/v1/queues/{name}/settle", post(settle))
}
