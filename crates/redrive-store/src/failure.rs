//! Failures by signature: the shape of a dead letter's failure, the stable id it is
//! counted under, and the aggregate the stores keep of them.
//!
//! A dead letter's shape is its queue, reason, route kind, last outcome class, message
//! type, source and description with its variable parts masked
//! ([`redrive_core::case::signature`]). Records of one shape failed the same way; the
//! stores count them per shape and area on every write path (both backends compute the
//! shape here, in [`FailureShape::of`], when a record is inserted; the database keeps the
//! counts as records enter and leave an area).

use redrive_core::case::signature::signature;
use redrive_core::{Area, EntityName, PropertyValue, RouteKind, Timestamp};

use crate::DeadLetterRecord;

/// The property naming a message's source (CloudEvents' `source` when the event came
/// in binary mode or was sent as a plain message with that property).
pub const SOURCE_PROPERTY: &str = "source";

/// The longest source kept on a record, bytes (a longer one is not kept).
pub const MAX_SOURCE_LEN: usize = 512;

/// Largest CloudEvents body read for its `source` when a record is written.
const MAX_EVENT_BODY: usize = 256 * 1024;

/// Hours in a signature's sparkline (the newest 24, oldest first, the last one the hour
/// of `now`).
pub const SPARKLINE_HOURS: usize = 24;

/// One hour, milliseconds: the width of a sparkline bucket.
pub const HOUR_MS: i64 = 3_600_000;

/// The failure shape of one dead letter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureShape {
    /// The queue whose dead-letter store holds the record.
    pub queue: EntityName,
    /// The reason code.
    pub reason: String,
    /// How the evidence shows the message was separated (`case::Route::as_str`).
    pub route_kind: Option<String>,
    /// The class of the last outcome: `http_4xx`, `http_5xx`, … (a push attempt's status
    /// class), `timeout`, `connection_error`, `tls_error` (a push attempt's error kind),
    /// `handler_error` (the application dead-lettered it); `None` when the evidence has
    /// no outcome (a delivery threshold, an expiry without a recorded attempt, an import).
    pub outcome_class: Option<String>,
    /// The message's type.
    pub message_type: Option<String>,
    /// The message's source ([`source_of`]).
    pub source: Option<String>,
    /// The description with its variable parts masked (a push dead letter's: its last
    /// delivery error's).
    pub description: String,
}

impl FailureShape {
    /// The shape of `r`.
    pub fn of(r: &DeadLetterRecord) -> FailureShape {
        let diagnostics = push_diagnostics(r);
        let (outcome_class, described) = match &diagnostics {
            Some(o) => (
                o.get("lastDeliveryOutcome")
                    .and_then(|v| v.as_str())
                    .map(outcome_class),
                o.get("lastDeliveryError")
                    .and_then(|v| v.as_str())
                    .map(str::to_owned),
            ),
            None => (
                (r.route == RouteKind::Application).then(|| "handler_error".to_owned()),
                r.description.clone(),
            ),
        };
        FailureShape {
            queue: r.queue.clone(),
            reason: r.reason.clone(),
            route_kind: Some(r.route_kind.as_str().to_owned()),
            outcome_class,
            message_type: r.message_type.clone(),
            source: source_of(r),
            description: signature(described.as_deref()),
        }
    }

    /// The stable id of the shape: SHA-256 over its fields (each one length-prefixed, an
    /// absent one told apart from an empty one), the first 32 hex digits.
    pub fn id(&self) -> String {
        let mut text = String::new();
        let mut put = |v: Option<&str>| match v {
            Some(s) => {
                text.push_str(&format!("{}:", s.len()));
                text.push_str(s);
            }
            None => text.push('-'),
        };
        put(Some(self.queue.as_str()));
        put(Some(&self.reason));
        put(self.route_kind.as_deref());
        put(self.outcome_class.as_deref());
        put(self.message_type.as_deref());
        put(self.source.as_deref());
        put(Some(&self.description));
        let mut id = redrive_core::digest::sha256_hex(text.as_bytes());
        id.truncate(32);
        id
    }
}

