//! Dead letters from elsewhere, read into records a dead-letter store can take: an Event
//! Grid dead-letter blob, the output of SQS `ReceiveMessage` on a dead-letter queue, or
//! redrive's own export. Pure: [`parse_import`] reads bytes and returns records or one
//! error, never part of an import.
//!
//! Every import is bounded: at most [`MAX_IMPORT_BYTES`] of input (checked before
//! anything is read), at most [`MAX_IMPORT_RECORDS`] records, arrays and objects nested
//! at most [`MAX_DEPTH`] levels, and no object with a repeated key. An error names the
//! record (its index from 0, and for JSON Lines its line from 1) and the field.
//!
//! # `eventgrid`: one Event Grid dead-letter blob
//!
//! The input is one blob as Event Grid wrote it; it becomes **one** record of format
//! [`RecordFormat::Events`] whose body is the input bytes unchanged. The blob must be
//! JSON, but it is not checked to be a list of valid events: that is the replay
//! judgement's job ([`crate::dead_letter_events::parse_events`]), which quarantines a
//! schema-invalid blob whole. Everything else is read, where it can be, from the events:
//!
//! - `message_id`: the first event's `id`, else a new id.
//! - `message_type`: the events' type (`type`, or `eventType` for the Event Grid schema)
//!   when they all share one, else none.
//! - `content_type`: `application/cloudevents-batch+json`.
//! - `reason`: the first event's `deadLetterReason` (1 to 256 bytes), else
//!   [`IMPORTED_REASON`]; `description`: the number of events and the reasons seen.
//! - `delivery_count`: the largest `deliveryAttempts`.
//! - `dead_lettered_at` and `last_delivered_at`: the latest `lastDeliveryAttemptTime`
//!   (`dead_lettered_at` is the import time when no event has one); `enqueued_at`: the
//!   earliest `publishTime`, else `dead_lettered_at`. Event Grid does not record the
//!   first attempt: `first_delivered_at` is none.
//! - `count_quality`: [`EvidenceQuality::Approximate`], Event Grid's attempt counts being
//!   best-effort; [`EvidenceQuality::Incomplete`] when the blob is not a non-empty array
//!   of objects, when any event lacks `deliveryAttempts` or `deadLetterReason`, or when
//!   no event has a `lastDeliveryAttemptTime`.
//! - the route: `broker_routed` (Event Grid's delivery policy routed it) under the rule
//!   the first event's `deadLetterReason` names ([`RouteRule::named`]), if any; no
//!   `deadLetterReason` says nothing of the route: `route_indeterminate`, no rule. Event
//!   Grid names no policy version.
//!
//! # `sqs`: SQS `ReceiveMessage` output
//!
//! The JSON the aws CLI or boto3 prints for `ReceiveMessage` with `AttributeNames` and
//! `MessageAttributeNames` set to `All` (`{"Messages": [...]}`); each message becomes one
//! record of format [`RecordFormat::Message`]:
//!
//! - `message_id`: `MessageId`; `body`: the UTF-8 bytes of `Body`, refused when
//!   `MD5OfBody` is given and does not match them.
//! - `session_id`: the `MessageGroupId` attribute (FIFO queues).
//! - `properties`: the message attributes kept as redrive's SQS endpoint keeps them, so
//!   that a receiver through it gets them back with their exact data types: one property
//!   [`SQS_ATTRIBUTES_PROPERTY`] whose value is the JSON text
//!   `[{"name", "type", "string" | "binary_b64"}]` sorted by name. `SenderId`,
//!   `AWSTraceHeader`, `MessageGroupId` and `MessageDeduplicationId` go, when present,
//!   into [`SQS_SYSTEM_PROPERTY`] (`{"sender_id", "trace_header", "group_id",
//!   "dedup_id"}`), as that endpoint stores them.
//! - `delivery_count`: `ApproximateReceiveCount` (0 when absent); `enqueued_at`:
//!   `SentTimestamp`; `first_delivered_at`: `ApproximateFirstReceiveTimestamp` (epoch
//!   milliseconds). SQS does not record the last receive before the move: none.
//! - SQS does not record why or when a message was moved to a dead-letter queue: `reason`
//!   is [`IMPORTED_REASON`], the description says the message came from an SQS
//!   dead-letter queue (and names `DeadLetterQueueSourceArn` when given), and
//!   `dead_lettered_at` is the import time (so is `enqueued_at` without `SentTimestamp`).
//! - `count_quality`: [`EvidenceQuality::Approximate`] (SQS's receive count is
//!   approximate) when `ApproximateReceiveCount` and `SentTimestamp` are both present,
//!   else [`EvidenceQuality::Incomplete`].
//! - the route: `route_indeterminate`, no rule, no policy version (SQS does not say how
//!   a message reached its dead-letter queue).
//!
//! `MD5OfMessageAttributes` is not checked.
//!
//! # `json`: redrive's own export
//!
//! JSON Lines: one dead-letter record per line in the native API's wire shape (blank
//! lines are skipped). Read: `message_id`, `body` with `body_encoding` (`utf8`, the
//! default, or `base64`), `body_sha256` (checked when given), `content_type`,
//! `properties` (strings, numbers, booleans), `correlation_id`, `type`, `session_id`,
//! `reason`, `description`, `delivery_count`, `delivery_count_quality` (kept as
//! exported), `first_delivered_at`, `last_delivered_at`, `enqueued_time`,
//! `dead_lettered_at` (RFC 3339), `format` (`message`, the default, or `events`) and the
//! route evidence (`route`, else `routed_by`; `route_rule`,
//! `policy_version`, `consumer`, `rule_version`), kept as exported and never filled in
//! with the importing queue's.
//! Every other field (the record's `id`, `area`, `queue`, ...) belongs to the store it
//! was exported from and is ignored. A record without `body` was exported by a caller
//! who may not read payloads and cannot be imported.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use redrive_core::case::{Route, RouteRule};
use redrive_core::dead_letter::UnknownVariant;
use redrive_core::{EvidenceQuality, Properties, PropertyValue, RecordFormat, Timestamp};
use serde_json::{Map, Value};

use crate::dead_letter_events::{Bounded, MAX_DEPTH, nests_deeper_than};

/// Largest input of one import, in bytes (checked first).
pub const MAX_IMPORT_BYTES: usize = 64 * 1024 * 1024;

/// Most records one import may produce.
pub const MAX_IMPORT_RECORDS: usize = 10_000;

/// The reason of an imported record whose source did not say why it was dead-lettered.
pub const IMPORTED_REASON: &str = "Imported";

/// The property in which redrive's SQS endpoint keeps a message's attributes (the same
/// name as `redrive_sqs::ATTRIBUTES_PROPERTY`).
pub const SQS_ATTRIBUTES_PROPERTY: &str = "redrive.sqs.attributes";

/// The property in which redrive's SQS endpoint keeps a message's system attributes (the
/// same name as `redrive_sqs::SYSTEM_PROPERTY`).
pub const SQS_SYSTEM_PROPERTY: &str = "redrive.sqs.system";

/// Longest reason a record may carry (the native API's bound on a dead-letter reason).
pub const MAX_REASON_BYTES: usize = 256;

/// Longest description a record may carry (the native API's bound).
pub const MAX_DESCRIPTION_BYTES: usize = 4_096;

/// Longest message id a record may carry (the native API's bound on ids, the same for a
/// correlation id, a session id and a type).
pub const MAX_ID_BYTES: usize = 128;

/// Most delivery attempts Event Grid makes of one event (its retry policy's
/// `maxDeliveryAttempts` is 1 to 30): a `deliveryAttempts` above it cannot be Event
/// Grid's.
pub const MAX_EVENT_GRID_ATTEMPTS: u64 = 30;

/// How far past the import time a source's time may be (the two clocks may disagree by
/// this much); a later time is refused.
pub const MAX_CLOCK_SKEW_MS: i64 = 5 * 60_000;

/// Reasons listed by name in an Event Grid record's description; the rest are counted.
const LISTED_REASONS: usize = 8;

/// Longest piece of input quoted in a description or an error.
const QUOTED_CHARS: usize = 64;

/// What an import reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImportFormat {
    /// One Event Grid dead-letter blob (a JSON array of dead-lettered events).
    EventGrid,
    /// The JSON output of SQS `ReceiveMessage`.
    Sqs,
    /// redrive's own export: JSON Lines of dead-letter records.
    Json,
}

impl ImportFormat {
    /// Every format.
    pub const ALL: [ImportFormat; 3] = [
        ImportFormat::EventGrid,
        ImportFormat::Sqs,
        ImportFormat::Json,
    ];

    /// The name given on the command line and in requests.
    pub fn as_str(self) -> &'static str {
        match self {
            ImportFormat::EventGrid => "eventgrid",
            ImportFormat::Sqs => "sqs",
            ImportFormat::Json => "json",
        }
    }
}

impl fmt::Display for ImportFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ImportFormat {
    type Err = UnknownVariant;
    fn from_str(s: &str) -> Result<Self, UnknownVariant> {
        ImportFormat::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| UnknownVariant {
                kind: "ImportFormat",
                value: s.to_owned(),
            })
    }
}

