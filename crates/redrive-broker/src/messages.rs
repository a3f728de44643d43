//! Messages: send, receive with long polling, receive of deferred messages, peek, cancel
//! of scheduled messages, and settlement.

use std::pin::pin;

use redrive_core::id::{IdError, LockToken, Named};
use redrive_core::{EntityName, Properties, PropertyValue, QueuePolicy, Timestamp, policy};
use redrive_store::{
    Delivery, Enqueued, QueueRecord, ReceiveParams, SessionRef, SettleAction, SettleOutcome,
    Settled, Settlement, StoreError, StoredMessage,
};

use tokio_util::sync::CancellationToken;

use crate::metrics::Counter;
use crate::{Actor, Broker, BrokerError, BrokerResult};

/// Longest long poll, in milliseconds (as SQS and the issue: 20 s).
pub const MAX_WAIT_MS: u64 = 20_000;
/// Most messages per receive.
pub const MAX_RECEIVE_BATCH: u32 = 1_000;
/// Most messages per send batch.
pub const MAX_SEND_BATCH: usize = 10_000;
/// Longest message id, correlation id, session id, type or intent, in bytes (Service
/// Bus's limit for message and session ids).
pub const MAX_ID_LEN: usize = 128;
/// Longest content type, in bytes.
pub const MAX_CONTENT_TYPE_LEN: usize = 256;
/// Most application properties on one message.
pub const MAX_PROPERTIES: usize = 256;
/// Longest property name, in bytes.
pub const MAX_PROPERTY_NAME_LEN: usize = 256;
/// Largest property (name and value), in bytes: Service Bus's per-property limit.
pub const MAX_PROPERTY_SIZE: usize = 32 * 1024;
/// Largest header section (the string headers and every application property), in
/// bytes: Service Bus's limit on a message's header.
pub const MAX_HEADER_SIZE: usize = 64 * 1024;
/// Properties whose names start with this are the broker's own (the SQS endpoint's
/// encoding of message attributes and system attributes). The SQS endpoint counts the
/// attributes as SQS does, so their encoding is not held to the per-property and header
/// limits; it has a bound of its own, [`reserved_allowance`].
pub const RESERVED_PROPERTY_PREFIX: &str = "redrive.";

/// A message to send, as an interface hands it to the broker.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outgoing {
    /// Client-chosen id; generated when absent.
    pub message_id: Option<String>,
    /// Body bytes.
    pub body: Vec<u8>,
    /// MIME type.
    pub content_type: Option<String>,
    /// Application properties.
    pub properties: Properties,
    /// Correlation id.
    pub correlation_id: Option<String>,
    /// Session id.
    pub session_id: Option<String>,
    /// Message type.
    pub message_type: Option<String>,
    /// Intent.
    pub intent: Option<String>,
    /// Valid-until.
    pub valid_until: Option<Timestamp>,
    /// Scheduled enqueue time.
    pub scheduled_at: Option<Timestamp>,
    /// Time to live; the queue's default when absent.
    pub ttl_ms: Option<u64>,
}

/// A receive request.
#[derive(Debug, Clone, Default)]
pub struct ReceiveOptions {
    /// At most this many (1 to [`MAX_RECEIVE_BATCH`]).
    pub max: u32,
    /// Lock duration; the queue's when absent.
    pub lock_ms: Option<u64>,
    /// Long-poll wait (at most [`MAX_WAIT_MS`]); 0 answers at once.
    pub wait_ms: u64,
    /// The session held, on session queues.
    pub session: Option<HeldSession>,
    /// Fires when the caller's authority ends (its token revoked: see
    /// [`Broker::revocation_guard`]); a long poll then ends with `TokenRevoked`.
    pub until_revoked: Option<CancellationToken>,
}

/// The session a receive on a session queue holds: its id and the lock token its
/// acceptance answered, as the request gave it. A string that cannot be a lock token holds
/// no session: the receive answers as for a token nobody holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldSession {
    /// The session id.
    pub session_id: String,
    /// The session's lock token.
    pub lock_token: Named<LockToken>,
}

