//! A producer's word on an intent (cancelled, superseded): recorded per entity, and the
//! open cases of the intent advanced (closed without execution where they may be).

use redrive_core::EntityName;
use redrive_core::access::{EVERY_ENTITY, Operation, Role, Scope};
use redrive_store::{CaseQuery, IntentRecord, IntentStatus};

use crate::{Actor, BrokerError, BrokerResult, Cases};

use super::person::check_text;
use super::refusal::conflict;

/// What an intent update did.
#[derive(Debug, Clone)]
pub struct IntentOutcome {
    /// The stored word on the intent for its entity (the first one stands).
    pub intent: IntentRecord,
    /// The intent as it stands after the word.
    pub view: IntentView,
    /// The cases it closed.
    pub closed: Vec<String>,
}

/// An intent as the interfaces show it.
#[derive(Debug, Clone)]
pub struct IntentView {
    /// Its words, per entity, in order.
    pub words: Vec<IntentRecord>,
    /// The ids of its cases the caller may see (read their queue's cases, or update
    /// intents there).
    pub cases: Vec<String>,
}

impl Cases {
    /// The entity scope a producer's word on an intent is for: the queue it names (the
    /// caller must produce to it), or else the one scope the caller may produce to (`*`
    /// for an unscoped producer or an admin). Refused, and audited, when the caller may not
    /// produce to the named queue or to anything; a caller producing to several scopes
    /// names the queue (400).
    pub(crate) async fn intent_scope(
        &self,
        queue: Option<&str>,
        actor: &Actor,
    ) -> BrokerResult<Scope> {
        if let Some(q) = queue {
            let name: EntityName = q
                .parse()
                .map_err(|e| BrokerError::invalid("queue", format!("{e}")))?;
            self.broker
                .authorize(actor, Operation::UpdateIntent, Some(name.as_str()))
                .await?;
            return Ok(Scope::Entity(name.to_string()));
        }
        if actor.permits(Operation::UpdateIntent, Some(EVERY_ENTITY)) {
            return Ok(Scope::All);
        }
        let mut scopes: Vec<Scope> = actor
            .grants
            .iter()
            .filter(|g| g.role == Role::Producer)
            .map(|g| g.scope.clone())
            .collect();
        scopes.sort();
        scopes.dedup();
        match scopes.len() {
            0 => {
                self.broker
                    .authorize(actor, Operation::UpdateIntent, Some(EVERY_ENTITY))
                    .await?;
                Err(BrokerError::invalid("queue", "no entity to speak for"))
            }
            1 => Ok(scopes.remove(0)),
            _ => Err(BrokerError::invalid(
                "queue",
                format!(
                    "this token may produce to {}: name the queue the word is for",
                    scopes
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )),
        }
    }

    /// A producer's cancel or supersede of an intent, for the entities it may produce to
    /// (the queue it names, or else its one producer scope): the open cases of the intent
    /// on those entities close without execution, and no other. The first word on an
    /// intent for entities stands (a different later one for the same entities, or for
    /// fewer, is refused); the word is kept with its entity, actor and time, and audited
    /// with its entity.
    #[tracing::instrument(level = "debug", skip_all, fields(intent = %intent_id, queue = ?queue))]
    pub async fn update_intent(
        &self,
        intent_id: &str,
        status: IntentStatus,
        superseded_by: Option<&str>,
        reason: Option<&str>,
        queue: Option<&str>,
        actor: &Actor,
    ) -> BrokerResult<IntentOutcome> {
        check_text("intent_id", intent_id, true)?;
        if intent_id.len() > 256 {
            return Err(BrokerError::invalid("intent_id", "at most 256 bytes"));
        }
        if let Some(r) = reason {
            check_text("reason", r, false)?;
        }
        if let Some(b) = superseded_by {
            check_text("by", b, true)?;
        }
        match (status, superseded_by) {
            (IntentStatus::Superseded, None) => {
                return Err(BrokerError::invalid(
                    "by",
                    "a superseded intent names the intent that replaces it",
                ));
            }
            (IntentStatus::Superseded, Some(b))
                if b == intent_id || b.is_empty() || b.len() > 256 =>
            {
                return Err(BrokerError::invalid(
                    "by",
                    "another intent id, at most 256 bytes",
                ));
            }
            _ => {}
        }
        let scope = self.intent_scope(queue, actor).await?;
        let entity = scope.to_string();
        let wanted = IntentRecord {
            intent_id: intent_id.to_owned(),
            entity: entity.clone(),
            status,
            superseded_by: superseded_by.map(str::to_owned),
            reason: reason.map(str::to_owned),
            actor: actor.name.clone(),
            at: self.now(),
        };
        // A word said earlier for entities that include these stands for them too: the
        // oldest word covering a case's queue is the one its case takes.
        let earlier = self
            .ctx
            .store
            .intent_words(intent_id)
            .await?
            .into_iter()
            .find(|w| w.entity.parse::<Scope>().is_ok_and(|s| s.includes(&scope)));
        let stored = match earlier {
            Some(w) => Ok(w),
            None => self.ctx.store.put_intent(&wanted).await,
        };
        let action = match status {
            IntentStatus::Cancelled => "intent.cancel",
            IntentStatus::Superseded => "intent.supersede",
        };
        // A different word already stands: refused, and audited as that refusal.
        let stored = stored.map_err(BrokerError::from).and_then(|w| {
            if w.status != status || w.superseded_by != wanted.superseded_by {
                Err(conflict(
                    "intent_decided",
                    format!(
                        "intent {intent_id} was {} already for {}",
                        w.status.as_str(),
                        w.entity
                    ),
                ))
            } else {
                Ok(w)
            }
        });
        let stored = self
            .ctx
            .audited(
                actor,
                action,
                Some(&entity),
                vec![intent_id.to_owned(), format!("entity={entity}")],
                stored,
            )
            .await?;
        let open = self
            .ctx
            .store
            .list_cases(&CaseQuery {
                intent_id: Some(intent_id.to_owned()),
                open: true,
                limit: redrive_store::MAX_CASE_PAGE,
                ..CaseQuery::default()
            })
            .await?;
        let mut closed = Vec::new();
        for c in open.iter().filter(|c| scope.covers(c.queue.as_str())) {
            let after = self.advance_case(&c.id).await?;
            if after.m.state.terminal().is_some() {
                closed.push(after.id);
            }
        }
        Ok(IntentOutcome {
            intent: stored,
            view: self.intent_view(intent_id, actor).await?,
            closed,
        })
    }

    /// Every word producers said about an intent, oldest first (each for its entities).
    #[tracing::instrument(level = "debug", skip_all, fields(intent = %intent_id))]
    pub async fn intent_words(&self, intent_id: &str) -> BrokerResult<Vec<IntentRecord>> {
        Ok(self.ctx.store.intent_words(intent_id).await?)
    }

    /// An intent's words and the ids of its cases `actor` may see.
    #[tracing::instrument(level = "debug", skip_all, fields(intent = %intent_id))]
    pub async fn intent_view(&self, intent_id: &str, actor: &Actor) -> BrokerResult<IntentView> {
        let words = self.intent_words(intent_id).await?;
        let cases = self
            .ctx
            .store
            .list_cases(&CaseQuery {
                intent_id: Some(intent_id.to_owned()),
                limit: redrive_store::MAX_CASE_PAGE,
                ..CaseQuery::default()
            })
            .await?;
        let cases = cases
            .iter()
            .filter(|c| {
                actor.permits(Operation::ReadCases, Some(c.queue.as_str()))
                    || actor.permits(Operation::UpdateIntent, Some(c.queue.as_str()))
            })
            .map(|c| c.id.clone())
            .collect();
        Ok(IntentView { words, cases })
    }
}
