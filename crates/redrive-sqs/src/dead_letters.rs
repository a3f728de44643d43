//! Dead-letter actions: `ListDeadLetterSourceQueues` (the queues whose redrive policy
//! names this queue), and the message move tasks (`StartMessageMoveTask`,
//! `ListMessageMoveTasks`, `CancelMessageMoveTask`) over the broker's mover. Tasks are kept in
//! the store: any node lists and cancels them, and one whose node stops is resumed by
//! another (or by the same after a restart).

use redrive_broker::{MAX_MOVE_RATE, MoveError, MoveSpec, MoveTask, Storage, is_move_task_handle};
use serde_json::{Map, Value, json};

use crate::attributes::name_from_arn;
use crate::error::{ErrorKind, SqsError, SqsResult};
use crate::protocol::{opt_int, opt_str, req_str};
use crate::queues::{page, page_params};
use crate::{Ctx, queue_from_input};

/// Most tasks `ListMessageMoveTasks` returns.
const MAX_LISTED_TASKS: i64 = 10;

fn not_found(what: &str) -> SqsError {
    SqsError::new(
        ErrorKind::ResourceNotFound,
        format!("The resource that you requested couldn't be found: {what}."),
    )
}

/// The queue an ARN parameter names.
fn arn_param(param: &str, arn: &str) -> SqsResult<String> {
    name_from_arn(arn)
        .map(str::to_owned)
        .ok_or_else(|| SqsError::invalid_param(param, arn, "It must be an Amazon SQS queue ARN."))
}

/// What a refused move-task action means to SQS.
///
/// Evidence for the codes: botocore's SQS model (`botocore/data/sqs/2012-11-05/
/// service-2.json`) lists only `ResourceNotFoundException`, `RequestThrottled`,
/// `InvalidAddress`, `InvalidSecurity` and `UnsupportedOperation` for
/// `StartMessageMoveTask` and `CancelMessageMoveTask`; `InvalidParameterValue` is one of
/// the errors common to all actions (AWS API reference, "Common Errors"). What AWS
/// answers in each case was recorded against AWS in LocalStack's move-task tests
/// (`tests/aws/services/sqs/test_sqs_move_task.snapshot.json`, January 2024):
/// - a second start on a source with a running task: `InvalidParameterValue`, 400,
///   "There is already a task running. Only one active task is allowed for a source queue
///   arn at a given time." (`test_start_multiple_move_tasks`);
/// - cancel with a handle that is not one AWS issues: `InvalidParameterValue`, 400,
///   "Value for parameter TaskHandle is invalid." (`test_cancel_with_invalid_task_handle`;
///   see [`cancel_move`]);
/// - cancel with a well-formed handle naming no task: `ResourceNotFoundException`, 404,
///   "Task does not exist." (`test_cancel_with_invalid_task_id_in_task_handle`).
fn move_error(e: MoveError) -> SqsError {
    match e {
        MoveError::NotFound(_) => {
            SqsError::new(ErrorKind::ResourceNotFound, "Task does not exist.")
        }
        MoveError::NotRunning(_) => SqsError::new(
            ErrorKind::ResourceNotFound,
            "A message move task can be cancelled only while its status is RUNNING.",
        ),
        MoveError::AlreadyRunning(_) => SqsError::new(
            ErrorKind::InvalidParameterValue,
            "There is already a task running. Only one active task is allowed for a source \
             queue arn at a given time.",
        ),
        MoveError::Broker(other) => match other.storage() {
            Some(Storage::QueueNotFound { queue }) => not_found(&format!("queue {queue}")),
            _ => other.into(),
        },
    }
}

/// `StartMessageMoveTask`: the source must be a dead-letter queue of some queue.
pub(crate) async fn start_move(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let source_arn = req_str(input, "SourceArn")?;
    let source = arn_param("SourceArn", source_arn)?;
    let destination = match opt_str(input, "DestinationArn")? {
        None | Some("") => None,
        Some(arn) => Some(arn_param("DestinationArn", arn)?),
    };
    let rate = match opt_int(input, "MaxNumberOfMessagesPerSecond")? {
        None => None,
        Some(r) if (1..=i64::from(MAX_MOVE_RATE)).contains(&r) => u32::try_from(r).ok(),
        Some(r) => {
            return Err(SqsError::invalid_param(
                "MaxNumberOfMessagesPerSecond",
                r,
                "MaxNumberOfMessagesPerSecond must be between 1 and 500.",
            ));
        }
    };
    let sources = match ctx.broker().dead_letter_sources(&source).await {
        Ok(sources) => sources,
        Err(e) if matches!(e.storage(), Some(Storage::QueueNotFound { .. })) => {
            return Err(not_found(&format!("queue {source_arn}")));
        }
        Err(e) => return Err(e.into()),
    };
    if sources.is_empty() {
        return Err(SqsError::new(
            ErrorKind::InvalidParameterValue,
            format!(
                "Value {source_arn} for parameter SourceArn is invalid. Reason: Source queue \
                 must be configured as a Dead Letter Queue."
            ),
        ));
    }
    if let Some(d) = &destination
        && d == &source
    {
        return Err(SqsError::invalid_param(
            "DestinationArn",
            d,
            "The destination must be another queue than the source.",
        ));
    }
    let task = ctx
        .broker()
        .start_move_task(MoveSpec {
            source,
            destination,
            max_per_second: rate,
            owner: ctx.actor.clone(),
        })
        .await
        .map_err(move_error)?;
    Ok(json!({ "TaskHandle": task.handle }))
}

