//! The consumer's dead-letter policy (Pulsar's, as seed 003 describes it), the entity a
//! processor reads, and the restart budget that bounds a failing worker.

use std::time::Duration;

use redrive_core::clock::Timestamp;

use crate::message::{Message, ReceivedMessage};
use crate::processor::ProcessorBuildError;

/// The entity a diverted message came from: the topic for a subscription, the queue for a
/// queue (Pulsar's name, so either client reads the other's dead letters).
pub const REAL_TOPIC: &str = "REAL_TOPIC";
/// The diverted message's original id (Pulsar's name).
pub const ORIGIN_MESSAGE_ID: &str = "ORIGIN_MESSAGE_ID";
/// The queue the message was received from (a subscription's `<topic>.<subscription>`).
pub const REDRIVE_ORIGIN_QUEUE: &str = "REDRIVE_ORIGIN_QUEUE";
/// The original message's sequence number in that queue.
pub const REDRIVE_ORIGIN_SEQUENCE: &str = "REDRIVE_ORIGIN_SEQUENCE";
/// The original message's session id (carried as a property: the dead-letter queue need
/// not use sessions).
pub const REDRIVE_ORIGIN_SESSION_ID: &str = "REDRIVE_ORIGIN_SESSION_ID";
/// The delivery count of the diverted delivery (the policy's `max_redelivery` + 1, or
/// more when deliveries were lost on the way).
pub const REDRIVE_DELIVERY_COUNT: &str = "REDRIVE_DELIVERY_COUNT";
/// The last failure a handler of this processor reported for the message, when it knows
/// one (at most 1024 characters).
pub const REDRIVE_LAST_ERROR: &str = "REDRIVE_LAST_ERROR";
/// When it was diverted (RFC 3339).
pub const REDRIVE_DIVERTED_AT: &str = "REDRIVE_DIVERTED_AT";
/// `true` on a message the decode step refused: the body is the bytes as received, not
/// necessarily what was published.
pub const REDRIVE_INVALID: &str = "REDRIVE_INVALID";
/// Why the decode step refused it.
pub const REDRIVE_INVALID_REASON: &str = "REDRIVE_INVALID_REASON";

const MAX_LAST_ERROR: usize = 1024;

/// What a processor receives from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Entity {
    /// A queue.
    Queue(String),
    /// A pull subscription of a topic, received from its queue `<topic>.<subscription>`.
    Subscription {
        /// The topic.
        topic: String,
        /// The subscription.
        subscription: String,
    },
}

impl Entity {
    /// A queue.
    pub fn queue(name: impl Into<String>) -> Entity {
        Entity::Queue(name.into())
    }

    /// A pull subscription.
    pub fn subscription(topic: impl Into<String>, subscription: impl Into<String>) -> Entity {
        Entity::Subscription {
            topic: topic.into(),
            subscription: subscription.into(),
        }
    }

    /// The queue messages are received from.
    pub fn receive_queue(&self) -> String {
        match self {
            Entity::Queue(q) => q.clone(),
            Entity::Subscription {
                topic,
                subscription,
            } => format!("{topic}.{subscription}"),
        }
    }

    /// The entity named in [`REAL_TOPIC`]: the topic, or the queue.
    pub fn real_topic(&self) -> &str {
        match self {
            Entity::Queue(q) => q,
            Entity::Subscription { topic, .. } => topic,
        }
    }

    /// The subscription, for a subscription.
    pub fn subscription_name(&self) -> Option<&str> {
        match self {
            Entity::Queue(_) => None,
            Entity::Subscription { subscription, .. } => Some(subscription),
        }
    }

    /// Where a policy without a destination diverts: `<topic>-<subscription>-DLQ` (Pulsar's
    /// default, so two subscriptions of a topic get their own), or `<queue>-DLQ`.
    pub fn default_dead_letter_queue(&self) -> String {
        match self {
            Entity::Queue(q) => format!("{q}-DLQ"),
            Entity::Subscription {
                topic,
                subscription,
            } => format!("{topic}-{subscription}-DLQ"),
        }
    }

    pub(crate) fn check(&self) -> Result<(), ProcessorBuildError> {
        let names: Vec<&str> = match self {
            Entity::Queue(q) => vec![q],
            Entity::Subscription {
                topic,
                subscription,
            } => vec![topic, subscription],
        };
        for name in names {
            name.parse::<redrive_core::EntityName>()
                .map_err(|e| ProcessorBuildError::InvalidEntity(e.to_string()))?;
        }
        self.receive_queue()
            .parse::<redrive_core::EntityName>()
            .map_err(|e| ProcessorBuildError::InvalidEntity(e.to_string()))?;
        Ok(())
    }
}

