//! Messages as an application sees them: [`Message`] to send (bytes, not the wire's
//! text-or-base64) and [`ReceivedMessage`] as delivered, with its lock.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use redrive_api::message::{BodyEncoding, SendMessage};
use redrive_core::clock::Timestamp;
use serde_json::{Map, Value};

use crate::error::{ErrorKind, Failure, Outcome};

/// Longest message id, correlation id, session id, type or intent, in bytes (the server's
/// limit, Service Bus's for message and session ids).
pub const MAX_ID_LEN: usize = 128;

/// A message to send. Built with `with_*` methods:
///
/// ```
/// use redrive_client::Message;
/// let m = Message::new("{\"order\": 7}")
///     .with_id("order-7")
///     .with_content_type("application/json")
///     .with_property("tenant", "acme")
///     .with_property("attempt", 1);
/// assert_eq!(m.body(), b"{\"order\": 7}");
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Message {
    body: Vec<u8>,
    message_id: Option<String>,
    content_type: Option<String>,
    properties: Map<String, Value>,
    correlation_id: Option<String>,
    session_id: Option<String>,
    message_type: Option<String>,
    intent: Option<String>,
    time_to_live: Option<Duration>,
    scheduled_enqueue_time: Option<Timestamp>,
    valid_until: Option<Timestamp>,
}

impl Message {
    /// A message with this body.
    pub fn new(body: impl Into<Vec<u8>>) -> Message {
        Message {
            body: body.into(),
            ..Message::default()
        }
    }

    /// Sets the message id, the duplicate-detection key. A message with an id is retried
    /// after a transient failure (see [`crate::retry`]).
    pub fn with_id(mut self, id: impl Into<String>) -> Message {
        self.message_id = Some(id.into());
        self
    }

    /// Sets the body's MIME type.
    pub fn with_content_type(mut self, ct: impl Into<String>) -> Message {
        self.content_type = Some(ct.into());
        self
    }

    /// Adds an application property: a string, a number or a boolean.
    pub fn with_property(mut self, name: impl Into<String>, value: impl Into<Value>) -> Message {
        self.properties.insert(name.into(), value.into());
        self
    }

    /// Sets the correlation id.
    pub fn with_correlation_id(mut self, id: impl Into<String>) -> Message {
        self.correlation_id = Some(id.into());
        self
    }

    /// Sets the session id (required on a session queue, refused elsewhere).
    pub fn with_session_id(mut self, id: impl Into<String>) -> Message {
        self.session_id = Some(id.into());
        self
    }

    /// Sets the message type.
    pub fn with_type(mut self, t: impl Into<String>) -> Message {
        self.message_type = Some(t.into());
        self
    }

    /// Sets the intent: the stable id of the operation the message stands for.
    pub fn with_intent(mut self, intent: impl Into<String>) -> Message {
        self.intent = Some(intent.into());
        self
    }

    /// Sets the time to live (else the queue's default).
    pub fn with_time_to_live(mut self, ttl: Duration) -> Message {
        self.time_to_live = Some(ttl);
        self
    }

    /// Sets the time before which the message is not visible.
    pub fn with_scheduled_enqueue_time(mut self, at: Timestamp) -> Message {
        self.scheduled_enqueue_time = Some(at);
        self
    }

    /// Sets the time after which completing the message no longer helps.
    pub fn with_valid_until(mut self, at: Timestamp) -> Message {
        self.valid_until = Some(at);
        self
    }

    /// The body.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The message id, if set.
    pub fn message_id(&self) -> Option<&str> {
        self.message_id.as_deref()
    }

    /// The properties.
    pub fn properties(&self) -> &Map<String, Value> {
        &self.properties
    }

    pub(crate) fn set_id_if_absent(&mut self, make: impl FnOnce() -> String) {
        if self.message_id.is_none() {
            self.message_id = Some(make());
        }
    }

    /// The wire form, after the checks the server would refuse without a doubt.
    pub(crate) fn to_wire(&self, what: &str) -> Result<SendMessage, Failure> {
        let ids = [
            ("message_id", &self.message_id),
            ("correlation_id", &self.correlation_id),
            ("session_id", &self.session_id),
            ("type", &self.message_type),
            ("intent", &self.intent),
        ];
        for (field, value) in ids {
            if let Some(v) = value
                && (v.is_empty() || v.len() > MAX_ID_LEN)
            {
                return Err(Failure::invalid(
                    what,
                    format!("`{field}` must be 1 to {MAX_ID_LEN} bytes"),
                ));
            }
        }
        for (name, value) in &self.properties {
            if name.is_empty() {
                return Err(Failure::invalid(what, "a property name is empty"));
            }
            if !(value.is_string() || value.is_number() || value.is_boolean()) {
                return Err(Failure::invalid(
                    what,
                    format!("property `{name}` must be a string, a number or a boolean"),
                ));
            }
        }
        let (body, body_encoding) = match std::str::from_utf8(&self.body) {
            Ok(text) => (text.to_owned(), BodyEncoding::Utf8),
            Err(_) => (B64.encode(&self.body), BodyEncoding::Base64),
        };
        Ok(SendMessage {
            message_id: self.message_id.clone(),
            body,
            body_encoding,
            content_type: self.content_type.clone(),
            properties: self.properties.clone(),
            correlation_id: self.correlation_id.clone(),
            session_id: self.session_id.clone(),
            message_type: self.message_type.clone(),
            intent: self.intent.clone(),
            valid_until: self.valid_until.map(Timestamp::to_rfc3339),
            scheduled_enqueue_time: self.scheduled_enqueue_time.map(Timestamp::to_rfc3339),
            time_to_live_ms: self
                .time_to_live
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        })
    }
}

