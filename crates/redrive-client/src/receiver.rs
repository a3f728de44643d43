//! Receiving (peek-lock) and settling: [`Receiver`] receives a queue's (or a pull
//! subscription's) messages, receives deferred ones by sequence number, settles and renews
//! locks, and accepts sessions as [`SessionReceiver`]s.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redrive_api::message::{
    AcceptSession, MessageList, ReceiveDeferred, ReceiveRequest, SessionLock, SessionTokenRequest,
    Settle, SettleKind, SettleRequest, SettleResult,
};
use redrive_core::clock::Timestamp;
use reqwest::{Method, StatusCode};

use crate::client::{Client, Req, Retry};
use crate::error::{Failure, ReceiveError, SessionError, SettleError};
use crate::message::{MAX_ID_LEN, ReceivedMessage};
use crate::sender::check_name;

/// Most messages one receive returns (the server's limit).
pub const MAX_RECEIVE_BATCH: u32 = 1_000;
/// Longest long poll (the server's limit, as SQS's).
pub const MAX_WAIT: Duration = Duration::from_secs(20);

/// How a message is dead-lettered by its receiver.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetterOptions {
    /// The reason code (1 to 256 characters; the broker's own codes, such as
    /// `MaxDeliveryCountExceeded`, are reserved and refused).
    pub reason: String,
    /// What went wrong (at most 4096 characters).
    pub description: Option<String>,
    /// The consumer that applied the reason, kept on the record and its case.
    pub consumer: Option<String>,
    /// The version of the consumer's classification rule.
    pub rule_version: Option<String>,
}

impl DeadLetterOptions {
    /// A dead letter for `reason`.
    pub fn new(reason: impl Into<String>) -> DeadLetterOptions {
        DeadLetterOptions {
            reason: reason.into(),
            description: None,
            consumer: None,
            rule_version: None,
        }
    }

    /// Sets the description.
    #[must_use]
    pub fn description(mut self, d: impl Into<String>) -> DeadLetterOptions {
        self.description = Some(d.into());
        self
    }

    /// Sets the consumer.
    #[must_use]
    pub fn consumer(mut self, c: impl Into<String>) -> DeadLetterOptions {
        self.consumer = Some(c.into());
        self
    }

    /// Sets the rule version.
    #[must_use]
    pub fn rule_version(mut self, v: impl Into<String>) -> DeadLetterOptions {
        self.rule_version = Some(v.into());
        self
    }
}

/// A peek-lock receiver of one queue (a pull subscription's queue is
/// `<topic>.<subscription>`). Cheap to clone.
///
/// Settlements (complete, abandon, defer, dead-letter) are retried only after a failure
/// that proves nothing happened: a repeat of one that was applied answers `lock_lost`. A
/// lock renewal is retried after any transient failure.
#[derive(Debug, Clone)]
pub struct Receiver {
    client: Client,
    queue: Arc<str>,
    lock_duration: Option<Duration>,
}

impl Receiver {
    pub(crate) fn new(client: Client, queue: String) -> Receiver {
        Receiver {
            client,
            queue: queue.into(),
            lock_duration: None,
        }
    }

    /// The queue.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Locks received messages for `d` instead of the queue's lock duration (1 s to 5 min).
    #[must_use]
    pub fn lock_duration(mut self, d: Duration) -> Receiver {
        self.lock_duration = Some(d);
        self
    }

