//! The events a dead-letter record of format `events` holds (an Event Grid dead-letter
//! blob), and the forms a replay writes of them: the event to republish, a queue
//! message's event with a new id, and the quarantine copy.
//!
//! A blob is a JSON array of dead-lettered events. Each is either a CloudEvent 1.0 (it has
//! `specversion`) or an Event Grid schema event (it has not), and either may carry Event
//! Grid's dead-letter diagnostics at top level ([`DIAGNOSTICS`]). [`parse_events`] reads
//! the whole array or refuses it whole with a [`SchemaError`] naming the event and the
//! attribute: a payload that is not a list of publishable events can never become one,
//! and the judgement quarantines it entire. Repeated ids are accepted — delivery is
//! at-least-once, so a send retried whole puts two copies of one id in the blob, and
//! refusing the array over that would quarantine every replayable event beside them.
//!
//! Every event is checked to the point where its republished form ([`republished`]) is
//! a valid CloudEvent: what passes here is accepted by a topic.
//!
//! The diagnostics are kept in [`DeadLetteredEvent::raw`], which is what
//! [`quarantine_body`] writes, so that an operator opening a quarantine copy still reads
//! why each event is there; they are dropped from the republished form.

use redrive_core::Timestamp;
use redrive_core::id::{split_replay_count, with_replay_count};
use redrive_core::judgement::{EventRef, ORIGINAL_ID_EXTENSION};
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::cloudevent::{CloudEvent, EventError, SPEC_VERSION};

/// Most events one record may hold.
pub const MAX_EVENTS: usize = 100_000;

/// Deepest nesting of arrays and objects accepted in a record's body (the array itself
/// is level 1, an event level 2).
pub const MAX_DEPTH: usize = 64;

/// Event Grid's dead-letter diagnostics, written at top level of each dead-lettered
/// event, removed from its republished form.
pub const DIAGNOSTICS: [&str; 7] = [
    "deadLetterReason",
    "deliveryAttempts",
    "lastDeliveryOutcome",
    "lastHttpStatusCode",
    "publishTime",
    "lastDeliveryAttemptTime",
    "lastDeliveryError",
];

/// The `source` of an Event Grid schema event republished as a CloudEvent when it has no
/// `topic`.
pub const DEFAULT_SOURCE: &str = "/redrive/import";

/// The schema a dead-lettered event was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventSchema {
    /// CloudEvents 1.0 (the event has `specversion`).
    CloudEvents,
    /// Event Grid's own schema (`id`, `eventType`, `subject`, `eventTime`, `dataVersion`,
    /// `data`, and `topic`, `metadataVersion`).
    EventGrid,
}

/// One event of a dead-letter record, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetteredEvent {
    /// The element exactly as the record holds it, diagnostics included (key order is
    /// not kept). Quarantine copies are written from it.
    pub raw: Map<String, Value>,
    /// Its id as dead-lettered, possibly with a replay count (`a|2`).
    pub id: String,
    /// Its type (`type`, or Event Grid's `eventType`).
    pub event_type: String,
    /// The schema it was written in.
    pub schema: EventSchema,
    /// Its republished form under the id of its next replay (what [`republished`] answers
    /// for that id), made once while checking it.
    next: Vec<u8>,
    /// That id.
    next_id: String,
}

impl DeadLetteredEvent {
    /// The byte size of its republished form under the id its next replay gives it
    /// (`<original id>|<count + 1>`, see [`republished`]): the size the chunk budget
    /// counts. Computed when the record is parsed.
    pub fn size(&self) -> usize {
        self.next.len()
    }
}

/// Why a record's body (or a queue message's event) cannot be read as events.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The body is not JSON, or an object in it has the same key twice.
    #[error("the body is not valid JSON: {0}")]
    Json(String),
    /// Arrays and objects nest deeper than [`MAX_DEPTH`].
    #[error("the body nests arrays and objects deeper than {max} levels")]
    TooDeep {
        /// The limit.
        max: usize,
    },
    /// The body is JSON but not an array.
    #[error("the body is {found}, not a JSON array of events")]
    NotAnArray {
        /// What it is instead (`an object`, `a string`, ...).
        found: &'static str,
    },
    /// The array holds no event.
    #[error("the body is an empty array: it holds no event")]
    Empty,
    /// The array holds more than [`MAX_EVENTS`] events.
    #[error("the body holds {count} events, more than the limit of {max}")]
    TooMany {
        /// How many it holds.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// One event is not a valid dead-lettered event.
    #[error("event {index}: {error}")]
    Event {
        /// Its position in the array, from 0.
        index: usize,
        /// What is wrong with it (naming the attribute).
        error: EventError,
    },
    /// A queue message's body is not a structured-mode CloudEvent.
    #[error("the message is not a structured CloudEvent: {0}")]
    Message(EventError),
}

