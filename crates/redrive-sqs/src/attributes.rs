//! Queue attributes: `GetQueueAttributes`, `SetQueueAttributes`, and the mapping between
//! SQS attributes and the native policy (with its `sqs` section).

use redrive_broker::BrokerError;
use redrive_broker::QueueView;
use redrive_broker::model::QueueRecord;
use redrive_core::policy::MAX_DELIVERY_COUNT_LIMIT;
use redrive_core::{EntityName, QueuePolicy, SqsAttributes, sqs};
use serde_json::{Map, Value, json};

use crate::error::{ErrorKind, SqsError, SqsResult};
use crate::protocol::{str_list, str_map};
use crate::{Ctx, is_fifo, queue_from_input};

/// SQS default `MaximumMessageSize` (1 MiB) and its bounds.
const MIN_MESSAGE_SIZE: u32 = 1_024;
const MAX_MESSAGE_SIZE: u32 = 1_048_576;

/// Names `GetQueueAttributes` knows.
const READABLE: &[&str] = &[
    "All",
    "Policy",
    "VisibilityTimeout",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
    "ApproximateNumberOfMessagesDelayed",
    "DelaySeconds",
    "ReceiveMessageWaitTimeSeconds",
    "RedrivePolicy",
    "FifoQueue",
    "ContentBasedDeduplication",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "DeduplicationScope",
    "FifoThroughputLimit",
    "RedriveAllowPolicy",
    "SqsManagedSseEnabled",
];

/// Attributes accepted and reported but not acted on.
const INERT: &[&str] = &[
    "Policy",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "SqsManagedSseEnabled",
];

/// SQS's deduplication interval of FIFO queues (5 minutes).
pub(crate) const FIFO_DEDUP_WINDOW_MS: u64 = 300_000;

/// FIFO attributes kept in the `sqs` section's `other_attributes`, with their defaults.
const FIFO_DEFAULTS: &[(&str, &str)] = &[
    ("ContentBasedDeduplication", "false"),
    ("DeduplicationScope", "queue"),
    ("FifoThroughputLimit", "perQueue"),
];

/// The policy of a queue created through SQS with no attributes. A FIFO queue orders its
/// message groups (`group_ordering`; the group is the native session id) and detects
/// duplicates for 5 minutes.
pub(crate) fn default_policy(name: &str) -> QueuePolicy {
    let mut sqs = SqsAttributes::default();
    let fifo = is_fifo(name);
    if fifo {
        for (k, v) in FIFO_DEFAULTS {
            sqs.other_attributes
                .insert((*k).to_owned(), (*v).to_owned());
        }
    }
    QueuePolicy {
        max_delivery_count: MAX_DELIVERY_COUNT_LIMIT,
        default_ttl_ms: Some(u64::from(SqsAttributes::default().retention_s) * 1_000),
        max_message_size: MAX_MESSAGE_SIZE,
        group_ordering: fifo,
        duplicate_detection_window_ms: if fifo { FIFO_DEDUP_WINDOW_MS } else { 0 },
        sqs: Some(sqs),
        ..QueuePolicy::default()
    }
}

/// A FIFO attribute of a queue (`ContentBasedDeduplication`, `DeduplicationScope`,
/// `FifoThroughputLimit`), with its default when unset.
pub(crate) fn fifo_attr(policy: &QueuePolicy, name: &str) -> String {
    let s = effective(policy);
    s.other_attributes.get(name).cloned().unwrap_or_else(|| {
        FIFO_DEFAULTS
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
            .unwrap_or_default()
    })
}

/// The SQS attributes of a queue: its `sqs` section, or, for a queue SQS never touched,
/// the values its native policy implies.
pub(crate) fn effective(policy: &QueuePolicy) -> SqsAttributes {
    if let Some(s) = &policy.sqs {
        return s.clone();
    }
    let secs = |ms: u64| u32::try_from(ms / 1_000).unwrap_or(u32::MAX);
    SqsAttributes {
        visibility_timeout_s: secs(policy.lock_duration_ms),
        retention_s: policy.default_ttl_ms.map_or(sqs::MAX_RETENTION_S, |t| {
            secs(t).clamp(sqs::MIN_RETENTION_S, sqs::MAX_RETENTION_S)
        }),
        ..SqsAttributes::default()
    }
}

