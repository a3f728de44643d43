//! Pure parts of dead-lettering that every backend applies the same way: whether a
//! queue's dead-letter queue can take a message, the description the broker writes, the
//! properties of the copy forwarded to a dead-letter queue, and the evidence record.

use redrive_core::message::{
    DEAD_LETTER_DESCRIPTION_PROPERTY, DEAD_LETTER_REASON_PROPERTY, DEAD_LETTER_SOURCE_PROPERTY,
    ORIGIN_MESSAGE_ID_PROPERTY, REAL_TOPIC_PROPERTY,
};
use redrive_core::{
    Area, DeadLetterReason, EntityName, EvidenceQuality, MessageMeta, Properties, PropertyValue,
    RouteKind, Timestamp,
};

use crate::{DeadLetterRecord, StoredMessage};

/// Why a queue's dead-letter queue cannot take a message. A broker-routed dead letter then
/// stays in the queue's own store (nothing is lost); an application's explicit dead-letter
/// to a missing queue is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetUnfit {
    /// The dead-letter queue does not exist.
    Missing,
    /// The dead-letter queue is the queue itself.
    Itself,
    /// The dead-letter queue requires sessions and the message has no session id.
    NeedsSession,
}

impl TargetUnfit {
    /// Why, as a phrase after the queue's name.
    pub fn why(self) -> &'static str {
        match self {
            TargetUnfit::Missing => "does not exist",
            TargetUnfit::Itself => "is the queue itself",
            TargetUnfit::NeedsSession => "requires a session id and the message has none",
        }
    }
}

/// Whether `target`, the dead-letter queue of `source`, can take a message.
/// `target_requires_session` is `None` when the target does not exist.
pub fn check_target(
    source: &EntityName,
    target: &EntityName,
    target_requires_session: Option<bool>,
    has_session: bool,
) -> Result<(), TargetUnfit> {
    if target == source {
        return Err(TargetUnfit::Itself);
    }
    match target_requires_session {
        None => Err(TargetUnfit::Missing),
        Some(true) if !has_session => Err(TargetUnfit::NeedsSession),
        Some(_) => Ok(()),
    }
}

/// The description the broker writes when it routes a message by policy; `None` for an
/// application's dead-letter (which brings its own).
pub fn broker_description(
    reason: &DeadLetterReason,
    meta: &MessageMeta,
    max_delivery_count: u32,
    policy_version: u64,
) -> Option<String> {
    match reason {
        DeadLetterReason::MaxDeliveryCountExceeded => Some(format!(
            "delivered {} times; the queue's max delivery count is {max_delivery_count} \
             (policy version {policy_version})",
            meta.delivery_count
        )),
        DeadLetterReason::TtlExpired => Some(match meta.expires_at {
            Some(t) => format!("time to live ran out at {}", t.to_rfc3339()),
            None => "time to live ran out".to_owned(),
        }),
        DeadLetterReason::Application(_) => None,
    }
}

/// The properties of the copy forwarded to a dead-letter queue: the message's own, plus
/// why, the description and the queue it came from; and, unless the message carries them
/// already (it was diverted before), its origin under the names Pulsar's Java client
/// uses: [`REAL_TOPIC_PROPERTY`] (the queue) and [`ORIGIN_MESSAGE_ID_PROPERTY`] (its id).
pub fn forwarded_properties(
    properties: &Properties,
    message_id: &str,
    reason: &DeadLetterReason,
    description: Option<&str>,
    source: &EntityName,
) -> Properties {
    let mut props = properties.clone();
    props.insert(
        DEAD_LETTER_REASON_PROPERTY.to_owned(),
        PropertyValue::String(reason.as_str().to_owned()),
    );
    if let Some(d) = description {
        props.insert(
            DEAD_LETTER_DESCRIPTION_PROPERTY.to_owned(),
            PropertyValue::String(d.to_owned()),
        );
    }
    props.insert(
        DEAD_LETTER_SOURCE_PROPERTY.to_owned(),
        PropertyValue::String(source.to_string()),
    );
    props
        .entry(REAL_TOPIC_PROPERTY.to_owned())
        .or_insert_with(|| PropertyValue::String(source.to_string()));
    props
        .entry(ORIGIN_MESSAGE_ID_PROPERTY.to_owned())
        .or_insert_with(|| PropertyValue::String(message_id.to_owned()));
    props
}

/// The record's description when the dead-letter queue could not take the message.
pub fn fallback_description(
    description: Option<String>,
    target: &EntityName,
    unfit: TargetUnfit,
    source: &EntityName,
) -> String {
    let note = format!(
        "dead-letter queue {target} {}; kept in the dead-letter store of {source}",
        unfit.why()
    );
    match description {
        Some(d) => format!("{d} ({note})"),
        None => note,
    }
}