    /// Receives up to `max` messages (1 to [`MAX_RECEIVE_BATCH`]), waiting up to `wait`
    /// (at most [`MAX_WAIT`]) for a first one; an empty list when none came.
    pub async fn receive(
        &self,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<ReceivedMessage>, ReceiveError> {
        self.receive_in(max, wait, None).await
    }

    pub(crate) async fn receive_in(
        &self,
        max: u32,
        wait: Duration,
        session: Option<(&str, &str)>,
    ) -> Result<Vec<ReceivedMessage>, ReceiveError> {
        let what = format!("receive from {}", self.queue);
        check_name(&what, &self.queue)?;
        if !(1..=MAX_RECEIVE_BATCH).contains(&max) {
            return Err(Failure::invalid(
                &what,
                format!("max is 1 to {MAX_RECEIVE_BATCH}, not {max}"),
            )
            .into());
        }
        if wait > MAX_WAIT {
            return Err(Failure::invalid(&what, "wait is at most 20 s").into());
        }
        let req = ReceiveRequest {
            max_messages: Some(max),
            lock_duration_ms: self.lock_ms(),
            wait_ms: Some(millis(wait)),
            session_id: session.map(|(id, _)| id.to_owned()),
            session_lock_token: session.map(|(_, token)| token.to_owned()),
        };
        let url = self
            .client
            .endpoint(&["v1", "queues", &self.queue, "receive"]);
        let list: MessageList = self
            .client
            .json(
                Req::new(Method::POST, url).json(&req).wait(wait),
                Retry::Always,
            )
            .await?;
        let out = wrap(list, &what)?;
        for m in &out {
            tracing::debug!(
                target: "redrive_client::receiver",
                queue = %self.queue,
                message_id = %m.message_id(),
                delivery_count = m.delivery_count(),
                "received"
            );
        }
        Ok(out)
    }

    /// Receives deferred messages by their sequence numbers, locked.
    pub async fn receive_deferred(
        &self,
        sequence_numbers: &[i64],
    ) -> Result<Vec<ReceivedMessage>, ReceiveError> {
        let what = format!("receive deferred messages of {}", self.queue);
        check_name(&what, &self.queue)?;
        if sequence_numbers.is_empty() || sequence_numbers.len() > MAX_RECEIVE_BATCH as usize {
            return Err(Failure::invalid(
                &what,
                format!("1 to {MAX_RECEIVE_BATCH} sequence numbers"),
            )
            .into());
        }
        let req = ReceiveDeferred {
            sequence_numbers: sequence_numbers.to_vec(),
            lock_duration_ms: self.lock_ms(),
        };
        let url = self.client.endpoint(&[
            "v1",
            "queues",
            &self.queue,
            "messages",
            "deferred",
            "receive",
        ]);
        let list: MessageList = self
            .client
            .json(Req::new(Method::POST, url).json(&req), Retry::Always)
            .await?;
        Ok(wrap(list, &what)?)
    }

    /// Browses messages without locking them, from `from_sequence` (at most `limit`).
    /// Needs the `payload-reader` role.
    pub async fn peek(
        &self,
        from_sequence: i64,
        limit: u32,
    ) -> Result<Vec<ReceivedMessage>, ReceiveError> {
        let what = format!("peek {}", self.queue);
        check_name(&what, &self.queue)?;
        let mut url = self
            .client
            .endpoint(&["v1", "queues", &self.queue, "messages"]);
        url.query_pairs_mut()
            .append_pair("from_sequence", &from_sequence.to_string())
            .append_pair("limit", &limit.to_string());
        let list: MessageList = self
            .client
            .json(Req::new(Method::GET, url), Retry::Always)
            .await?;
        Ok(wrap(list, &what)?)
    }

    /// Completes a delivery: the message is removed.
    pub async fn complete(&self, message: &ReceivedMessage) -> Result<(), SettleError> {
        self.settle(message, SettleKind::Complete, |_| {})
            .await
            .map(drop)
    }

    /// Abandons a delivery: released for redelivery after the queue's backoff (the
    /// delivery count stays incremented).
    pub async fn abandon(&self, message: &ReceivedMessage) -> Result<(), SettleError> {
        self.settle(message, SettleKind::Abandon, |_| {})
            .await
            .map(drop)
    }

    /// Abandons a delivery, visible again after `delay` instead of the queue's backoff.
    pub async fn abandon_after(
        &self,
        message: &ReceivedMessage,
        delay: Duration,
    ) -> Result<(), SettleError> {
        self.settle(message, SettleKind::Abandon, |s| {
            s.delay_ms = Some(millis(delay));
        })
        .await
        .map(drop)
    }

    /// Defers a delivery: set aside, received again only by its sequence number
    /// ([`Receiver::receive_deferred`]).
    pub async fn defer(&self, message: &ReceivedMessage) -> Result<(), SettleError> {
        self.settle(message, SettleKind::Defer, |_| {})
            .await
            .map(drop)
    }

    /// Dead-letters a delivery with a reason and description; the record's id.
    pub async fn dead_letter(
        &self,
        message: &ReceivedMessage,
        options: DeadLetterOptions,
    ) -> Result<Option<String>, SettleError> {
        let r = self
            .settle(message, SettleKind::DeadLetter, |s| {
                s.reason = Some(options.reason);
                s.description = options.description;
                s.consumer = options.consumer;
                s.rule_version = options.rule_version;
            })
            .await?;
        Ok(r.dead_letter_id)
    }

    /// Renews a delivery's lock (for the receiver's lock duration, else the queue's); the
    /// new expiry, also written into `message`.
    pub async fn renew_lock(
        &self,
        message: &mut ReceivedMessage,
    ) -> Result<Timestamp, SettleError> {
        let lock_ms = self.lock_ms();
        let r = self
            .settle(message, SettleKind::Renew, |s| s.lock_duration_ms = lock_ms)
            .await?;
        let until = r.locked_until.as_deref().and_then(Timestamp::parse_rfc3339);
        message.set_locked_until(r.locked_until.clone());
        until.ok_or_else(|| {
            Failure::invalid(
                format!("renew a lock on {}", self.queue),
                "the server's answer has no lock expiry",
            )
            .into()
        })
    }

    /// Renews the lock of the delivery `message_id` holding `token`; the new expiry.
    pub(crate) async fn renew_token(
        &self,
        message_id: &str,
        token: &str,
    ) -> Result<Timestamp, SettleError> {
        let lock_ms = self.lock_ms();
        let r = self
            .settle_token(message_id, Some(token), SettleKind::Renew, |s| {
                s.lock_duration_ms = lock_ms;
            })
            .await?;
        r.locked_until
            .as_deref()
            .and_then(Timestamp::parse_rfc3339)
            .ok_or_else(|| {
                Failure::invalid(
                    format!("renew a lock on {}", self.queue),
                    "the server's answer has no lock expiry",
                )
                .into()
            })
    }

    async fn settle(
        &self,
        message: &ReceivedMessage,
        action: SettleKind,
        fill: impl FnOnce(&mut Settle),
    ) -> Result<SettleResult, SettleError> {
        self.settle_token(message.message_id(), message.lock_token(), action, fill)
            .await
    }

    async fn settle_token(
        &self,
        message_id: &str,
        token: Option<&str>,
        action: SettleKind,
        fill: impl FnOnce(&mut Settle),
    ) -> Result<SettleResult, SettleError> {
        let what = format!("{} message {message_id} of {}", verb(action), self.queue);
        check_name(&what, &self.queue)?;
        let Some(token) = token else {
            return Err(
                Failure::invalid(&what, "the message holds no lock (a peeked message)").into(),
            );
        };
        let mut settle = Settle {
            lock_token: token.to_owned(),
            action,
            delay_ms: None,
            reason: None,
            description: None,
            consumer: None,
            rule_version: None,
            lock_duration_ms: None,
        };
        fill(&mut settle);
        if action == SettleKind::DeadLetter {
            let reason_len = settle.reason.as_deref().map_or(0, |r| r.chars().count());
            if !(1..=256).contains(&reason_len) {
                return Err(
                    Failure::invalid(&what, "a dead-letter reason is 1 to 256 characters").into(),
                );
            }
            if settle
                .description
                .as_deref()
                .is_some_and(|d| d.chars().count() > 4096)
            {
                return Err(Failure::invalid(
                    &what,
                    "a dead-letter description is at most 4096 characters",
                )
                .into());
            }
        }
        let retry = if action == SettleKind::Renew {
            Retry::Always
        } else {
            Retry::IfUnchanged
        };
        let url = self
            .client
            .endpoint(&["v1", "queues", &self.queue, "settle"]);
        let result: SettleResult = self
            .client
            .json(
                Req::new(Method::POST, url).json(&SettleRequest::One(settle)),
                retry,
            )
            .await?;
        tracing::debug!(
            target: "redrive_client::receiver",
            queue = %self.queue,
            message_id,
            action = verb(action),
            "settled"
        );
        Ok(result)
    }

    /// Accepts a session: the named one, or the next with messages, waiting up to `wait`
    /// (at most [`MAX_WAIT`]); `None` when none became available.
    pub async fn accept_session(
        &self,
        session_id: Option<&str>,
        wait: Duration,
    ) -> Result<Option<SessionReceiver>, SessionError> {
        let what = format!("accept a session of {}", self.queue);
        check_name(&what, &self.queue)?;
        if let Some(id) = session_id
            && (id.is_empty() || id.len() > MAX_ID_LEN)
        {
            return Err(Failure::invalid(&what, "a session id is 1 to 128 bytes").into());
        }
        if wait > MAX_WAIT {
            return Err(Failure::invalid(&what, "wait is at most 20 s").into());
        }
        let req = AcceptSession {
            session_id: session_id.map(str::to_owned),
            lock_duration_ms: self.lock_ms(),
            wait_ms: Some(millis(wait)),
        };
        let url = self
            .client
            .endpoint(&["v1", "queues", &self.queue, "sessions", "accept"]);
        let answer = self
            .client
            .execute(
                Req::new(Method::POST, url).json(&req).wait(wait),
                Retry::Always,
            )
            .await?;
        if answer.status == StatusCode::NO_CONTENT || answer.body.is_empty() {
            return Ok(None);
        }
        let lock: SessionLock = answer.decode(&what)?;
        let until = Timestamp::parse_rfc3339(&lock.locked_until).unwrap_or_default();
        Ok(Some(SessionReceiver {
            receiver: self.clone(),
            session_id: lock.session_id,
            lock: Arc::new(Mutex::new((lock.lock_token, until))),
        }))
    }

    fn lock_ms(&self) -> Option<u64> {
        self.lock_duration.map(millis)
    }
}

/// A session held by this receiver: its messages, in order, and its lock. Cheap to
/// clone; clones share the lock.
#[derive(Debug, Clone)]
pub struct SessionReceiver {
    receiver: Receiver,
    session_id: String,
    /// The session lock's token and expiry (renewals move the expiry).
    lock: Arc<Mutex<(String, Timestamp)>>,
}

impl SessionReceiver {
    /// The session id.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The receiver of the session's queue (to settle its messages).
    pub fn receiver(&self) -> &Receiver {
        &self.receiver
    }