fn int_attr(name: &str, value: &str, lo: i64, hi: i64) -> SqsResult<i64> {
    match value.trim().parse::<i64>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        _ => Err(SqsError::invalid_attr(
            name,
            &format!("must be an integer from {lo} to {hi}"),
        )),
    }
}

fn to_u32(v: i64) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

/// The queue name an SQS ARN names (`arn:aws:sqs:<region>:<account>:<name>`).
pub(crate) fn name_from_arn(arn: &str) -> Option<&str> {
    let parts: Vec<&str> = arn.split(':').collect();
    match parts.as_slice() {
        ["arn", _, "sqs", _, _, name] if crate::valid_queue_name(name) => Some(name),
        _ => None,
    }
}

fn bad_redrive(value: &str, why: &str) -> SqsError {
    SqsError::invalid_param("RedrivePolicy", value, why)
}

/// Applies one SQS attribute to a policy (validating it); nothing is stored here.
pub(crate) fn apply(
    policy: &mut QueuePolicy,
    queue: &str,
    name: &str,
    value: &str,
) -> SqsResult<()> {
    let mut s = effective(policy);
    match name {
        "VisibilityTimeout" => {
            let v = to_u32(int_attr(name, value, 0, 43_200)?);
            s.visibility_timeout_s = v;
            policy.lock_duration_ms = if (1..=300).contains(&v) {
                u64::from(v) * 1_000
            } else {
                QueuePolicy::default().lock_duration_ms
            };
        }
        "DelaySeconds" => s.delay_s = to_u32(int_attr(name, value, 0, 900)?),
        "ReceiveMessageWaitTimeSeconds" => s.receive_wait_s = to_u32(int_attr(name, value, 0, 20)?),
        "MessageRetentionPeriod" => {
            let v = to_u32(int_attr(name, value, 60, 1_209_600)?);
            s.retention_s = v;
            policy.default_ttl_ms = Some(u64::from(v) * 1_000);
            policy.dead_letter_on_expiry = false;
        }
        "MaximumMessageSize" => {
            policy.max_message_size = to_u32(int_attr(
                name,
                value,
                i64::from(MIN_MESSAGE_SIZE),
                i64::from(MAX_MESSAGE_SIZE),
            )?);
        }
        "RedrivePolicy" => {
            if value.trim().is_empty() {
                policy.max_delivery_count = MAX_DELIVERY_COUNT_LIMIT;
                policy.dead_letter_queue = None;
            } else {
                let (target, max) = parse_redrive(value)?;
                if target == queue {
                    return Err(bad_redrive(
                        value,
                        "Dead letter target cannot be the queue itself.",
                    ));
                }
                if is_fifo(&target) != is_fifo(queue) {
                    return Err(bad_redrive(
                        value,
                        "Dead-letter queue must be same type of queue as the source.",
                    ));
                }
                let target: EntityName = target
                    .parse()
                    .map_err(|_| bad_redrive(value, "Invalid deadLetterTargetArn."))?;
                policy.max_delivery_count = max;
                policy.dead_letter_queue = Some(target);
            }
        }
        "RedriveAllowPolicy" => {
            if value.trim().is_empty() {
                s.redrive_allow_policy = None;
            } else {
                check_redrive_allow(value)?;
                s.redrive_allow_policy = Some(value.to_owned());
            }
        }
        "FifoQueue" => {
            if !(value.eq_ignore_ascii_case("true") || value.eq_ignore_ascii_case("false")) {
                return Err(SqsError::invalid_attr(name, "must be true or false"));
            }
        }
        "ContentBasedDeduplication" => {
            if !(value.eq_ignore_ascii_case("true") || value.eq_ignore_ascii_case("false")) {
                return Err(SqsError::invalid_attr(name, "must be true or false"));
            }
            s.other_attributes
                .insert(name.to_owned(), value.to_ascii_lowercase());
        }
        "DeduplicationScope" => {
            if !matches!(value, "queue" | "messageGroup") {
                return Err(SqsError::invalid_attr(
                    name,
                    "must be queue or messageGroup",
                ));
            }
            s.other_attributes.insert(name.to_owned(), value.to_owned());
        }
        "FifoThroughputLimit" => {
            if !matches!(value, "perQueue" | "perMessageGroupId") {
                return Err(SqsError::invalid_attr(
                    name,
                    "must be perQueue or perMessageGroupId",
                ));
            }
            s.other_attributes.insert(name.to_owned(), value.to_owned());
        }
        "KmsDataKeyReusePeriodSeconds" => {
            int_attr(name, value, 60, 86_400)?;
            s.other_attributes.insert(name.to_owned(), value.to_owned());
        }
        "SqsManagedSseEnabled" => {
            if !(value.eq_ignore_ascii_case("true") || value.eq_ignore_ascii_case("false")) {
                return Err(SqsError::invalid_attr(name, "must be true or false"));
            }
            s.other_attributes
                .insert(name.to_owned(), value.to_ascii_lowercase());
        }
        "Policy" | "KmsMasterKeyId" => {
            if name == "Policy"
                && !value.trim().is_empty()
                && serde_json::from_str::<Map<String, Value>>(value).is_err()
            {
                return Err(SqsError::invalid_attr(
                    name,
                    "must be a JSON policy document",
                ));
            }
            if value.is_empty() {
                s.other_attributes.remove(name);
            } else {
                s.other_attributes.insert(name.to_owned(), value.to_owned());
            }
        }
        _ => {
            return Err(SqsError::new(
                ErrorKind::InvalidAttributeName,
                format!("Unknown Attribute {name}."),
            ));
        }
    }
    policy.sqs = Some(s);
    Ok(())
}

