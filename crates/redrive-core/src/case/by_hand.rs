//! Delivering a dead letter again by hand: a resubmit, a move back to the live area (where
//! automatic replay takes it), a restore, an import into the live area, or an SQS message
//! move task. Each can deliver the intent of a recovery case again, so each goes through
//! the case's gates ([`judge`]) — the owner's claim, the effect authority, the terminal
//! state — or is refused with the reason ([`Refusal`]); what it does is on the case's
//! timeline.
//!
//! The order of the gates:
//!
//! 1. a closed case is final: nothing delivers its intent again ([`Refusal::CaseClosed`]);
//! 2. one delivery at a time: a replay in flight, by the case or by a plan, is awaited
//!    ([`Refusal::ReplayInFlight`]);
//! 3. one owner at a time: another token's live claim holds ([`Refusal::CaseClaimed`]);
//!    the holder may deliver;
//! 4. prior effects: where the type has an effect authority it is asked now
//!    ([`HandVerdict::AskAuthority`]); `present` completes the case and the delivery is
//!    refused ([`HandVerdict::Complete`]); a type registered `not_idempotent` is delivered
//!    again only after `absent` ([`Refusal::EffectAuthority`]) and never without an
//!    authority ([`Refusal::RepeatSafety`]).
//!
//! An allowed delivery is followed by the case: where an authority answered `absent`, as
//! a case replay is ([`HandVerdict::Follow`]); where none can bind the effect, the case
//! closes `indeterminate` at once with the person's action as its evidence
//! ([`HandVerdict::CloseIndeterminate`]).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{CaseState, EffectAnswer, Lease, Terminal, owner_at};
use crate::clock::Timestamp;
use crate::dead_letter::UnknownVariant;
use crate::register::RegisterAnswer;

named_enum! {
    /// An operation that delivers a dead letter again by hand.
    HandOperation {
        /// `POST …/dead-letters/{id}/resubmit`: back to its queue.
        Resubmit = "resubmit",
        /// `POST …/dead-letters/{id}/move` to the live area, where automatic replay takes it.
        MoveToLive = "move_to_live",
        /// `POST …/dead-letters/{id}/restore`: from quarantine to live.
        Restore = "restore",
        /// `POST …/dead-letters/import` into the live area.
        Import = "import",
        /// An SQS message move task (`StartMessageMoveTask`).
        MoveTask = "move_task",
    }
}

/// What the effect authority says about the intent now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandEffect {
    /// No effect authority is registered for the type.
    NoAuthority,
    /// One is registered and has not been asked for this delivery yet.
    NotAsked,
    /// Its answer now.
    Answered(EffectAnswer),
}

/// What is known of a case when someone asks to deliver its dead letter again by hand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandFacts<'a> {
    /// The case's state.
    pub state: CaseState,
    /// The message id of the case's replay in flight, if one is.
    pub in_flight: Option<&'a str>,
    /// The case's claim.
    pub lease: Option<&'a Lease>,
    /// Who asks (a token's name).
    pub who: &'a str,
    /// The type's entry in the idempotency register.
    pub register: &'a RegisterAnswer,
    /// The effect authority.
    pub effect: HandEffect,
}

/// Why a delivery by hand is refused. Nothing changes (but for
/// [`HandVerdict::Complete`], which closes the case first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The case is closed in this state.
    CaseClosed(Terminal),
    /// A replay of the case is in flight as this message.
    ReplayInFlight(String),
    /// Another token holds the case's claim.
    CaseClaimed(String),
    /// The type is not idempotent and no effect authority can say the effect is absent.
    RepeatSafety,
    /// The type is not idempotent and its authority did not answer `absent` (it answered
    /// this).
    EffectAuthority(EffectAnswer),
    /// The effect exists: the case completed instead.
    EffectPresent,
}

impl Refusal {
    /// Its stable code (the problem's `reason`).
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::CaseClosed(_) => "case_closed",
            Refusal::ReplayInFlight(_) => "replay_in_flight",
            Refusal::CaseClaimed(_) => "case_claimed",
            Refusal::RepeatSafety => "repeat_safety",
            Refusal::EffectAuthority(_) => "effect_authority",
            Refusal::EffectPresent => "effect_present",
        }
    }

    /// Why, in words (`case` and `op` name the case and the operation).
    pub fn describe(&self, case: &str, op: HandOperation) -> String {
        match self {
            Refusal::CaseClosed(t) => {
                format!(
                    "case {case} is closed ({t}): its dead letter is not delivered again ({op})"
                )
            }
            Refusal::ReplayInFlight(m) => format!(
                "a replay of case {case} is in flight as {m}: its outcome is awaited before another delivery ({op})"
            ),
            Refusal::CaseClaimed(o) => format!(
                "case {case} is claimed by {o}: only its owner delivers its dead letter again ({op})"
            ),
            Refusal::RepeatSafety => format!(
                "case {case}: the message type is registered not_idempotent and has no effect authority that could show the effect absent; it is not delivered again ({op}): reject it, or have the producer send a new intent"
            ),
            Refusal::EffectAuthority(a) => format!(
                "case {case}: the message type is registered not_idempotent and its effect authority answered {a}, not absent; it is not delivered again ({op})"
            ),
            Refusal::EffectPresent => format!(
                "case {case}: the effect authority answered present; the case is completed and its dead letter is not delivered again ({op})"
            ),
        }
    }
}