/// One dead-letter record read from an import, ready for a store (which gives it its
/// own record id, queue and area).
#[derive(Debug, Clone, PartialEq)]
pub struct ImportedRecord {
    /// Its line in the input, from 1 (JSON Lines only), for errors found after parsing.
    pub line: Option<usize>,
    /// What the body holds: one message, or a JSON array of dead-lettered events.
    pub format: RecordFormat,
    /// The original message id (for an Event Grid blob, its first event's id).
    pub message_id: String,
    /// The exact bytes.
    pub body: Vec<u8>,
    /// MIME type of the body.
    pub content_type: Option<String>,
    /// Application properties.
    pub properties: Properties,
    /// Correlation id.
    pub correlation_id: Option<String>,
    /// Session (ordering scope) it belonged to.
    pub session_id: Option<String>,
    /// Message type (for a blob, the type every event shares).
    pub message_type: Option<String>,
    /// Reason code ([`IMPORTED_REASON`] when the source did not record one).
    pub reason: String,
    /// Description.
    pub description: Option<String>,
    /// Deliveries before it was dead-lettered, as the source counted them.
    pub delivery_count: u32,
    /// How far that count, and the times, can be trusted.
    pub count_quality: EvidenceQuality,
    /// First delivery, when the source recorded it.
    pub first_delivered_at: Option<Timestamp>,
    /// Last delivery, when the source recorded it.
    pub last_delivered_at: Option<Timestamp>,
    /// Original enqueue (publish, send) time.
    pub enqueued_at: Timestamp,
    /// When it was dead-lettered (the import time when the source did not record it).
    pub dead_lettered_at: Timestamp,
    /// How the evidence says the delivery was separated: an export's `route` (else its
    /// `routed_by`), `broker_routed` for a provider's reason, `route_indeterminate` when
    /// nothing says.
    pub route_kind: Route,
    /// The rule it was routed under, as the source named it (an export's `route_rule`, a
    /// reason that names one: [`RouteRule::named`]); `None` when nothing names one.
    pub route_rule: Option<RouteRule>,
    /// The version of the source's routing policy, when the source named it.
    pub policy_version: Option<u64>,
    /// The consumer that applied an application's reason, when the source named it.
    pub consumer: Option<String>,
    /// The version of that consumer's classification rule, when the source named it.
    pub rule_version: Option<String>,
}

/// Why an import was refused. Nothing of it is imported.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportError {
    /// The input is larger than [`MAX_IMPORT_BYTES`].
    #[error("the input is {size} bytes, more than the limit of {max}")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// The input holds more than [`MAX_IMPORT_RECORDS`] records.
    #[error("the input holds {count} records, more than the limit of {max} per import")]
    TooManyRecords {
        /// How many it holds.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// The input holds no record.
    #[error("the input holds no record")]
    NoRecords,
    /// Arrays and objects in the input nest deeper than [`MAX_DEPTH`].
    #[error("the input nests arrays and objects deeper than {max} levels")]
    TooDeep {
        /// The limit.
        max: usize,
    },
    /// The input as a whole is not what the format reads.
    #[error("the input is not {expected}: {error}")]
    Input {
        /// What the format reads.
        expected: &'static str,
        /// What is wrong.
        error: String,
    },
    /// One record is refused.
    #[error("record {index}{}: {}", line_note(*.line), field_note(.field.as_deref(), .why))]
    Record {
        /// Its position in the input, from 0.
        index: usize,
        /// Its line, from 1 (JSON Lines only).
        line: Option<usize>,
        /// The field at fault (`Attributes.SentTimestamp`), or none for the record as a
        /// whole.
        field: Option<String>,
        /// What is wrong.
        why: String,
    },
}

fn line_note(line: Option<usize>) -> String {
    line.map(|l| format!(" (line {l})")).unwrap_or_default()
}

fn field_note(field: Option<&str>, why: &str) -> String {
    match field {
        Some(f) => format!("`{f}` {why}"),
        None => why.to_owned(),
    }
}

/// Reads the dead-letter records of an import in `format` (see the module docs for what
/// each format gives), `now` standing for every time the source did not record. Either
/// every record is returned or one error.
pub fn parse_import(
    format: ImportFormat,
    bytes: &[u8],
    now: Timestamp,
) -> Result<Vec<ImportedRecord>, ImportError> {
    if bytes.len() > MAX_IMPORT_BYTES {
        return Err(ImportError::TooLarge {
            size: bytes.len(),
            max: MAX_IMPORT_BYTES,
        });
    }
    match format {
        ImportFormat::EventGrid => event_grid(bytes, now).map(|r| vec![r]),
        ImportFormat::Sqs => sqs(bytes, now),
        ImportFormat::Json => json_lines(bytes, now),
    }
}

/// The first `QUOTED_CHARS` characters of `s`, quoted.
fn quoted(s: &str) -> String {
    if s.chars().count() > QUOTED_CHARS {
        let head: String = s.chars().take(QUOTED_CHARS).collect();
        format!("{head:?}…")
    } else {
        format!("{s:?}")
    }
}

/// Why `t` cannot be a time a source recorded before an import at `now`: before the
/// Unix epoch, or later than `now` by more than [`MAX_CLOCK_SKEW_MS`] (a dead letter
/// dated in the future would also escape retention).
fn impossible_time(t: Timestamp, now: Timestamp) -> Option<String> {
    if t.0 < 0 {
        Some("is before 1970-01-01T00:00:00Z: no source recorded it".to_owned())
    } else if t > now.plus_millis(MAX_CLOCK_SKEW_MS) {
        Some(format!(
            "is {} ms after the import time: a time cannot be in the future",
            t.0.saturating_sub(now.0)
        ))
    } else {
        None
    }
}

/// Where a record is in the input.
#[derive(Debug, Clone, Copy)]
struct At {
    index: usize,
    line: Option<usize>,
}

impl At {
    fn field(self, field: impl Into<String>, why: impl Into<String>) -> ImportError {
        ImportError::Record {
            index: self.index,
            line: self.line,
            field: Some(field.into()),
            why: why.into(),
        }
    }

    fn whole(self, why: impl Into<String>) -> ImportError {
        ImportError::Record {
            index: self.index,
            line: self.line,
            field: None,
            why: why.into(),
        }
    }
}

/// The fields of one JSON object of a record, read with errors naming them.
struct Fields<'a> {
    map: &'a Map<String, Value>,
    at: At,
    /// Prefix of the field names in errors (`Attributes.`).
    path: &'a str,
}

impl<'a> Fields<'a> {
    fn fail(&self, key: &str, why: impl Into<String>) -> ImportError {
        self.at.field(format!("{}{key}", self.path), why)
    }

    /// A field that is absent or `null` is none.
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn opt_str(&self, key: &str) -> Result<Option<&'a str>, ImportError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.fail(key, "must be a string")),
        }
    }

    fn req_str(&self, key: &str) -> Result<&'a str, ImportError> {
        self.opt_str(key)?
            .ok_or_else(|| self.fail(key, "is missing"))
    }

    fn req_nonempty(&self, key: &str) -> Result<&'a str, ImportError> {
        match self.req_str(key)? {
            "" => Err(self.fail(key, "must not be empty")),
            s => Ok(s),
        }
    }

    fn opt_object(&self, key: &str) -> Result<Option<&'a Map<String, Value>>, ImportError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(_) => Err(self.fail(key, "must be a JSON object")),
        }
    }

    /// A string field of at most `max` bytes (when present).
    fn opt_bounded(&self, key: &str, max: usize) -> Result<Option<&'a str>, ImportError> {
        match self.opt_str(key)? {
            Some(s) if s.len() > max => Err(self.fail(
                key,
                format!("is {} bytes; it may be at most {max}", s.len()),
            )),
            other => Ok(other),
        }
    }

    /// A present string field of 1 to `max` bytes.
    fn req_bounded(&self, key: &str, max: usize) -> Result<&'a str, ImportError> {
        let s = self.req_nonempty(key)?;
        self.opt_bounded(key, max)?;
        Ok(s)
    }

    /// An optional string field that, when present, is 1 to `max` bytes.
    fn opt_id(&self, key: &str, max: usize) -> Result<Option<String>, ImportError> {
        match self.opt_bounded(key, max)? {
            Some("") => Err(self.fail(key, "must not be empty")),
            other => Ok(other.map(str::to_owned)),
        }
    }

    /// A time field, refused when it is impossible at `now` ([`impossible_time`]).
    fn opt_time_at(&self, key: &str, now: Timestamp) -> Result<Option<Timestamp>, ImportError> {
        let t = self.opt_time(key)?;
        match t.and_then(|t| impossible_time(t, now)) {
            Some(why) => Err(self.fail(key, why)),
            None => Ok(t),
        }
    }

    fn opt_time(&self, key: &str) -> Result<Option<Timestamp>, ImportError> {
        match self.opt_str(key)? {
            None => Ok(None),
            Some(s) => Timestamp::parse_rfc3339(s)
                .map(Some)
                .ok_or_else(|| self.fail(key, format!("is not an RFC 3339 time: {}", quoted(s)))),
        }
    }

    fn req_u32(&self, key: &str) -> Result<u32, ImportError> {
        match self.get(key) {
            None => Err(self.fail(key, "is missing")),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| self.fail(key, "must be a whole number from 0 to 4294967295")),
        }
    }

    /// A number written as a decimal string (as SQS writes its attributes).
    fn opt_decimal<T: FromStr>(&self, key: &str, what: &str) -> Result<Option<T>, ImportError> {
        match self.opt_str(key)? {
            None => Ok(None),
            Some(s) => s
                .parse()
                .map(Some)
                .map_err(|_| self.fail(key, format!("must be {what}, not {}", quoted(s)))),
        }
    }
}

// ---------------------------------------------------------------------------------------
// eventgrid

/// What the events of a blob say, as far as they say it.
#[derive(Default)]
struct BlobSummary<'a> {
    events: usize,
    /// Every event is an object with `deliveryAttempts` and `deadLetterReason`.
    complete: bool,
    first_id: Option<&'a str>,
    first_reason: Option<&'a str>,
    /// The one type all events share; `None` once two differ or one has none.
    common_type: Option<&'a str>,
    reasons: BTreeMap<&'a str, usize>,
    without_reason: usize,
    max_attempts: Option<u64>,
    last_attempt: Option<Timestamp>,
    first_publish: Option<Timestamp>,
}