/// Whether arrays and objects in `bytes` nest deeper than `max` (strings are skipped, so
/// brackets inside them do not count). A guard run before parsing: it does not check
/// that the bytes are JSON.
pub(crate) fn nests_deeper_than(bytes: &[u8], max: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// A JSON document read as an array of at most `MAX` elements (those past `MAX` are
/// walked and counted, not kept), or noted as another kind of value. Read with
/// [`crate::json::from_slice`], so a repeated key anywhere is refused.
pub(crate) enum Bounded<T, const MAX: usize> {
    /// An array: its first `MAX` elements and how many it holds in all.
    Array {
        /// The elements kept.
        items: Vec<T>,
        /// How many there are.
        total: usize,
    },
    /// Not an array: what it is (`an object`, `a string`, ...).
    Other(&'static str),
}

impl<'de, T: de::Deserialize<'de>, const MAX: usize> de::Deserialize<'de> for Bounded<T, MAX> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(BoundedVisitor(std::marker::PhantomData))
    }
}

struct BoundedVisitor<T, const MAX: usize>(std::marker::PhantomData<T>);

impl<'de, T: de::Deserialize<'de>, const MAX: usize> Visitor<'de> for BoundedVisitor<T, MAX> {
    type Value = Bounded<T, MAX>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while items.len() < MAX {
            match seq.next_element::<T>()? {
                Some(item) => items.push(item),
                None => {
                    let total = items.len();
                    return Ok(Bounded::Array { items, total });
                }
            }
        }
        let mut total = items.len();
        while seq.next_element::<IgnoredAny>()?.is_some() {
            total += 1;
        }
        Ok(Bounded::Array { items, total })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        // Walked, so that a repeated key in it is still refused.
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Bounded::Other("an object"))
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Bounded::Other("a string"))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Bounded::Other("a boolean"))
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Bounded::Other("a number"))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Bounded::Other("a number"))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Bounded::Other("a number"))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Bounded::Other("null"))
    }
}

fn invalid(name: &str, why: &str) -> EventError {
    EventError::Invalid {
        name: name.to_owned(),
        why: why.to_owned(),
    }
}

/// A required Event Grid attribute: a string, non-empty unless `may_be_empty`.
fn eg_string<'a>(
    m: &'a Map<String, Value>,
    name: &'static str,
    may_be_empty: bool,
) -> Result<&'a str, EventError> {
    match m.get(name) {
        Some(Value::String(s)) if may_be_empty || !s.is_empty() => Ok(s),
        None | Some(Value::Null) | Some(Value::String(_)) => Err(EventError::Missing(name)),
        Some(_) => Err(invalid(name, "must be a string")),
    }
}

/// Checks an Event Grid schema event's own attributes (before its CloudEvent form is).
fn check_event_grid(m: &Map<String, Value>) -> Result<(), EventError> {
    eg_string(m, "id", false)?;
    eg_string(m, "eventType", false)?;
    eg_string(m, "subject", false)?;
    let time = eg_string(m, "eventTime", false)?;
    eg_string(m, "dataVersion", true)?;
    if !m.contains_key("data") {
        return Err(EventError::Missing("data"));
    }
    if Timestamp::parse_rfc3339(time).is_none() {
        return Err(invalid("eventTime", "must be an RFC 3339 timestamp"));
    }
    match m.get("topic") {
        None | Some(Value::Null) | Some(Value::String(_)) => Ok(()),
        Some(_) => Err(invalid("topic", "must be a string")),
    }
}