/// Where a dead-lettered message's record goes and what it says of the route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routing {
    /// The area of the record: live, or archived when a copy went to a dead-letter queue.
    pub area: Area,
    /// Why, in words (the application's, the broker's, or the fallback's).
    pub description: Option<String>,
    /// The broker routed it by policy (rather than the application asking).
    pub by_broker: bool,
    /// The dead-letter queue and sequence number of the forwarded copy.
    pub forwarded_to: Option<(EntityName, i64)>,
    /// Whether the configured destination took it.
    pub route_target: redrive_core::case::RouteTarget,
    /// The dead-letter queue that could not (a fallback).
    pub missing_target: Option<String>,
    /// The consumer and rule version of an application's dead letter.
    pub classifier: redrive_core::Classifier,
}

/// The evidence record `id` of `message`, dead-lettered at `now` for `reason` under
/// policy version `policy_version`. `meta` is the message's state at that moment (its
/// delivery count and delivery times), which may be newer than the stored row.
pub fn evidence_record(
    id: String,
    message: StoredMessage,
    meta: &MessageMeta,
    reason: &DeadLetterReason,
    routing: Routing,
    policy_version: u64,
    now: Timestamp,
) -> DeadLetterRecord {
    let body_sha256 = redrive_core::digest::sha256_hex(&message.body);
    let route = if routing.by_broker {
        RouteKind::Broker
    } else {
        RouteKind::Application
    };
    let route_kind = redrive_core::case::Route::from(route);
    let route_rule = redrive_core::case::RouteRule::of(route_kind, reason.as_str());
    DeadLetterRecord {
        id,
        queue: message.queue,
        area: routing.area,
        message_id: message.message_id,
        sequence: message.sequence,
        session_id: message.session_id,
        body: message.body,
        body_sha256,
        content_type: message.content_type,
        properties: message.properties,
        correlation_id: message.correlation_id,
        message_type: message.message_type,
        intent: message.intent,
        valid_until: message.valid_until,
        reason: reason.as_str().to_owned(),
        description: routing.description,
        delivery_count: meta.delivery_count,
        // Every delivery's count increment is committed before the delivery is returned.
        count_quality: EvidenceQuality::Exact,
        first_delivered_at: meta.first_delivered_at,
        last_delivered_at: meta.last_delivered_at,
        enqueued_at: message.enqueued_at,
        dead_lettered_at: now,
        policy_version: Some(policy_version),
        route,
        forwarded_to: routing.forwarded_to,
        dlq_delivery_count: 0,
        locked_until: None,
        format: redrive_core::RecordFormat::Message,
        replay: crate::ReplayMark::default(),
        judgement: None,
        route_target: routing.route_target,
        missing_target: routing.missing_target,
        route_kind,
        route_rule: Some(route_rule),
        consumer: routing.classifier.consumer,
        rule_version: routing.classifier.rule_version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> EntityName {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    fn t(ms: i64) -> Timestamp {
        Timestamp(1_700_000_000_000 + ms)
    }

    fn stored() -> StoredMessage {
        StoredMessage {
            queue: n("orders"),
            sequence: 7,
            message_id: "m-7".to_owned(),
            body: b"hello".to_vec(),
            content_type: Some("text/plain".to_owned()),
            properties: Properties::from([("k".to_owned(), PropertyValue::Int(1))]),
            correlation_id: Some("c".to_owned()),
            session_id: Some("s".to_owned()),
            message_type: None,
            intent: None,
            valid_until: None,
            enqueued_at: t(0),
            scheduled_at: None,
            state: redrive_core::MessageState::Locked,
            visible_at: t(0),
            expires_at: None,
            // The stored row may lag the moment's state: the record takes `meta`.
            delivery_count: 2,
            locked_until: Some(t(30)),
            first_delivered_at: Some(t(1)),
            last_delivered_at: Some(t(2)),
            last_attempt: None,
        }
    }

    #[test]
    fn the_record_keeps_the_stored_message_and_the_moment_s_delivery_evidence() {
        let message = stored();
        let meta = MessageMeta {
            delivery_count: 3,
            first_delivered_at: Some(t(1)),
            last_delivered_at: Some(t(9)),
            ..MessageMeta::sent(t(0), None)
        };
        let reason = DeadLetterReason::MaxDeliveryCountExceeded;
        let routing = Routing {
            area: Area::Archived,
            description: Some("why".to_owned()),
            by_broker: true,
            forwarded_to: Some((n("orders-dlq"), 41)),
            route_target: redrive_core::case::RouteTarget::Written,
            missing_target: None,
            classifier: redrive_core::Classifier::default(),
        };
        let r = evidence_record(
            "dl_1".to_owned(),
            message,
            &meta,
            &reason,
            routing,
            5,
            t(10),
        );
        assert_eq!(
            (r.id.as_str(), r.queue.as_str(), r.sequence),
            ("dl_1", "orders", 7)
        );
        assert_eq!(r.area, Area::Archived);
        assert_eq!(r.body, b"hello");
        assert_eq!(r.body_sha256, redrive_core::digest::sha256_hex(b"hello"));
        assert_eq!(r.session_id.as_deref(), Some("s"));
        assert_eq!(r.properties.get("k"), Some(&PropertyValue::Int(1)));
        assert_eq!(r.reason, "MaxDeliveryCountExceeded");
        assert_eq!(r.description.as_deref(), Some("why"));
        assert_eq!(r.delivery_count, 3);
        assert_eq!(r.last_delivered_at, Some(t(9)));
        assert_eq!(r.count_quality, EvidenceQuality::Exact);
        assert_eq!((r.dead_lettered_at, r.policy_version), (t(10), Some(5)));
        assert_eq!(r.route, RouteKind::Broker);
        assert_eq!(
            (r.route_kind, r.route_rule),
            (
                redrive_core::case::Route::BrokerRouted,
                Some(redrive_core::case::RouteRule::DeliveryThreshold)
            )
        );
        assert_eq!(
            (r.consumer.as_deref(), r.rule_version.as_deref()),
            (None, None)
        );
        assert_eq!(r.forwarded_to, Some((n("orders-dlq"), 41)));
        assert_eq!((r.dlq_delivery_count, r.locked_until), (0, None));
        let app = evidence_record(
            "dl_2".to_owned(),
            stored(),
            &meta,
            &DeadLetterReason::Application("Bad".to_owned()),
            Routing {
                area: Area::Live,
                description: None,
                by_broker: false,
                forwarded_to: None,
                route_target: redrive_core::case::RouteTarget::Written,
                missing_target: None,
                classifier: redrive_core::Classifier {
                    consumer: Some("orders@4".to_owned()),
                    rule_version: Some("sku-rule-7".to_owned()),
                },
            },
            5,
            t(10),
        );
        assert_eq!((app.route, app.area), (RouteKind::Application, Area::Live));
        assert_eq!(app.reason, "Bad");
        assert_eq!(
            (app.route_kind, app.route_rule),
            (
                redrive_core::case::Route::ApplicationQuarantined,
                Some(redrive_core::case::RouteRule::Application)
            )
        );
        assert_eq!(
            (app.consumer.as_deref(), app.rule_version.as_deref()),
            (Some("orders@4"), Some("sku-rule-7"))
        );
    }

    #[test]
    fn targets_are_checked_in_order() {
        let (q, d) = (n("q"), n("d"));
        assert_eq!(
            check_target(&q, &q, Some(false), false),
            Err(TargetUnfit::Itself)
        );
        assert_eq!(check_target(&q, &d, None, true), Err(TargetUnfit::Missing));
        assert_eq!(
            check_target(&q, &d, Some(true), false),
            Err(TargetUnfit::NeedsSession)
        );
        assert_eq!(check_target(&q, &d, Some(true), true), Ok(()));
        assert_eq!(check_target(&q, &d, Some(false), false), Ok(()));
    }

    #[test]
    fn forwarded_copies_say_why_and_where_from() {
        let p = forwarded_properties(
            &Properties::new(),
            "m-1",
            &DeadLetterReason::TtlExpired,
            Some("late"),
            &n("orders"),
        );
        assert_eq!(p["REAL_TOPIC"], PropertyValue::String("orders".into()));
        assert_eq!(p["ORIGIN_MESSAGE_ID"], PropertyValue::String("m-1".into()));
        // A message diverted before keeps the origin it carries.
        let mut diverted = Properties::new();
        diverted.insert("REAL_TOPIC".into(), PropertyValue::String("numbers".into()));
        diverted.insert(
            "ORIGIN_MESSAGE_ID".into(),
            PropertyValue::String("3:0:-1".into()),
        );
        let again = forwarded_properties(
            &diverted,
            "m-1",
            &DeadLetterReason::TtlExpired,
            None,
            &n("orders"),
        );
        assert_eq!(again["REAL_TOPIC"], PropertyValue::String("numbers".into()));
        assert_eq!(
            again["ORIGIN_MESSAGE_ID"],
            PropertyValue::String("3:0:-1".into())
        );
        assert_eq!(
            again["DeadLetterSource"],
            PropertyValue::String("orders".into())
        );
        assert_eq!(
            p["DeadLetterReason"],
            PropertyValue::String("TTLExpired".into())
        );
        assert_eq!(
            p["DeadLetterErrorDescription"],
            PropertyValue::String("late".into())
        );
        assert_eq!(
            p["DeadLetterSource"],
            PropertyValue::String("orders".into())
        );
        let d = fallback_description(Some("x".into()), &n("d"), TargetUnfit::Missing, &n("q"));
        assert_eq!(
            d,
            "x (dead-letter queue d does not exist; kept in the dead-letter store of q)"
        );
    }
}