fn nonempty_str<'a>(o: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    o.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn summarise(events: &[Value]) -> BlobSummary<'_> {
    let mut s = BlobSummary {
        events: events.len(),
        complete: !events.is_empty(),
        ..BlobSummary::default()
    };
    for (i, e) in events.iter().enumerate() {
        let Some(o) = e.as_object() else {
            s.complete = false;
            s.common_type = None;
            s.without_reason += 1;
            continue;
        };
        let type_key = if o.contains_key("specversion") {
            "type"
        } else {
            "eventType"
        };
        let t = nonempty_str(o, type_key);
        let reason = nonempty_str(o, "deadLetterReason");
        if i == 0 {
            s.first_id = nonempty_str(o, "id");
            s.first_reason = reason;
            s.common_type = t;
        } else if s.common_type != t {
            s.common_type = None;
        }
        match reason {
            Some(r) => *s.reasons.entry(r).or_default() += 1,
            None => {
                s.complete = false;
                s.without_reason += 1;
            }
        }
        match o.get("deliveryAttempts").and_then(Value::as_u64) {
            Some(n) => s.max_attempts = Some(s.max_attempts.map_or(n, |m| m.max(n))),
            None => s.complete = false,
        }
        let time = |k: &str| nonempty_str(o, k).and_then(Timestamp::parse_rfc3339);
        if let Some(t) = time("lastDeliveryAttemptTime") {
            s.last_attempt = Some(s.last_attempt.map_or(t, |l| l.max(t)));
        }
        if let Some(t) = time("publishTime") {
            s.first_publish = Some(s.first_publish.map_or(t, |f| f.min(t)));
        }
    }
    s
}

fn blob_description(v: &Value, s: &BlobSummary<'_>) -> String {
    let head = "imported Event Grid dead-letter blob";
    match v {
        Value::Array(_) if s.events == 0 => format!("{head}: an empty array, no event"),
        Value::Array(_) => {
            let noun = if s.events == 1 { "event" } else { "events" };
            let mut parts: Vec<String> = s
                .reasons
                .iter()
                .take(LISTED_REASONS)
                .map(|(r, n)| {
                    let r: String = r.chars().take(QUOTED_CHARS).collect();
                    format!("{r} ({n})")
                })
                .collect();
            if s.reasons.len() > LISTED_REASONS {
                parts.push(format!("{} more", s.reasons.len() - LISTED_REASONS));
            }
            if s.without_reason > 0 {
                parts.push(format!("no reason ({})", s.without_reason));
            }
            format!("{head}: {} {noun}; reasons: {}", s.events, parts.join(", "))
        }
        _ => format!("{head}: not an array of events"),
    }
}

/// Refuses a blob whose events carry evidence Event Grid cannot have written: an `id`
/// longer than [`MAX_ID_BYTES`], a `deliveryAttempts` that is not a whole number from 0
/// to [`MAX_EVENT_GRID_ATTEMPTS`], or a `lastDeliveryAttemptTime` or `publishTime` that is
/// not an RFC 3339 time or is impossible at `now` ([`impossible_time`]). Absent (or
/// `null`) evidence is not refused: it makes the record's quality `incomplete`. Elements
/// that are not objects are left to the replay judgement (which quarantines the blob).
fn check_events(events: &[Value], now: Timestamp) -> Result<(), ImportError> {
    let at = At {
        index: 0,
        line: None,
    };
    for (i, e) in events.iter().enumerate() {
        let Some(o) = e.as_object() else { continue };
        let fail = |key: &str, why: String| at.field(format!("[{i}].{key}"), why);
        if let Some(Value::String(id)) = o.get("id")
            && id.len() > MAX_ID_BYTES
        {
            return Err(fail(
                "id",
                format!("is {} bytes; an id may be at most {MAX_ID_BYTES}", id.len()),
            ));
        }
        match o.get("deliveryAttempts") {
            None | Some(Value::Null) => {}
            Some(v) => {
                if v.as_u64().is_none_or(|n| n > MAX_EVENT_GRID_ATTEMPTS) {
                    let shown: String = v.to_string().chars().take(QUOTED_CHARS).collect();
                    return Err(fail(
                        "deliveryAttempts",
                        format!(
                            "must be a whole number from 0 to {MAX_EVENT_GRID_ATTEMPTS} \
                             (Event Grid's most attempts), not {shown}"
                        ),
                    ));
                }
            }
        }
        for key in ["lastDeliveryAttemptTime", "publishTime"] {
            match o.get(key) {
                None | Some(Value::Null) => {}
                Some(Value::String(t)) => match Timestamp::parse_rfc3339(t) {
                    None => {
                        return Err(fail(key, format!("is not an RFC 3339 time: {}", quoted(t))));
                    }
                    Some(t) => {
                        if let Some(why) = impossible_time(t, now) {
                            return Err(fail(key, why));
                        }
                    }
                },
                Some(_) => return Err(fail(key, "must be a string (an RFC 3339 time)".into())),
            }
        }
    }
    Ok(())
}

fn event_grid(bytes: &[u8], now: Timestamp) -> Result<ImportedRecord, ImportError> {
    if nests_deeper_than(bytes, MAX_DEPTH) {
        return Err(ImportError::TooDeep { max: MAX_DEPTH });
    }
    let v: Value = crate::json::from_slice(bytes).map_err(|e| ImportError::Input {
        expected: "a JSON document (an Event Grid dead-letter blob)",
        error: e.to_string(),
    })?;
    let events = v.as_array().map(Vec::as_slice).unwrap_or_default();
    check_events(events, now)?;
    let s = summarise(events);
    let dead_lettered_at = s.last_attempt.unwrap_or(now);
    let complete = s.complete && s.last_attempt.is_some();
    let given = s.first_reason.filter(|r| r.len() <= MAX_REASON_BYTES);
    let reason = given.unwrap_or(IMPORTED_REASON);
    // Event Grid's delivery policy routed an event that names its reason; an event that
    // names none says nothing of how it was routed.
    let (route_kind, route_rule) = match given {
        Some(r) => (Route::BrokerRouted, RouteRule::named(r)),
        None => (Route::RouteIndeterminate, None),
    };
    Ok(ImportedRecord {
        line: None,
        format: RecordFormat::Events,
        message_id: s
            .first_id
            .map_or_else(redrive_core::id::new_message_id, str::to_owned),
        body: bytes.to_vec(),
        content_type: Some(crate::cloudevent::BATCH.to_owned()),
        properties: Properties::new(),
        correlation_id: None,
        session_id: None,
        message_type: s.common_type.map(str::to_owned),
        reason: reason.to_owned(),
        description: Some(blob_description(&v, &s)),
        delivery_count: s
            .max_attempts
            .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        count_quality: if complete {
            EvidenceQuality::Approximate
        } else {
            EvidenceQuality::Incomplete
        },
        first_delivered_at: None,
        last_delivered_at: s.last_attempt,
        enqueued_at: s.first_publish.unwrap_or(dead_lettered_at),
        dead_lettered_at,
        route_kind,
        route_rule,
        policy_version: None,
        consumer: None,
        rule_version: None,
    })
}

// ---------------------------------------------------------------------------------------
// sqs

const SQS_EXPECTED: &str = "the JSON output of SQS ReceiveMessage ({\"Messages\": [...]})";

#[derive(serde::Deserialize)]
struct ReceiveOutput {
    #[serde(rename = "Messages", default)]
    messages: Option<Bounded<Value, MAX_IMPORT_RECORDS>>,
}

/// A message attribute as redrive's SQS endpoint stores it.
#[derive(serde::Serialize)]
struct StoredAttr<'a> {
    name: &'a str,
    #[serde(rename = "type")]
    data_type: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    string: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    binary_b64: Option<String>,
}

/// System attributes as redrive's SQS endpoint stores them.
#[derive(serde::Serialize)]
struct SystemInfo<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    sender_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_header: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    group_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dedup_id: Option<&'a str>,
}

fn sqs(bytes: &[u8], now: Timestamp) -> Result<Vec<ImportedRecord>, ImportError> {
    if nests_deeper_than(bytes, MAX_DEPTH) {
        return Err(ImportError::TooDeep { max: MAX_DEPTH });
    }
    let out: ReceiveOutput = crate::json::from_slice(bytes).map_err(|e| ImportError::Input {
        expected: SQS_EXPECTED,
        error: e.to_string(),
    })?;
    let messages = match out.messages {
        None => return Err(ImportError::NoRecords),
        Some(Bounded::Other(found)) => {
            return Err(ImportError::Input {
                expected: SQS_EXPECTED,
                error: format!("`Messages` is {found}, not an array"),
            });
        }
        Some(Bounded::Array { total, .. }) if total > MAX_IMPORT_RECORDS => {
            return Err(ImportError::TooManyRecords {
                count: total,
                max: MAX_IMPORT_RECORDS,
            });
        }
        Some(Bounded::Array { items, .. }) => items,
    };
    if messages.is_empty() {
        return Err(ImportError::NoRecords);
    }
    messages
        .iter()
        .enumerate()
        .map(|(index, m)| sqs_message(At { index, line: None }, m, now))
        .collect()
}