/// The decision on a delivery by hand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandVerdict {
    /// Refused, nothing changes.
    Refuse(Refusal),
    /// Ask the effect authority now, then judge again with its answer.
    AskAuthority,
    /// The effect exists: record it, archive the record and close the case `completed`
    /// (as the case's own reconciliation does); the delivery is refused
    /// ([`Refusal::EffectPresent`]).
    Complete,
    /// Allowed; the case follows the delivery as it follows a replay: the authority
    /// observes it (`present` completes, a repeated dead letter stops it), with no claim to
    /// lose.
    Follow,
    /// Allowed; no authority can bind the effect, so the case closes `indeterminate` at
    /// once with the person's action as its evidence.
    CloseIndeterminate,
}

/// The decision on delivering a case's dead letter again by hand at `now` (see the module
/// docs for the order).
pub fn judge(f: &HandFacts<'_>, now: Timestamp) -> HandVerdict {
    if let Some(t) = f.state.terminal() {
        return HandVerdict::Refuse(Refusal::CaseClosed(t));
    }
    if let Some(m) = f.in_flight {
        return HandVerdict::Refuse(Refusal::ReplayInFlight(m.to_owned()));
    }
    if f.state == CaseState::ReplayAdmitted {
        return HandVerdict::Refuse(Refusal::ReplayInFlight(String::new()));
    }
    if let Some(owner) = owner_at(f.lease, now).filter(|o| *o != f.who) {
        return HandVerdict::Refuse(Refusal::CaseClaimed(owner.to_owned()));
    }
    let not_idempotent = matches!(f.register, RegisterAnswer::NotIdempotent);
    match f.effect {
        HandEffect::NotAsked => HandVerdict::AskAuthority,
        HandEffect::Answered(EffectAnswer::Present) => HandVerdict::Complete,
        HandEffect::Answered(EffectAnswer::Absent) => HandVerdict::Follow,
        HandEffect::Answered(a) if not_idempotent => {
            HandVerdict::Refuse(Refusal::EffectAuthority(a))
        }
        HandEffect::NoAuthority if not_idempotent => HandVerdict::Refuse(Refusal::RepeatSafety),
        // An idempotent or unregistered type whose effect nobody can bind: a person
        // decided, and the case says so.
        HandEffect::Answered(_) | HandEffect::NoAuthority => HandVerdict::CloseIndeterminate,
    }
}

