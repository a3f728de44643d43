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
}
