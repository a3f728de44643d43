//! Admitting a plan's waiting items: each item's gates judged in their order
//! (`redrive_core::plan::gates`) over what was read for it, the admission prepared, and
//! the batch written (the plan, then the cases, then the replays sent).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use redrive_core::case::{self, Lease};
use redrive_core::plan::gates::{self, Predecessor, Verdict};
use redrive_core::plan::{self, Pacer, StopReason};
use redrive_core::{EntityName, Timestamp};
use redrive_store::{
    AuditFields, CaseRecord, DeadLetterRecord, PlanItemQuery, PlanItemRecord, PlanItemState,
    PlanMut, ReplayPlanRecord, ReplayPlanUpdate, StoreError,
};

use super::Plans;
use super::gate_of;
use super::look::*;
use super::run::*;
use crate::cases::CaseContext;
use crate::cases::data::{self, Known};
use crate::cases::ops::{ReplayAdmission, Step};
use crate::metrics::Counter;
use crate::{BrokerError, BrokerResult, Outgoing};

impl Plans {
    /// Looks at one waiting item now: its gates in their order (`redrive_core::plan::gates`;
    /// the pacing first: nothing is asked of anyone for an item that must wait), each
    /// gate's facts read only once the gates before it passed. An item every gate passes
    /// is prepared ([`Plans::prepare_admission`]) — the plan's pacer takes its slot — but
    /// nothing of it is written yet: [`Plans::commit_batch`] writes the batch.
    pub(super) async fn gate_item(
        &self,
        a: &mut Advance,
        look: &mut Look,
        item: PlanItemRecord,
        pre: Option<Option<Pre>>,
    ) -> BrokerResult<Admit> {
        let now = a.now;
        macro_rules! gate {
            ($v:expr) => {
                match $v {
                    Verdict::Pass => {}
                    v => return Ok(Admit::of(v, item, now)),
                }
            };
        }
        gate!(gates::pacing(&a.pacer, &a.budget, item.bytes, now));
        gate!(gates::node(
            self.node_check(item.bytes, now.plus_millis(plan::LEAD_MS))
        ));
        let pre = match pre {
            Some(p) => p,
            None => self.prefetch_one(&item.case_id, &look.ctx).await?,
        };
        let Some(pre) = pre else {
            return Ok(Admit::of(gates::readable(false, None), item, now));
        };
        gate!(gates::readable(true, pre.undecodable.as_deref()));
        let case = &pre.case;
        // Ordering: a session goes in its order, each after its predecessor resolved.
        if let Some(session) = &case.session_id {
            let order = a.spec.sessions.get(session).map(Vec::as_slice);
            let open_now: Vec<String> = match order {
                Some(_) => self
                    .session_cases(&case.queue, session)
                    .await?
                    .into_iter()
                    .map(|c| c.id)
                    .collect(),
                None => Vec::new(),
            };
            gate!(gates::ordering(order, &open_now));
            for before in gates::predecessors(order.unwrap_or_default(), &case.id) {
                let p = if look.batch.iter().any(|p| p.item.case_id == *before) {
                    Predecessor::InBatch
                } else {
                    match self.predecessor_state(&a.plan.id, before, &a.items).await? {
                        Some(PlanItemState::Completed | PlanItemState::Closed) => {
                            Predecessor::Resolved
                        }
                        Some(PlanItemState::Waiting | PlanItemState::Admitted) => {
                            Predecessor::Pending
                        }
                        _ => Predecessor::Unresolved {
                            terminal: self.case_terminal(before).await?,
                        },
                    }
                };
                gate!(gates::predecessor(before, p));
            }
        }
        let holder = case::owner_at(case.m.lease.as_ref(), now);
        gate!(gates::claim(holder, &a.plan.owner_name));
        let clears_at = match look.failing.get(&case.reason) {
            Some(t) => *t,
            None => {
                let t = self
                    .failing_path(&look.destination, &case.reason, now)
                    .await?;
                look.failing.insert(case.reason.clone(), t);
                t
            }
        };
        gate!(gates::destination(clears_at));
        let registered = look.ctx.authority(case.message_type.as_deref()).is_some();
        gate!(gates::authority(registered));
        self.reconcile_item(a, look, item, pre).await
    }

