//! CloudEvents 1.0: the event, its validation, and the HTTP protocol binding's three forms
//! — structured (`application/cloudevents+json`), batch (`application/cloudevents-batch+json`)
//! and binary (`ce-*` headers, the body is the data).

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use redrive_core::Timestamp;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

/// Media type of a structured-mode event.
pub const STRUCTURED: &str = "application/cloudevents+json";
/// Media type of a batch.
pub const BATCH: &str = "application/cloudevents-batch+json";
/// The one spec version accepted.
pub const SPEC_VERSION: &str = "1.0";

/// Why a batch is refused: the index of the first bad event (0 when the batch itself is
/// not an array of events) and what is wrong with it.
pub type BatchError = (usize, EventError);

/// A CloudEvent.
#[derive(Debug, Clone, PartialEq)]
pub struct CloudEvent {
    /// `id`: with `source`, identifies the event (the duplicate-detection key).
    pub id: String,
    /// `source`: a URI-reference naming the producer context.
    pub source: String,
    /// `specversion`: always `1.0`.
    pub specversion: String,
    /// `type`.
    pub event_type: String,
    /// `subject`.
    pub subject: Option<String>,
    /// `time` (RFC 3339), as given.
    pub time: Option<String>,
    /// `datacontenttype`.
    pub datacontenttype: Option<String>,
    /// `dataschema`.
    pub dataschema: Option<String>,
    /// The payload, if any.
    pub data: Option<Data>,
    /// Extension attributes.
    pub extensions: BTreeMap<String, ExtensionValue>,
}

/// An event's payload.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    /// JSON data (`data` in structured mode with a JSON content type, or a JSON body).
    Json(Value),
    /// Bytes (`data_base64`, or a non-JSON binary-mode body).
    Binary(Vec<u8>),
}

/// The value of an extension attribute.
#[derive(Debug, Clone, PartialEq)]
pub enum ExtensionValue {
    /// A string.
    String(String),
    /// An integer.
    Integer(i64),
    /// A boolean.
    Boolean(bool),
}

/// Why an event is not a valid CloudEvent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// The event is not a JSON object.
    #[error("an event must be a JSON object")]
    NotAnObject,
    /// A batch is not a JSON array.
    #[error("a batch must be a JSON array of events")]
    NotABatch,
    /// A batch holds no event.
    #[error("a batch must hold at least one event")]
    EmptyBatch,
    /// A required attribute is missing or empty.
    #[error("required attribute `{0}` is missing or empty")]
    Missing(&'static str),
    /// An attribute has the wrong type or form.
    #[error("attribute `{name}` is invalid: {why}")]
    Invalid {
        /// The attribute.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// The bytes are not JSON.
    #[error("invalid JSON: {0}")]
    Json(String),
    /// `specversion` is not 1.0.
    #[error("specversion {0:?} is not supported (only \"1.0\")")]
    SpecVersion(String),
}

fn invalid(name: &str, why: impl Into<String>) -> EventError {
    EventError::Invalid {
        name: name.to_owned(),
        why: why.into(),
    }
}

/// Attribute names the spec defines (never extensions).
const CONTEXT: [&str; 8] = [
    "id",
    "source",
    "specversion",
    "type",
    "subject",
    "time",
    "datacontenttype",
    "dataschema",
];

fn check_extension_name(name: &str) -> Result<(), EventError> {
    if name.is_empty()
        || name.len() > 20
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        return Err(invalid(
            name,
            "extension names are 1 to 20 lower-case letters or digits",
        ));
    }
    Ok(())
}

fn is_json_type(ct: Option<&str>) -> bool {
    match ct {
        None => true,
        Some(ct) => {
            let base = ct
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase();
            base == "application/json" || base == "text/json" || base.ends_with("+json")
        }
    }
}

