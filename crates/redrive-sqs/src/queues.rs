//! Queue actions: `CreateQueue`, `GetQueueUrl`, `ListQueues`, `DeleteQueue`, `PurgeQueue`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use redrive_broker::Storage;
use serde_json::{Map, Value, json};

use crate::attributes::{apply_all, default_policy, redrive_error, same_as};
use crate::error::{ErrorKind, SqsError, SqsResult};
use crate::protocol::{opt_int, opt_str, req_str, str_map};
use crate::tags::check_tags;
use crate::{Ctx, is_fifo, queue_from_input, valid_queue_name};

/// Shortest time between two purges of one queue (SQS: 60 seconds).
const PURGE_INTERVAL_MS: i64 = 60_000;

/// `CreateQueue`: idempotent with identical attributes, `QueueAlreadyExists` otherwise.
pub(crate) async fn create(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let name = req_str(input, "QueueName")?;
    let attrs = str_map(input, "Attributes")?;
    let fifo_asked = attrs
        .iter()
        .any(|(k, v)| k == "FifoQueue" && v.eq_ignore_ascii_case("true"));
    if fifo_asked && !(is_fifo(name) && valid_queue_name(name)) {
        return Err(SqsError::new(
            ErrorKind::InvalidParameterValue,
            "The name of a FIFO queue can only include alphanumeric characters, hyphens, or \
             underscores, must end with .fifo suffix and be 1 to 80 in length.",
        ));
    }
    if !valid_queue_name(name) || (is_fifo(name) && !fifo_asked) {
        return Err(SqsError::new(
            ErrorKind::InvalidParameterValue,
            "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length",
        ));
    }
    let mut tags = str_map(input, "tags")?;
    tags.extend(str_map(input, "Tags")?);
    let mut policy = default_policy(name);
    apply_all(&mut policy, name, &attrs)?;
    check_tags(&tags, 0)?;
    if let Some(s) = policy.sqs.as_mut() {
        s.tags.extend(tags);
    }
    match ctx.broker().get_queue(name).await {
        Ok(view) => {
            if let Some(differs) = same_as(ctx, &view, &attrs) {
                return Err(SqsError::new(
                    ErrorKind::QueueNameExists,
                    format!(
                        "A queue already exists with the same name and a different value for attribute {differs}"
                    ),
                ));
            }
            return Ok(json!({ "QueueUrl": ctx.queue_url(name) }));
        }
        Err(e) if matches!(e.storage(), Some(Storage::QueueNotFound { .. })) => {}
        Err(e) => return Err(e.into()),
    }
    ctx.broker()
        .authorize_dead_letter_queue(&ctx.actor, None, policy.dead_letter_queue.as_ref())
        .await?;
    match ctx.broker().create_queue(name, policy).await {
        Ok(_) => {}
        // Created meanwhile by another request: the same rule as above applies.
        Err(e) if e.storage() == Some(Storage::QueueExists) => {
            let view = ctx.broker().get_queue(name).await?;
            if let Some(differs) = same_as(ctx, &view, &attrs) {
                return Err(SqsError::new(
                    ErrorKind::QueueNameExists,
                    format!(
                        "A queue already exists with the same name and a different value for attribute {differs}"
                    ),
                ));
            }
        }
        Err(e) => return Err(redrive_error(e)),
    }
    Ok(json!({ "QueueUrl": ctx.queue_url(name) }))
}

/// `GetQueueUrl`.
pub(crate) async fn get_url(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let name = req_str(input, "QueueName")?;
    if let Some(owner) = opt_str(input, "QueueOwnerAWSAccountId")?
        && owner != ctx.sqs.config.account_id
    {
        return Err(SqsError::no_queue());
    }
    if !valid_queue_name(name) {
        return Err(SqsError::no_queue());
    }
    ctx.broker().queue_record(name).await?;
    Ok(json!({ "QueueUrl": ctx.queue_url(name) }))
}

