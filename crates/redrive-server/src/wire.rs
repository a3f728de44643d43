//! Conversions between the API's wire types and the broker's types.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use redrive_api::ErrorCode;
use redrive_api::dead_letter::{DeadLetter, JudgedEvent, Judgement, ReplayState, RestoreResult};
use redrive_api::message::{BodyEncoding, Message, SendMessage};
use redrive_api::queue::{QueueCounts, QueueInfo};
use redrive_api::replay::{MANUAL_QUARANTINE, ReplayStatus};
use redrive_broker::model::{DeadLetterRecord, StoredMessage};
use redrive_broker::{Outgoing, QueueView, RestorePreview};
use redrive_core::{Area, MessageState, Properties, PropertyValue, Timestamp};
use serde_json::{Map, Value};

use crate::error::ApiError;

/// Body bytes from the wire.
pub fn body_in(body: String, enc: BodyEncoding) -> Result<Vec<u8>, ApiError> {
    match enc {
        BodyEncoding::Utf8 => Ok(body.into_bytes()),
        BodyEncoding::Base64 => B64.decode(body.as_bytes()).map_err(|e| {
            ApiError::new(
                ErrorCode::MalformedBody,
                format!("body is not valid base64: {e}"),
            )
        }),
    }
}

/// Body bytes to the wire: text when valid UTF-8, else base64.
pub fn body_out(bytes: &[u8]) -> (String, BodyEncoding) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (s.to_owned(), BodyEncoding::Utf8),
        Err(_) => (B64.encode(bytes), BodyEncoding::Base64),
    }
}

/// Properties from the wire: string, number or boolean values.
pub fn props_in(map: Map<String, Value>) -> Result<Properties, ApiError> {
    let mut out = Properties::new();
    for (k, v) in map {
        let pv = match v {
            Value::Bool(b) => PropertyValue::Bool(b),
            Value::String(s) => PropertyValue::String(s),
            Value::Number(n) => match n.as_i64() {
                Some(i) => PropertyValue::Int(i),
                None => PropertyValue::Float(n.as_f64().unwrap_or(0.0)),
            },
            _ => {
                return Err(ApiError::new(
                    ErrorCode::InvalidRequest,
                    format!("property {k:?} must be a string, number or boolean"),
                ));
            }
        };
        out.insert(k, pv);
    }
    Ok(out)
}

/// Properties to the wire.
pub fn props_out(p: &Properties) -> Map<String, Value> {
    p.iter()
        .map(|(k, v)| {
            let v = match v {
                PropertyValue::Bool(b) => Value::Bool(*b),
                PropertyValue::Int(i) => Value::from(*i),
                PropertyValue::Float(f) => Value::from(*f),
                PropertyValue::String(s) => Value::String(s.clone()),
            };
            (k.clone(), v)
        })
        .collect()
}

/// An RFC 3339 time from the wire.
pub fn time_in(field: &str, s: Option<String>) -> Result<Option<Timestamp>, ApiError> {
    match s {
        None => Ok(None),
        Some(s) => Timestamp::parse_rfc3339(&s).map(Some).ok_or_else(|| {
            ApiError::new(
                ErrorCode::InvalidRequest,
                format!("`{field}` is not an RFC 3339 time: {s:?}"),
            )
        }),
    }
}

fn t(ts: Timestamp) -> String {
    ts.to_rfc3339()
}

/// A send request message to the broker's input.
pub fn outgoing(m: SendMessage) -> Result<Outgoing, ApiError> {
    Ok(Outgoing {
        body: body_in(m.body, m.body_encoding)?,
        properties: props_in(m.properties)?,
        valid_until: time_in("valid_until", m.valid_until)?,
        scheduled_at: time_in("scheduled_enqueue_time", m.scheduled_enqueue_time)?,
        message_id: m.message_id,
        content_type: m.content_type,
        correlation_id: m.correlation_id,
        session_id: m.session_id,
        message_type: m.message_type,
        intent: m.intent,
        ttl_ms: m.time_to_live_ms,
    })
}

/// A stored message to the wire; with a lock for deliveries. An available message that
/// is visible only after `now` is shown as `scheduled`, as the queue counts it.
pub fn message_out(m: &StoredMessage, lock: Option<(&str, Timestamp)>, now: Timestamp) -> Message {
    let state = if m.state == MessageState::Available && m.visible_at > now {
        "scheduled"
    } else {
        m.state.as_str()
    };
    let (body, body_encoding) = body_out(&m.body);
    Message {
        message_id: m.message_id.clone(),
        sequence_number: m.sequence,
        body,
        body_encoding,
        content_type: m.content_type.clone(),
        properties: props_out(&m.properties),
        correlation_id: m.correlation_id.clone(),
        session_id: m.session_id.clone(),
        message_type: m.message_type.clone(),
        intent: m.intent.clone(),
        valid_until: m.valid_until.map(t),
        enqueued_time: t(m.enqueued_at),
        scheduled_enqueue_time: m.scheduled_at.map(t),
        expires_at: m.expires_at.map(t),
        state: state.to_owned(),
        delivery_count: m.delivery_count,
        lock_token: lock.map(|(tok, _)| tok.to_owned()),
        locked_until: lock.map(|(_, u)| t(u)).or(m.locked_until.map(t)),
    }
}