impl CloudEvent {
    /// Checks one structured-mode event's attributes, given as `(name, value)` pairs,
    /// without taking them: every rule [`CloudEvent::from_json`] applies (which calls
    /// it). Null values count as absent.
    pub fn check_attributes<'a>(
        attrs: impl Iterator<Item = (&'a String, &'a Value)> + Clone,
    ) -> Result<(), EventError> {
        // The required attributes first, in the order they are reported.
        for name in ["specversion", "id", "source", "type"] {
            match attrs
                .clone()
                .find(|(n, _)| n.as_str() == name)
                .map(|(_, v)| v)
            {
                Some(Value::String(s)) if !s.is_empty() => {
                    if name == "specversion" && s != SPEC_VERSION {
                        return Err(EventError::SpecVersion(s.clone()));
                    }
                }
                Some(Value::String(_) | Value::Null) | None => {
                    return Err(EventError::Missing(name));
                }
                Some(_) => return Err(invalid(name, "must be a string")),
            }
        }
        let (mut data, mut data_base64) = (false, false);
        for (name, value) in attrs {
            let string = || -> Result<Option<&str>, EventError> {
                match value {
                    Value::Null => Ok(None),
                    Value::String(s) if !s.is_empty() => Ok(Some(s)),
                    Value::String(_) => Err(invalid(name, "must not be empty")),
                    _ => Err(invalid(name, "must be a string")),
                }
            };
            match name.as_str() {
                "specversion" | "id" | "source" | "type" => {}
                "subject" | "datacontenttype" | "dataschema" => {
                    string()?;
                }
                "time" => {
                    if let Some(t) = string()?
                        && Timestamp::parse_rfc3339(t).is_none()
                    {
                        return Err(invalid("time", "must be an RFC 3339 timestamp"));
                    }
                }
                "data" => data = !value.is_null(),
                "data_base64" => match value {
                    Value::Null => {}
                    Value::String(b) => {
                        B64.decode(b.as_bytes())
                            .map_err(|e| invalid("data_base64", format!("not base64: {e}")))?;
                        data_base64 = true;
                    }
                    _ => return Err(invalid("data_base64", "must be a base64 string")),
                },
                _ => {
                    check_extension_name(name)?;
                    match value {
                        Value::String(_) | Value::Bool(_) | Value::Null => {}
                        Value::Number(n) if n.as_i64().is_some() => {}
                        Value::Number(_) => {
                            return Err(invalid(name, "extension numbers must be integers"));
                        }
                        _ => {
                            return Err(invalid(
                                name,
                                "extension values are strings, integers or booleans",
                            ));
                        }
                    }
                }
            }
        }
        if data && data_base64 {
            return Err(invalid("data", "`data` and `data_base64` are exclusive"));
        }
        Ok(())
    }

    /// Parses and validates one structured-mode event.
    pub fn from_json(v: Value) -> Result<CloudEvent, EventError> {
        let Value::Object(mut m) = v else {
            return Err(EventError::NotAnObject);
        };
        CloudEvent::check_attributes(m.iter())?;
        // Checked: what follows only takes the values out.
        let mut take = |name: &str| match m.remove(name) {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
        let specversion = take("specversion").unwrap_or_default();
        let id = take("id").unwrap_or_default();
        let source = take("source").unwrap_or_default();
        let event_type = take("type").unwrap_or_default();
        let subject = take("subject");
        let time = take("time");
        let datacontenttype = take("datacontenttype");
        let dataschema = take("dataschema");
        let not_null = |v: Option<Value>| v.filter(|v| !v.is_null());
        let data = match (
            not_null(m.remove("data")),
            not_null(m.remove("data_base64")),
        ) {
            (Some(d), _) => Some(Data::Json(d)),
            (None, Some(Value::String(b))) => B64.decode(b.as_bytes()).ok().map(Data::Binary),
            _ => None,
        };
        let mut extensions = BTreeMap::new();
        for (k, v) in m {
            let ev = match v {
                Value::String(s) => ExtensionValue::String(s),
                Value::Bool(b) => ExtensionValue::Boolean(b),
                Value::Number(n) => ExtensionValue::Integer(n.as_i64().unwrap_or_default()),
                _ => continue,
            };
            extensions.insert(k, ev);
        }
        Ok(CloudEvent {
            id,
            source,
            specversion,
            event_type,
            subject,
            time,
            datacontenttype,
            dataschema,
            data,
            extensions,
        })
    }

    /// Parses a batch. Every event is checked; the first bad one is reported with its
    /// index in the batch, and a batch with any bad event is refused whole.
    pub fn batch_from_json(v: Value) -> Result<Vec<CloudEvent>, (usize, EventError)> {
        let Value::Array(items) = v else {
            return Err((0, EventError::NotABatch));
        };
        if items.is_empty() {
            return Err((0, EventError::EmptyBatch));
        }
        items
            .into_iter()
            .enumerate()
            .map(|(i, e)| CloudEvent::from_json(e).map_err(|err| (i, err)))
            .collect()
    }

    /// Parses and validates one structured-mode event from its JSON bytes.
    pub fn from_slice(json: &[u8]) -> Result<CloudEvent, EventError> {
        // One pass that refuses a repeated attribute, which would be read one way here and
        // another by a subscriber.
        let v: Value =
            crate::json::from_slice(json).map_err(|e| EventError::Json(e.to_string()))?;
        CloudEvent::from_json(v)
    }

    /// Parses and validates a batch from its JSON bytes, and returns each event with its
    /// own bytes exactly as they appear in the array (whitespace and key order kept), so
    /// that the event can be stored and sent on as its publisher wrote it. Errors as
    /// [`Self::batch_from_json`], with the index of the first bad event.
    pub fn batch_from_slice(json: &[u8]) -> Result<Vec<(CloudEvent, Vec<u8>)>, BatchError> {
        // The array is split into each event's bytes (a scan that builds nothing); each
        // event is then parsed once.
        let items: Vec<&RawValue> = match serde_json::from_slice(json) {
            Ok(items) => items,
            // Valid JSON that is not an array, or not JSON at all.
            Err(e) => {
                return Err((
                    0,
                    match serde_json::from_slice::<serde::de::IgnoredAny>(json) {
                        Ok(_) => EventError::NotABatch,
                        Err(_) => EventError::Json(e.to_string()),
                    },
                ));
            }
        };
        if items.is_empty() {
            return Err((0, EventError::EmptyBatch));
        }
        items
            .into_iter()
            .enumerate()
            .map(|(i, raw)| {
                let bytes = raw.get().as_bytes();
                CloudEvent::from_slice(bytes)
                    .map(|e| (e, bytes.to_vec()))
                    .map_err(|err| (i, err))
            })
            .collect()
    }

    /// The `id` and `source` of a structured-mode event, read from its JSON without
    /// building the event (the rest is skipped). For stored events, which were validated
    /// when they were published.
    pub fn id_and_source(json: &[u8]) -> Result<(String, String), EventError> {
        #[derive(serde::Deserialize)]
        struct Key<'a> {
            #[serde(borrow)]
            id: std::borrow::Cow<'a, str>,
            #[serde(borrow)]
            source: std::borrow::Cow<'a, str>,
        }
        let k: Key<'_> =
            serde_json::from_slice(json).map_err(|e| EventError::Json(e.to_string()))?;
        Ok((k.id.into_owned(), k.source.into_owned()))
    }

    /// Parses a binary-mode event: `ce-*` headers (names case-insensitive) and the body as
    /// the data; `content-type` is the `datacontenttype`.
    pub fn from_binary<'a>(
        headers: impl IntoIterator<Item = (&'a str, &'a str)>,
        body: &[u8],
    ) -> Result<CloudEvent, EventError> {
        let mut m = Map::new();
        let mut content_type = None;
        for (name, value) in headers {
            let name = name.to_ascii_lowercase();
            if name == "content-type" {
                content_type = Some(value.to_owned());
            } else if let Some(attr) = name.strip_prefix("ce-") {
                if attr == "data" || attr == "data_base64" || attr == "datacontenttype" {
                    return Err(invalid(attr, "is not a binary-mode header"));
                }
                m.insert(attr.to_owned(), Value::String(percent_decode(value)));
            }
        }
        if let Some(ct) = &content_type {
            m.insert("datacontenttype".to_owned(), Value::String(ct.clone()));
        }
        let mut ev = CloudEvent::from_json(Value::Object(m))?;
        // Binary-mode extension values arrive as strings; keep them so.
        if !body.is_empty() {
            ev.data = if is_json_type(content_type.as_deref()) {
                let parsed = crate::json::from_slice::<Value>(body);
                match parsed {
                    // JSON `null` is no data, as `"data": null` is in structured mode.
                    Ok(Value::Null) => None,
                    Ok(v) => Some(Data::Json(v)),
                    Err(_) => Some(Data::Binary(body.to_vec())),
                }
            } else {
                Some(Data::Binary(body.to_vec()))
            };
        }
        Ok(ev)
    }

    /// The structured-mode JSON of the event.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert(
            "specversion".into(),
            Value::String(self.specversion.clone()),
        );
        m.insert("id".into(), Value::String(self.id.clone()));
        m.insert("source".into(), Value::String(self.source.clone()));
        m.insert("type".into(), Value::String(self.event_type.clone()));
        for (k, v) in [
            ("subject", &self.subject),
            ("time", &self.time),
            ("datacontenttype", &self.datacontenttype),
            ("dataschema", &self.dataschema),
        ] {
            if let Some(v) = v {
                m.insert(k.into(), Value::String(v.clone()));
            }
        }
        match &self.data {
            Some(Data::Json(v)) => {
                m.insert("data".into(), v.clone());
            }
            Some(Data::Binary(b)) => {
                m.insert("data_base64".into(), Value::String(B64.encode(b)));
            }
            None => {}
        }
        for (k, v) in &self.extensions {
            m.insert(k.clone(), v.to_json());
        }
        Value::Object(m)
    }

    /// Binary-mode headers (`ce-*`, and `content-type` when known) and body.
    pub fn to_binary(&self) -> (Vec<(String, String)>, Vec<u8>) {
        let mut h = vec![
            ("ce-specversion".to_owned(), self.specversion.clone()),
            ("ce-id".to_owned(), percent_encode(&self.id)),
            ("ce-source".to_owned(), percent_encode(&self.source)),
            ("ce-type".to_owned(), percent_encode(&self.event_type)),
        ];
        for (k, v) in [
            ("ce-subject", &self.subject),
            ("ce-time", &self.time),
            ("ce-dataschema", &self.dataschema),
        ] {
            if let Some(v) = v {
                h.push((k.to_owned(), percent_encode(v)));
            }
        }
        for (k, v) in &self.extensions {
            let text = match v {
                ExtensionValue::String(s) => percent_encode(s),
                ExtensionValue::Integer(i) => i.to_string(),
                ExtensionValue::Boolean(b) => b.to_string(),
            };
            h.push((format!("ce-{k}"), text));
        }
        let body = match &self.data {
            Some(Data::Json(v)) => serde_json::to_vec(v).unwrap_or_default(),
            Some(Data::Binary(b)) => b.clone(),
            None => Vec::new(),
        };
        let ct = self.datacontenttype.clone().or_else(|| match &self.data {
            Some(Data::Json(_)) => Some("application/json".to_owned()),
            _ => None,
        });
        if let Some(ct) = ct {
            h.push(("content-type".to_owned(), ct));
        }
        (h, body)
    }

    /// The value of a context attribute or extension by name, as JSON (for filters).
    pub fn attribute(&self, name: &str) -> Option<Value> {
        let s = |v: &String| Some(Value::String(v.clone()));
        match name {
            "id" => s(&self.id),
            "source" => s(&self.source),
            "specversion" => s(&self.specversion),
            "type" => s(&self.event_type),
            "subject" => self.subject.as_ref().and_then(s),
            "time" => self.time.as_ref().and_then(s),
            "datacontenttype" => self.datacontenttype.as_ref().and_then(s),
            "dataschema" => self.dataschema.as_ref().and_then(s),
            other => self.extensions.get(other).map(ExtensionValue::to_json),
        }
    }

    /// Whether `name` is one of the spec's context attributes.
    pub fn is_context_attribute(name: &str) -> bool {
        CONTEXT.contains(&name)
    }
}

