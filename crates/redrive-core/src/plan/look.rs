//! One look at a running plan, decided from what the runner found (find → decide →
//! write: the broker reads the facts, asks these functions, and writes their answers).
//!
//! A look, in order:
//!
//! 1. each observed replay's transition ([`settle`]): still in flight; back to waiting
//!    (the admission never reached its case: its slot given back); or settled —
//!    completed, closed, or stopped with its trigger, which may be a stop condition
//!    ([`Signal`]);
//! 2. whether the next admission window opens ([`Window::opens`]) and whether the
//!    dependency is probed now ([`probe_now`]: once per observation window, before a
//!    window opens, never once the owner's lease or authorization is gone);
//! 3. the stop conditions ([`stop`](super::stop));
//! 4. how many waiting items to read for admission ([`admit_limit`], [`admissible`]);
//!    each is then judged by the gates in their order ([`gates`](super::gates));
//! 5. completion ([`completes`]: nothing in flight, nothing waiting, nothing held — a plan
//!    is never completed with items held);
//! 6. the next wake ([`next_wake`]).

use super::{Admission, Budget, ItemState, Observations, Pacer};
use crate::clock::Timestamp;

/// The least time between two looks of a plan at replays in flight, ms.
pub use super::LOOK_GAP_MS;

/// How often a running plan with replays in flight looks at them, ms.
pub const OBSERVE_IN_FLIGHT_MS: i64 = 1_000;
/// The least time between two looks at one replay in flight (each asks its effect
/// authority), ms: the first look comes this long after the admission; later ones a
/// quarter of the replay's age apart, at most [`OBSERVE_ITEM_MAX_MS`].
pub const OBSERVE_ITEM_MS: i64 = 250;
/// The most time between two looks at one replay in flight, ms.
pub const OBSERVE_ITEM_MAX_MS: i64 = 2_000;
/// Most items one advance admits (the rest at the next).
pub const ADMIT_BATCH: usize = 1_000;

/// Where an admitted item's case stands, as the runner observed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// Its replay is in flight (or failed and is retried by its case).
    InFlight,
    /// The admission never reached the case (a crash between the two writes): nothing
    /// was sent.
    NotRecorded,
    /// Its case completed, or its replay did.
    Completed,
    /// Its case closed in this terminal state.
    Closed(String),
    /// Its replay stopped with this trigger.
    Stopped(String),
}

/// The stored state a settled item takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Completed.
    Completed,
    /// Closed without a replay.
    Closed,
    /// Its replay stopped.
    Stopped,
}

/// What a stopped replay tells the plan's stop conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `lost_effect_evidence`: its effect is indeterminate.
    EffectIndeterminate,
    /// `repeated_failure`: a failure whose shape counts toward a repeated failure.
    RepeatedFailure,
    /// `lost_lease`: the owner's lease is lost.
    LeaseLost,
    /// `evidence_changed`: the authorization evidence changed.
    AuthorizationChanged,
}

/// An observed item's transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// Where it stands in its window now.
    pub to: ItemState,
    /// Its stored state and detail once settled.
    pub settled: Option<(Settled, String)>,
    /// What it tells the stop conditions.
    pub signal: Option<Signal>,
}

/// The transition of an admitted item observed as `o`:
///
/// - in flight: it stays admitted;
/// - not recorded: back to waiting (its slot is given back, nothing was sent);
/// - completed: settled `completed`;
/// - closed: settled `closed` with the case's terminal state;
/// - stopped: settled `stopped` with its trigger, and the trigger's [`Signal`], if any.
pub fn settle(o: Observed) -> Transition {
    let settled = |s: Settled, detail: String, signal: Option<Signal>| Transition {
        to: ItemState::Settled,
        settled: Some((s, detail)),
        signal,
    };
    match o {
        Observed::InFlight => Transition {
            to: ItemState::Admitted,
            settled: None,
            signal: None,
        },
        Observed::NotRecorded => Transition {
            to: ItemState::Waiting,
            settled: None,
            signal: None,
        },
        Observed::Completed => settled(Settled::Completed, "completed".to_owned(), None),
        Observed::Closed(state) => settled(Settled::Closed, state, None),
        Observed::Stopped(trigger) => {
            let signal = match trigger.as_str() {
                "lost_effect_evidence" => Some(Signal::EffectIndeterminate),
                "repeated_failure" => Some(Signal::RepeatedFailure),
                "lost_lease" => Some(Signal::LeaseLost),
                "evidence_changed" => Some(Signal::AuthorizationChanged),
                _ => None,
            };
            settled(Settled::Stopped, trigger, signal)
        }
    }
}

