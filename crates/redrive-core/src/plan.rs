//! Bounded replay (seed 001, "Turn 'replay slowly' into a testable budget"): the budget of
//! a replay plan, the pacing that keeps every admission inside it, admission windows, and
//! the stop conditions — pure functions over what the caller observed, time passed in.
//!
//! # The budget ([`Budget`])
//!
//! A plan names every limit explicitly: items per second, bytes per second, concurrent
//! deliveries, the admission window (default [`DEFAULT_WINDOW`]) and a dependency
//! reservation (a named dependency with a health probe and its error-rate and latency
//! thresholds). A plan that leaves one out is refused ([`BudgetSpec::check`], matrix row
//! 9: "start an unbounded bulk redrive" is rejected): a limit nobody chose is no limit.
//!
//! # Pacing ([`Pacer`])
//!
//! Admissions are spaced, never burst: after an item is admitted at `t`, the next one may
//! be admitted at `t + 1/items_per_s` at the earliest, and not before the bytes already
//! admitted have been paid for at `bytes_per_s` (an item of `b` bytes holds the byte
//! budget for `b / bytes_per_s`). The two budgets hold independently: a large item waits
//! for the byte budget although the item budget has room. An item larger than one
//! second of the byte budget is never admitted under it ([`Admission::TooLarge`]): it
//! takes a separate path. Concurrency is counted in deliveries admitted and not yet
//! finished. So over any interval of length `T`, at most `⌊T·items_per_s⌋ + 1` items and
//! at most `T·bytes_per_s + max_item_bytes` bytes are admitted.
//!
//! A runner looks at a plan now and then, not at every slot: at rates above one item per
//! [`CATCH_UP_MS`], a look admits every slot that came due since the last one, but never
//! a slot more than [`CATCH_UP_MS`] old (a plan idle or late for longer starts again
//! from now: it saves nothing up). At those rates the bounds are `⌊(T + CATCH_UP_MS)·items_per_s⌋ + 1` items
//! and `(T + CATCH_UP_MS)·bytes_per_s + max_item_bytes` bytes: over a 10 s window at
//! 1,000 items/s, at most 1 % above the rate. At one item per [`CATCH_UP_MS`] or slower,
//! admissions are spaced exactly.
//!
//! # Windows ([`Window`])
//!
//! Items are admitted one at a time within a window of `window` items. The next window
//! opens only when every item of the current one has reached a terminal or named
//! no-replay state and the gates still pass (the caller re-checks them).
//!
//! # Stop conditions ([`stop`])
//!
//! Each halts the plan with its reason: effect evidence unavailable for an item; one
//! replay with an indeterminate effect; two replays showing the same failure shape; the
//! dependency's error rate over its threshold; its latency over its threshold for two
//! observation windows in a row; ordering or authorization evidence changed; the owner's
//! lease lost; a budget that cannot be observed.

use std::collections::BTreeMap;

use crate::clock::Timestamp;

/// How far behind a look may catch up on slots that came due since the last one, ms
/// (only for plans faster than one item per this long).
pub const CATCH_UP_MS: f64 = 100.0;

/// The admission window of a plan that does not name one.
pub const DEFAULT_WINDOW: u32 = 10;
/// The least time between two looks of a plan that catches up, ms (well inside
/// [`CATCH_UP_MS`], so no slot is lost to it).
pub const LOOK_GAP_MS: i64 = 20;
/// The largest admission window: as many items as a plan holds (one window for all).
pub const MAX_WINDOW: u32 = 100_000;
/// The highest item rate a plan may name (items per second).
pub const MAX_ITEMS_PER_S: u32 = 100_000;
/// The most concurrent deliveries a plan may name.
pub const MAX_CONCURRENCY: u32 = 1_000;

/// A dependency the replay draws on, with its health probe and thresholds.
#[derive(Debug, Clone, PartialEq)]
pub struct Dependency {
    /// Its name (for the record and the stop reason).
    pub name: String,
    /// The health probe (`http://` or `https://`).
    pub probe_url: String,
    /// The highest error rate (0 to 1) observed over a window that lets the plan go on.
    pub max_error_rate: f64,
    /// The highest latency (ms) observed over a window that lets the plan go on.
    pub max_latency_ms: u64,
}

