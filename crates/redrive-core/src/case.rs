//! Recovery cases: the vocabulary of a dead letter's recovery and its decisions, as pure
//! functions.
//!
//! A dead letter proves that a delivery was separated from its ordinary path, nothing more.
//! A case keeps apart what that leaves open — the intent, the effect history, the observed
//! failure, the diagnosis, the correction, replay safety, the value window, ownership and
//! the terminal outcome — and answers, from what is known, the one next decision.
//!
//! # The record
//!
//! - Vocabulary: [`Route`] (who separated the delivery), [`RouteRule`] (under which rule),
//!   [`EvidenceQuality`] (how far the attempt evidence goes), [`RepetitionPolicy`] (what a
//!   second delivery may do), [`EffectAnswer`] (what the effect authority said).
//! - The timeline: an append-only list of [`TimelineEntry`]; each moves the case to one
//!   [`CaseState`]. The current state is the last entry's ([`current_state`]);
//!   [`may_append`] says which state may follow which, [`check_append`] also keeps time in
//!   order.
//!
//! The evidence states are kept apart on purpose: dead-lettered
//! ([`CaseState::RouteObserved`]), diagnosed ([`CaseState::DiagnosisProposed`]), corrected
//! ([`CaseState::CorrectionIdentified`], then [`CaseState::CorrectionIsolated`] once tested),
//! replay eligible ([`CaseState::ReplayEligible`]), replayed ([`CaseState::ReplayAdmitted`])
//! and completed ([`CaseState::Completed`]) are six states, never one. A case ends in one
//! [`Terminal`] state; "closed without replay" is a terminal state reached with no replay
//! admitted ([`closed_without_replay`]).
//!
//! # The decision ([`decide`])
//!
//! [`CaseFacts`] is what is known about one case at one time. [`decide`] walks the
//! recovery order step by step and answers with the first step that does not pass:
//!
//! 1. preserve the exact item and route identity;
//! 2. verify the route's configuration, permissions and evidence quality;
//! 3. keep payload evidence minimized and bounded by a retention rule;
//! 4. the intent is still wanted and inside its value window;
//! 5. prior effects are reconciled before any replay;
//! 6. the observed failure has a diagnosis of its own;
//! 7. one versioned correction is identified;
//! 8. it passed an isolated test on this exact payload;
//! 9. authorization and payload policy are current;
//! 10. ordering context is in hand;
//! 11. one owner and one valid destination;
//! 12. a replay budget is named and available;
//! 13. replay eligible (or closed without replay, above);
//! 14. a replay in flight is observed and halted on uncertainty (checked first: a gate cannot
//!     recall a delivery already made);
//! 15. terminal states are recorded where they are decided (steps 4, 5, 9);
//! 16. an unresolved case is retained only until its review deadline: then its owner
//!     decides, and an unowned case is escalated for its owner whatever else it waited on
//!     ([`missing_now`] names all of it, the owner first).
//!
//! A closing without execution (steps 4 and 9) is held while a replay of the case still
//! waits in its queue (`hold:replay_in_flight`): a terminal state is final and true. A
//! case's next check ([`next_check`]) is never after the end of its value window still to
//! come, and admission checks the window, the bytes and a queued replay again
//! ([`admission_check`]). A transformation whose bytes fail the destination's validation
//! is refused before it is recorded ([`judge_transformation`]).
//!
//! # Ownership and review
//!
//! A case is claimed with a [`Lease`] ([`claim`], [`renew`], [`release`]): one owner at a
//! time, expiry on the clock passed in. Its review deadline is [`DEFAULT_REVIEW_MS`] after
//! creation unless an entity's rule says otherwise ([`review_deadline`]); [`review_due`]
//! answers what an overdue case needs.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::clock::Timestamp;
use crate::dead_letter::{EvidenceQuality, RouteKind, UnknownVariant};
use crate::register::RegisterAnswer;

/// How long after its creation a case is due for review unless its entity's rule says
/// otherwise: 24 hours.
pub const DEFAULT_REVIEW_MS: u64 = 24 * 60 * 60 * 1000;

macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $v),+ }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$v),+];

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

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

named_enum! {
    /// Who separated the delivery from its ordinary path. The two paths have different
    /// authorities and failure modes and are never merged into one "dead-lettered".
    Route {
        /// The broker routed it under a configured rule (delivery threshold, expiry, filter,
        /// size).
        BrokerRouted = "broker_routed",
        /// The application caught it, wrote it to quarantine and acknowledged the original.
        ApplicationQuarantined = "application_quarantined",
        /// Neither can be shown (the quarantine write and the source acknowledgment may have
        /// separated, or the source did not say).
        RouteIndeterminate = "route_indeterminate",
    }
}

impl From<RouteKind> for Route {
    fn from(kind: RouteKind) -> Route {
        match kind {
            RouteKind::Broker => Route::BrokerRouted,
            RouteKind::Application => Route::ApplicationQuarantined,
            // Another system's broker routed it under its own policy (Event Grid's retry
            // policy, an SQS redrive policy, another redrive); how far its attempt
            // evidence can be trusted is the record's count quality, not its route.
            RouteKind::Import => Route::BrokerRouted,
        }
    }
}

named_enum! {
    /// The rule under which a delivery was routed. Routing evidence, never a diagnosis.
    RouteRule {
        /// Delivered the maximum number of times without settlement.
        DeliveryThreshold = "delivery_threshold",
        /// The message's time to live ran out.
        Expiry = "expiry",
        /// An administrative filter rule routed it.
        Filter = "filter",
        /// Refused for its size before ordinary delivery.
        Size = "size",
        /// The application dead-lettered it with its own reason.
        Application = "application",
    }
}

impl RouteRule {
    /// The rule a dead letter was routed under, from who routed it and its reason code. An
    /// application's dead letter is [`RouteRule::Application`] whatever its reason says
    /// (its reason is a classification by code, bound to the consumer, never the broker's).
    /// A broker's reason names its rule: expiry (`TTLExpired`, `TimeToLiveExceeded`, any
    /// reason naming an expiry), a filter (a reason naming a filter), a size refusal (a
    /// reason naming a size or a message too large); every other broker reason is a
    /// delivery threshold (`MaxDeliveryCountExceeded`, `MaxDeliveryAttemptsExceeded`, an
    /// endpoint's refusal).
    pub fn of(route: Route, reason: &str) -> RouteRule {
        if route == Route::ApplicationQuarantined {
            return RouteRule::Application;
        }
        let r = reason.to_ascii_lowercase();
        if r.contains("ttl") || r.contains("timetolive") || r.contains("expired") {
            RouteRule::Expiry
        } else if r.contains("filter") {
            RouteRule::Filter
        } else if r.contains("size") || r.contains("toolarge") {
            RouteRule::Size
        } else {
            RouteRule::DeliveryThreshold
        }
    }

    /// The rule a reason names by itself, if it names one: for evidence from elsewhere
    /// (an import) whose source said nothing else of the route. Expiry, filter and size as
    /// [`RouteRule::of`] reads them; a delivery threshold only when the reason names a
    /// count of deliveries, attempts or receives (`MaxDeliveryCountExceeded`,
    /// `MaxDeliveryAttemptsExceeded`, `MaxReceiveCountExceeded`). Any other reason names
    /// no rule: none is invented for it.
    pub fn named(reason: &str) -> Option<RouteRule> {
        let r = reason.to_ascii_lowercase();
        match RouteRule::of(Route::BrokerRouted, reason) {
            RouteRule::DeliveryThreshold
                if !(r.contains("deliver") || r.contains("attempt") || r.contains("receive")) =>
            {
                None
            }
            rule => Some(rule),
        }
    }

    /// Whether routing under this rule follows a consumer's observed failure. Expiry,
    /// filter and size routing say nothing about the consumer or the payload: they stay
    /// routing evidence and are never recorded as a failure of processing.
    pub fn observes_consumer_failure(self) -> bool {
        matches!(self, RouteRule::DeliveryThreshold | RouteRule::Application)
    }

    /// Whether the rule applies to a message that went through ordinary delivery, so that
    /// a receive history exists. Filter and size routing happen before it.
    pub fn has_receive_history(self) -> bool {
        !matches!(self, RouteRule::Filter | RouteRule::Size)
    }
}

/// The attempt history a record may claim: the counted deliveries for a rule applied after
/// ordinary delivery, none at all (not zero) for a rule applied before it.
pub fn attempt_history(rule: RouteRule, delivery_count: Option<u32>) -> Option<u32> {
    if rule.has_receive_history() {
        delivery_count
    } else {
        None
    }
}

/// The attempt history a record's evidence supports: none when its count quality is
/// [`EvidenceQuality::Unavailable`] (no count was kept); under a known rule, as
/// [`attempt_history`] says; under no known rule (an indeterminate route), the count only
/// when its source counted it (`exact` or `approximate`), never an invented one.
pub fn attempt_evidence(
    rule: Option<RouteRule>,
    quality: EvidenceQuality,
    delivery_count: u32,
) -> Option<u32> {
    match (rule, quality) {
        (_, EvidenceQuality::Unavailable) => None,
        (Some(r), _) => attempt_history(r, Some(delivery_count)),
        (None, EvidenceQuality::Exact | EvidenceQuality::Approximate) => Some(delivery_count),
        (None, _) => None,
    }
}

named_enum! {
    /// Whether the dead-letter target took the record when it was routed.
    RouteTarget {
        /// The configured target existed and was written.
        Written = "written",
        /// The target was missing or not writable; the record fell back to the entity's own
        /// store.
        FellBack = "fell_back",
        /// Nothing says where the record was written (an import without it).
        Unknown = "unknown",
    }
}

fn rank(q: EvidenceQuality) -> u8 {
    match q {
        EvidenceQuality::Exact => 3,
        EvidenceQuality::Approximate => 2,
        EvidenceQuality::Incomplete => 1,
        EvidenceQuality::Unavailable => 0,
    }
}

fn weaker(a: EvidenceQuality, b: EvidenceQuality) -> EvidenceQuality {
    if rank(a) <= rank(b) { a } else { b }
}

/// The evidence quality a case records once its route is checked: the counted quality,
/// never raised, and at most [`EvidenceQuality::Incomplete`] when the target did not take
/// the record (a fallback, or no word of where it went) — a missing forwarding path means
/// attempts may have gone uncounted, never that there were none.
pub fn verified_quality(counted: EvidenceQuality, target: RouteTarget) -> EvidenceQuality {
    match target {
        RouteTarget::Written => counted,
        RouteTarget::FellBack | RouteTarget::Unknown => {
            weaker(counted, EvidenceQuality::Incomplete)
        }
    }
}

named_enum! {
    /// What another delivery of the intent may do.
    RepetitionPolicy {
        /// Repeating it has no effect that could duplicate or conflict.
        Safe = "safe",
        /// The handler converges on the same state when run twice.
        IdempotencyProtected = "idempotency_protected",
        /// Not idempotent, but an effect authority can say whether the effect happened:
        /// one replay after an authoritative `absent`.
        Reconcilable = "reconcilable",
        /// Never delivered again by the broker.
        NonRepeatable = "non_repeatable",
    }
}

