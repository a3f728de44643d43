//! Message actions: `SendMessage`, `ReceiveMessage`, `DeleteMessage`,
//! `ChangeMessageVisibility`; and what the batch actions share with them: validation of a
//! message (body characters, attributes, size), its native form (reserved properties) and
//! its SQS form on receive (system attributes, message attributes, MD5s).

use std::collections::BTreeSet;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use redrive_broker::Storage;
use redrive_broker::model::{Delivery, Enqueued};
use redrive_broker::{BrokerError, Settle};
use redrive_broker::{LockBounds, Outgoing, ReceiveOptions};
use redrive_core::id::given;
use redrive_core::message::{
    DEAD_LETTER_DESCRIPTION_PROPERTY, DEAD_LETTER_REASON_PROPERTY, DEAD_LETTER_SOURCE_PROPERTY,
};
use redrive_core::{Properties, PropertyValue, QueuePolicy};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::attempts::{AttemptKey, Recorded};
use crate::attributes::{effective, fifo_attr};
use crate::error::{ErrorKind, SqsError, SqsResult};
use crate::md5::{AttrValue, Attribute, attributes_md5, body_md5};
use crate::protocol::{opt_int, opt_str, req_str, str_list};
use crate::{Ctx, is_fifo, queue_from_input, receipts};

/// Reserved native property holding a message's SQS message attributes, as a JSON string
/// `[{"name": …, "type": …, "string": …}` or `"binary_b64": …}]`, sorted by name.
pub const ATTRIBUTES_PROPERTY: &str = "redrive.sqs.attributes";
/// Reserved native property holding what the SQS sender set besides attributes, as a JSON
/// object: `sender_id`, `trace_header` (`AWSTraceHeader`), `group_id` (`MessageGroupId`).
pub const SYSTEM_PROPERTY: &str = "redrive.sqs.system";

/// Most message attributes on one message.
const MAX_ATTRIBUTES: usize = 10;
/// Longest visibility timeout, in seconds.
const MAX_VISIBILITY_S: i64 = 43_200;

#[derive(Debug, Serialize, Deserialize)]
struct StoredAttr {
    name: String,
    #[serde(rename = "type")]
    data_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    string: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    binary_b64: Option<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct SystemInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sender_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    trace_header: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    group_id: Option<String>,
    /// `MessageDeduplicationId` on FIFO queues (the body's SHA-256 under content-based
    /// deduplication).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dedup_id: Option<String>,
}

/// Whether every character is one SQS allows in a message: `#x9 | #xA | #xD | #x20` to
/// `#xD7FF | #xE000` to `#xFFFD | #x10000` to `#x10FFFF`.
pub(crate) fn valid_chars(s: &str) -> bool {
    s.chars().all(|c| {
        matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}')
    })
}

fn valid_attr_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    !name.is_empty()
        && name.len() <= 256
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
        && !lower.starts_with("aws.")
        && !lower.starts_with("amazon.")
}

fn attr_error(msg: String) -> SqsError {
    SqsError::new(ErrorKind::InvalidParameterValue, msg)
}

/// Parses and checks the `MessageAttributes` of a send.
fn parse_attributes(entry: &Map<String, Value>) -> SqsResult<Vec<Attribute>> {
    let Some(v) = entry.get("MessageAttributes").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let Value::Object(m) = v else {
        return Err(attr_error("MessageAttributes must be a map.".to_owned()));
    };
    if m.len() > MAX_ATTRIBUTES {
        return Err(attr_error(format!(
            "Number of message attributes [{}] exceeds the allowed maximum [{MAX_ATTRIBUTES}].",
            m.len()
        )));
    }
    let mut out = Vec::with_capacity(m.len());
    for (name, val) in m {
        if !valid_attr_name(name) {
            return Err(attr_error(format!(
                "Message (user) attribute name '{name}' is invalid. Names may contain \
                 alphanumerics, hyphens, underscores and periods, may not start or end with a \
                 period or hold two in a row, and may not start with AWS. or Amazon."
            )));
        }
        out.push(parse_value(name, val, "Message (user)")?);
    }
    Ok(out)
}