fn sqs_message(at: At, m: &Value, now: Timestamp) -> Result<ImportedRecord, ImportError> {
    let Value::Object(map) = m else {
        return Err(at.whole("is not a JSON object"));
    };
    let f = Fields { map, at, path: "" };
    let message_id = f.req_bounded("MessageId", MAX_ID_BYTES)?;
    let body = f.req_str("Body")?;
    if let Some(given) = f.opt_str("MD5OfBody")? {
        let actual = md5_hex(body.as_bytes());
        if !given.eq_ignore_ascii_case(&actual) {
            return Err(f.fail(
                "MD5OfBody",
                format!(
                    "is {} but the MD5 of `Body` is {actual}: the body is not the one SQS held",
                    quoted(given)
                ),
            ));
        }
    }
    let empty = Map::new();
    let attrs = Fields {
        map: f.opt_object("Attributes")?.unwrap_or(&empty),
        at,
        path: "Attributes.",
    };
    let receive_count =
        attrs.opt_decimal::<u32>("ApproximateReceiveCount", "a whole number in a string")?;
    let epoch_ms = |key: &str| -> Result<Option<Timestamp>, ImportError> {
        match attrs.opt_decimal::<i64>(key, "epoch milliseconds in a string")? {
            Some(ms) if ms < 0 => Err(attrs.fail(key, "must not be negative")),
            Some(ms) => match impossible_time(Timestamp(ms), now) {
                Some(why) => Err(attrs.fail(key, why)),
                None => Ok(Some(Timestamp(ms))),
            },
            None => Ok(None),
        }
    };
    let sent = epoch_ms("SentTimestamp")?;
    let first_received = epoch_ms("ApproximateFirstReceiveTimestamp")?;
    let group_id = attrs.opt_str("MessageGroupId")?;
    let system = SystemInfo {
        sender_id: attrs.opt_str("SenderId")?,
        trace_header: attrs.opt_str("AWSTraceHeader")?,
        group_id,
        dedup_id: attrs.opt_str("MessageDeduplicationId")?,
    };
    let source_arn = attrs.opt_str("DeadLetterQueueSourceArn")?;

    let mut properties = Properties::new();
    let stored = message_attributes(&f)?;
    if !stored.is_empty() {
        properties.insert(
            SQS_ATTRIBUTES_PROPERTY.to_owned(),
            PropertyValue::String(Value::from(stored).to_string()),
        );
    }
    if system.sender_id.is_some()
        || system.trace_header.is_some()
        || system.group_id.is_some()
        || system.dedup_id.is_some()
    {
        let text = serde_json::to_value(&system)
            .map(|v| v.to_string())
            .map_err(|e| f.fail("Attributes", e.to_string()))?;
        properties.insert(SQS_SYSTEM_PROPERTY.to_owned(), PropertyValue::String(text));
    }
    let mut description = "imported from an SQS dead-letter queue; SQS does not record why \
                           or when a message was dead-lettered"
        .to_owned();
    if let Some(arn) = source_arn {
        let arn: String = arn.chars().take(2 * MAX_REASON_BYTES).collect();
        description.push_str(&format!("; source queue: {arn}"));
    }
    Ok(ImportedRecord {
        line: None,
        format: RecordFormat::Message,
        message_id: message_id.to_owned(),
        body: body.as_bytes().to_vec(),
        content_type: None,
        properties,
        correlation_id: None,
        session_id: group_id.map(str::to_owned),
        message_type: None,
        reason: IMPORTED_REASON.to_owned(),
        description: Some(description),
        delivery_count: receive_count.unwrap_or(0),
        count_quality: if receive_count.is_some() && sent.is_some() {
            EvidenceQuality::Approximate
        } else {
            EvidenceQuality::Incomplete
        },
        first_delivered_at: first_received,
        last_delivered_at: None,
        enqueued_at: sent.unwrap_or(now),
        dead_lettered_at: now,
        // SQS does not record why or how a message reached its dead-letter queue.
        route_kind: Route::RouteIndeterminate,
        route_rule: None,
        policy_version: None,
        consumer: None,
        rule_version: None,
    })
}

/// The message attributes in the stored shape, sorted by name, each checked: a data type
/// `String`, `Number` or `Binary` (with an optional `.label`), and the value it needs
/// (`StringValue`, or `BinaryValue` in base64).
fn message_attributes(f: &Fields<'_>) -> Result<Vec<Value>, ImportError> {
    let Some(attrs) = f.opt_object("MessageAttributes")? else {
        return Ok(Vec::new());
    };
    let sorted: BTreeMap<&String, &Value> = attrs.iter().collect();
    let mut out = Vec::with_capacity(sorted.len());
    for (name, v) in sorted {
        let path = format!("MessageAttributes.{name}.");
        let Value::Object(map) = v else {
            return Err(f.fail(
                &format!("MessageAttributes.{name}"),
                "must be a JSON object",
            ));
        };
        let a = Fields {
            map,
            at: f.at,
            path: &path,
        };
        let data_type = a.req_nonempty("DataType")?;
        let base = data_type.split_once('.').map_or(data_type, |(b, _)| b);
        let stored = match base {
            "String" | "Number" => StoredAttr {
                name,
                data_type,
                string: Some(a.req_str("StringValue")?),
                binary_b64: None,
            },
            "Binary" => {
                let text = a.req_str("BinaryValue")?;
                let bytes = B64
                    .decode(text.as_bytes())
                    .map_err(|e| a.fail("BinaryValue", format!("is not base64: {e}")))?;
                StoredAttr {
                    name,
                    data_type,
                    string: None,
                    binary_b64: Some(B64.encode(bytes)),
                }
            }
            _ => {
                return Err(a.fail(
                    "DataType",
                    format!(
                        "must be String, Number or Binary (with an optional .label), not {}",
                        quoted(data_type)
                    ),
                ));
            }
        };
        let value = serde_json::to_value(&stored).map_err(|e| a.fail("DataType", e.to_string()))?;
        out.push(value);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// json

fn json_lines(bytes: &[u8], now: Timestamp) -> Result<Vec<ImportedRecord>, ImportError> {
    let lines: Vec<(usize, &[u8])> = bytes
        .split(|b| *b == b'\n')
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_ascii()))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    if lines.len() > MAX_IMPORT_RECORDS {
        return Err(ImportError::TooManyRecords {
            count: lines.len(),
            max: MAX_IMPORT_RECORDS,
        });
    }
    if lines.is_empty() {
        return Err(ImportError::NoRecords);
    }
    lines
        .into_iter()
        .enumerate()
        .map(|(index, (line, text))| {
            exported_record(
                At {
                    index,
                    line: Some(line),
                },
                text,
                now,
            )
        })
        .collect()
}

fn exported_record(at: At, text: &[u8], now: Timestamp) -> Result<ImportedRecord, ImportError> {
    if nests_deeper_than(text, MAX_DEPTH) {
        return Err(at.whole(format!(
            "nests arrays and objects deeper than {MAX_DEPTH} levels"
        )));
    }
    let v: Value =
        crate::json::from_slice(text).map_err(|e| at.whole(format!("is not valid JSON: {e}")))?;
    let Value::Object(map) = &v else {
        return Err(at.whole("is not a JSON object"));
    };
    let f = Fields { map, at, path: "" };
    let message_id = f.req_bounded("message_id", MAX_ID_BYTES)?.to_owned();
    let Some(text_body) = f.opt_str("body")? else {
        return Err(f.fail(
            "body",
            "is missing: the record was exported by a caller who may not read payloads \
             (export it again with the payload-reader role)",
        ));
    };
    let body = match f.opt_str("body_encoding")? {
        None | Some("utf8") => text_body.as_bytes().to_vec(),
        Some("base64") => B64
            .decode(text_body.as_bytes())
            .map_err(|e| f.fail("body", format!("is not valid base64: {e}")))?,
        Some(other) => {
            return Err(f.fail(
                "body_encoding",
                format!("must be `utf8` or `base64`, not {}", quoted(other)),
            ));
        }
    };
    if let Some(given) = f.opt_str("body_sha256")? {
        let actual = redrive_core::digest::sha256_hex(&body);
        if !given.eq_ignore_ascii_case(&actual) {
            return Err(f.fail(
                "body_sha256",
                format!(
                    "is {} but the SHA-256 of `body` is {actual}: the body is not the one exported",
                    quoted(given)
                ),
            ));
        }
    }
    let mut properties = Properties::new();
    for (k, v) in f.opt_object("properties")?.into_iter().flatten() {
        let pv = match v {
            Value::Bool(b) => PropertyValue::Bool(*b),
            Value::String(s) => PropertyValue::String(s.clone()),
            Value::Number(n) => match n.as_i64() {
                Some(i) => PropertyValue::Int(i),
                None => PropertyValue::Float(n.as_f64().unwrap_or(0.0)),
            },
            _ => {
                return Err(f.fail(
                    &format!("properties.{k}"),
                    "must be a string, number or boolean",
                ));
            }
        };
        properties.insert(k.clone(), pv);
    }
    let quality = f.req_str("delivery_count_quality")?;
    let count_quality = match quality.parse::<EvidenceQuality>() {
        // Only the broker that counted the deliveries can vouch that every one was
        // counted; an exported count is a copy of that claim, not the claim.
        Ok(EvidenceQuality::Exact) => EvidenceQuality::Approximate,
        Ok(q) => q,
        Err(_) => {
            return Err(f.fail(
                "delivery_count_quality",
                format!(
                    "must be `exact`, `approximate`, `incomplete` or `unavailable`, not {}",
                    quoted(quality)
                ),
            ));
        }
    };
    let format = match f.opt_str("format")? {
        None => RecordFormat::Message,
        Some(s) => s.parse::<RecordFormat>().map_err(|_| {
            f.fail(
                "format",
                format!("must be `message` or `events`, not {}", quoted(s)),
            )
        })?,
    };
    let reason = f.req_bounded("reason", MAX_REASON_BYTES)?.to_owned();
    let route = exported_route(&f, &reason)?;
    let description = f
        .opt_bounded("description", MAX_DESCRIPTION_BYTES)?
        .map(str::to_owned);
    let required = |key: &str| -> Result<Timestamp, ImportError> {
        f.opt_time_at(key, now)?
            .ok_or_else(|| f.fail(key, "is missing"))
    };
    let first_delivered_at = f.opt_time_at("first_delivered_at", now)?;
    let last_delivered_at = f.opt_time_at("last_delivered_at", now)?;
    let enqueued_at = required("enqueued_time")?;
    let dead_lettered_at = required("dead_lettered_at")?;
    if dead_lettered_at < enqueued_at {
        return Err(f.fail(
            "dead_lettered_at",
            "is before `enqueued_time`: a message is dead-lettered after it is sent",
        ));
    }
    if let (Some(first), Some(last)) = (first_delivered_at, last_delivered_at)
        && last < first
    {
        return Err(f.fail("last_delivered_at", "is before `first_delivered_at`"));
    }
    if last_delivered_at.is_some_and(|l| l > dead_lettered_at) {
        return Err(f.fail(
            "last_delivered_at",
            "is after `dead_lettered_at`: a dead letter is delivered no more",
        ));
    }
    Ok(ImportedRecord {
        line: at.line,
        format,
        message_id,
        body,
        content_type: f.opt_id("content_type", 256)?,
        properties,
        correlation_id: f.opt_id("correlation_id", MAX_ID_BYTES)?,
        session_id: f.opt_id("session_id", MAX_ID_BYTES)?,
        message_type: f.opt_id("type", MAX_ID_BYTES)?,
        reason,
        description,
        delivery_count: f.req_u32("delivery_count")?,
        count_quality,
        first_delivered_at,
        last_delivered_at,
        enqueued_at,
        dead_lettered_at,
        route_kind: route.kind,
        route_rule: route.rule,
        policy_version: route.policy_version,
        consumer: route.consumer,
        rule_version: route.rule_version,
    })
}

