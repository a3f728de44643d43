//! The dead-letter store of a queue. Operator actions take an [`Actor`] and are audited:
//! payload reads (show, receive) are recorded before the payload is handed out, and every
//! decision (settle, resubmit, move) with its outcome.

use redrive_core::access::Operation;
use redrive_core::case::by_hand::HandOperation;
use redrive_core::id::{DeadLetterId, LockToken, Named, given};
use redrive_core::{Area, EntityName, EvidenceQuality, RecordFormat, Timestamp};
use redrive_store::failure::is_signature_id;
use redrive_store::skeleton::dead_letters::not_found;
use redrive_store::{
    DeadLetterDelivery, DeadLetterPage, DeadLetterQuery, DeadLetterRecord, Enqueued,
    MAX_TEXT_FILTER, RecordFilter, StoreError, StoreResult, UndecodableRecord,
};

use crate::cases::by_hand::{HandPass, HandTarget};

use crate::metrics::Counter;
use crate::{Actor, Broker, BrokerError, BrokerResult, MAX_RECEIVE_BATCH};

/// Filters of a dead-letter listing.
#[derive(Debug, Clone, Default)]
pub struct DeadLetterFilter {
    /// Area (default live).
    pub area: Option<Area>,
    /// Reason code.
    pub reason: Option<String>,
    /// Dead-lettered at or after.
    pub from: Option<Timestamp>,
    /// Dead-lettered before.
    pub to: Option<Timestamp>,
    /// Cursor from the previous page.
    pub cursor: Option<String>,
    /// Page size (1 to 1000, default 100).
    pub limit: Option<u32>,
    /// Only this message type (at most [`MAX_FILTER_LEN`] bytes).
    pub message_type: Option<String>,
    /// Only this source (at most [`MAX_FILTER_LEN`] bytes).
    pub source: Option<String>,
    /// Only this delivery-count quality.
    pub quality: Option<EvidenceQuality>,
    /// Only descriptions containing this text, ASCII letters compared without case (at
    /// most [`MAX_TEXT_FILTER`] characters).
    pub text: Option<String>,
    /// Only records of this failure signature (an id of `GET /v1/failures`).
    pub signature: Option<String>,
    /// The page is shown without payloads even to a payload reader (so it is no payload
    /// read and is not audited as one).
    pub without_payloads: bool,
}

/// The longest type or source filter of a dead-letter listing, bytes.
pub const MAX_FILTER_LEN: usize = 512;

impl DeadLetterFilter {
    /// The narrower filters, checked: each within its bound, a signature an id.
    fn record_filter(&mut self) -> BrokerResult<RecordFilter> {
        for (field, value) in [("type", &self.message_type), ("source", &self.source)] {
            if value
                .as_ref()
                .is_some_and(|v| v.is_empty() || v.len() > MAX_FILTER_LEN)
            {
                return Err(BrokerError::invalid(
                    field,
                    format!("must be 1 to {MAX_FILTER_LEN} bytes"),
                ));
            }
        }
        if let Some(t) = &self.text
            && (t.is_empty() || t.chars().count() > MAX_TEXT_FILTER)
        {
            return Err(BrokerError::invalid(
                "text",
                format!("must be 1 to {MAX_TEXT_FILTER} characters"),
            ));
        }
        if let Some(s) = &self.signature
            && !is_signature_id(s)
        {
            return Err(BrokerError::invalid(
                "signature",
                "not a signature id (32 hex digits from GET /v1/failures)",
            ));
        }
        Ok(RecordFilter {
            message_type: self.message_type.take(),
            source: self.source.take(),
            quality: self.quality,
            text: self.text.take(),
            signature: self.signature.take(),
        })
    }
}

/// A page of a dead-letter listing.
#[derive(Debug, Clone, Default)]
pub struct DeadLetterListing {
    /// The records, by id.
    pub records: Vec<DeadLetterRecord>,
    /// The rows of the page this build cannot read, by id: named with the reason, never
    /// failing the page (the page's limit counts them).
    pub undecodable: Vec<UndecodableRecord>,
    /// The cursor of the next page; `None` on the last.
    pub next: Option<String>,
}