/// A budget as asked for: every field must be given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BudgetSpec {
    /// Items admitted per second.
    pub items_per_s: Option<f64>,
    /// Bytes admitted per second.
    pub bytes_per_s: Option<u64>,
    /// Deliveries in flight at once.
    pub max_concurrent: Option<u32>,
    /// Items per admission window (default [`DEFAULT_WINDOW`] when the caller says so
    /// explicitly by leaving it out; see [`BudgetSpec::check`]).
    pub window: Option<u32>,
    /// The dependency reservation.
    pub dependency: Option<Dependency>,
}

/// A budget with every limit named.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    /// Items admitted per second.
    pub items_per_s: f64,
    /// Bytes admitted per second.
    pub bytes_per_s: u64,
    /// Deliveries in flight at once.
    pub max_concurrent: u32,
    /// Items per admission window.
    pub window: u32,
    /// The dependency reservation.
    pub dependency: Dependency,
}

/// Why a budget is refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BudgetError {
    /// Fields left out: an unbounded replay is refused.
    #[error("an unbounded replay is refused: name {}", .missing.join(", "))]
    Unbounded {
        /// The fields left out.
        missing: Vec<&'static str>,
    },
    /// A field out of its range.
    #[error("`{field}` {why}")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// What is wrong.
        why: String,
    },
}

impl BudgetSpec {
    /// The budget, if every limit is named and in range. The window alone may be left out
    /// (it has a documented default); item rate, byte rate, concurrency and the dependency
    /// reservation may not.
    pub fn check(&self) -> Result<Budget, BudgetError> {
        let mut missing = Vec::new();
        if self.items_per_s.is_none() {
            missing.push("items_per_s");
        }
        if self.bytes_per_s.is_none() {
            missing.push("bytes_per_s");
        }
        if self.max_concurrent.is_none() {
            missing.push("max_concurrent");
        }
        if self.dependency.is_none() {
            missing.push("dependency");
        }
        let (Some(items), Some(bytes), Some(conc), Some(dep)) = (
            self.items_per_s,
            self.bytes_per_s,
            self.max_concurrent,
            self.dependency.clone(),
        ) else {
            return Err(BudgetError::Unbounded { missing });
        };
        let range = |field, why: &str| BudgetError::OutOfRange {
            field,
            why: why.to_owned(),
        };
        if !(items.is_finite() && items > 0.0 && items <= f64::from(MAX_ITEMS_PER_S)) {
            return Err(range(
                "items_per_s",
                &format!("must be above 0 and at most {MAX_ITEMS_PER_S}"),
            ));
        }
        if bytes == 0 {
            return Err(range("bytes_per_s", "must be above 0"));
        }
        if conc == 0 || conc > MAX_CONCURRENCY {
            return Err(range(
                "max_concurrent",
                &format!("must be 1 to {MAX_CONCURRENCY}"),
            ));
        }
        let window = self.window.unwrap_or(DEFAULT_WINDOW);
        if window == 0 || window > MAX_WINDOW {
            return Err(range("window", &format!("must be 1 to {MAX_WINDOW}")));
        }
        if dep.name.trim().is_empty() {
            return Err(range("dependency.name", "must not be empty"));
        }
        if !(dep.probe_url.starts_with("http://") || dep.probe_url.starts_with("https://")) {
            return Err(range(
                "dependency.probe_url",
                "must be an http:// or https:// URL",
            ));
        }
        if !(dep.max_error_rate.is_finite() && (0.0..=1.0).contains(&dep.max_error_rate)) {
            return Err(range("dependency.max_error_rate", "must be 0 to 1"));
        }
        if dep.max_latency_ms == 0 {
            return Err(range("dependency.max_latency_ms", "must be above 0"));
        }
        Ok(Budget {
            items_per_s: items,
            bytes_per_s: bytes,
            max_concurrent: conc,
            window,
            dependency: dep,
        })
    }
}