/// The CloudEvent form of a dead-lettered event, with its id as dead-lettered and without
/// the original-id extension: the diagnostics removed, or an Event Grid schema event
/// mapped as Event Grid maps it.
fn cloud_form(raw: &Map<String, Value>, schema: EventSchema) -> Map<String, Value> {
    match schema {
        EventSchema::CloudEvents => {
            let mut m = raw.clone();
            for d in DIAGNOSTICS {
                m.remove(d);
            }
            m
        }
        EventSchema::EventGrid => {
            let mut m = Map::new();
            m.insert("specversion".into(), Value::String(SPEC_VERSION.to_owned()));
            let copy = |m: &mut Map<String, Value>, from: &str, to: &str| {
                if let Some(v) = raw.get(from).filter(|v| !v.is_null()) {
                    m.insert(to.to_owned(), v.clone());
                }
            };
            copy(&mut m, "id", "id");
            let source = match raw.get("topic") {
                Some(Value::String(t)) if !t.is_empty() => t.clone(),
                _ => DEFAULT_SOURCE.to_owned(),
            };
            m.insert("source".into(), Value::String(source));
            copy(&mut m, "eventType", "type");
            copy(&mut m, "subject", "subject");
            copy(&mut m, "eventTime", "time");
            copy(&mut m, "data", "data");
            if let Some(Value::String(v)) = raw.get("dataVersion")
                && !v.is_empty()
            {
                m.insert("dataversion".into(), Value::String(v.clone()));
            }
            m
        }
    }
}

/// The republished form of an event whose CloudEvents attributes are `attrs`: every
/// attribute but Event Grid's diagnostics, `id` and the original-id extension, then `id`
/// and that extension. Serialized straight from the borrowed map.
struct Republish<'a> {
    attrs: &'a Map<String, Value>,
    id: &'a str,
    original: &'a str,
}

impl serde::Serialize for Republish<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for (k, v) in kept(self.attrs) {
            if k != "id" && k != ORIGINAL_ID_EXTENSION {
                m.serialize_entry(k, v)?;
            }
        }
        m.serialize_entry("id", self.id)?;
        m.serialize_entry(ORIGINAL_ID_EXTENSION, self.original)?;
        m.end()
    }
}

/// The attributes of a CloudEvents-schema element without Event Grid's diagnostics.
fn kept(m: &Map<String, Value>) -> impl Iterator<Item = (&String, &Value)> + Clone {
    m.iter().filter(|(k, _)| !DIAGNOSTICS.contains(&k.as_str()))
}

/// Reads one element of the array: its schema, id and type, checked so that its
/// republished form is a valid CloudEvent.
fn parse_event(value: Value) -> Result<DeadLetteredEvent, EventError> {
    let Value::Object(raw) = value else {
        return Err(EventError::NotAnObject);
    };
    let (id, event_type, schema, form) = if raw.contains_key("specversion") {
        CloudEvent::check_attributes(kept(&raw))?;
        let text = |k: &str| match raw.get(k) {
            Some(Value::String(s)) => s.clone(),
            _ => String::new(),
        };
        (text("id"), text("type"), EventSchema::CloudEvents, None)
    } else {
        check_event_grid(&raw)?;
        let form = cloud_form(&raw, EventSchema::EventGrid);
        let checked = CloudEvent::from_json(Value::Object(form.clone()))?;
        (
            checked.id,
            checked.event_type,
            EventSchema::EventGrid,
            Some(form),
        )
    };
    let (base, count) = split_replay_count(&id);
    let next_id = with_replay_count(&id, count.saturating_add(1));
    let next = serde_json::to_vec(&Republish {
        attrs: form.as_ref().unwrap_or(&raw),
        id: &next_id,
        original: base,
    })
    .unwrap_or_default();
    Ok(DeadLetteredEvent {
        raw,
        id,
        event_type,
        schema,
        next,
        next_id,
    })
}

/// Reads the events a record of format `events` holds (an Event Grid dead-letter blob: a
/// JSON array of dead-lettered events), or refuses the whole record: not JSON (or a
/// repeated key), nesting deeper than [`MAX_DEPTH`], not an array, an empty array, more
/// than [`MAX_EVENTS`] elements, or any element that is not a valid CloudEvent 1.0
/// (`id`, `source`, `specversion` = `1.0`, `type`) or Event Grid schema event (`id`,
/// `eventType`, `subject`, `eventTime`, `dataVersion`, `data`). Repeated ids are accepted.
pub fn parse_events(body: &[u8]) -> Result<Vec<DeadLetteredEvent>, SchemaError> {
    if nests_deeper_than(body, MAX_DEPTH) {
        return Err(SchemaError::TooDeep { max: MAX_DEPTH });
    }
    let parsed: Bounded<Value, MAX_EVENTS> =
        crate::json::from_slice(body).map_err(|e| SchemaError::Json(e.to_string()))?;
    let items = match parsed {
        Bounded::Other(found) => return Err(SchemaError::NotAnArray { found }),
        Bounded::Array { total, .. } if total > MAX_EVENTS => {
            return Err(SchemaError::TooMany {
                count: total,
                max: MAX_EVENTS,
            });
        }
        Bounded::Array { items, .. } => items,
    };
    if items.is_empty() {
        return Err(SchemaError::Empty);
    }
    items
        .into_iter()
        .enumerate()
        .map(|(index, v)| parse_event(v).map_err(|error| SchemaError::Event { index, error }))
        .collect()
}

