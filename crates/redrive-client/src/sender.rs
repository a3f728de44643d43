//! Sending: [`Sender`] puts messages on a queue (one, an atomic batch, scheduled, and
//! cancels scheduled ones); [`Publisher`] publishes CloudEvents to a topic (structured
//! mode, or a batch).

use std::sync::Arc;

use redrive_api::message::{SendRequest, SendResponse};
use redrive_api::topic::PublishResults;
use redrive_core::clock::Timestamp;
use redrive_events::CloudEvent;
use reqwest::Method;

use crate::client::{Client, Req, Retry};
use crate::error::{Failure, SendError};
use crate::message::{Message, SendOutcome};

/// Most messages in one batch (the server's limit).
pub const MAX_SEND_BATCH: usize = 10_000;

/// A sender to one queue. Cheap to clone.
///
/// A send is retried after a transient failure only when the message carries an id
/// (duplicate detection makes the repeat harmless; see [`crate::retry`]). With
/// [`Sender::assign_message_ids`] the sender gives every message without one a random
/// id, so that every send can be retried.
#[derive(Debug, Clone)]
pub struct Sender {
    client: Client,
    queue: Arc<str>,
    assign_ids: bool,
}

impl Sender {
    pub(crate) fn new(client: Client, queue: String) -> Sender {
        Sender {
            client,
            queue: queue.into(),
            assign_ids: false,
        }
    }

    /// The queue.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Whether messages without an id get a random one (32 hex digits) before they are sent
    /// (default: no, the server generates one and the send is not retried).
    #[must_use]
    pub fn assign_message_ids(mut self, assign: bool) -> Sender {
        self.assign_ids = assign;
        self
    }

    /// Sends one message.
    pub async fn send(&self, message: Message) -> Result<SendOutcome, SendError> {
        let mut out = self.send_all(vec![message], false).await?;
        Ok(out.remove(0))
    }

    /// Sends a batch: all messages are stored, or none (1 to [`MAX_SEND_BATCH`]). The
    /// batch is retried only when every message carries an id.
    pub async fn send_batch(&self, messages: Vec<Message>) -> Result<Vec<SendOutcome>, SendError> {
        self.send_all(messages, true).await
    }

    /// Sends a message that becomes visible at `at`; the outcome's sequence number cancels
    /// it ([`Sender::cancel_scheduled`]).
    pub async fn schedule(
        &self,
        message: Message,
        at: Timestamp,
    ) -> Result<SendOutcome, SendError> {
        self.send(message.with_scheduled_enqueue_time(at)).await
    }

    /// Cancels a scheduled message that is not visible yet. Retried only after a failure
    /// that proves nothing happened (a repeat of an applied cancel answers `not_found`).
    pub async fn cancel_scheduled(&self, sequence_number: i64) -> Result<(), SendError> {
        let what = format!(
            "cancel scheduled message {sequence_number} of {}",
            self.queue
        );
        check_name(&what, &self.queue)?;
        let seq = sequence_number.to_string();
        let url =
            self.client
                .endpoint(&["v1", "queues", &self.queue, "messages", "scheduled", &seq]);
        self.client
            .execute(Req::new(Method::DELETE, url), Retry::IfUnchanged)
            .await?;
        Ok(())
    }

    async fn send_all(
        &self,
        mut messages: Vec<Message>,
        batch: bool,
    ) -> Result<Vec<SendOutcome>, SendError> {
        let what = format!("send to {}", self.queue);
        check_name(&what, &self.queue)?;
        if messages.is_empty() || messages.len() > MAX_SEND_BATCH {
            return Err(Failure::invalid(
                &what,
                format!(
                    "a batch holds 1 to {MAX_SEND_BATCH} messages, not {}",
                    messages.len()
                ),
            )
            .into());
        }
        if self.assign_ids {
            for m in &mut messages {
                m.set_id_if_absent(random_id);
            }
        }
        let retry = if messages.iter().all(|m| m.message_id().is_some()) {
            Retry::Always
        } else {
            Retry::Never
        };
        let wire = messages
            .iter()
            .map(|m| m.to_wire(&what))
            .collect::<Result<Vec<_>, _>>()?;
        let count = wire.len();
        let body = if batch {
            SendRequest::Batch { messages: wire }
        } else {
            SendRequest::One(Box::new(wire.into_iter().next().unwrap_or_default()))
        };
        let url = self
            .client
            .endpoint(&["v1", "queues", &self.queue, "messages"]);
        let answer: SendResponse = self
            .client
            .json(Req::new(Method::POST, url).json(&body), retry)
            .await?;
        if answer.results.len() != count {
            return Err(Failure::invalid(
                &what,
                format!(
                    "the server answered {} results for {count} messages",
                    answer.results.len()
                ),
            )
            .into());
        }
        Ok(answer.results.into_iter().map(SendOutcome::from).collect())
    }
}

