//! One look at a running replay plan: it finds the facts, asks `redrive_core::plan::look`
//! and the gates what they mean, and writes the answer.
//!
//! # One advance ([`Plans::advance_plan`])
//!
//! 1. The owner's lease and current authorization are read: a lease that ran out, or a
//!    token revoked, expired or no longer granted `replayer` on the source and the
//!    destination, is a stop condition.
//! 2. Every admitted item's case is advanced (its replay observed through the effect
//!    authority): a completed case completes the item; a closed one closes it; a stopped
//!    replay stops it with its trigger — lost effect evidence and a repeated failure shape
//!    are stop conditions of the plan.
//! 3. The dependency is probed once per observation window (and before a window opens).
//! 4. The stop conditions are checked (`redrive_core::plan::stop`, in the seed's order).
//! 5. While running, the next waiting items are admitted one at a time, in order, within
//!    the window, each only after its gates pass now, in their order
//!    (`redrive_core::plan::gates`): the plan's pacer and the node's replay budget say
//!    now; the case exists and its record can be read; its session's ordering holds and
//!    its predecessors resolved; no other owner's claim on it; the destination off the
//!    failing path; an effect authority registered; then, the case reconciled with its
//!    effect authority now, the authority reachable, the plan's correction carried and
//!    its decision eligible. The admission is written to the plan first (the item
//!    lease), then to the case (`replay_admitted`, bound to the plan and budget), then
//!    the replay `<id>|<n>` is sent.
//! 6. A window whose items all settled opens the next one only if the gates still pass
//!    (a fresh probe within thresholds; `plan::Window::opens`); a plan with nothing
//!    waiting, nothing in flight and nothing held completes (`plan::look::completes`),
//!    and the next wake is `plan::look::next_wake`'s.
//!
//! Every write of a plan is conditional on the version read, so one advance at a time
//! changes a plan, on any node; the pacing state is in the plan, so a resumed plan keeps
//! its spacing, and an item already admitted is never admitted again.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use redrive_core::Timestamp;
use redrive_core::plan::look::{self, Observed, Settled, Signal};
use redrive_core::plan::{self, Budget, ItemState, Observations, Pacer, StopReason, Window};
use redrive_store::{
    AuditFields, PlanItemRecord, PlanItemState, PlanKind, PlanMut, PlanQuery, PlanStatus,
    ReplayPlanRecord, ReplayPlanUpdate, StoreError,
};

use super::Plans;
use super::admit::*;
use super::probe;
use super::run::*;
use crate::cases::CaseContext;
use crate::metrics::Counter;
use crate::{Actor, BrokerError, BrokerResult};

impl Plans {
    /// One look at every active plan that is due: public so that tests drive plans on a
    /// manual clock.
    #[tracing::instrument(level = "debug", skip_all)]
    pub async fn plans_once(&self) -> BrokerResult<PlanPass> {
        let mut pass = PlanPass::default();
        let mut after = None;
        loop {
            let page = self
                .ctx
                .store
                .list_replay_plans(&PlanQuery {
                    status: vec![PlanStatus::Running, PlanStatus::Paused],
                    // `sqs_move` plans are the mover's (`crate::mover`).
                    kinds: vec![PlanKind::Cases],
                    after: after.clone(),
                    ..PlanQuery::default()
                })
                .await?;
            let full = page.len() == redrive_store::MAX_PLAN_PAGE as usize;
            after = page.last().map(|p| p.id.clone());
            for plan in page {
                let now = self.now();
                let due = plan.m.next_at.is_none_or(|t| t <= now);
                let next = if due {
                    match self.advance_plan(&plan.id).await {
                        Ok(p) => {
                            pass.advanced += 1;
                            p.m.next_at.filter(|_| p.m.status.is_active())
                        }
                        Err(e) => {
                            tracing::warn!(plan_id = %plan.id, error = %e, "replay plan could not be advanced; retrying");
                            Some(now.plus_millis(OBSERVE_IN_FLIGHT_MS))
                        }
                    }
                } else {
                    plan.m.next_at
                };
                if let Some(t) = next {
                    pass.next_at = Some(pass.next_at.map_or(t, |n: Timestamp| n.min(t)));
                }
            }
            if !full {
                return Ok(pass);
            }
        }
    }

