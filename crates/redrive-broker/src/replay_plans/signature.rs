//! A plan's selection by failure signature: the open cases whose dead-letter record
//! carries one signature of `GET /v1/failures`. A signature belongs to one queue (the
//! queue is part of the shape): the selection's queue is the signature's, named or left
//! empty. The records are found through the dead-letter list filtered by signature (its
//! index), never by reading every case's record.

use std::collections::BTreeSet;

use redrive_core::{Area, EntityName};
use redrive_store::failure::{FailureQuery, is_signature_id};
use redrive_store::{DeadLetterQuery, RecordFilter};

use super::{MAX_PLAN_ITEMS, PlanSelectionInput, Plans};
use crate::{BrokerError, BrokerResult};

/// Signatures read per page while the signature's queue is looked up.
const SIGNATURE_PAGE: u32 = 500;
/// Records read per page while the records of a signature are gathered.
const RECORD_PAGE: u32 = 1_000;
/// The areas a case's record may be in, the likeliest first.
const AREAS: [Area; 3] = [Area::Live, Area::Quarantine, Area::Archived];

impl Plans {
    /// The selection with its failure signature, if it names one, checked and made its
    /// queue: refused (`InvalidRequest`) when it also names a case group
    /// (`selection.group`) or case ids (`selection.case_ids`), when the signature is not a
    /// signature id, is no signature the store has counted, or is of another queue than the
    /// one named (`selection.signature`).
    pub(crate) async fn of_signature(
        &self,
        selection: &PlanSelectionInput,
    ) -> BrokerResult<PlanSelectionInput> {
        let Some(signature) = &selection.signature else {
            return Ok(selection.clone());
        };
        if selection.group.is_some() {
            return Err(BrokerError::invalid(
                "selection.group",
                "a plan selects by a case group or by a failure signature, not both",
            ));
        }
        if !selection.case_ids.is_empty() {
            return Err(BrokerError::invalid(
                "selection.case_ids",
                "a plan selects by case ids or by a failure signature, not both",
            ));
        }
        if !is_signature_id(signature) {
            return Err(BrokerError::invalid(
                "selection.signature",
                "not a signature id (32 hex digits from GET /v1/failures)",
            ));
        }
        let named = if selection.queue.is_empty() {
            None
        } else {
            let queue: EntityName = selection.queue.parse()?;
            // The queue must exist (QueueNotFound otherwise).
            self.ctx.store.get_queue(&queue).await?;
            Some(queue)
        };
        let Some(queue) = self.signature_queue(signature, named.as_ref()).await? else {
            return Err(BrokerError::invalid(
                "selection.signature",
                match &named {
                    Some(q) => format!("{signature} is not a failure signature of queue {q}"),
                    None => format!("{signature} is not a failure signature of any queue"),
                },
            ));
        };
        Ok(PlanSelectionInput {
            queue: queue.to_string(),
            ..selection.clone()
        })
    }

    /// The queue of `signature`, from the failure aggregate of every area (of `queue`
    /// only, when it is named): `None` when no record of it was ever counted there.
    async fn signature_queue(
        &self,
        signature: &str,
        queue: Option<&EntityName>,
    ) -> BrokerResult<Option<EntityName>> {
        let now = self.now();
        for area in AREAS {
            let mut after = None;
            loop {
                let page = self
                    .ctx
                    .store
                    .list_failures(&FailureQuery {
                        area,
                        queues: queue.map(|q| vec![q.clone()]),
                        from: None,
                        to: None,
                        after: after.take(),
                        limit: SIGNATURE_PAGE,
                        now,
                    })
                    .await?;
                if let Some(found) = page.iter().find(|s| s.id == signature) {
                    return Ok(Some(found.shape.queue.clone()));
                }
                if page.len() < SIGNATURE_PAGE as usize {
                    break;
                }
                after = page.last().map(|s| (s.last_seen, s.id.clone()));
            }
        }
        Ok(None)
    }

    /// The ids of `queue`'s dead-letter records that carry `signature`, in every area
    /// (rows this build cannot read included: their cases stand for them too), stopping
    /// once it holds [`MAX_PLAN_ITEMS`]. Read through the listing filtered by signature, paged by id;
    /// the payloads read with the rows are dropped here, never shown or audited.
    pub(crate) async fn signature_records(
        &self,
        queue: &EntityName,
        signature: &str,
    ) -> BrokerResult<BTreeSet<String>> {
        let mut ids = BTreeSet::new();
        for area in AREAS {
            let mut after = None;
            loop {
                let page = self
                    .ctx
                    .store
                    .list_dead_letter_page(&DeadLetterQuery {
                        queue: queue.clone(),
                        area,
                        reason: None,
                        from: None,
                        to: None,
                        after: after.take(),
                        limit: RECORD_PAGE,
                        filter: RecordFilter {
                            signature: Some(signature.to_owned()),
                            ..RecordFilter::default()
                        },
                    })
                    .await?;
                let full = page.len() == RECORD_PAGE as usize;
                after = page.last_id().map(str::to_owned);
                ids.extend(page.records.into_iter().map(|r| r.id));
                ids.extend(page.undecodable.into_iter().map(|u| u.id));
                if ids.len() >= MAX_PLAN_ITEMS {
                    return Ok(ids);
                }
                if !full || after.is_none() {
                    break;
                }
            }
        }
        Ok(ids)
    }
}
