//! Topics, subscriptions and publishing: fan-out at publish time into each
//! subscription's queue (push subscriptions are then delivered by `dispatcher`).
//!
//! A subscription owns a native queue named `<topic>.<subscription>`, created and deleted
//! with it. A pull subscription *is* that queue: it is received, settled and
//! dead-lettered through the queue API. Publishing parses and validates every event
//! first (one bad event refuses the whole request and stores nothing), evaluates each
//! subscription's filter, and makes one store call that stores the fan-out of the whole
//! batch in one transaction, with duplicate detection on `source` + `id` inside the
//! topic's window. A paused subscription still receives events (they are kept; no
//! delivery attempts are made while it is paused).
//!
//! Deleting a subscription whose queue holds events needs `force`; the events are then
//! discarded with the queue, and their number is logged and counted
//! (`redrive_subscription_events_discarded_total`), never dropped silently.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use redrive_core::{AutoReplay, EntityName, Properties, QueuePolicy};
use redrive_events::cloudevent::{BATCH, STRUCTURED};
use redrive_events::{CloudEvent, Filter, RetryPolicy};
use redrive_store::{
    DeadLetterDestination, DeliverySpec, EndpointValidation, MAX_TOPIC_DEDUP_WINDOW_MS, NewMessage,
    NewSubscription, PublishEvent, PushMode, QueueCounts, SubscriptionKind, SubscriptionRecord,
    SubscriptionSpec, SubscriptionUpdate, TopicPolicy, TopicRecord,
};

use crate::push_stats::PushCounters;
use crate::{Actor, Broker, BrokerError, BrokerResult};

/// The origin named in the webhook validation handshake.
pub const VALIDATION_ORIGIN: &str = "redrive";
/// Lock duration of a subscription's queue.
pub const SUBSCRIPTION_LOCK_MS: u64 = 60_000;
/// Max delivery count of a push subscription's queue: the dispatcher's retry policy
/// decides when to give up, not the queue.
pub const PUSH_MAX_DELIVERY_COUNT: u32 = 10_000;
/// Most events in one publish request.
pub const MAX_PUBLISH_BATCH: usize = 1_000;
/// Largest `max_event_size` a topic may set (the queue limit).
pub const MAX_EVENT_SIZE_LIMIT: u32 = redrive_core::policy::MAX_MESSAGE_SIZE_LIMIT;

/// How events arrive over HTTP.
#[derive(Debug, Clone)]
pub enum EventInput {
    /// One `application/cloudevents+json` event.
    Structured(Vec<u8>),
    /// An `application/cloudevents-batch+json` array.
    Batch(Vec<u8>),
    /// Binary mode: headers (`ce-*`, `content-type`) and the body as the data.
    Binary {
        /// Request headers.
        headers: Vec<(String, String)>,
        /// The body.
        body: Vec<u8>,
    },
}

/// The answer to one published event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedEvent {
    /// The event id.
    pub id: String,
    /// Seen inside the topic's window: accepted, not fanned out again.
    pub duplicate: bool,
}

/// Push settings of a new subscription.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushInput {
    /// Endpoint URL.
    pub endpoint: String,
    /// Structured or binary.
    pub mode: PushMode,
    /// Skip the validation handshake (a trusted endpoint); the record says so.
    pub skip_validation: bool,
}

/// A subscription to create.
#[derive(Debug, Clone, PartialEq)]
pub struct SubscriptionInput {
    /// Name (unique per topic).
    pub name: String,
    /// `None` for pull.
    pub push: Option<PushInput>,
    /// Filter.
    pub filter: Filter,
    /// Retry policy (push).
    pub retry_policy: RetryPolicy,
    /// Delivery settings (push).
    pub delivery: DeliverySpec,
    /// Dead-letter destination; required for push (own store by default for pull).
    pub dead_letter: Option<DeadLetterDestination>,
    /// Created paused.
    pub paused: bool,
    /// Max delivery count of a pull subscription's queue (default 10).
    pub max_delivery_count: Option<u32>,
    /// Automatic replay of its dead letters (off by default).
    pub auto_replay: AutoReplay,
    /// Retention of its dead-letter records, ms (`None`: 30 days; 0 keeps them forever).
    pub dead_letter_retention_ms: Option<u64>,
}

