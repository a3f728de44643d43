//! A plan's admission gates, in their order: pure judgements of one waiting item over what
//! the runner read for it. The runner reads each gate's facts only once the gates before
//! it passed (nothing is asked of anyone for an item that must wait), so each gate is its
//! own function; [`Verdict::Pass`] goes on to the next.
//!
//! 1. [`pacing`]: the plan's pacer says now (else later, or held `too_large`);
//! 2. [`node`]: the node's replay budget says now;
//! 3. [`readable`]: the case exists (`case_gone`) and its record can be read
//!    (`record_undecodable`);
//! 4. [`ordering`] and [`predecessor`]: a session goes whole and in its order — the plan
//!    holds the session (`ordering_missing`), its open cases are the plan's (else the plan
//!    stops, `ordering_changed`), and each predecessor has resolved (else the item waits,
//!    or is held `ordering_blocked`);
//! 5. [`claim`]: no other owner's live claim on the case (`case_claimed`);
//! 6. [`destination`]: the destination is off the failing path (`destination_invalid`, with
//!    the time it clears);
//! 7. [`authority`]: an effect authority is registered for the type
//!    (`effect_authority_missing`): a plan replays only what an authority can observe;
//! 8. [`reconciled`], after the case is reconciled with its effect authority now: an
//!    unreachable authority stops the plan (`effect_unavailable`); the plan's correction
//!    must be the case's (`no_tested_correction`); the case's own decision must be
//!    eligible (its gate, named by the broker's `gate_of`).
//!
//! An item every gate passes is admitted.

use super::{Admission, Budget, Pacer, StopReason};
use crate::clock::Timestamp;

/// A gate's answer for one item.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The gate passes: on to the next.
    Pass,
    /// The gate holds the item, named (`gate: detail`).
    Hold(String),
    /// The budget says not yet: at this time (`None`: when a delivery finishes).
    Later(Option<Timestamp>),
    /// Its turn has not come (a predecessor in flight); the next item may go.
    Wait,
    /// A stop condition of the plan.
    Stop(StopReason),
}

/// Gate 1: the plan's pacer for an item of `bytes` by a look at `now`: whether its slot
/// is within the look's lead ([`Pacer::check_ahead`]; it is then admitted at its slot).
pub fn pacing(pacer: &Pacer, budget: &Budget, bytes: u64, now: Timestamp) -> Verdict {
    match pacer.check_ahead(budget, bytes, now) {
        Admission::Now => Verdict::Pass,
        Admission::At(t) => Verdict::Later(Some(t)),
        Admission::Concurrency => Verdict::Later(None),
        Admission::TooLarge => Verdict::Hold(format!(
            "too_large: {bytes} bytes exceed one second of the byte budget ({} bytes/s); it takes a separate path",
            budget.bytes_per_s
        )),
    }
}

/// Gate 2: the node's replay budget: `later` is when it lets the item go, if not now.
pub fn node(later: Option<Timestamp>) -> Verdict {
    match later {
        Some(t) => Verdict::Later(Some(t)),
        None => Verdict::Pass,
    }
}

/// Gate 3: the case exists (`found`), and its record can be read (`undecodable`: why not).
/// Nothing is decided about a record nobody can read: held until an operator fixes or
/// removes its row.
pub fn readable(found: bool, undecodable: Option<&str>) -> Verdict {
    if !found {
        return Verdict::Hold("case_gone".into());
    }
    match undecodable {
        Some(why) => Verdict::Hold(format!("record_undecodable: {why}")),
        None => Verdict::Pass,
    }
}

/// Gate 4: a session's ordering: `order` is the session's open cases as the plan fixed them
/// (`None`: the plan does not hold the session), `open_now` its open cases now.
pub fn ordering(order: Option<&[String]>, open_now: &[String]) -> Verdict {
    let Some(order) = order else {
        return Verdict::Hold("ordering_missing".into());
    };
    if open_now.iter().any(|c| !order.contains(c)) {
        return Verdict::Stop(StopReason::OrderingChanged);
    }
    Verdict::Pass
}

/// The cases before `case_id` in a session's `order` (all of them go first).
pub fn predecessors<'a>(order: &'a [String], case_id: &str) -> &'a [String] {
    let pos = order.iter().position(|c| c == case_id).unwrap_or(0);
    &order[..pos]
}

/// Where a predecessor of an item stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Predecessor {
    /// Admitted by this look, not yet written.
    InBatch,
    /// Its item completed or closed.
    Resolved,
    /// Its item waits or is in flight.
    Pending,
    /// Its item did not complete here (held, stopped, or not in the plan); `terminal`:
    /// whether its case reached a terminal state some other way.
    Unresolved {
        /// Whether its case is terminal (or gone).
        terminal: bool,
    },
}

