//! One pass of automatic replay: a slot of the node budget, a claim, each record
//! judged, the republish (records of one chunk combined per queue, others in order on
//! their own), the archive, the failures and the audit.

use super::*;

/// Records of several chunks republishing at once in one pass.
const MAX_IN_FLIGHT: usize = 2;

/// How a record's republish task ended: the record, how to end it, the events and chunks
/// sent, and the outcome.
pub(super) type RepublishDone = (Key, ReplayFinish, u64, u64, BrokerResult<()>);

/// Takes the end of a republish task into the pass.
pub(super) fn settle_task(
    done: Result<RepublishDone, tokio::task::JoinError>,
    work: &mut Work,
    pass: &mut ReplayPass,
) {
    match done {
        Ok((key, finish, sent, chunks, result)) => {
            pass.republished += sent;
            pass.chunks += chunks;
            match result {
                Ok(()) => work.finish(key, finish, sent),
                Err(e) => work.failed(key, e),
            }
        }
        // A panicked task's record keeps its claim and is judged again when it runs out.
        Err(e) => tracing::error!(error = %e, "a replay republish task failed"),
    }
}

/// The policies of the queues a pass met (`None`: the queue is gone), each read once, with
/// its version.
#[derive(Default)]
pub(super) struct Policies(BTreeMap<EntityName, Option<(QueuePolicy, u64)>>);