/// A subscription with its queue's counts and its delivery statistics.
#[derive(Debug, Clone)]
pub struct SubscriptionView {
    /// The stored subscription.
    pub record: SubscriptionRecord,
    /// Its queue's counts: pending = active, in backoff = scheduled, dead-lettered.
    pub counts: QueueCounts,
    /// Age of the oldest event still waiting (any state), ms.
    pub oldest_pending_age_ms: Option<u64>,
    /// Push delivery counters of this process since it started.
    pub delivery: PushCounters,
}

/// Topic metrics and the validation client; part of the broker.
#[derive(Default)]
pub(crate) struct TopicState {
    client: OnceLock<reqwest::Client>,
    /// (metric, topic, subscription) → count.
    counters: Mutex<BTreeMap<(&'static str, String, String), u64>>,
    /// Wakes the push dispatcher: events for a push subscription were stored, or a push
    /// subscription was created or resumed.
    pub(crate) push_work: tokio::sync::Notify,
    /// Push delivery statistics per subscription.
    pub(crate) push: crate::push_stats::PushStats,
    /// Wakes a dispatcher busy delivering (every waiter, no stored permit): events for a
    /// push subscription were stored.
    pub(crate) push_published: tokio::sync::Notify,
}

const PUBLISHED: &str = "redrive_events_published_total";
const DUPLICATES: &str = "redrive_events_duplicate_total";
const FANNED_OUT: &str = "redrive_subscription_events_total";
const DISCARDED: &str = "redrive_subscription_events_discarded_total";
const DROPPED: &str = "redrive_subscription_events_dropped_total";

impl TopicState {
    pub(crate) fn add(&self, metric: &'static str, topic: &str, sub: &str, n: u64) {
        if n == 0 {
            return;
        }
        let mut c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        *c.entry((metric, topic.to_owned(), sub.to_owned()))
            .or_insert(0) += n;
    }

    /// Counts an event a subscription gave up on and dropped (it accepted dropping).
    pub(crate) fn dropped(&self, topic: &str, sub: &str) {
        self.add(DROPPED, topic, sub, 1);
        self.push.dropped(topic, sub);
    }

    fn forget(&self, topic: &str, sub: Option<&str>) {
        self.push.forget(topic, sub);
        let mut c = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        c.retain(|(m, t, s), _| *m == DISCARDED || t != topic || sub.is_some_and(|sub| s != sub));
    }

