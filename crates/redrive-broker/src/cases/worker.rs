//! The case worker: advances cases whose check time has come, and deletes the payloads of
//! closed cases past their retention. One node at a time, under the store lease
//! [`CASES_LEASE`](super::CASES_LEASE).

use tokio_util::sync::CancellationToken;

use super::Cases;
use super::{CASE_BATCH, CASES_LEASE};
use crate::worker::{LeasedWorker, Next, Pass, Timing};
use crate::{Broker, BrokerResult};

/// What one look of the worker did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CasePass {
    /// Cases advanced.
    pub advanced: u64,
    /// Cases whose payload was deleted under their retention rule.
    pub payloads_deleted: u64,
    /// Open cases the sweep found deciding something they had not recorded (their
    /// record gone, their queue deleted…), advanced so that it is recorded.
    pub swept: u64,
}

/// The case worker.
pub struct CaseWorker {
    cases: Cases,
}

impl CaseWorker {
    /// A worker over `broker`.
    pub fn new(broker: Broker) -> Self {
        CaseWorker {
            cases: broker.cases(),
        }
    }

    /// Works until `cancel` fires. Errors are logged and retried at the next look.
    pub async fn run(self, cancel: CancellationToken) {
        LeasedWorker::new(&self.cases.broker, CASES_LEASE)
            .run(self, cancel)
            .await;
    }
}

impl Pass for CaseWorker {
    fn timing(&self) -> Timing {
        let settings = self.cases.case_settings();
        Timing {
            lease_ttl: settings.lease_ttl,
            poll: settings.poll_interval,
        }
    }

    fn wake(&self) -> Option<&tokio::sync::Notify> {
        Some(&self.cases.state.wake)
    }

    /// One look of [`Cases::cases_once`]; a full batch looks again at once.
    async fn pass(&mut self) -> BrokerResult<Next> {
        let p = self.cases.cases_once().await?;
        Ok(if p.advanced >= u64::from(CASE_BATCH) {
            Next::Now
        } else {
            Next::Idle
        })
    }
}