fn parse_redrive(value: &str) -> SqsResult<(String, u32)> {
    let v: Map<String, Value> = serde_json::from_str(value)
        .map_err(|_| bad_redrive(value, "Redrive policy is not a valid JSON map."))?;
    for k in v.keys() {
        if k != "deadLetterTargetArn" && k != "maxReceiveCount" {
            return Err(bad_redrive(
                value,
                &format!(
                    "Only following attributes are supported: [deadLetterTargetArn, maxReceiveCount], found {k}."
                ),
            ));
        }
    }
    let arn = match v.get("deadLetterTargetArn") {
        Some(Value::String(s)) => s,
        _ => {
            return Err(bad_redrive(
                value,
                "Redrive policy does not contain mandatory attribute: deadLetterTargetArn.",
            ));
        }
    };
    let max = match v.get("maxReceiveCount") {
        Some(Value::Number(n)) => n.as_i64(),
        Some(Value::String(s)) => s.trim().parse::<i64>().ok(),
        None => {
            return Err(bad_redrive(
                value,
                "Redrive policy does not contain mandatory attribute: maxReceiveCount.",
            ));
        }
        _ => None,
    };
    let max = match max {
        Some(m) if (1..=1_000).contains(&m) => to_u32(m),
        _ => {
            return Err(bad_redrive(
                value,
                "Invalid value for maxReceiveCount: valid values are from 1 to 1000 both inclusive.",
            ));
        }
    };
    let name = name_from_arn(arn)
        .ok_or_else(|| bad_redrive(value, "Invalid value for deadLetterTargetArn."))?;
    Ok((name.to_owned(), max))
}

fn check_redrive_allow(value: &str) -> SqsResult<()> {
    let bad = |why: &str| SqsError::invalid_param("RedriveAllowPolicy", value, why);
    let v: Map<String, Value> =
        serde_json::from_str(value).map_err(|_| bad("Redrive allow policy is not valid JSON."))?;
    let perm = match v.get("redrivePermission") {
        Some(Value::String(s)) => s.as_str(),
        _ => return Err(bad("redrivePermission is required.")),
    };
    let arns = match v.get("sourceQueueArns") {
        None => 0,
        Some(Value::Array(a))
            if a.iter()
                .all(|x| x.as_str().is_some_and(|s| name_from_arn(s).is_some())) =>
        {
            a.len()
        }
        Some(_) => return Err(bad("sourceQueueArns must be a list of queue ARNs.")),
    };
    match perm {
        "allowAll" | "denyAll" if arns == 0 => Ok(()),
        "byQueue" if (1..=10).contains(&arns) => Ok(()),
        "allowAll" | "denyAll" => Err(bad("sourceQueueArns is allowed only with byQueue.")),
        "byQueue" => Err(bad("byQueue needs 1 to 10 sourceQueueArns.")),
        _ => Err(bad(
            "redrivePermission must be allowAll, denyAll or byQueue.",
        )),
    }
}