    /// Prometheus text of the topic counters.
    pub(crate) fn render(&self) -> String {
        let c = self
            .counters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut out = String::new();
        for (metric, help, per_sub) in [
            (
                PUBLISHED,
                "Events accepted and fanned out, by topic.",
                false,
            ),
            (
                DUPLICATES,
                "Events accepted but not fanned out again: same source and id inside the window.",
                false,
            ),
            (
                FANNED_OUT,
                "Events stored for a subscription at publish.",
                true,
            ),
            (
                DISCARDED,
                "Undelivered events discarded by a forced subscription delete.",
                true,
            ),
            (
                crate::forward::FORWARD_FAILURES,
                "Dead letters of push subscriptions not forwarded to their dead-letter topic (kept in the own store), by target topic.",
                false,
            ),
            (
                DROPPED,
                "Undeliverable events dropped by push subscriptions that accept dropping.",
                true,
            ),
        ] {
            let _ = writeln!(out, "# HELP {metric} {help}");
            let _ = writeln!(out, "# TYPE {metric} counter");
            for ((m, t, s), v) in &c {
                if *m != metric {
                    continue;
                }
                if per_sub {
                    let _ = writeln!(
                        out,
                        "{metric}{{topic=\"{}\",subscription=\"{}\"}} {v}",
                        crate::metrics::escape_label(t),
                        crate::metrics::escape_label(s)
                    );
                } else {
                    let _ = writeln!(
                        out,
                        "{metric}{{topic=\"{}\"}} {v}",
                        crate::metrics::escape_label(t)
                    );
                }
            }
        }
        out.push_str(&self.push.render());
        out
    }
}

/// The internal queue of a subscription.
pub fn subscription_queue(topic: &EntityName, sub: &EntityName) -> BrokerResult<EntityName> {
    Ok(format!("{topic}.{sub}").parse()?)
}

fn check_topic_policy(p: &TopicPolicy) -> BrokerResult<()> {
    if p.duplicate_detection_window_ms > MAX_TOPIC_DEDUP_WINDOW_MS {
        return Err(BrokerError::invalid(
            "policy.duplicate_detection_window_ms",
            "must be at most 604800000 (7 days); 0 turns detection off",
        ));
    }
    if p.max_event_size == 0 || p.max_event_size > MAX_EVENT_SIZE_LIMIT {
        return Err(BrokerError::invalid(
            "policy.max_event_size",
            format!("must be between 1 and {MAX_EVENT_SIZE_LIMIT}"),
        ));
    }
    Ok(())
}

fn check_delivery(d: &DeliverySpec) -> BrokerResult<()> {
    if !(1_000..=300_000).contains(&d.timeout_ms) {
        return Err(BrokerError::invalid(
            "delivery.timeout_ms",
            "must be between 1000 and 300000",
        ));
    }
    if !(1..=1_000).contains(&d.max_concurrency) {
        return Err(BrokerError::invalid(
            "delivery.max_concurrency",
            "must be between 1 and 1000",
        ));
    }
    if !(1..=5_000).contains(&d.max_events_per_batch) {
        return Err(BrokerError::invalid(
            "delivery.max_events_per_batch",
            "must be between 1 and 5000",
        ));
    }
    if !(1_024..=1_048_576).contains(&d.preferred_batch_bytes) {
        return Err(BrokerError::invalid(
            "delivery.preferred_batch_bytes",
            "must be between 1024 and 1048576",
        ));
    }
    Ok(())
}

/// Parses and validates every event, each with the body to store: its structured-mode
/// JSON. A structured event is stored as the publisher sent it, and each event of a batch
/// as its bytes in the array (the event byte-exact, never re-encoded); a binary-mode event
/// is encoded in structured form.
fn parse_events(input: EventInput) -> BrokerResult<(Vec<CloudEvent>, Vec<Vec<u8>>)> {
    let bad = |index: usize, why: String| BrokerError::InvalidEvent { index, why };
    match input {
        EventInput::Structured(body) => {
            let e = CloudEvent::from_slice(&body).map_err(|e| bad(0, e.to_string()))?;
            Ok((vec![e], vec![body]))
        }
        EventInput::Batch(body) => Ok(CloudEvent::batch_from_slice(&body)
            .map_err(|(i, e)| bad(i, e.to_string()))?
            .into_iter()
            .unzip()),
        EventInput::Binary { headers, body } => {
            let e = CloudEvent::from_binary(
                headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                &body,
            )
            .map_err(|e| bad(0, e.to_string()))?;
            let json = serde_json::to_vec(&e.to_json())
                .map_err(|e| bad(0, format!("cannot be encoded: {e}")))?;
            Ok((vec![e], vec![json]))
        }
    }
}

/// One `PublishEvent` per event with a message for each subscription whose filter
/// matches, and for each event the indices of those subscriptions.
fn fan_out(
    events: &[CloudEvent],
    bodies: &[Vec<u8>],
    keys: &[String],
    subs: &[SubscriptionRecord],
) -> (Vec<PublishEvent>, Vec<Vec<usize>>) {
    let mut batch = Vec::with_capacity(events.len());
    let mut matched = Vec::with_capacity(events.len());
    for ((ev, body), key) in events.iter().zip(bodies).zip(keys) {
        let to: Vec<usize> = (0..subs.len())
            .filter(|&i| subs[i].spec.filter.matches(ev))
            .collect();
        let deliveries = to
            .iter()
            .map(|&i| {
                (
                    subs[i].queue.clone(),
                    NewMessage {
                        message_id: ev.id.clone(),
                        body: body.clone(),
                        content_type: Some(STRUCTURED.to_owned()),
                        properties: Properties::new(),
                        correlation_id: None,
                        session_id: None,
                        message_type: Some(ev.event_type.clone()),
                        intent: None,
                        valid_until: None,
                        scheduled_at: None,
                        expires_at: None,
                    },
                )
            })
            .collect();
        matched.push(to);
        batch.push(PublishEvent {
            dedup_key: key.clone(),
            deliveries,
        });
    }
    (batch, matched)
}

impl Broker {
    pub(crate) fn topic_state(&self) -> &TopicState {
        &self.inner.topics
    }

