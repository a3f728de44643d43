//! Restoring a quarantined record to live, and the preview of what its next judgement
//! will do.

use redrive_core::id::{DeadLetterId, Named, given};
use redrive_store::skeleton::dead_letters::not_found;

use super::*;

impl Replay {
    /// Restores a quarantined record (one move back to live, where the entity's replay
    /// judges it again), after answering what that judgement will do. With `dry_run`,
    /// only answers. Audited (`dead_letter.restore`). A string that cannot be a record id
    /// is not found on the queue, as an id no record has.
    #[tracing::instrument(level = "debug", skip_all,
        fields(queue = %queue, dead_letter = %given(named)))]
    pub async fn restore_dead_letter(
        &self,
        queue: &str,
        named: &Named<DeadLetterId>,
        dry_run: bool,
        actor: &Actor,
    ) -> BrokerResult<RestorePreview> {
        let name: EntityName = queue.parse()?;
        let policy = self.ctx.store.get_queue(&name).await?.policy;
        let record_id = match named {
            Ok(id) => id,
            // The store would have found the queue, and no record with it.
            Err(e) => return Err(not_found(&name, &e.id).into()),
        };
        let id = record_id.as_str();
        let record = self.ctx.store.get_dead_letter(&name, id).await?;
        if record.area != Area::Quarantine {
            return Err(BrokerError::DeadLetterNotQuarantined {
                id: id.to_owned(),
                area: record.area.as_str().to_owned(),
            });
        }
        let register = self.broker.register().await?;
        let mut preview = preview(&record, &policy, &register);
        if dry_run {
            return Ok(preview);
        }
        let mut targets = vec![id.to_owned(), format!("republish={}", preview.republish)];
        targets.extend(
            preview
                .requarantine
                .iter()
                .map(|(c, n)| format!("requarantine.{c}={n}")),
        );
        // Back in live, automatic replay delivers it again: through its case's gates. A
        // restore whose judgement republishes nothing (every event back to quarantine)
        // delivers nothing again and passes as before.
        let gate = if preview.republish == 0 {
            Ok(HandPass::NoCase)
        } else {
            self.broker
                .hand_record_gate(
                    &name,
                    record_id,
                    Area::Quarantine,
                    HandOperation::Restore,
                    actor,
                )
                .await
        };
        let pass = match gate {
            Ok(p) => p,
            Err(e) => {
                return self
                    .ctx
                    .audited(
                        actor,
                        "dead_letter.restore",
                        Some(name.as_str()),
                        targets,
                        Err(e),
                    )
                    .await;
            }
        };
        let r: BrokerResult<()> = self
            .ctx
            .store
            .move_dead_letter(&name, id, Area::Live, self.now())
            .await
            .map_err(Into::into);
        match &r {
            Ok(()) => self.broker.cases().hand_delivered(pass, None, actor).await,
            Err(e) => self.broker.cases().hand_failed(&pass, e).await,
        }
        self.ctx
            .audited(
                actor,
                "dead_letter.restore",
                Some(name.as_str()),
                targets,
                r,
            )
            .await?;
        preview.restored = true;
        tracing::info!(queue = %name, dead_letter_id = id, actor = %actor.id,
            republish = preview.republish, "dead letter restored to live");
        self.wake_replay();
        Ok(preview)
    }
}

/// What the next judgement of `record`, restored now, would do.
pub(super) fn preview(
    record: &DeadLetterRecord,
    policy: &QueuePolicy,
    register: &Register,
) -> RestorePreview {
    let mut out = RestorePreview {
        id: record.id.clone(),
        republish: 0,
        requarantine: BTreeMap::new(),
        replay_enabled: policy.auto_replay.enabled,
        restored: false,
    };
    let events = match record.format {
        RecordFormat::Message => Events::Message,
        RecordFormat::Events => match dead_letter_events::parse_events(&record.body) {
            Ok(ev) => Events::Parsed(ev),
            Err(_) => {
                out.requarantine.insert(QuarantineCause::SchemaInvalid, 1);
                return out;
            }
        },
    };
    let refs = event_refs(record, &events);
    let part = judgement::partition(
        &policy.auto_replay,
        register,
        &record.queue,
        Destination { exists: true },
        &refs,
    );
    out.republish = part.republish.len() as u64;
    out.requarantine = part
        .quarantine
        .iter()
        .map(|(c, idx)| (*c, idx.len() as u64))
        .collect();
    out
}