/// Whether `s` can be a signature id (32 lowercase hex digits).
pub fn is_signature_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The class of a push attempt's `lastDeliveryOutcome`: a status code's class
/// (`http_5xx`), or the error kind in snake case (`timeout`, `connection_error`).
fn outcome_class(outcome: &str) -> String {
    match outcome.parse::<u16>() {
        Ok(status) => format!("http_{}xx", status / 100),
        Err(_) => outcome.trim().replace([' ', '-'], "_").to_ascii_lowercase(),
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

/// The source of a record's message: its string property `source`, else, for a
/// structured CloudEvent body (`application/cloudevents+json`, one event), the event's
/// `source` attribute; `None` when neither says (or it is longer than
/// [`MAX_SOURCE_LEN`]).
pub fn source_of(r: &DeadLetterRecord) -> Option<String> {
    let found = match r.properties.get(SOURCE_PROPERTY) {
        Some(PropertyValue::String(s)) => Some(s.clone()),
        _ => event_source(r),
    };
    found.filter(|s| !s.is_empty() && s.len() <= MAX_SOURCE_LEN)
}

fn event_source(r: &DeadLetterRecord) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Event {
        source: Option<String>,
    }
    let structured = r
        .content_type
        .as_deref()
        .is_some_and(|c| c.starts_with(redrive_events::cloudevent::STRUCTURED));
    if !structured || r.body.len() > MAX_EVENT_BODY || r.body.first() != Some(&b'{') {
        return None;
    }
    serde_json::from_slice::<Event>(&r.body).ok()?.source
}

/// A listing of the aggregate: the signatures of an area, newest `last_seen` first.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureQuery {
    /// The area.
    pub area: Area,
    /// Only these queues (`None`: every queue; an empty list: none).
    pub queues: Option<Vec<EntityName>>,
    /// Only signatures last seen at or after.
    pub from: Option<Timestamp>,
    /// Only signatures first seen before.
    pub to: Option<Timestamp>,
    /// Signatures after this one in the order (its `last_seen` and id): the cursor.
    pub after: Option<(Timestamp, String)>,
    /// Page size.
    pub limit: u32,
    /// The time the sparkline ends at (its last bucket is this hour).
    pub now: Timestamp,
}

/// One signature of one area in the aggregate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureSignature {
    /// The stable id ([`FailureShape::id`]).
    pub id: String,
    /// The area counted.
    pub area: Area,
    /// The shape.
    pub shape: FailureShape,
    /// Records that entered the area with this signature (written there or moved in).
    pub count: u64,
    /// Records in the area now.
    pub live: u64,
    /// Earliest dead-lettering time of those records.
    pub first_seen: Timestamp,
    /// Latest dead-lettering time of those records.
    pub last_seen: Timestamp,
    /// Records that entered, per hour of their dead-lettering, the last
    /// [`SPARKLINE_HOURS`] hours up to `now`'s, oldest first.
    pub sparkline: Vec<u64>,
}

/// The sparkline ending at `now`'s hour from stored `(hour, count)` buckets (hour:
/// milliseconds / [`HOUR_MS`]); buckets outside the window are left out.
pub fn sparkline(now: Timestamp, buckets: &[(i64, i64)]) -> Vec<u64> {
    let last = now.0.div_euclid(HOUR_MS);
    let first = last - (SPARKLINE_HOURS as i64 - 1);
    let mut out = vec![0; SPARKLINE_HOURS];
    for &(hour, count) in buckets {
        if (first..=last).contains(&hour) {
            let i = usize::try_from(hour - first).unwrap_or(0);
            out[i] += u64::try_from(count).unwrap_or(0);
        }
    }
    out
}