/// The structured-mode CloudEvent JSON that republishes `ev`: Event Grid's diagnostics
/// removed, `id` = `new_id`, and the extension [`ORIGINAL_ID_EXTENSION`] =
/// `original_id`. An Event Grid schema event is mapped as Event Grid documents it:
/// `specversion` `1.0`, `source` = `topic` (or [`DEFAULT_SOURCE`]), `type` = `eventType`,
/// `subject`, `time` = `eventTime`, `data`, and `dataVersion` as the extension
/// `dataversion` (left out when empty); `metadataVersion` and anything else outside the
/// schema is dropped.
pub fn republished(ev: &DeadLetteredEvent, new_id: &str, original_id: &str) -> Vec<u8> {
    if new_id == ev.next_id && original_id == split_replay_count(&ev.id).0 {
        return ev.next.clone();
    }
    let form = match ev.schema {
        EventSchema::CloudEvents => None,
        EventSchema::EventGrid => Some(cloud_form(&ev.raw, ev.schema)),
    };
    serde_json::to_vec(&Republish {
        attrs: form.as_ref().unwrap_or(&ev.raw),
        id: new_id,
        original: original_id,
    })
    .unwrap_or_default()
}

/// A queue message's structured-mode CloudEvent (what a topic subscription's queue
/// holds) with `id` = `new_id` and the extension [`ORIGINAL_ID_EXTENSION`] =
/// `original_id`; every other attribute kept (key order is not). Refused when the body
/// is not a valid CloudEvent.
pub fn rewrite_event_id(
    body: &[u8],
    new_id: &str,
    original_id: &str,
) -> Result<Vec<u8>, SchemaError> {
    if nests_deeper_than(body, MAX_DEPTH) {
        return Err(SchemaError::TooDeep { max: MAX_DEPTH });
    }
    let v: Value = crate::json::from_slice(body).map_err(|e| SchemaError::Json(e.to_string()))?;
    CloudEvent::from_json(v.clone()).map_err(SchemaError::Message)?;
    let Value::Object(mut m) = v else {
        return Err(SchemaError::Message(EventError::NotAnObject));
    };
    m.insert("id".into(), Value::String(new_id.to_owned()));
    m.insert(
        ORIGINAL_ID_EXTENSION.into(),
        Value::String(original_id.to_owned()),
    );
    Ok(Value::Object(m).to_string().into_bytes())
}

/// A queue message's structured-mode CloudEvent with its `id` written back without its
/// replay count (`pe-1|2` becomes `pe-1`), every other attribute kept (key order is
/// not): what a quarantined message holds, so that its body and its record's
/// `message_id` say the same, and a restore by hand of the body resumes at count 0 as a
/// quarantined blob's does. `None` when there is nothing to write back: the body is not a
/// valid CloudEvent, or its id carries no count.
pub fn base_event_id(body: &[u8]) -> Option<Vec<u8>> {
    if nests_deeper_than(body, MAX_DEPTH) {
        return None;
    }
    let v: Value = crate::json::from_slice(body).ok()?;
    CloudEvent::from_json(v.clone()).ok()?;
    let Value::Object(mut m) = v else {
        return None;
    };
    let id = m.get("id").and_then(Value::as_str)?;
    let (base, count) = split_replay_count(id);
    if count == 0 {
        return None;
    }
    let base = base.to_owned();
    m.insert("id".into(), Value::String(base));
    Some(Value::Object(m).to_string().into_bytes())
}

/// The body of a quarantine copy: a JSON array of the events' raw elements, diagnostics
/// included. With `base_ids` each `id` is written without its replay count, so that a
/// restored copy resumes each event at count 0.
pub fn quarantine_body(events: &[&DeadLetteredEvent], base_ids: bool) -> Vec<u8> {
    let items = events
        .iter()
        .map(|ev| {
            let mut m = ev.raw.clone();
            if base_ids {
                let (base, _) = split_replay_count(&ev.id);
                m.insert("id".into(), Value::String(base.to_owned()));
            }
            Value::Object(m)
        })
        .collect();
    Value::Array(items).to_string().into_bytes()
}

