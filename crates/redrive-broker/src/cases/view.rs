//! A case as the interfaces show it: the view (record, data, next decision, timeline), the
//! listing, the counts and the payload read.

use redrive_core::case::{self, TimelineEntry};
use redrive_core::id::CaseId;
use redrive_store::{CaseQuery, CaseRecord, StoreError};

use super::data::{self, CaseData};
use redrive_core::access::{EVERY_ENTITY, Operation};

use crate::{Actor, BrokerError, BrokerResult, Cases};

use super::refusal::conflict;

/// A case as the interfaces show it: its record, its data, the next decision and its
/// timeline. Every case operation answers with it.
#[derive(Debug, Clone)]
pub struct CaseView {
    /// The stored case.
    pub case: CaseRecord,
    /// Its data.
    pub data: CaseData,
    /// The next decision now, in words (`escalate:effect_authority`, `needs_diagnosis`…).
    pub next: String,
    /// Whether it is past its review deadline while open.
    pub overdue: bool,
    /// Its timeline, oldest first.
    pub timeline: Vec<TimelineEntry>,
}

/// Longest filter value (a digest, a search term) a case read takes, bytes.
pub const MAX_FILTER_LEN: usize = 512;

/// Refuses a filter value that is empty, too long or holds a NUL character.
pub fn check_filter(field: &str, v: Option<&str>) -> BrokerResult<()> {
    match v {
        Some(s) if s.len() > MAX_FILTER_LEN => Err(BrokerError::invalid(
            field,
            format!("at most {MAX_FILTER_LEN} bytes"),
        )),
        Some("") => Err(BrokerError::invalid(field, "must not be empty")),
        Some(s) if s.contains('\0') => Err(BrokerError::invalid(
            field,
            "must not contain NUL characters",
        )),
        _ => Ok(()),
    }
}

impl Cases {
    /// The view of a case now, for `actor` who may read the cases of its queue.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id, queue, message_type))]
    pub async fn get_case(&self, id: &CaseId, actor: &Actor) -> BrokerResult<CaseView> {
        let id = id.as_str();
        let case = self
            .authorized_case(id, actor, Operation::ReadCases)
            .await?;
        self.case_view(case).await
    }

    /// Reads a case and refuses unless `actor` may do `op` on its queue: a refusal is
    /// audited (`denied:<operation>`), as the route table's are. The case's queue is
    /// recorded on the current span.
    pub(crate) async fn authorized_case(
        &self,
        id: &str,
        actor: &Actor,
        op: Operation,
    ) -> BrokerResult<CaseRecord> {
        let case = self.ctx.store.get_case(id).await?;
        let span = tracing::Span::current();
        span.record("queue", case.queue.as_str());
        if let Some(t) = &case.message_type {
            span.record("message_type", t.as_str());
        }
        self.broker
            .authorize(actor, op, Some(case.queue.as_str()))
            .await?;
        Ok(case)
    }

    /// Refuses unless `actor` may do `op` on the case's queue (see
    /// [`Cases::authorized_case`]).
    pub(crate) async fn authorize_case(
        &self,
        id: &str,
        actor: &Actor,
        op: Operation,
    ) -> BrokerResult<()> {
        self.authorized_case(id, actor, op).await.map(|_| ())
    }

    /// The view of `case` as just read or written: its next decision now and its timeline.
    pub(crate) async fn case_view(&self, case: CaseRecord) -> BrokerResult<CaseView> {
        let data = CaseData::of(&case);
        let now = self.now();
        let next = if case.m.state.terminal().is_some() {
            format!("closed:{}", case.m.state)
        } else {
            let known = self.known(&case).await?;
            data::describe(&case::decide(&data::facts(&case, &data, &known), now))
        };
        let overdue = case.m.closed_at.is_none() && case.m.review_deadline <= now;
        let timeline = self.ctx.store.case_timeline(&case.id).await?;
        Ok(CaseView {
            case,
            data,
            next,
            overdue,
            timeline,
        })
    }

    /// Cases a query matches (metadata only), for `actor` who may read the cases of the
    /// queue the query names. The caller shows only those of queues the actor may read.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = ?query.queue))]
    pub async fn list_cases(
        &self,
        query: &CaseQuery,
        actor: &Actor,
    ) -> BrokerResult<Vec<CaseRecord>> {
        if let Some(queue) = &query.queue {
            self.broker
                .authorize(actor, Operation::ReadCases, Some(queue.as_str()))
                .await?;
        }
        if query.limit > redrive_store::MAX_CASE_PAGE {
            return Err(BrokerError::invalid(
                "limit",
                format!("at most {}", redrive_store::MAX_CASE_PAGE),
            ));
        }
        Ok(self.ctx.store.list_cases(query).await?)
    }

    /// Counts of the cases a query matches, for `actor` who may read the cases of the
    /// queue it names (or of every queue: an unscoped grant).
    #[tracing::instrument(level = "debug", skip_all, fields(queue = ?query.queue))]
    pub async fn case_counts(
        &self,
        query: &CaseQuery,
        actor: &Actor,
    ) -> BrokerResult<redrive_store::CaseCounts> {
        let entity = query.queue.as_ref().map_or(EVERY_ENTITY, |q| q.as_str());
        self.broker
            .authorize(actor, Operation::ReadCases, Some(entity))
            .await?;
        Ok(self.ctx.store.case_counts(query).await?)
    }

    /// The payload of a case, for `actor` who may read payloads on its queue: its exact
    /// bytes, or the transformation `digest` kept with it. An audited read.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id, queue, message_type))]
    pub async fn case_payload(
        &self,
        id: &CaseId,
        digest: Option<&str>,
        actor: &Actor,
    ) -> BrokerResult<(String, Vec<u8>)> {
        let id = id.as_str();
        self.authorize_case(id, actor, Operation::ReadCasePayload)
            .await?;
        check_filter("digest", digest)?;
        self.read_payload(id, digest, actor).await
    }

    /// [`Cases::case_payload`] once the actor is authorized.
    pub(crate) async fn read_payload(
        &self,
        id: &str,
        digest: Option<&str>,
        actor: &Actor,
    ) -> BrokerResult<(String, Vec<u8>)> {
        let case = self.ctx.store.get_case(id).await?;
        let result = async {
            match digest.filter(|d| *d != case.body_sha256) {
                Some(d) => match self.ctx.store.case_payload(id, d).await? {
                    Some(b) => Ok((d.to_owned(), b)),
                    None => Err(conflict(
                        "payload_gone",
                        format!("case {id} keeps no payload with digest {d}"),
                    )),
                },
                None => {
                    if case.m.payload_deleted_at.is_some() {
                        return Err(conflict(
                            "payload_gone",
                            format!("the payload of case {id} was deleted under its retention rule; its digest {} remains", case.body_sha256),
                        ));
                    }
                    match self
                        .ctx
                        .store
                        .get_dead_letter(&case.queue, &case.record_id)
                        .await
                    {
                        Ok(r) => Ok((r.body_sha256, r.body)),
                        Err(StoreError::DeadLetterNotFound { .. }) => Err(conflict(
                            "payload_gone",
                            format!("the record of case {id} is gone; its digest {} remains", case.body_sha256),
                        )),
                        Err(e) => Err(e.into()),
                    }
                }
            }
        }
        .await;
        self.ctx
            .audited(
                actor,
                "case.payload_read",
                Some(case.queue.as_str()),
                vec![
                    id.to_owned(),
                    format!("digest={}", digest.unwrap_or(&case.body_sha256)),
                ],
                result,
            )
            .await
    }
}