/// The first hour a sparkline ending at `now` shows (older buckets need not be read).
pub fn sparkline_start(now: Timestamp) -> i64 {
    now.0.div_euclid(HOUR_MS) - (SPARKLINE_HOURS as i64 - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ReplayMark, StoredMessage};
    use redrive_core::{DeadLetterReason, MessageMeta, Properties};

    fn n(s: &str) -> EntityName {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    fn record(description: Option<&str>, by_broker: bool, reason: &str) -> DeadLetterRecord {
        let message = StoredMessage {
            queue: n("orders"),
            sequence: 1,
            message_id: "m-1".to_owned(),
            body: b"{}".to_vec(),
            content_type: None,
            properties: Properties::new(),
            correlation_id: None,
            session_id: None,
            message_type: Some("order.created".to_owned()),
            intent: None,
            valid_until: None,
            enqueued_at: Timestamp(0),
            scheduled_at: None,
            state: redrive_core::MessageState::Locked,
            visible_at: Timestamp(0),
            expires_at: None,
            delivery_count: 1,
            locked_until: None,
            first_delivered_at: None,
            last_delivered_at: None,
            last_attempt: None,
        };
        let mut r = crate::dead_letter::evidence_record(
            "dl_1".to_owned(),
            message,
            &MessageMeta::sent(Timestamp(0), None),
            &DeadLetterReason::Application(reason.to_owned()),
            crate::dead_letter::Routing {
                area: Area::Live,
                description: description.map(str::to_owned),
                by_broker,
                forwarded_to: None,
                route_target: redrive_core::case::RouteTarget::Written,
                missing_target: None,
                classifier: redrive_core::Classifier::default(),
            },
            1,
            Timestamp(10),
        );
        r.replay = ReplayMark::default();
        r
    }

    #[test]
    fn records_differing_only_in_ids_and_numbers_share_a_shape() {
        let a = FailureShape::of(&record(Some("order ord_7Hx91KzQ: 3 items"), false, "Bad"));
        let b = FailureShape::of(&record(Some("order ord_3Jd82LpA: 12 items"), false, "Bad"));
        assert_eq!(a, b);
        assert_eq!(a.id(), b.id());
        assert_eq!(a.description, "order <id>: <n> items");
        assert_eq!(a.outcome_class.as_deref(), Some("handler_error"));
        assert!(is_signature_id(&a.id()));
        let other = FailureShape::of(&record(Some("order ord_7Hx91KzQ: 3 items"), false, "Worse"));
        assert_ne!(a.id(), other.id());
    }

    #[test]
    fn a_push_dead_letter_is_classed_by_its_last_outcome() {
        let d = r#"{"deadLetterReason":"MaxDeliveryAttemptsExceeded","deliveryAttempts":3,"lastHttpStatusCode":503,"lastDeliveryOutcome":"503","publishTime":"2026-01-01T00:00:00Z"}"#;
        let s = FailureShape::of(&record(Some(d), true, "MaxDeliveryAttemptsExceeded"));
        assert_eq!(s.outcome_class.as_deref(), Some("http_5xx"));
        assert_eq!(s.description, "");
        let t = r#"{"deadLetterReason":"X","lastDeliveryOutcome":"connection error","lastDeliveryError":"refused by 10.0.0.7:443"}"#;
        let s = FailureShape::of(&record(Some(t), true, "X"));
        assert_eq!(s.outcome_class.as_deref(), Some("connection_error"));
        assert_eq!(s.description, "refused by <n>");
        // A broker's dead letter without a recorded attempt has no outcome.
        let s = FailureShape::of(&record(Some("delivered 5 times"), true, "Y"));
        assert_eq!(s.outcome_class, None);
    }

    #[test]
    fn the_source_is_the_property_or_the_structured_event_s() {
        let mut r = record(None, false, "Bad");
        assert_eq!(source_of(&r), None);
        r.content_type = Some(redrive_events::cloudevent::STRUCTURED.to_owned());
        r.body = br#"{"specversion":"1.0","id":"1","source":"/shop","type":"t"}"#.to_vec();
        assert_eq!(source_of(&r).as_deref(), Some("/shop"));
        r.properties.insert(
            "source".to_owned(),
            PropertyValue::String("/billing".into()),
        );
        assert_eq!(source_of(&r).as_deref(), Some("/billing"));
    }

    #[test]
    fn the_sparkline_ends_at_now_s_hour() {
        let now = Timestamp(100 * HOUR_MS + 5);
        let s = sparkline(now, &[(100, 2), (99, 1), (77, 4), (76, 9)]);
        assert_eq!(s.len(), SPARKLINE_HOURS);
        assert_eq!(s[23], 2);
        assert_eq!(s[22], 1);
        assert_eq!(s[0], 4);
        assert_eq!(s.iter().sum::<u64>(), 7);
        assert_eq!(sparkline_start(now), 77);
    }
}