impl std::fmt::Display for Entity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Entity::Queue(q) => write!(f, "queue {q}"),
            Entity::Subscription {
                topic,
                subscription,
            } => write!(f, "subscription {subscription} of topic {topic}"),
        }
    }
}

/// The consumer's dead-letter policy: where the consumer stops retrying a message,
/// publishes it to a dead-letter queue, and only then acknowledges it.
///
/// - **`max_redelivery`** (at least 1): the handler sees a message exactly that many
///   times; the delivery after (its delivery count is `max_redelivery + 1` or more) is
///   *diverted* instead of handled — neither the handler nor the invalid-message handler
///   runs for it. The entity's own `max_delivery_count` must be larger, or the server
///   dead-letters the message first (the processor reports that configuration on start
///   when it may read the entity).
/// - **The redelivery interval** ([`ProcessorOptions::redelivery_interval`]) is required:
///   a policy without one is refused when the processor is built.
/// - **The destination** is a queue (a message carries properties; a CloudEvent's
///   extension names could not hold these): by default `<topic>-<subscription>-DLQ` for
///   a subscription and `<queue>-DLQ` for a queue ([`Entity::default_dead_letter_queue`]).
///   Several processors may share one by naming it.
/// - **What the diverted message carries**: the body as received, its content type,
///   correlation id, type and properties, plus [`REAL_TOPIC`] and [`ORIGIN_MESSAGE_ID`]
///   (Pulsar's names) and redrive's evidence: [`REDRIVE_ORIGIN_QUEUE`],
///   [`REDRIVE_ORIGIN_SEQUENCE`], [`REDRIVE_ORIGIN_SESSION_ID`], [`REDRIVE_DELIVERY_COUNT`],
///   [`REDRIVE_LAST_ERROR`], [`REDRIVE_DIVERTED_AT`]; a message the decode step refuses
///   is marked [`REDRIVE_INVALID`] with [`REDRIVE_INVALID_REASON`].
/// - **Acknowledged only after the divert is stored**: the copy is sent (with an id of
///   its own, so the send is retried on transient failures), and only then is the
///   original completed. A destination that cannot be written (missing, refused, too
///   large) leaves the delivery unacknowledged — abandoned, delivered again — reports the
///   failure to the error callback and counts a worker restart against the
///   [`RestartBudget`]; a spent budget ends the processor with
///   [`ProcessorError::RestartBudgetExhausted`](crate::ProcessorError). Never a drop,
///   never a quiet acknowledgement. Diverting is at-least-once: a copy whose original
///   could not be completed afterwards is sent again on the next delivery.
///
/// [`ProcessorOptions::redelivery_interval`]: crate::ProcessorOptions::redelivery_interval
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetterPolicy {
    /// Deliveries the handler sees before the next is diverted.
    pub max_redelivery: u32,
    /// The dead-letter queue (default [`Entity::default_dead_letter_queue`]).
    pub destination: Option<String>,
}

impl DeadLetterPolicy {
    /// A policy diverting after `max_redelivery` handled deliveries.
    pub fn new(max_redelivery: u32) -> DeadLetterPolicy {
        DeadLetterPolicy {
            max_redelivery,
            destination: None,
        }
    }

    /// Diverts to the queue `queue` instead of the default.
    #[must_use]
    pub fn destination(mut self, queue: impl Into<String>) -> DeadLetterPolicy {
        self.destination = Some(queue.into());
        self
    }

    /// The queue diverted to for `entity`.
    pub fn queue_for(&self, entity: &Entity) -> String {
        self.destination
            .clone()
            .unwrap_or_else(|| entity.default_dead_letter_queue())
    }

    pub(crate) fn check(
        &self,
        entity: &Entity,
        redelivery_interval: Option<Duration>,
    ) -> Result<(), ProcessorBuildError> {
        if redelivery_interval.is_none() {
            return Err(ProcessorBuildError::RedeliveryIntervalRequired);
        }
        if self.max_redelivery == 0 {
            return Err(ProcessorBuildError::InvalidPolicy(
                "max_redelivery must be at least 1".to_owned(),
            ));
        }
        let queue = self.queue_for(entity);
        queue
            .parse::<redrive_core::EntityName>()
            .map_err(|e| ProcessorBuildError::InvalidPolicy(format!("dead-letter queue: {e}")))?;
        if queue == entity.receive_queue() {
            return Err(ProcessorBuildError::InvalidPolicy(format!(
                "the dead-letter queue {queue} is the queue the processor receives from"
            )));
        }
        Ok(())
    }