impl Budget {
    /// The least time `items` items of `bytes` bytes in all take under this budget, ms:
    /// the slower of the two rates, before processing time, pauses and reconciliation (a
    /// lower bound, not a promise). 240 items at 1/s is at least 240 s.
    pub fn lower_bound_ms(&self, items: u64, bytes: u64) -> u64 {
        let by_items = (items as f64 / self.items_per_s * 1000.0).ceil();
        let by_bytes = (bytes as f64 / self.bytes_per_s as f64 * 1000.0).ceil();
        by_items.max(by_bytes) as u64
    }

    fn item_gap_ms(&self) -> f64 {
        1000.0 / self.items_per_s
    }

    /// How far behind `now` a look catches up on slots: [`CATCH_UP_MS`] for plans faster
    /// than one item per [`CATCH_UP_MS`], none for slower ones.
    pub fn catch_up_ms(&self) -> f64 {
        if self.item_gap_ms() < CATCH_UP_MS {
            CATCH_UP_MS
        } else {
            0.0
        }
    }

    /// When a plan whose next slot is `slot` looks again: at the slot, but a plan that
    /// catches up ([`Budget::catch_up_ms`]) not sooner than [`LOOK_GAP_MS`] after `now` —
    /// the look then admits every slot that came due meanwhile, so the bound is the same
    /// and a fast plan is not looked at once per item.
    pub fn next_look(&self, slot: Timestamp, now: Timestamp) -> Timestamp {
        if self.catch_up_ms() > 0.0 {
            slot.max(now.plus_millis(LOOK_GAP_MS))
        } else {
            slot
        }
    }

    fn byte_ms(&self, bytes: u64) -> f64 {
        bytes as f64 * 1000.0 / self.bytes_per_s as f64
    }
}

/// What the pacer answers for the next item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Admit it now.
    Now,
    /// Not before this time (the item or the byte budget).
    At(Timestamp),
    /// The concurrency bound is reached: when a delivery finishes.
    Concurrency,
    /// Larger than one second of the byte budget: never admitted under it.
    TooLarge,
}

/// The pacing state of a running plan (durable: the caller stores it with the plan, so a
/// resumed plan keeps its spacing).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pacer {
    /// The earliest time the next item may be admitted by the item budget (ms, fractional).
    pub next_item_ms: f64,
    /// The time until which admitted bytes hold the byte budget (ms, fractional).
    pub bytes_until_ms: f64,
    /// Deliveries admitted and not yet finished.
    pub in_flight: u32,
}

impl Pacer {
    /// Whether an item of `bytes` may be admitted at `now` under `budget`.
    pub fn check(&self, budget: &Budget, bytes: u64, now: Timestamp) -> Admission {
        if bytes > budget.bytes_per_s {
            return Admission::TooLarge;
        }
        if self.in_flight >= budget.max_concurrent {
            return Admission::Concurrency;
        }
        let now_ms = now.as_millis() as f64;
        let at = self.next_item_ms.max(self.bytes_until_ms);
        if at <= now_ms {
            Admission::Now
        } else {
            Admission::At(Timestamp(at.ceil() as i64))
        }
    }

    /// Records the admission of an item of `bytes` at `now` (after [`Pacer::check`]
    /// answered [`Admission::Now`]).
    pub fn admit(&mut self, budget: &Budget, bytes: u64, now: Timestamp) {
        // The slot this admission takes: the one due, if it came due within the catch-up;
        // otherwise now (a plan idle or late for longer saves nothing up).
        let now_ms = now.as_millis() as f64;
        let oldest = now_ms - budget.catch_up_ms();
        let slot = |due: f64| if due >= oldest { due } else { now_ms };
        self.next_item_ms = slot(self.next_item_ms) + budget.item_gap_ms();
        self.bytes_until_ms = slot(self.bytes_until_ms) + budget.byte_ms(bytes);
        self.in_flight += 1;
    }

    /// Records a delivery that finished (delivered, failed or stopped).
    pub fn finish(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }
}

/// Where an item of a window stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemState {
    /// Not admitted yet.
    Waiting,
    /// Admitted; its outcome not yet observed.
    Admitted,
    /// Terminal or a named no-replay state.
    Settled,
}