fn parse_value(name: &str, val: &Value, what: &str) -> SqsResult<Attribute> {
    let Value::Object(o) = val else {
        return Err(attr_error(format!(
            "{what} attribute '{name}' must be a structure."
        )));
    };
    let data_type = match o.get("DataType") {
        Some(Value::String(t)) if !t.is_empty() => t.clone(),
        _ => {
            return Err(attr_error(format!(
                "The message attribute '{name}' must contain a non-empty attribute type."
            )));
        }
    };
    let base = data_type.split('.').next().unwrap_or_default();
    if !matches!(base, "String" | "Number" | "Binary")
        || data_type.len() > 256
        || (data_type.len() > base.len() && data_type.len() == base.len() + 1)
    {
        return Err(attr_error(format!(
            "The type of message (user) attribute '{name}' is invalid. You must use only the \
             following supported type prefixes: Binary, Number, String."
        )));
    }
    if o.contains_key("StringListValues") || o.contains_key("BinaryListValues") {
        return Err(attr_error(format!(
            "{what} attribute '{name}': list values are not supported."
        )));
    }
    let value = if base == "Binary" {
        let b = match o.get("BinaryValue") {
            Some(Value::String(s)) if !s.is_empty() => B64.decode(s).map_err(|_| {
                attr_error(format!(
                    "{what} attribute '{name}' has a BinaryValue that is not valid base64."
                ))
            })?,
            _ => {
                return Err(attr_error(format!(
                    "{what} attribute '{name}' must contain a non-empty value of type 'Binary'."
                )));
            }
        };
        if b.is_empty() {
            return Err(attr_error(format!(
                "{what} attribute '{name}' must contain a non-empty value of type 'Binary'."
            )));
        }
        AttrValue::Binary(b)
    } else {
        let s = match o.get("StringValue") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => {
                return Err(attr_error(format!(
                    "{what} attribute '{name}' must contain a non-empty value of type '{base}'."
                )));
            }
        };
        if !valid_chars(&s) {
            return Err(SqsError::new(
                ErrorKind::InvalidParameterValue,
                format!("{what} attribute '{name}' contains characters outside the allowed set."),
            ));
        }
        if base == "Number" && !valid_number(&s) {
            return Err(attr_error(format!(
                "Can't cast the value of message (user) attribute '{name}' to a number."
            )));
        }
        AttrValue::String(s)
    };
    Ok(Attribute {
        name: name.to_owned(),
        data_type,
        value,
    })
}

/// SQS numbers: up to 38 significant digits, from -10^128 to 10^126.
fn valid_number(s: &str) -> bool {
    let t = s.trim();
    let Ok(f) = t.parse::<f64>() else {
        return false;
    };
    let digits = t
        .split(['e', 'E'])
        .next()
        .unwrap_or_default()
        .bytes()
        .filter(u8::is_ascii_digit)
        .count();
    f.is_finite() && digits <= 38 && (-1e128..=1e126).contains(&f)
}

fn parse_system_attributes(entry: &Map<String, Value>) -> SqsResult<Vec<Attribute>> {
    let Some(v) = entry
        .get("MessageSystemAttributes")
        .filter(|v| !v.is_null())
    else {
        return Ok(Vec::new());
    };
    let Value::Object(m) = v else {
        return Err(attr_error(
            "MessageSystemAttributes must be a map.".to_owned(),
        ));
    };
    let mut out = Vec::new();
    for (name, val) in m {
        if name != "AWSTraceHeader" {
            return Err(attr_error(format!(
                "Message system attribute name '{name}' is invalid: only AWSTraceHeader can be sent."
            )));
        }
        let a = parse_value(name, val, "Message system")?;
        if a.data_type != "String" {
            return Err(attr_error(
                "Message system attribute AWSTraceHeader must be of type String.".to_owned(),
            ));
        }
        out.push(a);
    }
    Ok(out)
}

fn attr_size(a: &Attribute) -> usize {
    a.name.len()
        + a.data_type.len()
        + match &a.value {
            AttrValue::String(s) => s.len(),
            AttrValue::Binary(b) => b.len(),
        }
}

