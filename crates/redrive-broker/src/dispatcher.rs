//! The push dispatcher: for every push subscription that is not paused, receives events
//! from its queue with a lock, POSTs each to the endpoint with [`redrive_push::Deliverer`],
//! and settles by [`redrive_events::RetryPolicy::decide`]: delivered → complete; retry at
//! `t` → abandon with delay `t − now` (the queue keeps the attempt count — the delivery
//! count — and the time of the next attempt, so both survive a restart); no retry before
//! the time to live → abandon until the expiry; give up → dead-letter, routed by the
//! broker (`routed_by: broker`), with the reason code and the evidence in the description
//! (see below), or, for a subscription that accepted dropping, complete with a warning and
//! a count. An event received when its time to live has passed (it waited for the expiry,
//! or the subscription was paused past it) is given up `TimeToLiveExceeded` without
//! another attempt: the time to live is exact, neither earlier nor later.
//!
//! ## Dead-letter evidence
//!
//! The record's reason code is Event Grid's `deadLetterReason`:
//! `MaxDeliveryAttemptsExceeded`, `TimeToLiveExceeded` or `EndpointRejected`. Event Grid's
//! diagnostics travel with it, but a settlement cannot set properties on the record (the
//! record keeps the message's own properties, and the store is not changed for this), so
//! they are the record's **description**, a JSON object:
//!
//! ```json
//! {"deadLetterReason": "MaxDeliveryAttemptsExceeded", "deliveryAttempts": 3,
//!  "lastDeliveryOutcome": "500", "lastHttpStatusCode": 500,
//!  "publishTime": "2027-01-15T08:00:00.000Z",
//!  "lastDeliveryAttemptTime": "2027-01-15T08:00:40.000Z"}
//! ```
//!
//! `lastDeliveryOutcome` is the status code as text, `"timeout"`, `"connection error"` or
//! `"tls error"` (the handshake failed or the endpoint's certificate was refused);
//! `lastHttpStatusCode` is present only when the endpoint answered; `lastDeliveryError`
//! (the error chain of a timeout or connection error, shortened) only when there was one.
//! `publishTime` is when the event was published (its enqueue time) and
//! `lastDeliveryAttemptTime` when the last attempt started, both RFC 3339 on the broker's
//! clock. Every record keeps the last attempt's evidence whatever the reason: an event
//! given up at its expiry without a further attempt (it waited for the time to live after
//! its last failed attempt) carries the `last…` fields of that attempt. The abandon that
//! follows a failed attempt (for a retry, or to wait for the expiry) writes the attempt's
//! evidence on the message row, in the same store write
//! ([`SettleAction::Abandon`]'s `last_attempt`, a JSON object of at most
//! [`redrive_store::MAX_LAST_ATTEMPT_BYTES`]: the attempt's number, outcome, status code,
//! error and start), and the expiry reads it from the received message, so it survives a
//! restart and serves whichever node sharing the store gives the event up. It is used
//! only when it describes the last attempt (its number is the count of attempts made); an
//! event given up with no attempt at all, or whose stored evidence is of an earlier
//! attempt (a later one never settled: its node stopped and the lock ran out), has no
//! `last…` fields; its attempts are still counted in `deliveryAttempts`.
//!
//! Each push subscription drains in a task of its own (a slow endpoint holds up no other
//! subscription). Drains start when a publish stores events for a push subscription, when
//! a subscription's next retry comes due, and on the injected clock every `interval` while
//! push subscriptions exist. Events are sent one per request, at most the subscription's
//! `max_concurrency` requests at once and at most [`DEFAULT_ENDPOINT_CONCURRENCY`] to one
//! endpoint (`host:port`) from this node over all subscriptions. A drain is a pipeline:
//! more events are received while attempts are in flight (once half the requests are
//! free, or at once when a publish stores more), and finished attempts are settled while
//! the rest run, one settle call at a time, so that one store commit carries a receive, a
//! settlement and publishes. A structured subscription with `delivery.max_events_per_batch` > 1 batches:
//! the dispatcher receives up to `max_concurrency` × that many events, groups them with
//! [`redrive_push::chunk_by`] (by count and `preferred_batch_bytes`, order kept), POSTs each
//! chunk as one `application/cloudevents-batch+json` request, and settles every event of
//! the chunk by that one outcome — [`redrive_events::RetryPolicy::decide`] per event, with
//! its own delivery count and publish time (the request's `redrive-delivery-attempt` is the
//! highest count in the chunk). Several nodes may run dispatchers: locks keep one delivery
//! of an event in flight at a time.
//!
//! A stored event's body is its structured-mode JSON (the bytes the publisher sent, see
//! `topics`), and structured delivery sends those bytes as they are: a single event's body
//! is the stored body, a batch body is `[` + the stored bodies joined by `,` + `]`. Only
//! the `id` and `source` are read from it (the jitter's seed, the evidence); binary mode
//! parses the event to put its attributes in `ce-*` headers and its data in the body.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use redrive_core::{EntityName, Timestamp};
use redrive_events::{AttemptOutcome, CloudEvent, GiveUp, Verdict};
use redrive_push::{
    ConcurrencyLimits, Deliverer, DeliveryMode, EncodedEvent, PushTarget, chunk_by,
};
use redrive_store::{
    DeadLetterDestination, Delivery, MAX_LAST_ATTEMPT_BYTES, PushMode, SettleAction, Settlement,
    SubscriptionKind, SubscriptionRecord,
};
use tokio_util::sync::CancellationToken;

