//! Importing dead letters from elsewhere into a queue's dead-letter store.

use super::*;

impl Broker {
    /// Imports dead letters from elsewhere into the live area of `queue`'s dead-letter
    /// store (`format`: an Event Grid dead-letter blob, SQS `ReceiveMessage` output, or
    /// redrive's own export), in one transaction; each record becomes a replay candidate
    /// if the queue replays. Audited (`dead_letter.import`). Answers the new records' ids.
    #[tracing::instrument(level = "debug", skip_all, fields(queue = %queue, format = %format.as_str()))]
    pub async fn import_dead_letters(
        &self,
        queue: &str,
        format: ImportFormat,
        bytes: &[u8],
        actor: &Actor,
    ) -> BrokerResult<Vec<String>> {
        let name: EntityName = queue.parse()?;
        let now = self.now();
        let record = self.inner.store.get_queue(&name).await?;
        let checked = parse_import(format, bytes, now)
            .map_err(|e| BrokerError::invalid("body", e.to_string()))
            .and_then(|parsed| {
                for (index, r) in parsed.iter().enumerate() {
                    check_imported(&name, index, r, record.policy.max_message_size)?;
                }
                Ok(parsed)
            });
        let parsed = match checked {
            Ok(p) => p,
            Err(e) => return self.import_refused(&name, format, actor, e, "").await,
        };
        let records: Vec<DeadLetterRecord> = parsed
            .into_iter()
            .map(|r| imported_record(&name, r, now))
            .collect();
        let ids: Vec<String> = records.iter().map(|r| r.id.clone()).collect();
        // A record whose intent has a case here delivers it again (automatic replay, a
        // resubmit): every one goes through its case's gates, or the import is refused
        // whole, as any refused import is.
        let passes = match self.import_gates(&name, &records, actor).await {
            Ok(p) => p,
            Err(e) => {
                return self
                    .import_refused(&name, format, actor, e, " by a recovery case")
                    .await;
            }
        };
        let result: BrokerResult<()> = self
            .inner
            .store
            .import_dead_letters(&name, records, now)
            .await
            .map_err(Into::into);
        for pass in passes {
            match &result {
                Ok(()) => self.cases().hand_delivered(pass, None, actor).await,
                Err(e) => self.cases().hand_failed(&pass, e).await,
            }
        }
        let mut targets = vec![
            format!("format={}", format.as_str()),
            format!("records={}", ids.len()),
        ];
        if let (Some(first), Some(last)) = (ids.first(), ids.last()) {
            targets.push(format!("first={first}"));
            targets.push(format!("last={last}"));
        }
        self.audited(
            actor,
            "dead_letter.import",
            Some(name.as_str()),
            targets,
            result,
        )
        .await?;
        tracing::info!(queue = %name, records = ids.len(), format = format.as_str(),
            actor = %actor.id, "dead letters imported");
        self.wake_replay();
        Ok(ids)
    }
}

impl Broker {
    /// A refused import: a decision too, audited with the reason (no record stored) and
    /// logged (`why` says who refused it, after "refused").
    async fn import_refused(
        &self,
        name: &EntityName,
        format: ImportFormat,
        actor: &Actor,
        e: BrokerError,
        why: &str,
    ) -> BrokerResult<Vec<String>> {
        let targets = vec![format!("format={}", format.as_str()), "records=0".into()];
        tracing::info!(queue = %name, format = format.as_str(), actor = %actor.id,
            error = %e, "dead-letter import refused{why}");
        self.audited(
            actor,
            "dead_letter.import",
            Some(name.as_str()),
            targets,
            Err(e),
        )
        .await
    }