/// A checked message, ready for the broker, with the digests the answer carries.
pub(crate) struct Prepared {
    pub(crate) outgoing: Outgoing,
    pub(crate) md5_body: String,
    pub(crate) md5_attributes: Option<String>,
    pub(crate) md5_system: Option<String>,
    /// Body plus attributes, as SQS counts a message's size.
    pub(crate) size: usize,
    /// Whether it goes to a FIFO queue (the answer then carries a `SequenceNumber`).
    pub(crate) fifo: bool,
}

/// Whether `id` is a valid `MessageDeduplicationId` or `MessageGroupId`: 1 to 128
/// alphanumeric or punctuation characters.
fn valid_fifo_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic())
}

/// The native message id of a FIFO message: a UUID-shaped digest of the queue and the
/// deduplication key (the deduplication id, with the group under the `messageGroup`
/// scope). The native duplicate detection keys on it, so a duplicate answers with the
/// original's id.
fn fifo_message_id(queue: &str, group: &str, dedup: &str, per_group: bool) -> String {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(queue.as_bytes());
    h.update([0]);
    if per_group {
        h.update(group.as_bytes());
    }
    h.update([0]);
    h.update(dedup.as_bytes());
    let d = h.finalize();
    let hex: String = d.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// Checks one message of a send (or a batch entry) against the queue's rules and builds
/// its native form.
pub(crate) fn prepare(
    ctx: &Ctx,
    queue: &str,
    policy: &QueuePolicy,
    entry: &Map<String, Value>,
) -> SqsResult<Prepared> {
    let body = match opt_str(entry, "MessageBody")? {
        Some(b) if !b.is_empty() => b,
        _ => return Err(SqsError::missing("MessageBody")),
    };
    if !valid_chars(body) {
        return Err(SqsError::new(
            ErrorKind::InvalidMessageContents,
            "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to \
             #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
        ));
    }
    let sqs = effective(policy);
    let fifo = is_fifo(queue);
    if fifo && let Some(d) = opt_int(entry, "DelaySeconds")?.filter(|d| *d != 0) {
        return Err(SqsError::invalid_param(
            "DelaySeconds",
            d,
            "The request include parameter that is not valid for this queue type.",
        ));
    }
    let delay = match opt_int(entry, "DelaySeconds")? {
        None => i64::from(sqs.delay_s),
        Some(d) if (0..=900).contains(&d) => d,
        Some(d) => {
            return Err(SqsError::invalid_param(
                "DelaySeconds",
                d,
                "DelaySeconds must be >= 0 and <= 900.",
            ));
        }
    };
    let dedup_given = opt_str(entry, "MessageDeduplicationId")?;
    if !fifo && dedup_given.is_some() {
        return Err(SqsError::new(
            ErrorKind::InvalidParameterValue,
            "The request include parameter MessageDeduplicationId that is not valid for this \
             queue type",
        ));
    }
    let group_id = opt_str(entry, "MessageGroupId")?;
    if let Some(g) = group_id
        && !valid_fifo_id(g)
    {
        return Err(SqsError::invalid_param(
            "MessageGroupId",
            g,
            "MessageGroupId can only include alphanumeric and punctuation characters. 1 to 128 \
             in length.",
        ));
    }
    if let Some(d) = dedup_given
        && !valid_fifo_id(d)
    {
        return Err(SqsError::invalid_param(
            "MessageDeduplicationId",
            d,
            "MessageDeduplicationId can only include alphanumeric and punctuation characters. \
             1 to 128 in length.",
        ));
    }
    // FIFO: the group and the deduplication id.
    let mut fifo_ids = None;
    if fifo {
        let Some(group) = group_id else {
            return Err(SqsError::missing("MessageGroupId"));
        };
        let dedup = match dedup_given {
            Some(d) => d.to_owned(),
            None if fifo_attr(policy, "ContentBasedDeduplication") == "true" => {
                use sha2::Digest;
                sha2::Sha256::digest(body.as_bytes())
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect()
            }
            None => {
                return Err(SqsError::new(
                    ErrorKind::InvalidParameterValue,
                    "The queue should either have ContentBasedDeduplication enabled or \
                     MessageDeduplicationId provided explicitly",
                ));
            }
        };
        let per_group = fifo_attr(policy, "DeduplicationScope") == "messageGroup";
        let native_id = fifo_message_id(queue, group, &dedup, per_group);
        fifo_ids = Some((group.to_owned(), dedup, native_id));
    }
    let attrs = parse_attributes(entry)?;
    let system = parse_system_attributes(entry)?;
    let size = body.len() + attrs.iter().map(attr_size).sum::<usize>();
    if size > policy.max_message_size as usize {
        return Err(SqsError::new(
            ErrorKind::InvalidParameterValue,
            format!(
                "One or more parameters are invalid. Reason: Message must be shorter than {} bytes.",
                policy.max_message_size
            ),
        ));
    }
    let mut properties = Properties::new();
    if !attrs.is_empty() {
        let mut stored: Vec<StoredAttr> = attrs
            .iter()
            .map(|a| match &a.value {
                AttrValue::String(s) => StoredAttr {
                    name: a.name.clone(),
                    data_type: a.data_type.clone(),
                    string: Some(s.clone()),
                    binary_b64: None,
                },
                AttrValue::Binary(b) => StoredAttr {
                    name: a.name.clone(),
                    data_type: a.data_type.clone(),
                    string: None,
                    binary_b64: Some(B64.encode(b)),
                },
            })
            .collect();
        stored.sort_by(|a, b| a.name.cmp(&b.name));
        let text = serde_json::to_string(&stored).map_err(|e| crate::error::internal(&e))?;
        properties.insert(ATTRIBUTES_PROPERTY.to_owned(), PropertyValue::String(text));
    }
    let info = SystemInfo {
        sender_id: Some(ctx.sender_id.clone()),
        trace_header: system.iter().find_map(|a| match &a.value {
            AttrValue::String(s) => Some(s.clone()),
            AttrValue::Binary(_) => None,
        }),
        group_id: group_id.map(str::to_owned),
        dedup_id: fifo_ids.as_ref().map(|(_, d, _)| d.clone()),
    };
    let text = serde_json::to_string(&info).map_err(|e| crate::error::internal(&e))?;
    properties.insert(SYSTEM_PROPERTY.to_owned(), PropertyValue::String(text));
    let now = ctx.now();
    let delay_ms = delay * 1_000;
    let ttl_ms = policy.default_ttl_ms.map(|t| {
        // Retention counts from the send, not from the end of the delay.
        let left = i64::try_from(t)
            .unwrap_or(i64::MAX)
            .saturating_sub(delay_ms);
        u64::try_from(left.max(1_000)).unwrap_or(1_000)
    });
    Ok(Prepared {
        outgoing: Outgoing {
            message_id: fifo_ids.as_ref().map(|(_, _, id)| id.clone()),
            session_id: fifo_ids.map(|(g, _, _)| g),
            body: body.as_bytes().to_vec(),
            properties,
            scheduled_at: (delay > 0).then(|| now.plus_millis(delay_ms)),
            ttl_ms,
            ..Outgoing::default()
        },
        md5_body: body_md5(body),
        md5_attributes: attributes_md5(&attrs),
        md5_system: attributes_md5(&system),
        size,
        fifo,
    })
}

/// The answer fields of one sent message.
pub(crate) fn sent_fields(p: &Prepared, sent: &Enqueued) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert(
        "MessageId".to_owned(),
        Value::String(sent.message_id.clone()),
    );
    if p.fifo {
        out.insert(
            "SequenceNumber".to_owned(),
            Value::String(sent.sequence.to_string()),
        );
    }
    out.insert(
        "MD5OfMessageBody".to_owned(),
        Value::String(p.md5_body.clone()),
    );
    if let Some(m) = &p.md5_attributes {
        out.insert(
            "MD5OfMessageAttributes".to_owned(),
            Value::String(m.clone()),
        );
    }
    if let Some(m) = &p.md5_system {
        out.insert(
            "MD5OfMessageSystemAttributes".to_owned(),
            Value::String(m.clone()),
        );
    }
    out
}

