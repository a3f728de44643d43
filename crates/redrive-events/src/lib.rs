//! Events for topics and push delivery: CloudEvents 1.0 in its three HTTP forms, the
//! filters a subscription applies, and the rules that decide what happens after a push
//! attempt. Pure logic, no I/O, so that every rule is tested on its own.
//!
//! # Layout
//! - [`cloudevent`]: the event, its validation, and structured / batch / binary mode.
//! - [`dead_letter_events`]: the events a dead-letter record holds (an Event Grid blob), and
//!   the forms a replay writes of them (republished, re-identified, quarantined).
//! - [`filter`]: event-type, subject and advanced filters (Event Grid's operators).
//! - [`import`]: dead letters from elsewhere (Event Grid, SQS, redrive's own export) read
//!   into records.
//! - [`json`]: the duplicate-key check every accepted JSON document passes.
//! - [`retry`]: the outcome of a delivery attempt by HTTP status, and the backoff schedule.
//! - [`subscription`]: a topic's policy and what a subscription is (pull or push, delivery,
//!   dead-letter destination), shared by the wire types and the store.

pub mod cloudevent;
pub mod dead_letter_events;
pub mod filter;
pub mod import;
pub mod json;
pub mod retry;
pub mod subscription;

pub use cloudevent::{CloudEvent, Data, EventError, ExtensionValue};
pub use filter::{AdvancedFilter, Filter, FilterError};
pub use retry::{AttemptOutcome, GiveUp, RetryPolicy, Verdict};
pub use subscription::{
    DeadLetterDestination, DeliverySpec, EndpointValidation, PushMode, SubscriptionKind,
    TopicPolicy,
};
