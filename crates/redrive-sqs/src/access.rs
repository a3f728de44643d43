//! Who may call which SQS action: each action's operation in the access model and where
//! its queue is named, so that tokens mapped to SQS credentials hold the same rights over
//! SQS as over the native API.

use redrive_broker::Actor;
use redrive_core::access::Operation;
use serde_json::{Map, Value};

use crate::error::SqsResult;
use crate::{Ctx, queue_from_input};

/// Where an action names its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueParam {
    /// `QueueUrl`.
    Url,
    /// `QueueName`.
    Name,
    /// `SourceArn` (move tasks).
    SourceArn,
    /// No single queue (listing, cancelling a task by its handle).
    None,
}

/// The operations that permit an action (any of them) and where it names its queue;
/// `None` for an action this endpoint does not serve.
pub fn rule(action: &str) -> Option<(&'static [Operation], QueueParam)> {
    use Operation::*;
    use QueueParam as P;
    Some(match action {
        "CreateQueue" => (&[CreateEntity], P::Name),
        // A producer or consumer looks its queue's URL up before anything else.
        "GetQueueUrl" => (&[ReadMetadata, Send, Receive], P::Name),
        "ListQueues" | "ListDeadLetterSourceQueues" => (&[ReadMetadata], P::None),
        "DeleteQueue" => (&[DeleteEntity], P::Url),
        "PurgeQueue" => (&[Purge], P::Url),
        "GetQueueAttributes" | "ListQueueTags" => (&[ReadMetadata], P::Url),
        "SetQueueAttributes" | "TagQueue" | "UntagQueue" => (&[UpdatePolicy], P::Url),
        "SendMessage" | "SendMessageBatch" => (&[Send], P::Url),
        "ReceiveMessage" => (&[Receive], P::Url),
        "DeleteMessage"
        | "DeleteMessageBatch"
        | "ChangeMessageVisibility"
        | "ChangeMessageVisibilityBatch" => (&[Settle], P::Url),
        "StartMessageMoveTask" => (&[Replay], P::SourceArn),
        "CancelMessageMoveTask" => (&[Replay], P::None),
        "ListMessageMoveTasks" => (&[ReadReplays], P::SourceArn),
        _ => return None,
    })
}

/// The queue an input names for `param` (`None` when it names none or is malformed: the
/// action itself then refuses the input).
fn queue(input: &Map<String, Value>, param: QueueParam) -> Option<String> {
    match param {
        QueueParam::Url => queue_from_input(input).ok(),
        QueueParam::Name => input
            .get("QueueName")
            .and_then(Value::as_str)
            .map(str::to_owned),
        QueueParam::SourceArn => input
            .get("SourceArn")
            .and_then(Value::as_str)
            .and_then(|a| a.rsplit(':').next())
            .map(str::to_owned),
        QueueParam::None => None,
    }
}

/// Refuses the action unless the caller's grants permit it on its queue (audited).
pub(crate) async fn authorize(
    ctx: &Ctx,
    action: &str,
    input: &Map<String, Value>,
) -> SqsResult<()> {
    let Some((ops, param)) = rule(action) else {
        return Ok(());
    };
    let entity = queue(input, param);
    let actor: &Actor = &ctx.actor;
    if ops.iter().any(|op| actor.permits(*op, entity.as_deref())) {
        return Ok(());
    }
    ctx.broker()
        .authorize(actor, ops[0], entity.as_deref())
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_served_action_has_a_rule() {
        for a in crate::ACTIONS {
            assert!(rule(a).is_some(), "{a}");
        }
        assert!(rule("AddPermission").is_none());
    }
}