/// `SendMessage`.
pub(crate) async fn send(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let queue = queue_from_input(input)?;
    let (sent, p) = ctx
        .broker()
        .send_built(&queue, |policy| {
            let mut p = prepare(ctx, &queue, policy, input)?;
            let outgoing = std::mem::take(&mut p.outgoing);
            Ok::<_, SqsError>((vec![outgoing], p))
        })
        .await?;
    let Some(e) = sent.first() else {
        return Err(SqsError::new(
            ErrorKind::InternalFailure,
            "The broker answered a send without a result.",
        ));
    };
    Ok(Value::Object(sent_fields(&p, e)))
}

// ---- receive ----------------------------------------------------------------------------

/// System attribute names a receive may ask for.
const SYSTEM_NAMES: &[&str] = &[
    "All",
    "SenderId",
    "SentTimestamp",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
    "SequenceNumber",
    "MessageDeduplicationId",
    "MessageGroupId",
    "AWSTraceHeader",
    "DeadLetterQueueSourceArn",
];

/// Which attributes a receive returns.
pub(crate) struct Selection {
    system_all: bool,
    system: BTreeSet<String>,
    attrs_all: bool,
    attr_names: Vec<String>,
    attr_prefixes: Vec<String>,
}

impl Selection {
    fn wants_system(&self, name: &str) -> bool {
        self.system_all || self.system.contains(name)
    }