/// What to do with a delivery, as an interface asks it (with the delivery's lock token).
/// Every interface settles through [`Broker::settle`] with these, so the defaults and
/// bounds of a settlement are the broker's alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// Done: the message is removed.
    Complete,
    /// Released: visible again after `delay_ms`, or after the queue's backoff when absent.
    Abandon {
        /// Delay overriding the backoff (at most 7 days).
        delay_ms: Option<u64>,
    },
    /// Set aside: receivable by sequence number only.
    Defer,
    /// To the dead-letter store (or the queue's dead-letter queue).
    DeadLetter {
        /// Reason code (1 to 256 characters).
        reason: String,
        /// Description (at most 4096 characters).
        description: Option<String>,
        /// The consumer that applied the reason and the version of its rule (each
        /// optional, printable, at most 256 bytes): kept on the record and its case.
        classifier: redrive_core::Classifier,
    },
    /// The lock extended from now by `lock_ms`, or by the queue's lock duration when
    /// absent.
    Renew {
        /// New lock duration from now.
        lock_ms: Option<u64>,
    },
}

impl Settle {
    /// The store's action, with a renewal's duration filled in (a single settle's and a
    /// transaction's).
    pub(crate) fn action(self, default_lock_ms: u64) -> SettleAction {
        match self {
            Settle::Complete => SettleAction::Complete,
            Settle::Abandon { delay_ms } => SettleAction::Abandon {
                delay_ms,
                last_attempt: None,
            },
            Settle::Defer => SettleAction::Defer,
            Settle::DeadLetter {
                reason,
                description,
                classifier,
            } => SettleAction::DeadLetter {
                reason,
                description,
                by_broker: false,
                classifier,
            },
            Settle::Renew { lock_ms } => SettleAction::Renew {
                lock_ms: lock_ms.unwrap_or(default_lock_ms),
                cap_from_receive_ms: None,
            },
        }
    }
}

/// The reason codes the broker writes on the dead letters it routes itself (a queue's
/// delivery count or time to live, a push subscription's retry policy, an unreadable
/// stored event). An application's dead-letter settlement may not use them, so that a
/// filter by reason never mixes the broker's decisions with the application's.
pub const BROKER_REASONS: [&str; 6] = [
    "MaxDeliveryCountExceeded",
    "TTLExpired",
    "MaxDeliveryAttemptsExceeded",
    "TimeToLiveExceeded",
    "EndpointRejected",
    "InvalidEvent",
];

/// The bytes a reserved property encoding may take on a queue whose limit is `limit`:
/// twice the limit (a binary attribute in base64, a string with escapes) plus the header
/// limit.
pub fn reserved_allowance(limit: u32) -> usize {
    (limit as usize).saturating_mul(2) + MAX_HEADER_SIZE
}

/// Bytes of one property: its name and its value (8 for numbers, 1 for a boolean).
fn property_size(name: &str, value: &PropertyValue) -> usize {
    name.len()
        + match value {
            PropertyValue::String(s) => s.len(),
            PropertyValue::Int(_) | PropertyValue::Float(_) => 8,
            PropertyValue::Bool(_) => 1,
        }
}

/// Checks every string field of a message against its bound and the whole message (body,
/// string headers, properties) against the queue's `limit`; returns the counted size.
pub(crate) fn check_message(queue: &EntityName, m: &Outgoing, limit: u32) -> BrokerResult<usize> {
    check_id("message_id", &m.message_id)?;
    check_id("correlation_id", &m.correlation_id)?;
    check_id("session_id", &m.session_id)?;
    check_id("type", &m.message_type)?;
    check_id("intent", &m.intent)?;
    if let Some(ct) = &m.content_type
        && ct.len() > MAX_CONTENT_TYPE_LEN
    {
        return Err(BrokerError::invalid(
            "content_type",
            format!("must be at most {MAX_CONTENT_TYPE_LEN} bytes"),
        ));
    }
    if m.properties.len() > MAX_PROPERTIES {
        return Err(BrokerError::invalid(
            "properties",
            format!("a message carries at most {MAX_PROPERTIES} properties"),
        ));
    }
    let mut header = [
        &m.message_id,
        &m.content_type,
        &m.correlation_id,
        &m.session_id,
        &m.message_type,
        &m.intent,
    ]
    .iter()
    .map(|v| v.as_ref().map_or(0, String::len))
    .sum::<usize>();
    let mut reserved = 0usize;
    for (name, value) in &m.properties {
        if name.is_empty() || name.len() > MAX_PROPERTY_NAME_LEN {
            return Err(BrokerError::invalid(
                "properties",
                format!("a property name must be 1 to {MAX_PROPERTY_NAME_LEN} bytes"),
            ));
        }
        let size = property_size(name, value);
        if name.starts_with(RESERVED_PROPERTY_PREFIX) {
            reserved += size;
            continue;
        }
        if size > MAX_PROPERTY_SIZE {
            return Err(BrokerError::invalid(
                "properties",
                format!(
                    "property {name:?} is {size} bytes; a property (name and value) is at \
                     most {MAX_PROPERTY_SIZE}"
                ),
            ));
        }
        header += size;
    }
    if header > MAX_HEADER_SIZE {
        return Err(BrokerError::invalid(
            "properties",
            format!(
                "headers and properties take {header} bytes; a message's are at most \
                 {MAX_HEADER_SIZE}"
            ),
        ));
    }
    let size = m.body.len() + header;
    if size > limit as usize || reserved > reserved_allowance(limit) {
        return Err(BrokerError::MessageTooLarge {
            queue: queue.to_string(),
            size: size + reserved,
            limit,
        });
    }
    Ok(size)
}