    /// Advances a plan once (see the module docs), retried when another writer changed it
    /// in between. Returns the plan as written.
    #[tracing::instrument(level = "debug", skip_all, fields(plan = %id, queue = tracing::field::Empty))]
    pub async fn advance_plan(&self, id: &str) -> BrokerResult<ReplayPlanRecord> {
        let mut last = None;
        for _ in 0..RETRIES {
            match self.advance_plan_once(id).await {
                Ok(p) => return Ok(p),
                Err(BrokerError::Store(e @ StoreError::ReplayPlanChanged { .. })) => {
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.map_or_else(
            || plan_conflict("plan_busy", "the plan kept changing"),
            Into::into,
        ))
    }

    /// One look at a plan (see the module docs): it finds the facts, asks
    /// `redrive_core::plan::look` and `plan::stop` what they mean, and writes the answer.
    pub(super) async fn advance_plan_once(&self, id: &str) -> BrokerResult<ReplayPlanRecord> {
        let plan = self.ctx.store.get_replay_plan(id).await?;
        tracing::Span::current().record("queue", plan.queue.as_str());
        if !plan.m.status.is_active() {
            return Ok(plan);
        }
        let spec = PlanSpec::of(&plan)?;
        let run = RunState::of(&plan);
        // The effect authorities, the register and the queues, read once for the look.
        let ctx = Arc::new(self.cases.case_context().await?);
        let now = self.now();
        let mut a = Advance {
            budget: spec.budget.clone(),
            pacer: run.pacer(),
            running: plan.m.status == PlanStatus::Running,
            plan,
            spec,
            run,
            ctx,
            now,
            obs: Observations::default(),
            items: BTreeMap::new(),
            holds: Vec::new(),
            changed: false,
            admitted_now: false,
        };

        // 1. The owner's lease and current authorization.
        a.obs.lease_lost = a.plan.m.owner_until <= now;
        a.obs.authorization_changed = self.plan_owner(&a.plan).await?.is_none();

        // 2. The replays in flight, and beside them what the admissions read.
        let seen = self.observe_in_flight(&mut a).await?;
        // Held items are looked at again when a replay settled or nothing is in flight:
        // one whose case reached a terminal state closes; a session's successor goes back
        // to waiting once its predecessors' cases are terminal (admitted in order).
        let mut released = false;
        if a.running && a.run.held > 0 && (!seen.settled.is_empty() || a.pacer.in_flight == 0) {
            released = self
                .reexamine_held(
                    &a.plan,
                    &a.spec,
                    &mut a.run,
                    &mut a.items,
                    &mut a.holds,
                    now,
                )
                .await?;
            a.changed |= released || !a.holds.is_empty();
        }

        // 3. The window, and the dependency once per observation window (and before a
        // window opens: it opens only if the gates still pass).
        let opening =
            a.running && a.window().opens(&a.budget, true) && self.has_waiting(&a.plan.id).await?;
        if look::probe_now(
            a.running,
            opening,
            a.run.probed_ms,
            a.spec.observe_ms,
            &a.obs,
            now,
        ) {
            self.observe_dependency(&a.budget, &mut a.run, &mut a.obs, now)
                .await;
            a.changed = true;
        }

        // 4. Stop conditions.
        if let Some(reason) = plan::stop(&a.budget, &a.obs) {
            a.run.set_pacer(&a.pacer);
            return self.stop_plan(&a.plan, a.run, a.items, &reason, now).await;
        }

        // 5. Admissions (each item a gate holds is an audit entry once written).
        let mut next_at = released.then_some(now);
        if a.running {
            if opening {
                let mut w = a.window();
                w.open();
                (a.run.window, a.run.window_admitted) = (w.number, w.admitted);
                a.changed = true;
            }
            if let Some(stopped) = self.admit_waiting(&mut a, seen.ahead, &mut next_at).await? {
                return Ok(stopped);
            }
        }
        a.run.set_pacer(&a.pacer);

        // 6. Completion and the next wake, written.
        self.finish_look(a, &seen.in_flight, &seen.settled, seen.more_due, next_at)
            .await
    }

    /// Step 2 of a look: the replays in flight due to be looked at (at most
    /// [`OBSERVE_BATCH`], in admission order: a look stays short, so the admissions keep
    /// their pace), observed beside the read-ahead of the admissions; each outcome's
    /// transition ([`look::settle`]) applied to the look.
    async fn observe_in_flight(&self, a: &mut Advance) -> BrokerResult<InFlight> {
        let now = a.now;
        let in_flight = self.in_flight_items(&a.plan.id).await?;
        let mut due: Vec<PlanItemRecord> = in_flight
            .iter()
            .filter(|i| self.observe_due(&a.plan.id, i.seq, i.updated_at, now, false))
            .cloned()
            .collect();
        let more_due = due.len() > OBSERVE_BATCH;
        due.truncate(OBSERVE_BATCH);
        due.retain(|i| self.observe_due(&a.plan.id, i.seq, i.updated_at, now, true));
        let (observed, ahead) = tokio::join!(self.outcomes(due, &a.ctx), self.read_ahead(a));
        let ahead = ahead?;
        for (item, outcome) in observed? {
            self.apply_outcome(a, item, outcome).await?;
        }
        a.obs.failures = a.run.failures.clone();
        // The replays this look saw settle (or go back to waiting).
        let settled = a.items.keys().copied().collect();
        Ok(InFlight {
            in_flight,
            more_due,
            ahead,
            settled,
        })
    }

    /// What the admissions read beside the observation (nothing is written): the waiting
    /// items the pacer may let go now and what their gates read.
    async fn read_ahead(&self, a: &Advance) -> BrokerResult<ReadAhead> {
        let room = a.window().room_ahead(&a.budget);
        let limit = look::admit_limit(&a.pacer, &a.budget, room, a.now);
        if !a.running || limit == 0 {
            return Ok(ReadAhead::default());
        }
        let waiting = self
            .items_in(&a.plan.id, PlanItemState::Waiting, limit as u32)
            .await?;
        let bytes = waiting.iter().map(|i| i.bytes);
        let n = look::admissible(
            &a.pacer,
            &a.budget,
            bytes,
            a.now,
            (room as usize).min(PREFETCH),
        );
        let fetched = self.prefetch(&a.ctx, waiting[..n].to_vec()).await?;
        Ok(ReadAhead {
            all: waiting.len() < limit,
            waiting,
            fetched,
        })
    }

    /// An observed item's transition, applied: its counters, its pacer slot, its stop
    /// signal (a repeated failure's shape read), the item as it is now.
    async fn apply_outcome(
        &self,
        a: &mut Advance,
        mut item: PlanItemRecord,
        outcome: Observed,
    ) -> BrokerResult<()> {
        let t = look::settle(outcome);
        let Some((settled, detail)) = t.settled else {
            if t.to == ItemState::Waiting {
                // The admission never reached its case: nothing was sent; it waits again.
                a.pacer.finish();
                a.run.admitted = a.run.admitted.saturating_sub(1);
                a.run.bytes_admitted = a.run.bytes_admitted.saturating_sub(item.bytes);
                item.state = PlanItemState::Waiting;
                item.window = None;
                item.message_id = None;
                item.updated_at = a.now;
                a.items.insert(item.seq, item);
                a.changed = true;
            }
            return Ok(());
        };
        let state = match settled {
            Settled::Completed => {
                a.run.completed += 1;
                PlanItemState::Completed
            }
            Settled::Closed => {
                a.run.closed += 1;
                PlanItemState::Closed
            }
            Settled::Stopped => {
                a.run.stopped += 1;
                PlanItemState::Stopped
            }
        };
        match t.signal {
            Some(Signal::EffectIndeterminate) => {
                a.obs.effect_indeterminate.push(item.case_id.clone())
            }
            Some(Signal::RepeatedFailure) => {
                let shape = self.failure_shape(&item.case_id).await?;
                a.run.failures.push((item.case_id.clone(), shape));
            }
            Some(Signal::LeaseLost) => a.obs.lease_lost = true,
            Some(Signal::AuthorizationChanged) => a.obs.authorization_changed = true,
            None => {}
        }
        a.pacer.finish();
        self.ctx
            .metrics
            .add_labelled(Counter::PlanItems, &a.plan.queue, state.as_str(), 1);
        item.state = state;
        item.detail = Some(detail);
        item.updated_at = a.now;
        a.items.insert(item.seq, item);
        a.changed = true;
        Ok(())
    }

    /// Step 5 of a look: the next waiting items, in order, within the window's room, each
    /// judged by its gates ([`Plans::gate_item`]); the prepared batch written
    /// ([`Plans::commit_batch`]). Answers the plan as written when a gate stopped it.
    async fn admit_waiting(
        &self,
        a: &mut Advance,
        ahead: ReadAhead,
        next_at: &mut Option<Timestamp>,
    ) -> BrokerResult<Option<ReplayPlanRecord>> {
        let room = a.window().room(&a.budget);
        if room == 0 {
            return Ok(None);
        }
        // The items the pacer may let go now (and one to learn when the next may): a
        // paced look reads a few, not a batch. Those read ahead serve when they are
        // enough (or all there are).
        let limit = look::admit_limit(&a.pacer, &a.budget, room, a.now);
        let waiting = if ahead.all || ahead.waiting.len() >= limit {
            let mut w = ahead.waiting;
            w.truncate(limit);
            w
        } else {
            self.items_in(&a.plan.id, PlanItemState::Waiting, limit as u32)
                .await?
        };
        let mut look = Look {
            ctx: Arc::clone(&a.ctx),
            destination: a.plan.destination.parse()?,
            failing: BTreeMap::new(),
            batch: Vec::new(),
        };
        let mut waiting: VecDeque<PlanItemRecord> = waiting.into();
        let mut fetched: HashMap<u32, Option<Pre>> = ahead.fetched.into_iter().collect();
        while let Some(item) = waiting.pop_front() {
            if !a.window().has_room(&a.budget) {
                break;
            }
            if !fetched.contains_key(&item.seq) {
                // Read ahead, side by side, the items the pacer lets go now.
                let room = a.window().room(&a.budget) as usize;
                let bytes = std::iter::once(&item)
                    .chain(waiting.iter())
                    .map(|i| i.bytes);
                let n = look::admissible(&a.pacer, &a.budget, bytes, a.now, room.min(PREFETCH));
                if n > 0 {
                    let ahead: Vec<PlanItemRecord> = std::iter::once(item.clone())
                        .chain(waiting.iter().take(n - 1).cloned())
                        .collect();
                    fetched.extend(self.prefetch(&a.ctx, ahead).await?);
                }
            }
            let pre = fetched.remove(&item.seq);
            match self.gate_item(a, &mut look, item, pre).await? {
                Admit::Prepared | Admit::Wait => {}
                Admit::Held(i) => {
                    a.holds.push(self.hold_entry(&a.plan, &i, a.now));
                    a.run.held += 1;
                    a.run.bytes_held += i.bytes;
                    self.ctx
                        .metrics
                        .add_labelled(Counter::PlanItems, &a.plan.queue, "held", 1);
                    a.items.insert(i.seq, i);
                    a.changed = true;
                }
                Admit::Later(t) => {
                    *next_at = t.map(|t| a.budget.next_look(t, a.now));
                    break;
                }
                Admit::Stop(reason) => {
                    // Nothing of the batch was written: its slots are given back.
                    for p in &look.batch {
                        a.run.admitted -= 1;
                        a.run.bytes_admitted -= p.item.bytes;
                        a.pacer.finish();
                    }
                    a.run.set_pacer(&a.pacer);
                    let items = std::mem::take(&mut a.items);
                    let stopped = self
                        .stop_plan(&a.plan, a.run.clone(), items, &reason, a.now)
                        .await?;
                    self.append_holds(std::mem::take(&mut a.holds)).await?;
                    return Ok(Some(stopped));
                }
            }
        }
        if !look.batch.is_empty() {
            a.admitted_now = true;
            let batch = std::mem::take(&mut look.batch);
            let at = next_at.unwrap_or(a.now);
            a.plan = self.commit_batch(a, batch, at).await?;
        }
        Ok(None)
    }

    /// Step 6 of a look: completion ([`look::completes`]: never with items held) and the
    /// next wake ([`look::next_wake`]), written with every item the look changed (nothing
    /// is written when nothing changed and the wake is the same); the holds audited, a
    /// completion counted and audited.
    async fn finish_look(
        &self,
        a: Advance,
        in_flight: &[PlanItemRecord],
        settled: &BTreeSet<u32>,
        more_due: bool,
        next_at: Option<Timestamp>,
    ) -> BrokerResult<ReplayPlanRecord> {
        let Advance {
            plan,
            spec,
            run,
            items,
            holds,
            mut changed,
            now,
            running,
            admitted_now,
            ..
        } = a;
        let mut status = plan.m.status;
        if running && run.in_flight == 0 {
            // Items this look held are still `waiting` in the store until it writes them.
            let waiting_left = self
                .items_in(&plan.id, PlanItemState::Waiting, items.len() as u32 + 1)
                .await?;
            let still_waiting = waiting_left.iter().any(|w| {
                items
                    .get(&w.seq)
                    .is_none_or(|i| i.state == PlanItemState::Waiting)
            }) || items.values().any(|i| i.state == PlanItemState::Waiting);
            if look::completes(running, run.in_flight, still_waiting, run.held) {
                status = PlanStatus::Completed;
                changed = true;
            }
        }
        // The next look comes when a replay in flight is due to be looked at (a full
        // window opens the next one as soon as its last replay is seen settled).
        let first_observation = if run.in_flight > 0 {
            let still: Vec<&PlanItemRecord> = in_flight
                .iter()
                .filter(|i| !settled.contains(&i.seq))
                .collect();
            self.next_observation(&plan.id, &still, now)
        } else {
            None
        };
        let wake = look::next_wake(&look::Wake {
            now,
            next_admission: next_at,
            probed_ms: run.probed_ms,
            observe_ms: spec.observe_ms,
            in_flight: run.in_flight,
            first_observation,
            admitted_now,
            more_due,
            owner_until: plan.m.owner_until,
        });
        if !changed && plan.m.next_at == Some(wake) {
            return Ok(plan);
        }
        let written = self
            .ctx
            .store
            .update_replay_plan(&ReplayPlanUpdate {
                id: plan.id.clone(),
                version: plan.version,
                set: PlanMut {
                    status,
                    next_at: if status.is_active() { Some(wake) } else { None },
                    state: run.value(),
                    updated_at: now,
                    ..plan.m.clone()
                },
                items: items.into_values().collect(),
            })
            .await?;
        self.append_holds(holds).await?;
        if status == PlanStatus::Completed {
            self.ctx
                .metrics
                .add_labelled(Counter::PlansEnded, &plan.queue, "completed", 1);
            self.ctx
                .audit(
                    &Actor::system("replay_plans"),
                    "replay.plan_complete",
                    Some(&plan.queue),
                    vec![plan.id.clone(), format!("completed={}", run.completed)],
                    "ok",
                )
                .await?;
        }
        Ok(written)
    }

    /// Reads the dependency's probe into `run` and `obs`.
    pub(super) async fn observe_dependency(
        &self,
        budget: &Budget,
        run: &mut RunState,
        obs: &mut Observations,
        now: Timestamp,
    ) {
        run.probed_ms = Some(now.as_millis());
        match probe::read(
            &self.cases.case_client(),
            self.broker.push_network(),
            &budget.dependency.probe_url,
        )
        .await
        {
            Ok(r) => {
                if run.baseline.is_none() {
                    run.baseline = Some(r);
                }
                run.readings.push(r);
                if run.readings.len() > 2 {
                    run.readings.remove(0);
                }
                obs.error_rate = Some(r.error_rate);
                obs.latency_ms = run.readings.iter().map(|r| r.latency_ms).collect();
            }
            Err(why) => {
                obs.budget_unobservable = true;
                run.stop_detail = Some(why);
            }
        }
    }

    /// Halts a plan with `reason`: recorded, counted, audited; its admitted items released.
    pub(super) async fn stop_plan(
        &self,
        plan: &ReplayPlanRecord,
        mut run: RunState,
        mut items: BTreeMap<u32, PlanItemRecord>,
        reason: &StopReason,
        now: Timestamp,
    ) -> BrokerResult<ReplayPlanRecord> {
        let detail = stop_words(reason, run.stop_detail.as_deref());
        run.stop_detail = Some(detail.clone());
        for i in self
            .release_admitted(
                plan,
                &mut run,
                &format!("plan_stopped:{}", reason.as_str()),
                now,
            )
            .await?
        {
            // An item observed in this advance keeps its outcome.
            items.entry(i.seq).or_insert(i);
        }
        let written = self
            .ctx
            .store
            .update_replay_plan(&ReplayPlanUpdate {
                id: plan.id.clone(),
                version: plan.version,
                set: PlanMut {
                    status: PlanStatus::Stopped,
                    stop_reason: Some(reason.as_str().to_owned()),
                    next_at: None,
                    state: run.value(),
                    updated_at: now,
                    ..plan.m.clone()
                },
                items: items.into_values().collect(),
            })
            .await?;
        self.ctx
            .metrics
            .add_labelled(Counter::PlansEnded, &plan.queue, reason.as_str(), 1);
        tracing::error!(plan_id = %plan.id, reason = reason.as_str(), "replay plan stopped: {detail}");
        self.ctx
            .audit(
                &Actor::system("replay_plans"),
                "replay.plan_stop",
                Some(&plan.queue),
                vec![plan.id.clone(), format!("reason={}", reason.as_str())],
                "ok",
            )
            .await?;
        Ok(written)
    }

    /// Looks again at a plan's held items (at most a page of them, in order): an item whose
    /// case reached a terminal state meanwhile is closed with that state; a session's
    /// successor held for its ordering goes back to waiting once every predecessor's case
    /// is terminal. Each change is an audit entry (`replay.plan_settle`,
    /// `replay.plan_release`). Answers whether an item went back to waiting.
    pub(super) async fn reexamine_held(
        &self,
        plan: &ReplayPlanRecord,
        spec: &PlanSpec,
        run: &mut RunState,
        items: &mut BTreeMap<u32, PlanItemRecord>,
        holds: &mut Vec<AuditFields>,
        now: Timestamp,
    ) -> BrokerResult<bool> {
        let held = self
            .items_in(
                &plan.id,
                PlanItemState::Held,
                redrive_store::MAX_PLAN_ITEM_PAGE,
            )
            .await?;
        let mut released = false;
        for mut item in held {
            if items.contains_key(&item.seq) {
                continue;
            }
            let case = match self.ctx.store.get_case(&item.case_id).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!(plan_id = %plan.id, case_id = %item.case_id, error = %e, "a held item's case could not be read; it stays held");
                    continue;
                }
            };
            let gate = item.detail.clone().unwrap_or_default();
            let action = if let Some(t) = case.m.state.terminal() {
                run.closed += 1;
                item.state = PlanItemState::Closed;
                item.detail = Some(format!("{t}: its case reached {t} while held ({gate})"));
                "replay.plan_settle"
            } else if gate.starts_with("ordering_")
                && let Some(order) = case.session_id.as_ref().and_then(|s| spec.sessions.get(s))
            {
                let pos = order.iter().position(|c| *c == case.id).unwrap_or(0);
                let mut clear = true;
                for before in &order[..pos] {
                    if !self.case_terminal(before).await? {
                        clear = false;
                        break;
                    }
                }
                if !clear {
                    continue;
                }
                released = true;
                item.state = PlanItemState::Waiting;
                item.detail = None;
                "replay.plan_release"
            } else {
                continue;
            };
            run.held = run.held.saturating_sub(1);
            run.bytes_held = run.bytes_held.saturating_sub(item.bytes);
            item.updated_at = now;
            let actor = Actor::system("replay_plans");
            holds.push(AuditFields {
                at: now,
                actor_id: actor.id,
                actor_name: actor.name,
                action: action.to_owned(),
                entity: Some(plan.queue.clone()),
                targets: vec![
                    plan.id.clone(),
                    item.case_id.clone(),
                    format!("gate={gate}"),
                    format!("state={}", item.state),
                ],
                outcome: "ok".to_owned(),
                client: None,
            });
            items.insert(item.seq, item);
        }
        Ok(released)
    }