/// The route evidence of an exported record.
struct ExportedRoute {
    kind: Route,
    rule: Option<RouteRule>,
    policy_version: Option<u64>,
    consumer: Option<String>,
    rule_version: Option<String>,
}

/// Reads an exported record's route evidence: `route` (`broker_routed`,
/// `application_quarantined`, `route_indeterminate`), else `routed_by` (`broker`,
/// `application`; `import`, or neither, as the reason says); `route_rule`, else the
/// application rule of an application's record or the rule its reason names;
/// `policy_version` (from 1), `consumer` and `rule_version` ([`check_classifier`]
/// bounds). What the record does not say stays unsaid: `route_indeterminate`, no rule,
/// no policy version.
///
/// [`check_classifier`]: redrive_core::dead_letter::check_classifier
fn exported_route(f: &Fields<'_>, reason: &str) -> Result<ExportedRoute, ImportError> {
    let by_reason = || match RouteRule::named(reason) {
        Some(_) => Route::BrokerRouted,
        None => Route::RouteIndeterminate,
    };
    let kind = match (f.opt_str("route")?, f.opt_str("routed_by")?) {
        (Some(r), _) => r.parse::<Route>().map_err(|_| {
            f.fail(
                "route",
                format!(
                    "must be `broker_routed`, `application_quarantined` or \
                     `route_indeterminate`, not {}",
                    quoted(r)
                ),
            )
        })?,
        (None, Some("broker")) => Route::BrokerRouted,
        (None, Some("application")) => Route::ApplicationQuarantined,
        (None, Some("import") | None) => by_reason(),
        (None, Some(other)) => {
            return Err(f.fail(
                "routed_by",
                format!(
                    "must be `broker`, `application` or `import`, not {}",
                    quoted(other)
                ),
            ));
        }
    };
    let rule = match f.opt_str("route_rule")? {
        Some(r) => Some(r.parse::<RouteRule>().map_err(|_| {
            f.fail(
                "route_rule",
                format!(
                    "must be `delivery_threshold`, `expiry`, `filter`, `size` or \
                     `application`, not {}",
                    quoted(r)
                ),
            )
        })?),
        None => match kind {
            Route::ApplicationQuarantined => Some(RouteRule::Application),
            Route::BrokerRouted => RouteRule::named(reason),
            Route::RouteIndeterminate => None,
        },
    };
    let policy_version = match f.get("policy_version") {
        None => None,
        Some(v) => Some(v.as_u64().filter(|n| *n >= 1).ok_or_else(|| {
            f.fail(
                "policy_version",
                "must be a whole number from 1 (policy versions start at 1)",
            )
        })?),
    };
    let classifier = |key: &str| -> Result<Option<String>, ImportError> {
        match f.opt_str(key)? {
            None => Ok(None),
            Some(v) => match redrive_core::dead_letter::check_classifier(v) {
                Ok(()) => Ok(Some(v.to_owned())),
                Err(why) => Err(f.fail(key, why)),
            },
        }
    };
    Ok(ExportedRoute {
        kind,
        rule,
        policy_version,
        consumer: classifier("consumer")?,
        rule_version: classifier("rule_version")?,
    })
}

// ---------------------------------------------------------------------------------------
// MD5 (RFC 1321), for `MD5OfBody` only: a checksum SQS gives, not a security measure.

/// Per-round shift amounts.
const MD5_S: [u32; 64] = [
    7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, //
    5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, //
    4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, //
    6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
];

/// The sine-derived constants of RFC 1321.
const MD5_K: [u32; 64] = [
    0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613, 0xfd469501,
    0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193, 0xa679438e, 0x49b40821,
    0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d, 0x02441453, 0xd8a1e681, 0xe7d3fbc8,
    0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed, 0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a,
    0xfffa3942, 0x8771f681, 0x6d9d6122, 0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70,
    0x289b7ec6, 0xeaa127fa, 0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665,
    0xf4292244, 0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
    0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb, 0xeb86d391,
];

fn md5_block(state: &mut [u32; 4], block: &[u8]) {
    let mut m = [0u32; 16];
    for (j, w) in m.iter_mut().enumerate() {
        *w = u32::from_le_bytes([
            block[4 * j],
            block[4 * j + 1],
            block[4 * j + 2],
            block[4 * j + 3],
        ]);
    }
    let [mut a, mut b, mut c, mut d] = *state;
    for i in 0..64 {
        let (f, g) = match i / 16 {
            0 => ((b & c) | (!b & d), i),
            1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
            2 => (b ^ c ^ d, (3 * i + 5) % 16),
            _ => (c ^ (b | !d), (7 * i) % 16),
        };
        let rotated = a
            .wrapping_add(f)
            .wrapping_add(MD5_K[i])
            .wrapping_add(m[g])
            .rotate_left(MD5_S[i]);
        (a, d, c, b) = (d, c, b, b.wrapping_add(rotated));
    }
    for (s, v) in state.iter_mut().zip([a, b, c, d]) {
        *s = s.wrapping_add(v);
    }
}

