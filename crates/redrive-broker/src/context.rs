//! The narrow context every service of the broker works over: the store, the clock, the
//! metrics, this node's id and the audit log. A service ([`Cases`](crate::Cases), the plan
//! runner, automatic replay, the mover, the dispatcher) holds a [`Context`] and the
//! handles it needs of the others, never the whole broker's state.

use std::sync::Arc;

use redrive_core::{Clock, Timestamp};
use redrive_store::{AuditFields, Store};

use crate::BrokerResult;
use crate::access::Actor;
use crate::metrics::Metrics;

/// The store, the clock, the metrics and this node's id: a cheap `Clone`.
#[derive(Clone)]
pub(crate) struct Context {
    /// The state: every service reads and writes through it.
    pub(crate) store: Arc<dyn Store>,
    /// The only source of time for every rule (locks, TTLs, backoff, windows, budgets).
    pub(crate) clock: Arc<dyn Clock>,
    /// The counters `/metrics` renders, shared by every service.
    pub(crate) metrics: Arc<Metrics>,
    /// This process among those sharing the store (the holder name of its leases).
    pub(crate) node_id: Arc<str>,
}

impl Context {
    /// The time now, on the injected clock.
    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Appends one audit entry for `actor`'s `action` and counts it.
    pub(crate) async fn audit(
        &self,
        actor: &Actor,
        action: &str,
        entity: Option<&str>,
        targets: Vec<String>,
        outcome: &str,
    ) -> BrokerResult<()> {
        let fields = AuditFields {
            at: self.now(),
            actor_id: actor.id.clone(),
            actor_name: actor.name.clone(),
            action: action.to_owned(),
            entity: entity.map(str::to_owned),
            targets,
            outcome: outcome.to_owned(),
            client: actor.client.clone(),
        };
        self.store.append_audit(&[fields]).await?;
        self.metrics.audit_entries.inc();
        Ok(())
    }

    /// Audits the outcome of an operation and passes its result on. The entry is written
    /// whatever the outcome; an operation that succeeded but cannot be audited reports
    /// the audit failure (the act stands, and the log says so).
    pub(crate) async fn audited<T>(
        &self,
        actor: &Actor,
        action: &str,
        entity: Option<&str>,
        targets: Vec<String>,
        result: BrokerResult<T>,
    ) -> BrokerResult<T> {
        let outcome = match &result {
            Ok(_) => "ok".to_owned(),
            Err(e) => format!("error:{}", e.code_hint()),
        };
        if let Err(e) = self.audit(actor, action, entity, targets, &outcome).await {
            tracing::error!(error = %e, action, actor = %actor.id, "audit entry not written");
            self.metrics.audit_failures.inc();
            if result.is_ok() {
                return Err(e);
            }
        }
        result
    }
}
