//! The idempotency register (see `redrive_core::register`): set, delete and list its
//! entries. Every change is audited with its actor (`register.set`, `register.delete`);
//! a set of an entry equal to the stored one, or a delete of an entry that does not
//! exist, changes nothing and writes no audit entry. The interfaces authorize
//! (`Operation::ReadRegister`, `Operation::ManageRegister`) before they call here; an
//! entry that declares a type idempotent also needs `replayer` (checked here), since it
//! lets automatic replay deliver that type's dead letters.

use redrive_core::access::{EVERY_ENTITY, Operation};
use redrive_core::register::{Idempotency, Register, RegisterEntry, RegisterKey, register_of};

use crate::Broker;
use crate::access::Actor;
use crate::error::{BrokerError, BrokerResult};
use crate::model::{MAX_REGISTER_PAGE, RegisterRecord};

/// What a set did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterChange {
    /// The entry it replaced (`None`: the key was new).
    pub previous: Option<RegisterRecord>,
    /// Whether anything changed (and was audited).
    pub changed: bool,
}

/// The audit entry's entity: the queue of a `<queue>:*` entry, none for a type.
fn entity_of(key: &RegisterKey) -> Option<&str> {
    match key {
        RegisterKey::Type(_) => None,
        RegisterKey::Entity(e) => Some(e.as_str()),
    }
}

impl Broker {
    /// Creates or replaces a register entry (audited when it changes something).
    #[tracing::instrument(level = "debug", skip_all, fields(key = %entry.key))]
    pub async fn set_register_entry(
        &self,
        actor: &Actor,
        entry: RegisterEntry,
    ) -> BrokerResult<RegisterChange> {
        // Declaring a type idempotent lets automatic replay deliver its dead letters: it
        // needs the role of a replay where the entry applies (a type's entry applies to
        // every entity: an unscoped grant), checked before anything is written.
        if entry.answer == Idempotency::Idempotent {
            let entity = entity_of(&entry.key).unwrap_or(EVERY_ENTITY);
            self.authorize(actor, Operation::Replay, Some(entity))
                .await?;
        }
        let result = self
            .inner
            .store
            .put_register_entry(&entry, self.now())
            .await;
        if let Ok(Some(p)) = &result
            && p.entry == entry
        {
            return Ok(RegisterChange {
                previous: result.ok().flatten(),
                changed: false,
            });
        }
        let mut targets = vec![entry.key.to_string(), format!("answer={}", entry.answer)];
        if let Some(a) = &entry.ordering_attribute {
            targets.push(format!("ordering_attribute={a}"));
        }
        let previous = self
            .audited(
                actor,
                "register.set",
                entity_of(&entry.key),
                targets,
                result.map_err(BrokerError::from),
            )
            .await?;
        Ok(RegisterChange {
            previous,
            changed: true,
        })
    }

    /// Removes a register entry and answers it (audited); `None`, and nothing audited,
    /// when there was none.
    #[tracing::instrument(level = "debug", skip_all, fields(key = %key))]
    pub async fn delete_register_entry(
        &self,
        actor: &Actor,
        key: &RegisterKey,
    ) -> BrokerResult<Option<RegisterRecord>> {
        let result = self.inner.store.delete_register_entry(key).await;
        if let Ok(None) = result {
            return Ok(None);
        }
        self.audited(
            actor,
            "register.delete",
            entity_of(key),
            vec![key.to_string()],
            result.map_err(BrokerError::from),
        )
        .await
    }

    /// A page of the register in key order: entries after `after`, at most `limit` (1 to
    /// [`MAX_REGISTER_PAGE`]).
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn list_register(
        &self,
        after: Option<&RegisterKey>,
        limit: u32,
    ) -> BrokerResult<Vec<RegisterRecord>> {
        if limit == 0 || limit > MAX_REGISTER_PAGE {
            return Err(BrokerError::invalid(
                "limit",
                format!("must be between 1 and {MAX_REGISTER_PAGE}"),
            ));
        }
        Ok(self.inner.store.list_register(after, limit).await?)
    }

    /// The whole register as a lookup table for `redrive_core::register::judge`.
    pub async fn register(&self) -> BrokerResult<Register> {
        let mut all = Vec::new();
        let mut after: Option<RegisterKey> = None;
        loop {
            let page = self
                .inner
                .store
                .list_register(after.as_ref(), MAX_REGISTER_PAGE)
                .await?;
            let full = page.len() == MAX_REGISTER_PAGE as usize;
            after = page.last().map(|r| r.entry.key.clone());
            all.extend(page.into_iter().map(|r| r.entry));
            if !full {
                return Ok(register_of(all));
            }
        }
    }

    /// Applies the register entries of the configuration file at start, as the `system`
    /// actor (`register` names it): each is set, and audited only when it changes the
    /// stored entry. Entries the file does not name are left as they are (the API may
    /// have set them). Answers how many changed.
    pub async fn apply_register(&self, entries: &[RegisterEntry]) -> BrokerResult<usize> {
        let actor = Actor::system("register");
        let mut changed = 0;
        for e in entries {
            if self.set_register_entry(&actor, e.clone()).await?.changed {
                changed += 1;
            }
        }
        Ok(changed)
    }
}