impl RepetitionPolicy {
    /// The policy of a message type from its register answer and whether an effect
    /// authority is registered for it. An idempotent type is idempotency-protected; a type
    /// whose handler is not idempotent is reconcilable with an authority and non-repeatable
    /// without; a type the register does not know is non-repeatable (nothing inherits a
    /// replayable default). `Safe` is never derived: only an explicit statement makes it.
    pub fn from_register(answer: &RegisterAnswer, has_effect_authority: bool) -> Self {
        match answer {
            RegisterAnswer::Idempotent { .. } => RepetitionPolicy::IdempotencyProtected,
            RegisterAnswer::NotIdempotent if has_effect_authority => RepetitionPolicy::Reconcilable,
            RegisterAnswer::NotIdempotent | RegisterAnswer::NotRegistered => {
                RepetitionPolicy::NonRepeatable
            }
        }
    }
}

named_enum! {
    /// What an effect authority answered for an intent.
    EffectAnswer {
        /// The effect exists and is bound to the intent.
        Present = "present",
        /// The effect did not happen.
        Absent = "absent",
        /// The authority cannot say.
        Indeterminate = "indeterminate",
        /// The authority could not be asked (no answer, an error, a timeout).
        Unreachable = "unreachable",
    }
}

named_enum! {
    /// Where a case ends. Nothing is appended after one.
    Terminal {
        /// Authoritative, intent-bound evidence establishes the required effect.
        Completed = "completed",
        /// The payload violates current schema or authorization and no approved correction
        /// makes it valid.
        Rejected = "rejected",
        /// The producer cancelled the intent.
        Cancelled = "cancelled",
        /// The value window passed: completion would no longer help.
        Expired = "expired",
        /// A newer intent replaced this one.
        Superseded = "superseded",
        /// Whether the effect happened cannot be established, and the case is closed so.
        Indeterminate = "indeterminate",
    }
}

named_enum! {
    /// Where a case is: the state of its timeline's last entry.
    ///
    /// "Open" below means any state but a terminal one. A timeline starts with
    /// [`CaseState::RouteObserved`] and nothing follows a terminal state; the other rules
    /// are given per state as "follows:" (what the state before it may be).
    CaseState {
        /// Dead-letter route observed: the broker or application separated the delivery
        /// under a named rule. Starts every timeline, and only starts it.
        RouteObserved = "route_observed",
        /// Route configuration verified: source, destination, policy and permissions match
        /// the intended setup. Follows: any open state but replay admitted.
        RouteVerified = "route_verified",
        /// Attempt evidence approximate: the provider's semantics support no exact count.
        /// Follows: any open state but replay admitted.
        AttemptsApproximate = "attempts_approximate",
        /// Payload identity preserved: exact bytes or an authoritative digest bind later
        /// work to one item. Follows: any open state but replay admitted.
        PayloadPreserved = "payload_preserved",
        /// Access authorized: current policy permits inspection of the minimized evidence.
        /// Follows: any open state but replay admitted.
        AccessAuthorized = "access_authorized",
        /// Intent active: the operation is still wanted. Follows: any open state but replay
        /// admitted.
        IntentActive = "intent_active",
        /// Value valid: useful completion remains possible. Follows: any open state but
        /// replay admitted.
        ValueValid = "value_valid",
        /// Effect absent: authoritative evidence says the effect did not happen. Follows:
        /// any open state.
        EffectAbsent = "effect_absent",
        /// Effect present: authoritative evidence binds an existing effect to the intent.
        /// Follows: any open state.
        EffectPresent = "effect_present",
        /// Effect indeterminate: the evidence cannot say whether the effect happened.
        /// Follows: any open state.
        EffectIndeterminate = "effect_indeterminate",
        /// Failure classified: a bounded observed failure category exists (an observation,
        /// not a cause). Follows: any open state.
        FailureClassified = "failure_classified",
        /// Diagnosis proposed: a hypothesis and its disconfirming evidence, recorded apart
        /// from the observation. Follows: any open state but replay admitted.
        DiagnosisProposed = "diagnosis_proposed",
        /// Correction identified: one versioned change claims to address the failure shape.
        /// Follows: any open state but replay admitted.
        CorrectionIdentified = "correction_identified",
        /// Correction isolated: the change passed a bounded test away from the live effect
        /// path. Evidence, not recovery. Follows: correction identified only (a test result
        /// belongs to the correction just identified).
        CorrectionIsolated = "correction_isolated",
        /// Replay eligible: intent, value, authorization, effect safety, ordering and
        /// capacity gates pass. Follows: a passing gate's evidence only — route verified,
        /// attempts approximate, payload preserved, access authorized, intent active, value
        /// valid, effect absent or correction isolated; never a pause (retained, escalated),
        /// an effect present or indeterminate, a stopped replay or an untested correction.
        ReplayEligible = "replay_eligible",
        /// Replay admitted: one owner created one bounded attempt under a named budget.
        /// Follows: replay eligible only. Followed only by what came of it: an effect state,
        /// failure classified, replay stopped, or indeterminate.
        ReplayAdmitted = "replay_admitted",
        /// Replay stopped: a declared error, load or uncertainty threshold halted further
        /// attempts. Follows: replay admitted, or the outcome recorded after it (effect
        /// absent or indeterminate, failure classified).
        ReplayStopped = "replay_stopped",
        /// Unresolved retained: quarantined with an owner and a next review time. Follows:
        /// any open state but replay admitted.
        Retained = "retained",
        /// Overdue with no owner (or missing an authority only a person can supply): waits
        /// for an explicit decision. Follows: any open state but replay admitted.
        Escalated = "escalated",
        /// Terminal: the effect is established. Follows: effect present only.
        Completed = "completed",
        /// Terminal: rejected under a named policy. Follows: any open state but replay
        /// admitted.
        Rejected = "rejected",
        /// Terminal: the intent was cancelled. Follows: any open state but replay admitted.
        Cancelled = "cancelled",
        /// Terminal: the value window passed. Follows: any open state but replay admitted.
        Expired = "expired",
        /// Terminal: the intent was superseded. Follows: any open state but replay
        /// admitted.
        Superseded = "superseded",
        /// Terminal: the effect cannot be established. Follows: any open state.
        Indeterminate = "indeterminate",
    }
}

impl CaseState {
    /// The terminal state this is, if it is one.
    pub fn terminal(self) -> Option<Terminal> {
        match self {
            CaseState::Completed => Some(Terminal::Completed),
            CaseState::Rejected => Some(Terminal::Rejected),
            CaseState::Cancelled => Some(Terminal::Cancelled),
            CaseState::Expired => Some(Terminal::Expired),
            CaseState::Superseded => Some(Terminal::Superseded),
            CaseState::Indeterminate => Some(Terminal::Indeterminate),
            _ => None,
        }
    }
}

impl From<Terminal> for CaseState {
    fn from(t: Terminal) -> CaseState {
        match t {
            Terminal::Completed => CaseState::Completed,
            Terminal::Rejected => CaseState::Rejected,
            Terminal::Cancelled => CaseState::Cancelled,
            Terminal::Expired => CaseState::Expired,
            Terminal::Superseded => CaseState::Superseded,
            Terminal::Indeterminate => CaseState::Indeterminate,
        }
    }
}

mod millis {
    use super::*;

    pub fn serialize<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_i64(t.as_millis())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        i64::deserialize(d).map(Timestamp)
    }
}

/// One entry of a case's append-only timeline: who moved the case to which state, when, and
/// on what evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimelineEntry {
    /// When, in milliseconds since the epoch.
    #[serde(rename = "at_ms", with = "millis")]
    pub at: Timestamp,
    /// Who: `broker`, a principal, or a service.
    pub actor: String,
    /// The state the entry moves the case to.
    pub state: CaseState,
    /// The evidence, as text.
    pub evidence: String,
    /// The evidence, as named fields (policy version, correction version, effect binding…).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fields: BTreeMap<String, String>,
}

/// A timeline entry or a claim that the case does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaseError {
    /// The timeline is empty and the entry is not the route observation that opens it.
    #[error("a case opens with route_observed, not {next}")]
    NotOpened {
        /// The refused state.
        next: CaseState,
    },
    /// A route observation after the case was opened.
    #[error("the case is open already: route_observed only starts a timeline")]
    AlreadyOpened,
    /// The case is closed.
    #[error("the case is closed ({state}): nothing follows a terminal state, not {next}")]
    Closed {
        /// Its terminal state.
        state: Terminal,
        /// The refused state.
        next: CaseState,
    },
    /// The state may not follow the current one.
    #[error("{next} may not follow {current}")]
    NotAllowed {
        /// The current state.
        current: CaseState,
        /// The refused state.
        next: CaseState,
    },
    /// An entry earlier than the timeline's last one.
    #[error("an entry at {at} ms is earlier than the last one at {last} ms")]
    OutOfOrder {
        /// The last entry's time (ms).
        last: i64,
        /// The refused entry's time (ms).
        at: i64,
    },
    /// Another owner holds a live lease.
    #[error("the case is claimed by {owner} until {}", .until.to_rfc3339())]
    Claimed {
        /// The current owner.
        owner: String,
        /// When its lease runs out.
        until: Timestamp,
    },
    /// The caller holds no live lease on the case.
    #[error("{who} holds no lease on the case")]
    NotOwner {
        /// The caller.
        who: String,
    },
}

/// The current state of a case: its timeline's last entry's. `None` for an empty timeline
/// (a case not yet opened).
pub fn current_state(timeline: &[TimelineEntry]) -> Option<CaseState> {
    timeline.last().map(|e| e.state)
}

/// Whether a case closed without a replay: it is in a terminal state and no replay was
/// ever admitted.
pub fn closed_without_replay(timeline: &[TimelineEntry]) -> bool {
    current_state(timeline).is_some_and(|s| s.terminal().is_some())
        && !timeline
            .iter()
            .any(|e| e.state == CaseState::ReplayAdmitted)
}

/// Whether `next` may follow `current` (`None`: an empty timeline). The rules are given
/// per state on [`CaseState`]; whether the gates behind a state pass is [`decide`]'s answer,
/// which the caller records.
pub fn may_append(current: Option<CaseState>, next: CaseState) -> Result<(), CaseError> {
    use CaseState as S;
    let Some(current) = current else {
        return match next {
            S::RouteObserved => Ok(()),
            _ => Err(CaseError::NotOpened { next }),
        };
    };
    if let Some(state) = current.terminal() {
        return Err(CaseError::Closed { state, next });
    }
    let allowed = match next {
        S::RouteObserved => return Err(CaseError::AlreadyOpened),
        // A replay in flight is followed by what came of it, and by nothing else.
        _ if current == S::ReplayAdmitted => matches!(
            next,
            S::EffectPresent
                | S::EffectAbsent
                | S::EffectIndeterminate
                | S::FailureClassified
                | S::ReplayStopped
                | S::Indeterminate
        ),
        S::ReplayAdmitted => current == S::ReplayEligible,
        S::ReplayEligible => matches!(
            current,
            S::RouteVerified
                | S::AttemptsApproximate
                | S::PayloadPreserved
                | S::AccessAuthorized
                | S::IntentActive
                | S::ValueValid
                | S::EffectAbsent
                | S::CorrectionIsolated
        ),
        S::CorrectionIsolated => current == S::CorrectionIdentified,
        S::ReplayStopped => matches!(
            current,
            S::EffectAbsent | S::EffectIndeterminate | S::FailureClassified
        ),
        S::Completed => current == S::EffectPresent,
        _ => true,
    };
    if allowed {
        Ok(())
    } else {
        Err(CaseError::NotAllowed { current, next })
    }
}