    /// When the session lock runs out, as last renewed.
    pub fn locked_until(&self) -> Timestamp {
        self.lock_state().1
    }

    fn lock_state(&self) -> (String, Timestamp) {
        // Every critical section is one assignment or one clone: a panic cannot leave it
        // half written, so a poisoned lock is still consistent.
        self.lock.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Receives up to `max` of the session's messages, in sequence order, waiting up to
    /// `wait` for a first one.
    pub async fn receive(
        &self,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<ReceivedMessage>, ReceiveError> {
        let (token, _) = self.lock_state();
        self.receiver
            .receive_in(max, wait, Some((&self.session_id, &token)))
            .await
    }

    /// Completes one of the session's deliveries.
    pub async fn complete(&self, message: &ReceivedMessage) -> Result<(), SettleError> {
        self.receiver.complete(message).await
    }

    /// Abandons one of the session's deliveries.
    pub async fn abandon(&self, message: &ReceivedMessage) -> Result<(), SettleError> {
        self.receiver.abandon(message).await
    }

    /// Dead-letters one of the session's deliveries.
    pub async fn dead_letter(
        &self,
        message: &ReceivedMessage,
        options: DeadLetterOptions,
    ) -> Result<Option<String>, SettleError> {
        self.receiver.dead_letter(message, options).await
    }

    /// Renews the session lock; its new expiry.
    pub async fn renew_session_lock(&self) -> Result<Timestamp, SessionError> {
        let what = format!(
            "renew the lock of session {} of {}",
            self.session_id, self.receiver.queue
        );
        let (token, _) = self.lock_state();
        let req = SessionTokenRequest {
            lock_token: token,
            lock_duration_ms: self.receiver.lock_ms(),
        };
        let url = self.session_url("renew");
        let lock: SessionLock = self
            .receiver
            .client
            .json(Req::new(Method::POST, url).json(&req), Retry::Always)
            .await?;
        let until = Timestamp::parse_rfc3339(&lock.locked_until)
            .ok_or_else(|| Failure::invalid(&what, "the server's answer has no lock expiry"))?;
        *self.lock.lock().unwrap_or_else(|e| e.into_inner()) = (lock.lock_token, until);
        Ok(until)
    }

    /// Releases the session: another receiver may accept it.
    pub async fn release(&self) -> Result<(), SessionError> {
        let (token, _) = self.lock_state();
        let req = SessionTokenRequest {
            lock_token: token,
            lock_duration_ms: None,
        };
        let url = self.session_url("release");
        self.receiver
            .client
            .execute(Req::new(Method::POST, url).json(&req), Retry::IfUnchanged)
            .await?;
        Ok(())
    }

    fn session_url(&self, action: &str) -> reqwest::Url {
        self.receiver.client.endpoint(&[
            "v1",
            "queues",
            &self.receiver.queue,
            "sessions",
            &self.session_id,
            action,
        ])
    }
}

fn wrap(list: MessageList, what: &str) -> Result<Vec<ReceivedMessage>, Failure> {
    list.messages
        .into_iter()
        .map(|m| ReceivedMessage::from_wire(m, what))
        .collect()
}

fn verb(action: SettleKind) -> &'static str {
    match action {
        SettleKind::Complete => "complete",
        SettleKind::Abandon => "abandon",
        SettleKind::Defer => "defer",
        SettleKind::DeadLetter => "dead-letter",
        SettleKind::Renew => "renew the lock of",
    }
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