/// The outcome of one published event.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PublishOutcome {
    /// The event id.
    pub id: String,
    /// The same source and id were seen inside the topic's duplicate-detection window: the
    /// event was accepted and not fanned out again.
    pub duplicate: bool,
}

/// Most events in one published batch (the server's send limit).
pub const MAX_PUBLISH_BATCH: usize = 10_000;

/// A publisher of CloudEvents to one topic. Cheap to clone.
///
/// Every event carries an id, so a publish is retried after any transient failure: a
/// repeat inside the topic's duplicate-detection window is not fanned out again.
#[derive(Debug, Clone)]
pub struct Publisher {
    client: Client,
    topic: Arc<str>,
}

impl Publisher {
    pub(crate) fn new(client: Client, topic: String) -> Publisher {
        Publisher {
            client,
            topic: topic.into(),
        }
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Publishes one event in structured mode (`application/cloudevents+json`).
    pub async fn publish(&self, event: &CloudEvent) -> Result<PublishOutcome, SendError> {
        let body = serde_json::to_vec(&event.to_json()).unwrap_or_default();
        let mut out = self
            .post(redrive_events::cloudevent::STRUCTURED, body, 1)
            .await?;
        Ok(out.remove(0))
    }

    /// Publishes a batch (`application/cloudevents-batch+json`): all stored, or none (1 to
    /// [`MAX_PUBLISH_BATCH`] events).
    pub async fn publish_batch(
        &self,
        events: &[CloudEvent],
    ) -> Result<Vec<PublishOutcome>, SendError> {
        if events.is_empty() || events.len() > MAX_PUBLISH_BATCH {
            return Err(Failure::invalid(
                format!("publish to {}", self.topic),
                format!(
                    "a batch holds 1 to {MAX_PUBLISH_BATCH} events, not {}",
                    events.len()
                ),
            )
            .into());
        }
        let all: Vec<serde_json::Value> = events.iter().map(CloudEvent::to_json).collect();
        let body = serde_json::to_vec(&all).unwrap_or_default();
        self.post(redrive_events::cloudevent::BATCH, body, events.len())
            .await
    }

    async fn post(
        &self,
        content_type: &'static str,
        body: Vec<u8>,
        count: usize,
    ) -> Result<Vec<PublishOutcome>, SendError> {
        let what = format!("publish to {}", self.topic);
        check_name(&what, &self.topic)?;
        let url = self
            .client
            .endpoint(&["v1", "topics", &self.topic, "events"]);
        let answer: PublishResults = self
            .client
            .json(
                Req::new(Method::POST, url).body(content_type, body),
                Retry::Always,
            )
            .await?;
        if answer.results.len() != count {
            return Err(Failure::invalid(
                &what,
                format!(
                    "the server answered {} results for {count} events",
                    answer.results.len()
                ),
            )
            .into());
        }
        Ok(answer
            .results
            .into_iter()
            .map(|r| PublishOutcome {
                id: r.id,
                duplicate: r.duplicate,
            })
            .collect())
    }
}

/// A random message id: 32 hex digits from the operating system's randomness (falling
/// back on the process's generator if that is unavailable).
pub(crate) fn random_id() -> String {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        b = fastrand::u128(..).to_le_bytes();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Refuses a name the server would refuse (1 to 80 of `A-Za-z0-9-_.`, starting with a
/// letter or digit), before any request.
pub(crate) fn check_name(what: &str, name: &str) -> Result<(), Failure> {
    name.parse::<redrive_core::EntityName>()
        .map(|_| ())
        .map_err(|e| Failure::invalid(what, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_are_32_hex_digits_and_differ() {
        let (a, b) = (random_id(), random_id());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn names_follow_the_servers_rule() {
        assert!(check_name("t", "orders.billing-1").is_ok());
        for bad in ["", ".x", "a b", &"x".repeat(81)] {
            assert!(check_name("t", bad).is_err(), "{bad:?}");
        }
    }
}