/// Whether `entry` may be appended to `timeline`: its state may follow the current one
/// ([`may_append`]) and it is not earlier than the last entry.
pub fn check_append(timeline: &[TimelineEntry], entry: &TimelineEntry) -> Result<(), CaseError> {
    may_append(current_state(timeline), entry.state)?;
    match timeline.last() {
        Some(last) if entry.at < last.at => Err(CaseError::OutOfOrder {
            last: last.at.as_millis(),
            at: entry.at.as_millis(),
        }),
        _ => Ok(()),
    }
}

/// The intent a case stands for: the message's intent id, else its message id.
pub fn intent_identity<'a>(intent_id: Option<&'a str>, message_id: &'a str) -> &'a str {
    intent_id.filter(|i| !i.is_empty()).unwrap_or(message_id)
}

/// A claim on a case: one owner until a time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Who holds it.
    pub owner: String,
    /// When it runs out, in milliseconds since the epoch.
    #[serde(rename = "until_ms", with = "millis")]
    pub until: Timestamp,
}

impl Lease {
    /// Whether the lease still holds at `now`.
    pub fn is_live(&self, now: Timestamp) -> bool {
        self.until > now
    }
}

/// The owner of a case at `now`: the holder of a live lease.
pub fn owner_at(lease: Option<&Lease>, now: Timestamp) -> Option<&str> {
    lease.filter(|l| l.is_live(now)).map(|l| l.owner.as_str())
}

/// Claims a case for `who` for `lease_ms` from `now`. Refused, naming the owner, while
/// another owner's lease is live; a lease that ran out is taken over, and the owner's own
/// claim renews it.
pub fn claim(
    current: Option<&Lease>,
    who: &str,
    now: Timestamp,
    lease_ms: u64,
) -> Result<Lease, CaseError> {
    if let Some(l) = current.filter(|l| l.is_live(now) && l.owner != who) {
        return Err(CaseError::Claimed {
            owner: l.owner.clone(),
            until: l.until,
        });
    }
    Ok(Lease {
        owner: who.to_owned(),
        until: now.plus_millis(i64::try_from(lease_ms).unwrap_or(i64::MAX)),
    })
}

/// Renews `who`'s live lease for `lease_ms` from `now`. Refused when `who` holds none (it
/// ran out, or it is another owner's).
pub fn renew(
    current: Option<&Lease>,
    who: &str,
    now: Timestamp,
    lease_ms: u64,
) -> Result<Lease, CaseError> {
    match owner_at(current, now) {
        Some(o) if o == who => claim(current, who, now, lease_ms),
        _ => Err(CaseError::NotOwner {
            who: who.to_owned(),
        }),
    }
}

/// Releases `who`'s live lease at `now`. Refused when `who` holds none.
pub fn release(current: Option<&Lease>, who: &str, now: Timestamp) -> Result<(), CaseError> {
    match owner_at(current, now) {
        Some(o) if o == who => Ok(()),
        _ => Err(CaseError::NotOwner {
            who: who.to_owned(),
        }),
    }
}

/// A case's review deadline: `rule_ms` (the entity's rule), else [`DEFAULT_REVIEW_MS`],
/// after its creation.
pub fn review_deadline(created: Timestamp, rule_ms: Option<u64>) -> Timestamp {
    let ms = rule_ms.unwrap_or(DEFAULT_REVIEW_MS);
    created.plus_millis(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// What a case's review deadline asks for at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReviewDue {
    /// The deadline has not come.
    NotDue,
    /// Overdue: the owner decides to archive, delete or extend under the named policy.
    OwnerDecides {
        /// The owner.
        owner: String,
    },
    /// Overdue with no owner: escalated to an explicit archive / delete / extend decision.
    Escalate,
}

/// What an unresolved case with review `deadline` and `lease` needs at `now`.
pub fn review_due(deadline: Timestamp, lease: Option<&Lease>, now: Timestamp) -> ReviewDue {
    if now < deadline {
        return ReviewDue::NotDue;
    }
    match owner_at(lease, now) {
        Some(owner) => ReviewDue::OwnerDecides {
            owner: owner.to_owned(),
        },
        None => ReviewDue::Escalate,
    }
}

/// Whether the payload bytes of a case closed at `closed_at` are due for deletion at `now`
/// under a retention of `retention_ms` (the digest and the timeline are kept).
pub fn payload_deletion_due(closed_at: Timestamp, retention_ms: u64, now: Timestamp) -> bool {
    now >= closed_at.plus_millis(i64::try_from(retention_ms).unwrap_or(i64::MAX))
}

named_enum! {
    /// Whether the intent is still wanted.
    IntentStatus {
        /// Wanted.
        Active = "active",
        /// The producer cancelled it.
        Cancelled = "cancelled",
        /// A newer intent replaced it.
        Superseded = "superseded",
    }
}

named_enum! {
    /// What is known of the dead-letter route's configuration.
    RouteCheck {
        /// Not checked yet.
        Unverified = "unverified",
        /// Source, destination, policy and permissions match the intended setup.
        Verified = "verified",
        /// The destination or its permissions are wrong.
        Misconfigured = "misconfigured",
    }
}

/// What is known of the effect of the intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EffectLookup {
    /// No effect authority is registered for the message type.
    NoAuthority,
    /// An authority is registered and has not been asked yet.
    NotAsked,
    /// The authority's answer, with the evidence that binds it.
    Answered {
        /// Its answer.
        answer: EffectAnswer,
        /// The evidence reference it gave (the intent-to-effect binding when present).
        evidence: String,
    },
}

named_enum! {
    /// Where the case's correction stands.
    CorrectionStatus {
        /// None recorded.
        None = "none",
        /// Identified, not tested.
        Untested = "untested",
        /// Its isolated test failed.
        TestFailed = "test_failed",
        /// Passed, but on another fixture than this case's exact payload.
        PassedOtherFixture = "passed_other_fixture",
        /// Passed on this case's exact payload (or its transformation).
        PassedExactPayload = "passed_exact_payload",
    }
}

named_enum! {
    /// A payload transformation proposed for the case.
    Transformation {
        /// None: the original bytes are replayed.
        None = "none",
        /// Transformed, with the intent shown equivalent under an approved authority.
        Equivalent = "equivalent",
        /// Transformed, equivalence not established: a new intent, never a replay.
        NotEquivalent = "not_equivalent",
        /// Transformed, but the new bytes fail the destination's validation: never tested
        /// or replayed; another correction is needed.
        FailsValidation = "fails_validation",
    }
}

named_enum! {
    /// Whether the authority that admitted the intent still holds.
    Authorization {
        /// Current.
        Current = "current",
        /// Rotated or revoked since admission.
        Changed = "changed",
    }
}

named_enum! {
    /// The payload against the current schema and payload policy.
    PayloadCheck {
        /// Valid.
        Valid = "valid",
        /// Invalid.
        Invalid = "invalid",
    }
}

named_enum! {
    /// The ordering, partition or session context of the item.
    OrderingContext {
        /// The item needs none.
        NotRequired = "not_required",
        /// Its sequence is reconciled.
        InContext = "in_context",
        /// Its sequence context is missing.
        Missing = "missing",
    }
}

named_enum! {
    /// The replay destination.
    DestinationCheck {
        /// Exists and is not the broken path.
        Valid = "valid",
        /// None exists.
        Missing = "missing",
        /// Leads back to the path that failed.
        BrokenPath = "broken_path",
    }
}

named_enum! {
    /// The replay budget.
    Budget {
        /// Named and available now.
        Available = "available",
        /// Named, but its capacity (or a dependency) is unavailable now.
        Unavailable = "unavailable",
        /// No item, byte, concurrency and stop budget is named.
        Unbounded = "unbounded",
    }
}

named_enum! {
    /// Where the case's replay stands.
    ReplayProgress {
        /// None admitted since the last correction.
        NotStarted = "not_started",
        /// One replay admitted; no outcome yet.
        InFlight = "in_flight",
        /// The admitted replay repeated the failure.
        Failed = "failed",
        /// The last replay was stopped and no correction was recorded since.
        Stopped = "stopped",
    }
}

/// What is known about one case at one time: the input of [`decide`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseFacts {
    /// The terminal state, if the case is closed.
    pub closed: Option<Terminal>,
    /// Whether the exact payload bytes (or an authoritative digest with them) are kept.
    pub payload_preserved: bool,
    /// Who separated the delivery.
    pub route: Route,
    /// The route's configuration.
    pub route_check: RouteCheck,
    /// Whether a retention rule bounds the kept payload.
    pub retention_bounded: bool,
    /// The intent.
    pub intent: IntentStatus,
    /// When the value window ends, if it does.
    pub value_window_end: Option<Timestamp>,
    /// The effect authority's answer.
    pub effect: EffectLookup,
    /// What another delivery may do.
    pub repetition: RepetitionPolicy,
    /// Whether a diagnosis (hypothesis, disconfirming evidence, owner) is recorded.
    pub diagnosed: bool,
    /// The correction.
    pub correction: CorrectionStatus,
    /// A payload transformation, if any.
    pub transformation: Transformation,
    /// The authority to execute the intent.
    pub authorization: Authorization,
    /// The payload against the current schema and policy.
    pub payload_check: PayloadCheck,
    /// The ordering context.
    pub ordering: OrderingContext,
    /// The replay destination.
    pub destination: DestinationCheck,
    /// The current claim.
    pub lease: Option<Lease>,
    /// The replay budget.
    pub budget: Budget,
    /// The replay.
    pub replay: ReplayProgress,
    /// Whether the message of the case's last replay still waits in (or is locked on) its
    /// destination queue, whatever its record says.
    pub replay_queued: bool,
    /// Whether a live dead-letter record is still held for the case.
    pub record_live: bool,
    /// The review deadline.
    pub review_deadline: Timestamp,
}

/// How a case is closed, with the evidence the terminal entry records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Closure {
    /// Completed: the effect exists.
    Completed {
        /// The intent-to-effect binding.
        binding: String,
    },
    /// Rejected: the payload violates current schema or payload policy and no approved
    /// transformation makes it valid.
    Rejected,
    /// Cancelled by its producer, without execution.
    Cancelled,
    /// Expired: the value window ended.
    Expired {
        /// When it ended.
        deadline: Timestamp,
    },
    /// Superseded by a newer intent, without execution.
    Superseded,
}

impl Closure {
    /// The terminal state it records.
    pub fn terminal(&self) -> Terminal {
        match self {
            Closure::Completed { .. } => Terminal::Completed,
            Closure::Rejected => Terminal::Rejected,
            Closure::Cancelled => Terminal::Cancelled,
            Closure::Expired { .. } => Terminal::Expired,
            Closure::Superseded => Terminal::Superseded,
        }
    }
}

named_enum! {
    /// A repair that comes before anything else is decided.
    Repair {
        /// Fix the dead-letter destination or its permissions; the record's attempt history
        /// stays incomplete.
        RouteConfiguration = "route_configuration",
        /// Archive the dead-letter record of an intent whose effect exists: state repair,
        /// not a replay.
        ArchiveRecord = "archive_record",
    }
}