    fn wants_attr(&self, name: &str) -> bool {
        self.attrs_all
            || self.attr_names.iter().any(|n| n == name)
            || self
                .attr_prefixes
                .iter()
                .any(|p| name.starts_with(p.as_str()))
    }
}

fn selection(input: &Map<String, Value>) -> SqsResult<Selection> {
    let mut system = BTreeSet::new();
    for n in str_list(input, "AttributeNames")?
        .into_iter()
        .chain(str_list(input, "MessageSystemAttributeNames")?)
    {
        if !SYSTEM_NAMES.contains(&n.as_str()) {
            return Err(SqsError::new(
                ErrorKind::InvalidAttributeName,
                format!("Unknown Attribute {n}."),
            ));
        }
        system.insert(n);
    }
    let mut sel = Selection {
        system_all: system.contains("All"),
        system,
        attrs_all: false,
        attr_names: Vec::new(),
        attr_prefixes: Vec::new(),
    };
    for n in str_list(input, "MessageAttributeNames")? {
        if n == "All" || n == ".*" {
            sel.attrs_all = true;
        } else if let Some(prefix) = n.strip_suffix(".*") {
            sel.attr_prefixes.push(format!("{prefix}."));
        } else {
            sel.attr_names.push(n);
        }
    }
    Ok(sel)
}

fn number_text(v: &PropertyValue) -> (String, &'static str) {
    match v {
        PropertyValue::String(s) => (s.clone(), "String"),
        PropertyValue::Bool(b) => (b.to_string(), "String"),
        PropertyValue::Int(i) => (i.to_string(), "Number"),
        PropertyValue::Float(f) => (f.to_string(), "Number"),
    }
}

/// The message attributes of a stored message: the SQS ones from the reserved property,
/// and native properties as `String` / `Number` attributes.
fn message_attributes(props: &Properties) -> Vec<Attribute> {
    let mut out = Vec::new();
    for (k, v) in props {
        match k.as_str() {
            ATTRIBUTES_PROPERTY => {
                if let PropertyValue::String(text) = v
                    && let Ok(stored) = serde_json::from_str::<Vec<StoredAttr>>(text)
                {
                    for s in stored {
                        let value = match (s.string, s.binary_b64) {
                            (Some(st), _) => AttrValue::String(st),
                            (None, Some(b)) => AttrValue::Binary(B64.decode(b).unwrap_or_default()),
                            (None, None) => continue,
                        };
                        out.push(Attribute {
                            name: s.name,
                            data_type: s.data_type,
                            value,
                        });
                    }
                }
            }
            SYSTEM_PROPERTY
            | DEAD_LETTER_REASON_PROPERTY
            | DEAD_LETTER_DESCRIPTION_PROPERTY
            | DEAD_LETTER_SOURCE_PROPERTY => {}
            _ => {
                let (text, data_type) = number_text(v);
                if !text.is_empty() {
                    out.push(Attribute {
                        name: k.clone(),
                        data_type: data_type.to_owned(),
                        value: AttrValue::String(text),
                    });
                }
            }
        }
    }
    out
}

