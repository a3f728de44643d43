//! What a dead-letter record says about how it got there.

use std::fmt;
use std::str::FromStr;

/// Why a message was dead-lettered. The broker's own reasons have fixed codes; an
/// application that dead-letters a message gives its own reason.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DeadLetterReason {
    /// The message was delivered `max_delivery_count` times and released again.
    MaxDeliveryCountExceeded,
    /// The message's time to live ran out and the queue dead-letters on expiry.
    TtlExpired,
    /// The application dead-lettered it with this reason.
    Application(String),
}

impl DeadLetterReason {
    /// The reason code as stored and shown.
    pub fn as_str(&self) -> &str {
        match self {
            DeadLetterReason::MaxDeliveryCountExceeded => "MaxDeliveryCountExceeded",
            DeadLetterReason::TtlExpired => "TTLExpired",
            DeadLetterReason::Application(r) => r,
        }
    }
}

impl fmt::Display for DeadLetterReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<&str> for DeadLetterReason {
    fn from(s: &str) -> Self {
        match s {
            "MaxDeliveryCountExceeded" => DeadLetterReason::MaxDeliveryCountExceeded,
            "TTLExpired" => DeadLetterReason::TtlExpired,
            other => DeadLetterReason::Application(other.to_owned()),
        }
    }
}

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $v),+ }

        impl $name {
            /// The stored and displayed name.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$v => $s),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownVariant;
            fn from_str(s: &str) -> Result<Self, UnknownVariant> {
                match s {
                    $($s => Ok($name::$v),)+
                    _ => Err(UnknownVariant { kind: stringify!($name), value: s.to_owned() }),
                }
            }
        }
    };
}

/// A stored string that names no known variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}")]
pub struct UnknownVariant {
    /// The enum that was parsed.
    pub kind: &'static str,
    /// The text that did not match.
    pub value: String,
}

string_enum! {
    /// Whether a record's delivery count is exactly the number of deliveries.
    EvidenceQuality {
        /// Every delivery's increment was committed before the delivery left the broker.
        Exact = "exact",
        /// Some deliveries may not have been counted (or counted without reaching anyone),
        /// or the source's own count is approximate (an import from Event Grid or SQS).
        Approximate = "approximate",
        /// The source did not say (an import whose evidence lacks the count or the times).
        Incomplete = "incomplete",
        /// No attempt evidence exists at all: the count and the times are lost or were never
        /// kept.
        Unavailable = "unavailable",
    }
}

string_enum! {
    /// Who decided that the message is a dead letter.
    RouteKind {
        /// The broker, by policy (max delivery count, expiry).
        Broker = "broker",
        /// The application, by an explicit dead-letter settlement.
        Application = "application",
        /// Imported from elsewhere (an Event Grid blob, SQS, an export): another system
        /// routed it, and nothing here can vouch for who or why; the reason and the
        /// evidence are the source's.
        Import = "import",
    }
}

string_enum! {
    /// The area of a dead-letter store a record is in. A record is in exactly one; moving it
    /// is one atomic operation.
    Area {
        /// Waiting for recovery: listed, received and resubmitted by default.
        Live = "live",
        /// Done with (replayed or closed); kept for the record.
        Archived = "archived",
        /// Held back from automatic replay; needs an operator.
        Quarantine = "quarantine",
    }
}

string_enum! {
    /// What a dead-letter record's body holds.
    RecordFormat {
        /// One message, as it was sent (a message dead-lettered here, or one imported
        /// message).
        Message = "message",
        /// A JSON array of dead-lettered events, each with its own diagnostics (an
        /// imported Event Grid dead-letter blob): judged event by event.
        Events = "events",
    }
}

/// Longest consumer identity, and longest rule version, an application may give with its
/// dead letter (bytes).
pub const MAX_CLASSIFIER_BYTES: usize = 256;

/// What classified an application's dead letter: the consumer that applied its reason and
/// the version of the rule it applied. Both are optional and bounded
/// ([`check_classifier`]); an application reason stays bound to them, never a diagnosis.
/// The broker's own dead letters have neither.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Classifier {
    /// The consumer's identity (a service name and version, a deployment).
    pub consumer: Option<String>,
    /// The version of the classification rule that gave the reason.
    pub rule_version: Option<String>,
}

impl Classifier {
    /// Whether neither is given.
    pub fn is_empty(&self) -> bool {
        self.consumer.is_none() && self.rule_version.is_none()
    }
}

/// Why a consumer identity or rule version is refused, if it is: empty, longer than
/// [`MAX_CLASSIFIER_BYTES`], only white space, or holding a control character (it must be
/// printable text).
pub fn check_classifier(value: &str) -> Result<(), String> {
    if value.trim().is_empty() {
        return Err("must not be empty".to_owned());
    }
    if value.len() > MAX_CLASSIFIER_BYTES {
        return Err(format!(
            "is {} bytes; at most {MAX_CLASSIFIER_BYTES}",
            value.len()
        ));
    }
    if value.chars().any(char::is_control) {
        return Err("must be printable (no control characters)".to_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for a in [Area::Live, Area::Archived, Area::Quarantine] {
            assert_eq!(a.as_str().parse::<Area>(), Ok(a));
        }
        assert!("lost".parse::<Area>().is_err());
        for r in [RouteKind::Broker, RouteKind::Application, RouteKind::Import] {
            assert_eq!(r.as_str().parse::<RouteKind>(), Ok(r));
        }
        assert_eq!(
            DeadLetterReason::from("TTLExpired"),
            DeadLetterReason::TtlExpired
        );
        assert_eq!(DeadLetterReason::from("Bad").as_str(), "Bad");
    }

    #[test]
    fn a_classifier_is_printable_and_bounded() {
        assert_eq!(check_classifier("orders-consumer@4.2"), Ok(()));
        assert!(check_classifier("").is_err());
        assert!(check_classifier("  ").is_err());
        assert!(check_classifier("a\nb").is_err());
        assert!(check_classifier("a\u{7f}").is_err());
        assert_eq!(check_classifier(&"é".repeat(128)), Ok(()));
        assert!(check_classifier(&"é".repeat(129)).is_err());
    }

    proptest::proptest! {
        /// The bound: accepted exactly when non-blank, at most the limit in bytes and
        /// free of control characters.
        #[test]
        fn a_classifier_is_accepted_exactly_within_its_bound(s in "\\PC{0,300}|[ -~\t\n]{0,300}") {
            let ok = !s.trim().is_empty()
                && s.len() <= MAX_CLASSIFIER_BYTES
                && !s.chars().any(char::is_control);
            proptest::prop_assert_eq!(check_classifier(&s).is_ok(), ok);
        }
    }
}
