//! The run of one task: receive a batch from the source under the mover's lock, hold it
//! to the task's rate, send each message to its destination (through its recovery
//! case's gates), complete it on the source; a heartbeat with the progress before every
//! batch, and the end written and audited. The store-side steps are the [`Mover`]'s
//! (over its context); the queue operations the [`Broker`]'s (see the module docs).

use redrive_core::case::by_hand::HandOperation;
use redrive_core::case::intent_identity;
use redrive_core::message::{
    DEAD_LETTER_DESCRIPTION_PROPERTY, DEAD_LETTER_REASON_PROPERTY, DEAD_LETTER_SOURCE_PROPERTY,
};
use redrive_core::plan::{Admission, Pacer};
use redrive_core::{EntityName, PropertyValue, Timestamp};
use redrive_store::{
    Delivery, MoveTaskProgress, MoveTaskStatus, PlanStatus, SettleAction, Settlement,
    StoredMessage, move_plans,
};
use tokio_util::sync::CancellationToken;

use super::spec::{
    AUTHORIZATION_REVOKED, Held, MOVE_BATCH, MoveSpec, MoveTask, move_budget, move_rate,
};
use super::{MOVE_LOCK_MS, Mover, Stop, after, heartbeat_ms};
use crate::cases::by_hand::{HandPass, HandTarget};
use crate::{
    Actor, Broker, BrokerError, BrokerResult, LockBounds, Outgoing, ReceiveOptions, Settle,
};

/// The pacer of a task as stored (its next slot), or a fresh one.
fn pacer_of(record: &Held) -> Pacer {
    Pacer {
        next_item_ms: record.part.next_slot.map_or(0.0, |t| t.0 as f64),
        ..Pacer::default()
    }
}

/// The pacer's state as stored: its next slot, rounded up to the millisecond (never
/// earlier than the pacer's).
fn next_slot(p: &Pacer) -> Option<Timestamp> {
    (p.next_item_ms > 0.0).then(|| Timestamp(p.next_item_ms.ceil() as i64))
}

impl Mover {
    /// Writes the end of a task this node runs and audits it (when the write took), with
    /// how many messages their recovery case refused (`skipped`).
    #[tracing::instrument(level = "debug", skip_all,
        fields(task = %record.plan.id, source = %record.plan.queue, destination = ?record.part.destination))]
    pub(super) async fn end(
        &self,
        record: &Held,
        owner: &Actor,
        end: &MoveTaskProgress,
        skipped: u64,
    ) {
        let handle = &record.plan.id;
        let written =
            match move_plans::progress(&*self.ctx.store, handle, self.node(), end, self.ctx.now())
                .await
                .and_then(|w| w.map(|p| p.move_part().map(|m| (p, m))).transpose())
            {
                Ok(w) => w,
                Err(e) => {
                    tracing::error!(error = %e, handle, "the end of a move task was not written");
                    return;
                }
            };
        let Some((plan, w)) = written else {
            tracing::info!(handle, "message move task is run by another node now");
            return;
        };
        let mut targets = vec![
            handle.clone(),
            format!("moved={}", w.moved),
            format!("skipped={skipped}"),
        ];
        if let Some(f) = &w.failure_reason {
            targets.push(format!("failure={f}"));
        }
        let outcome = w.status.as_str().to_ascii_lowercase();
        if let Err(e) = self
            .ctx
            .audit(owner, "move_task.end", Some(&plan.queue), targets, &outcome)
            .await
        {
            tracing::error!(error = %e, handle, "audit entry of a move task's end not written");
        }
    }

    /// Writes progress and the pacing state and renews the heartbeat; says whether to go
    /// on.
    async fn beat(&self, handle: &str, moved: u64, pacer: &Pacer) -> Option<Stop> {
        let now = self.ctx.now();
        let p = MoveTaskProgress {
            status: MoveTaskStatus::Running,
            moved,
            failure_reason: None,
            runner_until: Some(after(now, heartbeat_ms())),
            next_slot: next_slot(pacer),
        };
        let written = move_plans::progress(&*self.ctx.store, handle, self.node(), &p, now).await;
        self.changed();
        match written {
            Ok(None) => Some(Stop::Lost),
            Ok(Some(w)) if w.m.status == PlanStatus::Cancelling => Some(Stop::Cancelled),
            Ok(Some(_)) => None,
            Err(e) => {
                // The receive that follows meets the same store; a heartbeat missed here
                // is renewed at the next batch (or the task is resumed elsewhere).
                tracing::warn!(error = %e, handle, "move task progress not written");
                None
            }
        }
    }

    /// Lets task `handle` go at shutdown: left running, without a heartbeat, with its
    /// progress and pacing state, so that another node (or this one, after a restart)
    /// resumes it at once.
    async fn let_go(&self, handle: &str, moved: u64, pacer: &Pacer) {
        let go = MoveTaskProgress {
            status: MoveTaskStatus::Running,
            moved,
            failure_reason: None,
            runner_until: None,
            next_slot: next_slot(pacer),
        };
        if let Err(e) =
            move_plans::progress(&*self.ctx.store, handle, self.node(), &go, self.ctx.now()).await
        {
            tracing::warn!(error = %e, handle,
                "a move task was not let go at shutdown; it resumes when its heartbeat runs out");
        }
        tracing::info!(handle, moved, "message move task left for another node");
    }
}