/// The `RedrivePolicy` text of a policy, if it has one.
fn redrive_text(ctx: &Ctx, policy: &QueuePolicy) -> Option<String> {
    policy.dead_letter_queue.as_ref().map(|dlq| {
        json!({
            "deadLetterTargetArn": ctx.queue_arn(dlq.as_str()),
            "maxReceiveCount": policy.max_delivery_count,
        })
        .to_string()
    })
}

/// Every readable attribute of a queue, by SQS name, as SQS writes them.
pub(crate) fn all(ctx: &Ctx, view: &QueueView) -> Vec<(&'static str, String)> {
    let rec: &QueueRecord = &view.record;
    let p = &rec.policy;
    let s = effective(p);
    let mut out = vec![
        ("QueueArn", ctx.queue_arn(rec.name.as_str())),
        (
            "ApproximateNumberOfMessages",
            view.counts.active.to_string(),
        ),
        (
            "ApproximateNumberOfMessagesNotVisible",
            view.counts.locked.to_string(),
        ),
        (
            "ApproximateNumberOfMessagesDelayed",
            view.counts.scheduled.to_string(),
        ),
        (
            "CreatedTimestamp",
            rec.created_at.as_millis().div_euclid(1_000).to_string(),
        ),
        (
            "LastModifiedTimestamp",
            rec.updated_at.as_millis().div_euclid(1_000).to_string(),
        ),
        ("VisibilityTimeout", s.visibility_timeout_s.to_string()),
        ("MaximumMessageSize", p.max_message_size.to_string()),
        ("MessageRetentionPeriod", s.retention_s.to_string()),
        ("DelaySeconds", s.delay_s.to_string()),
        (
            "ReceiveMessageWaitTimeSeconds",
            s.receive_wait_s.to_string(),
        ),
        (
            "SqsManagedSseEnabled",
            s.other_attributes
                .get("SqsManagedSseEnabled")
                .cloned()
                .unwrap_or_else(|| "true".to_owned()),
        ),
    ];
    if let Some(r) = redrive_text(ctx, p) {
        out.push(("RedrivePolicy", r));
    }
    if is_fifo(rec.name.as_str()) {
        out.push(("FifoQueue", "true".to_owned()));
        for (k, _) in FIFO_DEFAULTS {
            out.push((*k, fifo_attr(p, k)));
        }
    }
    if let Some(r) = &s.redrive_allow_policy {
        out.push(("RedriveAllowPolicy", r.clone()));
    }
    for name in ["Policy", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds"] {
        if let Some(v) = s.other_attributes.get(name) {
            out.push((name, v.clone()));
        }
    }
    out
}

/// `GetQueueAttributes`.
pub(crate) async fn get(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let queue = queue_from_input(input)?;
    let names = str_list(input, "AttributeNames")?;
    for n in &names {
        if !READABLE.contains(&n.as_str()) {
            return Err(SqsError::new(
                ErrorKind::InvalidAttributeName,
                format!("Unknown Attribute {n}."),
            ));
        }
    }
    let view = ctx.broker().get_queue(&queue).await?;
    let want_all = names.iter().any(|n| n == "All");
    let attrs: Map<String, Value> = all(ctx, &view)
        .into_iter()
        .filter(|(k, _)| want_all || names.iter().any(|n| n == k))
        .map(|(k, v)| (k.to_owned(), Value::String(v)))
        .collect();
    if attrs.is_empty() {
        return Ok(json!({}));
    }
    Ok(json!({ "Attributes": attrs }))
}

