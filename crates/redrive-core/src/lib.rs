//! redrive's domain model: names, queue policies, identifiers, time, and the message state
//! machine.
//!
//! This crate does no I/O and knows nothing of storage or HTTP. Every rule about what happens
//! to a message — when it is visible, when its lock is lost, when it is dead-lettered or
//! expired — is a pure function in [`machine`], so that every backend applies the same rules
//! and the rules can be property-tested on their own.
//!
//! # Layout
//! - [`clock`]: [`Timestamp`], the [`Clock`] trait and the [`ManualClock`] used in tests.
//! - [`name`]: validated entity names.
//! - [`policy`]: the versioned queue policy and redelivery backoff.
//! - [`replay`]: the automatic replay policy of a queue or subscription.
//! - [`machine`]: message states and the transitions between them.
//! - [`dead_letter`]: reasons, evidence quality, route kind and areas of dead-letter records.
//! - [`message`]: application properties and the property names the broker sets.
//! - [`id`]: generated identifiers, lock tokens, the replay-count suffix of message ids,
//!   and the typed ids a request names ([`CaseId`], [`GroupId`], [`PlanId`], [`LockToken`],
//!   [`DeadLetterId`]).
//! - [`digest`]: the SHA-256 digest kept with every dead letter.
//! - [`sqs`]: the SQS-only queue attributes kept in the policy's optional `sqs` section.
//! - [`access`]: roles, grants and the permission table of every operation.
//! - [`audit`]: the hash chain of the audit log.
//! - [`register`]: the idempotency register of replayable message types and its rule.
//! - [`case`]: recovery cases: their vocabulary, timeline, ownership and decision order.

pub mod access;
pub mod audit;
pub mod case;
pub mod clock;
pub mod dead_letter;
pub mod digest;
pub mod id;
pub mod judgement;
pub mod machine;
pub mod message;
pub mod name;
pub mod plan;
pub mod policy;
pub mod register;
pub mod replay;
pub mod sqs;

pub use clock::{Clock, ManualClock, Timestamp};
pub use dead_letter::{
    Area, Classifier, DeadLetterReason, EvidenceQuality, RecordFormat, RouteKind,
};
pub use id::{CaseId, DeadLetterId, GroupId, LockToken, PlanId};
pub use machine::{MessageMeta, MessageState};
pub use message::{Properties, PropertyValue};
pub use name::EntityName;
pub use policy::{Backoff, DeadLetterTarget, PolicyError, QueuePolicy};
pub use replay::{AutoReplay, AutoReplayPatch, ReplayDestination};
pub use sqs::SqsAttributes;
