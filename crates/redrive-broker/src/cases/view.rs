//! A case as the interfaces show it: the view (record, data, next decision, timeline), the
//! listing, the counts and the payload read.

use redrive_core::case::{self, TimelineEntry};
use redrive_store::{CaseQuery, CaseRecord, StoreError};

use super::data::{self, CaseData};
use crate::{Actor, Broker, BrokerError, BrokerResult};

use super::refusal::conflict;

/// A case as the interfaces show it: its record, its data, the next decision. The
/// timeline is read apart ([`Broker::case_timeline`]).
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
}

impl Broker {
    /// The view of a case now.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id))]
    pub async fn get_case(&self, id: &str) -> BrokerResult<CaseView> {
        let case = self.inner.store.get_case(id).await?;
        self.case_view(case).await
    }

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
        Ok(CaseView {
            case,
            data,
            next,
            overdue,
        })
    }

    /// The timeline of a case, oldest first.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id))]
    pub async fn case_timeline(&self, id: &str) -> BrokerResult<Vec<TimelineEntry>> {
        Ok(self.inner.store.case_timeline(id).await?)
    }

    /// Cases a query matches (metadata only).
    pub async fn list_cases(&self, query: &CaseQuery) -> BrokerResult<Vec<CaseRecord>> {
        if query.limit > redrive_store::MAX_CASE_PAGE {
            return Err(BrokerError::invalid(
                "limit",
                format!("at most {}", redrive_store::MAX_CASE_PAGE),
            ));
        }
        Ok(self.inner.store.list_cases(query).await?)
    }

    /// Counts of the cases a query matches.
    pub async fn case_counts(&self, query: &CaseQuery) -> BrokerResult<redrive_store::CaseCounts> {
        Ok(self.inner.store.case_counts(query).await?)
    }

    /// The payload of a case: its exact bytes, or the transformation `digest` kept with
    /// it. An audited read.
    #[tracing::instrument(level = "debug", skip_all, fields(case = %id))]
    pub async fn case_payload(
        &self,
        id: &str,
        digest: Option<&str>,
        actor: &Actor,
    ) -> BrokerResult<(String, Vec<u8>)> {
        let case = self.inner.store.get_case(id).await?;
        let result = async {
            match digest.filter(|d| *d != case.body_sha256) {
                Some(d) => match self.inner.store.case_payload(id, d).await? {
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
                        .inner
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
        self.audited(
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