    fn validation_client(&self) -> BrokerResult<reqwest::Client> {
        if let Some(c) = self.topic_state().client.get() {
            return Ok(c.clone());
        }
        let client = redrive_push::http_client(&self.delivery_settings()).map_err(|e| {
            BrokerError::EndpointValidationFailed {
                endpoint: String::new(),
                why: format!("no HTTP client: {e}"),
            }
        })?;
        Ok(self.topic_state().client.get_or_init(|| client).clone())
    }

    // ---- topics ------------------------------------------------------------------------

    /// Creates a topic.
    #[tracing::instrument(level = "debug", skip_all, fields(topic = %name))]
    pub async fn create_topic(&self, name: &str, policy: TopicPolicy) -> BrokerResult<TopicRecord> {
        let name: EntityName = name.parse()?;
        check_topic_policy(&policy)?;
        let rec = self
            .inner
            .store
            .create_topic(&name, &policy, self.now())
            .await?;
        tracing::info!(topic = %name, "topic created");
        Ok(rec)
    }

    /// One topic.
    #[tracing::instrument(level = "debug", skip_all, fields(topic = %name))]
    pub async fn get_topic(&self, name: &str) -> BrokerResult<TopicRecord> {
        let name: EntityName = name.parse()?;
        Ok(self.inner.store.get_topic(&name).await?)
    }

    /// Every topic.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn list_topics(&self) -> BrokerResult<Vec<TopicRecord>> {
        Ok(self.inner.store.list_topics().await?)
    }

    /// Deletes a topic; with subscriptions only with `force` (which deletes them and
    /// their queues).
    #[tracing::instrument(level = "debug", skip_all, fields(topic = %name, force))]
    pub async fn delete_topic(&self, name: &str, force: bool, actor: &Actor) -> BrokerResult<()> {
        let result = self.delete_topic_inner(name, force).await;
        let targets = if force {
            vec!["force".to_owned()]
        } else {
            Vec::new()
        };
        self.audited(actor, "topic.delete", Some(name), targets, result)
            .await
    }

