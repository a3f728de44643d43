//! Recovery cases (seed 001): every dead letter that automatic replay did not settle is a
//! case the broker keeps the books of, so that an operator makes only the decisions a
//! person must.
//!
//! The store opens a case in the transaction that writes (or quarantines) its record. From
//! then on, every change goes through [`Cases::advance_case`]: it reads the case and what
//! is known now ([`data::Known`]: the record, the intent, the register, the effect
//! authority, the entity's rules), asks [`redrive_core::case::decide`] for the next
//! decision and [`redrive_core::case::step::step`] for what follows from it, does what
//! the broker may do by itself — verify the route, ask the effect authority, close a
//! cancelled, superseded, expired or completed intent, repair a record whose effect
//! exists, escalate, retain — and writes the new state and timeline entries with one
//! conditional update (`advance`, `known`, `route`). Decisions only a person can take
//! (diagnose, correct, transform, test, replay, close as rejected or indeterminate, review
//! an overdue case) are operations here (`person`, `replay`), each taking the case's id
//! and the actor, authorizing the actor on the case's queue, audited, followed by the same
//! advance, and answering the whole view (`view`).
//!
//! The case worker ([`CaseWorker`]) runs on one node at a time under the store lease
//! [`CASES_LEASE`]: it advances cases whose check time has come (just opened, review
//! deadline, value window, an in-flight replay to observe) and deletes the payloads of
//! closed cases past their retention.
//!
//! Every operation here is a method of the [`Cases`] service ([`Broker::cases`], in
//! `service`): it works over the broker's `Context` and this node's case state, and
//! reaches the rest of the broker only for the queue send, authorization, the register
//! and the push network policy.
//!
//! [`Broker::cases`]: crate::Broker::cases

mod advance;
mod authorities;
pub mod by_hand;
mod context;
pub mod data;
pub mod effect;
pub mod group;
mod intents;
mod known;
mod person;
mod refusal;
mod replay;
mod route;
mod service;
mod view;
mod worker;

use std::collections::BTreeMap;
use std::time::Duration;

pub(crate) use context::CaseContext;
pub use data::CaseData;
pub use group::{
    CaseGroup, GroupAction, GroupDecision, GroupSelection, GroupView, MAX_GROUP_CASES,
    MemberOutcome,
};
pub use intents::{IntentOutcome, IntentView};
pub use person::{ReviewDecision, TestInput, TransformInput};
pub use service::Cases;
pub use view::{CaseView, MAX_FILTER_LEN, check_filter};

/// The step and the replay admission, as the plan runner and automatic replay use them.
pub(crate) mod ops {
    pub(crate) use super::advance::{Step, next_check};
    pub(crate) use super::replay::ReplayAdmission;
}
pub use worker::CaseWorker;

/// The store lease the case worker runs under.
pub const CASES_LEASE: &str = "cases";
/// Cases the worker advances per look.
pub const CASE_BATCH: u32 = 100;
/// The longest a case lease may be taken for, ms (24 hours).
pub const MAX_CASE_LEASE_MS: u64 = 24 * 60 * 60 * 1000;
/// The longest an overdue case's review may be extended by at once, ms (30 days).
pub const MAX_EXTEND_MS: u64 = 30 * 24 * 60 * 60 * 1000;
/// Longest free text (a note, a hypothesis, evidence) a case takes, bytes.
pub const MAX_TEXT_LEN: usize = 4096;
/// Most changed fields a transformation names.
pub const MAX_CHANGED_FIELDS: usize = 256;

/// The case rules of one entity (or of every entity a prefix names).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CaseRule {
    /// A queue name, or a prefix ending in `*`.
    pub entity: String,
    /// Review deadline after the opening, ms (default 24 h).
    pub review_ms: Option<u64>,
    /// How long a closed case keeps its payload, ms.
    pub payload_retention_ms: Option<u64>,
    /// The redaction allowlist: `body.<json path>` and `properties.<name>` paths a case's
    /// diagnostic context may copy (none by default).
    pub redact_allow: Vec<String>,
}

impl CaseRule {
    fn covers(&self, entity: &str) -> bool {
        match self.entity.strip_suffix('*') {
            Some(prefix) => entity.starts_with(prefix),
            None => self.entity == entity,
        }
    }
}

/// How cases are worked on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseSettings {
    /// Whether this node runs the case worker.
    pub worker: bool,
    /// A claim's length when the caller names none, ms.
    pub default_lease_ms: u64,
    /// How long a closed case keeps its payload unless its entity's rule says otherwise,
    /// ms (default 7 days).
    pub payload_retention_ms: u64,
    /// Per-entity rules: the first that covers an entity applies.
    pub rules: Vec<CaseRule>,
    /// The node's labels recorded in each case's source identity (`region`, `tenant`…).
    pub labels: BTreeMap<String, String>,
    /// Where escalations are also posted (JSON), if anywhere.
    pub escalation_webhook: Option<String>,
    /// How often the worker looks for due cases written elsewhere.
    pub poll_interval: Duration,
    /// The worker lease's time to live.
    pub lease_ttl: Duration,
}

impl Default for CaseSettings {
    fn default() -> Self {
        CaseSettings {
            worker: true,
            default_lease_ms: 15 * 60 * 1000,
            payload_retention_ms: 7 * 24 * 60 * 60 * 1000,
            rules: Vec::new(),
            labels: BTreeMap::new(),
            escalation_webhook: None,
            poll_interval: Duration::from_secs(1),
            lease_ttl: Duration::from_secs(30),
        }
    }
}

impl CaseSettings {
    /// The rule that applies to `entity`, if any.
    pub fn rule(&self, entity: &str) -> Option<&CaseRule> {
        self.rules.iter().find(|r| r.covers(entity))
    }
}

/// The case worker's wake-up, settings and HTTP client.
pub(crate) struct CaseState {
    pub(crate) wake: tokio::sync::Notify,
    pub(crate) settings: std::sync::RwLock<CaseSettings>,
    pub(crate) client: std::sync::OnceLock<reqwest::Client>,
    /// Where the case worker's sweep of open cases goes on from (an id; none: the start).
    pub(crate) sweep_after: std::sync::Mutex<Option<String>>,
}

impl Default for CaseState {
    fn default() -> Self {
        CaseState {
            wake: tokio::sync::Notify::new(),
            settings: std::sync::RwLock::new(CaseSettings::default()),
            client: std::sync::OnceLock::new(),
            sweep_after: std::sync::Mutex::new(None),
        }
    }
}