fn task_out(ctx: &Ctx, t: &MoveTask) -> Value {
    let mut out = Map::new();
    if t.status == redrive_broker::MoveStatus::Running {
        out.insert("TaskHandle".to_owned(), Value::String(t.handle.clone()));
    }
    out.insert(
        "Status".to_owned(),
        Value::String(t.status.as_str().to_owned()),
    );
    out.insert(
        "SourceArn".to_owned(),
        Value::String(ctx.queue_arn(&t.spec.source)),
    );
    if let Some(d) = &t.spec.destination {
        out.insert("DestinationArn".to_owned(), Value::String(ctx.queue_arn(d)));
    }
    if let Some(r) = t.spec.max_per_second {
        out.insert("MaxNumberOfMessagesPerSecond".to_owned(), json!(r));
    }
    out.insert(
        "ApproximateNumberOfMessagesMoved".to_owned(),
        json!(t.moved),
    );
    out.insert(
        "ApproximateNumberOfMessagesToMove".to_owned(),
        json!(t.to_move),
    );
    if let Some(f) = &t.failure {
        out.insert("FailureReason".to_owned(), Value::String(f.clone()));
    }
    out.insert(
        "StartedTimestamp".to_owned(),
        json!(t.started_at.as_millis()),
    );
    Value::Object(out)
}

/// `ListMessageMoveTasks`: the most recent tasks of a source queue (default 1, up to 10).
pub(crate) async fn list_moves(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let source_arn = req_str(input, "SourceArn")?;
    let source = arn_param("SourceArn", source_arn)?;
    let max = match opt_int(input, "MaxResults")? {
        None => 1,
        Some(m) if (1..=MAX_LISTED_TASKS).contains(&m) => m,
        Some(m) => {
            return Err(SqsError::invalid_param(
                "MaxResults",
                m,
                "MaxResults must be between 1 and 10.",
            ));
        }
    };
    match ctx.broker().queue_record(&source).await {
        Ok(_) => {}
        Err(e) if matches!(e.storage(), Some(Storage::QueueNotFound { .. })) => {
            return Err(not_found(&format!("queue {source_arn}")));
        }
        Err(e) => return Err(e.into()),
    }
    let results: Vec<Value> = ctx
        .broker()
        .list_move_tasks(&source, usize::try_from(max).unwrap_or(1))
        .await?
        .iter()
        .map(|t| task_out(ctx, t))
        .collect();
    Ok(json!({ "Results": results }))
}

/// `CancelMessageMoveTask`: stops a running task; answers how many it moved.
pub(crate) async fn cancel_move(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let handle = req_str(input, "TaskHandle")?;
    // A handle of another shape than the broker's is malformed, not unknown (see
    // `move_error` for AWS's answers).
    if !is_move_task_handle(handle) {
        return Err(SqsError::new(
            ErrorKind::InvalidParameterValue,
            "Value for parameter TaskHandle is invalid.",
        ));
    }
    let task = ctx
        .broker()
        .cancel_move_task(handle, &ctx.actor)
        .await
        .map_err(move_error)?;
    Ok(json!({ "ApproximateNumberOfMessagesMoved": task.moved }))
}

/// `ListDeadLetterSourceQueues`.
pub(crate) async fn list_sources(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let queue = queue_from_input(input)?;
    let (max, after) = page_params(input)?;
    let names: Vec<String> = ctx
        .broker()
        .dead_letter_sources(&queue)
        .await?
        .into_iter()
        .map(|n| n.to_string())
        .collect();
    let (urls, next) = page(ctx, names, max, after.as_deref());
    let mut out = Map::new();
    out.insert("queueUrls".to_owned(), Value::Array(urls));
    if let Some(n) = next {
        out.insert("NextToken".to_owned(), Value::String(n));
    }
    Ok(Value::Object(out))
}