impl Broker {
    /// What the store answers for a lock or a record of `queue` it does not have,
    /// given instead for a string that cannot name one (which never reaches it): the
    /// queue's refusal (unknown), then `absent`.
    async fn absent_on<T>(&self, queue: &EntityName, absent: StoreError) -> StoreResult<T> {
        self.inner.store.get_queue(queue).await?;
        Err(absent)
    }

    /// Record `id` of `queue` as the store reads it; a string that cannot be a record
    /// id is not found, as an id no record has.
    async fn stored_record(
        &self,
        queue: &EntityName,
        id: &Named<DeadLetterId>,
    ) -> StoreResult<DeadLetterRecord> {
        match id {
            Ok(id) => self.inner.store.get_dead_letter(queue, id.as_str()).await,
            Err(e) => self.absent_on(queue, not_found(queue, &e.id)).await,
        }
    }

    /// A page of dead letters and the cursor of the next page (see
    /// [`Broker::list_dead_letter_page`]; rows that cannot be read are left out).
    pub async fn list_dead_letters(
        &self,
        queue: &str,
        filter: DeadLetterFilter,
        actor: &Actor,
    ) -> BrokerResult<(Vec<DeadLetterRecord>, Option<String>)> {
        let page = self.list_dead_letter_page(queue, filter, actor).await?;
        Ok((page.records, page.next))
    }

    /// A page of dead letters, the rows of it that cannot be read, and the cursor of the
    /// next page. When the actor may read payloads (`payload-reader` on the queue) the
    /// interfaces show the bodies, and the page is audited as a payload read first;
    /// otherwise only metadata is shown.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %queue))]
    pub async fn list_dead_letter_page(
        &self,
        queue: &str,
        mut filter: DeadLetterFilter,
        actor: &Actor,
    ) -> BrokerResult<DeadLetterListing> {
        let name: EntityName = queue.parse()?;
        let narrow = filter.record_filter()?;
        let without_payloads = filter.without_payloads;
        let limit = filter.limit.unwrap_or(100);
        if limit == 0 || limit > MAX_RECEIVE_BATCH {
            return Err(BrokerError::invalid("limit", "must be between 1 and 1000"));
        }
        if let Some(c) = &filter.cursor
            && !c.starts_with("dl_")
        {
            return Err(BrokerError::invalid(
                "cursor",
                "not a cursor from a previous page",
            ));
        }
        // Fails with queue_not_found for an unknown queue rather than an empty page.
        self.inner.store.get_queue(&name).await?;
        let page = self
            .inner
            .store
            .list_dead_letter_page(&DeadLetterQuery {
                queue: name.clone(),
                area: filter.area.unwrap_or(Area::Live),
                reason: filter.reason,
                from: filter.from,
                to: filter.to,
                after: filter.cursor,
                limit,
                filter: narrow,
            })
            .await?;
        // A full page (rows that cannot be read count) has a next one, after its last id.
        let next = (page.len() == limit as usize)
            .then(|| page.last_id().map(str::to_owned))
            .flatten();
        let DeadLetterPage {
            records,
            undecodable,
        } = page;
        if !without_payloads
            && actor.permits(Operation::ReadDeadLetterPayload, Some(name.as_str()))
            && !records.is_empty()
        {
            let ids = records.iter().map(|r| r.id.clone()).collect();
            self.audit(actor, "dead_letter.read", Some(name.as_str()), ids, "ok")
                .await?;
        }
        Ok(DeadLetterListing {
            records,
            undecodable,
            next,
        })
    }