impl ExtensionValue {
    fn to_json(&self) -> Value {
        match self {
            ExtensionValue::String(s) => Value::String(s.clone()),
            ExtensionValue::Integer(i) => Value::from(*i),
            ExtensionValue::Boolean(b) => Value::Bool(*b),
        }
    }
}

/// Percent-encodes what the HTTP binding requires in header values: space, `"`, `%` and
/// anything outside printable ASCII (UTF-8 bytes).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b == b' ' || b == b'"' || b == b'%' || !(0x21..=0x7e).contains(&b) {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({"specversion": "1.0", "id": "e1", "source": "/orders", "type": "order.created"})
    }

    #[test]
    fn a_minimal_event_is_valid_and_round_trips() {
        let mut v = base();
        v["data"] = json!({"amount": 5});
        v["subject"] = json!("orders/1");
        v["traceparent"] = json!("00-abc");
        v["priority"] = json!(3);
        let e = CloudEvent::from_json(v.clone()).unwrap();
        assert_eq!(e.event_type, "order.created");
        assert_eq!(e.extensions["priority"], ExtensionValue::Integer(3));
        assert_eq!(e.to_json(), v);
    }

    #[test]
    fn required_attributes_are_checked_one_by_one() {
        for name in ["id", "source", "type", "specversion"] {
            let mut v = base();
            v.as_object_mut().unwrap().remove(name);
            assert_eq!(
                CloudEvent::from_json(v).unwrap_err(),
                EventError::Missing(name)
            );
            let mut v = base();
            v[name] = json!("");
            assert_eq!(
                CloudEvent::from_json(v).unwrap_err(),
                EventError::Missing(name)
            );
        }
        let mut v = base();
        v["specversion"] = json!("0.3");
        assert!(matches!(
            CloudEvent::from_json(v),
            Err(EventError::SpecVersion(_))
        ));
        let mut v = base();
        v["id"] = json!(7);
        assert!(matches!(
            CloudEvent::from_json(v),
            Err(EventError::Invalid { .. })
        ));
        assert_eq!(
            CloudEvent::from_json(json!([])).unwrap_err(),
            EventError::NotAnObject
        );
    }

    #[test]
    fn bad_optional_attributes_and_extensions_are_refused() {
        let mut v = base();
        v["time"] = json!("yesterday");
        assert!(CloudEvent::from_json(v).is_err());
        let mut v = base();
        v["Bad-Name"] = json!("x");
        assert!(CloudEvent::from_json(v).is_err());
        let mut v = base();
        v["ext"] = json!(1.5);
        assert!(CloudEvent::from_json(v).is_err());
        let mut v = base();
        v["data"] = json!(1);
        v["data_base64"] = json!("AA==");
        assert!(CloudEvent::from_json(v).is_err());
    }

    #[test]
    fn a_batch_with_one_bad_event_is_refused_with_its_index() {
        let mut bad = base();
        bad.as_object_mut().unwrap().remove("type");
        let err = CloudEvent::batch_from_json(json!([base(), bad])).unwrap_err();
        assert_eq!(err, (1, EventError::Missing("type")));
        assert_eq!(
            CloudEvent::batch_from_json(json!([])).unwrap_err().1,
            EventError::EmptyBatch
        );
        assert_eq!(
            CloudEvent::batch_from_json(json!([base(), base()]))
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn binary_mode_round_trips_headers_and_body() {
        let mut v = base();
        v["subject"] = json!("a b%c");
        v["data"] = json!({"k": [1, 2]});
        v["datacontenttype"] = json!("application/json");
        v["tenant"] = json!("acme");
        let e = CloudEvent::from_json(v).unwrap();
        let (headers, body) = e.to_binary();
        assert!(headers.contains(&("ce-subject".to_owned(), "a%20b%25c".to_owned())));
        let back =
            CloudEvent::from_binary(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())), &body)
                .unwrap();
        assert_eq!(back, e);

        let bin = CloudEvent::from_binary(
            [
                ("CE-ID", "1"),
                ("ce-source", "s"),
                ("ce-type", "t"),
                ("ce-specversion", "1.0"),
                ("Content-Type", "application/octet-stream"),
            ],
            &[0, 255],
        )
        .unwrap();
        assert_eq!(bin.data, Some(Data::Binary(vec![0, 255])));
        assert_eq!(bin.to_json()["data_base64"], "AP8=");
    }
}