use crate::{Broker, BrokerResult, MAX_RECEIVE_BATCH, ReceiveOptions};

/// Requests in flight to one endpoint (`host:port`) from this node, over every
/// subscription pointing at it.
pub const DEFAULT_ENDPOINT_CONCURRENCY: usize = 256;

/// The push delivery worker. Cheap to clone (shared handles).
#[derive(Clone)]
pub struct Dispatcher {
    broker: Broker,
    deliverer: Deliverer,
    interval: Duration,
    limits: Arc<ConcurrencyLimits>,
    /// Fires at shutdown: drains stop receiving and finish what they hold.
    stopping: CancellationToken,
}

/// The evidence of an event's last failed attempt, for a dead-letter record written
/// later without another attempt (the event waited for its time to live). Stored on the
/// message row by the abandon that followed the attempt ([`LastAttempt::to_stored`]).
#[derive(Debug, Clone, PartialEq)]
struct LastAttempt {
    /// Which attempt (the delivery count of the receive that made it).
    attempt: u32,
    /// What it ended with.
    outcome: AttemptOutcome,
    /// The error chain of a timeout or connection error.
    error: Option<String>,
    /// When it started.
    started: Timestamp,
}

impl LastAttempt {
    /// The evidence as the message row keeps it: a JSON object of at most
    /// [`MAX_LAST_ATTEMPT_BYTES`], the error chain shortened to fit (and left out if even
    /// a few characters of it do not).
    fn to_stored(&self) -> String {
        let mut error: Option<String> = self
            .error
            .as_ref()
            .map(|e| e.chars().take(MAX_ERROR_CHARS).collect());
        loop {
            let mut o = serde_json::Map::new();
            o.insert("attempt".into(), self.attempt.into());
            let outcome = match self.outcome {
                AttemptOutcome::Status { status, .. } => {
                    o.insert("status".into(), status.into());
                    status.to_string()
                }
                AttemptOutcome::Timeout => "timeout".to_owned(),
                AttemptOutcome::ConnectionError => "connection error".to_owned(),
                AttemptOutcome::TlsError => "tls error".to_owned(),
            };
            o.insert("outcome".into(), outcome.into());
            if let Some(e) = &error {
                o.insert("error".into(), e.as_str().into());
            }
            o.insert("started".into(), self.started.0.into());
            let text = serde_json::Value::Object(o).to_string();
            if text.len() <= MAX_LAST_ATTEMPT_BYTES {
                return text;
            }
            // Escapes make the text longer than the characters: halve until it fits.
            error = error.and_then(|e| {
                let keep = e.chars().count() / 2;
                (keep > 0).then(|| e.chars().take(keep).collect())
            });
        }
    }

    /// The evidence a message row keeps, if it reads as [`to_stored`](Self::to_stored)
    /// wrote it (anything else is no evidence).
    fn from_stored(text: &str) -> Option<LastAttempt> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        let attempt = u32::try_from(v.get("attempt")?.as_u64()?).ok()?;
        let outcome = match (v.get("status"), v.get("outcome")?.as_str()?) {
            (Some(status), _) => AttemptOutcome::Status {
                status: u16::try_from(status.as_u64()?).ok()?,
                retry_after_ms: None,
            },
            (None, "timeout") => AttemptOutcome::Timeout,
            (None, "connection error") => AttemptOutcome::ConnectionError,
            (None, "tls error") => AttemptOutcome::TlsError,
            (None, _) => return None,
        };
        let error = match v.get("error") {
            Some(e) => Some(e.as_str()?.to_owned()),
            None => None,
        };
        Some(LastAttempt {
            attempt,
            outcome,
            error,
            started: Timestamp(v.get("started")?.as_i64()?),
        })
    }
}

/// Why the dispatcher loop woke.
enum Wake {
    /// New events or a new/resumed subscription; or the clock (a retry or tick is due).
    Look,
    /// One subscription's drain ended: when its queue next has something due.
    Drained(EntityName, BrokerResult<Option<Timestamp>>),
}

