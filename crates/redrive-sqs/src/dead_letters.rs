//! Dead-letter actions: `ListDeadLetterSourceQueues` (the queues whose redrive policy
//! names this queue). Message move tasks come in a later phase.

use serde_json::{Map, Value};

use crate::error::SqsResult;
use crate::queues::{page, page_params};
use crate::{Ctx, queue_from_input};

/// `ListDeadLetterSourceQueues`.
pub(crate) async fn list_sources(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let queue = queue_from_input(input)?;
    let (max, after) = page_params(input)?;
    ctx.broker().queue_record(&queue).await?;
    let names: Vec<String> = ctx
        .broker()
        .list_queues()
        .await?
        .into_iter()
        .filter(|v| {
            v.record
                .policy
                .dead_letter_queue
                .as_ref()
                .is_some_and(|d| d.as_str() == queue)
        })
        .map(|v| v.record.name.to_string())
        .collect();
    let (urls, next) = page(ctx, names, max, after.as_deref());
    let mut out = Map::new();
    out.insert("queueUrls".to_owned(), Value::Array(urls));
    if let Some(n) = next {
        out.insert("NextToken".to_owned(), Value::String(n));
    }
    Ok(Value::Object(out))
}