/// Gate 4: one predecessor `before` of an item: a successor waits for it, and is held
/// `ordering_blocked` by one that did not complete unless its case is terminal.
pub fn predecessor(before: &str, p: Predecessor) -> Verdict {
    match p {
        Predecessor::Resolved | Predecessor::Unresolved { terminal: true } => Verdict::Pass,
        Predecessor::InBatch | Predecessor::Pending => Verdict::Wait,
        Predecessor::Unresolved { terminal: false } => Verdict::Hold(format!(
            "ordering_blocked: its predecessor {before} did not complete"
        )),
    }
}

/// Gate 5: the live claim on the case (`holder`, if any): another owner's holds it.
pub fn claim(holder: Option<&str>, plan_owner: &str) -> Verdict {
    match holder {
        Some(o) if o != plan_owner => Verdict::Hold(format!("case_claimed: {o} holds it")),
        _ => Verdict::Pass,
    }
}

/// Gate 6: the destination must be off the failing path now: `clears_at` is when it stops
/// being the failing path for the case's reason, if it is now (it dead-lettered that
/// reason within the node's failing-path window: [`super::failing_path_clears_at`]).
pub fn destination(clears_at: Option<Timestamp>) -> Verdict {
    match clears_at {
        Some(t) => Verdict::Hold(format!(
            "destination_invalid: the destination is the failing path until {}",
            t.to_rfc3339()
        )),
        None => Verdict::Pass,
    }
}

/// Gate 7: an effect authority is registered for the case's type.
pub fn authority(registered: bool) -> Verdict {
    if registered {
        Verdict::Pass
    } else {
        Verdict::Hold(
            "effect_authority_missing: no effect authority is registered for its type".into(),
        )
    }
}

/// What the case's reconciliation with its effect authority showed, for [`reconciled`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reconciled<'a> {
    /// The case.
    pub case_id: &'a str,
    /// The authority could not be reached.
    pub unreachable: bool,
    /// The correction the plan requires, if any.
    pub correction: Option<&'a str>,
    /// The identity of the correction the case carries, if any.
    pub carries: Option<&'a str>,
    /// The gate the case's own decision names, if it is not eligible.
    pub decision_gate: Option<&'a str>,
}

/// A gate that holds an item after its reconciliation, and the stop condition it is, if
/// any (the reconciliation is written as evidence either way).
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    /// The gate, named.
    pub gate: String,
    /// The plan's stop condition.
    pub stop: Option<StopReason>,
}

