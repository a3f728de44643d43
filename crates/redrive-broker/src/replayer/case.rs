//! The case of a record automatic replay republished, closed from the outcome.

use super::*;

impl Replay {
    /// The case of a record automatic replay republished (a record that was a case: one
    /// quarantined and restored, or dead-lettered before its entity replayed), closed from
    /// the outcome: one terminal entry `indeterminate` — automatic replay observes no
    /// effect, so nothing binds the republish to a completed effect — whose fields bind
    /// the original to the new message ids and the outcome, under the rule, the entity's
    /// policy version and the budget. A record settled before it was a case has none (its
    /// judgement is the record). Best-effort: a case that cannot be written is logged and
    /// left to the case worker.
    pub(super) async fn close_replayed_case(&self, key: &Key, j: &Judgement) {
        let Some(r) = j.replay.as_ref() else {
            return;
        };
        let store = &self.ctx.store;
        let case_id = redrive_store::case_id_of(&key.id);
        let case = match store.get_case(&case_id).await {
            Ok(c) => c,
            Err(StoreError::CaseNotFound { .. }) => return,
            Err(e) => {
                tracing::warn!(case_id = %case_id, error = %e, "the case of a replayed dead letter could not be read");
                return;
            }
        };
        // Closed already, or following a delivery of its own (a replay admitted, by its
        // owner or by hand): that delivery's observation closes it.
        if case.m.state.terminal().is_some()
            || case.m.state == redrive_core::case::CaseState::ReplayAdmitted
        {
            return;
        }
        let now = self.now();
        let ids: Vec<&str> = j
            .events
            .iter()
            .filter_map(|e| e.republished_as.as_deref())
            .collect();
        let ids = ids.join(", ");
        let mut fields = BTreeMap::new();
        for (k, v) in [
            ("rule", r.rule.clone()),
            ("policy_version", r.policy_version.to_string()),
            ("message_id", ids.clone()),
            ("budget", r.budget.clone()),
            ("destination", r.destination.clone()),
            ("outcome", r.outcome.clone()),
        ] {
            fields.insert(k.to_owned(), v);
        }
        let entry = redrive_core::case::TimelineEntry {
            at: now,
            actor: "broker".to_owned(),
            state: redrive_core::case::CaseState::Indeterminate,
            evidence: format!(
                "automatic replay republished it as {ids} to {} under policy version {} ({}); no effect authority binds the outcome: closed with the outcome {}",
                r.destination, r.policy_version, r.budget, r.outcome
            ),
            fields,
        };
        let settings = self.broker.cases().case_settings();
        let retention = settings
            .rule(case.queue.as_str())
            .and_then(|c| c.payload_retention_ms)
            .unwrap_or(settings.payload_retention_ms);
        let mut u = crate::cases::ops::Step::of(&case).update_of(&case);
        u.append.push(entry);
        u.set.state = redrive_core::case::CaseState::Indeterminate;
        u.set.closed_at = Some(now);
        u.set.next_check_at = None;
        u.set.payload_until = Some(now.plus_millis(i64::try_from(retention).unwrap_or(i64::MAX)));
        if let Some(d) = u.set.data.as_object_mut() {
            d.insert("next".to_owned(), "closed:indeterminate".into());
            d.remove("escalated_for");
        }
        let actor = Actor::system("replay");
        u.audit.push(redrive_store::AuditFields {
            at: now,
            actor_id: actor.id,
            actor_name: actor.name,
            action: "case.close".to_owned(),
            entity: Some(case.queue.to_string()),
            targets: vec![
                case.id.clone(),
                "state=indeterminate".to_owned(),
                format!("message_id={ids}"),
            ],
            outcome: "ok".to_owned(),
            client: None,
        });
        match store.update_case(&u).await {
            Ok(_) => {
                self.ctx.metrics.audit_entries.inc();
                self.ctx.metrics.add_labelled(
                    Counter::CasesClosed,
                    case.queue.as_str(),
                    "indeterminate",
                    1,
                );
            }
            Err(e) => {
                tracing::warn!(case_id = %case.id, error = %e, "the case of a replayed dead letter could not be closed; the case worker looks at it again");
            }
        }
    }
}