fn check_batch_len(messages: &[Outgoing]) -> BrokerResult<()> {
    if messages.len() > MAX_SEND_BATCH {
        return Err(BrokerError::invalid(
            "messages",
            format!("a batch holds at most {MAX_SEND_BATCH} messages"),
        ));
    }
    Ok(())
}

fn check_id(field: &str, v: &Option<String>) -> BrokerResult<()> {
    if let Some(s) = v
        && (s.is_empty() || s.len() > MAX_ID_LEN)
    {
        return Err(BrokerError::invalid(
            field,
            format!("must be 1 to {MAX_ID_LEN} characters"),
        ));
    }
    Ok(())
}

/// Longest lock an SQS receiver may take: the SQS visibility timeout limit (12 hours).
pub const MAX_SQS_LOCK_MS: u64 = 43_200_000;

/// Which range of lock durations an interface may ask for. The native API keeps its
/// Service Bus range; the SQS endpoint passes visibility timeouts, which SQS allows from
/// 0 (visible again at once) to 12 hours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LockBounds {
    /// 1 s to 5 min ([`policy::MIN_LOCK_MS`] to [`policy::MAX_LOCK_MS`]).
    #[default]
    Native,
    /// 0 to 12 h ([`MAX_SQS_LOCK_MS`]).
    Sqs,
}

impl LockBounds {
    /// Checks a lock duration against these bounds.
    pub fn check(self, lock_ms: u64) -> BrokerResult<u64> {
        match self {
            LockBounds::Native => check_lock_ms(lock_ms),
            LockBounds::Sqs if lock_ms > MAX_SQS_LOCK_MS => Err(BrokerError::invalid(
                "lock_duration_ms",
                "must be between 0 and 43200000 (12 hours)",
            )),
            LockBounds::Sqs => Ok(lock_ms),
        }
    }
}

pub(crate) fn check_lock_ms(lock_ms: u64) -> BrokerResult<u64> {
    if !(policy::MIN_LOCK_MS..=policy::MAX_LOCK_MS).contains(&lock_ms) {
        return Err(BrokerError::invalid(
            "lock_duration_ms",
            "must be between 1000 and 300000 (5 minutes)",
        ));
    }
    Ok(lock_ms)
}

impl Broker {
    /// The lock duration a receive asked for (checked), else the queue's.
    pub(crate) async fn lock_ms_for(
        &self,
        name: &EntityName,
        asked: Option<u64>,
    ) -> BrokerResult<u64> {
        self.lock_ms_within(name, asked, LockBounds::Native).await
    }

    /// The lock duration a receive asked for (checked against `bounds`), else the queue's.
    async fn lock_ms_within(
        &self,
        name: &EntityName,
        asked: Option<u64>,
        bounds: LockBounds,
    ) -> BrokerResult<u64> {
        match asked {
            Some(l) => bounds.check(l),
            None => Ok(self
                .inner
                .store
                .get_queue(name)
                .await?
                .policy
                .lock_duration_ms),
        }
    }