impl Policies {
    /// The policy of `queue` and its version, read from the store the first time.
    async fn of(
        &mut self,
        replay: &Replay,
        queue: &EntityName,
    ) -> BrokerResult<Option<(QueuePolicy, u64)>> {
        if let Some(p) = self.0.get(queue) {
            return Ok(p.clone());
        }
        let p = match replay.ctx.store.get_queue(queue).await {
            Ok(q) => Some((q.policy, q.policy_version)),
            Err(StoreError::QueueNotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        self.0.insert(queue.clone(), p.clone());
        Ok(p)
    }
}

/// A claimed record: its queue, id, and failed judgements so far.
#[derive(Debug, Clone)]
pub(super) struct Key {
    pub(super) queue: EntityName,
    pub(super) id: String,
    pub(super) failures: u32,
}

/// What a pass has left to write, gathered so that it is written in few store calls.
#[derive(Default)]
pub(super) struct Work {
    /// Records of one chunk, per queue, in claim order.
    combined: BTreeMap<EntityName, Vec<(Key, Vec<NewMessage>, ReplayFinish)>>,
    /// Records to end, with the events they sent.
    finished: Vec<(Key, ReplayFinish, u64)>,
    /// Records whose judgement failed.
    failed: Vec<(Key, BrokerError)>,
    /// Audit entries: record ids per queue and action.
    audit: BTreeMap<(EntityName, &'static str), Vec<String>>,
}

impl Work {
    pub(super) fn combine(&mut self, key: Key, messages: Vec<NewMessage>, finish: ReplayFinish) {
        self.combined
            .entry(key.queue.clone())
            .or_default()
            .push((key, messages, finish));
    }

    pub(super) fn finish(&mut self, key: Key, finish: ReplayFinish, sent: u64) {
        self.finished.push((key, finish, sent));
    }

    pub(super) fn failed(&mut self, key: Key, e: BrokerError) {
        self.failed.push((key, e));
    }

    pub(super) fn judged(&mut self, key: &Key) {
        self.audit
            .entry((key.queue.clone(), "replay.judge"))
            .or_default()
            .push(key.id.clone());
    }
}

impl Replay {
    /// One pass: takes a slot of the node-wide replay budget, claims one due candidate
    /// (a record: one item, its bytes charged) and judges it. Public so
    /// that tests drive replay on a manual clock.
    ///
    /// Quarantines are written record by record, first. The republish of a record whose
    /// events fit one chunk is combined with other such records of the same queue into
    /// shared store writes under the same budgets (a failed write fails each of its
    /// records whole, as its one chunk failing would); a record of several chunks
    /// republishes them in order on its own. The records are then archived in one store
    /// call.
    #[tracing::instrument(level = "debug", skip_all,
        fields(queue = tracing::field::Empty, dead_letters = tracing::field::Empty))]
    pub async fn replay_once(&self) -> BrokerResult<ReplayPass> {
        let settings = self.replay_settings();
        let mut pass = ReplayPass::default();
        let claimed = self.claim(&settings, &mut pass).await?;
        if claimed.is_empty() {
            return Ok(pass);
        }
        let span = tracing::Span::current();
        let queues: std::collections::BTreeSet<&str> =
            claimed.iter().map(|r| r.queue.as_str()).collect();
        span.record(
            "queue",
            queues.into_iter().collect::<Vec<_>>().join(",").as_str(),
        );
        let ids: Vec<&str> = claimed.iter().map(|r| r.id.as_str()).collect();
        span.record("dead_letters", ids.join(",").as_str());
        let register = self.broker.register().await?;
        let mut policies = Policies::default();
        let mut work = Work::default();
        let mut in_flight: tokio::task::JoinSet<RepublishDone> = tokio::task::JoinSet::new();
        for record in claimed {
            pass.judged += 1;
            let Some((policy, version)) = policies.of(self, &record.queue).await? else {
                // The queue went, and its dead letters with it.
                pass.already_done += 1;
                continue;
            };
            if !policy.auto_replay.enabled {
                // Replay was turned off after the candidate was written: the record
                // stays live; its claim runs out and it is looked at again later.
                continue;
            }
            let key = Key {
                queue: record.queue.clone(),
                id: record.id.clone(),
                failures: record.replay.failures,
            };
            let prepared = self
                .prepare(record, (&policy, version), &register, &mut pass)
                .await;
            match prepared {
                Ok(Prepared::Done) => work.judged(&key),
                Ok(Prepared::AlreadyDone) => pass.already_done += 1,
                Ok(Prepared::Finish(finish)) => work.finish(key, finish, 0),
                Ok(Prepared::Republish {
                    messages,
                    chunks,
                    finish,
                }) if chunks.len() <= 1 => work.combine(key, messages, finish),
                Ok(Prepared::Republish {
                    messages,
                    chunks,
                    finish,
                }) => {
                    // Records of several chunks republish in tasks of their own (at most
                    // MAX_IN_FLIGHT at once), so that the next record is judged while the
                    // store writes this one's chunks; each record's chunks stay in order.
                    while in_flight.len() >= MAX_IN_FLIGHT {
                        if let Some(done) = in_flight.join_next().await {
                            settle_task(done, &mut work, &mut pass);
                        }
                    }
                    let task = self.clone().republish_in_order(
                        key.queue.clone(),
                        messages,
                        chunks,
                        policy.clone(),
                    );
                    in_flight.spawn(async move {
                        let (sent, chunks, result) = task.await;
                        (key, finish, sent, chunks, result)
                    });
                }
                Err(e) => work.failed(key, e),
            }
        }
        while let Some(done) = in_flight.join_next().await {
            settle_task(done, &mut work, &mut pass);
        }
        self.write_out(work, &policies, &settings, &mut pass)
            .await?;
        Ok(pass)
    }

    /// The claim of one pass: a slot of the node-wide replay budget (the plans' pacer: one
    /// record a slot, its bytes charged once claimed), then the due candidates. A pass the
    /// budget holds back claims nothing and says when the next slot comes; records whose
    /// rows cannot be read are logged once and set aside in `pass`.
    async fn claim(
        &self,
        settings: &ReplaySettings,
        pass: &mut ReplayPass,
    ) -> BrokerResult<Vec<DeadLetterRecord>> {
        let now = self.now();
        let plans = self.broker.plans();
        let slot = match plans.node_reserve(now) {
            Ok(slot) => slot,
            Err(t) => {
                pass.next_at = Some(t);
                return Ok(Vec::new());
            }
        };
        let claim = match self
            .ctx
            .store
            .claim_replay(now, REPLAY_PER_SLOT, settings.claim_ms)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                plans.node_unreserve(slot);
                return Err(e.into());
            }
        };
        if claim.records.is_empty() {
            // Nothing was due: the slot is not spent.
            plans.node_unreserve(slot);
        }
        let bytes: u64 = claim.records.iter().map(|r| r.body.len() as u64).sum();
        plans.node_charge(bytes, now);
        for u in &claim.undecodable {
            // Set aside by this claim alone: logged once, then left out of every pass.
            tracing::error!(queue = %u.queue, dead_letter_id = %u.id, reason = %u.reason,
                "a dead letter cannot be read; it is set aside from automatic replay until it is fixed or removed");
        }
        pass.undecodable = claim.undecodable;
        Ok(claim.records)
    }

    /// What a pass writes once every record is judged: the combined republishes, the
    /// archive, the failed judgements, and one audit entry per queue and action.
    async fn write_out(
        &self,
        mut work: Work,
        policies: &Policies,
        settings: &ReplaySettings,
        pass: &mut ReplayPass,
    ) -> BrokerResult<()> {
        self.republish_combined(&mut work, policies, pass).await;
        self.finish_all(&mut work, pass).await;
        for (key, e) in std::mem::take(&mut work.failed) {
            pass.failed += 1;
            self.judgement_failed(&key.queue, &key.id, key.failures, &e, settings)
                .await;
            work.audit
                .entry((key.queue, "replay.fail"))
                .or_default()
                .push(key.id);
        }
        let actor = Actor::system("replay");
        for ((queue, action), ids) in std::mem::take(&mut work.audit) {
            self.ctx
                .audit(&actor, action, Some(queue.as_str()), ids, "ok")
                .await?;
        }
        Ok(())
    }

    /// Republishes the records whose events fit one chunk, per queue, in shared writes
    /// under the queue's budgets. A write that fails fails each record in it.
    pub(super) async fn republish_combined(
        &self,
        work: &mut Work,
        policies: &Policies,
        pass: &mut ReplayPass,
    ) {
        for (queue, records) in std::mem::take(&mut work.combined) {
            let Some(Some((policy, _))) = policies.0.get(&queue) else {
                continue;
            };
            let budget = &policy.auto_replay;
            let mut batch: Vec<NewMessage> = Vec::new();
            let mut owners: Vec<(Key, ReplayFinish, u64)> = Vec::new();
            let mut bytes = 0usize;
            let mut records = records.into_iter().peekable();
            while let Some((key, messages, finish)) = records.next() {
                bytes += messages.iter().map(message_size).sum::<usize>();
                let n = messages.len() as u64;
                batch.extend(messages);
                owners.push((key, finish, n));
                let full = match records.peek() {
                    None => true,
                    Some((_, next, _)) => {
                        batch.len() + next.len() > budget.max_chunk_events as usize
                            || bytes + next.iter().map(message_size).sum::<usize>()
                                > budget.max_chunk_bytes as usize
                    }
                };
                if !full {
                    continue;
                }
                let n_batch = batch.len() as u64;
                match self
                    .ctx
                    .store
                    .enqueue(&queue, std::mem::take(&mut batch), self.now())
                    .await
                {
                    Ok(_) => {
                        self.wake_republished(&queue);
                        pass.republished += n_batch;
                        pass.chunks += 1;
                        self.ctx
                            .metrics
                            .add(Counter::ReplayRepublished, queue.as_str(), n_batch);
                        for (key, finish, n) in owners.drain(..) {
                            work.finish(key, finish, n);
                        }
                    }
                    Err(e) => {
                        let e: BrokerError = e.into();
                        for (key, _, _) in owners.drain(..) {
                            work.failed(key, BrokerError::invalid("republish", e.to_string()));
                        }
                    }
                }
                bytes = 0;
            }
        }
    }

    /// Archives (or deletes) every record whose events went out, in one store call,
    /// best-effort: a failure is logged and nothing is retried (retrying would republish
    /// events that already went out); an un-archived record stays live until retention.
    pub(super) async fn finish_all(&self, work: &mut Work, pass: &mut ReplayPass) {
        let finished = std::mem::take(&mut work.finished);
        if finished.is_empty() {
            return;
        }
        let items: Vec<(EntityName, String, ReplayFinish)> = finished
            .iter()
            .map(|(k, f, _)| (k.queue.clone(), k.id.clone(), f.clone()))
            .collect();
        match self.ctx.store.finish_replays(&items, self.now()).await {
            Ok(done) => {
                for ((key, finish, n), did) in finished.into_iter().zip(done) {
                    if did && let ReplayFinish::Archive(j) = &finish {
                        pass.archived += 1;
                        self.ctx
                            .metrics
                            .add(Counter::ReplayArchived, key.queue.as_str(), 1);
                        self.close_replayed_case(&key, j).await;
                    }
                    tracing::debug!(queue = %key.queue, dead_letter_id = %key.id,
                        republished = n, "dead letter replayed");
                    work.judged(&key);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, records = items.len(),
                    "replayed dead letters could not be archived; they stay live until retention removes them");
                for (key, _, _) in finished {
                    work.judged(&key);
                }
            }
        }
    }

    /// Republishes one record's chunks in order; a chunk that fails (an event over the
    /// origin's size limit, a store error) stops those behind it. Answers the events and
    /// chunks sent, and how it ended.
    pub(super) async fn republish_in_order(
        self,
        queue: EntityName,
        messages: Vec<NewMessage>,
        chunks: Vec<std::ops::Range<usize>>,
        policy: QueuePolicy,
    ) -> (u64, u64, BrokerResult<()>) {
        let mut messages = messages.into_iter();
        let (mut sent, mut done) = (0, 0);
        for chunk in chunks {
            let batch: Vec<NewMessage> = messages.by_ref().take(chunk.len()).collect();
            if let Err(e) = check_sizes(&batch, &policy) {
                return (sent, done, Err(e));
            }
            let n = batch.len() as u64;
            if let Err(e) = self.ctx.store.enqueue(&queue, batch, self.now()).await {
                return (sent, done, Err(e.into()));
            }
            self.wake_republished(&queue);
            sent += n;
            done += 1;
            self.ctx
                .metrics
                .add(Counter::ReplayRepublished, queue.as_str(), n);
        }
        (sent, done, Ok(()))
    }

    /// Records a failed judgement and flags a record that keeps failing.
    pub(super) async fn judgement_failed(
        &self,
        queue: &EntityName,
        id: &str,
        failed_before: u32,
        error: &BrokerError,
        settings: &ReplaySettings,
    ) {
        let now = self.now();
        let message = error.to_string();
        // The delay grows with the record's failures, this one included.
        let failures = failed_before.saturating_add(1);
        let retry_at =
            now.plus_millis(i64::try_from(judgement::retry_delay_ms(failures)).unwrap_or(i64::MAX));
        self.ctx
            .metrics
            .add(Counter::ReplayFailures, queue.as_str(), 1);
        match self
            .ctx
            .store
            .fail_replay(queue, id, &message, retry_at)
            .await
        {
            Ok(Some(n)) if n >= settings.flag_after_failures => {
                if n == settings.flag_after_failures {
                    self.ctx
                        .metrics
                        .add(Counter::ReplayFlagged, queue.as_str(), 1);
                }
                tracing::error!(queue = %queue, dead_letter_id = id, failures = n,
                    error = %message, "replay keeps failing on this dead letter; it is kept and retried");
            }
            Ok(Some(n)) => tracing::warn!(queue = %queue, dead_letter_id = id, failures = n,
                error = %message, "replay judgement failed; retrying after a backoff"),
            Ok(None) => {}
            Err(e) => tracing::warn!(queue = %queue, dead_letter_id = id, error = %e,
                "a failed replay judgement could not be recorded; its claim runs out and it is judged again"),
        }
    }
}