named_enum! {
    /// What a person must supply before the case can go on.
    Missing {
        /// Neither broker routing nor application quarantine can be shown.
        RouteEvidence = "route_evidence",
        /// The exact payload bytes are gone.
        PayloadIdentity = "payload_identity",
        /// No retention rule bounds the kept payload.
        RetentionRule = "retention_rule",
        /// No authoritative answer on the effect (indeterminate, unreachable, or a
        /// reconcilable type without an authority).
        EffectAuthority = "effect_authority",
        /// The type may not be delivered again: reject, or send a new intent.
        RepeatSafety = "repeat_safety",
        /// The authority that admitted the intent has changed.
        CurrentAuthorization = "current_authorization",
        /// No valid replay destination.
        ReplayDestination = "replay_destination",
        /// No replay budget is named.
        ReplayBudget = "replay_budget",
        /// The case is overdue and nobody owns it.
        Owner = "owner",
    }
}

named_enum! {
    /// A gate that holds a case until a condition changes.
    Gate {
        /// The ordering, partition or session context is missing.
        Ordering = "ordering",
        /// The replay budget's capacity or a dependency is unavailable.
        Capacity = "capacity",
        /// A replay of the case still waits in (or is locked on) its destination queue: the
        /// case is not closed without execution while that delivery may still happen.
        ReplayInFlight = "replay_in_flight",
    }
}

named_enum! {
    /// Why an admitted replay is stopped.
    StopTrigger {
        /// The effect evidence became indeterminate or unreachable.
        LostEffectEvidence = "lost_effect_evidence",
        /// The replay repeated the failure.
        RepeatedFailure = "repeated_failure",
        /// Authorization or ordering evidence changed.
        EvidenceChanged = "evidence_changed",
        /// The replay owner lost its lease.
        LostLease = "lost_lease",
    }
}

/// The next decision on a case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The case is closed: nothing to decide.
    Closed(Terminal),
    /// Close it, without a (further) replay.
    Close(Closure),
    /// Repair first.
    Repair(Repair),
    /// A person must supply what is missing.
    Escalate {
        /// What.
        missing: Missing,
    },
    /// Hold the case (retained, under its owner) until the gate opens or the review comes.
    Hold {
        /// The closed gate.
        gate: Gate,
        /// The next review.
        next_review: Timestamp,
    },
    /// Check the route's configuration, permissions and evidence quality.
    VerifyRoute,
    /// Ask the effect authority.
    Reconcile,
    /// Record a diagnosis, apart from the observation.
    NeedsDiagnosis,
    /// Identify and version one correction.
    NeedsCorrection,
    /// Test the correction in isolation on this exact payload.
    NeedsIsolatedTest,
    /// The transformation is not equivalent: send a new intent by the ordinary path.
    NewIntent,
    /// Assign one owner.
    AssignOwner,
    /// Every gate passes: replay eligible, for one bounded replay by the owner.
    ReplayEligible,
    /// A replay is in flight: observe its effect.
    ObserveReplay,
    /// Stop the replay.
    StopReplay {
        /// Why.
        trigger: StopTrigger,
    },
    /// Overdue and owned: the owner decides to archive, delete or extend.
    Review {
        /// The owner.
        owner: String,
    },
}

impl Decision {
    /// Whether the decision leaves the case waiting (for a person or a condition), so that
    /// its review deadline applies.
    fn waits(&self) -> bool {
        matches!(
            self,
            Decision::Hold { .. }
                | Decision::VerifyRoute
                | Decision::Reconcile
                | Decision::NeedsDiagnosis
                | Decision::NeedsCorrection
                | Decision::NeedsIsolatedTest
                | Decision::NewIntent
                | Decision::AssignOwner
        )
    }
}

/// The next decision on a case at `now`, following the recovery order (see the module
/// docs): the first step that does not pass answers.
pub fn decide(f: &CaseFacts, now: Timestamp) -> Decision {
    if let Some(t) = f.closed {
        return Decision::Closed(t);
    }
    // 14. A replay in flight is observed first; it halts on uncertainty.
    if matches!(f.replay, ReplayProgress::InFlight | ReplayProgress::Failed) {
        return observe_replay(f, now);
    }
    let gate = hold_close(f, gates(f, now));
    // 16. Unresolved evidence is retained only under a bounded review.
    if gate.waits_for_review() {
        return match review_due(f.review_deadline, f.lease.as_ref(), now) {
            ReviewDue::NotDue => gate,
            // An escalation stands under its owner: the owner has what is missing.
            ReviewDue::OwnerDecides { .. } if matches!(gate, Decision::Escalate { .. }) => gate,
            ReviewDue::OwnerDecides { owner } => Decision::Review { owner },
            // The owner (and the passed deadline) is named first, whatever else is
            // missing ([`missing_now`] names the rest).
            ReviewDue::Escalate => Decision::Escalate {
                missing: Missing::Owner,
            },
        };
    }
    gate
}

/// A closing without execution is held while a replay of the case still waits in its
/// queue: `cancelled`, `superseded`, `expired` or `rejected` would not be true while that
/// delivery may still happen. `completed` stands on the effect's own evidence. Nor is
/// another replay eligible while one still waits: one delivery at a time.
fn hold_close(f: &CaseFacts, d: Decision) -> Decision {
    let held = Decision::Hold {
        gate: Gate::ReplayInFlight,
        next_review: f.review_deadline,
    };
    match d {
        Decision::Close(c) if f.replay_queued && !matches!(c, Closure::Completed { .. }) => held,
        Decision::ReplayEligible if f.replay_queued => held,
        d => d,
    }
}

impl Decision {
    /// Whether the review deadline applies to the decision: a case waiting for a person or
    /// a condition, an escalation, or a route configuration to repair.
    fn waits_for_review(&self) -> bool {
        self.waits()
            || matches!(
                self,
                Decision::Escalate { .. } | Decision::Repair(Repair::RouteConfiguration)
            )
    }
}

/// Everything a person must supply for the case now, the decision's own first: an overdue
/// case with no owner names the owner before what its gates still miss (a type that may
/// not be repeated, an effect authority…). Empty when the decision is no escalation.
pub fn missing_now(f: &CaseFacts, now: Timestamp) -> Vec<Missing> {
    match decide(f, now) {
        Decision::Escalate {
            missing: Missing::Owner,
        } => {
            let mut all = vec![Missing::Owner];
            if let Decision::Escalate { missing } = hold_close(f, gates(f, now))
                && missing != Missing::Owner
            {
                all.push(missing);
            }
            all
        }
        Decision::Escalate { missing } => vec![missing],
        _ => Vec::new(),
    }
}

/// How long a case whose replay still waits in its queue waits before the queue is looked
/// at again, ms.
pub const REPLAY_POLL_MS: i64 = 60_000;

/// When an open case waiting at `now` is looked at next: the earliest of its review
/// deadline, the end of its value window and the end of its claim that is still to come,
/// and within [`REPLAY_POLL_MS`] while a replay of it waits in its queue. Whatever state
/// the case waits in, the check is never after the end of a value window still to come:
/// expiry is applied when the window ends, not at the next review. `None`: nothing is
/// scheduled.
pub fn next_check(
    review_deadline: Timestamp,
    value_window_end: Option<Timestamp>,
    lease_until: Option<Timestamp>,
    replay_queued: bool,
    now: Timestamp,
) -> Option<Timestamp> {
    let poll = replay_queued.then(|| now.plus_millis(REPLAY_POLL_MS));
    [Some(review_deadline), value_window_end, lease_until, poll]
        .into_iter()
        .flatten()
        .filter(|t| *t > now)
        .min()
}

/// Where the bytes a replay (or a test) would deliver fail the destination's validation:
/// the field and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationFailure {
    /// The field (`body`, `body[0].eventTime`, `body.time`…).
    pub field: String,
    /// The rule it breaks, in words.
    pub rule: String,
}

impl fmt::Display for ValidationFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.rule)
    }
}

/// A proposed payload transformation, judged before anything is recorded: its bytes must
/// pass the validation the broker applies to what goes to the destination (`validation`),
/// or it is refused at once and never becomes a correction; a valid one is
/// [`Transformation::Equivalent`] or [`Transformation::NotEquivalent`] as its equivalence
/// statement says.
pub fn judge_transformation(
    validation: Result<(), ValidationFailure>,
    equivalent: bool,
) -> Result<Transformation, ValidationFailure> {
    validation?;
    Ok(if equivalent {
        Transformation::Equivalent
    } else {
        Transformation::NotEquivalent
    })
}

/// Why a replay is refused at admission, whatever admits it (a case's owner, a plan).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdmissionRefusal {
    /// The value window ended: the case is closed `expired`, not revived.
    Expired {
        /// When it ended.
        deadline: Timestamp,
    },
    /// The bytes to deliver fail the destination's validation.
    PayloadInvalid(ValidationFailure),
    /// An earlier replay of the case still waits in its queue.
    ReplayQueued,
}

/// The checks made again at the moment of admission, after every gate passed when the
/// replay was asked for: the value window has not ended at `now`, the bytes to deliver
/// pass the destination's validation, and no earlier replay still waits in its queue.
pub fn admission_check(
    value_window_end: Option<Timestamp>,
    payload: Result<(), ValidationFailure>,
    replay_queued: bool,
    now: Timestamp,
) -> Result<(), AdmissionRefusal> {
    if let Some(deadline) = value_window_end.filter(|d| *d <= now) {
        return Err(AdmissionRefusal::Expired { deadline });
    }
    payload.map_err(AdmissionRefusal::PayloadInvalid)?;
    if replay_queued {
        return Err(AdmissionRefusal::ReplayQueued);
    }
    Ok(())
}

/// The effect of an intent whose authority answered `present`: the record goes first
/// (state repair), then the case completes bound to the effect.
fn effect_present(f: &CaseFacts, evidence: &str) -> Decision {
    if f.record_live {
        Decision::Repair(Repair::ArchiveRecord)
    } else {
        Decision::Close(Closure::Completed {
            binding: evidence.to_owned(),
        })
    }
}

fn observe_replay(f: &CaseFacts, now: Timestamp) -> Decision {
    if let EffectLookup::Answered { answer, evidence } = &f.effect {
        match answer {
            EffectAnswer::Present => return effect_present(f, evidence),
            EffectAnswer::Indeterminate | EffectAnswer::Unreachable => {
                return Decision::StopReplay {
                    trigger: StopTrigger::LostEffectEvidence,
                };
            }
            EffectAnswer::Absent => {}
        }
    }
    if f.replay == ReplayProgress::Failed {
        return Decision::StopReplay {
            trigger: StopTrigger::RepeatedFailure,
        };
    }
    if f.authorization == Authorization::Changed || f.ordering == OrderingContext::Missing {
        return Decision::StopReplay {
            trigger: StopTrigger::EvidenceChanged,
        };
    }
    if owner_at(f.lease.as_ref(), now).is_none() {
        return Decision::StopReplay {
            trigger: StopTrigger::LostLease,
        };
    }
    Decision::ObserveReplay
}