    /// One dead letter. When the actor may read payloads the interfaces show the body,
    /// and the read is audited first; otherwise only metadata is shown.
    #[tracing::instrument(level = "debug", skip_all,
        fields(queue = %queue, dead_letter = %given(named)))]
    pub async fn get_dead_letter(
        &self,
        queue: &str,
        named: &Named<DeadLetterId>,
        actor: &Actor,
    ) -> BrokerResult<DeadLetterRecord> {
        let name: EntityName = queue.parse()?;
        let rec = self.stored_record(&name, named).await;
        let id = given(named);
        if !actor.permits(Operation::ReadDeadLetterPayload, Some(name.as_str())) {
            return Ok(rec?);
        }
        let rec = self
            .audited(
                actor,
                "dead_letter.read",
                Some(name.as_str()),
                vec![id.to_owned()],
                rec.map_err(Into::into),
            )
            .await?;
        tracing::info!(queue = %name, dead_letter_id = id, actor = %actor.id, "dead letter read");
        Ok(rec)
    }

    /// Peek-lock receive from the dead-letter store (Service Bus `$deadletterqueue`).
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %queue, max))]
    pub async fn receive_dead_letters(
        &self,
        queue: &str,
        max: u32,
        lock_ms: Option<u64>,
        actor: &Actor,
    ) -> BrokerResult<Vec<DeadLetterDelivery>> {
        let name: EntityName = queue.parse()?;
        if max == 0 || max > MAX_RECEIVE_BATCH {
            return Err(BrokerError::invalid(
                "max_messages",
                "must be between 1 and 1000",
            ));
        }
        let lock_ms = self.lock_ms_for(&name, lock_ms).await?;
        let got = self
            .inner
            .store
            .receive_dead_letters(&name, max, lock_ms, self.now())
            .await;
        let ids = got
            .as_ref()
            .map(|g| g.iter().map(|d| d.record.id.clone()).collect())
            .unwrap_or_default();
        let got = self
            .audited(
                actor,
                "dead_letter.receive",
                Some(name.as_str()),
                ids,
                got.map_err(Into::into),
            )
            .await?;
        tracing::info!(queue = %name, count = got.len(), actor = %actor.id, "dead letters received");
        Ok(got)
    }

    /// Completes (removes) or abandons a dead-letter delivery.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %queue,
        lock_token = crate::trace::token_prefix(given(lock_token)), complete))]
    pub async fn settle_dead_letter(
        &self,
        queue: &str,
        lock_token: &Named<LockToken>,
        complete: bool,
        actor: &Actor,
    ) -> BrokerResult<()> {
        let name: EntityName = queue.parse()?;
        let r = match lock_token {
            Ok(token) => {
                self.inner
                    .store
                    .settle_dead_letter(&name, token.as_str(), complete, self.now())
                    .await
            }
            Err(_) => self.absent_on(&name, StoreError::LockLost).await,
        };
        let lock_token = given(lock_token);
        let action = if complete {
            "dead_letter.complete"
        } else {
            "dead_letter.abandon"
        };
        let prefix: String = lock_token.chars().take(12).collect();
        self.audited(
            actor,
            action,
            Some(name.as_str()),
            vec![format!("lock={prefix}")],
            r.map_err(Into::into),
        )
        .await?;
        tracing::info!(queue = %name, complete, actor = %actor.id, "dead letter settled");
        Ok(())
    }

    /// Sends a live dead letter back to its queue and archives the record. A record with
    /// a recovery case goes through the case's gates first (`cases::by_hand`): refused
    /// with the reason (audited, nothing sent), or sent and recorded on the case.
    #[tracing::instrument(level = "debug", skip_all,
        fields(queue = %queue, dead_letter = %given(named)))]
    pub async fn resubmit_dead_letter(
        &self,
        queue: &str,
        named: &Named<DeadLetterId>,
        actor: &Actor,
    ) -> BrokerResult<Enqueued> {
        let name: EntityName = queue.parse()?;
        let id = given(named);
        let gate = match named {
            Ok(record_id) => {
                self.hand_record_gate(&name, record_id, Area::Live, HandOperation::Resubmit, actor)
                    .await
            }
            // No record has it, so no case either.
            Err(_) => Ok(HandPass::NoCase),
        };
        let pass = match gate {
            Ok(p) => p,
            Err(e) => {
                return self
                    .audited(
                        actor,
                        "dead_letter.resubmit",
                        Some(name.as_str()),
                        vec![id.to_owned()],
                        Err(e),
                    )
                    .await;
            }
        };
        let e: BrokerResult<Enqueued> = match named {
            Ok(record_id) => {
                self.inner
                    .store
                    .resubmit_dead_letter(&name, record_id.as_str(), self.now())
                    .await
            }
            Err(_) => self.absent_on(&name, not_found(&name, id)).await,
        }
        .map_err(Into::into);
        match &e {
            Ok(enq) => {
                self.cases()
                    .hand_delivered(pass, Some(&enq.message_id), actor)
                    .await
            }
            Err(err) => self.cases().hand_failed(&pass, err).await,
        }
        let e = self
            .audited(
                actor,
                "dead_letter.resubmit",
                Some(name.as_str()),
                vec![id.to_owned()],
                e,
            )
            .await?;
        self.inner
            .metrics
            .add(Counter::Resubmitted, name.as_str(), 1);
        tracing::info!(queue = %name, dead_letter_id = id, message_id = %e.message_id,
            sequence = e.sequence, actor = %actor.id, "dead letter resubmitted");
        self.inner.waiters.wake(name.as_str());
        Ok(e)
    }

    /// The gate of a delivery by hand of record `id` of `queue` (see `cases::by_hand`):
    /// a record that is not in area `from` (the store then answers as it does), or that
    /// has no case, passes as before.
    pub(crate) async fn hand_record_gate(
        &self,
        queue: &EntityName,
        id: &DeadLetterId,
        from: Area,
        operation: HandOperation,
        actor: &Actor,
    ) -> BrokerResult<HandPass> {
        let record = match self.inner.store.get_dead_letter(queue, id.as_str()).await {
            Ok(r) if r.area == from => r,
            Ok(_)
            | Err(StoreError::DeadLetterNotFound { .. } | StoreError::QueueNotFound { .. }) => {
                return Ok(HandPass::NoCase);
            }
            Err(e) => return Err(e.into()),
        };
        let case = self.cases().case_of_record(&record.id).await?;
        let message_id = match operation {
            HandOperation::Resubmit => record.message_id.clone(),
            // Handed to automatic replay: the id it gives a message record.
            _ => match record.format {
                RecordFormat::Message => {
                    let (_, n) = redrive_core::id::split_replay_count(&record.message_id);
                    redrive_core::id::with_replay_count(&record.message_id, n + 1)
                }
                RecordFormat::Events => String::new(),
            },
        };
        let target = HandTarget {
            operation,
            message_id,
            destination: queue.to_string(),
            digest: record.body_sha256.clone(),
        };
        self.cases().hand_gate(case, target, actor).await
    }

    /// Moves a record to another area.
    #[tracing::instrument(level = "debug", skip_all,
        fields(queue = %queue, dead_letter = %given(named), to = ?to))]
    pub async fn move_dead_letter(
        &self,
        queue: &str,
        named: &Named<DeadLetterId>,
        to: Area,
        actor: &Actor,
    ) -> BrokerResult<()> {
        let name: EntityName = queue.parse()?;
        let id = given(named);
        // Back to live, automatic replay delivers it again: through its case's gates (a
        // string that cannot be a record id names no record, so no case either).
        let pass = if let (Area::Live, Ok(record_id)) = (to, named) {
            let mut pass = Ok(HandPass::NoCase);
            for from in [Area::Archived, Area::Quarantine] {
                pass = self
                    .hand_record_gate(&name, record_id, from, HandOperation::MoveToLive, actor)
                    .await;
                if !matches!(pass, Ok(HandPass::NoCase)) {
                    break;
                }
            }
            match pass {
                Ok(p) => p,
                Err(e) => {
                    return self
                        .audited(
                            actor,
                            "dead_letter.move",
                            Some(name.as_str()),
                            vec![id.to_owned(), format!("to={to}")],
                            Err(e),
                        )
                        .await;
                }
            }
        } else {
            HandPass::NoCase
        };
        let r: BrokerResult<()> = match named {
            Ok(record_id) => {
                self.inner
                    .store
                    .move_dead_letter(&name, record_id.as_str(), to, self.now())
                    .await
            }
            Err(_) => self.absent_on(&name, not_found(&name, id)).await,
        }
        .map_err(Into::into);
        match &r {
            Ok(()) => self.cases().hand_delivered(pass, None, actor).await,
            Err(err) => self.cases().hand_failed(&pass, err).await,
        }
        self.audited(
            actor,
            "dead_letter.move",
            Some(name.as_str()),
            vec![id.to_owned(), format!("to={to}")],
            r,
        )
        .await?;
        tracing::info!(queue = %name, dead_letter_id = id, area = %to, actor = %actor.id,
            "dead letter moved");
        if to == Area::Live {
            // Moved back to live on an entity that replays, it is a candidate again.
            self.wake_replay();
        }
        Ok(())
    }
}
