//! Failures by signature: dead letters across queues grouped by the shape of their
//! failure, read from the aggregate the store keeps on every dead-letter write
//! ([`redrive_store::failure`]), never from the records. A caller sees the signatures of
//! the queues whose dead letters it may read.

use redrive_core::access::{Operation, Scope, permits};
use redrive_core::{Area, EntityName, Timestamp};
use redrive_store::failure::{FailureQuery, is_signature_id};
pub use redrive_store::failure::{FailureShape, FailureSignature, SPARKLINE_HOURS};

use crate::{Actor, Broker, BrokerError, BrokerResult};

/// The largest page of signatures.
pub const MAX_FAILURE_PAGE: u32 = 500;

/// The page size when none is asked for.
pub const DEFAULT_FAILURE_PAGE: u32 = 100;

/// What a listing of failures asks for.
#[derive(Debug, Clone, Default)]
pub struct FailureFilter {
    /// Only this queue's signatures.
    pub queue: Option<String>,
    /// The area counted (default live).
    pub area: Option<Area>,
    /// Only signatures last seen at or after.
    pub from: Option<Timestamp>,
    /// Only signatures first seen before.
    pub to: Option<Timestamp>,
    /// The cursor of the previous page.
    pub cursor: Option<String>,
    /// Page size (1 to [`MAX_FAILURE_PAGE`], default [`DEFAULT_FAILURE_PAGE`]).
    pub limit: Option<u32>,
}

/// A page of failure signatures.
#[derive(Debug, Clone, Default)]
pub struct FailureListing {
    /// The signatures, newest `last_seen` first, then by id.
    pub signatures: Vec<FailureSignature>,
    /// The cursor of the next page; `None` on the last.
    pub next: Option<String>,
}

/// The cursor after `s`: its `last_seen` (milliseconds) and id.
fn cursor_of(s: &FailureSignature) -> String {
    format!("fs_{}_{}", s.last_seen.0, s.id)
}

/// Reads a cursor made by [`cursor_of`].
fn parse_cursor(c: &str) -> BrokerResult<(Timestamp, String)> {
    let bad = || BrokerError::invalid("cursor", "not a cursor from a previous page");
    let rest = c.strip_prefix("fs_").ok_or_else(bad)?;
    let (at, id) = rest.split_once('_').ok_or_else(bad)?;
    let at: i64 = at.parse().map_err(|_| bad())?;
    if !is_signature_id(id) {
        return Err(bad());
    }
    Ok((Timestamp(at), id.to_owned()))
}

/// Whether `actor` may read the dead letters of `queue` (with or without payloads).
fn reads_dead_letters(actor: &Actor, queue: &str) -> bool {
    actor.permits(Operation::ReadDeadLetterMetadata, Some(queue))
        || actor.permits(Operation::ReadDeadLetterPayload, Some(queue))
}

/// Whether one of `actor`'s grants alone lets it read the dead letters of every queue.
fn reads_every_queue(actor: &Actor) -> bool {
    actor.grants.iter().any(|g| {
        g.scope == Scope::All
            && [
                Operation::ReadDeadLetterMetadata,
                Operation::ReadDeadLetterPayload,
            ]
            .into_iter()
            .any(|op| permits(std::slice::from_ref(g), op, None))
    })
}

impl Broker {
    /// A page of failure signatures of the queues whose dead letters `actor` may read
    /// (`read-dead-letters` or `payload-reader` on each). Asked for one queue the actor
    /// may not read, refused (`forbidden`, audited).
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn list_failures(
        &self,
        filter: FailureFilter,
        actor: &Actor,
    ) -> BrokerResult<FailureListing> {
        let limit = filter.limit.unwrap_or(DEFAULT_FAILURE_PAGE);
        if limit == 0 || limit > MAX_FAILURE_PAGE {
            return Err(BrokerError::invalid(
                "limit",
                format!("must be between 1 and {MAX_FAILURE_PAGE}"),
            ));
        }
        let after = filter.cursor.as_deref().map(parse_cursor).transpose()?;
        let queues = match &filter.queue {
            Some(q) => {
                let name: EntityName = q.parse()?;
                if !reads_dead_letters(actor, name.as_str()) {
                    self.authorize(
                        actor,
                        Operation::ReadDeadLetterMetadata,
                        Some(name.as_str()),
                    )
                    .await?;
                }
                // Fails with queue_not_found for an unknown queue rather than an empty page.
                self.inner.store.get_queue(&name).await?;
                Some(vec![name])
            }
            None if reads_every_queue(actor) => None,
            None => Some(
                self.inner
                    .store
                    .list_queues()
                    .await?
                    .into_iter()
                    .map(|q| q.name)
                    .filter(|n| reads_dead_letters(actor, n.as_str()))
                    .collect(),
            ),
        };
        if queues.as_ref().is_some_and(Vec::is_empty) {
            return Ok(FailureListing::default());
        }
        let signatures = self
            .inner
            .store
            .list_failures(&FailureQuery {
                area: filter.area.unwrap_or(Area::Live),
                queues,
                from: filter.from,
                to: filter.to,
                after,
                limit,
                now: self.now(),
            })
            .await?;
        let next = (signatures.len() == limit as usize)
            .then(|| signatures.last().map(cursor_of))
            .flatten();
        Ok(FailureListing { signatures, next })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_and_a_made_up_one_is_refused() {
        let id = "0123456789abcdef0123456789abcdef";
        assert_eq!(
            parse_cursor(&format!("fs_42_{id}")).ok(),
            Some((Timestamp(42), id.to_owned()))
        );
        for bad in [
            "",
            "fs_",
            "fs_x_ab",
            "dl_1",
            &format!("fs_1_{}", "g".repeat(32)),
        ] {
            assert!(parse_cursor(bad).is_err(), "{bad}");
        }
    }
}