fn system_info(props: &Properties) -> SystemInfo {
    match props.get(SYSTEM_PROPERTY) {
        Some(PropertyValue::String(t)) => serde_json::from_str(t).unwrap_or_default(),
        _ => SystemInfo::default(),
    }
}

/// One received message in the SQS shape.
pub(crate) fn message_out(ctx: &Ctx, d: &Delivery, sel: &Selection) -> Value {
    let m = &d.message;
    let body = String::from_utf8_lossy(&m.body).into_owned();
    let mut out = Map::new();
    out.insert("MessageId".to_owned(), Value::String(m.message_id.clone()));
    out.insert(
        "ReceiptHandle".to_owned(),
        Value::String(receipts::encode(m.queue.as_str(), &d.lock_token)),
    );
    out.insert("MD5OfBody".to_owned(), Value::String(body_md5(&body)));
    out.insert("Body".to_owned(), Value::String(body));
    let info = system_info(&m.properties);
    let mut sys = Map::new();
    let mut put = |name: &str, v: Option<String>| {
        if let Some(v) = v
            && sel.wants_system(name)
        {
            sys.insert(name.to_owned(), Value::String(v));
        }
    };
    put(
        "SenderId",
        Some(
            info.sender_id
                .clone()
                .unwrap_or_else(|| ctx.sqs.config.account_id.clone()),
        ),
    );
    put("SentTimestamp", Some(m.enqueued_at.as_millis().to_string()));
    put(
        "ApproximateReceiveCount",
        Some(m.delivery_count.to_string()),
    );
    put(
        "ApproximateFirstReceiveTimestamp",
        Some(
            m.first_delivered_at
                .unwrap_or(m.enqueued_at)
                .as_millis()
                .to_string(),
        ),
    );
    put(
        "MessageGroupId",
        info.group_id.clone().or_else(|| m.session_id.clone()),
    );
    if is_fifo(m.queue.as_str()) {
        put("SequenceNumber", Some(m.sequence.to_string()));
        put("MessageDeduplicationId", info.dedup_id.clone());
    }
    put("AWSTraceHeader", info.trace_header.clone());
    let source = match m.properties.get(DEAD_LETTER_SOURCE_PROPERTY) {
        Some(PropertyValue::String(q)) => Some(ctx.queue_arn(q)),
        _ => None,
    };
    put("DeadLetterQueueSourceArn", source);
    if !sys.is_empty() {
        out.insert("Attributes".to_owned(), Value::Object(sys));
    }
    let attrs: Vec<Attribute> = message_attributes(&m.properties)
        .into_iter()
        .filter(|a| sel.wants_attr(&a.name))
        .collect();
    if let Some(md5) = attributes_md5(&attrs) {
        out.insert("MD5OfMessageAttributes".to_owned(), Value::String(md5));
        let mut map = Map::new();
        for a in attrs {
            let mut v = Map::new();
            v.insert("DataType".to_owned(), Value::String(a.data_type));
            match a.value {
                AttrValue::String(s) => {
                    v.insert("StringValue".to_owned(), Value::String(s));
                }
                AttrValue::Binary(b) => {
                    v.insert("BinaryValue".to_owned(), Value::String(B64.encode(b)));
                }
            }
            map.insert(a.name, Value::Object(v));
        }
        out.insert("MessageAttributes".to_owned(), Value::Object(map));
    }
    Value::Object(out)
}

fn ranged(
    input: &Map<String, Value>,
    key: &str,
    lo: i64,
    hi: i64,
    why: &str,
) -> SqsResult<Option<i64>> {
    match opt_int(input, key)? {
        Some(v) if !(lo..=hi).contains(&v) => Err(SqsError::invalid_param(key, v, why)),
        other => Ok(other),
    }
}

