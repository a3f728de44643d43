//! What one pass over many cases reads once. A look of the case worker or of a replay
//! plan steps many cases against the same effect authorities, register and queues: read
//! once per pass, not once per case. Effect authorities may be asked ahead, several at a
//! time (the answers of a batch of cases before they are stepped one by one); an answer
//! asked ahead is used once, by the next reconciliation of its case in the same pass.

use std::collections::HashMap;
use std::sync::Mutex;

use redrive_core::EntityName;
use redrive_core::case::EffectAnswer;
use redrive_core::register::Register;
use redrive_store::{CaseRecord, EffectAuthority, QueueRecord, StoreError};

use super::effect;
use crate::{BrokerResult, Cases};

/// One pass's reads (see the module docs).
pub(crate) struct CaseContext {
    authorities: Vec<EffectAuthority>,
    register: Register,
    queues: Mutex<HashMap<String, Option<QueueRecord>>>,
    answers: Mutex<HashMap<String, (EffectAnswer, String)>>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Single inserts and removes: a panic while holding the lock leaves it consistent.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl CaseContext {
    /// The effect authority registered for `message_type`, if any.
    pub(crate) fn authority(&self, message_type: Option<&str>) -> Option<&EffectAuthority> {
        let t = message_type?;
        self.authorities.iter().find(|a| a.message_type == t)
    }

    /// The register as read at the start of the pass.
    pub(crate) fn register(&self) -> &Register {
        &self.register
    }

    /// The answer asked ahead for `case_id`, taken (used once).
    pub(crate) fn take_answer(&self, case_id: &str) -> Option<(EffectAnswer, String)> {
        locked(&self.answers).remove(case_id)
    }
}

impl Cases {
    /// A pass's context: the effect authorities and the register read now.
    pub(crate) async fn case_context(&self) -> BrokerResult<CaseContext> {
        Ok(CaseContext {
            authorities: self.ctx.store.list_effect_authorities().await?,
            register: self.broker.register().await?,
            queues: Mutex::new(HashMap::new()),
            answers: Mutex::new(HashMap::new()),
        })
    }

    /// The queue `name` as read once in this pass (`None`: it does not exist).
    pub(crate) async fn context_queue(
        &self,
        ctx: &CaseContext,
        name: &EntityName,
    ) -> BrokerResult<Option<QueueRecord>> {
        if let Some(q) = locked(&ctx.queues).get(name.as_str()) {
            return Ok(q.clone());
        }
        let q = match self.ctx.store.get_queue(name).await {
            Ok(q) => Some(q),
            Err(StoreError::QueueNotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        locked(&ctx.queues).insert(name.as_str().to_owned(), q.clone());
        Ok(q)
    }

    /// Asks `case`'s effect authority now and keeps the answer for the case's next
    /// reconciliation in this pass. Nothing is asked without an authority.
    pub(crate) async fn ask_ahead(&self, ctx: &CaseContext, case: &CaseRecord) {
        let Some(authority) = ctx.authority(case.message_type.as_deref()) else {
            return;
        };
        let answer = effect::ask(
            &self.case_client(),
            self.broker.push_network(),
            authority,
            case,
        )
        .await;
        locked(&ctx.answers).insert(case.id.clone(), answer);
    }
}