/// Checks every attribute of a create or set request and applies it to `policy`.
pub(crate) fn apply_all(
    policy: &mut QueuePolicy,
    queue: &str,
    attrs: &[(String, String)],
) -> SqsResult<()> {
    let fifo = is_fifo(queue);
    for (k, v) in attrs {
        if !fifo
            && matches!(
                k.as_str(),
                "ContentBasedDeduplication" | "DeduplicationScope" | "FifoThroughputLimit"
            )
        {
            return Err(SqsError::new(
                ErrorKind::InvalidAttributeName,
                format!("Unknown Attribute {k}."),
            ));
        }
        apply(policy, queue, k, v)?;
    }
    if fifo
        && fifo_attr(policy, "FifoThroughputLimit") == "perMessageGroupId"
        && fifo_attr(policy, "DeduplicationScope") != "messageGroup"
    {
        return Err(SqsError::invalid_attr(
            "FifoThroughputLimit",
            "perMessageGroupId is allowed only when DeduplicationScope is messageGroup",
        ));
    }
    Ok(())
}

/// `SetQueueAttributes`.
pub(crate) async fn set(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let queue = queue_from_input(input)?;
    let attrs = str_map(input, "Attributes")?;
    if attrs.is_empty() {
        return Err(SqsError::missing("Attributes"));
    }
    change_policy(ctx, &queue, |current| {
        if attrs.iter().any(|(k, _)| k == "FifoQueue") {
            return Err(SqsError::new(
                ErrorKind::InvalidAttributeName,
                "FifoQueue can be set only when the queue is created.",
            ));
        }
        let mut policy = current.clone();
        apply_all(&mut policy, &queue, &attrs)?;
        Ok(policy)
    })
    .await?;
    Ok(json!({}))
}

/// Why a policy change was refused: by the action's own checks, or by the broker.
enum Refused {
    Sqs(SqsError),
    Broker(BrokerError),
}

impl From<BrokerError> for Refused {
    fn from(e: BrokerError) -> Self {
        Refused::Broker(e)
    }
}

/// Changes a queue's policy from its current one through the broker
/// ([`redrive_broker::Broker::change_queue_policy`]), mapping a missing dead-letter target
/// to SQS's wording.
pub(crate) async fn change_policy(
    ctx: &Ctx,
    queue: &str,
    mut change: impl FnMut(&QueuePolicy) -> SqsResult<QueuePolicy>,
) -> SqsResult<()> {
    ctx.broker()
        .change_queue_policy(queue, None, &ctx.actor, |p| change(p).map_err(Refused::Sqs))
        .await
        .map(|_| ())
        .map_err(|e| match e {
            Refused::Sqs(e) => e,
            Refused::Broker(e) => redrive_error(e),
        })
}

/// A broker refusal of a policy whose dead-letter queue is missing becomes SQS's
/// `InvalidParameterValue` for `RedrivePolicy`.
pub(crate) fn redrive_error(e: redrive_broker::BrokerError) -> SqsError {
    match e {
        redrive_broker::BrokerError::InvalidRequest { field, why }
            if field == "dead_letter_queue" =>
        {
            SqsError::new(
                ErrorKind::InvalidParameterValue,
                format!(
                    "Value for parameter RedrivePolicy is invalid. Reason: Dead letter target does not exist ({why})."
                ),
            )
        }
        other => other.into(),
    }
}

/// Whether the attributes asked for in a create match the existing queue's.
pub(crate) fn same_as(ctx: &Ctx, view: &QueueView, attrs: &[(String, String)]) -> Option<String> {
    let current = all(ctx, view);
    for (k, v) in attrs {
        let have = current
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str());
        let same = match (k.as_str(), have) {
            ("RedrivePolicy", Some(h)) => parse_redrive(v).ok() == parse_redrive(h).ok(),
            ("RedrivePolicy", None) => v.trim().is_empty(),
            ("FifoQueue", h) => v.eq_ignore_ascii_case(h.unwrap_or("false")),
            (_, Some(h)) => {
                h == v.trim() || (INERT.contains(&k.as_str()) && h.eq_ignore_ascii_case(v))
            }
            (_, None) => v.is_empty(),
        };
        if !same {
            return Some(k.clone());
        }
    }
    None
}
