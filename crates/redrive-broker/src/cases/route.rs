//! Route verification: the first step of every case, and again while the route is
//! misconfigured. The rule, the policy version and the classifier are the record's as
//! routed; the step records what was checked and what the evidence is worth.

use redrive_core::case::{self, CaseState, RouteCheck, RouteRule, RouteTarget};
use redrive_core::{EntityName, PropertyValue, Timestamp};
use redrive_store::{CaseRecord, StoreError};

use super::data::{self, CaseData, RouteEvidence};
use crate::{BrokerResult, Cases};

use super::advance::Step;
use super::refusal::case_error;
use redrive_core::case::step::ROUTE_RECHECK_MS;
use redrive_core::case::step::{entry, with};

/// How a route's evidence names its policy version: `, policy version N`, or that none
/// is known.
pub(crate) fn policy_phrase(version: Option<u64>) -> String {
    match version {
        Some(v) => format!(", policy version {v}"),
        None => ", policy version unknown".to_owned(),
    }
}

/// The fields of a case's `failure_classified` entry at its opening: the reason and the
/// observation, bound to the consumer and rule version that applied an application's
/// reason when it named them.
pub(crate) fn classified_fields(
    case: &CaseRecord,
    observed: String,
) -> Vec<(&'static str, String)> {
    let mut fields = vec![("reason", case.reason.clone()), ("observation", observed)];
    if let Some(c) = &case.consumer {
        fields.push(("consumer", c.clone()));
    }
    if let Some(v) = &case.rule_version {
        fields.push(("rule_version", v.clone()));
    }
    fields
}

/// Whether the case's route was found misconfigured (its dead-letter queue still missing).
pub(crate) fn route_misconfigured(data: &CaseData) -> bool {
    data.route
        .as_ref()
        .is_some_and(|r| r.check == RouteCheck::Misconfigured)
}

impl Cases {
    #[tracing::instrument(level = "debug", skip_all, fields(case = %case.id, queue = %case.queue))]
    pub(crate) async fn verify_route(
        &self,
        case: &CaseRecord,
        step: &mut Step,
        settings: &super::CaseSettings,
        now: Timestamp,
    ) -> BrokerResult<()> {
        let record = self.case_record(case).await?;
        let first = step.data.route.is_none();
        // The rule, the policy version and the classifier are the record's as routed
        // (copied onto the case when it opened): never re-derived, never invented.
        let rule = case.route_rule;
        let (target, missing) = record.as_ref().map_or((RouteTarget::Unknown, None), |r| {
            (r.route_target, r.missing_target.clone())
        });
        let still_missing = match &missing {
            Some(t) => match t.parse::<EntityName>() {
                Ok(n) => matches!(
                    self.ctx.store.get_queue(&n).await,
                    Err(StoreError::QueueNotFound { .. })
                ),
                Err(_) => true,
            },
            None => false,
        };
        let counted = record
            .as_ref()
            .map_or(case.m.evidence_quality, |r| r.count_quality);
        let quality = case::verified_quality(counted, target);
        let check = if still_missing {
            RouteCheck::Misconfigured
        } else {
            RouteCheck::Verified
        };
        let destination = record
            .as_ref()
            .and_then(|r| r.forwarded_to.as_ref().map(|(q, _)| q.to_string()))
            .unwrap_or_else(|| "own_store".to_owned());
        let attempts = case::attempt_evidence(rule, counted, case.delivery_count);
        let route = RouteEvidence {
            checked_at_ms: now.as_millis(),
            check,
            rule,
            target,
            missing_target: missing.clone(),
            destination: destination.clone(),
            attempts,
            quality,
            policy_version: case.policy_version,
            consumer: case.consumer.clone(),
            rule_version: case.rule_version.clone(),
        };
        step.set.evidence_quality = quality;
        let fields = route_fields(case, &route);
        step.data.route = Some(route);
        if first {
            first_look(case, step, settings, record.as_ref());
        }
        if check == RouteCheck::Misconfigured {
            let target_name = missing.clone().unwrap_or_default();
            if first {
                step.push(with(
                    entry(now, "broker", CaseState::Retained, format!("dead-letter queue {target_name} was missing at routing and still is: repair the configuration; the attempt history is incomplete")),
                    &fields,
                ))
                .map_err(case_error)?;
            }
            // Checked again until the configuration is repaired.
            step.set.next_check_at = Some(now.plus_millis(ROUTE_RECHECK_MS));
            return Ok(());
        }
        let evidence = verified_evidence(case, missing.as_deref(), rule);
        step.push(with(
            entry(now, "broker", CaseState::RouteVerified, evidence),
            &fields,
        ))
        .map_err(case_error)?;
        if quality == redrive_core::dead_letter::EvidenceQuality::Approximate {
            step.push(entry(
                now,
                "broker",
                CaseState::AttemptsApproximate,
                "the provider's semantics support no exact delivery count",
            ))
            .map_err(case_error)?;
        }
        if first && rule.is_some_and(RouteRule::observes_consumer_failure) {
            step.push(observed_entry(case, record.as_ref(), now))
                .map_err(case_error)?;
            // A dead letter of a replay this broker admitted is that replay's outcome.
            self.replay_failed(case, now).await?;
        }
        step.set.next_check_at = Some(now);
        Ok(())
    }
}

