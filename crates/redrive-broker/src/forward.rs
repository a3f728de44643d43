//! Dead-lettering into a topic: a push subscription whose destination is
//! [`DeadLetterDestination::Topic`] first dead-letters the event into its own store (the
//! evidence record, byte-exact, in the same settlement as any other dead letter), then
//! publishes a copy to the named topic and archives the record.
//!
//! The copy is the stored event with Event Grid's diagnostics added as CloudEvents
//! extension attributes (lower-case names, as the CloudEvents spec requires):
//! `deadletterreason`, `deliveryattempts`, `lastdeliveryoutcome`, `lasthttpstatuscode`
//! (when the endpoint answered), `publishtime`, `lastdeliveryattempttime`, plus
//! `deadlettersubscription` (`topic/subscription`) and `deadletterid` (the record's id).
//! Its duplicate-detection key in the target topic is the record id, so a copy forwarded
//! twice (a retry after a failure between publish and archive) is stored once inside the
//! target's window, while the same event given up on by two subscriptions is two copies.
//!
//! Nothing is lost on the way: when the copy cannot be published (the topic was deleted,
//! the store failed), the record stays live in the subscription's own dead-letter store,
//! with a warning and `redrive_dead_letter_forward_failures_total`.

use redrive_core::{Area, DeadLetterId, EntityName};
use redrive_events::CloudEvent;
use redrive_events::cloudevent::ExtensionValue;
use redrive_store::SubscriptionRecord;

use crate::{Actor, Broker, BrokerError, BrokerResult};

/// Metric counting records that could not be forwarded to their dead-letter topic.
pub(crate) const FORWARD_FAILURES: &str = "redrive_dead_letter_forward_failures_total";

/// The diagnostics of a push dead letter (the record's description) as extensions.
fn diagnostics_extensions(
    description: Option<&str>,
    event: &mut CloudEvent,
    sub: &SubscriptionRecord,
    record_id: &str,
) {
    let diag: serde_json::Map<String, serde_json::Value> = description
        .and_then(|d| serde_json::from_str(d).ok())
        .unwrap_or_default();
    for (key, ext) in [
        ("deadLetterReason", "deadletterreason"),
        ("deliveryAttempts", "deliveryattempts"),
        ("lastDeliveryOutcome", "lastdeliveryoutcome"),
        ("lastHttpStatusCode", "lasthttpstatuscode"),
        ("publishTime", "publishtime"),
        ("lastDeliveryAttemptTime", "lastdeliveryattempttime"),
    ] {
        let value = match diag.get(key) {
            Some(serde_json::Value::String(s)) => ExtensionValue::String(s.clone()),
            Some(serde_json::Value::Number(n)) => match n.as_i64() {
                Some(i) => ExtensionValue::Integer(i),
                None => continue,
            },
            _ => continue,
        };
        event.extensions.insert(ext.to_owned(), value);
    }
    event.extensions.insert(
        "deadlettersubscription".to_owned(),
        ExtensionValue::String(format!("{}/{}", sub.topic, sub.name)),
    );
    event.extensions.insert(
        "deadletterid".to_owned(),
        ExtensionValue::String(record_id.to_owned()),
    );
}

impl Broker {
    /// Forwards the records `ids` of `sub`'s dead-letter store to `topic` and archives
    /// each one that was stored there (see the module docs). Failures are logged and
    /// counted; the record then stays live.
    pub(crate) async fn forward_dead_letters(
        &self,
        sub: &SubscriptionRecord,
        topic: &EntityName,
        ids: &[String],
    ) {
        for id in ids {
            // The store's own ids: one that is not a record id fails as any other.
            let forwarded = match id.parse::<DeadLetterId>() {
                Ok(id) => self.forward_one(sub, topic, &id).await,
                Err(e) => Err(e.into()),
            };
            if let Err(e) = forwarded {
                self.inner
                    .topics
                    .add(FORWARD_FAILURES, topic.as_str(), "", 1);
                tracing::warn!(
                    topic = %sub.topic, subscription = %sub.name, dead_letter_id = %id,
                    target = %topic, error = %e,
                    "dead letter not forwarded to its topic; it stays in the subscription's dead-letter store"
                );
            }
        }
    }

    async fn forward_one(
        &self,
        sub: &SubscriptionRecord,
        topic: &EntityName,
        record_id: &DeadLetterId,
    ) -> BrokerResult<()> {
        let id = record_id.as_str();
        let record = self.inner.store.get_dead_letter(&sub.queue, id).await?;
        let value: serde_json::Value =
            serde_json::from_slice(&record.body).map_err(|e| BrokerError::InvalidEvent {
                index: 0,
                why: format!("stored event is not JSON: {e}"),
            })?;
        let mut event = CloudEvent::from_json(value).map_err(|e| BrokerError::InvalidEvent {
            index: 0,
            why: e.to_string(),
        })?;
        diagnostics_extensions(record.description.as_deref(), &mut event, sub, id);
        let body = serde_json::to_vec(&event.to_json()).map_err(|e| BrokerError::InvalidEvent {
            index: 0,
            why: e.to_string(),
        })?;
        let key = format!("dead-letter\n{id}");
        self.store_events(topic, &[event], &[body], &[key]).await?;
        self.move_dead_letter(
            sub.queue.as_str(),
            &Ok(record_id.clone()),
            Area::Archived,
            &Actor::system("dispatcher"),
        )
        .await?;
        tracing::info!(
            topic = %sub.topic, subscription = %sub.name, dead_letter_id = %id, target = %topic,
            "dead letter forwarded to its topic"
        );
        Ok(())
    }
}