/// Lower-case hex MD5 of `bytes`.
fn md5_hex(bytes: &[u8]) -> String {
    let mut state: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
    let mut blocks = bytes.chunks_exact(64);
    for block in &mut blocks {
        md5_block(&mut state, block);
    }
    let rest = blocks.remainder();
    let mut tail = Vec::with_capacity(128);
    tail.extend_from_slice(rest);
    tail.push(0x80);
    while tail.len() % 64 != 56 {
        tail.push(0);
    }
    let bits = (bytes.len() as u64).wrapping_mul(8);
    tail.extend_from_slice(&bits.to_le_bytes());
    for block in tail.chunks_exact(64) {
        md5_block(&mut state, block);
    }
    state
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: Timestamp = Timestamp(1_800_000_000_000);

    fn t(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).expect("a time")
    }

    fn import(format: ImportFormat, v: &Value) -> Result<Vec<ImportedRecord>, ImportError> {
        parse_import(format, v.to_string().as_bytes(), NOW)
    }

    fn one(format: ImportFormat, v: &Value) -> ImportedRecord {
        let mut records = import(format, v).expect("imported");
        assert_eq!(records.len(), 1);
        records.remove(0)
    }

    #[test]
    fn formats_round_trip_by_name() {
        for f in ImportFormat::ALL {
            assert_eq!(f.as_str().parse::<ImportFormat>(), Ok(f));
            assert_eq!(f.to_string(), f.as_str());
        }
        assert!("csv".parse::<ImportFormat>().is_err());
    }

    #[test]
    fn md5_matches_the_rfc_vectors() {
        assert_eq!(md5_hex(b""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(md5_hex(b"abc"), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(
            md5_hex(b"The quick brown fox jumps over the lazy dog"),
            "9e107d9d372bb6826bd81d3542a419d6"
        );
        assert_eq!(
            md5_hex(
                b"12345678901234567890123456789012345678901234567890123456789012345678901234567890"
            ),
            "57edf4a22be3c955ac49da2e2107b67a"
        );
        assert_eq!(
            md5_hex(&[b'a'; 56]),
            "3b0c8ac703f828b04c6c197006d17218",
            "padding spills into a second block"
        );
    }

    // ---- eventgrid

    fn dl_event(id: &str, reason: &str, attempts: u32, last: &str, publish: &str) -> Value {
        json!({
            "id": id, "eventType": "blob.deleted", "subject": "/blobs/a",
            "eventTime": publish, "dataVersion": "", "data": {},
            "deadLetterReason": reason, "deliveryAttempts": attempts,
            "lastDeliveryOutcome": "NotFound", "lastHttpStatusCode": 404,
            "publishTime": publish, "lastDeliveryAttemptTime": last,
        })
    }

    #[test]
    fn an_event_grid_blob_is_one_events_record_with_approximate_evidence() {
        let blob = json!([
            dl_event(
                "e1",
                "MaxDeliveryAttemptsExceeded",
                10,
                "2026-01-01T01:00:00Z",
                "2026-01-01T00:10:00Z"
            ),
            dl_event(
                "e2",
                "TimeToLiveExceeded",
                7,
                "2026-01-01T01:30:00Z",
                "2026-01-01T00:00:00Z"
            ),
            dl_event(
                "e1",
                "MaxDeliveryAttemptsExceeded",
                10,
                "2026-01-01T01:10:00Z",
                "2026-01-01T00:20:00Z"
            ),
        ]);
        let bytes = serde_json::to_vec_pretty(&blob).expect("JSON");
        let r = parse_import(ImportFormat::EventGrid, &bytes, NOW)
            .expect("imported")
            .remove(0);
        assert_eq!(r.format, RecordFormat::Events);
        assert_eq!(r.body, bytes, "the blob's bytes, unchanged");
        assert_eq!(r.message_id, "e1");
        assert_eq!(r.message_type.as_deref(), Some("blob.deleted"));
        assert_eq!(
            r.content_type.as_deref(),
            Some("application/cloudevents-batch+json")
        );
        assert_eq!(r.reason, "MaxDeliveryAttemptsExceeded");
        let d = r.description.unwrap_or_default();
        assert!(d.contains("3 events"), "{d}");
        assert!(d.contains("MaxDeliveryAttemptsExceeded (2)"), "{d}");
        assert!(d.contains("TimeToLiveExceeded (1)"), "{d}");
        assert_eq!(r.delivery_count, 10);
        assert_eq!(r.count_quality, EvidenceQuality::Approximate);
        assert_eq!(r.dead_lettered_at, t("2026-01-01T01:30:00Z"));
        assert_eq!(r.last_delivered_at, Some(t("2026-01-01T01:30:00Z")));
        assert_eq!(r.enqueued_at, t("2026-01-01T00:00:00Z"));
        assert_eq!(r.first_delivered_at, None);
    }

    #[test]
    fn an_event_grid_blob_lacking_evidence_is_incomplete() {
        let full = || {
            dl_event(
                "e1",
                "MaxDeliveryAttemptsExceeded",
                3,
                "2026-01-01T01:00:00Z",
                "2026-01-01T00:00:00Z",
            )
        };
        for drop in ["deliveryAttempts", "deadLetterReason"] {
            let mut second = full();
            second.as_object_mut().map(|m| m.remove(drop));
            let r = one(ImportFormat::EventGrid, &json!([full(), second]));
            assert_eq!(r.count_quality, EvidenceQuality::Incomplete, "{drop}");
            assert_eq!(r.dead_lettered_at, t("2026-01-01T01:00:00Z"));
        }
        let mut timeless = full();
        for k in ["lastDeliveryAttemptTime", "publishTime"] {
            timeless.as_object_mut().map(|m| m.remove(k));
        }
        let r = one(ImportFormat::EventGrid, &json!([timeless]));
        assert_eq!(r.count_quality, EvidenceQuality::Incomplete);
        assert_eq!(r.dead_lettered_at, NOW);
        assert_eq!(r.enqueued_at, NOW);
    }

    #[test]
    fn mixed_types_leave_the_record_untyped() {
        let mut other = dl_event("e2", "X", 1, "2026-01-01T01:00:00Z", "2026-01-01T00:00:00Z");
        other["eventType"] = json!("order.created");
        let first = dl_event("e1", "X", 1, "2026-01-01T01:00:00Z", "2026-01-01T00:00:00Z");
        let r = one(ImportFormat::EventGrid, &json!([first, other]));
        assert_eq!(r.message_type, None);
        let ce = json!({"specversion": "1.0", "id": "c", "source": "/s", "type": "blob.deleted"});
        let r = one(ImportFormat::EventGrid, &json!([first, ce]));
        assert_eq!(
            r.message_type.as_deref(),
            Some("blob.deleted"),
            "CloudEvents `type` and Event Grid `eventType` compare alike"
        );
    }

    #[test]
    fn a_blob_that_is_json_but_not_events_still_imports_as_one_record() {
        for blob in [json!({"not": "an array"}), json!([]), json!([1, "two"])] {
            let bytes = blob.to_string().into_bytes();
            let r = parse_import(ImportFormat::EventGrid, &bytes, NOW)
                .expect("imported")
                .remove(0);
            assert_eq!(r.format, RecordFormat::Events);
            assert_eq!(r.body, bytes);
            assert_eq!(r.reason, IMPORTED_REASON);
            assert_eq!(r.count_quality, EvidenceQuality::Incomplete);
            assert_eq!(r.dead_lettered_at, NOW);
            assert_eq!(r.message_id.len(), 36, "a new id");
        }
        assert!(matches!(
            parse_import(ImportFormat::EventGrid, b"[{", NOW),
            Err(ImportError::Input { .. })
        ));
        assert!(matches!(
            parse_import(ImportFormat::EventGrid, br#"[{"id":1,"id":2}]"#, NOW),
            Err(ImportError::Input { error, .. }) if error.contains("duplicate key")
        ));
        let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
        assert_eq!(
            parse_import(ImportFormat::EventGrid, deep.as_bytes(), NOW),
            Err(ImportError::TooDeep { max: MAX_DEPTH })
        );
    }

    #[test]
    fn the_input_size_is_checked_before_anything_is_read() {
        let big = vec![b' '; MAX_IMPORT_BYTES + 1];
        for f in ImportFormat::ALL {
            assert_eq!(
                parse_import(f, &big, NOW),
                Err(ImportError::TooLarge {
                    size: MAX_IMPORT_BYTES + 1,
                    max: MAX_IMPORT_BYTES
                })
            );
        }
    }

    // ---- sqs

    fn sqs_message(id: &str, body: &str) -> Value {
        json!({
            "MessageId": id,
            "ReceiptHandle": "AQEB...",
            "MD5OfBody": md5_hex(body.as_bytes()),
            "Body": body,
            "Attributes": {
                "ApproximateReceiveCount": "5",
                "SentTimestamp": "1700000000000",
                "ApproximateFirstReceiveTimestamp": "1700000001000",
                "SenderId": "AIDAEXAMPLE",
                "DeadLetterQueueSourceArn": "arn:aws:sqs:eu-west-1:123456789012:orders",
            },
            "MD5OfMessageAttributes": "ignored",
            "MessageAttributes": {
                "tenant": {"DataType": "String", "StringValue": "acme"},
                "amount": {"DataType": "Number.int", "StringValue": "42"},
                "blob": {"DataType": "Binary", "BinaryValue": "AP8="},
            },
        })
    }

    #[test]
    fn sqs_messages_become_message_records_with_their_attributes() {
        let out = json!({
            "Messages": [sqs_message("m1", "{\"order\":1}"), sqs_message("m2", "two")],
            "ResponseMetadata": {"HTTPStatusCode": 200},
        });
        let records = import(ImportFormat::Sqs, &out).expect("imported");
        assert_eq!(records.len(), 2);
        let r = &records[0];
        assert_eq!(r.format, RecordFormat::Message);
        assert_eq!(r.message_id, "m1");
        assert_eq!(r.body, b"{\"order\":1}");
        assert_eq!(r.delivery_count, 5);
        assert_eq!(r.count_quality, EvidenceQuality::Approximate);
        assert_eq!(r.enqueued_at, Timestamp(1_700_000_000_000));
        assert_eq!(r.first_delivered_at, Some(Timestamp(1_700_000_001_000)));
        assert_eq!(r.last_delivered_at, None);
        assert_eq!(r.dead_lettered_at, NOW);
        assert_eq!(r.reason, IMPORTED_REASON);
        let d = r.description.as_deref().unwrap_or_default();
        assert!(d.contains("SQS dead-letter queue"), "{d}");
        assert!(
            d.contains("arn:aws:sqs:eu-west-1:123456789012:orders"),
            "{d}"
        );
        assert_eq!(r.session_id, None);
        let Some(PropertyValue::String(attrs)) = r.properties.get(SQS_ATTRIBUTES_PROPERTY) else {
            panic!("attributes kept: {:?}", r.properties);
        };
        let attrs: Value = serde_json::from_str(attrs).expect("JSON");
        assert_eq!(
            attrs,
            json!([
                {"name": "amount", "type": "Number.int", "string": "42"},
                {"name": "blob", "type": "Binary", "binary_b64": "AP8="},
                {"name": "tenant", "type": "String", "string": "acme"},
            ])
        );
        let Some(PropertyValue::String(system)) = r.properties.get(SQS_SYSTEM_PROPERTY) else {
            panic!("system attributes kept");
        };
        assert_eq!(
            serde_json::from_str::<Value>(system).expect("JSON"),
            json!({"sender_id": "AIDAEXAMPLE"})
        );
    }

    #[test]
    fn a_fifo_message_keeps_its_group_as_the_session() {
        let mut m = sqs_message("m1", "b");
        m["Attributes"]["MessageGroupId"] = json!("g1");
        m["Attributes"]["MessageDeduplicationId"] = json!("d1");
        let r = one(ImportFormat::Sqs, &json!({"Messages": [m]}));
        assert_eq!(r.session_id.as_deref(), Some("g1"));
        let Some(PropertyValue::String(system)) = r.properties.get(SQS_SYSTEM_PROPERTY) else {
            panic!("system attributes kept");
        };
        let system: Value = serde_json::from_str(system).expect("JSON");
        assert_eq!(system["group_id"], "g1");
        assert_eq!(system["dedup_id"], "d1");
    }

    #[test]
    fn sqs_evidence_without_a_count_or_a_send_time_is_incomplete() {
        for drop in ["ApproximateReceiveCount", "SentTimestamp"] {
            let mut m = sqs_message("m1", "b");
            m["Attributes"].as_object_mut().map(|a| a.remove(drop));
            let r = one(ImportFormat::Sqs, &json!({"Messages": [m]}));
            assert_eq!(r.count_quality, EvidenceQuality::Incomplete, "{drop}");
        }
        let mut bare = sqs_message("m1", "b");
        for k in ["Attributes", "MessageAttributes", "MD5OfBody"] {
            bare.as_object_mut().map(|m| m.remove(k));
        }
        let r = one(ImportFormat::Sqs, &json!({"Messages": [bare]}));
        assert_eq!(r.count_quality, EvidenceQuality::Incomplete);
        assert_eq!((r.delivery_count, r.enqueued_at), (0, NOW));
        assert!(r.properties.is_empty());
    }

    fn record_error(r: Result<Vec<ImportedRecord>, ImportError>) -> (usize, String, String) {
        match r {
            Err(e @ ImportError::Record { .. }) => {
                let text = e.to_string();
                let ImportError::Record { index, field, .. } = e else {
                    unreachable!()
                };
                (index, field.unwrap_or_default(), text)
            }
            other => panic!("expected a record error, got {other:?}"),
        }
    }

    #[test]
    fn an_md5_mismatch_refuses_the_whole_import() {
        let mut bad = sqs_message("m2", "changed");
        bad["MD5OfBody"] = json!(md5_hex(b"original"));
        let r = import(
            ImportFormat::Sqs,
            &json!({"Messages": [sqs_message("m1", "ok"), bad]}),
        );
        let (index, field, text) = record_error(r);
        assert_eq!((index, field.as_str()), (1, "MD5OfBody"));
        assert!(text.starts_with("record 1: `MD5OfBody` is"), "{text}");
        let mut upper = sqs_message("m1", "ok");
        upper["MD5OfBody"] = json!(md5_hex(b"ok").to_uppercase());
        assert!(import(ImportFormat::Sqs, &json!({"Messages": [upper]})).is_ok());
    }

    /// A change to a message that makes one field bad.
    type Edit = fn(&mut Value);

    #[test]
    fn bad_sqs_fields_are_named() {
        let cases: [(&str, Edit); 6] = [
            ("MessageId", |m| m["MessageId"] = json!("")),
            ("Body", |m| m["Body"] = json!(3)),
            ("Attributes.SentTimestamp", |m| {
                m["Attributes"]["SentTimestamp"] = json!("yesterday")
            }),
            ("Attributes.ApproximateReceiveCount", |m| {
                m["Attributes"]["ApproximateReceiveCount"] = json!(5)
            }),
            ("MessageAttributes.blob.BinaryValue", |m| {
                m["MessageAttributes"]["blob"]["BinaryValue"] = json!("**")
            }),
            ("MessageAttributes.tenant.DataType", |m| {
                m["MessageAttributes"]["tenant"]["DataType"] = json!("Text")
            }),
        ];
        for (want, edit) in cases {
            let mut m = sqs_message("m1", "b");
            edit(&mut m);
            let (index, field, _) =
                record_error(import(ImportFormat::Sqs, &json!({"Messages": [m]})));
            assert_eq!((index, field.as_str()), (0, want));
        }
    }

    #[test]
    fn sqs_inputs_that_are_not_receive_output_are_refused() {
        assert_eq!(
            import(ImportFormat::Sqs, &json!({})),
            Err(ImportError::NoRecords)
        );
        assert_eq!(
            import(ImportFormat::Sqs, &json!({"Messages": []})),
            Err(ImportError::NoRecords)
        );
        assert!(matches!(
            import(ImportFormat::Sqs, &json!({"Messages": {"a": 1}})),
            Err(ImportError::Input { error, .. }) if error.contains("`Messages` is an object")
        ));
        assert!(matches!(
            import(ImportFormat::Sqs, &json!([1])),
            Err(ImportError::Input { .. })
        ));
        let (index, _, _) = record_error(import(ImportFormat::Sqs, &json!({"Messages": ["x"]})));
        assert_eq!(index, 0);
    }

    #[test]
    fn more_than_the_record_limit_is_refused() {
        let m = sqs_message("m", "b").to_string();
        let many = format!(
            "{{\"Messages\":[{}]}}",
            vec![m.as_str(); MAX_IMPORT_RECORDS + 1].join(",")
        );
        assert_eq!(
            parse_import(ImportFormat::Sqs, many.as_bytes(), NOW),
            Err(ImportError::TooManyRecords {
                count: MAX_IMPORT_RECORDS + 1,
                max: MAX_IMPORT_RECORDS
            })
        );
        let exactly = format!(
            "{{\"Messages\":[{}]}}",
            vec![m.as_str(); MAX_IMPORT_RECORDS].join(",")
        );
        assert_eq!(
            parse_import(ImportFormat::Sqs, exactly.as_bytes(), NOW).map(|r| r.len()),
            Ok(MAX_IMPORT_RECORDS)
        );
        let line = exported("x").to_string();
        let lines = vec![line.as_str(); MAX_IMPORT_RECORDS + 1].join("\n");
        assert_eq!(
            parse_import(ImportFormat::Json, lines.as_bytes(), NOW),
            Err(ImportError::TooManyRecords {
                count: MAX_IMPORT_RECORDS + 1,
                max: MAX_IMPORT_RECORDS
            })
        );
    }

    // ---- json

    fn exported(message_id: &str) -> Value {
        json!({
            "id": "dl_0000000000000000000000000000",
            "queue": "orders", "area": "live",
            "message_id": message_id, "sequence_number": 7,
            "body": "hello", "body_encoding": "utf8",
            "body_sha256": redrive_core::digest::sha256_hex(b"hello"), "body_size": 5,
            "content_type": "text/plain",
            "properties": {"tenant": "acme", "n": 3, "f": 1.5, "ok": true},
            "correlation_id": "c1", "type": "order.created", "session_id": "s1",
            "reason": "MaxDeliveryCountExceeded", "description": "gave up",
            "delivery_count": 10, "delivery_count_quality": "exact",
            "first_delivered_at": "2026-01-01T00:01:00Z",
            "last_delivered_at": "2026-01-01T00:09:00Z",
            "enqueued_time": "2026-01-01T00:00:00Z",
            "dead_lettered_at": "2026-01-01T00:10:00Z",
            "policy_version": 1, "routed_by": "broker", "dead_letter_delivery_count": 0,
        })
    }

    fn lines(records: &[Value]) -> Vec<u8> {
        records
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
            .into_bytes()
    }

    #[test]
    fn an_export_reads_back_field_for_field() {
        let mut binary = exported("m2");
        binary["body"] = json!("AP8=");
        binary["body_encoding"] = json!("base64");
        binary["body_sha256"] = json!(redrive_core::digest::sha256_hex(&[0, 255]));
        binary["delivery_count_quality"] = json!("approximate");
        binary["format"] = json!("events");
        let mut input = lines(&[exported("m1"), binary]);
        input.extend_from_slice(b"\r\n\n");
        let records = parse_import(ImportFormat::Json, &input, NOW).expect("imported");
        assert_eq!(records.len(), 2);
        let mut props = Properties::new();
        props.insert("tenant".into(), PropertyValue::String("acme".into()));
        props.insert("n".into(), PropertyValue::Int(3));
        props.insert("f".into(), PropertyValue::Float(1.5));
        props.insert("ok".into(), PropertyValue::Bool(true));
        assert_eq!(
            records[0],
            ImportedRecord {
                line: Some(1),
                format: RecordFormat::Message,
                message_id: "m1".into(),
                body: b"hello".to_vec(),
                content_type: Some("text/plain".into()),
                properties: props,
                correlation_id: Some("c1".into()),
                session_id: Some("s1".into()),
                message_type: Some("order.created".into()),
                reason: "MaxDeliveryCountExceeded".into(),
                description: Some("gave up".into()),
                delivery_count: 10,
                // An exported `exact` is the exporter's claim: here it is approximate.
                count_quality: EvidenceQuality::Approximate,
                first_delivered_at: Some(t("2026-01-01T00:01:00Z")),
                last_delivered_at: Some(t("2026-01-01T00:09:00Z")),
                enqueued_at: t("2026-01-01T00:00:00Z"),
                dead_lettered_at: t("2026-01-01T00:10:00Z"),
                route_kind: Route::BrokerRouted,
                route_rule: Some(RouteRule::DeliveryThreshold),
                policy_version: Some(1),
                consumer: None,
                rule_version: None,
            }
        );
        assert_eq!(records[1].body, [0, 255]);
        assert_eq!(records[1].format, RecordFormat::Events);
        assert_eq!(records[1].count_quality, EvidenceQuality::Approximate);
        let mut incomplete = exported("m3");
        incomplete["delivery_count_quality"] = json!("incomplete");
        let r = one(ImportFormat::Json, &incomplete);
        assert_eq!(
            r.count_quality,
            EvidenceQuality::Incomplete,
            "kept as exported"
        );
    }

    #[test]
    fn an_export_keeps_its_route_and_an_import_invents_none() {
        let mut app = exported("m1");
        app["route"] = json!("application_quarantined");
        app["route_rule"] = json!("application");
        app["policy_version"] = json!(3);
        app["consumer"] = json!("orders@4");
        app["rule_version"] = json!("sku-7");
        let r = one(ImportFormat::Json, &app);
        assert_eq!(
            (r.route_kind, r.route_rule, r.policy_version),
            (
                Route::ApplicationQuarantined,
                Some(RouteRule::Application),
                Some(3)
            )
        );
        assert_eq!(
            (r.consumer.as_deref(), r.rule_version.as_deref()),
            (Some("orders@4"), Some("sku-7"))
        );
        // An older export: `routed_by` and the reason say it.
        let r = one(ImportFormat::Json, &exported("m2"));
        assert_eq!(
            (r.route_kind, r.route_rule, r.policy_version),
            (
                Route::BrokerRouted,
                Some(RouteRule::DeliveryThreshold),
                Some(1)
            )
        );
        // Nothing says: indeterminate, no rule, no version.
        let mut bare = exported("m3");
        for k in ["routed_by", "policy_version"] {
            bare.as_object_mut().map(|m| m.remove(k));
        }
        bare["reason"] = json!(IMPORTED_REASON);
        let r = one(ImportFormat::Json, &bare);
        assert_eq!(
            (r.route_kind, r.route_rule, r.policy_version),
            (Route::RouteIndeterminate, None, None)
        );
        for (key, bad) in [
            ("route", json!("elsewhere")),
            ("route_rule", json!("whim")),
            ("routed_by", json!("nobody")),
            ("policy_version", json!(0)),
            ("consumer", json!("a\u{1}")),
            ("rule_version", json!("")),
        ] {
            let mut rec = exported("m4");
            rec[key] = bad;
            let (_, field, _) = record_error(import(ImportFormat::Json, &rec));
            assert_eq!(field, key);
        }
        // Event Grid without a reason, and SQS, say nothing of the route.
        let mut event = dl_event("e1", "X", 1, "2026-01-01T01:00:00Z", "2026-01-01T00:00:00Z");
        event.as_object_mut().map(|m| m.remove("deadLetterReason"));
        let r = one(ImportFormat::EventGrid, &json!([event]));
        assert_eq!(
            (r.route_kind, r.route_rule),
            (Route::RouteIndeterminate, None)
        );
        let r = one(
            ImportFormat::EventGrid,
            &json!([dl_event(
                "e1",
                "TimeToLiveExceeded",
                1,
                "2026-01-01T01:00:00Z",
                "2026-01-01T00:00:00Z"
            )]),
        );
        assert_eq!(
            (r.route_kind, r.route_rule, r.policy_version),
            (Route::BrokerRouted, Some(RouteRule::Expiry), None)
        );
        let r = one(
            ImportFormat::Sqs,
            &json!({"Messages": [sqs_message("s1", "b")]}),
        );
        assert_eq!(
            (r.route_kind, r.route_rule, r.policy_version),
            (Route::RouteIndeterminate, None, None)
        );
    }

    #[test]
    fn a_record_without_its_body_names_the_line() {
        let mut payloadless = exported("m2");
        payloadless.as_object_mut().map(|m| m.remove("body"));
        let mut input = lines(&[exported("m1")]);
        input.extend_from_slice(b"\n\n");
        input.extend_from_slice(payloadless.to_string().as_bytes());
        let r = parse_import(ImportFormat::Json, &input, NOW);
        assert!(
            matches!(&r, Err(ImportError::Record { index: 1, line: Some(3), field: Some(f), .. }) if f == "body"),
            "{r:?}"
        );
        let text = r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            text.starts_with("record 1 (line 3): `body` is missing"),
            "{text}"
        );
    }

    #[test]
    fn an_export_is_held_to_the_bounds_of_a_live_dead_letter() {
        let long = |n: usize| json!("x".repeat(n));
        let cases: [(&str, Value); 11] = [
            ("reason", json!({"reason": "r".repeat(10 * 1024)})),
            (
                "description",
                json!({"description": "d".repeat(1024 * 1024)}),
            ),
            ("message_id", json!({"message_id": "m".repeat(10 * 1024)})),
            ("correlation_id", json!({"correlation_id": long(129)})),
            ("type", json!({"type": ""})),
            (
                "dead_lettered_at",
                json!({"dead_lettered_at": "9999-12-31T00:00:00Z"}),
            ),
            (
                "enqueued_time",
                json!({"enqueued_time": "1900-01-01T00:00:00Z"}),
            ),
            (
                "dead_lettered_at",
                json!({"dead_lettered_at": "2025-12-31T00:00:00Z"}),
            ),
            (
                "last_delivered_at",
                json!({"last_delivered_at": "2026-01-01T00:00:30Z"}),
            ),
            (
                "last_delivered_at",
                json!({"last_delivered_at": "2026-01-01T00:11:00Z"}),
            ),
            (
                "first_delivered_at",
                json!({"first_delivered_at": "2027-02-01T00:00:00Z"}),
            ),
        ];
        for (want, patch) in cases {
            let mut rec = exported("m");
            for (k, v) in patch.as_object().into_iter().flatten() {
                rec[k] = v.clone();
            }
            let (index, field, text) = record_error(import(ImportFormat::Json, &rec));
            assert_eq!((index, field.as_str()), (0, want), "{text}");
        }
        // At the bounds, and a time within the clock skew, are taken.
        let mut rec = exported("m".repeat(MAX_ID_BYTES).as_str());
        rec["reason"] = long(MAX_REASON_BYTES);
        rec["description"] = long(MAX_DESCRIPTION_BYTES);
        rec["dead_lettered_at"] = json!("2027-01-15T08:04:00Z");
        assert!(import(ImportFormat::Json, &rec).is_ok());
        // What an import cannot vouch for is marked so; the rest keeps its quality.
        for (given, kept) in [
            ("exact", EvidenceQuality::Approximate),
            ("approximate", EvidenceQuality::Approximate),
            ("incomplete", EvidenceQuality::Incomplete),
            ("unavailable", EvidenceQuality::Unavailable),
        ] {
            let mut rec = exported("m");
            rec["delivery_count_quality"] = json!(given);
            assert_eq!(one(ImportFormat::Json, &rec).count_quality, kept, "{given}");
        }
    }

    #[test]
    fn an_sqs_time_in_the_future_is_refused() {
        let mut m = sqs_message("m1", "b");
        m["Attributes"]["SentTimestamp"] = json!("253402214400000");
        let (_, field, _) = record_error(import(ImportFormat::Sqs, &json!({"Messages": [m]})));
        assert_eq!(field, "Attributes.SentTimestamp");
        let mut m = sqs_message("m1", "b");
        m["MessageId"] = json!("m".repeat(MAX_ID_BYTES + 1));
        let (_, field, _) = record_error(import(ImportFormat::Sqs, &json!({"Messages": [m]})));
        assert_eq!(field, "MessageId");
    }

    #[test]
    fn event_grid_evidence_it_cannot_have_written_is_refused_naming_the_event() {
        let ok = || dl_event("e", "X", 3, "2026-01-01T01:00:00Z", "2026-01-01T00:00:00Z");
        let cases: [(&str, &str, Value); 9] = [
            ("[1].deliveryAttempts", "deliveryAttempts", json!(-1)),
            (
                "[1].deliveryAttempts",
                "deliveryAttempts",
                json!(4_294_967_295u64),
            ),
            ("[1].deliveryAttempts", "deliveryAttempts", json!(31)),
            ("[1].deliveryAttempts", "deliveryAttempts", json!("10")),
            ("[1].deliveryAttempts", "deliveryAttempts", json!([])),
            ("[1].deliveryAttempts", "deliveryAttempts", json!(2.5)),
            (
                "[1].lastDeliveryAttemptTime",
                "lastDeliveryAttemptTime",
                json!("9999-01-01T00:00:00Z"),
            ),
            (
                "[1].publishTime",
                "publishTime",
                json!("1900-01-01T00:00:00Z"),
            ),
            ("[1].id", "id", json!("i".repeat(10 * 1024))),
        ];
        for (want, key, v) in cases {
            let mut bad = ok();
            bad[key] = v;
            let r = import(ImportFormat::EventGrid, &json!([ok(), bad]));
            let (index, field, text) = record_error(r);
            assert_eq!((index, field.as_str()), (0, want), "{text}");
        }
        let mut thirty = ok();
        thirty["deliveryAttempts"] = json!(MAX_EVENT_GRID_ATTEMPTS);
        let r = one(ImportFormat::EventGrid, &json!([thirty]));
        assert_eq!(r.delivery_count, 30);
        assert_eq!(r.count_quality, EvidenceQuality::Approximate);
        let mut null = ok();
        null["deliveryAttempts"] = Value::Null;
        let r = one(ImportFormat::EventGrid, &json!([null]));
        assert_eq!(
            r.count_quality,
            EvidenceQuality::Incomplete,
            "absent, not impossible"
        );
    }

    #[test]
    fn bad_export_fields_are_named() {
        let cases: [(&str, Value); 8] = [
            ("body_sha256", json!({"body_sha256": "00"})),
            ("body_encoding", json!({"body_encoding": "text"})),
            (
                "body",
                json!({"body": "**", "body_encoding": "base64", "body_sha256": null}),
            ),
            (
                "delivery_count_quality",
                json!({"delivery_count_quality": "exactly"}),
            ),
            ("delivery_count", json!({"delivery_count": -1})),
            ("dead_lettered_at", json!({"dead_lettered_at": "yesterday"})),
            ("properties.bad", json!({"properties": {"bad": [1]}})),
            ("format", json!({"format": "blob"})),
        ];
        for (want, patch) in cases {
            let mut rec = exported("m");
            for (k, v) in patch.as_object().into_iter().flatten() {
                rec[k] = v.clone();
            }
            let (index, field, _) = record_error(import(ImportFormat::Json, &rec));
            assert_eq!((index, field.as_str()), (0, want));
        }
        for missing in ["message_id", "reason", "enqueued_time", "delivery_count"] {
            let mut rec = exported("m");
            rec.as_object_mut().map(|m| m.remove(missing));
            let (_, field, text) = record_error(import(ImportFormat::Json, &rec));
            assert_eq!(field, missing);
            assert!(text.ends_with("is missing"), "{text}");
        }
        let r = parse_import(ImportFormat::Json, b"{\"a\":1,\"a\":2}", NOW);
        let (_, field, text) = record_error(r);
        assert!(field.is_empty() && text.contains("duplicate key"), "{text}");
        assert_eq!(
            parse_import(ImportFormat::Json, b"\n  \n", NOW),
            Err(ImportError::NoRecords)
        );
    }
}