/// The gap between two looks at one replay in flight of `age_ms`: a quarter of its age,
/// from [`OBSERVE_ITEM_MS`] to [`OBSERVE_ITEM_MAX_MS`] (a replay that takes long is asked
/// about less often).
pub fn observe_gap_ms(age_ms: i64) -> i64 {
    (age_ms / 4).clamp(OBSERVE_ITEM_MS, OBSERVE_ITEM_MAX_MS)
}

/// Whether the dependency is probed at this look: the plan runs, neither its owner's
/// lease nor its authorization is gone (those stop it anyway), and a window opens now or
/// an observation window passed since the last probe (or none was made).
pub fn probe_now(
    running: bool,
    opening: bool,
    probed_ms: Option<i64>,
    observe_ms: u64,
    obs: &Observations,
    now: Timestamp,
) -> bool {
    let due = opening || probed_ms.is_none_or(|t| now.as_millis() - t >= observe_ms as i64);
    running && due && !obs.lease_lost && !obs.authorization_changed
}

/// How many items the pacer's item and concurrency budgets let a look at `now` go, each
/// at its slot within the look's lead ([`Pacer::check_ahead`]; at most `limit`); the byte
/// budget is checked item by item.
pub fn slots_now(pacer: &Pacer, budget: &Budget, now: Timestamp, limit: usize) -> usize {
    let mut p = *pacer;
    let mut n = 0;
    while n < limit && p.check_ahead(budget, 0, now) == Admission::Now {
        let at = p.slot(now);
        p.admit(budget, 0, at);
        n += 1;
    }
    n
}

/// How many waiting items a look reads for admission: those the pacer may let go now and
/// one more (to learn when the next may), at most [`ADMIT_BATCH`] and `room`.
pub fn admit_limit(pacer: &Pacer, budget: &Budget, room: u32, now: Timestamp) -> usize {
    (slots_now(pacer, budget, now, ADMIT_BATCH) + 1).min(room as usize)
}

/// How many items of `bytes`, in order, the pacer lets a look at `now` go, each at its
/// slot within the look's lead (at most `limit`).
pub fn admissible(
    pacer: &Pacer,
    budget: &Budget,
    bytes: impl IntoIterator<Item = u64>,
    now: Timestamp,
    limit: usize,
) -> usize {
    let mut p = *pacer;
    let mut n = 0;
    for b in bytes {
        if n >= limit || p.check_ahead(budget, b, now) != Admission::Now {
            break;
        }
        let at = p.slot(now);
        p.admit(budget, b, at);
        n += 1;
    }
    n
}

/// Whether a plan completes at this look: it runs, nothing is in flight, nothing waits and
/// nothing is held. A plan holding items stays running and looks at them again (each
/// held with its gate).
pub fn completes(running: bool, in_flight: u32, waiting: bool, held: u64) -> bool {
    running && in_flight == 0 && !waiting && held == 0
}

/// What the next wake of a plan depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wake {
    /// The look's time.
    pub now: Timestamp,
    /// When the next admission may come (the pacer's slot), or `now` when an item went
    /// back to waiting.
    pub next_admission: Option<Timestamp>,
    /// When the dependency was last probed, ms.
    pub probed_ms: Option<i64>,
    /// The observation window, ms.
    pub observe_ms: u64,
    /// Replays in flight after the look.
    pub in_flight: u32,
    /// When the first replay still in flight is due to be looked at again.
    pub first_observation: Option<Timestamp>,
    /// Whether the look admitted items.
    pub admitted_now: bool,
    /// Whether replays due were left for the next look (over its bound).
    pub more_due: bool,
    /// Until when the owner's lease holds.
    pub owner_until: Timestamp,
}

/// When a plan looks again: at the next admission slot or the next probe, whichever is
/// first; with replays in flight within [`OBSERVE_IN_FLIGHT_MS`], and when the first of
/// them is due (an admission's first look [`OBSERVE_ITEM_MS`] after it), never sooner
/// than [`LOOK_GAP_MS`]; soon when replays due were left over; never before `now`, and
/// never after the owner's lease runs out.
pub fn next_wake(w: &Wake) -> Timestamp {
    let now = w.now;
    let probe_at = w
        .probed_ms
        .map(|t| Timestamp(t + w.observe_ms as i64))
        .unwrap_or(now);
    let mut wake = w.next_admission.unwrap_or(probe_at).min(probe_at);
    if w.in_flight > 0 {
        let mut first = w.first_observation;
        if w.admitted_now {
            let admission = now.plus_millis(OBSERVE_ITEM_MS);
            first = Some(first.map_or(admission, |t| t.min(admission)));
        }
        wake = wake.min(now.plus_millis(OBSERVE_IN_FLIGHT_MS));
        if let Some(t) = first {
            wake = wake.min(t.max(now.plus_millis(LOOK_GAP_MS)));
        }
    }
    if w.more_due {
        wake = wake.min(now.plus_millis(LOOK_GAP_MS));
    }
    wake.max(now).min(w.owner_until.max(now))
}