/// A queue view to the wire.
pub fn queue_out(v: &QueueView) -> QueueInfo {
    QueueInfo {
        name: v.record.name.to_string(),
        policy: v.record.policy.clone(),
        policy_version: v.record.policy_version,
        created_at: t(v.record.created_at),
        updated_at: t(v.record.updated_at),
        counts: QueueCounts {
            active: v.counts.active,
            scheduled: v.counts.scheduled,
            locked: v.counts.locked,
            deferred: v.counts.deferred,
            dead_lettered: v.counts.dead_lettered,
            oldest_message_age_ms: v.oldest_age_ms,
        },
    }
}

/// The diagnostics object of a record a push subscription gave up on: its description,
/// when that is a JSON object whose `deadLetterReason` is the record's reason.
fn push_diagnostics(r: &DeadLetterRecord) -> Option<serde_json::Map<String, serde_json::Value>> {
    let d = r.description.as_deref()?;
    if !d.starts_with('{') {
        return None;
    }
    match serde_json::from_str::<serde_json::Value>(d) {
        Ok(serde_json::Value::Object(o))
            if o.get("deadLetterReason").and_then(|v| v.as_str()) == Some(r.reason.as_str()) =>
        {
            Some(o)
        }
        _ => None,
    }
}

/// A dead-letter record to the wire; with a lock for dead-letter deliveries.
pub fn dead_letter_out(
    r: &DeadLetterRecord,
    lock: Option<(&str, Timestamp)>,
    with_body: bool,
) -> DeadLetter {
    let (body, body_encoding) = body_out(&r.body);
    let body = with_body.then_some(body);
    DeadLetter {
        id: r.id.clone(),
        queue: r.queue.to_string(),
        area: r.area.as_str().to_owned(),
        message_id: r.message_id.clone(),
        sequence_number: r.sequence,
        session_id: r.session_id.clone(),
        body,
        body_encoding,
        body_sha256: r.body_sha256.clone(),
        body_size: r.body.len(),
        content_type: r.content_type.clone(),
        properties: props_out(&r.properties),
        correlation_id: r.correlation_id.clone(),
        message_type: r.message_type.clone(),
        reason: r.reason.clone(),
        description: r.description.clone(),
        diagnostics: push_diagnostics(r),
        delivery_count: r.delivery_count,
        delivery_count_quality: r.count_quality.as_str().to_owned(),
        first_delivered_at: r.first_delivered_at.map(t),
        last_delivered_at: r.last_delivered_at.map(t),
        enqueued_time: t(r.enqueued_at),
        dead_lettered_at: t(r.dead_lettered_at),
        policy_version: r.policy_version,
        routed_by: r.route.as_str().to_owned(),
        route: Some(r.route_kind.to_string()),
        route_rule: r.route_rule.map(|x| x.to_string()),
        consumer: r.consumer.clone(),
        rule_version: r.rule_version.clone(),
        forwarded_to_queue: r.forwarded_to.as_ref().map(|(q, _)| q.to_string()),
        forwarded_sequence_number: r.forwarded_to.as_ref().map(|(_, s)| *s),
        dead_letter_delivery_count: r.dlq_delivery_count,
        lock_token: lock.map(|(tok, _)| tok.to_owned()),
        locked_until: lock.map(|(_, u)| t(u)).or(r.locked_until.map(t)),
        format: r.format.as_str().to_owned(),
        replay: ReplayState {
            candidate: r.area == Area::Live && r.replay.due_at.is_some(),
            due_at: r.replay.due_at.map(t),
            failures: r.replay.failures,
            last_error: r.replay.last_error.clone(),
        },
        judgement: r.judgement.as_ref().map(judgement_out),
    }
}

/// A record's judgement to the wire.
fn judgement_out(j: &redrive_core::judgement::Judgement) -> Judgement {
    Judgement {
        engine: j.engine.clone(),
        judged_at: t(Timestamp(j.judged_at)),
        cause: j.cause.map(|c| c.as_str().to_owned()),
        copied_from: j.copied_from.clone(),
        error: j.error.clone(),
        events: j
            .events
            .iter()
            .map(|e| JudgedEvent {
                id: e.id.clone(),
                attempts: e.attempts,
                event_type: e.event_type.clone(),
                cause: e.cause.map(|c| c.as_str().to_owned()),
                republished_as: e.republished_as.clone(),
            })
            .collect(),
        replay: j
            .replay
            .as_ref()
            .map(|r| redrive_api::dead_letter::JudgedReplay {
                rule: r.rule.clone(),
                policy_version: r.policy_version,
                budget: r.budget.clone(),
                destination: r.destination.clone(),
                republished_at: t(Timestamp(r.republished_at)),
                outcome: r.outcome.clone(),
            }),
    }
}

/// A restore's preview to the wire.
pub fn restore_out(p: &RestorePreview) -> RestoreResult {
    RestoreResult {
        id: p.id.clone(),
        restored: p.restored,
        replay_enabled: p.replay_enabled,
        republish: p.republish,
        requarantine: p
            .requarantine
            .iter()
            .map(|(c, n)| (c.as_str().to_owned(), *n))
            .collect(),
    }
}

/// An entity's replay counts to the wire; a quarantine without a cause is `manual`.
pub fn replay_status_out(c: &redrive_broker::ReplayStatus) -> ReplayStatus {
    ReplayStatus {
        queue: c.queue.to_string(),
        live: c.live,
        candidates: c.candidates,
        failing: c.failing,
        flagged: c.flagged,
        undecodable: c.undecodable,
        archived: c.archived,
        quarantined: c
            .quarantined
            .iter()
            .map(|(cause, n)| {
                let key = cause.map_or(MANUAL_QUARANTINE, |c| c.as_str());
                (key.to_owned(), *n)
            })
            .collect(),
    }
}