    /// The audit entry of a plan's decision to hold an item (its gate named).
    pub(super) fn hold_entry(
        &self,
        plan: &ReplayPlanRecord,
        item: &PlanItemRecord,
        now: Timestamp,
    ) -> AuditFields {
        let actor = Actor::system("replay_plans");
        AuditFields {
            at: now,
            actor_id: actor.id,
            actor_name: actor.name,
            action: "replay.plan_hold".to_owned(),
            entity: Some(plan.queue.clone()),
            targets: vec![
                plan.id.clone(),
                item.case_id.clone(),
                format!("gate={}", item.detail.as_deref().unwrap_or_default()),
            ],
            outcome: "ok".to_owned(),
            client: None,
        }
    }

    pub(super) async fn append_holds(&self, holds: Vec<AuditFields>) -> BrokerResult<()> {
        if holds.is_empty() {
            return Ok(());
        }
        self.ctx.store.append_audit(&holds).await?;
        self.ctx.metrics.audit_entries.add(holds.len() as u64);
        Ok(())
    }

    /// Whether a replay in flight, admitted at `admitted`, is due to be looked at: not
    /// within [`OBSERVE_ITEM_MS`] of the last look, nor within a quarter of its age (at
    /// most [`OBSERVE_ITEM_MAX_MS`]): a replay that takes long is asked about less often.
    /// Remembers this look when `mark`.
    pub(super) fn observe_due(
        &self,
        plan_id: &str,
        seq: u32,
        admitted: Timestamp,
        now: Timestamp,
        mark: bool,
    ) -> bool {
        let mut seen = self
            .state
            .observed
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let key = (plan_id.to_owned(), seq);
        let age = now.as_millis() - admitted.as_millis();
        let gap = (age / 4).clamp(OBSERVE_ITEM_MS, OBSERVE_ITEM_MAX_MS);
        if seen.get(&key).is_some_and(|t| now.as_millis() - t < gap) {
            return false;
        }
        if !mark {
            return true;
        }
        if seen.len() >= MAX_OBSERVED {
            seen.clear();
        }
        seen.insert(key, now.as_millis());
        true
    }