/// The fields of a route check's entry: how it was routed and what the evidence is worth.
fn route_fields(case: &CaseRecord, r: &RouteEvidence) -> Vec<(&'static str, String)> {
    let unknown = || "unknown".to_owned();
    let mut fields = vec![
        ("route", case.m.route.to_string()),
        ("rule", r.rule.map_or_else(unknown, |r| r.to_string())),
        ("target", r.target.to_string()),
        ("destination", r.destination.clone()),
        (
            "policy_version",
            case.policy_version.map_or_else(unknown, |v| v.to_string()),
        ),
        ("evidence_quality", r.quality.to_string()),
        (
            "attempts",
            r.attempts.map_or_else(
                || "none (routed before delivery)".to_owned(),
                |a| a.to_string(),
            ),
        ),
    ];
    if let Some(m) = &r.missing_target {
        fields.push(("missing_target", m.clone()));
    }
    if let Some(c) = &case.consumer {
        fields.push(("consumer", c.clone()));
    }
    if let Some(v) = &case.rule_version {
        fields.push(("rule_version", v.clone()));
    }
    fields
}

/// What the first route check records besides: the review deadline of the entity's rule,
/// the node's labels, the redacted diagnostic context, the schema version, source and
/// subject of the record.
fn first_look(
    case: &CaseRecord,
    step: &mut Step,
    settings: &super::CaseSettings,
    record: Option<&redrive_store::DeadLetterRecord>,
) {
    let rule_cfg = settings.rule(case.queue.as_str());
    step.set.review_deadline =
        case::review_deadline(case.opened_at, rule_cfg.and_then(|r| r.review_ms));
    step.data.labels = settings.labels.clone();
    if let Some(r) = record {
        let allow = rule_cfg.map(|r| r.redact_allow.clone()).unwrap_or_default();
        step.data.context = Some(data::Redacted {
            policy_version: data::redaction_version(&allow),
            fields: data::redact(&r.body, &r.properties, &allow),
        });
        let prop = |n: &str| match r.properties.get(n) {
            Some(PropertyValue::String(s)) => Some(s.clone()),
            _ => None,
        };
        step.data.schema_version = prop("dataschema").or_else(|| prop("schema_version"));
        step.set.source = prop("source");
        step.set.subject = prop("subject");
    }
}

/// The evidence of a verified route, in words.
fn verified_evidence(case: &CaseRecord, missing: Option<&str>, rule: Option<RouteRule>) -> String {
    match (missing, rule) {
        (Some(t), _) => format!(
            "dead-letter queue {t} was missing at routing (repaired since); the attempt history is incomplete"
        ),
        (None, None) => "nothing says how it was routed: route indeterminate, no rule or policy version recorded".to_owned(),
        (None, Some(rule @ (RouteRule::Filter | RouteRule::Size))) => format!(
            "routed under the {rule} rule before ordinary delivery{}: routing evidence, not a payload diagnosis; no receive history",
            policy_phrase(case.policy_version)
        ),
        (None, Some(rule)) => {
            let mut e = format!(
                "routed under the {rule} rule{}",
                policy_phrase(case.policy_version)
            );
            if let Some(c) = &case.consumer {
                e.push_str(&format!("; reason applied by consumer {c}"));
            }
            if let Some(v) = &case.rule_version {
                e.push_str(&format!(", rule version {v}"));
            }
            e
        }
    }
}

/// The `failure_classified` entry of a case's first route check: the reason and what was
/// observed, bound to the consumer and rule version that applied it.
fn observed_entry(
    case: &CaseRecord,
    record: Option<&redrive_store::DeadLetterRecord>,
    now: Timestamp,
) -> redrive_core::case::TimelineEntry {
    let observed = record
        .and_then(|r| r.description.clone())
        .or_else(|| case.description.clone())
        .unwrap_or_default();
    with(
        entry(
            now,
            "broker",
            CaseState::FailureClassified,
            if observed.is_empty() {
                format!("observed: {}", case.reason)
            } else {
                format!("observed: {} — {observed}", case.reason)
            },
        ),
        &classified_fields(case, observed),
    )
}