/// Gate 8: after reconciliation: an unreachable authority is a stop condition
/// (`effect_unavailable`); then the plan's correction; then the case's decision.
pub fn reconciled(r: &Reconciled<'_>) -> Option<Held> {
    let held = |gate: String| Held { gate, stop: None };
    if r.unreachable {
        return Some(Held {
            gate: "effect_unreachable".into(),
            stop: Some(StopReason::EffectUnavailable {
                item: r.case_id.to_owned(),
            }),
        });
    }
    if let Some(c) = r.correction.filter(|c| r.carries != Some(*c)) {
        return Some(held(format!(
            "no_tested_correction: the case does not carry correction {c}"
        )));
    }
    r.decision_gate.map(|g| held(g.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::super::{BudgetSpec, Dependency};
    use super::*;
    use proptest::prelude::*;

    fn budget() -> Budget {
        BudgetSpec {
            items_per_s: Some(1.0),
            bytes_per_s: Some(8_000),
            max_concurrent: Some(1),
            window: Some(10),
            dependency: Some(Dependency {
                name: "ledger".into(),
                probe_url: "http://ledger.internal/health".into(),
                max_error_rate: 0.05,
                max_latency_ms: 250,
            }),
        }
        .check()
        .unwrap()
    }

    fn gate(v: Verdict) -> String {
        match v {
            Verdict::Hold(g) => g.split(':').next().unwrap_or_default().to_owned(),
            other => panic!("not held: {other:?}"),
        }
    }

    #[test]
    fn pacing_lets_go_later_or_holds_what_is_too_large() {
        let b = budget();
        let now = Timestamp(10_000);
        let mut p = Pacer::default();
        assert_eq!(pacing(&p, &b, 100, now), Verdict::Pass);
        assert_eq!(gate(pacing(&p, &b, 8_001, now)), "too_large");
        p.admit(&b, 100, now);
        assert_eq!(
            pacing(&p, &b, 100, now),
            Verdict::Later(None),
            "concurrency"
        );
        p.finish();
        assert_eq!(
            pacing(&p, &b, 100, now),
            Verdict::Later(Some(now.plus_millis(1_000)))
        );
        assert_eq!(node(None), Verdict::Pass);
        assert_eq!(node(Some(now)), Verdict::Later(Some(now)));
    }

    #[test]
    fn a_case_gone_or_unreadable_is_held() {
        assert_eq!(readable(true, None), Verdict::Pass);
        assert_eq!(gate(readable(false, None)), "case_gone");
        assert_eq!(
            readable(true, Some("bad row")),
            Verdict::Hold("record_undecodable: bad row".into())
        );
    }

    #[test]
    fn a_session_goes_whole_and_in_order() {
        let order: Vec<String> = vec!["a".into(), "b".into(), "c".into()];
        assert_eq!(gate(ordering(None, &[])), "ordering_missing");
        assert_eq!(ordering(Some(&order), &order[1..]), Verdict::Pass);
        assert_eq!(
            ordering(Some(&order), &["d".to_owned()]),
            Verdict::Stop(StopReason::OrderingChanged)
        );
        assert_eq!(predecessors(&order, "c"), &order[..2]);
        assert!(predecessors(&order, "a").is_empty());
        assert_eq!(predecessor("a", Predecessor::Resolved), Verdict::Pass);
        assert_eq!(predecessor("a", Predecessor::InBatch), Verdict::Wait);
        assert_eq!(predecessor("a", Predecessor::Pending), Verdict::Wait);
        assert_eq!(
            predecessor("a", Predecessor::Unresolved { terminal: true }),
            Verdict::Pass
        );
        assert_eq!(
            predecessor("a", Predecessor::Unresolved { terminal: false }),
            Verdict::Hold("ordering_blocked: its predecessor a did not complete".into())
        );
    }

    #[test]
    fn claims_the_destination_and_the_authority() {
        assert_eq!(claim(None, "ops"), Verdict::Pass);
        assert_eq!(claim(Some("ops"), "ops"), Verdict::Pass);
        assert_eq!(
            claim(Some("bob"), "ops"),
            Verdict::Hold("case_claimed: bob holds it".into())
        );
        assert_eq!(destination(None), Verdict::Pass);
        assert_eq!(
            destination(Some(Timestamp(300_000))),
            Verdict::Hold(
                "destination_invalid: the destination is the failing path until 1970-01-01T00:05:00.000Z"
                    .into()
            )
        );
        assert_eq!(authority(true), Verdict::Pass);
        assert_eq!(gate(authority(false)), "effect_authority_missing");
    }

    #[test]
    fn after_reconciliation_in_order() {
        let r = Reconciled {
            case_id: "c1",
            unreachable: false,
            correction: None,
            carries: None,
            decision_gate: None,
        };
        assert_eq!(reconciled(&r), None);
        let all = Reconciled {
            unreachable: true,
            correction: Some("fix"),
            decision_gate: Some("effect_present"),
            ..r
        };
        assert_eq!(
            reconciled(&all),
            Some(Held {
                gate: "effect_unreachable".into(),
                stop: Some(StopReason::EffectUnavailable { item: "c1".into() }),
            })
        );
        let wrong = Reconciled {
            unreachable: false,
            carries: Some("other"),
            ..all
        };
        assert_eq!(
            reconciled(&wrong).unwrap().gate,
            "no_tested_correction: the case does not carry correction fix"
        );
        let carried = Reconciled {
            carries: Some("fix"),
            ..wrong
        };
        assert_eq!(reconciled(&carried).unwrap().gate, "effect_present");
        assert_eq!(reconciled(&carried).unwrap().stop, None);
    }

    proptest! {
        /// Only an unreachable authority stops the plan after reconciliation, and an item
        /// passes only when nothing is asked of it.
        #[test]
        fn reconciliation_stops_only_on_an_unreachable_authority(
            unreachable: bool,
            correction in proptest::option::of("[ab]"),
            carries in proptest::option::of("[ab]"),
            decision_gate in proptest::option::of("[xy]"),
        ) {
            let r = Reconciled {
                case_id: "c",
                unreachable,
                correction: correction.as_deref(),
                carries: carries.as_deref(),
                decision_gate: decision_gate.as_deref(),
            };
            let held = reconciled(&r);
            prop_assert_eq!(held.as_ref().is_some_and(|h| h.stop.is_some()), unreachable);
            let passes = !unreachable
                && correction.as_ref().is_none_or(|c| carries.as_ref() == Some(c))
                && decision_gate.is_none();
            prop_assert_eq!(held.is_none(), passes);
        }

        /// A predecessor never lets an item go while it is in flight or in the batch.
        #[test]
        fn a_successor_never_passes_a_pending_predecessor(terminal: bool, which in 0u8..4) {
            let p = match which {
                0 => Predecessor::InBatch,
                1 => Predecessor::Pending,
                2 => Predecessor::Resolved,
                _ => Predecessor::Unresolved { terminal },
            };
            let v = predecessor("a", p);
            if matches!(p, Predecessor::InBatch | Predecessor::Pending) {
                prop_assert_eq!(v, Verdict::Wait);
            }
        }
    }
}
