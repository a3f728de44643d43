//! The case service: what the broker answers for recovery cases (`Broker::cases`).
//!
//! [`Cases`] holds the `Context` (store, clock, metrics, audit), the case state of this
//! node (`CaseState`: the worker's wake-up, the settings, the HTTP client of effect
//! authorities and escalation webhooks, where the sweep goes on from) and one handle of
//! the rest of the broker. A case operation authorizes its caller, sends a test fixture
//! or a replay to a queue (the queue core's send), reads the register, and asks effect
//! authorities and posts escalations under the push network policy: those live on the
//! broker, so the handle is the broker itself; nothing else of it is read.

use std::sync::Arc;

use redrive_core::Timestamp;

use super::worker::CasePass;
use super::{CaseSettings, CaseState};
use crate::context::Context;
use crate::{Broker, BrokerResult};

/// The recovery cases of a broker: a cheap `Clone`.
#[derive(Clone)]
pub struct Cases {
    /// Store, clock, metrics and audit.
    pub(super) ctx: Context,
    /// The worker's wake-up, the settings, the outgoing client, the sweep's position.
    pub(super) state: Arc<CaseState>,
    /// The queue send, authorization, the register and the push network policy.
    pub(super) broker: Broker,
}

impl Broker {
    /// The recovery cases.
    pub fn cases(&self) -> Cases {
        Cases {
            ctx: self.inner.ctx.clone(),
            state: self.inner.cases.clone(),
            broker: self.clone(),
        }
    }
}

/// The case calls the broker keeps for its callers outside the service (the tests and
/// the test kit drive the case worker one look at a time on a manual clock, `serve` and
/// the tests set the node's case settings); each is one line over [`Broker::cases`].
impl Broker {
    /// [`Cases::cases_once`].
    pub async fn cases_once(&self) -> BrokerResult<CasePass> {
        self.cases().cases_once().await
    }

    /// [`Cases::case_settings`].
    pub fn case_settings(&self) -> CaseSettings {
        self.cases().case_settings()
    }

    /// [`Cases::set_case_settings`].
    pub fn set_case_settings(&self, settings: CaseSettings) {
        self.cases().set_case_settings(settings);
    }
}

impl Cases {
    /// The time now, on the injected clock.
    pub(super) fn now(&self) -> Timestamp {
        self.ctx.now()
    }

    /// The case settings of this node.
    pub fn case_settings(&self) -> CaseSettings {
        self.state
            .settings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Sets the case settings of this node (configuration, at start).
    pub fn set_case_settings(&self, settings: CaseSettings) {
        *self
            .state
            .settings
            .write()
            .unwrap_or_else(|e| e.into_inner()) = settings;
    }

    /// The HTTP client of effect authorities and escalation webhooks (the push network
    /// policy applies).
    pub(crate) fn case_client(&self) -> reqwest::Client {
        self.state
            .client
            .get_or_init(|| {
                redrive_push::http_client(&self.broker.delivery_settings()).unwrap_or_default()
            })
            .clone()
    }
}