#[cfg(test)]
mod tests {
    use super::super::{BudgetSpec, Dependency, Window};
    use super::*;
    use proptest::prelude::*;

    fn budget(rate: f64, bytes: u64, conc: u32, window: u32) -> Budget {
        BudgetSpec {
            items_per_s: Some(rate),
            bytes_per_s: Some(bytes),
            max_concurrent: Some(conc),
            window: Some(window),
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

    #[test]
    fn each_outcome_has_its_transition() {
        assert_eq!(settle(Observed::InFlight).to, ItemState::Admitted);
        let back = settle(Observed::NotRecorded);
        assert_eq!((back.to, back.settled), (ItemState::Waiting, None));
        assert_eq!(
            settle(Observed::Completed).settled,
            Some((Settled::Completed, "completed".into()))
        );
        assert_eq!(
            settle(Observed::Closed("superseded".into())).settled,
            Some((Settled::Closed, "superseded".into()))
        );
        for (trigger, signal) in [
            ("lost_effect_evidence", Some(Signal::EffectIndeterminate)),
            ("repeated_failure", Some(Signal::RepeatedFailure)),
            ("lost_lease", Some(Signal::LeaseLost)),
            ("evidence_changed", Some(Signal::AuthorizationChanged)),
            ("delivery_failed", None),
        ] {
            let t = settle(Observed::Stopped(trigger.into()));
            assert_eq!(t.to, ItemState::Settled);
            assert_eq!(t.settled, Some((Settled::Stopped, trigger.into())));
            assert_eq!(t.signal, signal, "{trigger}");
        }
    }

    #[test]
    fn a_replay_that_takes_long_is_asked_about_less_often() {
        assert_eq!(observe_gap_ms(0), OBSERVE_ITEM_MS);
        assert_eq!(observe_gap_ms(2_000), 500);
        assert_eq!(observe_gap_ms(60_000), OBSERVE_ITEM_MAX_MS);
    }

    #[test]
    fn the_dependency_is_probed_once_per_observation_window_and_before_a_window_opens() {
        let now = Timestamp(100_000);
        let ok = Observations::default();
        assert!(
            probe_now(true, false, None, 10_000, &ok, now),
            "never probed"
        );
        assert!(!probe_now(true, false, Some(95_000), 10_000, &ok, now));
        assert!(
            probe_now(true, true, Some(95_000), 10_000, &ok, now),
            "a window opens"
        );
        assert!(probe_now(true, false, Some(90_000), 10_000, &ok, now));
        assert!(
            !probe_now(false, true, None, 10_000, &ok, now),
            "not running"
        );
        let lost = Observations {
            lease_lost: true,
            ..Observations::default()
        };
        assert!(!probe_now(true, true, None, 10_000, &lost, now));
    }

    #[test]
    fn a_look_reads_what_the_pacer_lets_go_and_one_more() {
        let b = budget(1.0, 64 * 1024, 2, 10);
        let now = Timestamp(1_000);
        let p = Pacer::default();
        assert_eq!(slots_now(&p, &b, now, ADMIT_BATCH), 1);
        assert_eq!(admit_limit(&p, &b, 10, now), 2);
        assert_eq!(
            admit_limit(&p, &b, 1, now),
            1,
            "the window's room bounds it"
        );
        assert_eq!(admissible(&p, &b, [10, 10, 10], now, 5), 1);
        let fast = budget(1_000.0, 1_024, 1_000, 100);
        // The byte budget, item by item: 600 bytes go, the next 600 wait.
        assert_eq!(admissible(&Pacer::default(), &fast, [600, 600], now, 5), 1);
        assert_eq!(admissible(&Pacer::default(), &fast, [2_000], now, 5), 0);
    }

    #[test]
    fn the_next_wake_is_the_first_thing_due() {
        let now = Timestamp(50_000);
        let base = Wake {
            now,
            next_admission: Some(now.plus_millis(300)),
            probed_ms: Some(now.as_millis()),
            observe_ms: 10_000,
            in_flight: 0,
            first_observation: None,
            admitted_now: false,
            more_due: false,
            owner_until: now.plus_millis(3_600_000),
        };
        assert_eq!(next_wake(&base), now.plus_millis(300), "the next slot");
        let idle = Wake {
            next_admission: None,
            ..base
        };
        assert_eq!(next_wake(&idle), now.plus_millis(10_000), "the next probe");
        let flying = Wake {
            next_admission: None,
            in_flight: 1,
            admitted_now: true,
            ..base
        };
        assert_eq!(next_wake(&flying), now.plus_millis(OBSERVE_ITEM_MS));
        let soon = Wake {
            in_flight: 1,
            first_observation: Some(now),
            ..base
        };
        assert_eq!(next_wake(&soon), now.plus_millis(LOOK_GAP_MS));
        let over = Wake {
            more_due: true,
            ..base
        };
        assert_eq!(next_wake(&over), now.plus_millis(LOOK_GAP_MS));
        let leased = Wake {
            owner_until: now.plus_millis(100),
            ..base
        };
        assert_eq!(next_wake(&leased), now.plus_millis(100), "the lease's end");
        let lost = Wake {
            owner_until: now.plus_millis(-5),
            ..base
        };
        assert_eq!(next_wake(&lost), now);
    }

    #[test]
    fn a_plan_holding_items_never_completes() {
        assert!(completes(true, 0, false, 0));
        assert!(!completes(true, 0, false, 1));
        assert!(!completes(true, 1, false, 0));
        assert!(!completes(true, 0, true, 0));
        assert!(!completes(false, 0, false, 0));
    }

    proptest! {
        /// Whatever the counts: a plan completes only running with nothing in flight,
        /// nothing waiting and nothing held.
        #[test]
        fn never_completed_with_items_held(
            running: bool, in_flight in 0u32..4, waiting: bool, held in 0u64..4,
        ) {
            if completes(running, in_flight, waiting, held) {
                prop_assert!(running && held == 0 && in_flight == 0 && !waiting);
            }
        }

        /// The next wake is never before the look nor after the owner's lease (unless
        /// the lease already ran out: then now), and with replays in flight it is at
        /// most OBSERVE_IN_FLIGHT_MS away.
        #[test]
        fn the_next_wake_is_bounded(
            next in proptest::option::of(-5_000i64..50_000),
            probed in proptest::option::of(-50_000i64..0),
            observe_ms in 100u64..60_000,
            in_flight in 0u32..5,
            first in proptest::option::of(-5_000i64..50_000),
            admitted_now: bool,
            more_due: bool,
            lease in -5_000i64..100_000,
        ) {
            let now = Timestamp(1_000_000);
            let w = Wake {
                now,
                next_admission: next.map(|d| now.plus_millis(d)),
                probed_ms: probed.map(|d| now.as_millis() + d),
                observe_ms,
                in_flight,
                first_observation: first.map(|d| now.plus_millis(d)),
                admitted_now,
                more_due,
                owner_until: now.plus_millis(lease),
            };
            let t = next_wake(&w);
            prop_assert!(t >= now);
            prop_assert!(t <= w.owner_until.max(now));
            if in_flight > 0 {
                prop_assert!(t <= now.plus_millis(OBSERVE_IN_FLIGHT_MS));
            }
        }

        /// Looks at arbitrary times, each reading `admit_limit` items and admitting those
        /// `admissible` lets go within the window's room (windows opening as
        /// `Window::opens` says, replays settling at arbitrary looks): the budget's bound
        /// holds over every interval, and no window takes more than its size, nor more
        /// than max_concurrent in flight.
        #[test]
        fn looks_keep_the_budget_bound_and_the_window(
            rate in 0.5f64..2_000.0,
            byte_rate in 1_024u64..100_000,
            conc in 1u32..8,
            size in 1u32..12,
            looks in proptest::collection::vec((0i64..400, 0u32..4), 1..200),
            sizes in proptest::collection::vec(1u64..1_024, 1..150),
        ) {
            let b = budget(rate, byte_rate, conc, size);
            let mut p = Pacer::default();
            let mut w = Window::default();
            let mut now = Timestamp(0);
            let mut admitted: Vec<(i64, u64)> = Vec::new();
            let mut next = 0usize;
            for (gap, settling) in looks {
                now = now.plus_millis(gap);
                for _ in 0..settling.min(p.in_flight) {
                    p.finish();
                    w.record(ItemState::Admitted, ItemState::Settled);
                }
                prop_assert_eq!(w.in_flight, p.in_flight);
                if w.opens(&b, next < sizes.len()) {
                    w.open();
                }
                let room = w.room(&b);
                let limit = admit_limit(&p, &b, room, now);
                let end = (next + limit).min(sizes.len());
                let n = admissible(&p, &b, sizes[next..end].iter().copied(), now, room as usize);
                for &bytes in &sizes[next..next + n] {
                    // Each at its slot, within the look's lead.
                    let at = p.slot(now);
                    prop_assert!(at >= now && at <= now.plus_millis(crate::plan::LEAD_MS));
                    p.admit(&b, bytes, at);
                    w.record(ItemState::Waiting, ItemState::Admitted);
                    admitted.push((at.as_millis(), bytes));
                }
                next += n;
                prop_assert!(w.admitted <= b.window);
                prop_assert!(p.in_flight <= b.max_concurrent);
            }
            crate::plan::tests::within_bound(&admitted, rate, byte_rate)?;
        }
    }
}
