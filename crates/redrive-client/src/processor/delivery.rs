//! What a handler gets and gives back: [`Delivery`] (the message, its decoded value, and
//! explicit settlement), [`HandlerError`] (transient or permanent), [`InvalidMessage`].

use std::error::Error as StdError;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::SettleError;
use crate::message::ReceivedMessage;
use crate::processor::Entity;
use crate::receiver::{DeadLetterOptions, Receiver};

/// One delivery handed to a handler: the message, the value the processor's decode step
/// made of it (`()` without one), and the settlement actions. Settling explicitly (any of
/// [`complete`](Delivery::complete), [`abandon`](Delivery::abandon),
/// [`defer`](Delivery::defer), [`dead_letter`](Delivery::dead_letter)) turns the
/// processor's automatic settlement off for this delivery.
pub struct Delivery<T = ()> {
    pub(crate) ctx: Arc<DeliveryCtx>,
    pub(crate) value: T,
}

/// A delivery's shared state: the worker keeps it to settle after the handler.
pub(crate) struct DeliveryCtx {
    pub(crate) receiver: Receiver,
    pub(crate) entity: Entity,
    pub(crate) message: Arc<ReceivedMessage>,
    /// Set once the handler settled (or tried to).
    pub(crate) settled: Mutex<bool>,
    /// Cancelled when the lock is lost or the processor stops the handler.
    pub(crate) cancel: CancellationToken,
}

impl DeliveryCtx {
    pub(crate) fn mark_settled(&self) {
        *self.settled.lock().unwrap_or_else(|e| e.into_inner()) = true;
    }

    pub(crate) fn is_settled(&self) -> bool {
        *self.settled.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T> Delivery<T> {
    /// The message.
    pub fn message(&self) -> &ReceivedMessage {
        &self.ctx.message
    }

    /// The decoded value.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The decoded value, mutably.
    pub fn value_mut(&mut self) -> &mut T {
        &mut self.value
    }

    /// The entity the message came from.
    pub fn entity(&self) -> &Entity {
        &self.ctx.entity
    }

    /// Whether the handler settled this delivery already.
    pub fn is_settled(&self) -> bool {
        self.ctx.is_settled()
    }

    /// Completes when this delivery's lock is lost (renewal refused) or the processor
    /// stops its handler at the shutdown timeout: a long handler may stop early.
    pub async fn cancelled(&self) {
        self.ctx.cancel.cancelled().await;
    }

    /// Completes the message now.
    pub async fn complete(&self) -> Result<(), SettleError> {
        self.ctx.mark_settled();
        self.ctx.receiver.complete(&self.ctx.message).await
    }

    /// Abandons the message, visible again after `delay` (or the queue's backoff).
    pub async fn abandon(&self, delay: Option<Duration>) -> Result<(), SettleError> {
        self.ctx.mark_settled();
        match delay {
            Some(d) => self.ctx.receiver.abandon_after(&self.ctx.message, d).await,
            None => self.ctx.receiver.abandon(&self.ctx.message).await,
        }
    }

    /// Defers the message (received again only by its sequence number).
    pub async fn defer(&self) -> Result<(), SettleError> {
        self.ctx.mark_settled();
        self.ctx.receiver.defer(&self.ctx.message).await
    }

    /// Dead-letters the message to the entity's dead-letter store; the record's id.
    pub async fn dead_letter(
        &self,
        options: DeadLetterOptions,
    ) -> Result<Option<String>, SettleError> {
        self.ctx.mark_settled();
        self.ctx
            .receiver
            .dead_letter(&self.ctx.message, options)
            .await
    }
}

impl<T: fmt::Debug> fmt::Debug for Delivery<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("entity", &self.ctx.entity)
            .field("message_id", &self.ctx.message.message_id())
            .field("delivery_count", &self.ctx.message.delivery_count())
            .field("value", &self.value)
            .finish()
    }
}

/// Why a handler failed, and what the processor does about it.
///
/// Any error converts into a transient one, so a handler may use `?`:
///
/// ```
/// use redrive_client::HandlerError;
/// fn parse(body: &str) -> Result<u64, HandlerError> {
///     Ok(body.parse::<u64>()?) // a ParseIntError: transient
/// }
/// let permanent = HandlerError::permanent("ValidationFailed", "no amount");
/// assert!(permanent.is_permanent());
/// assert!(parse("x").is_err());
/// ```
pub struct HandlerError {
    pub(crate) class: Class,
    pub(crate) error: Box<dyn StdError + Send + Sync>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Class {
    /// Abandoned for redelivery, after `delay` if given.
    Transient { delay: Option<Duration> },
    /// Dead-lettered at once with this reason.
    Permanent { reason: String },
}

impl HandlerError {
    /// A failure that may pass: the message is abandoned and delivered again (after the
    /// processor's redelivery interval, or the queue's backoff).
    pub fn transient(error: impl Into<Box<dyn StdError + Send + Sync>>) -> HandlerError {
        HandlerError {
            class: Class::Transient { delay: None },
            error: error.into(),
        }
    }

    /// A failure retrying cannot fix (a malformed payload, a validation error): the
    /// message is dead-lettered at once with `reason` (1 to 256 characters, not one of the
    /// broker's reserved codes) and the error as its description.
    pub fn permanent(
        reason: impl Into<String>,
        error: impl Into<Box<dyn StdError + Send + Sync>>,
    ) -> HandlerError {
        HandlerError {
            class: Class::Permanent {
                reason: reason.into(),
            },
            error: error.into(),
        }
    }

    /// A transient failure redelivered after `delay` (overrides the processor's interval
    /// and the queue's backoff); no effect on a permanent one.
    #[must_use]
    pub fn with_delay(mut self, delay: Duration) -> HandlerError {
        if let Class::Transient { delay: d } = &mut self.class {
            *d = Some(delay);
        }
        self
    }

    /// Whether the failure is permanent.
    pub fn is_permanent(&self) -> bool {
        matches!(self.class, Class::Permanent { .. })
    }

    /// The underlying error.
    pub fn error(&self) -> &(dyn StdError + Send + Sync + 'static) {
        self.error.as_ref()
    }
}

impl<E: Into<Box<dyn StdError + Send + Sync>>> From<E> for HandlerError {
    fn from(e: E) -> Self {
        HandlerError::transient(e)
    }
}

impl fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerError")
            .field("class", &self.class)
            .field("error", &self.error.to_string())
            .finish()
    }
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.class {
            Class::Transient { .. } => write!(f, "transient: {}", self.error),
            Class::Permanent { reason } => write!(f, "permanent ({reason}): {}", self.error),
        }
    }
}

/// Why the processor's decode step could not read a message: the message goes to the
/// invalid-message handler instead of the handler, and a diverted copy is marked invalid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidMessage {
    reason: String,
}

impl InvalidMessage {
    /// An undecodable message, and why.
    pub fn new(reason: impl fmt::Display) -> InvalidMessage {
        InvalidMessage {
            reason: reason.to_string(),
        }
    }

    /// Why it could not be decoded.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for InvalidMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "undecodable message: {}", self.reason)
    }
}

impl StdError for InvalidMessage {}