    /// Gate 8 of an item: its case reconciled with its effect authority now, not at
    /// planning time. A gate that then holds it writes the reconciliation alone, as
    /// evidence (written, audited, the case advanced); else the admission is prepared with
    /// the answer.
    async fn reconcile_item(
        &self,
        a: &mut Advance,
        look: &mut Look,
        item: PlanItemRecord,
        pre: Pre,
    ) -> BrokerResult<Admit> {
        let now = a.now;
        let case = &pre.case;
        let mut step = Step::of(case);
        self.cases
            .reconcile_into(case, &mut step, now, &a.plan.owner_name, &look.ctx)
            .await?;
        let data = step.data().clone();
        let unreachable = data
            .effect
            .as_ref()
            .is_some_and(|e| e.answer == case::EffectAnswer::Unreachable);
        let decision = case::decide(&data::facts(case, &data, &pre.known), now);
        let held = gates::reconciled(&gates::Reconciled {
            case_id: &case.id,
            unreachable,
            correction: a.spec.correction.as_deref(),
            carries: data.correction().map(|k| k.identity.as_str()),
            decision_gate: gate_of(&decision, &data),
        });
        let Some(h) = held else {
            return self.prepare_admission(a, look, item, pre, step).await;
        };
        step.check_at(now);
        let written = self.cases.write_step(case, step).await;
        let owner = plan_actor(&a.plan);
        match self
            .ctx
            .audited(
                &owner,
                "case.reconcile",
                Some(case.queue.as_str()),
                vec![case.id.clone(), format!("plan_id={}", a.plan.id)],
                written,
            )
            .await
        {
            Ok(_) => {
                if let Err(e) = self.cases.advance_case_in(&case.id, &look.ctx).await {
                    tracing::warn!(case_id = %case.id, error = %e, "case could not be advanced");
                }
            }
            // Another tool changed the case meanwhile: look at it again later.
            Err(BrokerError::Store(StoreError::CaseChanged { .. })) => {
                return Ok(Admit::Later(Some(now.plus_millis(OBSERVE_IN_FLIGHT_MS))));
            }
            Err(e) => return Err(e),
        }
        Ok(match h.stop {
            Some(reason) => Admit::Stop(reason),
            None => Admit::of(Verdict::Hold(h.gate), item, now),
        })
    }

    /// An item every gate passed: its replay prepared onto the reconciled step (bound to
    /// the plan, its budget and the owner's lease), its slot taken in the plan's pacer,
    /// the node's budget and the window, and the admission put in the look's batch.
    async fn prepare_admission(
        &self,
        a: &mut Advance,
        look: &mut Look,
        mut item: PlanItemRecord,
        pre: Pre,
        step: Step,
    ) -> BrokerResult<Admit> {
        let now = a.now;
        let Pre { case, record, .. } = pre;
        let data = step.data().clone();
        let lease = Lease {
            owner: a.plan.owner_name.clone(),
            until: a.plan.m.owner_until,
        };
        let (step, message_id, mut outgoing) = self
            .cases
            .prepare_replay_onto(
                step,
                &case,
                &data,
                &ReplayAdmission {
                    actor: &a.plan.owner_name,
                    destination: &look.destination,
                    budget: a.spec.budget.describe(),
                    plan_id: Some(&a.plan.id),
                    lease: Some(lease),
                    record: record.as_ref(),
                },
            )
            .await?;
        // Its slot, in the plan's budget and the node's: at most a look's lead ahead, and
        // its replay is not delivered before it (`redrive_core::plan`, "Pacing").
        let at = a.pacer.slot(now).max(self.node_slot(now));
        if at > now {
            outgoing.scheduled_at = Some(at);
        }
        a.pacer.admit(&a.budget, item.bytes, at);
        self.node_admit(item.bytes, at);
        a.run.admitted += 1;
        a.run.bytes_admitted += item.bytes;
        a.run.window_admitted += 1;
        a.run.last_admit_ms = Some(at.as_millis());
        item.state = PlanItemState::Admitted;
        item.window = Some(a.run.window);
        item.message_id = Some(message_id.clone());
        item.detail = None;
        item.updated_at = now;
        look.batch.push(Prepared {
            case,
            step,
            message_id,
            outgoing,
            item,
        });
        Ok(Admit::Prepared)
    }