    /// Sends one message or an atomic batch. Each result says whether the message was a
    /// duplicate inside the queue's detection window.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %queue,
        messages = messages.len(), message_id = crate::trace::single_message_id(&messages)))]
    pub async fn send(&self, queue: &str, messages: Vec<Outgoing>) -> BrokerResult<Vec<Enqueued>> {
        let name: EntityName = queue.parse()?;
        if messages.is_empty() {
            return Err(BrokerError::invalid(
                "messages",
                "a batch needs at least one message",
            ));
        }
        check_batch_len(&messages)?;
        let record = self.inner.store.get_queue(&name).await?;
        self.send_checked(name, &record, messages).await
    }

    /// Sends the messages an interface builds from the queue's policy: `build` gets the
    /// stored policy (the SQS endpoint reads its delay, deduplication and size attributes
    /// there) and returns the messages with whatever the interface keeps for its answer.
    /// One read of the queue serves `build` and the send's own checks. A `build` that
    /// returns no message sends nothing (each of a batch's entries was refused).
    #[tracing::instrument(level = "debug", skip_all, name = "send", fields(queue = %queue))]
    pub async fn send_built<T, E: From<BrokerError>>(
        &self,
        queue: &str,
        build: impl FnOnce(&QueuePolicy) -> Result<(Vec<Outgoing>, T), E>,
    ) -> Result<(Vec<Enqueued>, T), E> {
        let name: EntityName = queue.parse().map_err(BrokerError::from)?;
        let record = self
            .inner
            .store
            .get_queue(&name)
            .await
            .map_err(BrokerError::from)?;
        let (messages, kept) = build(&record.policy)?;
        if messages.is_empty() {
            return Ok((Vec::new(), kept));
        }
        check_batch_len(&messages)?;
        Ok((self.send_checked(name, &record, messages).await?, kept))
    }

    /// Checks every message against the queue's rules, fills ids and expiries, and stores
    /// the batch.
    async fn send_checked(
        &self,
        name: EntityName,
        record: &QueueRecord,
        messages: Vec<Outgoing>,
    ) -> BrokerResult<Vec<Enqueued>> {
        let policy = &record.policy;
        let now = self.now();
        let mut batch = Vec::with_capacity(messages.len());
        for m in messages {
            batch.push(crate::transactions::new_message(&name, policy, m, now)?);
        }
        let results = self.inner.store.enqueue(&name, batch, now).await?;
        let dups = results.iter().filter(|r| r.duplicate).count() as u64;
        self.inner
            .metrics
            .add(Counter::Sent, name.as_str(), results.len() as u64 - dups);
        (self.inner.series).record(
            name.as_str(),
            crate::SeriesEvent::Sent,
            results.len() as u64 - dups,
            now,
        );
        self.inner
            .metrics
            .add(Counter::Duplicates, name.as_str(), dups);
        for r in &results {
            tracing::debug!(queue = %name, message_id = %r.message_id, sequence = r.sequence,
                duplicate = r.duplicate, "message sent");
        }
        if dups < results.len() as u64 {
            self.inner.waiters.wake(name.as_str());
        }
        Ok(results)
    }

    /// Peek-lock receive, long-polling up to `wait_ms` for a first message. The wait is
    /// woken by sends, abandons and sweeps on the queue, and by the clock when a scheduled
    /// or backed-off message or an expiring lock comes due; it never re-queries in a loop.
    pub async fn receive(&self, queue: &str, opts: ReceiveOptions) -> BrokerResult<Vec<Delivery>> {
        self.receive_with(queue, opts, LockBounds::Native).await
    }

    /// [`Broker::receive`] with the lock duration checked against `bounds` (the SQS
    /// endpoint passes its visibility timeout, 0 to 12 hours).
    #[tracing::instrument(level = "debug", skip_all, name = "receive", fields(queue = %queue))]
    pub async fn receive_with(
        &self,
        queue: &str,
        opts: ReceiveOptions,
        bounds: LockBounds,
    ) -> BrokerResult<Vec<Delivery>> {
        let name: EntityName = queue.parse()?;
        if opts.max == 0 || opts.max > MAX_RECEIVE_BATCH {
            return Err(BrokerError::invalid(
                "max_messages",
                format!("must be between 1 and {MAX_RECEIVE_BATCH}"),
            ));
        }
        if opts.wait_ms > MAX_WAIT_MS {
            return Err(BrokerError::invalid("wait_ms", "must be at most 20000"));
        }
        let lock_ms = self.lock_ms_within(&name, opts.lock_ms, bounds).await?;
        let deadline = self
            .now()
            .plus_millis(i64::try_from(opts.wait_ms).unwrap_or(0));
        let session = opts.session.as_ref().map(|s| {
            s.lock_token.as_ref().map(|token| SessionRef {
                session_id: s.session_id.clone(),
                lock_token: token.as_str().to_owned(),
            })
        });
        let notify = self.inner.waiters.get(name.as_str());
        let revoked = opts.until_revoked.clone().unwrap_or_default();
        loop {
            if self.inner.shutdown.is_cancelled() {
                return Ok(Vec::new());
            }
            if revoked.is_cancelled() {
                return Err(BrokerError::TokenRevoked);
            }
            // Register for wake-ups before looking, so a send between the look and the
            // wait is not missed.
            let mut notified = pin!(notify.notified());
            notified.as_mut().enable();
            let now = self.now();
            let session = match &session {
                None => None,
                Some(Ok(s)) => Some(s.clone()),
                // A token no session can have: the store's answer for one it does not
                // hold, where the store would have given it.
                Some(Err(_)) => return Err(self.unheld_session(&name).await),
            };
            let outcome = self
                .inner
                .store
                .receive(ReceiveParams {
                    queue: name.clone(),
                    max: opts.max,
                    lock_ms,
                    now,
                    session,
                })
                .await?;
            self.apply_effects(&outcome.effects);
            if !outcome.deliveries.is_empty() {
                self.delivered(&name, &outcome.deliveries);
                return Ok(outcome.deliveries);
            }
            if now >= deadline {
                return Ok(Vec::new());
            }
            let wake = match self.inner.store.next_wake(&name, now).await? {
                Some(t) => t.min(deadline),
                None => deadline,
            };
            tokio::select! {
                () = &mut notified => {}
                () = self.inner.clock.sleep_until(wake) => {}
                () = self.inner.shutdown.cancelled() => return Ok(Vec::new()),
                () = revoked.cancelled() => return Err(BrokerError::TokenRevoked),
            }
        }
    }

    fn delivered(&self, name: &EntityName, deliveries: &[Delivery]) {
        self.inner
            .metrics
            .add(Counter::Received, name.as_str(), deliveries.len() as u64);
        (self.inner.series).record(
            name.as_str(),
            crate::SeriesEvent::Received,
            deliveries.len() as u64,
            self.now(),
        );
        for d in deliveries {
            tracing::debug!(queue = %name, message_id = %d.message.message_id,
                sequence = d.message.sequence, delivery_count = d.message.delivery_count,
                "message delivered");
        }
    }

    /// Receives deferred messages by sequence number.
    #[tracing::instrument(level = "debug", skip_all,
        fields(queue = %queue, sequences = sequences.len()))]
    pub async fn receive_deferred(
        &self,
        queue: &str,
        sequences: &[i64],
        lock_ms: Option<u64>,
    ) -> BrokerResult<Vec<Delivery>> {
        let name: EntityName = queue.parse()?;
        if sequences.is_empty() || sequences.len() > MAX_RECEIVE_BATCH as usize {
            return Err(BrokerError::invalid(
                "sequence_numbers",
                format!("give 1 to {MAX_RECEIVE_BATCH} sequence numbers"),
            ));
        }
        let lock_ms = self.lock_ms_for(&name, lock_ms).await?;
        let outcome = self
            .inner
            .store
            .receive_deferred(&name, sequences, lock_ms, self.now())
            .await?;
        self.apply_effects(&outcome.effects);
        self.delivered(&name, &outcome.deliveries);
        Ok(outcome.deliveries)
    }

    /// Browses messages from a sequence number without locking them: a payload read,
    /// audited before the payloads are returned.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %queue, from_sequence))]
    pub async fn peek(
        &self,
        queue: &str,
        from_sequence: i64,
        limit: u32,
        actor: &Actor,
    ) -> BrokerResult<Vec<StoredMessage>> {
        let result = async {
            let name: EntityName = queue.parse()?;
            if limit == 0 || limit > MAX_RECEIVE_BATCH {
                return Err(BrokerError::invalid(
                    "limit",
                    format!("must be between 1 and {MAX_RECEIVE_BATCH}"),
                ));
            }
            Ok(self
                .inner
                .store
                .peek(&name, from_sequence, limit, self.now())
                .await?)
        }
        .await;
        let targets = match &result {
            Ok(page) => page.iter().map(|m| m.message_id.clone()).collect(),
            Err(_) => vec![format!("from_sequence={from_sequence}")],
        };
        self.audited(actor, "message.peek", Some(queue), targets, result)
            .await
    }

    /// Removes every message of a queue, whatever its state: visible, scheduled, locked
    /// by a receiver, deferred (SQS `PurgeQueue`, which deletes messages in flight too).
    /// An administrative act, audited as `queue.purge` with `removed=<n>`: the holder of a
    /// purged message's lock loses it (its settlement answers lock lost). Dead-letter
    /// records stay. Returns how many messages were removed.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %queue))]
    pub async fn purge(&self, queue: &str, actor: &Actor) -> BrokerResult<u64> {
        let result = self.purge_unaudited(queue).await;
        let targets = match &result {
            Ok(n) => vec![format!("removed={n}")],
            Err(_) => Vec::new(),
        };
        self.audited(actor, "queue.purge", Some(queue), targets, result)
            .await
    }

    async fn purge_unaudited(&self, queue: &str) -> BrokerResult<u64> {
        let name: EntityName = queue.parse()?;
        let removed = self.inner.store.purge_messages(&name, self.now()).await?;
        tracing::info!(queue = %name, removed, "queue purged");
        Ok(removed)
    }

    /// Cancels a scheduled message.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %queue, sequence))]
    pub async fn cancel_scheduled(&self, queue: &str, sequence: i64) -> BrokerResult<()> {
        let name: EntityName = queue.parse()?;
        self.inner
            .store
            .cancel_scheduled(&name, sequence, self.now())
            .await?;
        tracing::info!(queue = %name, sequence, "scheduled message cancelled");
        Ok(())
    }

    /// Settles deliveries, each given by its lock token, each on its own: a lost lock
    /// fails only its item. Answers one result per item, in order. A renewal without a
    /// duration takes the queue's lock duration. A string that cannot be a lock token is
    /// a lost lock, as a token nobody holds is, after the checks of the whole batch.
    pub async fn settle(
        &self,
        queue: &str,
        items: Vec<(Named<LockToken>, Settle)>,
    ) -> BrokerResult<Vec<BrokerResult<Settled>>> {
        self.settle_with(queue, items, LockBounds::Native).await
    }

    /// [`Broker::settle`] with renewals checked against `bounds`. Under
    /// [`LockBounds::Sqs`] a renewal of 0 (SQS `ChangeMessageVisibility` to 0) releases the
    /// lock instead: the message is visible at once, its delivery count unchanged (the
    /// delivery was counted when it was received), and at the max delivery count it is
    /// dead-lettered as any released message; any other renewal is refused (that item
    /// only, nothing changed) when it would make the lock end more than
    /// [`MAX_SQS_LOCK_MS`] after the receive that took it, as SQS caps a received
    /// message's visibility at 12 hours from its `ReceiveMessage`.
    #[tracing::instrument(level = "debug", skip_all, name = "settle", fields(queue = %queue,
        settlements = items.len(), lock_token = crate::trace::single_token(&items)))]
    pub async fn settle_with(
        &self,
        queue: &str,
        items: Vec<(Named<LockToken>, Settle)>,
        bounds: LockBounds,
    ) -> BrokerResult<Vec<BrokerResult<Settled>>> {
        let needs_default = items
            .iter()
            .any(|(_, s)| *s == Settle::Renew { lock_ms: None });
        let default_lock_ms = if needs_default {
            let name: EntityName = queue.parse()?;
            self.lock_ms_within(&name, None, bounds).await?
        } else {
            0
        };
        let items = items
            .into_iter()
            .map(|(lock_token, s)| {
                (
                    lock_token.map(LockToken::into_string),
                    s.action(default_lock_ms),
                )
            })
            .collect();
        let outcome = self.settle_tokens(queue, items, bounds).await?;
        Ok(outcome
            .results
            .into_iter()
            .map(|r| r.map_err(BrokerError::from))
            .collect())
    }

    /// One settlement: [`Broker::settle_with`] with its item's refusal as the error.
    pub async fn settle_one(
        &self,
        queue: &str,
        lock_token: Named<LockToken>,
        action: Settle,
        bounds: LockBounds,
    ) -> BrokerResult<Settled> {
        let mut results = self
            .settle_with(queue, vec![(lock_token, action)], bounds)
            .await?;
        results.pop().unwrap_or_else(|| {
            Err(redrive_store::StoreError::backend(std::io::Error::other(
                "the store answered a settlement without its result",
            ))
            .into())
        })
    }

    /// Settles the store's settlements (the broker's own workers settle with these).
    pub(crate) async fn settle_items(
        &self,
        queue: &str,
        items: Vec<Settlement>,
        bounds: LockBounds,
    ) -> BrokerResult<SettleOutcome> {
        let items = items
            .into_iter()
            .map(|s| (Ok(s.lock_token), s.action))
            .collect();
        self.settle_tokens(queue, items, bounds).await
    }

    /// Settles each action under its lock token: the token as the store keeps it, or the
    /// refusal of a string that cannot be one. Such an item is answered `LockLost`, as the
    /// store answers a token it does not hold, after every check of the batch (the queue's
    /// included), and never reaches the store.
    async fn settle_tokens(
        &self,
        queue: &str,
        mut items: Vec<(Result<String, IdError>, SettleAction)>,
        bounds: LockBounds,
    ) -> BrokerResult<SettleOutcome> {
        let name: EntityName = queue.parse()?;
        if bounds == LockBounds::Sqs {
            for (_, action) in &mut items {
                match action {
                    SettleAction::Renew { lock_ms: 0, .. } => {
                        *action = SettleAction::Abandon {
                            delay_ms: Some(0),
                            last_attempt: None,
                        };
                    }
                    // SQS: a message's visibility can't exceed 12 hours from the time of
                    // the ReceiveMessage that took it.
                    SettleAction::Renew {
                        cap_from_receive_ms,
                        ..
                    } => *cap_from_receive_ms = Some(MAX_SQS_LOCK_MS),
                    _ => {}
                }
            }
        }
        if items.is_empty() || items.len() > MAX_SEND_BATCH {
            return Err(BrokerError::invalid(
                "settlements",
                format!("give 1 to {MAX_SEND_BATCH} settlements"),
            ));
        }
        for (_, action) in &items {
            crate::transactions::check_settlement(action, bounds)?;
        }
        let actions: Vec<Counter> = items
            .iter()
            .map(|(_, action)| match action {
                SettleAction::Complete => Counter::Completed,
                SettleAction::Abandon { .. } => Counter::Abandoned,
                SettleAction::Defer => Counter::Deferred,
                SettleAction::DeadLetter { .. } | SettleAction::Renew { .. } => Counter::Received,
            })
            .collect();
        let mut to_store = Vec::with_capacity(items.len());
        let mut stored = Vec::with_capacity(items.len());
        for (token, action) in items {
            stored.push(token.is_ok());
            if let Ok(lock_token) = token {
                to_store.push(Settlement { lock_token, action });
            }
        }
        let mut outcome = if to_store.is_empty() {
            // The store would look the queue up, then hold none of the tokens.
            self.inner.store.get_queue(&name).await?;
            SettleOutcome::default()
        } else {
            self.inner.store.settle(&name, to_store, self.now()).await?
        };
        let mut results = std::mem::take(&mut outcome.results).into_iter();
        outcome.results = stored
            .into_iter()
            .filter_map(|s| {
                if s {
                    results.next()
                } else {
                    Some(Err(StoreError::LockLost))
                }
            })
            .collect();
        let mut wake = false;
        for (counter, result) in actions.iter().zip(&outcome.results) {
            if let Ok(s) = result {
                match counter {
                    Counter::Completed | Counter::Abandoned | Counter::Deferred => {
                        self.inner.metrics.add(*counter, name.as_str(), 1);
                        self.record_series(name.as_str(), *counter);
                    }
                    _ => {}
                }
                if *counter == Counter::Abandoned {
                    wake = true;
                }
                tracing::debug!(queue = %name, message_id = %s.message_id, sequence = s.sequence,
                    delivery_count = s.delivery_count, action = ?counter, "message settled");
            }
        }
        self.apply_effects(&outcome.effects);
        if wake {
            self.inner.waiters.wake(name.as_str());
        }
        Ok(outcome)
    }
}
