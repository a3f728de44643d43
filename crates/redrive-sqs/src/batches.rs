//! Batch actions: `SendMessageBatch`, `DeleteMessageBatch`, `ChangeMessageVisibilityBatch`.
//! The batch as a whole is checked first (empty, more than 10 entries, entry ids invalid or
//! not distinct, total size); then each entry succeeds or fails on its own.

use std::collections::HashSet;

use redrive_broker::{LockBounds, Settle};
use redrive_core::id::given;
use serde_json::{Map, Value, json};

use crate::error::{ErrorKind, SqsError, SqsResult};
use crate::messages::{prepare, sent_fields, settle_refusal, visibility_ms};
use crate::protocol::{obj_list, req_str};
use crate::receipts;
use crate::{Ctx, queue_from_input};

/// Most entries in one batch.
const MAX_ENTRIES: usize = 10;

/// Checks the batch as a whole; returns the entries and their ids.
fn entries(input: &Map<String, Value>) -> SqsResult<Vec<(String, &Map<String, Value>)>> {
    let list = obj_list(input, "Entries")?;
    if list.is_empty() {
        return Err(SqsError::new(
            ErrorKind::EmptyBatchRequest,
            "There should be at least one entry in the request.",
        ));
    }
    if list.len() > MAX_ENTRIES {
        return Err(SqsError::new(
            ErrorKind::TooManyEntriesInBatchRequest,
            format!(
                "Maximum number of entries per request are {MAX_ENTRIES}. You have sent {}.",
                list.len()
            ),
        ));
    }
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(list.len());
    for e in list {
        let id = req_str(e, "Id")?;
        let valid = !id.is_empty()
            && id.len() <= 80
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !valid {
            return Err(SqsError::new(
                ErrorKind::InvalidBatchEntryId,
                format!(
                    "A batch entry id can only contain alphanumeric characters, hyphens and \
                     underscores. It can be at most 80 letters long: {id:?}."
                ),
            ));
        }
        if !seen.insert(id) {
            return Err(SqsError::new(
                ErrorKind::BatchEntryIdsNotDistinct,
                format!("Id {id} repeated."),
            ));
        }
        out.push((id.to_owned(), e));
    }
    Ok(out)
}

fn failed(id: &str, e: &SqsError) -> Value {
    json!({
        "Id": id,
        "SenderFault": e.kind.status() < 500,
        "Code": e.kind.code(),
        "Message": e.message,
    })
}

fn answer(successful: Vec<Value>, failed: Vec<Value>) -> Value {
    json!({ "Successful": successful, "Failed": failed })
}

/// `SendMessageBatch`: the entries that pass their checks are sent together.
pub(crate) async fn send(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let queue = queue_from_input(input)?;
    let list = entries(input)?;
    // The entries that pass their checks against the queue's policy are sent together.
    let (sent, (ok, bad)) = ctx
        .broker()
        .send_built(&queue, |policy| {
            let mut ok = Vec::new();
            let mut bad = Vec::new();
            let mut outgoing = Vec::new();
            let mut total = 0usize;
            for (id, e) in &list {
                match prepare(ctx, &queue, policy, e) {
                    Ok(mut p) => {
                        total += p.size;
                        outgoing.push(std::mem::take(&mut p.outgoing));
                        ok.push((id.clone(), p));
                    }
                    Err(err) => bad.push(failed(id, &err)),
                }
            }
            if total > policy.max_message_size as usize {
                return Err(SqsError::new(
                    ErrorKind::BatchRequestTooLong,
                    format!(
                        "Batch requests cannot be longer than {} bytes. You have sent {total} \
                         bytes.",
                        policy.max_message_size
                    ),
                ));
            }
            Ok((outgoing, (ok, bad)))
        })
        .await?;
    let mut successful = Vec::with_capacity(ok.len());
    for ((id, p), e) in ok.iter().zip(sent) {
        let mut fields = sent_fields(p, &e);
        fields.insert("Id".to_owned(), Value::String(id.clone()));
        successful.push(Value::Object(fields));
    }
    Ok(answer(successful, bad))
}

/// `DeleteMessageBatch`.
pub(crate) async fn delete(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    settle_batch(ctx, input, true).await
}

/// `ChangeMessageVisibilityBatch`.
pub(crate) async fn change_visibility(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    settle_batch(ctx, input, false).await
}

async fn settle_batch(ctx: &Ctx, input: &Map<String, Value>, delete: bool) -> SqsResult<Value> {
    let queue = queue_from_input(input)?;
    let list = entries(input)?;
    ctx.broker().queue_record(&queue).await?;
    let mut bad = Vec::new();
    let mut items = Vec::new();
    let mut ids = Vec::new();
    for (id, e) in &list {
        let checked = req_str(e, "ReceiptHandle").and_then(|h| {
            let lock_token = receipts::lock_token(h, &queue)?;
            let action = if delete {
                Settle::Complete
            } else {
                Settle::Renew {
                    lock_ms: Some(visibility_ms(e)?),
                }
            };
            Ok((lock_token, action))
        });
        match checked {
            Ok(s) => {
                items.push(s);
                ids.push(id.clone());
            }
            Err(err) => bad.push(failed(id, &err)),
        }
    }
    let mut successful = Vec::new();
    if !items.is_empty() {
        {
            let mut attempts = ctx.attempts();
            for (token, _) in &items {
                attempts.modified(&queue, given(token));
            }
        }
        let out = ctx
            .broker()
            .settle_with(&queue, items, LockBounds::Sqs)
            .await?;
        for (id, r) in ids.into_iter().zip(out) {
            match r.err().and_then(|e| settle_refusal(e, delete)) {
                None => successful.push(json!({ "Id": id })),
                Some(err) => bad.push(failed(&id, &err)),
            }
        }
    }
    Ok(answer(successful, bad))
}