    /// Writes a look's admissions: the plan first, with every item this look changed (the
    /// item lease of each admitted one: a case another plan holds is held instead, and
    /// the write is tried again), then each case (`replay_admitted`; a case another tool
    /// changed meanwhile puts its item back to waiting), then the audit entries, then the
    /// replays, sent together. Returns the plan as written.
    pub(super) async fn commit_batch(
        &self,
        a: &mut Advance,
        mut batch: Vec<Prepared>,
        next_at: Timestamp,
    ) -> BrokerResult<ReplayPlanRecord> {
        let written = self.write_item_leases(a, &mut batch, next_at).await?;
        a.items.clear();
        let (sent, back) = self.write_admitted_cases(a, batch).await?;
        self.send_admitted(&a.plan, sent).await;
        if back.is_empty() {
            return Ok(written);
        }
        let mut state = a.run.clone();
        state.set_pacer(&a.pacer);
        Ok(self
            .ctx
            .store
            .update_replay_plan(&ReplayPlanUpdate {
                id: written.id.clone(),
                version: written.version,
                set: PlanMut {
                    state: state.value(),
                    updated_at: a.now,
                    ..written.m.clone()
                },
                items: back,
            })
            .await?)
    }

    /// The plan written with the batch's item leases: an item whose case another plan
    /// admitted meanwhile is taken out of the batch and held (`item_leased`), and the
    /// write tried again.
    async fn write_item_leases(
        &self,
        a: &mut Advance,
        batch: &mut Vec<Prepared>,
        next_at: Timestamp,
    ) -> BrokerResult<ReplayPlanRecord> {
        loop {
            for p in batch.iter() {
                a.items.insert(p.item.seq, p.item.clone());
            }
            let mut state = a.run.clone();
            state.set_pacer(&a.pacer);
            let r = self
                .ctx
                .store
                .update_replay_plan(&ReplayPlanUpdate {
                    id: a.plan.id.clone(),
                    version: a.plan.version,
                    set: PlanMut {
                        state: state.value(),
                        updated_at: a.now,
                        next_at: Some(next_at),
                        ..a.plan.m.clone()
                    },
                    items: a.items.values().cloned().collect(),
                })
                .await;
            match r {
                Ok(p) => return Ok(p),
                Err(StoreError::ReplayItemTaken { case_id, plan_id }) => {
                    let Some(i) = batch.iter().position(|p| p.item.case_id == case_id) else {
                        return Err(StoreError::ReplayItemTaken { case_id, plan_id }.into());
                    };
                    let mut taken = batch.remove(i);
                    undo(&mut a.run, &mut a.pacer, &mut taken.item);
                    taken.item.state = PlanItemState::Held;
                    taken.item.detail = Some(format!("item_leased: plan {plan_id} admitted it"));
                    a.run.held += 1;
                    a.run.bytes_held += taken.item.bytes;
                    a.items.insert(taken.item.seq, taken.item);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The batch's cases in one write, each with the audit entry of its admission.
    /// Answers the cases written with their replays, and the items whose case another
    /// tool changed meanwhile, back to waiting (nothing of them was sent).
    async fn write_admitted_cases(
        &self,
        a: &mut Advance,
        batch: Vec<Prepared>,
    ) -> BrokerResult<(Vec<(CaseRecord, Outgoing)>, Vec<PlanItemRecord>)> {
        let (plan, now) = (&a.plan, a.now);
        let owner = plan_actor(plan);
        let updates: Vec<_> = batch
            .iter()
            .map(|p| {
                let mut u = p.step.clone().update_of(&p.case);
                u.audit.push(AuditFields {
                    at: now,
                    actor_id: owner.id.clone(),
                    actor_name: owner.name.clone(),
                    action: "case.replay".to_owned(),
                    entity: Some(p.case.queue.to_string()),
                    targets: vec![
                        p.case.id.clone(),
                        format!("message_id={}", p.message_id),
                        format!("plan_id={}", plan.id),
                    ],
                    outcome: "ok".to_owned(),
                    client: None,
                });
                u
            })
            .collect();
        let answers = self.ctx.store.update_cases(&updates).await?;
        let mut sent = Vec::new();
        let mut back = Vec::new();
        for (p, written) in batch.into_iter().zip(answers) {
            match written {
                Ok(c) => {
                    self.ctx.metrics.audit_entries.inc();
                    // Its first look comes OBSERVE_ITEM_MS after the admission.
                    self.observe_due(&plan.id, p.item.seq, now, now, true);
                    sent.push((c, p.outgoing));
                }
                Err(StoreError::CaseChanged { .. }) => {
                    // Nothing was sent; the item waits again.
                    let mut item = p.item;
                    undo(&mut a.run, &mut a.pacer, &mut item);
                    item.updated_at = now;
                    back.push(item);
                }
                Err(e) => {
                    tracing::warn!(plan_id = %plan.id, case_id = %p.case.id, error = %e, "plan admission not recorded on its case");
                }
            }
        }
        Ok((sent, back))
    }

    /// The replays of the cases written, sent together to the destination, and counted;
    /// a send that fails stops each case's replay (nothing was delivered).
    async fn send_admitted(&self, plan: &ReplayPlanRecord, sent: Vec<(CaseRecord, Outgoing)>) {
        if sent.is_empty() {
            return;
        }
        let messages: Vec<Outgoing> = sent.iter().map(|(_, o)| o.clone()).collect();
        let bytes: u64 = sent.iter().map(|(_, o)| o.body.len() as u64).sum();
        if let Err(e) = self.broker.send(plan.destination.as_str(), messages).await {
            for (c, _) in &sent {
                if let Err(e2) = self.cases.send_replay_failed(c, &e).await {
                    tracing::warn!(case_id = %c.id, error = %e2, "replay stop not recorded");
                }
            }
            tracing::warn!(plan_id = %plan.id, error = %e, "plan replays could not be sent");
        }
        self.ctx.metrics.add_labelled(
            Counter::PlanItems,
            &plan.queue,
            "admitted",
            sent.len() as u64,
        );
        self.ctx
            .metrics
            .add_labelled(Counter::PlanBytes, &plan.queue, "admitted", bytes);
    }

    /// Reads `case_id` and what its gates need (`None`: the case is gone), its effect
    /// authority asked ahead.
    pub(super) async fn prefetch_one(
        &self,
        case_id: &str,
        ctx: &CaseContext,
    ) -> BrokerResult<Option<Pre>> {
        let case = match self.ctx.store.get_case(case_id).await {
            Ok(c) => c,
            Err(StoreError::CaseNotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let (known, record) = match self.cases.known_in(&case, ctx).await {
            Ok(k) => k,
            Err(BrokerError::Store(StoreError::DeadLetterUndecodable { reason, .. })) => {
                let intent = redrive_store::IntentRecord::for_queue(
                    self.ctx.store.intent_words(&case.intent_id).await?,
                    case.queue.as_str(),
                );
                let known = self.cases.known_of(&case, None, intent, ctx).await?;
                return Ok(Some(Pre {
                    case,
                    known,
                    record: None,
                    undecodable: Some(reason),
                }));
            }
            Err(e) => return Err(e),
        };
        if case.m.state.terminal().is_none() {
            self.cases.ask_ahead(ctx, &case).await;
        }
        Ok(Some(Pre {
            case,
            known,
            record,
            undecodable: None,
        }))
    }

    /// [`Plans::prefetch_one`] for `items` (their cases, records and intents in one
    /// read; their effect authorities asked [`PARALLEL`] side by side), by `seq`.
    pub(super) async fn prefetch(
        &self,
        ctx: &Arc<CaseContext>,
        items: Vec<PlanItemRecord>,
    ) -> BrokerResult<Vec<(u32, Option<Pre>)>> {
        let mut reads = self.case_reads_of(&items).await?;
        let ctx = Arc::clone(ctx);
        side_by_side(self, items, move |b, item| {
            let ctx = Arc::clone(&ctx);
            let read = reads.remove(&item.case_id);
            async move {
                let Some(r) = read else {
                    return (item.seq, Ok(None));
                };
                let pre = async {
                    let known = b
                        .cases
                        .known_of(&r.case, r.record.as_ref(), r.intent, &ctx)
                        .await?;
                    if r.case.m.state.terminal().is_none() && r.record_undecodable.is_none() {
                        b.cases.ask_ahead(&ctx, &r.case).await;
                    }
                    Ok(Some(Pre {
                        case: r.case,
                        known,
                        record: r.record,
                        undecodable: r.record_undecodable,
                    }))
                };
                (item.seq, pre.await)
            }
        })
        .await?
        .into_iter()
        .map(|(s, p)| p.map(|p| (s, p)))
        .collect()
    }

    /// The cases of `items` with their records and intents, in one read, by case id.
    pub(super) async fn case_reads_of(
        &self,
        items: &[PlanItemRecord],
    ) -> BrokerResult<HashMap<String, redrive_store::CaseRead>> {
        let ids: Vec<String> = items.iter().map(|i| i.case_id.clone()).collect();
        let mut out = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(redrive_store::MAX_CASE_PAGE as usize) {
            for r in self.ctx.store.case_reads(chunk).await? {
                out.insert(r.case.id.clone(), r);
            }
        }
        Ok(out)
    }

    /// Whether `case_id`'s case is in a terminal state (a case that is gone is: nothing of
    /// it can be replayed any more).
    pub(super) async fn case_terminal(&self, case_id: &str) -> BrokerResult<bool> {
        match self.ctx.store.get_case(case_id).await {
            Ok(c) => Ok(c.m.state.terminal().is_some()),
            Err(StoreError::CaseNotFound { .. }) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) async fn predecessor_state(
        &self,
        plan_id: &str,
        case_id: &str,
        seen: &BTreeMap<u32, PlanItemRecord>,
    ) -> BrokerResult<Option<PlanItemState>> {
        if let Some(i) = seen.values().find(|i| i.case_id == case_id) {
            return Ok(Some(i.state));
        }
        // Paged by seq: a large plan holds more items than one read returns.
        let mut after_seq = None;
        loop {
            let page = self
                .ctx
                .store
                .replay_plan_items(
                    plan_id,
                    &PlanItemQuery {
                        states: Vec::new(),
                        after_seq,
                        limit: redrive_store::MAX_PLAN_ITEM_PAGE,
                    },
                )
                .await?;
            if let Some(i) = page.iter().find(|i| i.case_id == case_id) {
                return Ok(Some(i.state));
            }
            if page.len() < redrive_store::MAX_PLAN_ITEM_PAGE as usize {
                break;
            }
            after_seq = page.last().map(|i| i.seq);
        }
        Ok(None)
    }
}

pub(super) enum Admit {
    /// Every gate passes: prepared in the look's batch.
    Prepared,
    /// A gate holds it.
    Held(PlanItemRecord),
    /// The budget says not yet: at this time (`None`: when a delivery finishes).
    Later(Option<Timestamp>),
    /// Its turn has not come (a predecessor in flight); the next item may go.
    Wait,
    /// A stop condition.
    Stop(StopReason),
}

impl Admit {
    /// What a gate's verdict does to `item` at `now`: a hold is the item held, its gate
    /// named. A pass is never asked here; were it, the item would wait for the next look
    /// (nothing is admitted that a gate did not judge).
    pub(super) fn of(v: Verdict, mut item: PlanItemRecord, now: Timestamp) -> Admit {
        match v {
            Verdict::Hold(gate) => {
                item.state = PlanItemState::Held;
                item.detail = Some(gate);
                item.updated_at = now;
                Admit::Held(item)
            }
            Verdict::Later(t) => Admit::Later(t),
            Verdict::Stop(reason) => Admit::Stop(reason),
            Verdict::Pass | Verdict::Wait => Admit::Wait,
        }
    }
}

/// What an item's gates read of its case, read ahead (its effect authority asked ahead
/// into the look's context).
pub(super) struct Pre {
    pub(super) case: CaseRecord,
    pub(super) known: Known,
    pub(super) record: Option<DeadLetterRecord>,
    /// Why the case's record cannot be read, if its row holds a value this build
    /// refuses: the item is held, never admitted on a guess.
    pub(super) undecodable: Option<String>,
}

/// An admission prepared, not yet written.
pub(super) struct Prepared {
    pub(super) case: CaseRecord,
    pub(super) step: Step,
    pub(super) message_id: String,
    pub(super) outgoing: Outgoing,
    pub(super) item: PlanItemRecord,
}

/// What one look reads once: the pass's context (effect authorities, register), the destination,
/// whether it is the failing path for each reason (until when), and the admissions prepared
/// so far.
pub(super) struct Look {
    pub(super) ctx: Arc<CaseContext>,
    pub(super) destination: EntityName,
    pub(super) failing: BTreeMap<String, Option<Timestamp>>,
    pub(super) batch: Vec<Prepared>,
}

/// An admission undone before anything was sent: its slots in the plan's counters, the
/// window and the pacer given back; the item waiting again.
fn undo(run: &mut RunState, pacer: &mut Pacer, item: &mut PlanItemRecord) {
    run.admitted -= 1;
    run.bytes_admitted -= item.bytes;
    run.window_admitted = run.window_admitted.saturating_sub(1);
    pacer.finish();
    item.state = PlanItemState::Waiting;
    item.window = None;
    item.message_id = None;
}