impl Cases {
    /// One look: advances up to [`CASE_BATCH`] due cases and deletes due payloads. Public
    /// so that tests drive cases on a manual clock.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn cases_once(&self) -> BrokerResult<CasePass> {
        let now = self.now();
        let due = self.ctx.store.due_cases(now, CASE_BATCH).await?;
        let mut pass = CasePass::default();
        // The authorities, the register and the queues are read once for the pass.
        let ctx = self.case_context().await?;
        let mut seen = std::collections::BTreeSet::new();
        for case in due {
            seen.insert(case.id.clone());
            match self.advance_case_in(&case.id, &ctx).await {
                Ok(after) => {
                    pass.advanced += 1;
                    // A case whose check time did not move would be due again at once: it
                    // waits for its next deadline (or for a change).
                    if after.m.next_check_at.is_some_and(|t| t <= now)
                        && after.version == case.version
                    {
                        let step = super::ops::Step::of(&after);
                        let next = super::ops::next_check(&after, &step, now);
                        self.park(&after, next).await?;
                    }
                }
                Err(e) => {
                    tracing::warn!(case_id = %case.id, error = %e, "case could not be advanced; parked for a minute");
                    let fresh = self.ctx.store.get_case(&case.id).await?;
                    self.park(&fresh, Some(now.plus_millis(60_000))).await?;
                }
            }
        }
        pass.swept = self.sweep_cases(&ctx, &seen, now).await?;
        let dropped = self.ctx.store.drop_case_payloads(now, CASE_BATCH).await?;
        for id in &dropped {
            tracing::info!(case_id = %id, "case payload deleted under its retention rule");
        }
        pass.payloads_deleted = dropped.len() as u64;
        Ok(pass)
    }

    /// The sweep: one page of open cases (in id order, going on from where the last pass
    /// stopped, round and round) whose decision now differs from the one they recorded is
    /// advanced, so that every decision the broker takes — also one caused by a change
    /// elsewhere (a dead letter completed or deleted, a queue deleted, a register entry
    /// changed) — is on the case's timeline and in its listing within one pass, whether or
    /// not the case's own check time has come.
    async fn sweep_cases(
        &self,
        ctx: &super::CaseContext,
        seen: &std::collections::BTreeSet<String>,
        now: redrive_core::Timestamp,
    ) -> BrokerResult<u64> {
        let after = self
            .state
            .sweep_after
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let page = self
            .ctx
            .store
            .list_cases(&redrive_store::CaseQuery {
                open: true,
                after,
                limit: CASE_BATCH,
                ..redrive_store::CaseQuery::default()
            })
            .await?;
        let resume = if page.len() < CASE_BATCH as usize {
            None
        } else {
            page.last().map(|c| c.id.clone())
        };
        *self
            .state
            .sweep_after
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = resume;
        let ids: Vec<String> = page
            .into_iter()
            .filter(|c| !seen.contains(&c.id))
            .map(|c| c.id)
            .collect();
        if ids.is_empty() {
            return Ok(0);
        }
        let mut swept = 0;
        for read in self.ctx.store.case_reads(&ids).await? {
            // A record this build cannot read is not a lost payload.
            if read.record_undecodable.is_some() || read.case.m.state.terminal().is_some() {
                continue;
            }
            let data = super::data::CaseData::of(&read.case);
            let known = self
                .known_of(&read.case, read.record.as_ref(), read.intent, ctx)
                .await?;
            let live = super::data::describe(&redrive_core::case::decide(
                &super::data::facts(&read.case, &data, &known),
                now,
            ));
            if data.next.as_deref().unwrap_or("verify_route") == live {
                continue;
            }
            let id = read.case.id.clone();
            match self.advance_read_case(read.case, ctx).await {
                Ok(_) => swept += 1,
                Err(e) => {
                    tracing::warn!(case_id = %id, error = %e, "case could not be advanced by the sweep");
                }
            }
        }
        Ok(swept)
    }

    /// The case gauges, read from the store at scrape time: open cases by state, overdue
    /// and escalated cases, and the age of the oldest unresolved one.
    pub(crate) async fn render_case_metrics(&self, out: &mut String) -> BrokerResult<()> {
        use std::fmt::Write as _;
        let now = self.now();
        let open = redrive_store::CaseQuery {
            open: true,
            ..redrive_store::CaseQuery::default()
        };
        let counts = self.ctx.store.case_counts(&open).await?;
        let overdue = self
            .ctx
            .store
            .case_counts(&redrive_store::CaseQuery {
                overdue_at: Some(now),
                ..open.clone()
            })
            .await?;
        let _ = writeln!(out, "# HELP redrive_cases Open recovery cases, by state.");
        let _ = writeln!(out, "# TYPE redrive_cases gauge");
        for (state, n) in &counts.by_state {
            let _ = writeln!(out, "redrive_cases{{state=\"{state}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP redrive_cases_overdue Open recovery cases past their review deadline."
        );
        let _ = writeln!(out, "# TYPE redrive_cases_overdue gauge");
        let _ = writeln!(out, "redrive_cases_overdue {}", overdue.total);
        let escalated = counts.by_state.get("escalated").copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "# HELP redrive_cases_escalated Open recovery cases waiting on an escalation."
        );
        let _ = writeln!(out, "# TYPE redrive_cases_escalated gauge");
        let _ = writeln!(out, "redrive_cases_escalated {escalated}");
        let age = counts
            .oldest_opened_at
            .map_or(0, |t| now.since(t).as_secs());
        let _ = writeln!(
            out,
            "# HELP redrive_case_oldest_unresolved_seconds Age of the oldest open recovery case."
        );
        let _ = writeln!(out, "# TYPE redrive_case_oldest_unresolved_seconds gauge");
        let _ = writeln!(out, "redrive_case_oldest_unresolved_seconds {age}");
        Ok(())
    }

    /// Moves a case's check to `next`.
    async fn park(
        &self,
        case: &redrive_store::CaseRecord,
        next: Option<redrive_core::Timestamp>,
    ) -> BrokerResult<()> {
        let mut set = case.m.clone();
        set.next_check_at = next;
        let r = self
            .ctx
            .store
            .update_case(&redrive_store::CaseUpdate {
                id: case.id.clone(),
                version: case.version,
                set,
                append: Vec::new(),
                payload: None,
                archive_record: false,
                audit: Vec::new(),
            })
            .await;
        match r {
            Ok(_) | Err(redrive_store::StoreError::CaseChanged { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}
