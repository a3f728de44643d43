//! The judgement of one claimed record: its events parsed and judged, its quarantine
//! written first, and what is left to republish prepared in chunks.

use super::*;

/// What the judgement of one record left to do.
pub(super) enum Prepared {
    /// Quarantined whole by this judgement.
    Done,
    /// Gone or judged already: nothing to do.
    AlreadyDone,
    /// Nothing to republish; end the record so.
    Finish(ReplayFinish),
    /// Republish these messages in these chunks, then end the record so.
    Republish {
        messages: Vec<NewMessage>,
        chunks: Vec<std::ops::Range<usize>>,
        finish: ReplayFinish,
    },
}

/// One event of a record, ready to judge and to republish.
pub(super) enum Events {
    /// The record's message.
    Message,
    /// Parsed events of a record of events.
    Parsed(Vec<DeadLetteredEvent>),
}

impl Replay {
    /// Judges one claimed record and writes its quarantine (see the module docs for the
    /// order of effects); answers what is left to republish.
    #[tracing::instrument(level = "debug", skip_all,
        fields(queue = %record.queue, dead_letter = %record.id))]
    pub(super) async fn prepare(
        &self,
        record: DeadLetterRecord,
        (policy, policy_version): (&QueuePolicy, u64),
        register: &Register,
        pass: &mut ReplayPass,
    ) -> BrokerResult<Prepared> {
        let now = self.now();
        let queue = record.queue.clone();
        let events = match record.format {
            RecordFormat::Message => Events::Message,
            RecordFormat::Events => match dead_letter_events::parse_events(&record.body) {
                Ok(ev) => Events::Parsed(ev),
                Err(e) => {
                    let mut j =
                        Judgement::new(now.as_millis(), Some(QuarantineCause::SchemaInvalid));
                    j.error = Some(e.to_string());
                    return self.quarantine_whole(&record, j, None, 0, pass).await;
                }
            },
        };
        let refs = event_refs(&record, &events);
        let destination = Destination { exists: true };
        let part = judgement::partition(&policy.auto_replay, register, &queue, destination, &refs);
        // 1. Quarantine first.
        if let Some(cause) = part.single_cause() {
            let mut j = Judgement::new(now.as_millis(), Some(cause));
            j.events = judged_events(&refs, &part, None);
            let body = match &events {
                // A structured CloudEvent's own id is written back without its count too,
                // as the record's `message_id` is: the body says what the record says.
                Events::Message if is_structured(&record) => {
                    dead_letter_events::base_event_id(&record.body)
                }
                Events::Message => None,
                Events::Parsed(ev) => Some(dead_letter_events::quarantine_body(
                    &ev.iter().collect::<Vec<_>>(),
                    true,
                )),
            };
            return self
                .quarantine_whole(&record, j, body, refs.len() as u64, pass)
                .await;
        }
        if let Events::Parsed(ev) = &events
            && !self
                .quarantine_copies(&record, ev, (&refs, &part), now, pass)
                .await?
        {
            return Ok(Prepared::AlreadyDone);
        }
        // 2. What is left goes to the origin.
        if part.republish.is_empty() {
            return Ok(Prepared::Finish(ReplayFinish::Delete));
        }
        let messages = republished(&record, &events, &part, policy, now);
        let sizes: Vec<usize> = messages.iter().map(message_size).collect();
        let chunks = judgement::chunks(
            &sizes,
            policy.auto_replay.max_chunk_bytes,
            policy.auto_replay.max_chunk_events,
        );
        if chunks.len() <= 1 {
            check_sizes(&messages, policy)?;
        }
        let j = self.republish_judgement(&queue, (&refs, &part), policy_version, now);
        Ok(Prepared::Republish {
            messages,
            chunks,
            finish: ReplayFinish::Archive(j),
        })
    }

    /// Writes one quarantine copy per cause of a record of events whose events have
    /// several causes (create-if-absent; a copy this judgement created is logged and
    /// counted). Answers `false` when the record is gone (judged already).
    async fn quarantine_copies(
        &self,
        record: &DeadLetterRecord,
        ev: &[DeadLetteredEvent],
        (refs, part): (&[EventRef<'_>], &Partition),
        now: Timestamp,
        pass: &mut ReplayPass,
    ) -> BrokerResult<bool> {
        for (cause, idx) in &part.quarantine {
            let picked: Vec<&DeadLetteredEvent> = idx.iter().map(|&i| &ev[i]).collect();
            let body = dead_letter_events::quarantine_body(&picked, true);
            let mut j = Judgement::new(now.as_millis(), Some(*cause));
            j.copied_from = Some(record.id.clone());
            j.events = judged_events(refs, part, Some(*cause));
            let copy = QuarantineCopy {
                from: record.id.clone(),
                id: judgement::quarantine_copy_id(&record.id, *cause),
                body_sha256: redrive_core::digest::sha256_hex(&body),
                body,
                judgement: j,
            };
            match self
                .ctx
                .store
                .put_quarantine_copy(&record.queue, &copy)
                .await
            {
                Ok(true) => {
                    self.quarantined(&record.queue, &record.id, *cause, idx.len() as u64, pass);
                }
                Ok(false) => {}
                Err(StoreError::DeadLetterNotFound { .. }) => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(true)
    }

    /// The judgement of a republish: each event's new id, the rule, the policy version and
    /// the budget it drew from.
    fn republish_judgement(
        &self,
        queue: &EntityName,
        (refs, part): (&[EventRef<'_>], &Partition),
        policy_version: u64,
        now: Timestamp,
    ) -> Judgement {
        let mut j = Judgement::new(now.as_millis(), None);
        j.events = judged_events(refs, part, None);
        for (i, new_id) in &part.republish {
            if let Some(e) = j.events.get_mut(*i) {
                e.republished_as = Some(new_id.clone());
            }
        }
        let node = self.broker.plans().node_replay_budget();
        j.replay = Some(Box::new(judgement::ReplayRecord {
            rule: "automatic_replay".to_owned(),
            policy_version,
            budget: format!(
                "node replay budget: {} items/s, {} bytes/s",
                node.items_per_s, node.bytes_per_s
            ),
            destination: queue.to_string(),
            republished_at: now.as_millis(),
            outcome: "republished".to_owned(),
        }));
        j
    }

    pub(super) async fn quarantine_whole(
        &self,
        record: &DeadLetterRecord,
        judgement: Judgement,
        body: Option<Vec<u8>>,
        events: u64,
        pass: &mut ReplayPass,
    ) -> BrokerResult<Prepared> {
        let cause = judgement.cause.unwrap_or(QuarantineCause::SchemaInvalid);
        let error = judgement.error.clone();
        let q = Quarantine { judgement, body };
        match self
            .ctx
            .store
            .quarantine_dead_letter(&record.queue, &record.id, &q, self.now())
            .await
        {
            Ok(true) => {
                if let Some(e) = error {
                    tracing::error!(queue = %record.queue, dead_letter_id = %record.id,
                        error = %e, "dead letter quarantined: its payload is not a list of events");
                }
                self.quarantined(&record.queue, &record.id, cause, events.max(1), pass);
                Ok(Prepared::Done)
            }
            Ok(false) | Err(StoreError::DeadLetterNotFound { .. }) => Ok(Prepared::AlreadyDone),
            Err(e) => Err(e.into()),
        }
    }

    /// Logs and counts a quarantine this judgement created (never one it found).
    pub(super) fn quarantined(
        &self,
        queue: &EntityName,
        record: &str,
        cause: QuarantineCause,
        events: u64,
        pass: &mut ReplayPass,
    ) {
        *pass.quarantined.entry(cause).or_insert(0) += events;
        self.ctx.metrics.add_labelled(
            Counter::ReplayQuarantined,
            queue.as_str(),
            cause.as_str(),
            events,
        );
        tracing::error!(queue = %queue, dead_letter_id = record, cause = %cause, events,
            "dead letter events quarantined");
    }
}

/// The events of a record as the judgement sees them.
pub(super) fn event_refs<'a>(
    record: &'a DeadLetterRecord,
    events: &'a Events,
) -> Vec<EventRef<'a>> {
    match events {
        Events::Message => vec![EventRef {
            id: &record.message_id,
            event_type: record.message_type.as_deref(),
            size: record.body.len(),
        }],
        Events::Parsed(ev) => ev.iter().map(dead_letter_events::event_ref).collect(),
    }
}

/// Each event judged: its cause, if any; with `only`, the events of that cause alone.
fn judged_events(
    refs: &[EventRef<'_>],
    part: &Partition,
    only: Option<QuarantineCause>,
) -> Vec<judgement::JudgedEvent> {
    refs.iter()
        .enumerate()
        .filter_map(|(i, e)| {
            let cause = cause_of(part, i);
            match only {
                Some(c) if cause != Some(c) => None,
                _ => Some(judgement::judged(e, cause)),
            }
        })
        .collect()
}

pub(super) fn cause_of(part: &Partition, i: usize) -> Option<QuarantineCause> {
    part.quarantine
        .iter()
        .find(|(_, idx)| idx.contains(&i))
        .map(|(c, _)| *c)
}

/// The messages republished for the events the partition lets go.
pub(super) fn republished(
    record: &DeadLetterRecord,
    events: &Events,
    part: &Partition,
    policy: &QueuePolicy,
    now: Timestamp,
) -> Vec<NewMessage> {
    let expires_at = policy
        .default_ttl_ms
        .map(|t| now.plus_millis(i64::try_from(t).unwrap_or(i64::MAX)));
    let mut out = Vec::with_capacity(part.republish.len());
    for (i, new_id) in &part.republish {
        let (original, _) = redrive_core::id::split_replay_count(new_id);
        let mut properties = record.properties.clone();
        properties.insert(
            ORIGINAL_ID_PROPERTY.to_owned(),
            PropertyValue::String(original.to_owned()),
        );
        properties.insert(
            REPLAYED_FROM_PROPERTY.to_owned(),
            PropertyValue::String(record.id.clone()),
        );
        let (body, content_type, message_type) = match events {
            Events::Message => {
                let body = if is_structured(record) {
                    dead_letter_events::rewrite_event_id(&record.body, new_id, original)
                        .unwrap_or_else(|_| record.body.clone())
                } else {
                    record.body.clone()
                };
                (
                    body,
                    record.content_type.clone(),
                    record.message_type.clone(),
                )
            }
            Events::Parsed(ev) => (
                dead_letter_events::republished(&ev[*i], new_id, original),
                Some(redrive_events::cloudevent::STRUCTURED.to_owned()),
                Some(ev[*i].event_type.clone()),
            ),
        };
        out.push(NewMessage {
            message_id: new_id.clone(),
            body,
            content_type,
            properties,
            correlation_id: record.correlation_id.clone(),
            session_id: record.session_id.clone(),
            message_type,
            intent: record.intent.clone(),
            valid_until: record.valid_until,
            scheduled_at: None,
            expires_at,
        });
    }
    out
}

/// Whether a message record's body is a structured-mode CloudEvent (a topic
/// subscription's message).
pub(super) fn is_structured(record: &DeadLetterRecord) -> bool {
    record
        .content_type
        .as_deref()
        .is_some_and(|c| c.starts_with(redrive_events::cloudevent::STRUCTURED))
}

/// `Err` naming the first message over the origin's size limit: the origin would refuse
/// it from a sender, and takes it no more from a replay.
pub(super) fn check_sizes(messages: &[NewMessage], policy: &QueuePolicy) -> BrokerResult<()> {
    match messages
        .iter()
        .find(|m| m.body.len() > policy.max_message_size as usize)
    {
        Some(big) => Err(BrokerError::invalid(
            "republish",
            format!(
                "event {} is {} bytes, over the origin's max_message_size of {}",
                big.message_id,
                big.body.len(),
                policy.max_message_size
            ),
        )),
        None => Ok(()),
    }
}

/// The bytes a republished message counts against the chunk budget.
pub(super) fn message_size(m: &NewMessage) -> usize {
    m.body.len()
        + m.properties
            .iter()
            .map(|(k, v)| {
                k.len()
                    + match v {
                        PropertyValue::String(s) => s.len(),
                        _ => 8,
                    }
            })
            .sum::<usize>()
}