/// The event as the judgement sees it.
pub fn event_ref(ev: &DeadLetteredEvent) -> EventRef<'_> {
    EventRef {
        id: &ev.id,
        event_type: Some(&ev.event_type),
        size: ev.size(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ce(id: &str) -> Value {
        json!({
            "specversion": "1.0", "id": id, "source": "/orders", "type": "order.created",
            "subject": "orders/1", "data": {"n": 1},
            "deadLetterReason": "MaxDeliveryAttemptsExceeded", "deliveryAttempts": 10,
            "lastDeliveryOutcome": "NotFound", "lastHttpStatusCode": 404,
            "publishTime": "2026-01-01T00:00:00Z",
            "lastDeliveryAttemptTime": "2026-01-01T01:00:00Z",
        })
    }

    fn eg(id: &str) -> Value {
        json!({
            "id": id, "eventType": "blob.deleted", "subject": "/blobs/a",
            "eventTime": "2026-01-01T00:00:00.9584103Z", "dataVersion": "2",
            "metadataVersion": "1", "topic": "/subscriptions/x/topics/app",
            "data": {"url": "https://x/a"},
            "deadLetterReason": "TimeToLiveExceeded", "deliveryAttempts": 7,
            "lastDeliveryOutcome": "TimedOut", "publishTime": "2026-01-01T00:00:00Z",
            "lastDeliveryAttemptTime": "2026-01-01T01:00:00Z",
            "lastDeliveryError": "timeout",
        })
    }

    fn body(v: Value) -> Vec<u8> {
        v.to_string().into_bytes()
    }

    fn parsed(v: Value) -> Vec<DeadLetteredEvent> {
        parse_events(&body(v)).expect("valid blob")
    }

    fn json_of(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).expect("JSON")
    }

    #[test]
    fn cloud_events_and_event_grid_blobs_parse_with_their_diagnostics_kept() {
        let evs = parsed(json!([ce("a|2"), eg("b")]));
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[0].schema, EventSchema::CloudEvents);
        assert_eq!(evs[0].id, "a|2");
        assert_eq!(evs[0].event_type, "order.created");
        assert_eq!(evs[0].raw["deliveryAttempts"], 10);
        assert_eq!(evs[1].schema, EventSchema::EventGrid);
        assert_eq!(evs[1].event_type, "blob.deleted");
        assert_eq!(Value::Object(evs[1].raw.clone()), eg("b"));
    }

    #[test]
    fn repeated_ids_are_accepted() {
        let evs = parsed(json!([ce("a"), ce("a"), eg("a")]));
        assert_eq!(evs.len(), 3);
        assert!(evs.iter().all(|e| e.id == "a"));
    }

    fn event_error(v: Value) -> (usize, EventError, String) {
        match parse_events(&body(v)) {
            Err(e @ SchemaError::Event { .. }) => {
                let text = e.to_string();
                let SchemaError::Event { index, error } = e else {
                    unreachable!()
                };
                (index, error, text)
            }
            other => panic!("expected an event error, got {other:?}"),
        }
    }

    #[test]
    fn each_required_cloud_events_attribute_is_named_when_missing() {
        for name in ["id", "source", "specversion", "type"] {
            let mut bad = ce("x");
            if name == "specversion" {
                bad[name] = json!("");
            } else {
                bad.as_object_mut().map(|m| m.remove(name));
            }
            let (index, error, text) = event_error(json!([ce("a"), bad]));
            assert_eq!(index, 1);
            assert_eq!(error, EventError::Missing(name));
            assert!(text.starts_with("event 1: "), "{text}");
            assert!(text.contains(&format!("`{name}`")), "{text}");
        }
        let mut bad = ce("x");
        bad["specversion"] = json!("0.3");
        assert!(matches!(
            event_error(json!([bad])).1,
            EventError::SpecVersion(_)
        ));
        let mut bad = ce("x");
        bad["type"] = json!(3);
        let (_, error, _) = event_error(json!([bad]));
        assert!(matches!(error, EventError::Invalid { name, .. } if name == "type"));
    }

    #[test]
    fn each_required_event_grid_attribute_is_named_when_missing() {
        for name in [
            "id",
            "eventType",
            "subject",
            "eventTime",
            "dataVersion",
            "data",
        ] {
            let mut bad = eg("x");
            bad.as_object_mut().map(|m| m.remove(name));
            let (index, error, text) = event_error(json!([eg("a"), eg("b"), bad]));
            assert_eq!(index, 2);
            assert_eq!(error, EventError::Missing(name), "{name}");
            assert!(
                text.contains("event 2") && text.contains(&format!("`{name}`")),
                "{text}"
            );
        }
        let mut bad = eg("x");
        bad["eventTime"] = json!("yesterday");
        let (_, error, _) = event_error(json!([bad]));
        assert!(matches!(error, EventError::Invalid { name, .. } if name == "eventTime"));
        let mut bad = eg("x");
        bad["dataVersion"] = json!(2);
        let (_, error, _) = event_error(json!([bad]));
        assert!(matches!(error, EventError::Invalid { name, .. } if name == "dataVersion"));
        let mut ok = eg("x");
        ok["dataVersion"] = json!("");
        ok["data"] = Value::Null;
        assert_eq!(parsed(json!([ok])).len(), 1, "empty dataVersion, null data");
    }

    #[test]
    fn an_event_whose_republished_form_is_not_a_cloud_event_is_refused() {
        let mut bad = ce("x");
        bad["Not-An-Extension"] = json!("v");
        let (_, error, _) = event_error(json!([bad]));
        assert!(matches!(error, EventError::Invalid { name, .. } if name == "Not-An-Extension"));
        let (index, error, _) = event_error(json!([ce("a"), "text"]));
        assert_eq!((index, error), (1, EventError::NotAnObject));
    }

    #[test]
    fn bodies_that_are_not_arrays_of_events_are_refused_whole() {
        assert!(matches!(
            parse_events(b"not json"),
            Err(SchemaError::Json(_))
        ));
        assert!(matches!(
            parse_events(br#"[{"id":"a","id":"b"}]"#),
            Err(SchemaError::Json(e)) if e.contains("duplicate key")
        ));
        assert_eq!(
            parse_events(&body(ce("a"))),
            Err(SchemaError::NotAnArray { found: "an object" })
        );
        assert_eq!(
            parse_events(br#""a""#),
            Err(SchemaError::NotAnArray { found: "a string" })
        );
        assert_eq!(parse_events(b" [ ] "), Err(SchemaError::Empty));
        let deep = format!("[{}1{}]", "[".repeat(64), "]".repeat(64));
        assert_eq!(
            parse_events(deep.as_bytes()),
            Err(SchemaError::TooDeep { max: MAX_DEPTH })
        );
    }

    #[test]
    fn nesting_is_counted_outside_strings_only() {
        assert!(!nests_deeper_than(br#"[{"a":"[[[[\"[["}]"#, 2));
        assert!(nests_deeper_than(br#"[{"a":[1]}]"#, 2));
        assert!(!nests_deeper_than(br#"[{"a":[1]}]"#, 3));
        let ok = format!("{}{}", "[".repeat(64), "]".repeat(64));
        assert!(!nests_deeper_than(ok.as_bytes(), 64));
    }

    #[test]
    fn more_than_the_event_limit_is_refused() {
        let one = eg("a").to_string();
        let many = format!("[{}]", vec![one.as_str(); MAX_EVENTS + 1].join(","));
        assert_eq!(
            parse_events(many.as_bytes()).err(),
            Some(SchemaError::TooMany {
                count: MAX_EVENTS + 1,
                max: MAX_EVENTS
            })
        );
    }

    #[test]
    fn a_republished_cloud_event_drops_diagnostics_and_carries_both_ids() {
        let evs = parsed(json!([ce("a|2")]));
        let out = republished(&evs[0], "a|3", "a");
        let v = json_of(&out);
        for d in DIAGNOSTICS {
            assert!(v.get(d).is_none(), "{d} removed");
        }
        assert_eq!(v["id"], "a|3");
        assert_eq!(v[ORIGINAL_ID_EXTENSION], "a");
        assert_eq!(v["subject"], "orders/1");
        assert_eq!(v["data"], json!({"n": 1}));
        let back = CloudEvent::from_slice(&out).expect("a valid CloudEvent");
        assert_eq!(back.event_type, "order.created");
        assert_eq!(out.len(), evs[0].size(), "size is that of the next replay");
    }

    #[test]
    fn an_event_grid_event_is_republished_as_a_cloud_event() {
        let evs = parsed(json!([eg("b")]));
        let v = json_of(&republished(&evs[0], "b|1", "b"));
        assert_eq!(
            v,
            json!({
                "specversion": "1.0", "id": "b|1", "source": "/subscriptions/x/topics/app",
                "type": "blob.deleted", "subject": "/blobs/a",
                "time": "2026-01-01T00:00:00.9584103Z", "data": {"url": "https://x/a"},
                "dataversion": "2", "redriveoriginalid": "b",
            })
        );
        let mut no_topic = eg("c");
        no_topic.as_object_mut().map(|m| m.remove("topic"));
        no_topic["dataVersion"] = json!("");
        let evs = parsed(json!([no_topic]));
        let v = json_of(&republished(&evs[0], "c|1", "c"));
        assert_eq!(v["source"], DEFAULT_SOURCE);
        assert!(v.get("dataversion").is_none());
        assert!(CloudEvent::from_json(v).is_ok());
    }

    #[test]
    fn event_refs_carry_id_type_and_size() {
        let evs = parsed(json!([eg("b|4")]));
        let r = event_ref(&evs[0]);
        assert_eq!(r.id, "b|4");
        assert_eq!(r.event_type, Some("blob.deleted"));
        assert_eq!(r.size, republished(&evs[0], "b|5", "b").len());
    }

    #[test]
    fn a_queue_message_event_gets_a_new_id_and_keeps_the_rest() {
        let event = json!({
            "specversion": "1.0", "id": "m|1", "source": "/s", "type": "t",
            "data": [1, 2], "tenant": "acme",
        });
        let out = rewrite_event_id(&body(event.clone()), "m|2", "m").expect("rewritten");
        let mut want = event;
        want["id"] = json!("m|2");
        want[ORIGINAL_ID_EXTENSION] = json!("m");
        assert_eq!(json_of(&out), want);
        assert!(matches!(
            rewrite_event_id(br#"{"id":"x"}"#, "x|1", "x"),
            Err(SchemaError::Message(EventError::Missing(_)))
        ));
        assert!(matches!(
            rewrite_event_id(b"[1]", "x|1", "x"),
            Err(SchemaError::Message(EventError::NotAnObject))
        ));
        assert!(matches!(
            rewrite_event_id(b"{", "x|1", "x"),
            Err(SchemaError::Json(_))
        ));
    }

    #[test]
    fn a_quarantined_message_event_gets_its_id_back_without_the_count() {
        let event = json!({
            "specversion": "1.0", "id": "pe-1|2", "source": "/s", "type": "t",
            "data": {"n": 1}, ORIGINAL_ID_EXTENSION: "pe-1",
        });
        let out = base_event_id(&body(event.clone())).expect("rewritten");
        let mut want = event;
        want["id"] = json!("pe-1");
        assert_eq!(json_of(&out), want);
        let plain = json!({"specversion": "1.0", "id": "pe-1", "source": "/s", "type": "t"});
        assert_eq!(
            base_event_id(&body(plain)),
            None,
            "no count: nothing to write"
        );
        let odd = json!({"specversion": "1.0", "id": "x|01", "source": "/s", "type": "t"});
        assert_eq!(base_event_id(&body(odd)), None, "`|01` is no count");
        assert_eq!(base_event_id(b"not json"), None);
        assert_eq!(base_event_id(br#"{"id":"a|1"}"#), None, "not a CloudEvent");
    }

    #[test]
    fn quarantine_copies_keep_diagnostics_and_can_write_base_ids() {
        let evs = parsed(json!([ce("a|3"), eg("b"), eg("c|x")]));
        let refs: Vec<&DeadLetteredEvent> = evs.iter().collect();
        let kept = json_of(&quarantine_body(&refs, false));
        assert_eq!(kept[0]["id"], "a|3");
        let based = json_of(&quarantine_body(&refs, true));
        assert_eq!(based[0]["id"], "a");
        assert_eq!(based[1]["id"], "b");
        assert_eq!(based[2]["id"], "c|x", "a suffix that is no count is kept");
        assert_eq!(based[0]["deadLetterReason"], "MaxDeliveryAttemptsExceeded");
        assert_eq!(based[1]["lastDeliveryError"], "timeout");
        let restored = parse_events(&quarantine_body(&refs, true)).expect("parses again");
        assert_eq!(split_replay_count(&restored[0].id), ("a", 0));
    }
}