/// One admission window: its items by id, in admission order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window {
    /// The window's number, from 1.
    pub number: u32,
    /// Its items and where they stand.
    pub items: BTreeMap<String, ItemState>,
}

impl Window {
    /// Whether every item of the window has settled: the next window may open if the
    /// gates still pass.
    pub fn complete(&self) -> bool {
        !self.items.is_empty() && self.items.values().all(|s| *s == ItemState::Settled)
    }

    /// Whether the window may take another item under `budget`.
    pub fn has_room(&self, budget: &Budget) -> bool {
        (self.items.len() as u64) < u64::from(budget.window)
    }
}

/// What the plan observed since it last looked, for [`stop`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observations {
    /// Items whose effect evidence was unavailable (authority unreachable) at admission.
    pub effect_unavailable: Vec<String>,
    /// Replays whose effect came back indeterminate.
    pub effect_indeterminate: Vec<String>,
    /// Replays that failed, with their failure shape (reason).
    pub failures: Vec<(String, String)>,
    /// The dependency's error rate over the last observation window, if observed.
    pub error_rate: Option<f64>,
    /// The dependency's latency (ms) over the last two observation windows, latest last.
    pub latency_ms: Vec<u64>,
    /// Ordering evidence changed since the plan started.
    pub ordering_changed: bool,
    /// The owner's authorization changed (token revoked, rotated, grant removed).
    pub authorization_changed: bool,
    /// The owner's lease on the plan is lost.
    pub lease_lost: bool,
    /// A budget could not be observed (the dependency's probe gave nothing).
    pub budget_unobservable: bool,
}

/// Why a plan stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum StopReason {
    /// Authoritative evidence for an item's prior effect became unavailable.
    EffectUnavailable {
        /// The item.
        item: String,
    },
    /// One replay produced an indeterminate effect.
    EffectIndeterminate {
        /// The item.
        item: String,
    },
    /// Two replays showed the same failure shape.
    RepeatedFailure {
        /// The shape.
        shape: String,
        /// The two items.
        items: [String; 2],
    },
    /// The dependency's error rate crossed its threshold.
    ErrorRate {
        /// Observed.
        observed: f64,
        /// The threshold.
        threshold: f64,
    },
    /// The dependency's latency crossed its threshold for two observation windows.
    Latency {
        /// Observed, the two windows.
        observed: [u64; 2],
        /// The threshold.
        threshold: u64,
    },
    /// Ordering evidence changed.
    OrderingChanged,
    /// Authorization evidence changed.
    AuthorizationChanged,
    /// The owner lost its lease.
    LeaseLost,
    /// A budget could not be observed.
    BudgetUnobservable,
}

impl StopReason {
    /// The reason's stable name (for the record and the metric label).
    pub fn as_str(&self) -> &'static str {
        match self {
            StopReason::EffectUnavailable { .. } => "effect_unavailable",
            StopReason::EffectIndeterminate { .. } => "effect_indeterminate",
            StopReason::RepeatedFailure { .. } => "repeated_failure",
            StopReason::ErrorRate { .. } => "dependency_error_rate",
            StopReason::Latency { .. } => "dependency_latency",
            StopReason::OrderingChanged => "ordering_changed",
            StopReason::AuthorizationChanged => "authorization_changed",
            StopReason::LeaseLost => "lease_lost",
            StopReason::BudgetUnobservable => "budget_unobservable",
        }
    }
}