/// The seed's recovery order, steps 1 to 13, each numbered as in the module doc and
/// answering with the first step that does not pass. It is one function on purpose (about
/// 130 lines): the order is the rule, and read top to bottom it is the seed's list.
fn gates(f: &CaseFacts, now: Timestamp) -> Decision {
    // 1. Preserve exact item and route identity.
    if !f.payload_preserved {
        return Decision::Escalate {
            missing: Missing::PayloadIdentity,
        };
    }
    // 2. Verify dead-letter configuration, permissions and evidence quality.
    match f.route_check {
        RouteCheck::Unverified => return Decision::VerifyRoute,
        RouteCheck::Misconfigured => return Decision::Repair(Repair::RouteConfiguration),
        RouteCheck::Verified => {}
    }
    if f.route == Route::RouteIndeterminate {
        return Decision::Escalate {
            missing: Missing::RouteEvidence,
        };
    }
    // 3. Minimize payload evidence: bounded retention, never an ungoverned archive.
    if !f.retention_bounded {
        return Decision::Escalate {
            missing: Missing::RetentionRule,
        };
    }
    // 4. The semantic intent and its value window.
    match f.intent {
        IntentStatus::Cancelled => return Decision::Close(Closure::Cancelled),
        IntentStatus::Superseded => return Decision::Close(Closure::Superseded),
        IntentStatus::Active => {}
    }
    if let Some(deadline) = f.value_window_end.filter(|d| *d <= now) {
        return Decision::Close(Closure::Expired { deadline });
    }
    // 5. Reconcile prior effect evidence before considering replay.
    match &f.effect {
        EffectLookup::Answered {
            answer: EffectAnswer::Present,
            evidence,
        } => return effect_present(f, evidence),
        EffectLookup::Answered {
            answer: EffectAnswer::Indeterminate | EffectAnswer::Unreachable,
            ..
        } => {
            return Decision::Escalate {
                missing: Missing::EffectAuthority,
            };
        }
        EffectLookup::NotAsked => return Decision::Reconcile,
        EffectLookup::NoAuthority if f.repetition == RepetitionPolicy::Reconcilable => {
            return Decision::Escalate {
                missing: Missing::EffectAuthority,
            };
        }
        EffectLookup::Answered {
            answer: EffectAnswer::Absent,
            ..
        }
        | EffectLookup::NoAuthority => {}
    }
    if f.repetition == RepetitionPolicy::NonRepeatable {
        return Decision::Escalate {
            missing: Missing::RepeatSafety,
        };
    }
    // 6. The observed failure stays apart from a diagnosis; a stopped replay sends the case
    // back to one.
    if !f.diagnosed || f.replay == ReplayProgress::Stopped {
        return Decision::NeedsDiagnosis;
    }
    // 7. Identify and version one correction (a non-equivalent transformation is a new
    // intent).
    if f.transformation == Transformation::FailsValidation {
        return Decision::NeedsCorrection;
    }
    if f.transformation == Transformation::NotEquivalent {
        return Decision::NewIntent;
    }
    match f.correction {
        CorrectionStatus::None => return Decision::NeedsCorrection,
        CorrectionStatus::TestFailed => return Decision::NeedsDiagnosis,
        // 8. Test the correction in isolation against the same failure shape.
        CorrectionStatus::Untested | CorrectionStatus::PassedOtherFixture => {
            return Decision::NeedsIsolatedTest;
        }
        CorrectionStatus::PassedExactPayload => {}
    }
    // 9. Re-check current authorization and payload policy.
    if f.authorization == Authorization::Changed {
        return Decision::Escalate {
            missing: Missing::CurrentAuthorization,
        };
    }
    if f.payload_check == PayloadCheck::Invalid && f.transformation != Transformation::Equivalent {
        return Decision::Close(Closure::Rejected);
    }
    // 10. Reconcile ordering, partition or session dependencies.
    if f.ordering == OrderingContext::Missing {
        return Decision::Hold {
            gate: Gate::Ordering,
            next_review: f.review_deadline,
        };
    }
    // 11. One replay owner and one destination.
    if f.destination != DestinationCheck::Valid {
        return Decision::Escalate {
            missing: Missing::ReplayDestination,
        };
    }
    if owner_at(f.lease.as_ref(), now).is_none() {
        return Decision::AssignOwner;
    }
    // 12. Item, byte, concurrency, dependency and stop budgets.
    match f.budget {
        Budget::Unbounded => {
            return Decision::Escalate {
                missing: Missing::ReplayBudget,
            };
        }
        Budget::Unavailable => {
            return Decision::Hold {
                gate: Gate::Capacity,
                next_review: f.review_deadline,
            };
        }
        Budget::Available => {}
    }
    // 13. Admit one bounded replay (closing without replay was decided above).
    // 15. Terminal states are decided at steps 4, 5 and 9, and after a replay at step 14.
    Decision::ReplayEligible
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HOUR: i64 = 3_600_000;
    const T0: Timestamp = Timestamp(1_800_000_000_000);

    fn at(h: i64) -> Timestamp {
        T0.plus_millis(h * HOUR)
    }

    fn lease(owner: &str, until: Timestamp) -> Option<Lease> {
        Some(Lease {
            owner: owner.to_owned(),
            until,
        })
    }

    /// A case on which every gate passes at `at(1)`.
    fn ready() -> CaseFacts {
        CaseFacts {
            closed: None,
            payload_preserved: true,
            route: Route::BrokerRouted,
            route_check: RouteCheck::Verified,
            retention_bounded: true,
            intent: IntentStatus::Active,
            value_window_end: Some(at(48)),
            effect: EffectLookup::Answered {
                answer: EffectAnswer::Absent,
                evidence: "ledger:none".to_owned(),
            },
            repetition: RepetitionPolicy::Reconcilable,
            diagnosed: true,
            correction: CorrectionStatus::PassedExactPayload,
            transformation: Transformation::None,
            authorization: Authorization::Current,
            payload_check: PayloadCheck::Valid,
            ordering: OrderingContext::NotRequired,
            destination: DestinationCheck::Valid,
            lease: lease("alice", at(2)),
            budget: Budget::Available,
            replay: ReplayProgress::NotStarted,
            replay_queued: false,
            record_live: false,
            review_deadline: at(24),
        }
    }

    fn now() -> Timestamp {
        at(1)
    }

    fn answered(answer: EffectAnswer, evidence: &str) -> EffectLookup {
        EffectLookup::Answered {
            answer,
            evidence: evidence.to_owned(),
        }
    }

    fn entry(state: CaseState, h: i64) -> TimelineEntry {
        TimelineEntry {
            at: at(h),
            actor: "broker".to_owned(),
            state,
            evidence: String::new(),
            fields: BTreeMap::new(),
        }
    }

    fn escalate(missing: Missing) -> Decision {
        Decision::Escalate { missing }
    }

    #[test]
    fn the_rule_comes_from_the_route_and_the_reason() {
        let b = Route::BrokerRouted;
        assert_eq!(
            RouteRule::of(b, "MaxDeliveryCountExceeded"),
            RouteRule::DeliveryThreshold
        );
        assert_eq!(
            RouteRule::of(b, "MaxDeliveryAttemptsExceeded"),
            RouteRule::DeliveryThreshold
        );
        assert_eq!(RouteRule::of(b, "TTLExpired"), RouteRule::Expiry);
        assert_eq!(RouteRule::of(b, "TimeToLiveExceeded"), RouteRule::Expiry);
        assert_eq!(
            RouteRule::of(b, "FilterEvaluationException"),
            RouteRule::Filter
        );
        assert_eq!(RouteRule::of(b, "MessageSizeExceeded"), RouteRule::Size);
        let a = Route::ApplicationQuarantined;
        assert_eq!(RouteRule::of(a, "TTLExpired"), RouteRule::Application);
        assert_eq!(RouteRule::of(a, "bad-payload"), RouteRule::Application);
        assert_eq!(
            RouteRule::named("MaxReceiveCountExceeded"),
            Some(RouteRule::DeliveryThreshold)
        );
        assert_eq!(
            RouteRule::named("MaxDeliveryAttemptsExceeded"),
            Some(RouteRule::DeliveryThreshold)
        );
        assert_eq!(
            RouteRule::named("TimeToLiveExceeded"),
            Some(RouteRule::Expiry)
        );
        assert_eq!(
            RouteRule::named("FilterEvaluationException"),
            Some(RouteRule::Filter)
        );
        assert_eq!(RouteRule::named("Imported"), None);
        assert_eq!(RouteRule::named("NonRetriableError"), None);
    }

    #[test]
    fn every_gate_passing_is_the_baseline() {
        assert_eq!(decide(&ready(), now()), Decision::ReplayEligible);
    }

    // The draft decision table, row by row.

    #[test]
    fn table_row_1_misconfigured_destination_repairs_configuration_and_caps_evidence() {
        let f = CaseFacts {
            route_check: RouteCheck::Misconfigured,
            ..ready()
        };
        assert_eq!(
            decide(&f, now()),
            Decision::Repair(Repair::RouteConfiguration)
        );
        assert_eq!(
            verified_quality(EvidenceQuality::Exact, RouteTarget::FellBack),
            EvidenceQuality::Incomplete
        );
        let unchecked = CaseFacts {
            route_check: RouteCheck::Unverified,
            ..ready()
        };
        assert_eq!(decide(&unchecked, now()), Decision::VerifyRoute);
    }

    #[test]
    fn table_row_2_present_effect_is_not_replayed_and_the_record_is_repaired() {
        let f = CaseFacts {
            effect: answered(EffectAnswer::Present, "payment:p-17"),
            record_live: true,
            ..ready()
        };
        assert_eq!(decide(&f, now()), Decision::Repair(Repair::ArchiveRecord));
        let repaired = CaseFacts {
            record_live: false,
            ..f
        };
        assert_eq!(
            decide(&repaired, now()),
            Decision::Close(Closure::Completed {
                binding: "payment:p-17".to_owned()
            })
        );
    }

    #[test]
    fn table_row_3_indeterminate_effect_escalates_with_the_authority_missing() {
        for answer in [EffectAnswer::Indeterminate, EffectAnswer::Unreachable] {
            let f = CaseFacts {
                effect: answered(answer, ""),
                ..ready()
            };
            assert_eq!(decide(&f, now()), escalate(Missing::EffectAuthority));
        }
        let unasked = CaseFacts {
            effect: EffectLookup::NotAsked,
            ..ready()
        };
        assert_eq!(decide(&unasked, now()), Decision::Reconcile);
    }

    #[test]
    fn table_row_4_cancelled_or_superseded_intent_closes_without_replay() {
        let cancelled = CaseFacts {
            intent: IntentStatus::Cancelled,
            ..ready()
        };
        assert_eq!(
            decide(&cancelled, now()),
            Decision::Close(Closure::Cancelled)
        );
        let superseded = CaseFacts {
            intent: IntentStatus::Superseded,
            ..ready()
        };
        assert_eq!(
            decide(&superseded, now()),
            Decision::Close(Closure::Superseded)
        );
    }

    #[test]
    fn table_row_5_passed_value_window_expires_explicitly() {
        let f = CaseFacts {
            value_window_end: Some(at(1)),
            ..ready()
        };
        assert_eq!(
            decide(&f, now()),
            Decision::Close(Closure::Expired { deadline: at(1) })
        );
        let open = CaseFacts {
            value_window_end: Some(at(1).plus_millis(1)),
            ..ready()
        };
        assert_eq!(decide(&open, now()), Decision::ReplayEligible);
    }

    #[test]
    fn table_row_6_invalid_payload_is_rejected_unless_an_approved_transformation_holds() {
        let f = CaseFacts {
            payload_check: PayloadCheck::Invalid,
            ..ready()
        };
        assert_eq!(decide(&f, now()), Decision::Close(Closure::Rejected));
        let transformed = CaseFacts {
            transformation: Transformation::Equivalent,
            ..f.clone()
        };
        assert_eq!(decide(&transformed, now()), Decision::ReplayEligible);
        let unauthorized = CaseFacts {
            authorization: Authorization::Changed,
            ..f
        };
        assert_eq!(
            decide(&unauthorized, now()),
            escalate(Missing::CurrentAuthorization)
        );
    }

    #[test]
    fn table_row_7_diagnosis_without_a_tested_correction_stays_quarantined() {
        let no_correction = CaseFacts {
            correction: CorrectionStatus::None,
            ..ready()
        };
        assert_eq!(decide(&no_correction, now()), Decision::NeedsCorrection);
        let untested = CaseFacts {
            correction: CorrectionStatus::Untested,
            ..ready()
        };
        assert_eq!(decide(&untested, now()), Decision::NeedsIsolatedTest);
        let undiagnosed = CaseFacts {
            diagnosed: false,
            ..ready()
        };
        assert_eq!(decide(&undiagnosed, now()), Decision::NeedsDiagnosis);
    }

    #[test]
    fn table_row_8_isolated_pass_evaluates_eligibility_and_is_not_recovery() {
        let d = decide(&ready(), now());
        assert_eq!(d, Decision::ReplayEligible);
        assert!(!matches!(d, Decision::Close(_)));
        assert_eq!(
            may_append(Some(CaseState::CorrectionIsolated), CaseState::Completed),
            Err(CaseError::NotAllowed {
                current: CaseState::CorrectionIsolated,
                next: CaseState::Completed
            })
        );
    }

    #[test]
    fn table_row_9_missing_ordering_context_holds_the_item() {
        let f = CaseFacts {
            ordering: OrderingContext::Missing,
            ..ready()
        };
        assert_eq!(
            decide(&f, now()),
            Decision::Hold {
                gate: Gate::Ordering,
                next_review: at(24)
            }
        );
    }

    #[test]
    fn table_row_10_unavailable_budget_defers_under_the_owner_until_review() {
        let f = CaseFacts {
            budget: Budget::Unavailable,
            ..ready()
        };
        assert_eq!(
            decide(&f, now()),
            Decision::Hold {
                gate: Gate::Capacity,
                next_review: at(24)
            }
        );
        let unowned = CaseFacts { lease: None, ..f };
        assert_eq!(decide(&unowned, now()), Decision::AssignOwner);
    }

    #[test]
    fn table_row_11_every_eligibility_gate_passing_admits_one_replay() {
        assert_eq!(decide(&ready(), now()), Decision::ReplayEligible);
        assert_eq!(
            may_append(Some(CaseState::ReplayEligible), CaseState::ReplayAdmitted),
            Ok(())
        );
        assert!(may_append(Some(CaseState::ReplayAdmitted), CaseState::ReplayAdmitted).is_err());
    }

    #[test]
    fn table_row_12_replay_effect_evidence_completes_and_stops_delivery() {
        let f = CaseFacts {
            replay: ReplayProgress::InFlight,
            effect: answered(EffectAnswer::Present, "order:o-9"),
            ..ready()
        };
        assert_eq!(
            decide(&f, now()),
            Decision::Close(Closure::Completed {
                binding: "order:o-9".to_owned()
            })
        );
        let waiting = CaseFacts {
            replay: ReplayProgress::InFlight,
            ..ready()
        };
        assert_eq!(decide(&waiting, now()), Decision::ObserveReplay);
    }

    #[test]
    fn table_row_13_replay_repeating_the_failure_stops_and_returns_to_diagnosis() {
        let failed = CaseFacts {
            replay: ReplayProgress::Failed,
            ..ready()
        };
        assert_eq!(
            decide(&failed, now()),
            Decision::StopReplay {
                trigger: StopTrigger::RepeatedFailure
            }
        );
        let stopped = CaseFacts {
            replay: ReplayProgress::Stopped,
            ..ready()
        };
        assert_eq!(decide(&stopped, now()), Decision::NeedsDiagnosis);
    }

    #[test]
    fn table_row_14_unresolved_at_review_goes_to_the_owner_for_an_explicit_decision() {
        let f = CaseFacts {
            correction: CorrectionStatus::None,
            lease: lease("alice", at(30)),
            ..ready()
        };
        assert_eq!(
            decide(&f, at(25)),
            Decision::Review {
                owner: "alice".to_owned()
            }
        );
    }

    // The failure-shaped test matrix: the rows that are pure decisions.

    #[test]
    fn matrix_row_1_missing_forwarding_marks_attempt_evidence_incomplete() {
        for q in [EvidenceQuality::Exact, EvidenceQuality::Approximate] {
            assert_eq!(
                verified_quality(q, RouteTarget::FellBack),
                EvidenceQuality::Incomplete
            );
            assert_eq!(
                verified_quality(q, RouteTarget::Unknown),
                EvidenceQuality::Incomplete
            );
        }
        assert_eq!(
            verified_quality(EvidenceQuality::Unavailable, RouteTarget::FellBack),
            EvidenceQuality::Unavailable
        );
    }

    #[test]
    fn matrix_row_2_effect_before_a_failed_acknowledgment_blocks_replay() {
        let f = CaseFacts {
            effect: answered(EffectAnswer::Present, "shipment:s-1"),
            repetition: RepetitionPolicy::IdempotencyProtected,
            ..ready()
        };
        assert_eq!(
            decide(&f, now()),
            Decision::Close(Closure::Completed {
                binding: "shipment:s-1".to_owned()
            })
        );
    }

    #[test]
    fn matrix_row_3_intent_cancelled_while_waiting_closes_without_execution() {
        let f = CaseFacts {
            intent: IntentStatus::Cancelled,
            correction: CorrectionStatus::None,
            ..ready()
        };
        assert_eq!(decide(&f, now()), Decision::Close(Closure::Cancelled));
        assert_eq!(
            may_append(Some(CaseState::Cancelled), CaseState::ReplayAdmitted),
            Err(CaseError::Closed {
                state: Terminal::Cancelled,
                next: CaseState::ReplayAdmitted
            })
        );
    }

    #[test]
    fn matrix_row_4_rotated_authorization_blocks_execution() {
        let f = CaseFacts {
            authorization: Authorization::Changed,
            ..ready()
        };
        assert_eq!(decide(&f, now()), escalate(Missing::CurrentAuthorization));
    }

    #[test]
    fn matrix_row_5_schema_validation_stays_apart_from_the_parser_fix() {
        let f = CaseFacts {
            correction: CorrectionStatus::PassedExactPayload,
            payload_check: PayloadCheck::Invalid,
            ..ready()
        };
        assert_eq!(decide(&f, now()), Decision::Close(Closure::Rejected));
    }

    #[test]
    fn matrix_row_6_repaired_parser_with_an_unavailable_dependency_is_held() {
        let f = CaseFacts {
            budget: Budget::Unavailable,
            ..ready()
        };
        assert!(matches!(
            decide(&f, now()),
            Decision::Hold {
                gate: Gate::Capacity,
                ..
            }
        ));
    }

    #[test]
    fn matrix_row_7_fifo_item_without_its_sequence_context_is_held() {
        let f = CaseFacts {
            ordering: OrderingContext::Missing,
            ..ready()
        };
        assert!(matches!(
            decide(&f, now()),
            Decision::Hold {
                gate: Gate::Ordering,
                ..
            }
        ));
        let in_context = CaseFacts {
            ordering: OrderingContext::InContext,
            ..ready()
        };
        assert_eq!(decide(&in_context, now()), Decision::ReplayEligible);
    }

    #[test]
    fn matrix_row_8_approximate_attempt_counts_stay_approximate() {
        assert_eq!(
            verified_quality(EvidenceQuality::Approximate, RouteTarget::Written),
            EvidenceQuality::Approximate
        );
        for target in RouteTarget::ALL {
            assert_ne!(
                verified_quality(EvidenceQuality::Approximate, *target),
                EvidenceQuality::Exact
            );
        }
    }

    #[test]
    fn matrix_row_9_unbounded_redrive_is_refused() {
        let f = CaseFacts {
            budget: Budget::Unbounded,
            ..ready()
        };
        assert_eq!(decide(&f, now()), escalate(Missing::ReplayBudget));
    }

    #[test]
    fn matrix_row_10_destination_back_to_the_broken_path_fails_validation() {
        for destination in [DestinationCheck::BrokenPath, DestinationCheck::Missing] {
            let f = CaseFacts {
                destination,
                ..ready()
            };
            assert_eq!(decide(&f, now()), escalate(Missing::ReplayDestination));
        }
    }

    #[test]
    fn matrix_row_11_lost_effect_evidence_halts_the_replay() {
        for answer in [EffectAnswer::Indeterminate, EffectAnswer::Unreachable] {
            let f = CaseFacts {
                replay: ReplayProgress::InFlight,
                effect: answered(answer, ""),
                ..ready()
            };
            assert_eq!(
                decide(&f, now()),
                Decision::StopReplay {
                    trigger: StopTrigger::LostEffectEvidence
                }
            );
        }
        assert_eq!(
            may_append(
                Some(CaseState::ReplayAdmitted),
                CaseState::EffectIndeterminate
            ),
            Ok(())
        );
        assert_eq!(
            may_append(
                Some(CaseState::EffectIndeterminate),
                CaseState::ReplayStopped
            ),
            Ok(())
        );
        assert!(
            may_append(
                Some(CaseState::EffectIndeterminate),
                CaseState::ReplayEligible
            )
            .is_err()
        );
    }

    #[test]
    fn matrix_row_12_indefinite_retention_forces_bounded_handling() {
        let f = CaseFacts {
            retention_bounded: false,
            ..ready()
        };
        assert_eq!(decide(&f, now()), escalate(Missing::RetentionRule));
        assert!(!payload_deletion_due(at(0), 7 * 24 * HOUR as u64, at(24)));
        assert!(payload_deletion_due(
            at(0),
            7 * 24 * HOUR as u64,
            at(7 * 24)
        ));
    }

    #[test]
    fn matrix_row_13_two_tools_get_one_lease() {
        let first = claim(None, "tool-a", now(), 60_000).expect("free case");
        assert_eq!(
            claim(Some(&first), "tool-b", now(), 60_000),
            Err(CaseError::Claimed {
                owner: "tool-a".to_owned(),
                until: now().plus_millis(60_000)
            })
        );
        let f = CaseFacts {
            replay: ReplayProgress::InFlight,
            lease: Some(first),
            ..ready()
        };
        assert_eq!(
            decide(&f, now().plus_millis(60_000)),
            Decision::StopReplay {
                trigger: StopTrigger::LostLease
            }
        );
    }

    #[test]
    fn matrix_row_14_pass_on_another_fixture_leaves_the_item_unresolved() {
        let f = CaseFacts {
            correction: CorrectionStatus::PassedOtherFixture,
            ..ready()
        };
        assert_eq!(decide(&f, now()), Decision::NeedsIsolatedTest);
    }

    #[test]
    fn matrix_row_15_review_deadline_with_no_owner_escalates() {
        let f = CaseFacts {
            diagnosed: false,
            lease: None,
            ..ready()
        };
        assert_eq!(decide(&f, at(23)), Decision::NeedsDiagnosis);
        assert_eq!(decide(&f, at(24)), escalate(Missing::Owner));
    }

    #[test]
    fn matrix_row_16_completed_effect_with_the_record_left_repairs_and_never_replays() {
        let f = CaseFacts {
            effect: answered(EffectAnswer::Present, "invoice:i-3"),
            record_live: true,
            ..ready()
        };
        assert_eq!(decide(&f, now()), Decision::Repair(Repair::ArchiveRecord));
        let in_flight = CaseFacts {
            replay: ReplayProgress::InFlight,
            ..f
        };
        assert_eq!(
            decide(&in_flight, now()),
            Decision::Repair(Repair::ArchiveRecord)
        );
    }

    #[test]
    fn matrix_row_17_expiry_before_the_threshold_names_expiry_not_a_consumer_failure() {
        assert!(!RouteRule::Expiry.observes_consumer_failure());
        assert_eq!(attempt_history(RouteRule::Expiry, Some(0)), Some(0));
        let f = CaseFacts {
            value_window_end: Some(at(0)),
            diagnosed: false,
            correction: CorrectionStatus::None,
            ..ready()
        };
        assert_eq!(
            decide(&f, now()),
            Decision::Close(Closure::Expired { deadline: at(0) })
        );
    }

    #[test]
    fn matrix_row_18_filter_routing_stays_routing_evidence() {
        assert!(!RouteRule::Filter.observes_consumer_failure());
        assert!(!RouteRule::Filter.has_receive_history());
        assert_eq!(attempt_history(RouteRule::Filter, Some(1)), None);
    }

    #[test]
    fn matrix_row_19_size_refusal_invents_no_receive_history() {
        assert!(!RouteRule::Size.observes_consumer_failure());
        assert_eq!(attempt_history(RouteRule::Size, Some(0)), None);
        assert_eq!(attempt_history(RouteRule::Size, None), None);
        assert_eq!(
            attempt_history(RouteRule::DeliveryThreshold, Some(5)),
            Some(5)
        );
    }

    #[test]
    fn matrix_row_20_application_reason_is_an_observation_not_a_diagnosis() {
        assert!(RouteRule::Application.observes_consumer_failure());
        assert_eq!(
            attempt_evidence(None, EvidenceQuality::Approximate, 4),
            Some(4)
        );
        assert_eq!(attempt_evidence(None, EvidenceQuality::Incomplete, 0), None);
        assert_eq!(
            attempt_evidence(Some(RouteRule::Expiry), EvidenceQuality::Unavailable, 0),
            None
        );
        assert_eq!(
            attempt_evidence(Some(RouteRule::Filter), EvidenceQuality::Exact, 1),
            None
        );
        assert_eq!(
            attempt_evidence(
                Some(RouteRule::DeliveryThreshold),
                EvidenceQuality::Exact,
                5
            ),
            Some(5)
        );
        let f = CaseFacts {
            route: Route::from(RouteKind::Application),
            diagnosed: false,
            ..ready()
        };
        assert_eq!(f.route, Route::ApplicationQuarantined);
        assert_eq!(decide(&f, now()), Decision::NeedsDiagnosis);
    }

    // The decision order and its vocabulary.

    #[test]
    fn an_indeterminate_route_and_a_lost_payload_escalate() {
        let f = CaseFacts {
            route: Route::RouteIndeterminate,
            ..ready()
        };
        assert_eq!(decide(&f, now()), escalate(Missing::RouteEvidence));
        let lost = CaseFacts {
            payload_preserved: false,
            ..ready()
        };
        assert_eq!(decide(&lost, now()), escalate(Missing::PayloadIdentity));
    }

    #[test]
    fn repetition_policy_follows_the_register_and_the_authority() {
        let idem = RegisterAnswer::Idempotent { ordering: None };
        assert_eq!(
            RepetitionPolicy::from_register(&idem, false),
            RepetitionPolicy::IdempotencyProtected
        );
        assert_eq!(
            RepetitionPolicy::from_register(&RegisterAnswer::NotIdempotent, true),
            RepetitionPolicy::Reconcilable
        );
        assert_eq!(
            RepetitionPolicy::from_register(&RegisterAnswer::NotIdempotent, false),
            RepetitionPolicy::NonRepeatable
        );
        assert_eq!(
            RepetitionPolicy::from_register(&RegisterAnswer::NotRegistered, true),
            RepetitionPolicy::NonRepeatable
        );
        let non_repeatable = CaseFacts {
            repetition: RepetitionPolicy::NonRepeatable,
            ..ready()
        };
        assert_eq!(
            decide(&non_repeatable, now()),
            escalate(Missing::RepeatSafety)
        );
        let no_authority = CaseFacts {
            effect: EffectLookup::NoAuthority,
            ..ready()
        };
        assert_eq!(
            decide(&no_authority, now()),
            escalate(Missing::EffectAuthority)
        );
        let protected = CaseFacts {
            repetition: RepetitionPolicy::IdempotencyProtected,
            ..no_authority
        };
        assert_eq!(decide(&protected, now()), Decision::ReplayEligible);
    }

    #[test]
    fn a_non_equivalent_transformation_is_a_new_intent_and_a_failed_test_a_new_diagnosis() {
        let f = CaseFacts {
            transformation: Transformation::NotEquivalent,
            ..ready()
        };
        assert_eq!(decide(&f, now()), Decision::NewIntent);
        let failed = CaseFacts {
            correction: CorrectionStatus::TestFailed,
            ..ready()
        };
        assert_eq!(decide(&failed, now()), Decision::NeedsDiagnosis);
    }

    #[test]
    fn earlier_steps_answer_before_later_ones() {
        // Cancellation (step 4) before a present effect (step 5) before a missing
        // diagnosis (step 6); a misconfigured route (step 2) before all of them.
        let mut f = CaseFacts {
            intent: IntentStatus::Cancelled,
            effect: answered(EffectAnswer::Present, "e"),
            diagnosed: false,
            route_check: RouteCheck::Misconfigured,
            ..ready()
        };
        assert_eq!(
            decide(&f, now()),
            Decision::Repair(Repair::RouteConfiguration)
        );
        f.route_check = RouteCheck::Verified;
        assert_eq!(decide(&f, now()), Decision::Close(Closure::Cancelled));
        f.intent = IntentStatus::Active;
        assert!(matches!(
            decide(&f, now()),
            Decision::Close(Closure::Completed { .. })
        ));
        f.effect = answered(EffectAnswer::Absent, "e");
        assert_eq!(decide(&f, now()), Decision::NeedsDiagnosis);
    }

    #[test]
    fn a_closed_case_has_nothing_to_decide() {
        let f = CaseFacts {
            closed: Some(Terminal::Expired),
            ..ready()
        };
        assert_eq!(decide(&f, now()), Decision::Closed(Terminal::Expired));
    }

    #[test]
    fn names_round_trip_as_text_and_json() {
        fn check<T>(all: &[T])
        where
            T: Copy + fmt::Display + FromStr + Serialize + PartialEq + fmt::Debug,
            T: for<'de> Deserialize<'de>,
        {
            for v in all {
                let s = v.to_string();
                assert_eq!(s.parse::<T>().ok(), Some(*v));
                let json = serde_json::to_string(v).expect("serializes");
                assert_eq!(json, format!("\"{s}\""));
                assert_eq!(serde_json::from_str::<T>(&json).expect("parses"), *v);
                assert!(s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
            }
            assert!("Nope".parse::<T>().is_err());
        }
        check(Route::ALL);
        check(RouteRule::ALL);
        check(RouteTarget::ALL);
        check(RepetitionPolicy::ALL);
        check(EffectAnswer::ALL);
        check(Terminal::ALL);
        check(CaseState::ALL);
        check(IntentStatus::ALL);
        check(RouteCheck::ALL);
        check(CorrectionStatus::ALL);
        check(Transformation::ALL);
        check(Authorization::ALL);
        check(PayloadCheck::ALL);
        check(OrderingContext::ALL);
        check(DestinationCheck::ALL);
        check(Budget::ALL);
        check(ReplayProgress::ALL);
        check(Repair::ALL);
        check(Missing::ALL);
        check(Gate::ALL);
        check(StopTrigger::ALL);
        for q in [
            EvidenceQuality::Exact,
            EvidenceQuality::Approximate,
            EvidenceQuality::Incomplete,
            EvidenceQuality::Unavailable,
        ] {
            assert_eq!(q.as_str().parse::<EvidenceQuality>(), Ok(q));
        }
        for t in Terminal::ALL {
            assert_eq!(CaseState::from(*t).terminal(), Some(*t));
            assert_eq!(CaseState::from(*t).as_str(), t.as_str());
        }
        assert_eq!(
            CaseState::ALL
                .iter()
                .filter(|s| s.terminal().is_some())
                .count(),
            Terminal::ALL.len()
        );
    }

    // The timeline.

    #[test]
    fn a_timeline_opens_with_the_route_observation_only() {
        assert_eq!(may_append(None, CaseState::RouteObserved), Ok(()));
        assert_eq!(
            may_append(None, CaseState::ReplayEligible),
            Err(CaseError::NotOpened {
                next: CaseState::ReplayEligible
            })
        );
        assert_eq!(
            may_append(Some(CaseState::Retained), CaseState::RouteObserved),
            Err(CaseError::AlreadyOpened)
        );
    }

    #[test]
    fn no_transition_after_a_terminal_state() {
        for t in Terminal::ALL {
            for next in CaseState::ALL {
                assert_eq!(
                    may_append(Some(CaseState::from(*t)), *next),
                    Err(CaseError::Closed {
                        state: *t,
                        next: *next
                    })
                );
            }
        }
    }

    #[test]
    fn replay_admitted_only_after_replay_eligible() {
        for current in CaseState::ALL {
            let r = may_append(Some(*current), CaseState::ReplayAdmitted);
            assert_eq!(
                r.is_ok(),
                *current == CaseState::ReplayEligible,
                "{current}"
            );
        }
        for pause in [CaseState::Retained, CaseState::Escalated] {
            assert!(may_append(Some(pause), CaseState::ReplayEligible).is_err());
        }
    }

    #[test]
    fn completed_needs_effect_evidence() {
        for current in CaseState::ALL {
            let r = may_append(Some(*current), CaseState::Completed);
            assert_eq!(r.is_ok(), *current == CaseState::EffectPresent, "{current}");
        }
    }

    #[test]
    fn a_replay_in_flight_is_followed_by_its_outcome_only() {
        for next in [
            CaseState::Cancelled,
            CaseState::Retained,
            CaseState::ReplayEligible,
            CaseState::DiagnosisProposed,
        ] {
            assert!(may_append(Some(CaseState::ReplayAdmitted), next).is_err());
        }
    }

    #[test]
    fn current_state_is_derived_from_the_timeline() {
        let mut timeline: Vec<TimelineEntry> = Vec::new();
        assert_eq!(current_state(&timeline), None);
        let path = [
            CaseState::RouteObserved,
            CaseState::RouteVerified,
            CaseState::EffectAbsent,
            CaseState::FailureClassified,
            CaseState::DiagnosisProposed,
            CaseState::CorrectionIdentified,
            CaseState::CorrectionIsolated,
            CaseState::ReplayEligible,
            CaseState::ReplayAdmitted,
            CaseState::EffectPresent,
            CaseState::Completed,
        ];
        for (h, s) in path.into_iter().enumerate() {
            let e = entry(s, h as i64);
            check_append(&timeline, &e).expect("allowed");
            timeline.push(e);
            assert_eq!(current_state(&timeline), Some(s));
        }
        assert!(!closed_without_replay(&timeline));
        let json = serde_json::to_string(&timeline[0]).expect("serializes");
        assert!(json.contains("\"at_ms\":1800000000000"), "{json}");
        assert!(json.contains("\"state\":\"route_observed\""), "{json}");
        let back: TimelineEntry = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, timeline[0]);

        let cancelled = [
            entry(CaseState::RouteObserved, 0),
            entry(CaseState::Cancelled, 1),
        ];
        assert!(closed_without_replay(&cancelled));
    }

    #[test]
    fn an_entry_earlier_than_the_last_is_refused() {
        let timeline = [entry(CaseState::RouteObserved, 5)];
        assert_eq!(
            check_append(&timeline, &entry(CaseState::RouteVerified, 4)),
            Err(CaseError::OutOfOrder {
                last: at(5).as_millis(),
                at: at(4).as_millis()
            })
        );
        assert_eq!(
            check_append(&timeline, &entry(CaseState::RouteVerified, 5)),
            Ok(())
        );
    }

    // Ownership and review.

    #[test]
    fn a_second_claim_is_refused_with_the_owner_named() {
        let l = claim(None, "alice", at(0), 600_000).expect("free");
        let err = claim(Some(&l), "bob", at(0), 600_000).expect_err("held");
        assert!(err.to_string().contains("alice"), "{err}");
        assert_eq!(
            claim(Some(&l), "alice", at(0).plus_millis(1), 600_000)
                .expect("own claim renews")
                .until,
            at(0).plus_millis(600_001)
        );
        assert_eq!(
            renew(Some(&l), "bob", at(0), 1),
            Err(CaseError::NotOwner {
                who: "bob".to_owned()
            })
        );
        assert_eq!(release(Some(&l), "alice", at(0)), Ok(()));
        assert!(release(Some(&l), "bob", at(0)).is_err());
    }

    #[test]
    fn a_lease_that_ran_out_lets_another_claim() {
        let l = claim(None, "alice", at(0), 1_000).expect("free");
        assert_eq!(owner_at(Some(&l), at(0).plus_millis(999)), Some("alice"));
        assert_eq!(owner_at(Some(&l), at(0).plus_millis(1_000)), None);
        let taken = claim(Some(&l), "bob", at(0).plus_millis(1_000), 1_000).expect("ran out");
        assert_eq!(taken.owner, "bob");
        assert!(renew(Some(&l), "alice", at(0).plus_millis(1_000), 1_000).is_err());
    }

    #[test]
    fn overdue_unowned_escalates_and_the_default_review_is_a_day() {
        let deadline = review_deadline(at(0), None);
        assert_eq!(deadline, at(24));
        assert_eq!(review_deadline(at(0), Some(HOUR as u64)), at(1));
        assert_eq!(review_due(deadline, None, at(23)), ReviewDue::NotDue);
        assert_eq!(review_due(deadline, None, at(24)), ReviewDue::Escalate);
        let expired = lease("alice", at(20));
        assert_eq!(
            review_due(deadline, expired.as_ref(), at(24)),
            ReviewDue::Escalate
        );
        let held = lease("alice", at(30));
        assert_eq!(
            review_due(deadline, held.as_ref(), at(24)),
            ReviewDue::OwnerDecides {
                owner: "alice".to_owned()
            }
        );
    }

    #[test]
    fn intent_identity_falls_back_to_the_message_id() {
        assert_eq!(intent_identity(Some("order-7"), "m-1"), "order-7");
        assert_eq!(intent_identity(Some(""), "m-1"), "m-1");
        assert_eq!(intent_identity(None, "m-1"), "m-1");
    }

    #[test]
    fn a_queued_replay_holds_every_closing_without_execution() {
        // A stopped replay, corrected since, whose message still waits in its queue.
        let queued = CaseFacts {
            replay_queued: true,
            ..ready()
        };
        let held = Decision::Hold {
            gate: Gate::ReplayInFlight,
            next_review: at(24),
        };
        let closings = [
            CaseFacts {
                intent: IntentStatus::Cancelled,
                ..queued.clone()
            },
            CaseFacts {
                intent: IntentStatus::Superseded,
                ..queued.clone()
            },
            CaseFacts {
                value_window_end: Some(at(1)),
                ..queued.clone()
            },
            CaseFacts {
                payload_check: PayloadCheck::Invalid,
                ..queued.clone()
            },
        ];
        // Nor is another replay eligible while one waits.
        assert_eq!(decide(&queued, now()), held);
        for f in &closings {
            assert_eq!(decide(f, now()), held, "{f:?}");
            // Once the replay left its queue, the closing is decided.
            let settled = CaseFacts {
                replay_queued: false,
                ..f.clone()
            };
            assert!(matches!(decide(&settled, now()), Decision::Close(_)));
        }
        // The effect's own evidence completes the case whatever is queued.
        let present = CaseFacts {
            effect: answered(EffectAnswer::Present, "ledger:1"),
            ..queued.clone()
        };
        assert_eq!(
            decide(&present, now()),
            Decision::Close(Closure::Completed {
                binding: "ledger:1".to_owned()
            })
        );
        // Unowned at the review deadline, the hold escalates for the owner.
        let unowned = CaseFacts {
            lease: None,
            ..closings[0].clone()
        };
        assert_eq!(decide(&unowned, at(24)), escalate(Missing::Owner));
    }

    #[test]
    fn an_overdue_unowned_escalation_names_the_owner_first_and_what_else_is_missing() {
        let f = CaseFacts {
            effect: EffectLookup::NoAuthority,
            repetition: RepetitionPolicy::NonRepeatable,
            lease: None,
            ..ready()
        };
        assert_eq!(decide(&f, at(23)), escalate(Missing::RepeatSafety));
        assert_eq!(missing_now(&f, at(23)), vec![Missing::RepeatSafety]);
        assert_eq!(decide(&f, at(24)), escalate(Missing::Owner));
        assert_eq!(
            missing_now(&f, at(24)),
            vec![Missing::Owner, Missing::RepeatSafety]
        );
        // Owned, the escalation stands under its owner.
        let owned = CaseFacts {
            lease: lease("alice", at(30)),
            ..f.clone()
        };
        assert_eq!(decide(&owned, at(25)), escalate(Missing::RepeatSafety));
        // A waiting case names only the owner; so does a route still to repair.
        let waiting = CaseFacts {
            diagnosed: false,
            lease: None,
            ..ready()
        };
        assert_eq!(missing_now(&waiting, at(24)), vec![Missing::Owner]);
        let repair = CaseFacts {
            route_check: RouteCheck::Misconfigured,
            lease: None,
            ..ready()
        };
        assert_eq!(
            decide(&repair, at(23)),
            Decision::Repair(Repair::RouteConfiguration)
        );
        assert_eq!(decide(&repair, at(24)), escalate(Missing::Owner));
        assert!(missing_now(&ready(), now()).is_empty());
    }

    #[test]
    fn a_transformation_failing_validation_is_refused_and_never_eligible() {
        let bad = ValidationFailure {
            field: "body.time".to_owned(),
            rule: "must be an RFC 3339 timestamp".to_owned(),
        };
        assert_eq!(
            judge_transformation(Err(bad.clone()), true),
            Err(bad.clone())
        );
        assert_eq!(
            judge_transformation(Ok(()), true),
            Ok(Transformation::Equivalent)
        );
        assert_eq!(
            judge_transformation(Ok(()), false),
            Ok(Transformation::NotEquivalent)
        );
        // One recorded before the rule, or failing the re-check, is never eligible.
        let recorded = CaseFacts {
            transformation: Transformation::FailsValidation,
            payload_check: PayloadCheck::Invalid,
            ..ready()
        };
        assert_eq!(decide(&recorded, now()), Decision::NeedsCorrection);
        assert_eq!(
            admission_check(None, Err(bad.clone()), false, now()),
            Err(AdmissionRefusal::PayloadInvalid(bad))
        );
    }

    #[test]
    fn admission_checks_the_value_window_the_bytes_and_a_queued_replay_again() {
        assert_eq!(admission_check(Some(at(2)), Ok(()), false, now()), Ok(()));
        assert_eq!(admission_check(None, Ok(()), false, now()), Ok(()));
        assert_eq!(
            admission_check(Some(at(1)), Ok(()), false, now()),
            Err(AdmissionRefusal::Expired { deadline: at(1) })
        );
        assert_eq!(
            admission_check(Some(at(2)), Ok(()), true, now()),
            Err(AdmissionRefusal::ReplayQueued)
        );
    }

    #[test]
    fn the_next_check_is_the_earliest_deadline_to_come() {
        let n = now();
        assert_eq!(next_check(at(24), Some(at(2)), None, false, n), Some(at(2)));
        assert_eq!(next_check(at(24), None, Some(at(3)), false, n), Some(at(3)));
        assert_eq!(
            next_check(at(24), Some(at(48)), None, false, n),
            Some(at(24))
        );
        assert_eq!(
            next_check(at(24), Some(at(48)), None, true, n),
            Some(n.plus_millis(REPLAY_POLL_MS))
        );
        // Deadlines already passed schedule nothing by themselves.
        assert_eq!(next_check(at(0), Some(at(0)), None, false, n), None);
    }

    proptest! {
        #[test]
        fn the_next_check_is_never_after_a_value_window_still_to_come(
            review in 0i64..100_000,
            window in proptest::option::of(0i64..100_000),
            lease_end in proptest::option::of(0i64..100_000),
            queued in any::<bool>(),
            now_ms in 0i64..100_000,
        ) {
            let t = |ms: i64| T0.plus_millis(ms);
            let n = t(now_ms);
            let next = next_check(t(review), window.map(t), lease_end.map(t), queued, n);
            if let Some(w) = window.map(t).filter(|w| *w > n) {
                prop_assert!(next.is_some_and(|c| c <= w), "{next:?} after {w:?}");
            }
            if let Some(c) = next {
                prop_assert!(c > n);
            }
            if queued {
                prop_assert!(next.is_some_and(|c| c <= n.plus_millis(REPLAY_POLL_MS)));
            }
        }

        #[test]
        fn an_ended_value_window_is_never_replay_eligible_nor_admitted(
            ended_ms in 0i64..10_000,
            after_ms in 0i64..10_000,
        ) {
            let deadline = at(1).plus_millis(-ended_ms);
            let n = deadline.plus_millis(after_ms);
            let f = CaseFacts { value_window_end: Some(deadline), ..ready() };
            prop_assert_eq!(decide(&f, n), Decision::Close(Closure::Expired { deadline }));
            prop_assert_eq!(
                admission_check(Some(deadline), Ok(()), false, n),
                Err(AdmissionRefusal::Expired { deadline })
            );
        }
    }

    proptest! {
        #[test]
        fn no_sequence_of_appends_leaves_a_terminal_state(
            picks in proptest::collection::vec(0usize..CaseState::ALL.len(), 1..60),
        ) {
            let mut current = Some(CaseState::RouteObserved);
            let mut closed: Option<CaseState> = None;
            for i in picks {
                let next = CaseState::ALL[i];
                if may_append(current, next).is_ok() {
                    current = Some(next);
                }
                if let Some(c) = closed {
                    prop_assert_eq!(current, Some(c));
                }
                if current.and_then(CaseState::terminal).is_some() {
                    closed = current;
                }
            }
        }
    }
}

/// Delivering a dead letter again by hand goes through the case (see the module).
pub mod by_hand;

/// What a step of the broker writes and does for a decision (see the module).
pub mod step;

/// A failure's signature: its description with the variable parts masked, so that the
/// dead letters of one failure shape compare equal.
pub mod signature;
