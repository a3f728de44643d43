//! What the broker knows of a case beyond its record, read before a step: the dead-letter
//! record, the intent, the register, the effect authority, the entity's rules, and whether
//! a replay of it still waits in its queue.

use redrive_core::EntityName;
use redrive_core::case::{self, RepetitionPolicy};
use redrive_core::judgement::QuarantineCause;
use redrive_core::register::judge;
use redrive_store::{
    CaseQuery, CaseRecord, DeadLetterRecord, EffectAuthority, IntentRecord, StoreError,
};

use super::CaseContext;
use super::data::{CaseData, Known, ReplayStatus};
use crate::{BrokerResult, Cases};

use super::replay::validate_for;

/// Messages read per page when a replay is looked for in its destination queue.
pub(crate) const REPLAY_SCAN_PAGE: u32 = 500;

/// Pages read at most: a replay not found in the first 10,000 messages of a longer queue
/// counts as still waiting.
pub(crate) const REPLAY_SCAN_PAGES: usize = 20;

impl Cases {
    /// What the broker knows now about `case` beyond its record.
    pub(crate) async fn known(&self, case: &CaseRecord) -> BrokerResult<Known> {
        let ctx = self.case_context().await?;
        Ok(self.known_in(case, &ctx).await?.0)
    }

    /// The case's dead-letter record, if it still exists (`None`: completed, deleted, or
    /// its queue deleted).
    pub(crate) async fn case_record(
        &self,
        case: &CaseRecord,
    ) -> BrokerResult<Option<DeadLetterRecord>> {
        match self
            .ctx
            .store
            .get_dead_letter(&case.queue, &case.record_id)
            .await
        {
            Ok(r) => Ok(Some(r)),
            Err(StoreError::DeadLetterNotFound { .. } | StoreError::QueueNotFound { .. }) => {
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// [`Cases::known`] within a pass (its authorities, register and queues read once),
    /// with the case's dead-letter record when it still exists.
    pub(crate) async fn known_in(
        &self,
        case: &CaseRecord,
        ctx: &CaseContext,
    ) -> BrokerResult<(Known, Option<DeadLetterRecord>)> {
        let store = &self.ctx.store;
        let record = self.case_record(case).await?;
        let intent = redrive_store::IntentRecord::for_queue(
            store.intent_words(&case.intent_id).await?,
            case.queue.as_str(),
        );
        let known = self.known_of(case, record.as_ref(), intent, ctx).await?;
        Ok((known, record))
    }

    /// [`Cases::known_in`] with the case's record and intent already read.
    pub(crate) async fn known_of(
        &self,
        case: &CaseRecord,
        record: Option<&DeadLetterRecord>,
        intent: Option<IntentRecord>,
        ctx: &CaseContext,
    ) -> BrokerResult<Known> {
        let store = &self.ctx.store;
        let (record_area, schema_invalid) = match record {
            Some(r) => (
                Some(r.area),
                r.judgement
                    .as_ref()
                    .and_then(|j| j.cause)
                    .is_some_and(|c| c == QuarantineCause::SchemaInvalid),
            ),
            None => (None, false),
        };
        let queue = self.context_queue(ctx, &case.queue).await?;
        let authority = ctx.authority(case.message_type.as_deref());
        let answer = judge(ctx.register(), &case.queue, case.message_type.as_deref());
        let blocked_by = match &case.session_id {
            None => 0,
            Some(session) => {
                let open = store
                    .list_cases(&CaseQuery {
                        queue: Some(case.queue.clone()),
                        open: true,
                        until: Some(case.dead_lettered_at),
                        limit: redrive_store::MAX_CASE_PAGE,
                        ..CaseQuery::default()
                    })
                    .await?;
                open.iter()
                    .filter(|c| c.id != case.id && c.session_id.as_deref() == Some(session))
                    .count() as u64
            }
        };
        let data = CaseData::of(case);
        let replay_queued = self.replay_queued(&data).await?;
        let transformation_failure = self.transformation_failure(case, &data, record).await?;
        let known = Known {
            record_area,
            schema_invalid,
            replay_queued,
            transformation_failure,
            retention_bounded: queue
                .as_ref()
                .is_none_or(|q| q.policy.dead_letter_retention_ms > 0),
            intent,
            has_authority: authority.is_some(),
            repetition: RepetitionPolicy::from_register(&answer, authority.is_some()),
            destination_exists: queue.is_some(),
            blocked_by,
        };
        Ok(known)
    }

    /// The message id of the case's last replay while it still waits in (or is locked on)
    /// its destination queue: a replay that was neither completed nor dead-lettered again
    /// (in flight, or stopped) is looked for there by its message id.
    pub(crate) async fn replay_queued(&self, data: &CaseData) -> BrokerResult<Option<String>> {
        let Some(last) = data
            .replays
            .last()
            .filter(|r| matches!(r.status, ReplayStatus::InFlight | ReplayStatus::Stopped))
        else {
            return Ok(None);
        };
        let Ok(queue) = last.destination.parse::<EntityName>() else {
            return Ok(None);
        };
        let now = self.now();
        let mut from = 0;
        for _ in 0..REPLAY_SCAN_PAGES {
            let page = match self
                .ctx
                .store
                .peek(&queue, from, REPLAY_SCAN_PAGE, now)
                .await
            {
                Ok(p) => p,
                Err(StoreError::QueueNotFound { .. }) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            if page
                .iter()
                .any(|m| m.message_id == last.message_id && m.expires_at.is_none_or(|t| t > now))
            {
                return Ok(Some(last.message_id.clone()));
            }
            match page.last() {
                Some(m) if page.len() == REPLAY_SCAN_PAGE as usize => from = m.sequence + 1,
                _ => return Ok(None),
            }
        }
        // A queue longer than the scan: the replay is not shown gone, so it counts as
        // still waiting.
        Ok(Some(last.message_id.clone()))
    }

    /// Where the transformation in force fails the validation of the case's destination
    /// (its bytes gone count as a failure: nothing can be tested or replayed from them).
    pub(crate) async fn transformation_failure(
        &self,
        case: &CaseRecord,
        data: &CaseData,
        record: Option<&DeadLetterRecord>,
    ) -> BrokerResult<Option<case::ValidationFailure>> {
        let Some(t) = data.transformations.last() else {
            return Ok(None);
        };
        let Some(body) = self.ctx.store.case_payload(&case.id, &t.digest).await? else {
            return Ok(Some(case::ValidationFailure {
                field: "body".to_owned(),
                rule: format!("the transformation's bytes ({}) are gone", t.digest),
            }));
        };
        Ok(validate_for(record, &body).err())
    }

    pub(crate) async fn authority_for(
        &self,
        message_type: Option<&str>,
    ) -> BrokerResult<Option<EffectAuthority>> {
        let Some(t) = message_type else {
            return Ok(None);
        };
        Ok(self
            .ctx
            .store
            .list_effect_authorities()
            .await?
            .into_iter()
            .find(|a| a.message_type == t))
    }
}