/// The first stop condition `o` meets under `budget`, if any, in the seed's order.
pub fn stop(budget: &Budget, o: &Observations) -> Option<StopReason> {
    if let Some(item) = o.effect_unavailable.first() {
        return Some(StopReason::EffectUnavailable { item: item.clone() });
    }
    if let Some(item) = o.effect_indeterminate.first() {
        return Some(StopReason::EffectIndeterminate { item: item.clone() });
    }
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for (item, shape) in &o.failures {
        if let Some(first) = seen.insert(shape.as_str(), item.as_str()) {
            return Some(StopReason::RepeatedFailure {
                shape: shape.clone(),
                items: [first.to_owned(), item.clone()],
            });
        }
    }
    let dep = &budget.dependency;
    if let Some(rate) = o.error_rate.filter(|r| *r > dep.max_error_rate) {
        return Some(StopReason::ErrorRate {
            observed: rate,
            threshold: dep.max_error_rate,
        });
    }
    if let [.., a, b] = o.latency_ms.as_slice()
        && *a > dep.max_latency_ms
        && *b > dep.max_latency_ms
    {
        return Some(StopReason::Latency {
            observed: [*a, *b],
            threshold: dep.max_latency_ms,
        });
    }
    if o.ordering_changed {
        return Some(StopReason::OrderingChanged);
    }
    if o.authorization_changed {
        return Some(StopReason::AuthorizationChanged);
    }
    if o.lease_lost {
        return Some(StopReason::LeaseLost);
    }
    if o.budget_unobservable {
        return Some(StopReason::BudgetUnobservable);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn dep() -> Dependency {
        Dependency {
            name: "ledger".into(),
            probe_url: "http://ledger.internal/health".into(),
            max_error_rate: 0.05,
            max_latency_ms: 250,
        }
    }

    /// The seed's worked example: 1 item/s, 64 KiB/s, 2 concurrent, window 10.
    fn seed() -> Budget {
        BudgetSpec {
            items_per_s: Some(1.0),
            bytes_per_s: Some(64 * 1024),
            max_concurrent: Some(2),
            window: Some(10),
            dependency: Some(dep()),
        }
        .check()
        .unwrap()
    }

    #[test]
    fn an_unbounded_plan_is_refused_naming_what_is_missing() {
        let e = BudgetSpec {
            items_per_s: Some(1.0),
            ..BudgetSpec::default()
        }
        .check()
        .unwrap_err();
        assert_eq!(
            e,
            BudgetError::Unbounded {
                missing: vec!["bytes_per_s", "max_concurrent", "dependency"]
            }
        );
        assert!(e.to_string().starts_with("an unbounded replay is refused"));
        let e = BudgetSpec {
            items_per_s: Some(f64::NAN),
            bytes_per_s: Some(1),
            max_concurrent: Some(1),
            window: None,
            dependency: Some(dep()),
        }
        .check()
        .unwrap_err();
        assert!(matches!(
            e,
            BudgetError::OutOfRange {
                field: "items_per_s",
                ..
            }
        ));
    }

    #[test]
    fn the_window_defaults_to_ten() {
        let b = BudgetSpec {
            items_per_s: Some(1.0),
            bytes_per_s: Some(1),
            max_concurrent: Some(1),
            window: None,
            dependency: Some(dep()),
        }
        .check()
        .unwrap();
        assert_eq!(b.window, DEFAULT_WINDOW);
    }

    #[test]
    fn the_seed_lower_bound_is_240_seconds() {
        let b = seed();
        assert_eq!(b.lower_bound_ms(240, 240 * 40 * 1024), 240_000);
        // The byte budget binds when items are large: 240 items of 128 KiB at 64 KiB/s.
        assert_eq!(b.lower_bound_ms(240, 240 * 128 * 1024), 480_000);
    }

    #[test]
    fn a_large_item_waits_for_the_byte_budget_although_the_item_budget_has_room() {
        let b = BudgetSpec {
            items_per_s: Some(10.0),
            bytes_per_s: Some(1000),
            max_concurrent: Some(10),
            window: None,
            dependency: Some(dep()),
        }
        .check()
        .unwrap();
        let mut p = Pacer::default();
        let t0 = Timestamp(1_000_000);
        assert_eq!(p.check(&b, 800, t0), Admission::Now);
        p.admit(&b, 800, t0);
        // The item budget allows one at +100 ms; the 800 bytes hold the byte budget 800 ms.
        assert_eq!(
            p.check(&b, 800, t0.plus_millis(100)),
            Admission::At(t0.plus_millis(800))
        );
        assert_eq!(p.check(&b, 1001, t0), Admission::TooLarge);
    }

    #[test]
    fn concurrency_is_bounded_until_a_delivery_finishes() {
        let b = seed();
        let mut p = Pacer::default();
        let t = Timestamp(0);
        p.admit(&b, 10, t);
        p.admit(&b, 10, t.plus_millis(1000));
        assert_eq!(p.check(&b, 10, t.plus_millis(5000)), Admission::Concurrency);
        p.finish();
        assert_eq!(p.check(&b, 10, t.plus_millis(5000)), Admission::Now);
    }

    #[test]
    fn a_window_completes_when_every_item_settles() {
        let b = seed();
        let mut w = Window {
            number: 1,
            items: BTreeMap::new(),
        };
        assert!(!w.complete());
        for i in 0..10 {
            assert!(w.has_room(&b));
            w.items.insert(format!("i{i}"), ItemState::Admitted);
        }
        assert!(!w.has_room(&b));
        for s in w.items.values_mut() {
            *s = ItemState::Settled;
        }
        assert!(w.complete());
    }

    #[test]
    fn stop_conditions_in_order() {
        let b = seed();
        assert_eq!(stop(&b, &Observations::default()), None);
        let two = Observations {
            failures: vec![
                ("a".into(), "parse".into()),
                ("b".into(), "timeout".into()),
                ("c".into(), "parse".into()),
            ],
            ..Observations::default()
        };
        assert_eq!(
            stop(&b, &two),
            Some(StopReason::RepeatedFailure {
                shape: "parse".into(),
                items: ["a".into(), "c".into()]
            })
        );
        let one_slow = Observations {
            latency_ms: vec![100, 300],
            ..Observations::default()
        };
        assert_eq!(stop(&b, &one_slow), None, "one slow window is not two");
        let two_slow = Observations {
            latency_ms: vec![300, 260],
            ..Observations::default()
        };
        assert_eq!(stop(&b, &two_slow).unwrap().as_str(), "dependency_latency");
        let errors = Observations {
            error_rate: Some(0.2),
            lease_lost: true,
            ..Observations::default()
        };
        assert_eq!(stop(&b, &errors).unwrap().as_str(), "dependency_error_rate");
        let indeterminate = Observations {
            effect_indeterminate: vec!["x".into()],
            ..errors.clone()
        };
        assert_eq!(
            stop(&b, &indeterminate).unwrap().as_str(),
            "effect_indeterminate"
        );
        for (o, name) in [
            (
                Observations {
                    ordering_changed: true,
                    ..Observations::default()
                },
                "ordering_changed",
            ),
            (
                Observations {
                    authorization_changed: true,
                    ..Observations::default()
                },
                "authorization_changed",
            ),
            (
                Observations {
                    lease_lost: true,
                    ..Observations::default()
                },
                "lease_lost",
            ),
            (
                Observations {
                    budget_unobservable: true,
                    ..Observations::default()
                },
                "budget_unobservable",
            ),
            (
                Observations {
                    effect_unavailable: vec!["y".into()],
                    ..Observations::default()
                },
                "effect_unavailable",
            ),
        ] {
            assert_eq!(stop(&b, &o).unwrap().as_str(), name);
        }
    }

    /// At 1,000 items/s a look admits the slots that came due since the last look, and
    /// after an idle second no more than the catch-up's worth; at 1 item/s none is saved.
    #[test]
    fn a_fast_plan_catches_up_on_due_slots_within_the_bound() {
        let burst = |rate: f64, idle: i64| {
            let b = BudgetSpec {
                items_per_s: Some(rate),
                bytes_per_s: Some(1 << 30),
                max_concurrent: Some(1_000),
                window: None,
                dependency: Some(dep()),
            }
            .check()
            .unwrap();
            let mut p = Pacer::default();
            let t0 = Timestamp(1_000_000);
            p.admit(&b, 10, t0);
            let now = t0.plus_millis(idle);
            let mut n = 0;
            while p.check(&b, 10, now) == Admission::Now {
                p.admit(&b, 10, now);
                p.finish();
                n += 1;
            }
            n
        };
        assert_eq!(burst(1_000.0, 20), 20, "the slots due since the last look");
        assert_eq!(burst(1_000.0, 60), 60, "a look 60 ms late catches up");
        assert_eq!(burst(1_000.0, 1_000), 1, "an idle second saves nothing up");
        assert_eq!(burst(1.0, 5_000), 1, "slow plans are spaced exactly");
    }

    #[test]
    fn a_fast_plan_looks_at_most_every_look_gap_and_loses_no_slot() {
        let budget = |rate: f64| {
            BudgetSpec {
                items_per_s: Some(rate),
                bytes_per_s: Some(1 << 30),
                max_concurrent: Some(1_000),
                window: None,
                dependency: Some(dep()),
            }
            .check()
            .unwrap()
        };
        let now = Timestamp(1_000_000);
        // 1,000 items/s: the next slot is 1 ms away, the next look 20 ms.
        let fast = budget(1_000.0);
        assert_eq!(
            fast.next_look(now.plus_millis(1), now),
            now.plus_millis(LOOK_GAP_MS)
        );
        assert_eq!(
            fast.next_look(now.plus_millis(500), now),
            now.plus_millis(500)
        );
        // 1 item/s: exactly at the slot.
        let slow = budget(1.0);
        assert_eq!(slow.next_look(now.plus_millis(1), now), now.plus_millis(1));
        // Looking only when `next_look` says, a fast plan still admits its rate: 10 s at
        // 1,000 items/s admit 10,000 items, never more (the bound), and less only by the
        // slots' rounding to whole milliseconds (under 0.5 %).
        let mut p = Pacer::default();
        let mut t = now;
        let mut n = 0u64;
        let end = now.plus_millis(10_000);
        while t < end {
            let mut slot = None;
            loop {
                match p.check(&fast, 10, t) {
                    Admission::Now => {
                        p.admit(&fast, 10, t);
                        p.finish();
                        n += 1;
                    }
                    Admission::At(s) => {
                        slot = Some(s);
                        break;
                    }
                    _ => break,
                }
            }
            t = fast.next_look(slot.expect("a next slot"), t);
        }
        assert!((9_950..=10_001).contains(&n), "{n} items in 10 s");
    }

    proptest! {
        /// Driven as fast as it allows, the pacer never exceeds either rate over any
        /// interval: items ≤ ⌊(T + lag)·rate⌋ + 1 and bytes ≤ (T + lag)·byte_rate + the
        /// largest item, where lag is the catch-up (none at 10 items/s or slower). The
        /// looks come at the times the pacer names, or `late` ms after them.
        #[test]
        fn no_interval_exceeds_either_rate(
            rate in 0.5f64..5_000.0,
            late in 0i64..300,
            byte_rate in 1_000u64..100_000,
            sizes in proptest::collection::vec(1u64..1_000, 1..200),
        ) {
            let b = BudgetSpec {
                items_per_s: Some(rate),
                bytes_per_s: Some(byte_rate),
                max_concurrent: Some(1_000),
                window: None,
                dependency: Some(dep()),
            }
            .check()
            .unwrap();
            let mut p = Pacer::default();
            let mut now = Timestamp(0);
            let mut admitted: Vec<(i64, u64)> = Vec::new();
            for &size in &sizes {
                loop {
                    match p.check(&b, size, now) {
                        Admission::Now => {
                            p.admit(&b, size, now);
                            admitted.push((now.as_millis(), size));
                            break;
                        }
                        Admission::At(t) => now = t.plus_millis(late),
                        other => panic!("{other:?}"),
                    }
                }
            }
            let max = *sizes.iter().max().unwrap() as f64;
            let lag = b.catch_up_ms() / 1000.0;
            for i in 0..admitted.len() {
                for j in i..admitted.len() {
                    let t = (admitted[j].0 - admitted[i].0) as f64 / 1000.0;
                    let items = (j - i + 1) as f64;
                    let bytes: u64 = admitted[i..=j].iter().map(|a| a.1).sum();
                    prop_assert!(items <= ((t + lag) * rate).floor() + 1.0 + 1e-9,
                        "{items} items in {t} s at {rate}/s");
                    prop_assert!(bytes as f64 <= (t + lag) * byte_rate as f64 + max + 1.0,
                        "{bytes} bytes in {t} s at {byte_rate}/s");
                }
            }
        }
    }
}