impl Broker {
    /// The run of one task on this node, until it ends, is cancelled, is lost to another
    /// node, or is let go at shutdown; its end written and audited.
    #[tracing::instrument(level = "debug", skip_all,
        fields(task = %record.plan.id, source = %record.plan.queue, destination = ?record.part.destination))]
    pub(super) async fn run_move(
        &self,
        record: Held,
        owner: Actor,
        cancel: CancellationToken,
        revoked: CancellationToken,
    ) {
        self.run_move_to_end(record, owner, cancel, revoked).await;
        // Whatever the end, what waits for the task looks again.
        self.mover().changed();
    }

    /// [`Broker::run_move`] but for its signal: the run, its end written unless the task
    /// was lost or let go.
    async fn run_move_to_end(
        &self,
        record: Held,
        owner: Actor,
        cancel: CancellationToken,
        revoked: CancellationToken,
    ) {
        let handle = record.plan.id.clone();
        let spec = MoveTask::from(&record).spec;
        let mut moved = record.part.moved;
        let mut pacer = pacer_of(&record);
        let stop = cancel.child_token();
        let mut skipped: Vec<Delivery> = Vec::new();
        let result = tokio::select! {
            r = self.move_loop(&handle, &spec, &stop, &mut moved, &mut pacer, &mut skipped) => r,
            () = revoked.cancelled() => Err(AUTHORIZATION_REVOKED.to_owned()),
        };
        // Messages their recovery case refused stay on the source, available again.
        let skipped_count = skipped.len() as u64;
        self.release(&handle, &spec.source, skipped).await;
        // A revocation that lands between batches ends the loop through the select; one
        // noticed only after the loop ended still counts as the reason it stopped.
        let result = if revoked.is_cancelled() {
            Err(AUTHORIZATION_REVOKED.to_owned())
        } else {
            result
        };
        let mover = self.mover();
        mover.with(|m| m.remove(&handle));
        let (status, failure, runner_until) = match result {
            Err(reason) => (MoveTaskStatus::Failed, Some(reason), None),
            Ok(Stop::Lost) => {
                tracing::info!(handle, "message move task is run by another node now");
                return;
            }
            Ok(Stop::ShutDown) => {
                mover.let_go(&handle, moved, &pacer).await;
                return;
            }
            Ok(Stop::Cancelled) => (MoveTaskStatus::Cancelled, None, None),
            Ok(Stop::Done) => (MoveTaskStatus::Completed, None, None),
        };
        let end = MoveTaskProgress {
            status,
            moved,
            failure_reason: failure,
            runner_until,
            next_slot: next_slot(&pacer),
        };
        mover.end(&record, &owner, &end, skipped_count).await;
        tracing::info!(handle, skipped = skipped_count, "message move task ended");
    }

    /// Moves until the source is empty, the task is cancelled, or the broker shuts down;
    /// `Err` with the reason when a message cannot be moved. `moved` counts as it goes;
    /// `pacer` holds the task to its rate (see the module docs). A message its recovery
    /// case refuses stays on the source, held in `skipped` (once each) until the task
    /// ends, and the task goes on past it.
    async fn move_loop(
        &self,
        handle: &str,
        spec: &MoveSpec,
        cancel: &CancellationToken,
        moved: &mut u64,
        pacer: &mut Pacer,
        skipped: &mut Vec<Delivery>,
    ) -> Result<Stop, String> {
        let stopped = |c: &CancellationToken| {
            if self.inner.shutdown.is_cancelled() {
                Stop::ShutDown
            } else if c.is_cancelled() {
                Stop::Cancelled
            } else {
                Stop::Done
            }
        };
        let budget = move_budget(spec.max_per_second);
        // A batch never takes more than a second of the rate.
        let want = MOVE_BATCH.min(move_rate(spec.max_per_second));
        // Messages received and not yet moved (a look taken before a wait).
        let mut held: Vec<Delivery> = Vec::new();
        // Whether the last receive came back short: the source may be empty.
        let mut short = false;
        loop {
            if cancel.is_cancelled() {
                self.release(handle, &spec.source, held).await;
                return Ok(stopped(cancel));
            }
            if let Some(stop) = self.mover().beat(handle, *moved, pacer).await {
                self.release(handle, &spec.source, held).await;
                return Ok(stop);
            }
            if let Admission::At(at) = pacer.check(&budget, 0, self.now()) {
                if short && held.is_empty() {
                    held = self.receive_batch(&spec.source, want).await?;
                    if held.is_empty() {
                        return Ok(Stop::Done);
                    }
                    short = held.len() < want as usize;
                }
                tokio::select! {
                    () = self.inner.clock.sleep_until(at) => {}
                    () = cancel.cancelled() => {
                        self.release(handle, &spec.source, held).await;
                        return Ok(stopped(cancel));
                    }
                }
                // Beat again first: a cancel asked elsewhere is seen before moving on.
                continue;
            }
            if held.is_empty() {
                held = self.receive_batch(&spec.source, want).await?;
                if held.is_empty() {
                    return Ok(Stop::Done);
                }
            }
            short = held.len() < want as usize;
            // The batch takes its slots together.
            let now = self.now();
            for _ in &held {
                pacer.admit(&budget, 0, now);
            }
            let mut rest = std::mem::take(&mut held).into_iter();
            while let Some(d) = rest.next() {
                let one = self.move_one(handle, spec, &d).await;
                pacer.finish();
                match one {
                    Err(reason) => {
                        self.release(
                            handle,
                            &spec.source,
                            std::iter::once(d).chain(rest).collect(),
                        )
                        .await;
                        return Err(reason);
                    }
                    Ok(true) => *moved += 1,
                    Ok(false) => {
                        match skipped
                            .iter_mut()
                            .find(|s| s.message.sequence == d.message.sequence)
                        {
                            // Received again after its lock ran out: counted once.
                            Some(s) => *s = d,
                            None => skipped.push(d),
                        }
                    }
                }
            }
            tokio::task::yield_now().await;
        }
    }

    /// Receives up to `want` messages of `source` under the mover's lock.
    async fn receive_batch(&self, source: &str, want: u32) -> Result<Vec<Delivery>, String> {
        self.receive(
            source,
            ReceiveOptions {
                max: want,
                lock_ms: Some(MOVE_LOCK_MS),
                wait_ms: 0,
                session: None,
                until_revoked: None,
            },
        )
        .await
        .map_err(|e| format!("receiving from {source}: {e}"))
    }

    /// Releases messages received and not moved (available again at once).
    async fn release(&self, handle: &str, source: &str, held: Vec<Delivery>) {
        if held.is_empty() {
            return;
        }
        let release: Vec<Settlement> = held
            .into_iter()
            .map(|d| Settlement {
                lock_token: d.lock_token,
                action: SettleAction::Abandon {
                    delay_ms: Some(0),
                    last_attempt: None,
                },
            })
            .collect();
        if let Err(e) = self.settle_items(source, release, LockBounds::Native).await {
            tracing::warn!(handle, error = %e, "releasing unmoved messages failed");
        }
    }

    /// Sends one delivery to its destination, then completes it on the source: `true`.
    /// A message that stands for a recovery case (the latest case of its intent on the
    /// queue that dead-lettered it, its `DeadLetterSource`) goes through the case's gates
    /// first (`cases::by_hand`); refused, it is not sent (`false`, audited
    /// `move_task.move` with the reason).
    async fn move_one(&self, handle: &str, spec: &MoveSpec, d: &Delivery) -> Result<bool, String> {
        let m = &d.message;
        let dest = match (
            &spec.destination,
            m.properties.get(DEAD_LETTER_SOURCE_PROPERTY),
        ) {
            (Some(dest), _) => dest.clone(),
            (None, Some(PropertyValue::String(q))) => q.clone(),
            (None, _) => {
                return Err(format!(
                    "message {} has no original source queue to return to",
                    m.message_id
                ));
            }
        };
        let pass = match self.move_gate(handle, spec, d, &dest).await {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(false),
            Err(e) => return Err(format!("judging message {}: {e}", m.message_id)),
        };
        let out = outgoing(m);
        let sent = match self.send(&dest, vec![out.clone()]).await {
            Ok(sent) => sent,
            Err(e) => {
                self.cases().hand_failed(&pass, &e).await;
                return Err(format!("sending message {} to {dest}: {e}", m.message_id));
            }
        };
        let mut sent_id = sent.first().map(|e| e.message_id.clone());
        if sent.first().is_some_and(|e| e.duplicate) {
            // The destination's duplicate detection knows the id: moved messages are not
            // duplicates, so send it under a new id rather than lose it.
            let fresh = Outgoing {
                message_id: None,
                ..out
            };
            match self.send(&dest, vec![fresh]).await {
                Ok(again) => sent_id = again.first().map(|e| e.message_id.clone()),
                Err(e) => {
                    self.cases().hand_failed(&pass, &e).await;
                    return Err(format!("sending message {} to {dest}: {e}", m.message_id));
                }
            }
        }
        self.cases()
            .hand_delivered(pass, sent_id.as_deref(), &spec.owner)
            .await;
        let done = self
            .settle(&spec.source, vec![(d.lock_token.parse(), Settle::Complete)])
            .await
            .map_err(|e| format!("completing message {}: {e}", m.message_id))?;
        if let Some(Err(e)) = done.first() {
            // The lock ran out: the message stays on the source and may be moved again.
            tracing::warn!(message_id = %m.message_id, error = %e,
                "moved message could not be completed on the source");
        }
        Ok(true)
    }

    /// The gate of moving `d` to `dest` (see [`Broker::move_one`]): `Ok(None)` when its
    /// case refuses it (audited); `Err` when the case could not be asked.
    async fn move_gate(
        &self,
        handle: &str,
        spec: &MoveSpec,
        d: &Delivery,
        dest: &str,
    ) -> BrokerResult<Option<HandPass>> {
        let m = &d.message;
        let case = match m.properties.get(DEAD_LETTER_SOURCE_PROPERTY) {
            Some(PropertyValue::String(q)) => match q.parse::<EntityName>() {
                Ok(origin) => {
                    let intent = intent_identity(m.intent.as_deref(), &m.message_id);
                    self.cases().case_of_intent(&origin, intent).await?
                }
                Err(_) => None,
            },
            _ => None,
        };
        let target = HandTarget {
            operation: HandOperation::MoveTask,
            message_id: m.message_id.clone(),
            destination: dest.to_owned(),
            digest: redrive_core::digest::sha256_hex(&m.body),
        };
        match self.cases().hand_gate(case, target, &spec.owner).await {
            Ok(p) => Ok(Some(p)),
            Err(e @ BrokerError::RedeliveryRefused(_)) => {
                let case_id = match &e {
                    BrokerError::RedeliveryRefused(r) => r.case_id.clone(),
                    _ => String::new(),
                };
                tracing::info!(handle, message_id = %m.message_id, case_id = %case_id,
                    error = %e, "message move task skipped a message its recovery case refuses");
                let outcome = format!("error:{}", e.code_hint());
                self.mover()
                    .ctx
                    .audit(
                        &spec.owner,
                        "move_task.move",
                        Some(&spec.source),
                        vec![handle.to_owned(), m.message_id.clone(), case_id],
                        &outcome,
                    )
                    .await?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// The message to send for a moved one: the same id, body and properties, without the
/// dead-letter properties.
fn outgoing(m: &StoredMessage) -> Outgoing {
    let mut properties = m.properties.clone();
    for p in [
        DEAD_LETTER_REASON_PROPERTY,
        DEAD_LETTER_DESCRIPTION_PROPERTY,
        DEAD_LETTER_SOURCE_PROPERTY,
    ] {
        properties.remove(p);
    }
    Outgoing {
        message_id: Some(m.message_id.clone()),
        body: m.body.clone(),
        content_type: m.content_type.clone(),
        properties,
        correlation_id: m.correlation_id.clone(),
        session_id: m.session_id.clone(),
        message_type: m.message_type.clone(),
        intent: m.intent.clone(),
        valid_until: m.valid_until,
        scheduled_at: None,
        ttl_ms: None,
    }
}
