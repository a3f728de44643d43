//! Pure parts of dead-lettering that every backend applies the same way: whether a
//! queue's dead-letter queue can take a message, the description the broker writes, and
//! the properties of the copy forwarded to a dead-letter queue.

use redrive_core::message::{
    DEAD_LETTER_DESCRIPTION_PROPERTY, DEAD_LETTER_REASON_PROPERTY, DEAD_LETTER_SOURCE_PROPERTY,
};
use redrive_core::{DeadLetterReason, EntityName, MessageMeta, Properties, PropertyValue};

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
/// why, the description and the queue it came from.
pub fn forwarded_properties(
    properties: &Properties,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> EntityName {
        s.parse().unwrap_or_else(|e| panic!("{e}"))
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
            &DeadLetterReason::TtlExpired,
            Some("late"),
            &n("orders"),
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