    /// When the first of `items` (replays in flight) is due to be looked at again (see
    /// [`Plans::observe_due`]; one never looked at by this node: now).
    pub(super) fn next_observation(
        &self,
        plan_id: &str,
        items: &[&PlanItemRecord],
        now: Timestamp,
    ) -> Option<Timestamp> {
        let seen = self
            .state
            .observed
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        items
            .iter()
            .map(|i| {
                let age = now.as_millis() - i.updated_at.as_millis();
                let gap = (age / 4).clamp(OBSERVE_ITEM_MS, OBSERVE_ITEM_MAX_MS);
                match seen.get(&(plan_id.to_owned(), i.seq)) {
                    Some(t) => Timestamp(t + gap),
                    None => now,
                }
            })
            .min()
    }
}

/// What a look read ahead for its admissions, beside its observation.
#[derive(Default)]
pub(super) struct ReadAhead {
    /// The first waiting items.
    pub(super) waiting: Vec<PlanItemRecord>,
    /// Whether they are all the waiting items.
    pub(super) all: bool,
    /// What the gates of the first of them read.
    pub(super) fetched: Vec<(u32, Option<Pre>)>,
}

/// What one look at a plan holds while it runs: the plan as read (or as its admissions
/// wrote it), its spec and budget, its run state and pacer, the pass's context, what it
/// observed, the items it changed and the holds it audits.
pub(super) struct Advance {
    pub(super) plan: ReplayPlanRecord,
    pub(super) spec: PlanSpec,
    pub(super) budget: Budget,
    pub(super) run: RunState,
    pub(super) pacer: Pacer,
    pub(super) ctx: Arc<CaseContext>,
    pub(super) now: Timestamp,
    pub(super) running: bool,
    pub(super) obs: Observations,
    pub(super) items: BTreeMap<u32, PlanItemRecord>,
    pub(super) holds: Vec<AuditFields>,
    pub(super) changed: bool,
    pub(super) admitted_now: bool,
}

impl Advance {
    /// The current admission window, counted.
    pub(super) fn window(&self) -> Window {
        Window {
            number: self.run.window,
            admitted: self.run.window_admitted,
            in_flight: self.pacer.in_flight,
        }
    }
}

/// What step 2 of a look found: the replays in flight, whether more were due than it
/// looked at, what it read ahead, and the items it saw settle.
struct InFlight {
    in_flight: Vec<PlanItemRecord>,
    more_due: bool,
    ahead: ReadAhead,
    settled: BTreeSet<u32>,
}