/// `ReceiveMessage`: long polls through the broker for up to `WaitTimeSeconds`.
pub(crate) async fn receive(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let queue = queue_from_input(input)?;
    let max = ranged(
        input,
        "MaxNumberOfMessages",
        1,
        10,
        "Must be between 1 and 10, if provided.",
    )?
    .unwrap_or(1);
    let visibility = ranged(
        input,
        "VisibilityTimeout",
        0,
        MAX_VISIBILITY_S,
        "VisibilityTimeout must be between 0 and 43200 seconds.",
    )?;
    let wait = ranged(
        input,
        "WaitTimeSeconds",
        0,
        20,
        "WaitTimeSeconds must be >= 0 and <= 20.",
    )?;
    // AWS: at most 128 characters, alphanumeric or punctuation.
    let attempt = opt_str(input, "ReceiveRequestAttemptId")?;
    if let Some(id) = attempt
        && !valid_fifo_id(id)
    {
        return Err(SqsError::invalid_param(
            "ReceiveRequestAttemptId",
            id,
            "ReceiveRequestAttemptId can only include alphanumeric and punctuation characters. \
             1 to 128 in length.",
        ));
    }
    let sel = selection(input)?;
    let record = ctx.broker().queue_record(&queue).await?;
    let s = effective(&record.policy);
    let visibility = visibility.unwrap_or(i64::from(s.visibility_timeout_s));
    let wait = wait.unwrap_or(i64::from(s.receive_wait_s));
    // The attempt id applies to FIFO queues only; a standard queue accepts and ignores it,
    // as AWS does.
    let key = attempt
        .filter(|_| is_fifo(&queue))
        .map(|id| AttemptKey::new(&ctx.actor.id, &queue, id));
    if let Some(key) = &key {
        let prior = ctx.attempts().lookup(key, ctx.now());
        if let Some(prior) = prior {
            if let Some(out) = replay(ctx, &queue, &prior, visibility).await? {
                return Ok(out);
            }
            ctx.attempts().remove(key);
        }
    }
    let started = ctx.now();
    let deliveries = ctx
        .broker()
        .receive_with(
            &queue,
            ReceiveOptions {
                max: u32::try_from(max).unwrap_or(1),
                lock_ms: Some(u64::try_from(visibility * 1_000).unwrap_or(0)),
                wait_ms: u64::try_from(wait * 1_000).unwrap_or(0),
                session: None,
                // A long poll ends when the caller's token is revoked.
                until_revoked: Some(ctx.broker().revocation_guard(&ctx.actor)),
            },
            LockBounds::Sqs,
        )
        .await?;
    if deliveries.is_empty() {
        // Nothing to hand out again: a retry of an empty answer is a new receive.
        return Ok(json!({}));
    }
    let msgs: Vec<Value> = deliveries
        .iter()
        .map(|d| message_out(ctx, d, &sel))
        .collect();
    if let Some(key) = key {
        let recorded = Recorded {
            messages: msgs.clone(),
            tokens: deliveries.iter().map(|d| d.lock_token.clone()).collect(),
            started,
        };
        let now = ctx.now();
        ctx.attempts().record(key, recorded, now);
    }
    Ok(json!({ "Messages": msgs }))
}

/// A retry of a FIFO receive with the same `ReceiveRequestAttemptId` (see `attempts`, after
/// the `ReceiveMessage` API reference): while every message is still held by the receipt
/// handle it was answered with, the same messages and handles again, each message's
/// visibility timeout reset to `visibility_s` from now (as AWS: "If a retry occurs within
/// the deduplication interval, it resets the visibility timeout"). `None` when a message
/// is no longer held by its handle (its visibility timeout ran out, a later receive took
/// it, or it was settled outside this endpoint): the retry is then a new receive, and
/// none of the old handles' messages is handed out again under them (those of them still
/// held keep the reset visibility timeout under their old handles).
async fn replay(
    ctx: &Ctx,
    queue: &str,
    prior: &Recorded,
    visibility_s: i64,
) -> SqsResult<Option<Value>> {
    let now = ctx.now();
    // A renewal may not end more than 12 hours after the receive that took the lock; the
    // original receive began at `started`, so this stays inside the broker's cap.
    let since = now.as_millis().saturating_sub(prior.started.as_millis());
    let left_ms = (MAX_VISIBILITY_S * 1_000).saturating_sub(since).max(0);
    let lock_ms = u64::try_from((visibility_s * 1_000).min(left_ms)).unwrap_or(0);
    let items = prior
        .tokens
        .iter()
        .map(|t| {
            (
                t.parse(),
                Settle::Renew {
                    lock_ms: Some(lock_ms),
                },
            )
        })
        .collect();
    let renewed = ctx
        .broker()
        .settle_with(queue, items, LockBounds::Sqs)
        .await?;
    if renewed.iter().any(Result::is_err) {
        return Ok(None);
    }
    Ok(Some(json!({ "Messages": prior.messages })))
}

