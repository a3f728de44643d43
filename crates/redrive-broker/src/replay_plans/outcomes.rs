//! Observing a plan's replays in flight: each case read and stepped, the steps written in
//! one write, and where each admitted item's case stands.

use std::sync::Arc;

use redrive_core::case::{self, CaseState};
use redrive_core::plan::look::Observed;
use redrive_store::{CaseRecord, PlanItemRecord, StoreError};

use super::Plans;
use super::run::*;
use crate::cases::CaseContext;
use crate::cases::data::{CaseData, ReplayStatus};
use crate::{BrokerError, BrokerResult};

impl Plans {
    /// The outcomes of replays in flight, in the items' order: each case read and
    /// stepped in memory ([`Plans::steps_in`]: its effect authority asked), [`PARALLEL`]
    /// side by side; the steps written in one write; a case another writer changed
    /// meanwhile advanced alone.
    pub(super) async fn outcomes(
        &self,
        items: Vec<PlanItemRecord>,
        ctx: &Arc<CaseContext>,
    ) -> BrokerResult<Vec<(PlanItemRecord, Observed)>> {
        let mut reads = self.case_reads_of(&items).await?;
        let c = Arc::clone(ctx);
        let stepped = side_by_side(self, items, move |b, item| {
            let ctx = Arc::clone(&c);
            let read = reads.remove(&item.case_id);
            async move {
                let Some(r) = read else {
                    return (item, Ok::<_, BrokerError>(None));
                };
                if let Some(why) = &r.record_undecodable {
                    // Its record cannot be read: observed as it stands, no step taken.
                    tracing::warn!(case_id = %r.case.id, reason = %why,
                        "the record of a case in flight cannot be read; no step is taken");
                    return (item, Ok(Some((r.case, None))));
                }
                let stepped = async {
                    let known = b
                        .cases
                        .known_of(&r.case, r.record.as_ref(), r.intent, &ctx)
                        .await?;
                    b.cases.steps_known(&r.case, &ctx, &known).await
                };
                let u = match stepped.await {
                    Ok(u) => u,
                    Err(e) => {
                        tracing::warn!(case_id = %r.case.id, error = %e, "case could not be advanced");
                        None
                    }
                };
                (item, Ok(Some((r.case, u))))
            }
        })
        .await?;
        let mut updates = Vec::new();
        let mut read = Vec::with_capacity(stepped.len());
        for (item, r) in stepped {
            match r? {
                None => read.push((item, None, None)),
                Some((case, u)) => {
                    let at = u.map(|(u, finished)| {
                        updates.push(u);
                        (updates.len() - 1, finished)
                    });
                    read.push((item, Some(case), at));
                }
            }
        }
        let mut answers: Vec<Option<redrive_store::StoreResult<CaseRecord>>> = self
            .ctx
            .store
            .update_cases(&updates)
            .await?
            .into_iter()
            .map(Some)
            .collect();
        let mut out = Vec::with_capacity(read.len());
        for (item, case, at) in read {
            let Some(case) = case else {
                out.push((item, Observed::Closed("case_gone".into())));
                continue;
            };
            let answer = at.and_then(|(i, finished)| {
                let audited = updates[i].audit.len() as u64;
                answers[i].take().map(|a| (a, finished, audited))
            });
            let case = match answer {
                None => case,
                Some((Ok(written), finished, audited)) => {
                    self.ctx.metrics.audit_entries.add(audited);
                    if finished {
                        written
                    } else {
                        self.cases.advance_read_case(written, ctx).await?
                    }
                }
                Some((Err(StoreError::CaseNotFound { .. }), _, _)) => {
                    out.push((item, Observed::Closed("case_gone".into())));
                    continue;
                }
                Some((Err(e), _, _)) => {
                    if !matches!(e, StoreError::CaseChanged { .. }) {
                        tracing::warn!(case_id = %case.id, error = %e, "case could not be advanced");
                    }
                    match self.cases.advance_case_in(&case.id, ctx).await {
                        Ok(c) => c,
                        Err(BrokerError::Store(StoreError::CaseNotFound { .. })) => {
                            out.push((item, Observed::Closed("case_gone".into())));
                            continue;
                        }
                        Err(e) => {
                            tracing::warn!(case_id = %case.id, error = %e, "case could not be advanced");
                            self.ctx.store.get_case(&case.id).await?
                        }
                    }
                }
            };
            let outcome = self.outcome_of(&item, case).await?;
            out.push((item, outcome));
        }
        Ok(out)
    }

    /// Where an admitted item's case stands, as advanced by this look.
    pub(super) async fn outcome_of(
        &self,
        item: &PlanItemRecord,
        case: CaseRecord,
    ) -> BrokerResult<Observed> {
        if let Some(t) = case.m.state.terminal() {
            return Ok(if t == case::Terminal::Completed {
                Observed::Completed
            } else {
                Observed::Closed(t.to_string())
            });
        }
        let data = CaseData::of(&case);
        let Some(replay) = data
            .replays
            .iter()
            .rev()
            .find(|r| Some(&r.message_id) == item.message_id.as_ref())
        else {
            // The admission never reached the case (a crash between the two writes):
            // nothing was sent; the item waits again.
            return Ok(Observed::NotRecorded);
        };
        match replay.status {
            ReplayStatus::InFlight | ReplayStatus::Failed => Ok(Observed::InFlight),
            ReplayStatus::Completed => Ok(Observed::Completed),
            ReplayStatus::Stopped => {
                let timeline = self.ctx.store.case_timeline(&case.id).await?;
                let trigger = timeline
                    .iter()
                    .rev()
                    .find(|e| e.state == CaseState::ReplayStopped)
                    .and_then(|e| e.fields.get("trigger").cloned())
                    .unwrap_or_else(|| "delivery_failed".to_owned());
                Ok(Observed::Stopped(trigger))
            }
        }
    }

    /// The failure shape a repeated failure showed: the correction's claimed shape, else
    /// the case's reason.
    pub(super) async fn failure_shape(&self, case_id: &str) -> BrokerResult<String> {
        let case = self.ctx.store.get_case(case_id).await?;
        let data = CaseData::of(&case);
        Ok(data
            .correction()
            .map(|c| c.addresses.clone())
            .unwrap_or_else(|| case.reason.clone()))
    }
}