impl Broker {
    /// A count of the changes of what push subscriptions' stats show, made on this node:
    /// one more after every push receive (events locked for their attempts), every attempt
    /// outcome counted, and every settlement of attempts written (with its dead-letter
    /// forwards). Waiting on `changed()` waits for the next, so a caller that reads the
    /// stats after subscribing and waits when they are not as expected misses none of the
    /// dispatcher's changes (the sweeper's are its passes: [`Broker::passes`]).
    pub fn push_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.topics.push.changes()
    }
}

impl Dispatcher {
    /// A dispatcher over `broker`, looking for due retries every `interval` of its clock.
    pub fn new(broker: Broker, interval: Duration) -> Result<Self, reqwest::Error> {
        let deliverer = Deliverer::new(broker.delivery_settings(), broker.clock().clone())?;
        Ok(Dispatcher {
            broker,
            deliverer,
            interval,
            limits: Arc::new(ConcurrencyLimits::new(
                tokio::sync::Semaphore::MAX_PERMITS,
                DEFAULT_ENDPOINT_CONCURRENCY,
            )),
            stopping: CancellationToken::new(),
        })
    }

    /// At most `n` requests in flight to one endpoint from this node.
    pub fn with_endpoint_concurrency(mut self, n: usize) -> Self {
        self.limits = Arc::new(ConcurrencyLimits::new(
            tokio::sync::Semaphore::MAX_PERMITS,
            n,
        ));
        self
    }