    /// The gates of an import's records (see `cases::by_hand`): each record whose intent
    /// has a case on `queue` is judged first (none is admitted while one may still be
    /// refused), then the followed ones are admitted. `Err`: the first refusal.
    async fn import_gates(
        &self,
        queue: &EntityName,
        records: &[DeadLetterRecord],
        actor: &Actor,
    ) -> BrokerResult<Vec<HandPass>> {
        let mut judged: Vec<Judged> = Vec::new();
        for r in records {
            let intent = redrive_core::case::intent_identity(r.intent.as_deref(), &r.message_id);
            let Some(case) = self.cases().case_of_intent(queue, intent).await? else {
                continue;
            };
            if judged.iter().any(|j| j.case_id() == case.id) {
                // One delivery per case and import: the first record stands for it.
                continue;
            }
            let message_id = match r.format {
                RecordFormat::Message => {
                    let (_, n) = redrive_core::id::split_replay_count(&r.message_id);
                    redrive_core::id::with_replay_count(&r.message_id, n + 1)
                }
                RecordFormat::Events => String::new(),
            };
            let target = HandTarget {
                operation: HandOperation::Import,
                message_id,
                destination: queue.to_string(),
                digest: r.body_sha256.clone(),
            };
            judged.push(self.cases().hand_judge(case, target, actor).await?);
        }
        let mut passes = Vec::with_capacity(judged.len());
        for j in judged {
            match self.cases().hand_admit(j, actor).await {
                Ok(p) => passes.push(p),
                Err(e) => {
                    for p in &passes {
                        self.cases().hand_failed(p, &e).await;
                    }
                    return Err(e);
                }
            }
        }
        Ok(passes)
    }
}

/// Refuses imported record `index` that a live dead letter of `queue` could not be: the
/// bounds of a send (ids, content type, properties, headers) and, for one message, the
/// queue's `max_message_size` (the record's events are each held to it when they are
/// republished). The error names the record and the field, as a parse error does.
fn check_imported(
    queue: &EntityName,
    index: usize,
    r: &ImportedRecord,
    max_message_size: u32,
) -> BrokerResult<()> {
    let as_sent = crate::messages::Outgoing {
        message_id: Some(r.message_id.clone()),
        body: match r.format {
            RecordFormat::Message => r.body.clone(),
            RecordFormat::Events => Vec::new(),
        },
        content_type: r.content_type.clone(),
        properties: r.properties.clone(),
        correlation_id: r.correlation_id.clone(),
        session_id: r.session_id.clone(),
        message_type: r.message_type.clone(),
        ..Default::default()
    };
    let at = match r.line {
        Some(line) => format!("record {index} (line {line})"),
        None => format!("record {index}"),
    };
    match crate::messages::check_message(queue, &as_sent, max_message_size) {
        Ok(_) => Ok(()),
        Err(BrokerError::InvalidRequest { field, why }) => Err(BrokerError::invalid(
            "body",
            format!("{at}: `{field}` {why}"),
        )),
        Err(BrokerError::MessageTooLarge { size, limit, .. }) => Err(BrokerError::invalid(
            "body",
            format!(
                "{at}: `body` is {size} bytes with its headers and properties; \
                 queue {queue} takes messages of at most {limit}"
            ),
        )),
        Err(e) => Err(e),
    }
}

/// An imported record as a dead-letter record of `queue`, under a new id. Its route
/// evidence is what its source said (the route, the rule, the policy version that routed
/// it, the consumer and rule version), kept as read: `queue`'s policy routed nothing.
fn imported_record(queue: &EntityName, r: ImportedRecord, now: Timestamp) -> DeadLetterRecord {
    DeadLetterRecord {
        id: redrive_core::id::new_dead_letter_id(now),
        queue: queue.clone(),
        area: Area::Live,
        message_id: r.message_id,
        sequence: 0,
        session_id: r.session_id,
        body_sha256: redrive_core::digest::sha256_hex(&r.body),
        body: r.body,
        content_type: r.content_type,
        properties: r.properties,
        correlation_id: r.correlation_id,
        message_type: r.message_type,
        intent: None,
        valid_until: None,
        reason: r.reason,
        description: r.description,
        delivery_count: r.delivery_count,
        count_quality: r.count_quality,
        first_delivered_at: r.first_delivered_at,
        last_delivered_at: r.last_delivered_at,
        enqueued_at: r.enqueued_at,
        dead_lettered_at: r.dead_lettered_at,
        policy_version: r.policy_version,
        // Another system routed it there (Event Grid's retry policy, SQS's redrive
        // policy, another redrive): nothing here saw who or why, whatever the source
        // says, so it is no broker's or application's decision of this one.
        route: redrive_core::RouteKind::Import,
        forwarded_to: None,
        dlq_delivery_count: 0,
        locked_until: None,
        format: r.format,
        replay: redrive_store::ReplayMark::default(),
        judgement: None,
        // The other broker's dead-letter destination took it (here it is); its attempt
        // evidence keeps the quality the import gave it.
        route_target: redrive_core::case::RouteTarget::Written,
        missing_target: None,
        route_kind: r.route_kind,
        route_rule: r.route_rule,
        consumer: r.consumer,
        rule_version: r.rule_version,
    }
}