    /// The copy of `m` a divert publishes.
    pub(crate) fn diverted(
        entity: &Entity,
        m: &ReceivedMessage,
        last_error: Option<&str>,
        invalid: Option<&str>,
        now: Timestamp,
    ) -> Message {
        let mut out = Message::new(m.body().to_vec());
        if let Some(ct) = m.content_type() {
            out = out.with_content_type(ct);
        }
        if let Some(c) = m.correlation_id() {
            out = out.with_correlation_id(c);
        }
        if let Some(t) = m.message_type() {
            out = out.with_type(t);
        }
        for (name, value) in m.properties() {
            out = out.with_property(name.clone(), value.clone());
        }
        out = out
            .with_property(REAL_TOPIC, entity.real_topic())
            .with_property(ORIGIN_MESSAGE_ID, m.message_id())
            .with_property(REDRIVE_ORIGIN_QUEUE, entity.receive_queue())
            .with_property(REDRIVE_ORIGIN_SEQUENCE, m.sequence_number())
            .with_property(REDRIVE_DELIVERY_COUNT, m.delivery_count())
            .with_property(REDRIVE_DIVERTED_AT, now.to_rfc3339());
        if let Some(s) = m.session_id() {
            out = out.with_property(REDRIVE_ORIGIN_SESSION_ID, s);
        }
        if let Some(e) = last_error {
            out = out.with_property(REDRIVE_LAST_ERROR, truncate(e, MAX_LAST_ERROR));
        }
        if let Some(why) = invalid {
            out = out
                .with_property(REDRIVE_INVALID, true)
                .with_property(REDRIVE_INVALID_REASON, truncate(why, MAX_LAST_ERROR));
        }
        out
    }
}

fn truncate(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// How many worker restarts (a failed divert, a panicking handler) a processor survives:
/// at most `max_restarts` within any `within` on the client's clock; one more ends the
/// processor. A restarted worker waits `delay` before it takes another message, so that
/// a failure that passes (a dead-letter queue being created) is got past on the retry,
/// and one that stays spends the budget. Defaults: 3 within 10 s, 1 s apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RestartBudget {
    /// Restarts allowed within the period.
    pub max_restarts: u32,
    /// The period.
    pub within: Duration,
    /// The pause of a restarted worker.
    pub delay: Duration,
}

impl Default for RestartBudget {
    fn default() -> Self {
        RestartBudget {
            max_restarts: 3,
            within: Duration::from_secs(10),
            delay: Duration::from_secs(1),
        }
    }
}

impl RestartBudget {
    /// A budget of `max_restarts` within `within`, restarted workers pausing `delay`.
    pub fn new(max_restarts: u32, within: Duration, delay: Duration) -> RestartBudget {
        RestartBudget {
            max_restarts,
            within,
            delay,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_destinations_follow_pulsar_and_the_queue_rule() {
        assert_eq!(
            Entity::subscription("orders", "billing").default_dead_letter_queue(),
            "orders-billing-DLQ"
        );
        assert_eq!(
            Entity::queue("numbers").default_dead_letter_queue(),
            "numbers-DLQ"
        );
        assert_eq!(
            Entity::subscription("orders", "billing").receive_queue(),
            "orders.billing"
        );
        assert_eq!(
            Entity::subscription("orders", "billing").real_topic(),
            "orders"
        );
    }

    #[test]
    fn a_policy_without_an_interval_or_with_zero_redeliveries_is_refused() {
        let q = Entity::queue("numbers");
        assert_eq!(
            DeadLetterPolicy::new(3).check(&q, None),
            Err(ProcessorBuildError::RedeliveryIntervalRequired)
        );
        let one_second = Some(Duration::from_secs(1));
        assert!(matches!(
            DeadLetterPolicy::new(0).check(&q, one_second),
            Err(ProcessorBuildError::InvalidPolicy(_))
        ));
        assert!(matches!(
            DeadLetterPolicy::new(3)
                .destination("numbers")
                .check(&q, one_second),
            Err(ProcessorBuildError::InvalidPolicy(_))
        ));
        assert!(matches!(
            DeadLetterPolicy::new(3)
                .destination("bad name")
                .check(&q, one_second),
            Err(ProcessorBuildError::InvalidPolicy(_))
        ));
        assert!(DeadLetterPolicy::new(3).check(&q, one_second).is_ok());
    }
}