/// A message as delivered by a receive (with its lock) or a peek (without).
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedMessage {
    raw: redrive_api::message::Message,
    body: Vec<u8>,
}

impl ReceivedMessage {
    pub(crate) fn from_wire(
        raw: redrive_api::message::Message,
        what: &str,
    ) -> Result<ReceivedMessage, Failure> {
        let body = match raw.body_encoding {
            BodyEncoding::Utf8 => raw.body.clone().into_bytes(),
            BodyEncoding::Base64 => B64.decode(&raw.body).map_err(|e| Failure {
                kind: ErrorKind::Server,
                problem: None,
                status: None,
                what: what.to_owned(),
                detail: Some(format!(
                    "message {} has a body that is not base64: {e}",
                    raw.message_id
                )),
                source: None,
                outcome: Outcome::Unknown,
                retry_after: None,
                attempts: 1,
                tls: false,
            })?,
        };
        Ok(ReceivedMessage { raw, body })
    }

    /// The body's bytes.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body as text, when it is UTF-8.
    pub fn body_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.body).ok()
    }

    /// The message id.
    pub fn message_id(&self) -> &str {
        &self.raw.message_id
    }

    /// The sequence number, unique and increasing in its queue.
    pub fn sequence_number(&self) -> i64 {
        self.raw.sequence_number
    }

    /// Deliveries so far, this one included (1 on the first delivery).
    pub fn delivery_count(&self) -> u32 {
        self.raw.delivery_count
    }

    /// The token that settles this delivery (none on a peeked message).
    pub fn lock_token(&self) -> Option<&str> {
        self.raw.lock_token.as_deref()
    }

    /// When the lock runs out, as the server said when it delivered (or last renewed).
    pub fn locked_until(&self) -> Option<Timestamp> {
        self.raw
            .locked_until
            .as_deref()
            .and_then(Timestamp::parse_rfc3339)
    }

    /// The MIME type.
    pub fn content_type(&self) -> Option<&str> {
        self.raw.content_type.as_deref()
    }

    /// The application properties.
    pub fn properties(&self) -> &Map<String, Value> {
        &self.raw.properties
    }

    /// One property as text (a string property, or a number or boolean written out).
    pub fn property(&self, name: &str) -> Option<String> {
        match self.raw.properties.get(name)? {
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    }

    /// The correlation id.
    pub fn correlation_id(&self) -> Option<&str> {
        self.raw.correlation_id.as_deref()
    }

    /// The session id.
    pub fn session_id(&self) -> Option<&str> {
        self.raw.session_id.as_deref()
    }

    /// The message type.
    pub fn message_type(&self) -> Option<&str> {
        self.raw.message_type.as_deref()
    }

    /// The intent.
    pub fn intent(&self) -> Option<&str> {
        self.raw.intent.as_deref()
    }

    /// When the message was enqueued.
    pub fn enqueued_time(&self) -> Option<Timestamp> {
        Timestamp::parse_rfc3339(&self.raw.enqueued_time)
    }

    /// The wire form, as the server sent it.
    pub fn raw(&self) -> &redrive_api::message::Message {
        &self.raw
    }

    pub(crate) fn set_locked_until(&mut self, until: Option<String>) {
        self.raw.locked_until = until;
    }
}

/// The outcome of one sent message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SendOutcome {
    /// The message id (the client's, or the one the server generated).
    pub message_id: String,
    /// The sequence number (the original one for a duplicate): the handle to cancel a
    /// scheduled message.
    pub sequence_number: i64,
    /// The id was seen inside the entity's duplicate-detection window: nothing was
    /// enqueued.
    pub duplicate: bool,
}

impl From<redrive_api::message::SendResult> for SendOutcome {
    fn from(r: redrive_api::message::SendResult) -> Self {
        SendOutcome {
            message_id: r.message_id,
            sequence_number: r.sequence_number,
            duplicate: r.duplicate,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_travel_as_text_or_base64() {
        let text = Message::new("héllo").to_wire("t").unwrap();
        assert_eq!(
            (text.body.as_str(), text.body_encoding),
            ("héllo", BodyEncoding::Utf8)
        );
        let bin = Message::new(vec![0xff, 0x00]).to_wire("t").unwrap();
        assert_eq!(
            (bin.body.as_str(), bin.body_encoding),
            ("/wA=", BodyEncoding::Base64)
        );
    }

    #[test]
    fn bad_fields_are_refused_before_sending() {
        let long = "x".repeat(MAX_ID_LEN + 1);
        for m in [
            Message::new("a").with_id(""),
            Message::new("a").with_id(long.clone()),
            Message::new("a").with_session_id(long),
            Message::new("a").with_property("", "v"),
            Message::new("a").with_property("p", serde_json::json!({"nested": 1})),
        ] {
            let f = m.to_wire("t").unwrap_err();
            assert_eq!(f.kind, ErrorKind::Invalid, "{m:?}");
            assert_eq!(f.attempts, 0);
        }
    }
}