    /// Dispatches until `cancel` fires. Each push subscription drains in a task of its
    /// own, so a slow or failing endpoint never holds up another subscription. A drain is
    /// started for every idle subscription when events arrive (or a subscription is
    /// created or resumed), when one of their retries comes due, and every `interval` on
    /// the clock (for nodes sharing a store: another node's publish is not notified
    /// here). A storage error is logged and retried at the next wake-up; it never ends
    /// the loop.
    pub async fn run(mut self, cancel: CancellationToken) {
        self.stopping = cancel.clone();
        let mut drains: tokio::task::JoinSet<(EntityName, BrokerResult<Option<Timestamp>>)> =
            tokio::task::JoinSet::new();
        // Subscriptions (by queue) draining now, and those that were asked to look again
        // while draining (their last receive may have missed what woke us).
        let mut running: HashSet<EntityName> = HashSet::new();
        let mut again: HashSet<EntityName> = HashSet::new();
        // When each idle subscription's queue next has something due.
        let mut due: HashMap<EntityName, Timestamp> = HashMap::new();
        let mut wake = Wake::Look;
        loop {
            let active;
            match wake {
                Wake::Look => match self.push_subscriptions().await {
                    Ok(subs) => {
                        active = subs.len();
                        due.retain(|q, _| subs.iter().any(|s| s.queue == *q));
                        again.extend(running.iter().cloned());
                        for sub in subs {
                            if running.insert(sub.queue.clone()) {
                                due.remove(&sub.queue);
                                let this = self.clone();
                                drains.spawn(async move { this.drain(sub).await });
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "push dispatch failed; retrying at the next tick");
                        active = 1;
                    }
                },
                Wake::Drained(queue, result) => {
                    running.remove(&queue);
                    active = 1;
                    match result {
                        Ok(Some(t)) => {
                            due.insert(queue.clone(), t);
                        }
                        Ok(None) => {}
                        Err(e) => {
                            tracing::warn!(queue = %queue, error = %e, "push dispatch of a subscription failed");
                        }
                    }
                    if again.remove(&queue) {
                        wake = Wake::Look;
                        continue;
                    }
                }
            }
            let work = &self.broker.inner.topics.push_work;
            let first_due = due.values().min().copied();
            // Nodes sharing a store also look on the clock when they have no push
            // subscription yet: another node may create one (its notification is local).
            let timer = if active > 0
                || !running.is_empty()
                || self.broker.inner.store.capabilities().multi_node
            {
                let tick = self.broker.now().plus(self.interval);
                Some(first_due.map_or(tick, |d| d.min(tick)))
            } else {
                // No push subscription: nothing can come due until one is created here.
                None
            };
            let sleep = async {
                match timer {
                    Some(t) => self.broker.inner.clock.sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            wake = tokio::select! {
                () = sleep => Wake::Look,
                () = work.notified() => Wake::Look,
                Some(done) = drains.join_next(), if !drains.is_empty() => match done {
                    Ok((queue, result)) => Wake::Drained(queue, result),
                    Err(e) => {
                        tracing::error!(error = %e, "a push drain task failed");
                        running.clear();
                        Wake::Look
                    }
                },
                () = cancel.cancelled() => {
                    // Drains stop receiving and settle the attempts they have in flight,
                    // so that nothing delivered is attempted again after a restart (the
                    // server bounds the wait by its shutdown timeout).
                    while drains.join_next().await.is_some() {}
                    return;
                }
            };
        }
    }

    /// Every push subscription that is not paused (one read of the store, whatever the
    /// number of topics).
    async fn push_subscriptions(&self) -> BrokerResult<Vec<SubscriptionRecord>> {
        let mut subs = self.broker.inner.store.list_all_subscriptions().await?;
        subs.retain(|sub| {
            !sub.spec.paused && matches!(sub.spec.kind, SubscriptionKind::Push { .. })
        });
        Ok(subs)
    }

    /// Drains one subscription, then says when its queue next has something due.
    async fn drain(
        &self,
        sub: SubscriptionRecord,
    ) -> (EntityName, BrokerResult<Option<Timestamp>>) {
        let queue = sub.queue.clone();
        // Asked as of before the receive: the clock may move during the drain, and what
        // came due meanwhile must not be missed (at worst one extra drain).
        let before = self.broker.now();
        if let Err(e) = self.dispatch(Arc::new(sub)).await {
            return (queue, Err(e));
        }
        let next = self.broker.inner.store.next_wake(&queue, before).await;
        (queue, next.map_err(Into::into))
    }

    /// Delivers what is due on one subscription's queue, until nothing is.
    ///
    /// A pipeline: attempts run while the next events are received and the finished ones
    /// are settled, so that one store commit carries a receive, a settlement and
    /// concurrent publishes (the commit's sync, not the work, is what each store call
    /// waits for). More events are received once half the requests are free; one settle
    /// call is in flight at a time, carrying whatever finished meanwhile.
    #[tracing::instrument(level = "debug", skip_all,
        fields(subscription = %format_args!("{}/{}", sub.topic, sub.name), queue = %sub.queue))]
    async fn dispatch(&self, sub: Arc<SubscriptionRecord>) -> BrokerResult<()> {
        let Some(pipe) = Pipeline::of(&sub) else {
            return Ok(());
        };
        let published = &self.broker.inner.topics.push_published;
        let mut set = tokio::task::JoinSet::new();
        let mut settling = tokio::task::JoinSet::new();
        let mut done: Vec<Settlement> = Vec::new();
        let mut more = true;
        let mut failure = None;
        loop {
            // Registered before the receive, so a publish during it is not missed.
            let news = published.notified();
            tokio::pin!(news);
            news.as_mut().enable();
            if self.stopping.is_cancelled() {
                more = false;
            }
            if more && set.len() * 2 <= pipe.concurrency {
                match self.receive_more(&sub, &pipe, &mut set, &mut done).await {
                    Ok(full) => more = full,
                    Err(e) => {
                        more = false;
                        failure = Some(e);
                    }
                }
            }
            if !done.is_empty() && settling.is_empty() {
                let (broker, sub) = (self.broker.clone(), sub.clone());
                let batch = std::mem::take(&mut done);
                settling.spawn(async move { settle(&broker, &sub, batch).await });
            }
            if set.is_empty() {
                if more && failure.is_none() {
                    continue;
                }
                break;
            }
            tokio::select! {
                r = set.join_next() => {
                    collect(r, &mut done);
                    while let Some(r) = set.try_join_next() {
                        collect(Some(r), &mut done);
                    }
                }
                Some(_) = settling.join_next(), if !settling.is_empty() => {}
                // Events were published while attempts run: look for more of this
                // subscription's at once rather than after the pass.
                () = &mut news, if !more && failure.is_none() => more = true,
            }
        }
        while settling.join_next().await.is_some() {}
        if !done.is_empty() {
            settle(&self.broker, &sub, done).await;
        }
        failure.map_or(Ok(()), Err)
    }

    /// Receives as many events as half the free requests take, settles at once those
    /// that cannot be attempted (expired, unreadable), and starts an attempt per batch.
    /// Answers whether the receive was full (more may be due).
    async fn receive_more(
        &self,
        sub: &Arc<SubscriptionRecord>,
        pipe: &Pipeline,
        set: &mut tokio::task::JoinSet<Vec<Settlement>>,
        done: &mut Vec<Settlement>,
    ) -> BrokerResult<bool> {
        let room = u32::try_from(pipe.concurrency - set.len())
            .unwrap_or(1)
            .saturating_mul(pipe.per_batch)
            .clamp(1, MAX_RECEIVE_BATCH);
        let options = ReceiveOptions {
            max: room,
            lock_ms: Some(pipe.lock_ms),
            wait_ms: 0,
            session: None,
            until_revoked: None,
        };
        let deliveries = self.broker.receive(sub.queue.as_str(), options).await;
        // Events locked for attempts are in flight now (or the receive failed): stats moved.
        self.broker.inner.topics.push.changed();
        let deliveries = deliveries?;
        let full = deliveries.len() == room as usize;
        let mut readable = Vec::with_capacity(deliveries.len());
        let now = self.broker.now();
        for d in deliveries {
            match read_event(&d, pipe.mode) {
                // Its time to live passed while it waited: not attempted.
                Ok(e) if sub.spec.retry_policy.expired(d.message.enqueued_at, now) => {
                    done.push(expired(&self.broker, sub, &d, &e));
                }
                Ok(e) => readable.push((d, e)),
                Err(s) => done.push(*s),
            }
        }
        // A stored body is the event's structured JSON, so its length is its size in a
        // batch body.
        let chunks = chunk_by(
            readable,
            pipe.per_batch as usize,
            pipe.batch_bytes,
            |(d, _)| d.message.body.len(),
        );
        for batch in chunks {
            while set.len() >= pipe.concurrency {
                join_one(set, done).await;
            }
            let (this, sub, target) = (self.clone_parts(), sub.clone(), pipe.target.clone());
            let (limits, key) = (self.limits.clone(), pipe.endpoint_key.clone());
            set.spawn(async move {
                // Bounded per endpoint across subscriptions; held until the request ends.
                let _permits = limits.acquire(sub.queue.as_str(), &key).await;
                this.attempt(&sub, &target, batch).await
            });
        }
        Ok(full)
    }

    fn clone_parts(&self) -> Attempter {
        Attempter {
            broker: self.broker.clone(),
            deliverer: self.deliverer.clone(),
        }
    }
}

/// How one push subscription's events are delivered: its target, batches and bounds.
struct Pipeline {
    target: Arc<PushTarget>,
    mode: PushMode,
    /// Events per request.
    per_batch: u32,
    /// The preferred bytes of a batch body.
    batch_bytes: usize,
    /// The lock of a received event: it outlasts the attempt's timeout, so a slow
    /// endpoint does not see the event again while the first attempt is still open.
    lock_ms: u64,
    /// Requests in flight at most.
    concurrency: usize,
    /// The endpoint's key for the per-endpoint limits.
    endpoint_key: String,
}

impl Pipeline {
    /// The pipeline of a push subscription (`None` for a pull subscription).
    fn of(sub: &SubscriptionRecord) -> Option<Pipeline> {
        let SubscriptionKind::Push { endpoint, mode, .. } = &sub.spec.kind else {
            return None;
        };
        let timeout = Duration::from_millis(sub.spec.delivery.timeout_ms);
        // Batches are arrays of structured events; validation refuses binary batching, and
        // a binary subscription that somehow has it still gets one event per request.
        let per_batch = match mode {
            PushMode::Structured => sub.spec.delivery.max_events_per_batch.max(1),
            PushMode::Binary => 1,
        };
        let mut target = PushTarget::new(
            endpoint.clone(),
            format!("{}/{}", sub.topic, sub.name),
            match mode {
                PushMode::Structured => DeliveryMode::Structured,
                PushMode::Binary => DeliveryMode::Binary,
            },
            timeout,
        );
        target.max_events_per_batch = per_batch as usize;
        Some(Pipeline {
            target: Arc::new(target),
            mode: *mode,
            per_batch,
            batch_bytes: sub.spec.delivery.preferred_batch_bytes as usize,
            lock_ms: (sub.spec.delivery.timeout_ms + 10_000).clamp(60_000, 300_000),
            concurrency: sub.spec.delivery.max_concurrency.clamp(1, 1_000) as usize,
            endpoint_key: redrive_push::endpoint_key(endpoint)
                .unwrap_or_else(|_| endpoint.to_string()),
        })
    }
}

/// What one attempt needs, owned so that attempts run concurrently.
struct Attempter {
    broker: Broker,
    deliverer: Deliverer,
}

fn seed(id: &str) -> u64 {
    // FNV-1a: a stable per-event seed for the jitter.
    id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The longest error chain kept in the evidence; the broker refuses descriptions over
/// 4096 bytes, and the rest of the object is far below the remainder.
const MAX_ERROR_CHARS: usize = 1024;

/// Event Grid's dead-letter diagnostics as the JSON object that is the record's
/// description (see the module docs). `last` is the last attempt's (its outcome, error
/// and start), absent only when there is none to report (the event was given up without
/// any attempt, or the message row's evidence is not of its last attempt); then the
/// `last…` fields are left out.
fn evidence(
    reason: &str,
    attempts: u32,
    last: Option<&LastAttempt>,
    published_at: Timestamp,
) -> String {
    let mut o = serde_json::Map::new();
    o.insert("deadLetterReason".into(), reason.into());
    o.insert("deliveryAttempts".into(), attempts.into());
    if let Some(last) = last {
        let outcome = match last.outcome {
            AttemptOutcome::Status { status, .. } => {
                o.insert("lastHttpStatusCode".into(), status.into());
                status.to_string()
            }
            AttemptOutcome::Timeout => "timeout".to_owned(),
            AttemptOutcome::ConnectionError => "connection error".to_owned(),
            AttemptOutcome::TlsError => "tls error".to_owned(),
        };
        o.insert("lastDeliveryOutcome".into(), outcome.into());
        if let Some(e) = &last.error {
            let short: String = e.chars().take(MAX_ERROR_CHARS).collect();
            o.insert("lastDeliveryError".into(), short.into());
        }
    }
    o.insert("publishTime".into(), published_at.to_rfc3339().into());
    if let Some(last) = last {
        o.insert(
            "lastDeliveryAttemptTime".into(),
            last.started.to_rfc3339().into(),
        );
    }
    serde_json::Value::Object(o).to_string()
}

/// How an event the retry policy gave up is settled: dead-lettered by the broker (the
/// record says `routed_by: broker`) with `description` as its evidence, or, for a
/// subscription that accepted dropping, completed with a warning and a count.
fn give_up(
    broker: &Broker,
    sub: &SubscriptionRecord,
    id: &str,
    why: GiveUp,
    last: &str,
    description: String,
) -> SettleAction {
    match &sub.spec.dead_letter {
        DeadLetterDestination::Drop { .. } => {
            tracing::warn!(
                topic = %sub.topic, subscription = %sub.name, %id,
                reason = why.reason(), %last,
                "event dropped: undeliverable and the subscription accepts dropping"
            );
            broker
                .inner
                .topics
                .dropped(sub.topic.as_str(), sub.name.as_str());
            SettleAction::Complete
        }
        _ => {
            broker.inner.topics.push.dead_lettered(
                sub.topic.as_str(),
                sub.name.as_str(),
                why.reason(),
            );
            SettleAction::DeadLetter {
                reason: why.reason().to_owned(),
                description: Some(description),
                by_broker: true,
                classifier: redrive_core::Classifier::default(),
            }
        }
    }
}

/// The settlement of an event whose time to live has passed by `now`, before another
/// attempt: dead-lettered `TimeToLiveExceeded` (or dropped), without an attempt, with the
/// evidence of its last attempt that the message row keeps (written by the abandon after
/// that attempt, by this node or another, before or after a restart) when it is of that
/// last attempt.
fn expired(broker: &Broker, sub: &SubscriptionRecord, d: &Delivery, event: &Event) -> Settlement {
    let m = &d.message;
    // The receive that found it expired counted a delivery that is not an attempt.
    let attempts = m.delivery_count.saturating_sub(1);
    let previous = m
        .last_attempt
        .as_deref()
        .and_then(LastAttempt::from_stored)
        .filter(|a| a.attempt == attempts);
    let why = GiveUp::TimeToLiveExceeded;
    let last = format!("time to live passed after {attempts} attempts");
    Settlement {
        lock_token: d.lock_token.clone(),
        action: give_up(
            broker,
            sub,
            &event.id,
            why,
            &last,
            evidence(why.reason(), attempts, previous.as_ref(), m.enqueued_at),
        ),
    }
}

/// Waits for one attempt task and collects its settlements; false when none was left.
async fn join_one(
    set: &mut tokio::task::JoinSet<Vec<Settlement>>,
    settlements: &mut Vec<Settlement>,
) -> bool {
    collect(set.join_next().await, settlements)
}

/// Collects the settlements of a finished attempt task; false when there was none.
fn collect(
    joined: Option<Result<Vec<Settlement>, tokio::task::JoinError>>,
    settlements: &mut Vec<Settlement>,
) -> bool {
    match joined {
        Some(Ok(s)) => {
            settlements.extend(s);
            true
        }
        Some(Err(e)) => {
            tracing::error!(error = %e, "a push attempt task failed");
            true
        }
        None => false,
    }
}

/// Settles finished attempts in one store call; failures are logged (an event whose
/// settlement failed stays locked and is attempted again when its lock runs out). Events
/// dead-lettered for a subscription whose destination is a topic are then forwarded.
async fn settle(broker: &Broker, sub: &SubscriptionRecord, settlements: Vec<Settlement>) {
    let queue = sub.queue.as_str();
    match broker
        .settle_items(queue, settlements, crate::LockBounds::Native)
        .await
    {
        Ok(out) => {
            let mut dead_lettered = Vec::new();
            for r in out.results {
                match r {
                    Ok(s) => dead_lettered.extend(s.dead_letter_id),
                    Err(e) => tracing::warn!(%queue, error = %e, "push settlement failed"),
                }
            }
            if let DeadLetterDestination::Topic { name } = &sub.spec.dead_letter {
                broker.forward_dead_letters(sub, name, &dead_lettered).await;
            }
        }
        Err(e) => tracing::warn!(%queue, error = %e, "push settlement failed"),
    }
    // What is pending, in backoff, in flight and dead-lettered is written now.
    broker.inner.topics.push.changed();
}

/// What the dispatcher reads of a stored event. The stored body is the event's
/// structured-mode JSON and is sent as it is; only binary mode needs the event parsed.
struct Event {
    /// `id`.
    id: String,
    /// `source` (with the id, the seed of the retry jitter).
    source: String,
    /// The parsed event, for binary mode (headers from its attributes, data as the body).
    parsed: Option<CloudEvent>,
}

/// The stored event of a delivery, or the dead-letter settlement of an unreadable one.
fn read_event(d: &Delivery, mode: PushMode) -> Result<Event, Box<Settlement>> {
    let m = &d.message;
    let event = match mode {
        PushMode::Structured => CloudEvent::id_and_source(&m.body)
            .map_err(|e| e.to_string())
            .map(|(id, source)| Event {
                id,
                source,
                parsed: None,
            }),
        PushMode::Binary => serde_json::from_slice(&m.body)
            .map_err(|e| e.to_string())
            .and_then(|v| CloudEvent::from_json(v).map_err(|e| e.to_string()))
            .map(|e| Event {
                id: e.id.clone(),
                source: e.source.clone(),
                parsed: Some(e),
            }),
    };
    event.map_err(|why| {
        tracing::error!(queue = %m.queue, sequence = m.sequence, %why, "stored event unreadable");
        Box::new(Settlement {
            lock_token: d.lock_token.clone(),
            action: SettleAction::DeadLetter {
                reason: "InvalidEvent".to_owned(),
                description: Some(why),
                by_broker: true,
                classifier: redrive_core::Classifier::default(),
            },
        })
    })
}

impl Attempter {
    /// One request carrying `batch` (one event, or a chunk for a batching target), and a
    /// settlement per event by that one outcome.
    #[tracing::instrument(level = "debug", skip_all, fields(
        subscription = %format_args!("{}/{}", sub.topic, sub.name),
        message_ids = %batch.iter().map(|(d, _)| d.message.message_id.as_str()).collect::<Vec<_>>().join(","),
    ))]
    async fn attempt(
        &self,
        sub: &SubscriptionRecord,
        target: &PushTarget,
        batch: Vec<(Delivery, Event)>,
    ) -> Vec<Settlement> {
        let attempt = batch
            .iter()
            .map(|(d, _)| d.message.delivery_count.max(1))
            .max()
            .unwrap_or(1);
        let (mut deliveries, mut events): (Vec<Delivery>, Vec<Event>) = batch.into_iter().unzip();
        let started = self.broker.now();
        let result = match target.mode {
            DeliveryMode::Binary => {
                let parsed: Vec<CloudEvent> =
                    events.iter_mut().filter_map(|e| e.parsed.take()).collect();
                self.deliverer
                    .deliver_detailed(target, &parsed, attempt)
                    .await
            }
            // The stored bytes go out as they are; settlement needs none of them.
            DeliveryMode::Structured => {
                let encoded = deliveries
                    .iter_mut()
                    .zip(&events)
                    .map(|(d, e)| EncodedEvent {
                        id: e.id.clone(),
                        json: std::mem::take(&mut d.message.body),
                    })
                    .collect();
                self.deliverer
                    .deliver_encoded(target, encoded, attempt)
                    .await
            }
        };
        let now = self.broker.now();
        let stats = &self.broker.inner.topics.push;
        let (topic, name) = (sub.topic.as_str(), sub.name.as_str());
        match crate::push_stats::failure_class(&result.outcome) {
            Some(class) => {
                stats.failed(topic, name, class, deliveries.len() as u64);
                (self.broker.inner.series).record(
                    sub.queue.as_str(),
                    crate::SeriesEvent::PushFailed,
                    deliveries.len() as u64,
                    now,
                );
            }
            None => {
                let latencies: Vec<f64> = deliveries
                    .iter()
                    .map(|d| now.0.saturating_sub(d.message.enqueued_at.0).max(0) as f64 / 1000.0)
                    .collect();
                stats.delivered(topic, name, &latencies);
                (self.broker.inner.series).record(
                    sub.queue.as_str(),
                    crate::SeriesEvent::PushDelivered,
                    deliveries.len() as u64,
                    now,
                );
            }
        }
        deliveries
            .into_iter()
            .zip(&events)
            .map(|(d, event)| self.settle_one(sub, d, event, &result, started, now))
            .collect()
    }

    /// How one event of an attempt is settled, by the attempt's result.
    fn settle_one(
        &self,
        sub: &SubscriptionRecord,
        d: Delivery,
        event: &Event,
        result: &redrive_push::Delivery,
        started: Timestamp,
        now: Timestamp,
    ) -> Settlement {
        let m = &d.message;
        let lock_token = d.lock_token.clone();
        let attempt = m.delivery_count.max(1);
        let verdict = sub.spec.retry_policy.decide(
            &result.outcome,
            attempt,
            m.enqueued_at,
            now,
            seed(&format!("{}\n{}", event.source, event.id)),
        );
        let last = match &result.error {
            Some(e) => format!("attempt {attempt}: {:?} ({e})", result.outcome),
            None => format!("attempt {attempt}: {:?}", result.outcome),
        };
        let this = LastAttempt {
            attempt,
            outcome: result.outcome.clone(),
            error: result.error.clone(),
            started,
        };
        let action = match verdict {
            Verdict::Delivered => {
                tracing::debug!(queue = %m.queue, id = %event.id, attempt, "event delivered");
                SettleAction::Complete
            }
            Verdict::RetryAt(t) => {
                let delay_ms = u64::try_from(t.0.saturating_sub(now.0)).unwrap_or(0);
                tracing::debug!(queue = %m.queue, id = %event.id, attempt, delay_ms, %last, "push attempt failed; retrying");
                // Stored with the abandon: a record written without another attempt (the
                // time to live passed first), on any node, keeps this attempt's evidence.
                SettleAction::Abandon {
                    delay_ms: Some(delay_ms),
                    last_attempt: Some(this.to_stored()),
                }
            }
            Verdict::ExpireAt(t) => {
                let delay_ms = u64::try_from(t.0.saturating_sub(now.0)).unwrap_or(0);
                tracing::debug!(queue = %m.queue, id = %event.id, attempt, delay_ms, %last, "push attempt failed; no retry fits before the time to live, waiting for it");
                SettleAction::Abandon {
                    delay_ms: Some(delay_ms),
                    last_attempt: Some(this.to_stored()),
                }
            }
            Verdict::DeadLetter(why) => give_up(
                &self.broker,
                sub,
                &event.id,
                why,
                &last,
                evidence(why.reason(), attempt, Some(&this), m.enqueued_at),
            ),
        };
        Settlement { lock_token, action }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(attempt: u32, status: u16, at: i64) -> LastAttempt {
        LastAttempt {
            attempt,
            outcome: AttemptOutcome::Status {
                status,
                retry_after_ms: None,
            },
            error: None,
            started: Timestamp(at),
        }
    }

    #[test]
    fn stored_evidence_reads_back_as_it_was_written() {
        for last in [
            failed(3, 500, 40_000),
            LastAttempt {
                attempt: 2,
                outcome: AttemptOutcome::Timeout,
                error: Some("operation timed out".to_owned()),
                started: Timestamp(1_700_000_000_000),
            },
            LastAttempt {
                attempt: 1,
                outcome: AttemptOutcome::ConnectionError,
                error: None,
                started: Timestamp(0),
            },
        ] {
            let stored = last.to_stored();
            assert_eq!(LastAttempt::from_stored(&stored), Some(last), "{stored}");
        }
        // `Retry-After` is not evidence: it is not kept.
        let with_retry_after = LastAttempt {
            outcome: AttemptOutcome::Status {
                status: 503,
                retry_after_ms: Some(5_000),
            },
            ..failed(1, 503, 0)
        };
        assert_eq!(
            LastAttempt::from_stored(&with_retry_after.to_stored()),
            Some(failed(1, 503, 0))
        );
        for other in [
            "",
            "null",
            "{}",
            r#"{"attempt":1,"outcome":"odd","started":0}"#,
        ] {
            assert_eq!(LastAttempt::from_stored(other), None, "{other}");
        }
    }

    #[test]
    fn stored_evidence_is_bounded_by_shortening_the_error() {
        // Control characters are escaped six times longer than they are.
        for error in [
            "x".repeat(10_000),
            "\u{1}".repeat(10_000),
            "é".repeat(10_000),
        ] {
            let last = LastAttempt {
                attempt: 7,
                outcome: AttemptOutcome::ConnectionError,
                error: Some(error.clone()),
                started: Timestamp(1_700_000_000_000),
            };
            let stored = last.to_stored();
            assert!(stored.len() <= MAX_LAST_ATTEMPT_BYTES, "{}", stored.len());
            let back = LastAttempt::from_stored(&stored).expect("readable");
            assert_eq!(
                (back.attempt, back.outcome),
                (7, AttemptOutcome::ConnectionError)
            );
            let kept = back.error.expect("a shortened error is kept");
            assert!(!kept.is_empty() && error.starts_with(&kept));
        }
    }

    #[test]
    fn the_evidence_of_an_expiry_after_attempts_names_the_last_one() {
        let last = failed(3, 500, 40_000);
        let v: serde_json::Value = serde_json::from_str(&evidence(
            "TimeToLiveExceeded",
            3,
            Some(&last),
            Timestamp(0),
        ))
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "deadLetterReason": "TimeToLiveExceeded",
                "deliveryAttempts": 3,
                "lastDeliveryOutcome": "500",
                "lastHttpStatusCode": 500,
                "publishTime": Timestamp(0).to_rfc3339(),
                "lastDeliveryAttemptTime": Timestamp(40_000).to_rfc3339(),
            })
        );
        let none: serde_json::Value =
            serde_json::from_str(&evidence("TimeToLiveExceeded", 0, None, Timestamp(0))).unwrap();
        assert!(none.get("lastDeliveryOutcome").is_none(), "{none}");
    }
}