/// Reads `MaxResults` and `NextToken` of a paged listing.
pub(crate) fn page_params(
    input: &Map<String, Value>,
) -> SqsResult<(Option<usize>, Option<String>)> {
    let max = match opt_int(input, "MaxResults")? {
        None => None,
        Some(m) if (1..=1_000).contains(&m) => usize::try_from(m).ok(),
        Some(m) => {
            return Err(SqsError::invalid_param(
                "MaxResults",
                m,
                "MaxResults must be an integer between 1 and 1000.",
            ));
        }
    };
    let after = match opt_str(input, "NextToken")? {
        None | Some("") => None,
        Some(t) => Some(
            B64.decode(t)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| {
                    SqsError::invalid_param("NextToken", t, "Invalid NextToken value.")
                })?,
        ),
    };
    Ok((max, after))
}

/// One page of sorted `names` after `after`, as URLs, with the next token.
pub(crate) fn page(
    ctx: &Ctx,
    mut names: Vec<String>,
    max: Option<usize>,
    after: Option<&str>,
) -> (Vec<Value>, Option<String>) {
    names.sort();
    let rest: Vec<String> = names
        .into_iter()
        .filter(|n| after.is_none_or(|a| n.as_str() > a))
        .collect();
    let limit = max.unwrap_or(1_000);
    let more = max.is_some() && rest.len() > limit;
    let shown: Vec<String> = rest.into_iter().take(limit).collect();
    let next = if more {
        shown.last().map(|l| B64.encode(l.as_bytes()))
    } else {
        None
    };
    (
        shown
            .iter()
            .map(|n| Value::String(ctx.queue_url(n)))
            .collect(),
        next,
    )
}

/// `ListQueues`.
pub(crate) async fn list(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let prefix = opt_str(input, "QueueNamePrefix")?
        .unwrap_or_default()
        .to_owned();
    let (max, after) = page_params(input)?;
    let names: Vec<String> = ctx
        .broker()
        .list_queues()
        .await?
        .into_iter()
        .map(|v| v.record.name.to_string())
        .filter(|n| n.starts_with(&prefix))
        // Only the queues the caller may read.
        .filter(|n| {
            ctx.actor
                .permits(redrive_core::access::Operation::ReadMetadata, Some(n))
        })
        .collect();
    let (urls, next) = page(ctx, names, max, after.as_deref());
    let mut out = Map::new();
    if !urls.is_empty() {
        out.insert("QueueUrls".to_owned(), Value::Array(urls));
    }
    if let Some(n) = next {
        out.insert("NextToken".to_owned(), Value::String(n));
    }
    Ok(Value::Object(out))
}

/// `DeleteQueue`: deletes even a non-empty queue, as SQS does.
pub(crate) async fn delete(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let queue = queue_from_input(input)?;
    ctx.broker().delete_queue(&queue, true, &ctx.actor).await?;
    if let Ok(mut p) = ctx.sqs.purges.lock() {
        p.remove(&queue);
    }
    Ok(json!({}))
}

/// `PurgeQueue`: removes every message, in flight ones too (their receipt handles go
/// stale); one per 60 seconds per queue, timed by the broker's clock.
pub(crate) async fn purge(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let queue = queue_from_input(input)?;
    ctx.broker().queue_record(&queue).await?;
    let now = ctx.now();
    {
        let mut purges = ctx
            .sqs
            .purges
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(last) = purges.get(&queue)
            && now.as_millis() - last.as_millis() < PURGE_INTERVAL_MS
        {
            return Err(SqsError::new(
                ErrorKind::PurgeQueueInProgress,
                format!("Only one PurgeQueue operation on {queue} is allowed every 60 seconds."),
            ));
        }
        purges.insert(queue.clone(), now);
    }
    ctx.broker().purge(&queue, &ctx.actor).await?;
    Ok(json!({}))
}