/// The claim a case's facts carry while a delivery by hand (by `by`) is its replay in
/// flight: a standing one for that person. A hand delivery was made without a claim, so
/// it is not stopped for losing one; every other stop (lost effect evidence, a repeated
/// failure, changed evidence) still applies. Otherwise the case's own claim.
pub fn observing_lease(claim: Option<&Lease>, by: Option<&str>) -> Option<Lease> {
    match by {
        Some(who) => Some(Lease {
            owner: who.to_owned(),
            until: Timestamp(i64::MAX),
        }),
        None => claim.cloned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timestamp = Timestamp(1_000_000);

    fn facts<'a>(register: &'a RegisterAnswer) -> HandFacts<'a> {
        HandFacts {
            state: CaseState::Retained,
            in_flight: None,
            lease: None,
            who: "bob",
            register,
            effect: HandEffect::NoAuthority,
        }
    }

    const ALL_TERMINAL: [CaseState; 6] = [
        CaseState::Completed,
        CaseState::Cancelled,
        CaseState::Superseded,
        CaseState::Expired,
        CaseState::Rejected,
        CaseState::Indeterminate,
    ];

    #[test]
    fn a_closed_case_refuses_naming_its_state_whatever_else_holds() {
        let idem = RegisterAnswer::Idempotent { ordering: None };
        for s in ALL_TERMINAL {
            for effect in [
                HandEffect::NoAuthority,
                HandEffect::NotAsked,
                HandEffect::Answered(EffectAnswer::Absent),
            ] {
                let f = HandFacts {
                    state: s,
                    effect,
                    ..facts(&idem)
                };
                assert_eq!(
                    judge(&f, NOW),
                    HandVerdict::Refuse(Refusal::CaseClosed(s.terminal().unwrap()))
                );
            }
        }
    }

    #[test]
    fn a_replay_in_flight_refuses_naming_its_message_even_for_the_owner() {
        let idem = RegisterAnswer::Idempotent { ordering: None };
        let lease = Lease {
            owner: "bob".into(),
            until: NOW.plus_millis(1),
        };
        let f = HandFacts {
            state: CaseState::ReplayAdmitted,
            in_flight: Some("m|1"),
            lease: Some(&lease),
            ..facts(&idem)
        };
        let v = judge(&f, NOW);
        assert_eq!(
            v,
            HandVerdict::Refuse(Refusal::ReplayInFlight("m|1".into()))
        );
        if let HandVerdict::Refuse(r) = v {
            assert_eq!(r.code(), "replay_in_flight");
            assert!(
                r.describe("case_1", HandOperation::Resubmit)
                    .contains("m|1")
            );
        }
    }

    #[test]
    fn another_tokens_live_claim_refuses_and_the_holder_or_an_expired_claim_does_not() {
        let idem = RegisterAnswer::Idempotent { ordering: None };
        let alice = Lease {
            owner: "alice".into(),
            until: NOW.plus_millis(10),
        };
        let f = HandFacts {
            lease: Some(&alice),
            ..facts(&idem)
        };
        assert_eq!(
            judge(&f, NOW),
            HandVerdict::Refuse(Refusal::CaseClaimed("alice".into()))
        );
        let by_alice = HandFacts {
            who: "alice",
            ..f.clone()
        };
        assert_eq!(judge(&by_alice, NOW), HandVerdict::CloseIndeterminate);
        // At its end a claim holds no more.
        assert_eq!(
            judge(&f, NOW.plus_millis(10)),
            HandVerdict::CloseIndeterminate
        );
    }

    #[test]
    fn an_authority_is_asked_for_any_type_and_present_completes() {
        for register in [
            RegisterAnswer::Idempotent { ordering: None },
            RegisterAnswer::NotIdempotent,
            RegisterAnswer::NotRegistered,
        ] {
            let f = HandFacts {
                effect: HandEffect::NotAsked,
                ..facts(&register)
            };
            assert_eq!(judge(&f, NOW), HandVerdict::AskAuthority);
            let present = HandFacts {
                effect: HandEffect::Answered(EffectAnswer::Present),
                ..facts(&register)
            };
            assert_eq!(judge(&present, NOW), HandVerdict::Complete);
            let absent = HandFacts {
                effect: HandEffect::Answered(EffectAnswer::Absent),
                ..facts(&register)
            };
            assert_eq!(judge(&absent, NOW), HandVerdict::Follow);
        }
    }

    #[test]
    fn a_not_idempotent_type_needs_an_authority_that_answers_absent() {
        let not = RegisterAnswer::NotIdempotent;
        assert_eq!(
            judge(&facts(&not), NOW),
            HandVerdict::Refuse(Refusal::RepeatSafety)
        );
        for a in [EffectAnswer::Indeterminate, EffectAnswer::Unreachable] {
            let f = HandFacts {
                effect: HandEffect::Answered(a),
                ..facts(&not)
            };
            assert_eq!(
                judge(&f, NOW),
                HandVerdict::Refuse(Refusal::EffectAuthority(a))
            );
        }
    }

    #[test]
    fn an_idempotent_or_unregistered_type_nobody_can_bind_closes_indeterminate() {
        for register in [
            RegisterAnswer::Idempotent { ordering: None },
            RegisterAnswer::NotRegistered,
        ] {
            assert_eq!(
                judge(&facts(&register), NOW),
                HandVerdict::CloseIndeterminate
            );
            let f = HandFacts {
                effect: HandEffect::Answered(EffectAnswer::Unreachable),
                ..facts(&register)
            };
            assert_eq!(judge(&f, NOW), HandVerdict::CloseIndeterminate);
        }
    }

    #[test]
    fn every_refusal_has_a_code_and_words_naming_the_case_and_operation() {
        for r in [
            Refusal::CaseClosed(Terminal::Completed),
            Refusal::ReplayInFlight("m|1".into()),
            Refusal::CaseClaimed("alice".into()),
            Refusal::RepeatSafety,
            Refusal::EffectAuthority(EffectAnswer::Indeterminate),
            Refusal::EffectPresent,
        ] {
            assert!(!r.code().is_empty());
            let w = r.describe("case_9", HandOperation::MoveTask);
            assert!(w.contains("case_9") && w.contains("move_task"), "{w}");
        }
    }

    #[test]
    fn a_hand_delivery_in_flight_is_observed_without_a_claim_to_lose() {
        let ended = Lease {
            owner: "alice".into(),
            until: NOW,
        };
        let standing = observing_lease(Some(&ended), Some("bob")).unwrap();
        assert_eq!(standing.owner, "bob");
        assert!(owner_at(Some(&standing), Timestamp(i64::MAX - 1)).is_some());
        // No hand delivery in flight: the case's own claim, live or not.
        assert_eq!(observing_lease(Some(&ended), None), Some(ended));
        assert_eq!(observing_lease(None, None), None);
    }
}