    async fn delete_topic_inner(&self, name: &str, force: bool) -> BrokerResult<()> {
        let name: EntityName = name.parse()?;
        let subs = if force {
            self.inner
                .store
                .list_subscriptions(&name)
                .await
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        self.inner.store.delete_topic(&name, force).await?;
        for s in &subs {
            self.inner.waiters.forget(s.queue.as_str());
            self.inner.metrics.forget_queue(s.queue.as_str());
        }
        self.topic_state().forget(name.as_str(), None);
        tracing::info!(topic = %name, force, subscriptions = subs.len(), "topic deleted");
        Ok(())
    }

    // ---- subscriptions -----------------------------------------------------------------

    /// Creates a subscription with its queue. A push endpoint is checked and, unless
    /// `skip_validation`, must pass the CloudEvents webhook validation handshake.
    #[tracing::instrument(level = "debug", skip_all, fields(topic = %topic))]
    pub async fn create_subscription(
        &self,
        topic: &str,
        input: SubscriptionInput,
        actor: &Actor,
    ) -> BrokerResult<SubscriptionRecord> {
        let name = input.name.clone();
        // Its automatic replay delivers to it: the role of a replay on its queue.
        if let (Ok(t), Ok(n)) = (topic.parse::<EntityName>(), name.parse::<EntityName>())
            && let Ok(queue) = subscription_queue(&t, &n)
        {
            self.authorize_auto_replay(actor, queue.as_str(), None, &input.auto_replay)
                .await?;
        }
        let result = self.create_subscription_inner(topic, input).await;
        self.audited(
            actor,
            "subscription.create",
            Some(topic),
            vec![name],
            result,
        )
        .await
    }

    async fn create_subscription_inner(
        &self,
        topic: &str,
        input: SubscriptionInput,
    ) -> BrokerResult<SubscriptionRecord> {
        let topic: EntityName = topic.parse()?;
        let name: EntityName = input.name.parse()?;
        let queue = subscription_queue(&topic, &name)?;
        input
            .filter
            .validate()
            .map_err(|e| BrokerError::invalid("filter", e.0))?;
        input.auto_replay.validate()?;
        let t = self.inner.store.get_topic(&topic).await?;
        let mut queue_policy = QueuePolicy {
            lock_duration_ms: SUBSCRIPTION_LOCK_MS,
            max_message_size: t.policy.max_event_size,
            ..QueuePolicy::default()
        };
        let dead_letter = match (&input.push, input.dead_letter) {
            (
                _,
                Some(DeadLetterDestination::Drop {
                    acknowledged: false,
                }),
            ) => return Err(BrokerError::DeadLetterDestinationRequired),
            (Some(_), None) => return Err(BrokerError::DeadLetterDestinationRequired),
            (None, None) => DeadLetterDestination::OwnStore,
            (_, Some(d)) => d,
        };
        if let DeadLetterDestination::Queue { name: target } = &dead_letter {
            match self.inner.store.get_queue(target).await {
                Ok(_) => {}
                Err(redrive_store::StoreError::QueueNotFound { .. }) => {
                    return Err(BrokerError::invalid(
                        "dead_letter.name",
                        format!("queue \"{target}\" does not exist"),
                    ));
                }
                Err(e) => return Err(e.into()),
            }
            queue_policy.dead_letter_queue = Some(target.clone());
        }
        if let DeadLetterDestination::Topic { name: target } = &dead_letter {
            if input.push.is_none() {
                return Err(BrokerError::invalid(
                    "dead_letter",
                    "a pull subscription dead-letters into its own store or a queue",
                ));
            }
            if *target == topic {
                return Err(BrokerError::invalid(
                    "dead_letter.name",
                    "a subscription cannot dead-letter into its own topic",
                ));
            }
            match self.inner.store.get_topic(target).await {
                Ok(_) => {}
                Err(redrive_store::StoreError::TopicNotFound { .. }) => {
                    return Err(BrokerError::invalid(
                        "dead_letter.name",
                        format!("topic \"{target}\" does not exist"),
                    ));
                }
                Err(e) => return Err(e.into()),
            }
        }
        let kind = match &input.push {
            None => {
                queue_policy.max_delivery_count = input.max_delivery_count.unwrap_or(10);
                SubscriptionKind::Pull
            }
            Some(push) => {
                if input.max_delivery_count.is_some() {
                    return Err(BrokerError::invalid(
                        "max_delivery_count",
                        "applies to pull subscriptions; push uses retry_policy",
                    ));
                }
                input
                    .retry_policy
                    .validate()
                    .map_err(|e| BrokerError::invalid("retry_policy", e.0))?;
                check_delivery(&input.delivery)?;
                if push.mode == PushMode::Binary && input.delivery.max_events_per_batch > 1 {
                    return Err(BrokerError::invalid(
                        "delivery.max_events_per_batch",
                        "batching needs structured mode",
                    ));
                }
                redrive_push::check_url(&push.endpoint)
                    .map_err(|e| BrokerError::invalid("endpoint", e.to_string()))?;
                // Even with skip_validation: the broker must not be pointed at itself or
                // at the private network it runs in.
                self.inner
                    .push_network
                    .check_url(&push.endpoint)
                    .await
                    .map_err(|e| BrokerError::EndpointForbidden {
                        endpoint: push.endpoint.clone(),
                        why: e.to_string(),
                    })?;
                queue_policy.max_delivery_count = PUSH_MAX_DELIVERY_COUNT;
                let validation = if push.skip_validation {
                    EndpointValidation::Skipped
                } else {
                    let client = self.validation_client()?;
                    let timeout = Duration::from_millis(input.delivery.timeout_ms.min(30_000));
                    redrive_push::validate_endpoint(
                        &client,
                        &push.endpoint,
                        VALIDATION_ORIGIN,
                        timeout,
                    )
                    .await
                    .map_err(|e| BrokerError::EndpointValidationFailed {
                        endpoint: push.endpoint.clone(),
                        why: e.to_string(),
                    })?;
                    EndpointValidation::Validated
                };
                SubscriptionKind::Push {
                    endpoint: push.endpoint.clone(),
                    mode: push.mode,
                    validation,
                }
            }
        };
        queue_policy.validate()?;
        let spec = SubscriptionSpec {
            kind,
            filter: input.filter,
            retry_policy: input.retry_policy,
            delivery: input.delivery,
            dead_letter,
            paused: input.paused,
            auto_replay: input.auto_replay,
            dead_letter_retention_ms: input
                .dead_letter_retention_ms
                .unwrap_or(redrive_core::policy::DEFAULT_DEAD_LETTER_RETENTION_MS),
        };
        redrive_core::policy::check_dead_letter_retention(
            spec.dead_letter_retention_ms,
            "dead_letter_retention_ms",
        )?;
        let rec = self
            .inner
            .store
            .create_subscription(
                &NewSubscription {
                    topic: topic.clone(),
                    name: name.clone(),
                    queue,
                    queue_policy,
                    spec,
                },
                self.now(),
            )
            .await?;
        tracing::info!(
            topic = %topic, subscription = %name, queue = %rec.queue,
            kind = ?rec.spec.kind, "subscription created"
        );
        if matches!(rec.spec.kind, SubscriptionKind::Push { .. }) {
            self.topic_state().push_work.notify_one();
        }
        Ok(rec)
    }

    async fn sub_view(&self, record: SubscriptionRecord) -> BrokerResult<SubscriptionView> {
        let now = self.now();
        let counts = self.inner.store.queue_counts(&record.queue, now).await?;
        let oldest_pending_age_ms = counts
            .oldest_enqueued_at
            .map(|t| u64::try_from(now.0.saturating_sub(t.0)).unwrap_or(0));
        let delivery = self
            .topic_state()
            .push
            .get(record.topic.as_str(), record.name.as_str());
        Ok(SubscriptionView {
            record,
            counts,
            oldest_pending_age_ms,
            delivery,
        })
    }

    /// One subscription with its stats.
    #[tracing::instrument(level = "debug", skip_all, fields(topic = %topic, subscription = %name))]
    pub async fn get_subscription(
        &self,
        topic: &str,
        name: &str,
    ) -> BrokerResult<SubscriptionView> {
        let (topic, name): (EntityName, EntityName) = (topic.parse()?, name.parse()?);
        let rec = self.inner.store.get_subscription(&topic, &name).await?;
        self.sub_view(rec).await
    }

    /// The subscriptions of a topic with their stats.
    #[tracing::instrument(level = "debug", skip_all, fields(topic = %topic))]
    pub async fn list_subscriptions(&self, topic: &str) -> BrokerResult<Vec<SubscriptionView>> {
        let topic: EntityName = topic.parse()?;
        let recs = self.inner.store.list_subscriptions(&topic).await?;
        let mut out = Vec::with_capacity(recs.len());
        for r in recs {
            out.push(self.sub_view(r).await?);
        }
        Ok(out)
    }

    /// Pauses/resumes a subscription, replaces its filter, or changes its auto-replay
    /// policy (the fields given; each is checked on its own, so the result stays valid).
    #[tracing::instrument(level = "debug", skip_all, fields(topic = %topic, subscription = %name))]
    pub async fn update_subscription(
        &self,
        topic: &str,
        name: &str,
        update: SubscriptionUpdate,
        actor: &Actor,
    ) -> BrokerResult<SubscriptionRecord> {
        if let Some(patch) = &update.auto_replay
            && let (Ok(t), Ok(n)) = (topic.parse::<EntityName>(), name.parse::<EntityName>())
        {
            // A subscription that is not there is answered by the update itself.
            if let Ok(current) = self.inner.store.get_subscription(&t, &n).await {
                let after = current.spec.auto_replay.patched(patch);
                self.authorize_auto_replay(
                    actor,
                    current.queue.as_str(),
                    Some(&current.spec.auto_replay),
                    &after,
                )
                .await?;
            }
        }
        let result = self.update_subscription_inner(topic, name, update).await;
        self.audited(
            actor,
            "subscription.update",
            Some(topic),
            vec![name.to_owned()],
            result,
        )
        .await
    }

    async fn update_subscription_inner(
        &self,
        topic: &str,
        name: &str,
        update: SubscriptionUpdate,
    ) -> BrokerResult<SubscriptionRecord> {
        let (topic, name): (EntityName, EntityName) = (topic.parse()?, name.parse()?);
        if let Some(f) = &update.filter {
            f.validate()
                .map_err(|e| BrokerError::invalid("filter", e.0))?;
        }
        if let Some(p) = &update.auto_replay {
            p.validate()?;
        }
        if let Some(ms) = update.dead_letter_retention_ms {
            redrive_core::policy::check_dead_letter_retention(ms, "dead_letter_retention_ms")?;
        }
        let rec = self
            .inner
            .store
            .update_subscription(&topic, &name, &update, self.now())
            .await?;
        tracing::info!(
            topic = %topic, subscription = %name, paused = rec.spec.paused,
            version = rec.version, "subscription updated"
        );
        if !rec.spec.paused && matches!(rec.spec.kind, SubscriptionKind::Push { .. }) {
            self.topic_state().push_work.notify_one();
        }
        Ok(rec)
    }

    /// Deletes a subscription and its queue; with undelivered events only with `force`
    /// (they are discarded, logged and counted). Returns how many were discarded.
    #[tracing::instrument(level = "debug", skip_all,
        fields(topic = %topic, subscription = %name, force))]
    pub async fn delete_subscription(
        &self,
        topic: &str,
        name: &str,
        force: bool,
        actor: &Actor,
    ) -> BrokerResult<u64> {
        let result = self.delete_subscription_inner(topic, name, force).await;
        let mut targets = vec![name.to_owned()];
        if let Ok(n) = &result {
            targets.push(format!("discarded={n}"));
        }
        self.audited(actor, "subscription.delete", Some(topic), targets, result)
            .await
    }

    async fn delete_subscription_inner(
        &self,
        topic: &str,
        name: &str,
        force: bool,
    ) -> BrokerResult<u64> {
        let (topic, name): (EntityName, EntityName) = (topic.parse()?, name.parse()?);
        let queue = subscription_queue(&topic, &name)?;
        let discarded = self
            .inner
            .store
            .delete_subscription(&topic, &name, force)
            .await?;
        self.inner.waiters.forget(queue.as_str());
        self.inner.metrics.forget_queue(queue.as_str());
        self.topic_state()
            .forget(topic.as_str(), Some(name.as_str()));
        self.topic_state()
            .add(DISCARDED, topic.as_str(), name.as_str(), discarded);
        if discarded > 0 {
            tracing::warn!(
                topic = %topic, subscription = %name, discarded,
                "subscription deleted with force: undelivered events discarded"
            );
        } else {
            tracing::info!(topic = %topic, subscription = %name, "subscription deleted");
        }
        Ok(discarded)
    }

    // ---- publish -----------------------------------------------------------------------

    /// Publishes events: all are validated first (one bad event refuses the request and
    /// stores nothing), then fanned out to every subscription whose filter matches, in
    /// one durable store transaction.
    #[tracing::instrument(level = "debug", skip_all, fields(topic = %topic))]
    pub async fn publish(
        &self,
        topic: &str,
        input: EventInput,
    ) -> BrokerResult<Vec<PublishedEvent>> {
        let topic: EntityName = topic.parse()?;
        let (events, bodies) = parse_events(input)?;
        if events.len() > MAX_PUBLISH_BATCH {
            return Err(BrokerError::invalid(
                "events",
                format!("at most {MAX_PUBLISH_BATCH} events per request"),
            ));
        }
        let t = self.inner.store.get_topic(&topic).await?;
        for (index, (ev, body)) in events.iter().zip(&bodies).enumerate() {
            // Everything stored per subscription counts: the structured event and the
            // headers copied out of it (id, type, content type).
            let size = body.len() + ev.id.len() + ev.event_type.len() + STRUCTURED.len();
            if size > t.policy.max_event_size as usize {
                return Err(BrokerError::EventTooLarge {
                    topic: topic.to_string(),
                    index,
                    size,
                    limit: t.policy.max_event_size,
                });
            }
        }
        let keys: Vec<String> = events
            .iter()
            .map(|ev| format!("{}\n{}", ev.source, ev.id))
            .collect();
        self.store_events(&topic, &events, &bodies, &keys).await
    }

    /// Stores the fan-out of validated events (with their stored bodies and duplicate
    /// detection keys) in one store transaction, counts them and wakes their consumers.
    pub(crate) async fn store_events(
        &self,
        topic: &EntityName,
        events: &[CloudEvent],
        bodies: &[Vec<u8>],
        keys: &[String],
    ) -> BrokerResult<Vec<PublishedEvent>> {
        let topic = topic.clone();
        let mut tries = 0;
        let (subs, matched, published) = loop {
            let subs = self.inner.store.list_subscriptions(&topic).await?;
            let (batch, matched) = fan_out(events, bodies, keys, &subs);
            match self.inner.store.publish(&topic, batch, self.now()).await {
                Ok(p) => break (subs, matched, p),
                // A subscription was deleted between the read and the write (nothing was
                // stored): fan out again over the subscriptions that exist now.
                Err(redrive_store::StoreError::QueueNotFound { .. }) if tries < 2 => tries += 1,
                Err(e) => return Err(e.into()),
            }
        };
        let mut woken = BTreeSet::new();
        let mut push = false;
        let mut out = Vec::with_capacity(events.len());
        let state = self.topic_state();
        for ((ev, p), to) in events.iter().zip(&published).zip(&matched) {
            if p.duplicate {
                state.add(DUPLICATES, topic.as_str(), "", 1);
                tracing::debug!(topic = %topic, id = %ev.id, source = %ev.source, "duplicate event");
            } else {
                state.add(PUBLISHED, topic.as_str(), "", 1);
                for s in to.iter().map(|&i| &subs[i]) {
                    state.add(FANNED_OUT, topic.as_str(), s.name.as_str(), 1);
                    (self.inner.series).record(
                        s.queue.as_str(),
                        crate::SeriesEvent::Sent,
                        1,
                        self.now(),
                    );
                    woken.insert(s.queue.as_str());
                    push |= matches!(s.spec.kind, SubscriptionKind::Push { .. });
                }
            }
            out.push(PublishedEvent {
                id: ev.id.clone(),
                duplicate: p.duplicate,
            });
        }
        for q in woken {
            self.inner.waiters.wake(q);
        }
        if push {
            state.push_work.notify_one();
            state.push_published.notify_waiters();
        }
        Ok(out)
    }

    /// Prometheus text of the topic counters (appended to `/metrics`).
    pub(crate) fn render_topic_metrics(&self) -> String {
        self.topic_state().render()
    }
}

/// The media types a publish accepts, besides binary mode.
pub const PUBLISH_MEDIA_TYPES: [&str; 2] = [STRUCTURED, BATCH];
