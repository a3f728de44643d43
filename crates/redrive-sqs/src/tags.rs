//! Queue tags: `TagQueue`, `UntagQueue`, `ListQueueTags`. Tags live in the policy's `sqs`
//! section; a change is a policy update through the broker.

use redrive_core::sqs::MAX_TAGS;
use serde_json::{Map, Value, json};

use crate::attributes::{change_policy, effective};
use crate::error::{ErrorKind, SqsError, SqsResult};
use crate::protocol::{str_list, str_map};
use crate::{Ctx, queue_from_input};

/// Checks tag keys and values, and that `existing` plus the new ones stay within the limit.
pub(crate) fn check_tags(tags: &[(String, String)], existing: usize) -> SqsResult<()> {
    for (k, v) in tags {
        if k.is_empty() || k.chars().count() > 128 {
            return Err(SqsError::new(
                ErrorKind::InvalidParameterValue,
                format!("Tag key {k:?} must be 1 to 128 characters."),
            ));
        }
        if k.to_ascii_lowercase().starts_with("aws:") {
            return Err(SqsError::new(
                ErrorKind::InvalidParameterValue,
                format!("Tag key {k:?} uses the reserved prefix aws:."),
            ));
        }
        if v.chars().count() > 256 {
            return Err(SqsError::new(
                ErrorKind::InvalidParameterValue,
                format!("The value of tag {k:?} must be at most 256 characters."),
            ));
        }
    }
    if existing + tags.len() > MAX_TAGS {
        return Err(SqsError::new(
            ErrorKind::InvalidParameterValue,
            format!("Too many tags: a queue holds at most {MAX_TAGS}."),
        ));
    }
    Ok(())
}

/// `TagQueue`.
pub(crate) async fn tag(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let queue = queue_from_input(input)?;
    let tags = str_map(input, "Tags")?;
    if tags.is_empty() {
        return Err(SqsError::missing("Tags"));
    }
    change_policy(ctx, &queue, |current| {
        let mut policy = current.clone();
        let mut s = effective(&policy);
        let new = tags.iter().filter(|(k, _)| !s.tags.contains_key(k)).count();
        check_tags(&tags, 0)?;
        if s.tags.len() + new > MAX_TAGS {
            return Err(SqsError::new(
                ErrorKind::InvalidParameterValue,
                format!("Too many tags: a queue holds at most {MAX_TAGS}."),
            ));
        }
        s.tags.extend(tags.iter().cloned());
        policy.sqs = Some(s);
        Ok(policy)
    })
    .await?;
    Ok(json!({}))
}

/// `UntagQueue`.
pub(crate) async fn untag(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let queue = queue_from_input(input)?;
    let keys = str_list(input, "TagKeys")?;
    if keys.is_empty() {
        return Err(SqsError::missing("TagKeys"));
    }
    change_policy(ctx, &queue, |current| {
        let mut policy = current.clone();
        let mut s = effective(&policy);
        for k in &keys {
            s.tags.remove(k);
        }
        policy.sqs = Some(s);
        Ok(policy)
    })
    .await?;
    Ok(json!({}))
}

/// `ListQueueTags`.
pub(crate) async fn list(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let queue = queue_from_input(input)?;
    let record = ctx.broker().queue_record(&queue).await?;
    let tags = record.policy.sqs.map(|s| s.tags).unwrap_or_default();
    if tags.is_empty() {
        return Ok(json!({}));
    }
    Ok(json!({ "Tags": tags }))
}