// ---- settle -----------------------------------------------------------------------------

/// Reads and checks a `VisibilityTimeout` of a visibility change, in milliseconds.
pub(crate) fn visibility_ms(entry: &Map<String, Value>) -> SqsResult<u64> {
    let v = ranged(
        entry,
        "VisibilityTimeout",
        0,
        MAX_VISIBILITY_S,
        "VisibilityTimeout must be between 0 and 43200 seconds.",
    )?
    .ok_or_else(|| SqsError::missing("VisibilityTimeout"))?;
    Ok(u64::try_from(v * 1_000).unwrap_or(0))
}

/// What a refused settlement means to SQS. A delete with a handle whose lock is gone
/// succeeds without deleting (SQS: a stale receipt handle), so it is not an error.
pub(crate) fn settle_refusal(e: BrokerError, delete: bool) -> Option<SqsError> {
    match e {
        e if delete && e.storage() == Some(Storage::LockLost) => None,
        other => Some(SqsError::from(other)),
    }
}

/// `DeleteMessage`.
pub(crate) async fn delete(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let queue = queue_from_input(input)?;
    let handle = receipts::lock_token(req_str(input, "ReceiptHandle")?, &queue)?;
    ctx.attempts().modified(&queue, given(&handle));
    let settled = ctx
        .broker()
        .settle_one(&queue, handle, Settle::Complete, LockBounds::Sqs)
        .await;
    if let Err(e) = settled
        && let Some(err) = settle_refusal(e, true)
    {
        return Err(err);
    }
    Ok(json!({}))
}

/// `ChangeMessageVisibility`: renews the lock from now; 0 makes the message visible now.
pub(crate) async fn change_visibility(ctx: &Ctx, input: &Map<String, Value>) -> SqsResult<Value> {
    let queue = queue_from_input(input)?;
    let handle = receipts::lock_token(req_str(input, "ReceiptHandle")?, &queue)?;
    let lock_ms = visibility_ms(input)?;
    ctx.attempts().modified(&queue, given(&handle));
    let action = Settle::Renew {
        lock_ms: Some(lock_ms),
    };
    let settled = ctx
        .broker()
        .settle_one(&queue, handle, action, LockBounds::Sqs)
        .await;
    if let Err(e) = settled
        && let Some(err) = settle_refusal(e, false)
    {
        return Err(err);
    }
    Ok(json!({}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_characters_follow_the_sqs_rule() {
        assert!(valid_chars("hello\t\n\r world \u{E000} \u{10000}"));
        assert!(!valid_chars("bell \u{7}"));
        assert!(!valid_chars("\u{FFFE}"));
    }

    #[test]
    fn attribute_names_follow_the_sqs_rule() {
        assert!(valid_attr_name("my-attr_1.x"));
        assert!(!valid_attr_name(".x"));
        assert!(!valid_attr_name("x."));
        assert!(!valid_attr_name("a..b"));
        assert!(!valid_attr_name("AWS.x"));
        assert!(!valid_attr_name("amazon.x"));
        assert!(!valid_attr_name("sp ace"));
    }

    #[test]
    fn numbers_are_checked() {
        assert!(valid_number("42"));
        assert!(valid_number("-1.5e10"));
        assert!(!valid_number("abc"));
        assert!(!valid_number("1e300"));
    }
}
